"""Loop-carried distribution: arrays that a loop's kernels keep on their grid across iterations.

After the partition pass, each kernel of a time loop (``for t in range(T): B = f(A); A = g(B)``) scatters
its inputs from rank 0 and gathers its outputs back, in every iteration. :class:`FuseLoops` finds the
loops of the program's state machine and, for each array that only DistributedMemlets touch inside a
loop (no rank-0 code in the loop reads or writes it) and that one kernel of the loop writes (one gather,
final values, one holder per element):

* scatters it once before the loop into the writer's buffer (``local_H``, the written blocks ``H``) and
  gathers it once after the loop from there;
* removes the gather inside the loop: ``local_H`` always holds the current value of the written blocks;
* each scatter inside the loop (a reader, blocks ``D``) becomes either nothing (``D`` = ``H``: the reader
  reads ``local_H``) or a grid-to-grid Move ``H -> D`` from the solver registry (a shifted read is a halo
  exchange between neighbours). Elements of ``D`` that no ``H`` block covers (a stencil's fixed boundary)
  never change in the loop: the reader's buffer is also filled once before the loop.

An array read but never written in the loop has its scatters hoisted before the loop. Arrays that rank-0
code touches inside the loop (``ey[0, :] = fict[t]``) keep their round trip, so rank 0 always sees and
publishes the current value; values rank 0 computes in the loop reach the kernels through those scatters.

A loop whose condition reads data (``while res[0] > tol``) runs as well: :mod:`.conditions` broadcasts
that data from rank 0 before each evaluation, so every rank takes the same branch.

:func:`trips` gives the trip count of the loops around a state (the report multiplies per-iteration bytes
by it).
"""
import copy
from typing import List, Optional, Tuple

import dace
import sympy
from dace import subsets
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState

from ..ir import ROOT, Move
from ..ir.relations import at_most, covers, disjoint_tiles, offset_inside
from ..solvers.node import DistributedMemlet
from .fusion import Fusion, FusionKind
from ..plan.fusion import block_symbols as moves_block_symbols
from ..schedule.loops import Loop, find_loops
from .graph import MovePass, destination_buffer, distributed_memlets, drop, rename_data, reroute, source_buffer, uses


def assigned_in(sdfg: SDFG, lp: Loop) -> set:
    """Symbols the loop assigns (its variable, inner loops' variables, other interstate assignments)."""
    return {name for st in lp.body for e in sdfg.out_edges(st) if e.dst in lp.body for name in e.data.assignments}


def block_symbols(dm: DistributedMemlet) -> set:
    """Names of the symbols in the per-rank blocks of either side of a DistributedMemlet's move."""
    return moves_block_symbols([dm.move()])


def trips(sdfg: SDFG, state) -> Optional[object]:
    """How many times ``state`` runs per call: the product of the trip counts of the loops around it (1
    outside loops; None when a loop's count depends on data)."""
    n = 1
    for lp in find_loops(sdfg):
        if state in lp.body:
            t = lp.trips(sdfg)
            if t is None:
                return None
            n = n * t
    region = getattr(state, "parent_graph", None)
    while region is not None and region is not sdfg:  # LoopRegions (their round trips are kept)
        if hasattr(region, "loop_condition"):
            t = _region_trips(region)
            if t is None:
                return None
            n = n * t
        region = getattr(region, "parent_graph", None)
    return n


def _region_trips(region):
    try:
        from dace.transformation.passes.analysis import loop_analysis as la
        start, end, step = la.get_init_assignment(region), la.get_loop_end(region), la.get_loop_stride(region)
    except Exception:  # noqa: BLE001 - not a counted loop
        return None
    if start is None or end is None or not step:
        return None
    t = dace.symbolic.simplify(sympy.Max(sympy.floor((end - start) / step) + 1, 0))
    return int(t) if not getattr(t, "free_symbols", None) else t


def _edge_on(sdfg: SDFG, edge, label: str, before_head: bool) -> SDFGState:
    """A new state on ``edge``. Entering a loop, the edge's assignments (the loop variable's start) move to
    the edge after the new state, so the guard still sees a for loop."""
    st = sdfg.add_state(label)
    sdfg.remove_edge(edge)
    cond, assign = edge.data.condition, dict(edge.data.assignments)
    if before_head:
        sdfg.add_edge(edge.src, st, dace.InterstateEdge(condition=cond))
        sdfg.add_edge(st, edge.dst, dace.InterstateEdge(assignments=assign))
    else:
        sdfg.add_edge(edge.src, st, dace.InterstateEdge(condition=cond, assignments=assign))
        sdfg.add_edge(st, edge.dst, dace.InterstateEdge())
    return st


