"""Constraint extraction (thesis 4.3 and 4.6): which part of each array a rank needs.

Inner memlets are propagated through the rank's tile of a map, whose range is written with grid
coordinate symbols; the outer subsets that result (``x[2*r0:2*r0+2, 0:16]``) are the constraints. For a
nested SDFG or a library node's pure expansion, every inner map is tiled; all constraints on one array
must agree up to a renaming of grid dimensions (schedule consistency, def. 4.6.1). Inner maps that the
schedule leaves out get the grid and renaming that make them consistent with the principal map.
"""
import ast
import copy
import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import dace
import numpy as np
import sympy
from dace import dtypes, nodes, subsets
from dace.memlet import Memlet
from dace.frontend.operations import detect_reduction_type
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.propagation import propagate_subset

from ..compat import as_range
from ..errors import ScheduleError, UnsupportedPattern
from ..ir import Direction, ReduceOp
from ..ir.distribution import values_on_grid
from ..schedule import FreeSymbols, Kernel, MapInfo, grid_size, ordered_states
from .rank_tiling import tile_range

_OPS = {
    dtypes.ReductionType.Sum: ReduceOp.SUM,
    dtypes.ReductionType.Product: ReduceOp.PROD,
    dtypes.ReductionType.Min: ReduceOp.MIN,
    dtypes.ReductionType.Max: ReduceOp.MAX,
}


@dataclass
class Access:
    """One read or write of a global array by a kernel, as a symbolic subset in grid coordinates."""
    array: str
    direction: Direction
    subset: subsets.Range
    op: Optional[ReduceOp] = None  # write-conflict resolution of a write
    accumulates: bool = False  # a write with WCR whose prior value must be kept (counted once)
    # An "in" that only fills the output's buffer with the prior values of elements the kernel may not
    # overwrite (dynamic writes, replicated copies): it belongs to the write, not to the kernel's reads.
    prior: bool = False

    def __str__(self):
        op = f" ({self.op})" if self.op else ""
        return f"{self.direction} {self.array}[{self.subset}]{op}"


@dataclass
class InnerTiling:
    """How one inner map of a nested kernel is tiled: its grid and, per dimension, a coordinate symbol."""
    info: MapInfo
    grid: Tuple[int, ...]
    coords: Tuple[Optional[str], ...]
    derived: bool = False


@dataclass
class KernelPlan:
    """The analysis of one kernel: its grid, coordinate symbols, accesses and (nested) inner tilings."""
    kernel: Kernel
    grid: Tuple[int, ...]
    coords: Tuple[Optional[str], ...]
    accesses: List[Access] = field(default_factory=list)
    inner: List[InnerTiling] = field(default_factory=list)
    body_constraints: Dict[str, subsets.Range] = field(default_factory=dict)
    principal: Optional[str] = None
    replica_dim: Optional[int] = None  # grid dimension of identical copies (``replicate``), if any
    unused: Tuple[str, ...] = ()  # a nested kernel's connectors its body never touches (dropped when applied)

    @property
    def size(self):
        return grid_size(self.grid)


def coord_symbols(kernel_index: int, grid: Sequence[int]) -> Tuple[Optional[str], ...]:
    """Fresh grid-coordinate symbols for a kernel; dimensions of size 1 get none (their coordinate is 0)."""
    return tuple(f"__dp{kernel_index}_r{d}" if g > 1 else None for d, g in enumerate(grid))


@dataclass(frozen=True)
class RankLocal:
    """A write-conflict resolution MPI has no operator for (argmax's ``(value, index)`` lambda): it is applied
    inside each rank's block, and allowed only where no two ranks write the same element."""
    wcr: str

    def __str__(self):
        return self.wcr


def wcr_op(memlet) -> Union[None, ReduceOp, RankLocal]:
    if memlet.wcr is None:
        return None
    red = _reduction_type(str(memlet.wcr))
    return _OPS[red] if red in _OPS else RankLocal(str(memlet.wcr))


@functools.lru_cache(maxsize=1024)
def _reduction_type(wcr: str):
    """DaCe's reading of a conflict-resolution lambda (it parses the source: slow), once per text; a minimum
    or maximum spelled as a choice (``lambda a, b: a if a < b else b``), which DaCe reads only as ``min(a, b)``
    or ``max(a, b)``, is one too, so that MPI can combine it."""
    red = detect_reduction_type(wcr)
    return _chosen_extremum(wcr) or red if red == dtypes.ReductionType.Custom else red


_LESS, _GREATER = (ast.Lt, ast.LtE), (ast.Gt, ast.GtE)


def _chosen_extremum(wcr: str):
    """``Min`` or ``Max`` for a lambda of two arguments whose body picks one of them by comparing the two
    (``a if a < b else b``, ``b if a > b else a``, ...), else None."""
    try:
        fn = ast.parse(wcr.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(fn, ast.Lambda) or len(fn.args.args) != 2 or not isinstance(fn.body, ast.IfExp):
        return None
    names = {a.arg for a in fn.args.args}
    test, picked, other = fn.body.test, fn.body.body, fn.body.orelse
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], _LESS + _GREATER)):
        return None
    left, right = test.left, test.comparators[0]
    if not all(isinstance(n, ast.Name) for n in (left, right, picked, other)) or \
            {left.id, right.id} != names or {picked.id, other.id} != names:
        return None
    picks_smaller = (picked.id == left.id) == isinstance(test.ops[0], _LESS)
    return dtypes.ReductionType.Min if picks_smaller else dtypes.ReductionType.Max


