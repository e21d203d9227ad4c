"""The cost model of a whole schedule: a program's kernels, each priced on each candidate grid, and the
data flow between them.

Each kernel is planned on each candidate (:func:`dace_partition.plan.plan_kernel`: its scatters and
gathers with the solvers' costs, its rank-local buffers) and its work is estimated on the rank's tile. A
schedule (one candidate per kernel) is then priced by walking every array's uses in program order, as the
lowering's passes would treat them:

* an array that only partitioned kernels touch (a transient, or any array whose uses all lie in one loop)
  stays on the grids: a reader gets the last writer's blocks by the grid-to-grid Move that the solvers
  would choose (nothing when the blocks are the same, an allreduce of partial sums, a halo exchange, a
  synthesized redistribution), and it is scattered once before and gathered once after;
* any other array goes through rank 0: gathered after each partitioned write, scattered before each
  partitioned read (an input nobody writes is scattered once per distinct block layout, where that first
  scatter runs on every path to the later read: two exclusive branches scatter it twice);
* an accumulation into blocks that several ranks hold (every rank adding into a whole histogram) is not
  fused: its prior value goes out from, and its sums come back to, rank 0, and so do the reads after it;
* inside a loop, the uses are walked twice, once for the first iteration and once, multiplied by the trip
  count minus one, for the others (loop-carried values come from the previous iteration's writer; inputs
  the loop does not write are not scattered again); a use inside loops nested in that one counts their
  trips too. An array that one kernel of the loop writes and only partitioned kernels touch there stays on
  that writer's blocks for the whole loop (an argument that code outside the loop also uses: scattered
  before the loop and gathered after it), unless its values combine (an accumulation or reduction);
* inside a loop, a copy ``X[box] = T`` of a kernel's temporary into an array (how DaCe writes
  ``out[:] = out + z * x``) is folded as the loop pass folds it (``plan.carry.copy_to_fold``): the kernel
  writes ``X``'s shifted blocks, and the copy moves nothing;
* with ``io="distributed"`` an argument is not scattered nor gathered, but it has one layout (its
  writer's blocks, else its first reader's: ``plan.local_io``), and a kernel that reads other blocks
  pays the move from it.

The prediction is time per rank (compute + alpha * messages + beta * bytes, at the rates of
:mod:`.machine`) and the bytes each rank receives: the unit the report and the PMPI counter use.
"""
import copy
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import sympy
from dace import nodes
from dace.sdfg import SDFG
from dace.subsets import Range

from ..analysis.constraints import find_entry
from ..compat import all_states
from ..errors import ScheduleError, UnsupportedPattern
from ..ir import ROOT, Cost, Distribution, Move, MoveKind, Role
from ..ir.relations import covers, offset_inside
from ..plan import KernelMoves, analyse_kernel, plan_kernel
from ..passes.contractions import is_contraction
from ..plan.fusion import only_source
from ..schedule import Kernel, KernelKind, Replicated, check_grid, ordered_states
from ..solvers.registry import choose
from .machine import Machine

# Library nodes that stay calls into BLAS on the rank-local tile (their work runs at the BLAS rate).
_BLAS = ("MatMul", "Gemm", "Gemv", "BatchedMatMul", "Dot", "Ger", "Einsum", "TensorDot")
DEFAULT_TRIPS = 10  # a loop whose trip count depends on data is priced as this many iterations
DEFAULT_SIZE = 512  # a size symbol the caller gave no value for


@dataclass(frozen=True)
class Candidate:
    """One choice for a kernel: its principal map's grid (the schedule value), or not partitioned."""
    value: object  # tuple grid, Replicated, or None (runs on rank 0)

    @property
    def partitioned(self) -> bool:
        return self.value is not None

    def __str__(self):
        return "rank 0 (not partitioned)" if self.value is None else str(self.value)


@dataclass
class Priced:
    """A kernel on one candidate: seconds of compute per rank and execution, its scatters and gathers."""
    candidate: Candidate
    compute: float
    ranks: int = 1
    reads: Dict[str, Tuple[Distribution, Cost]] = field(default_factory=dict)  # array -> scatter into "in"
    writes: Dict[str, Tuple[Distribution, Cost]] = field(default_factory=dict)  # array -> gather
    # array -> prior values of its write scattered into the write's blocks: a read like the others (the
    # previous writer's blocks may hold them: FuseRoundTrips fuses this scatter as it fuses a read)
    fills: Dict[str, Tuple[Distribution, Cost]] = field(default_factory=dict)
    memory: int = 0  # bytes of rank-local buffers per rank
    # arrays this kernel accumulates into blocks that several ranks hold (a histogram's ``hist[b] += 1``
    # on every rank): the prior value must count once, so FuseRoundTrips leaves such a move to rank 0
    overlapping: set = field(default_factory=set)
    # arrays whose moves combine values (an accumulation or a reduction op): FuseLoops leaves them alone
    combined: set = field(default_factory=set)
    # kernels of a GPU row chain only (ProgramModel._row_part): seconds of its operations on the tile, and
    # the bytes per rank of each array it touches
    ops: float = 0.0
    arrays: Dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Chain:
    """A GPU row chain in the model's terms: its kernels (indices, in order), its loops over the rows as
    (arrays read, array stored or None, kernels evaluated), and the pass's description."""
    kernels: Tuple[int, ...]
    loops: tuple
    text: str


@dataclass
class Use:
    actor: int  # kernel index, or -1 for code on rank 0 (tasklets, copies, conditions)
    read: bool
    write: bool
    loop: Optional[object]  # the outermost loop around it (None outside loops)
    inner: int = 1  # runs per iteration of that loop: the trips of the loops nested in it around the use
    node: bool = True  # an access node in a state (False: a condition or assignment reads it)


@dataclass
class Prediction:
    """What a schedule costs per call: seconds per rank, and bytes each rank receives."""
    time: float
    compute: float
    communication: float
    bytes_per_rank: List[int]
    memory: int
    refused: int = 0  # arguments ``lower`` would refuse to keep rank-local (io="distributed"): time is inf

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_per_rank)

    def __str__(self):
        return (f"{self.time * 1e3:.3f} ms per call ({self.compute * 1e3:.3f} ms compute, "
                f"{self.communication * 1e3:.3f} ms communication), {self.total_bytes} B moved, "
                f"max {max(self.bytes_per_rank or [0])} B/rank, {self.memory} B of rank-local buffers per rank")


def prepare(sdfg: SDFG, sizes: Optional[Dict[str, int]] = None) -> Tuple[SDFG, Dict[str, int], List[Kernel]]:
    """A copy of ``sdfg`` ready to be planned (one work node per state, as the lowering has it), with every
    size symbol fixed: ``sizes``, else the SDFG's constants, else :data:`DEFAULT_SIZE`; the values assumed;
    and its kernels, whose maps carry the names ``dp.maps`` gives them (discovered before the states are
    split, as ``lower`` checks a schedule)."""
    work, values, kernels, _ = prepare_with_rules(sdfg, sizes, None)
    return work, values, kernels


