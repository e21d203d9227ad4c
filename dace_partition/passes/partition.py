"""The partition pass: the kernels of a scheduled SDFG become SPMD kernels (thesis Listing 1).

Data flows one way: kernels and grids -> constraints (:mod:`..analysis`) -> Moves -> solver -> MPI.
The program that results keeps every global array on rank 0 (inputs are given there, outputs appear
there). Each scheduled kernel runs on its own process grid (the first ``prod(grid)`` ranks), in a state of
its own:

    scatter state (DistributedMemlets, every rank)
    -> kernel state on rank-local arrays (only the grid's ranks)
    -> gather state (DistributedMemlets, every rank)

Everything not scheduled (and every kernel on a grid of one rank) runs on rank 0 on the global arrays.
:func:`partition` prepares the program, plans it once (:mod:`dace_partition.plan`) and applies the plan with
one Pipeline (:mod:`.pipeline`: this partition, then round-trip fusion, rank-local arguments, guards, GPU
offload...); it returns the report rendered from the plan and the solvers' answers for the Moves that remain.
"""
import itertools
import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Tuple

import dace
import numpy as np
import sympy
from dace import nodes
from dace.memlet import Memlet
from dace.properties import CodeBlock
from dace.sdfg import SDFG, SDFGState

from ..analysis.constraints import Direction, KernelPlan, known_sizes, plan_nested_kernel
from ..analysis.lapack_calls import lapack_types
from ..plan import KernelMoves, LoweringPlan, Site, plan_lowering, role, scatters
from ..solvers.node import DistributedMemlet
from ..runtime.environment import ENVIRONMENT
from ..compat import is_one_element_scalar, rebase_nested_argument, restride_narrowed_argument, shift_interstate_reads
from ..errors import UnsupportedPattern
from ..ir import Device, Distribution, IoMode, Move, MoveKind, ProgramRecord, Role, attach
from .contractions import ContractionsToBlas
from .fusion import FuseRoundTrips, FusionKind
from .localize_io import LocalizeArguments
from .loops import FuseLoops
from .graph import PlanPass
from .pipeline import LoweringOptions, lowering_pipeline
from .prepare import keep_names, split_kernels
from .graph import RANK, distributed_memlets, guard, has_moves, trips_of
from ..report import Steps, KernelReport, LoweringReport, entry
from ..schedule import Kernel, KernelKind, discover, expand_all, ordered_states
from ..solvers.base import block_shape
from ..solvers.registry import get
from ..analysis.rank_tiling import RankTileMap



def partition(sdfg: SDFG, grids: Dict[str, Tuple[int, ...]], options: LoweringOptions,
              kernels: Optional[List[Kernel]] = None) -> LoweringReport:
    """Lowers ``sdfg`` in place for ``grids`` ({map name: grid}, already checked): the kernels are prepared
    (``kernels``: ``split_kernels``'s, where the caller prepared ``sdfg`` already) and planned once (:func:`~dace_partition.plan.plan_lowering`: every constraint, Move and
    solver, before any rewrite, so callers lower a copy and errors come first), and the plan is applied by
    one Pipeline (:func:`.pipeline.lowering_pipeline`). The report is rendered from the plan and the
    pipeline's results."""
    steps = Steps()
    kernels, expanded = prepare_kernels(sdfg, grids, kernels)
    steps.done("prepare and discover kernels")
    plan = plan_lowering(sdfg, kernels, grids, options.solvers, expanded, fuse=options.fuse, io=options.io,
                         device=options.device)
    steps.done("constraints and solver choice")
    rep, by_kernel = plan_report(sdfg.name, plan)
    pipeline = lowering_pipeline(plan, options, rep)
    results = pipeline.apply_pass(sdfg, {}) or {}
    steps.timed(pipeline.times)
    rep.timings = steps.times
    carried = results.get(FuseLoops.__name__)
    for f in results.get(FuseRoundTrips.__name__, []) + (carried.fusions if carried is not None else []):
        _note_fusion(f, by_kernel)
    layouts = {}
    if options.io == IoMode.DISTRIBUTED:
        layouts, changes = results[LocalizeArguments.__name__]
        rep.io = str(IoMode.DISTRIBUTED)
        for name, info in changes.items():
            if info.grid_id in by_kernel:
                by_kernel[info.grid_id].notes.append(f"'{name}' is a rank-local argument (io='distributed')")
            for k in info.readers:
                if k in by_kernel:
                    by_kernel[k].notes.append(f"reads the tiles of rank-local argument '{name}': no communication")
    note_contractions(rep, results.get(ContractionsToBlas.__name__, []))
    if options.device == Device.GPU:
        from .gpu import note_kernels_on_gpu
        note_kernels_on_gpu(rep)
    _report_moves(sdfg, rep, by_kernel, options.solvers)
    rep.persistent_bytes = results[StartGrids.__name__]
    steps.done("report")
    twins = dict(rep.residency.device_twins) if rep.residency is not None else {}
    attach(sdfg, ProgramRecord(sdfg.name, rep.ranks_needed, options.io, layouts, twins))
    return rep


