"""Program preparation before the lowering plans its kernels (``split_kernels``: the lowering and the
search prepare a program the same way, through it).

- ``scalar_arguments_to_arrays``: scalar arguments read by kernels become one-element arrays, so a
  partitioned kernel receives them like any other block.
- ``fold_unit_axis_copies``: a transient that only copies another with unit axes added or removed
  (``keepdims=True``) is replaced by the array it copies.
- ``copy_fixed_rows_out``: a map that reads an array at its own index and at a fixed row (``x - x[row, :]``)
  reads the fixed row from a copy made before it.
- ``split_states``: one work node (map, nested SDFG, library node or tasklet) per state, with the copies
  that feed it in a state of their own before it and those that follow it in one after it (a copy between
  two of its own access nodes too), so the state of a kernel touches exactly what the kernel reads and writes.
"""
import copy
import functools
from typing import List, Optional

import dace
import numpy as np
from dace import nodes
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.graph import SubgraphView
from dace.sdfg.utils import dfs_topological_sort

from ..schedule import FreeSymbols, Kernel, discover, normalise, ordered_states
from ..schedule.loops import find_loops


def work_nodes(state: SDFGState):
    scope = state.scope_dict()
    return [
        n for n in dfs_topological_sort(state)
        if scope[n] is None and isinstance(n, (nodes.MapEntry, nodes.NestedSDFG, nodes.LibraryNode, nodes.Tasklet))
    ]


def scalar_arguments_to_arrays(sdfg: SDFG):
    """Scalar arguments that kernels read (``alpha * x``) are read through one-element transient arrays,
    filled from the argument on rank 0 when the program starts: a partitioned kernel then receives the
    value like any other block (DistributedMemlets and library nodes take pointers, not values).
    Scalars the program writes keep their argument (interstate conditions read the argument itself,
    whose value every rank has)."""
    names = [n for n, d in sdfg.arrays.items() if isinstance(d, dace.data.Scalar) and not d.transient]
    states = ordered_states(sdfg)
    for name in names:
        written = any(
            isinstance(n, nodes.AccessNode) and n.data == name and st.in_degree(n) > 0 for st in states
            for n in st.nodes())
        read = [st for st in states if any(isinstance(n, nodes.AccessNode) and n.data == name for n in st.nodes())]
        if written or not read:
            continue
        desc = sdfg.arrays[name]
        local = f"__dp_arg_{name}"
        sdfg.add_array(local, [1], desc.dtype, transient=True, storage=desc.storage, find_new_name=False)
        for st in read:
            for n in st.nodes():
                if isinstance(n, nodes.AccessNode) and n.data == name:
                    n.data = local
            for e in st.edges():
                if e.data.data == name:
                    e.data.data = local
        start = sdfg.start_block
        st = sdfg.add_state_before(start, f"dace_partition_arg_{name}", is_start_block=True)
        st.add_edge(st.add_read(name), None, st.add_write(local), None, Memlet(f"{local}[0]"))


