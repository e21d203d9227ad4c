"""Constraint analysis checked without compiling: the tiling formula, specialised and symbolic sizes,
derived library-node grids, views, triangular loops (the conformance suite runs them end to end)."""
import re

import dace
import numpy as np
import pytest
import sympy

import dace_partition as dp
from dace_partition.analysis.rank_tiling import tile_bounds

N, M = dace.symbol("N"), dace.symbol("M")


@pytest.mark.parametrize("g", [1, 2, 3, 4, 5])
def test_tiles_cover_balanced_rank0_largest(g):
    n_ = dace.symbol("n_")
    for extent in range(g, 41):
        for e in (extent, n_):
            starts, sizes = [], []
            for r in range(g):
                b, s = tile_bounds(e, g, sympy.Integer(r))
                starts.append(int(sympy.sympify(b).subs({n_: extent})))
                sizes.append(int(sympy.sympify(s).subs({n_: extent})))
            assert starts[0] == 0 and sum(sizes) == extent
            assert all(starts[r] + sizes[r] == starts[r + 1] for r in range(g - 1))
            assert max(sizes) - min(sizes) <= 1 and sizes[0] == max(sizes)


@dace.program
def add_one(x: dace.float64[N], y: dace.float64[N]):
    y[:] = x + 1


def test_specialized_size_is_schedulable():
    sdfg = add_one.to_sdfg()
    sdfg.specialize({"N": 64})
    (m, ) = dp.maps(sdfg)
    assert m.shape == (64, )
    dp.lower(sdfg, {m.name: (2, )})
    with pytest.raises(dp.ScheduleError, match="only 64"):
        dp.lower(_specialized(64), {m.name: (65, )})


def _specialized(n):
    sdfg = add_one.to_sdfg()
    sdfg.specialize({"N": n})
    return sdfg


@dace.program
def gemv(A: dace.float64[M, N], x: dace.float64[N]):
    return A @ x


def test_library_grid_derived_with_symbolic_sizes():
    sdfg = gemv.to_sdfg()
    dp.lower(sdfg, {"_MatMult_._GEMV__map": (2, 1)})
    notes = [n for k in dp.report(sdfg).kernels for n in k.notes]
    assert any("derived grid (2,)" in n and "gemv_init_map" in n for n in notes), notes


@dace.program
def scale(alpha: dace.float64, x: dace.float64[N], y: dace.float64[N]):
    y[:] = alpha * x


def test_scalar_argument_moves_as_array():
    sdfg = scale.to_sdfg()
    dp.lower(sdfg, {"_Mult__map": (2, )})
    assert "__dp_arg_alpha" in str(dp.report(sdfg))


@dace.program
def tri(L: dace.float64[N, N]):
    for i in range(N):
        L[i, :i + 1] *= 2.0


def test_triangular_loop_becomes_map_and_is_refused_in_words():
    sdfg = tri.to_sdfg()
    (m, ) = dp.maps(sdfg)  # LoopToMap made the i loop a map
    assert m.params == ("i", )
    with pytest.raises(dp.UnsupportedPattern, match="grows with the grid coordinate"):
        dp.lower(sdfg, {m.name: (2, )})


def test_discovery_reads_only_a_normalised_sdfg():
    """normalise rewrites once (the triangular loop becomes a map); discover then only reads, and refuses
    an SDFG that was not normalised rather than miss the loop's kernel."""
    import json
    from dace_partition.schedule import discover, normalise
    sdfg = tri.to_sdfg()
    with pytest.raises(ValueError, match="normalise"):
        discover(sdfg)
    normalise(sdfg)
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert [m.params for k in discover(sdfg) for m in k.maps] == [("i", )]
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before
    normalise(sdfg)  # a second call changes nothing
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


_REFUSE_SYRK = """
import sys
sys.path.insert(0, {tests!r})
import dace_partition as dp
from conformance.programs import CASES
case = CASES["syrk"]
sdfg = case.program.to_sdfg()
try:
    dp.lower(sdfg, case.schedule(2, dp.maps(sdfg)))
except dp.UnsupportedPattern as e:
    print(e)
"""


def test_a_refusal_names_the_same_array_whatever_the_hash_seed():
    """syrk reads A and C in one triangular kernel; which one a refusal named followed the order of
    DaCe's edges, which changed with PYTHONHASHSEED. Each seed runs in a fresh interpreter."""
    import os
    import subprocess
    import sys
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    said = set()
    for seed in ("1", "3"):
        out = subprocess.run([sys.executable, "-c", _REFUSE_SYRK.format(tests=tests)], capture_output=True,
                             text=True, timeout=300, env={**os.environ, "PYTHONHASHSEED": seed})
        assert "grows with the grid coordinate" in out.stdout, out.stdout + out.stderr
        said.add(out.stdout.strip())
    assert len(said) == 1, said


@dace.program
def view_split(x: dace.float64[N, 2 * M]):
    y = np.reshape(x, (N, 2, M))
    return np.sum(y, axis=2)


def test_reshape_view_is_partitioned():
    sdfg = view_split.to_sdfg()
    sched = {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if str(m.shape[0]) == "N"}
    dp.lower(sdfg, sched)
    assert dp.ranks_needed(sdfg) == 2


