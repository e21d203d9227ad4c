"""GPU vs CPU lowering through dp.run: wall times of the CUDA issue's programs under mpiexec, launch included
(needs a CUDA GPU; the per-call times users compare are benchmarks/gpu.py).

For each program (broadcast add, row reduction, matmul with its four schedules, fused softmax) and each
rank count (2 and 4 ranks sharing the node's GPUs; 8 for the (2,2,2) matmul), the script lowers the
program once with ``device="cpu"`` and once with ``device="gpu"``, builds both, checks the GPU result
against NumPy, and times ``dp.run`` (median of ``--repeat`` runs, including the mpiexec launch).
The results go to ``benchmarks/results/gpu_<host>.json``.

Without a GPU (``nvidia-smi -L`` lists none) it prints so and exits 0: a CUDA build must not be called
where there is no GPU.

    python benchmarks/gpu_dp_run.py                  # all programs
    python benchmarks/gpu_dp_run.py --repeat 5 --only matmul_2x2x2
    python benchmarks/gpu_dp_run.py --only gemm --n 2048   # only the cuBLAS comparison

The second part (``gemm_*`` rows) multiplies two float64 n x n matrices on 1, 2, 4 and 8 ranks three
ways: the CPU lowering (GEMMs on the CPU BLAS), the GPU lowering with DaCe's pure GEMM maps
(``DACE_PARTITION_BLAS=pure`` while lowering) and the GPU lowering on cuBLAS, next to NumPy in this
process.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _gpu_listed() -> bool:
    if os.environ.get("DACE_PARTITION_NO_GPU"):
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default=None, help="run only this case (e.g. matmul_2x2x2)")
    ap.add_argument("--out", default=None, help="JSON output file")
    ap.add_argument("--n", type=int, default=2048, help="matrix size of the cuBLAS comparison (gemm_* rows)")
    args = ap.parse_args()

    if not _gpu_listed():  # checked before importing DaCe: never call a CUDA build without a GPU
        print("no CUDA GPU available (nvidia-smi -L lists none): nothing was run, no results written")
        return 0
    from dace_partition.runtime import cuda_build
    if cuda_build.nvcc_path() is None:
        print("nvcc not found: the GPU lowering cannot be built, no results written")
        return 0

    import numpy as np
    import dace_partition as dp
    from test_gpu import CASES, _run_cases

    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()
    rng = np.random.default_rng(0)
    rows = []
    for name, ranks in _run_cases():
        if args.only and (name != args.only or args.only.startswith("gemm")):
            continue
        make, schedule, inputs, reference = CASES[name]
        data = inputs(rng)
        row = {"program": name, "ranks": ranks}
        for device in ("cpu", "gpu"):
            sdfg = make()
            sdfg.name = f"bench_{name}_{device}"
            dp.lower(sdfg, schedule(sdfg), device=device)
            t0 = time.perf_counter()
            dp.runtime.launch.build(sdfg)
            row[f"{device}_build_s"] = time.perf_counter() - t0
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = dp.run(sdfg, ranks, **data)
                times.append(time.perf_counter() - t0)
            row[f"{device}_run_s"] = statistics.median(times)
            row[f"{device}_correct"] = bool(np.allclose(out, reference(**data)))
        rows.append(row)
        print(f"{name:16s} {ranks} ranks: cpu {row['cpu_run_s']:.3f} s, gpu {row['gpu_run_s']:.3f} s, "
              f"correct cpu={row['cpu_correct']} gpu={row['gpu_correct']}")

    if cuda_build.cublas_available() and (not args.only or args.only.startswith("gemm")):
        rows += _gemm_rows(args, dp, np, rng)

    result = {
        "date": datetime.now(timezone.utc).isoformat(),
        "host": platform.node(),
        "gpus": gpus,
        "cuda_arch": cuda_build.cuda_arch(),
        "note": "wall time of dp.run (mpiexec launch + library load + run), median of repeats",
        "cublas": cuda_build.cublas_available(),
        "rows": rows,
    }
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"gpu_{platform.node()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0


def _gemm_rows(args, dp, np, rng):
    """n x n matmul on 1, 2, 4, 8 ranks: CPU BLAS, pure GPU maps and cuBLAS (see the module docstring)."""
    import programs
    a, b = rng.random((args.n, args.n)), rng.random((args.n, args.n))
    t = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ref = a @ b
        t.append(time.perf_counter() - t0)
    numpy_s = min(t)
    rows = []
    for grid in ((1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 2, 2)):
        ranks = max(2, grid[0] * grid[1] * grid[2]) if grid != (1, 1, 1) else 1
        tag = "x".join(map(str, grid))
        row = {"program": f"gemm_{args.n}_{tag}", "ranks": ranks, "numpy_1_process_s": numpy_s}
        for variant in ("cpu", "gpu_pure", "gpu_cublas"):
            sdfg = programs.matmul_n(args.n).to_sdfg()
            sdfg.name = f"bench_gemm_{tag}_{variant}"
            saved = os.environ.get("DACE_PARTITION_BLAS")
            if variant == "gpu_pure":
                os.environ["DACE_PARTITION_BLAS"] = "pure"
            try:
                dp.lower(sdfg, {"_MatMult_.gemm_map": grid}, device="cpu" if variant == "cpu" else "gpu")
            finally:
                if variant == "gpu_pure":
                    if saved is None:
                        os.environ.pop("DACE_PARTITION_BLAS", None)
                    else:
                        os.environ["DACE_PARTITION_BLAS"] = saved
            row[f"{variant}_blas"] = dp.report(sdfg).blas
            dp.runtime.launch.build(sdfg)
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = dp.run(sdfg, ranks, a=a, b=b)
                times.append(time.perf_counter() - t0)
            row[f"{variant}_run_s"] = min(times)
            row[f"{variant}_correct"] = bool(np.allclose(out, ref))
        rows.append(row)
        print(f"{row['program']:16s} {ranks} ranks: numpy {numpy_s:.3f} s, cpu {row['cpu_run_s']:.3f} s, gpu pure "
              f"{row['gpu_pure_run_s']:.3f} s, gpu cuBLAS {row['gpu_cublas_run_s']:.3f} s, correct "
              f"{row['cpu_correct']}/{row['gpu_pure_correct']}/{row['gpu_cublas_correct']}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
