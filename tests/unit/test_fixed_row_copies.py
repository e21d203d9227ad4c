"""A map that reads an array at its own row and at a row a loop variable picks reads the latter from a copy
made before it (``dace_partition.passes.prepare.copy_fixed_rows_out``; no compiler). The pattern of
numpy-benchmarks' ``multiple_sum`` (a row's deviations summed in a loop over rows) was refused wherever it
was split: one box of the array held the rank's block and the loop's row."""
import re

import dace
import numpy as np

import dace_partition as dp
from dace_partition.passes.prepare import copy_fixed_rows_out
from dace_partition.schedule import normalise
from programs import deviations_from_each_row


@dace.program
def distances_to_each_point(X: dace.float64[24, 6]):
    D = np.zeros((24, 24))
    for i in range(24):
        D[i, :] = np.sum((X - X[i, :]) ** 2, axis=1)
    return D


@dace.program
def shortest_paths(dist: dace.int32[24, 24]):
    for k in range(24):
        dist[:] = np.minimum(dist, dist[:, k][:, np.newaxis] + dist[k, :][np.newaxis, :])


@dace.program
def minus_first_row(A: dace.float64[24, 20]):
    return A - A[0, :]


def _copies(program):
    sdfg = program.to_sdfg()
    normalise(sdfg)
    made = copy_fixed_rows_out(sdfg)
    sdfg.validate()
    boxes = [str(e.data.subset) for st in sdfg.states() for e in st.edges()
             if e.data.data is not None and e.data.other_subset is not None and e.dst.__class__.__name__ == "AccessNode"
             and e.dst.data in made]
    return made, boxes


def test_a_row_the_loop_picks_is_copied_out_with_its_exact_box():
    made, boxes = _copies(deviations_from_each_row)
    assert made == ["data_fixed"] and boxes == ["r, 0:20"], (made, boxes)
    made, boxes = _copies(distances_to_each_point)
    assert made == ["X_fixed"] and boxes == ["i, 0:6"], (made, boxes)


def test_rows_of_an_array_the_loop_writes_and_constant_rows_are_left_in_place():
    """Floyd-Warshall's distances are written in the loop: a copy on rank 0 would bring it back from its grid
    every iteration. ``A[0, :]`` gives a box of known size already."""
    assert _copies(shortest_paths) == ([], [])
    assert _copies(minus_first_row) == ([], [])


def _lowered(program, grid):
    sdfg = program.to_sdfg()
    dp.lower(sdfg, {m.name: grid[:len(m.params)] for m in dp.maps(sdfg)})
    return sdfg


def test_a_row_the_loop_picks_moves_alone_while_the_array_is_scattered_once():
    """Rows split on 2 ranks: each rank's block of ``data`` is scattered once, before the loop (rank 0
    still reads the array in the loop, for the copy, but never writes it), and only the row moves in every
    iteration. Before: refused ("the block of dimension 0 grows with the grid coordinate")."""
    report = dp.report(_lowered(deviations_from_each_row, (2, 1)))
    rows = [(t.array, t.source, t.destination, t.trips) for t in report.traffic]
    assert ("data", "rank 0", "grid (2, 1)", 1) in rows, report
    fixed = [row for row in rows if row[0] == "data_fixed"]
    assert fixed and all(row[3] == 24 for row in fixed), report
    assert not re.search(r"\bdata\[[^\]]*\br\b", str(report)), report  # no block of data follows r
