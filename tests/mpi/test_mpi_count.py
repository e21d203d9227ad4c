"""The PMPI byte counter (``dace_partition.runtime.mpi_count``): first the shim alone, under a real mpiexec with
mpi4py calls of known sizes (so a wrong model or a missed interposition shows up independently of the
lowering), then ``count_run`` end to end on a small lowered program."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dace
import dace_partition as dp
from dace_partition.runtime.launch import RunError, mpi_environment, mpiexec_command
from dace_partition.runtime.mpi_count import Counter, build_counter, count_run, parse_report, parse_seconds

# Each step resets the counters, makes one MPI call through mpi4py and reads the counters before any
# other counted call; the barrier between steps is not a counted function. All results are gathered
# only at the end, after the last read.
SCRIPT = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    from mpi4py import MPI

    lib = ctypes.CDLL(None)  # the preloaded shim
    for f in ("dp_pmpi_bytes", "dp_pmpi_sent", "dp_pmpi_calls"):
        getattr(lib, f).restype = ctypes.c_longlong
    lib.dp_pmpi_report.argtypes = [ctypes.c_char_p, ctypes.c_int]

    comm = MPI.COMM_WORLD
    r, p = comm.rank, comm.size
    steps = []

    def step(name, fn):
        comm.Barrier()
        lib.dp_pmpi_reset()
        fn()
        got = (lib.dp_pmpi_bytes(), lib.dp_pmpi_sent(), lib.dp_pmpi_calls())
        buf = ctypes.create_string_buffer(4096)
        lib.dp_pmpi_report(buf, 4096)
        steps.append([name, *got, buf.value.decode()])

    counts = [1, 2, 3, 4]
    send = np.arange(10, dtype=np.float64) if r == 0 else None
    step("scatterv", lambda: comm.Scatterv([send, counts, [0, 1, 3, 6], MPI.DOUBLE] if r == 0 else None,
                                           np.empty(counts[r]), root=0))
    step("bcast", lambda: comm.Bcast(np.full(10, r, dtype=np.int32), root=2))
    step("reduce", lambda: comm.Reduce(np.ones(6), np.empty(6) if r == 1 else None, op=MPI.SUM, root=1))
    step("allreduce", lambda: comm.Allreduce(np.ones(7, np.int8), np.empty(7, np.int8), op=MPI.SUM))
    inplace = np.ones(10)
    step("allreduce_in_place", lambda: comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM))
    # rank q sends q + 2 t + 1 int16 to rank t
    sc = [r + 2 * t + 1 for t in range(p)]
    rc = [q + 2 * r + 1 for q in range(p)]
    step("alltoallv", lambda: comm.Alltoallv([np.zeros(sum(sc), np.int16), sc, np.cumsum([0] + sc[:-1]), MPI.SHORT],
                                             [np.empty(sum(rc), np.int16), rc, np.cumsum([0] + rc[:-1]), MPI.SHORT]))
    # rank q sends q + 1 elements of INT (q even) or DOUBLE (q odd) to every rank
    T = lambda q: MPI.INT if q % 2 == 0 else MPI.DOUBLE
    sz = lambda q: T(q).Get_size()
    sbuf = np.zeros(p * (r + 1) * sz(r), np.uint8)
    rdis = np.cumsum([0] + [(q + 1) * sz(q) for q in range(p - 1)]).tolist()
    step("alltoallw", lambda: comm.Alltoallw(
        [sbuf, ([r + 1] * p, [t * (r + 1) * sz(r) for t in range(p)]), [T(r)] * p],
        [np.empty(sum((q + 1) * sz(q) for q in range(p)), np.uint8), ([q + 1 for q in range(p)], rdis),
         [T(q) for q in range(p)]]))
    gv = [q + 1 for q in range(p)]
    step("gatherv", lambda: comm.Gatherv(np.ones(r + 1, np.float32),
                                         [np.empty(sum(gv), np.float32), gv, np.cumsum([0] + gv[:-1]), MPI.FLOAT]
                                         if r == 3 else None, root=3))
    step("alltoall", lambda: comm.Alltoall(np.zeros(2 * p, np.int64), np.empty(2 * p, np.int64)))
    step("allgather", lambda: comm.Allgather(np.zeros(3, np.int32), np.empty(3 * p, np.int32)))
    step("reduce_scatter_block", lambda: comm.Reduce_scatter_block(np.ones(4 * p), np.empty(4), op=MPI.SUM))
    step("sendrecv_ring", lambda: comm.Sendrecv(np.ones(4), (r + 1) % p, 0, np.empty(4), (r - 1) % p, 0))
    step("sendrecv_proc_null", lambda: comm.Sendrecv(np.ones(4), MPI.PROC_NULL, 0, np.empty(4), MPI.PROC_NULL, 0))

    def point_to_point():
        if r == 0:
            comm.Send(np.ones(6, np.int32), dest=1, tag=5)
        elif r == 1:
            comm.Recv(np.empty(10, np.int32), source=0, tag=5)  # the whole buffer: an upper bound
    step("send_recv", point_to_point)

    sub = comm.Split(r % 2, r)  # {0, 2} and {1, 3}: p = 2, sub-rank 1 is world rank 2 or 3
    step("sub_bcast", lambda: sub.Bcast(np.zeros(5), root=0))
    step("sub_allreduce", lambda: sub.Allreduce(np.ones(8, np.int64), np.empty(8, np.int64), op=MPI.SUM))
    step("sub_allgather", lambda: sub.Allgather(np.zeros(3, np.int32), np.empty(6, np.int32)))
    sub.Free()

    allsteps = comm.gather(steps, root=0)
    if r == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(allsteps, f)
""")

