"""The DistributedMemlet library node (thesis def. 4.4.1): one :class:`~dace_partition.ir.Move` in the SDFG.

The node carries its Move in serializable properties: the source and destination distributions (an
empty grid is rank 0, which holds the global array), the combine operator and whether the destination
accumulates. Its input connector reads the source buffer, its output connector writes the destination
buffer. The node communicates, so it declares side effects: no DaCe pass may drop or reorder it. Which
solver expands it is its ``implementation``; what that solver decided at lowering beyond the move (the
hierarchical solver's program for the machine hierarchy it saw) is its ``decision``.
"""
import dace
import dace.library
from dace import nodes
from dace.properties import ListProperty, Property, ShapeProperty, SubsetProperty

from ..ir import Distribution, Move, ReduceOp

_SIDES = ("src", "dst")


@dace.library.node
class DistributedMemlet(nodes.LibraryNode):
    implementations = {}  # one per solver: see dace_partition.solvers.registry
    default_implementation = "blocks"

    array = Property(dtype=str, default="", desc="Global array")
    shape = ShapeProperty(default=[], desc="Shape of the global array")
    itemsize = Property(dtype=int, default=0, desc="Bytes per element")
    src_subset = SubsetProperty(allow_none=True, default=None, desc="Source: per-rank subset (grid coordinates)")
    src_grid = ListProperty(element_type=int, desc="Source process grid shape (empty: rank 0)")
    src_grid_id = Property(dtype=int, default=-1, desc="Source grid's runtime id")
    src_coords = ListProperty(element_type=str, desc="Source grid coordinate symbols ('' for size-1 dims)")
    src_pending = Property(dtype=str, default="", desc="Source replicas hold partial results of this operator")
    dst_subset = SubsetProperty(allow_none=True, default=None, desc="Destination: per-rank subset")
    dst_grid = ListProperty(element_type=int, desc="Destination process grid shape (empty: rank 0)")
    dst_grid_id = Property(dtype=int, default=-1, desc="Destination grid's runtime id")
    dst_coords = ListProperty(element_type=str, desc="Destination grid coordinate symbols")
    op = Property(dtype=str, default="", desc="Write-conflict operator of gathered values (sum/prod/min/max)")
    accumulates = Property(dtype=bool, default=False, desc="Accumulated output: its prior value must count once")
    decision = Property(dtype=str, default="", desc="What the chosen solver decided at lowering that its code "
                        "needs (Solver.decision); recorded when the lowering prices the move")

    def __init__(self, name, move: Move = None, **kwargs):
        super().__init__(name, inputs={"_in"}, outputs={"_out"}, **kwargs)
        if move is not None:
            self.set_move(move)

    @property
    def has_side_effects(self) -> bool:
        return True

    def set_move(self, move: Move):
        self.array = move.array
        self.shape, self.itemsize = list(move.shape), move.itemsize
        for side, dist in zip(_SIDES, (move.src, move.dst)):
            setattr(self, f"{side}_subset", None if dist.is_root else dist.range)
            setattr(self, f"{side}_grid", list(dist.grid))
            setattr(self, f"{side}_grid_id", dist.grid_id)
            setattr(self, f"{side}_coords", [c or "" for c in dist.coords])
        self.src_pending = str(move.src.pending) if move.src.partial else ""
        self.op = str(move.op) if move.op else ""
        self.accumulates = move.accumulates

    def distribution(self, side: str) -> Distribution:
        grid = getattr(self, f"{side}_grid")
        if not grid:
            return Distribution()
        pending = self.src_pending if side == "src" else None
        return Distribution.on_grid(getattr(self, f"{side}_subset"), grid, getattr(self, f"{side}_coords"),
                                    getattr(self, f"{side}_grid_id"), pending or None)

    def move(self, sdfg=None) -> Move:
        """The node's Move (a frozen value: compare, hash, cost it)."""
        return Move(self.array, self.distribution("src"), self.distribution("dst"), tuple(self.shape),
                    int(self.itemsize), ReduceOp.of(self.op or None), bool(self.accumulates))

    @property
    def grid_id(self) -> int:
        """The kernel this move serves: the destination grid, or the source grid of a gather."""
        return self.src_grid_id if not self.dst_grid else self.dst_grid_id

    def __str__(self):
        return f"{self.array}: {self.distribution('src')} -> {self.distribution('dst')}"
