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
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import dace
import sympy
from dace import data as dt
from dace import subsets
from dace.codegen.targets.cpp import sym2cpp

from ..errors import UnsupportedPattern
from .base import CommSpec, Solver

_OP_CODES = {None: 0, "sum": 1, "prod": 2, "min": 3, "max": 4}
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
        width = sympy.simplify(e - b + 1)
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
        offset = sympy.simplify(begin - coef * x)
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
            calls.append(f"MPI_Reduce({_MPI_OPS[op]}, grid dims {repl})")
        calls.append(f"MPI_Gatherv(grid dims {part})" if part else "copy on rank 0")
    return calls


class GridMappedSolver(Solver):
    """Equal disjoint blocks per grid dimension: at most two MPI calls (see the module docstring)."""
    name = "grid_mapped"

    def refuse(self, spec: CommSpec) -> Optional[str]:
        try:
            match(spec.array, spec.subset, spec.grid, spec.coords)
        except UnsupportedPattern as e:
            return e.reason
        return None

    def calls(self, spec: CommSpec) -> List[str]:
        mapping = match(spec.array, spec.subset, spec.grid, spec.coords)
        op = spec.op if (spec.direction == "gather" or spec.accumulates) else None
        return mpi_calls(mapping, spec.direction, op)

    def bytes_moved(self, spec: CommSpec) -> Optional[int]:
        if spec.direction == "scatter":
            # Bcast delivers every replica a copy; an accumulated output reaches only the first replica.
            return spec.bytes_moved(distinct=spec.accumulates)
        # Reduce: every replica sends; an un-conflicted write is sent by the first replica only.
        return spec.bytes_moved(distinct=spec.op is None)

    def emit(self, spec: CommSpec, node, gdesc, ldesc) -> str:
        mapping = match(spec.array, spec.subset, spec.grid, spec.coords)
        ctype = gdesc.dtype.ctype
        dims = []
        for dm, stride in zip(mapping.dims, gdesc.strides):
            dims.append("{%s, %d, %d, %s, %s}" % (sym2cpp(dm.offset), dm.coef, dm.grid_dim, sym2cpp(dm.block),
                                                  sym2cpp(stride)))
        dimlist = "std::vector<dace_partition::DimMap>{%s}" % ", ".join(dims)
        op = _OP_CODES[spec.op]
        if spec.direction == "scatter":
            return (f"dace_partition::scatter<{ctype}>({node.grid_id}, _in, _out, {dimlist}, "
                    f"{1 if spec.accumulates else 0}, {op});")
        return f"dace_partition::gather<{ctype}>({node.grid_id}, _in, _out, {dimlist}, {op});"

    def emit_redistribute(self, node, src_desc, dst_desc) -> str:
        """Partial sums into the same blocks on the same ranks: ``MPI_Allreduce`` on the reduction sub-grid."""
        if not node.reduce_dims or node.op is None:
            raise ValueError(f"grid_mapped redistributes only partial results into equal blocks ({node})")
        keep = sum(1 << d for d in node.reduce_dims)
        count = " * ".join(f"(long long)({sym2cpp(s)})" for s in dst_desc.shape) or "1"
        return (f'dace_partition::allreduce<{dst_desc.dtype.ctype}>("{node.array}", {node.src_grid_id}, {keep}u, '
                f"_in, _out, {count}, {_OP_CODES[node.op]});")
