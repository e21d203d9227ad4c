"""The solver interface: how a DistributedMemlet is implemented.

A solver looks at a :class:`CommSpec` (one side rank 0, the other a process grid with a symbolic
per-rank subset) and says whether it can implement it (and if not, why, in words), what it costs, and
the C++ code that does it. Solvers never see the program: data flows schedule -> constraints -> solver.
"""
import itertools
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import dace
import sympy
from dace import subsets


@dataclass
class CommSpec:
    array: str
    direction: str  # "scatter" (rank 0 -> grid) or "gather" (grid -> rank 0)
    subset: subsets.Range
    grid: Tuple[int, ...]
    coords: Tuple[Optional[str], ...]
    shape: Tuple[object, ...]  # of the global array
    itemsize: int
    op: Optional[str] = None
    accumulates: bool = False

    def coord_symbols(self):
        return {dace.symbolic.symbol(c, dace.int32): d for d, c in enumerate(self.coords) if c}

    def blocks(self) -> Optional[List[Tuple[Tuple[int, ...], Tuple[int, ...]]]]:
        """(start, count) of every rank's block in rank order, or None if not known before run time."""
        syms = self.coord_symbols()
        out = []
        for q in itertools.product(*[range(g) for g in self.grid]):
            subs = {s: q[d] for s, d in syms.items()}
            start, count = [], []
            for b, e, _ in self.subset:
                bv, ev = sympy.sympify(b).subs(subs), sympy.sympify(e).subs(subs)
                if bv.free_symbols or ev.free_symbols:
                    return None
                start.append(int(bv))
                count.append(max(0, int(ev) - int(bv) + 1))
            out.append((tuple(start), tuple(count)))
        return out

    def bytes_moved(self, distinct: bool = False) -> Optional[int]:
        """Bytes of the blocks of ranks other than rank 0, or None before run time. With ``distinct``,
        each different block counts once and rank 0's own block not at all: the minimum with root-held
        global arrays when replicas share one copy (replicated reads, un-conflicted replicated writes)."""
        blocks = self.blocks()
        if blocks is None:
            return None
        seen = {blocks[0]} if distinct else set()
        total = 0
        for blk in blocks[1:]:
            if distinct and blk in seen:
                continue
            seen.add(blk)
            n = 1
            for c in blk[1]:
                n *= c
            total += n
        return total * self.itemsize

    def may_overlap(self) -> bool:
        """Whether two ranks' blocks may share elements (replicated or halo writes)."""
        blocks = self.blocks()
        if blocks is None:
            return True
        boxes = [b for b in blocks if all(c > 0 for c in b[1])]
        for (s1, c1), (s2, c2) in itertools.combinations(boxes, 2):
            if all(a < b + n and b < a + m for a, m, b, n in zip(s1, c1, s2, c2)):
                return True
        return False


def block_shape(subset: subsets.Range, grid: Sequence[int], coords: Sequence[Optional[str]]) -> List[object]:
    """Shape of the rank-local buffer for ``subset``: the largest block over all ranks (uneven tiles give
    some ranks a smaller block). Symbolic sizes use rank 0's block, the largest of balanced tiles; the
    runtime checks every block against it."""
    syms = [dace.symbolic.symbol(c, dace.int32) for c in coords if c]
    spec = CommSpec("", "scatter", subset, tuple(grid), tuple(coords), (), 1)
    blocks = spec.blocks()
    if blocks is not None:
        return [max(c[j] for _, c in blocks) for j in range(len(subset))] if blocks else [1] * len(subset)
    zero = {x: 0 for x in syms}
    return [dace.symbolic.simplify(sympy.sympify(e - b + 1).subs(zero)) for b, e, _ in subset]


class Solver:
    """Base class of solvers; subclasses set ``name`` and implement the three methods."""
    name = "solver"

    def refuse(self, spec: CommSpec) -> Optional[str]:
        """None if this solver implements ``spec``, else the reason in words."""
        raise NotImplementedError

    def calls(self, spec: CommSpec) -> List[str]:
        """The MPI calls the implementation makes, for reports."""
        raise NotImplementedError

    def emit(self, spec: CommSpec, node, gdesc, ldesc) -> str:
        """C++ code of the tasklet (connectors ``_in`` and ``_out`` are pointers)."""
        raise NotImplementedError

    def bytes_moved(self, spec: CommSpec) -> Optional[int]:
        """Bytes sent to or from ranks other than rank 0 (None if only known at run time)."""
        return spec.bytes_moved()

    def __repr__(self):
        return f"<solver {self.name}>"