def prepare_with_rules(sdfg: SDFG, sizes: Optional[Dict[str, int]], solvers
                       ) -> Tuple[SDFG, Dict[str, int], List[Kernel], Optional["LoweringRules"]]:
    """:func:`prepare`, and the :class:`LoweringRules` that check a candidate as ``lower`` will: None
    where the search assumed no size (its copy then has the program's own sizes, and pricing a candidate
    runs lower's rules on it already)."""
    from ..passes.prepare import split_kernels
    work = copy.deepcopy(sdfg)
    kernels = split_kernels(work)
    values = {}
    for s in sorted(str(x) for x in work.free_symbols):
        if s in work.constants:
            continue
        values[s] = int((sizes or {}).get(s, DEFAULT_SIZE))
    rules = None
    if values and solvers is not None:  # the program as lower plans it: before its sizes are fixed below
        symbolic, symbolic_kernels = copy.deepcopy((work, kernels))
        rules = LoweringRules(symbolic, symbolic_kernels, solvers)
    if values:
        work.specialize(values)
    # numbers instead of size symbols in every range and memlet: DaCe's propagation through a tile then
    # simplifies integers, several times faster than expressions in N (the search plans many tiles)
    fixed = {k: v for k, v in work.constants.items() if isinstance(v, (int, np.integer))}
    if fixed:
        work.replace_dict({k: str(int(v)) for k, v in fixed.items()})
        numbers = {name: int(v) for name, v in fixed.items()}
        for k in kernels:
            if k.body_node is not None:
                _numbers_inside(k.body_node, numbers)
    return work, values, kernels, rules


class LoweringRules:
    """The checks ``lower`` makes of one kernel on one grid, made by the same functions on the program
    as ``lower`` plans it: :func:`~dace_partition.schedule.check_grid`, the constraint analysis
    (:func:`~dace_partition.plan.analyse_kernel`: views, triangular blocks that grow with the grid
    coordinate, accesses DaCe cannot propagate) and the plan (:func:`~dace_partition.plan.plan_kernel`:
    loop-sized buffers, one buffer per role, a solver for every move).

    The search prices a copy whose size symbols it fixed (:func:`prepare`); ``lower`` keeps the program's
    own sizes, and some rules answer differently on numbers: a block that grows with the grid coordinate
    (syrk's rows ``C[i, 0:i + 1]`` split over ``i``) gets a buffer of the largest block where the sizes are
    known, but is refused where they are symbolic (buffers are sized by rank 0's block). So where the
    search assumed sizes, the candidates it would choose are checked here too, and one that ``lower``
    would refuse is dropped with ``lower``'s reason (``auto_schedule`` then chooses again). Only chosen
    candidates are checked: on symbolic sizes DaCe's propagation is several times slower than on numbers
    (:func:`prepare`), and most candidates are never chosen."""

    def __init__(self, sdfg: SDFG, kernels: List[Kernel], solvers):
        self.sdfg, self.solvers = sdfg, solvers
        self.kernels = {k.index: k for k in kernels}

    def check(self, index: int, value) -> None:
        """Raises :class:`ScheduleError` or :class:`UnsupportedPattern`, as ``lower`` would, where the
        kernel ``index`` cannot be lowered on the candidate ``value`` (its principal map's grid)."""
        k = self.kernels[index]
        info = principal_map(k)
        grids = {info.name: check_grid(info, value)}
        analysis = analyse_kernel(self.sdfg, k, grids)
        if analysis.size > 1:
            plan_kernel(self.sdfg, k, grids, self.solvers, analysis)


def _numbers_inside(node: nodes.NestedSDFG, outer: Dict[str, int]):
    """The same numbers inside a kernel's body: every symbol its ``symbol_mapping`` ties to a number, in
    every range, shape and memlet, recursively. ``replace_dict`` stops at a nested SDFG (its symbols are
    its own), and a library node's expansion was built before the sizes were fixed; without this every
    tile of a reduction or a nested call is propagated through ``int_ceil(r*(H + 2), 2)`` instead of
    ``8*r``, a SymPy simplification ten times slower (resnet's search: most of its time)."""
    known = {}
    for inner, expr in node.symbol_mapping.items():
        try:
            x = sympy.sympify(expr)
            x = x.subs({f: outer[str(f)] for f in x.free_symbols if str(f) in outer})
        except (TypeError, ValueError, sympy.SympifyError):
            continue
        if x.is_Integer and str(inner) not in node.sdfg.constants:  # a float stays a symbol
            known[str(inner)] = int(x)
    if not known:
        return
    node.sdfg.replace_dict({s: str(v) for s, v in known.items()})
    for st in all_states(node.sdfg):
        for n in st.nodes():
            if isinstance(n, nodes.NestedSDFG):
                _numbers_inside(n, known)


