"""The user's entry points: ``lower(sdfg, schedule)``, its ``report``, and the layouts of a program
lowered with ``io="distributed"``.

``lower`` reads as check -> schedule -> plan -> pipeline -> validate: it checks the schedule
(:mod:`.schedule`, or chooses one: :mod:`.search`), plans the lowering once (:mod:`.plan`), applies the plan
with one DaCe Pipeline (:mod:`.passes.pipeline`) on a copy, validates the copy and adopts it only when all
of that succeeded, so every error is raised before the caller's SDFG changes.

:func:`layout` tells which global subset each rank holds; :meth:`Layout.scatter` and
:meth:`Layout.gather` cut whole arrays into tiles and join them back (for tests and small runs). The
layouts are part of the program's :class:`~dace_partition.ir.ProgramRecord`, saved beside its build, so a
program loaded from its build folder knows them.
"""
import copy
import itertools
import time
import warnings
from typing import Dict, Optional, Sequence

import numpy as np
from dace import nodes
from dace.frontend.python.parser import DaceProgram
from dace.sdfg import SDFG

from .analysis.boolean_sums import boolean_sums
from .analysis.lapack_calls import lapack_calls
from .analysis.linspace_axes import scalar_linspaces
from .analysis.python_calls import python_calls
from .analysis.scalar_aliases import scalar_aliases
from .analysis.unit_slices import unit_slices
from .analysis.unwritten_accumulators import unwritten_accumulators
from .compat import (DACE_MAJOR, DACE_VERSION, indices_below_zero, loops_sharing_a_variable, misplaced_nested_arguments,
                     stepped_elements, unordered_aliased_accesses, with_line_info_from_frames)
from .errors import ScheduleError, UnsupportedPattern
from .ir import Device, IoMode, Layout, is_lowered, layouts_of, notes, ranks_needed
from .passes.local_optimize import LocalOptimize, LocalStep, steps_of
from .passes.partition import partition
from .passes.prepare import split_kernels
from .passes.pipeline import LoweringOptions
from .report import LoweringReport
from .schedule import names_fused_maps, resolve
from .solvers.registry import resolve_solvers

__all__ = ["lower", "report", "ranks_needed", "is_lowered", "Layout", "layouts", "layout", "scatter", "gather"]

def report(sdfg: SDFG) -> LoweringReport:
    """The report of the last ``lower`` call on this SDFG."""
    rep = notes(sdfg).report
    if rep is None:
        raise ValueError(f"SDFG '{sdfg.name}' has not been lowered in this process")
    return rep