def materialize_views(sdfg: SDFG):
    """Views at the top level of the program (``np.reshape``, ``A.T`` views, slices kept as views) become
    transient arrays filled by a copy from the viewed array (and copied back where the view is written).
    A kernel that reads a reshaped array then reads a real array, which it can partition like any other
    (a reshape that merges or splits trailing axes keeps each rank's rows contiguous); the copy runs on
    rank 0. A view whose shape follows a loop variable (correlation's ``data[:, i + 1:M]``) stays a view:
    no grid is planned for a tile that changes every iteration, so its kernel runs on rank 0, and a copy
    there would only cost time (correlation: 12 of its 20 ms). A view whose strides transpose (an einsum's
    operand) is not copied so (:func:`_copies_in_layout`): where it is only read, its readers read a copy
    made from the view itself (:func:`_read_through_copy`). Returns the names of the materialized views."""
    done = []
    free = FreeSymbols()
    for name, desc in list(sdfg.arrays.items()):
        if not isinstance(desc, dace.data.View):
            continue
        if free.loose(desc.shape, sdfg):
            continue
        used = any(n.data == name for st in ordered_states(sdfg) for n in st.data_nodes())
        viewed = _viewed_volume(sdfg, name)
        elements = functools.reduce(lambda x, y: x * y, desc.shape, 1)  # total_size is a strided view's span
        if not used or viewed is None or dace.symbolic.simplify(_constants(sdfg, viewed - elements)) != 0:
            continue  # a view of another size (``M // 2`` pieces of ``M``): kept, and refused if partitioned
        if not _copies_in_layout(sdfg, name, desc):
            if _read_through_copy(sdfg, name, desc):  # a transposing view (an einsum's operand)
                done.append(name)
            continue
        shape = [_constants(sdfg, x) for x in desc.shape]  # so the copy's two sides have equal sizes
        new = dace.data.Array(desc.dtype, shape, transient=True, storage=desc.storage)
        sdfg.arrays[name] = new
        for st, n in [(st, n) for st in ordered_states(sdfg) for n in st.data_nodes() if n.data == name]:
            for e, viewed_side in _edges_of(st, n):
                if viewed_side:  # the copy's two sides in numbers where specialized symbols make them equal
                    e.data.subset = _constant_range(sdfg, e.data.subset)
                    if e.data.other_subset is not None:
                        e.data.other_subset = _constant_range(sdfg, e.data.other_subset)
                if viewed_side and e.data.other_subset is None:
                    # The view edge names only the viewed array's subset: name the whole view too.
                    e.data.other_subset = dace.subsets.Range.from_array(new)
                for c in ("src_conn", "dst_conn"):
                    if getattr(e, c) == "views":
                        setattr(e, c, None)
            n.remove_in_connector("views")
            n.remove_out_connector("views")
        done.append(name)
    return done


def fold_unit_axis_copies(sdfg: SDFG) -> List[str]:
    """Transients that are a copy of another transient with unit axes added or removed are replaced by the
    array they copy; returns their names.

    ``np.max(x, axis=-1, keepdims=True)`` writes the reduction into ``__tmp1[N, M]``, a view of
    ``tmp[N, M, 1]``. DaCe 1.0.2's simplification removes that view in some runs and keeps it in others
    (NPBench's softmax, under different ``PYTHONHASHSEED`` values); kept, :func:`materialize_views` makes
    it a copy, which runs on rank 0 between two kernels: a gather and a scatter that fusion cannot
    remove. Folded, the readers index ``__tmp1``
    with the unit axes dropped, so the lowering is the same in every run and the round trip is gone.

    Folded only where the copy is exact and nothing else can see the difference: both arrays transient
    and whole on both sides of the copy, the copy the only write of the copy and the source written in
    one place (the copy's source node), and every read of the copy an element read by a tasklet (a
    library node or nested SDFG reads axes by position)."""
    writes: dict = {}  # array -> the edges into its access nodes
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            writes.setdefault(n.data, []).extend(st.in_edges(n))
    read_elsewhere = set()
    for e in sdfg.all_interstate_edges():
        read_elsewhere |= set(e.data.read_symbols())
    for r in sdfg.all_control_flow_regions():
        cond = getattr(r, "loop_condition", None)
        if cond is not None:
            read_elsewhere |= {str(x) for x in dace.symbolic.pystr_to_symbolic(cond.as_string).free_symbols}
    done = []
    for st in ordered_states(sdfg):
        for e in list(st.edges()):
            a, b = e.src, e.dst
            if not (isinstance(a, nodes.AccessNode) and isinstance(b, nodes.AccessNode)) or a.data == b.data:
                continue
            if b.data in done or a.data in done:
                continue
            da, db = sdfg.arrays.get(a.data), sdfg.arrays.get(b.data)
            if not (type(da) is dace.data.Array and type(db) is dace.data.Array and da.transient and db.transient):
                continue
            sa, sb = ([_constants(sdfg, x) for x in d.shape] for d in (da, db))
            if sa == sb or _non_unit(sa) != _non_unit(sb):
                continue
            if writes.get(b.data) != [e] or {id(w.dst) for w in writes[a.data]} != {id(a)}:
                continue
            if b.data in read_elsewhere or not _whole_copy(sdfg, e.data, a.data, sa, b.data, sb):
                continue
            if not all(_element_reads(s2, n) for s2 in ordered_states(sdfg) for n in s2.data_nodes() if n.data == b.data):
                continue
            _fold(sdfg, st, e, sa, sb)
            done.append(b.data)
    return done