class ProgramModel:
    """A program's kernels with their priced candidates and every array's uses (module docstring)."""

    def __init__(self, sdfg: SDFG, kernels: List[Kernel], ranks: int, solvers, machine: Machine, io: str = "root",
                 memory_per_rank: Optional[int] = None, candidates: Optional[Dict[int, List[Candidate]]] = None,
                 sizes: Optional[Dict[str, int]] = None):
        self.sdfg, self.ranks, self.solvers, self.machine = sdfg, ranks, solvers, machine
        self.sizes = dict(sizes or {})  # values of symbols that are not the SDFG's (a loop's bound argument)
        self._kernel_trips: Dict[int, int] = {}
        self._same: Dict[tuple, bool] = {}
        self._memo: Dict[tuple, Tuple[List[int], float]] = {}
        self._kernel_parts: Dict[tuple, tuple] = {}
        self._branch: Dict[tuple, Tuple[List[int], float]] = {}  # (world, partitioned kernels) -> part
        self._symbols: Optional[tuple] = None  # (of transients, of each kernel's state): _branch_part
        self._branching = False
        self.io, self.memory_per_rank = io, memory_per_rank
        self.kernels: List[Kernel] = kernels  # from prepare(): named as dp.maps names them
        self.refused: Dict[int, List[Tuple[Candidate, str]]] = {}
        self.priced: Dict[int, List[Priced]] = {}
        self._moves: Dict[tuple, Optional[Cost]] = {}
        self._layout = False  # the node layout, looked up on first need (None: one node)
        self._contractions: Dict[int, bool] = {}
        self._folds, self._copies = self._copy_folds()
        self._chains = self._row_chains()
        self._in_chain = {k for c in self._chains for k in c.kernels}
        self._rows: Dict[tuple, float] = {}
        for k in self.kernels:
            cands = candidates[k.index] if candidates and k.index in candidates else candidate_grids(k, ranks)
            self.priced[k.index] = self._price_all(k, cands)
        self._uses()

    # -- kernels on candidates -------------------------------------------------------------------------
    def principal(self, k: Kernel):
        return principal_map(k)

    def _price_all(self, k: Kernel, cands: Sequence[Candidate]) -> List[Priced]:
        out = [self._row_parts(k, None, Priced(Candidate(None), self.work(k, None) * 1.0, 1))]
        if not k.maps:
            return out
        for c in cands:
            if not c.partitioned:
                continue
            try:
                out.append(self._price(k, c))
            except (ScheduleError, UnsupportedPattern) as e:
                self.refused.setdefault(k.index, []).append((c, str(e)))
        return out

    def _price(self, k: Kernel, c: Candidate) -> Priced:
        info = self.principal(k)
        grid = check_grid(info, c.value)
        grids = {info.name: grid}
        analysis = analyse_kernel(self.sdfg, k, grids)
        if analysis.size == 1:
            raise ScheduleError("grid of one rank")
        km = plan_kernel(self.sdfg, k, grids, self.solvers, analysis)
        p = self._row_parts(k, km, Priced(c, self.work(k, km), analysis.size))
        for pm in km.moves:
            cost = self._levels(pm.move, pm.cost) if pm.cost is not None else None  # a kernel's own moves cross nodes too
            if pm.kind == MoveKind.SCATTER and pm.role == Role.IN:
                p.reads[pm.array] = (pm.move.dst, cost)
            elif pm.kind == MoveKind.SCATTER:
                p.fills[pm.array] = (pm.move.dst, cost)
            else:
                p.writes[pm.array] = (pm.move.src, cost)
            if pm.move.accumulates and pm.move.grid_side.may_overlap():
                p.overlapping.add(pm.array)
            if pm.move.accumulates or pm.move.op is not None:
                p.combined.add(pm.array)
        for t, x, offset in self._folds.get(k.index, ()):
            if t in p.writes:  # the loop pass gathers the kernel's blocks of t straight into x's shifted blocks
                h, cost = p.writes.pop(t)
                box = tuple((b + o, e + o, s) for (b, e, s), o in zip(h.subset, offset))
                shifted = Distribution(h.grid, h.coords, box, h.grid_id, h.pending)
                desc = self.sdfg.arrays[x]
                mc = self.move_cost(x, shifted, ROOT, desc.shape, desc.dtype.bytes)  # never None: ROOT is no grid
                p.writes[x] = (shifted, cost if mc.per_rank is None else mc)
                for flags in (p.overlapping, p.combined):
                    if t in flags:
                        flags.discard(t)
                        flags.add(x)
        p.memory = _buffer_bytes(self.sdfg, km)
        return p

    def work(self, k: Kernel, km: Optional[KernelMoves]) -> float:
        """Seconds one rank computes for one execution of the kernel on its tile (``km`` None: the
        whole kernel on rank 0). On GPUs, a kernel launch more, and the tiles of the grid's ranks that
        share one GPU run one after another on it."""
        t = self._tile_work(k, km)
        m = self.machine
        if not m.gpus:
            return t
        return m.gpu_time(km.analysis.size if km is not None else 1, t, max(1, len(k.maps)))

    # -- GPU row kernels ---------------------------------------------------------------------------------
    def _row_chains(self) -> List["_Chain"]:
        """The kernels that the GPU pass fuses into one row kernel where they run on the same ranks
        (``passes.gpu_rows.row_chains``, the pass's own decision, asked once with every kernel on one grid)."""
        if not self.machine.gpus:
            return []
        from ..passes.gpu_rows import row_chains
        index = {k.state: k.index for k in self.kernels}
        out = []
        for chain in row_chains(self.sdfg, list(index), {}):
            ks = tuple(index[s.state] for s in chain.stages)
            loops = tuple((lp.reads, lp.writes, tuple(index[e] for e in lp.evaluates)) for lp in chain.loops())
            out.append(_Chain(ks, loops, str(chain)))
        return out

    def _row_parts(self, k: Kernel, km: Optional[KernelMoves], p: Priced) -> Priced:
        """``p`` with the kernel's operations and per-array bytes where it belongs to a row chain."""
        if k.index in self._in_chain:
            p.ops = self._ops_time(k, km)
            p.arrays = _array_bytes(self.sdfg, km) if km is not None else _global_touched(self.sdfg, k)
        return p

    def _row_part(self, choice: Dict[int, int]) -> float:
        """Seconds per call that the row kernels save: a chain whose kernels all got one grid (or all stay
        on rank 0) is priced as the one kernel it becomes, a launch and its loops over the rows (each loop's
        operations, recomputed intermediates included, and the bytes it reads and stores), instead of its
        kernels one by one. A chain split over different grids is priced kernel by kernel."""
        return sum(self._chain_saving(c, choice) for c in self._chains)

    def _chain_saving(self, c: "_Chain", choice: Dict[int, int]) -> float:
        """Seconds per call the chain saves on ``choice`` (kept per combination of its kernels' candidates)."""
        idx = tuple(choice.get(k, 0) for k in c.kernels)
        if (c.kernels, idx) not in self._rows:
            self._rows[(c.kernels, idx)] = self._fused_saving(c, idx)
        return self._rows[(c.kernels, idx)]

    def _fused_saving(self, c: "_Chain", idx: Tuple[int, ...]) -> float:
        ps = [self.priced[k][i] for k, i in zip(c.kernels, idx)]
        if len({(p.candidate.value if p.candidate.partitioned else None, p.ranks) for p in ps}) != 1:
            return 0.0
        by_kernel = dict(zip(c.kernels, ps))
        size = {}
        for p in ps:
            for a, b in p.arrays.items():
                size[a] = max(size.get(a, 0), b)
        ops = traffic = 0.0
        for reads, writes, evaluates in c.loops:
            ops += sum(by_kernel[k].ops for k in evaluates)
            traffic += sum(size.get(a, 0) for a in reads) + (size.get(writes, 0) if writes else 0)
        m = self.machine
        fused = m.gpu_time(ps[0].ranks, max(ops, traffic / m.stream), 1)
        trips = self._trips_of(self.kernels[c.kernels[0]])
        return max(0.0, sum(p.compute for p in ps) - fused) * trips

    def row_kernels(self, choice: Dict[int, int]) -> List[str]:
        """The row kernels that ``choice`` is priced with (for the explanation)."""
        return [c.text for c in self._chains if self._chain_saving(c, choice) > 0.0]

    def _ops_time(self, k: Kernel, km: Optional[KernelMoves]) -> float:
        """Seconds of the kernel's map operations on its tile (memory traffic aside)."""
        ops = 0.0
        if k.kind == KernelKind.MAP:
            grid = km.analysis.grid if km is not None else None
            ops = _iterations(k.node.map, grid, self.sdfg.constants) * _ops_in_scope(k.state, k.node, self.sdfg.constants)
        else:
            for info in k.maps:
                grid = _inner_grid(km, info) if km is not None else None
                st, entry = find_entry(k.body, info.map)
                ops += _iterations(info.map, grid, self.sdfg.constants) * _ops_in_scope(st, entry, self.sdfg.constants)
        return ops / self.machine.map_ops

    def _tile_work(self, k: Kernel, km: Optional[KernelMoves]) -> float:
        if k.kind == KernelKind.LIBRARY and type(k.node).__name__ in _BLAS:
            info = self.principal(k)
            grid = _inner_grid(km, info) if km is not None else None
            flops = 2 * _iterations(info.map, grid, self.sdfg.constants)
            return flops / self.machine.blas_flops
        if k.kind == KernelKind.MAP and self._contraction(k):  # a GEMM after lowering (passes.contractions)
            grid = km.analysis.grid if km is not None else None
            return 2 * _iterations(k.node.map, grid, self.sdfg.constants) / self.machine.blas_flops
        t = self._ops_time(k, km)
        mem = _buffer_bytes(self.sdfg, km) if km is not None else _global_bytes(self.sdfg, k)
        return max(t, mem / self.machine.stream)

    def _contraction(self, k: Kernel) -> bool:
        """Whether the kernel becomes a BLAS call (asked once per kernel: the answer is the grid's too)."""
        if k.index not in self._contractions:
            self._contractions[k.index] = is_contraction(k.state, k.node)
        return self._contractions[k.index]

    def _copy_folds(self):
        """``({kernel index: [(T, X, offset)]}, copy states)``: the copies ``X[box] = T`` inside loops that
        the loop pass folds into the write of the kernel that computes ``T`` (``plan.carry.copy_to_fold``,
        asked of the same states): that kernel then writes ``X``'s shifted blocks, and the copy moves nothing.
        Where the kernel stays on rank 0 nothing is folded, and nothing moves either way."""
        from ..plan.carry import copy_to_fold
        from ..schedule.loops import find_loops
        by_state = {k.state: k for k in self.kernels}
        folds: Dict[int, List[tuple]] = {}
        copies = set()
        states = ordered_states(self.sdfg)
        for lp in find_loops(self.sdfg):  # innermost first, as FuseLoops folds them
            order = [st for st in states if st in lp.body]

            def writer_of(t):
                ws = [st for st in order if st in by_state
                      and any(n.data == t and st.in_degree(n) > 0 for n in st.data_nodes())]
                plain = len(ws) == 1 and not any(e.data.wcr is not None for n in ws[0].data_nodes() if n.data == t
                                                 for e in ws[0].in_edges(n))
                return ws[0] if plain else None
            for st in order:
                found = None if st in copies else copy_to_fold(self.sdfg, order, st, writer_of)
                if found is not None:
                    w, t, x, offset = found
                    folds.setdefault(by_state[w].index, []).append((t, x, offset))
                    copies.add(st)
        return folds, copies

    # -- data flow -------------------------------------------------------------------------------------
    def _uses(self):
        from ..schedule.loops import find_loops
        sdfg = self.sdfg
        loops = find_loops(sdfg)
        outer = {}
        for lp in sorted(loops, key=lambda lp: -len(lp.body)):
            for st in lp.body:
                outer.setdefault(st, lp)
        every = {}
        for lp in loops:
            try:
                every[lp] = max(_const(lp.trips(sdfg), {**sdfg.constants, **self.sizes}), 1)
            except (TypeError, ValueError):
                every[lp] = DEFAULT_TRIPS
        self.loop_trips = {lp: t for lp, t in every.items() if lp in outer.values()}

        def inner(st):  # adi's sweeps: a loop over rows inside the time loop runs its moves N times per step
            n = 1
            for lp in loops:
                if st in lp.body and lp is not outer.get(st):
                    n *= every[lp]
            return n
        by_state = {k.state: k for k in self.kernels}
        self.uses: Dict[str, List[Use]] = {}
        for st in ordered_states(sdfg):
            lp = outer.get(st)
            k = by_state.get(st)
            touched: Dict[str, List[bool]] = {}
            folded = {t: x for t, x, _ in self._folds.get(k.index, ())} if k is not None else {}
            for n in st.data_nodes() if st not in self._copies else ():
                rw = touched.setdefault(folded.get(n.data, n.data), [False, False])
                rw[0] |= st.out_degree(n) > 0
                rw[1] |= st.in_degree(n) > 0
            n = inner(st) if lp is not None else 1
            for arr, (r, w) in touched.items():
                if arr in sdfg.arrays:
                    self.uses.setdefault(arr, []).append(Use(k.index if k is not None else -1, r, w, lp, n))
            for e in sdfg.out_edges(st):  # conditions and assignments read data on rank 0
                for arr in e.data.read_symbols() & set(sdfg.arrays):
                    self.uses.setdefault(arr, []).append(Use(-1, True, False, lp, n, node=False))
        self.written = {a for a, us in self.uses.items() if any(u.write for u in us)}
        self._actors = {a: sorted({u.actor for u in us if u.actor >= 0}) for a, us in self.uses.items()}
        self._arrays_of: Dict[int, List[str]] = {}
        for a, actors in self._actors.items():
            for k in actors:
                self._arrays_of.setdefault(k, []).append(a)

    def move_cost(self, array: str, src: Distribution, dst: Distribution, shape, itemsize) -> Optional[Cost]:
        """The cost of the move ``src -> dst`` (grid to grid, or a gather to ``ROOT``) from the first solver
        that implements it (None: nothing moves; no solver: a cost without bytes, priced as a gather and a
        scatter by the caller)."""
        key = (array, src, dst)
        if key not in self._moves:
            if not src.partial and self.same(src, dst):
                self._moves[key] = None
            else:
                move = Move(array, src, dst, tuple(shape), itemsize)
                solver, _ = choose(move, self.solvers)
                self._moves[key] = self._levels(move, solver.cost(move)) if solver is not None else Cost(None, None, ())
        return self._moves[key]

    def scatter_cost(self, array: str, dist: Distribution, desc) -> Optional[Cost]:
        """What filling ``dist`` (final values) from rank 0 costs, with the first solver that does it."""
        key = (array, ROOT, dist)
        if key not in self._moves:
            move = Move(array, ROOT, dist.combined(), tuple(desc.shape), desc.dtype.bytes)
            solver, _ = choose(move, self.solvers)
            self._moves[key] = self._levels(move, solver.cost(move)) if solver is not None else None
        return self._moves[key]

    def _levels(self, move: Move, cost: Cost) -> Cost:
        """``cost`` with the bytes each rank receives from other nodes, where the machine prices two levels."""
        if not self.machine.two_levels or cost.per_rank is None:
            return cost
        if self._layout is False:
            self._layout = self.machine.node_layout()
        if self._layout is None:
            return cost
        from ..ir.levels import off_node_bytes
        return replace(cost, off_node=off_node_bytes(move, cost.per_rank, self._layout))

    def same(self, a: Distribution, b: Distribution) -> bool:
        """``a.same_blocks(b)``, once per pair; by the blocks themselves where both are known."""
        key = (a, b)
        if key not in self._same:
            ba, bb = a.blocks(), b.blocks()
            if ba is not None and bb is not None:
                self._same[key] = ([g for g in a.grid if g > 1] == [g for g in b.grid if g > 1] and ba == bb)
            else:
                self._same[key] = a.same_blocks(b)
        return self._same[key]

    # -- a whole schedule ------------------------------------------------------------------------------
    def evaluate(self, choice: Dict[int, int], trace: Optional[list] = None) -> Prediction:
        """The prediction for one candidate index per kernel (module docstring); ``trace`` collects
        (array, what, bytes per call) for every priced move. Each array's part is computed once per
        combination of the candidates of the kernels that touch it (a search changes one kernel at a time)."""
        per = [0] * self.ranks
        comm = 0.0
        compute = self.machine.call if self.machine.gpus else 0.0  # once per call, whatever the schedule
        memory = 0
        chosen = {k.index: self.priced[k.index][choice.get(k.index, 0)] for k in self.kernels}
        for k in self.kernels:
            work, mem = self._kernel_part(k.index, choice.get(k.index, 0))
            compute += work
            memory += mem
        compute -= self._row_part(choice)
        refused = sum(self._io_refused(arr, choice) for arr in self.uses)
        bytes_, seconds = self._branch_part(choice, trace)
        _accumulate(per, bytes_, 1)
        comm += seconds
        for arr, uses in self.uses.items():
            if trace is not None:
                bytes_, seconds = self._array_cost(arr, uses, chosen, trace)
            else:
                bytes_, seconds = self._array_part(arr, choice, chosen)
            _accumulate(per, bytes_, 1)
            comm += seconds
        return self._prediction(compute, comm, per, memory, refused)

    def change(self, choice: Dict[int, int], base: Prediction, k: int, i: int) -> Prediction:
        """``base`` (the prediction of ``choice``) with kernel ``k`` on candidate ``i`` instead: only the
        kernel's own part and the arrays it touches are priced again."""
        old = choice.get(k, 0)
        if i == old:
            return base
        trial = {**choice, k: i}
        per = list(base.bytes_per_rank)
        w0, m0 = self._kernel_part(k, old)
        w1, m1 = self._kernel_part(k, i)
        compute, comm, memory = base.compute - w0 + w1, base.communication, base.memory - m0 + m1
        if k in self._in_chain:
            compute += self._row_part(choice) - self._row_part(trial)
        chosen = None
        refused = base.refused
        for c, sign in ((choice, -1), (trial, 1)):
            bytes_, seconds = self._branch_part(c)
            _accumulate(per, bytes_, sign)
            comm += sign * seconds
        for arr in self._arrays_of.get(k, ()):
            refused += self._io_refused(arr, trial) - self._io_refused(arr, choice)
            b_old, t_old = self._array_part(arr, choice, None)
            if chosen is None:
                chosen = {j.index: self.priced[j.index][trial.get(j.index, 0)] for j in self.kernels}
            b_new, t_new = self._array_part(arr, trial, chosen)
            _accumulate(per, b_old, -1)
            _accumulate(per, b_new, 1)
            comm += t_new - t_old
        return self._prediction(compute, comm, per, memory, refused)

    def _prediction(self, compute, comm, per, memory, refused=0) -> Prediction:
        if refused or (self.memory_per_rank is not None and memory > self.memory_per_rank):
            return Prediction(math.inf, compute, comm, per, memory, refused)
        return Prediction(compute + comm, compute, comm, per, memory)

    def _branch_part(self, choice: Dict[int, int], trace: Optional[list] = None) -> Tuple[List[int], float]:
        """(bytes per rank, seconds) of broadcasting the data that interstate conditions read, from rank 0
        to every rank the program needs, before each evaluation (``plan.branch``): nothing while
        every kernel runs on rank 0. Which data depends on the partitioned kernels: a symbol assigned from
        data that such a kernel reads must reach every rank too."""
        from ..plan.branch import branch_data
        if self._symbols is None:  # symbols of transients, and of each kernel's state
            self._symbols = ({str(x) for d in self.sdfg.arrays.values() if d.transient for x in d.free_symbols},
                             {k.index: {str(x) for x in k.state.free_symbols} for k in self.kernels})
            every = set(self._symbols[0]).union(*self._symbols[1].values())
            self._branching = bool(branch_data(self.sdfg, every))  # with every kernel partitioned: the most
        if not self._branching:
            return [0] * self.ranks, 0.0
        chosen = [(k, self.priced[k.index][choice.get(k.index, 0)]) for k in self.kernels]
        part = frozenset(k.index for k, p in chosen if p.candidate.partitioned)
        world = max((p.ranks for _, p in chosen if p.candidate.partitioned), default=1)
        key = (world, part)
        if key in self._branch and trace is None:
            return self._branch[key]
        per, comm = [0] * self.ranks, [0.0]
        if world > 1:
            from ..passes.loops import trips
            every = set(self._symbols[0]).union(*(self._symbols[1][k] for k in part))
            for st, names in branch_data(self.sdfg, every).items():
                try:
                    n = max(_const(trips(self.sdfg, st), {**self.sdfg.constants, **self.sizes}), 1)
                except (TypeError, ValueError):
                    n = DEFAULT_TRIPS
                for name in names:
                    desc = self.sdfg.arrays[name]
                    dist = Distribution.on_grid(Range.from_array(desc), (world, ), (None, ), -1)
                    cost = self.scatter_cost(name, dist, desc)
                    _add_cost(per, comm, cost, n, self.machine)
                    if trace is not None and cost is not None and cost.per_rank is not None:
                        trace.append((name, "broadcast (branch data)", sum(cost.per_rank) * n))
        self._branch[key] = (per, comm[0])
        return self._branch[key]

    def _io_refused(self, arr: str, choice: Dict[int, int]) -> int:
        """1 where ``io="distributed"`` would keep argument ``arr`` rank-local while code on rank 0 (a
        kernel left there, a copy) also touches it: ``plan.local_io`` refuses that schedule."""
        if self.io != "distributed" or self.sdfg.arrays[arr].transient:
            return 0
        part = [u.actor >= 0 and self.priced[u.actor][choice.get(u.actor, 0)].candidate.partitioned
                for u in self.uses[arr] if u.node]
        return int(any(part) and not all(part))

    def _kernel_part(self, k: int, i: int):
        """(seconds of compute, memory) of kernel k on candidate i: its work times its trip count. Every
        move, the prior values of its writes included, is its arrays' part (:meth:`_array_cost`)."""
        key = (k, i)
        if key not in self._kernel_parts:
            p = self.priced[k][i]
            self._kernel_parts[key] = (p.compute * self._trips_of(self.kernels[k]), p.memory)
        return self._kernel_parts[key]

    def _array_part(self, arr: str, choice: Dict[int, int], chosen) -> Tuple[List[int], float]:
        key = (arr, tuple(choice.get(a, 0) for a in self._actors[arr]))
        part = self._memo.get(key)
        if part is None:
            if chosen is None:
                chosen = {j.index: self.priced[j.index][choice.get(j.index, 0)] for j in self.kernels}
            part = self._memo[key] = self._array_cost(arr, self.uses[arr], chosen, None)
        return part

    def _array_cost(self, arr: str, uses: List[Use], chosen: Dict[int, Priced], trace) -> Tuple[List[int], float]:
        """(bytes per rank, seconds) of one array's moves under one schedule (module docstring)."""
        m = self.machine
        per = [0] * self.ranks
        comm = [0.0]
        writer: Dict[str, int] = {}

        def _add(per, comm, cost, mult, m, what="", arr=""):
            _add_cost(per, comm, cost, mult, m)
            if trace is not None and cost is not None and cost.per_rank is not None and mult:
                trace.append((arr, what, sum(cost.per_rank) * mult))

        desc = self.sdfg.arrays[arr]
        part = [u.actor >= 0 and chosen[u.actor].candidate.partitioned for u in uses]
        loops = {u.loop for u in uses}
        fusable = all(part) and (desc.transient or (len(loops) == 1 and None not in loops))
        argument = not desc.transient
        free_io = self.io == "distributed" and argument
        holder: List[Optional[Distribution]] = [None]
        plain = [True]  # the holder's write is not accumulated into overlapping blocks
        scattered: List[Tuple[Distribution, object]] = []  # (blocks, state of the scatter)
        home = self._home(arr, uses, chosen) if free_io else None
        fused_gathers: List[Tuple[Cost, int]] = []  # gathers a fused round trip removed, while none is kept
        kept = [False]  # a reader read rank 0's copy: FuseRoundTrips keeps every gather of the array

        def keep_gathers():
            """A reader reads rank 0's copy: FuseRoundTrips keeps every gather of the array, those it
            would have removed so far included (the later ones are charged as they come)."""
            if not kept[0]:
                for c, n in fused_gathers:
                    _add(per, comm, c, n, m, "gather (kept)", arr)
                kept[0] = True

        def prior(dst, cost, times, fuse):
            """A write's prior values: from the last writer's blocks where they cover them (a fused round
            trip, as FuseRoundTrips fuses the scatter of prior values), else scattered from rank 0."""
            if fuse and desc.transient and holder[0] is not None and plain[0] and covers(holder[0], dst):
                mc = self.move_cost(arr, holder[0], dst, desc.shape, desc.dtype.bytes)
                if mc is None:  # the same blocks on the same ranks: nothing moves
                    return
                if mc.per_rank is not None:
                    _add(per, comm, mc, times, m, "prior values (redistribute)", arr)
                    return
            if fuse and desc.transient and holder[0] is not None:
                keep_gathers()
            _add(per, comm, cost, times, m, "prior values", arr)

        def from_home(dst, cost, times, what=""):
            """Blocks ``dst`` filled from where the argument is: scattered from rank 0, or (``io="distributed"``)
            moved from the layout the caller passes, where that is another (``plan.local_io``)."""
            label = f" ({what})" if what else ""
            if not free_io:
                _add(per, comm, cost, times, m, "scatter" + label, arr)
            elif home is not None and (home.partial or not self.same(home, dst)):
                mc = self.move_cost(arr, home, dst, desc.shape, desc.dtype.bytes)
                _add(per, comm, cost if mc is not None and mc.per_rank is None else mc, times, m,
                     "redistribute" + label, arr)

        def walk(segment, mult, first, fuse=True):
            for u in segment:
                if u.actor < 0 or not chosen[u.actor].candidate.partitioned:
                    if u.write:
                        holder[0] = None
                    continue
                p = chosen[u.actor]
                rep = mult * u.inner  # moves that follow a write repeat with the loops nested around the use
                if u.read and arr in p.reads:
                    dst, cost = p.reads[arr]
                    if holder[0] is not None and desc.transient and (not plain[0] or not covers(holder[0], dst)):
                        # it reads elements the last writer did not write (a triangle, then the whole
                        # array): from rank 0's copy, and every gather of the array stays (FuseRoundTrips)
                        keep_gathers()
                        _add(per, comm, cost, rep, m, "scatter", arr)
                    elif holder[0] is not None:
                        mc = self.move_cost(arr, holder[0], dst, desc.shape, desc.dtype.bytes)
                        if mc is not None and mc.per_rank is None:  # no solver: through rank 0
                            _add(per, comm, chosen[writer[arr]].writes[arr][1], rep, m, "gather", arr)
                            _add(per, comm, cost, rep, m, "scatter", arr)
                        elif mc is not None:
                            _add(per, comm, mc, rep, m, "redistribute", arr)
                    elif (rewritten := u.loop is None or self._written_in(arr, u.loop)) or first:
                        rep = rep if rewritten else mult  # an input the loop does not write: scattered once
                        state = self.kernels[u.actor].state
                        if arr not in self.written and any(self.same(d, dst) and only_source(s, state, {s})
                                                           for d, s in scattered):
                            pass  # the first scatter's buffer is reused (it runs on every path to this one)
                        else:  # scattered, or (io="distributed") moved from the caller's one layout
                            from_home(dst, cost, rep)
                        scattered.append((dst, state))
                if u.write and arr in p.fills:
                    prior(*p.fills[arr], mult * u.inner, fusable and fuse and arr not in p.overlapping)
                if u.write and arr in p.writes:
                    src, cost = p.writes[arr]
                    if fusable and fuse:
                        holder[0] = src
                        plain[0] = arr not in p.overlapping
                        writer[arr] = u.actor
                        if kept[0]:
                            _add(per, comm, cost, mult * u.inner, m, "gather (kept)", arr)
                        else:
                            fused_gathers.append((cost, mult * u.inner))
                    elif not free_io:
                        _add(per, comm, cost, mult * u.inner, m, "gather", arr)
                    elif src.partial:  # every replica gets the combined value (plan.local_io)
                        _add(per, comm, self.move_cost(arr, src, src.combined(), desc.shape, desc.dtype.bytes),
                             mult * u.inner, m, "allreduce", arr)

        for lp, seg in itertools.groupby(uses, key=lambda u: u.loop):
            seg = list(seg)
            writers = {u.actor for u in seg if u.write}
            trips = self.loop_trips.get(lp, 1) if lp is not None else 1
            carried = not desc.transient or (seg[0].read and not seg[0].write)
            # an argument that rank-0 code or another loop also uses: FuseLoops still keeps it on the grid
            # inside this loop when only partitioned kernels touch it there (scattered before, gathered after)
            alone = (lp is not None and argument and not fusable and not free_io
                     and all(u.actor >= 0 and chosen[u.actor].candidate.partitioned for u in seg))
            if lp is not None and (fusable or alone) and carried and len(writers) == 1 \
                    and arr in chosen[min(writers)].writes \
                    and not any(u.actor >= 0 and arr in chosen[u.actor].combined for u in seg):
                # FuseLoops: scattered once into the writer's blocks H, every reader gets H -> D per
                # iteration (and its boundary once), gathered once after the loop
                w = min(writers)
                h, hcost = chosen[w].writes[arr]
                readers = [chosen[u.actor].reads[arr][0] for u in seg
                           if u.read and u.actor >= 0 and arr in chosen[u.actor].reads]
                # a reader's boundary scatter that contains the written blocks fills them too (FuseLoops)
                if holder[0] is None and not free_io and \
                        not any(not covers(h, d) and offset_inside(h, d) is not None for d in readers):
                    _add(per, comm, self.scatter_cost(arr, h, desc), 1, m, "scatter", arr)
                for u in seg:  # the writer's prior values are its own buffer's (FuseLoops drops that scatter)
                    if u.read and u.actor >= 0 and arr in chosen[u.actor].reads:
                        dst, cost = chosen[u.actor].reads[arr]
                        mc = self.move_cost(arr, h, dst, desc.shape, desc.dtype.bytes)
                        if mc is not None and mc.per_rank is None:
                            _add(per, comm, hcost, trips * u.inner, m, "gather", arr)
                            _add(per, comm, cost, trips * u.inner, m, "scatter", arr)
                        else:
                            _add(per, comm, mc, trips * u.inner, m, "redistribute", arr)
                            if not covers(h, dst):  # the reader's elements outside H, filled once before
                                from_home(dst, cost, 1, "boundary")
                if alone:
                    _add(per, comm, hcost, 1, m, "gather (after the loop)", arr)
                    continue
                holder[0] = h
                writer[arr] = w
                continue
            # an argument that several kernels of a loop write makes its round trip through rank 0 in
            # every iteration (FuseLoops keeps only one writer's blocks; FuseRoundTrips fuses transients)
            fuse = lp is None or desc.transient or len(writers) <= 1
            walk(seg, 1, True, fuse)
            if trips > 1:
                walk(seg, trips - 1, False, fuse)
        if fusable and holder[0] is not None and argument and not free_io:
            _add(per, comm, chosen[writer[arr]].writes[arr][1], 1, m, "gather", arr)
        elif fusable and holder[0] is not None and free_io and holder[0].partial:
            _add(per, comm, self.move_cost(arr, holder[0], holder[0].combined(), desc.shape, desc.dtype.bytes),
                 1, m, "allreduce", arr)
        return per, comm[0]

    def _home(self, arr: str, uses: List[Use], chosen: Dict[int, Priced]) -> Optional[Distribution]:
        """With ``io="distributed"``, the blocks an argument's caller passes (as ``plan.local_io``
        chooses them): those of its partitioned writer, else of its first partitioned reader. A reader
        that needs other blocks gets them by a grid-to-grid move from these."""
        first = None
        for u in uses:
            if u.actor < 0 or not chosen[u.actor].candidate.partitioned:
                continue
            p = chosen[u.actor]
            if u.write and arr in p.writes:
                return p.writes[arr][0]
            if first is None and u.read and arr in p.reads:
                first = p.reads[arr][0]
        return first

    def _trips_of(self, k: Kernel) -> int:
        if k.index not in self._kernel_trips:
            from ..passes.loops import trips
            t = trips(self.sdfg, k.state)
            try:
                t = max(_const(t, {**self.sdfg.constants, **self.sizes}), 1)
            except (TypeError, ValueError):
                t = DEFAULT_TRIPS
            self._kernel_trips[k.index] = t
        return self._kernel_trips[k.index]

    def _written_in(self, arr: str, loop) -> bool:
        return any(u.write and u.loop is loop for u in self.uses.get(arr, []))


