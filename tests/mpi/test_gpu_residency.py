"""device="gpu": where rank-local buffers live and which copies cross PCIe, read from the lowered graph.

Pure Python (no compiler, no GPU): the lowering keeps every rank-local buffer that only kernels and MPI
touch in GPU memory for the whole program, stages MPI through pinned host twins, and copies nothing
between two kernels. ``passes.gpu.pcie_copies`` reads every host<->GPU copy edge of the lowered SDFG
(nested SDFGs included), so a copy that the report does not list, or one inside a kernel, fails here.
"""
import dace
import numpy as np
import pytest
from dace import dtypes, nodes
from hypothesis import HealthCheck, given, settings, strategies as st

import dace_partition as dp
from dace_partition.compat import all_states
from dace_partition.ir.residency import CopyDirection, Memory
from dace_partition.passes.gpu import pcie_copies
from dace_partition.runtime.emulation import on_host
from dace_partition.solvers.node import DistributedMemlet

import programs_gpu
from conformance import random_programs as R
from conformance.programs import CASES

TO_HOST, TO_DEVICE = CopyDirection.TO_HOST, CopyDirection.TO_DEVICE


@pytest.fixture(autouse=True)
def _pure_reductions(monkeypatch):
    """DaCe's GPU reductions (warp shuffles) cannot run on the host: these tests keep the pure expansion."""
    monkeypatch.setenv("DACE_PARTITION_GPU_REDUCTIONS", "pure")


def _lowered(name, P=2):
    case = CASES[name]
    sdfg = case.program.to_sdfg()
    sdfg.name = f"res_{name}"
    dp.lower(sdfg, case.schedule(P, dp.maps(sdfg)), device="gpu")
    return sdfg


def _softmax():
    sdfg = programs_gpu.fused_softmax()
    dp.lower(sdfg, programs_gpu.leading_dim_schedule(sdfg), device="gpu")
    return sdfg


def _comm_states(sdfg):
    return {st.label: st for st in all_states(sdfg) if any(isinstance(n, DistributedMemlet) for n in st.nodes())}


def _check_invariants(sdfg):
    """What holds for every GPU lowering: MPI never touches GPU memory; resident buffers are allocated once
    and cross PCIe only in the staging states next to a communication state, exactly as the report says."""
    res = dp.report(sdfg).residency
    assert res is not None
    known = {str(s) for s in sdfg.free_symbols} | set(sdfg.constants)
    for name in res.resident:
        desc = sdfg.arrays[name]
        assert desc.storage == dtypes.StorageType.GPU_Global and res.where(name) == Memory.GPU
        if {str(s) for s in desc.free_symbols} <= known:  # sizes known at start: allocated once
            assert desc.lifetime == dtypes.AllocationLifetime.Persistent, f"{name} is allocated per call"
    for name, twin in res.pinned:
        desc = sdfg.arrays[twin]
        assert desc.storage == dtypes.StorageType.CPU_Pinned and desc.lifetime == sdfg.arrays[name].lifetime
        assert res.where(twin) == Memory.PINNED
    for state in all_states(sdfg):
        for n in state.nodes():
            if isinstance(n, DistributedMemlet):
                packed = n.implementation in ("halo_packed", "blocks_packed", "allreduce_device")  # on the device
                assert packed == (state.label in res.device_moves), state.label
                for e in state.in_edges(n) + state.out_edges(n):
                    on_gpu = sdfg.arrays[e.data.data].storage == dtypes.StorageType.GPU_Global
                    assert on_gpu == packed, f"{'MPI touches' if on_gpu else 'a packed move misses'} GPU memory: " \
                                             f"{e.data.data} in {state.label}"
    comm = _comm_states(sdfg)
    device = set(res.resident) | {t for _, t in res.device_twins}
    graph = [(state, src if d == TO_HOST else dst, d) for state, src, dst, d in pcie_copies(sdfg)
             if (src if d == TO_HOST else dst) in device]
    for state, buffer, d in graph:
        base = state[:-len("_rank0")] if state.endswith("_rank0") else state
        suffix = "_to_host" if d == TO_HOST else "_to_gpu"
        ends = ("dace_partition_arguments_to_host", "dace_partition_device_arguments_to_host") if d == TO_HOST \
            else ("dace_partition_arguments_to_gpu", )
        assert base in ends or base.endswith(suffix) and base[:-len(suffix)] in comm, \
            f"{buffer} crosses PCIe in '{state}', which is no staging state of a communication state or the call"
    assert sorted(graph) == sorted((c.state, c.buffer, c.direction) for c in res.copies), \
        "the report's copies are not the graph's"
    for c in res.copies:
        assert res.twins[c.buffer] == c.host
    return res


def test_consecutive_kernels_hand_their_buffers_to_each_other_on_the_device(monkeypatch):
    """The softmax is four kernels (max, subtract-exp, sum, divide) on one row split, kept apart here: the
    only copies across PCIe are the scattered input to the device and the result to the host for the
    gather."""
    monkeypatch.setenv("DACE_PARTITION_GPU_FUSION", "0")
    sdfg = _softmax()
    res = _check_invariants(sdfg)
    assert len(res.resident) == 5  # x, mx, e, s and the result, on the device for the whole program
    copies = sorted((d, src, dst) for _, src, dst, d in pcie_copies(sdfg))
    assert copies == [(TO_HOST, "__dp3___return", "__dp3___return_host"), (TO_DEVICE, "__dp0_x_host", "__dp0_x")]
    kernel_states = [s for s in all_states(sdfg) if any(isinstance(n, nodes.NestedSDFG) and n.label.endswith("_gpu")
                                                        for n in s.nodes())]
    assert len(kernel_states) == 4
    for state in kernel_states:
        wrapper = next(n.sdfg for n in state.nodes() if isinstance(n, nodes.NestedSDFG))
        assert not pcie_copies(wrapper), f"kernel state {state.label} copies between host and GPU"
    assert not res.kernel_copies and not res.host


