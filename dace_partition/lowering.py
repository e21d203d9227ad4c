"""``lower(sdfg, schedule)``: turn a single-process SDFG into an SPMD program (thesis Listing 1).

Data flows one way: schedule -> kernels and tiles -> constraints -> solver -> MPI. The program that results
keeps every global array on rank 0 (inputs are given there, outputs appear there). Each scheduled kernel
runs on its own process grid (the first ``prod(grid)`` ranks), in a state of its own:

    scatter state (DistributedMemlets, every rank)
    -> kernel state on rank-local arrays (only the grid's ranks)
    -> gather state (DistributedMemlets, every rank)

Everything not scheduled (and every kernel on a grid of one rank) runs on rank 0 on the global arrays.
"""
import copy
import weakref
from typing import Dict, List, Optional, Tuple

import dace
import sympy
from dace import nodes
from dace.memlet import Memlet
from dace.properties import CodeBlock
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.graph import SubgraphView
from dace.transformation.helpers import state_fission

from .constraints import Access, KernelPlan, plan_map_kernel, plan_nested_kernel, same_subset
from .distributed_memlet import DistributedMemlet
from .environment import ENVIRONMENT
from .errors import ScheduleError, UnsupportedPattern
from .ir import ROOT, Distribution, IoMode, Move, MoveKind, ProgramRecord, ReduceOp, attach, record_of
from .passes import FuseRoundTrips, FusionKind, LocalizeArguments
from .passes.graph import distributed_memlets
from .report import CommEntry, KernelReport, LoweringReport, Traffic, entry
from .schedule import Kernel, discover, expand_all, ordered_states, resolve
from .solvers.base import block_shape
from .solvers.registry import choose, get, resolve_solvers
from .transformations.rank_tiling import RankTileMap

RANK = "__dp_rank"
_REPORTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def report(sdfg: SDFG) -> LoweringReport:
    """The report of the last ``lower`` call on this SDFG."""
    try:
        return _REPORTS[sdfg]
    except KeyError:
        raise ValueError(f"SDFG '{sdfg.name}' has not been lowered in this process") from None


def ranks_needed(sdfg: SDFG) -> int:
    """MPI ranks a lowered program needs (its largest grid); recorded in its :class:`ProgramRecord`."""
    rec = record_of(sdfg)
    if rec is None:
        raise ValueError(f"SDFG '{sdfg.name}' is not a lowered dace-partition program")
    return rec.ranks_needed


def is_lowered(sdfg: SDFG) -> bool:
    return record_of(sdfg) is not None


