"""The machine the cost model predicts for: a few rates, measured once by :func:`calibrate` and cached.

Time per rank of a program = compute (each kernel's work on the rank's tile: matrix products at the BLAS
rate, other maps at the map rate, both bounded by memory bandwidth for the bytes the tile touches) plus
communication (each Move with an alpha-beta model: ``alpha`` per message a rank receives, ``beta`` per byte
it receives), times loop trip counts.

The map rate is that of data in cache: a tile too big for the cache is priced at the memory rate, which
bounds it (``max``). A map rate measured on a streaming program counts the memory twice, and made small
kernels cost ten times what they do (channel_flow's 61x61 stencils were split, at 2.6x the time of one
rank). The defaults were measured on a 2-core x86-64 machine with MPICH (shared memory); the map rate
(AMD EPYC, ``2 * x + y`` on 2^18 elements: 2.8 Gop/s) predicts the same program on 2^23 elements, memory
bound, within 5% of its measured time (40 against 39 ms) at the default memory rate. They are what
:func:`machine` returns until :func:`calibrate` has run here.
"""
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "dace_partition", "machine.json")


@dataclass(frozen=True)
class Machine:
    """Rates of one rank (one core, or its GPU) and of the link between two ranks.

    A GPU machine (``gpus > 0``) adds what ``device="gpu"`` lowerings pay: ``pcie`` (bytes/s between a
    rank's GPU and its pinned host memory, crossed twice by every byte MPI moves: to the host at the
    sender, back to the device at the receiver), ``launch`` (seconds per kernel) and ``gpus`` (the GPUs
    the job's ranks share: ranks take GPUs round-robin by node-local rank, so a grid of S ranks runs
    ``ceil(S / gpus)`` tiles one after another on each GPU)."""
    alpha: float = 5.0e-6  # seconds per message received
    beta: float = 2.5e-10  # seconds per byte received (4 GB/s)
    blas_flops: float = 3.0e10  # flop/s of a rank-local GEMM
    map_ops: float = 2.5e9  # operations/s of DaCe-generated map code (one thread, data in cache)
    stream: float = 8.0e9  # bytes/s a rank reads and writes from memory
    source: str = "defaults"
    gpus: int = 0  # GPUs the ranks share (0: a CPU machine)
    pcie: float = 0.0  # bytes/s host <-> GPU (pinned)
    launch: float = 0.0  # seconds per GPU kernel

    def message_time(self, messages: float, bytes_: float) -> float:
        staging = 2 * bytes_ / self.pcie if self.pcie else 0.0
        return self.alpha * messages + self.beta * bytes_ + staging

    def sharing(self, ranks: int) -> int:
        """How many of ``ranks`` ranks run on one GPU (1 on a CPU machine: one core each)."""
        return -(-ranks // self.gpus) if self.gpus else 1

    def __str__(self):
        gpu = (f", {self.gpus} GPU(s) shared by the ranks, PCIe {self.pcie / 1e9:.0f} GB/s, launch "
               f"{self.launch * 1e6:.0f} us") if self.gpus else ""
        return (f"Machine({self.source}: alpha {self.alpha * 1e6:.2f} us, beta {1 / self.beta / 1e9:.2f} GB/s, "
                f"BLAS {self.blas_flops / 1e9:.1f} GFlop/s, maps {self.map_ops / 1e9:.2f} Gop/s, "
                f"memory {self.stream / 1e9:.1f} GB/s{gpu})")


def gpu_machine(gpus: Optional[int] = None, host: Optional[Machine] = None) -> Machine:
    """The model of ranks whose kernels run on GPUs (``lower(..., device="gpu")``), from published figures
    of an NVIDIA H100 SXM5 (HBM3 3.35 TB/s, FP64 tensor 67 TFLOP/s, PCIe Gen5 x16 64 GB/s per direction),
    derated to what kernels reach: 2.5 TB/s of memory traffic, 1e12 map operations/s, 5e13 GEMM flop/s,
    25 GB/s of pinned copies, 10 us per kernel (launch and DaCe's synchronization after each state). MPI
    keeps ``host``'s link (default: :func:`machine`). ``gpus``: the GPUs the job's ranks share (default:
    the GPUs visible here, else 1). Not measured here: no GPU machine has calibrated it yet."""
    host = host or machine()
    if gpus is None:
        from ..runtime.cuda_build import gpu_count
        gpus = gpu_count() or 1
    return Machine(alpha=host.alpha, beta=host.beta, blas_flops=5.0e13, map_ops=1.0e12, stream=2.5e12,
                   source=f"GPU: H100 published figures, derated; MPI link: {host.source}", gpus=gpus,
                   pcie=2.5e10, launch=1.0e-5)


_CACHED: Optional[Machine] = None


def machine() -> Machine:
    """The calibrated machine if :func:`calibrate` has run here (``~/.cache/dace_partition/machine.json``),
    else the documented defaults."""
    global _CACHED
    if _CACHED is None:
        _CACHED = Machine()
        try:
            with open(CACHE) as f:
                _CACHED = Machine(**json.load(f))
        except (OSError, ValueError, TypeError):
            pass
    return _CACHED


_PINGPONG = r"""
import time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
def pp(n, reps):
    buf = np.zeros(max(n, 1), np.uint8)
    best = 1e9
    for _ in range(3):
        c.Barrier(); t = time.perf_counter()
        for _ in range(reps):
            if c.rank == 0: c.Send(buf[:n], 1); c.Recv(buf[:n], 1)
            else: c.Recv(buf[:n], 0); c.Send(buf[:n], 0)
        best = min(best, (time.perf_counter() - t) / (2 * reps))
    return best
small, big, n = pp(8, 2000), pp(1 << 24, 5), 1 << 24
if c.rank == 0:
    print(small, (big - small) / n)
"""


def calibrate(save: bool = True, launcher=None) -> Machine:
    """Measures the rates on this machine (a ping-pong between two ranks under the package's launcher, a
    GEMM and a NumPy stream kernel in this process, and the same elementwise program compiled by DaCe as a
    lowered program's kernels are) and caches them for :func:`machine`. Takes about half a minute (one
    DaCe build)."""
    import numpy as np
    global _CACHED
    n = 1024
    a, b = np.random.rand(n, n), np.random.rand(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(3))
    blas = 2 * n ** 3 / best
    x, y = np.random.rand(1 << 23), np.random.rand(1 << 23)
    out = np.empty_like(x)
    best = min(_timed(lambda: np.add(x, y, out=out)) for _ in range(5))
    stream = 3 * x.nbytes / best
    map_ops = _compiled_map_rate(x[:1 << 18].copy(), y[:1 << 18].copy())  # in cache: memory bounds bigger tiles
    alpha, beta = Machine.alpha, Machine.beta
    try:
        from ..runtime.launch import mpi_environment, mpiexec_command
        cmd = mpiexec_command(2, launcher) + [sys.executable, "-c", _PINGPONG]
        out_ = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              env={**mpi_environment(), "OMP_NUM_THREADS": "1"})
        vals = out_.stdout.split()
        alpha, beta = float(vals[0]), float(vals[1])
    except Exception as e:  # noqa: BLE001 - no MPI here: keep the default link
        print(f"dace_partition.calibrate: ping-pong failed ({e}); keeping the default alpha and beta",
              file=sys.stderr)
    m = Machine(alpha=alpha, beta=max(beta, 1e-12), blas_flops=blas, map_ops=map_ops, stream=stream,
                source=f"calibrated {time.strftime('%Y-%m-%d')}")
    if save:
        os.makedirs(os.path.dirname(CACHE), exist_ok=True)
        with open(CACHE, "w") as f:
            json.dump(asdict(m), f, indent=1)
    _CACHED = m
    return m


def _compiled_map_rate(x, y) -> float:
    """Operations per second of DaCe-generated rank-local code: ``2 * x + y`` (two maps, one temporary,
    as the frontend writes it) built like a lowered program's kernels (one thread, sequential maps), on
    arrays small enough to stay in cache."""
    import dace
    from ..passes.partition import single_threaded
    from .calibration_programs import stream_program
    sdfg = stream_program.to_sdfg()
    sdfg.name = "dace_partition_calibrate_stream"
    single_threaded(sdfg)
    with dace.config.temporary_config():
        dace.Config.set("store_history", value=False)
        program = sdfg.compile()
    program(x=x, y=y, N=x.size)
    best = min(_timed(lambda: program(x=x, y=y, N=x.size)) for _ in range(5))
    return 2 * x.size / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
