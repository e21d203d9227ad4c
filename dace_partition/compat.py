"""Every difference between the two generations of DaCe the package runs on: 1.0.2 and 2.x (docs/dace2.md).

The rest of the package calls these helpers instead of asking which DaCe it runs on:

* :data:`DACE_MAJOR` / :data:`DACE_VERSION`: the installed generation.
* :func:`as_range`: DaCe 1.0.2 has a ``subsets.Indices`` subset (a point per dimension); DaCe 2 removed
  it and writes every point as a ``Range`` of one element.
* :func:`to_state_machine`: DaCe 2's Python frontend keeps loops and branches as control-flow regions
  (``LoopRegion``, ``ConditionalBlock``); 1.0.2's frontend builds the same regions and then inlines them
  into a state machine. The package's passes read that state machine, so DaCe 2 programs are inlined the
  same way where the package first takes an SDFG.
* :func:`all_states`: ``all_states()`` of 1.0.2 is ``states()`` in DaCe 2.
* :func:`add_nested_sdfg`: DaCe 2 dropped the parent-SDFG argument of ``add_nested_sdfg``.
* :func:`is_one_element_scalar`: DaCe 2's expansions write Scalars where 1.0.2's wrote ``[1]`` arrays.
* :func:`memlets_name_written_array`: DaCe 2's ``MapFusion`` names a shared intermediate's write by the
  fusion's transient (``t[0, 0, 0] -> A[i, j, k]``); the analysis reads memlets named by the array.
* :func:`comm_library`: DaCe's MPI library module (``dace.libraries.comm`` in DaCe 2, where
  ``dace.libraries.mpi`` is a deprecated alias; ``dace.libraries.mpi`` in 1.0.2).
* :func:`config_dict`: DaCe's configuration dict moved into a thread-local object in DaCe 2.
* :func:`construct_arguments`, :func:`fast_call`: the ``CompiledSDFG`` call interface (public
  ``construct_arguments`` in DaCe 2; ``fast_call`` no longer converts the return values).
* :func:`array_pointer`: DaCe 2 dropped ``compiled_sdfg._array_interface_ptr``.
* :func:`one_build_folder`: DaCe 2 gives each rank of a launched job its own build folder
  (``cache_distaware``); the package builds on one rank only and the others load that folder.
* :func:`rebase_nested_argument`, :func:`shift_accesses`: DaCe 2's frontend passes a map body's nested
  SDFG whole arrays (1.0.2's passed the elements); a rank-local block then needs the inner indices shifted.
  :func:`restride_narrowed_argument`: 1.0.2's narrowed arguments keep the global array's strides, which a
  rank-local block split along an inner dimension does not have.
* :func:`whole_array_map_bodies`: DaCe 2's map bodies take whole arrays through one connector for what they
  read and write, with element reads on interstate edges whose bounding box DaCe computes unsoundly; the
  reads get a connector of their own and a sound memlet.
* :func:`return_array_names`: the order of a returned tuple; 1.0.2 returns it in the sorted order of its
  ``__return_<j>`` names (``__return_10`` before ``__return_2``), DaCe 2 in the order of ``j``.
* :func:`loop_of_match`: what a ``LoopToMap`` match is a loop of: 1.0.2 matches a state-machine loop (guard,
  body states; ``loop_information()``), DaCe 2 a ``LoopRegion`` (``xf.loop``).
* :func:`process_grids`: DaCe's own process grids (``dace.comm.Cart_create``) are data descriptors in
  ``sdfg.arrays`` in DaCe 2 and a separate ``sdfg._pgrids`` table in 1.0.2.
* :func:`loops_sharing_a_variable`: DaCe 1.0.2's frontend passes wrong elements into a map body whose two
  for-loops share a variable name but not a range (DaCe 2 gets them right); such programs are refused.
* :func:`misplaced_nested_arguments`: the same frontend's memlets into a map body that name fewer or more
  elements than the body's array (symbolic loop bounds); such programs are refused too.
* :func:`reduce_axes_of_indexed_slices`: DaCe 1.0.2's simplification leaves a reduction of an indexed slice
  (``np.sum(x[t, :, 6:], 0)``) numbering the slice's axes against the whole array (DaCe 2 keeps the slice's
  view); where that is certain, the axes are mended.
* :func:`line_info_from_frames`, :func:`with_line_info_from_frames`: how each generation finds the file and
  line of a node it adds.
"""
import contextlib
import functools
import importlib
import sys
from typing import Dict

import dace
import sympy
from dace import nodes, subsets
from dace.properties import CodeBlock

DACE_VERSION: str = dace.__version__
DACE_MAJOR: int = int(DACE_VERSION.split(".")[0])

#: DaCe 1.0.2's point subset; None in DaCe 2, which has none.
_INDICES = getattr(subsets, "Indices", None)


def return_array_names(count: int) -> list:
    """Names of the ``__return_<j>`` arrays (``j``: the position in the ``return`` statement) in the order a
    compiled program hands back a tuple of ``count`` results: DaCe 1.0.2 sorts the names as strings
    (``__return_10`` comes before ``__return_2``), DaCe 2 keeps ``j``'s order
    (``dace/codegen/compiled_sdfg.py``). Code that writes a ``return`` statement must know which it gets,
    or results past the tenth change places."""
    names = [f"__return_{j}" for j in range(count)]
    return sorted(names) if DACE_MAJOR < 2 else names


def as_range(subset):
    """``subset`` as a ``subsets.Range`` when it is a point subset (DaCe 1.0.2's ``Indices``); any other
    subset is returned unchanged (the caller refuses what is not a range)."""
    if _INDICES is not None and isinstance(subset, _INDICES):
        return subsets.Range.from_indices(subset)
    return subset


def is_point_subset(subset) -> bool:
    """Whether ``subset`` is DaCe 1.0.2's ``Indices`` (never true on DaCe 2)."""
    return _INDICES is not None and isinstance(subset, _INDICES)


