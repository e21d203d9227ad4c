"""Semantics of the collectives (Figure 8) and of programs (sec. 3.3), checked by hand."""
import pytest

from dace_partition.solvers.reduction import (Collective, Form, Instruction, Precondition, PreconditionError,
                                              Program, SynthesisHierarchy, final_context, initial_context,
                                              is_valid, run)
from dace_partition.solvers.reduction.semantics import apply_collective

AR, RS, AG, RD, BC = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                      Collective.REDUCE, Collective.BROADCAST)
IG, PAR, MAS = Form.INSIDE_GROUP, Form.PARALLEL, Form.MASTER

# two-level synthesis hierarchy: root (0), node (1, 2 of them), core (2, 4 per node) -> 8 devices
H24 = SynthesisHierarchy((2, 4), ("node", "core"))


def I(slice_level, form, coll, form_level=None):
    return Instruction(slice_level, form, coll, form_level)


def P(*steps):
    return Program(tuple(steps))


def bits(*cols):
    return sum(1 << c for c in cols)


def test_groups_of_table2_forms():
    assert H24.groups(I(0, IG, AR)) == (tuple(range(8)),)
    assert H24.groups(I(1, IG, AR)) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert H24.groups(I(1, PAR, AR, 0)) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert H24.groups(I(1, MAS, AR, 0)) == ((0, 4),)
    assert H24.groups(I(2, PAR, AR, 1)) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert all(len(g) == 1 for g in H24.groups(I(2, IG, AR)))
    h3 = SynthesisHierarchy((2, 2, 2))
    # slice e2 (4 groups of 2), Parallel(e1): first devices of the two groups in one e1 together
    assert h3.groups(I(2, PAR, AR, 1)) == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert h3.groups(I(2, MAS, AR, 1)) == ((0, 2), (4, 6))
    assert h3.groups(I(2, PAR, AR, 0)) == ((0, 2, 4, 6), (1, 3, 5, 7))
    with pytest.raises(ValueError):
        I(1, PAR, AR, 1)  # the form's level must be an ancestor of the slice


def test_collectives_by_hand_on_two_devices():
    # Figure 8's examples: 4 chunks, devices 0 and 1 reduce
    s0, s1 = initial_context(4)[:2]
    assert apply_collective(AR, [s0, s1]) == [(bits(0, 1),) * 4] * 2
    a, b = apply_collective(RS, [s0, s1])
    assert a == (bits(0, 1), bits(0, 1), 0, 0) and b == (0, 0, bits(0, 1), bits(0, 1))
    assert apply_collective(AG, [a, b]) == [(bits(0, 1),) * 4] * 2
    r0, r1 = apply_collective(RD, [s0, s1])
    assert r0 == (bits(0, 1),) * 4 and r1 == (0, 0, 0, 0)
    assert apply_collective(BC, [r0, r1]) == [r0, r0]


@pytest.mark.parametrize("coll,states,pre", [
    (AR, [(1, 1, 0, 0), (0, 0, 2, 2)], Precondition.SAME_ROWS),             # different chunks
    (AR, [(3, 3, 3, 3), (2, 2, 2, 2)], Precondition.DISJOINT_CONTRIBUTIONS),  # device 1 counted twice
    (RS, [(1, 1, 1, 0), (2, 2, 2, 0)], Precondition.SCATTER_DIVISIBLE),     # 3 chunks over 2
    (AG, [(1, 1, 1, 1), (2, 2, 2, 2)], Precondition.DISJOINT_ROWS),
    (AG, [(3, 3, 3, 3), (0, 0, 0, 0)], Precondition.EQUAL_ROW_COUNTS),
    (BC, [(1, 1, 1, 1), (2, 2, 2, 2)], Precondition.ROOT_DOMINATES),
    (BC, [(3, 3, 3, 3), (3, 3, 3, 3)], Precondition.ROOT_INCREASES),
])
def test_each_precondition_fails_by_name(coll, states, pre):
    with pytest.raises(PreconditionError) as e:
        apply_collective(coll, states)
    assert e.value.precondition is pre
    assert pre.name in str(e.value)


