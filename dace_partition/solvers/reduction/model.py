"""The system and placement model of P^2 (Xie et al., sec. 2.1 and 3.1).

A *system hierarchy* lists levels outermost first, each with a cardinality,
e.g. ``[("node", 4), ("core", 8)]``: 4 nodes of 8 devices.  Devices are
numbered node-major (mixed radix over the level sizes), which is how ranks
are laid out by ``mpiexec`` on a cluster.

A *parallelism matrix* places parallelism axes on the hierarchy: entry
``x[i][j]`` is how many parts axis ``i`` is split into at level ``j``.  Rows
multiply to the axis sizes and columns to the level sizes (eq. 1-2).  Inside
one level, the factors of the different axes are laid out with axis 0
outermost (a convention of this implementation: the paper leaves it open,
and any fixed choice gives the same set of reduction groups up to naming).

The *synthesis hierarchy* of a reduction is built from the reduction axes'
rows only (the paper's hierarchy (d)), with the factors of the same hardware
level collapsed into one (sec. 2.5, "[7 16 27]"), and levels of size 1
dropped: a level of size 1 forms no group that another level does not form
already, so keeping it would only produce syntactic duplicates.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce as _fold
from itertools import product
from operator import mul
from typing import Iterator, Sequence, Tuple


def _prod(xs) -> int:
    return _fold(mul, xs, 1)


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Level:
    """One level of a system hierarchy: a name and how many children each parent has."""
    name: str
    size: int

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"level {self.name!r}: size must be a positive int, got {self.size!r}")

    def __str__(self):
        return f"{self.name}:{self.size}"


@dataclass(frozen=True)
class SystemHierarchy:
    """Levels outermost first; devices are numbered in mixed radix over the sizes (outermost major)."""
    levels: Tuple[Level, ...]

    def __post_init__(self):
        lv = tuple(l if isinstance(l, Level) else Level(str(l[0]), int(l[1])) for l in self.levels)
        if not lv:
            raise ValueError("a system hierarchy needs at least one level")
        if len({l.name for l in lv}) != len(lv):
            raise ValueError(f"level names must be distinct: {[l.name for l in lv]}")
        object.__setattr__(self, "levels", lv)

    @classmethod
    def of(cls, *levels) -> "SystemHierarchy":
        """``SystemHierarchy.of(("node", 2), ("core", 4))`` or ``SystemHierarchy.of([("node", 2), ...])``."""
        if len(levels) == 1 and isinstance(levels[0], (list, tuple)) and levels[0] and \
                isinstance(levels[0][0], (list, tuple, Level)):
            levels = tuple(levels[0])
        return cls(tuple(levels))

    @classmethod
    def parse(cls, text: str) -> "SystemHierarchy":
        """``"2x4"`` -> nodes of 2 x 4 cores; three or more sizes name the levels l0, l1, ..."""
        sizes = [int(s) for s in text.lower().replace("*", "x").split("x") if s.strip()]
        if not sizes:
            raise ValueError(f"cannot parse hierarchy {text!r}")
        names = ["node", "core"] if len(sizes) == 2 else (["node"] if len(sizes) == 1 else
                                                           [f"l{i}" for i in range(len(sizes))])
        return cls(tuple(Level(n, s) for n, s in zip(names, sizes)))

    @property
    def sizes(self) -> Tuple[int, ...]:
        return tuple(l.size for l in self.levels)

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(l.name for l in self.levels)

    @property
    def num_devices(self) -> int:
        return _prod(self.sizes)

    def coords(self, device: int) -> Tuple[int, ...]:
        """Per-level coordinates of a device (outermost first)."""
        out = []
        for s in reversed(self.sizes):
            out.append(device % s)
            device //= s
        return tuple(reversed(out))

    def __str__(self):
        return "[" + " ".join(str(l) for l in self.levels) + "]"


@dataclass(frozen=True)
class ParallelismMatrix:
    """``rows[i][j]``: parts of parallelism axis ``i`` at hierarchy level ``j`` (sec. 3.1)."""
    rows: Tuple[Tuple[int, ...], ...]

    def __post_init__(self):
        rows = tuple(tuple(int(x) for x in r) for r in self.rows)
        if not rows or any(len(r) != len(rows[0]) for r in rows) or any(x < 1 for r in rows for x in r):
            raise ValueError(f"a parallelism matrix is a non-empty rectangle of positive ints: {self.rows}")
        object.__setattr__(self, "rows", rows)

    @property
    def axes(self) -> Tuple[int, ...]:
        return tuple(_prod(r) for r in self.rows)

    @property
    def columns(self) -> Tuple[int, ...]:
        return tuple(_prod(r[j] for r in self.rows) for j in range(len(self.rows[0])))

    def validate(self, hierarchy: SystemHierarchy, axes: Sequence[int]) -> None:
        """Raise ``ValueError`` unless eq. (1) (columns) and eq. (2) (rows) hold."""
        if len(self.rows[0]) != len(hierarchy.levels):
            raise ValueError(f"matrix has {len(self.rows[0])} columns, hierarchy {hierarchy} has "
                             f"{len(hierarchy.levels)} levels")
        if len(self.rows) != len(axes):
            raise ValueError(f"matrix has {len(self.rows)} rows for {len(axes)} parallelism axes")
        if self.axes != tuple(axes):
            raise ValueError(f"rows multiply to {list(self.axes)}, the axes are {list(axes)} (eq. 2)")
        if self.columns != hierarchy.sizes:
            raise ValueError(f"columns multiply to {list(self.columns)}, the levels are "
                             f"{list(hierarchy.sizes)} (eq. 1)")

    def __str__(self):
        return "[" + " ".join("[" + " ".join(map(str, r)) + "]" for r in self.rows) + "]"


def enumerate_matrices(hierarchy: SystemHierarchy, axes: Sequence[int]) -> Iterator[ParallelismMatrix]:
    """Every parallelism matrix for ``axes`` on ``hierarchy`` (eq. 1-2), in lexicographic order."""
    axes = tuple(int(a) for a in axes)
    if _prod(axes) != hierarchy.num_devices:
        return
    levels = hierarchy.sizes

    def rows_for(i, remaining):
        if i == len(axes):
            if all(r == 1 for r in remaining):
                yield ()
            return
        choices = [[d for d in _divisors(remaining[j])] for j in range(len(levels))]
        for row in product(*choices):
            if _prod(row) == axes[i]:
                rest = tuple(remaining[j] // row[j] for j in range(len(levels)))
                for tail in rows_for(i + 1, rest):
                    yield (row,) + tail

    for rows in rows_for(0, levels):
        yield ParallelismMatrix(rows)


@dataclass(frozen=True)
class Placement:
    """A full problem: hierarchy, parallelism axes, their matrix and the axes reduced over."""
    hierarchy: SystemHierarchy
    axes: Tuple[int, ...]
    matrix: ParallelismMatrix
    reduce_axes: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(int(a) for a in self.axes))
        m = self.matrix if isinstance(self.matrix, ParallelismMatrix) else ParallelismMatrix(self.matrix)
        object.__setattr__(self, "matrix", m)
        ra = tuple(sorted(set(int(a) for a in self.reduce_axes)))
        object.__setattr__(self, "reduce_axes", ra)
        m.validate(self.hierarchy, self.axes)
        if not ra or any(a < 0 or a >= len(self.axes) for a in ra):
            raise ValueError(f"reduction axes {ra} out of range for {len(self.axes)} axes")

    # --- the synthesis hierarchy (d), collapsed -------------------------------------------------
    @property
    def level_factors(self) -> Tuple[int, ...]:
        """Product of the reduction axes' factors at every hardware level (size-1 levels kept)."""
        return tuple(_prod(self.matrix.rows[i][j] for i in self.reduce_axes)
                     for j in range(len(self.hierarchy.levels)))

    @property
    def synthesis_levels(self) -> Tuple[int, ...]:
        """Hardware level index of each synthesis level (levels where the reduction has factor > 1)."""
        return tuple(j for j, f in enumerate(self.level_factors) if f > 1)

    @property
    def synthesis_sizes(self) -> Tuple[int, ...]:
        return tuple(self.level_factors[j] for j in self.synthesis_levels)

    @property
    def group_size(self) -> int:
        return _prod(self.synthesis_sizes)

    def device_coords(self, device: int):
        """``(group key, synthesis index)`` of a device.

        The group key is the tuple of all non-reduction sub-coordinates (devices with equal keys
        reduce together); the synthesis index numbers the device inside its group in mixed radix
        over the synthesis levels, outermost first.
        """
        rows = self.matrix.rows
        key, sidx = [], 0
        for j, c in enumerate(self.hierarchy.coords(device)):
            sub = []
            for i in reversed(range(len(rows))):  # axis 0 outermost inside a level
                sub.append(c % rows[i][j])
                c //= rows[i][j]
            sub.reverse()
            red = 0
            for i in range(len(rows)):
                if i in self.reduce_axes:
                    red = red * rows[i][j] + sub[i]
                else:
                    key.append(sub[i])
            if self.level_factors[j] > 1:
                sidx = sidx * self.level_factors[j] + red
        return tuple(key), sidx

    def groups(self):
        """Reduction groups as tuples of device ids ordered by synthesis index."""
        by_key = {}
        for d in range(self.hierarchy.num_devices):
            k, s = self.device_coords(d)
            by_key.setdefault(k, {})[s] = d
        return tuple(tuple(m[s] for s in range(self.group_size)) for _, m in sorted(by_key.items()))

    def __str__(self):
        return f"{self.hierarchy} axes={list(self.axes)} matrix={self.matrix} reduce={list(self.reduce_axes)}"


