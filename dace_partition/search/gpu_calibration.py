"""What ``dace_partition.calibrate(device="gpu")`` measures, in a one-rank MPI job on this machine's GPU.

Run as ``mpiexec -n 1 python -m mpi4py -m dace_partition.search.gpu_calibration``; prints one JSON line.
Two programs are lowered with ``device="gpu"`` and built as any lowered program is, then called with
arrays already in GPU memory (allocated through the program's own CUDA runtime) and with NumPy arrays:

- ``y = 2 x + y`` (float32) on 2^10 elements, once per call and ``steps`` times per call: the cost of a
  kernel (``launch``: its launch and DaCe's synchronization after its state, the difference per step)
  and of the call around it (``call``: the runtime's argument handling and DaCe's dispatch, paid once per
  call however many kernels it runs);
- the same on 2^25 elements (384 MiB moved): GPU memory bytes/s (``stream``), from device arrays; and
  host <-> GPU bytes/s (``pcie``), from the time NumPy arrays add (x and y copied in, y copied out: the
  caller's pageable memory, so a lower bound of the pinned staging MPI uses);
- a float64 GEMM of 4096^2 on cuBLAS (``blas_flops``; skipped, keeping the model's, without cuBLAS).

Each is the best of repeated calls after a first one, whose result is checked (``correct``).
"""
import json
import sys
import time

import numpy as np


def _best(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _program(prog, name):
    import dace_partition as dp
    sdfg = prog.to_sdfg()
    sdfg.name = name
    dp.lower(sdfg, {}, device="gpu")  # no map split: rank 0's GPU runs it
    return dp.compile(sdfg)


def measure(big: int = 1 << 25, small: int = 1 << 10, gemm: int = 4096, steps: int = 33) -> dict:
    from ..runtime.device_arrays import DeviceArray
    from .calibration_programs import gpu_axpy, gpu_axpy_steps, gpu_gemm
    if steps < 2:
        raise ValueError(f"steps={steps}: a kernel's cost is the difference per step between 1 and {steps} steps")

    axpy = _program(gpu_axpy, "dace_partition_calibrate_gpu_axpy")
    mem = axpy.device.memory

    def on_gpu(a):
        d = DeviceArray(mem, a.shape, a.dtype)
        mem.copy(d.ptr, a.ctypes.data, a.nbytes)
        return d

    rng = np.random.default_rng(0)
    hx, hy = (rng.random(big, dtype=np.float32) for _ in range(2))
    sx, sy = hx[:small].copy(), hy[:small].copy()
    dx, dy, dsx, dsy = on_gpu(hx), on_gpu(hy), on_gpu(sx), on_gpu(sy)
    axpy(x=dsx, y=dsy, N=small)
    correct = bool(np.allclose(dsy.get(), 2 * sx + sy, rtol=1e-6))
    once = _best(lambda: axpy(x=dsx, y=dsy, N=small), 200)
    looped = _program(gpu_axpy_steps, "dace_partition_calibrate_gpu_axpy_steps")
    before = dsy.get()
    looped(x=dsx, y=dsy, N=small, T=steps)
    correct = correct and bool(np.allclose(dsy.get(), 2 * steps * sx + before, rtol=1e-5))
    many = _best(lambda: looped(x=dsx, y=dsy, N=small, T=steps), 50)
    few = _best(lambda: looped(x=dsx, y=dsy, N=small, T=1), 50)
    launch = max((many - few) / (steps - 1), 1e-7)
    call = max(once - launch, 0.0)
    device = _best(lambda: axpy(x=dx, y=dy, N=big), 20)
    host = _best(lambda: axpy(x=hx, y=hy, N=big), 10)
    out = dict(launch=launch, call=call, stream=3 * 4 * big / max(device - once, 1e-9),
               pcie=3 * 4 * big / max(host - device, 1e-9), axpy_device_s=device, axpy_numpy_s=host,
               axpy_small_s=once, steps_s=many, step_s=few, steps=steps, correct=correct)
    from ..runtime.cuda_build import cublas_available
    if not gemm or not cublas_available():  # DaCe's pure GEMM maps are not what a contraction costs
        return out
    mm = _program(gpu_gemm, "dace_partition_calibrate_gpu_gemm")
    a = rng.random((gemm, gemm))
    da, db = on_gpu(a), on_gpu(a.T.copy())
    res = mm(A=da, B=db, N=gemm)
    got = res.get() if hasattr(res, "get") else np.asarray(res)
    out["correct"] = correct and bool(np.allclose(got[:2], a[:2] @ a.T, rtol=1e-10))
    t = _best(lambda: mm(A=da, B=db, N=gemm), 5)
    out.update(blas_flops=2 * gemm ** 3 / max(t - once, 1e-9), gemm_s=t)
    return out


if __name__ == "__main__":
    result = measure()
    print(json.dumps(result))
    sys.stdout.flush()