def stepped_elements(sdfg):
    """(array, subset, state) of each memlet that names one element with a step other than 1 in some
    dimension (``x[i:i+1:2]``, printed ``x[i:2]``). DaCe 1.0.2's simplification leaves this where it folds a
    strided view into the map that reads it (``y[:] = x[::2] + x[1::2]``): the view's step lands on the
    one-element range instead of scaling the index, so the program reads ``x[i]`` for ``x[2 * i]`` and
    computes a wrong result even in one process. A step on one element means nothing to DaCe, so such a
    memlet is never written on purpose. Before simplification the same slice shows as a view whose own side
    of the edge that fills it has the step (:func:`_stepped_view_side`)."""
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        for st in all_states(sd):
            for e in st.edges():
                m = e.data
                for sub in (m.subset, m.other_subset):
                    if isinstance(sub, subsets.Range) and any(step != 1 and (b == end) is True
                                                              for b, end, step in sub.ranges):
                        out.append((m.data, str(sub), st.label))
                        break
                else:
                    out += _stepped_view_side(sd, st, e)
    return out


def _stepped_view_side(sdfg, state, edge):
    """The same bug before simplification: the view of a strided slice gets unit strides and the step is
    written on the view's own side of the edge that fills it (``x[0:2*N:2] -> [0:2*N:2]`` for a view of N
    elements)."""
    for node, sub in ((edge.src, edge.data.get_src_subset(edge, state)),
                      (edge.dst, edge.data.get_dst_subset(edge, state))):
        desc = sdfg.arrays.get(node.data) if isinstance(node, nodes.AccessNode) else None
        if isinstance(desc, dace.data.View) and isinstance(sub, subsets.Range) and \
                any(step != 1 for _, _, step in sub.ranges):
            return [(node.data, str(sub), state.label)]
    return []


def _body_for_loops(sdfg):
    """(body, its nested-SDFG node, [(loop, (variable, (start, end, step)))]) for each map body or nested
    program of ``sdfg``: the for-loops DaCe recognises among its own states."""
    from .schedule.loops import find_loops
    for sd in sdfg.all_sdfgs_recursive():
        node = sd.parent_nsdfg_node
        if node is None:
            continue
        yield sd, node, [(lp, found) for lp in find_loops(sd) for found in (lp.for_range(sd), ) if found]


def loops_sharing_a_variable(sdfg):
    """(outer array, outer subset, loop variable, the loops' ranges) for each argument of a map body or nested
    program that two of its for-loops with different ranges index by one variable name. DaCe 1.0.2's
    frontend keeps one range per variable name for the memlets that pass arrays into such a body (it warns:
    "Two for-loops using the same variable ... but different ranges in the same nested SDFG level"), so
    the memlet of a loop's access starts at the other loop's first index and the program reads and writes
    shifted elements, even in one process. DaCe 2 keeps loops as regions and gets them right."""
    if DACE_MAJOR >= 2:
        return []
    out = []
    for sd, node, loops_found in _body_for_loops(sdfg):
        ranges = {}
        for lp, (var, rng) in loops_found:
            ranges.setdefault(var, []).append((tuple(map(str, rng)), lp))
        for var, loops in ranges.items():
            if len({r for r, _ in loops}) < 2:
                continue
            for conn in _indexed_arguments(sd, var, [lp for _, lp in loops]):
                outer = _outer_memlet(sd.parent, node, conn)
                if outer is not None:
                    out.append((outer.data, str(outer.subset), var, [r for r, _ in loops]))
    return out


def misplaced_nested_arguments(sdfg):
    """(outer array, outer subset, body, inner array shape) for each argument of a map body or nested program
    whose memlet outside names a different number of elements than the body's array has. DaCe 1.0.2's
    frontend gives a body's array the extent of the loop that indexes it and counts the body's indices from
    that loop's first element; where it cannot derive the elements for the memlet outside (symbolic loop
    bounds such as ``range(1, M)``: it falls back to the whole dimension, from 0), or derives them from
    another loop's range, the body reads and writes shifted elements, even in one process. A memlet of the
    array's own size is what the frontend writes when it gets it right (DaCe 2 passes whole arrays)."""
    if DACE_MAJOR >= 2:
        return []
    sym = dace.symbolic
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        node = sd.parent_nsdfg_node
        if node is None:
            continue
        mapping = {sym.symbol(k): sym.pystr_to_symbolic(v) for k, v in node.symbol_mapping.items()}
        state = sd.parent
        for e in list(state.in_edges(node)) + list(state.out_edges(node)):
            conn = e.dst_conn if e.dst is node else e.src_conn
            desc = sd.arrays.get(conn) if conn else None
            if desc is None or e.data.data is None or e.data.subset is None or \
                    not isinstance(desc, (dace.data.Scalar, dace.data.Array)) or isinstance(desc, dace.data.View):
                continue
            inner = [] if isinstance(desc, dace.data.Scalar) else \
                [sym.pystr_to_symbolic(x).subs(mapping) for x in desc.shape]
            if not _same_extents(inner, list(e.data.subset.size())):
                out.append((e.data.data, str(e.data.subset), node.label, tuple(inner)))
    return out


def _same_extents(a, b) -> bool:
    """Whether two shapes are equal once their dimensions of one element are dropped; unknown is equal.
    Shapes that differ in their number of such dimensions are not compared: the frontend declares a
    nominal ``(M, 1)`` array where a loop's range depends on another loop (``for k in range(i)``) and
    indexes it by absolute indices, which is right."""
    def squeezed(shape):
        return [x for x in shape if dace.symbolic.simplify(x - 1) != 0]
    a, b = squeezed(a), squeezed(b)
    if len(a) != len(b):
        return True
    try:
        return all(dace.symbolic.simplify(x - y) == 0 for x, y in zip(a, b))
    except TypeError:
        return True


