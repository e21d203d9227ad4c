"""Slices of length one, which DaCe's frontend turns into indices.

NumPy keeps the axis of a slice of length one: ``a[:, 0:1]`` has shape ``(N, 1)``, and ``a / a[:, 0:1]``
divides each row by its first element. DaCe's frontend (1.0.2 and 2 alike) drops that axis, as it does for
an index, so the operand is ``(N,)`` and broadcasts along the last axis instead: ``a / a[:, 0:1]`` divides each
column by the first column's elements (a wrong result even in one process where ``a`` is square, a broadcast
error elsewhere), and ``d[:, k:k + 1] + d[k:k + 1, :]`` is ``(N,)`` where NumPy's is ``(N, N)``. The SDFG
keeps no trace of the slice (its memlet is the index's), so the program's source is read (the
``@dace.program`` definitions around the lines DaCe records in its nodes' debug information, called programs
included): such a subscript is refused before any rank starts, naming the array, the
line and a spelling DaCe gets right (``a[:, 0][:, np.newaxis]``).

Only a slice of length one after an axis the subscript keeps changes how the operand broadcasts (a leading
``a[0:1, :]`` broadcasts as ``a[0, :]`` does), and only where it meets another array in an elementwise
operation (an arithmetic operator, a comparison, a binary ufunc such as ``np.minimum``) is the result known
to differ. Left alone: such a subscript bound to a name, copied into a slice, reduced, or with a number or
another such subscript (programs written for DaCe rely on the dropped axis: NPBench's N-body takes
``x = pos[:, 0:1]`` for a vector and forms ``np.add.outer(-x, x)``), and the memlets of DaCe's explicit style
(``x << A[:, 0:1]``).
"""
import ast
import linecache
from typing import List, NamedTuple

#: NumPy's elementwise functions of two or three arrays, which broadcast their operands (``np.add.outer`` is
#: an attribute of ``np.add``, not one of these).
_UFUNCS = frozenset({"add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "power", "mod", "remainder",
           "minimum", "maximum", "fmin", "fmax", "where", "arctan2", "hypot", "greater", "less", "equal",
           "not_equal", "greater_equal", "less_equal", "logical_and", "logical_or", "copysign"})


class UnitSlice(NamedTuple):
    """A subscript of ``array`` whose slice ``subset`` has an axis of length one that DaCe drops."""
    array: str
    subset: str
    text: str
    line: int
    filename: str
    spelling: str

    def reason(self) -> str:
        return (f"'{self.text}' ({self.filename}, line {self.line}) keeps an axis of length 1 in NumPy, but "
                "DaCe's frontend drops it as if the slice were an index, so the operand broadcasts along other "
                "axes than in NumPy (a wrong result even in one process); write "
                f"'{self.spelling}', which keeps the axis")


