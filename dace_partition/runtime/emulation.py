"""The GPU lowering's data flow, run on the host.

A machine without a GPU cannot run a CUDA build, but it can run everything the GPU lowering decided: the
same lowered graph with every device array and pinned twin put in host memory and every GPU map made a
loop. Device arrays and their host sides stay *separate arrays*, so a staging copy that is missing, in the
wrong place or on the wrong ranks gives a wrong result under a real ``mpiexec``. The tests, the
``--emulated`` rehearsals of ``benchmarks/gpu.py`` and ``benchmarks/npbench.py --device gpu --emulated``
use it; a user without a GPU can check a GPU lowering the same way.

Two things the host cannot run are avoided, not translated: DaCe's GPU reductions (warp shuffles) are
CUDA code from the moment they are expanded, so a program meant for the host is lowered inside
:func:`host_kernels`, which keeps their pure expansion; cuBLAS nodes go back to the pure implementation.
The row kernels of ``passes/gpu_rows.py`` have a host form (the row's first thread does the whole row).
"""
import contextlib
import os

from dace import SDFG, dtypes, nodes

_CUDA_ONLY = ("warpReduce", "__shfl", "threadIdx")  # in a tasklet: code that exists only on the GPU
_HOST_STORAGE = (dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared, dtypes.StorageType.CPU_Pinned)
_GPU_NODE_SCHEDULES = tuple(dtypes.GPU_SCHEDULES) + tuple(  # GPU_Default: DaCe 1 only
    s for s in dtypes.ScheduleType if s.name == "GPU_Default")


@contextlib.contextmanager
def host_kernels():
    """Lower inside this to run the result with :func:`on_host`: reductions keep their pure expansion."""
    old = os.environ.get("DACE_PARTITION_GPU_REDUCTIONS")
    os.environ["DACE_PARTITION_GPU_REDUCTIONS"] = "pure"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DACE_PARTITION_GPU_REDUCTIONS", None)
        else:
            os.environ["DACE_PARTITION_GPU_REDUCTIONS"] = old


def on_host(sdfg: SDFG) -> SDFG:
    """The GPU-lowered ``sdfg``, in place, with host storage and sequential maps (same arrays, same copies).

    Raises ValueError if a GPU reduction was expanded to CUDA code (lower inside :func:`host_kernels`)."""
    from .cuda_build import CUDA_ENVIRONMENT, uses_gpu
    for sd in sdfg.all_sdfgs_recursive():
        for desc in sd.arrays.values():
            if desc.storage in _HOST_STORAGE:
                desc.storage = dtypes.StorageType.CPU_Heap
        sd.global_code.pop("cuda", None)
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.MapEntry) and n.map.schedule in dtypes.GPU_SCHEDULES:
            n.map.schedule = dtypes.ScheduleType.Sequential
            n.map.gpu_block_size = None
        elif isinstance(n, (nodes.NestedSDFG, nodes.LibraryNode)) and n.schedule in _GPU_NODE_SCHEDULES:
            n.schedule = dtypes.ScheduleType.Default  # else a library node expanded inside gets a GPU schedule
        if isinstance(n, nodes.LibraryNode) and getattr(n, "implementation", None) == "cuBLAS":
            n.implementation = "pure"
        if isinstance(n, nodes.CodeNode) and CUDA_ENVIRONMENT in getattr(n, "environments", []):
            n.environments = [e for e in n.environments if e != CUDA_ENVIRONMENT]
        if isinstance(n, nodes.Tasklet) and any(w in n.code.as_string for w in _CUDA_ONLY):
            raise ValueError(f"tasklet '{n.label}' is a GPU warp reduction, which the host cannot run: "
                             "lower inside dace_partition.runtime.emulation.host_kernels()")
    if uses_gpu(sdfg):
        raise ValueError(f"'{sdfg.name}' still has GPU code after moving it to the host")
    return sdfg
