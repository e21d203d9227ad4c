"""One rank of ``benchmarks/gpu.py``'s measurement of our program: started under ``mpiexec -n P``.

argv: build folder, workload name, "small" or "full", JSON output path, seconds per variant, and
"emulated" when the GPU data flow runs on the host (a rehearsal without a GPU: the "device arrays" are
host memory behind ``__cuda_array_interface__``).

Per variant (``device``: each rank's tiles are PyTorch CUDA tensors, the results come back as tensors;
``numpy``: the same tiles as NumPy arrays), the first call's results are compared element by element with
PyTorch's float64 result, then calls are timed (all ranks start together; a call ends when every rank's
results are ready): the best and the median.
"""
import json
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dace_partition as dp  # noqa: E402
from _gpu_workloads import WORKLOADS, numpy_of, reference, torch_of  # noqa: E402
from dace_partition.runtime.device_arrays import HostBackedDeviceArray  # noqa: E402

folder, name, size, out_path, seconds = sys.argv[1:6]
emulated = len(sys.argv) > 6 and sys.argv[6] == "emulated"
comm = MPI.COMM_WORLD
rank = comm.rank
w = WORKLOADS[name]
sizes = w.small if size == "small" else w.sizes
import torch  # noqa: E402

dev = "cpu" if emulated else "cuda"


def to_device(a):
    return HostBackedDeviceArray(a) if emulated else torch_of(torch, a).to(dev)


def to_host(x):
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, HostBackedDeviceArray):
        return x.host
    if hasattr(x, "get"):  # DeviceArray
        return x.get()
    return numpy_of(x)


def sync():
    if not emulated:
        torch.cuda.synchronize()


t0 = time.perf_counter()
prog = dp.load(folder, comm)
load_s = time.perf_counter() - t0
lays = prog.layouts
syms = {"T": sizes["T"]} if "T" in sizes else {}
data = w.inputs(np.random.default_rng(0), sizes)  # the same whole inputs on every rank
ref = {}
if rank == 0:
    ref = {k: numpy_of(v) for k, v in reference(name, data, sizes, torch,
                                                             "cpu" if emulated else "cuda").items()}
tiles = {k: (lays[k].scatter(v, rank) if k in lays else v) for k, v in data.items()}  # one rank: whole arrays
row = {"workload": name, "ranks": comm.size, "sizes": sizes, "load_s": load_s, "emulated": emulated}


def results(args, ret):
    """This rank's result tiles: {'__return': ..., in-place arguments ...} as NumPy."""
    out = {k: to_host(args[k]) for k in w.inplace}
    if ret is not None:
        out["__return"] = to_host(ret)
    return out


def check(got, variant):
    errors = []
    for k in sorted(ref) if rank == 0 else sorted(got):
        parts = comm.gather(got.get(k), root=0)
        if rank != 0:
            continue
        whole = lays[k].gather(parts) if k in lays else parts[0]
        want = ref[k]
        if whole.shape != want.shape:
            errors.append(f"{k}: shape {whole.shape} != {want.shape}")
            continue
        err = float(np.max(np.abs(whole.astype(np.float64) - want) / (np.abs(want) + 1e-6)))
        if not np.all(np.isfinite(whole)) or not np.allclose(whole, want, rtol=w.rtol, atol=w.rtol * 1e-2):
            errors.append(f"{k}: max relative error {err:.3g} (rtol {w.rtol})")
        row[f"{variant}_max_rel_err_{k}"] = err
    errors = comm.bcast(errors, root=0)
    return errors


def profile(call, calls=3):
    """Where one call's time goes, from PyTorch's profiler (CUPTI sees every kernel and copy of the
    process, ours included): per GPU kernel, copy or runtime call, its count and microseconds per call."""
    try:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                call()
                sync()
        out = []
        for e in prof.key_averages():
            dev = getattr(e, "device_time_total", None)
            if dev is None:
                dev = getattr(e, "cuda_time_total", 0)
            cpu = getattr(e, "self_cpu_time_total", 0)
            if dev or e.key.startswith("cu"):  # kernels and copies, CUDA runtime and driver calls
                out.append({"name": e.key[:90], "count_per_call": e.count / calls, "device_us_per_call": dev / calls,
                            "cpu_us_per_call": cpu / calls})
        out.sort(key=lambda r: -(r["device_us_per_call"] or r["cpu_us_per_call"]))
        return out[:25]
    except Exception as e:  # noqa: BLE001 - a profile is extra information
        return [{"error": f"{type(e).__name__}: {e}"}]


for variant in ("device", "numpy"):
    args = {k: (to_device(v.copy()) if variant == "device" else v.copy()) for k, v in tiles.items()}
    try:
        ret = prog(**args, **syms)
        sync()
        got = results(args, ret)
        if variant == "device" and ret is not None:
            row["device_result_type"] = type(ret).__module__ + "." + type(ret).__name__
        errors = check(got, variant)
    except Exception as e:  # noqa: BLE001 - reported in the JSON, every rank ends
        errors = [f"rank {rank}: {type(e).__name__}: {e}"]
        errors = [e for es in comm.allgather(errors) for e in es]
    row[f"{variant}_correct"] = not errors
    if errors:
        row[f"{variant}_errors"] = errors[:4]
        continue
    times = []
    budget = float(seconds)
    start = time.perf_counter()
    while True:
        comm.Barrier()
        t = time.perf_counter()
        prog(**args, **syms)
        sync()
        comm.Barrier()
        times.append(time.perf_counter() - t)
        go = len(times) < 3 or (time.perf_counter() - start < budget and len(times) < 50)
        if not comm.allreduce(go, op=MPI.LAND):
            break
    row[f"{variant}_best_s"] = min(times)
    row[f"{variant}_median_s"] = statistics.median(times)
    row[f"{variant}_calls"] = len(times)
    if not w.inplace:  # results again after the timed calls (their buffers reused from the runtime's pool)
        again = check(results(args, prog(**args, **syms)), f"{variant}_again")
        row[f"{variant}_again_correct"] = not again
        if again:
            row[f"{variant}_again_errors"] = again[:4]
    if variant == "device" and comm.size == 1 and not emulated and os.environ.get("GPU_PROFILE", "1") == "1":
        row["device_profile"] = profile(lambda: prog(**args, **syms))


if rank == 0:
    with open(out_path, "w") as f:
        json.dump(row, f, indent=1)
    print(json.dumps({k: v for k, v in row.items() if not k.startswith("sizes")}))
