"""Collective-sequence synthesizer for array redistribution.

Implements Rink et al., "Memory-efficient array redistribution through
portable collective communication": given a device mesh and source/target
block layouts, :func:`synthesize` returns a :class:`Plan` of dynslice,
alltoall, allgather and at most one allpermute that never holds more per
device than ``max(source tile, target tile)`` and sends close to the fewest
bytes.  Depends only on NumPy (mpi4py is imported lazily by the executor).

>>> plan = synthesize(mesh={"a": 2, "b": 2, "c": 2}, shape=(8, 88, 201352),
...                   src=[(), ("a", "c"), ()], dst=[("b",), ("c",), ()], itemsize=4)
"""
from .api import naive_plan, synthesize
from .factor_mesh import Assignment, FactorMesh
from .plan import OPS, Plan, Step
from .search import WeakOp, WeakSearch
from .simulate import SimulationError
from .types import Collective, Mesh, format_type, local_shape, normalize_layout, parse_type, prime_factors

__all__ = [
    "synthesize", "naive_plan", "Plan", "Step", "OPS", "Collective", "Mesh", "parse_type", "format_type",
    "local_shape", "normalize_layout", "prime_factors", "FactorMesh", "Assignment",
    "WeakOp", "WeakSearch", "SimulationError",
]
