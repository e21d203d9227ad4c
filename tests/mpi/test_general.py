"""General constraints (issue 4): uneven tiles, halos, symbolic sizes, indirect access, solver choice."""
import copy
import re

import dace
import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import lowered
from dace_partition.solvers.blocks import BlockSolver


def csr(rng):
    dense = np.zeros((14, 20))
    dense.flat[rng.choice(14 * 20, 60, replace=False)] = rng.standard_normal(60)
    rows, cols = np.nonzero(dense)
    A_row = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=14))]).astype(np.int32)
    return dense, dict(A_row=A_row, A_col=cols.astype(np.int32), A_val=dense[rows, cols])


def solver_of(sdfg, array, direction):
    return [e.solver for k in dp.report(sdfg).kernels for e in k.comm if e.array == array and e.direction == direction]


@pytest.mark.parametrize("ranks", [pytest.param(2, marks=pytest.mark.slow), 4])  # 4 ranks covers 2 (time)
def test_spmv(rng, ranks):
    """b[i] += A_val[j] * x[A_col[j]]: 14 rows on 2 and 4 ranks, a halo on A_row, x read indirectly."""
    sdfg = lowered(P.spmv, ((0, (ranks, )), ))
    dense, args = csr(rng)
    x, b = rng.standard_normal(20), rng.standard_normal(14)
    res = dp.run(sdfg, ranks, x=x, b=b, **args)
    np.testing.assert_allclose(res["b"], b + dense @ x, rtol=1e-12, atol=1e-12)
    assert solver_of(sdfg, "A_row", "scatter") == ["blocks"]  # overlapping blocks [3r, 3r+4)
    assert solver_of(sdfg, "x", "scatter") == ["grid_mapped"]  # indirect: every rank needs all of x


@pytest.mark.parametrize("n,ranks", [(47, 4), (10, 3), (6, 4)])
def test_stencil_symbolic_size(rng, n, ranks):
    """out[i] = x[i-1] + x[i] + x[i+1] over 1:N-1 with N symbolic: one build serves every N, which the call
    does not give: it is read off the arrays' shapes."""
    sdfg = lowered(P.stencil3, ((0, (ranks, )), ))
    x, out = rng.standard_normal(n), rng.standard_normal(n)
    ref = out.copy()
    ref[1:-1] = x[:-2] + x[1:-1] + x[2:]
    res = dp.run(sdfg, ranks, x=x, out=out)
    np.testing.assert_allclose(res["out"], ref, rtol=1e-12, atol=1e-12)


def test_histogram_over_samples(rng):
    sdfg = lowered(P.histogram, ((0, (4, )), ))
    s, h = rng.random(1000), rng.integers(0, 5, 10).astype(np.int64)
    res = dp.run(sdfg, 4, samples=s, hist=h)
    np.testing.assert_array_equal(res["hist"], h + np.bincount((s * 10).astype(int), minlength=10))
    assert "MPI_Reduce(MPI_SUM, grid dims (0,))" in dp.report(sdfg).calls("hist")


def test_count_inside_on_three_ranks(rng):
    sdfg = lowered(P.count_inside, ((0, (3, )), ))
    px, py, c = rng.random(999), rng.random(999), np.array([7], np.int64)
    res = dp.run(sdfg, 3, px=px, py=py, count=c)
    assert res["count"][0] == 7 + np.sum(px * px + py * py <= 1.0)


NX = dace.symbol("NX")


@dace.program
def max_onto_prior(x: dace.float64[NX], out: dace.float64[1]):
    dace.reduce(lambda a, b: max(a, b), x, out)


@dace.program
def sum_onto_prior(x: dace.float64[NX], out: dace.float64[1]):
    dace.reduce(lambda a, b: a + b, x, out)


@pytest.mark.parametrize("program,combine", [(max_onto_prior, max), (sum_onto_prior, lambda a, b: a + b)])
def test_a_reduction_without_an_identity_keeps_the_outputs_prior_value_once(rng, program, combine):
    """``dace.reduce`` without ``identity=`` combines the values with what the output holds. Split over the
    ranks, every rank's partial result must start from the operator's identity and the prior value count
    once; it once started from an uninitialized buffer (a maximum of 8e18 for values below 2)."""
    sdfg = lowered(program, ((0, (3, )), ))
    x = rng.random(10) + 0.5
    for prior in (0.25, 5.0):  # below and above every value
        res = dp.run(sdfg, 3, x=x, out=np.array([prior]))
        expected = combine(prior, float(x.max() if program is max_onto_prior else x.sum()))
        np.testing.assert_allclose(res["out"], [expected], rtol=1e-12)


@dace.program
def smallest_by_choice(x: dace.float64[NX], out: dace.float64[1]):
    dace.reduce(lambda a, b: a if a < b else b, x, out, identity=1e300)


@dace.program
def column_largest_by_choice(x: dace.float64[NX, 4], out: dace.float64[4]):
    for i, j in dace.map[0:NX, 0:4]:
        with dace.tasklet:
            v << x[i, j]
            o >> out(1, lambda p, q: q if p < q else p)[j]
            o = v


