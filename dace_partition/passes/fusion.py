"""Communication fusion (thesis 4.5), as a pass that decides first and rewrites second.

After rank tiling, a transient that one kernel produces and the next consumes makes a round trip:
``local_A -> gather to rank 0 -> T -> scatter from rank 0 -> local_B``. Each scatter of a value of ``T``
(a transient may be written by several kernels in turn: ``q = 0`` then ``q += ...``; each gather starts a
new value) becomes one of:

* ``NOOP``: both sides hold the same blocks on the same ranks (and final values): kernel B reads
  ``local_A`` directly;
* ``MOVE``: the grid-to-grid :class:`~dace_partition.ir.Move` ``local_A -> local_B``, implemented by the
  first solver of the registry that accepts it (an allreduce when B needs the partial results of A
  combined in the same blocks, the synthesizer between block layouts of one mesh, general blocks
  otherwise).

An input that the program never writes, scattered again in the same blocks to the same ranks, is read
from the first scatter's buffer instead (``REUSE``). Either way ``T`` is never allocated at global size
nor sent to rank 0.
"""
from dataclasses import dataclass, replace
from enum import Enum
from typing import List, Optional

from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState

from ..solvers.node import DistributedMemlet
from ..ir import Move
from ..ir.relations import covers
from ..schedule import ordered_states
from .graph import (MovePass, destination_buffer, distributed_memlets, drop, rename_data, reroute, source_buffer, uses,
                    writes)


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
class _Decision:
    fusion: Fusion
    reader: tuple  # (state, scatter node)
    source: tuple  # (state, gather node or first scatter node)
    last: bool  # the last reader of a gather: the gather goes too


def _plain(dm: DistributedMemlet) -> bool:
    """Whether the block moves like any other: not an accumulated output whose blocks overlap (there the
    prior value must reach only one holder)."""
    side = dm.distribution("dst" if not dm.src_grid else "src")
    return not dm.accumulates or not side.may_overlap()


class _SameValues:
    """Whether the symbols in the blocks of some moves (``wcon[:, :, k + 1]``) have the same values in a
    later state as in an earlier one: no interstate assignment of them (nor a loop over them) lies on a
    path from the one to the other within one iteration of the loops around both. Blocks written with the
    same expression name other elements where ``k`` changed in between (vadv's three loops over ``k``)."""

    def __init__(self, sdfg: SDFG):
        from .loops import find_loops
        self.sdfg = sdfg
        self.loops = find_loops(sdfg)
        self.assigned = {x for e in sdfg.all_interstate_edges() for x in e.data.assignments}
        self.assigned |= {r.loop_variable for r in sdfg.all_control_flow_regions() if getattr(r, "loop_variable", None)}

    def __call__(self, a: SDFGState, b: SDFGState, dms) -> bool:
        from .loops import block_symbols
        v = set().union(*(block_symbols(d) for d in dms)) & self.assigned
        if not v:
            return True
        g = self.sdfg
        if a.parent_graph is not g or b.parent_graph is not g:
            return False  # inside control-flow regions: not analysed, keep the moves
        back = {id(e) for lp in self.loops if a in lp.body and b in lp.body
                for e in g.in_edges(lp.head) if e.src in lp.body}
        edges = [e for e in g.edges() if id(e) not in back]
        fwd, bwd = _reach(a, edges, True), _reach(b, edges, False)
        if b not in fwd:
            return False
        for e in edges:
            if e.src in fwd and e.dst in bwd and v & set(e.data.assignments):
                return False
        for blk in fwd & bwd:  # a loop region between them may assign them
            if not isinstance(blk, SDFGState):
                inner = {x for e in blk.all_interstate_edges() for x in e.data.assignments}
                inner |= {r.loop_variable for r in [blk, *blk.all_control_flow_regions()]
                          if getattr(r, "loop_variable", None)}
                if v & inner:
                    return False
        return True


def only_source(src: SDFGState, reader: SDFGState, sources) -> bool:
    """Whether every path that reaches ``reader`` (from the program's start, around loops too) last
    passes a state of ``sources`` at ``src``: states are listed breadth-first, not in the order they
    run, so "the gather before it in the list" is not enough (a loop's exit and its body interleave)."""
    graph = reader.parent_graph
    if src.parent_graph is not graph or src is reader:
        return False
    seen, todo, hit = {reader}, [reader], set()
    while todo:
        u = todo.pop()
        if u is graph.start_block or graph.in_degree(u) == 0:
            return False  # reached without passing any source
        for e in graph.in_edges(u):
            w = e.src
            if w in seen:
                continue
            seen.add(w)
            if w in sources:
                hit.add(w)
            else:
                todo.append(w)
    return hit == {src}


def _reach(start, edges, forward: bool) -> set:
    nxt = {}
    for e in edges:
        u, w = (e.src, e.dst) if forward else (e.dst, e.src)
        nxt.setdefault(u, []).append(w)
    seen, todo = {start}, [start]
    while todo:
        for w in nxt.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


