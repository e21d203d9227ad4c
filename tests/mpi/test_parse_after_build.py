"""A program parsed after another one was built is parsed as written (DaCe 1.0.2's untyped symbol cache)."""
import dace
import numpy as np

import dace_partition as dp

N, K = dace.symbol("N"), dace.symbol("K")


@dace.program
def squares_summed(data: dace.float64[N, K]):
    return np.sum(data**2, axis=0)


@dace.program
def split_and_sum(x: dace.float64[N, 2 * K]):
    y = np.reshape(x, (N, 2, K))
    return np.sum(y, axis=2)


def test_a_program_parsed_after_a_build_reduces_the_axis_it_names():
    """DaCe 1.0.2 caches ``pystr_to_symbolic`` without types: after code generation converted ``2.0`` (a
    tasklet's ``x ** 2``), the axis ``np.int64(2)`` of a later ``np.sum(y, axis=2)`` came back as
    ``Float(2.0)`` and the frontend kept the axis, so the program returned its input's shape (the
    conformance programs std_cols, then reshape_split, in one process). Our build empties that cache."""
    first = squares_summed.to_sdfg()
    first.name = "parse_after_build_squares"
    dp.lower(first, {m.name: (2, 1) for m in dp.maps(first) if len(m.params) == 2})
    dp.runtime.launch.build(first)
    later = split_and_sum.to_sdfg()
    assert tuple(map(str, later.arrays["__return"].shape)) == ("N", "2")
