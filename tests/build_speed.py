"""A precompiled header for the programs the tests build with DaCe 1.0.2.

Most of a test program's compile time is parsing headers, not its own code: ``dace/dace.h``, ``mpi.h``,
``mkl.h`` and our runtime header take 3.4 s of a 5 s compile of a small matrix product at -O1 (DaCe 2 has
a precompiled header of its own). GCC loads them from one ``.gch``, built once per test session, when the
program is compiled with ``-include`` of it and the same code-generation flags. tests/conftest.py adds the
``-include`` to the flags of the environment that every lowered program names, which CMake's own checks
(of the compiler, OpenMP and MPI) do not use. Where a build's flags differ (a CUDA build defines
``WITH_CUDA``), GCC ignores the ``.gch`` and parses the header as text, which then includes nothing.

GCC does not check that the headers in a ``.gch`` are unchanged: the folder is named by a hash of the
flags, of our headers' contents and of the installed headers' sizes and times, so an edited header gets a
new one.
"""
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time

# the headers of every program the lowering emits, in the order the generated code includes them; each only
# where found (DaCe's stub library compiles with the same flags and fewer include paths), and none in a CUDA
# build (its stub would not find the CUDA headers that dace.h then includes; its .gch would not be used)
_HEADER = "#ifndef WITH_CUDA\n" + "".join(f"#if __has_include({h})\n#include {h}\n#endif\n" for h in (
    "<dace/dace.h>", "<mkl.h>", "<mpi.h>", '"dace_partition_runtime.h"')) + "#endif\n"


def _stamp(folder: str, content: bool) -> str:
    h = hashlib.sha256()
    for base, _, files in sorted(os.walk(folder)):
        for f in sorted(files):
            path = os.path.join(base, f)
            if content:
                with open(path, "rb") as fh:
                    h.update(path.encode() + fh.read())
            else:
                st = os.stat(path)
                h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def include_option(flags: str, root: str) -> list:
    """``["-include <header>"]`` for programs compiled with the CPU flags ``flags`` (DaCe's
    ``compiler.cpu.args``), after building its ``.gch`` under ``root/.dacecache-pch`` if none is there;
    [] where there is nothing to gain (DaCe 2, a path with spaces, no compiler), the build fails, or
    DACE_PARTITION_TEST_PCH=0 (to compare build times without it)."""
    import dace
    if not dace.__version__.startswith("1.") or os.environ.get("DACE_PARTITION_TEST_PCH", "1") == "0":
        return []
    cxx = shutil.which(dace.Config.get("compiler", "cpu", "executable") or os.environ.get("CXX") or "c++")
    ours = os.path.join(root, "dace_partition", "runtime", "include")
    theirs = os.path.join(os.path.dirname(dace.__file__), "runtime", "include")
    prefix = os.path.join(sys.prefix, "include")  # the mpich and mkl wheels' headers
    if cxx is None or " " in root:
        return []
    # CMake adds -fPIC and -fopenmp to CMAKE_CXX_FLAGS for the program's library
    args = [cxx, *shlex.split(flags), "-fPIC", "-fopenmp", f"-I{theirs}", f"-I{ours}", f"-I{prefix}"]
    key = hashlib.sha256("\n".join([*args, _HEADER, dace.__version__, _stamp(ours, True), _stamp(theirs, False),
                                    *(f"{n}:{os.path.getmtime(os.path.join(prefix, n))}"
                                      for n in ("mpi.h", "mkl.h") if os.path.exists(os.path.join(prefix, n)))
                                    ]).encode()).hexdigest()[:16]
    base = os.path.join(root, ".dacecache-pch")
    folder = os.path.join(base, key)
    header = os.path.join(folder, "dp_tests.h")
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the xdist workers: one builds, the other waits and uses it
        if not os.path.exists(header + ".gch"):
            for old in os.listdir(base):  # headers of earlier flags or headers (100-200 MB each) an hour old
                path = os.path.join(base, old)
                if old != "lock" and time.time() - os.path.getmtime(path) > 3600:
                    shutil.rmtree(path, ignore_errors=True)
            os.makedirs(folder, exist_ok=True)
            with open(header, "w") as f:
                f.write(_HEADER)
            proc = subprocess.run(args + ["-x", "c++-header", header, "-o", header + ".tmp.gch"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"tests: no precompiled header ({proc.stderr[-500:]})", file=sys.stderr)
                shutil.rmtree(folder, ignore_errors=True)
                return []
            os.replace(header + ".tmp.gch", header + ".gch")
    return [f"-include {header}"]  # one flag: DaCe gathers the environments' flags in a set