def _only_moved(sdfg: SDFG, arr: str, body, moved) -> bool:
    """Whether every access of ``arr`` inside the loop is an end of one of the DistributedMemlets ``moved``."""
    ids = {id(n) for n in moved}
    for st, n in uses(sdfg, arr):
        if st not in body:
            continue
        ends = [e.dst for e in st.out_edges(n)] + [e.src for e in st.in_edges(n)]
        if not ends or not all(id(x) in ids for x in ends):
            return False
    return True


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
    program order) only copies all of transient ``T`` into a box of ``X`` starting at ``offset``, and
    :func:`fold_copies` makes the kernel that writes ``T`` write ``X`` instead: ``T`` is used only there and
    by the copy, ``writer_of(T)`` (the state whose kernel writes ``T`` plainly: no conflict
    resolution; None where there is none) runs before the copy in the loop, and nothing touches ``X``
    between them. None otherwise. The lowering and the search's model ask this of the same states."""
    found = _copy_target(sdfg, st)
    if found is None:
        return None
    t, x, offset = found
    if len(uses(sdfg, t)) != 2:
        return None
    w = writer_of(t)
    if w is None or w not in order or order.index(w) > order.index(st):
        return None
    if any(n.data == x for s in order[order.index(w) + 1:order.index(st)] for n in s.data_nodes()):
        return None
    return w, t, x, offset


def fold_copies(sdfg: SDFG, lp: Loop, implement) -> int:
    """Inside a loop, ``gather T to rank 0; X[box] = T`` (a kernel that writes a temporary, copied into
    the array on rank 0) becomes one gather of ``X`` in the shifted blocks, so ``X`` has one writer the
    loop can keep on the grid (:func:`copy_to_fold` says where). Returns how many were folded."""
    order = [st for st in _ordered(sdfg) if st in lp.body]
    dms = [(st, n) for st, n in distributed_memlets(sdfg) if st in lp.body]

    def gather_of(t):
        seq = [(gs, g) for gs, g in dms if g.array == t]
        if len(seq) != 1 or seq[0][1].dst_grid:
            return None
        g = seq[0][1]
        return None if g.accumulates or g.op or g.distribution("src").partial else seq[0]

    done = 0
    for st in order:
        found = copy_to_fold(sdfg, order, st, lambda t: (gather_of(t) or (None, ))[0])
        if found is None:
            continue
        _, t, x, offset = found
        gst, g = gather_of(t)
        h = g.distribution("src")
        shifted = tuple((b + o, e + o, k) for (b, e, k), o in zip(h.subset, offset))
        move = Move(x, type(h)(h.grid, h.coords, shifted, h.grid_id, h.pending), ROOT,
                    tuple(sdfg.arrays[x].shape), int(g.itemsize))
        g.set_move(move)
        g.implementation = implement(move)
        out = gst.out_edges(g)[0]
        out.dst.data = x
        out.data = Memlet.from_array(x, sdfg.arrays[x])
        st.remove_nodes_from(list(st.nodes()))
        if not uses(sdfg, t):
            del sdfg.arrays[t]
        done += 1
    return done


def _ordered(sdfg: SDFG):
    from ..schedule import ordered_states
    return ordered_states(sdfg)


