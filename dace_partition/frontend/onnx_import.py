"""``from_onnx``: an ONNX graph with static shapes as a NumPy-level DaCe program.

Each ONNX node becomes a few lines of NumPy code (see :mod:`.numpy_ops`), so the partitioner sees the
same maps and library nodes as for a hand-written ``@dace.program``. Everything computable at import
time (shape arithmetic, constants, ``Shape`` of static tensors) is folded with ONNX's reference
evaluator and never reaches the program. Initializers that feed computation become bound arguments
(weights), so a schedule can partition them like any input.

The generated code keeps every axis a map parameter: MatMul, Gemm and Einsum are one accumulating map
over all index letters (``einsum_<k>.contract_map``, nested with its zeroing ``einsum_<k>.zero_map``),
elementwise operators are maps over the output axes, and reshapes that only split axes are copy maps.
Reshapes that merge axes stay NumPy reshapes (DaCe views), which run correctly but cannot be inside a
partitioned kernel: leave the maps that touch them unscheduled.
"""
import os
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

import dace

from ..errors import FrontendError
from ..ir.record import notes
from . import numpy_ops as ops
from .codegen import ProgramBuilder

Shape = Tuple[int, ...]

# Element types DaCe's generated C++ computes with. float16 and bfloat16 have no arithmetic there on the CPU
# (a compile error), and float8, int4/int2 and strings no type at all.
_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                          np.uint32, np.uint64, np.float32, np.float64, np.complex64, np.complex128))


def _text(at, key: str, default: Optional[str] = None) -> str:
    """A string attribute of a node: onnx.helper gives them as bytes."""
    value = at[key] if default is None else at.get(key, default)
    return value.decode() if isinstance(value, bytes) else value


class Const:
    """A tensor whose value is known at import time."""

    def __init__(self, value: np.ndarray, name: str):
        self.value, self.name = np.asarray(value), name
        self.shape, self.dtype = tuple(self.value.shape), self.value.dtype


class Tensor:
    """A tensor computed by the program: its identifier in the generated code."""

    def __init__(self, ident: str, shape: Shape, dtype, view: bool = False):
        self.ident, self.shape, self.dtype, self.view = ident, tuple(int(s) for s in shape), np.dtype(dtype), view