def test_a_minimum_and_maximum_spelled_as_a_choice_are_combined_across_ranks(rng):
    """``lambda a, b: a if a < b else b`` is a minimum that DaCe does not read as one (only ``min(a, b)``):
    it was refused where the ranks split the reduced dimension. Read as MPI's MIN and MAX, the ranks'
    partial results are combined: the smallest value, and each column's largest onto its prior value."""
    x = rng.random((10, 4)) - 0.5
    sdfg = lowered(smallest_by_choice, (("Reduce.reduce_values", (3, )), ))
    np.testing.assert_array_equal(dp.run(sdfg, 3, x=x[:, 0].copy(), out=np.zeros(1))["out"], [x[:, 0].min()])
    assert "MPI_Reduce(MPI_MIN, grid dims (0,))" in dp.report(sdfg).calls("out")
    sdfg = lowered(column_largest_by_choice, ((0, (3, 1)), ))
    prior = np.array([-1.0, 0.0, 0.25, 1.0])
    np.testing.assert_array_equal(dp.run(sdfg, 3, x=x, out=prior.copy())["out"], np.maximum(prior, x.max(axis=0)))
    assert "MPI_Reduce(MPI_MAX, grid dims (0,))" in dp.report(sdfg).calls("out")


@dace.program
def running_totals(total: dace.float64[4], seen: dace.float64[NX]):
    for i in dace.map[0:NX]:
        with dace.tasklet:
            o >> total(-1, lambda a, b: a + b)[:]
            v >> seen[i]
            v = o[2] = 1  # DaCe hands v the total before this addition


def test_a_running_total_read_back_from_a_conflict_write_is_refused_where_split_and_runs_unsplit():
    """DaCe's ``writeresult`` test: ``v = o[2] = 1`` adds 1 to ``total[2]`` and gives ``v`` the running
    total before it. Split along ``i``, ranks 1 and 2 counted from 0 (``seen`` of 0, 1, 2, 3 beside rank 0's
    0.5 to 3.5, though ``total`` was right); now refused naming the tasklet, and ``lower(sdfg, ranks=3)``
    keeps the map whole, like DaCe's own program in one process."""
    sdfg = running_totals.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match=r"'total' .*uses the value its write-conflict resolution "
                       r"leaves in 'o' \(a running total.*grid coordinates"):
        dp.lower(sdfg, {dp.maps(sdfg)[0].name: (3, )})
    total, seen = np.full(4, 0.5), np.zeros(12)
    single = running_totals.to_sdfg()
    single.name = "t_running_totals_single"
    single(total=total, seen=seen, NX=12)
    assert sorted(seen) == list(np.arange(12) + 0.5)  # the premise: running totals from the prior 0.5
    sdfg = running_totals.to_sdfg()
    sdfg.name = "t_running_totals_auto"
    dp.lower(sdfg, ranks=3)
    res = dp.run(sdfg, 3, total=np.full(4, 0.5), seen=np.zeros(12))
    np.testing.assert_array_equal(res["total"], total)
    np.testing.assert_array_equal(np.sort(res["seen"]), np.sort(seen))


pair = dace.struct("pair", idx=dace.int32, val=dace.float64)


@dace.program
def largest_with_its_index(x: dace.float64[NX]):
    result = np.ndarray([1], dtype=pair)
    with dace.tasklet:
        init >> result[0]
        init.idx = -1
        init.val = -1e38
    for i in dace.map[0:NX]:
        with dace.tasklet:
            inp << x[i]
            out >> result(1, lambda a, b: pair(val=max(a.val, b.val), idx=(a.idx if a.val > b.val else b.idx)))
            out = pair(idx=i, val=inp)
    return result


vec3 = dace.struct("vec3", x=dace.float32, y=dace.float32, z=dace.float32)


@dace.program
def shifted_vector(A: vec3[1]):
    with dace.tasklet:
        a >> A(1, lambda p, q: vec3(x=p.x + q.x, y=p.y + q.y, z=p.z + q.z))[0]
        a = vec3(x=float(1.0), y=float(2.0), z=float(3.0))


def test_arrays_of_struct_elements_go_in_and_come_back_with_their_fields(rng):
    """DaCe's argmax test returns an array of ``pair`` structs. The call written as plain data passed it as
    raw bytes (NumPy's ``V16``): the right bytes, no fields. Such a program now keeps DaCe's own call, and
    the caller gets ``idx`` and ``val`` back (the map stays whole: the resolution is not one MPI can
    combine). DaCe's struct-reduction test takes a ``vec3`` array: the other ranks were told its dtype as
    ``V12`` and refused it."""
    sdfg = largest_with_its_index.to_sdfg()
    sdfg.name = "t_largest_with_its_index"
    dp.lower(sdfg, ranks=2)
    x = rng.random(12)
    res = dp.run(sdfg, 2, x=x)
    assert res.dtype.names == ("idx", "val")
    assert (res["idx"][0], res["val"][0]) == (np.argmax(x), x.max())
    sdfg = shifted_vector.to_sdfg()
    sdfg.name = "t_shifted_vector"
    dp.lower(sdfg, ranks=2)
    v = np.array([(4.0, 5.0, 6.0)], dtype=np.dtype(vec3.as_numpy_dtype()))
    out = dp.run(sdfg, 2, A=v.copy())["A"]
    assert out.dtype.names == ("x", "y", "z") and tuple(out[0]) == (5.0, 7.0, 9.0)


TI, TJ = dace.symbol("TI"), dace.symbol("TJ")


@dace.program
def second_row_plus_first(data: dace.float64[TI, TJ]):
    for i in range(1, 2):
        for j in dace.map[0:TJ]:
            data[i, j] = data[i, j] + data[i - 1, j]


