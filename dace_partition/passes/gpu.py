"""``lower(sdfg, schedule, device="gpu")``: the rank-local kernels run on CUDA GPUs, on arrays that stay there.

After the CPU lowering, every *kernel state* holds rank-local arrays (``__dp{k}_*``) around one kernel (a
map, a nested SDFG or a library node), and communication states hold DistributedMemlets. :func:`offload`
carries out the plan's decision of which arrays live in GPU memory (``LoweringPlan.gpu``:
:func:`~dace_partition.plan.residency.plan_gpu_placement`, a frozen
:class:`~dace_partition.ir.residency.Residency`), and rewrites:

    resident arrays get GPU storage (an argument a device twin, filled when the call starts and copied
    back when it ends) -> each kernel is nested into a wrapper SDFG and moved to the GPU there
    (``GPUTransformSDFG`` on the wrapper only: resident arrays are used in place, none is copied)
    -> each communication state works on host memory (pinned twins), with the copies it needs in a state
    before it (device -> host) and one after it (host -> device) (:func:`stage_communication`), except
    halos, redistributions and allreduces between GPU buffers, which run on the device buffers
    (:func:`device_moves`)

so two kernels on a rank hand their data over on the device, and PCIe is crossed only where MPI or the
caller needs the data (:func:`pcie_copies` lists every such copy of a lowered graph). Matrix products
(``Gemm``, ``BatchedMatMul``, ``Gemv``: the contraction maps that ``local_optimize`` turned into GEMMs)
run on cuBLAS where the toolkit has it (:func:`~dace_partition.runtime.cuda_build.cublas_available`);
every other library node is expanded to its pure implementation, so its maps become GPU kernels too, each
with a thread block chosen from its shape (:func:`block_size`). MPI sees a device pointer only where it
says at run time that it is CUDA-aware, and then only a packed piece, so any MPI works.

Each rank picks its GPU by node-local rank (``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` ->
``cudaSetDevice(local_rank % device_count)``) before DaCe creates its CUDA streams; see
``runtime/include/dace_partition_cuda.h``.
"""
import contextlib
import copy
import numbers
import os
from dataclasses import replace
from enum import Enum
from typing import Dict, List, Optional, Tuple

import dace
import networkx as nx
from dace import dtypes, nodes
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState
from dace.subsets import Range
from dace.sdfg.graph import SubgraphView
from dace.sdfg.utils import dfs_topological_sort
from dace.transformation.dataflow import CopyToMap
from dace.transformation.helpers import nest_state_subgraph

from ..compat import all_states, nested_symbols_in_outer_memlets, propagate_memlets_state
from .graph import RANK, guard
from ..ir.residency import ARGS_ON_GPU, CopyDirection, Residency, StagingCopy
from ..plan.residency import GpuPlacement
from ..runtime.cuda_build import CUDA_ENVIRONMENT
from ..solvers import registry as solver_registry
from ..solvers.node import DistributedMemlet
from ..schedule import expand_all
from .gpu_rows import fuse_rows
from .graph import PlanPass

#: A device twin of argument ``x`` is the program's argument ``__dp_dev_x`` (never ``__return...``, which
#: DaCe would allocate and return itself).
DEVICE_PREFIX = "__dp_dev_"

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

#: What the runtime needs of the CUDA runtime for device arrays in and out (runtime/device_arrays.py),
#: exported by the program's own library, so it uses the CUDA the program was built with, on its GPU.
_DEVICE_MEMORY = """
DACE_EXPORTED void *__dp_gpu_malloc(size_t bytes) {
    dace_partition_cuda::select_device();
    void *p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess) return p;
    cudaGetLastError();  // out of memory is not sticky: cleared, so the next call's error check stays clean
    return nullptr;
}
DACE_EXPORTED void __dp_gpu_free(void *p) { dace_partition_cuda::select_device(); cudaFree(p); }
DACE_EXPORTED int __dp_gpu_sync() {  // the rank's own GPU, whatever the calling thread selected
    dace_partition_cuda::select_device();
    return (int)cudaDeviceSynchronize();
}
DACE_EXPORTED int __dp_gpu_copy(void *dst, const void *src, size_t bytes) {
    dace_partition_cuda::select_device();
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    // From pageable memory cudaMemcpy may return before the DMA lands, and the program's kernels run on
    // non-blocking streams, which do not wait for the default stream: wait here.
    return (int)(e == cudaSuccess ? cudaStreamSynchronize(0) : e);
}
DACE_EXPORTED int __dp_gpu_device_of(const void *p) {  // the GPU holding p; -1 host memory, -2 unknown
    dace_partition_cuda::select_device();
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return -2; }
    return (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) ? a.device : -1;
}
DACE_EXPORTED int __dp_gpu_current() { return dace_partition_cuda::select_device(); }
// Page-locked host memory for the host side of a device argument (what MPI and the program's copies read):
// copies from it run at PCIe's rate and asynchronously; portable, so every context sees it pinned.
DACE_EXPORTED void *__dp_gpu_host_malloc(size_t bytes) {
    dace_partition_cuda::select_device();
    void *p = nullptr;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) == cudaSuccess) return p;
    cudaGetLastError();
    return nullptr;
}
DACE_EXPORTED void __dp_gpu_host_free(void *p) { dace_partition_cuda::select_device(); cudaFreeHost(p); }
// Waits for the stream a caller's device array names (__cuda_array_interface__'s "stream": 1 the legacy
// default stream, 2 the per-thread one, else a cudaStream_t): the program's streams are non-blocking, so
// its kernels would not otherwise wait for the caller's work on that array.
DACE_EXPORTED int __dp_gpu_wait_stream(unsigned long long stream) {
    dace_partition_cuda::select_device();
    cudaStream_t s = stream == 1 ? cudaStreamLegacy : stream == 2 ? cudaStreamPerThread : (cudaStream_t)stream;
    return (int)cudaStreamSynchronize(s);
}
"""