@with_line_info_from_frames
def lower(sdfg: SDFG, schedule=None, *, ranks: Optional[int] = None, solvers=None, fuse: bool = True,
          device: str = "cpu", io: str = "root", threads: Optional[int] = 1, verbose: bool = False,
          memory_per_rank: Optional[int] = None, fixed: Optional[dict] = None, sizes: Optional[dict] = None,
          local_optimize=True) -> SDFG:
    """Transforms ``sdfg`` in place into an SPMD program and returns it.

    ``sdfg`` may also be the ``@dace.program`` itself: it is parsed here and the lowered SDFG returned,
    with the module-level arrays the program reads (DaCe passes them as arguments named ``__g_...``) bound
    to it with their values at this call (:func:`~dace_partition.bind`), so callers pass only the program's
    own arguments, as when calling the program.

    ``ranks=P`` (and no ``schedule``): the process grids are chosen by :func:`auto_schedule` for P ranks
    (``memory_per_rank``, ``fixed`` and ``sizes`` go to it); the report says what was chosen and why.

    ``schedule`` maps maps (names from :func:`maps`, ``MapInfo``, ``Map`` or ``MapEntry`` objects) to
    process-grid shapes, one integer per map parameter. ``device="gpu"`` runs the rank-local kernels on
    CUDA GPUs, on arrays kept in GPU memory (:mod:`dace_partition.passes.gpu`); with ``ranks=P`` the grids
    are then priced on :func:`~dace_partition.gpu_machine` (GPU rates, PCIe staging, ranks sharing the
    GPUs visible here). ``solvers`` is an ordered list of solver names or objects to try for each memlet
    (default: grid_mapped, blocks, then registered plug-ins). ``fuse`` removes round trips of
    intermediates through rank 0 where both kernels hold the same blocks (thesis 4.5). Every error is
    raised before the SDFG changes.

    ``io="root"`` (default): the program takes and returns whole arrays on rank 0. ``io="distributed"``:
    every rank passes and gets back only its tiles of the arguments the partitioned kernels touch
    (see :func:`dace_partition.layout`), and nothing passes through rank 0.

    ``threads=1`` (default, one rank per core): every rank runs its kernels in one thread, so maps are
    sequential loops and write conflicts (reductions) are plain updates instead of atomics.
    ``threads=None`` keeps DaCe's OpenMP maps for hybrid MPI + OpenMP runs (``OMP_NUM_THREADS`` threads
    per rank). Matrix products run on BLAS either way (see :mod:`dace_partition.runtime.toolchain`).

    ``local_optimize`` (default True; False, or a set of :class:`~dace_partition.passes.LocalStep`): maps on
    the same grid are fused before partitioning (a schedule names the maps of the program as written) and
    contractions become BLAS calls on the rank-local tiles (:mod:`dace_partition.passes.local_optimize`).
    """
    closure = {}
    if isinstance(sdfg, DaceProgram):
        program = sdfg
        sdfg = program.to_sdfg()
        closure = {k: v for k, v in program.__sdfg_closure__().items()
                   if k in sdfg.arrays and not sdfg.arrays[k].transient}
    if is_lowered(sdfg):
        raise ScheduleError(f"SDFG '{sdfg.name}' has already been lowered")
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    if io not in ("root", "distributed"):
        raise ValueError(f"io must be 'root' or 'distributed', got {io!r}")
    if device == "gpu" and DACE_MAJOR >= 2:
        raise ScheduleError(f"device='gpu' needs DaCe 1.0.x; this is DaCe {DACE_VERSION}, whose nesting of a kernel "
                            "into its GPU wrapper differs (docs/dace2.md)")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    for array, subset, state in stepped_elements(sdfg):
        raise UnsupportedPattern(array, subset, f"in state '{state}': a strided slice such as x[::2] whose stride "
                                 f"DaCe {DACE_VERSION}'s frontend drops (the program computes a wrong result even in "
                                 "one process); write the strided access as a map over the index, "
                                 "'for i in dace.map[0:N]: y[i] = x[2 * i]'")
    for array, subset, var, ranges in loops_sharing_a_variable(sdfg):
        shown = " and ".join(f"{b}..{e} step {st}" for b, e, st in ranges)
        raise UnsupportedPattern(array, subset, f"two for-loops of one map body (or nested program) share the loop "
                                 f"variable '{var}' with different ranges ({shown}); DaCe {DACE_VERSION}'s frontend "
                                 "then passes the loops shifted elements (the program computes a wrong result even "
                                 "in one process); give each loop its own variable name")
    for array, subset, body, shape in misplaced_nested_arguments(sdfg):
        raise UnsupportedPattern(array, subset, f"DaCe {DACE_VERSION}'s frontend passes these elements into the body "
                                 f"'{body}', which holds them as an array of shape {shape} counted from its loop's "
                                 "first index (the frontend could not derive the loop's elements, as with symbolic "
                                 "loop bounds such as range(1, M)); the body then reads and writes shifted elements, "
                                 "even in one process. Give the arrays' sizes as numbers (dace.float64[1000, 64]), "
                                 "or loop over the rows with 'for i in range(...)' instead of dace.map (which keeps "
                                 "them on one rank)")
    for array, subset, body, index, var, value in indices_below_zero(sdfg):
        raise UnsupportedPattern(array, subset, f"in '{body}', the index {index} goes down as its loop over '{var}' "
                                 f"goes on ({value} on the loop's second iteration): DaCe {DACE_VERSION}'s frontend "
                                 "counts a map body's indices from the element its loop touches first, so the body "
                                 "reads or writes below the array (a wrong result even in one process). Index "
                                 "upwards in the loop: reverse the array in a map of its own first "
                                 "('for k in dace.map[0:K]: wr[k] = w[K - 1 - k]'), or make the loop a dace.map")
    for array, subset, st, read, written in unordered_aliased_accesses(sdfg):
        raise UnsupportedPattern(array, subset, f"in state '{st}', one statement reads [{read}] and another writes "
                                 f"[{written}] of it with nothing ordering them: DaCe's simplification merged "
                                 "the statements without seeing that they touch one array, so a swap through "
                                 "a temporary loses an element even in one process. " + (
                                     "Copy the row into an array of the body's own, work on that, and write it "
                                     "back ('row = np.empty(M); row[:] = x[i, :]; ...; x[i, :] = row')"
                                     if DACE_MAJOR < 2 else "No spelling is known to be right under DaCe 2; DaCe "
                                     "1.0.2 gets it right with the row in an array of the body's own"))
    # each analysis finds what it refuses as (array, subset, reason()); the first one found is raised
    for found in itertools.chain(boolean_sums(sdfg), scalar_linspaces(sdfg), python_calls(sdfg),
                                 unwritten_accumulators(sdfg), scalar_aliases(sdfg), unit_slices(sdfg),
                                 lapack_calls(sdfg) if device == "gpu" else ()):
        raise UnsupportedPattern(found.array, found.subset, found.reason())
    t0 = time.perf_counter()
    local = LocalOptimize(steps_of(local_optimize))
    auto = None
    if schedule is None:
        if ranks is None:
            raise ScheduleError("lower() needs a schedule ({map name: grid}) or ranks=P to choose one")
        from .search import search  # it checks ranks (and io, device), as auto_schedule does
        work = copy.deepcopy(sdfg)  # lowered on a copy: every error surfaces before the SDFG changes
        local.apply(work)  # the search sees the fused maps
        kernels = split_kernels(work, local.kernels)  # prepared once: the search prices these kernels
        auto = schedule = search(work, kernels, ranks, io=io, memory_per_rank=memory_per_rank,
                                 fixed=local.rename_fixed(fixed), sizes=sizes, solvers=solvers, machine=None,
                                 device=device, fused=False)  # work is fused already: its names as they are
        grids = resolve(kernels, schedule)
    elif ranks is not None or fixed is not None or memory_per_rank is not None:
        raise ScheduleError("lower(): give either a schedule or ranks=P (with fixed= / memory_per_rank=), not both")
    else:
        from .search import Schedule
        work = copy.deepcopy(sdfg)  # lowered on a copy: every error surfaces before the SDFG changes
        if names_fused_maps(schedule):  # a fused Schedule, or dict() of one
            if LocalStep.MAP_FUSION not in local.steps:
                raise ScheduleError("this schedule is auto_schedule's for the fused maps; lower it with "
                                    "local_optimize=True, or call auto_schedule(..., local_optimize=False)")
            local.apply(work)  # auto_schedule's names are those of the fused maps (it priced them)
            grids = resolve(local.kernels, schedule)
        else:
            if isinstance(schedule, Schedule):  # priced unfused (auto_schedule(local_optimize=False)): lowered so
                local.steps = local.steps - {LocalStep.MAP_FUSION}
            grids = local.apply(work, _on_copy(schedule, sdfg, work))  # checked against the maps as written
        kernels = split_kernels(work, local.kernels)
    options = LoweringOptions(tuple(resolve_solvers(solvers)), Device(device), fuse, IoMode(io),
                              contractions=LocalStep.CONTRACTIONS in local.steps,
                              single_threaded=threads == 1)
    t1 = time.perf_counter()
    rep = partition(work, grids, options, kernels)  # plan once, apply the plan with one Pipeline
    rep.timings = {"schedule check, copy, map fusion": t1 - t0, **rep.timings}
    if auto is not None:
        rep.schedule = auto.explain()
        if rep.unsplit and not rep.unsplit.startswith("the program has no map"):
            rep.unsplit = ("the automatic schedule keeps every map on rank 0 (predicted fastest, or every other "
                           "grid was refused: see its lines above); the whole program runs on rank 0")
    local.note(rep)
    from .search.machine import machine
    layout = machine().node_layout()
    if layout is not None and layout.nodes(rep.ranks_needed) > 1:
        rep.nodes = layout  # the report prints the bytes per level
    _validate(work, sdfg.name)
    _adopt(sdfg, work)
    slow = rep.slow_steps()
    if slow:
        warnings.warn(f"'{sdfg.name}': {slow}", stacklevel=3)  # the caller of lower(), past the wrapper
    if device == "cpu":
        from .runtime.toolchain import blas
        rep.blas = str(blas())
    notes(sdfg).report = rep
    if closure:
        from .runtime.build import bind
        bind(sdfg, **closure)
    if verbose:
        print(rep)
    return sdfg


