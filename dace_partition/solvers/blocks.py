"""The general block solver: any rectangular per-rank block, evaluated when the program runs.

Covers what the grid-mapped solver refuses: uneven tiles (ceil/floor sizes), halos and other
overlapping reads, blocks that depend on several grid coordinates, symbolic array sizes. Rank 0 sends
each rank its block with one ``MPI_Alltoallw`` (a block datatype per rank, so no packing on rank 0);
disjoint writes come back the same way. Writes that may overlap (replicated or halo writes, or
write-conflict resolution over several ranks) are gathered packed (``MPI_Gatherv``) and merged on rank 0:
with the operator for conflicted writes, by a single writer otherwise.
"""
from typing import Optional

from dace.codegen.targets.cpp import sym2cpp

from ..ir import Cost, Move, MoveKind, op_code
from ..ir.boxes import from_others, overlaps, volume
from .base import Solver, messages_between, received, scatter_gather_sizes


def _arr(vals) -> str:
    return "{" + ", ".join(f"(long long)({sym2cpp(v)})" for v in vals) + "}"


def _block_fn(subset, coords) -> str:
    """C++ lambda giving the block (start, count per dimension) of the rank at grid coordinates __c."""
    lines = ["[&](const int *__c, long long *__s, long long *__n) {"]
    for d, c in enumerate(coords):
        if c:
            lines.append(f"    const int {c} = __c[{d}];")
    for j, (b, e, _) in enumerate(subset):
        lines.append(f"    __s[{j}] = {sym2cpp(b)};")
        lines.append(f"    __n[{j}] = ({sym2cpp(e)}) - ({sym2cpp(b)}) + 1;")
    lines.append("}")
    return "\n".join(lines)


class BlockSolver(Solver):
    name = "blocks"
    box_views = True
    kinds = frozenset(MoveKind)

    def refuse(self, move: Move) -> Optional[str]:
        why = super().refuse(move)
        if why:
            return why
        for side in (move.src, move.dst):
            for j, (b, e, s) in enumerate(side.subset):
                if s != 1:
                    return f"dimension {j} is strided (step {s}); rank-local arrays hold contiguous blocks"
        return None

    @staticmethod
    def _identity_fill(move: Move) -> bool:
        """An accumulated output whose blocks overlap: every rank starts from the identity and the prior
        value stays on rank 0 (merged back by the gather)."""
        return move.kind == MoveKind.SCATTER and move.accumulates and move.dst.may_overlap()

    @staticmethod
    def _combine(move: Move) -> bool:
        return move.kind == MoveKind.GATHER and move.src.may_overlap()

    def calls(self, move: Move):
        kind = move.kind
        if kind == MoveKind.SCATTER:
            return ("identity fill (prior value added on rank 0)", ) if self._identity_fill(move) else \
                ("MPI_Alltoallw(grid, from rank 0)", )
        if kind == MoveKind.GATHER:
            if self._combine(move):
                return ("MPI_Gatherv(grid, packed)", f"merge on rank 0 ({move.op or 'one writer'})")
            return ("MPI_Alltoallw(grid, to rank 0)", )
        op = move.src.pending
        return ("MPI_Alltoallv(world, packed)", ) + ((f"combine ({op})", ) if op else ())

    def cost(self, move: Move) -> Cost:
        calls = self.calls(move)
        kind, world = move.kind, move.world
        if kind in (MoveKind.SCATTER, MoveKind.GATHER):
            blocks, sizes, first = scatter_gather_sizes(move)
            if blocks is None:
                return Cost(None, None, calls)
            g = move.grid_side
            per = [0] * world
            if kind == MoveKind.SCATTER:
                if not self._identity_fill(move):
                    for w in range(1, g.size):
                        if not (move.accumulates and not first[w]):
                            per[w] = sizes[w]
                return Cost(tuple(per), received(per), calls)
            per[0] = sum(sizes[1:g.size])
            return Cost(tuple(per), sum(1 for x in sizes[1:g.size] if x), calls)
        src, dst = move.src.world_blocks(world), move.dst.world_blocks(world)
        if src is None or dst is None:
            return Cost(None, None, calls)
        partial = move.src.partial
        senders = [True] * world
        if not partial:  # identical source blocks (replicas) send once
            seen = set()
            for w in range(world):
                if volume(src[w][1]) > 0:
                    senders[w] = src[w] not in seen
                    seen.add(src[w])
        got = from_others(overlaps(src, dst), senders)
        per = tuple(int(got[me]) * move.itemsize for me in range(world))
        return Cost(per, messages_between(src, dst, senders), calls)

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        kind = move.kind
        if kind not in (MoveKind.SCATTER, MoveKind.GATHER):
            return self._emit_redistribute(move, src_desc, dst_desc)
        g = move.grid_side
        gdesc, ldesc = (src_desc, dst_desc) if kind == MoveKind.SCATTER else (dst_desc, src_desc)
        fn = _block_fn(g.subset, g.coords)
        nd = len(g.subset)
        decl = (f"const long long __gshape[] = {_arr(gdesc.shape)}; const long long __gstr[] = {_arr(gdesc.strides)};\n"
                f"const long long __lshape[] = {_arr(ldesc.shape)}; const long long __lstr[] = {_arr(ldesc.strides)};\n")
        ctype = gdesc.dtype.ctype
        op = op_code(move.op)
        if kind == MoveKind.SCATTER:
            fill = 1 if self._identity_fill(move) else 0
            call = (f'dace_partition::scatter_blocks<{ctype}>({g.grid_id}, "{move.array}", _in, _out, {nd}, '
                    f"__gshape, __gstr, __lshape, __lstr, {fn}, {fill}, {op});")
        else:
            combine = 1 if self._combine(move) else 0
            acc = 1 if move.accumulates else 0
            call = (f'dace_partition::gather_blocks<{ctype}>({g.grid_id}, "{move.array}", _in, _out, {nd}, '
                    f"__gshape, __gstr, __lshape, __lstr, {fn}, {op}, {combine}, {acc});")
        return "{\n" + decl + call + "\n}"

    def _emit_redistribute(self, move: Move, src_desc, dst_desc) -> str:
        """Grid -> grid without rank 0 (``redistribute`` in the runtime header); partial results are
        combined on arrival."""
        src_fn = _block_fn(move.src.subset, move.src.coords)
        dst_fn = _block_fn(move.dst.subset, move.dst.coords)
        function, tail = self._redistribute(move, dst_desc)
        return ("{\n" f"const long long __sstr[] = {_arr(src_desc.strides)};\n"
                f"const long long __dshape[] = {_arr(dst_desc.shape)}; const long long __dstr[] = {_arr(dst_desc.strides)};\n"
                f'dace_partition::{function}("{move.array}", {len(move.dst.subset)}, '
                f"{move.src.grid_id}, {src_fn}, _in, __sstr, {move.dst.grid_id}, {dst_fn}, _out, __dshape, __dstr{tail});\n}}")

    def _redistribute(self, move: Move, dst_desc):
        """The runtime function of a grid-to-grid move, and its arguments after the buffers."""
        return f"redistribute<{dst_desc.dtype.ctype}>", f", {op_code(move.src.pending)}"