def prepare_kernels(sdfg: SDFG, grids: Dict[str, Tuple[int, ...]], kernels: Optional[List[Kernel]] = None
                    ) -> Tuple[List[Kernel], set]:
    """The last normalisation before planning, in place: states split so that each kernel has its own
    (unless ``kernels``, the split program's, are given), and library nodes whose tiles would be uneven
    replaced by their pure expansions. Returns the kernels (with the names the schedule was written
    against) and the labels of the expanded nodes."""
    if kernels is None:
        kernels = split_kernels(sdfg)
    expanded = _expand_uneven_library_nodes(sdfg, kernels, grids)
    if expanded:
        kernels = keep_names(discover(sdfg), kernels)
    return kernels, expanded


def plan_report(name: str, plan: LoweringPlan) -> Tuple[LoweringReport, Dict[int, KernelReport]]:
    """The report's kernel lines, rendered from the plan: each kernel, its grid and what the plan says of
    it, and {kernel index: line} of the partitioned kernels. The passes add their notes and the
    communication later."""
    rep, lines = LoweringReport(name, plan.ranks_needed), {}
    analysed = {id(a.kernel): a for a in [k.analysis for k in plan.kernels] + list(plan.one_rank)}
    for k in plan.program:
        a = analysed.get(id(k))
        if a is None:  # not scheduled
            rep.kernels.append(KernelReport(k.label, k.kind, None))
            continue
        kr = KernelReport(a.principal if k.kind != KernelKind.MAP else k.maps[0].name, k.kind, a.grid)
        if k.kind == KernelKind.NESTED and k.label in plan.expanded:
            kr.notes.append("uneven tiles: the library node was replaced by its pure expansion, so no rank "
                            "computes on the padding of its local buffers")
        for t in a.inner:
            if t.derived:
                kr.notes.append(f"derived grid {t.grid} for '{t.info.name}' from '{a.principal}'")
        if a.size == 1:
            kr.notes.append("grid of one rank: runs on rank 0 on the global arrays, no communication")
            kr.grid = None
        else:
            lines[k.index] = kr
        rep.kernels.append(kr)
    if not plan.kernels:
        rep.unsplit = _why_unsplit(list(plan.program), dict(plan.grids))
    return rep, lines


def note_contractions(rep: LoweringReport, decisions) -> None:
    """Each contraction that became a GEMM, on the report line of its kernel."""
    by_name = {k.name: k for k in rep.kernels}
    for c in decisions:
        target = by_name.get(c.map) or next((k for k in rep.kernels if c.map.startswith(k.name)), None)
        if target is not None:
            target.notes.append(str(c))


