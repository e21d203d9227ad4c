"""Rank 0 passes a wrong shape; every rank must end with rank 0's message."""
import sys

import numpy as np
from mpi4py import MPI

import dace_partition as dp

prog = dp.load(sys.argv[1])
x = np.zeros(63, np.int64) if MPI.COMM_WORLD.rank == 0 else None
prog(**({"x": x} if MPI.COMM_WORLD.rank == 0 else {}))
