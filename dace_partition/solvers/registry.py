"""Which solvers exist, in which order ``lower`` tries them, and how third parties add their own.

Built in, tried in this order for every move: ``grid_mapped`` (scatters and gathers of equal blocks,
thesis ch. 5), ``hierarchical`` (P^2 reduction programs, only with ``DACE_PARTITION_HIERARCHY``),
``allreduce`` (partial results into the same blocks), ``synthesized`` (grid-to-grid between block layouts
of one mesh, 000_*.txt), ``halo`` (grid-to-grid between neighbours only), ``blocks`` (any rectangular
per-rank block). ``halo_packed``, ``blocks_packed`` and ``allreduce_device`` (moves between GPU buffers,
``solvers/device.py``) are registered but not tried: the GPU lowering chooses them. Packages register
more under the entry-point group ``dace_partition.solvers`` (each entry point loads a
:class:`~dace_partition.solvers.base.Solver` subclass or instance); they are tried after the built-ins
unless ``lower(..., solvers=[...])`` says otherwise.
"""
from importlib import metadata
from typing import Dict, List, Optional, Sequence, Tuple, Union

import dace
import dace.library
from dace.transformation.transformation import ExpandTransformation

from .node import DistributedMemlet
from ..runtime.environment import DacePartitionMPI
from ..errors import UnsupportedPattern
from ..ir import Move
from .allreduce import AllreduceSolver
from .base import Solver
from .blocks import BlockSolver
from .grid_mapped import GridMappedSolver
from .device import DeviceAllreduceSolver, PackedBlockSolver, PackedHaloSolver
from .halo import HaloSolver
from .hierarchical import HierarchicalSolver
from .synthesized import SynthesizedSolver

ENTRY_POINT_GROUP = "dace_partition.solvers"
_SOLVERS: Dict[str, Solver] = {}
_ORDER: List[str] = []
_entry_points_loaded = False


def _seen_through(sdfg, memlet):
    """The buffer a solver's code sees: the array, or, where the memlet takes a box of it (a kernel's
    block inside a block-plus-halo buffer), an array of the box's shape with the array's strides."""
    desc = sdfg.arrays[memlet.data]
    sub = memlet.subset
    if sub is None or [str(x) for x in sub.size()] == [str(x) for x in desc.shape]:
        return desc
    return dace.data.Array(desc.dtype, sub.size(), strides=desc.strides, transient=True, storage=desc.storage)


def _expansion_for(solver: Solver):

    class Expansion(ExpandTransformation):
        environments = [DacePartitionMPI] + [e for e in getattr(solver, "environments", []) if e is not DacePartitionMPI]

        @staticmethod
        def expansion(node, parent_state, parent_sdfg):
            src = _seen_through(parent_sdfg, parent_state.in_edges(node)[0].data)
            dst = _seen_through(parent_sdfg, parent_state.out_edges(node)[0].data)
            code = solver.emit_decided(node.move(parent_sdfg), node.decision, src, dst)
            ptr = dace.pointer(dst.dtype)
            t = dace.nodes.Tasklet(node.name, {"_in": ptr}, {"_out": ptr}, code, language=dace.Language.CPP)
            t.side_effects = True  # communicates: no pass may drop or reorder it
            return t

    Expansion.__name__ = f"Expand_{solver.name}"
    return dace.library.expansion(Expansion)


def register(solver: Union[Solver, type], first: bool = False, default: bool = True) -> Solver:
    """Makes a solver available to ``lower`` (and as an implementation of DistributedMemlet). With
    ``default=False`` it only implements what other passes choose it for (not tried for every memlet)."""
    if isinstance(solver, type):
        solver = solver()
    if not isinstance(solver, Solver):
        raise TypeError(f"{solver!r} is not a dace_partition Solver")
    if solver.name not in _SOLVERS:
        DistributedMemlet.register_implementation(solver.name, _expansion_for(solver))
        if default:
            _ORDER.insert(0, solver.name) if first else _ORDER.append(solver.name)
    _SOLVERS[solver.name] = solver
    return solver


def _load_entry_points():
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10 API
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    for ep in eps:
        register(ep.load())


def get(name: str) -> Solver:
    _load_entry_points()
    if name not in _SOLVERS:
        raise ValueError(f"unknown solver '{name}'; available: {list(_ORDER)}")
    return _SOLVERS[name]


def resolve_solvers(solvers: Optional[Sequence[Union[str, Solver]]]) -> List[Solver]:
    """The ordered solver list for ``lower``: the default order, or the caller's (names or objects)."""
    _load_entry_points()
    if solvers is None:
        return [_SOLVERS[n] for n in _ORDER]
    out = []
    for s in solvers:
        out.append(register(s) if not isinstance(s, str) else get(s))
    if not out:
        raise ValueError("solvers must name at least one solver")
    return out


def choose(move: Move, solvers: Sequence[Solver]) -> Tuple[Optional[Solver], List[Tuple[str, str]]]:
    """The first solver that accepts ``move``, and the (name, reason) of each one that refused before it."""
    refused = []
    for s in solvers:
        reason = s.refuse(move)
        if reason is None:
            return s, refused
        refused.append((s.name, reason))
    return None, refused


def implement(move: Move, solvers: Sequence[Solver]) -> str:
    """The name of the first solver that accepts ``move``, or an UnsupportedPattern that names every refusal."""
    solver, refused = choose(move, solvers)
    if solver is None:
        raise UnsupportedPattern(move.array, move.dst.range, f"no solver implements {move}: " +
                                 "; ".join(f"{n}: {why}" for n, why in refused))
    return solver.name


# Specific before general: the first solver that accepts a move implements it.
register(GridMappedSolver())
register(HierarchicalSolver())  # P^2 programs when DACE_PARTITION_HIERARCHY is set, else refuses
register(AllreduceSolver())
register(SynthesizedSolver())
register(HaloSolver())  # neighbour-only redistributions (shifted reads, halos), before the general one
register(BlockSolver())
register(PackedHaloSolver(), default=False)  # the GPU lowering's choice between GPU buffers (solvers/device.py)
register(PackedBlockSolver(), default=False)
register(DeviceAllreduceSolver(), default=False)
