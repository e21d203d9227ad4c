"""Plan: what the lowering of a schedule will do, decided and costed without changing the SDFG.

:func:`plan_kernel` analyses one kernel on one grid (its accesses, rank-local buffers, and the scatters
and gathers with the solver that implements each and that solver's :class:`~dace_partition.ir.Cost`);
:func:`plan_lowering` does it for every scheduled kernel of a program. The partition pass applies a
:class:`LoweringPlan`; the schedule search (:mod:`dace_partition.search`) prices candidate grids with
:func:`plan_kernel` and never rewrites an SDFG to score one.
"""
from .lowering import (KernelMoves, LoweringPlan, PlannedMove, analyse_kernel, local_buffers, plan_kernel,
                       plan_lowering, role, scatters)

__all__ = ["KernelMoves", "LoweringPlan", "PlannedMove", "analyse_kernel", "local_buffers", "plan_kernel",
           "plan_lowering", "role", "scatters"]
