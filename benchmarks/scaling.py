"""How the predicted cost grows with the number of ranks: every workload lowered, not run, for P = 2 .. 1024.

    python benchmarks/scaling.py [--ranks 2,4,...,1024] [--peers axpy,softmax] [--npbench gemm,atax | all | none]
                                 [--limit 60] [--check | --no-check] [--out benchmarks/results/scaling.json]

Workloads: those of ``_peers_workloads.py`` at their sizes (with the automatic schedule and their hand
schedule scaled to P) and NPBench kernels at the S preset (automatic schedule; the loader of ``npbench.py``).
For each workload and P:

* ``auto``: ``dp.auto_schedule(sdfg, P)`` (its ``predicted``: time per rank, the bytes each rank receives),
  then ``dp.lower`` with that schedule and ``dp.report``: the lowered program's byte counts and messages;
* ``hand`` (peers only): ``dp.search.predict`` of the workload's own schedule for P, lowered the same way;
* ``ideal``: the work divided by P (the P=1 predicted compute time / P) plus the floor of the communication
  any root-io schedule needs (:func:`floor`), or the whole work on rank 0 where that is less (:func:`ideal_ms`);
* ``hand_distributed`` (peers only): the hand schedule priced with ``io="distributed"``, against its ideal
  (work / P plus the stencils' halos).

A search that takes longer than ``--limit`` seconds is stopped and recorded as such (the search prices
grid-to-grid moves by intersecting every pair of ranks' blocks: its time grows as P^2).

``--check`` (on by default) runs a few small workloads under real ``mpiexec -n P`` (P <= 8) with the PMPI
counter, compares every output element with NumPy and the bytes each rank passed to MPI with the report
and with the search's prediction. Writes ``benchmarks/results/scaling.json`` and ``scaling_*.png``.
"""
import argparse
import copy
import importlib
import importlib.util
import json
import math
import os
import platform
import signal
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _peers_workloads as W  # noqa: E402

PEERS = ["axpy", "softmax", "jacobi", "matmul", "mlp", "attention"]
# NPBench kernels by default: the ones the 2-rank run lowers quickly (npbench.json) and that span the classes:
# elementwise, matrix-vector, matrix products, stencils in time loops, a reduction
NPBENCH_DEFAULT = ["go_fast", "atax", "gesummv", "gemm", "k2mm", "jacobi_1d", "jacobi_2d", "azimint_naive"]
STENCILS = {"jacobi": 2 * 10}  # peers stencils: half-sweeps that each exchange one halo row per neighbour


IO = "root"  # --io: how the automatic schedule and its lowering take the arguments


class SearchTimeout(BaseException):  # not an Exception: no "except Exception" in DaCe may swallow it
    pass


def _alarm(signum, frame):
    raise SearchTimeout()


