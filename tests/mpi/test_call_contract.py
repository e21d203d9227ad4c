"""What a call of a lowered program takes and gives back, and what a build leaves behind.

- Arguments: the shapes DaCe's own call of the program accepts. An array with the parameter's number of
  elements in C order (NPBench's nbody passes ``mass`` as shape (N, 1) for ``float64[N]``) is taken;
  anything else is refused before any rank starts, naming the argument and both shapes.
- Results: every call returns new arrays (root io and io="distributed" tiles); a later call never
  changes an earlier result (DaCe itself returns one buffer, overwritten at every call).
- The ranks of ``run``: a program whose arguments are plain host arrays and scalars is called through its
  library's C functions (``runtime/call_plan.py``, ``runtime/_plain_worker.py``) without DaCe in any rank, with
  the same results as DaCe's own call.
- Builds: after lowering and building a program, DaCe's configuration and the environment are as they
  were, also when the build fails, so DaCe still builds the unlowered program in the same process.
"""
import copy
import functools
import os
import time

import dace
import numpy as np
import pytest

import dace_partition as dp
from conftest import mpi_script


@dace.program
def weighted(x: dace.float64[24, 4], m: dace.float64[24]):
    out = np.empty((24, 4), dtype=np.float64)
    for i, j in dace.map[0:24, 0:4]:
        out[i, j] = x[i, j] * m[i] + 1.0
    return out


def reference(x, m):
    return x * np.reshape(m, (24, 1)) + 1.0


@functools.lru_cache(maxsize=None)
def weighted_sdfg(io):
    sdfg = weighted.to_sdfg()
    sdfg.name = f"t_call_contract_weighted_{io}"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, 1)}, io=io)
    return sdfg


X = np.arange(96.0).reshape(24, 4) - 40.0


@pytest.mark.parametrize("io", ["root", "distributed"])
def test_run_takes_an_argument_of_another_shape_with_as_many_elements(io):
    mass = np.arange(24.0).reshape(24, 1) - 7.0  # a (24, 1) array for float64[24], as NPBench's nbody
    got = dp.run(weighted_sdfg(io), 2, x=X, m=mass)
    np.testing.assert_array_equal(got, reference(X, mass))


@pytest.mark.parametrize("io", ["root", "distributed"])
def test_run_refuses_another_number_of_elements_before_any_rank_starts(io):
    sdfg = weighted_sdfg(io)
    t = time.time()
    with pytest.raises(ValueError, match=r"argument 'm' has shape \(23, 1\), expected \(24,\) \(23 element"):
        dp.run(sdfg, 2, x=X, m=np.ones((23, 1)))
    with pytest.raises(ValueError, match=r"argument 'x' has shape \(4, 24\), expected \(24, 4\): the same number "
                       r"of elements, but .* C-contiguous"):
        dp.run(sdfg, 2, x=X.T, m=np.ones(24))  # as many elements, but in Fortran order
    with pytest.raises(ValueError, match=r"argument 'x' has shape \(96, 1, 2\), expected \(24, 4\) \(192 element"):
        dp.run(sdfg, 2, x=np.ones((96, 1, 2)), m=np.ones(24))
    assert time.time() - t < 10  # refused before building or launching anything


NR, NC = dace.symbol("NR"), dace.symbol("NC")


@dace.program
def scaled_rows(a: dace.float64[NR, NC], w: dace.float64[NC]):
    for i, j in dace.map[0:NR, 0:NC]:
        a[i, j] = a[i, j] * w[j]


