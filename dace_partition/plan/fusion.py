"""Round trips through rank 0 between kernels, decided on the plan (thesis 4.5) before anything is rewritten.

Partitioned as planned, a transient that one kernel produces and the next consumes makes a round trip:
``local_A -> gather to rank 0 -> T -> scatter from rank 0 -> local_B``. Each scatter of a value of ``T``
(a transient may be written by several kernels in turn: ``q = 0`` then ``q += ...``; each gather starts a
new value) becomes one of:

* ``NOOP``: both sides hold the same blocks on the same ranks (and final values): kernel B reads
  ``local_A`` directly;
* ``MOVE``: the grid-to-grid :class:`~dace_partition.ir.Move` ``local_A -> local_B``, implemented by the
  first solver of the registry that accepts it.

An input that the program never writes, scattered again in the same blocks to the same ranks, is read
from the first scatter's buffer instead (``REUSE``). Either way ``T`` is never allocated at global size
nor sent to rank 0.

The decisions name the scatters and gathers the partition will make (:class:`Site`: kernel, array, kind,
buffer role); :class:`~dace_partition.passes.fusion.FuseRoundTrips` carries them out. Whether a reader
sees the producer's value is a question about the program's state machine, asked of it with each planned
kernel's state standing for two points: before the kernel (where its scatters will be) and after it (its
gathers).
"""
from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from dace.sdfg import SDFG, SDFGState

from ..analysis.constraints import Direction, known_sizes
from ..ir import Move, MoveKind, Role
from ..ir.relations import covers
from ..schedule import ordered_states
from ..schedule.loops import assigned_symbols, find_loops
from ..solvers.base import block_shape
from ..solvers.registry import implement
from .lowering import LoweringPlan, role, scatters


class FusionKind(str, Enum):
    NOOP = "noop"  # the consumer reads the producer's local buffer
    MOVE = "move"  # a grid-to-grid move replaces the round trip through rank 0
    REUSE = "reuse"  # an input scattered once for two kernels
    HOIST = "hoist"  # an input a loop only reads, scattered once before the loop (passes/loops.py)
    INSIDE = "inside"  # the prior values of written blocks copied from the rank's read block (passes/loops.py)

    def __str__(self):
        return self.value


@dataclass(frozen=True)
class Fusion:
    """One decision: what becomes of one scatter (``consumer`` reads ``array`` from ``producer``)."""
    kind: FusionKind
    array: str
    producer: int  # grid ids (kernel indices)
    consumer: int
    move: Optional[Move] = None  # MOVE: the grid-to-grid move
    solver: Optional[str] = None  # MOVE: the solver that implements it


@dataclass(frozen=True)
class Site:
    """One scatter or gather that the partition makes: its kernel (grid id), array, kind and the rank-local
    buffer it fills or empties."""
    kernel: int
    array: str
    kind: MoveKind
    role: Role

    def __str__(self):
        return f"{self.kind} of '{self.array}' ({self.role}) at kernel {self.kernel}"


@dataclass(frozen=True)
class RoundTrip:
    """What becomes of the scatter at ``reader``: it reads from ``source`` (the gather whose value it reads,
    or for ``REUSE`` the first scatter of the same blocks); with ``last`` the gather goes too."""
    fusion: Fusion
    reader: Site
    source: Site
    last: bool


@dataclass(frozen=True)
class _Event:
    """A planned scatter or gather, with what the decision asks of it."""
    site: Site
    move: Move
    state: SDFGState  # its kernel's state
    buffer: str  # the rank-local buffer it fills or empties
    shape: tuple  # that buffer's shape
    updated: bool  # the kernel writes that buffer

    @property
    def scatter(self) -> bool:
        return self.site.kind == MoveKind.SCATTER

    @property
    def point(self):
        """Its point of the state machine: before the kernel (a scatter) or after it (a gather)."""
        return (self.state, self.scatter)

    def plain(self) -> bool:
        """Whether the block moves like any other: not an accumulated output whose blocks overlap (there the
        prior value must reach only one holder)."""
        side = self.move.dst if self.scatter else self.move.src
        return not self.move.accumulates or not side.may_overlap()