def test_a_size_that_only_the_lowered_code_uses_is_passed_in_the_compiled_order(rng):
    """``TI`` sizes ``data`` but no statement of the program uses it, so it is not in the argument list of
    the SDFG handed to the compiler; the lowered code uses it (the rank-local blocks of ``data``), and DaCe's
    generated signature, made after expanding that code, takes ``(data, TI, TJ)``. The call written from
    the other list passed ``TJ`` for ``TI`` and left ``TJ`` unset: a block of ``data`` of size -1e9 (DaCe's
    trivial-loop-elimination test program; 300 s without an answer)."""
    sdfg = lowered(second_row_plus_first, ((0, (2, )), ))
    x = rng.random((6, 5))
    expected = x.copy()
    expected[1] += expected[0]
    np.testing.assert_array_equal(dp.run(sdfg, 2, data=x.copy())["data"], expected)


SR, SA, SC, SB, SK = (dace.symbol(n) for n in ("SR", "SA", "SC", "SB", "SK"))


@dace.program
def sparse_times_sparse(ap: dace.int32[SR + 1], ac: dace.int32[SA], av: dace.float64[SA], bp: dace.int32[SC + 1],
                        bc: dace.int32[SB], bv: dace.float64[SB], out: dace.float64[SR, SK]):
    for r in dace.map[0:SR]:
        for a in dace.map[ap[r]:ap[r + 1]]:
            for b in dace.map[bp[ac[a]]:bp[ac[a] + 1]]:
                out[r, bc[b]] += av[a] * bv[b]


def _csr(dense):
    rows, cols = np.nonzero(dense)
    pos = np.searchsorted(rows, np.arange(dense.shape[0] + 1)).astype(np.int32)
    return pos, cols.astype(np.int32), dense[rows, cols]


def test_a_sum_two_bodies_deep_is_combined_across_ranks(rng):
    """A sparse times sparse product: ``+=`` sits in a body nested in a map nested in the split map's body
    (the row ranges come from data), and the memlets outside carry no conflict resolution. Split over the
    rows, every rank holds the whole output; the sum must be found at that depth so the ranks' results are
    added (once it was taken as one rank's copy, and the rows of the others were lost)."""
    a = rng.random((9, 7)) * (rng.random((9, 7)) < 0.4)
    b = rng.random((7, 5)) * (rng.random((7, 5)) < 0.5)
    sdfg = lowered(sparse_times_sparse, ((0, (3, )), ))
    ap, ac, av = _csr(a)
    bp, bc, bv = _csr(b)
    prior = rng.random((9, 5))
    res = dp.run(sdfg, 3, ap=ap, ac=ac, av=av, bp=bp, bc=bc, bv=bv, out=prior.copy(), SC=7)
    np.testing.assert_allclose(res["out"], prior + a @ b, rtol=1e-12)
    assert "MPI_Reduce(MPI_SUM, grid dims (0,))" in dp.report(sdfg).calls("out")


NP_ = dace.symbol("NP_")


@dace.program
def scatter_by_permutation(x: dace.float64[NP_], perm: dace.int64[NP_], out: dace.float64[NP_]):
    for i in dace.map[0:NP_]:
        out[perm[i]] = x[i]


def test_a_write_at_indices_from_data_is_refused_where_split_and_runs_unsplit(rng):
    """``out[perm[i]] = x[i]``: the written box is the whole array, so split along ``i`` every rank would hold
    the whole output and one copy would be written back, dropping the elements the others wrote (garbage
    there, once). A split is refused naming the array and the parameter; ``lower(sdfg, ranks=2)`` keeps
    ``i`` whole and runs like NumPy."""
    sdfg = scatter_by_permutation.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match=r"'out' .*split along 'i' .*does not follow 'i'"):
        dp.lower(copy.deepcopy(sdfg), {m.name: (2, ) for m in dp.maps(sdfg)})
    sdfg.name = "t_scatter_by_permutation_auto"
    dp.lower(sdfg, ranks=2)
    x, perm = rng.random(10), rng.permutation(10).astype(np.int64)
    expected = np.zeros(10)
    expected[perm] = x
    np.testing.assert_array_equal(dp.run(sdfg, 2, x=x, perm=perm, out=np.zeros(10))["out"], expected)


NR = dace.symbol("NR")


@dace.program
def argmax_of_rows(x: dace.float64[NR, 12]):
    return np.argmax(x, axis=1)


ARGMAX_MAPS = ("_argmax_convert__map", "_argmax_reduce__map", "_elementwise__map")


def test_argmax_of_rows_split_along_its_rows(rng):
    """np.argmax resolves write conflicts with a (value, index) lambda that no MPI operator applies. Split
    along the rows, no two ranks write one element: each rank resolves the conflicts in its own rows (10
    rows on 3 ranks, uneven), and ties keep the first index, as in NumPy."""
    sdfg = lowered(argmax_of_rows, tuple((m, (3, ) + (1, ) * (m == ARGMAX_MAPS[1])) for m in ARGMAX_MAPS))
    x = rng.integers(0, 4, (10, 12)).astype(np.float64)  # many ties in every row
    np.testing.assert_array_equal(dp.run(sdfg, 3, x=x), np.argmax(x, axis=1))


def test_argmax_split_across_the_reduced_dimension_is_refused():
    """Split along the 12 columns it reduces over, the ranks would hold partial (value, index) pairs that MPI
    cannot combine: refused before any rank starts, naming the array and the grid coordinate."""
    sdfg = argmax_of_rows.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match=r"'__tmp\w*' .*not a sum, product, min or max.*__dp\d+_r1"):
        dp.lower(sdfg, {ARGMAX_MAPS[1]: (1, 3)})


