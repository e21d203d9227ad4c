"""Random small NumPy programs for the pipeline property test (tests/mpi/test_pipeline_property.py).

A program is a batch of independent kernels, each writing its own output argument ``o<k>``, so one
SDFG, one compile and one ``mpiexec`` run check many kernels at once. The same source runs as plain
NumPy for the reference. Every value is an integer (floats hold integers exactly), so results must
match exactly.
"""
import importlib.util
import os
import tempfile

import numpy as np
from hypothesis import strategies as st

M = 6  # fixed second extent; the first extent N is a symbol, bound at run time

# name -> (output shape, template); templates use {k} and the drawn parameters
KINDS = {
    "elementwise": ("[N, M]", "o{k}[:] = X {op} Y"),
    "offsets": ("[N - 2]", "o{k}[:] = u[{a}:N - 2 + {a}] {op} u[{b}:N - 2 + {b}]"),
    "broadcast": ("[N, M]", "o{k}[:] = X {op} v"),
    "column": ("[N]", "o{k}[:] = X[:, {c}] {op} u"),
    "rows_slice": ("[N - 1, M]", "o{k}[:] = X[{a}:N - 1 + {a}, :] {op} Y[{b}:N - 1 + {b}, :]"),
    "reduce_rows": ("[N]", "o{k}[:] = np.{red}(X, axis=1)"),
    "reduce_cols": ("[M]", "o{k}[:] = np.{red}(X, axis=0)"),
    "reduce_all": ("[1]", "o{k}[0] = np.{red}(X)"),
    "product": ("[N]", "o{k}[:] = np.multiply.reduce(Q, axis=1)"),
    "matmul": ("[N, M]", "o{k}[:] = F @ G"),
    "matvec": ("[N]", "o{k}[:] = F @ w"),
    "scalar": ("[N, M]", "o{k}[:] = X * s + {c}"),
    "loop": ("[N, M]", "o{k}[:] = X\n    for t in range({c}):\n        o{k}[:] = o{k} * 2 + Y"),
    "transpose": ("[M, M]", "o{k}[:] = G.T + G"),
}
FLOAT_KINDS = {"matmul", "matvec"}

HEADER = '''import dace
import numpy as np

N = dace.symbol("N")
M = {M}


def body(N, X, Y, Q, u, v, F, G, w, s, {outs}):
{lines}


@dace.program
def prog(X: dace.int64[N, M], Y: dace.int64[N, M], Q: dace.int64[N, M], u: dace.int64[N], v: dace.int64[M],
         F: dace.float64[N, M], G: dace.float64[M, M], w: dace.float64[M], s: dace.int64, {typed}):
{lines}
'''


@st.composite
def kernels(draw, min_size=1, max_size=10):
    """A list of kernel source lines (one statement block each)."""
    n = draw(st.integers(min_size, max_size))
    out = []
    for k in range(n):
        kind = draw(st.sampled_from(sorted(KINDS)))
        shape, tpl = KINDS[kind]
        params = dict(k=k, op=draw(st.sampled_from(["+", "-", "*"])), a=draw(st.integers(0, 1)),
                      b=draw(st.integers(0, 2)), c=draw(st.integers(0, 3)),
                      red=draw(st.sampled_from(["sum", "max", "min"])))
        if kind.startswith("rows"):
            params["b"] = min(params["b"], 1)
        out.append((kind, shape, tpl.format(**params)))
    return out


def source(ks) -> str:
    outs = ", ".join(f"o{k}" for k in range(len(ks)))
    typed = ", ".join(f"o{k}: dace.{'float64' if kind in FLOAT_KINDS else 'int64'}{shape}"
                      for k, (kind, shape, _) in enumerate(ks))
    lines = "\n".join("    " + line for _, _, line in ks)
    return HEADER.format(M=M, outs=outs, typed=typed, lines=lines)


def load(src: str, name: str):
    """Imports generated source from a file (DaCe parses a program from its source file)."""
    folder = tempfile.mkdtemp(prefix="dp_prop_")
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inputs(ks, n: int, seed: int):
    rng = np.random.default_rng(seed)
    d = dict(X=rng.integers(-9, 10, (n, M)), Y=rng.integers(-9, 10, (n, M)), Q=rng.integers(-2, 3, (n, M)),
             u=rng.integers(-9, 10, n), v=rng.integers(-9, 10, M),
             F=rng.integers(-5, 6, (n, M)).astype(np.float64), G=rng.integers(-5, 6, (M, M)).astype(np.float64),
             w=rng.integers(-5, 6, M).astype(np.float64), s=int(rng.integers(-3, 4)))
    for k, (kind, shape, _) in enumerate(ks):
        dims = eval(shape, {"N": n, "M": M})  # noqa: S307 - our own shape strings
        d[f"o{k}"] = np.zeros(dims, np.float64 if kind in FLOAT_KINDS else np.int64)
    return d


def reference(mod, args):
    a = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    mod.body(a["u"].shape[0], **a)
    return {k: v for k, v in a.items() if k.startswith("o")}


def draw_schedule(data, maps):
    """A random schedule for a program's maps (``dp.maps``), drawn from ``data`` (hypothesis' ``st.data()``)."""
    principals = {}
    for m in maps:
        k = id(m.kernel)
        if k not in principals or len(m.params) > len(principals[k].params):
            principals[k] = m
    return data.draw(schedule_strategy(maps, list(principals.values())), label="schedule")


def schedule_strategy(maps, kernels_of):
    """A strategy for a random valid-looking schedule: per kernel, nothing or a grid on its principal map
    (the map with the most parameters; the others' grids are derived) that splits one or two dimensions."""

    @st.composite
    def draw_schedule(draw):
        out = {}
        for principal in kernels_of:
            m = principal
            choice = draw(st.integers(0, 3))
            if choice == 0:
                continue
            grid = [1] * len(m.params)
            dims = list(range(len(m.params)))
            d = draw(st.sampled_from(dims))
            grid[d] = draw(st.sampled_from([2, 3, 4]))
            if choice == 3 and len(dims) > 1 and grid[d] == 2:
                e = draw(st.sampled_from([x for x in dims if x != d]))
                grid[e] = 2
            ok = all(not isinstance(ext, int) or g <= ext for g, ext in zip(grid, m.shape))
            if ok:
                out[m.name] = tuple(grid)
        return out

    return draw_schedule()
