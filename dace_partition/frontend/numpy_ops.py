"""NumPy-level code for operators that DaCe's Python frontend has no single function for.

Shared by the front ends: each function takes identifiers (and a ``fresh(hint)`` callable for temporaries)
and returns lines of code for the generated program body. Everything is written with statically known
shapes, so every loop becomes a DaCe map whose parameters are the tensor's axes (batch and head axes
included), which a schedule can then partition. The code avoids what DaCe turns into *views* (reshapes,
``keepdims``, specialised ``np.einsum``): the partitioner cannot place a view inside a kernel.
"""
import itertools
import math
import re
from typing import Callable, List, Sequence, Tuple

import numpy as np

from ..compat import add_nested_sdfg

Shape = Tuple[int, ...]

ERF = "erf(in0)"
SIGMOID = "1.0 / (1.0 + exp(-in0))"
GELU = f"0.5 * in0 * (1.0 + erf(in0 * {1 / math.sqrt(2.0)!r}))"
GELU_TANH = f"0.5 * in0 * (1.0 + tanh({math.sqrt(2.0 / math.pi)!r} * (in0 + 0.044715 * in0 * in0 * in0)))"
SOFTPLUS = "((in0 + log(1.0 + exp(-in0))) if in0 > 0 else log(1.0 + exp(in0)))"  # log(1 + e^x), no overflow

# Generated code is compiled with -ffast-math, under which the compiler may assume no NaN or infinity:
# `x != x` and std::isnan fold to false. These read the bits instead (host and device code alike).
FLOAT_CLASS_HELPERS = """
#include <cstdint>
#include <cstring>
DACE_HDFI bool __dp_isnan(float x) { uint32_t u; memcpy(&u, &x, 4); return (u & 0x7fffffffu) > 0x7f800000u; }
DACE_HDFI bool __dp_isnan(double x) {
    uint64_t u; memcpy(&u, &x, 8); return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
DACE_HDFI int __dp_infsign(float x) {
    uint32_t u; memcpy(&u, &x, 4); return (u & 0x7fffffffu) != 0x7f800000u ? 0 : (u >> 31 ? -1 : 1); }
DACE_HDFI int __dp_infsign(double x) {
    uint64_t u; memcpy(&u, &x, 8);
    return (u & 0x7fffffffffffffffull) != 0x7ff0000000000000ull ? 0 : (u >> 63 ? -1 : 1); }
"""


def hard_sigmoid(alpha: float, beta: float) -> str:
    """``max(0, min(1, alpha * x + beta))`` over ``in0``."""
    v = f"({alpha!r} * in0 + {beta!r})"
    return f"(0.0 if {v} < 0 else (1.0 if {v} > 1 else {v}))"


def np_dtype(dtype) -> str:
    """``np.float32``-style spelling of a dtype for generated code."""
    name = np.dtype(dtype).name
    return "np.bool_" if name == "bool" else f"np.{name}"


def shape_code(shape: Sequence[int]) -> str:
    shape = tuple(int(s) for s in shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def literal(value, dtype) -> str:
    """A scalar constant as an expression of the right type (a bare Python float would be float64)."""
    value = np.asarray(value).reshape(()).item()
    if np.dtype(dtype) == np.bool_:
        return repr(bool(value))
    if np.issubdtype(np.dtype(dtype), np.integer):
        return f"{np_dtype(dtype)}({int(value)})"
    return f"{np_dtype(dtype)}({float(value)!r})"


def keep_shape(shape: Shape, axes: Sequence[int]) -> Shape:
    """``shape`` with the reduced ``axes`` kept as length-one axes (NumPy's ``keepdims=True``)."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def broadcast_index(in_shape: Shape, out_shape: Shape, params: Sequence[str]) -> str:
    """Subscript reading an operand of ``in_shape`` broadcast to ``out_shape`` at map indices ``params``."""
    lead = len(out_shape) - len(in_shape)
    idx = ["0" if s == 1 and out_shape[lead + i] != 1 else params[lead + i] for i, s in enumerate(in_shape)]
    return "[" + ", ".join(idx) + "]" if idx else "[0]"


def _operand_index(op, out_shape, params) -> str:
    """``(name, shape)`` broadcasts NumPy-style; ``(name, shape, dims)`` reads axis ``k`` of the operand at
    output axis ``dims[k]`` (a reduced array against the unreduced output, without a reshape view)."""
    if len(op) == 3:
        return "[" + ", ".join("0" if s == 1 else params[d] for s, d in zip(op[1], op[2])) + "]"
    return broadcast_index(tuple(op[1]) or (1, ), out_shape, params)


def _connectors(expr: str) -> str:
    """Expressions are written over ``in0, in1, ...``; the tasklet's connectors carry a leading underscore,
    which no array identifier has (see :func:`.codegen.identifier`), so they never shadow an array."""
    return re.sub(r"\bin(\d+)\b", r"_in\1", expr)


def _map_head(params, shape) -> List[str]:
    return [f"for {', '.join(params)} in dace.map[{', '.join(f'0:{s}' for s in shape)}]:", "    with dace.tasklet:"]


def elementwise(out: str, out_shape: Shape, dtype, operands: Sequence[tuple], expr: str) -> List[str]:
    """An explicit map computing ``expr`` (a C-callable scalar expression over ``in0``, ``in1``, ...) per
    output element, with NumPy broadcasting of the operands (see :func:`_operand_index`). Used for
    functions NumPy-level DaCe lacks (erf), to fuse scalar chains into one map, and wherever DaCe would
    otherwise make a view."""
    out_shape = tuple(out_shape) or (1, )
    params = [f"_i{k}" for k in range(len(out_shape))]
    lines = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, out_shape)
    for k, op in enumerate(operands):
        lines.append(f"        _in{k} << {op[0]}{_operand_index(op, out_shape, params)}")
    lines += [f"        _o >> {out}[{', '.join(params)}]", f"        _o = {_connectors(expr)}"]
    return lines


def copy_slice(out: str, out_shape: Shape, dtype, x: str, starts: Sequence[int], steps: Sequence[int]) -> List[str]:
    """``out = x[start::step, ...]`` as a map over the output's axes (NumPy-level DaCe cannot copy views)."""
    params = [f"_i{k}" for k in range(len(out_shape))]
    idx = [p if (a, s) == (0, 1) else f"{p} + {a}" if s == 1 else f"{p} * {s} + {a}"
           for p, a, s in zip(params, starts, steps)]
    return ([f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, out_shape) +
            [f"        _v << {x}[{', '.join(idx)}]", f"        _o >> {out}[{', '.join(params)}]", "        _o = _v"])


def concat(out: str, out_shape: Shape, dtype, parts: Sequence[Tuple[str, Shape]], axis: int) -> List[str]:
    """``out = np.concatenate(parts, axis)`` as one copy map per part into its block of the output. Not
    ``np.concatenate``: DaCe 2's simplification turns that into a nested SDFG whose connector keeps a
    part's shape and then fails validation when the parts are transients written by maps (dace 2.0.0b1)."""
    lines = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"]
    start = 0
    for x, shape in parts:
        params = [f"_i{k}" for k in range(len(shape))]
        dst = [f"{p} + {start}" if k == axis and start else p for k, p in enumerate(params)]
        lines += _map_head(params, shape) + [f"        _v << {x}[{', '.join(params)}]",
                                             f"        _o >> {out}[{', '.join(dst)}]", "        _o = _v"]
        start += shape[axis]
    return lines


def shifted(out: str, out_shape: Shape, dtype, reads: Sequence[Tuple[str, str]], expr: str) -> List[str]:
    """A map over ``out``'s axes (parameters ``_i0, _i1, ...``) reading ``reads`` (``(array, subscript)``, affine
    in the parameters) into ``in0, in1, ...`` and writing ``expr``: a window along one axis read as point
    reads, e.g. the channels around ``_i1`` of a local response norm."""
    params = [f"_i{k}" for k in range(len(out_shape))]
    lines = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, out_shape)
    lines += [f"        _in{k} << {name}[{idx}]" for k, (name, idx) in enumerate(reads)]
    return lines + [f"        _o >> {out}[{', '.join(params)}]", f"        _o = {_connectors(expr)}"]


