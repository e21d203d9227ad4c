"""Shortest-path search over weak types (paper sec. 5 and 7.2).

A weak type is a distributed type up to a permutation of devices.  With the
global shape fixed and all axes prime, it is determined by the local (tile)
shape alone: the number of tiles of dimension ``i`` has a unique prime
factorisation, which says which prime-sized axes partition it, and every
remaining prime is a replicated axis.  Searching over tile shapes instead of
concrete types avoids enumerating axis orders and makes every intermediate
``allpermute`` unnecessary (they are all folded into one at the end by the
lowering, see :mod:`.lower`).

Edges are the weak multi-axis collectives with the cost of Fig. 11 (elements
sent per device).  Nodes whose tile exceeds the memory bound are never
entered, so every path found is memory-bounded; over-partitioning (sec. 7.2)
arises on its own because ``dynslice`` of a replicated axis costs nothing and
may make later ``alltoall`` steps cheaper.
"""
from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .types import prime_factors

Local = Tuple[int, ...]


@dataclass(frozen=True)
class WeakOp:
    """One edge: ``op`` on ``dims`` moving factor axes whose sizes are ``primes``."""
    op: str                  # "dynslice" | "allgather" | "alltoall"
    dims: Tuple[int, ...]    # (i,) or (src_dim, dst_dim) for alltoall
    primes: Tuple[int, ...]  # sorted prime sizes of the axes acted on

    def __str__(self) -> str:
        return f"{self.op}{self.dims}x{self.primes}"


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _sub_multisets(c: Counter) -> List[Tuple[int, ...]]:
    items = sorted(c.items())
    out = []
    for counts in itertools.product(*[range(k + 1) for _, k in items]):
        if any(counts):
            out.append(tuple(p for (p, _), k in zip(items, counts) for _ in range(k)))
    return out


