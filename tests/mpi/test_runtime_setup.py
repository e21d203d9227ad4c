"""The runtime sets up once (issue 12): a private communicator, no set-up calls after a site's first call,
user traffic on MPI_COMM_WORLD untouched, counts above INT_MAX (a C++ test of the large-count path).
Every distributed test runs under a real mpiexec with a timeout."""
import json
import os
import subprocess
import sys

import dace
import numpy as np
import pytest

import dace_partition as dp
from dace_partition.runtime.launch import mpi_environment, mpiexec_command
from dace_partition.runtime.mpi_count import build_counter
from conftest import redistribute_sdfg

import programs as P

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(HERE)
SCRIPTS = os.path.join(HERE, "mpi_scripts")
SCRIPT = os.path.join(SCRIPTS, "runtime_setup_run.py")
INCLUDE = os.path.join(ROOT, "dace_partition", "runtime", "include")
sys.path.insert(0, SCRIPTS)
import redistribute_problem as RP  # noqa: E402

SETUP_CALLS = ("MPI_Comm_split", "MPI_Comm_dup", "MPI_Comm_create", "MPI_Cart_create", "MPI_Cart_sub",
               "MPI_Type_commit")


def _run(cmd, timeout, env=None):
    env = mpi_environment(env)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, SCRIPTS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _script(ranks, *args, prefix=(), timeout=300):
    return _run(mpiexec_command(ranks) + list(prefix) + [sys.executable, "-m", "mpi4py", SCRIPT, *map(str, args)],
                timeout)


def _inc_folder():
    @dace.program
    def inc(x: dace.float64[8]):
        return x + 1.0

    sdfg = inc.to_sdfg()
    sdfg.name = "t_runtime_setup_inc"
    (m, ) = [m.name for m in dp.maps(sdfg)]
    dp.lower(sdfg, {m: (4, )})
    return dp.runtime.launch.build(sdfg)


def _redistribute_folder():
    plan = RP.plan_of()
    assert [s.op for s in plan.steps] == ["alltoall", "allpermute"]
    sdfg = redistribute_sdfg("t_runtime_setup_redistribute", RP.PROBLEM, plan)
    os.environ.update(mpi_environment())
    sdfg.compile(return_program_handle=False)
    return sdfg.build_folder


def test_user_messages_on_comm_world_are_not_matched_by_ours():
    """A user's pending Isend on MPI_COMM_WORLD with our tag (77) and with tag 0 survives two calls of a
    lowered program and of a synthesized redistribution (whose permutation receives with tag 77)."""
    proc = _script(4, "isolation", _inc_folder(), _redistribute_folder(), timeout=300)
    assert "ISOLATION OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def _lowered(program, schedule, name):
    sdfg = program.to_sdfg()
    sdfg.name = name
    infos = dp.maps(sdfg)
    dp.lower(sdfg, {infos[k].name if isinstance(k, int) else k: g for k, g in schedule})
    return dp.runtime.launch.build(sdfg)


def test_no_setup_calls_after_the_first_call(tmp_path, rng):
    """Under the PMPI shim: the first call of each program (its __dace_init and each call site's first
    run) creates communicators and datatypes; later calls create none and make the same MPI calls. A call
    with other sizes re-initializes the program (set-up again), and the call after it sets up nothing."""
    x8 = np.arange(8.0)
    x40, y40 = rng.standard_normal(40), rng.standard_normal(40)
    spec = [
        # grid-mapped scatter + gather
        {"kind": "program", "folder": _inc_folder(), "calls": [{"x": x8.tolist()}] * 3},
        # general blocks with halos and a symbolic size (scatter_blocks / gather_blocks), then new sizes
        {"kind": "program", "folder": _lowered(P.stencil3, ((0, (4, )), ), "t_runtime_setup_stencil3"),
         "calls": [{"x": list(map(float, range(47))), "out": [0.0] * 47, "N": 47}] * 3 +
                  [{"x": list(map(float, range(10))), "out": [0.0] * 10, "N": 10}] * 2},
        # a grid-to-grid redistribution between two kernels (no rank 0)
        {"kind": "program", "folder": _lowered(P.axpy_chain, ((0, (4, )), (1, (2, ))), "t_runtime_setup_axpy"),
         "calls": [{"x": x40.tolist(), "y": y40.tolist()}] * 3},
        # the synthesized executor: alltoall + permutation on sub-communicators
        {"kind": "redistribute", "folder": _redistribute_folder(), "ncalls": 3},
    ]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = _script(4, "setup", path, prefix=["env", f"LD_PRELOAD={build_counter()}"], timeout=400)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("SETUP ")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    programs = json.loads(line[len("SETUP "):])
    for k, per_rank in enumerate(programs):
        ncalls = len(per_rank[0])
        for r, calls in enumerate(per_rank):
            assert all(c["ok"] for c in calls), (k, r)
            assert all(name in SETUP_CALLS for c in calls for name in c["setup"]), calls
            first = calls[0]["setup"]
            assert first.get("MPI_Comm_dup", 0) >= 1, (k, r, first)  # the private communicator
            for i in range(1, ncalls):
                if k == 1 and i == 3:  # new sizes: the program is re-initialized
                    assert calls[i]["setup"].get("MPI_Comm_dup", 0) >= 1, (k, r, calls[i])
                    continue
                assert calls[i]["setup"] == {}, f"program {k}, rank {r}, call {i}: {calls[i]['setup']}"
                ref = calls[1 if i < 3 or k != 1 else 4]["traffic"]
                assert calls[i]["traffic"] == ref, (k, r, i)
    # the synthesized executor's two steps: one MPI_Comm_split (the alltoall's group) at the first call only
    assert all(calls[0]["setup"].get("MPI_Comm_split", 0) == 1 for calls in programs[3])
    assert all(calls[1]["traffic"] == {"MPI_Alltoall": 1, "MPI_Sendrecv": 1} or
               calls[1]["traffic"] == {"MPI_Alltoall": 1} for calls in programs[3])


