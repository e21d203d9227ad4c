"""DaCe's own test programs through dace-partition: every ``@dace.program`` of DaCe 1.0.2's ``tests`` folder
(its top level, ``numpy``, ``python_frontend``, ``transformations``, ``codegen`` and ``sdfg``) whose arguments
are all typed, DaCe's PolyBench (``tests/polybench``) and the ``@dace.program`` samples of its ``samples`` folder
(``simple``, ``explicit``, ``optimization``), lowered, run on P ranks and compared with DaCe.

    python benchmarks/dace_tests.py [--tests DIR] [--ranks 3] [--schedule split|auto] [--only FILE:NAME,...]
                                    [--folders numpy,tests,...] [--files numpy.slice_test,...] [--timeout 300]

The programs are DaCe's, written to test its frontend, not for us: slices and views, negative indices,
indirection, ufuncs with ``out=`` and ``where=``, augmented assignments, nested calls on sub-arrays,
conditionals and ``while`` loops, returns of several values; the other folders add programs in DaCe's explicit
style (``dace.map`` with tasklets and ``<<``/``>>`` memlets, write-conflict resolutions, nested programs with
symbols), written to test DaCe's transformations and code generator. DaCe's PolyBench kernels are written in
that style too (not NPBench's NumPy versions); they run at their ``mini`` size with inputs from their own
``init_array`` (their harness imports ``absl``: a stand-in with its flags is used when it is not
installed). They are not vendored: ``--tests DIR`` is DaCe's ``tests`` folder (``git archive v1.0.2 tests``
of a DaCe clone; ``tests`` in ``--folders`` and in the keys is its top level; the samples are read from
``DIR/../samples``, skipped when absent), else
``~/.cache/dace_partition/dace_tests``, cloned at tag v1.0.2 when missing.

Only module-level programs are taken, each in its own subprocess (a crash or hang is recorded, not fatal).
Inputs are made from the annotations: symbols get 12, 10, 8, 14, ... in order of appearance (then the
symbols only the body uses, such as a tile size, get 2); module-level arrays the program reads are passed as
DaCe's own call passes them, and bound to the lowered program (``dp.bind``, as ``lower(program)`` does); floating
arrays uniform in [0.5, 1.5); integer arrays in [0, half the smallest extent) so that they index in bounds,
also with an offset (``A[x[i] + 5]``); scalars
0.75 or 3. The reference is DaCe's own program, unlowered, in one process: the question is whether the
lowering keeps what DaCe computes, not whether DaCe agrees with NumPy. Every returned value and every
argument array after the call is compared (exact for integers and booleans; rtol 1e-10 / 1e-5 for
64- / 32-bit floats; NaNs where DaCe has them).

``--schedule split`` (default): every map whose first extent is at least 2P or symbolic split over P ranks
along it (``fresh_programs._split``), whatever the cost model would choose; ``--schedule auto``:
``lower(sdfg, ranks=P)``.

Outcomes: correct / wrong / refused (a ScheduleError, UnsupportedPattern or FrontendError before any rank
ran) / error (another exception, a failed rank included) / crash / hang / dace_fails (DaCe cannot build or
run the program in one process with these inputs: not ours) / not_compared (a result that is memory
nobody wrote: ``return np.empty_like(A)``, a ufunc with ``where=`` and no ``out=``). A result that differs
from DaCe's is compared again on the elements DaCe's own result determines: those that stay the same when
its transients start as 0 and as 1 (not memory nothing wrote) and when its inputs move by one unit in the
last place (not rounding amplified); where every difference lies outside them, the run is correct with an
``undetermined`` note. Writes ``benchmarks/results/dace_tests.json``, merged by (schedule, P, file:name).
"""
import argparse
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fresh_programs import _copy, _split  # noqa: E402 - the sibling script's helpers
OUT = os.path.join(HERE, "results", "dace_tests.json")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "dace_partition", "dace_tests")
FOLDERS = ("numpy", "python_frontend", "tests", "transformations", "codegen", "sdfg", "polybench", "samples/simple",
           "samples/explicit", "samples/optimization")
SIZES = (12, 10, 8, 14, 6, 16, 9, 11)