class OffloadToGpu(PlanPass):
    """The plan's kernels, and rank 0's, run on the GPU on arrays kept there (:func:`offload`), as the plan's
    GPU placement says (``LoweringPlan.gpu``, decided before any rewrite); the residency, with the copies
    the rewrite made, goes into ``report``. Runs after GuardRankZeroCode has guarded rank 0's states."""

    def __init__(self, plan, report, after=(), cublas: Optional[bool] = None):
        super().__init__(plan, after)
        self.report = report
        self.cublas = cublas  # None: where the CUDA toolkit has it (see offload)

    def apply_pass(self, sdfg: SDFG, pipeline_results):
        offload(sdfg, [km.kernel.state for km in self.plan.kernels], self.plan.gpu, self.report, self.cublas,
                grids={km.kernel.state: tuple(km.grid) for km in self.plan.kernels})
        return self.report.residency


def note_kernels_on_gpu(report) -> None:
    """Says on each kernel's report line where it runs (after the other passes' notes on it)."""
    for kr in report.kernels:
        if kr.grid is not None:
            kr.notes.append("runs on the GPU on its rank-local buffers in GPU memory (see 'GPU residency')")
        else:  # every reported kernel is a map, nested SDFG or library node (never a tasklet): rank 0's GPU
            kr.notes.append("runs on rank 0's GPU (see 'GPU residency' for where its arrays live)")


def offload(sdfg: SDFG, kernel_states: List[SDFGState], placement: GpuPlacement, report=None,
            cublas: Optional[bool] = None, grids: Optional[Dict[SDFGState, Tuple[int, ...]]] = None) -> SDFG:
    """Moves the kernels of ``kernel_states``, and the states of rank 0 that ``placement`` puts on the GPU
    (the plan's decision: :func:`~dace_partition.plan.residency.plan_gpu_placement`), to the GPU and keeps
    the arrays it says there.

    Rewrites only: rank 0's copy states become copy kernels, library nodes are expanded, resident arrays
    get GPU storage (an argument gets a device twin, filled when the call starts and copied back when it
    ends), every kernel is nested and moved to the GPU, and each communication state touching a resident
    array is staged through host memory (:func:`stage_communication`). ``cublas`` (default: where the
    CUDA toolkit has it) runs the matrix products on cuBLAS. ``grids`` (each kernel state's grid) lets
    consecutive kernels on the same ranks fuse into row kernels (:mod:`.gpu_rows`).
    """
    if cublas is None:
        from ..runtime.cuda_build import cublas_available
        cublas = cublas_available()
    states = list(dict.fromkeys(list(kernel_states) + list(placement.kernels)))
    copies = [part for st in placement.copies for part in _one_copy_chain_per_state(st)]
    for st in copies:
        _copies_to_maps(sdfg, st)
    states += copies
    gemm_states = [s for s in states if any(isinstance(n, _blas_nodes() + (_matmul(), )) for n, _ in
                                            s.all_nodes_recursive())]
    same_ranks = {s: ("rank 0", ) for s in states}
    same_ranks.update({s: tuple(g) for s, g in (grids or {}).items()})
    rows = fuse_rows(sdfg, states, same_ranks)
    for state in states:
        _expand_library_nodes(sdfg, state, cublas)
    residency = placement.residency
    residency = residency.without({n for n in residency.resident if n not in sdfg.arrays})  # inside a row kernel
    moves = device_moves(sdfg, residency)
    residency = replace(residency, device_moves=tuple(st.label for st in moves),
                        gpu_writes=tuple(dict.fromkeys(residency.gpu_writes + _written(moves))))
    residency = place(sdfg, residency, states + moves)
    wrappers = [w for w in (_offload_state(sdfg, state) for state in states) if w is not None]
    residency = residency.without({n for n in residency.resident if n not in sdfg.arrays})  # moved into a wrapper
    residency = stage_communication(sdfg, residency)
    residency = host_sides_for_mpi(sdfg, residency)
    residency = replace(residency, kernel_copies=tuple(sorted({a for w in wrappers for a in _copied_in_out(w)})))
    if report is not None and gemm_states:
        how = "cuBLAS" if cublas else "pure: DaCe's GPU maps (no cuBLAS found in the CUDA toolkit)"
        report.blas = f"{how}, for the matrix products of {len(gemm_states)} kernel state(s)"
    if copies:
        residency = replace(residency, device_copies=tuple(st.label for st in copies))
    if report is not None:
        report.residency = residency
        report.row_kernels = rows
    if wrappers:
        _attach_runtime(sdfg)
    return sdfg


def _one_copy_chain_per_state(state: SDFGState) -> List[SDFGState]:
    """A copy state whose copies follow one another through an access node (NPBench's cavity_flow sets
    its boundary as ``p[:, -1] = p[:, -2]; p[0, :] = p[1, :]; p[:, 0] = p[:, 1]``, three copies through two
    access nodes of ``p``) becomes one state per copy, in order: nested whole as one kernel, the access
    nodes between the copies would stay outside it, which DaCe's nesting cannot do. Returns the states."""
    if not any(state.in_degree(n) > 0 and state.out_degree(n) > 0 for n in state.data_nodes()):
        return [state]
    edges = [e for n in dfs_topological_sort(state) for e in state.out_edges(n)]
    parts, last = [state], state
    for k, e in enumerate(edges[1:], 1):
        last = state.parent_graph.add_state_after(last, f"{state.label}_{k}")
        last.add_nedge(last.add_read(e.src.data), last.add_write(e.dst.data), copy.deepcopy(e.data))
        state.remove_edge(e)
        parts.append(last)
    for n in [n for n in state.data_nodes() if state.degree(n) == 0]:
        state.remove_node(n)
    return parts


