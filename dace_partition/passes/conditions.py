"""Branch data every rank agrees on: values that decide control flow are broadcast from rank 0.

Every rank walks the program's state machine; only rank 0 runs the unscheduled code and holds the global
arrays. An interstate condition that reads data (``while res[0] > tol``, ``if err[0] > 1``, or a symbol
assigned from data that a condition then reads) would be evaluated by each rank on its own copy, which
only rank 0 keeps current: ranks would take different branches and the next collective would hang or
pair the wrong calls. :class:`BroadcastBranchData` inserts, right before such an edge is evaluated (after
its source state, whose out-edges move to the new state), one ``ROOT -> every rank`` Move per data
container, served by the solver registry like any other scatter. Inside a loop this is one small
broadcast per iteration, counted by the report.

Scalar arguments that nothing writes are left alone: every rank receives them. The broadcast covers the
whole world communicator (a grid of ``world_size()`` ranks made at start-up), so ranks outside every
kernel's grid also decide the same way.
"""
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

import dace
from dace import subsets
from dace.memlet import Memlet
from dace.sdfg import SDFG

from ..ir import ROOT, Distribution, Move
from ..solvers.node import DistributedMemlet
from .graph import MovePass, distributed_memlets, uses

WORLD_GRID_LABEL = "branch data"


@dataclass(frozen=True)
class Broadcast:
    """One decision: ``arrays`` reach every rank at the end of the state labelled ``after``."""
    after: str
    arrays: Tuple[str, ...]


def _names(code) -> Set[str]:
    return {str(s) for s in code.get_free_symbols()} if code is not None else set()


def _assignment_reads(value: str) -> Set[str]:
    return {str(s) for s in dace.InterstateEdge(assignments={"__x": value}).read_symbols()}


def branch_data(sdfg: SDFG, every_rank: Set[str] = frozenset()) -> Dict[object, List[str]]:
    """{source state: data containers that its out-edges read to decide, directly or through symbols
    assigned from data on any edge}; only data rank 0 alone keeps current. ``every_rank``: symbols that
    code on every rank reads besides conditions (the blocks of moves, the kernels' subsets): a symbol
    assigned from data (``t = idx[a, b]`` for ``G[t]``) needs the same value on every rank too."""
    decide = set(every_rank)
    for e in sdfg.edges():
        if not e.data.is_unconditional():
            decide |= _names(e.data.condition)
    assigned: Dict[str, Set[str]] = {}
    for e in sdfg.edges():
        for k, v in e.data.assignments.items():
            assigned.setdefault(k, set()).update(_assignment_reads(v))
    todo = list(decide)
    while todo:  # the names conditions depend on, through assignments
        n = todo.pop()
        for m in assigned.get(n, ()):
            if m not in decide:
                decide.add(m)
                todo.append(m)
    out: Dict[object, List[str]] = {}
    for e in sdfg.edges():
        read = _names(e.data.condition) if not e.data.is_unconditional() else set()
        for k, v in e.data.assignments.items():
            if k in decide:
                read |= _assignment_reads(v)
        for n in sorted(read):
            if _rank0_data(sdfg, n) and n not in out.setdefault(e.src, []):
                out[e.src].append(n)
    return {s: v for s, v in out.items() if v}


def _rank0_data(sdfg: SDFG, name: str) -> bool:
    desc = sdfg.arrays.get(name)
    if desc is None or name.startswith("__dp"):
        return False
    if isinstance(desc, dace.data.Scalar) and not desc.transient:
        return any(st.in_degree(a) > 0 for st, a in uses(sdfg, name))
    return True


