"""Lowering a weak path to concrete collectives (paper sec. 6.1 and 7.3).

Each weak step fixes only *which primes* move between which dimensions.  The
lowering picks the concrete factor axes.  When the axes it wants are not the
minor-most of their dimension it *relabels*: it re-describes the physical
placement with the axes reordered and a new device map (no data moves; the
communicator groups just stop being plain sub-meshes).  After the last
non-gather step the placement is compared with what the target needs before
its final allgathers; if they differ, a single ``allpermute`` is inserted
there (cheaper than after the gathers, sec. 7.3).

The permutation is then made as small as device maps allow
(:func:`place_permutation`): replicas choose which slice a preceding dynslice
keeps, and the final allgathers accept their chunks in any order, so devices
that already hold their tile keep it and send nothing.  A fused weak alltoall
(several dimension pairs) is lowered to one alltoall per pair, which
:func:`fuse_alltoalls` turns back into one collective.

Axis choices are biased towards the target type so the permutation is
usually not needed.  A small depth-first search over the best few choices per
step (bounded by ``budget`` complete lowerings) keeps the first lowering that
needs no permutation and no relabelling, or else the best one seen.
"""
from __future__ import annotations

import itertools
from enum import Enum
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .factor_mesh import Assignment, FactorMesh, Spec, match
from .plan import Step
from .search import WeakOp, pairings
from .types import Collective


class Rewrite(str, Enum):
    """An instruction of a lowering that re-describes the placement and moves nothing."""
    RELABEL = "relabel"  # the same tiles named by another order of mesh axes
    REMAP = "remap"  # the same tiles on a renumbering of the devices

    def __str__(self):
        return self.value


COp = tuple  # (RELABEL, spec) | (REMAP, loc) | (DYNSLICE, i, axes) | (ALLGATHER, i, axes) | (ALLTOALL, i, j, axes)
#             | (ALLPERMUTE, spec[, loc])


def _set(spec: Spec, i: int, axes) -> Spec:
    return spec[:i] + (tuple(axes),) + spec[i + 1:]


