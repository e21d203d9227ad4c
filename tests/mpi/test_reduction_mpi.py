"""Every synthesized reduction program under a real mpiexec equals MPI_Allreduce (integers: exact).

Each launch runs tests/mpi_scripts/reduction_run.py, which executes, for every placement on the
simulated hierarchy, the flat plan, every synthesized program and the chooser's pick, on two
buffer lengths (one giving uneven chunks), and compares each with MPI_Allreduce over the group.
The default suite runs 2x2 completely and the first placements of 2x4 and 4x2 (the whole-machine
group, whose synthesis hierarchy is two-level: 122 programs each); the complete 2x4 / 4x2 runs are
marked slow.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
SCRIPT = ROOT / "tests" / "mpi_scripts" / "reduction_run.py"

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not found next to the Python interpreter")


def _launch(nprocs, hierarchy, limit=None, timeout=240):
    pytest.importorskip("mpi4py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{MPIEXEC.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("DACE_PARTITION_HIERARCHY", None)
    if hierarchy:
        env["DACE_PARTITION_HIERARCHY"] = hierarchy
    cmd = [str(MPIEXEC), "-n", str(nprocs), sys.executable, "-m", "mpi4py", str(SCRIPT)]
    if limit is not None:
        cmd.append(str(limit))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    m = re.search(r"REDUCTION-MPI OK hierarchy=(\S+ \S+) placements=(\d+) runs/rank=(\d+)", out)
    assert m, out
    return m.group(1), int(m.group(2)), int(m.group(3))


def test_all_programs_2x2():
    h, places, runs = _launch(4, "2x2")
    assert h == "[node:2 core:2]"
    # whole group (two-level: 122 programs), inside the nodes (3), across the nodes (3);
    # each with the flat plan on 2 lengths, plus the chooser's pick
    assert places == 3 and runs == 2 * (123 + 4 + 4) + 3


@pytest.mark.parametrize("hier", ["2x4", "4x2"])
def test_whole_group_programs(hier):
    h, places, runs = _launch(8, hier, limit=1)
    assert places == 1 and runs == 2 * 123 + 1


def test_shared_memory_hierarchy_without_setting():
    # no DACE_PARTITION_HIERARCHY: MPI_COMM_TYPE_SHARED sees one node -> one-level programs only
    h, places, runs = _launch(2, None)
    assert h == "[node:1 core:2]" and places == 1 and runs == 2 * 4 + 1


@pytest.mark.slow
@pytest.mark.parametrize("hier", ["2x4", "4x2"])
def test_all_programs_8_ranks(hier):
    h, places, runs = _launch(8, hier, timeout=600)
    assert places == 7 and runs > 700
