"""ONNX models we did not write, from the ``onnx`` package itself: imported with ``from_onnx``, lowered for P
ranks, run under ``mpiexec`` and compared element by element.

    python benchmarks/onnx_models.py [--ranks 2] [--set backend,zoo,nodes] [--only NAME,...]

``--set backend``: every model under ``onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}``:
PyTorch's exports of its layers and operators (opsets 6 to 12, inputs named ``0``, ``1``, ...) and small
hand-built graphs, with their inputs and expected outputs stored beside them. Compared within rtol 1e-4,
atol 1e-5 (NaN where NaN is expected). Each runs with its graph inputs passed by their ONNX names.
``--set zoo``: AlexNet, GoogLeNet (Inception v1 and v2), ResNet-50, SqueezeNet, ShuffleNet, VGG-19,
ZFNet-512 and DenseNet-121 as ``onnx/backend/test/data/light`` holds them: the architectures at 224 x 224
with every weight a constant (``ConstantOfShape``). Constant weights make every output the same, which
would hide errors, so each weight becomes a seeded random tensor (He-scaled for filters and matrices,
uniform in [0.5, 1.5] for per-channel vectors) and the result is compared with onnxruntime's on the same
model, within rtol 1e-3 plus 1e-5 of the largest logit (ONNX's own runner uses rtol 1e-3 for these; float32
sums over up to 9216 products leave logits near zero with larger relative differences, in onnxruntime as
in DaCe). The final softmax is left out: random weights make it one-hot, where the logits show every
difference.

``--set nodes``: ONNX's node tests (``onnx.backend.test.case.node``, the operator specification's own
examples with their expected outputs) whose operators ``from_onnx`` has, each compiled and run in one
process (the importer's translation against the specification; ``--ranks`` does not apply), compared within
each case's tolerance or rtol 1e-5 / atol 1e-6, exactly for integers and booleans.

``lower(sdfg, ranks=P)`` chooses what to split. Outcomes: correct, wrong, refused (a FrontendError,
ScheduleError or UnsupportedPattern before any rank ran; the reason is recorded), error (anything else, a
failed rank included). Writes ``benchmarks/results/onnx_models.json``, merged by (P, set, name).
"""
import argparse
import glob
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "onnx_models.json")
BACKEND_SETS = ("pytorch-converted", "pytorch-operator", "simple")
ZOO = ("bvlc_alexnet", "squeezenet", "inception_v1", "resnet50", "shufflenet", "zfnet512", "inception_v2",
       "densenet121", "vgg19")


def _data_root():
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def backend_cases():
    """name -> (model path, {input: array}, [expected outputs])."""
    import onnx
    from onnx import numpy_helper
    cases = {}
    for folder in sorted(d for s in BACKEND_SETS for d in glob.glob(os.path.join(_data_root(), s, "*"))):
        model = onnx.load(os.path.join(folder, "model.onnx"))
        inits = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        data = os.path.join(folder, "test_data_set_0")
        load = lambda kind: [numpy_helper.to_array(onnx.load_tensor(f))  # noqa: E731
                             for f in sorted(glob.glob(os.path.join(data, f"{kind}_*.pb")))]
        cases[os.path.basename(folder)] = (model, dict(zip(names, load("input"))), load("output"))
    return cases


def with_random_weights(model, rng):
    """The model with each ``ConstantOfShape`` weight replaced by a random initializer, and random inputs for
    its graph inputs (the image, and the per-channel vectors some of these models take as inputs)."""
    import onnx
    from onnx import numpy_helper
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    keep, new = [], []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            new.append(numpy_helper.from_array(_random(rng, tuple(int(s) for s in inits[n.input[0]])), n.output[0]))
        else:
            keep.append(n)
    if keep and keep[-1].op_type == "Softmax" and [o.name for o in g.output] == list(keep[-1].output):
        g.output[0].name = keep.pop().input[0]  # the logits: random weights saturate the softmax to one-hot
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new)
    model.ir_version = max(model.ir_version, 4)  # initializers need not be listed as inputs from IR 4 on
    inputs = {}
    for vi in g.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        inputs[vi.name] = rng.standard_normal(shape).astype(np.float32) if len(shape) == 4 else _random(rng, shape)
    onnx.checker.check_model(model)
    return model, inputs


def _random(rng, shape):
    if len(shape) >= 2:  # a filter or a matrix: He-scaled, so activations keep their size through the layers
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return rng.uniform(0.5, 1.5, shape).astype(np.float32)


def zoo_case(name, rng):
    import onnx
    import onnxruntime as ort
    model, inputs = with_random_weights(onnx.load(os.path.join(_data_root(), "light", f"light_{name}.onnx")), rng)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3  # not its warning per legacy initializer listed as an input
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return model, inputs, sess.run(None, inputs)


def node_cases():
    """name -> (model, {input: array}, [expected outputs], rtol, atol) for ONNX's node tests whose operators
    the importer has (the others would only be refused by name)."""
    import re
    from onnx import TensorProto, numpy_helper
    from onnx.backend.test.case import node
    from dace_partition.frontend import onnx_import
    have = {m[3:] for m in dir(onnx_import._Importer) if m.startswith("op_")}
    arr = lambda v: numpy_helper.to_array(v) if isinstance(v, TensorProto) else np.asarray(v)  # noqa: E731
    cases = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = node.collect_testcases("")
    for c in found:
        if c.model is None or not all(n.op_type in have for n in c.model.graph.node):
            continue
        inits = {t.name for t in c.model.graph.initializer}
        names = [vi.name for vi in c.model.graph.input if vi.name not in inits]
        ins, outs = c.data_sets[0]
        cases[re.sub(r"^test_", "", c.name)] = (c.model, dict(zip(names, map(arr, ins))), [arr(o) for o in outs],
                                                max(c.rtol, 1e-5), max(c.atol, 1e-6))
    return cases


