"""The solver interface: how a :class:`~dace_partition.ir.Move` is implemented.

A solver answers three questions about a Move (any kind: scatter, gather, grid-to-grid redistribution,
allreduce of partial results): ``refuse`` (None if it implements the move, else why not, in words),
``cost`` (bytes each rank receives, messages, the MPI calls it makes) and ``emit`` (the C++ code of the
tasklet that does it). Solvers never see the program: data flows schedule -> constraints -> Move ->
solver. Adding a solver, for any kind of move, is writing one subclass (and registering it, or naming it
under the ``dace_partition.solvers`` entry point).
"""
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
from dace import subsets

from ..ir import Cost, Distribution, Move, MoveKind
from ..ir.boxes import overlaps, volume


@dataclass
class CommSpec:
    """A scatter or gather seen from its grid side (kept for solvers written against the first interface;
    built-in solvers read :class:`Move` directly)."""
    array: str
    direction: MoveKind  # SCATTER (rank 0 -> grid) or GATHER (grid -> rank 0)
    subset: subsets.Range
    grid: Tuple[int, ...]
    coords: Tuple[Optional[str], ...]
    shape: Tuple[object, ...]  # of the global array
    itemsize: int
    op: Optional[str] = None
    accumulates: bool = False
    dist: Optional[Distribution] = None

    def distribution(self) -> Distribution:
        if self.dist is None:
            self.dist = Distribution.on_grid(self.subset, self.grid, self.coords, 0)
        return self.dist

    def blocks(self):
        """(start, count) of every rank's block in rank order, or None if not known before run time."""
        return self.distribution().blocks()

    def may_overlap(self) -> bool:
        return self.distribution().may_overlap()


def block_shape(subset: subsets.Range, grid: Sequence[int], coords: Sequence[Optional[str]],
                fixed: Optional[dict] = None) -> List[object]:
    """Shape of the rank-local buffer for ``subset`` (see :attr:`Distribution.local_shape`). ``fixed``:
    the program's specialized sizes by name; with them the blocks are known and the buffer is the largest
    (a triangular block grows with the grid coordinate)."""
    if fixed:
        from ..analysis.constraints import with_known
        subset = subsets.Range([tuple(with_known(x, fixed) for x in r) for r in subset])
    return list(Distribution.on_grid(subset, grid, coords, 0).local_shape)


def messages_between(src_blocks, dst_blocks, senders=None) -> int:
    """Point-to-point transfers between distinct ranks that share elements (source -> destination)."""
    m = overlaps(src_blocks, dst_blocks) > 0
    if len(src_blocks) == len(dst_blocks):
        np.fill_diagonal(m, False)
    else:
        for w in range(min(len(src_blocks), len(dst_blocks))):
            m[w, w] = False
    if senders is not None:
        m[~np.asarray(senders, dtype=bool), :] = False
    return int(m.sum())


class Solver:
    """Base class of solvers; subclasses set ``name`` (and ``kinds``) and implement the three methods."""
    name = "solver"
    kinds: FrozenSet[MoveKind] = frozenset(MoveKind)
    environments: list = []
    # Whether ``emit`` honours the rank-local buffer's strides, so the buffer may be a box of a larger one
    # (a kernel's block inside a block-plus-halo buffer); solvers that assume a contiguous block do not.
    box_views: bool = False

    def refuse(self, move: Move) -> Optional[str]:
        """None if this solver implements ``move``, else the reason in words."""
        if move.kind not in self.kinds:
            return f"implements {', '.join(sorted(str(k) for k in self.kinds))} moves, not {move.kind}"
        return None

    def cost(self, move: Move) -> Cost:
        """Bytes each world rank receives from other ranks, messages, and the MPI calls (for reports)."""
        raise NotImplementedError

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        """C++ code of the tasklet; its connectors ``_in`` (source buffer) and ``_out`` (destination
        buffer) are pointers. For a scatter the source is rank 0's global array, for a gather the
        destination is."""
        raise NotImplementedError

    def decision(self, move: Move) -> str:
        """What :meth:`emit` needs besides ``move`` that only the lowering knows (default: nothing, "").

        The lowering records it on the move's DistributedMemlet (its ``decision`` property) when it prices
        the move for the report, and code generation hands it to :meth:`emit_decided`: the build emits what
        the report priced even where what the choice was made from (the environment) has changed or is
        gone. A solver whose choice follows from the move alone leaves this as it is."""
        return ""

    def emit_decided(self, move: Move, decision: str, src_desc, dst_desc) -> str:
        """:meth:`emit` for the ``decision`` this solver gave at lowering (see :meth:`decision`)."""
        return self.emit(move, src_desc, dst_desc)

    def __repr__(self):
        return f"<solver {self.name}>"


def scatter_gather_sizes(move: Move):
    """(blocks, bytes per grid rank, first replicas) of a scatter's or gather's grid side."""
    g = move.grid_side
    world = move.world
    blocks = g.world_blocks(world)
    if blocks is None:
        return None, None, None
    sizes = [volume(c) * move.itemsize if w < g.size else 0 for w, (_, c) in enumerate(blocks)]
    return blocks, sizes, g.first_replicas(world)


def received(per_rank) -> int:
    return sum(1 for b in per_rank if b)
