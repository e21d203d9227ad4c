"""Rank-local optimization inside ``lower``: maps on the same grid fuse before partitioning (a schedule
written against the program as written keeps working), and contraction maps become GEMMs on BLAS.

The first tests decide without a compiler; the compiled ones run under ``mpiexec -n 2`` (one build per
module fixture) and compare every element with NumPy."""
import dace
import numpy as np
import pytest
from dace.libraries.blas import nodes as blas_nodes

import dace_partition as dp
from conftest import run_counted
from dace_partition.passes.contractions import find_contractions
from dace_partition.passes.local_optimize import LocalStep, optimize_local

N = 48


@dace.program
def jacobi_as_written(A: dace.float64[N, N], B: dace.float64[N, N]):
    for t in range(6):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


@dace.program
def jacobi_large(A: dace.float64[1024, 1024], B: dace.float64[1024, 1024]):
    # big enough that the default machine model splits it (48x48 stays on rank 0: cheaper than a message)
    for t in range(6):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def jacobi_reference(A, B):
    A, B = A.copy(), B.copy()
    for _ in range(6):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return A, B


R, C = 16, 64


@dace.program
def softmax_rows(x: dace.float64[R, C]):
    mx = np.max(x, axis=1)
    e = np.exp(x - mx[:, np.newaxis])
    s = np.sum(e, axis=1)
    return e / s[:, np.newaxis]


Bt, S, E, H, D = 2, 6, 8, 4, 3


@dace.program
def project_heads(x: dace.float64[Bt, S, E], w: dace.float64[H, E, D]):
    return np.einsum("bse,hed->bhsd", x, w)


@dace.program
def scores(q: dace.float64[Bt, H, S, D], k: dace.float64[Bt, H, S, D]):
    s = np.zeros([Bt, H, S, S])
    for b, h, i, j, d in dace.map[0:Bt, 0:H, 0:S, 0:S, 0:D]:
        s[b, h, i, j] += q[b, h, i, d] * k[b, h, j, d]
    return s


@dace.program
def batched_matmul(a: dace.float64[H, S, E], b: dace.float64[H, E, D]):
    return a @ b


@dace.program
def not_a_contraction(a: dace.float64[S, E], b: dace.float64[S, E]):
    c = np.zeros([S])
    for i, j in dace.map[0:S, 0:E]:
        c[i] += a[i, j] * b[i, j] + 1.0  # not a plain product: stays a map
    return c


def rows(sdfg, P):
    return {m.name: (P, 1) for m in dp.maps(sdfg)}


def kernel_notes(sdfg):
    return {k.name: k.notes for k in dp.report(sdfg).kernels}


# ------------------------------------------------------------------------------ decisions, no compiler
def test_jacobi_as_written_fuses_each_update_into_one_map():
    sdfg = jacobi_as_written.to_sdfg()
    written = [m.name for m in dp.maps(sdfg)]
    assert len(written) == 10  # five maps per update, four whole-array temporaries
    dp.lower(sdfg, rows(sdfg, 2))  # the schedule names the maps as written
    fused = [n for notes in kernel_notes(sdfg).values() for n in notes if n.startswith("fused")]
    assert len(fused) == 2 and all("5 maps" in n for n in fused)
    assert len([k for k in dp.report(sdfg).kernels if k.grid]) == 2


def test_fused_jacobi_moves_what_the_hand_fused_program_moves():
    from dace.transformation.dataflow import MapFusion
    counted = {}
    for variant in ("as written", "unfused", "hand-fused"):
        sdfg = jacobi_as_written.to_sdfg()
        if variant == "hand-fused":
            sdfg.apply_transformations_repeated(MapFusion)
        dp.lower(sdfg, rows(sdfg, 2), local_optimize=variant != "unfused")
        counted[variant] = dp.report(sdfg).bytes_per_rank()
    assert counted["as written"] == counted["hand-fused"]
    # one buffer per array instead of one per shifted read: less than half the bytes
    assert 2 * sum(counted["as written"]) < sum(counted["unfused"])


@pytest.mark.parametrize("P", [2, 4])
def test_jacobi_as_written_moves_the_schedules_minimum(P):
    """Each array scattered once and gathered once, one halo exchange per array and sweep: the counted
    bytes equal the schedule's minimum, both with the loop's six sweeps multiplied out."""
    sdfg = jacobi_as_written.to_sdfg()
    sdfg.name = f"jacobi_minimum_{P}"
    dp.lower(sdfg, rows(sdfg, P))
    rep = dp.report(sdfg)
    kinds = sorted((t.source.startswith("rank 0"), t.destination.startswith("rank 0"), t.trips) for t in rep.traffic)
    assert kinds == [(False, False, 6)] * 2 + [(False, True, 1)] * 2 + [(True, False, 1)] * 2
    assert sum(rep.bytes_per_rank()) == rep.minimum_bytes
    halo = sum(t.minimum_total for t in rep.traffic if t.trips == 6)
    assert rep.minimum_bytes == sum(t.minimum_total for t in rep.traffic) + 5 * halo


