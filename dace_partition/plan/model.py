"""A small model of the program as the partition will leave it, for the decisions that follow it.

The loop carry (:mod:`.carry`), rank-local arguments (:mod:`.local_io`) and the broadcasts of branch
data (:mod:`.branch`) are decided on the partitioned
program's scatters and gathers, after the round trips between kernels (:mod:`.fusion`) are gone; the
plan makes them before anything is rewritten, so it keeps this model of that program instead:
:class:`PartitionModel`, made from the prepared program and the plan, and changed by each decision as
the edit it plans will change the program. Edits name a scatter or gather by :class:`~.fusion.Site`
(one the partition makes) or :class:`Made` (one an earlier edit makes).
"""
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Dict, List, Optional, Sequence, Tuple, Union

from dace.sdfg import SDFG

from ..ir import Move, MoveKind, Role
from ..schedule import KernelKind, ordered_states
from ..schedule.loops import Loop, find_loops
from ..solvers.registry import implement
from .fusion import FusionKind, RoundTrip, Site, _events
from .lowering import LoweringPlan


class At(Enum):
    """Where in the partitioned program a :class:`Point` lies."""
    BEFORE_KERNEL = "before a planned kernel (its scatters)"
    KERNEL = "a planned kernel"
    AFTER_KERNEL = "after a planned kernel (its gathers)"
    STATE = "a state without a planned kernel (code on rank 0, a copy)"
    BEFORE_LOOP = "before a loop (the state the loop carry makes on its entry edge)"
    AFTER_LOOP = "after a loop (the state made on its exit edge)"


#: A planned kernel's state stands for three points, in this order.
_SLOT = MappingProxyType({At.BEFORE_KERNEL: 0, At.KERNEL: 1, At.AFTER_KERNEL: 2})


@dataclass(frozen=True)
class Point:
    """Where an access happens: ``at`` a state of the prepared program (``state``), or before or after the
    loop whose guard is ``state``."""
    at: At
    state: object

    @property
    def on_loop(self) -> bool:
        return self.at in (At.BEFORE_LOOP, At.AFTER_LOOP)

    @property
    def at_kernel(self) -> bool:
        return self.at in _SLOT

    def __str__(self):
        return f"{self.at.value}: '{self.state.label}'"


@dataclass(frozen=True)
class Made:
    """A scatter or gather that an edit makes (before or after the loop whose guard is labelled ``loop``)."""
    loop: str
    n: int

    def __str__(self):
        return f"move {self.n} made at '{self.loop}'"


Node = Union[Site, Made]


@dataclass(frozen=True)
class Drop:
    """The scatter or gather goes; with ``rename``, buffer ``rename[0]`` is read as ``rename[1]``."""
    node: Node
    rename: Optional[Tuple[str, str]] = None


@dataclass(frozen=True)
class Reroute:
    """The scatter becomes ``move``, read from ``buffer`` (its ``box``, ``((begin, end), ...)``, where given)."""
    node: Node
    move: Move
    solver: str
    buffer: str
    box: Optional[tuple] = None


@dataclass
class ModelMove:
    """A scatter or gather of the partitioned program as the carry sees it (changes as edits are planned)."""
    key: Node
    point: Point  # before or after a kernel, or before or after a loop
    order: tuple
    move: Move
    solver: str
    src: str  # the buffer it reads (the array, from rank 0)
    dst: str  # the buffer it writes

    @property
    def array(self) -> str:
        return self.move.array

    @property
    def src_grid(self) -> bool:
        return not self.move.src.is_root

    @property
    def dst_grid(self) -> bool:
        return not self.move.dst.is_root


@dataclass
class ModelAccess:
    """An access node that is not an end of a scatter or gather: a kernel's, rank 0's, a copy's."""
    point: Point
    name: str
    read: bool
    written: bool
    by_map: bool = False  # written by a map's exit