@pytest.mark.parametrize("io", ["root", "distributed"])
def test_symbols_a_call_does_not_give_are_read_off_the_arrays(io):
    """As calling the SDFG in one process: ``a: float64[NR, NC]`` given a 7 x 5 array means NR = 7, NC = 5
    (for io="distributed" on the program's own tiles too, where a dimension is not split); arrays that
    disagree, or a symbol that no array gives, are refused before any rank starts, naming them."""
    sdfg = scaled_rows.to_sdfg()
    sdfg.name = f"t_call_contract_symbols_{io}"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, 1)}, io=io)
    sig = dp.runtime.launch.CallSignature(sdfg)
    a, w = np.ones((7, 5)), np.ones(5)
    if io == "root":
        assert sig.with_symbols(dict(a=a, w=w)) == dict(a=a, w=w, NR=7, NC=5)
    else:  # the tile's rows are split (NR is not read off them), its columns are not
        with pytest.raises(ValueError, match=r"symbol\(s\) \['NR'\] not given .* \(NR=\.\.\.\)"):
            sig.with_symbols(dict(a=a, w=w))
        assert sig.with_symbols(dict(a=a, w=w, NR=14)) == dict(a=a, w=w, NR=14, NC=5)
    assert sig.with_symbols(dict(a=a, w=w, NR=7, NC=5))["NC"] == 5  # given: kept
    t = time.time()
    with pytest.raises(ValueError, match=r"disagree on symbol 'NC': a.shape\[1\] = 5, w.shape\[0\] = 6"):
        dp.run(sdfg, 2, a=a, w=np.ones(6))  # dp.run takes whole arrays for either io
    assert time.time() - t < 10  # refused before building or launching anything


_bins, _npt = dace.symbol("bins", dace.int64), dace.symbol("npt", dace.int64)


@dace.program
def _counts(a: dace.float64[40], edges: dace.float64[_bins + 1]):
    hist = np.ndarray((_bins, ), dtype=np.int64)
    hist[:] = 0
    for i in dace.map[0:40]:
        b = min(dace.int64(a[i] * _bins), _bins - 1)
        hist[b] += 1
    return hist


@dace.program
def histogram_of(x: dace.float64[40]):
    edges = np.ndarray((_npt + 1, ), dtype=np.float64)
    return _counts(x, edges)


def test_a_nested_programs_own_symbol_is_not_asked_of_the_caller():
    """NPBench's azimint_hist: the nested program's 'bins' (mapped from 'npt') showed in the lowered SDFG's
    free symbols through a memlet that DaCe's propagation wrote, and the call refused to run without it.
    The lowering now writes the caller's symbol there (compat.propagate_memlets_state), and a call is
    checked against the symbols the compiled program takes: it runs without 'bins'."""
    from dace_partition.runtime.program import CallSignature
    sdfg = histogram_of.to_sdfg()
    sdfg.name = "t_call_contract_histogram"
    sdfg.specialize({"npt": 5})
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if m.shape == (40, )})
    assert "bins" not in {str(s) for s in sdfg.free_symbols} and "bins" not in CallSignature(sdfg).free
    x = np.random.default_rng(3).random(40)
    got = dp.run(sdfg, 2, x=x)
    assert np.array_equal(got, np.bincount(np.minimum((x * 5).astype(np.int64), 4), minlength=5))


def test_check_layout_follows_dace():
    check = dp.runtime.launch.check_layout
    check("m", np.ones((25, 1)), (25, ), (8, ))
    check("m", np.ones((1, 25, 1)), (25, ), (8, ))
    check("a", np.ones(12), (3, 4), (32, 8))
    check("a", np.ones((1, 4)), (1, 4), (999, 8))  # an extent-1 dimension may have any stride
    with pytest.raises(ValueError, match=r"argument 'a' has shape \(12,\), expected \(3, 4\): the same number"):
        check("a", np.ones(24)[::2], (3, 4), (32, 8))
    with pytest.raises(ValueError, match=r"has strides \(8, 24\), expected \(32, 8\)"):
        check("a", np.ones((4, 3)).T, (3, 4), (32, 8))
    with pytest.raises(ValueError, match=r"the same number of elements"):
        check("a", np.ones(12), (3, 4), (8, 24))  # a Fortran-order parameter takes only its own shape


def test_results_are_the_callers_to_keep():
    """Under mpiexec (2 ranks), root io and io="distributed": two calls, the first result unchanged and not
    the same object as the second."""
    folders = [dp.runtime.launch.build(weighted_sdfg(io)) for io in ("root", "distributed")]
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "result_ownership.py"), 2, *folders,
                     timeout=180)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr[-3000:]


@dace.program
def matmul16(a: dace.float64[16, 16], b: dace.float64[16, 16]):
    return a @ b


def _state():
    from dace_partition.compat import config_dict
    return copy.deepcopy(config_dict()), dict(os.environ)


