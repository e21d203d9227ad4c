"""Branch data every rank agrees on, applied: the plan decides which data each interstate edge reads to
decide and broadcasts it from rank 0 (:mod:`dace_partition.plan.branch`); :class:`BroadcastBranchData`
adds, right after each such edge's source state (whose out-edges move to the new state), the planned
``ROOT -> every rank`` Moves, and makes the world grid they use at start-up."""
from typing import List

import dace
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState

from ..plan.branch import WORLD_GRID_LABEL, BranchMove, Broadcast, world_grid
from ..solvers.node import DistributedMemlet
from .graph import PlanPass


class BroadcastBranchData(PlanPass):
    """Broadcasts the data that interstate conditions read before they are evaluated, as the plan says
    (``LoweringPlan.broadcasts``). Returns the broadcasts it made."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> List[Broadcast]:
        if not self.plan.broadcasts:
            return []
        made = pipeline_results["PartitionKernels"]
        carried = pipeline_results.get("FuseLoops")
        for b in self.plan.broadcasts:
            if b.after.at_kernel:
                src = made.gathers[b.after.state]
            elif b.after.on_loop:
                src = carried.states[b.after]
            else:
                src = b.after.state
            st = sdfg.add_state(f"dp_branch_data_{src.label}")
            for e in list(sdfg.out_edges(src)):
                sdfg.remove_edge(e)
                sdfg.add_edge(st, e.dst, e.data)
            sdfg.add_edge(src, st, dace.InterstateEdge())
            for m in b.moves:
                _broadcast(sdfg, st, m)
        sdfg.append_init_code(f'dace_partition::init_grid({world_grid(self.plan)}, "{WORLD_GRID_LABEL}", '
                              "{dace_partition::world_size()});\n")
        return list(self.plan.broadcasts)


def _broadcast(sdfg: SDFG, st: SDFGState, m: BranchMove):
    name = m.array
    desc = sdfg.arrays[name]
    local, _ = sdfg.add_array(f"__dp_bc_{name}", tuple(desc.shape), desc.dtype, transient=True, find_new_name=True)
    source, read = name, None
    if m.staged:  # interstate code reads it by value: staged in a one-element array
        source, _ = sdfg.add_array(f"__dp_bc_{name}_root", [1], desc.dtype, transient=True, find_new_name=True)
        read = st.add_access(source)
        st.add_nedge(st.add_read(name), read, Memlet(f"{source}[0]"))
    dm = DistributedMemlet(f"broadcast_{name}", m.move)
    dm.implementation = m.solver
    read = read or st.add_read(name)
    st.add_edge(read, None, dm, "_in", Memlet.from_array(source, sdfg.arrays[source]))
    buf = st.add_access(local)
    st.add_edge(dm, "_out", buf, None, Memlet.from_array(local, sdfg.arrays[local]))
    st.add_nedge(buf, st.add_write(name), Memlet.from_array(local, sdfg.arrays[local]))
