"""Partial results combined by a hierarchy-aware reduction program (P^2, ``solvers/reduction``).

Tried before the flat ``allreduce`` solver for every ALLREDUCE move.  The machine hierarchy comes
from ``DACE_PARTITION_HIERARCHY`` (``"2x4"``: 2 nodes of 4 ranks, ranks node-major, as ``mpiexec``
places them) **at lowering time**, or, when it is unset, from the Slurm allocation the lowering runs
in (``SLURM_JOB_NUM_NODES`` x tasks per node when every node has as many, ``reduction/slurm.py``);
without either the solver refuses and the flat ``MPI_Allreduce`` serves.  It synthesizes the
programs for the move's replica group (the grid's replica dimensions laid on the hierarchy), ranks
them with the cost model and takes the best one only if it is predicted faster than the flat
collective; otherwise it refuses, naming both predicted times, and the flat solver serves.

Why at lowering time rather than a choice in the generated code at its first call: the report is
made before any rank starts and its bytes must be exactly what the program moves (the PMPI
counter checks it); the hierarchical program moves other bytes than the flat call (e.g. 2x2:
1024 B instead of 768 B per rank for a 512 B block), so a run-time choice would make the report
wrong for one of the two.  Fixing the program at lowering keeps report, bytes and predicted times
true: the chosen program (the executor's table) is recorded on the move's ``DistributedMemlet``
(``decision``) when the lowering prices it, and the build emits that one whatever the environment says
by then.  The program checks at its first call that ``DACE_PARTITION_HIERARCHY``, if set at run time,
is the one it was lowered for (and stops otherwise), and, if unset, compares the hierarchy with the
nodes ``MPI_Comm_split_type`` finds and warns once if they differ (``dace_partition_hierarchical.h``).
On a real cluster lower inside the allocation, or set the variable to its shape (nodes x ranks per
node) when lowering.

Restrictions (each a refusal, so the flat call serves): every rank's block the same size, known at
lowering, divisible into one chunk per group member (the block collectives keep the byte count
exact), at most ``INT_MAX`` elements, and a grid whose replica group maps onto the hierarchy
(``placement_from_grid``).
"""
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Optional, Tuple

import dace.library

from ..ir import Cost, Move, MoveKind
from ..ir.boxes import volume
from ..runtime.environment import DacePartitionMPI
from .base import Solver
from .reduction.api import ReductionChoice, choose_reduction
from .reduction.language import Collective
from .reduction.lowering import LoweredStep, lower, synthesis_hierarchy
from .reduction.model import SystemHierarchy, placement_from_grid
from .reduction.mpi_exec import ENV_VAR
from .reduction.slurm import slurm_hierarchy

INT_MAX = 2**31 - 1


@dace.library.environment
class DacePartitionHierarchical(DacePartitionMPI):
    """The MPI build settings plus the hierarchical reduction executor header."""
    headers = ["mpi.h", "dace_partition_runtime.h", "dace_partition_hierarchical.h"]


class Code(IntEnum):
    """The executor's collective codes (``dace_partition::hier::Collective``)."""
    ALLREDUCE = 1
    REDUCE_SCATTER = 2
    ALLGATHER = 3
    REDUCE = 4
    BCAST = 5


_CODE = {Collective.ALL_REDUCE: Code.ALLREDUCE, Collective.REDUCE_SCATTER: Code.REDUCE_SCATTER,
         Collective.ALL_GATHER: Code.ALLGATHER, Collective.REDUCE: Code.REDUCE, Collective.BROADCAST: Code.BCAST}
_MPI = {Code.ALLREDUCE: "MPI_Allreduce", Code.REDUCE_SCATTER: "MPI_Reduce_scatter_block",
        Code.ALLGATHER: "MPI_Allgather", Code.REDUCE: "MPI_Reduce", Code.BCAST: "MPI_Bcast"}


@dataclass(frozen=True)
class RankStep:
    """One grid rank in one step: its group (``colour`` -1: none), position, chunks sent/received."""
    colour: int
    pos: int
    size: int
    pack: Tuple[int, ...]
    unpack: Tuple[int, ...]


