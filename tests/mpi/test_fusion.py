"""Communication fusion, no-op case: intermediates between kernels on the same grid stay distributed."""
import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import lowered, run_counted


def mlp_inputs(rng):
    return dict(x=rng.standard_normal((16, 8)), w1=rng.standard_normal((8, 12)), b1=rng.standard_normal(12),
                w2=rng.standard_normal((12, 4)), b2=rng.standard_normal(4))


def data_parallel(program, ranks):
    return tuple((i, (ranks, ) + (1, ) * (len(m.params) - 1)) for i, m in enumerate(dp.maps(program.to_sdfg())))


def comm(sdfg):
    return [(e.direction, e.array) for k in dp.report(sdfg).kernels for e in k.comm]


def test_mlp_data_parallel_has_no_communication_between_layers(rng):
    sdfg = lowered(P.mlp, data_parallel(P.mlp, 4))
    assert sorted(comm(sdfg)) == sorted([("scatter", "x"), ("scatter", "w1"), ("scatter", "b1"), ("scatter", "w2"),
                                         ("scatter", "b2"), ("gather", "__return")])
    for t in ("__tmp0", "__tmp1", "h", "__tmp3"):
        assert t not in sdfg.arrays, f"intermediate {t} should not exist at global size any more"
    a = mlp_inputs(rng)
    ref = np.maximum(a["x"] @ a["w1"] + a["b1"], 0.0) @ a["w2"] + a["b2"]
    np.testing.assert_allclose(run_counted(sdfg, 4, **a), ref, rtol=1e-12, atol=1e-12)