@pytest.fixture
def staged_halos(monkeypatch):
    """Halo exchanges on the host sides of GPU buffers, their slabs staged in states around them."""
    monkeypatch.setenv("DACE_PARTITION_GPU_COMM", "staged")


def test_a_halo_exchange_in_a_time_loop_runs_on_the_gpu_buffers():
    """Jacobi 2-D, T sweeps on a row split: nothing crosses PCIe inside the loop, in the graph: each halo
    exchange packs its faces on the tiles in GPU memory (``halo_packed``), and the only copies are the
    scatter's and the gather's, around the loop."""
    sdfg = _lowered("jacobi2d_time")
    res = _check_invariants(sdfg)
    assert len(res.device_moves) == 2  # one exchange per array and sweep
    assert all("guard" in c.state for c in res.copies), [c.line() for c in res.copies if "guard" not in c.state]
    assert sorted((c.buffer, c.direction) for c in res.copies) == [
        ("__dp0_A", TO_HOST), ("__dp0_A", TO_DEVICE), ("__dp1_B", TO_HOST), ("__dp1_B", TO_DEVICE)]
    text = str(dp.report(sdfg))
    assert "packed pieces: device pointers where MPI is CUDA-aware" in text
    assert "moves on GPU memory (halos and redistributions packed there" in text


def test_an_unknown_gpu_comm_setting_is_refused_when_lowering(monkeypatch):
    monkeypatch.setenv("DACE_PARTITION_GPU_COMM", "fast")
    with pytest.raises(ValueError, match=r"DACE_PARTITION_GPU_COMM='fast': expected one of packed, staged"):
        _lowered("jacobi2d_time")


def test_a_halo_exchange_in_a_time_loop_stages_only_the_rows_it_moves(staged_halos):
    """The same with ``DACE_PARTITION_GPU_COMM=staged``: inside the loop the kernels copy nothing; each halo
    exchange (MPI reads the tile's edge rows and writes its halo rows in place) copies to the host the two
    edge rows and the two halo rows (whose columns MPI does not all write), and back to the device the two
    halo rows: one row each, never the tile."""
    sdfg = _lowered("jacobi2d_time")
    res = _check_invariants(sdfg)
    for buffer in ("__dp0_A", "__dp1_B"):
        halo = [c for c in res.copies if "guard" not in c.state and c.buffer == buffer]
        assert sorted((c.direction, c.why) for c in halo) == sorted(
            [(TO_HOST, "MPI reads it")] * 2 + [(TO_HOST, "MPI writes part of it")] * 2 + [(TO_DEVICE, "MPI wrote it")] * 2)
        # the top halo row, and the row below this rank's block (its height depends on the rank: N is symbolic)
        written = {c.part for c in halo if c.why == "MPI wrote it"}
        assert "rows 0..0" in written and len(written) == 2
        first, last = (written - {"rows 0..0"}).pop()[len("rows "):].split("..")
        assert first == last and "_r0" in first, written
        assert all(c.part.startswith("rows ") for c in halo)
    assert "MPI_Isend" in str(dp.report(sdfg))
    # one scatter before the loop and one gather after it per array, each staged once, whole
    outside = sorted((c.buffer, c.direction, c.part) for c in res.copies if "guard" in c.state)
    assert outside == [("__dp0_A", TO_HOST, "whole"), ("__dp0_A", TO_DEVICE, "whole"),
                       ("__dp1_B", TO_HOST, "whole"), ("__dp1_B", TO_DEVICE, "whole")]


@pytest.mark.parametrize("halo", ["packed", "staged"])
def test_an_io_distributed_time_loop_moves_only_its_halos(halo, monkeypatch):
    """io="distributed": the tiles are arguments, whose device twins the kernels update. Packed, the halo
    exchanges work on the twins (nothing crosses PCIe but the call's own copies); staged, each stages the
    rows it moves of the twin, never the tile (whole tiles per exchange made 200 sweeps of 8192^2 on two
    ranks sharing an H200 take 6 s per call, 120 times one rank)."""
    monkeypatch.setenv("DACE_PARTITION_GPU_COMM", halo)
    sdfg = CASES["jacobi2d_time"].program.to_sdfg()
    sdfg.specialize(dict(N=12))
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg)}, device="gpu", io="distributed")
    res = _check_invariants(sdfg)
    exchanges = [c for c in res.copies if c.why.startswith("MPI")]
    if halo == "packed":
        assert not exchanges and res.device_moves
        assert {c.why for c in res.copies} == {"the call starts", "the call ends"}
        return
    assert {c.buffer for c in exchanges} == {"__dp_dev_A", "__dp_dev_B"}
    assert all(c.part.startswith("rows ") for c in exchanges), [c.line() for c in exchanges if c.part == "whole"]


@pytest.mark.parametrize("io,halo", [pytest.param("root", "staged", marks=pytest.mark.slow), ("distributed", "staged"),
                                     ("root", "packed")])
