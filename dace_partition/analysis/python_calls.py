"""Calls back into the Python interpreter, which a lowered program cannot make.

DaCe's frontend turns a call it cannot compile (``np.outer`` and ``np.sort`` in 1.0.2, or any plain Python
function) into a *callback*: the program takes the function as an extra argument (a symbol of type
``dace.callback``) and a tasklet calls it through the interpreter that called the program. The ranks of a
lowered program run in processes of their own, without that interpreter or its objects, so such a program
is refused before any rank starts, naming what the call writes and what to write instead.
"""
import re
from typing import List, NamedTuple

from dace import dtypes, nodes

from ..compat import all_states

#: NumPy functions DaCe 1.0.2 leaves as callbacks, and how to write them in what it compiles.
_SPELLED_OUT = (
    ("numpy_outer", "np.outer(u, v) is u[:, np.newaxis] * v[np.newaxis, :]"),
    ("numpy_cumsum", "np.cumsum(x, axis=1) is a loop over the axis: y[:, 0] = x[:, 0], then "
                     "for j in range(1, M): y[:, j] = y[:, j - 1] + x[:, j]"),
    ("numpy_convolve", "np.convolve(a, v) of N and K elements (its full mode) is a sum of shifted copies: "
                       "out = np.zeros(N + K - 1), then for j in range(K): out[j:j + N] += a * v[j]"),
)


class PythonCall(NamedTuple):
    """One call back into Python: the function's name in the program, the array and subset it writes
    (its first output), and the state it is in."""
    function: str
    array: str
    subset: str
    state: str

    def reason(self) -> str:
        hint = dict(_SPELLED_OUT).get(self.function)
        if hint is None and not self.function.startswith("numpy_"):  # the user's own function: DaCe knows why
            hint = (f"decorate {self.function} with @dace.program: DaCe's frontend then compiles it, or raises "
                    "the error that kept it from doing so")
        return (f"in state '{self.state}': it is written by {self.function}(...), a call back into the Python "
                "interpreter, which DaCe's frontend made because it does not compile that function. The ranks of a "
                "lowered program run without this interpreter, so the call cannot be made there; write it with array "
                "expressions or a map" + (f" ({hint})" if hint else ""))


def python_calls(sdfg) -> List[PythonCall]:
    """Every tasklet of ``sdfg`` (nested SDFGs included) that calls a function passed as a callback."""
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        callbacks = {n for n, t in sd.symbols.items() if isinstance(t, dtypes.callback)}
        callbacks |= {n for n, d in sd.arrays.items() if isinstance(d.dtype, dtypes.callback)}
        if not callbacks:
            continue
        for st in all_states(sd):
            for node in st.nodes():
                if not isinstance(node, nodes.Tasklet):
                    continue
                code = node.code.as_string
                called = sorted(c for c in callbacks if re.search(rf"\b{re.escape(c)}\s*\(", code))
                if not called:
                    continue
                # the call's result first; arguments handed back, then the interpreter-state token, last
                written = sorted((e for e in st.out_edges(node) if e.data.data is not None),
                                 key=lambda e: (e.src_conn == "__ostate", _passed_through(node, e.src_conn)))
                array, subset = (written[0].data.data, str(written[0].data.subset)) if written else ("(none)", "")
                out.append(PythonCall(called[0], array, subset, st.label))
    return out


def _passed_through(tasklet, out_conn) -> bool:
    """Whether a callback tasklet's output is an argument handed back (``__out_x`` beside ``__in_x``)
    rather than the call's result."""
    return out_conn is not None and out_conn.startswith("__out_") and \
        "__in_" + out_conn[len("__out_"):] in tasklet.in_connectors
