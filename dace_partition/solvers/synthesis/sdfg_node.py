"""The synthesized redistribution as a DaCe library node (part (b) of the synthesizer).

``Redistribute`` has one input ``_in`` (this rank's tile under the source layout) and one output ``_out``
(its tile under the target layout).  Its expansion calls :func:`.synthesize` at code-generation time and
emits a C++ tasklet that executes the plan with MPI over the runtime's private communicator (a duplicate of
``MPI_COMM_WORLD``; device id = world rank): allgather/alltoall on ``MPI_Comm_split`` groups with the local
transposes, dynslice as a local copy, the permutation with ``MPI_Sendrecv`` (ranks that keep their tile
skip it). Each step's group is split once, at its first call, and cached by the step's static colour and
key tables until the program exits; the scratch buffers are allocated once, so a call makes only its MPI
calls and copies.  A fused alltoall is one
``MPI_Alltoall`` over the product of its axes: its moves are emitted as the tables ``mi``/``mj``/``mn``
(source dim, target dim, group size per move) and the helper cuts and joins chunks over all of them at
once.  Device maps that differ from the identity need nothing special, since every group, chunk and
partner is emitted per rank.  The tasklet uses two scratch buffers of the plan's peak tile
(``Plan.peak_elements``), never more, kept from one call to the next.  Helpers live in ``runtime/include/dace_partition_redistribute.h``.

    node = Redistribute("r", mesh={"a": 2, "b": 2, "c": 2}, shape=(8, 88, 12),
                        src=[(), ("a", "c"), ()], dst=[("b",), ("c",), ()], dtype=dace.float32)
    state.add_edge(src_access, None, node, "_in", dace.Memlet("src_tile"))
    state.add_edge(node, "_out", dst_access, None, dace.Memlet("dst_tile"))
"""
from __future__ import annotations

from typing import List

import dace
import dace.library
from dace import nodes
from dace.properties import ListProperty, TypeClassProperty
from dace.transformation.transformation import ExpandTransformation

from ...runtime.environment import DacePartitionMPI
from .api import synthesize
from .plan import Plan
from .types import Collective



@dace.library.environment
class DacePartitionRedistribute(DacePartitionMPI):
    """The MPI build settings of :class:`DacePartitionMPI` plus the redistribution executor header."""
    headers = ["mpi.h", "dace_partition_redistribute.h"]
    init_code = "dace_partition_redistribute::ensure_mpi();"
    # Frees the cached groups, datatypes and the private communicator (idempotent: a lowered program's
    # exit code has already called dace_partition::free_grids()).
    finalize_code = "dace_partition_redistribute::finalize();"


def _ints(xs) -> str:
    return "{" + ", ".join(str(int(x)) for x in xs) + "}"