class _CopyToMapInState(CopyToMap):
    """DaCe's CopyToMap, leaving the propagation to its caller (:func:`_copies_to_maps`, once per state)."""

    def annotates_memlets(self):
        return True


def _copies_to_maps(sdfg: SDFG, state: SDFGState):
    """Each copy of the state becomes a map, a kernel like the others: DaCe's ``CopyToMap`` for arrays, a
    one-element map for a scalar (which the kernel then takes by value). Only this state's memlets are
    propagated again: DaCe's default re-propagates the whole SDFG after each copy, whose loop analysis
    (every cycle of the state machine) took minutes on NPBench's cavity_flow."""
    for e in list(state.edges()):
        if type(sdfg.arrays[e.src.data]) is dace.data.Scalar:
            dst = e.data.get_dst_subset(e, state) or Range.from_array(sdfg.arrays[e.dst.data])
            state.remove_edge(e)
            src = Memlet.from_array(e.src.data, sdfg.arrays[e.src.data])
            state.add_mapped_tasklet(f"copy_{e.src.data}", {"__j": "0:1"}, {"__inp": src},
                                     "__out = __inp", {"__out": Memlet(data=e.dst.data, subset=copy.deepcopy(dst))},
                                     external_edges=True, input_nodes={e.src.data: e.src},
                                     output_nodes={e.dst.data: e.dst})
        else:
            _CopyToMapInState.apply_to(sdfg, options={"ignore_strides": True}, verify=False, save=False, a=e.src,
                                       b=e.dst)
    propagate_memlets_state(sdfg, state)


def _is_comm_state(state: SDFGState) -> bool:
    """A state of DistributedMemlets and the buffers they read and write (scatter, gather, halo, ...)."""
    work = [n for n in state.nodes() if not isinstance(n, nodes.AccessNode)]
    return bool(work) and all(isinstance(n, DistributedMemlet) for n in work)


class GpuComm(str, Enum):
    """How halos, redistributions and allreduces between buffers in GPU memory run
    (``DACE_PARTITION_GPU_COMM``)."""
    PACKED = "packed"  # on the device buffers: pieces packed there, to MPI as device or pinned host buffers
    STAGED = "staged"  # MPI on the buffers' host sides, with what it moves staged in states around it

    @classmethod
    def from_env(cls) -> "GpuComm":
        value = os.environ.get("DACE_PARTITION_GPU_COMM", cls.PACKED.value)
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"DACE_PARTITION_GPU_COMM={value!r}: expected one of "
                             f"{', '.join(h.value for h in cls)}") from None


def _packed(sdfg: SDFG, dm: DistributedMemlet) -> Optional[str]:
    """The packed solver (``solvers/device.py``) that takes over ``dm``'s move, or None."""
    name = "halo_packed" if dm.implementation == "halo" else \
        "blocks_packed" if dm.implementation in ("blocks", "synthesized") else \
        "allreduce_device" if dm.implementation == "allreduce" else None
    if name is None or solver_registry.get(name).refuse(dm.move(sdfg)) is not None:
        return None  # a scatter or gather (rank 0's side is host memory), partial results
    return name


def device_moves(sdfg: SDFG, residency: Residency) -> List[SDFGState]:
    """The communication states whose moves are all halos, redistributions of final values or allreduces
    between arrays that all live in GPU memory (resident buffers, arguments with a device twin): their
    DistributedMemlets become ``halo_packed``, ``blocks_packed`` or ``allreduce_device``
    (``solvers/device.py``), which pack the pieces on the device and give MPI device pointers where it is
    CUDA-aware, else pinned host copies of the pieces alone. Where such moves share a state with others (a
    scatter from rank 0's host array), they move to a state of their own before it: they touch none of the
    others' arrays, so the order of the two is free. :func:`place` points them at the device twins;
    :func:`stage_communication` leaves them alone. ``DACE_PARTITION_GPU_COMM=staged`` keeps every move on
    host memory instead."""
    if GpuComm.from_env() is GpuComm.STAGED:
        return []
    on_gpu = (set(residency.resident) | set(residency.arguments)) - set(residency.rank0)
    out = []
    for st in [s for s in all_states(sdfg) if _is_comm_state(s)]:
        parts = [set(c) for c in nx.weakly_connected_components(st.nx)]
        packed = {}  # DistributedMemlet -> its packed solver, asked only where all its arrays are on the GPU

        def on_device(part):
            dms = [n for n in part if isinstance(n, DistributedMemlet)]
            if not dms or not all(n.data in on_gpu for n in part if isinstance(n, nodes.AccessNode)):
                return False
            packed.update((dm, _packed(sdfg, dm)) for dm in dms)  # the parts are disjoint: once each
            return all(packed[dm] for dm in dms)

        where = [on_device(p) for p in parts]
        device = [p for p, d in zip(parts, where) if d]
        if not device:
            continue
        names = {n.data for p in device for n in p if isinstance(n, nodes.AccessNode)}
        rest = [p for p, d in zip(parts, where) if not d]
        if rest and names & {n.data for p in rest for n in p if isinstance(n, nodes.AccessNode)}:
            continue  # an array on both sides: the two would not be independent
        for dm in (n for p in device for n in p if n in packed):
            dm.implementation = packed[dm]
        out.append(_split_off(st, set().union(*device)) if rest else st)
    return out