# step: (function it must call, received bytes per world rank, sent bytes per world rank)
EXPECTED = {
    "scatterv": ("MPI_Scatterv", [0, 2 * 8, 3 * 8, 4 * 8], None),
    "bcast": ("MPI_Bcast", [40, 40, 0, 40], None),
    "reduce": ("MPI_Reduce", [0, 3 * 48, 0, 0], None),
    "allreduce": ("MPI_Allreduce", [10] * 4, None),  # 2 * 3 * 7 // 4: integer division
    "allreduce_in_place": ("MPI_Allreduce", [120] * 4, None),  # 2 * 3 * 80 / 4
    "alltoallv": ("MPI_Alltoallv", [(2 + 3 + 4) * 2, (3 + 5 + 6) * 2, (5 + 6 + 8) * 2, (7 + 8 + 9) * 2], None),
    # from q: (q + 1) elements of 4 B (q even) or 8 B (q odd): 4, 16, 12, 32 B, own block excluded
    "alltoallw": ("MPI_Alltoallw", [60, 48, 52, 32], None),
    "gatherv": ("MPI_Gatherv", [0, 0, 0, (1 + 2 + 3) * 4], None),
    "alltoall": ("MPI_Alltoall", [3 * 16] * 4, None),
    "allgather": ("MPI_Allgather", [3 * 12] * 4, None),
    "reduce_scatter_block": ("MPI_Reduce_scatter_block", [3 * 32] * 4, None),
    "sendrecv_ring": ("MPI_Sendrecv", [32] * 4, [32] * 4),
    "sendrecv_proc_null": ("MPI_Sendrecv", [0] * 4, [0] * 4),
    "send_recv": (None, [0, 40, 0, 0], [24, 0, 0, 0]),
    "sub_bcast": ("MPI_Bcast", [0, 0, 40, 40], None),
    "sub_allreduce": ("MPI_Allreduce", [64] * 4, None),  # 2 * 1 * 64 / 2
    "sub_allgather": ("MPI_Allgather", [12] * 4, None),
}

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpicc"))
                                and not __import__("shutil").which("mpicc"), reason="no mpicc")


@pytest.fixture(scope="module")
def shim():
    return build_counter()


def test_build_is_cached(shim):
    assert os.path.isfile(shim)
    mtime = os.path.getmtime(shim)
    assert build_counter() == shim and os.path.getmtime(shim) == mtime


def test_counter_refuses_without_preload():
    """Without LD_PRELOAD the wrappers are not in this process: silently reading zeros would be wrong."""
    with pytest.raises(RunError, match="not loaded"):
        Counter()


def test_parse_report():
    assert parse_report("MPI_Bcast 2 80 0\nMPI_Send 1 0 24\n") == {"MPI_Bcast": (2, 80), "MPI_Send": (1, 0)}


def test_parse_report_with_seconds():
    """The shim's lines carry the seconds inside each function as a fifth column; four-column lines (an
    older shim) still parse, and give no seconds."""
    text = "MPI_Bcast 2 80 0 0.000125000\nMPI_Send 1 0 24 0.5\nMPI_Recv 1 8 0\n"
    assert parse_report(text) == {"MPI_Bcast": (2, 80), "MPI_Send": (1, 0), "MPI_Recv": (1, 8)}
    assert parse_seconds(text) == {"MPI_Bcast": 0.000125, "MPI_Send": 0.5}


def test_shim_counts_mpi4py_calls_by_the_model(shim, tmp_path):
    script = tmp_path / "calls.py"
    script.write_text(SCRIPT)
    out = tmp_path / "steps.json"
    cmd = mpiexec_command(4) + ["env", f"LD_PRELOAD={shim}", sys.executable, "-m", "mpi4py", str(script), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=mpi_environment())
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads(out.read_text())
    assert len(ranks) == 4
    names = [s[0] for s in ranks[0]]
    assert names == list(EXPECTED)
    for i, name in enumerate(names):
        func, received, sent = EXPECTED[name]
        got = [ranks[r][i][1] for r in range(4)]
        assert got == received, f"{name}: received {got}, expected {received}"
        if sent is not None:
            assert [ranks[r][i][2] for r in range(4)] == sent, name
        for r in range(4):
            report = parse_report(ranks[r][i][4])
            if func is not None:
                # exactly one counted call, of the right function, carrying all the bytes
                assert report == {func: (1, received[r])}, (name, r, report)
                assert ranks[r][i][3] == 1
    p2p = [parse_report(ranks[r][names.index("send_recv")][4]) for r in range(4)]
    assert p2p[0] == {"MPI_Send": (1, 0)} and p2p[1] == {"MPI_Recv": (1, 40)} and p2p[2] == p2p[3] == {}


