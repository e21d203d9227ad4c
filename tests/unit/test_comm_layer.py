"""The communication layer without the compiler: Distribution and Move values, the registry's choice
for every kind of move, costs against brute force, fusion decisions, the program record. Milliseconds
each; the end-to-end MPI tests (test_fusion, test_distributed_io, test_solver_plugin) run the same
moves under mpiexec."""
import copy
import itertools

import dace
import numpy as np
import pytest
from dace import subsets
from hypothesis import given, settings
from hypothesis import strategies as st

import dace_partition as dp
import programs as P
from dace_partition.ir import (ROOT, Distribution, IoMode, Layout, Move, MoveKind, ProgramRecord, ReduceOp,
                               record_of)
from dace_partition.ir.boxes import intersection, volume
from dace_partition.solvers import registry


def rows(n, parts, gid=0, pending=None, extra=()):
    """x[n/parts * r : n/parts * (r + 1)] on grid (parts, *extra)."""
    r = dace.symbolic.symbol(f"__dp{gid}_r0", dace.int32)
    b = n // parts
    coords = (f"__dp{gid}_r0", ) + tuple(f"__dp{gid}_r{i + 1}" if g > 1 else None for i, g in enumerate(extra))
    return Distribution.on_grid(subsets.Range([(b * r, b * r + b - 1, 1)]), (parts, ) + tuple(extra), coords, gid,
                                pending)


def test_distribution_is_frozen_hashable_printable_and_caches_blocks():
    d = rows(40, 4)
    assert d == rows(40, 4) and hash(d) == hash(rows(40, 4)) and len({d, rows(40, 4)}) == 1
    with pytest.raises(Exception):
        d.grid = (2, )
    assert str(d) == "[10*__dp0_r0:10*__dp0_r0 + 10] on grid (4,)"
    assert d.blocks() == [((0, ), (10, )), ((10, ), (10, )), ((20, ), (10, )), ((30, ), (10, ))]
    assert d.blocks() is d.blocks()  # computed once
    assert d.local_shape == (10, ) and d.splits == (0, ) and d.replicas == 1 and not d.may_overlap()
    assert ROOT.is_root and str(ROOT) == "rank 0"


def test_replicas_and_pending_partial_results():
    d = rows(40, 2, pending="sum", extra=(3, ))
    assert d.replica_dims == (1, ) and d.replicas == 3 and d.partial and d.pending == ReduceOp.SUM
    assert "pending sum" in str(d)
    assert d.first_replicas(6) == [True, False, False, True, False, False]
    assert not d.combined().partial and d.combined().same_blocks(d)
    # no replicas: nothing can be pending
    assert not rows(40, 4, pending="sum").partial


def test_move_kind_is_derived_from_its_distributions():
    a, b = rows(40, 4, gid=0), rows(40, 2, gid=1)
    mk = lambda s, d: Move("x", s, d, (40, ), 8)
    assert mk(ROOT, a).kind == MoveKind.SCATTER and mk(a, ROOT).kind == MoveKind.GATHER
    assert mk(a, b).kind == MoveKind.REDISTRIBUTE
    p = rows(40, 2, gid=0, pending="sum", extra=(2, ))
    assert mk(p, p.combined().on(1)).kind == MoveKind.ALLREDUCE
    assert mk(p, rows(40, 4, gid=1)).kind == MoveKind.REDISTRIBUTE  # partial, other blocks: reduce-scatter
    assert str(mk(a, b)) == ("redistribute x: [10*__dp0_r0:10*__dp0_r0 + 10] on grid (4,) -> "
                             "[20*__dp1_r0:20*__dp1_r0 + 20] on grid (2,)")