def copy_fixed_rows_out(sdfg: SDFG) -> List[str]:
    """A map that reads an array both at its own index and at a row a loop variable picks (the deviations
    ``data - data[r, :]`` summed in a loop over rows ``r``, numpy-benchmarks' ``multiple_sum``) reads that
    row from a transient copied before it; returns the copies' names.

    Read through one memlet, a rank's box of the array spans its own block and the row: its size changes
    with the loop variable (refused, or widened to every row the loop visits by :mod:`..plan.loop_reads`).
    Apart, the map reads its block of the array, scattered once before the loop, and its part of the copy,
    which runs before it on rank 0 as the copies that feed a kernel do: one row broadcast per iteration.
    The copy holds the values from before the map, which is what NumPy computes (the right-hand side first).

    Not copied: rows of an array that a state of the loop writes (Floyd-Warshall's ``path``: the copy on
    rank 0 would bring the whole array back from its grid in every iteration), and constant rows
    (``x - x[0]``: a box of known size). A read is copied where an axis of it is one index with a loop
    variable and no map parameter while another read of the array through the same map moves along that
    axis with a parameter, and each of its other axes is fixed, a fixed range, or one parameter plus an
    offset (so the copy's box is exact; DaCe 1.0.2 propagates strided subscripts wrongly). The copy's size
    may not depend on a loop variable."""
    made = []
    free = FreeSymbols()
    loops = [(lp.body, {n.data for st in lp.body for n in st.data_nodes() if st.in_degree(n) > 0})
             for lp in find_loops(sdfg)]
    for state in ordered_states(sdfg):
        # an array a loop writes stays on its grid across iterations, which a copy on rank 0 would undo
        written = set().union(*[w for body, w in loops if state in body])
        for me in [n for n in state.nodes() if isinstance(n, nodes.MapEntry) and state.entry_node(n) is None]:
            for outer in list(state.in_edges(me)):
                if isinstance(outer.src, nodes.AccessNode) and outer.src.data not in written:
                    made += _copy_fixed_reads(sdfg, state, me, outer, free)
    return made


def _axis_kinds(subset, params):
    """Per axis of a subset: ("fixed", None) for one index without a map parameter, ("param", (p, offset))
    for ``p + offset``, ("range", None) for a range without parameters, None for anything else."""
    kinds = []
    for b, e, s in subset:
        b, e = dace.symbolic.pystr_to_symbolic(str(b)), dace.symbolic.pystr_to_symbolic(str(e))
        used = [f for f in (b.free_symbols | e.free_symbols) if str(f) in params]
        if not used:
            kinds.append(("fixed", None) if b == e else (("range", None) if s == 1 else None))
        elif b == e and len(used) == 1 and b.diff(used[0]) == 1 and used[0] not in (b - used[0]).free_symbols:
            kinds.append(("param", (str(used[0]), b - used[0])))
        else:
            kinds.append(None)
    return kinds


