"""device="gpu": lowering, CUDA 13 builds (no GPU needed) and, where a GPU exists, real runs under mpiexec.

The CUDA builds are shared by every test that needs the same program (module-level cache). A CUDA build
is never *called* here unless ``nvidia-smi -L`` lists a GPU: calling one without a GPU segfaults.
"""
import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import dace
from dace import dtypes, nodes

import dace_partition as dp
from dace_partition.runtime import cuda_build
from dace_partition.solvers.node import DistributedMemlet

import programs
import programs_gpu

NVCC = cuda_build.nvcc_path()
HAVE_GPU = cuda_build.gpu_available()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) not found: CUDA code cannot be compiled")
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here (nvidia-smi -L lists none): the CUDA "
                               "builds are compiled but not run")

MATMUL_GRIDS = [(1, 1, 1), (4, 1, 1), (1, 1, 4), (2, 2, 2)]
UNEVEN_MATMUL_GRIDS = [(2, 2, 1), (1, 1, 2)]

# name -> (program factory, schedule factory, inputs factory, reference)
CASES = {
    "bcast_add": (lambda: programs.bcast_add.to_sdfg(), lambda s: {dp.maps(s)[0].name: (2, 2, 1)},
                  lambda r: dict(x=r.integers(0, 100, (4, 8, 16)), y=r.integers(0, 100, (8, 16))),
                  lambda x, y: x + y),
    "sum_rows": (lambda: programs.sum_rows.to_sdfg(), lambda s: {"Reduce.reduce_output": (2, 2)},
                 lambda r: dict(x=r.random((16, 16))), lambda x: x.sum(axis=1)),
    "softmax": (programs_gpu.fused_softmax, programs_gpu.leading_dim_schedule,
                lambda r: dict(x=r.random((16, 32))), programs_gpu.softmax_reference),
}
for _g in MATMUL_GRIDS:
    CASES["matmul_" + "x".join(map(str, _g))] = (
        lambda: programs.matmul.to_sdfg(), (lambda g: lambda s: {"_MatMult_.gemm_map": g})(_g),
        lambda r: dict(a=r.random((64, 64)), b=r.random((64, 64))), lambda a, b: a @ b)
for _g in UNEVEN_MATMUL_GRIDS:  # 37 x 37: the pure expansion, its product on cuBLAS where the toolkit has it
    CASES["matmul_uneven_" + "x".join(map(str, _g))] = (
        lambda: programs.matmul_n(37).to_sdfg(), (lambda g: lambda s: {"_MatMult_.gemm_map": g})(_g),
        lambda r: dict(a=r.random((37, 37)), b=r.random((37, 37))), lambda a, b: a @ b)


@functools.lru_cache(maxsize=None)
def lowered_gpu(name):
    make, schedule, _, _ = CASES[name]
    sdfg = make()
    sdfg.name = f"tgpu_{name}"
    dp.lower(sdfg, schedule(sdfg), device="gpu")
    return sdfg


@functools.lru_cache(maxsize=None)
def built(name):
    """Generates and compiles (DaCe's full CMake build with nvcc) the GPU-lowered program once."""
    sdfg = lowered_gpu(name)
    return sdfg, dp.runtime.launch.build(sdfg)


def _sources(folder, sub, ext):
    return "\n".join(open(f).read() for f in sorted(glob.glob(os.path.join(folder, "src", sub, f"*.{ext}"))))


# ---------------------------------------------------------------- lowering (no compiler needed)

@pytest.mark.parametrize("name", ["bcast_add", "sum_rows", "matmul_2x2x2"])
def test_lowered_structure(name):
    sdfg = lowered_gpu(name)
    gpu_work = [n for n, _ in sdfg.all_nodes_recursive()
                if isinstance(n, nodes.MapEntry) and n.map.schedule == dtypes.ScheduleType.GPU_Device or
                isinstance(n, nodes.LibraryNode) and n.implementation == "cuBLAS"]
    assert gpu_work, "no map was scheduled on the GPU and no GEMM on cuBLAS"
    gpu_arrays = [a for sd in sdfg.all_sdfgs_recursive() for a, d in sd.arrays.items()
                  if d.storage == dtypes.StorageType.GPU_Global]
    assert gpu_arrays
    # Communication stays on host buffers: every DistributedMemlet touches only CPU-side arrays.
    for n, st in sdfg.all_nodes_recursive():
        if isinstance(n, DistributedMemlet):
            for e in st.in_edges(n) + st.out_edges(n):
                assert sdfg.arrays[e.data.data].storage not in (dtypes.StorageType.GPU_Global,)
    # No library node is left for the GPU (expanded to GPU maps), except the DistributedMemlets and cuBLAS GEMMs.
    assert not [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, nodes.LibraryNode) and
                not isinstance(n, DistributedMemlet) and n.implementation != "cuBLAS"]
    assert cuda_build.uses_gpu(sdfg)
    assert any("runs on the GPU" in note for k in dp.report(sdfg).kernels for note in k.notes)
    assert dp.runtime.launch.ranks_needed(sdfg) == {"bcast_add": 4, "sum_rows": 4, "matmul_2x2x2": 8}[name]


def test_row_reductions_run_as_warp_reductions_without_atomics(monkeypatch):
    """A softmax's row max and row sum, kept apart from their maps, run as DaCe's GPU reduction (a warp per
    row: strided loads into a register, then shuffles), with no write-conflict resolution on GPU memory,
    i.e. no atomic update per element: that made a float32[8192, 4096] softmax take 58 ms per call on an
    H200 (JAX: 0.14 ms)."""
    monkeypatch.setenv("DACE_PARTITION_GPU_FUSION", "0")
    sdfg = programs_gpu.softmax.to_sdfg()
    sdfg.name = "tgpu_softmax_warp_reductions"
    dp.lower(sdfg, programs_gpu.leading_dim_schedule(sdfg), device="gpu")
    warps = [n for n, _ in sdfg.all_nodes_recursive()
             if isinstance(n, nodes.MapEntry) and n.map.schedule == dtypes.ScheduleType.GPU_ThreadBlock]
    assert len(warps) == 2, "the row max and the row sum should each be a warp reduction"
    assert all(int(w.map.range.size()[0]) == 32 for w in warps)
    for sd in sdfg.all_sdfgs_recursive():
        for st in sd.states():
            for e in st.edges():
                if e.data.wcr is not None and e.data.data in sd.arrays:
                    assert sd.arrays[e.data.data].storage != dtypes.StorageType.GPU_Global, \
                        f"an atomic update of {e.data.data} in GPU memory ({st.label})"