def test_a_halo_exchange_over_blocks_of_different_heights_is_correct(io, halo, monkeypatch):
    """12 rows, 10 of them updated, over 4 ranks: blocks of 3, 3, 2 and 2 rows. Staged, each exchange
    stages the rank's own edge and halo rows (an expression in its grid coordinates), not the tallest
    block's; packed, each rank packs its own faces. Run on the host under mpiexec -n 4, every element
    equals NumPy's (the tallest block's rows gave wrong halos on an H200, 8190 rows over 4 ranks)."""
    from conformance.harness import compare
    monkeypatch.setenv("DACE_PARTITION_GPU_COMM", halo)
    case = CASES["jacobi2d_time"]
    sdfg = case.program.to_sdfg()
    sdfg.specialize(dict(N=12))
    sdfg.name = f"res_uneven_halo_{io}_{halo}"
    dp.lower(sdfg, {m.name: (4, 1) for m in dp.maps(sdfg)}, device="gpu", io=io)
    res = _check_invariants(sdfg)
    if halo == "staged":
        assert any(c.part.startswith("rows ") and "_r0" in c.part for c in res.copies), "no rank-dependent rows"
    else:
        assert res.device_moves and all("guard" in c.state for c in res.copies)
    inputs = {k: v for k, v in case.inputs(np.random.default_rng(5)).items() if k != "N"}
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    got = dp.run(on_host(sdfg), 4, timeout=180, **inputs)
    why = compare(expected, got, case.exact)
    assert why is None, why


def test_packed_halos_give_mpi_the_buffers_where_it_is_cuda_aware_and_refuse_a_bad_setting(monkeypatch):
    """``DACE_PARTITION_CUDA_AWARE=1`` makes every rank hand MPI the packed faces themselves (on the host
    here: what the GPU build does with device pointers), equal to NumPy; a value other than 0, 1 or auto
    ends every rank with a message that names the variable, before any halo moves."""
    from conformance.harness import compare
    case = CASES["jacobi2d_time"]
    sdfg = case.program.to_sdfg()
    sdfg.specialize(dict(N=12))
    sdfg.name = "res_cuda_aware_halo"
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg)}, device="gpu")
    assert _check_invariants(sdfg).device_moves
    on_host(sdfg)
    inputs = {k: v for k, v in case.inputs(np.random.default_rng(7)).items() if k != "N"}
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    monkeypatch.setenv("DACE_PARTITION_CUDA_AWARE", "1")
    why = compare(expected, dp.run(sdfg, 2, timeout=180, **inputs), case.exact)
    assert why is None, why
    monkeypatch.setenv("DACE_PARTITION_CUDA_AWARE", "maybe")
    with pytest.raises(Exception, match=r"DACE_PARTITION_CUDA_AWARE=maybe: expected 0, 1 or auto"):
        dp.run(sdfg, 2, timeout=120, **inputs)


@pytest.mark.parametrize("name,P,comm,kinds,aware", [
    ("fdtd2d", 2, "packed", {"blocks_packed", "halo_packed"}, "auto"),
    ("gemver", 4, "packed", {"blocks_packed"}, "1"),
    ("normalize", 2, "packed", {"allreduce_device"}, "1"),
    pytest.param("normalize", 4, "packed", {"allreduce_device"}, "auto", marks=pytest.mark.slow),
    pytest.param("fdtd2d", 4, "staged", set(), "auto", marks=pytest.mark.slow)])
def test_moves_between_gpu_buffers_run_on_the_device(name, P, comm, kinds, aware, monkeypatch):
    """fdtd2d's time loop moves hz and ex between the row blocks of one kernel and the next (and a halo of
    hz), gemver moves a vector between two kernels' blocks, each in a communication state shared with a
    scatter from rank 0's host array; normalize sums partial column sums of its row blocks. The lowering
    gives the first two a state of their own (``..._on_gpu``), and all run on the GPU buffers
    (``blocks_packed``, ``halo_packed``, ``allreduce_device``): nothing crosses PCIe for them there. With
    ``DACE_PARTITION_GPU_COMM=staged`` nothing is split or moved on the device. Run on the host under
    mpiexec (``DACE_PARTITION_CUDA_AWARE=1``: MPI gets the buffers themselves, as a CUDA-aware MPI gets
    device pointers), every element equals NumPy's."""
    from conformance.harness import compare
    monkeypatch.setenv("DACE_PARTITION_GPU_COMM", comm)
    monkeypatch.setenv("DACE_PARTITION_CUDA_AWARE", aware)
    case = CASES[name]
    sdfg = case.program.to_sdfg()
    sdfg.name = f"res_device_moves_{name}_{P}_{comm}"
    dp.lower(sdfg, case.schedule(P, dp.maps(sdfg)), device="gpu")
    res = _check_invariants(sdfg)
    states = {st.label: st for st in all_states(sdfg)}
    assert kinds == {n.implementation for label in res.device_moves for n in states[label].nodes()
                     if isinstance(n, DistributedMemlet)}
    assert any(label.endswith("_on_gpu") for label in states) == (name != "normalize" and comm == "packed")
    moved = {e.data.data for label in res.device_moves for e in states[label].edges()}
    # what crosses PCIe for them is the scatter before and the gather after fdtd2d's time loop
    assert not [c.line() for c in res.copies if c.buffer in moved and c.why.startswith("MPI") and "guard" not in c.state]
    inputs = case.inputs(np.random.default_rng(3))
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    got = dp.run(on_host(sdfg), P, timeout=180, **inputs)
    why = compare(expected, got, case.exact)
    assert why is None, why


def _stencil_on_gpu(name, n, grid, io, label):
    """Conformance stencil ``name`` of ``n`` points per dimension, its maps of len(grid) dimensions on
    ``grid``, lowered for the GPU."""
    sdfg = CASES[name].program.to_sdfg()
    sdfg.specialize(dict(N=n))
    sdfg.name = f"{label}_{name}_{'x'.join(map(str, grid))}_{io}"
    dp.lower(sdfg, {m.name: grid for m in dp.maps(sdfg) if len(m.params) == len(grid)}, device="gpu", io=io)
    return sdfg


