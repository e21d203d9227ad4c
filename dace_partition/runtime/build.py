"""Building a lowered program once: DaCe's CMake build (with the CUDA 13 fixes for a GPU lowering), the
program record and the bound values saved beside it, so every rank can load the same library.
"""
import copy
import glob
import hashlib
import os
from typing import Dict

import numpy as np

import dace
from dace.sdfg import SDFG

from ..compat import forget_symbolic_cache, one_build_folder, with_line_info_from_frames
from ..errors import ScheduleError
from ..ir import is_lowered
from ..ir.record import notes
from ._plain_worker import BOUND as _BOUND_FILE
from .launchers import mpi_environment


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


def _prepare_build_environment():
    os.environ.update(mpi_environment())


@with_line_info_from_frames  # DaCe's expansions add nodes while it generates code
def build(sdfg: SDFG) -> str:
    """Builds the lowered program once (rebuilt only when the SDFG changes) and returns its build folder.
    Leaves DaCe's symbol cache empty (:func:`~dace_partition.compat.forget_symbolic_cache`): a program
    parsed after this build must not see the numbers its code generation cached."""
    try:
        return _build(sdfg)
    finally:
        forget_symbolic_cache()


def _build(sdfg: SDFG) -> str:
    if not is_lowered(sdfg):
        raise ScheduleError(f"SDFG '{sdfg.name}' has not been lowered: call dace_partition.lower first")
    from ..ir import record_of
    _own_build_folder(sdfg)
    digest = hashlib.sha1((str(sdfg.to_json()) + record_of(sdfg).to_json()).encode()).hexdigest()
    cached = notes(sdfg).build
    if cached and cached[0] == digest and glob.glob(os.path.join(cached[1], "build", "lib*")):
        return _save_bound(sdfg, cached[1])
    from .cuda_build import cuda_config, uses_gpu
    from .toolchain import blas_build, preserved_state
    from ..schedule.discover import expand_misread_by_blas, misread_by_blas_in
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
            if misread_by_blas_in(built):  # left as library nodes with threads > 1 (DaCe expands them in the build)
                built = built if built is not sdfg else copy.deepcopy(sdfg)  # the caller's SDFG stays as lowered
                expand_misread_by_blas(built)
            built.compile(return_program_handle=False)
        # Read here, under one_build_folder: outside it DaCe 2 under mpiexec names a per-rank folder
        # (``<cache>_rank0``) that this build did not write.
        folder = built.build_folder
        from . import call_plan
        from .program import written_arguments
        call_plan.save(built, folder, written_arguments(built))  # run()'s ranks call it without DaCe
    notes(sdfg).build = (digest, folder)
    return _save_bound(sdfg, folder)


def _own_build_folder(sdfg: SDFG):
    """A lowered program builds in a folder of its own, ``<default build folder>/<name>-lowered``, not in
    DaCe's ``<default build folder>/<name>``. The same program unlowered (a ``@dace.program`` called once to
    check it) builds there: it overwrote the lowered library, or, loaded in this process, made DaCe build
    the lowered one under another name, and the ranks loaded the unlowered program (a crash or a wrong
    result). A folder the caller set on the SDFG is kept."""
    if getattr(sdfg, "_build_folder", None) is None:
        sdfg.build_folder = os.path.join(dace.Config.get("default_build_folder"), f"{sdfg.name}-lowered")


def _with_restrict_loops(sdfg: SDFG) -> SDFG:
    """What is compiled for the CPU: a copy of the lowered program whose loops over rank-local buffers
    are functions with ``__restrict__`` pointers (:mod:`.restrict`), in the same build folder.
    The caller's SDFG keeps its maps where the schedule put them."""
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