def test_reductions_keep_the_pure_expansion_when_asked(monkeypatch):
    """``DACE_PARTITION_GPU_REDUCTIONS=pure``: the pure expansion (its kernels also run on the host)."""
    monkeypatch.setenv("DACE_PARTITION_GPU_REDUCTIONS", "pure")
    sdfg = programs_gpu.softmax.to_sdfg()
    sdfg.name = "tgpu_softmax_pure_reductions"
    dp.lower(sdfg, programs_gpu.leading_dim_schedule(sdfg), device="gpu")
    assert not [n for n, _ in sdfg.all_nodes_recursive()
                if isinstance(n, nodes.MapEntry) and n.map.schedule == dtypes.ScheduleType.GPU_ThreadBlock]


@pytest.mark.parametrize("cublas", [True, False])
def test_matrix_products_on_cublas_when_the_toolkit_has_it(cublas, monkeypatch):
    monkeypatch.setattr(cuda_build, "cublas_available", lambda: cublas)
    sdfg = programs.matmul.to_sdfg()
    sdfg.name = f"tgpu_cublas_{cublas}"
    dp.lower(sdfg, {"_MatMult_.gemm_map": (2, 2, 1)}, device="gpu")
    from dace.libraries.blas import Gemm
    gemms = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Gemm)]
    if cublas:
        assert [g.implementation for g in gemms] == ["cuBLAS"], "the tile product is not one cuBLAS GEMM"
        assert dp.report(sdfg).blas.startswith("cuBLAS")
    else:
        assert not any(isinstance(n, nodes.LibraryNode) and not isinstance(n, DistributedMemlet)
                       for n, _ in sdfg.all_nodes_recursive()), "a library node is left for a toolkit without cuBLAS"
        assert dp.report(sdfg).blas.startswith("pure")


SM, SN, SK = (dace.symbol(n) for n in ("SM", "SN", "SK"))


@dace.program
def matmul_symbolic(a: dace.float64[SM, SK], b: dace.float64[SK, SN]):
    return a @ b


def _uneven_matmul_on_gpu(n, grid, tag):
    """``a @ b`` lowered for the GPU on tiles of unequal widths (``n`` not a multiple of the grid), or
    sized at run time (``n=None``: sizes left symbolic): the library node becomes its pure expansion."""
    sdfg = programs.matmul_n(n).to_sdfg() if n else matmul_symbolic.to_sdfg()
    sdfg.name = f"tgpu_uneven_matmul_{tag}_{n}_{'x'.join(map(str, grid))}"
    dp.lower(sdfg, {"_MatMult_.gemm_map": grid}, device="gpu")
    return sdfg


@pytest.mark.parametrize("cublas", [True, False])
@pytest.mark.parametrize("n,grid", [(37, (2, 2, 1)), (37, (1, 1, 2)), (None, (2, 1, 2))])
def test_matrix_products_on_uneven_tiles_run_on_cublas(n, grid, cublas, monkeypatch):
    """On uneven tiles (or tiles sized at run time) the matrix product is the pure expansion, tiled exactly.
    Its product map ran as DaCe's GPU map, one thread per output element with an atomic add per
    multiply-add; with cuBLAS it is now one cuBLAS GEMM of the rank's exact block between GPU copy kernels
    that pack the operands and unpack the product. Without cuBLAS the expansion's maps stay (packing them
    for a pure GEMM would only add copies)."""
    monkeypatch.setattr(cuda_build, "cublas_available", lambda: cublas)
    sdfg = _uneven_matmul_on_gpu(n, grid, cublas)
    from dace.libraries.blas import Gemm
    gemms = [(g, st) for g, st in sdfg.all_nodes_recursive() if isinstance(g, Gemm)]
    maps = [m.map for m, st in sdfg.all_nodes_recursive() if isinstance(m, nodes.MapEntry) and st.entry_node(m) is None]
    notes = [note for k in dp.report(sdfg).kernels for note in k.notes]
    assert any("pure expansion" in note for note in notes)
    on_blas = any("'_MatMult_.gemm_map'" in note and "GEMM on BLAS" in note for note in notes)
    products = [m for m in maps if len(m.params) == 3]  # the expansion's i, j, k map
    if cublas:
        assert [g.implementation for g, _ in gemms] == ["cuBLAS"] and on_blas and not products, notes
        assert gemms[0][1].sdfg is not sdfg, "the GEMM is not inside the expansion (the rank's exact block)"
        packs = [m for m in maps if "_pack_" in m.label or m.label.endswith("_unpack_map")]
        assert len(packs) == 3 and all(m.schedule == dtypes.ScheduleType.GPU_Device for m in packs)
        assert dp.report(sdfg).blas.startswith("cuBLAS")
        _assert_gemm_buffers_allocated_once(sdfg)
    else:
        assert not gemms and not on_blas and [m.schedule for m in products] == [dtypes.ScheduleType.GPU_Device]


def _assert_gemm_buffers_allocated_once(sdfg):
    """The pack buffers of the GEMMs inside expansions live in GPU memory and are allocated when the
    program starts: sized without the rank's grid coordinates (known only later), for the largest block.
    Each GEMM takes this call's block of them, which may depend on those coordinates."""
    top = {str(s) for s in sdfg.free_symbols} | set(sdfg.constants)
    bufs = [(sd, a, d) for sd in sdfg.all_sdfgs_recursive() for a, d in sd.arrays.items() if a.startswith("__gemm_")]
    assert bufs and all(sd is not sdfg for sd, _, _ in bufs), "no GEMM inside an expansion"
    for sd, a, d in bufs:
        assert d.storage == dtypes.StorageType.GPU_Global, a
        assert d.lifetime == dtypes.AllocationLifetime.Persistent, f"{a} is allocated in every call"
        assert {str(s) for s in d.free_symbols} <= top, f"{a} is sized by {d.shape}, unknown when the program starts"
    edges = [e for g, st in sdfg.all_nodes_recursive() if isinstance(g, nodes.LibraryNode)
             and not isinstance(g, DistributedMemlet) for e in st.all_edges(g)]
    assert edges and all(e.data.data.startswith("__gemm_") for e in edges), "a BLAS call not on the pack buffers"
    return [e.data.subset for e in edges]