def _stencil_runs_like_numpy(name, sdfg, n, grid):
    """Two sweeps of the lowered stencil, its GPU data flow on the host under mpiexec: every element equals
    NumPy's."""
    from conformance.harness import compare
    case = CASES[name]
    rng = np.random.default_rng(6)
    inputs = dict(A=rng.random((n, ) * len(grid)), B=rng.random((n, ) * len(grid)), T=2)
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    got = dp.run(on_host(sdfg), int(np.prod(grid)), timeout=180, **inputs)
    why = compare(expected, got, case.exact)
    assert why is None, why


@pytest.mark.parametrize("name,n,grid,io", [
    pytest.param("jacobi2d_time", 13, (1, 2), "root", marks=pytest.mark.slow),  # (2, 2) covers it (time)
    ("jacobi2d_time", 13, (2, 2), "distributed"),
    pytest.param("heat3d_time", 9, (1, 2, 2), "root", marks=pytest.mark.slow)])
def test_a_halo_exchange_across_columns_stages_only_its_slabs(name, n, grid, io, staged_halos):
    """A split of the columns (alone, with the rows, or of the second and third dimensions of a 3-D
    stencil; 13 or 9 points, so blocks of different sizes) stages the slabs MPI moves, each one copy
    (pitched where it is strided), never the tile. Run on the host under mpiexec, every element equals
    NumPy's."""
    sdfg = _stencil_on_gpu(name, n, grid, io, "res_slab_halo")
    res = _check_invariants(sdfg)
    # the exchanges' copies (the loop's scatter and gather, and the call's own copies, move whole tiles)
    halo = [c for c in res.copies if "guard" not in c.state and c.why.startswith("MPI")]
    assert halo and all(c.part != "whole" for c in halo), [c.line() for c in halo if c.part == "whole"]
    assert any(c.part.startswith("columns ") for c in halo)
    assert any(c.part.startswith("rows ") for c in halo) == (grid[0] > 1)
    assert any(c.part.startswith("dim 2 ") for c in halo) == (len(grid) > 2)
    _stencil_runs_like_numpy(name, sdfg, n, grid)


@pytest.mark.parametrize("name,n,grid,io", [
    ("jacobi2d_time", 13, (2, 2), "distributed"),
    ("heat3d_time", 9, (1, 2, 2), "root"),
    pytest.param("heat3d_time", 9, (2, 2, 1), "distributed", marks=pytest.mark.slow)])
def test_a_halo_exchange_across_columns_packs_its_faces_on_the_gpu_buffers(name, n, grid, io):
    """The same splits with the default packed halos: no copy in the graph inside the time loop (the faces,
    strided ones included, are packed by the exchange itself: pitched copies per face, per plane in 3-D).
    Run on the host under mpiexec, every element equals NumPy's."""
    sdfg = _stencil_on_gpu(name, n, grid, io, "res_packed_halo")
    res = _check_invariants(sdfg)
    assert res.device_moves and not [c for c in res.copies if c.why.startswith("MPI") and "guard" not in c.state]
    _stencil_runs_like_numpy(name, sdfg, n, grid)


@pytest.mark.parametrize("name", ["axpy_sweeps", pytest.param("columns_by_copies", marks=pytest.mark.slow)])
def test_array_copies_between_kernels_run_on_the_gpu(name, rng):
    """``y[:] = a * x + y`` in a time loop is a kernel into a temporary and a copy into ``y`` (and the
    scalar ``a`` is staged into an array before the loop); ``f[:, d] = ...`` copies into a strided column.
    On rank 0's GPU the copies run as kernels between resident buffers, so nothing crosses PCIe but the
    call's own arguments and no array stays on the host (they stayed there, copied around every kernel,
    twice per sweep). Run on the host (the GPU data flow emulated) under mpiexec, equal to NumPy."""
    sdfg = getattr(programs_gpu, name).to_sdfg()
    sdfg.name = f"res_device_copies_{name}"
    dp.lower(sdfg, {}, device="gpu")
    res = _check_invariants(sdfg)
    assert res.device_copies and not res.host and not res.kernel_copies, str(res)
    assert all(c.why in ("the call starts", "the call ends") for c in res.copies), str(res)
    n = 24
    if name == "axpy_sweeps":
        args = dict(x=rng.random(n), y=rng.random(n), a=1.5, T=3)
    else:
        args = dict(pos=rng.random((n, 3)), f=np.zeros((n, 3)))
    expected = getattr(programs_gpu, f"{name}_reference")(**{k: (v.copy() if isinstance(v, np.ndarray) else v)
                                                             for k, v in args.items()})
    got = dp.run(on_host(sdfg), 2, timeout=180, NC=n, **args)
    for k, v in expected.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-12, err_msg=k)


def test_copies_that_follow_one_another_run_as_gpu_kernels_in_order(rng):
    """cavity_flow sets its boundary with copies chained through ``p`` in one state (``p[:, -1] = p[:, -2]``,
    then ``p[0, :] = p[1, :]``, ...). Nested whole as one kernel, the access nodes between the copies stayed
    outside it and DaCe's nesting failed ("Node __dp_dev_p is not in the graph"). Each copy is now a copy
    kernel in a state of its own, in program order; run on the host (the GPU data flow), equal to NumPy."""
    sdfg = programs_gpu.boundary_copies.to_sdfg()
    sdfg.name = "res_boundary_copies"
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg) if not m.name.startswith("assign")}, device="gpu")
    res = _check_invariants(sdfg)
    split = [c for c in res.device_copies if f"{c}_1" in res.device_copies and f"{c}_2" in res.device_copies]
    assert split, f"the three chained copies should run in three states: {res.device_copies}"
    p = rng.random((9, 7))
    got = dp.run(on_host(sdfg), 2, timeout=180, p=p.copy(), T=3)
    np.testing.assert_allclose(got["p"], programs_gpu.boundary_copies_reference(p, 3), rtol=1e-13)


