"""Start-up and per-call time of a tiny lowered program against hand-written mpi4py, at P = 2 .. 32 ranks.

The program is ``y = x + 1`` on ``n = max(8, P)`` float64 (8 elements up to P = 8; the lowering refuses to
split 8 iterations into more than 8 parts, so beyond that every rank gets one element), its map split over
all P ranks, inputs and output on rank 0 (``io="root"``: one ``MPI_Scatterv`` and one ``MPI_Gatherv``).
The peer is the same computation written with mpi4py + NumPy (``Scatterv`` + ``+ 1`` + ``Gatherv`` with
counts computed once).

Per P, each round starts two MPI jobs (order rotated between rounds), every rank one thread
(``OMP_NUM_THREADS=1``; P > 2 is oversubscribed on a 2-core machine):

* ``ours``: measures the start-up (launch of ``mpiexec`` to the first call returned on the slowest rank;
  and, per rank, from its process start), the time spent in the program's ``__dace_init`` (grid set-up:
  the private communicator, Cartesian grids) and in its first call (which builds the per-site plans), then
  per-call times of ours and of the mpi4py peer interleaved in the same job (blocks of ``--reps`` calls,
  alternating), each call timed between barriers as the slowest rank's time (as in ``vs_peers.py``);
* ``mpi4py``: the peer's start-up (launch to its first call returned) and its per-call time alone.

Every result is checked against NumPy. Times are the best over rounds (start-up) and over all calls
(per call). Writes JSON (default ``benchmarks/results/startup_scaling.json``) and prints a table.

    python benchmarks/startup_scaling.py [--ps 2,4,8,16,32] [--rounds 2] [--reps 100] [--out PATH]
        [--repo PATH]   # the dace_partition to measure (default: this checkout), e.g. an older copy
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

T_IMPORTED = None
HERE = os.path.dirname(os.path.abspath(__file__))


def _proc_start_epoch() -> float:
    """This process's start time (epoch seconds): its age from /proc (clock ticks since boot) and
    CLOCK_BOOTTIME, subtracted from now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except Exception:
        return float("nan")


def _n(p):
    return max(8, p)


