"""What ``lower`` did, built once from the solvers' answers after every pass has run.

Per kernel: its grid, notes (derived grids, fusion, rank-local arguments) and one :class:`CommEntry`
per remaining Move; per Move a :class:`Traffic` row with the bytes each rank receives (the unit the PMPI
counter measures, so ``run_counted`` can compare them) and the schedule's minimum.

A Move inside a loop runs once per iteration: its row carries the loop's trip count (``trips``: an int,
a formula in the program's symbols such as ``T``, or None when the count depends on data), its bytes are
per iteration, and :meth:`LoweringReport.bytes_per_rank` multiplies them out per call. Given the
program's symbols, it also costs Moves whose blocks are known only at run time (symbolic sizes).
"""
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import sympy

from .ir import Cost, Move, MoveKind


SLOW_LOWERING_S = 20.0  # a lowering slower than this says where the time went (report and a warning)


class Steps:
    """Wall time per step of the lowering, so a slow ``lower`` names the step to blame."""

    def __init__(self):
        self.times: Dict[str, float] = {}
        self._t = time.perf_counter()

    def done(self, step: str):
        now = time.perf_counter()
        self.times[step] = self.times.get(step, 0.0) + now - self._t
        self._t = now

    def timed(self, times: Dict[str, float]):
        """Adds steps timed elsewhere (a Pipeline's passes) that ran since the last step; the clock restarts."""
        for step, t in times.items():
            self.times[step] = self.times.get(step, 0.0) + t
        self._t = time.perf_counter()


def direction_of(move: Move) -> str:
    """Where a move goes: ``scatter`` (from rank 0), ``gather`` (to rank 0), ``redistribute`` (from one
    kernel to another), ``allreduce`` (within one kernel's grid: partial results combined in place)."""
    kind = move.kind
    if kind == MoveKind.ALLREDUCE and move.src.grid_id == move.dst.grid_id:
        return "allreduce"
    if kind in (MoveKind.SCATTER, MoveKind.GATHER):
        return str(kind)
    return "redistribute"


@dataclass
class CommEntry:
    array: str
    direction: str
    subset: str
    solver: str
    calls: List[str]
    op: Optional[str] = None
    refused: List[Tuple[str, str]] = field(default_factory=list)
    bytes: Optional[int] = None  # received from other ranks, summed over ranks, where known before run time
    kind: Optional[MoveKind] = None
    move: Optional[Move] = None
    cost: Optional[Cost] = None
    trips: object = 1  # runs per call: 1, a loop's trip count (int or formula), None when data-dependent

    def __str__(self):
        op = f" ({self.op})" if self.op else ""
        size = f", {self.bytes} B" if self.bytes is not None else ""
        if self.trips != 1:
            size += f" per iteration, {_times(self.trips)} per call"
        line = f"    {self.direction:12s} {self.array}[{self.subset}]{op}: {self.solver}: {' + '.join(self.calls)}{size}"
        for name, why in self.refused:
            line += f"\n      ({name} refused: {why})"
        return line


@dataclass
class KernelReport:
    name: str
    kind: str
    grid: Optional[Tuple[int, ...]]
    notes: List[str] = field(default_factory=list)
    comm: List[CommEntry] = field(default_factory=list)

    def __str__(self):
        where = f"grid {self.grid}" if self.grid else "rank 0 (not partitioned)"
        lines = [f"  {self.kind} '{self.name}' on {where}"]
        lines += [f"    note: {n}" for n in self.notes]
        lines += [str(c) for c in self.comm]
        return "\n".join(lines)


