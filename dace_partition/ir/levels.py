"""Which bytes of a Move cross between nodes: the two levels of a cluster (inside a node, between nodes).

World ranks sit on nodes in consecutive runs of ``per_node`` ranks (srun's default block distribution,
and mpiexec's on a host list), so rank ``r`` is on node ``r // per_node``. A message inside a node goes
through shared memory; one between nodes through the network, at a fraction of the bandwidth and several
times the latency. The cost model prices each rank's received bytes by the level they cross
(``search.machine.Machine.message_time``) and the report shows the bytes per level.

What a rank receives from another node is worked out from the Move alone, whatever the solver: for a
scatter, everything a rank off rank 0's node receives; for a gather or a grid-to-grid move, each rank's
received bytes split in proportion to what the ranks holding its data hold of it (the intersection of
its destination block with their source blocks: a halo comes from the neighbours, a transpose from
everyone); for collectives (an AllReduce), in proportion to the ranks on other nodes. Unknown blocks
(sizes known at run time) fall back to that proportion too.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .boxes import overlaps, volume
from .kinds import MoveKind


@dataclass(frozen=True)
class NodeLayout:
    """``per_node`` consecutive world ranks on each node; ``source`` says who said so."""
    per_node: int
    source: str = ""

    def __post_init__(self):
        if self.per_node < 1:
            raise ValueError(f"a node holds at least one rank, got {self.per_node}")

    def node(self, rank: int) -> int:
        return rank // self.per_node

    def nodes(self, world: int) -> int:
        return -(-world // self.per_node)

    def __str__(self):
        return f"{self.per_node} rank(s) per node" + (f" ({self.source})" if self.source else "")

    @staticmethod
    def parse(hierarchy: str, source: str = "") -> "NodeLayout":
        """From a hierarchy ``"2x4"`` (nodes x ranks per node, ``DACE_PARTITION_HIERARCHY``'s form)."""
        parts = [p for p in hierarchy.lower().replace(" ", "").split("x") if p]
        if len(parts) < 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{hierarchy!r} is not nodes x ranks per node (e.g. 2x4)")
        per = 1
        for p in parts[1:]:
            per *= int(p)
        return NodeLayout(per, source or hierarchy)


def off_node_bytes(move, per_rank: Optional[Tuple[int, ...]], layout: NodeLayout) -> Optional[Tuple[int, ...]]:
    """Of the bytes each world rank receives for ``move`` (``per_rank``, a solver's ``Cost.per_rank``), those
    that come from ranks on other nodes; None where ``per_rank`` is unknown. Array operations over the
    pairs of ranks (``ir.boxes.overlaps``): the search prices moves on up to 1024 ranks."""
    if per_rank is None:
        return None
    world = len(per_rank)
    if layout.nodes(world) <= 1:
        return tuple(0 for _ in per_rank)
    kind = move.kind
    node = np.arange(world) // layout.per_node
    if kind == MoveKind.SCATTER:
        return tuple(b if node[r] != node[0] else 0 for r, b in enumerate(per_rank))
    other = node[:, None] != node[None, :]  # [s, r]: s and r on different nodes
    # every other rank an equally likely partner: the share of them on other nodes
    share = other.sum(axis=0) / (world - 1)
    if kind in (MoveKind.GATHER, MoveKind.REDISTRIBUTE):  # follow the blocks (a collective has none to follow)
        src = move.src.world_blocks(world)
        dst = move.dst.world_blocks(world) if not move.dst.is_root else None
        if src is not None:
            if kind == MoveKind.GATHER or dst is None:  # w[s, r]: what s holds of what r needs
                w = np.repeat(np.array([volume(c) for _, c in src], dtype=np.int64)[:, None], world, axis=1)
            else:
                w = overlaps(src, dst)
            w = w * np.array(move.src.first_replicas(world), dtype=np.int64)[:, None]
            np.fill_diagonal(w, 0)
            total = w.sum(axis=0)
            known = total > 0
            share = np.where(known, (w * other).sum(axis=0) / np.where(known, total, 1), share)
    return tuple(int(round(b * float(f))) if b else 0 for b, f in zip(per_rank, share))
