"""Automatic schedules: the process grid of every kernel, chosen by a cost model (``dp.auto_schedule``).

Candidates per kernel are grids over its iteration space (:func:`.model.candidate_grids`: every
factorization of the ranks over its principal map's parameters, contraction splits included, the same
with replicas, and "not partitioned"); each is planned and priced without changing the SDFG
(:mod:`dace_partition.plan`); the schedule is chosen jointly over the kernels with the cost of moving
data between them (:mod:`.model`, :mod:`.solve`). docs/auto_schedule.md describes the model.
"""
import time
import warnings
from typing import Dict, List, Optional

from dace.sdfg import SDFG

from ..errors import ScheduleError, UnsupportedPattern
from ..schedule import FusedMapName, Replicated, check_grid, names_fused_maps
from ..solvers.registry import resolve_solvers
from .machine import Machine, calibrate, gpu_machine, machine
from .machine import machine as _default_machine  # ``machine`` is also a parameter name below
from .model import Candidate, Prediction, ProgramModel, prepare, prepare_with_rules, principal_map
from .solve import solve

__all__ = ["Schedule", "auto_schedule", "predict", "calibrate", "machine", "gpu_machine", "Machine", "Prediction"]


class Schedule(dict):
    """{map name: grid} that ``dp.lower(sdfg, schedule)`` takes as it is, with what the model predicts
    (:attr:`predicted`), the machine it was priced on (:attr:`machine`), whether its names are those of
    the fused maps (:attr:`fused`) and why each kernel got its grid (:meth:`explain`)."""

    def __init__(self, grids, *, ranks: int, predicted: Prediction, lines: List[str], method: str,
                 seconds: float, sizes: Dict[str, int], machine: Optional[Machine] = None, fused: bool = False,
                 machine_: Optional[Machine] = None):
        super().__init__({FusedMapName(k) if fused else k: v for k, v in dict(grids).items()})
        self.ranks, self.predicted, self.method, self.seconds = ranks, predicted, method, seconds
        self.sizes, self.machine = sizes, _renamed("Schedule", machine, machine_)
        self.fused = fused  # its names are those of the maps lower() fuses; its keys say so too (FusedMapName)
        self._lines = lines

    def explain(self) -> str:
        head = [f"automatic schedule for {self.ranks} rank(s): {self.method}, {self.seconds:.2f} s",
                f"  predicted: {self.predicted}", f"  model: {self.machine}"]
        if self.sizes:
            head.append("  sizes assumed: " + ", ".join(f"{k}={v}" for k, v in self.sizes.items()))
        return "\n".join(head + self._lines)

    def __repr__(self):
        return f"Schedule({dict.__repr__(self)})"


def auto_schedule(sdfg: SDFG, ranks: int, *, io: str = "root", memory_per_rank: Optional[int] = None,
                  fixed: Optional[dict] = None, sizes: Optional[Dict[str, int]] = None, solvers=None,
                  machine: Optional[Machine] = None, local_optimize: bool = True, device: str = "cpu",
                  machine_: Optional[Machine] = None) -> Schedule:
    """The schedule for ``ranks`` ranks that the cost model predicts fastest (see the module docstring).

    ``io``: as in ``lower`` (with ``"distributed"`` the arguments' scatters and gathers are free).
    ``memory_per_rank``: bytes of rank-local buffers a rank may hold. ``fixed`` pins part of the schedule,
    by map name (``{"_MatMult_.gemm_map": (2, 2, 1)}``) or by an array's layout (``{"x": (P, 1)}``: every
    kernel that touches ``x`` holds it split into P row blocks). ``sizes`` gives the values of size
    symbols the model assumes (default: the SDFG's constants, else 512). ``sdfg`` does not change.
    ``local_optimize``: price the maps as ``lower`` fuses them (the schedule then names the fused maps).
    ``device="gpu"``: priced on :func:`gpu_machine` (GPU rates, PCIe staging, ranks sharing the GPUs
    visible here) unless ``machine`` is given (``machine_``, its former name, still works and warns).

    A candidate grid that ``lower`` would refuse is never chosen: each is checked by ``lower``'s own rules
    on the program as it is (:class:`.model.LoweringRules`), and :meth:`Schedule.explain` says why each
    refused grid was left out.
    """
    _check_request(ranks, io, device)
    machine = _renamed("auto_schedule", machine, machine_)
    t0 = time.perf_counter()
    if local_optimize:  # the maps lower() partitions: fused as it fuses them (passes.local_optimize)
        from ..passes.local_optimize import fused_for_search
        sdfg, fixed = fused_for_search(sdfg, fixed)
    return search(sdfg, None, ranks, io=io, memory_per_rank=memory_per_rank, fixed=fixed, sizes=sizes,
                  solvers=solvers, machine=machine, device=device, fused=local_optimize, started=t0)


