"""First code of every rank that dace-partition launches: checks the world size, then runs the target.

    python -m mpi4py .../_world_check.py RANKS LAUNCHER (-m MODULE | SCRIPT) [ARGS...]

It is run by path (not as ``dace_partition.runtime._world_check``) so that a rank imports nothing of the package
before its target does. When the launcher's process-management interface does not match the MPI library
(``srun --mpi=none`` for an MPICH build, say), every process starts as an MPI singleton: world size 1,
rank 0, exit code 0, every "rank" writing rank 0's outputs. This check turns that into a clear error.
"""
import os
import runpy
import sys

MARK = "dace_partition: world size check"


def _fail(message):
    print(f"{MARK} failed: {message}", file=sys.stderr, flush=True)
    sys.exit(3)  # under python -m mpi4py, a non-zero exit aborts the job


def check(ranks: int, launcher: str):
    from mpi4py import MPI
    size = MPI.COMM_WORLD.Get_size()
    ntasks = os.environ.get("SLURM_NTASKS") if launcher == "srun" else None
    if size == ranks and (ntasks is None or int(ntasks) == ranks):
        return
    got = f"MPI_COMM_WORLD has {size} rank(s)"
    if ntasks is not None:
        got += f" and SLURM_NTASKS={ntasks}"
    hint = ""
    if size == 1 and ranks > 1:
        hint = (" Every process started as an MPI singleton: the launcher's process-management interface does "
                "not match the MPI library the program uses.")
        if launcher == "srun":
            hint += (" Under srun, MPICH (the mpich wheel, Cray MPICH with pmi2) needs --mpi=pmi2 (Cray: "
                     "--mpi=cray_shasta), Open MPI needs --mpi=pmix; `srun --mpi=list` shows the plugins. Also "
                     "check that mpi4py loads the same MPI (MPI4PY_MPIABI, `python -m mpi4py --mpi-library`).")
        else:
            hint += (" The mpiexec comes from another MPI than the one mpi4py and the program load: use the "
                     "launcher of the same installation (`python -m dace_partition info`).")
    _fail(f"asked for {ranks} rank(s) with {launcher}, but {got}.{hint}")


RUN_DIR = "DACE_PARTITION_RUN_DIR"  # where dp.run's ranks note their process ids (launch.dead_ranks reads them)


def note_pid():
    """A launcher names a rank that died by its pid (MPICH's mpiexec): each rank notes its own."""
    folder = os.environ.get(RUN_DIR)
    if folder and os.path.isdir(folder):
        from mpi4py import MPI
        with open(os.path.join(folder, f"rank{MPI.COMM_WORLD.Get_rank()}.pid"), "w") as f:
            f.write(str(os.getpid()))


def main(argv):
    if len(argv) < 3:
        _fail("usage: _world_check.py RANKS LAUNCHER (-m MODULE | SCRIPT) [ARGS...]")
    ranks, launcher, target = int(argv[0]), argv[1], argv[2:]
    check(ranks, launcher)
    note_pid()
    if target[0] == "-m":
        if len(target) < 2:
            _fail("-m needs a module name")
        sys.argv = [target[1]] + target[2:]
        sys.path[0] = os.getcwd()  # as python -m does: the package directory is not on the path
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(target)
        sys.path[0] = os.path.dirname(os.path.abspath(target[0]))  # as python SCRIPT does
        runpy.run_path(target[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