@dataclass(frozen=True)
class Partitioned:
    """What :class:`PartitionKernels` made: the start-up state, the states that communicate or guard a
    kernel, and the kernels' own states."""
    init_state: SDFGState
    comm_states: FrozenSet[SDFGState]
    kernel_states: FrozenSet[SDFGState]
    # the node of each planned scatter and gather (Site), and of each one the loop carry makes (Made); the
    # passes that apply the plan keep it current
    sites: Dict[object, Tuple[SDFGState, DistributedMemlet]]
    gathers: Dict[SDFGState, SDFGState]  # each kernel's state -> the state of its gathers


class PartitionKernels(PlanPass):
    """Each planned kernel runs on its grid: its map is tiled (or its body's maps), it reads and writes
    rank-local buffers that a scatter state before it fills and a gather state after it empties, and it
    runs only on its grid's ranks. A start-up state reads each rank's grid coordinates."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> Partitioned:
        analyses = [km.analysis for km in self.plan.kernels]
        _scalars_to_arrays(sdfg, {a.array for p in analyses for a in p.accesses})
        init_state = _add_runtime_state(sdfg, analyses)
        comm, kernel_states, sites, gathers = {init_state}, set(), {}, {}
        for km in self.plan.kernels:
            pre, post = _apply_plan(sdfg, km, sites)
            gathers[km.kernel.state] = post
            comm |= {pre, post}
            kernel_states.add(km.kernel.state)
            comm |= set(guard(km.kernel.state, f"__dp{km.kernel.index}_member == 1"))
        return Partitioned(init_state, frozenset(comm), frozenset(kernel_states), sites, gathers)


class GuardRankZeroCode(PlanPass):
    """Every state that is neither a kernel's nor communication runs on rank 0 only (the code that is not
    partitioned, on the global arrays); with nothing partitioned, the other ranks end after start-up.
    Returns those states, in program order."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> List[SDFGState]:
        made: Partitioned = pipeline_results[PartitionKernels.__name__]
        skip = set(made.comm_states) | set(made.kernel_states)
        root_states = []
        for st in ordered_states(sdfg):
            if st in skip or st.number_of_nodes() == 0 or has_moves(st):
                continue
            root_states.append(st)
            skip |= set(guard(st, f"{RANK} == 0"))
        if not self.plan.kernels:
            _only_rank_0(sdfg, made.init_state)
        return root_states


class StartGrids(PlanPass):
    """The program makes each kernel's grid at start-up and frees them at exit; rank-local buffers are
    allocated once (:func:`_make_local_buffers_persistent`). Returns their bytes per rank."""

    def apply_pass(self, sdfg: SDFG, pipeline_results):
        for km in self.plan.kernels:
            dims = ", ".join(str(g) for g in km.grid)
            sdfg.append_init_code(f'dace_partition::init_grid({km.kernel.index}, "{km.analysis.principal}", '
                                  f'{{{dims}}});\n')
        sdfg.append_exit_code("dace_partition::free_grids();\n")
        return _make_local_buffers_persistent(sdfg)


class CheckMoves(PlanPass):
    """Every remaining move's blocks lie inside its array (:func:`check_moves`); it changes nothing."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> None:
        check_moves(sdfg, {km.kernel.index: km.analysis.principal for km in self.plan.kernels})


class SingleThreaded(PlanPass):
    """One thread per rank (:func:`single_threaded`)."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> bool:
        single_threaded(sdfg)
        return True


def _only_rank_0(sdfg: SDFG, init_state: SDFGState):
    """Nothing is partitioned: ranks other than 0 end right after start-up. Running the guarded program
    they would still evaluate interstate assignments on their own uninitialised copies of rank 0's data
    (spmv's ``start = A_row[i]``) and allocate transients of those sizes (``std::bad_alloc``)."""
    (e, ) = sdfg.out_edges(init_state)
    mid = sdfg.add_state("dace_partition_rank_0_only")
    sdfg.remove_edge(e)
    sdfg.add_edge(init_state, mid, dace.InterstateEdge(assignments=dict(e.data.assignments)))
    sdfg.add_edge(mid, e.dst, dace.InterstateEdge(condition=f"{RANK} == 0"))
    sdfg.add_edge(mid, sdfg.add_state("dace_partition_other_ranks_done"),
                  dace.InterstateEdge(condition=f"not ({RANK} == 0)"))


