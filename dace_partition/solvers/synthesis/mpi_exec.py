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

A step's sub-communicator is split on first use from a
:class:`~dace_partition.solvers.communicators.Communicators` (a private duplicate of the caller's
communicator), keyed by the step's groups, so steps with the same groups share it. Pass a
``Communicators`` instead of the communicator to keep them across calls (running a plan again then makes
only its collectives; free it on every rank when done); a plain communicator gets its own for the call,
freed before it returns.
"""
from __future__ import annotations

import numpy as np

from ..communicators import Communicators
from .simulate import join_chunks, split_chunks
from .types import Collective


def _group(comms: Communicators, step, r):
    key = ("synthesis", tuple(int(g) for g in step.group_of), tuple(int(m) for m in step.member_of))
    return comms.split(key, int(step.group_of[r]), int(step.member_of[r]))


def execute(plan, comm, local_tile: np.ndarray) -> np.ndarray:
    """Runs ``plan`` on ``comm`` (an mpi4py communicator, or a :class:`Communicators` the caller keeps)."""
    with Communicators.of(comm) as comms:
        return _execute(plan, comms, local_tile)


def _execute(plan, comms: Communicators, local_tile: np.ndarray) -> np.ndarray:
    if comms.Get_size() != plan.mesh.size:
        raise ValueError(f"communicator has {comms.Get_size()} ranks, mesh {plan.mesh} needs {plan.mesh.size}")
    r = comms.Get_rank()
    tile = np.ascontiguousarray(local_tile)
    if tuple(tile.shape) != tuple(plan.initial.tile):
        raise ValueError(f"rank {r}: local tile has shape {tile.shape}, source layout needs {plan.initial.tile}")
    for step in plan.steps:
        if step.op == Collective.DYNSLICE:
            (d,) = step.dims
            tile = np.ascontiguousarray(np.split(tile, step.n, axis=d)[int(step.chunk_of[r])])
        elif step.op in (Collective.ALLGATHER, Collective.ALLTOALL):
            n = step.n
            sub = _group(comms, step, r)
            if step.op == Collective.ALLGATHER:
                (d,) = step.dims
                recv = np.empty((n,) + tile.shape, dtype=tile.dtype)
                sub.Allgather(tile, recv)
                tile = np.concatenate(list(recv), axis=d) if d else recv.reshape((-1,) + tile.shape[1:])
            else:
                send = np.ascontiguousarray(np.stack(split_chunks(tile, step.moves)))
                recv = np.empty_like(send)
                sub.Alltoall(send, recv)
                tile = np.ascontiguousarray(join_chunks(list(recv), step.moves))
        elif step.op == Collective.ALLPERMUTE:
            dest, src = int(step.dst_of[r]), int(step.src_of[r])
            if dest != r or src != r:
                out = np.empty_like(tile)
                comms.comm.Sendrecv(tile, dest=dest, sendtag=77, recvbuf=out, source=src, recvtag=77)
                tile = out
        else:
            raise ValueError(step.op)
    return tile
