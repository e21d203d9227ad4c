"""Programs written for ``fresh_programs.py``, in the styles users write, none of them in the test suites or
in NPBench: NumPy programs with fixed and symbolic sizes, and PyTorch modules. A second batch (from
``strided_pairs`` on, and the first five modules) went further afield: strided and reversed slices, tuple
results, complex numbers, nested programs, ``np.einsum``/``np.outer``/``np.argmax``, boolean masks,
batched products, and modules with GroupNorm, LeakyReLU, Hardswish, Conv1d and hand-written attention. A third
batch (``science_programs``) is scientific code: PDE time steps, iterations, recurrences per row, counting;
a fourth (``body_programs``) puts loops, branches and ``while`` loops inside maps; a fifth
(``app_programs``) is kernels from finance, imaging, signal processing, graphs, physics and learning.
Each entry: the program (a ``@dace.program``, or a module and its example input) and a function of a
generator that gives its inputs."""
import dace
import numpy as np

N, M, K = 96, 64, 48
S = dace.symbol("S")
T = dace.symbol("T")


@dace.program
def standardize(x: dace.float64[N, M]):
    mu = np.mean(x, axis=0)
    d = x - mu
    sd = np.sqrt(np.mean(d * d, axis=0))
    return d / sd


@dace.program
def pair_distances(x: dace.float64[N, K], y: dace.float64[M, K]):
    out = np.zeros((N, M), dtype=np.float64)
    for i, j in dace.map[0:N, 0:M]:
        acc = 0.0
        for k in range(K):
            acc += (x[i, k] - y[j, k]) * (x[i, k] - y[j, k])
        out[i, j] = acc
    return out


@dace.program
def power_iteration(A: dace.float64[N, N], v: dace.float64[N], steps: dace.int64):
    for t in range(steps):
        w = A @ v
        v[:] = w / np.sqrt(np.sum(w * w))


@dace.program
def heat_1d(u: dace.float64[N], steps: dace.int64):
    tmp = np.zeros_like(u)
    for t in range(steps):
        tmp[1:-1] = u[1:-1] + 0.25 * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u[1:-1] = tmp[1:-1]


@dace.program
def logistic_step(X: dace.float64[N, K], y: dace.float64[N], w: dace.float64[K], lr: dace.float64):
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    w[:] = w - lr * (X.T @ (p - y)) / N


@dace.program
def integer_mix(a: dace.int32[N, M], b: dace.int32[N, M]):
    return (a * 3 + b) % 7 + np.minimum(a, b)


@dace.program
def symmetric_part(A: dace.float64[N, N]):
    return 0.5 * (A + A.T)


@dace.program
def logsumexp_rows(x: dace.float32[N, M]):
    m = np.max(x, axis=1)
    return np.log(np.sum(np.exp(x - m[:, np.newaxis]), axis=1)) + m


@dace.program
def outer_update(A: dace.float64[N, M], u: dace.float64[N], v: dace.float64[M]):
    A += u[:, np.newaxis] * v[np.newaxis, :]


@dace.program
def clip_where(x: dace.float64[N, M], lo: dace.float64, hi: dace.float64):
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


@dace.program
def conv_5tap(x: dace.float64[N], w: dace.float64[5]):
    out = np.zeros((N - 4, ), dtype=np.float64)
    for i in dace.map[0:N - 4]:
        out[i] = x[i] * w[0] + x[i + 1] * w[1] + x[i + 2] * w[2] + x[i + 3] * w[3] + x[i + 4] * w[4]
    return out


@dace.program
def matrix_chain(a: dace.float64[N, K], b: dace.float64[K, M], c: dace.float64[M, K]):
    return (a @ b) @ c


@dace.program
def scale_symbolic(x: dace.float64[S, T], a: dace.float64):
    return a * x + 1.0


@dace.program
def total_symbolic(x: dace.float64[S, T]):
    return np.sum(x)


@dace.program
def stencil_3d(x: dace.float64[16, 24, 20]):
    return x[1:-1, 1:-1, 1:-1] * 2.0 + x[2:, 1:-1, 1:-1] - x[:-2, 1:-1, 1:-1]


@dace.program
def shift_right(A: dace.float64[S]):
    A[1:] = A[:-1]


@dace.program
def grow_until(x: dace.float64[S]):
    s = 0.0
    while s < 100.0:
        x[:] = x * 1.5
        s = np.sum(x)


@dace.program
def stack_rows(a: dace.float64[S, T], b: dace.float64[S, T]):
    return np.concatenate((a, b), axis=0)


@dace.program
def transposed_write(A: dace.float64[S, T], B: dace.float64[T, S]):
    B[:] = np.transpose(A) * 2.0


@dace.program
def gram(X: dace.float64[S, T]):
    return X.T @ X


@dace.program
def transposed_matvec(A: dace.float64[S, T], x: dace.float64[S]):
    return A.T @ x


@dace.program
def strided_pairs(x: dace.float64[N]):
    return x[::2] + x[1::2]


@dace.program
def reversed_diff(x: dace.float64[N]):
    return x[::-1] - x


@dace.program
def row_softmax(x: dace.float32[N, M]):
    e = np.exp(x - np.max(x, axis=1)[:, np.newaxis])
    return e / np.sum(e, axis=1)[:, np.newaxis]


@dace.program
def centered_total(x: dace.float64[N, M]):
    return x - np.mean(x)


@dace.program
def global_range(x: dace.float64[N, M]):
    return np.max(x) - np.min(x)


@dace.program
def dot_scalar(x: dace.float64[N], y: dace.float64[N]):
    return np.sum(x * y)


@dace.program
def prefix_sum(x: dace.float64[N]):
    for i in range(1, N):
        x[i] = x[i] + x[i - 1]


@dace.program
def column_normalize_loop(A: dace.float64[N, M]):
    for j in range(M):
        A[:, j] = A[:, j] / np.sqrt(np.sum(A[:, j] * A[:, j]))


@dace.program
def two_results(a: dace.float64[N, M], b: dace.float64[N, M]):
    return a + b, a * b


@dace.program
def mixed_precision(x: dace.float32[N, M], w: dace.float64[M]):
    return x.astype(np.float64) @ w


@dace.program
def complex_power(z: dace.complex128[N, M]):
    return z * np.conj(z)


@dace.program
def _inner_scale(a: dace.float64[N, M], s: dace.float64):
    return a * s


@dace.program
def nested_call(a: dace.float64[N, M], b: dace.float64[N, M]):
    return _inner_scale(a, 2.0) + _inner_scale(b, 3.0)


@dace.program
def einsum_product(a: dace.float64[N, K], b: dace.float64[K, M]):
    return np.einsum("ik,kj->ij", a, b)


@dace.program
def outer_product(u: dace.float64[N], v: dace.float64[M]):
    return np.outer(u, v)


@dace.program
def periodic_heat(u: dace.float64[N, M], steps: dace.int64):
    for t in range(steps):
        u[0, :] = u[N - 2, :]
        u[N - 1, :] = u[1, :]
        u[1:-1, :] = 0.5 * u[1:-1, :] + 0.25 * (u[:-2, :] + u[2:, :])


@dace.program
def sum_over_first(x: dace.float64[16, 24, 20]):
    return np.sum(x, axis=0)


@dace.program
def row_dot_loop(A: dace.float64[N, M], x: dace.float64[M]):
    out = np.empty((N, ), dtype=np.float64)
    for i in range(N):
        out[i] = np.sum(A[i, :] * x)
    return out


@dace.program
def batched_matmul(a: dace.float64[8, N, K], b: dace.float64[8, K, M]):
    return a @ b


