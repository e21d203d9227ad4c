"""Syntax-guided enumeration of reduction programs (sec. 3.4-3.5).

Programs are enumerated in increasing size up to a limit (default 5, as in the paper) over the
collapsed reduction-axis synthesis hierarchy.  Pruning, all from the paper:

* instructions whose groups all have one device form no reduction and are not generated
  (appendix, lemmas B.7/B.8);
* instructions that derive the same device groups as an earlier one are the same lowered step
  and are generated once (e.g. ``(root, InsideGroup)`` and ``(e1, Parallel(root))`` on a
  one-level hierarchy): programs are counted as distinct lowered programs ``(G_1, C_1) ... (G_n, C_n)``,
  which is what Definition 3.1 compares;
* every step must satisfy its Figure 8 precondition, so semantically invalid prefixes are cut
  at once (the main pruning, sec. 2.3), and must change some state (information increase);
* the search is memoised on the state context: the programs from a context with ``r`` steps left
  are computed once, however the context was reached.

A program ends when the goal (every device holds every chunk fully reduced) is reached; no
precondition can hold in the goal state, so stopping there loses nothing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Tuple

from .language import Instruction, Program, SynthesisHierarchy
from .semantics import PreconditionError, apply_groups, final_context, initial_context

DEFAULT_MAX_SIZE = 5


@dataclass(frozen=True)
class LoweredStep:
    """One distinct instruction of a synthesis hierarchy with the groups it derives."""
    instruction: Instruction
    groups: Tuple[Tuple[int, ...], ...]


def distinct_steps(h: SynthesisHierarchy) -> List[LoweredStep]:
    """Instructions with at least one group of two devices, one per distinct (groups, collective)."""
    seen = {}
    for ins in h.instructions():
        g = h.groups(ins)
        if all(len(x) < 2 for x in g):
            continue
        key = (g, ins.collective)
        if key not in seen:
            seen[key] = LoweredStep(ins, g)
    return list(seen.values())


@dataclass
class SynthesisResult:
    """All valid programs (shortest first) and bookkeeping."""
    hierarchy: SynthesisHierarchy
    programs: List[Program]
    max_size: int
    seconds: float
    candidates: int = 0  # distinct instructions considered at each step
    states: int = 0      # distinct (context, steps left) pairs expanded

    def __len__(self):
        return len(self.programs)


def synthesize(hierarchy: SynthesisHierarchy, max_size: int = DEFAULT_MAX_SIZE) -> SynthesisResult:
    """Every valid program of at most ``max_size`` steps for one reduction group."""
    t0 = time.perf_counter()
    steps = distinct_steps(hierarchy)
    k = hierarchy.num_devices
    goal = final_context(k)
    memo: Dict[Tuple[tuple, int], List[Tuple[int, ...]]] = {}
    trans: Dict[tuple, List[Tuple[int, tuple]]] = {}

    def successors(ctx):
        out = trans.get(ctx)
        if out is None:
            out = []
            for si, st in enumerate(steps):
                try:
                    out.append((si, apply_groups(ctx, st.groups, st.instruction.collective, 0, st.instruction)))
                except PreconditionError:
                    pass
            trans[ctx] = out
        return out

    def paths(ctx, left):
        """Step-index sequences of length <= left leading from ctx to the goal."""
        if ctx == goal:
            return [()]
        if left == 0:
            return []
        key = (ctx, left)
        hit = memo.get(key)
        if hit is not None:
            return hit
        res = []
        for si, nxt in successors(ctx):
            for tail in paths(nxt, left - 1):
                res.append((si,) + tail)
        memo[key] = res
        return res

    if k < 2:
        found = [()]
    else:
        found = paths(initial_context(k), max_size)
    found = sorted(found, key=lambda p: (len(p), p))
    programs = [Program(tuple(steps[i].instruction for i in p)) for p in found]
    return SynthesisResult(hierarchy, programs, max_size, time.perf_counter() - t0, len(steps), len(memo))
