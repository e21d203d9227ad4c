"""Row kernels: a chain of kernel states that each work on whole rows, fused into one GPU kernel.

A row softmax as written in NumPy is four kernels on a rank (row max, ``exp(x - max)``, row sum, divide):
four launches, four passes over the rows and two row-sized intermediates written to and read back from GPU
memory. Where every kernel of a chain of consecutive states keeps to its rows (an elementwise map over
``[rows, columns]`` that reads its own element and per-row values, or a reduction of a ``[rows, columns]``
array over the columns), the chain becomes one kernel with a thread block per row: the block reduces with
warp shuffles and shared memory, every thread keeps the per-row results in registers, and an intermediate
that only the chain uses is recomputed where it is read instead of stored. An input row that several
loops read is staged in shared memory (:func:`_row_cache`), so the softmax reads ``x`` from GPU memory
once and writes the result once.

:func:`row_chains` decides (pure: which states fuse); :func:`fuse_row_chain`
rewrites one chain into its first state (the other states are emptied; their guards stay and, holding the
same condition, change nothing). The fused tasklet also runs on the host (one thread per row, the same
expressions), which is how the host emulation of the GPU data flow tests it without a GPU.
``DACE_PARTITION_GPU_FUSION=0`` keeps the kernels apart.
"""
import numbers
import os
import re
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Dict, List, Optional, Sequence, Set, Tuple

import dace
from dace import dtypes, nodes, symbolic
from dace.codegen import cppunparse
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState
from dace.subsets import Range

from ..compat import all_states

#: Threads per row block at most (8 warps); fewer for short rows.
ROW_THREADS = 256

#: Shared memory a row block may stage its row's inputs in (bytes; a block may use 48 KiB without opting in).
ROW_CACHE_BYTES = 32 * 1024

#: The reductions a row kernel computes: DaCe's reduction type -> (the combining helper, its identity).
_REDUCTIONS = MappingProxyType({
    dace.dtypes.ReductionType.Sum: ("sum", "0"),
    dace.dtypes.ReductionType.Product: ("prod", "1"),
    dace.dtypes.ReductionType.Max: ("max", "__dp_lowest<{t}>()"),
    dace.dtypes.ReductionType.Min: ("min", "__dp_highest<{t}>()"),
})


class _Kind(Enum):
    MAP = "map"  # an elementwise map over [rows, cols]
    REDUCE = "reduce"  # a reduction of whole rows over the columns


class _Index(Enum):
    """How a map stage reads or writes one element of an array."""
    ELEMENT = "own element of a [rows, cols] array"
    ROW = "the row's value of a [rows] array"
    COLUMN = "the column's value of a [cols] array"


@dataclass
class _Stage:
    state: SDFGState
    kind: _Kind
    out: str  # the array it writes
    reads: List[str]
    node: object = None  # the MapEntry or the Reduce node
    op: str = ""  # reductions: sum, prod, max, min
    identity: str = ""
    symbols: Set[str] = field(default_factory=set)  # symbols its tasklets' code uses


@dataclass
class RowChain:
    """Consecutive kernel states that fuse into one row kernel: their stages in order, the columns of the
    map stages, and the arrays only the chain uses (not stored any more)."""
    stages: List[_Stage]
    cols: object
    internal: Set[str] = field(default_factory=set)
    cached: Tuple[str, ...] = ()  # inputs staged in shared memory: read from GPU memory once per row

    def loops(self) -> List["RowLoop"]:
        """The fused kernel's loops over a row's columns, in order, with what each reads from and writes to
        GPU memory: a reduction's loop, and a map's store where its result is kept. A value the chain
        computed is not read back: a reduction's stays in registers, a map's is recomputed from its inputs
        where it is read (so the softmax evaluates ``x`` in three loops). An input staged in shared memory
        is read from GPU memory once, in a first loop that only stages. The cost model prices these."""
        out = self._loops()
        if not self.cached:
            return out
        staged = frozenset(self.cached)
        return [RowLoop(staged, None, ())] + [RowLoop(lp.reads - staged, lp.writes, lp.evaluates) for lp in out]

    def _loops(self) -> List["RowLoop"]:
        producer = {s.out: s for s in self.stages}

        def expand(name: str, reads: Set[str], evaluates: List[SDFGState]):
            p = producer.get(name)
            if p is None:
                reads.add(name)
            elif p.kind == _Kind.MAP:
                evaluates.append(p.state)
                for r in p.reads:
                    expand(r, reads, evaluates)

        out = []
        for s in self.stages:
            if s.kind == _Kind.MAP and s.out in self.internal:
                continue  # computed only where it is read
            reads: Set[str] = set()
            evaluates = [s.state]
            for r in s.reads:
                expand(r, reads, evaluates)
            out.append(RowLoop(frozenset(reads), s.out if s.kind == _Kind.MAP else None, tuple(evaluates)))
        return out

    def __str__(self):
        return (f"{len(self.stages)} kernels ({', '.join(s.state.label for s in self.stages)}) -> one row kernel"
                f"{' (not stored: ' + ', '.join(sorted(self.internal)) + ')' if self.internal else ''}"
                f"{'; rows of ' + ', '.join(self.cached) + ' staged in shared memory' if self.cached else ''}")


