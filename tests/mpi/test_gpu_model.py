"""The cost model of device="gpu" lowerings: ranks that share a GPU share its time, MPI pays PCIe twice.

Pure Python (the search prices; nothing is built or run).
"""
import dataclasses

import dace
import numpy as np
import pytest

import dace_partition as dp
from dace_partition.search.model import ProgramModel, prepare
from dace_partition.solvers.registry import resolve_solvers

N = dace.symbol("N")


@dace.program
def big_matmul(a: dace.float64[N, N], b: dace.float64[N, N]):
    return a @ b


@dace.program
def row_softmax(x: dace.float32[N, N]):
    mx = np.max(x, axis=1)
    e = np.exp(x - mx[:, np.newaxis])
    return e / np.sum(e, axis=1)[:, np.newaxis]


SIZES = {"N": 8192}


@pytest.fixture(autouse=True)
def _with_cublas(monkeypatch):
    """Priced for a GPU whose toolkit has cuBLAS, as a full CUDA toolkit does (this machine's has none;
    ``test_without_cublas_matrix_products_are_priced_as_pure_gpu_maps`` prices that case)."""
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "cublas")


def _partitioned(schedule):
    return {k: v for k, v in schedule.items() if v is not None and np.prod(v) > 1}


def test_ranks_that_share_one_gpu_keep_the_program_on_one_gpu():
    """Four ranks on one GPU: a split gains no compute (the tiles run one after another on the GPU) and
    pays MPI and PCIe, so the model keeps every kernel on rank 0's GPU; on four CPU cores it splits."""
    one_gpu = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES, machine=dp.gpu_machine(gpus=1))
    assert not _partitioned(dict(one_gpu)), one_gpu.explain()
    cpu = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES)
    assert _partitioned(dict(cpu)), cpu.explain()
    assert "1 GPU(s) shared by the ranks" in one_gpu.explain()


def test_one_gpu_per_rank_splits_an_8192_matmul_whose_tiles_are_in_place():
    """With a GPU per rank and the operands already in tiles (io="distributed"), the 8192^3 product (22 ms
    of FP64 on one GPU at the model's rate) is split over four GPUs; through rank 0 (io="root") scattering
    1.5 GB costs more than the product, and it stays on one GPU."""
    four = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES, io="distributed", machine=dp.gpu_machine(gpus=4))
    assert _partitioned(dict(four)), four.explain()
    root = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES, machine=dp.gpu_machine(gpus=4))
    assert not _partitioned(dict(root)), root.explain()


def test_without_cublas_matrix_products_are_priced_as_pure_gpu_maps(monkeypatch, tmp_path):
    """Without cuBLAS the lowering runs a matrix product as DaCe's pure GPU maps (an atomic add per
    multiply-add: about 4.7 GFlop/s measured on an H100, against the 50 TFlop/s the model gives cuBLAS), and
    the model prices it so, published or calibrated rates alike. The 8192^3 product through rank 0 then
    costs minutes on one GPU: splitting it over four GPUs pays for scattering 1.5 GB (with cuBLAS it stays
    on one GPU, above)."""
    import importlib
    M = importlib.import_module("dace_partition.search.machine")
    monkeypatch.setattr(M, "GPU_CACHE", str(tmp_path / "none.json"))
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "pure")
    pure = dp.gpu_machine(gpus=4)
    assert pure.blas_flops == M.PURE_GPU_GEMM_FLOPS and "no cuBLAS" in pure.source
    root = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES, machine=pure)
    assert _partitioned(dict(root)), root.explain()
    assert "no cuBLAS: GEMMs at the pure maps' rate" in root.explain()
    one = dp.auto_schedule(big_matmul.to_sdfg(), 1, sizes=SIZES, machine=pure)
    assert one.predicted.compute == pytest.approx(2 * 8192 ** 3 / M.PURE_GPU_GEMM_FLOPS, rel=0.05), one.explain()
    monkeypatch.setenv("DACE_PARTITION_GPU_BLAS", "cublas")
    assert dp.gpu_machine(gpus=4).blas_flops == 5.0e13