def map_accesses(sdfg: SDFG, state: SDFGState, entry: nodes.MapEntry, rng: subsets.Range,
                 positions: Dict[str, int]) -> List[Access]:
    """Outer accesses of a map if it ran over ``rng`` (its tile), without modifying the SDFG.

    All reads of one array are propagated together, whatever connector they come through (several
    access nodes of the array after MapFusion, ``A[i-1]``, ``A[i]``, ``A[i+1]``): the result is one read
    per array, the bounding box of the tile's reads (its block plus halo), so the kernel gets one scatter
    and one local buffer per array. Writes are merged the same way. ``positions`` ({coordinate symbol:
    grid size}) lets the bounding box compare bounds at every grid position (see :func:`bounding_box`).
    """
    out: List[Access] = []
    exit_ = state.exit_node(entry)
    params = entry.map.params
    reads: Dict[str, list] = {}
    for e in state.in_edges(entry):
        if e.data.data is None or e.dst_conn is None:
            continue
        if not e.dst_conn.startswith("IN_"):  # a range read from data (dace.map[0:num[0]]): every tile reads it
            reads.setdefault(e.data.data, []).append(e.data)
            continue
        inner = [ie.data for ie in state.out_edges_by_connector(entry, "OUT_" + e.dst_conn[3:]) if ie.data.data]
        if inner:
            reads.setdefault(e.data.data, []).extend(inner)
    for arr, inner in sorted(reads.items()):  # by name: DaCe's edge order can follow the hash seed
        out.append(Access(arr, Direction.IN, _propagate_union(inner, sdfg, arr, params, rng, entry, positions)))
    writes: Dict[str, list] = {}
    dynamic = set()
    for e in state.out_edges(exit_):
        if e.data.data is None or e.src_conn is None or not e.src_conn.startswith("OUT_"):
            continue
        inner_edges = [ie for ie in state.in_edges_by_connector(exit_, "IN_" + e.src_conn[4:]) if ie.data.data]
        if not inner_edges:
            continue
        writes.setdefault(e.data.data, []).extend(inner_edges)
        if e.data.dynamic or any(ie.data.dynamic for ie in inner_edges):
            dynamic.add(e.data.data)
        elif not all(fills_its_box(ie.data.subset, params) for ie in inner_edges):
            dynamic.add(e.data.data)  # the tile's box has elements no iteration writes: they keep their values
    for arr, inner_edges in sorted(writes.items()):
        inner = [ie.data for ie in inner_edges]
        subset = _propagate_union(inner, sdfg, arr, params, rng, entry, positions)
        ops = {wcr_op(i) for i in inner} | {_nested_write_op(state, ie, arr) for ie in inner_edges}
        ops = ops - {None} or {None}
        if len(ops) > 1:
            raise UnsupportedPattern(arr, subset, f"written with different conflict resolutions {ops}")
        op = ops.pop()
        if isinstance(op, ReduceOp):
            _refuse_read_back_totals(arr, subset, inner_edges, positions)
        if isinstance(op, RankLocal):
            _refuse_split_conflicts(arr, subset, op, positions)
            op = None
            dynamic.add(arr)  # each rank's block starts from its prior values, conflicts resolved in the block
        if op is None and arr in dynamic:
            _refuse_interleaved_blocks(arr, subset, positions)
        if op is None:
            _refuse_rank_dependent_copies(arr, subset, positions, rng, params, state, entry)
        out.append(Access(arr, Direction.OUT, subset, op, accumulates=op is not None))
        if op is None:
            _one_buffer_for_own_writes(out, state, entry, arr, positions)
            subset = out[-1].subset  # the write's block, grown to the reads' where they share a buffer
        if op is None and arr in dynamic:
            # A write that may skip elements: they must keep their prior values.
            if not any(a.array == arr and a.direction == Direction.IN and same_subset(a.subset, subset) for a in out):
                out.append(Access(arr, Direction.IN, subset, prior=True))
    return out


def _one_buffer_for_own_writes(out: List[Access], state: SDFGState, entry: nodes.MapEntry, arr: str,
                               positions: Dict[str, int]) -> None:
    """Gives the read of ``arr`` the write's block where an iteration's body reads elements it wrote.

    A read and a write of different blocks get a buffer each, so the kernel reads the values from before
    it. A map body with control flow (a nested SDFG: ``for j: x[i, j] = x[i, j - 1] + ...``) reads within
    one iteration what that iteration wrote, and must find it: such a read and write share one buffer. Where
    the reads lie inside the written block, that block is scattered and gathered; where they pass it only
    along dimensions the grid does not split, both take the bounding box (each rank still gathers elements
    no other rank writes). Reads past the block along a split dimension keep their own buffer."""
    read = next((a for a in out if a.array == arr and a.direction == Direction.IN and not a.prior), None)
    write = next((a for a in out if a.array == arr and a.direction == Direction.OUT), None)
    if read is None or write is None or same_subset(read.subset, write.subset):
        return
    if not _body_reads_what_it_writes(state, entry, arr):
        return
    box = bounding_box([read.subset, write.subset], positions)
    if same_subset(box, write.subset):
        read.subset = write.subset
        return
    grown = [d for d in range(box.dims()) if not same_subset(subsets.Range([box[d]]), subsets.Range([write.subset[d]]))]
    if not any(_split_along(a.subset, d, positions) for a in (read, write) for d in grown):
        read.subset = write.subset = box


def _split_along(subset: subsets.Range, d: int, positions: Dict[str, int]) -> bool:
    """Whether dimension ``d`` of a tile's box depends on a grid coordinate (the grid splits it)."""
    return any(str(f) in positions for x in subset[d][:2] for f in sympy.sympify(x).free_symbols)


def _body_reads_what_it_writes(state: SDFGState, entry: nodes.MapEntry, arr: str) -> bool:
    """Whether a nested SDFG in the map's scope both reads and writes elements of ``arr`` that one iteration
    can share (their memlets intersect, or DaCe cannot tell)."""
    for node in state.scope_subgraph(entry).nodes():
        if not isinstance(node, nodes.NestedSDFG):
            continue
        reads = [e.data.subset for e in state.in_edges(node) if e.data.data == arr and e.data.subset is not None]
        writes = [e.data.subset for e in state.out_edges(node) if e.data.data == arr and e.data.subset is not None]
        for r in reads:
            for w in writes:
                if subsets.intersects(r, w) is not False:
                    return True
    return False