@dataclass
class Traffic:
    """One Move of the lowered program (``str`` is a table row)."""
    array: str
    source: str  # "rank 0" or "grid (..)"
    destination: str
    solver: str
    calls: List[str]
    per_rank: Optional[List[int]] = None  # bytes received by each world rank; None: only known at run time
    minimum: Optional[List[int]] = None
    messages: Optional[int] = None
    trips: object = 1  # runs per call (see the module docstring)
    move: Optional[Move] = None

    def per_call(self, **symbols) -> Optional[List[int]]:
        """Bytes each rank receives from this Move in one call of the program: per iteration times the trip
        count; with ``symbols`` (the program's sizes), also for blocks known only at run time. A loop whose
        count depends on data (``while res > tol``) takes it from ``iterations=``."""
        per = self.per_rank
        iterations = symbols.pop("iterations", None)
        if per is None and symbols and self.move is not None:
            from .solvers.registry import get
            cost = get(self.solver).cost(self.move.bound(symbols))
            per = None if cost.per_rank is None else list(cost.per_rank)
        n = _value(self.trips, symbols) if self.trips is not None else iterations
        if per is None or n is None:
            return None
        return [b * n for b in per]

    def off_node_per_call(self, layout, **symbols) -> Optional[List[int]]:
        """Of :meth:`per_call`, the bytes each rank receives from ranks on other nodes (``layout``: an
        ``ir.levels.NodeLayout``)."""
        from .ir.levels import off_node_bytes
        per = self.per_call(**dict(symbols))
        if per is None or self.move is None:
            return None
        move = self.move.bound(symbols) if symbols else self.move
        off = off_node_bytes(move, tuple(per), layout)
        return None if off is None else list(off)

    @property
    def total(self) -> Optional[int]:
        return None if self.per_rank is None else sum(self.per_rank)

    @property
    def minimum_total(self) -> Optional[int]:
        return None if self.minimum is None else sum(self.minimum)

    def __str__(self):
        if self.per_rank is None:
            size = "bytes known at run time"
        else:
            size = f"{self.total} B total, max {max(self.per_rank)} B/rank, minimum {self.minimum_total} B"
            if self.messages is not None:
                size += f", {self.messages} message(s)"
        if self.trips != 1:
            size += f"; per iteration, {_times(self.trips)} per call"
        return f"    {self.array}: {self.source} -> {self.destination}: {self.solver}: {' + '.join(self.calls)}; {size}"


@dataclass
class LoweringReport:
    """What ``lower`` did: per kernel its grid, derived inner grids, and the MPI calls of each move."""
    program: str
    ranks_needed: int
    kernels: List[KernelReport] = field(default_factory=list)
    io: str = "root"
    traffic: List[Traffic] = field(default_factory=list)  # every remaining Move, in program order
    persistent_bytes: object = 0  # rank-local buffers per rank, allocated once (int, or a formula)
    blas: str = ""  # the BLAS of the rank-local kernels
    row_kernels: List[str] = field(default_factory=list)  # GPU kernel chains fused into row kernels
    timings: Dict[str, float] = field(default_factory=dict)  # seconds per lowering step (see Steps)
    schedule: str = ""  # lower(ranks=P): the automatic schedule and why (Schedule.explain())
    unsplit: str = ""  # why nothing was partitioned (the whole program runs on rank 0), if so
    residency: object = None  # device="gpu": ir.residency.Residency (where each buffer lives, PCIe copies)
    nodes: object = None  # ir.levels.NodeLayout where ranks span several nodes (bytes per level), else None

    def slow_steps(self, threshold: float = SLOW_LOWERING_S) -> Optional[str]:
        """None when lowering took less than ``threshold`` seconds, else which steps took the time."""
        total = sum(self.timings.values())
        if total < threshold:
            return None
        worst = sorted(self.timings.items(), key=lambda kv: -kv[1])[:3]
        return f"lowering took {total:.1f} s; slowest steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in worst)

    def bytes_per_rank(self, **symbols) -> Optional[List[int]]:
        """Bytes each rank receives from other ranks in one call of the program, loops multiplied out (None:
        sizes or trip counts known only at run time; pass the program's symbols, e.g. ``N=40, T=5``, and
        ``iterations=`` for a loop whose count depends on data)."""
        rows = [t.per_call(**symbols) for t in self.traffic]
        if any(r is None for r in rows):
            return None
        return [sum(r[w] for r in rows if w < len(r)) for w in range(self.ranks_needed)]

    def bytes_per_iteration(self, **symbols) -> Optional[List[int]]:
        """Bytes each rank receives in one iteration of the program's loops (the Moves inside loops only)."""
        rows = [t for t in self.traffic if t.trips != 1]
        per = []
        for t in rows:
            p = t.per_rank if t.per_rank is not None or not symbols else \
                Traffic(t.array, t.source, t.destination, t.solver, t.calls, None, None, None, 1, t.move).per_call(**symbols)
            if p is None:
                return None
            per.append(p)
        return [sum(p[w] for p in per if w < len(p)) for w in range(self.ranks_needed)]

    def bytes_between_nodes(self, **symbols) -> Optional[List[int]]:
        """Of :meth:`bytes_per_rank`, the bytes each rank receives from ranks on other nodes (ranks placed as
        ``nodes`` says; None without a node layout, or where sizes are known only at run time)."""
        if self.nodes is None:
            return None
        rows = [t.off_node_per_call(self.nodes, **symbols) for t in self.traffic]
        if any(r is None for r in rows):
            return None
        return [sum(r[w] for r in rows if w < len(r)) for w in range(self.ranks_needed)]

    @property
    def total_bytes(self) -> Optional[int]:
        per = self.bytes_per_rank()
        return None if per is None else sum(per)

    @property
    def minimum_bytes(self) -> Optional[int]:
        """The schedule's minimum for one call, loops multiplied out as in :meth:`bytes_per_rank` (a halo
        inside a loop counts once per iteration in both); None where a minimum or a trip count is unknown."""
        total = 0
        for t in self.traffic:
            n = _value(t.trips, {}) if t.trips is not None else None
            if t.minimum is None or n is None:
                return None
            total += t.minimum_total * n
        return total

    def __str__(self):
        head = f"dace-partition lowering of '{self.program}' (needs {self.ranks_needed} MPI rank(s), io={self.io})"
        lines = [head]
        if self.schedule:
            lines += ["  " + line for line in self.schedule.splitlines()]
        if self.blas:
            lines.append(f"  local BLAS: {self.blas}")
        for r in self.row_kernels:
            lines.append(f"  GPU row kernel: {r}")
        lines.append(f"  rank-local buffers: {self.persistent_bytes} B per rank, allocated once when the program "
                     "starts")
        if self.residency is not None:
            lines += ["  " + line for line in self.residency.lines()]
        lines += [str(k) for k in self.kernels]
        if self.unsplit:
            lines.append(f"  nothing partitioned: {self.unsplit}")
        lines.append(f"  communication ({len(self.traffic)} move(s), bytes received from other ranks):")
        lines += [str(t) for t in self.traffic]
        per = self.bytes_per_rank()
        if per is not None:
            lines.append(f"  total {sum(per)} B (minimum for this schedule {self.minimum_bytes} B); per rank {per}")
        off = self.bytes_between_nodes()
        if off is not None and per is not None:
            lines.append(f"  by level, {self.nodes.nodes(self.ranks_needed)} node(s) of {self.nodes}: "
                         f"{sum(off)} B between nodes, {sum(per) - sum(off)} B inside nodes; between nodes per "
                         f"rank {off}")
        looped = [t for t in self.traffic if t.trips != 1]
        if looped:
            it = self.bytes_per_iteration()
            once = [t for t in self.traffic if t.trips == 1]
            outside = None if any(t.per_rank is None for t in once) else sum(t.total for t in once)
            trips = sorted({_times(t.trips) for t in looped})
            lines.append(f"  per call: {outside if outside is not None else 'run-time'} B outside loops + "
                         f"{sum(it) if it is not None else 'run-time'} B per iteration ({', '.join(trips)})")
        slow = self.slow_steps()
        if slow:
            lines.append(f"  {slow}")
        return "\n".join(lines)

    def calls(self, array: str) -> List[str]:
        return [c for k in self.kernels for e in k.comm if e.array == array for c in e.calls]


