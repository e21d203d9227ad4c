"""C = (A @ B) @ D with the two matmuls on different process grids: the intermediate moves straight
from the first grid's blocks to the second's, by a plan of the collective-sequence synthesizer.

Run:  python examples/matmul_chain.py
"""
import dace
import numpy as np

import dace_partition as dp
from _compare import compare


@dace.program
def chain(a: dace.float64[48, 32], b: dace.float64[32, 40], d: dace.float64[40, 24]):
    return (a @ b) @ d


def main(ranks=4):
    rng = np.random.default_rng(0)
    inputs = dict(a=rng.standard_normal((48, 32)), b=rng.standard_normal((32, 40)), d=rng.standard_normal((40, 24)))
    # first matmul on a 2 x 2 grid of (rows, columns), the second row-parallel on 4 ranks
    schedule = lambda sdfg: {"_MatMult_.gemm_map": (2, 2, 1), "_MatMult_.gemm_map_1": (4, 1, 1)}
    compare(chain.to_sdfg, schedule, ranks, inputs, chain.f(**inputs))


if __name__ == "__main__":
    main()
