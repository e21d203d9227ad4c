"""A third-party solver, as another package would ship it: grid-to-grid moves with point-to-point
``MPI_Isend``/``MPI_Irecv`` between the ranks whose blocks intersect (one message per pair). It only
knows the public interface (``dace_partition.Solver``, ``Move``, ``Cost``); tests install it under the
``dace_partition.solvers`` entry point."""
from dace.codegen.targets.cpp import sym2cpp

from dace_partition.ir import Cost, Move, MoveKind
from dace_partition.ir.boxes import intersection, volume
from dace_partition.solvers.base import Solver


def _pairs(move: Move):
    """(sender, receiver, start, count) of every non-empty intersection; identical source blocks
    (replicas) send once."""
    world = move.world
    src, dst = move.src.world_blocks(world), move.dst.world_blocks(world)
    out = []
    for w in range(world):
        if volume(src[w][1]) == 0 or any(src[v] == src[w] for v in range(w)):
            continue
        for q in range(world):
            n = intersection(src[w], dst[q])
            if n:
                start = tuple(max(a, b) for a, b in zip(src[w][0], dst[q][0]))
                count = tuple(min(a + m, b + k) - max(a, b)
                              for a, m, b, k in zip(src[w][0], src[w][1], dst[q][0], dst[q][1]))
                out.append((w, q, start, count))
    return out


def _ints(xs) -> str:
    return "{" + ", ".join(str(int(x)) for x in xs) + "}"


class P2PSolver(Solver):
    name = "p2p"
    kinds = frozenset({MoveKind.REDISTRIBUTE})

    def refuse(self, move: Move):
        why = super().refuse(move)
        if why:
            return why
        if move.src.partial:
            return "moves final values only"
        if move.src.world_blocks(move.world) is None or move.dst.world_blocks(move.world) is None:
            return "needs blocks known before run time"
        return None

    def cost(self, move: Move) -> Cost:
        per = [0] * move.world
        msgs = 0
        for w, q, _, count in _pairs(move):
            if w != q:
                per[q] += volume(count) * move.itemsize
                msgs += 1
        return Cost(tuple(per), msgs, ("MPI_Isend/MPI_Irecv(neighbours)", ))

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        world, nd = move.world, len(move.dst.subset)
        pairs = _pairs(move)
        src, dst = move.src.world_blocks(world), move.dst.world_blocks(world)
        ctype = dst_desc.dtype.ctype
        return f"""{{
    const int K = {len(pairs)}, ND = {nd};
    static const int frm[] = {_ints([p[0] for p in pairs] or [0])}, to[] = {_ints([p[1] for p in pairs] or [0])};
    static const long long box0[] = {_ints([x for p in pairs for x in p[2]] or [0])};
    static const long long boxn[] = {_ints([x for p in pairs for x in p[3]] or [0])};
    static const long long s0[] = {_ints([x for b in src for x in b[0]])}, d0[] = {_ints([x for b in dst for x in b[0]])};
    const long long sstr[] = {{{", ".join(f"(long long)({sym2cpp(s)})" for s in src_desc.strides)}}};
    const long long dstr[] = {{{", ".join(f"(long long)({sym2cpp(s)})" for s in dst_desc.strides)}}};
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    // visits every element of box k: global index -> offset in a local buffer holding the block at `origin`
    auto walk = [&](int k, const long long *origin, const long long *str, auto fn) {{
        long long idx[ND > 0 ? ND : 1] = {{0}}, n = 1;
        for (int d = 0; d < ND; ++d) n *= boxn[k * ND + d];
        for (long long e = 0; e < n; ++e) {{
            long long off = 0;
            for (int d = 0; d < ND; ++d) off += (box0[k * ND + d] + idx[d] - origin[d]) * str[d];
            fn(e, off);
            for (int d = ND - 1; d >= 0; --d) {{ if (++idx[d] < boxn[k * ND + d]) break; idx[d] = 0; }}
        }}
    }};
    auto volume = [&](int k) {{ long long n = 1; for (int d = 0; d < ND; ++d) n *= boxn[k * ND + d]; return n; }};
    std::vector<std::vector<{ctype}>> bufs(K);
    std::vector<MPI_Request> reqs;
    for (int k = 0; k < K; ++k) if (to[k] == me && frm[k] != me) {{
        bufs[k].resize(volume(k)); reqs.emplace_back();
        MPI_Irecv(bufs[k].data(), (int)(volume(k) * sizeof({ctype})), MPI_BYTE, frm[k], 4242, MPI_COMM_WORLD, &reqs.back());
    }}
    for (int k = 0; k < K; ++k) if (frm[k] == me && to[k] != me) {{
        bufs[k].resize(volume(k));
        walk(k, s0 + me * ND, sstr, [&](long long e, long long off) {{ bufs[k][e] = _in[off]; }});
        reqs.emplace_back();
        MPI_Isend(bufs[k].data(), (int)(volume(k) * sizeof({ctype})), MPI_BYTE, to[k], 4242, MPI_COMM_WORLD, &reqs.back());
    }}
    for (int k = 0; k < K; ++k) if (frm[k] == me && to[k] == me) {{
        std::vector<{ctype}> tmp(volume(k));
        walk(k, s0 + me * ND, sstr, [&](long long e, long long off) {{ tmp[e] = _in[off]; }});
        walk(k, d0 + me * ND, dstr, [&](long long e, long long off) {{ _out[off] = tmp[e]; }});
    }}
    MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE);
    for (int k = 0; k < K; ++k) if (to[k] == me && frm[k] != me)
        walk(k, d0 + me * ND, dstr, [&](long long e, long long off) {{ _out[off] = bufs[k][e]; }});
}}"""
