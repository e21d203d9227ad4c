"""Reads whose block changes size with a loop variable, widened to one block over the loop's values
(``dace_partition.plan.loop_reads``; no compiler). ParRes' star stencil of radius R loops over the distance
``s`` and reads ``A[.., R-s:..]`` and ``A[.., R+s:..]`` in one map."""
import re

import dace
import pytest
import sympy

import dace_partition as dp
from dace_partition.compat import nodes_of
from dace_partition.plan.loop_reads import _hull, loop_values

R = 3
NS = dace.symbol("NS")


@dace.program
def star_stencil(A: dace.float64[24, 20], B: dace.float64[24, 20], W: dace.float64[2 * R + 1], T: dace.int64):
    for t in range(T):
        for s in range(1, R + 1):
            B[R:-R, R:-R] += W[R - s] * A[R:-R, R - s:20 - R - s] + W[R + s] * A[R:-R, R + s:20 - R + s] \
                + W[R - s] * A[R - s:24 - R - s, R:-R] + W[R + s] * A[R + s:24 - R + s, R:-R]
        A[R:-R, R:-R] = B[R:-R, R:-R] * 0.5


@dace.program
def every_other_distance(A: dace.float64[24], B: dace.float64[24]):
    for s in range(1, 6, 2):
        B[5:-5] += A[5 - s:19 - s] + A[5 + s:19 + s]


@dace.program
def distances_up_to_a_symbol(A: dace.float64[24], B: dace.float64[24]):
    for s in range(1, NS + 1):
        B[5:-5] += A[5 - s:19 - s] + A[5 + s:19 + s]


def _lowered(program):
    sdfg = program.to_sdfg()
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)})
    return sdfg


def test_a_read_that_widens_with_the_distance_is_scattered_as_its_widest_block():
    """Rows split on 2 ranks: every rank's block of A reaches R rows and R columns past B's interior (the
    block at s = R), whatever s the iteration has; before, the kernel was refused (a buffer sized by s)."""
    report = str(dp.report(_lowered(star_stencil)))
    assert re.search(r"scatter +A\[9\*__dp\d+_r0:9\*__dp\d+_r0 \+ 15, 0:20\]", report), report
    assert not re.search(r"A\[[^\]]*\bs\b", report), report  # no block of A depends on s


def test_the_loop_values_are_its_first_and_last_value_and_unknown_ones_are_absent():
    for program, values in ((every_other_distance, {"s": (1, 5)}), (distances_up_to_a_symbol, {})):
        sdfg = program.to_sdfg()
        state = next(st for _, st, _ in nodes_of(sdfg, dace.nodes.MapEntry))
        assert loop_values(sdfg, state) == values


def test_a_symbolic_loop_range_keeps_the_refusal_in_words():
    with pytest.raises(dp.UnsupportedPattern, match=r"'A'.*size depends on s, which a loop assigns"):
        _lowered(distances_up_to_a_symbol)


s = sympy.Symbol("s")
r0 = sympy.Symbol("r0")


@pytest.mark.parametrize("begin,end,values,hull", [
    (sympy.Min(3, 3 - s, 3 + s), sympy.Max(36, 36 - s, 36 + s), {"s": (1, 3)}, (0, 39)),  # the star: both sides
    (9 * r0 + 3 - s, 9 * r0 + 11 + s, {"s": (1, 3)}, (9 * r0, 9 * r0 + 14)),  # affine, with a grid coordinate
    (2 - s, 10 - s, {"s": (-2, 2)}, (0, 12)),  # a distance of either sign
    (sympy.Max(s, 4 - s), 20, {"s": (0, 4)}, None),  # a start that is least inside the range: not widened
    (s * s, 20, {"s": (0, 4)}, None),  # not affine
    (3 - s, 20, {}, None),  # values unknown
])
def test_the_hull_is_taken_at_the_loops_first_and_last_value_only_where_that_is_widest(begin, end, values, hull):
    got = _hull([(begin, end, 1)], values, {"s"})
    if hull is None:
        assert got is None
    else:
        assert got is not None
        (b, e, _), = got.ranges
        assert sympy.simplify(b - hull[0]) == 0 and sympy.simplify(e - hull[1]) == 0, (b, e)
