"""dace-partition against its peers, measured in one run (issue: faster than the hand-written MPI).

For each workload of ``_peers_workloads.py``, every variant runs in a process of its own (so its peak
RSS is its own), checked against NumPy on a warm-up call and then timed:

* ``ours_root`` / ``ours_dist``: the lowered program (``io="root"`` / ``io="distributed"``) on P ranks;
* ``mpi4py_root`` / ``mpi4py_dist``: the same computation written by hand with mpi4py + NumPy, with
  the data on rank 0 / already distributed;
* ``numpy``: NumPy in one process, one thread (``OMP_NUM_THREADS=1``, as every rank has);
* ``jax``: JAX with P CPU devices, inputs placed with ``NamedSharding`` before timing;
* ``dace_1``: the same DaCe program, not lowered, in one process (same BLAS, one thread), with the local
  optimizations and the buffer layout of a lowered program (``runtime.restrict.build_like_lowered``).

Rounds interleave the variants (each round in a rotated order); a variant's time is its best call over
all rounds. Ratios are to the best variant of the row. Writes ``benchmarks/results/vs_peers.json``.

The machine may be shared, so every measurement says what it ran under: each process's NumPy / BLAS /
OpenMP configuration (``threadpoolctl``: library, version, threads; printed once per variant, kept in the
JSON), the load average, and the share of the best call each process spent on a core (CPU time / wall
time, ``cpu_share``: a process that waited for a core shows less than 1). A variant is *stable* when its
best time was measured twice, in two rounds within ``--tolerance`` (1.3x) of each other; an unstable one is
measured again in extra rounds (``--repeats``), and if it still is not, its cell is marked ``*``. Two rounds
can agree and both be slow: a cell whose best call had a CPU share under 0.8 is marked ``~`` (loaded; the
time is not the program's). Ranks of the MPI variants each need a core at the same time, so load slows them
more than the one-process peers: compare rows measured with every share near 1.

    python benchmarks/vs_peers.py [--ranks 2] [--rounds 3] [--reps 3] [--small] [--only matmul,mlp]
                                  [--tolerance 1.3] [--repeats 3]
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
# a best call with less CPU time than this share of its wall time waited for a core: the machine was loaded
LOADED = 0.8


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
    from dace_partition.passes.local_optimize import optimize_local
    optimize_local(sdfg)  # the same local optimizations as a lowered program gets (map fusion, GEMMs)
    _single_threaded(sdfg)
    from dace_partition.runtime.restrict import build_like_lowered
    build_like_lowered(sdfg)  # and its memory: buffers allocated once, loops over them on restrict pointers
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
    if variant == "jax" and os.environ.get("VS_PEERS_JAX_PYTHON"):  # JAX from another environment (its NumPy)
        worker[0] = os.environ["VS_PEERS_JAX_PYTHON"]
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
    ap.add_argument("--tolerance", type=float, default=1.3,
                    help="two rounds' best times within this factor make a variant stable (default 1.3)")
    ap.add_argument("--repeats", type=int, default=3, help="extra rounds at most for unstable variants")
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
    configs = {}
    loads = [os.getloadavg()[0]]

    def measure(r, wl, v):
        data, folders, _ = setup[wl.name]
        folder = folders[v][1] if v in folders else ""
        try:
            res = run_variant(wl, v, data, folder, args, env)
        except subprocess.TimeoutExpired:
            res = {"error": [f"timeout after {args.timeout} s"]}
        res["round"] = r + 1
        results[wl.name][v].append(res)
        loads.append(os.getloadavg()[0])
        show_config(wl.name, v, res.get("config"), configs)
        brief = {k: res[k] for k in ("time", "check", "cpu_share", "load", "error") if k in res}
        print(f"  round {r + 1} {wl.name:10s} {v:12s} {brief}", flush=True)

    for r in range(args.rounds):
        for wl in workloads:
            folders = setup[wl.name][1]
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for v in order:
                if not (v in folders and folders[v][0] == "refused"):
                    measure(r, wl, v)
    # variants whose best time no second round confirms: measured again, in rounds of their own
    for extra in range(args.repeats):
        todo = [(wl, v) for wl in workloads for v in VARIANTS
                if results[wl.name][v] and all("time" in x for x in results[wl.name][v])
                and not stability(results[wl.name][v], args.tolerance)[0]]
        if not todo:
            break
        print(f"extra round {extra + 1}: {len(todo)} unstable variant(s): "
              + ", ".join(f"{wl.name}/{v}" for wl, v in todo), flush=True)
        for wl, v in todo:
            measure(args.rounds + extra, wl, v)
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
            stable, spread = stability(good, args.tolerance)
            best = min(good, key=lambda x: x["time"])
            row["variants"][v] = {"time": best["time"], "rss_mb": max((x["rss_mb"] for x in good), key=max),
                                  "check": "ok", "stable": stable, "spread": spread,
                                  "rounds_ms": [round(x["time"] * 1e3, 3) for x in good],
                                  "cpu_share": best.get("cpu_share"), "load": best.get("load"),
                                  "config": configs.get((wl.name, v))}
        best = min((x["time"] for x in row["variants"].values() if "time" in x), default=None)
        for x in row["variants"].values():
            if "time" in x:
                x["ratio"] = x["time"] / best
        rows.append(row)
    print_table(rows, args.ranks)
    loads.append(os.getloadavg()[0])
    meta = {"ranks": args.ranks, "rounds": args.rounds, "reps": args.reps, "small": args.small,
            "tolerance": args.tolerance, "repeats": args.repeats,
            "load_average_1min": {"min": min(loads), "max": max(loads), "mean": sum(loads) / len(loads)},
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "toolchain": str(toolchain.info()),
            "date": time.strftime("%Y-%m-%d")}
    if not args.small or args.out != ap.get_default("out"):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"wrote {args.out}")


def stability(runs, tolerance):
    """(stable, spread): spread is the second-best round's time over the best one's; stable when a second
    round confirms the best time within ``tolerance`` (one round alone is not stable)."""
    times = sorted(x["time"] for x in runs if "time" in x)
    if len(times) < 2:
        return False, None
    spread = times[1] / times[0]
    return spread <= tolerance, round(spread, 3)


def describe_config(config) -> str:
    """One line per distinct process configuration: NumPy and its SIMD, thread pools, thread variables."""
    lines = []
    for c in config or []:
        libs = ", ".join(f"{d['api']} {d['version']} ({d.get('layer') or d['file']}) {d['threads']} thread(s)"
                         for d in c.get("libs", []))
        env = " ".join(f"{k}={v}" for k, v in c.get("env", {}).items() if k != "XLA_FLAGS")
        jax = f"jax {c['jax']} on {c['devices']} device(s); " if "jax" in c else ""
        line = f"{jax}numpy {c.get('numpy')} ({'/'.join(c.get('simd', []))}); {libs or 'no native thread pool'}; {env}"
        if line not in lines:
            lines.append(line)
    return "; ".join(f"[{len(config)} process(es)] " + line if len(config or []) > 1 and len(lines) == 1 else line
                     for line in lines)


def show_config(workload, variant, config, seen):
    """Prints a variant's configuration the first time it is seen, and again when it changes."""
    if not config:
        return
    text = describe_config(config)
    key = (workload, variant)
    if key not in seen or describe_config(seen[key]) != text:
        seen[key] = config
        print(f"    {workload}/{variant}: {text}", flush=True)


