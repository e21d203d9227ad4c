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
