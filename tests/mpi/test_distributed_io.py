"""io="distributed": every rank passes and gets back only its tiles; nothing passes through rank 0."""
import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import lowered, run_counted
from test_fusion import data_parallel, mlp_inputs

MEGATRON = (("_MatMult_.gemm_map", (1, 4, 1)), ("_Add__map", (1, 4)), ("_numpy_maximum__map", (1, 4)),
            ("_MatMult_.gemm_map_1", (1, 1, 4)), ("_Add__map_1", dp.replicate((1, 1), 4)))


def entries(sdfg):
    return [e for k in dp.report(sdfg).kernels for e in k.comm]


def mlp_reference(a):
    return np.maximum(a["x"] @ a["w1"] + a["b1"], 0.0) @ a["w2"] + a["b2"]


def distributed(program, schedule, tag, **kw):
    sdfg = program.to_sdfg()
    infos = dp.maps(sdfg)
    sched = {(infos[k].name if isinstance(k, int) else k): g for k, g in schedule}
    sdfg.name = f"t_{program.name}_dio_{tag}"
    dp.lower(sdfg, sched, io="distributed", **kw)
    return sdfg


@pytest.fixture(scope="module")
def mlp_dp():
    return distributed(P.mlp, data_parallel(P.mlp, 4), "dp")


def test_data_parallel_mlp_moves_nothing(rng, mlp_dp):
    assert entries(mlp_dp) == []
    assert dp.report(mlp_dp).io == "distributed"
    a = mlp_inputs(rng)
    np.testing.assert_allclose(run_counted(mlp_dp, 4, **a), mlp_reference(a), rtol=1e-12, atol=1e-12)


def test_layouts_say_which_rows_each_rank_holds(rng, mlp_dp):
    x = dp.layout(mlp_dp, "x")
    assert x.grid == (4, 1, 1)
    assert [x.block(r) for r in range(4)] == [(slice(4 * r, 4 * r + 4), slice(0, 8)) for r in range(4)]
    assert x.block(4) is None
    w1 = dp.layout(mlp_dp, "w1")  # replicated: every rank holds all of it
    assert all(w1.block(r) == (slice(0, 8), slice(0, 12)) for r in range(4))
    data = rng.standard_normal((16, 8))
    tiles = [dp.scatter(mlp_dp, "x", data, r) for r in range(4)]
    np.testing.assert_array_equal(tiles[2], data[8:12])
    np.testing.assert_array_equal(dp.gather(mlp_dp, "x", tiles), data)
    with pytest.raises(KeyError, match="no distributed layout"):
        dp.layout(lowered(P.mlp, data_parallel(P.mlp, 4)), "x")


def test_megatron_mlp_only_the_allreduce_remains(rng):
    sdfg = distributed(P.mlp, MEGATRON, "megatron")
    (only, ) = entries(sdfg)
    hidden = P.product_output(P.mlp, "w2")  # h @ w2: __tmp3 (DaCe 1.0.2), h_matmul_w2 (DaCe 2)
    assert (only.array, only.calls) == (hidden, ["MPI_Allreduce(MPI_SUM, grid dims (2,))"])
    # each rank holds a column block of w1 and a row block of w2
    assert dp.layout(sdfg, "w1").block(3) == (slice(0, 8), slice(9, 12))
    assert dp.layout(sdfg, "w2").block(1) == (slice(3, 6), slice(0, 4))
    a = mlp_inputs(rng)
    np.testing.assert_allclose(run_counted(sdfg, 4, **a), mlp_reference(a), rtol=1e-12, atol=1e-12)


def test_argument_read_in_other_blocks_is_redistributed_grid_to_grid(rng):
    # two kernels (not fused into one that reads both blocks): the second needs x in other ranks' blocks
    sdfg = distributed(P.two_readers, ((0, (4, )), (1, (4, ))), "rev", local_optimize=False)
    moves = entries(sdfg)
    assert [(e.array, e.direction) for e in moves] == [("x", "redistribute")]
    assert moves[0].bytes == 40 * 8  # every rank needs the mirrored block, held by another rank
    x = rng.standard_normal(40)
    np.testing.assert_allclose(run_counted(sdfg, 4, x=x), 2.0 * x + x[::-1], rtol=1e-12, atol=1e-12)


def test_partial_output_is_allreduced_into_every_replica(rng):
    """sum over the columns split on 4 ranks: the rank-local output holds the full sum on every rank."""
    sdfg = distributed(P.sum_rows, (("Reduce.reduce_output", (1, 4)), ), "sum")
    (only, ) = entries(sdfg)
    assert only.direction == "allreduce" and only.calls == ["MPI_Allreduce(MPI_SUM, grid dims (1,))"]
    x = rng.standard_normal((16, 16))
    np.testing.assert_allclose(dp.run(sdfg, 4, x=x), x.sum(axis=1), rtol=1e-12, atol=1e-12)


