"""The programs of the core issue, shared by tests, examples and benchmarks."""
import dace
import numpy as np


@dace.program
def add5(x: dace.int64[64]):
    return x + 5


@dace.program
def bcast_add(x: dace.int64[4, 8, 16], y: dace.int64[8, 16]):
    return x + y


@dace.program
def transposed_add(x: dace.int64[8, 16], y: dace.int64[16, 8]):
    return x.T + y


@dace.program
def transposed_map(x: dace.int64[8, 16], y: dace.int64[16, 8], out: dace.int64[16, 8]):
    for i, j in dace.map[0:16, 0:8]:
        out[i, j] = x[j, i] + y[i, j]


@dace.program
def offset_read(x: dace.int64[65], out: dace.int64[64]):
    for i in dace.map[0:64]:
        out[i] = x[i + 1] * i


@dace.program
def sum_rows(x: dace.float64[16, 16]):
    return np.add.reduce(x, axis=1)


@dace.program
def max_cols(x: dace.float64[16, 16]):
    return np.maximum.reduce(x, axis=0)


@dace.program
def matmul(a: dace.float64[64, 64], b: dace.float64[64, 64]):
    return a @ b


@dace.program
def accumulate(x: dace.int64[8, 12], out: dace.int64[8]):
    for i, j in dace.map[0:8, 0:12]:
        out[i] += x[i, j]


# ---- General constraints (issue 4) ----

@dace.program
def spmv(A_row: dace.int32[15], A_col: dace.int32[60], A_val: dace.float64[60], x: dace.float64[20],
         b: dace.float64[14]):
    """The thesis' CSR SPMV (8.1.2): 14 rows, not divisible by 4."""
    for i in dace.map[0:14]:
        for j in range(A_row[i], A_row[i + 1]):
            b[i] += A_val[j] * x[A_col[j]]


N = dace.symbol("N")


@dace.program
def stencil3(x: dace.float64[N], out: dace.float64[N]):
    """A 1-D 3-point stencil with halos; N is symbolic."""
    for i in dace.map[1:N - 1]:
        out[i] = x[i - 1] + x[i] + x[i + 1]


@dace.program
def histogram(samples: dace.float64[1000], hist: dace.int64[10]):
    """Monte-Carlo style: the sample axis is not a data dimension of the (small) result."""
    for s in dace.map[0:1000]:
        b = dace.int64(samples[s] * 10)
        hist[b] += 1


@dace.program
def count_inside(px: dace.float64[999], py: dace.float64[999], count: dace.int64[1]):
    """Samples reduced into a scalar-like result with write-conflict resolution."""
    for s in dace.map[0:999]:
        with dace.tasklet:
            a << px[s]
            b << py[s]
            c >> count(1, lambda u, v: u + v)[0]
            c = 1 if a * a + b * b <= 1.0 else 0


_SIZED = {}


def elementwise(n):
    if ("ew", n) not in _SIZED:

        @dace.program
        def ew(x: dace.float64[n], y: dace.float64[n]):
            return x * y + 1

        _SIZED[("ew", n)] = ew
    return _SIZED[("ew", n)]


def matmul_n(n):
    if ("mm", n) not in _SIZED:

        @dace.program
        def mm(a: dace.float64[n, n], b: dace.float64[n, n]):
            return a @ b

        _SIZED[("mm", n)] = mm
    return _SIZED[("mm", n)]


# ---- Whole programs (fusion) ----

@dace.program
def mlp(x: dace.float64[16, 8], w1: dace.float64[8, 12], b1: dace.float64[12], w2: dace.float64[12, 4],
        b2: dace.float64[4]):
    """A two-layer MLP forward: relu(x @ W1 + b1) @ W2 + b2."""
    h = np.maximum(x @ w1 + b1, 0.0)
    return h @ w2 + b2


def product_output(program, operand: str) -> str:
    """The array that the matrix product reading ``operand`` writes in ``program``'s SDFG: the frontends
    name temporaries differently (``mlp``'s ``h @ w2`` is ``__tmp3`` in DaCe 1.0.2, ``h_matmul_w2`` in
    DaCe 2), so tests that name it ask the graph."""
    from dace.sdfg import nodes
    from dace_partition.compat import all_states
    sdfg = program.to_sdfg()
    (name, ) = {e.data.data for st in all_states(sdfg) for n in st.nodes() if isinstance(n, nodes.LibraryNode)
                and "MatMult" in n.label and operand in {i.data.data for i in st.in_edges(n)} for e in st.out_edges(n)}
    return name


@dace.program
def axpy_chain(x: dace.float64[40], y: dace.float64[40]):
    return 2.0 * x + y


@dace.program
def matmul_chain(a: dace.float64[24, 16], b: dace.float64[16, 20], d: dace.float64[20, 12]):
    return (a @ b) @ d


@dace.program
def softmax4(x: dace.float32[4, 4, 8, 16]):
    """The thesis' softmax (8.1.3) on a small float32[B, H, S, S]."""
    mx = np.max(x, axis=3)
    e = np.exp(x - mx[:, :, :, np.newaxis])
    s = np.sum(e, axis=3)
    return e / s[:, :, :, np.newaxis]