@pytest.mark.parametrize("name,specialized", [("gemm", False), ("gesummv", False), ("k2mm", False), ("mlp", False),
                                              ("gemm", True), ("mlp", True)])
def test_gemm_buffers_of_conformance_programs_are_allocated_once(name, specialized, monkeypatch):
    """The conformance programs' products are written on sizes left symbolic, so on the GPU each is one
    cuBLAS GEMM of a rank's exact block inside the expansion. Its pack buffers were allocated and freed in
    every call (a ``cudaMalloc`` and a synchronising ``cudaFree`` each); now once, at the largest block,
    with each call's GEMM on a block that depends on the rank. ``specialized``: the sizes made constants
    (as NPBench's harness does, on uneven tiles), which the GPU wrappers do not pass to nested SDFGs as
    symbols: the buffers' sizes are numbers, and DaCe's code generator (run here, without a compiler)
    can size them in the program's init."""
    from conformance.harness import symbol_values
    from conformance.programs import CASES as CONFORMANCE
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "cublas")
    case = CONFORMANCE[name]
    sdfg = case.program.to_sdfg()
    schedule = case.schedule(2, dp.maps(sdfg))  # the case finds its maps by their symbols
    if specialized:
        sdfg.specialize({k: v | 1 for k, v in symbol_values(case).items()})  # odd sizes: uneven on 2 ranks
    sdfg.name = f"tgpu_gemm_buffers_{name}_{specialized}"
    dp.lower(sdfg, schedule, device="gpu")
    blocks = _assert_gemm_buffers_allocated_once(sdfg)
    top = {str(s) for s in sdfg.free_symbols} | set(sdfg.constants)
    assert any({str(s) for s in b.free_symbols} - top for b in blocks), "no GEMM runs on a rank's own block"
    if specialized:
        bufs = [d for sd in sdfg.all_sdfgs_recursive() for a, d in sd.arrays.items() if a.startswith("__gemm_")]
        assert all(not d.free_symbols for d in bufs), [d.shape for d in bufs]
        sdfg.generate_code()


@pytest.mark.parametrize("grid", [(2, 1, 2), pytest.param((2, 2, 1), marks=pytest.mark.slow)])
def test_matrix_products_on_uneven_tiles_run_like_numpy(grid, rng, monkeypatch):
    """The cuBLAS lowering of an uneven matrix product (rows and K split unevenly; rows and columns), its GPU
    data flow run on the host (the GEMM by DaCe's host expansion) under mpiexec, equal to NumPy."""
    from dace_partition.runtime.emulation import host_kernels, on_host
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "cublas")  # as lowered for a machine with cuBLAS
    with host_kernels():
        sdfg = _uneven_matmul_on_gpu(37, grid, "run")
    a, b = rng.standard_normal((37, 37)), rng.standard_normal((37, 37))
    got = dp.run(on_host(sdfg), int(np.prod(grid)), timeout=300, a=a, b=b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


def test_gpu_blas_can_be_forced_either_way(monkeypatch):
    """``DACE_PARTITION_GPU_BLAS`` lowers for a toolkit with (``cublas``) or without (``pure``) cuBLAS,
    whatever this machine's toolkit has; ``DACE_PARTITION_BLAS=pure`` still means no BLAS anywhere."""
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "cublas")
    assert cuda_build.cublas_available()
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "pure")
    assert not cuda_build.cublas_available()
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "auto")
    monkeypatch.setenv("DACE_PARTITION_BLAS", "pure")
    assert not cuda_build.cublas_available()
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "mkl")
    with pytest.raises(ValueError, match="DACE_PARTITION_GPU_BLAS must be cublas, pure or auto, got 'mkl'"):
        cuda_build.cublas_available()


def test_cpu_lowering_uses_no_gpu():
    sdfg = programs.bcast_add.to_sdfg()
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, 2, 1)})
    assert not cuda_build.uses_gpu(sdfg)


def test_bad_device():
    with pytest.raises(ValueError, match="device"):
        dp.lower(programs.add5.to_sdfg(), {}, device="tpu")


# ---------------------------------------------------------------- CUDA 13 configuration

def test_cuda_arch_override(monkeypatch):
    monkeypatch.setenv(cuda_build.ARCH_ENV, "sm_80")
    assert cuda_build.cuda_arch() == "80"
    monkeypatch.setenv(cuda_build.ARCH_ENV, "80;90")
    assert cuda_build.cuda_arch() == "80,90"


def test_cuda_arch_default_without_gpu(monkeypatch):
    monkeypatch.delenv(cuda_build.ARCH_ENV, raising=False)
    monkeypatch.setattr(cuda_build, "detect_cuda_arch", lambda: None)
    assert cuda_build.cuda_arch() == cuda_build.DEFAULT_CUDA_ARCH == "90"


def test_cuda_config_is_temporary():
    from dace.config import Config
    before = (Config.get("compiler", "cuda", "cuda_arch"), Config.get("compiler", "extra_cmake_args"))
    with cuda_build.cuda_config("86") as arch:
        assert arch == "86"
        assert Config.get("compiler", "cuda", "cuda_arch") == "86"
        assert 'LOCAL_CUDA_ARCHITECTURES="86"' in Config.get("compiler", "extra_cmake_args")
        variables = cuda_build.cuda_cmake_variables()
        assert variables["CMAKE_CUDA_STANDARD"] == "17"
        assert f"-include {cuda_build.CUDA_HEADER}" in variables["CMAKE_CUDA_FLAGS"]
    assert (Config.get("compiler", "cuda", "cuda_arch"), Config.get("compiler", "extra_cmake_args")) == before


