"""Plan: what the lowering of a schedule will do, decided and costed without changing the SDFG.

:func:`plan_kernel` analyses one kernel on one grid (its accesses, rank-local buffers, and the scatters
and gathers with the solver that implements each and that solver's :class:`~dace_partition.ir.Cost`);
:func:`plan_lowering` does it for every scheduled kernel of a program, :mod:`.fusion` decides which
round trips through rank 0 between kernels go, :mod:`.carry` what each loop keeps on the grid, and
:mod:`.local_io` the rank-local arguments of ``io="distributed"``, :mod:`.branch` the data that
interstate edges read, broadcast to every rank, and :mod:`.residency` where each array of a GPU lowering
lives (the last four on :mod:`.model`'s model of the partitioned program). The partition pass applies a
:class:`LoweringPlan`; the schedule search (:mod:`dace_partition.search`) prices candidate grids with
:func:`plan_kernel` and whole schedules with :func:`decide` (array by array, :mod:`.traffic`), and never
rewrites an SDFG to score one. :func:`traffic` lists the moves the partitioned program makes.
"""
from .branch import Broadcast, plan_branch_data
from .carry import LoopCarry, Made, plan_loop_carries
from .local_io import LocalIo, Localized, plan_local_io
from .model import PartitionModel
from .fusion import Fusion, FusionKind, RoundTrip, Site, plan_round_trips
from .lowering import (KernelMoves, LoweringPlan, PlannedMove, analyse_kernel, local_buffers, plan_kernel,
                       decide, plan_lowering, role, scatters)
from .residency import GpuPlacement, plan_gpu_placement
from .traffic import Traffic, traffic

__all__ = ["Broadcast", "plan_branch_data", "LoopCarry", "Made", "plan_loop_carries", "LocalIo", "Localized", "plan_local_io", "PartitionModel", "Fusion", "FusionKind", "RoundTrip", "Site", "plan_round_trips", "KernelMoves", "LoweringPlan", "PlannedMove", "analyse_kernel", "local_buffers", "plan_kernel",
           "plan_lowering", "role", "scatters", "decide", "GpuPlacement", "plan_gpu_placement", "Traffic", "traffic"]
