"""The cost model of a whole schedule: a program's kernels, each priced on each candidate grid, and the
data flow between them, priced by the lowering's own planner.

Each kernel is planned on each candidate (:func:`dace_partition.plan.plan_kernel`: its scatters and
gathers with the solvers' costs, its rank-local buffers) and its work is estimated on the rank's tile. A
schedule (one candidate per kernel) is then priced array by array: the kernels that touch an array, as
planned on their candidates and restricted to that array, go through the same decisions ``lower`` makes
(:func:`dace_partition.plan.decide`: the round trips through rank 0 that go, what each loop keeps on the
grid, ``io="distributed"``'s rank-local arguments), and every move left (:mod:`dace_partition.plan.traffic`)
is priced by its solver, times the runs of the loops around it. An array's part is computed once per choice
of the kernels that touch it (a search changes one kernel at a time); an array a loop's copy folds into
another is priced with it. A schedule the planner refuses (an argument no tile serves) costs infinity.
The data that interstate conditions read is broadcast to every rank (:mod:`dace_partition.plan.branch`).

The prediction is time per rank (compute + alpha * messages + beta * bytes, at the rates of
:mod:`.machine`) and the bytes each rank receives: the unit the report and the PMPI counter use.
"""
import copy
import math
import re
from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import sympy
from dace import nodes
from dace.sdfg import SDFG
from dace.subsets import Range

from ..analysis.constraints import find_entry
from ..compat import all_states
from ..errors import ScheduleError, UnsupportedPattern
from ..ir import ROOT, Cost, Distribution, IoMode, Move, MoveKind, Role
from ..plan import KernelMoves, LoweringPlan, analyse_kernel, decide, plan_kernel
from ..passes.contractions import is_contraction
from ..plan.traffic import coupled_arrays, loops_around, restricted, traffic
from ..schedule import Kernel, KernelKind, Replicated, check_grid, ordered_states
from ..solvers.registry import choose, get as get_solver
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
    memory: int = 0  # bytes of rank-local buffers per rank
    plan: Optional[KernelMoves] = None  # the kernel planned on this candidate (None: on rank 0)
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