def test_figure10_programs_are_valid():
    # (i): Reduce inside the node, AllReduce between the nodes' roots, Broadcast inside the node
    fig10i = P(I(1, IG, RD), I(1, MAS, AR, 0), I(1, IG, BC))
    # (ii): ReduceScatter inside, AllReduce across (in parallel), AllGather inside
    fig10ii = P(I(1, IG, RS), I(1, PAR, AR, 0), I(1, IG, AG))
    for prog in (fig10i, fig10ii):
        assert run(prog, H24) == final_context(8)
        assert is_valid(prog, H24)
    # after (ii)'s first two steps device 5 holds exactly its quarter, reduced over all 8 devices
    mid = run(P(I(1, IG, RS), I(1, PAR, AR, 0)), H24)
    assert mid[5] == (0, 0, 255, 255, 0, 0, 0, 0)
    # after (i)'s first step only the node roots hold data
    mid = run(P(I(1, IG, RD)), H24)
    assert mid[0] == (bits(0, 1, 2, 3),) * 8 and mid[4] == (bits(4, 5, 6, 7),) * 8
    assert all(mid[d] == (0,) * 8 for d in (1, 2, 3, 5, 6, 7))


def test_other_hand_checked_valid_programs():
    assert is_valid(P(I(0, IG, AR)), H24)                                     # flat
    assert is_valid(P(I(1, IG, AR), I(1, PAR, AR, 0)), H24)                   # Figure 3b
    assert is_valid(P(I(0, IG, RS), I(0, IG, AG)), H24)
    assert is_valid(P(I(1, PAR, RS, 0), I(1, IG, AR), I(1, PAR, AG, 0)), H24)  # mirror of 10(ii)


def test_invalid_programs_name_step_and_precondition():
    # Figure 4a: ReduceScatter inside a node, then AllReduce inside it adds different halves
    with pytest.raises(PreconditionError) as e:
        run(P(I(1, IG, RS), I(1, IG, AR)), H24)
    assert (e.value.step, e.value.precondition) == (1, Precondition.SAME_ROWS)
    # Figure 4b: reduce the same data twice
    with pytest.raises(PreconditionError) as e:
        run(P(I(1, IG, AR), I(0, IG, AR)), H24)
    assert (e.value.step, e.value.precondition) == (1, Precondition.DISJOINT_CONTRIBUTIONS)
    # gathering chunks nobody scattered
    with pytest.raises(PreconditionError) as e:
        run(P(I(1, IG, AR), I(1, PAR, AG, 0)), H24)
    assert (e.value.step, e.value.precondition) == (1, Precondition.DISJOINT_ROWS)
    # broadcasting from a root that knows less
    with pytest.raises(PreconditionError) as e:
        run(P(I(1, PAR, RS, 0), I(1, IG, BC)), H24)
    assert e.value.precondition is Precondition.ROOT_DOMINATES and e.value.step == 1
    assert "step 1" in str(e.value)


def test_valid_steps_that_do_not_finish_are_not_valid_programs():
    prog = P(I(1, IG, AR))
    run(prog, H24)  # every precondition holds ...
    assert not is_valid(prog, H24)  # ... but nobody has the full sum
    assert not is_valid(P(I(1, IG, RD), I(1, MAS, AR, 0)), H24)  # forgot the broadcast


def test_master_alone_is_not_enough_without_reduce_first():
    # Master across nodes after a plain AllReduce inside: only core 0 of each node gets the total,
    # a Broadcast inside the node completes it
    assert is_valid(P(I(1, IG, AR), I(1, MAS, AR, 0), I(1, IG, BC)), H24)
    # Master first (lemma B.6's dead end): the node roots already share data, so the inside
    # AllReduce mixes node 1's core 0 into node 0 and the cross-node step must count it twice
    mid = run(P(I(1, MAS, AR, 0), I(1, IG, AR)), H24)
    assert mid[0] == (bits(0, 1, 2, 3, 4),) * 8
    with pytest.raises(PreconditionError) as e:
        run(P(I(1, MAS, AR, 0), I(1, IG, AR), I(1, PAR, AR, 0)), H24)
    assert (e.value.step, e.value.precondition) == (2, Precondition.DISJOINT_CONTRIBUTIONS)
