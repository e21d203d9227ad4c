"""Loop carry, decided on the plan: arrays that a loop's kernels keep on their grid across iterations.

Partitioned as planned (and with the round trips of :mod:`.fusion` gone), each kernel of a time loop
(``for t in range(T): B = f(A); A = g(B)``) still scatters its inputs from rank 0 and gathers its outputs
back in every iteration. For each array that only scatters and gathers touch inside a loop (no code on
rank 0 reads or writes it there) and that one kernel of the loop writes (one gather, final values, one
holder per element), :func:`plan_loop_carries` decides to

* scatter it once before the loop into the writer's buffer ``local_H`` (the written blocks ``H``) and
  gather it once after the loop from there, dropping the gather inside the loop;
* turn each scatter inside the loop (a reader, blocks ``D``) into nothing (``D`` = ``H``: the reader reads
  ``local_H``) or a grid-to-grid Move ``H -> D`` (a shifted read is a halo exchange); elements of ``D``
  that no ``H`` block covers (a stencil's fixed boundary) never change in the loop, so the reader's
  buffer is also filled once before it;
* or, where the loop's one reader reads a block plus halo that contains the written block, have the
  writer write into the reader's buffer in place: each iteration moves only the halo.

An array read but never written in a loop has its scatters hoisted before the loop (rank 0 may read it there too). Inside a loop,
``gather T; X[box] = T`` (a kernel writing a temporary copied into an array on rank 0) is first folded
into one gather of ``X`` in shifted blocks, so that ``X`` has a writer the loop can keep.

Nothing is rewritten here. The decisions are a list of edits per loop (:class:`LoopCarry`) that name the
scatters and gathers they change by :class:`~.fusion.Site` (those the partition makes) or
:class:`~.model.Made` (those an earlier loop's edits made); :class:`~dace_partition.passes.loops.FuseLoops`
carries them out. They are decided on the :class:`~.model.PartitionModel` of the partitioned program.
"""
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import dace
from dace.sdfg import SDFG, SDFGState

from ..ir import ROOT, Move
from ..ir.relations import at_most, covers, disjoint_tiles, offset_inside
from ..schedule import ordered_states
from ..schedule.loops import Loop
from .fusion import Fusion, FusionKind, block_symbols
from .model import At, Drop, Made, ModelAccess, ModelMove, Node, PartitionModel, Point, Reroute


@dataclass(frozen=True)
class Fold:
    """``gather T; X[offset:] = T`` becomes one gather of ``X`` (``move``): the copy state empties."""
    gather: Node
    copy: SDFGState
    temporary: str
    target: str
    move: Move
    solver: str


@dataclass(frozen=True)
class Enter:
    """A state on the loop's entry edge, for the scatters made before the loop."""


@dataclass(frozen=True)
class Leave:
    """A state on the loop's exit edge, for the gathers made after the loop."""


@dataclass(frozen=True)
class ScatterBefore:
    """Before the loop: scatter ``move`` from rank 0 into ``buffer``."""
    made: Made
    move: Move
    solver: str
    buffer: str


@dataclass(frozen=True)
class GatherAfter:
    """After the loop: gather ``move`` from ``buffer`` (its ``box``, ``((begin, end), ...)``, where given)."""
    made: Made
    move: Move
    solver: str
    buffer: str
    box: Optional[tuple] = None


@dataclass(frozen=True)
class CopyInside:
    """Before the loop: the ``box`` (``((begin, end), ...)``) of what ``scatter`` wrote is copied into ``buffer``."""
    scatter: Made
    buffer: str
    box: tuple


@dataclass(frozen=True)
class Retarget:
    """The kernel of ``state`` writes ``new`` (at ``offset``) where it wrote ``old``."""
    state: SDFGState
    old: str
    new: str
    offset: tuple


@dataclass(frozen=True)
class Forget:
    """Buffer ``name`` is no longer used."""
    name: str