def _why_unsplit(kernels: List[Kernel], grids) -> str:
    """Why the whole program runs on rank 0 (for the report)."""
    tail = "; the whole program runs on rank 0, the other ranks wait"
    if not any(k.maps for k in kernels):
        return ("the program has no map to split (its work is scalar code in loops, which DaCe's LoopToMap could "
                "not make maps: the iterations depend on each other or on data)" + tail)
    if not any(m.name in grids for k in kernels for m in k.maps):
        return "the schedule names none of the program's maps" + tail
    return "every scheduled map has a grid of one rank" + tail


def _note_fusion(f, by_kernel):
    producer, consumer = by_kernel.get(f.producer), by_kernel.get(f.consumer)
    if f.kind == FusionKind.REUSE:
        if consumer is not None:
            consumer.notes.append(f"reuses the blocks of input '{f.array}' scattered for an earlier kernel")
        return
    if f.kind == FusionKind.INSIDE:
        if consumer is not None:
            consumer.notes.append(f"the blocks it writes of '{f.array}' start as a copy from its read block (with "
                                  "the halo, scattered once before the loop), not a second scatter")
        return
    if producer is not None:
        note = f"'{f.array}' is not gathered to rank 0 (fused with the next kernels)"
        if note not in producer.notes:
            producer.notes.append(note)
    if consumer is not None and f.kind == FusionKind.NOOP:
        consumer.notes.append(f"reads '{f.array}' from the previous kernel's local buffer: no communication")


def _refusals(move: Move, chosen: str, solvers) -> list:
    """(name, reason) of each solver for this kind of move that comes before ``chosen`` and refuses it."""
    out = []
    for s in solvers:
        if s.name == chosen:
            break
        if move.kind in s.kinds:
            why = s.refuse(move)
            if why is not None:
                out.append((s.name, why))
    return out


def _report_moves(sdfg: SDFG, rep: LoweringReport, by_kernel, solvers):
    """The report's communication, once, from the solvers' answers for the Moves that remain (those made
    by the passes after the partition too), with why each solver tried before the chosen one refused."""
    for st, dm in distributed_memlets(sdfg):
        move = dm.move()
        solver = get(dm.implementation)
        e, t = entry(move, solver, _refusals(move, dm.implementation, solvers), trips_of(sdfg, st))
        dm.decision = solver.decision(move)  # what the build emits: the choice this report priced
        rep.traffic.append(t)
        kr = by_kernel.get(dm.grid_id)
        if kr is not None:
            kr.comm.append(e)