@dataclass(frozen=True)
class RowLoop:
    """One loop of a row kernel over its row's columns: the arrays it reads from GPU memory, the array it
    stores (None: a reduction's, kept in registers) and the kernel states whose expressions it evaluates
    for each column (a recomputed intermediate's producers included)."""
    reads: frozenset
    writes: Optional[str]
    evaluates: Tuple[SDFGState, ...]


def _switched_on(variable: str) -> bool:
    return os.environ.get(variable, "1").lower() not in ("0", "no", "off", "false")


def enabled() -> bool:
    return _switched_on("DACE_PARTITION_GPU_FUSION")


def cache_enabled() -> bool:
    return _switched_on("DACE_PARTITION_GPU_ROW_CACHE")


def _constant_cols(sdfg: SDFG, chain: RowChain) -> Optional[int]:
    """The row length as an integer, where it is one at compile time (the program's constants included)."""
    try:
        return int(symbolic.evaluate(chain.cols, {k: v for k, v in sdfg.constants.items()
                                                  if isinstance(v, numbers.Number)}))
    except (TypeError, ValueError, KeyError):
        return None


def _row_cache(sdfg: SDFG, chain: RowChain) -> Tuple[str, ...]:
    """The inputs a row kernel stages in shared memory: ``[rows, cols]`` arrays that more than one of its
    loops reads (a loop that recomputes an intermediate reads that intermediate's inputs), taken most-read
    first where their rows still fit in :data:`ROW_CACHE_BYTES`. Each thread stages and later reads only
    its own columns, so staging needs no barrier; a row length known only at run time stages nothing (the
    buffer's size is a compile-time constant)."""
    cols = _constant_cols(sdfg, chain)
    if not cache_enabled() or cols is None:
        return ()
    count: Dict[str, int] = {}
    for lp in chain._loops():
        for name in lp.reads:
            if len(sdfg.arrays[name].shape) == 2:
                count[name] = count.get(name, 0) + 1
    out, used = [], 0
    for name in sorted(count, key=lambda n: (-count[n], n)):
        size = cols * sdfg.arrays[name].dtype.bytes
        if count[name] >= 2 and used + size <= ROW_CACHE_BYTES:
            out.append(name)
            used += size
    return tuple(out)


def _same(a, b, constants=None) -> bool:
    try:
        d = symbolic.pystr_to_symbolic(str(a)) - symbolic.pystr_to_symbolic(str(b))
        if constants:
            d = d.subs({symbolic.pystr_to_symbolic(k): v for k, v in constants.items()
                        if isinstance(v, numbers.Number)})
        return symbolic.simplify(d) == 0
    except Exception:  # noqa: BLE001 - an expression SymPy cannot compare is not known equal
        return False


