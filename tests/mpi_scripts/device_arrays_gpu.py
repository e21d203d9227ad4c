"""Device arrays of every kind a caller may hold, in and out of programs built for and run on a real GPU
(argv: the build folders of jacobi2d_time, io="distributed", N = 12, and of softmax, root io, both lowered
with device="gpu"; tests/mpi/test_gpu.py::test_device_arrays_of_every_kind_run_on_the_gpu).

Kinds: PyTorch CUDA tensors; CuPy arrays (where CuPy imports beside this NumPy); an object that exposes
only ``__cuda_array_interface__``; an object that exposes only DLPack (``__dlpack__``,
``__dlpack_device__``). For each: every rank's io="distributed" tiles are updated in place on the device;
a root-io result comes back on the device, of the caller's kind (CuPy in, CuPy out; PyTorch in, PyTorch
out; DLPack-only, taken through PyTorch, PyTorch out; interface-only, a DeviceArray); results equal NumPy's.
The host buffer the runtime keeps for a root-io input is page-locked. An input written on the caller's
stream just before the call is what the program reads. A device
array of the wrong dtype, shape or strides is refused in words on every rank. Prints
'ran: <kinds>' and 'OK' (rank 0)."""
import os
import sys

import numpy as np
import torch
from mpi4py import MPI

import dace_partition as dp
from dace_partition.runtime.device_arrays import DeviceArray, page_locked

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "..", "benchmarks")]
from conformance.programs import CASES  # noqa: E402
from _gpu_workloads import numpy_of, torch_of  # noqa: E402  (PyTorch built for NumPy 2 beside NumPy 1)
from _checks import expect, refused  # noqa: E402  (this folder: the script's own)

comm = MPI.COMM_WORLD
rank = comm.rank


class InterfaceOnly:
    """A device array known only by ``__cuda_array_interface__`` (as Numba's, or a user's own)."""

    def __init__(self, tensor):
        self.tensor = tensor

    @property
    def __cuda_array_interface__(self):
        return self.tensor.__cuda_array_interface__


