"""Contractions on BLAS: maps that sum a product over some of their indices become (batched) GEMMs.

DaCe's frontend lowers ``np.einsum`` with an output order that is not a batched matrix product
(``"bse,hed->bhsd"``), and every explicit map such as ``s[b, h, i, j] += q[b, h, i, d] * k[b, h, j, d]``,
to a loop nest with a write-conflict sum: a few hundred MFlop/s where BLAS gives tens of GFlop/s. NumPy's
``einsum(optimize=True)`` instead permutes the operands into matrices and calls BLAS; this pass does the
same on the rank-local tiles after partitioning, so the communication planned for the map is unchanged.

A map qualifies (:func:`find_contractions`) when its body is one product of two operands (optionally
times a constant; an identity assignment after it is allowed), written to the output with a sum
conflict, every index of every operand is one map parameter plus an offset, and each parameter is a
*batch* index (in both operands and the output), an *M* index (first operand and output), an *N* index
(second operand and output) or a *K* index (both operands, summed). :class:`ContractionToGemm` then
replaces it with three copies and one library node: the operands are gathered into contiguous
``[batch, M, K]`` and ``[batch, K, N]`` buffers (the tiles' sizes; the copy costs O(size) against the
product's O(size * K)), DaCe's ``MatMul`` computes ``[batch, M, N]`` (a ``Gemm`` or ``BatchedMatMul`` on
the BLAS the toolchain selects), and the result is added to the output as the sum conflict did.
"""
import ast
import numbers
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

import dace
import sympy
from dace import dtypes, nodes, symbolic
from dace.frontend.operations import detect_reduction_type
from dace.frontend.python import astutils
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState
from dace.subsets import Range
from dace.symbolic import pystr_to_symbolic

from ..schedule import ordered_states
from .graph import OrderedPass

BLAS_TYPES = (dace.float64, dace.float32)


@dataclass(frozen=True)
class Contraction:
    """One map that computes ``out[...] += alpha * a[...] * b[...]`` as a (batched) matrix product."""
    map: str
    state: str
    a: str
    b: str
    out: str
    batch: Tuple[str, ...]
    m: Tuple[str, ...]
    n: Tuple[str, ...]
    k: Tuple[str, ...]
    alpha: float = 1.0

    def __str__(self):
        kind = "batched GEMM" if self.batch else "GEMM"
        groups = "; ".join(f"{g} ({', '.join(v)})" for g, v in
                           (("batch", self.batch), ("M", self.m), ("N", self.n), ("K", self.k)) if v)
        return f"contraction map '{self.map}' ({self.out} += {self.a} * {self.b}) runs as a {kind} on BLAS: {groups}"


@dataclass
class _Match:
    """What the rewrite needs besides the decision: the nodes and memlets of the map."""
    decision: Contraction
    state: SDFGState
    entry: nodes.MapEntry
    subsets: Dict[str, str]  # operand role ('a', 'b', 'out') -> the memlet's subset inside the map
    sources: Dict[str, nodes.Node]  # role -> the access node outside the map
    wcr: str


def _index_params(subset, params) -> Optional[List[str]]:
    """The map parameter of each index of a one-element subset (index = parameter + offset), or None."""
    out = []
    for (b, e, s) in subset.ndrange():
        if b != e:
            return None
        used = [p for p in params if symbolic.pystr_to_symbolic(p) in getattr(b, "free_symbols", set())]
        if len(used) != 1:
            return None
        offset = symbolic.simplify(b - symbolic.pystr_to_symbolic(used[0]))
        if {str(f) for f in getattr(offset, "free_symbols", set())} & set(params):
            return None  # not the parameter itself plus an offset (a stride, a product)
        out.append(used[0])
    return out if len(set(out)) == len(out) else None


def _product(tasklet: nodes.Tasklet, inputs: List[str]) -> Optional[float]:
    """alpha when the tasklet computes ``alpha * inputs[0] * inputs[1]`` (alpha a number), else None."""
    if tasklet.code.language != dtypes.Language.Python or len(tasklet.code.code) != 1:
        return None
    stmt = tasklet.code.code[0]
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
        return None
    try:
        expr = pystr_to_symbolic(astutils.unparse(stmt.value))
        ratio = sympy.simplify(expr / (pystr_to_symbolic(inputs[0]) * pystr_to_symbolic(inputs[1])))
    except (TypeError, sympy.SympifyError, SyntaxError):
        return None
    return float(ratio) if ratio.is_Number else None