def place(out: str, out_shape: Shape, dtype, x: str, shape: Shape, at: Callable[[List[str]], List[str]]) -> List[str]:
    """Zeros of ``out_shape`` with ``x`` written where ``at`` (the map's parameters over ``shape`` to the
    output's subscripts) puts each element: the gradient of taking a slice or an index."""
    zero = [f"_f{k}" for k in range(len(out_shape))]
    params = [f"_i{k}" for k in range(len(shape))] or ["_i0"]
    return ([f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(zero, out_shape) +
            [f"        _o >> {out}[{', '.join(zero)}]", "        _o = 0"] + _map_head(params, shape or (1, )) +
            [f"        _v << {x}[{', '.join(params)}]", f"        _o >> {out}[{', '.join(at(params[:len(shape)]))}]",
             "        _o = _v"])


def split_reshape(in_shape: Shape, out_shape: Shape):
    """For a reshape that only splits axes (and adds or drops length-one axes), the input index of every
    input axis as ``[(output axis, stride), ...]``; None for reshapes that merge axes."""
    groups, j = [], 0
    for s in in_shape:
        group, size = [], 1
        while j < len(out_shape) and size * out_shape[j] <= s and (size < s or out_shape[j] == 1):
            if out_shape[j] != 1:
                group.append(j)
            size *= out_shape[j]
            j += 1
            if size == s and (j >= len(out_shape) or out_shape[j] != 1):
                break
        if size != s:
            return None
        strides, st = [], 1
        for a in reversed(group):
            strides.append((a, st))
            st *= out_shape[a]
        groups.append(list(reversed(strides)))
    if any(out_shape[k] != 1 for k in range(j, len(out_shape))):
        return None
    return groups


def reshape_copy(out: str, out_shape: Shape, dtype, x: str, groups) -> List[str]:
    """A split-only reshape (see :func:`split_reshape`) as an affine copy map, so that a schedule can
    split it like any map (``np.reshape`` would be a view)."""
    out_shape = tuple(out_shape) or (1, )
    params = [f"_i{k}" for k in range(len(out_shape))]
    idx = [" + ".join(f"{params[a]} * {st}" if st != 1 else params[a] for a, st in g) or "0" for g in groups]
    return (
        [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, out_shape) +
        [f"        _v << {x}[{', '.join(idx) or '0'}]", f"        _o >> {out}[{', '.join(params)}]", "        _o = _v"])


def contraction(out: str, dtype, terms: Sequence[str], operands: Sequence[Tuple[str, Shape]], rhs: str,
                sizes: dict) -> List[str]:
    """An einsum as two explicit maps: zero the output (parameters ``_z*``), then one map over every index
    letter (parameters ``_i_<letter>``) that accumulates products with write-conflict resolution ``+``.
    Unlike ``np.einsum`` (which DaCe specialises into GEMMs on reshaped or transposed views), every axis
    (batch, head, contraction) is a parameter of one map that a schedule can split; length-one operand
    axes broadcast. :func:`nest_contractions` then puts each pair into a nested SDFG of its own."""
    letters = []
    for t in list(terms) + [rhs]:
        letters += [c for c in t if c not in letters]
    params = {c: f"_i_{c}" for c in letters}
    out_shape = tuple(sizes[c] for c in rhs) or (1, )
    zero = [f"_z{k}" for k in range(len(out_shape))]
    lines = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(zero, out_shape)
    lines += [f"        _o >> {out}[{', '.join(zero)}]", "        _o = 0"]
    lines += _map_head([params[c] for c in letters], [sizes[c] for c in letters])
    for k, (t, (name, shape)) in enumerate(zip(terms, operands)):
        idx = ", ".join("0" if s == 1 and sizes[c] != 1 else params[c] for c, s in zip(t, shape))
        lines.append(f"        _in{k} << {name}[{idx or '0'}]")
    lines.append(f"        _o >> {out}(1, lambda a, b: a + b)[{', '.join(params[c] for c in rhs) or '0'}]")
    lines.append(f"        _o = {' * '.join(f'_in{k}' for k in range(len(terms)))}")
    return lines


def _scope_parts(state, entry):
    from dace.sdfg import nodes
    exit_ = state.exit_node(entry)
    inner = [n for n in state.scope_subgraph(entry).nodes() if isinstance(n, nodes.Tasklet)]
    return exit_, inner


def nest_contractions(sdfg, prefix: str = "einsum") -> int:
    """Moves every zero/accumulate map pair made by :func:`contraction` into a nested SDFG (``no_inline``).

    The partitioner then schedules the pair as one kernel, as it does DaCe's own GEMM expansion: the
    accumulator is zeroed on the ranks that accumulate into it, instead of being zeroed as a kernel of
    its own and shipped to those ranks. The nested maps are called ``<prefix>_<k>.zero`` and
    ``<prefix>_<k>.contract``. Returns how many were nested."""
    import copy
    import dace
    from dace import nodes
    from dace.memlet import Memlet

    def scopes(kind):
        out = []
        for st in sdfg.states():
            for n in st.nodes():
                if isinstance(n, nodes.MapEntry) and st.entry_node(n) is None and n.map.params and \
                        all(p.startswith(kind) for p in n.map.params):
                    out.append((st, n))
        return out

    zeros = {}
    for st, entry in scopes("_z"):
        exit_, _ = _scope_parts(st, entry)
        for e in st.out_edges(exit_):
            zeros.setdefault(e.data.data, []).append((st, entry))
    count = 0
    for st, entry in scopes("_i_"):
        exit_, tasklets = _scope_parts(st, entry)
        outs = [e for e in st.out_edges(exit_) if e.data.wcr is not None]
        if len(outs) != 1 or len(tasklets) != 1 or not zeros.get(outs[0].data.data):
            continue
        out_edge, tasklet = outs[0], tasklets[0]
        out_name = out_edge.data.data
        zst, zentry = zeros[out_name].pop(0)
        zexit, ztasklets = _scope_parts(zst, zentry)
        inner = dace.SDFG(f"{prefix}_{count}")
        reads = [e for e in st.in_edges(entry) if e.data.data is not None]
        for name in sorted({e.data.data for e in reads} | {out_name}):
            desc = sdfg.arrays[name]  # views (reshapes) outside are plain arrays inside
            inner.add_array(name, desc.shape, desc.dtype, storage=desc.storage, strides=desc.strides)
        s0 = inner.add_state("zero")
        zt = ztasklets[0]
        s0.add_mapped_tasklet("zero", dict(zip(zentry.map.params, [f"{b}:{e + 1}" for b, e, _ in zentry.map.range])),
                              {}, zt.code.as_string,
                              {c: copy.deepcopy(e.data) for e in zst.out_edges(zt) for c in [e.src_conn]},
                              external_edges=True)
        s1 = inner.add_state_after(s0, "contract")
        s1.add_mapped_tasklet("contract", dict(zip(entry.map.params, [f"{b}:{e + 1}" for b, e, _ in entry.map.range])),
                              {e.dst_conn: copy.deepcopy(e.data) for e in st.in_edges(tasklet)}, tasklet.code.as_string,
                              {e.src_conn: copy.deepcopy(e.data) for e in st.out_edges(tasklet)}, external_edges=True)
        # A result array keeps its name outside only: DaCe 2 validates a nested SDFG's own ``__return_<j>``
        # arrays as its return tuple (consecutive from 0), which one contraction's output is not.
        inner_name = {n: f"_dp{n}" for n in inner.arrays if n.startswith("__return")}
        for old, new in inner_name.items():
            inner.replace(old, new)
        conn = lambda n: inner_name.get(n, n)  # noqa: E731
        node = add_nested_sdfg(st, inner, {conn(e.data.data) for e in reads}, {conn(out_name)})
        node.no_inline = True
        done = set()
        for e in reads:
            if e.data.data not in done:
                done.add(e.data.data)
                st.add_edge(e.src, e.src_conn, node, conn(e.data.data),
                            Memlet.from_array(e.data.data, sdfg.arrays[e.data.data]))
        st.add_edge(node, conn(out_name), out_edge.dst, out_edge.dst_conn,
                    Memlet.from_array(out_name, sdfg.arrays[out_name]))
        st.remove_nodes_from(st.scope_subgraph(entry).nodes())
        zwritten = [e.dst for e in zst.out_edges(zexit)]
        zst.remove_nodes_from(zst.scope_subgraph(zentry).nodes())
        zst.remove_nodes_from([n for n in zwritten if zst.degree(n) == 0])
        count += 1
    return count


def matmul_terms(a_shape: Shape, b_shape: Shape) -> Tuple[str, str, str, dict]:
    """Einsum terms of NumPy's ``matmul`` (broadcast batch axes, 1-D operands) for :func:`contraction`:
    (a term, b term, output term, sizes)."""
    letters = "abcdefghijlopqrstuvwxyz"  # m: rows of a, k: contracted, n: columns of b
    if a_shape[-1] != b_shape[-2 if len(b_shape) > 1 else 0]:
        raise ValueError(f"matmul of shapes {tuple(a_shape)} and {tuple(b_shape)}: inner sizes differ")
    ab, bb = a_shape[:-2], b_shape[:-2]
    nb = max(len(ab), len(bb))
    batch = tuple(np.broadcast_shapes(ab, bb)) if nb else ()
    bl = letters[:nb]
    sizes = dict(zip(bl, batch), k=a_shape[-1])
    ta = bl[nb - len(ab):] + ("m" if len(a_shape) > 1 else "") + "k"
    tb = bl[nb - len(bb):] + "k" + ("n" if len(b_shape) > 1 else "")
    if len(a_shape) > 1:
        sizes["m"] = a_shape[-2]
    if len(b_shape) > 1:
        sizes["n"] = b_shape[-1]
    to = bl + ("m" if len(a_shape) > 1 else "") + ("n" if len(b_shape) > 1 else "")
    return ta, tb, to, sizes


def _reduced(shape: Shape, axes) -> Tuple[Shape, List[int]]:
    """Shape after reducing ``axes`` and, per remaining axis, its axis in the unreduced shape."""
    dims = [i for i in range(len(shape)) if i not in axes]
    return tuple(shape[i] for i in dims) or (1, ), dims or [0]


def reduce(fresh: Callable[[str], str], out: str, x: str, shape: Shape, axes: Sequence[int], keepdims: bool,
           kind: str, dtype) -> List[str]:
    """ReduceSum / ReduceMean / ReduceMax / ReduceMin over ``axes`` (a DaCe Reduce library node); the mean's
    division and ``keepdims`` are one map instead of a reshape view."""
    axes = tuple(sorted(a % len(shape) for a in axes))
    fn = {"sum": "np.sum", "mean": "np.sum", "max": "np.max", "min": "np.min"}[kind]
    kept, dims = _reduced(shape, axes)
    ax = axes if len(axes) > 1 else axes[0]
    if not keepdims and kind != "mean":
        return [f"{out} = {fn}({x}, axis={ax})"]
    red = fresh("red")
    expr = f"in0 / {int(np.prod([shape[a] for a in axes]))}" if kind == "mean" else "in0"
    if keepdims:
        return [f"{red} = {fn}({x}, axis={ax})"] + elementwise(out, keep_shape(shape, axes), dtype,
                                                                [(red, kept, dims)], expr)
    return [f"{red} = {fn}({x}, axis={ax})"] + elementwise(out, kept, dtype, [(red, kept)], expr)


def softmax(fresh: Callable[[str], str], out: str, x: str, shape: Shape, axes: Sequence[int], dtype,
            log: bool = False) -> List[str]:
    """Numerically stable (log-)softmax over ``axes``: max, shifted exp, sum, normalise."""
    axes = tuple(sorted(a % len(shape) for a in axes))
    ax = axes if len(axes) > 1 else axes[0]
    rs, dims = _reduced(shape, axes)
    mx, ex, s = (fresh(h) for h in ("smax", "sexp", "ssum"))
    lines = [f"{mx} = np.max({x}, axis={ax})"]
    lines += elementwise(ex, shape, dtype, [(x, shape), (mx, rs, dims)], "exp(in0 - in1)")
    lines += [f"{s} = np.sum({ex}, axis={ax})"]
    if log:
        lines += elementwise(out, shape, dtype, [(x, shape), (mx, rs, dims), (s, rs, dims)], "in0 - in1 - log(in2)")
    else:
        lines += elementwise(out, shape, dtype, [(ex, shape), (s, rs, dims)], "in0 / in1")
    return lines


def layer_norm(fresh: Callable[[str], str], out: str, x: str, shape: Shape, axis: int, eps: float, dtype,
               scale=None, bias=None, mean_out=None, rstd_out=None) -> List[str]:
    """Layer normalisation over axes ``axis..end`` with optional ``scale`` / ``bias`` (identifiers with
    their shapes, broadcast against the normalised axes); ``mean_out`` / ``rstd_out`` also keep the
    statistics (ONNX's optional outputs), with the normalised axes kept as length one."""
    axis %= len(shape)
    axes = tuple(range(axis, len(shape)))
    ax = axes if len(axes) > 1 else axes[0]
    rs, dims = _reduced(shape, axes)
    n = int(np.prod(shape[axis:]))
    s, mean, d, sq, v, rstd = (fresh(h) for h in ("ln_sum", "ln_mean", "ln_dev", "ln_sq", "ln_var", "ln_rstd"))
    lines = [f"{s} = np.sum({x}, axis={ax})"]
    lines += elementwise(mean, rs, dtype, [(s, rs)], f"in0 / {n}")
    lines += elementwise(d, shape, dtype, [(x, shape), (mean, rs, dims)], "in0 - in1")
    lines += elementwise(sq, shape, dtype, [(d, shape)], "in0 * in0")
    lines += [f"{v} = np.sum({sq}, axis={ax})"]
    lines += elementwise(rstd, rs, dtype, [(v, rs)], f"1.0 / sqrt(in0 / {n} + {float(eps)!r})")
    ops, expr = [(d, shape), (rstd, rs, dims)], "in0 * in1"
    if scale is not None:
        ops.append(scale)
        expr = f"({expr}) * in{len(ops) - 1}"
    if bias is not None:
        ops.append(bias)
        expr = f"{expr} + in{len(ops) - 1}"
    lines += elementwise(out, shape, dtype, ops, expr)
    ks = keep_shape(shape, axes)
    for name, src in ((mean_out, mean), (rstd_out, rstd)):
        if name:
            lines += elementwise(name, ks, dtype, [(src, rs, dims)], "in0")
    return lines


# -- merging reshapes, padding, windows (convolution, pooling) and run-time gathers -----------------------


def refine(a: Sequence[int], b: Sequence[int]):
    """Axis sizes that both ``a`` and ``b`` are products of runs of (their common refinement), or None."""
    a, b, out = list(a), list(b), []
    while a and b:
        g = math.gcd(a[0], b[0])
        if g == 1 and (a[0] != 1 or b[0] != 1):
            return None
        out.append(g)
        a[0] //= g
        b[0] //= g
        a, b = (a[1:] if a[0] == 1 else a), (b[1:] if b[0] == 1 else b)
    return out if not a and not b else None


def linear_index(shape: Shape, fine: Sequence[int], params: Sequence[str]) -> str:
    """Subscript of an array of ``shape`` at refinement indices ``params`` (runs of ``fine`` form its axes;
    length-one axes are index 0)."""
    idx, k = [], 0
    for s in shape or (1, ):
        if s == 1:
            idx.append("0")
            continue
        terms, size = [], 1
        while size < s:
            terms.append(params[k])
            size *= fine[k]
            k += 1
        stride, parts = 1, []
        for p, f in reversed(list(zip(terms, fine[k - len(terms):k]))):
            parts.append(p if stride == 1 else f"{stride} * {p}")
            stride *= f
        idx.append(" + ".join(reversed(parts)))
    return ", ".join(idx)


def merge_reshape_copy(out: str, out_shape: Shape, dtype, x: str, in_shape: Shape):
    """A reshape that merges (and splits) axes as one copy map over the common refinement of both shapes,
    both sides indexed affinely (``np.reshape`` would be a view, which no partitioned kernel may hold).
    None when the shapes have no common refinement."""
    fine = refine([s for s in in_shape if s != 1], [s for s in out_shape if s != 1])
    if fine is None:
        return None
    params = [f"_r{k}" for k in range(len(fine))] or ["_r0"]
    return ([f"{out} = np.empty({shape_code(tuple(out_shape) or (1, ))}, dtype={np_dtype(dtype)})"] +
            _map_head(params, fine or [1]) +
            [f"        _v << {x}[{linear_index(in_shape, fine, params)}]",
             f"        _o >> {out}[{linear_index(out_shape, fine, params)}]", "        _o = _v"])


def padded_shape(shape: Shape, lead: int, before: Sequence[int], after: Sequence[int]) -> Shape:
    """The shape :func:`pad` gives ``shape`` (padded or cropped from axis ``lead``)."""
    return tuple(shape[:lead]) + tuple(s + b + a for s, b, a in zip(shape[lead:], before, after))


def mirror_pad_refusal(shape: Shape, lead: int, before: Sequence[int], after: Sequence[int], mode: str) -> str:
    """Why :func:`pad` cannot pad ``shape`` in ``edge``, ``reflect`` or ``wrap`` mode ("" where it can): a
    negative amount, a reflection at least as wide as its axis (it would reflect twice), or a wrap wider than
    its axis (it would wrap twice)."""
    if min(list(before) + list(after), default=0) < 0:
        return "a negative amount"
    if mode == "reflect" and any(b >= s or a >= s for b, a, s in zip(before, after, shape[lead:])):
        return "a reflection as wide as its axis or wider"
    if mode == "wrap" and any(b > s or a > s for b, a, s in zip(before, after, shape[lead:])):
        return "a wrap wider than its axis"
    return ""


def pad(out: str, x: str, shape: Shape, lead: int, before: Sequence[int], after: Sequence[int], value: str,
        dtype, mode: str = "constant") -> List[str]:
    """``out`` = ``x`` padded by ``before`` / ``after`` on its last axes (from axis ``lead``): with ``value``
    (mode ``constant``; negative amounts crop), the nearest edge element (``edge``), the mirror image
    without the edge (``reflect``) or the other end of the axis (``wrap``, circular padding).

    Every map has affine subscripts, so any split carries over, and no tasklet indexes an array itself (DaCe
    1.0.2 drops such a subscript where the array has an axis of extent 1, a batch of one). Constant padding
    is a map filling ``out`` with ``value`` (none for a pure crop) and a map copying ``x`` into its box; edge
    and reflect copy each part of the output (before, inside, after the input on each axis) from its source,
    which is affine in the position on each part."""
    spatial = shape[lead:]
    out_shape = padded_shape(shape, lead, before, after)
    params = [f"_i{k}" for k in range(len(out_shape))]
    head = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"]
    if mode == "constant":
        lines = head
        if any(b > 0 for b in before) or any(a > 0 for a in after):
            lines += _map_head(params, out_shape) + [f"        _o >> {out}[{', '.join(params)}]", f"        _o = {value}"]
        kept = [s - max(0, -b) - max(0, -a) for s, b, a in zip(spatial, before, after)]
        if min(kept, default=1) > 0:
            src = params[:lead] + [f"{p} + {max(0, -b)}" for p, b in zip(params[lead:], before)]
            dst = params[:lead] + [f"{p} + {max(0, b)}" for p, b in zip(params[lead:], before)]
            lines += _map_head(params, tuple(shape[:lead]) + tuple(kept))
            lines += [f"        _s << {x}[{', '.join(src)}]", f"        _o >> {out}[{', '.join(dst)}]", "        _o = _s"]
        return lines
    lines = head
    for src, dst, extents in _pad_parts(params, shape, lead, before, after, mode):
        lines += _map_head(params, extents)
        lines += [f"        _s << {x}[{', '.join(src)}]", f"        _o >> {out}[{', '.join(dst)}]", "        _o = _s"]
    return lines


def _pad_parts(params, shape: Shape, lead: int, before, after, mode: str):
    """(source subscript, padded subscript, extents) of each part of an edge, reflect or wrap padding: each
    axis has up to three parts (before, the input, after) whose source index is affine in the position, and
    every combination of parts is one map."""
    first = {"edge": lambda p, s, b: "0", "reflect": lambda p, s, b: f"{b} - {p}",
             "wrap": lambda p, s, b: f"{p} + {s - b}"}
    last = {"edge": lambda p, s: str(s - 1), "reflect": lambda p, s: f"{s - 2} - {p}", "wrap": lambda p, s: p}
    if mode not in first:
        raise ValueError(f"pad mode {mode!r}")
    parts = []
    for p, s, b, a in zip(params[lead:], shape[lead:], before, after):
        mine = [(b, s, p)]
        if b > 0:
            mine.append((0, b, first[mode](p, s, b)))
        if a > 0:
            mine.append((b + s, a, last[mode](p, s)))
        parts.append(mine)
    for combo in itertools.product(*parts):
        yield (list(params[:lead]) + [c[2] for c in combo],
               list(params[:lead]) + [f"{p} + {c[0]}" for p, c in zip(params[lead:], combo)],
               tuple(shape[:lead]) + tuple(c[1] for c in combo))


def pad_backward(out: str, g: str, shape: Shape, lead: int, before: Sequence[int], after: Sequence[int], dtype,
                 mode: str) -> List[str]:
    """The gradient of an edge or reflect :func:`pad` of an array of ``shape``: ``g`` (the padded shape's
    gradient) added back to the elements each part was copied from. A map zeroes ``out``, then one
    accumulating map per part of the padding (the edge parts add many positions to one element)."""
    params = [f"_i{k}" for k in range(len(shape))]
    lines = [f"{out} = np.empty({shape_code(shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, shape)
    lines += [f"        _o >> {out}[{', '.join(params)}]", "        _o = 0"]
    for src, dst, extents in _pad_parts(params, shape, lead, before, after, mode):
        lines += _map_head(params, extents)
        lines += [f"        _s << {g}[{', '.join(dst)}]", f"        _o >> {out}(1, lambda a, b: a + b)[{', '.join(src)}]",
                  "        _o = _s"]
    return lines


def linear_weights(factor: int, asymmetric: bool = False) -> np.ndarray:
    """(factor, 3) weights of linear upsampling by an integer ``factor``: output ``factor*q + r`` has its source
    at ``q + (r + 0.5)/factor - 0.5`` (``q + r/factor`` when ``asymmetric``) and mixes inputs ``q - 1, q, q + 1``
    (positions 0, 1, 2 of the input padded by one edge element on each side) with row ``r``."""
    table = np.zeros((factor, 3), np.float64)
    for r in range(factor):
        src = r / factor if asymmetric else (r + 0.5) / factor - 0.5
        low = int(np.floor(src))
        table[r, low + 1] += 1 - (src - low)
        table[r, low + 2] += src - low
    return table


def _block_loops(shape: Shape, factors: Sequence[int]):
    """(scaled axes, loops over (input element, position in its block), the output subscript
    ``a * factor + b``) of an upsampling by integer ``factors``."""
    scaled = [d for d, k in enumerate(factors) if k > 1]
    loops = [(f"a{d}", s) for d, s in enumerate(shape)] + [(f"b{d}", factors[d]) for d in scaled]
    fine = ", ".join(f"_i_a{d} * {factors[d]} + _i_b{d}" if d in scaled else f"_i_a{d}" for d in range(len(shape)))
    return scaled, loops, fine


def nearest_upsample(out: str, x: str, shape: Shape, factors: Sequence[int], dtype) -> List[str]:
    """``x`` of ``shape`` upsampled by integer ``factors``, each element copied to its block (:func:`spread`)."""
    _, loops, fine = _block_loops(shape, factors)
    out_shape = tuple(s * k for s, k in zip(shape, factors))
    return spread(out, out_shape, dtype, x, loops, ", ".join(f"_i_a{d}" for d in range(len(shape))), fine)


def nearest_upsample_backward(out: str, g: str, shape: Shape, factors: Sequence[int], dtype) -> List[str]:
    """The gradient of :func:`nearest_upsample` for an input of ``shape``: the sum of each element's block of
    ``g``, an accumulating map over the input and the block."""
    _, loops, fine = _block_loops(shape, factors)
    return accumulate(out, shape, dtype, loops, [(g, fine)], ", ".join(f"_i_a{d}" for d in range(len(shape))), "in0")


def linear_upsample(out: str, xp: str, shape: Shape, factors: Sequence[int], weights: dict, dtype) -> List[str]:
    """``out`` = the array of ``shape`` upsampled linearly by integer ``factors``, from ``xp`` (it padded by one
    edge element on each side of each scaled axis) and ``weights`` ({axis: (factor, 3) table of
    :func:`linear_weights`}): one map over the input and the phases, reading three neighbours per scaled
    axis and each axis's weights by phase. Every subscript is affine, so any split carries over."""
    scaled, loops, fine = _block_loops(shape, factors)
    out_shape = tuple(s * k for s, k in zip(shape, factors))
    lines = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"]
    lines += _map_head([f"_i_{c}" for c, _ in loops], [n for _, n in loops])
    for d in scaled:
        lines += [f"        _w{d}_{t} << {weights[d]}[_i_b{d}, {t}]" for t in range(3)]
    terms = []
    for k, taps in enumerate(itertools.product(range(3), repeat=len(scaled))):
        at = dict(zip(scaled, taps))
        sub = ", ".join(f"_i_a{d} + {at[d]}" if d in at else f"_i_a{d}" for d in range(len(shape)))
        lines.append(f"        _x{k} << {xp}[{sub}]")
        terms.append(" * ".join([f"_w{d}_{t}" for d, t in at.items()] + [f"_x{k}"]))
    return lines + [f"        _o >> {out}[{fine}]", f"        _o = {' + '.join(terms)}"]


def linear_upsample_backward(out: str, g: str, shape: Shape, factors: Sequence[int], weights: dict,
                             dtype) -> List[str]:
    """The gradient of :func:`linear_upsample` with respect to ``xp``: each output's gradient times its
    weights, added to the three neighbours per scaled axis it read (an accumulating map over the input, the
    phases and the neighbours). :func:`pad_backward` (edge) then folds the border into the input."""
    scaled, loops, fine = _block_loops(shape, factors)
    loops += [(f"t{d}", 3) for d in scaled]
    padded = tuple(s + 2 if d in scaled else s for d, s in enumerate(shape))
    reads = [(g, fine)] + [(weights[d], f"_i_b{d}, _i_t{d}") for d in scaled]
    write = ", ".join(f"_i_a{d} + _i_t{d}" if d in scaled else f"_i_a{d}" for d in range(len(shape)))
    return accumulate(out, padded, dtype, loops, reads, write, " * ".join(f"in{k}" for k in range(len(reads))))


def spread(out: str, out_shape: Shape, dtype, x: str, loops: Sequence[Tuple[str, int]], read: str,
           write: str) -> List[str]:
    """``out[write] = x[read]`` over ``loops`` (``(letter, extent)``, parameters ``_i_<letter>``), every element
    of ``out`` written once: a map over the *input* with affine subscripts on both sides (``out[n, c, h * 2 +
    a, w * 2 + b] = x[n, c, h, w]``), where a map over the output would need floor division to find its
    source, which a schedule cannot split."""
    return ([f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] +
            _map_head([f"_i_{c}" for c, _ in loops], [n for _, n in loops]) +
            [f"        _in0 << {x}[{read}]", f"        _o >> {out}[{write}]", "        _o = _in0"])


def accumulate(out: str, out_shape: Shape, dtype, loops: Sequence[Tuple[str, int]], reads: Sequence[Tuple[str, str]],
               write: str, expr: str, init: str = "0", wcr: str = "a + b") -> List[str]:
    """A contraction with affine (not only letter-by-letter) subscripts, in the form of :func:`contraction`
    (so :func:`nest_contractions` nests it): a map setting ``out`` to ``init``, then one map over
    ``loops`` (``(letter, extent)``, parameters ``_i_<letter>``) reading ``reads`` (``(array, subscript)``,
    subscripts written over the parameters) into ``in0, in1, ...`` and accumulating ``expr`` into
    ``out[write]`` with ``wcr``. Convolutions and their gradients are such maps."""
    out_shape = tuple(out_shape) or (1, )
    zero = [f"_z{k}" for k in range(len(out_shape))]
    lines = [f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(zero, out_shape)
    lines += [f"        _o >> {out}[{', '.join(zero)}]", f"        _o = {init}"]
    lines += _map_head([f"_i_{c}" for c, _ in loops], [n for _, n in loops])
    for k, (name, idx) in enumerate(reads):
        lines.append(f"        _in{k} << {name}[{idx}]")
    lines.append(f"        _o >> {out}(1, lambda a, b: {wcr})[{write}]")
    lines.append(f"        _o = {_connectors(expr)}")
    return lines


def window_counts(spatial: Shape, before: Sequence[int], after: Sequence[int], kernel: Sequence[int], strides,
                  dilations, out_spatial: Shape, include_pad: bool) -> np.ndarray:
    """Each pooling window's number of elements inside the input (``include_pad``: inside the input and
    its ``before``/``after`` padding, never the extra positions a ``ceil_mode`` window reaches past it),
    an array of the output's spatial shape: average pooling's divisors."""
    counts = np.ones((), np.int64)
    for s, b, a, k, st, d, o in zip(spatial, before, after, kernel, strides, dilations, out_spatial):
        lo, hi = (-b, s + a) if include_pad else (0, s)
        taps = np.arange(o)[:, None] * st - b + np.arange(k)[None, :] * d  # positions in the input
        counts = np.multiply.outer(counts, ((taps >= lo) & (taps < hi)).sum(axis=1))
    return counts


def pool(out: str, out_shape: Shape, dtype, xp: str, kernel: Sequence[int], strides, dilations,
         combine: Callable[[str, str], str], divisor: str = "", counts: str = "") -> List[str]:
    """One map over the pooled output (batch, channel, positions): each element reads its window of the
    padded input ``xp`` as point reads (one connector per tap), folds them with ``combine(a, b)``, and
    divides by the literal ``divisor`` or by its element of the array ``counts`` (spatial shape)."""
    params = [f"_i{k}" for k in range(len(out_shape))]
    reads = []
    for offs in np.ndindex(*kernel):
        sub = [f"{p} * {st} + {o * d}" if st != 1 else f"{p} + {o * d}"
               for p, st, o, d in zip(params[2:], strides, offs, dilations)]
        reads.append(f"        _in{len(reads)} << {xp}[{', '.join(params[:2] + sub)}]")
    expr = "_in0"
    for k in range(1, len(reads)):
        expr = combine(expr, f"_in{k}")
    if counts:
        reads.append(f"        _d << {counts}[{', '.join(params[2:])}]")
        divisor = "_d"
    if divisor:
        expr = f"({expr}) / {divisor}"
    return ([f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, out_shape) +
            reads + [f"        _o >> {out}[{', '.join(params)}]", f"        _o = {expr}"])


def conv_terms(n_spatial: int, strides, dilations, transpose_input: bool = False):
    """Loop letters and subscripts of an N-d convolution ``y[n, o, Y] += xp[n, c, Y * s + K * d] * w[o, c, K]``
    (``xp`` padded): (batch, out channel, in channel, output position letters, kernel letters, input
    position subscripts)."""
    ys = [f"y{k}" for k in range(n_spatial)]
    ks = [f"k{k}" for k in range(n_spatial)]
    pos = []
    for y, k, s, d in zip(ys, ks, strides, dilations):
        a = f"_i_{y}" if s == 1 else f"_i_{y} * {s}"
        b = f"_i_{k}" if d == 1 else f"_i_{k} * {d}"
        pos.append(f"{a} + {b}")
    return ys, ks, pos


def window_count(size: int, k: int, s: int, d: int, ceil: bool = False) -> int:
    """Windows of ``k`` taps, dilation ``d``, stride ``s`` along an axis of ``size`` (padded) elements; with
    ``ceil`` a last partial window counts too."""
    span = size - (k - 1) * d - 1
    return (-(-span // s) if ceil else span // s) + 1


def pool_extent(spatial: Shape, kernel, strides, dilations, before, after, ceil: bool):
    """(output sizes, pads after) of a pooling. With ``ceil`` the last window must start inside the input
    or its left padding (PyTorch, ONNX), and the pads after grow to hold it."""
    osz = [window_count(s + b + a, k, st, d, ceil)
           for s, b, a, k, st, d in zip(spatial, before, after, kernel, strides, dilations)]
    if ceil:
        osz = [o - 1 if (o - 1) * st >= s + b else o for o, st, s, b in zip(osz, strides, spatial, before)]
    grown = [max(a, (o - 1) * st + (k - 1) * d + 1 - s - b)
             for a, o, st, k, d, s, b in zip(after, osz, strides, kernel, dilations, spatial, before)]
    return osz, grown


def transposed_conv_full(spatial: Shape, kernel, strides, dilations) -> Shape:
    """Spatial extents of a transposed convolution's output before its padding is cropped."""
    return tuple((i - 1) * s + (k - 1) * d + 1 for i, k, s, d in zip(spatial, kernel, strides, dilations))


def transposed_conv_terms(x_shape: Shape, w_shape: Shape, strides, dilations):
    """(loops, input subscript, weight subscript, output subscript) of a transposed convolution
    ``y[n, o, i*s + k*d] += x[n, c, i] * w[c, o, k]``: the form of a convolution's input gradient, an
    accumulating map over (batch, in channel, out channel, input positions, kernel positions)."""
    ys, ks, pos = conv_terms(len(x_shape) - 2, strides, dilations)
    loops = [("n", x_shape[0]), ("c", x_shape[1]), ("o", w_shape[1])] + list(zip(ys, x_shape[2:])) + \
        list(zip(ks, w_shape[2:]))
    return (loops, ", ".join(["_i_n", "_i_c"] + [f"_i_{y}" for y in ys]),
            ", ".join(["_i_c", "_i_o"] + [f"_i_{k}" for k in ks]), ", ".join(["_i_n", "_i_o"] + pos))


def transposed_conv(out: str, x: str, x_shape: Shape, w: str, w_shape: Shape, strides, dilations, dtype) -> List[str]:
    """The uncropped output of a transposed convolution (:func:`transposed_conv_terms`)."""
    loops, xi, wi, yi = transposed_conv_terms(x_shape, w_shape, strides, dilations)
    full = (x_shape[0], w_shape[1]) + transposed_conv_full(x_shape[2:], w_shape[2:], strides, dilations)
    return accumulate(out, full, dtype, loops, [(x, xi), (w, wi)], yi, "in0 * in1")


def conv_channels(groups: int, out_ch: int, in_ch: int):
    """(loops, output channel, input channel) of a convolution with ``groups``: the channel loops
    (``(letter, extent)``) and the subscripts of the output's and the input's channel over them. Grouped
    convolutions (depthwise ones: a group per input channel) loop over the group, the output channels in it
    and its input channels; the weight's second axis is the input channel in the group (``_i_c``)."""
    if groups == 1:
        return [("o", out_ch), ("c", in_ch)], "_i_o", "_i_c"
    og, ig = out_ch // groups, in_ch // groups
    return [("g", groups), ("o", og), ("c", ig)], f"_i_g * {og} + _i_o", f"_i_g * {ig} + _i_c"


def gather(out: str, out_shape: Shape, dtype, table: str, table_shape: Shape, axis: int, idx: str,
           idx_shape: Shape) -> List[str]:
    """``out = np.take(table, idx, axis)`` for run-time integer indices: one map over the output; each
    element reads its index and the table's whole gathered axis (so a split of the indices' axes, the
    batch, gives each rank its rows of the output while the table is read whole). Negative indices count
    from the end, as in ONNX and NumPy."""
    out_shape = tuple(out_shape) or (1, )
    params = [f"_i{k}" for k in range(len(out_shape))]
    ni = len(idx_shape)
    ip = params[axis:axis + ni]
    tidx = params[:axis] + [f"0:{table_shape[axis]}"] + params[axis + ni:]
    n = table_shape[axis]
    return ([f"{out} = np.empty({shape_code(out_shape)}, dtype={np_dtype(dtype)})"] + _map_head(params, out_shape) +
            [f"        _ix << {idx}[{', '.join(ip) or '0'}]", f"        _t << {table}[{', '.join(tidx)}]",
             f"        _o >> {out}[{', '.join(params)}]", f"        _o = _t[_ix + {n} if _ix < 0 else _ix]"])
