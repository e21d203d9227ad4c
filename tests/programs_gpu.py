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


NC = dace.symbol("NC")


@dace.program
def axpy_sweeps(x: dace.float64[NC], y: dace.float64[NC], a: dace.float64, T: dace.int64):
    """``y[:] = ...`` is a kernel into a temporary, then a copy into ``y`` (DaCe's form), in a time loop."""
    for t in range(T):
        y[:] = a * x + y


def axpy_sweeps_reference(x, y, a, T):
    y = y.copy()
    for _ in range(T):
        y = a * x + y
    return {"y": y}


@dace.program
def columns_by_copies(pos: dace.float64[NC, 3], f: dace.float64[NC, 3]):
    """Each row sum lands in a column of ``f`` through a copy into a strided column."""
    for d in range(3):
        f[:, d] = np.sum(pos[:, d][np.newaxis, :] - pos[:, d][:, np.newaxis], axis=1)


def columns_by_copies_reference(pos, f):
    f = f.copy()
    for d in range(3):
        f[:, d] = (pos[:, d][None, :] - pos[:, d][:, None]).sum(axis=1)
    return {"f": f}


NR = dace.symbol("NR")
NCOL = dace.symbol("NCOL")


@dace.program
def column_all_and_product(A: dace.int64[NR, NCOL], every: dace.bool_[NCOL], prod: dace.int64[NCOL]):
    """Column reductions whose GPU atomics DaCe 1.0.2 gets wrong: a logical and over booleans (no CUDA
    overload: a compile error) and a product (a plain update: threads race)."""
    every[:] = np.logical_and.reduce(A > 1, axis=0)
    prod[:] = np.multiply.reduce(A, axis=0)


def column_all_and_product_reference(A):
    return {"every": np.logical_and.reduce(A > 1, axis=0), "prod": np.multiply.reduce(A, axis=0)}


NY, NX = dace.symbol("NY"), dace.symbol("NX")


@dace.program
def boundary_copies(p: dace.float64[NY, NX], T: dace.int64):
    """cavity_flow's pressure sweeps: a stencil from a copy of ``p``, then the boundary set by three
    copies that follow one another through ``p`` in one state (an edge column, the first row, the first
    column) and a last row of zeros."""
    pn = np.empty_like(p)
    for t in range(T):
        pn[:] = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[:-2, 1:-1] + pn[2:, 1:-1] + pn[1:-1, :-2] + pn[1:-1, 2:])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0


def boundary_copies_reference(p, T):
    p = p.copy()
    for _ in range(T):
        pn = p.copy()
        p[1:-1, 1:-1] = 0.25 * (pn[:-2, 1:-1] + pn[2:, 1:-1] + pn[1:-1, :-2] + pn[1:-1, 2:])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
    return p


NW, NHC = dace.symbol("NW"), dace.symbol("NHC")


@dace.program
def backward_rows(img: dace.float64[NW, NHC]):
    """deriche's last sweep: rank 0's ``y`` gets its last row on its GPU, then rows computed over split
    columns are gathered into it one at a time (each gather writes one row of ``y``)."""
    y = np.empty_like(img)
    y[-1, :] = 3.0
    y[-2, :] = 2.0 * img[-1, :]
    for i in range(NW - 3, -1, -1):
        y[i, :] = 0.5 * img[i + 1, :] + 0.25 * y[i + 1, :] + 0.125 * y[i + 2, :]
    return y


def backward_rows_reference(img):
    y = np.empty_like(img)
    y[-1, :] = 3.0
    y[-2, :] = 2.0 * img[-1, :]
    for i in range(img.shape[0] - 3, -1, -1):
        y[i, :] = 0.5 * img[i + 1, :] + 0.25 * y[i + 1, :] + 0.125 * y[i + 2, :]
    return y


NA, NB = dace.symbol("NA"), dace.symbol("NB")


@dace.program
def column_dots(A: dace.float64[NA, NA], B: dace.float64[NA, NB], out: dace.float64[NA, NB]):
    """symm's ``B[:i, j] @ A[i, :i]``: a dot of a strided column, empty at ``i = 0``."""
    for i in range(NA):
        for j in range(NB):
            out[i, j] = B[:i, j] @ A[i, :i]


def column_dots_reference(A, B):
    out = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            out[i, j] = B[:i, j] @ A[i, :i]
    return out