def lower(sdfg: SDFG, schedule, *, solvers=None, fuse: bool = True, device: str = "cpu", io: str = "root",
          threads: Optional[int] = 1, verbose: bool = False) -> SDFG:
    """Transforms ``sdfg`` in place into an SPMD program and returns it.

    ``schedule`` maps maps (names from :func:`maps`, ``MapInfo``, ``Map`` or ``MapEntry`` objects) to
    process-grid shapes, one integer per map parameter. ``device="gpu"`` runs the rank-local kernels on
    CUDA GPUs. ``solvers`` is an ordered list of solver names or objects to try for each memlet
    (default: grid_mapped, blocks, then registered plug-ins). ``fuse`` removes round trips of
    intermediates through rank 0 where both kernels hold the same blocks (thesis 4.5). Every error is
    raised before the SDFG changes.

    ``io="root"`` (default): the program takes and returns whole arrays on rank 0. ``io="distributed"``:
    every rank passes and gets back only its tiles of the arguments the partitioned kernels touch
    (see :func:`dace_partition.layout`), and nothing passes through rank 0.

    ``threads=1`` (default, one rank per core): every rank runs its kernels in one thread, so maps are
    sequential loops and write conflicts (reductions) are plain updates instead of atomics.
    ``threads=None`` keeps DaCe's OpenMP maps for hybrid MPI + OpenMP runs (``OMP_NUM_THREADS`` threads
    per rank). Matrix products run on BLAS either way (see :mod:`dace_partition.toolchain`).
    """
    if is_lowered(sdfg):
        raise ScheduleError(f"SDFG '{sdfg.name}' has already been lowered")
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    if io not in ("root", "distributed"):
        raise ValueError(f"io must be 'root' or 'distributed', got {io!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    grids = resolve(discover(sdfg), schedule)
    order = resolve_solvers(solvers)
    work = copy.deepcopy(sdfg)  # lowered on a copy: every error surfaces before the SDFG changes
    rep = _lower(work, grids, order, device, fuse, IoMode(io))
    _adopt(sdfg, work)
    if device == "cpu":
        from .toolchain import blas
        rep.blas = str(blas())
        if threads == 1:
            _single_threaded(sdfg)
    _REPORTS[sdfg] = rep
    if verbose:
        print(rep)
    return sdfg


def _lower(sdfg: SDFG, grids: Dict[str, Tuple[int, ...]], solvers, device: str = "cpu",
           fuse: bool = True, io: IoMode = IoMode.ROOT) -> LoweringReport:
    _split_states(sdfg)
    kernels = discover(sdfg)
    expanded = _expand_uneven_library_nodes(sdfg, kernels, grids)
    if expanded:
        kernels = discover(sdfg)
    plans: List[KernelPlan] = []
    rep = LoweringReport(sdfg.name, 1)
    for k in kernels:
        scheduled = [m for m in k.maps if m.name in grids]
        if not scheduled:
            rep.kernels.append(KernelReport(k.label, k.kind, None))
            continue
        if k.kind == "map":
            plan = plan_map_kernel(sdfg, k, grids[k.maps[0].name])
        else:
            plan = plan_nested_kernel(sdfg, k, grids)
        kr = KernelReport(plan.principal if k.kind != "map" else k.maps[0].name, k.kind, plan.grid)
        if k.kind == "nested" and k.label in expanded:
            kr.notes.append("uneven tiles: the library node was replaced by its pure expansion, so no rank "
                            "computes on the padding of its local buffers")
        for t in plan.inner:
            if t.derived:
                kr.notes.append(f"derived grid {t.grid} for '{t.info.name}' from '{plan.principal}'")
        rep.kernels.append(kr)
        rep.ranks_needed = max(rep.ranks_needed, plan.size)
        if plan.size == 1:
            kr.notes.append("grid of one rank: runs on rank 0 on the global arrays, no communication")
            kr.grid = None
            continue
        plans.append((plan, kr))

    _scalars_to_arrays(sdfg, {a.array for plan, _ in plans for a in plan.accesses})
    chosen: Dict[Tuple[int, str, MoveKind], Tuple[Move, str]] = {}
    refusals: Dict[Tuple[int, str, MoveKind], list] = {}
    for plan, kr in plans:
        read = {a.array for a in plan.accesses if a.direction == "in"}
        for a in plan.accesses:
            for move in _moves(sdfg, plan, a):
                if a.accumulates and a.array in read and move.grid_side.may_overlap():
                    raise UnsupportedPattern(a.array, a.subset, "the array is read and accumulated (write-conflict "
                                             "resolution) by the same kernel, and several ranks hold each element")
                solver, refused = choose(move, solvers)
                if solver is None:
                    raise UnsupportedPattern(a.array, a.subset, "no solver implements it: " +
                                             "; ".join(f"{n}: {why}" for n, why in refused))
                key = (plan.kernel.index, a.array, move.kind)
                chosen[key] = (move, solver.name)
                refusals[key] = [(n, why) for n, why in refused if move.kind in get(n).kinds]

    init_state = _add_runtime_state(sdfg, [p for p, _ in plans])
    comm_states = {init_state}
    guarded = set()
    for plan, _ in plans:
        pre, post = _apply_plan(sdfg, plan, chosen)
        comm_states |= {pre, post}
        guarded.add(plan.kernel.state)
        comm_states |= set(_guard(sdfg, plan.kernel.state, f"__dp{plan.kernel.index}_member == 1"))
    by_kernel = {plan.kernel.index: kr for plan, kr in plans}
    if fuse:
        for f in FuseRoundTrips(solvers).apply_pass(sdfg, {}):
            _note_fusion(f, by_kernel)
    if io == IoMode.DISTRIBUTED:
        layouts, changes = LocalizeArguments(solvers).apply_pass(sdfg, {})
        rep.io = str(IoMode.DISTRIBUTED)
        for name, info in changes.items():
            if info.grid_id in by_kernel:
                by_kernel[info.grid_id].notes.append(f"'{name}' is a rank-local argument (io='distributed')")
            for k in info.readers:
                if k in by_kernel:
                    by_kernel[k].notes.append(f"reads the tiles of rank-local argument '{name}': no communication")
    else:
        layouts = {}
    root_states = []
    for st in ordered_states(sdfg):
        if st in comm_states or st in guarded or st.number_of_nodes() == 0:
            continue
        root_states.append(st)
        comm_states |= set(_guard(sdfg, st, f"{RANK} == 0"))
    if device == "gpu":
        from .gpu import offload
        offload(sdfg, [p.kernel.state for p, _ in plans], root_states, rep)
    for plan, _ in plans:
        dims = ", ".join(str(g) for g in plan.grid)
        sdfg.append_init_code(f'dace_partition::init_grid({plan.kernel.index}, "{plan.principal}", {{{dims}}});\n')
    _report_moves(sdfg, rep, by_kernel, refusals)
    rep.persistent_bytes = _make_local_buffers_persistent(sdfg)
    sdfg.append_exit_code("dace_partition::free_grids();\n")
    attach(sdfg, ProgramRecord(sdfg.name, rep.ranks_needed, io, layouts))
    return rep


def _moves(sdfg: SDFG, plan: KernelPlan, a: Access) -> List[Move]:
    """The scatter and/or gather of one access of a kernel: rank 0 <-> the kernel's grid."""
    desc = sdfg.arrays[a.array]
    k = plan.kernel.index
    op = ReduceOp.of(a.op)
    out = []
    shape, size = tuple(desc.shape), desc.dtype.bytes
    if a.direction == "in" or a.accumulates:
        dist = Distribution.on_grid(a.subset, plan.grid, plan.coords, k)
        out.append(Move(a.array, ROOT, dist, shape, size, op if a.accumulates else None, a.accumulates))
    if a.direction == "out":
        dist = Distribution.on_grid(a.subset, plan.grid, plan.coords, k, pending=op)
        out.append(Move(a.array, dist, ROOT, shape, size, op, a.accumulates))
    return out


def _note_fusion(f, by_kernel):
    producer, consumer = by_kernel.get(f.producer), by_kernel.get(f.consumer)
    if f.kind == FusionKind.REUSE:
        if consumer is not None:
            consumer.notes.append(f"reuses the blocks of input '{f.array}' scattered for an earlier kernel")
        return
    if producer is not None:
        note = f"'{f.array}' is not gathered to rank 0 (fused with the next kernels)"
        if note not in producer.notes:
            producer.notes.append(note)
    if consumer is not None and f.kind == FusionKind.NOOP:
        consumer.notes.append(f"reads '{f.array}' from the previous kernel's local buffer: no communication")


def _report_moves(sdfg: SDFG, rep: LoweringReport, by_kernel, refusals):
    """The report's communication, once, from the solvers' answers for the Moves that remain."""
    for _, dm in distributed_memlets(sdfg):
        move = dm.move()
        e, t = entry(move, get(dm.implementation), refusals.get((dm.grid_id, move.array, move.kind), ()))
        rep.traffic.append(t)
        kr = by_kernel.get(dm.grid_id)
        if kr is not None:
            kr.comm.append(e)


def _adopt(target: SDFG, source: SDFG):
    """Makes ``target`` the lowered ``source`` in place (the caller's SDFG object stays valid): every
    back-reference to ``source`` is pointed at ``target``."""
    target.__dict__.clear()
    target.__dict__.update(source.__dict__)
    for blk in target.all_control_flow_blocks():
        if getattr(blk, "_sdfg", None) is source:
            blk._sdfg = target
        if getattr(blk, "_parent_graph", None) is source:
            blk._parent_graph = target
    for n, parent in target.all_nodes_recursive():
        if isinstance(n, nodes.NestedSDFG) and n.sdfg.parent_sdfg is source:
            n.sdfg.parent_sdfg = target
    for sub in target.all_sdfgs_recursive():
        for blk in sub.all_control_flow_regions():
            if getattr(blk, "_parent_graph", None) is source:
                blk._parent_graph = target
    target.reset_cfg_list()


def _single_threaded(sdfg: SDFG):
    """One thread per rank: library nodes other than BLAS calls are expanded (their maps included), and
    every CPU map becomes a sequential loop, so DaCe emits no OpenMP and no atomic updates."""
    from dace.libraries.blas import nodes as blas_nodes
    keep = (DistributedMemlet, blas_nodes.Gemm, blas_nodes.Gemv, blas_nodes.BatchedMatMul, blas_nodes.Dot,
            blas_nodes.Ger, blas_nodes.Axpy)
    expand_all(sdfg, keep=keep)
    parallel = (dace.ScheduleType.Default, dace.ScheduleType.CPU_Multicore)
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.MapEntry) and n.map.schedule in parallel:
            n.map.schedule = dace.ScheduleType.Sequential


