"""The ``hierarchical`` solver: P^2 reduction programs for ALLREDUCE moves when the machine hierarchy
is known at lowering time (``DACE_PARTITION_HIERARCHY``; the Slurm case is in test_hierarchy_detect.py),
the flat ``MPI_Allreduce`` otherwise.

Pure-Python tests check refusals and costs on hand-built Moves; the MPI tests lower the Megatron MLP
with simulated hierarchies (2x2 on 4 ranks, 2x4 on 8 oversubscribed ranks), run it under mpiexec with
the PMPI byte counter and compare with NumPy and with the flat lowering."""
import dace
import numpy as np
import pytest
from dace import subsets

import dace_partition as dp
import programs as P
from conftest import lowered, run_counted
from dace_partition.ir import Distribution, Move, MoveKind
from dace_partition.solvers import registry
from dace_partition.solvers.allreduce import AllreduceSolver
from dace_partition.solvers.hierarchical import HierarchicalSolver, plan_move
from dace_partition.solvers.reduction import ENV_VAR
from dace_partition.solvers.reduction.slurm import NODES_VARS, TASKS_VAR

MEGATRON = (("_MatMult_.gemm_map", (1, 4, 1)), ("_Add__map", (1, 4)), ("_numpy_maximum__map", (1, 4)),
            ("_MatMult_.gemm_map_1", (1, 1, 4)), ("_Add__map_1", dp.replicate((1, 1), 4)))


def no_hierarchy(monkeypatch):
    """Neither the variable nor a Slurm allocation: the hierarchy is unknown at lowering time."""
    for v in (ENV_VAR, TASKS_VAR) + NODES_VARS:
        monkeypatch.delenv(v, raising=False)


def partial_move(n, ranks, itemsize=8):
    """x[0:n] summed over a grid (1, ranks) whose second dimension holds partial results."""
    r = dace.symbolic.symbol("__dp0_r0", dace.int32)
    src = Distribution.on_grid(subsets.Range([(0 * r, n - 1, 1)]), (1, ranks), ("__dp0_r0", None), 0, "sum")
    return Move("x", src, src.combined().on(1), (n, ), itemsize)


def test_refuses_without_the_setting_and_the_flat_solver_serves(monkeypatch):
    no_hierarchy(monkeypatch)
    m = partial_move(64, 4)
    assert m.kind == MoveKind.ALLREDUCE
    solver, refused = registry.choose(m, registry.resolve_solvers(None))
    assert solver.name == "allreduce"
    assert f"{ENV_VAR} is not set" in dict(refused)["hierarchical"]


def test_refusals_name_the_reason(monkeypatch):
    s = HierarchicalSolver()
    monkeypatch.setenv(ENV_VAR, "1x4")  # one node: only AllReduce-equivalent programs
    assert "predicts the flat MPI_Allreduce best" in s.refuse(partial_move(64, 4))
    monkeypatch.setenv(ENV_VAR, "4x2")  # two levels, but at 32 KiB the model predicts a tie: flat kept
    assert "predicts the flat MPI_Allreduce best" in s.refuse(partial_move(4096, 8))
    assert s.refuse(partial_move(1 << 17, 8)) is None  # 1 MiB: the hierarchical program wins
    monkeypatch.setenv(ENV_VAR, "2x4")
    assert "has 4 ranks" in s.refuse(partial_move(64, 4)) and "describes 8" in s.refuse(partial_move(64, 4))
    monkeypatch.setenv(ENV_VAR, "2x2")
    assert "do not split into 4 equal chunks" in s.refuse(partial_move(66, 4))
    monkeypatch.setenv(ENV_VAR, "2xq")
    with pytest.raises(ValueError, match=ENV_VAR):
        s.refuse(partial_move(64, 4))


def test_cost_is_the_counted_bytes_of_the_chosen_program(monkeypatch):
    """2x2, 64 B per rank: AllReduce inside each node, then across (each 2 ranks): 64 B + 64 B per rank,
    where the flat 4-rank MPI_Allreduce is counted as 2 * 3/4 * 64 = 96 B."""
    monkeypatch.setenv(ENV_VAR, "2x2")
    m, s = partial_move(8, 4), HierarchicalSolver()
    assert s.refuse(m) is None
    c = s.cost(m)
    assert c.per_rank == (128, ) * 4 and AllreduceSolver().cost(m).per_rank == (96, ) * 4
    assert c.calls[0].startswith("hierarchical 2x2: (node, InsideGroup, AllReduce) ; (node, Parallel(root), AllReduce)")
    assert "vs flat MPI_Allreduce" in c.calls[0]
    assert c.calls[1:] == ("MPI_Allreduce(MPI_SUM, 2 groups of 2)", ) * 2