def _stage(sdfg: SDFG, state: SDFGState) -> Optional[_Stage]:
    """The state as one row stage, or None."""
    from dace.libraries.standard import Reduce
    work = [n for n in state.nodes() if not isinstance(n, nodes.AccessNode)]
    scope = state.scope_dict()
    top = [n for n in work if scope[n] is None]
    if len(top) != 1:  # not one kernel
        return None
    n = top[0]
    if isinstance(n, Reduce):
        from dace.frontend.operations import detect_reduction_type
        rt = detect_reduction_type(n.wcr)
        if rt not in _REDUCTIONS or state.in_degree(n) != 1 or state.out_degree(n) != 1:
            return None
        ie, oe = state.in_edges(n)[0], state.out_edges(n)[0]
        ind, outd = sdfg.arrays[ie.data.data], sdfg.arrays[oe.data.data]
        axes = list(n.axes) if n.axes is not None else list(range(len(ind.shape)))
        if len(ind.shape) != 2 or len(outd.shape) != 1 or axes != [1] or \
                ie.data.subset != Range.from_array(ind) or oe.data.subset != Range.from_array(outd) or \
                oe.data.wcr is not None:  # not a reduction of whole rows
            return None
        op, ident = _REDUCTIONS[rt]
        if n.identity is not None:
            ident = repr(n.identity) if not isinstance(n.identity, bool) else str(int(n.identity))
        return _Stage(state, _Kind.REDUCE, oe.data.data, [ie.data.data], n, op, ident.format(t=outd.dtype.ctype))
    if not isinstance(n, nodes.MapEntry) or len(n.map.params) != 2:
        return None
    inner = state.scope_subgraph(n, include_entry=False, include_exit=False).nodes()
    for m in inner:
        if isinstance(m, nodes.Tasklet):
            if m.language != dtypes.Language.Python or m.side_effects or \
                    set(map(str, m.free_symbols)) & set(n.map.params):  # not a pure expression of its inputs
                return None
        elif isinstance(m, nodes.AccessNode):
            if not (sdfg.arrays[m.data].transient and sdfg.arrays[m.data].total_size == 1):
                return None  # an array inside the map
        else:
            return None
    exit_ = state.exit_node(n)
    outs = {e.data.data for e in state.out_edges(exit_)}
    if len(outs) != 1 or any(e.data.wcr is not None for e in state.in_edges(exit_)) or \
            len(state.in_edges(exit_)) != 1:  # not one output
        return None
    reads = [e.data.data for e in state.in_edges(n) if e.data.data is not None]
    symbols = {str(x) for m in inner if isinstance(m, nodes.Tasklet) for x in m.free_symbols}
    return _Stage(state, _Kind.MAP, outs.pop(), reads, n, symbols=symbols)


def _index_kind(sdfg: SDFG, memlet, params, starts) -> Optional[_Index]:
    """How an element memlet of a map stage indexes its array (None: otherwise)."""
    desc = sdfg.arrays[memlet.data]
    sub = memlet.subset
    if sub.num_elements() != 1:
        return None
    idx = [r[0] for r in sub.ndrange()]
    own = [symbolic.pystr_to_symbolic(p) - s for p, s in zip(params, starts)]
    if len(desc.shape) == 2 and _same(idx[0], own[0]) and _same(idx[1], own[1]):
        return _Index.ELEMENT
    if len(desc.shape) == 1 and _same(idx[0], own[0]):
        return _Index.ROW
    if len(desc.shape) == 1 and _same(idx[0], own[1]):
        return _Index.COLUMN
    return None


def _between_ok(sdfg: SDFG, a: SDFGState, b: SDFGState, cond) -> bool:
    """Only empty states and guards of the same condition lie between ``a`` and ``b``, no assignment."""
    g = a.parent_graph
    cur, seen = a, 0
    while seen < 64:
        seen += 1
        outs = g.out_edges(cur)
        if cur is not a:
            if cur.number_of_nodes():
                return False
        taken = None
        if len(outs) == 1 and outs[0].data.is_unconditional():
            taken = outs[0]
        elif len(outs) == 2:
            for e in outs:
                if e.dst is b and _norm(e.data.condition.as_string) == cond:
                    taken = e
        if taken is None or taken.data.assignments:
            return False
        if taken.dst is b:
            return _guard_of(g, b) == cond
        cur = taken.dst
        if not isinstance(cur, SDFGState):
            return False
    return False


def _norm(cond: str) -> str:
    return re.sub(r"__dp\d+_member", "__dpK_member", cond.replace(" ", ""))


def _guard_of(g, state) -> Optional[str]:
    ins = g.in_edges(state)
    if not ins and state is g.start_block:
        return "1"  # the program's first state runs unconditionally
    if len(ins) != 1:
        return None
    return _norm(ins[0].data.condition.as_string)