def test_build_leaves_the_process_as_it_found_it(monkeypatch):
    """Lower a copy of a matmul program and build it (a failed build, then a good one): DaCe's
    configuration and the environment are unchanged, and DaCe builds and runs the original program in
    the same process (after a failed build it used to fail with 'mkl.h: No such file or directory')."""
    original = matmul16.to_sdfg()
    original.name = "t_call_contract_matmul16_dace"
    low = copy.deepcopy(original)
    low.name = "t_call_contract_matmul16_lowered"
    before = _state()
    dp.lower(low, {"_MatMult_.gemm_map": (2, 1, 1)})
    blas = dp.runtime.toolchain.blas()
    inside = {}

    def failing_compile(*args, **kwargs):
        inside.update(blas=dace.Config.get("library", "blas", "default_implementation"),
                      mklroot=os.environ.get("MKLROOT"), mpi_home=os.environ.get("MPI_HOME"))
        raise RuntimeError("the compiler failed")

    monkeypatch.setattr(low, "compile", failing_compile, raising=False)
    with pytest.raises(RuntimeError, match="the compiler failed"):
        dp.runtime.launch.build(low)
    assert inside["blas"] == blas.blas.value  # what the build changes ...
    assert inside["mklroot"] == (blas.root or before[1].get("MKLROOT"))
    assert _state() == before  # ... is restored after a failed build
    monkeypatch.undo()
    dp.runtime.launch.build(low)
    assert _state() == before  # and after a good one
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 16))
    np.testing.assert_allclose(original.compile()(a=a, b=b), a @ b, rtol=1e-12, atol=1e-12)


NA = dace.symbol("NA")


@dace.program
def affine_and_index(x: dace.float32[NA], y: dace.float32[NA], a: dace.float32, shift: dace.int32):
    out = np.empty((NA, ), dtype=np.float32)
    idx = np.empty((NA, ), dtype=np.int32)
    for i in dace.map[0:NA]:
        out[i] = a * x[i] + y[i]
        idx[i] = shift + i
        y[i] = x[i] - a
    return out, idx


def _affine_inputs():
    rng = np.random.default_rng(11)
    return dict(x=rng.standard_normal(37).astype(np.float32), y=rng.standard_normal(37).astype(np.float32),
                a=np.float32(1.75), shift=-5)


@pytest.mark.parametrize("io", ["root", "distributed"])
def test_the_ranks_of_run_call_the_library_without_dace(tmp_path, monkeypatch, io):
    """Float32 and int32 scalars, a symbol read off the shapes, two returned arrays and a written argument,
    on 2 ranks (root io, and tiles cut and joined for io="distributed"), with a package named ``dace`` that
    fails on import first on the ranks' path: the plain worker gives NumPy's results; DaCe's worker, under
    the same path, fails (so the poisoned path is really seen); and without the poison DaCe's worker gives
    the same bits as the plain one."""
    sdfg = affine_and_index.to_sdfg()
    sdfg.name = f"t_call_contract_affine_{io}"
    dp.lower(sdfg, {dp.maps(sdfg)[0].name: (2, )}, io=io)
    poison = tmp_path / "dace"
    poison.mkdir()
    (poison / "__init__.py").write_text("raise ImportError('a rank imported dace')\n")
    inputs = _affine_inputs()
    y0 = inputs["y"].copy()
    launch = dp.runtime.launch.launch
    prefix = ("env", f"PYTHONPATH={tmp_path}")
    (out, idx), _ = launch(sdfg, 2, 180, dict(inputs, y=y0.copy()), prefix=prefix, update=inputs)
    x, a = inputs["x"], inputs["a"]
    np.testing.assert_allclose(out, a * x + y0, rtol=1e-6, atol=1e-6)
    assert out.dtype == np.float32 and idx.dtype == np.int32
    np.testing.assert_array_equal(idx, np.arange(37, dtype=np.int32) - 5)
    np.testing.assert_array_equal(inputs["y"], x - a)  # the written argument, copied back into the caller's y
    monkeypatch.setenv("DACE_PARTITION_PLAIN_WORKER", "0")
    with pytest.raises(dp.RunError, match="a rank imported dace"):
        launch(sdfg, 2, 180, dict(inputs, y=y0.copy()), prefix=prefix)
    y1 = y0.copy()
    (out_d, idx_d), _ = launch(sdfg, 2, 180, dict(inputs, y=y1), update={"y": y1})
    np.testing.assert_array_equal(out_d, out)
    np.testing.assert_array_equal(idx_d, idx)
    np.testing.assert_array_equal(y1, inputs["y"])