def reduce_axes_of_indexed_slices(sdfg) -> list:
    """Mends the axes of reductions of an indexed slice (``np.sum(x[t, :, 6:], 0)``) and returns
    (array, subset, axes as given, axes mended) for each. The frontend numbers the axes of the slice
    (``(12, 8)``: axis 0 is the 12); once the simplification has removed the slice's view, the reduction reads
    ``x[t, 0:12, 6:14]`` directly and DaCe takes the same numbers against those three dimensions, so it reduces
    the one-element dimension ``t`` (a copy, or a wrong sum even in one process). Mended only where that
    cannot be meant: the axes as given leave a different shape than the reduction writes, while the same
    axes counted over the dimensions of more than one element leave exactly that shape."""
    from dace.libraries.standard.nodes import Reduce
    one = lambda x: dace.symbolic.simplify(x - 1) == 0  # noqa: E731

    def same(a, b):
        return len(a) == len(b) and all(dace.symbolic.simplify(x - y) == 0 for x, y in zip(a, b))

    out = []
    for _, state, node in nodes_of(sdfg, Reduce):
        if not node.axes:
            continue
        ins, outs = state.in_edges(node), state.out_edges(node)
        if len(ins) != 1 or len(outs) != 1 or ins[0].data.subset is None or outs[0].data.subset is None:
            continue
        sizes = ins[0].data.subset.size()
        wide = [i for i, x in enumerate(sizes) if not one(x)]
        written = [x for x in outs[0].data.subset.size() if not one(x)]
        if same([sizes[i] for i in wide if i not in node.axes], written) or max(node.axes) >= len(wide):
            continue
        meant = [wide[a] for a in node.axes]
        if same([sizes[i] for i in wide if i not in meant], written):
            out.append((ins[0].data.data, str(ins[0].data.subset), list(node.axes), meant))
            node.axes = meant
    return out


def indices_below_zero(sdfg):
    """(outer array, outer subset, body, index, loop variable, its value) for each access of a map body's or
    nested program's argument whose index is negative on its loop's second iteration. DaCe 1.0.2's frontend
    counts a body's indices from the element its loop touches first; where the index goes down as the loop
    goes on (``x[i, M - 1 - q]`` for ``q`` in ``range(M)``, ``w[K - 1 - k]`` in a convolution, ``x[i, q]``
    for ``q`` in ``range(M - 1, -1, -1)``), the body reads or writes below its array, even in one process (a
    wrong result or a corrupted heap). DaCe 2 gets them right."""
    if DACE_MAJOR >= 2:
        return []
    out = []
    for sd, node, loops_found in _body_for_loops(sdfg):
        for lp, (var, (start, _, step)) in loops_found:
            trips = lp.trips(sd)
            if trips is not None and sympy.sympify(trips).is_number and trips < 2:
                continue
            second = dace.symbolic.pystr_to_symbolic(start) + dace.symbolic.pystr_to_symbolic(step)
            for st in lp.body:
                for e in st.edges():
                    desc = sd.arrays.get(e.data.data) if e.data.data else None
                    if desc is None or desc.transient or e.data.subset is None:
                        continue
                    for x in e.data.subset.min_element():
                        x = dace.symbolic.pystr_to_symbolic(x)
                        at = {f: second for f in x.free_symbols if str(f) == var}
                        value = dace.symbolic.simplify(x.subs(at)) if at else None
                        if value is not None and value.is_number and value < 0:
                            outer = _outer_memlet(sd.parent, node, e.data.data)
                            if outer is not None:
                                out.append((outer.data, str(outer.subset), node.label, str(x), var, int(value)))
                            break
    return out


def unordered_aliased_accesses(sdfg):
    """(array, subset, state, read, written) for each read and write, in one state, of the same elements of an
    array with nothing ordering them (the read does not feed the writer, and the written node does not come
    before the read one): the generated code then runs them in either
    order. Two names of a map body or nested program bound to the same elements outside count as one array.
    The frontend gives each statement's access its own name (DaCe 1.0.2) or its own access node (DaCe 2),
    and simplification merges consecutive statements into one state without seeing that they touch one
    array: ``tmp = x[i, q]; x[i, q] = x[i, q + 1]; x[i, q + 1] = tmp`` becomes two unordered copies and
    loses an element, even in one process. DaCe 1.0.2's code copies out of an access node into another
    before the state's tasklets run (a swap through scalars in plain loops is right there, wrong in DaCe 2),
    so under 1.0.2 only reads by tasklets, maps and nested programs count."""
    import networkx as nx
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        node = sd.parent_nsdfg_node
        bound = {}  # inner name -> (outer array, outer subset)
        if node is not None:
            for e in sd.parent.in_edges(node):
                if e.dst_conn and e.data.data and e.data.subset is not None:
                    bound[e.dst_conn] = (e.data.data, str(e.data.subset))
            for e in sd.parent.out_edges(node):
                if e.src_conn and e.data.data and e.data.subset is not None:
                    bound[e.src_conn] = (e.data.data, str(e.data.subset))
        for st in all_states(sd):
            reads, writes = {}, {}
            for n in st.data_nodes():
                key = bound.get(n.data, (n.data, None))
                for e in st.out_edges(n):
                    if DACE_MAJOR < 2 and isinstance(e.dst, nodes.AccessNode):
                        continue  # 1.0.2 copies out of a node before the state's tasklets run
                    reads.setdefault(key, []).append((e, e.data.get_src_subset(e, st)))
                for e in st.in_edges(n):
                    writes.setdefault(key, []).append((e, e.data.get_dst_subset(e, st)))
            for key in reads.keys() & writes.keys():
                for re, rs in reads[key]:
                    for we, ws in writes[key]:
                        if re.src is we.dst or not _surely_overlap(rs, ws):
                            continue
                        # Ordered: the read feeds the writer, or the written node comes before the read one.
                        if re.dst is we.src or nx.has_path(st.nx, re.dst, we.src) or nx.has_path(st.nx, we.dst, re.src):
                            continue
                        array, subset = key[0], key[1] if key[1] is not None else str(rs)
                        out.append((array, subset, st.label, str(rs), str(ws)))
    return out


def _surely_overlap(a, b) -> bool:
    """Whether two subsets of one array provably share an element (False where it cannot tell)."""
    if a is None or b is None or a.dims() != b.dims():
        return False
    for (b1, e1, _), (b2, e2, _) in zip(a.ndrange(), b.ndrange()):
        # Through strings: two memlets may spell one symbol with different assumptions (q - q != 0).
        for d in (dace.symbolic.pystr_to_symbolic(f"({e1}) - ({b2})"), dace.symbolic.pystr_to_symbolic(f"({e2}) - ({b1})")):
            d = dace.symbolic.simplify(d)
            if not (getattr(d, "is_number", False) and d >= 0):
                return False
    return True


def _indexed_arguments(sd, var: str, loops) -> list:
    """Arguments (non-transient arrays) of ``sd`` that a memlet in one of ``loops`` indexes with ``var``."""
    found = []
    for lp in loops:
        for st in lp.body:
            for e in st.edges():
                desc = sd.arrays.get(e.data.data) if e.data.data else None
                if desc is None or desc.transient or e.data.data in found:
                    continue
                if var in {str(s) for s in e.data.subset.free_symbols}:
                    found.append(e.data.data)
    return found


