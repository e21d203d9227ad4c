"""``calibrate(device="gpu")``'s measurement (dace_partition.search.gpu_calibration) with its programs' GPU
data flow emulated on the host (dace_partition.runtime.emulation.on_host): device arrays allocated
through the program's memory, symbols passed, results checked. Run under ``mpiexec -n 1``; prints the measurement as JSON."""
import json

import dace_partition as dp
from dace_partition.runtime.emulation import on_host
from dace_partition.search import gpu_calibration


def emulated(prog, name):
    sdfg = prog.to_sdfg()
    sdfg.name = name + "_emulated"
    dp.lower(sdfg, {}, device="gpu")
    return dp.compile(on_host(sdfg))


gpu_calibration._program = emulated
print(json.dumps(gpu_calibration.measure(big=1 << 16, small=64, gemm=0)))
