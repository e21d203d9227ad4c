"""The grid-mapped array solver (thesis ch. 5).

Each dimension of a constraint is matched to one of:

* PARTITION by grid dimension d: the rank at coordinate c holds ``[o + k*c, o + k*c + w)`` with
  ``|k| == w`` (equal, disjoint blocks; an offset ``o`` such as ``x[i+1]`` is allowed);
* a fixed range, the same on every rank (REPLICATE for a whole axis).

Grid dimensions that partition nothing replicate the data (BROADCAST). Such a constraint is implemented
with at most two MPI calls: ``MPI_Scatterv`` with a per-rank block datatype over the partition sub-grid
plus ``MPI_Bcast`` over the replication sub-grid (or, for writes, ``MPI_Reduce`` with the write-conflict
operator over the replication sub-grid plus ``MPI_Gatherv``).
"""
import functools
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import dace
import sympy
from dace import subsets
from dace.codegen.targets.cpp import sym2cpp

from ..errors import UnsupportedPattern
from ..ir import Cost, Distribution, Move, MoveKind, op_code
from .base import Solver, received, scatter_gather_sizes
_MPI_OPS = {"sum": "MPI_SUM", "prod": "MPI_PROD", "min": "MPI_MIN", "max": "MPI_MAX"}


@dataclass(frozen=True)
class DimMapping:
    """Array dimension -> grid: indices ``offset + coef*coord[grid_dim] + [0, block)``."""
    offset: object
    coef: int
    grid_dim: int  # -1: not partitioned
    block: object

    def __str__(self):
        return f"PARTITION:{self.grid_dim}" if self.grid_dim >= 0 else "REPLICATE"


@dataclass(frozen=True)
class GridMapping:
    grid: Tuple[int, ...]
    dims: Tuple[DimMapping, ...]

    @property
    def partition_dims(self) -> Tuple[int, ...]:
        return tuple(sorted(d.grid_dim for d in self.dims if d.grid_dim >= 0))

    @property
    def replicate_dims(self) -> Tuple[int, ...]:
        return tuple(d for d in range(len(self.grid)) if d not in self.partition_dims)

    @property
    def local_shape(self):
        return [d.block for d in self.dims]

    def replicas(self) -> int:
        n = 1
        for d in self.replicate_dims:
            n *= self.grid[d]
        return n

    def __str__(self):
        axes = ", ".join(str(d) for d in self.dims)
        bcast = [d for d in self.replicate_dims if self.grid[d] > 1]
        return f"[{axes}]" + (f", BROADCAST over grid dims {tuple(bcast)}" if bcast else "")


def match(array: str, subset: subsets.Range, grid: Sequence[int], coords: Sequence[Optional[str]]) -> GridMapping:
    """Matches a symbolic constraint to a grid mapping, or raises :class:`UnsupportedPattern` saying why."""
    syms = {dace.symbolic.symbol(c, dace.int32): d for d, c in enumerate(coords) if c}
    used = {}
    dims = []
    for j, (b, e, s) in enumerate(subset):
        if s != 1:
            raise UnsupportedPattern(array, subset, f"dimension {j} is strided (step {s}); the grid-mapped solver "
                                     "needs contiguous blocks")
        width = sympy.expand(e - b + 1)
        if not width.is_number:
            width = sympy.simplify(width)
        if width.free_symbols & set(syms):
            raise UnsupportedPattern(array, subset, f"the block size of dimension {j} depends on the grid "
                                     "coordinate")
        begin = sympy.expand(b)
        dep = [x for x in syms if begin.has(x)]
        if len(dep) > 1:
            raise UnsupportedPattern(array, subset, f"dimension {j} depends on several grid coordinates "
                                     f"{[str(x) for x in dep]}")
        if not dep:
            dims.append(DimMapping(begin, 0, -1, width))
            continue
        x = dep[0]
        coef = sympy.diff(begin, x)
        if coef.free_symbols:
            raise UnsupportedPattern(array, subset, f"dimension {j} is not affine in the grid coordinate {x}")
        offset = sympy.expand(begin - coef * x)
        if not offset.is_number:
            offset = sympy.simplify(offset)
        if abs(coef) != width:
            kind = "overlapping blocks (a halo)" if abs(coef) < width else "blocks with gaps"
            raise UnsupportedPattern(array, subset, f"dimension {j} asks for {kind}: block {width}, step between "
                                     f"ranks {coef}; the grid-mapped solver needs equal, disjoint blocks")
        d = syms[x]
        if d in used:
            raise UnsupportedPattern(array, subset, f"dimensions {used[d]} and {j} are both split by grid "
                                     f"dimension {d} (a diagonal access)")
        used[d] = j
        dims.append(DimMapping(offset, int(coef), d, width))
    return GridMapping(tuple(grid), tuple(dims))


