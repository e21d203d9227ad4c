"""Scalars that DaCe's frontend aliases where Python copies.

In Python ``T = dT`` binds ``T`` to the value of ``dT``; a later ``T += dT`` leaves ``dT`` alone. DaCe's
frontend (1.0.2 and 2.x) makes ``T`` a second name of ``dT``'s container when ``dT`` is a scalar the program
computed itself, as it rightly does for arrays: the ``T += dT`` then doubles ``dT`` (``dT = dT + dT`` in the
SDFG), a wrong result even in one process. The SDFG keeps no trace of the second name, so the program's
source is read (the file and lines DaCe records in the SDFG's debug information): such a program is refused
before any rank starts, naming the scalar, both lines and a spelling DaCe copies (``T = dT + 0``).
Only a first binding of ``T`` aliases (into a variable bound before, the frontend copies); program arguments
and array elements are copied too, and an alias that neither name is written after is harmless: all are left
alone.
"""
import ast
import linecache
import textwrap
from typing import Iterator, List, NamedTuple, Optional

from dace import data


class ScalarAlias(NamedTuple):
    """``name = scalar`` (line ``line``) and a later write of either name (line ``written``)."""
    name: str
    scalar: str
    line: int
    written: int
    written_name: str
    filename: str

    @property
    def array(self) -> str:
        return self.scalar

    @property
    def subset(self) -> str:
        return "0"

    def reason(self) -> str:
        where = f"{self.filename}, line {self.line}"
        other = self.name if self.written_name == self.scalar else self.scalar
        return (f"'{self.name} = {self.scalar}' ({where}) makes '{self.name}' a second name of the scalar "
                f"'{self.scalar}' in DaCe's frontend instead of a copy as in Python, so writing "
                f"'{self.written_name}' on line {self.written} also changes '{other}' (a wrong result even in "
                f"one process); write '{self.name} = {self.scalar} + 0' to give '{self.name}' a value of its own")


def _function(sdfg) -> Optional[ast.FunctionDef]:
    info = sdfg.debuginfo
    if info is None or not info.filename or not info.start_line:
        return None
    lines = linecache.getlines(info.filename)
    if not lines:
        return None
    source = textwrap.dedent("".join(lines[info.start_line - 1:info.end_line]))
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a range that is not one whole definition: nothing is claimed
        return None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1:
        return None
    fn = defs[0]
    ast.increment_lineno(fn, info.start_line - 1)
    return fn


def _stores(fn) -> Iterator[tuple]:
    """(line, name) of every plain name a statement of ``fn`` binds (assignments, augmented ones, loops)."""
    for node in ast.walk(fn):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    yield n.lineno, n.id


def _transient_scalar(sdfg, name) -> bool:
    desc = sdfg.arrays.get(name)
    return isinstance(desc, data.Scalar) and desc.transient


def _aliases_in(sdfg, fn) -> List[ScalarAlias]:
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    stores = sorted(_stores(fn))
    out = []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Name)):
            continue
        name, scalar, line = node.targets[0].id, node.value.id, node.lineno
        if name == scalar or scalar in params or not any(_transient_scalar(sdfg, n) for n in (scalar, name)):
            continue  # DaCe 2's simplification keeps the container under either name
        if not any(n == scalar and ln < line for ln, n in stores):  # not a scalar of the program's own
            continue
        if any(n == name and ln < line for ln, n in stores):  # an existing variable: the frontend copies into it
            continue
        later = [(ln, n) for ln, n in stores if ln > line and n in (name, scalar)]
        if later:
            out.append(ScalarAlias(name, scalar, line, later[0][0], later[0][1], sdfg.debuginfo.filename))
    return out


def scalar_aliases(sdfg) -> List[ScalarAlias]:
    """Every ``name = scalar`` of the programs behind ``sdfg`` and its nested SDFGs (where their source can
    be read) that DaCe turns into an alias and that a later write makes visible."""
    out, seen = [], set()
    for sd in sdfg.all_sdfgs_recursive():
        info = sd.debuginfo
        key = (getattr(info, "filename", None), getattr(info, "start_line", None))
        if key in seen:
            continue
        seen.add(key)
        fn = _function(sd)
        if fn is not None:
            out += _aliases_in(sd, fn)
    return out
