"""The DaCe-generation helpers of ``dace_partition.compat`` (no compiler): they run on DaCe 1.0.2 (.venv)
and DaCe 2 (.venv-dace2) alike."""
import dace
import numpy as np
from dace import subsets

from dace_partition import compat

N = dace.symbol("N")


@dace.program
def _time_loop(A: dace.float64[N], T: dace.int64):
    for t in range(T):
        if A[0] > 0:
            A[1:] = A[:-1] + 1.0


def test_loops_and_branches_become_a_state_machine():
    sdfg = _time_loop.to_sdfg()
    had = compat.has_regions(sdfg)
    n = compat.to_state_machine(sdfg)
    assert n > 0 if had else n == 0
    assert not compat.has_regions(sdfg)
    back = [e for e in sdfg.edges() if any(a in e.data.assignments for a in ("t", ))]
    assert back, "the loop variable is assigned on interstate edges of the state machine"
    sdfg.validate()
    assert compat.to_state_machine(sdfg) == 0  # idempotent


def test_point_subsets_read_as_ranges():
    r = subsets.Range([(1, 1, 1), (2, 5, 1)])
    assert compat.as_range(r) is r
    if compat.DACE_MAJOR < 2:
        pt = subsets.Indices([3, 4])
        assert compat.is_point_subset(pt)
        assert compat.as_range(pt) == subsets.Range([(3, 3, 1), (4, 4, 1)])
    else:
        assert not hasattr(subsets, "Indices")


def test_interstate_reads_shift_onto_the_block():
    sdfg = dace.SDFG("shift_reads")
    sdfg.add_array("x", [8, 4], dace.float64)
    sdfg.add_symbol("i", dace.int64)
    sdfg.add_symbol("v", dace.float64)
    a, b = sdfg.add_state("a"), sdfg.add_state("b")
    sdfg.add_edge(a, b, dace.InterstateEdge(condition="x[i, 1] > 0", assignments={"v": "x[i, 2] + x[i, 3]"}))
    compat.shift_interstate_reads(sdfg, "x", ["4*r", 0])
    e = sdfg.edges()[0].data

    def bare(code):  # DaCe prints code with its own parentheses
        return code.replace(" ", "").replace("(", "").replace(")", "")

    assert bare(e.assignments["v"]) == "x[i-4*r,2-0]+x[i-4*r,3-0]"
    assert bare(e.condition.as_string) == "x[i-4*r,1-0]>0"


def _whole_array_body(read_after_write=False):
    """DaCe 2's shape of ``for i in dace.map[1:10]: A[i] = 3 * A[i] + A[0] - A[10]``: the map body is a
    nested SDFG that takes ``A`` whole through one connector, reads its elements on an interstate edge and
    writes ``A[i]``; the memlet into it is DaCe's union of the reads, ``A[0:i + 1]`` (no ``A[10]``).
    ``read_after_write``: a later state reads ``A[i]`` again."""
    body = dace.SDFG("body")
    body.add_array("A", [11], dace.int64)
    body.add_symbol("i", dace.int64)
    for s in ("a", "b", "c"):
        body.add_symbol(s, dace.int64)
    first, write = body.add_state("first"), body.add_state("write")
    body.add_edge(first, write, dace.InterstateEdge(assignments={"a": "A[i]", "b": "A[0]", "c": "A[10]"}))
    t = write.add_tasklet("upd", {}, {"o"}, "o = 3 * a + b - c")
    write.add_edge(t, "o", write.add_write("A"), None, dace.Memlet("A[i]"))
    if read_after_write:
        again = body.add_state("again")
        body.add_edge(write, again, dace.InterstateEdge(assignments={"a": "A[i]"}))
    sdfg = dace.SDFG("whole_array_body")
    sdfg.add_array("A", [11], dace.int64)
    st = sdfg.add_state()
    me, mx = st.add_map("m", dict(i="1:10"))
    node = compat.add_nested_sdfg(st, body, {"A"}, {"A"}, symbol_mapping={"i": "i"})
    st.add_memlet_path(st.add_read("A"), me, node, dst_conn="A", memlet=dace.Memlet("A[0:i + 1]"))
    st.add_memlet_path(node, mx, st.add_write("A"), src_conn="A", memlet=dace.Memlet("A[i]"))
    return sdfg, st, node


