"""``lower`` plans once and applies the plan with one DaCe Pipeline (pure Python: nothing is compiled).

The plan is made before any rewrite and changes nothing; the pipeline's passes run in the order their
dependencies declare, with the options of ``lower`` choosing which passes are in it; the report's kernel
lines come from the plan.
"""
import dace
import pytest

import dace_partition as dp
import programs
from dace_partition.ir import Device, IoMode, MoveKind, layouts_of
from dace_partition.passes import partition as partition_module
from dace_partition.passes import pipeline as pipeline_module
from dace_partition.passes.partition import plan_report, prepare_kernels
from dace_partition.passes.pipeline import LoweringOptions, lowering_pipeline
from dace_partition.plan import FusionKind, plan_lowering
from dace_partition.plan.carry import Drop, GatherAfter, Made, Reroute, ScatterBefore
from dace_partition.plan.fusion import Site
from dace_partition.schedule.loops import find_loops
from dace_partition.solvers.node import DistributedMemlet
from dace_partition.schedule import discover, normalise, resolve
from dace_partition.solvers.registry import resolve_solvers
from conformance.programs import CASES

N = dace.symbol("N")


@dace.program
def scaled_then_summed(x: dace.float64[N], y: dace.float64[N], out: dace.float64[N]):
    t = 2.0 * x
    out[:] = t + y


@dace.program
def gemm_chain(A: dace.float64[N, N], B: dace.float64[N, N], C: dace.float64[N, N]):
    C[:] = A @ B + 1.0


def _pass_names(options: LoweringOptions, program=scaled_then_summed):
    sdfg = program.to_sdfg()
    grids = resolve(discover(normalise(sdfg)), {m.name: (2, ) * len(m.params) for m in dp.maps(sdfg)})
    kernels, expanded = prepare_kernels(sdfg, grids)
    plan = plan_lowering(sdfg, kernels, grids, options.solvers, expanded)
    rep, _ = plan_report(sdfg.name, plan)
    return [type(p).__name__ for p in lowering_pipeline(plan, options, rep).iterate_over_passes(sdfg)]


SOLVERS = tuple(resolve_solvers(None))


@pytest.mark.parametrize("options, gpu_blas, expected", [
    (LoweringOptions(SOLVERS), "pure",
     ["PartitionKernels", "FuseRoundTrips", "FuseLoops", "BroadcastBranchData", "GuardRankZeroCode", "StartGrids",
      "CheckMoves", "ContractionsToBlas", "SingleThreaded"]),
    (LoweringOptions(SOLVERS, fuse=False, io=IoMode.DISTRIBUTED, contractions=False, single_threaded=False), "auto",
     ["PartitionKernels", "LocalizeArguments", "BroadcastBranchData", "GuardRankZeroCode", "StartGrids",
      "CheckMoves"]),
    (LoweringOptions(SOLVERS, device=Device.GPU), "cublas",
     ["PartitionKernels", "FuseRoundTrips", "FuseLoops", "BroadcastBranchData", "GuardRankZeroCode",
      "ContractionsToBlas", "OffloadToGpu", "StartGrids", "CheckMoves"]),
    (LoweringOptions(SOLVERS, device=Device.GPU), "pure",
     ["PartitionKernels", "FuseRoundTrips", "FuseLoops", "BroadcastBranchData", "GuardRankZeroCode",
      "OffloadToGpu", "StartGrids", "CheckMoves"]),
], ids=["cpu", "cpu-distributed-unfused", "gpu-cublas", "gpu-without-cublas"])
def test_the_pipeline_holds_the_passes_the_options_ask_for_in_dependency_order(options, gpu_blas, expected,
                                                                               monkeypatch):
    """On a GPU the contractions become GEMMs before the kernels move to the GPU, where cuBLAS is (without
    it a GEMM is DaCe's pure GPU maps, and packing its operands would only add copies); on a CPU after
    everything else that rewrites the program; a GPU lowering is never single-threaded by the CPU pass."""
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", gpu_blas)
    assert _pass_names(options) == expected


@pytest.mark.parametrize("name, P, io", [("gemver", 2, "root"), ("jacobi2d_time", 2, "root"), ("gemm", 2, "distributed"),
                                         ("doitgen", 1, "root")])