def _is_identity(tasklet: nodes.Tasklet) -> bool:
    """Whether the tasklet only copies its one input to its one output (``__out = __inp``)."""
    if len(tasklet.in_connectors) != 1 or len(tasklet.out_connectors) != 1:
        return False
    code = tasklet.code.as_string.strip()
    return code.replace(" ", "") == f"{next(iter(tasklet.out_connectors))}={next(iter(tasklet.in_connectors))}"


def _match(state: SDFGState, entry: nodes.MapEntry) -> Optional[_Match]:
    body = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    tasklets = [n for n in body.nodes() if isinstance(n, nodes.Tasklet)]
    others = [n for n in body.nodes() if not isinstance(n, nodes.Tasklet)]
    if len(tasklets) == 1 and not others:
        prod, last = tasklets[0], tasklets[0]
    elif len(tasklets) == 2 and len(others) == 1 and isinstance(others[0], nodes.AccessNode):
        # ``x[...] += a * b`` in an explicit map: the product, a scalar, then an assignment with the conflict
        first = [t for t in tasklets if state.in_degree(t) == 2]
        if len(first) != 1:
            return None
        prod = first[0]
        last = next(t for t in tasklets if t is not prod)
        mid = others[0]
        if not (_is_identity(last) and state.out_degree(prod) == 1 and state.out_edges(prod)[0].dst is mid
                and state.out_degree(mid) == 1 and state.out_edges(mid)[0].dst is last
                and state.in_degree(mid) == 1):
            return None
    else:
        return None
    params = list(entry.map.params)
    if any(s != 1 for (_, _, s) in entry.map.range.ranges):
        return None
    code = prod.code.as_string
    ins = sorted(state.in_edges(prod), key=lambda e: code.find(e.dst_conn or ""))  # a, b in the product's order
    if len(ins) != 2 or any(e.data.is_empty() or e.src is not entry or e.data.dynamic for e in ins):
        return None
    outs = state.out_edges(last)
    if len(outs) != 1 or outs[0].dst is not state.exit_node(entry) or outs[0].data.wcr is None:
        return None
    if detect_reduction_type(outs[0].data.wcr) != dtypes.ReductionType.Sum:
        return None
    alpha = _product(prod, [e.dst_conn for e in ins])
    if alpha is None:
        return None
    roles = {"a": ins[0], "b": ins[1], "out": outs[0]}
    idx, sources, subsets = {}, {}, {}
    sdfg = state.sdfg
    for role, e in roles.items():
        if e.data.subset.num_elements() != 1 or e.data.volume != 1:
            return None
        idx[role] = _index_params(e.data.subset, params)
        if idx[role] is None:
            return None
        path = state.memlet_path(e)
        outer = path[0].src if role != "out" else path[-1].dst
        if not isinstance(outer, nodes.AccessNode) or sdfg.arrays[outer.data].dtype not in BLAS_TYPES:
            return None
        sources[role], subsets[role] = outer, str(e.data.subset)
    if len({sdfg.arrays[s.data].dtype for s in sources.values()}) != 1:
        return None
    a, b, c = (set(idx[r]) for r in ("a", "b", "out"))
    k = [p for p in idx["a"] if p in b and p not in c]
    batch = [p for p in idx["out"] if p in a and p in b]
    m = [p for p in idx["out"] if p in a and p not in b]
    n = [p for p in idx["out"] if p in b and p not in a]
    if not k or sorted(k + batch + m + n) != sorted(params):
        return None  # a parameter summed over one operand only, or broadcast into the output
    decision = Contraction(entry.map.label, state.label, sources["a"].data, sources["b"].data, sources["out"].data,
                           tuple(batch), tuple(m), tuple(n), tuple(k), alpha)
    return _Match(decision, state, entry, subsets, sources, outs[0].data.wcr)


