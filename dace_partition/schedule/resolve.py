"""A user's schedule checked against the program: {map name: process grid}, or a ScheduleError that
names the map and the reason before anything changes."""
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import dace
from dace import nodes

from ..errors import ScheduleError
from .discover import Kernel, MapInfo
from .loops import assigned_from, assignment_reads


def resolve(kernels: List[Kernel], schedule) -> Dict[str, Tuple[int, ...]]:
    """Checks a user schedule against the program and returns {map name: grid}.

    Keys may be map names, :class:`MapInfo` objects, or the ``Map`` / ``MapEntry`` objects of the SDFG.
    """
    infos = [m for k in kernels for m in k.maps]
    free = FreeSymbols()
    by_name = {m.name: m for m in infos}
    by_map = {id(m.map): m for m in infos}
    labels = [m.map.label for m in infos]
    by_label = {m.map.label: m for m in infos if labels.count(m.map.label) == 1}
    out: Dict[str, Tuple[int, ...]] = {}
    for key, grid in dict(schedule or {}).items():
        if isinstance(key, MapInfo):
            key = key.name
        if isinstance(key, nodes.MapEntry):
            key = key.map
        if isinstance(key, nodes.Map):
            info = by_map.get(id(key)) or by_label.get(key.label)  # a map of a copy of this SDFG (dp.maps)
            if info is None:
                raise ScheduleError(f"map '{key.label}' in the schedule is not a schedulable map of this SDFG; "
                                    f"known maps: {sorted(by_name)}")
        elif isinstance(key, str):
            info = by_name.get(key)
            if info is None:
                raise ScheduleError(f"unknown map '{key}' in the schedule; known maps: {sorted(by_name)}")
        else:
            raise ScheduleError(f"schedule key {key!r} is neither a map name nor a map")
        out[info.name] = check_grid(info, grid, free)
    return out


class FusedMapName(str):
    """A map name of the program after ``lower``'s map fusion. A fused map keeps the name of the first map
    it fuses, so the text alone does not say whether a schedule names the maps as written or the fused
    ones; ``auto_schedule``'s keys are of this type when it priced the fused maps, so ``dict(schedule)``
    and ``{**schedule}`` keep that (as plain strings, ``lower`` would read them as the maps as written and
    leave the rest of each fused chain on rank 0). Printed as ``fused_map('name')``: a printed schedule
    pasted back into a program keeps it as well."""
    __slots__ = ()

    def __repr__(self):
        return f"fused_map({str.__repr__(self)})"


def fused_map(name: str) -> FusedMapName:
    """Schedule key: ``name`` is a map of the program after ``lower``'s map fusion (see :class:`FusedMapName`)."""
    return FusedMapName(name)


def names_fused_maps(schedule) -> bool:
    """Whether ``schedule`` names the maps after ``lower``'s map fusion: a fused ``Schedule`` (also an
    empty one), or a mapping whose keys are :class:`FusedMapName` (``dict()`` of one)."""
    return bool(getattr(schedule, "fused", False)) or any(isinstance(k, FusedMapName) for k in dict(schedule or {}))


@dataclass(frozen=True)
class Replicated:
    """A map grid whose every tile is computed by ``copies`` groups of ranks (see :func:`replicate`)."""
    grid: Tuple[int, ...]
    copies: int

    def __str__(self):
        return f"replicate({self.grid}, {self.copies})"


def replicate(grid, copies: int) -> Replicated:
    """Schedule value: tile a map by ``grid`` and run every tile on ``copies`` groups of ranks.

    This is JAX's "mesh axis that shards nothing": the copies read the same data and write the same
    values, so a consumer of partial sums scheduled this way gets them by ``MPI_Allreduce``, and each
    copy keeps what it computed for the next kernel on the same grid. The replica dimension is the
    fastest-varying (last) dimension of the process grid.
    """
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid, )
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ScheduleError(f"replicate(): copies must be a positive integer, got {copies!r}")
    return Replicated(tuple(grid), copies)