def _validate(work: SDFG, name: str):
    """DaCe's own validation of the lowered copy: a graph the passes made that DaCe rejects is refused
    here, in words, before the caller's SDFG changes and before any build or rank starts."""
    from dace.sdfg.validation import InvalidSDFGError
    try:
        work.validate()
    except InvalidSDFGError as e:
        what = str(getattr(e, "message", e)).split("\n")[0]
        saved = f"; DaCe saved the invalid graph in {e.path}" if getattr(e, "path", None) else ""
        raise UnsupportedPattern(_invalid_at(e) or "?", "", f"the lowered program of '{name}' is not a valid "
                                 f"SDFG ({what}{saved}); this is a dace_partition bug: please report it with "
                                 "the schedule") from e


def _invalid_at(e) -> str:
    """The data (or map, or state) a DaCe validation error points at, by name."""
    try:
        st = e.sdfg.node(e.state_id)
        if getattr(e, "edge_id", None) is not None:
            return st.edges()[e.edge_id].data.data or f"state {st.label}"
        if getattr(e, "node_id", None) is None:
            return f"state {st.label}"
        n = st.node(e.node_id)
        return getattr(n, "data", None) or getattr(n, "label", None) or str(n)
    except Exception:  # noqa: BLE001 - only for the message
        return ""


