"""Which programs' calls ``run``'s ranks can make without DaCe (``runtime/call_plan.py``): plain host arrays
in C order and scalars with a C type; anything else keeps DaCe's worker, whose call handles it.

Pure Python: SDFGs are made with DaCe's API and never built.
"""
import dace
import pytest

from dace_partition.runtime.call_plan import _ctype_name, _refusal

N = dace.symbol("N")


def _sdfg(name):
    sdfg = dace.SDFG(name)
    sdfg.add_array("A", [N, 4], dace.float64)
    sdfg.add_scalar("s", dace.float32)
    sdfg.add_scalar("k", dace.int32)
    sdfg.add_state()
    return sdfg


def test_plain_arrays_and_scalars_have_a_plan():
    sdfg = _sdfg("t_plan_plain")
    assert _refusal(sdfg) is None
    assert _ctype_name(sdfg.arrays["s"]) == "c_float" and _ctype_name(sdfg.arrays["k"]) == "c_int"


@pytest.mark.parametrize("kind", ["gpu", "fortran", "offset", "stream"])
def test_what_needs_dace_has_no_plan(kind):
    sdfg = _sdfg(f"t_plan_{kind}")
    if kind == "gpu":
        sdfg.add_array("G", [4], dace.float64, storage=dace.StorageType.GPU_Global)
    elif kind == "fortran":
        sdfg.add_array("G", [N, 4], dace.float64, strides=[1, N])
    elif kind == "offset":
        sdfg.add_array("G", [4], dace.float64)
        sdfg.arrays["G"].start_offset = 2
    else:
        sdfg.add_stream("G", dace.float64)
    reason = _refusal(sdfg)
    assert reason is not None and "'G'" in reason