class _Importer:

    def __init__(self, model, name: str):
        import onnx
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.b = ProgramBuilder(name)
        self.contractions = 0
        self.float_class = False  # IsNaN/IsInf read bits through ops.FLOAT_CLASS_HELPERS
        self.values: Dict[str, Union[Const, Tensor]] = {}
        self.materialized: Dict[str, str] = {}
        self.node = None
        self.onnx = onnx
        self.inputs: Dict[str, str] = {}  # graph input -> its argument

    # -- values --------------------------------------------------------------------------------------

    def error(self, msg: str) -> FrontendError:
        where = f" in node '{self.node.name or self.node.output[0]}' ({self.node.op_type})" if self.node else ""
        return FrontendError(f"{msg}{where}")

    def get(self, name: str):
        if name == "":
            return None
        if name not in self.values:
            raise self.error(f"tensor '{name}' is not defined")
        return self.values[name]

    def const(self, name: str, what: str) -> np.ndarray:
        v = self.get(name)
        if not isinstance(v, Const):
            raise self.error(f"{what} '{name}' must be a constant (dynamic shapes are not supported)")
        return v.value

    def data(self, v) -> str:
        """Identifier of an array operand; a constant becomes a bound argument (once per constant)."""
        if isinstance(v, Tensor):
            return v.ident
        if v.name not in self.materialized:
            self.check_dtype(v.dtype, f"constant '{v.name}'")
            shape = v.shape or (1, )
            self.materialized[v.name] = self.b.argument(v.name, shape, v.dtype, v.value.reshape(shape))
        return self.materialized[v.name]

    def dshape(self, v) -> Shape:
        """Shape of the operand as generated code holds it (scalars are length-one arrays)."""
        return v.shape or (1, )

    def new(self, hint: str, shape, dtype, view=False) -> Tensor:
        self.check_dtype(dtype, "its result")
        return Tensor(self.b.fresh(hint), shape, dtype, view)

    def check_dtype(self, dtype, what: str):
        """Refuses an element type the generated code cannot hold, before DaCe fails on it."""
        dtype = np.dtype(dtype)
        if dtype not in _DTYPES:
            raise self.error(f"{what} has element type {dtype.name}, which the generated code does not support "
                             f"(supported: bool, int8 to int64, uint8 to uint64, float32, float64, complex64, "
                             f"complex128)")

    def attrs(self, node) -> dict:
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}

    # -- graph ---------------------------------------------------------------------------------------

    def run(self):
        g = self.model.graph
        from onnx import numpy_helper
        inits = {t.name: t for t in g.initializer}
        for t in g.initializer:
            self.values[t.name] = Const(numpy_helper.to_array(t), t.name)
        for vi in g.input:
            if vi.name in inits:
                continue
            shape, dtype = self.static_type(vi)
            self.values[vi.name] = Tensor(self.b.argument(vi.name, shape or (1, ), dtype), shape, dtype)
            self.inputs[vi.name] = self.values[vi.name].ident
        for node in g.node:
            self.node = node
            self.translate(node)
        self.node = None
        results = []
        for vo in g.output:
            results.append(self.output(self.get(vo.name), results))
        for r in results:
            self.b.result(r)

    def static_type(self, vi) -> Tuple[Shape, np.dtype]:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise FrontendError(f"graph input '{vi.name}' is not a tensor")
        if not t.HasField("shape"):
            raise FrontendError(f"graph input '{vi.name}' has no shape; only static shapes are supported")
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise FrontendError(f"graph input '{vi.name}' has a dynamic dimension "
                                    f"'{d.dim_param or '?'}'; only static shapes are supported")
            dims.append(int(d.dim_value))
        dtype = np.dtype(self.onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        self.check_dtype(dtype, f"graph input '{vi.name}'")
        return tuple(dims), dtype

    def output(self, v, earlier: List[str]) -> str:
        """Identifier of a graph output; views, arguments, constants and tensors returned twice are copied,
        so that every result is an array of its own."""
        if isinstance(v, Const):
            src = self.data(v)
        elif v.view or any(a[0] == v.ident for a in self.b.args) or v.ident in earlier:
            src = v.ident
        else:
            return v.ident
        out = self.b.fresh("out")
        shape = v.shape or (1, )
        self._lines(ops.copy_slice(out, shape, v.dtype, src, [0] * len(shape), [1] * len(shape)))
        return out

    def translate(self, node):
        if node.domain not in ("", "ai.onnx"):
            raise self.error(f"operator '{node.domain}::{node.op_type}' is not supported")
        handler = getattr(self, f"op_{node.op_type}", None)
        inputs = [self.get(n) for n in node.input]
        foldable = node.op_type not in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                        "Multinomial", "Bernoulli")
        if foldable and all(v is None or isinstance(v, Const) for v in inputs) and node.op_type != "Constant":
            outs = self.fold(node, inputs)
        elif handler is None:
            raise self.error(f"operator '{node.op_type}' is not supported")
        else:
            at = self.attrs(node)
            if self.opset < 7 and at.get("broadcast") and len(inputs) == 2 and inputs[1] is not None:
                inputs[1] = self._aligned(inputs[1], int(at.get("axis", -1)), len(inputs[0].shape))
            outs = handler(node, inputs, at)
        for name, v in zip(node.output, outs):
            if name:
                self.values[name] = v

    def fold(self, node, inputs) -> List[Const]:
        """Evaluates a node on constant inputs with ONNX's reference implementation (GatherElements with
        NumPy's own: the reference one picks with ``np.choose``, which NumPy 1 limits to 32 choices, and
        GPT-J gathers its rotary table along an axis of 32 positions or more)."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        feeds = {n: v.value for n, v in zip(node.input, inputs) if n}
        if node.op_type == "GatherElements":
            data, idx = (np.asarray(v.value) for v in inputs)
            axis = int(self.attrs(node).get("axis", 0)) % max(data.ndim, 1)
            if data.ndim != idx.ndim or ((idx < -data.shape[axis]) | (idx >= data.shape[axis])).any():
                raise self.error(f"indices of shape {idx.shape} do not fit data of shape {data.shape} on axis {axis}")
            return [Const(np.take_along_axis(data, idx % data.shape[axis], axis), node.output[0])]
        vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
               for n, a in feeds.items()]
        vout = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], "fold", vin, vout)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            res = ReferenceEvaluator(model).run(None, feeds)
        except Exception as e:
            raise self.error(f"cannot evaluate constant operator '{node.op_type}': {e}") from None
        names = [n for n in node.output if n]
        it = iter(Const(np.asarray(r), n) for r, n in zip(res, names))
        return [next(it) if n else None for n in node.output]

    def _aligned(self, v, axis: int, rank: int):
        """``v`` with trailing unit axes, so that NumPy broadcasting lines its first axis up with axis ``axis`` of
        a rank-``rank`` tensor: the ``broadcast``/``axis`` attributes of binary operators before opset 7
        (``axis`` -1: trailing axes, as NumPy)."""
        axis = axis % rank if axis >= 0 else rank - len(v.shape)
        if axis + len(v.shape) > rank:
            raise self.error(f"operand of shape {v.shape} does not fit axis {axis} of a rank-{rank} tensor")
        shape = tuple(v.shape) + (1, ) * (rank - axis - len(v.shape))
        if shape == tuple(v.shape):
            return v
        if isinstance(v, Const):
            return Const(v.value.reshape(shape), self.b.fresh(f"{v.name}_aligned"))
        return self._view(v, shape)

    # -- elementwise ---------------------------------------------------------------------------------

    _C_OPS = {"{} + {}": "+", "{} - {}": "-", "{} * {}": "*", "{} / {}": "/", "{} < {}": "<", "{} > {}": ">",
              "{} == {}": "==", "{} <= {}": "<=", "{} >= {}": ">="}

    def _binary(self, inputs, fn, dtype=None) -> Tensor:
        """``a op b`` with NumPy broadcasting; a scalar constant is inlined into an explicit map (a NumPy-level
        scalar operand would become a transient scalar, which the partitioner cannot distribute)."""
        a, b = inputs
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        dtype = np.dtype(dtype or np.result_type(a.dtype, b.dtype))
        scalar = [isinstance(v, Const) and v.value.size == 1 and len(v.shape) <= len(o.shape)
                  for v, o in ((a, b), (b, a))]
        if any(scalar):
            k = scalar.index(True)
            lit = repr(np.asarray(inputs[k].value).reshape(()).item())
            expr = f"in0 {self._C_OPS[fn]} {lit}" if k == 1 else f"{lit} {self._C_OPS[fn]} in0"
            return self._map([inputs[1 - k]], expr, dtype, shape)
        out = self.new("t", shape, dtype)
        self.b.line(f"{out.ident} = {fn.format(self.data(a), self.data(b))}")
        return out

    def op_Add(self, node, inputs, at):
        return [self._binary(inputs, "{} + {}")]

    def op_Sub(self, node, inputs, at):
        return [self._binary(inputs, "{} - {}")]

    def op_Mul(self, node, inputs, at):
        return [self._binary(inputs, "{} * {}")]

    def op_Div(self, node, inputs, at):
        if np.issubdtype(inputs[0].dtype, np.integer):
            return [self._map(inputs, "in0 / in1")]  # C division truncates, as ONNX's integer Div does
        return [self._binary(inputs, "{} / {}")]

    def op_Pow(self, node, inputs, at):
        base, exp = inputs
        if isinstance(exp, Const) and exp.value.size == 1 and float(exp.value.reshape(())) == 2.0:
            return [self._map([base], "in0 * in0", base.dtype)]
        return [self._map(inputs, "in0 ** in1", base.dtype)]

    def _compare(self, inputs, op):
        return [self._binary(inputs, "{} " + op + " {}", np.dtype(np.bool_))]

    def op_Equal(self, node, inputs, at):
        return self._compare(inputs, "==")

    def op_Less(self, node, inputs, at):
        return self._compare(inputs, "<")

    def op_Greater(self, node, inputs, at):
        return self._compare(inputs, ">")

    def op_LessOrEqual(self, node, inputs, at):
        return self._compare(inputs, "<=")

    def op_GreaterOrEqual(self, node, inputs, at):
        return self._compare(inputs, ">=")

    def op_Max(self, node, inputs, at):
        return [self._map(inputs, self._fold_expr(len(inputs), "max"))]

    def op_Min(self, node, inputs, at):
        return [self._map(inputs, self._fold_expr(len(inputs), "min"))]

    def op_Sum(self, node, inputs, at):
        return [self._map(inputs, " + ".join(f"in{k}" for k in range(len(inputs))))] if len(inputs) > 1 else inputs

    def op_Mean(self, node, inputs, at):
        return self._float_map(node, inputs, f"({' + '.join(f'in{k}' for k in range(len(inputs)))}) / "
                                             f"{float(len(inputs))!r}")

    def op_Sign(self, node, inputs, at):
        return [self._map(inputs, "(1 if in0 > 0 else (-1 if in0 < 0 else 0))")]

    def op_Shrink(self, node, inputs, at):
        lambd, bias = float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))
        return [self._map(inputs, f"(in0 - {bias!r} if in0 > {lambd!r} else "
                                  f"(in0 + {bias!r} if in0 < {-lambd!r} else 0))")]

    def op_ThresholdedRelu(self, node, inputs, at):
        return [self._map(inputs, f"(in0 if in0 > {float(at.get('alpha', 1.0))!r} else 0)")]

    def op_Softsign(self, node, inputs, at):
        return [self._map(inputs, "in0 / (1.0 + abs(in0))")]

    def _float_map(self, node, inputs, expr, dtype=None):
        if not np.issubdtype(inputs[0].dtype, np.floating):
            raise self.error(f"{node.op_type} of {inputs[0].dtype} tensors is not supported")
        return [self._map(inputs, expr, dtype)]

    def op_IsNaN(self, node, inputs, at):
        self.float_class = True
        return self._float_map(node, inputs, "__dp_isnan(in0)", np.bool_)

    def op_IsInf(self, node, inputs, at):
        self.float_class = True
        pos, neg = int(at.get("detect_positive", 1)), int(at.get("detect_negative", 1))
        test = {(1, 1): "!= 0", (1, 0): "== 1", (0, 1): "== -1"}.get((pos, neg))
        return self._float_map(node, inputs, f"__dp_infsign(in0) {test}" if test else "False", np.bool_)

    def op_Floor(self, node, inputs, at):
        return self._float_map(node, inputs, "floor(in0)")

    def op_Ceil(self, node, inputs, at):
        return self._float_map(node, inputs, "ceil(in0)")

    def op_Sin(self, node, inputs, at):
        return self._float_map(node, inputs, "sin(in0)")

    def op_Cos(self, node, inputs, at):
        return self._float_map(node, inputs, "cos(in0)")

    def _logical(self, inputs, op):
        if any(v.dtype != np.bool_ for v in inputs):
            raise self.error(f"operands of types {[str(v.dtype) for v in inputs]}: ONNX's logical operators take bool")
        return [self._map(inputs, op, np.bool_)]

    def op_And(self, node, inputs, at):
        return self._logical(inputs, "in0 and in1")

    def op_Or(self, node, inputs, at):
        return self._logical(inputs, "in0 or in1")

    def op_Xor(self, node, inputs, at):
        return self._logical(inputs, "in0 != in1")

    @staticmethod
    def _fold_expr(n, fn):
        expr = "in0"
        for k in range(1, n):
            op = ">" if fn == "max" else "<"
            expr = f"(({expr}) if ({expr}) {op} in{k} else in{k})"
        return expr

    def _map(self, inputs, expr, dtype=None, shape=None) -> Tensor:
        """An explicit elementwise map (with broadcasting) for ``expr`` over ``in0``, ``in1``, ..."""
        shape = shape or tuple(np.broadcast_shapes(*[v.shape for v in inputs]))
        dtype = np.dtype(dtype or np.result_type(*[v.dtype for v in inputs]))
        out = self.new("t", shape, dtype)
        operands = [(self.data(v), self.dshape(v)) for v in inputs]
        for l in ops.elementwise(out.ident, shape, dtype, operands, expr):
            self.b.line(l)
        return out

    def _unary(self, inputs, fn) -> Tensor:
        x = inputs[0]
        out = self.new("t", x.shape, x.dtype)
        self.b.line(f"{out.ident} = {fn.format(self.data(x))}")
        return out

    def op_Relu(self, node, inputs, at):
        return [self._map(inputs, "(in0 if in0 > 0 else 0)")]

    def op_Sqrt(self, node, inputs, at):
        return [self._unary(inputs, "np.sqrt({})")]

    def op_Exp(self, node, inputs, at):
        return [self._unary(inputs, "np.exp({})")]

    def op_Log(self, node, inputs, at):
        return [self._unary(inputs, "np.log({})")]

    def op_Tanh(self, node, inputs, at):
        return [self._unary(inputs, "np.tanh({})")]

    def op_Abs(self, node, inputs, at):
        return [self._unary(inputs, "np.abs({})")]

    def op_Neg(self, node, inputs, at):
        return [self._unary(inputs, "-{}")]

    def op_Not(self, node, inputs, at):
        return [self._map(inputs, "not in0")]

    def op_Reciprocal(self, node, inputs, at):
        return [self._map(inputs, "1.0 / in0")]

    def op_Erf(self, node, inputs, at):
        return [self._map(inputs, ops.ERF)]

    def op_Sigmoid(self, node, inputs, at):
        return [self._map(inputs, ops.SIGMOID)]

    def op_Gelu(self, node, inputs, at):
        approx = _text(at, "approximate", "none")
        if approx not in ("none", "tanh"):
            raise self.error(f"Gelu approximation '{approx}' is not supported")
        return [self._map(inputs, ops.GELU if approx == "none" else ops.GELU_TANH)]

    # Activations PyTorch exports as one node (nn.LeakyReLU, nn.ELU, nn.Hardswish, ...): one map each, with
    # ONNX's default attributes. Written with conditionals, so no branch overflows (exp of a large input).

    def op_LeakyRelu(self, node, inputs, at):
        return [self._map(inputs[:1], f"(in0 if in0 > 0 else {float(at.get('alpha', 0.01))!r} * in0)")]

    def op_PRelu(self, node, inputs, at):
        """nn.PReLU: before opset 7 a slope of one value per channel applies along axis 1 (PyTorch's older
        exports); from opset 7 on it broadcasts as in NumPy, from the trailing axes."""
        x, slope = inputs[:2]
        if self.opset < 7 and len(x.shape) > 1 and len(slope.shape) == 1 and slope.shape[0] == x.shape[1] > 1:
            slope = self._aligned(slope, 1, len(x.shape))
        try:
            fits = np.broadcast_shapes(x.shape, slope.shape) == tuple(x.shape)
        except ValueError:
            fits = False
        if not fits:
            raise self.error(f"slope of shape {slope.shape} does not broadcast to the input's shape {x.shape}")
        return [self._map([x, slope], "(in0 if in0 > 0 else in1 * in0)", x.dtype, x.shape)]

    def op_Elu(self, node, inputs, at):
        return [self._map(inputs[:1], f"(in0 if in0 > 0 else {float(at.get('alpha', 1.0))!r} * (exp(in0) - 1.0))")]

    def op_Celu(self, node, inputs, at):
        a = float(at.get("alpha", 1.0))
        return [self._map(inputs[:1], f"(in0 if in0 > 0 else {a!r} * (exp(in0 / {a!r}) - 1.0))")]

    def op_Selu(self, node, inputs, at):
        a, g = float(at.get("alpha", 1.67326319217681884765625)), float(at.get("gamma", 1.05070102214813232421875))
        return [self._map(inputs[:1], f"{g!r} * (in0 if in0 > 0 else {a!r} * (exp(in0) - 1.0))")]

    def op_Softplus(self, node, inputs, at):
        return [self._map(inputs[:1], ops.SOFTPLUS)]

    def op_Mish(self, node, inputs, at):
        return [self._map(inputs[:1], f"in0 * tanh({ops.SOFTPLUS})")]

    def op_HardSigmoid(self, node, inputs, at):
        return [self._map(inputs[:1], ops.hard_sigmoid(float(at.get("alpha", 0.2)), float(at.get("beta", 0.5))))]

    def op_HardSwish(self, node, inputs, at):
        return [self._map(inputs[:1], f"in0 * {ops.hard_sigmoid(1.0 / 6.0, 0.5)}")]

    def op_Clip(self, node, inputs, at):
        """nn.ReLU6, nn.Hardtanh, torch.clamp: bounds as inputs (opset 11 on) or attributes (before)."""
        x = inputs[0]
        bounds = list(inputs[1:3]) + [None] * (3 - len(inputs))
        if self.opset < 11:
            bounds = [Const(np.asarray(at[k], x.dtype), k) if k in at else None for k in ("min", "max")]
        operands, expr = [x], "in0"
        for b, cmp in zip(bounds, ("<", ">")):
            if b is None:
                continue
            if isinstance(b, Const):  # a C literal inside the tasklet
                v = np.asarray(b.value).reshape(()).item()
                bound = repr(float(v)) if np.issubdtype(x.dtype, np.floating) else str(int(v))
            else:
                operands.append(b)
                bound = f"in{len(operands) - 1}"
            expr = f"({bound} if ({expr}) {cmp} {bound} else ({expr}))"
        return [self._map(operands, expr, x.dtype, x.shape)]

    def op_Where(self, node, inputs, at):
        return [self._map(inputs, "in1 if in0 else in2", np.result_type(inputs[1].dtype, inputs[2].dtype))]

    def op_Cast(self, node, inputs, at):
        from onnx import helper
        x = inputs[0]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(at["to"]))
        if dtype == x.dtype:
            return [x]
        expr = "in0 != 0" if dtype == np.bool_ else "in0"
        return [self._map([x], expr, dtype)]

    def op_Expand(self, node, inputs, at):
        x = inputs[0]
        shape = tuple(np.broadcast_shapes(x.shape, tuple(int(s) for s in self.const(node.input[1], "shape"))))
        out = self.new("t", shape, x.dtype)
        for l in ops.elementwise(out.ident, shape, x.dtype, [(self.data(x), self.dshape(x))], "in0"):
            self.b.line(l)
        return [out]

    def op_Identity(self, node, inputs, at):
        return [inputs[0]]

    def op_Dropout(self, node, inputs, at):
        """Inference, as onnxruntime runs it (also an old ``is_test=0``): the identity, and a mask of all true
        (a constant, a program input only where used). Training mode as an input is refused."""
        if len(node.input) > 2 and node.input[2] and bool(self.const(node.input[2], "training_mode")):
            raise self.error("Dropout in training mode is not supported")
        x = inputs[0]
        return [x, Const(np.ones(x.shape, np.bool_), self.b.fresh("dropout_mask"))]

    def op_Constant(self, node, inputs, at):
        from onnx import numpy_helper
        a = node.attribute[0]
        if a.name == "value":
            val = numpy_helper.to_array(a.t)
        elif a.name in ("value_float", "value_int"):
            val = np.array(self.onnx.helper.get_attribute_value(a), dtype=np.float32 if "float" in a.name else np.int64)
        elif a.name in ("value_floats", "value_ints"):
            val = np.array(self.onnx.helper.get_attribute_value(a),
                           dtype=np.float32 if "float" in a.name else np.int64)
        else:
            raise self.error(f"Constant with attribute '{a.name}' is not supported")
        return [Const(val, node.output[0])]

    def op_Shape(self, node, inputs, at):
        shape = np.array(inputs[0].shape, dtype=np.int64)
        start, end = at.get("start", 0), at.get("end", None)
        return [Const(shape[start:end], node.output[0])]

    def op_Size(self, node, inputs, at):
        return [Const(np.array(int(np.prod(inputs[0].shape)), dtype=np.int64), node.output[0])]

    # -- linear algebra ------------------------------------------------------------------------------

    def _contract(self, terms, inputs, rhs, sizes) -> Tensor:
        dtype = np.result_type(*[v.dtype for v in inputs])
        shape = tuple(sizes[c] for c in rhs)
        out = self.new("t", shape, dtype)
        self._lines(ops.contraction(out.ident, dtype, terms, [(self.data(v), self.dshape(v)) for v in inputs], rhs,
                                    sizes))
        self.contractions += 1
        return out

    def op_MatMul(self, node, inputs, at):
        a, b = inputs
        try:
            ta, tb, to, sizes = ops.matmul_terms(a.shape, b.shape)
        except ValueError as e:
            raise self.error(str(e)) from None
        return [self._contract([ta, tb], [a, b], to, sizes)]

    def op_Gemm(self, node, inputs, at):
        a, b = inputs[:2]
        c = inputs[2] if len(inputs) > 2 else None
        alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
        ta = "ki" if at.get("transA", 0) else "ik"
        tb = "jk" if at.get("transB", 0) else "kj"
        sizes = {**dict(zip(ta, a.shape)), **dict(zip(tb, b.shape))}
        out = self._contract([ta, tb], [a, b], "ij", sizes)
        if c is None or beta == 0.0:
            return [out if alpha == 1.0 else self._map([out], f"in0 * {alpha!r}", out.dtype)]
        if alpha == 1.0 and beta == 1.0:
            return [self._binary([out, c], "{} + {}")]
        return [self._map([out, c], f"in0 * {alpha!r} + in1 * {beta!r}", out.dtype)]

    def op_Einsum(self, node, inputs, at):
        eq = _text(at, "equation").replace(" ", "")
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",")
        if "..." in eq:
            used = set(eq) - set(".,->")
            free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
            nell = max(len(v.shape) - (len(t) - 3) for t, v in zip(terms, inputs) if "..." in t)
            ell = "".join(free[:nell])
            terms = [t.replace("...", ell[nell - (len(v.shape) - (len(t) - 3)):]) for t, v in zip(terms, inputs)]
            rhs = rhs.replace("...", ell)
        if not arrow:
            counts = {c: "".join(terms).count(c) for c in "".join(terms)}
            rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
        sizes = {}
        for t, v in zip(terms, inputs):
            if len(t) != len(v.shape):
                raise self.error(f"einsum term '{t}' does not match operand shape {v.shape}")
            if not t or len(set(t)) != len(t):
                raise self.error(f"einsum '{eq}': a term that " + ("repeats an index (a diagonal or a trace)" if t else
                                                                 "is a scalar") + " is not supported")
            for c, n in zip(t, v.shape):
                sizes[c] = max(sizes.get(c, 1), n)
        return [self._contract(terms, inputs, rhs, sizes)]

    # -- normalisation and reductions ----------------------------------------------------------------

    def _lines(self, lines):
        for l in lines:
            self.b.line(l)

    def _softmax(self, node, inputs, at, log):
        x = inputs[0]
        axis = at.get("axis", -1 if self.opset >= 13 else 1) % len(x.shape)
        axes = (axis, ) if self.opset >= 13 else tuple(range(axis, len(x.shape)))
        out = self.new("softmax", x.shape, x.dtype)
        self._lines(ops.softmax(self.b.fresh, out.ident, self.data(x), x.shape, axes, x.dtype, log))
        return [out]

    def op_Softmax(self, node, inputs, at):
        return self._softmax(node, inputs, at, False)

    def op_LogSoftmax(self, node, inputs, at):
        return self._softmax(node, inputs, at, True)

    def op_LayerNormalization(self, node, inputs, at):
        x, scale = inputs[:2]
        bias = inputs[2] if len(inputs) > 2 else None
        axis = at.get("axis", -1) % len(x.shape)
        out = self.new("ln", x.shape, x.dtype)
        stat = tuple(x.shape[:axis]) + (1, ) * (len(x.shape) - axis)
        extra = [self.new(h, stat, np.float32) if len(node.output) > k and node.output[k] else None
                 for k, h in ((1, "ln_mean"), (2, "ln_rstd"))]
        self._lines(ops.layer_norm(self.b.fresh, out.ident, self.data(x), x.shape, axis, at.get("epsilon", 1e-5),
                                   x.dtype, (self.data(scale), self.dshape(scale)),
                                   None if bias is None else (self.data(bias), self.dshape(bias)),
                                   extra[0] and extra[0].ident, extra[1] and extra[1].ident))
        return [out] + [e for e in extra if e is not None]

    def op_InstanceNormalization(self, node, inputs, at):
        """nn.InstanceNorm and nn.GroupNorm (exported as a reshape around this): each (sample, channel)
        normalised over its spatial axes, then scaled and shifted per channel."""
        x, scale, bias = inputs[:3]
        if len(x.shape) < 3:
            raise self.error(f"InstanceNormalization input of shape {x.shape} has no spatial axis")
        c = x.shape[1]
        for name, v in zip(node.input[1:3], (scale, bias)):
            if v.shape != (c, ):
                raise self.error(f"InstanceNormalization parameter '{name}' of shape {v.shape} is not per channel ({c})")
        out = self.new("inorm", x.shape, x.dtype)
        self._lines(ops.layer_norm(self.b.fresh, out.ident, self.data(x), x.shape, 2, at.get("epsilon", 1e-5),
                                   x.dtype, (self.data(scale), (c, ), [1]), (self.data(bias), (c, ), [1])))
        return [out]

    def _reduce(self, node, inputs, at, kind, pre=None, post=None):
        """ReduceSum/Mean/Max/Min; with ``pre`` (a scalar expression of ``in0``) mapped over the input first and
        ``post`` over the result (ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum)."""
        x = inputs[0]
        if len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in self.const(node.input[1], "axes").reshape(-1)]
        else:
            axes = list(at.get("axes", []))
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(len(x.shape)))
        keep = bool(at.get("keepdims", 1))
        axes = sorted({a % len(x.shape) for a in axes})
        shape = ops.keep_shape(x.shape, axes) if keep else tuple(s for i, s in enumerate(x.shape) if i not in axes)
        src = self.data(x)
        if pre is not None:
            mapped = self.new("pre", x.shape, x.dtype)
            self._lines(ops.elementwise(mapped.ident, x.shape, x.dtype, [(src, x.shape)], pre))
            src = mapped.ident
        out = self.new("red", shape, x.dtype)
        self._lines(ops.reduce(self.b.fresh, out.ident, src, x.shape, axes, keep, kind, x.dtype))
        if post is not None:
            red, out = out, self.new("post", shape, x.dtype)
            self._lines(ops.elementwise(out.ident, shape or (1, ), x.dtype, [(red.ident, shape or (1, ))], post))
        return [out]

    def op_ReduceL1(self, node, inputs, at):
        return self._reduce(node, inputs, at, "sum", pre="abs(in0)")

    def op_ReduceL2(self, node, inputs, at):
        return self._reduce(node, inputs, at, "sum", pre="in0 * in0", post="sqrt(in0)")

    def op_ReduceSumSquare(self, node, inputs, at):
        return self._reduce(node, inputs, at, "sum", pre="in0 * in0")

    def op_ReduceLogSum(self, node, inputs, at):
        return self._reduce(node, inputs, at, "sum", post="log(in0)")

    def op_ReduceSum(self, node, inputs, at):
        return self._reduce(node, inputs, at, "sum")

    def op_ReduceMean(self, node, inputs, at):
        return self._reduce(node, inputs, at, "mean")

    def op_ReduceMax(self, node, inputs, at):
        return self._reduce(node, inputs, at, "max")

    def op_ReduceMin(self, node, inputs, at):
        return self._reduce(node, inputs, at, "min")

    # -- shapes and data movement --------------------------------------------------------------------

    def _view(self, x, shape) -> Tensor:
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape)) != int(np.prod(x.shape)):
            raise self.error(f"cannot reshape {x.shape} to {shape}")
        groups = ops.split_reshape(x.shape, shape)
        if groups is not None:  # an affine copy map, which schedules can split
            out = self.new("view", shape, x.dtype)
            self._lines(ops.reshape_copy(out.ident, shape, x.dtype, self.data(x), groups))
            return out
        out = self.new("view", shape, x.dtype)
        lines = ops.merge_reshape_copy(out.ident, shape, x.dtype, self.data(x), x.shape)
        if lines is not None:  # merges whole axes (Flatten): an affine copy map too
            self._lines(lines)
            return out
        out = self.new("view", shape, x.dtype, view=True)
        self.b.line(f"{out.ident} = np.reshape({self.data(x)}, {ops.shape_code(shape or (1, ))})")
        return out

    def op_Reshape(self, node, inputs, at):
        x = inputs[0]
        shape = [int(s) for s in self.const(node.input[1], "shape")]
        if not at.get("allowzero", 0):
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        if -1 in shape:
            rest = int(np.prod([s for s in shape if s != -1]))
            shape[shape.index(-1)] = int(np.prod(x.shape)) // max(rest, 1)
        return [self._view(x, shape)]

    def op_Flatten(self, node, inputs, at):
        x = inputs[0]
        axis = at.get("axis", 1) % (len(x.shape) + 1) if at.get("axis", 1) != len(x.shape) else len(x.shape)
        return [self._view(x, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))]

    def _axes(self, node, at):
        if len(node.input) > 1 and node.input[1]:
            return [int(a) for a in self.const(node.input[1], "axes").reshape(-1)]
        return list(at.get("axes", []))

    def op_Squeeze(self, node, inputs, at):
        x = inputs[0]
        axes = {a % len(x.shape) for a in self._axes(node, at)} or {i for i, s in enumerate(x.shape) if s == 1}
        if any(x.shape[a] != 1 for a in axes):
            raise self.error(f"cannot squeeze axes {sorted(axes)} of shape {x.shape}")
        return [self._view(x, [s for i, s in enumerate(x.shape) if i not in axes])]

    def op_Unsqueeze(self, node, inputs, at):
        x = inputs[0]
        rank = len(x.shape) + len(self._axes(node, at))
        axes = {a % rank for a in self._axes(node, at)}
        it = iter(x.shape)
        return [self._view(x, [1 if i in axes else next(it) for i in range(rank)])]

    def op_Transpose(self, node, inputs, at):
        x = inputs[0]
        perm = list(at.get("perm", reversed(range(len(x.shape)))))
        shape = tuple(x.shape[p] for p in perm)
        out = self.new("tr", shape, x.dtype)
        if perm == sorted(perm):
            self._lines(ops.copy_slice(out.ident, shape, x.dtype, self.data(x), [0] * len(shape), [1] * len(shape)))
        else:
            self.b.line(f"{out.ident} = np.transpose({self.data(x)}, {tuple(perm)})")
        return [out]

    def _slice(self, x, axis, start, stop, hint="slice") -> Tensor:
        starts = [start if i == axis else 0 for i in range(len(x.shape))]
        shape = tuple(stop - start if i == axis else s for i, s in enumerate(x.shape))
        out = self.new(hint, shape, x.dtype)
        self._lines(ops.copy_slice(out.ident, shape, x.dtype, self.data(x), starts, [1] * len(shape)))
        return out

    def op_Split(self, node, inputs, at):
        x = inputs[0]
        axis = at.get("axis", 0) % len(x.shape)
        n = len(node.output)
        if len(node.input) > 1 and node.input[1]:
            sizes = [int(s) for s in self.const(node.input[1], "split")]
        elif "split" in at:
            sizes = list(at["split"])
        else:
            k = -(-x.shape[axis] // n)
            sizes = [min(k, x.shape[axis] - i * k) for i in range(n)]
        if sum(sizes) != x.shape[axis] or len(sizes) != n:
            raise self.error(f"split sizes {sizes} do not fit axis {axis} of shape {x.shape}")
        outs, start = [], 0
        for s in sizes:
            outs.append(self._slice(x, axis, start, start + s, "split"))
            start += s
        return outs

    def op_Slice(self, node, inputs, at):
        x = inputs[0]
        if self.opset < 10:  # starts, ends and axes were attributes
            starts, ends = np.asarray(at["starts"]), np.asarray(at["ends"])
            axes = np.asarray(at.get("axes", range(len(starts))))
            steps = np.ones(len(starts), np.int64)
            return [self._sliced(x, starts, ends, axes, steps)]
        starts = self.const(node.input[1], "starts").reshape(-1)
        ends = self.const(node.input[2], "ends").reshape(-1)
        axes = self.const(node.input[3], "axes").reshape(-1) if len(node.input) > 3 and node.input[3] \
            else np.arange(len(starts))
        steps = self.const(node.input[4], "steps").reshape(-1) if len(node.input) > 4 and node.input[4] \
            else np.ones(len(starts), np.int64)
        return [self._sliced(x, starts, ends, axes, steps)]

    def _sliced(self, x, starts, ends, axes, steps) -> Tensor:
        first, step, shape = [0] * len(x.shape), [1] * len(x.shape), list(x.shape)
        for s, e, a, st in zip(starts, ends, axes, steps):
            a = int(a) % len(x.shape)
            if int(st) < 0:
                raise self.error("Slice with a negative step is not supported")
            r = range(*slice(int(s), int(e), int(st)).indices(x.shape[a]))
            first[a], step[a], shape[a] = r.start, r.step, len(r)
        out = self.new("slice", shape, x.dtype)
        self._lines(ops.copy_slice(out.ident, shape, x.dtype, self.data(x), first, step))
        return out

    def op_Concat(self, node, inputs, at):
        axis = at["axis"] % len(inputs[0].shape)
        shape = list(inputs[0].shape)
        shape[axis] = sum(v.shape[axis] for v in inputs)
        return [self._concat([(self.data(v), v.shape) for v in inputs], axis, shape,
                             np.result_type(*[v.dtype for v in inputs]), "cat")]

    def _concat(self, parts, axis: int, shape, dtype, hint: str) -> Tensor:
        out = self.new(hint, shape, dtype)
        self._lines(ops.concat(out.ident, shape, dtype, parts, axis))
        return out

    def op_Gather(self, node, inputs, at):
        x = inputs[0]
        axis = at.get("axis", 0) % len(x.shape)
        if not isinstance(self.get(node.input[1]), Const):  # run-time indices (an embedding lookup)
            ind = self.get(node.input[1])
            if not np.issubdtype(ind.dtype, np.integer):
                raise self.error(f"Gather indices '{node.input[1]}' must be integers, not {ind.dtype}")
            shape = x.shape[:axis] + ind.shape + x.shape[axis + 1:]
            out = self.new("gather", shape, x.dtype)
            self._lines(ops.gather(out.ident, shape, x.dtype, self.data(x), self.dshape(x), axis, self.data(ind),
                                   ind.shape))
            return [out]
        return [self._gather_const(x, axis, self.const(node.input[1], "indices").astype(np.int64))]

    def op_GatherND(self, node, inputs, at):
        """``GatherND`` with constant indices (Falcon picks its query, key and value out of one fused
        projection this way): each index tuple names a sub-block of the leading axes, so the leading axes
        are merged into one and the tuples become positions along it, a constant ``Gather``."""
        x = inputs[0]
        if int(at.get("batch_dims", 0)):
            raise self.error("GatherND with batch_dims is not supported")
        idx = self.const(node.input[1], "indices").astype(np.int64)
        k = idx.shape[-1] if idx.ndim else 0
        if not 1 <= k <= len(x.shape):
            raise self.error(f"index tuples of length {k} do not fit input of shape {x.shape}")
        lead = x.shape[:k]
        tuples = idx.reshape(-1, k)
        if ((tuples < -np.array(lead)) | (tuples >= np.array(lead))).any():
            raise self.error(f"indices out of range for the leading axes {lead} of '{node.input[0]}'")
        flat = np.ravel_multi_index(tuple((tuples % np.array(lead)).T), lead).reshape(idx.shape[:-1])
        merged = x if k == 1 else self._view(x, (int(np.prod(lead)), ) + x.shape[k:])
        return [self._gather_const(merged, 0, flat)]

    def _gather_const(self, x, axis: int, idx: np.ndarray) -> Tensor:
        """``np.take(x, idx, axis)`` for indices known at import: one slice for a run of consecutive
        indices, else the picked slices concatenated."""
        n = x.shape[axis]
        flat = [int(i) % n for i in idx.reshape(-1)]
        shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
        if not flat:
            raise self.error("Gather with no indices is not supported")
        if flat == list(range(flat[0], flat[0] + len(flat))):
            part = self._slice(x, axis, flat[0], flat[0] + len(flat), "gather")
        else:
            parts = [self._slice(x, axis, i, i + 1, "gather") for i in flat]
            cat_shape = list(x.shape)
            cat_shape[axis] = len(flat)
            part = self._concat([(p.ident, p.shape) for p in parts], axis, cat_shape, x.dtype, "gather")
        return self._view(part, shape)

    # -- convolution, pooling, batch normalisation -----------------------------------------------------

    def _window(self, node, at, x, kernel):
        """(strides, dilations, pads before, pads after) of a Conv / pooling node, refusing what is not
        supported in words."""
        n = len(kernel)
        if len(x.shape) != n + 2:
            raise self.error(f"input '{node.input[0]}' of shape {x.shape} does not match a {n}-d kernel")
        auto = _text(at, "auto_pad", "NOTSET")
        strides = list(at.get("strides", [1] * n))
        dil = list(at.get("dilations", [1] * n))
        pads = list(at.get("pads", [0] * (2 * n)))
        if auto == "VALID":
            pads = [0] * (2 * n)
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0] * (2 * n)
            for k in range(n):
                out = -(-x.shape[2 + k] // strides[k])
                total = max(0, (out - 1) * strides[k] + (kernel[k] - 1) * dil[k] + 1 - x.shape[2 + k])
                small, big = total // 2, total - total // 2
                pads[k], pads[n + k] = (small, big) if auto == "SAME_UPPER" else (big, small)
        elif auto != "NOTSET":
            raise self.error(f"auto_pad '{auto}' is not supported")
        if len(strides) != n or len(dil) != n or len(pads) != 2 * n or min(strides + dil) < 1 or min(pads) < 0:
            raise self.error(f"strides {strides}, dilations {dil} or pads {pads} do not fit a {n}-d kernel")
        return strides, dil, pads[:n], pads[n:]

    def _padded(self, x, before, after, value) -> Tuple[str, Shape]:
        if not any(before) and not any(after):
            return self.data(x), x.shape
        out = self.b.fresh("pad")
        self._lines(ops.pad(out, self.data(x), x.shape, 2, before, after, value, x.dtype))
        return out, ops.padded_shape(x.shape, 2, before, after)

    def op_Conv(self, node, inputs, at):
        x, w = inputs[:2]
        bias = inputs[2] if len(inputs) > 2 else None
        groups = int(at.get("group", 1))
        if not np.issubdtype(x.dtype, np.floating):
            raise self.error(f"Conv of {x.dtype} tensors is not supported")
        kernel = list(at.get("kernel_shape", w.shape[2:]))
        if tuple(kernel) != tuple(w.shape[2:]) or groups < 1 or w.shape[1] * groups != x.shape[1] or \
                w.shape[0] % groups:
            raise self.error(f"Conv weight of shape {w.shape} does not fit input {x.shape} with group={groups}")
        strides, dil, before, after = self._window(node, at, x, kernel)
        xp, pshape = self._padded(x, before, after, "0.0")
        n, oc, ic = x.shape[0], w.shape[0], x.shape[1]
        osz = [ops.window_count(p, k, s, d) for p, k, s, d in zip(pshape[2:], kernel, strides, dil)]
        if min(osz) < 1:
            raise self.error(f"Conv output of input {x.shape} would be empty")
        ys, ks, pos = ops.conv_terms(len(kernel), strides, dil)
        shape = (n, oc) + tuple(osz)
        dtype = np.result_type(x.dtype, w.dtype)
        acc = self.new("conv", shape, dtype)
        channels, o_ch, i_ch = ops.conv_channels(groups, oc, ic)
        loops = [("n", n)] + channels + list(zip(ys, osz)) + list(zip(ks, kernel))
        reads = [(xp, ", ".join(["_i_n", i_ch] + pos)),
                 (self.data(w), ", ".join([o_ch, "_i_c"] + [f"_i_{k}" for k in ks]))]
        write = ", ".join(["_i_n", o_ch] + [f"_i_{y}" for y in ys])
        self._lines(ops.accumulate(acc.ident, shape, dtype, loops, reads, write, "in0 * in1"))
        self.contractions += 1
        if bias is None:
            return [acc]
        out = self.new("t", shape, dtype)
        self._lines(ops.elementwise(out.ident, shape, dtype, [(acc.ident, shape), (self.data(bias), (oc, ), [1])],
                                    "in0 + in1"))
        return [out]

    def op_ConvTranspose(self, node, inputs, at):
        """nn.ConvTranspose1d/2d/3d with ``groups=1``: each input element adds its product with the kernel to
        the output window it spreads to (``y[n, o, i*s + k*d] += x[n, c, i] * w[c, o, k]``, an accumulating map
        with affine subscripts, the form of a convolution's input gradient), into the uncropped output; the
        pads are then cropped and ``output_padding`` adds zeros where no window reached."""
        x, w = inputs[:2]
        bias = inputs[2] if len(inputs) > 2 else None
        if at.get("group", 1) != 1:
            raise self.error(f"ConvTranspose with group={at['group']} is not supported (only group=1)")
        if not np.issubdtype(x.dtype, np.floating):
            raise self.error(f"ConvTranspose of {x.dtype} tensors is not supported")
        kernel = list(at.get("kernel_shape", w.shape[2:]))
        n = len(kernel)
        if tuple(kernel) != tuple(w.shape[2:]) or w.shape[0] != x.shape[1] or len(x.shape) != n + 2:
            raise self.error(f"ConvTranspose weight of shape {w.shape} does not fit input {x.shape}")
        auto = _text(at, "auto_pad", "NOTSET")
        if auto not in ("NOTSET", "VALID"):
            raise self.error(f"ConvTranspose with auto_pad '{auto}' is not supported (give pads)")
        if at.get("output_shape") is not None:
            raise self.error(f"ConvTranspose with output_shape {list(at['output_shape'])} is not supported (give pads "
                             f"and output_padding)")
        strides, dil = list(at.get("strides", [1] * n)), list(at.get("dilations", [1] * n))
        pads = [0] * (2 * n) if auto == "VALID" else list(at.get("pads", [0] * (2 * n)))
        extra = list(at.get("output_padding", [0] * n))
        if len(strides) != n or len(dil) != n or len(pads) != 2 * n or len(extra) != n or \
                min(strides + dil) < 1 or min(pads + extra) < 0:
            raise self.error(f"strides {strides}, dilations {dil}, pads {pads} or output_padding {extra} do not fit "
                             f"a {n}-d kernel")
        full = ops.transposed_conv_full(x.shape[2:], kernel, strides, dil)
        osz = [f - pb - pe + e for f, pb, pe, e in zip(full, pads[:n], pads[n:], extra)]
        if min(osz) < 1:
            raise self.error(f"ConvTranspose output of input {x.shape} would be empty")
        batch, oc = x.shape[0], w.shape[1]
        dtype = np.result_type(x.dtype, w.dtype)
        acc = self.b.fresh("convt")
        full_shape = (batch, oc) + tuple(full)
        self._lines(ops.transposed_conv(acc, self.data(x), x.shape, self.data(w), w.shape, strides, dil, dtype))
        self.contractions += 1
        shape = (batch, oc) + tuple(osz)
        if any(pads) or any(extra):
            cropped = self.b.fresh("convt_crop")
            self._lines(ops.pad(cropped, acc, full_shape, 2, [-p for p in pads[:n]],
                                [e - p for e, p in zip(extra, pads[n:])], "0.0", dtype))
            acc = cropped
        y = Tensor(acc, shape, dtype)
        if bias is None:
            return [y]
        out = self.new("t", shape, dtype)
        self._lines(ops.elementwise(out.ident, shape, dtype, [(acc, shape), (self.data(bias), (oc, ), [1])],
                                    "in0 + in1"))
        return [out]

    _MAX_STEPS = 64  # time steps unrolled at import: each is two maps

    def op_LSTM(self, node, inputs, at):
        return self._recurrence(node, inputs, at, "LSTM")

    def op_GRU(self, node, inputs, at):
        return self._recurrence(node, inputs, at, "GRU")

    def _recurrence(self, node, inputs, at, kind: str):
        """nn.LSTM and nn.GRU (one ONNX node per layer, both directions), unrolled over the time steps, which
        the static shapes give: the input's products with every gate's weights for all steps are one
        accumulating map (``xw[b, d, t, g]``); each step is then the hidden state's product with the recurrent
        weights (``hr[b, g]``) and one map over (batch, hidden) computing the gates and the new state and
        writing its row of ``Y``. Every map's first axis is the batch, so a split of the batch makes each rank
        run its sequences, the weights read whole. ONNX's gate orders: LSTM i, o, f, c; GRU z, r, h."""
        gates = 4 if kind == "LSTM" else 3
        hidden = int(at["hidden_size"])
        direction = _text(at, "direction", "forward")
        x, w, r = inputs[:3]
        get = lambda k: inputs[k] if len(inputs) > k and node.input[k] else None  # noqa: E731
        bias, lens, h0 = get(3), get(4), get(5)
        c0, peep = (get(6), get(7)) if kind == "LSTM" else (None, None)
        default_acts = ["Sigmoid", "Tanh", "Tanh"] if kind == "LSTM" else ["Sigmoid", "Tanh"]
        acts = [a.decode() if isinstance(a, bytes) else a for a in at.get("activations", [])]
        dirs = 2 if direction == "bidirectional" else 1
        why = None
        if direction not in ("forward", "reverse", "bidirectional"):
            why = f"direction '{direction}'"
        elif acts and [a.lower() for a in acts] != [a.lower() for a in default_acts * dirs]:
            why = f"activations {acts} (only the defaults {default_acts})"
        elif at.get("clip") is not None or at.get("input_forget", 0) or at.get("layout", 0):
            why = "clip, input_forget or layout=1"
        elif kind == "GRU" and not at.get("linear_before_reset", 0):
            why = "linear_before_reset=0 (PyTorch exports 1)"
        elif peep is not None and not (isinstance(peep, Const) and not peep.value.any()):
            why = "peephole weights"
        elif not np.issubdtype(x.dtype, np.floating) or len(x.shape) != 3:
            why = f"input of shape {x.shape} and type {x.dtype}"
        elif lens is not None and not (isinstance(lens, Const) and (lens.value == x.shape[0]).all()):
            why = "sequence_lens other than the whole sequence"
        elif x.shape[0] > self._MAX_STEPS:
            why = f"{x.shape[0]} time steps (at most {self._MAX_STEPS} are unrolled)"
        if why is not None:
            raise self.error(f"{kind} with {why} is not supported")
        steps, batch, width = x.shape
        g_all = gates * hidden
        if tuple(w.shape) != (dirs, g_all, width) or tuple(r.shape) != (dirs, g_all, hidden):
            raise self.error(f"{kind} weights of shapes {w.shape}, {r.shape} do not fit input {x.shape}, "
                             f"hidden_size {hidden}, direction '{direction}'")
        dtype = x.dtype
        state = (dirs, batch, hidden)
        zeros = lambda shape, hint: Const(np.zeros(shape, dtype), self.b.fresh(hint))  # noqa: E731
        bias = self.data(bias if bias is not None else zeros((dirs, 2 * g_all), f"{kind}_b"))
        h_init = self.data(h0 if h0 is not None else zeros(state, f"{kind}_h0"))
        c_init = self.data(c0 if c0 is not None else zeros(state, f"{kind}_c0")) if kind == "LSTM" else None
        xw = self.b.fresh(f"{kind.lower()}_xw")
        self._lines(ops.accumulate(xw, (batch, dirs, steps, g_all), dtype,
                                   [("b", batch), ("d", dirs), ("t", steps), ("g", g_all), ("k", width)],
                                   [(self.data(x), "_i_t, _i_b, _i_k"), (self.data(w), "_i_d, _i_g, _i_k")],
                                   "_i_b, _i_d, _i_t, _i_g", "in0 * in1"))
        self.contractions += 1
        ys = self.new(f"{kind.lower()}_y", (steps, dirs, batch, hidden), dtype)
        yh = self.new(f"{kind.lower()}_yh", state, dtype)
        yc = self.new(f"{kind.lower()}_yc", state, dtype) if kind == "LSTM" else None
        self._lines([f"{t.ident} = np.empty({ops.shape_code(t.shape)}, dtype={ops.np_dtype(dtype)})"
                     for t in (ys, yh, yc) if t is not None])
        for d in range(dirs):
            order = range(steps) if d == 0 and direction != "reverse" else range(steps - 1, -1, -1)
            h_prev, c_prev = (h_init, f"{d}, _i_b, _i_j"), (c_init, f"{d}, _i_b, _i_j")
            for n_step, t in enumerate(order):
                hr = self.b.fresh(f"{kind.lower()}_hr")
                self._lines(ops.accumulate(hr, (batch, g_all), dtype, [("b", batch), ("g", g_all), ("j", hidden)],
                                           [(h_prev[0], h_prev[1]), (self.data(r), f"{d}, _i_g, _i_j")],
                                           "_i_b, _i_g", "in0 * in1"))
                self.contractions += 1
                h_new, c_new = self.b.fresh(f"{kind.lower()}_h"), self.b.fresh(f"{kind.lower()}_c")
                last = n_step == steps - 1
                lines = [f"{h_new} = np.empty(({batch}, {hidden}), dtype={ops.np_dtype(dtype)})"]
                if kind == "LSTM":
                    lines.append(f"{c_new} = np.empty(({batch}, {hidden}), dtype={ops.np_dtype(dtype)})")
                lines += ops._map_head(["_i_b", "_i_j"], (batch, hidden))
                for k in range(gates):
                    lines += [f"        _x{k} << {xw}[_i_b, {d}, {t}, _i_j + {k * hidden}]",
                              f"        _h{k} << {hr}[_i_b, _i_j + {k * hidden}]",
                              f"        _wb{k} << {bias}[{d}, _i_j + {k * hidden}]",
                              f"        _rb{k} << {bias}[{d}, _i_j + {g_all + k * hidden}]"]
                outs = [f"        _oh >> {h_new}[_i_b, _i_j]", f"        _oy >> {ys.ident}[{t}, {d}, _i_b, _i_j]"]
                if last:
                    outs.append(f"        _ohl >> {yh.ident}[{d}, _i_b, _i_j]")
                sig = lambda k: f"1.0 / (1.0 + exp(-(_x{k} + _h{k} + _wb{k} + _rb{k})))"  # noqa: E731
                if kind == "LSTM":
                    lines.append(f"        _cp << {c_prev[0]}[{c_prev[1]}]")
                    outs.append(f"        _oc >> {c_new}[_i_b, _i_j]")
                    if last:
                        outs.append(f"        _ocl >> {yc.ident}[{d}, _i_b, _i_j]")
                    body = [f"_gi = {sig(0)}", f"_go = {sig(1)}", f"_gf = {sig(2)}",
                            "_gc = tanh(_x3 + _h3 + _wb3 + _rb3)", "_cn = _gf * _cp + _gi * _gc", "_hn = _go * tanh(_cn)",
                            "_oc = _cn"] + (["_ocl = _cn"] if last else [])
                else:
                    lines.append(f"        _hp << {h_prev[0]}[{h_prev[1]}]")
                    body = [f"_gz = {sig(0)}", f"_gr = {sig(1)}", "_gn = tanh(_x2 + _wb2 + _gr * (_h2 + _rb2))",
                            "_hn = (1.0 - _gz) * _gn + _gz * _hp"]
                body += ["_oh = _hn", "_oy = _hn"] + (["_ohl = _hn"] if last else [])
                self._lines(lines + outs + [f"        {b}" for b in body])
                h_prev, c_prev = (h_new, "_i_b, _i_j"), (c_new, "_i_b, _i_j")
        return [ys, yh] + ([yc] if kind == "LSTM" else [])

    def _pool_window(self, node, at, x):
        """(kernel, strides, dilations, pads before, pads after, output sizes, pads after as given) of a
        pooling node; with ``ceil_mode`` the pads after grow to hold the last window, which must start
        inside the input or its left padding (ONNX, PyTorch)."""
        kernel = list(at["kernel_shape"])
        strides, dil, before, given_after = self._window(node, at, x, kernel)
        osz, after = ops.pool_extent(x.shape[2:], kernel, strides, dil, before, given_after,
                                     bool(at.get("ceil_mode", 0)))
        if min(osz) < 1:
            raise self.error(f"{node.op_type} output of input {x.shape} would be empty")
        return kernel, strides, dil, before, after, osz, given_after

    _POINT_TAPS = 64  # windows up to this size: one point read per tap; larger ones: an accumulating map

    def _pool(self, x, xp, kernel, strides, dil, osz, hint, combine, divisor=None, init="0") -> Tensor:
        """:func:`.numpy_ops.pool` over the padded input ``xp``; ``divisor`` (an array of the output's spatial
        shape) divides the result, as a literal where all its elements are equal. A window of more than
        ``_POINT_TAPS`` elements (a 60 x 80 max pool) is one map over the output and the window instead,
        folding each tap into its output element with ``combine`` from ``init``."""
        shape = tuple(x.shape[:2]) + tuple(osz)
        out = self.new(hint, shape, x.dtype)
        lit = counts = ""
        if divisor is not None and np.all(divisor == divisor.flat[0]):
            lit = repr(float(divisor.flat[0]))
        elif divisor is not None:
            counts = self.data(Const(divisor.astype(x.dtype), self.b.fresh(f"{hint}_count")))
        if int(np.prod(kernel)) <= self._POINT_TAPS:
            self._lines(ops.pool(out.ident, shape, x.dtype, xp, kernel, strides, dil, combine, lit, counts))
            return out
        ys, ks, pos = ops.conv_terms(len(kernel), strides, dil)
        loops = [("n", shape[0]), ("c", shape[1])] + list(zip(ys, osz)) + list(zip(ks, kernel))
        acc = self.new(f"{hint}_acc", shape, x.dtype) if divisor is not None else out
        self._lines(ops.accumulate(acc.ident, shape, x.dtype, loops, [(xp, ", ".join(["_i_n", "_i_c"] + pos))],
                                   ", ".join(["_i_n", "_i_c"] + [f"_i_{y}" for y in ys]), "in0", init,
                                   combine("a", "b")))
        self.contractions += 1
        if divisor is None:
            return out
        spatial = [f"_i{k}" for k in range(2, len(shape))]
        reads = [(acc.ident, ", ".join(f"_i{k}" for k in range(len(shape))))] + \
            ([(counts, ", ".join(spatial))] if counts else [])
        self._lines(ops.shifted(out.ident, shape, x.dtype, reads, f"in0 / {lit or 'in1'}"))
        return out

    def op_MaxPool(self, node, inputs, at):
        x = inputs[0]
        if len(node.output) > 1 and node.output[1]:
            raise self.error("MaxPool's Indices output is not supported")
        if at.get("storage_order", 0):
            raise self.error("MaxPool with storage_order=1 is not supported")
        kernel, strides, dil, before, after, osz, _ = self._pool_window(node, at, x)
        lowest = repr(float(np.finfo(x.dtype).min)) if np.issubdtype(x.dtype, np.floating) else \
            str(int(np.iinfo(x.dtype).min))
        xp, _ = self._padded(x, before, after, lowest)
        return [self._pool(x, xp, kernel, strides, dil, osz, "maxpool", lambda a, b: f"max({a}, {b})", init=lowest)]

    def op_GlobalMaxPool(self, node, inputs, at):
        x = inputs[0]
        axes = list(range(2, len(x.shape)))
        out = self.new("gmp", ops.keep_shape(x.shape, axes), x.dtype)
        self._lines(ops.reduce(self.b.fresh, out.ident, self.data(x), x.shape, axes, True, "max", x.dtype))
        return [out]

    def op_LRN(self, node, inputs, at):
        """nn.LocalResponseNorm (AlexNet, GoogLeNet): each element over ``(bias + alpha / size * s) ** beta``,
        where ``s`` sums the squares of the ``size`` channels around it; the squares are padded with zeros
        along the channels, so every window is ``size`` point reads."""
        x = inputs[0]
        if not np.issubdtype(x.dtype, np.floating) or len(x.shape) < 3:
            raise self.error(f"LRN of a {x.dtype} tensor of shape {x.shape} is not supported")
        size = int(at["size"])
        alpha, beta, bias = float(at.get("alpha", 1e-4)), float(at.get("beta", 0.75)), float(at.get("bias", 1.0))
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        sq = self._map([x], "in0 * in0")
        padded = self.b.fresh("lrn_pad")
        zeros = [0] * (len(x.shape) - 2)
        self._lines(ops.pad(padded, sq.ident, x.shape, 1, [lo] + zeros, [hi] + zeros, "0.0", x.dtype))
        rest = "".join(f", _i{k}" for k in range(2, len(x.shape)))
        reads = [(self.data(x), f"_i0, _i1{rest}")] + [(padded, f"_i0, _i1 + {k}{rest}") for k in range(size)]
        total = " + ".join(f"in{k}" for k in range(1, size + 1))
        out = self.new("lrn", x.shape, x.dtype)
        self._lines(ops.shifted(out.ident, x.shape, x.dtype, reads,
                                f"in0 / (({bias!r} + {alpha / size!r} * ({total})) ** {beta!r})"))
        return [out]

    def op_CumSum(self, node, inputs, at):
        """A running sum along an axis known at import time, as an accumulating map over the output and the
        source position: ``y[.., i, ..] += x[.., j, ..]`` where ``j <= i`` (``<`` when exclusive; ``>=``,
        ``>`` when reversed). Quadratic in that axis's length, which in the models that use it (positions
        counted from a padding mask) is a sequence length; every axis stays a map parameter a schedule can
        split."""
        x = inputs[0]
        rank = len(x.shape)
        axis = int(self.const(node.input[1], "axis").reshape(-1)[0])
        if not x.shape or not -rank <= axis < rank:
            raise self.error(f"axis {axis} does not fit input of shape {x.shape}")
        if x.dtype == np.bool_:
            raise self.error("CumSum of bool tensors is not supported (ONNX takes numbers)")
        axis %= rank
        cond = {(0, 0): "<=", (1, 0): "<", (0, 1): ">=", (1, 1): ">"}[(int(at.get("exclusive", 0)),
                                                                          int(at.get("reverse", 0)))]
        loops = [(f"a{k}", n) for k, n in enumerate(x.shape)] + [("s", x.shape[axis])]
        read = ", ".join("_i_s" if k == axis else f"_i_a{k}" for k in range(rank))
        out = self.new("cumsum", x.shape, x.dtype)
        self._lines(ops.accumulate(out.ident, x.shape, x.dtype, loops, [(self.data(x), read)],
                                   ", ".join(f"_i_a{k}" for k in range(rank)), f"(in0 if _i_s {cond} _i_a{axis} else 0)"))
        self.contractions += 1
        return [out]

    def op_Tile(self, node, inputs, at):
        """``np.tile`` with the repeats known at import time: a map over the input and the repeats writing
        each copy (affine subscripts on both sides)."""
        x = inputs[0]
        reps = [int(r) for r in self.const(node.input[1], "repeats").reshape(-1)]
        if len(reps) != len(x.shape) or min(reps, default=1) < 1:
            raise self.error(f"repeats {reps} do not fit input of shape {x.shape}")
        shape = tuple(s * r for s, r in zip(x.shape, reps))
        if shape == tuple(x.shape):
            return [x]
        loops = [(f"a{k}", s) for k, s in enumerate(x.shape)] + [(f"r{k}", r) for k, r in enumerate(reps)]
        read = ", ".join(f"_i_a{k}" for k in range(len(x.shape)))
        write = ", ".join(f"_i_r{k} * {s} + _i_a{k}" for k, s in enumerate(x.shape))
        out = self.new("tile", shape, x.dtype)
        self._lines(ops.spread(out.ident, shape, x.dtype, self.data(x), loops, read, write))
        return [out]

    def op_AveragePool(self, node, inputs, at):
        """nn.AvgPool1d/2d/3d and nn.AdaptiveAvgPool with even windows: the window's sum over the number of
        elements it covers, padding included or not (``count_include_pad``), never the extra positions a
        ``ceil_mode`` window reaches past the padding. The counts are known at import time."""
        x = inputs[0]
        if not np.issubdtype(x.dtype, np.floating):
            raise self.error(f"AveragePool of {x.dtype} tensors is not supported")
        kernel, strides, dil, before, after, osz, given_after = self._pool_window(node, at, x)
        counts = ops.window_counts(x.shape[2:], before, given_after, kernel, strides, dil, osz,
                                   bool(at.get("count_include_pad", 0)))
        xp, _ = self._padded(x, before, after, "0.0")
        return [self._pool(x, xp, kernel, strides, dil, osz, "avgpool", lambda a, b: f"{a} + {b}", counts)]

    def op_Pad(self, node, inputs, at):
        """nn.ZeroPad, nn.ConstantPad, nn.ReplicationPad, nn.ReflectionPad and nn.CircularPad: constant,
        edge, reflect and wrap modes, with the pads (and axes) known at import time."""
        x = inputs[0]
        mode = _text(at, "mode", "constant")
        n = len(x.shape)
        if self.opset < 11:
            pads, value = list(at.get("pads", [])), at.get("value", 0.0)
        else:
            pads = [int(p) for p in self.const(node.input[1], "pads").reshape(-1)]
            value = self.const(node.input[2], "constant_value").reshape(-1)[0] if len(node.input) > 2 and \
                node.input[2] else 0
        axes = list(range(n))
        if len(node.input) > 3 and node.input[3]:
            axes = [int(a) % n for a in self.const(node.input[3], "axes").reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise self.error(f"Pad's pads {pads} do not fit axes {axes}")
        before, after = [0] * n, [0] * n
        for k, a in enumerate(axes):
            before[a], after[a] = pads[k], pads[len(axes) + k]
        if not any(before) and not any(after):
            return [x]
        lead = min(a for a in range(n) if before[a] or after[a])
        if mode == "constant":
            out = self.b.fresh("pad")
            self._lines(ops.pad(out, self.data(x), x.shape, lead, before[lead:], after[lead:],
                                repr(float(value)) if np.issubdtype(x.dtype, np.floating) else str(int(value)),
                                x.dtype))
        elif mode in ("edge", "reflect", "wrap"):
            why = ops.mirror_pad_refusal(x.shape, lead, before[lead:], after[lead:], mode)
            if why:
                raise self.error(f"Pad in mode '{mode}' with pads {pads} for input {x.shape} is not supported: {why}")
            out = self.b.fresh("pad")
            self._lines(ops.pad(out, self.data(x), x.shape, lead, before[lead:], after[lead:], None, x.dtype, mode))
        else:
            raise self.error(f"Pad mode '{mode}' is not supported (constant, edge, reflect and wrap are)")
        shape = ops.padded_shape(x.shape, lead, before[lead:], after[lead:])
        return [Tensor(out, shape, x.dtype)]

    def op_Resize(self, node, inputs, at):
        """nn.Upsample by integer factors: nearest neighbour (each input element copied to its block of the
        output) and (bi/tri)linear without ``align_corners`` (:meth:`_linear_resize`). Other modes and
        factors are refused in words."""
        x = inputs[0]
        mode = _text(at, "mode", "nearest")
        ctm = _text(at, "coordinate_transformation_mode", "half_pixel")
        nearest = _text(at, "nearest_mode", "round_prefer_floor")
        if len(node.input) > 3 and node.input[3]:
            sizes = [int(v) for v in self.const(node.input[3], "sizes").reshape(-1)]
            factors = [o / i for o, i in zip(sizes, x.shape)]
        else:
            factors = [float(v) for v in self.const(node.input[2], "scales").reshape(-1)]
        if at.get("axes") is not None or len(factors) != len(x.shape):
            raise self.error(f"Resize with axes or scales {factors} for input {x.shape} is not supported")
        whole = all(f >= 1 and f == int(f) for f in factors)
        same = all(f == 1 for f in factors)
        nearest_ok = mode == "nearest" and (ctm == "asymmetric" and nearest == "floor" or same)
        linear_ok = mode == "linear" and np.issubdtype(x.dtype, np.floating) and (
            ctm in ("half_pixel", "pytorch_half_pixel", "asymmetric") or same)
        if not whole or not (nearest_ok or linear_ok):
            raise self.error(f"Resize mode '{mode}' ({ctm}, {nearest}) by {factors} is not supported: only by "
                             "integer factors, nearest neighbour (nn.Upsample(scale_factor=k, mode='nearest')) or "
                             "linear without align_corners (nn.Upsample(scale_factor=k, mode='bilinear'))")
        f = [int(v) for v in factors]
        if mode == "linear" and not same:
            return [self._linear_resize(x, f, ctm)]
        shape = tuple(s * k for s, k in zip(x.shape, f))
        out = self.new("resize", shape, x.dtype)
        self._lines(ops.nearest_upsample(out.ident, self.data(x), x.shape, f, x.dtype))
        return [out]

    def _linear_resize(self, x, f, ctm) -> Tensor:
        """Linear interpolation by integer factors ``f`` (:func:`.numpy_ops.linear_upsample`): the weights of an
        output depend on its phase only; the input is padded by its edge values, which is PyTorch's and ONNX
        Runtime's clamping of the source position."""
        n = len(x.shape)
        scaled = [d for d in range(n) if f[d] > 1]
        lead = scaled[0]
        before = [1 if d in scaled else 0 for d in range(lead, n)]
        xp = self.b.fresh("edge")
        self._lines(ops.pad(xp, self.data(x), x.shape, lead, before, before, None, x.dtype, "edge"))
        weights = {d: self.data(Const(ops.linear_weights(f[d], ctm == "asymmetric").astype(x.dtype),
                                      self.b.fresh(f"resize_w{d}"))) for d in scaled}
        shape = tuple(s * k for s, k in zip(x.shape, f))
        out = self.new("resize", shape, x.dtype)
        self._lines(ops.linear_upsample(out.ident, xp, x.shape, f, weights, x.dtype))
        return out

    def op_DepthToSpace(self, node, inputs, at):
        """nn.PixelShuffle (mode CRD) and TensorFlow's depth_to_space (DCR): channel blocks moved into
        ``blocksize`` x ``blocksize`` spatial blocks."""
        x = inputs[0]
        b = int(at["blocksize"])
        mode = _text(at, "mode", "DCR")
        if len(x.shape) != 4 or x.shape[1] % (b * b) or mode not in ("DCR", "CRD"):
            raise self.error(f"DepthToSpace of input {x.shape} with blocksize {b} and mode '{mode}' is not supported")
        n, c, h, w = x.shape[0], x.shape[1] // (b * b), x.shape[2], x.shape[3]
        shape = (n, c, h * b, w * b)
        out = self.new("d2s", shape, x.dtype)
        channel = f"_i_c * {b * b} + _i_i * {b} + _i_j" if mode == "CRD" else f"_i_i * {b * c} + _i_j * {c} + _i_c"
        loops = [("n", n), ("c", c), ("h", h), ("w", w), ("i", b), ("j", b)]
        self._lines(ops.spread(out.ident, shape, x.dtype, self.data(x), loops, f"_i_n, {channel}, _i_h, _i_w",
                               f"_i_n, _i_c, _i_h * {b} + _i_i, _i_w * {b} + _i_j"))
        return [out]

    def op_BatchNormalization(self, node, inputs, at):
        x, scale, bias, mean, var = inputs[:5]
        if at.get("training_mode", 0) or (len(node.output) > 1 and any(node.output[1:])):
            raise self.error("BatchNormalization in training mode (batch statistics, running-stat outputs) is not "
                             "supported; export the module in eval() mode")
        if len(x.shape) < 2:
            raise self.error(f"BatchNormalization input of shape {x.shape} has no channel axis")
        c = x.shape[1]
        for name, v in zip(node.input[1:5], (scale, bias, mean, var)):
            if v.shape != (c, ):
                raise self.error(f"BatchNormalization parameter '{name}' of shape {v.shape} is not per channel ({c})")
        eps = float(at.get("epsilon", 1e-5))
        out = self.new("bn", x.shape, x.dtype)
        operands = [(self.data(x), x.shape)] + [(self.data(v), (c, ), [1]) for v in (scale, bias, mean, var)]
        self._lines(ops.elementwise(out.ident, x.shape, x.dtype, operands,
                                    f"(in0 - in3) * (in1 / sqrt(in4 + {eps!r})) + in2"))
        return [out]

    def op_GlobalAveragePool(self, node, inputs, at):
        x = inputs[0]
        axes = list(range(2, len(x.shape)))
        shape = ops.keep_shape(x.shape, axes)
        out = self.new("gap", shape, x.dtype)
        self._lines(ops.reduce(self.b.fresh, out.ident, self.data(x), x.shape, axes, True, "mean", x.dtype))
        return [out]


def _load(model_or_path):
    import onnx
    if isinstance(model_or_path, (str, os.PathLike)):
        return onnx.load(os.fspath(model_or_path))
    if isinstance(model_or_path, bytes):
        return onnx.load_from_string(model_or_path)
    if hasattr(model_or_path, "model_proto"):  # torch.onnx.ONNXProgram
        return model_or_path.model_proto
    return model_or_path


def from_onnx(model_or_path, name: Optional[str] = None) -> dace.SDFG:
    """Translates an ONNX model (``ModelProto``, file path, serialized bytes or ``torch.onnx.ONNXProgram``)
    with static shapes into an SDFG whose arguments are the graph inputs and the initializers that feed
    computation (bound to their values with :func:`dace_partition.runtime.launch.bind`, so callers pass only the
    graph inputs). A graph input or weight whose ONNX name is not a Python identifier (``0``,
    ``onnx::MatMul_7``) becomes an argument with a readable identifier (``t_0``, ``onnx__MatMul_7``);
    :func:`~dace_partition.run` and compiled programs accept the ONNX name too, as onnxruntime does.
    Raises :class:`~dace_partition.errors.FrontendError` for unsupported operators and dynamic shapes."""
    model = _load(model_or_path)
    name = name or model.graph.name or "onnx_model"
    imp = _Importer(model, name)
    imp.run()
    sdfg = imp.b.to_sdfg()
    if imp.float_class:
        for where in ("frame", "cuda"):
            sdfg.append_global_code(ops.FLOAT_CLASS_HELPERS, where)
    # graph inputs and weights whose names are not identifiers ('0', 'onnx::MatMul_7') keep their ONNX names
    # for callers: dp.run and compiled programs accept either
    inits = {t.name for t in model.graph.initializer}
    named = {**imp.inputs, **{k: v for k, v in imp.materialized.items() if k in inits}}
    notes(sdfg).aliases = {k: v for k, v in named.items() if k != v}
    if ops.nest_contractions(sdfg) != imp.contractions:
        raise FrontendError(f"internal error: not every einsum of '{name}' could be nested")
    sdfg.validate()
    return sdfg
