"""The README's first command: ``make demo`` runs examples/quickstart.py under mpiexec (here on 2 ranks);
it lowers with automatic schedules and checks every result against NumPy itself."""
import os

from conftest import ROOT, mpi_script


def test_quickstart_runs_and_matches_numpy():
    proc = mpi_script(os.path.join(ROOT, "examples", "quickstart.py"), 2, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out.count("matches NumPy") == 3 and "DOES NOT MATCH" not in out, out[-3000:]
    assert out.count("automatic schedule for 2 rank(s)") == 2