def _make_local_buffers_persistent(sdfg: SDFG):
    """Rank-local buffers are allocated once, when the program starts, and freed at exit: allocating
    them in every call costs a page fault per 4 KiB touched. Their sizes depend only on the program's
    arguments' symbols (a rank's block is at most rank 0's). Returns their bytes per rank (an int, or a
    formula in the program's symbols)."""
    total = 0
    for name, desc in sdfg.arrays.items():
        if name.startswith("__dp") and desc.transient and isinstance(desc, dace.data.Array):
            desc.lifetime = dace.AllocationLifetime.Persistent
            total = total + desc.total_size * desc.dtype.bytes
    total = dace.symbolic.simplify(total)
    return int(total) if not getattr(total, "free_symbols", None) else total


def _scalars_to_arrays(sdfg: SDFG, names):
    """Transient scalars that partitioned kernels read or write (e.g. ``np.sqrt(d)`` computed on rank 0)
    become one-element arrays, so they move like any other block (library nodes take pointers)."""
    for name in names:
        desc = sdfg.arrays[name]
        if isinstance(desc, dace.data.Scalar) and desc.transient:
            sdfg.arrays[name] = dace.data.Array(desc.dtype, [1], transient=True, storage=desc.storage)


def _uneven(plan: KernelPlan) -> bool:
    """Whether some rank's block is smaller than the local buffer (uneven or symbolic tiles)."""
    syms = {dace.symbolic.symbol(c, dace.int32) for c in plan.coords if c}
    for subset in plan.body_constraints.values():
        blocks = Distribution.on_grid(subset, plan.grid, plan.coords, plan.kernel.index).blocks()
        if blocks is None:
            if any(sympy.sympify(e - b).free_symbols & syms for b, e, _ in subset):
                return True
        elif len({c for _, c in blocks}) > 1:
            return True
    return False


