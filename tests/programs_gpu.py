"""Programs of the CUDA issue that the core programs (tests/programs.py) do not cover."""
import dace
import numpy as np
from dace.transformation.dataflow import MapFusion

N, M = 16, 32


@dace.program
def softmax(x: dace.float64[16, 32]):
    mx = np.max(x, axis=1)
    e = np.exp(x - mx[:, np.newaxis])
    s = np.sum(e, axis=1)
    return e / s[:, np.newaxis]


def softmax_reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def fused_softmax():
    """The softmax SDFG, simplified and map-fused (DaCe's MapFusion) before lowering."""
    sdfg = softmax.to_sdfg()
    sdfg.simplify()
    sdfg.apply_transformations_repeated(MapFusion)
    sdfg.simplify()
    return sdfg


def leading_dim_schedule(sdfg, parts=2):
    """Every schedulable map split along its first dimension only (rows of the softmax)."""
    import dace_partition as dp
    schedule = {}
    for m in dp.maps(sdfg):
        if "init_map" in m.name:
            continue
        schedule[m.name] = (parts,) + (1,) * (len(m.params) - 1)
    return schedule


NH = dace.symbol("NH")


@dace.program
def host_branch(x: dace.float64[NH], out: dace.float64[NH]):
    """``y`` is computed by a kernel and read by host code (the branch condition)."""
    y = x * 2
    if y[0] > 0:
        out[:] = y + 1
    else:
        out[:] = y - 1


def host_branch_reference(x, out):
    y = x * 2
    return y + 1 if y[0] > 0 else y - 1
