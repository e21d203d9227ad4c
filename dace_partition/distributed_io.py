"""Distributed inputs and outputs: ``lower(..., io="distributed")``.

By default a lowered program takes whole arrays on rank 0 and returns whole arrays there, which is the
right interface for a first run and the wrong one at scale: every byte passes through one rank. With
``io="distributed"``, every argument that a partitioned kernel reads or writes becomes that kernel's
rank-local buffer: each rank passes (and gets back) only its tile, and the scatters from and gathers
to rank 0 disappear. The tile of an argument is the block of the first kernel that reads it (of the
last kernel that writes it, for outputs); a later kernel that needs other blocks gets them by a
grid-to-grid redistribution, exactly like an intermediate.

:func:`layout` tells which global subset each rank holds; :meth:`Layout.scatter` and
:meth:`Layout.gather` cut whole arrays into tiles and join them back (for tests and small runs). The
layouts are recorded in the program's exit code, so a program loaded from its build folder knows them.
"""
import json
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import dace
import numpy as np
import sympy
from dace.memlet import Memlet
from dace.sdfg import SDFG

from .errors import UnsupportedPattern
from .fusion import _allreduce_bytes, _dms, _drop, _redistribution_bytes, _rename_data, _replicas, _same_blocks, _uses
from .schedule import grid_size

_MARK = "// dace_partition: layouts={}\n"
_MARK_RE = re.compile(r"// dace_partition: layouts=(.*)")


@dataclass(frozen=True)
class Layout:
    """Where the tiles of one argument live: rank ``r < prod(grid)`` holds ``array[subset]`` with the
    grid coordinates of ``r`` (row-major) substituted; the other ranks hold nothing. The local buffer has
    ``local_shape`` (the largest block); a smaller block fills its leading corner."""
    array: str
    shape: Tuple[str, ...]
    local_shape: Tuple[str, ...]
    dtype: str
    grid: Tuple[int, ...]
    coords: Tuple[str, ...]
    subset: Tuple[Tuple[str, str], ...]  # inclusive (begin, end) per dimension

    def __str__(self):
        dims = ", ".join(f"{b}:{sympy.sympify(e) + 1}" for b, e in self.subset)
        return f"Layout({self.array}[{dims}] on grid {self.grid}, local shape ({', '.join(self.local_shape)}))"

    def _eval(self, expr: str, values: Dict[str, int]) -> int:
        v = sympy.sympify(expr, locals={k: sympy.Symbol(k) for k in values}).subs(
            {sympy.Symbol(k): x for k, x in values.items()})
        if v.free_symbols:
            raise ValueError(f"layout of '{self.array}' needs values for {sorted(map(str, v.free_symbols))}")
        return int(sympy.floor(v)) if not v.is_integer else int(v)

    def local_shape_of(self, **symbols) -> Tuple[int, ...]:
        return tuple(self._eval(s, symbols) for s in self.local_shape)

    def block(self, rank: int, **symbols) -> Optional[Tuple[slice, ...]]:
        """The global index ranges rank ``rank`` holds, or None when it is outside the grid."""
        if rank >= grid_size(self.grid):
            return None
        pos = np.unravel_index(rank, self.grid) if self.grid else ()
        values = dict(symbols)
        values.update({c: int(p) for c, p in zip(self.coords, pos) if c})
        out = []
        for b, e in self.subset:
            lo, hi = self._eval(b, values), self._eval(e, values)
            out.append(slice(lo, max(lo, hi + 1)))
        return tuple(out)

    def scatter(self, array, rank: int, **symbols) -> np.ndarray:
        """Rank ``rank``'s tile of the whole ``array`` (zero-padded to the local shape)."""
        array = np.asarray(array)
        tile = np.zeros(self.local_shape_of(**symbols), dtype=np.dtype(self.dtype))
        blk = self.block(rank, **symbols)
        if blk is not None:
            part = array[blk]
            tile[tuple(slice(0, n) for n in part.shape)] = part
        return tile

    def gather(self, tiles: Sequence[np.ndarray], **symbols) -> np.ndarray:
        """The whole array from every rank's tile (``tiles[r]`` of rank r; replicas must agree)."""
        shape = tuple(self._eval(s, symbols) for s in self.shape)
        out = np.zeros(shape, dtype=np.dtype(self.dtype))
        for r, tile in enumerate(tiles):
            blk = self.block(r, **symbols)
            if blk is None or tile is None:
                continue
            sizes = tuple(s.stop - s.start for s in blk)
            out[blk] = np.asarray(tile)[tuple(slice(0, n) for n in sizes)]
        return out


