"""Rank-local arguments (``lower(..., io="distributed")``), applied: the plan decides which argument's
tiles are which kernel's blocks and what moves remain (:mod:`dace_partition.plan.local_io`, before
anything is rewritten, refusals included); :class:`LocalizeArguments` makes each argument rank-local and
carries out the plan's edits on the scatters and gathers."""
from typing import Dict, Tuple

import dace
from dace.memlet import Memlet
from dace.sdfg import SDFG

from ..ir import Layout
from ..plan.local_io import Argument, Localized, Regather
from .graph import PlanPass, carry_out


class LocalizeArguments(PlanPass):
    """Makes the plan's rank-local arguments (``LoweringPlan.local_io``). Returns their layouts and what
    became of each (for the record and the report)."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> Tuple[Dict[str, Layout], Dict[str, Localized]]:
        local = self.plan.local_io
        if local is None:
            return {}, {}
        nodes = pipeline_results["PartitionKernels"].sites  # Site / Made -> (state, node), kept current
        for e in local.edits:
            if isinstance(e, Argument):
                desc = sdfg.arrays[e.array]
                new = dace.data.Array(desc.dtype, e.shape, storage=desc.storage, transient=False)
                sdfg.remove_data(e.array, validate=False)
                sdfg.add_datadesc(e.array, new)
            elif carry_out(sdfg, nodes, e):
                continue
            elif isinstance(e, Regather):
                st, dm = nodes[e.node]
                dm.set_move(e.move)
                dm.implementation = e.solver
                out = st.out_edges(dm)[0]
                out.data = Memlet.from_array(e.move.array, sdfg.arrays[e.move.array])
        return dict(local.layouts), {info.array: info for info in local.localized}
