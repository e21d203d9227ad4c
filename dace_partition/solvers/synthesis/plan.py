"""Plan and step value types.

A :class:`Step` is fully concrete: besides what it means (op, array dims,
mesh axes) it carries the per-rank data an executor needs (which
communicator group and position each rank has, which chunk a dynslice keeps,
where a permutation sends each tile) and the placement that must hold after
it, so the simulator can check every intermediate tile.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .factor_mesh import Assignment
from .types import Collective, Layout, Mesh, format_type

OPS = tuple(Collective)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


@dataclass(eq=False)
class Step:
    """One collective.

    ``dims`` is ``(dim,)`` for dynslice/allgather, ``(src_dim, dst_dim)`` for
    alltoall (the mesh axes leave ``src_dim`` and start partitioning
    ``dst_dim``) and ``()`` for allpermute.  A fused alltoall that moves axes
    between several disjoint pairs of dimensions in one collective lists the
    pairs one after the other, ``(src0, dst0, src1, dst1, ...)``, with
    ``moves`` giving ``(src, dst, group size)`` per pair.  ``axes`` are the mesh axes the
    step acts on, major-to-minor; factors of a split axis print as ``a.0``.

    Two traffic figures: ``cost`` is the paper's Fig. 11 model (a permutation
    charges every device a full tile), ``sent`` what the step really moves,
    averaged over the devices.  They differ only for ``allpermute``, where
    devices whose tile does not change owner send nothing (Appendix B's
    derivation with only the moving devices counted); :attr:`bytes` and
    :attr:`Plan.bytes_per_device` use ``sent``.
    """
    op: Collective
    dims: Tuple[int, ...]
    axes: Tuple[str, ...]
    tile_in: Tuple[int, ...]
    tile_out: Tuple[int, ...]
    cost: int                      # elements sent per device (Fig. 11)
    itemsize: int
    after: Assignment = field(repr=False)
    factor_axes: Tuple[int, ...] = field(default=(), repr=False)
    group_of: Optional[np.ndarray] = field(default=None, repr=False)
    member_of: Optional[np.ndarray] = field(default=None, repr=False)
    chunk_of: Optional[np.ndarray] = field(default=None, repr=False)
    src_of: Optional[np.ndarray] = field(default=None, repr=False)
    dst_of: Optional[np.ndarray] = field(default=None, repr=False)
    moves: Tuple[Tuple[int, int, int], ...] = field(default=(), repr=False)  # alltoall: (src_dim, dst_dim, n)
    cartesian: bool = True         # groups are plain sub-meshes (Cart_sub would do)
    sent: Optional[int] = None     # elements sent, averaged over devices; None: equal to cost

    @property
    def n(self) -> int:
        """Group size of the collective (number of chunks for dynslice)."""
        if self.member_of is not None:
            return int(self.member_of.max()) + 1
        if self.chunk_of is not None:
            return int(self.chunk_of.max()) + 1
        return 1

    @property
    def sent_elements(self) -> int:
        """Elements sent per device on average (``cost`` except for a partial permutation)."""
        return self.cost if self.sent is None else self.sent

    @property
    def movers(self) -> int:
        """Devices that send data in this step (all of them except in a partial permutation)."""
        if self.op == Collective.DYNSLICE:
            return 0
        if self.op == Collective.ALLPERMUTE:
            return int(np.count_nonzero(self.src_of != np.arange(len(self.src_of))))
        return len(self.group_of)

    @property
    def bytes(self) -> int:
        """Bytes sent per device on average (the permutation counts only devices whose tile changes owner)."""
        return self.sent_elements * self.itemsize

    def __str__(self) -> str:
        if self.op == Collective.ALLTOALL:
            where = ", ".join(f"dim {self.dims[k]} -> dim {self.dims[k + 1]}" for k in range(0, len(self.dims), 2))
        elif self.op == Collective.ALLPERMUTE:
            where = "all dims"
        else:
            where = f"dim {self.dims[0]}"
        axes = "(" + ", ".join(self.axes) + ")" if self.op != Collective.ALLPERMUTE else "-"
        note = "" if self.cartesian else "  [device-map relabelled]"
        if self.op == Collective.ALLPERMUTE:
            note += f"  [{self.movers} of {len(self.src_of)} devices move]"
        return (f"{self.op:<10} {where:<15} axes {axes:<12} tile {list(self.tile_in)} -> {list(self.tile_out)}"
                f"  sends {_fmt_bytes(self.bytes)}/device{note}")

    def __repr__(self) -> str:
        return f"Step({self.op!r}, dims={self.dims}, axes={self.axes}, cost={self.cost})"


@dataclass(eq=False)
class Plan:
    """A synthesized redistribution: ``steps`` turn ``src`` tiles into ``dst`` tiles."""
    mesh: Mesh
    shape: Tuple[int, ...]
    src: Layout
    dst: Layout
    itemsize: int
    steps: List[Step]
    initial: Assignment = field(repr=False)
    memory_bound: int = 0          # elements: max(src tile, dst tile)

    @property
    def bytes_per_device(self) -> int:
        """Bytes sent per device over the whole plan: Fig. 11 x itemsize, except that the
        permutation counts only the devices whose tile changes owner (averaged over devices)."""
        return sum(s.bytes for s in self.steps)

    @property
    def cost(self) -> int:
        """Elements per device under the paper's Fig. 11 model (every permutation a full tile)."""
        return sum(s.cost for s in self.steps)

    @property
    def sent_elements(self) -> int:
        """Elements sent per device on average (``bytes_per_device / itemsize``)."""
        return sum(s.sent_elements for s in self.steps)

    @property
    def peak_elements(self) -> int:
        sizes = [self.initial.localsize] + [int(np.prod(s.tile_out)) for s in self.steps]
        return max(sizes)

    @property
    def peak_bytes(self) -> int:
        """Largest per-device tile held at any point of the plan, in bytes."""
        return self.peak_elements * self.itemsize

    @property
    def memory_bound_bytes(self) -> int:
        return self.memory_bound * self.itemsize

    @property
    def ops(self) -> List[str]:
        return [s.op for s in self.steps]

    def simulate(self, global_array: np.ndarray, check: bool = True) -> List[np.ndarray]:
        """Run the plan on NumPy tiles of ``global_array``; return each rank's final tile."""
        from .simulate import simulate
        return simulate(self, global_array, check=check)

    def execute(self, comm, local_tile: np.ndarray) -> np.ndarray:
        """Run the plan with MPI on ``comm`` (size = mesh size, ranks row-major); return the new tile."""
        from .mpi_exec import execute
        return execute(self, comm, local_tile)

    def src_tiles(self, global_array: np.ndarray) -> List[np.ndarray]:
        from .simulate import tiles_of
        return tiles_of(self.initial, global_array)

    def describe(self) -> str:
        return (f"{format_type(self.shape, self.src, self.mesh.axes)} -> "
                f"{format_type(self.shape, self.dst, self.mesh.axes)} on {self.mesh}")

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.steps) if self.steps else "(no communication)"

    def __repr__(self) -> str:
        return (f"Plan({self.describe()}, {len(self.steps)} steps, "
                f"{self.bytes_per_device} B/device, peak {self.peak_bytes} B)")
