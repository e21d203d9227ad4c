"""Command line.

``python -m dace_partition info``: the MPI, BLAS and C++ compiler that builds in this environment use.

``python -m dace_partition schedule module.py:function --ranks 8``: the automatic schedule of a
``@dace.program`` (or an SDFG, or a function returning one) for 8 ranks, why each kernel got its grid, and
the report of the lowering with it (nothing is built or run). ``--io distributed``, ``--size N=4096``
(size symbols the model assumes), ``--memory-per-rank BYTES``.

``python -m dace_partition calibrate``: measures the cost model's rates on this machine and caches them.

``python -m dace_partition mps --ranks 4 -- mpiexec -n 4 python -m mpi4py my_script.py``: runs the command
under a private CUDA MPS daemon where its ranks share this machine's GPUs, as ``dp.run`` does for its own
jobs (``runtime/mps.py``), and stops the daemon after; prints the decision on stderr.
"""
import argparse
import copy
import importlib.util
import os
import sys


def _load(target: str):
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise SystemExit(f"expected module.py:function, got {target!r}")
    if not os.path.exists(path):
        raise SystemExit(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise SystemExit(f"{path} has no '{name}'")
    obj = getattr(module, name)
    from dace.sdfg import SDFG
    if isinstance(obj, SDFG):
        return obj
    if hasattr(obj, "to_sdfg"):
        return obj.to_sdfg()
    sdfg = obj()
    if not isinstance(sdfg, SDFG):
        raise SystemExit(f"'{name}' is neither a @dace.program, an SDFG, nor a function that returns one")
    return sdfg


def _sizes(items):
    out = {}
    for item in items or []:
        key, _, value = item.partition("=")
        try:
            out[key] = int(value)
        except ValueError:
            raise SystemExit(f"--size expects NAME=INTEGER, got {item!r}")
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m dace_partition")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="the MPI, BLAS and compiler builds use")
    sub.add_parser("calibrate", help="measure the cost model's rates on this machine")
    sch = sub.add_parser("schedule", help="the automatic schedule of a program and its report")
    sch.add_argument("target", help="module.py:function")
    sch.add_argument("--ranks", type=int, required=True)
    sch.add_argument("--io", choices=("root", "distributed"), default="root")
    sch.add_argument("--size", action="append", help="NAME=VALUE of a size symbol (repeatable)")
    sch.add_argument("--memory-per-rank", type=int, default=None)
    mp = sub.add_parser("mps", help="run a command under a private CUDA MPS daemon where its ranks share a GPU")
    mp.add_argument("--ranks", type=int, required=True, help="how many ranks the command starts on this machine")
    mp.add_argument("cmd", nargs=argparse.REMAINDER, help="the command (after --)")
    args = parser.parse_args(argv)
    if args.command == "info":
        from .runtime.toolchain import info
        print(info())
        return 0
    if args.command == "calibrate":
        from .search import calibrate
        print(calibrate())
        return 0
    if args.command == "mps":
        import subprocess
        from .runtime import mps
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            raise SystemExit("python -m dace_partition mps: give the command to run after --")
        try:
            decision = mps.decide_here(True, args.ranks, local_launch=True)
        except ValueError as e:
            raise SystemExit(f"python -m dace_partition mps: {e}")
        print(f"dace_partition: {decision}", file=sys.stderr)
        with mps.private_daemon(decision) as env:
            return subprocess.run(cmd, env={**os.environ, **env}).returncode
    if args.command == "schedule":
        import dace_partition as dp
        sdfg = _load(args.target)
        sizes = _sizes(args.size)
        schedule = dp.auto_schedule(sdfg, args.ranks, io=args.io, memory_per_rank=args.memory_per_rank, sizes=sizes)
        if schedule.fused:  # the printed keys read fused_map('...'): pasted into a program, they need it
            print("from dace_partition import fused_map  # names of the maps as lower(...) fuses them")
        print(f"schedule = {dict(schedule)!r}\n")
        lowered = copy.deepcopy(sdfg)
        dp.lower(lowered, schedule, io=args.io)
        dp.report(lowered).schedule = schedule.explain()
        print(dp.report(lowered))
        return 0
    parser.print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
