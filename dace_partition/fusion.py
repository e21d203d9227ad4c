"""Communication fusion (thesis 4.5).

After rank tiling, a transient that one kernel produces and the next consumes makes a round trip:
``local_A -> gather to rank 0 -> T -> scatter from rank 0 -> local_B``. The pair becomes

* nothing, when both kernels run on grids of the same shape (so the same ranks, with the same
  coordinates) and both sides hold the same block (the same constraint up to renaming of grid
  coordinates): kernel B reads ``local_A`` directly;
* otherwise one ``redistribute`` DistributedMemlet ``local_A -> local_B`` that moves, between the two
  grids directly, what each rank of B needs from each rank of A. Partial results (a write-conflict
  operator with several ranks per block) are combined on arrival (reduce-scatter).

Either way ``T`` is never allocated at global size nor sent to rank 0.
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import dace
import sympy
from dace import nodes
from dace.memlet import Memlet
from dace.sdfg import SDFG

from .constraints import same_subset
from .distributed_memlet import DistributedMemlet
from .schedule import grid_size, ordered_states
from .solvers.base import CommSpec


def _dms(sdfg: SDFG):
    out = []
    for st in ordered_states(sdfg):
        for n in st.nodes():
            if isinstance(n, DistributedMemlet):
                out.append((st, n))
    return out


def _uses(sdfg: SDFG, name: str) -> List[Tuple[object, nodes.AccessNode]]:
    return [(st, n) for st in ordered_states(sdfg) for n in st.data_nodes() if n.data == name]


def _split_dims(grid, coords):
    """The grid's dimensions of size > 1 with their coordinate symbols: two grids with the same such
    sizes place the same ranks at the same coordinates (row-major, size-1 dimensions do not count)."""
    return [(g, c) for g, c in zip(grid, coords) if g > 1]


def _renamed(subset, names: Dict[str, str]):
    """``subset`` with grid coordinate symbols renamed (by name: DaCe symbols carry a type)."""

    def sub(x):
        x = sympy.sympify(x)
        return x.subs({f: dace.symbolic.symbol(names[str(f)], dace.int32) for f in x.free_symbols if str(f) in names})

    return type(subset)([(sub(b), sub(e), s) for b, e, s in subset])


def _replicas(dm) -> int:
    """Ranks holding each block: product of the grid dimensions the subset does not depend on."""
    used = {str(f) for b, e, _ in dm.subset for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols}
    n = 1
    for g, c in zip(dm.grid, dm.coords):
        if g > 1 and c not in used:
            n *= g
    return n


@dataclass
class Fused:
    array: str
    producer: int
    consumer: int
    kind: str  # "noop" or "redistribute"
    op: Optional[str] = None
    bytes: Optional[int] = None


def _world_blocks(dm, subset, grid, coords, world):
    spec = CommSpec(dm.array, "scatter", subset, tuple(grid), tuple(c or None for c in coords), (), 1)
    blocks = spec.blocks()
    if blocks is None:
        return None
    empty = (tuple(0 for _ in subset), tuple(0 for _ in subset))
    return blocks + [empty] * (world - len(blocks))


def _redistribution_bytes(g, s, itemsize, partial: bool) -> Optional[int]:
    """Bytes sent between different ranks: intersections of source and destination blocks. Without
    partial results, identical source blocks (replicas) send once; with them, every holder sends."""
    world = max(grid_size(g.grid), grid_size(s.grid))
    src = _world_blocks(g, g.subset, g.grid, g.coords, world)
    dst = _world_blocks(s, s.subset, s.grid, s.coords, world)
    if src is None or dst is None:
        return None
    senders = range(world) if partial else [w for w in range(world) if src[w] not in src[:w]]
    total = 0
    for w in senders:
        for q in range(world):
            if q != w:
                n = 1
                for a, m, b, k in zip(src[w][0], src[w][1], dst[q][0], dst[q][1]):
                    n *= max(0, min(a + m, b + k) - max(a, b))
                total += n
    return total * itemsize


def fuse_roundtrips(sdfg: SDFG) -> List[Fused]:
    """Fuses gather/scatter pairs of transients (see the module docstring)."""
    fused: List[Fused] = []
    dms = _dms(sdfg)
    gathers = [(st, n) for st, n in dms if n.direction == "gather"]
    scatters = [(st, n) for st, n in dms if n.direction == "scatter"]
    for gst, g in gathers:
        arr = g.array
        desc = sdfg.arrays.get(arr)
        if desc is None or not desc.transient or g.identity_fill:
            continue
        readers = [(st, x) for st, x in scatters if x.array == arr]
        uses = _uses(sdfg, arr)
        # T must be written only by this gather and read only by one scatter.
        if len(readers) != 1 or len(uses) != 2:
            continue
        sst, s = readers[0]
        if s.identity_fill:
            continue
        partial = g.op is not None and _replicas(g) > 1
        gd, sd = _split_dims(g.grid, g.coords), _split_dims(s.grid, s.coords)
        same = (not partial and [x for x, _ in gd] == [x for x, _ in sd]
                and same_subset(_renamed(s.subset, {sc: gc for (_, gc), (_, sc) in zip(gd, sd)}), g.subset))
        local_a = gst.in_edges(g)[0].src.data
        local_b = sst.out_edges(s)[0].dst.data
        if same and sdfg.arrays[local_a].shape == sdfg.arrays[local_b].shape:
            for st, n in ((gst, g), (sst, s)):
                st.remove_nodes_from([e.src for e in st.in_edges(n)] + [e.dst for e in st.out_edges(n)] + [n])
            for st in ordered_states(sdfg):
                for n in st.data_nodes():
                    if n.data == local_b:
                        n.data = local_a
                for e in st.edges():
                    if e.data.data == local_b:
                        e.data.data = local_a
            del sdfg.arrays[local_b]
            fused.append(Fused(arr, g.grid_id, s.grid_id, "noop"))
        else:
            nbytes = _redistribution_bytes(g, s, desc.dtype.bytes, partial)
            gst.remove_nodes_from([e.src for e in gst.in_edges(g)] + [e.dst for e in gst.out_edges(g)] + [g])
            t_node = sst.in_edges(s)[0].src
            sst.remove_node(t_node)
            s.direction = "redistribute"
            s.src_subset, s.src_grid, s.src_grid_id, s.src_coords = g.subset, list(g.grid), g.grid_id, list(g.coords)
            s.op = g.op if partial else None
            s.implementation = "blocks"
            sst.add_edge(sst.add_read(local_a), None, s, "_in", Memlet.from_array(local_a, sdfg.arrays[local_a]))
            fused.append(Fused(arr, g.grid_id, s.grid_id, "redistribute", s.op, nbytes))
        if not _uses(sdfg, arr):
            del sdfg.arrays[arr]
        scatters.remove((sst, s))
    return fused