def _nvcc_with_dace(*args):
    """nvcc on a probe of DaCe's runtime headers: C++17, the default architecture, DaCe's include folder."""
    dace_inc = os.path.join(os.path.dirname(dace.__file__), "runtime", "include")
    return subprocess.run([NVCC, "-std=c++17", f"-arch=sm_{cuda_build.DEFAULT_CUDA_ARCH}", "-I", dace_inc, *args],
                          capture_output=True, text=True)


@needs_nvcc
@pytest.mark.slow  # every default CUDA build (test_cuda_build[softmax]) compiles DaCe's headers with the shim
def test_dace_runtime_needs_cub3_shim(tmp_path):
    """DaCe 1.0.2's runtime headers fail with CUDA 13's CUB 3 unless the shim is pre-included."""
    src = tmp_path / "probe.cu"
    src.write_text("#include <dace/dace.h>\n__global__ void k(cub::GridBarrier b) { b.Sync(); }\n")
    compile_only = ["-c", str(src), "-o", str(tmp_path / "probe.o")]
    bare = _nvcc_with_dace(*compile_only)
    shim = _nvcc_with_dace(*compile_only, "-DDACE_PARTITION_CUDA_H", "-include", cuda_build.CUDA_HEADER)
    assert shim.returncode == 0, shim.stderr[-3000:]
    version = subprocess.run([NVCC, "--version"], capture_output=True, text=True).stdout
    if "release 13" in version:
        assert bare.returncode != 0
        assert "CountingInputIterator" in bare.stderr or "CTA_SYNC" in bare.stderr


WCR_OPS = ("Sum", "Product", "Min", "Max", "Logical_And", "Logical_Or", "Logical_Xor", "Bitwise_And", "Bitwise_Or",
           "Bitwise_Xor", "Exchange")
WCR_TYPES = ("bool", "int8_t", "uint8_t", "int16_t", "uint16_t", "int", "unsigned int", "long", "unsigned long",
             "long long", "unsigned long long", "float", "double")


def _atomic_ptx(tmp_path, pairs, *defines):
    """Compiles one kernel per (reduction, type) pair calling DaCe's atomic write-conflict resolution, with
    the pre-included header; returns (nvcc's result, {pair: its kernel's atomic instructions})."""
    src, out = tmp_path / "wcr.cu", tmp_path / "wcr.ptx"
    src.write_text("#include <dace/dace.h>\n" + "".join(
        f'extern "C" __global__ void k{i}({t} *p, {t} v) '
        f"{{ dace::wcr_fixed<dace::ReductionType::{op}, {t}>::reduce_atomic(p, v); }}\n"
        for i, (op, t) in enumerate(pairs)))
    res = _nvcc_with_dace("-DDACE_PARTITION_CUDA_H", *defines, "-include", cuda_build.CUDA_HEADER, "-ptx", str(src),
                          "-o", str(out))
    if res.returncode != 0:
        return res, {}
    bodies = [b for b in out.read_text().split(".entry ")[1:] if re.match(r"k\d+\(", b)]
    atoms = {int(b[1:b.index("(")]): [ln.split()[0] for ln in b.splitlines() if ln.strip().startswith("atom")]
             for b in bodies}
    return res, {pair: atoms[i] for i, pair in enumerate(pairs)}


@needs_nvcc
def test_gpu_write_conflicts_are_atomic_for_every_reduction_and_type(tmp_path):
    """DaCe 1.0.2's atomic write-conflict resolution on the GPU: a product is a plain load, multiply and
    store (threads that multiply into one element race: the conformance column product came out wrong on
    an H100), and a logical and over booleans calls an atomicAnd that CUDA does not have (a compile error
    for ``np.logical_and.reduce``). With the pre-included header every reduction compiles for every
    scalar type (bitwise ones for integers) to a kernel with an atomic instruction."""
    alone, atoms = _atomic_ptx(tmp_path, [("Product", "long"), ("Product", "double")], "-DDACE_PARTITION_WCR_SHIM")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert atoms == {("Product", "long"): [], ("Product", "double"): []}  # DaCe's own: no atomic at all
    alone, _ = _atomic_ptx(tmp_path, [("Logical_And", "bool")], "-DDACE_PARTITION_WCR_SHIM")
    assert alone.returncode != 0 and "atomicAnd" in alone.stderr
    pairs = [(op, t) for op in WCR_OPS for t in WCR_TYPES if not (op.startswith("Bitwise") and t in ("float", "double"))]
    res, atoms = _atomic_ptx(tmp_path, pairs)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not [pair for pair, found in atoms.items() if not found], "pairs compiled without an atomic instruction"
    assert atoms[("Product", "long")] == ["atom.global.cas.b64"]
    assert atoms[("Logical_And", "bool")] == ["atom.cas.b32"]  # on the 32-bit word around the byte


