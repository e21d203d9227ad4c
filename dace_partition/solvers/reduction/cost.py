"""Cost model / simulator (sec. 5) for flat and synthesized reductions.

Every level of the system hierarchy has one link per unit of that level to the outside (the NIC
of a node, the NVLink/NVSwitch port of a GPU, the memory channel of a core) with a bandwidth and
a per-message latency.  Collectives are modelled as the usual bandwidth-optimal algorithms over
the group's members in device order: AllReduce, ReduceScatter and AllGather as rings, Reduce and
Broadcast as pipelined chains.  Every edge of a ring/chain carries a known volume; an edge
between devices that first differ at level ``L`` leaves the units of levels ``L ..`` of its
source, so it loads those links.  Groups of one step run concurrently and share links (this is
what makes a flat AllReduce across nodes slow: all groups of a node share its NIC).  The time of
a step is its most loaded link's bytes over bandwidth, plus its latency rounds (``ceil(log2 g)``
per phase, as MPI's recursive-doubling / binomial-tree algorithms use for the latency-bound
part: AllReduce two phases, the others one) times the latency of the outermost level crossed,
plus a fixed per-call overhead; a program's time is the sum of its steps.

Defaults are the paper's (sec. 5): 8 GB/s per node NIC (100 Gb/s at 60 %), 270 GB/s per A100 on
the NVSwitch, 135 GB/s per V100 on the NVLink ring.  Latencies are this implementation's
assumption (the paper models bandwidth only): 5 us across nodes, 1 us inside, and 5 us of
software overhead per collective call (what makes extra steps cost something on small buffers).  Both can be
overridden or calibrated from a measured ping-pong (:meth:`CostModel.from_pingpong`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, Tuple

from .language import Collective, Program
from .lowering import LoweredStep, lower
from .model import Placement, SystemHierarchy

GB = 1e9

PRESETS = {
    # name: (outermost bandwidth, inner bandwidth) in bytes/s
    "a100": (8 * GB, 270 * GB),
    "v100": (8 * GB, 135 * GB),
}


@dataclass(frozen=True)
class CostModel:
    """Per-level link bandwidth (bytes/s) and latency (s), outermost level first."""
    bandwidths: Tuple[float, ...]
    latencies: Tuple[float, ...]
    step_overhead: float = 5e-6

    def __post_init__(self):
        object.__setattr__(self, "bandwidths", tuple(float(b) for b in self.bandwidths))
        object.__setattr__(self, "latencies", tuple(float(a) for a in self.latencies))
        if len(self.bandwidths) != len(self.latencies) or any(b <= 0 for b in self.bandwidths):
            raise ValueError("one positive bandwidth and one latency per level")

    @classmethod
    def default(cls, hierarchy: SystemHierarchy, preset: str = "a100",
                inter_latency: float = 5e-6, intra_latency: float = 1e-6,
                step_overhead: float = 5e-6) -> "CostModel":
        """The paper's bandwidths: outermost level = NIC, every inner level = the GPU link."""
        outer, inner = PRESETS[preset]
        n = len(hierarchy.levels)
        return cls(tuple([outer] + [inner] * (n - 1)), tuple([inter_latency] + [intra_latency] * (n - 1)),
                   step_overhead)

    @classmethod
    def for_machine(cls, hierarchy: SystemHierarchy, machine=None) -> "CostModel":
        """From the package's machine (``search.machine``) where it prices two levels (``dp.calibrate(...,
        across_nodes=...)``): the outermost level gets its link between nodes, every inner level the link
        inside a node. Otherwise the paper's defaults (:meth:`default`)."""
        if machine is None:
            from ...search.machine import machine as current
            machine = current()
        if not machine.two_levels:
            return cls.default(hierarchy)
        n = len(hierarchy.levels)
        outer_a, outer_b = machine.node_link
        return cls(tuple([1.0 / outer_b] + [1.0 / machine.beta] * (n - 1)), tuple([outer_a] + [machine.alpha] * (n - 1)))

    @classmethod
    def from_pingpong(cls, hierarchy: SystemHierarchy, nbytes: int, intra_rtt: float, inter_rtt: float,
                      intra_latency: float = 1e-6, inter_latency: float = 5e-6,
                      step_overhead: float = 5e-6) -> "CostModel":
        """Calibrate from round-trip times of an ``nbytes`` ping-pong inside and across nodes.

        A round trip moves ``nbytes`` twice, so the bandwidth is ``2 * nbytes / rtt`` (minus the
        two latencies).  The inter-node figure goes to the outermost level, the intra-node one to
        every inner level.
        """
        def bw(rtt, lat):
            t = max(rtt / 2 - lat, 1e-12)
            return nbytes / t
        n = len(hierarchy.levels)
        return cls(tuple([bw(inter_rtt, inter_latency)] + [bw(intra_rtt, intra_latency)] * (n - 1)),
                   tuple([inter_latency] + [intra_latency] * (n - 1)), step_overhead)

    # --- step costs ----------------------------------------------------------------------------
    def collective_time(self, hierarchy: SystemHierarchy, collective: Collective,
                        groups: Sequence[Sequence[int]], nbytes_of) -> float:
        """Time of one step: ``nbytes_of(group)`` gives the per-member bytes the algorithm moves
        (the data reduced for AllReduce/ReduceScatter/Reduce/Broadcast, a member's share for
        AllGather)."""
        if len(self.bandwidths) != len(hierarchy.levels):
            raise ValueError(f"cost model has {len(self.bandwidths)} levels, hierarchy {hierarchy}")
        nlev = len(hierarchy.levels)
        load = {}
        rounds_at = {}
        for g in groups:
            m = len(g)
            if m < 2:
                continue
            n = float(nbytes_of(g))
            if n <= 0:  # a group of devices holding nothing: a no-op, skipped by the executor
                continue
            log = math.ceil(math.log2(m))
            if collective is Collective.ALL_REDUCE:
                per_edge, ring, rounds = 2 * (m - 1) / m * n, True, 2 * log
            elif collective is Collective.REDUCE_SCATTER:
                per_edge, ring, rounds = (m - 1) / m * n, True, log
            elif collective is Collective.ALL_GATHER:
                per_edge, ring, rounds = (m - 1) * n, True, log
            else:  # Reduce / Broadcast: pipelined chain from/to the first member
                per_edge, ring, rounds = n, False, log
            coords = [hierarchy.coords(d) for d in g]
            edges = [(t, (t + 1) % m) for t in range(m if ring else m - 1)]
            outer = nlev
            for a, b in edges:
                ca, cb = coords[a], coords[b]
                lvl = next(l for l in range(nlev) if ca[l] != cb[l])
                outer = min(outer, lvl)
                for l in range(lvl, nlev):
                    key = (l, ca[:l + 1])
                    load[key] = load.get(key, 0.0) + per_edge
            rounds_at[outer] = max(rounds_at.get(outer, 0), rounds)
        if not load:
            return 0.0
        bw_time = max(v / self.bandwidths[l] for (l, _), v in load.items())
        lat = max(r * self.latencies[l] for l, r in rounds_at.items())
        return bw_time + lat + self.step_overhead

    def flat_time(self, placement: Placement, nbytes: int) -> float:
        """One AllReduce per reduction group (the default implementation)."""
        return self.collective_time(placement.hierarchy, Collective.ALL_REDUCE, placement.groups(),
                                    lambda g: nbytes)

    def step_times(self, lowered: Sequence[LoweredStep], placement: Placement, nbytes: int):
        k = placement.group_size
        pos = {}
        for rg in placement.groups():
            for s, d in enumerate(rg):
                pos[d] = s
        out = []
        for st in lowered:
            def nbytes_of(g, st=st):
                # the root's chunks (Broadcast), a member's share (AllGather) or the common chunks
                return nbytes * len(st.rows_before[pos[g[0]]]) / k
            out.append(self.collective_time(placement.hierarchy, st.collective, st.groups, nbytes_of))
        return out

    def program_time(self, program: Program, placement: Placement, nbytes: int) -> float:
        return sum(self.step_times(lower(program, placement), placement, nbytes))
