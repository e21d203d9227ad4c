"""Programs we did not write for the suites: lowered, run on P ranks and compared with NumPy / PyTorch.

    python benchmarks/fresh_programs.py [--ranks 2,3] [--device cpu|gpu-emulated] [--schedule auto|split]
                                        [--set numpy,science,bodies,apps,idioms,torch,layers] [--only NAME,...]

The programs (``_fresh_programs.py``) are in the styles users write and in none of our test suites nor in
NPBench: statistics, distances, iterations with ``for`` and ``while``, integer arithmetic, transposes,
products, symbolic sizes, and PyTorch modules (LayerNorm + GELU, Conv2d + BatchNorm, MultiheadAttention, a
TransformerEncoderLayer, Embedding). ``--set layers``: 73 ``torch.nn`` layers past the basics
(activations, GroupNorm, pooling, padding, upsampling, recurrent layers). ``--set science``: scientific
NumPy code (PDE time steps, conjugate gradients, N-body, a tridiagonal solve per row, counting, a dynamic
programming table). ``--set bodies``: maps whose bodies hold loops, branches and ``while`` loops.
``--set apps``: kernels from finance, imaging, signal processing, graphs, physics and learning.
``--set idioms``: everyday NumPy idioms (a row a loop picks, concatenation, ``out=``, 3-d broadcasts, a
slice of length one, which DaCe gets wrong and we refuse). The
NumPy test suite checks what we thought of; this checks what a new user might write first.

``--schedule auto``: ``lower(sdfg, ranks=P)`` (the cost model may keep a small program on rank 0).
``--schedule split``: every map whose first extent is at least 2P (or symbolic) split over P ranks along
it, and for the modules every map over the batch: the distributed path, whatever the cost model would
choose. ``--device gpu-emulated`` lowers with ``device="gpu"`` and runs the GPU data flow on the host
(``runtime/emulation.py``: device arrays and their host sides are separate, so a missing staging copy gives
a wrong result).

Outcomes: correct (every element; exact for integers, rtol 1e-10 / 1e-5 for float64 / float32, 1e-4
against PyTorch), wrong, refused (a ScheduleError, UnsupportedPattern or FrontendError before any rank
ran), error (any other exception, a failed rank included), dace_fails (DaCe's frontend cannot parse it; not ours). A
result whose dtype differs from NumPy's counts as correct where DaCe's own program has that dtype too
(``note`` says so). Writes benchmarks/results/fresh_programs.json, merged by (device, schedule, P, name).
"""
import argparse
import contextlib
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "results", "fresh_programs.json")


def _copy(d):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def _close(got, ref, rtol):
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return False
    if np.issubdtype(ref.dtype, np.integer):
        return np.array_equal(got, ref)
    return np.allclose(got, ref, rtol=rtol, atol=rtol)


def _split(sdfg, P, batch=None):
    import dace_partition as dp
    sched = {}
    for m in dp.maps(sdfg):
        if not m.shape:
            continue
        try:
            first = int(m.shape[0])
        except TypeError:
            first = None  # symbolic
        if (first == batch) if batch is not None else (first is None or first >= 2 * P):
            sched[m.name] = (P, ) + (1, ) * (len(m.params) - 1)
    return sched


def _lower(sdfg, P, opts, batch=None):
    import dace_partition as dp
    from dace_partition.runtime import emulation
    gpu = opts.device == "gpu-emulated"
    with emulation.host_kernels() if gpu else contextlib.nullcontext():
        if opts.schedule == "split":
            sched = _split(sdfg, P, batch)
            dp.lower(sdfg, sched, device="gpu" if gpu else "cpu")
            split = len(sched)
        else:
            dp.lower(sdfg, ranks=P, device="gpu" if gpu else "cpu")
            split = None
    if gpu:
        emulation.on_host(sdfg)
    return split