def _refuse_interleaved_blocks(array, subset, positions: Dict[str, int]):
    """A write that skips elements of its block is written back whole (the skipped elements with the values
    they had), so the blocks of two ranks must not overlap. They do where the split parameter is not the
    outermost part of a linear index (``view[6*i + j]`` with ``j`` split: each rank's rows interleave with
    the other's), and the last rank to write back would undo the others' rows. Refused, naming the grid
    coordinate: a split of the outermost parameter keeps the blocks apart."""
    rng = as_range(subset)
    for coord, size in positions.items():
        if size < 2:
            continue
        bounds = [(sympy.sympify(b), sympy.sympify(e)) for b, e, _ in rng.ranges]
        syms = [f for b, e in bounds for f in b.free_symbols | e.free_symbols if str(f) == coord]
        if not syms:
            continue
        sym = syms[0]
        apart = False
        for b, e in bounds:
            if sym not in b.free_symbols | e.free_symbols:
                continue
            rel = _compare(b.subs(sym, sym + 1), e + 1, positions)
            if rel is not None and rel >= 0:  # the next position's block starts after this one's ends
                apart = True
                break
        if not apart:
            raise UnsupportedPattern(array, subset, f"the written blocks of two ranks overlap along grid coordinate "
                                     f"{coord} (their elements interleave where the split parameter is not the "
                                     "outermost part of the written index, or a triangular write's box grows), and "
                                     "each block is written back whole, so one rank would overwrite values another "
                                     "computed; split the map along the parameter that indexes the outermost part")


def _names_in(ranges) -> set:
    """Names of the symbols in the begins and ends of ``(begin, end, step)`` ranges (a box's dimensions)."""
    return {str(f) for b, e, _ in ranges for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols}


def _refuse_rank_dependent_copies(array, subset, positions: Dict[str, int], rng: subsets.Range, params,
                                  state: SDFGState, entry: nodes.MapEntry):
    """A write without a conflict resolution whose box does not follow a split grid coordinate is held
    whole by every rank along it and written back by one, which is right only where every rank writes the
    same values. Where the map body uses the parameter that coordinate splits (``out[perm[i]] = x[i]``: an
    index computed from data, so the box is the whole array), the ranks write different elements or
    values, and the one written back would drop the others'. Refused, naming the parameter."""
    used_in_box = _names_in(as_range(subset).ranges)
    split = [c for c, size in positions.items() if size > 1 and c not in used_in_box]
    if not split:
        return
    body = state.scope_subgraph(entry)  # with the entry's and exit's edges: the memlets into the body
    used = set()
    for e in body.edges():
        used |= {str(f) for f in e.data.free_symbols}
    for n in body.nodes():
        used |= {str(f) for f in n.free_symbols}
    for c in split:
        for p, bounds in zip(params, rng):
            if c in _names_in([bounds]) and p in used:
                raise UnsupportedPattern(array, subset, f"the map is split along '{p}' (grid coordinate {c}), but the "
                                         f"written box does not follow '{p}' although the body uses it (an index "
                                         "computed from data, such as out[perm[i]], makes the box the whole array), "
                                         "so the ranks write different elements and the one copy written back "
                                         f"would drop the others'; leave '{p}' unsplit (lower(sdfg, ranks=P) does), "
                                         f"or write along '{p}'")


def _unfollowed(subset, positions: Dict[str, int]) -> List[str]:
    """The grid coordinates a written subset does not follow: ranks along them write the same elements."""
    return sorted(set(positions) - _names_in(subset))


def _refuse_read_back_totals(array, subset, inner_edges, positions: Dict[str, int]):
    """A tasklet that uses what its conflict write leaves (``v = o[5] = 1``: DaCe hands ``v`` the running
    total, as DaCe's test ``writeresult`` does) depends on every earlier iteration. Where the grid splits a
    dimension the written subset does not follow, each rank's totals would start from its own partial sum."""
    partial = _unfollowed(subset, positions)
    for ie in inner_edges if partial else ():
        t = ie.src
        if isinstance(t, nodes.Tasklet) and t.language == dtypes.Language.Python and \
                _reads_back(t.code.code, ie.src_conn):
            raise UnsupportedPattern(array, subset, f"tasklet '{t.label}' uses the value its write-conflict "
                                     f"resolution leaves in '{ie.src_conn}' (a running total, which depends on "
                                     "every earlier iteration), and the map is split along a dimension the "
                                     f"written subset does not follow (grid coordinates {partial}), where each "
                                     "rank's totals would start from its own partial sum; leave that dimension "
                                     "unsplit")


def _reads_back(code, conn: str) -> bool:
    """Whether Python tasklet statements ``code`` read output connector ``conn`` or assign it in a chain
    (``v = conn[5] = 1``) rather than only write it."""
    trees = code if isinstance(code, list) else [code]
    stored = {id(n.value) for t in trees for n in ast.walk(t)
              if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)}
    for t in trees:
        for n in ast.walk(t):
            if isinstance(n, ast.Assign) and len(n.targets) > 1 and \
                    any(isinstance(m, ast.Name) and m.id == conn for tg in n.targets for m in ast.walk(tg)):
                return True
            if isinstance(n, ast.Name) and n.id == conn and isinstance(n.ctx, ast.Load) and id(n) not in stored:
                return True
    return False


def _refuse_split_conflicts(array, subset, op: RankLocal, positions: Dict[str, int]):
    """A resolution MPI cannot apply is fine inside a rank; refused where the grid splits a dimension of the
    map that the written subset does not follow (ranks along it would hold partial results to combine)."""
    partial = _unfollowed(subset, positions)
    if partial:
        raise UnsupportedPattern(array, subset, f"write-conflict resolution {op} is not a sum, product, min or max, "
                                 "so MPI cannot combine the partial results of ranks that split the map along a "
                                 f"dimension the written subset does not follow (grid coordinates {partial}); "
                                 "split the map only along the dimensions of the result")


def fills_its_box(subset, params) -> bool:
    """Whether the iterations of a map (parameters ``params``) that write ``subset`` each write together
    every element of the bounding box DaCe's propagation gives them: each parameter indexes at most one
    dimension, as ``a*p + c`` to ``a*p + c + w - 1`` with ``|a| <= w`` (no gaps between iterations), and
    the other dimensions do not change with the parameters. A triangular write (``C[i, i:M]``: ``i`` in
    two dimensions) leaves holes in its box, which keep their prior values. False where it cannot tell."""
    try:
        ranges = tuple(tuple(r) for r in as_range(subset).ranges)
        hash(ranges)
    except (TypeError, AttributeError):
        return False
    return _fills_its_box(ranges, tuple(params))


