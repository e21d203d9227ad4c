"""``np.linspace`` between scalar variables, which DaCe's frontend gives an extra axis.

DaCe's frontend (1.0.2 and 2 alike) broadcasts ``start`` and ``stop`` before it adds the axis of the points,
and it takes a scalar variable (an argument ``xmin: dace.float64`` or a computed scalar) for an array of shape
``(1,)``: ``np.linspace(xmin, xmax, 20)`` becomes a ``(20, 1)`` array where NumPy's is ``(20,)``. The values
are right, but every later broadcast is not (``X + Y[:, None]`` stays ``(20, 1)`` instead of ``(20, 20)``),
so the program computes a wrong result even in one process. Such a call is refused before any rank starts,
naming the array of points and a spelling DaCe gets right. Numbers and symbols as ``start`` and ``stop`` are
left alone (no extra axis), as are arrays of shape ``(1,)``, for which NumPy adds the axis too.
"""
from typing import List, NamedTuple

from dace import data, nodes

from ..compat import nodes_of

#: The label DaCe's frontend gives the tasklet of ``np.linspace`` (``replacements._linspace``).
LINSPACE_TASKLET = "linspace"


class ScalarLinspace(NamedTuple):
    """A ``np.linspace`` whose start or stop is a scalar variable: the array of points, its subset, the
    scalars and the state."""
    array: str
    subset: str
    scalars: tuple
    state: str

    def reason(self) -> str:
        named = [s for s in self.scalars if not s.startswith("__")]  # the frontend's temporaries have no user name
        what = f"the scalar variable(s) {', '.join(named)}" if named else "a computed scalar"
        return (f"in state '{self.state}': np.linspace from {what} gets an "
                "extra axis of length 1 from DaCe's frontend (shape (num, 1) where NumPy's is (num,)), so every "
                "later broadcast computes a wrong result even in one process; give start and stop as numbers or "
                "symbols and scale the points: 'xmin + (xmax - xmin) * np.linspace(0.0, 1.0, num)'")


def scalar_linspaces(sdfg) -> List[ScalarLinspace]:
    """Every ``np.linspace`` tasklet of ``sdfg`` (nested SDFGs included) that reads a scalar container."""
    out = []
    for sd, st, node in nodes_of(sdfg, nodes.Tasklet):
        if node.label != LINSPACE_TASKLET:
            continue
        scalars = tuple(dict.fromkeys(e.data.data for e in st.in_edges(node) if e.data.data
                                      and isinstance(sd.arrays[e.data.data], data.Scalar)))
        written = [e for e in st.out_edges(node) if e.data.data]
        if not scalars or not written:
            continue
        outer = st.memlet_path(written[0])[-1].data  # the whole array of points, outside the map
        out.append(ScalarLinspace(outer.data, str(outer.subset), scalars, st.label))
    return out