class Lowering:
    def __init__(self, fm: FactorMesh, shape: Tuple[int, ...], dst: Spec, per_step: int = 3, budget: int = 64):
        self.fm, self.shape, self.dst = fm, shape, dst
        self.per_step, self.budget = per_step, budget
        self.place: Dict[int, Tuple[int, int]] = {a: (i, p) for i, axes in enumerate(dst) for p, a in enumerate(axes)}
        self.target = Assignment(fm, shape, dst, np.arange(fm.ndev))

    # --- scoring: lower is better -------------------------------------------------
    def _where(self, a: int, i: int, pos: int) -> int:
        pl = self.place.get(a)
        if pl == (i, pos):
            return 0
        if pl is not None and pl[0] == i:
            return 1
        if pl is None:
            return 2
        return 3

    def _combos(self, pool: Sequence[int], primes: Tuple[int, ...]):
        sizes = self.fm.sizes
        want = sorted(primes)
        seen = set()
        for combo in itertools.combinations(pool, len(primes)):
            if sorted(int(sizes[a]) for a in combo) == want and combo not in seen:
                seen.add(combo)
                yield combo

    def candidates(self, op: WeakOp, st: Assignment) -> List[Tuple[tuple, List[COp]]]:
        spec = st.spec
        out = []
        if op.op == Collective.DYNSLICE:
            (i,) = op.dims
            used = {a for axes in spec for a in axes}
            free = [a for a in range(len(self.fm.axes)) if a not in used]
            for combo in self._combos(free, op.primes):
                order = sorted(combo, key=lambda a: (self.place.get(a, (99, 99))[1] if self.place.get(a, (-1,))[0] == i else 99, a))
                base = len(spec[i])
                score = sum(self._where(a, i, base + k) for k, a in enumerate(order))
                out.append(((score, 0), [(Collective.DYNSLICE, i, tuple(order))]))
        elif op.op == Collective.ALLGATHER:
            (i,) = op.dims
            for combo in self._combos(spec[i], op.primes):
                rest = [a for a in spec[i] if a not in combo]
                relabel = tuple(rest) + combo != spec[i]
                bad = sum(3 - self._where(a, i, spec[i].index(a)) for a in combo)
                ops: List[COp] = []
                if relabel:
                    ops.append((Rewrite.RELABEL, _set(spec, i, tuple(rest) + combo)))
                ops.append((Collective.ALLGATHER, i, combo))
                out.append(((bad, int(relabel)), ops))
        elif op.op == Collective.ALLTOALL and op.counts:
            # fused: choose axes per move (disjoint dims, so choices are independent), relabel once
            # (and which target each move of equal size takes: every pairing reaches the same weak type)
            for variant in pairings(op):
                moves = variant.moves
                per_move = [self._alltoall_choices(spec, i, j, primes)[: self.per_step] for i, j, primes in moves]
                for choice in itertools.product(*per_move):
                    new_spec = spec
                    for (i, j, _), (_, rest, order) in zip(moves, choice):
                        new_spec = _set(new_spec, i, rest + order)
                    relabel = new_spec != spec
                    ops: List[COp] = [(Rewrite.RELABEL, new_spec)] if relabel else []
                    ops += [(Collective.ALLTOALL, i, j, order) for (i, j, _), (_, _, order) in zip(moves, choice)]
                    out.append(((sum(c[0] for c in choice), int(relabel)), ops))
        elif op.op == Collective.ALLTOALL:
            i, j = op.dims
            for score, rest, order in self._alltoall_choices(spec, i, j, op.primes):
                relabel = rest + order != spec[i]
                ops = []
                if relabel:
                    ops.append((Rewrite.RELABEL, _set(spec, i, rest + order)))
                ops.append((Collective.ALLTOALL, i, j, order))
                out.append(((score, int(relabel)), ops))
        else:
            raise ValueError(op.op)
        out.sort(key=lambda t: t[0])
        return out[: self.per_step]

    def _alltoall_choices(self, spec: Spec, i: int, j: int, primes: Tuple[int, ...]):
        """``(score, rest, order)``: axes of ``spec[i]`` to move to ``j`` (``order``) and those that stay."""
        out = []
        for combo in self._combos(spec[i], primes):
            rest = tuple(a for a in spec[i] if a not in combo)
            orders = {combo}
            orders.add(tuple(sorted(combo, key=lambda a: (self.place[a][1] if self.place.get(a, (-1,))[0] == j else 99, a))))
            for order in orders:
                base = len(spec[j])
                score = sum(self._where(a, j, base + k) for k, a in enumerate(order))
                score += sum(2 for a in order if self.place.get(a, (-1,))[0] == i)
                out.append((score, rest, order))
        out.sort(key=lambda t: (t[0], int(t[1] + t[2] != spec[i])))   # stable: same order as candidates()
        return out

    # --- applying concrete ops to placements ------------------------------------
    @staticmethod
    def apply(st: Assignment, cop: COp) -> Assignment:
        kind = cop[0]
        if kind == Rewrite.RELABEL:
            return st.relabel(cop[1])
        if kind == Rewrite.REMAP:
            new = Assignment(st.fm, st.shape, st.spec, cop[1])
            assert np.array_equal(new.phys_blocks(), st.phys_blocks()), "remap must not move data"
            return new
        if kind == Collective.ALLPERMUTE:
            loc = cop[2] if len(cop) > 2 else np.arange(st.fm.ndev)
            return Assignment(st.fm, st.shape, cop[1], loc)
        spec = st.spec
        if kind == Collective.DYNSLICE:
            _, i, axes = cop
            return st.with_spec(_set(spec, i, spec[i] + axes))
        if kind == Collective.ALLGATHER:
            _, i, axes = cop
            assert spec[i][len(spec[i]) - len(axes):] == axes
            return st.with_spec(_set(spec, i, spec[i][: len(spec[i]) - len(axes)]))
        if kind == Collective.ALLTOALL:
            _, i, j, axes = cop
            assert spec[i][len(spec[i]) - len(axes):] == axes
            spec = _set(spec, i, spec[i][: len(spec[i]) - len(axes)])
            return st.with_spec(_set(spec, j, spec[j] + axes))
        raise ValueError(kind)

    # --- the tail: permutation (if any) then the final allgathers ---------------
    def finish(self, st: Assignment, tail: Sequence[WeakOp]) -> Tuple[int, List[COp]]:
        dst = self.dst
        if not tail:
            if st.same_placement(self.target):
                return 0, []
            return permutation_cost(st, self.target), [(Collective.ALLPERMUTE, dst)]
        # Axes the final gathers remove must be replicated in dst.  Prefer the
        # ones the current placement already has at the minor end of that dim.
        dst_used = {a for axes in dst for a in axes}
        taken: set = set()
        chosen: List[Tuple[int, Tuple[int, ...]]] = []
        for op in tail:
            (i,) = op.dims
            cur = [a for a in reversed(st.spec[i]) if a not in dst_used and a not in taken]
            pool = cur + [a for a in range(len(self.fm.axes)) if a not in dst_used and a not in taken and a not in cur]
            combo = None
            need = sorted(op.primes)
            for c in itertools.combinations(pool, len(need)):
                if sorted(int(self.fm.sizes[a]) for a in c) == need:
                    combo = c
                    break
            assert combo is not None, "final allgathers need replicated axes of the target"
            # keep the current relative order where the axes come from st
            combo = tuple(sorted(combo, key=lambda a: (st.spec[i].index(a) if a in st.spec[i] else 99, a)))
            taken.update(combo)
            chosen.append((i, combo))
        pre = list(dst)
        for i, combo in reversed(chosen):
            pre[i] = pre[i] + combo
        pre_spec: Spec = tuple(pre)
        ops: List[COp] = []
        cost = 0
        pre_asg = Assignment(self.fm, self.shape, pre_spec, np.arange(self.fm.ndev))
        if not st.same_placement(pre_asg):
            ops.append((Collective.ALLPERMUTE, pre_spec))
            cost = permutation_cost(st, pre_asg)
        for i, combo in chosen:
            ops.append((Collective.ALLGATHER, i, combo))
        return cost, ops

    def lower(self, start: Assignment, path: Sequence[WeakOp]) -> List[COp]:
        path = merge_weak_dynslices(path)
        t = len(path)
        while t > 0 and path[t - 1].op == Collective.ALLGATHER:
            t -= 1
        prefix, tail = list(path[:t]), list(path[t:])
        best: List = [None]
        budget = [self.budget]

        def rec(k: int, st: Assignment, ops: List[COp], relabels: int) -> bool:
            if k == len(prefix):
                budget[0] -= 1
                pcost, tops = self.finish(st, tail)
                score = (pcost, relabels)
                if best[0] is None or score < best[0][0]:
                    best[0] = (score, ops + tops)
                return score == (0, 0)
            for _, cops in self.candidates(prefix[k], st):
                s = st
                for c in cops:
                    s = self.apply(s, c)
                r = relabels + sum(1 for c in cops if c[0] == Rewrite.RELABEL)
                if best[0] is not None and (0, r) >= best[0][0]:
                    continue
                if rec(k + 1, s, ops + cops, r) or budget[0] <= 0:
                    return True
            return False

        rec(0, start, [], 0)
        return best[0][1]


