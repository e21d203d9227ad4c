"""Repeated calls of lowered programs under mpiexec: the per-call fast path, persistent rank-local
buffers across symbol changes, a rejected call followed by good ones, and BLAS / no atomics in the
local kernels. Prints 'BUILD <name> <folder>' per program and 'OK' at the end (rank 0)."""
import sys

import dace
import numpy as np
from mpi4py import MPI

import dace_partition as dp

N = dace.symbol("N")
comm = MPI.COMM_WORLD
P = comm.size


@dace.program
def affine(x: dace.float64[N]):
    return 2.0 * x + 1.0


@dace.program
def rowsum_of_product(a: dace.float64[48, 40], b: dace.float64[40, 24]):
    return np.sum(a @ b, axis=1)


def check(got, want, what):
    if comm.rank == 0 and not np.array_equal(got, want):
        raise SystemExit(f"{what}: wrong result\n{got}\n{want}")


sdfg = affine.to_sdfg()
sdfg.name = f"t_call_paths_affine_{P}"
dp.lower(sdfg, {m.name: (P, ) for m in dp.maps(sdfg)})
prog = dp.compile(sdfg)
rng = np.random.default_rng(7)
# same shape twice (fast path, new array objects), then other sizes (re-initialized buffers), then back;
# N given, or read off x's shape (the odd calls)
for i, n in enumerate((10, 10, 17, 17, 5, 10)):
    x = np.floor(rng.standard_normal(n) * 100)
    out = (prog(x=x, N=n) if i % 2 == 0 else prog(x=x)) if comm.rank == 0 else prog()
    check(out, 2.0 * x + 1.0, f"affine N={n}")
# a rejected call ends on every rank with the message, and the next call works
try:
    prog(x=np.zeros(10, dtype=np.float32), N=10) if comm.rank == 0 else prog()
    raise SystemExit("a float32 argument was accepted")
except ValueError as e:
    assert "dtype" in str(e), e
try:  # a symbol given that no array agrees with
    prog(x=np.zeros(10), N=11) if comm.rank == 0 else prog()
    raise SystemExit("N=11 with a 10-element x was accepted")
except ValueError as e:
    assert "'x'" in str(e) and "(11,)" in str(e), e
x = np.arange(12.0)
out = prog(x=x, N=12) if comm.rank == 0 else prog()
check(out, 2.0 * x + 1.0, "affine after a rejected call")

sdfg2 = rowsum_of_product.to_sdfg()
sdfg2.name = f"t_call_paths_rowsum_{P}"
schedule = {m.name: (P, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg2) if m.shape[0] == 48}
dp.lower(sdfg2, schedule)
prog2 = dp.compile(sdfg2)
for _ in range(3):
    a = rng.integers(-8, 8, (48, 40)).astype(np.float64)  # small integers: every sum is exact
    b = rng.integers(-8, 8, (40, 24)).astype(np.float64)
    out = prog2(a=a, b=b) if comm.rank == 0 else prog2()
    check(out, np.sum(a @ b, axis=1), "rowsum of a product")
if comm.rank == 0:
    print("BUILD affine", prog.folder)
    print("BUILD rowsum", prog2.folder)
    print(dp.report(sdfg2))
    print("OK")
