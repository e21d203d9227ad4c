"""Shared by the two kinds of tests: tests/unit (pure Python: no program built, no MPI; a guard below
fails a unit test that starts an MPI launcher or a build, or compiles an SDFG) and tests/mpi (they
compile programs or run them under mpiexec / srun, beside the pure tests of the same files and programs;
each carries the marker ``mpi``, so ``pytest -m "not mpi"`` runs what needs neither)."""
import functools
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import dace_partition as dp  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
_UNIT, _MPI = os.path.join(TESTS, "unit"), os.path.join(TESTS, "mpi")

#: Programs a unit test must not start: MPI launchers and the build of a program (the lowering's probes of
#: the toolchain, such as ctypes asking gcc where a BLAS library is, are allowed).
_STARTERS = frozenset({"mpiexec", "mpirun", "mpiexec.hydra", "srun", "salloc", "sbatch", "cmake", "make", "mpicc",
                       "mpicxx"})


def _within(path, folder) -> bool:
    return os.path.abspath(str(path)).startswith(folder + os.sep)


#: Where a session's temporary folders go unless --basetemp says otherwise: under the checkout, beside its
#: build folders, not in the machine's shared /tmp/pytest-of-<user>. A CI machine's /tmp is shared by
#: other jobs (and may be smaller than the checkout's disk); a worker's folder vanishing mid-run there
#: failed every later tmp_path of that worker ("could not create numbered dir ... after 20 tries").
TEMP_ROOT = os.path.join(TESTS, ".pytest-tmp")
_DAY = 24 * 3600


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """One folder per session (two sessions in one checkout never share one); a session that passed
    removes its folder, a failed one keeps it for a day for inspection."""
    if config.option.basetemp is not None or hasattr(config, "workerinput"):
        return  # given by the caller, or an xdist worker (its folder is inside the controller's)
    import shutil
    import tempfile
    import time
    os.makedirs(TEMP_ROOT, exist_ok=True)
    for old in os.listdir(TEMP_ROOT):
        path = os.path.join(TEMP_ROOT, old)
        if time.time() - os.path.getmtime(path) > _DAY:
            shutil.rmtree(path, ignore_errors=True)
    config.option.basetemp = tempfile.mkdtemp(prefix="session-", dir=TEMP_ROOT)
    config._dp_own_basetemp = config.option.basetemp