def search(sdfg: SDFG, kernels, ranks: int, *, io: str, memory_per_rank: Optional[int], fixed: Optional[dict],
           sizes: Optional[Dict[str, int]], solvers, machine: Optional[Machine], device: str, fused: bool,
           started: Optional[float] = None) -> Schedule:
    """:func:`auto_schedule`'s search on ``sdfg`` as it is (its maps fused already, or priced as written).
    ``kernels``: the program's kernels as ``lower`` prepared them (``split_kernels``), which the search then
    prices on its own copy without discovering them again; ``None``: the search prepares a copy itself.
    ``sdfg`` does not change."""
    t0 = time.perf_counter() if started is None else started
    _check_request(ranks, io, device)
    order = resolve_solvers(solvers)
    work, assumed, kernels, rules = prepare_with_rules(sdfg, sizes, order, kernels)
    m = machine or (gpu_machine() if device == "gpu" else _default_machine())
    names = {info.name: (k, info) for k in kernels for info in k.maps}
    by_map, by_array = _split_fixed(fixed, names, sdfg.arrays)
    cands = None
    if by_map:
        cands = {}
        for name, grid in by_map.items():
            k, info = names[name]
            principal = principal_map(k)
            if info is not principal:
                raise ScheduleError(f"fixed: '{name}' shares its grid with '{principal.name}' (one kernel); pin that "
                                    "map instead")
            check_grid(info, grid)
            cands[k.index] = [Candidate(grid if isinstance(grid, Replicated) else tuple(grid))]
    model = ProgramModel(work, kernels, ranks, order, m, io, memory_per_rank, cands, sizes)
    allowed = {}
    for k in model.kernels:
        idx = list(range(len(model.priced[k.index])))
        if cands and k.index in cands:
            idx = [i for i in idx if model.priced[k.index][i].candidate.partitioned] or idx
            if len(idx) == 1 and not model.priced[k.index][idx[0]].candidate.partitioned:
                reason = "; ".join(r for _, r in model.refused.get(k.index, []))
                raise ScheduleError(f"fixed: the grid given for '{model.principal(k).name}' cannot be used: {reason}")
        if by_array:
            idx = [i for i in idx if _keeps_layouts(model.priced[k.index][i], by_array)] or idx
        allowed[k.index] = idx
    choice, pred, method = solve(model, allowed)
    dropped = set()
    if rules is not None:  # sizes were assumed: lower's rules on the program's own sizes, until none refuses
        checked = set()
        while True:
            refused = _refused_by_lower(model, rules, choice, checked)
            if not refused:
                break
            for k, i in refused:
                dropped.add((k, i))
                allowed[k] = [j for j in allowed[k] if j != i]
                if not allowed[k]:  # only a pinned grid was allowed
                    reason = model.refused[k][-1][1]
                    raise ScheduleError(f"fixed: the grid given for '{model.principal(model.kernels[k]).name}' "
                                        f"cannot be used: {reason}")
            choice, pred, method = solve(model, allowed)
    grids, lines = {}, []
    for k in model.kernels:
        p = model.priced[k.index][choice[k.index]]
        name = model.principal(k).name if k.maps else k.label
        if p.candidate.partitioned:
            grids[name] = p.candidate.value
        lines.append(_explain_kernel(model, k, choice, pred, name, dropped))
    lines += [f"  priced as a GPU row kernel: {text}" for text in model.row_kernels(choice)]
    return Schedule(grids, ranks=ranks, predicted=pred, lines=lines, method=method,
                    seconds=time.perf_counter() - t0, sizes=assumed, machine=m,
                    fused=fused)  # its names are those of the fused maps


