"""Several nodes: the emulated cluster of ``tools/cluster-local`` (issue 34), where every node is a network
and UTS namespace on this machine with its own slurmd, hostname and address on a bridge.

Under ``srun -N 4 -n 8`` two ranks run on each emulated node; MPICH keeps the messages inside a node in
shared memory and sends those between nodes over TCP (checked with the bridge's byte counters), and
``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` finds the 4 nodes. On it run a distributed program and a
hierarchical reduction lowered for the hierarchy of the Slurm allocation (4 nodes x 2 ranks).

Without the cluster these tests skip, unless ``DACE_PARTITION_REQUIRE`` names ``cluster`` (``make
test-cluster`` sets it): then an absent cluster is a failure."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import ROOT, lowered
from dace_partition.runtime.launch import mpi_environment

CLUSTER_DIR = os.environ.get("DP_CLUSTER_DIR", "/tmp/dp-cluster")
CONF = os.path.join(CLUSTER_DIR, "slurm.conf")
NODES, PER_NODE = 4, 2
RANKS = NODES * PER_NODE
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOCATION_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_ID", "SLURM_NNODES",
                   "SLURM_JOB_NUM_NODES", "SLURM_TASKS_PER_NODE", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
                   "DACE_PARTITION_HIERARCHY")


def required() -> bool:
    return "cluster" in os.environ.get("DACE_PARTITION_REQUIRE", "").replace(",", " ").split()


def skip_or_fail(reason: str):
    if required():
        pytest.fail(f"DACE_PARTITION_REQUIRE={os.environ['DACE_PARTITION_REQUIRE']}, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster_env():
    """The environment under which srun reaches the emulated cluster (outside any allocation); skips (or
    fails) unless it is up with at least 4 idle nodes."""
    if not os.path.exists(CONF):
        skip_or_fail(f"no emulated cluster ({CONF} missing: tools/cluster-local start, or make test-cluster)")
    env = mpi_environment(dict(os.environ, SLURM_CONF=CONF))
    for k in ALLOCATION_VARS:
        env.pop(k, None)  # a new allocation of the emulated cluster, not a step of one this test may run in
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        skip_or_fail(f"sinfo does not run: {e}")
    up = {l.split()[0] for l in proc.stdout.splitlines()
          if len(l.split()) == 2 and l.split()[1] in ("idle", "mixed", "allocated", "completing")}
    if proc.returncode != 0 or len(up) < NODES:
        skip_or_fail(f"the emulated cluster has not {NODES} nodes up: {proc.stdout.strip()} {proc.stderr.strip()}")
    return env


@pytest.fixture
def on_cluster(cluster_env, monkeypatch):
    """dp.run in this process reaches the emulated cluster with srun."""
    for k in ALLOCATION_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_CONF", CONF)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return cluster_env


# --- raw MPI: placement, shared memory inside a node, TCP between nodes ----------------------------------

PLACEMENT = """
import json, socket, sys
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
node = c.Split_type(MPI.COMM_TYPE_SHARED, key=c.rank)
rows = c.gather((c.rank, socket.gethostname(), node.size, node.rank), root=0)
# 16 MiB from rank 0 to the peer named on the command line, then everyone checks it
peer = int(sys.argv[1])
a = np.arange(1 << 21, dtype=np.float64) if c.rank == 0 else np.zeros(1 << 21)
if c.rank == 0:
    c.Send(a, dest=peer)
elif c.rank == peer:
    c.Recv(a, source=0)
    assert np.array_equal(a, np.arange(1 << 21, dtype=np.float64))
total = c.allreduce(c.rank)
if c.rank == 0:
    print("PLACEMENT " + json.dumps({"rows": rows, "size": c.size, "total": total}), flush=True)
"""


def bridge_bytes():
    """Bytes through the host ends of the emulated nodes' veths (tools/cluster-local names them dpv<i>)."""
    total = 0
    for dev in sorted(os.listdir("/sys/class/net")):
        if dev.startswith("dpv"):
            for d in ("rx_bytes", "tx_bytes"):
                with open(f"/sys/class/net/{dev}/statistics/{d}") as f:
                    total += int(f.read())
    return total


