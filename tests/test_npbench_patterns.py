"""Patterns from the public NPBench suite, in small programs of our own: each lowers to a valid SDFG and
runs correctly, or is refused in words at ``lower`` (never a crash at build or run time)."""
import dace
import numpy as np
import pytest

import dace_partition as dp

M, N = (dace.symbol(s, dtype=dace.int64) for s in ("M", "N"))


def natural(sdfg, P=2):
    """NPBench's natural schedule: every map whose first extent is an integer >= P on (P, 1, ..)."""
    return {m.name: (P, ) + (1, ) * (len(m.shape) - 1) for m in dp.maps(sdfg)
            if isinstance(m.shape[0], int) and m.shape[0] >= P}


@dace.program
def view_read_in_loop(data: dace.float64[N, M]):
    """covariance: a partitioned map writes ``data``, then a loop reads slices of it through views
    (``data[:, i:M]``) into a matrix-vector product."""
    np.subtract(data, 1.0, out=data)
    cov = np.zeros((M, M), dtype=data.dtype)
    for i in range(M):
        cov[i, i:M] = data[:, i] @ data[:, i:M] / 3.0
    return cov


@pytest.fixture(scope="module")
def view_read_sdfg():
    sdfg = view_read_in_loop.to_sdfg()
    sdfg.specialize(dict(M=6, N=8))
    sdfg.name = "t_npb_view_read_in_loop"
    dp.lower(sdfg, natural(sdfg))
    return sdfg


def test_view_stays_with_the_kernel_that_reads_it(view_read_sdfg):
    """Splitting states keeps a view and the array it views in the state of the kernel that reads it
    (a view left without its view edge is invalid: "Ambiguous or invalid edge to/from a View")."""
    view_read_sdfg.validate()
    for st in view_read_sdfg.all_states():
        for n in st.data_nodes():
            if isinstance(n.desc(view_read_sdfg), dace.data.View):
                assert dace.sdfg.utils.get_view_edge(st, n) is not None, (st.label, n.data)


def test_view_read_in_loop_runs_like_numpy(view_read_sdfg):
    rng = np.random.default_rng(0)
    data = rng.random((8, 6))
    ref_data = data - 1.0
    ref = np.zeros((6, 6))
    for i in range(6):
        ref[i, i:] = ref_data[:, i] @ ref_data[:, i:] / 3.0
    got = dp.run(view_read_sdfg, 2, data=data.copy())
    ret = got[0] if isinstance(got, tuple) else got
    np.testing.assert_allclose(ret, ref, rtol=1e-12)


def test_an_invalid_lowered_graph_is_refused_in_words(monkeypatch):
    """``lower`` validates the lowered copy: a graph DaCe rejects is refused naming the data, and the
    caller's SDFG is unchanged."""
    import dace_partition.api as api
    real = api.partition

    def breaks_a_view(sdfg, *a, **k):
        rep = real(sdfg, *a, **k)
        for st in sdfg.all_states():  # drop the view edge of some view: DaCe rejects the graph
            for n in st.data_nodes():
                if isinstance(n.desc(sdfg), dace.data.View):
                    st.remove_edge(dace.sdfg.utils.get_view_edge(st, n))
                    return rep
        raise AssertionError("no view to break")

    monkeypatch.setattr(api, "partition", breaks_a_view)
    sdfg = view_read_in_loop.to_sdfg()
    sdfg.specialize(dict(M=6, N=8))
    before = (set(sdfg.arrays), sdfg.number_of_nodes())
    with pytest.raises(dp.UnsupportedPattern, match=r"data_\d*'.*not a valid SDFG.*View"):
        dp.lower(sdfg, natural(sdfg))
    assert not dp.api.is_lowered(sdfg) and (set(sdfg.arrays), sdfg.number_of_nodes()) == before
