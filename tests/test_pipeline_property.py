"""Property test of the whole pipeline: random small NumPy programs and random schedules.

Each hypothesis example is ONE program holding a batch of up to 10 independent random kernels
(elementwise with offsets and broadcasts, row slices, column reads, sum/max/min/product reductions
over rows, columns and everything, matmul and matvec, a scalar argument, a short loop, a transpose),
each writing its own output, with a random schedule (per kernel: not partitioned, or one or two of the
principal map's dimensions split into 2-4 parts). The program is lowered, built once and run once under
``mpiexec``; every output element must equal NumPy's exactly (integer values), or ``lower`` must refuse
with ScheduleError/UnsupportedPattern before any rank starts.

How the 50 are counted: the default test draws 5 programs of exactly 10 kernels, i.e. 50 random kernels
with 50 random kernel schedules, at the cost of 5 compiles. The slow test draws 50 programs of 10
kernels (500 kernels).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import dace_partition as dp
from conformance import random_programs as R

_COUNT = [0]


def _check(data, ks):
    _COUNT[0] += 1
    mod = R.load(R.source(ks), f"dp_prop_{_COUNT[0]}")
    sdfg = mod.prog.to_sdfg()
    sdfg.name = f"dp_prop_{_COUNT[0]}"
    infos = dp.maps(sdfg)
    principals = {}
    for m in infos:
        k = id(m.kernel)
        if k not in principals or len(m.params) > len(principals[k].params):
            principals[k] = m
    schedule = data.draw(R.schedule_strategy(infos, list(principals.values())), label="schedule")
    n = data.draw(st.integers(4, 11), label="N")
    try:
        dp.lower(sdfg, schedule)
    except (dp.ScheduleError, dp.UnsupportedPattern) as e:
        return f"refused: {type(e).__name__}"
    args = R.inputs(ks, n, seed=n)
    expected = R.reference(mod, args)
    got = dp.run(sdfg, dp.ranks_needed(sdfg), timeout=240, N=n, **args)
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=f"{name}: {dict(ks=ks, schedule=schedule)}")
    return "correct"


_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)


@settings(max_examples=5, derandomize=True, **_SETTINGS)
@given(data=st.data(), ks=R.kernels(min_size=10, max_size=10))
def test_random_programs(data, ks):
    event(_check(data, ks))


@pytest.mark.slow
@settings(max_examples=50, **_SETTINGS)
@given(data=st.data(), ks=R.kernels(min_size=10, max_size=10))
def test_random_programs_slow(data, ks):
    event(_check(data, ks))
