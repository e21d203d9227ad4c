"""The automatic schedule is one that ``lower`` accepts: the search checks the grids it would choose with
``lower``'s own rules on the program as it is (its sizes symbolic where the search assumed values), drops
those ``lower`` refuses and says why in ``Schedule.explain()``. Lowering only (no compiler, no MPI)."""
import copy
import warnings

import dace
import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conformance.programs import CASES
from dace_partition.search import predict

M, N = (dace.symbol(s, dtype=dace.int64) for s in ("M", "N"))
SLOW = dp.Machine(map_ops=1e6, blas_flops=3e7, stream=8e6, source="slow compute (tests)")


@dace.program
def syrk(alpha: dace.float64, beta: dace.float64, C: dace.float64[N, N], A: dace.float64[N, M]):
    """NPBench's syrk: row i of C is updated in its columns 0..i (a triangular block per row)."""
    for i in range(N):
        C[i, :i + 1] *= beta
        for k in range(M):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]


@dace.program
def syr2k(alpha: dace.float64, beta: dace.float64, C: dace.float64[N, N], A: dace.float64[N, M],
          B: dace.float64[N, M]):
    """NPBench's syr2k: as syrk, with two inputs."""
    for i in range(N):
        C[i, :i + 1] *= beta
        for k in range(M):
            C[i, :i + 1] += (A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k])


def _lowers(sdfg, schedule):
    """``lower`` accepts ``schedule`` for ``sdfg`` (on a copy; raises what ``lower`` raises)."""
    work = copy.deepcopy(sdfg)
    dp.lower(work, schedule)
    return work


@pytest.mark.parametrize("program", [syrk, syr2k], ids=["syrk", "syr2k"])
def test_triangular_rows_with_symbolic_sizes_are_not_split_where_lower_refuses_it(program):
    """Priced on assumed sizes (N = M = 512) the row split of syrk and syr2k looks fine (the buffer would
    take the largest block); ``lower`` keeps the sizes symbolic and refuses it (the column extent grows
    with the rank). The search now asks ``lower``'s rules, leaves the split out and says why."""
    sdfg = program.to_sdfg()
    schedule = dp.auto_schedule(sdfg, 2)
    text = schedule.explain()
    assert dict(schedule) == {}, text
    assert "refused (2,): lower refuses it" in text and "grows with the grid coordinate" in text, text
    _lowers(sdfg, schedule)