def _expand_uneven_library_nodes(sdfg: SDFG, kernels: List[Kernel], grids) -> set:
    """A library node on a padded local buffer would compute over the padding too, so where tiles are
    uneven the node is replaced by its pure expansion (whose maps are tiled exactly). Its maps keep their
    names. Returns the labels of the expanded nodes."""
    changed = set()
    for k in kernels:
        if k.kind != "library" or not any(m.name in grids for m in k.maps):
            continue
        if not _uneven(plan_nested_kernel(sdfg, k, grids)):
            continue
        label, state = k.node.label, k.state
        before = set(state.nodes())
        node = k.node
        node.implementation = "pure" if "pure" in node.implementations else "specialize"
        node.expand(sdfg, state)
        for n in [n for n in state.nodes() if n not in before]:
            if isinstance(n, nodes.NestedSDFG):
                expand_all(n.sdfg)
            elif isinstance(n, nodes.LibraryNode):
                expand_all(state)
        for n in state.nodes():
            if n not in before and isinstance(n, nodes.NestedSDFG):
                n.label = label
        changed.add(label)
    return changed


def _work_nodes(state: SDFGState):
    scope = state.scope_dict()
    return [
        n for n in dace.sdfg.utils.dfs_topological_sort(state)
        if scope[n] is None and isinstance(n, (nodes.MapEntry, nodes.NestedSDFG, nodes.LibraryNode, nodes.Tasklet))
    ]