@dace.program
def every_other(y: dace.float32[6, 5, 10], out: dace.float32[6, 3, 4]):
    for i, j, k in dace.map[0:6, 0:3, 0:4]:
        with dace.tasklet:
            v << y[i, j + 1, k * 2]
            o >> out[i, j, k]
            o = v


def test_a_strided_subscript_reads_its_whole_span():
    """``y[..., 2 * k]`` over ``k`` in 0:4 reads elements 0 to 6 of the last axis. DaCe 1.0.2 propagates it
    to 0:4, and a rank that got only that box read past its buffer; the scatter now sends 0:7."""
    sdfg = every_other.to_sdfg()
    (m, ) = dp.maps(sdfg)
    dp.lower(sdfg, {m.name: (2, 1, 1)})
    text = str(dp.report(sdfg))
    assert re.search(r"scatter +y\[3\*__dp\d+_r0:3\*__dp\d+_r0 \+ 3, 1:4, 0:7\]", text), text


def test_a_map_body_that_reads_its_own_writes_keeps_one_buffer_per_array():
    """A row's forward sweep writes ``cp[i, j]`` and reads ``cp[i, j - 1]`` in the next step: its reads
    (columns 0:8) and writes (0:9) differ, but the body must find what it wrote, so the two share one
    rank-local buffer of the written block (scattered once, gathered once). Kept apart, the reads came from
    the scattered zeros and every row was wrong on 2 ranks."""
    import programs as P
    sdfg = P.tridiagonal_rows(7, 9).to_sdfg()
    sdfg.name = "t_unit_tridiagonal_buffers"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if len(m.params) == 1})
    text = str(dp.report(sdfg))
    for array in ("cp", "dq", "__return"):
        scatters = re.findall(rf"scatter +{array}\[([^\]]*)\]", text)
        assert len(scatters) == 1 and scatters[0].endswith(", 0:9"), (array, scatters, text)
    assert not re.search(r"__dp\d+_(cp|__return)_(in|out)\b", str(sdfg.arrays.keys()))


@dace.program
def einsum_matvec(a: dace.float64[12, 20], b: dace.float64[20]):
    return np.einsum("ik,k->i", a, b)


@dace.program
def square_einsum_matvec(a: dace.float64[12, 12], b: dace.float64[12]):
    return np.einsum("ik,k->i", a, b)


@dace.program
def row_major_matvec(a: dace.float64[12, 20], b: dace.float64[20]):
    return a @ b


def _blas_products(sdfg):
    from dace.libraries.blas import Gemv, MatMul
    return [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, (Gemv, MatMul))]


def test_a_transposing_view_is_read_through_a_copy_in_its_own_layout():
    """DaCe writes ``einsum('ik,k->i', a, b)`` as a product with a (20, 12) view of ``a`` whose strides are
    (1, 20). Copied element by element into an array of that shape (a reshape's materialisation) it held
    ``a``'s elements in the wrong places; its readers now read a copy made from the view itself, an array
    of the view's shape in C order, so the product can be split like any other."""
    from dace_partition.passes.prepare import materialize_views
    from dace_partition.schedule import normalise
    sdfg = normalise(einsum_matvec.to_sdfg())
    views = {k for k, d in sdfg.arrays.items() if isinstance(d, dace.data.View) and tuple(d.strides) == (1, 20)}
    assert len(views) == 1
    view = views.pop()
    assert view in materialize_views(sdfg)
    assert isinstance(sdfg.arrays[view], dace.data.View)  # the view stays, fed by ``a``
    (node, st), = _blas_products(sdfg)
    read = [e.data.data for e in st.in_edges(node) if sdfg.arrays[e.data.data].shape == (20, 12)]
    assert len(read) == 1 and read[0] != view and tuple(sdfg.arrays[read[0]].strides) == (12, 1)
    assert any(getattr(e.src, "data", None) == view and getattr(e.dst, "data", None) == read[0] for e in st.edges())
    sdfg.validate()


@pytest.mark.parametrize("prog,misread", [(einsum_matvec, True), (square_einsum_matvec, False),
                                          (row_major_matvec, False)])
def test_a_matrix_vector_product_of_a_column_major_matrix_is_left_to_the_pure_expansion(prog, misread):
    """DaCe's BLAS expansion of a Gemv (MKL, OpenBLAS, cuBLAS) swaps the dimensions of a non-square matrix
    stored by columns: found by ``misread_by_blas`` (on the product, before and after it becomes a Gemv),
    and ``expand_all`` expands it though Gemvs are kept; a square or row-major matrix is BLAS's."""
    from dace_partition.schedule.discover import expand_all, expand_misread_by_blas, misread_by_blas
    sdfg = prog.to_sdfg()
    (node, st), = _blas_products(sdfg)
    assert misread_by_blas(node, st) == misread
    node.expand(st.sdfg, st)  # the MatMul becomes its Gemv
    (gemv, st), = _blas_products(sdfg)
    assert type(gemv).__name__ == "Gemv" and misread_by_blas(gemv, st) == misread
    from dace.libraries.blas import Gemv
    expand_all(sdfg, keep=(Gemv, ))
    assert len(_blas_products(sdfg)) == (0 if misread else 1)
    assert expand_misread_by_blas(sdfg) == 0  # nothing left to expand
