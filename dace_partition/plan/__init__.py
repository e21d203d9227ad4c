"""Plan: what the lowering of a schedule will do, decided and costed without changing the SDFG.

:func:`plan_kernel` analyses one kernel on one grid (its accesses, rank-local buffers, and the scatters
and gathers with the solver that implements each and that solver's :class:`~dace_partition.ir.Cost`);
:func:`plan_lowering` does it for every scheduled kernel of a program, :mod:`.fusion` decides which
round trips through rank 0 between kernels go, and :mod:`.carry` what each loop keeps on the grid. The partition pass applies a
:class:`LoweringPlan`; the schedule search (:mod:`dace_partition.search`) prices candidate grids with
:func:`plan_kernel` and never rewrites an SDFG to score one.
"""
from .carry import LoopCarry, Made, plan_loop_carries
from .fusion import Fusion, FusionKind, RoundTrip, Site, plan_round_trips
from .lowering import (KernelMoves, LoweringPlan, PlannedMove, analyse_kernel, local_buffers, plan_kernel,
                       plan_lowering, role, scatters)

__all__ = ["LoopCarry", "Made", "plan_loop_carries", "Fusion", "FusionKind", "RoundTrip", "Site", "plan_round_trips", "KernelMoves", "LoweringPlan", "PlannedMove", "analyse_kernel", "local_buffers", "plan_kernel",
           "plan_lowering", "role", "scatters"]