def row_chains(sdfg: SDFG, states: Sequence[SDFGState], same_ranks: Dict[SDFGState, object]) -> List[RowChain]:
    """The chains of ``states`` (kernel states in program order) that fuse into row kernels.

    ``same_ranks[state]`` says which ranks run the state (its grid; rank 0 for the root states): states of
    a chain run on the same ranks, under the same guard, with only empty states between them."""
    if not enabled():
        return []
    from ..schedule import ordered_states
    order = [s for s in ordered_states(sdfg) if s in set(states)]
    stages = [_stage(sdfg, s) for s in order]
    chains, cur = [], []

    def close():
        c = _check(sdfg, cur)
        if c is not None:
            chains.append(c)

    for st in stages:
        if st is None:
            close()
            cur = []
            continue
        if cur:
            prev = cur[-1].state
            cond = _guard_of(prev.parent_graph, prev)
            if prev.parent_graph is not st.state.parent_graph or same_ranks.get(prev) != same_ranks.get(st.state) \
                    or cond is None or not _between_ok(sdfg, prev, st.state, cond):
                close()
                cur = []
        cur.append(st)
    close()
    return chains


def _uses(sdfg: SDFG) -> Dict[str, Set[SDFGState]]:
    out: Dict[str, Set[SDFGState]] = {}
    for s in all_states(sdfg):
        for n in s.nodes():
            if isinstance(n, nodes.AccessNode):
                out.setdefault(n.data, set()).add(s)
    for e in sdfg.all_interstate_edges():
        for name in e.data.free_symbols:
            out.setdefault(str(name), set()).add(None)
    return out


def _check(sdfg: SDFG, stages: List[_Stage]) -> Optional[RowChain]:
    """The longest useful prefix-free chain of ``stages``: at least two kernels, one of them a map, every
    array of the right shape, indexed by row, written before the chain reads it and read from memory
    only where the chain does not write it."""
    maps = [s for s in stages if s.kind == _Kind.MAP]
    if len(stages) < 2 or not maps:
        return None
    rng = maps[0].node.map.range
    rows, cols = rng.size()
    for m in maps[1:]:
        r, c = m.node.map.range.size()
        if not (_same(_renamed(r), _renamed(rows), sdfg.constants) and _same(c, cols, sdfg.constants)):
            return None
    written: Set[str] = set()
    for s in stages:
        if s.kind == _Kind.MAP:
            params = s.node.map.params
            starts = [r[0] for r in s.node.map.range.ndrange()]
            for e in s.state.out_edges(s.node):
                if e.data.data is None:
                    continue
                if _index_kind(sdfg, e.data, params, starts) is None:
                    return None
            ex = s.state.exit_node(s.node)
            ie = s.state.in_edges(ex)[0]
            if _index_kind(sdfg, ie.data, params, starts) != _Index.ELEMENT:
                return None
        else:
            ind = sdfg.arrays[s.reads[0]]
            if not _same(ind.shape[1], cols, sdfg.constants):
                return None
        for r in s.reads:
            if r in written:
                continue
            if any(r == t.out for t in stages):  # read from memory, written later in the chain
                return None
        if s.out in written or s.out in s.reads:
            return None
        written.add(s.out)
    uses = _uses(sdfg)
    chain_states = {s.state for s in stages}
    internal = set()
    for name in written:
        desc = sdfg.arrays[name]
        if desc.transient and uses.get(name, set()) <= chain_states:
            internal.add(name)
    for s in stages:
        if s.kind == _Kind.REDUCE and s.out not in internal:
            return None  # a per-row result used after the chain (kept apart: rows beyond the maps' own)
    for s in stages:
        if s.kind == _Kind.MAP and s.out in internal and not any(s.out in t.reads for t in stages):
            return None
    # The fused tasklet is C++ code, whose symbols DaCe does not see: a GPU kernel gets only those of its
    # memlets and range (the arrays' sizes, the rows), so a tasklet's other symbols keep the kernels apart.
    known = {str(x) for n in set(r for s in stages for r in s.reads) | written for x in sdfg.arrays[n].free_symbols}
    known |= {str(x) for x in rng.free_symbols} | set(map(str, sdfg.constants))
    if any(s.symbols - known for s in stages):
        return None
    chain = RowChain(list(stages), cols, internal)
    chain.cached = _row_cache(sdfg, chain)
    return chain


def _renamed(e):
    return symbolic.pystr_to_symbolic(re.sub(r"__dp\d+_", "__dpK_", str(e)))


# ------------------------------------------------------------------------------------------ the rewrite


def _c(expr) -> str:
    from dace.codegen.targets.cpp import sym2cpp
    return sym2cpp(expr)


