"""``lower(sdfg, schedule, device="gpu")``: the rank-local kernels run on CUDA GPUs.

After the CPU lowering, every *kernel state* holds rank-local host arrays (``__dp{k}_*``) around one
kernel (a map, a nested SDFG or a library node). :func:`offload` turns each into

    host locals -> [nested SDFG: copy to GPU_Global -> GPU kernel(s) -> copy back] -> host locals

by nesting the kernel into a wrapper SDFG (``dace.transformation.helpers.nest_state_subgraph``) and
applying DaCe's ``GPUTransformSDFG`` to that wrapper only. Matrix products (``Gemm``, ``BatchedMatMul``,
``Gemv``: the contraction maps that ``local_optimize`` turned into GEMMs on the rank-local tiles) run on
cuBLAS where the toolkit has it (:func:`~dace_partition.runtime.cuda_build.cublas_available`); every
other library node is expanded to its pure implementation, so its maps become GPU kernels too. The
DistributedMemlets of the scatter/gather states are left alone: their MPI calls work on the host locals,
i.e. communication is staged through host memory, which works with any MPI (CUDA-aware or not).

Each rank picks its GPU by node-local rank (``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` ->
``cudaSetDevice(local_rank % device_count)``) before DaCe creates its CUDA streams; see
``runtime/include/dace_partition_cuda.h``.
"""
from typing import List, Optional

import dace
from dace import dtypes, nodes
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.graph import SubgraphView
from dace.transformation.helpers import nest_state_subgraph

from ..runtime.cuda_build import CUDA_ENVIRONMENT
from ..solvers.node import DistributedMemlet
from ..schedule import expand_all

#: Placed in the generated CUDA file before ``__dace_init_cuda``: DaCe's CUDA initialization starts with
#: ``cudaGetDeviceCount``, so routing that first call through the device selection makes every stream and
#: allocation DaCe creates afterwards live on this rank's GPU.
_SELECT_BEFORE_INIT = """
static inline cudaError_t dace_partition_cuda_device_count(int *count) {
    dace_partition_cuda::select_device();
    return cudaGetDeviceCount(count);
}
#define cudaGetDeviceCount dace_partition_cuda_device_count
"""


def offload(sdfg: SDFG, kernel_states: List[SDFGState], root_states: List[SDFGState], report=None,
            root_on_gpu: bool = True, cublas: Optional[bool] = None) -> SDFG:
    """Moves the kernels of ``kernel_states`` to the GPU.

    With ``root_on_gpu`` (the default), the kernels that run on rank 0 on the global arrays (unscheduled
    maps and library nodes, grids of one rank) also run on rank 0's GPU; states holding only tasklets
    (scalar code) stay on the host. ``cublas`` (default: where the CUDA toolkit has it) runs the matrix
    products on cuBLAS.
    """
    if cublas is None:
        from ..runtime.cuda_build import cublas_available
        cublas = cublas_available()
    moved = 0
    done = set()
    states = list(kernel_states) + ([s for s in root_states if _has_kernel(s)] if root_on_gpu else [])
    gemm_states = [s for s in states if any(isinstance(n, _blas_nodes() + (_matmul(), )) for n, _ in
                                            s.all_nodes_recursive())]
    for state in states:
        if state not in done:
            done.add(state)
            moved += _offload_state(sdfg, state, cublas) is not None
    if report is not None and gemm_states:
        how = "cuBLAS" if cublas else "pure: DaCe's GPU maps (no cuBLAS found in the CUDA toolkit)"
        report.blas = f"{how}, for the matrix products of {len(gemm_states)} kernel state(s)"
    if report is not None:
        for kr in report.kernels:
            if kr.grid is not None:
                kr.notes.append("runs on the GPU: local arrays copied host -> GPU_Global -> host around the "
                                "kernel; MPI on host buffers")
            elif root_on_gpu:  # every reported kernel is a map, nested SDFG or library node (never a tasklet)
                kr.notes.append("runs on rank 0's GPU: global arrays copied host -> GPU_Global -> host")
    if moved:
        _attach_runtime(sdfg)
    return sdfg


