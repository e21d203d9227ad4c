"""Run every synthesized reduction program under MPI and compare with MPI_Allreduce (exactly).

Usage: DACE_PARTITION_HIERARCHY=2x4 mpiexec -n 8 python -m mpi4py tests/mpi_scripts/reduction_run.py [max_placements]
The hierarchy comes from the environment (or from shared memory when unset).  For every
placement of 1, 2 and 3 parallelism axes on it (all matrices, every reduction axis; axes 0 and 2
for three axes) every synthesized program and the flat plan are executed on integer data of two
lengths (one not divisible by the group size: uneven chunks) and compared with an
``MPI_Allreduce`` over the reduction group.  Prints "REDUCTION-MPI OK <placements> <runs>" on
rank 0 when every rank matched on every run, "REDUCTION-MPI FAIL ..." otherwise.
"""
import itertools
import os
import sys

import numpy as np
from mpi4py import MPI

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)


def _light_import():
    """Import only the reduction subpackage (NumPy-only): ``dace_partition/__init__`` imports DaCe,
    seconds per rank that 8 oversubscribed ranks would pay 8 times."""
    import types
    for name in ("dace_partition", "dace_partition.solvers"):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [os.path.join(ROOT, *name.split("."))]
            sys.modules[name] = mod


_light_import()
from dace_partition.solvers.reduction import (Communicators, Placement, ReductionPlan,  # noqa: E402
                                              choose_reduction, detect_hierarchy, enumerate_matrices,
                                              programs_for)


def factorizations(n, parts):
    if parts == 1:
        yield (n,)
        return
    for d in range(1, n + 1):
        if n % d == 0:
            for rest in factorizations(n // d, parts - 1):
                yield (d,) + rest


def placements(h):
    P = h.num_devices
    seen = set()
    for nax in (1, 2, 3):
        for axes in factorizations(P, nax):
            if nax > 1 and 1 in axes:
                continue
            reds = [(0,)] if nax == 1 else ([(i,) for i in range(nax)] if nax == 2 else [(0, 2)])
            for m in enumerate_matrices(h, axes):
                for ra in reds:
                    p = Placement(h, axes, m, ra)
                    key = (p.groups(), p.synthesis_sizes)
                    if key in seen or p.group_size < 2:
                        continue  # same groups and synthesis hierarchy: same programs, same runs
                    seen.add(key)
                    yield p


def main():
    world = MPI.COMM_WORLD
    r = world.Get_rank()
    h, dev_of = detect_hierarchy(world)
    comm = Communicators(world)  # the executors' sub-communicators, split once for every plan below
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 10 ** 9
    me = dev_of[r]
    bad, runs, nplace = [], 0, 0
    for p in itertools.islice(placements(h), limit):
        nplace += 1
        key, _ = p.device_coords(me)
        groups = p.groups()
        gi = next(i for i, g in enumerate(groups) if me in g)
        ref_comm = world.Split(gi, groups[gi].index(me))
        for n in (p.group_size * 3 + 1, 1000):
            rng = np.random.default_rng(1000 * r + n)
            data = rng.integers(-10 ** 6, 10 ** 6, size=n, dtype=np.int64)
            want = data.copy()
            ref_comm.Allreduce(MPI.IN_PLACE, want, op=MPI.SUM)
            for prog in (None,) + tuple(programs_for(p)):
                plan = ReductionPlan.build(p, prog)
                got = plan.execute(comm, data.copy(), dev_of)
                runs += 1
                if not np.array_equal(got, want):
                    bad.append(f"{p} n={n} program={plan.describe()}")
        # the chooser's pick runs too (it is one of the programs, or flat)
        ch = choose_reduction(h, p, 1 << 22)
        got = ReductionPlan.build(p, ch.program).execute(comm, data.copy(), dev_of)
        runs += 1
        if not np.array_equal(got, want):
            bad.append(f"chosen {ch.describe()}")
        ref_comm.Free()
    all_bad = world.gather(bad, root=0)
    total = world.reduce(runs, op=MPI.SUM, root=0)
    comm.free()
    if r == 0:
        flat = [b for bb in all_bad for b in bb]
        if flat:
            print("REDUCTION-MPI FAIL", len(flat))
            for b in flat[:20]:
                print("  ", b)
        else:
            print(f"REDUCTION-MPI OK hierarchy={h} placements={nplace} runs/rank={runs} total={total}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
