"""Prime-factor view of a mesh and concrete device assignments.

The memory guarantees of the paper (Principle 1) need every mesh axis to have
prime size, so an axis of size 12 is viewed as three *factor axes* of sizes
2, 2, 3 (major to minor).  Row-major numbering over the factor axes equals
row-major numbering over the original axes, so a layout written with original
axes is the same layout with each axis replaced by its factors in order.

A :class:`Assignment` is what is physically true at one point of a plan: a
concrete type (per dimension, factor axes major-to-minor) together with the
device map of the paper (sec. 6), stored as ``loc[rank] = logical device``.
Keeping the device map explicit is what lets a plan skip the intermediate
permutations that strong typing would demand: a *relabel* changes only
``loc`` and moves no data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .types import Layout, Mesh, prime_factors

Spec = Tuple[Tuple[int, ...], ...]  # per dim, factor-axis ids major-to-minor


@dataclass(frozen=True)
class FactorAxis:
    name: str      # display name, e.g. "a" or "a.1"
    parent: str    # original mesh axis
    index: int     # position among the parent's factors (0 = major)
    size: int      # prime


class FactorMesh:
    """The mesh with every axis split into prime factors."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.axes: List[FactorAxis] = []
        self.of_parent: Dict[str, Tuple[int, ...]] = {}
        for name, size in mesh.axes.items():
            primes = prime_factors(size)
            ids = []
            for k, p in enumerate(primes):
                disp = name if len(primes) == 1 else f"{name}.{k}"
                ids.append(len(self.axes))
                self.axes.append(FactorAxis(disp, name, k, p))
            self.of_parent[name] = tuple(ids)
        self.sizes = np.array([a.size for a in self.axes], dtype=np.int64)
        self.ndev = mesh.size
        # coords[l, f]: coordinate of logical device l along factor axis f (row-major)
        coords = np.zeros((self.ndev, len(self.axes)), dtype=np.int64)
        rem = np.arange(self.ndev, dtype=np.int64)
        for f in reversed(range(len(self.axes))):
            coords[:, f] = rem % self.sizes[f]
            rem //= self.sizes[f]
        self.coords = coords
        self._blocks: Dict[Spec, np.ndarray] = {}

    def __repr__(self) -> str:
        return "FactorMesh(" + ", ".join(f"{a.name}:{a.size}" for a in self.axes) + ")"

    def spec_of(self, layout: Layout) -> Spec:
        return tuple(tuple(f for ax in axes for f in self.of_parent[ax]) for axes in layout)

    def radix(self, axes: Sequence[int]) -> np.ndarray:
        """Mixed-radix index of every logical device over ``axes`` (first = major)."""
        idx = np.zeros(self.ndev, dtype=np.int64)
        for a in axes:
            idx = idx * self.sizes[a] + self.coords[:, a]
        return idx

    def prod(self, axes: Sequence[int]) -> int:
        n = 1
        for a in axes:
            n *= int(self.sizes[a])
        return n

    def blocks(self, spec: Spec) -> np.ndarray:
        """``blocks[l, i]``: block index along dim ``i`` of logical device ``l``."""
        b = self._blocks.get(spec)
        if b is None:
            b = np.stack([self.radix(axes) for axes in spec], axis=1) if spec else np.zeros((self.ndev, 0), np.int64)
            self._blocks[spec] = b
        return b

    def names(self, axes: Sequence[int]) -> Tuple[str, ...]:
        """Display names, folding a complete run of one parent's factors into the parent name."""
        out: List[str] = []
        axes = list(axes)
        i = 0
        while i < len(axes):
            parent = self.axes[axes[i]].parent
            full = self.of_parent[parent]
            if len(full) > 1 and tuple(axes[i:i + len(full)]) == full:
                out.append(parent)
                i += len(full)
            else:
                out.append(self.axes[axes[i]].name)
                i += 1
        return tuple(out)

    def layout_names(self, spec: Spec) -> Tuple[Tuple[str, ...], ...]:
        return tuple(self.names(axes) for axes in spec)


