"""Rank-local code optimization: what each rank computes, made as fast as NumPy's kernels.

DaCe's frontend turns every NumPy operation into a map of its own that writes a whole-array temporary
(``0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + ...)`` is five maps and four temporaries). Each of them would be
a kernel of its own for the partitioner, with a buffer per shifted read, and each streams its arrays
through memory once. This module fuses them *before* partitioning:

* :class:`SameGridMapFusion` runs DaCe's ``MapFusion`` on the top-level maps of the program, but only on
  pairs of maps that the schedule puts on the same process grid (or leaves both on rank 0), with the same
  ranges in the same order, so the fused map has exactly the tiles each of its parts had. The
  temporaries between them disappear (DaCe removes an intermediate that nothing else reads).
* :class:`LocalOptimize` is the pass ``lower`` runs: it checks the user's schedule against the unfused
  program (a schedule written against ``dp.maps`` of the program as written keeps working), fuses, and
  translates the schedule to the fused maps' names. Contractions become BLAS calls after partitioning
  (:mod:`.contractions`), on the rank-local tiles.

Why before partitioning: the partitioner then plans one kernel per fused map, so the shifted reads of a
stencil share one block-plus-halo buffer and ``io="distributed"`` sees one reader per array, as in a
program the user fused by hand. Fusing after partitioning would keep the communication planned for the
unfused maps (a buffer and a scatter per shifted read).
"""
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Tuple

from dace import nodes
from dace.sdfg import SDFG
from dace.transformation.dataflow import MapFusion
from dace.transformation.passes.pattern_matching import match_patterns

from ..compat import memlets_name_written_array
from ..errors import ScheduleError
from ..schedule import Kernel, KernelKind, discover, normalise, ordered_states, resolve


class LocalStep(Enum):
    """The optimizations of the rank-local program ``lower`` runs (``lower(local_optimize=...)``)."""
    MAP_FUSION = "map fusion"  # before partitioning: maps on the same grid become one
    CONTRACTIONS = "contractions to BLAS"  # after partitioning: sum-of-product maps become GEMMs


ALL_STEPS = frozenset(LocalStep)


def steps_of(option) -> frozenset:
    """``lower``'s ``local_optimize`` option as a set of steps: True (all), False/None (none), or steps."""
    if option is True:
        return ALL_STEPS
    if option is False or option is None:
        return frozenset()
    if isinstance(option, LocalStep):
        return frozenset([option])
    steps = frozenset(option)
    bad = [s for s in steps if not isinstance(s, LocalStep)]
    if bad:
        raise ValueError(f"local_optimize takes True, False or LocalStep values, got {bad!r}")
    return steps


@dataclass(frozen=True)
class FusedMaps:
    """One map of the fused program and the maps of the program as written it replaces."""
    name: str
    members: Tuple[str, ...]
    grid: Optional[tuple]


