"""Two levels of a cluster in the cost model and the report (ir/levels.py, search/machine.py): which bytes
of a Move cross between nodes, what they cost, and the report's bytes per level. Pure Python: lowering and
pricing only (the runs on emulated nodes are tests/mpi/test_cluster.py)."""
import dace
import pytest

import dace_partition as dp
from dace_partition.ir.levels import NodeLayout, off_node_bytes
from dace_partition.ir.kinds import MoveKind
from dace_partition.search.machine import Machine
from dace_partition.solvers.reduction import CostModel
from dace_partition.solvers.reduction.model import SystemHierarchy


@dace.program
def jacobi_rows(A: dace.float64[64, 64], B: dace.float64[64, 64]):
    for _ in range(3):
        B[1:-1, 1:-1] = 0.25 * (A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
        A[1:-1, 1:-1] = 0.25 * (B[:-2, 1:-1] + B[2:, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:])


@dace.program
def scaled(A: dace.float64[256, 64], B: dace.float64[256, 64]):
    B[:] = 2.0 * A


def _lowered(monkeypatch, hierarchy="2x2"):
    if hierarchy:
        monkeypatch.setenv("DACE_PARTITION_HIERARCHY", hierarchy)
    else:
        monkeypatch.delenv("DACE_PARTITION_HIERARCHY", raising=False)
    for k in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_TASKS_PER_NODE"):
        monkeypatch.delenv(k, raising=False)
    sdfg = jacobi_rows.to_sdfg()
    dp.lower(sdfg, {m.name: (4, 1) for m in dp.maps(sdfg)})
    return dp.report(sdfg)


def test_bytes_between_nodes_come_from_the_ranks_that_hold_the_data(monkeypatch):
    """Rows split over 4 ranks, 2 per node: the scatter reaches ranks 2 and 3 from rank 0's node; a halo
    row reaches rank 1 from rank 0 (its node) and from rank 2 (the other node), half and half; rank 0's
    gather takes ranks 2 and 3's rows across, rank 1's inside."""
    rep = _lowered(monkeypatch)
    layout = rep.nodes
    assert layout == NodeLayout(2, layout.source) and "DACE_PARTITION_HIERARCHY" in layout.source
    kinds = set()
    for t in rep.traffic:
        per, off = t.per_call(), t.off_node_per_call(layout)
        assert all(0 <= o <= b for o, b in zip(off, per))
        kind = t.move.kind
        if kind == MoveKind.SCATTER:
            assert off == [0, 0, per[2], per[3]] and per[2] > 0
        elif kind == MoveKind.GATHER:
            assert off[1:] == [0, 0, 0] and 0.6 * per[0] < off[0] < per[0]  # 2 of 3 senders' rows
        elif t.solver == "halo":
            assert off[0] == off[3] == 0 and per[1] > 0 and off[1] * 2 == per[1] and off[2] * 2 == per[2]
        kinds.add(t.solver if kind == MoveKind.REDISTRIBUTE else kind)
    assert {MoveKind.SCATTER, MoveKind.GATHER, "halo"} <= kinds
    between = rep.bytes_between_nodes()
    assert between == [sum(t.off_node_per_call(layout)[w] for t in rep.traffic) for w in range(4)]
    text = str(rep)
    assert f"{sum(between)} B between nodes, {sum(rep.bytes_per_rank()) - sum(between)} B inside nodes" in text


def test_one_node_has_no_level_line(monkeypatch):
    rep = _lowered(monkeypatch, hierarchy=None)
    assert rep.nodes is None and rep.bytes_between_nodes() is None and "between nodes" not in str(rep)
    assert _lowered(monkeypatch, hierarchy="1x4").nodes is None  # every rank on one node


def test_collectives_split_by_the_partners_on_other_nodes():
    """No blocks to follow (an AllReduce): a rank's partners are the other ranks, those on other nodes
    carry their share."""
    class Fake:
        kind = MoveKind.ALLREDUCE

    layout = NodeLayout(2)
    assert off_node_bytes(Fake(), (300, 300, 300, 300), layout) == (200, 200, 200, 200)
    assert off_node_bytes(Fake(), (300, 300, 300, 300), NodeLayout(4)) == (0, 0, 0, 0)
    assert off_node_bytes(Fake(), None, layout) is None


def test_a_message_between_nodes_costs_the_link_between_nodes():
    one = Machine(alpha=1e-6, beta=1e-10)
    two = Machine(alpha=1e-6, beta=1e-10, node_alpha=2e-5, node_beta=1e-9, ranks_per_node=2)
    assert one.message_time(4, 1e6) == two.message_time(4, 1e6)  # nothing across
    assert two.message_time(4, 1e6, 2, 5e5) == pytest.approx(2e-6 + 5e-5 + 4e-5 + 5e-4)
    assert two.node_layout() == NodeLayout(2, "the machine")
    assert "between nodes alpha 20.00 us" in str(two)


def test_the_search_prices_the_bytes_that_cross_nodes(monkeypatch):
    """The same schedule, priced on one level and on a slow link between nodes: only the bytes that cross
    cost more, so the two-level prediction is higher, and equal when every rank is on one node."""
    for k in ("DACE_PARTITION_HIERARCHY", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_TASKS_PER_NODE"):
        monkeypatch.delenv(k, raising=False)
    sdfg = jacobi_rows.to_sdfg()
    grids = {m.name: (4, 1) for m in dp.maps(sdfg)}
    flat = Machine(alpha=1e-6, beta=1e-10)
    slow = Machine(alpha=1e-6, beta=1e-10, node_alpha=5e-5, node_beta=1e-8, ranks_per_node=2)
    same_node = Machine(alpha=1e-6, beta=1e-10, node_alpha=5e-5, node_beta=1e-8, ranks_per_node=4)

    def comm(m):
        s = dp.auto_schedule(sdfg, 4, fixed=grids, local_optimize=False, machine=m)
        assert dict(s) == grids
        return s.predicted.communication

    assert comm(slow) > 5 * comm(flat)
    assert comm(same_node) == pytest.approx(comm(flat))
    # a kernel's own scatter and gather (no move between kernels) cross nodes too
    sdfg = scaled.to_sdfg()
    grids = {m.name: (4, 1) for m in dp.maps(sdfg)}
    assert comm(slow) > 5 * comm(flat) and comm(same_node) == pytest.approx(comm(flat))


def test_the_hierarchical_reduction_takes_the_machines_two_levels():
    h = SystemHierarchy.parse("2x4")
    assert CostModel.for_machine(h, Machine()) == CostModel.default(h)  # one level: the paper's figures
    m = Machine(alpha=1e-6, beta=1e-10, node_alpha=3e-5, node_beta=2e-9)
    model = CostModel.for_machine(h, m)
    assert model.bandwidths == pytest.approx((5e8, 1e10)) and model.latencies == (3e-5, 1e-6)