def find_contractions(sdfg: SDFG, expanded: Optional[Dict[nodes.NestedSDFG, str]] = None) -> List[_Match]:
    """The maps at the top level of the program's states that are contractions (see the module
    docstring), and those at the top level of the nested SDFGs in ``expanded`` (node -> the name of its
    kernel's principal map): library nodes that ``lower`` replaced by their pure expansion because their
    tiles are uneven or sized at run time, whose matrix product is a contraction map again, tiled
    exactly (a GEMM of this rank's block, not of the padded buffer)."""
    found = []
    for state in ordered_states(sdfg):
        scope = state.scope_dict()
        for n in state.nodes():
            if scope[n] is not None:
                continue
            if isinstance(n, nodes.MapEntry):
                m = _match(state, n)
                if m is not None:
                    found.append(m)
            elif isinstance(n, nodes.NestedSDFG) and expanded and n in expanded:
                for m in find_contractions(n.sdfg):  # named after the kernel, as the report names it
                    m.decision = replace(m.decision, map=expanded[n])
                    found.append(m)
    return found


def values_at_init(sdfg: SDFG) -> Dict[str, object]:
    """The symbols of ``sdfg`` whose values the program's init code has, each with what the init knows it
    as: a number (a constant of the program) or the outermost program's free symbol of the same name (a
    nested SDFG's symbol its parents pass through under that name). DaCe allocates a persistent array of
    a nested SDFG in the outermost init, translating its size through the parents' symbol mappings, which
    name no constant: sizes are therefore written with the constants' values."""
    node = sdfg.parent_nsdfg_node
    if node is None:
        out = {str(s): symbolic.pystr_to_symbolic(str(s)) for s in sdfg.free_symbols}
    else:
        outer = values_at_init(sdfg.parent_sdfg)
        out = {s: outer[s] for s, v in node.symbol_mapping.items() if str(v) == s and s in outer}
    for name, value in sdfg.constants.items():
        if isinstance(value, numbers.Integral) and (node is None or name not in node.symbol_mapping):
            out[name] = int(value)
    return out


def _extent_bounds(sdfg: SDFG, m: _Match, ext: Dict[str, object]) -> Dict[str, object]:
    """For each map parameter, an upper bound of its extent that is known when the program starts (see
    :func:`values_at_init`): the extent itself, or the size of an operand dimension the parameter
    indexes (the parameter plus an offset stays inside it). A rank's block of an uneven or run-time split
    has an extent that depends on the rank's grid coordinates, set after the init; the padded tile it
    lies in does not. Parameters without such a bound are left out."""
    known = values_at_init(sdfg)

    def at_init(expr):
        free = {str(f) for f in getattr(expr, "free_symbols", set())}
        if not free <= set(known):
            return None
        return symbolic.simplify(symbolic.pystr_to_symbolic(str(expr)).subs(
            {symbolic.pystr_to_symbolic(f): known[f] for f in free})) if free else expr

    bound = {p: b for p, b in ((p, at_init(e)) for p, e in ext.items()) if b is not None}
    for role in ("a", "b", "out"):
        shape = sdfg.arrays[m.sources[role].data].shape
        for dim, p in enumerate(_index_params(Range.from_string(m.subsets[role]), list(ext))):
            b = at_init(shape[dim]) if p not in bound else None
            if b is not None:
                bound[p] = b
    return bound