@needs_nvcc
def test_nan_and_infinity_tests_compile_for_the_gpu_under_fast_math(tmp_path):
    """The IsNaN and IsInf helpers (bit tests, since --use_fast_math lets the compiler assume no NaN) are
    host-and-device functions: nvcc compiles them into a kernel for float and double, and the kernel tests
    bits (an integer comparison of the exponent) rather than a floating-point comparison it could fold."""
    from dace_partition.frontend.numpy_ops import FLOAT_CLASS_HELPERS
    src, out = tmp_path / "float_class.cu", tmp_path / "float_class.ptx"
    src.write_text("#include <dace/dace.h>\n" + FLOAT_CLASS_HELPERS + "\n".join(
        f'extern "C" __global__ void k_{t}(const {t} *x, int *o) '
        f"{{ o[0] = __dp_isnan(x[0]); o[1] = __dp_infsign(x[1]); }}" for t in ("float", "double")))
    res = _nvcc_with_dace("-DDACE_PARTITION_CUDA_H", "-include", cuda_build.CUDA_HEADER, "--use_fast_math", "-ptx",
                          str(src), "-o", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    ptx = out.read_text()
    assert "0x7F800000" in ptx.upper() or "2139095040" in ptx, "float exponent mask not in the kernel"
    assert not re.search(r"setp\.(nan|num)\.f", ptx)


# ---------------------------------------------------------------- CUDA builds (nvcc, no GPU needed)

DEFAULT_BUILDS = ("softmax", )  # each nvcc build costs ~15-30 s: the rest (bcast_add too) run under -m slow


@needs_nvcc
@pytest.mark.parametrize("name", [n if n in DEFAULT_BUILDS else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_cuda_build(name):
    sdfg, folder = built(name)
    cuda = _sources(folder, "cuda", "cu")
    cpp = _sources(folder, "cpu", "cpp")
    assert "__global__" in cuda or "cublasDgemm" in cpp + cuda, "no CUDA kernel and no cuBLAS call was generated"
    assert "cudaMemcpy" in cpp, "no host <-> GPU copies around the kernels"
    partitioned = dp.runtime.launch.ranks_needed(sdfg) > 1  # matmul (1,1,1): rank 0's GPU, no communication
    if partitioned:
        assert "dace_partition::scatter" in cpp and "dace_partition::gather" in cpp
    assert "dace_partition_cuda::select_device" in cpp + cuda
    libs = glob.glob(os.path.join(folder, "build", f"lib{sdfg.name}.so"))
    assert libs, "the shared library was not built"
    if shutil.which("nm"):
        syms = subprocess.run(["nm", "-D", libs[0]], capture_output=True, text=True).stdout
        moves = ["MPI_Alltoallw"] if "uneven" in name else ["MPI_Scatterv", "MPI_Gatherv"]  # uneven: general blocks
        expected = ["MPI_Comm_split_type", "cudaSetDevice"] + (moves if partitioned else [])
        for s in expected:
            assert s in syms, f"{s} is not referenced by the built library"
    if name.startswith("matmul") and cuda_build.cublas_available():
        assert "cublasDgemm" in cpp + cuda, "the tile product does not call cuBLAS"
    flags = open(glob.glob(os.path.join(folder, "build", "CMakeFiles", f"{sdfg.name}.dir", "flags.make"))[0]).read()
    assert "-std=c++17" in flags and "sm_" in flags and "sm_60" not in flags


@needs_nvcc
def test_resident_build_copies_only_what_the_report_lists():
    """The built softmax (one row kernel on rank-local buffers in GPU memory) makes exactly the host<->GPU
    copies that the report lists, allocates its buffers once (cudaMalloc / cudaMallocHost in the program's
    init, freed at exit) and launches one kernel, a block of one warp per row of 32 columns, whose block
    reductions nvcc compiled."""
    from dace_partition.passes.gpu import pcie_copies
    sdfg, folder = built("softmax")
    cpp = _sources(folder, "cpu", "cpp")
    cuda = _sources(folder, "cuda", "cu")
    res = dp.report(sdfg).residency
    assert len(res.copies) == len(pcie_copies(sdfg)) == 2
    assert cpp.count("cudaMemcpyAsync(") == 2, "a copy the report does not list was generated"
    start = cpp.index(f"__dace_init_{sdfg.name}(")
    init = cpp[start:cpp.index(f"__dace_exit_{sdfg.name}(", start)]
    for name in res.resident:
        assert f"cudaMalloc((void**)&__state->__0_{name}," in init, f"{name} is not allocated once at init"
    for _, twin in res.pinned:
        assert f"cudaMallocHost(&__state->__0_{twin}," in init
    assert "cudaMalloc(" not in cpp.replace(init, ""), "a buffer is allocated per call"
    assert cuda.count("cudaLaunchKernel(") == 1 and "dim3(1, 32, 1)" in cuda, "not one row kernel of 32 threads"
    assert "__DPR_BLOCK(max)" in cuda and "__shfl_xor_sync" in cuda


@functools.lru_cache(maxsize=None)
def jacobi_2x2(comm="packed"):
    """The conformance Jacobi time loop, 13 x 13 on a 2 x 2 grid (blocks of 6 and 5), built with nvcc, its
    halo exchanges ``packed`` (the default) or ``staged`` (``DACE_PARTITION_GPU_COMM``)."""
    from conformance.programs import CASES as CONFORMANCE
    sdfg = CONFORMANCE["jacobi2d_time"].program.to_sdfg()
    sdfg.specialize(dict(N=13))
    sdfg.name = f"tgpu_jacobi_2x2_{comm}"
    old = os.environ.get("DACE_PARTITION_GPU_COMM")
    os.environ["DACE_PARTITION_GPU_COMM"] = comm
    try:
        dp.lower(sdfg, {m.name: (2, 2) for m in dp.maps(sdfg) if len(m.params) == 2}, device="gpu")
    finally:
        if old is None:
            os.environ.pop("DACE_PARTITION_GPU_COMM")
        else:
            os.environ["DACE_PARTITION_GPU_COMM"] = old
    return sdfg, dp.runtime.launch.build(sdfg)


@needs_nvcc
def test_a_halo_between_gpu_buffers_builds_as_packed_device_copies():
    """By default the 2 x 2 split's halo exchanges run on the tiles in GPU memory: nvcc builds the packed
    exchange with the CUDA copier (pitched device copies, pinned or device face buffers, the CUDA-aware
    query through dlsym), and the program's only host<->GPU copies are the scatter's and the gather's,
    outside the time loop."""
    from dace_partition.passes.gpu import pcie_copies
    sdfg, folder = jacobi_2x2()
    cpp = _sources(folder, "cpu", "cpp")
    res = dp.report(sdfg).residency
    assert len(res.device_moves) == 2
    assert cpp.count("dace_partition::halo_exchange_packed<double, dace_partition_cuda::DeviceCopy>(") == 2
    assert "dace_partition::halo_exchange<" not in cpp
    assert len(res.copies) == len(pcie_copies(sdfg)) == 4 and all(c.why.startswith("MPI") for c in res.copies)
    assert cpp.count("cudaMemcpyAsync(") + cpp.count("cudaMemcpy2DAsync(") == 4
    lib = os.path.join(folder, "build", f"lib{sdfg.name}.so")
    if shutil.which("nm"):
        syms = subprocess.run(["nm", "-D", lib], capture_output=True, text=True).stdout
        for s in ("cudaMemcpy2DAsync", "cudaMemcpyAsync", "cudaMallocHost", "dlsym", "MPI_Isend", "MPI_Irecv"):
            assert s in syms, f"{s} is not referenced by the built library"


@needs_nvcc
def test_a_gpu_build_selects_each_ranks_device_when_loaded():
    """Every rank selects its GPU (a collective: MPI_Comm_split_type for the node-local rank) when it loads
    the program, not at its first CUDA call, which may come at another point on each rank: a collective of
    the caller's right after the load completes, on a machine without a GPU too (-1 on every rank). The
    library exports what the runtime needs to wait for a caller's stream and to keep page-locked host
    buffers; without a GPU those fall back to pageable memory (tests/mpi_scripts/gpu_build_loads.py)."""
    from conftest import mpi_script
    sdfg, folder = jacobi_2x2()
    _references(os.path.join(folder, "build", f"lib{sdfg.name}.so"),
                ("__dp_gpu_wait_stream", "cudaStreamSynchronize", "__dp_gpu_host_malloc", "cudaHostAlloc",
                 "cudaFreeHost"))
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "gpu_build_loads.py")
    res = mpi_script(script, 2, folder, "local" if HAVE_GPU else "none", timeout=120)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr[-3000:]


@functools.lru_cache(maxsize=None)
def conformance_on_two(name):
    """A conformance program on 2 ranks, built with nvcc: fdtd2d (hz and ex move between two kernels'
    blocks inside its time loop, beside scatters from rank 0's ey), normalize (an allreduce of partial
    column sums)."""
    from conformance.programs import CASES as CONFORMANCE
    case = CONFORMANCE[name]
    sdfg = case.program.to_sdfg()
    sdfg.name = f"tgpu_{name}_2"
    dp.lower(sdfg, case.schedule(2, dp.maps(sdfg)), device="gpu")
    return sdfg, dp.runtime.launch.build(sdfg)


def _references(lib, names):
    if shutil.which("nm"):
        syms = subprocess.run(["nm", "-D", lib], capture_output=True, text=True).stdout
        for s in names:
            assert s in syms, f"{s} is not referenced by the built library"


@needs_nvcc
def test_a_redistribution_between_gpu_buffers_builds_as_packed_device_copies():
    """fdtd2d's moves of hz and ex between GPU buffers build as the packed redistribution (and hz's halo as
    the packed halo) with the CUDA copier, in states of their own; only rank 0's ey still goes through
    host memory inside the loop."""
    sdfg, folder = conformance_on_two("fdtd2d")
    cpp = _sources(folder, "cpu", "cpp")
    res = dp.report(sdfg).residency
    assert len(res.device_moves) == 3 and sum(label.endswith("_on_gpu") for label in res.device_moves) == 2
    assert cpp.count("dace_partition::redistribute_packed<double, dace_partition_cuda::DeviceCopy>(") == 2
    assert cpp.count("dace_partition::halo_exchange_packed<double, dace_partition_cuda::DeviceCopy>(") == 1
    assert "dace_partition::redistribute<" not in cpp and "dace_partition::halo_exchange<" not in cpp
    inside = {c.buffer for c in res.copies if "guard" not in c.state and c.why.startswith("MPI")}
    assert inside and all("ey" in b for b in inside), inside
    _references(os.path.join(folder, "build", f"lib{sdfg.name}.so"),
                ("cudaMemcpy2DAsync", "cudaMallocHost", "dlsym", "MPI_Isend", "MPI_Irecv"))


@needs_nvcc
@pytest.mark.slow  # an nvcc build (~30 s); the emulated run is in the default suite
def test_an_allreduce_between_gpu_buffers_builds_on_the_device_buffers():
    """normalize's partial column sums live in GPU memory: nvcc builds the device allreduce with the CUDA
    copier (no staging state around it), and nothing crosses PCIe but the scatter and the gather."""
    sdfg, folder = conformance_on_two("normalize")
    cpp = _sources(folder, "cpu", "cpp")
    res = dp.report(sdfg).residency
    assert len(res.device_moves) == 1
    assert cpp.count("dace_partition::allreduce_device<double, dace_partition_cuda::DeviceCopy>(") == 1
    assert "dace_partition::allreduce<" not in cpp
    assert not [c for c in res.copies if "allreduce" in c.why or c.state.startswith(res.device_moves[0])]
    _references(os.path.join(folder, "build", f"lib{sdfg.name}.so"), ("cudaMemcpy2DAsync", "dlsym", "MPI_Allreduce"))


@needs_nvcc
@pytest.mark.slow  # an nvcc build (~30 s)
def test_a_halo_across_columns_is_staged_by_pitched_copies():
    """With ``DACE_PARTITION_GPU_COMM=staged`` the halo exchanges of a 2 x 2 split copy their edge and halo
    slabs, the columns as one cudaMemcpy2DAsync each (DaCe's pitched copy), and the built program makes
    exactly the copies the report lists."""
    from dace_partition.passes.gpu import pcie_copies
    sdfg, folder = jacobi_2x2("staged")
    cpp = _sources(folder, "cpu", "cpp")
    res = dp.report(sdfg).residency
    columns = [c for c in res.copies if c.part.startswith("columns ")]
    assert columns and any(c.part.startswith("rows ") for c in res.copies)
    assert len(res.copies) == len(pcie_copies(sdfg))
    assert cpp.count("cudaMemcpy2DAsync(") >= len(columns)
    assert cpp.count("cudaMemcpyAsync(") + cpp.count("cudaMemcpy2DAsync(") == len(res.copies)


@functools.lru_cache(maxsize=None)
def axpy_on_rank0():
    """``y[:] = a * x + y`` in a time loop on rank 0's GPU, its copies as copy kernels, built with nvcc."""
    sdfg = programs_gpu.axpy_sweeps.to_sdfg()
    sdfg.name = "tgpu_axpy_sweeps"
    dp.lower(sdfg, {}, device="gpu")
    return sdfg, dp.runtime.launch.build(sdfg)


@needs_nvcc
@pytest.mark.slow  # an nvcc build (~30 s)
def test_array_copies_build_as_gpu_kernels():
    """The copy into ``y`` and the scalar's staging are GPU kernels (nvcc compiles them) and the only
    host<->GPU copies are the call's own, outside the loop."""
    sdfg, folder = axpy_on_rank0()
    cpp, cuda = _sources(folder, "cpu", "cpp"), _sources(folder, "cuda", "cu")
    res = dp.report(sdfg).residency
    assert len(res.device_copies) == 2 and cuda.count("__global__") >= 3, "the two copies and the kernel"
    assert cpp.count("cudaMemcpyAsync(") + cpp.count("cudaMemcpy2DAsync(") == len(res.copies) == 3


# ---------------------------------------------------------------- real GPU runs (skipped without a GPU)

def _run_cases():
    out = []
    for name in CASES:
        need = {"matmul_1x1x1": 1, "matmul_2x2x2": 8, "softmax": 2, "matmul_4x1x1": 4, "matmul_1x1x4": 4,
                "matmul_uneven_1x1x2": 2}.get(name, 4)
        for ranks in (2, 4):
            if ranks >= need:
                out.append((name, ranks))
        if need > 4:
            out.append((name, need))
    return out


@needs_nvcc
@needs_gpu
@pytest.mark.parametrize("name,ranks", _run_cases())
def test_gpu_run(name, ranks, rng):
    sdfg, _ = built(name)
    _, _, inputs, reference = CASES[name]
    args = inputs(rng)
    out = dp.run(sdfg, ranks, **args)
    assert np.allclose(out, reference(**args))


@needs_nvcc
@needs_gpu
@pytest.mark.parametrize("comm,aware", [("packed", "auto"), ("packed", "1"), ("staged", "auto")])
def test_a_halo_across_columns_runs_on_the_gpu(comm, aware, rng, monkeypatch):
    """The 2 x 2 Jacobi above on 4 ranks sharing the GPU, its halos packed on the device (faces through
    pinned host memory, or given to MPI as device pointers where it is CUDA-aware: forced with
    ``DACE_PARTITION_CUDA_AWARE=1``, which only a CUDA-aware MPI survives) or staged: every element equals
    NumPy's."""
    from conformance.programs import _jac2_loop
    from dace_partition.runtime.mpi_info import mpi_info
    if aware == "1" and not mpi_info().cuda_aware.startswith("yes"):
        pytest.skip(f"this MPI does not take device pointers: {mpi_info().cuda_aware}")
    monkeypatch.setenv("DACE_PARTITION_CUDA_AWARE", aware)
    sdfg, _ = jacobi_2x2(comm)
    args = dict(A=rng.random((13, 13)), B=rng.random((13, 13)), T=3)
    expected = _jac2_loop({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()})
    got = dp.run(sdfg, 4, **args)
    for name in ("A", "B"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-12, err_msg=name)


def _copy_box_on_gpu(tmp_path):
    """tests/cpp/copy_box.cpp built by nvcc with the CUDA copier (the MPI compiler as nvcc's host compiler:
    the runtime headers include mpi.h); returns nvcc's result and the program's path."""
    here = os.path.dirname(os.path.abspath(__file__))
    include = os.path.join(os.path.dirname(dp.__file__), "runtime", "include")
    mpicxx = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "mpicxx")
    exe = str(tmp_path / "copy_box_gpu")
    build = _nvcc_with_dace("-ccbin", mpicxx if os.path.exists(mpicxx) else "mpicxx", "-x", "cu", "-DCOPY_BOX_ON_GPU",
                            "-I", include, os.path.join(here, "..", "cpp", "copy_box.cpp"), "-o", exe, "-ldl")
    return build, exe


@needs_nvcc
@pytest.mark.slow  # 30 s of nvcc; the generated programs' builds compile the CUDA copier too
def test_pitched_copies_build_with_the_cuda_copier(tmp_path):
    """The copy_box test program builds with the CUDA copier (cudaMemcpy2DAsync and cudaMemcpy3DAsync), so
    that a machine with a GPU runs it (below)."""
    build, exe = _copy_box_on_gpu(tmp_path)
    assert build.returncode == 0 and os.path.exists(exe), build.stderr[-3000:]


@needs_nvcc
@needs_gpu
def test_pitched_copies_deliver_every_element_on_the_gpu(tmp_path):
    """The pitched copies of the packed moves with the CUDA copier, on 400 random boxes of buffers in GPU
    memory or pinned host memory: every element arrives, nothing else is written, and each 2-D and 3-D
    copy's arguments meet the driver's conditions (tests/cpp/copy_box.cpp)."""
    build, exe = _copy_box_on_gpu(tmp_path)
    assert build.returncode == 0, build.stderr[-3000:]
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "COPY-BOX OK 400" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@needs_nvcc
@needs_gpu
@pytest.mark.parametrize("name,aware", [("fdtd2d", "auto"), ("fdtd2d", "1"), ("normalize", "auto"), ("normalize", "1")])
def test_moves_between_gpu_buffers_run_on_the_gpu(name, aware, rng, monkeypatch):
    """fdtd2d and normalize above on 2 ranks sharing the GPU, hz and ex redistributed packed on the device
    and the column sums reduced from it (through pinned host memory, or as device pointers where MPI is
    CUDA-aware): every element equals NumPy's."""
    from conformance.harness import compare
    from conformance.programs import CASES as CONFORMANCE
    from dace_partition.runtime.mpi_info import mpi_info
    if aware == "1" and not mpi_info().cuda_aware.startswith("yes"):
        pytest.skip(f"this MPI does not take device pointers: {mpi_info().cuda_aware}")
    monkeypatch.setenv("DACE_PARTITION_CUDA_AWARE", aware)
    case = CONFORMANCE[name]
    sdfg, _ = conformance_on_two(name)
    inputs = case.inputs(rng)
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    why = compare(expected, dp.run(sdfg, 2, **inputs), case.exact)
    assert why is None, why


@needs_nvcc
@needs_gpu
@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None, reason="no nvidia-cuda-mps-control here")
def test_ranks_sharing_the_gpu_run_under_a_private_mps_daemon(rng, monkeypatch, tmp_path):
    """``dp.run`` of the 2 x 2 Jacobi on 4 ranks sharing the one GPU starts an MPS daemon of its own: the
    ranks' contexts connect to its server (its log says so), every element equals NumPy's, and the daemon
    is gone after the job."""
    from conformance.programs import _jac2_loop
    from dace_partition.runtime import mps
    monkeypatch.delenv("DACE_PARTITION_MPS", raising=False)
    decision = mps.decide_here(True, 4, local_launch=True)
    if decision.action is not mps.Mps.START:
        pytest.skip(str(decision))
    sdfg, _ = jacobi_2x2()
    args = dict(A=rng.random((13, 13)), B=rng.random((13, 13)), T=3)
    expected = _jac2_loop({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()})
    monkeypatch.setenv("DACE_PARTITION_MPS_LOG", str(tmp_path))  # the daemon's log, kept for this test
    got = dp.run(sdfg, 4, **args)
    for name in ("A", "B"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-12, err_msg=name)
    log = (tmp_path / "control.log").read_text() if (tmp_path / "control.log").exists() else ""
    assert "server" in log.lower(), log
    for _ in range(20):  # the daemon and its server exit shortly after "quit"
        left = subprocess.run(["pgrep", "-u", str(os.getuid()), "-f", "nvidia-cuda-mps"], capture_output=True, text=True)
        if not left.stdout.strip():
            break
        time.sleep(0.5)
    assert not left.stdout.strip(), f"MPS processes left after the job: {left.stdout}"


