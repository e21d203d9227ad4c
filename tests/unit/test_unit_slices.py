"""Slices of length one after a kept axis, which DaCe's frontend turns into indices
(``dace_partition.analysis.unit_slices``; no compiler). DaCe 1.0.2 and 2 alike give ``a[:, 0:1]`` the shape
``(N,)``, so ``a / a[:, 0:1]`` on a square array divides by the wrong elements: the first test shows it in
DaCe itself (a wrong result in one process), the others that such programs are refused in words before any
rank starts and that the spelling the message gives lowers (tests/mpi/test_bad_input.py runs it)."""
import dace
import numpy as np
import pytest

import dace_partition as dp
from dace_partition.analysis.unit_slices import unit_slices
from dace_partition.errors import UnsupportedPattern


@dace.program
def divide_rows_by_their_first(a: dace.float64[6, 6]):
    return a / a[:, 0:1]


@dace.program
def through_column_k(d: dace.float64[6, 6]):
    for k in range(6):
        via = d[:, k:k + 1] + d[k:k + 1, :]
        d[:] = np.minimum(d, via)


@dace.program
def in_a_called_program(x: dace.float64[5, 5, 5]):
    return x - x[:, 1:2, :]


@dace.program
def calls_it(x: dace.float64[5, 5, 5]):
    return in_a_called_program(x) * 2.0


@dace.program
def divide_rows_spelled_with_newaxis(a: dace.float64[6, 6]):
    return a / a[:, 0][:, np.newaxis]


@dace.program
def left_alone(a: dace.float64[6, 6], b: dace.float64[6, 6]):
    b[:, 0:1] = a[:, 2:3]  # a copy into a slice: the same elements either way
    b[1:2, :] = a[1:2, :] - a[0:1, :]  # a leading slice of length one broadcasts as an index does
    b[2, 0] = np.sum(a[:, 0:1])  # a whole reduction


def _divisor_read(program):
    """The subscript of ``a`` that the division's tasklet reads as its divisor, in the map's parameters."""
    sdfg = program.to_sdfg()
    for state in sdfg.states():
        for node in state.nodes():
            if isinstance(node, dace.nodes.MapEntry):
                params = node.map.params
                reads = [str(e.data.subset) for e in state.out_edges(node) if e.data.data == "a"]
                return params, sorted(reads)


def test_dace_itself_drops_the_axis_of_a_slice_of_length_one():
    """Why the refusal exists (a DaCe defect, in one process): the divisor of row i is read at a[j, 0] in
    the map over (i, j), where NumPy divides row i by a[i, 0]. If DaCe ever keeps the axis, this fails and
    the refusal can go; the spelling with np.newaxis reads a[i, 0]."""
    (i, j), reads = _divisor_read(divide_rows_by_their_first)
    assert reads == sorted([f"{i}, {j}", f"{j}, 0"]), reads
    (i, j), reads = _divisor_read(divide_rows_spelled_with_newaxis)
    assert reads == sorted([f"{i}, {j}", f"{i}, 0"]), reads


@pytest.mark.parametrize("program, array, spelling", [
    (divide_rows_by_their_first, "a", "a[:, 0][:, np.newaxis]"),
    (through_column_k, "d", "d[:, k][:, np.newaxis]"),
    (calls_it, "x", "x[:, 1, :][:, np.newaxis]"),
])
def test_a_slice_of_length_one_after_a_kept_axis_is_refused_with_a_spelling_dace_gets_right(program, array, spelling):
    sdfg = program.to_sdfg()
    found = unit_slices(sdfg)
    assert [(f.array, f.spelling) for f in found] == [(array, spelling)], found
    with pytest.raises(UnsupportedPattern) as e:
        dp.lower(sdfg, ranks=2)
    text = str(e.value)
    assert f"'{array}'" in text and spelling in text and "line" in text and "keeps an axis of length 1" in text, text


def test_copies_leading_slices_whole_reductions_and_the_spelling_are_left_alone():
    for program in (left_alone, divide_rows_spelled_with_newaxis):
        assert unit_slices(program.to_sdfg()) == []
    dp.lower(divide_rows_spelled_with_newaxis.to_sdfg(), ranks=2)
