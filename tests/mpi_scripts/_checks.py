"""Checks for the scripts in this folder, which run on every rank under mpiexec: a failed check ends the
rank with a message naming it (and, through the launcher, every rank)."""
from mpi4py import MPI


def expect(cond, what):
    if not cond:
        raise SystemExit(f"rank {MPI.COMM_WORLD.rank}: {what}")


def refused(call, words):
    """``call()`` must raise ValueError whose message names every one of ``words``."""
    try:
        call()
    except ValueError as e:
        expect(all(w in str(e) for w in words), f"refusal without {words}: {e}")
        return
    raise SystemExit(f"rank {MPI.COMM_WORLD.rank}: accepted a call that names {words}")