@functools.lru_cache(maxsize=4096)
def _fills_its_box(ranges, params) -> bool:
    try:
        seen = set()
        for b, e, st in ranges:
            b, e = sympy.sympify(b), sympy.sympify(e)
            used = {str(f) for f in (b.free_symbols | e.free_symbols)} & set(params)
            if not used:
                continue
            if len(used) > 1 or used & seen or sympy.sympify(st) != 1:
                return False
            seen |= used
            (p, ) = [f for f in (b.free_symbols | e.free_symbols) if str(f) in used][:1] or [None]
            width = sympy.simplify(e - b + 1)
            if p in width.free_symbols or not width.is_number:
                return False
            a = sympy.diff(b, p)
            if not a.is_number or sympy.diff(a, p) != 0 or abs(a) > width:
                return False
        return True
    except (TypeError, ValueError, AttributeError):
        return False


def _propagate_union(inner, sdfg: SDFG, arr: str, params, rng, entry, positions) -> subsets.Range:
    """The tile's accesses through ``inner`` (memlets of one array), as their bounding box.

    Each distinct memlet is propagated on its own and the union is taken here: DaCe's own union assumes
    symbols are large and positive, and keeps ``int_ceil(r*9, 2)`` over ``10`` as the upper bound of
    ``A[i]`` and ``A[10]``, which drops the halo of a grid coordinate ``r`` that is small."""
    distinct = list({_exprs(m.subset): m for m in inner}.values())
    if len(distinct) == 1:
        return _range(_propagate(distinct, sdfg, arr, params, rng, entry), arr)
    ranges = [_range(_propagate([m], sdfg, arr, params, rng, entry), arr) for m in distinct]
    return bounding_box(ranges, positions)


def bounding_box(ranges: Sequence[subsets.Range], positions: Optional[Dict[str, int]] = None) -> subsets.Range:
    """Per dimension, the smallest begin and the largest end of ``ranges`` (unit steps).

    A bound is dropped only where another one provably passes it: their difference is a number, or it
    holds at every grid position (``positions``: {coordinate symbol: grid size}) when the coordinates are
    its only symbols. Bounds left undecided stay as ``Min``/``Max``, evaluated per rank like any block."""
    if len({r.dims() for r in ranges}) != 1:
        raise ValueError(f"ranges of different dimensions: {ranges}")
    out = []
    for d in range(ranges[0].dims()):
        begin = _extreme([sympy.sympify(r[d][0]) for r in ranges], -1, positions or {})
        end = _extreme([sympy.sympify(r[d][1]) for r in ranges], 1, positions or {})
        out.append((begin, end, 1))
    return subsets.Range(out)


def _extreme(values, sign: int, positions: Dict[str, int]):
    """The least (sign -1) or greatest (sign 1) of symbolic integers, as far as it can be proven."""
    keep: list = []
    for v in values:
        passed = False
        for k in list(keep):
            rel = _compare(v, k, positions)  # -1: v <= k everywhere, 1: v >= k, 0: equal, None: unknown
            if rel is None:
                continue
            if rel == 0 or rel == -sign:
                passed = True  # k is at least as extreme as v
                break
            keep.remove(k)
        if not passed:
            keep.append(v)
    if len(keep) == 1:
        return keep[0]
    return sympy.Min(*keep) if sign < 0 else sympy.Max(*keep)


def _compare(a, b, positions: Dict[str, int]) -> Optional[int]:
    diff = sympy.sympify(a - b)
    if not (diff.is_number or {str(f) for f in diff.free_symbols} <= set(positions)):
        diff = dace.symbolic.simplify(diff)  # only where symbols other than grid coordinates may cancel
    if getattr(diff, "is_number", False):
        return int(bool(diff > 0)) - int(bool(diff < 0))
    free = diff.free_symbols
    syms = {f: positions[str(f)] for f in free if str(f) in positions}
    if len(syms) != len(free):
        return None
    signs = set()
    for pos in itertools.product(*[range(g) for g in syms.values()]):
        try:
            v = int(diff.subs(dict(zip(syms, pos))))
        except (TypeError, ValueError):
            return None
        signs.add((v > 0) - (v < 0))
    if signs <= {0}:
        return 0
    if signs <= {0, 1}:
        return 1
    if signs <= {0, -1}:
        return -1
    return None


_PROPAGATED: Dict[tuple, tuple] = {}  # key of :func:`_propagate` -> (propagated subset, its coordinates)
_COORD = re.compile(r"__dp(\d+)_r(\d+)")  # a grid coordinate (coord_symbols): kernel, dimension


def _exprs(subset) -> tuple:
    """A subset as a hashable tuple of its bounds (SymPy expressions compare by structure, and symbols of
    one name with other assumptions differ): a key that needs no printing."""
    if subset is None:
        return None
    if isinstance(subset, subsets.Range):
        return ("R", tuple(tuple(r) for r in subset.ranges), tuple(subset.tile_sizes))
    return (type(subset).__name__, tuple(subset.ndrange()))


def _side_of(m, arr: str):
    """The access of ``arr`` in memlet ``m`` as a plain memlet: the other subset where ``m`` names the other
    array, and without an other subset in any case (DaCe's propagation picks the source or destination side
    by the memlet's direction, which a copy ``t[i] -> x[0]`` seen from ``x`` gets wrong)."""
    sub = m.other_subset if m.data != arr and m.other_subset is not None else m.subset
    return Memlet(data=arr, subset=_copied(sub), volume=m.volume, dynamic=m.dynamic, wcr=m.wcr)


def _copied(subset):
    """A copy of a subset that shares its (immutable) SymPy bounds: DaCe's ``replace``/``offset`` rebind the
    entries of its lists, so new lists suffice (a deep copy rebuilds every expression, and cost seconds)."""
    out = copy.copy(subset)
    for name, value in vars(subset).items():
        if isinstance(value, list):
            setattr(out, name, list(value))
    return out


