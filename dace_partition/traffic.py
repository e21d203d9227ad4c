"""Bytes moved by each remaining DistributedMemlet, per rank, next to the minimum the schedule needs.

The unit is the same one the PMPI counter (``mpi_count.py``) measures: the bytes a rank *receives from
other ranks* as the MPI calls' arguments describe them (a root's own part and a copy on one rank count
nothing; an allreduce counts its bandwidth lower bound, 2(p-1)/p of the buffer per rank). So a test can
put the report next to what the program really passed to MPI.

*Minimum*: what each rank must receive whatever the algorithm, given the schedule's blocks: the part of
its block that it does not already hold (redistributions), its block (scatters from rank 0), the other
ranks' distinct blocks (gathers to rank 0), the partial results it has to combine (reductions, counted
at the allreduce lower bound for allreduces).
"""
import json
from dataclasses import dataclass
from typing import List, Optional, Tuple

import sympy

from .fusion import _replicas, _world_blocks
from .schedule import grid_size


def _size(count) -> int:
    n = 1
    for c in count:
        n *= c
    return n


def _inter(a, b) -> int:
    n = 1
    for s1, c1, s2, c2 in zip(a[0], a[1], b[0], b[1]):
        n *= max(0, min(s1 + c1, s2 + c2) - max(s1, s2))
    return n


@dataclass
class Traffic:
    """One DistributedMemlet of the lowered program (``str`` is a table row)."""
    array: str
    source: str  # "rank 0" or "grid (..)"
    destination: str
    solver: str
    calls: List[str]
    per_rank: Optional[List[int]] = None  # bytes received by each world rank; None: only known at run time
    minimum: Optional[List[int]] = None

    @property
    def total(self) -> Optional[int]:
        return None if self.per_rank is None else sum(self.per_rank)

    @property
    def minimum_total(self) -> Optional[int]:
        return None if self.minimum is None else sum(self.minimum)

    def __str__(self):
        if self.per_rank is None:
            size = "bytes known at run time"
        else:
            size = f"{self.total} B total, max {max(self.per_rank)} B/rank, minimum {self.minimum_total} B"
        return f"    {self.array}: {self.source} -> {self.destination}: {self.solver}: {' + '.join(self.calls)}; {size}"


def _grid(g) -> str:
    return f"grid {tuple(g)}"


def _world(blocks, world):
    return blocks + [((), ())] * (world - len(blocks)) if blocks is not None else None


def _blocks(dm, subset, grid, coords, world):
    return _world_blocks(dm, subset, grid, coords, world)


def scatter_gather(dm, solver, itemsize: int, world: int) -> Tuple[Optional[List[int]], Optional[List[int]]]:
    blocks = _blocks(dm, dm.subset, dm.grid, dm.coords, world)
    if blocks is None:
        return None, None
    n = grid_size(dm.grid)
    sizes = [_size(c) * itemsize if w < n else 0 for w, (_, c) in enumerate(blocks)]
    replicas = _replicas(dm)
    per, low = [0] * world, [0] * world
    if dm.direction == "scatter":
        first = _first_replicas(dm, world)
        for w in range(1, n):
            if dm.identity_fill and not first[w]:
                continue  # accumulated output: replicas start from the identity, nothing received
            if dm.identity_fill and solver == "blocks" and dm_may_overlap(blocks[:n]):
                continue  # identity fill on every rank, the prior value stays on rank 0
            per[w] = low[w] = sizes[w]
        return per, low
    # gather
    first = _first_replicas(dm, world)
    distinct = {blocks[0]}
    for w in range(1, n):
        if first[w] and blocks[w] not in distinct:
            low[0] += sizes[w]
            distinct.add(blocks[w])
    if solver == "grid_mapped":
        if dm.op is not None and replicas > 1:
            for w in range(n):
                if first[w]:
                    per[w] += (replicas - 1) * sizes[w]
                    low[w] += (replicas - 1) * sizes[w]
        per[0] += sum(sizes[w] for w in range(1, n) if first[w])
    else:
        per[0] += sum(sizes[1:n])
        if dm.op is not None and replicas > 1:
            low[0] += sum(sizes[w] for w in range(1, n) if not first[w])
    return per, low


