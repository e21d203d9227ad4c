"""Property tests: random meshes (1-3 axes, sizes 2-8), ranks 1-6, random layouts."""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dace_partition.solvers.synthesis import naive_plan, synthesize

AXES = ("a", "b", "c")


@st.composite
def problems(draw):
    naxes = draw(st.integers(1, 3))
    mesh = {n: draw(st.integers(2, 8)) for n in AXES[:naxes]}
    rank = draw(st.integers(1, 6))

    def layout():
        lay = [[] for _ in range(rank)]
        order = draw(st.permutations(list(mesh)))
        for ax in order:
            d = draw(st.integers(-1, rank - 1))      # -1: replicated
            if d >= 0:
                lay[d].append(ax)
        return [tuple(x) for x in lay]

    src, dst = layout(), layout()
    shape = []
    for d in range(rank):
        ps = math.prod(mesh[a] for a in src[d])
        pd = math.prod(mesh[a] for a in dst[d])
        shape.append(math.lcm(ps, pd) * draw(st.sampled_from([1, 1, 2, 3])))
    return mesh, tuple(shape), src, dst


def _small(p):
    return math.prod(p[1]) <= 1_000_000


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(problems().filter(_small))
def test_plans_are_correct_bounded_and_cheap(problem):
    mesh, shape, src, dst = problem
    plan = synthesize(mesh, shape, src, dst, itemsize=2)
    naive = naive_plan(mesh, shape, src, dst, itemsize=2)
    g = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    got = plan.simulate(g)                 # checks every intermediate tile too
    want = naive.simulate(g)               # final tiles = the target layout's tiles
    assert len(got) == len(want)
    for x, y in zip(got, want):
        assert x.shape == y.shape and np.array_equal(x, y)
    assert plan.peak_elements <= plan.memory_bound
    assert plan.peak_bytes <= 2 * max(math.prod(plan.initial.tile), math.prod(naive.steps[-1].tile_out) if naive.steps else 0)
    assert plan.bytes_per_device <= naive.bytes_per_device
    assert plan.ops.count("allpermute") <= 1
    ops = [o for o in plan.ops if o != "allpermute"]
    # normal form: dynslice* alltoall* allgather* (over-partitioning slices come first too)
    order = {"dynslice": 0, "alltoall": 1, "allgather": 2}
    assert [order[o] for o in ops] == sorted(order[o] for o in ops)
    if "allpermute" in plan.ops:
        assert all(o == "allgather" for o in plan.ops[plan.ops.index("allpermute") + 1:])
