"""``Communicators``: the sub-communicators the mpi4py executors (``synthesis.mpi_exec``,
``reduction.mpi_exec``) split from one communicator, owned by one object with an explicit lifetime.

The caller's communicator is duplicated once (``comm.Dup()``, as Heat does), so the executors' messages
never match a message of the caller's and freeing them never touches the caller's communicator. A
sub-communicator is split from the duplicate on first use under a key and kept until :meth:`free`, so a
caller that runs plans again (a benchmark, a training loop) holds one ``Communicators`` and passes it to
every call instead of the communicator; a call given a plain communicator makes its own and frees them
before it returns. Nothing is kept in module state, so nothing outlives its owner or is keyed by
``id()``.

Making and freeing communicators is collective: every rank of the communicator creates the object,
splits the same keys in the same order (a key must therefore be the same on every rank: it describes
the groups, not this rank's place in them) and frees it. mpi4py is imported lazily.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Hashable


class Communicators:
    """A private duplicate of ``comm`` and the sub-communicators split from it (collective)."""

    def __init__(self, comm):
        if isinstance(comm, Communicators):
            raise TypeError("Communicators(comm) takes an mpi4py communicator; pass the Communicators itself")
        self.parent = comm
        self.comm = comm.Dup()
        self._subs: Dict[Hashable, object] = {}

    @classmethod
    @contextmanager
    def of(cls, comm):
        """The communicators for one executor call: ``comm`` itself if it is a ``Communicators`` (the
        caller's, kept), else new ones for ``comm``, freed when the call ends."""
        if isinstance(comm, Communicators):
            yield comm
            return
        own = cls(comm)
        try:
            yield own
        finally:
            own.free()

    def Get_size(self) -> int:  # noqa: N802 - the mpi4py name, so a Communicators reads like a communicator
        return self.comm.Get_size()

    def Get_rank(self) -> int:  # noqa: N802
        return self.comm.Get_rank()

    def split(self, key: Hashable, color: int, position: int):
        """The sub-communicator of ``key`` (the same on every rank), split on first use with this rank's
        ``color`` (``MPI.UNDEFINED``: in no group, ``MPI.COMM_NULL`` is returned) and ``position``."""
        if self.comm is None:
            raise ValueError("these communicators were freed")
        sub = self._subs.get(key)
        if sub is None:
            sub = self._subs[key] = self.comm.Split(color, position)
        return sub

    def __len__(self) -> int:
        return len(self._subs)

    def free(self):
        """Frees every sub-communicator and the duplicate (collective; idempotent)."""
        if self.comm is None:
            return
        from mpi4py import MPI
        for sub in self._subs.values():
            if sub != MPI.COMM_NULL:
                sub.Free()
        self._subs.clear()
        self.comm.Free()
        self.comm = None

    def __enter__(self) -> "Communicators":
        return self

    def __exit__(self, *exc):
        self.free()
        return False