class ContractionToGemm:
    """Replaces one contraction map with copies into ``[batch, M, K]`` / ``[batch, K, N]`` buffers, a
    ``MatMul`` library node (expanded to ``Gemm`` / ``BatchedMatMul`` on BLAS) and an accumulating copy
    of the ``[batch, M, N]`` product into the output. Why copies: the operands' tiles are strided in
    ways a single BLAS call cannot take (``q[b, h, s, d]`` with (b, s) as rows), and gathering them is
    linear in the data, while the product is not. The buffers are allocated once, when the program
    starts, wherever their sizes allow it: sized for the largest block a rank can have (see
    :func:`_extent_bounds`), the GEMM taking this call's block of them. Allocated in every call, a
    buffer in GPU memory costs a ``cudaMalloc`` and a synchronising ``cudaFree``, and a large one on the
    host a fresh mapping whose pages fault in again."""

    def apply(self, sdfg: SDFG, m: _Match):
        st, entry, d = m.state, m.entry, m.decision
        tag = d.map.replace(".", "_")  # names made here (a kernel's map inside a node is "<node>.<map>")
        rng = {p: r for p, r in zip(entry.map.params, entry.map.range.ranges)}
        ext = {p: symbolic.simplify(r[1] - r[0] + 1) for p, r in rng.items()}
        span = {p: f"{r[0]}:{r[1] + 1}" for p, r in rng.items()}

        def dims(group, of):
            out = 1
            for p in group:
                out = out * of[p]
            return symbolic.simplify(out)

        def flat(group):
            if not group:
                return "0"
            expr = 0
            for p in group:
                expr = expr * ext[p] + (symbolic.pystr_to_symbolic(p) - rng[p][0])
            return str(symbolic.simplify(expr))

        bound = _extent_bounds(sdfg, m, ext)
        once = len(bound) == len(ext)  # every extent bounded by sizes known when the program starts

        dtype = sdfg.arrays[d.out].dtype
        batched = bool(d.batch)
        shapes = {"a": (d.batch, d.m, d.k), "b": (d.batch, d.k, d.n), "out": (d.batch, d.m, d.n)}
        bufs, buf_nodes, blocks = {}, {}, {}
        for role, groups in shapes.items():
            groups = groups if batched else groups[1:]
            name, desc = sdfg.add_array(f"__gemm_{tag}_{role}", [dims(g, bound if once else ext) for g in groups],
                                        dtype, transient=True, find_new_name=True)
            if once:
                desc.lifetime = dtypes.AllocationLifetime.Persistent
            bufs[role] = (name, groups)
            buf_nodes[role] = st.add_access(name)
            blocks[role] = Memlet(f"{name}[{', '.join(f'0:{dims(g, ext)}' for g in groups)}]")  # this call's block
        for role in ("a", "b"):
            name, groups = bufs[role]
            src = m.sources[role]
            used = [p for g in groups for p in g]
            st.add_mapped_tasklet(f"{tag}_pack_{role}", {p: span[p] for p in entry.map.params if p in used},
                                  {"__in": Memlet(data=src.data, subset=m.subsets[role])}, "__out = __in",
                                  {"__out": Memlet(f"{name}[{', '.join(flat(g) for g in groups)}]")},
                                  input_nodes={src.data: src}, output_nodes={name: buf_nodes[role]},
                                  external_edges=True)
        from dace.libraries.blas import MatMul
        gemm = MatMul(f"{tag}_gemm")
        st.add_node(gemm)
        for role, conn in (("a", "_a"), ("b", "_b")):
            st.add_edge(buf_nodes[role], None, gemm, conn, blocks[role])
        out_name, out_groups = bufs["out"]
        st.add_edge(gemm, "_c", buf_nodes["out"], None, blocks["out"])
        code = "__out = __in" if d.alpha == 1.0 else f"__out = {d.alpha!r} * __in"
        target = m.sources["out"]
        exit_node = st.exit_node(entry)
        scope_nodes = set(st.scope_subgraph(entry).nodes())
        st.add_mapped_tasklet(f"{tag}_unpack", {p: span[p] for p in entry.map.params if p in d.batch + d.m + d.n},
                              {"__in": Memlet(f"{out_name}[{', '.join(flat(g) for g in out_groups)}]")}, code,
                              {"__out": Memlet(data=target.data, subset=m.subsets["out"], wcr=m.wcr)},
                              input_nodes={out_name: buf_nodes["out"]}, output_nodes={target.data: target},
                              external_edges=True)
        st.remove_nodes_from([n for n in scope_nodes | {entry, exit_node}])
        for n in list(m.sources.values()):
            if n in st.nodes() and st.degree(n) == 0:
                st.remove_node(n)


class ContractionsToBlas(OrderedPass):
    """Every contraction map of the program (after partitioning: on its rank-local tiles) becomes a GEMM,
    those of the pure expansions in ``expanded`` included (see :func:`find_contractions`).
    ``apply_pass`` returns the decisions (:class:`Contraction`), in program order."""

    def __init__(self, expanded: Optional[Dict[nodes.NestedSDFG, str]] = None):
        super().__init__()
        self.expanded = dict(expanded or {})

    def apply_pass(self, sdfg: SDFG, _=None) -> List[Contraction]:
        done = []
        for m in find_contractions(sdfg, self.expanded):
            ContractionToGemm().apply(m.state.sdfg, m)
            done.append(m.decision)
        return done


def is_contraction(state: SDFGState, entry: nodes.MapEntry) -> bool:
    """Whether ``lower`` runs this top-level map as a GEMM (the search's cost model prices it at the BLAS rate)."""
    return _match(state, entry) is not None
