"""The workloads of ``vs_peers.py``: each is one DaCe program with its schedule, and the same computation
written by hand for every peer (NumPy in one process, mpi4py + NumPy with root-held and with
distributed data, JAX with sharded arrays). Sizes are the issue's; ``--small`` divides them for a quick run.

Every peer computes in float64 (float32 for softmax) with the same inputs, and every result is checked
against the NumPy one.
"""
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


@dataclass
class Workload:
    name: str
    label: str
    program: Callable  # () -> dace program
    schedule: Callable  # (sdfg, ranks) -> schedule
    inputs: Callable  # (rng) -> {name: array}
    numpy: Callable  # (**inputs) -> result (the one-process peer and the reference)
    mpi_root: Callable  # (comm, inputs on rank 0 / None) -> result on rank 0
    mpi_dist_setup: Callable  # (comm, whole inputs) -> this rank's tiles (not timed)
    mpi_dist: Callable  # (comm, tiles) -> this rank's result tiles
    mpi_dist_join: Callable  # (comm, tiles, local result) -> whole result on rank 0 (not timed)
    jax: Callable  # (jnp, mesh, P, NamedSharding) -> (jitted fn, {name: PartitionSpec})
    rtol: float = 1e-10
    outputs: Optional[Callable] = None  # (result, inputs after the call) -> what is compared
    heavy: bool = False  # fewer timed calls per run
    reps: Optional[int] = None  # timed calls per run, when the workload sets its own (per-call overhead)
    prepare: Optional[Callable] = None  # (sdfg) -> None: what a DaCe user does before lowering (all DaCe variants)
    extra: Dict[str, object] = field(default_factory=dict)


def _rows(n, comm):
    q, m = divmod(n, comm.size)
    starts = [r * q + min(r, m) for r in range(comm.size + 1)]
    return starts[comm.rank], starts[comm.rank + 1], starts


def _scatter_rows(comm, a, n, shape_tail, dtype):
    lo, hi, starts = _rows(n, comm)
    out = np.empty((hi - lo, ) + shape_tail, dtype=dtype)
    per = int(np.prod(shape_tail)) if shape_tail else 1
    counts = [(starts[r + 1] - starts[r]) * per for r in range(comm.size)]
    displs = [starts[r] * per for r in range(comm.size)]
    comm.Scatterv([a, counts, displs, _mpi(dtype)] if comm.rank == 0 else None, out, root=0)
    return out


def _gather_rows(comm, local, n, shape_tail, dtype):
    _, _, starts = _rows(n, comm)
    per = int(np.prod(shape_tail)) if shape_tail else 1
    counts = [(starts[r + 1] - starts[r]) * per for r in range(comm.size)]
    displs = [starts[r] * per for r in range(comm.size)]
    out = np.empty((n, ) + shape_tail, dtype=dtype) if comm.rank == 0 else None
    comm.Gatherv(np.ascontiguousarray(local), [out, counts, displs, _mpi(dtype)] if comm.rank == 0 else None,
                 root=0)
    return out


def _mpi(dtype):
    from mpi4py import MPI
    return MPI.DOUBLE if np.dtype(dtype) == np.float64 else MPI.FLOAT


def _bcast(comm, a, shape, dtype):
    buf = a if comm.rank == 0 else np.empty(shape, dtype=dtype)
    comm.Bcast(buf, root=0)
    return buf


def _fuse_maps(sdfg):
    """DaCe's simplification and MapFusion, as a DaCe user runs them: an expression such as
    ``0.2 * (A[..] + A[..] + ...)`` becomes one map instead of a chain of maps with whole-array temporaries."""
    from dace.transformation.dataflow import MapFusion
    sdfg.simplify()
    sdfg.apply_transformations_repeated(MapFusion)