@dace.program
def integer_bits(a: dace.int64[N, M], b: dace.int64[N, M]):
    return (a // 3) ^ (b & 255) | (a << 2)


@dace.program
def masked_relu(x: dace.float64[N, M]):
    x[x < 0.0] = 0.0


@dace.program
def range_fill(x: dace.float64[N]):
    return x * np.arange(N) + np.ones((N, ), dtype=np.float64)


@dace.program
def threshold_count(x: dace.float64[N, M], t: dace.float64):
    return np.sum((x > t).astype(np.int64))


@dace.program
def symbolic_rows_softmax(x: dace.float64[S, T]):
    e = np.exp(x - np.max(x, axis=1)[:, np.newaxis])
    return e / np.sum(e, axis=1)[:, np.newaxis]


@dace.program
def symbolic_stencil_loop(u: dace.float64[S, T], steps: dace.int64):
    for t in range(steps):
        u[1:-1, 1:-1] = 0.2 * (u[1:-1, 1:-1] + u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])


@dace.program
def argmax_rows(x: dace.float64[N, M]):
    return np.argmax(x, axis=1)


def numpy_programs():
    """name -> (program, inputs(rng))"""
    s, t = 40, 30
    return {
        "standardize": (standardize, lambda r: dict(x=r.random((N, M)))),
        "pair_distances": (pair_distances, lambda r: dict(x=r.random((N, K)), y=r.random((M, K)))),
        "power_iteration": (power_iteration, lambda r: dict(A=r.random((N, N)), v=r.random(N), steps=5)),
        "heat_1d": (heat_1d, lambda r: dict(u=r.random(N), steps=7)),
        "logistic_step": (logistic_step, lambda r: dict(X=r.random((N, K)), y=(r.random(N) > 0.5).astype(np.float64),
                                                        w=r.random(K), lr=0.1)),
        "integer_mix": (integer_mix, lambda r: dict(a=r.integers(0, 100, (N, M), dtype=np.int32),
                                                    b=r.integers(0, 100, (N, M), dtype=np.int32))),
        "symmetric_part": (symmetric_part, lambda r: dict(A=r.random((N, N)))),
        "logsumexp_rows": (logsumexp_rows, lambda r: dict(x=r.random((N, M)).astype(np.float32))),
        "outer_update": (outer_update, lambda r: dict(A=r.random((N, M)), u=r.random(N), v=r.random(M))),
        "clip_where": (clip_where, lambda r: dict(x=r.random((N, M)), lo=0.2, hi=0.7)),
        "conv_5tap": (conv_5tap, lambda r: dict(x=r.random(N), w=r.random(5))),
        "matrix_chain": (matrix_chain, lambda r: dict(a=r.random((N, K)), b=r.random((K, M)), c=r.random((M, K)))),
        "scale_symbolic": (scale_symbolic, lambda r: dict(x=r.random((s, t)), a=1.5)),
        "total_symbolic": (total_symbolic, lambda r: dict(x=r.random((s, t)))),
        "stencil_3d": (stencil_3d, lambda r: dict(x=r.random((16, 24, 20)))),
        "shift_right": (shift_right, lambda r: dict(A=r.random(s))),
        "grow_until": (grow_until, lambda r: dict(x=r.random(s) + 0.1)),
        "stack_rows": (stack_rows, lambda r: dict(a=r.random((s, t)), b=r.random((s, t)))),
        "transposed_write": (transposed_write, lambda r: dict(A=r.random((s, t)), B=np.zeros((t, s)))),
        "gram": (gram, lambda r: dict(X=r.random((s, t)))),
        "transposed_matvec": (transposed_matvec, lambda r: dict(A=r.random((s, t)), x=r.random(s))),
        "strided_pairs": (strided_pairs, lambda r: dict(x=r.random(N))),
        "reversed_diff": (reversed_diff, lambda r: dict(x=r.random(N))),
        "row_softmax": (row_softmax, lambda r: dict(x=r.random((N, M)).astype(np.float32))),
        "centered_total": (centered_total, lambda r: dict(x=r.random((N, M)))),
        "global_range": (global_range, lambda r: dict(x=r.random((N, M)))),
        "dot_scalar": (dot_scalar, lambda r: dict(x=r.random(N), y=r.random(N))),
        "prefix_sum": (prefix_sum, lambda r: dict(x=r.random(N))),
        "column_normalize_loop": (column_normalize_loop, lambda r: dict(A=r.random((N, M)))),
        "two_results": (two_results, lambda r: dict(a=r.random((N, M)), b=r.random((N, M)))),
        "mixed_precision": (mixed_precision, lambda r: dict(x=r.random((N, M)).astype(np.float32), w=r.random(M))),
        "complex_power": (complex_power, lambda r: dict(z=r.random((N, M)) + 1j * r.random((N, M)))),
        "nested_call": (nested_call, lambda r: dict(a=r.random((N, M)), b=r.random((N, M)))),
        "einsum_product": (einsum_product, lambda r: dict(a=r.random((N, K)), b=r.random((K, M)))),
        "outer_product": (outer_product, lambda r: dict(u=r.random(N), v=r.random(M))),
        "periodic_heat": (periodic_heat, lambda r: dict(u=r.random((N, M)), steps=4)),
        "sum_over_first": (sum_over_first, lambda r: dict(x=r.random((16, 24, 20)))),
        "row_dot_loop": (row_dot_loop, lambda r: dict(A=r.random((N, M)), x=r.random(M))),
        "batched_matmul": (batched_matmul, lambda r: dict(a=r.random((8, N, K)), b=r.random((8, K, M)))),
        "integer_bits": (integer_bits, lambda r: dict(a=r.integers(0, 1000, (N, M)), b=r.integers(0, 1000, (N, M)))),
        "masked_relu": (masked_relu, lambda r: dict(x=r.random((N, M)) - 0.5)),
        "range_fill": (range_fill, lambda r: dict(x=r.random(N))),
        "threshold_count": (threshold_count, lambda r: dict(x=r.random((N, M)), t=0.3)),
        "symbolic_rows_softmax": (symbolic_rows_softmax, lambda r: dict(x=r.random((s, t)))),
        "symbolic_stencil_loop": (symbolic_stencil_loop, lambda r: dict(u=r.random((s, t)), steps=3)),
        "argmax_rows": (argmax_rows, lambda r: dict(x=r.random((N, M)))),
    }


# ---------------------------------------------------------------- third batch: scientific codes as users write them
# Cellular automata, time-stepped PDEs, Krylov and gradient iterations, an N-body kernel, per-row recurrences
# (a tridiagonal solve), counting, gathers by label, reshapes and transposes, a dynamic-programming table, and
# calls DaCe's frontend does not compile. Written once, as a user would, and not adjusted to what lowers.


@dace.program
def game_of_life(g: dace.int32[N, M], steps: dace.int64):
    nb = np.zeros((N, M), dtype=np.int32)
    for t in range(steps):
        nb[1:-1, 1:-1] = (g[:-2, :-2] + g[:-2, 1:-1] + g[:-2, 2:] + g[1:-1, :-2] + g[1:-1, 2:] +
                          g[2:, :-2] + g[2:, 1:-1] + g[2:, 2:])
        g[1:-1, 1:-1] = np.where(nb[1:-1, 1:-1] == 3, 1, np.where(nb[1:-1, 1:-1] == 2, g[1:-1, 1:-1], 0))


@dace.program
def wave_2d(u: dace.float64[N, M], u_prev: dace.float64[N, M], steps: dace.int64):
    u_next = np.zeros_like(u)
    for t in range(steps):
        u_next[1:-1, 1:-1] = (2.0 * u[1:-1, 1:-1] - u_prev[1:-1, 1:-1] + 0.1 *
                              (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]))
        u_prev[:] = u
        u[:] = u_next


@dace.program
def conjugate_gradient(A: dace.float64[N, N], b: dace.float64[N], x: dace.float64[N], iters: dace.int64):
    r = b - A @ x
    p = r.copy()
    rs = np.dot(r, r)
    for it in range(iters):
        Ap = A @ p
        alpha = rs / np.dot(p, Ap)
        x[:] = x + alpha * p
        r[:] = r - alpha * Ap
        rs_new = np.dot(r, r)
        p[:] = r + (rs_new / rs) * p
        rs = rs_new


