"""``Distribution``: where the elements of one array live, as a frozen value.

Either rank 0 holds the whole array (:data:`ROOT`), or a process grid holds it in blocks: the rank at grid
coordinates ``c`` holds ``array[subset(c)]``, where ``subset`` is the symbolic constraint that constraint
extraction derived (thesis 4.3), written in the grid's coordinate symbols. A grid dimension whose
coordinate the subset does not use holds identical copies (replicas) — or, with ``pending`` set, partial
results that still have to be combined with that operator (as JAX's ``PartitionSpec`` carries
``unreduced`` axes). Blocks per rank are computed once per distinct value and cached.
"""
import functools
import itertools
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import dace
import numpy as np
import sympy
from dace import subsets

from .boxes import any_overlap
from .kinds import ReduceOp

Block = Tuple[Tuple[int, ...], Tuple[int, ...]]  # (start, count) per array dimension


def _expr(x):
    return sympy.sympify(x)


def _is_int_ceil(f) -> bool:
    return getattr(getattr(f, "func", None), "__name__", "") == "int_ceil"


def _exact_divisions(x):
    """``x`` with every ``int_ceil(a, b)`` whose ``a`` has all its coefficients divisible by the integer
    ``b`` written as ``a / b`` (``int_ceil(600*r + 600, 2)`` is ``300*r + 300`` for every integer ``r``):
    memlet propagation through a library node's expansion leaves these where the sizes are constants,
    and the solvers (equal blocks?) and the search (which prices on numbers) must see the same blocks."""
    if not getattr(x, "has", None) or not x.atoms(sympy.Function):
        return x

    def exact(f):
        if len(f.args) != 2 or not f.args[1].is_Integer or f.args[1] == 0:
            return f
        q = sympy.expand(f.args[0] / f.args[1])
        if all(c.is_Integer for c in q.as_coefficients_dict().values()):
            return q
        return f

    return x.replace(_is_int_ceil, exact)


def _free(x) -> set:
    return {str(f) for f in _expr(x).free_symbols}


