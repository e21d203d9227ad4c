"""Per-call time on a GPU, as users compare: our program with device arrays and with NumPy arrays, on 1, 2
and 4 ranks sharing one GPU, beside CuPy, JAX, PyTorch and NumPy (needs a CUDA GPU).

The four workloads of the GPU issue (``benchmarks/_gpu_workloads.py``: a row softmax, a float64 matmul, an
MLP, a Jacobi time loop written as in NumPy) are lowered with ``device="gpu"``, ``io="distributed"`` and
their rows split over the ranks, built in parallel (one process per build), then each runs in one
``mpiexec -n P`` job (``_gpu_worker.py``): every rank loads the library once (``dp.load``; launch, build
and load are printed beside, not counted), passes its tiles as PyTorch CUDA tensors (``device``) or as
NumPy arrays (``numpy``), the first call's results are compared with PyTorch's float64 results, then calls
are timed (all ranks start together, a call ends when every rank has its results). Ranks that share the
GPU do so through a private MPS daemon, as under ``dp.run`` (``runtime/mps.py``; ``DACE_PARTITION_MPS=0``
measures them time-sharing it instead); each row says which (``mps``).

The peers run in a separate process under the GPU machine's own Python (``_gpu_peers.py``: NumPy 2, CuPy,
JAX; DaCe 1.0.2 needs NumPy 1); their JSON is merged here with ``--peers``.

    python benchmarks/gpu.py --peers peers.json            # on a GPU machine
    python benchmarks/gpu.py --small --emulated            # rehearsal without a GPU: small sizes, the GPU
                                                           # data flow run on the host

Results: ``benchmarks/results/gpu_calls_<card>.json`` (``--out`` to choose).
"""
import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def _gpu_name():
    if os.environ.get("DACE_PARTITION_NO_GPU"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def build_one(name, ranks, small, emulated):
    """Lowers and builds one workload (run in its own process); prints one JSON line."""
    import dace_partition as dp
    from _gpu_workloads import lowered
    from dace_partition.runtime import emulation
    t0 = time.perf_counter()
    with emulation.host_kernels() if emulated else contextlib.nullcontext():  # warp reductions are CUDA code
        sdfg = lowered(name, ranks, small)
    lower_s = time.perf_counter() - t0
    report = dp.report(sdfg)
    copies = report.residency.lines() if report.residency is not None else []
    if emulated:
        emulation.on_host(sdfg)
    t0 = time.perf_counter()
    folder = dp.runtime.launch.build(sdfg)
    print(json.dumps({"folder": folder, "lower_s": lower_s, "build_s": time.perf_counter() - t0,
                      "blas": getattr(report, "blas", None), "residency": copies}))


def _builds(cases, args):
    def one(case):
        name, ranks = case
        cmd = [sys.executable, __file__, "--build-one", name, str(ranks)] + (["--small"] if args.small else []) + \
            (["--emulated"] if args.emulated else [])
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.build_timeout)
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
        if res.returncode or not lines:
            return case, {"build_error": (res.stderr or res.stdout)[-1500:]}
        out = json.loads(lines[-1])
        out["build_wall_s"] = time.perf_counter() - t0
        return case, out

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return dict(pool.map(one, cases))


def _run(case, built, args, env):
    name, ranks = case
    out = Path(args.scratch) / f"row_{name}_{ranks}.json"
    out.unlink(missing_ok=True)
    cmd = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "mpi4py", str(HERE / "_gpu_worker.py"), built["folder"], name,
           "small" if args.small else "full", str(out), str(args.seconds)] + (["emulated"] if args.emulated else [])
    from dace_partition.runtime import mps
    sharing = mps.decide_here(not args.emulated, ranks, local_launch=True)  # as dp.run decides
    t0 = time.perf_counter()
    try:
        with mps.private_daemon(sharing) as mps_env:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout, env={**env, **mps_env})
    except subprocess.TimeoutExpired:
        return {"workload": name, "ranks": ranks, "error": f"timed out after {args.run_timeout} s"}
    wall = time.perf_counter() - t0
    if res.returncode or not out.exists():
        return {"workload": name, "ranks": ranks, "error": (res.stderr + res.stdout)[-2000:]}
    row = json.loads(out.read_text())
    row["job_wall_s"] = wall
    row["mps"] = bool(mps_env)  # the ranks shared the GPU through a private MPS daemon
    return row


def _ms(x):
    return f"{x * 1e3:.3f}" if isinstance(x, (int, float)) else "-"