def plan_round_trips(sdfg: SDFG, plan: LoweringPlan, solvers: Sequence) -> Tuple[RoundTrip, ...]:
    """What to do with every scatter that reads another kernel's output or repeats an earlier scatter of an
    input, for ``plan`` applied to ``sdfg`` (the prepared program); changes nothing."""
    events = _events(sdfg, plan)
    flow = _Flow(sdfg, plan)
    kernel_states = {km.kernel.state for km in plan.kernels}
    accessed_in = {}
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            accessed_in.setdefault(n.data, set()).add(st)
    open_scatters = [e for e in events if e.scatter]
    out: List[RoundTrip] = []
    for arr in dict.fromkeys(e.site.array for e in events if not e.scatter):
        desc = sdfg.arrays.get(arr)
        # T must be touched only by the planned scatters and gathers (no code on rank 0 reads or writes it).
        if desc is None or not desc.transient or not accessed_in.get(arr, set()) <= kernel_states:
            continue
        versions, current, early = [], None, False
        for e in (e for e in events if e.site.array == arr):
            if not e.scatter:
                current = (e, [])
                versions.append(current)
            elif current is not None:
                current[1].append(e)
            else:
                early = True  # read before the first gather (in a loop: the previous iteration's values)
        mine, kept = [], early
        gathers = {g.point for g, _ in versions}
        for g, readers in versions:
            if not readers or not g.plain() or not all(r.plain() for r in readers):
                kept = kept or bool(readers)
                continue
            decided = _version(flow, g, readers, gathers, solvers)
            kept = kept or len(decided) < len(readers)
            mine += decided
            for r in readers:
                open_scatters.remove(r)
        if kept:  # some reader reads rank 0's copy, maybe of another version's elements: keep every gather
            mine = [replace(d, last=False) for d in mine]
        out += mine
    out += _reuse(sdfg, flow, open_scatters)
    return tuple(out)


def _version(flow: "_Flow", g: _Event, readers: List[_Event], gathers, solvers) -> List[RoundTrip]:
    src = g.move.src
    out = []
    kept = False  # a reader keeps its scatter from rank 0: the gather stays too
    for k, s in enumerate(readers):
        last = k == len(readers) - 1 and not kept
        dst = s.move.dst
        if not flow.only_source(g.point, s.point, gathers) or not flow.same_values(g, s) or not covers(src, dst):
            # Another gather (another loop's, or the previous iteration's) may have written what it reads,
            # or it reads elements this gather did not write (``ccol[:, :, k - 1]`` after a kernel wrote
            # ``ccol[:, :, k]``), or its blocks name other elements by now: it reads rank 0's copy.
            kept = True
            continue
        # Reading local_A in place is safe unless this reader updates it and a later reader needs the old value.
        in_place = last or not s.updated
        if not src.partial and in_place and src.same_blocks(dst) and g.shape == s.shape:
            fusion = Fusion(FusionKind.NOOP, g.site.array, src.grid_id, dst.grid_id)
        else:
            move = Move(g.site.array, src, dst, tuple(g.move.shape), int(g.move.itemsize))
            fusion = Fusion(FusionKind.MOVE, g.site.array, src.grid_id, dst.grid_id, move, implement(move, solvers))
        out.append(RoundTrip(fusion, s.site, g.site, last))
    return out


def _reuse(sdfg: SDFG, flow: "_Flow", open_scatters: List[_Event]) -> List[RoundTrip]:
    written = {n.data for st in ordered_states(sdfg) for n in st.data_nodes() if st.in_degree(n) > 0}
    out, firsts = [], []
    for s in open_scatters:
        if s.move.accumulates or s.site.array in written:
            continue
        dist = s.move.dst
        first = next((f for f in firsts if f.site.array == s.site.array and f.move.dst.same_blocks(dist)
                      and f.shape == s.shape and flow.only_source(f.point, s.point, {f.point})
                      and flow.same_values(f, s)), None)
        if first is None:
            firsts.append(s)
            continue
        fusion = Fusion(FusionKind.REUSE, s.site.array, first.move.dst.grid_id, dist.grid_id)
        out.append(RoundTrip(fusion, s.site, first.site, False))
    return out


def _events(sdfg: SDFG, plan: LoweringPlan) -> List[_Event]:
    """The scatters and gathers the partition makes, in program order (per kernel, as it makes them: the
    scatters, then the gathers)."""
    fixed = known_sizes(sdfg)
    by_state: Dict[SDFGState, list] = {}
    for km in plan.kernels:
        by_state.setdefault(km.kernel.state, []).append(km)
    out = []
    for st in ordered_states(sdfg):
        for km in by_state.get(st, ()):
            a, bufs, k = km.analysis, km.buffer_map(), km.kernel.index
            shapes = {}
            for name, subset in bufs.values():
                shapes.setdefault(name, tuple(block_shape(subset, a.grid, a.coords, fixed)))
            written = {bufs[key][0] for key in bufs if key[1] == Role.OUT}
            for acc in scatters(a, bufs):
                name = bufs[(acc.array, role(acc))][0]
                site = Site(k, acc.array, MoveKind.SCATTER, role(acc))
                out.append(_Event(site, km.find(acc.array, MoveKind.SCATTER, role(acc)).move, st, name,
                                  shapes[name], name in written))
            for acc in a.accesses:
                if acc.direction == Direction.OUT:
                    name = bufs[(acc.array, Role.OUT)][0]
                    site = Site(k, acc.array, MoveKind.GATHER, Role.OUT)
                    out.append(_Event(site, km.find(acc.array, MoveKind.GATHER, Role.OUT).move, st, name,
                                      shapes[name], True))
    return out