def test_on_a_gpu_the_plan_says_where_each_array_lives_and_the_lowering_follows_it(name, P, io):
    """device="gpu": which arrays stay in GPU memory, which stay on the host (and why) and which of rank 0's
    states run on the GPU are the plan's decision (``LoweringPlan.gpu``), made on its model of the
    partitioned program before anything is rewritten. OffloadToGpu carries it out: the lowered program's
    residency is the plan's, less the transients that went inside one kernel."""
    case = CASES[name]
    sdfg = case.program.to_sdfg()
    schedule = case.schedule(P, dp.maps(sdfg)) if P > 1 else {}
    grids = resolve(discover(normalise(sdfg)), schedule)
    kernels, expanded = prepare_kernels(sdfg, grids)
    before = sdfg.hash_sdfg()
    plan = plan_lowering(sdfg, kernels, grids, SOLVERS, expanded, io=IoMode(io), device=Device.GPU)
    assert sdfg.hash_sdfg() == before, "planning rewrote the program"
    assert plan_lowering(sdfg, kernels, grids, SOLVERS, expanded, io=IoMode(io)).gpu is None  # a CPU plan has none
    decided = plan.gpu.residency
    assert decided.resident or decided.arguments
    lowered = case.program.to_sdfg()
    lowered.name = f"plan_gpu_{name}"
    dp.lower(lowered, schedule, device="gpu", io=io, local_optimize=False)  # the kernels prepared above
    res = dp.report(lowered).residency
    assert set(res.resident) <= set(decided.resident)
    assert set(decided.resident) - set(res.resident) <= {n for n in decided.resident if n not in lowered.arrays}
    assert (res.arguments, res.host, res.rank0 == tuple(n for n in decided.rank0 if n in res.rank0)) == \
        (decided.arguments, decided.host, True)
    assert res.device_copies == tuple(st.label for st in plan.gpu.copies)
    for n in res.resident:
        assert lowered.arrays[n].storage == dace.dtypes.StorageType.GPU_Global, n


def test_the_plan_changes_nothing_and_the_report_lines_come_from_it():
    sdfg = gemm_chain.to_sdfg()
    grids = resolve(discover(normalise(sdfg)), {m.name: (2, 1) if len(m.params) == 2 else (2, 1, 1) for m in dp.maps(sdfg)})
    kernels, expanded = prepare_kernels(sdfg, grids)
    before = sdfg.hash_sdfg()
    plan = plan_lowering(sdfg, kernels, grids, SOLVERS, expanded)
    assert sdfg.hash_sdfg() == before, "planning rewrote the program"
    assert plan.ranks_needed == 2 and plan.kernels and not plan.one_rank
    assert [k.kernel for k in plan.kernels] == [k for k in kernels if any(m.name in grids for m in k.maps)]
    rep, lines = plan_report(sdfg.name, plan)
    assert sorted(lines) == sorted(k.kernel.index for k in plan.kernels)
    assert [kr.grid for kr in rep.kernels if kr.grid is not None] == [k.grid for k in plan.kernels]
    # every planned move has the solver and the cost the report will print
    assert plan.moves() and all(m.solver and m.cost is not None for m in plan.moves())


def test_lower_plans_once_and_runs_one_pipeline(monkeypatch):
    """Counted around the real functions (they still do their work): one plan, one pipeline run."""
    calls = {"plan": 0, "pipeline": 0}
    real_plan, real_pipeline = partition_module.plan_lowering, partition_module.lowering_pipeline

    def counted_plan(*a, **k):
        calls["plan"] += 1
        return real_plan(*a, **k)

    def counted_pipeline(*a, **k):
        pipeline = real_pipeline(*a, **k)
        run = pipeline.apply_pass

        def apply_pass(sdfg, results):
            calls["pipeline"] += 1
            return run(sdfg, results)

        pipeline.apply_pass = apply_pass
        return pipeline

    monkeypatch.setattr(partition_module, "plan_lowering", counted_plan)
    monkeypatch.setattr(partition_module, "lowering_pipeline", counted_pipeline)
    sdfg = scaled_then_summed.to_sdfg()
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)}, io="distributed")
    assert calls == {"plan": 1, "pipeline": 1}
    rep = dp.report(sdfg)
    assert {"prepare and discover kernels", "constraints and solver choice", "partition kernels",
            "report"} <= set(rep.timings)
    assert dict(pipeline_module.STEP_NAMES)["LocalizeArguments"] in rep.timings


