"""Run precompiled Redistribute SDFGs on 8 ranks and compare with the simulator.

Usage: mpiexec -n 8 python -m mpi4py tests/mpi_scripts/synthesis_sdfg_run.py K=FOLDER ...
(FOLDER holds the SDFG built for PROBLEMS[K]).  Prints "SYNTHESIS-SDFG OK <n>" on rank 0 when every
rank matched on every problem.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from dace_partition.solvers.synthesis import synthesize  # noqa: E402

# (mesh, shape, src, dst, numpy dtype)
PROBLEMS = [
    # dynslice, allpermute, allgather on an inner dim
    ({"a": 2, "b": 2, "c": 2}, (8, 88, 12), [(), ("a", "c"), ()], [("b",), ("c",), ()], np.float64),
    # fused alltoall over two dim pairs, then the permutation
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 2, 3, 4, 4), [(), ("b",), ("c",), (), ("a",), ()],
     [("a",), (), (), (), ("c",), ("b",)], np.int32),
    # alltoall on a 4-way axis split into prime factors, then the permutation
    ({"a": 2, "b": 4}, (8, 8, 6), [("b",), ("a",), ()], [(), ("b", "a"), ()], np.float32),
    # allgathers (outermost dim) only
    ({"x": 2, "y": 2, "z": 2}, (8, 6, 4), [("x", "y"), ("z",), ()], [(), (), ()], np.float64),
    # one alltoall moving three (axis, source dim -> target dim) pairs, found as one search edge
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 6, 4, 2, 2), [("a",), (), ("b",), (), ("c",), ()],
     [(), ("a",), (), ("b",), (), ("c",)], np.int64),
]


def plan_of(k):
    mesh, shape, src, dst, dtype = PROBLEMS[k]
    return synthesize(mesh, shape, src, dst, itemsize=np.dtype(dtype).itemsize)


def global_array(k):
    _, shape, _, _, dtype = PROBLEMS[k]
    return (np.arange(int(np.prod(shape))) * 7 + 3).astype(dtype).reshape(shape)


def main():
    from dace.sdfg.utils import load_precompiled_sdfg
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r = comm.Get_rank()
    bad = 0
    folders = [arg.split("=", 1) for arg in sys.argv[1:]]  # "<problem index>=<build folder>"
    for k, folder in ((int(k), f) for k, f in folders):
        plan = plan_of(k)
        g = global_array(k)
        want = plan.simulate(g)[r]
        src = np.ascontiguousarray(plan.src_tiles(g)[r])
        got = np.full(want.shape, -1, dtype=g.dtype)
        load_precompiled_sdfg(folder)(src_tile=src, dst_tile=got)
        if not np.array_equal(got, want):
            bad += 1
            print(f"rank {r}: problem {k} mismatch\n{plan}", flush=True)
    bad = comm.allreduce(bad)
    if r == 0:
        print(f"SYNTHESIS-SDFG {'OK' if bad == 0 else 'FAIL'} {len(folders)}", flush=True)


if __name__ == "__main__":
    main()
