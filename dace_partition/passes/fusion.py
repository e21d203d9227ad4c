"""Communication fusion (thesis 4.5): the round trips through rank 0 that the plan removes
(:mod:`dace_partition.plan.fusion` decides, before anything is rewritten; this pass carries it out).

Each planned :class:`~dace_partition.plan.RoundTrip` names the scatter it changes and the gather (or first
scatter) it reads from by their :class:`~dace_partition.plan.Site`; :class:`PartitionKernels` records which
node it made for each site.
"""
from typing import Dict, List, Tuple

from dace.memlet import Memlet
from dace.sdfg import SDFG

from ..plan.fusion import Fusion, FusionKind, RoundTrip, Site, only_source
from .graph import PlanPass, destination_buffer, drop, rename_data, reroute, source_buffer, uses

__all__ = ["Fusion", "FusionKind", "FuseRoundTrips", "only_source"]


class FuseRoundTrips(PlanPass):
    """Removes the round trips of intermediates through rank 0, and the repeated scatters of inputs, that
    the plan lists (``LoweringPlan.round_trips``). Returns the fusions it made."""

    def apply(self, sdfg: SDFG, trips: Tuple[RoundTrip, ...], sites: Dict[Site, tuple]) -> List[Fusion]:
        for d in trips:
            (sst, s), (gst, g) = sites[d.reader], sites[d.source]
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
        for arr in {d.fusion.array for d in trips if d.fusion.kind != FusionKind.REUSE}:
            if arr in sdfg.arrays and not uses(sdfg, arr):
                del sdfg.arrays[arr]
        return [d.fusion for d in trips]

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> List[Fusion]:
        """Round trips between consecutive kernels (those across the iterations of a loop are
        :class:`~dace_partition.passes.loops.FuseLoops`', which runs after this one in the pipeline)."""
        return self.apply(sdfg, self.plan.round_trips, pipeline_results["PartitionKernels"].sites)