@dace.program
def merge_rows(x: dace.float64[5, 6, 8], out: dace.float64[30, 8]):
    """x.reshape(30, 8) as the copy map a merge of two axes becomes: the row index is linear, 6*i + j."""
    for i, j, k in dace.map[0:5, 0:6, 0:8]:
        with dace.tasklet:
            a << x[i, j, k]
            b >> out[6 * i + j, k]
            b = a


def test_a_split_of_the_inner_part_of_a_merged_index_is_refused():
    """Split along j, each rank writes every sixth row: its block (a box of rows) holds the other rank's
    rows too, and a block is written back whole. This ran and gave a wrong result; it is refused before any
    rank starts, naming the array and the grid coordinate."""
    sdfg = merge_rows.to_sdfg()
    overlap = r"'out' .*written blocks of two ranks overlap along grid coordinate __dp\d+_r1 .*outermost"
    with pytest.raises(dp.UnsupportedPattern, match=overlap):
        dp.lower(sdfg, {dp.maps(sdfg)[0].name: (1, 2, 1)})


def test_a_split_of_the_outer_part_of_a_merged_index_runs_like_numpy(rng):
    """Split along i (5 rows of blocks on 2 ranks, uneven), the blocks stay apart: every element compared."""
    sdfg = merge_rows.to_sdfg()
    sdfg.name = "merge_rows_outer"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, 1, 1)})
    x = rng.standard_normal((5, 6, 8))
    res = dp.run(sdfg, 2, x=x, out=np.zeros((30, 8)))
    np.testing.assert_array_equal(res["out"] if isinstance(res, dict) else res, x.reshape(30, 8))


@dace.program
def every_other_column(y: dace.float32[6, 5, 10], out: dace.float32[6, 3, 4], back: dace.float32[6, 5, 10]):
    """``out = y[:, 1:4, 0:8:2]`` and ``back`` zeros with ``out`` put back in its place, as maps with the
    strided subscript ``2 * k`` (a slice with a step and its gradient, in a training step's trace)."""
    for i, j, k in dace.map[0:6, 0:3, 0:4]:
        with dace.tasklet:
            v << y[i, j + 1, k * 2]
            o >> out[i, j, k]
            o = v
    for i, j, k in dace.map[0:6, 0:5, 0:10]:
        with dace.tasklet:
            z >> back[i, j, k]
            z = 0
    for i, j, k in dace.map[0:6, 0:3, 0:4]:
        with dace.tasklet:
            v << out[i, j, k]
            o >> back[i, j + 1, k * 2]
            o = v


@pytest.mark.parametrize("axis", [0, 2])
def test_strided_reads_and_writes_split_along_an_axis_run_like_numpy(rng, axis):
    """Split along the batch, every rank reads and writes the whole strided span of its rows (DaCe's
    propagation gives ``0:4`` for ``2 * k``: a rank read past its buffer, or freed a corrupted heap); split
    along ``k``, the written boxes leave gaps that keep the zeros written before."""
    sdfg = every_other_column.to_sdfg()
    dp.lower(sdfg, {m.name: tuple(2 if d == axis else 1 for d in range(3)) for m in dp.maps(sdfg)})
    y = rng.random((6, 5, 10)).astype(np.float32)
    out = dp.run(sdfg, 2, timeout=120, y=y, out=np.zeros((6, 3, 4), np.float32),
                 back=np.full((6, 5, 10), 7.0, np.float32))
    back = np.zeros_like(y)
    back[:, 1:4, 0:8:2] = y[:, 1:4, 0:8:2]
    np.testing.assert_array_equal(out["out"], y[:, 1:4, 0:8:2])
    np.testing.assert_array_equal(out["back"], back)


@dace.program
def scan_rows_in_place(d: dace.float64[7, 9], x: dace.float64[7, 9]):
    """A recurrence along each row, in place: column 0 is read and never written."""
    for i in dace.map[0:7]:
        for j in range(1, 9):
            x[i, j] = d[i, j] + 0.5 * x[i, j - 1]


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_recurrence_along_rows_in_place_runs_like_numpy(rng, ranks):
    """Each iteration of the map reads what it wrote a step before (``x[i, j - 1]``), and reads a column it
    never writes: its reads and writes take one buffer of the rows' whole width, split along the rows."""
    sdfg = scan_rows_in_place.to_sdfg()
    sdfg.name = f"scan_rows_in_place_{ranks}"
    dp.lower(sdfg, {m.name: (ranks, ) for m in dp.maps(sdfg)})
    d, x = rng.random((7, 9)), rng.random((7, 9))
    expected = x.copy()
    for j in range(1, 9):
        expected[:, j] = d[:, j] + 0.5 * expected[:, j - 1]
    np.testing.assert_allclose(dp.run(sdfg, ranks, d=d, x=x)["x"], expected, rtol=1e-14, atol=0)


@dace.program
def running_sums_down_columns(x: dace.float64[10, 12]):
    """A recurrence down each column: the map body gets ``x[1:10, j]`` as an array of 9 elements whose
    stride is a row of the array."""
    for j in dace.map[0:12]:
        for i in range(1, 10):
            x[i, j] = x[i, j] + x[i - 1, j]


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_recurrence_down_columns_split_along_the_columns_runs_like_numpy(rng, ranks):
    """Split along the columns, a rank's buffer has rows of 12 / P elements: the body's arrays take the
    buffer's row stride, not the global array's (with it, the body ran past the buffer and corrupted the
    heap: SIGABRT)."""
    sdfg = running_sums_down_columns.to_sdfg()
    sdfg.name = f"running_sums_down_columns_{ranks}"
    dp.lower(sdfg, {m.name: (ranks, ) for m in dp.maps(sdfg)})
    x = rng.random((10, 12))
    np.testing.assert_allclose(dp.run(sdfg, ranks, x=x)["x"], np.cumsum(x, axis=0), rtol=1e-14, atol=0)


