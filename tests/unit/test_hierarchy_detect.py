"""Where the ``hierarchical`` solver takes the machine hierarchy from at lowering time: the variable
``DACE_PARTITION_HIERARCHY`` (the override), else the Slurm allocation's environment.  Pure Python: no
compiler, no MPI."""
import dace
import pytest
from dace import subsets

from dace_partition.ir import Distribution, Move
from dace_partition.solvers import registry
from dace_partition.solvers.hierarchical import HierarchicalSolver, hierarchy_setting
from dace_partition.solvers.reduction import ENV_VAR
from dace_partition.solvers.reduction.slurm import (
    NODES_VARS,
    TASKS_VAR,
    parse_tasks_per_node,
    slurm_hierarchy,
)

SLURM_VARS = NODES_VARS + (TASKS_VAR, )


def partial_move(n, ranks, itemsize=8):
    """x[0:n] summed over a grid (1, ranks) whose second dimension holds partial results."""
    r = dace.symbolic.symbol("__dp0_r0", dace.int32)
    src = Distribution.on_grid(subsets.Range([(0 * r, n - 1, 1)]), (1, ranks), ("__dp0_r0", None), 0, "sum")
    return Move("x", src, src.combined().on(1), (n, ), itemsize)


@pytest.mark.parametrize("text,tasks", [
    ("4", (4, )),
    ("4(x2)", (4, 4)),
    ("4,4", (4, 4)),
    ("2(x3),1", (2, 2, 2, 1)),
    ("1,3(x2)", (1, 3, 3)),
    (" 8 ( x 16 ) ", (8, ) * 16),
])
def test_tasks_per_node_formats(text, tasks):
    assert parse_tasks_per_node(text) == tasks


@pytest.mark.parametrize("text", ["", "4(2)", "4(x)", "x4", "4;4", "4,,4", "0(x2)", "4(x0)", "-1", "4(x2"])
def test_malformed_tasks_per_node_names_the_entry(text):
    with pytest.raises(ValueError, match=TASKS_VAR):
        parse_tasks_per_node(text)


@pytest.mark.parametrize("env,hierarchy", [
    ({"SLURM_JOB_NUM_NODES": "2", TASKS_VAR: "4(x2)"}, "2x4"),
    ({"SLURM_JOB_NUM_NODES": "2", TASKS_VAR: "4,4"}, "2x4"),
    ({"SLURM_NNODES": "3", TASKS_VAR: "2(x3)"}, "3x2"),  # older Slurm: only SLURM_NNODES
    ({"SLURM_JOB_NUM_NODES": "1", TASKS_VAR: "16"}, "1x16"),
    ({"SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "9", TASKS_VAR: "2(x2),2,2"}, "4x2"),  # JOB_NUM_NODES first
])
def test_equal_nodes_give_the_hierarchy(env, hierarchy):
    h, source = slurm_hierarchy(env)
    assert h == hierarchy
    assert source.startswith("the Slurm allocation (") and env[TASKS_VAR] in source


@pytest.mark.parametrize("env,why", [
    ({}, "no Slurm allocation"),
    ({"SLURM_JOB_ID": "17"}, "no Slurm allocation"),
    ({"SLURM_JOB_NUM_NODES": "2"}, f"SLURM_JOB_NUM_NODES=2 but no {TASKS_VAR}"),
    ({TASKS_VAR: "4(x2)"}, "neither SLURM_JOB_NUM_NODES nor SLURM_NNODES"),
    ({"SLURM_JOB_NUM_NODES": "4", TASKS_VAR: "2(x3),1"}, "unequal task counts 2, 2, 2, 1"),
    ({"SLURM_JOB_NUM_NODES": "2", TASKS_VAR: "3,1"}, "unequal task counts 3, 1"),
    ({"SLURM_JOB_NUM_NODES": "3", TASKS_VAR: "4(x2)"}, f"{TASKS_VAR} lists 2 nodes, SLURM_JOB_NUM_NODES says 3"),
    ({"SLURM_JOB_NUM_NODES": "two", TASKS_VAR: "4(x2)"}, "SLURM_JOB_NUM_NODES is not a number"),
    ({"SLURM_JOB_NUM_NODES": "2", TASKS_VAR: "4(y2)"}, "entry '4(y2)' is not C or C(xR)"),
])
def test_refusals_say_why(env, why):
    h, text = slurm_hierarchy(env)
    assert h is None and why in text


def test_the_variable_overrides_the_allocation():
    env = {ENV_VAR: "4x2", "SLURM_JOB_NUM_NODES": "2", TASKS_VAR: "4(x2)"}
    assert hierarchy_setting(env) == ("4x2", f"{ENV_VAR}=4x2")
    del env[ENV_VAR]
    assert hierarchy_setting(env) == ("2x4", f"the Slurm allocation (SLURM_JOB_NUM_NODES=2, {TASKS_VAR}=4(x2))")
    env[TASKS_VAR] = "5,3"
    h, why = hierarchy_setting(env)
    assert h is None
    assert why.startswith(f"{ENV_VAR} is not set and the Slurm allocation (SLURM_JOB_NUM_NODES=2, {TASKS_VAR}=5,3)")
    assert "unequal task counts 5, 3" in why and "unknown at lowering time" in why


def clear(monkeypatch):
    for v in (ENV_VAR, ) + SLURM_VARS:
        monkeypatch.delenv(v, raising=False)


def test_solver_uses_the_allocation_and_names_it(monkeypatch):
    clear(monkeypatch)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv(TASKS_VAR, "2(x2)")
    m = partial_move(8, 4)
    solver, _ = registry.choose(m, registry.resolve_solvers(None))
    assert solver.name == "hierarchical"
    call = solver.cost(m).calls[0]
    assert call.startswith("hierarchical 2x2: (node, InsideGroup, AllReduce) ; (node, Parallel(root), AllReduce)")
    assert call.endswith(f"hierarchy from the Slurm allocation (SLURM_JOB_NUM_NODES=2, {TASKS_VAR}=2(x2)))")
    # the variable overrides: one node of 4 keeps the flat call, and the refusal names the variable
    monkeypatch.setenv(ENV_VAR, "1x4")
    solver, refused = registry.choose(m, registry.resolve_solvers(None))
    assert solver.name == "allreduce" and "predicts the flat MPI_Allreduce best" in dict(refused)["hierarchical"]


def test_solver_refusals_name_the_allocation(monkeypatch):
    clear(monkeypatch)
    s = HierarchicalSolver()
    why = s.refuse(partial_move(8, 4))
    assert why.startswith(f"{ENV_VAR} is not set and no Slurm allocation (SLURM_JOB_NUM_NODES/SLURM_NNODES and "
                          f"{TASKS_VAR} are not set)")
    monkeypatch.setenv("SLURM_NNODES", "3")
    monkeypatch.setenv(TASKS_VAR, "2,1,1")
    assert "unequal task counts 2, 1, 1" in s.refuse(partial_move(8, 4))
    monkeypatch.setenv(TASKS_VAR, "4(x3)")  # 12 tasks, the grid has 4 ranks
    assert s.refuse(partial_move(8, 4)) == (f"the grid (1, 4) has 4 ranks, the Slurm allocation (SLURM_NNODES=3, "
                                            f"{TASKS_VAR}=4(x3)) describes 12")
