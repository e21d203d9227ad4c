"""What ``lower`` did, built once from the solvers' answers after every pass has run.

Per kernel: its grid, notes (derived grids, fusion, rank-local arguments) and one :class:`CommEntry`
per remaining Move; per Move a :class:`Traffic` row with the bytes each rank receives (the unit the PMPI
counter measures, so ``run_counted`` can compare them) and the schedule's minimum.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from .ir import Cost, Move, MoveKind


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

    def __str__(self):
        op = f" ({self.op})" if self.op else ""
        size = f", {self.bytes} B" if self.bytes is not None else ""
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

    def bytes_per_rank(self) -> Optional[List[int]]:
        """Bytes each rank receives from other ranks in one call of the program (None: run-time sizes)."""
        if any(t.per_rank is None for t in self.traffic):
            return None
        return [sum(t.per_rank[r] for t in self.traffic if r < len(t.per_rank)) for r in range(self.ranks_needed)]

    @property
    def total_bytes(self) -> Optional[int]:
        per = self.bytes_per_rank()
        return None if per is None else sum(per)

    @property
    def minimum_bytes(self) -> Optional[int]:
        if any(t.minimum is None for t in self.traffic):
            return None
        return sum(t.minimum_total for t in self.traffic)

    def __str__(self):
        head = f"dace-partition lowering of '{self.program}' (needs {self.ranks_needed} MPI rank(s), io={self.io})"
        lines = [head]
        if self.blas:
            lines.append(f"  local BLAS: {self.blas}")
        lines.append(f"  rank-local buffers: {self.persistent_bytes} B per rank, allocated once when the program "
                     "starts")
        lines += [str(k) for k in self.kernels]
        lines.append(f"  communication ({len(self.traffic)} move(s), bytes received from other ranks):")
        lines += [str(t) for t in self.traffic]
        per = self.bytes_per_rank()
        if per is not None:
            lines.append(f"  total {sum(per)} B (minimum for this schedule {self.minimum_bytes} B); per rank {per}")
        return "\n".join(lines)

    def calls(self, array: str) -> List[str]:
        return [c for k in self.kernels for e in k.comm if e.array == array for c in e.calls]


def _where(dist) -> str:
    return "rank 0" if dist.is_root else f"grid {tuple(dist.grid)}"


def entry(move: Move, solver, refused=()) -> Tuple[CommEntry, Traffic]:
    """The report's two views of one Move implemented by ``solver``: both from one ``cost`` answer."""
    cost = solver.cost(move)
    world = move.world
    minimum = move.minimum(world)
    side = move.dst if not move.dst.is_root else move.src
    op = move.op if move.kind in (MoveKind.SCATTER, MoveKind.GATHER) else move.src.pending
    e = CommEntry(move.array, direction_of(move), str(side.range), solver.name, list(cost.calls),
                  str(op) if op else None, list(refused), cost.total, move.kind, move, cost)
    t = Traffic(move.array, _where(move.src), _where(move.dst), solver.name, list(cost.calls),
                list(cost.per_rank) if cost.per_rank is not None else None, minimum, cost.messages)
    return e, t
