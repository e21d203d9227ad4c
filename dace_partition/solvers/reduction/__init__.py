"""Hierarchy-aware reductions: P^2 (Xie et al., "Synthesizing optimal parallelism placement and
reduction strategies on hierarchical systems for deep learning"), built from the paper.

* :mod:`.model` -- system hierarchy, parallelism matrix (placement), reduction axes (sec. 3.1);
* :mod:`.language` / :mod:`.semantics` -- programs of (slice, form, collective) and their
  Hoare-style semantics on chunk x device matrices (sec. 3.2-3.3);
* :mod:`.synthesis` -- enumeration in increasing size over the reduction-axis synthesis
  hierarchy (sec. 3.4-3.5);
* :mod:`.cost` -- the bandwidth simulator that ranks programs (sec. 5);
* :mod:`.mpi_exec` -- execution with mpi4py on sub-communicators (owned by a
  :class:`~dace_partition.solvers.communicators.Communicators`);
* :func:`choose_reduction` -- the program (or flat AllReduce) to run for a reduction.

Depends only on NumPy; mpi4py is imported lazily by the executor.
"""
from ..communicators import Communicators
from .api import (CountReport, RankedProgram, ReductionChoice, as_placement, choose_reduction, plan_reduction,
                  count_programs, programs_for, rank_programs)
from .cost import PRESETS, CostModel
from .language import Collective, Form, Instruction, Program, SynthesisHierarchy
from .lowering import LoweredStep, lower, synthesis_hierarchy
from .model import (Level, ParallelismMatrix, Placement, SystemHierarchy, enumerate_matrices,
                    placement_from_grid)
from .mpi_exec import ENV_VAR, ReductionPlan, build_plan, detect_hierarchy
from .semantics import (Precondition, PreconditionError, final_context, initial_context, is_valid, run)
from .synthesis import DEFAULT_MAX_SIZE, SynthesisResult, synthesize

__all__ = [
    "Level", "SystemHierarchy", "ParallelismMatrix", "Placement", "enumerate_matrices", "placement_from_grid",
    "Form", "Collective", "Instruction", "Program", "SynthesisHierarchy",
    "Precondition", "PreconditionError", "initial_context", "final_context", "run", "is_valid",
    "synthesize", "SynthesisResult", "DEFAULT_MAX_SIZE", "lower", "LoweredStep", "synthesis_hierarchy",
    "CostModel", "PRESETS", "choose_reduction", "plan_reduction", "ReductionChoice", "rank_programs", "RankedProgram",
    "programs_for", "count_programs", "CountReport", "as_placement",
    "ReductionPlan", "build_plan", "detect_hierarchy", "Communicators", "ENV_VAR",
]
