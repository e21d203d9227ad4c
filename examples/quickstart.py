"""Quickstart: partition a NumPy program over 4 MPI ranks and check it against NumPy.

Run:  mpiexec -n 4 python -m mpi4py examples/quickstart.py     (``make demo`` does this)
"""
import dace
import numpy as np
from mpi4py import MPI

import dace_partition as dp


@dace.program
def scaled_add(x: dace.float64[64, 32], y: dace.float64[32]):
    return 2 * x + y


@dace.program
def matmul(a: dace.float64[64, 64], b: dace.float64[64, 64]):
    return a @ b


def main():
    comm = MPI.COMM_WORLD
    n = comm.size
    rng = np.random.default_rng(0)
    ok = True
    for prog, grid_of, args in [
        (scaled_add, lambda maps: {m.name: (n, 1) for m in maps}, lambda: dict(x=rng.random((64, 32)), y=rng.random(32))),
        (matmul, lambda maps: {"_MatMult_.gemm_map": (2, n // 2, 1) if n % 2 == 0 else (n, 1, 1)},
         lambda: dict(a=rng.random((64, 64)), b=rng.random((64, 64)))),
    ]:
        sdfg = prog.to_sdfg()
        sdfg.name = f"quickstart_{prog.name}_{n}"
        schedule = grid_of(dp.maps(sdfg))
        dp.lower(sdfg, schedule)
        program = dp.compile(sdfg)  # rank 0 builds, the others load the same library
        inputs = args()
        result = program(**inputs) if comm.rank == 0 else program()
        if comm.rank == 0:
            reference = prog.f(**inputs)
            good = np.allclose(result, reference, rtol=1e-12, atol=1e-12)
            ok &= good
            print(dp.report(sdfg))
            print(f"{prog.name} with schedule {schedule} on {n} ranks: "
                  f"{'matches NumPy' if good else 'DOES NOT MATCH NumPy'}\n")
    if comm.rank == 0 and not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