def _propagate(inner, sdfg: SDFG, arr: str, params, rng, entry):
    """DaCe's memlet propagation over a tile (the propagated subset); its failures become a refusal in words.

    Propagation simplifies symbolic bounds (``int_ceil`` of grid coordinates) and takes most of the
    lowering time of large programs, whose many maps repeat the same accesses over the same tiles
    (channel_flow's stencils; every candidate grid of the automatic schedule): results are kept per
    distinct (memlets, array shape, parameters, tile). Each kernel names its grid coordinates after its
    index (``__dp6_r0``), so the key names them by grid dimension only: the same access in another kernel
    (resnet's layers, every reduction of one shape) is a hit, renamed to that kernel's coordinates. The key
    holds the expressions themselves, not their text: printing them cost more than most propagations.
    (Propagating a tile whose size is a symbol, to share one propagation among the grids of a map, was
    tried: DaCe's simplification is then slower than the propagations it saves.)"""
    desc = sdfg.arrays[arr]
    sides = [m.other_subset if m.data != arr and m.other_subset is not None else m.subset for m in inner]
    key = (tuple((_exprs(sub), m.volume, m.dynamic, str(m.wcr)) for sub, m in zip(sides, inner)),
           tuple(desc.shape), tuple(params), _exprs(rng))
    free = {f for x in _flat(key) if isinstance(x, sympy.Basic) for f in x.free_symbols}
    coords = {(found.group(1), found.group(2)): f for f in free for found in [_COORD.fullmatch(str(f))] if found}
    mine = {}
    if len({k for k, _ in coords}) == 1:  # one kernel's coordinates: named by grid dimension in the key
        mine = {d: f for (_, d), f in coords.items()}
        canonical = {f: sympy.Symbol(f"__dp_r{d}", **f.assumptions0) for d, f in mine.items()}
        key = _renamed(key, canonical)
    hit = _PROPAGATED.get(key)
    if hit is None:
        if len(_PROPAGATED) > 20000:
            _PROPAGATED.clear()
        try:
            out = propagate_subset([_side_of(m, arr) for m in inner], desc, params, rng).subset
        except Exception as e:  # noqa: BLE001 - DaCe raises IndexError/TypeError/... on memlets it cannot analyse
            raise UnsupportedPattern(arr, ", ".join(str(m.subset) for m in inner),
                                     f"DaCe cannot propagate the accesses of map '{entry.map.label}' through a "
                                     f"tile ({type(e).__name__}: {e}), so no per-rank constraint can be derived; "
                                     "leave this map out of the schedule") from None
        out = _strided_extents(out, sides, params, rng)
        hit = _PROPAGATED[key] = (out, mine)
    out = _copied(hit[0])
    rename = {theirs: mine[d] for d, theirs in hit[1].items() if mine[d] != theirs}
    if rename:
        out.replace(rename)
    return out


def _strided_extents(out, sides, params, rng):
    """``out`` with the extents of strided subscripts computed from the tile's corners.

    DaCe 1.0.2 propagates ``y[2 * k]`` over ``k`` in 0:4 to ``0:4``, not ``0:7:2``: its case for a strided
    map's ``i:i+stride`` also fires for a unit-step map whose subscript starts where the map does. A box
    that small makes a scatter send too little and a kernel read and write past its buffer. Where a
    dimension's subscripts are affine in the parameters with numeric coefficients, one of them of
    magnitude above one, its extent here is the least begin and the greatest end over the tile's corners
    (an affine bound takes its extremes there). Other dimensions keep DaCe's result."""
    if not isinstance(out, subsets.Range):
        return out
    names = {str(p) for p in params}
    corner = {str(p): (b, e) for p, (b, e, _) in zip(params, rng)}
    dims = list(out.ranges)
    subs = [as_range(side) for side in sides]
    if any(not isinstance(sub, subsets.Range) or sub.dims() != len(dims) for sub in subs):
        return out
    changed = False
    for d in range(len(dims)):
        begins, ends, strided = [], [], False
        for sub in subs:
            bounds = []
            for k, expr in enumerate(sympy.sympify(x) for x in sub[d][:2]):
                syms = [f for f in expr.free_symbols if str(f) in names]
                coefs = [sympy.diff(expr, f) for f in syms]
                if not all(c.is_number for c in coefs):
                    bounds = None
                    break
                strided |= any(abs(c) > 1 for c in coefs)
                low = k == 0  # the least begin, the greatest end
                bounds.append(expr.subs({f: corner[str(f)][0 if (c >= 0) == low else 1]
                                         for f, c in zip(syms, coefs)}, simultaneous=True))
            if bounds is None:
                begins = None
                break
            begins.append(bounds[0])
            ends.append(bounds[1])
        if begins is None or not strided:
            continue
        dims[d] = (_extreme(begins, -1, {}), _extreme(ends, 1, {}), 1)
        changed = True
    return subsets.Range(dims) if changed else out


def _flat(key):
    """The leaves of nested tuples."""
    for x in key:
        if isinstance(x, tuple):
            yield from _flat(x)
        else:
            yield x


def _renamed(key, canonical):
    """``key`` with the symbols in ``canonical`` replaced (SymPy expressions anywhere in nested tuples)."""
    if isinstance(key, tuple):
        return tuple(_renamed(x, canonical) for x in key)
    if isinstance(key, sympy.Basic):
        return key.xreplace(canonical)
    return key


def known_sizes(sdfg: SDFG) -> Dict[str, int]:
    """The integer symbols ``sdfg.specialize`` fixed, by name."""
    return {n: int(v) for n, v in sdfg.constants.items() if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}


def with_known(expr, fixed: Dict[str, int]):
    """``expr`` with the symbols named in ``fixed`` replaced by their values (matched by name: SymPy holds
    symbols of one name with other assumptions unequal)."""
    expr = sympy.sympify(expr)
    repl = {f: fixed[str(f)] for f in expr.free_symbols if str(f) in fixed}
    return expr.subs(repl) if repl else expr


def refuse_growing_blocks(plan: "KernelPlan", label: str, samples=(7, 97, 1000)):
    """Where the program's sizes are symbolic, rank-local buffers are sized by rank 0's block; a constraint
    whose block grows with the grid coordinate (a triangular access ``L[i, 0:i + 1]`` over a tile of ``i``)
    is then refused before any rank starts. Checked on every grid position, with the program's symbols set
    to a few sample values. Where ``specialize`` fixed the sizes, every block is known and the buffer takes
    the largest (:func:`..solvers.base.block_shape`), so nothing is refused."""
    coords = [(dace.symbolic.symbol(c, dace.int32), g) for c, g in zip(plan.coords, plan.grid) if c]
    if not coords:
        return
    extents = {str(c): g for c, g in coords}
    fixed = known_sizes(plan.kernel.state.sdfg)
    for a in plan.accesses:
        for j, (b, e, _) in enumerate(a.subset):
            width = sympy.sympify(e - b + 1)
            known = with_known(width, fixed) if fixed else width
            if known.is_number:
                continue  # the same block at every grid position
            if not {str(f) for f in known.free_symbols} - {str(c) for c, _ in coords}:
                at = values_on_grid(known, extents)  # the origin first
                if max(at) > at[0]:
                    refuse_overlapping_writes(plan, a, fixed, label)
                continue  # sizes known (constants or specialized): the buffer takes the largest block
            free = width.free_symbols
            if not free & {c for c, _ in coords}:
                continue
            others = [x for x in free if x not in {c for c, _ in coords}]
            for sample in samples:
                w = width.subs({x: sample for x in others})
                try:
                    at = values_on_grid(w, extents)
                    zero, grow = at[0], max(at)
                except (TypeError, ValueError):
                    break
                if grow > zero:
                    raise UnsupportedPattern(a.array, a.subset, f"in kernel '{label}', the block of dimension {j} "
                                             "grows with the grid coordinate (a triangular access), but rank-local "
                                             "buffers are sized by rank 0's block")