def test_a_refusal_comes_from_the_plan_before_any_rewrite():
    """A move no solver implements is refused while planning: the program the caller holds is unchanged."""
    sdfg = gemm_chain.to_sdfg()
    before = sdfg.hash_sdfg()
    with pytest.raises(dp.UnsupportedPattern):
        dp.lower(sdfg, {m.name: (2, 1) if len(m.params) == 2 else (2, 1, 1) for m in dp.maps(sdfg)},
                 solvers=["grid_mapped"])
    assert sdfg.hash_sdfg() == before


def _node_orders(device: str, padding: int):
    """The order of the nodes in every state of a lowering, made after ``padding`` live allocations (the
    addresses of the graph's nodes, and so any order taken from a set of them, differ)."""
    kept = [object() for _ in range(padding)]
    case = CASES["dot_scaled"]  # alpha * np.dot(x, y): a map, a reduction and scalar code on rank 0
    sdfg = case.program.to_sdfg()
    dp.lower(sdfg, case.schedule(2, dp.maps(sdfg)), device=device)
    del kept
    return [(st.label, [str(n) for n in st.nodes()]) for sd in sdfg.all_sdfgs_recursive() for st in sd.states()]


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_lowered_program_does_not_depend_on_memory_addresses(device):
    """Node order decides the names of GPU kernels (and so the build); it once followed sets of nodes,
    which iterate by address: the same program lowered twice got other kernel names."""
    first = _node_orders(device, 0)
    assert all(_node_orders(device, n) == first for n in (7, 1001, 30011))


def _plan(program, sched_of, fuse=True):
    """``program`` planned on the schedule ``sched_of`` gives its maps; checks that planning rewrote nothing."""
    sdfg = program.to_sdfg()
    sched = sched_of(dp.maps(sdfg))
    grids = resolve(discover(normalise(sdfg)), sched)
    kernels, expanded = prepare_kernels(sdfg, grids)
    before = sdfg.hash_sdfg()
    plan = plan_lowering(sdfg, kernels, grids, SOLVERS, expanded, fuse=fuse)
    assert sdfg.hash_sdfg() == before, "planning rewrote the program"
    return sdfg, sched, plan


def _mlp_plan(fuse=True):
    """The MLP of the fusion tests planned on mixed grids (a partial sum between two of its kernels)."""
    return _plan(programs.mlp, lambda infos: {infos[i].name: g for i, g in ((1, (2, 1, 2)), (2, (4, 1)), (3, (4, 1)),
                                                                           (5, (4, 1, 1)), (6, (4, 1)))}, fuse)


