"""Megatron multi-head self-attention (thesis 8.1.4), partitioned along the heads.

The projections, the scaled softmax and the attention run on each rank's heads without communication;
the output projection leaves partial sums over the heads, which the replicated bias add receives by one
MPI_Allreduce. Run:  python examples/attention.py [ranks]   (2 or 4)
"""
import sys

import dace
import numpy as np

import dace_partition as dp
from _compare import compare

B, S, E, H, D = 2, 8, 16, 4, 3  # batch, sequence, model width, heads, head width


def make_mha(B, S, E, H, D):
    """The attention program for these sizes (``benchmarks/vs_peers.py`` runs a larger one)."""

    @dace.program
    def mha(x: dace.float64[B, S, E], wq: dace.float64[H, E, D], wk: dace.float64[H, E, D],
            wv: dace.float64[H, E, D], wo: dace.float64[H, D, E], bo: dace.float64[E]):
        q = np.einsum("bse,hed->bhsd", x, wq)
        k = np.einsum("bse,hed->bhsd", x, wk)
        v = np.einsum("bse,hed->bhsd", x, wv)
        s = np.zeros([B, H, S, S])
        for b, h, i, j, d in dace.map[0:B, 0:H, 0:S, 0:S, 0:D]:
            s[b, h, i, j] += q[b, h, i, d] * k[b, h, j, d]
        m = np.max(s, axis=3)
        e = np.exp((s - m[:, :, :, np.newaxis]) / np.sqrt(D))  # scaled softmax over the keys
        z = np.sum(e, axis=3)
        p = e / z[:, :, :, np.newaxis]
        a = np.zeros([B, H, S, D])
        for b, h, i, d, j in dace.map[0:B, 0:H, 0:S, 0:D, 0:S]:
            a[b, h, i, d] += p[b, h, i, j] * v[b, h, j, d]
        oh = np.zeros([H, B, S, E])  # per-head output projection, summed over the heads
        for h, b, i, n, d in dace.map[0:H, 0:B, 0:S, 0:E, 0:D]:
            oh[h, b, i, n] += a[b, h, i, d] * wo[h, d, n]
        o = np.sum(oh, axis=0)
        return o + bo

    return mha


mha = make_mha(B, S, E, H, D)


def head_parallel(sdfg, ranks, heads=H):
    """Every map with a head axis splits it over ``ranks``; maps without one (the bias add) are
    replicated on all ranks, so they receive the summed output by MPI_Allreduce."""
    schedule = {}
    for m in dp.maps(sdfg):
        if heads in m.shape:
            grid = [1] * len(m.params)
            grid[list(m.shape).index(heads)] = ranks
            schedule[m.name] = tuple(grid)
        elif m.kernel.kind == "map":
            schedule[m.name] = dp.replicate((1, ) * len(m.params), ranks)
    return schedule


def main(ranks=4):
    rng = np.random.default_rng(0)
    inputs = dict(x=rng.standard_normal((B, S, E)), wq=rng.standard_normal((H, E, D)),
                  wk=rng.standard_normal((H, E, D)), wv=rng.standard_normal((H, E, D)),
                  wo=rng.standard_normal((H, D, E)), bo=rng.standard_normal(E))
    compare(mha.to_sdfg, lambda sdfg: head_parallel(sdfg, ranks), ranks, inputs, mha.f(**inputs))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
