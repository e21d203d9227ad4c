"""What the partitioned program moves, read off the plan: every scatter, gather and grid-to-grid move left
after the round trips, the loop carry and the rank-local arguments are decided, where it runs and how often.

The lowering and the search ask the same planner (:func:`~.lowering.decide`). The lowering decides once,
for the whole schedule. The search prices many schedules and decides per array (:func:`restricted`): each
decision is about one array's scatters and gathers, except a loop's copy ``X[box] = T`` folded into the
write of the kernel that computes ``T``, which is about both (:func:`coupled_arrays` keeps such pairs
together). So an array's part of a schedule is computed once per choice of the kernels that touch it.
"""
from dataclasses import dataclass, replace
from typing import Dict, FrozenSet, Iterable, List, Tuple

from dace.sdfg import SDFG

from ..ir import Move
from .lowering import KernelMoves
from .model import Point, PartitionModel


@dataclass(frozen=True)
class Traffic:
    """One move the partitioned program makes, with the solver that implements it, at ``point``."""
    move: Move
    solver: str
    point: Point

    def __str__(self):
        return f"{self.move} by {self.solver}, {self.point}"


def traffic(model: PartitionModel) -> Tuple[Traffic, ...]:
    """The moves of the program ``model`` stands for (after every decision made on it), in program order."""
    return tuple(Traffic(mv.move, mv.solver, mv.point) for mv in sorted(model.moves, key=lambda mv: mv.order))


def loops_around(model: PartitionModel, point: Point) -> list:
    """The loops whose every iteration runs what happens at ``point`` (a move made before or after a loop
    lies in the loops around that loop, not in it)."""
    return [lp for lp in model.loops if model.inside(point, lp)]


def restricted(km: KernelMoves, arrays: FrozenSet[str]) -> KernelMoves:
    """``km`` with only the accesses, buffers and moves of ``arrays``: the plan of a kernel as the decisions
    about those arrays see it."""
    a = km.analysis
    return KernelMoves(replace(a, accesses=[x for x in a.accesses if x.array in arrays]),
                       tuple(b for b in km.buffers if b[0][0] in arrays),
                       tuple(m for m in km.moves if m.array in arrays))


def coupled_arrays(sdfg: SDFG, names: Iterable[str]) -> List[FrozenSet[str]]:
    """``names`` in groups that are decided together: an array alone, or with the arrays a copy state in a
    loop copies it to or from (every candidate for the loop carry's fold, whether or not it folds)."""
    from ..schedule import ordered_states
    from ..schedule.loops import find_loops
    from .carry import _copy_target
    parent: Dict[str, str] = {n: n for n in names}

    def root(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    inside = {st for lp in find_loops(sdfg) for st in lp.body}
    for st in ordered_states(sdfg):
        found = _copy_target(sdfg, st) if st in inside else None
        if found is not None and found[0] in parent and found[1] in parent:
            parent[root(found[0])] = root(found[1])
    groups: Dict[str, set] = {}
    for n in parent:
        groups.setdefault(root(n), set()).add(n)
    return [frozenset(g) for g in groups.values()]