def dm_may_overlap(blocks) -> bool:
    boxes = [b for b in blocks if _size(b[1]) > 0]
    return any(_inter(boxes[i], boxes[j]) for i in range(len(boxes)) for j in range(i))


def _first_replicas(dm, world) -> List[bool]:
    """Whether each world rank is the first of its replicas (coordinate 0 along unused grid dims)."""
    used = {str(f) for b, e, _ in dm.subset for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols}
    out = []
    for w in range(world):
        if w >= grid_size(dm.grid):
            out.append(False)
            continue
        rest, ok = w, True
        for g, c in reversed(list(zip(dm.grid, dm.coords))):
            pos = rest % g
            rest //= g
            if g > 1 and (not c or c not in used) and pos != 0:
                ok = False
        out.append(ok)
    return out


def redistribution(dm, itemsize: int, world: int) -> Tuple[Optional[List[int]], Optional[List[int]]]:
    src = _blocks(dm, dm.src_subset, dm.src_grid, dm.src_coords, world)
    dst = _blocks(dm, dm.subset, dm.grid, dm.coords, world)
    if src is None or dst is None:
        return None, None
    per, low = [0] * world, [0] * world
    partial = dm.op is not None
    if dm.reduce_dims:  # MPI_Allreduce on each group of p holders
        p = 1
        for d in dm.reduce_dims:
            p *= dm.src_grid[d]
        for w in range(grid_size(dm.src_grid)):
            per[w] = low[w] = (2 * (p - 1) * _size(src[w][1]) * itemsize) // p
        return per, low
    senders = [True] * world
    if not partial:
        for w in range(world):
            senders[w] = not any(src[v] == src[w] and _size(src[w][1]) > 0 for v in range(w))
    for me in range(world):
        if partial:
            low[me] = sum(_inter(src[q], dst[me]) for q in range(world) if q != me) * itemsize
        else:
            low[me] = (_size(dst[me][1]) - _inter(src[me], dst[me])) * itemsize if _size(dst[me][1]) else 0
        if dm.synthesis:
            continue
        per[me] = sum(_inter(src[q], dst[me]) for q in range(world) if q != me and senders[q]) * itemsize
    if dm.synthesis:
        from .solvers.synthesized import plan_of, received_per_rank
        got = received_per_rank(plan_of(json.loads(dm.synthesis)))
        per = got + [0] * (world - len(got))
    return per, low


def measure(sdfg, world: int) -> List[Traffic]:
    """Traffic of every DistributedMemlet left in a lowered SDFG (program order)."""
    from .fusion import _dms
    from .solvers.registry import get
    out = []
    for st, dm in _dms(sdfg):
        if dm.direction == "redistribute":
            itemsize = sdfg.arrays[st.out_edges(dm)[0].data.data].dtype.bytes
            per, low = redistribution(dm, itemsize, world)
            if dm.reduce_dims:
                calls = [f"MPI_Allreduce(MPI_{dm.op.upper()}, grid dims {tuple(dm.reduce_dims)})"]
            elif dm.synthesis:
                from .solvers.synthesized import plan_of
                calls = [f"{s.op}(axes {','.join(s.axes) or '-'})" for s in plan_of(json.loads(dm.synthesis)).steps]
            else:
                calls = ["MPI_Alltoallv(world, packed)"] + ([f"combine ({dm.op})"] if dm.op else [])
            out.append(Traffic(dm.array, _grid(dm.src_grid), _grid(dm.grid), dm.implementation, calls or ["copy"],
                               per, low))
            continue
        gdesc = sdfg.arrays[dm.array]
        solver = get(dm.implementation)
        per, low = scatter_gather(dm, dm.implementation, gdesc.dtype.bytes, world)
        src, dst = ("rank 0", _grid(dm.grid)) if dm.direction == "scatter" else (_grid(dm.grid), "rank 0")
        out.append(Traffic(dm.array, src, dst, dm.implementation, solver.calls(dm.spec(gdesc)), per, low))
    return out