def test_maps_on_different_grids_do_not_fuse():
    sdfg = jacobi_as_written.to_sdfg()
    names = [m.name for m in dp.maps(sdfg)]
    schedule = {n: (2, 1) for n in names}
    schedule[names[2]] = (1, 2)  # the third map of the first update on another grid
    dp.lower(sdfg, schedule)
    grids = [k.grid for k in dp.report(sdfg).kernels if k.grid]
    assert (1, 2) in grids and len(grids) > 2


def test_unknown_map_in_schedule_is_refused_in_words():
    sdfg = jacobi_as_written.to_sdfg()
    with pytest.raises(dp.ScheduleError, match="unknown map 'no_such_map'"):
        dp.lower(sdfg, {"no_such_map": (2, 1)})


def test_local_optimize_false_keeps_every_map():
    sdfg = jacobi_as_written.to_sdfg()
    dp.lower(sdfg, rows(sdfg, 2), local_optimize=False)
    assert len([k for k in dp.report(sdfg).kernels if k.grid]) == 10
    with pytest.raises(ValueError, match="local_optimize"):
        fresh = jacobi_as_written.to_sdfg()
        dp.lower(fresh, rows(fresh, 2), local_optimize=["fusion"])


def test_automatic_schedule_is_chosen_for_the_fused_maps():
    sdfg = jacobi_large.to_sdfg()
    dp.lower(sdfg, ranks=2)
    notes = [n for ns in kernel_notes(sdfg).values() for n in ns]
    assert sum(n.startswith("fused 5 maps") for n in notes) == 2
    assert "_Add__map" in dp.report(sdfg).schedule  # the search priced the fused map


def test_a_schedule_from_auto_schedule_names_the_fused_maps_lower_fuses():
    sdfg = jacobi_large.to_sdfg()
    s = dp.auto_schedule(sdfg, 2)
    assert len(s) == 2 and s.fused
    dp.lower(sdfg, s)
    assert [k.name for k in dp.report(sdfg).kernels if k.grid] == sorted(s)
    with pytest.raises(dp.ScheduleError, match="local_optimize=True"):
        dp.lower(jacobi_large.to_sdfg(), s, local_optimize=False)


def test_einsum_projection_is_one_gemm():
    sdfg = project_heads.to_sdfg()
    (c, ) = [m.decision for m in find_contractions(sdfg)]
    assert (c.batch, c.m, c.n, c.k) == ((), ("b", "s"), ("h", "d"), ("e", ))


def test_per_head_scores_map_is_a_batched_gemm():
    sdfg = scores.to_sdfg()
    (c, ) = [m.decision for m in find_contractions(sdfg)]
    assert (c.batch, c.m, c.n, c.k) == (("b", "h"), ("i", ), ("j", ), ("d", ))
    optimize_local(sdfg, steps=[LocalStep.CONTRACTIONS])
    assert any(isinstance(n, blas_nodes.MatMul) for n, _ in sdfg.all_nodes_recursive())
    assert not find_contractions(sdfg)


def test_sum_of_something_else_stays_a_map():
    assert find_contractions(not_a_contraction.to_sdfg()) == []


# --------------------------------------------------------------------- compiled, mpiexec -n 2
def lowered(program, schedule_of, tag, **kw):
    sdfg = program.to_sdfg()
    sdfg.name = f"t_lo_{program.name}_{tag}"
    dp.lower(sdfg, schedule_of(sdfg), **kw)
    return sdfg


@pytest.fixture(scope="module")
def jacobi_root():
    return lowered(jacobi_as_written, lambda s: rows(s, 2), "root")


@pytest.fixture(scope="module")
def jacobi_dist():
    return lowered(jacobi_as_written, lambda s: rows(s, 2), "dist", io="distributed")


@pytest.mark.parametrize("which", ["jacobi_root", "jacobi_dist"])
def test_jacobi_as_written_runs_on_two_ranks(which, request, rng):
    sdfg = request.getfixturevalue(which)
    A, B = rng.random((N, N)), rng.random((N, N))
    out = run_counted(sdfg, 2, A=A, B=B)
    refA, refB = jacobi_reference(A, B)
    np.testing.assert_allclose(out["A"], refA, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out["B"], refB, rtol=1e-13, atol=1e-13)


def test_softmax_rows_on_two_ranks(rng):
    sdfg = lowered(softmax_rows, lambda s: {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(s)
                                            if m.shape[0] == R}, "rows")
    x = rng.standard_normal((R, C))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(dp.run(sdfg, 2, x=x), e / e.sum(axis=1, keepdims=True), rtol=1e-13, atol=1e-15)


def heads_split(sdfg):
    out = {}
    for m in dp.maps(sdfg):
        if H in m.shape:
            grid = [1] * len(m.params)
            grid[list(m.shape).index(H)] = 2
            out[m.name] = tuple(grid)
    return out