def prepare_with_rules(sdfg: SDFG, sizes: Optional[Dict[str, int]], solvers, prepared: Optional[List[Kernel]] = None
                       ) -> Tuple[SDFG, Dict[str, int], List[Kernel], Optional["LoweringRules"]]:
    """:func:`prepare`, and the :class:`LoweringRules` that check a candidate as ``lower`` will: None
    where the search assumed no size (its copy then has the program's own sizes, and pricing a candidate
    runs lower's rules on it already). ``prepared``: ``sdfg``'s kernels where ``sdfg`` is prepared already
    (``lower``'s program): copied with it instead of discovered again."""
    if prepared is not None:
        work, kernels = copy.deepcopy((sdfg, prepared))
    else:
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
        for k, v in fixed.items():  # DaCe 2's replace_dict drops them; the kernels' maps still name the sizes
            if k not in work.constants:
                work.add_constant(k, v)
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
        self._runs: Dict[object, int] = {}  # a state's runs per call
        self._iterations: Dict[object, int] = {}  # a loop's iterations, by its head
        self._costs: Dict[tuple, Optional[Cost]] = {}
        self._trips_at: Dict[object, int] = {}
        self._middle: Optional[Dict[str, int]] = None  # loop variables' middle values (_loop_values)
        self._memo: Dict[tuple, Tuple[List[int], float]] = {}
        self._kernel_parts: Dict[tuple, tuple] = {}
        self._branch: Dict[tuple, Tuple[List[int], float]] = {}  # (world, partitioned kernels) -> part
        self._symbols: Optional[tuple] = None  # (of transients, of each kernel's state): _branch_part
        self._branching = False
        self.io, self.memory_per_rank = io, memory_per_rank
        self.kernels: List[Kernel] = kernels  # from prepare(): named as dp.maps names them
        self.refused: Dict[int, List[Tuple[Candidate, str]]] = {}
        self.priced: Dict[int, List[Priced]] = {}
        self._moves: Dict[tuple, Optional[Cost]] = {}  # scatters of branch data
        self._layout = False  # the node layout, looked up on first need (None: one node)
        self._contractions: Dict[int, bool] = {}
        self._chains = self._row_chains()
        self._in_chain = {k for c in self._chains for k in c.kernels}
        self._rows: Dict[tuple, float] = {}
        for k in self.kernels:
            cands = candidates[k.index] if candidates and k.index in candidates else candidate_grids(k, ranks)
            self.priced[k.index] = self._price_all(k, cands)
        self._groups()

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
            if pm.kind == MoveKind.SCATTER and pm.role == Role.IN:
                p.reads[pm.array] = (pm.move.dst, pm.cost)
            elif pm.kind == MoveKind.GATHER:
                p.writes[pm.array] = (pm.move.src, pm.cost)
        p.plan = km
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

    # -- data flow: each group of arrays priced by the lowering's planner --------------------------------
    def _groups(self):
        """The arrays the program's states touch, in the groups the planner decides together
        (:func:`~dace_partition.plan.traffic.coupled_arrays`), and the kernels that touch each group."""
        by_state = {k.state: k for k in self.kernels}
        touched: Dict[str, set] = {}
        for st in ordered_states(self.sdfg):
            k = by_state.get(st)
            for n in st.data_nodes():
                if n.data in self.sdfg.arrays:
                    kernels = touched.setdefault(n.data, set())
                    if k is not None:
                        kernels.add(k.index)
        self.groups = [g for g in coupled_arrays(self.sdfg, touched) if any(touched[a] for a in g)]
        self._actors = {g: tuple(sorted(set().union(*(touched[a] for a in g)))) for g in self.groups}
        self._groups_of: Dict[int, List[FrozenSet[str]]] = {}
        for g, ks in self._actors.items():
            for k in ks:
                self._groups_of.setdefault(k, []).append(g)

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
        bytes_, seconds = self._branch_part(choice, trace)
        _accumulate(per, bytes_, 1)
        comm += seconds
        refused = 0
        for g in self.groups:
            if trace is not None:
                bytes_, seconds, r = self._planned(g, [chosen[a] for a in self._actors[g]], trace)
            else:
                bytes_, seconds, r = self._group_part(g, choice)
            _accumulate(per, bytes_, 1)
            comm += seconds
            refused += r
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
        refused = base.refused
        for c, sign in ((choice, -1), (trial, 1)):
            bytes_, seconds = self._branch_part(c)
            _accumulate(per, bytes_, sign)
            comm += sign * seconds
        for g in self._groups_of.get(k, ()):
            b_old, t_old, r_old = self._group_part(g, choice)
            b_new, t_new, r_new = self._group_part(g, trial)
            _accumulate(per, b_old, -1)
            _accumulate(per, b_new, 1)
            comm += t_new - t_old
            refused += r_new - r_old
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

    def _kernel_part(self, k: int, i: int):
        """(seconds of compute, memory) of kernel k on candidate i: its work times its trip count. Every
        move, the prior values of its writes included, is its arrays' part (:meth:`_planned`)."""
        key = (k, i)
        if key not in self._kernel_parts:
            p = self.priced[k][i]
            self._kernel_parts[key] = (p.compute * self._trips_of(self.kernels[k]), p.memory)
        return self._kernel_parts[key]

    def _group_part(self, group: FrozenSet[str], choice: Dict[int, int]) -> Tuple[List[int], float, int]:
        key = (group, tuple(choice.get(a, 0) for a in self._actors[group]))
        part = self._memo.get(key)
        if part is None:
            part = self._memo[key] = self._planned(group, [self.priced[a][choice.get(a, 0)]
                                                           for a in self._actors[group]])
        return part

    def _planned(self, group: FrozenSet[str], priced: Sequence[Priced], trace=None) -> Tuple[List[int], float, int]:
        """(bytes per rank, seconds, refused) of the moves of ``group``'s arrays under one schedule: the
        kernels that touch them, as planned on their candidates and restricted to those arrays, decided by
        the lowering's own planner (:func:`~dace_partition.plan.decide`); ``refused`` is 1 where ``lower``
        would refuse the schedule for them (``io="distributed"``: an argument no tile serves)."""
        per, comm = [0] * self.ranks, [0.0]
        kms = tuple(km for km in (restricted(p.plan, group) for p in priced if p.plan is not None) if km.moves)
        if not kms:
            return per, 0.0, 0
        plan = LoweringPlan(kms, max(km.analysis.size for km in kms), tuple(self.kernels))
        try:
            _, model = decide(self.sdfg, plan, self.solvers, io=IoMode(self.io))
        except UnsupportedPattern:
            return per, 0.0, 1
        for t in traffic(model):
            cost = self._solver_cost(t.move, t.solver)
            n = self._point_trips(model, t.point)
            _add_cost(per, comm, cost, n, self.machine)
            if trace is not None and cost is not None and cost.per_rank is not None:
                trace.append((t.move.array, str(t.move.kind), sum(cost.per_rank) * n))
        return per, comm[0], 0

    def _solver_cost(self, move: Move, solver: str) -> Optional[Cost]:
        """What ``move`` costs by ``solver``. Blocks that name a loop's variable (adi's row ``v[j + 1, ...]``
        in ``for j``) have no byte count until the variable has a value: they are priced at the loop's middle
        iteration, not as free (a move free in the model was chosen, and cost 30x the time of rank 0 alone)."""
        key = (move, solver)
        if key not in self._costs:
            s = get_solver(solver)
            cost = s.cost(move)
            middle = self._loop_values() if cost.per_rank is None else None
            if middle:
                move = move.bound(middle)
                cost = s.cost(move)
            self._costs[key] = self._levels(move, cost)
        return self._costs[key]

    def _loop_values(self) -> Dict[str, int]:
        """{loop variable: its value at the loop's middle iteration}, for the loops whose range is known
        (an inner loop's range may name an outer loop's variable)."""
        if self._middle is None:
            from ..schedule.loops import find_loops
            known = {**{k: v for k, v in self.sdfg.constants.items() if isinstance(v, (int, np.integer))},
                     **self.sizes}
            ranges = [r for r in (lp.for_range(self.sdfg) for lp in find_loops(self.sdfg)) if r is not None]
            self._middle = {}
            for _ in range(len(ranges)):  # outer variables first, as often as loops nest
                for var, (start, end, step) in ranges:
                    if var in self._middle:
                        continue
                    try:
                        b, e, st = (_const(x, {**known, **self._middle}) for x in (start, end, step))
                    except (TypeError, ValueError):
                        continue
                    n = (e - b) // st + 1 if st else 0
                    if n > 0:
                        self._middle[var] = b + st * ((n - 1) // 2)
        return self._middle

    def _point_trips(self, model, point) -> int:
        """How many times per call what happens at ``point`` runs: its state's runs at a kernel, else the
        iterations of the loops around the loop it is before or after."""
        if point not in self._trips_at:
            if point.at_kernel:
                n = self._state_trips(point.state)
            else:
                n = 1
                for lp in loops_around(model, point):
                    n *= self._loop_trips(lp)
            self._trips_at[point] = n
        return self._trips_at[point]

    def _state_trips(self, state) -> int:
        """Runs per call of a state (the loops around it)."""
        if state not in self._runs:
            from ..passes.loops import trips
            self._runs[state] = self._count(trips(self.sdfg, state))
        return self._runs[state]

    def _loop_trips(self, lp) -> int:
        """Iterations per execution of a loop."""
        if lp.head not in self._iterations:
            self._iterations[lp.head] = self._count(lp.trips(self.sdfg))
        return self._iterations[lp.head]

    def _count(self, t) -> int:
        """A trip count (int, formula or None) as a number: :data:`DEFAULT_TRIPS` where data decides it."""
        try:
            return max(_const(t, {**self.sdfg.constants, **self.sizes}), 1)
        except (TypeError, ValueError):
            return DEFAULT_TRIPS

    def _trips_of(self, k: Kernel) -> int:
        return self._state_trips(k.state)


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
        if t is None:  # a loop whose trips depend on data (a while loop): priced at the default size
            t = DEFAULT_SIZE
        try:
            t = int(sympy.sympify(t).subs({f: consts[str(f)] for f in sympy.sympify(t).free_symbols
                                          if str(f) in (consts or {})}))
        except (TypeError, ValueError, sympy.SympifyError):
            t = DEFAULT_SIZE
        total += max(t, 0) * _ops_of(st, st.scope_children()[None], consts)
    return max(total, 1.0)
