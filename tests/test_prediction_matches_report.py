"""The search's account of the bytes each rank receives against the lowered program's account of them.

For every conformance program on 2 ranks (and 4 with the slow suite), with its hand schedule and the maps as written
(``local_optimize=False``: the search prices the maps the schedule names), ``dp.search.predict`` and
``dp.report(lower(...)).bytes_per_rank`` must agree, element by element. The two are still two
implementations of the same rules (search/model.py mirrors what the passes do; the relations between
distributions they both ask about are one module, ``ir/relations.py``); a program where they differ would be
named below with what differs, and the test also fails when one of them starts to agree, so the list only
shrinks. Pure Python: nothing is compiled or run.
"""
import warnings

import numpy as np
import pytest

import dace_partition as dp
from conformance.programs import CASES

# name -> what differs (2 ranks, sizes of the conformance inputs); empty since the time loops agree
DIFFERS = {}
RUN_TIME = {"conv3x3_bias", "doitgen"}  # the report's bytes depend on run-time sizes: nothing to compare


def _both(name, ranks=2):
    case = CASES[name]
    sizes = {k: v for k, v in case.inputs(np.random.default_rng(0)).items() if isinstance(v, int)}
    sdfg = case.program.to_sdfg()
    schedule = case.schedule(ranks, dp.maps(sdfg))
    predicted = dp.search.predict(case.program.to_sdfg(), schedule, ranks, sizes=sizes).bytes_per_rank
    dp.lower(sdfg, schedule, local_optimize=False)
    return list(predicted), dp.report(sdfg).bytes_per_rank(**sizes)


@pytest.mark.parametrize("ranks", [2, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(n for n in CASES if n not in RUN_TIME))
def test_the_search_predicts_the_bytes_the_lowering_moves(name, ranks):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            predicted, reported = _both(name, ranks)
        except (dp.ScheduleError, dp.UnsupportedPattern) as e:
            pytest.skip(f"refused by the lowering: {e}")
    assert reported is not None
    predicted = predicted[:len(reported)] + [b for b in predicted[len(reported):] if b]  # ranks the job lacks hold 0
    if name in DIFFERS:
        assert predicted != reported, f"'{name}' now agrees ({predicted}): take it off DIFFERS"
    else:
        assert predicted == reported, f"predicted {predicted} B, the report says {reported} B"