def check_moves(sdfg: SDFG, maps: Dict[int, str]) -> None:
    """Every block of every move lies in its array (checked here where the sizes are known; the runtime
    checks the others when a site is first used), and no move uses a symbol that is undefined where it
    runs (a loop's variable in a move outside that loop): such a program would not compile, or would read
    an uninitialised offset. Raises UnsupportedPattern naming the array, the map and the rank."""
    from .loops import block_symbols, find_loops
    inside, ok = [], set()  # (loop body, symbols its iterations assign); the edges that assign them there
    loops = find_loops(sdfg)
    for lp in loops:
        edges = [e for st in lp.body for e in sdfg.out_edges(st) if e.dst in lp.body] + list(lp.entries)
        names = {x for e in edges for x in e.data.assignments}
        ok |= {id(e) for e in edges}
        if names:
            inside.append((lp.body, names))
    # A symbol also assigned outside every loop (``k = 0`` before the code of a one-trip loop) is defined
    # there too: only symbols that loops alone assign are checked.
    elsewhere = {x for e in sdfg.edges() if id(e) not in ok for x in e.data.assignments}
    inside = [(body, names - elsewhere) for body, names in inside]
    for st, dm in distributed_memlets(sdfg):
        move = dm.move()
        name = maps.get(dm.grid_id, f"grid {dm.grid_id}")
        used = block_symbols(dm)
        # stray: assigned by loops alone, and by none of the loops around this state
        stray = sorted({x for _, names in inside for x in used & names} -
                       {x for body, names in inside if st in body for x in names})
        if stray:
            raise UnsupportedPattern(move.array, move.grid_side.range, f"the blocks of map '{name}' use "
                                     f"{', '.join(map(repr, stray))}, which is not defined where the move runs "
                                     f"(state '{st.label}', outside the loop that assigns it)")
        shape = move.shape
        if any(not isinstance(n, (int, sympy.Integer)) and not getattr(n, "is_Integer", False) for n in shape):
            continue
        for dist in (move.src, move.dst):
            blocks = None if dist.is_root else dist.blocks()
            for q, (start, count) in enumerate(blocks or ()):
                for j, (b, c, n) in enumerate(zip(start, count, shape)):
                    if c > 0 and (b < 0 or b + c > int(n)):
                        raise UnsupportedPattern(move.array, dist.range, f"the block of grid rank {q} of map "
                                                 f"'{name}' is [{b}, {b + c}) in dimension {j}, outside the "
                                                 f"array (size {n})")


def single_threaded(sdfg: SDFG):
    """One thread per rank: library nodes other than BLAS and LAPACK calls are expanded (their maps
    included), and every CPU map becomes a sequential loop, so DaCe emits no OpenMP and no atomic updates.
    LAPACK's nodes have no pure expansion: they stay for the build, which expands them to the BLAS
    library the rest of the program uses (``toolchain.blas_build``)."""
    from dace.libraries.blas import nodes as blas_nodes
    keep = (DistributedMemlet, blas_nodes.Gemm, blas_nodes.Gemv, blas_nodes.BatchedMatMul, blas_nodes.Dot,
            blas_nodes.Ger, blas_nodes.Axpy) + lapack_types()
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
            _index_in_interstate_code(sdfg, name)


def _index_in_interstate_code(sdfg: SDFG, name: str):
    """Conditions and assignments that read the scalar ``name`` by value read its element ``name[0]``."""
    pattern = re.compile(rf"\b{re.escape(name)}\b(?!\s*\[)")
    for e in sdfg.all_interstate_edges():
        cond = e.data.condition.as_string
        if pattern.search(cond):
            e.data.condition = CodeBlock(pattern.sub(f"{name}[0]", cond))
        for k, v in list(e.data.assignments.items()):
            if pattern.search(v):
                e.data.assignments[k] = pattern.sub(f"{name}[0]", v)


def _width_varies(width, plan: KernelPlan, syms, known=None) -> bool:
    """Whether a block width depends on the grid coordinate. ``int_ceil(1200*r + 1200, 2) -
    int_ceil(1200*r, 2)`` is 600 on every rank, which SymPy cannot see symbolically: where the width holds
    no other symbol once the program's constants (``known``: sizes specialized with ``sdfg.specialize``)
    are in, it is evaluated at every grid position (a few, known when lowering)."""
    if known:
        width = width.subs({f: known[str(f)] for f in width.free_symbols if str(f) in known})
    used = width.free_symbols & syms
    if not used:
        return False
    if width.free_symbols - syms:
        return True
    by_name = {str(f): f for f in used}
    values = set()
    for pos in itertools.product(*(range(g) for g in plan.grid)):
        at = {by_name[c]: p for c, p in zip(plan.coords, pos) if c in by_name}
        v = width.subs(at)
        if v.free_symbols:
            return True
        values.add(int(v))
        if len(values) > 1:
            return True
    return False


