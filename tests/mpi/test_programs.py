"""Every program of the core issue, lowered, built, and run under a real mpiexec, compared with NumPy."""
import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import lowered


def ints(rng, *shape):
    return rng.integers(-1000, 1000, size=shape).astype(np.int64)


def check_float(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("grid,ranks", [((2, ), 2), ((4, ), 4), ((2, ), 3), ((1, ), 1)])
def test_add5(rng, grid, ranks):
    sdfg = lowered(P.add5, ((0, grid), ))
    x = ints(rng, 64)
    out = dp.run(sdfg, ranks, x=x)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, x + 5)


# (2, 2, 1) splits both array dims that (2, 1, 1) and (1, 2, 1) split one at a time: those two under -m slow
@pytest.mark.parametrize("grid", [pytest.param((2, 1, 1), marks=pytest.mark.slow), (2, 2, 1),
                                  pytest.param((1, 2, 1), marks=pytest.mark.slow), (2, 2, 2), (1, 1, 1)])
def test_broadcast_add(rng, grid):
    sdfg = lowered(P.bcast_add, ((0, grid), ))
    x, y = ints(rng, 4, 8, 16), ints(rng, 8, 16)
    ranks = int(np.prod(grid))
    np.testing.assert_array_equal(dp.run(sdfg, ranks, x=x, y=y), x + y)


def test_broadcast_add_report():
    rep = dp.report(lowered(P.bcast_add, ((0, (2, 2, 1)), )))
    assert rep.calls("x") == ["MPI_Scatterv(grid dims (0, 1))"]
    # y has no first axis: scattered over grid dim 1, then broadcast along grid dim 0
    assert rep.calls("y") == ["MPI_Scatterv(grid dims (1,))", "MPI_Bcast(grid dims (0,))"]
    assert rep.calls("__return") == ["MPI_Gatherv(grid dims (0, 1))"]


@pytest.mark.parametrize("grids,ranks", [(((0, (2, 2)), (1, (2, 2))), 4),
                                         pytest.param(((1, (4, 1)), ), 4, marks=pytest.mark.slow),  # (time)
                                         (((0, (1, 1)), (1, (1, 1))), 1)])
def test_transposed_add(rng, grids, ranks):
    """x.T + y: DaCe's Transpose library node and the add map, each on its own grid (or rank 0)."""
    sdfg = lowered(P.transposed_add, grids)
    x, y = ints(rng, 8, 16), ints(rng, 16, 8)
    np.testing.assert_array_equal(dp.run(sdfg, ranks, x=x, y=y), x.T + y)


@pytest.mark.parametrize("grid", [(2, 2), pytest.param((4, 1), marks=pytest.mark.slow), (1, 2), (1, 1)])  # (time)
def test_transposed_map(rng, grid):
    """out[i, j] = x[j, i] + y[i, j]: the first array axis is split by the second grid dimension."""
    sdfg = lowered(P.transposed_map, ((0, grid), ))
    x, y, out = ints(rng, 8, 16), ints(rng, 16, 8), ints(rng, 16, 8)
    res = dp.run(sdfg, int(np.prod(grid)), x=x, y=y, out=out)
    assert set(res) == {"out"}
    np.testing.assert_array_equal(res["out"], x.T + y)


@pytest.mark.parametrize("grid", [(2, ), pytest.param((4, ), marks=pytest.mark.slow), (1, )])  # (time)
def test_offset_read_uses_map_index(rng, grid):
    """out[i] = x[i+1] * i: an offset read and a tasklet that uses the global index."""
    sdfg = lowered(P.offset_read, ((0, grid), ))
    x, out = ints(rng, 65), ints(rng, 64)
    res = dp.run(sdfg, grid[0], x=x, out=out)
    np.testing.assert_array_equal(res["out"], x[1:] * np.arange(64))


@pytest.mark.parametrize("grid", [(2, 2), pytest.param((4, 1), marks=pytest.mark.slow), (1, 4), (1, 1)])  # (time)
def test_sum_rows(rng, grid):
    """np.add.reduce(x, axis=1): reduction axis split (partial sums + MPI_Reduce) and not split."""
    sdfg = lowered(P.sum_rows, (("Reduce.reduce_output", grid), ))
    x = rng.standard_normal((16, 16))
    check_float(dp.run(sdfg, int(np.prod(grid)), x=x), np.add.reduce(x, axis=1))
    calls = dp.report(sdfg).calls("__return")
    if grid[1] > 1:
        assert "MPI_Reduce(MPI_SUM, grid dims (1,))" in calls
    else:
        assert not any(c.startswith("MPI_Reduce") for c in calls)


