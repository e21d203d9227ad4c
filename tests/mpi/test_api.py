"""Public API: maps(), schedule keys, the daceml compatibility entry point, compile() under mpiexec."""
import os

import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import mpi_script


def test_maps_lists_names_params_shapes_in_program_order():
    infos = dp.maps(P.transposed_add.to_sdfg())
    assert [m.name for m in infos] == ["_Transpose_.transpose_map", "_Add__map"]
    assert infos[0].params == ("__i0", "__i1") and infos[0].shape == (8, 16)
    assert infos[1].shape == (16, 8)
    mm = dp.maps(P.matmul.to_sdfg())
    assert [m.name for m in mm] == ["_MatMult_.gemm_init_map", "_MatMult_.gemm_map"]
    assert mm[1].shape == (64, 64, 64)


def test_names_are_unique():
    import dace

    @dace.program
    def twice(x: dace.int64[16]):
        return (x + 1) + (x + 2)

    names = [m.name for m in dp.maps(twice.to_sdfg())]
    assert len(names) == len(set(names)) == 3


def test_schedule_by_map_entry_object_and_mapinfo():
    from dace import nodes
    sdfg = P.add5.to_sdfg()
    entry = next(n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, nodes.MapEntry))
    dp.lower(sdfg, {entry: (2, )})
    assert dp.ranks_needed(sdfg) == 2
    sdfg2 = P.add5.to_sdfg()
    dp.lower(sdfg2, {dp.maps(sdfg2)[0]: (4, )})
    assert dp.ranks_needed(sdfg2) == 4


def test_daceml_distributed_lower_is_the_same_function():
    import daceml.distributed
    assert daceml.distributed.lower is dp.lower
    sdfg = P.add5.to_sdfg()
    daceml.distributed.lower(sdfg, {"_Add__map": (2, )})
    assert "MPI_Scatterv" in dp.report(sdfg).calls("x")[0]


def test_quickstart_example_under_mpiexec():
    """The README demo (``make demo``): automatic schedules and one hand schedule, compile() inside an
    mpiexec-launched script, every result checked against NumPy on rank 0."""
    res = mpi_script(os.path.join("examples", "quickstart.py"), 4, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("matches NumPy") == 3
    assert "DOES NOT MATCH" not in res.stdout
    assert res.stdout.count("automatic schedule for 4 rank(s)") == 2


def test_mlp_example_under_mpiexec():
    res = mpi_script(os.path.join("examples", "mlp.py"), 4, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("matches NumPy") == 2


LEVELS = np.arange(12, dtype=np.float64) * 0.5  # module-level: DaCe passes them as arguments '__g_...'
GAIN = 1.75


def _levels_program():
    import dace
    N = dace.symbol("N")

    @dace.program
    def scaled_levels(x: dace.float64[N], idx: dace.int64[N], y: dace.float64[N]):
        for i in dace.map[0:N]:
            y[i] = x[i] * LEVELS[idx[i]] * GAIN

    return scaled_levels


def test_lowering_the_program_binds_the_module_level_arrays_it_reads(rng):
    """``lower(program)`` parses the ``@dace.program`` and binds the module arrays DaCe made arguments, so the
    call passes only the program's own arguments; the SDFG alone names the missing array before any rank
    starts."""
    prog = _levels_program()
    x, idx = rng.random(30), rng.integers(0, 12, 30)
    expected = x * LEVELS[idx] * GAIN
    sdfg = prog.to_sdfg()
    schedule = {m.name: (3, ) for m in dp.maps(sdfg)}
    dp.lower(sdfg, schedule)
    with pytest.raises(ValueError, match=r"missing argument '__g_LEVELS': the program reads the module-level array "
                                         r"'LEVELS'.*dp.lower\(program"):
        dp.run(sdfg, 3, x=x, idx=idx, y=np.zeros(30))
    lowered = dp.lower(prog, schedule)
    assert [k.grid for k in dp.report(lowered).kernels] == [(3, )]
    np.testing.assert_allclose(dp.run(lowered, 3, x=x, idx=idx, y=np.zeros(30))["y"], expected, rtol=1e-14)


def test_the_program_run_unlowered_before_and_after_does_not_replace_the_lowered_build(rng):
    """The user checks the program with DaCe (it builds in DaCe's folder of that name), lowers it, runs it,
    and calls it with DaCe again. The lowered program builds in a folder of its own; in the one DaCe used,
    the ranks loaded the unlowered library (a crash), or after DaCe's next build of it, ran it."""
    prog = _levels_program()
    x, idx = rng.random(40), rng.integers(0, 12, 40)
    expected = x * LEVELS[idx] * GAIN
    y = np.zeros(40)
    prog(x=x, idx=idx, y=y)
    np.testing.assert_allclose(y, expected, rtol=1e-14)
    lowered = dp.lower(prog, ranks=3)
    np.testing.assert_allclose(dp.run(lowered, 3, x=x, idx=idx, y=np.zeros(40))["y"], expected, rtol=1e-14)
    prog(x=x, idx=idx, y=np.zeros(40))  # DaCe builds the unlowered program again, in its own folder
    np.testing.assert_allclose(dp.run(lowered, 3, x=x, idx=idx, y=np.zeros(40))["y"], expected, rtol=1e-14)
    assert os.path.basename(dp.runtime.launch.build(lowered)) == f"{lowered.name}-lowered"


def test_a_build_that_dace_renamed_is_the_one_the_ranks_call(rng):
    """Where the lowered library is loaded in the building process (``dp.compile``, ``dp.load``), DaCe
    builds the next lowering of that program under ``<name>_0`` in the same folder; the ranks call that
    build, not the loaded one (whose grid differs here)."""
    from dace.sdfg.utils import load_precompiled_sdfg
    prog = _levels_program()
    x, idx = rng.random(30), rng.integers(0, 12, 30)
    maps = [m.name for m in dp.maps(prog.to_sdfg())]
    first = dp.lower(prog, {m: (3, ) for m in maps})
    first.name = "levels_renamed_build"
    loaded = load_precompiled_sdfg(dp.runtime.launch.build(first))  # kept loaded until the end
    second = dp.lower(prog, {m: (2, ) for m in maps})
    second.name = "levels_renamed_build"
    got = dp.run(second, 2, x=x, idx=idx, y=np.zeros(30))["y"]
    np.testing.assert_allclose(got, x * LEVELS[idx] * GAIN, rtol=1e-14)
    assert os.path.exists(os.path.join(dp.runtime.launch.build(second), "src", "cpu", "levels_renamed_build_0.cpp"))
    del loaded
