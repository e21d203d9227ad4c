"""The program :func:`dace_partition.calibrate` compiles to measure DaCe-generated map code (a module of
its own: DaCe reads a program's source)."""
import dace

N = dace.symbol("N")


@dace.program
def stream_program(x: dace.float64[N], y: dace.float64[N]):
    return 2.0 * x + y