@pytest.mark.parametrize("grid", [(2, 2), (4, 1), pytest.param((1, 4), marks=pytest.mark.slow)])  # (time)
def test_max_cols(rng, grid):
    sdfg = lowered(P.max_cols, (("Reduce.reduce_output", grid), ))
    x = rng.standard_normal((16, 16))
    check_float(dp.run(sdfg, int(np.prod(grid)), x=x), np.maximum.reduce(x, axis=0))


def test_reduce_derives_init_grid():
    rep = str(dp.report(lowered(P.sum_rows, (("Reduce.reduce_output", (2, 2)), ))))
    assert "derived grid (2,) for 'Reduce.reduce_init_map'" in rep


# DaCe's pure matmul map is gemm_map[i, j, k] (k = contraction), so the thesis' reduction-parallel
# schedule, which splits the contraction, is (1, 1, n) here.
MATMUL = {
    "replicated": ((1, 1, 1), 4),
    "data-parallel": ((4, 1, 1), 4),
    "column-parallel": ((1, 4, 1), 4),
    "reduction-parallel": ((1, 1, 4), 4),
    "hybrid": ((2, 2, 2), 8),
    "single-rank": ((1, 1, 1), 1),
}


@pytest.mark.parametrize("name", [n if n != "column-parallel" else pytest.param(n, marks=pytest.mark.slow)  # data-
                                  for n in MATMUL])  # parallel splits one output dim too (time)
def test_matmul(rng, name):
    grid, ranks = MATMUL[name]
    sdfg = lowered(P.matmul, (("_MatMult_.gemm_map", grid), ))
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    check_float(dp.run(sdfg, ranks, a=a, b=b), a @ b)


def test_matmul_mpi_calls():
    """The MPI calls per schedule, as the thesis (8.1.1) describes them."""
    dpar = dp.report(lowered(P.matmul, (("_MatMult_.gemm_map", (4, 1, 1)), )))
    assert dpar.calls("a") == ["MPI_Scatterv(grid dims (0,))"]
    assert dpar.calls("b") == ["copy on rank 0", "MPI_Bcast(grid dims (0,))"]
    assert dpar.calls("__return") == ["MPI_Gatherv(grid dims (0,))"]
    red = dp.report(lowered(P.matmul, (("_MatMult_.gemm_map", (1, 1, 4)), )))
    assert red.calls("a") == ["MPI_Scatterv(grid dims (2,))"]
    assert red.calls("b") == ["MPI_Scatterv(grid dims (2,))"]
    assert red.calls("__return") == ["MPI_Reduce(MPI_SUM, grid dims (2,))", "copy on rank 0"]
    hyb = dp.report(lowered(P.matmul, (("_MatMult_.gemm_map", (2, 2, 2)), )))
    assert hyb.calls("a") == ["MPI_Scatterv(grid dims (0, 2))", "MPI_Bcast(grid dims (1,))"]
    assert hyb.calls("__return") == ["MPI_Reduce(MPI_SUM, grid dims (2,))", "MPI_Gatherv(grid dims (0, 1))"]
    rep = dp.report(lowered(P.matmul, (("_MatMult_.gemm_map", (1, 1, 1)), )))
    assert rep.ranks_needed == 1 and all(not k.comm for k in rep.kernels)


@pytest.mark.parametrize("grid", [(4, 1), (2, 2)])
def test_accumulate_keeps_prior_value_once(rng, grid):
    """out[i] += x[i, j] with the j axis split: replicas start from 0, the prior value counts once."""
    sdfg = lowered(P.accumulate, ((0, grid), ))
    x, out = ints(rng, 8, 12), ints(rng, 8)
    res = dp.run(sdfg, int(np.prod(grid)), x=x, out=out)
    np.testing.assert_array_equal(res["out"], out + x.sum(axis=1))


def test_report_bytes():
    """Bytes to or from ranks other than rank 0, per memlet: what the MPI calls move."""

    def moved(sdfg):
        return {(e.direction, e.array): e.bytes for k in dp.report(sdfg).kernels for e in k.comm}

    b = moved(lowered(P.bcast_add, ((0, (2, 2, 1)), )))
    # x: 3 of 4 blocks of 4*8*16/4 int64; y: every rank but 0 gets an 8*16/2 half, once (Bcast to replicas)
    assert b == {("scatter", "x"): 3 * 128 * 8, ("scatter", "y"): 3 * 64 * 8, ("gather", "__return"): 3 * 128 * 8}
    red = moved(lowered(P.matmul, (("_MatMult_.gemm_map", (1, 1, 4)), )))
    assert red[("gather", "__return")] == 3 * 64 * 64 * 8  # every replica sends its partial sums
    hist = moved(lowered(P.histogram, ((0, (4, )), )))
    assert hist[("scatter", "hist")] == 0  # the prior counts stay on rank 0; other ranks start from 0
