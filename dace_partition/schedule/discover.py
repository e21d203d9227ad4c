"""What can be scheduled: the kernels of an SDFG and their maps (the checks a schedule must pass are in
:mod:`.resolve`).

A *kernel* is a node at the top level of one of the SDFG's states that does parallel work: a map, a
nested SDFG, or a library node. A map of a nested SDFG or of a library node's pure expansion is named
``<node label>.<map label>``; all names are unique in the program, so they can be schedule keys.
"""
import copy
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Tuple

import dace
import numpy as np
from dace import nodes
from dace.sdfg import SDFG, SDFGState
from dace.sdfg.utils import dfs_topological_sort

from ..compat import reduce_axes_of_indexed_slices, to_state_machine, whole_array_map_bodies
from ..errors import ScheduleError, UnsupportedPattern
from ..ir.kinds import Direction
from ..ir.record import notes
from .loops import loops_to_maps


@dataclass
class MapInfo:
    """A schedulable map: ``name`` (a schedule key), ``params`` and ``shape`` (extent per parameter)."""
    name: str
    params: Tuple[str, ...]
    shape: Tuple[object, ...]
    kernel: "Kernel" = field(repr=False, compare=False)
    map: nodes.Map = field(repr=False, compare=False)

    def __str__(self):
        dims = ", ".join(f"{p}: {s}" for p, s in zip(self.params, self.shape))
        return f"{self.name} [{dims}]"

    def __hash__(self):  # usable as a schedule key
        return hash(self.name)


class KernelKind(str, Enum):
    """What does a kernel's work: one map, a nested SDFG, or a library node (analysed through its pure
    expansion)."""
    MAP = "map"
    NESTED = "nested"
    LIBRARY = "library"

    def __str__(self):
        return self.value


@dataclass
class Kernel:
    """A unit of work that gets one process grid.

    ``kind`` is a :class:`KernelKind`. For nested SDFGs and library nodes, ``body`` is the SDFG
    whose top-level maps are analysed (for a library node: its pure expansion, built on a scratch copy).
    """
    index: int
    kind: Optional[KernelKind]
    state: SDFGState
    node: nodes.Node
    body: Optional[SDFG] = None
    body_node: Optional[nodes.NestedSDFG] = None
    maps: List[MapInfo] = field(default_factory=list)
    # (direction, outer array) -> connector name inside ``body`` (library nodes may have unnamed edges)
    connectors: Dict[Tuple[Direction, str], str] = field(default_factory=dict)

    @property
    def label(self):
        return self.node.map.label if self.kind == KernelKind.MAP else self.node.label


def ordered_states(sdfg: SDFG) -> List[SDFGState]:
    """States of ``sdfg`` itself (not of nested SDFGs) in program order."""
    out = []

    def walk(region):
        for block in region.bfs_nodes(region.start_block):
            if isinstance(block, SDFGState):
                out.append(block)
            elif hasattr(block, "branches"):
                for _, branch in block.branches:
                    walk(branch)
            elif hasattr(block, "nodes") and hasattr(block, "start_block"):
                walk(block)

    walk(sdfg)
    return out


def top_level_kernels(state: SDFGState) -> List[nodes.Node]:
    scope = state.scope_dict()
    return [
        n for n in dfs_topological_sort(state)
        if scope[n] is None and isinstance(n, (nodes.MapEntry, nodes.NestedSDFG, nodes.LibraryNode))
    ]


_EXPANSIONS: Dict[str, SDFG] = {}  # fingerprint of a library node in its place -> its scratch expansion


