"""Which MPI a build uses: ``print(dp.mpi_info())``.

A lowered program is compiled by DaCe's CMake (``FindMPI``), which takes MPI from ``MPI_HOME`` (set to the
Python environment when it carries an MPI wheel) or from the ``mpicc`` on PATH. ``mpi_info`` compiles a
tiny C program with that same ``mpicc`` and runs it: it prints ``MPI_Get_library_version`` and the path of
the libmpi it loaded, i.e. what a compiled program links. Where no ``mpicc`` can be found, the answer
comes from mpi4py instead, and says so. It also shows which MPI mpi4py loads on the ranks and the
launcher a run would use: on a cluster, all three should name the system MPI.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional

_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    Dl_info info;
    const char *path = "?";
    void *sym = dlsym(RTLD_DEFAULT, "MPI_Get_library_version");  /* callable before MPI_Init */
    if (argc > 1) {  /* what the halo exchanges of a GPU lowering ask, as they ask it: after MPI_Init */
        int (*query)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support");
        MPI_Init(NULL, NULL);
        printf("%d\n", query ? query() : -1);
        MPI_Finalize();
        return 0;
    }
    MPI_Get_library_version(version, &len);
    if (sym && dladdr(sym, &info) && info.dli_fname) path = info.dli_fname;
    printf("%s\n%s\n", path, version);
    return 0;
}
"""


@dataclass(frozen=True)
class MpiInfo:
    """The MPI library a compiled program links, how that was found out, and what mpi4py and the
    launcher use. ``print(dp.mpi_info())`` shows it."""
    version: str  # first line of MPI_Get_library_version
    library: str  # path of the libmpi loaded
    source: str  # "compiled" (a C program built with mpicc) or "mpi4py" (fallback)
    how: str  # in words: which mpicc / why the fallback
    mpi_home: str
    mpi4py_version: str
    mpi4py_library: str
    launcher: str
    cuda_aware: str = "unknown"  # whether MPI takes device pointers, as a GPU lowering's halo exchange decides it

    def __str__(self):
        lines = [
            "dace-partition MPI",
            f"  compiled programs link: {self.version} ({self.library})",
            f"    found by: {self.how}",
            f"  MPI_HOME:               {self.mpi_home or '(not set: the mpicc on PATH decides)'}",
            f"  mpi4py on the ranks:    {self.mpi4py_version} ({self.mpi4py_library})",
            f"  launcher:               {self.launcher}",
            f"  CUDA-aware:             {self.cuda_aware}",
        ]
        if self.mismatch:
            lines.append(f"  WARNING: {self.mismatch}")
        return "\n".join(lines)

    @property
    def mismatch(self) -> Optional[str]:
        """A sentence when the program and mpi4py use different MPI libraries (they must share one)."""
        from .launchers import _flavour_of
        if self.source != "compiled" or not self.mpi4py_version:
            return None
        a, b = _flavour_of(self.version), _flavour_of(self.mpi4py_version)
        if a != b or (self.library != self.mpi4py_library and os.path.realpath(self.library) !=
                      os.path.realpath(self.mpi4py_library)):
            return ("the compiled program and mpi4py load different MPI libraries: build mpi4py against this MPI "
                    "(pip install --no-binary mpi4py mpi4py) or point it at the same libmpi (MPI4PY_LIBMPI)")
        return None


def _mpicc(env) -> Optional[str]:
    home = env.get("MPI_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "mpicc")):
        return os.path.join(home, "bin", "mpicc")
    return shutil.which(env.get("MPICC", "mpicc"), path=env.get("PATH"))


def _from_mpi4py(env):
    def ask(flag):
        try:
            proc = subprocess.run([sys.executable, "-m", "mpi4py", flag], capture_output=True, text=True,
                                  timeout=60, env=env)
            return proc.stdout.strip() if proc.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            return ""
    version = ask("--mpi-lib-version")
    return (version.splitlines()[0].strip() if version else "unavailable"), ask("--mpi-library") or "?"


def _compiled(mpicc, env):
    with tempfile.TemporaryDirectory(prefix="dp_mpi_info_") as tmp:
        src, exe = os.path.join(tmp, "mpi_info.c"), os.path.join(tmp, "mpi_info")
        with open(src, "w") as f:
            f.write(_SOURCE)
        build = subprocess.run([mpicc, "-o", exe, src, "-ldl"], capture_output=True, text=True, timeout=120, env=env)
        if build.returncode != 0:
            raise RuntimeError(f"{mpicc} failed: {(build.stderr or build.stdout).strip()[-500:]}")
        proc = subprocess.run([exe], capture_output=True, text=True, timeout=60, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"the test program failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
        lines = proc.stdout.splitlines()
        return lines[1].strip() if len(lines) > 1 else "?", lines[0].strip(), _cuda_aware(exe, env)


def _cuda_aware(exe, env) -> str:
    """In words, what ``mpi_cuda_aware()`` in ``dace_partition_device_moves.h`` answers for this MPI: the
    environment's ``DACE_PARTITION_CUDA_AWARE`` if it is 0 or 1, else ``MPIX_Query_cuda_support()``, asked after
    ``MPI_Init`` (MPICH refuses it before) by one process started without a launcher."""
    force = env.get("DACE_PARTITION_CUDA_AWARE", "auto")
    if force in ("0", "1"):
        return f"{'yes' if force == '1' else 'no'} (DACE_PARTITION_CUDA_AWARE={force})"
    try:
        proc = subprocess.run([exe, "cuda"], capture_output=True, text=True, timeout=30, env=env)
        answer = int(proc.stdout.split()[0]) if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        answer = None
    if answer is None:
        return "unknown (the query program failed)"
    if answer < 0:
        return "no (the library has no MPIX_Query_cuda_support): GPU halos go through pinned host buffers"
    return ("yes (MPIX_Query_cuda_support): GPU halos give MPI device pointers" if answer == 1 else
            "no (MPIX_Query_cuda_support() is 0): GPU halos go through pinned host buffers")


def mpi_info() -> MpiInfo:
    """The MPI library that programs built in this process link (see the module docstring)."""
    from .launchers import choose_launcher, mpi_environment
    env = mpi_environment()
    m4_version, m4_library = _from_mpi4py(env)
    try:
        launcher = str(choose_launcher())
    except Exception as e:  # no launcher at all: say so rather than fail
        launcher = f"none ({e})"
    mpicc = _mpicc(env)
    if mpicc:
        try:
            version, library, cuda_aware = _compiled(mpicc, env)
            return MpiInfo(version, library, "compiled",
                           f"compiling and running MPI_Get_library_version with {mpicc}",
                           env.get("MPI_HOME", ""), m4_version, m4_library, launcher, cuda_aware)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            why = f"the mpicc test failed ({e}); answer from mpi4py"
    else:
        why = "no mpicc (MPI_HOME/bin or PATH): answer from mpi4py, not from a compiled program"
    return MpiInfo(m4_version, m4_library, "mpi4py", why, env.get("MPI_HOME", ""), m4_version, m4_library,
                   launcher)