def test_the_plan_decides_which_round_trips_go_and_the_pipeline_removes_exactly_those():
    """Between kernels, a transient's gather to rank 0 and the scatter after it are decided in the plan
    (a grid-to-grid move where the blocks differ, nothing where they agree); lowering carries out those
    decisions and no others, and ``fuse=False`` plans none."""
    sdfg, sched, plan = _mlp_plan()
    kinds = [(t.fusion.kind, t.fusion.array) for t in plan.round_trips]
    assert (FusionKind.MOVE, "__tmp0") in kinds and (FusionKind.NOOP, "__tmp1") in kinds
    (move, ) = [t.fusion for t in plan.round_trips if t.fusion.kind == FusionKind.MOVE]
    assert move.solver == "blocks" and move.move.src.partial and move.move.kind == MoveKind.REDISTRIBUTE
    for t in plan.round_trips:  # each names a scatter and the gather (or first scatter) it reads from
        assert t.reader.kind == MoveKind.SCATTER and t.reader.array == t.fusion.array
        assert t.source.kind == (MoveKind.SCATTER if t.fusion.kind == FusionKind.REUSE else MoveKind.GATHER)
    assert _mlp_plan(fuse=False)[2].round_trips == ()

    lowered = programs.mlp.to_sdfg()
    dp.lower(lowered, sched, local_optimize=False)  # the maps the plan above saw
    made = [n for st in lowered.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    dropped = sum(1 for t in plan.round_trips if t.fusion.kind in (FusionKind.NOOP, FusionKind.REUSE)) + \
        sum(1 for t in plan.round_trips if t.last)
    assert len(made) == len(plan.moves()) - dropped  # this program has no loop: nothing else fuses
    gone = {t.fusion.array for t in plan.round_trips if t.last}
    assert gone and not gone & set(lowered.arrays), "a fused transient still has a global copy"
    rep = dp.report(lowered)
    assert not any(e.array in gone and e.kind == MoveKind.GATHER for k in rep.kernels for e in k.comm)
    assert any("reads '__tmp1' from the previous kernel's local buffer" in n for k in rep.kernels for n in k.notes)


def _jacobi_plan(fuse=True):
    """A 2-D Jacobi time loop (its unfused maps) planned with every map on rows of two ranks."""
    return _plan(programs.jacobi_time_small, lambda infos: {i.name: (2, 1) for i in infos}, fuse)


def test_the_plan_decides_what_a_loop_keeps_on_the_grid_and_the_pipeline_does_exactly_that():
    """Across a time loop's iterations, what stays on the grid is decided in the plan: each array is
    scattered before the loop and gathered after it, and inside it only halos move between neighbours.
    Lowering makes exactly the moves the plan's edits leave, and ``fuse=False`` plans none."""
    sdfg, sched, plan = _jacobi_plan()
    (carry, ) = plan.loop_carries
    kinds = {(f.kind, f.array) for f in carry.fusions}
    assert kinds == {(k, a) for k in (FusionKind.MOVE, FusionKind.INSIDE) for a in "AB"}
    assert all(f.solver == "halo" and f.move.kind == MoveKind.REDISTRIBUTE
               for f in carry.fusions if f.kind == FusionKind.MOVE)
    planned = {Site(km.kernel.index, m.array, m.kind, m.role) for km in plan.kernels for m in km.moves}
    made = set()
    for e in carry.edits:  # each edit names a planned scatter or gather, or one an earlier edit made
        if isinstance(e, (Drop, Reroute)):
            assert e.node in planned or e.node in made, e
        if isinstance(e, (ScatterBefore, GatherAfter)):
            assert isinstance(e.made, Made) and e.made not in made
            made.add(e.made)
    assert _jacobi_plan(fuse=False)[2].loop_carries == ()

    lowered = programs.jacobi_time_small.to_sdfg()
    dp.lower(lowered, sched, local_optimize=False)
    (loop, ) = [lp for lp in find_loops(lowered) if lp.head.label == carry.head.label]
    dms = [(st, n) for st in lowered.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    inside = [n for st, n in dms if st in loop.body]
    assert inside and all(n.src_grid and n.dst_grid and n.implementation == "halo" for n in inside)
    assert len(dms) - len(inside) == len(made)  # the scatters before the loop and the gathers after it
    dropped = sum(1 for t in plan.round_trips if t.fusion.kind in (FusionKind.NOOP, FusionKind.REUSE)) + \
        sum(1 for t in plan.round_trips if t.last) + sum(1 for e in carry.edits if isinstance(e, Drop))
    assert len(dms) == len(plan.moves()) - dropped + len(made)


def test_the_plan_decides_the_rank_local_arguments_and_the_pipeline_makes_exactly_those():
    """With ``io="distributed"`` the plan chooses each argument's tiles (its layout) and which scatters
    and gathers go; lowering carries that out, so here nothing moves, and the program's record holds the
    plan's layouts. Without it the plan has no rank-local arguments."""
    sdfg = scaled_then_summed.to_sdfg()
    sched = {m.name: (2, ) for m in dp.maps(sdfg)}
    grids = resolve(discover(normalise(sdfg)), sched)
    kernels, expanded = prepare_kernels(sdfg, grids)
    before = sdfg.hash_sdfg()
    plan = plan_lowering(sdfg, kernels, grids, SOLVERS, expanded, io=IoMode.DISTRIBUTED)
    assert sdfg.hash_sdfg() == before, "planning rewrote the program"
    assert plan_lowering(sdfg, kernels, grids, SOLVERS, expanded).local_io is None
    layouts = dict(plan.local_io.layouts)
    assert set(layouts) == {"x", "y", "out"} and all(lay.grid == (2, ) for lay in layouts.values())
    planned = {Site(km.kernel.index, m.array, m.kind, m.role) for km in plan.kernels for m in km.moves}
    assert all(e.node in planned for e in plan.local_io.edits if isinstance(e, Drop))

    lowered = scaled_then_summed.to_sdfg()
    dp.lower(lowered, sched, io="distributed", local_optimize=False)
    assert not [n for st in lowered.states() for n in st.nodes() if isinstance(n, DistributedMemlet)]
    assert layouts_of(lowered) == layouts
    assert all(not lowered.arrays[a].transient for a in layouts)