def test_a_gather_of_one_row_keeps_the_rows_the_gpu_wrote(rng):
    """deriche's backward sweep: rank 0's array gets a row on its GPU, then rows computed over split columns
    are gathered into it one at a time. The edge of such a gather names the whole array, so it counted as
    written whole: nothing was copied to the host before it, and the copy back after it put the host's
    stale rows over the GPU's (deriche: 9292 of 80000 elements wrong). A move into rank 0's array now counts
    as partial unless its blocks cover the array; run on the host (the GPU data flow), equal to NumPy."""
    sdfg = programs_gpu.backward_rows.to_sdfg()
    sdfg.specialize(dict(NW=10, NHC=6))
    sdfg.name = "res_backward_rows"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if m.shape[0] == 6}, device="gpu")
    res = _check_invariants(sdfg)
    staged = [c for c in res.copies if c.direction == TO_HOST and c.why == "MPI writes part of it"]
    assert staged, str(res)
    img = rng.random((10, 6))
    got = dp.run(on_host(sdfg), 2, timeout=180, img=img)
    np.testing.assert_allclose(got, programs_gpu.backward_rows_reference(img), rtol=1e-13)


def test_a_dot_of_an_empty_strided_column_runs(rng):
    """symm's ``B[:i, j] @ A[i, :i]`` on rank 0's GPU: DaCe's GPU copy of the strided column ``B[:i, j]`` kept
    its stride and was copied as a span of ``NB * (i - 1) + 1`` elements, negative at ``i = 0`` (heap
    corruption on the host, a failed cudaMalloc on a GPU; NPBench's symm, trmm, ludcmp and lu crashed).
    The copy is now contiguous and moves ``i`` elements; run on the host (the GPU data flow), equal to NumPy."""
    sdfg = programs_gpu.column_dots.to_sdfg()
    sdfg.name = "res_column_dots"
    dp.lower(sdfg, {}, device="gpu")
    A, B = rng.random((7, 7)), rng.random((7, 5))
    got = dp.run(on_host(sdfg), 2, timeout=180, A=A, B=B, out=np.zeros((7, 5)))
    np.testing.assert_allclose(got["out"], programs_gpu.column_dots_reference(A, B), rtol=1e-12)


def test_an_array_between_two_nodes_of_a_kernel_is_the_kernels_own():
    """MapFusion puts an array of one element between a tasklet and a nested SDFG inside a map (NPBench
    nbody's ``where=`` mask); the GPU transformation made it global memory with a persistent lifetime, which
    DaCe 1.0.2 passes to the kernel twice: "redefinition of ..." from the C++ compiler (nbody's automatic
    schedule with device="gpu"). Such an array is now in registers, allocated inside the kernel; an array
    that a state uses outside any map stays where it was."""
    from dace_partition.passes.gpu import _kernel_local_arrays
    sdfg = dace.SDFG("kernel_local")
    sdfg.add_array("x", [8], dace.float64)
    sdfg.add_array("y", [8], dace.float64)
    mask, _ = sdfg.add_array("__s0_n1__out_n2IN_m", [1], dace.bool_, transient=True,
                             storage=dtypes.StorageType.GPU_Global, lifetime=dtypes.AllocationLifetime.Persistent)
    sdfg.add_array("kept", [1], dace.bool_, transient=True, storage=dtypes.StorageType.GPU_Global)
    st = sdfg.add_state()
    inner = dace.SDFG("use_mask")
    inner.add_array("m", [1], dace.bool_)
    inner.add_array("o", [1], dace.float64)
    ist = inner.add_state()
    t = ist.add_tasklet("pick", {"mm"}, {"oo"}, "oo = 1.0 if mm else 0.0")
    ist.add_edge(ist.add_read("m"), None, t, "mm", dace.Memlet("m[0]"))
    ist.add_edge(t, "oo", ist.add_write("o"), None, dace.Memlet("o[0]"))
    me, mx = st.add_map("m", {"i": "0:8"}, schedule=dtypes.ScheduleType.GPU_Device)
    gt = st.add_tasklet("gt", {"a"}, {"b"}, "b = a > 0")
    nest = st.add_nested_sdfg(inner, sdfg, {"m"}, {"o"})
    acc = st.add_access(mask)
    st.add_memlet_path(st.add_read("x"), me, gt, dst_conn="a", memlet=dace.Memlet("x[i]"))
    st.add_edge(gt, "b", acc, None, dace.Memlet(f"{mask}[0]"))
    st.add_edge(acc, None, nest, "m", dace.Memlet(f"{mask}[0]"))
    st.add_memlet_path(nest, mx, st.add_write("y"), src_conn="o", memlet=dace.Memlet("y[i]"))
    st.add_nedge(st.add_read("kept"), st.add_write("kept"), dace.Memlet("kept[0]"))
    assert _kernel_local_arrays(sdfg) == 1
    assert (sdfg.arrays[mask].storage, sdfg.arrays[mask].lifetime) == (dtypes.StorageType.Register,
                                                                       dtypes.AllocationLifetime.Scope)
    assert sdfg.arrays["kept"].storage == dtypes.StorageType.GPU_Global


