"""The plan of one kernel on one grid, and of a whole schedule (see the package docstring).

Every scheduled kernel keeps its global arrays on rank 0 between kernels: it scatters what it reads into
rank-local buffers and gathers what it writes back (fusion, loop carry and rank-local arguments remove
round trips later, deciding from the same Moves). A plan holds, per kernel, the constraint analysis, the
rank-local buffers (one per array and role) and those Moves, each with the first solver that implements it
and the solver's cost.
"""
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import dace
import numpy as np
import sympy
from dace.sdfg import SDFG

from ..analysis.constraints import Access, Direction, KernelPlan, plan_map_kernel, plan_nested_kernel, same_subset
from ..errors import UnsupportedPattern
from ..ir import ROOT, Cost, Device, Distribution, IoMode, Move, MoveKind, ReduceOp, Role
from ..schedule import Kernel, KernelKind
from ..solvers.base import Solver
from ..solvers.registry import choose
from .loop_reads import size_symbols, widen_loop_sized_reads

def role(a: Access) -> Role:
    """Which rank-local buffer of its array an access fills or empties: the reads' (``Role.IN``) or the
    write's (``Role.OUT``; prior values of a write go there too)."""
    return Role.OUT if a.direction == Direction.OUT or a.prior else Role.IN


@dataclass(frozen=True)
class PlannedMove:
    """One scatter or gather of a kernel: which access and buffer it serves, the solver, its cost."""
    array: str
    role: Role
    move: Move
    solver: str
    cost: Cost

    @property
    def kind(self) -> MoveKind:
        return self.move.kind


@dataclass(frozen=True)
class KernelMoves:
    """One kernel planned on one grid: the analysis, the rank-local buffers and the Moves."""
    analysis: KernelPlan
    buffers: Tuple[Tuple[Tuple[str, Role], Tuple[str, object]], ...]  # ((array, role), (buffer, subset))
    moves: Tuple[PlannedMove, ...]

    @property
    def kernel(self) -> Kernel:
        return self.analysis.kernel

    @property
    def grid(self) -> Tuple[int, ...]:
        return self.analysis.grid

    def buffer_map(self) -> Dict[Tuple[str, Role], Tuple[str, object]]:
        return dict(self.buffers)

    def find(self, array: str, kind: MoveKind, role_: Role) -> PlannedMove:
        for m in self.moves:
            if m.array == array and m.kind == kind and m.role == role_:
                return m
        raise KeyError((array, kind, role_))

    def reads(self) -> List[PlannedMove]:
        return [m for m in self.moves if m.kind == MoveKind.SCATTER]

    def writes(self) -> List[PlannedMove]:
        return [m for m in self.moves if m.kind == MoveKind.GATHER]


@dataclass(frozen=True)
class LoweringPlan:
    """The whole decision of a lowering before anything is rewritten: every kernel of the program (in
    order), the grids, the kernels planned on more than one rank (:class:`KernelMoves`) and those whose grid
    has one rank (they stay on rank 0). The partition pipeline (:mod:`dace_partition.passes.pipeline`)
    applies it, and the report's kernel lines are rendered from it."""
    kernels: Tuple[KernelMoves, ...]
    ranks_needed: int
    program: Tuple[Kernel, ...] = ()  # every kernel of the program, in program order
    grids: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()  # (map name, grid) of the schedule
    one_rank: Tuple[KernelPlan, ...] = ()  # scheduled kernels on a grid of one rank: rank 0, global arrays
    expanded: frozenset = frozenset()  # labels of library nodes replaced by their pure expansion (uneven tiles)
    round_trips: tuple = ()  # the round trips through rank 0 removed between kernels (plan.fusion.RoundTrip)
    loop_carries: tuple = ()  # what each loop keeps on the grid across its iterations (plan.carry.LoopCarry)
    local_io: Optional[object] = None  # io="distributed": the rank-local arguments (plan.local_io.LocalIo)
    broadcasts: tuple = ()  # data that interstate edges read, sent to every rank (plan.branch.Broadcast)
    # every scatter, gather and grid-to-grid move the partitioned program makes, after the decisions above
    # (plan.traffic.Traffic; the broadcasts apart): what the search prices and the report counts
    traffic: tuple = ()
    # device="gpu": where each array lives and which states of rank 0 run on the GPU (plan.residency.GpuPlacement)
    gpu: Optional[object] = None

    def moves(self) -> List[PlannedMove]:
        return [m for k in self.kernels for m in k.moves]


