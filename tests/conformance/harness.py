"""Runs conformance cases: lower once per (case, P), build once, run under ``mpiexec -n ranks``.

An outcome is one of ``correct``, ``refused`` (ScheduleError or UnsupportedPattern raised by ``lower``,
before any rank starts), ``wrong`` (some output element differs from NumPy) or ``crash`` (any other
exception, a compile error or a failed or timed-out run).
"""
import copy
import os
import time
from dataclasses import asdict, dataclass
from typing import List, Optional

import numpy as np

import dace_partition as dp

RTOL, ATOL = 1e-9, 1e-11


@dataclass
class Outcome:
    program: str
    kind: str
    P: int  # ranks of the schedule's grids
    ranks: int  # ranks of the run (>= P)
    status: str
    reason: str = ""
    lower_s: Optional[float] = None
    build_run_s: Optional[float] = None
    grids: str = ""

    def as_dict(self):
        return asdict(self)


def compare(expected, got, exact: bool) -> Optional[str]:
    """None if every element matches, else a description of the first mismatch."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"expected written arguments {sorted(expected)}, got {type(got).__name__}"
        for k, v in expected.items():
            if k not in got:
                return f"argument '{k}' was not returned"
            why = compare(v, got[k], exact)
            if why:
                return f"{k}: {why}"
        return None
    if isinstance(expected, tuple):
        for i, (e, g) in enumerate(zip(expected, got)):
            why = compare(e, g, exact)
            if why:
                return f"result {i}: {why}"
        return None
    e, g = np.asarray(expected), np.asarray(got)
    if e.size != g.size:
        return f"shape {g.shape}, expected {e.shape}"
    e, g = e.reshape(-1), g.reshape(-1)
    ok = (e == g) if exact else np.isclose(g, e, rtol=RTOL, atol=ATOL)
    if not np.all(ok):
        i = int(np.argmin(ok))
        return f"{int(np.sum(~ok))} of {e.size} elements differ (first at flat index {i}: {g[i]} vs {e[i]})"
    return None


# The cost model with compute a thousand times slower than this machine's: the conformance programs are
# small, and at real rates most of them would (rightly) stay on rank 0; this makes the search partition
# them, so their automatic schedules are lowered, run and checked like the hand-written ones.
SLOW_COMPUTE = dp.Machine(map_ops=1e6, blas_flops=3e7, stream=8e6, source="slow compute (tests)")


def symbol_values(case) -> dict:
    """The values the case's inputs give its size symbols (what the search assumes)."""
    return {k: int(v) for k, v in case.inputs(np.random.default_rng(7)).items()
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}


def lower_case(case, P: int, auto: bool = False, local_optimize: bool = True):
    """(lowered SDFG or None, outcome template). The SDFG is named after the case and P. ``auto``: the
    schedule comes from ``dp.auto_schedule`` (on :data:`SLOW_COMPUTE`) instead of the case's own.
    ``local_optimize=False``: the maps as written (lower's option of that name)."""
    sdfg = case.program.to_sdfg()
    tag = ("_auto" if auto else "") + ("" if local_optimize else "_as_written")
    sdfg.name = f"conf_{case.name}_p{P}{tag}_{os.getpid()}"  # one build folder per run
    if auto:
        schedule = dp.auto_schedule(sdfg, P, sizes=symbol_values(case), machine=SLOW_COMPUTE)
    else:
        schedule = case.schedule(P, dp.maps(sdfg))
    grids = ", ".join(f"{k}: {v}" for k, v in schedule.items())
    out = Outcome(case.name, case.kind, P, P, "", grids=grids)
    t = time.perf_counter()
    try:
        dp.lower(sdfg, schedule, local_optimize=local_optimize)
    except (dp.ScheduleError, dp.UnsupportedPattern) as e:
        out.lower_s = time.perf_counter() - t
        out.status, out.reason = "refused", f"{type(e).__name__}: {e}"
        return None, out
    except Exception as e:  # noqa: BLE001 - a crash is an outcome to report
        out.lower_s = time.perf_counter() - t
        out.status, out.reason = "crash", f"lower: {type(e).__name__}: {str(e)[:500]}"
        return None, out
    out.lower_s = time.perf_counter() - t
    return sdfg, out


def run_case(case, sdfg, template: Outcome, ranks: int, seed: int = 7, timeout: float = 180) -> Outcome:
    out = copy.copy(template)
    out.ranks = ranks
    inputs = case.inputs(np.random.default_rng(seed))
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    t = time.perf_counter()
    try:
        got = dp.run(sdfg, ranks, timeout=timeout, **inputs)
    except (dp.ScheduleError, dp.UnsupportedPattern) as e:
        out.status, out.reason = "refused", f"{type(e).__name__}: {e}"
        return out
    except Exception as e:  # noqa: BLE001
        out.build_run_s = time.perf_counter() - t
        out.status, out.reason = "crash", f"{type(e).__name__}: {str(e)[-800:]}"
        return out
    out.build_run_s = time.perf_counter() - t
    why = compare(expected, got, case.exact)
    out.status, out.reason = ("correct", "") if why is None else ("wrong", why)
    return out


def evaluate(case, P: int, ranks: Optional[List[int]] = None, auto: bool = False,
             local_optimize: bool = True) -> List[Outcome]:
    """Lowers ``case`` for ``P`` ranks once, then builds once and runs it on each of ``ranks`` (default [P])."""
    sdfg, template = lower_case(case, P, auto, local_optimize)
    if sdfg is None:
        return [template]
    return [run_case(case, sdfg, template, r) for r in (ranks or [P])]