def _uneven(plan: KernelPlan, known=None) -> bool:
    """Whether some rank's block is smaller than the local buffer (uneven or symbolic tiles)."""
    syms = {dace.symbolic.symbol(c, dace.int32) for c in plan.coords if c}
    for subset in plan.body_constraints.values():
        blocks = Distribution.on_grid(subset, plan.grid, plan.coords, plan.kernel.index).blocks()
        if blocks is None:
            if any(_width_varies(sympy.sympify(e - b), plan, syms, known) for b, e, _ in subset):
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
        if k.kind != KernelKind.LIBRARY or not any(m.name in grids for m in k.maps):
            continue
        known = {name: int(v) for name, (_, v) in sdfg.constants_prop.items() if isinstance(v, (int, np.integer))}
        if not _uneven(plan_nested_kernel(sdfg, k, grids), known):
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


def _apply_plan(sdfg: SDFG, km: KernelMoves, sites: Dict[Site, tuple]):
    plan = km.analysis
    k = plan.kernel
    state = k.state
    for c in plan.coords:
        if c and c not in sdfg.symbols:
            sdfg.add_symbol(c, dace.int32)
    if k.kind == KernelKind.MAP:
        n = len(k.node.map.params)  # a replica dimension (past the parameters) tiles nothing
        RankTileMap.apply_to(sdfg, options={"grid": list(plan.grid[:n]), "coords": [c or "" for c in plan.coords[:n]]},
                             map_entry=k.node)
    elif k.kind == KernelKind.NESTED:
        _drop_unused_connectors(state, k.node, plan.unused)
        _tile_body(plan)

    buffers = km.buffer_map()
    locals_: Dict[Tuple[str, str], str] = {}
    for (array, which), (name, subset) in buffers.items():
        if name not in sdfg.arrays:
            desc = sdfg.arrays[array]
            sdfg.add_array(name, block_shape(subset, plan.grid, plan.coords, known_sizes(sdfg)), desc.dtype,
                           storage=desc.storage,
                           transient=True)
        locals_[(array, which)] = name

    pre = state.parent_graph.add_state_before(state, f"{state.label}_scatter",
                                              is_start_block=state.parent_graph.start_block is state)
    post = state.parent_graph.add_state_after(state, f"{state.label}_gather")
    for a in scatters(plan, buffers):
        local = locals_[(a.array, role(a))]
        pm = km.find(a.array, MoveKind.SCATTER, role(a))
        dm = DistributedMemlet(f"scatter_{a.array}" + ("" if role(a) == Role.IN else "_out"), pm.move)
        dm.implementation = pm.solver
        sites[Site(k.index, a.array, MoveKind.SCATTER, role(a))] = (pre, dm)
        pre.add_edge(pre.add_read(a.array), None, dm, "_in", Memlet.from_array(a.array, sdfg.arrays[a.array]))
        pre.add_edge(dm, "_out", pre.add_write(local), None, Memlet.from_array(local, sdfg.arrays[local]))
    for a in plan.accesses:
        if a.direction == Direction.OUT:
            local = locals_[(a.array, Role.OUT)]
            pm = km.find(a.array, MoveKind.GATHER, Role.OUT)
            dm = DistributedMemlet(f"gather_{a.array}", pm.move)
            dm.implementation = pm.solver
            sites[Site(k.index, a.array, MoveKind.GATHER, Role.OUT)] = (post, dm)
            post.add_edge(post.add_read(local), None, dm, "_in", Memlet.from_array(local, sdfg.arrays[local]))
            post.add_edge(dm, "_out", post.add_write(a.array), None, Memlet.from_array(a.array, sdfg.arrays[a.array]))
    _rewire(sdfg, plan, locals_, buffers)
    local_names = set(locals_.values())
    for n in state.data_nodes():
        if state.entry_node(n) is None and n.data not in local_names and state.degree(n) > 0:
            raise UnsupportedPattern(n.data, "", f"kernel '{k.label}' would run on every rank of grid {plan.grid} "
                                     "but still touches this global array (no constraint was derived for it)")
    return pre, post