def test_cost_of_reduce_scatter_allreduce_allgather(monkeypatch):
    """2x4, 4096 doubles per rank in 8 chunks c: ReduceScatter in the node (3 x 2c received), AllReduce
    of the 2 chunks across (2c), AllGather in the node (3 x 2c): 14c."""
    monkeypatch.setenv(ENV_VAR, "2x4")
    m = partial_move(4096, 8)
    plan, why = plan_move(m, "2x4")
    assert why is None
    assert [st.collective.value for st in plan.steps] == ["ReduceScatter", "AllReduce", "AllGather"]
    c = 4096 // 8 * 8
    assert HierarchicalSolver().cost(m).per_rank == (14 * c, ) * 8
    # every rank is in exactly one group of every step, and gets back all 8 chunks at the end
    for ranks in plan.ranks:
        assert all(rs.colour >= 0 for rs in ranks)
    assert all(sorted(rs.unpack) == list(range(8)) for rs in plan.ranks[-1])


def test_the_build_emits_the_program_recorded_at_lowering(monkeypatch):
    """The choice travels on the move's node (``DistributedMemlet.decision``), not in module state: code
    generated after the setting changed, or without it, is the program the lowering priced."""
    no_hierarchy(monkeypatch)
    s, m = HierarchicalSolver(), partial_move(1 << 17, 8)  # 1 MiB: both 2x4 and 4x2 take it
    buf = dace.data.Array(dace.float64, [1 << 17])
    monkeypatch.setenv(ENV_VAR, "2x4")
    decided = s.decision(m)
    code = s.emit_decided(m, decided, buf, buf)
    assert code == s.emit(m, buf, buf) and '"2x4"' in code
    monkeypatch.setenv(ENV_VAR, "4x2")  # another hierarchy that also accepts the move: another program
    assert s.refuse(m) is None and s.emit(m, buf, buf) != code
    assert s.emit_decided(m, decided, buf, buf) == code
    monkeypatch.delenv(ENV_VAR)  # no setting at build time: the solver refuses, the recorded program stays
    assert s.decision(m) == "" and s.emit_decided(m, decided, buf, buf) == code
    with pytest.raises(ValueError, match="refuses"):
        s.emit(m, buf, buf)


# ---- under mpiexec ----------------------------------------------------------------------------------


def mlp_inputs(rng, x=(16, 8), w1=(8, 12), w2=(12, 4)):
    return dict(x=rng.standard_normal(x), w1=rng.standard_normal(w1), b1=rng.standard_normal(w1[1]),
                w2=rng.standard_normal(w2), b2=rng.standard_normal(w2[1]))


def reference(a):
    return np.maximum(a["x"] @ a["w1"] + a["b1"], 0.0) @ a["w2"] + a["b2"]