def _copy_fixed_reads(sdfg: SDFG, state: SDFGState, me: nodes.MapEntry, outer, free) -> List[str]:
    src = outer.src  # an access node (the caller's check)
    if (outer.dst_conn is None or not outer.dst_conn.startswith("IN_")
            or type(sdfg.arrays[src.data]) is not dace.data.Array or outer.data.data != src.data):
        return []
    name, desc = src.data, sdfg.arrays[src.data]
    conn = "OUT_" + outer.dst_conn[3:]
    inner = list(state.out_edges_by_connector(me, conn))
    params = [str(p) for p in me.map.params]
    ranges = dict(zip(params, me.map.range))
    if len(inner) < 2 or any(ie.data.data != name or ie.data.wcr is not None or ie.data.dynamic
                             or ie.data.other_subset is not None or not isinstance(ie.data.subset, dace.subsets.Range)
                             or ie.data.subset.dims() != len(desc.shape) for ie in inner):
        return []
    writes = any(isinstance(n, nodes.AccessNode) and n.data == name for n in state.scope_subgraph(me).nodes()
                 if n is not me) or any(e.data.data == name for e in state.out_edges(state.exit_node(me)))
    kinds = [_axis_kinds(ie.data.subset, params) for ie in inner]
    moves = [[bool({str(f) for x in r[:2] for f in dace.symbolic.pystr_to_symbolic(str(x)).free_symbols} & set(params))
              for r in ie.data.subset] for ie in inner]
    boxes = {}
    for ie, kind, own in zip(inner, kinds, moves):
        if any(k is None for k in kind) or (writes and not isinstance(ie.dst, nodes.Tasklet)):
            continue
        used = [k[1][0] for k in kind if k[0] == "param"]
        if len(used) != len(set(used)) or any(ranges[p][2] != 1 for p in used):
            continue
        if not any(k[0] == "fixed" and any(m[d] for m in moves if m is not own)
                   and free.loose([ie.data.subset[d][0]], sdfg) for d, k in enumerate(kind)):
            continue  # one box holds them all, and its size does not change while the program runs
        box = [(r[0], r[1], 1) if k[0] != "param" else (ranges[k[1][0]][0] + k[1][1], ranges[k[1][0]][1] + k[1][1], 1)
               for k, r in zip(kind, ie.data.subset)]
        shape = [dace.symbolic.simplify(e - b + 1) for b, e, _ in box]
        if free.loose(shape, sdfg):
            continue
        boxes.setdefault(str(box), (box, shape, []))[2].append((ie, kind))
    made = []
    for box, shape, reads in boxes.values():
        copy_name, copy_desc = sdfg.add_transient(f"{name}_fixed", shape, desc.dtype, storage=desc.storage,
                                                  find_new_name=True)
        node = state.add_access(copy_name)
        state.add_edge(src, None, node, None, Memlet(data=name, subset=dace.subsets.Range(box),
                                                     other_subset=dace.subsets.Range.from_array(copy_desc)))
        me.add_in_connector("IN_" + copy_name)
        me.add_out_connector("OUT_" + copy_name)
        state.add_edge(node, None, me, "IN_" + copy_name, Memlet.from_array(copy_name, copy_desc))
        for ie, kind in reads:
            at = [(0, 0, 1) if k[0] == "fixed" else
                  ((0, e - b, 1) if k[0] == "range" else (dace.symbolic.pystr_to_symbolic(k[1][0]) - box_d[0] + k[1][1],) * 2 + (1, ))
                  for k, (b, e, _), box_d in zip(kind, ie.data.subset, box)]
            state.add_edge(me, "OUT_" + copy_name, ie.dst, ie.dst_conn, Memlet(data=copy_name, subset=dace.subsets.Range(at)))
            state.remove_edge(ie)
        made.append(copy_name)
    if made and not list(state.out_edges_by_connector(me, conn)):
        state.remove_edge(outer)
        me.remove_in_connector(outer.dst_conn)
        me.remove_out_connector(conn)
    return made


def _is_unit(size) -> bool:
    return str(size) == "1"


def _non_unit(shape) -> tuple:
    return tuple(str(x) for x in shape if not _is_unit(x))


def _whole_copy(sdfg: SDFG, memlet: Memlet, src: str, src_shape, dst: str, dst_shape) -> bool:
    """Whether ``memlet`` copies all of ``src`` onto all of ``dst`` (shapes with the specialized sizes as
    numbers), element by element in order."""
    own, other = memlet.subset, memlet.other_subset
    sides = {memlet.data: own, (dst if memlet.data == src else src): other}
    for name, shape in ((src, src_shape), (dst, dst_shape)):
        sub = sides.get(name)
        if sub is None:
            continue  # the side the memlet does not name is the whole array
        if not isinstance(sub, dace.subsets.Range) or len(sub.ranges) != len(shape):
            return False
        for (lo, hi, step), size in zip(sub.ranges, shape):
            lo, hi, step = (_constants(sdfg, x) for x in (lo, hi, step))
            if lo != 0 or step != 1 or dace.symbolic.simplify(hi + 1 - size) != 0:
                return False
    return True


def _element_reads(state: SDFGState, node) -> bool:
    """Whether ``node`` is read only one element at a time by tasklets (through maps or directly)."""
    for e in state.out_edges(node):
        for leaf in state.memlet_tree(e).leaves():
            if not isinstance(leaf.dst, nodes.Tasklet) or leaf.data.subset is None \
                    or leaf.data.subset.num_elements() != 1 or leaf.data.other_subset is not None:
                return False
    return True


