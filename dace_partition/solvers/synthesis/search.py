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
sent per device).  Besides the paper's alltoall, which moves one group of axes
between one pair of dimensions, there are *fused* alltoall edges that move
several groups between pairwise disjoint pairs of dimensions in one collective
over the product of their axes (what XLA's all-to-all does when two sharded
dimensions change at once).  Each device still sends one tile, so such an
edge costs what one of its moves alone would, where the paper's rules would
charge one tile per move or detour through extra axes and a permutation.

Nodes whose tile exceeds the memory bound are never entered, so every path
found is memory-bounded; over-partitioning (sec. 7.2) arises on its own
because ``dynslice`` of a replicated axis costs nothing and may make later
``alltoall`` steps cheaper.
"""
from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from .types import Collective, prime_factors

Local = Tuple[int, ...]


@dataclass(frozen=True)
class WeakOp:
    """One edge: ``op`` on ``dims`` moving factor axes whose sizes are ``primes``.

    A fused alltoall has ``dims = (src0, dst0, src1, dst1, ...)`` over pairwise
    disjoint dimensions and ``primes`` concatenated per move, with
    ``counts[k]`` primes belonging to move ``k``; :attr:`moves` splits them.
    Single-move ops leave ``counts`` empty.
    """
    op: Collective           # DYNSLICE | ALLGATHER | ALLTOALL
    dims: Tuple[int, ...]    # (i,) or (src_dim, dst_dim, ...) for alltoall
    primes: Tuple[int, ...]  # sorted prime sizes of the axes acted on (per move for a fused alltoall)
    counts: Tuple[int, ...] = ()

    @property
    def moves(self) -> Tuple[Tuple[int, int, Tuple[int, ...]], ...]:
        """``(src_dim, dst_dim, primes)`` per move of an alltoall (one entry unless fused)."""
        if not self.counts:
            return ((self.dims[0], self.dims[1], self.primes),)
        out, at = [], 0
        for k, c in enumerate(self.counts):
            out.append((self.dims[2 * k], self.dims[2 * k + 1], self.primes[at:at + c]))
            at += c
        return tuple(out)

    def __str__(self) -> str:
        if self.counts:
            return "alltoall[" + ", ".join(f"{i}->{j}x{p}" for i, j, p in self.moves) + "]"
        return f"{self.op}{self.dims}x{self.primes}"


def fused_alltoall(moves: Sequence[Tuple[int, int, Tuple[int, ...]]]) -> WeakOp:
    """The weak alltoall doing ``moves`` (``(src_dim, dst_dim, primes)``, disjoint dims) in one collective."""
    moves = sorted(moves)
    if len(moves) == 1:
        i, j, p = moves[0]
        return WeakOp(Collective.ALLTOALL, (i, j), tuple(p))
    return WeakOp(Collective.ALLTOALL, tuple(d for i, j, _ in moves for d in (i, j)),
                  tuple(q for _, _, p in moves for q in p), tuple(len(p) for _, _, p in moves))


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

    def __init__(self, shape: Sequence[int], mesh_primes: Sequence[int], bound: int, fused: bool = True):
        self.shape = tuple(shape)
        self.fused = fused
        self.mesh_primes = Counter(mesh_primes)
        self.bound = bound
        self._used: Dict[Local, Tuple[Counter, ...]] = {}
        self._subsets: Dict[Tuple[Tuple[int, int], ...], List[Tuple[int, ...]]] = {}
        self._edges: Dict[Local, List[Tuple[WeakOp, Local, int]]] = {}
        self._fused_ops: Dict[tuple, WeakOp] = {}

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

    def edges(self, local: Local) -> List[Tuple[WeakOp, Local, int]]:
        """``(op, new tile, cost)`` for every edge out of ``local`` (computed once per node, then cached:
        the searches below visit a node several times and fused alltoalls make edge lists long)."""
        out = self._edges.get(local)
        if out is None:
            out = self._edges[local] = self._make_edges(local)
        return out

    def _make_edges(self, local: Local) -> List[Tuple[WeakOp, Local, int]]:
        used = self.used(local)
        free = Counter(self.mesh_primes)
        for u in used:
            free.subtract(u)
        size = _prod(local)
        rank = len(local)
        out = []
        singles = []
        for i in range(rank):
            # dynslice: one free prime at a time (cost 0, merged later)
            for p in sorted(q for q, k in free.items() if k > 0):
                if local[i] % p == 0:
                    new = local[:i] + (local[i] // p,) + local[i + 1:]
                    out.append((WeakOp(Collective.DYNSLICE, (i,), (p,)), new, 0))
            if not used[i]:
                continue
            for sub in self.subsets(used[i]):
                n = _prod(sub)
                # allgather
                if size * n <= self.bound:
                    new = local[:i] + (local[i] * n,) + local[i + 1:]
                    out.append((WeakOp(Collective.ALLGATHER, (i,), sub), new, size * n))
                # alltoall i -> j
                for j in range(rank):
                    if j != i and local[j] % n == 0:
                        new = list(local)
                        new[i] *= n
                        new[j] //= n
                        singles.append((i, j, sub, n, (1 << i) | (1 << j)))
                        out.append((WeakOp(Collective.ALLTOALL, (i, j), sub), tuple(new), size))
        if self.fused and len(singles) > 1:
            self._fused(local, size, singles, out)
        return out

    def _fused(self, local: Local, size: int, singles, out) -> None:
        """Fused alltoalls: two or more single moves on pairwise disjoint dimensions, one tile of cost.

        ``singles`` come in increasing source dimension, so each set of moves is
        produced once and already in the order :func:`fused_alltoall` uses.
        Moves of equal group size can swap their target dimensions and reach the
        same tile shape; only the pairing with targets increasing along the
        sources is an edge (the lowering tries the other pairings, see
        :func:`pairings`), which keeps the edge lists short.
        """
        memo = self._fused_ops
        m = len(singles)
        # compatible[k]: later singles that may join single k (disjoint dims; equal sizes: targets increase)
        compatible = []
        for k in range(m):
            i, j, _, n, bits = singles[k]
            mask = 0
            for k2 in range(k + 1, m):
                _, j2, _, n2, bits2 = singles[k2]
                if not bits & bits2 and (n2 != n or j2 > j):
                    mask |= 1 << k2
            compatible.append(mask)

        def extend(allowed: int, chosen: tuple, new: list):
            while allowed:
                low = allowed & -allowed
                k = low.bit_length() - 1
                allowed ^= low
                i, j, sub, n, _ = singles[k]
                moves = chosen + ((i, j, sub),)
                nxt = new.copy()
                nxt[i] *= n
                nxt[j] //= n
                if chosen:
                    op = memo.get(moves)
                    if op is None:
                        op = memo[moves] = fused_alltoall(moves)
                    out.append((op, tuple(nxt), size))
                rest = allowed & compatible[k]
                if rest:
                    extend(rest, moves, nxt)

        for k in range(m):
            if compatible[k]:
                i, j, sub, n, _ = singles[k]
                new = list(local)
                new[i] *= n
                new[j] //= n
                extend(compatible[k], ((i, j, sub),), new)

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
                key = (cost + c, ncomm + (op.op != Collective.DYNSLICE), nsteps + 1)
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
                r = min(((rank(u)[0] + (op.op != Collective.DYNSLICE), rank(u)[1] + 1) for u, op in preds.get(v, ())),
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
            for u, op in sorted(preds.get(v, ()), key=lambda t: (rank(t[0])[0] + (t[1].op != Collective.DYNSLICE), rank(t[0])[1])):
                walk(u, suffix + [op])

        walk(dst, [])
        return out


def pairings(op: WeakOp) -> List[WeakOp]:
    """``op`` and every fused alltoall that differs only in which target each move of equal size takes.

    They all lead from one tile shape to the same tile shape at the same cost,
    so the search keeps one of them as an edge and the lowering picks among
    them the one that best matches the target layout.
    """
    if not op.counts:
        return [op]
    moves = op.moves
    groups: Dict[int, List[int]] = {}
    for k, (_, _, p) in enumerate(moves):
        groups.setdefault(_prod(p), []).append(k)
    variants = [list(moves)]
    for ks in groups.values():
        if len(ks) < 2:
            continue
        nxt = []
        for v in variants:
            for perm in itertools.permutations([moves[k][1] for k in ks]):
                w = list(v)
                for k, j in zip(ks, perm):
                    w[k] = (moves[k][0], j, moves[k][2])
                nxt.append(w)
        variants = nxt
    return [fused_alltoall(v) for v in variants]