@dataclass(frozen=True)
class HierarchicalPlan:
    """The chosen program for one move, lowered to every grid rank."""
    hierarchy: str
    choice: ReductionChoice
    steps: Tuple[LoweredStep, ...]
    ranks: Tuple[Tuple[RankStep, ...], ...]  # per step, per grid rank
    count: int  # elements per rank
    chunk: int  # elements per chunk
    source: str = ""  # where the hierarchy came from (the report names it)

    def describe(self) -> str:
        names = synthesis_hierarchy(self.choice.placement).level_names
        where = f"; hierarchy from {self.source}" if self.source else ""
        return (f"hierarchical {self.hierarchy}: {self.choice.program.describe(names)}, predicted "
                f"{self.choice.predicted_s * 1e3:.4f} ms vs flat MPI_Allreduce {self.choice.flat_s * 1e3:.4f} ms "
                f"({self.choice.candidates} programs{where})")

    def bytes_per_rank(self, itemsize: int):
        """What each grid rank receives, in the PMPI counter's model of each call."""
        out = [0] * len(self.ranks[0])
        for st, ranks in zip(self.steps, self.ranks):
            code = _CODE[st.collective]
            for r, rs in enumerate(ranks):
                if rs.colour < 0:
                    continue
                g, sent, got = rs.size, len(rs.pack) * self.chunk * itemsize, len(rs.unpack) * self.chunk * itemsize
                if code is Code.ALLREDUCE:
                    out[r] += (2 * (g - 1) * sent) // g
                elif code is Code.REDUCE:
                    out[r] += (g - 1) * sent if rs.pos == 0 else 0
                elif code is Code.REDUCE_SCATTER:
                    out[r] += (g - 1) * got
                elif code is Code.ALLGATHER:
                    out[r] += (g - 1) * sent
                else:  # Bcast: every member but the root receives the root's chunks
                    out[r] += got
        return out

    def messages(self) -> int:
        """Point-to-point messages of the usual algorithms: rings (AllReduce twice round), chains."""
        n = 0
        for st in self.steps:
            per = {Code.ALLREDUCE: 2, Code.REDUCE_SCATTER: 1, Code.ALLGATHER: 1}.get(_CODE[st.collective])
            for g in st.groups:
                k = len(g)
                n += per * k * (k - 1) if per else k - 1
        return n

    def table(self):
        """The executor's int table (layout in dace_partition_hierarchical.h)."""
        t = [len(self.steps), len(self.ranks[0])]
        for st, ranks in zip(self.steps, self.ranks):
            t.append(int(_CODE[st.collective]))
            for rs in ranks:
                t += [rs.colour, rs.pos, len(rs.pack), *rs.pack, len(rs.unpack), *rs.unpack]
        return t


def _rank_steps(step: LoweredStep, placement, nranks: int) -> Tuple[RankStep, ...]:
    out = []
    for r in range(nranks):
        _, sidx = placement.device_coords(r)
        colour = next(i for i, g in enumerate(step.groups) if r in g) if any(r in g for g in step.groups) else -1
        sg = next((g for g in step.sgroups if sidx in g), None)
        if colour < 0 or sg is None:
            out.append(RankStep(-1, 0, 0, (), ()))
            continue
        pos = sg.index(sidx)
        before = [step.rows_before[s] for s in sg]
        if not any(before):  # every member holds nothing: no call
            out.append(RankStep(-1, 0, 0, (), ()))
            continue
        coll, mine = step.collective, tuple(before[pos])
        if coll is Collective.ALL_REDUCE:
            pack, unpack = mine, mine
        elif coll is Collective.REDUCE:
            pack, unpack = mine, (mine if pos == 0 else ())
        elif coll is Collective.REDUCE_SCATTER:
            pack, unpack = mine, tuple(step.rows_after[sidx])
        elif coll is Collective.ALL_GATHER:
            pack, unpack = mine, tuple(c for rows in before for c in rows)
        else:
            pack, unpack = (tuple(before[0]), ()) if pos == 0 else ((), tuple(before[0]))
        out.append(RankStep(colour, pos, len(sg), pack, unpack))
    return tuple(out)


@lru_cache(maxsize=256)
def plan_move(move: Move, hierarchy: str,
              source: str | None = None) -> Tuple[Optional[HierarchicalPlan], Optional[str]]:
    """``(plan, None)`` or ``(None, why the flat collective serves)``, for ``hierarchy`` ("2x4") taken from
    ``source`` (default: the variable)."""
    source = source or f"{ENV_VAR}={hierarchy}"
    try:
        h = SystemHierarchy.parse(hierarchy)
    except ValueError as e:
        raise ValueError(f"{ENV_VAR}={hierarchy!r} is not a hierarchy such as 2x4 (nodes x ranks per node): {e}") from e
    canonical = "x".join(str(n) for n in h.sizes)  # what the generated code compares at run time
    src = move.src
    if src.size != h.num_devices:
        return None, f"the grid {src.grid} has {src.size} ranks, {source} describes {h.num_devices}"
    blocks = src.blocks()
    if blocks is None:
        return None, "block sizes known only at run time"
    counts = {volume(c) for _, c in blocks}
    if len(counts) != 1:
        return None, f"ranks hold blocks of different sizes {sorted(counts)}"
    count = counts.pop()
    if count > INT_MAX:
        return None, f"{count} elements per rank exceed an int count"
    placement = placement_from_grid(h, src.grid, src.replica_dims)
    if placement is None:
        return None, f"the grid {src.grid} does not map onto the levels of {hierarchy} (from {source})"
    k = placement.group_size
    if count % k:
        return None, f"{count} elements per rank do not split into {k} equal chunks"
    choice = choose_reduction(h, placement, count * move.itemsize)
    if choice.is_flat:
        return None, f"the cost model predicts the flat MPI_Allreduce best: {choice.describe()}"
    return build_plan(canonical, choice, count, source), None