def refuse_overlapping_writes(plan: "KernelPlan", a: "Access", fixed: Dict[str, int], label: str):
    """A growing block is safe to read, but written blocks that overlap on two ranks (a bounding box
    wider than what each rank writes) would send stale values back to rank 0: refused in words."""
    if a.direction != Direction.OUT or a.op is not None:
        return
    from ..ir import Distribution
    names = {c for c in plan.coords if c}
    rng = [tuple(with_known(x, fixed) for x in r) for r in a.subset]
    # dimensions that do not follow the grid are the same on every rank: they overlap anyway
    rng = [r for r in rng if all({str(f) for f in sympy.sympify(x).free_symbols} <= names for x in r)]
    dist = Distribution.on_grid(subsets.Range(rng), plan.grid, plan.coords, 0) if rng else None
    if dist is not None and dist.blocks() is not None and dist.replicas == 1 and dist.may_overlap():
        raise UnsupportedPattern(a.array, a.subset, f"in kernel '{label}', the written blocks of two ranks "
                                 "overlap (the bounding box of a triangular write), so gathering them would "
                                 "overwrite values another rank computed")


def refuse_views(sdfg: SDFG, accesses: List[Access], label: str):
    """A partitioned kernel may not touch a view that could not be made an array of its own."""
    for a in accesses:
        desc = sdfg.arrays.get(a.array)
        if isinstance(desc, dace.data.View):
            moving = FreeSymbols().loose(desc.shape, sdfg)
            if moving:  # passes.prepare keeps such views: no buffer can be sized for them
                raise UnsupportedPattern(a.array, a.subset, f"kernel '{label}' accesses it as a view whose shape "
                                         f"depends on {', '.join(moving)}, which a loop assigns: rank-local buffers "
                                         "are sized when the program starts, so the kernel runs on rank 0")
            raise UnsupportedPattern(a.array, a.subset, f"kernel '{label}' accesses it as a view of another array "
                                     "whose shape differs in size (e.g. a reshape into M // 2 pieces), so its "
                                     "blocks cannot be mapped to blocks of the viewed array")


def _nested_write_op(state: SDFGState, edge, array) -> Union[None, ReduceOp, RankLocal]:
    """Write-conflict resolution applied inside a nested SDFG to one of its outputs (DaCe's frontend keeps
    ``+=`` inside the nested SDFG and leaves the outer memlet without one), at any depth: a sparse product's
    ``C[i, crd[pk]] += ...`` sits in a body nested in a map nested in the outer map's body."""
    src = state.memlet_path(edge)[0]
    if not isinstance(src.src, nodes.NestedSDFG):
        return None
    ops = _inner_write_ops(src.src, src.src_conn)
    ops.discard(None)
    if len(ops) > 1:
        raise UnsupportedPattern(array, edge.data.subset, f"written with different conflict resolutions {ops}")
    return ops.pop() if ops else None


def _inner_write_ops(nested: nodes.NestedSDFG, conn: str) -> set:
    """The write-conflict resolutions of the writes to ``conn`` inside ``nested`` and the bodies it nests."""
    from ..compat import all_states
    ops = set()
    for st in all_states(nested.sdfg):
        for n in st.data_nodes():
            if n.data != conn:
                continue
            for ie in st.in_edges(n):
                ops.add(wcr_op(ie.data))
                first = st.memlet_path(ie)[0]
                if isinstance(first.src, nodes.NestedSDFG) and first.src_conn:
                    ops |= _inner_write_ops(first.src, first.src_conn)
    return ops


def _range(subset, array) -> subsets.Range:
    """A tile's propagated access as its box with unit steps. Propagation keeps a stride (``y[k * 2]`` over
    ``k`` in 0:4 is ``0:7:2``), and the lowering sizes and moves boxes: read with the stride, its gaps
    would be left out of the local buffer that the map still indexes densely. A box also reads the gaps
    in between; written, it leaves them with their prior values (its write does not fill the box)."""
    subset = as_range(subset)  # DaCe 1.0.2's Indices (see compat)
    if not isinstance(subset, subsets.Range):
        raise UnsupportedPattern(array, subset, f"subset of type {type(subset).__name__} is not a range")
    if all(sympy.sympify(st) == 1 for _, _, st in subset):
        return subset
    return subsets.Range([(b, e, 1) for b, e, _ in subset])


def same_subset(a: subsets.Range, b: subsets.Range) -> bool:
    if a.dims() != b.dims():
        return False
    for (b1, e1, s1), (b2, e2, s2) in zip(a, b):
        for x, y in ((b1, b2), (e1, e2), (s1, s2)):
            diff = sympy.sympify(x) - sympy.sympify(y)
            if diff == 0:  # the same expression (most calls): nothing to simplify
                continue
            if _nonzero_somewhere(diff) or sympy.simplify(diff) != 0:
                return False
    return True


def _nonzero_somewhere(diff) -> bool:
    """Whether ``diff`` is an exact non-zero number at one integer point: then no simplification can make
    it 0, and the slow ``simplify`` is needed only where it vanishes there (or is not a plain number)."""
    point = sympy.Integer(3)
    if any(getattr(point, f"is_{k}") != v for f in diff.free_symbols for k, v in f.assumptions0.items()):
        return False  # 3 is not a value the symbols may take (a negative or even symbol)
    try:
        value = diff.subs({f: point for f in diff.free_symbols})
        return bool(value.is_Rational and value != 0)  # exact: a rational number is 0 only as 0
    except (TypeError, ValueError, ZeroDivisionError):
        return False