def _split_off(state: SDFGState, part) -> SDFGState:
    """Moves the nodes ``part`` of ``state`` (whole components) into a new state right before it."""
    parent = state.parent_graph
    new = parent.add_state_before(state, f"{state.label}_on_gpu", is_start_block=parent.start_block is state)
    edges = [e for e in state.edges() if e.src in part]
    for n in part:
        new.add_node(n)
    for e in edges:
        new.add_edge(e.src, e.src_conn, e.dst, e.dst_conn, e.data)
    state.remove_nodes_from(list(part))
    return new


def _written(states: List[SDFGState]) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(n.data for st in states for n in st.data_nodes() if st.in_degree(n) > 0))


def place(sdfg: SDFG, residency: Residency, gpu_states: List[SDFGState]) -> Residency:
    """Gives resident transients GPU storage and every resident argument a device twin that the GPU
    states use instead; the twins are filled when the call starts (arguments the program reads) and
    copied back when it ends (arguments it writes). Allocated once where their sizes allow it."""
    known = {str(s) for s in sdfg.free_symbols} | set(sdfg.constants)  # sizes known when the program starts

    def on_gpu(desc):
        desc.storage = dtypes.StorageType.GPU_Global
        if {str(s) for s in desc.free_symbols} <= known:
            desc.lifetime = dtypes.AllocationLifetime.Persistent
        return desc

    for name in residency.resident:
        on_gpu(sdfg.arrays[name])
    twins = {}
    for name in residency.arguments:
        desc = sdfg.arrays[name].clone()
        desc.storage, desc.lifetime = dtypes.StorageType.GPU_Global, dtypes.AllocationLifetime.Scope
        # an argument the runtime passes: the caller's own device array, or a buffer it keeps for NumPy callers
        twins[name] = sdfg.add_datadesc(f"{DEVICE_PREFIX}{name}", desc, find_new_name=True)
    if twins:
        sdfg.add_symbol(ARGS_ON_GPU, dace.int32)
    for st in gpu_states:
        for n in st.data_nodes():
            if n.data in twins:
                n.data = twins[n.data]
        for e in st.edges():
            if e.data.data in twins:
                e.data.data = twins[e.data.data]
    arg_of = {**{t: a for a, t in twins.items()}, **{a: a for a in twins}}
    read = set()  # partly written counts as read: the rest must arrive from the caller
    for st in all_states(sdfg):
        for n in st.data_nodes():
            if n.data in arg_of and (st.out_degree(n) > 0 or any(not _whole(sdfg, e) for e in st.in_edges(n))):
                read.add(arg_of[n.data])
    written = set(twins) & set(residency.gpu_writes)  # what MPI alone writes is in the caller's array already
    copies = []
    init = sdfg.start_block
    for rank0, names in _grouped(sorted(read), set(residency.rank0)):
        st = _after_start(sdfg, init, "dace_partition_arguments_to_gpu" + ("_rank0" if rank0 else ""), rank0,
                          host_arguments=True)
        for name in names:
            _copy(sdfg, st, name, twins[name])
            copies.append(StagingCopy(twins[name], name, CopyDirection.TO_DEVICE, st.label, "the call starts"))
    for rank0, names in _grouped(sorted(written), set(residency.rank0)):
        st = _at_end(sdfg, "dace_partition_arguments_to_host" + ("_rank0" if rank0 else ""), rank0)
        for name in names:
            _copy(sdfg, st, twins[name], name)
            copies.append(StagingCopy(twins[name], name, CopyDirection.TO_HOST, st.label, "the call ends"))
    return replace(residency, device_twins=tuple(sorted(twins.items())), copies=tuple(copies))


def _whole(sdfg: SDFG, edge) -> bool:
    sub = edge.data.dst_subset if edge.data.dst_subset is not None else edge.data.subset
    try:
        return sub is not None and sub == Range.from_array(sdfg.arrays[edge.dst.data])
    except Exception:  # noqa: BLE001 - a subset DaCe cannot compare counts as partial
        return False


def _fills_root_array(sdfg: SDFG, dm: DistributedMemlet, name: str) -> bool:
    """Whether a move into rank 0's array ``name`` writes all of it. The edge into the array names the whole
    array whatever part the move writes (NPBench deriche gathers one row, ``y2[-2, :]``, into rank 0's
    ``y2``), so the edge cannot tell; the blocks of the move's source can. Blocks known only at run time
    count as a part. A move into rank-local buffers fills them (each rank's block is its buffer)."""
    from ..ir.boxes import boxes_cover
    if not dm.distribution("dst").is_root:
        return True
    blocks = dm.distribution("src").blocks()
    try:
        shape = tuple(int(x) for x in sdfg.arrays[name].shape)
    except (TypeError, ValueError):
        return False
    return blocks is not None and boxes_cover(blocks, [((0, ) * len(shape), shape)])


def _after_start(sdfg: SDFG, init: SDFGState, label: str, rank0: bool, host_arguments: bool) -> SDFGState:
    """A state right after the program's first state (which sets the rank symbols), before anything else,
    run only when the caller's arrays are on the host (``host_arguments``) or only when they are on the GPU."""
    (e, ) = sdfg.out_edges(init)
    st = sdfg.add_state(label)
    sdfg.remove_edge(e)
    sdfg.add_edge(init, st, e.data)
    sdfg.add_edge(st, e.dst, dace.InterstateEdge())
    guard(st, _when(rank0, host_arguments))
    return st


def _at_end(sdfg: SDFG, label: str, rank0: bool) -> SDFGState:
    """A state after every state that ended the program, run only when the caller's arrays are on the host
    (given on the GPU, the device twins are the caller's arrays: nothing to copy back)."""
    sinks = [b for b in sdfg.nodes() if sdfg.out_degree(b) == 0]
    st = sdfg.add_state(label)
    for b in sinks:
        sdfg.add_edge(b, st, dace.InterstateEdge())
    guard(st, _when(rank0, True))
    return st


