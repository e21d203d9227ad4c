"""Traced ATen graphs (``make_fx`` output, backward and optimizer included) to NumPy-level DaCe code.

Every value of the graph is an *expression view*: a scalar expression over elements of materialized
arrays, each read through an index map (logical axis per stored axis, or a constant 0). Elementwise ops,
broadcasts, transposes and size-one reshapes only build new expressions; an array is written (one explicit
map with one tasklet) only where a library op (``@``, reductions) needs one, where a value has several
users, or for the outputs. So ``p - lr * t(t(g))`` is one map, and every map keeps the tensor's axes
(the batch axis included) as its parameters, which a data-parallel schedule splits.
"""
import operator
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import FrontendError
from .codegen import ProgramBuilder
from . import numpy_ops as ops
from .numpy_ops import np_dtype, shape_code

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class Operand:
    name: str
    index: Tuple[Optional[int], ...]  # per stored axis: the logical axis it follows, or None (index 0)


@dataclass(frozen=True)
class Value:
    """``expr`` uses ``{k}`` for ``operands[k]``; a materialized array is ``"{0}"`` over itself."""
    shape: Shape
    dtype: np.dtype
    expr: str
    operands: Tuple[Operand, ...]

    def remap(self, shape: Shape, axis_of: Callable[[int], Optional[int]]) -> "Value":
        ops = tuple(Operand(o.name, tuple(None if a is None else axis_of(a) for a in o.index)) for o in self.operands)
        return Value(tuple(shape), self.dtype, self.expr, ops)

    def array(self) -> Optional[str]:
        """The array holding exactly this value in this layout, if there is one."""
        if self.expr == "{0}" and self.operands[0].index == (tuple(range(len(self.shape))) or (None, )):
            return self.operands[0].name
        return None


def array_value(name: str, shape: Shape, dtype, stored: Optional[Sequence[Optional[int]]] = None) -> Value:
    index = tuple(range(len(shape))) if stored is None else tuple(stored)
    return Value(tuple(shape), np.dtype(dtype), "{0}", (Operand(name, index or (None, )), ))


def constant(value, shape: Shape, dtype) -> Value:
    return Value(tuple(shape), np.dtype(dtype), repr(float(value)) if np.dtype(dtype).kind == "f" else repr(value), ())


def broadcast_to(v: Value, shape: Shape) -> Value:
    lead = len(shape) - len(v.shape)
    if lead < 0 or any(s != 1 and s != shape[lead + i] for i, s in enumerate(v.shape)):
        raise ValueError(f"cannot broadcast {v.shape} to {shape}")
    return v.remap(shape, lambda a: None if v.shape[a] == 1 and shape[lead + a] != 1 else lead + a)


def combine(fn: Callable[..., str], values: Sequence[Value], shape: Shape, dtype) -> Value:
    """Elementwise ``fn`` of ``values`` (broadcast to ``shape``) as one expression, operands shared."""
    operands: List[Operand] = []
    parts = []
    for v in values:
        v = broadcast_to(v, shape)
        ks = []
        for o in v.operands:
            if o not in operands:
                operands.append(o)
            ks.append("{%d}" % operands.index(o))
        parts.append("(" + v.expr.format(*ks) + ")")
    return Value(tuple(shape), np.dtype(dtype), fn(*parts), tuple(operands))


_FUNCTIONS = {"exp", "log", "sqrt", "rsqrt", "tanh", "pow", "max", "min", "abs", "sigmoid", "erf", "o"}


def _lit(x) -> str:
    return repr(float(x)) if isinstance(x, float) else repr(x)


class Converter:
    """Writes a traced ``torch.fx`` graph of ATen ops into a :class:`ProgramBuilder`."""

    def __init__(self, builder: ProgramBuilder):
        self.b = builder
        self.env: Dict[object, object] = {}
        self.node = None
        self.order: Dict[object, int] = {}  # each node's position in the graph

    def fresh(self, hint: str) -> str:
        """A new identifier that does not shadow a function the tasklets call (``exp = ...`` would)."""
        return self.b.fresh(f"{hint}_t" if hint.split("_")[0] in _FUNCTIONS else hint)

    # -- arrays ---------------------------------------------------------------------------------------
    def write(self, v: Value, hint: str = "t", uses_index: bool = False) -> Value:
        """An explicit map writing ``v`` into a new array (``uses_index``: ``expr`` names map parameters)."""
        out = self.fresh(hint)
        shape = v.shape or (1, )
        params = [f"i{k}" for k in range(len(shape))]
        ins = []
        for k, o in enumerate(v.operands):
            idx = ", ".join("0" if a is None else params[a] for a in o.index)
            ins.append(f"        in{k} << {o.name}[{idx}]")
        self.b.line(f"{out} = np.empty({shape_code(shape)}, dtype={np_dtype(v.dtype)})")
        self.b.line(f"for {', '.join(params)} in dace.map[{', '.join(f'0:{s}' for s in shape)}]:")
        self.b.line("    with dace.tasklet:")
        for line in ins:
            self.b.line(line)
        self.b.line(f"        o >> {out}[{', '.join(params)}]")
        self.b.line(f"        o = {v.expr.format(*[f'in{k}' for k in range(len(v.operands))])}")
        return array_value(out, v.shape, v.dtype)

    def materialize(self, v: Value, hint: str = "t") -> str:
        return v.array() or self.write(v, hint).operands[0].name

    def reduce(self, v: Value, axes: Sequence[int], keepdim: bool, kind: str = "sum", hint: str = "red") -> Value:
        """np.sum / np.max over ``axes`` (a Reduce library node); kept axes stay unsqueezed in the view."""
        axes = sorted({a % len(v.shape) for a in axes}) if v.shape else []
        src = self.materialize(v, hint + "_in")
        out = self.fresh(hint)
        fn = {"sum": "np.sum", "max": "np.max"}[kind]
        kept = [a for a in range(len(v.shape)) if a not in axes]
        self.b.line(f"{out} = {fn}({src}, axis={tuple(axes) if len(axes) > 1 else axes[0]})" if kept else
                    f"{out} = {fn}({src})")
        shape = tuple(1 if a in axes else s for a, s in enumerate(v.shape)) if keepdim else tuple(v.shape[a] for a in kept)
        stored = [a if keepdim else i for i, a in enumerate(kept)]
        return array_value(out, shape, v.dtype, stored if kept else [None])

    def reshape(self, v: Value, shape: Shape) -> Value:
        """A copy map over the common refinement of both shapes, so both sides index linearly (a DaCe
        view of ``np.reshape`` would reach the partitioner as an ambiguous View node)."""
        src = self.materialize(v, "view_in")
        fine = ops.refine([s for s in v.shape if s != 1], [s for s in shape if s != 1])
        if fine is None:
            raise FrontendError(f"reshape {v.shape} -> {shape} at node '{self.node.name}' does not split or merge "
                                "whole axes")
        params = [f"r{k}" for k in range(len(fine))] or ["r0"]
        out = self.fresh("view")
        self.b.line(f"{out} = np.empty({shape_code(shape or (1, ))}, dtype={np_dtype(v.dtype)})")
        self.b.line(f"for {', '.join(params)} in dace.map[{', '.join(f'0:{s}' for s in fine or [1])}]:")
        self.b.line("    with dace.tasklet:")
        self.b.line(f"        in0 << {src}[{ops.linear_index(v.shape, fine, params)}]")
        self.b.line(f"        o >> {out}[{ops.linear_index(shape, fine, params)}]")
        self.b.line("        o = in0")
        return array_value(out, shape, v.dtype)

    def matmul(self, a: Value, b: Value) -> Value:
        x, y = self.materialize(a, "mm_a"), self.materialize(b, "mm_b")
        out = self.fresh("mm")
        self.b.line(f"{out} = {x} @ {y}")
        return array_value(out, a.shape[:-1] + b.shape[-1:], a.dtype)

    # -- graph ----------------------------------------------------------------------------------------
    def arg(self, x):
        if isinstance(x, (list, tuple)):
            return type(x)(self.arg(y) for y in x)
        return self.env[x] if hasattr(x, "op") and hasattr(x, "target") else x

    def run(self, graph, inputs: Dict[object, Value]) -> List[Value]:
        users = {n: len(n.users) for n in graph.nodes}
        self.order = {n: k for k, n in enumerate(graph.nodes)}
        for node in graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self.env[node] = inputs[node]
            elif node.op == "get_attr":  # a tensor the step captured (a batch norm's running statistics)
                self.env[node] = self.captured(graph, node)
            elif node.op == "output":
                return [self.env[x] for x in _flatten(node.args[0])]
            elif node.op == "call_function":
                if node.target is operator.getitem:
                    self.env[node] = self.arg(node.args[0])[node.args[1]]
                    continue
                key = str(node.target)
                fn = OPS.get(key) or OPS.get(key.rsplit(".", 1)[0])
                if fn is None:
                    raise FrontendError(f"unsupported ATen op '{key}' at node '{node.name}'")
                try:
                    out = fn(self, *self.arg(node.args), **self.arg(dict(node.kwargs)))
                except FrontendError:
                    raise
                except (ValueError, TypeError, NotImplementedError) as e:
                    raise FrontendError(f"cannot convert ATen op '{key}' at node '{node.name}': {e}") from e
                if isinstance(out, Value) and users[node] > 1 and out.array() is None and out.operands:
                    out = self.write(out, node.name)
                self.env[node] = out
            else:
                raise FrontendError(f"unsupported graph node '{node.name}' ({node.op})")
        raise FrontendError("graph has no output node")

    def captured(self, graph, node) -> Value:
        import torch
        t = getattr(graph.owning_module, node.target, None) if graph.owning_module is not None else None
        if not isinstance(t, torch.Tensor):
            raise FrontendError(f"graph attribute '{node.target}' at node '{node.name}' is not a tensor")
        arr = t.detach().cpu().numpy()
        ident = self.b.argument(node.target, arr.shape or (1, ), arr.dtype, arr)
        return array_value(ident, arr.shape, arr.dtype)

    def update(self, node, value: Value):
        """``node``'s tensor updated in place to ``value`` by an op that does not return it (a batch norm's
        running statistics), so the tracer reads it through ``node`` afterwards: those reads see ``value``,
        reads before kept the old array. Exact only where no view of the tensor exists, as a view would
        still show the old values."""
        views = [u.name for u in getattr(node, "users", ()) if _is_view(u)]
        if not hasattr(node, "users") or _is_view(node) or views:
            what = getattr(node, "name", repr(node))
            self.fail(f"'{what}' is updated in place while a view of it exists ({', '.join(views) or what})")
        self.env[node] = value

    def lines(self, lines):
        for line in lines:
            self.b.line(line)

    def contraction_done(self):
        """Counts a zero/accumulate pair for :func:`.numpy_ops.nest_contractions`."""
        self.b.contractions = getattr(self.b, "contractions", 0) + 1

    def fail(self, why: str):
        raise FrontendError(f"ATen op '{self.node.target}' at node '{self.node.name}': {why}")


