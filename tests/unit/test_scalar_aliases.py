"""Which ``name = scalar`` assignments DaCe's frontend turns into aliases that change a result
(``dace_partition.analysis.scalar_aliases``, read from the program's source; no compiler). Runs on DaCe
1.0.2 and DaCe 2 alike: both alias a first binding of a scalar the program computed."""
import dace
import numpy as np
import pytest

from dace_partition.analysis.scalar_aliases import scalar_aliases


@dace.program
def stepped_from_a_local(S: dace.float64[8], out: dace.float64[5]):
    dT = np.sum(S) * 0.25
    T = dT
    for i in range(5):
        out[i] = T
        T += dT


@dace.program
def local_changed_after_the_alias(S: dace.float64[8], out: dace.float64[5]):
    dT = np.sum(S) * 0.25
    T = dT
    for i in range(5):
        out[i] = T + dT
        dT = dT + 1.0


@dace.program
def aliased_inside_the_loop(S: dace.float64[8], out: dace.float64[5]):
    dT = np.sum(S) * 0.25
    for i in range(5):
        T = dT
        out[i] = T
        T += 1.0


@dace.program
def stepped_from_an_argument(S: dace.float64[8], out: dace.float64[5], dT: dace.float64):
    T = dT
    for i in range(5):
        out[i] = T
        T += dT


@dace.program
def copied_into_a_bound_variable(S: dace.float64[8], out: dace.float64[5]):
    dT = np.sum(S) * 0.25
    T = 0.0
    T = dT
    for i in range(5):
        out[i] = T
        T += dT


@dace.program
def aliased_and_only_read(S: dace.float64[8], out: dace.float64[5]):
    dT = np.sum(S) * 0.25
    T = dT
    for i in range(5):
        out[i] = T * i


@dace.program
def copied_by_an_expression(S: dace.float64[8], out: dace.float64[5]):
    dT = np.sum(S) * 0.25
    T = dT + 0
    for i in range(5):
        out[i] = T
        T += dT


@dace.program
def array_renamed_and_updated(S: dace.float64[8], out: dace.float64[5]):
    b = S
    b += 1.0
    out[:] = S[:5]


@pytest.mark.parametrize("prog,written", [(stepped_from_a_local, "T"), (local_changed_after_the_alias, "dT"),
                                          (aliased_inside_the_loop, "T")])
def test_a_first_binding_of_a_computed_scalar_that_is_written_later_is_found(prog, written):
    found = scalar_aliases(prog.to_sdfg())
    assert [(a.name, a.scalar, a.written_name) for a in found] == [("T", "dT", written)]
    assert found[0].written > found[0].line
    assert "test_scalar_aliases.py" in found[0].reason() and "'T = dT + 0'" in found[0].reason()


@pytest.mark.parametrize("prog", [stepped_from_an_argument, copied_into_a_bound_variable, aliased_and_only_read,
                                  copied_by_an_expression, array_renamed_and_updated])
def test_arguments_bound_variables_unwritten_aliases_copies_and_arrays_are_left_alone(prog):
    assert scalar_aliases(prog.to_sdfg()) == []


def test_a_program_whose_source_cannot_be_read_is_left_alone():
    sdfg = stepped_from_a_local.to_sdfg()
    sdfg.debuginfo = dace.dtypes.DebugInfo(0, 0, 0, 0, "<no such file>")
    assert scalar_aliases(sdfg) == []
