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
from dataclasses import asdict, dataclass, replace
from typing import Optional, Tuple

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "dace_partition", "machine.json")
#: Where :func:`calibrate` with ``device="gpu"`` keeps the GPU rates it measured (read by :func:`gpu_machine`).
GPU_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "dace_partition", "gpu_machine.json")


@dataclass(frozen=True)
class Machine:
    """Rates of one rank (one core, or its GPU) and of the link between two ranks.

    A GPU machine (``gpus > 0``) adds what ``device="gpu"`` lowerings pay: ``pcie`` (bytes/s between a
    rank's GPU and its pinned host memory, crossed twice by every byte MPI moves: to the host at the
    sender, back to the device at the receiver), ``launch`` (seconds per kernel), ``call`` (seconds per
    program call: the runtime's argument handling and DaCe's dispatch, the same for every schedule) and ``gpus`` (the GPUs
    the job's ranks share: ranks take GPUs round-robin by node-local rank, so a grid of S ranks runs
    ``ceil(S / gpus)`` tiles one after another on each GPU), and ``switch``: seconds per kernel for each
    further rank on the same GPU (processes time-share a GPU without MPS: a switch between their contexts
    at every kernel)."""
    alpha: float = 5.0e-6  # seconds per message received
    beta: float = 2.5e-10  # seconds per byte received (4 GB/s)
    blas_flops: float = 3.0e10  # flop/s of a rank-local GEMM
    map_ops: float = 2.5e9  # operations/s of DaCe-generated map code (one thread, data in cache)
    stream: float = 8.0e9  # bytes/s a rank reads and writes from memory
    source: str = "defaults"
    gpus: int = 0  # GPUs the ranks share (0: a CPU machine)
    pcie: float = 0.0  # bytes/s host <-> GPU (pinned)
    launch: float = 0.0  # seconds per GPU kernel
    switch: float = 0.0  # seconds per kernel per further rank sharing its GPU
    call: float = 0.0  # seconds per program call on a GPU (whatever it launches)
    # Between nodes (0: as inside a node). alpha and beta above are the link inside a node.
    node_alpha: float = 0.0  # seconds per message from another node
    node_beta: float = 0.0  # seconds per byte from another node
    ranks_per_node: int = 0  # consecutive world ranks per node (0: the hierarchy the environment names, if any)

    def message_time(self, messages: float, bytes_: float, off_messages: float = 0.0, off_bytes: float = 0.0) -> float:
        """One rank receiving ``bytes_`` in ``messages`` messages, ``off_bytes`` / ``off_messages`` of them from
        other nodes (priced at ``node_alpha`` / ``node_beta`` where those are set)."""
        staging = 2 * bytes_ / self.pcie if self.pcie else 0.0
        na, nb = self.node_link
        return (self.alpha * (messages - off_messages) + self.beta * (bytes_ - off_bytes) + na * off_messages +
                nb * off_bytes + staging)

    @property
    def node_link(self) -> Tuple[float, float]:
        """(alpha, beta) between nodes: ``node_alpha`` / ``node_beta``, or the link inside a node where unset."""
        return self.node_alpha or self.alpha, self.node_beta or self.beta

    @property
    def two_levels(self) -> bool:
        return bool(self.node_alpha or self.node_beta)

    def node_layout(self, environ=None):
        """How ranks sit on nodes for this machine: ``ranks_per_node`` if set, else the hierarchy that
        ``DACE_PARTITION_HIERARCHY`` or the Slurm allocation names (``solvers.hierarchical``), else None
        (one node)."""
        from ..ir.levels import NodeLayout
        if self.ranks_per_node:
            return NodeLayout(self.ranks_per_node, "the machine")
        from ..solvers.hierarchical import hierarchy_setting
        text, source = hierarchy_setting(environ)
        if text is None:
            return None
        try:
            return NodeLayout.parse(text, source)
        except ValueError:
            return None

    def sharing(self, ranks: int) -> int:
        """How many of ``ranks`` ranks run on one GPU (1 on a CPU machine: one core each)."""
        return -(-ranks // self.gpus) if self.gpus else 1

    def gpu_time(self, ranks: int, tile: float, kernels: int) -> float:
        """Seconds of one kernel state on a GPU that ``ranks`` ranks share round-robin: each of the
        ``sharing`` ranks' tiles (``tile`` seconds) one after another, a launch per kernel, and a context
        switch per kernel for each further rank."""
        shared = self.sharing(ranks)
        return shared * (tile + self.launch * kernels) + (shared - 1) * self.switch * kernels

    def __str__(self):
        gpu = (f", {self.gpus} GPU(s) shared by the ranks, PCIe {self.pcie / 1e9:.0f} GB/s, launch "
               f"{self.launch * 1e6:.0f} us, switch {self.switch * 1e6:.0f} us" +
               (f", call {self.call * 1e6:.0f} us" if self.call else "")) if self.gpus else ""
        nodes = (f", between nodes alpha {self.node_link[0] * 1e6:.2f} us, beta "
                 f"{1 / self.node_link[1] / 1e9:.2f} GB/s" +
                 (f", {self.ranks_per_node} rank(s) per node" if self.ranks_per_node else "")) if self.two_levels else ""
        return (f"Machine({self.source}: alpha {self.alpha * 1e6:.2f} us, beta {1 / self.beta / 1e9:.2f} GB/s, "
                f"BLAS {self.blas_flops / 1e9:.1f} GFlop/s, maps {self.map_ops / 1e9:.2f} Gop/s, "
                f"memory {self.stream / 1e9:.1f} GB/s{gpu}{nodes})")


def job_gpus() -> Optional[int]:
    """``DACE_PARTITION_GPUS``: the GPUs the job's ranks share, when lowering elsewhere (None if unset)."""
    text = os.environ.get("DACE_PARTITION_GPUS", "").strip()
    if not text:
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"DACE_PARTITION_GPUS={text!r}: give the number of GPUs the job's ranks share (1 or more)")
    return n


