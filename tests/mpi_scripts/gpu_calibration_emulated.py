"""``calibrate(device="gpu")``'s measurement (dace_partition.search.gpu_calibration) with its programs' GPU
data flow emulated on the host (test_gpu_residency.on_host): device arrays allocated through the program's
memory, symbols passed, results checked. Run under ``mpiexec -n 1``; prints the measurement as JSON."""
import json
import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), ".."), os.path.join(os.path.dirname(__file__), "..", "mpi")]
import dace_partition as dp  # noqa: E402
from dace_partition.search import gpu_calibration  # noqa: E402
from test_gpu_residency import on_host  # noqa: E402


def emulated(prog, name):
    sdfg = prog.to_sdfg()
    sdfg.name = name + "_emulated"
    dp.lower(sdfg, {}, device="gpu")
    return dp.compile(on_host(sdfg))


gpu_calibration._program = emulated
print(json.dumps(gpu_calibration.measure(big=1 << 16, small=64, gemm=0)))
