"""MPI executor: run a plan with mpi4py, one tile per rank.

Allgather and alltoall run over sub-communicators made with ``Comm.Split``
(colour = the step's group, key = position in it), which for steps on a
plain sub-mesh is exactly the communicator ``Cart_sub`` would give.  The
moved dimension is brought outermost by a local stack/concatenate (the local
transposes), dynslice is a local copy, and the permutation is one
``Sendrecv`` per rank (ranks that keep their tile skip it).  A fused alltoall
(``len(step.moves) > 1``) is still one ``Alltoall`` over the product of its
axes: each rank cuts its tile into chunks over all target dimensions at once
(mixed radix, first move major) and reassembles the received chunks along all
source dimensions.  mpi4py is imported lazily so the package does not
depend on it.

A step's sub-communicator is split at its first execution on a communicator and
cached (keyed by the step object, which the cache keeps alive, and the
communicator), so running a plan again makes only its collectives;
:func:`free_groups` frees them (every rank must call it, like ``Comm.Free``).
"""
from __future__ import annotations

import numpy as np

from .simulate import join_chunks, split_chunks


_GROUPS = {}  # (id(step), id(comm)) -> (step, comm, sub-communicator), oldest first
_MAX_GROUPS = 64  # beyond this the oldest is freed (same order on every rank), so context ids never run out


def _group(comm, step, r):
    key = (id(step), id(comm))
    hit = _GROUPS.get(key)
    if hit is not None and hit[0] is step and hit[1] is comm:
        return hit[2]
    sub = comm.Split(int(step.group_of[r]), int(step.member_of[r]))
    if len(_GROUPS) >= _MAX_GROUPS:
        old = next(iter(_GROUPS))
        _GROUPS.pop(old)[2].Free()
    _GROUPS[key] = (step, comm, sub)
    return sub


def free_groups():
    """Frees every cached sub-communicator (collective: call it on every rank)."""
    for _, _, sub in _GROUPS.values():
        sub.Free()
    _GROUPS.clear()


def execute(plan, comm, local_tile: np.ndarray) -> np.ndarray:
    if comm.Get_size() != plan.mesh.size:
        raise ValueError(f"communicator has {comm.Get_size()} ranks, mesh {plan.mesh} needs {plan.mesh.size}")
    r = comm.Get_rank()
    tile = np.ascontiguousarray(local_tile)
    if tuple(tile.shape) != tuple(plan.initial.tile):
        raise ValueError(f"rank {r}: local tile has shape {tile.shape}, source layout needs {plan.initial.tile}")
    for step in plan.steps:
        if step.op == "dynslice":
            (d,) = step.dims
            tile = np.ascontiguousarray(np.split(tile, step.n, axis=d)[int(step.chunk_of[r])])
        elif step.op in ("allgather", "alltoall"):
            n = step.n
            sub = _group(comm, step, r)
            if step.op == "allgather":
                (d,) = step.dims
                recv = np.empty((n,) + tile.shape, dtype=tile.dtype)
                sub.Allgather(tile, recv)
                tile = np.concatenate(list(recv), axis=d) if d else recv.reshape((-1,) + tile.shape[1:])
            else:
                send = np.ascontiguousarray(np.stack(split_chunks(tile, step.moves)))
                recv = np.empty_like(send)
                sub.Alltoall(send, recv)
                tile = np.ascontiguousarray(join_chunks(list(recv), step.moves))
        elif step.op == "allpermute":
            dest, src = int(step.dst_of[r]), int(step.src_of[r])
            if dest != r or src != r:
                out = np.empty_like(tile)
                comm.Sendrecv(tile, dest=dest, sendtag=77, recvbuf=out, source=src, recvtag=77)
                tile = out
        else:
            raise ValueError(step.op)
    return tile