class BroadcastBranchData(MovePass):
    """Broadcasts the data that interstate conditions read before they are evaluated (module docstring).

    ``world``: ranks the lowering needs (the report's figures); ``grid_id``: an id no kernel uses, for the
    world grid (made at start-up by :meth:`init_code`, which the pass adds where it broadcasts);
    ``every_rank``: symbols that code on every rank reads (see :func:`branch_data`; None: those of the
    program as partitioned, :func:`every_rank_symbols`)."""

    def __init__(self, solvers, world: int, grid_id: int, every_rank: Optional[Set[str]] = None,
                 after: Iterable[type] = ()):
        super().__init__(solvers, after)
        self.world = world
        self.grid_id = grid_id
        self.every_rank = None if every_rank is None else set(every_rank)

    def decide(self, sdfg: SDFG) -> List[Broadcast]:
        return [Broadcast(st.label, tuple(names)) for st, names in branch_data(sdfg, self.every_rank or set()).items()]

    def init_code(self) -> str:
        return (f'dace_partition::init_grid({self.grid_id}, "{WORLD_GRID_LABEL}", '
                "{dace_partition::world_size()});\n")

    def apply_pass(self, sdfg: SDFG, pipeline_results) -> List[Broadcast]:
        if self.world < 2:
            return []
        every = self.every_rank
        if every is None:
            made = (pipeline_results or {}).get("PartitionKernels")
            every = every_rank_symbols(sdfg, made.kernel_states if made is not None else ())
        out = []
        for src, names in branch_data(sdfg, every).items():
            st = sdfg.add_state(f"dp_branch_data_{src.label}")
            for e in list(sdfg.out_edges(src)):
                sdfg.remove_edge(e)
                sdfg.add_edge(st, e.dst, e.data)
            sdfg.add_edge(src, st, dace.InterstateEdge())
            for name in names:
                self._broadcast(sdfg, st, name)
            out.append(Broadcast(src.label, tuple(names)))
        if out:
            sdfg.append_init_code(self.init_code())
        return out

    def _broadcast(self, sdfg: SDFG, st, name: str):
        desc = sdfg.arrays[name]
        shape = tuple(desc.shape)
        local, _ = sdfg.add_array(f"__dp_bc_{name}", shape, desc.dtype, transient=True, find_new_name=True)
        source, read = name, None
        if isinstance(desc, dace.data.Scalar):  # interstate code reads it by value: staged in a one-element array
            source, _ = sdfg.add_array(f"__dp_bc_{name}_root", [1], desc.dtype, transient=True, find_new_name=True)
            read = st.add_access(source)
            st.add_nedge(st.add_read(name), read, Memlet(f"{source}[0]"))
        rng = subsets.Range.from_array(sdfg.arrays[source])
        dst = Distribution.on_grid(rng, (self.world, ), (None, ), self.grid_id)
        move = Move(name, ROOT, dst, tuple(sdfg.arrays[source].shape), int(desc.dtype.bytes))
        dm = DistributedMemlet(f"broadcast_{name}", move)
        dm.implementation = self.implement(move)
        read = read or st.add_read(name)
        st.add_edge(read, None, dm, "_in", Memlet.from_array(source, sdfg.arrays[source]))
        buf = st.add_access(local)
        st.add_edge(dm, "_out", buf, None, Memlet.from_array(local, sdfg.arrays[local]))
        st.add_nedge(buf, st.add_write(name), Memlet.from_array(local, sdfg.arrays[local]))


def every_rank_symbols(sdfg: SDFG, kernel_states) -> Set[str]:
    """Symbols that code beyond rank 0 reads: the blocks of every move, the kernels' own subsets and the
    sizes of transients (allocated on every rank, also where only rank 0 uses them). One assigned from data
    (``t = neigh_idx[a, b]`` for a block ``G[k, t]``) must be broadcast before it is assigned, or the other
    ranks compute their offsets from uninitialised copies."""
    from .loops import block_symbols
    out = set()
    for _, dm in distributed_memlets(sdfg):
        out |= block_symbols(dm)
    for st in kernel_states:
        out |= {str(s) for s in st.free_symbols}
    for desc in sdfg.arrays.values():  # every rank allocates the transients (spmv's ``A_val[start:stop]``)
        if desc.transient:
            out |= {str(s) for s in desc.free_symbols}
    return out