def reduction_entry(sdfg):
    (red, ) = [e for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"]
    return red


def test_megatron_mlp_2x2_matches_flat_and_numpy(rng, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    no_hierarchy(monkeypatch)
    flat = lowered(P.mlp, MEGATRON)
    assert reduction_entry(flat).solver == "allreduce"
    monkeypatch.setenv(ENV_VAR, "2x2")
    hier = lowered(P.mlp, MEGATRON, tag="_h2x2")
    red = reduction_entry(hier)
    assert red.solver == "hierarchical" and "hierarchical 2x2" in red.calls[0]
    assert red.bytes == 4 * 1024  # 2 x (2(2-1)/2 x 512 B) per rank, not the flat 4 x 768 B
    a = mlp_inputs(rng)
    out_h = run_counted(hier, 4, **a)
    monkeypatch.delenv(ENV_VAR)
    out_f = run_counted(flat, 4, **a)
    np.testing.assert_allclose(out_h, reference(a), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out_h, out_f, rtol=1e-13, atol=1e-13)


@dace.program
def mlp_wide(x: dace.float64[64, 16], w1: dace.float64[16, 32], b1: dace.float64[32], w2: dace.float64[32, 64],
             b2: dace.float64[64]):
    h = np.maximum(x @ w1 + b1, 0.0)
    return h @ w2 + b2


@pytest.mark.slow  # 8 oversubscribed ranks, two builds; the 2x2 case runs by default
def test_megatron_mlp_2x4_reduce_scatter_allreduce_allgather(rng, monkeypatch):
    """8 ranks (oversubscribed), 32 KiB of partial sums per rank: ReduceScatter / AllReduce / AllGather."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    no_hierarchy(monkeypatch)
    monkeypatch.setenv(ENV_VAR, "2x4")
    sched = tuple((k, dp.replicate((1, 1), 8) if k == "_Add__map_1" else tuple(8 if g == 4 else g for g in grid))
                  for k, grid in MEGATRON)
    hier = lowered(mlp_wide, sched, tag="_h2x4")
    red = reduction_entry(hier)
    assert red.solver == "hierarchical"
    assert "(node, InsideGroup, ReduceScatter) ; (node, Parallel(root), AllReduce) ; (node, InsideGroup, AllGather)" \
        in red.calls[0]
    a = mlp_inputs(rng, (64, 16), (16, 32), (32, 64))
    out_h = run_counted(hier, 8, **a)
    np.testing.assert_allclose(out_h, reference(a), rtol=1e-12, atol=1e-12)
    monkeypatch.delenv(ENV_VAR)
    flat = lowered(mlp_wide, sched)
    assert reduction_entry(flat).solver == "allreduce"
    np.testing.assert_allclose(out_h, run_counted(flat, 8, **a), rtol=1e-13, atol=1e-13)


# ---- every program through the C++ executor, under the PMPI counter ------------------------------------


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    """tests/cpp/hierarchical_all.cpp built once with the environment's mpicxx."""
    import os
    import subprocess
    import sys
    from dace_partition.runtime.launch import mpi_environment
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    include = os.path.join(os.path.dirname(here), "dace_partition", "runtime", "include")
    exe = str(tmp_path_factory.mktemp("hier") / "hierarchical_all")
    mpicxx = os.path.join(os.path.dirname(sys.executable), "mpicxx")
    build = subprocess.run([mpicxx if os.path.exists(mpicxx) else "mpicxx", "-std=c++17", "-O1", "-Wall",
                            f"-I{include}", os.path.join(here, "cpp", "hierarchical_all.cpp"), "-o", exe, "-ldl"],
                           capture_output=True, text=True, timeout=300, env=mpi_environment())
    assert build.returncode == 0, build.stderr[-3000:]
    return exe


def run_executor(exe, ranks, cases_file, hierarchy):
    import subprocess
    from dace_partition.runtime.launch import mpi_environment, mpiexec_command
    from dace_partition.runtime.mpi_count import build_counter
    env = mpi_environment()
    env["OMP_NUM_THREADS"] = "1"
    if hierarchy is None:
        env.pop(ENV_VAR, None)
    else:
        env[ENV_VAR] = hierarchy
    cmd = mpiexec_command(ranks) + ["env", f"LD_PRELOAD={build_counter()}", exe, str(cases_file)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def write_cases(path, hierarchy, chunk):
    """Every synthesized program of grid (1, P) reduced over its second dimension: its table and the
    bytes per rank its cost predicts (int64 elements)."""
    from dace_partition.solvers.hierarchical import build_plan
    from dace_partition.solvers.reduction import ReductionChoice, SystemHierarchy, placement_from_grid, programs_for
    h = SystemHierarchy.parse(hierarchy)
    p = placement_from_grid(h, (1, h.num_devices), (1, ))
    count = chunk * p.group_size
    progs = programs_for(p)
    plans = [build_plan(hierarchy, ReductionChoice(p, count * 8, prog, 0.0, 0.0, len(progs)), count)
             for prog in progs]
    lines = [f"{hierarchy} {len(plans)} {h.num_devices}"]
    for plan in plans:
        t = plan.table()
        lines.append(" ".join(map(str, [count, chunk, len(t), *t, *plan.bytes_per_rank(8)])))
    path.write_text("\n".join(lines) + "\n")
    return plans


@pytest.mark.parametrize("hierarchy,chunk", [("2x2", 3), ("2x4", 2), ("4x2", 1)])
def test_every_program_sums_exactly_and_moves_the_predicted_bytes(executor, tmp_path, hierarchy, chunk):
    """All 122 programs of a two-level hierarchy, twice each (the second call reuses the
    sub-communicators): every element is the exact int64 sum and every rank's counted bytes equal
    ``bytes_per_rank``."""
    f = tmp_path / "cases.txt"
    plans = write_cases(f, hierarchy, chunk)
    assert len(plans) == 122
    ranks = plans[0].choice.placement.hierarchy.num_devices
    proc = run_executor(executor, ranks, f, hierarchy)
    assert proc.returncode == 0 and "HIERARCHICAL OK 122 counted" in proc.stdout, \
        proc.stdout[-3000:] + proc.stderr[-3000:]


def test_a_program_run_under_another_hierarchy_stops_or_warns(executor, tmp_path):
    f = tmp_path / "cases.txt"
    write_cases(f, "2x2", 1)
    proc = run_executor(executor, 4, f, "4x1")
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "lowered for DACE_PARTITION_HIERARCHY=2x2 but runs with DACE_PARTITION_HIERARCHY=4x1" in proc.stderr, \
        proc.stderr[-2000:]
    # without the setting at run time the plan runs as lowered, with the same bytes (the detection is
    # set-up only), and grid rank 0 warns once that shared memory finds one node of 4 ranks, not 2x2
    proc = run_executor(executor, 4, f, None)
    assert proc.returncode == 0 and "HIERARCHICAL OK 122 counted" in proc.stdout, proc.stderr[-2000:]
    warnings = [ln for ln in proc.stderr.splitlines() if "warning" in ln]
    assert warnings == [(
        "dace_partition: warning: the reductions of this program were lowered for the hierarchy 2x2 (2 nodes of 2 "
        "ranks, node-major), but MPI_COMM_TYPE_SHARED finds 4 grid ranks on 1 node of 4 ranks; the results do not "
        "change, the grouping may be slower; lower again with DACE_PARTITION_HIERARCHY=1x4 (set "
        "DACE_PARTITION_HIERARCHY at run time to silence this check)")], proc.stderr[-2000:]
    # lowered for what the machine is (one node of 4): no warning
    plans = write_cases(f, "1x4", 1)
    proc = run_executor(executor, 4, f, None)
    assert proc.returncode == 0 and f"HIERARCHICAL OK {len(plans)} counted" in proc.stdout, proc.stderr[-2000:]
    assert "warning" not in proc.stderr, proc.stderr[-2000:]