def _accumulate(per: List[int], bytes_: List[int], sign: int):
    for w, b in enumerate(bytes_):
        per[w] += sign * b


def _add_cost(per: List[int], comm: List[float], cost: Optional[Cost], mult: int, m: Machine):
    if cost is None or cost.per_rank is None or mult == 0:
        return
    busiest = max(cost.per_rank) if cost.per_rank else 0
    receivers = sum(1 for b in cost.per_rank if b) or 1
    messages = (cost.messages or 0) / receivers
    for w, b in enumerate(cost.per_rank[:len(per)]):
        per[w] += b * mult
    if cost.off_node is None or not any(cost.off_node):
        comm[0] += mult * m.message_time(messages, busiest)
    else:  # the slowest rank, each byte at the level it crosses (messages in the same shares)
        comm[0] += mult * max(m.message_time(messages, b, messages * o / b, o)
                              for b, o in zip(cost.per_rank, cost.off_node) if b)


def candidate_grids(k: Kernel, ranks: int) -> List[Candidate]:
    """Every grid of ``ranks`` ranks over the kernel's principal map (contraction splits included), the
    kernel replicated on every rank (``replicate((1, ...), ranks)``), and not partitioned. Grids that split
    a dimension into more parts than it has iterations are left out. (Partial replication, a grid of
    ranks / c tiles times c copies, is left to hand schedules: it multiplies the candidates.)"""
    if not k.maps:
        return [Candidate(None)]
    info = principal_map(k)
    out = [Candidate(None)]
    # leading dimensions split first: among equal costs the search keeps the earlier candidate
    for grid in sorted(factorizations(ranks, len(info.params)), reverse=True):
        if not any(isinstance(e, int) and g > e for g, e in zip(grid, info.shape)):
            out.append(Candidate(grid))
    if ranks > 1:  # every rank computes the whole kernel (a consumer of partial sums gets one allreduce)
        out.append(Candidate(Replicated((1, ) * len(info.params), ranks)))
    return out