# ------------------------------------------------------------------------------------------ worker
def _peer_setup(comm, n):
    import numpy as np
    from mpi4py import MPI
    p = comm.size
    starts = [(n * r) // p for r in range(p + 1)]
    counts = [starts[r + 1] - starts[r] for r in range(p)]
    displs = starts[:p]
    local = np.empty(counts[comm.rank])

    def call(x):  # x: the global array on rank 0, None elsewhere
        comm.Scatterv([x, counts, displs, MPI.DOUBLE] if comm.rank == 0 else None, local, root=0)
        y_local = local + 1.0
        out = np.empty(n) if comm.rank == 0 else None
        comm.Gatherv(y_local, [out, counts, displs, MPI.DOUBLE] if comm.rank == 0 else None, root=0)
        return out

    return call


def _time_calls(comm, call, arg, reps, best):
    from mpi4py import MPI
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        call(arg)
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        best = min(best, dt)
    return best


def worker(mode, folder, reps, blocks):
    t_launch = float(os.environ.get("DP_BENCH_LAUNCH", "nan"))
    t_proc = _proc_start_epoch()
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    p = comm.size
    n = _n(p)
    x = np.arange(n, dtype=np.float64) if comm.rank == 0 else None
    ref = np.arange(n, dtype=np.float64) + 1.0
    peer = _peer_setup(comm, n)
    res = {}
    if mode == "ours":
        import dace_partition as dp
        prog = dp.load(folder, comm)
        compiled = prog.compiled
        init_s = [0.0]
        orig = compiled._initialize

        def timed_init(args):
            t0 = time.perf_counter()
            orig(args)
            init_s[0] += time.perf_counter() - t0

        compiled._initialize = timed_init
        t0 = time.perf_counter()
        y = prog(x=x) if comm.rank == 0 else prog()
        first_s = time.perf_counter() - t0
        t_first = time.time()
        ok = bool(np.allclose(y, ref)) if comm.rank == 0 else True
        y2 = peer(x)
        ok = ok and (bool(np.allclose(y2, ref)) if comm.rank == 0 else True)
        ours = prog  # x is passed on rank 0 only
        call_ours = (lambda a: ours(x=a)) if comm.rank == 0 else (lambda a: ours())
        best_ours = best_peer = float("inf")
        for _ in range(blocks):
            best_ours = _time_calls(comm, call_ours, x, reps, best_ours)
            best_peer = _time_calls(comm, peer, x, reps, best_peer)
        y = call_ours(x)
        ok = ok and (bool(np.allclose(y, ref)) if comm.rank == 0 else True)
        res = {"per_call_ours": best_ours, "per_call_mpi4py_interleaved": best_peer,
               "init": comm.allreduce(init_s[0], op=MPI.MAX),
               "first_call_without_init": comm.allreduce(first_s - init_s[0], op=MPI.MAX)}
    else:
        y = peer(x)
        t_first = time.time()
        ok = bool(np.allclose(y, ref)) if comm.rank == 0 else True
        res = {"per_call_mpi4py": _time_calls(comm, peer, x, reps * blocks, float("inf"))}
    oks = comm.gather(ok, root=0)
    firsts = comm.gather((t_first, t_proc), root=0)
    if comm.rank == 0:
        res["check"] = "ok" if all(oks) else "WRONG RESULT"
        res["startup_from_launch"] = max(f for f, _ in firsts) - t_launch
        res["startup_from_process_start"] = max(f - s for f, s in firsts)
        print("RESULT " + json.dumps(res), flush=True)


# ------------------------------------------------------------------------------------------ driver
def build(p, tag):
    import dace
    import dace_partition as dp
    from dace_partition.runtime.launch import build as build_lowered
    n = _n(p)

    @dace.program
    def inc(x: dace.float64[n]):
        return x + 1.0

    sdfg = inc.to_sdfg()
    sdfg.name = f"ss_inc_{p}{tag}"
    (m, ) = [m.name for m in dp.maps(sdfg)]
    t0 = time.perf_counter()
    dp.lower(sdfg, {m: (p, )})
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    folder = build_lowered(sdfg)
    return folder, lower_s, time.perf_counter() - t0


def run_job(mode, p, folder, args, env):
    from dace_partition.runtime.launch import mpiexec_command
    cmd = mpiexec_command(p) + [sys.executable, os.path.abspath(__file__), "--worker", mode, "--folder", folder or "",
                                "--reps", str(args.reps), "--blocks", str(args.blocks)]
    env = dict(env, DP_BENCH_LAUNCH=repr(time.time()))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{mode} at P={p} failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def _ms(s):
    return f"{s * 1e3:.3f}"


def table(results):
    lines = ["| P | n | ours per call (ms) | mpi4py per call (ms) | ratio | ours start-up (s) | "
             "mpi4py start-up (s) | ours `__dace_init` (ms) | ours first call (ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['P']} | {r['n']} | {_ms(r['per_call_ours'])} | {_ms(r['per_call_mpi4py'])} | "
                     f"{r['ratio_per_call']:.2f} | {r['startup_ours']:.2f} | {r['startup_mpi4py']:.2f} | "
                     f"{_ms(r['init'])} | {_ms(r['first_call_without_init'])} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", default=None)
    ap.add_argument("--folder", default="")
    ap.add_argument("--ps", default="2,4,8,16,32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=50, help="calls per timed block")
    ap.add_argument("--blocks", type=int, default=4, help="alternating blocks of ours / mpi4py per job")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--repo", default=os.path.join(HERE, ".."))
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "startup_scaling.json"))
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.folder, args.reps, args.blocks)
    repo = os.path.abspath(args.repo)
    sys.path.insert(0, repo)
    os.environ["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    import dace_partition as dp
    from dace_partition.runtime.launch import mpi_environment
    print(f"dace_partition from {os.path.dirname(dp.__file__)}", flush=True)
    env = mpi_environment()
    env["OMP_NUM_THREADS"] = "1"
    ps = [int(p) for p in args.ps.split(",")]
    built = {}
    for p in ps:
        built[p] = build(p, args.tag)
        print(f"P={p}: lowered in {built[p][1]:.2f} s, built in {built[p][2]:.1f} s", flush=True)
    runs = {p: {"ours": [], "mpi4py": []} for p in ps}
    for rnd in range(args.rounds):
        for p in ps:
            order = ["ours", "mpi4py"] if rnd % 2 == 0 else ["mpi4py", "ours"]
            for mode in order:
                r = run_job(mode, p, built[p][0], args, env)
                if r["check"] != "ok":
                    raise RuntimeError(f"{mode} at P={p}: {r['check']}")
                runs[p][mode].append(r)
                print(f"round {rnd} P={p} {mode}: {r}", flush=True)
    results = []
    for p in ps:
        o, m = runs[p]["ours"], runs[p]["mpi4py"]
        ours_call = min(r["per_call_ours"] for r in o)
        peer_call = min([r["per_call_mpi4py_interleaved"] for r in o] + [r["per_call_mpi4py"] for r in m])
        results.append({
            "P": p, "n": _n(p), "lower_s": built[p][1], "build_s": built[p][2],
            "per_call_ours": ours_call, "per_call_mpi4py": peer_call, "ratio_per_call": ours_call / peer_call,
            "startup_ours": min(r["startup_from_launch"] for r in o),
            "startup_mpi4py": min(r["startup_from_launch"] for r in m),
            "startup_ours_from_process_start": min(r["startup_from_process_start"] for r in o),
            "startup_mpi4py_from_process_start": min(r["startup_from_process_start"] for r in m),
            "init": min(r["init"] for r in o), "first_call_without_init": min(r["first_call_without_init"] for r in o),
            "runs": runs[p]})
    print(table(results))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
                   "repo": repo, "rounds": args.rounds, "reps": args.reps, "blocks": args.blocks,
                   "results": results, "table": table(results)}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
