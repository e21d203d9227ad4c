"""Small graph queries and edits that the passes share (public: the passes use each other's pieces
only through this module)."""
from typing import Iterable, List, Set, Tuple

import dace
from dace import nodes, subsets
from dace.memlet import Memlet
from dace.properties import CodeBlock
from dace.sdfg import SDFG, SDFGState
from dace.transformation import pass_pipeline as ppl

from ..ir import Move
from ..plan import LoweringPlan
from ..plan.model import Drop, Reroute
from ..schedule import ordered_states
from ..solvers.node import DistributedMemlet


class OrderedPass(ppl.Pass):
    """A pass of the lowering's Pipeline: it runs once, after the passes named in ``after``."""
    CATEGORY = "dace-partition"

    def __init__(self, after: Iterable[type] = ()):
        super().__init__()
        self.after = frozenset(after)  # the passes of its Pipeline that must run first

    def depends_on(self) -> Set[type]:
        return set(self.after)

    def modifies(self) -> ppl.Modifies:
        return ppl.Modifies.Nodes | ppl.Modifies.Edges | ppl.Modifies.Descriptors

    def should_reapply(self, modified: ppl.Modifies) -> bool:
        return False


class PlanPass(OrderedPass):
    """A pass that applies part of a :class:`~dace_partition.plan.LoweringPlan` and decides nothing of its own."""

    def __init__(self, plan: LoweringPlan, after: Iterable[type] = ()):
        super().__init__(after)
        self.plan = plan

    def modifies(self) -> ppl.Modifies:
        return ppl.Modifies.Everything


def distributed_memlets(sdfg: SDFG) -> List[Tuple[object, DistributedMemlet]]:
    """(state, node) of every DistributedMemlet, in program order."""
    return [(st, n) for st in ordered_states(sdfg) for n in st.nodes() if isinstance(n, DistributedMemlet)]


def uses(sdfg: SDFG, name: str) -> List[Tuple[object, nodes.AccessNode]]:
    return [(st, n) for st in ordered_states(sdfg) for n in st.data_nodes() if n.data == name]


def source_buffer(state, dm) -> str:
    return state.in_edges(dm)[0].src.data


def destination_buffer(state, dm) -> str:
    return state.out_edges(dm)[0].dst.data


def local_buffer(state, dm) -> str:
    """The rank-local side of a scatter (its destination) or gather (its source)."""
    return destination_buffer(state, dm) if not dm.src_grid else source_buffer(state, dm)


def rename_data(sdfg: SDFG, old: str, new: str):
    """Every access of ``old`` reads ``new`` instead; ``old`` is removed."""
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            if n.data == old:
                n.data = new
        for e in st.edges():
            if e.data.data == old:
                e.data.data = new
    del sdfg.arrays[old]


def reroute(state, dm, move: Move, solver: str, memlet: Memlet):
    """``dm`` now performs ``move`` with ``solver``, reading ``memlet`` (a rank-local buffer, or a box of
    one) instead of its former source, whose access node goes."""
    state.remove_node(state.in_edges(dm)[0].src)
    dm.set_move(move)
    dm.implementation = solver
    state.add_edge(state.add_read(memlet.data), None, dm, "_in", memlet)


def carry_out(sdfg: SDFG, nodes: dict, edit) -> bool:
    """Carries out a plan's :class:`~dace_partition.plan.model.Drop` or
    :class:`~dace_partition.plan.model.Reroute` on the node it names (``nodes``: Site / Made -> (state,
    node), kept current); False for any other edit."""
    if isinstance(edit, Drop):
        drop(*nodes.pop(edit.node))
        if edit.rename is not None:
            rename_data(sdfg, *edit.rename)
        return True
    if isinstance(edit, Reroute):
        st, dm = nodes[edit.node]
        reroute(st, dm, edit.move, edit.solver, buffer_memlet(sdfg, edit.buffer, edit.box))
        return True
    return False


def buffer_memlet(sdfg: SDFG, buffer: str, box=None) -> Memlet:
    """All of ``buffer``, or its ``box`` (``((begin, end), ...)``, ends included)."""
    if box is None:
        return Memlet.from_array(buffer, sdfg.arrays[buffer])
    return Memlet(data=buffer, subset=subsets.Range([(b, e, 1) for b, e in box]))


def drop(state, dm):
    """Removes a DistributedMemlet and its two access nodes."""
    state.remove_nodes_from([e.src for e in state.in_edges(dm)] + [e.dst for e in state.out_edges(dm)] + [dm])


def writes(sdfg: SDFG, name: str, besides=None) -> bool:
    """Whether some node writes ``name`` (other than the access node ``besides``)."""
    return any(n.data == name and st.in_degree(n) > 0 and n is not besides
               for st in ordered_states(sdfg) for n in st.data_nodes())


def trips_of(sdfg: SDFG, state):
    """How many times ``state`` runs per call of the program (loops around it; see :mod:`.loops`)."""
    from .loops import trips
    return trips(sdfg, state)


def has_moves(state) -> bool:
    """Whether a state holds DistributedMemlets (it runs on every rank, never only on rank 0)."""
    return any(isinstance(n, DistributedMemlet) for n in state.nodes())


RANK = "__dp_rank"  # the world rank symbol the program's first state sets (passes.partition)


def guard(state: SDFGState, condition: str):
    """Runs ``state`` only where ``condition`` holds: a branch around it on interstate edges. Returns the
    states it added before and after.

    (A ConditionalBlock would hide the state from DaCe 1.0.2's library-node expansion, which looks
    states up among the SDFG's top-level blocks.)
    """
    parent = state.parent_graph
    before = parent.add_state_before(state, f"{state.label}_enter", is_start_block=parent.start_block is state)
    after = parent.add_state_after(state, f"{state.label}_leave")
    parent.edges_between(before, state)[0].data.condition = CodeBlock(condition)
    parent.add_edge(before, after, dace.InterstateEdge(condition=f"not ({condition})"))
    return before, after
