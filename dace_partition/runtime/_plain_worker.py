"""Entry point of ``run``'s ranks for a program with a call plan (``call_plan.py``): NumPy, mpi4py and ctypes only.

    python -m mpi4py .../_world_check.py RANKS LAUNCHER .../_plain_worker.py BUILD_FOLDER RUN_FOLDER

It is run by path, so it imports nothing of the package (and so not DaCe): a rank starts in about a tenth of
the time. It does what ``_worker.py`` does. Inputs on rank 0: rank 0 reads the inputs and the plan, every rank
learns the arguments' shapes and scalar values from one broadcast, and the ranks other than 0 pass
uninitialised arrays of those shapes. io="distributed": every rank reads the whole inputs and passes its tiles
(the plan holds every rank's blocks), and rank 0 joins the tiles of the results and of the written arguments.
Every rank calls ``__dace_init``, ``__program`` and ``__dace_exit`` of the library, and rank 0 saves the
results as ``_worker.py`` does. The calling process has already checked the inputs against the signature.
"""
import ctypes
import json
import os
import sys

if os.path.dirname(os.path.abspath(__file__)) == os.path.abspath(sys.path[0]):
    del sys.path[0]  # run by path: the runtime's own modules must not shadow NumPy's imports

import numpy as np  # noqa: E402

# Shared with the package (build.py, launch.py and call_plan.py import them from here; this file imports
# nothing of the package, and not mpi4py either until it runs as a rank).
BOUND = "dace_partition_bound.npz"  # values bound to arguments (runtime.bind), beside the build
WRITTEN = "__written_"  # prefix of the written arguments saved beside a return value
CALL = "call.json"  # in a launch's run folder: the call plan with this call's return shapes


class CallFailed(RuntimeError):
    pass


def _read_plan(tmp):
    with open(os.path.join(tmp, CALL)) as f:
        return json.load(f)


def _read_npz(path):
    """{name: a scalar (0-d entries) or a C-contiguous array}."""
    with np.load(path, allow_pickle=False) as f:
        return {k: (f[k].item() if f[k].ndim == 0 else np.ascontiguousarray(f[k])) for k in f.files}


def global_array_hint(name: str) -> str:
    """Why an argument named ``__g_...`` is missing: DaCe made a module-level array into it (here, so that
    the ranks, which import neither the package nor DaCe, and the caller's checks say the same)."""
    if not name.startswith("__g_"):
        return ""
    return (f": the program reads the module-level array '{name[4:]}', which DaCe passes as this argument; "
            f"lower the @dace.program itself (dp.lower(program, ...) binds it), or pass {name}=...")


def _read_inputs(folder, tmp, plan):
    """The arguments (file inputs over bound values) and those that came from the file."""
    given = _read_npz(os.path.join(tmp, "inputs.npz"))
    bound = os.path.join(folder, BOUND)
    args = {**_read_npz(bound), **given} if os.path.exists(bound) else dict(given)
    missing = [name for name, *_ in plan["args"] if name not in args and not name.startswith("__return")]
    if missing:
        hints = "".join(f"; '{m}'{global_array_hint(m)}" for m in missing if global_array_hint(m))
        raise CallFailed(f"dace_partition: '{plan['program']}' is missing argument(s) {missing}{hints}")
    return args, given


def _check_dtypes(plan, args):
    for name, kind, dtype, _ in plan["args"]:
        if kind == "array" and name in args and np.dtype(args[name].dtype).str != dtype:
            raise CallFailed(f"dace_partition: argument '{name}' has dtype {args[name].dtype}, expected {np.dtype(dtype)}")


def _describe(plan, args):
    """What the other ranks need: every array's shape and dtype, every scalar's value."""
    meta = {}
    for name, kind, *_ in plan["args"]:
        if name.startswith("__return"):
            continue
        v = args[name]
        meta[name] = ("array", v.shape, v.dtype.str) if kind == "array" else ("value", v)
    return meta


def _returns(plan):
    return [np.ndarray(tuple(r["shape"]), np.dtype(r["dtype"]), buffer=np.empty(r["size"], np.dtype(r["dtype"])),
                       strides=tuple(r["strides"])) for r in plan["returns"]]


