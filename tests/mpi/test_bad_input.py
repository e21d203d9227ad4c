"""Bad input gets a clear error before any rank starts; a failure at run time ends every rank."""
import copy
import os
import re
import time

import dace
import numpy as np
import pytest

import dace_partition as dp
import programs as P
from dace_partition.ir import is_lowered
from conftest import lowered, mpi_script


def test_unknown_map():
    with pytest.raises(dp.ScheduleError, match="unknown map 'nope'.*known maps"):
        dp.lower(P.add5.to_sdfg(), {"nope": (2, )})


def test_grid_length_mismatch():
    with pytest.raises(dp.ScheduleError, match=r"has 2 dimension\(s\), but the map has 1"):
        dp.lower(P.add5.to_sdfg(), {"_Add__map": (2, 2)})


def test_grid_larger_than_extent():
    with pytest.raises(dp.ScheduleError, match="into 128 parts, but its extent is only 64"):
        dp.lower(P.add5.to_sdfg(), {"_Add__map": (128, )})


@pytest.mark.parametrize("grid,msg", [((2.5, ), "non-integer"), ((0, ), "non-positive"), ((-2, ), "non-positive"),
                                      (("2", ), "non-integer")])
def test_bad_grid_entries(grid, msg):
    with pytest.raises(dp.ScheduleError, match=msg):
        dp.lower(P.add5.to_sdfg(), {"_Add__map": grid})


@dace.program
def strided(x: dace.int64[64], out: dace.int64[64]):
    for i in dace.map[0:64:2]:
        out[i] = x[i] + 1


def test_strided_map_is_refused():
    with pytest.raises(dp.ScheduleError, match="step 2.*strided maps is not supported"):
        sdfg = strided.to_sdfg()
        dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, )})


NP = dace.symbol("NP")


@dace.program
def pairs_by_slices(x: dace.float64[2 * NP], y: dace.float64[NP]):
    y[:] = x[::2] + x[1::2]


@dace.program
def pairs_by_map(x: dace.float64[2 * NP], y: dace.float64[NP]):
    for i in dace.map[0:NP]:
        y[i] = x[2 * i] + x[2 * i + 1]


@pytest.mark.skipif(dace.__version__.startswith("2"), reason="DaCe 2 keeps the stride (its result is right)")
@pytest.mark.parametrize("simplify", [True, False])
def test_a_strided_slice_whose_stride_dace_drops_is_refused(simplify):
    """DaCe 1.0.2 drops the stride of ``x[::2]`` (even in one process it adds x[i] + x[i + 1]): ``lower``
    refuses the program in words, naming the array and the strided access, and the map that says the same
    is lowered and computes NumPy's result."""
    sdfg = pairs_by_slices.to_sdfg(simplify=simplify)
    if simplify:  # the premise: DaCe's own wrong result, which lower must not distribute
        x, y = np.arange(16.0), np.zeros(8)
        copy.deepcopy(sdfg)(x=x, y=y, NP=8)
        assert not np.array_equal(y, x[::2] + x[1::2])
    with pytest.raises(dp.UnsupportedPattern, match=r"'x(_0)?' .*strided slice .* x\[2 \* i\]"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    with pytest.raises(dp.UnsupportedPattern, match="strided slice"):
        dp.lower(pairs_by_slices.to_sdfg(simplify=simplify), {m.name: (2, ) for m in dp.maps(sdfg)})


def test_the_strided_access_written_as_a_map_runs_like_numpy():
    sdfg = pairs_by_map.to_sdfg()
    sdfg.name = "t_bad_pairs_by_map"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)})
    x = np.random.default_rng(0).random(22)
    np.testing.assert_array_equal(dp.run(sdfg, 2, x=x, y=np.zeros(11), NP=11)["y"], x[::2] + x[1::2])


NT, MT = dace.symbol("NT"), dace.symbol("MT")


@dace.program
def rows_scan_then_copy_one_name(d: dace.float64[NT, MT]):
    x = np.zeros((NT, MT), dtype=np.float64)
    y = np.zeros((NT, MT), dtype=np.float64)
    for i in dace.map[0:NT]:
        x[i, 0] = d[i, 0]
        for j in range(1, MT):
            x[i, j] = d[i, j] + x[i, j - 1]
        for j in range(0, MT):
            y[i, j] = 2.0 * x[i, j]
    return y