class FuseRoundTrips(MovePass):
    """Removes round trips of intermediates through rank 0, and repeated scatters of inputs."""

    # -- decide ------------------------------------------------------------------------------------
    def decide(self, sdfg: SDFG) -> List[_Decision]:
        """What to do with every fusable scatter; changes nothing."""
        out: List[_Decision] = []
        self._same = _SameValues(sdfg)
        dms = distributed_memlets(sdfg)
        scatters = [(st, n) for st, n in dms if not n.src_grid]
        for arr in dict.fromkeys(n.array for _, n in dms if not n.dst_grid):
            desc = sdfg.arrays.get(arr)
            seq = [(st, n) for st, n in dms if n.array == arr]
            # T must be touched only by DistributedMemlets (no code on rank 0 reads or writes it).
            if desc is None or not desc.transient or len(uses(sdfg, arr)) != len(seq):
                continue
            versions, current, early = [], None, False
            for st, n in seq:
                if not n.dst_grid:
                    current = ((st, n), [])
                    versions.append(current)
                elif current is not None:
                    current[1].append((st, n))
                else:
                    early = True  # read before the first gather (in a loop: the previous iteration's values)
            mine, kept = [], early
            for (gst, g), readers in versions:
                if not readers or not _plain(g) or not all(_plain(x) for _, x in readers):
                    kept = kept or bool(readers)
                    continue
                decided = self._decide_version(sdfg, gst, g, readers, {x for (x, _), _ in versions})
                kept = kept or len(decided) < len(readers)
                mine += decided
                for r in readers:
                    scatters.remove(r)
            if kept:  # some reader reads rank 0's copy, maybe of another version's elements: keep every gather
                mine = [replace(d, last=False) for d in mine]
            out += mine
        out += self._decide_reuse(sdfg, scatters)
        return out

    def _decide_version(self, sdfg: SDFG, gst, g, readers, gathers=()) -> List[_Decision]:
        src = g.distribution("src")
        local_a = source_buffer(gst, g)
        out = []
        kept = False  # a reader keeps its scatter from rank 0: the gather stays too
        for k, (sst, s) in enumerate(readers):
            last = k == len(readers) - 1 and not kept
            dst = s.distribution("dst")
            if not only_source(gst, sst, set(gathers) | {gst}) or not self._same(gst, sst, (g, s)) \
                    or not covers(src, dst):
                # Another gather (another loop's, or the previous iteration's) may have written what it reads,
                # or it reads elements this gather did not write (``ccol[:, :, k - 1]`` after a kernel wrote
                # ``ccol[:, :, k]``), or its blocks name other elements by now: it reads rank 0's copy.
                kept = True
                continue
            local_b = destination_buffer(sst, s)
            # Reading local_a in place is safe unless this reader updates it and a later reader needs the old value.
            in_place = last or not writes(sdfg, local_b, sst.out_edges(s)[0].dst)
            if (not src.partial and in_place and src.same_blocks(dst)
                    and sdfg.arrays[local_a].shape == sdfg.arrays[local_b].shape):
                fusion = Fusion(FusionKind.NOOP, g.array, src.grid_id, dst.grid_id)
            else:
                move = Move(g.array, src, dst, tuple(g.shape), int(g.itemsize))
                fusion = Fusion(FusionKind.MOVE, g.array, src.grid_id, dst.grid_id, move, self.implement(move))
            out.append(_Decision(fusion, (sst, s), (gst, g), last))
        return out

    def _decide_reuse(self, sdfg: SDFG, scatters) -> List[_Decision]:
        written = {n.data for st in ordered_states(sdfg) for n in st.data_nodes() if st.in_degree(n) > 0}
        out, firsts = [], []
        for st, s in scatters:
            if s.accumulates or s.array in written:
                continue
            dist = s.distribution("dst")
            local_b = destination_buffer(st, s)
            first = next(((fst, f) for fst, f in firsts if f.array == s.array and f.distribution("dst").same_blocks(dist)
                          and sdfg.arrays[destination_buffer(fst, f)].shape == sdfg.arrays[local_b].shape
                          and only_source(fst, st, {fst}) and self._same(fst, st, (f, s))), None)
            if first is None:
                firsts.append((st, s))
                continue
            fusion = Fusion(FusionKind.REUSE, s.array, first[1].dst_grid_id, dist.grid_id)
            out.append(_Decision(fusion, (st, s), first, False))
        return out

    # -- rewrite -----------------------------------------------------------------------------------
    def apply(self, sdfg: SDFG, decisions: List[_Decision]) -> List[Fusion]:
        for d in decisions:
            (sst, s), (gst, g) = d.reader, d.source
            f = d.fusion
            if f.kind == FusionKind.REUSE:
                local_a, local_b = destination_buffer(gst, g), destination_buffer(sst, s)
                drop(sst, s)
                rename_data(sdfg, local_b, local_a)
                continue
            local_a = source_buffer(gst, g)
            if f.kind == FusionKind.NOOP:
                local_b = destination_buffer(sst, s)
                drop(sst, s)
                rename_data(sdfg, local_b, local_a)
            else:
                reroute(sst, s, f.move, f.solver, Memlet.from_array(local_a, sdfg.arrays[local_a]))
            if d.last:
                drop(gst, g)
        for arr in {d.fusion.array for d in decisions if d.fusion.kind != FusionKind.REUSE}:
            if arr in sdfg.arrays and not uses(sdfg, arr):
                del sdfg.arrays[arr]
        return [d.fusion for d in decisions]

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> List[Fusion]:
        """Round trips between consecutive kernels (those across the iterations of a loop are
        :class:`~dace_partition.passes.loops.FuseLoops`', which runs after this one in the pipeline)."""
        return self.apply(sdfg, self.decide(sdfg))
