"""Accumulators that nothing initializes.

A transient that is only ever written through a write-conflict resolution (``out >> tmp(1, lambda a, b: a +
b)[i]`` in a tasklet, ``tmp[i] += ...`` on an ``np.empty``) adds onto whatever its allocation held: DaCe
allocates transients without clearing them, and its frontend ignores the identity of the legacy spelling
``tmp(1, lambda a, b: a + b, 0)``. The program then reads memory nobody wrote even in one process, and split
over ranks every rank adds onto different garbage. Such a program is refused before any rank starts, naming
the array and the write, instead of returning a result that changes from run to run.
"""
from typing import List, NamedTuple

from dace import data, nodes

from ..compat import all_states


class UnwrittenAccumulator(NamedTuple):
    """A write-conflict write into a transient that no plain write initializes: the array, the written
    subset, the state and the resolution."""
    array: str
    subset: str
    state: str
    wcr: str

    def reason(self) -> str:
        return (f"in state '{self.state}': the transient is only ever accumulated into (write-conflict resolution "
                f"{self.wcr}) and nothing writes it first, so it starts from memory nobody wrote, even in one "
                "process (DaCe allocates transients without clearing them and ignores an identity given as "
                "tmp(1, lambda a, b: a + b, 0)); set it first, in a map of its own or with np.zeros")


def _accumulates(state, edge):
    """For one write into an access node: True where every statement behind it accumulates (a tasklet with a
    write-conflict resolution), False where one writes plainly or is a nested program or library call (what
    they do inside is not looked at here: counted as a plain write). The leaves decide: the frontend leaves the
    resolution off the edge out of the map at times."""
    leaves = state.memlet_tree(edge).leaves()
    return all(e.data.wcr is not None and isinstance(e.src, nodes.Tasklet) for e in leaves)


def unwritten_accumulators(sdfg) -> List[UnwrittenAccumulator]:
    """Every transient of ``sdfg`` (nested SDFGs included) that is read somewhere and written only through
    write-conflict resolutions of tasklets; one entry per such array (its first accumulating write)."""
    out = []
    for sd in sdfg.all_sdfgs_recursive():
        writes, read = {}, set()
        for st in all_states(sd):
            for node in st.data_nodes():
                desc = sd.arrays.get(node.data)
                if desc is None or not desc.transient or isinstance(desc, (data.View, data.Stream)):
                    continue
                if any(not e.data.is_empty() for e in st.out_edges(node)):
                    read.add(node.data)
                for e in st.in_edges(node):
                    if not e.data.is_empty():
                        writes.setdefault(node.data, []).append((st, e, _accumulates(st, e)))
        for name, ws in writes.items():
            if name in read and all(acc for _, _, acc in ws):
                st, e, _ = ws[0]
                leaf = next(iter(st.memlet_tree(e).leaves()))
                out.append(UnwrittenAccumulator(name, str(leaf.data.subset), st.label, str(leaf.data.wcr)))
    return out