def _flatten(x):
    if isinstance(x, (list, tuple)):
        return [y for z in x for y in _flatten(z)]
    return [x]


# -- operator table ----------------------------------------------------------------------------------
OPS: Dict[str, Callable] = {}


def op(*names):
    def deco(fn):
        for n in names:
            OPS["aten." + n] = fn
        return fn

    return deco


def _result_dtype(*xs):
    ds = [x.dtype for x in xs if isinstance(x, Value)]
    return np.result_type(*ds) if ds else np.dtype(np.float32)


def _as_value(x, dtype) -> Value:
    return x if isinstance(x, Value) else constant(x, (), dtype)


def binary(fn):
    def impl(c, a, b, alpha=1, **_):
        dtype = _result_dtype(a, b)
        a, b = _as_value(a, dtype), _as_value(b, dtype)
        if alpha != 1:
            b = combine(lambda y: f"{_lit(alpha)} * {y}", [b], b.shape, dtype)
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        return combine(fn, [a, b], shape, dtype)

    return impl


def unary(fn):
    return lambda c, a, *_, **__: combine(fn, [a], a.shape, a.dtype)


for _n, _f in {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "div": "{} / {}"}.items():
    op(f"{_n}.Tensor", f"{_n}.Scalar")(binary(_f.format))
op("rsub.Scalar", "rsub.Tensor")(lambda c, a, b, alpha=1: binary("{} - {}".format)(c, b, a) if alpha == 1 else
                                  c.fail("alpha"))
op("neg.default")(unary(lambda x: f"-{x}"))
op("exp.default")(unary(lambda x: f"exp({x})"))
op("log.default")(unary(lambda x: f"log({x})"))
op("log1p.default")(unary(lambda x: f"log(1.0 + {x})"))
op("expm1.default")(unary(lambda x: f"(exp({x}) - 1.0)"))
op("sqrt.default")(unary(lambda x: f"sqrt({x})"))
op("rsqrt.default")(unary(lambda x: f"1.0 / sqrt({x})"))
op("tanh.default")(unary(lambda x: f"tanh({x})"))
op("sigmoid.default")(unary(lambda x: f"1.0 / (1.0 + exp(-{x}))"))
op("relu.default")(unary(lambda x: f"({x} if {x} > 0.0 else 0.0)"))
op("threshold_backward.default")(lambda c, g, x, th: combine(lambda a, b: f"({a} if {b} > {_lit(th)} else 0.0)",
                                                             [g, x], g.shape, g.dtype))

# Activations and their backwards (nn.GELU, SiLU, Tanh, Sigmoid, LeakyReLU, ELU, Hardswish in a training step):
# each one elementwise expression over the traced operands, as PyTorch's derivative formulas give them.
_SQRT1_2, _INV_SQRT_2PI, _K = 0.7071067811865476, 0.3989422804014327, 0.7978845608028654
op("tanh_backward.default")(lambda c, g, y: combine(lambda a, b: f"{a} * (1.0 - {b} * {b})", [g, y], g.shape, g.dtype))
op("sigmoid_backward.default")(lambda c, g, y: combine(lambda a, b: f"{a} * {b} * (1.0 - {b})", [g, y], g.shape,
                                                       g.dtype))
op("hardtanh.default")(lambda c, x, lo=-1.0, hi=1.0: combine(
    lambda a: f"({_lit(float(lo))} if {a} < {_lit(float(lo))} else ({_lit(float(hi))} if {a} > {_lit(float(hi))} else {a}))",
    [x], x.shape, x.dtype))
op("hardtanh_backward.default")(lambda c, g, x, lo, hi: combine(
    lambda a, b: f"({a} if {b} > {_lit(float(lo))} and {b} < {_lit(float(hi))} else 0.0)", [g, x], g.shape, g.dtype))
op("leaky_relu.default")(lambda c, x, slope=0.01: combine(lambda a: f"({a} if {a} > 0.0 else {_lit(float(slope))} * {a})",
                                                          [x], x.shape, x.dtype))
op("leaky_relu_backward.default")(lambda c, g, x, slope, *_: combine(
    lambda a, b: f"({a} if {b} > 0.0 else {_lit(float(slope))} * {a})", [g, x], g.shape, g.dtype))
op("silu.default")(unary(lambda x: f"{x} / (1.0 + exp(-{x}))"))
op("silu_backward.default")(lambda c, g, x: combine(
    lambda a, b: f"{a} / (1.0 + exp(-{b})) * (1.0 + {b} * (1.0 - 1.0 / (1.0 + exp(-{b}))))", [g, x], g.shape, g.dtype))
op("hardswish.default")(unary(lambda x: f"({x} * (0.0 if {x} < -3.0 else ({x} + 3.0 if {x} < 3.0 else 6.0)) / 6.0)"))
op("hardswish_backward.default")(lambda c, g, x: combine(
    lambda a, b: f"(0.0 if {b} < -3.0 else ({a} * ({b} / 3.0 + 0.5) if {b} <= 3.0 else {a}))", [g, x], g.shape, g.dtype))



def _softplus_expr(x, beta, threshold):
    b, t = _lit(float(beta)), _lit(float(threshold))
    return f"({x} if {x} * {b} > {t} else log(1.0 + exp({x} * {b})) / {b})"


op("softplus.default")(lambda c, x, beta=1.0, threshold=20.0: combine(lambda a: _softplus_expr(a, beta, threshold), [x],
                                                                       x.shape, x.dtype))
op("softplus_backward.default")(lambda c, g, x, beta, threshold: combine(
    lambda a, b: f"({a} if {b} * {_lit(float(beta))} > {_lit(float(threshold))} else "
                 f"{a} * (1.0 - 1.0 / (1.0 + exp({b} * {_lit(float(beta))}))))", [g, x], g.shape, g.dtype))
op("mish.default")(unary(lambda x: f"{x} * tanh({_softplus_expr(x, 1.0, 20.0)})"))
op("mish_backward.default")(lambda c, g, x: combine(
    lambda a, b: f"{a} * (tanh({_softplus_expr(b, 1.0, 20.0)}) + {b} / (1.0 + exp(-{b})) * "
                 f"(1.0 - tanh({_softplus_expr(b, 1.0, 20.0)}) * tanh({_softplus_expr(b, 1.0, 20.0)})))",
    [g, x], g.shape, g.dtype))

def _tanh_gelu_inner(x):
    return f"tanh({_K!r} * ({x} + 0.044715 * {x} * {x} * {x}))"


@op("gelu.default")
def _gelu(c, x, approximate="none"):
    if approximate == "tanh":
        return combine(lambda a: f"0.5 * {a} * (1.0 + {_tanh_gelu_inner(a)})", [x], x.shape, x.dtype)
    return combine(lambda a: f"0.5 * {a} * (1.0 + erf({a} * {_SQRT1_2!r}))", [x], x.shape, x.dtype)


@op("gelu_backward.default")
def _gelu_backward(c, g, x, approximate="none"):
    if approximate == "tanh":
        def fn(a, b):
            t = _tanh_gelu_inner(b)
            return (f"{a} * (0.5 * (1.0 + {t}) + 0.5 * {b} * (1.0 - {t} * {t}) * {_K!r} * "
                    f"(1.0 + 3.0 * 0.044715 * {b} * {b}))")
        return combine(fn, [g, x], g.shape, g.dtype)
    return combine(lambda a, b: f"{a} * (0.5 * (1.0 + erf({b} * {_SQRT1_2!r})) + {b} * {_INV_SQRT_2PI!r} * "
                   f"exp(-0.5 * {b} * {b}))", [g, x], g.shape, g.dtype)