Edit = Union[Fold, Enter, Leave, ScatterBefore, GatherAfter, Drop, Reroute, CopyInside, Retarget, Forget]


@dataclass(frozen=True)
class LoopCarry:
    """The edits of one loop, in the order they are made, and the fusions they amount to (for the report)."""
    head: SDFGState
    edits: Tuple[Edit, ...]
    fusions: Tuple[Fusion, ...]


def plan_loop_carries(model: PartitionModel) -> Tuple[LoopCarry, ...]:
    """The loop carry of the program ``model`` stands for (its round trips already decided), loop by loop,
    innermost first; changes the model as the edits will change the program, and nothing else."""
    carrier = _Carrier(model)
    out = []
    for lp in model.loops:
        carry = carrier.loop(lp)
        if carry is not None:
            out.append(carry)
    return tuple(out)


def assigned_in(sdfg: SDFG, lp: Loop) -> set:
    """Symbols the loop assigns (its variable, inner loops' variables, other interstate assignments)."""
    return {name for st in lp.body for e in sdfg.out_edges(st) if e.dst in lp.body for name in e.data.assignments}


def _box(shape, off) -> tuple:
    """``((begin, end), ...)``: the box of ``shape`` at offset ``off`` (ends inclusive)."""
    return tuple((o, o + n - 1) for o, n in zip(off, shape))


# -- copies folded into a kernel's write ---------------------------------------------------------------
def _copy_target(sdfg: SDFG, st: SDFGState):
    """``(T, X, offset)`` when ``st`` only copies all of transient ``T`` into a same-shaped box of ``X``
    starting at ``offset`` (how DaCe writes ``X[1:, :] = X[1:, :] - ...``); else None."""
    if st.number_of_nodes() != 2 or st.number_of_edges() != 1:
        return None
    e = st.edges()[0]
    t, x = e.src, e.dst
    if not (isinstance(t, dace.nodes.AccessNode) and isinstance(x, dace.nodes.AccessNode)) or t.data == x.data:
        return None
    tdesc, xdesc = sdfg.arrays[t.data], sdfg.arrays[x.data]
    if not tdesc.transient or isinstance(xdesc, dace.data.View) or len(tdesc.shape) != len(xdesc.shape):
        return None
    src, dst = e.data.get_src_subset(e, st), e.data.get_dst_subset(e, st)
    if src is None or dst is None:
        return None
    for (b, _, s), n, (db, _, ds), sz, dsz in zip(src, tdesc.shape, dst, src.size(), dst.size()):
        if s != 1 or ds != 1 or b != 0 or dace.symbolic.simplify(sz - n) != 0 or dace.symbolic.simplify(dsz - n) != 0:
            return None
    return t.data, x.data, [db for db, _, _ in dst]


def copy_to_fold(sdfg: SDFG, order: List[SDFGState], st: SDFGState, writer_of) -> Optional[tuple]:
    """``(writer's state, T, X, offset)`` where state ``st`` of a loop (``order``: the loop's states in
    program order) only copies all of transient ``T`` into a box of ``X`` starting at ``offset``, and the
    loop carry makes the kernel that writes ``T`` write ``X`` instead: ``T`` is used only there and by the
    copy, ``writer_of(T)`` (the state whose kernel writes ``T`` plainly: no conflict resolution; None
    where there is none) runs before the copy in the loop, and nothing touches ``X`` between them. None
    otherwise. The search prices an array with every array a loop's copy may fold it into
    (:func:`~.traffic.coupled_arrays`), so the same fold is decided there."""
    found = _copy_target(sdfg, st)
    if found is None:
        return None
    t, x, offset = found
    if sum(1 for s in ordered_states(sdfg) for n in s.data_nodes() if n.data == t) != 2:
        return None
    w = writer_of(t)
    if w is None or w not in order or order.index(w) > order.index(st):
        return None
    if any(n.data == x for s in order[order.index(w) + 1:order.index(st)] for n in s.data_nodes()):
        return None
    return w, t, x, offset