def _fold(sdfg: SDFG, state: SDFGState, copy_edge, kept_shape, gone_shape):
    """Readers of the copy's destination read its source: every memlet of the destination names the
    source's elements (the unit axes of one dropped, those of the other at index 0)."""
    src, dst = copy_edge.src, copy_edge.dst
    gone, kept = dst.data, src.data
    keep_axes = [d for d, x in enumerate(gone_shape) if not _is_unit(x)]
    into = [d for d, x in enumerate(kept_shape) if not _is_unit(x)]
    for st in ordered_states(sdfg):
        for e in st.edges():
            if e.data.data != gone:
                continue
            rng = [(0, 0, 1)] * len(kept_shape)
            for d_from, d_to in zip(keep_axes, into):
                rng[d_to] = e.data.subset.ranges[d_from]
            e.data.data = kept
            e.data.subset = dace.subsets.Range(rng)
    for e in list(state.out_edges(dst)):
        state.add_edge(src, e.src_conn, e.dst, e.dst_conn, e.data)
    state.remove_node(dst)
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            if n.data == gone:
                n.data = kept
    del sdfg.arrays[gone]


def _constants(sdfg: SDFG, expr):
    """``expr`` with the symbols ``sdfg.specialize`` fixed replaced by their values."""
    consts = {k: v for k, (_, v) in sdfg.constants_prop.items() if isinstance(v, (int, np.integer))}
    expr = dace.symbolic.pystr_to_symbolic(str(expr))
    return expr.subs({x: consts[str(x)] for x in expr.free_symbols if str(x) in consts})


def _constant_range(sdfg: SDFG, rng):
    if not isinstance(rng, dace.subsets.Range):
        return rng
    return dace.subsets.Range([tuple(_constants(sdfg, x) for x in r) for r in rng.ranges])


def _viewed_volume(sdfg: SDFG, name: str):
    """Elements of the viewed array's subset on the view edges of ``name`` (None if they disagree)."""
    vols = {dace.symbolic.simplify(e.data.subset.num_elements())
            for st in ordered_states(sdfg) for n in st.data_nodes() if n.data == name
            for e, viewed_side in _edges_of(st, n) if viewed_side}
    return vols.pop() if len(vols) == 1 else None


def _read_through_copy(sdfg: SDFG, name: str, view) -> bool:
    """A view that is only read, and whose layout an index-order copy would not keep: its readers read a
    copy of it instead, an array of the view's shape filled element by element from the view (the copy
    runs on rank 0 before them; the view stays, fed by its array). Returns whether it was done; a view
    that is written stays as it is (refused where partitioned)."""
    found = [(st, n) for st in ordered_states(sdfg) for n in st.data_nodes() if n.data == name]
    if any(not viewed_side for st, n in found for e, viewed_side in _edges_of(st, n) if e.dst is n):
        return False
    shape = [_constants(sdfg, x) for x in view.shape]
    copy_name = sdfg.add_array(f"{name}_copy", shape, view.dtype, storage=view.storage, transient=True,
                               find_new_name=True)[0]
    for st, n in found:
        readers = [e for e, viewed_side in _edges_of(st, n) if e.src is n and not viewed_side]
        if not readers:
            continue
        c = st.add_access(copy_name)
        whole = dace.subsets.Range.from_array(sdfg.arrays[copy_name])
        st.add_edge(n, None, c, None, Memlet(data=name, subset=dace.subsets.Range.from_array(view),
                                             other_subset=whole))
        for e in readers:
            st.remove_edge(e)
            new = st.add_edge(c, None, e.dst, e.dst_conn, copy.deepcopy(e.data))
            for t in st.memlet_tree(new):  # into a map: its inner memlets too
                if t.data.data == name:
                    t.data.data = copy_name
    return True


def _copies_in_layout(sdfg: SDFG, name: str, view) -> bool:
    """Whether a copy of the viewed elements into an array of the view's shape, element by element in index
    order, puts each where the view has it. True for a slice (the view's dimensions of more than one element
    are the subset's, with its strides) and for a reshape of a contiguous block; False for a view whose
    strides transpose (``einsum('ikl,kl->i')`` reads ``a`` as a ``(144, 12)`` view with strides ``(1, 144)``:
    copied in index order, it held ``a``'s elements in the wrong places)."""
    def eq(x, y):
        return dace.symbolic.simplify(_constants(sdfg, x) - _constants(sdfg, y)) == 0

    def wide(sizes, strides):
        return [(n, st) for n, st in zip(sizes, strides) if not eq(n, 1)]

    def contiguous(dims):
        inner = 1
        for n, st in reversed(dims):
            if not eq(st, inner):
                return False
            inner = inner * n
        return True

    mine = wide(view.shape, view.strides)
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            if n.data != name:
                continue
            for e, viewed_side in _edges_of(st, n):
                if not viewed_side:
                    continue
                parent = sdfg.arrays[e.data.data]
                sub = e.data.subset
                theirs = wide(sub.size(), [s * step for s, (_, _, step) in zip(parent.strides, sub.ranges)])
                if len(mine) == len(theirs) and all(eq(a, b) for (a, _), (b, _) in zip(mine, theirs)):
                    ok = all(eq(a, b) for (_, a), (_, b) in zip(mine, theirs))
                else:
                    ok = contiguous(mine) and contiguous(theirs)
                if not ok:
                    return False
    return True