def _outer_memlet(state, node, conn: str):
    for e in list(state.in_edges(node)) + list(state.out_edges(node)):
        if conn in (e.dst_conn, e.src_conn) and e.data.data:
            return e.data
    return None


def all_states(cfg):
    """Every state of a control-flow graph, inside its regions too: ``all_states()`` in 1.0.2, ``states()``
    in DaCe 2 (which recurses into regions; 1.0.2's ``states()`` does not)."""
    return list(cfg.all_states()) if hasattr(cfg, "all_states") else list(cfg.states())


def nodes_of(sdfg, kind=object):
    """``(sdfg, state, node)`` for every node of type ``kind`` in ``sdfg``'s states and its nested SDFGs'
    (regions included, :func:`all_states`): the walk the analyses share, in state order."""
    for sd in sdfg.all_sdfgs_recursive():
        for state in all_states(sd):
            for node in state.nodes():
                if isinstance(node, kind):
                    yield sd, state, node


def add_nested_sdfg(state, nested, inputs, outputs, **kwargs):
    """``state.add_nested_sdfg``: 1.0.2 takes the parent SDFG as second argument, DaCe 2 does not."""
    import inspect
    if "parent" in inspect.signature(state.add_nested_sdfg).parameters:
        return state.add_nested_sdfg(nested, state.sdfg, inputs, outputs, **kwargs)
    return state.add_nested_sdfg(nested, inputs, outputs, **kwargs)


def is_one_element_scalar(desc, shape) -> bool:
    """Whether ``desc`` is a ``Scalar`` and ``shape`` one element: DaCe 2's library expansions (Reduce to one
    value) write Scalars where 1.0.2's wrote one-element arrays, and a Scalar has no shape to set."""
    if not isinstance(desc, dace.data.Scalar):
        return False
    if any(dace.symbolic.simplify(dace.symbolic.pystr_to_symbolic(x) - 1) != 0 for x in shape):
        raise NotImplementedError(f"a Scalar cannot hold a block of shape {tuple(shape)}")
    return True


def memlets_name_written_array(sdfg) -> int:
    """Rewrites memlets that carry a transient's name but end at another array (``t[0, 0, 0] -> A[i, j, k]``,
    what DaCe 2's ``MapFusion`` writes when the fused intermediate is also read later) as memlets of that
    array (``A[i, j, k]`` with ``t[0, 0, 0]`` as other subset): the same copy, named by the array it
    writes, as DaCe 1.0.2's ``MapFusion`` wrote it and as the constraint analysis reads it. Returns how
    many it rewrote."""
    import copy as _copy
    from dace.memlet import Memlet
    count = 0
    for st in all_states(sdfg):
        for e in list(st.edges()):
            m = e.data
            if m.data is None or m.other_subset is None or not isinstance(e.src, nodes.AccessNode) \
                    or e.src.data != m.data:
                continue
            path = st.memlet_path(e)
            dst = path[-1].dst
            if len(path) < 2 or not isinstance(dst, nodes.AccessNode) or dst.data == m.data:
                continue
            new = Memlet(data=dst.data, subset=_copy.deepcopy(m.other_subset), other_subset=_copy.deepcopy(m.subset),
                         wcr=m.wcr, dynamic=m.dynamic, volume=m.volume)
            e.data = new
            new.try_initialize(sdfg, st, e)
            count += 1
    return count


def comm_library():
    """DaCe's MPI library module, by the name the installed DaCe gives it without a deprecation warning."""
    for name in ("dace.libraries.comm", "dace.libraries.mpi"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("the installed DaCe has neither dace.libraries.comm nor dace.libraries.mpi")


def _region_types():
    """DaCe's control-flow region classes (other than the SDFG itself), by what the installed DaCe has."""
    from dace.sdfg import state
    return tuple(t for t in (getattr(state, "AbstractControlFlowRegion", None),
                             getattr(state, "ControlFlowRegion", None)) if t is not None)


def has_regions(sdfg) -> bool:
    """Whether ``sdfg`` or an SDFG nested in it has a control-flow region (a loop, branch or named region)
    among its blocks."""
    from dace.sdfg import SDFG
    kinds = _region_types()
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, kinds) and not isinstance(node, SDFG):
            return True
    return False


def to_state_machine(sdfg) -> int:
    """Inlines the control-flow regions of ``sdfg`` and of every SDFG nested in it into states and
    interstate edges, in place; returns how many regions it inlined.

    Why a state machine and not the regions: the package's loop and branch passes (schedule discovery in
    program order, :mod:`.plan.carry` loop carry, :mod:`.plan.branch`) read loops as back edges and
    branches as conditional edges. DaCe 1.0.2's frontend produces exactly that (it builds regions and
    inlines them unless asked for ``use_experimental_cfg_blocks``); DaCe 2's frontend keeps them
    (``use_explicit_cf=True`` by default). Inlining here with DaCe's own utility gives both generations the
    same graph, and DaCe 2 still generates code for state machines. The program's meaning does not
    change, so doing it on the caller's SDFG is safe."""
    if not has_regions(sdfg):
        return 0
    from dace.sdfg import utils as sdutils
    count = 0
    for nested in list(sdfg.all_sdfgs_recursive()):
        count += sdutils.inline_control_flow_regions(nested)
    if hasattr(sdfg, "using_explicit_control_flow"):
        sdfg.using_explicit_control_flow = False
    if hasattr(sdfg, "using_experimental_blocks"):
        sdfg.using_experimental_blocks = False
    sdfg.reset_cfg_list()
    if has_regions(sdfg):
        left = sorted({type(n).__name__ for n, _ in sdfg.all_nodes_recursive() if isinstance(n, _region_types())
                       and n is not sdfg})
        raise NotImplementedError(f"SDFG '{sdfg.name}': DaCe could not inline these control-flow regions into "
                                  f"a state machine: {', '.join(left)}")
    return count


def config_dict() -> dict:
    """The dict that holds DaCe's configuration of this thread (to save and restore it whole): a class
    attribute in 1.0.2, a thread-local in DaCe 2."""
    data = getattr(dace.Config, "_data", None)
    return data._config if data is not None else dace.Config._config