def cell(x):
    if "refused" in x:
        return "refused"
    if "error" in x:
        return "error"
    return (f"{x['ratio']:.2f}" + ("" if x.get("stable") else "*")
            + ("~" if x.get("cpu_share") is not None and x["cpu_share"] < LOADED else ""))


def print_table(rows, ranks):
    print(f"\nratio to the best variant of each row (best of the rounds; {ranks} ranks / devices)")
    head = ["workload"] + VARIANTS + ["best (ms)"]
    print(" | ".join(head))
    for row in rows:
        best = min((x["time"] for x in row["variants"].values() if "time" in x), default=float("nan"))
        print(" | ".join([row["workload"]] + [cell(row["variants"][v]) for v in VARIANTS] + [f"{best * 1e3:.3g}"]))
    print("(* : not stable: no second round within the tolerance of the best one; ~ : loaded: the best call had "
          f"less than {LOADED} of a core per process)")
    for row in rows:
        for v, x in row["variants"].items():
            if "refused" in x or "error" in x:
                print(f"  {row['name']} {v}: {x}")
    print("\nbest time per variant (ms), its CPU share (CPU time / wall time; MPI: the least of the ranks), "
          "and every round's best")
    for row in rows:
        for v, x in row["variants"].items():
            if "time" in x:
                print(f"  {row['name']:10s} {v:12s} {x['time'] * 1e3:9.3f} ms  cpu share {x.get('cpu_share')}  "
                      f"rounds {x.get('rounds_ms')}{'' if x.get('stable') else '  NOT STABLE'}")


if __name__ == "__main__":
    main()