def _when(rank0: bool, host_arguments: bool) -> str:
    cond = f"{ARGS_ON_GPU} == {0 if host_arguments else 1}"
    return f"({RANK} == 0) and ({cond})" if rank0 else cond


def host_sides_for_mpi(sdfg: SDFG, residency: Residency) -> Residency:
    """Given device arrays, the runtime passes scratch host memory as an argument's host side, so where MPI
    reads that host side (a halo of a tile that no kernel writes), the call first copies the caller's device
    array there (device -> host, once per call, in a state run only in that case). An argument a GPU state
    writes is staged before each MPI read anyway, and what MPI writes into a host side is staged back to the
    device twin (:func:`stage_communication`)."""
    device_of = dict(residency.device_twins)
    if not device_of:
        return residency
    seen = set()
    for st in [s for s in all_states(sdfg) if _is_comm_state(s)]:
        for n in st.data_nodes():
            if n.data in device_of and n.data not in residency.gpu_writes and \
                    (st.out_degree(n) > 0 or any(not _whole(sdfg, e) for e in st.in_edges(n))):
                seen.add(n.data)
    copies = list(residency.copies)
    for rank0, names in _grouped(sorted(seen), set(residency.rank0)):
        st = _after_start(sdfg, sdfg.start_block, "dace_partition_device_arguments_to_host" + ("_rank0" if rank0 else ""),
                          rank0, host_arguments=False)
        for name in names:
            _copy(sdfg, st, device_of[name], name)
            copies.append(StagingCopy(device_of[name], name, CopyDirection.TO_HOST, st.label,
                                      "given on the GPU, MPI reads it"))
    return replace(residency, copies=tuple(copies))


def stage_communication(sdfg: SDFG, residency: Residency) -> Residency:
    """MPI works on host memory: each communication state that touches a resident array works on its host
    side instead (a pinned twin of a resident transient, the argument itself for a device twin), preceded
    by a state of device -> host copies (of what MPI reads, and of what it writes only in part: a halo, an
    accumulation) and followed by a state of host -> device copies (of what it wrote). DaCe runs the copies
    on the program's stream and synchronizes at the end of each copy state, so MPI starts after its data
    arrived. An array no GPU state writes is never copied back (its host side is current). Copies of rank
    0's arrays run on rank 0 alone. Returns ``residency`` with twins and copies."""
    resident = set(residency.resident)
    device_of = {arg: twin for arg, twin in residency.device_twins}
    stale = set(residency.gpu_writes) | {device_of[a] for a in residency.gpu_writes if a in device_of}
    pinned: Dict[str, str] = {}
    copies: List[StagingCopy] = list(residency.copies)
    on_device = set(residency.device_moves)
    for st in [s for s in all_states(sdfg) if _is_comm_state(s) and s.label not in on_device]:
        touched = [n for n in st.data_nodes() if n.data in resident or n.data in device_of]
        if not touched:
            continue
        # Decided before the state is renamed; an argument's slabs go with its device twin, which is staged.
        slabs = {device_of.get(k, k): v for k, v in _halo_slabs(sdfg, st).items()}
        host_of = {}
        for n in touched:
            if n.data in device_of:  # an argument: MPI uses it where it is, its device twin is staged
                host_of[device_of[n.data]] = n.data
                continue
            if n.data not in pinned:
                desc = sdfg.arrays[n.data].clone()
                desc.storage, desc.transient = dtypes.StorageType.CPU_Pinned, True
                desc.lifetime = sdfg.arrays[n.data].lifetime
                pinned[n.data] = sdfg.add_datadesc(n.data + "_host", desc, find_new_name=True)
            host_of[n.data] = pinned[n.data]
            for e in st.in_edges(n) + st.out_edges(n):
                if e.data.data == n.data:
                    e.data.data = pinned[n.data]
            n.data = pinned[n.data]
        device = {h: d for d, h in host_of.items()}
        hosts = [n for n in st.data_nodes() if n.data in device]
        reads = {device[n.data] for n in hosts if st.out_degree(n) > 0}
        writes = {device[n.data] for n in hosts if st.in_degree(n) > 0}
        partial = {device[n.data] for n in hosts for e in st.in_edges(n)
                   if device[n.data] in reads or not _whole(sdfg, e) or (isinstance(e.src, DistributedMemlet) and (
                       e.src.accumulates or not _fills_root_array(sdfg, e.src, n.data)))}
        rank0 = {d for d in device.values() if d in residency.rank0 or host_of[d] in residency.rank0}
        # Only what a GPU state writes can differ from its host side; the rest is there already.
        for only0, names in _grouped(sorted((reads | partial) & stale), rank0):
            pre = _beside(st, f"{st.label}_to_host" + ("_rank0" if only0 else ""), before=True, rank0=only0)
            for name in names:
                if name in slabs:  # a halo: the edge slabs MPI sends, the halo slabs it fills in part
                    parts = [(p, "MPI reads it") for p in slabs[name][0]] + \
                        [(p, "MPI writes part of it") for p in slabs[name][1]]
                else:
                    parts = [(None, "MPI reads it" if name in reads else "MPI writes part of it")]
                for part, because in parts:
                    _copy(sdfg, pre, name, host_of[name], part)
                    copies.append(StagingCopy(name, host_of[name], CopyDirection.TO_HOST, pre.label, because,
                                              _part(part, Range.from_array(sdfg.arrays[name]))))
        for only0, names in _grouped(sorted(writes), rank0):
            post = _beside(st, f"{st.label}_to_gpu" + ("_rank0" if only0 else ""), before=False, rank0=only0)
            for name in names:
                for part in slabs[name][1] if name in slabs else [None]:
                    _copy(sdfg, post, host_of[name], name, part)
                    copies.append(StagingCopy(name, host_of[name], CopyDirection.TO_DEVICE, post.label,
                                              "MPI wrote it", _part(part, Range.from_array(sdfg.arrays[name]))))
    return replace(residency, pinned=tuple(sorted(pinned.items())), copies=tuple(copies))