@needs_nvcc
@needs_gpu
@pytest.mark.slow
def test_array_copies_run_as_gpu_kernels(rng):
    sdfg, _ = axpy_on_rank0()
    args = dict(x=rng.random(40), y=rng.random(40), a=0.5, T=4)
    expected = programs_gpu.axpy_sweeps_reference(**{k: (v.copy() if isinstance(v, np.ndarray) else v)
                                                     for k, v in args.items()})
    got = dp.run(sdfg, 2, NC=40, **args)
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-12)


@needs_nvcc
@needs_gpu
@pytest.mark.slow
def test_column_logical_and_and_product_run_on_the_gpu(rng):
    """Column reductions through GPU atomics that DaCe 1.0.2 alone gets wrong (a logical and over booleans,
    a product), on rank 0's GPU after a split map, 2 ranks: every element equals NumPy's."""
    sdfg = programs_gpu.column_all_and_product.to_sdfg()
    sdfg.name = "tgpu_column_all_and_product"
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg) if m.name == "_Gt__map"}, device="gpu")
    A = rng.integers(1, 3, (37, 70)).astype(np.int64)
    A[:, 3] = 2  # one column all true
    got = dp.run(sdfg, 2, A=A, every=np.zeros(70, bool), prod=np.zeros(70, np.int64))
    for name, value in programs_gpu.column_all_and_product_reference(A).items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@needs_nvcc