def _split_states(sdfg: SDFG):
    """One work node (kernel or tasklet) per state, so each state can run on its own set of ranks
    (see :mod:`dace_partition.transformations.prepare`, which also turns scalar arguments into arrays)."""
    from .transformations.prepare import split_states
    split_states(sdfg)


def _add_runtime_state(sdfg: SDFG, plans: List[KernelPlan]) -> SDFGState:
    """First state: reads this rank's world rank, grid coordinates and grid membership into symbols."""
    start = sdfg.start_block
    st = sdfg.add_state("dace_partition_init")
    sdfg.add_edge(st, start, dace.InterstateEdge())
    sdfg.start_block = sdfg.node_id(st)
    outputs = {RANK: "dace_partition::world_rank()"}
    for p in plans:
        k = p.kernel.index
        for d, c in enumerate(p.coords):
            if c:
                outputs[c] = f"dace_partition::coord({k}, {d})"
        outputs[f"__dp{k}_member"] = f"dace_partition::member({k})"
    code = "\n".join(f"__o{i} = {expr};" for i, expr in enumerate(outputs.values()))
    t = st.add_tasklet("dace_partition_coords", {}, {f"__o{i}" for i in range(len(outputs))}, code,
                       language=dace.Language.CPP)
    t.environments = [ENVIRONMENT]
    assignments = {}
    for i, sym in enumerate(outputs):
        sdfg.add_symbol(sym, dace.int32)
        sdfg.add_scalar(f"{sym}_v", dace.int32, transient=True)
        st.add_edge(t, f"__o{i}", st.add_write(f"{sym}_v"), None, Memlet(f"{sym}_v[0]"))
        assignments[sym] = f"{sym}_v"
    sdfg.out_edges(st)[0].data.assignments = assignments
    return st


def _guard(sdfg: SDFG, state: SDFGState, condition: str):
    """Runs ``state`` only where ``condition`` holds: a branch around it on interstate edges.

    (A ConditionalBlock would hide the state from DaCe 1.0.2's library-node expansion, which looks
    states up among the SDFG's top-level blocks.)
    """
    parent = state.parent_graph
    before = parent.add_state_before(state, f"{state.label}_enter", is_start_block=parent.start_block is state)
    after = parent.add_state_after(state, f"{state.label}_leave")
    parent.edges_between(before, state)[0].data.condition = CodeBlock(condition)
    parent.add_edge(before, after, dace.InterstateEdge(condition=f"not ({condition})"))
    return before, after


