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
    choice = toolchain._choose("mkl")
    assert choice.blas is toolchain.Blas.MKL
    assert toolchain._choose("auto", "GenuineIntel").blas is toolchain.Blas.MKL  # MKL first on Intel CPUs
    assert os.path.isfile(os.path.join(choice.root, "include", "mkl.h"))
    lib = os.path.join(choice.root, "lib", "libmkl_rt.so")
    assert os.path.islink(lib) and os.path.realpath(lib).startswith(os.path.realpath(sys.prefix))
    # libmkl_rt loads its siblings from its own folder: they must be there too
    assert glob.glob(os.path.join(choice.root, "lib", "libmkl_core.so*"))


def test_blas_on_a_cpu_not_intels_prefers_a_system_openblas():
    other = toolchain._choose("auto", "AuthenticAMD")
    if toolchain._openblas():
        assert other.blas is toolchain.Blas.OPENBLAS and "AuthenticAMD" in other.why
    else:
        assert other.blas is not toolchain.Blas.OPENBLAS
    assert toolchain._choose("pure", "AuthenticAMD").blas is toolchain.Blas.PURE  # the variable still wins


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


def _softmax_lowered():
    @dace.program
    def softmax(x: dace.float32[64, 16]):
        mx = np.max(x, axis=1)
        e = np.exp(x - mx[:, np.newaxis])
        return e / np.sum(e, axis=1)[:, np.newaxis]

    sdfg = softmax.to_sdfg()
    sdfg.name = "t_restrict_softmax"
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)})
    return sdfg


def test_loops_over_rank_local_buffers_are_built_as_restrict_functions():
    import copy
    from dace_partition.runtime.restrict import candidates, restrict_local_loops
    sdfg = _softmax_lowered()
    persistent = {k for k, d in sdfg.arrays.items() if d.transient and d.lifetime is dace.AllocationLifetime.Persistent}
    applicable = [c for c in candidates(sdfg) if c.can_be_applied(sdfg) is None]
    assert applicable, [c.can_be_applied(sdfg) for c in candidates(sdfg)]
    built = copy.deepcopy(sdfg)
    nested = restrict_local_loops(built)
    assert sorted(nested) == sorted(c.entry.map.label for c in applicable)
    tops = [(n, st) for st in built.states() for n in st.nodes()
            if isinstance(n, dace.nodes.MapEntry) and st.scope_dict()[n] is None]
    # every top-level map left over touches no persistent buffer, or is refused for a stated reason
    from dace_partition.runtime.restrict import NestMapForRestrict
    for n, st in tops:
        why = NestMapForRestrict(st, n).can_be_applied(built)
        assert why is not None, n.map.label
    nsdfgs = [(n, st) for st in built.states() for n in st.nodes() if isinstance(n, dace.nodes.NestedSDFG)
              and n.sdfg.name.startswith("restrict_")]
    assert len(nsdfgs) == len(nested)
    for n, _ in nsdfgs:  # each reads or writes a persistent buffer through a connector (a function parameter)
        assert set(n.in_connectors) | set(n.out_connectors)
        assert not all(n.sdfg.arrays[c].transient for c in set(n.in_connectors) | set(n.out_connectors))
    touched = {e.data.data for n, st in nsdfgs for e in st.in_edges(n) + st.out_edges(n)}
    assert touched & persistent
    # the caller's lowered SDFG keeps its maps (the report and the analyses read it)
    assert not any(isinstance(n, dace.nodes.NestedSDFG) and n.sdfg.name.startswith("restrict_")
                   for n, _ in sdfg.all_nodes_recursive())
    built.validate()


def test_a_map_without_long_lived_buffers_is_not_nested():
    from dace_partition.runtime.restrict import candidates
    @dace.program
    def scale(x: dace.float64[16]):
        x[:] = 2.0 * x

    sdfg = scale.to_sdfg()
    whys = [c.can_be_applied(sdfg) for c in candidates(sdfg)]
    assert whys and all(w and "touches no buffer that lives in the program's state" in w for w in whys)


def test_repeated_calls_symbol_changes_and_local_code():
    res = mpi_script(os.path.join(ROOT, "tests", "mpi_scripts", "call_paths.py"), 2, timeout=600)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
    folders = dict(l.split()[1:3] for l in res.stdout.splitlines() if l.startswith("BUILD "))
    code = "\n".join(open(f).read() for f in glob.glob(os.path.join(folders["rowsum"], "src", "cpu", "*.cpp")))
    assert "reduce_atomic" not in code and "#pragma omp" not in code  # one thread per rank
    affine = "\n".join(open(f).read() for f in glob.glob(os.path.join(folders["affine"], "src", "cpu", "*.cpp")))
    # the loop over the persistent rank-local buffers is a function of its own with restrict pointers
    assert "restrict__" in affine and "__restrict__" in affine.split("restrict__", 1)[1].split(")", 1)[0], affine[:3000]
    if toolchain.blas().blas is not toolchain.Blas.PURE:
        assert "cblas_dgemm" in code  # the local product runs on BLAS
    assert "local BLAS:" in res.stdout