def _grouped(names, rank0):
    """(rank 0 only?, names): the copies of rank 0's arrays run on rank 0 alone."""
    every = [n for n in names if n not in rank0]
    only0 = [n for n in names if n in rank0]
    return [(False, every)] * bool(every) + [(True, only0)] * bool(only0)


def _beside(state: SDFGState, label: str, before: bool, rank0: bool) -> SDFGState:
    parent = state.parent_graph
    if before:
        st = parent.add_state_before(state, label, is_start_block=parent.start_block is state)
    else:
        st = parent.add_state_after(state, label)
    if rank0:
        guard(st, f"{RANK} == 0")
    return st


def _halo_slabs(sdfg: SDFG, state: SDFGState) -> Dict[str, Tuple[List[Range], List[Range]]]:
    """For a halo exchange in place (one buffer), the slabs MPI reads (the edge the neighbours need) and
    the slabs it writes (the halo), per dimension that the grid splits: ``{buffer: (read slabs, written
    slabs)}``. A slab spans the whole buffer in the other dimensions (corners included), so each is one
    copy: contiguous for rows, a pitched 2-D copy (``cudaMemcpy2DAsync``) for columns. Staging those
    instead of the whole tile is what makes a stencil's time loop worth a GPU. Where the blocks differ in
    size (38 rows over 4 ranks), the slab after the block is this rank's, an expression in its grid
    coordinates. Anything else (two buffers, another solver) is staged whole: ``{}``."""
    from ..ir.relations import bound_shifts
    out = {}
    for dm in [n for n in state.nodes() if isinstance(n, DistributedMemlet)]:
        ins, outs = state.in_edges(dm), state.out_edges(dm)
        if dm.implementation != "halo" or len(ins) != 1 or len(outs) != 1 or ins[0].data.data != outs[0].data.data:
            return {}
        name = ins[0].data.data
        src_dist, dst_dist = dm.distribution("src"), dm.distribution("dst")
        shifts = bound_shifts(src_dist, dst_dist)
        src, dst, whole = ins[0].data.subset, outs[0].data.subset, Range.from_array(sdfg.arrays[name])
        if shifts is None or name in out or src is None or dst is None or len(src) != len(whole) or dst != whole \
                or len(src_dist.subset) != len(whole):  # (a widened dimension nobody splits moves nothing)
            return {}
        blocks = src_dist.blocks() or []
        reads, writes = [], []
        for d, ((lo, hi), split) in enumerate(zip(shifts, src_dist.splits)):
            if split is None or src_dist.grid[split] <= 1 or (lo, hi) == (0, 0):
                continue
            (sb, se, _), (db, de, _) = src.ranges[d], dst.ranges[d]
            if len({count[d] for _, count in blocks}) != 1:  # sizes differ (or are known at run time only):
                b0, e0, _ = src_dist.subset[d]  # this rank's own, in its grid coordinates (a block fills
                se = sb + (e0 - b0)  # the tile from its start)
                de = se + hi

            def slab(b, e, d=d):  # b..e inclusive along d, every other dimension whole
                return Range([(b, e, 1) if j == d else r for j, r in enumerate(whole.ranges)])

            reads += ([slab(sb, sb + hi - 1)] if hi > 0 else []) + ([slab(se + lo + 1, se)] if lo < 0 else [])
            writes += ([slab(db, sb - 1)] if lo < 0 else []) + ([slab(se + 1, de)] if hi > 0 else [])
        if not reads and not writes:
            return {}
        out[name] = (reads, writes)
    return out


def _part(subset: Optional[Range], whole: Range) -> str:
    """How the report names a staged part: ``whole``, or the slab's dimension and bounds (``rows a..b``,
    ``columns a..b``, ``dim d a..b``): the one dimension where it is not the whole ``whole``."""
    if subset is None:
        return "whole"
    d = next((j for j, (r, w) in enumerate(zip(subset.ranges, whole.ranges)) if r != w), 0)
    b, e, _ = subset.ranges[d]
    return f"{('rows', 'columns')[d] if d < 2 else f'dim {d}'} {b}..{e}"


def _copy(sdfg: SDFG, state: SDFGState, src: str, dst: str, subset: Optional[Range] = None):
    """One copy between a device array and its host side: the whole array (contiguous: one cudaMemcpyAsync,
    whatever its rank), or the same ``subset`` of both."""
    if subset is None:
        memlet = Memlet.from_array(src, sdfg.arrays[src])
    else:
        memlet = Memlet(data=src, subset=copy.deepcopy(subset), other_subset=copy.deepcopy(subset))
    state.add_nedge(state.add_read(src), state.add_write(dst), memlet)


def _copied_in_out(wrapper: SDFG):
    """The outer arrays a GPU wrapper still copies to and from the device (GPUTransformSDFG's clones)."""
    return [name for name, desc in wrapper.arrays.items()
            if not desc.transient and desc.storage not in (dtypes.StorageType.GPU_Global, dtypes.StorageType.CPU_Pinned)
            and not isinstance(desc, dace.data.Scalar)]


_GPU = (dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared)


