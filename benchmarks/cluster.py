"""Measured against predicted on the emulated cluster (issue 34, part 3): communication time and bytes.

    tools/cluster-local start 4
    python benchmarks/cluster.py [--workloads jacobi,matmul,softmax] [--npbench atax,gemm | none] [--npb DIR]
                                 [--ranks 2,4,8,16] [--nodes 1,2,4] [--calls 5] [--runs 1] [--scale 4] [--sync]
                                 [--out benchmarks/results/cluster.json]

For each workload, P ranks and n emulated nodes (P / n consecutive ranks per node; combinations with fewer
ranks than nodes or P not a multiple of n are skipped):

* the program is lowered with the workload's hand schedule (``_peers_workloads.py``, sizes divided by
  ``--scale``, ``io="root"``) or, for NPBench kernels (S preset), the automatic schedule with
  ``io="distributed"`` (with root-held arguments the model keeps the S kernels on rank 0), with
  ``DACE_PARTITION_HIERARCHY=n x P/n`` so that the lowering (hierarchical reductions, the report's bytes
  per level) knows the placement it will run with;
* **predicted**: ``dp.search.predict`` of that schedule on a two-level :class:`Machine` whose links were
  measured once at the start with ``measure_link`` (a ping-pong of two ranks on one emulated node: shared
  memory; and on two nodes: TCP over the bridge), ``ranks_per_node = P / n``; its ``communication`` (seconds
  per call) and ``bytes_per_rank``, and the report's ``bytes_between_nodes``; "predicted*" was, in the run of
  2026-11-26, the same schedule with the kernels' own scatters and gathers priced by level too, which the
  model then missed; it does now, so both columns are the model's prediction;
* **measured**: ``count_run`` under ``srun -N n -O`` with the PMPI counter (``--sync``: with a barrier
  before each collective, timed apart, so that a collective's time is its transfer's), calling the program ``--calls``
  times in one launch (``--runs`` launches, interleaved over the configurations): the bytes each rank passed
  to MPI, and the wall seconds each rank spent inside MPI calls (``PMPI_Wtime`` around every wrapped call and
  around ``MPI_Wait*``). The figure compared is the slowest rank's MPI time of a call, best over calls 2..N
  and runs (the first call of a launch also opens the TCP connections; it is kept apart as ``first``).

The compute is oversubscribed: 4 emulated nodes of 2 CPUs each are 2 real cores, so 8 ranks share 2 cores
and 16 ranks share them 8 to a core. This benchmark therefore compares communication alone: the model's
communication term against the time inside MPI measured by PMPI. That time still includes waiting in a
collective for ranks that arrive late (those descheduled, or still computing), which the model does not
price: with more ranks than cores the measured MPI time is an upper bound of the transfer time, and the
ratio grows with oversubscription. MPICH also polls while it waits, competing with the ranks that compute.
The machine's load average is recorded at the start and end (other jobs may share it).

Outputs are not compared with NumPy here (with ``--calls > 1`` a program that updates its arguments goes on
from the previous call's values); tests/mpi/test_cluster.py checks the results on the same cluster.
Writes ``benchmarks/results/cluster.json`` after every configuration (a stopped run keeps what it measured).
"""
import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _peers_workloads as W  # noqa: E402

CLUSTER_DIR = os.environ.get("DP_CLUSTER_DIR", "/tmp/dp-cluster")
CONF = os.path.join(CLUSTER_DIR, "slurm.conf")
ALLOCATION_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_ID", "SLURM_NNODES",
                   "SLURM_JOB_NUM_NODES", "SLURM_TASKS_PER_NODE", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
                   "DACE_PARTITION_HIERARCHY", "DACE_PARTITION_LAUNCHER", "DACE_PARTITION_MACHINE")
TOLERANCE = 0.25


