"""Rank tiling (thesis 4.2): each rank executes one equal tile of a map's iteration space.

Unlike the thesis prototype, the tile stays in *global* index coordinates: the range of parameter ``i``
becomes ``l + r*b : l + r*b + b`` where ``r`` is the rank's grid coordinate, a symbol set at run time
from ``MPI_Cart_coords``. Tasklets that use ``i`` itself (``out[i] = x[i] + i``) therefore stay correct,
and only the memlets into rank-local arrays need an offset (done by the lowering, not here).
"""
from typing import List, Optional, Sequence

import dace
from dace import nodes, subsets
from dace.properties import ListProperty, make_properties
from dace.sdfg import utils as sdutil
from dace.transformation import transformation


def tile_bounds(extent, g: int, r):
    """(start, size) of tile ``r`` of ``g`` balanced tiles over ``extent`` iterations.

    Tile ``r`` starts at ``ceil(r * extent / g)``: sizes differ by at most one and the first tile is
    the largest (rank-local buffers are sized by rank 0's block). ``extent`` may be symbolic; then the
    sizes are computed when the program starts. (Written with ``int_ceil`` rather than ``Min``/``Max``
    of ``Mod`` terms: sympy simplifies these in a fraction of the time, which keeps lowering fast.)
    """
    try:
        q, m = divmod(int(extent), g)
        if m == 0:
            return r * q, q
    except TypeError:
        pass
    start = dace.symbolic.int_ceil(r * extent, g)
    return start, dace.symbolic.int_ceil((r + 1) * extent, g) - start


def tile_range(rng: subsets.Range, grid: Sequence[int], coords: Sequence[Optional[str]]) -> subsets.Range:
    """The tile of ``rng`` owned by the rank whose coordinate along dimension d is symbol ``coords[d]``.

    A dimension with grid size 1 (or no coordinate symbol) keeps its full range.
    """
    new = []
    for (b, e, s), g, c in zip(rng, grid, coords):
        if g == 1 or c is None:
            new.append((b, e, s))
            continue
        start, size = tile_bounds(e - b + 1, g, dace.symbolic.symbol(c, dace.int32))
        new.append((b + start, b + start + size - 1, 1))
    return subsets.Range(new)


@make_properties
class RankTileMap(transformation.SingleStateTransformation):
    """Shrinks a map to the tile of the executing rank (see the module docstring)."""

    map_entry = transformation.PatternNode(nodes.MapEntry)

    grid = ListProperty(element_type=int, desc="Process grid size along each map dimension")
    coords = ListProperty(element_type=str, desc="Grid coordinate symbol per map dimension ('' = not split)")

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.map_entry)]

    def why_not(self, map_entry: nodes.MapEntry) -> Optional[str]:
        """Why this map cannot be tiled with this grid, or None if it can."""
        m = map_entry.map
        if len(self.grid) != len(m.params):
            return f"grid {tuple(self.grid)} has {len(self.grid)} dimensions, map '{m.label}' has {len(m.params)}"
        for (b, e, s), g, p in zip(m.range, self.grid, m.params):
            if g == 1:
                continue
            if s != 1:
                return f"parameter '{p}' of map '{m.label}' has step {s}"
            ext = e - b + 1
            try:
                if g > int(ext):
                    return f"extent {ext} of '{p}' in map '{m.label}' is smaller than its {g} grid positions"
            except TypeError:
                pass  # symbolic extents are split when the program starts
        return None

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        return self.why_not(self.map_entry) is None

    def annotates_memlets(self) -> bool:
        # Only this map's state needs new memlets: DaCe's default re-propagates the whole SDFG after every
        # application, which made lowering quadratic in the number of maps (minutes for a 3-D stencil
        # with a few dozen maps).
        return True

    def apply(self, graph, sdfg):
        from ..compat import propagate_memlets_state
        m = self.map_entry.map
        coords: List[Optional[str]] = [c or None for c in self.coords]
        for c, g in zip(coords, self.grid):
            if c is not None and g > 1 and c not in sdfg.symbols:
                sdfg.add_symbol(c, dace.int32)
        m.range = tile_range(m.range, self.grid, coords)
        propagate_memlets_state(sdfg, graph)