@pytest.mark.skipif(dace.__version__.startswith("2"), reason="DaCe 2 passes map bodies whole arrays (its result is right)")
@pytest.mark.parametrize("case", ["one_variable_two_ranges", "symbolic_loop_bounds"])
def test_a_map_body_whose_arguments_dace_misplaces_is_refused(case):
    """DaCe 1.0.2 counts a map body's array from its loop's first index, and passes it elements from another
    place when two loops share a variable name with different ranges, or when the loop bounds are symbolic
    (it falls back to the whole row, from 0): even one process computes a wrong result. ``lower`` refuses
    both in words, naming the array and the cause, and leaves the SDFG as it was."""
    n, m = 7, 9
    if case == "one_variable_two_ranges":
        sdfg = rows_scan_then_copy_one_name.to_sdfg()
        args, sizes = dict(d=np.random.default_rng(0).random((n, m))), dict(NT=n, MT=m)
        expected = 2.0 * np.cumsum(args["d"], axis=1)
        match = r"'__return' .*share the loop variable 'j' with different ranges .*own variable name"
    else:
        sdfg = P.tridiagonal_rows(NT, MT).to_sdfg()
        (args, expected), sizes = P.tridiagonal_inputs(n, m), dict(NT=n, MT=m)
        match = r"'\w+' .*shape \(MT - 1,\) counted from its loop's first index.*sizes as numbers"
    single = copy.deepcopy(sdfg)
    single.name = f"t_bad_misplaced_{case}_single"
    assert not np.allclose(single(**args, **sizes), expected)  # the premise: DaCe's own wrong result
    with pytest.raises(dp.UnsupportedPattern, match=match):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)


def test_a_tridiagonal_solve_per_row_with_numeric_sizes_runs_like_numpy():
    """The refusal's advice taken (sizes as numbers, a variable per loop): rows split over the ranks, every
    row matches NumPy's dense solve of its tridiagonal system."""
    n, m = 7, 9
    sdfg = P.tridiagonal_rows(n, m).to_sdfg()
    sdfg.name = "t_bad_tridiagonal_rows"
    dp.lower(sdfg, {mp.name: (2, ) for mp in dp.maps(sdfg) if len(mp.params) == 1})
    args, expected = P.tridiagonal_inputs(n, m)
    np.testing.assert_allclose(dp.run(sdfg, 2, **args), expected, rtol=1e-12, atol=1e-12)


@dace.program
def count_above(x: dace.float64[NT, MT], t: dace.float64):
    return np.sum(x > t)


@dace.program
def count_above_as_integers(x: dace.float64[NT, MT], t: dace.float64):
    return np.sum((x > t).astype(np.int64))


def test_a_sum_of_a_boolean_array_is_refused_and_its_integer_form_runs_like_numpy():
    """DaCe sums ``x > t`` into a bool (1.0.2 and 2 alike), so the count is 1 even in one process; ``lower``
    refuses it naming the compared array and the spelling that counts, and that spelling, split over the
    rows of 2 ranks, gives NumPy's count."""
    x = np.random.default_rng(5).random((11, 6))
    sdfg = count_above.to_sdfg()
    single = copy.deepcopy(sdfg)
    single.name = "t_bad_count_above_single"
    assert np.asarray(single(x=x, t=0.5, NT=11, MT=6)).item() != np.sum(x > 0.5)  # the premise
    with pytest.raises(dp.UnsupportedPattern, match=r"'\w+' .*boolean and summed.*astype\(np\.int64\)"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    sdfg = count_above_as_integers.to_sdfg()
    sdfg.name = "t_bad_count_above_as_integers"
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if str(m.shape[0]) == "NT"})
    assert np.asarray(dp.run(sdfg, 2, x=x, t=0.5, NT=11, MT=6)).item() == np.sum(x > 0.5)


NK = 5


@dace.program
def convolve_with_reversed_taps(x: dace.float64[20], w: dace.float64[NK], y: dace.float64[16]):
    for i in dace.map[0:16]:
        acc = 0.0
        for k in range(NK):
            acc += x[i + k] * w[NK - 1 - k]
        y[i] = acc


@dace.program
def convolve_with_taps_reversed_first(x: dace.float64[20], w: dace.float64[NK], y: dace.float64[16]):
    wr = np.empty((NK, ), dtype=np.float64)
    for k in dace.map[0:NK]:
        wr[k] = w[NK - 1 - k]
    for i in dace.map[0:16]:
        acc = 0.0
        for k in range(NK):
            acc += x[i + k] * wr[k]
        y[i] = acc


