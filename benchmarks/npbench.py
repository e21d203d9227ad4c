"""NPBench through dace-partition: every NPBench kernel with a DaCe implementation on 2 and 4 ranks.

    python benchmarks/npbench.py [--npbench DIR] [--kernels gemm,atax] [--ranks 2,4] [--timeout 300]
                                 [--skip-auto] [--preset S] [--md docs/npbench_table.md] [--table-only]
                                 [--device gpu [--emulated | --build-only]] [--symbolic]

NPBench (github.com/spcl/npbench) is not vendored: it is taken from ``--npbench DIR``, else ``$NPBENCH_DIR``,
else ``~/.cache/dace_partition/npbench``, which is cloned (``git clone --depth 1``) when missing.

Each kernel runs in its own subprocess (so a crash or hang is recorded, not fatal), in a scratch build
folder. It builds the ``<name>_dace.py`` program's SDFG at the preset's sizes (symbols specialized), runs
the ``<name>_numpy.py`` reference and DaCe in one process, then for each P: lowers the *natural* schedule
(every map of ``dp.maps`` whose first extent is an integer >= P, on grid (P, 1, ..., 1)) and, when the
package has ``auto_schedule``, ``dp.lower(sdfg, ranks=P)``; builds, runs on P ranks and compares every output
with NumPy (with DaCe's own result where DaCe differs from NumPy).

Outcomes: correct / refused (ScheduleError, UnsupportedPattern or FrontendError before any rank ran) /
wrong / crash / hang (timeout) / compile_error (C++ build failed) / nothing_to_schedule; a kernel that
DaCe itself cannot run in one process is ``dace_fails`` and excluded from the share.

Writes benchmarks/results/npbench.json (merged with an existing file: a kernel's entry is replaced) and
prints the table and a summary line.

``--device gpu`` lowers with ``device="gpu"``. Without a GPU, ``--emulated`` runs the GPU lowering's data
flow on the host (``dace_partition.runtime.emulation``: device arrays and their host sides are separate
host arrays, so a missing or misplaced staging copy gives a wrong result; its times mean nothing) and
``--build-only`` builds the CUDA program with nvcc and stops (outcome ``built``). Their results go to
``npbench_gpu_emulated.json`` and ``npbench_gpu_build.json``, on a GPU to ``npbench_gpu.json``.

``--symbolic`` leaves the sizes symbolic, as a user who calls ``to_sdfg()`` and nothing more has them: the
lowering sees no sizes (the automatic schedule assumes some and says so) and the program is called with
the symbols' values. Write it to its own ``--out``.
"""
import argparse
import contextlib
import copy
import importlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "npbench.json")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "dace_partition", "npbench")
REPO_URL = "https://github.com/spcl/npbench"

# Preset overrides where the 2-core machine needs smaller sizes ({kernel: {param: value}}); every
# override is recorded in the JSON ("shrunk"). S sizes run as they are unless listed here.
SHRINK = {}

OUTCOMES = ("correct", "built", "refused", "wrong", "crash", "hang", "compile_error", "nothing_to_schedule")
RTOL, ATOL = 1e-5, 1e-8  # NPBench's defaults (a bench_info may override rtol, atol, norm_error)


# ---------------------------------------------------------------------------------------------------
# NPBench source and kernel list


