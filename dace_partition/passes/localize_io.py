"""Rank-local arguments: ``lower(..., io="distributed")``, as a pass.

By default a lowered program takes whole arrays on rank 0 and returns whole arrays there, which is the
right interface for a first run and the wrong one at scale: every byte passes through one rank. With
``io="distributed"``, every argument that a partitioned kernel reads or writes becomes that kernel's
rank-local buffer: each rank passes (and gets back) only its tile, and the scatters from and gathers to
rank 0 disappear. The tile of an argument is the block of the last kernel that writes it (else of the
first that reads it); a later kernel that needs other blocks gets them by a grid-to-grid Move (from the
solver registry, like an intermediate), and partial results written by several replicas are combined
by an allreduce Move so that every replica holds the result.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import dace
import numpy as np
from dace import symbolic
from dace.memlet import Memlet
from dace.sdfg import SDFG

from ..errors import UnsupportedPattern
from ..ir import Layout, Move
from ..ir.boxes import contains
from .graph import MovePass, distributed_memlets, drop, local_buffer, rename_data, reroute, uses


@dataclass
class Localized:
    """What became of one argument (for the report's notes)."""
    array: str
    grid_id: int  # the kernel whose blocks are the argument's tiles
    readers: List[int] = field(default_factory=list)  # other kernels that read those tiles in place


def _layout_of(sdfg: SDFG, name: str, dm, local: str) -> Layout:
    gdesc, ldesc = sdfg.arrays[name], sdfg.arrays[local]
    g = dm.distribution("dst" if not dm.src_grid else "src")
    fixed = _with_constants(sdfg)
    return Layout(name, tuple(fixed(s) for s in gdesc.shape), tuple(fixed(s) for s in ldesc.shape),
                  np.dtype(gdesc.dtype.as_numpy_dtype()).str, tuple(g.grid), tuple(c or "" for c in g.coords),
                  tuple((fixed(b), fixed(e)) for b, e, _ in g.subset))


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


class LocalizeArguments(MovePass):
    """Turns every argument moved by DistributedMemlets into a rank-local one (module docstring)."""

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> Tuple[Dict[str, Layout], Dict[str, Localized]]:
        layouts: Dict[str, Layout] = {}
        changes: Dict[str, Localized] = {}
        dms = distributed_memlets(sdfg)
        for name in sorted({dm.array for _, dm in dms if not (dm.src_grid and dm.dst_grid)}):
            desc = sdfg.arrays.get(name)
            if desc is None or desc.transient:
                continue
            scatters = [(st, dm) for st, dm in dms if dm.array == name and not dm.src_grid]
            gathers = [(st, dm) for st, dm in dms if dm.array == name and not dm.dst_grid]
            if len(gathers) > 1:
                raise UnsupportedPattern(name, gathers[1][1].src_subset, "io='distributed': the argument is written "
                                         "by several partitioned kernels; give it one writer or use io='root'")
            moved = {id(dm) for _, dm in scatters + gathers}
            for st, n in uses(sdfg, name):
                touches = [e.dst for e in st.out_edges(n)] + [e.src for e in st.in_edges(n)]
                if not all(id(t) in moved for t in touches):
                    raise UnsupportedPattern(name, "", "io='distributed': the argument is also used by code that "
                                             "runs on rank 0 (an unscheduled map, or a kernel on a one-rank grid); "
                                             "schedule that code too, or use io='root'")
            home_state, home = gathers[0] if gathers else scatters[0]
            home_dist = home.distribution("src" if gathers else "dst")
            if any(dm.accumulates for _, dm in scatters + gathers) and home_dist.replicas > 1:
                raise UnsupportedPattern(name, home_dist.range, "io='distributed': the argument is accumulated into "
                                         "by several ranks per element, so its prior value would count more than once")
            if gathers and scatters and not scatters[0][1].distribution("dst").same_blocks(home_dist):
                tile = _halo_tile(scatters, gathers[0][1])
                if tile is None:
                    raise UnsupportedPattern(name, home_dist.range, "io='distributed': the argument is read in blocks "
                                             f"[{scatters[0][1].dst_subset}] but written in other blocks, and no read "
                                             "block contains, on every rank, the written block and every other read "
                                             "(sizes must be known when lowering; fusing the stencil's maps into one "
                                             "gives one block-plus-halo read); use io='root'")
                self._localize_halo_tile(sdfg, name, desc, tile, scatters, gathers[0], layouts, changes)
                continue
            local = local_buffer(home_state, home)
            layouts[name] = _checked(sdfg, _layout_of(sdfg, name, home, local), home_dist.range, bool(gathers))
            ldesc = sdfg.arrays[local]
            new = dace.data.Array(desc.dtype, ldesc.shape, storage=desc.storage, transient=False)
            sdfg.remove_data(name, validate=False)
            sdfg.add_datadesc(name, new)
            changes[name] = info = Localized(name, home_dist.grid_id)
            if home_dist.partial:  # every replica gets the combined value
                move = Move(name, home_dist, home_dist.combined(), tuple(home.shape), int(home.itemsize))
                home.set_move(move)
                home.implementation = self.implement(move)
                home_state.out_edges(home)[0].data = Memlet.from_array(name, new)
            else:
                drop(home_state, home)
                rename_data(sdfg, local, name)
            for st, dm in scatters:
                if dm is home:
                    continue
                target = local_buffer(st, dm)
                dst = dm.distribution("dst")
                if (dst.same_blocks(home_dist) and tuple(sdfg.arrays[target].shape) == tuple(new.shape)
                        and not home_dist.partial):
                    drop(st, dm)
                    if target != name:
                        rename_data(sdfg, target, name)
                    info.readers.append(dst.grid_id)
                    continue
                # Another kernel needs other blocks: a grid-to-grid move from the argument's tiles.
                move = Move(name, home_dist.combined(), dst, tuple(dm.shape), int(dm.itemsize))
                reroute(st, dm, move, self.implement(move), Memlet.from_array(name, new))
        return layouts, changes

    def _localize_halo_tile(self, sdfg: SDFG, name: str, desc, tile, scatters, gather, layouts, changes):
        """The argument's tile is the block-plus-halo ``tile`` reads: every other buffer of the argument is
        filled from it on the same rank, and after the last write the written blocks go back into it with
        their halos (the same neighbour exchange as in the loop), so every rank's tile, ghost cells
        included, holds the current values and overlapping tiles agree."""
        sst, sdm = tile
        dist = sdm.distribution("dst")
        local = local_buffer(sst, sdm)
        layouts[name] = _checked(sdfg, _layout_of(sdfg, name, sdm, local), dist.range, True)
        new = dace.data.Array(desc.dtype, sdfg.arrays[local].shape, storage=desc.storage, transient=False)
        sdfg.remove_data(name, validate=False)
        sdfg.add_datadesc(name, new)
        changes[name] = Localized(name, dist.grid_id)
        drop(sst, sdm)
        rename_data(sdfg, local, name)
        for st, dm in scatters:
            if dm is sdm:
                continue
            move = Move(name, dist, dm.distribution("dst"), tuple(dm.shape), int(dm.itemsize))
            reroute(st, dm, move, self.implement(move), Memlet.from_array(name, new))
        gst, g = gather
        move = Move(name, g.distribution("src"), dist, tuple(g.shape), int(g.itemsize))
        g.set_move(move)
        g.implementation = self.implement(move, box=True)
        out = gst.out_edges(g)[0]
        out.data = Memlet.from_array(name, new)


def _halo_tile(scatters, gather):
    """The scatter whose blocks contain, rank by rank, the written blocks and every other scatter's blocks
    (known sizes only), or None."""
    g = gather.distribution("src")
    if gather.op or gather.accumulates or g.partial or any(dm.accumulates for _, dm in scatters):
        return None
    written = g.blocks()
    if written is None:
        return None
    others = [dm.distribution("dst") for _, dm in scatters]
    blocks = [d.blocks() for d in others]
    if any(b is None or len(b) != len(written) for b in blocks):
        return None
    for (st, dm), mine in zip(scatters, blocks):
        if all(contains(mine[r], written[r]) and all(contains(mine[r], b[r]) for b in blocks)
               for r in range(len(written))):
            return st, dm
    return None
