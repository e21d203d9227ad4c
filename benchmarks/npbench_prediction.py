"""NPBench: does the search predict the bytes the lowered program moves?

    python benchmarks/npbench_prediction.py --npbench DIR [--kernels gemm,atax] [--ranks 2,4] [--timeout 300]

For every NPBench kernel with a DaCe implementation, at the preset's sizes (symbols specialized, as
``benchmarks/npbench.py`` does), and for each P:

* natural schedule (every map whose first extent is an integer >= P on grid (P, 1, ...)), maps as
  written: ``dp.search.predict(sdfg, schedule, P)`` against ``dp.report(lower(sdfg, schedule,
  local_optimize=False)).bytes_per_rank()``;
* automatic schedule: ``dp.auto_schedule(sdfg, P)``'s ``predicted`` against the report of
  ``lower(sdfg, that schedule)``.

Pure Python: nothing is built or run. Each kernel runs in its own subprocess (a crash or hang is recorded).
Outcomes per (P, schedule): ``equal``, ``differs`` (both byte lists kept), ``refused`` (by ``lower``),
``run_time`` (the report's bytes depend on values known at run time), ``nothing`` (no map to split),
``crash``. Writes benchmarks/results/npbench_prediction.json and prints a table and a summary.
"""
import argparse
import copy
import importlib
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "npbench_prediction.json")


def _npbench_helpers():
    """This folder's NPBench driver (its kernel list, presets and natural schedule), loaded under another
    name: NPBench's own package is called ``npbench`` too."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_npbench_driver", os.path.join(HERE, "npbench.py"))
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    return driver


def _bytes(xs, n):
    xs = list(xs)
    return xs[:n] + [b for b in xs[n:] if b]  # ranks the job lacks hold 0


def one(kernel, npb, ranks):
    driver = _npbench_helpers()
    sys.path[:] = [npb] + [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]
    import warnings
    warnings.filterwarnings("ignore")
    import dace_partition as dp
    info = driver.bench_infos(npb)[kernel]
    params = dict(info["parameters"]["S"])
    data = driver.initial_data(info, params)
    prog = getattr(importlib.import_module(driver.module_path(info) + "_dace"), info["func_name"])
    sdfg0 = prog.to_sdfg()
    driver._specialize(sdfg0, data, params)
    # scalar arguments (a time loop's TSTEPS) are values at run time: both accounts get the preset's
    values = {k: int(v) for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}
    rec = {"kernel": kernel, "runs": []}
    for P in ranks:
        for mode in ("natural", "auto"):
            row = {"P": P, "schedule": mode}
            t = time.perf_counter()
            try:
                sdfg = copy.deepcopy(sdfg0)
                if mode == "natural":
                    schedule = driver.natural_schedule(dp.maps(sdfg), P)
                    if not schedule:
                        row["outcome"] = "nothing"
                        rec["runs"].append(row)
                        continue
                    predicted = dp.search.predict(copy.deepcopy(sdfg0), schedule, P, sizes=values).bytes_per_rank
                    dp.lower(sdfg, schedule, local_optimize=False)
                else:
                    schedule = dp.auto_schedule(sdfg, P, sizes=values)
                    predicted = schedule.predicted.bytes_per_rank
                    dp.lower(sdfg, schedule)
                row["grids"] = {str(k): str(v) for k, v in schedule.items()}
                reported = dp.report(sdfg).bytes_per_rank(**values)
                if reported is None:
                    row["outcome"] = "run_time"
                else:
                    predicted = _bytes(predicted, len(reported))
                    row["outcome"] = "equal" if predicted == reported else "differs"
                    row["predicted"], row["reported"] = predicted, reported
            except (dp.ScheduleError, dp.UnsupportedPattern) as e:
                row["outcome"], row["message"] = "refused", f"{type(e).__name__}: {str(e)[:300]}"
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                row["outcome"], row["message"] = "crash", f"{type(e).__name__}: {str(e)[:300]}"
                row["traceback"] = traceback.format_exc()[-1500:]
            row["seconds"] = round(time.perf_counter() - t, 2)
            rec["runs"].append(row)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--npbench", required=True, help="an NPBench checkout")
    ap.add_argument("--kernels", help="comma-separated kernel names; default every kernel with _dace.py")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per kernel")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    ranks = [int(r) for r in opts.ranks.split(",")]
    npb = os.path.abspath(opts.npbench)
    if opts.child:
        print("RESULT " + json.dumps(one(opts.child, npb, ranks)))
        return
    kernels = opts.kernels.split(",") if opts.kernels else sorted(_npbench_helpers().bench_infos(npb))
    records = []
    for k in kernels:
        t = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, __file__, "--npbench", npb, "--ranks", opts.ranks, "--child", k],
                               capture_output=True, text=True, timeout=opts.timeout)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            rec = json.loads(line[7:]) if line else {"kernel": k, "error": (p.stderr or p.stdout)[-800:]}
        except subprocess.TimeoutExpired:
            rec = {"kernel": k, "error": f"timeout after {opts.timeout:.0f} s"}
        records.append(rec)
        cells = " ".join(f"P{r['P']}/{r['schedule']}={r['outcome']}" for r in rec.get("runs", [])) or rec.get("error", "")[:200]
        print(f"{k:24s} {time.perf_counter() - t:6.1f} s  {cells}", flush=True)
    counts = {}
    for rec in records:
        for r in rec.get("runs", []):
            key = (r["P"], r["schedule"])
            counts.setdefault(key, {}).setdefault(r["outcome"], 0)
            counts[key][r["outcome"]] += 1
    summary = {f"P={P} {s}": c for (P, s), c in sorted(counts.items())}
    for k, c in summary.items():
        print(f"{k}: " + ", ".join(f"{n} {o}" for o, n in sorted(c.items())))
    os.makedirs(os.path.dirname(opts.out), exist_ok=True)
    with open(opts.out, "w") as f:
        json.dump({"ranks": ranks, "preset": "S", "summary": summary, "kernels": records}, f, indent=1)


if __name__ == "__main__":
    main()