def build_plan(hierarchy: str, choice: ReductionChoice, count: int, source: str = "") -> HierarchicalPlan:
    """``choice.program`` lowered to every rank of ``choice.placement`` for ``count`` elements per rank
    (a multiple of the group size)."""
    placement = choice.placement
    steps = lower(choice.program, placement)
    n = placement.hierarchy.num_devices
    ranks = tuple(_rank_steps(st, placement, n) for st in steps)
    return HierarchicalPlan(hierarchy, choice, steps, ranks, count, count // placement.group_size, source)


def hierarchy_setting(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """``(hierarchy, where it comes from)`` at lowering time, or ``(None, why it is unknown)``: the
    variable if set (the override), else the Slurm allocation ``env`` (default ``os.environ``) shows."""
    env = os.environ if env is None else env
    text = (env.get(ENV_VAR) or "").strip()
    if text:
        return text, f"{ENV_VAR}={text}"
    h, source = slurm_hierarchy(env)
    if h is None:
        return None, f"{ENV_VAR} is not set and {source}, so the machine hierarchy is unknown at lowering time"
    return h, source


class HierarchicalSolver(Solver):
    name = "hierarchical"
    kinds = frozenset({MoveKind.ALLREDUCE})
    environments = [DacePartitionHierarchical]

    def plan(self, move: Move) -> Tuple[Optional[HierarchicalPlan], Optional[str]]:
        text, source = hierarchy_setting()
        if text is None:
            return None, source
        return plan_move(move, text, source)

    def refuse(self, move: Move) -> Optional[str]:
        why = super().refuse(move)
        return why if why is not None else self.plan(move)[1]

    def cost(self, move: Move) -> Cost:
        plan, why = self.plan(move)
        if plan is None:
            raise ValueError(f"hierarchical solver asked for the cost of a move it refuses: {why}")
        grid = plan.bytes_per_rank(move.itemsize)
        per = tuple(grid) + (0, ) * (move.world - len(grid))
        calls = [plan.describe()]
        for st in plan.steps:
            calls.append(f"{_MPI[_CODE[st.collective]]}({move.src.pending.mpi}, {len(st.groups)} groups of "
                         f"{len(st.groups[0])})")
        return Cost(per, plan.messages(), tuple(calls))

    def decision(self, move: Move) -> str:
        """The program chosen for ``move`` under the hierarchy seen now (at lowering), as the executor's table
        with its hierarchy, chunk and count (JSON): the build (code generation) may run after the setting
        has changed, in an environment without it or under another machine calibration, and must emit what
        the report says. "" where the solver refuses."""
        plan, _ = self.plan(move)
        if plan is None:
            return ""
        return json.dumps({"hierarchy": plan.hierarchy, "source": plan.source, "count": plan.count,
                           "chunk": plan.chunk, "table": plan.table()})

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        return self.emit_decided(move, "", src_desc, dst_desc)

    def emit_decided(self, move: Move, decision: str, src_desc, dst_desc) -> str:
        """The code of the program the lowering chose (``decision``, from :meth:`decision`); a node expanded
        without one (made outside ``lower``) is planned under the hierarchy seen now."""
        if decision:
            d = json.loads(decision)
            hierarchy, chunk, planned, table = d["hierarchy"], int(d["chunk"]), int(d["count"]), list(d["table"])
        else:
            plan, why = self.plan(move)
            if plan is None:
                raise ValueError(f"hierarchical solver asked to emit a move it refuses: {why}")
            hierarchy, chunk, planned, table = plan.hierarchy, plan.chunk, plan.count, plan.table()
        count = 1
        for s in dst_desc.shape:
            count *= int(s)
        if count != planned:
            raise ValueError(f"{move.array}: local buffer of {count} elements, planned for {planned}")
        return (f"static const int table[{len(table)}] = {{{', '.join(map(str, table))}}};\n"
                f'dace_partition::hier::allreduce<{dst_desc.dtype.ctype}>("{move.array}", {move.src.grid_id}, '
                f'table, {len(table)}, "{hierarchy}", {chunk}LL, _in, _out, {count}LL, '
                f"{move.src.pending.code});")
