"""Grid-to-grid redistribution of block layouts through the collective-sequence synthesizer.

When fusion connects two kernels whose blocks of an intermediate are *block layouts* (every array
dimension either whole or split evenly by one grid dimension, on grids with the same number of ranks),
the move is a redistribution between two shardings of one device mesh, which is exactly what the
synthesizer solves with a memory-bounded sequence of allgather / alltoall / dynslice / permute steps
(000_*.txt). The mesh is the common refinement of the two grids (row-major rank order on both), e.g.
(2, 2, 1) and (4, 1, 1) share the mesh {m0: 2, m1: 2}: grid dimension 0 of the second grid is the
axes (m0, m1), major to minor.

Everything else (uneven or overlapping blocks, partial results, grids of different sizes) stays with
the general ``blocks`` redistribution. The generated code also falls back to it at run time when the
job has more ranks than the mesh, since the synthesized plan runs on MPI_COMM_WORLD.
"""
import functools
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..errors import UnsupportedPattern
from ..ir import Cost, Distribution, Move, MoveKind
from .base import Solver
from .blocks import BlockSolver
from .grid_mapped import match_distribution
from .synthesis import synthesize
from .synthesis.sdfg_node import DacePartitionRedistribute, emit
from .synthesis.types import Collective


def common_mesh(a: Sequence[int], b: Sequence[int]) -> Optional[List[Tuple[str, int, List[int], List[int]]]]:
    """Mesh axes refining two row-major grids of equal size: ``(name, size, dims_a, dims_b)`` per axis,
    where ``dims_x`` is the one grid dimension of x the axis belongs to; None if no refinement exists."""
    def cuts(g):
        out, p = {}, 1
        for d, n in enumerate(g):
            if n > 1:
                p *= n
                out[p] = d
        return out

    ca, cb = cuts(a), cuts(b)
    points = sorted(set(ca) | set(cb))
    if not points or points[-1] != max(ca or [1]) or max(ca or [1]) != max(cb or [1]):
        return None
    axes, prev = [], 1
    for p in points:
        if p % prev:
            return None
        da = next(ca[q] for q in sorted(ca) if q >= p)
        db = next(cb[q] for q in sorted(cb) if q >= p)
        axes.append((f"m{len(axes)}", p // prev, da, db))
        prev = p
    return axes


def _layout(dist: Distribution, shape, axes, side: int) -> Optional[List[List[str]]]:
    """Per array dimension the mesh axes splitting it, or None if the blocks are not a block layout."""
    grid = dist.grid
    try:
        mapping = match_distribution("", dist)
    except UnsupportedPattern:
        return None
    out = []
    for dm, extent in zip(mapping.dims, shape):
        try:
            offset, block, extent = int(dm.offset), int(dm.block), int(extent)
        except TypeError:
            return None
        if offset != 0:
            return None
        if dm.grid_dim < 0:
            if block != extent:
                return None
            out.append([])
            continue
        if block * grid[dm.grid_dim] != extent:
            return None
        out.append([name for name, _, *dims in axes if dims[side] == dm.grid_dim])
    return out


@dataclass(frozen=True)
class Problem:
    """A redistribution between block layouts of one mesh, in the synthesizer's terms: mesh axes (name,
    size), the global shape, and per array dimension the mesh axes that split it on each side."""
    mesh: Tuple[Tuple[str, int], ...]
    shape: Tuple[int, ...]
    src: Tuple[Tuple[str, ...], ...]
    dst: Tuple[Tuple[str, ...], ...]
    itemsize: int


def block_layouts(move: Move) -> Optional[Problem]:
    """The synthesizer problem for a grid-to-grid move (blocks of one array on two grids), or None when it is
    not a redistribution between block layouts of one mesh."""
    return _problem(move.src.combined(), move.dst.combined(), tuple(move.shape), move.itemsize)


@functools.lru_cache(maxsize=1024)
def _problem(src: Distribution, dst: Distribution, shape, itemsize) -> Optional[Problem]:
    axes = common_mesh(src.grid, dst.grid)
    if axes is None:
        return None
    a = _layout(src, shape, axes, 0)
    b = _layout(dst, shape, axes, 1)
    if a is None or b is None:
        return None
    return Problem(tuple((n, s) for n, s, _, _ in axes), tuple(int(x) for x in shape), tuple(map(tuple, a)),
                   tuple(map(tuple, b)), itemsize)


@functools.lru_cache(maxsize=256)
def plan_of(problem: Problem):
    """The synthesized plan of a problem, computed once per distinct problem."""
    return synthesize(dict(problem.mesh), list(problem.shape), list(problem.src), list(problem.dst),
                      itemsize=problem.itemsize)


def received_per_rank(plan) -> List[int]:
    """Bytes each rank receives from other ranks over the plan's collectives."""
    n = plan.mesh.size
    out = [0] * n
    for s in plan.steps:
        tile = 1
        for t in s.tile_in:
            tile *= t
        for r in range(n):
            if s.op == Collective.ALLGATHER:
                out[r] += (s.n - 1) * tile * s.itemsize
            elif s.op == Collective.ALLTOALL:
                out[r] += (s.n - 1) * (tile // s.n) * s.itemsize
            elif s.op == Collective.ALLPERMUTE and int(s.src_of[r]) != r:
                out[r] += tile * s.itemsize
    return out


class SynthesizedSolver(Solver):
    """Grid-to-grid redistributions of final values between block layouts of one mesh."""
    name = "synthesized"
    kinds = frozenset({MoveKind.REDISTRIBUTE})
    environments = [DacePartitionRedistribute]

    def refuse(self, move: Move) -> Optional[str]:
        why = super().refuse(move)
        if why:
            return why
        if move.src.partial:
            return "the source holds partial results (the synthesizer moves final values)"
        if block_layouts(move) is None:
            return "the two sides are not block layouts (whole or evenly split dimensions) of one mesh"
        return None

    def cost(self, move: Move) -> Cost:
        plan = plan_of(block_layouts(move))
        calls = tuple(f"{st.op}(axes {','.join(st.axes) or '-'})" for st in plan.steps) or ("local copy", )
        got = received_per_rank(plan)
        per = tuple(got) + (0, ) * (move.world - len(got))
        msgs = 0
        for st in plan.steps:
            if st.op in (Collective.ALLGATHER, Collective.ALLTOALL):
                msgs += (st.n - 1) * plan.mesh.size
            elif st.op == Collective.ALLPERMUTE:
                msgs += sum(1 for r in range(plan.mesh.size) if int(st.src_of[r]) != r)
        return Cost(per, msgs, calls)

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        plan = plan_of(block_layouts(move))
        n = plan.mesh.size
        fallback = BlockSolver().emit(move, src_desc, dst_desc)
        return (f"if (dace_partition::world_size() == {n}) {{  // synthesized plan on the {n}-rank mesh\n"
                f"{emit(plan)}\n}} else {{\n{fallback}\n}}")
