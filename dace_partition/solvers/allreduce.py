"""Partial results combined into the same blocks on the same ranks: one ``MPI_Allreduce`` per group of
replicas, on the sub-grid of the source's replica dimensions (the Megatron pattern: a row-split matmul
followed by a replicated consumer, or data-parallel gradients)."""
from typing import Optional

from dace.codegen.targets.cpp import sym2cpp

from ..ir import Cost, Move, MoveKind
from ..ir.boxes import volume
from .base import Solver


class AllreduceSolver(Solver):
    name = "allreduce"
    kinds = frozenset({MoveKind.ALLREDUCE})

    def refuse(self, move: Move) -> Optional[str]:
        return super().refuse(move)

    def calls(self, move: Move):
        return (f"MPI_Allreduce({move.src.pending.mpi}, grid dims {tuple(move.src.replica_dims)})", )

    def cost(self, move: Move) -> Cost:
        world = move.world
        blocks = move.src.world_blocks(world)
        p = move.src.replicas
        if blocks is None:
            return Cost(None, None, self.calls(move))
        per = tuple((2 * (p - 1) * volume(blocks[w][1]) * move.itemsize) // p if w < move.src.size else 0
                    for w in range(world))
        return Cost(per, 2 * (p - 1) * move.src.size, self.calls(move))

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        keep = sum(1 << d for d in move.src.replica_dims)
        count = " * ".join(f"(long long)({sym2cpp(s)})" for s in dst_desc.shape) or "1"
        return (f'dace_partition::{self._function(dst_desc)}("{move.array}", {move.src.grid_id}, {keep}u, '
                f"_in, _out, {count}, {move.src.pending.code});")

    def _function(self, dst_desc) -> str:
        return f"allreduce<{dst_desc.dtype.ctype}>"