class DLPackOnly:
    """A device array known only by DLPack."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, *args, **kwargs):
        return self.tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def on_gpu(a):
    return torch_of(torch, a).cuda()


# kind -> (to the device, back to NumPy, the result's type for a root-io call)
KINDS = {
    "torch": (on_gpu, numpy_of, torch.Tensor),
    "__cuda_array_interface__": (lambda a: InterfaceOnly(on_gpu(a)), lambda x: numpy_of(x.tensor), DeviceArray),
    "dlpack": (lambda a: DLPackOnly(on_gpu(a)), lambda x: numpy_of(x.tensor), torch.Tensor),
}
try:
    import cupy
    KINDS["cupy"] = (cupy.asarray, cupy.asnumpy, cupy.ndarray)
except Exception as e:  # CuPy built for NumPy 2 does not import beside DaCe 1.0.2's NumPy 1
    if rank == 0:
        print(f"cupy not importable: {type(e).__name__}: {e}")


def to_numpy(result):
    if isinstance(result, DeviceArray):
        return result.get()
    return numpy_of(result) if isinstance(result, torch.Tensor) else cupy.asnumpy(result)


jac = CASES["jacobi2d_time"]
jac_data = jac.inputs(np.random.default_rng(3))
jac_expected = jac.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in jac_data.items()})
jac_prog = dp.load(sys.argv[1], comm)
sm = CASES["softmax"]
sm_data = sm.inputs(np.random.default_rng(4))
sm_expected = sm.reference(dict(sm_data))
sm_prog = dp.load(sys.argv[2], comm)
sizes = {k: v for k, v in sm_data.items() if not isinstance(v, np.ndarray)}

for kind, (put, get, result_type) in KINDS.items():
    # io="distributed": each rank's tiles, updated in place on the device
    tiles = {k: put(jac_prog.layouts[k].scatter(jac_data[k], rank)) for k in ("A", "B")}
    expect(jac_prog(**tiles, T=jac_data["T"]) is None, "jacobi2d_time returns nothing")
    for name in ("A", "B"):
        got = comm.gather(get(tiles[name]), root=0)
        if rank == 0:
            np.testing.assert_allclose(jac_prog.layouts[name].gather(got), jac_expected[name], rtol=1e-12,
                                       err_msg=f"{name}, {kind} tiles")
    # root io: rank 0's whole array on the device, the result on the device
    out = sm_prog(x=put(sm_data["x"]), **sizes) if rank == 0 else sm_prog()
    if rank == 0:
        expect(isinstance(out, result_type), f"{kind} in gave {type(out).__name__} out, not {result_type.__name__}")
        np.testing.assert_allclose(to_numpy(out), sm_expected, rtol=1e-12, err_msg=f"softmax, {kind} in")

# The host buffer the runtime keeps for x (only rank 0's scatter reads it) is page-locked
if rank == 0:
    hosts = [b for b in sm_prog.device._kept.values() if isinstance(b, np.ndarray)]
    expect(hosts and all(page_locked(b) for b in hosts), "the runtime keeps no page-locked host buffer for x")

# The caller's work on an input may still be queued: the program's kernels (non-blocking streams) wait for
# the stream the array names (PyTorch's: the legacy default stream). Here the input is written after a
# long sleep on that stream, and the program is called at once.
if hasattr(torch.cuda, "_sleep"):
    tiles = {k: on_gpu(np.zeros_like(jac_prog.layouts[k].scatter(jac_data[k], rank))) for k in ("A", "B")}
    torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU clock cycles
    for k in ("A", "B"):
        tiles[k].copy_(on_gpu(jac_prog.layouts[k].scatter(jac_data[k], rank)))
    jac_prog(**tiles, T=jac_data["T"])
    for name in ("A", "B"):
        got = comm.gather(numpy_of(tiles[name]), root=0)
        if rank == 0:
            np.testing.assert_allclose(jac_prog.layouts[name].gather(got), jac_expected[name], rtol=1e-12,
                                       err_msg=f"{name}, written on the caller's stream just before the call")
    x = on_gpu(np.zeros_like(sm_data["x"]))
    torch.cuda._sleep(200_000_000)
    x.copy_(on_gpu(sm_data["x"]))
    out = sm_prog(x=x, **sizes) if rank == 0 else sm_prog()
    if rank == 0:
        np.testing.assert_allclose(to_numpy(out), sm_expected, rtol=1e-12,
                                   err_msg="softmax, x written on the caller's stream just before the call")

# NumPy in still gives NumPy out, with the same program
out = sm_prog(x=sm_data["x"], **sizes) if rank == 0 else sm_prog()
if rank == 0:
    expect(isinstance(out, np.ndarray), f"NumPy in gave {type(out).__name__} out")
    np.testing.assert_allclose(out, sm_expected, rtol=1e-12, err_msg="softmax, NumPy in after device arrays")

# wrong dtype, shape and strides, refused in words on every rank before any kernel runs
x = sm_data["x"]
wide = on_gpu(np.zeros((x.shape[0], 2 * x.shape[1])))
for bad, words in ((on_gpu(x.astype(np.float32)), ["'x'", "float32", "float64"]),
                   (on_gpu(x[:-1]), ["'x'", "shape"]),
                   (wide[:, ::2], ["'x'", "strides"])):
    refused(lambda: sm_prog(x=bad, **sizes) if rank == 0 else sm_prog(), words)
tiles = {k: on_gpu(jac_prog.layouts[k].scatter(jac_data[k], rank)) for k in ("A", "B")}
refused(lambda: jac_prog(A=tiles["A"].float(), B=tiles["B"], T=jac_data["T"]), ["'A'", "float32", "float64"])
torch.cuda.synchronize()
if rank == 0:
    print("ran:", " ".join(KINDS))
    print("OK")