def test_lowering_away_from_the_job_is_told_its_gpus(monkeypatch, tmp_path):
    """On a login node without GPUs, ``lower(sdfg, ranks=4, device="gpu")`` would price the four ranks as
    sharing one GPU and keep the 8192^3 product on rank 0's; ``DACE_PARTITION_GPUS=4`` says the job has a
    GPU per rank, and it splits. ``DACE_PARTITION_MACHINE=daint`` prices on that GPU cluster's rates."""
    import importlib
    M = importlib.import_module("dace_partition.search.machine")
    monkeypatch.setattr(M, "GPU_CACHE", str(tmp_path / "none.json"))  # no calibration of this machine
    monkeypatch.setenv("DACE_PARTITION_NO_GPU", "1")
    monkeypatch.delenv("DACE_PARTITION_MACHINE", raising=False)
    monkeypatch.delenv("DACE_PARTITION_GPUS", raising=False)
    assert dp.gpu_machine().gpus == 1
    kept = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES, io="distributed", device="gpu")
    assert not _partitioned(dict(kept)), kept.explain()
    monkeypatch.setenv("DACE_PARTITION_GPUS", "4")
    assert (dp.gpu_machine().gpus, dp.gpu_machine(gpus=2).gpus) == (4, 2)
    split = dp.auto_schedule(big_matmul.to_sdfg(), 4, sizes=SIZES, io="distributed", device="gpu")
    assert _partitioned(dict(split)) and "4 GPU(s) shared by the ranks" in split.explain(), split.explain()
    monkeypatch.setenv("DACE_PARTITION_GPUS", "none")
    with pytest.raises(ValueError, match="DACE_PARTITION_GPUS='none'"):
        dp.gpu_machine()
    monkeypatch.delenv("DACE_PARTITION_GPUS")
    monkeypatch.setenv("DACE_PARTITION_MACHINE", "daint")
    daint = dp.gpu_machine()
    assert daint == M.daint_machine() and dp.gpu_machine(gpus=8).gpus == 8


def test_a_small_program_stays_on_one_gpu_even_with_a_gpu_per_rank():
    """A 512x512 softmax is a few microseconds of GPU work: the staging and messages of any split cost more."""
    small = dp.auto_schedule(row_softmax.to_sdfg(), 4, sizes={"N": 512}, machine=dp.gpu_machine(gpus=4))
    assert not _partitioned(dict(small)), small.explain()


@pytest.mark.parametrize("gpus,ranks,factor", [(1, 4, 4), (2, 4, 2), (4, 4, 1), (8, 4, 1)])
def test_tiles_on_a_shared_gpu_run_one_after_another(gpus, ranks, factor):
    """A kernel split over ``ranks`` ranks costs each rank its tile's time times the ranks on its GPU, and
    a context switch per kernel for each further rank there; on rank 0 alone it costs the same whatever
    the GPUs."""
    m = dp.gpu_machine(gpus=gpus)
    assert m.sharing(ranks) == factor
    kernels = []

    def priced(machine):
        work, _, ks = prepare(big_matmul.to_sdfg(), SIZES)
        model = ProgramModel(work, ks, ranks, resolve_solvers(None), machine)
        k = next(k for k in model.kernels if k.maps)
        kernels.append(max(1, len(k.maps)))
        return {str(p.candidate): p.compute for p in model.priced[k.index]}

    shared, own = priced(m), priced(dp.gpu_machine(gpus=ranks))
    assert shared.keys() == own.keys() and len(shared) > 2
    for cand, t in shared.items():
        if cand == "rank 0 (not partitioned)":
            assert t == own[cand]
        else:
            assert t == pytest.approx(factor * own[cand] + (factor - 1) * m.switch * kernels[0]), cand
    whole = shared["rank 0 (not partitioned)"]
    assert own["(4, 1, 1)"] < whole / 3  # a quarter of the product on each of four GPUs


def test_ranks_sharing_a_gpu_pay_a_switch_per_kernel_as_measured():
    """Measured on an H200 (docs/gpu.md): each further rank on a GPU added about 0.2 ms per kernel to a
    call (softmax, matmul, MLP on 1, 2 and 4 ranks). One rank per GPU pays none."""
    m = dp.gpu_machine(gpus=1)
    assert m.switch == pytest.approx(2e-4)
    assert m.gpu_time(1, 1e-3, 4) == pytest.approx(1e-3 + 4 * m.launch)
    assert m.gpu_time(4, 1e-3, 4) == pytest.approx(4 * (1e-3 + 4 * m.launch) + 3 * 4 * m.switch)
    assert dp.gpu_machine(gpus=4).gpu_time(4, 1e-3, 4) == pytest.approx(1e-3 + 4 * m.launch)


