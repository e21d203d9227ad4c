"""Automatic against hand schedules: predicted and measured, time and bytes, in one run.

For each workload of ``_peers_workloads.py`` (the ``vs_peers.py`` programs, with their hand schedules):
``dp.auto_schedule`` chooses grids for P ranks; both schedules are priced by the cost model
(``dp.search.predict``), lowered (the report counts the bytes) and built; then both programs run under
``mpiexec -n P`` with ``io="root"``, checked against NumPy on a warm-up call and timed (best call; rounds
interleave the two). The cost model's rates come from ``dp.calibrate()`` (run first, on this machine)
unless ``--defaults``. Writes ``benchmarks/results/auto_schedule.json``.

    python benchmarks/auto_schedule.py [--ranks 2] [--rounds 3] [--reps 3] [--small] [--only matmul,mlp]

``--conformance``: instead, every program of the conformance suite on 2 and 4 ranks, lowered (not run)
with its hand schedule and with the automatic one (on the tests' slow-compute model, so that these small
programs are partitioned): bytes from both reports and the predicted times
(``benchmarks/results/auto_schedule_conformance.json``).
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _peers_workloads as W  # noqa: E402

DEFAULT = "axpy,softmax,jacobi,matmul,mlp"
SCHEDULES = ("hand", "auto")


def _grids(schedule) -> str:
    return ", ".join(f"{k}: {v}" for k, v in schedule.items()) or "none (rank 0)"


def prepare(wl, ranks, tag, machine):
    """Both schedules of one workload: predicted, lowered, built."""
    import dace_partition as dp
    from dace_partition.runtime.launch import build
    from dace_partition.search import predict
    out = {}
    base = wl.program().to_sdfg()
    if wl.prepare:
        wl.prepare(base)
    t = time.perf_counter()
    auto = dp.auto_schedule(base, ranks, machine=machine)
    search_s = time.perf_counter() - t
    for which, schedule in (("hand", wl.schedule(base, ranks)), ("auto", auto)):
        sdfg = wl.program().to_sdfg()
        if wl.prepare:
            wl.prepare(sdfg)
        sdfg.name = f"as_{wl.name}_{which}_{ranks}{tag}"
        pred = auto.predicted if which == "auto" else predict(base, schedule, ranks, machine=machine)
        dp.lower(sdfg, schedule)  # a Schedule keeps its fused map names (dict() would drop that)
        rep = dp.report(sdfg)
        out[which] = {"grids": _grids(schedule), "predicted_ms": pred.time * 1e3,
                      "predicted_bytes": pred.total_bytes, "report_bytes": rep.total_bytes,
                      "folder": build(sdfg)}
    out["auto"]["search_s"] = search_s
    out["auto"]["explain"] = auto.explain()
    return out


def conformance(out_path):
    """Hand against automatic schedules on every conformance program (lowered, not run)."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import dace_partition as dp
    from dace_partition.search import predict
    from conformance.harness import SLOW_COMPUTE, symbol_values
    from conformance.programs import CASES
    rows = []
    for name, case in CASES.items():
        for P in (2, 4):
            sizes = symbol_values(case)
            row = {"program": name, "P": P}
            for which in SCHEDULES:
                sdfg = case.program.to_sdfg()
                try:
                    if which == "hand":
                        schedule = case.schedule(P, dp.maps(sdfg))
                        pred = predict(sdfg, schedule, P, sizes=sizes, machine=SLOW_COMPUTE)
                    else:
                        schedule = dp.auto_schedule(sdfg, P, sizes=sizes, machine=SLOW_COMPUTE)
                        pred = schedule.predicted
                    dp.lower(sdfg, schedule)  # a Schedule keeps its fused map names (dict() would drop that)
                    per = dp.report(sdfg).bytes_per_rank(**sizes)
                    row[which] = {"bytes": sum(per) if per is not None else None, "predicted_ms": pred.time * 1e3,
                                  "grids": len(schedule)}
                except (dp.ScheduleError, dp.UnsupportedPattern) as e:
                    row[which] = {"refused": str(e).splitlines()[0][:200]}
            rows.append(row)
            print(row, flush=True)
    fewer = [r for r in rows if "bytes" in r["auto"] and "bytes" in r["hand"] and r["auto"]["bytes"] is not None
             and r["hand"]["bytes"] is not None and r["auto"]["bytes"] <= r["hand"]["bytes"]]
    faster = [r for r in rows if "bytes" in r["auto"] and "bytes" in r["hand"]
              and r["auto"]["predicted_ms"] <= r["hand"]["predicted_ms"] * (1 + 1e-9)]
    print(f"\n{len(rows)} runs: auto moves no more bytes than hand in {len(fewer)}; predicted no slower in "
          f"{len(faster)}; hand refused in {sum('refused' in r['hand'] for r in rows)}, "
          f"auto refused in {sum('refused' in r['auto'] for r in rows)}")
    print("| program | P | hand bytes | auto bytes | hand predicted ms | auto predicted ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        h, a = r["hand"], r["auto"]
        print(f"| {r['program']} | {r['P']} | {h.get('bytes', 'refused')} | {a.get('bytes', 'refused')} | "
              f"{h.get('predicted_ms', float('nan')):.3f} | {a.get('predicted_ms', float('nan')):.3f} |")
    with open(out_path, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "model": str(SLOW_COMPUTE), "rows": rows}, f, indent=1)
    print(f"wrote {out_path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="sizes divided by 8 (a quick check, not for README)")
    ap.add_argument("--only", default=DEFAULT, help="comma-separated workload names")
    ap.add_argument("--defaults", action="store_true", help="the model's default rates instead of calibrate()")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "auto_schedule.json"))
    ap.add_argument("--conformance", action="store_true", help="hand vs auto bytes on the conformance suite")
    args = ap.parse_args()
    if args.conformance:
        return conformance(os.path.join(HERE, "results", "auto_schedule_conformance.json"))
    args.scale = 8 if args.small else 1
    import dace_partition as dp
    from dace_partition.runtime import toolchain
    from dace_partition.runtime.launch import mpi_environment
    from vs_peers import run_variant, write_data
    machine = dp.Machine() if args.defaults else dp.calibrate(save=False)
    print(f"cost model: {machine}", flush=True)
    env = mpi_environment()
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, ".."), env.get("PYTHONPATH", "")])
    os.environ.update(env)
    names = args.only.split(",")
    workloads = [f(args.scale) for f in W.ALL if f.__name__ in names]
    tag = "_small" if args.small else ""
    tmp = tempfile.mkdtemp(prefix="dace_partition_auto_")
    setup = {}
    for wl in workloads:
        data = write_data(wl, tmp)
        t0 = time.perf_counter()
        setup[wl.name] = (data, prepare(wl, args.ranks, tag, machine))
        print(f"[{wl.name}] lowered and built in {time.perf_counter() - t0:.0f} s", flush=True)
    times = {wl.name: {s: [] for s in SCHEDULES} for wl in workloads}
    for r in range(args.rounds):
        for wl in workloads:
            data, info = setup[wl.name]
            for which in (SCHEDULES if r % 2 == 0 else SCHEDULES[::-1]):
                res = run_variant(wl, "ours_root", data, info[which]["folder"], args, env)
                times[wl.name][which].append(res)
                print(f"  round {r + 1} {wl.name:10s} {which}: {res}", flush=True)
    rows = []
    for wl in workloads:
        _, info = setup[wl.name]
        row = {"workload": wl.label, "name": wl.name}
        for which in SCHEDULES:
            good = [x for x in times[wl.name][which] if "time" in x and x.get("check") == "ok"]
            cell = {k: v for k, v in info[which].items() if k != "folder"}
            cell["measured_ms"] = min(x["time"] for x in good) * 1e3 if good else None
            cell["check"] = "ok" if good and len(good) == len(times[wl.name][which]) else \
                str((times[wl.name][which] or [{}])[0])
            row[which] = cell
        rows.append(row)
    print_table(rows, args.ranks)
    meta = {"ranks": args.ranks, "rounds": args.rounds, "reps": args.reps, "small": args.small,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "toolchain": str(toolchain.info()),
            "cost_model": str(machine), "date": time.strftime("%Y-%m-%d")}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


def print_table(rows, ranks):
    print(f"\nautomatic vs hand schedules on {ranks} ranks (io='root'; best call; bytes from the report)")
    print("| workload | hand grids | auto grids | bytes hand / auto | predicted ms hand / auto | "
          "measured ms hand / auto | search s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        h, a = r["hand"], r["auto"]

        def ms(x):
            return "-" if x is None else f"{x:.2f}"

        print(f"| {r['workload']} | {h['grids']} | {a['grids']} | {h['report_bytes']} / {a['report_bytes']} | "
              f"{ms(h['predicted_ms'])} / {ms(a['predicted_ms'])} | {ms(h['measured_ms'])} / {ms(a['measured_ms'])} | "
              f"{a['search_s']:.2f} |")
        for which in SCHEDULES:
            if r[which]["check"] != "ok":
                print(f"  {r['name']} {which}: {r[which]['check']}")


if __name__ == "__main__":
    main()
