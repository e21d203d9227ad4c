"""``Layout``: which global subset of an argument each rank holds in a program lowered with
``io="distributed"``, computable on any rank without communication (Heat's ``chunk`` idea)."""
import re
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import sympy

from . import boxes


#: DaCe's integer functions as they appear in the written bounds (an uneven block starts at
#: ``int_ceil(510*r, 8)``): without them SymPy keeps an unknown function that no rank can evaluate.
_FUNCTIONS = {
    "int_ceil": lambda a, b: sympy.ceiling(sympy.Rational(1, 1) * a / b),
    "int_floor": lambda a, b: sympy.floor(sympy.Rational(1, 1) * a / b),
    "Min": sympy.Min,
    "Max": sympy.Max,
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _parse(expr):
    """A layout expression as sympy reads it, every name a symbol: plain ``sympify`` turns a size named
    ``N``, ``S``, ``E`` or ``beta`` into sympy's own function or constant."""
    names = {n: sympy.Symbol(n) for n in _NAME.findall(str(expr)) if n not in _FUNCTIONS}
    return sympy.sympify(expr, locals={**_FUNCTIONS, **names})


def _grid_size(grid) -> int:
    n = 1
    for g in grid:
        n *= g
    return n


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
        dims = ", ".join(f"{b}:{_parse(e) + 1}" for b, e in self.subset)
        return f"Layout({self.array}[{dims}] on grid {self.grid}, local shape ({', '.join(self.local_shape)}))"

    def _eval(self, expr: str, values: Dict[str, int]) -> int:
        v = _parse(expr).subs({sympy.Symbol(k): x for k, x in values.items()})
        if v.free_symbols:
            raise ValueError(f"layout of '{self.array}' needs values for {sorted(map(str, v.free_symbols))}")
        return int(sympy.floor(v)) if not v.is_integer else int(v)

    def symbols(self) -> set:
        """Names a call must give (or the grid coordinates fix) to evaluate the layout."""
        names = set()
        for expr in self.shape + self.local_shape + tuple(x for be in self.subset for x in be):
            names |= {str(x) for x in _parse(expr).free_symbols}
        return names - {c for c in self.coords if c}

    def covers_whole_array(self, **symbols) -> Optional[bool]:
        """Whether every element is in some rank's block; None when that cannot be told here (sizes not
        known, or an array too large to mark)."""
        if self.symbols() - set(symbols):
            return None
        shape = tuple(self._eval(s, symbols) for s in self.shape)
        if int(np.prod(shape, dtype=np.int64)) > 1 << 26:
            return None
        held = np.zeros(shape, dtype=bool)
        for r in range(_grid_size(self.grid)):
            blk = self.block(r, **symbols)
            if blk is not None:
                held[blk] = True
        return bool(held.all())

    def shape_of(self, **symbols) -> Tuple[int, ...]:
        return tuple(self._eval(s, symbols) for s in self.shape)

    def local_shape_of(self, **symbols) -> Tuple[int, ...]:
        return tuple(self._eval(s, symbols) for s in self.local_shape)

    def block(self, rank: int, **symbols) -> Optional[Tuple[slice, ...]]:
        """The global index ranges rank ``rank`` holds, or None when it is outside the grid."""
        if rank >= _grid_size(self.grid):
            return None
        pos = np.unravel_index(rank, self.grid) if self.grid else ()
        values = dict(symbols)
        values.update({c: int(p) for c, p in zip(self.coords, pos) if c})
        out = []
        for b, e in self.subset:
            lo, hi = self._eval(b, values), self._eval(e, values)
            out.append(slice(lo, max(lo, hi + 1)))
        return tuple(out)

    def box(self, rank: int, **symbols):
        """Rank ``rank``'s block as a ``(starts, counts)`` box (:mod:`.boxes`), or None outside the grid."""
        blk = self.block(rank, **symbols)
        return None if blk is None else (tuple(b.start for b in blk), tuple(b.stop - b.start for b in blk))

    def scatter(self, array, rank: int, **symbols) -> np.ndarray:
        """Rank ``rank``'s tile of the whole ``array`` (zero-padded to the local shape)."""
        return boxes.tile(array, self.box(rank, **symbols), self.local_shape_of(**symbols), self.dtype)

    def gather(self, tiles: Sequence[np.ndarray], **symbols) -> np.ndarray:
        """The whole array from every rank's tile (``tiles[r]`` of rank r; replicas must agree)."""
        return boxes.join(tiles, [self.box(r, **symbols) for r in range(len(tiles))], self.shape_of(**symbols),
                          self.dtype)

    def to_json(self):
        return {"array": self.array, "shape": self.shape, "local_shape": self.local_shape, "dtype": self.dtype,
                "grid": self.grid, "coords": self.coords, "subset": self.subset}

    @staticmethod
    def of(array: str, dist, shape, local_shape, dtype, text=str) -> "Layout":
        """The layout of argument ``array`` whose tiles are the blocks of ``dist`` (a
        :class:`~.distribution.Distribution`), held in buffers of ``local_shape``: its serialisable form, the
        one a record keeps and any rank evaluates without communication. ``text`` writes an expression (the
        lowering puts in the sizes a program was specialized to: a call does not carry them)."""
        return Layout(array, tuple(text(s) for s in shape), tuple(text(s) for s in local_shape),
                      np.dtype(dtype).str, tuple(dist.grid), tuple(c or "" for c in dist.coords),
                      tuple((text(b), text(e)) for b, e, _ in dist.subset))

    @staticmethod
    def from_json(d) -> "Layout":
        return Layout(d["array"], tuple(d["shape"]), tuple(d["local_shape"]), d["dtype"], tuple(d["grid"]),
                      tuple(d["coords"]), tuple(tuple(x) for x in d["subset"]))