@op("elu.default")
def _elu(c, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return combine(lambda a: f"({_lit(float(scale))} * {a} if {a} > 0.0 else {_lit(float(scale * alpha))} * "
                   f"(exp({a} * {_lit(float(input_scale))}) - 1.0))", [x], x.shape, x.dtype)


@op("elu_backward.default")
def _elu_backward(c, g, alpha, scale, input_scale, is_result, v):
    neg, inp = _lit(float(alpha * scale)), _lit(float(input_scale))
    if is_result:  # v is the forward's result
        return combine(lambda a, b: f"({a} * {_lit(float(scale))} if {b} > 0.0 else {a} * {inp} * ({b} + {neg}))",
                       [g, v], g.shape, g.dtype)
    return combine(lambda a, b: f"({a} * {_lit(float(scale))} if {b} > 0.0 else {a} * {inp} * {neg} * exp({b} * {inp}))",
                   [g, v], g.shape, g.dtype)


op("pow.Tensor_Scalar")(lambda c, a, e: combine(lambda x: f"({x} * {x})" if e == 2 else f"{x} ** {_lit(e)}",
                                                [a], a.shape, a.dtype))
op("pow.Scalar")(lambda c, base, e: combine(lambda x: f"{_lit(base)} ** {x}", [e], e.shape, e.dtype))
op("detach.default", "clone.default", "alias.default", "lift_fresh_copy.default")(lambda c, a, *_, **__: a)


@op("_to_copy.default")
def _to_copy(c, a, dtype=None, **_):
    if dtype is None:
        return a
    import torch
    nd = torch.empty((), dtype=dtype).numpy().dtype
    return combine(lambda x: x, [a], a.shape, nd)


@op("copy.default")
def _copy(c, dst, src, *_):
    return combine(lambda x: x, [src], dst.shape, dst.dtype)


def _like(value):
    return lambda c, a, *args, **kw: constant(value if value is not None else args[0], a.shape, a.dtype)


op("ones_like.default")(_like(1.0))
op("zeros_like.default", "empty_like.default")(_like(0.0))  # empty_like: its values are never read before a write


_VIEWS = frozenset({"view", "_unsafe_view", "reshape", "select", "slice", "transpose", "t", "permute", "expand", "squeeze",
          "unsqueeze", "as_strided", "alias", "detach", "diagonal", "unfold", "narrow", "split", "split_with_sizes",
          "chunk", "unbind"})


def _is_view(node) -> bool:
    base = str(getattr(node, "target", "")).split(".")[-2:-1]
    return bool(base) and base[0] in _VIEWS


def _in_place(impl):
    """An in-place op (``sub_``; SiLU's backward fills an ``empty_like`` with ones and subtracts from it) as
    its out-of-place twin. That is exact where only the in-place op's own result is read afterwards, as in
    the traced decompositions (the tracer reads an updated tensor through the op's result). A view updated
    in place (attention adds its bias to a view of a product) is the same where nothing reads the tensors
    it views after the update; a tensor, or a viewed one, read again after its update is refused."""
    def run(c, *args, **kw):
        order = c.order
        target = base = c.node.args[0]
        while _is_view(base) and base.args and hasattr(base.args[0], "users"):
            base = base.args[0]
        aliases, todo = [], [base]  # the viewed tensor and every view of it
        while todo:
            n = todo.pop()
            aliases.append(n)
            todo += [u for u in n.users if _is_view(u) and u.args and u.args[0] is n and u not in aliases]
        for n in aliases:
            later = [u.name for u in n.users if u is not c.node and not (_is_view(u) and u in aliases)
                     and order.get(u, -1) > order[c.node]]
            if later:
                what = f"'{n.name}'" if n is target else f"'{n.name}' (which '{target.name}' shares)"
                c.fail(f"{what} is read again ({', '.join(later)}) after this in-place update")
        return impl(c, *args, **kw)

    return run


for _n, _f in {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "div": "{} / {}"}.items():
    op(f"{_n}_.Tensor", f"{_n}_.Scalar")(_in_place(binary(_f.format)))


op("fill_.Scalar")(_in_place(lambda c, t, value: constant(value, t.shape, t.dtype)))
op("full_like.default")(_like(None))


@op("scalar_tensor.default")
def _scalar_tensor(c, s, dtype=None, **_):
    return constant(s, (), np.float32)


@op("t.default")
def _t(c, a):
    return _permute(c, a, list(range(len(a.shape)))[::-1])


@op("transpose.int")
def _transpose(c, a, d0, d1):
    perm = list(range(len(a.shape)))
    d0, d1 = d0 % len(perm), d1 % len(perm)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute(c, a, perm)


@op("permute.default")
def _permute(c, a, dims):
    dims = [d % len(a.shape) for d in dims]
    return a.remap(tuple(a.shape[d] for d in dims), dims.index)


@op("expand.default")
def _expand(c, a, sizes):
    lead = len(sizes) - len(a.shape)
    shape = tuple(a.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return broadcast_to(a, shape)


@op("view.default", "_unsafe_view.default", "reshape.default", "squeeze.dim", "squeeze.default",
    "unsqueeze.default")
def _view(c, a, shape=None, *_):
    name = str(c.node.target)
    if "squeeze" in name:
        shape = tuple(c.node.meta["val"].shape)
    shape = list(shape)
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape[shape.index(-1)] = int(np.prod(a.shape)) // max(known, 1)
    shape = tuple(int(s) for s in shape)
    old = [i for i, s in enumerate(a.shape) if s != 1]
    new = [i for i, s in enumerate(shape) if s != 1]
    if [a.shape[i] for i in old] == [shape[i] for i in new]:  # only length-one axes differ
        return a.remap(shape, lambda ax: new[old.index(ax)] if ax in old else None)
    return c.reshape(a, shape)


op("unsqueeze_.default", "squeeze_.dim", "squeeze_.default")(_in_place(_view))  # group norm's traced backward
op("transpose_.default")(_in_place(_transpose))  # nn.GRU's and nn.RNN's traces
op("t_.default")(_in_place(_t))
op("reciprocal.default")(unary(lambda x: f"1.0 / {x}"))


def _bound(v, dtype) -> str:
    return _lit(float(v)) if np.dtype(dtype).kind == "f" else str(int(v))


@op("clamp.default", "clamp_min.default", "clamp_max.default")
def _clamp(c, a, lo=None, hi=None):
    if str(c.node.target).endswith("clamp_max.default"):
        lo, hi = None, lo
    expr = "{0}"
    if lo is not None:
        expr = f"({expr} if {expr} > {_bound(lo, a.dtype)} else {_bound(lo, a.dtype)})"
    if hi is not None:
        expr = f"({expr} if {expr} < {_bound(hi, a.dtype)} else {_bound(hi, a.dtype)})"
    return combine(lambda x: expr.format(x), [a], a.shape, a.dtype)


@op("select.int")
def _select(c, a, dim, index):
    """``a[..., index, ...]`` along ``dim`` (attention's packed projections): a copy map."""
    dim, index = dim % len(a.shape), index % a.shape[dim % len(a.shape)]
    shape = tuple(s for k, s in enumerate(a.shape) if k != dim)
    if index == 0:
        return a.remap(shape, lambda ax: None if ax == dim else ax - (ax > dim))
    src = c.materialize(a, "select_in")
    out = c.fresh("select")
    params = [f"_i{k}" for k in range(len(shape))] or ["_i0"]
    idx = params[:dim] + [str(index)] + params[dim:len(shape)]
    c.lines([f"{out} = np.empty({shape_code(shape or (1, ))}, dtype={np_dtype(a.dtype)})"] +
            ops._map_head(params, shape or (1, )) +
            [f"        _v << {src}[{', '.join(idx)}]", f"        _o >> {out}[{', '.join(params)}]", "        _o = _v"])
    return array_value(out, shape, a.dtype)


@op("select_backward.default")
def _select_backward(c, g, input_sizes, dim, index):
    """Zeros of the input's shape with ``g`` at ``index`` along ``dim``: a fill map and a copy map."""
    shape = tuple(int(s) for s in input_sizes)
    dim = dim % len(shape)
    index = index % shape[dim]
    out = c.fresh("select_gx")
    c.lines(ops.place(out, shape, g.dtype, c.materialize(g, "select_g"), g.shape,
                      lambda p: p[:dim] + [str(index)] + p[dim:]))
    return array_value(out, shape, g.dtype)


def _range(c, n: int, start, end, step) -> Tuple[int, int, int]:
    """(first, count, step) of Python's ``range`` that ``start:end:step`` takes of ``n`` elements."""
    if step is None or step < 1:
        c.fail(f"slice step {step} is not a positive integer")
    first, stop, step = slice(start, end, step).indices(n)
    count = len(range(first, stop, step))
    if count == 0:
        c.fail(f"the slice {start}:{end}:{step} of an axis of {n} elements is empty")
    return first, count, step


@op("slice.Tensor")
def _slice(c, a, dim=0, start=None, end=None, step=1):
    """``a[..., start:end:step, ...]`` along ``dim``: a copy map with affine subscripts (a whole axis is
    ``a`` itself)."""
    dim = dim % len(a.shape)
    first, count, step = _range(c, a.shape[dim], start, end, step)
    if (first, count, step) == (0, a.shape[dim], 1):
        return a
    shape = tuple(count if k == dim else s for k, s in enumerate(a.shape))
    out = c.fresh("slice")
    c.lines(ops.copy_slice(out, shape, a.dtype, c.materialize(a, "slice_in"),
                           [first if k == dim else 0 for k in range(len(shape))],
                           [step if k == dim else 1 for k in range(len(shape))]))
    return array_value(out, shape, a.dtype)


@op("slice_backward.default")
def _slice_backward(c, g, input_sizes, dim, start, end, step):
    """Zeros of the input's shape with ``g`` in the slice's positions."""
    shape = tuple(int(s) for s in input_sizes)
    dim = dim % len(shape)
    first, _, step = _range(c, shape[dim], start, end, step)
    out = c.fresh("slice_gx")
    at = lambda p: [f"{q} * {step} + {first}" if k == dim else q for k, q in enumerate(p)]  # noqa: E731
    c.lines(ops.place(out, shape, g.dtype, c.materialize(g, "slice_g"), g.shape, at))
    return array_value(out, shape, g.dtype)


@op("narrow.default")
def _narrow(c, a, dim, start, length):
    return _slice(c, a, dim, start, start + length)


@op("split.Tensor", "unsafe_split.Tensor", "split_with_sizes.default", "unsafe_split_with_sizes.default",
    "chunk.default")
def _split(c, a, sizes, dim=0):
    """Consecutive slices along ``dim``: of ``sizes`` each (the last shorter), of the listed sizes, or
    ``chunk``'s number of pieces."""
    dim = dim % len(a.shape)
    n = a.shape[dim]
    if "chunk" in str(c.node.target):
        sizes = -(-n // int(sizes))
    if isinstance(sizes, int):
        sizes = [min(sizes, n - k) for k in range(0, n, sizes)] if sizes > 0 else []
    if sum(sizes) != n:
        c.fail(f"split sizes {list(sizes)} do not add up to the {n} elements of axis {dim}")
    starts = np.cumsum([0] + list(sizes))
    return [_slice(c, a, dim, int(b), int(b + k)) for b, k in zip(starts, sizes)]


@op("unbind.int")
def _unbind(c, a, dim=0):
    return [_select(c, a, dim, k) for k in range(a.shape[dim % len(a.shape)])]


@op("cat.default")
def _cat(c, tensors, dim=0):
    """``torch.cat``: one copy map per part into its block of the result (1-d empty parts are skipped, as
    PyTorch does)."""
    parts = [t for t in tensors if t.shape != (0, )]
    if not parts:
        c.fail("every tensor to concatenate is empty")
    dim = dim % len(parts[0].shape)
    shape = tuple(sum(t.shape[dim] for t in parts) if k == dim else s for k, s in enumerate(parts[0].shape))
    dtype = _result_dtype(*parts)
    if len(parts) == 1:
        return parts[0]
    out = c.fresh("cat")
    c.lines(ops.concat(out, shape, dtype, [(c.materialize(t, "cat_in"), t.shape) for t in parts], dim))
    return array_value(out, shape, dtype)


@op("stack.default")
def _stack(c, tensors, dim=0):
    """``torch.stack``: every tensor given a length-one axis at ``dim``, then concatenated along it."""
    dim = dim % (len(tensors[0].shape) + 1)
    shape = lambda t: t.shape[:dim] + (1, ) + t.shape[dim:]  # noqa: E731
    return _cat(c, [t.remap(shape(t), lambda ax: ax + (ax >= dim)) for t in tensors], dim)


@op("zeros.default", "ones.default", "full.default", "new_zeros.default", "new_ones.default", "new_full.default",
    "new_empty.default")
def _filled(c, *args, dtype=None, **_):
    """A constant tensor of a static size (``new_*``: the dtype of the tensor it is called on)."""
    import torch
    name = str(c.node.target).split(".")[1]
    like = args[0] if name.startswith("new_") else None
    size, *rest = args[1:] if like is not None else args
    value = {"zeros": 0.0, "ones": 1.0}.get(name.replace("new_", ""), rest[0] if rest else 0.0)
    nd = torch.empty((), dtype=dtype).numpy().dtype if dtype is not None else \
        like.dtype if like is not None else np.dtype(np.float32)
    return constant(value, tuple(int(s) for s in size), nd)


@op("repeat.default")
def _repeat(c, a, repeats):
    """``a`` tiled ``repeats`` times along each axis (InstanceNorm's trace repeats its weights per image):
    ``a`` broadcast to (r0, s0, r1, s1, ...), then merged to (r0 * s0, ...) by a copy map."""
    lead = len(repeats) - len(a.shape)
    if lead < 0:
        c.fail(f"repeats {list(repeats)} have fewer axes than the tensor {a.shape}")
    shape = (1, ) * lead + tuple(a.shape)
    pairs = tuple(d for r, s in zip(repeats, shape) for d in (int(r), s))
    return c.reshape(a.remap(pairs, lambda ax: 2 * (ax + lead) + 1), tuple(int(r) * s for r, s in zip(repeats, shape)))


@op("mm.default", "bmm.default", "matmul.default")
def _mm(c, a, b):
    return c.matmul(a, b)


@op("addmm.default")
def _addmm(c, bias, a, b, beta=1, alpha=1):
    prod = c.matmul(a, b)
    return combine(lambda z, y: f"{_lit(alpha)} * {y} + {_lit(beta)} * {z}" if (alpha, beta) != (1, 1) else f"{y} + {z}",
                   [bias, prod], prod.shape, prod.dtype)


@op("sum.dim_IntList", "sum.default", "mean.dim", "mean.default")
def _sum(c, a, dims=None, keepdim=False, dtype=None):
    dims = list(range(len(a.shape))) if not dims else list(dims)
    out = c.reduce(a, dims, keepdim)
    if "mean" in str(c.node.target):
        n = int(np.prod([a.shape[d] for d in dims]))
        out = combine(lambda x: f"{x} / {_lit(float(n))}", [out], out.shape, out.dtype)
    return out


@op("amax.default")
def _amax(c, a, dims=(), keepdim=False):
    return c.reduce(a, list(dims) or list(range(len(a.shape))), keepdim, "max")


def _stable_exp(c, x: Value, dim: int):
    x = array_value(c.materialize(x, "sm_in"), x.shape, x.dtype)
    mx = c.reduce(x, [dim], True, "max", "sm_max")
    e = c.write(combine(lambda a, m: f"exp({a} - {m})", [x, mx], x.shape, x.dtype), "sm_exp")
    return x, mx, e, c.reduce(e, [dim], True, "sum", "sm_sum")


@op("_log_softmax.default")
def _log_softmax(c, x, dim, half_to_float=False):
    x, mx, _, s = _stable_exp(c, x, dim)
    return combine(lambda a, m, t: f"{a} - {m} - log({t})", [x, mx, s], x.shape, x.dtype)


@op("_softmax.default")
def _softmax(c, x, dim, half_to_float=False):
    _, _, e, s = _stable_exp(c, x, dim)
    return combine(lambda a, t: f"{a} / {t}", [e, s], x.shape, x.dtype)


@op("_safe_softmax.default")
def _safe_softmax(c, x, dim, dtype=None):
    """Softmax whose rows of only -inf (fully masked attention rows) are zeros rather than NaN."""
    x = array_value(c.materialize(x, "sm_in"), x.shape, x.dtype)
    mx = c.reduce(x, [dim], True, "max", "sm_max")
    lowest = _lit(float(np.finfo(x.dtype).min))
    e = c.write(combine(lambda a, m: f"(exp({a} - {m}) if {m} >= {lowest} else 0.0)", [x, mx], x.shape, x.dtype),
                "sm_exp")
    s = c.reduce(e, [dim], True, "sum", "sm_sum")
    return combine(lambda a, t: f"({a} / {t} if {t} > 0.0 else 0.0)", [e, s], x.shape, x.dtype)


@op("_log_softmax_backward_data.default")
def _log_softmax_backward(c, go, out, dim, dtype=None):
    s = c.reduce(go, [dim], True, "sum", "lsm_gsum")
    return combine(lambda g, y, t: f"{g} - exp({y}) * {t}", [go, out, s], go.shape, go.dtype)


@op("_softmax_backward_data.default")
def _softmax_backward(c, go, out, dim, dtype=None):
    s = c.reduce(combine(lambda g, y: f"{g} * {y}", [go, out], go.shape, go.dtype), [dim], True, "sum", "sm_gsum")
    return combine(lambda g, y, t: f"{y} * ({g} - {t})", [go, out, s], go.shape, go.dtype)


def _check_nll(c, x, weight, reduction, ignore_index):
    if weight is not None:
        c.fail("class weights are not supported")
    if len(x.shape) != 2 or reduction not in (1, 2):
        c.fail("only (batch, classes) inputs with reduction 'mean' or 'sum' are supported")


@op("nll_loss_forward.default")
def _nll_forward(c, x, target, weight, reduction, ignore_index):
    """Labels equal to ``ignore_index`` are not supported (every label must be a class): total weight is
    the batch size."""
    _check_nll(c, x, weight, reduction, ignore_index)
    picked = combine(lambda a, t: f"({a} if {t} == i1 else 0.0)", [x, target.remap(x.shape, lambda a: 0)],
                     x.shape, x.dtype)
    total = c.reduce(c.write(picked, "nll_pick", uses_index=True), [0, 1], False, "sum", "nll_sum")
    n = float(x.shape[0]) if reduction == 1 else 1.0
    return combine(lambda t: f"-{t} / {_lit(n)}", [total], (), x.dtype), constant(float(x.shape[0]), (), x.dtype)


@op("nll_loss_backward.default")
def _nll_backward(c, go, x, target, weight, reduction, ignore_index, total_weight):
    _check_nll(c, x, weight, reduction, ignore_index)
    tw = total_weight if reduction == 1 else constant(1.0, (), x.dtype)
    g = combine(lambda a, w, t: f"(-{a} / {w} if {t} == i1 else 0.0)",
                [go, tw, target.remap(x.shape, lambda a: 0)], x.shape, x.dtype)
    return c.write(g, "nll_grad", uses_index=True)


def _norm_axes(x, normalized_shape):
    k = len(normalized_shape)
    return list(range(len(x.shape) - k, len(x.shape))), int(np.prod(normalized_shape))


def _moments(c, x, axes, eps, hint):
    """(normalised x, mean, reciprocal standard deviation, sum of squared deviations) over ``axes`` (kept
    as length one)."""
    n = int(np.prod([x.shape[a] for a in axes]))
    mean = c.write(combine(lambda s: f"{s} / {_lit(float(n))}", [c.reduce(x, axes, True, "sum", f"{hint}_sum")],
                           tuple(1 if a in axes else s for a, s in enumerate(x.shape)), x.dtype), f"{hint}_mean")
    sq = combine(lambda a, m: f"({a} - {m}) * ({a} - {m})", [x, mean], x.shape, x.dtype)
    var = c.reduce(sq, axes, True, "sum", f"{hint}_var")
    rstd = c.write(combine(lambda v: f"1.0 / sqrt({v} / {_lit(float(n))} + {_lit(float(eps))})", [var], mean.shape,
                           x.dtype), f"{hint}_rstd")
    xhat = combine(lambda a, m, r: f"({a} - {m}) * {r}", [x, mean, rstd], x.shape, x.dtype)
    return xhat, mean, rstd, var


@op("native_layer_norm.default")
def _layer_norm(c, x, normalized_shape, weight, bias, eps):
    axes, n = _norm_axes(x, normalized_shape)
    out, mean, rstd, _ = _moments(c, x, axes, eps, "ln")
    if weight is not None:
        out = combine(lambda y, w: f"{y} * {w}", [out, weight], x.shape, x.dtype)
    if bias is not None:
        out = combine(lambda y, b: f"{y} + {b}", [out, bias], x.shape, x.dtype)
    return out, mean, rstd


@op("native_layer_norm_backward.default")
def _layer_norm_backward(c, go, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    axes, n = _norm_axes(x, normalized_shape)
    batch_axes = [a for a in range(len(x.shape)) if a not in axes]
    xhat = c.write(combine(lambda a, m, r: f"({a} - {m}) * {r}", [x, mean, rstd], x.shape, x.dtype), "ln_xhat")
    g = go if weight is None else c.write(combine(lambda a, w: f"{a} * {w}", [go, weight], x.shape, x.dtype), "ln_g")
    s1 = c.reduce(g, axes, True, "sum", "ln_gsum")
    s2 = c.reduce(combine(lambda a, h: f"{a} * {h}", [g, xhat], x.shape, x.dtype), axes, True, "sum", "ln_gxsum")
    dx = combine(lambda r, a, t1, h, t2: f"{r} / {_lit(float(n))} * ({_lit(float(n))} * {a} - {t1} - {h} * {t2})",
                 [rstd, g, s1, xhat, s2], x.shape, x.dtype) if output_mask[0] else None
    dw = db = None
    if weight is not None and output_mask[1]:
        dw = c.reduce(combine(lambda a, h: f"{a} * {h}", [go, xhat], x.shape, x.dtype), batch_axes, False, "sum",
                      "ln_dw")
    if bias is not None and output_mask[2]:
        db = c.reduce(go, batch_axes, False, "sum", "ln_db")
    return dx, dw, db


# -- convolution, pooling, batch normalisation, embeddings ------------------------------------------------


def _pair(v, n):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _conv_check(c, x, weight, stride, padding, dilation, transposed, output_padding, groups):
    n = len(x.shape) - 2
    if groups != 1 and transposed:
        c.fail(f"grouped transposed convolutions (groups={groups}) are not supported")
    if isinstance(padding, str):
        c.fail(f"padding='{padding}' is not supported (give the padding as numbers)")
    if n < 1 or len(weight.shape) != n + 2 or (weight.shape[0] != x.shape[1] if transposed else
                                               weight.shape[1] * groups != x.shape[1] or weight.shape[0] % groups):
        c.fail(f"weight of shape {weight.shape} does not fit input {x.shape} with groups={groups}")
    return n, _pair(stride, n), _pair(padding, n), _pair(dilation, n)


def _padded(c, x: Value, pads, value="0.0", hint="pad", after=None):
    """Materialized ``x`` padded on its spatial axes (2..) by ``pads`` before and ``after`` (default: the
    same) after, and its shape."""
    after = pads if after is None else after
    src = c.materialize(x, hint + "_in")
    if not any(pads) and not any(after):
        return src, x.shape
    out = c.fresh(hint)
    c.lines(ops.pad(out, src, x.shape, 2, pads, after, value, x.dtype))
    return out, ops.padded_shape(x.shape, 2, pads, after)


@op("convolution.default")
def _convolution(c, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    n, stride, padding, dilation = _conv_check(c, x, weight, stride, padding, dilation, transposed, output_padding,
                                               groups)
    if transposed:
        return _transposed_convolution(c, x, weight, bias, n, stride, padding, dilation, _pair(output_padding, n))
    xp, pshape = _padded(c, x, padding)
    kernel = list(weight.shape[2:])
    osz = [ops.window_count(p, k, s, d) for p, k, s, d in zip(pshape[2:], kernel, stride, dilation)]
    ys, ks, pos = ops.conv_terms(n, stride, dilation)
    shape = (x.shape[0], weight.shape[0]) + tuple(osz)
    out = c.fresh("conv")
    channels, o_ch, i_ch = ops.conv_channels(groups, weight.shape[0], x.shape[1])
    loops = [("n", x.shape[0])] + channels + list(zip(ys, osz)) + list(zip(ks, kernel))
    reads = [(xp, ", ".join(["_i_n", i_ch] + pos)),
             (c.materialize(weight, "conv_w"), ", ".join([o_ch, "_i_c"] + [f"_i_{k}" for k in ks]))]
    c.lines(ops.accumulate(out, shape, x.dtype, loops, reads, ", ".join(["_i_n", o_ch] + [f"_i_{y}" for y in ys]),
                           "in0 * in1"))
    c.contraction_done()
    res = array_value(out, shape, x.dtype)
    if bias is None:
        return res
    return combine(lambda a, b: f"{a} + {b}", [res, bias.remap(shape, lambda a: 1)], shape, x.dtype)


def _transposed_convolution(c, x, weight, bias, n, stride, padding, dilation, output_padding):
    """nn.ConvTranspose*d: an accumulating map into the uncropped output (:func:`.numpy_ops.transposed_conv`),
    then the padding cropped and ``output_padding`` added as zeros."""
    full = (x.shape[0], weight.shape[1]) + ops.transposed_conv_full(x.shape[2:], weight.shape[2:], stride, dilation)
    acc = c.fresh("convt")
    c.lines(ops.transposed_conv(acc, c.materialize(x, "convt_x"), x.shape, c.materialize(weight, "convt_w"),
                                weight.shape, stride, dilation, x.dtype))
    c.contraction_done()
    shape = tuple(c.node.meta["val"].shape)
    out = c.fresh("convt_crop")
    c.lines(ops.pad(out, acc, full, 2, [-p for p in padding], [e - p for e, p in zip(output_padding, padding)], "0.0",
                    x.dtype))
    res = array_value(out, shape, x.dtype)
    if bias is None:
        return res
    return combine(lambda a, b: f"{a} + {b}", [res, bias.remap(shape, lambda a: 1)], shape, x.dtype)


def _transposed_convolution_backward(c, go, x, weight, n, stride, padding, dilation, output_mask):
    """The input's gradient is a plain convolution of the output's gradient (padded back to the uncropped
    extent) with the same weights; the weights' gradient sums ``x[n, c, i] * go[n, o, i*s + k*d - p]`` over
    the batch and the input positions."""
    full = ops.transposed_conv_full(x.shape[2:], weight.shape[2:], stride, dilation)
    loops, x_idx, w_idx, y_idx = ops.transposed_conv_terms(x.shape, weight.shape, stride, dilation)
    gp = c.fresh("convt_gop")
    c.lines(ops.pad(gp, c.materialize(go, "convt_go"), go.shape, 2, padding,
                    [f - p - s for f, p, s in zip(full, padding, go.shape[2:])], "0.0", go.dtype))
    gx = gw = gb = None
    if output_mask[0]:
        out = c.fresh("convt_gx")
        c.lines(ops.accumulate(out, x.shape, x.dtype, loops, [(gp, y_idx), (c.materialize(weight, "convt_w"), w_idx)],
                               x_idx, "in0 * in1"))
        c.contraction_done()
        gx = array_value(out, x.shape, x.dtype)
    if output_mask[1]:
        out = c.fresh("convt_gw")
        c.lines(ops.accumulate(out, weight.shape, x.dtype, loops, [(c.materialize(x, "convt_x"), x_idx), (gp, y_idx)],
                               w_idx, "in0 * in1"))
        c.contraction_done()
        gw = array_value(out, weight.shape, x.dtype)
    if output_mask[2]:
        gb = c.reduce(go, [0] + list(range(2, len(go.shape))), False, "sum", "convt_gb")
    return gx, gw, gb


@op("convolution_backward.default")
def _convolution_backward(c, go, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
                          output_mask):
    n, stride, padding, dilation = _conv_check(c, x, weight, stride, padding, dilation, transposed, output_padding,
                                               groups)
    if transposed:
        return _transposed_convolution_backward(c, go, x, weight, n, stride, padding, dilation, output_mask)
    kernel = list(weight.shape[2:])
    osz = list(go.shape[2:])
    ys, ks, pos = ops.conv_terms(n, stride, dilation)
    g = c.materialize(go, "conv_go")
    batch, oc, ic = x.shape[0], weight.shape[0], x.shape[1]
    channels, o_ch, i_ch = ops.conv_channels(groups, oc, ic)
    go_idx = ", ".join(["_i_n", o_ch] + [f"_i_{y}" for y in ys])
    w_idx = ", ".join([o_ch, "_i_c"] + [f"_i_{k}" for k in ks])
    loops = [("n", batch)] + channels + list(zip(ys, osz)) + list(zip(ks, kernel))
    gx = gw = gb = None
    if output_mask[0]:  # d input: the transposed convolution, accumulated into the padded input, then cropped
        pshape = _covered(x, osz, kernel, stride, dilation)
        acc = c.fresh("conv_gx")
        c.lines(ops.accumulate(acc, pshape, x.dtype, loops, [(g, go_idx), (c.materialize(weight, "conv_w"), w_idx)],
                               ", ".join(["_i_n", i_ch] + pos), "in0 * in1"))
        c.contraction_done()
        gx = _crop(c, acc, pshape, x, padding, "conv_gx_crop")
    if output_mask[1]:  # d weight: sum over the batch and the output positions
        xp, _ = _padded(c, x, padding)
        acc = c.fresh("conv_gw")
        c.lines(ops.accumulate(acc, weight.shape, x.dtype, loops, [(g, go_idx), (xp, ", ".join(["_i_n", i_ch] + pos))],
                               w_idx, "in0 * in1"))
        c.contraction_done()
        gw = array_value(acc, weight.shape, x.dtype)
    if output_mask[2]:
        gb = c.reduce(array_value(g, go.shape, go.dtype), [0] + list(range(2, len(go.shape))), False, "sum", "conv_gb")
    return gx, gw, gb


def _covered(x, osz, kernel, stride, dilation) -> Shape:
    """Shape of the padded input's part that some window touches (an accumulator zeroed and written whole)."""
    return tuple(x.shape[:2]) + tuple((o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(osz, kernel, stride,
                                                                                             dilation))


def _crop(c, acc: str, shape: Shape, x: Value, padding, hint: str) -> Value:
    """The gradient of the unpadded input from one accumulated over the covered padded part (``shape``):
    the padding cut off, positions no window reached are zero."""
    if tuple(shape) == tuple(x.shape) and not any(padding):
        return array_value(acc, x.shape, x.dtype)
    out = c.fresh(hint)
    after = [s - (cv - p) for s, cv, p in zip(x.shape[2:], shape[2:], padding)]
    c.lines(ops.pad(out, acc, shape, 2, [-p for p in padding], after, "0.0", x.dtype))
    return array_value(out, x.shape, x.dtype)


def _pool_args(c, x, kernel_size, stride, padding, dilation, ceil_mode):
    n = len(x.shape) - 2
    kernel = _pair(kernel_size, n)
    stride = _pair(stride, n) if stride else list(kernel)
    padding, dilation = _pair(padding, n), _pair(dilation, n)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        c.fail(f"padding {padding} is more than half the kernel {kernel}")
    if int(np.prod(kernel)) > 64:
        c.fail(f"pooling kernel {kernel} is too large (at most 64 elements are supported)")
    osz, after = ops.pool_extent(x.shape[2:], kernel, stride, dilation, padding, padding, bool(ceil_mode))
    return kernel, stride, padding, dilation, osz, after


@op("max_pool2d_with_indices.default")
def _max_pool(c, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Max over each window (first maximum in scan order, as PyTorch), and its flat index into the input's
    spatial axes: one map over the output, the window unrolled into point reads."""
    kernel, stride, padding, dilation, osz, after = _pool_args(c, x, kernel_size, stride, padding, dilation, ceil_mode)
    lowest = repr(float(np.finfo(x.dtype).min))
    xp, _ = _padded(c, x, padding, lowest, "pool_pad", after)
    shape = tuple(x.shape[:2]) + tuple(osz)
    out, idx = c.fresh("maxpool"), c.fresh("maxpool_idx")
    params = [f"i{k}" for k in range(len(shape))]
    sp = x.shape[2:]
    lines = [f"{out} = np.empty({shape_code(shape)}, dtype={np_dtype(x.dtype)})",
             f"{idx} = np.empty({shape_code(shape)}, dtype=np.int64)",
             f"for {', '.join(params)} in dace.map[{', '.join(f'0:{s}' for s in shape)}]:", "    with dace.tasklet:"]
    body = []
    for k, offs in enumerate(np.ndindex(*kernel)):
        sub = [f"{p} * {st} + {o * d}" for p, st, o, d in zip(params[2:], stride, offs, dilation)]
        lines.append(f"        in{k} << {xp}[{', '.join(params[:2] + sub)}]")
        pos = [f"({p} * {st} + {o * d - pad})" for p, st, o, d, pad in zip(params[2:], stride, offs, dilation, padding)]
        flat = pos[0]
        for q, s in zip(pos[1:], sp[1:]):
            flat = f"({flat}) * {s} + {q}"
        if k == 0:
            body += ["        m = in0", f"        j = {flat}"]
        else:
            body += [f"        if in{k} > m:", f"            m = in{k}", f"            j = {flat}"]
    lines += [f"        o >> {out}[{', '.join(params)}]", f"        oi >> {idx}[{', '.join(params)}]"] + body
    lines += ["        o = m", "        oi = j"]
    c.lines(lines)
    return array_value(out, shape, x.dtype), array_value(idx, shape, np.int64)


@op("max_pool2d_with_indices_backward.default")
def _max_pool_backward(c, go, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Each output's gradient goes to the input position its index names: one accumulating map over the
    outputs and their windows (write index affine), into the padded input, then cropped."""
    kernel, stride, padding, dilation, osz, _ = _pool_args(c, x, kernel_size, stride, padding, dilation, ceil_mode)
    ys, ks, pos = ops.conv_terms(len(kernel), stride, dilation)
    pshape = _covered(x, osz, kernel, stride, dilation)
    acc = c.fresh("pool_gx")
    sub = ", ".join(["_i_n", "_i_c"] + [f"_i_{y}" for y in ys])
    flat = None
    for p, pad, s in zip(pos, padding, x.shape[2:]):
        q = f"({p} - {pad})" if pad else f"({p})"
        flat = q if flat is None else f"({flat}) * {s} + {q}"
    loops = [("n", x.shape[0]), ("c", x.shape[1])] + list(zip(ys, osz)) + list(zip(ks, kernel))
    c.lines(ops.accumulate(acc, pshape, x.dtype, loops,
                           [(c.materialize(go, "pool_go"), sub), (c.materialize(indices, "pool_idx"), sub)],
                           ", ".join(["_i_n", "_i_c"] + pos), f"(in0 if in1 == {flat} else 0.0)"))
    c.contraction_done()
    return _crop(c, acc, pshape, x, padding, "pool_gx_crop")


@op("constant_pad_nd.default")
def _constant_pad(c, x, pad, value=0.0):
    """nn.ZeroPad/ConstantPad (``pad`` pairs from the last axis back; negative amounts crop, which is also
    the padding's gradient as the trace gives it)."""
    lead, before, after = _pad_amounts(c, x, pad)
    if any(s + b + a < 0 for s, b, a in zip(x.shape[lead:], before, after)):
        c.fail(f"padding {list(pad)} does not fit a tensor of shape {x.shape}")
    out = c.fresh("pad")
    lit = _lit(float(value)) if x.dtype.kind == "f" else str(int(value))
    c.lines(ops.pad(out, c.materialize(x, "pad_in"), x.shape, lead, before, after, lit, x.dtype))
    return array_value(out, ops.padded_shape(x.shape, lead, before, after), x.dtype)


def _pad_amounts(c, x, pad):
    """(lead, before, after) of ATen's ``pad`` (pairs from the last axis back)."""
    n = len(pad) // 2
    lead = len(x.shape) - n
    before = [int(pad[2 * (n - 1 - i)]) for i in range(n)]
    after = [int(pad[2 * (n - 1 - i) + 1]) for i in range(n)]
    if n < 1 or lead < 0:
        c.fail(f"padding {list(pad)} does not fit a tensor of shape {x.shape}")
    return lead, before, after


def _mirror_pad(mode):
    def run(c, x, pad):
        lead, before, after = _pad_amounts(c, x, pad)
        why = ops.mirror_pad_refusal(x.shape, lead, before, after, mode)
        if why:
            c.fail(f"{mode} padding {list(pad)} of a tensor of shape {x.shape}: {why}")
        out = c.fresh("pad")
        c.lines(ops.pad(out, c.materialize(x, "pad_in"), x.shape, lead, before, after, None, x.dtype, mode))
        return array_value(out, ops.padded_shape(x.shape, lead, before, after), x.dtype)

    def backward(c, go, x, pad):
        lead, before, after = _pad_amounts(c, x, pad)
        out = c.fresh("pad_gx")
        c.lines(ops.pad_backward(out, c.materialize(go, "pad_go"), x.shape, lead, before, after, x.dtype, mode))
        return array_value(out, x.shape, x.dtype)

    return run, backward


for _mode, _names in (("reflect", "reflection_pad"), ("edge", "replication_pad")):
    _fw, _bw = _mirror_pad(_mode)
    op(*[f"{_names}{d}d.default" for d in (1, 2, 3)])(_fw)  # nn.ReflectionPad*d, nn.ReplicationPad*d
    op(*[f"{_names}{d}d_backward.default" for d in (1, 2, 3)])(_bw)


def _avg_counts(c, x, kernel, stride, padding, osz, count_include_pad, divisor_override):
    """Each output's divisor (PyTorch's: the window's elements inside the padded input, or inside the input
    when padding is not counted), as a literal when all are equal, else an argument array."""
    if divisor_override:
        return _lit(float(divisor_override)), ""
    counts = ops.window_counts(x.shape[2:], padding, padding, kernel, stride, [1] * len(kernel), osz,
                               count_include_pad)
    if np.all(counts == counts.flat[0]):
        return _lit(float(counts.flat[0])), ""
    return "", c.b.argument(c.fresh("avgpool_count"), counts.shape, x.dtype, counts.astype(x.dtype))


@op("avg_pool2d.default", "avg_pool1d.default", "avg_pool3d.default")
def _avg_pool(c, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """The window's sum over its divisor: one map over the output, the window unrolled into point reads of
    the zero-padded input."""
    kernel, stride, padding, dilation, osz, after = _pool_args(c, x, kernel_size, stride, padding, 1, ceil_mode)
    xp, _ = _padded(c, x, padding, "0.0", "avgpool_pad", after)
    lit, counts = _avg_counts(c, x, kernel, stride, padding, osz, count_include_pad, divisor_override)
    shape = tuple(x.shape[:2]) + tuple(osz)
    out = c.fresh("avgpool")
    c.lines(ops.pool(out, shape, x.dtype, xp, kernel, stride, dilation, lambda a, b: f"{a} + {b}", lit, counts))
    return array_value(out, shape, x.dtype)


@op("avg_pool2d_backward.default", "avg_pool3d_backward.default")
def _avg_pool_backward(c, go, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """Each output's gradient over its divisor, added to every element of its window: one accumulating
    map over the outputs and their windows into the padded input, then cropped."""
    kernel, stride, padding, dilation, osz, _ = _pool_args(c, x, kernel_size, stride, padding, 1, ceil_mode)
    lit, counts = _avg_counts(c, x, kernel, stride, padding, osz, count_include_pad, divisor_override)
    ys, ks, pos = ops.conv_terms(len(kernel), stride, dilation)
    pshape = _covered(x, osz, kernel, stride, dilation)
    acc = c.fresh("avgpool_gx")
    reads = [(c.materialize(go, "avgpool_go"), ", ".join(["_i_n", "_i_c"] + [f"_i_{y}" for y in ys]))]
    if counts:
        reads.append((counts, ", ".join(f"_i_{y}" for y in ys)))
    loops = [("n", x.shape[0]), ("c", x.shape[1])] + list(zip(ys, osz)) + list(zip(ks, kernel))
    c.lines(ops.accumulate(acc, pshape, x.dtype, loops, reads, ", ".join(["_i_n", "_i_c"] + pos),
                           f"in0 / {lit or 'in1'}"))
    c.contraction_done()
    return _crop(c, acc, pshape, x, padding, "avgpool_gx_crop")


def _adaptive_window(c, x, out_shape):
    ratio = [i // o for i, o in zip(x.shape[2:], out_shape)]
    if any(o * r != i for i, o, r in zip(x.shape[2:], out_shape, ratio)):
        c.fail(f"adaptive average pooling from {x.shape[2:]} to {tuple(out_shape)}: only sizes that divide the "
               "input's (even windows) are supported")
    return ratio


@op("_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default")
def _adaptive_avg_pool(c, x, output_size):
    """nn.AdaptiveAvgPool*d where the output size divides the input's: average pooling with window and
    stride the ratio."""
    k = _adaptive_window(c, x, list(output_size))
    return _avg_pool(c, x, k, k, 0)


@op("_adaptive_avg_pool2d_backward.default", "_adaptive_avg_pool3d_backward.default")
def _adaptive_avg_pool_backward(c, go, x):
    k = _adaptive_window(c, x, go.shape[2:])
    return _avg_pool_backward(c, go, x, k, k, [0] * len(k), False, True, None)


def _nearest_factors(c, in_shape, out_shape):
    f = [o // i for o, i in zip(out_shape, in_shape)]
    if any(o != i * k for o, i, k in zip(out_shape, in_shape, f)) or min(f, default=1) < 1:
        c.fail(f"nearest upsampling from {tuple(in_shape)} to {tuple(out_shape)} is not by integer factors")
    return f


@op("upsample_nearest1d.default", "upsample_nearest2d.default", "upsample_nearest3d.default",
    "upsample_nearest1d.vec", "upsample_nearest2d.vec", "upsample_nearest3d.vec")
def _upsample_nearest(c, x, output_size=None, *_, **__):
    """nn.Upsample(mode="nearest") by integer factors: a map over the input writing each element's block."""
    out_shape = tuple(c.node.meta["val"].shape)
    f = [1, 1] + _nearest_factors(c, x.shape[2:], out_shape[2:])
    out = c.fresh("upsample")
    c.lines(ops.nearest_upsample(out, c.materialize(x, "upsample_in"), x.shape, f, x.dtype))
    return array_value(out, out_shape, x.dtype)


@op("upsample_nearest1d_backward.default", "upsample_nearest2d_backward.default",
    "upsample_nearest3d_backward.default", "upsample_nearest1d_backward.vec", "upsample_nearest2d_backward.vec",
    "upsample_nearest3d_backward.vec")
def _upsample_nearest_backward(c, go, output_size, input_size, *_, **__):
    """The sum of each input element's block of the gradient: an accumulating map over the input and the
    block."""
    in_shape = tuple(int(s) for s in input_size)
    f = [1, 1] + _nearest_factors(c, in_shape[2:], go.shape[2:])
    out = c.fresh("upsample_gx")
    c.lines(ops.nearest_upsample_backward(out, c.materialize(go, "upsample_go"), in_shape, f, go.dtype))
    c.contraction_done()
    return array_value(out, in_shape, go.dtype)


_LINEAR = ("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d")


def _linear_setup(c, in_shape, out_shape, align_corners, dtype):
    """Factors, edge pads and weight tables (arguments) of a linear upsampling by integer factors."""
    if align_corners:
        c.fail("align_corners=True is not supported (its weights differ from phase to phase across the axis)")
    f = [1, 1] + _nearest_factors(c, in_shape[2:], out_shape[2:])
    pads = [1 if k > 1 else 0 for k in f[2:]]
    weights = {d: c.b.argument(c.fresh(f"upsample_w{d}"), (k, 3), dtype, ops.linear_weights(k).astype(dtype))
               for d, k in enumerate(f) if k > 1}
    return f, pads, weights


@op(*[f"{n}.{v}" for n in _LINEAR for v in ("default", "vec")])
def _upsample_linear(c, x, output_size, align_corners, *_, **__):
    """nn.Upsample(mode="bilinear") (and linear, trilinear) by integer factors: the input padded by its edge
    values (PyTorch's clamping), then :func:`.numpy_ops.linear_upsample`."""
    out_shape = tuple(c.node.meta["val"].shape)
    f, pads, weights = _linear_setup(c, x.shape, out_shape, align_corners, x.dtype)
    xp = c.fresh("upsample_edge")
    c.lines(ops.pad(xp, c.materialize(x, "upsample_in"), x.shape, 2, pads, pads, None, x.dtype, "edge"))
    out = c.fresh("upsample")
    c.lines(ops.linear_upsample(out, xp, x.shape, f, weights, x.dtype))
    return array_value(out, out_shape, x.dtype)


@op(*[f"{n}_backward.{v}" for n in _LINEAR for v in ("default", "vec")])
def _upsample_linear_backward(c, go, output_size, input_size, align_corners, *_, **__):
    """Each output's gradient times its weights added to the padded input's elements it read, then the
    border folded into the edges (the padding's gradient)."""
    in_shape = tuple(int(s) for s in input_size)
    f, pads, weights = _linear_setup(c, in_shape, go.shape, align_corners, go.dtype)
    acc = c.fresh("upsample_gxp")
    c.lines(ops.linear_upsample_backward(acc, c.materialize(go, "upsample_go"), in_shape, f, weights, go.dtype))
    c.contraction_done()
    out = c.fresh("upsample_gx")
    c.lines(ops.pad_backward(out, acc, in_shape, 2, pads, pads, go.dtype, "edge"))
    return array_value(out, in_shape, go.dtype)


def _groups(x, group):
    n, ch = x.shape[0], x.shape[1]
    return (n, group, ch // group * int(np.prod(x.shape[2:], dtype=np.int64)))


@op("native_group_norm.default")
def _group_norm(c, x, weight, bias, N, C, HxW, group, eps):
    """nn.GroupNorm (and InstanceNorm with affine weights, whose trace is a group norm): the input as (batch,
    group, elements of the group), normalised over its last axis as LayerNorm is, then scaled and shifted
    per channel. Mean and reciprocal standard deviation are (batch, group), as PyTorch returns them. The
    trace decomposes its backward into elementwise ops and sums."""
    gshape = _groups(x, group)
    xg = c.reshape(x, gshape)
    xhat, mean, rstd = _layer_norm(c, xg, gshape[2:], None, None, eps)
    out = c.reshape(xhat, x.shape)
    if weight is not None:
        out = combine(lambda y, w: f"{y} * {w}", [out, _channel(weight, x.shape)], x.shape, x.dtype)
    if bias is not None:
        out = combine(lambda y, b: f"{y} + {b}", [out, _channel(bias, x.shape)], x.shape, x.dtype)
    stat = lambda v: v.remap(gshape[:2], lambda a: a if a < 2 else None)  # noqa: E731
    return out, stat(mean), stat(rstd)


def _channel(v: Optional[Value], shape: Shape) -> Optional[Value]:
    """A per-channel vector read along axis 1 of ``shape``."""
    return None if v is None else v.remap(shape, lambda a: 1)


@op("native_batch_norm.default", "_native_batch_norm_legit_no_training.default")
def _batch_norm(c, x, weight, bias, running_mean, running_var, *rest):
    """Batch normalisation: with the running statistics (a module in ``eval()`` mode), or with the batch's
    own (training mode), which also updates the running statistics in place."""
    if "no_training" in str(c.node.target):
        momentum, eps = rest
    else:
        training, momentum, eps = rest
        if training:
            return _batch_norm_batch_statistics(c, x, weight, bias, running_mean, running_var, momentum, eps)
    if running_mean is None or running_var is None:
        c.fail("batch normalisation without running statistics is not supported")
    shape = x.shape
    rstd = combine(lambda v: f"1.0 / sqrt({v} + {_lit(float(eps))})", [_channel(running_var, shape)], shape, x.dtype)
    out = combine(lambda a, m, r: f"({a} - {m}) * {r}", [x, _channel(running_mean, shape), rstd], shape, x.dtype)
    if weight is not None:
        out = combine(lambda y, w: f"{y} * {w}", [out, _channel(weight, shape)], shape, x.dtype)
    if bias is not None:
        out = combine(lambda y, b: f"{y} + {b}", [out, _channel(bias, shape)], shape, x.dtype)
    empty = constant(0.0, (0, ), x.dtype)
    return out, empty, empty


def _batch_norm_batch_statistics(c, x, weight, bias, running_mean, running_var, momentum, eps):
    """Normalisation by the batch's own statistics per channel (BatchNorm in training mode; InstanceNorm's
    trace, which views the input as one image of batch x channel channels): LayerNorm's maps over every
    axis but the channel. Split along the batch, the sums meet in an allreduce. Running statistics, where
    the module keeps them, move by ``momentum`` towards the batch's mean and unbiased variance, as PyTorch
    updates them in place."""
    axes = [0] + list(range(2, len(x.shape)))
    xhat, mean, rstd, sq = _moments(c, x, axes, eps, "bn")
    shape = x.shape
    out = xhat
    if weight is not None:
        out = combine(lambda y, w: f"{y} * {w}", [out, _channel(weight, shape)], shape, x.dtype)
    if bias is not None:
        out = combine(lambda y, b: f"{y} + {b}", [out, _channel(bias, shape)], shape, x.dtype)
    per_channel = lambda v: v.remap((shape[1], ), lambda a: 0 if a == 1 else None)  # noqa: E731
    if (running_mean is None) != (running_var is None):
        c.fail("batch normalisation with only one of the running mean and variance is not supported")
    if running_mean is not None:
        n = int(np.prod([shape[a] for a in axes]))
        if n < 2:
            c.fail(f"the running variance's unbiased estimate needs more than one value per channel; input {shape}")
        m, keep = _lit(float(momentum)), _lit(1.0 - float(momentum))
        moved = lambda old, new, scale: c.write(combine(  # noqa: E731
            lambda o, b: f"{keep} * {o} + {m} * {b}{scale}", [old, per_channel(new)], old.shape, old.dtype), "bn_running")
        c.update(c.node.args[3], moved(running_mean, mean, ""))
        c.update(c.node.args[4], moved(running_var, sq, f" / {_lit(float(n - 1))}"))
    return out, per_channel(mean), per_channel(rstd)


def _batch_norm_backward_batch_statistics(c, go, x, weight, save_mean, save_invstd, output_mask):
    """LayerNorm's input gradient over every axis but the channel (the weight folded into the output's
    gradient first); the weight's and bias's gradients sum over the same axes."""
    shape = x.shape
    axes = [0] + list(range(2, len(shape)))
    n = _lit(float(np.prod([shape[a] for a in axes])))
    mean, rstd = _channel(save_mean, shape), _channel(save_invstd, shape)
    xhat = c.write(combine(lambda a, m, r: f"({a} - {m}) * {r}", [x, mean, rstd], shape, x.dtype), "bn_xhat")
    g = go if weight is None else c.write(combine(lambda a, w: f"{a} * {w}", [go, _channel(weight, shape)], shape,
                                                  x.dtype), "bn_g")
    gx = gw = gb = None
    if output_mask[0]:
        s1 = c.reduce(g, axes, True, "sum", "bn_gsum")
        s2 = c.reduce(combine(lambda a, h: f"{a} * {h}", [g, xhat], shape, x.dtype), axes, True, "sum", "bn_gxsum")
        gx = combine(lambda r, a, t1, h, t2: f"{r} / {n} * ({n} * {a} - {t1} - {h} * {t2})",
                     [rstd, g, s1, xhat, s2], shape, x.dtype)
    if weight is not None and output_mask[1]:
        gw = c.reduce(combine(lambda a, h: f"{a} * {h}", [go, xhat], shape, x.dtype), axes, False, "sum", "bn_gw")
    if output_mask[2]:
        gb = c.reduce(go, axes, False, "sum", "bn_gb")
    return gx, gw, gb


@op("native_batch_norm_backward.default")
def _batch_norm_backward(c, go, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                         output_mask):
    if train:
        return _batch_norm_backward_batch_statistics(c, go, x, weight, save_mean, save_invstd, output_mask)
    shape = x.shape
    rstd = combine(lambda v: f"1.0 / sqrt({v} + {_lit(float(eps))})", [_channel(running_var, shape)], shape, x.dtype)
    axes = [0] + list(range(2, len(shape)))
    gx = gw = gb = None
    if output_mask[0]:
        gx = combine(lambda g, r: f"{g} * {r}", [go, rstd], shape, x.dtype)
        if weight is not None:
            gx = combine(lambda g, w: f"{g} * {w}", [gx, _channel(weight, shape)], shape, x.dtype)
    if output_mask[1]:
        xhat = combine(lambda a, m, r: f"({a} - {m}) * {r}", [x, _channel(running_mean, shape), rstd], shape, x.dtype)
        gw = c.reduce(combine(lambda g, h: f"{g} * {h}", [go, xhat], shape, x.dtype), axes, False, "sum", "bn_gw")
    if output_mask[2]:
        gb = c.reduce(go, axes, False, "sum", "bn_gb")
    return gx, gw, gb


@op("empty.memory_format")
def _empty(c, size, *_, dtype=None, **__):
    import torch
    nd = torch.empty((), dtype=dtype).numpy().dtype if dtype is not None else np.dtype(np.float32)
    return constant(0.0 if nd.kind == "f" else 0, tuple(size), nd)


@op("embedding.default")
def _embedding(c, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` picked by run-time indices: the table is read whole, the indices' axes (the batch)
    are the map's leading axes."""
    if len(weight.shape) != 2:
        c.fail(f"embedding table of shape {weight.shape} is not 2-d")
    shape = tuple(indices.shape) + (weight.shape[1], )
    out = c.fresh("embedding")
    c.lines(ops.gather(out, shape, weight.dtype, c.materialize(weight, "emb_w"), weight.shape, 0,
                       c.materialize(indices, "emb_idx"), indices.shape or (1, )))
    return array_value(out, shape, weight.dtype)


@op("embedding_dense_backward.default")
def _embedding_backward(c, go, indices, num_weights, padding_idx, scale_grad_by_freq):
    """``grad[v, d] = sum of go[..., d] where indices == v``: one accumulating map over the indices' axes
    (the batch, whose split gives partial sums), the table rows and the features."""
    if scale_grad_by_freq:
        c.fail("scale_grad_by_freq=True is not supported")
    dim = go.shape[-1]
    lead = [(f"b{k}", s) for k, s in enumerate(indices.shape)]
    loops = lead + [("v", num_weights), ("d", dim)]
    sub = ", ".join(f"_i_{l}" for l, _ in lead) or "0"
    cond = "in1 == _i_v" + (f" and in1 != {int(padding_idx)}" if padding_idx is not None and padding_idx >= 0 else "")
    out = c.fresh("emb_gw")
    c.lines(ops.accumulate(out, (num_weights, dim), go.dtype, loops,
                           [(c.materialize(go, "emb_go"), f"{sub}, _i_d"), (c.materialize(indices, "emb_idx"), sub)],
                           "_i_v, _i_d", f"(in0 if {cond} else 0.0)"))
    c.contraction_done()
    return array_value(out, (num_weights, dim), go.dtype)


# in-place forms of elementwise ops (``ReLU(inplace=True)``, the recurrent layers' gates)
for _n in ("relu", "sigmoid", "tanh", "hardtanh", "leaky_relu", "silu", "hardswish", "elu", "gelu", "exp", "neg",
           "sqrt", "reciprocal", "clamp", "clamp_min", "clamp_max"):
    op(f"{_n}_.default")(_in_place(OPS[f"aten.{_n}.default"]))


def convert(graph, builder: ProgramBuilder, inputs: Dict[object, Value]) -> List[Value]:
    """Converts ``graph`` (placeholders bound to ``inputs``) and returns the output values."""
    return Converter(builder).run(graph, inputs)