def _table(rows, peers):
    lines = ["| workload | ranks | ours, device arrays (best / median ms) | ours, NumPy in/out | correct |"
             " CuPy device | CuPy NumPy io | JAX device | JAX NumPy io | PyTorch device | NumPy 1 core |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = peers.get(r["workload"], {}) if r.get("ranks") == 1 else {}

        def peer(k):
            return _ms(p[k]["best_s"]) if k in p else "-"
        ok = "error" not in r and r.get("device_correct") and r.get("numpy_correct") and \
                r.get("device_again_correct", True) and r.get("numpy_again_correct", True)
        lines.append(f"| {r['workload']} | {r['ranks']} | {_ms(r.get('device_best_s'))} / "
                     f"{_ms(r.get('device_median_s'))} | {_ms(r.get('numpy_best_s'))} | {'yes' if ok else 'NO'} | "
                     f"{peer('cupy_device')} | {peer('cupy_numpy_io')} | {peer('jax_device')} | "
                     f"{peer('jax_numpy_io')} | {peer('torch_device')} | {peer('numpy_1_core')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-one", nargs=2, metavar=("WORKLOAD", "RANKS"), help=argparse.SUPPRESS)
    ap.add_argument("--small", action="store_true", help="small sizes (a rehearsal)")
    ap.add_argument("--emulated", action="store_true", help="run the GPU data flow on the host (no GPU needed)")
    ap.add_argument("--only", default=None, help="comma-separated workloads")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed calls per variant stop after this")
    ap.add_argument("--jobs", type=int, default=12, help="parallel builds")
    ap.add_argument("--build-timeout", type=int, default=400)
    ap.add_argument("--run-timeout", type=int, default=150)
    ap.add_argument("--build-only", default=None, metavar="FILE", help="build, write the build folders to FILE")
    ap.add_argument("--built", default=None, metavar="FILE", help="run the builds that --build-only wrote")
    ap.add_argument("--merge-only", action="store_true", help="only merge --peers into --out and print the table")
    ap.add_argument("--peers", default=None, help="JSON written by _gpu_peers.py, merged into the result")
    ap.add_argument("--scratch", default="/tmp")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.build_one:
        return build_one(args.build_one[0], int(args.build_one[1]), args.small, args.emulated)

    if args.merge_only:
        result = json.loads(Path(args.out).read_text())
        data = json.loads(Path(args.peers).read_text())
        result["peers"] = {r["workload"]: r for r in data["rows"]}
        result["peers_info"] = data["info"]
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(_table(result["rows"], result["peers"]))
        return 0
    gpu = _gpu_name()
    if gpu is None and not args.emulated and not args.build_only:
        print("no CUDA GPU (nvidia-smi lists none): nothing was run, no results written; --emulated rehearses")
        return 0
    from _gpu_workloads import WORKLOADS
    import dace_partition as dp
    names = args.only.split(",") if args.only else list(WORKLOADS)
    cases = [(n, int(p)) for n in names for p in args.ranks.split(",")]
    if args.built:
        saved = json.loads(Path(args.built).read_text())
        built, builds_s = {(c["workload"], c["ranks"]): c for c in saved["builds"]}, saved["builds_s"]
        cases = [c for c in cases if c in built]
    else:
        t0 = time.perf_counter()
        built = _builds(cases, args)
        builds_s = time.perf_counter() - t0
        print(f"built {len(cases)} programs in {builds_s:.0f} s ({args.jobs} at a time)", flush=True)
    if args.build_only:
        Path(args.build_only).write_text(json.dumps({"builds_s": builds_s, "builds": [
            dict(b, workload=c[0], ranks=c[1]) for c, b in built.items()]}, indent=1))
        return 0
    env = dp.runtime.launch.mpi_environment()
    rows = []
    for case in cases:
        b = built[case]
        if "build_error" in b:
            rows.append({"workload": case[0], "ranks": case[1], "error": "build: " + b["build_error"]})
        else:
            row = _run(case, b, args, env)
            row.update({k: v for k, v in b.items() if k not in ("folder", "workload", "ranks")})
            rows.append(row)
        r = rows[-1]
        print(f"{case[0]:8s} {case[1]} ranks: device {_ms(r.get('device_best_s'))} ms, numpy "
              f"{_ms(r.get('numpy_best_s'))} ms, correct {r.get('device_correct')}/{r.get('numpy_correct')}"
              + (f"  ERROR {r['error'][-600:]}" if "error" in r else "")
              + (f"  {r.get('device_errors') or ''}{r.get('numpy_errors') or ''}"), flush=True)
    peers, peers_info = {}, None
    if args.peers and os.path.exists(args.peers):
        data = json.loads(Path(args.peers).read_text())
        peers = {r["workload"]: r for r in data["rows"]}
        peers_info = data["info"]
    result = {"date": datetime.now(timezone.utc).isoformat(), "host": platform.node(), "gpu": gpu,
              "emulated": args.emulated, "small": args.small, "builds_s": builds_s,
              # how the Jacobi's halos moved: packed on the device (default) or staged; MPI's answer to them
              "gpu_comm": os.environ.get("DACE_PARTITION_GPU_COMM", "packed"),
              "cuda_aware_mpi": dp.mpi_info().cuda_aware,
              "note": "per call inside one job, seconds: best and median of repeated calls after a checked first "
                      "call; ranks share the one GPU; peers timed in a separate process in the same session",
              "rows": rows, "peers": peers, "peers_info": peers_info}
    tag = "emulated" if args.emulated else (gpu or "gpu").split()[-1].lower().replace(" ", "_")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"gpu_calls_{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(_table(rows, peers))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
