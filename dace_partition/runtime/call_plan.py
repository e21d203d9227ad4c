"""The call of a built program as plain data, so that ``run``'s ranks can call its library without DaCe.

Every rank that ``run`` starts used to import DaCe (sympy, networkx, its configuration schema) and read the
whole SDFG back, about 2 s of CPU a rank, to make one call whose arguments the calling process had already
checked. The call needs far less: the C signature's order and types, the symbols ``__dace_init`` takes, and
the shapes of the return arrays. They are written down twice:

* at build time (:func:`save`, from the SDFG that is compiled), what depends on no value: the order of the
  arguments, their C types, the init symbols, the return arrays' names and the arguments the program writes;
* at launch (:func:`for_launch`, in the calling process), what the call's symbol values decide: the return
  arrays' shapes and strides and, for io="distributed", every rank's block of each tiled array.

``_plain_worker.py`` reads the result with NumPy, mpi4py and ctypes only. The order is the one DaCe's own call
uses (``CompiledSDFG._construct_args``: ``signature_arglist``, then the init arguments are the free symbols among
them). A program with anything beyond plain arrays and scalars in host memory (GPU storage, callbacks,
structures and struct elements, streams, device twins) gets no plan and keeps DaCe's worker.
"""
import ctypes
import json
import os
import re
from typing import Optional

import numpy as np

import dace
from dace import data as dt, dtypes

from ._plain_worker import CALL

FILE = "dace_partition_call.json"  # beside the build, next to the program record
_HOST = (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap)


def _refusal(sdfg, arglist=None) -> Optional[str]:
    """Why the program's call cannot be written as plain data (None: it can). ``arglist``: the SDFG's, where
    the caller has it already (it walks the whole SDFG)."""
    for name, desc in (arglist if arglist is not None else sdfg.arglist()).items():
        # A struct element type would pass as raw bytes (NumPy's "V16"): DaCe's worker keeps its fields.
        if isinstance(desc, dt.Structure) or isinstance(desc.dtype, (dtypes.callback, dtypes.pyobject, dtypes.struct)):
            return f"argument '{name}' is a {type(desc).__name__} of {desc.dtype}"
        if isinstance(desc, dt.Array):
            if type(desc) is not dt.Array or desc.storage not in _HOST:
                return f"array '{name}' is a {type(desc).__name__} in {desc.storage}"
            if desc.start_offset != 0 or tuple(desc.strides) != _c_strides(desc.shape):
                return f"array '{name}' is not C-contiguous (strides {desc.strides})"  # the ranks get C copies
        elif not isinstance(desc, dt.Scalar):
            return f"argument '{name}' is a {type(desc).__name__}"
        elif _ctype_name(desc) is None:
            return f"scalar '{name}' has no plain C type ({desc.dtype})"
    return None


def _c_strides(shape) -> tuple:
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step = step * n
    return tuple(reversed(out))


def _ctype_name(desc) -> Optional[str]:
    try:
        ctype = desc.dtype.as_ctypes()
    except (TypeError, ValueError, AttributeError):
        return None
    name = getattr(ctype, "__name__", "")
    return name if getattr(ctypes, name, None) is ctype else None


def _c_parameters(folder: str, name: str) -> Optional[list]:
    """The parameter names of ``__program_<name>`` in the generated header (the handle left out), None
    where it cannot be read."""
    try:
        with open(os.path.join(folder, "include", f"{name}.h")) as f:
            m = re.search(rf"__program_{re.escape(name)}\(([^)]*)\)", f.read())
    except OSError:
        return None
    return [re.split(r"[\s*&]+", p.strip())[-1] for p in m.group(1).split(",")[1:]] if m else None


def _signature(sdfg):
    """(``arglist``, the argument order of the C signature) of ``sdfg``."""
    typedict = sdfg.arglist()
    return typedict, sdfg.signature_arglist(with_types=False, arglist=typedict)


def compiled_name(folder: str, name: str) -> str:
    """The name DaCe compiled the program ``name`` under in ``folder``: its own, or ``<name>_<k>`` where a
    library of that name from this folder was loaded in the building process (DaCe then compiles its copy
    under a new name, in the same folder): the newest generated source of the two tells."""
    src = os.path.join(folder, "src", "cpu")
    try:
        found = [f[:-4] for f in os.listdir(src)
                 if f.endswith(".cpp") and re.fullmatch(rf"{re.escape(name)}(_\d+)?", f[:-4])]
    except OSError:
        return name
    if not found:
        return name
    return max(found, key=lambda n: (os.path.getmtime(os.path.join(src, n + ".cpp")), n == name))


