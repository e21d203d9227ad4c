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
    """``{name: (calls, bytes received)}`` from the shim's ``name calls bytes sent`` lines."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            name, calls, received, _sent = line.split()
            out[name] = (int(calls), int(received))
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
        for name in ("dp_pmpi_bytes", "dp_pmpi_sent", "dp_pmpi_calls"):
            getattr(lib, name).restype = ctypes.c_longlong
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

    def report_text(self) -> str:
        """The shim's ``name calls bytes sent`` lines."""
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
        return {"bytes": self.bytes(), "sent": self.sent(), "report": self.report_text()}


def count_run(sdfg, ranks: int, timeout: float = 300, **inputs) -> dict:
    """Runs a lowered SDFG like :func:`dace_partition.run`, counting each rank's MPI traffic.

    Returns ``{"bytes": [received bytes per rank], "sent": [sent bytes per rank], "calls": [per rank
    {name: (calls, bytes)}], "outputs": <what run() returns>}``. Only the compiled program's own calls are
    counted (its initialization on first call included); the launcher's own traffic (the metadata
    broadcast, input checks, gathering outputs and counters) is not. Programs lowered with
    ``io="distributed"`` work too: as with ``run``, each rank is given its tiles of the whole inputs.
    """
    shim = build_counter()

    def collect(tmp):
        with open(os.path.join(tmp, "counts.json")) as f:
            return json.load(f)

    # LD_PRELOAD is set per rank through env(1), not on the launcher: mpiexec (or srun) itself then
    # does not load MPI, and the setting survives launchers that do not forward the environment.
    outputs, counts = launch(sdfg, ranks, timeout, inputs, "dace_partition.runtime._count_worker",
                             ["env", f"LD_PRELOAD={shim}"], collect, "count_run()")
    return {"bytes": [c["bytes"] for c in counts], "sent": [c["sent"] for c in counts],
            "calls": [parse_report(c["report"]) for c in counts], "outputs": outputs}