def _layout_of(sdfg: SDFG, dm, local: str) -> Layout:
    gdesc, ldesc = sdfg.arrays[dm.array], sdfg.arrays[local]
    return Layout(dm.array, tuple(str(s) for s in gdesc.shape), tuple(str(s) for s in ldesc.shape),
                  np.dtype(gdesc.dtype.as_numpy_dtype()).str, tuple(dm.grid), tuple(c or "" for c in dm.coords),
                  tuple((str(b), str(e)) for b, e, _ in dm.subset))


def _local(state, dm) -> str:
    edge = state.out_edges(dm)[0] if dm.direction == "scatter" else state.in_edges(dm)[0]
    return (edge.dst if dm.direction == "scatter" else edge.src).data


@dataclass
class Localized:
    """What became of one argument's scatters and gathers (for the report)."""
    array: str
    grid_id: int  # the kernel whose blocks are the argument's tiles
    allreduce: Optional[Tuple[str, Optional[int]]] = None  # (call, bytes) when partial results are combined
    redistributed: List[Tuple[int, Optional[int]]] = None  # (kernel, bytes): other blocks, grid to grid

    def __post_init__(self):
        self.redistributed = self.redistributed or []


def localize_arguments(sdfg: SDFG) -> Tuple[Dict[str, Layout], Dict[str, Localized]]:
    """Turns every argument moved by DistributedMemlets into a rank-local one (module docstring)."""
    layouts: Dict[str, Layout] = {}
    changes: Dict[str, Localized] = {}
    dms = _dms(sdfg)
    for name in sorted({dm.array for _, dm in dms if dm.direction != "redistribute"}):
        desc = sdfg.arrays.get(name)
        if desc is None or desc.transient:
            continue
        scatters = [(st, dm) for st, dm in dms if dm.array == name and dm.direction == "scatter"]
        gathers = [(st, dm) for st, dm in dms if dm.array == name and dm.direction == "gather"]
        if len(gathers) > 1:
            raise UnsupportedPattern(name, gathers[1][1].subset, "io='distributed': the argument is written by "
                                     "several partitioned kernels; give it one writer or use io='root'")
        moved = {id(dm) for _, dm in scatters + gathers}
        for st, n in _uses(sdfg, name):
            touches = [e.dst for e in st.out_edges(n)] + [e.src for e in st.in_edges(n)]
            if not all(id(t) in moved for t in touches):
                raise UnsupportedPattern(name, "", "io='distributed': the argument is also used by code that runs "
                                         "on rank 0 (an unscheduled map, or a kernel on a one-rank grid); "
                                         "schedule that code too, or use io='root'")
        home_state, home = gathers[0] if gathers else scatters[0]
        if any(dm.identity_fill for _, dm in scatters + gathers) and _replicas(home) > 1:
            raise UnsupportedPattern(name, home.subset, "io='distributed': the argument is accumulated into by "
                                     "several ranks per element, so its prior value would count more than once")
        if gathers and scatters and not _same_blocks(scatters[0][1], home):
            raise UnsupportedPattern(name, home.subset, "io='distributed': the argument is read in blocks "
                                     f"[{scatters[0][1].subset}] but written in other blocks; use io='root'")
        local = _local(home_state, home)
        layouts[name] = _layout_of(sdfg, home, local)
        ldesc = sdfg.arrays[local]
        partial = home.direction == "gather" and home.op is not None and _replicas(home) > 1
        new = dace.data.Array(desc.dtype, ldesc.shape, storage=desc.storage, transient=False)
        sdfg.remove_data(name, validate=False)
        sdfg.add_datadesc(name, new)
        changes[name] = info = Localized(name, home.grid_id)
        if partial:  # every replica gets the combined value
            used = {str(f) for b, e, _ in home.subset for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols}
            dims = [d for d, (n, c) in enumerate(zip(home.grid, home.coords)) if n > 1 and c not in used]
            home.direction, home.reduce_dims, home.implementation = "redistribute", dims, "grid_mapped"
            home.src_subset, home.src_grid, home.src_grid_id = home.subset, list(home.grid), home.grid_id
            home.src_coords = list(home.coords)
            info.allreduce = (f"MPI_Allreduce(MPI_{home.op.upper()}, grid dims {tuple(dims)})",
                              _allreduce_bytes(home, desc.dtype.bytes))
            home_state.out_edges(home)[0].data = Memlet.from_array(name, new)
        else:
            _drop(home_state, home)
            _rename_data(sdfg, local, name)
        for st, dm in scatters:
            if dm is home:
                continue
            target = _local(st, dm)
            if _same_blocks(home, dm) and tuple(sdfg.arrays[target].shape) == tuple(new.shape) and not partial:
                _drop(st, dm)
                if target != name:
                    _rename_data(sdfg, target, name)
                continue
            # Another kernel needs other blocks: redistribute from the argument's tiles.
            nbytes = _redistribution_bytes(home, dm, desc.dtype.bytes, False)
            st.remove_node(st.in_edges(dm)[0].src)
            dm.direction = "redistribute"
            dm.src_subset, dm.src_grid, dm.src_grid_id = home.subset, list(home.grid), home.grid_id
            dm.src_coords = list(home.coords)
            dm.op = None
            dm.implementation = "blocks"
            st.add_edge(st.add_read(name), None, dm, "_in", Memlet.from_array(name, new))
            info.redistributed.append((dm.grid_id, nbytes))
    sdfg.append_exit_code(_MARK.format(json.dumps({k: _to_json(v) for k, v in layouts.items()})))
    return layouts, changes