@pytest.mark.skipif(dace.__version__.startswith("2"), reason="DaCe 2 counts the index right (its result is right)")
def test_an_index_that_goes_down_along_a_loop_of_a_map_body_is_refused():
    """``w[K - 1 - k]`` in a loop of a map body: DaCe 1.0.2 counts the body's array from the element the
    loop touches first and reads ``w[-k]``, below the array, even in one process (a convolution in its
    textbook form). ``lower`` refuses it naming the array and the index; the advice taken (the taps reversed
    by a map of their own) runs on 2 ranks like ``np.convolve``."""
    rng = np.random.default_rng(3)
    x, w = rng.random(20), rng.random(NK)
    sdfg = convolve_with_reversed_taps.to_sdfg()
    single = copy.deepcopy(sdfg)
    single.name = "t_bad_reversed_taps_single"
    y = np.zeros(16)
    single(x=x, w=w, y=y)
    assert not np.allclose(y, np.convolve(x, w, "valid"))  # the premise: DaCe's own wrong result
    with pytest.raises(dp.UnsupportedPattern, match=r"'w' .*index -k goes down .*'k'.*reverse the array in a map"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    sdfg = convolve_with_taps_reversed_first.to_sdfg()
    sdfg.name = "t_bad_taps_reversed_first"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if str(m.shape[0]) == "16"})
    np.testing.assert_allclose(dp.run(sdfg, 2, x=x, w=w, y=np.zeros(16))["y"], np.convolve(x, w, "valid"),
                               rtol=1e-12)


NS, MS = 6, 7


@dace.program
def sort_rows_by_swaps(x: dace.float64[NS, MS]):
    for i in dace.map[0:NS]:
        for p in range(MS - 1):
            for q in range(MS - 1 - p):
                if x[i, q] > x[i, q + 1]:
                    tmp = x[i, q]
                    x[i, q] = x[i, q + 1]
                    x[i, q + 1] = tmp


@dace.program
def sort_rows_by_swaps_in_a_row_of_its_own(x: dace.float64[NS, MS]):
    for i in dace.map[0:NS]:
        row = np.empty((MS, ), dtype=np.float64)
        row[:] = x[i, :]
        for p in range(MS - 1):
            for q in range(MS - 1 - p):
                if row[q] > row[q + 1]:
                    tmp = row[q]
                    row[q] = row[q + 1]
                    row[q + 1] = tmp
        x[i, :] = row


def test_a_swap_through_a_temporary_that_dace_leaves_unordered_is_refused():
    """A bubble sort per row, as written: DaCe's simplification puts the swap's read and writes of ``x``
    in one state with nothing ordering them (1.0.2: under two names of the body's argument; 2: on two
    access nodes), so an element is lost even in one process. ``lower`` refuses it naming the array and
    both accesses; under 1.0.2 the advice taken (the row in an array of the body's own) runs on 2 ranks
    like ``np.sort``."""
    x = np.random.default_rng(4).random((NS, MS))
    sdfg = sort_rows_by_swaps.to_sdfg()
    single = copy.deepcopy(sdfg)
    single.name = "t_bad_swaps_single"
    y = x.copy()
    single(x=y)
    assert not np.array_equal(y, np.sort(x, axis=1))  # the premise: DaCe's own wrong result
    with pytest.raises(dp.UnsupportedPattern, match=r"'x' .*reads \[.*q.*\] and another writes \[.*q.*\].*nothing "
                       "ordering them"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    if dace.__version__.startswith("2"):
        return  # DaCe 2 loses the element in the row of the body's own too (also refused)
    sdfg = sort_rows_by_swaps_in_a_row_of_its_own.to_sdfg()
    sdfg.name = "t_bad_swaps_in_own_row"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if len(m.params) == 1})
    np.testing.assert_array_equal(dp.run(sdfg, 2, x=x.copy())["x"], np.sort(x, axis=1))


NU, MU = 10, 7