def _keys(blocks: np.ndarray, nblocks: Sequence[int]) -> np.ndarray:
    k = np.zeros(blocks.shape[0], dtype=np.int64)
    for i, n in enumerate(nblocks):
        k = k * int(n) + blocks[:, i]
    return k


def match(have: np.ndarray, want: np.ndarray, nblocks: Sequence[int], prefer: np.ndarray) -> np.ndarray:
    """A bijection ``m`` with ``want[m[r]] == have[r]`` for every ``r``, keeping ``m[r] = prefer[r]`` where possible.

    ``have`` and ``want`` are block tables (rows = devices) holding the same
    multiset of blocks; replicated blocks may be matched in any order.
    """
    kh, kw = _keys(have, nblocks), _keys(want, nblocks)
    n = len(kh)
    out = np.full(n, -1, dtype=np.int64)
    keep = kw[prefer] == kh
    out[keep] = prefer[keep]
    taken = np.zeros(n, dtype=bool)
    taken[prefer[keep]] = True
    rest_r = np.nonzero(~keep)[0]
    rest_l = np.nonzero(~taken)[0]
    if len(rest_r):
        ro = rest_r[np.argsort(kh[rest_r], kind="stable")]
        lo = rest_l[np.argsort(kw[rest_l], kind="stable")]
        if not np.array_equal(kh[ro], kw[lo]):
            raise AssertionError("block multisets differ: not a permutation")
        out[ro] = lo
    return out


class Assignment:
    """A concrete type plus device map: which tile each physical rank holds."""

    __slots__ = ("fm", "shape", "spec", "loc")

    def __init__(self, fm: FactorMesh, shape: Tuple[int, ...], spec: Spec, loc: np.ndarray):
        self.fm, self.shape, self.spec, self.loc = fm, shape, spec, loc

    @property
    def nblocks(self) -> Tuple[int, ...]:
        return tuple(self.fm.prod(axes) for axes in self.spec)

    @property
    def tile(self) -> Tuple[int, ...]:
        return tuple(s // n for s, n in zip(self.shape, self.nblocks))

    @property
    def localsize(self) -> int:
        n = 1
        for t in self.tile:
            n *= t
        return n

    def phys_blocks(self) -> np.ndarray:
        """``[rank, dim]`` block index held by each physical rank."""
        return self.fm.blocks(self.spec)[self.loc]

    def offsets(self) -> np.ndarray:
        return self.phys_blocks() * np.array(self.tile, dtype=np.int64)

    def same_placement(self, other: "Assignment") -> bool:
        return self.nblocks == other.nblocks and np.array_equal(self.phys_blocks(), other.phys_blocks())

    def relabel(self, spec: Spec) -> "Assignment":
        """Re-describe the same physical placement with another concrete type of equal local shape."""
        if spec == self.spec:
            return self
        new = Assignment(self.fm, self.shape, spec, self.loc)
        assert new.nblocks == self.nblocks
        loc = match(self.phys_blocks(), self.fm.blocks(spec), self.nblocks, self.loc)
        return Assignment(self.fm, self.shape, spec, loc)

    def with_spec(self, spec: Spec) -> "Assignment":
        return Assignment(self.fm, self.shape, spec, self.loc)

    def groups(self, axes: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
        """Communicator of a collective over ``axes``: ``(group_of[rank], member_of[rank])``.

        Members of one group differ only in their coordinates along ``axes``;
        ``member`` is the mixed-radix index over ``axes`` (first = major),
        which is the position of the rank's block in the gathered dimension.
        """
        fm = self.fm
        rest = [f for f in range(len(fm.axes)) if f not in axes]
        g = fm.radix(rest)[self.loc]
        m = fm.radix(axes)[self.loc]
        return g, m

    def is_identity(self) -> bool:
        return bool(np.array_equal(self.loc, np.arange(len(self.loc))))

    def __repr__(self) -> str:
        lay = self.fm.layout_names(self.spec)
        tag = "" if self.is_identity() else " (relabelled)"
        return f"Assignment(tile={list(self.tile)}, layout={list(lay)}{tag})"