#: flop/s of a float64 GEMM as DaCe's pure GPU maps (one thread per output element, an atomic add per
#: multiply-add): 2 * 2048^3 flop in 3.6 s on one H100 (docs/gpu.md, "Matrix products on cuBLAS").
PURE_GPU_GEMM_FLOPS = 4.7e9


def gpu_machine(gpus: Optional[int] = None, host: Optional[Machine] = None) -> Machine:
    """The model of ranks whose kernels run on GPUs (``lower(..., device="gpu")``), from published figures
    of an NVIDIA H100 SXM5 (HBM3 3.35 TB/s, FP64 tensor 67 TFLOP/s, PCIe Gen5 x16 64 GB/s per direction),
    derated to what kernels reach: 2.5 TB/s of memory traffic, 1e12 map operations/s, 5e13 GEMM flop/s,
    25 GB/s of pinned copies, 10 us per kernel (launch and DaCe's synchronization after each state). MPI
    keeps ``host``'s link (default: :func:`machine`). ``gpus``: the GPUs the job's ranks share (default:
    the GPUs visible here, else 1). One figure is measured (an H200, 2026-11-26, benchmarks/gpu.py): ranks
    sharing one GPU add about 0.2 ms per kernel for each further rank (softmax, matmul and MLP on 1, 2 and
    4 ranks: 1.1, 0.3 and 0.7 ms more on two ranks, 2.6, 0.65 and 1.9 ms on four, for 4, 1 and 3
    kernels). Where ``calibrate(device="gpu")`` ran on this machine, its measured rates (memory, PCIe,
    launch, GEMM) replace the published ones. Where the toolkit has no cuBLAS
    (``runtime.cuda_build.cublas_available``), the lowering runs matrix products as DaCe's pure GPU maps,
    and they are priced at that rate (:data:`PURE_GPU_GEMM_FLOPS`), not cuBLAS's.

    Lowering somewhere else than where the job runs (a login node without GPUs, this machine for a cluster),
    say how many GPUs the job's ranks will have: ``DACE_PARTITION_GPUS=N`` (``gpus`` given here wins), or
    price for a GPU cluster with ``DACE_PARTITION_MACHINE`` (a preset such as ``daint``, or a JSON machine
    with ``gpus``), whose rates are then taken as they are."""
    host = host or machine()
    if gpus is None:
        gpus = job_gpus()
    if host.gpus:  # the machine named for the job is a GPU machine already (DACE_PARTITION_MACHINE=daint)
        return host if gpus is None else replace(host, gpus=gpus)
    if gpus is None:
        from ..runtime.cuda_build import gpu_count
        gpus = gpu_count() or 1
    measured = _gpu_calibration()
    if measured is not None:  # calibrate(device="gpu") ran here: its GPU rates, the host's MPI link
        m = replace(measured, alpha=host.alpha, beta=host.beta, node_alpha=host.node_alpha,
                    node_beta=host.node_beta, ranks_per_node=host.ranks_per_node, gpus=gpus)
    else:
        m = Machine(alpha=host.alpha, beta=host.beta, blas_flops=5.0e13, map_ops=1.0e12, stream=2.5e12,
                    source=f"GPU: H100 published figures, derated; MPI link: {host.source}", gpus=gpus,
                    pcie=2.5e10, launch=1.0e-5, switch=2.0e-4)
    from ..runtime.cuda_build import cublas_available
    if not cublas_available():  # the GEMMs will be DaCe's pure GPU maps (passes/pipeline.py)
        m = replace(m, blas_flops=min(m.blas_flops, PURE_GPU_GEMM_FLOPS),
                    source=f"{m.source}; no cuBLAS: GEMMs at the pure maps' rate")
    return m