class FuseLoops(MovePass):
    """Keeps loop-carried arrays on their grid across the iterations of a loop (module docstring)."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> List[Fusion]:
        out: List[Fusion] = []
        done = set()
        while True:
            loops = [lp for lp in find_loops(sdfg) if lp.head not in done]
            if not loops:
                return out
            lp = loops[0]
            done.add(lp.head)
            out += self._loop(sdfg, lp)

    def _loop(self, sdfg: SDFG, lp: Loop) -> List[Fusion]:
        dms = [(st, n) for st, n in distributed_memlets(sdfg) if st in lp.body]
        if not dms:
            return []  # nothing moves inside the loop: nothing to carry, hoist or fold
        if fold_copies(sdfg, lp, self.implement):
            dms = [(st, n) for st, n in distributed_memlets(sdfg) if st in lp.body]
        if len(lp.entries) != 1 or len(lp.exits) != 1:
            return []
        plans = []
        variant = assigned_in(sdfg, lp)
        for arr in dict.fromkeys(n.array for _, n in dms):
            seq = [(st, n) for st, n in dms if n.array == arr]
            if any(n.src_grid and n.dst_grid for _, n in seq):
                continue  # already grid-to-grid: leave it
            if any(block_symbols(n) & variant for _, n in seq):
                continue  # its blocks follow the loop (``input[:, i:i + K]``): they cannot move out of it
            if not _only_moved(sdfg, arr, lp.body, [n for _, n in seq]):
                continue  # rank-0 code uses it in the loop: keep the round trip
            scatters = [(st, n) for st, n in seq if not n.src_grid]
            gathers = [(st, n) for st, n in seq if not n.dst_grid]
            if any(n.accumulates or n.op for _, n in seq):
                continue
            if not gathers:
                plans.append((arr, None, scatters))
                continue
            if len(gathers) != 1:
                continue
            h = gathers[0][1].distribution("src")
            if h.partial or not disjoint_tiles(h):
                continue
            plans.append((arr, gathers[0], scatters))
        if not plans:
            return []
        pre = _edge_on(sdfg, lp.entries[0], f"dp_loop_{lp.head.label}_pre", True)
        post = None
        out = []
        for arr, gather, scatters in plans:
            if gather is None:
                for st, s in scatters:  # read-only in the loop: scatter once, before it
                    self._copy_scatter(sdfg, pre, s, destination_buffer(st, s))
                    drop(st, s)
                    out.append(Fusion(FusionKind.HOIST, arr, -1, s.dst_grid_id))
                continue
            if post is None:
                post = _edge_on(sdfg, lp.exits[0], f"dp_loop_{lp.head.label}_post", False)
            out += self._carry(sdfg, pre, post, arr, gather, scatters)
        return out

    def _copy_scatter(self, sdfg: SDFG, state: SDFGState, s: DistributedMemlet, local: str, move: Move = None):
        move = move or s.move()
        dm = DistributedMemlet(f"scatter_{move.array}", move)
        dm.implementation = s.implementation if move == s.move() else self.implement(move)
        state.add_edge(state.add_read(move.array), None, dm, "_in",
                       Memlet.from_array(move.array, sdfg.arrays[move.array]))
        written = state.add_write(local)
        state.add_edge(dm, "_out", written, None, Memlet.from_array(local, sdfg.arrays[local]))
        return written

    def _carry(self, sdfg: SDFG, pre, post, arr, gather, scatters) -> List[Fusion]:
        gst, g = gather
        h = g.distribution("src")
        local_h = source_buffer(gst, g)
        inplace = _write_in_place(sdfg, gst, g, local_h, scatters)
        if inplace is not None:
            return self._carry_in_place(sdfg, pre, post, arr, gather, inplace)
        out = []
        first = []  # pre-loop scatters of readers' boundaries, then the written blocks
        for sst, s in scatters:
            d = s.distribution("dst")
            local_d = destination_buffer(sst, s)
            if local_d == local_h:
                drop(sst, s)
                out.append(Fusion(FusionKind.NOOP, arr, h.grid_id, d.grid_id))
                continue
            # Reading local_h in place is unsafe where the reading kernel also writes it (it might read an
            # element after writing another): then the move stays (a local copy, no message).
            in_place = not any(st.out_degree(n) > 0 and any(m.data == local_h and st.in_degree(m) > 0
                                                            for m in st.data_nodes())
                               for st, n in uses(sdfg, local_d))
            if in_place and d.same_blocks(h) and tuple(sdfg.arrays[local_d].shape) == tuple(sdfg.arrays[local_h].shape):
                drop(sst, s)
                rename_data(sdfg, local_d, local_h)
                out.append(Fusion(FusionKind.NOOP, arr, h.grid_id, d.grid_id))
                continue
            move = Move(arr, h, d, tuple(g.shape), int(g.itemsize))
            solver = self.implement(move)
            if not covers(h, d):
                first.append((s, local_d))
            reroute(sst, s, move, solver, Memlet.from_array(local_h, sdfg.arrays[local_h]))
            out.append(Fusion(FusionKind.MOVE, arr, h.grid_id, d.grid_id, move, solver))
        scattered = {}  # reader's buffer -> the node its scatter before the loop writes
        for s, local_d in first:
            m = s.move()
            scattered[local_d] = self._copy_scatter(sdfg, pre, s, local_d, Move(arr, ROOT, m.dst, m.shape, m.itemsize))
        inside = _inside_a_scattered_block(sdfg, h, local_h, first)
        if inside is None:
            self._copy_scatter(sdfg, pre, g, local_h, Move(arr, ROOT, h, tuple(g.shape), int(g.itemsize)))
        else:  # the written blocks' prior values are inside a reader's block that was just scattered: copy them
            local_d, box = inside
            pre.add_nedge(scattered[local_d], pre.add_write(local_h), Memlet(data=local_d, subset=box,
                                                             other_subset=subsets.Range.from_array(sdfg.arrays[local_h])))
            out.append(Fusion(FusionKind.INSIDE, arr, -1, h.grid_id))
        move = g.move()
        dm = DistributedMemlet(f"gather_{arr}", move)
        dm.implementation = g.implementation
        drop(gst, g)
        post.add_edge(post.add_read(local_h), None, dm, "_in", Memlet.from_array(local_h, sdfg.arrays[local_h]))
        post.add_edge(dm, "_out", post.add_write(arr), None, Memlet.from_array(arr, sdfg.arrays[arr]))
        return out

    def _carry_in_place(self, sdfg: SDFG, pre, post, arr, gather, inplace) -> List[Fusion]:
        """The writer writes straight into the reader's block-plus-halo buffer (at the block's offset in
        it), so each iteration moves only the halo: no copy of the own block. One scatter of the
        reader's blocks before the loop (they contain the written ones), one gather of the written
        blocks out of that buffer after it."""
        gst, g = gather
        sst, s, local_d, kst, off = inplace
        h, d = g.distribution("src"), s.distribution("dst")
        local_h = source_buffer(gst, g)
        box = _box(sdfg.arrays[local_h].shape, off)
        for e in kst.edges():
            if e.data.data == local_h:
                e.data.data = local_d
                e.data.subset.offset(off, False)
        for n in kst.data_nodes():
            if n.data == local_h:
                n.data = local_d
        move = Move(arr, h, d, tuple(g.shape), int(g.itemsize))
        solver = self.implement(move, box=True)
        reroute(sst, s, move, solver, Memlet(data=local_d, subset=box))
        self._copy_scatter(sdfg, pre, s, local_d, Move(arr, ROOT, d, tuple(g.shape), int(g.itemsize)))
        dm = DistributedMemlet(f"gather_{arr}", g.move())
        dm.implementation = self.implement(g.move(), box=True)
        drop(gst, g)
        post.add_edge(post.add_read(local_d), None, dm, "_in", Memlet(data=local_d, subset=copy.deepcopy(box)))
        post.add_edge(dm, "_out", post.add_write(arr), None, Memlet.from_array(arr, sdfg.arrays[arr]))
        if not uses(sdfg, local_h):
            del sdfg.arrays[local_h]
        return [Fusion(FusionKind.MOVE, arr, h.grid_id, d.grid_id, move, solver)]


def _inside_a_scattered_block(sdfg: SDFG, h, local_h: str, first) -> Optional[Tuple[str, subsets.Range]]:
    """``(reader's buffer, the box of it that holds the written block)`` when a reader's block, scattered
    before the loop, contains every rank's written block ``h`` at one offset (a stencil that reads
    ``u[0:n+2]`` and writes ``u[1:n+1]``): the written buffer's prior values are then a local copy of it,
    not a second scatter of the same elements. None otherwise."""
    shape_h = sdfg.arrays[local_h].shape
    for s, local_d in first:
        off = offset_inside(h, s.distribution("dst"))
        if off is None:
            continue
        shape_d = sdfg.arrays[local_d].shape
        # symbolic buffer shapes (sizes known at run time) count only where proved for every size
        if len(shape_h) == len(shape_d) and all(at_most(o + n, m) for o, n, m in zip(off, shape_h, shape_d)):
            return local_d, _box(shape_h, off)
    return None


def _box(shape, off):
    return subsets.Range([(o, o + n - 1, 1) for o, n in zip(off, shape)])


def _write_in_place(sdfg: SDFG, gst, g, local_h: str, scatters):
    """``(reader state, reader scatter, its buffer, writer's kernel state, offset)`` when the loop's one
    reader of the array reads a block plus halo containing the written block at a constant offset on
    every rank, the writer is a map that only writes ``local_h`` and nothing else reads it, and the
    reader's buffer is filled only by that scatter and not touched by the writer; else None."""
    if len(scatters) != 1 or g.op or g.accumulates:
        return None
    sst, s = scatters[0]
    local_d = destination_buffer(sst, s)
    if local_d == local_h or s.accumulates:
        return None
    off = offset_inside(g.distribution("src"), s.distribution("dst"))
    if off is None:
        return None
    users = [(st, n) for st, n in uses(sdfg, local_h) if st is not gst]
    states = {st for st, _ in users}
    if len(states) != 1:
        return None
    kst = next(iter(states))
    for st, n in users:
        if st.out_degree(n) > 0 or not all(isinstance(e.src, dace.nodes.MapExit) for e in st.in_edges(n)):
            return None
    for st, n in uses(sdfg, local_d):
        if st is kst or (st.in_degree(n) > 0 and st is not sst):
            return None
    return sst, s, local_d, kst, off