def block_symbols(moves: Iterable[Move]) -> set:
    """Names of the symbols in the per-rank blocks of either side of ``moves``."""
    out = set()
    for m in moves:
        for dist in (m.src, m.dst):
            if not dist.is_root:
                for rng in dist.subset:
                    for x in rng:
                        out |= {str(f) for f in getattr(x, "free_symbols", ())}
    return out


class _Flow:
    """The program's state machine with each planned kernel's state as two points, ``(state, True)`` before
    the kernel and ``(state, False)`` after it; any other block is a point of its own."""

    def __init__(self, sdfg: SDFG, plan: LoweringPlan):
        self.sdfg = sdfg
        self.kernels = {km.kernel.state for km in plan.kernels}
        self.loops = find_loops(sdfg)
        # symbols assigned on interstate edges or by loops, and those the partition's start-up assigns
        self.assigned = assigned_symbols(sdfg) | {"__dp_rank"}
        for km in plan.kernels:
            self.assigned |= {c for c in km.analysis.coords if c} | {f"__dp{km.kernel.index}_member"}

    def entry(self, block):
        return (block, True) if block in self.kernels else block

    def exit(self, block):
        return (block, False) if block in self.kernels else block

    def preds(self, point) -> List[object]:
        if isinstance(point, tuple) and not point[1]:
            return [(point[0], True)]
        b = _block(point)
        return [self.exit(e.src) for e in b.parent_graph.in_edges(b)]

    def edges(self, graph, skip=frozenset()) -> List[Tuple[object, object, object]]:
        """(from, to, interstate edge or None) of ``graph``'s points, without the edges whose ids are in ``skip``."""
        out = [(self.exit(e.src), self.entry(e.dst), e) for e in graph.edges() if id(e) not in skip]
        return out + [((b, True), (b, False), None) for b in graph.nodes() if b in self.kernels]

    def only_source(self, src, reader, sources) -> bool:
        """Whether every path that reaches point ``reader`` (from the program's start, around loops too)
        last passes a point of ``sources`` at ``src``: states are listed breadth-first, not in the order
        they run, so "the gather before it in the list" is not enough (a loop's exit and its body
        interleave)."""
        return only_source(src, reader, sources, self.preds, self.entry)

    def same_values(self, a: _Event, b: _Event) -> bool:
        """Whether the symbols in the blocks of both moves (``wcon[:, :, k + 1]``) have the same values at
        ``b`` as at ``a``: no interstate assignment of them (nor a loop over them) lies on a path from the
        one to the other within one iteration of the loops around both. Blocks written with the same
        expression name other elements where ``k`` changed in between (vadv's three loops over ``k``)."""
        v = block_symbols((a.move, b.move)) & self.assigned
        if not v:
            return True
        g = self.sdfg
        if a.state.parent_graph is not g or b.state.parent_graph is not g:
            return False  # inside control-flow regions: not analysed, keep the moves
        back = {id(e) for lp in self.loops if a.state in lp.body and b.state in lp.body
                for e in g.in_edges(lp.head) if e.src in lp.body}
        edges = self.edges(g, back)
        fwd, bwd = _reach(a.point, edges, True), _reach(b.point, edges, False)
        if b.point not in fwd:
            return False
        if any(e is not None and u in fwd and w in bwd and v & set(e.data.assignments) for u, w, e in edges):
            return False
        # a loop region between them may assign them
        return not any(not isinstance(p, (tuple, SDFGState)) and v & assigned_symbols(p) for p in fwd & bwd)


def only_source(src, reader, sources, preds: Optional[Callable] = None, entry: Optional[Callable] = None) -> bool:
    """Whether every path that reaches ``reader`` (from the program's start, around loops too) last passes
    one of ``sources`` at ``src``. Points are states unless ``preds`` (a point's predecessors) and ``entry``
    (the point where a block is entered) say otherwise."""
    preds = preds or (lambda u: [e.src for e in u.parent_graph.in_edges(u)])
    entry = entry or (lambda b: b)
    graph = _block(reader).parent_graph
    if _block(src).parent_graph is not graph or src == reader:
        return False
    start = entry(graph.start_block)
    seen, todo, hit = {reader}, [reader], set()
    while todo:
        u = todo.pop()
        before = preds(u)
        if u == start or not before:
            return False  # reached without passing any source
        for w in before:
            if w in seen:
                continue
            seen.add(w)
            if w in sources:
                hit.add(w)
            else:
                todo.append(w)
    return hit == {src}


def _block(point):
    """The state or region of a point (a planned kernel's state stands for two points, see :class:`_Flow`)."""
    return point[0] if isinstance(point, tuple) else point


def _reach(start, edges, forward: bool) -> set:
    nxt = {}
    for u, w, _ in edges:
        a, b = (u, w) if forward else (w, u)
        nxt.setdefault(a, []).append(b)
    seen, todo = {start}, [start]
    while todo:
        for w in nxt.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen
