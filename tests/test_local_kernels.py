"""Optimized local kernels and the per-call path (issue: faster than the hand-written MPI).

Pure-Python checks of the BLAS choice, the single-thread lowering and the persistent buffers, and one
real mpiexec run that calls lowered programs repeatedly and inspects the code they were built from."""
import glob
import os
import sys

import dace
import numpy as np
import pytest

import dace_partition as dp
from conftest import ROOT, mpi_script
from dace_partition.runtime import toolchain


def test_blas_choice_is_mkl_from_the_wheels_when_installed():
    from importlib import metadata
    try:
        metadata.version("mkl-devel")
    except metadata.PackageNotFoundError:
        pytest.skip("the mkl extra is not installed here")
    choice = toolchain._choose("auto")
    assert choice.blas is toolchain.Blas.MKL
    assert os.path.isfile(os.path.join(choice.root, "include", "mkl.h"))
    lib = os.path.join(choice.root, "lib", "libmkl_rt.so")
    assert os.path.islink(lib) and os.path.realpath(lib).startswith(os.path.realpath(sys.prefix))
    # libmkl_rt loads its siblings from its own folder: they must be there too
    assert glob.glob(os.path.join(choice.root, "lib", "libmkl_core.so*"))


def test_blas_can_be_chosen_and_is_reported():
    assert toolchain._choose("pure").blas is toolchain.Blas.PURE
    with pytest.raises(ValueError, match="DACE_PARTITION_BLAS"):
        toolchain._choose("atlas")
    text = str(dp.info())
    for part in ("MPI:", "BLAS:", "compiler:"):
        assert part in text
    assert toolchain.blas().blas.value in text


def test_blas_build_sets_dace_default_only_inside():
    before = dace.Config.get("library", "blas", "default_implementation")
    with toolchain.blas_build(toolchain.BlasChoice(toolchain.Blas.OPENBLAS)):
        assert dace.Config.get("library", "blas", "default_implementation") == "OpenBLAS"
    assert dace.Config.get("library", "blas", "default_implementation") == before


def _rowsum():
    @dace.program
    def rowsum(x: dace.float64[64, 32]):
        return np.sum(x, axis=1)
    sdfg = rowsum.to_sdfg()
    return sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}


def _schedules(sdfg):
    return {n.map.schedule for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)}


def test_one_thread_per_rank_makes_every_map_sequential():
    sdfg, schedule = _rowsum()
    dp.lower(sdfg, schedule)
    assert _schedules(sdfg) == {dace.ScheduleType.Sequential}
    # the Reduce node was expanded, so its maps are among them
    assert not any(type(n).__name__ == "Reduce" for n, _ in sdfg.all_nodes_recursive())


def test_threads_none_keeps_openmp_maps():
    sdfg, schedule = _rowsum()
    dp.lower(sdfg, schedule, threads=None)
    assert dace.ScheduleType.Sequential not in _schedules(sdfg)
    with pytest.raises(ValueError, match="threads"):
        dp.lower(_rowsum()[0], schedule, threads=0)


def test_rank_local_buffers_are_persistent_and_reported():
    @dace.program
    def axpy(x: dace.float64[64], y: dace.float64[64]):
        return 2.0 * x + y

    sdfg = axpy.to_sdfg()
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)})
    local = {k: d for k, d in sdfg.arrays.items() if k.startswith("__dp") and isinstance(d, dace.data.Array)}
    assert local and all(d.lifetime is dace.AllocationLifetime.Persistent for d in local.values())
    expected = sum(int(np.prod([int(s) for s in d.shape])) * d.dtype.bytes for d in local.values())
    assert expected == 3 * 32 * 8  # x, y and the result, 32 elements each (2.0 * x is fused into the one map)
    rep = dp.report(sdfg)
    assert rep.persistent_bytes == expected
    assert f"rank-local buffers: {expected} B per rank" in str(rep)


def test_repeated_calls_symbol_changes_and_local_code():
    res = mpi_script(os.path.join(ROOT, "tests", "mpi_scripts", "call_paths.py"), 2, timeout=600)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
    folders = dict(l.split()[1:3] for l in res.stdout.splitlines() if l.startswith("BUILD "))
    code = "\n".join(open(f).read() for f in glob.glob(os.path.join(folders["rowsum"], "src", "cpu", "*.cpp")))
    assert "reduce_atomic" not in code and "#pragma omp" not in code  # one thread per rank
    if toolchain.blas().blas is not toolchain.Blas.PURE:
        assert "cblas_dgemm" in code  # the local product runs on BLAS
    assert "local BLAS:" in res.stdout
