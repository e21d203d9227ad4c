"""Choosing one candidate per kernel jointly: the schedule the cost model prices lowest.

Exhaustive where the product of the kernels' candidate counts is small (every program of the examples and
of the conformance suite: the result is the model's optimum). Otherwise a local search on the same
objective: starting points (every kernel alone at its cheapest; every kernel splitting its first
dimension; nothing partitioned), then passes that change one kernel, or a chain of kernels that share
arrays, to the candidate that lowers the total, until no change helps.

Why not an ILP (as Alpa, XLA and autoparallel solve theirs)? Our objective is not a sum of pairwise
terms: whether an intermediate stays on the grids depends on *every* kernel that touches it (one kernel
on rank 0 sends it through rank 0 for all), and a loop's first iteration costs differently from the
others. A pairwise ILP would optimise a different function than the one the lowering realises; the local
search evaluates the real one, and ``tests/mpi/test_auto_schedule.py`` checks it against the exhaustive
optimum on programs small enough to enumerate.
"""
import itertools
from typing import Dict, List, Sequence, Tuple

from .model import Prediction, ProgramModel

EXHAUSTIVE = 3000  # schedules to enumerate at most
MAX_PASSES = 8


def _key(p: Prediction, choice: Dict[int, int]):
    # time first; among equal times, fewer bytes, then the earlier (simpler) candidates
    return (round(p.time, 12), p.total_bytes, sum(choice.values()))


def exhaustive(model: ProgramModel, allowed: Dict[int, Sequence[int]]) -> Tuple[Dict[int, int], Prediction]:
    ks = sorted(allowed)
    best = None
    prev = None
    for combo in itertools.product(*[allowed[k] for k in ks]):
        choice = dict(zip(ks, combo))
        changed = [k for k in ks if prev is not None and prev[0][k] != choice[k]]
        # consecutive schedules mostly differ in one kernel: price only that change
        p = model.change(prev[0], prev[1], changed[0], choice[changed[0]]) if len(changed) == 1 \
            else model.evaluate(choice)
        prev = (choice, p)
        key = _key(p, choice)
        if best is None or key < best[0]:
            best = (key, choice, p)
    return best[1], model.evaluate(best[1])  # the sums of the changes, recomputed once from the parts


def local_search(model: ProgramModel, allowed: Dict[int, Sequence[int]]):
    """Coordinate descent from several starts (module docstring). Deterministic (a number of passes, no
    clock): under mpiexec every rank lowers the same program and must choose the same schedule."""
    ks = sorted(allowed)
    starts = [{k: allowed[k][0] for k in ks}]
    first_dim = {}
    for k in ks:
        pick = allowed[k][0]
        for i in allowed[k]:
            v = model.priced[k][i].candidate.value
            if isinstance(v, tuple) and v[0] == model.ranks:
                pick = i
                break
        first_dim[k] = pick
    starts.append(first_dim)
    alone = {}
    base = {j: allowed[j][0] for j in ks}
    base_pred = model.evaluate(base)
    for k in ks:
        alone[k] = min(allowed[k], key=lambda i: _key(model.change(base, base_pred, k, i), {k: i}))
    starts.append(alone)
    best = None
    for start in starts:
        choice = dict(start)
        cur = model.evaluate(choice)
        for _ in range(MAX_PASSES):
            improved = False
            for k in ks:
                for i in allowed[k]:
                    if i == choice[k]:
                        continue
                    p = model.change(choice, cur, k, i)
                    trial = {**choice, k: i}
                    if _key(p, trial) < _key(cur, choice):
                        choice, cur, improved = trial, p, True
            if not improved:
                break
        cur = model.evaluate(choice)  # the sums of the changes, recomputed once from the parts
        if best is None or _key(cur, choice) < _key(best[1], best[0]):
            best = (choice, cur)
    return best


def solve(model: ProgramModel, allowed: Dict[int, List[int]]) -> Tuple[Dict[int, int], Prediction, str]:
    """(candidate index per kernel, its prediction, the method used)."""
    free = {k: v for k, v in allowed.items() if len(v) > 1}
    fixed = {k: v[0] for k, v in allowed.items() if len(v) == 1}
    count = 1
    for v in free.values():
        count *= len(v)
        if count > EXHAUSTIVE:
            break
    if count <= EXHAUSTIVE:
        choice, pred = exhaustive(model, {**free, **{k: [i] for k, i in fixed.items()}})
        return choice, pred, f"exhaustive over {count} schedule(s)"
    choice, pred = local_search(model, {**free, **{k: [i] for k, i in fixed.items()}})
    return choice, pred, "local search (coordinate descent from 3 starts)"
