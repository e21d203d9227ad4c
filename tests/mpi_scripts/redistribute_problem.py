"""The Redistribute problem of tests/mpi/test_runtime_setup.py: a 4-rank mesh, an alltoall then a permutation
(the permutation's MPI_Sendrecv uses tag 77, the tag a user message on MPI_COMM_WORLD would share)."""
import numpy as np

from dace_partition.solvers.synthesis import synthesize

# (mesh, shape, src, dst, numpy dtype)
PROBLEM = ({"a": 2, "b": 2}, (8, 8), [("a",), ("b",)], [(), ("a", "b")], np.float64)


def plan_of():
    mesh, shape, src, dst, dtype = PROBLEM
    return synthesize(mesh, shape, src, dst, itemsize=np.dtype(dtype).itemsize)


def global_array():
    _, shape, _, _, dtype = PROBLEM
    return (np.arange(int(np.prod(shape))) * 7 + 3).astype(dtype).reshape(shape)
