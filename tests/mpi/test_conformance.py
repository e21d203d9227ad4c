"""The conformance suite (tests/conformance/programs.py) under a real mpiexec.

Each case is lowered for P ranks once and built once; the outcome must be ``correct`` (every output
element equal to NumPy's: exactly for integer programs, within 1e-9 relative otherwise) or ``refused``
by ``lower`` with ScheduleError/UnsupportedPattern before any rank starts; never a crash, a compile
error, a hang or a wrong result. The default suite runs one case of each pattern for P=2; the ``slow``
mark adds the other cases and P=4 for all.
Cases listed in ``EXPECTED_REFUSALS`` must be refused, with the reason in words.
"""
import pytest

from conformance.harness import evaluate
from conformance.programs import CASES

EXPECTED_REFUSALS = {
    "triangular_scale": "grows with the grid coordinate",  # until block_shape takes the max over ranks
    "syrk": "grows with the grid coordinate",  # the i loop is a map; symbolic sizes: rank 0's block sizes buffers
}

# The default suite: one program per pattern (docs/conformance.md), P=2, one build each (11 builds, about 3 minutes
# on a 2-core machine). Every case, on P=2 and P=4, runs under the ``slow`` mark.
DEFAULT = ["scale", "gemm", "gemver", "jacobi2d_time", "fdtd2d", "prod_cols", "reshape_merge", "doitgen",
           "triangular_scale", "syrk", "softmax", "mlp", "go_fast"]


def _check(name, P, ranks=None, auto=False, local_optimize=True):
    outs = evaluate(CASES[name], P, ranks, auto, local_optimize)
    for o in outs:
        assert o.status in ("correct", "refused"), f"{name} P={P} ranks={o.ranks}: {o.status}: {o.reason}"
        if name in EXPECTED_REFUSALS and not auto:
            assert o.status == "refused" and EXPECTED_REFUSALS[name] in o.reason, o.reason
        else:
            assert o.status == "correct", f"{name} P={P}: {o.status}: {o.reason}"


@pytest.mark.parametrize("name", DEFAULT)
def test_conformance_p2(name):
    _check(name, 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASES if n not in DEFAULT])
def test_conformance_p2_rest(name):
    _check(name, 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_conformance_p4(name):
    _check(name, 4)


# Automatic schedules (dp.auto_schedule on a slow-compute model, so these small programs are partitioned):
# every case lowers, and the default suite runs three of them (a BLAS chain, a stencil time loop, a
# reduction pipeline); every case on P=2 and P=4 runs under ``slow``.
AUTO_DEFAULT = ["gemm", "jacobi2d_time", "softmax"]


@pytest.mark.parametrize("name", AUTO_DEFAULT)
def test_conformance_auto_schedule_p2(name):
    _check(name, 2, auto=True)


@pytest.mark.slow
@pytest.mark.parametrize("P", [2, 4])
@pytest.mark.parametrize("name", list(CASES))
def test_conformance_auto_schedule_all(name, P):
    _check(name, P, auto=True)


# The time loops with their maps as written (local_optimize=False): each array has several readers with
# different blocks, and the written blocks start as a copy of one reader's block-plus-halo buffer (sizes
# known at run time). tests/unit/test_prediction_matches_report.py prices these same lowerings.
@pytest.mark.slow
@pytest.mark.parametrize("P", [2, 4])
@pytest.mark.parametrize("name", ["jacobi1d_time", "jacobi2d_time", "fdtd2d", "heat3d_time"])
def test_conformance_time_loops_as_written(name, P):
    _check(name, P, local_optimize=False)