@dace.program
def elements_until_sum_reaches(x: dace.float64[14, 9], count: dace.int64[14]):
    """How many elements of each row add up to 2: a ``while`` loop per row, whose counter indexes the row
    (DaCe passes the body the whole array and reads it on interstate edges)."""
    for i in dace.map[0:14]:
        j = 0
        s = 0.0
        while j < 9 and s < 2.0:
            s += x[i, j]
            j += 1
        count[i] = j


@pytest.mark.parametrize("grid", [1, 2])
def test_a_while_loop_per_row_runs_like_numpy(rng, grid):
    """On one rank and split over two: the body's reads of ``x[i, j]`` are relative to the row it is given
    (they read row ``2 * i`` before, even with nothing split)."""
    sdfg = elements_until_sum_reaches.to_sdfg()
    sdfg.name = f"elements_until_sum_reaches_{grid}"
    dp.lower(sdfg, {m.name: (grid, ) for m in dp.maps(sdfg)})
    x = rng.random((14, 9))
    expected = np.minimum(np.argmax(np.cumsum(x, axis=1) >= 2.0, axis=1) + 1, 9)
    expected[np.cumsum(x, axis=1)[:, -1] < 2.0] = 9
    got = dp.run(sdfg, 2, x=x, count=np.zeros(14, dtype=np.int64))["count"]
    np.testing.assert_array_equal(got, expected)


@dace.program
def halvings_to_pass(target: dace.float64[NX], steps: dace.int64[NX], limit: dace.int64):
    for i in dace.map[0:NX]:
        x = 0.0
        k = 0
        while x < target[i] and k < limit:
            x = x * 0.5 + 1.0
            k = k + 1
        steps[i] = k


def test_a_scalar_argument_in_a_while_condition_of_a_split_map_runs_like_numpy(rng):
    """The loop's bound is a scalar argument that the map body's condition reads by value. The lowering
    hands scalar arguments to kernels as one-element arrays; the body must still take it as a scalar (it
    became a pointer there and the condition compared a pointer with an integer: a C++ compile error).
    Targets at or above 2, the iteration's limit, stop at ``limit``."""
    sdfg = halvings_to_pass.to_sdfg()
    dp.lower(sdfg, {m.name: (3, ) for m in dp.maps(sdfg)})
    target = rng.random(20) * 2.5
    limit = 25

    def steps(t):
        x, k = 0.0, 0
        while x < t and k < limit:
            x, k = x * 0.5 + 1.0, k + 1
        return k

    expected = [steps(t) for t in target]
    assert limit in expected and len(set(expected)) > 2
    got = dp.run(sdfg, 3, target=target, steps=np.zeros(20, np.int64), limit=np.int64(limit))["steps"]
    np.testing.assert_array_equal(got, expected)


def weighted_three_point_sdfg():
    """y[i] = sum_k W[k] * x[i - 1 + k] over 1:N-1, built by API with the weights an array constant of the
    SDFG (``sdfg.add_constant``), read inside the tasklet as DaCe's stencil sample does."""
    sdfg = dace.SDFG("weighted_three_point")
    sdfg.add_array("x", [NX], dace.float64)
    sdfg.add_array("y", [NX], dace.float64)
    sdfg.add_constant("W", np.array([0.25, 0.5, 0.125]))
    state = sdfg.add_state()
    state.add_mapped_tasklet("weighted", dict(i="1:NX-1"), dict(a=dace.Memlet("x[i-1:i+2]")),
                             "b = 0\nfor k in range(3):\n    b += a[k] * W[k]", dict(b=dace.Memlet("y[i]")),
                             external_edges=True)
    return sdfg


def test_an_array_constant_of_the_sdfg_is_not_taken_for_a_size(rng):
    """Constants that fix sizes are substituted into map extents; an array constant is data, not a size
    (it raised a TypeError from inside the planner before)."""
    sdfg = weighted_three_point_sdfg()
    dp.lower(sdfg, {m.name: (3, ) for m in dp.maps(sdfg)})
    assert [k.grid for k in dp.report(sdfg).kernels] == [(3, )]
    x, y = rng.random(20), rng.random(20)
    expected = y.copy()
    expected[1:-1] = 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.125 * x[2:]
    np.testing.assert_allclose(dp.run(sdfg, 3, x=x, y=y)["y"], expected, rtol=1e-13)


@dace.program
def channels_of_one_result(q: dace.float64[TI, TJ], c: dace.float64[TI, TJ], out: dace.float64[TI, TJ, 2]):
    t = -q
    out[:, :, 0] = t
    out[:, :, 1] = t * c