def construct_arguments(compiled, kwargs: dict):
    """(call arguments, initialization arguments) of a ``CompiledSDFG`` for ``fast_call``, with new return
    arrays: ``_construct_args`` after ``clear_return_values`` in 1.0.2, ``construct_arguments`` in DaCe 2
    (which allocates new return arrays at every call and deprecates ``clear_return_values``)."""
    if hasattr(compiled, "construct_arguments"):
        return compiled.construct_arguments(**kwargs)
    compiled.clear_return_values()
    return compiled._construct_args(dict(kwargs))


def fast_call(compiled, callargs, initargs, do_gpu_check: bool):
    """Calls a ``CompiledSDFG`` with arguments from :func:`construct_arguments` and returns its results:
    1.0.2's ``fast_call`` returns them, DaCe 2's returns None and leaves them to
    ``convert_return_values``."""
    out = compiled.fast_call(callargs, initargs, do_gpu_check=do_gpu_check)
    if DACE_MAJOR >= 2:
        return compiled.convert_return_values()
    return out


def array_pointer(arr, storage) -> int:
    """The data pointer DaCe passes for ``arr``: 1.0.2's ``compiled_sdfg._array_interface_ptr``; DaCe 2
    has no such helper, so the pointer is read from the array interface (``__cuda_array_interface__`` for
    GPU arrays)."""
    try:
        from dace.codegen.compiled_sdfg import _array_interface_ptr
    except ImportError:
        iface = getattr(arr, "__cuda_array_interface__", None) or arr.__array_interface__
        return iface["data"][0]
    return _array_interface_ptr(arr, storage)


def forget_symbolic_cache() -> None:
    """Empties DaCe's cache of ``symbolic.pystr_to_symbolic``. It is keyed without types (``lru_cache``),
    so once code generation has converted the float ``2.0`` (a tasklet's ``x ** 2``), the integer axis
    ``np.int64(2)`` of a later ``np.sum(y, axis=2)`` comes back as ``Float(2.0)`` and the frontend keeps
    the axis: a program parsed after another one was built returned its input's shape (DaCe 1.0.2;
    ``reshape_split`` after ``std_cols`` in one process). Called around every build."""
    cached = getattr(dace.symbolic.pystr_to_symbolic, "cache_clear", None)
    if cached is not None:
        cached()


@contextlib.contextmanager
def line_info_from_frames():
    """While inside, every node DaCe adds without a ``debuginfo`` takes its caller's file and line from the
    caller's frame. DaCe (1.0.2 ``_getdebuginfo``, 2.x ``_get_debug_info``) builds the whole Python stack
    for that (``inspect.stack``, which looks up every frame's module and source file): 24 ms a node under
    a deep stack, about two thirds of lowering a small training step (9.6 of 15.5 s for an embedding's SGD
    step, 394 nodes). The file and line are the same; DaCe 2's ``compiler.lineinfo`` is still obeyed."""
    from dace.sdfg import state
    name = "_getdebuginfo" if hasattr(state, "_getdebuginfo") else "_get_debug_info"
    original = getattr(state, name, None)
    if original is None:
        yield
        return

    def from_frame(given=None):
        if DACE_MAJOR >= 2 and dace.Config.get("compiler", "lineinfo") != "inspect":
            return original(given)
        if given is not None:
            return given
        caller = sys._getframe(2)  # 0: here, 1: the DaCe method adding the node, 2: its caller
        return dace.dtypes.DebugInfo(caller.f_lineno, 0, caller.f_lineno, 0, caller.f_code.co_filename)

    setattr(state, name, from_frame)
    try:
        yield
    finally:
        setattr(state, name, original)


def with_line_info_from_frames(fn):
    """``fn`` run inside :func:`line_info_from_frames` (the package's entry points that add many nodes)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with line_info_from_frames():
            return fn(*args, **kwargs)
    return run


def one_build_folder():
    """Switches off DaCe 2's per-rank build folders for the process's next builds (the package builds on
    rank 0 alone and hands that folder to every rank); nothing to do on DaCe 1.0.2."""
    try:
        dace.Config.get("cache_distaware")
    except KeyError:
        return
    dace.Config.set("cache_distaware", value=False)


def loop_of_match(xf):
    """(loop variable, body blocks, a key naming the loop) of a ``LoopToMap`` match, or None when DaCe
    cannot read the loop. DaCe 1.0.2 matches a state-machine loop (``loop_information()``, ``loop_body()``,
    ``loop_guard`` / ``loop_begin``); DaCe 2 matches a ``LoopRegion`` (``xf.loop``: ``loop_variable``, its
    blocks, its label) and has none of 1.0.2's methods."""
    loop = getattr(xf, "loop", None)
    if loop is not None and hasattr(loop, "loop_variable"):
        if not loop.loop_variable:
            return None
        return loop.loop_variable, list(loop.nodes()), loop.label
    info = xf.loop_information()
    if not info:
        return None
    key = xf.loop_guard.label if xf.expr_index <= 1 else xf.loop_begin.label
    return info[0], list(xf.loop_body()), key


def process_grids(sdfg) -> Dict[str, object]:
    """{name: process grid} of DaCe's own process grids in ``sdfg`` (``dace.comm.Cart_create``)."""
    grids = getattr(sdfg, "_pgrids", None)
    if grids is not None:
        return dict(grids)
    pgrid = getattr(dace.data, "ProcessGrid", None)
    if pgrid is None:
        return {}
    return {k: v for k, v in sdfg.arrays.items() if isinstance(v, pgrid)}