def run_node_case(name, model, inputs, expected, rtol, atol):
    """One process: the SDFG called as DaCe calls it (a scalar input as a one-element array)."""
    import dace_partition as dp
    from dace_partition.ir.record import notes
    from dace_partition.runtime.launch import _with_bound, bound_values
    sdfg = dp.from_onnx(model, name=f"onnx_node_{name}")
    renamed = notes(sdfg).aliases
    args = {renamed.get(k, k): np.array(np.reshape(v, np.shape(v) or (1, ))) for k, v in inputs.items()}
    got = sdfg(**_with_bound(bound_values(sdfg), args))
    ok, detail = _compare(got, expected, rtol, atol, exact_dtypes=True)
    return {"outcome": "correct" if ok else "wrong", "detail": detail}


def _compare(got, expected, rtol, atol, exact_dtypes=False, of_largest=False):
    got = got if isinstance(got, tuple) else (got, )
    if len(got) != len(expected):
        return False, f"{len(got)} outputs, expected {len(expected)}"
    worst = scale = 0.0
    for g, e in zip(got, expected):
        g = np.asarray(g)
        if g.size != e.size:
            return False, f"output of {g.size} elements, expected {e.size}"
        g = g.reshape(e.shape)
        if exact_dtypes and g.dtype != e.dtype:
            return False, f"dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind not in "fc":
            if not np.array_equal(g, e):
                return False, f"{int(np.sum(g != e))} of {e.size} elements differ"
            continue
        if of_largest and e.size:  # atol as a fraction of the largest magnitude
            atol = atol * float(np.nanmax(np.abs(e)))
        if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            return False, f"max |difference| {float(np.nanmax(np.abs(g - e))):.3g}"
        if e.size and np.issubdtype(e.dtype, np.floating):
            worst = max(worst, float(np.nanmax(np.abs(g - e), initial=0.0)))
            scale = max(scale, float(np.nanmax(np.abs(e), initial=0.0)))
    return True, f"max |difference| {worst:.3g}" + (f" (largest |value| {scale:.3g})" if of_largest else "")


def run_case(name, model, inputs, expected, P, rtol, atol, of_largest=False):
    import dace_partition as dp
    t0 = time.time()
    sdfg = dp.from_onnx(model, name=f"onnx_{name}_p{P}")
    dp.lower(sdfg, ranks=P)
    t1 = time.time()
    got = dp.run(sdfg, P, timeout=1800, **inputs)
    ok, detail = _compare(got, expected, rtol, atol, of_largest=of_largest)
    return {"outcome": "correct" if ok else "wrong", "detail": detail, "import_lower_s": round(t1 - t0, 1),
            "build_run_s": round(time.time() - t1, 1)}


def save(results, path):
    """The outcomes so far, by key, after every model (a long run stopped early keeps what it measured)."""
    with open(path, "w") as f:
        json.dump(dict(sorted(results.items())), f, indent=1)


def tally(results):
    """Prints how many runs of each group (the key up to its last ``/``) had each outcome."""
    counts = {}
    for key, v in results.items():
        group = key.rsplit("/", 1)[0]
        counts.setdefault(group, {}).setdefault(v["outcome"], 0)
        counts[group][v["outcome"]] += 1
    print("all recorded runs:", json.dumps(counts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2")
    ap.add_argument("--set", default="backend,zoo")
    ap.add_argument("--only", default="")
    opts = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from dace_partition.errors import FrontendError, ScheduleError, UnsupportedPattern
    only = set(filter(None, opts.only.split(",")))
    results = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            results = json.load(f)
    todo = []
    if "backend" in opts.set:
        todo += [("backend", n, lambda c=c: c, 1e-4, 1e-5) for n, c in backend_cases().items()]
    if "zoo" in opts.set:
        todo += [("zoo", n, lambda n=n: zoo_case(n, np.random.default_rng(0)), 1e-3, 1e-5) for n in ZOO]
    if "nodes" in opts.set:
        todo += [("nodes", n, lambda c=c: c[:3], c[3], c[4]) for n, c in node_cases().items()]
    for P in [int(p) for p in opts.ranks.split(",")]:
        for kind, name, case, rtol, atol in todo:
            if only and name not in only:
                continue
            t0 = time.time()
            try:
                model, inputs, expected = case()
                if kind == "nodes":
                    res = run_node_case(name, model, inputs, expected, rtol, atol)
                else:
                    res = run_case(name, model, inputs, expected, P, rtol, atol, of_largest=kind == "zoo")
            except (FrontendError, ScheduleError, UnsupportedPattern) as e:
                res = {"outcome": "refused", "why": str(e)[:300]}
            except Exception as e:  # noqa: BLE001 - recorded, the next model runs
                res = {"outcome": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
            res.update(set=kind, seconds=round(time.time() - t0, 1))
            ranks = 1 if kind == "nodes" else P
            results[f"P{ranks}/{kind}/{name}"] = res
            print(f"P={ranks} {kind:7s} {name:45s} {res['outcome']:8s} {res['seconds']:6.1f}s "
                  f"{res.get('detail') or res.get('why', '')}", flush=True)
            save(results, OUT)
    tally(results)


if __name__ == "__main__":
    sys.exit(main())