def _split_first(sdfg, ranks, n):
    """Every map whose first extent is ``n`` is split along it."""
    import dace_partition as dp
    return {m.name: (ranks, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if m.shape[0] == n}


# --------------------------------------------------------------------------------------------- axpy
def axpy(scale=1):
    import dace
    n = (1 << 24) // scale

    def program():
        @dace.program
        def axpy(x: dace.float64[n], y: dace.float64[n]):
            return 2.0 * x + y
        return axpy

    def mpi_root(comm, a):
        x = _scatter_rows(comm, a["x"] if a else None, n, (), np.float64)
        y = _scatter_rows(comm, a["y"] if a else None, n, (), np.float64)
        return _gather_rows(comm, 2.0 * x + y, n, (), np.float64)

    def setup(comm, a):
        lo, hi, _ = _rows(n, comm)
        return {"x": a["x"][lo:hi].copy(), "y": a["y"][lo:hi].copy()}

    def jax(jnp, mesh, P, S):
        return (lambda x, y: 2.0 * x + y), {"x": P("x"), "y": P("x")}

    return Workload("axpy", f"axpy 2^{24 - scale.bit_length() + 1} float64", program,
                    lambda sdfg, r: _split_first(sdfg, r, n),
                    lambda rng: {"x": rng.random(n), "y": rng.random(n)}, lambda x, y: 2.0 * x + y, mpi_root,
                    setup, lambda comm, t: 2.0 * t["x"] + t["y"],
                    lambda comm, t, out: _gather_rows(comm, out, n, (), np.float64), jax)


def overhead(scale=1):
    """Per-call overhead: ``2x + y`` on 8 elements, where a call is nothing but its fixed costs."""
    wl = axpy(1 << 21)
    wl.name, wl.label, wl.reps = "overhead", "per-call overhead: axpy on 8 float64", 300
    return wl


# ------------------------------------------------------------------------------------------ softmax
def softmax(scale=1):
    import dace
    n, m = 4096 // scale, 1024

    def program():
        @dace.program
        def softmax(x: dace.float32[n, m]):
            mx = np.max(x, axis=1)
            e = np.exp(x - mx[:, np.newaxis])
            s = np.sum(e, axis=1)
            return e / s[:, np.newaxis]
        return softmax

    def ref(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def mpi_root(comm, a):
        x = _scatter_rows(comm, a["x"] if a else None, n, (m, ), np.float32)
        return _gather_rows(comm, ref(x), n, (m, ), np.float32)

    def setup(comm, a):
        lo, hi, _ = _rows(n, comm)
        return {"x": a["x"][lo:hi].copy()}

    def jax(jnp, mesh, P, S):
        def f(x):
            e = jnp.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        return f, {"x": P("x", None)}

    return Workload("softmax", f"softmax rows, float32[{n},{m}]", program, lambda sdfg, r: _split_first(sdfg, r, n),
                    lambda rng: {"x": rng.standard_normal((n, m)).astype(np.float32)}, ref, mpi_root, setup,
                    lambda comm, t: ref(t["x"]), lambda comm, t, out: _gather_rows(comm, out, n, (m, ), np.float32),
                    jax, rtol=1e-5)


# ---------------------------------------------------------------------------- stencils (jacobi, heat3d)
def _stencil(name, label, program, n, tail, steps, step, jstep):
    """A two-array stencil in a time loop (``B = step(A); A = step(B)``) on ``n`` rows (planes) of shape
    ``tail``, split by rows over the ranks. ``step(x, lo, hi)`` is the update of rows ``lo..hi-1`` of
    ``x``'s interior (NumPy); ``jstep(a)`` the whole interior's update (JAX). The mpi4py peers keep one
    ghost row per side and exchange it with the neighbours before each half-sweep."""
    inner = (slice(1, -1), ) * len(tail)

    def ref(A, B):
        A, B = A.copy(), B.copy()
        for _ in range(steps):
            B[(slice(1, -1), ) + inner] = step(A, 1, n - 1)
            A[(slice(1, -1), ) + inner] = step(B, 1, n - 1)
        return np.stack([A, B])

    def halo_tiles(comm, A, B):
        """This rank's rows plus one ghost row on each side (clipped at the array's edges)."""
        lo, hi, _ = _rows(n, comm)
        glo, ghi = max(lo - 1, 0), min(hi + 1, n)
        return {"A": A[glo:ghi].copy(), "B": B[glo:ghi].copy(), "lo": lo, "hi": hi, "glo": glo}

    def sweep(comm, t):
        """Halo exchange with the neighbours, then the update of this rank's interior rows."""
        from mpi4py import MPI
        A, B, lo, hi, glo = t["A"], t["B"], t["lo"], t["hi"], t["glo"]
        up, down = comm.rank - 1, comm.rank + 1
        first, last = max(lo, 1) - glo, min(hi, n - 1) - glo  # rows this rank updates, local indices

        def exchange(X):
            reqs = []
            if up >= 0:
                reqs += [comm.Isend(X[lo - glo], up, 1), comm.Irecv(X[0], up, 2)]
            if down < comm.size:
                reqs += [comm.Isend(X[hi - 1 - glo], down, 2), comm.Irecv(X[-1], down, 1)]
            MPI.Request.Waitall(reqs)

        for _ in range(steps):
            exchange(A)
            B[(slice(first, last), ) + inner] = step(A, first, last)
            exchange(B)
            A[(slice(first, last), ) + inner] = step(B, first, last)
        return t

    def own(t, X):
        return X[t["lo"] - t["glo"]:t["hi"] - t["glo"]]

    def mpi_root(comm, a):
        A = _scatter_rows(comm, a["A"] if a else None, n, tail, np.float64)
        B = _scatter_rows(comm, a["B"] if a else None, n, tail, np.float64)
        lo, hi, _ = _rows(n, comm)
        glo, ghi = max(lo - 1, 0), min(hi + 1, n)
        t = {"A": np.empty((ghi - glo, ) + tail), "B": np.empty((ghi - glo, ) + tail), "lo": lo, "hi": hi, "glo": glo}
        t["A"][lo - glo:hi - glo], t["B"][lo - glo:hi - glo] = A, B
        sweep(comm, t)
        outA = _gather_rows(comm, own(t, t["A"]), n, tail, np.float64)
        outB = _gather_rows(comm, own(t, t["B"]), n, tail, np.float64)
        return np.stack([outA, outB]) if comm.rank == 0 else None

    def join(comm, t, out):
        a = _gather_rows(comm, own(t, t["A"]), n, tail, np.float64)
        b = _gather_rows(comm, own(t, t["B"]), n, tail, np.float64)
        return np.stack([a, b]) if comm.rank == 0 else None

    def jax(jnp, mesh, P, S):
        at = (slice(1, -1), ) + inner

        def f(A, B):
            for _ in range(steps):
                B = B.at[at].set(jstep(A))
                A = A.at[at].set(jstep(B))
            return jnp.stack([A, B])
        return f, {"A": P("x", *(None, ) * len(tail)), "B": P("x", *(None, ) * len(tail))}

    def inputs(rng):
        return {"A": rng.random((n, ) + tail), "B": rng.random((n, ) + tail)}

    return Workload(name, label, program, lambda sdfg, r: _split_first(sdfg, r, n - 2), inputs, ref, mpi_root,
                    lambda comm, a: halo_tiles(comm, a["A"], a["B"]), sweep, join, jax,
                    outputs=lambda result, after: result if result is not None else np.stack([after["A"], after["B"]]),
                    heavy=True, prepare=_fuse_maps)


def jacobi(scale=1):
    import dace
    n, steps = 4096 // scale, 10

    def program():
        @dace.program
        def jacobi(A: dace.float64[n, n], B: dace.float64[n, n]):
            for t in range(steps):
                B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
                A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
        return jacobi

    def step(x, lo, hi):
        return 0.2 * (x[lo:hi, 1:-1] + x[lo:hi, :-2] + x[lo:hi, 2:] + x[lo + 1:hi + 1, 1:-1] + x[lo - 1:hi - 1, 1:-1])

    def jstep(a):
        return 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1])

    return _stencil("jacobi", f"5-point Jacobi {n}^2, {steps} sweeps (map-fused)", program, n, (n, ), steps, step,
                    jstep)


