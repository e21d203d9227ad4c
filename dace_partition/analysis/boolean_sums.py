"""Sums of boolean arrays, which DaCe's frontend computes in ``bool``.

NumPy sums a boolean array in its default integer type (``np.sum(x > t)`` counts), and ``np.mean`` of one is
a float. DaCe's frontend (1.0.2 and 2.x alike) gives the reduction a ``bool`` result, so every count is 1
(``True``) and a mean is 0 or 1, even in one process. Such a program is refused before any rank starts,
naming the summed array and what to write instead.
"""
from typing import List, NamedTuple

import dace
from dace.frontend.operations import detect_reduction_type

from ..compat import nodes_of


class BooleanSum(NamedTuple):
    """A reduction that adds booleans into a boolean: the summed array, its subset and the state."""
    array: str
    subset: str
    state: str

    def reason(self) -> str:
        return (f"in state '{self.state}': the array is boolean and summed (np.sum, np.mean or a sum over an axis "
                "of a comparison), which DaCe's frontend computes in bool, so every count is 1 even in one process; "
                "convert it first: np.sum((x > t).astype(np.int64))")


def boolean_sums(sdfg) -> List[BooleanSum]:
    """Every reduction library node of ``sdfg`` (nested SDFGs included) that sums into a boolean."""
    from dace.libraries.standard.nodes import Reduce
    out = []
    for sd, st, node in nodes_of(sdfg, Reduce):
        if node.wcr is None or detect_reduction_type(node.wcr) != dace.dtypes.ReductionType.Sum:
            continue
        written = [e.data.data for e in st.out_edges(node) if e.data.data]
        if not written or sd.arrays[written[0]].dtype != dace.bool_:
            continue
        for e in st.in_edges(node):
            if e.data.data:
                out.append(BooleanSum(e.data.data, str(e.data.subset), st.label))
    return out
