"""Wall time of one ``dp.run`` of a tiny program, from the call to its result, against a one-shot mpi4py job.

``dp.run`` starts the ranks, runs the program once and returns rank 0's result: for a small program the time
is the ranks' start. Since ``runtime/_plain_worker.py``, ranks of a program with plain host arguments call its
library through ctypes and never import DaCe; ``DACE_PARTITION_PLAIN_WORKER=0`` gives the former worker, which
loads the program with DaCe. Both are measured here, alternating in one window, against the same computation
as a hand-written mpi4py + NumPy script started with ``mpiexec -n P python -m mpi4py`` (it reads its input
from a file, scatters, adds 1, gathers and saves, as the worker does).

The program is ``y = x + 1`` on 64 float64, its map split over all P ranks, root io. The build is made once
before timing. Every result is checked against NumPy. Times: best of ``--rounds`` per variant and P.

    python benchmarks/run_startup.py [--ps 2,4,8] [--rounds 5] [--out benchmarks/results/run_startup.json]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import dace
import numpy as np

import dace_partition as dp

HERE = os.path.dirname(os.path.abspath(__file__))
N = 64

_PEER = r'''
import sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
n = int(sys.argv[2])
starts = [(n * q) // p for q in range(p + 1)]
counts = [starts[q + 1] - starts[q] for q in range(p)]
x = np.load(sys.argv[1] + "/x.npy") if r == 0 else None
mine = np.empty(counts[r])
comm.Scatterv([x, counts, starts[:p], MPI.DOUBLE] if r == 0 else None, mine, root=0)
mine += 1.0
y = np.empty(n) if r == 0 else None
comm.Gatherv(mine, [y, counts, starts[:p], MPI.DOUBLE] if r == 0 else None, root=0)
if r == 0:
    np.save(sys.argv[1] + "/y.npy", y)
'''


@dace.program
def plus_one(x: dace.float64[N]):
    y = np.empty((N, ), dtype=np.float64)
    for i in dace.map[0:N]:
        y[i] = x[i] + 1.0
    return y


def _program(p):
    sdfg = plus_one.to_sdfg()
    sdfg.name = f"bench_run_startup_{p}"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (p, )})
    dp.runtime.launch.build(sdfg)
    return sdfg


def _time_ours(sdfg, p, x, plain: bool):
    os.environ["DACE_PARTITION_PLAIN_WORKER"] = "1" if plain else "0"
    t = time.perf_counter()
    y = dp.run(sdfg, p, x=x)
    dt = time.perf_counter() - t
    assert np.array_equal(y, x + 1.0)
    return dt


def _time_peer(p, x, script, launch_cmd, env):
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), x)
        t = time.perf_counter()
        subprocess.run(launch_cmd + [script, tmp, str(N)], check=True, env=env, timeout=300,
                       stdout=subprocess.DEVNULL)
        dt = time.perf_counter() - t
        assert np.array_equal(np.load(os.path.join(tmp, "y.npy")), x + 1.0)
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ps", default="2,4,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "run_startup.json"))
    args = ap.parse_args()
    from dace_partition.runtime.launch import mpi_environment, mpiexec_command
    env = mpi_environment()
    x = np.arange(N, dtype=np.float64) - 7.0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "peer.py")
        with open(script, "w") as f:
            f.write(_PEER)
        for p in [int(v) for v in args.ps.split(",")]:
            sdfg = _program(p)
            launch_cmd = mpiexec_command(p) + [sys.executable, "-m", "mpi4py"]
            times = {"plain": [], "dace": [], "mpi4py": []}
            for r in range(args.rounds):
                order = ["plain", "dace", "mpi4py"]
                order = order[r % 3:] + order[:r % 3]
                for v in order:
                    if v == "mpi4py":
                        times[v].append(_time_peer(p, x, script, launch_cmd, env))
                    else:
                        times[v].append(_time_ours(sdfg, p, x, v == "plain"))
            best = {k: min(v) for k, v in times.items()}
            rows.append({"P": p, "best_s": best, "all_s": times,
                         "plain_over_mpi4py": best["plain"] / best["mpi4py"],
                         "dace_over_mpi4py": best["dace"] / best["mpi4py"],
                         "dace_over_plain": best["dace"] / best["plain"]})
            print(f"P={p:3d}  run(), plain worker {best['plain']:.2f} s  run(), DaCe worker {best['dace']:.2f} s  "
                  f"mpi4py {best['mpi4py']:.2f} s  plain/mpi4py {best['plain'] / best['mpi4py']:.2f}  "
                  f"DaCe/mpi4py {best['dace'] / best['mpi4py']:.2f}", flush=True)
    os.environ.pop("DACE_PARTITION_PLAIN_WORKER", None)
    out = {"what": "wall time of one dp.run of y = x + 1 (64 float64, root io) from the call to its result, "
                   "ranks with the plain worker and with DaCe's, against an mpi4py + NumPy job doing the same",
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "omp_num_threads": env.get("OMP_NUM_THREADS"), "mpi": dp.runtime.toolchain.info().mpi,
           "rounds": args.rounds, "rows": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
