"""How two distributions of one array relate: the questions the planner asks before it moves an array.

One module for the rules that the lowering's passes (round-trip fusion, loop-carried arrays, the halo
solver, GPU staging) and the search's cost model both apply: kept here, beside :class:`Distribution`,
so the two cannot drift apart (they once did, when each had its own copy). Each answer is proved, not
sampled: with known sizes block by block, with symbolic sizes by arithmetic on integer size symbols;
where neither proves it the answer is the conservative one (not covered, not inside), which costs a
move, never a wrong value.
"""
import functools
from typing import List, Optional

import dace
import sympy

from .distribution import Distribution, _is_int_ceil, _rename
from .boxes import boxes_cover, volume


def number(x):
    """``x`` as a number where it is one for every value of its size symbols (``int_ceil(2*N, 2) - N`` is 0:
    symbols are integers), else None."""
    x = dace.symbolic.simplify(x)
    if not getattr(x, "is_number", False):
        x = sympy.simplify(x.replace(_is_int_ceil, lambda f: sympy.ceiling(f.args[0] / f.args[1])))
    return x if getattr(x, "is_number", False) else None


def at_most(a, b) -> bool:
    """Whether ``a <= b`` for every value of the size symbols (proved, else False)."""
    d = number(dace.symbolic.pystr_to_symbolic(b) - dace.symbolic.pystr_to_symbolic(a))
    return d is not None and d >= 0


def _free(x) -> set:
    return set(getattr(x, "free_symbols", ()))


def plain(expr, names=None):
    """``expr`` over plain sympy symbols (dropping DaCe's assumptions, so bounds cancel), with the
    coordinates in ``names`` renamed."""
    e = sympy.sympify(expr)
    names = names or {}
    return e.subs({f: sympy.Symbol(names.get(str(f), str(f))) for f in e.free_symbols})


def tiled_span(d: Distribution, dim: int):
    """(first, last) element of the union of ``d``'s blocks along ``dim`` where the block at grid
    coordinate c + 1 starts right after the one at c (the tiles of a map), else None."""
    j = d.splits[dim]
    if j is None or not d.coords[j]:
        return None
    c = dace.symbolic.pystr_to_symbolic(d.coords[j])
    b, e, _ = d.subset[dim]
    if number(b.subs(c, c + 1) - e - 1) != 0:
        return None
    return b.subs(c, 0), e.subs(c, d.grid[j] - 1)


@functools.lru_cache(maxsize=16384)  # the search asks the same pairs for many schedules; P^2 work each
def covers(src: Distribution, dst: Distribution) -> bool:
    """Whether the elements of ``src`` (all ranks' blocks) include every element of ``dst``: per dimension
    the same range, or ranges free of grid coordinates with ``dst``'s inside ``src``'s (a whole range read
    from blocks that tile it counts as their union); with known sizes, block by block."""
    if src.same_blocks(dst):
        return True
    a, b = src.blocks(), dst.blocks()
    if a is not None and b is not None:
        return boxes_cover(a, b)
    ga = [(g, c) for g, c in zip(src.grid, src.coords) if g > 1]
    gb = [(g, c) for g, c in zip(dst.grid, dst.coords) if g > 1]
    if [g for g, _ in ga] != [g for g, _ in gb]:
        return False
    names = {bc: ac for (_, ac), (_, bc) in zip(ga, gb) if ac and bc}
    coords = {c for c in src.coords + dst.coords if c}
    for i, ((sb, se, _), (db, de, _)) in enumerate(zip(src.subset, _rename(dst.subset, names))):
        if dace.symbolic.simplify(sb - db) == 0 and dace.symbolic.simplify(se - de) == 0:
            continue
        if {str(x) for x in (_free(db) | _free(de))} & coords:
            return False
        if {str(x) for x in (_free(sb) | _free(se))} & coords:
            span = tiled_span(src, i)
            if span is None:
                return False
            sb, se = span
        lo, hi = number(db - sb), number(se - de)
        if lo is None or hi is None or lo < 0 or hi < 0:
            return False
    return True


def bound_shifts(src: Distribution, dst: Distribution) -> Optional[list]:
    """Per array dimension, ``(dst begin - src begin, dst end - src end)`` when both are the same integer at
    every grid position (the destination's coordinates named as the source's): the same tiling shifted
    or widened; else None."""
    names = {}
    for (gs, cs), (gd, cd) in zip([(g, c) for g, c in zip(src.grid, src.coords) if g > 1],
                                  [(g, c) for g, c in zip(dst.grid, dst.coords) if g > 1]):
        if cs and cd:
            names[cd] = cs
    out = []
    for (b1, e1, _), (b2, e2, _) in zip(src.subset, dst.subset):
        pair = []
        for x, y in ((b1, b2), (e1, e2)):
            diff = sympy.simplify(plain(y, names) - plain(x))
            if diff.free_symbols or not diff.is_integer:
                return None
            pair.append(int(diff))
        out.append(tuple(pair))
    return out


def disjoint_tiles(d: Distribution) -> bool:
    """Whether no element has two holders: known blocks are checked; symbolic ones must tile each split
    dimension contiguously (the block at coordinate c + 1 starts right after the one at c, as the tiles of a
    map do), which is proved symbolically, not sampled."""
    if d.replicas > 1:
        return False
    if d.blocks() is not None:
        return not d.may_overlap()
    for (b, e, _), g in zip(d.subset, d.splits):
        if g is None:
            continue
        c = d.coords[g]
        sym = next((f for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols if str(f) == c), None)
        if sym is None:
            return False
        gap = sympy.expand(sympy.sympify(b).subs(sym, sym + 1) - sympy.sympify(e) - 1)
        if gap != 0:
            return False
    return True


def offset_inside(h: Distribution, d: Distribution) -> Optional[List[int]]:
    """Per dimension, where every rank's block of ``h`` starts inside its block of ``d`` (the same constant
    on every rank), if every block of ``d`` contains the rank's block of ``h``; else None. (A stencil
    reads ``u[0:n+2]`` and writes ``u[1:n+1]``: the written blocks sit at offset 1 in the read ones.)"""
    if h.grid != d.grid or h.splits != d.splits or any(s != 1 for _, _, s in h.subset + d.subset):
        return None
    shifts = bound_shifts(h, d)
    if shifts is None or any(b > 0 or e < 0 for b, e in shifts):
        return None
    off = [-b for b, _ in shifts]
    a, b = h.blocks(), d.blocks()
    if a is not None and b is not None:  # known sizes: checked rank by rank too
        for (hs_, hn), (ds_, dn) in zip(a, b):
            if volume(hn) and any(x - y != o for x, y, o in zip(hs_, ds_, off)):
                return None
    return off
