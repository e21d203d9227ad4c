"""Program preparation before the lowering plans its kernels (``split_kernels``: the lowering and the
search prepare a program the same way, through it).

- ``scalar_arguments_to_arrays``: scalar arguments read by kernels become one-element arrays, so a
  partitioned kernel receives them like any other block.
- ``split_states``: one work node (map, nested SDFG, library node or tasklet) per state, with the copies
  that feed it in a state of their own before it and those that follow it in one after it, so the state
  of a kernel touches exactly what the kernel reads and writes.
"""
import functools
from typing import List

import dace
import numpy as np
from dace import nodes
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.graph import SubgraphView
from dace.sdfg.utils import dfs_topological_sort

from ..schedule import FreeSymbols, Kernel, discover, ordered_states


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
    there would only cost time (correlation: 12 of its 20 ms). Returns the names of the materialized views."""
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


def _edges_of(state, node):
    """Every edge of ``node``, with whether its memlet names the array on the other end (a view edge)."""
    for e in state.in_edges(node) + state.out_edges(node):
        other = e.src if e.dst is node else e.dst
        yield e, isinstance(other, nodes.AccessNode) and e.data.data == other.data


def split_kernels(sdfg: SDFG) -> List[Kernel]:
    """Splits ``sdfg``'s states in place (:func:`split_states`) and returns its kernels, with the map names
    discovery gave them before the split: the names a schedule is written against. The lowering and the
    search's cost model both prepare a program through this, so they plan the same kernels."""
    named = discover(sdfg)
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
            if len(body) == state.number_of_nodes():
                break  # exactly one work node and its own access nodes
            fission(state, body)
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
    that cannot be decided symbolically."""
    expr = dace.symbolic.pystr_to_symbolic(str(expr))
    loops = {v: (dace.symbolic.pystr_to_symbolic(str(lo)).subs(consts), dace.symbolic.pystr_to_symbolic(str(hi)).subs(consts))
             for v, (lo, hi) in loops.items()}
    for _ in range(len(loops) + 1):
        free = [str(x) for x in getattr(expr, "free_symbols", ())]
        var = next((v for v in free if v in loops), None)
        if var is None:
            return expr
        lo, hi = loops[var]
        sym = dace.symbolic.symbol(var)
        a, b = expr.subs(sym, lo), expr.subs(sym, hi)
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


def fission(state: SDFGState, subgraph):
    """Moves ``subgraph`` of ``state`` into a new state before it; its access nodes that also have edges
    to or from nodes outside it (boundary nodes) are duplicated, one copy in each state.

    The package's own fission, the same on both DaCe generations: DaCe 1.0.2's ``state_fission`` did
    exactly this, DaCe 2's (``dace/transformation/helpers.py``) adds every upstream node to the first state
    and asserts that a boundary node keeps no in-edge in the second state, which an edge between two
    boundary nodes violates (``L -> L_0`` where both are read after it: NPBench's trisolv crashed with a
    bare ``AssertionError``)."""
    import copy
    was_start = state.parent_graph.start_block is state
    view = SubgraphView(state, list(subgraph))
    moved = list(view.edges())
    members = set(view.nodes())
    boundary = {n for n in members if len(state.out_edges(n)) > len(view.out_edges(n))
                or len(state.in_edges(n)) > len(view.in_edges(n))}
    new = state.parent_graph.add_state_before(state)
    placed = {n: (copy.deepcopy(n) if n in boundary else n) for n in members}
    state.remove_nodes_from(members - boundary)
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