def _edges_of(state, node):
    """Every edge of ``node``, with whether its memlet names the array on the other end (a view edge)."""
    for e in state.in_edges(node) + state.out_edges(node):
        other = e.src if e.dst is node else e.dst
        yield e, isinstance(other, nodes.AccessNode) and e.data.data == other.data


def split_kernels(sdfg: SDFG, named: Optional[List[Kernel]] = None) -> List[Kernel]:
    """Splits ``sdfg``'s states in place (:func:`split_states`) and returns its kernels, with the map names
    discovery gave them before the split: the names a schedule is written against. The lowering and the
    search's cost model both prepare a program through this, so they plan the same kernels. ``named``: the
    kernels already discovered on ``sdfg`` as it is (``lower`` has them from its map fusion), so discovery
    runs once here, after the split."""
    if named is None:
        named = discover(normalise(sdfg))
    split_states(sdfg)
    return keep_names(discover(sdfg), named)


def keep_names(kernels: List[Kernel], before: List[Kernel]) -> List[Kernel]:
    """``kernels`` with the map names of the same kernels in ``before``: names made unique in discovery
    order would change when the states are split (another order), and the user's grids would go to other
    maps (a 2-parameter map given a 3-entry grid reads as a replicate() grid). A kernel is the same node,
    or (a library node replaced by its expansion) a node of the same label in the same state."""
    by_node = {id(k.node): k for k in before}
    by_label = {(id(k.state), k.label): k for k in before}
    for k in kernels:
        old = by_node.get(id(k.node)) or by_label.get((id(k.state), k.label))
        if old is not None and len(old.maps) == len(k.maps):
            for m, o in zip(k.maps, old.maps):
                m.name = o.name
    return kernels


def split_states(sdfg: SDFG):
    """One work node per state (see the module docstring), so each state can run on its own ranks."""
    scalar_arguments_to_arrays(sdfg)
    materialize_views(sdfg)
    fold_unit_axis_copies(sdfg)
    copy_fixed_rows_out(sdfg)
    for state in ordered_states(sdfg):
        while True:
            work = work_nodes(state)
            if not work:
                break
            first = work[0]
            if isinstance(first, nodes.MapEntry):
                body = set(state.scope_subgraph(first, include_entry=True, include_exit=True).nodes())
                ends = (first, state.exit_node(first))
            else:
                body = {first}
                ends = (first, first)
            # A view the work node reads or writes stays with it, and so does the array it views: a view
            # without its view edge is invalid (DaCe: "Ambiguous or invalid edge to/from a View").
            direct = _with_viewed(state, {e.src for e in state.in_edges(ends[0])}, upstream=True)
            # Copies that feed the work node (``a[i, i] -> __tmp``) run in a state of their own before it
            # (on rank 0). By topological order, no ancestor of the first work node is a work node.
            before, frontier = set(), [n for n in direct if state.in_degree(n) > 0 and not _is_view(state, n)]
            while frontier:
                n = frontier.pop()
                if n in before:
                    continue
                before.add(n)
                frontier += [e.src for e in state.in_edges(n)]
            if before:
                fission(state, before)
                continue
            body |= direct | _with_viewed(state, {e.dst for e in state.out_edges(ends[1])}, upstream=False)
            # A copy between two of the kernel's own access nodes (``out[:, :, 0] = q`` beside a map that
            # reads ``q`` and writes ``out[:, :, 3]``) is not the kernel's work: it runs in the state after.
            scope = state.scope_dict()
            copies = [e for e in SubgraphView(state, list(body)).edges()
                      if _is_copy(state, e) and scope[e.src] is None and scope[e.dst] is None]  # not inside a map
            if len(body) == state.number_of_nodes() and not copies:
                break  # exactly one work node and its own access nodes
            fission(state, body, left=copies)
    bound_loop_sized_transients(sdfg)