def analyse_kernel(sdfg: SDFG, kernel: Kernel, grids: Dict[str, Tuple[int, ...]]) -> KernelPlan:
    """The constraint analysis of a kernel on its grid (a map's own grid, or a nested kernel's maps)."""
    if kernel.kind == KernelKind.MAP:
        return plan_map_kernel(sdfg, kernel, grids[kernel.maps[0].name])
    return plan_nested_kernel(sdfg, kernel, grids)


def plan_kernel(sdfg: SDFG, kernel: Kernel, grids: Dict[str, Tuple[int, ...]], solvers: Sequence[Solver],
                analysis: Optional[KernelPlan] = None) -> KernelMoves:
    """Plans one kernel on its grid; raises :class:`UnsupportedPattern` (naming the array, its subset and
    the reason) when no solver implements one of its moves. Changes nothing."""
    from ..schedule.loops import assigned_symbols
    assigned = assigned_symbols(sdfg)
    plan = widen_loop_sized_reads(sdfg, analysis if analysis is not None else analyse_kernel(sdfg, kernel, grids),
                                  assigned)
    buffers = local_buffers(plan)
    refuse_loop_sized_buffers(plan, buffers, assigned)
    read = {a.array for a in plan.accesses if a.direction == Direction.IN and not a.prior}
    fills = [id(a) for a in scatters(plan, buffers)]
    planned = []
    for a in plan.accesses:
        for move in moves_of(sdfg, plan, a):
            if move.kind == MoveKind.SCATTER and id(a) not in fills:
                continue  # a read fills the same buffer
            if a.accumulates and a.array in read and move.grid_side.may_overlap():
                raise UnsupportedPattern(a.array, a.subset, "the array is read and accumulated (write-conflict "
                                         "resolution) by the same kernel, and several ranks hold each element")
            solver, refused = choose(move, solvers)
            if solver is None:
                raise UnsupportedPattern(a.array, a.subset, "no solver implements it: " +
                                         "; ".join(f"{n}: {why}" for n, why in refused))
            planned.append(PlannedMove(a.array, role(a), move, solver.name, solver.cost(move)))
    return KernelMoves(plan, tuple(buffers.items()), tuple(planned))


def plan_lowering(sdfg: SDFG, kernels: Sequence[Kernel], grids: Dict[str, Tuple[int, ...]],
                  solvers: Sequence[Solver], expanded=(), fuse: bool = True, io: IoMode = IoMode.ROOT,
                  device: Device = Device.CPU) -> LoweringPlan:
    """Plans every kernel that ``grids`` schedules on more than one rank and, with ``fuse``, the round trips
    through rank 0 between them that go (:func:`~dace_partition.plan.fusion.plan_round_trips`) and what
    each loop keeps on the grid (:func:`~dace_partition.plan.carry.plan_loop_carries`), and with
    ``io=IoMode.DISTRIBUTED`` the rank-local arguments (:func:`~dace_partition.plan.local_io.plan_local_io`),
    and the data that interstate edges read broadcast to every rank
    (:func:`~dace_partition.plan.branch.plan_branch_data`), and with ``device=Device.GPU`` where each
    array lives (:func:`~dace_partition.plan.residency.plan_gpu_placement`); changes nothing. Every kernel
    is analysed before any is planned, so a constraint that cannot hold is reported before a missing solver."""
    analysed, needed = [], 1
    for k in kernels:
        if any(m.name in grids for m in k.maps):
            analysed.append(analyse_kernel(sdfg, k, grids))
            needed = max(needed, analysed[-1].size)
    planned = tuple(plan_kernel(sdfg, a.kernel, grids, solvers, a) for a in analysed if a.size > 1)
    plan = LoweringPlan(planned, needed, tuple(kernels), tuple(grids.items()),
                        tuple(a for a in analysed if a.size == 1), frozenset(expanded))
    from .model import PartitionModel
    from .residency import plan_gpu_placement
    if not planned:
        gpu = plan_gpu_placement(sdfg, PartitionModel(sdfg, plan, solvers)) if device == Device.GPU else None
        return replace(plan, gpu=gpu)
    from .branch import plan_branch_data
    from .traffic import traffic
    plan, model = decide(sdfg, plan, solvers, fuse, io)
    plan = replace(plan, broadcasts=plan_branch_data(model, plan), traffic=traffic(model))
    return replace(plan, gpu=plan_gpu_placement(sdfg, model)) if device == Device.GPU else plan


