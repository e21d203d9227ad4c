"""Types, notation and input validation of the synthesizer."""
import numpy as np
import pytest

from dace_partition.solvers.synthesis import (Mesh, format_type, local_shape, naive_plan, parse_type,
                                              synthesize)
from dace_partition.solvers.synthesis.factor_mesh import Assignment, FactorMesh

MESH = {"a": 2, "b": 2, "c": 2}


def test_mesh_is_ordered_and_row_major():
    m = Mesh({"x": 4, "y": 2})
    assert m.names == ("x", "y") and m.size == 8
    fm = FactorMesh(m)
    # device 5 = (x=2, y=1) row-major; x splits into x.0 (major) and x.1
    assert [a.name for a in fm.axes] == ["x.0", "x.1", "y"]
    assert list(fm.coords[5]) == [1, 0, 1]


def test_partition_spec_semantics():
    # P(("a","c"), None): block index = 2*i_a + i_c, devices row-major over (a, b, c)
    fm = FactorMesh(Mesh(MESH))
    asg = Assignment(fm, (8, 3), fm.spec_of((("a", "c"), ())), np.arange(8))
    offs = asg.offsets()[:, 0]
    expected = [2 * ((r >> 2) & 1) * 2 + 2 * (r & 1) for r in range(8)]
    assert list(offs) == expected


@pytest.mark.parametrize("text, shape, layout", [
    ('[8{"x","y"}32, 16]', (32, 16), (("y", "x"), ())),
    ("[360, 184{c:2}368, 320]", (360, 368, 320), ((), ("c",), ())),
    ("[90{c:2,a:2}360, 368, 160{b:2}320]", (360, 368, 320), (("a", "c"), (), ("b",))),
])
def test_parse_paper_notation(text, shape, layout):
    mesh = {"x": 2, "y": 2, "a": 2, "b": 2, "c": 2}
    assert parse_type(text, mesh) == (shape, layout)
    printed = format_type(shape, layout, mesh)
    assert parse_type(printed, mesh) == (shape, layout)


def test_format_minor_to_major():
    assert format_type((32, 16), (("y", "x"), ()), {"x": 2, "y": 2}) == '[8{"x","y"}32, 16]'


def test_string_layouts_in_synthesize():
    p = synthesize({"x": 4}, None, '[4{"x"}16, 8]', '[16, 2{"x"}8]')
    assert p.shape == (16, 8) and p.src == (("x",), ()) and p.dst == ((), ("x",))
    assert p.ops == ["alltoall"]


@pytest.mark.parametrize("kwargs, msg", [
    (dict(src=[("z",), ()], dst=[(), ()]), "unknown mesh axis 'z'"),
    (dict(src=[("a",), ("a",)], dst=[(), ()]), "used twice"),
    (dict(src=[("a", "b", "c"), ()], dst=[(), ()], shape=(4, 4)), "not divisible"),
    (dict(src=[("a",)], dst=[(), ()]), "has 1 entries but the array has rank 2"),
])
def test_invalid_inputs(kwargs, msg):
    args = dict(mesh=MESH, shape=(8, 8), itemsize=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        synthesize(**args)


def test_different_global_shapes():
    with pytest.raises(ValueError, match="different global shapes"):
        synthesize({"x": 2}, None, '[4{"x"}8, 4]', '[8, 2{"x"}4, 1]'.replace(", 1]", "]").replace("[8", "[16"))
    with pytest.raises(ValueError, match="different global shapes"):
        synthesize({"x": 2}, (8, 8), '[4{"x"}8, 4]', [(), ()])


def test_bad_mesh_and_itemsize():
    with pytest.raises(ValueError, match="positive integer size"):
        synthesize({"a": 0}, (4,), [()], [()])
    with pytest.raises(ValueError, match="itemsize"):
        synthesize({"a": 2}, (4,), [()], [()], itemsize=0)


def test_local_shape():
    assert local_shape((8, 88, 201352), (("b",), ("c",), ()), Mesh(MESH)) == (4, 44, 201352)


def test_naive_plan_shape():
    p = naive_plan(MESH, (8, 8), [("a",), ("b",)], [("c",), ()])
    assert p.ops == ["allgather", "allgather", "dynslice"]
    assert p.peak_elements == 64