@pytest.mark.parametrize("name", ["reshape_merge", "reshape_split"])
def test_a_copy_that_reshapes_an_array_stays_a_host_copy_on_one_gpu(name):
    """A copy between arrays of different ranks (``x.reshape(...)`` materialised) is not a copy kernel:
    DaCe's CopyToMap cannot index it (lowering a reshape on one GPU was a ValueError). It runs on the host,
    and its arrays stay there with the reason."""
    sdfg = CASES[name].program.to_sdfg()
    sdfg.name = f"res_{name}_one_gpu"
    dp.lower(sdfg, {}, device="gpu")
    res = _check_invariants(sdfg)
    assert not res.device_copies and res.host, str(res)


def test_an_array_that_host_code_reads_stays_on_the_host_and_the_report_says_why():
    """``y = x * 2`` runs on rank 0's GPU, and the branch condition ``y[0] > 0`` is host code: ``y`` stays
    on the host (copied around its kernel), named with the state; ``x`` gets a device twin filled when the
    call starts, and the two split kernels keep their buffers on the device."""
    sdfg = programs_gpu.host_branch.to_sdfg()
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if m.name != "_Mult__map"}, device="gpu")
    res = _check_invariants(sdfg)
    host = dict(res.host)
    assert list(host) == ["y"] and "outside a kernel and MPI" in host["y"]
    assert sdfg.arrays["y"].storage != dtypes.StorageType.GPU_Global and res.where("y") == Memory.HOST
    assert res.kernel_copies == ("y", )
    assert dict(res.device_twins) == {"x": "__dp_dev_x"} and res.where("__dp_dev_x") == Memory.GPU
    assert [(c.buffer, c.why) for c in res.copies if c.host == "x"] == [("__dp_dev_x", "the call starts")]
    assert "x" in res.rank0  # only rank 0 holds the caller's x: its copy runs there alone
    text = str(dp.report(sdfg))
    assert "GPU residency" in text and "on the host: y (state" in text


def test_arguments_of_a_program_on_one_gpu_cross_pcie_once_per_call():
    """Nothing partitioned (a grid of one rank): the kernels run on rank 0's GPU on device twins of the
    arguments, filled when the call starts and copied back when it ends, and nothing else crosses PCIe."""
    sdfg = programs_gpu.fused_softmax()
    dp.lower(sdfg, {}, device="gpu")
    res = _check_invariants(sdfg)
    assert sorted((c.host, c.direction, c.why) for c in res.copies) == [
        ("__return", TO_HOST, "the call ends"), ("x", TO_DEVICE, "the call starts")]
    assert not res.kernel_copies and not res.host


@pytest.mark.parametrize("name", ["gemm", "fdtd2d", "heat3d_time", "mlp", "layernorm", "prod_cols"])
def test_conformance_programs_keep_mpi_off_gpu_memory(name):
    _check_invariants(_lowered(name))


def test_cpu_lowering_has_no_pinned_twins():
    case = CASES["jacobi2d_time"]
    sdfg = case.program.to_sdfg()
    dp.lower(sdfg, case.schedule(2, dp.maps(sdfg)))
    assert dp.report(sdfg).residency is None
    assert not pcie_copies(sdfg)
    assert not [a for a, d in sdfg.arrays.items() if d.storage == dtypes.StorageType.CPU_Pinned]


_COUNT = [0]


@settings(max_examples=5, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), ks=R.kernels(min_size=3, max_size=6))
def _random_program(data, ks, outcomes):
    _COUNT[0] += 1
    mod = R.load(R.source(ks), f"dp_res_{_COUNT[0]}")
    sdfg = mod.prog.to_sdfg()
    schedule = R.draw_schedule(data, dp.maps(sdfg))
    try:
        dp.lower(sdfg, schedule, device="gpu")
    except (dp.ScheduleError, dp.UnsupportedPattern):
        outcomes.append("refused")
        return
    _check_invariants(sdfg)
    outcomes.append("lowered" if dp.ranks_needed(sdfg) > 1 else "unsplit")


def test_random_programs_keep_mpi_off_gpu_memory_and_copy_only_around_it():
    """Random batches of kernels with random schedules (tests/conformance/random_programs.py): every GPU
    lowering satisfies the invariants; most must be partitioned, so refusals alone cannot pass."""
    outcomes = []
    _random_program(outcomes=outcomes)
    assert outcomes.count("lowered") >= 0.6 * len(outcomes), outcomes


# ---------------------------------------------------------------- the GPU lowering's data flow, run on the host
#
# A machine without a GPU cannot run the CUDA build, but it can run the GPU lowering's data flow
# (dace_partition.runtime.emulation.on_host): device arrays and their host sides stay separate arrays, so a
# staging copy that is missing, in the wrong place or on the wrong ranks gives a wrong result here.

def _gpu_maps(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive()
            if isinstance(n, nodes.MapEntry) and n.map.schedule == dtypes.ScheduleType.GPU_Device]


def test_a_row_softmax_is_one_row_kernel_that_stores_no_intermediate():
    """The softmax's four kernels on a row split keep to their rows: they become one kernel, a thread
    block per row reducing with the block (max, then sum), its intermediates (row max, exp, row sum)
    recomputed in registers, not stored: only x and the result live in GPU memory."""
    sdfg = _softmax()
    res = _check_invariants(sdfg)
    rows = dp.report(sdfg).row_kernels
    assert len(rows) == 1 and rows[0].startswith("4 kernels"), rows
    assert "GPU row kernel: 4 kernels" in str(dp.report(sdfg))
    assert len(res.resident) == 2, res.resident
    copies = sorted((d, src, dst) for _, src, dst, d in pcie_copies(sdfg))
    assert copies == [(TO_HOST, "__dp3___return", "__dp3___return_host"), (TO_DEVICE, "__dp0_x_host", "__dp0_x")]
    (kernel, ) = _gpu_maps(sdfg)
    assert kernel.map.gpu_block_size == [1, 32, 1]  # 32 columns: one warp per row
    code = "".join(n.code.as_string for n, _ in sdfg.all_nodes_recursive()
                   if isinstance(n, nodes.Tasklet) and n.label.startswith("row_kernel"))
    assert code.index("__DPR_ALLREDUCE(max") < code.index("__DPR_ALLREDUCE(sum")