class _Carrier:
    """The loop carry planned on a :class:`~.model.PartitionModel`, loop by loop (it changes the model
    as it plans, as the edits will change the program)."""

    def __init__(self, model: PartitionModel):
        self.m = model
        self.sdfg = model.sdfg
        self.folded = set()  # copy states emptied by a fold

    # -- one loop
    def loop(self, lp: Loop) -> Optional[LoopCarry]:
        inside = [mv for mv in self.m.moves if self.m.inside(mv.point, lp)]
        if not inside:
            return None  # nothing moves inside the loop: nothing to carry, hoist or fold
        edits: List[Edit] = []
        fusions: List[Fusion] = []
        self._fold(lp, inside, edits)
        if len(lp.entries) != 1 or len(lp.exits) != 1:
            return LoopCarry(lp.head, tuple(edits), ()) if edits else None
        inside = sorted((mv for mv in self.m.moves if self.m.inside(mv.point, lp)), key=lambda mv: mv.order)
        variant = assigned_in(self.sdfg, lp)
        plans = []
        for arr in dict.fromkeys(mv.array for mv in inside):
            seq = [mv for mv in inside if mv.array == arr]
            if any(mv.src_grid and mv.dst_grid for mv in seq):
                continue  # already grid-to-grid: leave it
            if block_symbols(mv.move for mv in seq) & variant:
                continue  # its blocks follow the loop (``input[:, i:i + K]``): they cannot move out of it
            on_root = [a for a in self.m.accesses if a.name == arr and self.m.inside(a.point, lp)]
            if any(a.written for a in on_root):
                continue  # code on rank 0 writes it in the loop: keep the round trip
            scatters = [mv for mv in seq if not mv.src_grid]
            gathers = [mv for mv in seq if not mv.dst_grid]
            if any(mv.move.accumulates or mv.move.op for mv in seq):
                continue
            if not gathers:  # rank 0 may read it in the loop too (a row copied out): it keeps its values
                plans.append((arr, None, scatters))
                continue
            if on_root:
                continue  # code on rank 0 reads what the loop's kernels write: keep the round trip
            if len(gathers) != 1:
                continue
            h = gathers[0].move.src
            if h.partial or not disjoint_tiles(h):
                continue
            plans.append((arr, gathers[0], scatters))
        if not plans:
            return LoopCarry(lp.head, tuple(edits), ()) if edits else None
        edits.append(Enter())
        left = False
        for arr, gather, scatters in plans:
            if gather is None:
                for s in scatters:  # read-only in the loop: scatter once, before it
                    made = self.m.make(lp.head.label)
                    edits.append(ScatterBefore(made, s.move, s.solver, s.dst))
                    self.m.add(made, Point(At.BEFORE_LOOP, lp.head), s.move, s.solver, s.src, s.dst)
                    edits.append(self.m.dropped(s))
                    fusions.append(Fusion(FusionKind.HOIST, arr, -1, s.move.dst.grid_id))
                continue
            if not left:
                edits.append(Leave())
                left = True
            fusions += self._carry(lp, arr, gather, scatters, edits)
        return LoopCarry(lp.head, tuple(edits), tuple(fusions))

    def _fold(self, lp: Loop, inside: List[ModelMove], edits: List[Edit]):
        order = [st for st in self.m.states if st in lp.body]

        def gather_of(t):
            seq = [mv for mv in inside if mv.array == t]
            if len(seq) != 1 or seq[0].dst_grid or not seq[0].point.at_kernel:
                return None
            g = seq[0]
            return None if g.move.accumulates or g.move.op or g.move.src.partial else g

        def writer_of(t):  # the state of the kernel whose gather to rank 0 makes t
            g = gather_of(t)
            return g.point.state if g is not None else None

        for st in order:
            found = None if st in self.folded else copy_to_fold(self.sdfg, order, st, writer_of)
            if found is None:
                continue
            _, t, x, offset = found
            g = gather_of(t)
            h = g.move.src
            shifted = tuple((b + o, e + o, k) for (b, e, k), o in zip(h.subset, offset))
            move = Move(x, type(h)(h.grid, h.coords, shifted, h.grid_id, h.pending), ROOT,
                        tuple(self.sdfg.arrays[x].shape), int(g.move.itemsize))
            solver = self.m.implement(move)
            edits.append(Fold(g.key, st, t, x, move, solver))
            g.move, g.solver, g.dst = move, solver, x
            self.m.accesses = [a for a in self.m.accesses if a.point != Point(At.STATE, st)]
            self.folded.add(st)

    def _carry(self, lp: Loop, arr: str, g: ModelMove, scatters: List[ModelMove], edits: List[Edit]) -> List[Fusion]:
        h = g.move.src
        local_h = g.src
        inplace = self._write_in_place(g, local_h, scatters)
        if inplace is not None:
            return self._carry_in_place(lp, arr, g, inplace, edits)
        out = []
        first = []  # pre-loop scatters of readers' boundaries, then the written blocks
        for s in scatters:
            d = s.move.dst
            local_d = s.dst
            if local_d == local_h:
                edits.append(self.m.dropped(s))
                out.append(Fusion(FusionKind.NOOP, arr, h.grid_id, d.grid_id))
                continue
            # Reading local_h in place is unsafe where the reading kernel also writes it (it might read an
            # element after writing another): then the move stays (a local copy, no message).
            written_h = {a.point for a in self.m.nodes(local_h) if a.written}
            in_place = not any(a.read and a.point in written_h for a in self.m.nodes(local_d))
            if in_place and d.same_blocks(h) and self.m.shapes.get(local_d) == self.m.shapes.get(local_h):
                edits.append(self.m.dropped(s, (local_d, local_h)))
                out.append(Fusion(FusionKind.NOOP, arr, h.grid_id, d.grid_id))
                continue
            move = Move(arr, h, d, tuple(g.move.shape), int(g.move.itemsize))
            solver = self.m.implement(move)
            if not covers(h, d):
                first.append((s, local_d))
            edits.append(self.m.rerouted(s, move, local_h, solver))
            out.append(Fusion(FusionKind.MOVE, arr, h.grid_id, d.grid_id, move, solver))
        scattered = {}  # reader's buffer -> the scatter before the loop that fills it
        for s, local_d in first:
            m = s.move
            move = Move(arr, ROOT, m.dst, m.shape, m.itemsize)
            made = scattered[local_d] = self.m.make(lp.head.label)
            solver = self.m.implement(move)
            edits.append(ScatterBefore(made, move, solver, local_d))
            self.m.add(made, Point(At.BEFORE_LOOP, lp.head), move, solver, arr, local_d)
        inside = self._inside_a_scattered_block(h, local_h, first)
        if inside is None:
            move = Move(arr, ROOT, h, tuple(g.move.shape), int(g.move.itemsize))
            made, solver = self.m.make(lp.head.label), self.m.implement(move)
            edits.append(ScatterBefore(made, move, solver, local_h))
            self.m.add(made, Point(At.BEFORE_LOOP, lp.head), move, solver, arr, local_h)
        else:  # the written blocks' prior values are inside a reader's block that was just scattered: copy them
            local_d, offset = inside
            edits.append(CopyInside(scattered[local_d], local_h, _box(self.m.shapes[local_h], offset)))
            self.m.accesses.append(ModelAccess(Point(At.BEFORE_LOOP, lp.head), local_d, True, False))
            self.m.accesses.append(ModelAccess(Point(At.BEFORE_LOOP, lp.head), local_h, False, True))
            out.append(Fusion(FusionKind.INSIDE, arr, -1, h.grid_id))
        made = self.m.make(lp.head.label)
        edits.append(GatherAfter(made, g.move, g.solver, local_h))
        self.m.add(made, Point(At.AFTER_LOOP, lp.head), g.move, g.solver, local_h, arr)
        edits.append(self.m.dropped(g))
        return out

    def _carry_in_place(self, lp: Loop, arr: str, g: ModelMove, inplace, edits: List[Edit]) -> List[Fusion]:
        """The writer writes straight into the reader's block-plus-halo buffer (at the block's offset in
        it), so each iteration moves only the halo: no copy of the own block. One scatter of the
        reader's blocks before the loop (they contain the written ones), one gather of the written
        blocks out of that buffer after it."""
        s, local_d, kst, off = inplace
        h, d = g.move.src, s.move.dst
        local_h = g.src
        edits.append(Retarget(kst, local_h, local_d, tuple(off)))
        for a in self.m.accesses:
            if a.point == Point(At.KERNEL, kst) and a.name == local_h:
                a.name = local_d
        move = Move(arr, h, d, tuple(g.move.shape), int(g.move.itemsize))
        solver = self.m.implement(move, box=True)
        box = _box(self.m.shapes[local_h], off)
        edits.append(self.m.rerouted(s, move, local_d, solver, box))
        before = Move(arr, ROOT, d, tuple(g.move.shape), int(g.move.itemsize))
        made, bsolver = self.m.make(lp.head.label), self.m.implement(before)
        edits.append(ScatterBefore(made, before, bsolver, local_d))
        self.m.add(made, Point(At.BEFORE_LOOP, lp.head), before, bsolver, arr, local_d)
        made, gsolver = self.m.make(lp.head.label), self.m.implement(g.move, box=True)
        edits.append(GatherAfter(made, g.move, gsolver, local_d, box))
        self.m.add(made, Point(At.AFTER_LOOP, lp.head), g.move, gsolver, local_d, arr)
        edits.append(self.m.dropped(g))
        if not self.m.nodes(local_h):
            edits.append(Forget(local_h))
        return [Fusion(FusionKind.MOVE, arr, h.grid_id, d.grid_id, move, solver)]

    def _inside_a_scattered_block(self, h, local_h: str, first) -> Optional[Tuple[str, tuple]]:
        """``(reader's buffer, offset of the written block in it)`` when a reader's block, scattered before
        the loop, contains every rank's written block ``h`` at one offset (a stencil that reads ``u[0:n+2]``
        and writes ``u[1:n+1]``): the written buffer's prior values are then a local copy of it, not a
        second scatter of the same elements. None otherwise."""
        shape_h = self.m.shapes[local_h]
        for s, local_d in first:
            off = offset_inside(h, s.move.dst)
            if off is None:
                continue
            shape_d = self.m.shapes[local_d]
            # symbolic buffer shapes (sizes known at run time) count only where proved for every size
            if len(shape_h) == len(shape_d) and all(at_most(o + n, m) for o, n, m in zip(off, shape_h, shape_d)):
                return local_d, tuple(off)
        return None

    def _write_in_place(self, g: ModelMove, local_h: str, scatters: List[ModelMove]):
        """``(reader scatter, its buffer, writer's kernel state, offset)`` when the loop's one reader of the
        array reads a block plus halo containing the written block at a constant offset on every rank,
        the writer is a map that only writes ``local_h`` and nothing else reads it, and the reader's buffer
        is filled only by that scatter and not touched by the writer; else None."""
        if len(scatters) != 1 or g.move.op or g.move.accumulates:
            return None
        s = scatters[0]
        local_d = s.dst
        if local_d == local_h or s.move.accumulates:
            return None
        off = offset_inside(g.move.src, s.move.dst)
        if off is None:
            return None
        users = [a for a in self.m.nodes(local_h) if a.point != g.point]
        points = {a.point for a in users}
        if len(points) != 1:
            return None
        kpoint = next(iter(points))
        for a in users:
            if a.read or (a.written and not a.by_map):
                return None
        for a in self.m.nodes(local_d):
            if a.point == kpoint or (a.written and a.point != s.point):
                return None
        return s, local_d, kpoint.state, off