def test_messages_of_a_gpu_program_pay_pcie_twice():
    m = dp.gpu_machine(gpus=2)
    host = dp.machine()
    assert m.message_time(1, 1e6) == pytest.approx(host.message_time(1, 1e6) + 2e6 / m.pcie)
    assert host.message_time(1, 1e6) == pytest.approx(host.alpha + 1e6 * host.beta)


def test_lower_with_ranks_prices_the_gpu(monkeypatch):
    """``lower(ranks=P, device="gpu")`` asks the search with the GPU model (the GPUs visible here: none on
    CI, so one is assumed and the ranks share it)."""
    from dace_partition.runtime import cuda_build
    monkeypatch.setattr(cuda_build, "gpu_count", lambda: 0)
    sdfg = big_matmul.to_sdfg()
    sdfg.specialize(SIZES)
    dp.lower(sdfg, ranks=4, device="gpu")
    assert "GPU(s) shared by the ranks" in dp.report(sdfg).schedule
    assert dp.ranks_needed(sdfg) == 1


def _memory_bound(gpus=1):
    """The GPU model with operations that cost nothing: a kernel's time is its launch and its bytes."""
    return dataclasses.replace(dp.gpu_machine(gpus=gpus), map_ops=1e18)


def test_a_row_softmax_is_priced_as_the_one_row_kernel_it_becomes(monkeypatch):
    """The GPU pass fuses the softmax's four kernels into one row kernel (passes.gpu_rows); the search
    prices that kernel: one launch, ``x`` read once (its row staged in shared memory, which the row max,
    the row sum of the recomputed exponentials and the division read) and the result stored once; without
    the staging (``DACE_PARTITION_GPU_ROW_CACHE=0``) ``x`` is read in each of the three loops. Apart (``DACE_PARTITION_GPU_FUSION=0``),
    six launches (each reduction is expanded to a map that initialises and one that accumulates) and six
    passes over [N, N] arrays (x twice, the exponentials written once and read twice, the result), plus
    the two row vectors each written once and read once."""
    n = SIZES["N"]
    big, row = n * n * 4, n * 4
    m = _memory_bound()
    fused = dp.auto_schedule(row_softmax.to_sdfg(), 1, machine=m, sizes=SIZES)
    assert fused.predicted.compute == pytest.approx(m.launch + 2 * big / m.stream, rel=1e-12)
    assert "priced as a GPU row kernel: 4 kernels" in fused.explain() and "staged in shared memory" in fused.explain()
    monkeypatch.setenv("DACE_PARTITION_GPU_ROW_CACHE", "0")
    unstaged = dp.auto_schedule(row_softmax.to_sdfg(), 1, machine=m, sizes=SIZES)
    assert unstaged.predicted.compute == pytest.approx(m.launch + 4 * big / m.stream, rel=1e-12)
    monkeypatch.delenv("DACE_PARTITION_GPU_ROW_CACHE")
    monkeypatch.setenv("DACE_PARTITION_GPU_FUSION", "0")
    apart = dp.auto_schedule(row_softmax.to_sdfg(), 1, machine=m, sizes=SIZES)
    assert apart.predicted.compute == pytest.approx(6 * m.launch + (6 * big + 4 * row) / m.stream, rel=1e-12)
    assert "row kernel" not in apart.explain()


def test_a_row_chain_split_over_different_grids_is_priced_kernel_by_kernel():
    """Only kernels on the same ranks fuse: with the rows split over two GPUs for every kernel the chain
    is cheaper than its kernels' sum; with the first reduction left on rank 0 it is exactly that sum. The
    search's one-kernel change gives the same prediction as pricing the whole choice again."""
    from dace_partition.passes.local_optimize import fused_for_search
    work, _ = fused_for_search(row_softmax.to_sdfg(), None)
    work, _, ks = prepare(work, SIZES)
    model = ProgramModel(work, ks, 2, resolve_solvers(None), _memory_bound(gpus=2))
    rows = {k.index: next(i for i, p in enumerate(model.priced[k.index]) if p.candidate.value == (2, 1))
            for k in model.kernels}
    assert len(rows) == 4
    first = model.kernels[0].index
    mixed = {**rows, first: 0}

    def kernel_sum(choice):
        return sum(model.priced[k][i].compute for k, i in choice.items())

    together, apart = model.evaluate(rows), model.evaluate(mixed)
    assert together.compute < 0.75 * kernel_sum(rows)
    assert apart.compute == pytest.approx(kernel_sum(mixed), rel=1e-12)
    assert model.row_kernels(rows) and not model.row_kernels(mixed)
    assert model.change(rows, together, first, 0).compute == pytest.approx(apart.compute, rel=1e-12)
    assert model.change(mixed, apart, first, rows[first]).compute == pytest.approx(together.compute, rel=1e-12)


