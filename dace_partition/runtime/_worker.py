"""Entry point of the ranks started by ``dace_partition.run`` for a program without a call plan (``call_plan.py``;
those with one run ``_plain_worker.py``, without DaCe): load, call, save rank 0's outputs.

For a program lowered with ``io="distributed"``, every rank reads the whole inputs, passes its own
tiles (``Layout.scatter``), and the output tiles are joined on rank 0 (``Layout.gather``): the test
harness's way of checking a distributed-io program against the single-process result.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

from ..compat import return_array_names
from ._plain_worker import _pack, _read_npz
from .launch import load, written_arguments


def _read(tmp):
    return _read_npz(os.path.join(tmp, "inputs.npz"))


def _distributed(prog, comm, inputs):
    lays = prog.layouts
    syms = {k: v for k, v in inputs.items() if isinstance(v, (int, np.integer))}
    local = {k: (lays[k].scatter(v, comm.rank, **syms) if k in lays else v) for k, v in inputs.items()}
    result = prog(**local)
    results = result if isinstance(result, tuple) else (result, )
    # the i-th result is not __return_i past ten results on DaCe 1.0.2 (string order): compat knows
    names = ["__return"] if not isinstance(result, tuple) else return_array_names(len(results))
    joined = []
    for name, r in zip(names, results):
        if r is None:
            continue
        tiles = comm.gather(np.asarray(r), root=0)
        if comm.rank == 0:
            joined.append(lays[name].gather(tiles, **syms) if name in lays else tiles[0])
    written = {}
    for k in written_arguments(prog.sdfg):
        if k in local:
            tiles = comm.gather(local[k], root=0)
            if comm.rank == 0:
                written[k] = lays[k].gather(tiles, **syms) if k in lays else tiles[0]
    if comm.rank != 0:
        return None
    if result is None:
        return _pack(None, written)
    return _pack(tuple(joined) if isinstance(result, tuple) else joined[0], written)


def main(folder, tmp):
    comm = MPI.COMM_WORLD
    prog = load(folder, comm)
    if prog.layouts:
        out = _distributed(prog, comm, _read(tmp))
    else:
        inputs = prog.signature.in_layout(_read(tmp)) if comm.rank == 0 else {}
        result = prog(**inputs)
        out = None
        if comm.rank == 0:
            out = _pack(result, {k: inputs[k] for k in written_arguments(prog.sdfg) if k in inputs})
    if comm.rank == 0:
        np.savez(os.path.join(tmp, "outputs.npz"), **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