class _Emitter:
    def __init__(self, sdfg: SDFG, chain: RowChain):
        self.sdfg = sdfg
        self.chain = chain
        self.producer = {s.out: s for s in chain.stages}
        self.ins: Dict[str, str] = {}  # array -> input connector
        self.outs: Dict[str, str] = {}
        self.n = 0

    def conn_in(self, name):
        if name not in self.ins:
            self.ins[name] = f"__dpr_in{len(self.ins)}"
        return self.ins[name]

    def conn_out(self, name):
        if name not in self.outs:
            self.outs[name] = f"__dpr_out{len(self.outs)}"
        return self.outs[name]

    def mem(self, name, kind, conn):
        desc = self.sdfg.arrays[name]
        st = desc.strides
        if kind == _Index.ELEMENT:
            return f"{conn}[(__dpr_l) * ({_c(st[0])}) + (__dpr_j) * ({_c(st[1])})]"
        if kind == _Index.ROW:
            return f"{conn}[(__dpr_l) * ({_c(st[0])})]"
        return f"{conn}[(__dpr_j) * ({_c(st[0])})]"

    def value(self, name, kind, done: Set[str]) -> str:
        """The C++ expression of ``name``'s element for the current row (and column ``__dpr_j``)."""
        if name in done:
            p = self.producer[name]
            if p.kind == _Kind.REDUCE:
                return f"__dpr_{_ident(name)}"
            return f"__dpr_f_{_ident(name)}(__dpr_j)"
        if name in self.chain.cached and kind == _Index.ELEMENT:
            return f"__dpr_c_{_ident(name)}[__dpr_j]"
        return self.mem(name, kind, self.conn_in(name))

    def map_body(self, s: _Stage, done: Set[str]) -> str:
        """A lambda of the column computing the map stage's element (its tasklets in topological order)."""
        state, entry = s.state, s.node
        params = entry.map.params
        starts = [r[0] for r in entry.map.range.ndrange()]
        ex = state.exit_node(entry)
        inner = [n for n in state.scope_subgraph(entry, include_entry=False, include_exit=False).nodes()]
        order = [n for n in _topological(state, inner)]
        var: Dict[Tuple[object, str], str] = {}
        body = []
        for n in order:
            if isinstance(n, nodes.AccessNode):
                src = state.in_edges(n)
                if src:
                    e = src[0]
                    var[(n, "")] = var[(e.src, e.src_conn)]
                continue
            decls = []
            for e in state.in_edges(n):
                if e.dst_conn is None:
                    continue
                ctype = n.in_connectors[e.dst_conn].ctype if n.in_connectors[e.dst_conn] is not None and \
                    n.in_connectors[e.dst_conn].type is not None else "auto"
                if e.src is entry:
                    kind = _index_kind(self.sdfg, e.data, params, starts)
                    val = self.value(e.data.data, kind, done)
                elif isinstance(e.src, nodes.AccessNode):
                    val = var[(e.src, "")]
                else:
                    val = var[(e.src, e.src_conn)]
                if ctype in ("auto", "void"):
                    ctype = "auto"
                decls.append(f"const {ctype} {e.dst_conn} = {val};")
            outs = []
            for conn, t in n.out_connectors.items():
                ctype = t.ctype if t is not None and t.type is not None else \
                    self.sdfg.arrays[[e for e in state.out_edges_by_connector(n, conn)][0].data.data].dtype.ctype
                v = f"__dpr_v{self.n}"
                self.n += 1
                var[(n, conn)] = v
                outs.append((conn, ctype, v))
            code = _cpp(n)
            body.append("{ " + " ".join(decls) + " " + " ".join(f"{ct} {c};" for c, ct, _ in outs) + " " + code +
                        " " + " ".join(f"{v} = {c};" for c, _, v in outs) + " }")
            body = [f"{ct} {v};" for _, ct, v in outs] + body
        ie = state.in_edges(ex)[0]
        result = var[(ie.src, ie.src_conn)] if not isinstance(ie.src, nodes.AccessNode) else var[(ie.src, "")]
        out_t = self.sdfg.arrays[s.out].dtype.ctype
        return (f"auto __dpr_f_{_ident(s.out)} = [&](long long __dpr_j) -> {out_t} {{ " + " ".join(body) +
                f" return ({out_t})({result}); }};")

    def emit(self) -> str:
        done: Set[str] = set()
        code = []
        for name in self.chain.cached:  # each thread stages its own columns, and reads only those later
            t = self.sdfg.arrays[name].dtype.ctype
            v = f"__dpr_c_{_ident(name)}"
            code.append(f"__DPR_SHARED {t} {v}[{_constant_cols(self.sdfg, self.chain)}];")
            code.append(f"__DPR_UNROLL for (long long __dpr_j = __dpr_lane; __dpr_j < __dpr_cols; "
                        f"__dpr_j += __dpr_step) {v}[__dpr_j] = "
                        f"{self.mem(name, _Index.ELEMENT, self.conn_in(name))};")
        for s in self.chain.stages:
            if s.kind == _Kind.REDUCE:
                t = self.sdfg.arrays[s.out].dtype.ctype
                src = self.value(s.reads[0], _Index.ELEMENT, done)
                v = f"__dpr_{_ident(s.out)}"
                code.append(f"{t} {v} = {s.identity};")
                code.append(f"__DPR_UNROLL for (long long __dpr_j = __dpr_lane; __dpr_j < __dpr_cols; "
                            f"__dpr_j += __dpr_step) {{ {t} __dpr_x = {src}; {v} = __dpr_{s.op}({v}, __dpr_x); }}")
                code.append(f"{v} = __DPR_ALLREDUCE({s.op}, {v});")
            else:
                code.append(self.map_body(s, done))
                if s.out not in self.chain.internal:
                    conn = self.conn_out(s.out)
                    code.append(f"__DPR_UNROLL for (long long __dpr_j = __dpr_lane; __dpr_j < __dpr_cols; "
                                f"__dpr_j += __dpr_step) "
                                f"{self.mem(s.out, _Index.ELEMENT, conn)} = __dpr_f_{_ident(s.out)}(__dpr_j);")
            done.add(s.out)
        return "\n".join(code)


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _cpp(tasklet: nodes.Tasklet) -> str:
    code = cppunparse.py2cpp(tasklet.code.code)
    # py2cpp declares assigned names with ``auto``; the connectors are declared already.
    return re.sub(r"\bauto\s+", "", code).replace("\n", " ")


