"""Entry point of the ranks that ``benchmarks/npbench.py`` starts (through ``dace_partition.runtime.launch``).

    python -m mpi4py ... -m _npbench_worker BUILD_FOLDER TMP

Like ``dace_partition.runtime._worker``: loads the lowered program, calls it once on rank 0's inputs and
saves rank 0's outputs (the return value(s) *and* the new values of the arguments the program writes, which
``dp.run`` drops when the program also returns a value). Then it times further calls, each on fresh copies
of the inputs (copied outside the timed region, between barriers), and writes ``times.json`` into TMP.

A program lowered with ``io="distributed"`` (``npbench.py --dist``) gets each rank's tiles instead, and its
outputs' tiles are joined on rank 0 (``_Tiles``).

``NPBENCH_DP_REPS`` (default 3) bounds the number of timed calls, ``NPBENCH_DP_BUDGET`` (seconds, default 5)
their total time.
"""
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from dace_partition.runtime.launch import load, written_arguments


def _read(tmp):
    with np.load(os.path.join(tmp, "inputs.npz"), allow_pickle=False) as f:
        return {k: (f[k].item() if f[k].ndim == 0 else f[k].copy()) for k in f.files}


def _fresh(inputs):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}


def _pack(result, written):
    """``__kind`` is always "none", so that ``launch`` hands back every entry as a dict; the real kind of
    the result is ``__npb_kind``."""
    out = {f"__w_{k}": np.asarray(v) for k, v in written.items()}
    out["__kind"] = np.array("none")
    if result is None:
        out["__npb_kind"] = np.array("none")
    elif isinstance(result, tuple):
        out.update({f"__r{i}": np.asarray(r) for i, r in enumerate(result)})
        out.update(__npb_kind=np.array("tuple"), __n=np.array(len(result)))
    else:
        out.update(__r0=np.asarray(result), __npb_kind=np.array("single"))
    return out


class _Tiles:
    """io="distributed": every rank reads the whole inputs, passes its own tiles (the layouts saved with the
    program), and the outputs' tiles are joined on rank 0 for the check. Building the tiles and joining
    them is outside the timed calls, as the data would already be distributed in a distributed program."""

    def __init__(self, prog, comm, inputs):
        self.lays, self.comm = prog.layouts, comm
        self.syms = {k: v for k, v in inputs.items() if isinstance(v, (int, np.integer))}
        self.tiles = {k: (self.lays[k].scatter(v, comm.rank, **self.syms) if k in self.lays else v)
                      for k, v in inputs.items()}

    def fresh(self):
        return _fresh(self.tiles)

    def join(self, name, tile):
        parts = self.comm.gather(np.asarray(tile), root=0)
        if self.comm.rank != 0:
            return None
        return self.lays[name].gather(parts, **self.syms) if name in self.lays else parts[0]

    def joined(self, result, args, written):
        out = {k: self.join(k, args[k]) for k in written}
        if isinstance(result, tuple):
            names = [f"__return_{i}" for i in range(len(result))]
            result = tuple(self.join(n, r) for n, r in zip(names, result))
        elif result is not None:
            result = self.join("__return", result)
        return result, out


def main(folder, tmp):
    comm = MPI.COMM_WORLD
    reps = int(os.environ.get("NPBENCH_DP_REPS", "3"))
    budget = float(os.environ.get("NPBENCH_DP_BUDGET", "5"))
    prog = load(folder, comm)
    tiles = _Tiles(prog, comm, _read(tmp)) if prog.layouts else None
    inputs = {} if tiles else _read(tmp) if comm.rank == 0 else {}
    args = tiles.fresh() if tiles else _fresh(inputs)
    comm.Barrier()
    t0 = time.perf_counter()
    result = prog(**args)
    comm.Barrier()
    times = [time.perf_counter() - t0]
    if tiles:
        result, written = tiles.joined(result, args, [k for k in written_arguments(prog.sdfg) if k in args])
    elif comm.rank == 0:
        written = {k: args[k] for k in written_arguments(prog.sdfg) if k in args}
    if comm.rank == 0:
        np.savez(os.path.join(tmp, "outputs.npz"), **_pack(result, written))
    flag = np.zeros(1, dtype=np.int64)
    while True:  # rank 0 decides whether to time another call
        if comm.rank == 0:
            flag[0] = int(len(times) < reps and sum(times) < budget)
        comm.Bcast(flag, root=0)
        if not flag[0]:
            break
        args = tiles.fresh() if tiles else _fresh(inputs)
        comm.Barrier()
        t0 = time.perf_counter()
        prog(**args)
        comm.Barrier()
        times.append(time.perf_counter() - t0)
    if comm.rank == 0:
        with open(os.path.join(tmp, "times.json"), "w") as f:
            json.dump(times, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
