"""Device arrays in and out of GPU-lowered programs whose GPU data flow is emulated on the host (argv: the
build folders of jacobi2d_time with io="distributed" and of softmax with root io, both lowered with
device="gpu" and then given host storage: dace_partition.runtime.emulation.on_host).

The "device arrays" here expose only ``__cuda_array_interface__`` (no ``__array_interface__``), as CuPy's
do; their memory is host memory, which the emulated program reads as its GPU memory. Checked: results
equal NumPy's; an io="distributed" tile given on the device is updated in place (the program's device twin
is the caller's array: no copy back); a root-io result comes back as a device array; NumPy in still gives
NumPy out with the same program; a wrong dtype or shape is refused in words on every rank.
Prints 'OK' at the end (rank 0)."""
import os
import sys

import numpy as np
from mpi4py import MPI

import dace_partition as dp
from dace_partition.runtime.device_arrays import DeviceArray, HostBackedDeviceArray

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conformance.programs import CASES  # noqa: E402
from _checks import expect, refused  # noqa: E402  (this folder: the script's own)

comm = MPI.COMM_WORLD
rank = comm.rank


# io="distributed" (N = 12): each rank's tiles on the device, updated in place
jac = CASES["jacobi2d_time"]
data = jac.inputs(np.random.default_rng(3))
expected = jac.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in data.items()})
prog = dp.load(sys.argv[1], comm)
syms = {"T": data["T"]}  # N is 12, a constant of the build
tiles = {k: HostBackedDeviceArray(prog.layouts[k].scatter(data[k], rank)) for k in ("A", "B")}
before = {k: t.host.ctypes.data for k, t in tiles.items()}
expect(prog(**tiles, **syms) is None, "jacobi2d_time returns nothing")
expect(all(tiles[k].host.ctypes.data == before[k] for k in tiles), "a tile was replaced")
for name in ("A", "B"):
    got = comm.gather(tiles[name].host, root=0)
    if rank == 0:
        np.testing.assert_allclose(prog.layouts[name].gather(got), expected[name], rtol=1e-12,
                                   err_msg=f"{name}, device tiles")
host_tiles = {k: prog.layouts[k].scatter(data[k], rank) for k in ("A", "B")}  # NumPy in, same program
prog(**host_tiles, **syms)
for name in ("A", "B"):
    got = comm.gather(host_tiles[name], root=0)
    if rank == 0:
        np.testing.assert_allclose(prog.layouts[name].gather(got), expected[name], rtol=1e-12,
                                   err_msg=f"{name}, NumPy tiles after device tiles")
wrong = HostBackedDeviceArray(tiles["A"].host.astype(np.float32))
refused(lambda: prog(A=wrong, B=tiles["B"], **syms), ["'A'", "float32", "float64"])

# root io: rank 0's whole array on the device; the result comes back on the device
sm = CASES["softmax"]
data = sm.inputs(np.random.default_rng(4))
expected = sm.reference(dict(data))
prog = dp.load(sys.argv[2], comm)
sizes = {k: v for k, v in data.items() if not isinstance(v, np.ndarray)}
out = prog(x=HostBackedDeviceArray(data["x"]), **sizes) if rank == 0 else prog()
if rank == 0:
    expect(isinstance(out, DeviceArray) and not isinstance(out, np.ndarray), f"device in gave {type(out).__name__} out")
    np.testing.assert_allclose(out.get(), expected, rtol=1e-12, err_msg="softmax, device array in")
out2 = prog(x=data["x"], **sizes) if rank == 0 else prog()
if rank == 0:
    expect(isinstance(out2, np.ndarray), f"NumPy in gave {type(out2).__name__} out")
    np.testing.assert_allclose(out2, expected, rtol=1e-12, err_msg="softmax, NumPy in after device in")
    expect(out.ptr != out2.ctypes.data, "two calls share a result")
short = HostBackedDeviceArray(data["x"][:-1])
refused(lambda: prog(x=short, **sizes) if rank == 0 else prog(), ["'x'", "shape"])
if rank == 0:
    print("OK")
