"""Ranks that share a GPU: a private CUDA Multi-Process Service daemon for the job.

Several ranks on one GPU are several CUDA contexts, and the GPU time-slices between contexts: on an H200
(2026-11-28) a Jacobi time loop on two ranks sharing the GPU took 3.7 times one rank's time, and 1.54 times
under MPS, where the ranks' kernels share the GPU instead. ``run`` therefore starts an MPS control daemon
of its own for a job whose ranks share this machine's GPUs, and stops it when the job ends. It is private
to the job (its own pipe and log folders, passed to the ranks in ``CUDA_MPS_PIPE_DIRECTORY``), so it
neither joins nor disturbs a daemon someone else runs, and it is never left behind.

What decides (:func:`decide`, pure): the program runs on the GPU, the ranks start here (``mpiexec``; under
``srun`` they run on other nodes, where Slurm's own MPS support applies), more ranks than GPUs, the
``nvidia-cuda-mps-control`` tool exists, and no MPS daemon serves this environment already.
``DACE_PARTITION_MPS=0`` never starts one, ``=1`` requires one (an error in words where it cannot).
"""
import contextlib
import enum
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, Iterator, Mapping, Optional

CONTROL = "nvidia-cuda-mps-control"
SYSTEM_PIPE = "/tmp/nvidia-mps"  # where a daemon started without CUDA_MPS_PIPE_DIRECTORY listens


class Mps(enum.Enum):
    """What ``run`` does about MPS for one job."""
    START = "start"  # a private daemon for this job
    NONE = "none"  # nothing: not needed, not possible, or already there


@dataclass(frozen=True)
class MpsDecision:
    action: Mps
    why: str

    def __str__(self):
        return f"MPS: {self.action.value} ({self.why})"


def decide(on_gpu: bool, ranks: int, gpus: int, local_launch: bool, control: Optional[str],
           env: Mapping[str, str], system_daemon: bool) -> MpsDecision:
    """Whether a job of ``ranks`` ranks on ``gpus`` GPUs gets a private MPS daemon; raises ValueError if
    ``DACE_PARTITION_MPS=1`` asks for one that cannot be had."""
    wish = env.get("DACE_PARTITION_MPS", "").strip().lower()
    if wish in ("0", "off", "no", "false"):
        return MpsDecision(Mps.NONE, "DACE_PARTITION_MPS=0")
    if wish not in ("", "auto", "1", "on", "yes", "true"):
        raise ValueError(f"DACE_PARTITION_MPS={env['DACE_PARTITION_MPS']!r}: give 0 (never), 1 (always) or auto")
    required = wish in ("1", "on", "yes", "true")
    if not on_gpu:  # nothing to share, whatever was asked
        return MpsDecision(Mps.NONE, "the program does not run on a GPU")
    if env.get("CUDA_MPS_PIPE_DIRECTORY") or system_daemon:  # asked for or not, the ranks use that one
        return MpsDecision(Mps.NONE, "an MPS daemon serves this environment already")
    why = None
    if not local_launch:
        why = "the ranks are not started on this machine"
    elif gpus < 1:
        why = "no GPU is visible here"
    elif ranks <= gpus and not required:
        why = f"{ranks} rank(s) on {gpus} GPU(s): none shares a GPU"
    elif control is None:
        why = f"{CONTROL} is not on PATH"
    if why is None:
        return MpsDecision(Mps.START, f"{ranks} ranks share {gpus} GPU(s)")
    if required:
        raise ValueError(f"DACE_PARTITION_MPS=1, but no MPS daemon can be started for this job: {why}")
    return MpsDecision(Mps.NONE, why)


def decide_here(on_gpu: bool, ranks: int, local_launch: bool) -> MpsDecision:
    """:func:`decide` with this machine's GPUs, tool and environment."""
    from .cuda_build import gpu_count
    gpus = gpu_count() if on_gpu else 0
    return decide(on_gpu, ranks, gpus, local_launch, shutil.which(CONTROL), os.environ,
                  os.path.exists(os.path.join(SYSTEM_PIPE, "control")))


@contextlib.contextmanager
def private_daemon(decision: MpsDecision) -> Iterator[Dict[str, str]]:
    """Starts a daemon if ``decision`` says so and yields the environment the ranks need (empty if none);
    stops it on exit. A daemon that fails to start is reported on stderr and the job runs without it. Its
    log goes to a folder of the job's, or to ``DACE_PARTITION_MPS_LOG`` where set (kept after the job)."""
    if decision.action is not Mps.START:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="dace_partition_mps_", ignore_cleanup_errors=True) as tmp:
        env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(tmp, "pipe"),
               "CUDA_MPS_LOG_DIRECTORY": os.environ.get("DACE_PARTITION_MPS_LOG") or os.path.join(tmp, "log")}
        for d in env.values():
            os.makedirs(d, exist_ok=True)
        full = {**os.environ, **env}
        control = shutil.which(CONTROL)
        try:
            started = subprocess.run([control, "-d"], env=full, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            started = subprocess.CompletedProcess([control], 1, "", str(e))
        if started.returncode != 0:
            print(f"dace_partition: warning: {CONTROL} -d failed ({(started.stderr or started.stdout).strip()[-300:]}); "
                  "the ranks time-share the GPU", file=sys.stderr)
            yield {}
            return
        try:
            yield env
        finally:
            try:
                subprocess.run([control], input="quit\n", env=full, capture_output=True, text=True, timeout=30)
                pid = os.path.join(env["CUDA_MPS_PIPE_DIRECTORY"], "nvidia-cuda-mps-control.pid")
                for _ in range(50):  # the daemon removes its pid file when it has stopped its server
                    if not os.path.exists(pid):
                        break
                    time.sleep(0.1)
            except (OSError, subprocess.SubprocessError) as e:
                print(f"dace_partition: warning: stopping the job's MPS daemon failed: {e}", file=sys.stderr)