@dace.program
def jacobi_until_converged(u: dace.float64[N, M], tol: dace.float64):
    v = u.copy()
    err = tol + 1.0
    it = 0
    while err > tol and it < 500:
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        err = np.max(np.abs(v - u))
        u[:] = v
        it += 1
    return it


@dace.program
def nbody_accel(pos: dace.float64[N, 3], mass: dace.float64[N]):
    acc = np.zeros((N, 3), dtype=np.float64)
    for i, j in dace.map[0:N, 0:N]:
        dx = pos[j, 0] - pos[i, 0]
        dy = pos[j, 1] - pos[i, 1]
        dz = pos[j, 2] - pos[i, 2]
        inv = mass[j] / (dx * dx + dy * dy + dz * dz + 0.01) ** 1.5
        acc[i, 0] += dx * inv
        acc[i, 1] += dy * inv
        acc[i, 2] += dz * inv
    return acc


@dace.program
def batched_thomas(a: dace.float64[N, M], b: dace.float64[N, M], c: dace.float64[N, M], d: dace.float64[N, M]):
    cp = np.zeros((N, M), dtype=np.float64)
    dp_ = np.zeros((N, M), dtype=np.float64)
    x = np.zeros((N, M), dtype=np.float64)
    for i in dace.map[0:N]:
        cp[i, 0] = c[i, 0] / b[i, 0]
        dp_[i, 0] = d[i, 0] / b[i, 0]
        for j in range(1, M):
            den = b[i, j] - a[i, j] * cp[i, j - 1]
            cp[i, j] = c[i, j] / den
            dp_[i, j] = (d[i, j] - a[i, j] * dp_[i, j - 1]) / den
        x[i, M - 1] = dp_[i, M - 1]
        for j in range(M - 2, -1, -1):
            x[i, j] = dp_[i, j] - cp[i, j] * x[i, j + 1]
    return x


@dace.program
def histogram_loop(x: dace.int64[N], bins: dace.int64[16]):
    for i in range(N):
        bins[x[i]] += 1


@dace.program
def cross_entropy(logits: dace.float64[N, K], labels: dace.int64[N]):
    m = np.max(logits, axis=1)
    lse = np.log(np.sum(np.exp(logits - m[:, np.newaxis]), axis=1)) + m
    picked = np.zeros(N, dtype=np.float64)
    for i in dace.map[0:N]:
        picked[i] = logits[i, labels[i]]
    return np.mean(lse - picked)


@dace.program
def upwind_advection(u: dace.float64[N], vel: dace.float64[N], steps: dace.int64):
    un = np.zeros_like(u)
    for t in range(steps):
        un[1:-1] = u[1:-1] - 0.4 * np.where(vel[1:-1] > 0.0, vel[1:-1] * (u[1:-1] - u[:-2]),
                                              vel[1:-1] * (u[2:] - u[1:-1]))
        u[1:-1] = un[1:-1]


@dace.program
def covariance_manual(X: dace.float64[N, K]):
    mu = np.mean(X, axis=0)
    Xc = X - mu
    return (Xc.T @ Xc) / (N - 1)


@dace.program
def least_squares_gd(A: dace.float64[N, K], b: dace.float64[N], x: dace.float64[K], steps: dace.int64):
    for t in range(steps):
        r = A @ x - b
        x[:] = x - 0.001 * (A.T @ r)


@dace.program
def monte_carlo_pi(x: dace.float64[N, M], y: dace.float64[N, M]):
    inside = np.sum((x * x + y * y) <= 1.0)
    return 4.0 * inside / (N * M)