def test_a_map_body_reading_a_whole_array_gets_its_own_read_connector_and_a_sound_memlet():
    sdfg, st, node = _whole_array_body()
    assert compat.whole_array_map_bodies(sdfg) == 2  # the split, then the read memlet
    (read, ) = [e for e in st.in_edges(node) if e.data.data == "A"]
    (write, ) = [e for e in st.out_edges(node) if e.data.data == "A"]
    assert read.dst_conn != "A" and write.src_conn == "A"
    assert str(read.data.subset).replace(" ", "") == "0:11"  # A[i], A[0], A[10]: the whole array
    (e, ) = node.sdfg.edges()
    assert set(e.data.assignments.values()) == {f"{read.dst_conn}[{x}]" for x in ("i", "0", "10")}
    assert compat.whole_array_map_bodies(sdfg) == 0  # idempotent
    sdfg.validate()


def test_a_body_that_reads_after_writing_keeps_one_connector():
    sdfg, st, node = _whole_array_body(read_after_write=True)
    compat.whole_array_map_bodies(sdfg)
    assert {e.dst_conn for e in st.in_edges(node)} == {"A"}
    (read, ) = st.in_edges(node)
    assert str(read.data.subset).replace(" ", "") == "0:11"  # the memlet still covers A[10]


def test_a_read_indexed_by_a_symbol_of_the_body_keeps_the_whole_array():
    """SPMV's body reads ``A_col[j]`` on an interstate edge, ``j`` its own loop variable (both generations):
    ``j`` has no value outside the body, so the memlet into it stays the whole of ``A_col``."""
    import programs as P
    from dace.sdfg import nodes
    sdfg = P.spmv.to_sdfg()
    compat.to_state_machine(sdfg)
    compat.whole_array_map_bodies(sdfg)
    (st, node) = next((st, n) for st in compat.all_states(sdfg) for n in st.nodes() if isinstance(n, nodes.NestedSDFG))
    (col, ) = [e for e in st.in_edges(node) if e.data.data == "A_col"]
    assert str(col.data.subset).replace(" ", "") == "0:60"


def test_a_write_through_a_transient_is_named_by_the_array_it_writes():
    sdfg = dace.SDFG("named_write")
    sdfg.add_array("A", [6, 5], dace.float64)
    sdfg.add_array("t", [1, 1], dace.float64, transient=True)
    st = sdfg.add_state()
    me, mx = st.add_map("m", dict(i="0:6", j="0:5"))
    tl = st.add_tasklet("one", {}, {"o"}, "o = 1.0")
    tn = st.add_access("t")
    st.add_nedge(me, tl, dace.Memlet())
    st.add_edge(tl, "o", tn, None, dace.Memlet("t[0, 0]"))
    st.add_memlet_path(tn, mx, st.add_write("A"), memlet=dace.Memlet(data="t", subset="0, 0", other_subset="i, j"))
    assert compat.memlets_name_written_array(sdfg) == 1
    (e, ) = [e for e in st.edges() if e.src is tn]
    assert e.data.data == "A" and str(e.data.subset).replace(" ", "") == "i,j"
    assert str(e.data.other_subset).replace(" ", "") == "0,0"


@dace.program
def _sum_of_an_indexed_slice(x: dace.float64[5, 12, 14], h: dace.float64[1, 8]):
    h[0] = np.sum(x[2, :, 6:], 0)


@dace.program
def _sum_over_an_axis_of_one_element(y: dace.float64[1, 6, 4], h: dace.float64[1, 4]):
    h[:] = np.sum(y, axis=1)


def _reduce_axes(sdfg):
    return [n.axes for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "Reduce"]