# ---------------------------------------------------------------- calibrate(device="gpu")

def test_gpu_calibration_is_refused_in_words_without_a_gpu(monkeypatch):
    from dace_partition.runtime import cuda_build
    monkeypatch.setattr(cuda_build, "gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match="measures a GPU, and this machine has none"):
        dp.calibrate(device="gpu")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'gpu'"):
        dp.calibrate(device="tpu")


def test_the_gpu_model_prices_with_the_calibrated_rates(monkeypatch, tmp_path):
    """Once calibrate(device="gpu") saved its rates, gpu_machine() prices with them (the MPI link stays
    the host's, the GPUs the job's); without them, with the published figures."""
    import importlib
    import json
    from dataclasses import asdict
    M = importlib.import_module("dace_partition.search.machine")  # the module (the package exports a function)
    monkeypatch.setattr(M, "GPU_CACHE", str(tmp_path / "none.json"))
    published = dp.gpu_machine(gpus=1)
    saved = dp.Machine(stream=1.5e12, pcie=1.2e10, launch=3e-5, blas_flops=4e13, gpus=1, switch=2e-4,
                       map_ops=1e12, source="GPU calibrated (test)")
    path = tmp_path / "gpu_machine.json"
    path.write_text(json.dumps(asdict(saved)))
    monkeypatch.setattr(M, "GPU_CACHE", str(path))
    m = dp.gpu_machine(gpus=3, host=dp.Machine(alpha=1e-6, beta=1e-9))
    assert (m.stream, m.pcie, m.launch, m.blas_flops) == (1.5e12, 1.2e10, 3e-5, 4e13)
    assert (m.alpha, m.beta, m.gpus) == (1e-6, 1e-9, 3) and m.source == "GPU calibrated (test)"
    assert published.stream == 2.5e12 and published.source.startswith("GPU: H100 published")


def test_the_gpu_measurement_checks_its_kernels_and_gives_rates():
    """The measurement calibrate(device="gpu") runs, on programs whose GPU data flow is emulated on the
    host: device arrays made through the program's memory, results checked, every rate positive."""
    import json
    import os
    from conftest import mpi_script
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "gpu_calibration_emulated.py"), 1,
                     timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    got = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])
    assert got["correct"] is True
    assert all(got[k] > 0 and np.isfinite(got[k]) for k in ("launch", "stream", "pcie"))
    # a kernel's cost is the difference per step of a call that runs 33 of them (its result checked above);
    # the call's own is the rest of a one-kernel call (on the host a "kernel" costs next to nothing)
    assert got["steps"] == 33 and got["steps_s"] > 0 and got["step_s"] > 0 and got["call"] >= 0
    assert got["launch"] == pytest.approx(max((got["steps_s"] - got["step_s"]) / 32, 1e-7), rel=1e-9)
    assert got["call"] == pytest.approx(max(got["axpy_small_s"] - got["launch"], 0.0), rel=1e-9, abs=1e-12)
    assert got["axpy_device_s"] > 0 and "blas_flops" not in got  # gemm=0: no GEMM measured


def test_a_gpu_call_costs_its_overhead_once_whatever_the_schedule():
    """``call`` (what calibrate(device="gpu") measures as a call's cost beside its kernels) is added once
    to every candidate's prediction: the choice of grids does not change, each prediction grows by it."""
    base = dp.gpu_machine(gpus=2)
    slow = dataclasses.replace(base, call=1e-3)
    for ranks in (1, 2):
        a = dp.auto_schedule(row_softmax.to_sdfg(), ranks, machine=base, sizes=SIZES)
        b = dp.auto_schedule(row_softmax.to_sdfg(), ranks, machine=slow, sizes=SIZES)
        assert dict(a) == dict(b)
        assert b.predicted.compute == pytest.approx(a.predicted.compute + 1e-3, rel=1e-12)
        assert "call 1000 us" in str(slow) and "call" not in str(base)
