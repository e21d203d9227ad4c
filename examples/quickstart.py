"""Quickstart: partition NumPy programs over the ranks of this job and check them against NumPy.

The process grids are chosen by the cost model (``dp.lower(sdfg, ranks=n)``); the last program shows
the expert path, a hand-written schedule.

Run:  mpiexec -n 4 python -m mpi4py examples/quickstart.py     (``make demo`` does this)
"""
import dace
import numpy as np
from mpi4py import MPI

import dace_partition as dp


@dace.program
def scaled_add(x: dace.float64[4096, 1024], y: dace.float64[1024]):
    return 2 * x + y


@dace.program
def matmul(a: dace.float64[512, 512], b: dace.float64[512, 512]):
    return a @ b


@dace.program
def small_matmul(a: dace.float64[64, 64], b: dace.float64[64, 64]):
    return a @ b


def main():
    comm = MPI.COMM_WORLD
    n = comm.size
    rng = np.random.default_rng(0)
    ok = True
    for prog, schedule, args in [
        (scaled_add, None, lambda: dict(x=rng.random((4096, 1024)), y=rng.random(1024))),
        (matmul, None, lambda: dict(a=rng.random((512, 512)), b=rng.random((512, 512)))),
        # a hand schedule: rows split over every rank (too small for the cost model to split it)
        (small_matmul, {"_MatMult_.gemm_map": (n, 1, 1)}, lambda: dict(a=rng.random((64, 64)), b=rng.random((64, 64)))),
    ]:
        sdfg = prog.to_sdfg()
        sdfg.name = f"quickstart_{prog.name}_{n}"
        if schedule is None:
            dp.lower(sdfg, ranks=n)  # every rank chooses the same grids (the search is deterministic)
        else:
            dp.lower(sdfg, schedule)
        program = dp.compile(sdfg)  # rank 0 builds, the others load the same library
        inputs = args()
        result = program(**inputs) if comm.rank == 0 else program()
        if comm.rank == 0:
            reference = prog.f(**inputs)
            good = np.allclose(result, reference, rtol=1e-12, atol=1e-12)
            ok &= good
            print(dp.report(sdfg))
            how = "automatic schedule" if schedule is None else f"schedule {schedule}"
            print(f"{prog.name} with the {how} on {n} ranks: {'matches NumPy' if good else 'DOES NOT MATCH NumPy'}\n")
    if comm.rank == 0 and not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
