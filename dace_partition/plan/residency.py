"""Where each array of a GPU lowering lives, decided in the plan before anything is rewritten.

With ``device="gpu"`` the planned kernels run on the GPU, and so do the states of rank 0's code that hold a
kernel (a map, a library node, a nested SDFG: unscheduled maps, grids of one rank). An array lives in GPU
memory for the whole call (:class:`~dace_partition.ir.residency.Residency`) when only GPU code and MPI
touch it: MPI reaches it through a pinned host twin, so PCIe is crossed next to communication and where
the call starts and ends, never between two kernels. An array that host code (a state of scalar code) or
an interstate edge reads stays on the host, with the reason. A state of rank 0 that only copies arrays
runs on the GPU as a copy kernel where all its arrays can then stay there.

The decision is made on :class:`.model.PartitionModel`, the model of the partitioned program after the
round trips, loop carries and rank-local arguments are decided: every access of a buffer or array is at a
planned kernel (GPU), at a scatter or gather (MPI) or in a state of rank 0's code. ``OffloadToGpu``
(``passes/gpu.py``) carries it out.
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

import dace
from dace import nodes
from dace.sdfg import SDFG, SDFGState

from ..ir.residency import Residency
from ..solvers.node import DistributedMemlet
from .model import At, ModelAccess, PartitionModel


@dataclass(frozen=True)
class GpuPlacement:
    """The GPU part of a plan: where each array lives, and which states of rank 0's code run on the GPU
    (``kernels``: they hold a kernel; ``copies``: array copies that become copy kernels), in program order."""
    residency: Residency
    kernels: Tuple[SDFGState, ...]
    copies: Tuple[SDFGState, ...]


def has_kernel(state: SDFGState) -> bool:
    """Whether ``state`` holds parallel work (a map, a library node, a nested SDFG) at its top level."""
    scope = state.scope_dict()
    return any(scope[n] is None and isinstance(n, (nodes.MapEntry, nodes.LibraryNode, nodes.NestedSDFG))
               and not isinstance(n, DistributedMemlet) for n in state.nodes())


def is_copy_state(sdfg: SDFG, state: SDFGState) -> bool:
    """A state of copies that can run as copy kernels: array to array of the same rank (how DaCe writes
    ``y[:] = t`` after a kernel wrote ``t``), or of different ranks where the two subsets have the same
    extents but for ones (``f[:, d] = t``: a vector into a column; a reshape is not one, DaCe's
    ``CopyToMap`` cannot index it), or a scalar argument into a one-element array (``passes.prepare``
    stages scalars so)."""
    if state.number_of_edges() == 0 or not all(isinstance(n, nodes.AccessNode) for n in state.nodes()):
        return False
    for e in state.edges():
        src, dst = sdfg.arrays[e.src.data], sdfg.arrays[e.dst.data]
        if e.data.wcr is not None or e.data.data is None or type(dst) is not dace.data.Array:
            return False
        if type(src) is dace.data.Array:
            if len(src.shape) != len(dst.shape) and _squeezed(e.data.get_src_subset(e, state)) != \
                    _squeezed(e.data.get_dst_subset(e, state)):
                return False
        elif not (type(src) is dace.data.Scalar and dst.total_size == 1):
            return False
    return True


def _squeezed(subset) -> Optional[List[str]]:
    """The extents of a copy's subset other than 1 (``f[:, d] = t``: a vector into a column), or None."""
    if subset is None:
        return None
    return [str(x) for x in subset.size() if str(x) != "1"]


def plan_gpu_placement(sdfg: SDFG, model: PartitionModel) -> GpuPlacement:
    """The placement of the program that ``model`` describes: rank 0's states with a kernel run on the GPU;
    of its copy states, those whose arrays would all stay in GPU memory run there too (a copy state on the
    host keeps its arrays there, and they cross PCIe around every kernel that uses them: ``y[:] = a * x +
    y`` in a time loop, twice per sweep). Changes nothing."""
    root = [st for st in model.states if st not in model.kernel_states and st.number_of_nodes() > 0]
    kernels = [st for st in root if has_kernel(st)]
    on_gpu = set(kernels)
    by_name: Dict[str, List[ModelAccess]] = {}
    for a in model.every_access():
        by_name.setdefault(a.name, []).append(a)
    read_between = set()
    for e in sdfg.all_interstate_edges():
        read_between |= set(e.data.free_symbols) | set(e.data.read_symbols())
    used = {name for name, where in by_name.items() if any(_on_gpu(a, on_gpu) for a in where)}
    chosen = [st for st in root if st not in on_gpu and is_copy_state(sdfg, st) and _arrays(sdfg, st) & used]
    while True:
        res = _decide(sdfg, by_name, read_between, on_gpu | set(chosen))
        placed = set(res.resident) | set(res.arguments)
        keep = [st for st in chosen if _arrays(sdfg, st) <= placed]
        if keep == chosen:
            break
        chosen = keep
    return GpuPlacement(res, tuple(kernels), tuple(chosen))


def _arrays(sdfg: SDFG, state: SDFGState) -> Set[str]:
    return {n.data for n in state.data_nodes() if type(sdfg.arrays[n.data]) is dace.data.Array}


def _on_gpu(a: ModelAccess, gpu_states) -> bool:
    """At a planned kernel, or in one of ``gpu_states`` of rank 0 (a scatter's or gather's end is MPI's)."""
    return a.point.at == At.KERNEL or (a.point.at == At.STATE and a.point.state in gpu_states)


def _decide(sdfg: SDFG, by_name: Dict[str, List[ModelAccess]], read_between: Set[str], gpu_states) -> Residency:
    """Which arrays live in GPU memory when ``gpu_states`` of rank 0 (and every planned kernel) run on the
    GPU: every array (not a scalar, not a view) that GPU code uses and that only GPU code and MPI touch.
    Transients (the rank-local buffers, rank 0's intermediates) are allocated there; arguments get a
    device twin. The program's constant arrays stay in host code, where DaCe writes their values. Arrays
    that no planned kernel touches are rank 0's alone (their copies run there only).
    ``by_name``: each name's accesses in the model; ``read_between``: what interstate edges read."""
    resident, arguments, why_host, rank0, gpu_writes = [], [], {}, [], []
    for name, where in sorted(by_name.items()):
        desc = sdfg.arrays.get(name)  # None: a rank-local buffer the partition makes (an array, transient)
        if desc is not None and type(desc) is not dace.data.Array:
            continue
        gpu = [a for a in where if _on_gpu(a, gpu_states)]
        if not gpu:
            continue
        host = sorted({a.point.state.label for a in where
                       if a.point.at == At.STATE and a.point.state not in gpu_states})
        if host:
            why_host[name] = f"state '{host[0]}' uses it outside a kernel and MPI"
        elif name in sdfg.constants_prop:  # np.array([0.5, 0.5]): DaCe compiles its values into host code
            why_host[name] = "a constant of the program, compiled into host code"
        elif name in read_between:
            why_host[name] = "an interstate edge reads it"
        else:
            (resident if desc is None or desc.transient else arguments).append(name)
            if not any(a.point.at == At.KERNEL for a in where):
                rank0.append(name)
            if any(a.written for a in gpu):
                gpu_writes.append(name)
    return Residency(resident=tuple(resident), arguments=tuple(arguments), rank0=tuple(rank0),
                     host=tuple(sorted(why_host.items())), gpu_writes=tuple(gpu_writes))