def _unwritten(prog):
    """Why the program's result is memory nobody wrote (DaCe's tests check only its shape or the written
    part), else None: such results are not compared."""
    src = inspect.getsource(prog.f)
    if "return np.empty_like(" in src:
        return "returns np.empty_like's unwritten memory"
    if re.search(r"where=(?!True)", src) and "out=" not in src:
        return "a ufunc with where= and no out= leaves the masked elements unwritten"
    if ("define_local" in src and "dace_max(" in src) or \
            any("= dace.reduce(" in line and "identity" not in line for line in src.splitlines()):
        return ("a dace.reduce without an identity into a new array: the result starts from memory nobody "
                "wrote, in DaCe's own run too")
    if "np.empty_like(" in src and "B[a] = A[a]" in src:
        return "np.empty_like written at indices from data: random indices leave elements unwritten"
    return None


def _tests_dir(path):
    """DaCe 1.0.2's tests folder: ``path``, else the cache, cloned when missing."""
    if path:
        return path
    if not os.path.isdir(os.path.join(CACHE, "tests", "numpy")):
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "v1.0.2", "https://github.com/spcl/dace",
                        CACHE], check=True)
    return os.path.join(CACHE, "tests")


def _folder(tests, folder):
    """The folder's path: ``tests`` is the top level; ``samples/...`` is beside it in DaCe's repository."""
    if folder.startswith("samples/"):
        return os.path.join(os.path.dirname(os.path.abspath(tests)), folder)
    return tests if folder == "tests" else os.path.join(tests, folder)


def _absl_stand_in():
    """DaCe's ``polybench.py`` defines its command-line flags with ``absl`` when imported; the kernels need none
    of it. Without ``absl-py`` installed, a module that accepts those definitions stands in."""
    if "absl" in sys.modules or importlib.util.find_spec("absl") is not None:
        return
    import types
    root, app, flags = (types.ModuleType(n) for n in ("absl", "absl.app", "absl.flags"))
    flags.FLAGS = types.SimpleNamespace()
    for kind in ("bool", "enum", "integer", "string", "float"):
        setattr(flags, f"DEFINE_{kind}", lambda name, default, *a, **k: setattr(flags.FLAGS, name, default))
    app.run = lambda main, *a, **k: main([])
    root.app, root.flags = app, flags
    sys.modules.update({"absl": root, "absl.app": app, "absl.flags": flags})


