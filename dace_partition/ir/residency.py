"""Where a GPU-lowered program keeps its rank-local buffers, and which copies cross PCIe.

A :class:`Residency` is decided once, in the plan (``plan.residency.plan_gpu_placement``), before the SDFG
changes, and then applied (``passes.gpu.offload``); the report prints it. A *resident* buffer lives in GPU memory for the whole program, allocated
once when it starts; kernels hand it to each other on the device. MPI works on host memory, so every
communication state that touches a resident buffer goes through its *pinned* host twin: one copy from
the device before the state (where MPI reads it, or writes only part of it) and one back after it
(where MPI writes it). Those copies, and nothing else, cross PCIe for resident buffers in the graph. A halo
exchange, a redistribution or an allreduce between GPU buffers (``device_moves``) works on them in place:
its pieces are packed on the device and cross PCIe inside the exchange, through pinned buffers of the
pieces, unless MPI takes device pointers.
"""
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Dict, Tuple


#: The program's symbol that says where the caller's arrays are: 0 on the host (the device twins are buffers
#: the runtime keeps, filled when the call starts and copied back when it ends), 1 on the GPU (the runtime
#: passes the caller's device arrays as the twins: no copy).
ARGS_ON_GPU = "__dp_args_on_gpu"


class Memory(str, Enum):
    """Where a buffer lives."""
    HOST = "host"  # pageable host memory (DaCe's default)
    GPU = "GPU"  # device memory, resident across kernels and calls
    PINNED = "pinned host"  # page-locked host memory: the staging area MPI reads and writes

    def __str__(self):
        return self.value


class CopyDirection(str, Enum):
    """The direction of one copy across PCIe."""
    TO_HOST = "GPU -> host"
    TO_DEVICE = "host -> GPU"

    def __str__(self):
        return self.value


@dataclass(frozen=True)
class StagingCopy:
    """One copy across PCIe between a resident array and its host side (a pinned twin, or the caller's
    argument), of the whole array or of a halo's rows, in a state of its own next to the communication
    state it serves, or where the call starts or ends."""
    buffer: str  # the array in GPU memory
    host: str  # its host side
    direction: CopyDirection
    state: str  # the state that copies
    why: str  # "MPI reads it", "MPI writes part of it", "MPI wrote it", "the call starts", "the call ends"
    part: str = "whole"  # or the rows of a halo exchange ("rows 1..1")

    def __str__(self):
        return f"{self.buffer} -> {self.host}" if self.direction == CopyDirection.TO_HOST else \
            f"{self.host} -> {self.buffer}"

    def line(self):
        part = "" if self.part == "whole" else f", {self.part}"
        return f"{self}: {self.direction} in '{self.state}' ({self.why}{part})"


@dataclass(frozen=True)
class Residency:
    """The GPU lowering's placement decision: which arrays live in GPU memory and how they reach MPI and
    the caller."""
    resident: Tuple[str, ...] = ()  # transients in GPU memory (rank-local buffers, rank 0's intermediates)
    arguments: Tuple[str, ...] = ()  # the caller's arrays the GPU works on through a device twin
    rank0: Tuple[str, ...] = ()  # of those, the arrays only rank 0 holds (their copies run there alone)
    device_twins: Tuple[Tuple[str, str], ...] = ()  # (argument, its device twin)
    pinned: Tuple[Tuple[str, str], ...] = ()  # (resident transient, its pinned host twin for MPI)
    copies: Tuple[StagingCopy, ...] = ()  # every copy across PCIe of a resident array
    host: Tuple[Tuple[str, str], ...] = ()  # (array a GPU state uses but that stays on the host, why)
    kernel_copies: Tuple[str, ...] = field(default=())  # arrays still copied in and out around a kernel
    gpu_writes: Tuple[str, ...] = ()  # resident arrays a GPU state writes (only their host side can be stale)
    device_copies: Tuple[str, ...] = ()  # states of rank 0's array copies that run on the GPU (copy kernels)
    device_moves: Tuple[str, ...] = ()  # states of halos, redistributions, allreduces on the GPU buffers

    @property
    def twins(self) -> Dict[str, str]:
        """Device array -> its host side, for every resident array that MPI or the caller sees."""
        return {**dict(self.pinned), **{t: a for a, t in self.device_twins}}

    def without(self, names) -> "Residency":
        """The decision less the transients in ``names`` (moved into one kernel's GPU wrapper: they are that
        kernel's own, in GPU memory there, and no longer arrays of the program)."""
        def keep(xs):
            return tuple(x for x in xs if x not in names)
        return replace(self, resident=keep(self.resident), rank0=keep(self.rank0), gpu_writes=keep(self.gpu_writes))

    def where(self, name: str) -> Memory:
        if name in self.resident or name in dict(self.device_twins).values():
            return Memory.GPU
        if name in dict(self.pinned).values():
            return Memory.PINNED
        return Memory.HOST

    def lines(self):
        out = [f"GPU residency: {len(self.resident)} transient(s) and the device twins of {len(self.device_twins)} "
               f"argument(s) stay in GPU memory between kernels; MPI goes through {len(self.pinned)} pinned "
               "host twin(s)"]
        if self.copies:
            out.append(f"copies across PCIe ({len(self.copies)}; none between two kernels):")
            out += [f"  {c.line()}" for c in self.copies]
        else:
            out.append("copies across PCIe: none")
        for name, why in self.host:
            out.append(f"on the host: {name} ({why})")
        if self.kernel_copies:
            out.append("copied host -> GPU -> host around each kernel that uses them: " + ", ".join(self.kernel_copies))
        if self.device_moves:
            out.append("moves on GPU memory (halos and redistributions packed there; to MPI as device pointers "
                       "where it is CUDA-aware, else through pinned host buffers of what moves): " +
                       ", ".join(f"'{s}'" for s in self.device_moves))
        if self.device_copies:
            out.append("array copies run on the GPU, between resident buffers: " +
                       ", ".join(f"'{s}'" for s in self.device_copies))
        return out

    def __str__(self):
        return "\n".join(self.lines())
