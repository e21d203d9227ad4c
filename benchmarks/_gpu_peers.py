"""The peers of ``benchmarks/gpu.py``, per call, in one process: CuPy and JAX with data on the GPU and with
NumPy in and out, PyTorch with data on the GPU, NumPy on one host core. Runs under the GPU machine's own
Python (NumPy 2, CuPy, JAX, PyTorch), separately from our program's (DaCe 1.0.2 needs NumPy 1).

Each call is timed from the host (the call, then a device synchronization), as our program's calls are:
the best and the median of repeated calls after two warm-up calls. Every result is compared with PyTorch's
float64 result; a peer's error is recorded beside its time (JAX's default float32 matrix products use TF32).

    python benchmarks/_gpu_peers.py --out peers.json [--small] [--seconds 1.5] [--only softmax]
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with our ranks' runs
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402


def timed(call, sync, seconds, max_calls=50):
    for _ in range(2):
        out = call()
        sync()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < seconds and len(times) < max_calls):
        t = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t)
    return out, {"best_s": min(times), "median_s": statistics.median(times), "calls": len(times)}


def jacobi_numpy_style(xp, A, B, T, at=False):
    if at:  # JAX: functional updates in a fori_loop (a Python loop would unroll 200 sweeps into the trace)
        import jax

        def step(_, ab):
            A, B = ab
            B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
            A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
            return A, B
        return jax.lax.fori_loop(0, T, step, (A, B))
    for _ in range(T):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return A, B


def functions(xp, name, sizes, jax=False):
    """The workload written in ``xp`` (NumPy, CuPy, jax.numpy, or PyTorch through its NumPy-like calls)."""
    torch = xp.__name__ == "torch"
    if name == "softmax" and torch:
        def f(x):
            e = xp.exp(x - xp.amax(x, dim=-1, keepdim=True))
            return e / xp.sum(e, dim=-1, keepdim=True)
    elif name == "softmax":
        def f(x):
            e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
            return e / xp.sum(e, axis=-1, keepdims=True)
    elif name == "matmul":
        def f(A, B):
            return A @ B
    elif name == "mlp":
        def f(x, W1, W2):
            h = x @ W1
            return (xp.relu(h) if torch else xp.maximum(h, 0.0)) @ W2
    else:
        T = sizes["T"]

        def f(A, B):
            return jacobi_numpy_style(xp, A, B, T, at=jax)
    return f


def main():
    from _gpu_workloads import WORKLOADS
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--only", default=None)
    ap.add_argument("--numpy", default="softmax,matmul,mlp", help="workloads NumPy runs on one core")
    args = ap.parse_args()
    import torch
    try:
        import cupy as cp
    except ImportError as e:
        cp = None
        print(f"no CuPy: {e}")
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
    except ImportError as e:
        jax = None
        print(f"no JAX: {e}")

    rows = []
    for name, w in WORKLOADS.items():
        if args.only and name not in args.only.split(",") or w.is_variant:
            continue
        sizes = w.small if args.small else w.sizes
        data = w.inputs(np.random.default_rng(0), sizes)
        names = list(data)
        t64 = {k: torch.from_numpy(v).cuda().double() for k, v in data.items()}
        ref = functions(torch, name, sizes)(*[t64[k].clone() for k in names])
        ref = [r.cpu().numpy() for r in (ref if isinstance(ref, tuple) else (ref, ))]
        row = {"workload": name, "sizes": sizes}

        def record(peer, out, t):
            outs = out if isinstance(out, tuple) else (out, )
            outs = [np.asarray(o.get() if hasattr(o, "get") else (o.cpu().numpy() if hasattr(o, "cpu") else o))
                    for o in outs]
            err = max(float(np.max(np.abs(o.astype(np.float64) - r) / (np.abs(r) + 1e-6))) for o, r in zip(outs, ref))
            row[peer] = dict(t, max_rel_err=err)
            print(f"  {name:8s} {peer:22s} best {t['best_s'] * 1e3:9.3f} ms  median {t['median_s'] * 1e3:9.3f} ms"
                  f"  err {err:.2g}", flush=True)

        # CuPy, data on the GPU (the Jacobi updates its arrays: fresh copies are not timed, repeated sweeps are)
        def cupy_peers():
            cfun = functions(cp, name, sizes)
            dev = {k: cp.asarray(v) for k, v in data.items()}
            sync = cp.cuda.Device().synchronize
            out, t = timed(lambda: cfun(*[dev[k] for k in names]), sync, args.seconds)
            if name == "jacobi":  # timed calls updated the arrays in place: check one call on fresh copies
                out = cfun(*[cp.asarray(data[k]) for k in names])
            record("cupy_device", out, t)
            out, t = timed(lambda: cp.asnumpy(cfun(*[cp.asarray(data[k]) for k in names])) if name != "jacobi" else
                           tuple(cp.asnumpy(o) for o in cfun(*[cp.asarray(data[k]) for k in names])), sync, args.seconds)
            record("cupy_numpy_io", out, t)
            cp.get_default_memory_pool().free_all_blocks()

        # JAX (jit), data on the GPU and NumPy in/out; float32 matrix products at JAX's default precision
        def jax_peers():
            jfun = jax.jit(functions(jnp, name, sizes, jax=True))
            jdev = [jax.device_put(data[k]) for k in names]
            out, t = timed(lambda: jax.block_until_ready(jfun(*jdev)), lambda: None, args.seconds)
            record("jax_device", out, t)
            out, t = timed(lambda: tuple(np.asarray(o) for o in jfun(*[data[k] for k in names]))
                           if name == "jacobi" else np.asarray(jfun(*[data[k] for k in names])), lambda: None, args.seconds)
            record("jax_numpy_io", out, t)
            if name in ("matmul", "mlp"):
                with jax.default_matmul_precision("highest"):
                    jfun_hi = jax.jit(functions(jnp, name, sizes, jax=True))
                    timed(lambda: jax.block_until_ready(jfun_hi(*jdev)), lambda: None, 0)
                    out, t = timed(lambda: jax.block_until_ready(jfun_hi(*jdev)), lambda: None, args.seconds)
                record("jax_device_fp32", out, t)

        # PyTorch, data on the GPU (its default: no TF32 in matrix products)
        def torch_peers():
            tfun = functions(torch, name, sizes)
            tdev = [torch.from_numpy(data[k]).cuda() for k in names]
            out, t = timed(lambda: tfun(*tdev), torch.cuda.synchronize, args.seconds)
            if name == "jacobi":
                out = tfun(*[torch.from_numpy(data[k]).cuda() for k in names])
            record("torch_device", out, t)
            torch.cuda.empty_cache()

        def numpy_peers():
            if name in args.numpy.split(","):  # NumPy on one core (OMP/OPENBLAS_NUM_THREADS=1 set by the caller)
                nfun = functions(np, name, sizes)
                out, t = timed(lambda: nfun(*[data[k].copy() for k in names]), lambda: None, 0, max_calls=3)
                record("numpy_1_core", out, t)

        for section in (cupy_peers, jax_peers, torch_peers, numpy_peers):
            try:
                section()
            except Exception as e:  # noqa: BLE001 - one peer failing must not lose the others
                row[section.__name__ + "_error"] = f"{type(e).__name__}: {e}"
                print(f"  {name:8s} {section.__name__}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        rows.append(row)
    info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cupy": cp and cp.__version__, "jax": jax and jax.__version__, "numpy": np.__version__,
            "numpy_threads": os.environ.get("OPENBLAS_NUM_THREADS", "(not set)")}
    with open(args.out, "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
