"""Running a lowered program from one process: ``run`` starts the ranks (``launchers``), which load the
build (``build``) and call the ``Program`` (``program``) on the inputs this process gives.

Only one process ever builds a program (rank 0, or the process that calls ``run``); the ranks then load
the same shared library. Inputs are given on rank 0 and broadcast as *metadata* only (shapes, dtypes,
symbol values): the data itself moves through the program's own MPI calls. This module also re-exports
the runtime's API (``from dace_partition.runtime.launch import build, compile, ...`` keeps working).
"""
import os
import subprocess
import sys
import tempfile
from typing import Tuple

import numpy as np

from dace.sdfg import SDFG

from ..errors import ScheduleError
from ..ir import ranks_needed
from ..ir.record import notes
from . import mps
from ._plain_worker import WRITTEN  # the prefix of the written arguments saved beside a return value
from ._world_check import RUN_DIR
from .cuda_build import uses_gpu
from .build import _BOUND_FILE, bind, bound_values, build
from .launchers import (WORLD_CHECK, FirstToEnd, LaunchCommand, Launcher, MPIFlavour, RunError, _flavour_of, _mpiexec, _srun,
                        _stop, _tied_to, choose_launcher, dead_ranks, launch_command, launcher_kind,
                        library_flavour, mpi_environment, mpiexec_command)
from .program import (CallSignature, Program, _syms, _with_bound, as_array, by_argument_name, check_layout, compile,
                      conform, describe_inputs, load, sizing_dimensions, written_arguments)

# The runtime's API, for ``from dace_partition.runtime.launch import ...``: building is .build, starting
# ranks .launchers, a job's program .program; this module runs a program from one process (``run``).
__all__ = ["_BOUND_FILE", "bind", "bound_values", "build", "WORLD_CHECK", "LaunchCommand", "Launcher", "MPIFlavour",
           "RunError", "FirstToEnd", "_flavour_of", "_mpiexec", "_srun", "_stop", "_tied_to", "choose_launcher", "dead_ranks",
           "launch_command", "launcher_kind", "library_flavour", "mpi_environment", "mpiexec_command",
           "CallSignature", "Program", "_syms", "_with_bound", "as_array", "check_layout", "compile", "conform",
           "describe_inputs", "load", "written_arguments", "run", "launch", "WRITTEN"]


def _check_run_inputs(sdfg: SDFG, inputs) -> Tuple[dict, set]:
    """``run`` takes whole arrays; for io="distributed" programs, those with a layout are checked
    against its global shape (the worker cuts them into tiles). An array of another shape is taken as
    DaCe takes it (:func:`check_layout`). Returns the inputs, every array seen in its parameter's (global)
    shape, so the ranks get them as the program declares them, and the symbols the call does not give, read
    off the arrays' (global) shapes; and the symbols the program needs (``CallSignature.free``)."""
    from ..ir import layouts_of
    lays = layouts_of(sdfg)
    sig = CallSignature(sdfg)
    shapes = {k: d.shape for k, d in sig.arrays.items()}
    shapes.update({k: lay.shape for k, lay in lays.items()})  # io="distributed": given whole, as declared
    inputs = sig.with_symbols(inputs, sizing_dimensions(shapes, sig.free))
    syms = _syms(inputs)
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
    return checked, sig.free


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
    any rank raises :class:`RunError` with its message. Symbols that size the arrays (``N`` of
    ``float64[N]``) may be left out: they are read off the arrays' shapes, as DaCe's own call does.
    """
    return launch(sdfg, ranks, timeout, inputs, launcher=launcher, update=inputs)[0]


def _before_banner(err: str) -> list:
    """The program's own last words (glibc's ``double free or corruption`` before a SIGABRT): the lines of
    ``err`` before MPICH's banner about a bad termination, without duplicates from several ranks."""
    lines = []
    for line in err.splitlines():
        if line.startswith("====="):
            break
        if line.strip() and line not in lines:
            lines.append(line)
    return lines


def _update_in_place(update, written):
    """Copies the new values of written arguments into the caller's arrays (where they are writable NumPy
    arrays of as many elements; others, e.g. torch tensors, get only the returned values)."""
    for k, v in written.items():
        dst = update.get(k)
        if isinstance(dst, np.ndarray) and dst.flags.writeable and dst.size == np.size(v):
            np.copyto(dst, np.reshape(v, dst.shape), casting="unsafe")


WORKER = "dace_partition.runtime._worker"
_PLAIN = "DACE_PARTITION_PLAIN_WORKER"  # "0": every launch loads the program with DaCe (_worker.py)
PLAIN_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_plain_worker.py")


def _plain_call(sdfg: SDFG, folder: str, inputs, ranks: int):
    """This launch's call plan when its ranks can call the library without DaCe (``call_plan``): host memory
    only, root or distributed io; else None."""
    from . import call_plan
    from ..ir import record_of
    record = record_of(sdfg)
    if record is None or record.device_twins or uses_gpu(sdfg):
        return None
    return call_plan.for_launch(sdfg, folder, inputs, ranks, record.layouts)


def launch(sdfg: SDFG, ranks: int, timeout: float, inputs, worker: str = WORKER, prefix=(),
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
    aliases = notes(sdfg).aliases
    inputs = {k: as_array(v) for k, v in by_argument_name(aliases, inputs).items()}
    update = by_argument_name(aliases, update) if update else update
    given = {k: np.shape(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    checked, needed = _check_run_inputs(sdfg, _with_bound(bound_values(sdfg), inputs))
    inputs = {k: checked[k] for k in checked if k in inputs or k in needed}  # with symbols read off the shapes
    sharing = mps.decide_here(uses_gpu(sdfg), ranks, lc.kind == Launcher.MPIEXEC)
    folder = build(sdfg)
    with tempfile.TemporaryDirectory(prefix="dace_partition_") as tmp, mps.private_daemon(sharing) as mps_env:
        np.savez(os.path.join(tmp, "inputs.npz"), **{k: np.asarray(v) for k, v in inputs.items()})
        plan = _plain_call(sdfg, folder, inputs, ranks) if worker == WORKER and os.environ.get(_PLAIN, "1") != "0" else None
        if plan is not None:  # the ranks need not import DaCe: about 2 s of CPU less each
            from .call_plan import write
            write(plan, tmp)
        cmd = launch_command(ranks, [PLAIN_WORKER, folder, tmp] if plan else ["-m", worker, folder, tmp], lc, prefix)
        env = {**mpi_environment(), RUN_DIR: tmp, **mps_env}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True, text=True,
                                preexec_fn=_tied_to(os.getpid()) if sys.platform.startswith("linux") else None)
        watch = FirstToEnd(tmp, ranks) if lc.kind == Launcher.MPIEXEC else None  # srun's ranks run elsewhere
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc, lc.kind)
            out, err = proc.communicate()
            raise RunError(f"'{sdfg.name}' on {ranks} ranks did not finish within {timeout} s\n{err[-3000:]}")
        finally:
            if watch is not None:
                watch.stop()
        if proc.returncode != 0:
            msgs = [l for l in err.splitlines() if "dace_partition" in l or "Error" in l]
            dead = dead_ranks(out + "\n" + err, tmp, watch.first if watch is not None else None)
            tail = msgs[-20:] or (_before_banner(err)[-10:] if dead else (err.splitlines() or out.splitlines())[-30:])
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
