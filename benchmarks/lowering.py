"""Lowered programs vs a hand-written mpi4py peer, measured in the same run.

For each case: bytes moved (from the lowering report, i.e. the counts passed to MPI), the minimum the
schedule needs with root-held inputs, what a naive "broadcast everything" peer moves, and wall time and
peak RSS of the compiled SPMD program and of the hand-written mpi4py program (numpy kernels) under the
same mpiexec. Prints a table and writes benchmarks/results/lowering.json.

    python benchmarks/lowering.py [--ranks 4] [--repeat 5]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import dace  # noqa: E402

import dace_partition as dp  # noqa: E402


def cases(ranks):
    n = 1 << 20

    @dace.program
    def axpy(x: dace.float64[n], y: dace.float64[n]):
        return 2.0 * x + y

    m = 1000003  # not divisible by the rank count: uneven tiles, blocks solver

    @dace.program
    def axpy_uneven(x: dace.float64[m], y: dace.float64[m]):
        return 2.0 * x + y

    k = 256

    @dace.program
    def matmul(a: dace.float64[k, k], b: dace.float64[k, k]):
        return a @ b

    return [
        ("axpy 2^20", axpy, lambda ms: {x.name: (ranks, ) for x in ms}, "axpy", dict(x=(n, ), y=(n, ))),
        ("axpy 1000003 (uneven)", axpy_uneven, lambda ms: {x.name: (ranks, ) for x in ms}, "axpy",
         dict(x=(m, ), y=(m, ))),
        ("matmul 256 data-parallel", matmul, lambda ms: {"_MatMult_.gemm_map": (ranks, 1, 1)}, "matmul_rows",
         dict(a=(k, k), b=(k, k))),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = []
    env = dp.runtime.launch.mpi_environment()
    for name, prog, sched, peer, shapes in cases(args.ranks):
        sdfg = prog.to_sdfg()
        sdfg.name = "bench_" + name.split()[0] + "_" + str(abs(hash(name)) % 10000)
        dp.lower(sdfg, sched(dp.maps(sdfg)))
        rep = dp.report(sdfg)
        moved = sum(e.bytes or 0 for k in rep.kernels for e in k.comm)
        folder = dp.runtime.launch.build(sdfg)
        in_bytes = sum(int(np.prod(s)) * 8 for s in shapes.values())
        naive = (args.ranks - 1) * in_bytes
        res = {}
        for who in ("dace_partition", "mpi4py"):
            cmd = dp.runtime.launch.mpiexec_command(args.ranks) + [
                sys.executable, "-m", "mpi4py", os.path.join(HERE, "_lowering_worker.py"), who, folder, peer,
                json.dumps(shapes), str(args.repeat)
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            if out.returncode != 0:
                raise SystemExit(out.stderr[-3000:])
            res[who] = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(dict(case=name, ranks=args.ranks, solvers=sorted({e.solver for k in rep.kernels for e in k.comm}),
                         bytes_moved=moved, bytes_peer=res["mpi4py"]["bytes"], bytes_naive_bcast=naive,
                         time_s=res["dace_partition"]["time"], time_peer_s=res["mpi4py"]["time"],
                         peak_rss_mb=res["dace_partition"]["rss_mb"], peak_rss_peer_mb=res["mpi4py"]["rss_mb"],
                         correct=res["dace_partition"]["ok"]))
    hdr = (f"{'case':28s} {'solvers':22s} {'moved MB':>9s} {'peer MB':>8s} {'naive MB':>9s} {'time ms':>8s} "
           f"{'peer ms':>8s} {'t/peer':>6s} {'RSS MB':>7s} {'peer RSS':>8s} ok")
    print(hdr)
    for r in rows:
        print(f"{r['case']:28s} {','.join(r['solvers']):22s} {r['bytes_moved'] / 1e6:9.2f} {r['bytes_peer'] / 1e6:8.2f} "
              f"{r['bytes_naive_bcast'] / 1e6:9.2f} {r['time_s'] * 1e3:8.2f} {r['time_peer_s'] * 1e3:8.2f} "
              f"{r['time_s'] / r['time_peer_s']:6.2f} {r['peak_rss_mb']:7.1f} {r['peak_rss_peer_mb']:8.1f} {r['correct']}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    meta = dict(date=time.strftime("%Y-%m-%d"), machine=f"{platform.machine()}, {os.cpu_count()} cores", rows=rows)
    with open(os.path.join(HERE, "results", "lowering.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