def test_a_copy_beside_a_map_that_writes_the_same_array_runs_after_it(rng):
    """DaCe puts ``out[:, :, 0] = t`` (a copy) and the map of ``out[:, :, 1] = t * c`` in one state, the
    copy between two access nodes of the map's own. The kernel's state held the copy too, and pointing the
    map at its rank-local buffers left the copy naming ``out`` between renamed nodes: an invalid SDFG
    (dpbench's rambo). The copy runs in a state of its own after the kernel."""
    sdfg = channels_of_one_result.to_sdfg()
    dp.lower(sdfg, {m.name: (3, 1) for m in dp.maps(sdfg)})
    assert {k.grid for k in dp.report(sdfg).kernels} == {(3, 1)}  # DaCe 1.0.2: two maps, DaCe 2: one
    q, c = rng.random((11, 5)), rng.random((11, 5))
    got = dp.run(sdfg, 3, q=q, c=c, out=np.zeros((11, 5, 2)))["out"]
    np.testing.assert_allclose(got, np.stack([-q, -q * c], axis=2), rtol=1e-14)


@dace.program
def gate_gradient_sums(x: dace.float64[5, 12, 14], h: dace.float64[5, 8], g: dace.float64[5, 12]):
    for t in range(5):
        h[t] = np.sum(x[t, :, 6:], 0)
        g[t] = np.sum(x[t, :, 6:], axis=1)


@pytest.mark.parametrize("grid", [1, 3])
def test_sums_over_an_axis_of_an_indexed_slice_run_like_numpy(rng, grid):
    """``np.sum(x[t, :, 6:], 0)`` (cuPyNumeric's LSTM backward sums ``dHin[t, :, word_size:]`` so): DaCe
    1.0.2 alone sums over ``t``'s one element (a copy: a wrong result) and cannot build the ``axis=1`` sum;
    the lowering gives the reductions the slice's axes. The reduction over the 12 rows is split over ``grid``
    ranks."""
    sdfg = gate_gradient_sums.to_sdfg()
    sdfg.name = f"gate_gradient_sums_{grid}"
    dp.lower(sdfg, {m.name: (grid, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if m.shape[0] == 12})
    x = rng.random((5, 12, 14))
    got = dp.run(sdfg, 3, x=x, h=np.zeros((5, 8)), g=np.zeros((5, 12)))
    np.testing.assert_allclose(got["h"], x[:, :, 6:].sum(axis=1), rtol=1e-13)
    np.testing.assert_allclose(got["g"], x[:, :, 6:].sum(axis=2), rtol=1e-13)


@dace.program
def contractions_to_a_vector(a: dace.float64[12, 20], b: dace.float64[20], c: dace.float64[12, 6, 5],
                             d: dace.float64[6, 5]):
    return np.einsum("ik,k->i", a, b) + np.einsum("ikl,kl->i", c, d)


@pytest.mark.parametrize("split", [False, True])
def test_einsum_contractions_to_a_vector_run_like_numpy(rng, split):
    """DaCe writes each einsum as a product with a transposing view of ``a`` / ``c`` (strides (1, 20),
    (1, 30)). The lowering copied such a view into an array element by element (wrong places), and DaCe's
    BLAS call of the product swaps a column-major matrix's dimensions (MKL: a wrong result or a crash, in
    one process too). Unsplit and with every map over the 12 rows split over 3 ranks."""
    sdfg = contractions_to_a_vector.to_sdfg()
    sdfg.name = f"contractions_to_a_vector_{int(split)}"
    dp.lower(sdfg, {m.name: (3, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)
                    if split and m.shape[0] == 12})
    assert any(k.grid for k in dp.report(sdfg).kernels) == split
    a, b, c, d = rng.random((12, 20)), rng.random(20), rng.random((12, 6, 5)), rng.random((6, 5))
    got = dp.run(sdfg, 3, a=a, b=b, c=c, d=d)
    np.testing.assert_allclose(got, a @ b + np.einsum("ikl,kl->i", c, d), rtol=1e-13)


@dace.program
def fortran_ordered_matvec(a: dace.data.Array(dace.float64, [12, 20], strides=[1, 12]), v: dace.float64[20]):
    return a @ v


def test_a_fortran_ordered_parameter_takes_a_fortran_ordered_array(rng):
    """``run`` handed the ranks every array in C order, so a parameter declared with Fortran strides was
    rejected on the other ranks (and named the wrong remedy); the product itself is a column-major GEMV,
    which DaCe's BLAS call gets wrong (left to the pure expansion). A C-ordered array is refused before any
    rank starts, naming np.asfortranarray."""
    sdfg = fortran_ordered_matvec.to_sdfg()
    dp.lower(sdfg, {})
    a, v = np.asfortranarray(rng.random((12, 20))), rng.random(20)
    np.testing.assert_allclose(dp.run(sdfg, 2, a=a, v=v), a @ v, rtol=1e-13)
    with pytest.raises(ValueError, match="np.asfortranarray"):
        dp.run(sdfg, 2, a=np.ascontiguousarray(a), v=v)


def density_slope(salt, temp, p):
    rho0 = 1024.0
    beta = 0.78e-3
    return beta * rho0 * np.ones_like(temp)


@dace.program
def calls_a_function_that_ignores_arguments(salt: dace.float64[24, 8, 4, 3], temp: dace.float64[24, 8, 4, 3],
                                            p: dace.float64[4], out: dace.float64[24, 8, 4]):
    out[:] = temp[:, :, :, 0] * density_slope(salt[:, :, :, 0], temp[:, :, :, 0], np.abs(p))


def scaled_by_its_first_element(salt, temp, p):
    rho0 = 1024.0
    beta = 0.78e-3
    t = beta * rho0 * np.ones_like(temp)
    s = t[0, 0, 0] + rho0
    return t * s


@dace.program
def calls_a_function_that_reads_a_map_result_outside_its_maps(salt: dace.float64[24, 8, 4, 3],
                                                              temp: dace.float64[24, 8, 4, 3],
                                                              p: dace.float64[4], out: dace.float64[24, 8, 4]):
    out[:] = temp[:, :, :, 0] * scaled_by_its_first_element(salt[:, :, :, 0], temp[:, :, :, 0], np.abs(p))


def _split_along_rows(sdfg):
    return {m.name: (2, ) + (1, ) * (len(m.shape) - 1) for m in dp.maps(sdfg) if m.shape[0] == 24}


def test_a_called_function_with_a_scalar_of_its_own_and_arguments_it_ignores_splits_like_its_maps(rng):
    """pyhpc's isoneutral mixing calls ``get_drhodS(salt, temp, p)``, which computes ``betaS * rho0`` outside
    its maps and reads neither ``salt`` nor ``p``: the call stays a nested program whose maps split, every
    rank computing the scalar itself, and the ignored arguments are dropped instead of refused. A value the
    split maps wrote, read outside them, is still refused in words (a rank holds only its block of it)."""
    sdfg = calls_a_function_that_ignores_arguments.to_sdfg()
    sdfg.name = "t_general_ignored_arguments"
    dp.lower(sdfg, _split_along_rows(sdfg))
    assert re.search(r"nested '\w*density_slope\S*' on grid \(2, 1, 1\)", str(dp.report(sdfg)))
    args = dict(salt=rng.random((24, 8, 4, 3)), temp=rng.random((24, 8, 4, 3)), p=rng.random(4),
                out=np.zeros((24, 8, 4)))
    got = dp.run(sdfg, 2, **args)["out"]
    np.testing.assert_allclose(got, args["temp"][:, :, :, 0] * 0.78e-3 * 1024.0, rtol=1e-14)
    other = calls_a_function_that_reads_a_map_result_outside_its_maps.to_sdfg()
    with pytest.raises(dp.ScheduleError, match=r"'\w*scaled_by_its_first_element' accesses 't' outside of its maps"):
        dp.lower(other, _split_along_rows(other))


@dace.program
def conjugate_gradients(A: dace.float64[24, 24], b: dace.float64[24], tol: dace.float64, x: dace.float64[24],
                        r0_in: dace.float64[24]):
    x[:] = 0
    r0 = b - A @ x
    p = np.copy(r0)
    for i in range(40):
        Ap = A @ p
        a = np.dot(r0, r0) / np.dot(p, Ap)
        x += a * p
        r1 = r0 - a * Ap
        if np.sqrt(np.dot(r1, r1)) < tol:
            break
        beta = np.dot(r1, r1) / np.dot(r0, r0)
        p[:] = r1 + beta * p
        r0[:] = r1
    r0[1:] = r0[:-1] + r0_in[1:]  # r0 read and written apart (buffers r0_in, r0_out) beside r0_in
    x[:] += r0


def test_arrays_named_like_a_grid_coordinate_or_another_buffer_get_buffers_of_their_own(rng):
    """CuPy's conjugate-gradient example names its residual ``r0``: the rank-local buffer of ``r0`` in
    kernel 2 took the name of that kernel's grid coordinate (``__dp2_r0``), and DaCe refused the array
    (FileExistsError from inside the lowering). ``r0_in`` (read and written apart, beside ``r0``) checks that
    two buffers cannot share a name either. Every map split over 2 ranks; the solution and ``r0_in`` match
    NumPy's."""
    sdfg = conjugate_gradients.to_sdfg()
    sdfg.name = "t_general_cg_named_r0"
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.shape) - 1) for m in dp.maps(sdfg) if m.shape[0] == 24})
    assert any(re.fullmatch(r"__dp\d+_r0_", n) for n in sdfg.arrays)  # a buffer of r0, beside the coordinate
    M = rng.random((24, 24))
    args = dict(A=M @ M.T + 24 * np.eye(24), b=rng.random(24), tol=1e-12, x=np.zeros(24), r0_in=rng.random(24))
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    conjugate_gradients.f(**want)
    got = dp.run(sdfg, 2, **args)
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-10, atol=1e-12)


