"""dace-partition: turn a single-process DaCe program into an SPMD MPI program from a schedule.

    import dace_partition as dp
    sdfg = program.to_sdfg()
    dp.maps(sdfg)                         # what can be scheduled
    dp.lower(sdfg, {"_Add__map": (2, 2)}) # map name -> process-grid shape
    out = dp.run(sdfg, 4, x=x, y=y)       # mpiexec -n 4, results of rank 0
"""
from .errors import ScheduleError, UnsupportedPattern
from .launch import Program, RunError, compile, load, run
from .lowering import LoweringReport, lower, ranks_needed, report
from .schedule import MapInfo, maps
from .solvers.base import CommSpec, Solver
from .solvers.registry import register as register_solver

__all__ = [
    "maps", "lower", "compile", "run", "load", "report", "ranks_needed", "MapInfo", "LoweringReport", "Program",
    "ScheduleError", "UnsupportedPattern", "RunError", "Solver", "CommSpec", "register_solver"
]
__version__ = "0.1.0"
