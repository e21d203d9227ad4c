"""Run plans under ``mpiexec -n 8`` on real data and compare with the simulator."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not found next to the Python interpreter")
def test_plans_under_mpi_match_simulator():
    pytest.importorskip("mpi4py")
    env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{MPIEXEC.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    script = ROOT / "tests" / "mpi_scripts" / "synthesis_run.py"
    from conftest import mpi_script  # the selected launcher (srun under make test-slurm), world size checked
    proc = mpi_script(str(script), 8, timeout=180, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "SYNTHESIS-MPI OK" in out, out
