"""Runtime set-up checks, run under ``python -m mpi4py`` (see tests/mpi/test_runtime_setup.py).

    runtime_setup_run.py isolation LOWERED REDIST   # user traffic on MPI_COMM_WORLD vs ours
    runtime_setup_run.py setup SPEC.json            # set-up calls per program call (PMPI shim preloaded)

``isolation``: every rank posts, on MPI_COMM_WORLD and before calling anything of ours, one Isend to every
other rank with tag 77 (the tag of the synthesized executor's MPI_Sendrecv) and one with tag 0, then calls
the lowered program LOWERED (y = x + 1 on 8 elements) and the Redistribute SDFG REDIST (4-rank mesh, an
alltoall then a permutation) twice each, and only then receives the user messages: our receives must not
have matched them (the runtime runs on its own duplicate of the world), so every user message and every
program result arrives intact. Prints "ISOLATION OK" on rank 0.

``setup``: SPEC lists programs ``{"kind": "program"|"redistribute", "folder": ..., "calls": [inputs
...]}``; each call's PMPI set-up counters (MPI_Comm_split/dup/create, MPI_Cart_create/sub,
MPI_Type_commit) and traffic report are read right around the compiled call. Rank 0 prints
``SETUP <json>`` with, per program, per call, every rank's counters.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

from redistribute_problem import PROBLEM, plan_of, global_array

TAG = 77


def redistribute_call(folder):
    from dace.sdfg.utils import load_precompiled_sdfg
    comm = MPI.COMM_WORLD
    plan = plan_of()
    g = global_array()
    want = plan.simulate(g)[comm.rank]
    src = np.ascontiguousarray(plan.src_tiles(g)[comm.rank])
    compiled = load_precompiled_sdfg(folder)

    def call():
        got = np.full(want.shape, -1, dtype=g.dtype)
        compiled(src_tile=src, dst_tile=got)
        return bool(np.array_equal(got, want))

    return compiled, call


def isolation(lowered, redist):
    import dace_partition as dp
    comm = MPI.COMM_WORLD
    r, p = comm.rank, comm.size
    prog = dp.load(lowered, comm)
    _, redistribute = redistribute_call(redist)
    sends, payload = [], {}
    for q in range(p):
        if q == r:
            continue
        for tag in (TAG, 0):
            buf = np.full(64, 1000.0 * r + q + 0.5 * tag)
            payload[(q, tag)] = buf
            sends.append(comm.Isend(buf, dest=q, tag=tag))
    x = np.arange(8, dtype=np.float64)
    ok = True
    for _ in range(2):
        y = prog(x=x) if r == 0 else prog()
        if r == 0:
            ok &= bool(np.array_equal(y, x + 1.0))
        ok &= redistribute()
    for q in range(p):
        if q == r:
            continue
        for tag in (TAG, 0):
            buf = np.empty(64)
            comm.Recv(buf, source=q, tag=tag)
            if not np.array_equal(buf, np.full(64, 1000.0 * q + r + 0.5 * tag)):
                ok = False
                print(f"rank {r}: the user message from {q} with tag {tag} was taken or changed: {buf[:4]}",
                      flush=True)
    MPI.Request.Waitall(sends)
    ok = comm.allreduce(int(ok), op=MPI.MIN)
    if r == 0:
        print("ISOLATION OK" if ok else "ISOLATION FAILED", flush=True)


def setup(spec_path):
    import dace_partition as dp
    from dace_partition.runtime.mpi_count import Counter
    comm = MPI.COMM_WORLD
    counter = Counter()
    with open(spec_path) as f:
        spec = json.load(f)
    out = []
    for item in spec:
        if item["kind"] == "redistribute":
            compiled, call = redistribute_call(item["folder"])
            calls = [None] * item["ncalls"]
            fast = compiled
        else:
            prog = dp.load(item["folder"], comm)
            calls = item["calls"]
            fast = None

        per_call = []
        for inputs in calls:
            if item["kind"] == "redistribute":
                comm.Barrier()
                counter.reset()
                ok = call()
                snap = (counter.setup(), counter.report())
            else:
                args = {k: (np.asarray(v) if isinstance(v, list) else v) for k, v in inputs.items()}
                # Program.__call__ makes its own mpi4py calls before the compiled one: count only the
                # compiled call (as dace_partition.runtime._count_worker does).
                compiled = prog.compiled
                snaps = []

                class Counted:
                    def fast_call(self, *a, **k):
                        counter.reset()
                        res = compiled.fast_call(*a, **k)
                        snaps.append((counter.setup(), counter.report()))
                        return res

                    def __getattr__(self, name):
                        return getattr(compiled, name)

                prog.compiled = Counted()
                try:
                    prog(**args) if comm.rank == 0 else prog()
                finally:
                    prog.compiled = compiled
                ok = True
                snap = snaps[0]
            per_call.append({"setup": snap[0], "traffic": {k: v[0] for k, v in snap[1].items()}, "ok": ok})
        out.append(comm.gather(per_call, root=0))
        del fast
    if comm.rank == 0:
        print("SETUP " + json.dumps(out), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "isolation":
        isolation(sys.argv[2], sys.argv[3])
    else:
        setup(sys.argv[2])