def pcie_copies(sdfg: SDFG) -> List[Tuple[str, str, str, CopyDirection]]:
    """Every copy between GPU and host memory in a lowered program, read from the graph (nested SDFGs
    included): ``(state label, source, destination, direction)``. What the report's residency says is
    checked against this; a copy inside a kernel's state names the wrapper's state."""
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        for st in all_states(sd):
            for e in st.edges():
                if not (isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode)):
                    continue
                src, dst = sd.arrays[e.src.data].storage, sd.arrays[e.dst.data].storage
                if (src in _GPU) != (dst in _GPU):
                    direction = CopyDirection.TO_HOST if src in _GPU else CopyDirection.TO_DEVICE
                    out.append((st.label, e.src.data, e.dst.data, direction))
    return out


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
    expand_all(state, keep=tuple(keep), skip=warp_reductions(sdfg, state))
    return on_cublas


def warp_reductions(sdfg: SDFG, state: SDFGState) -> list:
    """The state's top-level reductions that DaCe's GPU expansion (``GPUAuto``: a warp per output element
    with wide loads and shuffles, or a block per 32 outputs across rows) computes, instead of the pure
    expansion's atomic update per input element: a row max of a float32[8192, 4096] took most of a 58 ms
    softmax on an H200 that way. They are marked ``GPUAuto`` and expanded after the kernel moved to the
    GPU (:func:`_expand_warp_reductions`), where their arrays are in GPU memory. Taken only where DaCe's
    planner accepts the shape and the reduction reads and writes whole arrays (the expansion plans on the
    arrays, not on the memlets). ``DACE_PARTITION_GPU_REDUCTIONS=pure`` keeps the pure expansion (its
    kernels also run on the host, which is how the GPU data flow is tested without a GPU)."""
    from dace.libraries.standard import Reduce
    from dace.libraries.standard.reduction_planner import get_reduction_schedule
    if os.environ.get("DACE_PARTITION_GPU_REDUCTIONS", "").lower() == "pure":
        return []
    scope = state.scope_dict()
    out = []
    for n in state.nodes():
        if not isinstance(n, Reduce) or scope[n] is not None or n.identity is None or \
                state.in_degree(n) != 1 or state.out_degree(n) != 1:
            continue
        ie, oe = state.in_edges(n)[0], state.out_edges(n)[0]
        ind, outd = sdfg.arrays[ie.data.data], sdfg.arrays[oe.data.data]
        if ie.data.subset != Range.from_array(ind) or oe.data.subset != Range.from_array(outd):
            continue
        squeezed = copy.deepcopy(ie.data.subset).squeeze()
        axes = [a for a in (n.axes if n.axes is not None else range(len(ind.shape))) if a in squeezed]
        if not axes or get_reduction_schedule(ind, list(axes)).error:
            continue
        n.implementation = "GPUAuto"
        out.append(n)
    return out


@contextlib.contextmanager
def _scalar_loads():
    """DaCe 1.0.2's GPU reduction with vector loads does not compile for max and min (no ``max`` of its
    float4 type) and reduces a vector into a scalar through a write-conflict; its planner is asked for
    scalar loads (a warp still reads 128 contiguous bytes per step) while one reduction expands."""
    from dace.libraries.standard import reduction_planner
    plan = reduction_planner.get_reduction_schedule

    def scalar(*args, **kwargs):
        kwargs["use_vectorization"] = False
        return plan(*args, **kwargs)
    reduction_planner.get_reduction_schedule = scalar
    try:
        yield
    finally:
        reduction_planner.get_reduction_schedule = plan


def _expand_warp_reductions(wrapper: SDFG) -> int:
    """Expands the reductions :func:`warp_reductions` marked, now that their arrays are in GPU memory.
    Should DaCe fall back to the pure expansion, its top-level map still runs on the GPU."""
    from dace.libraries.standard import Reduce
    count = 0
    while True:
        todo = [(n, s) for n, s in wrapper.all_nodes_recursive()
                if isinstance(n, Reduce) and n.implementation == "GPUAuto"]
        if not todo:
            return count
        n, s = todo[0]
        with _scalar_loads():
            n.expand(s.sdfg, s)
        count += 1
        for st in wrapper.states():
            for m in st.nodes():
                if isinstance(m, nodes.MapEntry) and st.entry_node(m) is None and \
                        m.map.schedule == dtypes.ScheduleType.Default:
                    m.map.schedule = dtypes.ScheduleType.GPU_Device


def _offload_state(sdfg: SDFG, state: SDFGState):
    """Nests the state's computation (library nodes already expanded) into a wrapper SDFG and applies
    GPUTransformSDFG to it; arrays already in GPU memory are used in place, the others are copied."""
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
    inner = [n for n in state.nodes() if n in inner]  # in the state's order: the build must not depend on addresses
    wrapper_node = nest_state_subgraph(sdfg, state, SubgraphView(state, inner), name=f"{state.label}_gpu",
                                       full_data=True)
    wrapper = wrapper_node.sdfg
    _constants_passed_in(sdfg, wrapper_node)
    wrapper.apply_gpu_transformations(validate=False, simplify=False, sequential_innermaps=True,
                                      register_transients=True)
    nested_symbols_in_outer_memlets(wrapper)  # DaCe's re-propagation can name a nested program's own symbols
    _contiguous_gpu_clones(wrapper)
    _kernel_local_arrays(wrapper)
    _expand_warp_reductions(wrapper)
    _sequential_nested_maps(wrapper)
    choose_block_sizes(wrapper)
    return wrapper