def _on_copy(schedule, original: SDFG, copied: SDFG):
    """The schedule with keys that are Map or MapEntry objects of ``original`` replaced by the maps at the
    same place in ``copied`` (discovery runs on the copy, so the caller's SDFG never changes)."""
    if not any(isinstance(k, (nodes.Map, nodes.MapEntry)) for k in dict(schedule or {})):
        return schedule
    twins = {}
    for (a, _), (b, _) in zip(original.all_nodes_recursive(), copied.all_nodes_recursive()):
        if isinstance(a, nodes.MapEntry):
            twins[id(a)], twins[id(a.map)] = b, b.map
    return {twins.get(id(k), k) if isinstance(k, (nodes.Map, nodes.MapEntry)) else k: v
            for k, v in dict(schedule).items()}


def _adopt(target: SDFG, source: SDFG):
    """Makes ``target`` the lowered ``source`` in place (the caller's SDFG object stays valid): every
    back-reference to ``source`` is pointed at ``target``."""
    target.__dict__.clear()
    target.__dict__.update(source.__dict__)
    for blk in target.all_control_flow_blocks():
        if getattr(blk, "_sdfg", None) is source:
            blk._sdfg = target
        if getattr(blk, "_parent_graph", None) is source:
            blk._parent_graph = target
    for n, parent in target.all_nodes_recursive():
        if isinstance(n, nodes.NestedSDFG) and n.sdfg.parent_sdfg is source:
            n.sdfg.parent_sdfg = target
    for sub in target.all_sdfgs_recursive():
        for blk in sub.all_control_flow_regions():
            if getattr(blk, "_parent_graph", None) is source:
                blk._parent_graph = target
    target.reset_cfg_list()


def layouts(sdfg) -> Dict[str, Layout]:
    """The layouts of a lowered SDFG or a loaded Program (empty for root-in/root-out)."""
    return layouts_of(sdfg)


def layout(sdfg, array: str) -> Layout:
    """Which global subset of ``array`` each rank holds (``sdfg`` may also be a loaded Program)."""
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