def _drop_unused_connectors(state, node: nodes.NestedSDFG, unused):
    """Removes the connectors of ``node`` that its body never touches (the plan's ``unused``), their edges,
    the arrays behind them inside and outer access nodes left with no edge: every rank runs the body on its
    own buffers, and an argument nobody reads needs none."""
    for conn in unused:
        for e in [e for e in state.in_edges(node) if e.dst_conn == conn] + \
                 [e for e in state.out_edges(node) if e.src_conn == conn]:
            outer = e.src if e.dst is node else e.dst
            state.remove_edge(e)
            if isinstance(outer, nodes.AccessNode) and state.degree(outer) == 0:
                state.remove_node(outer)
        node.remove_in_connector(conn)
        node.remove_out_connector(conn)
        if conn in node.sdfg.arrays:
            node.sdfg.remove_data(conn, validate=False)


def _rewire(sdfg: SDFG, plan: KernelPlan, locals_, buffers):
    """Points the kernel at its rank-local arrays (map kernels: memlets offset into the local block).

    Every read of an array, through whichever connector, is re-based onto the same buffer (the origin of
    the reads' bounding box), so a stencil runs unchanged on block plus halo."""
    k = plan.kernel
    state = k.state
    subsets_ = {key: subset for key, (_, subset) in buffers.items()}
    if k.kind == KernelKind.MAP:
        entry, exit_ = k.node, state.exit_node(k.node)
        outer = [(e, Role.IN) for e in state.in_edges(entry)] + [(e, Role.OUT) for e in state.out_edges(exit_)]
        inner = state.scope_subgraph(entry, include_entry=True, include_exit=True).edges()
    else:
        outer = [(e, Role.IN) for e in state.in_edges(k.node)] + [(e, Role.OUT) for e in state.out_edges(k.node)]
        inner = []
    for e, which in outer:
        arr = e.data.data
        if (arr, which) not in locals_:
            continue
        local = locals_[(arr, which)]
        node = e.src if which == Role.IN else e.dst
        node.data = local
        wcr = e.data.wcr
        e.data = Memlet.from_array(local, sdfg.arrays[local])
        e.data.wcr = wcr
    rebased = set()
    for e in inner:
        arr = e.data.data
        if arr is None:
            continue
        path = state.memlet_path(e)
        which = Role.IN if path[0].dst is k.node else Role.OUT
        if (arr, which) not in locals_:
            continue
        local = locals_[(arr, which)]
        begin = [b for b, _, _ in subsets_[(arr, which)]]
        e.data.data = local
        e.data.subset.offset(begin, negative=True)
        for n, conn in ((e.dst, e.dst_conn), (e.src, e.src_conn)):  # DaCe 2: whole arrays into map bodies
            if isinstance(n, nodes.NestedSDFG) and conn and (n, conn) not in rebased:
                rebased.add((n, conn))
                if not rebase_nested_argument(n, conn, sdfg.arrays[arr].shape, sdfg.arrays[local], begin):
                    restride_narrowed_argument(n, conn, sdfg.arrays[arr], sdfg.arrays[local])


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
        shape = block_shape(subset, plan.grid, plan.coords, known_sizes(k.state.sdfg))
        if not is_one_element_scalar(desc, shape):  # DaCe 2's Reduce writes a Scalar (compat)
            desc.set_shape(shape)
        begin = [b for b, _, _ in subset]
        for st in ordered_states(body):
            for e in st.edges():
                if e.data.data == arr:
                    e.data.subset.offset(begin, negative=True)
        shift_interstate_reads(body, arr, begin)  # DaCe 2 reads elements on interstate edges (compat)