def _is_one(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == 1 and not isinstance(node.value, bool)


def _unit(sl: ast.Slice) -> bool:
    """Whether ``lower:upper`` has length one as written (``0:1``, ``k:k + 1``, ``:1``)."""
    if sl.step is not None and not _is_one(sl.step):
        return False
    lower, upper = sl.lower, sl.upper
    if upper is None:
        return False
    if lower is None:
        return _is_one(upper)
    if isinstance(lower, ast.Constant) and isinstance(upper, ast.Constant):
        ints = all(isinstance(x.value, int) and not isinstance(x.value, bool) for x in (lower, upper))
        return ints and upper.value - lower.value == 1 and lower.value >= 0
    if isinstance(upper, ast.BinOp) and isinstance(upper.op, ast.Add):
        same = ast.dump(lower)
        return ((ast.dump(upper.left) == same and _is_one(upper.right))
                or (ast.dump(upper.right) == same and _is_one(upper.left)))
    return False


def _kept(elt) -> bool:
    """Whether an element of a subscript keeps an axis (a slice, ``...``, ``np.newaxis`` / ``None``)."""
    if isinstance(elt, ast.Slice):
        return True
    if isinstance(elt, ast.Constant) and (elt.value is None or elt.value is Ellipsis):
        return True
    return isinstance(elt, ast.Attribute) and elt.attr == "newaxis"


def _spelling(node: ast.Subscript) -> str:
    """The subscript with each unit slice an index, and the axes put back with ``np.newaxis``."""
    first, again = [], []
    for elt in node.slice.elts:
        if isinstance(elt, ast.Slice) and _unit(elt):
            first.append(ast.unparse(elt.lower) if elt.lower is not None else "0")
            again.append("np.newaxis")
        else:
            first.append(ast.unparse(elt))
            if _kept(elt):
                again.append(":")
    while again and again[-1] == ":":
        again.pop()
    return f"{ast.unparse(node.value)}[{', '.join(first)}][{', '.join(again)}]"


def _is_unit_subscript(node) -> bool:
    """A subscript with a slice of length one after a kept axis (the shape DaCe gets wrong)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Tuple)):
        return False
    elts = node.slice.elts
    return any(isinstance(e, ast.Slice) and _unit(e) and any(_kept(x) for x in elts[:i]) for i, e in enumerate(elts))


def _broadcasts(parents: dict, node: ast.Subscript) -> bool:
    """Whether ``node`` is an operand of an elementwise operation with another array (an arithmetic
    operator, a comparison, a binary ufunc), where its shape decides the result's."""
    up = parents.get(node)
    if isinstance(up, ast.BinOp) and not isinstance(up.op, (ast.LShift, ast.RShift, ast.MatMult)):
        others = [up.right if up.left is node else up.left]
    elif isinstance(up, ast.Compare):
        others = [x for x in [up.left] + up.comparators if x is not node]
    elif (isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute) and up.func.attr in _UFUNCS
          and node in up.args):
        others = [x for x in up.args if x is not node]
    else:
        return False
    # a number broadcasts alike either way; two such subscripts lose the same axis
    return any(not isinstance(x, ast.Constant) and not _is_unit_subscript(x) for x in others)


def _found_in(fn, filename: str) -> List[UnitSlice]:
    parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    return [UnitSlice(node.value.id, ", ".join(ast.unparse(e) for e in node.slice.elts), ast.unparse(node), node.lineno,
                      filename, _spelling(node))
            for node in ast.walk(fn)
            if _is_unit_subscript(node) and isinstance(node.ctx, ast.Load) and _broadcasts(parents, node)]


def _definitions(filename: str) -> list:
    """Every definition of a DaCe program in a source file."""
    lines = linecache.getlines(filename)
    try:
        tree = ast.parse("".join(lines)) if lines else None
    except SyntaxError:
        return []
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_program(n)] if tree else []


def _is_program(fn) -> bool:
    """Whether a definition is decorated as a DaCe program (``@dace.program``, ``@dc.program(...)``,
    ``@dace.method``): other functions around a node's line (a user's script that called ``from_torch``,
    whose frame lent the node its line) are NumPy or PyTorch code, with their own semantics."""
    return any(("program" in t or "method" in t) for t in (ast.unparse(d) for d in fn.decorator_list))


def _functions(sdfg):
    """(definition, file) of each program behind ``sdfg``: the definitions around the lines its nodes came
    from (a called ``@dace.program`` is inlined, and only its nodes' lines still name it)."""
    lines = {}
    for sd in sdfg.all_sdfgs_recursive():
        infos = [sd.debuginfo] + [getattr(n, "debuginfo", None) for st in sd.states() for n in st.nodes()]
        for info in infos:
            if info is not None and info.filename and info.start_line:
                lines.setdefault(info.filename, set()).add(info.start_line)
    for filename, at in lines.items():
        defs = _definitions(filename)
        found = {}
        for line in at:
            around = [d for d in defs if d.lineno <= line <= (d.end_lineno or d.lineno)]
            if around:
                inner = max(around, key=lambda d: d.lineno)
                found[id(inner)] = inner
        for fn in found.values():
            yield fn, filename


def unit_slices(sdfg) -> List[UnitSlice]:
    """Every subscript of the programs behind ``sdfg`` (where their source can be read) with a slice of
    length one after a kept axis."""
    out = []
    for fn, filename in _functions(sdfg):
        out += _found_in(fn, filename)
    return out