class WeakSearch:
    """Dijkstra from one tile shape to another under a per-device element bound."""

    def __init__(self, shape: Sequence[int], mesh_primes: Sequence[int], bound: int):
        self.shape = tuple(shape)
        self.mesh_primes = Counter(mesh_primes)
        self.bound = bound
        self._used: Dict[Local, Tuple[Counter, ...]] = {}
        self._subsets: Dict[Tuple[Tuple[int, int], ...], List[Tuple[int, ...]]] = {}

    def used(self, local: Local) -> Tuple[Counter, ...]:
        u = self._used.get(local)
        if u is None:
            u = tuple(Counter(prime_factors(s // c)) for s, c in zip(self.shape, local))
            self._used[local] = u
        return u

    def subsets(self, c: Counter) -> List[Tuple[int, ...]]:
        key = tuple(sorted(c.items()))
        s = self._subsets.get(key)
        if s is None:
            s = _sub_multisets(c)
            self._subsets[key] = s
        return s

    def edges(self, local: Local):
        used = self.used(local)
        free = Counter(self.mesh_primes)
        for u in used:
            free.subtract(u)
        size = _prod(local)
        rank = len(local)
        for i in range(rank):
            # dynslice: one free prime at a time (cost 0, merged later)
            for p in sorted(q for q, k in free.items() if k > 0):
                if local[i] % p == 0:
                    new = local[:i] + (local[i] // p,) + local[i + 1:]
                    yield WeakOp("dynslice", (i,), (p,)), new, 0
            if not used[i]:
                continue
            for sub in self.subsets(used[i]):
                n = _prod(sub)
                # allgather
                if size * n <= self.bound:
                    new = local[:i] + (local[i] * n,) + local[i + 1:]
                    yield WeakOp("allgather", (i,), sub), new, size * n
                # alltoall i -> j
                for j in range(rank):
                    if j != i and local[j] % n == 0:
                        new = list(local)
                        new[i] *= n
                        new[j] //= n
                        yield WeakOp("alltoall", (i, j), sub), tuple(new), size

    def shortest(self, src: Local, dst: Local) -> Tuple[int, List[WeakOp]]:
        """Cheapest path; ties broken by fewer communicating steps, then fewer steps."""
        if src == dst:
            return 0, []
        best: Dict[Local, Tuple[int, int, int]] = {src: (0, 0, 0)}
        prev: Dict[Local, Tuple[Local, WeakOp]] = {}
        heap = [(0, 0, 0, src)]
        while heap:
            cost, ncomm, nsteps, node = heapq.heappop(heap)
            if best.get(node, (cost, ncomm, nsteps)) < (cost, ncomm, nsteps):
                continue
            if node == dst:
                break
            for op, new, c in self.edges(node):
                key = (cost + c, ncomm + (op.op != "dynslice"), nsteps + 1)
                old = best.get(new)
                if old is None or key < old:
                    best[new] = key
                    prev[new] = (node, op)
                    heapq.heappush(heap, key + (new,))
        if dst not in prev:
            raise AssertionError(f"no memory-bounded path from {src} to {dst}")  # cannot happen: see Thm 4.8
        path: List[WeakOp] = []
        node = dst
        while node != src:
            node, op = prev[node]
            path.append(op)
        path.reverse()
        return best[dst][0], path

    def shortest_paths(self, src: Local, dst: Local, limit: int = 16) -> List[List[WeakOp]]:
        """Up to ``limit`` distinct cheapest paths (same weak cost), fewest communicating steps first.

        The weak cost ignores the final ``allpermute`` the lowering may need, so
        :func:`~.api.synthesize` lowers several equal-cost paths and keeps the
        one whose concrete plan is cheapest.  Paths that differ only in the
        order of consecutive dynslices are the same after lowering and are
        reported once.
        """
        if src == dst:
            return [[]]
        dist: Dict[Local, int] = {src: 0}
        heap = [(0, src)]
        done = set()
        target = None
        while heap:
            cost, node = heapq.heappop(heap)
            if node in done or dist[node] < cost:
                continue
            if target is not None and cost > target:
                break
            done.add(node)
            if node == dst:
                target = cost
                continue
            for _op, new, c in self.edges(node):
                nc = cost + c
                if nc <= dist.get(new, nc):
                    dist[new] = nc
                    heapq.heappush(heap, (nc, new))
        if target is None:
            raise AssertionError(f"no memory-bounded path from {src} to {dst}")
        # tight edges (dist[u] + c == dist[v]) form a DAG: dynslices shrink the tile, other edges cost > 0
        preds: Dict[Local, List[Tuple[Local, WeakOp]]] = {}
        for u in done:
            if dist[u] > target:
                continue
            for op, new, c in self.edges(u):
                if new in done and dist[u] + c == dist[new]:
                    preds.setdefault(new, []).append((u, op))
        # best (ncomm, nsteps) to reach each node over tight edges, to enumerate good paths first
        memo: Dict[Local, Tuple[int, int]] = {src: (0, 0)}

        def rank(v: Local) -> Tuple[int, int]:
            r = memo.get(v)
            if r is None:
                memo[v] = (1 << 30, 1 << 30)
                r = min(((rank(u)[0] + (op.op != "dynslice"), rank(u)[1] + 1) for u, op in preds.get(v, ())),
                        default=(1 << 30, 1 << 30))
                memo[v] = r
            return r

        out: List[List[WeakOp]] = []
        seen = set()
        budget = [limit * 16]

        def walk(v: Local, suffix: List[WeakOp]) -> None:
            if len(out) >= limit or budget[0] <= 0:
                return
            if v == src:
                budget[0] -= 1
                path = list(reversed(suffix))
                from .lower import merge_weak_dynslices
                key = tuple(merge_weak_dynslices(path))
                if key not in seen:
                    seen.add(key)
                    out.append(path)
                return
            for u, op in sorted(preds.get(v, ()), key=lambda t: (rank(t[0])[0] + (t[1].op != "dynslice"), rank(t[0])[1])):
                walk(u, suffix + [op])

        walk(dst, [])
        return out
