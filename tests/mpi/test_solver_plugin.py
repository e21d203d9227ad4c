"""A solver from another package takes over grid-to-grid moves: the plug-in in tests/plugins/dp_p2p.py,
installed under the ``dace_partition.solvers`` entry point (a real dist-info on sys.path), implements
redistributions with MPI_Isend/MPI_Irecv when listed first; the program runs under mpiexec and every
rank receives exactly the bytes the plug-in's cost says."""
import os

import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import run_counted
from dace_partition.solvers import registry

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins")


@pytest.fixture
def p2p_installed(tmp_path, monkeypatch):
    dist = tmp_path / "dp_p2p-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dp-p2p\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[dace_partition.solvers]\np2p = dp_p2p:P2PSolver\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(PLUGINS)
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "_ORDER", list(registry._ORDER))
    yield


def redistribution_entries(sdfg):
    return [e for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"]


def test_entry_point_solver_is_last_by_default_and_chosen_when_listed_first(p2p_installed, rng):
    names = [s.name for s in registry.resolve_solvers(None)]
    assert names[-1] == "p2p" and names.index("p2p") > names.index("blocks")
    schedule = {m.name: g for m, g in zip(dp.maps(P.axpy_chain.to_sdfg()), [(4, ), (2, )])}

    default = P.axpy_chain.to_sdfg()
    default.name = "t_plugin_default"
    dp.lower(default, schedule)
    assert [e.solver for e in redistribution_entries(default)] != ["p2p"]

    sdfg = P.axpy_chain.to_sdfg()
    sdfg.name = "t_plugin_p2p"
    dp.lower(sdfg, schedule, solvers=["p2p", "grid_mapped", "blocks"])
    (red, ) = redistribution_entries(sdfg)
    assert red.solver == "p2p" and red.calls == ["MPI_Isend/MPI_Irecv(neighbours)"]
    assert red.bytes == 240  # ranks 1, 2, 3 each send their 10 doubles to another rank
    x, y = rng.standard_normal(40), rng.standard_normal(40)
    np.testing.assert_allclose(run_counted(sdfg, 4, x=x, y=y), 2.0 * x + y, rtol=1e-12, atol=1e-12)


def test_plugin_refusal_is_reported_in_words(p2p_installed):
    """Partial results are not the plug-in's business: it refuses, and the next solver takes the move."""
    sdfg = P.mlp.to_sdfg()
    sdfg.name = "t_plugin_partial"
    infos = dp.maps(sdfg)
    sched = {infos[i].name: g for i, g in ((1, (2, 1, 2)), (2, (4, 1)), (3, (4, 1)), (5, (4, 1, 1)), (6, (4, 1)))}
    dp.lower(sdfg, sched, solvers=["p2p", "grid_mapped", "allreduce", "synthesized", "blocks"])
    (red, ) = redistribution_entries(sdfg)
    assert red.array == "__tmp0" and red.solver == "blocks" and red.op == "sum"