class SameGridMapFusion:
    """DaCe's ``MapFusion`` restricted to maps that run on the same grid with the same tiles.

    ``grid_of`` gives each ``Map`` object its grid (``None``: runs on rank 0); two maps fuse only when
    their grids are equal and their ranges are equal position by position, because a grid is one entry
    per map parameter in order. Only maps at the top level of the program's states fuse (maps inside
    nested SDFGs and library nodes belong to their kernel's plan). Returns the pairs (kept, removed)."""

    def __init__(self, grid_of):
        self.grid_of = grid_of
        self.renamed = 0  # memlets renamed after the fusions (the graph changed even without a fusion)

    def allowed(self, xf: MapFusion, state) -> bool:
        first = state.entry_node(xf.first_map_exit).map
        second = xf.second_map_entry.map
        if self.grid_of(first) != self.grid_of(second):
            return False
        scope = state.scope_dict()
        if scope[state.entry_node(xf.first_map_exit)] is not None or scope[xf.second_map_entry] is not None:
            return False
        return len(first.range) == len(second.range) and all(
            str(a) == str(b) for a, b in zip(first.range.ranges, second.range.ranges))

    def apply(self, sdfg: SDFG) -> List[Tuple[nodes.Map, nodes.Map]]:
        done = []
        for state in ordered_states(sdfg):
            while True:  # each round fuses every pair whose maps no earlier pair of the round touched
                touched, fused = set(), 0
                matches = [(xf.first_map_exit, xf.array, xf.second_map_entry)
                           for xf in match_patterns(sdfg, MapFusion, states=[state]) if self.allowed(xf, state)]
                for first_exit, array, second_entry in matches:  # by node: node ids change as maps fuse
                    if {first_exit, array, second_entry} & touched:
                        continue
                    first_entry, second_exit = state.entry_node(first_exit), state.exit_node(second_entry)
                    mine = {first_entry, first_exit, second_entry, second_exit, array}
                    if mine & touched:
                        continue
                    touched |= mine | {e.dst for e in state.out_edges(first_exit)}
                    first, second = first_entry.map, second_entry.map
                    # matched at the start of the round, but a fusion earlier in the round can make even a
                    # pair apart from it invalid (the training step's LayerNorm backward: ``ln_xhat`` read by a
                    # map fused just before; DaCe 2's MapFusion.apply then fails an assertion): checked again
                    if not MapFusion.can_be_applied_to(sdfg, first_map_exit=first_exit, array=array,
                                                       second_map_entry=second_entry):
                        continue
                    MapFusion.apply_to(sdfg, verify=False, save=False, annotate=False, first_map_exit=first_exit,
                                       array=array, second_map_entry=second_entry)
                    kept = {n.map for n in state.nodes() if isinstance(n, nodes.MapEntry)}
                    done.append((first, second) if first in kept else (second, first))
                    fused += 1
                if not fused:
                    break
        self.renamed = memlets_name_written_array(sdfg)  # DaCe 2's MapFusion names writes by its transient (compat)
        return done


@dataclass
class LocalOptimize:
    """Fuses the maps of a program before partitioning (see the module docstring) and translates the
    schedule written for the program as written.

    ``apply(sdfg, schedule)``: ``schedule`` is the user's ({map name or map: grid}, checked here against
    the unfused maps, so a bad key is refused in words naming the map) or ``None`` (the automatic
    schedule is chosen afterwards, on the fused program: every pair of maps may fuse). Returns the schedule
    for the fused program; ``self.fused`` lists each fused map with the maps it replaces and
    ``self.renames`` maps every old name to its new one."""
    steps: frozenset = ALL_STEPS
    fused: List[FusedMaps] = field(default_factory=list)
    renames: Dict[str, str] = field(default_factory=dict)
    contracted: list = field(default_factory=list)
    kernels: Optional[List[Kernel]] = None  # the program's kernels after ``apply`` (discovered once per change)

    def apply(self, sdfg: SDFG, schedule=None):
        kernels = self.kernels = discover(normalise(sdfg))
        before = [m for k in kernels for m in k.maps if k.kind == KernelKind.MAP]
        grids = resolve(kernels, schedule) if schedule is not None else {}
        if LocalStep.MAP_FUSION not in self.steps:
            return grids if schedule is not None else None
        grid_by_map = {id(m.map): grids.get(m.name) for m in before}
        inner_before = _inner_map_names(kernels)
        fusion = SameGridMapFusion(lambda m: grid_by_map.get(id(m), ("kernel", id(m))))
        pairs = fusion.apply(sdfg)
        group = {id(m.map): [m.name] for m in before}
        for kept, removed in pairs:
            group.setdefault(id(kept), []).extend(group.pop(id(removed), []))
        if pairs:
            _drop_unused_transients(sdfg)
        if pairs or fusion.renamed:  # else the kernels found above are still the program's
            kernels = self.kernels = discover(sdfg)
        after = [m for k in kernels for m in k.maps]
        inner_after = _inner_map_names(kernels)
        # Maps inside library nodes and nested SDFGs are named in program order with a counter
        # (``Reduce.reduce_output_3``), and fusion can change the order of the kernels (DaCe 2's MapFusion
        # does): a grid follows its kernel and the map's place in it, not the name.
        inner_renames = {old: inner_after[key] for key, old in inner_before.items()
                         if key in inner_after and inner_after[key] != old}
        out = {}
        for m in after:
            members = group.get(id(m.map))
            if members is None:
                continue
            for old in members:
                self.renames[old] = m.name
            if len(members) > 1:
                self.fused.append(FusedMaps(m.name, tuple(members), grid_by_map.get(id(m.map))))
            old_grid = [grids[o] for o in members if o in grids]
            if old_grid:
                out[m.name] = old_grid[0]
        for name, grid in grids.items():  # maps of nested kernels: by kernel, as said above
            if name not in self.renames:
                out[inner_renames.get(name, name)] = grid
        self.renames.update(inner_renames)
        return out if schedule is not None else None

    def rename_fixed(self, fixed: Optional[dict]) -> Optional[dict]:
        """``auto_schedule``'s ``fixed`` with map names of the program as written replaced by the fused
        maps' names (array names pass through); refuses two grids pinned for one fused map."""
        if not fixed:
            return fixed
        out = {}
        for key, value in fixed.items():
            new = self.renames.get(key, key) if isinstance(key, str) else key
            if new in out and out[new] != value:
                raise ScheduleError(f"fixed: '{key}' and another map pinned to {out[new]} were fused into '{new}' "
                                    f"(one map, one grid); pin one grid for both, or lower with "
                                    f"local_optimize=False")
            out[new] = value
        return out

    def note(self, rep) -> None:
        """Adds to the report of ``lower`` which maps were fused (on the kernel of the fused map)."""
        by_name = {k.name: k for k in rep.kernels}
        for f in self.fused:
            line = f"fused {len(f.members)} maps of the program as written: {', '.join(f.members)}"
            if f.name in by_name:
                by_name[f.name].notes.append(line)


