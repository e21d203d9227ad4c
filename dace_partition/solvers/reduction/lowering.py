"""Lowering a synthesized program from one reduction group to the whole system (sec. 3.4).

The synthesis hierarchy (d) only describes one reduction group; every other group of the
placement repeats the same pattern (Figure 6).  A lowered step is the list of device groups of
the full system plus the collective and, for every synthesis device, the chunks it holds before
and after the step (read off the semantics, so the executor and the cost model never re-derive
them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from .language import Collective, Program, SynthesisHierarchy
from .model import Placement
from .semantics import initial_context, apply_groups, rows_of


@dataclass(frozen=True)
class LoweredStep:
    """One step on the full system.

    ``groups`` are tuples of system device ids (members in synthesis order, the first is the
    root of Reduce/Broadcast); ``sgroups`` the same groups as synthesis indices;
    ``rows_before``/``rows_after`` the chunk indices held by every synthesis index.
    """
    collective: Collective
    groups: Tuple[Tuple[int, ...], ...]
    sgroups: Tuple[Tuple[int, ...], ...]
    rows_before: Tuple[Tuple[int, ...], ...]
    rows_after: Tuple[Tuple[int, ...], ...]


def synthesis_hierarchy(placement: Placement) -> SynthesisHierarchy:
    names = tuple(placement.hierarchy.levels[j].name for j in placement.synthesis_levels)
    return SynthesisHierarchy(placement.synthesis_sizes, names)


def lower(program: Program, placement: Placement) -> Tuple[LoweredStep, ...]:
    """Lower ``program`` (valid for ``placement``'s synthesis hierarchy) to system device groups."""
    sh = synthesis_hierarchy(placement)
    red_groups = placement.groups()
    ctx = initial_context(sh.num_devices)
    out = []
    for idx, ins in enumerate(program.steps):
        sg = tuple(g for g in sh.groups(ins) if len(g) > 1)
        new = apply_groups(ctx, sg, ins.collective, idx, ins)
        groups = tuple(tuple(rg[s] for s in g) for rg in red_groups for g in sg)
        out.append(LoweredStep(ins.collective, groups, sg, tuple(rows_of(s) for s in ctx),
                               tuple(rows_of(s) for s in new)))
        ctx = new
    return tuple(out)
