"""Entry point of the ranks started by ``dace_partition.run``: load, call, save rank 0's outputs."""
import os
import sys

import numpy as np
from mpi4py import MPI

from .launch import load, written_arguments


def main(folder, tmp):
    comm = MPI.COMM_WORLD
    prog = load(folder, comm)
    inputs = {}
    if comm.rank == 0:
        with np.load(os.path.join(tmp, "inputs.npz"), allow_pickle=False) as f:
            inputs = {k: (f[k].item() if f[k].ndim == 0 else f[k].copy()) for k in f.files}
    result = prog(**inputs)
    if comm.rank != 0:
        return
    if result is None:
        out = {k: inputs[k] for k in written_arguments(prog.sdfg) if k in inputs}
        out["__kind"] = np.array("none")
    elif isinstance(result, tuple):
        out = {f"__r{i}": np.asarray(r) for i, r in enumerate(result)}
        out.update(__kind=np.array("tuple"), __n=np.array(len(result)))
    else:
        out = {"__r0": np.asarray(result), "__kind": np.array("single")}
    np.savez(os.path.join(tmp, "outputs.npz"), **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
