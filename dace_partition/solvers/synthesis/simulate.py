"""Reference simulator: run a plan on NumPy tiles of a real global array.

Every rank's tile is checked after every step against the placement the step
promises (base offsets of the type under the current device map), so a plan
that moves the wrong data fails here rather than later under MPI.
"""
from __future__ import annotations

from typing import List

import numpy as np

from .factor_mesh import Assignment
from .types import Collective


class SimulationError(AssertionError):
    pass


def split_chunks(tile: np.ndarray, moves) -> List[np.ndarray]:
    """Cut a tile for an alltoall: chunk ``k`` (mixed radix over the moves) goes to group member ``k``."""
    pieces = [tile]
    for _, j, n in moves:
        pieces = [c for p in pieces for c in np.split(p, n, axis=j)]
    return pieces


def join_chunks(pieces: List[np.ndarray], moves) -> np.ndarray:
    """Inverse layout on the receiver: the piece from member ``m`` lands at block ``m`` of the source dims."""
    for i, _, n in reversed(moves):
        pieces = [np.concatenate(pieces[k:k + n], axis=i) for k in range(0, len(pieces), n)]
    (out,) = pieces
    return out


def tiles_of(asg: Assignment, global_array: np.ndarray) -> List[np.ndarray]:
    """The tile each physical rank holds under ``asg``."""
    tile = asg.tile
    out = []
    for off in asg.offsets():
        idx = tuple(slice(int(o), int(o) + t) for o, t in zip(off, tile))
        out.append(global_array[idx])
    return out


def check_tiles(asg: Assignment, tiles: List[np.ndarray], global_array: np.ndarray, where: str) -> None:
    want = tiles_of(asg, global_array)
    for r, (have, exp) in enumerate(zip(tiles, want)):
        if have.shape != exp.shape:
            raise SimulationError(f"{where}: rank {r} holds shape {have.shape}, type says {exp.shape}")
        if not np.array_equal(have, exp):
            raise SimulationError(f"{where}: rank {r} holds the wrong data")


def simulate(plan, global_array: np.ndarray, check_each: bool = True, check: bool = True) -> List[np.ndarray]:
    global_array = np.asarray(global_array)
    if tuple(global_array.shape) != tuple(plan.shape):
        raise ValueError(f"global array has shape {global_array.shape}, plan is for {plan.shape}")
    do_check = check and check_each
    if do_check:
        pass
    tiles = [t.copy() for t in tiles_of(plan.initial, global_array)]
    ndev = len(tiles)
    for k, step in enumerate(plan.steps):
        if step.op == Collective.DYNSLICE:
            (d,) = step.dims
            n = step.n
            tiles = [np.split(t, n, axis=d)[int(step.chunk_of[r])].copy() for r, t in enumerate(tiles)]
        elif step.op == Collective.ALLGATHER:
            (d,) = step.dims
            new = [None] * ndev
            for g in np.unique(step.group_of):
                ranks = np.nonzero(step.group_of == g)[0]
                ranks = ranks[np.argsort(step.member_of[ranks])]
                full = np.concatenate([tiles[r] for r in ranks], axis=d)
                for r in ranks:
                    new[r] = full.copy()
            tiles = new
        elif step.op == Collective.ALLTOALL:
            new = [None] * ndev
            for g in np.unique(step.group_of):
                ranks = np.nonzero(step.group_of == g)[0]
                ranks = ranks[np.argsort(step.member_of[ranks])]
                chunks = [split_chunks(tiles[r], step.moves) for r in ranks]
                for k2, r in enumerate(ranks):
                    new[r] = join_chunks([chunks[m][k2] for m in range(len(ranks))], step.moves)
            tiles = new
        elif step.op == Collective.ALLPERMUTE:
            tiles = [tiles[int(step.src_of[r])].copy() for r in range(ndev)]
        else:
            raise ValueError(step.op)
        if do_check:
            check_tiles(step.after, tiles, global_array, f"after step {k} ({step.op})")
    return tiles
