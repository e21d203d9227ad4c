"""Measures the bytes a lowered program really passes to MPI, to check the partitioner's cost model
against what the generated code does.

The measurement is a PMPI interposition library (``runtime/pmpi_count.c``) preloaded into every rank with
``LD_PRELOAD``: the DaCe-built library and mpi4py then both call its ``MPI_*`` wrappers, which count and
forward to ``PMPI_*``. Because mpi4py's own traffic (the input metadata broadcast, gathering the results)
goes through the same wrappers, the worker (:mod:`dace_partition.runtime._count_worker`) resets the counters right
before calling the compiled program and reads them right after, before any other MPI call.

The counting model is "bytes this rank receives from other ranks, as the call's arguments describe it"
(p = communicator size, me = rank in it, size = ``MPI_Type_size``):

=========================  ==========================================================================
Scatter(v), Bcast          non-root: recvcount * size (Bcast: count * size); root: 0
Gather(v)                  root: sum over q != root of recvcounts[q] * size; others: 0
Reduce                     root: (p - 1) * count * size; others: 0
Allreduce                  every rank: 2 (p - 1) count size // p (the allreduce bandwidth lower bound)
Reduce_scatter_block       (p - 1) * recvcount * size
Alltoall, Allgather        (p - 1) * recvcount * size
Alltoallv/w, Allgatherv    sum over q != me of recvcounts[q] * size (Alltoallw: size(recvtypes[q]))
Sendrecv                   recvcount * size unless source is me or MPI_PROC_NULL
Recv, Irecv                count * size (an upper bound); Send, Isend: 0, counted as "sent" instead
=========================  ==========================================================================

Each of these calls also adds the wall seconds spent inside it (``PMPI_Wtime`` before and after) to the
rank's MPI time; ``MPI_Wait``/``Waitall``/``Waitany``/``Waitsome`` are wrapped for their time only (the
completion of ``Isend``/``Irecv``). A collective's time includes waiting for ranks that reach it late,
unless the environment variable ``DP_PMPI_SYNC=1`` reaches the ranks: then a barrier on the communicator
precedes each collective, outside its timed part (its own seconds are ``sync_seconds``), and a collective's
time is its transfer's. Point-to-point calls are not synchronised.

The large-count variants (``MPI_X_c``) are counted under ``MPI_X``.
"""
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict


from .launch import RunError, launch, mpi_environment

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pmpi_count.c")


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dace_partition", "pmpi")


def _mpicc() -> str:
    local = os.path.join(os.path.dirname(sys.executable), "mpicc")
    exe = local if os.path.exists(local) else shutil.which("mpicc", path=mpi_environment().get("PATH"))
    if exe is None:
        raise RunError("no mpicc found: install the 'mpich' extra or put an MPI compiler wrapper on PATH")
    return exe