def heat3d(scale=1):
    """The 7-point heat equation (NPBench's heat_3d) in a time loop; planes split over the ranks."""
    import dace
    n, steps = 256 // scale, 10

    def program():
        @dace.program
        def heat3d(A: dace.float64[n, n, n], B: dace.float64[n, n, n]):
            for t in range(steps):
                B[1:-1, 1:-1, 1:-1] = (0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1]) +
                                       0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1]) +
                                       0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2]) +
                                       A[1:-1, 1:-1, 1:-1])
                A[1:-1, 1:-1, 1:-1] = (0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1]) +
                                       0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1]) +
                                       0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2]) +
                                       B[1:-1, 1:-1, 1:-1])
        return heat3d

    def step(x, lo, hi):
        c = x[lo:hi, 1:-1, 1:-1]
        return (0.125 * (x[lo + 1:hi + 1, 1:-1, 1:-1] - 2.0 * c + x[lo - 1:hi - 1, 1:-1, 1:-1]) +
                0.125 * (x[lo:hi, 2:, 1:-1] - 2.0 * c + x[lo:hi, :-2, 1:-1]) +
                0.125 * (x[lo:hi, 1:-1, 2:] - 2.0 * c + x[lo:hi, 1:-1, :-2]) + c)

    return _stencil("heat3d", f"7-point heat 3-D {n}^3, {steps} sweeps (map-fused)", program, n, (n, n), steps,
                    step, lambda a: step(a, 1, a.shape[0] - 1))