def test_kernels_that_leave_their_rows_are_not_fused():
    """A column reduction (std over columns split by rows) needs every row: no row kernel."""
    sdfg = _lowered("std_cols")
    assert dp.report(sdfg).row_kernels == []


NR, MR, TR = (dace.symbol(s) for s in ("NR", "MR", "TR"))


@dace.program
def _rows_scaled_by(x: dace.float64[NR, MR]):
    return x / np.max(x, axis=1)[:, np.newaxis] * TR


@dace.program
def _rows_scaled(x: dace.float64[NR, MR]):
    return x / np.max(x, axis=1)[:, np.newaxis] * 2.0


def test_a_row_chain_whose_code_uses_a_symbol_the_kernel_does_not_get_is_not_fused():
    """The fused tasklet is C++, whose symbols DaCe does not pass to a GPU kernel: a chain whose code uses a
    symbol that no array size or row range names (``TR`` here) keeps its kernels; the same chain with a
    constant fuses."""
    found = {}
    for prog in (_rows_scaled_by, _rows_scaled):
        sdfg = prog.to_sdfg()
        sdfg.specialize(dict(NR=16, MR=32))
        dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}, device="gpu")
        found[prog.f.__name__] = dp.report(sdfg).row_kernels
    assert found["_rows_scaled_by"] == [] and len(found["_rows_scaled"]) == 1, found


@pytest.mark.parametrize("name", ["softmax_fused", pytest.param("layernorm", marks=pytest.mark.slow)])
def test_row_kernels_give_numpys_result(name):
    """The fused row kernels (the softmax's four, the layer norm's last two, with its per-column gamma
    and beta) run on the host under mpiexec -n 2 (each row's thread does what the row's block does on
    the GPU): every output element equals NumPy's."""
    from conformance.harness import compare
    if name == "layernorm":
        case, sdfg = _host_case(name)
        assert dp.report(sdfg).row_kernels, "the layer norm's last kernels should fuse"
        inputs = case.inputs(np.random.default_rng(5))
        expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
        why = compare(expected, dp.run(sdfg, 2, timeout=180, **inputs), case.exact)
        assert why is None, why
        return
    sdfg = _softmax()
    sdfg.name = "res_host_softmax_rows"
    assert dp.report(sdfg).row_kernels
    x = np.random.default_rng(3).random((16, 32)) * 20 - 10
    got = dp.run(on_host(sdfg), 2, timeout=180, x=x)
    np.testing.assert_allclose(got, programs_gpu.softmax_reference(x), rtol=1e-12, atol=0)


def _host_case(name, P=2, io="root"):
    case = CASES[name]
    sdfg = case.program.to_sdfg()
    sdfg.name = f"res_host_{name}_{io}"
    dp.lower(sdfg, case.schedule(P, dp.maps(sdfg)), device="gpu", io=io)
    _check_invariants(sdfg)
    return case, on_host(sdfg)


# the softmax's data flow runs by default as one row kernel (test_row_kernels_give_numpys_result)
HOST_DEFAULT = ["jacobi2d_time", "std_cols"]


@pytest.mark.parametrize("name", [n if n in HOST_DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_the_gpu_data_flow_of_conformance_programs_is_correct_on_two_ranks(name):
    """Every conformance program's GPU lowering (resident arrays, pinned twins, staging around MPI, device
    twins of the arguments copied at the call's start and end, rank 0's copies on rank 0 only), run on the
    host under mpiexec: every output element equals NumPy's."""
    from conformance.harness import compare
    case = CASES[name]
    try:
        case, sdfg = _host_case(name)
    except (dp.ScheduleError, dp.UnsupportedPattern) as e:
        pytest.skip(f"refused as on the CPU: {e}")
    inputs = case.inputs(np.random.default_rng(7))
    expected = case.reference({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    got = dp.run(sdfg, 2, timeout=180, **inputs)
    why = compare(expected, got, case.exact)
    assert why is None, why


def test_the_gpu_data_flow_of_a_host_read_array_and_a_rank0_kernel_is_correct():
    """``y = x * 2`` on rank 0's GPU, read by the host branch, the two branches split over two ranks."""
    sdfg = programs_gpu.host_branch.to_sdfg()
    sdfg.name = "res_host_branch"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg) if m.name != "_Mult__map"}, device="gpu")
    on_host(sdfg)
    for sign in (1.0, -1.0):
        x = sign * np.arange(1.0, 11.0)
        got = dp.run(sdfg, 2, x=x, out=np.zeros(10), NH=10)
        np.testing.assert_array_equal(got["out"], programs_gpu.host_branch_reference(x, None))


@dace.program
def weighted_by_a_constant_array(x: dace.float64[12, 2], out: dace.float64[12, 2]):
    weights = np.array([0.25, 0.75], dtype=np.float64)
    out[:] = x * weights + np.log(weights)


def test_a_constant_array_of_the_program_stays_in_host_code_and_runs_on_two_ranks():
    """``np.array([0.25, 0.75])`` is a constant of the SDFG, which DaCe compiles into host code: kept as a
    resident transient it was never allocated (DaCe's code generator: 'Variable __state->... has not been
    defined'; CuPy's Gaussian-mixture example). It stays on the host, the report says why, and the split
    kernel gets it copied to the device around it."""
    sdfg = weighted_by_a_constant_array.to_sdfg()
    sdfg.name = "res_constant_array"
    (const, ) = sdfg.constants_prop
    dp.lower(sdfg, {m.name: (2, 1) for m in dp.maps(sdfg) if m.shape[0] == 12}, device="gpu")
    res = _check_invariants(sdfg)
    assert const not in res.resident and "a constant of the program" in dict(res.host)[const]
    assert const in res.kernel_copies
    on_host(sdfg)
    x = np.random.default_rng(3).random((12, 2))
    got = dp.run(sdfg, 2, x=x, out=np.zeros((12, 2)))
    np.testing.assert_allclose(got["out"], x * [0.25, 0.75] + np.log([0.25, 0.75]), rtol=1e-14)


def test_device_arrays_go_in_and_out_of_the_gpu_data_flow_on_two_ranks():
    """Arrays given as device arrays (``__cuda_array_interface__`` only): io="distributed" tiles of a
    stencil's time loop are the program's device twins, updated in place; a root-io softmax takes rank 0's
    device array and returns a device array; NumPy in still gives NumPy out; a wrong dtype or shape is
    refused in words (tests/mpi_scripts/device_arrays_run.py, the GPU data flow emulated on the host)."""
    import os
    from conftest import mpi_script
    jac = CASES["jacobi2d_time"].program.to_sdfg()
    jac.specialize(dict(N=12))  # io="distributed" needs the halo's sizes when lowering
    jac.name = "res_device_arrays_jacobi"
    dp.lower(jac, {m.name: (2, 1) for m in dp.maps(jac)}, device="gpu", io="distributed")
    twins = dict(_check_invariants(jac).device_twins)
    assert sorted(twins) == ["A", "B"], "each rank's tiles should be its kernels' device twins"
    _, sm = _host_case("softmax")
    folders = [dp.runtime.launch.build(on_host(jac)), dp.runtime.launch.build(sm)]
    res = mpi_script(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "device_arrays_run.py"), 2, *folders,
                     timeout=240)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr[-3000:]


