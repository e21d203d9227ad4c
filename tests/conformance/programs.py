"""NPBench-class programs of our own, each with its NumPy reference and natural schedules.

Every case is a ``Case``: a ``@dace.program`` with symbolic sizes, a function that makes its inputs
(symbol values included), a NumPy reference, and ``schedule(P, maps)`` giving the grid of each map for
``P`` ranks. The default schedule ``lead("N")`` splits every map whose first extent is the big
data-parallel one into ``(P, 1, ...)``, as a new user would.

The reference returns what ``dp.run`` returns: the program's return value, or (for programs without
one) a dict of the arguments it writes.
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import dace
import numpy as np

N, M, K, T, NR = (dace.symbol(s) for s in ("N", "M", "K", "T", "NR"))
f64, i64 = dace.float64, dace.int64


@dataclass
class Case:
    name: str
    program: object
    inputs: Callable  # rng -> dict of arguments and symbol values
    reference: Callable  # dict of inputs (copies) -> expected result
    schedule: Callable  # (P, list of MapInfo) -> schedule dict
    kind: str = ""  # blas, statistics, stencil, reduction, view, loop, dl, scalar
    exact: bool = False  # integer program: compare exactly
    ranks: tuple = (2, 4)
    note: str = ""
    tags: set = field(default_factory=set)


def lead(*symbols):
    """Schedule: every map whose first extent grows with one of ``symbols`` (``N``, ``N - 2``) gets
    ``(P, 1, ...)``: the big data-parallel dimension is split, the others are whole."""
    names = {str(s) for s in symbols}

    def schedule(P, maps):
        out = {}
        for m in maps:
            free = {str(f) for f in getattr(m.shape[0], "free_symbols", ())}
            if free & names:
                out[m.name] = (P, ) + (1, ) * (len(m.params) - 1)
        return out

    return schedule


def only(*names_grids):
    """Schedule: explicit map names, each with a function of P giving its grid."""

    def schedule(P, maps):
        return {name: grid(P) for name, grid in names_grids}

    return schedule


CASES: Dict[str, Case] = {}


def case(name, inputs, reference, schedule=None, **kw):
    def deco(prog):
        CASES[name] = Case(name, prog, inputs, reference, schedule or lead("N"), **kw)
        return prog

    return deco


def _r(rng, *shape):
    return rng.random(shape) if shape else float(rng.random())


# ---------------------------------------------------------------- BLAS-1/2/3 with scalars


@case("scale", lambda r: dict(alpha=1.5, x=_r(r, 13), y=np.zeros(13), N=13),
      lambda d: dict(y=d["alpha"] * d["x"]), kind="blas")
@dace.program
def scale(alpha: f64, x: f64[N], y: f64[N]):
    y[:] = alpha * x


@case("axpy", lambda r: dict(alpha=0.5, x=_r(r, 13), y=_r(r, 13), N=13),
      lambda d: dict(y=d["alpha"] * d["x"] + d["y"]), kind="blas")
@dace.program
def axpy(alpha: f64, x: f64[N], y: f64[N]):
    y[:] = alpha * x + y


@case("dot_scaled", lambda r: dict(alpha=2.0, x=_r(r, 13), y=_r(r, 13), N=13),
      lambda d: d["alpha"] * np.sum(d["x"] * d["y"]), kind="blas")
@dace.program
def dot_scaled(alpha: f64, x: f64[N], y: f64[N]):
    return alpha * np.sum(x * y)


@case("gemv", lambda r: dict(A=_r(r, 10, 7), x=_r(r, 7), M=10, N=7), lambda d: d["A"] @ d["x"],
      only(("_MatMult_._GEMV__map", lambda P: (P, 1))), kind="blas",
      note="only the principal map of the library node is scheduled; the init map's grid is derived")
@dace.program
def gemv(A: f64[M, N], x: f64[N]):
    return A @ x


@case("gemm", lambda r: dict(alpha=1.5, beta=1.2, A=_r(r, 13, 9), B=_r(r, 9, 11), C=_r(r, 13, 11), N=13, K=9, M=11),
      lambda d: dict(C=d["alpha"] * d["A"] @ d["B"] + d["beta"] * d["C"]), kind="blas")
@dace.program
def gemm(alpha: f64, beta: f64, A: f64[N, K], B: f64[K, M], C: f64[N, M]):
    C[:] = alpha * A @ B + beta * C


@case("gesummv", lambda r: dict(alpha=1.5, beta=1.2, A=_r(r, 13, 13), B=_r(r, 13, 13), x=_r(r, 13), N=13),
      lambda d: d["alpha"] * d["A"] @ d["x"] + d["beta"] * d["B"] @ d["x"], kind="blas")
@dace.program
def gesummv(alpha: f64, beta: f64, A: f64[N, N], B: f64[N, N], x: f64[N]):
    return alpha * A @ x + beta * B @ x


@case("k2mm", lambda r: dict(alpha=1.5, beta=1.2, A=_r(r, 13, 7), B=_r(r, 7, 9), C=_r(r, 9, 11), D=_r(r, 13, 11),
                             N=13, K=7, M=9, T=11),
      lambda d: dict(D=d["alpha"] * d["A"] @ d["B"] @ d["C"] + d["beta"] * d["D"]), kind="blas")
@dace.program
def k2mm(alpha: f64, beta: f64, A: f64[N, K], B: f64[K, M], C: f64[M, T], D: f64[N, T]):
    D[:] = alpha * A @ B @ C + beta * D


def _gemver_ref(d):
    A = d["A"] + np.outer(d["u1"], d["v1"]) + np.outer(d["u2"], d["v2"])
    x = d["x"] + d["beta"] * (d["y"] @ A) + d["z"]
    w = d["w"] + d["alpha"] * (A @ x)
    return dict(A=A, x=x, w=w)


@case("gemver", lambda r: dict(alpha=1.5, beta=1.2, A=_r(r, 13, 13), u1=_r(r, 13), v1=_r(r, 13), u2=_r(r, 13),
                               v2=_r(r, 13), w=_r(r, 13), x=_r(r, 13), y=_r(r, 13), z=_r(r, 13), N=13),
      _gemver_ref, kind="blas")
@dace.program
def gemver(alpha: f64, beta: f64, A: f64[N, N], u1: f64[N], v1: f64[N], u2: f64[N], v2: f64[N], w: f64[N],
           x: f64[N], y: f64[N], z: f64[N]):
    A += np.multiply.outer(u1, v1) + np.multiply.outer(u2, v2)
    x += beta * y @ A + z
    w += alpha * A @ x


# ---------------------------------------------------------------- statistics


@case("mean_cols", lambda r: dict(data=_r(r, 13, 6), N=13, M=6), lambda d: np.mean(d["data"], axis=0),
      lead("N", "M"), kind="statistics")
@dace.program
def mean_cols(data: f64[N, M]):
    return np.mean(data, axis=0)


def _std_ref(d):
    mu = np.mean(d["data"], axis=0)
    return np.sqrt(np.sum((d["data"] - mu)**2, axis=0) / d["N"])


@case("std_cols", lambda r: dict(data=_r(r, 13, 6), N=13, M=6), _std_ref, kind="statistics")
@dace.program
def std_cols(data: f64[N, M]):
    mu = np.mean(data, axis=0)
    return np.sqrt(np.sum((data - mu)**2, axis=0) / N)


def _cov_ref(d):
    x = d["data"] - np.mean(d["data"], axis=0)
    return x.T @ x / (d["N"] - 1)


@case("covariance", lambda r: dict(data=_r(r, 13, 6), N=13, M=6), _cov_ref, kind="statistics")
@dace.program
def covariance(data: f64[N, M]):
    mu = np.mean(data, axis=0)
    x = data - mu
    return x.T @ x / (N - 1)


def _corr_ref(d):
    data = d["data"]
    mu = np.mean(data, axis=0)
    sd = np.sqrt(np.mean((data - mu)**2, axis=0))
    x = (data - mu) / (np.sqrt(d["N"] * 1.0) * sd)
    return x.T @ x


@case("correlation", lambda r: dict(data=_r(r, 13, 6), N=13, M=6), _corr_ref, kind="statistics")
@dace.program
def correlation(data: f64[N, M]):
    mu = np.mean(data, axis=0)
    sd = np.sqrt(np.mean((data - mu)**2, axis=0))
    x = (data - mu) / (np.sqrt(N * 1.0) * sd)
    return x.T @ x


# ---------------------------------------------------------------- stencils


def _jac1(a):
    b = a.copy()
    b[1:-1] = (a[:-2] + a[1:-1] + a[2:]) / 3.0
    return b


@case("jacobi1d", lambda r: dict(A=_r(r, 14), B=np.zeros(12), N=14), lambda d: dict(B=_jac1(d["A"])[1:-1]),
      kind="stencil")
@dace.program
def jacobi1d(A: f64[N], B: f64[N - 2]):
    B[:] = (A[:-2] + A[1:-1] + A[2:]) / 3.0


def _jac1_loop(d):
    A, B = d["A"].copy(), d["B"].copy()
    for _ in range(d["T"]):
        B[1:-1] = (A[:-2] + A[1:-1] + A[2:]) / 3.0
        A[1:-1] = (B[:-2] + B[1:-1] + B[2:]) / 3.0
    return dict(A=A, B=B)


@case("jacobi1d_time", lambda r: dict(A=_r(r, 14), B=_r(r, 14), N=14, T=3), _jac1_loop, kind="stencil")
@dace.program
def jacobi1d_time(A: f64[N], B: f64[N]):
    for t in range(T):
        B[1:-1] = (A[:-2] + A[1:-1] + A[2:]) / 3.0
        A[1:-1] = (B[:-2] + B[1:-1] + B[2:]) / 3.0


def _jac2(a):
    return 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])


@case("jacobi2d", lambda r: dict(A=_r(r, 12, 10), N=12, M=10), lambda d: _jac2(d["A"]), kind="stencil")
@dace.program
def jacobi2d(A: f64[N, M]):
    return 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])


def _jac2_loop(d):
    A, B = d["A"].copy(), d["B"].copy()
    for _ in range(d["T"]):
        B[1:-1, 1:-1] = _jac2(A)
        A[1:-1, 1:-1] = _jac2(B)
    return dict(A=A, B=B)


@case("jacobi2d_time", lambda r: dict(A=_r(r, 12, 12), B=_r(r, 12, 12), N=12, T=2), _jac2_loop, kind="stencil")
@dace.program
def jacobi2d_time(A: f64[N, N], B: f64[N, N]):
    for t in range(T):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def _heat3d(d):
    A, B = d["A"].copy(), d["B"].copy()

    def step(a):
        return (0.125 * (a[2:, 1:-1, 1:-1] - 2.0 * a[1:-1, 1:-1, 1:-1] + a[:-2, 1:-1, 1:-1]) + 0.125 *
                (a[1:-1, 2:, 1:-1] - 2.0 * a[1:-1, 1:-1, 1:-1] + a[1:-1, :-2, 1:-1]) + 0.125 *
                (a[1:-1, 1:-1, 2:] - 2.0 * a[1:-1, 1:-1, 1:-1] + a[1:-1, 1:-1, :-2]) + a[1:-1, 1:-1, 1:-1])

    for _ in range(d["T"]):
        B[1:-1, 1:-1, 1:-1] = step(A)
        A[1:-1, 1:-1, 1:-1] = step(B)
    return dict(A=A, B=B)


@case("heat3d_time", lambda r: dict(A=_r(r, 8, 8, 8), B=_r(r, 8, 8, 8), N=8, T=2), _heat3d, kind="stencil")
@dace.program
def heat3d_time(A: f64[N, N, N], B: f64[N, N, N]):
    for t in range(T):
        B[1:-1, 1:-1, 1:-1] = (0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1]) +
                               0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1]) +
                               0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2]) +
                               A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1]) +
                               0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1]) +
                               0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2]) +
                               B[1:-1, 1:-1, 1:-1])


def _fdtd(d):
    ex, ey, hz = d["ex"].copy(), d["ey"].copy(), d["hz"].copy()
    for t in range(d["T"]):
        ey[0, :] = d["fict"][t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return dict(ex=ex, ey=ey, hz=hz)


@case("fdtd2d", lambda r: dict(ex=_r(r, 10, 9), ey=_r(r, 10, 9), hz=_r(r, 10, 9), fict=_r(r, 2), N=10, M=9, T=2),
      _fdtd, kind="stencil", note="ey[0, :] = fict[t] is left unscheduled before the scheduled updates")
@dace.program
def fdtd2d(ex: f64[N, M], ey: f64[N, M], hz: f64[N, M], fict: f64[T]):
    for t in range(T):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])


# ---------------------------------------------------------------- reductions, one per operator

_ints = lambda r: dict(A=r.integers(-5, 6, (13, 6)).astype(np.int64), N=13, M=6)


@case("sum_rows", _ints, lambda d: np.sum(d["A"], axis=1), kind="reduction", exact=True)
@dace.program
def sum_rows(A: i64[N, M]):
    return np.sum(A, axis=1)


@case("sum_all", _ints, lambda d: np.sum(d["A"]), kind="reduction", exact=True)
@dace.program
def sum_all(A: i64[N, M]):
    return np.sum(A)


@case("prod_cols", lambda r: dict(A=r.integers(1, 3, (13, 6)).astype(np.int64), N=13, M=6),
      lambda d: np.prod(d["A"], axis=0), kind="reduction", exact=True)
@dace.program
def prod_cols(A: i64[N, M]):
    return np.multiply.reduce(A, axis=0)


@case("max_cols", _ints, lambda d: np.max(d["A"], axis=0), kind="reduction", exact=True)
@dace.program
def max_cols(A: i64[N, M]):
    return np.max(A, axis=0)


@case("min_all", _ints, lambda d: np.min(d["A"]), kind="reduction", exact=True)
@dace.program
def min_all(A: i64[N, M]):
    return np.min(A)


# ---------------------------------------------------------------- views and reshapes


@case("reshape_merge", lambda r: dict(A=_r(r, 12, 3, 4), W=_r(r, 12, 5), N=12, M=3, K=4),
      lambda d: d["A"].reshape(12, 12) @ d["W"], kind="view",
      note="reshape that merges the trailing axes, then a matmul split by rows")
@dace.program
def reshape_merge(A: f64[N, M, K], W: f64[M * K, 5]):
    B = np.reshape(A, (N, M * K))
    return B @ W


@case("reshape_split", lambda r: dict(x=_r(r, 12, 6), N=12, K=3),
      lambda d: np.sum(d["x"].reshape(12, 2, 3), axis=2), kind="view",
      note="reshape that splits the trailing axis, then a reduction")
@dace.program
def reshape_split(x: f64[N, 2 * K]):
    y = np.reshape(x, (N, 2, K))
    return np.sum(y, axis=2)


def _doitgen(d):
    A = d["A"].copy()
    for r in range(d["NR"]):
        A[r] = A[r] @ d["C4"]
    return dict(A=A)


@case("doitgen", lambda r: dict(A=_r(r, 4, 6, 5), C4=_r(r, 5, 5), NR=4, N=6, M=5), _doitgen,
      lead("N"), kind="view", note="A[r, :, :] @ C4 inside a loop over r")
@dace.program
def doitgen(A: f64[NR, N, M], C4: f64[M, M]):
    for r in range(NR):
        A[r, :, :] = A[r, :, :] @ C4


@case("transpose_add", lambda r: dict(A=_r(r, 9, 13), B=_r(r, 13, 9), N=13, M=9),
      lambda d: d["A"].T + d["B"], kind="view")
@dace.program
def transpose_add(A: f64[M, N], B: f64[N, M]):
    return A.T + B


# ---------------------------------------------------------------- loops with loop-dependent extents


def _tri(d):
    L = d["L"].copy()
    for i in range(d["N"]):
        L[i, :i + 1] *= 2.0
    return dict(L=L)


@case("triangular_scale", lambda r: dict(L=_r(r, 11, 11), N=11), _tri, kind="loop",
      note="for i: L[i, :i+1] *= 2 (extent depends on the loop variable): LoopToMap makes the i loop a map")
@dace.program
def triangular_scale(L: f64[N, N]):
    for i in range(N):
        L[i, :i + 1] *= 2.0


def _syrk(d):
    C, A = d["C"].copy(), d["A"]
    for i in range(d["N"]):
        C[i, :i + 1] *= d["beta"]
        for k in range(d["M"]):
            C[i, :i + 1] += d["alpha"] * A[i, k] * A[:i + 1, k]
    return dict(C=C)


@case("syrk", lambda r: dict(alpha=1.5, beta=1.2, C=_r(r, 9, 9), A=_r(r, 9, 5), N=9, M=5), _syrk, kind="loop",
      schedule=lambda P, maps: {m.name: (P, ) for m in maps if m.params == ("i", )},
      note="the rows are independent: LoopToMap makes the i loop a map (its k loop stays inside); with "
      "symbolic sizes the row blocks' column extents grow with the rank")
@dace.program
def syrk(alpha: f64, beta: f64, C: f64[N, N], A: f64[N, M]):
    for i in range(N):
        C[i, :i + 1] *= beta
        for k in range(M):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


# ---------------------------------------------------------------- deep-learning layers


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


@case("softmax", lambda r: dict(x=_r(r, 13, 8), N=13, M=8), lambda d: _softmax(d["x"]), kind="dl",
      note="every map split by rows")
@dace.program
def softmax(x: f64[N, M]):
    tmp_max = np.max(x, axis=-1)
    tmp_out = np.exp(x - tmp_max[:, np.newaxis])
    tmp_sum = np.sum(tmp_out, axis=-1)
    return tmp_out / tmp_sum[:, np.newaxis]


def _mlp(d):
    h = np.maximum(d["x"] @ d["W1"] + d["b1"], 0.0)
    return h @ d["W2"] + d["b2"]


@case("mlp", lambda r: dict(x=_r(r, 12, 8), W1=_r(r, 8, 10), b1=_r(r, 10), W2=_r(r, 10, 4), b2=_r(r, 4), N=12),
      _mlp, kind="dl")
@dace.program
def mlp(x: f64[N, 8], W1: f64[8, 10], b1: f64[10], W2: f64[10, 4], b2: f64[4]):
    h = np.maximum(x @ W1 + b1, 0.0)
    return h @ W2 + b2


def _layernorm(d):
    x = d["x"]
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu)**2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * d["gamma"] + d["beta"]


@case("layernorm", lambda r: dict(x=_r(r, 13, 8), gamma=_r(r, 8), beta=_r(r, 8), N=13, M=8), _layernorm, kind="dl")
@dace.program
def layernorm(x: f64[N, M], gamma: f64[M], beta: f64[M]):
    mu = np.mean(x, axis=-1)
    xc = x - mu[:, np.newaxis]
    var = np.mean(xc * xc, axis=-1)
    return xc / np.sqrt(var[:, np.newaxis] + 1e-5) * gamma + beta


def _conv(d):
    x, w = d["x"], d["w"]
    n, m = x.shape
    out = np.zeros((n - 2, m - 2))
    for i in range(3):
        for j in range(3):
            out += w[i, j] * x[i:i + n - 2, j:j + m - 2]
    return out + d["bias"][0]


@case("conv3x3_bias", lambda r: dict(x=_r(r, 12, 10), w=_r(r, 3, 3), bias=_r(r, 1), N=12, M=10), _conv, kind="dl",
      note="3x3 convolution written as nine shifted multiply-adds, plus a bias")
@dace.program
def conv3x3_bias(x: f64[N, M], w: f64[3, 3], bias: f64[1]):
    out = np.zeros((N - 2, M - 2), dtype=np.float64)
    for i in range(3):
        for j in range(3):
            out[:] += w[i, j] * x[i:i + N - 2, j:j + M - 2]
    return out + bias[0]


def _conv_mm(d):
    x, w = d["x"], d["w"]  # x: (N, 3*L) patches, w: (3*L, 4)
    return np.maximum(x @ w + d["b"], 0.0)


@case("conv_as_matmul", lambda r: dict(x=_r(r, 13, 12), w=_r(r, 12, 4), b=_r(r, 4), N=13), _conv_mm, kind="dl",
      note="im2col patches times filters, bias and relu")
@dace.program
def conv_as_matmul(x: f64[N, 12], w: f64[12, 4], b: f64[4]):
    return np.maximum(x @ w + b, 0.0)


# ---------------------------------------------------------------- scalar loops (go_fast) and scalar results


def _go_fast(d):
    a = d["a"]
    tr = 0.0
    for i in range(a.shape[0]):
        tr += np.tanh(a[i, i])
    return a + tr


@case("go_fast", lambda r: dict(a=_r(r, 11, 11), N=11), _go_fast, kind="scalar",
      note="a scalar accumulated in a loop on rank 0, read by the partitioned add")
@dace.program
def go_fast(a: f64[N, N]):
    trace = 0.0
    for i in range(N):
        trace += np.tanh(a[i, i])
    return a + trace


@case("normalize", lambda r: dict(x=_r(r, 13), N=13), lambda d: d["x"] / np.sum(d["x"]), kind="scalar",
      note="a scalar reduced by one partitioned kernel and read by the next")
@dace.program
def normalize(x: f64[N]):
    s = np.sum(x)
    return x / s


@case("int_scalar_loop", lambda r: dict(x=r.integers(-9, 10, 13).astype(np.int64), k=3, N=13),
      lambda d: d["x"] * (d["k"] * (d["k"] + 1) // 2) + 1, kind="scalar", exact=True)
@dace.program
def int_scalar_loop(x: i64[N], k: i64):
    c = 0
    for i in range(k):
        c += i + 1
    return x * c + 1