def expand_pure(node: nodes.LibraryNode, sdfg: SDFG, state: SDFGState):
    """Expands a library node on a scratch SDFG to its pure (map-level) implementation.

    The original node is untouched: the expansion is only a proxy for analysis (thesis 4.6.1), since
    every implementation of a library node computes the same function.

    ``lower(ranks=P)`` discovers the kernels of copies of one program eight times (map fusion, the
    search, the lowering) and DaCe's expansion of a node costs tens of milliseconds (resnet: 9 reductions,
    72 expansions): an expansion is kept per fingerprint of the node, its memlets and their arrays, and
    each caller gets a copy of it (callers change the bodies: ``search.model.prepare`` fixes their sizes).
    """
    key = _fingerprint(node, sdfg, state)
    kept = _EXPANSIONS.get(key) if key is not None else None
    if kept is not None:
        scratch = copy.deepcopy(kept)
        st = next(s for s in scratch.states() if s.label == "expansion")
        return scratch, st, next(n for n in st.nodes() if isinstance(n, nodes.NestedSDFG))
    out = _expand_pure(node, sdfg, state)
    if key is not None:
        if len(_EXPANSIONS) > 512:
            _EXPANSIONS.clear()
        _EXPANSIONS[key] = copy.deepcopy(out[0])
    return out