def build_counter() -> str:
    """Compiles the PMPI shim once and returns the path of the shared library.

    The result is cached under the user cache directory keyed by a hash of the source *and* of the mpicc
    used, since the shim must be built against the very MPI the ranks load (the PMPI symbols and the
    handle types differ between implementations). Building goes to a temporary name and is renamed into
    place, so concurrent builders never see a half-written library.
    """
    mpicc = _mpicc()
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha1(source + os.path.realpath(mpicc).encode()).hexdigest()[:16]
    folder = _cache_dir()
    target = os.path.join(folder, f"libdp_pmpi_count_{key}.so")
    if os.path.exists(target):
        return target
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build_", suffix=".so", dir=folder)
    os.close(fd)
    try:
        proc = subprocess.run([mpicc, "-shared", "-fPIC", "-O2", "-o", tmp, SOURCE], env=mpi_environment(),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RunError(f"compiling the PMPI counter failed:\n{proc.stderr[-3000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def parse_report(text: str) -> Dict[str, tuple]:
    """``{name: (calls, bytes received)}`` from the shim's ``name calls bytes sent [seconds]`` lines."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            name, calls, received = line.split()[:3]
            out[name] = (int(calls), int(received))
    return out


def parse_seconds(text: str) -> Dict[str, float]:
    """``{name: wall seconds inside the calls}`` from the shim's ``name calls bytes sent seconds`` lines
    (a line of four columns, from a shim older than the timing, gives nothing)."""
    out = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 5:
            out[cols[0]] = float(cols[4])
    return out


class Counter:
    """The preloaded shim's counters in this process (raises if the shim is not interposed)."""

    def __init__(self, path=None):
        # CDLL(None) searches the global scope, where an LD_PRELOADed library sits; dlopen of the same
        # path returns the already loaded copy, so both see the counters the MPI wrappers update.
        lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
        try:
            self._reset = lib.dp_pmpi_reset
        except AttributeError:
            raise RunError("the PMPI counter is not loaded in this process (LD_PRELOAD missing?)") from None
        for name in ("dp_pmpi_bytes", "dp_pmpi_sent", "dp_pmpi_calls", "dp_pmpi_wait_calls"):
            getattr(lib, name).restype = ctypes.c_longlong
        for name in ("dp_pmpi_seconds", "dp_pmpi_wait_seconds", "dp_pmpi_sync_seconds"):
            getattr(lib, name).restype = ctypes.c_double
        self._lib = lib
        lib.dp_pmpi_report.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.dp_pmpi_report.restype = ctypes.c_int

    def reset(self):
        self._reset()

    def bytes(self) -> int:
        return int(self._lib.dp_pmpi_bytes())

    def sent(self) -> int:
        return int(self._lib.dp_pmpi_sent())

    def calls(self) -> int:
        return int(self._lib.dp_pmpi_calls())

    def seconds(self) -> float:
        """Wall seconds this process spent inside the wrapped MPI calls (traffic calls and MPI_Wait*)."""
        return float(self._lib.dp_pmpi_seconds())

    def wait_seconds(self) -> float:
        """Of :meth:`seconds`, the part inside MPI_Wait, MPI_Waitall, MPI_Waitany and MPI_Waitsome."""
        return float(self._lib.dp_pmpi_wait_seconds())

    def sync_seconds(self) -> float:
        """Seconds in the barriers that ``DP_PMPI_SYNC=1`` puts before each collective (in no other total)."""
        return float(self._lib.dp_pmpi_sync_seconds())

    def report_text(self) -> str:
        """The shim's ``name calls bytes sent seconds`` lines."""
        size = 1024
        while True:
            buf = ctypes.create_string_buffer(size)
            need = self._lib.dp_pmpi_report(buf, size)
            if need < 0:
                raise RunError("the PMPI counter could not format its report")
            if need < size:
                return buf.value.decode()
            size = need + 1

    def report(self) -> Dict[str, tuple]:
        return parse_report(self.report_text())

    def setup(self) -> Dict[str, int]:
        """``{name: calls}`` of the set-up calls since the last reset (MPI_Comm_split, MPI_Comm_dup,
        MPI_Comm_create, MPI_Cart_create, MPI_Cart_sub, MPI_Type_commit): counted apart from the traffic,
        in none of the totals above."""
        fn = self._lib.dp_pmpi_setup_report
        fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fn.restype = ctypes.c_int
        size = 1024
        while True:
            buf = ctypes.create_string_buffer(size)
            need = fn(buf, size)
            if need < 0:
                raise RunError("the PMPI counter could not format its set-up report")
            if need < size:
                break
            size = need + 1
        out = {}
        for line in buf.value.decode().splitlines():
            if line.strip():
                name, calls = line.split()
                out[name] = int(calls)
        return out

    def snapshot(self) -> dict:
        """All counters at once: read before any other MPI call, so nothing else leaks in."""
        return {"bytes": self.bytes(), "sent": self.sent(), "seconds": self.seconds(),
                "wait_seconds": self.wait_seconds(), "sync_seconds": self.sync_seconds(), "report": self.report_text()}


def count_run(sdfg, ranks: int, timeout: float = 300, repeat: int = 1, launcher=None, sync: bool = False,
              **inputs) -> dict:
    """Runs a lowered SDFG like :func:`dace_partition.run`, counting each rank's MPI traffic and the time
    it spends in MPI.

    Returns ``{"bytes": [received bytes per rank], "sent": [sent bytes per rank], "calls": [per rank
    {name: (calls, bytes)}], "mpi_seconds": [wall seconds per rank inside the wrapped MPI calls],
    "wait_seconds": [of those, seconds per rank in MPI_Wait*], "seconds_by_call": [per rank {name:
    seconds}], "outputs": <what run() returns>}``. Only the compiled program's own calls are counted (its
    initialization on first call included); the launcher's own traffic (the metadata broadcast, input
    checks, gathering outputs and counters) is not. Programs lowered with ``io="distributed"`` work too: as
    with ``run``, each rank is given its tiles of the whole inputs.

    ``repeat``: calls of the program in the one launch (default 1). The counts above are those of the first
    call; ``"per_call"`` then adds, per call, ``{"bytes", "mpi_seconds", "wait_seconds"}`` lists over
    ranks, so that a caller can take the best of the later calls (the first one also sets up
    connections). With ``repeat > 1`` the outputs are those after the last call: a program that updates an
    argument in place goes on from the previous call's values. ``launcher``: as ``dace_partition.run``'s.

    ``sync``: a barrier before each collective, outside its timed part (``DP_PMPI_SYNC=1``, module
    docstring), so that ``mpi_seconds`` holds the transfers and not the waiting for late ranks; the
    barriers' seconds are ``"sync_seconds"`` (and in ``"per_call"``). The program is slower for it.
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
    shim = build_counter()

    def collect(tmp):
        with open(os.path.join(tmp, "counts.json")) as f:
            return json.load(f)

    # LD_PRELOAD is set per rank through env(1), not on the launcher: mpiexec (or srun) itself then
    # does not load MPI, and the setting survives launchers that do not forward the environment.
    prefix = ["env", f"LD_PRELOAD={shim}"] + ([f"DP_PMPI_REPEAT={repeat}"] if repeat > 1 else []) + \
        (["DP_PMPI_SYNC=1"] if sync else [])
    outputs, counts = launch(sdfg, ranks, timeout, inputs, "dace_partition.runtime._count_worker", prefix, collect,
                             "count_run()", launcher=launcher)
    first = [c[0] for c in counts]
    res = {"bytes": [c["bytes"] for c in first], "sent": [c["sent"] for c in first],
           "calls": [parse_report(c["report"]) for c in first],
           "mpi_seconds": [c["seconds"] for c in first], "wait_seconds": [c["wait_seconds"] for c in first],
           "seconds_by_call": [parse_seconds(c["report"]) for c in first], "outputs": outputs,
           "sync_seconds": [c.get("sync_seconds", 0.0) for c in first]}
    if repeat > 1:
        res["per_call"] = [{"bytes": [c[i]["bytes"] for c in counts], "mpi_seconds": [c[i]["seconds"] for c in counts],
                            "wait_seconds": [c[i]["wait_seconds"] for c in counts],
                            "sync_seconds": [c[i].get("sync_seconds", 0.0) for c in counts]} for i in range(repeat)]
    return res
