"""What a lowered program is built with: MPI, the BLAS of its local kernels, the C++ compiler.

Every rank-local MatMul / Gemm / Gemv / batched matmul runs on a BLAS library when one is available;
DaCe's pure expansion (an i-j-k map with an atomic add per multiply-add) is 100x slower. The choice:

1. ``DACE_PARTITION_BLAS`` = ``mkl`` | ``openblas`` | ``pure``, when set;
2. on a CPU that is not Intel's, a system OpenBLAS when there is one: MKL takes a slower path there
   (measured on an AMD EPYC, one thread, the same programs: matmul 1024^3 1.03-1.04x of NumPy's time on
   MKL 2026.2, 1.00-1.01x on Debian's OpenBLAS 0.3.21; the MLP 1.02-1.05x against 0.98-1.00x);
3. MKL from PyPI (the ``mkl`` extra: ``mkl-devel`` + ``mkl-include``) when installed in this Python
   environment. Those wheels ship ``libmkl_rt.so.N`` but no ``libmkl_rt.so`` and keep ``mkl.h`` outside
   any MKL prefix, so a private prefix of links is made for DaCe's MKL environment (``MKLROOT``);
4. a system MKL (``MKLROOT`` set) or OpenBLAS (Debian's ``libopenblas-dev`` + ``liblapacke-dev``);
5. else the pure expansion, and ``info()`` says so.

``info()`` (also ``python -m dace_partition info``) reports all three parts of the toolchain.
"""
import ctypes.util
import enum
import functools
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional


class Blas(enum.Enum):
    """BLAS used for the rank-local kernels; the value is DaCe's implementation name."""
    MKL = "MKL"
    OPENBLAS = "OpenBLAS"
    PURE = "pure"


@dataclass(frozen=True)
class BlasChoice:
    blas: Blas
    root: Optional[str] = None  # MKLROOT handed to DaCe's MKL environment
    version: str = ""
    why: str = ""

    def __str__(self):
        where = f" ({self.root})" if self.root else ""
        ver = f" {self.version}" if self.version else ""
        return f"{self.blas.value}{ver}{where}: {self.why}"


LAPACK_LIBRARIES = ("lapack", "linalg")  # DaCe's libraries whose nodes call LAPACK


def _env_lib() -> str:
    return os.path.join(sys.prefix, "lib")


def _pypi_mkl_version() -> str:
    try:
        from importlib import metadata
        return metadata.version("mkl")
    except Exception:
        return ""


def _mkl_prefix_from_wheels() -> Optional[str]:
    """A prefix with ``include/mkl.h`` and ``lib/libmkl_rt.so`` made of links into the MKL wheels' files,
    or None when they are not installed. Every MKL library is linked, since ``libmkl_rt`` loads its
    siblings from the directory it was loaded from."""
    lib = _env_lib()
    rt = sorted(glob.glob(os.path.join(lib, "libmkl_rt.so.*")))
    header = os.path.join(sys.prefix, "include", "mkl.h")
    if not rt or not os.path.isfile(header):
        return None
    key = hashlib.sha1(f"{sys.prefix}:{rt[-1]}".encode()).hexdigest()[:12]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for root in (os.path.join(base, "dace_partition", f"mkl-{key}"),
                 os.path.join(tempfile.gettempdir(), f"dace_partition-mkl-{key}")):
        try:
            _make_prefix(root, lib, os.path.dirname(header), rt[-1])
            return root
        except OSError:
            continue
    return None


def _make_prefix(root: str, lib: str, include: str, rt: str):
    if os.path.isfile(os.path.join(root, "lib", "libmkl_rt.so")):
        return
    tmp = f"{root}.tmp{os.getpid()}"
    os.makedirs(os.path.join(tmp, "lib"), exist_ok=True)
    os.symlink(include, os.path.join(tmp, "include"))
    for f in glob.glob(os.path.join(lib, "libmkl_*.so*")) + glob.glob(os.path.join(lib, "libiomp5*.so*")) + \
            glob.glob(os.path.join(lib, "libtbb*.so*")):
        os.symlink(f, os.path.join(tmp, "lib", os.path.basename(f)))
    os.symlink(rt, os.path.join(tmp, "lib", "libmkl_rt.so"))
    try:
        os.rename(tmp, root)  # atomic: concurrent builders see a whole prefix or none
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isfile(os.path.join(root, "lib", "libmkl_rt.so")):
            raise


def _system_mkl() -> Optional[str]:
    root = os.environ.get("MKLROOT")
    if root and os.path.isfile(os.path.join(root, "include", "mkl.h")) and (
            glob.glob(os.path.join(root, "lib", "libmkl_rt.so")) or
            glob.glob(os.path.join(root, "lib", "intel64", "libmkl_rt.so"))):
        return root
    return None


def _openblas() -> bool:
    return bool(ctypes.util.find_library("openblas") and ctypes.util.find_library("lapacke")
                and any(os.path.isfile(os.path.join(d, "cblas.h"))
                        for d in ("/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu",
                                  "/usr/include/openblas")))