def test_registry_chooses_one_solver_per_kind():
    order = registry.resolve_solvers(None)
    names = lambda m: registry.choose(m, order)[0].name
    a, b = rows(40, 4, gid=0), rows(40, 2, gid=1)
    mk = lambda s, d: Move("x", s, d, (40, ), 8)
    assert names(mk(ROOT, a)) == "grid_mapped" and names(mk(a, ROOT)) == "grid_mapped"
    assert names(mk(a, b)) == "blocks"  # grids of different sizes: not one mesh
    r0, r1 = (dace.symbolic.symbol(f"__dp{g}_r{g}", dace.int32) for g in (0, 1))
    by_rows = Distribution.on_grid(subsets.Range([(4 * r0, 4 * r0 + 3, 1), (0, 15, 1)]), (4, 1), ("__dp0_r0", None), 0)
    by_cols = Distribution.on_grid(subsets.Range([(0, 15, 1), (4 * r1, 4 * r1 + 3, 1)]), (1, 4), (None, "__dp1_r1"), 1)
    assert names(Move("x", by_rows, by_cols, (16, 16), 8)) == "synthesized"  # an alltoall on one 4-rank mesh
    p = rows(40, 2, gid=0, pending="sum", extra=(2, ))
    assert names(mk(p, p.combined().on(1))) == "allreduce"
    assert names(mk(p, rows(40, 4, gid=1))) == "blocks"
    solver, refused = registry.choose(mk(p, rows(40, 4, gid=1)), order)
    assert dict(refused)["synthesized"].startswith("the source holds partial results")
    assert "not redistribute" in dict(refused)["grid_mapped"]


@st.composite
def grid_pairs(draw):
    n = draw(st.sampled_from([12, 24, 36]))
    pa, pb = draw(st.sampled_from([1, 2, 3, 4, 6])), draw(st.sampled_from([1, 2, 3, 4, 6]))
    sa, sb = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    return n, pa, pb, sa, sb


def brute_received(src, dst, world, itemsize):
    """Bytes each rank receives: every element of its destination block that it does not hold, from the
    first rank that holds it (what an ideal point-to-point exchange moves)."""
    sb, db = src.world_blocks(world), dst.world_blocks(world)
    out = []
    for me in range(world):
        got = 0
        start, count = db[me]
        for idx in itertools.product(*[range(s, s + c) for s, c in zip(start, count)]):
            inside = lambda b: all(s <= i < s + c for i, s, c in zip(idx, b[0], b[1]))
            if not inside(sb[me]) and any(inside(b) for b in sb):
                got += itemsize
        out.append(got)
    return out


@settings(max_examples=60, deadline=None)
@given(grid_pairs())
def test_redistribution_costs_match_brute_force(case):
    """blocks (and the p2p-style minimum) receive exactly what brute force says; the synthesizer's plan, where it
    applies, receives at least the minimum."""
    n, pa, pb, sa, sb = case
    src = rows(n, pa, gid=0, extra=(1, ) * sa)
    dst = rows(n, pb, gid=1, extra=(1, ) * sb)
    world = max(src.size, dst.size)
    move = Move("x", src, dst, (n, ), 8)
    want = brute_received(src, dst, world, 8)
    assert list(move.minimum(world)) == want
    assert list(registry.get("blocks").cost(move).per_rank) == want
    synth = registry.get("synthesized")
    if synth.refuse(move) is None:
        got = synth.cost(move).per_rank
        assert all(g >= w for g, w in zip(got, want))


def test_scatter_gather_costs():
    d = rows(40, 4)
    s, g = Move("x", ROOT, d, (40, ), 8), Move("x", d, ROOT, (40, ), 8)
    gm = registry.get("grid_mapped")
    assert gm.cost(s).per_rank == (0, 80, 80, 80) and gm.cost(s).messages == 3
    assert gm.cost(g).per_rank == (240, 0, 0, 0) and gm.cost(s).calls == ("MPI_Scatterv(grid dims (0,))", )
    p = rows(40, 2, pending="sum", extra=(2, ))
    red = Move("x", p, ROOT, (40, ), 8, op=ReduceOp.SUM)
    # Reduce over the 2 replicas at each first replica, then Gatherv of rank 2's block to rank 0
    assert gm.cost(red).per_rank == (160 + 160, 0, 160, 0)
    assert gm.cost(red).calls == ("MPI_Reduce(MPI_SUM, grid dims (1,))", "MPI_Gatherv(grid dims (0,))")
    ar = Move("x", p, p.combined().on(1), (40, ), 8)
    assert registry.get("allreduce").cost(ar).per_rank == (160, 160, 160, 160)  # 2(p-1)/p of 20 doubles


