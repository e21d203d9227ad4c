"""The DistributedMemlet library node (thesis def. 4.4.1): data movement between process grids.

One side is a process grid (its shape, runtime id and coordinate symbols) with a symbolic subset of the
global array per rank; the other side is rank 0, which holds the global array. ``scatter`` moves
rank 0 -> grid (before a kernel), ``gather`` moves grid -> rank 0 (after it).
"""
import dace
from dace import nodes
from dace.properties import ListProperty, Property, SubsetProperty, make_properties
from dace.transformation.transformation import ExpandTransformation

from .environment import DacePartitionMPI
from .solvers import grid_mapped


@dace.library.expansion
class ExpandGridMapped(ExpandTransformation):
    """Scatterv/Gatherv with block datatypes on the partition sub-grid + Bcast/Reduce on the replicas."""
    environments = [DacePartitionMPI]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        ein = parent_state.in_edges(node)[0]
        eout = parent_state.out_edges(node)[0]
        gdesc = parent_sdfg.arrays[node.array]
        ldesc = parent_sdfg.arrays[(eout if node.direction == "scatter" else ein).data.data]
        code = grid_mapped.emit(node, gdesc, ldesc, parent_sdfg)
        ptr = dace.pointer(gdesc.dtype)
        return nodes.Tasklet(node.name, {"_in": ptr}, {"_out": ptr}, code, language=dace.Language.CPP)


@dace.library.node
class DistributedMemlet(nodes.LibraryNode):
    implementations = {"grid_mapped": ExpandGridMapped}
    default_implementation = "grid_mapped"

    direction = Property(dtype=str, default="scatter", desc="'scatter' (rank 0 -> grid) or 'gather' (grid -> rank 0)")
    array = Property(dtype=str, default="", desc="Global array")
    subset = SubsetProperty(allow_none=True, default=None, desc="Per-rank subset of the global array, in grid coordinate symbols")
    grid = ListProperty(element_type=int, desc="Process grid shape")
    grid_id = Property(dtype=int, default=0, desc="Runtime id of the process grid")
    coords = ListProperty(element_type=str, desc="Grid coordinate symbol per dimension ('' for size-1 dims)")
    op = Property(dtype=str, default=None, allow_none=True, desc="Write-conflict operator (sum/prod/min/max)")
    identity_fill = Property(dtype=bool, default=False,
                             desc="Replicas other than the first start from the operator's identity")

    def __init__(self, name, direction="scatter", array="", subset=None, grid=(), grid_id=0, coords=(), op=None,
                 identity_fill=False, **kwargs):
        super().__init__(name, inputs={"_in"}, outputs={"_out"}, **kwargs)
        self.direction, self.array, self.subset = direction, array, subset
        self.grid, self.grid_id, self.coords = list(grid), grid_id, [c or "" for c in coords]
        self.op, self.identity_fill = op, identity_fill

    @property
    def src_grid(self):
        return None if self.direction == "scatter" else tuple(self.grid)

    @property
    def dst_grid(self):
        return tuple(self.grid) if self.direction == "scatter" else None

    def mapping(self):
        return grid_mapped.match(self.array, self.subset, self.grid, [c or None for c in self.coords])

    def __str__(self):
        if self.direction == "scatter":
            return f"{self.array} -> {self.array}[{self.subset}] on grid {tuple(self.grid)}"
        return f"{self.array}[{self.subset}] on grid {tuple(self.grid)} -> {self.array}"
