"""Building lowered programs for CUDA with DaCe 1.0.2 and the CUDA 13 toolkit.

DaCe 1.0.2 does not build with CUDA 13 out of the box. :func:`cuda_config` applies three fixes for the
duration of a build, through DaCe's configuration and CMake hooks only (nothing in site-packages is
edited and the user's ``.dace.conf`` is left alone):

1. **GPU architecture.** ``compiler.cuda.cuda_arch`` defaults to 60 (sm_60), which nvcc 13 rejects. The
   architecture is ``$DACE_PARTITION_CUDA_ARCH`` if set, else the local GPU's compute capability from
   ``nvidia-smi``, else :data:`DEFAULT_CUDA_ARCH` (90, Hopper). It is also passed to CMake as
   ``LOCAL_CUDA_ARCHITECTURES`` so DaCe's own probe (``nvcc --run get_cuda_arch.cpp``) is skipped.
2. **C++17 for CUDA.** DaCe's CMakeLists sets ``CMAKE_CUDA_STANDARD 14``; CUDA 13's Thrust and CUB need
   C++17. The :class:`DacePartitionCUDA` environment sets ``CMAKE_CUDA_STANDARD=17`` through its
   ``cmake_variables``, which DaCe's CMakeLists applies after its own setting and before it creates the
   library target.
3. **CUB 3.** ``dace/reduction.h`` and ``dace/cuda/multidim_gbar.cuh`` use ``cub::CountingInputIterator``,
   ``cub::TransformInputIterator`` and ``CTA_SYNC``, all removed in CUB 3. DaCe includes those headers
   with quoted relative includes, so an include directory placed before DaCe's cannot replace them;
   instead every nvcc translation unit pre-includes ``dace_partition_cuda.h`` (``nvcc -include``), whose
   shim defines the three names in namespace ``cub`` (from Thrust and ``__syncthreads``) when
   ``CUB_VERSION >= 300000``. With an older CUB the shim is empty.

The same pre-included header also mends two defects of DaCe's GPU atomics (int64 ``atomicMin``/``atomicMax``
without a CUDA overload; an "atomic" product that is a plain update) and gives a pinned persistent array
its ``cudaMallocHost`` overload; docs/gpu.md lists them.
"""
import contextlib
import ctypes.util
import glob
import os
import shutil
import subprocess
from typing import List, Optional

import dace
import dace.library
from dace.config import Config

from .environment import RUNTIME_INCLUDE, DacePartitionMPI

#: Architecture used when no GPU is visible and $DACE_PARTITION_CUDA_ARCH is unset (sm_90: H100/GH200).
DEFAULT_CUDA_ARCH = "90"
ARCH_ENV = "DACE_PARTITION_CUDA_ARCH"
CUDA_HEADER = os.path.join(RUNTIME_INCLUDE, "dace_partition_cuda.h")


@dace.library.environment
class DacePartitionCUDA:
    """Per-rank GPU selection and the CUDA 13 build settings (linked into every GPU-lowered program)."""
    cmake_minimum_version = None
    cmake_packages = ["MPI"]
    cmake_variables = staticmethod(lambda: cuda_cmake_variables())
    cmake_includes = [RUNTIME_INCLUDE, "${MPI_CXX_HEADER_DIR}"]
    cmake_libraries = []
    cmake_compile_flags = []
    cmake_link_flags = []
    cmake_files = []
    headers = ["dace_partition_cuda.h"]
    state_fields = []
    init_code = "dace_partition_cuda::select_device();"
    finalize_code = ""
    dependencies = [DacePartitionMPI]


CUDA_ENVIRONMENT = DacePartitionCUDA.full_class_path()