@dace.program
def linear_algebra(a: dace.float64[16, 16], b: dace.float64[16, 3], c: dace.float64[16, 16],
                   s: dace.float64[16, 16], x: dace.float64[16, 3], y: dace.float64[16, 16],
                   low: dace.float64[16, 16]):
    x[:] = np.linalg.solve(a, b)
    y[:] = np.linalg.inv(a) @ c
    low[:] = np.linalg.cholesky(s)


@pytest.mark.parametrize("split", [False, True])
def test_linalg_solve_inverse_and_cholesky_run_like_numpy(rng, split):
    """DaCe's LAPACK nodes default to OpenBLAS while the program's BLAS calls take the toolchain's MKL;
    one build naming both failed in CMake (``BLA_VENDOR`` redefined). They now take the same library.
    Split: the product with the inverse on 2 ranks, the LAPACK calls whole on each rank."""
    if dp.runtime.toolchain.blas().blas is dp.runtime.toolchain.Blas.PURE:
        pytest.skip("no BLAS/LAPACK library in this environment (make install brings MKL)")
    sdfg = linear_algebra.to_sdfg()
    sdfg.name = f"t_general_linalg_{split}"
    if split:
        product = {m.name: (2, ) + (1, ) * (len(m.shape) - 1) for m in dp.maps(sdfg) if "gemm" in m.name}
        assert len(product) == 2, dp.maps(sdfg)
        dp.lower(sdfg, product)
    else:
        dp.lower(sdfg, ranks=2)
    a = rng.random((16, 16)) + 16 * np.eye(16)
    m = rng.random((16, 16))
    args = dict(a=a, b=rng.random((16, 3)), c=rng.random((16, 16)), s=m @ m.T + 16 * np.eye(16),
                x=np.zeros((16, 3)), y=np.zeros((16, 16)), low=np.zeros((16, 16)))
    out = dp.run(sdfg, 2, **args)
    np.testing.assert_allclose(out["x"], np.linalg.solve(a, args["b"]), rtol=1e-10)
    np.testing.assert_allclose(out["y"], np.linalg.inv(a) @ args["c"], rtol=1e-10)
    np.testing.assert_allclose(out["low"], np.linalg.cholesky(args["s"]), rtol=1e-10, atol=1e-14)