@dace.program
def doubled_products_into_an_unwritten_transient(A: dace.float64[NU, MU], x: dace.float64[MU], y: dace.float64[NU]):
    tmp = dace.define_local([NU], dtype=dace.float64)
    for i, j in dace.map[0:NU, 0:MU]:
        with dace.tasklet:
            a << A[i, j]
            b << x[j]
            out >> tmp(1, lambda p, q: p + q, 0)[i]  # the legacy identity 0, which DaCe ignores
            out = a * b
    for i in dace.map[0:NU]:
        with dace.tasklet:
            t << tmp[i]
            o >> y[i]
            o = 2 * t


@dace.program
def doubled_products_onto_np_empty(A: dace.float64[NU, MU], x: dace.float64[MU], y: dace.float64[NU]):
    tmp = np.empty([NU], dtype=np.float64)
    for i, j in dace.map[0:NU, 0:MU]:
        tmp[i] += A[i, j] * x[j]
    y[:] = 2 * tmp


@dace.program
def doubled_products_into_a_cleared_transient(A: dace.float64[NU, MU], x: dace.float64[MU], y: dace.float64[NU]):
    tmp = dace.define_local([NU], dtype=dace.float64)
    for i in dace.map[0:NU]:
        with dace.tasklet:
            z >> tmp[i]
            z = 0
    for i, j in dace.map[0:NU, 0:MU]:
        with dace.tasklet:
            a << A[i, j]
            b << x[j]
            out >> tmp(1, lambda p, q: p + q)[i]
            out = a * b
    for i in dace.map[0:NU]:
        with dace.tasklet:
            t << tmp[i]
            o >> y[i]
            o = 2 * t


@pytest.mark.parametrize("prog", [doubled_products_into_an_unwritten_transient, doubled_products_onto_np_empty])
def test_an_accumulator_that_nothing_initializes_is_refused(prog):
    """A transient written only by a write-conflict resolution adds onto memory nobody wrote, even in one
    process (DaCe's PolyBench ``atax`` does it with ``tmp(1, lambda a, b: a + b, 0)``): refused naming the
    transient, the write and the reason, before anything changes; cleared first by a map of its own, the
    same products run on 2 ranks like NumPy."""
    sdfg = prog.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match=r"'tmp' with subset \[i\]: .*only ever accumulated into "
                       r"\(write-conflict resolution .*\+.*\) and nothing writes it first.*memory nobody wrote"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    rng = np.random.default_rng(5)
    A, x = rng.random((NU, MU)), rng.random(MU)
    sdfg = doubled_products_into_a_cleared_transient.to_sdfg()
    sdfg.name = "t_bad_cleared_accumulator"
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)})
    np.testing.assert_allclose(dp.run(sdfg, 2, A=A, x=x, y=np.zeros(NU))["y"], 2 * (A @ x), rtol=1e-12)


NO = dace.symbol("NO")


@dace.program
def outer_by_numpy(u: dace.float64[NO], v: dace.float64[NO]):
    return np.outer(u, v)


@dace.program
def sorted_copy(x: dace.float64[NO]):
    y = np.empty_like(x)
    y[:] = np.sort(x)
    return y


@dace.program
def running_sums_by_numpy(x: dace.float64[NO, NO]):
    return np.cumsum(x, axis=1)


@dace.program
def outer_by_broadcast(u: dace.float64[NO], v: dace.float64[NO]):
    return u[:, np.newaxis] * v[np.newaxis, :]


@dace.program
def smoothed_by_numpy(x: dace.float64[NO], w: dace.float64[5]):
    return np.convolve(x, w)


@dace.program
def smoothed_by_shifted_sums(x: dace.float64[NO], w: dace.float64[5]):
    out = np.zeros(NO + 4)
    for j in range(5):
        out[j:j + NO] += x * w[j]
    return out


def relax_interior(n, x):
    x[1:-1] = 0.5 * (x[:n] + x[2:])  # DaCe cannot tell that n is x's length less 2


@dace.program
def relaxed_by_a_helper(x: dace.float64[18]):
    relax_interior(16, x)


@dace.program
def relaxed_by_a_decorated_helper(x: dace.float64[18]):
    dace.program(relax_interior)(16, x)


@pytest.mark.parametrize("prog,function,array", [(outer_by_numpy, "numpy_outer", "__return"),
                                                 (relaxed_by_a_helper, "relax_interior", "x"),
                                                 (sorted_copy, "numpy_sort", "__return"),
                                                 (running_sums_by_numpy, "numpy_cumsum", "__return"),
                                                 (smoothed_by_numpy, "numpy_convolve", "__return")])