def _positions(grid, coords) -> Dict[str, int]:
    return {c: g for g, c in zip(grid, coords) if c}


def plan_map_kernel(sdfg: SDFG, kernel: Kernel, grid: Tuple[int, ...]) -> KernelPlan:
    coords = coord_symbols(kernel.index, grid)
    entry = kernel.node
    rng = tile_range(entry.map.range, grid, coords)
    plan = KernelPlan(kernel, grid, coords, principal=kernel.maps[0].name)
    plan.accesses = map_accesses(sdfg, kernel.state, entry, rng, _positions(grid, coords))
    refuse_views(sdfg, plan.accesses, kernel.label)
    refuse_growing_blocks(plan, kernel.label)
    if len(grid) > len(entry.map.params):
        plan.replica_dim = len(grid) - 1
        plan.accesses = copies_write_whole_values(plan)
    return plan


def copies_write_whole_values(plan: KernelPlan) -> List[Access]:
    """Accesses of a replicated kernel: along the replica dimension every copy computes the whole value
    of a write-conflicted output (it is not a partial result), so the copies start from the prior
    value (read in) and one of them writes the result back. A kernel that also splits a reduction
    would hold partial results and copies at once; that is refused."""
    out = []
    for a in plan.accesses:
        if a.direction != Direction.OUT or a.op is None:
            out.append(a)
            continue
        used = _names_in(a.subset)
        partial = [d for d, (g, c) in enumerate(zip(plan.grid, plan.coords))
                   if g > 1 and d != plan.replica_dim and c not in used]
        if partial:
            raise UnsupportedPattern(a.array, a.subset, f"the kernel is replicated and also splits a reduction (grid "
                                     f"dims {tuple(partial)}): its partial results and its copies cannot be told "
                                     "apart; replicate a kernel that does not split the reduction")
        if a.accumulates:
            out.append(Access(a.array, Direction.IN, a.subset, prior=True))
        out.append(Access(a.array, Direction.OUT, a.subset))
    return out


def find_entry(body: SDFG, m: nodes.Map):
    """(state, map entry) of the map ``m`` among the top-level states of ``body``."""
    for st in ordered_states(body):
        for n in st.nodes():
            if isinstance(n, nodes.MapEntry) and n.map is m:
                return st, n
    raise KeyError(m.label)


def plan_nested_kernel(sdfg: SDFG, kernel: Kernel, grids: Dict[str, Tuple[int, ...]]) -> KernelPlan:
    """Grids for all inner maps of a nested SDFG / library node, checked for consistency (def. 4.6.1).

    A replicated principal grid (one entry more than the map has parameters, from ``replicate``) is
    planned without its replica dimension, which is appended at the end: no constraint depends on it.
    """
    infos = kernel.maps
    scheduled = [m for m in infos if m.name in grids]
    if not infos:
        raise ScheduleError(f"'{kernel.label}' has no maps to partition")
    principal = max(scheduled, key=lambda m: len(m.params))
    replicated = [m for m in scheduled if len(grids[m.name]) > len(m.params)]
    if replicated:
        if replicated != [principal]:
            other = next(m for m in replicated if m is not principal)
            raise ScheduleError(f"inside '{kernel.label}', map '{other.name}' has {len(other.params)} parameter(s) "
                                f"{tuple(other.params)} but was given the grid {tuple(grids[other.name])}: a grid "
                                "with one entry more than the map's parameters is a replicate() grid, which only "
                                f"the map with the most parameters ('{principal.name}') may have")
        copies = grids[principal.name][-1]
        plan = plan_nested_kernel(sdfg, kernel, {**grids, principal.name: grids[principal.name][:-1]})
        plan.grid = tuple(plan.grid) + (copies, )
        plan.coords = tuple(plan.coords) + (f"__dp{kernel.index}_r{len(plan.grid) - 1}", )
        plan.replica_dim = len(plan.grid) - 1
        plan.accesses = copies_write_whole_values(plan)
        return plan
    grid = grids[principal.name]
    coords = coord_symbols(kernel.index, grid)
    plan = KernelPlan(kernel, grid, coords, principal=principal.name)
    body = kernel.body
    canonical: Dict[str, subsets.Range] = {}
    source: Dict[str, str] = {}
    writes: Dict[str, set] = {}

    order = [principal] + sorted([m for m in infos if m is not principal], key=lambda m: -len(m.params))
    for info in order:
        st, entry = find_entry(body, info.map)
        explicit = info.name in grids
        candidates = list(_candidates(info, grids.get(info.name), grid, coords))
        chosen = None
        last_conflict = None
        for g, cs in candidates:
            accesses = map_accesses(body, st, entry, tile_range(entry.map.range, g, cs), _positions(g, cs))
            conflict = None
            for a in accesses:
                ref = canonical.get(a.array)
                if ref is not None and not same_subset(ref, a.subset):
                    conflict = (a, ref)
                    break
            if conflict is None:
                chosen = (g, cs, accesses)
                break
            last_conflict = conflict
        if chosen is None:
            if last_conflict is None:
                raise ScheduleError(f"inconsistent schedule inside '{kernel.label}': grid {grids.get(info.name)} "
                                    f"of map '{info.name}' cannot be matched to the "
                                    f"dimensions of grid {grid} of '{principal.name}' (thesis 4.6: one nested "
                                    "SDFG runs on one process grid)")
            a, ref = last_conflict
            what = (f"grid {grids[info.name]} of map '{info.name}'"
                    if explicit else f"map '{info.name}' (no grid in the schedule, and none derived)")
            raise ScheduleError(f"inconsistent schedule inside '{kernel.label}': {what} needs {a.array}[{a.subset}], "
                                f"but '{source[a.array]}' (grid {grid}) uses {a.array}[{ref}]; every map of one "
                                "nested SDFG must partition each array the same way (thesis 4.6)")
        g, cs, accesses = chosen
        plan.inner.append(InnerTiling(info, g, cs, derived=not explicit))
        for a in accesses:
            if a.array not in canonical:
                canonical[a.array] = a.subset
                source[a.array] = info.name
            if a.direction == Direction.OUT:
                writes.setdefault(a.array, set()).add(a.op)

    _check_outside_maps(kernel, canonical, grid, coords, writes)
    plan.body_constraints = canonical
    state = kernel.state
    used = None  # the body's data, read only for a connector no map constrains
    for direction, edges in ((Direction.IN, state.in_edges(kernel.node)), (Direction.OUT, state.out_edges(kernel.node))):
        for e in edges:
            arr = e.data.data
            if arr is None:
                continue
            own = e.dst_conn if direction == Direction.IN else e.src_conn
            conn = own if own in canonical else kernel.connectors.get((direction, arr))
            if conn not in canonical:
                if used is None:
                    used = {n.data for st in ordered_states(body) for n in st.data_nodes()}
                if own not in used:  # an argument a called function ignores
                    plan.unused = tuple(dict.fromkeys(plan.unused + (own, )))
                    continue
                raise UnsupportedPattern(arr, e.data.subset, f"'{kernel.label}' uses it (connector {conn}), but "
                                         "none of its maps accesses it, so no per-rank constraint exists")
            subset = _outer(canonical[conn], e.data, arr, conn)
            twin = next((a for a in plan.accesses if a.array == arr and a.direction == direction), None)
            if twin is not None:
                if same_subset(twin.subset, subset):
                    continue  # the same block on two connectors: one buffer serves both
                raise UnsupportedPattern(arr, f"{twin.subset}] and [{subset}", f"'{kernel.label}' takes the array on "
                                         "two connectors with different blocks per rank (e.g. A @ A); one rank-local "
                                         "buffer cannot serve both, so leave this kernel out of the schedule")
            if direction == Direction.IN:
                plan.accesses.append(Access(arr, Direction.IN, subset))
                continue
            ops = writes.get(conn, {None}) - {None}
            if len(ops) > 1:
                raise UnsupportedPattern(arr, canonical[conn], f"written with different conflict resolutions {ops}")
            op = ops.pop() if ops else None
            # A kernel that also takes the array as input accumulates onto its prior value; so does a body
            # none of whose maps initializes it (a Reduce without an identity adds the values to the output's).
            accumulates = op is not None and ((Direction.IN, arr) in kernel.connectors or None not in writes[conn])
            plan.accesses.append(Access(arr, Direction.OUT, subset, op, accumulates))
    refuse_views(sdfg, plan.accesses, kernel.label)
    refuse_growing_blocks(plan, kernel.label)
    return plan