def test_fusion_can_be_turned_off(rng):
    sdfg = P.axpy_chain.to_sdfg()
    sdfg.name = "t_axpy_nofuse"
    dp.lower(sdfg, {m.name: (4, ) for m in dp.maps(sdfg)}, fuse=False, local_optimize=False)  # two kernels
    assert ("gather", "__tmp0") in comm(sdfg) and ("scatter", "__tmp0") in comm(sdfg)
    x, y = rng.standard_normal(40), rng.standard_normal(40)
    np.testing.assert_allclose(dp.run(sdfg, 4, x=x, y=y), 2.0 * x + y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("grids,kind", [(((4, ), (2, )), "redistribute"), (((4, ), (4, )), None),
                                        (((2, ), (4, )), "redistribute")])
def test_different_grids_redistribute_directly(rng, grids, kind):
    """Different blocks: one direct grid-to-grid redistribution, nothing through rank 0."""
    sdfg = lowered(P.axpy_chain, ((0, grids[0]), (1, grids[1])))
    entries = comm(sdfg)
    assert ("gather", "__tmp0") not in entries and ("scatter", "__tmp0") not in entries
    assert (("redistribute", "__tmp0") in entries) == (kind == "redistribute")
    if grids == ((4, ), (2, )):
        # ranks 1, 2, 3 each send their 10 elements to another rank; rank 0 keeps its own
        assert [e.bytes for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"] == [240]
    x, y = rng.standard_normal(40), rng.standard_normal(40)
    np.testing.assert_allclose(dp.run(sdfg, 4, x=x, y=y), 2.0 * x + y, rtol=1e-12, atol=1e-12)


def test_partial_sums_are_reduced_on_the_way(rng):
    """A matmul that splits its contraction leaves partial sums; the next kernel gets them combined
    (reduce-scatter through one Alltoallv), not through a gather and a scatter."""
    sdfg = lowered(P.mlp, ((1, (2, 1, 2)), (2, (4, 1)), (3, (4, 1)), (5, (4, 1, 1)), (6, (4, 1))))
    red = [e for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"]
    assert [(e.array, e.op) for e in red] == [("__tmp0", "sum")]
    assert ("gather", "__tmp0") not in comm(sdfg)
    a = mlp_inputs(rng)
    ref = np.maximum(a["x"] @ a["w1"] + a["b1"], 0.0) @ a["w2"] + a["b2"]
    np.testing.assert_allclose(dp.run(sdfg, 4, **a), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("grids,ranks", [(((2, 2, 1), (4, 1, 1)), 4),
                                         pytest.param(((2, 1, 2), (1, 2, 2)), 4, marks=pytest.mark.slow),
                                         pytest.param(((2, 2, 2), (2, 1, 1)), 8, marks=pytest.mark.slow)])
def test_matmul_chain_on_different_grids(rng, grids, ranks):
    """C = (A @ B) @ D, the two matmuls on different grids: the intermediate moves grid to grid."""
    sdfg = lowered(P.matmul_chain, (("_MatMult_.gemm_map", grids[0]), ("_MatMult_.gemm_map_1", grids[1])))
    (red, ) = [e for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"]
    assert red.array == "__tmp0"
    # final values in block layouts: the synthesizer; partial sums (k split in the first grid): blocks
    assert red.solver == ("synthesized" if grids[0][2] == 1 else "blocks")
    a, b, d = rng.standard_normal((24, 16)), rng.standard_normal((16, 20)), rng.standard_normal((20, 12))
    np.testing.assert_allclose(run_counted(sdfg, ranks, a=a, b=b, d=d), (a @ b) @ d, rtol=1e-11, atol=1e-11)
    if red.solver == "synthesized":  # more ranks than the mesh: the generated code falls back to Alltoallv
        np.testing.assert_allclose(dp.run(sdfg, ranks + 1, a=a, b=b, d=d), (a @ b) @ d, rtol=1e-11, atol=1e-11)


def test_megatron_mlp_one_allreduce(rng):
    """First layer column-split, second row-split (Megatron): nothing moves between the layers; the
    second layer's partial sums reach the replicated bias add by exactly one MPI_Allreduce."""
    sdfg = lowered(P.mlp, (("_MatMult_.gemm_map", (1, 4, 1)), ("_Add__map", (1, 4)), ("_numpy_maximum__map", (1, 4)),
                           ("_MatMult_.gemm_map_1", (1, 1, 4)), ("_Add__map_1", dp.replicate((1, 1), 4))))
    entries = [e for k in dp.report(sdfg).kernels for e in k.comm]
    hidden = P.product_output(P.mlp, "w2")  # h @ w2: __tmp3 (DaCe 1.0.2), h_matmul_w2 (DaCe 2)
    assert {e.array for e in entries} == {"x", "w1", "b1", "w2", "b2", hidden, "__return"}
    calls = [c for e in entries for c in e.calls]
    assert [c for c in calls if "educe" in c] == ["MPI_Allreduce(MPI_SUM, grid dims (2,))"]
    assert not any("Gather" in c or "Alltoall" in c for c in calls)
    (red, ) = [e for e in entries if e.direction == "redistribute"]
    assert red.array == hidden and red.bytes == 4 * 2 * 3 * 16 * 4 * 8 // 4  # 2(p-1)/p of 16x4 doubles per rank
    a = mlp_inputs(rng)
    ref = np.maximum(a["x"] @ a["w1"] + a["b1"], 0.0) @ a["w2"] + a["b2"]
    np.testing.assert_allclose(run_counted(sdfg, 4, **a), ref, rtol=1e-12, atol=1e-12)


def test_megatron_mlp_without_replication_reduces_to_rank_0(rng):
    """The same schedule with the bias add left to rank 0: the partial sums are reduced once, to rank 0."""
    sdfg = lowered(P.mlp, (("_MatMult_.gemm_map", (1, 4, 1)), ("_Add__map", (1, 4)), ("_numpy_maximum__map", (1, 4)),
                           ("_MatMult_.gemm_map_1", (1, 1, 4))))
    entries = [e for k in dp.report(sdfg).kernels for e in k.comm]
    reductions = [c for e in entries for c in e.calls if "Reduce" in c]
    assert reductions == ["MPI_Reduce(MPI_SUM, grid dims (2,))"]
    a = mlp_inputs(rng)
    ref = np.maximum(a["x"] @ a["w1"] + a["b1"], 0.0) @ a["w2"] + a["b2"]
    np.testing.assert_allclose(dp.run(sdfg, 4, **a), ref, rtol=1e-12, atol=1e-12)


def test_fused_softmax_partitioned_along_three_dims(rng):
    """Fused softmax on (2,2,2,1): only the input scatter and the output gather remain; x is scattered
    once although two kernels read it, and e stays distributed although two kernels read it."""
    sdfg = P.fused_softmax4()
    sdfg.name = "t_fused_softmax4"
    dp.lower(sdfg, {m.name: (2, 2, 2, 1) for m in dp.maps(sdfg) if len(m.params) == 4})
    assert sorted(comm(sdfg)) == [("gather", "__return"), ("scatter", "x")]
    x = rng.standard_normal((4, 4, 8, 16)).astype(np.float32)
    e = np.exp(x - x.max(axis=3, keepdims=True))
    np.testing.assert_allclose(run_counted(sdfg, 8, x=x), e / e.sum(axis=3, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_keepdims_copy_between_two_kernels_is_folded_and_moves_nothing(rng):
    """``x - x.max(axis=1, keepdims=True)`` with the reduction writing a view of the ``[N, 1]`` array the
    next map reads (DaCe's simplification leaves that view in some runs only): the copy is folded, so the
    lowering is the one DaCe gives when it removes the view, with no round trip through rank 0, and the
    search predicts it."""
    sdfg = P.keepdims_view_sub()
    schedule = {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}
    predicted = dp.search.predict(sdfg, schedule, 2).bytes_per_rank
    dp.lower(sdfg, schedule)
    assert sorted(comm(sdfg)) == [("gather", "__return"), ("scatter", "x")]
    assert "tmp" not in sdfg.arrays and predicted == dp.report(sdfg).bytes_per_rank() == [480, 480]
    x = rng.standard_normal((12, 10))
    np.testing.assert_array_equal(run_counted(sdfg, 2, x=x), x - x.max(axis=1, keepdims=True))


@pytest.mark.parametrize("ranks", [pytest.param(2, marks=pytest.mark.slow), 4])  # 4 ranks covers 2
def test_megatron_attention_one_allreduce(rng, ranks):
    """Multi-head attention split along heads: no communication through the projections, the scaled
    softmax and the attention; the output projection's partial sums meet in one MPI_Allreduce."""
    sdfg = P.mha.to_sdfg()
    sdfg.name = f"t_mha_heads_{ranks}"
    dp.lower(sdfg, P.head_parallel(sdfg, ranks))
    rep = dp.report(sdfg)
    moves = [(t.array, t.source, t.destination) for t in rep.traffic]
    inputs = {"x", "wq", "wk", "wv", "wo", "bo"}
    sources = [a for a, s, _ in moves if s == "rank 0"]
    assert len(sources) == len(set(sources)) and inputs <= set(sources)  # each input scattered once
    assert all(sdfg.arrays[a].total_size == 1 for a in set(sources) - inputs)  # the scale 1/sqrt(D), from rank 0
    between = [t for t in rep.traffic if t.source != "rank 0" and t.destination != "rank 0"]
    assert [(t.array, t.calls) for t in between] == [("o", ["MPI_Allreduce(MPI_SUM, grid dims (3,))"])]
    assert [t.array for t in rep.traffic if t.destination == "rank 0"] == ["__return"]
    a = dict(x=rng.standard_normal((2, 8, 16)), wq=rng.standard_normal((4, 16, 3)), wk=rng.standard_normal((4, 16, 3)),
             wv=rng.standard_normal((4, 16, 3)), wo=rng.standard_normal((4, 3, 16)), bo=rng.standard_normal(16))
    np.testing.assert_allclose(run_counted(sdfg, ranks, **a), P.mha.f(**a), rtol=1e-11, atol=1e-11)
