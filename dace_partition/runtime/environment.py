"""The DaCe library environment that links MPI and the dace-partition runtime into lowered programs.

Every library node and tasklet that the lowering emits names this environment, so DaCe's CMake build
finds MPI (``FindMPI``) and includes ``dace_partition_runtime.h``, and every program creates its process
grids once in ``__dace_init``.
"""
import os

import dace.library

RUNTIME_INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


@dace.library.environment
class DacePartitionMPI:
    cmake_minimum_version = None
    cmake_packages = ["MPI"]
    cmake_variables = {}
    cmake_includes = [RUNTIME_INCLUDE]
    cmake_libraries = ["${MPI_CXX_LIBRARIES}"]
    cmake_compile_flags = ["-I${MPI_CXX_HEADER_DIR}"]
    cmake_link_flags = ["${MPI_LINKER_FLAGS}"]
    cmake_files = []
    headers = ["mpi.h", "dace_partition_runtime.h"]
    state_fields = []
    init_code = "dace_partition::init_mpi();"
    finalize_code = ""
    dependencies = []


ENVIRONMENT = DacePartitionMPI.full_class_path()
