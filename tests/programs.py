"""The programs of the core issue, shared by tests, examples and benchmarks."""
import dace
import numpy as np


@dace.program
def add5(x: dace.int64[64]):
    return x + 5


@dace.program
def bcast_add(x: dace.int64[4, 8, 16], y: dace.int64[8, 16]):
    return x + y


@dace.program
def transposed_add(x: dace.int64[8, 16], y: dace.int64[16, 8]):
    return x.T + y


@dace.program
def transposed_map(x: dace.int64[8, 16], y: dace.int64[16, 8], out: dace.int64[16, 8]):
    for i, j in dace.map[0:16, 0:8]:
        out[i, j] = x[j, i] + y[i, j]


@dace.program
def offset_read(x: dace.int64[65], out: dace.int64[64]):
    for i in dace.map[0:64]:
        out[i] = x[i + 1] * i


@dace.program
def sum_rows(x: dace.float64[16, 16]):
    return np.add.reduce(x, axis=1)


@dace.program
def max_cols(x: dace.float64[16, 16]):
    return np.maximum.reduce(x, axis=0)


@dace.program
def matmul(a: dace.float64[64, 64], b: dace.float64[64, 64]):
    return a @ b


@dace.program
def accumulate(x: dace.int64[8, 12], out: dace.int64[8]):
    for i, j in dace.map[0:8, 0:12]:
        out[i] += x[i, j]