def _module(tests, key):
    folder, stem = key.split(".", 1)
    d = _folder(tests, folder)
    if folder == "polybench":
        _absl_stand_in()
    if d not in sys.path:
        sys.path.insert(0, d)  # their `from common import ...`
    spec = importlib.util.spec_from_file_location(f"dace_tests_{folder}_{stem}".replace("-", "_").replace("/", "_"),
                                                  os.path.join(d, stem + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _is_polybench(mod):
    """A DaCe PolyBench module: its sizes, argument shapes and ``init_array`` make the inputs."""
    return all(hasattr(mod, a) for a in ("sizes", "args", "init_array"))


def _typed_programs(mod):
    """The module's own ``@dace.program``s whose every argument is annotated with a DaCe type (a pointer
    is not: no array can be made for it); in a PolyBench module, its kernel."""
    import dace
    from dace.frontend.python.parser import DaceProgram
    found = []
    for name, v in vars(mod).items():
        if not isinstance(v, DaceProgram) or getattr(v.f, "__module__", None) != mod.__name__:
            continue
        if _is_polybench(mod):
            found.append(name)
            continue
        params = inspect.signature(v.f).parameters.values()
        if params and all(isinstance(p.annotation, (dace.data.Data, dace.typeclass)) and
                          not isinstance(p.annotation, dace.dtypes.pointer) for p in params):
            found.append(name)
    return found


def _inputs(prog, rng):
    """Arguments from the annotations, and the symbols' values."""
    import dace
    params = inspect.signature(prog.f).parameters
    symbols = {}
    for p in params.values():
        desc = p.annotation
        for s in sorted(getattr(desc, "free_symbols", ()), key=str):
            symbols.setdefault(str(s), SIZES[len(symbols) % len(SIZES)])
    shapes = {}
    for k, p in params.items():
        desc = p.annotation
        if isinstance(desc, dace.data.Array):
            shapes[k] = tuple(int(dace.symbolic.evaluate(s, symbols)) if dace.symbolic.issymbolic(s) else int(s)
                              for s in desc.shape)
    smallest = max(1, min((min(s) for s in shapes.values() if s), default=4))
    args = {}
    for k, p in params.items():
        desc = p.annotation
        dtype = (desc.dtype if isinstance(desc, dace.data.Data) else desc).as_numpy_dtype()
        shape = shapes.get(k)
        if shape is None:  # a scalar
            args[k] = dtype.type(3 if np.issubdtype(dtype, np.integer) else
                                 True if dtype == np.bool_ else 0.75)
        elif dtype == np.bool_:
            args[k] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            args[k] = rng.integers(0, max(1, smallest // 2), size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.complexfloating):
            args[k] = (rng.random(shape) + 0.5 + 1j * (rng.random(shape) - 0.5)).astype(dtype)
        else:
            args[k] = (rng.random(shape) + 0.5).astype(dtype)
    return args, symbols


def _polybench_inputs(mod, prog):
    """A PolyBench kernel's arguments at the ``mini`` size, made by its own ``init_array``."""
    import dace
    size = {str(k): v for k, v in mod.sizes[0].items()}
    arrays = []
    for shape, dtype in mod.args:
        shape = [size[str(d)] if dace.symbolic.issymbolic(d) else int(d) for d in shape]
        arrays.append(np.zeros(shape, dtype=dtype.as_numpy_dtype()))
    mod.init_array(*arrays, **{k.lower(): v for k, v in size.items()})
    args = dict(zip(prog.argnames, arrays))
    for i, name in enumerate(prog.argnames[len(arrays):], len(arrays)):  # a scalar named as a size
        dtype = prog.dec_args[i] if i < len(prog.dec_args or ()) else dace.int64
        args[name] = dtype.as_numpy_dtype().type(size[name])
    return args, size


def _dace_run(sdfg, ins, symbols, **more):
    """DaCe's own call of ``sdfg`` on ``ins`` (changed in place), given the symbols it takes: its returned
    values as a list."""
    return _values(sdfg(**ins, **more, **{s: v for s, v in symbols.items() if s in sdfg.free_symbols}))


def _closure(prog, sdfg, symbols):
    """What DaCe's own call of ``prog`` adds to its arguments: the module-level arrays and callbacks it
    reads (``prog.__sdfg_closure__()``, after ``to_sdfg``); and the symbols no annotation gives (a tile
    size ``TH`` used only inside) get 2, which divides the sizes as a tile size must, added to ``symbols``."""
    closure = {k: v for k, v in prog.__sdfg_closure__().items() if k in sdfg.arglist()}
    for s in sorted(map(str, sdfg.free_symbols)):
        if s not in symbols and s not in sdfg.arrays and s not in closure:  # a callback is a symbol too
            symbols[s] = 2
    return closure


def _runs_with_filled_transients(prog, tag, args, symbols):
    """DaCe's own program run twice with every top-level transient array made an argument, filled with 0 and
    with 1: two (returned values, arguments after the call) pairs. Where they differ, the result is memory
    nothing wrote (``tmp[i - 5]`` read where only ``tmp[5:10]`` is written), which ours need not match."""
    import dace
    runs = []
    for fill in (0, 1):
        sdfg = prog.to_sdfg()
        sdfg.name = f"{tag}_fill{fill}"
        filled = {}
        for name, desc in sdfg.arrays.items():
            if desc.transient and type(desc) is dace.data.Array:
                desc.transient = False
                shape = [int(dace.symbolic.evaluate(d, symbols)) for d in desc.shape]
                filled[name] = np.full(shape, fill, dtype=desc.dtype.as_numpy_dtype())
        ins = _copy(args)
        runs.append((_dace_run(sdfg, ins, symbols, **filled, **_closure(prog, sdfg, symbols)), ins))
    return runs


def _nudged(args):
    """The arguments with every floating-point value moved by one unit in the last place."""
    return {k: np.nextafter(v, np.inf).astype(v.dtype) if isinstance(v, (np.ndarray, np.floating)) and
            np.asarray(v).dtype.kind == "f" else v for k, v in _copy(args).items()}


def _same_where_determined(got, ref, a, b, nudged):
    """``_same`` on the elements that DaCe's result determines: its two filled runs ``a`` and ``b`` agree
    there (not memory nothing wrote) and its run on inputs one unit in the last place away, ``nudged``,
    agrees with ``ref`` (not rounding amplified, as in a Gram-Schmidt of a matrix of lower rank); None
    where every element is determined (nothing to leave out)."""
    a, b, ref, nudged = np.asarray(a), np.asarray(b), np.asarray(ref), np.asarray(nudged)
    if ref.dtype.names or any(x.shape != ref.shape for x in (a, b, nudged)):
        return None
    keep = (a == b) | (np.isnan(a) & np.isnan(b)) if ref.dtype.kind in "fc" else a == b
    if ref.dtype.kind in "fc":
        keep &= np.isclose(nudged, ref, rtol=_rtol(ref.dtype), atol=_rtol(ref.dtype), equal_nan=True)
    if keep.all():
        return None
    got = np.asarray(got)
    got = got.reshape(ref.shape) if got.shape != ref.shape and got.size == ref.size else got
    return got.shape == ref.shape and _same(got[keep], ref[keep])


def _rtol(dtype):
    """The comparison's tolerance (relative and absolute) for 32- and 64-bit floats."""
    return 1e-5 if dtype in (np.float32, np.complex64) else 1e-10


def _same(got, ref):
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape and got.size == ref.size:
        got = got.reshape(ref.shape)
    if got.shape != ref.shape:
        return False
    if ref.dtype.names:  # a struct: field by field
        return got.dtype == ref.dtype and all(_same(got[f], ref[f]) for f in ref.dtype.names)
    if ref.dtype.kind in "biu":
        return np.array_equal(got, ref)
    return np.allclose(got, ref, rtol=_rtol(ref.dtype), atol=_rtol(ref.dtype), equal_nan=True)


def _values(ret):
    return list(ret) if isinstance(ret, tuple) else [] if ret is None else [ret]


def one(tests, case, P, schedule):
    """One program: DaCe's reference in this process, then the lowered program on ``P`` ranks."""
    import dace_partition as dp
    from dace_partition.errors import FrontendError, ScheduleError, UnsupportedPattern
    key, name = case.split(":")
    mod = _module(tests, key)
    prog = getattr(mod, name)
    unwritten = _unwritten(prog)
    if unwritten:
        return {"outcome": "not_compared", "why": unwritten}
    args, symbols = (_polybench_inputs(mod, prog) if _is_polybench(mod) else
                     _inputs(prog, np.random.default_rng(0)))
    tag = f"dt_{key.split('.')[1]}_{name}".replace("-", "_")[:60]
    try:
        ref_sdfg = prog.to_sdfg()
        ref_sdfg.name = tag + "_ref"
        closure = _closure(prog, ref_sdfg, symbols)
        ref_in = _copy(args)
        ref = _dace_run(ref_sdfg, ref_in, symbols, **closure)
        ref = [np.array(r, copy=True) for r in ref]
        print("PHASE reference done", flush=True)
    except Exception as e:  # noqa: BLE001 - DaCe's own build or run: not ours
        return {"outcome": "dace_fails", "why": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"}
    try:
        sdfg = prog.to_sdfg()
        sdfg.name = f"{tag}_{schedule}_{P}"
        if schedule == "split":
            sched = _split(sdfg, P)
            dp.lower(sdfg, sched)
            split = len(sched)
        else:
            dp.lower(sdfg, ranks=P)
            split = None
        dp.bind(sdfg, **{k: v for k, v in closure.items() if isinstance(v, np.ndarray)})  # as lower(prog) does
        got_in = _copy(args)
        got = dp.run(sdfg, P, **got_in, **{s: v for s, v in symbols.items() if s in sdfg.free_symbols})
    except (ScheduleError, UnsupportedPattern, FrontendError) as e:
        return {"outcome": "refused", "why": str(e)[:300]}
    except Exception as e:  # noqa: BLE001 - recorded
        return {"outcome": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
    if isinstance(got, dict) and not ref:  # no return value: the written arguments
        got_in.update(got)
        got = None
    got = _values(got)
    bad = [f"return value {i}" for i, (g, r) in enumerate(zip(got, ref)) if not _same(g, r)]
    if len(got) != len(ref):
        bad.append(f"{len(got)} values returned where DaCe returns {len(ref)}")
    bad += [k for k, v in ref_in.items() if isinstance(v, np.ndarray) and not _same(got_in[k], v)]
    out = {"split_maps": split, "compared": len(ref) + sum(isinstance(v, np.ndarray) for v in ref_in.values())}
    if bad and len(got) == len(ref):  # only the elements DaCe's own result determines count
        (r0, in0), (r1, in1) = _runs_with_filled_transients(prog, tag, args, symbols)
        nudged_sdfg = prog.to_sdfg()
        nudged_sdfg.name = tag + "_nudged"
        in2 = _nudged(args)
        r2 = _dace_run(nudged_sdfg, in2, symbols, **_closure(prog, nudged_sdfg, symbols))
        pairs = {f"return value {i}": (g, r, r0[i], r1[i], r2[i]) for i, (g, r) in enumerate(zip(got, ref))}
        pairs.update({k: (got_in[k], v, in0[k], in1[k], in2[k]) for k, v in ref_in.items()
                      if isinstance(v, np.ndarray)})
        verdicts = {k: _same_where_determined(*pairs[k]) for k in bad}
        if all(v is not None for v in verdicts.values()):
            bad = [k for k, v in verdicts.items() if not v]
            out["undetermined"] = ("part of " + ", ".join(verdicts) + " is memory nothing wrote or moves when "
                                   "DaCe's inputs move by one unit in the last place: compared elsewhere")
    out["outcome"] = "wrong" if bad else "correct"
    if bad:
        out["why"] = "differs from DaCe: " + ", ".join(bad)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", default=os.environ.get("DACE_TESTS_DIR"))
    ap.add_argument("--ranks", default="3")
    ap.add_argument("--schedule", choices=["split", "auto"], default="split")
    ap.add_argument("--only", default="")
    ap.add_argument("--folders", default=",".join(FOLDERS))
    ap.add_argument("--files", default="")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tests = _tests_dir(opts.tests)
    if opts.one:
        res = one(tests, opts.one, int(opts.ranks), opts.schedule)
        print("RESULT " + json.dumps(res), flush=True)
        return
    from onnx_models import save, tally
    only = set(filter(None, opts.only.split(",")))
    files = set(filter(None, opts.files.split(",")))
    cases = []
    for folder in filter(None, opts.folders.split(",")):
        if not os.path.isdir(_folder(tests, folder)):
            print(f"skip {folder}: not in {tests}")
            continue
        for fn in sorted(os.listdir(_folder(tests, folder))):
            key = f"{folder}.{fn[:-3]}"
            if not fn.endswith(".py") or fn in ("common.py", "conftest.py", "polybench.py") or \
                    (files and key not in files):
                continue
            try:
                names = _typed_programs(_module(tests, key))
            except BaseException as e:  # noqa: BLE001 - a test file this DaCe cannot import
                print(f"skip {key}: {type(e).__name__}: {str(e)[:100]}")
                continue
            cases += [f"{key}:{n}" for n in names if not only or f"{key}:{n}" in only]
    results = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            results = json.load(f)
    for P in [int(p) for p in opts.ranks.split(",")]:
        for case in cases:
            t0 = time.time()
            cmd = [sys.executable, os.path.abspath(__file__), "--tests", tests, "--ranks", str(P), "--schedule",
                   opts.schedule, "--one", case]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                if line:
                    res = json.loads(line[-1][len("RESULT "):])
                else:
                    tail = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                    res = ({"outcome": "crash", "why": tail[:300]} if "PHASE reference done" in p.stdout else
                           {"outcome": "dace_fails", "why": f"DaCe's own run in one process ended: {tail[:250]}"})
            except subprocess.TimeoutExpired as e:
                done = "PHASE reference done" in (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or "")
                res = {"outcome": "hang" if done else "dace_fails",
                       "why": f"no result in {opts.timeout:.0f} s" + ("" if done else " (DaCe's own run in one process)")}
            res["seconds"] = round(time.time() - t0, 1)
            results[f"{opts.schedule}/P{P}/{case}"] = res
            print(f"{opts.schedule:5s} P={P} {case:60s} {res['outcome']}"
                  + (f"  ({res['why']})" if res.get("why") else ""), flush=True)
            save(results, OUT)
    tally(results)


if __name__ == "__main__":
    main()