@needs_gpu
@pytest.mark.slow
def test_device_arrays_of_every_kind_run_on_the_gpu():
    """PyTorch CUDA tensors, CuPy arrays (where CuPy imports beside DaCe's NumPy), and objects known only by
    ``__cuda_array_interface__`` or only by DLPack go in and out of two programs built for the GPU, on 2
    ranks: io="distributed" tiles updated in place, a root-io result of the caller's kind, wrong dtype,
    shape and strides refused in words (tests/mpi_scripts/device_arrays_gpu.py)."""
    import importlib
    from conftest import mpi_script
    from conformance.programs import CASES as CONFORMANCE
    jac = CONFORMANCE["jacobi2d_time"].program.to_sdfg()
    jac.specialize(dict(N=12))
    jac.name = "tgpu_device_arrays_jacobi"
    dp.lower(jac, {m.name: (2, 1) for m in dp.maps(jac)}, device="gpu", io="distributed")
    case = CONFORMANCE["softmax"]
    sm = case.program.to_sdfg()
    sm.name = "tgpu_device_arrays_softmax"
    dp.lower(sm, case.schedule(2, dp.maps(sm)), device="gpu")
    folders = [dp.runtime.launch.build(jac), dp.runtime.launch.build(sm)]
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "device_arrays_gpu.py"), 2, *folders,
                     timeout=240)
    print(res.stdout)  # which kinds ran (pytest -rP shows it)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr[-3000:]
    ran = set(re.search(r"ran: (.*)", res.stdout).group(1).split())
    assert {"torch", "__cuda_array_interface__", "dlpack"} <= ran, res.stdout
    try:
        importlib.import_module("cupy")
    except Exception:
        return
    assert "cupy" in ran, res.stdout


