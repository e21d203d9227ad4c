"""Loop-carried distribution (issue 14): arrays a time loop's kernels read and write stay on their grid
across iterations; inside the loop only what a neighbour owns moves (the halo solver), and the report
counts bytes per iteration and per call, equal to the PMPI-counted bytes."""
import dace
import numpy as np
import pytest

import dace_partition as dp
from dace_partition.errors import UnsupportedPattern
from dace_partition.runtime.mpi_count import count_run

N = dace.symbol("N")
M = dace.symbol("M")


@dace.program
def jacobi1d(A: dace.float64[N], B: dace.float64[N], T: dace.int64):
    for t in range(T):
        B[1:-1] = 0.33 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33 * (B[:-2] + B[1:-1] + B[2:])


@dace.program
def jacobi2d(A: dace.float64[24, 20], B: dace.float64[24, 20], w: dace.float64[24, 20], T: dace.int64):
    for t in range(T):
        B[1:-1, 1:-1] = w[1:-1, 1:-1] * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


@dace.program
def fdtd(ex: dace.float64[18, 12], ey: dace.float64[18, 12], hz: dace.float64[18, 12], fict: dace.float64[5]):
    for t in range(5):
        ey[0, :] = fict[t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


@dace.program
def converge(A: dace.float64[16], res: dace.float64[1]):
    while res[0] > 1e-3:
        A[:] = 0.5 * A
        res[0] = np.sum(A)


def ref_jacobi1d(A, B, T):
    A, B = A.copy(), B.copy()
    for _ in range(T):
        B[1:-1] = 0.33 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33 * (B[:-2] + B[1:-1] + B[2:])
    return A, B


def lower_all(program, grid, name, skip=(), **kw):
    """Every map but those named in ``skip`` on ``grid`` (padded with 1s to the map's dimensions)."""
    sdfg = program.to_sdfg()
    sdfg.name = name
    sched = {m.name: grid + (1, ) * (len(m.params) - len(grid)) for m in dp.maps(sdfg) if m.name not in skip}
    dp.lower(sdfg, sched, **kw)
    return sdfg


def counted(sdfg, ranks, symbols, **inputs):
    """Runs under the PMPI counter; the report's per-call bytes (loops multiplied out, symbolic sizes bound
    to ``symbols``) must equal the counted bytes on every rank."""
    res = count_run(sdfg, ranks, **inputs)
    expected = dp.report(sdfg).bytes_per_rank(**symbols)
    assert expected is not None, dp.report(sdfg)
    expected = expected + [0] * (ranks - len(expected))
    assert res["bytes"] == expected, f"counted {res['bytes']}, report {expected}\n{res['calls']}\n{dp.report(sdfg)}"
    return res["outputs"]


def moves(sdfg):
    return [(t.source, t.destination, t.solver, t.trips) for t in dp.report(sdfg).traffic]


def test_jacobi1d_symbolic_uneven_keeps_arrays_on_the_grid(rng):
    sdfg = lower_all(jacobi1d, (2, ), "t_loops_jac1d")
    rows = moves(sdfg)
    inside = [r for r in rows if r[3] != 1]
    # Inside the loop: only grid-to-grid halo exchanges, no move through rank 0.
    assert inside and all(r[0] != "rank 0" and r[1] != "rank 0" and r[2] == "halo" for r in inside)
    # Each array is gathered exactly once per call, after the loop.
    assert sum(1 for r in rows if r[1] == "rank 0") == 2
    n, T = 37, 6
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    out = counted(sdfg, 2, dict(N=n, T=T), A=a, B=b, T=T, N=n)
    ra, rb = ref_jacobi1d(a, b, T)
    np.testing.assert_allclose(out["A"], ra, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out["B"], rb, rtol=1e-13, atol=1e-13)
    it = dp.report(sdfg).bytes_per_iteration(N=n, T=T)
    assert sum(it) == 4 * 8  # per iteration: one float64 each way for A's and B's two shifted reads
    # Other sizes, the same build: no iteration at all (the arrays come back unchanged), and tiny blocks.
    for n, T in ((9, 0), (5, 3)):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        out = counted(sdfg, 2, dict(N=n, T=T), A=a, B=b, T=T, N=n)
        ra, rb = ref_jacobi1d(a, b, T)
        np.testing.assert_allclose(out["A"], ra, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(out["B"], rb, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("grid", [(4, ), (2, 2)], ids=["rows", "rows_and_columns"])
def test_jacobi2d_on_four_ranks(rng, grid):
    """Rows split (contiguous faces), then rows and columns (strided column faces as derived datatypes)."""
    sdfg = lower_all(jacobi2d, grid, "t_loops_jac2d_" + "x".join(map(str, grid)))
    inside = [r for r in moves(sdfg) if r[3] != 1]
    assert inside and all(r[2] == "halo" for r in inside), dp.report(sdfg)
    # The weights, read but never written in the loop, are scattered once, before it.
    assert [t.trips for t in dp.report(sdfg).traffic if t.array == "w"] == [1]
    a, b, w = rng.standard_normal((24, 20)), rng.standard_normal((24, 20)), rng.standard_normal((24, 20))
    T = 4
    out = counted(sdfg, 4, dict(T=T), A=a, B=b, w=w, T=T)
    ra, rb = a.copy(), b.copy()
    for _ in range(T):
        rb[1:-1, 1:-1] = w[1:-1, 1:-1] * (ra[1:-1, 1:-1] + ra[1:-1, :-2] + ra[1:-1, 2:] + ra[2:, 1:-1] + ra[:-2, 1:-1])
        ra[1:-1, 1:-1] = 0.2 * (rb[1:-1, 1:-1] + rb[1:-1, :-2] + rb[1:-1, 2:] + rb[2:, 1:-1] + rb[:-2, 1:-1])
    np.testing.assert_allclose(out["A"], ra, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out["B"], rb, rtol=1e-13, atol=1e-13)
    # Per iteration each rank receives one face from each neighbour, for each array read shifted.
    it = dp.report(sdfg).bytes_per_iteration(T=T)
    assert 0 < max(it) <= 2 * 2 * 18 * 8, it


def test_fdtd_boundary_written_on_rank0_each_step(rng):
    sdfg = lower_all(fdtd, (2, ), "t_loops_fdtd", skip=("assign_33_8_map", ))
    rows = moves(sdfg)
    # ey is written by rank-0 code in the loop: its round trip stays; ex and hz stay on the grid.
    assert any(r[0] == "rank 0" and r[3] == 5 for r in rows)
    assert any(r[2] == "halo" and r[3] == 5 for r in rows), dp.report(sdfg)
    ex, ey, hz = (rng.standard_normal((18, 12)) for _ in range(3))
    fict = rng.standard_normal(5)
    out = counted(sdfg, 2, {}, ex=ex, ey=ey, hz=hz, fict=fict)
    ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
    for t in range(5):
        ey[0, :] = fict[t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    for k, v in dict(ex=ex, ey=ey, hz=hz).items():
        np.testing.assert_allclose(out[k], v, rtol=1e-13, atol=1e-13, err_msg=k)


def test_data_dependent_loop_condition_is_refused_before_running():
    sdfg = converge.to_sdfg()
    with pytest.raises(UnsupportedPattern, match="condition of loop .*computed on rank 0 from .res.*only rank 0 keeps current"):
        dp.lower(sdfg, {"_Mult__map": (2, )})
    assert not dp.api.is_lowered(sdfg)


def test_io_distributed_refuses_a_loop_whose_reads_exceed_its_writes():
    """Jacobi's fixed boundary is read but never written: no rank's written tile holds it, so rank-local
    arguments cannot carry it (a block+halo layout would); refused in words, before any rank starts."""
    sdfg = jacobi1d.to_sdfg()
    with pytest.raises(UnsupportedPattern, match="read in blocks .* but written in other blocks"):
        dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)}, io="distributed")
