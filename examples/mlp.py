"""A two-layer MLP forward, data-parallel and Megatron-style, with the communication each schedule needs.

Run:  mpiexec -n 4 python -m mpi4py examples/mlp.py
"""
import dace
import numpy as np
from mpi4py import MPI

import dace_partition as dp


@dace.program
def mlp(x: dace.float64[64, 32], w1: dace.float64[32, 48], b1: dace.float64[48], w2: dace.float64[48, 16],
        b2: dace.float64[16]):
    h = np.maximum(x @ w1 + b1, 0.0)
    return h @ w2 + b2


def schedules(n):
    data_parallel = {m.name: (n, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(mlp.to_sdfg())}
    megatron = {
        "_MatMult_.gemm_map": (1, n, 1),  # first layer: columns of W1
        "_Add__map": (1, n),
        "_numpy_maximum__map": (1, n),
        "_MatMult_.gemm_map_1": (1, 1, n),  # second layer: rows of W2 (partial sums)
        "_Add__map_1": dp.replicate((1, 1), n),  # + b2 on every rank: the partial sums arrive by one allreduce
    }
    return {"data-parallel": data_parallel, "megatron": megatron}


def main():
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(0)
    inputs = dict(x=rng.standard_normal((64, 32)), w1=rng.standard_normal((32, 48)), b1=rng.standard_normal(48),
                  w2=rng.standard_normal((48, 16)), b2=rng.standard_normal(16))
    for name, schedule in schedules(comm.size).items():
        sdfg = mlp.to_sdfg()
        sdfg.name = f"mlp_{name.replace('-', '_')}_{comm.size}"
        dp.lower(sdfg, schedule)
        program = dp.compile(sdfg)
        out = program(**inputs) if comm.rank == 0 else program()
        if comm.rank == 0:
            good = np.allclose(out, mlp.f(**inputs), rtol=1e-12, atol=1e-12)
            print(dp.report(sdfg))
            print(f"{name}: {'matches NumPy' if good else 'DOES NOT MATCH NumPy'}\n")
            if not good:
                raise SystemExit(1)


if __name__ == "__main__":
    main()