def principal_map(k: Kernel):
    """The map whose grid a kernel is searched over: its own map, or inside a nested SDFG or library node
    the map with the most parameters (the others share its grid, as ``lower`` derives them); among those,
    the one with the most iterations (a reduction's loop over its input, not the loop that initializes
    its one-element output)."""
    if k.kind == KernelKind.MAP:
        return k.maps[0]
    return max(k.maps, key=lambda m: (len(m.params), _work_rank(m.map)))


def _work_rank(m: nodes.Map) -> float:
    """A map's iteration count with every size symbol at 1000: orders the maps of one kernel by work."""
    n = sympy.sympify(m.range.num_elements())
    try:
        return float(n.subs({s: 1000 for s in n.free_symbols}))
    except (TypeError, ValueError):
        return 0.0


def divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def factorizations(n: int, parts: int) -> List[Tuple[int, ...]]:
    """Ordered tuples of ``parts`` positive integers whose product is ``n``."""
    if parts == 0:
        return [()] if n == 1 else []
    return [(d, ) + rest for d in divisors(n) for rest in factorizations(n // d, parts - 1)]


def _inner_grid(km: KernelMoves, info) -> Tuple[int, ...]:
    for t in km.analysis.inner:
        if t.info.name == info.name:
            return t.grid
    return km.grid


def _buffer_sizes(sdfg: SDFG, km: KernelMoves) -> Dict[str, Tuple[str, int]]:
    """A kernel's rank-local buffers: name -> (its array, bytes on one rank); a buffer two roles share is
    one entry, one whose size is not known is left out."""
    out: Dict[str, Tuple[str, int]] = {}
    seen = set()
    for (array, _), (name, subset) in km.buffers:
        if name in seen:
            continue
        seen.add(name)
        shape = Distribution.on_grid(subset, km.grid, km.analysis.coords, 0).local_shape
        try:
            out[name] = (array, _volume([_const(x, sdfg.constants) for x in shape]) * sdfg.arrays[array].dtype.bytes)
        except TypeError:
            pass
    return out


def _buffer_bytes(sdfg: SDFG, km: KernelMoves) -> int:
    """Bytes of a kernel's rank-local buffers on one rank (a buffer two roles share counts once)."""
    return sum(b for _, b in _buffer_sizes(sdfg, km).values())


def _array_bytes(sdfg: SDFG, km: KernelMoves) -> Dict[str, int]:
    """Bytes of each array's rank-local buffer on one rank (the larger where two roles have two)."""
    out: Dict[str, int] = {}
    for array, b in _buffer_sizes(sdfg, km).values():
        out[array] = max(out.get(array, 0), b)
    return out


def _global_bytes(sdfg: SDFG, k: Kernel) -> int:
    return sum(_global_touched(sdfg, k).values())


def _global_touched(sdfg: SDFG, k: Kernel) -> Dict[str, int]:
    """Bytes a kernel that runs on rank 0 touches: each array's subset on the kernel's edges (the whole
    array where the subset's size is not known). Whole arrays would price adi's column updates, one
    column of an N x N array per iteration of a loop over columns, at N times their bytes, and make a
    replicated copy of the kernel look cheaper than rank 0 (its tile is the column)."""
    if k.kind == KernelKind.MAP:
        edges = k.state.in_edges(k.node) + k.state.out_edges(k.state.exit_node(k.node))
    else:
        edges = k.state.in_edges(k.node) + k.state.out_edges(k.node)
    touched: Dict[str, int] = {}
    for e in edges:
        name = e.data.data
        if name is None:
            continue
        desc = sdfg.arrays[name]
        try:
            n = _const(e.data.subset.num_elements(), sdfg.constants) if e.data.subset is not None else None
        except (TypeError, ValueError):
            n = None
        try:
            n = n if n is not None else _const(desc.total_size, sdfg.constants)
        except (TypeError, ValueError):
            continue
        touched[name] = max(touched.get(name, 0), n * desc.dtype.bytes)
    return touched


def _const(x, consts) -> int:
    """An integer from a size, with the program's constants substituted (TypeError if symbols remain)."""
    if x is None:
        raise TypeError("unknown (data-dependent)")
    x = sympy.sympify(x)
    return int(x.subs({f: consts[str(f)] for f in x.free_symbols if str(f) in consts}))


def _volume(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _iterations(m: nodes.Map, grid: Optional[Sequence[int]], consts=None) -> int:
    n = 1
    for d, (b, e, s) in enumerate(m.range):
        try:
            ext = sympy.ceiling(sympy.sympify((e - b + 1) / s))
            ext = int(ext.subs({f: consts[str(f)] for f in ext.free_symbols if str(f) in (consts or {})}))
        except (TypeError, ValueError):
            ext = DEFAULT_SIZE
        g = grid[d] if grid is not None and d < len(grid) else 1
        n *= -(-max(ext, 0) // g)
    return n


_OP = re.compile(r"[-+*/]|\bexp\b|\blog\b|\bsqrt\b|\bmax\b|\bmin\b|\btanh\b|\bpow\b")


def _ops_in_scope(state, entry, consts=None) -> float:
    """Operations per iteration of a map: the arithmetic in its tasklets (one at least), with the nested
    maps' iterations multiplied in."""
    return max(_ops_of(state, state.scope_children()[entry], consts), 1.0)


def _ops_of(state, children, consts=None) -> float:
    """Operations of one pass over ``children`` (the nodes of one scope): tasklets' arithmetic, nested maps'
    iterations times their bodies, nested SDFGs' bodies, one per library node."""
    total = 0.0
    for n in children:
        if isinstance(n, nodes.Tasklet):
            total += max(1, len(_OP.findall(n.code.as_string)))
        elif isinstance(n, nodes.MapEntry):
            total += _iterations(n.map, None, consts) * _ops_in_scope(state, n, consts)
        elif isinstance(n, nodes.NestedSDFG):
            total += _ops_in_body(n.sdfg, consts)
        elif isinstance(n, nodes.LibraryNode):
            total += 1
    return total


def _ops_in_body(body, consts=None) -> float:
    """Operations of one call of a nested SDFG: each state's work times the trips of the loops around it
    (a loop body made a map by ``LoopToMap`` keeps its inner loops: syrk's ``for k`` runs M times)."""
    from ..passes.loops import trips
    total = 0.0
    for st in body.states():
        t = trips(body, st)
        try:
            t = int(sympy.sympify(t).subs({f: consts[str(f)] for f in sympy.sympify(t).free_symbols
                                          if str(f) in (consts or {})}))
        except (TypeError, ValueError, sympy.SympifyError):
            t = DEFAULT_SIZE
        total += max(t, 0) * _ops_of(st, st.scope_children()[None], consts)
    return max(total, 1.0)