def bound_loop_sized_transients(sdfg: SDFG):
    """Transients whose size depends on a loop variable (``data[:, i] @ data[:, i:M]`` -> ``M - i``
    elements) and that now span several states get their largest size over the loop instead: DaCe 1.0.2
    cannot generate a transient sized by a loop variable that spans states in different branches (the
    rank guards): "Variable ... has not been defined". The accesses keep their subsets. Returns the
    names changed."""
    loops = _loop_ranges(sdfg)
    if not loops:
        return []
    uses = {}
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            uses.setdefault(n.data, set()).add(st)
    changed = []
    consts = {dace.symbolic.symbol(k): v for k, (_, v) in sdfg.constants_prop.items() if isinstance(v, (int, np.integer))}
    for name, desc in sdfg.arrays.items():
        if (not desc.transient or type(desc) is not dace.data.Array or len(uses.get(name, ())) < 2
                or not {str(x) for x in desc.free_symbols} & loops.keys()):
            continue
        shape = [_loop_max(e, loops, consts) for e in desc.shape]
        if any(e is None for e in shape):
            continue
        desc.set_shape(shape)
        changed.append(name)
    return changed


def _loop_ranges(sdfg: SDFG):
    """{loop variable: (first, last)} of the top-level loops: LoopRegions, and state-machine loops (one
    edge assigns the variable a value without it, one steps it by a constant, one condition compares it
    with the bound). Variables assigned otherwise are left out."""
    from dace.sdfg.state import LoopRegion
    from dace.transformation.passes.analysis import loop_analysis as la
    import sympy
    loops, inits, steps, conds = {}, {}, {}, {}
    try:
        for r in sdfg.all_control_flow_regions():
            if isinstance(r, LoopRegion) and r.loop_variable:
                lo, hi = la.get_init_assignment(r), la.get_loop_end(r)
                if lo is not None and hi is not None:
                    loops[r.loop_variable] = (lo, hi)
        for e in sdfg.all_interstate_edges():
            for var, val in e.data.assignments.items():
                expr = dace.symbolic.pystr_to_symbolic(val)
                d = dace.symbolic.simplify(expr - dace.symbolic.symbol(var))
                if var in {str(x) for x in expr.free_symbols}:
                    steps.setdefault(var, set()).add(d)
                else:
                    inits.setdefault(var, set()).add(expr)
            c = dace.symbolic.pystr_to_symbolic(e.data.condition.as_string)
            if isinstance(c, (sympy.StrictLessThan, sympy.LessThan, sympy.StrictGreaterThan, sympy.GreaterThan)) \
                    and isinstance(c.lhs, sympy.Symbol):
                conds.setdefault(str(c.lhs), set()).add(c)
        for var in inits:
            if var in loops or len(inits[var]) != 1 or len(steps.get(var, ())) != 1:
                continue
            (lo, ), (st, ) = inits[var], steps[var]
            if not getattr(st, "is_number", False) or st == 0:
                continue
            up = (sympy.StrictLessThan, sympy.LessThan) if st > 0 else (sympy.StrictGreaterThan, sympy.GreaterThan)
            stay = [c for c in conds.get(var, ()) if isinstance(c, up)]  # the exit edge compares the other way
            if len(stay) != 1:
                continue
            c = stay[0]
            if st > 0 and isinstance(c, (sympy.StrictLessThan, sympy.LessThan)):
                loops[var] = (lo, c.rhs - 1 if isinstance(c, sympy.StrictLessThan) else c.rhs)
            elif st < 0 and isinstance(c, (sympy.StrictGreaterThan, sympy.GreaterThan)):
                loops[var] = (c.rhs + 1 if isinstance(c, sympy.StrictGreaterThan) else c.rhs, lo)
    except Exception:  # noqa: BLE001 - an assignment or condition sympy cannot read: no bounds known
        pass
    return loops


