"""No module of ``dace_partition`` keeps a lowering decision or a communicator in module-level state
(issue 33), and nothing sets attributes on an SDFG object except :func:`dace_partition.ir.notes`.

Pure Python: the package's source is parsed with ``ast`` (nothing is imported, no MPI, no compiler).
A module-level assignment of a mutable container (a dict/list/set literal or comprehension, or a call of
``dict``, ``list``, ``set``, ``defaultdict``, ``OrderedDict``, ...) and a ``global`` statement that
rebinds a module's name fail the test, naming the module and the variable, unless the allow-lists below
name them with a reason. Entries of ``CONSTANTS`` must also never be mutated anywhere in the package
(``NAME[...] =``, ``del NAME[...]``, ``NAME += ...``, ``NAME.update(...)``, ``.append``, ``.setdefault``,
``.pop``, ... or a ``global NAME``).
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "dace_partition"

# Lookup tables written once in the source and never changed (the test checks that nothing mutates them).
CONSTANTS = {
    ("analysis/constraints.py", "_OPS"): "DaCe reduction types -> ReduceOp, a fixed table",
    ("frontend/aten.py", "_FUNCTIONS"): "names of the elementwise ATen functions, a fixed set",
    ("ir/kinds.py", "_CODES"): "ReduceOp -> the runtime's operator codes, a fixed table",
    ("ir/layout.py", "_FUNCTIONS"): "the functions a serialised layout's expressions may call, a fixed table",
    ("runtime/launchers.py", "_SRUN_PLUGIN"): "MPI flavour -> srun's --mpi plug-in, a fixed table",
    ("runtime/launchers.py", "_MPIEXEC_NAMES"): "file names of MPI launchers, a fixed set",
    ("solvers/grid_mapped.py", "_MPI_OPS"): "operator -> MPI_Op name, a fixed table",
    ("solvers/hierarchical.py", "_CODE"): "synthesized collective -> executor code, a fixed table",
    ("solvers/hierarchical.py", "_MPI"): "executor code -> MPI call name (for reports), a fixed table",
    ("solvers/reduction/cost.py", "PRESETS"): "published link bandwidths of known machines, a fixed table",
    ("search/machine.py", "PRESETS"): "named machines the model can price for (DACE_PARTITION_MACHINE), a "
                                      "fixed table",
}

# Module-level state that is allowed to change, each with why it holds no lowering decision and no
# communicator.
ALLOWED_STATE = {
    ("solvers/registry.py", "_SOLVERS"): "the solver plug-in registry: user configuration (register()), "
                                         "not a decision about any program",
    ("solvers/registry.py", "_ORDER"): "the default order in which registered solvers are tried: user "
                                       "configuration, like _SOLVERS",
    ("solvers/registry.py", "_entry_points_loaded"): "whether the installed plug-ins' entry points were "
                                                     "registered once: part of the plug-in registry",
    ("search/machine.py", "_CACHED"): "the machine's calibration (read once from ~/.cache): a measurement "
                                      "of the machine, not a lowering decision",
    ("frontend/aten.py", "OPS"): "the ATen operator table, filled by the @op decorators when the module is "
                                 "imported and never changed after",
    ("schedule/discover.py", "_EXPANSIONS"): "a bounded memo of a pure function: a library node's scratch "
                                             "expansion keyed by the fingerprint of everything it depends on; "
                                             "callers get copies, it decides nothing",
    ("analysis/constraints.py", "_PROPAGATED"): "a bounded memo of a pure function: DaCe's memlet "
                                                "propagation keyed by its inputs' text; callers get copies, "
                                                "it decides nothing",
}

_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque", "bytearray",
                  "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "ChainMap"}
_MUTATORS = {"append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault", "add",
             "discard", "sort", "reverse", "move_to_end", "__setitem__", "__delitem__", "appendleft"}
_NAMES_OF_ANY_MODULE = {"__all__": "the module's public names, a fixed list"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), filename=str(path))


MODULES = dict(_modules())


def _is_mutable(value) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        f = value.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        return name in _MUTABLE_CALLS
    return False


def _targets(node):
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target], node.value
    return [], None


def _names(target):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            yield from _names(t)


def module_state():
    """(module, name, line, what) of every module-level mutable container and every rebound global."""
    out = []
    for mod, tree in MODULES.items():
        for node in tree.body:
            targets, value = _targets(node)
            if value is not None and _is_mutable(value):
                for t in targets:
                    for name in _names(t):
                        out.append((mod, name, node.lineno, "a mutable container at module level"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                for name in node.names:
                    out.append((mod, name, node.lineno, "rebound through a global statement"))
    return out


def _base_name(expr):
    """``X`` of ``X``, ``m.X`` (the attribute's name) or None."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def mutations(name: str, owner: str):
    """(module, line, how) of every place that may mutate module ``owner``'s ``name``: bare ``name`` in
    ``owner`` or in a module that imports it by name, ``<module>.name`` anywhere."""
    out = []
    for mod, tree in MODULES.items():
        bare = mod == owner or any(isinstance(n, ast.ImportFrom) and any(a.name == name for a in n.names)
                                   for n in ast.walk(tree))

        def hit(expr):
            if isinstance(expr, ast.Name):
                return bare and expr.id == name
            return isinstance(expr, ast.Attribute) and expr.attr == name

        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and hit(t.value):
                        out.append((mod, node.lineno, f"{ast.unparse(t)} assigned or deleted"))
                    elif isinstance(node, ast.AugAssign) and hit(t):
                        out.append((mod, node.lineno, f"{ast.unparse(t)} updated in place"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in _MUTATORS and hit(node.func.value):
                    out.append((mod, node.lineno, f"{ast.unparse(node.func)}(...)"))
            elif isinstance(node, ast.Global) and mod == owner and name in node.names:
                out.append((mod, node.lineno, f"global {name}"))
    return out


def test_no_module_level_mutable_state_outside_the_allow_list():
    found = [(m, n, line, what) for m, n, line, what in module_state()
             if (m, n) not in CONSTANTS and (m, n) not in ALLOWED_STATE and n not in _NAMES_OF_ANY_MODULE]
    assert not found, "module-level state (pass what it holds through an object, or allow-list it with a reason):\n" \
        + "\n".join(f"  dace_partition/{m}:{line} {n}: {what}" for m, n, line, what in found)


@pytest.mark.parametrize("module,name", sorted(CONSTANTS))
def test_constant_tables_are_never_mutated(module, name):
    assert (module, name) in {(m, n) for m, n, _, _ in module_state()}, \
        f"{module} no longer defines {name}: remove it from CONSTANTS"
    changed = mutations(name, module)
    assert not changed, f"{module}:{name} is listed as a constant but is changed:\n" + \
        "\n".join(f"  dace_partition/{m}:{line} {how}" for m, line, how in changed)


def test_the_allow_lists_name_existing_state_and_give_reasons():
    present = {(m, n) for m, n, _, _ in module_state()}
    for table in (CONSTANTS, ALLOWED_STATE):
        for key, reason in table.items():
            assert key in present, f"{key} is allow-listed but no longer module state: remove its entry"
            assert reason.strip(), key


@pytest.mark.parametrize("name", ["_LOWERED", "_GROUPS", "_SUBCOMMS"])
def test_decisions_and_communicators_are_not_module_state(name):
    """The hierarchical solver's lowering-time decision and the executors' sub-communicators belong to
    objects passed where they are needed (issue 33), never to a module."""
    found = [(m, line) for m, n, line, _ in module_state() if n == name]
    assert not found, f"{name} is module state again: {found}"


def _sdfg_attribute_uses():
    """Every place that reads or writes a private attribute of an SDFG by itself: ``x._dp_...``,
    ``x._dace_partition``, ``setattr/getattr/hasattr/delattr(x, "_dp...")``, or an assignment to a
    private attribute of an expression that names an SDFG (``sdfg._anything = ...``)."""
    out = []
    for mod, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if node.attr.startswith("_dp_") or node.attr == "_dace_partition":
                    out.append((mod, node.lineno, ast.unparse(node)))
                elif (isinstance(node.ctx, (ast.Store, ast.Del)) and node.attr.startswith("_")
                      and "sdfg" in ast.unparse(node.value).lower()):
                    out.append((mod, node.lineno, f"{ast.unparse(node)} assigned"))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("setattr", "getattr", "hasattr", "delattr") and len(node.args) >= 2):
                key = node.args[1]
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and \
                        (key.value.startswith("_dp") or key.value.startswith("_dace_partition")):
                    out.append((mod, node.lineno, ast.unparse(node)))
                elif node.func.id in ("setattr", "delattr") and mod != "ir/record.py" and \
                        "sdfg" in ast.unparse(node.args[0]).lower():
                    out.append((mod, node.lineno, ast.unparse(node)))
    return out


def test_sdfg_attributes_only_through_notes():
    """What the package knows about an SDFG (its record, report, bound values, build) lives in
    ``notes(sdfg)`` (dace_partition/ir/record.py), the one attribute that travels with the object."""
    found = _sdfg_attribute_uses()
    assert not found, "attributes set on an SDFG outside notes():\n" + \
        "\n".join(f"  dace_partition/{m}:{line} {what}" for m, line, what in found)


def test_the_scan_finds_what_it_looks_for():
    """The scanner itself: a module global, a global statement, a mutated constant and an SDFG attribute."""
    src = ("CACHE = {}\nTABLE = dict(a=1)\nFLAG = None\n"
           "def f(sdfg):\n    global FLAG\n    FLAG = 1\n    TABLE['b'] = 2\n    sdfg._dp_x = 1\n")
    saved = dict(MODULES)
    try:
        MODULES.clear()
        MODULES["fake.py"] = ast.parse(src)
        assert {(n, w.split()[0]) for _, n, _, w in module_state()} == {("CACHE", "a"), ("TABLE", "a"),
                                                                        ("FLAG", "rebound")}
        assert [how for _, _, how in mutations("TABLE", "fake.py")] == ["TABLE['b'] assigned or deleted"]
        assert [what for _, _, what in _sdfg_attribute_uses()] == ["sdfg._dp_x"]
    finally:
        MODULES.clear()
        MODULES.update(saved)
