"""Rank-local arguments (``lower(..., io="distributed")``), decided on the plan.

By default a lowered program takes whole arrays on rank 0 and returns whole arrays there, which is the
right interface for a first run and the wrong one at scale: every byte passes through one rank. With
``io="distributed"``, every argument that a partitioned kernel reads or writes becomes that kernel's
rank-local buffer: each rank passes (and gets back) only its tile, and the scatters from and gathers to
rank 0 disappear. The tile of an argument is the block of the last kernel that writes it (else of the
first that reads it); a later kernel that needs other blocks gets them by a grid-to-grid Move (from the
solver registry, like an intermediate), and partial results written by several replicas are combined
by an allreduce Move so that every replica holds the result. Where an argument is read in a block plus
halo that contains its written block and every other read, that block plus halo is its tile.

:func:`plan_local_io` decides on the :class:`~.model.PartitionModel` (after the round trips and the loop
carry) and refuses, in words, an argument no tile can serve; :class:`~dace_partition.passes.localize_io.
LocalizeArguments` carries out its edits.
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
from dace import symbolic
from dace.sdfg import SDFG

from ..errors import UnsupportedPattern
from ..ir import Layout, Move
from ..ir.boxes import contains
from .model import Drop, ModelMove, Node, PartitionModel, Reroute


@dataclass(frozen=True)
class Argument:
    """``array`` becomes a rank-local argument of ``shape`` (the buffer it replaces)."""
    array: str
    shape: tuple


@dataclass(frozen=True)
class Regather:
    """The gather (or combination of partial results) becomes ``move`` and writes all of the rank-local
    argument."""
    node: Node
    move: Move
    solver: str


@dataclass(frozen=True)
class Localized:
    """What became of one argument (for the report's notes)."""
    array: str
    grid_id: int  # the kernel whose blocks are the argument's tiles
    readers: Tuple[int, ...] = ()  # other kernels that read those tiles in place


@dataclass(frozen=True)
class LocalIo:
    """The rank-local arguments: each one's tile layout, what became of it, and the edits in order."""
    layouts: Tuple[Tuple[str, Layout], ...]
    localized: Tuple[Localized, ...]
    edits: Tuple[Union[Argument, Drop, Reroute, Regather], ...]


def plan_local_io(model: PartitionModel) -> LocalIo:
    """Every argument that scatters and gathers move becomes rank-local (module docstring); raises
    :class:`UnsupportedPattern` for one that cannot. Changes the model as the edits will change the
    program, and nothing else."""
    sdfg = model.sdfg
    layouts: Dict[str, Layout] = {}
    localized: List[Localized] = []
    edits: list = []
    moves = sorted(model.moves, key=lambda mv: mv.order)
    for name in sorted({mv.array for mv in moves if not (mv.src_grid and mv.dst_grid)}):
        desc = sdfg.arrays.get(name)
        if desc is None or desc.transient:
            continue
        scatters = [mv for mv in moves if mv.array == name and not mv.src_grid]
        gathers = [mv for mv in moves if mv.array == name and not mv.dst_grid]
        if len(gathers) > 1:
            raise UnsupportedPattern(name, gathers[1].move.src.range, "io='distributed': the argument is written "
                                     "by several partitioned kernels; give it one writer or use io='root'")
        if any(a.name == name and (a.read or a.written) for a in model.accesses):
            raise UnsupportedPattern(name, "", "io='distributed': the argument is also used by code that "
                                     "runs on rank 0 (an unscheduled map, or a kernel on a one-rank grid); "
                                     "schedule that code too, or use io='root'")
        home = gathers[0] if gathers else scatters[0]
        home_dist = home.move.src if gathers else home.move.dst
        if any(mv.move.accumulates for mv in scatters + gathers) and home_dist.replicas > 1:
            raise UnsupportedPattern(name, home_dist.range, "io='distributed': the argument is accumulated into "
                                     "by several ranks per element, so its prior value would count more than once")
        if gathers and scatters and not scatters[0].move.dst.same_blocks(home_dist):
            tile = _halo_tile(scatters, gathers[0])
            if tile is None:
                raise UnsupportedPattern(name, home_dist.range, "io='distributed': the argument is read in blocks "
                                         f"[{scatters[0].move.dst.range}] but written in other blocks, and no read "
                                         "block contains, on every rank, the written block and every other read "
                                         "(sizes must be known when lowering; fusing the stencil's maps into one "
                                         "gives one block-plus-halo read); use io='root'")
            _halo_tile_home(model, name, tile, scatters, gathers[0], layouts, localized, edits)
            continue
        local = home.src if gathers else home.dst
        layouts[name] = _checked(sdfg, _layout_of(model, name, home_dist, local), home_dist.range, bool(gathers))
        shape = model.shapes[local]
        edits.append(Argument(name, shape))
        readers = []
        if home_dist.partial:  # every replica gets the combined value
            move = Move(name, home_dist, home_dist.combined(), tuple(home.move.shape), int(home.move.itemsize))
            solver = model.implement(move)
            edits.append(Regather(home.key, move, solver))
            home.move, home.solver, home.dst = move, solver, name
        else:
            edits.append(model.dropped(home, (local, name)))
        model.shapes[name] = shape
        for mv in scatters:
            if mv is home:
                continue
            target, dst = mv.dst, mv.move.dst
            if dst.same_blocks(home_dist) and model.shapes.get(target) == shape and not home_dist.partial:
                edits.append(model.dropped(mv, (target, name) if target != name else None))
                readers.append(dst.grid_id)
                continue
            # Another kernel needs other blocks: a grid-to-grid move from the argument's tiles.
            move = Move(name, home_dist.combined(), dst, tuple(mv.move.shape), int(mv.move.itemsize))
            edits.append(model.rerouted(mv, move, name))
        localized.append(Localized(name, home_dist.grid_id, tuple(readers)))
    return LocalIo(tuple(layouts.items()), tuple(localized), tuple(edits))


def _halo_tile_home(model: PartitionModel, name: str, tile: ModelMove, scatters, gather: ModelMove, layouts,
                    localized, edits):
    """The argument's tile is the block-plus-halo ``tile`` reads: every other buffer of the argument is
    filled from it on the same rank, and after the last write the written blocks go back into it with
    their halos (the same neighbour exchange as in the loop), so every rank's tile, ghost cells
    included, holds the current values and overlapping tiles agree."""
    dist = tile.move.dst
    local = tile.dst
    layouts[name] = _checked(model.sdfg, _layout_of(model, name, dist, local), dist.range, True)
    shape = model.shapes[local]
    edits.append(Argument(name, shape))
    localized.append(Localized(name, dist.grid_id))
    edits.append(model.dropped(tile, (local, name)))
    model.shapes[name] = shape
    for mv in scatters:
        if mv is not tile:
            edits.append(model.rerouted(mv, Move(name, dist, mv.move.dst, tuple(mv.move.shape), int(mv.move.itemsize)),
                                        name))
    move = Move(name, gather.move.src, dist, tuple(gather.move.shape), int(gather.move.itemsize))
    solver = model.implement(move, box=True)
    edits.append(Regather(gather.key, move, solver))
    gather.move, gather.solver, gather.dst = move, solver, name


def _halo_tile(scatters: List[ModelMove], gather: ModelMove) -> Optional[ModelMove]:
    """The scatter whose blocks contain, rank by rank, the written blocks and every other scatter's blocks
    (known sizes only), or None."""
    g = gather.move.src
    if gather.move.op or gather.move.accumulates or g.partial or any(mv.move.accumulates for mv in scatters):
        return None
    written = g.blocks()
    if written is None:
        return None
    blocks = [mv.move.dst.blocks() for mv in scatters]
    if any(b is None or len(b) != len(written) for b in blocks):
        return None
    for mv, mine in zip(scatters, blocks):
        if all(contains(mine[r], written[r]) and all(contains(mine[r], b[r]) for b in blocks)
               for r in range(len(written))):
            return mv
    return None


def _layout_of(model: PartitionModel, name: str, dist, local: str) -> Layout:
    """The layout of argument ``name`` whose tiles are ``dist``'s blocks, held in buffers like ``local``."""
    desc = model.sdfg.arrays[name]
    return Layout.of(name, dist, desc.shape, model.shapes[local], desc.dtype.as_numpy_dtype(),
                     _with_constants(model.sdfg))


def _checked(sdfg: SDFG, layout: Layout, subset, written: bool) -> Layout:
    """Refuses, in words, a layout that no call could use: one that depends on a symbol the call does not
    give (a loop variable: the tile would change during the call), or, for an argument the program
    writes, tiles that leave part of it on no rank (those elements would be lost when the caller joins
    the tiles: a triangular update's upper corner)."""
    known = {str(s) for s in sdfg.free_symbols} | {str(k) for k in sdfg.arglist()}
    loose = sorted(layout.symbols() - known)
    if loose:
        raise UnsupportedPattern(layout.array, subset, f"io='distributed': each rank's tile would depend on "
                                 f"{', '.join(loose)}, which the call does not give (a loop variable), so it is "
                                 "not one fixed block per rank; use io='root'")
    if written and layout.covers_whole_array() is False:
        raise UnsupportedPattern(layout.array, subset, "io='distributed': the program writes the argument, but "
                                 "the ranks' tiles leave part of it on no rank (the kernel reads and writes only "
                                 "that part), so joining the tiles would lose the rest; use io='root'")
    return layout


def _with_constants(sdfg: SDFG):
    """An expression as text with the program's integer constants put in: a layout is evaluated from a
    call's arguments, which do not carry the sizes a program was specialized to (``sdfg.constants``)."""
    consts = {k: int(v) for k, v in sdfg.constants.items()
              if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}

    def fixed(expr) -> str:
        if not consts:
            return str(expr)
        ex = symbolic.pystr_to_symbolic(str(expr))
        sub = {s: consts[str(s)] for s in getattr(ex, "free_symbols", ()) if str(s) in consts}
        return str(ex.subs(sub)) if sub else str(expr)

    return fixed