def _has_kernel(state: SDFGState) -> bool:
    scope = state.scope_dict()
    return any(scope[n] is None and isinstance(n, (nodes.MapEntry, nodes.LibraryNode, nodes.NestedSDFG))
               and not isinstance(n, DistributedMemlet) for n in state.nodes())


def _matmul():
    from dace.libraries.blas import MatMul
    return MatMul


def _blas_nodes():
    from dace.libraries.blas import BatchedMatMul, Gemm, Gemv
    return (Gemm, BatchedMatMul, Gemv)


def _expand_library_nodes(sdfg: SDFG, state: SDFGState, cublas: bool) -> int:
    """Expands the state's library nodes (recursively) to their pure implementation, except the matrix
    products, which run on cuBLAS when ``cublas``: a pure GEMM is one thread per output element with an
    atomic add per multiply-add, tens of times slower. Returns how many nodes run on cuBLAS."""
    keep = [DistributedMemlet]
    on_cublas = 0
    if cublas:
        from dace.libraries.blas import MatMul
        while True:  # MatMul first becomes its Gemm / BatchedMatMul / Gemv ("specialize")
            mm = [(n, s) for n, s in state.all_nodes_recursive() if isinstance(n, MatMul)]
            if not mm:
                break
            n, s = mm[0]
            n.implementation = "specialize"
            n.expand(s.sdfg, s)
        for n, _ in state.all_nodes_recursive():
            if isinstance(n, _blas_nodes()):
                n.implementation = "cuBLAS"
                on_cublas += 1
        keep.extend(_blas_nodes())
    expand_all(state, keep=tuple(keep))
    return on_cublas


def _offload_state(sdfg: SDFG, state: SDFGState, cublas: bool = False):
    """Nests the state's computation into a wrapper SDFG and applies GPUTransformSDFG to it."""
    _expand_library_nodes(sdfg, state, cublas)
    scope = state.scope_dict()
    work = [n for n in state.nodes() if not isinstance(n, nodes.AccessNode)]
    if not work:
        return None
    # The subgraph to nest: everything but the top-level access nodes that the kernel reads or writes
    # from outside (the host locals); transients used only inside the kernel go in with it.
    inner = set()
    for n in state.nodes():
        if scope[n] is not None or not isinstance(n, nodes.AccessNode):
            inner.add(n)
        elif state.in_degree(n) > 0 and state.out_degree(n) > 0 and sdfg.arrays[n.data].transient and \
                not n.data.startswith("__dp"):
            inner.add(n)
    wrapper_node = nest_state_subgraph(sdfg, state, SubgraphView(state, list(inner)), name=f"{state.label}_gpu",
                                       full_data=True)
    wrapper = wrapper_node.sdfg
    wrapper.apply_gpu_transformations(validate=False, simplify=False, sequential_innermaps=True,
                                      register_transients=True)
    _sequential_nested_maps(wrapper)
    return wrapper


def _sequential_nested_maps(wrapper: SDFG):
    """Maps nested inside a GPU kernel (e.g. in a nested SDFG of a pure expansion) run sequentially."""
    for n, parent in wrapper.all_nodes_recursive():
        if isinstance(n, nodes.MapEntry) and n.map.schedule == dtypes.ScheduleType.Default:
            sd = parent.sdfg
            in_gpu = dace.sdfg.scope.is_devicelevel_gpu(sd, parent, n)
            if in_gpu:
                n.map.schedule = dtypes.ScheduleType.Sequential


def _attach_runtime(sdfg: SDFG):
    """Links the CUDA environment (device selection, C++17, MPI include path for nvcc) into the program."""
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.Tasklet) and n.label == "dace_partition_coords":
            if CUDA_ENVIRONMENT not in n.environments:
                n.environments = list(n.environments) + [CUDA_ENVIRONMENT]
            break
    else:
        st = sdfg.start_block
        t = st.add_tasklet("dace_partition_cuda", {}, {}, "", language=dtypes.Language.CPP)
        t.environments = [CUDA_ENVIRONMENT]
    sdfg.append_global_code(_SELECT_BEFORE_INIT, "cuda")
