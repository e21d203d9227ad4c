"""dace-partition: turn a single-process DaCe program into an SPMD MPI program from a schedule.

    import dace_partition as dp
    sdfg = program.to_sdfg()
    dp.lower(sdfg, ranks=4)               # the process grids chosen by the cost model
    out = dp.run(sdfg, 4, x=x, y=y)       # mpiexec -n 4, results of rank 0

    dp.maps(sdfg)                         # the expert path: what can be scheduled
    dp.lower(sdfg, {"_Add__map": (2, 2)}) # map name -> process-grid shape
"""
from .errors import FrontendError, ScheduleError, UnsupportedPattern
from .frontend import from_onnx, from_torch, from_torch_train_step
from .api import Layout, gather, layout, lower, ranks_needed, report, scatter
from .ir import Cost, Distribution, Move, MoveKind, ReduceOp
from .report import LoweringReport
from .runtime.launch import Launcher, Program, RunError, bind, compile, load, run
from .runtime.mpi_info import MpiInfo, mpi_info
from .runtime.toolchain import info
from .schedule import MapInfo, Replicated, fused_map, maps, replicate
from .search import Machine, Schedule, auto_schedule, calibrate, gpu_machine, machine
from .solvers.base import CommSpec, Solver
from .solvers.registry import register as register_solver

__all__ = [
    "maps", "replicate", "fused_map", "layout", "scatter", "gather", "Layout", "Replicated", "lower", "compile", "run", "load", "report", "ranks_needed", "MapInfo", "LoweringReport", "Program",
    "ScheduleError", "UnsupportedPattern", "FrontendError", "RunError", "Solver", "CommSpec", "register_solver",
    "Move", "Distribution", "Cost", "MoveKind", "ReduceOp",
    "auto_schedule", "Schedule", "calibrate", "machine", "gpu_machine", "Machine",
    "bind", "from_onnx", "from_torch", "from_torch_train_step", "info", "mpi_info", "MpiInfo", "Launcher"
]
__version__ = "0.1.0"
