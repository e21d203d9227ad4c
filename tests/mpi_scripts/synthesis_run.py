"""Run synthesized (and naive) plans with MPI on 8 ranks and compare with the simulator.

Usage: mpiexec -n 8 python -m mpi4py tests/mpi_scripts/synthesis_run.py
Prints "SYNTHESIS-MPI OK <n>" on rank 0 when every rank matched on every problem.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from dace_partition.solvers.synthesis import naive_plan, synthesize  # noqa: E402

PROBLEMS = [
    ({"a": 2, "b": 2, "c": 2}, (8, 88, 12), [(), ("a", "c"), ()], [("b",), ("c",), ()]),
    ({"a": 8}, (8, 8), [("a",), ()], [(), ("a",)]),
    ({"a": 2, "b": 4}, (8, 8, 6), [("b",), ("a",), ()], [(), ("b", "a"), ()]),
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 4), [("a",), ("b",), ("c",)], [("c",), ("a",), ("b",)]),
    ({"a": 2, "b": 2, "c": 2}, (8, 4), [("a", "b", "c"), ()], [(), ("c", "b")]),
    ({"x": 2, "y": 4}, (8, 16, 4), [("x",), ("y",), ()], [(), (), ()]),          # over-partitioning
    ({"x": 2, "y": 2, "z": 2}, (8, 8), [("x", "y"), ()], [("y", "x"), ()]),       # pure permutation
    ({"a": 2, "b": 2, "c": 2}, (16, 6, 2, 4), [(), ("a",), (), ("c", "b")], [("b", "c", "a"), (), (), ()]),
    ({"x": 4, "y": 2}, (12, 8), [("x",), ("y",)], [("y",), ("x",)]),
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 4, 2), [(), (), (), ()], [("c",), (), ("a", "b"), ()]),
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 2, 3, 4, 4), [(), ("b",), ("c",), (), ("a",), ()],
     [("a",), (), (), (), ("c",), ("b",)]),                                      # fused alltoall
    # issue 17: layouts where XLA uses one all-to-all; the search now finds a fused alltoall edge
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 2, 4, 2, 4), [(), ("a",), (), (), (), ("c",)],
     [("a",), (), (), ("c",), (), ()]),
    ({"a": 2, "b": 2, "c": 2}, (4, 6, 4, 2), [(), ("b",), ("c",), ()], [("b",), (), (), ("c",)]),
    ({"a": 2, "b": 2, "c": 2}, (4, 4, 4, 4, 2, 2), [("a",), (), ("b",), (), ("c",), ()],
     [(), ("a",), (), ("b",), (), ("c",)]),                                      # three pairs at once
    # the permutation moves only devices that lack their tile (replicas pick their slices / chunks)
    ({"a": 2, "b": 2, "c": 2}, (8, 4), [(), ("c",)], [("c", "b"), ("a",)]),
    ({"a": 2, "b": 2, "c": 2}, (16, 3), [("c", "a", "b"), ()], [("b",), ()]),
]


def main():
    comm = MPI.COMM_WORLD
    r = comm.Get_rank()
    bad = 0
    for k, (mesh, shape, src, dst) in enumerate(PROBLEMS):
        dtype = np.float64 if k % 2 else np.int32
        g = (np.arange(int(np.prod(shape))) * 7 + 3).astype(dtype).reshape(shape)
        for make in (synthesize, naive_plan):
            plan = make(mesh, shape, src, dst, itemsize=g.itemsize)
            want = plan.simulate(g)[r]
            got = plan.execute(comm, plan.src_tiles(g)[r].copy())
            if got.shape != want.shape or not np.array_equal(got, want):
                bad += 1
                print(f"rank {r}: problem {k} {make.__name__} mismatch\n{plan}", flush=True)
    bad = comm.allreduce(bad)
    if r == 0:
        print(f"SYNTHESIS-MPI {'OK' if bad == 0 else 'FAIL'} {len(PROBLEMS)}", flush=True)


if __name__ == "__main__":
    main()