def _topological(state: SDFGState, inner) -> list:
    inner = list(inner)
    inset = set(inner)
    indeg = {n: sum(1 for e in state.in_edges(n) if e.src in inset) for n in inner}
    ready = [n for n in inner if indeg[n] == 0]
    out = []
    while ready:
        n = ready.pop(0)
        out.append(n)
        for e in state.out_edges(n):
            if e.dst in inset:
                indeg[e.dst] -= 1
                if indeg[e.dst] == 0:
                    ready.append(e.dst)
    return out


#: The per-thread code's frame: on the GPU the block's threads share the columns and reduce together; on
#: the host (the emulation) the map's first thread does the whole row (its staged rows on its stack). The
#: column loops are unrolled on the GPU so that a thread has several loads in flight: a block per row
#: otherwise waits out one memory latency per element it reads.
_FRAME = """
#ifdef __CUDA_ARCH__
const long long __dpr_lane = {lane}; const long long __dpr_step = {threads};
#define __DPR_ALLREDUCE(op, v) __dpr_block_##op(v)
#define __DPR_SHARED __shared__
#define __DPR_UNROLL _Pragma("unroll 8")
#else
const long long __dpr_lane = 0; const long long __dpr_step = 1;
#define __DPR_ALLREDUCE(op, v) (v)
#define __DPR_SHARED
#define __DPR_UNROLL
if ({lane} == 0)
#endif
{{
const long long __dpr_l = {row}; const long long __dpr_cols = {cols};
{body}
}}
#undef __DPR_ALLREDUCE
#undef __DPR_SHARED
#undef __DPR_UNROLL
"""

