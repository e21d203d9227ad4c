"""Loads a program built for the GPU on every rank (argv: its build folder, then the device each rank
should select: "none" where the machine has no GPU, else "local"). Every rank selects its GPU when it
loads the program, in the same collective, so a collective of the caller's right after the load does not
meet the selection's MPI_Comm_split_type on another rank. The host buffers the runtime keeps for device
arguments are page-locked on a GPU and pageable without one (the allocation fails and falls back). Prints
'selected: <devices>' and 'OK' (rank 0); tests/mpi/test_gpu.py::test_a_gpu_build_selects_each_ranks_device_when_loaded."""
import sys

import numpy as np
from mpi4py import MPI

import dace_partition as dp
from dace_partition.runtime.device_arrays import CudaMemory, page_locked

comm = MPI.COMM_WORLD
folder, want = sys.argv[1], sys.argv[2]
prog = dp.runtime.program.load(folder)
assert isinstance(prog.device.memory, CudaMemory), type(prog.device.memory)
assert comm.allreduce(1) == comm.size  # the caller's own collective, right after the load
devices = comm.allgather(prog.device.select_device())
node = comm.Split_type(MPI.COMM_TYPE_SHARED)
local = node.allgather(comm.rank)
if want == "none":
    assert devices == [-1] * comm.size, devices
else:
    count = max(devices) + 1
    assert all(devices[r] == i % count for i, r in enumerate(local)), (devices, local)
host = prog.device.memory.host_empty((3, 5), np.float32)
host[...] = 1.5
assert host.shape == (3, 5) and host.dtype == np.float32 and float(host.sum()) == 22.5
assert page_locked(host) == (want != "none"), (want, type(host.base))
del host  # freed through the program's export on a GPU
if comm.rank == 0:
    print("selected:", devices)
    print("OK")
