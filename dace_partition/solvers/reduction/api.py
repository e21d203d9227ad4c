"""Entry points: synthesize for a placement, rank by the cost model, choose against a flat AllReduce."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import List, Optional, Sequence, Tuple, Union

from .cost import CostModel
from .language import Program, SynthesisHierarchy
from .lowering import synthesis_hierarchy
from .model import Placement, SystemHierarchy, enumerate_matrices, placement_from_grid
from .synthesis import DEFAULT_MAX_SIZE, synthesize

# A chosen program must beat the flat collective by this factor: a tie (e.g. a one-level
# synthesis hierarchy, whose best program *is* the AllReduce) keeps the flat call.
MARGIN = 0.99


@lru_cache(maxsize=64)
def _programs(sizes: Tuple[int, ...], max_size: int) -> Tuple[Program, ...]:
    """Programs depend on the synthesis level sizes only (names are cosmetic): cache on them."""
    return tuple(synthesize(SynthesisHierarchy(sizes), max_size).programs)


def programs_for(placement: Placement, max_size: int = DEFAULT_MAX_SIZE) -> Tuple[Program, ...]:
    return _programs(placement.synthesis_sizes, max_size)


@dataclass(frozen=True)
class RankedProgram:
    program: Program
    predicted_s: float


def rank_programs(placement: Placement, nbytes: int, model: Optional[CostModel] = None,
                  max_size: int = DEFAULT_MAX_SIZE) -> List[RankedProgram]:
    """All synthesized programs, fastest predicted first (ties: shorter first)."""
    model = model or CostModel.default(placement.hierarchy)
    ranked = [RankedProgram(p, model.program_time(p, placement, nbytes)) for p in programs_for(placement, max_size)]
    ranked.sort(key=lambda r: (r.predicted_s, len(r.program)))
    return ranked


@dataclass(frozen=True)
class ReductionChoice:
    """What to run for one reduction: ``program is None`` means the flat AllReduce."""
    placement: Placement
    nbytes: int
    program: Optional[Program]
    predicted_s: float
    flat_s: float
    candidates: int

    @property
    def is_flat(self) -> bool:
        return self.program is None

    @property
    def speedup(self) -> float:
        return self.flat_s / self.predicted_s if self.predicted_s > 0 else 1.0

    def describe(self) -> str:
        names = synthesis_hierarchy(self.placement).level_names
        what = "flat AllReduce" if self.program is None else self.program.describe(names)
        return (f"{what}: predicted {self.predicted_s * 1e3:.3f} ms vs flat AllReduce "
                f"{self.flat_s * 1e3:.3f} ms ({self.candidates} programs)")


GroupSpec = Union[Placement, Tuple[Sequence[int], Sequence[int]], None]


def as_placement(hierarchy: SystemHierarchy, group: GroupSpec) -> Optional[Placement]:
    """A placement from a :class:`Placement`, a ``(grid_shape, reduce_axes)`` pair of a row-major
    process grid, or ``None`` (all ranks reduce together).  ``None`` when the grid does not map
    onto the hierarchy (then only a flat collective is possible)."""
    if isinstance(group, Placement):
        return group
    if group is None:
        return placement_from_grid(hierarchy, (hierarchy.num_devices,), (0,))
    grid, axes = group
    return placement_from_grid(hierarchy, tuple(grid), tuple(axes))


def choose_reduction(hierarchy: SystemHierarchy, group: GroupSpec, nbytes: int,
                     model: Optional[CostModel] = None, max_size: int = DEFAULT_MAX_SIZE) -> ReductionChoice:
    """The program to run for a reduction of ``nbytes`` per device over ``group``.

    Returns the fastest predicted synthesized program, or the flat AllReduce (``program=None``)
    when no program is predicted faster by more than 1 % (always the case inside one node,
    where the only programs are AllReduce, ReduceScatter+AllGather and Reduce+Broadcast).
    """
    placement = as_placement(hierarchy, group)
    if placement is None:
        raise ValueError(f"group {group} does not map onto hierarchy {hierarchy}")
    model = model or CostModel.for_machine(hierarchy)
    flat = model.flat_time(placement, nbytes)
    ranked = rank_programs(placement, nbytes, model, max_size)
    if ranked and ranked[0].predicted_s < MARGIN * flat:
        return ReductionChoice(placement, nbytes, ranked[0].program, ranked[0].predicted_s, flat, len(ranked))
    return ReductionChoice(placement, nbytes, None, flat, flat, len(ranked))


@dataclass
class CountReport:
    """Programs synthesized over every parallelism matrix of one configuration (Table 4)."""
    hierarchy: SystemHierarchy
    axes: Tuple[int, ...]
    reduce_axes: Tuple[int, ...]
    per_matrix: List[Tuple[Placement, int]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(n for _, n in self.per_matrix)


def count_programs(hierarchy: SystemHierarchy, axes: Sequence[int], reduce_axes: Sequence[int],
                   max_size: int = DEFAULT_MAX_SIZE) -> CountReport:
    """Synthesize (uncached) for every matrix; the paper's "programs" column is the total."""
    rep = CountReport(hierarchy, tuple(axes), tuple(reduce_axes))
    t0 = time.perf_counter()
    for m in enumerate_matrices(hierarchy, axes):
        p = Placement(hierarchy, tuple(axes), m, tuple(reduce_axes))
        rep.per_matrix.append((p, len(synthesize(synthesis_hierarchy(p), max_size).programs)))
    rep.seconds = time.perf_counter() - t0
    return rep


def plan_reduction(hierarchy: SystemHierarchy, group: GroupSpec, nbytes: int,
                   model: Optional[CostModel] = None, max_size: int = DEFAULT_MAX_SIZE):
    """``(choice, plan)``: :func:`choose_reduction` plus the executable :class:`ReductionPlan`
    (``plan.execute(comm, buffer, device_of_rank)``; a flat plan when the flat call is chosen)."""
    from .mpi_exec import ReductionPlan
    choice = choose_reduction(hierarchy, group, nbytes, model, max_size)
    return choice, ReductionPlan.build(choice.placement, choice.program)