def test_a_call_back_into_python_is_refused(prog, function, array):
    """A function DaCe's frontend does not compile becomes a call back into the calling interpreter, which
    the ranks do not have: lower() refuses it (automatic and given schedules alike), naming the array the call
    writes and the function (and how to spell it where it can be), and leaves the SDFG as it was."""
    sdfg = prog.to_sdfg()
    spelled = {"numpy_outer": r"u\[:, np.newaxis\]", "numpy_cumsum": r"y\[:, j - 1\] \+ x\[:, j\]",
               "numpy_convolve": r"out\[j:j \+ N\] \+= a \* v\[j\]",
               "relax_interior": r"decorate relax_interior with @dace.program"}.get(function, "")
    with pytest.raises(dp.UnsupportedPattern, match=rf"'{array}\w*' .*{function}\(\.\.\.\), a call back into the "
                       rf"Python interpreter.*{spelled}"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    with pytest.raises(dp.UnsupportedPattern, match=function):
        dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)})
    if function == "relax_interior":  # the hint holds: decorated, the helper's parse error comes out
        with pytest.raises(Exception, match="could not be broadcast"):
            relaxed_by_a_decorated_helper.to_sdfg()


@dace.program
def priced_over_time(S: dace.float64[40], prices: dace.float64[6]):
    dT = 1.0 / 365.0
    T = dT
    for i in range(6):
        prices[i] = np.sum(np.sqrt(T) * S)
        T += dT


@dace.program
def priced_over_time_copied(S: dace.float64[40], prices: dace.float64[6]):
    dT = 1.0 / 365.0
    T = dT + 0
    for i in range(6):
        prices[i] = np.sum(np.sqrt(T) * S)
        T += dT


@dace.program
def scalar_argument_stepped(S: dace.float64[40], prices: dace.float64[6], dT: dace.float64):
    T = dT
    for i in range(6):
        prices[i] = np.sum(T * S)
        T += dT


def test_a_scalar_that_dace_aliases_where_python_copies_is_refused_and_its_copy_runs_like_numpy(rng):
    """``T = dT`` of a scalar the program computed makes ``T`` a second name of ``dT`` in DaCe's frontend,
    so ``T += dT`` doubles both (a wrong result in one process): refused, naming both lines and the
    spelling that copies, which then runs like NumPy. A scalar argument is copied, so it is not refused."""
    with pytest.raises(dp.UnsupportedPattern, match=r"'dT'.*'T = dT' \(.*test_bad_input.py, line \d+\).*"
                                                     r"writing 'T' on line \d+ also changes 'dT'.*'T = dT \+ 0'"):
        dp.lower(priced_over_time.to_sdfg(), ranks=2)
    dp.lower(scalar_argument_stepped.to_sdfg(), ranks=2)
    sdfg = priced_over_time_copied.to_sdfg()
    sdfg.name = "t_bad_priced_over_time_copied"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if m.shape[0] == 40})
    S = rng.random(40) * 4 + 58
    expected, single = np.zeros(6), np.zeros(6)
    priced_over_time.f(S, expected)
    priced_over_time(S=S, prices=single)
    assert not np.allclose(single, expected)  # the premise: DaCe's own wrong result
    np.testing.assert_allclose(dp.run(sdfg, 2, S=S, prices=np.zeros(6))["prices"], expected, rtol=1e-12)


@dace.program
def pairwise_by_transposed_row(x: dace.float64[20], d: dace.float64[20, 20]):
    d[:] = x[np.newaxis, :].T - x


def test_a_library_node_that_dace_cannot_expand_is_refused_in_words():
    """DaCe writes ``x[np.newaxis, :].T`` as a Transpose of a (1, 20) view whose expansion DaCe itself
    rejects (its own program does not build): the lowering says so, naming the node and DaCe's reason,
    instead of passing on DaCe's exception from inside the analysis."""
    with pytest.raises(ValueError, match="Transpose operation only supported on matrices"):
        pairwise_by_transposed_row.to_sdfg().expand_library_nodes()  # the premise: DaCe's own build fails so
    with pytest.raises(dp.UnsupportedPattern, match=r"'_Transpose_' \(Transpose\).*cannot be expanded by DaCe: "
                                                     r"ValueError: Transpose operation only supported on matrices"):
        dp.lower(pairwise_by_transposed_row.to_sdfg(), ranks=2)


