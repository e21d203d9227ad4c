"""The Redistribute library node: expand to C++/MPI, compile once per problem, run on 8 ranks."""
import os
import sys

import dace
import pytest

import dace_partition
from dace_partition.solvers.synthesis.sdfg_node import Redistribute, emit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts"))
from conftest import mpi_script, redistribute_sdfg  # noqa: E402
import synthesis_sdfg_run as run  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mpi_scripts", "synthesis_sdfg_run.py")


def build(k):
    return redistribute_sdfg(f"test_synthesis_redistribute_{k}", run.PROBLEMS[k], run.plan_of(k))


def test_problems_cover_every_collective():
    ops = {op for k in range(len(run.PROBLEMS)) for op in (s.op for s in run.plan_of(k).steps)}
    assert {"dynslice", "allgather", "alltoall", "allpermute"} <= ops
    assert any(len(s.moves) > 1 for k in range(len(run.PROBLEMS)) for s in run.plan_of(k).steps)


def test_emitted_scratch_is_the_plan_peak():
    for k in range(len(run.PROBLEMS)):
        plan = run.plan_of(k)
        assert plan.peak_elements <= plan.memory_bound_bytes // plan.itemsize
        code = emit(plan)
        assert f"__a({plan.peak_elements} * __e), __b({plan.peak_elements} * __e)" in code
        assert code.count("std::vector") == 1


def test_node_properties_roundtrip():
    sdfg = build(0)
    node = next(n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Redistribute))
    assert str(node.plan()) == str(run.plan_of(0))
    again = dace.SDFG.from_json(sdfg.to_json())
    node2 = next(n for n, _ in again.all_nodes_recursive() if isinstance(n, Redistribute))
    assert str(node2.plan()) == str(run.plan_of(0))


# Problems 0, 1 and 4 hold every collective (dynslice, allpermute, allgather, alltoall, a fused alltoall of
# several pairs); 2 and 3 (a 4-way axis split into prime factors, allgathers only) run under -m slow (time).
@pytest.mark.parametrize("problems", [(0, 1, 4), pytest.param((2, 3), marks=pytest.mark.slow)])
def test_redistribute_sdfg_mpi(problems):
    os.environ.update(dace_partition.runtime.launch.mpi_environment())
    folders = []
    for k in problems:
        sdfg = build(k)
        sdfg.compile(return_program_handle=False)
        folders.append(f"{k}={sdfg.build_folder}")
    proc = mpi_script(SCRIPT, 8, *folders)
    assert f"SYNTHESIS-SDFG OK {len(folders)}" in proc.stdout, proc.stdout + proc.stderr
