"""Moves between buffers in GPU memory: the halo exchange and the redistribution of final values, packed,
and the allreduce of partial results.

MPI must never get a derived datatype on device memory (most MPIs read such a buffer from the host, or
not at all), and staging a whole tile through the host to send a face of it moves the tile across PCIe
twice. So the halo and redistribution solvers here send the same pieces as their host counterparts
(``halo``, and ``blocks``'s grid-to-grid ``redistribute``), each packed into a contiguous buffer by
pitched copies on the device and sent as plain elements (``runtime/include/dace_partition_device_moves.h``).
The packed buffers are device memory, handed to MPI as device pointers, where the MPI library says at run
time that it is CUDA-aware, else pinned host memory: packing is then the device -> host copy and only the
pieces cross PCIe. An
allreduce's buffer is contiguous already: MPI gets it where it is CUDA-aware, else a pinned copy of it.

None is tried by the lowering: the GPU lowering (``passes/gpu.py``, ``device_moves``) switches a
communication state to them once every buffer it touches lives in GPU memory. Their costs are their host
counterparts' bytes; only the calls differ.
"""
from dataclasses import replace
from typing import Optional

import dace.library

from ..ir import Cost, Move, MoveKind
from ..runtime.environment import DacePartitionMPI
from .allreduce import AllreduceSolver
from .blocks import BlockSolver
from .halo import HaloSolver


@dace.library.environment
class DacePartitionPacked(DacePartitionMPI):
    """The MPI build settings plus the packed moves' header, and ``dlsym`` (for ``MPIX_Query_cuda_support``)."""
    headers = ["mpi.h", "dace_partition_runtime.h", "dace_partition_device_moves.h"]
    cmake_libraries = DacePartitionMPI.cmake_libraries + ["${CMAKE_DL_LIBS}"]
    init_code = ""


#: Where the packing copies run: pitched device copies in a CUDA build, memcpy where the GPU lowering's
#: data flow runs on the host (``runtime/emulation.py`` gives its buffers host storage).
DEVICE_COPIER, HOST_COPIER = "dace_partition_cuda::DeviceCopy", "dace_partition::HostCopy"

_PACKED = "packed pieces: device pointers where MPI is CUDA-aware, else pinned host buffers"


def _copier(desc) -> str:
    return DEVICE_COPIER if desc.storage == dace.dtypes.StorageType.GPU_Global else HOST_COPIER


class PackedHaloSolver(HaloSolver):
    """The halo exchange between buffers in GPU memory: the halo solver's faces, packed."""
    name = "halo_packed"
    environments = [DacePartitionPacked]

    def cost(self, move: Move) -> Cost:
        return replace(super().cost(move), calls=(f"MPI_Isend/MPI_Irecv(grid neighbours, {_PACKED})", ))

    def _function(self, dst_desc) -> str:
        return f"halo_exchange_packed<{dst_desc.dtype.ctype}, {_copier(dst_desc)}>"


class PackedBlockSolver(BlockSolver):
    """A grid-to-grid redistribution of final values between buffers in GPU memory: the block solver's
    pieces (replicas send once, from the lowest rank), packed, one message per peer that has a piece."""
    name = "blocks_packed"
    environments = [DacePartitionPacked]
    kinds = frozenset({MoveKind.REDISTRIBUTE})

    def refuse(self, move: Move) -> Optional[str]:
        why = super().refuse(move)
        if why:
            return why
        if move.src.partial:
            return "partial results are combined where they arrive, which the packed exchange does not do"
        return None

    def calls(self, move: Move):
        return (f"MPI_Isend/MPI_Irecv(peers with a piece, {_PACKED})", )

    def _redistribute(self, move: Move, dst_desc):
        return f"redistribute_packed<{dst_desc.dtype.ctype}, {_copier(dst_desc)}>", ""


class DeviceAllreduceSolver(AllreduceSolver):
    """Partial results in GPU memory combined into the same blocks: the allreduce solver's one
    ``MPI_Allreduce``, on the device buffers where MPI is CUDA-aware, else through one pinned host buffer."""
    name = "allreduce_device"
    environments = [DacePartitionPacked]

    def calls(self, move: Move):
        return tuple(c[:-1] + ", device buffers where MPI is CUDA-aware, else one pinned host buffer)"
                     for c in super().calls(move))

    def _function(self, dst_desc) -> str:
        return f"allreduce_device<{dst_desc.dtype.ctype}, {_copier(dst_desc)}>"
