"""Cost model / simulator (sec. 5) and the chooser the lowering will call."""
import pytest

from dace_partition.solvers.reduction import (Collective, CostModel, Placement, SystemHierarchy, choose_reduction,
                                              lower, programs_for, rank_programs)

GIB = 1 << 30


def H(n, c):
    return SystemHierarchy.of(("node", n), ("core", c))


def test_ring_allreduce_time_by_hand():
    h = H(2, 4)
    m = CostModel((10.0, 100.0), (0.0, 0.0), 0.0)
    # one ring over 8 devices in order: each node's NIC carries one edge of 2*7/8*n bytes
    t = m.collective_time(h, Collective.ALL_REDUCE, [tuple(range(8))], lambda g: 800.0)
    assert t == pytest.approx(2 * 7 / 8 * 800 / 10.0)
    # inside one node only: limited by the device links
    t = m.collective_time(h, Collective.ALL_REDUCE, [(0, 1, 2, 3)], lambda g: 800.0)
    assert t == pytest.approx(2 * 3 / 4 * 800 / 100.0)
    # four concurrent cross-node pairs share each NIC: 4 edges of 2*1/2*n
    t = m.collective_time(h, Collective.ALL_REDUCE, [(0, 4), (1, 5), (2, 6), (3, 7)], lambda g: 800.0)
    assert t == pytest.approx(4 * 800 / 10.0)
    # latency: rounds times the outermost level crossed
    # latency: log2 rounds per phase at the outermost level crossed, plus the per-call overhead
    m2 = CostModel((1e30, 1e30), (1.0, 0.1), 0.5)
    assert m2.collective_time(h, Collective.ALL_REDUCE, [tuple(range(8))], lambda g: 1.0) == pytest.approx(6.5)
    assert m2.collective_time(h, Collective.BROADCAST, [(0, 1, 2, 3)], lambda g: 1.0) == pytest.approx(0.7)


def test_hierarchical_program_beats_flat_across_nodes():
    # Table 4 F2: [8 4] on 2 x 16 A100, matrix [[2 4] [1 4]], reduce axis 0
    h = H(2, 16)
    p = Placement(h, (8, 4), ((2, 4), (1, 4)), (0,))
    n = 4 * (1 << 29) * 2
    ch = choose_reduction(h, p, n)
    assert not ch.is_flat and ch.speedup > 1.5
    assert [s.collective for s in ch.program.steps][1] in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER)
    ranked = rank_programs(p, n)
    assert ranked[0].predicted_s == pytest.approx(ch.predicted_s)
    assert [r.predicted_s for r in ranked] == sorted(r.predicted_s for r in ranked)
    assert len(ranked) == len(programs_for(p))


def test_flat_is_kept_inside_one_node():
    h = SystemHierarchy.of(("node", 1), ("core", 8))
    ch = choose_reduction(h, None, 1 << 24)
    assert ch.is_flat and ch.predicted_s == ch.flat_s and ch.candidates == 3
    # F1: reduction axis inside the node -> flat AllReduce is optimal (Result 3)
    h = H(2, 16)
    ch = choose_reduction(h, Placement(h, (8, 4), ((1, 8), (2, 2)), (0,)), 1 << 30)
    assert ch.is_flat


def test_uniform_bandwidth_removes_the_benefit():
    # with a NIC as fast as the device links and no latency the hierarchy buys nothing big
    h = H(4, 8)
    p = Placement(h, (32,), ((4, 8),), (0,))
    fast = CostModel((100e9, 100e9), (0.0, 0.0), 0.0)
    slow = CostModel((8e9, 100e9), (0.0, 0.0), 0.0)
    n = 1 << 30
    # flat ring over 32: each NIC carries 2*31/32 n; RS inside (7/8 n per device link), AR across
    # (8 rings of 4 on n/8: 1.5 n per NIC), AG inside (7/8 n per device link)
    want = (2 * 31 / 32 / 8e9) / (1.5 / 8e9 + 2 * 7 / 8 / 100e9)
    assert choose_reduction(h, p, n, slow).speedup == pytest.approx(want, rel=1e-6)
    assert choose_reduction(h, p, n, fast).speedup < choose_reduction(h, p, n, slow).speedup


def test_small_messages_prefer_flat_through_call_overhead():
    h = H(2, 4)
    m = CostModel((8e9, 100e9), (1e-6, 1e-6), 1e-4)
    assert choose_reduction(h, None, 64, m).is_flat
    assert not choose_reduction(h, None, 1 << 28, m).is_flat


def test_pingpong_calibration():
    h = H(2, 4)
    m = CostModel.from_pingpong(h, nbytes=1 << 20, intra_rtt=2 * (1 << 20) / 10e9, inter_rtt=2 * (1 << 20) / 1e9,
                                intra_latency=0.0, inter_latency=0.0)
    assert m.bandwidths == pytest.approx((1e9, 10e9))
    assert CostModel.default(h, "v100").bandwidths == (8e9, 135e9)
    with pytest.raises(ValueError):
        CostModel((1.0,), (0.0, 0.0))


def test_choice_by_grid_and_lowering():
    h = H(2, 4)
    ch = choose_reduction(h, ((2, 4), (0,)), 1 << 26)  # grid 2x4, reduce over the node axis
    assert ch.placement.groups() == ((0, 4), (1, 5), (2, 6), (3, 7))
    ch = choose_reduction(h, ((8,), (0,)), 1 << 26)
    steps = lower(ch.program, ch.placement)
    assert all(sorted(d for g in st.groups for d in g) == sorted(set(d for g in st.groups for d in g))
               for st in steps)  # groups of a step are disjoint
    assert "predicted" in ch.describe()
    with pytest.raises(ValueError):
        choose_reduction(SystemHierarchy.of(("node", 2), ("core", 3)), ((3, 2), (0,)), 8)


def test_plan_reduction_returns_an_executable_plan():
    from dace_partition.solvers.reduction import plan_reduction
    choice, plan = plan_reduction(H(2, 4), None, 1 << 26)
    assert plan.program == choice.program and not choice.is_flat
    assert len(plan.steps) == len(choice.program)
    # every lowered step covers each reduction group's devices at most once
    for st in plan.steps:
        flat = [d for g in st.groups for d in g]
        assert len(flat) == len(set(flat))
    choice, plan = plan_reduction(SystemHierarchy.of(("node", 1), ("core", 4)), None, 1 << 26)
    assert choice.is_flat and plan.program is None and plan.steps == ()