def nvcc_path() -> Optional[str]:
    """The nvcc that DaCe's CMake build would use, or None."""
    cfg = Config.get("compiler", "cuda", "path")
    for cand in ([os.path.join(cfg, "bin", "nvcc")] if cfg else []) + \
            [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"), shutil.which("nvcc")]:
        if cand and os.path.exists(cand):
            return cand
    return None


def gpu_available() -> bool:
    """True when a CUDA GPU can be used here (``nvidia-smi -L`` lists one). Never loads the CUDA runtime.

    Set ``DACE_PARTITION_NO_GPU=1`` to force False.
    """
    return gpu_count() > 0


def gpu_count() -> int:
    """The CUDA GPUs ``nvidia-smi -L`` lists here (0 without a GPU or with ``DACE_PARTITION_NO_GPU=1``)."""
    return len(gpu_names())


def gpu_names() -> List[str]:
    """The names of the CUDA GPUs ``nvidia-smi -L`` lists here, in device order (none without a GPU or with
    ``DACE_PARTITION_NO_GPU=1``)."""
    if os.environ.get("DACE_PARTITION_NO_GPU"):
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"
    return [line.split(":", 1)[1].split("(UUID")[0].strip() for line in out.stdout.splitlines()
            if line.startswith("GPU") and ":" in line]


def cublas_available() -> bool:
    """True when cuBLAS can be built and linked here: ``cublas_v2.h`` in the CUDA toolkit of
    :func:`nvcc_path` and ``libcublas`` in its library folders or on the loader's path.

    ``DACE_PARTITION_BLAS=pure`` or ``DACE_PARTITION_GPU_BLAS=pure`` forces False (GEMMs then run as DaCe's
    pure GPU maps). ``DACE_PARTITION_GPU_BLAS=cublas`` forces True: to lower on a machine without cuBLAS for
    one that has it, or to run that lowering's data flow on the host (:mod:`~dace_partition.runtime.emulation`,
    where the GEMMs take DaCe's host expansion)."""
    forced = os.environ.get("DACE_PARTITION_GPU_BLAS", "").strip().lower()
    if forced not in ("", "auto", "pure", "cublas"):
        raise ValueError(f"DACE_PARTITION_GPU_BLAS must be cublas, pure or auto, got {forced!r}")
    if forced in ("pure", "cublas"):
        return forced == "cublas"
    if os.environ.get("DACE_PARTITION_BLAS", "").strip().lower() == "pure":
        return False
    nvcc = nvcc_path()
    if nvcc is None:
        return False
    root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    includes = [os.path.join(root, "include")] + glob.glob(os.path.join(root, "targets", "*", "include"))
    if not any(os.path.exists(os.path.join(d, "cublas_v2.h")) for d in includes):
        return False
    libdirs = [os.path.join(root, d) for d in ("lib64", "lib")] + glob.glob(os.path.join(root, "targets", "*", "lib"))
    return any(glob.glob(os.path.join(d, "libcublas.so*")) for d in libdirs) or \
        ctypes.util.find_library("cublas") is not None


def detect_cuda_arch() -> Optional[str]:
    """Compute capability of the first local GPU as DaCe writes it ("90"), via nvidia-smi; None if none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    for line in out.stdout.splitlines():
        cap = line.strip().replace(".", "")
        if cap.isdigit():
            return cap
    return None


def cuda_arch() -> str:
    """$DACE_PARTITION_CUDA_ARCH (e.g. "80" or "80,90"), else the detected GPU's, else DEFAULT_CUDA_ARCH."""
    env = os.environ.get(ARCH_ENV, "").strip()
    if env:
        return env.replace("sm_", "").replace(";", ",")
    return detect_cuda_arch() or DEFAULT_CUDA_ARCH


@contextlib.contextmanager
def cuda_config(arch: Optional[str] = None):
    """DaCe configuration under which a GPU-lowered SDFG builds with CUDA 13 (see the module docstring).

    Restores the previous configuration on exit.
    """
    from .toolchain import preserved_state
    arch = arch or cuda_arch()
    with preserved_state(environ=False):  # also when the build fails (dace's temporary_config does not)
        Config.set("compiler", "cuda", "backend", value="cuda")
        Config.set("compiler", "cuda", "cuda_arch", value=arch)
        if not Config.get("compiler", "cuda", "path"):
            nvcc = nvcc_path()
            if nvcc:
                Config.set("compiler", "cuda", "path", value=os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
        cmake = Config.get("compiler", "extra_cmake_args") or ""
        archs = ";".join(a for a in arch.split(",") if a)
        Config.set("compiler", "extra_cmake_args", value=f'{cmake} -DLOCAL_CUDA_ARCHITECTURES="{archs}"'.strip())
        yield arch


def cuda_cmake_variables():
    """CMake variables of the CUDA environment, evaluated when DaCe configures a build.

    DaCe's CMakeLists applies them after ``enable_language(CUDA)`` (so the pre-include does not reach
    CMake's compiler probe) and before the library target exists: C++17 for CUDA, and the CUB 3 shim
    pre-included into every nvcc translation unit, on top of ``compiler.cuda.args``.
    """
    flags = Config.get("compiler", "cuda", "args") or ""
    return {
        "CMAKE_CUDA_STANDARD": "17",
        "CMAKE_CUDA_STANDARD_REQUIRED": "ON",
        "CMAKE_CUDA_FLAGS": f"{flags} -I{RUNTIME_INCLUDE} -include {CUDA_HEADER}".strip(),
    }


def uses_gpu(sdfg) -> bool:
    """True when any array of the SDFG (or its nested SDFGs) lives on the GPU or any map runs on it."""
    from dace import dtypes, nodes
    for sd in sdfg.all_sdfgs_recursive():
        if any(desc.storage in (dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared)
               for desc in sd.arrays.values()):
            return True
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.MapEntry) and n.map.schedule in dtypes.GPU_SCHEDULES:
            return True
    return False
