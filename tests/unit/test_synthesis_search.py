"""Synthesis on the paper's worked examples, plus the simulator's own honesty."""
import numpy as np
import pytest

from dace_partition.solvers.synthesis import SimulationError, naive_plan, synthesize
from dace_partition.solvers.synthesis.factor_mesh import match

MESH = {"a": 2, "b": 2, "c": 2}


def _global(shape):
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)


def _check(plan):
    g = _global(plan.shape)
    got = plan.simulate(g)
    want = naive_plan(plan.mesh.axes, plan.shape, plan.src, plan.dst).simulate(g)
    assert all(np.array_equal(x, y) for x, y in zip(got, want))
    assert plan.peak_elements <= plan.memory_bound
    return got


def test_public_api_example():
    plan = synthesize(mesh=MESH, shape=(8, 88, 201352), src=[(), ("a", "c"), ()], dst=[("b",), ("c",), ()],
                      itemsize=4)
    assert all(s.op in {"dynslice", "alltoall", "allgather", "allpermute"} for s in plan.steps)
    assert len(str(plan).splitlines()) == len(plan.steps)
    tile = 8 * 22 * 201352 * 4
    assert plan.peak_bytes == tile                  # src and dst tiles have equal size
    naive = naive_plan(MESH, (8, 88, 201352), [(), ("a", "c"), ()], [("b",), ("c",), ()], 4)
    assert plan.bytes_per_device < naive.bytes_per_device
    assert plan.bytes_per_device <= 2 * tile        # one alltoall plus at most one permutation
    small = synthesize(MESH, (8, 88, 8), [(), ("a", "c"), ()], [("b",), ("c",), ()])
    _check(small)


def test_example_4_9_single_alltoall():
    # [1{a}8, 8] -> [8, 1{a}8] on {a: 8}: one merged alltoall, no permutation (Example 7.1)
    plan = synthesize({"a": 8}, (8, 8), [("a",), ()], [(), ("a",)])
    assert plan.ops == ["alltoall"]
    assert plan.steps[0].axes == ("a",)
    assert plan.cost == 8
    _check(plan)


def test_axis_bias_elides_permutation():
    # sec. 7.3: [16] -> [4{x}16] on {x:4, y:4} must dynslice x, not y
    plan = synthesize({"x": 4, "y": 4}, (16,), [()], [("x",)])
    assert plan.ops == ["dynslice"] and plan.steps[0].axes == ("x",)
    assert plan.cost == 0
    _check(plan)


def test_example_3_1_factor_decomposition():
    # [3{x}12, 2{y}12] -> [2{y}12, 3{x}12] on {x:4, y:6}: no allgather, memory-bounded
    plan = synthesize({"x": 4, "y": 6}, None, '[3{"x"}12, 2{"y"}12]', '[2{"y"}12, 3{"x"}12]')
    assert "allgather" not in plan.ops
    assert plan.peak_elements == 6
    assert plan.ops.count("allpermute") <= 1
    _check(plan)


def test_pure_permutation():
    plan = synthesize({"x": 2, "y": 2}, (8, 4), [("x", "y"), ()], [("y", "x"), ()])
    assert plan.ops == ["allpermute"] and plan.cost == 2 * 4
    _check(plan)


def test_identity_and_replicated():
    assert synthesize(MESH, (8,), [("a",)], [("a",)]).steps == []
    plan = synthesize(MESH, (8, 4), [(), ()], [("a", "b"), ("c",)])
    assert set(plan.ops) == {"dynslice"} and plan.cost == 0
    _check(plan)


def test_permutation_moved_before_final_allgathers():
    # a target that needs a permutation and gathers: the permutation acts on the small tile
    plan = synthesize({"x": 2, "y": 2}, (8, 8), [("x", "y"), ()], [("y",), ()])
    assert plan.ops[-1] == "allgather"
    if "allpermute" in plan.ops:
        k = plan.ops.index("allpermute")
        assert np.prod(plan.steps[k].tile_in) < np.prod(plan.steps[-1].tile_out)
    _check(plan)


def test_over_partitioning_lowers_cost():
    # sec. 7.2 / Fig. 12: slicing in the replicated axis z makes the alltoall cheaper
    shape, src, dst = (8, 16, 4), [("x",), ("y",), ()], [(), (), ()]
    plan = synthesize({"x": 2, "y": 4, "z": 2}, shape, src, dst)
    without = synthesize({"x": 2, "y": 4, "z": 1}, shape, src, dst)   # same problem, nothing to over-partition with
    assert any(s.op == "dynslice" and "z" in s.axes for s in plan.steps)
    assert plan.cost < without.cost
    assert plan.cost == 32 + 512 and without.cost == 64 + 512
    _check(plan)


def test_simulator_catches_wrong_plan():
    plan = synthesize(MESH, (8, 8), [("a",), ()], [(), ("a",)])
    assert plan.ops == ["alltoall"]
    step = plan.steps[0]
    step.member_of = step.member_of[::-1].copy()   # swap positions inside the groups
    with pytest.raises(SimulationError):
        plan.simulate(_global((8, 8)))


def test_simulator_catches_wrong_permutation():
    plan = synthesize({"x": 2, "y": 2}, (8, 4), [("x", "y"), ()], [("y", "x"), ()])
    step = plan.steps[-1]
    step.src_of = np.roll(step.src_of, 1)
    with pytest.raises(SimulationError):
        plan.simulate(_global((8, 4)))


def test_match_is_bijective_with_replication():
    have = np.array([[0], [1], [0], [1]])
    want = np.array([[1], [1], [0], [0]])
    m = match(have, want, (2,), np.arange(4))
    assert sorted(m) == [0, 1, 2, 3]
    assert all(want[m[r], 0] == have[r, 0] for r in range(4))


def test_alltoalls_on_disjoint_dims_are_fused():
    # two moves (dim 2 -> 0 and dim 1 -> 5) share one collective over both axes: one tile of cost
    shape = (4, 4, 2, 3, 4, 4)
    plan = synthesize(MESH, shape, [(), ("b",), ("c",), (), ("a",), ()], [("a",), (), (), (), ("c",), ("b",)])
    fused = [s for s in plan.steps if s.op == "alltoall"]
    assert len(fused) == 1 and len(fused[0].dims) == 4 and fused[0].n == 4
    assert fused[0].cost == int(np.prod(plan.initial.tile))
    _check(plan)


def test_equal_cost_paths_avoid_the_permutation():
    # the weak search alone picks dynslice, alltoall, allpermute (2 tiles); another path of the same weak
    # cost needs no permutation (1 tile, what XLA sends too)
    plan = synthesize(MESH, src='[8{"c"}16, 8, 88, 8, 32{"a"}64, 32]', dst='[16, 4{"b"}8, 44{"c"}88, 8, 64, 16{"a"}32]')
    assert "allpermute" not in plan.ops
    assert plan.cost == int(np.prod(plan.initial.tile)) // 2
    assert plan.peak_elements <= plan.memory_bound
