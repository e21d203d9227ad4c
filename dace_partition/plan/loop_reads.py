"""Reads whose block grows and shrinks with an enclosing loop's variable, widened to one block for all its values.

A star stencil of radius ``R`` written as a loop over the distance ``s`` (ParRes' stencil kernel) reads
``A[R:n-R, R-s:n-R-s]`` and ``A[R:n-R, R+s:n-R+s]`` in one map: the bounding box of the two is ``2s`` columns
wider than the block, so its size changes from one iteration to the next. Rank-local buffers are allocated
when the program starts, so such a buffer cannot follow ``s``. Where the loop's values are known when the
program is compiled, the read is widened to the bounding box over all of them (here ``s = R``): the buffer
holds every element any iteration reads, the scatter or halo exchange fills it each iteration, and the
kernel indexes it from the widened origin. Only reads of arrays the kernel does not write are widened
(a wider write would send elements back that the kernel did not compute), and only where the widest box is
found at the loop's first or last value: each bound is affine in the variable, or a ``Min`` (start) or
``Max`` (end) of affine terms. Anything else keeps its refusal (:func:`.lowering.refuse_loop_sized_buffers`).
"""
import itertools
from dataclasses import replace
from typing import Dict, Optional, Set, Tuple

import numpy as np
import sympy
from dace import subsets
from dace.sdfg import SDFG

from ..analysis.constraints import Direction, KernelPlan, with_known
from ..ir import Distribution
from ..schedule.loops import for_loops, loops_are_regions


def widen_loop_sized_reads(sdfg: SDFG, plan: KernelPlan, assigned: Set[str]) -> KernelPlan:
    """``plan`` with each read whose rank-local size depends on a loop variable (``assigned``: the symbols
    loops and interstate edges assign) widened to its bounding box over the loop's values (module
    docstring); ``plan`` itself where there is none or nothing can be widened."""
    if not assigned:
        return plan
    written = {a.array for a in plan.accesses if a.direction == Direction.OUT}
    values: Optional[Dict[str, Tuple[int, int]]] = None
    accesses, changed = [], False
    for a in plan.accesses:
        if a.direction == Direction.IN and not a.prior and a.array not in written and \
                size_symbols(a.subset, plan, assigned):
            values = loop_values(sdfg, plan.kernel.state) if values is None else values
            hull = _hull(a.subset, values, assigned)
            if hull is not None:
                a, changed = replace(a, subset=hull), True
        accesses.append(a)
    return replace(plan, accesses=accesses) if changed else plan


def size_symbols(subset, plan: KernelPlan, assigned: Set[str]) -> Set[str]:
    """The names of ``assigned`` that the rank-local shape of ``subset`` on ``plan``'s grid depends on."""
    if not {str(f) for f in subset.free_symbols} & assigned:
        return set()  # the common case, without the block's shape
    shape = Distribution.on_grid(subset, plan.grid, plan.coords, 0).local_shape
    return {str(f) for x in shape for f in sympy.sympify(x).free_symbols} & assigned


def loop_values(sdfg: SDFG, state) -> Dict[str, Tuple[int, int]]:
    """``{variable: (first, last)}`` of the for-loops of ``sdfg`` that contain ``state`` and whose values are
    known integers when the program is compiled (``for s in range(1, R + 1)`` with ``R`` a number or
    constant): the values a kernel in that state sees. A variable that a loop not containing ``state`` or
    another assignment also sets is left out, as is a loop of no iteration."""
    known = {k: v for k, v in sdfg.constants.items() if isinstance(v, (int, np.integer))}
    loops = list(for_loops(sdfg))
    found: Dict[str, Tuple[int, int]] = {}
    for var, contains, (start, end, step) in loops:
        if not contains(state):
            continue
        try:
            b, e, st = (int(with_known(x, known)) for x in (start, end, step))
        except (TypeError, ValueError):
            continue
        trips = (e - b) // st + 1 if st else 0
        if trips > 0:
            last = b + st * (trips - 1)
            found[var] = (min(b, last), max(b, last))
    variables = [var for var, _, _ in loops]
    own = 0 if loops_are_regions(sdfg) else 2  # DaCe 1.0.2: a loop's init and increment are interstate assignments
    sets = {v: sum(v in e.data.assignments for e in sdfg.all_interstate_edges()) for v in found}
    return {v: r for v, r in found.items() if variables.count(v) == 1 and sets[v] == own}


def _hull(subset, values: Dict[str, Tuple[int, int]], assigned: Set[str]) -> Optional[subsets.Range]:
    """The bounding box of ``subset`` over every value of its loop variables, or None where a variable's
    values are unknown or a bound may be widest between the loop's first and last value."""
    out = []
    for begin, end, step in subset:
        begin, end, step = (sympy.sympify(x) for x in (begin, end, step))
        loop = {x for x in begin.free_symbols | end.free_symbols if str(x) in assigned}
        if not loop:
            out.append((begin, end, step))
            continue
        if step != 1 or any(str(x) not in values for x in loop):
            return None
        low, high = _extreme(begin, loop, values, sympy.Min), _extreme(end, loop, values, sympy.Max)
        if low is None or high is None:
            return None
        out.append((low, high, step))
    return subsets.Range(out)


def _extreme(bound, loop, values, kind):
    """The least (``kind=Min``) or greatest (``Max``) value of ``bound`` over the loop values: found at the
    corners of their box when ``bound`` is affine in the variables or a ``kind`` of affine terms."""
    terms = bound.args if isinstance(bound, kind) else (bound, )
    if not all(_affine(t, loop) for t in terms):
        return None
    order = sorted(loop, key=str)
    corners = itertools.product(*[values[str(x)] for x in order])
    return kind(*[t.subs(dict(zip(order, c))) for c in corners for t in terms])


def _affine(term, loop) -> bool:
    for x in loop:
        d = sympy.diff(term, x)
        if d.has(sympy.Derivative) or d.has(sympy.Subs) or d.free_symbols & loop:
            return False
    return True
