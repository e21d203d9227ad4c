"""One variant of one workload of ``vs_peers.py`` in this process (or MPI job): warm-up call, checked
against NumPy, then timed calls. Prints one JSON line (rank 0): best time, check, peak RSS per rank, and
what the measurement ran under: each call's wall time and the share of it the process (every rank) was
on a core (CPU time / wall time: well below 1 when other processes took the core), the load average, and
the NumPy / BLAS / OpenMP configuration of every process (``threadpoolctl``).

    python _peers_worker.py WORKLOAD VARIANT DATA_DIR [BUILD_FOLDER] --reps N --scale S
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MPI_VARIANTS = ("ours_root", "ours_dist", "mpi4py_root", "mpi4py_dist")


def _load(data, names, whole=True):
    return {k: np.load(os.path.join(data, f"{k}.npy"), mmap_mode=None if whole else "r") for k in names}


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def runtime_config(extra=None):
    """What this process computes with: NumPy's version and SIMD paths, each native thread pool that
    threadpoolctl finds (BLAS, OpenMP: library, version, threads), the variables that set threads, the CPUs
    it may run on. Called after the first call, so that libraries the call loaded (MKL) are listed."""
    from threadpoolctl import threadpool_info
    try:
        from numpy.core._multiarray_umath import __cpu_features__ as feats
    except ImportError:  # NumPy 2
        from numpy._core._multiarray_umath import __cpu_features__ as feats
    libs = [{"api": d.get("internal_api"), "version": d.get("version"), "threads": d.get("num_threads"),
             "layer": d.get("threading_layer"), "file": os.path.basename(d.get("filepath") or "")}
            for d in threadpool_info()]
    libs.sort(key=lambda d: (str(d["api"]), str(d["file"])))
    env = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                      "MKL_THREADING_LAYER", "XLA_FLAGS", "LD_PRELOAD") if k in os.environ}
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    out = {"numpy": np.__version__, "simd": [f for f in ("AVX2", "FMA3", "AVX512F", "AVX512_SKX") if feats.get(f)],
           "libs": libs, "env": env, "cpus": cpus}
    out.update(extra or {})
    return out


class Clock:
    """Wall and CPU time of one call (CPU time of this process: all its threads)."""

    def __enter__(self):
        self.c0, self.t0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0


def _check(wl, result, after, ref):
    got = wl.outputs(result, after) if wl.outputs else result
    got = np.asarray(got)
    if got.shape != ref.shape:
        return f"shape {got.shape} != {ref.shape}"
    err = float(np.max(np.abs(got - ref) / (np.abs(ref) + 1.0)))
    return "ok" if err <= wl.rtol else f"max relative error {err:.2e} > {wl.rtol:g}"


def run_mpi(wl, variant, data, folder, reps, names):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    ref = np.load(os.path.join(data, "__ref.npy")) if comm.rank == 0 else None
    if variant == "ours_root":
        import dace_partition as dp
        prog = dp.load(folder, comm)
        fresh = (lambda: {k: v.copy() for k, v in _load(data, names).items()}) if comm.rank == 0 else (lambda: {})
        first_inputs = fresh()
        call = lambda a: prog(**a)  # noqa: E731
        timed_inputs = fresh()
        join = lambda res: res  # noqa: E731
    elif variant == "ours_dist":
        import dace_partition as dp
        prog = dp.load(folder, comm)
        lays = prog.layouts
        whole = _load(data, names, whole=False)

        def fresh():
            return {k: (lays[k].scatter(v, comm.rank) if k in lays else np.array(v)) for k, v in whole.items()}

        first_inputs, timed_inputs = fresh(), fresh()
        call = lambda a: prog(**a)  # noqa: E731
        joined = {}

        def join(res):
            # Arguments written in place (a stencil's A and B): their tiles, joined on rank 0.
            for k in sorted(lays):
                if k != "__return" and k in first_inputs:
                    parts = comm.gather(first_inputs[k], root=0)
                    if comm.rank == 0:
                        joined[k] = lays[k].gather(parts)
            if res is None:
                return None
            tiles = comm.gather(np.asarray(res), root=0)
            return lays["__return"].gather(tiles) if comm.rank == 0 and "__return" in lays else \
                (tiles[0] if comm.rank == 0 else None)
    elif variant == "mpi4py_root":
        fresh = (lambda: {k: v.copy() for k, v in _load(data, names).items()}) if comm.rank == 0 else (lambda: None)
        first_inputs, timed_inputs = fresh(), fresh()
        call = lambda a: wl.mpi_root(comm, a)  # noqa: E731
        join = lambda res: res  # noqa: E731
    else:  # mpi4py_dist
        whole = _load(data, names, whole=False)
        first_inputs, timed_inputs = wl.mpi_dist_setup(comm, whole), wl.mpi_dist_setup(comm, whole)
        del whole
        state = {}

        def call(t):
            state["t"] = t
            return wl.mpi_dist(comm, t)

        join = lambda res: wl.mpi_dist_join(comm, state["t"], res)  # noqa: E731
    # warm-up, checked
    result = call(first_inputs)
    whole_result = join(result)
    status = None
    if comm.rank == 0:
        after = first_inputs if variant == "ours_root" else (joined or None) if variant == "ours_dist" else None
        status = _check(wl, whole_result, after, ref)
    config = comm.gather(runtime_config(), root=0)
    calls = []
    load0 = os.getloadavg()[0]
    for _ in range(reps):
        comm.Barrier()
        with Clock() as c:
            call(timed_inputs)
        # the call's time is the slowest rank's; its CPU share the least any rank had
        calls.append((comm.allreduce(c.wall, op=MPI.MAX), comm.allreduce(c.cpu / max(c.wall, 1e-9), op=MPI.MIN)))
    rss = comm.gather(_rss_mb(), root=0)
    if comm.rank == 0:
        print("RESULT " + json.dumps(_result(calls, status, rss, config, load0)), flush=True)


def _result(calls, status, rss, config, load0):
    best = min(range(len(calls)), key=lambda i: calls[i][0])
    return {"time": calls[best][0], "check": status, "rss_mb": rss, "calls_ms": [round(w * 1e3, 3) for w, _ in calls],
            "cpu_share": round(calls[best][1], 3), "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "config": config}


def run_single(wl, variant, data, folder, reps, names, ranks):
    ref = np.load(os.path.join(data, "__ref.npy"))
    inputs = _load(data, names)
    if variant == "numpy":
        call = lambda a: wl.numpy(**a)  # noqa: E731
        prep = lambda: {k: v.copy() for k, v in inputs.items()}  # noqa: E731
        sync = lambda r: r  # noqa: E731
    elif variant == "dace_1":
        from dace.sdfg.utils import load_precompiled_sdfg
        compiled = load_precompiled_sdfg(folder)
        call = lambda a: compiled(**a)  # noqa: E731
        prep = lambda: {k: v.copy() for k, v in inputs.items()}  # noqa: E731
        sync = lambda r: r  # noqa: E731
    else:  # jax
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        devices = jax.devices()[:ranks]
        if len(devices) != ranks:
            raise SystemExit(f"JAX has {len(jax.devices())} devices, {ranks} asked")
        mesh = Mesh(np.array(devices), ("x", ))
        fn, specs = wl.jax(jnp, mesh, PartitionSpec, NamedSharding)
        order = list(inputs)
        jitted = jax.jit(lambda *a: fn(**dict(zip(order, a))))
        prep = lambda: [jax.device_put(inputs[k], NamedSharding(mesh, specs[k])) for k in order]  # noqa: E731
        call = lambda a: jitted(*a)  # noqa: E731
        sync = lambda r: np.asarray(r.block_until_ready())  # noqa: E731
    first = prep()
    result = sync(call(first))
    status = _check(wl, result, first, ref)
    timed = prep()
    extra = {}
    if variant == "jax":
        import jax
        extra = {"jax": jax.__version__, "devices": len(jax.devices())}
    config = [runtime_config(extra)]
    calls = []
    load0 = os.getloadavg()[0]
    for _ in range(reps):
        with Clock() as c:
            r = call(timed)
            if variant == "jax":
                r.block_until_ready()
        # JAX's devices are threads of this process: its CPU share can exceed 1
        calls.append((c.wall, c.cpu / max(c.wall, 1e-9)))
    print("RESULT " + json.dumps(_result(calls, status, [_rss_mb()], config, load0)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("variant")
    ap.add_argument("data")
    ap.add_argument("folder", nargs="?", default="")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    import _peers_workloads as W
    wl = next(f(args.scale) for f in W.ALL if f.__name__ == args.workload)
    names = [f[:-4] for f in sorted(os.listdir(args.data)) if f.endswith(".npy") and not f.startswith("__")]
    if args.variant in MPI_VARIANTS:
        run_mpi(wl, args.variant, args.data, args.folder, args.reps, names)
    else:
        run_single(wl, args.variant, args.data, args.folder, args.reps, names, args.ranks)


if __name__ == "__main__":
    main()
