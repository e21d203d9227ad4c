"""One side of benchmarks/lowering.py, run under mpiexec: the lowered program or the mpi4py peer."""
import json
import resource
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
who, folder, peer, shapes, repeat = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
rng = np.random.default_rng(0)
inputs = {k: rng.standard_normal(tuple(v)) for k, v in shapes.items()}
reference = 2.0 * inputs["x"] + inputs["y"] if peer == "axpy" else inputs["a"] @ inputs["b"]


def split(n, p):
    q, m = divmod(n, p)
    counts = [q + (r < m) for r in range(p)]
    return counts, [sum(counts[:r]) for r in range(p)]


def peer_call():
    """Hand-written SPMD: Scatterv the split operands, Bcast the replicated one, numpy, Gatherv."""
    p, r = comm.size, comm.rank
    moved = 0
    if peer == "axpy":
        n = shapes["x"][0]
        counts, displs = split(n, p)
        xs, ys = np.empty(counts[r]), np.empty(counts[r])
        comm.Scatterv([inputs["x"], counts, displs, MPI.DOUBLE], xs, root=0)
        comm.Scatterv([inputs["y"], counts, displs, MPI.DOUBLE], ys, root=0)
        out = 2.0 * xs + ys
        res = np.empty(n) if r == 0 else None
        comm.Gatherv(out, [res, counts, displs, MPI.DOUBLE], root=0)
        moved = 3 * (n - counts[0]) * 8
        return res, moved
    k = shapes["a"][0]
    counts, displs = split(k, p)
    rows = np.empty((counts[r], k))
    comm.Scatterv([inputs["a"], [c * k for c in counts], [d * k for d in displs], MPI.DOUBLE], rows, root=0)
    b = inputs["b"] if r == 0 else np.empty((k, k))
    comm.Bcast(b, root=0)
    out = rows @ b
    res = np.empty((k, k)) if r == 0 else None
    comm.Gatherv(out, [res, [c * k for c in counts], [d * k for d in displs], MPI.DOUBLE], root=0)
    moved = (k - counts[0]) * k * 8 * 2 + (p - 1) * k * k * 8
    return res, moved


if who == "dace_partition":
    import dace_partition as dp
    prog = dp.load(folder)
    call = lambda: (prog(**inputs) if comm.rank == 0 else prog(), None)  # noqa: E731
else:
    call = peer_call
result, moved = call()  # warm-up (and the check)
times = []
for _ in range(repeat):
    comm.Barrier()
    t = time.perf_counter()
    call()
    comm.Barrier()
    times.append(time.perf_counter() - t)
rss = comm.reduce(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, op=MPI.MAX)
if comm.rank == 0:
    ok = bool(np.allclose(result, reference, rtol=1e-10, atol=1e-10))
    print(json.dumps(dict(time=float(np.median(times)), rss_mb=rss, bytes=moved or 0, ok=ok)))