def _check_request(ranks, io: str, device: str) -> None:
    """The search's arguments, refused in words before any work."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    if io not in ("root", "distributed"):
        raise ValueError(f"io must be 'root' or 'distributed', got {io!r}")
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


def predict(sdfg: SDFG, schedule, ranks: int, *, io: str = "root", sizes: Optional[Dict[str, int]] = None,
            solvers=None, machine: Optional[Machine] = None, machine_: Optional[Machine] = None) -> Prediction:
    """What the cost model predicts for a given schedule ({map name: grid}) on ``ranks`` ranks: a hand
    schedule priced the way :func:`auto_schedule` prices its candidates. A kernel is priced on its
    principal map's grid (the map with the most parameters); kernels the schedule leaves out run on rank 0.
    ``machine``: the rates to price on (default :func:`machine`; ``machine_``, its former name, warns).
    A schedule that names the fused maps (:func:`auto_schedule`'s, or ``dp.fused_map`` keys) is priced on
    the maps as ``lower`` fuses them, as ``lower`` runs it."""
    machine = _renamed("predict", machine, machine_)
    if names_fused_maps(schedule):
        from ..passes.local_optimize import fused_for_search
        sdfg, _ = fused_for_search(sdfg)
    work, _, kernels = prepare(sdfg, sizes)
    cands = {}
    for k in kernels:
        if not k.maps:
            continue
        principal = principal_map(k)
        grid = dict(schedule).get(principal.name)
        if grid is not None:
            cands[k.index] = [Candidate(grid if isinstance(grid, Replicated) else tuple(grid))]
        else:
            cands[k.index] = []
    model = ProgramModel(work, kernels, ranks, resolve_solvers(solvers), machine or _default_machine(), io, None, cands,
                         sizes)
    choice = {k: len(model.priced[k]) - 1 for k in model.priced}  # the given grid (or rank 0) of each
    return model.evaluate(choice)


def _renamed(where: str, machine: Optional[Machine], machine_: Optional[Machine]) -> Optional[Machine]:
    """``machine=``, or the keyword it replaced (``machine_=``) with a DeprecationWarning."""
    if machine_ is None:
        return machine
    if machine is not None:
        raise TypeError(f"{where}(): give machine=, not both machine= and machine_= (its former name)")
    warnings.warn(f"{where}(machine_=...) is deprecated: use machine=...", DeprecationWarning, stacklevel=3)
    return machine_


def _refused_by_lower(model: ProgramModel, rules, choice: Dict[int, int], checked: set) -> List[tuple]:
    """The chosen candidates (kernel index, candidate index) that ``lower`` would refuse, each recorded
    with ``lower``'s reason in ``model.refused``; a candidate is checked once (``checked``)."""
    out = []
    for k in model.kernels:
        i = choice[k.index]
        c = model.priced[k.index][i].candidate
        if not c.partitioned or (k.index, i) in checked:
            continue
        checked.add((k.index, i))
        try:
            rules.check(k.index, c.value)
        except (ScheduleError, UnsupportedPattern) as e:
            model.refused.setdefault(k.index, []).append((c, f"lower refuses it on the program's own sizes: {e}"))
            out.append((k.index, i))
    return out


def _split_fixed(fixed, maps, arrays):
    """``fixed`` as (pinned map grids, pinned array layouts): a key is what the program calls it."""
    by_map, by_array = {}, {}
    for key, value in dict(fixed or {}).items():
        if not isinstance(key, str):
            key = getattr(key, "name", None) or getattr(key, "label", None)
        if key in maps:
            by_map[key] = value
        elif key in arrays:
            by_array[key] = tuple(value)
        else:
            raise ScheduleError(f"fixed: unknown map or array {key!r}; known maps: {sorted(maps)}, "
                                f"arrays: {sorted(arrays)}")
    return by_map, by_array


def _keeps_layouts(p, layouts) -> bool:
    """Whether a candidate holds each pinned array split as given (``(P, 1)``: P row blocks, whole rows)."""
    for arr, layout in layouts.items():
        side = p.reads.get(arr) or p.writes.get(arr)
        if side is None:
            continue
        dist = side[0]
        if len(layout) != len(dist.splits):
            return False
        for d, parts in enumerate(layout):
            g = dist.splits[d]
            if parts == 1 and g is not None:
                return False
            if parts > 1 and (g is None or dist.grid[g] != parts):
                return False
    return True


def _explain_kernel(model, k, choice, pred, name, dropped=frozenset()) -> str:
    priced = model.priced[k.index]
    mine = priced[choice[k.index]]
    alternatives = []
    for i, p in enumerate(priced):
        if i == choice[k.index] or (k.index, i) in dropped:
            continue
        alt = model.change(choice, pred, k.index, i)
        alternatives.append((alt.time, alt.total_bytes, i, alt))
    line = f"  {name}: {mine.candidate}"
    refused = model.refused.get(k.index, [])
    why_not = "".join(f"\n    refused {c}: {reason}" for c, reason in refused)
    if not alternatives:
        more = f"; {len(refused)} candidate(s) refused" if refused else ""
        return line + f" (the only candidate{more})" + why_not
    alternatives.sort(key=lambda a: (a[0], a[1]))
    t, b, i, alt = alternatives[0]
    dt = (t - pred.time) * 1e3
    why = []
    if abs(alt.compute - pred.compute) > 1e-9:
        why.append(f"compute {(alt.compute - pred.compute) * 1e3:+.3f} ms")
    if abs(alt.communication - pred.communication) > 1e-9 or b != pred.total_bytes:
        why.append(f"communication {(alt.communication - pred.communication) * 1e3:+.3f} ms, "
                   f"{b - pred.total_bytes:+d} B")
    more = f"; {len(refused)} candidate(s) refused (why below)" if refused else ""
    kept = len(priced) - sum(1 for j, _ in dropped if j == k.index)
    return (f"{line}; runner-up {priced[i].candidate}: {dt:+.3f} ms ({', '.join(why) or 'same cost'}); "
            f"{kept} candidate(s){more}" + why_not)