def _apply_plan(sdfg: SDFG, plan: KernelPlan, chosen):
    k = plan.kernel
    state = k.state
    for c in plan.coords:
        if c and c not in sdfg.symbols:
            sdfg.add_symbol(c, dace.int32)
    if k.kind == "map":
        n = len(k.node.map.params)  # a replica dimension (past the parameters) tiles nothing
        RankTileMap.apply_to(sdfg, options={"grid": list(plan.grid[:n]), "coords": [c or "" for c in plan.coords[:n]]},
                             map_entry=k.node)
    elif k.kind == "nested":
        _tile_body(plan)

    locals_: Dict[Tuple[str, str], str] = {}
    by_array: Dict[str, List[Access]] = {}
    for a in plan.accesses:
        by_array.setdefault(a.array, []).append(a)
    for array, accs in by_array.items():
        ins = [a for a in accs if a.direction == "in"]
        outs = [a for a in accs if a.direction == "out"]
        shared = ins and outs and same_subset(ins[0].subset, outs[0].subset)
        for a in accs:
            suffix = "" if shared or len(accs) == 1 else f"_{a.direction}"
            name = f"__dp{k.index}_{array}{suffix}"
            if name not in sdfg.arrays:
                desc = sdfg.arrays[array]
                shape = block_shape(a.subset, plan.grid, plan.coords)
                sdfg.add_array(name, shape, desc.dtype, storage=desc.storage, transient=True)
            locals_[(array, a.direction)] = name

    pre = state.parent_graph.add_state_before(state, f"{state.label}_scatter",
                                              is_start_block=state.parent_graph.start_block is state)
    post = state.parent_graph.add_state_after(state, f"{state.label}_gather")
    for a in plan.accesses:
        local = locals_[(a.array, a.direction)]
        if a.direction == "in" or a.accumulates:
            move, solver = chosen[(k.index, a.array, MoveKind.SCATTER)]
            dm = DistributedMemlet(f"scatter_{a.array}", move)
            dm.implementation = solver
            pre.add_edge(pre.add_read(a.array), None, dm, "_in", Memlet.from_array(a.array, sdfg.arrays[a.array]))
            pre.add_edge(dm, "_out", pre.add_write(local), None, Memlet.from_array(local, sdfg.arrays[local]))
        if a.direction == "out":
            move, solver = chosen[(k.index, a.array, MoveKind.GATHER)]
            dm = DistributedMemlet(f"gather_{a.array}", move)
            dm.implementation = solver
            post.add_edge(post.add_read(local), None, dm, "_in", Memlet.from_array(local, sdfg.arrays[local]))
            post.add_edge(dm, "_out", post.add_write(a.array), None, Memlet.from_array(a.array, sdfg.arrays[a.array]))
    _rewire(sdfg, plan, locals_)
    local_names = set(locals_.values())
    for n in state.data_nodes():
        if state.entry_node(n) is None and n.data not in local_names and state.degree(n) > 0:
            raise UnsupportedPattern(n.data, "", f"kernel '{k.label}' would run on every rank of grid {plan.grid} "
                                     "but still touches this global array (no constraint was derived for it)")
    return pre, post


def _rewire(sdfg: SDFG, plan: KernelPlan, locals_):
    """Points the kernel at its rank-local arrays (map kernels: memlets offset into the local block)."""
    k = plan.kernel
    state = k.state
    subsets_ = {(a.array, a.direction): a.subset for a in plan.accesses}
    if k.kind == "map":
        entry, exit_ = k.node, state.exit_node(k.node)
        outer = [(e, "in") for e in state.in_edges(entry)] + [(e, "out") for e in state.out_edges(exit_)]
        inner = state.scope_subgraph(entry, include_entry=True, include_exit=True).edges()
    else:
        outer = [(e, "in") for e in state.in_edges(k.node)] + [(e, "out") for e in state.out_edges(k.node)]
        inner = []
    for e, direction in outer:
        arr = e.data.data
        if (arr, direction) not in locals_:
            continue
        local = locals_[(arr, direction)]
        node = e.src if direction == "in" else e.dst
        node.data = local
        wcr = e.data.wcr
        e.data = Memlet.from_array(local, sdfg.arrays[local])
        e.data.wcr = wcr
    for e in inner:
        arr = e.data.data
        if arr is None:
            continue
        path = state.memlet_path(e)
        direction = "in" if path[0].dst is k.node else "out"
        if (arr, direction) not in locals_:
            continue
        e.data.data = locals_[(arr, direction)]
        e.data.subset.offset([b for b, _, _ in subsets_[(arr, direction)]], negative=True)


def _tile_body(plan: KernelPlan):
    """Nested SDFG kernel: tile its maps, shrink its arrays to the rank's block, offset inner memlets."""
    k = plan.kernel
    body, node = k.body, k.body_node
    for c in plan.coords:
        if c:
            if c not in body.symbols:
                body.add_symbol(c, dace.int32)
            node.symbol_mapping[c] = dace.symbolic.symbol(c, dace.int32)
    for t in plan.inner:
        for st in ordered_states(body):
            for n in st.nodes():
                if isinstance(n, nodes.MapEntry) and n.map is t.info.map:
                    RankTileMap.apply_to(body, options={"grid": list(t.grid), "coords": [c or "" for c in t.coords]},
                                         map_entry=n)
    for arr, subset in plan.body_constraints.items():
        desc = body.arrays[arr]
        shape = block_shape(subset, plan.grid, plan.coords)
        desc.set_shape(shape)
        begin = [b for b, _, _ in subset]
        for st in ordered_states(body):
            for e in st.edges():
                if e.data.data == arr:
                    e.data.subset.offset(begin, negative=True)

