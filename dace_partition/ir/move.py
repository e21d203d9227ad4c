"""``Move``: one array going from one :class:`Distribution` to another, as a frozen value.

Every communication of a lowered program is a Move: a scatter (rank 0 -> grid), a gather (grid ->
rank 0), a grid-to-grid redistribution, or an allreduce of partial results into the same blocks. Its kind
is derived from the two distributions, never stored beside them. Solvers answer for a Move whether they
implement it, what it costs (:class:`Cost`) and its C++ code; the schedule's lower bound on the bytes
(:meth:`Move.minimum`) depends only on the Move.
"""
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .boxes import from_others, intersection, overlaps, volume
from .distribution import Distribution
from .kinds import MoveKind, ReduceOp


@dataclass(frozen=True)
class Cost:
    """What a solver's implementation of a Move costs: the bytes each world rank receives from other
    ranks (the unit the PMPI counter measures; None when only known at run time), the messages between
    distinct ranks it takes, and the MPI calls it makes (for reports)."""
    per_rank: Optional[Tuple[int, ...]]
    messages: Optional[int]
    calls: Tuple[str, ...]
    off_node: Optional[Tuple[int, ...]] = None  # of per_rank, the bytes from other nodes (ir.levels; None: unknown or one node)

    @property
    def total(self) -> Optional[int]:
        return None if self.per_rank is None else sum(self.per_rank)


@dataclass(frozen=True)
class Move:
    array: str
    src: Distribution
    dst: Distribution
    shape: Tuple[object, ...]  # of the global array
    itemsize: int
    op: Optional[ReduceOp] = None  # how written values combine (gathers: write conflicts; others: partials)
    accumulates: bool = False  # an accumulated output: its prior value must count once

    @property
    def kind(self) -> MoveKind:
        if self.src.is_root:
            return MoveKind.SCATTER
        if self.dst.is_root:
            return MoveKind.GATHER
        if self.src.partial and self.src.size == self.dst.size:
            a, b = self.src.blocks(), self.dst.blocks()
            if a is not None and a == b:
                return MoveKind.ALLREDUCE
        return MoveKind.REDISTRIBUTE

    @property
    def grid_side(self) -> Distribution:
        """The grid side of a scatter or gather (the destination of grid-to-grid moves)."""
        return self.src if self.kind == MoveKind.GATHER else self.dst

    @property
    def world(self) -> int:
        return max(self.src.size, self.dst.size, 1)

    def bound(self, symbols) -> "Move":
        """This move with ``symbols`` ({name: value}: the program's sizes, a loop's variable) replaced by
        their values, so that its blocks, and what each rank receives, can be computed."""
        import sympy

        def sub(x):
            x = sympy.sympify(x)
            return x.subs({f: symbols[str(f)] for f in x.free_symbols if str(f) in symbols})

        def dist(d: Distribution) -> Distribution:
            if d.is_root:
                return d
            return Distribution(d.grid, d.coords, tuple((sub(b), sub(e), sub(s)) for b, e, s in d.subset),
                                d.grid_id, d.pending)

        return Move(self.array, dist(self.src), dist(self.dst), tuple(sub(x) for x in self.shape), self.itemsize,
                    self.op, self.accumulates)

    def minimum(self, world: Optional[int] = None) -> Optional[List[int]]:
        """Bytes each rank must receive whatever the algorithm, given the two distributions: the part of its
        destination block it does not hold, the partial results it has to combine (an allreduce at its
        bandwidth lower bound, 2(p-1)/p of the block), the distinct blocks a gather collects."""
        world = world or self.world
        kind, size = self.kind, self.itemsize
        low = [0] * world
        if kind == MoveKind.SCATTER:
            blocks = self.dst.world_blocks(world)
            if blocks is None:
                return None
            first = self.dst.first_replicas(world)
            if self.accumulates and self.dst.may_overlap():
                return low  # replicas may start from the identity, the prior value staying on rank 0
            for w in range(1, self.dst.size):
                if self.accumulates and not first[w]:
                    continue
                low[w] = volume(blocks[w][1]) * size
            return low
        if kind == MoveKind.GATHER:
            blocks = self.src.world_blocks(world)
            if blocks is None:
                return None
            first = self.src.first_replicas(world)
            distinct = {blocks[0]}
            for w in range(1, self.src.size):
                if first[w] and blocks[w] not in distinct:
                    low[0] += volume(blocks[w][1]) * size
                    distinct.add(blocks[w])
            if self.op is not None and self.src.replicas > 1:
                for w in range(self.src.size):
                    if first[w]:
                        low[w] += (self.src.replicas - 1) * volume(blocks[w][1]) * size
            return low
        src, dst = self.src.world_blocks(world), self.dst.world_blocks(world)
        if src is None or dst is None:
            return None
        if kind == MoveKind.ALLREDUCE:
            p = self.src.replicas
            return [(2 * (p - 1) * volume(src[w][1]) * size) // p if w < self.src.size else 0 for w in range(world)]
        others = from_others(overlaps(src, dst))
        overlap = self.src.may_overlap()
        for me in range(world):
            if self.src.partial:
                low[me] = int(others[me]) * size
            elif volume(dst[me][1]) and not overlap:
                # one holder per element: what others hold of my block (elements nobody holds, such as a
                # boundary never written, cannot come from this move)
                low[me] = int(others[me]) * size
            elif volume(dst[me][1]):
                low[me] = (volume(dst[me][1]) - intersection(src[me], dst[me])) * size
        return low

    def __str__(self):
        op = f" ({self.op})" if self.op else ""
        return f"{self.kind} {self.array}: {self.src} -> {self.dst}{op}"
