"""Entry point of the ranks started by ``dace_partition.runtime.mpi_count.count_run``.

It runs :mod:`dace_partition.runtime._worker` unchanged (so the arguments are prepared exactly as ``Program``
prepares them, for ``io="root"`` and ``io="distributed"`` alike, and the outputs are saved the same way),
with one difference: the loaded program's compiled SDFG is wrapped so that the PMPI counters are reset
right before the compiled call and read right after it. Everything else the launcher does through
mpi4py — the metadata broadcast or input checks before, gathering tiles and the counters after — goes
through the same preloaded wrappers and would otherwise be counted as the program's traffic.

Rank 0 writes ``counts.json`` (one entry per rank: the list of its snapshots, one per call) next to
``outputs.npz``. ``DP_PMPI_REPEAT=N`` (``count_run(repeat=N)``) calls the compiled program N times in a row,
each counted apart.
"""
import json
import os
import sys

from mpi4py import MPI

from . import _worker
from .mpi_count import Counter


class _Counted:
    """Stands in for a CompiledSDFG: counts the MPI traffic of each ``fast_call`` (through which ``Program``
    calls the library) and delegates everything else."""

    def __init__(self, compiled, counter, repeat=1):
        self._compiled = compiled
        self._counter = counter
        self._repeat = repeat
        self.calls = 0
        self.snapshots = []

    def fast_call(self, *args, **kwargs):  # every call of a Program ends here
        self.calls += 1
        for _ in range(self._repeat):  # DP_PMPI_REPEAT: the compiled call again, counted apart each time
            self._counter.reset()
            result = self._compiled.fast_call(*args, **kwargs)
            self.snapshots.append(self._counter.snapshot())  # before any other MPI call of this process
        return result

    def __getattr__(self, name):
        return getattr(self._compiled, name)


def main(folder, tmp):
    comm = MPI.COMM_WORLD
    counter = Counter()  # fails on every rank alike if the shim was not preloaded
    repeat = int(os.environ.get("DP_PMPI_REPEAT", "1"))  # count_run(repeat=...)
    wrapped = []
    load = _worker.load

    def load_counted(*args, **kwargs):
        prog = load(*args, **kwargs)
        prog.compiled = _Counted(prog.compiled, counter, repeat)
        wrapped.append(prog.compiled)
        return prog

    _worker.load = load_counted
    try:
        _worker.main(folder, tmp)
    finally:
        _worker.load = load
    # A worker that stopped loading through its module-level `load`, or called the program other than
    # once, would leave counts that do not describe one run: refuse rather than report them.
    calls = [w.calls for w in wrapped]
    if calls != [1]:
        raise RuntimeError(f"expected one program call on rank {comm.rank}, counted {calls}")
    counts = comm.gather(wrapped[0].snapshots, root=0)  # per rank: one snapshot per repeated call
    if comm.rank == 0:
        with open(os.path.join(tmp, "counts.json"), "w") as f:
            json.dump(counts, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