def daint_machine() -> Machine:
    """A Piz Daint-like cluster from published figures, for projections (nothing here measured it): one
    rank per node, each with one NVIDIA Tesla P100 (PCIe, 16 GB: 4.7 TFLOP/s FP64 and 732 GB/s HBM2 in
    NVIDIA's datasheet; PCIe Gen3 x16, 16 GB/s per direction), nodes joined by Cray's Aries network (about
    10 GB/s of injection bandwidth per node and about 1.3 us of MPI latency: Alverson et al., "Cray XC Series
    Network", Cray white paper WP-Aries01-1112, 2012). Derated as :func:`gpu_machine` derates an H100:
    4.0 TFLOP/s of DGEMM, 550 GB/s of kernel memory traffic, 2.5e11 map operations/s, 11 GB/s of pinned
    copies, 8 GB/s and 1.5 us between nodes for MPI, 10 us per kernel; 5704 GPU nodes (the XC50 part), so
    no two ranks share a GPU. ``DACE_PARTITION_MACHINE=daint`` makes :func:`machine` return it."""
    return Machine(alpha=1.5e-6, beta=1 / 8.0e9, blas_flops=4.0e12, map_ops=2.5e11, stream=5.5e11,
                   source="Piz Daint-like (P100 per node, Aries): published figures, derated", gpus=5704,
                   pcie=1.1e10, launch=1.0e-5, node_alpha=1.5e-6, node_beta=1 / 8.0e9, ranks_per_node=1)


#: Named machines ``DACE_PARTITION_MACHINE`` may select (or it names a JSON file of Machine's fields).
PRESETS = {"daint": daint_machine}

_CACHED: Optional[Machine] = None


def machine() -> Machine:
    """The machine the model prices for: ``DACE_PARTITION_MACHINE`` if set (a preset of :data:`PRESETS`,
    such as ``daint``, or a JSON file of :class:`Machine`'s fields: price for the cluster the program will
    run on while lowering elsewhere), else the calibrated machine if :func:`calibrate` has run here
    (``~/.cache/dace_partition/machine.json``), else the documented defaults."""
    global _CACHED
    chosen = os.environ.get("DACE_PARTITION_MACHINE", "").strip()
    if chosen:
        if chosen in PRESETS:
            return PRESETS[chosen]()
        try:
            with open(chosen) as f:
                return Machine(**json.load(f))
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"DACE_PARTITION_MACHINE={chosen!r} is neither a preset ({', '.join(PRESETS)}) nor a "
                             f"JSON file of Machine's fields: {e}") from e
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
import mpi4py
mpi4py.rc.thread_level = "single"  # as the lowered programs initialise MPI (MPI_Init)
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


def measure_link(launcher=None) -> Tuple[float, float]:
    """``(alpha, beta)`` of a ping-pong between the two ranks that ``launcher`` starts (seconds per message,
    seconds per byte): 8 bytes 2000 times, 16 MiB 5 times, best of three. Raises RuntimeError if it fails."""
    from ..runtime.launchers import mpi_environment, mpiexec_command
    cmd = mpiexec_command(2, launcher) + [sys.executable, "-c", _PINGPONG]
    failed = []
    for pause in (0, 2, 5):  # a job that fails while it starts (MPICH's "Internal error", twice in a row in
        # MPI_Init on one emulated node right after other jobs there) is started again after a pause; the
        # error keeps every answer
        time.sleep(pause)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                             env={**mpi_environment(), "OMP_NUM_THREADS": "1"})
        vals = out.stdout.split()
        if out.returncode == 0 and len(vals) == 2:
            return float(vals[0]), max(float(vals[1]), 1e-12)
        text = (out.stderr or out.stdout).strip()
        failed.append(f"exit {out.returncode}: {text[:400]}{' ... ' + text[-400:] if len(text) > 800 else text[400:]}")
    raise RuntimeError(f"the ping-pong under {' '.join(cmd[:4])} ... failed {len(failed)} times:\n" + "\n".join(failed))


def _gpu_calibration() -> Optional[Machine]:
    try:
        with open(GPU_CACHE) as f:
            return Machine(**json.load(f))
    except (OSError, ValueError, TypeError):
        return None


