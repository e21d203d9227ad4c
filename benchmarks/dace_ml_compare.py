"""DaCe 2's ONNX importer (``dace.ml.ONNXModel``) against ours (``dp.from_onnx``) on the graphs of
tests/mpi/test_onnx_ops.py: for each test, the ops it uses, the import time of each importer and whether its
compiled program matches onnxruntime; then whether an imported MLP lowers to 2 ranks and runs correctly.
Runs only on DaCe 2 (``.venv-dace2/bin/python benchmarks/dace_ml_compare.py``); docs/dace2.md has the table.
"""
import os
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import dace  # noqa: E402

if int(dace.__version__.split(".")[0]) < 2:
    sys.exit("dace.ml is DaCe 2's; run this in .venv-dace2")

import dace.ml  # noqa: E402
import onnxruntime as ort  # noqa: E402

import dace_partition as dp  # noqa: E402
import test_onnx_ops as T  # noqa: E402
from dace_partition.runtime.launch import _with_bound, bound_values  # noqa: E402

TESTS = ["test_elementwise_and_broadcasting", "test_where_cast_compare_identity_constant", "test_matmul_gemm_einsum",
         "test_softmax_layernorm_reductions", "test_shape_ops", "test_conv_pool_batchnorm_gather"]


def _reference(model, inputs, outputs):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(list(outputs), inputs)


def _same(res, ref, rtol, atol):
    res = res if isinstance(res, tuple) else (res, )
    if len(res) != len(ref):
        return False
    for r, e in zip(res, ref):
        r = np.asarray(r)
        if r.size != e.size or not np.allclose(r.reshape(e.shape), e, rtol=rtol, atol=atol):
            return False
    return True


def _ours(model, name, inputs, ref, rtol, atol):
    t0 = time.perf_counter()
    sdfg = dp.from_onnx(model, name=f"ours_{name}")
    t1 = time.perf_counter()
    args = _with_bound(bound_values(sdfg), inputs)
    res = sdfg(**{k: np.array(v) for k, v in args.items()})
    return t1 - t0, _same(res, ref, rtol, atol)


def _theirs(model, name, inputs, ref, rtol, atol):
    import onnx
    model = onnx.shape_inference.infer_shapes(model)  # dace.ml needs every value's shape
    t0 = time.perf_counter()
    m = dace.ml.ONNXModel(f"dml_{name}", model, onnx_simplify=False)  # onnxsim is not installed
    t1 = time.perf_counter()
    res = m(**{k: np.array(v) for k, v in inputs.items()})
    if isinstance(res, (list, tuple)):
        res = tuple(np.asarray(x) for x in res)
    return t1 - t0, _same(res, ref, rtol, atol)


ROWS = []


def _check(name, nodes, inputs, outputs, inits=None, opset=20, rtol=1e-5, atol=1e-6):
    model = T.make_model(nodes, inputs, outputs, inits, opset)
    ref = _reference(model, inputs, outputs)
    ops = sorted({n.op_type for n in nodes})
    row = {"graph": name, "ops": ops}
    for key, fn in (("ours", _ours), ("dace.ml", _theirs)):
        try:
            row[key] = fn(model, name, inputs, ref, rtol, atol)
        except Exception as e:  # noqa: BLE001 - the table says what failed
            row[key] = (None, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}")
    ROWS.append(row)


def lower_mlp():
    """An ONNX MLP (MatMul, Add, Relu, MatMul) from each importer, lowered to 2 ranks and run."""
    from onnx import TensorProto
    r = np.random.default_rng(3)
    x = r.standard_normal((64, 32)).astype(np.float32)
    w1 = r.standard_normal((32, 32)).astype(np.float32)
    b1 = r.standard_normal((32, )).astype(np.float32)
    w2 = r.standard_normal((32, 16)).astype(np.float32)
    nodes = [T.node("MatMul", ["x", "w1"], ["h"]), T.node("Add", ["h", "b1"], ["hb"]), T.node("Relu", ["hb"], ["a"]),
             T.node("MatMul", ["a", "w2"], ["y"])]
    inputs = {"x": x, "w1": w1, "b1": b1, "w2": w2}
    model = T.make_model(nodes, inputs, {"y": TensorProto.FLOAT})
    ref = np.maximum(x @ w1 + b1, 0) @ w2
    out = {}
    for key in ("ours", "dace.ml"):
        try:
            import onnx
            sdfg = (dp.from_onnx(model, name="mlp_ours") if key == "ours"
                    else dace.ml.ONNXModel("mlp_dml", onnx.shape_inference.infer_shapes(model), onnx_simplify=False).sdfg)
            dp.lower(sdfg, ranks=2)
            args = _with_bound(bound_values(sdfg), inputs) if key == "ours" else inputs
            y = dp.run(sdfg, 2, **args)
            y = y[0] if isinstance(y, tuple) else y
            out[key] = "correct" if np.allclose(np.asarray(y).reshape(ref.shape), ref, rtol=1e-4, atol=1e-4) else "wrong"
        except Exception as e:  # noqa: BLE001
            out[key] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return out


def main():
    T.check = _check
    for name in TESTS:
        try:
            getattr(T, name)(np.random.default_rng(7))
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    print("| graph | ops | ours: import s, matches ORT | dace.ml: import s, matches ORT |")
    print("|---|---|---|---|")
    for row in ROWS:
        cells = []
        for key in ("ours", "dace.ml"):
            t, ok = row[key]
            cells.append(f"{t:.2f} s, {'yes' if ok is True else 'no' if ok is False else ok}" if t is not None else ok)
        print(f"| {row['graph']} | {', '.join(row['ops'])} | {cells[0]} | {cells[1]} |")
    print("\nMLP lowered to 2 ranks (dp.lower(ranks=2), dp.run):", lower_mlp())


if __name__ == "__main__":
    main()
