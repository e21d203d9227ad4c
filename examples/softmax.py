"""The thesis' softmax (8.1.3) on float32[B, H, S, S], after DaCe's MapFusion, partitioned along the
first three dimensions: only the input scatter and the output gather remain.

Run:  python examples/softmax.py            (float32[4, 4, 64, 64] on 8 ranks)
      python examples/softmax.py 8 16 512   (the thesis' float32[8, 16, 512, 512]; 128 MiB)
"""
import sys

import dace
import numpy as np
from dace.transformation.dataflow import MapFusion

import dace_partition as dp
from _compare import compare


def softmax_sdfg(b, h, s):
    @dace.program
    def softmax(x: dace.float32[b, h, s, s]):
        mx = np.max(x, axis=3)
        e = np.exp(x - mx[:, :, :, np.newaxis])
        total = np.sum(e, axis=3)
        return e / total[:, :, :, np.newaxis]

    def make():
        sdfg = softmax.to_sdfg()
        sdfg.simplify()
        sdfg.apply_transformations_repeated(MapFusion)  # the thesis fuses the softmax before lowering
        sdfg.simplify()
        return sdfg

    return make


def main(b=4, h=4, s=64, ranks=8):
    x = np.random.default_rng(0).standard_normal((b, h, s, s)).astype(np.float32)
    e = np.exp(x - x.max(axis=3, keepdims=True))
    schedule = lambda sdfg: {m.name: (2, 2, 2, 1) for m in dp.maps(sdfg) if len(m.params) == 4}
    compare(softmax_sdfg(b, h, s), schedule, ranks, {"x": x}, e / e.sum(axis=3, keepdims=True), rtol=1e-5,
            atol=1e-6)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