@dace.program
def solve_on_gpu(a: dace.float64[12, 12], b: dace.float64[12, 2]):
    return np.linalg.solve(a, b) * 2.0


def test_a_lapack_call_on_the_gpu_is_refused_and_lowers_on_cpus():
    """With device='gpu' a LAPACK node would expand to host LAPACK on arrays in GPU memory: refused before
    any rank starts, naming the array the call reads; the same program lowers for CPUs."""
    with pytest.raises(dp.UnsupportedPattern, match=r"'a'.*'solve' \(Solve, a LAPACK call.*device='cpu'"):
        dp.lower(solve_on_gpu.to_sdfg(), ranks=2, device="gpu")
    sdfg = solve_on_gpu.to_sdfg()
    dp.lower(sdfg, ranks=2)
    assert is_lowered(sdfg)


@dace.program
def grid_between_scalars(xmin: dace.float64, xmax: dace.float64, y: dace.float64[20]):
    x = np.linspace(xmin, xmax, 20)
    return x + y[:, None]


@dace.program
def grid_scaled_from_numbers(xmin: dace.float64, xmax: dace.float64, y: dace.float64[20]):
    x = xmin + (xmax - xmin) * np.linspace(0.0, 1.0, 20)
    return x + y[:, None]


def test_a_linspace_between_scalar_variables_is_refused_and_its_scaled_form_runs_like_numpy():
    """DaCe gives ``np.linspace(xmin, xmax, 20)`` of scalar variables the shape (20, 1) (1.0.2 and 2 alike),
    so the broadcast that follows keeps (20, 1) where NumPy's is (20, 20): refused, naming the points and the
    scalars; the points scaled from numbers, split over 2 ranks, give NumPy's grid."""
    y = np.random.default_rng(7).random(20)
    sdfg = grid_between_scalars.to_sdfg()
    assert tuple(sdfg.arrays["__return"].shape) == (20, 1) != grid_between_scalars.f(0.5, 2.0, y).shape  # premise
    with pytest.raises(dp.UnsupportedPattern, match=r"'x' .*linspace from the scalar variable\(s\) xmin, xmax .*"
                       r"xmin \+ \(xmax - xmin\) \* np\.linspace\(0\.0, 1\.0, num\)"):
        dp.lower(sdfg, ranks=2)
    assert not is_lowered(sdfg)
    sdfg = grid_scaled_from_numbers.to_sdfg()
    sdfg.name = "t_bad_grid_scaled_from_numbers"
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if str(m.shape[0]) == "20"})
    np.testing.assert_allclose(dp.run(sdfg, 2, xmin=0.5, xmax=2.0, y=y), grid_between_scalars.f(0.5, 2.0, y),
                               rtol=1e-14, atol=1e-14)

@dace.program
def rows_over_first_column(a: dace.float64[12, 12]):
    return a / a[:, 0:1]


@dace.program
def rows_over_first_column_with_newaxis(a: dace.float64[12, 12]):
    return a / a[:, 0][:, np.newaxis]


def test_a_slice_of_length_one_that_dace_drops_is_refused_and_its_newaxis_form_runs_like_numpy():
    """DaCe's frontend drops the axis of ``a[:, 0:1]`` (1.0.2 and 2 alike), so ``a / a[:, 0:1]`` on a square
    array divides each column by the first column: refused, naming the array, the line and the spelling
    ``a[:, 0][:, np.newaxis]``, which, split by rows and by columns on 2 ranks, gives NumPy's result."""
    with pytest.raises(dp.UnsupportedPattern, match=r"'a'.*'a\[:, 0:1\]' \(.*line \d+\) keeps an axis of length 1.*"
                       r"'a\[:, 0\]\[:, np\.newaxis\]'"):
        dp.lower(rows_over_first_column.to_sdfg(), ranks=2)
    a = np.random.default_rng(3).random((12, 12)) + 1.0
    for grid in ((2, 1), (1, 2)):
        sdfg = rows_over_first_column_with_newaxis.to_sdfg()
        sdfg.name = f"t_bad_rows_over_first_column_{grid[0]}x{grid[1]}"
        dp.lower(sdfg, {m.name: grid[:len(m.params)] for m in dp.maps(sdfg)})
        np.testing.assert_allclose(dp.run(sdfg, 2, a=a.copy()), a / a[:, 0:1], rtol=1e-15, atol=0)