def find_npbench(arg):
    path = arg or os.environ.get("NPBENCH_DIR") or CACHE
    if os.path.isdir(os.path.join(path, "bench_info")):
        return os.path.abspath(path)
    if arg or os.environ.get("NPBENCH_DIR"):
        sys.exit(f"npbench.py: '{path}' is not an NPBench checkout (no bench_info/ folder)")
    print(f"npbench.py: NPBench not found in {path}; cloning {REPO_URL} ...", flush=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        subprocess.run(["git", "clone", "--depth", "1", REPO_URL, path], check=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        shutil.rmtree(path, ignore_errors=True)
        sys.exit(f"npbench.py: NPBench is not available ({e}).\n  Clone {REPO_URL} somewhere and pass "
                 f"--npbench DIR or set NPBENCH_DIR, or clone it into {path}.")
    return path


def bench_infos(npb):
    """{kernel: bench_info['benchmark']} for every NPBench kernel with a ``_dace.py`` implementation."""
    out = {}
    folder = os.path.join(npb, "bench_info")
    for fn in sorted(os.listdir(folder)):
        if not fn.endswith(".json"):
            continue
        with open(os.path.join(folder, fn)) as f:
            info = json.load(f)["benchmark"]
        rel, mod = info["relative_path"], info["module_name"]
        if os.path.exists(os.path.join(npb, "npbench", "benchmarks", rel, f"{mod}_dace.py")):
            out[fn[:-5]] = info
    return out


# ---------------------------------------------------------------------------------------------------
# Comparison (NPBench's validation: allclose, else a relative norm error below norm_error)


def _compare_one(ref, got, info):
    import numpy as np
    r, g = np.asarray(ref), np.asarray(got)
    if r.size != g.size:
        return f"shape {g.shape}, expected {r.shape}"
    r, g = r.reshape(-1), g.reshape(-1)
    if r.dtype.kind in "biu" and g.dtype.kind in "biu":
        bad = r != g
        if np.any(bad):
            i = int(np.argmax(bad))
            return f"{int(bad.sum())} of {r.size} elements differ (exact; first at {i}: {g[i]} vs {r[i]})"
        return None
    rtol, atol = info.get("rtol", RTOL), info.get("atol", ATOL)
    with np.errstate(all="ignore"):
        if np.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True):
            return None
        nr = np.linalg.norm(r - g) / max(np.linalg.norm(r), 1e-300)
    if nr < info.get("norm_error", 1e-5):
        return None
    ok = np.isclose(g, r, rtol=rtol, atol=atol, equal_nan=True)
    i = int(np.argmin(ok))
    return f"{int((~ok).sum())} of {r.size} elements differ (relative norm error {nr:.2e}; first at {i}: {g[i]} vs {r[i]})"


def compare(ref, got, names, info):
    """None when the output lists match, else a description of the first mismatch."""
    if len(ref) != len(got):
        return f"{len(got)} outputs, expected {len(ref)}"
    for name, r, g in zip(names, ref, got):
        why = _compare_one(r, g, info)
        if why:
            return f"{name}: {why}"
    return None


# ---------------------------------------------------------------------------------------------------
# One kernel (runs in a child process)


class Progress:
    """The child's record, rewritten after every step; the parent reads it after a timeout or a crash."""

    def __init__(self, path, record):
        self.path, self.record = path, record

    def step(self, name):
        self.record["current"] = name
        self.save()

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.record, f, indent=1, default=str)
        os.replace(tmp, self.path)


def _best(fn, fresh, reps, budget):
    """(first call's result, best time in s): one call, then up to ``reps`` - 1 more within ``budget`` s."""
    first = fresh()
    t = time.perf_counter()
    out = fn(first)
    times = [time.perf_counter() - t]
    while len(times) < reps and sum(times) < budget:
        args = fresh()
        t = time.perf_counter()
        fn(args)
        times.append(time.perf_counter() - t)
    return out, first, min(times[1:] if len(times) > 1 else times)


def _outputs(ret, args, info):
    """NPBench's output list: the return value(s), then the ``output_args`` as the call left them."""
    if ret is None:
        out = []
    elif isinstance(ret, (tuple, list)):
        out = list(ret)
    else:
        out = [ret]
    return out + [args[a] for a in info.get("output_args", [])]


def _output_names(n_ret, info):
    return [f"return[{i}]" for i in range(n_ret)] + list(info.get("output_args", []))


def _specialize(sdfg, data, params, symbolic=False):
    """Replaces every free symbol by its value: a preset parameter of that name, else the extent of an
    argument array whose declared shape names the symbol. Returns {symbol: value}. With ``symbolic`` the
    SDFG keeps its symbols (as a user who calls ``to_sdfg()`` and nothing more has them) and the values
    become call arguments instead."""
    import dace
    import numpy as np
    values = {}
    for s in sorted(map(str, sdfg.free_symbols)):
        if s in params and isinstance(params[s], (int, np.integer)):
            values[s] = int(params[s])
    for name, desc in sdfg.arrays.items():
        if desc.transient or name not in data or not isinstance(data[name], np.ndarray):
            continue
        for dim, ext in zip(desc.shape, data[name].shape):
            if isinstance(dim, dace.symbolic.symbol) and str(dim) not in values:
                values[str(dim)] = int(ext)
    values = {k: v for k, v in values.items() if k in map(str, sdfg.free_symbols)}
    if symbolic:
        for k, v in values.items():
            data.setdefault(k, v)
    elif values:
        sdfg.specialize(values)
    return values