def rebase_nested_argument(node, conn: str, global_shape, local_desc, begin) -> bool:
    """Makes the nested SDFG of ``node`` take the rank-local buffer ``local_desc`` (the block that starts at
    ``begin`` of an array of ``global_shape``) through connector ``conn``; returns whether it changed.

    DaCe 1.0.2's frontend passes a map body's nested SDFG only the elements its memlets name (scalar
    connectors), which a rank-local buffer feeds unchanged. DaCe 2's passes the whole array (its validation
    requires the inner descriptor to equal the outer one), and indexes it with global indices, also on
    interstate edges (``x_index = x[j, i]``, from ``ScalarToSymbolPromotion``). Here the inner descriptor
    becomes the local buffer's and every inner index is shifted by ``begin``."""
    import copy as _copy
    inner = node.sdfg.arrays[conn]
    if isinstance(inner, dace.data.Scalar):
        return False  # one element taken by value (``while it < maxiter`` reads it on an interstate edge)
    if len(inner.shape) != len(global_shape) or any(
            dace.symbolic.simplify(a - b) != 0 for a, b in zip(map(dace.symbolic.pystr_to_symbolic, inner.shape),
                                                                 map(dace.symbolic.pystr_to_symbolic, global_shape))):
        return False  # a narrowed argument (DaCe 1.0.2's scalars): the outer memlet's offset suffices
    new = _copy.deepcopy(local_desc)
    new.transient = False
    node.sdfg.arrays[conn] = new
    for expr in list(begin) + list(new.free_symbols):
        for s in getattr(dace.symbolic.pystr_to_symbolic(expr), "free_symbols", ()):
            if str(s) not in node.sdfg.symbols:
                node.sdfg.add_symbol(str(s), dace.int32 if str(s).startswith("__dp") else dace.int64)
            node.symbol_mapping.setdefault(str(s), dace.symbolic.symbol(str(s)))
    shift_accesses(node.sdfg, conn, begin)
    return True


def restride_narrowed_argument(node, conn: str, global_desc, local_desc) -> bool:
    """Gives a narrowed argument of a map body (DaCe 1.0.2: ``x[1:24, j]`` arrives as a ``(23,)`` array) the
    strides of the rank-local buffer it now points into; returns whether any changed.

    The frontend declares such an array with the strides of the global array it came from, and the body
    indexes it with them. A buffer that holds a block split along an inner dimension has shorter rows (a
    column split of a ``(24, 16)`` array: rows of 8), so the global strides ran past it and corrupted the
    heap. Each stride is matched to the global dimension that has it, and arrays handed on to SDFGs nested
    deeper follow."""
    sym = dace.symbolic.pystr_to_symbolic
    by_global = {}
    for g, loc in zip(global_desc.strides, local_desc.strides):
        by_global.setdefault(sym(g), []).append(sym(loc))
    moved = {g: ls[0] for g, ls in by_global.items() if len(ls) == 1 and dace.symbolic.simplify(ls[0] - g) != 0}
    return bool(moved) and _restride(node, conn, moved)


def _restride(node, conn: str, moved) -> bool:
    inner = node.sdfg.arrays.get(conn)
    if not isinstance(inner, dace.data.Array) or isinstance(inner, dace.data.View):
        return False
    strides = [moved.get(dace.symbolic.pystr_to_symbolic(x), x) for x in inner.strides]
    if all(a is b for a, b in zip(strides, inner.strides)):
        return False
    inner.set_shape(inner.shape, strides=strides)
    for st in all_states(node.sdfg):
        for n in st.nodes():
            if isinstance(n, nodes.NestedSDFG):
                for e in list(st.in_edges(n)) + list(st.out_edges(n)):
                    if e.data.data == conn:
                        _restride(n, e.dst_conn if e.dst is n else e.src_conn, moved)
    return True


def shift_accesses(sdfg, name: str, begin) -> None:
    """Subtracts ``begin`` from every index of array ``name`` in ``sdfg`` (not in SDFGs nested deeper):
    its memlets and the reads of it on interstate edges (DaCe 2 promotes element reads there)."""
    begin = [dace.symbolic.pystr_to_symbolic(b) for b in begin]
    if all(b == 0 for b in begin):
        return
    from dace.sdfg import nodes as _nodes
    for st in sdfg.states():
        for e in st.edges():
            m = e.data
            if m.data is None:
                continue
            if m.data == name:
                m.subset.offset(begin, negative=True)
            elif m.other_subset is not None:
                ends = [n for n in (e.src, e.dst) if isinstance(n, nodes.AccessNode) and n.data == name]
                if ends:
                    m.other_subset.offset(begin, negative=True)
        for n in st.nodes():
            if isinstance(n, _nodes.NestedSDFG) and any(
                    e.data.data == name for e in st.in_edges(n) + st.out_edges(n)):
                raise NotImplementedError(f"array '{name}' is passed on into nested SDFG '{n.label}': its block "
                                          "offset is not carried further down")
    shift_interstate_reads(sdfg, name, begin)


def _interstate_reads(sdfg, name: str):
    """(edge, index strings) of every read of array ``name`` on the interstate edges of ``sdfg``; the index
    is None for a slice or a use that is not an element read (the whole array)."""
    import ast
    found = []
    for e in sdfg.all_interstate_edges():
        for code in list(e.data.assignments.values()) + [e.data.condition.as_string]:
            if name not in code:
                continue
            try:
                tree = ast.parse(code, mode="eval")
            except SyntaxError:
                found.append((e, None))
                continue
            subscripted = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name:
                    subscripted.add(id(node.value))
                    elts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
                    found.append((e, None if any(isinstance(x, ast.Slice) for x in elts) else
                                  [ast.unparse(x) for x in elts]))
            found += [(e, None) for node in ast.walk(tree)
                      if isinstance(node, ast.Name) and node.id == name and id(node) not in subscripted]
    return found


def _boxes(body, name: str, reads: bool):
    """[(begin, end) per dimension] of every read (or write) of array ``name`` in the nested SDFG ``body``:
    memlets of its access nodes and, for reads, its element reads on interstate edges."""
    shape = body.arrays[name].shape
    whole = [(0, dace.symbolic.pystr_to_symbolic(x) - 1) for x in shape]
    boxes = []
    for st in body.states():
        for a in st.data_nodes():
            if a.data != name:
                continue
            for e in (st.out_edges(a) if reads else st.in_edges(a)):
                sub = e.data.subset if e.data.data == name else e.data.other_subset
                boxes.append(whole if sub is None else [(b, x) for b, x, _ in as_range(sub).ranges])
    if reads:
        for _, idx in _interstate_reads(body, name):
            boxes.append(whole if idx is None or len(idx) != len(shape) else [(x, x) for x in idx])
    return boxes


