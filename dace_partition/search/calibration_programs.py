"""The program :func:`dace_partition.calibrate` compiles to measure DaCe-generated map code (a module of
its own: DaCe reads a program's source)."""
import dace

N = dace.symbol("N")


@dace.program
def stream_program(x: dace.float64[N], y: dace.float64[N]):
    return 2.0 * x + y


@dace.program
def gpu_axpy(x: dace.float32[N], y: dace.float32[N]):
    """``calibrate(device="gpu")``'s memory-bound kernel: reads 8 bytes and writes 4 per element."""
    for i in dace.map[0:N]:
        y[i] = 2.0 * x[i] + y[i]


T = dace.symbol("T")


@dace.program
def gpu_axpy_steps(x: dace.float32[N], y: dace.float32[N]):
    """``gpu_axpy`` repeated ``T`` times in one call: a kernel launch (and DaCe's synchronization after its
    state) per step, which the calibration separates from the cost of the call itself."""
    for t in range(T):
        for i in dace.map[0:N]:
            y[i] = 2.0 * x[i] + y[i]


@dace.program
def gpu_gemm(A: dace.float64[N, N], B: dace.float64[N, N]):
    """``calibrate(device="gpu")``'s contraction (cuBLAS where the toolkit has it)."""
    return A @ B