def _outer(inner: subsets.Range, memlet, array, conn) -> subsets.Range:
    """A constraint on a nested connector, in the coordinates of the outer array."""
    outer = memlet.subset
    if outer.dims() == inner.dims():
        return subsets.Range([(b + ob, e + ob, s) for (b, e, s), (ob, _, _) in zip(inner, outer)])
    # ``A[r, :, :]`` passed as a 2-D array: the outer dimensions of extent one (indices) are dropped in
    # the connector; the others map to the connector's dimensions in order.
    ones = [d for d, (b, e, s) in enumerate(outer) if dace.symbolic.simplify(e - b + 1) == 1]
    drop = outer.dims() - inner.dims()
    if drop < 0 or len(ones) < drop:
        raise UnsupportedPattern(array, outer, f"connector '{conn}' views the array with a different number "
                                 "of dimensions, and not by dropping indexed dimensions")
    # Drop the leading indexed dimensions (``A[r, :, :]``); keep later ones that the connector may still have.
    dropped = set(ones[:drop])
    kept = [d for d in range(outer.dims()) if d not in dropped]
    ranges = [outer[d] for d in range(outer.dims())]
    for (b, e, s), d in zip(inner, kept):
        ob = outer[d][0]
        ranges[d] = (b + ob, e + ob, s)
    return subsets.Range(ranges)


def _check_outside_maps(kernel: Kernel, canonical, grid, coords, writes):
    """Partitioned arrays may only be touched inside the tiled maps (or every rank would touch all of it).

    A transient of the body that the maps only read, and read in the same elements on every rank (no grid
    coordinate in its constraint), is exempt: written outside the maps, every rank computes the same value
    (``rho0 * betaS`` before ``np.ones_like(t) * c``, in a program called from the map's state)."""
    if grid_size(grid) == 1:
        return
    coords = {str(c) for c in coords if c}
    for st in ordered_states(kernel.body):
        scope = st.scope_dict()
        for n in st.data_nodes():
            if n.data not in canonical or scope[n] is not None:
                continue
            desc = kernel.body.arrays.get(n.data)
            if desc is not None and desc.transient and n.data not in writes and \
                    not coords & {str(x) for x in canonical[n.data].free_symbols}:
                continue
            for e in st.in_edges(n) + st.out_edges(n):
                other = e.src if e.dst is n else e.dst
                if not isinstance(other, (nodes.MapEntry, nodes.MapExit)):
                    raise ScheduleError(f"'{kernel.label}' accesses '{n.data}' outside of its maps (state "
                                        f"'{st.label}'), so it cannot be partitioned")


def _candidates(info: MapInfo, explicit, grid, coords):
    """Possible (grid, coordinate symbols) for an inner map: from the schedule, or derived."""
    split = [d for d, g in enumerate(grid) if g > 1]
    if explicit is not None:
        big = [i for i, g in enumerate(explicit) if g > 1]
        for targets in itertools.permutations(split, len(big)):
            if all(explicit[i] == grid[t] for i, t in zip(big, targets)):
                cs = [None] * len(explicit)
                for i, t in zip(big, targets):
                    cs[i] = coords[t]
                yield tuple(explicit), tuple(cs)
        return
    options = []
    for ext in info.shape:
        opts = [(1, None)]
        # A symbolic extent (known when the program starts) may be split too: the tiles are computed at
        # run time, and consistency with the principal map is checked below.
        opts += [(grid[d], d) for d in split if not isinstance(ext, int) or grid[d] <= ext]
        options.append(opts)
    combos = []
    for combo in itertools.product(*options):
        used = [d for _, d in combo if d is not None]
        if len(used) != len(set(used)):
            continue
        combos.append(combo)
    combos.sort(key=lambda c: -grid_size([g for g, _ in c]))
    for combo in combos:
        yield tuple(g for g, _ in combo), tuple(coords[d] if d is not None else None for _, d in combo)