def permutation(st: Assignment, new: Assignment) -> Tuple[np.ndarray, np.ndarray]:
    """``(src_of, dst_of)`` of the permutation taking placement ``st`` to ``new``.

    ``src_of[r]`` is a rank that holds, under ``st``, the block rank ``r`` must
    hold under ``new``; ranks that already hold their block keep it (so they
    neither send nor receive).
    """
    ndev = st.fm.ndev
    src_of = match(new.phys_blocks(), st.phys_blocks(), st.nblocks, np.arange(ndev))
    dst_of = np.empty_like(src_of)
    dst_of[src_of] = np.arange(ndev)
    return src_of, dst_of


def permutation_cost(st: Assignment, new: Assignment) -> int:
    """Elements a permutation sends per device on average: one tile per device whose tile changes owner.

    This is Appendix B's derivation (total elements moved over the number of
    devices) with the devices that keep their tile left out, rounded up.
    """
    src_of, _ = permutation(st, new)
    movers = int(np.count_nonzero(src_of != np.arange(len(src_of))))
    return -(-st.localsize * movers // len(src_of))


def merge_weak_dynslices(path: Sequence[WeakOp]) -> List[WeakOp]:
    """Fuse each run of consecutive weak dynslices into one per dimension.

    Dynslices are free and commute, so choosing their axes jointly lets the
    lowering order them as the target does instead of in search order.
    """
    out: List[WeakOp] = []
    run: Dict[int, List[int]] = {}

    def flush():
        for i, primes in run.items():
            out.append(WeakOp(Collective.DYNSLICE, (i,), tuple(sorted(primes))))
        run.clear()

    for op in path:
        if op.op == Collective.DYNSLICE:
            run.setdefault(op.dims[0], []).extend(op.primes)
        else:
            flush()
            out.append(op)
    flush()
    return out


def merge_dynslices(ops: List[COp]) -> List[COp]:
    out: List[COp] = []
    for c in ops:
        if c[0] == Collective.DYNSLICE and out and out[-1][0] == Collective.DYNSLICE and out[-1][1] == c[1]:
            out[-1] = (Collective.DYNSLICE, c[1], out[-1][2] + c[2])
        else:
            out.append(c)
    return out


def fuse_alltoalls(ops: List[COp]) -> List[COp]:
    """Fuse back-to-back alltoalls that touch disjoint dimensions into one collective.

    Moving axes ``A1`` from dim ``i1`` to ``j1`` and ``A2`` from ``i2`` to ``j2``
    is one alltoall over the group ``A1 + A2`` (each device cuts its tile into
    ``n1 * n2`` chunks), costing one local tile instead of two -- the kind of
    multi-dimensional alltoall XLA also emits.  Runs separated by a relabel are
    not fused, since their groups live on different device maps.
    """
    out: List[COp] = []
    for c in ops:
        if c[0] == Collective.ALLTOALL:
            c = (Collective.ALLTOALL, ((c[1], c[2], c[3]),))
            if out and out[-1][0] == Collective.ALLTOALL:
                used = {d for i, j, _ in out[-1][1] for d in (i, j)}
                if not used & {c[1][0][0], c[1][0][1]}:
                    out[-1] = (Collective.ALLTOALL, out[-1][1] + c[1])
                    continue
        out.append(c)
    return out


def _match_within_classes(rank_class: np.ndarray, dev_class: np.ndarray, dev_key: np.ndarray,
                          want_key: np.ndarray, prefer: np.ndarray) -> np.ndarray:
    """A device map ``loc`` (rank -> logical device) with ``dev_class[loc[r]] == rank_class[r]`` that
    maximises the ranks with ``dev_key[loc[r]] == want_key[r]``.

    Within a class every rank wants one key and each device offers one, so
    serving wishes greedily while devices with that key are left is optimal.
    Ranks left over keep ``prefer[r]`` where it is free.
    """
    n = len(rank_class)
    loc = np.full(n, -1, dtype=np.int64)
    free: Dict[Tuple[int, int], List[int]] = {}
    for d in range(n):
        free.setdefault((int(dev_class[d]), int(dev_key[d])), []).append(d)
    taken = np.zeros(n, dtype=bool)
    for r in range(n):
        lst = free.get((int(rank_class[r]), int(want_key[r])))
        if lst:
            p = int(prefer[r])
            d = p if p in lst else lst[-1]
            lst.remove(d)
            loc[r] = d
            taken[d] = True
    rest: Dict[int, List[int]] = {}
    for d in range(n):
        if not taken[d]:
            rest.setdefault(int(dev_class[d]), []).append(d)
    for r in np.nonzero(loc < 0)[0]:
        lst = rest[int(rank_class[r])]
        p = int(prefer[r])
        d = p if p in lst else lst[-1]
        lst.remove(d)
        loc[r] = d
    return loc


def place_permutation(start: Assignment, ops: Sequence[COp]) -> List[COp]:
    """Make the one permutation move as few tiles as possible by choosing device maps that cost nothing.

    Two freedoms are used (sec. 6's device maps, applied to the permutation):

    * *after it*: the final allgathers only need each group of ranks that ends
      with one target block to hold that block's chunks, one each, in any
      order; so the placement the permutation produces may use any device map
      that keeps every rank's target block (ranks holding the chunk they would
      be sent keep it);
    * *before it*: a run of dynslices right before the permutation slices
      replicated data, and replicas may swap roles for free, so each rank can
      keep the chunk it must hold after the permutation when it has it.

    Ranks that end up already holding their tile neither send nor receive; if
    all do, the permutation is dropped.
    """
    ops = merge_dynslices(list(ops))
    k = next((n for n, c in enumerate(ops) if c[0] == Collective.ALLPERMUTE), None)
    if k is None:
        return ops
    states = [start]
    for c in ops[:k]:
        states.append(Lowering.apply(states[-1], c))
    run = k
    while run > 0 and ops[run - 1][0] == Collective.DYNSLICE:
        run -= 1
    fm, shape = start.fm, start.shape
    ndev = fm.ndev
    ident = np.arange(ndev)
    pre_spec = ops[k][1]
    dst_spec = list(pre_spec)
    for c in ops[k + 1:]:
        assert c[0] == Collective.ALLGATHER
        _, i, axes = c
        dst_spec[i] = dst_spec[i][: len(dst_spec[i]) - len(axes)]
    dst_blocks = fm.blocks(tuple(dst_spec))
    dst_class = _key(dst_blocks, tuple(fm.prod(a) for a in dst_spec))
    pre_nb = tuple(fm.prod(a) for a in pre_spec)
    pre_key = _key(fm.blocks(pre_spec), pre_nb)

    def slice_map(want: np.ndarray) -> np.ndarray:
        """Device map before the dynslice run so that rank r ends the run with block key ``want[r]``."""
        st_d = states[run]
        d_nb = st_d.nblocks
        d_key = _key(fm.blocks(st_d.spec), d_nb)
        p_spec = states[k].spec
        p_key = _key(fm.blocks(p_spec), pre_nb)
        return _match_within_classes(d_key[st_d.loc], d_key, p_key, want, st_d.loc)

    loc_d = None
    before = states[k]
    if run < k:
        loc_d = slice_map(pre_key)              # against the plain target placement first
        before = _replay(states[run], loc_d, ops[run:k])
    # device map after the permutation: classes are target blocks, keys the held pre-gather chunk
    have = _key(before.phys_blocks(), pre_nb)
    loc_pre = _match_within_classes(dst_class, dst_class, pre_key, have, ident)
    if run < k:
        loc_d = slice_map(pre_key[loc_pre])
        before = _replay(states[run], loc_d, ops[run:k])
    after = Assignment(fm, shape, pre_spec, loc_pre)
    out = list(ops[:run])
    if loc_d is not None and not np.array_equal(loc_d, states[run].loc):
        out.append((Rewrite.REMAP, loc_d))
    out += ops[run:k]
    if not before.same_placement(after):
        out.append((Collective.ALLPERMUTE, pre_spec, loc_pre))
    elif before.spec != pre_spec:
        out.append((Rewrite.RELABEL, pre_spec))       # same placement: re-describe it, nothing moves
    out += ops[k + 1:]
    return out


def _key(blocks: np.ndarray, nblocks: Sequence[int]) -> np.ndarray:
    k = np.zeros(blocks.shape[0], dtype=np.int64)
    for i, n in enumerate(nblocks):
        k = k * int(n) + blocks[:, i]
    return k


def _replay(st: Assignment, loc: np.ndarray, ops: Sequence[COp]) -> Assignment:
    st = Lowering.apply(st, (Rewrite.REMAP, loc))
    for c in ops:
        st = Lowering.apply(st, c)
    return st


def build_steps(start: Assignment, ops: Sequence[COp], itemsize: int) -> List[Step]:
    """Turn concrete ops into executable steps, computing groups against the live placement."""
    steps: List[Step] = []
    st = start
    fm = start.fm
    for cop in fuse_alltoalls(place_permutation(start, ops)):
        kind = cop[0]
        if kind in (Rewrite.RELABEL, Rewrite.REMAP):
            st = Lowering.apply(st, cop)
            continue
        if kind == Collective.ALLTOALL:
            new = st
            for i, j, axes in cop[1]:
                new = Lowering.apply(new, (Collective.ALLTOALL, i, j, axes))
            axes = tuple(a for _, _, ax in cop[1] for a in ax)
            g, m = st.groups(axes)
            dims = tuple(d for i, j, _ in cop[1] for d in (i, j))
            moves = tuple((i, j, fm.prod(ax)) for i, j, ax in cop[1])
            steps.append(Step(Collective.ALLTOALL, dims, fm.names(axes), st.tile, new.tile, st.localsize, itemsize, new, axes,
                              group_of=g, member_of=m, moves=moves, cartesian=st.is_identity()))
            st = new
            continue
        new = Lowering.apply(st, cop)
        if kind == Collective.DYNSLICE:
            _, i, axes = cop
            steps.append(Step(Collective.DYNSLICE, (i,), fm.names(axes), st.tile, new.tile, 0, itemsize, new, axes,
                              chunk_of=fm.radix(axes)[st.loc], cartesian=st.is_identity()))
        elif kind == Collective.ALLGATHER:
            axes = cop[-1]
            g, m = st.groups(axes)
            steps.append(Step(kind, (cop[1],), fm.names(axes), st.tile, new.tile, new.localsize, itemsize, new, axes,
                              group_of=g, member_of=m, cartesian=st.is_identity()))
        elif kind == Collective.ALLPERMUTE:
            # src_of[r]: a rank currently holding the block r must hold afterwards
            src_of, dst_of = permutation(st, new)
            movers = int(np.count_nonzero(src_of != np.arange(fm.ndev)))
            steps.append(Step(Collective.ALLPERMUTE, (), (), st.tile, new.tile, st.localsize, itemsize, new,
                              src_of=src_of, dst_of=dst_of, cartesian=True,
                              sent=-(-st.localsize * movers // fm.ndev)))
        st = new
    return steps


def naive_ops(src: Spec, dst: Spec) -> List[COp]:
    """Allgather every partitioned dimension, then dynslice into the target (eq. 2 of the paper)."""
    ops: List[COp] = [(Collective.ALLGATHER, i, axes) for i, axes in enumerate(src) if axes]
    ops += [(Collective.DYNSLICE, i, axes) for i, axes in enumerate(dst) if axes]
    return ops