def _row_kernel(prog, sizes):
    sdfg = prog.to_sdfg()
    if sizes:
        sdfg.specialize(sizes)
    dp.lower(sdfg, {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}, device="gpu")
    code = "".join(n.code.as_string for n, _ in sdfg.all_nodes_recursive()
                   if isinstance(n, nodes.Tasklet) and n.label.startswith("row_kernel"))
    return dp.report(sdfg).row_kernels, code


def test_a_row_kernel_stages_in_shared_memory_the_rows_it_reads_more_than_once(monkeypatch):
    """``x / max(x) * 2`` reads each row of ``x`` twice (the row max, then the map): the row kernel stages
    the row in shared memory, read from GPU memory once, where the row length is a constant and the row
    fits (32 columns of float64); a row of 8192 float64 (64 KiB) does not fit, a row length known only at
    run time (``MR`` not specialized) has no compile-time buffer, and ``DACE_PARTITION_GPU_ROW_CACHE=0`` turns staging off: then
    both loops read ``x`` from memory."""
    rows, code = _row_kernel(_rows_scaled, dict(NR=16, MR=32))
    assert len(rows) == 1 and "staged in shared memory" in rows[0], rows
    assert "__DPR_SHARED double __dpr_c_" in code and "[32];" in code
    assert code.count("__dpr_in0[") == 1, "x is read from GPU memory in the staging loop only"
    for sizes in (dict(NR=16, MR=8192), dict(NR=16)):
        rows, code = _row_kernel(_rows_scaled, sizes)
        assert len(rows) == 1 and "staged" not in rows[0] and "__DPR_SHARED double" not in code, rows
        assert code.count("__dpr_in0[") == 2
    monkeypatch.setenv("DACE_PARTITION_GPU_ROW_CACHE", "0")
    rows, code = _row_kernel(_rows_scaled, dict(NR=16, MR=32))
    assert len(rows) == 1 and "staged" not in rows[0] and code.count("__dpr_in0[") == 2


def test_the_device_result_pool_reuses_freed_buffers_after_a_synchronization():
    """The runtime's pool of freed device buffers (runtime.device_arrays.BufferPool, what CudaMemory keeps
    results in), on host memory: a buffer given back is handed out again for the same size only, after a
    synchronization; at most two per size and ``keep_bytes`` in all are kept, the rest freed at once;
    release() frees what is kept; a failed synchronization frees the buffer and says so."""
    from dace_partition.runtime.device_arrays import BufferPool, HostMemory
    host = HostMemory()
    owners, freed, syncs = {}, [], []

    def alloc(nbytes):
        ptr, buf = host.malloc(nbytes)
        owners[ptr] = buf
        return ptr

    pool = BufferPool(freed.append, lambda: syncs.append(1) or 0, keep=2, keep_bytes=64)
    a, b, c, d = alloc(16), alloc(16), alloc(16), alloc(48)
    assert pool.take(16) is None and not syncs
    for p in (a, b, c):
        pool.give(p, 16)
    assert freed == [c] and pool.kept_bytes == 32  # two kept per size
    pool.give(d, 48)
    assert freed == [c, d] and pool.kept_bytes == 32  # 80 bytes would exceed keep_bytes
    assert pool.take(8) is None and not syncs  # another size: nothing to reuse
    got = pool.take(16)
    assert got in (a, b) and syncs == [1] and pool.kept_bytes == 16
    pool.release()
    assert set(freed) == {c, d, ({a, b} - {got}).pop()} and pool.kept_bytes == 0 and pool.take(16) is None
    failing = BufferPool(freed.append, lambda: 700)
    failing.give(got, 16)
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        failing.take(16)
    assert freed[-1] == got