def test_the_outer_product_written_as_a_broadcast_runs_like_numpy():
    """The spelling the refusal of np.outer suggests lowers, and computes NumPy's outer product."""
    with pytest.raises(dp.UnsupportedPattern, match=r"u\[:, np.newaxis\] \* v\[np.newaxis, :\]"):
        dp.lower(outer_by_numpy.to_sdfg(), ranks=2)
    sdfg = outer_by_broadcast.to_sdfg()
    sdfg.name = "t_bad_outer_by_broadcast"
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg)})
    u, v = np.random.default_rng(1).random((2, 13))
    np.testing.assert_array_equal(dp.run(sdfg, 2, u=u, v=v, NO=13), np.outer(u, v))


def test_the_convolution_written_as_shifted_sums_runs_like_numpy():
    """The spelling the refusal of np.convolve suggests lowers with its maps split, and computes NumPy's
    full convolution."""
    sdfg = smoothed_by_shifted_sums.to_sdfg()
    sdfg.name = "t_bad_smoothed_by_shifted_sums"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)})
    x, w = np.random.default_rng(2).random(41), np.random.default_rng(3).random(5)
    np.testing.assert_allclose(dp.run(sdfg, 2, x=x, w=w, NO=41), np.convolve(x, w), rtol=1e-13)


@dace.program
def triangular_dependent(x: dace.float64[16, 16]):
    for i in range(1, 16):
        for j in dace.map[0:i]:
            x[i, j] = x[i - 1, j] * 2.0


def test_extent_that_changes_at_run_time_is_refused():
    # row i reads row i - 1: the loop stays a loop, and the inner map's extent is its variable
    sdfg = triangular_dependent.to_sdfg()
    with pytest.raises(dp.ScheduleError, match="changes while the program runs.*not provably independent"):
        dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, )})


NR = dace.symbol("NR")


@dace.program
def plus_one_up_to_a_count(x: dace.float32[NR], num: dace.int32[1], y: dace.float32[NR]):
    @dace.map
    def p1(i: _[0:num[0]]):  # noqa: F821 - DaCe's own syntax
        a << x[i]
        b >> y[i]
        b = a + 1


@dace.program
def plus_one_up_to_a_count_read_before(x: dace.float32[NR], num: dace.int32[1], y: dace.float32[NR]):
    for i in dace.map[0:num[0]]:
        y[i] = x[i] + 1


@pytest.mark.parametrize("prog, count", [(plus_one_up_to_a_count, 7), (plus_one_up_to_a_count_read_before, 4)],
                         ids=["into_the_map_entry", "assigned_before_the_map"])
def test_an_extent_read_from_data_is_refused_where_split_and_runs_whole(prog, count):
    """DaCe's ``map_indirect_array_test``: the map's extent is ``num[0]``, which DaCe passes into the map's
    entry as a symbol of its own; in DaCe's newer spelling (``for i in dace.map[0:num[0]]``) it is assigned
    to a symbol on the transition into the map's state. A split names the array the extent is read from
    (the newer spelling was once refused as if the extent were a loop variable); ``lower(ranks=3)`` once
    chose a replicated grid and then stopped at the entry's read of ``num`` (no block was derived for it):
    it is now read by every rank, and the map runs like NumPy."""
    sdfg = prog.to_sdfg()
    with pytest.raises(dp.ScheduleError, match=r"extent .* read from \['num'\] while the program runs"):
        dp.lower(sdfg, {dp.maps(sdfg)[0].name: (3, )})
    sdfg = prog.to_sdfg()
    sdfg.name = f"t_{prog.name}"
    dp.lower(sdfg, ranks=3)
    x, y = np.random.default_rng(count).random((2, 10)).astype(np.float32)
    expected = y.copy()
    expected[:count] = x[:count] + 1
    np.testing.assert_array_equal(dp.run(sdfg, 3, x=x, num=np.array([count], np.int32), y=y.copy())["y"], expected)


@dace.program
def triangular(x: dace.float64[16, 16]):
    for i in range(1, 16):
        for j in dace.map[0:i]:
            x[i, j] = x[i, j] * 2.0


def test_independent_triangular_rows_become_a_split_map():
    # the rows are independent: the i loop becomes a map; with constant sizes every rank's block is known,
    # so the buffer takes the largest (the last rank's) instead of being refused
    sdfg = triangular.to_sdfg()
    (m, ) = dp.maps(sdfg)
    assert m.params == ("i", )
    dp.lower(sdfg, {m.name: (2, )})
    assert "x" in str(dp.report(sdfg))