def fused_softmax4():
    """softmax4 after DaCe's simplification and MapFusion, as the thesis fuses it before lowering."""
    from dace.transformation.dataflow import MapFusion
    sdfg = softmax4.to_sdfg()
    sdfg.simplify()
    sdfg.apply_transformations_repeated(MapFusion)
    sdfg.simplify()
    return sdfg


@dace.program
def two_readers(x: dace.float64[40]):
    """x is read in two different blocks by two kernels (the second one reversed)."""
    y = np.ndarray([40], dace.float64)
    for i in dace.map[0:40]:
        y[i] = 2.0 * x[i]
    out = np.ndarray([40], dace.float64)
    for i in dace.map[0:40]:
        out[i] = y[i] + x[39 - i]
    return out


def _examples():
    import os
    import sys
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    if folder not in sys.path:
        sys.path.insert(0, folder)


_examples()
from attention import head_parallel, mha  # noqa: E402,F401  (Megatron attention, thesis 8.1.4)


def keepdims_view_sub():
    """``x - np.max(x, axis=1, keepdims=True)`` as DaCe 1.0.2's frontend leaves it in some runs: the
    reduction writes ``red[N]``, a view of the transient ``tmp[N, 1]`` that the next map reads (in other
    runs its simplification removes the view and the map reads ``red``)."""
    sdfg = dace.SDFG("keepdims_view_sub")
    sdfg.add_array("x", [12, 10], dace.float64)
    sdfg.add_array("__return", [12, 10], dace.float64)
    sdfg.add_transient("tmp", [12, 1], dace.float64)
    sdfg.add_view("red", [12], dace.float64)
    st = sdfg.add_state("main")
    x, red, tmp = st.add_read("x"), st.add_access("red"), st.add_access("tmp")
    reduce = st.add_reduce("lambda a, b: max(a, b)", axes=[1], identity=dace.dtypes.min_value(dace.float64))
    st.add_nedge(x, reduce, dace.Memlet("x[0:12, 0:10]"))
    st.add_nedge(reduce, red, dace.Memlet("red[0:12]"))
    st.add_edge(red, "views", tmp, None, dace.Memlet("tmp[0:12, 0]"))
    st.add_mapped_tasklet("sub", dict(i="0:12", j="0:10"), dict(a=dace.Memlet("x[i, j]"), b=dace.Memlet("tmp[i, 0]")),
                          "o = a - b", dict(o=dace.Memlet("__return[i, j]")), external_edges=True,
                          input_nodes=dict(x=x, tmp=tmp))
    sdfg.validate()
    return sdfg


@dace.program
def jacobi_time_small(A: dace.float64[18, 10], B: dace.float64[18, 10]):
    """A 2-D Jacobi time loop (two sweeps of three steps) small enough that the search's default rates
    leave it on rank 0 unless it must split it."""
    for t in range(3):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])


def tridiagonal_rows(n, m):
    """The Thomas algorithm on each row of (n, m) arrays: a forward sweep, then a backward one."""
    @dace.program
    def tridiagonal(a: dace.float64[n, m], b: dace.float64[n, m], c: dace.float64[n, m], d: dace.float64[n, m]):
        cp = np.zeros((n, m), dtype=np.float64)
        dq = np.zeros((n, m), dtype=np.float64)
        x = np.zeros((n, m), dtype=np.float64)
        for i in dace.map[0:n]:
            cp[i, 0] = c[i, 0] / b[i, 0]
            dq[i, 0] = d[i, 0] / b[i, 0]
            for j in range(1, m):
                den = b[i, j] - a[i, j] * cp[i, j - 1]
                cp[i, j] = c[i, j] / den
                dq[i, j] = (d[i, j] - a[i, j] * dq[i, j - 1]) / den
            x[i, m - 1] = dq[i, m - 1]
            for k in range(m - 2, -1, -1):
                x[i, k] = dq[i, k] - cp[i, k] * x[i, k + 1]
        return x
    return tridiagonal


def tridiagonal_inputs(n, m):
    """The inputs of :func:`tridiagonal_rows` (diagonally dominant) and NumPy's dense solution of each row."""
    rng = np.random.default_rng(3)
    a, c, d = (rng.random((n, m)) for _ in range(3))
    b = rng.random((n, m)) + 3.0
    solved = np.stack([np.linalg.solve(np.diag(b[i]) + np.diag(a[i, 1:], -1) + np.diag(c[i, :-1], 1), d[i])
                       for i in range(n)])
    return dict(a=a, b=b, c=c, d=d), solved


# A map that reads an array at its own row and at the row a loop picks (numpy-benchmarks' multiple_sum):
# tests/unit/test_fixed_row_copies.py and tests/mpi/test_loops.py
@dace.program
def deviations_from_each_row(data: dace.float64[24, 20]):
    acc = np.zeros((24, 20))
    for r in range(24):
        acc[r, :] = np.sum(data - data[r, :], axis=0)
    return acc
