"""The layers meet through public names: the search (the cost model) uses the passes' public functions
and ``ir/``'s shared rules, never a private helper of ``passes/`` (two copies of one rule, or one rule
reached around its module's interface, is how the model drifted from the lowering before).

Pure Python: the package's source is parsed with ``ast``; nothing is imported.
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "dace_partition"


def _private_imports(path: pathlib.Path, layer: str):
    """(line, module, name) of every private name ``path`` imports from the package's ``layer``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        parts = node.module.split(".")
        if parts[0] == "dace_partition":
            parts = parts[1:]
        if not parts or parts[0] != layer:
            continue
        out += [(node.lineno, node.module, a.name) for a in node.names if a.name.startswith("_")]
    return out


@pytest.mark.parametrize("path", sorted((PACKAGE / "search").glob("*.py")), ids=lambda p: p.name)
def test_the_search_imports_nothing_private_from_the_passes(path):
    assert _private_imports(path, "passes") == []


def test_the_check_sees_a_private_import(tmp_path):
    """The check itself: a private name imported relatively or absolutely is found."""
    f = tmp_path / "m.py"
    f.write_text("from ..passes.loops import _x, y\nfrom dace_partition.passes import _z\nfrom ..ir import _w\n")
    assert [n for _, _, n in _private_imports(f, "passes")] == ["_x", "_z"]
