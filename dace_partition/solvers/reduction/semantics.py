"""Hoare-style semantics of the collectives (sec. 3.2, Figure 8) on chunk x device matrices.

With ``k`` devices in a reduction group the data is cut into ``k`` chunks; a device's state is a
``k x k`` boolean matrix whose row ``r`` says which devices' original chunk ``r`` has been summed
into the chunk ``r`` this device holds (an all-zero row: the device does not hold chunk ``r``).
A row is stored as an int bitmask over devices, a state as a tuple of rows, and the context
(every device's state) as a tuple of states, so contexts are hashable and the synthesizer can
memoise on them.

Every step is checked against the precondition of its rule; a violation raises
:class:`PreconditionError` naming the step, the group and the :class:`Precondition` broken, so a
wrong program is reported, never silently mis-simulated.  The preconditions are exactly what makes
a program *semantically* valid (sec. 2.3): never add chunks of different rows, never add the same
contribution twice, never overwrite data with less informative data.
"""
from __future__ import annotations

import enum
from typing import Sequence, Tuple

from .language import Collective, Instruction, Program, SynthesisHierarchy

State = Tuple[int, ...]          # one device: row bitmasks
Context = Tuple[State, ...]      # all devices of the synthesis group


class Precondition(enum.Enum):
    """The premises of Figure 8's rules (and the pruning rule of the synthesizer)."""
    SAME_ROWS = "all devices of a group hold the same chunks (s_i.rows = s_j.rows)"
    DISJOINT_CONTRIBUTIONS = "no contribution is summed twice (s_i[k] and s_j[k] disjoint)"
    SCATTER_DIVISIBLE = "the chunks held divide evenly over the group (scatter)"
    DISJOINT_ROWS = "the devices hold disjoint chunks (AllGather)"
    EQUAL_ROW_COUNTS = "the devices hold equally many chunks (AllGather)"
    ROOT_DOMINATES = "every device's data is below the root's (s_i <= s_0, Broadcast)"
    ROOT_INCREASES = "the root is more informative than some device (exists s_i < s_0, Broadcast)"
    PROGRESS = "the step changes some device's state (information increase)"


class PreconditionError(ValueError):
    """A step's precondition failed; ``step`` is its 0-based index in the program."""

    def __init__(self, step: int, instruction: Instruction, precondition: Precondition, group=None,
                 detail: str = ""):
        self.step, self.instruction, self.precondition, self.group = step, instruction, precondition, group
        msg = (f"step {step} {instruction}: precondition {precondition.name} failed "
               f"({precondition.value})")
        if group is not None:
            msg += f" in group {list(group)}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


def initial_context(k: int) -> Context:
    """Device ``i`` holds every chunk, each with only its own contribution (column ``i``)."""
    return tuple(tuple(1 << i for _ in range(k)) for i in range(k))


def final_context(k: int) -> Context:
    full = (1 << k) - 1
    return tuple(tuple(full for _ in range(k)) for _ in range(k))


def rows_of(s: State) -> Tuple[int, ...]:
    """Indices of the non-empty rows (chunks held)."""
    return tuple(r for r, m in enumerate(s) if m)


def _check_reducible(states, g, idx, ins, collective):
    rows = rows_of(states[0])
    for s in states[1:]:
        if rows_of(s) != rows:
            raise PreconditionError(idx, ins, Precondition.SAME_ROWS, g)
    summed = []
    for r in range(len(states[0])):
        acc = 0
        for s in states:
            if acc & s[r]:
                raise PreconditionError(idx, ins, Precondition.DISJOINT_CONTRIBUTIONS, g, f"chunk {r}")
            acc |= s[r]
        summed.append(acc)
    if collective is Collective.REDUCE_SCATTER and len(rows) % len(states):
        raise PreconditionError(idx, ins, Precondition.SCATTER_DIVISIBLE, g,
                                f"{len(rows)} chunks over {len(states)} devices")
    return tuple(summed), rows


def apply_collective(collective: Collective, states: Sequence[State], idx: int = 0, ins=None, group=None):
    """Post-states of one group (Figure 8); raises :class:`PreconditionError`."""
    states = list(states)
    g = group if group is not None else tuple(range(len(states)))
    k = len(states[0])
    if collective in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE):
        s, rows = _check_reducible(states, g, idx, ins, collective)
        if collective is Collective.ALL_REDUCE:
            return [s] * len(states)
        if collective is Collective.REDUCE:
            empty = (0,) * k
            return [s] + [empty] * (len(states) - 1)
        per = len(rows) // len(states)
        out = []
        for m in range(len(states)):
            mine = set(rows[m * per:(m + 1) * per])
            out.append(tuple(v if r in mine else 0 for r, v in enumerate(s)))
        return out
    if collective is Collective.ALL_GATHER:
        seen = set()
        n0 = len(rows_of(states[0]))
        for s in states:
            rs = rows_of(s)
            if len(rs) != n0:
                raise PreconditionError(idx, ins, Precondition.EQUAL_ROW_COUNTS, g)
            if seen & set(rs):
                raise PreconditionError(idx, ins, Precondition.DISJOINT_ROWS, g)
            seen |= set(rs)
        s = tuple(_or_rows(states, r) for r in range(k))
        return [s] * len(states)
    if collective is Collective.BROADCAST:
        root = states[0]
        strict = False
        for st in states[1:]:
            for a, b in zip(st, root):
                if a & ~b:
                    raise PreconditionError(idx, ins, Precondition.ROOT_DOMINATES, g)
            if st != root:
                strict = True
        if not strict:
            raise PreconditionError(idx, ins, Precondition.ROOT_INCREASES, g)
        return [root] * len(states)
    raise ValueError(collective)


def _or_rows(states, r):
    acc = 0
    for s in states:
        acc |= s[r]
    return acc


def apply_groups(ctx: Context, groups, collective: Collective, idx: int = 0, ins=None,
                 require_progress: bool = True) -> Context:
    """Apply ``collective`` on every group of size > 1; other devices are unchanged (sec. 3.3)."""
    new = list(ctx)
    for g in groups:
        if len(g) < 2:
            continue
        for d, s in zip(g, apply_collective(collective, [ctx[d] for d in g], idx, ins, g)):
            new[d] = s
    new = tuple(new)
    if require_progress and new == ctx:
        raise PreconditionError(idx, ins, Precondition.PROGRESS)
    return new


def run(program: Program, hierarchy: SynthesisHierarchy, ctx: Context = None,
        require_progress: bool = True) -> Context:
    """Final context of a program from the initial one; raises on the first failed precondition."""
    ctx = initial_context(hierarchy.num_devices) if ctx is None else ctx
    for idx, ins in enumerate(program.steps):
        ctx = apply_groups(ctx, hierarchy.groups(ins), ins.collective, idx, ins, require_progress)
    return ctx


def is_valid(program: Program, hierarchy: SynthesisHierarchy) -> bool:
    """True when every step's precondition holds and every device ends with the full reduction."""
    try:
        return run(program, hierarchy) == final_context(hierarchy.num_devices)
    except PreconditionError:
        return False