def decide(sdfg: SDFG, plan: LoweringPlan, solvers: Sequence[Solver], fuse: bool = True, io: IoMode = IoMode.ROOT):
    """``(plan, model)``: ``plan`` with the round trips that go, each loop's carry and (``io=IoMode.DISTRIBUTED``)
    the rank-local arguments decided, and the model of the partitioned program those decisions leave (its
    moves are the program's). Raises :class:`UnsupportedPattern` where an argument cannot be rank-local.
    The lowering decides on the whole plan; the search on a plan restricted to the arrays it prices
    (:func:`~dace_partition.plan.traffic.restricted`): every decision is one array's, or a copy's pair."""
    from .carry import plan_loop_carries
    from .fusion import plan_round_trips
    from .local_io import plan_local_io
    from .model import PartitionModel
    if fuse:
        plan = replace(plan, round_trips=plan_round_trips(sdfg, plan, solvers))
    model = PartitionModel(sdfg, plan, solvers)
    if fuse:
        plan = replace(plan, loop_carries=plan_loop_carries(model))
    if io == IoMode.DISTRIBUTED:
        plan = replace(plan, local_io=plan_local_io(model))
    return plan, model


def refuse_loop_sized_buffers(plan: KernelPlan, buffers, assigned):
    """Rank-local buffers are allocated when the program starts, so their sizes may use the program's
    symbols but not a variable that a loop assigns (``assigned``; a kernel of ``for i: corr[i, i+1:M] = ...``
    whose tile has ``M - i - 1`` columns): such a kernel is refused in words before anything is rewritten."""
    for (array, _), (_, subset) in buffers.items():
        stray = sorted(size_symbols(subset, plan, assigned))
        if stray:
            raise UnsupportedPattern(array, subset, f"kernel '{plan.kernel.label}' needs a rank-local buffer whose "
                                     f"size depends on {', '.join(stray)}, which a loop assigns; buffers are sized "
                                     "when the program starts, so leave this kernel out of the schedule")


