"""Programs written for ``fresh_programs.py``, in the styles users write, none of them in the test suites or
in NPBench: NumPy programs with fixed and symbolic sizes, and PyTorch modules. Each entry: the program (a
``@dace.program``, or a module and its example input) and a function of a generator that gives its inputs."""
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

    return {
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
