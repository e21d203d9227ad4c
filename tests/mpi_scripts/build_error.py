"""Rank 0's build fails (a compiler flag that does not exist): every rank must raise, none may hang."""
import os

from mpi4py import MPI

import dace_partition as dp
import programs as P

sdfg = P.add5.to_sdfg()
sdfg.name = "t_build_error"
dp.lower(sdfg, {"_Add__map": (MPI.COMM_WORLD.size, )})
if MPI.COMM_WORLD.rank == 0:  # DaCe's environment variable wins over its configuration (conftest.py sets it)
    os.environ["DACE_compiler_cpu_args"] = "--no-such-compiler-flag-for-this-test"
try:
    dp.compile(sdfg)
except RuntimeError as e:
    print(f"rank {MPI.COMM_WORLD.rank} raised: {str(e)[:60]}", flush=True)
else:
    print(f"rank {MPI.COMM_WORLD.rank} did not raise", flush=True)