def cluster_environment(nodes_needed):
    """This process reaches the emulated cluster with srun (a new allocation, not a step of one)."""
    if not os.path.exists(CONF):
        sys.exit(f"cluster.py: no emulated cluster ({CONF} missing): tools/cluster-local start 4")
    for k in ALLOCATION_VARS:
        os.environ.pop(k, None)
    os.environ["SLURM_CONF"] = CONF
    os.environ["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30)
    up = [l.split()[0] for l in out.stdout.splitlines()
          if len(l.split()) == 2 and l.split()[1] in ("idle", "mixed", "allocated", "completing")]
    if out.returncode != 0 or len(up) < nodes_needed:
        sys.exit(f"cluster.py: the emulated cluster has {len(up)} node(s) up, {nodes_needed} needed: {out.stdout}"
                 f"{out.stderr}")
    return up


def launcher(nodes):
    # -O (overcommit): Slurm sees 2 CPUs per node; more ranks per node than that share them. The default
    # block distribution puts P / nodes consecutive ranks on each node (checked by tests/mpi/test_cluster.py).
    return ["srun", "-N", str(nodes), "-O"]


def calibrate_links():
    from dace_partition.search.machine import measure_link
    inside = measure_link(["srun", "-N", "1"])
    across = measure_link(["srun", "-N", "2", "--ntasks-per-node=1"])
    return inside, across


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------------
# Workloads: (name, label, sdfg factory, schedule(sdfg, P, machine) -> (schedule, prediction), inputs)


def peer_workload(name, scale):
    import dace_partition as dp
    wl = next(f for f in W.ALL if f.__name__ == name)(scale)
    inputs = wl.inputs(np.random.default_rng(0))

    def sdfg():
        s = wl.program().to_sdfg()
        if wl.prepare:
            wl.prepare(s)
        return s

    def schedule(s, P, m):
        sched = wl.schedule(s, P)
        return dict(sched), dp.search.predict(s, sched, P, machine=m), "hand"

    return {"name": name, "label": wl.label, "sdfg": sdfg, "schedule": schedule, "inputs": inputs}


def npbench_workload(kernel, npb_arg):
    import importlib.util
    import dace_partition as dp
    spec = importlib.util.spec_from_file_location("dp_npbench_driver", os.path.join(HERE, "npbench.py"))
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    npb = driver.find_npbench(npb_arg)
    sys.path[:] = [npb] + [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]
    import importlib
    info = driver.bench_infos(npb)[kernel]
    params = dict(info["parameters"]["S"])
    data = driver.initial_data(info, params)
    modpath = driver.module_path(info)

    def sdfg():
        s = getattr(importlib.import_module(modpath + "_dace"), info["func_name"]).to_sdfg()
        driver._specialize(s, data, params)
        return s

    names = set(sdfg().arglist())
    inputs = {k: v for k, v in data.items() if k in names}

    def schedule(s, P, m):
        # io="distributed": at the S sizes, with the arguments on rank 0 the model keeps these kernels on
        # rank 0 (scattering costs more than computing) and nothing would move
        sched = dp.auto_schedule(s, P, machine=m, io="distributed")
        return dict(sched), sched.predicted, "auto"

    label = f"NPBench {kernel} (S: {', '.join(f'{a}={v}' for a, v in params.items())}), io=distributed"
    return {"name": kernel, "label": label, "sdfg": sdfg, "schedule": schedule, "inputs": inputs, "io": "distributed"}


# ---------------------------------------------------------------------------------------------------


def configs(ranks, nodes, max_per_node):
    out = []
    for P in ranks:
        for n in nodes:
            if P < n or P % n or P // n > max_per_node:
                continue
            out.append((P, n))
    return out


def lower_for(wl, P, n, m):
    """The lowered SDFG of ``wl`` on P ranks over n nodes, its schedule and the prediction."""
    import dace_partition as dp
    s = wl["sdfg"]()
    s.name = f"cluster_{wl['name']}_p{P}_n{n}"
    sched, pred, how = wl["schedule"](s, P, m)
    io = wl.get("io", "root")
    fixed = pred  # "predicted*" of the 2026-11-26 run: the model now prices a kernel's own moves by level too
    os.environ["DACE_PARTITION_HIERARCHY"] = f"{n}x{P // n}"
    try:
        dp.lower(s, sched, io=io)
        rep = dp.report(s)
    finally:
        os.environ.pop("DACE_PARTITION_HIERARCHY", None)
    return s, sched, pred, fixed, how, rep


def measure(s, P, n, inputs, calls, timeout, sync=False):
    from dace_partition.runtime.mpi_count import count_run
    t0 = time.perf_counter()
    res = count_run(s, P, timeout=timeout, repeat=calls, launcher=launcher(n), sync=sync,
                    **{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    per_call = res.get("per_call") or [{"bytes": res["bytes"], "mpi_seconds": res["mpi_seconds"],
                                        "wait_seconds": res["wait_seconds"]}]
    return {"bytes": res["bytes"], "calls": {r: {k: list(v) for k, v in c.items()} for r, c in enumerate(res["calls"])},
            "mpi_s_per_call": [c["mpi_seconds"] for c in per_call],
            "wait_s_per_call": [c["wait_seconds"] for c in per_call],
            "sync_s_per_call": [c.get("sync_seconds") for c in per_call],
            "seconds_by_call_first": res["seconds_by_call"], "launch_s": round(time.perf_counter() - t0, 2)}


def summarize(row):
    """Best over calls and runs of the slowest rank's MPI time; the first call of each run apart."""
    later = [max(c) for run in row["runs"] for c in run["mpi_s_per_call"][1:]]
    first = [max(run["mpi_s_per_call"][0]) for run in row["runs"]]
    mean_best = min(float(np.mean(c)) for run in row["runs"] for c in run["mpi_s_per_call"][1:]) if later else None
    best = min(later) if later else min(first)
    row["measured_ms"] = best * 1e3
    row["measured_first_ms"] = min(first) * 1e3
    row["measured_mean_rank_ms"] = None if mean_best is None else mean_best * 1e3
    # the rank that waited least (the last to arrive at the collectives): closest to the transfer time alone
    least = [min(c) for run in row["runs"] for c in run["mpi_s_per_call"][1:]] or \
        [min(run["mpi_s_per_call"][0]) for run in row["runs"]]
    row["measured_least_rank_ms"] = min(least) * 1e3
    fx = row.get("predicted_comm_levels_fixed_ms")
    row["ratio_levels_fixed"] = row["measured_ms"] / fx if fx else None
    row["within_25pct_levels_fixed"] = row["ratio_levels_fixed"] is not None and \
        abs(row["ratio_levels_fixed"] - 1) <= TOLERANCE
    row["ratio_least_rank"] = row["measured_least_rank_ms"] / row["predicted_comm_ms"] if row["predicted_comm_ms"] > 0 else None
    row["ratio"] = row["measured_ms"] / row["predicted_comm_ms"] if row["predicted_comm_ms"] > 0 else None
    row["within_25pct"] = row["ratio"] is not None and abs(row["ratio"] - 1) <= TOLERANCE
    row["measured_bytes"] = row["runs"][0]["bytes"]
    row["bytes_agree"] = row["measured_bytes"] == row["predicted_bytes"]
    return row


HEADER = (f"{'workload':12} {'P':>3} {'N':>2} {'r/n':>3} {'sched':5} {'pred B':>10} {'PMPI B':>10} {'B off-node':>10} "
          f"{'pred ms':>8} {'pred* ms':>8} {'meas ms':>8} {'least':>7} {'1st ms':>8} {'meas/pred':>9} {'25%':>4} "
          f"{'m/pred*':>7} {'25%':>4} {'run s':>6}")


def line(r):
    if "error" in r:
        return f"{r['workload']:12} {r['ranks']:>3} {r['nodes']:>2}  error: {r['error'][:150]}"
    off = "-" if r["report_bytes_between_nodes"] is None else str(sum(r["report_bytes_between_nodes"]))
    ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
    return (f"{r['workload']:12} {r['ranks']:>3} {r['nodes']:>2} {r['ranks'] // r['nodes']:>3} {r['schedule_kind']:5} "
            f"{sum(r['predicted_bytes']):>10} {sum(r['measured_bytes']):>10} {off:>10} "
            f"{r['predicted_comm_ms']:>8.2f} {_f(r.get('predicted_comm_levels_fixed_ms')):>8} {r['measured_ms']:>8.2f} "
            f"{r['measured_least_rank_ms']:>7.2f} {r['measured_first_ms']:>8.2f} {ratio:>9} "
            f"{'yes' if r['within_25pct'] else 'no':>4} {_f(r.get('ratio_levels_fixed')):>7} "
            f"{'yes' if r.get('within_25pct_levels_fixed') else 'no':>4} {sum(x['launch_s'] for x in r['runs']):>6.1f}")


def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def markdown(result):
    rows = [r for r in result["rows"] if "error" not in r]
    out = ["| workload | P | nodes | ranks/node | schedule | bytes per call, predicted (= PMPI) | between nodes "
           "(report) | predicted comm. ms | pred.* ms (levels fixed) | measured MPI ms, slowest rank | least-waiting "
           "rank ms | first call ms | measured / predicted | within 25% | measured / pred.* | within 25% |",
           "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        off = "-" if r["report_bytes_between_nodes"] is None else f"{sum(r['report_bytes_between_nodes']):,}"
        agree = "=" if r["bytes_agree"] else f"≠ {sum(r['measured_bytes']):,}"
        out.append(f"| {r['workload']} | {r['ranks']} | {r['nodes']} | {r['ranks'] // r['nodes']} | {r['schedule_kind']} "
                   f"| {sum(r['predicted_bytes']):,} {agree} | {off} | {r['predicted_comm_ms']:.2f} | "
                   f"{_f(r.get('predicted_comm_levels_fixed_ms'))} | {r['measured_ms']:.2f} | "
                   f"{r['measured_least_rank_ms']:.2f} | {r['measured_first_ms']:.2f} | "
                   f"{_f(r['ratio'])} | {'yes' if r['within_25pct'] else 'no'} | {_f(r.get('ratio_levels_fixed'))} | "
                   f"{'yes' if r.get('within_25pct_levels_fixed') else 'no'} |")
    for r in result["rows"]:
        if "error" in r:
            out.append(f"| {r['workload']} | {r['ranks']} | {r['nodes']} | | | error: {r['error'][:80]} |" + " |" * 11)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="jacobi,matmul,softmax", help="peer workloads (_peers_workloads.py)")
    ap.add_argument("--npbench", default="none", help="NPBench kernels (S preset, automatic schedule), or none")
    ap.add_argument("--npb", default=None, help="NPBench clone (default: npbench.py's search)")
    ap.add_argument("--scale", type=int, default=4, help="divide the peer workloads' sizes by this")
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--nodes", default="1,2,4")
    ap.add_argument("--max-per-node", type=int, default=16, help="skip configurations with more ranks per node")
    ap.add_argument("--calls", type=int, default=5, help="program calls per launch (the first is kept apart)")
    ap.add_argument("--runs", type=int, default=1, help="launches per configuration, interleaved")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per launch")
    ap.add_argument("--deadline", default=None, help="UTC HH:MM: start no configuration after it")
    ap.add_argument("--sync", action="store_true", help="a barrier before each collective, outside its timed part "
                    "(DP_PMPI_SYNC=1): the measured time is the transfers', not the wait for late ranks")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cluster.json"))
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    nodes = [int(x) for x in args.nodes.split(",")]
    t_start = time.time()
    up = cluster_environment(max(nodes))
    import warnings
    warnings.filterwarnings("ignore")
    from dace_partition.search import machine as base_machine
    print(f"emulated cluster: {len(up)} nodes up ({', '.join(up)}); load average {loadavg()}", flush=True)
    # best of two calibrations (each a best of three ping-pongs): other jobs may share the 2 cores
    links = [calibrate_links() for _ in range(2)]
    ia, ib = min(l[0][0] for l in links), min(l[0][1] for l in links)
    xa, xb = min(l[1][0] for l in links), min(l[1][1] for l in links)
    base = base_machine()
    print(f"links (measure_link, once): inside a node alpha {ia * 1e6:.2f} us, {1 / ib / 1e9:.2f} GB/s; between "
          f"nodes alpha {xa * 1e6:.2f} us, {1 / xb / 1e9:.2f} GB/s\ncompute rates: {base}", flush=True)

    wls = [peer_workload(w, args.scale) for w in args.workloads.split(",") if w]
    if args.npbench != "none":
        for k in args.npbench.split(","):
            try:
                wls.append(npbench_workload(k, args.npb))
            except Exception as e:  # noqa: BLE001 - a kernel that does not load is said, not fatal
                print(f"NPBench {k}: not loaded ({type(e).__name__}: {str(e)[:300]})", flush=True)
    result = {"machine": platform.platform(), "cpus": os.cpu_count(), "started_utc": time.strftime("%H:%M:%S", time.gmtime()),
              "load_average_start": loadavg(),
              "links": {"inside": {"alpha_s": ia, "beta_s_per_B": ib}, "between": {"alpha_s": xa, "beta_s_per_B": xb}},
              "compute_rates": str(base), "calls_per_launch": args.calls, "runs": args.runs, "scale": args.scale,
              "tolerance": TOLERANCE, "command": " ".join([os.path.relpath(__file__, os.getcwd())] + sys.argv[1:]),
              "sync": args.sync,
              "method": "communication alone: the model's communication seconds per call against the slowest rank's "
                        "wall seconds inside MPI calls (PMPI_Wtime around each wrapped call and MPI_Wait*), best over "
                        "calls 2..N of each launch and over launches; " +
                        ("a barrier before each collective, not timed (--sync): collectives count their transfer "
                         "only; point-to-point calls (halo exchanges) still include waiting" if args.sync else
                         "includes waiting for late ranks (oversubscribed compute)"), "rows": []}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save():
        result["load_average_end"] = loadavg()
        result["wall_s"] = round(time.time() - t_start, 1)
        result["markdown"] = markdown(result)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    def late():
        if not args.deadline:
            return False
        hh, mm = map(int, args.deadline.split(":"))
        now = time.gmtime()
        return now.tm_hour * 60 + now.tm_min >= hh * 60 + mm

    print("\n" + HEADER, flush=True)
    rows = {}
    lowered = {}
    for run in range(args.runs):  # interleaved: every configuration once per round
        for P, n in configs(ranks, nodes, args.max_per_node):
            for wl in wls:
                if late():
                    print(f"deadline {args.deadline} UTC reached: stopping", flush=True)
                    save()
                    return
                key = (wl["name"], P, n)
                if key in rows and "error" in rows[key]:
                    continue
                m = dataclasses.replace(base, alpha=ia, beta=ib, node_alpha=xa, node_beta=xb, ranks_per_node=P // n,
                                        source=f"{base.source}; links measured on the emulated cluster")
                try:
                    if key not in lowered:
                        t0 = time.perf_counter()
                        s, sched, pred, fixed, how, rep = lower_for(wl, P, n, m)
                        off = rep.bytes_between_nodes()
                        if off is None and n == 1:
                            off = [0] * P  # one node: the report keeps no layout
                        lowered[key] = s
                        rows[key] = {"workload": wl["name"], "label": wl["label"], "ranks": P, "nodes": n,
                                     "io": wl.get("io", "root"),
                                     "schedule_kind": how, "grids": {k: str(v) for k, v in sched.items()},
                                     "predicted_comm_ms": pred.communication * 1e3,
                                     "predicted_comm_levels_fixed_ms": None if fixed is None else
                                     fixed.communication * 1e3,
                                     "predicted_compute_ms": pred.compute * 1e3,
                                     "predicted_bytes": list(pred.bytes_per_rank),
                                     "report_bytes": rep.bytes_per_rank(),
                                     "report_bytes_between_nodes": off,
                                     "lower_s": round(time.perf_counter() - t0, 1), "runs": []}
                    rows[key]["runs"].append(measure(lowered[key], P, n, wl["inputs"], args.calls, args.timeout,
                                                     args.sync))
                    summarize(rows[key])
                except Exception as e:  # noqa: BLE001 - recorded and shown, the sweep goes on
                    rows[key] = {"workload": wl["name"], "ranks": P, "nodes": n,
                                 "error": f"{type(e).__name__}: {str(e)[-600:]}"}
                result["rows"] = list(rows.values())
                save()
                if run == args.runs - 1 or "error" in rows[key]:
                    print(line(rows[key]), flush=True)
    save()
    ok = [r for r in result["rows"] if "error" not in r]
    within = sum(r["within_25pct"] for r in ok)
    agree = sum(r["bytes_agree"] for r in ok)
    within_fx = sum(bool(r.get("within_25pct_levels_fixed")) for r in ok)
    print(f"\n{within} of {len(ok)} configurations within {TOLERANCE:.0%} (measured MPI time of the slowest rank vs "
          f"predicted communication; {within_fx} against the levels-fixed prediction); bytes per rank equal to the "
          f"prediction in {agree} of {len(ok)}.\n"
          f"load average at start {result['load_average_start']}, at end {result['load_average_end']}; "
          f"wall {result['wall_s']:.0f} s; wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