def _loop_max(expr, loops, consts):
    """The largest value of ``expr`` (affine in the loop variables) over the loops' ranges, or None where
    that cannot be decided symbolically. A loop variable's coefficient decides which end gives it (the
    transient exists only while the loop runs, so its first value is at most its last: ``M - i`` over
    ``0..M-1`` is largest at 0 although ``M - 1`` has no sign for an integer ``M``); where the coefficient
    has no sign, the two ends are compared."""
    import sympy
    expr = dace.symbolic.pystr_to_symbolic(str(expr))
    loops = {v: (dace.symbolic.pystr_to_symbolic(str(lo)).subs(consts), dace.symbolic.pystr_to_symbolic(str(hi)).subs(consts))
             for v, (lo, hi) in loops.items()}
    for _ in range(len(loops) + 1):
        free = [str(x) for x in getattr(expr, "free_symbols", ())]
        var = next((v for v in free if v in loops), None)
        if var is None:
            return expr
        lo, hi = loops[var]
        sym = next(x for x in expr.free_symbols if str(x) == var)
        a, b = expr.subs(sym, lo), expr.subs(sym, hi)
        c = dace.symbolic.simplify(sympy.diff(expr, sym))
        if var not in {str(x) for x in c.free_symbols} and (c.is_nonnegative or c.is_nonpositive):
            expr = b if c.is_nonnegative else a
        else:
            d = dace.symbolic.simplify(a - b)
            if d.is_nonnegative:
                expr = a
            elif d.is_nonpositive:
                expr = b
            else:
                return None
        expr = dace.symbolic.simplify(expr)
    return None


def _is_view(state: SDFGState, n) -> bool:
    return isinstance(n, nodes.AccessNode) and isinstance(n.desc(state.sdfg), dace.data.View)


def _is_copy(state: SDFGState, e) -> bool:
    """Whether ``e`` copies between two access nodes, neither of them a view (a view edge is no copy)."""
    return (isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode) and not _is_view(state, e.src)
            and not _is_view(state, e.dst))


def _with_viewed(state: SDFGState, found, upstream: bool):
    """``found`` with, for every view among them, the access node it views (on the side away from the
    work node: its source for a view that is read, its destination for one that is written), transitively
    (a view of a view)."""
    out, todo = set(found), [n for n in found if _is_view(state, n)]
    while todo:
        v = todo.pop()
        for e in (state.in_edges(v) if upstream else state.out_edges(v)):
            nxt = e.src if upstream else e.dst
            if isinstance(nxt, nodes.AccessNode) and nxt not in out:
                out.add(nxt)
                if _is_view(state, nxt):
                    todo.append(nxt)
    return out


def fission(state: SDFGState, subgraph, left=()):
    """Moves ``subgraph`` of ``state`` into a new state before it; its access nodes that also have edges
    to or from nodes outside it (boundary nodes) are duplicated, one copy in each state. The edges in
    ``left`` stay in ``state`` with their nodes.

    The package's own fission, the same on both DaCe generations: DaCe 1.0.2's ``state_fission`` did
    exactly this, DaCe 2's (``dace/transformation/helpers.py``) adds every upstream node to the first state
    and asserts that a boundary node keeps no in-edge in the second state, which an edge between two
    boundary nodes violates (``L -> L_0`` where both are read after it: NPBench's trisolv crashed with a
    bare ``AssertionError``)."""
    import copy
    was_start = state.parent_graph.start_block is state
    chosen = set(subgraph)
    ordered = [n for n in state.nodes() if n in chosen]  # the state's order, not the set's (addresses)
    view = SubgraphView(state, ordered)
    left = set(left)
    moved = [e for e in view.edges() if e not in left]
    boundary = {n for n in ordered if len(state.out_edges(n)) > len([e for e in view.out_edges(n) if e not in left])
                or len(state.in_edges(n)) > len([e for e in view.in_edges(n) if e not in left])}
    new = state.parent_graph.add_state_before(state)
    placed = {n: (copy.deepcopy(n) if n in boundary else n) for n in ordered}
    state.remove_nodes_from([n for n in ordered if n not in boundary])
    for e in moved:  # an edge between two boundary nodes stays behind too: it runs in the new state
        if e.src in boundary and e.dst in boundary:
            state.remove_edge(e)
    for n in placed.values():
        new.add_node(n)
        if isinstance(n, nodes.NestedSDFG):
            n.sdfg.parent = new
    for e in moved:
        new.add_edge(placed[e.src], e.src_conn, placed[e.dst], e.dst_conn, e.data)
    for n in boundary:  # in the old state its value comes from the new one, not through a connector
        n._in_connectors.clear()
    if was_start:
        state.parent_graph.start_block = state.parent_graph.node_id(new)