def _where(dist) -> str:
    return "rank 0" if dist.is_root else f"grid {tuple(dist.grid)}"


def _times(trips) -> str:
    return "a data-dependent number of iterations" if trips is None else f"{trips} iteration(s)"


def _value(expr, symbols):
    """An int from a trip count (int or formula) and the program's symbols; None if still unknown."""
    if expr is None:
        return None
    if isinstance(expr, int):
        return expr
    e = sympy.sympify(expr)
    e = e.subs({f: symbols[str(f)] for f in e.free_symbols if str(f) in symbols})
    return int(e) if not e.free_symbols else None


def entry(move: Move, solver, refused=(), trips=1) -> Tuple[CommEntry, Traffic]:
    """The report's two views of one Move implemented by ``solver``: both from one ``cost`` answer.
    ``trips``: how many times it runs per call (inside loops)."""
    cost = solver.cost(move)
    world = move.world
    minimum = move.minimum(world)
    side = move.dst if not move.dst.is_root else move.src
    op = move.op if move.kind in (MoveKind.SCATTER, MoveKind.GATHER) else move.src.pending
    e = CommEntry(move.array, direction_of(move), str(side.range), solver.name, list(cost.calls),
                  str(op) if op else None, list(refused), cost.total, move.kind, move, cost, trips)
    t = Traffic(move.array, _where(move.src), _where(move.dst), solver.name, list(cost.calls),
                list(cost.per_rank) if cost.per_rank is not None else None, minimum, cost.messages, trips, move)
    return e, t