def test_einsum_on_heads_runs_as_gemm_on_two_ranks(rng):
    sdfg = lowered(project_heads, heads_split, "heads")
    assert any("runs as a GEMM on BLAS" in n for notes in kernel_notes(sdfg).values() for n in notes)
    x, w = rng.standard_normal((Bt, S, E)), rng.standard_normal((H, E, D))
    np.testing.assert_allclose(dp.run(sdfg, 2, x=x, w=w), np.einsum("bse,hed->bhsd", x, w), rtol=1e-12,
                               atol=1e-12)


def test_batched_matmul_stays_on_blas_on_two_ranks(rng):
    sdfg = lowered(batched_matmul, heads_split, "heads")
    assert any(isinstance(n, (blas_nodes.BatchedMatMul, blas_nodes.MatMul)) for n, _ in sdfg.all_nodes_recursive())
    a, b = rng.standard_normal((H, S, E)), rng.standard_normal((H, E, D))
    np.testing.assert_allclose(dp.run(sdfg, 2, a=a, b=b), a @ b, rtol=1e-12, atol=1e-12)



@dace.program
def batched_matmul_uneven(a: dace.float64[5, 7, 6], b: dace.float64[5, 6, 9]):
    return a @ b


def test_batched_matmul_on_uneven_rows_is_a_batched_gemm_of_each_ranks_block(rng):
    """7 rows of each of 5 matrices over 2 ranks (blocks of 4 and 3): the pure expansion's product map is a
    batched GEMM on buffers sized for the larger block, allocated once; each rank multiplies its own rows,
    the batch stride that of the larger block (a wrong stride or leading dimension mixes rows of different
    matrices)."""
    sdfg = batched_matmul_uneven.to_sdfg()
    sdfg.name = "t_lo_batched_uneven"
    dp.lower(sdfg, {m.name: (1, 2) + (1, ) * (len(m.params) - 2) for m in dp.maps(sdfg)})
    notes = [n for notes in kernel_notes(sdfg).values() for n in notes]
    assert any("batched GEMM on BLAS" in n for n in notes), notes
    bufs = {a: d for sd in sdfg.all_sdfgs_recursive() for a, d in sd.arrays.items() if a.startswith("__gemm_")}
    assert sorted(tuple(d.shape) for d in bufs.values()) == [(5, 4, 6), (5, 4, 9), (5, 6, 9)]
    assert all(d.lifetime == dace.AllocationLifetime.Persistent for d in bufs.values())
    a, b = rng.standard_normal((5, 7, 6)), rng.standard_normal((5, 6, 9))
    np.testing.assert_allclose(dp.run(sdfg, 2, a=a, b=b, timeout=300), a @ b, rtol=1e-12, atol=1e-12)


GM, GN, GK = (dace.symbol(n) for n in ("GM", "GN", "GK"))


@dace.program
def scaled_gemm(alpha: dace.float64, a: dace.float64[GM, GK], b: dace.float64[GK, GN]):
    return alpha * a @ b


@pytest.mark.parametrize("k,even", [(24, True), (25, False), (None, False)])
def test_gemm_on_tiles_whose_bounds_need_int_ceil_stays_on_blas(k, even):
    """K = 24 over 2 ranks, sizes specialized as NPBench's harness does: the tile bounds are
    ``int_ceil(24*r, 2)``, equal widths on every rank, so the library node stays (NPBench's gemm had
    become DaCe's pure triple loop, 50x slower). K = 25 (unequal blocks) and K left symbolic (widths known
    at run time) give the pure expansion, whose maps are tiled exactly; its product map is then a GEMM on
    BLAS again, of each rank's exact block (it stayed the triple loop: NPBench's gemm with sizes not
    specialized took 4.4 s on 2 ranks against NumPy's 77 ms)."""
    sdfg = scaled_gemm.to_sdfg()
    if k is not None:
        sdfg.specialize(dict(GM=20, GN=22, GK=k))
    sdfg.name = f"gemm_tiles_{k}"
    gemm = next(m.name for m in dp.maps(sdfg) if m.name.endswith("gemm_map"))
    dp.lower(sdfg, {gemm: (1, 1, 2)})
    libs = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, (blas_nodes.gemm.Gemm, blas_nodes.matmul.MatMul))]
    notes = [n for notes in kernel_notes(sdfg).values() for n in notes]
    assert libs and any("uneven tiles" in n for n in notes) != even
    assert any(f"'{gemm}'" in n and "GEMM on BLAS" in n for n in notes) != even, notes
    top = {str(s) for s in sdfg.free_symbols} | set(sdfg.constants)
    for sd in sdfg.all_sdfgs_recursive():  # the exact block's buffers: allocated once, at the largest block
        for name, desc in sd.arrays.items():
            if name.startswith("__gemm_"):
                assert desc.lifetime == dace.AllocationLifetime.Persistent, f"{name} is allocated in every call"
                assert {str(s) for s in desc.free_symbols} <= top, f"{name}: {desc.shape}"