def call(folder, plan, args, rank):
    """Calls the library once on this rank; returns the return arrays (in the plan's order)."""
    lib = ctypes.CDLL(os.path.join(folder, plan["library"]))
    name = plan.get("compiled", plan["program"])  # DaCe's name for its build (see call_plan.compiled_name)
    init = getattr(lib, f"__dace_init_{name}")
    init.restype = ctypes.c_void_p
    program = getattr(lib, f"__program_{name}")
    finish = getattr(lib, f"__dace_exit_{name}")
    finish.restype = ctypes.c_int
    results = _returns(plan)
    values = dict(args)
    values.update({r["name"]: arr for r, arr in zip(plan["returns"], results)})
    cargs = {}
    for arg, kind, dtype, ctype in plan["args"]:
        v = values[arg]
        if kind == "array":
            cargs[arg] = ctypes.c_void_p(v.__array_interface__["data"][0])
        else:  # cast to the parameter's type first, as DaCe does (a float given for an integer)
            cargs[arg] = getattr(ctypes, ctype)(np.dtype(dtype).type(v).item())
    handle = init(*[cargs[a] for a in plan["init"]])
    if not handle:
        raise CallFailed(f"dace_partition: '{name}' failed to initialize on rank {rank}")
    handle = ctypes.c_void_p(handle)
    program(handle, *[cargs[a[0]] for a in plan["args"]])
    status = finish(handle)
    if status != 0:
        raise CallFailed(f"dace_partition: '{name}' reported error {status} when it finished on rank "
                         f"{rank}")
    return results


def _as_result(plan, results):
    """The return arrays as a call of the program returns them: None, one value or a tuple; a scalar as
    ``.item()`` (``program._Caller``)."""
    values = [arr.item() if r["scalar"] else arr for r, arr in zip(plan["returns"], results)]
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _pack(result, written):
    """Rank 0's outputs as ``launch.launch`` reads them back (both workers write them so): the written
    arguments alone when the program returns nothing, else the result and the written arguments beside it."""
    if result is None:
        out = dict(written)
        out["__kind"] = np.array("none")
    elif isinstance(result, tuple):
        out = {f"__r{i}": np.asarray(r) for i, r in enumerate(result)}
        out.update(__kind=np.array("tuple"), __n=np.array(len(result)))
    else:
        out = {"__r0": np.asarray(result), "__kind": np.array("single")}
    if result is not None:
        out.update({WRITTEN + k: np.asarray(v) for k, v in written.items()})
    return out


def _boxes():
    """``ir/boxes.py`` (NumPy only), loaded by path: the tiles are cut and joined as ``Layout`` does."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ir", "boxes.py")
    spec = importlib.util.spec_from_file_location("dace_partition_boxes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _distributed(folder, tmp, plan, comm):
    """io="distributed", as ``_worker._distributed``: every rank reads the whole inputs and passes its tiles;
    rank 0 joins the result tiles and the written arguments' tiles. Returns rank 0's outputs (else None)."""
    lays, boxes = plan["layouts"], _boxes()

    def tile(k, whole):  # the plan has a box (or None) for each of the job's ranks
        lay = lays[k]
        return boxes.tile(whole, lay["boxes"][comm.rank], lay["local_shape"], lay["dtype"])

    def join(k, tiles):
        return boxes.join(tiles, lays[k]["boxes"], lays[k]["shape"], lays[k]["dtype"])

    args, given = _read_inputs(folder, tmp, plan)
    local = {k: (tile(k, v) if k in lays else v) for k, v in args.items()}
    result = _as_result(plan, call(folder, plan, local, comm.rank))
    joined = []
    for r, value in zip(plan["returns"], result if isinstance(result, tuple) else (result, )):
        tiles = comm.gather(np.asarray(value), root=0)
        if comm.rank == 0:
            joined.append(join(r["name"], tiles) if r["name"] in lays else tiles[0])
    written = {}
    for k in plan["written"]:
        if k in given:
            tiles = comm.gather(local[k], root=0)
            if comm.rank == 0:
                written[k] = join(k, tiles) if k in lays else tiles[0]
    if comm.rank != 0:
        return None
    return _pack(None if result is None else tuple(joined) if isinstance(result, tuple) else joined[0], written)


def main(folder, tmp):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        plan = _read_plan(tmp)
        if plan["layouts"]:
            comm.bcast((plan, None), root=0)
        else:
            args, given = _read_inputs(folder, tmp, plan)
            _check_dtypes(plan, args)
            comm.bcast((plan, _describe(plan, args)), root=0)
    else:
        plan, meta = comm.bcast(None, root=0)
        if meta is not None:
            args = {name: (np.empty(v[0], dtype=np.dtype(v[1])) if kind == "array" else v[0])
                    for name, (kind, *v) in meta.items()}
    if plan["layouts"]:
        out = _distributed(folder, tmp, plan, comm)
    else:
        result = _as_result(plan, call(folder, plan, args, comm.rank))
        out = None
        if comm.rank == 0:
            out = _pack(result, {k: given[k] for k in plan["written"] if k in given})
    if comm.rank == 0:
        np.savez(os.path.join(tmp, "outputs.npz"), **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
