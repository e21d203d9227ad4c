"""Communication fusion (thesis 4.5).

After rank tiling, a transient that one kernel produces and the next consumes makes a round trip:
``local_A -> gather to rank 0 -> T -> scatter from rank 0 -> local_B``. The pair becomes

* nothing, when both kernels run on grids of the same shape (so the same ranks, with the same
  coordinates) and both sides hold the same block (the same constraint up to renaming of grid
  coordinates): kernel B reads ``local_A`` directly;
* partial results (a write-conflict operator with several ranks per block) that every holder needs
  combined, in the same blocks on the same ranks (a consumer scheduled with ``replicate``): one
  ``MPI_Allreduce`` on the reduction sub-grid (the Megatron pattern);
* block layouts on both sides (whole or evenly split dimensions, grids of one size): a redistribution
  synthesized by the collective-sequence synthesizer (``solvers/synthesized.py``);
* otherwise one ``redistribute`` DistributedMemlet ``local_A -> local_B`` that moves, between the two
  grids directly, what each rank of B needs from each rank of A (``MPI_Alltoallv``). Partial results
  are combined on arrival (reduce-scatter).

Either way ``T`` is never allocated at global size nor sent to rank 0. Likewise an input that the
program never writes and that a later kernel needs in the same blocks on the same ranks is scattered once.
"""
import json
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
from .solvers.synthesized import block_layouts, plan_of, received_per_rank


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
    kind: str  # "noop", "allreduce", "redistribute" or "reuse" (an input scattered once for two kernels)
    op: Optional[str] = None
    bytes: Optional[int] = None
    solver: str = "blocks"
    calls: Tuple[str, ...] = ()


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


def _allreduce_dims(sdfg: SDFG, g, s, local_a: str, local_b: str) -> Optional[List[int]]:
    """Source grid dimensions to MPI_Allreduce over, when ``s`` needs exactly the blocks ``g`` holds as
    partial results, on the same ranks, in local buffers of the same contiguous shape; else None."""
    if grid_size(g.grid) != grid_size(s.grid):
        return None
    world = grid_size(g.grid)
    src = _world_blocks(g, g.subset, g.grid, g.coords, world)
    dst = _world_blocks(s, s.subset, s.grid, s.coords, world)
    a, b = sdfg.arrays[local_a], sdfg.arrays[local_b]
    if src is None or src != dst or tuple(a.shape) != tuple(b.shape) or not (_contiguous(a) and _contiguous(b)):
        return None
    used = {str(f) for x, y, _ in g.subset for f in sympy.sympify(x).free_symbols | sympy.sympify(y).free_symbols}
    return [d for d, (n, c) in enumerate(zip(g.grid, g.coords)) if n > 1 and c not in used]


def _contiguous(desc) -> bool:
    return tuple(desc.strides) == tuple(dace.data.Array(desc.dtype, desc.shape).strides)


def _synthesis_problem(sdfg: SDFG, g, s, desc, local_a: str, local_b: str):
    """The synthesizer's problem when both sides are block layouts of one mesh in contiguous buffers."""
    if not (_contiguous(sdfg.arrays[local_a]) and _contiguous(sdfg.arrays[local_b])):
        return None
    return block_layouts(g.spec(desc), s.spec(desc))


def _allreduce_bytes(g, itemsize) -> Optional[int]:
    """Bandwidth lower bound of the allreduces: 2 (p-1)/p of the block per member, p = group size."""
    blocks = _world_blocks(g, g.subset, g.grid, g.coords, grid_size(g.grid))
    if blocks is None:
        return None
    p = _replicas(g)
    total = 0
    for _, count in blocks:
        n = 1
        for c in count:
            n *= c
        total += (2 * (p - 1) * n * itemsize) // p
    return total


def _plain(dm, desc) -> bool:
    """Whether the block moves like any other: not an accumulated output whose blocks overlap (there the
    prior value must reach only one holder). Accumulation into disjoint blocks (``x = 0`` then
    ``x[i] += ...``) is an ordinary block."""
    return not dm.identity_fill or not dm.spec(desc).may_overlap()


def _same_blocks(a, b) -> bool:
    """Whether two DistributedMemlets hold the same block on the same ranks (grid coordinates renamed)."""
    ad, bd = _split_dims(a.grid, a.coords), _split_dims(b.grid, b.coords)
    return ([x for x, _ in ad] == [x for x, _ in bd]
            and same_subset(_renamed(b.subset, {bc: ac for (_, ac), (_, bc) in zip(ad, bd)}), a.subset))


def _rename_data(sdfg: SDFG, old: str, new: str):
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            if n.data == old:
                n.data = new
        for e in st.edges():
            if e.data.data == old:
                e.data.data = new
    del sdfg.arrays[old]


def _drop(state, dm):
    """Removes a DistributedMemlet and its two access nodes."""
    state.remove_nodes_from([e.src for e in state.in_edges(dm)] + [e.dst for e in state.out_edges(dm)] + [dm])