# ------------------------------------------------------------------------------------------- matmul
def matmul(scale=1):
    import dace
    n = 1024 // scale

    def program():
        @dace.program
        def matmul(a: dace.float64[n, n], b: dace.float64[n, n]):
            return a @ b
        return matmul

    def mpi_root(comm, d):
        a = _scatter_rows(comm, d["a"] if d else None, n, (n, ), np.float64)
        b = _bcast(comm, d["b"] if d else None, (n, n), np.float64)
        return _gather_rows(comm, a @ b, n, (n, ), np.float64)

    def setup(comm, d):
        lo, hi, _ = _rows(n, comm)
        return {"a": d["a"][lo:hi].copy(), "b": d["b"].copy()}

    def jax(jnp, mesh, P, S):
        return (lambda a, b: a @ b), {"a": P("x", None), "b": P(None, None)}

    return Workload("matmul", f"matmul {n}^3 float64, rows split", program,
                    lambda sdfg, r: {"_MatMult_.gemm_map": (r, 1, 1)},
                    lambda rng: {"a": rng.random((n, n)), "b": rng.random((n, n))}, lambda a, b: a @ b, mpi_root,
                    setup, lambda comm, t: t["a"] @ t["b"],
                    lambda comm, t, out: _gather_rows(comm, out, n, (n, ), np.float64), jax)


# ---------------------------------------------------------------------------------------------- mlp
def mlp(scale=1):
    import dace
    n, h = 1024 // scale, 1024 // scale

    def program():
        @dace.program
        def mlp(x: dace.float64[n, h], w1: dace.float64[h, h], b1: dace.float64[h], w2: dace.float64[h, h],
                b2: dace.float64[h]):
            y = np.maximum(x @ w1 + b1, 0.0)
            return y @ w2 + b2
        return mlp

    def ref(x, w1, b1, w2, b2):
        return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2

    def mpi_root(comm, d):
        x = _scatter_rows(comm, d["x"] if d else None, n, (h, ), np.float64)
        w = {k: _bcast(comm, d[k] if d else None, s, np.float64)
             for k, s in (("w1", (h, h)), ("b1", (h, )), ("w2", (h, h)), ("b2", (h, )))}
        return _gather_rows(comm, ref(x, **w), n, (h, ), np.float64)

    def setup(comm, d):
        lo, hi, _ = _rows(n, comm)
        t = {k: d[k].copy() for k in ("w1", "b1", "w2", "b2")}
        t["x"] = d["x"][lo:hi].copy()
        return t

    def jax(jnp, mesh, P, S):
        return (lambda x, w1, b1, w2, b2: jnp.maximum(x @ w1 + b1, 0.0) @ w2 + b2), {
            "x": P("x", None), "w1": P(None, None), "b1": P(None), "w2": P(None, None), "b2": P(None)}

    def inputs(rng):
        return {"x": rng.random((n, h)), "w1": rng.random((h, h)) / h, "b1": rng.random(h),
                "w2": rng.random((h, h)) / h, "b2": rng.random(h)}

    return Workload("mlp", f"MLP forward, batch {n}, hidden {h}, data-parallel", program,
                    lambda sdfg, r: _split_first(sdfg, r, n), inputs, ref, mpi_root, setup,
                    lambda comm, t: ref(**t), lambda comm, t, out: _gather_rows(comm, out, n, (h, ), np.float64), jax)