@dataclass
class PartitionModel:
    """The partitioned program as the plan's later decisions (loop carry, rank-local arguments, branch
    data) see it,
    kept current as they plan their edits: which scatters and gathers there are, where, what they move
    and which buffers they read and write, and which buffers the kernels and rank 0's code access.

    Each access happens at a :class:`Point`. Moves are ordered as the program runs them, the points of one
    kernel's state in the order before, kernel, after."""
    sdfg: SDFG
    plan: LoweringPlan
    solvers: Sequence
    moves: List[ModelMove] = field(default_factory=list)
    accesses: List[ModelAccess] = field(default_factory=list)

    def __post_init__(self):
        sdfg, plan = self.sdfg, self.plan
        self.states = ordered_states(sdfg)
        self.index = {st: i for i, st in enumerate(self.states)}
        self.kernel_states = {km.kernel.state: km for km in plan.kernels}
        self.loops = find_loops(sdfg)
        self.shapes: Dict[str, tuple] = {}
        self.seq = 0
        self.made = 0
        by_site = {}
        for e in _events(sdfg, plan):
            km = self.kernel_states[e.state]
            pm = km.find(e.site.array, e.site.kind, e.site.role)
            scatter = e.site.kind == MoveKind.SCATTER
            mv = self.add(e.site, Point(At.BEFORE_KERNEL if scatter else At.AFTER_KERNEL, e.state), e.move, pm.solver,
                           e.site.array if scatter else e.buffer, e.buffer if scatter else e.site.array)
            by_site[e.site] = mv
            self.shapes.setdefault(e.buffer, e.shape)
        for km in plan.kernels:
            st, bufs = km.kernel.state, km.buffer_map()
            by_map = km.kernel.kind == KernelKind.MAP
            for (_, r), (name, _) in bufs.items():
                if r == Role.IN:
                    self.accesses.append(ModelAccess(Point(At.KERNEL, st), name, True, False))
                else:
                    self.accesses.append(ModelAccess(Point(At.KERNEL, st), name, False, True, by_map))
        for st in self.states:
            if st in self.kernel_states:
                continue
            for n in st.data_nodes():
                self.accesses.append(ModelAccess(Point(At.STATE, st), n.data, st.out_degree(n) > 0,
                                                 st.in_degree(n) > 0))
        for d in plan.round_trips:
            self._round_trip(d, by_site)

    # -- bookkeeping
    def add(self, key, point, move, solver, src, dst) -> ModelMove:
        """A scatter or gather named ``key`` at ``point``: ``move`` by ``solver``, reading buffer ``src`` and
        writing ``dst``."""
        self.seq += 1
        mv = ModelMove(key, point, self._order(point) + (self.seq, ), move, solver, src, dst)
        self.moves.append(mv)
        return mv

    def _order(self, point: Point) -> tuple:
        if point.at_kernel:
            return (self.index[point.state], _SLOT[point.at])
        if point.at == At.BEFORE_LOOP:
            return (self.index[point.state], -1)
        lp = self._loop_of(point.state)
        dst = lp.exits[0].dst
        return (self.index.get(dst, len(self.states)), -1)

    def _loop_of(self, head) -> Loop:
        return next(lp for lp in self.loops if lp.head is head)

    def rename(self, old: str, new: str):
        for mv in self.moves:
            mv.src = new if mv.src == old else mv.src
            mv.dst = new if mv.dst == old else mv.dst
        for a in self.accesses:
            a.name = new if a.name == old else a.name

    def drop(self, mv: ModelMove):
        self.moves.remove(mv)

    def dropped(self, mv: ModelMove, rename: Optional[Tuple[str, str]] = None) -> Drop:
        """The edit that drops ``mv`` (and reads buffer ``rename[0]`` as ``rename[1]``), the model changed to match."""
        self.drop(mv)
        if rename is not None:
            self.rename(*rename)
        return Drop(mv.key, rename)

    def rerouted(self, mv: ModelMove, move: Move, buffer: str, solver: Optional[str] = None,
                 box: Optional[tuple] = None) -> Reroute:
        """The edit that makes ``mv`` perform ``move`` from ``buffer`` (with the first solver that implements it,
        unless ``solver`` is given), the model changed to match."""
        solver = solver or self.implement(move)
        mv.move, mv.solver, mv.src = move, solver, buffer
        return Reroute(mv.key, move, solver, buffer, box)

    def _round_trip(self, d: RoundTrip, by_site):
        reader, source = by_site[d.reader], by_site[d.source]
        kind = d.fusion.kind
        if kind == FusionKind.REUSE:
            self.drop(reader)
            self.rename(reader.dst, source.dst)
            return
        if kind == FusionKind.NOOP:
            self.drop(reader)
            self.rename(reader.dst, source.src)
        else:
            reader.move, reader.solver, reader.src = d.fusion.move, d.fusion.solver, source.src
        if d.last:
            self.drop(source)

    def inside(self, point: Point, lp: Loop) -> bool:
        """Whether ``point`` lies in loop ``lp`` (a state made on an inner loop's edge lies where that edge does)."""
        if not point.on_loop:
            return point.state in lp.body
        inner = self._loop_of(point.state)
        e = inner.entries[0] if point.at == At.BEFORE_LOOP else inner.exits[0]
        return e.src in lp.body and e.dst in lp.body

    def every_access(self) -> List["ModelAccess"]:
        """Every access of every buffer and array, scatters' and gathers' ends included (a move reads its
        source and writes its destination at its point)."""
        out = list(self.accesses)
        for mv in self.moves:
            out.append(ModelAccess(mv.point, mv.src, True, False))
            out.append(ModelAccess(mv.point, mv.dst, False, True))
        return out

    def nodes(self, name: str) -> List["ModelAccess"]:
        """Every access of buffer or array ``name``, scatters' and gathers' ends included."""
        return [a for a in self.every_access() if a.name == name]

    def implement(self, move: Move, box: bool = False) -> str:
        """The first solver that implements ``move`` (with ``box``: of those that read or write a box of a
        buffer), or the refusal in words."""
        return implement(move, [s for s in self.solvers if s.box_views] if box else self.solvers)

    def make(self, where: str) -> Made:
        """A new name for a scatter or gather an edit makes at ``where``."""
        self.made += 1
        return Made(where, self.made)