def _numpy_case(name, prog, inputs, P, opts, rng):
    import dace_partition as dp
    data = inputs(rng)
    ref_in = _copy(data)
    ref = prog.f(**ref_in)
    try:
        sdfg = prog.to_sdfg()
    except Exception as e:  # noqa: BLE001 - DaCe's frontend: not ours
        return {"outcome": "dace_fails", "why": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"}
    # DaCe's own results (one, or __return_0, __return_1, ...): their dtype and number of axes
    declared = {n: (d.dtype.as_numpy_dtype(), len(d.shape)) for n, d in sdfg.arrays.items() if n.startswith("__return")}
    sdfg.name = f"fresh_{name}_{opts.device.replace('-', '_')}_{opts.schedule}_{P}"
    split = _lower(sdfg, P, opts)
    got_in = _copy(data)
    got = dp.run(sdfg, P, **got_in)
    out = {"split_maps": split}
    if ref is None:  # the written arguments
        ok = bool(got) and all(_close(got[k], ref_in[k], 1e-10) for k in got)
        out["compared"] = sorted(got)
    else:
        if isinstance(ref, tuple):  # several results: each against DaCe's own __return_i
            pairs = [(r, g, *declared.get(f"__return_{i}", (None, None)))
                     for i, (r, g) in enumerate(zip(ref, got if isinstance(got, tuple) else (got, )))]
            ok = len(pairs) == len(ref)
        else:
            pairs = [(ref, got, *declared.get("__return", (None, None)))]
            ok = True
        notes = []
        for r, g, dtype, ndim in pairs:
            r, g = np.asarray(r), np.asarray(g)
            if g.shape != r.shape and g.size == r.size and g.ndim == ndim:
                notes.append(f"shape {g.shape} where NumPy gives {r.shape}, as DaCe's own program")
                r = r.reshape(g.shape)
            same = _close(g, r, 1e-5 if r.dtype == np.float32 else 1e-10)
            if same and g.dtype != r.dtype:
                same = g.dtype == dtype
                notes.append(f"dtype {g.dtype} where NumPy gives {r.dtype}; DaCe's own program: {dtype}")
            ok = ok and same
        if notes:
            out["note"] = "; ".join(dict.fromkeys(notes))
        out["compared"] = ["__return"]
    out["outcome"] = "correct" if ok else "wrong"
    return out


def _torch_case(name, module, example, P, opts):
    import inspect
    import torch
    import dace_partition as dp
    with torch.no_grad():
        ref = module(*example)
    ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()  # a recurrent layer: (output, state)
    sdfg = dp.from_torch(module, example)
    sdfg.name = f"fresh_{name}_{opts.device.replace('-', '_')}_{opts.schedule}_{P}"
    split = _lower(sdfg, P, opts, batch=example[0].shape[0])
    args = list(inspect.signature(module.forward).parameters)
    got = dp.run(sdfg, P, **dict(zip(args, example)))
    got = got[0] if isinstance(got, tuple) else got
    return {"split_maps": split, "outcome": "correct" if _close(got, ref, 1e-4) else "wrong"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,3")
    ap.add_argument("--device", choices=["cpu", "gpu-emulated"], default="cpu")
    ap.add_argument("--schedule", choices=["auto", "split"], default="auto")
    ap.add_argument("--set", default="numpy,torch")
    ap.add_argument("--only", default="")
    opts = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import _fresh_programs as fp
    from dace_partition.errors import FrontendError, ScheduleError, UnsupportedPattern
    only = set(filter(None, opts.only.split(",")))
    cases = []
    if "numpy" in opts.set:
        cases += [("numpy", n, c) for n, c in fp.numpy_programs().items()]
    if "science" in opts.set:
        cases += [("science", n, c) for n, c in fp.science_programs().items()]
    if "bodies" in opts.set:
        cases += [("bodies", n, c) for n, c in fp.body_programs().items()]
    if "apps" in opts.set:
        cases += [("apps", n, c) for n, c in fp.app_programs().items()]
    if "idioms" in opts.set:
        cases += [("idioms", n, c) for n, c in fp.idiom_programs().items()]
    if "torch" in opts.set:
        cases += [("torch", n, c) for n, c in fp.torch_modules().items()]
    if "layers" in opts.set:
        cases += [("layers", n, c) for n, c in fp.torch_layers().items()]
    results = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            results = json.load(f)
    for P in [int(p) for p in opts.ranks.split(",")]:
        for kind, name, case in cases:
            if only and name not in only:
                continue
            t0 = time.time()
            try:
                if kind in ("numpy", "science", "bodies", "apps", "idioms"):
                    res = _numpy_case(name, *case, P, opts, np.random.default_rng(0))
                else:
                    res = _torch_case(name, *case, P, opts)
            except (ScheduleError, UnsupportedPattern, FrontendError) as e:
                res = {"outcome": "refused", "why": str(e)[:300]}
            except Exception as e:  # noqa: BLE001 - recorded, the next program runs
                res = {"outcome": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
            res.update(set=kind, seconds=round(time.time() - t0, 1))
            results[f"{opts.device}/{opts.schedule}/P{P}/{name}"] = res
            print(f"{opts.device:13s} {opts.schedule:5s} P={P} {name:26s} {res['outcome']}"
                  + (f"  ({res.get('note') or res.get('why')})" if res.get("note") or res.get("why") else ""), flush=True)
            with open(OUT, "w") as f:
                json.dump(dict(sorted(results.items())), f, indent=1)
    runs = [v for k, v in results.items()]
    counts = {o: sum(v["outcome"] == o for v in runs) for o in ("correct", "wrong", "refused", "error", "dace_fails")}
    print("all recorded runs:", counts)


if __name__ == "__main__":
    main()