def timed(fn, limit):
    """(result or None, seconds, timed out): ``fn()`` stopped after ``limit`` seconds (SIGALRM)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    t0 = time.perf_counter()
    try:
        return fn(), time.perf_counter() - t0, False
    except SearchTimeout:
        return None, time.perf_counter() - t0, True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------------------
# The floor: what any root-io schedule moves


def arguments(sdfg):
    """({input: bytes}, {output: bytes}) of the non-transient arrays: read / written anywhere."""
    import dace
    from dace_partition.search.model import _const
    ins, outs = {}, {}
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, dace.nodes.AccessNode) or state.sdfg is not sdfg:
            continue
        desc = sdfg.arrays[node.data]
        if desc.transient:
            continue
        try:
            size = _const(desc.total_size, sdfg.constants) * desc.dtype.bytes
        except (TypeError, ValueError):  # a size the SDFG's constants do not fix
            size = 0
        if state.out_degree(node) > 0:
            ins[node.data] = size
        if state.in_degree(node) > 0:
            outs[node.data] = size
    return ins, outs


def floor(P, ins, outs, machine, halo_updates=0, row_bytes=0, io="root"):
    """(seconds, busiest rank's bytes, messages) that any schedule with root io needs on P ranks: every input
    scattered once (a rank receives 1/P of it), every output gathered once (rank 0 receives (P-1)/P of it),
    each in a tree of ceil(log2 P) messages; for a stencil also one halo row from each neighbour per update.
    Replicated operands, partial sums and redistributions between kernels are not in the floor. With
    ``io="distributed"`` the arguments stay where they are: only the halos remain."""
    if P == 1:
        return 0.0, 0, 0
    sides = min(P - 1, 2)  # neighbours of an inner rank
    halo = sides * halo_updates * row_bytes
    if io == "distributed":
        return machine.message_time(sides * halo_updates, halo), halo, sides * halo_updates
    rank0 = sum(outs.values()) * (P - 1) // P + halo_updates * row_bytes
    other = sum(ins.values()) // P + halo
    busiest = max(rank0, other)
    messages = math.ceil(math.log2(P)) * (len(ins) + len(outs)) + sides * halo_updates
    return machine.message_time(messages, busiest), busiest, messages


# ---------------------------------------------------------------------------------------------------
# One workload on P ranks


def report_counts(report, symbols):
    """(bytes per rank, minimum total for this schedule, messages per call) of a lowered program's report
    (``symbols``: the sizes, for loops whose trip count the report keeps as a formula)."""
    from dace_partition.report import _value
    per = report.bytes_per_rank(**symbols)
    msgs = 0
    for t in report.traffic:
        try:
            trips = int(_value(t.trips, dict(symbols)))
        except (TypeError, ValueError):
            trips = None
        if t.messages is None or trips is None:
            msgs = None
            break
        msgs += t.messages * trips
    return per, report.minimum_bytes, msgs


def lowered(sdfg0, schedule, P, symbols):
    import dace_partition as dp
    sdfg = copy.deepcopy(sdfg0)
    t0 = time.perf_counter()
    dp.lower(sdfg, schedule, io=IO if hasattr(schedule, "predicted") else "root")  # a Schedule keeps its fused names
    lower_s = time.perf_counter() - t0
    per, minimum, msgs = report_counts(dp.report(sdfg), symbols)
    return {"lower_s": round(lower_s, 3), "report_bytes_max": max(per) if per else None,
            "report_bytes_total": sum(per) if per else None, "report_minimum_total": minimum, "messages": msgs}


def add_lowering(row, sdfg0, schedule, P, symbols, limit):
    """Lowers ``schedule`` within ``limit`` seconds into ``row``: the report's counts and whether the model's
    bytes are the report's (or the status saying the lowering ran out of time)."""
    low, _, late = timed(lambda: lowered(sdfg0, schedule, P, symbols), limit)
    if late:
        row["status"] = f"lowering stopped after {limit:g} s"
    else:
        row.update(low)
        row["model_matches_report"] = row["report_bytes_total"] == row["model_bytes_total"]


def prediction(pred):
    return {"predicted_ms": pred.time * 1e3, "compute_ms": pred.compute * 1e3, "comm_ms": pred.communication * 1e3,
            "model_bytes_max": max(pred.bytes_per_rank or [0]), "model_bytes_total": pred.total_bytes}


def one_p(sdfg0, P, hand, limit, symbols):
    """{"auto": {...}, "hand": {...}} for P ranks (``hand``: (sdfg) -> schedule, or None)."""
    import dace_partition as dp
    from dace_partition.search import predict
    out = {}
    sched, secs, late = timed(lambda: dp.auto_schedule(sdfg0, P, io=IO), limit)
    if late:
        out["auto"] = {"status": f"search stopped after {limit:g} s", "search_s": round(secs, 2)}
    else:
        row = {"status": "ok", "search_s": round(secs, 3), "method": sched.method,
               "grids": {k: str(v) for k, v in sched.items()}, **prediction(sched.predicted)}
        try:
            add_lowering(row, sdfg0, sched, P, symbols, limit)
        except (dp.ScheduleError, dp.UnsupportedPattern) as e:
            row["status"] = "lowering refused: " + str(e).splitlines()[0][:200]
        out["auto"] = row
    if hand is not None:
        try:
            schedule = hand(sdfg0, P)
            pred, secs, late = timed(lambda: predict(sdfg0, schedule, P), limit)
            if late:
                out["hand"] = {"status": f"pricing stopped after {limit:g} s"}
            else:
                row = {"status": "ok", "predict_s": round(secs, 3), **prediction(pred)}
                add_lowering(row, sdfg0, schedule, P, symbols, limit)
                out["hand"] = row
                # the same schedule with io="distributed": priced only (arguments already on their ranks)
                pred, secs, late = timed(lambda: predict(sdfg0, schedule, P, io="distributed"), limit)
                if not late:
                    out["hand_distributed"] = {"status": "ok", "predict_s": round(secs, 3), **prediction(pred)}
        except (dp.ScheduleError, dp.UnsupportedPattern, ValueError) as e:
            out["hand"] = {"status": "refused: " + str(e).splitlines()[0][:200]}
    return out


def sweep(name, label, sdfg0, ranks, hand, limit, halo=(0, 0), extra=None):
    import dace_partition as dp
    from dace_partition.search import machine
    m = machine()
    base = dp.auto_schedule(sdfg0, 1).predicted
    ins, outs = arguments(sdfg0)
    rec = {"name": name, "label": label, "work_ms": base.compute * 1e3, "inputs_bytes": ins, "outputs_bytes": outs,
           "halo_updates": halo[0], "halo_row_bytes": halo[1], "points": {}, **(extra or {})}
    print(f"\n[{name}] {label}: work {base.compute * 1e3:.3f} ms on one rank", flush=True)
    print(f"  {'P':>5} {'mode':6} {'pred ms':>10} {'ideal ms':>9} {'max B/rank':>12} {'report max':>12} "
          f"{'total B':>13} {'= report':>8} {'msgs':>7} {'search s':>8} {'lower s':>7}  grids", flush=True)
    for P in ranks:
        t_floor, b_floor, m_floor = floor(P, ins, outs, m, *halo)
        point = one_p(sdfg0, P, hand, limit, {k: v for k, v in (extra or {}).get("sizes", {}).items()
                                                 if isinstance(v, int)})
        point["ideal"] = {"predicted_ms": (base.compute / P + t_floor) * 1e3, "work_ms": base.compute / P * 1e3,
                          "floor_ms": t_floor * 1e3, "floor_bytes_max": b_floor, "floor_messages": m_floor}
        t_dist = floor(P, ins, outs, m, *halo, io="distributed")[0]
        point["ideal_distributed"] = {"predicted_ms": (base.compute / P + t_dist) * 1e3, "floor_ms": t_dist * 1e3}
        rec["points"][str(P)] = point
        for mode in ("auto", "hand", "hand_distributed"):
            r = point.get(mode)
            if r is None:
                continue
            if "predicted_ms" not in r:
                print(f"  {P:>5} {mode[:6]:6} {r['status']}", flush=True)
                continue
            ideal = point["ideal_distributed" if mode == "hand_distributed" else "ideal"]["predicted_ms"]
            tag = mode[:4] + ("/d" if mode == "hand_distributed" else "")
            print(f"  {P:>5} {tag:6} {r['predicted_ms']:>10.3f} {ideal:>9.3f} "
                  f"{r['model_bytes_max']:>12} {str(r.get('report_bytes_max')):>12} {r['model_bytes_total']:>13} "
                  f"{str(r.get('model_matches_report')):>8} "
                  f"{str(r.get('messages')):>7} {r.get('search_s', r.get('predict_s', 0)):>8.2f} "
                  f"{r.get('lower_s', 0):>7.2f}  {r.get('grids', '') if mode == 'auto' else ''}"
                  f"{'' if r['status'] == 'ok' else '  (' + r['status'] + ')'}", flush=True)
    return rec


# ---------------------------------------------------------------------------------------------------
# Workloads


def peers_records(names, ranks, limit, keep):
    for f in W.ALL:
        if f.__name__ not in names:
            continue
        wl = f(1)
        sdfg0 = wl.program().to_sdfg()
        if wl.prepare:
            wl.prepare(sdfg0)
        halo = (0, 0)
        if wl.name in STENCILS:
            desc = sdfg0.arrays["A"]
            halo = (STENCILS[wl.name], (int(desc.shape[1]) - 2) * desc.dtype.bytes)
        keep(sweep(wl.name, wl.label, sdfg0, ranks, wl.schedule, limit, halo, {"suite": "peers"}))


def thesis_records(ranks, limit, keep):
    """The thesis' weak point of reference: an 8192^3 FP64 matrix product (automatic schedule)."""
    import dace
    n = 8192

    @dace.program
    def matmul_8192(a: dace.float64[n, n], b: dace.float64[n, n]):
        return a @ b

    keep(sweep("matmul_8192", "matmul 8192^3 FP64 (the thesis' example)", matmul_8192.to_sdfg(), ranks, None, limit,
               extra={"suite": "thesis"}))


def load_npbench_driver():
    """``benchmarks/npbench.py`` as a module of another name (NPBench's own package is called npbench)."""
    spec = importlib.util.spec_from_file_location("dp_npbench_driver", os.path.join(HERE, "npbench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def npbench_sdfg(driver, npb, kernel, preset="S"):
    """The kernel's DaCe program as an SDFG with its symbols fixed to the preset's sizes (as npbench.py's
    child does: the preset's parameters and the initialized arrays' extents)."""
    info = driver.bench_infos(npb)[kernel]
    params = dict(info["parameters"][preset])
    modpath = driver.module_path(info)
    data = driver.initial_data(info, params)
    sdfg = getattr(importlib.import_module(modpath + "_dace"), info["func_name"]).to_sdfg()
    driver._specialize(sdfg, data, params)
    return sdfg, params


def npbench_records(kernels, ranks, limit, npb_arg, keep):
    driver = load_npbench_driver()
    npb = driver.find_npbench(npb_arg)
    # NPBench's package must win over this folder's npbench.py
    sys.path[:] = [npb] + [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]
    known = driver.bench_infos(npb)
    if kernels == ["all"]:
        kernels = sorted(known)
    for k in kernels:
        if k not in known:
            sys.exit(f"scaling.py: unknown NPBench kernel {k!r}; known: {', '.join(sorted(known))}")
        try:
            sdfg0, params = npbench_sdfg(driver, npb, k)
        except Exception as e:  # noqa: BLE001 - a kernel DaCe cannot parse is recorded, not fatal
            keep({"name": k, "suite": "npbench", "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(f"\n[{k}] not parsed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        label = f"NPBench {k} (S: {', '.join(f'{a}={v}' for a, v in params.items())})"
        keep(sweep(k, label, sdfg0, ranks, None, limit, extra={"suite": "npbench", "sizes": params}))


# ---------------------------------------------------------------------------------------------------
# Real runs: the counted model against the PMPI count


CHECKS = [("softmax", 8, (2, 4, 8)), ("jacobi", 16, (2, 8)), ("matmul", 8, (4, 8))]


def check_runs(checks, limit):
    """Each (workload, size divisor, ranks): lowered with the automatic schedule, run under mpiexec with the
    PMPI counter; every output element against NumPy, counted bytes against the report and the search."""
    import dace_partition as dp
    from dace_partition.runtime.mpi_count import count_run
    rows = []
    for name, scale, ranks in checks:
        wl = next(f for f in W.ALL if f.__name__ == name)(scale)
        inputs = wl.inputs(np.random.default_rng(0))
        ref = np.asarray(wl.numpy(**{k: v.copy() for k, v in inputs.items()}))
        for P in ranks:
            sdfg = wl.program().to_sdfg()
            if wl.prepare:
                wl.prepare(sdfg)
            sdfg.name = f"scaling_{name}_{P}"
            sched, _, late = timed(lambda: dp.auto_schedule(sdfg, P), limit)
            if late:
                rows.append({"workload": wl.label, "ranks": P, "status": "search stopped"})
                continue
            dp.lower(sdfg, dict(sched))
            report = dp.report(sdfg).bytes_per_rank()
            t0 = time.perf_counter()
            res = count_run(sdfg, P, **{k: v.copy() for k, v in inputs.items()})
            got = res["outputs"]
            if isinstance(got, dict):
                got = np.stack([got["A"], got["B"]])
            got = np.asarray(got)
            ok = got.shape == ref.shape and bool(np.all(np.abs(got - ref) <= wl.rtol * (np.abs(ref) + 1.0)))
            row = {"workload": wl.label, "ranks": P, "grids": {k: str(v) for k, v in sched.items()},
                   "pmpi_bytes": res["bytes"], "report_bytes": report,
                   "search_bytes": list(sched.predicted.bytes_per_rank), "outputs_match_numpy": ok,
                   "report_agrees": res["bytes"] == report,
                   "search_agrees": res["bytes"] == list(sched.predicted.bytes_per_rank),
                   "run_s": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(f"  {wl.label:45s} P={P}: PMPI {sum(res['bytes'])} B {res['bytes']}\n"
                  f"  {'':45s}      report {sum(report)} B, search {sum(row['search_bytes'])} B; "
                  f"report agrees: {row['report_agrees']}, search agrees: {row['search_agrees']}, "
                  f"outputs match NumPy: {ok}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------------
# Plots


def plot(records, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recs = [r for r in records if "points" in r]
    if not recs:
        return None
    cols = 3
    rows = -(-len(recs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, rec in zip(axes.flat, recs):
        Ps = sorted(int(p) for p in rec["points"])
        for mode, style in (("auto", "o-"), ("hand", "s--")):
            xs = [P for P in Ps if "predicted_ms" in rec["points"][str(P)].get(mode, {})]
            if xs:
                ax.plot(xs, [rec["points"][str(P)][mode]["predicted_ms"] for P in xs], style, ms=3,
                        label=f"{mode} schedule")
        xs = [P for P in Ps if "predicted_ms" in rec["points"][str(P)].get("hand_distributed", {})]
        if xs:
            ax.plot(xs, [rec["points"][str(P)]["hand_distributed"]["predicted_ms"] for P in xs], "^-", ms=3,
                    color="tab:green", label="hand, io=distributed")
            ax.plot(Ps, [ideal_ms(rec, rec["points"][str(P)], "ideal_distributed") for P in Ps], ":",
                    color="tab:green", label="ideal, io=distributed")
        ax.plot(Ps, [ideal_ms(rec, rec["points"][str(P)]) for P in Ps], "k:", label="ideal, io=root")
        ax.plot(Ps, [rec["work_ms"] / P for P in Ps], color="0.7", lw=0.8, label="work / P")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(rec["name"], fontsize=9)
        ax.set_xlabel("ranks P", fontsize=8)
        ax.set_ylabel("predicted ms per rank", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", lw=0.3)
    for ax in list(axes.flat)[len(recs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ideal_ms(rec, point, key="ideal"):
    """The ideal of one point: work / P plus the floor, or the whole work on rank 0 where that is less (with root
    io a schedule may leave a kernel on rank 0 and move nothing: atax's matrix costs more to scatter than to
    multiply)."""
    return min(rec["work_ms"], point[key]["predicted_ms"])


def write_plots(records, out):
    base = os.path.splitext(out)[0]
    return [plot([r for r in records if r.get("suite") in ("peers", "thesis")], base + "_peers.png",
                 "vs_peers workloads (and the thesis' matmul): predicted time per rank (cost model)"),
            plot([r for r in records if r.get("suite") == "npbench"], base + "_npbench.png",
                 "NPBench kernels (S preset): predicted time per rank, automatic schedule, io=root")]


def markdown(data, ranks):
    """The Markdown table of docs/scaling.md from a results file: per workload and P, the predicted time per
    rank of each schedule against the ideal, the busiest rank's bytes and the search and lowering seconds."""
    head = ["workload", "P", "auto ms", "hand ms", "ideal ms", "auto / ideal", "busiest rank B (auto)", "messages",
            "search s", "lowering s", "hand, io=distributed ms", "its ideal ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in data["workloads"]:
        if "points" not in rec:
            lines.append(f"| {rec['name']} | | {rec.get('error', '')[:60]} |" + " |" * (len(head) - 3))
            continue
        for P in ranks:
            pt = rec["points"].get(str(P))
            if pt is None:
                continue
            a, h, ideal = pt.get("auto", {}), pt.get("hand", {}), ideal_ms(rec, pt)

            def ms(r):
                if "predicted_ms" in r:
                    return f"{r['predicted_ms']:.3g}"
                return r.get("status", "").replace("search stopped", "search >").replace("after ", "")[:24]
            ratio = f"{a['predicted_ms'] / ideal:.2f}" if "predicted_ms" in a and ideal > 0 else ""
            secs = a.get("search_s")
            lines.append("| " + " | ".join([
                rec["name"] if P == ranks[0] or str(ranks[0]) not in rec["points"] else "", str(P), ms(a),
                ms(h) if h else "", f"{ideal:.3g}", ratio,
                f"{a['model_bytes_max']:,}" if "model_bytes_max" in a else "",
                str(a.get("messages", "")), f"{secs:.1f}" if secs is not None else "",
                f"{a['lower_s']:.1f}" if "lower_s" in a else "", ms(pt["hand_distributed"]) if "hand_distributed" in pt
                else "", f"{ideal_ms(rec, pt, 'ideal_distributed'):.3g}" if "hand_distributed" in pt else ""]) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default=",".join(str(1 << i) for i in range(1, 11)))
    ap.add_argument("--peers", default=",".join(PEERS), help="peers workloads ('none': skip)")
    ap.add_argument("--npbench", default=",".join(NPBENCH_DEFAULT), help="NPBench kernels, 'all' or 'none'")
    ap.add_argument("--npbench-dir", default=None, help="NPBench checkout (as npbench.py --npbench)")
    ap.add_argument("--limit", type=float, default=60.0, help="seconds one search may take (default 60)")
    ap.add_argument("--check", dest="check", action="store_true", default=True)
    ap.add_argument("--no-check", dest="check", action="store_false", help="skip the PMPI runs")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "scaling.json"))
    ap.add_argument("--machine", default=None, help="price on a named machine (DACE_PARTITION_MACHINE: 'daint', "
                    "or a JSON file of Machine's fields) instead of this one's calibration")
    ap.add_argument("--thesis", action="store_true", help="also the thesis' 8192^3 matmul")
    ap.add_argument("--io", choices=("root", "distributed"), default="root",
                    help="io of the automatic schedule (the hand schedules stay root, priced distributed beside)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the workloads (and PMPI checks) of an existing --out that this run does not redo")
    ap.add_argument("--plots-only", action="store_true", help="draw the plots of --out again and exit")
    ap.add_argument("--table", metavar="RANKS", help="print the Markdown table of --out for these P (e.g. 2,8,64,1024) "
                    "and exit")
    args = ap.parse_args()
    if args.table:
        with open(args.out) as f:
            print(markdown(json.load(f), [int(x) for x in args.table.split(",")]))
        return
    if args.plots_only:
        with open(args.out) as f:
            write_plots(json.load(f)["workloads"], args.out)
        return
    ranks = [int(x) for x in args.ranks.split(",")]
    if args.machine:
        os.environ["DACE_PARTITION_MACHINE"] = args.machine
    global IO
    IO = args.io
    import warnings
    warnings.filterwarnings("ignore")
    from dace_partition.search import machine
    t0 = time.perf_counter()
    records = []

    def keep(rec):
        """Each workload's record as soon as it is done: a stopped run keeps them in OUT.partial."""
        records.append(rec)
        with open(args.out + ".partial", "w") as f:
            json.dump({"workloads": records}, f, indent=1, default=str)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    peers = [] if args.peers == "none" else args.peers.split(",")
    peers_records(peers, ranks, args.limit, keep)
    if args.thesis:
        thesis_records(ranks, args.limit, keep)
    checks = []
    if args.check:
        print("\nPMPI counts of real runs (small sizes) against the counted model", flush=True)
        checks = check_runs(CHECKS, args.limit)
    if args.npbench != "none":
        npbench_records(args.npbench.split(","), ranks, args.limit, args.npbench_dir, keep)
    meta = {"ranks": ranks, "limit_s": args.limit, "machine_model": str(machine()), "io_auto": IO, "host": platform.platform(),
            "cpus": os.cpu_count(), "loadavg_end": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "seconds": round(time.perf_counter() - t0, 1)}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f)
        done = {r["name"] for r in records}
        records = [r for r in old.get("workloads", []) if r["name"] not in done] + records
        checks = checks or old.get("pmpi_check", [])
        meta["merged_with"] = old.get("meta")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "workloads": records, "pmpi_check": checks}, f, indent=1, default=str)
    if os.path.exists(args.out + ".partial"):
        os.remove(args.out + ".partial")
    plots = write_plots(records, args.out)
    print(f"\nwrote {args.out}" + "".join(f", {p}" for p in plots if p) + f" ({meta['seconds']:.0f} s)")
    if checks and not all(c.get("report_agrees") and c.get("outputs_match_numpy") for c in checks):
        sys.exit("scaling.py: a PMPI count or an output disagrees (see above)")


if __name__ == "__main__":
    main()
