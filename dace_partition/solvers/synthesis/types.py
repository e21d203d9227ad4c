"""Distributed array types: meshes, layouts and the paper's notation.

A *mesh* is an ordered mapping ``axis name -> size``.  Device ids are row-major
over the axes in that order, i.e. the last axis varies fastest.  This is the
assignment used by ``jax.sharding.Mesh`` (devices reshaped to the mesh shape)
and by ``MPI_Cart_create`` without reordering, so a plan's rank numbering can
be used directly with either.

A *layout* lists, per array dimension, the mesh axes that partition it,
major-to-minor exactly as in ``jax.sharding.PartitionSpec``: the first axis
picks the coarsest block.  The paper (Rink et al., "Memory-efficient array
redistribution through portable collective communication") writes the same
information minor-to-major inside braces, ``[8{"x","y"}32, 16]`` meaning that
dimension 0 (global size 32, tile 8) is split over ``y`` first and then ``x``,
i.e. ``PartitionSpec(("y", "x"), None)``.  :func:`parse_type` and
:func:`format_type` convert between the two.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union


class Collective(str, Enum):
    """What one step of a redistribution does (the paper's four collectives)."""
    DYNSLICE = "dynslice"  # keep one chunk of the local tile: no communication
    ALLTOALL = "alltoall"  # mesh axes move from one array dimension to another
    ALLGATHER = "allgather"  # a dimension stops being split along some mesh axes
    ALLPERMUTE = "allpermute"  # tiles change owner, each whole

    def __str__(self):
        return self.value


Layout = Tuple[Tuple[str, ...], ...]
LayoutLike = Union[str, Sequence[Union[None, str, Sequence[str]]]]


def prime_factors(n: int) -> List[int]:
    """Prime factors of ``n`` in non-decreasing order (empty for 1)."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


class Mesh:
    """An ordered device mesh ``{axis: size}`` with row-major device ids."""

    def __init__(self, axes: Union["Mesh", Mapping[str, int], Iterable[Tuple[str, int]]]):
        if isinstance(axes, Mesh):
            items = list(axes.axes.items())
        elif isinstance(axes, Mapping):
            items = list(axes.items())
        else:
            items = list(axes)
        if not items:
            raise ValueError("mesh must have at least one axis")
        seen = set()
        for name, size in items:
            if not isinstance(name, str) or not name:
                raise ValueError(f"mesh axis names must be non-empty strings, got {name!r}")
            if name in seen:
                raise ValueError(f"mesh axis {name!r} appears twice")
            seen.add(name)
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"mesh axis {name!r} must have a positive integer size, got {size!r}")
        self.axes: Dict[str, int] = dict(items)

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(self.axes)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.axes.values())

    @property
    def size(self) -> int:
        n = 1
        for s in self.axes.values():
            n *= s
        return n

    def __getitem__(self, name: str) -> int:
        return self.axes[name]

    def __eq__(self, other) -> bool:
        return isinstance(other, Mesh) and list(self.axes.items()) == list(other.axes.items())

    def __hash__(self) -> int:
        return hash(tuple(self.axes.items()))

    def __repr__(self) -> str:
        return "Mesh({" + ", ".join(f"{k!r}: {v}" for k, v in self.axes.items()) + "})"


def normalize_layout(layout: Sequence, mesh: Mesh, shape: Sequence[int], what: str = "layout") -> Layout:
    """Validate a PartitionSpec-like layout against ``mesh`` and ``shape``.

    Accepts ``None``/``()`` for a replicated dimension, a single axis name or a
    sequence of names.  Raises ``ValueError`` naming the problem: wrong number
    of entries, unknown axis, an axis used twice, or a dimension not divisible
    by the product of its axes.
    """
    if isinstance(layout, str):
        raise ValueError(f"{what}: expected one entry per dimension, got the string {layout!r}")
    entries = list(layout)
    if len(entries) != len(shape):
        raise ValueError(f"{what} has {len(entries)} entries but the array has rank {len(shape)}")
    out: List[Tuple[str, ...]] = []
    used: Dict[str, int] = {}
    for dim, entry in enumerate(entries):
        if entry is None:
            axes: Tuple[str, ...] = ()
        elif isinstance(entry, str):
            axes = (entry,)
        else:
            axes = tuple(entry)
        prod = 1
        for ax in axes:
            if ax not in mesh.axes:
                raise ValueError(f"{what}: unknown mesh axis {ax!r} in dimension {dim} (mesh axes: {list(mesh.names)})")
            if ax in used:
                raise ValueError(f"{what}: mesh axis {ax!r} is used twice (dimensions {used[ax]} and {dim})")
            used[ax] = dim
            prod *= mesh[ax]
        if shape[dim] % prod:
            raise ValueError(
                f"{what}: dimension {dim} of size {shape[dim]} is not divisible by the "
                f"{prod} tiles of axes {axes}")
        out.append(axes)
    return tuple(out)


def normalize_shape(shape: Sequence[int]) -> Tuple[int, ...]:
    shape = tuple(shape)
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"array shape must be positive integers, got {shape}")
    return shape


def local_shape(shape: Sequence[int], layout: Layout, mesh: Mesh) -> Tuple[int, ...]:
    """Per-device tile shape of an array with ``layout``."""
    out = []
    for s, axes in zip(shape, layout):
        for ax in axes:
            s //= mesh[ax]
        out.append(s)
    return tuple(out)


_DIM_RE = re.compile(r"^\s*(\d+)\s*(?:\{([^}]*)\}\s*(\d+))?\s*$")


def parse_type(text: str, mesh: Optional[Mapping[str, int]] = None) -> Tuple[Tuple[int, ...], Layout]:
    """Parse the paper's notation into ``(global shape, layout)``.

    ``[8{"x","y"}32, 16]`` gives ``((32, 16), (("y", "x"), ()))``: inside the
    braces axes are minor-to-major, the layout is major-to-minor.  Axis names
    may be quoted or bare and may carry a size (``{c:2}``), which is checked
    against ``mesh`` when given.  If ``mesh`` is given the result is validated.
    """
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ValueError(f"distributed type must be written [d0, d1, ...], got {text!r}")
    body = body[1:-1]
    parts = _split_top(body)
    shape: List[int] = []
    layout: List[Tuple[str, ...]] = []
    for part in parts:
        m = _DIM_RE.match(part)
        if not m:
            raise ValueError(f"cannot parse dimension {part!r} in {text!r}")
        tile = int(m.group(1))
        if m.group(2) is None:
            shape.append(tile)
            layout.append(())
            continue
        axes_minor_to_major = []
        for tok in filter(None, (t.strip() for t in m.group(2).split(","))):
            name, _, size = tok.partition(":")
            name = name.strip().strip("\"'")
            if size.strip():
                if mesh is not None and name in mesh and int(size) != mesh[name]:
                    raise ValueError(f"axis {name!r} has size {mesh[name]} in the mesh but {size.strip()} in {text!r}")
            axes_minor_to_major.append(name)
        glob = int(m.group(3))
        axes = tuple(reversed(axes_minor_to_major))
        if mesh is not None:
            mesh_ = Mesh(mesh)
            prod = 1
            for ax in axes:
                if ax not in mesh_.axes:
                    raise ValueError(f"unknown mesh axis {ax!r} in {text!r}")
                prod *= mesh_[ax]
            if tile * prod != glob:
                raise ValueError(f"dimension {part.strip()!r}: tile {tile} times {prod} tiles is not {glob}")
        shape.append(glob)
        layout.append(axes)
    shape_t, layout_t = tuple(shape), tuple(layout)
    if mesh is not None:
        normalize_layout(layout_t, Mesh(mesh), shape_t, what=text)
    return shape_t, layout_t


def _split_top(body: str) -> List[str]:
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur)
    if tail.strip() or parts:
        parts.append(tail)
    return [p for p in parts] if any(p.strip() for p in parts) else []


def format_type(shape: Sequence[int], layout: Sequence[Sequence[str]], mesh: Mapping[str, int]) -> str:
    """Print ``(shape, layout)`` in the paper's notation (axes minor-to-major in braces)."""
    mesh_ = Mesh(mesh)
    dims = []
    for s, axes in zip(shape, layout):
        axes = tuple(axes)
        if not axes:
            dims.append(str(s))
            continue
        tile = s
        for ax in axes:
            tile //= mesh_[ax]
        inner = ",".join(f'"{ax}"' for ax in reversed(axes))
        dims.append(f"{tile}{{{inner}}}{s}")
    return "[" + ", ".join(dims) + "]"