def emit(plan: Plan) -> str:
    """C++ body executing ``plan`` on connectors ``_in`` -> ``_out`` (this rank's tiles)."""
    ndev = plan.mesh.size
    e = plan.itemsize
    peak = plan.peak_elements
    src_n = plan.initial.localsize
    dst_n = int(plan.steps[-1].after.localsize) if plan.steps else src_n
    ns = "dace_partition_redistribute"
    code: List[str] = [
        "{",
        f"    {ns}::ensure_mpi();",
        "    const int __me = dace_partition::world_rank(), __np = dace_partition::world_size();",
        f"    if (__np != {ndev}) {{",
        f'        dace_partition::fail("Redistribute: mesh %s needs {ndev} MPI ranks, got %d", "{plan.mesh}", __np);',
        "    }",
        f"    const size_t __e = {e};",
        f"    static std::vector<char> __a({peak} * __e), __b({peak} * __e);  // scratch: plan peak tile each, "
        "allocated at the first call",
        "    char *__cur = __a.data(), *__tmp = __b.data();",
        f"    std::memcpy(__cur, (const char *)_in, {src_n} * __e);",
    ]
    for k, s in enumerate(plan.steps):
        rank = len(s.tile_in)
        code.append(f"    {{  // step {k}: {s.op} dims {s.dims} axes {s.axes}")
        code.append(f"        static const long shape[{rank}] = {_ints(s.tile_in)};")
        if s.op == Collective.DYNSLICE:
            code.append(f"        static const int chunk[{ndev}] = {_ints(s.chunk_of)};")
            code.append(f"        {ns}::dynslice(__cur, __tmp, {rank}, shape, {s.dims[0]}, {s.n}, chunk[__me], __e);")
        elif s.op in (Collective.ALLGATHER, Collective.ALLTOALL):
            code.append(f"        static const int colour[{ndev}] = {_ints(s.group_of)};")
            code.append(f"        static const int key[{ndev}] = {_ints(s.member_of)};")
            if s.op == Collective.ALLGATHER:
                code.append(f"        {ns}::allgather(__cur, __tmp, {rank}, shape, {s.dims[0]}, {s.n}, "
                            "colour, key, __e);")
            else:
                m = len(s.moves)
                code.append(f"        static const int mi[{m}] = {_ints(i for i, _, _ in s.moves)};")
                code.append(f"        static const int mj[{m}] = {_ints(j for _, j, _ in s.moves)};")
                code.append(f"        static const int mn[{m}] = {_ints(n for _, _, n in s.moves)};")
                code.append(f"        {ns}::alltoall(__cur, __tmp, {rank}, shape, {m}, mi, mj, mn, "
                            "colour, key, __e);")
        elif s.op == Collective.ALLPERMUTE:
            code.append(f"        static const int dest[{ndev}] = {_ints(s.dst_of)};")
            code.append(f"        static const int source[{ndev}] = {_ints(s.src_of)};")
            code.append(f"        {ns}::permute(__cur, __tmp, (long){int(s.after.localsize)} * (long)__e, "
                        "dest[__me], source[__me], __me);")
        else:
            raise ValueError(s.op)
        code.append("    }")
    code.append(f"    std::memcpy((char *)_out, __cur, {dst_n} * __e);")
    code.append("}")
    return "\n".join(code)


def _layout(lay) -> tuple:
    return tuple(tuple(axes) for axes in lay)


@dace.library.expansion
class ExpandRedistributeMPI(ExpandTransformation):
    """Synthesize the plan and run it with MPI collectives in one C++ tasklet."""
    environments = [DacePartitionRedistribute]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        plan = node.plan()
        ptr = dace.pointer(node.dtype)
        return nodes.Tasklet(node.name, {"_in": ptr}, {"_out": ptr}, emit(plan), language=dace.Language.CPP)


@dace.library.node
class Redistribute(nodes.LibraryNode):
    """Redistribute a block-distributed array from layout ``src`` to ``dst`` on ``mesh`` (one tile per rank)."""
    implementations = {"mpi": ExpandRedistributeMPI}
    default_implementation = "mpi"

    mesh = ListProperty(element_type=list, desc="Mesh as ordered [axis, size] pairs")
    shape = ListProperty(element_type=int, desc="Global array shape")
    src = ListProperty(element_type=list, desc="Source layout: per dimension the mesh axes (major-to-minor)")
    dst = ListProperty(element_type=list, desc="Target layout: per dimension the mesh axes (major-to-minor)")
    dtype = TypeClassProperty(default=dace.float64, desc="Element type")

    def __init__(self, name, mesh=None, shape=(), src=(), dst=(), dtype=dace.float64, **kwargs):
        super().__init__(name, inputs={"_in"}, outputs={"_out"}, **kwargs)
        self.mesh = [[str(k), int(v)] for k, v in dict(mesh or {}).items()]
        self.shape = [int(s) for s in shape]
        self.src = [list(a) for a in src]
        self.dst = [list(a) for a in dst]
        self.dtype = dtype

    def plan(self) -> Plan:
        mesh = {str(k): int(v) for k, v in self.mesh}
        return synthesize(mesh, tuple(self.shape), _layout(self.src), _layout(self.dst),
                          itemsize=int(self.dtype.bytes))

    def __str__(self):
        return f"Redistribute {self.src} -> {self.dst} on {self.mesh}"