def local_buffers(plan: KernelPlan) -> Dict[Tuple[str, Role], Tuple[str, object]]:
    """(array, role) -> (rank-local buffer name, its subset in grid coordinates).

    The analysis gives at most one read and one write per array (all reads of an array merged into their
    bounding box: block plus halo). A read and a write of the same block share one buffer; a write of
    another block (the interior ``A[1:N-1]`` of an array read whole) gets a buffer of its own: the kernel
    reads the values from before it, as a map's semantics say, and the gather sends exactly the written
    block.

    Names are ``__dp{k}_{array}`` (``_in`` / ``_out`` where a read and a write differ), made unique against
    the kernel's own symbols (its grid coordinates ``__dp{k}_r{d}``, ``__dp{k}_member`` and their ``_v``
    scalars: an array called ``r0`` would take a coordinate's name) and against each other (``A`` read and
    written apart beside an array called ``A_in``)."""
    k = plan.kernel.index
    symbols = {c for c in plan.coords if c} | {f"__dp{k}_member"}
    taken = symbols | {f"{s}_v" for s in symbols}

    def fresh(name: str) -> str:
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    out = {}
    for array in dict.fromkeys(a.array for a in plan.accesses):
        reads = [a for a in plan.accesses if a.array == array and role(a) == Role.IN]
        writes = [a for a in plan.accesses if a.array == array and a.direction == Direction.OUT]
        priors = [a for a in plan.accesses if a.array == array and a.prior]
        for what, accs in (("reads", reads), ("writes", writes), ("prior values", priors)):
            if len(accs) > 1 and not all(same_subset(accs[0].subset, b.subset) for b in accs[1:]):
                raise UnsupportedPattern(array, "] and [".join(str(a.subset) for a in accs),
                                         f"kernel '{plan.kernel.label}' has {what} of several blocks per rank, but "
                                         "each array gets one rank-local buffer per role")
        read = reads[0] if reads else None
        write = writes[0] if writes else (priors[0] if priors else None)
        shared = read is not None and write is not None and same_subset(read.subset, write.subset)
        base = f"__dp{k}_{array}"
        if shared or write is None or read is None:
            name = fresh(base)
            names = {Role.IN: name, Role.OUT: name}
        else:
            names = {Role.IN: fresh(base + "_in"), Role.OUT: fresh(base + "_out")}
        if read is not None:
            out[(array, Role.IN)] = (names[Role.IN], read.subset)
        if write is not None:
            out[(array, Role.OUT)] = (names[Role.OUT], write.subset)
    return out


def scatters(plan: KernelPlan, buffers) -> List[Access]:
    """The accesses that fill a rank-local buffer, one per buffer and role: a read, an accumulated write
    (its prior value), or the prior values of a dynamic write, unless a read fills the same buffer."""
    out = []
    for a in plan.accesses:
        if not (a.direction == Direction.IN or a.accumulates):
            continue
        if a.prior and buffers.get((a.array, Role.IN), (None, ))[0] == buffers[(a.array, Role.OUT)][0]:
            continue
        if any(b.array == a.array and role(b) == role(a) and b.direction == a.direction for b in out):
            continue
        out.append(a)
    return out


def moves_of(sdfg: SDFG, plan: KernelPlan, a: Access) -> List[Move]:
    """The scatter and/or gather of one access of a kernel: rank 0 <-> the kernel's grid."""
    desc = sdfg.arrays[a.array]
    k = plan.kernel.index
    op = ReduceOp.of(a.op)
    out = []
    # Symbols that ``sdfg.specialize`` fixed count as their values, so the blocks (and the report's bytes)
    # are known before run time.
    fixed = {dace.symbolic.symbol(n): v for n, v in sdfg.constants.items() if isinstance(v, (int, np.integer))}
    subset = dace.subsets.Range([tuple(_fix(x, fixed) for x in r) for r in a.subset]) if fixed else a.subset
    shape = tuple(_fix(x, fixed) if fixed else x for x in desc.shape)
    size = desc.dtype.bytes
    if a.direction == Direction.IN or a.accumulates:
        dist = Distribution.on_grid(subset, plan.grid, plan.coords, k)
        out.append(Move(a.array, ROOT, dist, shape, size, op if a.accumulates else None, a.accumulates))
    if a.direction == Direction.OUT:
        dist = Distribution.on_grid(subset, plan.grid, plan.coords, k, pending=op)
        out.append(Move(a.array, dist, ROOT, shape, size, op, a.accumulates))
    return out


def _fix(x, fixed):
    """``x`` with the fixed symbols replaced by their values (no substitution where none occurs)."""
    x = sympy.sympify(x)
    return x.subs(fixed) if x.free_symbols & fixed.keys() else x