def pytest_sessionfinish(session, exitstatus):
    own = getattr(session.config, "_dp_own_basetemp", None)
    if own is not None and exitstatus in (0, 5):  # passed, or nothing ran
        import shutil
        shutil.rmtree(own, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    builds = False
    for item in items:
        if _within(item.fspath, _MPI):
            item.add_marker(pytest.mark.mpi)
            builds = True
    flags = os.environ.get("DACE_compiler_cpu_args")  # set by _quick_builds (or by whoever runs the tests)
    if builds and flags is not None and os.environ.get("DACE_PARTITION_TEST_BUILD", "quick") != "dace":
        from build_speed import include_option
        from dace_partition.runtime.environment import DacePartitionMPI
        pch = include_option(flags, ROOT)  # built once per session (the MPI scripts build without it)
        if pch and pch[-1] not in DacePartitionMPI.cmake_compile_flags:
            # the environment's flags reach the program's compile, not CMake's checks of the compiler and MPI
            DacePartitionMPI.cmake_compile_flags = [*DacePartitionMPI.cmake_compile_flags, *pch]


def _program(args) -> str:
    first = args if isinstance(args, (str, bytes, os.PathLike)) else (list(args) or [""])[0]
    first = os.fsdecode(first).strip()
    return os.path.basename(first.split()[0]) if first else ""


@pytest.fixture(autouse=True)
def _unit_tests_start_no_compiler_and_no_mpi(request, monkeypatch):
    """In tests/unit, starting an MPI launcher or a build, or compiling an SDFG, fails the test."""
    if not _within(request.node.fspath, _UNIT):
        return
    import dace
    real = subprocess.Popen.__init__

    def popen(self, args, *rest, **kwargs):
        name = _program(args)
        if name in _STARTERS:
            pytest.fail(f"a unit test started '{name}' ({args!r}): tests that compile or run MPI go in tests/mpi")
        return real(self, args, *rest, **kwargs)

    def compile_(self, *args, **kwargs):
        pytest.fail(f"a unit test compiled SDFG '{self.name}': tests that compile or run MPI go in tests/mpi")

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(dace.SDFG, "compile", compile_)


def _quick_builds():
    """Programs the tests build (here and in the MPI scripts they start, which inherit the environment) are
    compiled with DaCe's flags at -O1 and without debug information: about half the compile time of DaCe's
    default (-O3 overridden by RelWithDebInfo's -O2 -g), and compiling is most of the suite. CI's Slurm and
    Open MPI stages set DACE_PARTITION_TEST_BUILD=dace and build with DaCe's own flags, as users do. Once
    tests that build are collected, the lowered programs also include a precompiled header of DaCe's, MPI's,
    MKL's and our headers, made with these flags (tests/build_speed.py)."""
    if os.environ.get("DACE_PARTITION_TEST_BUILD", "quick") == "dace":
        return
    import re
    import dace
    os.environ.setdefault("DACE_compiler_build_type", "Tests")  # CMake has no flags for it: it adds none
    flags = dace.Config.get("compiler", "cpu", "args")
    os.environ.setdefault("DACE_compiler_cpu_args", re.sub(r"-O[0-3s]\b", "-O1", flags))


_quick_builds()


def _own_build_folder_per_worker():
    """Under pytest-xdist (``make test`` runs two workers) each worker builds in its own DaCe folder, which the
    MPI scripts it starts inherit: two workers that lower the same program under the same name would
    otherwise generate and compile into one folder at once."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    base = os.environ.get("DACE_default_build_folder", ".dacecache")
    if not os.path.isabs(base):
        base = os.path.join(ROOT, base)
    os.environ["DACE_default_build_folder"] = f"{base.rstrip(os.sep)}-{worker}"


_own_build_folder_per_worker()


def _grid_tag(grid):
    if isinstance(grid, dp.Replicated):
        return "x".join(map(str, grid.grid)) + f"r{grid.copies}"
    return "x".join(map(str, grid))


@functools.lru_cache(maxsize=None)
def lowered(program, schedule_items, tag=""):
    """Lowers (and builds once) ``program`` with a schedule given as a tuple of (map index or name, grid).

    Builds are shared by every test that asks for the same program and schedule.
    """
    sdfg = program.to_sdfg()
    infos = dp.maps(sdfg)
    schedule = {}
    for key, grid in schedule_items:
        schedule[infos[key].name if isinstance(key, int) else key] = grid
    grids = "_".join(_grid_tag(g) for _, g in schedule_items) or "none"
    sdfg.name = f"t_{program.name}_{grids}{tag}"
    dp.lower(sdfg, schedule)
    return sdfg


def mpi_script(script, ranks, *args, timeout=240, env=None, launcher=None):
    """Runs a script on ``ranks`` ranks under python -m mpi4py (an exception ends every rank), started by
    the selected launcher: $DACE_PARTITION_LAUNCHER (``srun`` under ``make test-slurm``), else mpiexec.
    Every rank first checks that the world has ``ranks`` ranks (and, under srun, SLURM_NTASKS too)."""
    cmd = dp.runtime.launch.launch_command(ranks, [script, *map(str, args)], launcher)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dp.runtime.launch.mpi_environment(env), cwd=ROOT)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def run_counted(sdfg, ranks, **inputs):
    """``dp.run`` under the PMPI byte counter: checks that every rank received exactly the bytes the
    report predicts (``report(sdfg).bytes_per_rank()``), and returns the outputs."""
    from dace_partition.runtime.mpi_count import count_run
    res = count_run(sdfg, ranks, **inputs)
    expected = dp.report(sdfg).bytes_per_rank()
    assert expected is not None, "the report should know every size before run time"
    expected = expected + [0] * (ranks - len(expected))
    assert res["bytes"] == expected, (f"counted {res['bytes']} B per rank, report says {expected}\n"
                                      f"{res['calls']}\n{dp.report(sdfg)}")
    return res["outputs"]


def redistribute_sdfg(name, problem, plan):
    """One Redistribute node between a source and a destination tile of ``plan`` (a synthesized plan for
    ``problem`` = (mesh, shape, src, dst, dtype)): the smallest SDFG that runs the synthesized executor."""
    import dace
    from dace_partition.solvers.synthesis.sdfg_node import Redistribute
    mesh, shape, src, dst, dtype = problem
    dt = dace.dtypes.typeclass(np.dtype(dtype).type)
    sdfg = dace.SDFG(name)
    sdfg.add_array("src_tile", plan.initial.tile, dt)
    sdfg.add_array("dst_tile", plan.steps[-1].after.tile, dt)
    state = sdfg.add_state()
    node = Redistribute("redistribute", mesh=mesh, shape=shape, src=src, dst=dst, dtype=dt)
    state.add_node(node)
    state.add_edge(state.add_read("src_tile"), None, node, "_in", dace.Memlet("src_tile"))
    state.add_edge(node, "_out", state.add_write("dst_tile"), None, dace.Memlet("dst_tile"))
    return sdfg
