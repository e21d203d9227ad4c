"""Box arithmetic at scale: the search asks whether blocks cover, overlap or neighbour each other on up to
1024 ranks, so these answers are computed on every pair of boxes at once (NumPy) and bounds are evaluated
once per coordinate value. Each is checked here against element-by-element or sympy-by-position answers on
random inputs. Pure Python (no compiler, no MPI)."""
import itertools

import dace
import numpy as np
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from dace_partition.ir import Distribution
from dace_partition.ir.boxes import any_overlap, boxes_cover
from dace_partition.ir.distribution import values_on_grid


def _box(dims):
    return st.tuples(st.tuples(*[st.integers(0, 6)] * dims), st.tuples(*[st.integers(0, 4)] * dims))


@st.composite
def _boxes_and_targets(draw):
    dims = draw(st.integers(1, 3))
    if draw(st.booleans()):  # a tiling of [0, 8)^dims, as a map's blocks are
        cuts = [sorted(draw(st.sets(st.integers(1, 7), max_size=3))) for _ in range(dims)]
        segs = [list(zip([0] + c, c + [8])) for c in cuts]
        src = [(tuple(s for s, _ in p), tuple(e - s for s, e in p)) for p in itertools.product(*segs)]
    else:
        src = draw(st.lists(_box(dims), max_size=5))
    src += src[:draw(st.integers(0, 2))]  # replicas: the same box twice
    return src, draw(st.lists(_box(dims), max_size=5))


def _elements(box):
    return set(itertools.product(*[range(s, s + c) for s, c in zip(*box)]))


@settings(max_examples=300, deadline=None)
@given(_boxes_and_targets())
def test_boxes_cover_is_exact_for_disjoint_sources_and_never_claims_a_missing_element(case):
    src, dst = case
    held = set().union(*map(_elements, src)) if src else set()
    truth = all(_elements(b) <= held for b in dst)
    disjoint = not any(_elements(x) & _elements(y) for i, x in enumerate(dict.fromkeys(src))
                       for y in list(dict.fromkeys(src))[i + 1:])
    inside_one = all(any(_elements(b) <= _elements(x) for x in src) or not _elements(b) for b in dst)
    got = boxes_cover(src, dst)
    if got:
        assert truth  # never covered where an element is missing
    if disjoint or inside_one:
        assert got == truth


@settings(max_examples=300, deadline=None)
@given(_boxes_and_targets())
def test_any_overlap_matches_elements(case):
    boxes = case[0]
    truth = any(_elements(x) & _elements(y) for i, x in enumerate(boxes) for y in boxes[i + 1:])
    assert any_overlap(boxes) == truth


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 9), st.integers(-3, 3), st.integers(1, 40), st.integers(1, 4),
       st.sampled_from(["ceil", "floor", "min", "plain"]))
def test_values_on_grid_match_sympy_at_every_position(n, g, shift, gx, gy, form):
    i, j = dace.symbolic.symbol("i", dace.int32), dace.symbolic.symbol("j", dace.int32)
    expr = {"ceil": dace.symbolic.int_ceil(n * i, g) + shift,
            "floor": dace.symbolic.int_floor(n * (i + 1), g) - 1 + j,
            "min": sympy.Min(n - 1, g * i + 2 * j + shift),
            "plain": n * i + shift * j}[form]
    extents = {"i": gx, "j": gy}
    got = values_on_grid(expr, extents)
    named = sorted(str(f) for f in expr.free_symbols)
    want = [int(expr.subs({f: dict(zip(named, q))[str(f)] for f in expr.free_symbols}))
            for q in itertools.product(*[range(extents[x]) for x in named])]
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 40), st.integers(1, 12), st.integers(0, 2))
def test_blocks_of_a_grid_match_their_bounds_evaluated_by_sympy(n, rows, cols, halo):
    """The blocks of ``A[0:n, 0:n]`` tiled on a rows x cols grid (with a halo), against sympy's value of
    each bound at each grid position."""
    t = [dace.symbolic.symbol(f"__t{k}", dace.int32) for k in range(2)]
    ic = dace.symbolic.int_ceil
    subset = dace.subsets.Range([(ic(n * t[k], g), ic(n * (t[k] + 1), g) - 1, 1) for k, g in enumerate((rows, cols))])
    d = Distribution.on_grid(subset, (rows, cols), ("__t0", "__t1"), 0)
    if halo:
        d = Distribution(d.grid, d.coords, tuple((sympy.Max(0, b - halo), sympy.Min(n - 1, e + halo), s)
                                                  for b, e, s in d.subset), d.grid_id)
    got = d.blocks()
    want = []
    for q in itertools.product(range(rows), range(cols)):
        at = {f: q[int(str(f)[-1])] for x in d.subset for f in sympy.sympify(x[0]).free_symbols |
              sympy.sympify(x[1]).free_symbols}
        start = tuple(int(sympy.sympify(b).subs(at)) for b, _, _ in d.subset)
        end = tuple(int(sympy.sympify(e).subs(at)) for _, e, _ in d.subset)
        want.append((start, tuple(max(0, y - x + 1) for x, y in zip(start, end))))
    assert got == want
    assert np.prod(d.grid) == len(got)


@st.composite
def _tiling_and_padding(draw):
    """A whole array, its tiling by boxes (some ranks holding nothing) and tiles padded past their box."""
    dims = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(dims))
    cuts = [sorted(draw(st.sets(st.integers(1, n - 1), max_size=2))) if n > 1 else [] for n in shape]
    segs = [list(zip([0] + c, c + [n])) for c, n in zip(cuts, shape)]
    boxes = [(tuple(s for s, _ in p), tuple(e - s for s, e in p)) for p in itertools.product(*segs)]
    local = tuple(max(b[1][d] for b in boxes) + draw(st.integers(0, 2)) for d in range(dims))
    return shape, boxes + [None] * draw(st.integers(0, 2)), local


@settings(max_examples=200, deadline=None)
@given(_tiling_and_padding(), st.sampled_from([np.int32, np.float64]))
def test_tiles_cut_by_boxes_join_back_to_the_whole_array(case, dtype):
    """Every rank's tile holds its box at the origin and zeros past it; joining every tile gives back the
    whole array, element for element (what `run`'s ranks without DaCe and `Layout` both rely on)."""
    from dace_partition.ir.boxes import join, tile
    shape, boxes, local = case
    whole = np.arange(1, 1 + int(np.prod(shape)), dtype=dtype).reshape(shape)
    tiles = [tile(whole, b, local, dtype) for b in boxes]
    for b, t in zip(boxes, tiles):
        assert t.shape == local and t.dtype == np.dtype(dtype)
        inside = np.zeros(local, dtype=bool)
        if b is not None:
            inside[tuple(slice(0, c) for c in b[1])] = True
            np.testing.assert_array_equal(t[inside].reshape(b[1]), whole[tuple(slice(s, s + c) for s, c in zip(*b))])
        assert not t[~inside].any()
    np.testing.assert_array_equal(join(tiles, boxes, shape, dtype), whole)
