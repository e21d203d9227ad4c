"""Repeated calls of one compiled program (argv: the build folders of a root-io and an io="distributed"
build of test_call_contract.weighted): every call returns new arrays, so the first result is neither
the second one nor changed by it; an argument of another shape with as many elements (and in C order)
is taken as DaCe takes it. Prints 'OK' at the end (rank 0)."""
import sys

import numpy as np
from mpi4py import MPI

import dace_partition as dp
from _checks import expect

comm = MPI.COMM_WORLD
rank = comm.rank


def ref(x, m):
    return x * np.reshape(m, (24, 1)) + 1.0


x = np.arange(96.0).reshape(24, 4) - 40.0
ones, fives = np.ones((24, 1)), np.full((24, 1), 5.0)  # NPBench nbody's `mass` has this shape

# root io: inputs on rank 0, results on rank 0
root = dp.load(sys.argv[1], comm)
a = root(x=x, m=ones) if rank == 0 else root()
kept = a.copy() if rank == 0 else None
b = root(x=x, m=fives) if rank == 0 else root()
c = root(x=x, m=np.full(24, 2.0).reshape(24, 1)) if rank == 0 else root()  # a view, another shape
if rank == 0:
    expect(a is not b and b is not c, "two calls returned the same array object")
    expect(not np.shares_memory(a, b) and not np.shares_memory(b, c), "two calls' results share memory")
    np.testing.assert_array_equal(a, kept, err_msg="the first result was changed by later calls")
    np.testing.assert_array_equal(a, ref(x, ones))
    np.testing.assert_array_equal(b, ref(x, fives))
    np.testing.assert_array_equal(c, ref(x, 2.0 * ones))
else:
    expect(a is None and b is None and c is None, "a rank other than 0 got a result")

# io="distributed": every rank passes its tiles and keeps its result tiles
dist = dp.load(sys.argv[2], comm)
lays = dist.layouts


def tiles(m, m_shape=None):
    mt = lays["m"].scatter(np.reshape(m, 24), rank)
    return dict(x=lays["x"].scatter(x, rank), m=mt if m_shape is None else mt.reshape(m_shape))


ta = dist(**tiles(ones))
kept = ta.copy()
tb = dist(**tiles(fives))
tc = dist(**tiles(2.0 * ones, m_shape=(-1, 1)))  # the tile of m as a column: as many elements, C order
expect(ta is not tb and tb is not tc, "two calls returned the same tile object")
expect(not np.shares_memory(ta, tb) and not np.shares_memory(tb, tc), "two calls' tiles share memory")
np.testing.assert_array_equal(ta, kept, err_msg="the first call's tile was changed by later calls")
for t, m in ((ta, ones), (tb, fives), (tc, 2.0 * ones)):
    whole = comm.gather(t, root=0)
    if rank == 0:
        np.testing.assert_array_equal(lays["__return"].gather(whole), ref(x, m))
if rank == 0:
    print("OK")