def _packed_program(tmp_path, name):
    exe = str(tmp_path / name)
    mpicxx = os.path.join(os.path.dirname(sys.executable), "mpicxx")
    if not os.path.exists(mpicxx):
        mpicxx = "mpicxx"
    build = _run([mpicxx, "-std=c++17", "-O1", "-Wall", f"-I{INCLUDE}", os.path.join(HERE, "cpp", f"{name}.cpp"),
                  "-o", exe, "-ldl"], timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    return exe


def test_packed_halo_faces_deliver_every_element_on_random_layouts(tmp_path):
    """The GPU lowering's packed halo exchange, with the host copier, on 60 random layouts per job (1 to 3
    dimensions, 1- and 2-D grids, halo widths 0 to 2 on either side, padded and transposed tile buffers, in
    place or between two buffers, blocks of one element or none): every element of every rank's
    block-plus-halo equals its value, the padding is untouched, and the result equals the derived-datatype
    exchange's (tests/cpp/halo_packed.cpp), under mpiexec -n 2, 3 and 4."""
    exe = _packed_program(tmp_path, "halo_packed")
    for ranks in (2, 3, 4):
        proc = _run(mpiexec_command(ranks) + [exe], timeout=120)
        assert proc.returncode == 0 and "HALO-PACKED OK 60" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("cuda_aware", ["0", "1"])
def test_packed_redistribution_delivers_every_element_on_random_layouts(tmp_path, cuda_aware):
    """The GPU lowering's packed redistribution, with the host copier, on 80 random layouts per job (1 to 3
    dimensions; source and destination grids drawn apart, of the job's ranks or fewer, with replicas and
    blocks grown into their neighbours; padded and transposed buffers): every element of every rank's
    destination block equals its value, the padding is untouched, and the result equals the host
    redistribution's (tests/cpp/redistribute_packed.cpp), under mpiexec -n 2, 3 and 4, with the packed
    pieces in the buffers MPI is given as device pointers (forced CUDA-aware) or as pinned host ones."""
    exe = _packed_program(tmp_path, "redistribute_packed")
    for ranks in (2, 3, 4):
        proc = _run(mpiexec_command(ranks) + [exe], timeout=120,
                    env={**os.environ, "DACE_PARTITION_CUDA_AWARE": cuda_aware})
        assert proc.returncode == 0 and "REDIST-PACKED OK 80" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_pitched_copies_deliver_every_element_in_few_driver_calls(tmp_path):
    """The pitched copies that pack and unpack the GPU moves' faces and pieces (copy_box), with a copier
    that checks cudaMemcpy2DAsync's and cudaMemcpy3DAsync's conditions on every call, on 400 random boxes
    (1 to 4 dimensions; padded, gapped, transposed and permuted buffers): every element of the box
    arrives, nothing else is written; and a face across a middle dimension is one 2-D copy, a 3-D piece one
    3-D copy, slices that are no whole number of rows one 2-D copy each (tests/cpp/copy_box.cpp; one
    process, no MPI call)."""
    exe = _packed_program(tmp_path, "copy_box")
    proc = _run([exe], timeout=120)
    assert proc.returncode == 0 and "COPY-BOX OK 400" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("flags", [[], ["-DDACE_PARTITION_NO_LARGE_COUNT_CALLS"]])
def test_large_counts(tmp_path, flags):
    """Counts above INT_MAX: type arithmetic on synthetic counts (nothing allocated), then real transfers
    through the derived-datatype / large-count path with the threshold lowered to 64 elements, compared
    element by element (tests/cpp/large_count.cpp)."""
    exe = str(tmp_path / "large_count")
    mpicxx = os.path.join(os.path.dirname(sys.executable), "mpicxx")
    if not os.path.exists(mpicxx):
        mpicxx = "mpicxx"
    build = _run([mpicxx, "-std=c++17", "-O1", "-Wall", *flags, f"-I{INCLUDE}",
                  os.path.join(HERE, "cpp", "large_count.cpp"), "-o", exe], timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    for ranks in (2, 3):
        proc = _run(mpiexec_command(ranks) + [exe], timeout=120)
        assert proc.returncode == 0 and "LARGE-COUNT OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
