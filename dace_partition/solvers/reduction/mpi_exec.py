"""mpi4py executor: a reduction plan as MPI collectives on sub-communicators.

The buffer (any contiguous NumPy array, reduced with ``MPI.SUM``) is cut into ``k`` near-equal
contiguous chunks, ``k`` = the reduction group size, exactly as in the semantics.  Every lowered
step becomes one collective per group on a sub-communicator made with ``Comm.Split`` (colour =
the group, key = position in it, so member 0 is the Reduce/Broadcast root).  The
sub-communicators belong to a :class:`~dace_partition.solvers.communicators.Communicators` (a
private duplicate of the caller's communicator): passed to ``execute`` instead of the communicator,
it makes them once and every later call and plan on it reuses them (steps and plans with the same
groups share one) until it is freed; a plain communicator gets its own for the one call.  The chunks a rank holds before
and after each step come from the semantics, so uneven chunk sets (e.g. after a ReduceScatter
across nodes followed by one inside) are packed/unpacked with no guessing; ReduceScatter and
AllGather use the ``v`` variants where the chunk sizes differ.

The machine hierarchy comes from ``DACE_PARTITION_HIERARCHY`` (e.g. ``2x4``: ranks 0-3 are one
"node", 4-7 another; this simulates a cluster on one machine) or from
``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``.  mpi4py is imported lazily.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..communicators import Communicators
from .language import Collective, Program
from .lowering import LoweredStep, lower
from .model import Placement, SystemHierarchy

ENV_VAR = "DACE_PARTITION_HIERARCHY"


def detect_hierarchy(comm) -> Tuple[SystemHierarchy, Tuple[int, ...]]:
    """``(hierarchy, device_of_rank)`` of a communicator (collective: every rank must call it).

    With ``DACE_PARTITION_HIERARCHY`` set, device = rank.  Otherwise ranks are grouped by shared
    memory; nodes are numbered by their smallest rank and devices node-major.  Nodes of unequal
    sizes cannot form a regular hierarchy: then all ranks count as one node (flat reductions).
    """
    size = comm.Get_size()
    text = os.environ.get(ENV_VAR, "").strip()
    if text:
        h = SystemHierarchy.parse(text)
        if h.num_devices != size:
            raise ValueError(f"{ENV_VAR}={text} describes {h.num_devices} devices, the communicator has {size}")
        return h, tuple(range(size))
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        info = comm.allgather((node.allreduce(comm.Get_rank(), op=MPI.MIN), node.Get_rank(), node.Get_size()))
    finally:
        node.Free()
    leaders = sorted({i[0] for i in info})
    sizes = {i[2] for i in info}
    if len(sizes) != 1:
        return SystemHierarchy.of(("node", 1), ("core", size)), tuple(range(size))
    per = sizes.pop()
    dev = tuple(leaders.index(lead) * per + local for lead, local, _ in info)
    return SystemHierarchy.of(("node", len(leaders)), ("core", per)), dev


def _chunk_bounds(n: int, k: int) -> List[Tuple[int, int]]:
    q, r = divmod(n, k)
    out, lo = [], 0
    for c in range(k):
        hi = lo + q + (1 if c < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def _subcomm(comms: Communicators, groups, device_of_rank: Tuple[int, ...]):
    """The communicator of this rank's group in ``groups`` (``MPI.COMM_NULL`` where it is in none): split
    once per group set and device numbering on ``comms``, so every plan run on the same communicators
    shares it (a program's "node" and "across nodes" groups are split once, not once per plan or call)."""
    from mpi4py import MPI
    device = device_of_rank[comms.Get_rank()]
    color, pos = MPI.UNDEFINED, 0
    for gi, g in enumerate(groups):
        if device in g:
            color, pos = gi, g.index(device)
    return comms.split(("reduction", groups, device_of_rank), color, pos)


@dataclass
class _Bound:
    """A plan on one ``Communicators``: sub-communicators per distinct group set, this rank's groups."""
    comms: Dict[tuple, object]
    device: int
    sidx: int
    mine: List[Optional[Tuple[int, tuple]]]  # per step: (position, synthesis group) or None


@dataclass
class ReductionPlan:
    """A program lowered for a placement; ``program=None`` is the flat AllReduce."""
    placement: Placement
    program: Optional[Program]
    steps: Tuple[LoweredStep, ...] = ()

    @classmethod
    def build(cls, placement: Placement, program: Optional[Program]) -> "ReductionPlan":
        steps = lower(program, placement) if program is not None else ()
        return cls(placement, program, steps)

    def describe(self) -> str:
        return "flat AllReduce" if self.program is None else str(self.program)

    # --- binding ----------------------------------------------------------------------------
    def bind(self, comms: Communicators, device_of_rank: Optional[Sequence[int]] = None) -> _Bound:
        """The sub-communicators of this plan on ``comms`` (collective: split on first use, kept by
        ``comms`` and shared with every other plan run on it) and this rank's groups."""
        n = self.placement.hierarchy.num_devices
        if comms.Get_size() != n:
            raise ValueError(f"communicator has {comms.Get_size()} ranks, hierarchy "
                             f"{self.placement.hierarchy} has {n} devices")
        dev_of = tuple(int(d) for d in device_of_rank) if device_of_rank is not None else tuple(range(n))
        device = dev_of[comms.Get_rank()]
        _, sidx = self.placement.device_coords(device)
        comms_of = {}
        mine = []
        flat_groups = self.placement.groups()
        for gs in [flat_groups] + [st.groups for st in self.steps]:
            if gs not in comms_of:
                comms_of[gs] = _subcomm(comms, gs, dev_of)
        for st in self.steps:
            found = None
            for g in st.sgroups:
                if sidx in g:
                    found = (g.index(sidx), g)
            mine.append(found)
        return _Bound(comms_of, device, sidx, mine)

    # --- execution --------------------------------------------------------------------------
    def execute(self, comm, buffer: np.ndarray, device_of_rank: Optional[Sequence[int]] = None) -> np.ndarray:
        """Sum ``buffer`` over this rank's reduction group, in place; returns the buffer. ``comm``: an mpi4py
        communicator (its sub-communicators are made for this call and freed before it returns) or a
        :class:`Communicators` the caller keeps (made once, reused by every call and plan on it)."""
        with Communicators.of(comm) as comms:
            return self._execute(comms, buffer, device_of_rank)

    def _execute(self, comms: Communicators, buffer: np.ndarray, device_of_rank) -> np.ndarray:
        from mpi4py import MPI
        b = self.bind(comms, device_of_rank)
        if not buffer.flags.c_contiguous:
            raise ValueError("the buffer must be C-contiguous (it is reduced in place)")
        flat = buffer.reshape(-1)
        if self.program is None:
            c = b.comms[self.placement.groups()]
            if c != MPI.COMM_NULL:
                c.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
            return buffer
        k = self.placement.group_size
        bounds = _chunk_bounds(flat.size, k)

        def pack(rows):
            if not rows:
                return flat[:0].copy()
            lo, hi = bounds[rows[0]][0], bounds[rows[-1]][1]
            if all(bounds[a][1] == bounds[c][0] for a, c in zip(rows, rows[1:])):
                return flat[lo:hi]  # contiguous: a view, reduced in place
            return np.concatenate([flat[bounds[r][0]:bounds[r][1]] for r in rows])

        def unpack(rows, data):
            o = 0
            for r in rows:
                lo, hi = bounds[r]
                flat[lo:hi] = data[o:o + hi - lo]  # a no-op self-copy when data is a view of flat
                o += hi - lo

        def count(rows):
            return sum(bounds[r][1] - bounds[r][0] for r in rows)

        for st, mine in zip(self.steps, b.mine):
            if mine is None:
                continue
            pos, sg = mine
            c = b.comms[st.groups]
            before = [st.rows_before[s] for s in sg]
            if not any(before):
                continue  # every member holds nothing: the semantics' no-op group
            coll = st.collective
            if coll is Collective.ALL_REDUCE:
                data = pack(before[pos])
                c.Allreduce(MPI.IN_PLACE, data, op=MPI.SUM)
                unpack(before[pos], data)
            elif coll is Collective.REDUCE:
                data = pack(before[pos])
                if pos == 0:
                    c.Reduce(MPI.IN_PLACE, data, op=MPI.SUM, root=0)
                    unpack(before[pos], data)
                else:
                    c.Reduce(data, None, op=MPI.SUM, root=0)
            elif coll is Collective.REDUCE_SCATTER:
                send = np.ascontiguousarray(pack(before[pos]))
                after = [st.rows_after[s] for s in sg]
                counts = [count(r) for r in after]
                recv = np.empty(counts[pos], dtype=flat.dtype)
                if len(set(counts)) == 1:
                    c.Reduce_scatter_block(send, recv, op=MPI.SUM)
                else:
                    c.Reduce_scatter(send, recv, recvcounts=counts, op=MPI.SUM)
                unpack(after[pos], recv)
            elif coll is Collective.ALL_GATHER:
                send = np.ascontiguousarray(pack(before[pos]))
                counts = [count(r) for r in before]
                recv = np.empty(sum(counts), dtype=flat.dtype)
                if len(set(counts)) == 1:
                    c.Allgather(send, recv)
                else:
                    c.Allgatherv(send, [recv, counts])
                o = 0
                for rows, n in zip(before, counts):
                    unpack(rows, recv[o:o + n])
                    o += n
            elif coll is Collective.BROADCAST:
                rows = before[0]
                data = np.ascontiguousarray(pack(rows)) if pos == 0 else np.empty(count(rows), dtype=flat.dtype)
                c.Bcast(data, root=0)
                if pos != 0:
                    unpack(rows, data)
            else:
                raise ValueError(coll)
        return buffer


def build_plan(placement: Placement, program: Optional[Program]) -> ReductionPlan:
    return ReductionPlan.build(placement, program)