def test_report_and_record_come_from_one_lowering():
    sdfg = P.axpy_chain.to_sdfg()
    sdfg.name = "t_comm_layer_report"
    infos = dp.maps(sdfg)
    dp.lower(sdfg, {infos[0].name: (4, ), infos[1].name: (2, )})
    rep = dp.report(sdfg)
    rec = record_of(sdfg)
    assert rec == ProgramRecord(sdfg.name, 4, IoMode.ROOT, {}) and rep.ranks_needed == rec.ranks_needed
    # one byte model: every kernel entry is the same cost answer as its traffic row
    entries = [e for k in rep.kernels for e in k.comm]
    assert [e.bytes for e in entries] == [t.total for t in rep.traffic]
    assert ProgramRecord.from_json(rec.to_json()) == rec
    assert copy.deepcopy(sdfg) is not sdfg and record_of(copy.deepcopy(sdfg)) == rec
    # no metadata hides in the generated code any more
    assert "ranks_needed" not in (sdfg.exit_code.get("frame").as_string if sdfg.exit_code.get("frame") else "")
    # every step of the lowering is timed; a fast lowering says nothing about it
    assert {"schedule check, copy, map fusion", "constraints and solver choice", "partition kernels", "report"} <= set(rep.timings)
    assert rep.slow_steps() is None and "lowering took" not in str(rep)


def test_slow_lowering_names_its_slowest_steps():
    rep = dp.LoweringReport("p", 2, timings={"fusion (kernels and loops)": 31.0, "report": 0.5, "partition kernels": 2.0})
    slow = rep.slow_steps()
    assert slow.startswith("lowering took 33.5 s") and slow.index("fusion") < slow.index("partition") < slow.index("report")
    assert slow in str(rep) and rep.slow_steps(threshold=40) is None


def test_layouts_round_trip_through_the_record():
    lay = Layout("w", ("16", "12"), ("16", "3"), "<f8", (1, 4), ("", "__dp0_r1"),
                 (("0", "15"), ("3*__dp0_r1", "3*__dp0_r1 + 2")))
    rec = ProgramRecord("p", 4, IoMode.DISTRIBUTED, {"w": lay})
    back = ProgramRecord.from_json(rec.to_json())
    assert back.layouts["w"] == lay and back.layouts["w"].block(3) == (slice(0, 16), slice(9, 12))


def test_renamed_arguments_reach_the_record_and_a_call_by_either_name():
    """An ONNX input '0' is the argument 't_0': the name travels from the SDFG's notes into the record
    saved beside the build, and a call naming it either way reaches the argument (twice is an error)."""
    from dace_partition.ir.record import attach, notes
    from dace_partition.runtime.program import by_argument_name
    sdfg = dace.SDFG("renamed")
    notes(sdfg).aliases = {"0": "t_0"}
    attach(sdfg, ProgramRecord("renamed", 2))
    back = ProgramRecord.from_json(record_of(sdfg).to_json())
    assert back.aliases == {"0": "t_0"}
    assert by_argument_name(back.aliases, {"0": 1, "n": 2}) == {"t_0": 1, "n": 2}
    assert by_argument_name(back.aliases, {"t_0": 1}) == {"t_0": 1}
    with pytest.raises(ValueError, match="'t_0' is given twice"):
        by_argument_name(back.aliases, {"0": 1, "t_0": 1})


def test_uneven_layout_blocks_evaluate_on_every_rank():
    """510 interior rows over 8 ranks: the written bounds hold DaCe's int_ceil, which every rank evaluates."""
    r = "__dp0_r0"
    lay = Layout("A", ("512", "512"), ("66", "512"), "<f8", (8, 1), (r, ""),
                 ((f"int_ceil(510*{r}, 8)", f"int_ceil(510*{r} + 510, 8) + 1"), ("0", "511")))
    blocks = [lay.block(k) for k in range(8)]
    starts = [b[0].start for b in blocks]
    assert starts == [-(-510 * k // 8) for k in range(8)] and blocks[-1][0].stop == 512
    a = np.arange(512 * 512, dtype=np.float64).reshape(512, 512)
    tiles = [lay.scatter(a, k) for k in range(8)]
    assert all(t.shape == (66, 512) for t in tiles)
    assert np.array_equal(lay.gather(tiles), a)