def mpi_calls(mapping: GridMapping, direction: str, op: Optional[str]) -> List[str]:
    """The MPI calls this mapping lowers to, for reports."""
    part = tuple(d for d in mapping.partition_dims if mapping.grid[d] > 1)
    repl = tuple(d for d in mapping.replicate_dims if mapping.grid[d] > 1)
    calls = []
    if direction == "scatter":
        calls.append(f"MPI_Scatterv(grid dims {part})" if part else "copy on rank 0")
        if repl:
            calls.append(f"MPI_Bcast(grid dims {repl})" if op is None else "identity fill on replicas")
    else:
        if repl and op is not None:
            calls.append(f"MPI_Reduce({_MPI_OPS[str(op)]}, grid dims {repl})")
        calls.append(f"MPI_Gatherv(grid dims {part})" if part else "copy on rank 0")
    return calls


def match_distribution(array: str, dist: Distribution) -> GridMapping:
    """:func:`match` of a grid distribution, once per distinct block pattern: the mapping does not depend
    on the names of the grid coordinates (each kernel has its own), so it is computed once for all
    distributions that differ only in them (many kernels of one shape, the schedule search's candidates)."""
    mapping = _match_canonical(dist.grid, *_canonical(dist))
    if isinstance(mapping, str):
        raise UnsupportedPattern(array, dist.range, mapping)
    return mapping


def _canonical(dist: Distribution):
    """The distribution's subset and coordinates with coordinate d named ``__dpc<d>``."""
    names = {c: f"__dpc{d}" for d, c in enumerate(dist.coords) if c}
    if not names:
        return dist.subset, dist.coords
    repl = {}
    for b, e, _ in dist.subset:
        for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols:
            if str(f) in names:
                repl[f] = dace.symbolic.symbol(names[str(f)], dace.int32)
    subset = tuple(tuple(sympy.sympify(x).xreplace(repl) for x in r) for r in dist.subset)
    return subset, tuple(names.get(c) for c in dist.coords)


@functools.lru_cache(maxsize=4096)
def _match_canonical(grid, subset, coords):
    """The mapping, or the reason no mapping exists (a string)."""
    try:
        return match("", subsets.Range(list(subset)), grid, coords)
    except UnsupportedPattern as e:
        return e.reason


class GridMappedSolver(Solver):
    """Equal disjoint blocks per grid dimension: at most two MPI calls (see the module docstring)."""
    name = "grid_mapped"
    kinds = frozenset({MoveKind.SCATTER, MoveKind.GATHER})

    def refuse(self, move: Move) -> Optional[str]:
        why = super().refuse(move)
        if why:
            return why
        try:
            match_distribution(move.array, move.grid_side)
        except UnsupportedPattern as e:
            return e.reason
        return None

    def cost(self, move: Move) -> Cost:
        mapping = match_distribution(move.array, move.grid_side)
        scatter = move.kind == MoveKind.SCATTER
        calls = tuple(mpi_calls(mapping, "scatter" if scatter else "gather", move.op))
        blocks, sizes, first = scatter_gather_sizes(move)
        if blocks is None:
            return Cost(None, None, calls)
        g, world = move.grid_side, move.world
        per = [0] * world
        if scatter:  # Scatterv to the first replicas, Bcast to the others (an accumulated output: first only)
            for w in range(1, g.size):
                if not (move.accumulates and not first[w]):
                    per[w] = sizes[w]
        else:  # Reduce over the replicas (partial results), Gatherv of the first replicas' blocks
            if move.op is not None and g.replicas > 1:
                for w in range(g.size):
                    if first[w]:
                        per[w] += (g.replicas - 1) * sizes[w]
            per[0] += sum(sizes[w] for w in range(1, g.size) if first[w])
        msgs = received(per) if scatter else sum(1 for w in range(1, g.size) if first[w] and sizes[w]) + (
            (g.replicas - 1) * sum(first) if move.op is not None and g.replicas > 1 else 0)
        return Cost(tuple(per), msgs, calls)

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        scatter = move.kind == MoveKind.SCATTER
        g = move.grid_side
        gdesc = src_desc if scatter else dst_desc
        mapping = match_distribution(move.array, g)
        ctype = gdesc.dtype.ctype
        dims = []
        for dm, stride in zip(mapping.dims, gdesc.strides):
            dims.append("{%s, %d, %d, %s, %s}" % (sym2cpp(dm.offset), dm.coef, dm.grid_dim, sym2cpp(dm.block),
                                                  sym2cpp(stride)))
        dimlist = "std::vector<dace_partition::DimMap>{%s}" % ", ".join(dims)
        op = op_code(move.op)
        if scatter:
            return (f"dace_partition::scatter<{ctype}>({g.grid_id}, _in, _out, {dimlist}, "
                    f"{1 if move.accumulates else 0}, {op});")
        return f"dace_partition::gather<{ctype}>({g.grid_id}, _in, _out, {dimlist}, {op});"