def _to_json(lay: Layout):
    return {"array": lay.array, "shape": lay.shape, "local_shape": lay.local_shape, "dtype": lay.dtype,
            "grid": lay.grid, "coords": lay.coords, "subset": lay.subset}


def _from_json(d) -> Layout:
    return Layout(d["array"], tuple(d["shape"]), tuple(d["local_shape"]), d["dtype"], tuple(d["grid"]),
                  tuple(d["coords"]), tuple(tuple(x) for x in d["subset"]))


def layouts(sdfg: SDFG) -> Dict[str, Layout]:
    """The layouts of a program lowered with ``io="distributed"`` (empty for root-in/root-out)."""
    block = sdfg.exit_code.get("frame")
    m = _MARK_RE.search(block.as_string if block is not None else "")
    return {k: _from_json(v) for k, v in json.loads(m.group(1)).items()} if m else {}


def layout(sdfg, array: str) -> Layout:
    """Which global subset of ``array`` each rank holds (``sdfg`` may also be a loaded Program)."""
    sdfg = getattr(sdfg, "sdfg", sdfg)
    lays = layouts(sdfg)
    if array not in lays:
        known = sorted(lays) or "none: the program was not lowered with io='distributed'"
        raise KeyError(f"'{array}' has no distributed layout; arrays with one: {known}")
    return lays[array]


def scatter(sdfg, array: str, value, rank: int, **symbols) -> np.ndarray:
    """Rank ``rank``'s tile of the whole array ``value`` (see :class:`Layout`)."""
    return layout(sdfg, array).scatter(value, rank, **symbols)


def gather(sdfg, array: str, tiles: Sequence[np.ndarray], **symbols) -> np.ndarray:
    """The whole array from the tiles of every rank (``tiles[r]`` from rank r)."""
    return layout(sdfg, array).gather(tiles, **symbols)