#: The helpers of the row kernels: the combining operators (the host's emulation uses them too) and, for
#: CUDA, block reductions (warp shuffles, then one value per warp in shared memory, which every thread
#: combines, so every thread of the row's block holds the row's result).
ROW_HELPERS = """
#include <limits>
template <typename T> DACE_HDFI T __dp_lowest() { return std::numeric_limits<T>::lowest(); }
template <typename T> DACE_HDFI T __dp_highest() { return std::numeric_limits<T>::max(); }
template <typename T> DACE_HDFI T __dpr_sum(T a, T b) { return a + b; }
template <typename T> DACE_HDFI T __dpr_prod(T a, T b) { return a * b; }
template <typename T> DACE_HDFI T __dpr_max(T a, T b) { return a < b ? b : a; }
template <typename T> DACE_HDFI T __dpr_min(T a, T b) { return b < a ? b : a; }
#ifdef __CUDACC__
#define __DPR_BLOCK(op) \\
template <typename T> __device__ inline T __dpr_block_##op(T v) { \\
    __shared__ T part[32]; \\
    for (int o = 16; o > 0; o >>= 1) v = __dpr_##op(v, __shfl_xor_sync(0xffffffffu, v, o)); \\
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); \\
    const int nw = (blockDim.x * blockDim.y * blockDim.z + 31) / 32; \\
    __syncthreads(); \\
    if ((t & 31) == 0) part[t >> 5] = v; \\
    __syncthreads(); \\
    T r = part[0]; \\
    for (int w = 1; w < nw; ++w) r = __dpr_##op(r, part[w]); \\
    return r; \\
}
__DPR_BLOCK(sum)
__DPR_BLOCK(prod)
__DPR_BLOCK(max)
__DPR_BLOCK(min)
#endif
"""


def threads_for(cols, constants=None) -> int:
    """Threads of a row's block: a power of two covering the row, from one warp to :data:`ROW_THREADS`."""
    try:
        c = int(symbolic.evaluate(cols, constants or {}))
    except (TypeError, ValueError):
        return ROW_THREADS
    t = 32
    while t < c and t < ROW_THREADS:
        t *= 2
    return t


def fuse_row_chain(sdfg: SDFG, chain: RowChain) -> SDFGState:
    """Rewrites ``chain`` into its first state: a map over (thread, row) whose tasklet computes every
    stage for its row; the other states are emptied and the arrays only the chain used are removed."""
    em = _Emitter(sdfg, chain)
    body = em.emit()
    threads = threads_for(chain.cols, sdfg.constants)
    first = chain.stages[0].state
    maps = [s for s in chain.stages if s.kind == _Kind.MAP]
    r0 = maps[0].node.map.range.ndrange()[0]
    # the row range of the first map (its own rank's rows), in that state's grid coordinates
    row_begin, row_end = r0[0], r0[1]
    for s in chain.stages:
        st = s.state
        for n in list(st.nodes()):
            st.remove_node(n)
    for name in chain.internal:
        if name in sdfg.arrays:
            sdfg.remove_data(name, validate=False)
    code = _FRAME.format(lane="__dpr_t", threads=threads, row=f"(__dpr_r - ({_c(row_begin)}))",
                         cols=_c(chain.cols), body=body)
    me, mx = first.add_map(f"row_kernel_{first.label}",
                           {"__dpr_t": f"0:{threads}", "__dpr_r": f"{_c(row_begin)}:{_c(row_end)} + 1"})
    me.map.gpu_block_size = [1, threads, 1]
    t = first.add_tasklet(f"row_kernel_{first.label}", set(em.ins.values()), set(em.outs.values()), code,
                          language=dtypes.Language.CPP)
    for name, conn in em.ins.items():
        desc = sdfg.arrays[name]
        rd = first.add_read(name)
        first.add_memlet_path(rd, me, t, dst_conn=conn, memlet=Memlet.from_array(name, desc))
        t.in_connectors[conn] = dtypes.pointer(desc.dtype)
    for name, conn in em.outs.items():
        desc = sdfg.arrays[name]
        wr = first.add_write(name)
        m = Memlet.from_array(name, desc)
        m.dynamic = True
        first.add_memlet_path(t, mx, wr, src_conn=conn, memlet=m)
        t.out_connectors[conn] = dtypes.pointer(desc.dtype)
    if not em.ins:
        first.add_nedge(me, t, Memlet())
    if not em.outs:
        first.add_nedge(t, mx, Memlet())
    return first


def fuse_rows(sdfg: SDFG, states: Sequence[SDFGState], same_ranks: Dict[SDFGState, object]) -> List[str]:
    """Fuses every row chain among ``states``; returns what it did, a line per chain (for the report)."""
    done = []
    for chain in row_chains(sdfg, states, same_ranks):
        text = str(chain)
        fuse_row_chain(sdfg, chain)
        done.append(text)
    if done:
        sdfg.append_global_code(ROW_HELPERS, "cuda")
        sdfg.append_global_code(ROW_HELPERS)
    return done