def _constants_passed_in(sdfg: SDFG, node: nodes.NestedSDFG) -> int:
    """A constant array of the program (``np.array([0.5, 0.5])``) is host code: DaCe declares it again in the
    function of every nested SDFG that holds it among its constants, and the wrapper does, from nesting; the
    wrapper also takes it as a parameter of the same name, which the declaration would shadow (a C++ compile
    error, "declaration of 'constexpr const double __tmp0 [2]' shadows a parameter"). The wrapper drops the
    constant: the parameter carries the values in. Returns how many were dropped."""
    passed = (set(node.in_connectors) | set(node.out_connectors)) & \
        (set(sdfg.constants_prop) | set(sdfg.root_sdfg.constants_prop))
    for name in passed:
        node.sdfg.constants_prop.pop(name, None)
    return len(passed)


def _kernel_local_arrays(wrapper: SDFG) -> int:
    """A small array that MapFusion puts between two nodes inside a map (one element per iteration, an array
    rather than a scalar because a nested SDFG reads it: NPBench nbody's ``where=`` mask) became GPU global
    memory with a persistent lifetime, which DaCe 1.0.2 then passes to the kernel twice (a C++ compile
    error, "redefinition of ..."). Every access of such an array lies inside a map, so it is the iteration's
    own: it is kept in registers, allocated inside the kernel. Returns how many arrays changed."""
    changed = 0
    for sd in wrapper.all_sdfgs_recursive():
        inside: Dict[str, bool] = {}
        for st in all_states(sd):
            for n in st.data_nodes():
                inside[n.data] = inside.get(n.data, True) and st.entry_node(n) is not None
        for name, desc in sd.arrays.items():
            size = getattr(desc, "total_size", None)
            if desc.transient and type(desc) is dace.data.Array and desc.storage == dtypes.StorageType.GPU_Global \
                    and inside.get(name) and isinstance(size, (int, numbers.Integral)) and int(size) <= 64:
                desc.storage, desc.lifetime = dtypes.StorageType.Register, dtypes.AllocationLifetime.Scope
                changed += 1
    return changed


def _contiguous_gpu_clones(wrapper: SDFG) -> int:
    """GPUTransformSDFG gives the GPU clone of a strided argument (``gpu__x`` of the pure dot's ``_x``, a column
    ``B[:i, j]`` in NPBench's symm) the argument's strides, and DaCe copies arrays of equal strides as one
    span of ``stride * (n - 1) + 1`` elements: a column copied with every element between, and a negative
    count when the column is empty (symm at ``i = 0``: a memcpy of a huge size that corrupted the heap on the
    host; on a GPU, a failed cudaMemcpy). A clone that only this SDFG's own code reads or writes (none is
    handed to a nested SDFG, which would index it by its own strides) is made contiguous: its copy moves
    the ``n`` elements, and nothing when there are none. Returns how many clones changed."""
    changed = 0
    for sd in wrapper.all_sdfgs_recursive():
        nested = set()
        for st in all_states(sd):
            for n in st.data_nodes():
                if any(isinstance(e.src, nodes.NestedSDFG) or isinstance(e.dst, nodes.NestedSDFG)
                       for e in st.all_edges(n)):
                    nested.add(n.data)
        for name, desc in sd.arrays.items():
            if not (desc.transient and name.startswith("gpu_") and type(desc) is dace.data.Array
                    and desc.storage == dtypes.StorageType.GPU_Global) or name in nested:
                continue
            contiguous = tuple(dace.data._prod(desc.shape[j + 1:]) for j in range(len(desc.shape)))
            if tuple(desc.strides) != contiguous:
                desc.strides, desc.total_size = contiguous, dace.data._prod(desc.shape)
                desc.offset = [0] * len(desc.shape)
                changed += 1
    return changed


THREADS_PER_BLOCK = 256  # 8 warps: full occupancy needs at most 8 such blocks per SM on H100 / A100


def block_size(extents) -> List[int]:
    """A thread block for a GPU map of these extents (in map order; None where only known at run time).

    DaCe gives the map's last dimension to x (contiguous in C order). x takes up to 32 threads (one warp
    reads a contiguous row segment), the next dimensions share the rest of 256 threads; a dimension
    shorter than its share gets the power of two that covers it, so small maps do not run idle lanes.
    A 1-D map gets up to 256 threads in x. (DaCe's default is 32x1x1 whatever the shape: 1024 threads
    per SM at most, half of an H100's.)"""
    dims = [e for e in reversed(list(extents))][:3]

    def cover(e, cap):
        if e is None:
            return cap
        p = 1
        while p < e and p < cap:
            p *= 2
        return p

    if len(dims) <= 1:
        return [max(32, cover(dims[0] if dims else None, THREADS_PER_BLOCK)), 1, 1]
    out = [cover(dims[0], 32)]
    left = THREADS_PER_BLOCK // out[0]
    for e in dims[1:]:
        b = cover(e, left)
        out.append(b)
        left = max(1, left // b)
    return out + [1] * (3 - len(out))


def choose_block_sizes(wrapper: SDFG) -> int:
    """Sets ``gpu_block_size`` on every GPU kernel map of ``wrapper`` that has none and no thread-block
    maps inside (those set their own). Returns how many maps it set."""
    count = 0
    for n, state in wrapper.all_nodes_recursive():
        if not (isinstance(n, nodes.MapEntry) and n.map.schedule == dtypes.ScheduleType.GPU_Device) or \
                n.map.gpu_block_size is not None:
            continue
        inner = state.scope_subgraph(n).nodes()
        if any(isinstance(m, nodes.MapEntry) and m.map.schedule in (dtypes.ScheduleType.GPU_ThreadBlock,
                                                                    dtypes.ScheduleType.GPU_ThreadBlock_Dynamic)
               for m in inner):
            continue
        n.map.gpu_block_size = block_size([_extent(e) for e in n.map.range.size()])
        count += 1
    return count


def _extent(size):
    try:
        return int(size)
    except (TypeError, ValueError):
        return None


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
    sdfg.append_global_code(_DEVICE_MEMORY, "cuda")
