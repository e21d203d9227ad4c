"""The two kinds of tests keep to their folders: a test in tests/unit that starts MPI or builds a program
fails, and every test in tests/mpi carries the marker ``mpi`` (tests/conftest.py)."""
import subprocess
import sys

import dace
import pytest


def test_a_unit_test_that_starts_mpi_or_builds_a_program_fails():
    for argv in (["mpiexec", "-n", "2", "true"], ["/usr/bin/srun", "-n", "2", "true"], "cmake --version"):
        with pytest.raises(pytest.fail.Exception, match="go in tests/mpi"):
            subprocess.run(argv, shell=isinstance(argv, str))
    with pytest.raises(pytest.fail.Exception, match="compiled SDFG 'kinds'"):
        dace.SDFG("kinds").compile()
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


def test_every_test_in_the_mpi_folder_is_marked_and_none_of_the_unit_folder(request):
    items = request.session.items
    mpi = [i for i in items if "/tests/mpi/" in str(i.fspath)]
    unit = [i for i in items if "/tests/unit/" in str(i.fspath)]
    assert unit and all(i.get_closest_marker("mpi") is None for i in unit)
    assert all(i.get_closest_marker("mpi") is not None for i in mpi)