def test_run_with_too_few_ranks():
    sdfg = lowered(P.bcast_add, ((0, (2, 2, 2)), ))
    t = time.time()
    with pytest.raises(dp.ScheduleError, match="needs 8 MPI ranks"):
        dp.run(sdfg, 4, x=np.zeros((4, 8, 16), np.int64), y=np.zeros((8, 16), np.int64))
    assert time.time() - t < 5


@pytest.mark.parametrize("reduce_grid,init_grid,msg", [((2, 2), (4, ), "cannot be matched"),
                                                       ((1, 2), (2, ), "needs _out")])
def test_inconsistent_nested_grids(reduce_grid, init_grid, msg):
    with pytest.raises(dp.ScheduleError, match=f"inconsistent schedule inside 'Reduce'.*{msg}"):
        dp.lower(P.sum_rows.to_sdfg(), {"Reduce.reduce_output": reduce_grid, "Reduce.reduce_init_map": init_grid})


def test_lower_twice():
    sdfg = P.add5.to_sdfg()
    dp.lower(sdfg, {"_Add__map": (2, )})
    with pytest.raises(dp.ScheduleError, match="already been lowered"):
        dp.lower(sdfg, {"_Add__map": (2, )})


@dace.program
def halo(x: dace.int64[65], out: dace.int64[64]):
    for i in dace.map[0:64]:
        out[i] = x[i] + x[i + 1]


def test_unsupported_pattern_names_array_subset_reason():
    """With only the grid-mapped solver, a halo cannot be implemented; the error says where and why."""
    sdfg = halo.to_sdfg()
    before = sdfg.to_json()
    with pytest.raises(dp.UnsupportedPattern) as info:
        dp.lower(sdfg, {dp.maps(sdfg)[0].name: (4, )}, solvers=["grid_mapped"])
    err = info.value
    assert err.array == "x" and "overlapping" in err.reason and "__dp0_r0" in str(err.subset)
    assert sdfg.to_json() == before, "a failed lowering must leave the SDFG untouched"


def test_bad_input_shape_on_rank0_ends_all_ranks():
    """A wrong shape given on rank 0 inside an mpiexec-launched script: every rank ends, with the message."""
    sdfg = lowered(P.add5, ((0, (4, )), ))
    folder = dp.runtime.launch.build(sdfg)
    t = time.time()
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "bad_shape.py"), 4, folder, timeout=120)
    assert res.returncode != 0
    assert "has shape (63,), expected (64,)" in res.stderr
    assert time.time() - t < 60


def test_run_rejects_bad_shape_before_launch():
    sdfg = lowered(P.add5, ((0, (4, )), ))
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(64,\)"):
        dp.run(sdfg, 4, x=np.zeros(3, np.int64))


def test_runtime_grid_check_aborts_every_rank():
    """The compiled program itself refuses a job smaller than its grid (e.g. srun -n 2 for a 4-rank grid)."""
    sdfg = lowered(P.add5, ((0, (4, )), ))
    folder = dp.runtime.launch.build(sdfg)
    t = time.time()
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "load_and_call.py"), 2, folder,
                     timeout=120)
    assert res.returncode != 0
    assert "needs 4 MPI ranks, but only 2 were started" in res.stderr
    assert time.time() - t < 60


def test_build_error_on_rank0_raises_on_every_rank():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    t = time.time()
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "build_error.py"), 4, timeout=300,
                     env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    # Lines of different ranks may interleave in mpiexec's output, so search the whole text.
    assert sorted(set(re.findall(r"rank (\d) raised", res.stdout))) == ["0", "1", "2", "3"]
    assert "did not raise" not in res.stdout
    assert "building 't_build_error' failed on rank 0" in res.stdout
    assert time.time() - t < 240


def test_replicating_a_split_reduction_is_refused():
    """Copies and partial results of one kernel could not be told apart."""
    sdfg = P.matmul.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match="replicated and also splits a reduction"):
        dp.lower(sdfg, {"_MatMult_.gemm_map": dp.replicate((1, 1, 2), 2)})
    with pytest.raises(dp.ScheduleError, match="copies must be a positive integer"):
        dp.replicate((1, 1, 2), 0)
