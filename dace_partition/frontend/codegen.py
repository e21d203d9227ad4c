"""Turns generated NumPy-level source into an SDFG through DaCe's own Python frontend.

Both front ends (ONNX graphs and traced ATen graphs) translate every operator into a few lines of NumPy
code on statically shaped arrays. Going through DaCe's frontend rather than building SDFG nodes by hand
means the partitioner sees exactly what it sees for a hand-written ``@dace.program``: plain maps and
library nodes it already knows how to tile.

DaCe reads a program's source with ``inspect``, so the generated function is written to a file under a
cache folder and imported from there (the file name is a hash of the source, so equal graphs share it).
"""
import hashlib
import importlib.util
import keyword
import os
import re
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import dace

_CACHE = os.path.join(tempfile.gettempdir(), f"dace_partition_frontend_{os.getuid()}")


def identifier(name: str, taken=()) -> str:
    """A valid, readable Python identifier for a tensor name such as ``fc1.weight`` or ``onnx::MatMul_7``."""
    ident = re.sub(r"\W", "_", name).strip("_") or "t"
    if ident[0].isdigit() or keyword.iskeyword(ident) or ident in ("np", "dace", "math"):
        ident = "t_" + ident
    base, k = ident, 1
    while ident in taken:
        ident = f"{base}_{k}"
        k += 1
    return ident


def dace_type(dtype) -> str:
    """The ``dace.<type>`` spelling of a NumPy dtype, for the generated signature."""
    return "dace." + dace.dtypes.typeclass(np.dtype(dtype).type).to_string()


def _dace_return_order(results: List[str]) -> List[str]:
    """DaCe 1.0.2 returns a tuple in the *sorted name* order of its ``__return_<j>`` arrays (the j-th
    returned expression), which puts ``__return_10`` before ``__return_2``; DaCe 2 in ``j``'s order
    (:func:`..compat.return_array_names`). Returning the expressions permuted so that the order DaCe
    hands back is the intended order keeps every result in its place."""
    from .. import compat
    names = compat.return_array_names(len(results))
    permuted = [None] * len(results)
    for p, name in enumerate(names):
        permuted[int(name[len("__return_"):])] = results[p]
    return permuted


class ProgramBuilder:
    """Collects a program's arguments, body lines and results, then makes an SDFG of them.

    Arguments are either *inputs* (given at every call) or *bound* (weights: their values are stored with
    the SDFG by :func:`dace_partition.runtime.launch.bind`, so callers pass only the inputs). Both are plain SDFG
    arguments, so a schedule can partition weights like any other array.
    """

    def __init__(self, name: str):
        self.name = identifier(name)
        self.args: List[Tuple[str, Tuple[int, ...], np.dtype]] = []
        self.bound: Dict[str, np.ndarray] = {}
        self.lines: List[str] = []
        self.results: List[str] = []
        self.names = set()

    def fresh(self, hint: str) -> str:
        ident = identifier(hint, self.names)
        self.names.add(ident)
        return ident

    def argument(self, name: str, shape: Sequence[int], dtype, value: Optional[np.ndarray] = None) -> str:
        ident = self.fresh(name)
        self.args.append((ident, tuple(int(s) for s in shape), np.dtype(dtype)))
        if value is not None:
            self.bound[ident] = np.array(np.reshape(value, shape), dtype=dtype, order="C", copy=True)
        return ident

    def line(self, code: str):
        self.lines.append(code)

    def result(self, ident: str):
        self.results.append(ident)

    def source(self) -> str:
        sig = ", ".join(f"{n}: {dace_type(d)}" + (f"[{', '.join(map(str, s))}]" if s else "") for n, s, d in self.args)
        body = [f"    {l}" for l in self.lines] or ["    pass"]
        if self.results:
            body.append(f"    return {', '.join(_dace_return_order(self.results))}")
        return ("import math\nimport numpy as np\nimport dace\n\n\n"
                f"def {self.name}({sig}):\n" + "\n".join(body) + "\n")

    def to_sdfg(self, simplify: bool = True) -> dace.SDFG:
        src = self.source()
        os.makedirs(_CACHE, exist_ok=True)
        digest = hashlib.sha1(src.encode()).hexdigest()[:16]
        path = os.path.join(_CACHE, f"{self.name}_{digest}.py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(src)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"_dp_gen_{self.name}_{digest}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sdfg = dace.program(getattr(module, self.name)).to_sdfg(simplify=simplify)
        from ..runtime.build import bind
        bind(sdfg, **self.bound)
        return sdfg
