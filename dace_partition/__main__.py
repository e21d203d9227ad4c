"""``python -m dace_partition info``: the MPI, BLAS and C++ compiler that builds in this environment use."""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["info"]:
        print("usage: python -m dace_partition info", file=sys.stderr)
        return 2
    from .runtime.toolchain import info
    print(info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