def test_a_reduction_of_an_indexed_slice_gets_the_slices_axes_and_others_keep_theirs():
    """``np.sum(x[2, :, 6:], 0)`` sums the slice's 12 rows. DaCe 1.0.2's simplification leaves the reduction
    reading ``x[2, 0:12, 6:14]`` with axis 0 (the one element ``2``): it is mended to axis 1. A reduction over
    an array whose first dimension has one element is right as it is and keeps its axes."""
    sdfg = _sum_of_an_indexed_slice.to_sdfg()
    mended = compat.reduce_axes_of_indexed_slices(sdfg)
    if compat.DACE_MAJOR < 2:
        assert mended == [("x", "2, 0:12, 6:14", [0], [1])]
        assert _reduce_axes(sdfg) == [[1]]
    else:  # DaCe 2 keeps the slice's view before the reduction
        assert mended == []
    assert compat.reduce_axes_of_indexed_slices(sdfg) == []  # once
    sdfg = _sum_over_an_axis_of_one_element.to_sdfg()
    before = _reduce_axes(sdfg)
    assert compat.reduce_axes_of_indexed_slices(sdfg) == [] and _reduce_axes(sdfg) == before


def test_configuration_is_saved_and_restored_whole():
    conf = compat.config_dict()
    assert isinstance(conf, dict) and "compiler" in conf
    old = dace.Config.get_bool("compiler", "allow_view_arguments")
    try:
        dace.Config.set("compiler", "allow_view_arguments", value=not old)
        assert conf["compiler"]["allow_view_arguments"] == (not old)
    finally:
        dace.Config.set("compiler", "allow_view_arguments", value=old)


def test_array_pointer_is_the_data_pointer():
    a = np.arange(6.0)
    assert compat.array_pointer(a, dace.StorageType.CPU_Heap) == a.__array_interface__["data"][0]


def test_gpu_lowering_is_refused_in_words_on_dace2_and_lowers_on_dace1():
    """device="gpu" is a DaCe 1.0.x pass (docs/dace2.md): on DaCe 2 ``lower`` refuses before anything
    changes, with the reason; on 1.0.x it lowers and keeps the buffers in GPU memory."""
    import pytest

    import dace_partition as dp

    @dace.program
    def doubled(x: dace.float64[64]):
        return 2.0 * x

    sdfg = doubled.to_sdfg()
    schedule = {dp.maps(sdfg)[0].name: (2, )}
    if compat.DACE_MAJOR >= 2:
        with pytest.raises(dp.ScheduleError, match="needs DaCe 1.0"):
            dp.lower(sdfg, schedule, device="gpu")
        assert not dp.api.is_lowered(sdfg)
    else:
        dp.lower(sdfg, schedule, device="gpu")
        assert dp.report(sdfg).residency.resident


def test_line_info_from_frames_is_the_file_and_line_dace_would_give():
    """Inside ``line_info_from_frames`` a node added without a ``debuginfo`` records its caller's file and
    line, as DaCe's own stack inspection does (which costs ~24 ms a node under a deep stack); a given
    ``debuginfo`` wins, and DaCe's own lookup is back afterwards."""
    from dace.sdfg import state as dace_state
    sdfg = dace.SDFG("line_info")
    sdfg.add_array("A", [4], dace.float64)
    st = sdfg.add_state()
    name = "_getdebuginfo" if hasattr(dace_state, "_getdebuginfo") else "_get_debug_info"
    before = getattr(dace_state, name)
    theirs = st.add_access("A")
    with compat.line_info_from_frames():
        ours = st.add_access("A")
        given = st.add_access("A", debuginfo=dace.dtypes.DebugInfo(7, 0, 7, 0, "given.py"))
    assert getattr(dace_state, name) is before
    assert theirs.debuginfo is not None and ours.debuginfo is not None
    assert ours.debuginfo.filename == theirs.debuginfo.filename == __file__
    assert ours.debuginfo.start_line == theirs.debuginfo.start_line + 2
    assert (given.debuginfo.filename, given.debuginfo.start_line) == ("given.py", 7)


def test_every_module_of_the_package_imports_under_this_dace():
    """Each module imports under the DaCe installed (1.0.2, or DaCe 2 in its subset): a name that only one
    generation has (DaCe 2 has no ``ScheduleType.GPU_Default``) fails here, not in a user's import."""
    import importlib
    import pkgutil

    import dace_partition
    names = [m.name for m in pkgutil.walk_packages(dace_partition.__path__, "dace_partition.")
             if not m.name.endswith("__main__")]
    assert "dace_partition.runtime.emulation" in names
    for name in names:
        importlib.import_module(name)
