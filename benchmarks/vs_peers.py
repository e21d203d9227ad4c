"""dace-partition against its peers, measured in one run (issue: faster than the hand-written MPI).

For each workload of ``_peers_workloads.py``, every variant runs in a process of its own (so its peak
RSS is its own), checked against NumPy on a warm-up call and then timed:

* ``ours_root`` / ``ours_dist``: the lowered program (``io="root"`` / ``io="distributed"``) on P ranks;
* ``mpi4py_root`` / ``mpi4py_dist``: the same computation written by hand with mpi4py + NumPy, with
  the data on rank 0 / already distributed;
* ``numpy``: NumPy in one process, one thread (``OMP_NUM_THREADS=1``, as every rank has);
* ``jax``: JAX with P CPU devices, inputs placed with ``NamedSharding`` before timing;
* ``dace_1``: the same DaCe program, not lowered, in one process (same BLAS, one thread).

Rounds interleave the variants (each round in a rotated order); a variant's time is its best call over
all rounds. Ratios are to the best variant of the row. Writes ``benchmarks/results/vs_peers.json``.

    python benchmarks/vs_peers.py [--ranks 2] [--rounds 3] [--reps 3] [--small] [--only matmul,mlp]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _peers_workloads as W  # noqa: E402

VARIANTS = ["ours_root", "ours_dist", "mpi4py_root", "mpi4py_dist", "numpy", "jax", "dace_1"]
MPI_VARIANTS = VARIANTS[:4]


def build(wl, ranks, tag):
    """Lowers and builds both io modes and the one-process program; returns {variant: folder or error}."""
    import dace_partition as dp
    from dace_partition.runtime import toolchain
    from dace_partition.runtime.launch import build as build_lowered
    from dace_partition.passes.partition import single_threaded as _single_threaded
    out, lower_s = {}, {}
    for variant, io in (("ours_root", "root"), ("ours_dist", "distributed")):
        sdfg = wl.program().to_sdfg()
        if wl.prepare:
            wl.prepare(sdfg)
        sdfg.name = f"vp_{wl.name}_{io[:4]}_{ranks}{tag}"
        t0 = time.perf_counter()
        try:
            dp.lower(sdfg, wl.schedule(sdfg, ranks), io=io)
        except (dp.ScheduleError, dp.UnsupportedPattern) as e:
            out[variant] = ("refused", str(e).splitlines()[0][:160])
            continue
        lower_s[variant] = time.perf_counter() - t0
        out[variant] = ("ok", build_lowered(sdfg))
        if variant == "ours_root":
            out["report"] = str(dp.report(sdfg))
    sdfg = wl.program().to_sdfg()
    if wl.prepare:
        wl.prepare(sdfg)
    sdfg.name = f"vp_{wl.name}_single{tag}"
    _single_threaded(sdfg)  # the same local optimizations as a lowered program gets
    import dace
    with dace.config.temporary_config(), toolchain.blas_build():
        dace.Config.set("store_history", value=False)
        sdfg.compile(return_program_handle=False)
    out["dace_1"] = ("ok", sdfg.build_folder)
    return out, lower_s


def write_data(wl, tmp) -> str:
    """The workload's inputs and NumPy's result as .npy files in a folder of their own (read by the workers)."""
    data = os.path.join(tmp, wl.name)
    os.makedirs(data)
    inputs = wl.inputs(np.random.default_rng(0))
    for k, v in inputs.items():
        np.save(os.path.join(data, f"{k}.npy"), v)
    np.save(os.path.join(data, "__ref.npy"), np.asarray(wl.numpy(**{k: v.copy() for k, v in inputs.items()})))
    return data


def run_variant(wl, variant, data, folder, args, env):
    reps = wl.reps or (max(1, args.reps - 2) if wl.heavy else args.reps)
    worker = [sys.executable, os.path.join(HERE, "_peers_worker.py"), wl.name, variant, data, folder or "",
              "--reps", str(reps), "--scale", str(args.scale), "--ranks", str(args.ranks)]
    from dace_partition.runtime.launch import mpiexec_command
    if variant in MPI_VARIANTS:
        cmd = mpiexec_command(args.ranks) + [sys.executable, "-m", "mpi4py"] + worker[1:]
    else:  # through the launcher too: a child forked from this process would inherit its peak RSS
        cmd = mpiexec_command(1) + worker
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["failed"]}
    return json.loads(line[len("RESULT "):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="timed calls per run (heavy workloads: reps - 2)")
    ap.add_argument("--small", action="store_true", help="sizes divided by 8 (a quick check, not for README)")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "vs_peers.json"))
    args = ap.parse_args()
    args.scale = 8 if args.small else 1
    from dace_partition.runtime import toolchain
    from dace_partition.runtime.launch import mpi_environment
    env = mpi_environment()
    env["OMP_NUM_THREADS"] = "1"
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.ranks}"
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, ".."), env.get("PYTHONPATH", "")])
    os.environ.update(env)
    workloads = [f(args.scale) for f in W.ALL if not args.only or f.__name__ in args.only.split(",")]
    tag = "_small" if args.small else ""
    tmp = tempfile.mkdtemp(prefix="dace_partition_peers_")
    setup = {}
    for wl in workloads:
        data = write_data(wl, tmp)
        t0 = time.perf_counter()
        folders, lower_s = build(wl, args.ranks, tag)
        print(f"[{wl.name}] built in {time.perf_counter() - t0:.0f} s", flush=True)
        setup[wl.name] = (data, folders, lower_s)
    results = {wl.name: {v: [] for v in VARIANTS} for wl in workloads}
    for r in range(args.rounds):
        for wl in workloads:
            data, folders, _ = setup[wl.name]
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for v in order:
                if v in folders and folders[v][0] == "refused":
                    continue
                folder = folders[v][1] if v in folders else ""
                try:
                    res = run_variant(wl, v, data, folder, args, env)
                except subprocess.TimeoutExpired:
                    res = {"error": [f"timeout after {args.timeout} s"]}
                results[wl.name][v].append(res)
                print(f"  round {r + 1} {wl.name:10s} {v:12s} {res}", flush=True)
    rows = []
    for wl in workloads:
        _, folders, lower_s = setup[wl.name]
        row = {"workload": wl.label, "name": wl.name, "variants": {}, "lower_s": lower_s,
               "report": folders.get("report", "")}
        for v in VARIANTS:
            runs = results[wl.name][v]
            if v in folders and folders[v][0] == "refused":
                row["variants"][v] = {"refused": folders[v][1]}
                continue
            good = [x for x in runs if "time" in x]
            bad = [x for x in runs if "time" not in x or x.get("check") != "ok"]
            if not good or bad:
                row["variants"][v] = {"error": (bad or runs or [{"error": "no run"}])[0]}
                continue
            row["variants"][v] = {"time": min(x["time"] for x in good),
                                  "rss_mb": max((x["rss_mb"] for x in good), key=max), "check": "ok"}
        best = min((x["time"] for x in row["variants"].values() if "time" in x), default=None)
        for x in row["variants"].values():
            if "time" in x:
                x["ratio"] = x["time"] / best
        rows.append(row)
    print_table(rows, args.ranks)
    meta = {"ranks": args.ranks, "rounds": args.rounds, "reps": args.reps, "small": args.small,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "toolchain": str(toolchain.info()),
            "date": time.strftime("%Y-%m-%d")}
    if not args.small or args.out != ap.get_default("out"):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"wrote {args.out}")


def cell(x):
    if "refused" in x:
        return "refused"
    if "error" in x:
        return "error"
    return f"{x['ratio']:.2f}"


def print_table(rows, ranks):
    print(f"\nratio to the best variant of each row (best of the rounds; {ranks} ranks / devices)")
    head = ["workload"] + VARIANTS + ["best (ms)"]
    print(" | ".join(head))
    for row in rows:
        best = min((x["time"] for x in row["variants"].values() if "time" in x), default=float("nan"))
        print(" | ".join([row["workload"]] + [cell(row["variants"][v]) for v in VARIANTS] + [f"{best * 1e3:.3g}"]))
    for row in rows:
        for v, x in row["variants"].items():
            if "refused" in x or "error" in x:
                print(f"  {row['name']} {v}: {x}")


if __name__ == "__main__":
    main()