def _read_from_data(info, ext) -> List[str]:
    """The arrays a map's extent is read from while the program runs: passed into the map's entry as a
    symbol of its own (``dace.map`` with ``i: _[0:num[0]]``), or assigned on a state transition before it
    (``for i in dace.map[0:num[0]]`` assigns ``__tmp0 = num[0]``), in the map's SDFG or one it is nested in."""
    names = {str(x) for x in getattr(ext, "free_symbols", ())}
    st = info.kernel.state
    found = set()
    for n in st.nodes():
        if isinstance(n, nodes.MapEntry) and n.map is info.map:
            found |= {e.data.data for e in st.in_edges(n) if e.data.data and e.dst_conn in names}
    sdfg = st.sdfg
    while sdfg is not None and names:
        reached = assigned_from((e.data.assignments for e in sdfg.all_interstate_edges()), names)
        found |= {n for n in reached if n in sdfg.arrays}
        node = sdfg.parent_nsdfg_node  # on to the SDFG this one is nested in, through its symbol mapping
        mapping = node.symbol_mapping if node is not None else {}
        names = {t for n in reached if n in mapping for t in assignment_reads(mapping[n])}
        sdfg = sdfg.parent_sdfg if node is not None else None
    return sorted(found)


def check_grid(info: MapInfo, grid, free: "FreeSymbols" = None) -> Tuple[int, ...]:
    """The process grid of a scheduled map: one entry per parameter (a replicated grid has one more).
    ``free``: the program's free symbols, computed once for many checks."""
    free = free if free is not None else FreeSymbols()
    if isinstance(grid, Replicated):
        tiles = check_grid(info, grid.grid, free)
        return tiles + (grid.copies, ) if grid.copies > 1 else tiles
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid, )
    try:
        grid = tuple(grid)
    except TypeError:
        raise ScheduleError(f"grid for map '{info.name}' must be a tuple of integers, got {grid!r}")
    if len(grid) != len(info.params):
        raise ScheduleError(f"grid {grid} for map '{info.name}' has {len(grid)} dimension(s), but the map has "
                            f"{len(info.params)} parameter(s) {list(info.params)}")
    for g in grid:
        if isinstance(g, bool) or not isinstance(g, (int, )) and not (hasattr(g, "__index__")):
            raise ScheduleError(f"grid {grid} for map '{info.name}' has a non-integer entry {g!r}")
        if int(g) < 1:
            raise ScheduleError(f"grid {grid} for map '{info.name}' has a non-positive entry {g}")
    grid = tuple(int(g) for g in grid)
    for p, g, ext in zip(info.params, grid, info.shape):
        if not isinstance(ext, int):
            if g > 1 and not free.fixed(ext, info.kernel.state.sdfg):
                arrays = _read_from_data(info, ext)
                if arrays:
                    raise ScheduleError(f"map '{info.name}' has extent {ext} along '{p}', read from {arrays} "
                                        "while the program runs; only extents given by the program's arguments can be "
                                        "split (lower(sdfg, ranks=P) keeps it whole)")
                raise ScheduleError(f"map '{info.name}' has extent {ext} along '{p}', which changes while the "
                                    "program runs (e.g. a loop variable or an outer map index); only extents "
                                    "given by the program's arguments can be split (DaCe's LoopToMap could not "
                                    "make the enclosing loop a map: its iterations are not provably independent)")
            continue
        if g > ext:
            raise ScheduleError(f"grid {grid} for map '{info.name}' splits '{p}' into {g} parts, but its extent "
                                f"is only {ext}")
    for (b, e, s), p, g in zip(info.map.range, info.params, grid):
        if s != 1 and g != 1:
            raise ScheduleError(f"map '{info.name}' has step {s} along '{p}'; splitting strided maps is not "
                                "supported yet")
    return grid


class FreeSymbols:
    """Whether a symbolic extent depends only on the program's arguments (free symbols of the SDFG and its
    constants). ``sdfg.free_symbols`` walks the whole program, so it is read once per SDFG and check."""

    def __init__(self):
        self._sdfg, self._names = None, set()

    def fixed(self, expr, sdfg) -> bool:
        return not self.loose((expr, ), sdfg)

    def loose(self, exprs, sdfg) -> list:
        """The symbols of ``exprs`` that are neither arguments nor constants (loop variables), sorted."""
        if self._sdfg is not sdfg:
            self._sdfg, self._names = sdfg, {str(s) for s in sdfg.free_symbols} | set(sdfg.constants)
        found = {str(s) for x in exprs for s in dace.symbolic.pystr_to_symbolic(str(x)).free_symbols}
        return sorted(found - self._names)


def grid_size(grid: Sequence[int]) -> int:
    n = 1
    for g in grid:
        n *= g
    return n