def _sound_box(boxes, shape, inner_symbols=()):
    """Per dimension, the smallest begin and the largest end among ``boxes`` where SymPy can prove which
    they are, else the array's own first or last index: a bounding box that holds for every value of the
    symbols (DaCe's union takes a symbol to be larger than any number: ``max(i, 10) = i``). A bound that
    names one of ``inner_symbols`` (assigned inside the body: loop variables, values read from data) has
    no value outside it: that side of the dimension is the array's own bound."""
    inner_symbols = set(map(str, inner_symbols))

    def pick(xs, smallest):
        if any({str(f) for f in getattr(x, "free_symbols", ())} & inner_symbols for x in xs):
            return None
        for x in xs:
            diffs = [dace.symbolic.simplify(x - y) for y in xs]
            if all((d.is_nonpositive if smallest else d.is_nonnegative) for d in diffs):
                return x
        return None

    out = []
    for d, extent in enumerate(shape):
        lo = pick([dace.symbolic.pystr_to_symbolic(b[d][0]) for b in boxes], True)
        hi = pick([dace.symbolic.pystr_to_symbolic(b[d][1]) for b in boxes], False)
        out.append((0 if lo is None else lo, dace.symbolic.pystr_to_symbolic(extent) - 1 if hi is None else hi, 1))
    return subsets.Range(out)


def _assigned_symbols(body) -> set:
    """Symbols the nested SDFG ``body`` assigns itself (on its interstate edges)."""
    return {k for e in body.all_interstate_edges() for k in e.data.assignments}


def _reads_precede_writes(body, name: str) -> bool:
    """Whether every read of ``name`` in the nested SDFG ``body`` comes before every write of it: no access
    node both written and read, no state or interstate edge that reads it reachable from a state that
    writes it, and no SDFG nested deeper that touches it (so a buffer of its prior values reads what the
    one array would have held)."""
    from dace.sdfg import nodes as _nodes
    writes, reads = set(), set()
    for st in body.states():
        for n in st.nodes():
            if isinstance(n, _nodes.NestedSDFG) and any(e.data.data == name for e in st.all_edges(n)):
                return False
            if not isinstance(n, nodes.AccessNode) or n.data != name:
                continue
            if st.in_degree(n) > 0 and st.out_degree(n) > 0:
                return False
            (writes if st.in_degree(n) > 0 else reads).add(st)
    edge_reads = [e for e, _ in _interstate_reads(body, name)]
    for w in writes:
        after, todo = set(), [e.dst for e in body.out_edges(w)]
        while todo:
            b = todo.pop()
            if b not in after:
                after.add(b)
                todo += [e.dst for e in body.out_edges(b)]
        if reads & after or any(e.src is w or e.src in after for e in edge_reads):
            return False
    return True


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(
        dace.symbolic.simplify(dace.symbolic.pystr_to_symbolic(x) - dace.symbolic.pystr_to_symbolic(y)) == 0
        for x, y in zip(a, b))


def nested_symbols_in_outer_memlets(sdfg) -> int:
    """Rewrites memlets that name a nested program's own symbol where only the caller's exists, in every
    state of ``sdfg`` and its nested SDFGs; returns how many changed.

    DaCe's memlet propagation (1.0.2) can carry the callee's symbol out of a nested SDFG: NPBench's
    azimint_hist calls ``histogram`` with ``bins = npt``, whose indirect ``hist[bin] += 1`` propagates to
    ``hist[0:bins]`` in the caller, where only ``npt`` exists. Nothing in the caller defines ``bins``, so the
    program then names a symbol that no caller can give, and a nested SDFG made around that state (the GPU
    lowering nests each kernel) fails DaCe's validation. The nested SDFG's symbol mapping says what the
    symbol is outside (``bins -> npt``); substituting it changes no meaning."""
    return sum(nested_symbols_in_state(sd, state) for sd in sdfg.all_sdfgs_recursive() for state in all_states(sd))


def nested_symbols_in_state(sdfg, state) -> int:
    """:func:`nested_symbols_in_outer_memlets` for one state. Cheap where nothing is to do (it runs after
    every propagation): only a nested SDFG that maps a symbol the caller does not define is looked at."""
    changed = 0
    outer = set(map(str, sdfg.symbols)) | set(map(str, sdfg.constants))
    for node in [n for n in state.nodes() if isinstance(n, nodes.NestedSDFG)]:
        keys = {str(k) for k, v in node.symbol_mapping.items() if str(k) not in outer and str(v) != str(k)}
        if not keys:
            continue
        defined = None
        for edge in state.in_edges(node) + state.out_edges(node):
            for e in state.memlet_tree(edge):
                used = {str(x) for x in e.data.free_symbols} & keys if not e.data.is_empty() else set()
                if not used:
                    continue
                if defined is None:  # map parameters around the node
                    defined = set(map(str, state.symbols_defined_at(node)))
                inner = {k: node.symbol_mapping[k] for k in used if k not in defined}
                if inner:
                    e.data.replace({k: dace.symbolic.pystr_to_symbolic(str(v)) for k, v in inner.items()})
                    changed += 1
    return changed


def propagate_memlets_state(sdfg, state) -> None:
    """DaCe's ``propagate_memlets_state``, then the callee's symbols it left in the caller are replaced by
    the caller's (:func:`nested_symbols_in_outer_memlets`)."""
    from dace.sdfg.propagation import propagate_memlets_state as propagate
    propagate(sdfg, state)
    nested_symbols_in_state(sdfg, state)