def fuse_roundtrips(sdfg: SDFG) -> List[Fused]:
    """Fuses gather/scatter pairs of transients, and repeated scatters of inputs (module docstring).

    A transient may be written by several kernels in turn (``q = 0`` then ``q += ...``): each gather
    starts a new value, read by the scatters that follow it until the next gather.
    """
    fused: List[Fused] = []
    dms = _dms(sdfg)
    scatters = [(st, n) for st, n in dms if n.direction == "scatter"]
    for arr in dict.fromkeys(n.array for _, n in dms if n.direction == "gather"):
        desc = sdfg.arrays.get(arr)
        seq = [(st, n) for st, n in dms if n.array == arr]
        # T must be touched only by DistributedMemlets (no code on rank 0 reads or writes it).
        if desc is None or not desc.transient or len(_uses(sdfg, arr)) != len(seq):
            continue
        versions, current = [], None
        for st, n in seq:
            if n.direction == "gather":
                current = ((st, n), [])
                versions.append(current)
            elif current is not None:
                current[1].append((st, n))
        for (gst, g), readers in versions:
            if not readers or not _plain(g, desc) or not all(_plain(x, desc) for _, x in readers):
                continue
            fused += _fuse_version(sdfg, desc, gst, g, readers)
            for r in readers:
                scatters.remove(r)
        if not _uses(sdfg, arr):
            del sdfg.arrays[arr]
    fused += _dedupe_scatters(sdfg, scatters)
    return fused


def _writes(sdfg: SDFG, name: str, besides) -> bool:
    """Whether a kernel writes ``name`` (other than the access node ``besides`` that a scatter fills)."""
    return any(n.data == name and st.in_degree(n) > 0 and n is not besides
               for st in ordered_states(sdfg) for n in st.data_nodes())


def _fuse_version(sdfg: SDFG, desc, gst, g, readers) -> List[Fused]:
    """One value of T: the gather ``g`` and the scatters that read it become no-ops or redistributions."""
    arr = g.array
    fused = []
    partial = g.op is not None and _replicas(g) > 1
    local_a = gst.in_edges(g)[0].src.data
    for k, (sst, s) in enumerate(readers):
        out = sst.out_edges(s)[0].dst
        local_b = out.data
        # Reading local_a in place is safe unless this reader updates it and a later reader needs the old value.
        in_place = k == len(readers) - 1 or not _writes(sdfg, local_b, out)
        if (not partial and in_place and _same_blocks(g, s)
                and sdfg.arrays[local_a].shape == sdfg.arrays[local_b].shape):
            _drop(sst, s)
            _rename_data(sdfg, local_b, local_a)
            fused.append(Fused(arr, g.grid_id, s.grid_id, "noop"))
            continue
        dims = _allreduce_dims(sdfg, g, s, local_a, local_b) if partial else None
        problem = None if partial else _synthesis_problem(sdfg, g, s, desc, local_a, local_b)
        sst.remove_node(sst.in_edges(s)[0].src)
        s.direction = "redistribute"
        s.src_subset, s.src_grid, s.src_grid_id = g.subset, list(g.grid), g.grid_id
        s.src_coords = list(g.coords)
        s.op = g.op if partial else None
        s.identity_fill = False
        if dims:
            s.reduce_dims = dims
            s.implementation = "grid_mapped"
            f = Fused(arr, g.grid_id, s.grid_id, "allreduce", s.op, _allreduce_bytes(g, desc.dtype.bytes),
                      "grid_mapped", (f"MPI_Allreduce(MPI_{s.op.upper()}, grid dims {tuple(dims)})", ))
        elif problem is not None:
            plan = plan_of(problem)
            s.synthesis, s.implementation = json.dumps(problem), "synthesized"
            calls = tuple(f"{st.op}(axes {','.join(st.axes) or '-'})" for st in plan.steps) or ("local copy", )
            f = Fused(arr, g.grid_id, s.grid_id, "redistribute", None, sum(received_per_rank(plan)), "synthesized",
                      calls)
        else:
            s.implementation = "blocks"
            f = Fused(arr, g.grid_id, s.grid_id, "redistribute", s.op,
                      _redistribution_bytes(g, s, desc.dtype.bytes, partial), "blocks",
                      ("MPI_Alltoallv(world, packed)", ) + ((f"combine ({s.op})", ) if s.op else ()))
        sst.add_edge(sst.add_read(local_a), None, s, "_in", Memlet.from_array(local_a, sdfg.arrays[local_a]))
        fused.append(f)
    _drop(gst, g)
    return fused


def _dedupe_scatters(sdfg: SDFG, scatters) -> List[Fused]:
    """An array that the program never writes, scattered again in the same blocks to the same ranks,
    is read from the first scatter's local buffer instead."""
    written = {n.data for st in ordered_states(sdfg) for n in st.data_nodes() if st.in_degree(n) > 0}
    out = []
    firsts = []
    for st, s in scatters:
        if s.identity_fill or s.array in written:
            continue
        local_b = st.out_edges(s)[0].dst.data
        first = next(((fst, f) for fst, f in firsts if f.array == s.array and _same_blocks(f, s)
                      and sdfg.arrays[fst.out_edges(f)[0].dst.data].shape == sdfg.arrays[local_b].shape), None)
        if first is None:
            firsts.append((st, s))
            continue
        local_a = first[0].out_edges(first[1])[0].dst.data
        _drop(st, s)
        _rename_data(sdfg, local_b, local_a)
        out.append(Fused(s.array, first[1].grid_id, s.grid_id, "reuse"))
    return out
