"""How long ``dp.auto_schedule`` takes on hundreds to a thousand ranks, for the peer workloads
(``_peers_workloads.py``, at their full sizes), optionally against an older checkout of the package.

    python benchmarks/search_time_large_p.py [--cases softmax:256,jacobi:1024,...] [--before DIR] [--limit 300]

Each search runs in a fresh process (nothing cached between them) with ``--limit`` seconds; with
``--before DIR`` (e.g. ``git worktree add /tmp/before <commit>``) the same case runs on that checkout right
after, so both see the same load. Records seconds, the search method, the predicted time and the schedule:
a faster search must choose what the slower one chose. Writes ``benchmarks/results/search_time_large_p.json``.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = "axpy:1024,softmax:256,softmax:1024,jacobi:256,jacobi:1024,matmul:1024,mlp:1024,attention:8"

CHILD = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import _peers_workloads as W
import dace_partition as dp
wl = getattr(W, sys.argv[3])()
prog = wl.program()
sdfg = prog.to_sdfg() if hasattr(prog, "to_sdfg") else prog
if wl.prepare:
    wl.prepare(sdfg)
t = time.perf_counter()
s = dp.auto_schedule(sdfg, int(sys.argv[4]))
print(json.dumps({"seconds": round(time.perf_counter() - t, 2), "method": s.method,
                  "predicted_s": s.predicted.time, "bytes_per_rank_max": max(s.predicted.bytes_per_rank), "schedule": {str(k): list(v) for k, v in dict(s).items()}}))
"""


def one(package_root, name, ranks, limit):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, package_root, HERE, name, str(ranks)], env=env,
                             capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "stopped_after_s": limit}
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=CASES, help="workload:ranks, comma-separated")
    ap.add_argument("--before", default=None, help="a checkout of an older commit, run right after each case")
    ap.add_argument("--limit", type=float, default=300.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "search_time_large_p.json"))
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        name, ranks = case.split(":")
        row = {"workload": name, "ranks": int(ranks), "now": one(ROOT, name, int(ranks), args.limit)}
        if args.before:
            row["before"] = one(os.path.abspath(args.before), name, int(ranks), args.limit)
            a, b = row["now"], row["before"]
            if "schedule" in a and "schedule" in b:
                row["same_schedule"] = a["schedule"] == b["schedule"]
                row["same_prediction"] = (a["predicted_s"], a["bytes_per_rank_max"]) == \
                    (b["predicted_s"], b["bytes_per_rank_max"])
        now, before = row["now"].get("seconds"), row.get("before", {}).get("seconds")
        print(f"{name:10s} P={ranks:5s} now {now} s" + (f", before {before if before is not None else '> limit'} s"
                                                        f", same schedule: {row.get('same_schedule')}, same prediction: {row.get('same_prediction')}"
                                                        if args.before else ""), flush=True)
        rows.append(row)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.platform(), "cpus": os.cpu_count(),
            "limit_s": args.limit, "before": args.before, "loadavg_end": os.getloadavg()}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