@dace.program
def add5(x: dace.int64[64]):
    return x + 5


def test_count_run_add5():
    sdfg = add5.to_sdfg()
    sdfg.name = "t_count_add5"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (4,)})
    x = np.arange(64, dtype=np.int64)
    res = count_run(sdfg, 4, x=x)
    np.testing.assert_array_equal(res["outputs"], x + 5)
    # rank 0 scatters 16 int64 to each other rank and gathers them back; nothing else moves
    assert res["bytes"] == [3 * 128, 128, 128, 128]
    assert res["sent"] == [0] * 4
    assert [c.get("MPI_Scatterv") for c in res["calls"]] == [(1, 0)] + [(1, 128)] * 3
    assert [c.get("MPI_Gatherv") for c in res["calls"]] == [(1, 3 * 128)] + [(1, 0)] * 3
    # the launcher's own mpi4py traffic (metadata bcast, gathering the counters) is not counted
    assert all("MPI_Bcast" not in c for c in res["calls"])


def test_count_run_times_the_mpi_calls():
    """Each rank's wall seconds inside the wrapped calls, next to the bytes: positive where the program calls
    MPI, the sum of the per-function seconds, and with ``repeat`` one entry per call of the program."""
    sdfg = add5.to_sdfg()
    sdfg.name = "t_count_add5_time"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (4,)})
    x = np.arange(64, dtype=np.int64)
    res = count_run(sdfg, 4, repeat=3, x=x)
    assert res["bytes"] == [3 * 128, 128, 128, 128]  # the first call's counts, as without repeat
    assert len(res["mpi_seconds"]) == 4 and all(0 < t < 60 for t in res["mpi_seconds"])
    assert res["wait_seconds"] == [0.0] * 4  # Scatterv and Gatherv only: no MPI_Wait*
    for r in range(4):
        assert set(res["seconds_by_call"][r]) == set(res["calls"][r]) == {"MPI_Scatterv", "MPI_Gatherv"}
        assert sum(res["seconds_by_call"][r].values()) == pytest.approx(res["mpi_seconds"][r], abs=1e-6)
    assert len(res["per_call"]) == 3
    for call in res["per_call"]:
        assert call["bytes"] == res["bytes"] and all(t > 0 for t in call["mpi_seconds"])
    assert res["sync_seconds"] == [0.0] * 4  # no barrier unless asked for

    # sync=True: a barrier before each collective, timed apart; the same bytes and outputs
    synced = count_run(sdfg, 4, repeat=2, sync=True, x=x)
    np.testing.assert_array_equal(synced["outputs"], x + 5)
    assert synced["bytes"] == res["bytes"] and synced["calls"] == res["calls"]
    for call in synced["per_call"]:
        assert all(t > 0 for t in call["sync_seconds"]) and all(t > 0 for t in call["mpi_seconds"])


def test_count_run_distributed_io_moves_nothing():
    """With io="distributed" each rank passes its own tile: the program itself calls no counted MPI
    function, while the worker around it checks inputs (allgather) and joins the tiles (gather) through
    the same wrappers, so any leak of the launcher's traffic into the counts shows up here."""
    sdfg = add5.to_sdfg()
    sdfg.name = "t_count_add5_dio"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (4,)}, io="distributed")
    x = np.arange(64, dtype=np.int64)
    res = count_run(sdfg, 4, x=x)
    np.testing.assert_array_equal(res["outputs"], x + 5)
    assert res["bytes"] == [0] * 4 and res["sent"] == [0] * 4
    assert res["calls"] == [{}] * 4


@dace.program
def rowsum(A: dace.float64[8, 32], out: dace.float64[8]):
    for i, j in dace.map[0:8, 0:32]:
        out[i] += A[i, j]


def test_count_run_rowsum_on_sub_communicators():
    """A (2, 2) grid: the calls from the DaCe library run on Cartesian sub-communicators, and the shim
    must take p and the root's rank from the communicator each call names."""
    sdfg = rowsum.to_sdfg()
    sdfg.name = "t_count_rowsum"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, 2)})
    A = np.random.default_rng(7).random((8, 32))
    res = count_run(sdfg, 4, A=A, out=np.zeros(8))
    np.testing.assert_allclose(res["outputs"]["out"], A.sum(axis=1))
    # A: a 4x16 float64 block (512 B) to each of ranks 1..3. out: a 4-element block (32 B) along grid
    # dim 0 only ({0, 2}), so rank 2 gets it. Partial sums: MPI_Reduce along dim 1 ({0, 1}, {2, 3}),
    # roots 0 and 2 receive 32 B; then MPI_Gatherv along dim 0 ({0, 2}), root 0 receives 32 B.
    assert res["bytes"] == [32 + 32, 512, 512 + 32 + 32, 512]
    assert [c.get("MPI_Reduce") for c in res["calls"]] == [(1, 32), (1, 0), (1, 32), (1, 0)]
    assert [c.get("MPI_Gatherv") for c in res["calls"]] == [(1, 32), None, (1, 0), None]
