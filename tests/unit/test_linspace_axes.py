"""Which ``np.linspace`` calls DaCe's frontend gives an extra axis of length 1
(``dace_partition.analysis.linspace_axes``; no compiler). Runs on DaCe 1.0.2 and DaCe 2 alike: both broadcast
a scalar variable as an array of shape (1,) before they add the axis of the points."""
import dace
import numpy as np
import pytest

from dace_partition.analysis.linspace_axes import scalar_linspaces

NL = dace.symbol("NL")


@dace.program
def between_arguments(lo: dace.float64, hi: dace.float64):
    return np.linspace(lo, hi, 12)


@dace.program
def from_a_computed_scalar(lo: dace.float64, y: dace.float64[12]):
    return np.linspace(lo * 2.0, 1.0, 12) + y


@dace.program
def inside_a_called_function_body(lo: dace.float64, y: dace.float64[12, 4]):
    for j in dace.map[0:4]:
        y[:, j] = np.linspace(lo, 1.0, 12)


@dace.program
def between_numbers(y: dace.float64[12]):
    return np.linspace(0.5, 2.0, 12) + y


@dace.program
def between_symbols(y: dace.float64[NL]):
    return np.linspace(0, NL, NL) + y


@dace.program
def from_an_array_of_one_element(lo: dace.float64[1], y: dace.float64[12]):
    return np.linspace(lo, 1.0, 12)[:, 0] + y


@pytest.mark.parametrize("prog,scalars,shape", [(between_arguments, ("lo", "hi"), (12, 1)),
                                                (from_a_computed_scalar, None, None),
                                                (inside_a_called_function_body, ("lo", ), None)])
def test_a_linspace_from_a_scalar_variable_is_found_with_its_extra_axis(prog, scalars, shape):
    sdfg = prog.to_sdfg()
    found = scalar_linspaces(sdfg)
    assert len(found) == 1
    if scalars is not None:
        assert found[0].scalars == scalars
        assert "scalar variable(s) " + ", ".join(scalars) in found[0].reason()
    elif dace.__version__.startswith("1"):
        assert "a computed scalar" in found[0].reason()  # DaCe 1's temporary, '__tmp0', is not named
    if shape is not None:
        assert tuple(sdfg.arrays["__return"].shape) == shape  # the defect the refusal is about
        assert found[0].array == "__return" and found[0].subset == "0:12, 0"


@pytest.mark.parametrize("prog", [between_numbers, between_symbols, from_an_array_of_one_element])
def test_a_linspace_from_numbers_symbols_or_arrays_is_left_alone(prog):
    assert scalar_linspaces(prog.to_sdfg()) == []