def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...; empty where Linux does not say)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@functools.lru_cache(maxsize=None)
def _choose(requested: str, vendor: Optional[str] = None) -> BlasChoice:
    if requested not in ("", "auto", "mkl", "openblas", "pure"):
        raise ValueError(f"DACE_PARTITION_BLAS must be mkl, openblas, pure or auto, got {requested!r}")
    vendor = cpu_vendor() if vendor is None else vendor
    if requested in ("", "auto") and vendor not in ("", "GenuineIntel") and _openblas():
        return BlasChoice(Blas.OPENBLAS, None, "", f"system OpenBLAS (cblas.h, libopenblas, liblapacke); "
                          f"MKL is slower on this {vendor} CPU (DACE_PARTITION_BLAS=mkl to use it)")
    if requested in ("", "auto", "mkl"):
        root = _mkl_prefix_from_wheels()
        if root:
            return BlasChoice(Blas.MKL, root, _pypi_mkl_version(), "MKL from PyPI (mkl-devel, mkl-include)")
        root = _system_mkl()
        if root:
            return BlasChoice(Blas.MKL, root, "", "system MKL (MKLROOT)")
        if requested == "mkl":
            raise RuntimeError("DACE_PARTITION_BLAS=mkl, but neither the MKL wheels (pip install "
                               "'dace-partition[mkl]') nor MKLROOT with include/mkl.h and lib/libmkl_rt.so exist")
    if requested in ("", "auto", "openblas"):
        if _openblas():
            return BlasChoice(Blas.OPENBLAS, None, "", "system OpenBLAS (cblas.h, libopenblas, liblapacke)")
        if requested == "openblas":
            raise RuntimeError("DACE_PARTITION_BLAS=openblas, but cblas.h, libopenblas or liblapacke is missing "
                               "(Debian: apt-get install libopenblas-dev liblapacke-dev)")
    why = "chosen" if requested == "pure" else "no BLAS found: install the 'mkl' extra or OpenBLAS"
    return BlasChoice(Blas.PURE, None, "", why)


def blas() -> BlasChoice:
    """The BLAS that builds in this process use (see the module docstring)."""
    return _choose(os.environ.get("DACE_PARTITION_BLAS", "").strip().lower())


def _restore_environ(saved: dict, keys=None):
    for k in list(os.environ) if keys is None else keys:
        if k not in saved:
            os.environ.pop(k, None)
    for k, v in saved.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


@contextmanager
def preserved_state(environ=True):
    """Restores DaCe's configuration and the process environment (``os.environ``; only the named
    variables when ``environ`` is a list of names, none when False) on exit, also when the body raises.

    DaCe's own ``dace.config.temporary_config`` restores nothing when its body raises (it has no
    ``finally``): a failed build left ``library.blas.default_implementation`` at ``MKL`` without the
    ``MKLROOT`` that goes with it, so every later DaCe build in the process failed with ``mkl.h: No such
    file or directory``."""
    import copy
    from ..compat import config_dict
    config = copy.deepcopy(config_dict())
    keys = None if environ is True else list(environ or ())
    saved = dict(os.environ) if keys is None else {k: os.environ[k] for k in keys if k in os.environ}
    try:
        yield
    finally:
        config_dict().clear()
        config_dict().update(config)
        _restore_environ(saved, keys)


@contextmanager
def blas_build(choice: Optional[BlasChoice] = None):
    """DaCe settings under which a build uses ``choice``: library nodes without an implementation of
    their own (every BLAS node the MatMul/Einsum expansions create) expand to it. LAPACK's nodes
    (``np.linalg.solve``, ``inv``, ``cholesky``) take the same library: DaCe's default for them is
    OpenBLAS, and one build naming both MKL and OpenBLAS fails in CMake (``BLA_VENDOR`` redefined).
    Everything it sets (the default implementations, ``MKLROOT``) is restored on exit, also when the
    build fails."""
    import dace
    choice = choice or blas()
    with preserved_state(environ=["MKLROOT"]):
        dace.Config.set("library", "blas", "default_implementation", value=choice.blas.value)
        if choice.blas is not Blas.PURE:  # LAPACK has no pure expansion: DaCe's default stays
            for library in LAPACK_LIBRARIES:
                dace.Config.set("library", library, "default_implementation", value=choice.blas.value)
        if choice.root:
            os.environ["MKLROOT"] = choice.root
        yield choice


def runtime_environment(env: dict) -> dict:
    """Variables the ranks need at run time: MKL threads through GNU OpenMP (the runtime DaCe's code
    uses), so ``OMP_NUM_THREADS`` governs both and no second OpenMP runtime starts."""
    env.setdefault("MKL_THREADING_LAYER", "GNU")
    return env


@dataclass(frozen=True)
class Info:
    """What builds in this process use: printable, e.g. ``print(dp.info())``."""
    mpi: str
    mpi_home: str
    mpiexec: str
    blas: BlasChoice
    compiler: str

    def __str__(self):
        return "\n".join([
            "dace-partition toolchain",
            f"  MPI:      {self.mpi}",
            f"  MPI_HOME: {self.mpi_home or '(system: mpicc on PATH)'}",
            f"  launcher: {self.mpiexec}",
            f"  BLAS:     {self.blas}",
            f"  compiler: {self.compiler}",
        ])


def _compiler() -> str:
    import dace
    exe = dace.Config.get("compiler", "cpu", "executable") or os.environ.get("CXX") or shutil.which("c++") or "c++"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
        return f"{exe}: {out.splitlines()[0]}" if out else exe
    except (OSError, subprocess.SubprocessError):
        return f"{exe} (not runnable)"


def info() -> Info:
    """MPI library, BLAS and C++ compiler that a build in this process uses."""
    from .launchers import mpi_environment, mpiexec_command
    try:
        from mpi4py import MPI
        version = MPI.Get_library_version().strip().splitlines()[0]
    except Exception as e:  # no MPI at all: say so rather than fail
        version = f"unavailable ({e})"
    env = mpi_environment()
    try:
        launcher = " ".join(mpiexec_command(1)[:-2])
    except Exception as e:
        launcher = f"none ({e})"
    return Info(version, env.get("MPI_HOME", ""), launcher, blas(), _compiler())