def placement_from_grid(hierarchy: SystemHierarchy, grid: Sequence[int], reduce_axes: Sequence[int]):
    """The placement of a row-major process grid on node-major ranks, or ``None``.

    Rank ``r`` of a row-major grid and device ``r`` of the hierarchy are the same number; this
    is a parallelism matrix exactly when the cumulative products of the grid axes and of the
    levels form one divisibility chain (then every axis/level overlap is one factor, a
    "staircase" matrix).  Otherwise a grid axis straddles a level boundary unevenly and the
    groups are not hierarchical: the caller keeps a flat collective.
    """
    grid = tuple(int(g) for g in grid)
    if _prod(grid) != hierarchy.num_devices:
        return None
    # cumulative products from the outermost; both are chains of the same total
    def cums(xs):
        out, acc = [], 1
        for x in xs:
            acc *= x
            out.append(acc)
        return out
    marks = sorted(set([1] + cums(grid) + cums(hierarchy.sizes)))
    for a, b in zip(marks, marks[1:]):
        if b % a:
            return None
    rows = [[1] * len(hierarchy.levels) for _ in grid]
    ga, ha = [1] + cums(grid), [1] + cums(hierarchy.sizes)
    for a, b in zip(marks, marks[1:]):
        i = next(k for k in range(len(grid)) if ga[k] <= a and b <= ga[k + 1])
        j = next(k for k in range(len(hierarchy.sizes)) if ha[k] <= a and b <= ha[k + 1])
        rows[i][j] *= b // a
    return Placement(hierarchy, grid, ParallelismMatrix(tuple(map(tuple, rows))), tuple(reduce_axes))