def natural_schedule(maps, P):
    return {m.name: (P, ) + (1, ) * (len(m.shape) - 1) for m in maps
            if isinstance(m.shape[0], int) and not isinstance(m.shape[0], bool) and m.shape[0] >= P}


def _classify_exception(e, dp):
    if isinstance(e, (dp.ScheduleError, dp.UnsupportedPattern, getattr(dp, "FrontendError", dp.ScheduleError))):
        return "refused"
    return "crash"


def _msg(e, n=600):
    s = f"{type(e).__name__}: {e}"
    return s if len(s) <= n else s[:n // 2] + " ... " + s[-n // 2:]


def run_mode(rec, sdfg0, mode, P, call_args, ref, ref_names, dace_out, info, opts, progress):
    """Lowers a copy of ``sdfg0`` with ``mode``'s schedule for ``P`` ranks, builds, runs, checks."""
    import dace_partition as dp
    from dace_partition.runtime import emulation, launch as L
    r = rec.setdefault("runs", {}).setdefault(str(P), {}).setdefault(mode, {})
    r.update(outcome=None, message="")
    sdfg = copy.deepcopy(sdfg0)
    sdfg.name = f"npb_{rec['kernel']}_p{P}_{mode}" + ("_gpu" if opts.device == "gpu" else "")
    progress.step(f"P={P} {mode}: lower")
    t = time.perf_counter()
    try:
        with emulation.host_kernels() if opts.emulated else contextlib.nullcontext():
            _lower(sdfg, mode, P, r, opts.device, dp)
    except Exception as e:  # noqa: BLE001 - every failure is an outcome
        r.update(lower_s=time.perf_counter() - t, outcome=_classify_exception(e, dp), message=_msg(e))
        if r["outcome"] == "crash":
            r["traceback"] = traceback.format_exc()[-3000:]
        return
    if r.get("outcome"):
        return
    r["lower_s"] = time.perf_counter() - t
    try:
        r["report"] = str(dp.report(sdfg))[:4000]
    except Exception:  # noqa: BLE001 - the report is optional here
        pass
    progress.step(f"P={P} {mode}: build")
    t = time.perf_counter()
    try:
        if opts.emulated:
            emulation.on_host(sdfg)
        L.build(sdfg)
    except Exception as e:  # noqa: BLE001
        r.update(build_s=time.perf_counter() - t, message=_msg(e))
        text = f"{type(e).__name__} {e}"
        r["outcome"] = ("compile_error" if any(w in text for w in ("CompilationError", "CMake", "compil", "error:"))
                        else _classify_exception(e, dp))
        return
    r["build_s"] = time.perf_counter() - t
    if opts.build_only:
        r["outcome"] = "built"
        return
    _run_and_check(r, sdfg, mode, P, call_args, ref, ref_names, dace_out, info, opts, progress, rec)


def _lower(sdfg, mode, P, r, device, dp):
    """Lowers ``sdfg`` with ``mode``'s schedule; sets ``r["outcome"]`` where there is nothing to schedule."""
    if mode == "natural":
        found = dp.maps(sdfg)
        schedule = natural_schedule(found, P)
        r["schedule"] = {k: list(v) for k, v in schedule.items()}
        if not schedule:
            r.update(outcome="nothing_to_schedule",
                     message=(f"none of the {len(found)} maps has an integer first extent >= {P}" if found else
                              "dp.maps lists no schedulable map"))
            return
        dp.lower(sdfg, schedule, device=device)
    elif mode == "auto_dist":  # the automatic schedule, every rank holding its own tiles (io="distributed")
        dp.lower(sdfg, ranks=P, io="distributed", device=device)
    else:
        dp.lower(sdfg, ranks=P, device=device)


def _run_and_check(r, sdfg, mode, P, call_args, ref, ref_names, dace_out, info, opts, progress, rec):
    """Runs the built ``sdfg`` on ``P`` ranks and compares every output with NumPy (or DaCe)."""
    import dace_partition as dp
    from dace_partition.runtime import launch as L
    progress.step(f"P={P} {mode}: run")
    os.environ["NPBENCH_DP_REPS"] = str(opts.reps)
    os.environ["NPBENCH_DP_BUDGET"] = str(opts.budget)
    t = time.perf_counter()

    def times_of(tmp):
        p = os.path.join(tmp, "times.json")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return json.load(f)

    try:
        res, times = L.launch(sdfg, P, opts.timeout, dict(call_args), worker="_npbench_worker", collect=times_of,
                              caller="npbench.py")
    except Exception as e:  # noqa: BLE001
        r.update(wall_s=time.perf_counter() - t, message=_msg(e, 1500))
        if isinstance(e, L.RunError) and "did not finish within" in str(e):
            r["outcome"] = "hang"
        else:
            r["outcome"] = _classify_exception(e, dp) if not isinstance(e, L.RunError) else "crash"
        return
    r["wall_s"] = time.perf_counter() - t
    if times:
        r["run_ms"] = 1e3 * min(times[1:] if len(times) > 1 else times)
        r["first_call_ms"] = 1e3 * times[0]
        r["calls"] = len(times)
    # res: the worker's npz as launch() returns it for kind "none" (a dict); rebuild the outputs
    got = _from_worker(res)
    # arguments the program only reads (trisolv's ``b``, an NPBench output) keep the values passed in
    got_out = _outputs(got[0], {**dict(call_args), **got[1]}, info)
    why = compare(ref, got_out, ref_names, info)
    if why is None:
        r.update(outcome="correct", checked_against="numpy")
        return
    if dace_out is not None and rec.get("dace_vs_numpy") != "match":
        why_d = compare(dace_out, got_out, ref_names, info)
        if why_d is None:
            r.update(outcome="correct", checked_against="dace",
                     message=f"matches DaCe in one process, which differs from NumPy ({rec.get('dace_vs_numpy')})")
            return
        why = f"vs NumPy: {why}; vs DaCe: {why_d}"
    r.update(outcome="wrong", message=why)


def _from_worker(res):
    """(return value or tuple or None, {written argument: array}) from the worker's outputs."""
    if not isinstance(res, dict):  # an older launch() that unpacked "__kind" itself
        return res, {}
    kind = str(res.get("__npb_kind", "none"))
    written = {k[4:]: v for k, v in res.items() if k.startswith("__w_")}
    if kind == "single":
        return res["__r0"], written
    if kind == "tuple":
        return tuple(res[f"__r{i}"] for i in range(int(res["__n"]))), written
    return None, written


def _compile_single(sdfg, rec):
    """DaCe in one process, built as benchmarks/vs_peers.py builds it: the BLAS the lowered programs use and
    the same single-thread local optimizations (falls back to a plain ``compile()`` if those helpers moved)."""
    import dace
    try:
        from dace_partition.passes.partition import single_threaded
        from dace_partition.runtime.toolchain import blas_build, runtime_environment
    except ImportError:
        rec["dace_build"] = "plain sdfg.compile()"
        return sdfg.compile()
    os.environ.update({k: v for k, v in runtime_environment({}).items() if k not in os.environ})
    single_threaded(sdfg)
    with dace.config.temporary_config(), blas_build() as choice:
        rec["dace_build"] = f"single_threaded, BLAS {choice}"
        return sdfg.compile()



def module_path(info) -> str:
    """The dotted module of a kernel's NumPy program (``_dace`` appended: its DaCe program)."""
    return "npbench.benchmarks." + info["relative_path"].replace("/", ".") + "." + info["module_name"]


def initial_data(info, params) -> dict:
    """The preset's parameters and the arrays the kernel's initializer makes, as NPBench's
    ``Benchmark.get_data`` builds them."""
    data = dict(params)
    if info.get("init"):
        init = getattr(importlib.import_module(module_path(info)), info["init"]["func_name"])
        outs = init(*[data[a] for a in info["init"]["input_args"]])
        outs = outs if isinstance(outs, tuple) and len(info["init"]["output_args"]) > 1 else (outs, )
        data.update(zip(info["init"]["output_args"], outs))
    return data

def child(kernel, npb, progress_path, opts):
    import numpy as np
    # This script is called npbench.py too: its folder must not shadow NPBench's package here. The ranks
    # find _npbench_worker through PYTHONPATH.
    sys.path[:] = [npb] + [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    import warnings
    warnings.filterwarnings("ignore")
    info = bench_infos(npb)[kernel]
    rec = {"kernel": kernel, "status": "running", "preset": opts.preset}
    progress = Progress(progress_path, rec)
    params = dict(info["parameters"][opts.preset])
    shrunk = SHRINK.get(kernel)
    if shrunk:
        rec["shrunk"] = {k: {"from": params.get(k), "to": v} for k, v in shrunk.items()}
        params.update(shrunk)
    rec["sizes"] = params
    modpath = module_path(info)

    progress.step("initialize")
    data = initial_data(info, params)
    arrays = set(info.get("array_args", []))

    def fresh_pos():
        return [np.copy(data[a]) if a in arrays else data[a] for a in info["input_args"]]

    # NumPy reference
    progress.step("numpy")
    np_fn = getattr(importlib.import_module(modpath + "_numpy"), info["func_name"])
    ret, args, best = _best(lambda a: np_fn(*a), fresh_pos, opts.reps, opts.budget)
    named = dict(zip(info["input_args"], args))
    ref = [np.copy(x) if isinstance(x, np.ndarray) else x for x in _outputs(ret, named, info)]
    n_ret = len(ref) - len(info.get("output_args", []))
    names = _output_names(n_ret, info)
    rec["numpy_ms"] = 1e3 * best

    # DaCe SDFG at the preset sizes, and DaCe in one process
    progress.step("dace: to_sdfg")
    import dace_partition as dp
    dace_out = None
    try:
        prog = getattr(importlib.import_module(modpath + "_dace"), info["func_name"])
        t = time.perf_counter()
        sdfg0 = prog.to_sdfg()
        rec["to_sdfg_s"] = time.perf_counter() - t
        rec["symbols"] = _specialize(sdfg0, data, params, opts.symbolic)
        rec["symbolic"] = bool(opts.symbolic)
        arglist = [a for a in sdfg0.arglist() if not a.startswith("__return")]  # return arrays: DaCe allocates them
        missing = [a for a in arglist if a not in data]
        if missing:
            raise ValueError(f"no value for the SDFG arguments {missing}")
        rec["maps"] = [str(m) for m in dp.maps(sdfg0)]

        def fresh_kw():
            return {a: (np.copy(data[a]) if a in arrays else data[a]) for a in arglist}

        progress.step("dace: compile")
        single = copy.deepcopy(sdfg0)
        single.name = f"npb_{kernel}_dace"
        t = time.perf_counter()
        compiled = _compile_single(single, rec)
        rec["dace_compile_s"] = time.perf_counter() - t
        progress.step("dace: run")
        dret, dargs, dbest = _best(lambda a: compiled(**a), fresh_kw, opts.reps, opts.budget)
        dace_out = [np.copy(x) if isinstance(x, np.ndarray) else x for x in _outputs(dret, dargs, info)]
        rec["dace_ms"] = 1e3 * dbest
        why = compare(ref, dace_out, names, info)
        rec["dace_vs_numpy"] = "match" if why is None else why
    except Exception as e:  # noqa: BLE001
        rec.update(status="dace_fails", message=_msg(e, 1500), traceback=traceback.format_exc()[-3000:])
        rec.pop("current", None)
        progress.save()
        return
    rec["status"] = "ok"
    call_args = {a: data[a] for a in arglist}
    modes = _modes(dp, opts)
    for P in opts.ranks:
        for mode in modes:
            run_mode(rec, sdfg0, mode, P, call_args, ref, names, dace_out, info, opts, progress)
            progress.save()
    rec.pop("current", None)
    progress.save()


# ---------------------------------------------------------------------------------------------------
# Driver


def _modes(dp, opts):
    """The schedules each kernel runs with: the natural one and the automatic one, unless skipped."""
    return ([] if opts.skip_natural else ["natural"]) + \
        (["auto"] if hasattr(dp, "auto_schedule") and not opts.skip_auto else []) + \
        (["auto_dist"] if opts.dist else [])


def run_kernel(kernel, npb, opts, nruns):
    """Runs ``kernel`` in a child process with a time limit; returns its record."""
    work = tempfile.mkdtemp(prefix=f"npb_{kernel}_")
    progress = os.path.join(work, "progress.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kernel, "--progress", progress, "--npbench", npb,
           "--preset", opts.preset, "--ranks", ",".join(map(str, opts.ranks)), "--timeout", str(opts.timeout),
           "--reps", str(opts.reps), "--budget", str(opts.budget)] + (["--skip-auto"] if opts.skip_auto else []) + \
        (["--skip-natural"] if opts.skip_natural else []) + (["--dist"] if opts.dist else []) + \
        (["--symbolic"] if opts.symbolic else []) + ["--device", opts.device] + \
        (["--emulated"] if opts.emulated else []) + (["--build-only"] if opts.build_only else [])
    limit = opts.timeout * (3 + nruns)  # setup + DaCe compile + one timeout per run, at most
    t = time.perf_counter()
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    try:
        out, _ = proc.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    rec = None
    if os.path.exists(progress):
        with open(progress) as f:
            rec = json.load(f)
    if rec is None:
        rec = {"kernel": kernel, "status": "harness_error", "message": out[-2000:]}
    step = rec.pop("current", None)
    if step is not None:  # the child died or was killed during ``step``
        why = (f"killed after {limit} s during '{step}'" if timed_out else
               f"child exited with {proc.returncode} during '{step}': {out[-1500:]}")
        if step.startswith("P="):
            P, mode = step[2:].split(":")[0].split()
            r = rec.setdefault("runs", {}).setdefault(P, {}).setdefault(mode, {})
            r.update(outcome="hang" if timed_out else "crash", message=why)
            rec["status"] = "ok"
        else:
            rec.update(status="dace_fails" if step.startswith("dace") else "setup_error", message=why)
    rec["wall_s"] = time.perf_counter() - t
    shutil.rmtree(work, ignore_errors=True)
    return rec


def _fmt(x, digits=1):
    return "" if x is None else f"{x:.{digits}f}"


def cell(rec, P, mode):
    if rec.get("status") != "ok":
        return rec.get("status", "?")
    r = rec.get("runs", {}).get(str(P), {}).get(mode)
    if not r:
        return ""
    o = r.get("outcome") or "?"
    return o + ("*" if o == "correct" and r.get("checked_against") == "dace" else "")


def table(records, ranks, modes):
    cols = [f"P={P} {m}" for m in modes for P in ranks]
    shown = "natural" if "natural" in modes else (modes[0] if modes else "natural")
    head = ["kernel"] + cols + ["lowering s", f"run ms ({shown}, " + "/".join(f"P={P}" for P in ranks) +
                                ") vs NumPy ms vs DaCe ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in sorted(records):
        rec = records[k]
        cells = [cell(rec, P, m) for m in modes for P in ranks]
        runs = [rec.get("runs", {}).get(str(P), {}).get(m, {}) for m in modes for P in ranks]
        lows = [r["lower_s"] for r in runs if r.get("lower_s") is not None]
        nat = [rec.get("runs", {}).get(str(P), {}).get(shown, {}) for P in ranks]
        run_ms = "/".join(_fmt(r.get("run_ms"), 2) if r.get("outcome") == "correct" else "-" for r in nat)
        perf = f"{run_ms} vs {_fmt(rec.get('numpy_ms'), 2)} vs {_fmt(rec.get('dace_ms'), 2)}" if rec.get("status") == "ok" else ""
        lines.append("| " + " | ".join([k] + cells + [_fmt(max(lows), 1) if lows else "", perf]) + " |")
    return "\n".join(lines)


def summary(records, ranks, modes):
    counts = {o: 0 for o in OUTCOMES}
    total = 0
    fails = sorted(k for k, r in records.items() if r.get("status") != "ok")
    for k, rec in records.items():
        if rec.get("status") != "ok":
            continue
        for P in ranks:
            for m in modes:
                r = rec.get("runs", {}).get(str(P), {}).get(m)
                if r and r.get("outcome"):
                    total += 1
                    counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    ok = sum(1 for rec in records.values() if rec.get("status") == "ok" and all(
        rec.get("runs", {}).get(str(P), {}).get(m, {}).get("outcome") == "correct" for P in ranks for m in modes))
    others = ", ".join(f"{v} {k}" for k, v in counts.items() if v and k != "correct")
    line = (f"{counts['correct']} of {total} runs correct ({100.0 * counts['correct'] / max(total, 1):.0f}%)"
            + (f"; {others}" if others else "")
            + f"; {ok} of {len(records) - len(fails)} kernels correct in every run"
            + "".join(f"; excluded, {st}: {', '.join(k for k in fails if records[k].get('status') == st)}"
                      for st in sorted({records[k].get("status") for k in fails})))
    return line, counts, total


def speedup(records, P=2, mode="auto", min_numpy_ms=10.0):
    """Geometric mean of NumPy-in-one-process time over our time on ``P`` ranks, over the kernels that
    take at least ``min_numpy_ms`` in NumPy and ran correctly; (geomean, kernels counted). ``mode`` may be
    a tuple: per kernel, the first of those modes that ran correctly (``("auto_dist", "auto")``: a user who
    asks for io="distributed" and takes root io where it is refused; never the faster of the two)."""
    ratios = []
    for rec in records.values():
        runs = rec.get("runs", {}).get(str(P), {})
        tried = [runs.get(m, {}) for m in ((mode, ) if isinstance(mode, str) else mode)]
        r = next((x for x in tried if x.get("outcome") == "correct"), {})
        if rec.get("numpy_ms") and rec["numpy_ms"] >= min_numpy_ms and r.get("outcome") == "correct" and r.get("run_ms"):
            ratios.append(rec["numpy_ms"] / r["run_ms"])
    if not ratios:
        return None, 0
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), len(ratios)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--npbench", help="NPBench checkout (default $NPBENCH_DIR, else " + CACHE + ")")
    ap.add_argument("--kernels", help="comma-separated kernel names (bench_info file names); default all with _dace.py")
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts (default 2,4)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per step (lowering, build, run); default 300")
    ap.add_argument("--skip-auto", action="store_true", help="only the natural schedule")
    ap.add_argument("--skip-natural", action="store_true", help="only the automatic schedule")
    ap.add_argument("--dist", action="store_true",
                    help="also the automatic schedule with io=\"distributed\" (mode auto_dist): every rank passes "
                         "its own tiles, the timed call is the program alone, without rank 0's scatter and gather")
    ap.add_argument("--preset", default="S", choices=("S", "M", "L", "paper"))
    ap.add_argument("--symbolic", action="store_true",
                    help="do not specialize the sizes: the SDFG keeps its symbols and the program is called with "
                         "their values, as a user who does not specialize runs it")
    ap.add_argument("--reps", type=int, default=3, help="timed calls at most (best is kept); default 3")
    ap.add_argument("--budget", type=float, default=5.0, help="seconds of timed calls at most per variant")
    ap.add_argument("--device", default="cpu", choices=("cpu", "gpu"), help="lower with this device (default cpu)")
    ap.add_argument("--emulated", action="store_true",
                    help="with --device gpu: run the GPU lowering's data flow on the host (no GPU needed)")
    ap.add_argument("--build-only", action="store_true", help="lower and build, do not run (outcome 'built')")
    ap.add_argument("--out", help="JSON results (default benchmarks/results/npbench.json, or npbench_gpu*.json)")
    ap.add_argument("--fresh", action="store_true", help="do not merge with an existing --out file")
    ap.add_argument("--md", help="also write the Markdown table (and summary) to this file")
    ap.add_argument("--table-only", action="store_true", help="print the table of --out and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--progress", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    opts.ranks = [int(x) for x in str(opts.ranks).split(",") if x.strip()]

    if opts.emulated and opts.device != "gpu":
        ap.error("--emulated emulates the GPU lowering: give --device gpu")
    if opts.child:
        return child(opts.child, opts.npbench, opts.progress, opts)
    from dace_partition.runtime.cuda_build import gpu_count
    if opts.device == "gpu" and not (opts.emulated or opts.build_only) and not gpu_count():
        ap.error("no CUDA GPU here (nvidia-smi lists none): a CUDA build would crash when called; "
                 "give --emulated (the GPU data flow on the host) or --build-only (nvcc only)")
    if opts.out is None:
        opts.out = DEFAULT_OUT if opts.device == "cpu" else os.path.join(
            HERE, "results", "npbench_gpu" + ("_emulated" if opts.emulated else "_build" if opts.build_only else "") + ".json")

    import dace_partition as dp
    modes = _modes(dp, opts)
    old = {}
    if os.path.exists(opts.out) and not opts.fresh:
        with open(opts.out) as f:
            old = json.load(f)
    if opts.table_only:
        recs = old.get("kernels", {})
        m = old.get("modes", modes)
        print(table(recs, old.get("ranks", opts.ranks), m))
        print(summary(recs, old.get("ranks", opts.ranks), m)[0])
        return

    npb = find_npbench(opts.npbench)
    infos = bench_infos(npb)
    kernels = [k.strip() for k in opts.kernels.split(",")] if opts.kernels else list(infos)
    unknown = [k for k in kernels if k not in infos]
    if unknown:
        sys.exit(f"npbench.py: unknown kernel(s) {unknown}; known: {', '.join(infos)}")
    commit = subprocess.run(["git", "-C", npb, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    same = old.get("ranks") == opts.ranks and old.get("modes") == modes and old.get("device", "cpu") == opts.device
    records = dict(old.get("kernels", {})) if same else {}
    t0 = time.perf_counter()
    for i, k in enumerate(kernels):
        print(f"[{i + 1}/{len(kernels)}] {k} ...", flush=True)
        rec = run_kernel(k, npb, opts, len(opts.ranks) * len(modes))
        records[k] = rec
        runs = "  ".join(f"P={P} {m}: {cell(rec, P, m)}" for P in opts.ranks for m in modes)
        print(f"    {rec.get('status')}  {runs}  ({rec['wall_s']:.0f} s)"
              + (f"  {rec.get('message', '')[:200]}" if rec.get("status") != "ok" else ""), flush=True)
        for P in opts.ranks:
            for m in modes:
                r = rec.get("runs", {}).get(str(P), {}).get(m, {})
                if r.get("message") and r.get("outcome") != "correct":
                    print(f"      P={P} {m}: {r['message'][:300]}", flush=True)
        os.makedirs(os.path.dirname(opts.out), exist_ok=True)
        with open(opts.out, "w") as f:  # after every kernel, so an interrupted run keeps what it did
            json.dump(dict(machine=platform.platform(), cpus=os.cpu_count(), when=time.strftime("%Y-%m-%d %H:%M"),
                           device=opts.device, emulated=opts.emulated, build_only=opts.build_only,
                           job_gpus=os.environ.get("DACE_PARTITION_GPUS"),
                           npbench=npb, npbench_commit=commit, preset=opts.preset, ranks=opts.ranks, modes=modes,
                           timeout_s=opts.timeout, shrink=SHRINK, kernels=records), f, indent=1, default=str)
    print()
    tab = table(records, opts.ranks, modes)
    line = summary(records, opts.ranks, modes)[0]
    print(tab)
    print("\n" + line + f"  (this invocation: {len(kernels)} kernel(s), {time.perf_counter() - t0:.0f} s)")
    for P in opts.ranks if not (opts.emulated or opts.build_only) else []:  # emulated times mean nothing
        for m in modes:
            g, n = speedup(records, P, m)
            if n:
                print(f"P={P} {m}: geometric-mean speed-up over NumPy in one process, {n} kernels of >= 10 ms: {g:.2f}x")
        if "auto_dist" in modes and "auto" in modes:
            g, n = speedup(records, P, ("auto_dist", "auto"))
            if n:
                print(f"P={P} auto_dist, root io where refused: geometric-mean speed-up, {n} kernels of >= 10 ms: "
                      f"{g:.2f}x")
    if opts.md:
        with open(opts.md, "w") as f:
            f.write(tab + "\n\n" + line + "\n")


if __name__ == "__main__":
    main()
