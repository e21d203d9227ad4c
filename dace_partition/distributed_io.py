"""Tiles of the arguments of a program lowered with ``io="distributed"`` (the rewrite itself is the
pass :class:`dace_partition.passes.LocalizeArguments`).

:func:`layout` tells which global subset each rank holds; :meth:`Layout.scatter` and
:meth:`Layout.gather` cut whole arrays into tiles and join them back (for tests and small runs). The
layouts are part of the program's :class:`~dace_partition.ir.ProgramRecord`, saved beside its build, so a
program loaded from its build folder knows them.
"""
from typing import Dict, Sequence

import numpy as np

from .ir import Layout, record_of

__all__ = ["Layout", "layouts", "layout", "scatter", "gather"]


def layouts(sdfg) -> Dict[str, Layout]:
    """The layouts of a lowered SDFG or a loaded Program (empty for root-in/root-out)."""
    rec = getattr(sdfg, "record", None) or record_of(getattr(sdfg, "sdfg", sdfg))
    return dict(rec.layouts) if rec is not None else {}


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