@dataclass(frozen=True)
class Distribution:
    """Rank 0 (``grid == ()``) or blocks on a process grid (module docstring)."""
    grid: Tuple[int, ...] = ()
    coords: Tuple[Optional[str], ...] = ()
    subset: Tuple[Tuple[object, object, object], ...] = ()  # (begin, end inclusive, step) per dimension
    grid_id: int = -1  # the runtime's id of the grid (the kernel index); -1 for rank 0
    pending: Optional[ReduceOp] = None  # replicas hold partial results of this operator

    @staticmethod
    def on_grid(subset: subsets.Range, grid: Sequence[int], coords: Sequence[Optional[str]], grid_id: int,
                pending=None) -> "Distribution":
        coords = tuple(c or None for c in coords)
        rng = tuple((_exact_divisions(_expr(b)), _exact_divisions(_expr(e)), _expr(s)) for b, e, s in subset)
        dist = Distribution(tuple(int(g) for g in grid), coords, rng, int(grid_id), ReduceOp.of(pending))
        if dist.pending is not None and dist.replicas == 1:
            dist = dist.combined()
        return dist

    # -- what it is ---------------------------------------------------------------------------------
    @property
    def is_root(self) -> bool:
        return not self.grid

    @property
    def size(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    @property
    def range(self) -> subsets.Range:
        """The subset as a (fresh) DaCe range."""
        return subsets.Range([(b, e, s) for b, e, s in self.subset])

    @functools.cached_property
    def used_coords(self) -> frozenset:
        return frozenset(n for b, e, _ in self.subset for n in _free(b) | _free(e))

    @functools.cached_property
    def splits(self) -> Tuple[Optional[int], ...]:
        """Per array dimension, the grid dimension that splits it (None: whole on every rank)."""
        out = []
        for b, e, _ in self.subset:
            used = _free(b) | _free(e)
            out.append(next((d for d, c in enumerate(self.coords) if c and c in used), None))
        return tuple(out)

    @functools.cached_property
    def replica_dims(self) -> Tuple[int, ...]:
        """Grid dimensions (of size > 1) along which every rank holds the same block."""
        return tuple(d for d, (g, c) in enumerate(zip(self.grid, self.coords)) if g > 1 and (not c or c not in
                                                                                             self.used_coords))

    @property
    def replicas(self) -> int:
        n = 1
        for d in self.replica_dims:
            n *= self.grid[d]
        return n

    @property
    def partial(self) -> bool:
        """Whether replicas hold partial results still to be combined."""
        return self.pending is not None and self.replicas > 1

    def combined(self) -> "Distribution":
        """The same blocks after the partial results are combined."""
        return Distribution(self.grid, self.coords, self.subset, self.grid_id, None)

    def on(self, grid_id: int) -> "Distribution":
        return Distribution(self.grid, self.coords, self.subset, grid_id, self.pending)

    # -- blocks (computed once) ----------------------------------------------------------------------
    def blocks(self) -> Optional[List[Block]]:
        """(start, count) of every grid rank's block in row-major rank order; None when the blocks are only
        known at run time (symbolic sizes)."""
        return _blocks(self.grid, self.coords, self.subset)  # cached per distinct value

    def world_blocks(self, world: int) -> Optional[List[Block]]:
        """Blocks of ranks 0..world-1 (ranks outside the grid hold nothing)."""
        if self.is_root:
            return None
        blocks = self.blocks()
        if blocks is None:
            return None
        empty = (tuple(0 for _ in self.subset), tuple(0 for _ in self.subset))
        return blocks + [empty] * (world - len(blocks))

    def first_replicas(self, world: int) -> List[bool]:
        """Whether each world rank is the first of its replicas (coordinate 0 along the replica dims)."""
        out = []
        for w in range(world):
            if w >= self.size:
                out.append(False)
                continue
            rest, ok = w, True
            for d in reversed(range(len(self.grid))):
                pos = rest % self.grid[d]
                rest //= self.grid[d]
                if d in self.replica_dims and pos != 0:
                    ok = False
            out.append(ok)
        return out

    def may_overlap(self) -> bool:
        """Whether two ranks' blocks may share elements (replicas, halos); True when unknown."""
        blocks = self.blocks()
        if blocks is None:
            return True
        return any_overlap(blocks)

    @functools.cached_property
    def local_shape(self) -> Tuple[object, ...]:
        """Shape of the rank-local buffer: the largest block (symbolic sizes: rank 0's block, the largest of
        balanced tiles; the runtime checks every block against it)."""
        blocks = self.blocks()
        if blocks is not None:
            if not blocks:
                return tuple(1 for _ in self.subset)
            return tuple(max(c[j] for _, c in blocks) for j in range(len(self.subset)))
        zero = {dace.symbolic.symbol(c, dace.int32): 0 for c in self.coords if c}
        zero.update({sympy.Symbol(c): 0 for c in self.coords if c})
        return tuple(dace.symbolic.simplify(sympy.sympify(e - b + 1).subs(zero)) for b, e, _ in self.subset)

    # -- comparisons -----------------------------------------------------------------------------------
    def same_blocks(self, other: "Distribution") -> bool:
        """Whether both hold the same block on the same ranks: grids with the same split sizes (so the same
        ranks at the same coordinates, row-major) and the same subset after renaming grid coordinates."""
        if self.is_root or other.is_root:
            return self.is_root and other.is_root
        a = [(g, c) for g, c in zip(self.grid, self.coords) if g > 1]
        b = [(g, c) for g, c in zip(other.grid, other.coords) if g > 1]
        if [g for g, _ in a] != [g for g, _ in b]:
            return False
        names = {bc: ac for (_, ac), (_, bc) in zip(a, b) if ac and bc}
        return _same_subset(_rename(other.subset, names), self.subset)

    def __str__(self):
        if self.is_root:
            return "rank 0"
        dims = ", ".join(f"{b}:{e + 1}" if s == 1 else f"{b}:{e + 1}:{s}" for b, e, s in self.subset)
        part = f", pending {self.pending}" if self.partial else ""
        return f"[{dims}] on grid {self.grid}{part}"


ROOT = Distribution()


def _rename(subset, names: Dict[str, str]):
    def sub(x):
        x = _expr(x)
        return x.subs({f: dace.symbolic.symbol(names[str(f)], dace.int32) for f in x.free_symbols if str(f) in names})

    return tuple((sub(b), sub(e), s) for b, e, s in subset)


def _same_subset(a, b) -> bool:
    if len(a) != len(b):
        return False
    for (b1, e1, s1), (b2, e2, s2) in zip(a, b):
        for x, y in ((b1, b2), (e1, e2), (s1, s2)):
            if sympy.simplify(_expr(x) - _expr(y)) != 0:
                return False
    return True


@functools.lru_cache(maxsize=4096)
def _blocks(grid, coords, subset) -> Optional[List[Block]]:
    syms = {dace.symbolic.symbol(c, dace.int32): d for d, c in enumerate(coords) if c}
    syms.update({sympy.Symbol(c): d for d, c in enumerate(coords) if c})
    known = {str(s) for s in syms}
    for b, e, _ in subset:
        if (_free(b) | _free(e)) - known:
            return None
    dims = {str(s): d for s, d in syms.items()}
    # a bound names one or two coordinates: evaluated once per value of those, not once per rank
    tables = []
    for x in (_expr(x) for b, e, _ in subset for x in (b, e)):
        named = sorted({str(f) for f in x.free_symbols}, key=dims.get)
        at = [dims[n] for n in named]
        positions = itertools.product(*[range(grid[d]) for d in at])
        tables.append((at, dict(zip(positions, _grid_table(x, named, [grid[d] for d in at])))))
    out = []
    for q in itertools.product(*[range(g) for g in grid]):
        values = [table[tuple(q[d] for d in at)] for at, table in tables]
        start = tuple(values[0::2])
        out.append((start, tuple(max(0, e - b + 1) for b, e in zip(start, values[1::2]))))
    return out


def values_on_grid(expr, extents: Dict[str, int]) -> List[int]:
    """The integer value of ``expr`` at every position of the grid coordinates it names (``extents``:
    coordinate name -> grid extent), the origin first. Raises TypeError where ``expr`` names another
    symbol or is not a number there."""
    expr = sympy.sympify(expr)
    named = sorted({str(f) for f in expr.free_symbols})
    if any(n not in extents for n in named):
        raise TypeError(f"{expr} names symbols other than grid coordinates")
    return _grid_table(expr, named, [extents[n] for n in named])


def _grid_table(expr, named: Sequence[str], extents: Sequence[int]) -> List[int]:
    """``expr``'s integer value at every position of the coordinates ``named`` (row-major over their
    ``extents``, the origin first): compiled where it takes many values (sympy's substitution per grid
    position took seconds per distribution at P = 1024), by sympy where the compiled value is no integer."""
    dims = {n: i for i, n in enumerate(named)}
    f = _evaluator(expr, dims, extents)
    out = []
    for q in itertools.product(*[range(g) for g in extents]):
        v = _integer(f, q) if f is not None else None
        out.append(_at(expr, dims, q) if v is None else v)
    return out


def _int_ceil(a, b):
    return -(-a // b)


def _int_floor(a, b):
    return a // b


def _evaluator(expr, dims: Dict[str, int], extents: Sequence[int]):
    """``expr`` as a Python function of the coordinates ``dims`` numbers (in that order), where it takes at
    least 16 values; None where sympy is as quick or where it cannot be compiled."""
    positions = 1
    for g in extents:
        positions *= g
    if positions < 16:
        return None
    names = tuple(sorted(expr.free_symbols, key=lambda f: dims[str(f)]))
    return _compiled(expr, names) if len(names) == len(extents) else None


@functools.lru_cache(maxsize=4096)  # the same bounds recur in every candidate grid of a kernel
def _compiled(expr, names):
    """``expr`` compiled to a Python function of ``names``; None where that fails, or where it disagrees
    with sympy at the origin."""
    try:
        f = sympy.lambdify(names, expr, modules=[{"int_ceil": _int_ceil, "int_floor": _int_floor}, "math"])
        if _integer(f, tuple(0 for _ in names)) != int(expr.xreplace({n: sympy.Integer(0) for n in names})):
            return None
    except Exception:  # noqa: BLE001 (a function the printer does not know: sympy evaluates it)
        return None
    return f


def _integer(f, args) -> Optional[int]:
    """``f(*args)`` where it is an integer (None: evaluate exactly instead)."""
    try:
        v = f(*args)
    except Exception:  # noqa: BLE001
        return None
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 52:
        return int(v)
    return None


def _at(expr, dims: Dict[str, int], q) -> int:
    """The integer value of a bound at grid position ``q`` (its only symbols are grid coordinates)."""
    if expr.is_Integer:
        return int(expr)
    value = expr.xreplace({f: sympy.Integer(q[dims[str(f)]]) for f in expr.free_symbols})
    try:
        return int(value)
    except TypeError:  # not evaluated by the replacement alone
        return int(expr.subs({f: q[dims[str(f)]] for f in expr.free_symbols}))
