"""Branch data every rank agrees on, decided on the plan: values that decide control flow are broadcast
from rank 0.

Every rank walks the program's state machine; only rank 0 runs the unscheduled code and holds the global
arrays. An interstate condition that reads data (``while res[0] > tol``, ``if err[0] > 1``, or a symbol
assigned from data that a condition, or code on every rank, then reads) would be evaluated by each rank
on its own copy, which only rank 0 keeps current: ranks would take different branches and the next
collective would hang or pair the wrong calls. :func:`plan_branch_data` decides, for each edge that
reads such data, one ``ROOT -> every rank`` Move per data container (served by the solver registry like
any other scatter) right before the edge is evaluated, in a state after its source; inside a loop this is
one small broadcast per iteration, counted by the report.

Scalar arguments that nothing writes are left alone: every rank receives them. The broadcast covers the
whole world communicator (a grid of ``world_size()`` ranks made at start-up), so ranks outside every
kernel's grid also decide the same way. :class:`~dace_partition.passes.conditions.BroadcastBranchData`
carries the decisions out.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Set, Tuple

import dace
from dace import subsets
from dace.sdfg import SDFG

from ..ir import ROOT, Distribution, Move
from ..schedule import ordered_states
from ..schedule.loops import assigned_from, assignment_reads
from .carry import Enter, Leave
from .fusion import block_symbols
from .lowering import LoweringPlan
from .model import At, PartitionModel, Point

WORLD_GRID_LABEL = "branch data"


@dataclass(frozen=True)
class BranchMove:
    """One container broadcast: ``move`` with ``solver``; ``staged``: a scalar, sent as a one-element array."""
    array: str
    move: Move
    solver: str
    staged: bool


@dataclass(frozen=True)
class Broadcast:
    """The containers ``moves`` reach every rank after the point ``after`` of the partitioned program (a
    state, the gathers after a kernel, or a state made before or after a loop; see
    :class:`~.model.Point`), whose state is labelled ``label``."""
    after: Point
    label: str
    moves: Tuple[BranchMove, ...]

    @property
    def arrays(self) -> Tuple[str, ...]:
        return tuple(m.array for m in self.moves)


def _names(code) -> Set[str]:
    return {str(s) for s in code.get_free_symbols()} if code is not None else set()


def _reads(edges, every_rank: Iterable[str], is_data: Callable[[str], bool]) -> Dict[object, List[str]]:
    """{source: data read to decide} for ``edges`` ((source, condition or None, assignments)): what their
    conditions read, and what their assignments of symbols that decide (those conditions read, those in
    ``every_rank``, and the symbols these are assigned from, transitively) read."""
    decide = set(every_rank)
    for _, cond, _ in edges:
        decide |= _names(cond)
    decide = assigned_from((assignments for _, _, assignments in edges), decide)
    out: Dict[object, List[str]] = {}
    for src, cond, assignments in edges:
        read = _names(cond)
        for k, v in assignments.items():
            if k in decide:
                read |= assignment_reads(v)
        for n in sorted(read):
            if is_data(n) and n not in out.setdefault(src, []):
                out[src].append(n)
    return {s: v for s, v in out.items() if v}


def branch_data(sdfg: SDFG, every_rank: Set[str] = frozenset()) -> Dict[object, List[str]]:
    """{source state: data containers that its out-edges read to decide, directly or through symbols
    assigned from data on any edge}, on ``sdfg`` as it is; only data rank 0 alone keeps current.
    ``every_rank``: symbols that code on every rank reads besides conditions (the blocks of moves, the
    kernels' subsets): a symbol assigned from data (``t = idx[a, b]`` for ``G[t]``) needs the same value on
    every rank too."""
    edges = [(e.src, None if e.data.is_unconditional() else e.data.condition, e.data.assignments)
             for e in sdfg.edges()]
    written = {n.data for st in ordered_states(sdfg) for n in st.data_nodes() if st.in_degree(n) > 0}
    return _reads(edges, every_rank, lambda n: _rank0_data(sdfg, n, written))


def _rank0_data(sdfg: SDFG, name: str, written: Set[str]) -> bool:
    desc = sdfg.arrays.get(name)
    if desc is None or name.startswith("__dp"):
        return False
    if isinstance(desc, dace.data.Scalar) and not desc.transient:
        return name in written
    return True


def plan_branch_data(model: PartitionModel, plan: LoweringPlan) -> Tuple[Broadcast, ...]:
    """The broadcasts of branch data that the program ``model`` stands for needs (after the round trips,
    the loop carry and the rank-local arguments), with their Moves; none on one rank."""
    if plan.ranks_needed < 2:
        return ()
    sdfg = model.sdfg
    written = {a.name for a in model.accesses if a.written} | {mv.dst for mv in model.moves}
    out = []
    for src, names in _reads(_edges(model, plan), _every_rank(model, plan),
                             lambda n: _rank0_data(sdfg, n, written)).items():
        moves = []
        for name in names:
            desc = sdfg.arrays[name]
            staged = isinstance(desc, dace.data.Scalar)  # interstate code reads it by value
            shape = (1, ) if staged else tuple(desc.shape)
            rng = subsets.Range([(0, s - 1, 1) for s in shape])
            dst = Distribution.on_grid(rng, (plan.ranks_needed, ), (None, ), world_grid(plan))
            move = Move(name, ROOT, dst, shape, int(desc.dtype.bytes))
            moves.append(BranchMove(name, move, model.implement(move), staged))
        out.append(Broadcast(src, _label(src), tuple(moves)))
    return tuple(out)


def world_grid(plan: LoweringPlan) -> int:
    """A grid id no kernel uses, for the grid of every rank (the branch data's broadcasts)."""
    return max((k.kernel.index for k in plan.kernels), default=-1) + 1


def _label(point: Point) -> str:
    if point.at_kernel:
        return f"{point.state.label}_gather"
    if point.on_loop:
        return f"dp_loop_{point.state.label}_{'pre' if point.at == At.BEFORE_LOOP else 'post'}"
    return point.state.label


def _edges(model: PartitionModel, plan: LoweringPlan) -> list:
    """The partitioned program's interstate edges that may read data, as (source point, condition or None,
    assignments), in the prepared program's edge order: an edge leaving a kernel leaves its gathers, and
    the loop carry's states split the loops' entry and exit edges (the condition stays before the state
    made on an entry edge, its assignments go after it; both stay before a state made on an exit edge)."""
    sdfg = model.sdfg
    loops = {lp.head: lp for lp in model.loops}

    def point(state):
        return Point(At.AFTER_KERNEL if state in model.kernel_states else At.STATE, state)

    chains = {id(e): [[point(e.src), None if e.data.is_unconditional() else e.data.condition,
                       dict(e.data.assignments)]] for e in sdfg.edges()}
    for carry in plan.loop_carries:
        lp = loops[carry.head]
        for edit in carry.edits:
            if isinstance(edit, Enter):  # the part into the guard: condition, then the new state, then assignments
                chain = chains[id(lp.entries[0])]
                last = chain[-1]
                chain.append([Point(At.BEFORE_LOOP, lp.head), None, last[2]])
                last[2] = {}
            elif isinstance(edit, Leave):  # the part out of the loop: the new state after condition and assignments
                chain = chains[id(lp.exits[0])]
                chain.insert(1, [Point(At.AFTER_LOOP, lp.head), None, {}])
    return [tuple(seg) for e in sdfg.edges() for seg in chains[id(e)]]


def _every_rank(model: PartitionModel, plan: LoweringPlan) -> Set[str]:
    """Symbols that code beyond rank 0 reads: the blocks of every move, the kernels' own subsets and the
    sizes of transients and rank-local buffers (allocated on every rank, also where only rank 0 uses them).
    One assigned from data (``t = neigh_idx[a, b]`` for a block ``G[k, t]``) must be broadcast before it is
    assigned, or the other ranks compute their offsets from uninitialised copies."""
    out = block_symbols(mv.move for mv in model.moves)
    for km in plan.kernels:
        out |= {str(s) for s in km.kernel.state.free_symbols}
    for desc in model.sdfg.arrays.values():  # every rank allocates the transients (spmv's ``A_val[start:stop]``)
        if desc.transient:
            out |= {str(s) for s in desc.free_symbols}
    for shape in model.shapes.values():
        for s in shape:
            out |= {str(f) for f in getattr(s, "free_symbols", ())}
    return out