def _fingerprint(node: nodes.LibraryNode, sdfg: SDFG, state: SDFGState) -> Optional[str]:
    """What an expansion depends on: the node's properties, its memlets and connectors, their arrays'
    descriptors and the SDFG's symbols, as JSON without identities (guids, node ids, debug info);
    None where something cannot be serialized (the node is then expanded every time)."""

    def plain(obj):
        if isinstance(obj, dict):
            return {k: plain(v) for k, v in obj.items() if k not in ("guid", "debuginfo")}
        if isinstance(obj, list):
            return [plain(v) for v in obj]
        return obj

    try:
        own = plain(node.to_json(state))
        own.pop("id", None)
        parts = [type(node).__module__, type(node).__qualname__, sdfg.name, sorted(map(str, sdfg.symbols.items())),
                 own]
        for e in state.in_edges(node) + state.out_edges(node):
            if e.data.data is None:
                continue
            into = e.dst is node
            parts.append([into, e.dst_conn if into else e.src_conn,
                          e.src_conn if into and isinstance(e.src, nodes.AccessNode) else None,
                          plain(e.data.to_json()), plain(sdfg.arrays[e.data.data].to_json())])
        return json.dumps(parts, sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - a node DaCe cannot serialize is expanded without the cache
        return None


def first_read(state: SDFGState, node) -> Tuple[str, str]:
    """(array, subset) of the first memlet into ``node``, the names a refusal of the node gives
    (``("(none)", "")`` where it reads nothing)."""
    read = [e for e in state.in_edges(node) if e.data.data is not None]
    return (read[0].data.data, str(read[0].data.subset)) if read else ("(none)", "")


def _expand_pure(node: nodes.LibraryNode, sdfg: SDFG, state: SDFGState):
    scratch = SDFG(f"{sdfg.name}_expansion_{node.label}".replace(" ", "_"))
    for sym, typ in sdfg.symbols.items():
        scratch.add_symbol(sym, typ)
    st = scratch.add_state("expansion")
    lib = copy.deepcopy(node)
    st.add_node(lib)
    for e in state.in_edges(node) + state.out_edges(node):
        if e.data.data is None:
            continue
        if e.data.data not in scratch.arrays:
            desc = copy.deepcopy(sdfg.arrays[e.data.data])
            desc.transient = False
            scratch.add_datadesc(e.data.data, desc)
        acc = st.add_access(e.data.data)
        if e.dst is node:
            st.add_edge(acc, e.src_conn if isinstance(e.src, nodes.AccessNode) else None, lib, e.dst_conn,
                        copy.deepcopy(e.data))
        else:
            st.add_edge(lib, e.src_conn, acc, None, copy.deepcopy(e.data))
    try:
        expand_all(scratch)
    except (ScheduleError, UnsupportedPattern):
        raise
    except Exception as err:  # noqa: BLE001 - DaCe's expansion refuses the node: say which and why, in words
        array, subset = first_read(state, node)
        raise UnsupportedPattern(array, subset, f"library node '{node.label}' ({type(node).__name__}) that reads it "
                                 f"cannot be expanded by DaCe: {type(err).__name__}: "
                                 f"{(str(err).splitlines() or [''])[0]} (DaCe's own program fails on it too)") from err
    nested = [n for n in st.nodes() if isinstance(n, nodes.NestedSDFG)]
    if len(nested) != 1:
        raise ScheduleError(f"library node '{node.label}' ({type(node).__name__}) has no pure expansion "
                            "into a nested SDFG that could be analysed")
    return scratch, st, nested[0]


def expand_all(scope, keep=(), skip=()):
    """Expands every library node under ``scope`` (an SDFG, state or nested SDFG), recursively, to its
    pure implementation (through ``specialize`` where a node has no pure one). Types in ``keep`` and the
    nodes in ``skip`` stay, except a matrix-vector product that DaCe's BLAS expansions get wrong
    (:func:`misread_by_blas`)."""
    while True:
        libs = [(n, s) for n, s in scope.all_nodes_recursive()
                if isinstance(n, nodes.LibraryNode) and (not isinstance(n, tuple(keep)) or misread_by_blas(n, s))
                and n not in skip]
        if not libs:
            return
        n, s = libs[0]
        impls = n.implementations
        if "pure" in impls:
            n.implementation = "pure"
        elif "specialize" in impls:
            n.implementation = "specialize"
        n.expand(s.sdfg, s)


def misread_by_blas(node, state) -> bool:
    """Whether ``node`` is a matrix-vector product (a ``Gemv``, or a ``MatMul`` that becomes one) of a
    matrix stored by columns (strides ``(1, ld)``) that is not square. DaCe's BLAS expansion of a ``Gemv``
    (one code for MKL, OpenBLAS and cuBLAS, in 1.0.2 and 2.x) then swaps the matrix's two dimensions in the
    call: ``np.einsum('ik,k->i', a, b)``, which DaCe's frontend writes as such a product of a transposing
    view of ``a``, read the wrong elements (a wrong result or a crash). The pure expansion is right."""
    from dace.libraries.blas import Gemv, MatMul
    if not isinstance(node, (Gemv, MatMul)):
        return False
    names = ("_A", "_x") if isinstance(node, Gemv) else ("_a", "_b")
    operands = {}
    for e in state.in_edges(node):
        if e.dst_conn in names and e.data.data is not None and e.data.subset is not None:
            subset = copy.deepcopy(e.data.subset)
            wide = subset.squeeze()
            strides = [x for i, x in enumerate(state.sdfg.arrays[e.data.data].strides) if i in wide]
            operands[e.dst_conn] = (subset.size(), strides)
    if len(operands) != 2:
        return False
    matrices = [(size, strides) for size, strides in operands.values() if len(size) == 2]
    vectors = [size for size, _ in operands.values() if len(size) == 1]
    if len(matrices) != 1 or len(vectors) != 1:
        return False
    (rows, cols), (first, second) = matrices[0]
    same = dace.symbolic.simplify(rows - cols) == 0
    return dace.symbolic.simplify(first - 1) == 0 and dace.symbolic.simplify(second - 1) != 0 and not same


def misread_by_blas_in(sdfg: SDFG) -> bool:
    return any(isinstance(n, nodes.LibraryNode) and misread_by_blas(n, s) for n, s in sdfg.all_nodes_recursive())


def expand_misread_by_blas(sdfg: SDFG) -> int:
    """Expands the products :func:`misread_by_blas` finds to their pure implementation (a ``MatMul``
    through its ``Gemv``). Returns how many."""
    from dace.libraries.blas import Gemv
    done = 0
    while True:
        found = [(n, s) for n, s in sdfg.all_nodes_recursive()
                 if isinstance(n, nodes.LibraryNode) and misread_by_blas(n, s)]
        if not found:
            return done
        n, s = found[0]
        n.implementation = "pure" if isinstance(n, Gemv) else "specialize"
        n.expand(s.sdfg, s)
        done += isinstance(n, Gemv)


def normalise(sdfg: SDFG) -> SDFG:
    """Rewrites ``sdfg`` in place, once, into the form :func:`discover` reads, and returns it: a loop whose
    only maps have extents that depend on its variable becomes a map where DaCe's ``LoopToMap`` finds the
    iterations independent (:func:`.loops.loops_to_maps`), then DaCe 2's loop and branch regions are inlined
    as 1.0.2's frontend does, and DaCe 2's map bodies get 1.0.2's connectors (:mod:`..compat`). The meaning
    of the program does not change, except where DaCe's simplification left a reduction of an indexed slice
    with the slice's axis numbers (:func:`..compat.reduce_axes_of_indexed_slices`: NumPy's meaning). A copy of a normalised SDFG is normalised; a second call does nothing
    (measured on the conformance programs under both DaCe generations: only the first call changes a graph)."""
    if notes(sdfg).normalised:
        return sdfg
    reduce_axes_of_indexed_slices(sdfg)
    loops_to_maps(sdfg)
    to_state_machine(sdfg)
    whole_array_map_bodies(sdfg)
    notes(sdfg).normalised = True
    return sdfg


def discover(sdfg: SDFG) -> List[Kernel]:
    """All kernels of the SDFG in program order, with their schedulable maps and unique names. Reads
    ``sdfg`` only; it must be normalised (:func:`normalise`: ``lower`` and :func:`maps` normalise their
    copies), else a triangular loop would be missed as a kernel here and found as one later."""
    if not notes(sdfg).normalised:
        raise ValueError(f"discover() reads a normalised SDFG and '{sdfg.name}' is not one: call "
                         "dace_partition.schedule.normalise(sdfg) first (it rewrites the SDFG in place; "
                         "dp.maps() and lower() do it on their own copies)")
    kernels: List[Kernel] = []
    used: Dict[str, int] = {}

    def unique(name):
        if name not in used:
            used[name] = 0
            return name
        used[name] += 1
        while f"{name}_{used[name]}" in used:
            used[name] += 1
        new = f"{name}_{used[name]}"
        used[new] = 0
        return new

    for state in ordered_states(sdfg):
        for node in top_level_kernels(state):
            k = Kernel(len(kernels), None, state, node)
            if isinstance(node, nodes.MapEntry):
                k.kind = KernelKind.MAP
                k.maps.append(_info(unique(node.map.label), node.map, k))
            else:
                if isinstance(node, nodes.NestedSDFG):
                    k.kind, k.body, k.body_node = KernelKind.NESTED, node.sdfg, node
                    owner = state
                else:
                    k.kind = KernelKind.LIBRARY
                    _, owner, nested = expand_pure(node, sdfg, state)
                    k.body, k.body_node = nested.sdfg, nested
                for e in owner.in_edges(k.body_node):
                    if e.data.data is not None:
                        k.connectors[(Direction.IN, e.data.data)] = e.dst_conn
                for e in owner.out_edges(k.body_node):
                    if e.data.data is not None:
                        k.connectors[(Direction.OUT, e.data.data)] = e.src_conn
                for st in ordered_states(k.body):
                    for inner in top_level_kernels(st):
                        if isinstance(inner, nodes.MapEntry):
                            k.maps.append(_info(unique(f"{node.label}.{inner.map.label}"), inner.map, k))
            kernels.append(k)
    return kernels


def _info(name, m: nodes.Map, kernel):
    # Symbols fixed by ``sdfg.specialize`` (constants) count as the numbers they are.
    consts = {dace.symbolic.symbol(k): v for k, v in kernel.state.sdfg.constants.items()
              if isinstance(v, (int, float, np.integer, np.floating))}  # not an array constant (a stencil's weights)
    shape = []
    for (b, e, s) in m.range:
        ext = (e - b + 1) // s if s != 1 else e - b + 1
        if consts and hasattr(ext, "subs"):
            ext = ext.subs(consts)
        shape.append(dace.symbolic.simplify(ext))
    return MapInfo(name, tuple(m.params), tuple(_as_int(x) for x in shape), kernel, m)


def _as_int(x):
    try:
        return int(x)
    except TypeError:
        return x


def maps(sdfg: SDFG) -> List[MapInfo]:
    """The schedulable maps of ``sdfg`` in program order (see the module docstring for their names).
    Discovery runs on a normalised copy (loops may become maps), so ``sdfg`` does not change."""
    return [m for k in discover(normalise(copy.deepcopy(sdfg))) for m in k.maps]