def calibrate_gpu(save: bool = True, launcher=None) -> Machine:
    """``calibrate(device="gpu")``: measures this machine's GPU (:mod:`.gpu_calibration`, in a one-rank job
    under ``launcher``: a kernel's launch, a call's own cost, GPU memory and PCIe bytes/s, a float64 GEMM
    on cuBLAS) and the MPI link between two ranks (host buffers: MPI never sees GPU memory), and caches them for
    :func:`gpu_machine`. What it does not measure stays as :func:`gpu_machine` documents: the map rate
    (1e12 op/s) and the cost of ranks sharing a GPU (``switch``). Takes about a minute (two nvcc builds).
    Raises RuntimeError, before building anything, where there is no GPU or no nvcc."""
    from ..runtime.cuda_build import gpu_available, nvcc_path
    from ..runtime.launchers import mpi_environment, mpiexec_command
    if not gpu_available():
        raise RuntimeError("calibrate(device='gpu') measures a GPU, and this machine has none that nvidia-smi "
                           "lists; calibrate the CPU with calibrate(), or run this on the GPU machine")
    if nvcc_path() is None:
        raise RuntimeError("calibrate(device='gpu') builds CUDA programs: nvcc (the CUDA toolkit) was not found")
    cmd = mpiexec_command(1, launcher) + [sys.executable, "-m", "mpi4py", "-m",
                                          "dace_partition.search.gpu_calibration"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                         env={**mpi_environment(), "OMP_NUM_THREADS": "1"})
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the GPU measurement failed (exit {out.returncode}): "
                           f"{(out.stderr or out.stdout).strip()[-1500:]}")
    got = json.loads(lines[-1])
    if not got.get("correct"):
        raise RuntimeError(f"the GPU measurement's kernels gave wrong results, so its times mean nothing: {got}")
    host = machine()
    try:
        alpha, beta = measure_link(launcher)
        host = replace(host, alpha=alpha, beta=beta, source="measured (ping-pong, host buffers)")
    except Exception as e:  # noqa: BLE001 - keep the host machine's link
        print(f"dace_partition.calibrate: ping-pong failed ({e}); keeping {host.source}'s link", file=sys.stderr)
    from ..runtime.cuda_build import gpu_names
    names = gpu_names()
    base = gpu_machine(host=host)
    m = replace(base, stream=got["stream"], pcie=got["pcie"], launch=got["launch"], call=got.get("call", 0.0),
                blas_flops=got.get("blas_flops", base.blas_flops),
                gpus=len(names) or 1, source=f"GPU calibrated {time.strftime('%Y-%m-%d')} "
                                              f"({names[0] if names else 'GPU'}); MPI link: {host.source}")
    if save:
        os.makedirs(os.path.dirname(GPU_CACHE), exist_ok=True)
        with open(GPU_CACHE, "w") as f:
            json.dump(asdict(m), f, indent=1)
    return m


def calibrate(save: bool = True, launcher=None, across_nodes=None, ranks_per_node: int = 0,
              device: str = "cpu") -> Machine:
    """Measures the rates on this machine (a ping-pong between two ranks under the package's launcher, a
    GEMM and a NumPy stream kernel in this process, and the same elementwise program compiled by DaCe as a
    lowered program's kernels are) and caches them for :func:`machine`. Takes about half a minute (one
    DaCe build).

    On a cluster, ``launcher`` should place both ranks on one node (``["srun", "-N", "1"]``) and
    ``across_nodes`` on two (``["srun", "-N", "2", "--ntasks-per-node=1"]``): the second ping-pong gives
    the link between nodes (``node_alpha``, ``node_beta``), and ``ranks_per_node`` how many consecutive
    ranks share a node (0: whatever the allocation or ``DACE_PARTITION_HIERARCHY`` says at lowering).

    ``device="gpu"`` measures this machine's GPU instead (:func:`calibrate_gpu`), for the model of
    ``lower(..., device="gpu")`` (:func:`gpu_machine`)."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    if device == "gpu":
        return calibrate_gpu(save, launcher)
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
        alpha, beta = measure_link(launcher)
    except Exception as e:  # noqa: BLE001 - no MPI here: keep the default link
        print(f"dace_partition.calibrate: ping-pong failed ({e}); keeping the default alpha and beta",
              file=sys.stderr)
    node_alpha = node_beta = 0.0
    if across_nodes is not None:  # asked for: a failure is an error, not a silent one-level machine
        node_alpha, node_beta = measure_link(across_nodes)
    m = Machine(alpha=alpha, beta=max(beta, 1e-12), blas_flops=blas, map_ops=map_ops, stream=stream,
                source=f"calibrated {time.strftime('%Y-%m-%d')}", node_alpha=node_alpha, node_beta=node_beta,
                ranks_per_node=ranks_per_node)
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
    from ..compat import forget_symbolic_cache
    with dace.config.temporary_config():
        dace.Config.set("store_history", value=False)
        program = sdfg.compile()
    forget_symbolic_cache()  # a program parsed later must not see this build's cached numbers
    program(x=x, y=y, N=x.size)
    best = min(_timed(lambda: program(x=x, y=y, N=x.size)) for _ in range(5))
    return 2 * x.size / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