def test_rank0_code_on_a_distributed_argument_is_refused():
    sdfg = P.two_readers.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match="runs on rank 0"):
        dp.lower(sdfg, {dp.maps(sdfg)[1].name: (4, )}, io="distributed")
    with pytest.raises(ValueError, match="io must be"):
        dp.lower(P.axpy_chain.to_sdfg(), {}, io="everywhere")


def test_layouts_of_a_program_specialized_to_its_sizes_need_no_symbols(rng):
    """A program specialized to its sizes (``sdfg.specialize``, as the NPBench harness does) is called
    without them: its layouts carry the constants, so ``dp.run`` and ``scatter`` need no size argument."""
    import dace
    N = dace.symbol("N")

    @dace.program
    def scaled_rows(x: dace.float64[N, 8], y: dace.float64[N, 8]):
        return 2.0 * x + y

    sdfg = scaled_rows.to_sdfg()
    sdfg.specialize({"N": 12})
    sdfg.name = "t_specialized_rows_dist"
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg)}, io="distributed")
    lay = dp.layout(sdfg, "x")
    assert "N" not in "".join(lay.shape + lay.local_shape) + str(lay.subset)
    assert [lay.block(r) for r in range(2)] == [(slice(0, 6), slice(0, 8)), (slice(6, 12), slice(0, 8))]
    x, y = rng.standard_normal((12, 8)), rng.standard_normal((12, 8))
    np.testing.assert_allclose(dp.run(sdfg, 2, x=x, y=y), 2.0 * x + y, rtol=1e-12, atol=1e-12)


def test_sizes_named_like_sympy_constants_are_sizes(rng):
    """``N``, ``S`` and ``beta`` are sympy's numeric function, singleton registry and beta function to a
    bare ``sympify``: a layout over them must still read them as the program's sizes."""
    import dace
    N, S, beta = dace.symbol("N"), dace.symbol("S"), dace.symbol("beta")

    @dace.program
    def scaled_blocks(x: dace.float64[N, S], y: dace.float64[N, S], z: dace.float64[beta]):
        return 2.0 * x + y

    sdfg = scaled_blocks.to_sdfg()
    sdfg.name = "t_sympy_named_sizes_dist"
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg)}, io="distributed")
    lay = dp.layout(sdfg, "x")
    assert {"N", "S"} <= lay.symbols()
    assert [lay.block(r, N=10, S=3) for r in range(2)] == [(slice(0, 5), slice(0, 3)), (slice(5, 10), slice(0, 3))]
    x, y = rng.standard_normal((10, 3)), rng.standard_normal((10, 3))
    np.testing.assert_allclose(dp.run(sdfg, 2, x=x, y=y, z=np.zeros(4), N=10, S=3, beta=4), 2.0 * x + y,
                               rtol=1e-12, atol=1e-12)


def _lower_distributed(program, grid):
    sdfg = program.to_sdfg()
    dp.lower(sdfg, {m.name: grid[:len(m.params)] for m in dp.maps(sdfg)}, io="distributed")
    return sdfg


def test_a_tile_that_moves_with_a_loop_variable_is_refused():
    """Each rank's tile is one fixed block for the whole call; a window that slides with ``i`` is not."""
    import dace

    @dace.program
    def windows(x: dace.float64[8, 10], out: dace.float64[8, 9]):
        for i in range(9):
            out[:, i] = x[:, i] + x[:, i + 1]

    with pytest.raises(dp.UnsupportedPattern, match=r"depend on i.*loop variable.*io='root'"):
        _lower_distributed(windows, (2, 1))


def test_a_written_argument_whose_tiles_leave_part_of_it_on_no_rank_is_refused():
    """A triangular update (NPBench syr2k's shape) writes only the lower triangle: with rows split, rank 0's
    tile would be the square it touches, so the upper right block of C would be on no rank and lost."""
    import dace

    @dace.program
    def lower_rows(C: dace.float64[8, 8], A: dace.float64[8, 8]):
        for i in range(8):
            C[i, :i + 1] += A[i, :i + 1]

    sdfg = lower_rows.to_sdfg()
    found = dp.maps(sdfg)
    assert found, "the independent triangular loop should be a schedulable map"
    with pytest.raises(dp.UnsupportedPattern, match="leave part of it on no rank"):
        dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in found}, io="distributed")