def srun_placement(env, script, peer):
    before = bridge_bytes()
    proc = subprocess.run(["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "-N", str(NODES), "-n", str(RANKS),
                           sys.executable, "-m", "mpi4py", script, str(peer)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    moved = bridge_bytes() - before
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    (line, ) = [l for l in proc.stdout.splitlines() if l.startswith("PLACEMENT ")]
    return json.loads(line[len("PLACEMENT "):]), moved


def test_two_ranks_per_node_share_memory_and_talk_tcp_between_nodes(cluster_env, tmp_path):
    script = tmp_path / "placement.py"
    script.write_text(PLACEMENT)
    # rank 1 is on rank 0's node: 16 MiB through shared memory, next to nothing on the bridge
    res, local = srun_placement(cluster_env, str(script), 1)
    assert res["size"] == RANKS and res["total"] == RANKS * (RANKS - 1) // 2
    hosts = {}
    for rank, host, shared, local_rank in res["rows"]:
        hosts.setdefault(host, []).append(rank)
        assert shared == PER_NODE, f"rank {rank} on {host}: MPI_COMM_TYPE_SHARED has {shared} ranks\n{res}"
    assert len(hosts) == NODES and all(len(r) == PER_NODE for r in hosts.values()), res
    assert all(h.startswith("dpn") for h in hosts), hosts  # the emulated nodes' own hostnames
    assert sorted(hosts[res["rows"][0][1]]) == [0, 1], res  # block placement: ranks 0 and 1 share node 1
    assert local < 4 << 20, f"{local} B crossed the bridge for a message inside a node"
    # rank 2 is on another node: the 16 MiB cross the bridge (TCP), not shared memory between the nodes
    _, remote = srun_placement(cluster_env, str(script), 2)
    assert remote > 16 << 20, f"only {remote} B crossed the bridge for 16 MiB sent to another node"


def test_calibrate_measures_the_link_inside_a_node_and_between_nodes(on_cluster):
    """The two ping-pongs dp.calibrate(launcher=..., across_nodes=...) runs: two ranks on one emulated
    node (shared memory) and on two (TCP over the bridge); the second has the larger latency, and the
    machine built from them prices a byte from another node above one from the same node."""
    from dace_partition.search.machine import Machine, measure_link
    inside = measure_link(["srun", "-N", "1"])
    across = measure_link(["srun", "-N", "2", "--ntasks-per-node=1"])
    assert all(x > 0 for x in inside + across), (inside, across)
    assert across[0] > inside[0], f"latency between nodes {across[0]:.2e} s <= inside a node {inside[0]:.2e} s"
    m = Machine(alpha=inside[0], beta=inside[1], node_alpha=across[0], node_beta=across[1], ranks_per_node=PER_NODE)
    assert m.message_time(1, 1 << 20, 1, 1 << 20) > m.message_time(1, 1 << 20)
    print(f"inside a node: alpha {inside[0] * 1e6:.1f} us, {1 / inside[1] / 1e9:.2f} GB/s; between nodes: "
          f"alpha {across[0] * 1e6:.1f} us, {1 / across[1] / 1e9:.2f} GB/s")


# --- a distributed program on 4 nodes ------------------------------------------------------------------

def test_add5_on_four_nodes(rng, on_cluster):
    sdfg = lowered(P.add5, ((0, (RANKS, )), ))
    x = rng.integers(0, 100, 64)
    out = dp.run(sdfg, RANKS, launcher=["srun", "-N", str(NODES), f"--ntasks-per-node={PER_NODE}"], x=x)
    np.testing.assert_array_equal(out, x + 5)


def test_synthesized_redistribution_on_two_nodes(rng, on_cluster):
    """Point-to-point traffic of a synthesized plan between grids, its ranks on 2 nodes of 2."""
    sdfg = lowered(P.matmul_chain, (("_MatMult_.gemm_map", (2, 2, 1)), ("_MatMult_.gemm_map_1", (4, 1, 1))))
    a, b, d = rng.standard_normal((24, 16)), rng.standard_normal((16, 20)), rng.standard_normal((20, 12))
    out = dp.run(sdfg, 4, launcher=["srun", "-N", "2", f"--ntasks-per-node={PER_NODE}"], a=a, b=b, d=d)
    np.testing.assert_allclose(out, (a @ b) @ d, rtol=1e-11, atol=1e-11)


# --- a hierarchical reduction lowered for the allocation's hierarchy ------------------------------------

HIERARCHICAL = """
import json, os, sys
sys.path.insert(0, {tests!r})
import dace
import numpy as np
import dace_partition as dp

@dace.program
def mlp_c(x: dace.float64[16, 16], w1: dace.float64[16, 32], b1: dace.float64[32], w2: dace.float64[32, 16],
          b2: dace.float64[16]):
    h = np.maximum(x @ w1 + b1, 0.0)
    return h @ w2 + b2

R = {ranks}
# Megatron: the first layer's columns and the second's rows over 8 ranks, partial sums reduced over all
schedule = {{"_MatMult_.gemm_map": (1, R, 1), "_Add__map": (1, R), "_numpy_maximum__map": (1, R),
            "_MatMult_.gemm_map_1": (1, 1, R), "_Add__map_1": dp.replicate((1, 1), R)}}
sdfg = mlp_c.to_sdfg()
sdfg.name = "t_cluster_mlp_hier"
dp.lower(sdfg, schedule)  # no DACE_PARTITION_HIERARCHY: the hierarchy comes from salloc's environment
(red, ) = [e for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"]
print("REDUCTION " + json.dumps({{"solver": red.solver, "calls": list(red.calls),
                                  "nodes": os.environ.get("SLURM_JOB_NUM_NODES"),
                                  "tasks": os.environ.get("SLURM_TASKS_PER_NODE")}}), flush=True)
rng = np.random.default_rng(7)
a = dict(x=rng.standard_normal((16, 16)), w1=rng.standard_normal((16, 32)), b1=rng.standard_normal(32),
         w2=rng.standard_normal((32, 16)), b2=rng.standard_normal(16))
print("=== RUN allocation", file=sys.stderr, flush=True)
out = dp.run(sdfg, R, **a)  # srun inside the allocation: 2 ranks on each of the 4 nodes
# the same program on 2 nodes of 4 ranks (overcommitted): the run-time check must see the other nodes
print("=== RUN two-nodes", file=sys.stderr, flush=True)
out2 = dp.run(sdfg, R, launcher=["srun", "-N", "2", "--overcommit"], **a)
np.savez({out!r}, out=out, out2=out2, **a)
"""


def test_hierarchical_reduction_for_the_allocation(on_cluster, tmp_path):
    """Lowered inside ``salloc -N 4 -n 8`` (SLURM_JOB_NUM_NODES=4, SLURM_TASKS_PER_NODE=2(x4)): the
    hierarchical solver picks its P^2 program for 4x2, which runs on the 4 nodes without a warning, its
    groups' nodes being those MPI_COMM_TYPE_SHARED finds; the result is NumPy's."""
    script = tmp_path / "hier.py"
    out = tmp_path / "out.npz"
    script.write_text(HIERARCHICAL.format(tests=TESTS, ranks=RANKS, out=str(out)))
    proc = subprocess.run(["salloc", "-N", str(NODES), "-n", str(RANKS), sys.executable, str(script)],
                          capture_output=True, text=True, timeout=600, env=on_cluster, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (line, ) = [l for l in proc.stdout.splitlines() if l.startswith("REDUCTION ")]
    red = json.loads(line[len("REDUCTION "):])
    assert (red["nodes"], red["tasks"]) == (str(NODES), f"{PER_NODE}(x{NODES})"), red
    assert red["solver"] == "hierarchical", red
    call = red["calls"][0]
    assert call.startswith(f"hierarchical {NODES}x{PER_NODE}: (node, InsideGroup, AllReduce) ; "
                           "(node, Parallel(root), AllReduce)"), call
    assert f"hierarchy from the Slurm allocation (SLURM_JOB_NUM_NODES={NODES}, SLURM_TASKS_PER_NODE=" \
           f"{PER_NODE}(x{NODES}))" in call, call
    err = proc.stderr
    on_alloc = err[err.index("=== RUN allocation"):err.index("=== RUN two-nodes")]
    on_two = err[err.index("=== RUN two-nodes"):]
    assert "dace_partition: warning" not in on_alloc, on_alloc
    assert (f"lowered for the hierarchy {NODES}x{PER_NODE}" in on_two
            and f"MPI_COMM_TYPE_SHARED finds {RANKS} grid ranks on 2 nodes of {RANKS // 2} ranks" in on_two), on_two
    res = np.load(out)
    ref = np.maximum(res["x"] @ res["w1"] + res["b1"], 0.0) @ res["w2"] + res["b2"]
    np.testing.assert_allclose(res["out"], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["out2"], ref, rtol=1e-12, atol=1e-12)