def _conformance_gpu_cases():
    from conformance.programs import CASES as CONFORMANCE
    return [(name, ranks) for name in sorted(CONFORMANCE) for ranks in (2, 4)]


@needs_nvcc
@needs_gpu
@pytest.mark.slow
@pytest.mark.parametrize("name,ranks", _conformance_gpu_cases())
def test_conformance_programs_run_on_the_gpu(name, ranks):
    """Every conformance program lowered with ``device="gpu"`` (its usual schedule for P ranks), built with
    nvcc and run on P ranks sharing the GPU: every output element equals NumPy's. A program the lowering
    refuses is skipped with its reason (as on the CPU)."""
    from conformance.harness import compare
    from conformance.programs import CASES as CONFORMANCE
    case = CONFORMANCE[name]
    sdfg = case.program.to_sdfg()
    sdfg.name = f"tgpu_conf_{name}_{ranks}"
    try:
        dp.lower(sdfg, case.schedule(ranks, dp.maps(sdfg)), device="gpu")
    except (dp.ScheduleError, dp.UnsupportedPattern) as e:
        pytest.skip(f"refused as on the CPU: {e}")
    inputs = case.inputs(np.random.default_rng(11))
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    got = dp.run(sdfg, ranks, timeout=300, **inputs)
    why = compare(expected, got, case.exact)
    assert why is None, why
