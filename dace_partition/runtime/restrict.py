"""Rank-local loops that read and write rank-local buffers through restrict-qualified pointers.

A lowered program keeps its rank-local buffers for the whole run (``AllocationLifetime.Persistent``), so
the generated C++ reaches them through the program's state struct (``__state->__0___dp1_e[i]``). The
compiler cannot tell those pointers apart from each other or from the arguments, so a loop that reads one
buffer and writes another is either not vectorized or vectorized behind a run-time overlap check; on the
softmax below GCC 12 took the scalar path every time, with a scalar ``expf`` per element. Measured in one
process, float32[4096, 1024] softmax on this 2-core AMD EPYC: 8.0 ms with the buffers in the state struct,
2.8 ms with the same buffers allocated in the call (``new`` tells the compiler they alias nothing), 2.7 ms
with the exp loop in a function of its own whose pointer parameters are ``__restrict__``.

:class:`NestMapForRestrict` gives every top-level CPU map that touches such a buffer that function: the
map scope becomes a nested SDFG, which DaCe emits as an inline function with ``__restrict__`` parameters
(the inliner keeps what restrict says). Nothing else changes: the same loops, the same memlets, the same
buffers. It runs on the copy that is built (:func:`restrict_local_loops`), not on the lowered SDFG the
caller holds, so the report and every analysis still see the maps where the schedule put them.
"""
from dataclasses import dataclass
from typing import List, Optional

import dace
from dace import nodes
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.graph import SubgraphView

from ..compat import all_states

_CPU_SCHEDULES = (dace.ScheduleType.Default, dace.ScheduleType.Sequential, dace.ScheduleType.CPU_Multicore)
_LONG_LIVED = (dace.AllocationLifetime.Persistent, dace.AllocationLifetime.Global)


@dataclass(frozen=True)
class NestMapForRestrict:
    """One top-level map scope of one state, to be nested (see the module docstring)."""
    state: SDFGState
    entry: nodes.MapEntry

    def can_be_applied(self, sdfg: SDFG) -> Optional[str]:
        """None when the map can be nested, else why not (a sentence)."""
        st, me = self.state, self.entry
        if me.map.schedule not in _CPU_SCHEDULES:
            return f"map '{me.map.label}' is scheduled {me.map.schedule.name}, not on the CPU"
        if any(not c.startswith("IN_") for c in me.in_connectors):
            return f"map '{me.map.label}' has a dynamic range input"
        scope = st.scope_subgraph(me)
        if any(isinstance(n, (nodes.LibraryNode, nodes.NestedSDFG)) for n in scope.nodes()):
            return f"map '{me.map.label}' holds a library node or nested SDFG (already a function of its own)"
        boundary = st.in_edges(me) + st.out_edges(st.exit_node(me))
        touched = set()
        for e in boundary:
            if e.data.data is None:
                continue
            if e.data.wcr is not None:
                return f"map '{me.map.label}' writes '{e.data.data}' with a write-conflict resolution"
            desc = sdfg.arrays[e.data.data]
            if isinstance(desc, (dace.data.View, dace.data.Stream)):
                return f"map '{me.map.label}' reads or writes '{e.data.data}', a {type(desc).__name__}"
            touched.add(e.data.data)
        if not any(sdfg.arrays[d].transient and sdfg.arrays[d].lifetime in _LONG_LIVED for d in touched):
            return f"map '{me.map.label}' touches no buffer that lives in the program's state"
        return None

    def apply(self, sdfg: SDFG) -> nodes.NestedSDFG:
        from dace.transformation.helpers import nest_state_subgraph
        st, me = self.state, self.entry
        return nest_state_subgraph(sdfg, st, SubgraphView(st, st.scope_subgraph(me).nodes()),
                                   name=f"restrict_{me.map.label}")


def candidates(sdfg: SDFG) -> List[NestMapForRestrict]:
    """Every top-level map of every state of ``sdfg`` (nested SDFGs are functions already)."""
    out = []
    for st in all_states(sdfg):
        if st.sdfg is not sdfg:
            continue
        sd = st.scope_dict()
        out.extend(NestMapForRestrict(st, n) for n in st.nodes() if isinstance(n, nodes.MapEntry) and sd[n] is None)
    return out


def restrict_local_loops(sdfg: SDFG) -> List[str]:
    """Nests every map that :meth:`NestMapForRestrict.can_be_applied` accepts; returns their labels.
    Changes ``sdfg`` in place: call it on the copy that is compiled."""
    done = []
    for c in candidates(sdfg):
        if c.can_be_applied(sdfg) is None:
            c.apply(sdfg)
            done.append(c.entry.map.label)
    return done


def build_like_lowered(sdfg: SDFG) -> List[str]:
    """A program that is not lowered (DaCe in one process) given the memory layout a lowered one gets:
    its whole-array temporaries live for the whole run (DaCe's ``make_transients_persistent``: allocated
    once, no page faults per call), and its loops over them take ``__restrict__`` pointers as above.
    Benchmarks use it so that "DaCe in one process" measures the rank-local code the ranks run."""
    from dace.transformation.auto.auto_optimize import make_transients_persistent
    make_transients_persistent(sdfg, dace.DeviceType.CPU)
    return restrict_local_loops(sdfg)