def _generated(built, folder: str, compiled: str):
    """The SDFG DaCe generated the code from (``program.sdfg``, DaCe 2: ``program.sdfgz``, in the build
    folder) where the generated signature is not the one ``built`` gives, else ``built``; with its
    ``_signature``. Library nodes expanded during code generation can use a symbol that was only an array's
    size before (DaCe's transformation test ``trivial_loop``: ``I`` of ``data[I, J]``), and the call written
    from ``built`` would pass ``J`` where ``I`` is taken. Reading the SDFG back costs seconds for the largest
    programs, so it is done only then."""
    signature = _signature(built)
    c = _c_parameters(folder, compiled)
    if c is None or c == signature[1]:
        return built, signature
    for name in ("program.sdfg", "program.sdfgz"):
        if os.path.exists(os.path.join(folder, name)):
            generated = dace.SDFG.from_file(os.path.join(folder, name))
            return generated, _signature(generated)
    return built, signature


def save(built, folder: str, written) -> None:
    """Writes the value-independent part of the call of ``built`` (the SDFG that was compiled) beside its
    build, or removes an older plan when this program's call cannot be written as data."""
    from ..compat import return_array_names
    path = os.path.join(folder, FILE)
    compiled = compiled_name(folder, built.name)
    built, (typedict, order) = _generated(built, folder, compiled)
    library = os.path.join("build", f"lib{compiled}.{dace.Config.get('compiler', 'library_extension')}")
    returns = sorted(k for k, d in built.arrays.items() if k.startswith("__return") and not d.transient)
    if returns and returns != ["__return"]:
        returns = return_array_names(len(returns))  # the order a call hands them back (compat)
    reason = _refusal(built, typedict)
    if reason is None and not os.path.exists(os.path.join(folder, library)):
        reason = f"no library at {library}"
    if reason is None and any(isinstance(built.arrays[r], dt.Stream) for r in returns):
        reason = "a stream is returned"
    if reason is not None:
        if os.path.exists(path):
            os.remove(path)
        return
    free = {str(s) for s in built.free_symbols}
    args = []
    for name in order:
        desc = typedict[name]
        kind = "array" if isinstance(desc, dt.Array) else "value"
        args.append([name, kind, np.dtype(desc.dtype.as_numpy_dtype()).str, _ctype_name(desc) if kind == "value" else None])
    plan = {"program": built.name, "compiled": compiled, "library": library, "args": args, "init": [a for a in order if a in free],
            "returns": returns, "written": list(written)}
    with open(path, "w") as f:
        json.dump(plan, f, indent=1)


def for_launch(sdfg, folder: str, inputs: dict, ranks: int, layouts=None) -> Optional[dict]:
    """The plan of ``folder`` completed with this call's return arrays (their shapes evaluated with the symbol
    values in ``inputs``), or None when the program has no plan and the ranks must load it with DaCe.
    ``sdfg``: the lowered program the caller holds (its return arrays are those of the compiled one).
    ``layouts`` (io="distributed"): every rank's block of each tiled argument and result, evaluated here, so
    a rank cuts and the root joins tiles without evaluating a layout (``ir.layout.Layout``)."""
    path = os.path.join(folder, FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        plan = json.load(f)
    if plan["program"] != sdfg.name:
        return None
    syms = {k: v for k, v in inputs.items() if k not in sdfg.arrays and isinstance(v, (int, np.integer))}
    syms.update({k: v for k, v in sdfg.constants.items() if isinstance(v, (int, np.integer))})
    try:
        return _with_values(plan, sdfg, syms, ranks, layouts or {})
    except (ValueError, TypeError, KeyError):  # a value this call does not give: DaCe's worker decides
        return None


def _with_values(plan, sdfg, syms, ranks, layouts):
    returns = []
    for name in plan["returns"]:
        desc = sdfg.arrays.get(name)
        if desc is None:
            return None
        dtype = np.dtype(desc.dtype.as_numpy_dtype())
        shape = [int(dace.symbolic.evaluate(s, syms)) for s in desc.shape]
        strides = [int(dace.symbolic.evaluate(s, syms)) * dtype.itemsize for s in desc.strides]
        total = int(dace.symbolic.evaluate(desc.total_size, syms))
        returns.append({"name": name, "dtype": dtype.str, "shape": shape, "strides": strides, "size": total,
                        "scalar": isinstance(desc, dt.Scalar)})
    plan["returns"] = returns
    plan["layouts"] = {}
    for name, lay in layouts.items():
        plan["layouts"][name] = {"shape": list(lay.shape_of(**syms)),
                                 "local_shape": list(lay.local_shape_of(**syms)), "dtype": lay.dtype,
                                 "boxes": [lay.box(r, **syms) for r in range(ranks)]}
    return plan


def write(plan: dict, run_dir: str) -> None:
    with open(os.path.join(run_dir, CALL), "w") as f:
        json.dump(plan, f)
