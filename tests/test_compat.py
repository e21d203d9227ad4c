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