@pytest.mark.slow
@pytest.mark.parametrize("program", [syrk, syr2k], ids=["syrk", "syr2k"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_lower_with_ranks_lowers_triangular_rows_with_symbolic_sizes(program, ranks):
    sdfg = program.to_sdfg()
    dp.lower(sdfg, ranks=ranks)
    assert f"refused ({ranks},): lower refuses it" in dp.report(sdfg).schedule


def test_triangular_rows_with_known_sizes_may_be_split():
    """Where the program's sizes are fixed, ``lower`` gives a growing block a buffer of the largest one: the
    split stays a candidate the search may choose, and what it chooses lowers."""
    sdfg = syrk.to_sdfg()
    sdfg.specialize(dict(N=70, M=50))  # NPBench's S preset, as its harness runs it
    schedule = dp.auto_schedule(sdfg, 2)
    assert "lower refuses" not in schedule.explain()
    assert dict(schedule) == {"single_state_body_map": (2, )}, schedule.explain()
    _lowers(sdfg, schedule)


def test_a_pinned_grid_that_lower_refuses_is_refused_with_lowers_reason():
    sdfg = syrk.to_sdfg()
    with pytest.raises(dp.ScheduleError, match="fixed: the grid given .* lower refuses it.*grows with the grid"):
        dp.auto_schedule(sdfg, 2, fixed={"single_state_body_map": (2, )})


# The default suite keeps one program of each kind (the triangular one the check exists for, a stencil in a
# time loop, matrix products, reductions, a reshape); the rest run with the slow suite (CI's time budget).
_DEFAULT_2 = {"syrk", "triangular_scale", "jacobi2d_time", "gemm", "k2mm", "softmax", "std_cols", "sum_all",
              "reshape_split", "axpy"}


@pytest.mark.parametrize("name", [n if n in _DEFAULT_2 else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(CASES)])
def test_every_conformance_program_lowers_with_its_automatic_schedule_on_2_ranks(name):
    sdfg = CASES[name].program.to_sdfg()
    sdfg.name = f"t_autolowers_{name}"
    schedule = dp.auto_schedule(sdfg, 2)
    _lowers(sdfg, schedule)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_conformance_program_lowers_with_its_automatic_schedule_on_4_ranks(name):
    sdfg = CASES[name].program.to_sdfg()
    sdfg.name = f"t_autolowers4_{name}"
    _lowers(sdfg, dp.auto_schedule(sdfg, 4))


@dace.program
def scaled(x: dace.float64[64, 48]):
    return 2.0 * x


def test_machine_is_the_keyword_and_machine_underscore_still_works_with_a_warning():
    sdfg = scaled.to_sdfg()
    new = dp.auto_schedule(sdfg, 2, machine=SLOW)
    assert new.machine is SLOW
    with pytest.warns(DeprecationWarning, match="machine_"):
        old = dp.auto_schedule(sdfg, 2, machine_=SLOW)
    assert old.machine is SLOW and dict(old) == dict(new)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        predict(sdfg, dict(new), 2, machine=SLOW)
    with pytest.warns(DeprecationWarning):
        assert predict(sdfg, dict(new), 2, machine_=SLOW).time == predict(sdfg, dict(new), 2,
                                                                               machine=SLOW).time
    with pytest.raises(TypeError, match="not both"):
        dp.auto_schedule(sdfg, 2, machine=SLOW, machine_=SLOW)


def test_a_schedule_is_made_whole_and_keeps_its_attributes_when_copied():
    """``fused`` (whether its names are those of the fused maps) is part of the schedule from its making,
    and a copy or a pickle keeps it with the rest."""
    import pickle
    s = dp.auto_schedule(scaled.to_sdfg(), 2, machine=SLOW)
    assert s.fused is True
    assert dp.auto_schedule(scaled.to_sdfg(), 2, machine=SLOW, local_optimize=False).fused is False
    for twin in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert dict(twin) == dict(s) and twin.fused is True and twin.ranks == 2 and twin.explain() == s.explain()


@dace.program
def dot_then_update(x: dace.float64[64], y: dace.float64[64], s: dace.float64[1]):
    s[0] = np.sum(x * y)
    y[:] = x * 2.0 + y


@pytest.mark.parametrize("program,machine", [(P.jacobi_time_small, None), (dot_then_update, SLOW)],
                         ids=["jacobi_time_small", "dot_then_update"])
def test_with_distributed_io_the_search_keeps_each_argument_off_rank_0_or_wholly_on_it(program, machine):
    """With io="distributed" an argument is rank-local, so ``lower`` refuses a schedule where code left on
    rank 0 also touches it. The search used to leave one cheap kernel there (one sweep of two, or one
    of the maps around a reduction); now it prices such a schedule as refused."""
    sdfg = program.to_sdfg()
    schedule = dp.auto_schedule(sdfg, 2, io="distributed", machine=machine)
    assert schedule.predicted.time < float("inf")
    work = copy.deepcopy(sdfg)
    dp.lower(work, schedule, io="distributed")
    args = set(sdfg.arglist())
    assert not [t for t in dp.report(work).traffic if t.array in args and "rank 0" in (t.source, t.destination)]


@dace.program
def sum_until_per_row(x: dace.float64[N, M], count: dace.int64[N]):
    for i in dace.map[0:N]:
        j = 0
        s = 0.0
        while j < M and s < 2.0:
            s += x[i, j]
            j += 1
        count[i] = j


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_while_loop_in_a_map_body_is_priced_and_lowered(ranks):
    """A ``while`` loop's trips depend on data: the search prices the body at its default trip count (it
    raised AttributeError on the unknown count), and the schedule it chooses lowers."""
    sdfg = sum_until_per_row.to_sdfg()
    schedule = dp.auto_schedule(sdfg, ranks, machine=SLOW, sizes=dict(N=4096, M=64))
    assert "sum_until_per_row" in schedule.explain()
    dp.lower(sdfg, schedule)