@dace.program
def pool_by_reshape(x: dace.float64[N, M]):
    return np.max(np.reshape(x, (N // 2, 2, M // 2, 2)), axis=(1, 3))


@dace.program
def transpose_3d(x: dace.float64[16, 24, 20]):
    return np.transpose(x, (1, 0, 2)) * 2.0


@dace.program
def lcs_table(a: dace.int32[N], b: dace.int32[M]):
    L = np.zeros((N + 1, M + 1), dtype=np.int32)
    for i in range(1, N + 1):
        for j in range(1, M + 1):
            if a[i - 1] == b[j - 1]:
                L[i, j] = L[i - 1, j - 1] + 1
            else:
                L[i, j] = max(L[i - 1, j], L[i, j - 1])
    return L[N, M]


@dace.program
def gauss_seidel_sweeps(A: dace.float64[N, M], steps: dace.int64):
    for t in range(steps):
        for i in range(1, N - 1):
            for j in range(1, M - 1):
                A[i, j] = 0.25 * (A[i - 1, j] + A[i + 1, j] + A[i, j - 1] + A[i, j + 1])


@dace.program
def roll_laplacian(u: dace.float64[N, M]):
    return np.roll(u, 1, axis=0) + np.roll(u, -1, axis=0) + np.roll(u, 1, axis=1) + np.roll(u, -1, axis=1) - 4 * u


@dace.program
def cumsum_rows(x: dace.float64[N, M]):
    return np.cumsum(x, axis=1)


@dace.program
def kmeans_assign(X: dace.float64[N, K], C: dace.float64[8, K]):
    d = np.zeros((N, 8), dtype=np.float64)
    for i, c in dace.map[0:N, 0:8]:
        acc = 0.0
        for k in range(K):
            acc += (X[i, k] - C[c, k]) ** 2
        d[i, c] = acc
    return np.argmin(d, axis=1)


@dace.program
def shallow_water_1d(h: dace.float64[S], hu: dace.float64[S], steps: dace.int64):
    fh = np.zeros_like(h)
    for t in range(steps):
        fh[:-1] = 0.5 * (hu[:-1] + hu[1:])
        h[1:-1] = h[1:-1] - 0.1 * (fh[1:-1] - fh[:-2])
        hu[1:-1] = hu[1:-1] - 0.05 * (h[2:] - h[:-2])


@dace.program
def bilinear_resample(img: dace.float64[N, M], out: dace.float64[N // 2, M // 2]):
    for i, j in dace.map[0:N // 2, 0:M // 2]:
        out[i, j] = 0.25 * (img[2 * i, 2 * j] + img[2 * i + 1, 2 * j] + img[2 * i, 2 * j + 1] + img[2 * i + 1, 2 * j + 1])


@dace.program
def norm_rows_linalg(x: dace.float64[N, M]):
    return x / np.linalg.norm(x, axis=1)[:, np.newaxis]


@dace.program
def diag_dominant(A: dace.float64[N, N]):
    out = np.zeros(N, dtype=np.float64)
    for i in dace.map[0:N]:
        out[i] = A[i, i]
    return np.sum(np.abs(A), axis=1) - 2.0 * np.abs(out)


def science_programs():
    """name -> (program, inputs(rng)): the third batch."""
    s = 50
    return {
        "game_of_life": (game_of_life, lambda r: dict(g=r.integers(0, 2, (N, M), dtype=np.int32), steps=5)),
        "wave_2d": (wave_2d, lambda r: dict(u=r.random((N, M)), u_prev=r.random((N, M)), steps=4)),
        "conjugate_gradient": (conjugate_gradient, lambda r: (lambda A: dict(A=A @ A.T + N * np.eye(N), b=r.random(N), x=np.zeros(N), iters=6))(r.random((N, N)))),
        "jacobi_until_converged": (jacobi_until_converged, lambda r: dict(u=r.random((N, M)), tol=1e-3)),
        "nbody_accel": (nbody_accel, lambda r: dict(pos=r.random((N, 3)), mass=r.random(N))),
        "batched_thomas": (batched_thomas, lambda r: dict(a=r.random((N, M)), b=r.random((N, M)) + 4.0, c=r.random((N, M)), d=r.random((N, M)))),
        "histogram_loop": (histogram_loop, lambda r: dict(x=r.integers(0, 16, N), bins=np.zeros(16, dtype=np.int64))),
        "cross_entropy": (cross_entropy, lambda r: dict(logits=r.random((N, K)), labels=r.integers(0, K, N))),
        "upwind_advection": (upwind_advection, lambda r: dict(u=r.random(N), vel=r.random(N) - 0.5, steps=5)),
        "covariance_manual": (covariance_manual, lambda r: dict(X=r.random((N, K)))),
        "least_squares_gd": (least_squares_gd, lambda r: dict(A=r.random((N, K)), b=r.random(N), x=np.zeros(K), steps=5)),
        "monte_carlo_pi": (monte_carlo_pi, lambda r: dict(x=r.random((N, M)), y=r.random((N, M)))),
        "pool_by_reshape": (pool_by_reshape, lambda r: dict(x=r.random((N, M)))),
        "transpose_3d": (transpose_3d, lambda r: dict(x=r.random((16, 24, 20)))),
        "lcs_table": (lcs_table, lambda r: dict(a=r.integers(0, 4, N, dtype=np.int32), b=r.integers(0, 4, M, dtype=np.int32))),
        "gauss_seidel_sweeps": (gauss_seidel_sweeps, lambda r: dict(A=r.random((N, M)), steps=2)),
        "roll_laplacian": (roll_laplacian, lambda r: dict(u=r.random((N, M)))),
        "cumsum_rows": (cumsum_rows, lambda r: dict(x=r.random((N, M)))),
        "kmeans_assign": (kmeans_assign, lambda r: dict(X=r.random((N, K)), C=r.random((8, K)))),
        "shallow_water_1d": (shallow_water_1d, lambda r: dict(h=r.random(s) + 1.0, hu=r.random(s), steps=4)),
        "bilinear_resample": (bilinear_resample, lambda r: dict(img=r.random((N, M)), out=np.zeros((N // 2, M // 2)))),
        "norm_rows_linalg": (norm_rows_linalg, lambda r: dict(x=r.random((N, M)))),
        "diag_dominant": (diag_dominant, lambda r: dict(A=r.random((N, N)))),
    }


# ---------------------------------------------------------------- fourth batch: map bodies with control flow
# ``for i in dace.map[...]`` around loops, branches and ``while`` loops: recurrences along rows and down
# columns, per-row sorts and solves, Newton iterations, local arrays, running extrema. DaCe makes each such
# body a nested SDFG, the construct behind the third batch's wrong result.
NB, MB, KB = 24, 16, 12


@dace.program
def branch_per_element(x: dace.float64[NB, MB], y: dace.float64[NB, MB]):
    for i in dace.map[0:NB]:
        for j in range(MB):
            if x[i, j] > 0.5:
                y[i, j] = x[i, j] * 2.0
            else:
                y[i, j] = -x[i, j]


@dace.program
def newton_sqrt(a: dace.float64[NB, MB]):
    out = np.zeros((NB, MB), dtype=np.float64)
    for i, j in dace.map[0:NB, 0:MB]:
        v = a[i, j] + 1.0
        for it in range(20):
            v = 0.5 * (v + a[i, j] / v)
        out[i, j] = v
    return out


@dace.program
def halo_rows_in_body(x: dace.float64[NB, MB], y: dace.float64[NB, MB]):
    for i in dace.map[1:NB - 1]:
        for j in range(MB):
            y[i, j] = x[i - 1, j] + x[i + 1, j] - 2.0 * x[i, j]


@dace.program
def normalize_rows_in_place(x: dace.float64[NB, MB]):
    for i in dace.map[0:NB]:
        s = 0.0
        for j in range(MB):
            s += x[i, j]
        for k in range(MB):
            x[i, k] = x[i, k] / s


@dace.program
def bubble_sort_rows(x: dace.float64[NB, MB]):
    for i in dace.map[0:NB]:
        for p in range(MB - 1):
            for q in range(MB - 1 - p):
                if x[i, q] > x[i, q + 1]:
                    tmp = x[i, q]
                    x[i, q] = x[i, q + 1]
                    x[i, q + 1] = tmp


@dace.program
def matmul_inner_loop(A: dace.float64[NB, KB], B: dace.float64[KB, MB]):
    C = np.zeros((NB, MB), dtype=np.float64)
    for i, j in dace.map[0:NB, 0:MB]:
        acc = 0.0
        for k in range(KB):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc
    return C


@dace.program
def column_prefix_sums(x: dace.float64[NB, MB]):
    for j in dace.map[0:MB]:
        for i in range(1, NB):
            x[i, j] = x[i, j] + x[i - 1, j]


@dace.program
def time_loop_row_recurrence(x: dace.float64[NB, MB], steps: dace.int64):
    for t in range(steps):
        for i in dace.map[0:NB]:
            for j in range(1, MB):
                x[i, j] = 0.5 * (x[i, j] + x[i, j - 1])


@dace.program
def body_with_local_array(x: dace.float64[NB, MB]):
    out = np.zeros((NB, MB), dtype=np.float64)
    for i in dace.map[0:NB]:
        tmp = np.zeros((MB, ), dtype=np.float64)
        for j in range(MB):
            tmp[j] = x[i, j] * x[i, j]
        for k in range(MB):
            out[i, k] = tmp[MB - 1 - k]
    return out


@dace.program
def symbolic_body_from_zero(x: dace.float64[S, T]):
    out = np.zeros_like(x)
    for i in dace.map[0:x.shape[0]]:
        acc = 0.0
        for j in range(x.shape[1]):
            acc += x[i, j]
            out[i, j] = acc
    return out


@dace.program
def running_max_rows(x: dace.float64[NB, MB]):
    out = np.zeros((NB, MB), dtype=np.float64)
    for i in dace.map[0:NB]:
        m = x[i, 0]
        for j in range(MB):
            if x[i, j] > m:
                m = x[i, j]
            out[i, j] = m
    return out


@dace.program
def while_per_row(x: dace.float64[NB, MB]):
    count = np.zeros((NB, ), dtype=np.int64)
    for i in dace.map[0:NB]:
        j = 0
        s = 0.0
        while j < MB and s < 3.0:
            s += x[i, j]
            j += 1
        count[i] = j
    return count


@dace.program
def two_outputs_body(x: dace.float64[NB, MB], lo: dace.float64[NB], hi: dace.float64[NB]):
    for i in dace.map[0:NB]:
        a = x[i, 0]
        b = x[i, 0]
        for j in range(1, MB):
            a = min(a, x[i, j])
            b = max(b, x[i, j])
        lo[i] = a
        hi[i] = b


@dace.program
def lower_triangular_solve_rows(L: dace.float64[MB, MB], B: dace.float64[NB, MB]):
    X = np.zeros((NB, MB), dtype=np.float64)
    for r in dace.map[0:NB]:
        for i in range(MB):
            s = B[r, i]
            for k in range(i):
                s -= L[i, k] * X[r, k]
            X[r, i] = s / L[i, i]
    return X


def body_programs():
    """name -> (program, inputs(rng)): the fourth batch."""
    return {
        "branch_per_element": (branch_per_element, lambda r: dict(x=r.random((NB, MB)), y=np.zeros((NB, MB)))),
        "newton_sqrt": (newton_sqrt, lambda r: dict(a=r.random((NB, MB)) * 4.0)),
        "halo_rows_in_body": (halo_rows_in_body, lambda r: dict(x=r.random((NB, MB)), y=np.zeros((NB, MB)))),
        "normalize_rows_in_place": (normalize_rows_in_place, lambda r: dict(x=r.random((NB, MB)) + 0.1)),
        "bubble_sort_rows": (bubble_sort_rows, lambda r: dict(x=r.random((NB, MB)))),
        "matmul_inner_loop": (matmul_inner_loop, lambda r: dict(A=r.random((NB, KB)), B=r.random((KB, MB)))),
        "column_prefix_sums": (column_prefix_sums, lambda r: dict(x=r.random((NB, MB)))),
        "time_loop_row_recurrence": (time_loop_row_recurrence, lambda r: dict(x=r.random((NB, MB)), steps=3)),
        "body_with_local_array": (body_with_local_array, lambda r: dict(x=r.random((NB, MB)))),
        "symbolic_body_from_zero": (symbolic_body_from_zero, lambda r: dict(x=r.random((20, 9)))),
        "running_max_rows": (running_max_rows, lambda r: dict(x=r.random((NB, MB)))),
        "while_per_row": (while_per_row, lambda r: dict(x=r.random((NB, MB)))),
        "two_outputs_body": (two_outputs_body, lambda r: dict(x=r.random((NB, MB)), lo=np.zeros(NB), hi=np.zeros(NB))),
        "lower_triangular_solve_rows": (lower_triangular_solve_rows,
                                        lambda r: dict(L=np.tril(r.random((MB, MB))) + 2.0 * np.eye(MB), B=r.random((NB, MB)))),
    }


def torch_modules():
    """name -> (module, example inputs): built on first use (PyTorch is an extra)."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    class PreNormBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc1, self.fc2 = nn.LayerNorm(32), nn.Linear(32, 64), nn.Linear(64, 32)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))

    class Residual1d(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv1d(6, 6, 3, padding=1), nn.Conv1d(6, 6, 3, padding=1)
            self.norm = nn.GroupNorm(2, 6)

        def forward(self, x):
            return torch.relu(x + self.conv2(torch.tanh(self.norm(self.conv1(x)))))

    class ScaledDotAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            scores = torch.matmul(self.q(x), self.k(x).transpose(1, 2)) / 4.0
            return torch.matmul(torch.softmax(scores, dim=-1), self.v(x))

    class TwoBranches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(12, 8), nn.Linear(12, 8)

        def forward(self, x):
            return torch.cat([nn.functional.silu(self.a(x)), nn.functional.leaky_relu(self.b(x), 0.1)], dim=1)

    return {
        "residual_conv1d_groupnorm": (Residual1d().eval(), (torch.randn(4, 6, 20), )),
        "scaled_dot_attention": (ScaledDotAttention().eval(), (torch.randn(4, 10, 16), )),
        "two_branches_cat": (TwoBranches().eval(), (torch.randn(10, 12), )),
        "cnn_avgpool_head": (nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                           nn.Linear(4, 3), nn.Softmax(dim=1)).eval(), (torch.randn(6, 3, 12, 12), )),
        "batchnorm1d_mlp": (nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.Hardswish(), nn.Dropout(0.5),
                                          nn.Linear(16, 2)).eval(), (torch.randn(8, 10), )),
        "prenorm_mlp_block": (PreNormBlock(), (torch.randn(8, 16, 32), )),
        "conv_bn_pool": (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                       nn.MaxPool2d(2)).eval(), (torch.randn(4, 3, 16, 16), )),
        "multihead_attention": (Attention().eval(), (torch.randn(4, 10, 32), )),
        "transformer_encoder_layer": (nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval(),
                                      (torch.randn(4, 10, 32), )),
        "embedding_head": (nn.Sequential(nn.Embedding(50, 16), nn.Flatten(), nn.Linear(16 * 6, 4)),
                           (torch.randint(0, 50, (8, 6)), )),
        "log_softmax_head": (nn.Sequential(nn.Linear(20, 10), nn.LogSoftmax(dim=1)), (torch.randn(12, 20), )),
    }


def torch_layers():
    """name -> (module, example inputs): one ``torch.nn`` layer each, the everyday ones past Linear, Conv2d,
    BatchNorm, ReLU and MaxPool (activations, normalisations, pooling, padding, upsampling, recurrent)."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x2, x3, x4 = (torch.randn(*s, generator=g) * 3 for s in ((4, 6), (2, 3, 10), (2, 3, 8, 8)))
    seq = torch.randn(2, 3, 6, generator=g)
    layers = {
        "ReLU6": (nn.ReLU6(), x2), "Hardtanh": (nn.Hardtanh(-0.5, 0.25), x2), "LeakyReLU": (nn.LeakyReLU(0.1), x2),
        "ELU": (nn.ELU(), x2), "SELU": (nn.SELU(), x2), "CELU": (nn.CELU(1.3), x2), "SiLU": (nn.SiLU(), x2),
        "Mish": (nn.Mish(), x2), "Softplus": (nn.Softplus(), x2), "Softsign": (nn.Softsign(), x2),
        "Hardsigmoid": (nn.Hardsigmoid(), x2), "Hardswish": (nn.Hardswish(), x2), "PReLU": (nn.PReLU(3), x4),
        "Tanhshrink": (nn.Tanhshrink(), x2), "LogSigmoid": (nn.LogSigmoid(), x2), "Softmin": (nn.Softmin(1), x2),
        "GELU": (nn.GELU(), x2), "Threshold": (nn.Threshold(0.1, 20.0), x2), "Hardshrink": (nn.Hardshrink(), x2),
        "GroupNorm": (nn.GroupNorm(1, 3), x4), "InstanceNorm2d": (nn.InstanceNorm2d(3), x4),
        "InstanceNorm1d": (nn.InstanceNorm1d(3, affine=True), x3), "LocalResponseNorm": (nn.LocalResponseNorm(2), x4),
        "BatchNorm1d": (nn.BatchNorm1d(6), x2), "RMSNorm": (nn.RMSNorm(6), x2),
        "AvgPool2d": (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), x4),
        "AvgPool1d": (nn.AvgPool1d(2), x3), "MaxPool1d": (nn.MaxPool1d(2), x3),
        "AdaptiveAvgPool2d_1": (nn.AdaptiveAvgPool2d(1), x4), "AdaptiveAvgPool2d_2": (nn.AdaptiveAvgPool2d(2), x4),
        "AdaptiveMaxPool2d_1": (nn.AdaptiveMaxPool2d(1), x4), "Conv1d": (nn.Conv1d(3, 4, 3, padding=1), x3),
        "Softmax2d": (nn.Softmax2d(), x4), "ChannelShuffle": (nn.ChannelShuffle(1), x4),
        "Dropout2d": (nn.Dropout2d(), x4), "Unflatten": (nn.Unflatten(1, (2, 3)), x2),
        "ZeroPad2d": (nn.ZeroPad2d((1, 2, 0, 1)), x4), "ReflectionPad2d": (nn.ReflectionPad2d(1), x4),
        "ReplicationPad2d": (nn.ReplicationPad2d(1), x4), "Upsample_nearest": (nn.Upsample(scale_factor=2), x4),
        "PixelShuffle": (nn.PixelShuffle(2), torch.randn(2, 4, 4, 4, generator=g)),
        "RNN": (nn.RNN(6, 5, batch_first=True), seq), "GRU": (nn.GRU(6, 5, batch_first=True), seq),
        "LSTM": (nn.LSTM(6, 5, batch_first=True), seq), "ConvTranspose2d": (nn.ConvTranspose2d(3, 2, 2, stride=2), x4),
        "Upsample_bilinear": (nn.Upsample(scale_factor=2, mode="bilinear"), x4),
        "Conv2d_depthwise": (nn.Conv2d(3, 6, 3, groups=3, padding=1), x4),
        "ConvTranspose1d": (nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), x3),
        "GRU_2_layers_bidirectional": (nn.GRU(6, 5, num_layers=2, bidirectional=True, batch_first=True), seq),
    }
    # A third group (2026-12-01): 3-d layers, layers of two or three inputs, and the rest of the catalogue.
    x5, v8, w6 = torch.randn(2, 3, 6, 6, 6, generator=g), torch.randn(2, 8, generator=g), torch.randn(2, 6, generator=g)
    src, tgt = torch.randn(2, 5, 16, generator=g), torch.randn(2, 6, 16, generator=g)

    class Attention(nn.Module):  # keys and values of their own widths
        def __init__(self):
            super().__init__()
            self.m = nn.MultiheadAttention(16, 4, kdim=8, vdim=12, batch_first=True)

        def forward(self, q, k, v):
            return self.m(q, k, v)[0]

    class Normalize(nn.Module):
        def forward(self, x):
            return nn.functional.normalize(x, dim=-1) * torch.norm(x, dim=1, keepdim=True)

    layers.update({
        "Conv3d": (nn.Conv3d(3, 4, 3, padding=1), x5), "BatchNorm3d": (nn.BatchNorm3d(3), x5),
        "MaxPool3d": (nn.MaxPool3d(2), x5), "AvgPool3d": (nn.AvgPool3d(2), x5),
        "Bilinear": (nn.Bilinear(8, 6, 5), (v8, w6)), "CosineSimilarity": (nn.CosineSimilarity(dim=1), (v8, v8 * 0.5 + 1)),
        "PairwiseDistance": (nn.PairwiseDistance(), (v8, v8 * 0.5 + 1)), "normalize_and_norm": (Normalize(), x3),
        "TransformerDecoderLayer": (nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True), (tgt, src)),
        "Transformer": (nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True), (src, tgt)),
        "MultiheadAttention_kdim_vdim": (Attention(), (src, torch.randn(2, 7, 8, generator=g),
                                                       torch.randn(2, 7, 12, generator=g))),
        "Unfold": (nn.Unfold(kernel_size=2, stride=2), x4), "Fold": (nn.Fold((4, 4), 2, stride=2), torch.randn(2, 12, 4, generator=g)),
        "PixelUnshuffle": (nn.PixelUnshuffle(2), x4), "LPPool2d": (nn.LPPool2d(2, 2), x4),
        "CircularPad2d": (nn.CircularPad2d((1, 2, 2, 1)), x4), "ConstantPad3d": (nn.ConstantPad3d(1, 0.5), x5),
        "GLU": (nn.GLU(), x2), "LogSoftmax": (nn.LogSoftmax(dim=1), x2),
        "MaxPool2d_ceil": (nn.MaxPool2d(3, 2, ceil_mode=True), x4),
        "Conv2d_dilated_groups": (nn.Conv2d(3, 6, 3, padding=2, dilation=2, groups=3), x4),
        "LSTM_2_layers_bidirectional": (nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True), seq),
        "GRUCell": (nn.GRUCell(6, 5), w6), "EmbeddingBag": (nn.EmbeddingBag(20, 6, mode="mean"),
                                                          torch.randint(0, 20, (2, 5), generator=g)),
    })
    for m, _ in layers.values():
        for prm in m.parameters():  # not the initial values (ones, zeros), which hide a swapped operand
            with torch.no_grad():
                prm.add_(torch.rand(prm.shape, generator=g) * 0.5)
    return {k: (m.eval(), x if isinstance(x, tuple) else (x, )) for k, (m, x) in layers.items()}


# ---------------------------------------------------------------- fifth batch: applications
# Kernels from finance (Black-Scholes, binomial trees), imaging (Sobel, separable blur, 3 x 3 filters by
# offsets), signal processing (FIR, autocorrelation), graphs (PageRank), physics (Lennard-Jones, Ising,
# advection-diffusion, Burgers, a 3-D Jacobi), statistics and learning in NumPy (Welford, softmax regression,
# layer norm, attention, Gram-Schmidt, a Viterbi table, Horner, a matrix exponential by its series).
LG = 16
@dace.program
def black_scholes(s: dace.float64[N], k: dace.float64[N], t: dace.float64[N], r: dace.float64, sigma: dace.float64):
    d1 = (np.log(s / k) + (r + 0.5 * sigma * sigma) * t) / (sigma * np.sqrt(t))
    d2 = d1 - sigma * np.sqrt(t)
    # normal CDF by the logistic approximation users write when erf is missing
    n1 = 1.0 / (1.0 + np.exp(-1.702 * d1))
    n2 = 1.0 / (1.0 + np.exp(-1.702 * d2))
    return s * n1 - k * np.exp(-r * t) * n2


@dace.program
def binomial_options(v: dace.float64[N, LG + 1], p: dace.float64, disc: dace.float64):
    for i in range(LG):
        v[:, 0:LG - i] = disc * (p * v[:, 1:LG - i + 1] + (1.0 - p) * v[:, 0:LG - i])
    return v[:, 0]


@dace.program
def sobel_magnitude(img: dace.float64[N, M]):
    gx = (img[0:N - 2, 2:M] + 2.0 * img[1:N - 1, 2:M] + img[2:N, 2:M]
          - img[0:N - 2, 0:M - 2] - 2.0 * img[1:N - 1, 0:M - 2] - img[2:N, 0:M - 2])
    gy = (img[2:N, 0:M - 2] + 2.0 * img[2:N, 1:M - 1] + img[2:N, 2:M]
          - img[0:N - 2, 0:M - 2] - 2.0 * img[0:N - 2, 1:M - 1] - img[0:N - 2, 2:M])
    return np.sqrt(gx * gx + gy * gy)


@dace.program
def separable_blur(img: dace.float64[N, M], w: dace.float64[5], steps: dace.int64):
    tmp = np.zeros((N, M), dtype=np.float64)
    for s in range(steps):
        tmp[:, 2:M - 2] = (w[0] * img[:, 0:M - 4] + w[1] * img[:, 1:M - 3] + w[2] * img[:, 2:M - 2]
                           + w[3] * img[:, 3:M - 1] + w[4] * img[:, 4:M])
        img[2:N - 2, :] = (w[0] * tmp[0:N - 4, :] + w[1] * tmp[1:N - 3, :] + w[2] * tmp[2:N - 2, :]
                           + w[3] * tmp[3:N - 1, :] + w[4] * tmp[4:N, :])


@dace.program
def fir_filter(x: dace.float64[N + LG], h: dace.float64[LG]):
    y = np.zeros(N, dtype=np.float64)
    for k in range(LG):
        y += h[k] * x[k:k + N]
    return y


@dace.program
def autocorrelation(x: dace.float64[N]):
    r = np.zeros(LG, dtype=np.float64)
    for lag in range(LG):
        r[lag] = np.sum(x[0:N - lag] * x[lag:N])
    return r


@dace.program
def pagerank(A: dace.float64[N, N], r: dace.float64[N], d: dace.float64, iters: dace.int64):
    for it in range(iters):
        r[:] = d * (A @ r) + (1.0 - d) / N


@dace.program
def lennard_jones(px: dace.float64[N], py: dace.float64[N]):
    dx = px[:, np.newaxis] - px[np.newaxis, :]
    dy = py[:, np.newaxis] - py[np.newaxis, :]
    r2 = dx * dx + dy * dy + np.eye(N) + 0.5
    inv6 = 1.0 / (r2 * r2 * r2)
    f = (48.0 * inv6 * inv6 - 24.0 * inv6) / r2
    fx = np.sum(f * dx, axis=1)
    fy = np.sum(f * dy, axis=1)
    return fx, fy


@dace.program
def ising_energy(s: dace.int32[N, M]):
    e = s[1:N - 1, 1:M - 1] * (s[0:N - 2, 1:M - 1] + s[2:N, 1:M - 1] + s[1:N - 1, 0:M - 2] + s[1:N - 1, 2:M])
    return -np.sum(e)


@dace.program
def viterbi(logA: dace.float64[K, K], logB: dace.float64[K, LG], obs: dace.int64[M], start: dace.float64[K]):
    delta = np.zeros((M, K), dtype=np.float64)
    delta[0, :] = start + logB[:, obs[0]]
    for t in range(1, M):
        cand = delta[t - 1, :, np.newaxis] + logA
        delta[t, :] = np.max(cand, axis=0) + logB[:, obs[t]]
    return delta


@dace.program
def welford_columns(X: dace.float64[N, M]):
    mean = np.zeros(M, dtype=np.float64)
    m2 = np.zeros(M, dtype=np.float64)
    for i in range(N):
        delta = X[i, :] - mean
        mean[:] = mean + delta / (i + 1)
        m2[:] = m2 + delta * (X[i, :] - mean)
    return mean, m2 / (N - 1)


@dace.program
def softmax_regression(X: dace.float64[N, K], Y: dace.float64[N, LG], W: dace.float64[K, LG], lr: dace.float64,
                       steps: dace.int64):
    for s in range(steps):
        z = X @ W
        z = z - np.max(z, axis=1)[:, np.newaxis]
        e = np.exp(z)
        p = e / np.sum(e, axis=1)[:, np.newaxis]
        W[:] = W - lr * (X.T @ (p - Y)) / N


@dace.program
def layernorm_numpy(x: dace.float32[N, M], g: dace.float32[M], b: dace.float32[M]):
    mu = np.mean(x, axis=1)
    xc = x - mu[:, np.newaxis]
    var = np.mean(xc * xc, axis=1)
    return xc / np.sqrt(var[:, np.newaxis] + np.float32(1e-5)) * g + b


@dace.program
def attention_numpy(q: dace.float64[N, K], k: dace.float64[M, K], v: dace.float64[M, K]):
    sc = (q @ k.T) / np.sqrt(np.float64(K))
    sc = sc - np.max(sc, axis=1)[:, np.newaxis]
    e = np.exp(sc)
    return (e / np.sum(e, axis=1)[:, np.newaxis]) @ v


@dace.program
def conv2d_offsets(x: dace.float64[N + 2, M + 2], w: dace.float64[3, 3]):
    out = np.zeros((N, M), dtype=np.float64)
    for a in range(3):
        for b in range(3):
            out += w[a, b] * x[a:a + N, b:b + M]
    return out


@dace.program
def advection_diffusion(u: dace.float64[N, M], cx: dace.float64, nu: dace.float64, steps: dace.int64):
    for s in range(steps):
        u[1:N - 1, 1:M - 1] = (u[1:N - 1, 1:M - 1] - cx * (u[1:N - 1, 1:M - 1] - u[1:N - 1, 0:M - 2])
                               + nu * (u[0:N - 2, 1:M - 1] + u[2:N, 1:M - 1] + u[1:N - 1, 0:M - 2]
                                       + u[1:N - 1, 2:M] - 4.0 * u[1:N - 1, 1:M - 1]))
        u[0, :] = u[1, :]
        u[N - 1, :] = u[N - 2, :]


@dace.program
def burgers_1d(u: dace.float64[S], c: dace.float64, nu: dace.float64, steps: dace.int64):
    for s in range(steps):
        un = u.copy()
        u[1:-1] = (un[1:-1] - c * un[1:-1] * (un[1:-1] - un[:-2])
                   + nu * (un[2:] - 2.0 * un[1:-1] + un[:-2]))


@dace.program
def matrix_exponential(A: dace.float64[K, K]):
    E = np.eye(K)
    term = np.eye(K)
    for k in range(1, 12):
        term[:] = (term @ A) / k
        E += term
    return E


@dace.program
def horner_poly(x: dace.float64[N, M], c: dace.float64[8]):
    y = np.zeros((N, M), dtype=np.float64)
    for k in range(8):
        y[:] = y * x + c[k]
    return y


@dace.program
def level_histogram(x: dace.float64[N, M]):
    h = np.zeros(8, dtype=np.int64)
    for b in range(8):
        h[b] = np.sum(((x >= b) & (x < b + 1)).astype(np.int64))
    return h


@dace.program
def jacobi_3d(u: dace.float64[16, 24, 20], steps: dace.int64):
    v = np.copy(u)
    for s in range(steps):
        v[1:15, 1:23, 1:19] = (u[0:14, 1:23, 1:19] + u[2:16, 1:23, 1:19] + u[1:15, 0:22, 1:19]
                               + u[1:15, 2:24, 1:19] + u[1:15, 1:23, 0:18] + u[1:15, 1:23, 2:20]) / 6.0
        u[:] = v


@dace.program
def minmod_flux(u: dace.float64[S]):
    a = u[1:-1] - u[:-2]
    b = u[2:] - u[1:-1]
    return np.where(a * b > 0.0, np.where(np.abs(a) < np.abs(b), a, b), 0.0)


@dace.program
def column_l2_normalize(x: dace.float64[N, M]):
    return x / np.sqrt(np.sum(x * x, axis=0))


@dace.program
def gram_schmidt_loop(A: dace.float64[N, K]):
    Q = np.zeros((N, K), dtype=np.float64)
    for j in range(K):
        v = np.zeros(N, dtype=np.float64)
        v[:] = A[:, j]
        for i in range(j):
            v -= np.dot(Q[:, i], A[:, j]) * Q[:, i]
        Q[:, j] = v / np.sqrt(np.dot(v, v))
    return Q


def app_programs():
    """name -> (program, inputs(rng)): the fifth batch."""
    s = 50
    return {
        "black_scholes": (black_scholes, lambda r: dict(s=r.random(N) + 50, k=r.random(N) + 50, t=r.random(N) + 0.5, r=0.03, sigma=0.2)),
        "binomial_options": (binomial_options, lambda r: dict(v=r.random((N, LG + 1)), p=0.55, disc=0.99)),
        "sobel_magnitude": (sobel_magnitude, lambda r: dict(img=r.random((N, M)))),
        "separable_blur": (separable_blur, lambda r: dict(img=r.random((N, M)), w=r.random(5), steps=3)),
        "fir_filter": (fir_filter, lambda r: dict(x=r.random(N + LG), h=r.random(LG))),
        "autocorrelation": (autocorrelation, lambda r: dict(x=r.random(N))),
        "pagerank": (pagerank, lambda r: (lambda A: dict(A=A / A.sum(axis=0), r=np.full(N, 1.0 / N), d=0.85, iters=5))(r.random((N, N)))),
        "lennard_jones": (lennard_jones, lambda r: dict(px=r.random(N) * 5, py=r.random(N) * 5)),
        "ising_energy": (ising_energy, lambda r: dict(s=(r.integers(0, 2, (N, M)) * 2 - 1).astype(np.int32))),
        "viterbi": (viterbi, lambda r: dict(logA=np.log(r.random((K, K))), logB=np.log(r.random((K, LG))), obs=r.integers(0, LG, M), start=np.log(r.random(K)))),
        "welford_columns": (welford_columns, lambda r: dict(X=r.random((N, M)))),
        "softmax_regression": (softmax_regression, lambda r: dict(X=r.random((N, K)), Y=np.eye(LG)[r.integers(0, LG, N)], W=np.zeros((K, LG)), lr=0.5, steps=3)),
        "layernorm_numpy": (layernorm_numpy, lambda r: dict(x=r.random((N, M), dtype=np.float32), g=r.random(M, dtype=np.float32), b=r.random(M, dtype=np.float32))),
        "attention_numpy": (attention_numpy, lambda r: dict(q=r.random((N, K)), k=r.random((M, K)), v=r.random((M, K)))),
        "conv2d_offsets": (conv2d_offsets, lambda r: dict(x=r.random((N + 2, M + 2)), w=r.random((3, 3)))),
        "advection_diffusion": (advection_diffusion, lambda r: dict(u=r.random((N, M)), cx=0.3, nu=0.1, steps=4)),
        "burgers_1d": (burgers_1d, lambda r: dict(u=r.random(s), c=0.2, nu=0.1, steps=5)),
        "matrix_exponential": (matrix_exponential, lambda r: dict(A=r.random((K, K)) * 0.05)),
        "horner_poly": (horner_poly, lambda r: dict(x=r.random((N, M)), c=r.random(8))),
        "level_histogram": (level_histogram, lambda r: dict(x=r.random((N, M)) * 8)),
        "jacobi_3d": (jacobi_3d, lambda r: dict(u=r.random((16, 24, 20)), steps=3)),
        "minmod_flux": (minmod_flux, lambda r: dict(u=r.random(s))),
        "column_l2_normalize": (column_l2_normalize, lambda r: dict(x=r.random((N, M)))),
        "gram_schmidt_loop": (gram_schmidt_loop, lambda r: dict(A=r.random((N, K)))),
    }


# Sixth batch (2026-12-02): everyday idioms. A row picked by a loop beside the array's own rows (a distance
# to each point, deviations from each row), concatenation, transposed axes, clamping with out=, 3-d
# broadcasts, a periodic index, a Jacobi solver, dot products, a logistic-regression step, a first-order
# recurrence, masks from index comparisons, rank-one updates, and a slice of length one that keeps its axis
# in NumPy (DaCe drops it: refused in words) beside the spelling with np.newaxis.
NI, MI, KI = 30, 22, 5


@dace.program
def distance_to_each_point(X: dace.float64[NI, KI]):
    D = np.zeros((NI, NI), dtype=np.float64)
    for i in range(NI):
        D[i, :] = np.sqrt(np.sum((X - X[i, :]) ** 2, axis=1))
    return D


@dace.program
def row_deviation_sums(data: dace.float64[NI, MI]):
    acc = np.zeros((NI, MI), dtype=np.float64)
    for r in range(NI):
        acc[r, :] = np.sum(data - data[r, :], axis=0)
    return acc


@dace.program
def concat_columns(a: dace.float64[S, T], b: dace.float64[S, KI]):
    return np.concatenate((a, b * 2.0), axis=1)


@dace.program
def concat_rows(a: dace.float64[NI, MI], b: dace.float64[NI, MI]):
    return np.concatenate((a, b - a), axis=0)


@dace.program
def transposed_axes_sum(x: dace.float64[KI, NI, MI]):
    return np.sum(np.transpose(x, (1, 0, 2)) * 2.0, axis=1)


@dace.program
def clamp_with_out(A: dace.float64[S, T], lo: dace.float64, hi: dace.float64):
    np.maximum(A, lo, out=A)
    np.minimum(A, hi, out=A)


@dace.program
def squared_distances_3d(a: dace.float64[NI, KI], b: dace.float64[MI, KI]):
    d = a[:, np.newaxis, :] - b[np.newaxis, :, :]
    return np.sum(d * d, axis=2)


@dace.program
def periodic_difference(x: dace.float64[NI], y: dace.float64[NI]):
    for i in range(NI):
        y[i] = x[(i + 1) % NI] - x[i]


@dace.program
def jacobi_linear_solve(A: dace.float64[NI, NI], b: dace.float64[NI], x: dace.float64[NI], d: dace.float64[NI],
                        iters: dace.int64):
    for it in range(iters):
        x[:] = x + (b - A @ x) / d


@dace.program
def cosine_of_vectors(x: dace.float64[NI], y: dace.float64[NI]):
    return np.dot(x, y) / np.sqrt(np.dot(x, x) * np.dot(y, y))


@dace.program
def subtract_row_max(A: dace.float64[S, T]):
    mx = np.max(A, axis=1)
    return A - mx[:, np.newaxis]


@dace.program
def box_filter_3x3(A: dace.float64[NI, MI]):
    out = np.zeros((NI, MI), dtype=np.float64)
    out[1:-1, 1:-1] = (A[:-2, :-2] + A[:-2, 1:-1] + A[:-2, 2:] + A[1:-1, :-2] + A[1:-1, 1:-1]
                       + A[1:-1, 2:] + A[2:, :-2] + A[2:, 1:-1] + A[2:, 2:]) / 9.0
    return out


@dace.program
def weighted_row_means(X: dace.float64[NI, MI], w: dace.float64[MI]):
    return (X @ w) / np.sum(w)


@dace.program
def logistic_regression_steps(W: dace.float64[MI, KI], X: dace.float64[NI, MI], Y: dace.float64[NI, KI],
                              lr: dace.float64, steps: dace.int64):
    for s in range(steps):
        P = 1.0 / (1.0 + np.exp(-(X @ W)))
        W[:] = W - lr * (X.T @ (P - Y)) / NI


@dace.program
def first_order_filter(x: dace.float64[NI], a: dace.float64):
    y = np.zeros_like(x)
    y[0] = x[0]
    for i in range(1, NI):
        y[i] = a * y[i - 1] + x[i]
    return y


@dace.program
def columns_minus_first(A: dace.float64[NI, MI]):
    B = np.empty_like(A)
    for j in range(MI):
        B[:, j] = A[:, j] - A[:, 0]
    return B


@dace.program
def upper_triangle_by_indices(A: dace.float64[NI, NI]):
    I = np.arange(NI)
    return np.where(I[:, np.newaxis] <= I[np.newaxis, :], A, 0.0)


@dace.program
def rank_one_update_loop(A: dace.float64[NI, MI], u: dace.float64[NI, KI], v: dace.float64[MI, KI]):
    for k in range(KI):
        A[:] = A + np.multiply.outer(u[:, k], v[:, k])


@dace.program
def rows_over_first_column(a: dace.float64[NI, NI]):
    return a / a[:, 0:1]


@dace.program
def rows_over_first_column_newaxis(a: dace.float64[NI, NI]):
    return a / a[:, 0][:, np.newaxis]


def idiom_programs():
    """name -> (program, inputs(rng)): the sixth batch."""
    s, t = 31, 17
    return {
        "distance_to_each_point": (distance_to_each_point, lambda r: dict(X=r.random((NI, KI)))),
        "row_deviation_sums": (row_deviation_sums, lambda r: dict(data=r.random((NI, MI)))),
        "concat_columns": (concat_columns, lambda r: dict(a=r.random((s, t)), b=r.random((s, KI)))),
        "concat_rows": (concat_rows, lambda r: dict(a=r.random((NI, MI)), b=r.random((NI, MI)))),
        "transposed_axes_sum": (transposed_axes_sum, lambda r: dict(x=r.random((KI, NI, MI)))),
        "clamp_with_out": (clamp_with_out, lambda r: dict(A=r.random((s, t)), lo=0.2, hi=0.7)),
        "squared_distances_3d": (squared_distances_3d, lambda r: dict(a=r.random((NI, KI)), b=r.random((MI, KI)))),
        "periodic_difference": (periodic_difference, lambda r: dict(x=r.random(NI), y=np.zeros(NI))),
        "jacobi_linear_solve": (jacobi_linear_solve, lambda r: (lambda A: dict(
            A=A, b=r.random(NI), x=np.zeros(NI), d=np.diag(A).copy(), iters=5))(r.random((NI, NI)) + NI * np.eye(NI))),
        "cosine_of_vectors": (cosine_of_vectors, lambda r: dict(x=r.random(NI), y=r.random(NI))),
        "subtract_row_max": (subtract_row_max, lambda r: dict(A=r.random((s, t)))),
        "box_filter_3x3": (box_filter_3x3, lambda r: dict(A=r.random((NI, MI)))),
        "weighted_row_means": (weighted_row_means, lambda r: dict(X=r.random((NI, MI)), w=r.random(MI))),
        "logistic_regression_steps": (logistic_regression_steps, lambda r: dict(
            W=r.random((MI, KI)) * 0.1, X=r.random((NI, MI)), Y=(r.random((NI, KI)) > 0.5).astype(np.float64),
            lr=0.5, steps=3)),
        "first_order_filter": (first_order_filter, lambda r: dict(x=r.random(NI), a=0.7)),
        "columns_minus_first": (columns_minus_first, lambda r: dict(A=r.random((NI, MI)))),
        "upper_triangle_by_indices": (upper_triangle_by_indices, lambda r: dict(A=r.random((NI, NI)))),
        "rank_one_update_loop": (rank_one_update_loop, lambda r: dict(A=r.random((NI, MI)), u=r.random((NI, KI)),
                                                                      v=r.random((MI, KI)))),
        "rows_over_first_column": (rows_over_first_column, lambda r: dict(a=r.random((NI, NI)) + 1.0)),
        "rows_over_first_column_newaxis": (rows_over_first_column_newaxis, lambda r: dict(a=r.random((NI, NI)) + 1.0)),
    }
