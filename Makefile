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

.PHONY: install demo test test-slow bench

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m dace_partition info
	$(VENV)/bin/mpiexec -n $(RANKS) $(PY) -m mpi4py examples/quickstart.py

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow tests

bench: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/vs_peers.py  # dace-partition vs mpi4py, JAX, NumPy: README table