def _inner_map_names(kernels) -> Dict[tuple, str]:
    """{(library node or nested SDFG node, place of the map in it): map name} of the kernels that are not
    top-level maps (fusion leaves those nodes in place, so the key survives it; the names may not)."""
    return {(id(k.node), i): m.name for k in kernels if k.kind != KernelKind.MAP for i, m in enumerate(k.maps)}


def _drop_unused_transients(sdfg: SDFG):
    """Removes the descriptors of the temporaries fusion freed (DaCe removes their access nodes only), so
    the lowered program declares no whole-array temporary that nothing uses."""
    used = {n.data for n, _ in sdfg.all_nodes_recursive() if isinstance(n, nodes.AccessNode)}
    used |= {e.data.data for e, _ in sdfg.all_edges_recursive() if hasattr(e.data, "data") and e.data.data}
    for edge in sdfg.all_interstate_edges():
        used |= {str(s) for s in edge.data.free_symbols}
    for name, desc in list(sdfg.arrays.items()):
        if desc.transient and name not in used:
            sdfg.remove_data(name, validate=False)


def optimize_local(sdfg: SDFG, steps=True) -> "LocalOptimize":
    """The same optimizations for a program that is not lowered (DaCe in one process): every pair of maps
    that can fuse does, then the contraction maps become GEMMs. Changes ``sdfg`` in place."""
    local = LocalOptimize(steps_of(steps))
    local.apply(sdfg)
    if LocalStep.CONTRACTIONS in local.steps:
        from .contractions import ContractionsToBlas
        local.contracted.extend(ContractionsToBlas().apply_pass(sdfg, {}))
    return local


def fused_for_search(sdfg: SDFG, fixed: Optional[dict] = None):
    """What ``auto_schedule`` prices: a copy of ``sdfg`` with its maps fused as ``lower`` fuses them for an
    automatic schedule, and ``fixed`` with map names of the program as written renamed to the fused maps.
    The schedule found names the fused maps; ``lower`` given that schedule fuses the same way."""
    import copy
    work = copy.deepcopy(sdfg)
    local = LocalOptimize(frozenset([LocalStep.MAP_FUSION]))
    local.apply(work)
    return work, local.rename_fixed(fixed)