def whole_array_map_bodies(sdfg) -> int:
    """Makes the nested SDFGs inside maps that take whole arrays (DaCe 2's frontend, see
    :func:`rebase_nested_argument`) analysable like 1.0.2's element connectors; returns how many
    connectors it changed. 1.0.2 passes a whole array too where an index follows a variable of the body
    (``x[i, j]`` with ``j`` counted by a ``while`` loop), and reads its elements on interstate edges.

    1. An array the body reads and writes through one connector, with a read box other than its write box
       (``A[i] = 3 * A[i] + A[0] - A[n - 1]``: reads the whole array, writes ``A[i]``), gets a connector of
       its own for the reads when every read comes before every write: each then gets its own rank-local
       buffer, where one connector cannot be fed by two (DaCe: "Inout connector A is connected to different
       input and output arrays"). Reads after a write in the body keep the one connector.
    2. A whole-array connector whose elements are read on interstate edges (``A_index_1 = A[10]``, from
       DaCe 2's ``ScalarToSymbolPromotion``) gets a memlet that covers its reads for every value of the symbols:
       DaCe's union makes ``A[0:i + 1]`` of ``A[i], A[0], A[10]`` (it takes ``max(i, 10) = i``), and the
       ranks' buffers would lack ``A[10]``. Where that memlet does not start at the origin, the body's
       indices are made relative to its start (:func:`_narrow_to_box`)."""
    import copy as _copy
    from dace.sdfg import nodes as _nodes
    changed = 0
    for st in all_states(sdfg):
        for n in [n for n in st.nodes() if isinstance(n, _nodes.NestedSDFG) and st.entry_node(n) is not None]:
            body = n.sdfg
            outer = {e.dst_conn: e for e in st.in_edges(n) if e.data.data is not None and e.dst_conn}
            written = {e.src_conn for e in st.out_edges(n) if e.data.data is not None and e.src_conn}
            for conn in sorted(set(outer) & written):
                inner, whole = body.arrays.get(conn), sdfg.arrays.get(outer[conn].data.data)
                if inner is None or whole is None or not _same_shape(inner.shape, whole.shape) \
                        or not _reads_precede_writes(body, conn):
                    continue
                assigned = _assigned_symbols(body)
                if str(_sound_box(_boxes(body, conn, True), inner.shape, assigned)) == \
                        str(_sound_box(_boxes(body, conn, False), inner.shape, assigned)):
                    continue  # one block read and written: one buffer serves both
                desc = _copy.deepcopy(inner)
                desc.transient = False
                new = body.add_datadesc(f"{conn}_dp_read", desc, find_new_name=True)
                for bst in body.states():
                    for a in bst.data_nodes():
                        if a.data == conn and bst.in_degree(a) == 0:
                            a.data = new
                            for oe in bst.out_edges(a):
                                for te in bst.memlet_tree(oe):
                                    if te.data.data == conn:
                                        te.data.data = new
                _rename_interstate_reads(body, conn, new)
                e = outer.pop(conn)
                st.remove_edge(e)
                n.remove_in_connector(conn)
                n.add_in_connector(new)
                outer[new] = st.add_edge(e.src, e.src_conn, n, new, e.data)
                changed += 1
            for conn, e in outer.items():
                whole = sdfg.arrays.get(e.data.data)
                if conn not in body.arrays or whole is None or not _same_shape(body.arrays[conn].shape, whole.shape) \
                        or not _interstate_reads(body, conn):
                    continue  # 1.0.2's element connectors index their own one-element arrays
                box = _sound_box(_boxes(body, conn, True), body.arrays[conn].shape, _assigned_symbols(body))
                begin = [b for b, _, _ in box]
                if DACE_MAJOR < 2 and conn not in written and \
                        any(dace.symbolic.pystr_to_symbolic(b) != 0 for b in begin):
                    _narrow_to_box(body, conn, box)
                mapping = {dace.symbolic.symbol(k): dace.symbolic.pystr_to_symbolic(v)
                           for k, v in n.symbol_mapping.items() if str(k) != str(v)}
                if mapping:
                    box.replace(mapping)
                if str(box) != str(e.data.subset):
                    e.data.subset = box
                    e.data.volume = box.num_elements()
                    changed += 1
    return changed


def _narrow_to_box(body, conn: str, box) -> None:
    """Makes the body's whole-array argument ``conn`` the block ``box`` (in the body's symbols): its indices,
    in memlets and on interstate edges, become relative to the box's origin and its descriptor takes the
    box's extent (the strides stay the array's). DaCe 1.0.2 hands a nested SDFG a pointer to the first
    element of the memlet outside, so once that memlet is the box (``x[i, 0:16]`` where the body reads
    ``x[i, j]``, ``j`` a variable of its own ``while`` loop), global indices inside would read row ``2 * i``.
    DaCe 2 requires the body's descriptor to be the whole array's and hands it the array itself: not there."""
    begin = [b for b, _, _ in box]
    shift_accesses(body, conn, begin)
    desc = body.arrays[conn]
    desc.set_shape(list(box.size()), strides=list(desc.strides), total_size=desc.total_size, offset=list(desc.offset))


def _rename_interstate_reads(sdfg, name: str, new: str) -> None:
    """Renames array ``name`` to ``new`` in the code of every interstate edge of ``sdfg``."""
    import ast

    class _Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id == name:
                node.id = new
            return node

    def renamed(code: str) -> str:
        return code if name not in code else ast.unparse(_Rename().visit(ast.parse(code, mode="eval")))

    for e in sdfg.all_interstate_edges():
        e.data.assignments = {k: renamed(v) for k, v in e.data.assignments.items()}
        cond = e.data.condition.as_string
        if name in cond:
            e.data.condition = CodeBlock(renamed(cond))


def shift_interstate_reads(sdfg, name: str, begin) -> None:
    """Subtracts ``begin`` from the indices of every read of array ``name`` on the interstate edges of
    ``sdfg`` (DaCe 2's ``ScalarToSymbolPromotion`` moves element reads there; 1.0.2 left none)."""
    import ast
    begin = [dace.symbolic.pystr_to_symbolic(b) for b in begin]
    if all(b == 0 for b in begin):
        return

    class _Shift(ast.NodeTransformer):
        def visit_Subscript(self, node):
            self.generic_visit(node)
            if isinstance(node.value, ast.Name) and node.value.id == name:
                idx = node.slice
                elts = list(idx.elts) if isinstance(idx, ast.Tuple) else [idx]
                if len(elts) != len(begin) or any(isinstance(x, ast.Slice) for x in elts):
                    raise NotImplementedError(f"interstate edge reads '{ast.unparse(node)}': only element reads of "
                                              f"'{name}' can be moved onto a rank-local block")
                new = [ast.BinOp(x, ast.Sub(), ast.parse(f"({b})", mode="eval").body) for x, b in zip(elts, begin)]
                node.slice = ast.Tuple(new, ast.Load()) if len(new) > 1 else new[0]
            return node

    def shifted(code: str) -> str:
        if name not in code:
            return code
        return ast.unparse(_Shift().visit(ast.parse(code, mode="eval")))

    for e in sdfg.all_interstate_edges():
        isedge = e.data
        isedge.assignments = {k: shifted(v) for k, v in isedge.assignments.items()}
        cond = isedge.condition.as_string
        if name in cond:
            isedge.condition = CodeBlock(shifted(cond))

