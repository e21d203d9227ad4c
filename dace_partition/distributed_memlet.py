"""The DistributedMemlet library node (thesis def. 4.4.1): data movement between process grids.

``scatter`` moves rank 0 -> grid (before a kernel), ``gather`` moves grid -> rank 0 (after it): one side
is a process grid (shape, runtime id, coordinate symbols) with a symbolic per-rank subset of the global
array, the other is rank 0, which holds the global array. ``redistribute`` moves an intermediate from the
local buffers of one grid (the ``src_*`` properties) straight to those of another (fusion, thesis 4.5).
"""
import dace
import dace.library
from dace import nodes
from dace.properties import ListProperty, Property, SubsetProperty, make_properties

from .solvers.base import CommSpec


@dace.library.node
class DistributedMemlet(nodes.LibraryNode):
    implementations = {}  # one per solver: see dace_partition.solvers.registry
    default_implementation = "grid_mapped"

    direction = Property(dtype=str, default="scatter", desc="'scatter' (rank 0 -> grid) or 'gather' (grid -> rank 0)")
    array = Property(dtype=str, default="", desc="Global array")
    subset = SubsetProperty(allow_none=True, default=None, desc="Per-rank subset of the global array, in grid coordinate symbols")
    grid = ListProperty(element_type=int, desc="Process grid shape")
    grid_id = Property(dtype=int, default=0, desc="Runtime id of the process grid")
    coords = ListProperty(element_type=str, desc="Grid coordinate symbol per dimension ('' for size-1 dims)")
    op = Property(dtype=str, default=None, allow_none=True, desc="Write-conflict operator (sum/prod/min/max)")
    identity_fill = Property(dtype=bool, default=False,
                             desc="Accumulated output: its prior value must count once")
    src_subset = SubsetProperty(allow_none=True, default=None, desc="redistribute: per-rank subset on the source")
    src_grid = ListProperty(element_type=int, desc="redistribute: source process grid shape")
    src_grid_id = Property(dtype=int, default=0, desc="redistribute: runtime id of the source grid")
    src_coords = ListProperty(element_type=str, desc="redistribute: source grid coordinate symbols")
    synthesis = Property(dtype=str, default="", desc="redistribute: the synthesizer problem (JSON: mesh, shape, "
                         "source and target layouts) when both sides are block layouts of one mesh")
    reduce_dims = ListProperty(element_type=int, desc="redistribute: partial results combined by MPI_Allreduce "
                               "over these source grid dimensions (blocks equal on both sides)")

    def __init__(self, name, direction="scatter", array="", subset=None, grid=(), grid_id=0, coords=(), op=None,
                 identity_fill=False, **kwargs):
        super().__init__(name, inputs={"_in"}, outputs={"_out"}, **kwargs)
        self.direction, self.array, self.subset = direction, array, subset
        self.grid, self.grid_id, self.coords = list(grid), grid_id, [c or "" for c in coords]
        self.op, self.identity_fill = op, identity_fill

    @property
    def source(self):
        """Source grid shape (None = rank 0)."""
        if self.direction == "redistribute":
            return tuple(self.src_grid)
        return None if self.direction == "scatter" else tuple(self.grid)

    @property
    def destination(self):
        """Destination grid shape (None = rank 0)."""
        return None if self.direction == "gather" else tuple(self.grid)

    def spec(self, gdesc) -> CommSpec:
        return CommSpec(self.array, self.direction, self.subset, tuple(self.grid),
                        tuple(c or None for c in self.coords), tuple(gdesc.shape), gdesc.dtype.bytes, self.op,
                        self.identity_fill)

    def __str__(self):
        if self.direction == "redistribute":
            return (f"{self.array}[{self.src_subset}] on grid {tuple(self.src_grid)} -> "
                    f"{self.array}[{self.subset}] on grid {tuple(self.grid)}")
        if self.direction == "scatter":
            return f"{self.array} -> {self.array}[{self.subset}] on grid {tuple(self.grid)}"
        return f"{self.array}[{self.subset}] on grid {tuple(self.grid)} -> {self.array}"