@dace.program
def strided_read(x: dace.int64[128], out: dace.int64[64]):
    for i in dace.map[0:64]:
        out[i] = x[2 * i]


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_strided_read_split_along_its_map_gets_the_span_of_its_rows(ranks):
    """``x[2 * i]`` over a rank's rows of ``i`` reads every other element of one contiguous span of ``x``:
    the scatter sends that span (its gaps too), as a rank-local buffer holds a contiguous block."""
    sdfg = strided_read.to_sdfg()
    sdfg.name = f"t_general_strided_read_{ranks}"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (ranks, )})
    step = 128 // ranks
    assert f"x[{step}*__dp0_r0:{step}*__dp0_r0 + {step - 1}]" in str(dp.report(sdfg))
    x = np.arange(128, dtype=np.int64) * 3
    np.testing.assert_array_equal(dp.run(sdfg, ranks, x=x, out=np.zeros(64, np.int64))["out"], x[::2])


@pytest.mark.parametrize("n,ranks", [(10, 3), pytest.param(10, 4, marks=pytest.mark.slow),  # each size uneven on
                                     pytest.param(37, 3, marks=pytest.mark.slow), (37, 4),  # 3 or 4 ranks: the
                                     (1000, 3), pytest.param(1000, 4, marks=pytest.mark.slow)])  # rest -m slow
def test_elementwise_uneven(rng, n, ranks):
    prog = P.elementwise(n)
    sdfg = lowered(prog, tuple((i, (ranks, )) for i in range(len(dp.maps(prog.to_sdfg())))), tag=f"_{n}")
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    np.testing.assert_allclose(dp.run(sdfg, ranks, x=x, y=y), x * y + 1, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,grid", [(10, (3, 1, 1)), (37, (2, 2, 1)), (37, (1, 1, 3)),
                                    pytest.param(37, (2, 1, 2), marks=pytest.mark.slow),  # (time: the
                                    pytest.param(1000, (4, 1, 1), marks=pytest.mark.slow),  # others cover
                                    pytest.param(1000, (3, 1, 1), marks=pytest.mark.slow)])  # a split of k, an uneven row split)
def test_matmul_uneven(rng, n, grid):
    sdfg = lowered(P.matmul_n(n), (("_MatMult_.gemm_map", grid), ), tag=f"_{n}")
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    np.testing.assert_allclose(dp.run(sdfg, int(np.prod(grid)), a=a, b=b), a @ b, rtol=1e-10, atol=1e-10)
    uneven = any(n % g for g in grid)
    notes = [note for k in dp.report(sdfg).kernels for note in k.notes]
    assert uneven == any("pure expansion" in note for note in notes)
    # the expansion's product is a GEMM on BLAS again, of this rank's exact block (naive loops before)
    assert uneven == any("'_MatMult_.gemm_map'" in note and "GEMM on BLAS" in note for note in notes), notes


@pytest.mark.parametrize("schedule,ranks", [(((0, (2, )), ), 2), (((0, (4, )), ), 4), ((("_Add__map", (2, 2, 2)), ), 8)])
def test_core_programs_choose_solver_automatically(rng, schedule, ranks):
    """Earlier programs still take the cheapest solver: grid-mapped wherever blocks are even."""
    prog = P.offset_read if ranks < 8 else P.bcast_add
    sdfg = lowered(prog, schedule)
    assert {e.solver for k in dp.report(sdfg).kernels for e in k.comm} == {"grid_mapped"}


class Tracing(BlockSolver):
    """A third-party solver: the block solver under another name."""
    name = "tracing_blocks"


def test_custom_solver_first_in_order(rng):
    sdfg = P.add5.to_sdfg()
    sdfg.name = "t_custom_solver"
    dp.lower(sdfg, {"_Add__map": (4, )}, solvers=[Tracing(), "grid_mapped"])
    assert solver_of(sdfg, "x", "scatter") == ["tracing_blocks"]
    x = rng.integers(0, 100, 64).astype(np.int64)
    np.testing.assert_array_equal(dp.run(sdfg, 4, x=x), x + 5)


def test_entry_point_solvers_are_loaded(monkeypatch):
    from importlib import metadata

    from dace_partition.solvers import registry
    ep = metadata.EntryPoint(name="tracing", value="test_general:Tracing", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group=None: [ep] if group else {})
    names = [s.name for s in registry.resolve_solvers(None)]
    # built-ins first (specific before general), plug-ins after them
    assert names[:6] == ["grid_mapped", "hierarchical", "allreduce", "synthesized", "halo", "blocks"]
    assert names[-1] == "tracing_blocks"


def test_report_names_refusals():
    rep = str(dp.report(lowered(P.spmv, ((0, (4, )), ))))
    assert "grid_mapped refused: the block size of dimension 0 depends on the grid coordinate" in rep