# ---------------------------------------------------------------------------------------- attention
def attention(scale=1):
    from attention import head_parallel, make_mha
    B, S, E, H, D = 4, 128 // scale, 256 // scale, 8, 32 // scale

    def heads(x, wq, wk, wv, wo):
        """This rank's heads of the attention, summed over them (before the bias)."""
        q = np.einsum("bse,hed->bhsd", x, wq, optimize=True)
        k = np.einsum("bse,hed->bhsd", x, wk, optimize=True)
        v = np.einsum("bse,hed->bhsd", x, wv, optimize=True)
        s = q @ k.transpose(0, 1, 3, 2)
        e = np.exp((s - s.max(axis=3, keepdims=True)) / np.sqrt(D))
        a = (e / e.sum(axis=3, keepdims=True)) @ v
        return np.ascontiguousarray(np.einsum("bhsd,hde->bse", a, wo, optimize=True))

    def ref(x, wq, wk, wv, wo, bo):
        return heads(x, wq, wk, wv, wo) + bo

    def mpi_root(comm, d):
        x = _bcast(comm, d["x"] if d else None, (B, S, E), np.float64)
        bo = _bcast(comm, d["bo"] if d else None, (E, ), np.float64)
        w = {k: _scatter_rows(comm, d[k] if d else None, H, s, np.float64)
             for k, s in (("wq", (E, D)), ("wk", (E, D)), ("wv", (E, D)), ("wo", (D, E)))}
        part = heads(x, **w)
        out = np.empty_like(part) if comm.rank == 0 else None
        from mpi4py import MPI
        comm.Reduce(part, out, op=MPI.SUM, root=0)
        return out + bo if comm.rank == 0 else None

    def setup(comm, d):
        lo, hi, _ = _rows(H, comm)
        t = {k: d[k][lo:hi].copy() for k in ("wq", "wk", "wv", "wo")}
        t["x"], t["bo"] = d["x"].copy(), d["bo"].copy()
        return t

    def dist(comm, t):
        part = heads(t["x"], t["wq"], t["wk"], t["wv"], t["wo"])
        from mpi4py import MPI
        comm.Allreduce(MPI.IN_PLACE, part, op=MPI.SUM)
        return part + t["bo"]

    def jax(jnp, mesh, P, S):
        def f(x, wq, wk, wv, wo, bo):
            q = jnp.einsum("bse,hed->bhsd", x, wq)
            k = jnp.einsum("bse,hed->bhsd", x, wk)
            v = jnp.einsum("bse,hed->bhsd", x, wv)
            s = q @ k.transpose(0, 1, 3, 2)
            e = jnp.exp((s - s.max(axis=3, keepdims=True)) / np.sqrt(D))
            a = (e / e.sum(axis=3, keepdims=True)) @ v
            return jnp.einsum("bhsd,hde->bse", a, wo) + bo
        return f, {"x": P(None, None, None), "wq": P("x", None, None), "wk": P("x", None, None),
                   "wv": P("x", None, None), "wo": P("x", None, None), "bo": P(None)}

    def inputs(rng):
        return {"x": rng.standard_normal((B, S, E)), "wq": rng.standard_normal((H, E, D)) / 8,
                "wk": rng.standard_normal((H, E, D)) / 8, "wv": rng.standard_normal((H, E, D)),
                "wo": rng.standard_normal((H, D, E)), "bo": rng.standard_normal(E)}

    return Workload("attention", f"Megatron attention B{B} S{S} E{E} H{H} D{D}, heads split",
                    lambda: make_mha(B, S, E, H, D), lambda sdfg, r: head_parallel(sdfg, r, heads=H), inputs, ref,
                    mpi_root, setup, dist, lambda comm, t, out: out if comm.rank == 0 else None, jax, rtol=1e-9)


ALL = [overhead, axpy, softmax, jacobi, heat3d, matmul, mlp, attention]
