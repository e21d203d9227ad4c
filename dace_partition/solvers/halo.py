"""The halo solver: a redistribution between two block layouts of the same grid in which every rank
needs only borders of its grid neighbours' blocks (a shifted stencil read, a block plus halo).

Why a solver and not a new :class:`~dace_partition.ir.MoveKind`: a halo exchange moves the same thing as
any other REDISTRIBUTE (a destination block filled from source blocks); what differs is only the pattern
of who talks to whom, which is a property of the two distributions that a solver can test, exactly as the
synthesized solver tests "block layouts of one mesh". A new kind would have to be derived by every
consumer of ``Move.kind`` (report, ``minimum``, the other solvers) for no change in meaning, and a
plug-in that already serves REDISTRIBUTE would silently stop seeing these moves.

Implementation (``dace_partition_halo.h``): one ``MPI_Irecv`` per neighbour whose source block meets this
rank's destination block and one ``MPI_Isend`` per neighbour that needs part of this rank's block, each a
derived datatype on the rank-local buffer (strided faces are not packed), the part the rank already holds
copied locally while the messages are in flight. Set up once per call site. ``cost`` is exactly the
bytes each rank receives from other ranks (the local part is a copy), which the PMPI counter measures.

Between buffers in GPU memory the GPU lowering uses ``halo_packed`` instead (``solvers/device.py``).
"""
from typing import Optional

import dace.library
import numpy as np

from ..ir import Cost, Distribution, Move, MoveKind
from ..ir.boxes import contains, overlaps
from ..ir.relations import bound_shifts, disjoint_tiles
from ..runtime.environment import DacePartitionMPI
from .base import Solver
from .blocks import _arr, _block_fn


@dace.library.environment
class DacePartitionHalo(DacePartitionMPI):
    """The MPI build settings plus the halo header (MPI itself is set up by DacePartitionMPI's init code,
    so this one adds none)."""
    headers = ["mpi.h", "dace_partition_runtime.h", "dace_partition_halo.h"]
    init_code = ""


def _split_grid(d: Distribution):
    return [g for g in d.grid if g > 1]


class HaloSolver(Solver):
    name = "halo"
    box_views = True
    kinds = frozenset({MoveKind.REDISTRIBUTE})
    environments = [DacePartitionHalo]

    def refuse(self, move: Move) -> Optional[str]:
        why = super().refuse(move)
        if why:
            return why
        src, dst = move.src, move.dst
        if src.partial:
            return "moves final values, not partial results"
        if _split_grid(src) != _split_grid(dst) or src.size != dst.size:
            return f"needs the same grid on both sides (source {src.grid}, destination {dst.grid})"
        if src.replicas > 1:
            return "the source is replicated (each element has several holders)"
        for side in (src, dst):
            if any(s != 1 for _, _, s in side.subset):
                return "strided subsets are not blocks"
        if src.splits != dst.splits:
            return "source and destination split different array dimensions"
        a, b = src.blocks(), dst.blocks()
        if a is None or b is None:
            if not disjoint_tiles(src):
                return "source blocks may overlap (an element would arrive twice)"
            if bound_shifts(src, dst) is None:
                return "blocks known only at run time and not a constant shift of the source's tiling"
            return None
        if all(contains(a[r], b[r]) for r in range(len(b))):
            return None  # a copy on every rank
        if src.may_overlap():
            return "source blocks overlap (an element would arrive twice)"
        needs = overlaps(a, b).T > 0  # [me, q]: every pair at once (P^2 pairs)
        np.fill_diagonal(needs, False)
        pairs = np.argwhere(needs)  # ordered by me, then q
        at = np.stack(np.unravel_index(np.arange(len(a)), src.grid), axis=1)  # row-major grid coordinates
        far = pairs[np.abs(at[pairs[:, 0]] - at[pairs[:, 1]]).max(axis=1, initial=0) > 1]
        if len(far):
            me, q = (int(x) for x in far[0])
            return (f"rank {me} needs elements of rank {q}, which is not its grid neighbour "
                    f"(coordinates {tuple(int(x) for x in at[me])} and {tuple(int(x) for x in at[q])})")
        return None

    def cost(self, move: Move) -> Cost:
        calls = ("MPI_Isend/MPI_Irecv(grid neighbours, derived datatypes)", )
        world = move.world
        src, dst = move.src.world_blocks(world), move.dst.world_blocks(world)
        if src is None or dst is None:
            return Cost(None, None, calls)
        m = overlaps(src, dst)
        np.fill_diagonal(m, 0)
        for me in range(world):
            if contains(src[me], dst[me]):
                m[:, me] = 0  # its own block has everything (the executor's rule)
        per = tuple(int(x) * move.itemsize for x in m.sum(axis=0))
        return Cost(per, int((m > 0).sum()), calls)

    def _function(self, dst_desc) -> str:
        return f"halo_exchange<{dst_desc.dtype.ctype}>"

    def emit(self, move: Move, src_desc, dst_desc) -> str:
        src_fn = _block_fn(move.src.subset, move.src.coords)
        dst_fn = _block_fn(move.dst.subset, move.dst.coords)
        return ("{\n" f"const long long __sstr[] = {_arr(src_desc.strides)};\n"
                f"const long long __dshape[] = {_arr(dst_desc.shape)}; const long long __dstr[] = {_arr(dst_desc.strides)};\n"
                f'dace_partition::{self._function(dst_desc)}("{move.array}", {len(move.dst.subset)}, '
                f"{move.src.grid_id}, {src_fn}, _in, __sstr, {move.dst.grid_id}, {dst_fn}, _out, __dshape, __dstr);\n}}")
