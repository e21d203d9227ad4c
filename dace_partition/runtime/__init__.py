"""Runtime: building (BLAS, CUDA, the C++ runtime in ``include/``), launching under mpiexec or srun,
loading on every rank, and the PMPI byte counter that checks the report. The last stage of the
pipeline: it runs what the passes and solvers produced and changes no SDFG."""
