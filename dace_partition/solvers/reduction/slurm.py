"""The machine hierarchy of a Slurm allocation, from its environment variables (no Slurm call, no MPI).

``SLURM_TASKS_PER_NODE`` lists the tasks of each node of the allocation in Slurm's compressed form:
comma-separated entries ``C`` or ``C(xR)`` (``R`` consecutive nodes of ``C`` tasks), e.g. ``4(x2)``,
``4,4`` or ``2(x3),1``.  With the node count (``SLURM_JOB_NUM_NODES``, or ``SLURM_NNODES`` in older
Slurm) it gives the hierarchy ``NxC`` when every node has the same ``C`` tasks; Slurm numbers the
tasks of a default (block) distribution node by node, which is the node-major order the
reduction programs assume (the generated code checks it at run time).
"""
import re
from collections.abc import Mapping

NODES_VARS = ("SLURM_JOB_NUM_NODES", "SLURM_NNODES")
TASKS_VAR = "SLURM_TASKS_PER_NODE"

_ENTRY = re.compile(r"^\s*(\d+)\s*(?:\(\s*x\s*(\d+)\s*\))?\s*$")


def parse_tasks_per_node(text: str) -> tuple[int, ...]:
    """``"2(x3),1"`` -> ``(2, 2, 2, 1)``; ``ValueError`` naming the entry for anything else."""
    out = []
    for entry in text.split(","):
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(f"{TASKS_VAR}={text!r}: entry {entry!r} is not C or C(xR)")
        tasks, repeat = int(m.group(1)), int(m.group(2) or 1)
        if tasks < 1 or repeat < 1:
            raise ValueError(f"{TASKS_VAR}={text!r}: entry {entry!r} has a zero count")
        out += [tasks] * repeat
    return tuple(out)


def slurm_hierarchy(env: Mapping[str, str]) -> tuple[str | None, str]:
    """``(hierarchy, source)`` of the Slurm allocation ``env`` describes, or ``(None, why not)``.

    ``source`` names the variables and their values (for the report); ``why not`` says which variable
    is missing or what is wrong with them.  Pure: reads only ``env``.
    """
    tasks_text = (env.get(TASKS_VAR) or "").strip()
    nodes_var = next((v for v in NODES_VARS if (env.get(v) or "").strip()), None)
    if not tasks_text and nodes_var is None:
        return None, f"no Slurm allocation ({NODES_VARS[0]}/{NODES_VARS[1]} and {TASKS_VAR} are not set)"
    if not tasks_text:
        return None, f"the Slurm allocation has {nodes_var}={env[nodes_var].strip()} but no {TASKS_VAR}"
    if nodes_var is None:
        return None, f"the Slurm allocation has {TASKS_VAR}={tasks_text} but neither {NODES_VARS[0]} nor {NODES_VARS[1]}"
    nodes_text = env[nodes_var].strip()
    source = f"the Slurm allocation ({nodes_var}={nodes_text}, {TASKS_VAR}={tasks_text})"
    try:
        nodes = int(nodes_text)
    except ValueError:
        return None, f"{source}: {nodes_var} is not a number"
    try:
        tasks = parse_tasks_per_node(tasks_text)
    except ValueError as e:
        return None, f"{source}: {e}"
    if len(tasks) != nodes:
        return None, f"{source}: {TASKS_VAR} lists {len(tasks)} nodes, {nodes_var} says {nodes}"
    if len(set(tasks)) != 1:
        return None, f"{source} has nodes with unequal task counts {', '.join(map(str, tasks))}"
    return f"{nodes}x{tasks[0]}", source
