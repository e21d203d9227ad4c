"""Loop-carried distribution, applied: the arrays that the plan keeps on their grid across a loop's
iterations (:mod:`dace_partition.plan.carry` decides which, and how, before anything is rewritten).

:class:`FuseLoops` carries out each loop's edits: states on the loop's entry and exit edges for the
scatters made before it and the gathers made after it, scatters and gathers dropped or turned into
grid-to-grid Moves, copies folded into a kernel's write. A loop whose condition reads data (``while
res[0] > tol``) runs as well: :mod:`.conditions` broadcasts that data from rank 0 before each evaluation.

:func:`trips` gives the trip count of the loops around a state (the report multiplies per-iteration bytes
by it).
"""
from dataclasses import dataclass
from typing import Dict, List, Optional

import dace
import sympy
from dace import nodes as nodes_
from dace import subsets
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState

from ..ir import Move
from ..plan.carry import CopyInside, Enter, Fold, Forget, GatherAfter, Leave, Made, Retarget, ScatterBefore
from ..plan.fusion import Fusion
from ..plan.fusion import block_symbols as moves_block_symbols
from ..plan.model import At, Point
from ..schedule.loops import find_loops
from ..solvers.node import DistributedMemlet
from .graph import PlanPass, buffer_memlet, carry_out, uses


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


@dataclass(frozen=True)
class Carried:
    """What :class:`FuseLoops` did: the fusions (for the report) and the states it made before and after
    loops, by their :class:`~dace_partition.plan.model.Point`."""
    fusions: List[Fusion]
    states: Dict[Point, SDFGState]


class FuseLoops(PlanPass):
    """Carries out the plan's loop carry (``LoweringPlan.loop_carries``, :mod:`dace_partition.plan.carry`):
    per loop, innermost first, the edits in the order the plan made them. Returns the fusions they
    amount to and the states it made (:class:`Carried`)."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> "Carried":
        # Site / Made -> (state, node): the partition's record, kept current for the passes after this one
        nodes: Dict[object, tuple] = pipeline_results["PartitionKernels"].sites
        written: Dict[Made, nodes_.AccessNode] = {}  # what each scatter made before a loop writes
        out = Carried([], {})
        for carry in self.plan.loop_carries:
            lp = next(lp for lp in find_loops(sdfg) if lp.head is carry.head)
            pre = post = None
            for e in carry.edits:
                if isinstance(e, Fold):
                    _fold(sdfg, nodes[e.gather], e)
                elif isinstance(e, Enter):
                    pre = _edge_on(sdfg, lp.entries[0], f"dp_loop_{lp.head.label}_pre", True)
                    out.states[Point(At.BEFORE_LOOP, lp.head)] = pre
                elif isinstance(e, Leave):
                    post = _edge_on(sdfg, lp.exits[0], f"dp_loop_{lp.head.label}_post", False)
                    out.states[Point(At.AFTER_LOOP, lp.head)] = post
                elif isinstance(e, ScatterBefore):
                    dm = _dm(f"scatter_{e.move.array}", e.move, e.solver)
                    pre.add_edge(pre.add_read(e.move.array), None, dm, "_in",
                                 Memlet.from_array(e.move.array, sdfg.arrays[e.move.array]))
                    written[e.made] = pre.add_write(e.buffer)
                    pre.add_edge(dm, "_out", written[e.made], None, Memlet.from_array(e.buffer, sdfg.arrays[e.buffer]))
                    nodes[e.made] = (pre, dm)
                elif isinstance(e, GatherAfter):
                    dm = _dm(f"gather_{e.move.array}", e.move, e.solver)
                    src = buffer_memlet(sdfg, e.buffer, e.box)
                    post.add_edge(post.add_read(e.buffer), None, dm, "_in", src)
                    post.add_edge(dm, "_out", post.add_write(e.move.array), None,
                                  Memlet.from_array(e.move.array, sdfg.arrays[e.move.array]))
                    nodes[e.made] = (post, dm)
                elif carry_out(sdfg, nodes, e):
                    continue
                elif isinstance(e, CopyInside):
                    box = subsets.Range([(b, end, 1) for b, end in e.box])
                    pre.add_nedge(written[e.scatter], pre.add_write(e.buffer),
                                  Memlet(data=written[e.scatter].data, subset=box,
                                         other_subset=subsets.Range.from_array(sdfg.arrays[e.buffer])))
                elif isinstance(e, Retarget):
                    _retarget(e)
                elif isinstance(e, Forget):
                    del sdfg.arrays[e.name]
            out.fusions.extend(carry.fusions)
        return out


def _dm(label: str, move: Move, solver: str) -> DistributedMemlet:
    dm = DistributedMemlet(label, move)
    dm.implementation = solver
    return dm


def _fold(sdfg: SDFG, where, f: Fold):
    """The gather of ``f.temporary`` gathers ``f.target`` in shifted blocks; the copy state empties."""
    gst, g = where
    g.set_move(f.move)
    g.implementation = f.solver
    out = gst.out_edges(g)[0]
    out.dst.data = f.target
    out.data = Memlet.from_array(f.target, sdfg.arrays[f.target])
    f.copy.remove_nodes_from(list(f.copy.nodes()))
    if not uses(sdfg, f.temporary):
        del sdfg.arrays[f.temporary]


def _retarget(r: Retarget):
    st = r.state
    for e in st.edges():
        if e.data.data == r.old:
            e.data.data = r.new
            e.data.subset.offset(list(r.offset), False)
    for n in st.data_nodes():
        if n.data == r.old:
            n.data = r.new
