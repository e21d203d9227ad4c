"""Loops of a program's state machine.

Loops that hide maps: a loop whose body holds maps with extents that depend on its variable has no
schedulable map of its own; DaCe's ``LoopToMap`` turns it into one where it proves the iterations
independent. Part of discovery, so the names ``maps()`` shows are the names ``lower`` schedules.

:func:`find_loops` gives the natural loops that remain (the plan's fusion and the loop-carry pass ask
which states a loop holds)."""
import copy
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import dace
import sympy
from dace import nodes
from dace.sdfg import SDFG, SDFGState

from ..compat import all_states, loop_of_match


def loops_to_maps(sdfg: SDFG):
    """Loops whose body holds maps with extents that depend on the loop variable (triangular loops such
    as ``for i: L[i, :i + 1] *= 2``) have no schedulable map; where DaCe's ``LoopToMap`` proves the
    iterations independent, the loop becomes a map over its variable (named ``<loop body>_map``), which
    can be scheduled. Other loops are left alone, so map names elsewhere do not change. Returns the loop
    variables that were converted."""
    from dace.transformation.interstate import LoopToMap
    from dace.transformation.passes.pattern_matching import match_patterns
    done, rejected = [], set()
    _same_loop_symbols(sdfg)
    for _ in range(100):
        chosen = None
        try:
            for nth, xf in enumerate(match_patterns(sdfg, [LoopToMap])):
                loop = loop_of_match(xf)  # 1.0.2: a state-machine loop, DaCe 2: a LoopRegion (compat)
                if loop is None or loop[2] in rejected:
                    continue
                itervar, body, key = loop
                if _has_dependent_map(body, itervar):
                    chosen = (nth, itervar, key)
                    break
            if chosen is None:
                break
            nth, itervar, key = chosen
            # tried on a copy first: DaCe 1.0.2 may leave a transient sized by the loop variable outside
            # the new map (correlation's ``data[:, i:M]``), which no rank could allocate
            trial = copy.deepcopy(sdfg)
            _nth_match(trial, nth).apply_pattern()
            if _leaks(trial, itervar):
                rejected.add(key)
                continue
            _nth_match(sdfg, nth).apply_pattern()
            _refine_bodies(sdfg)
        except Exception:  # noqa: BLE001 - DaCe's loop analysis failed: keep the loop as it is
            break
        done.append(itervar)
    return done


def _nth_match(sdfg: SDFG, nth: int):
    from dace.transformation.interstate import LoopToMap
    from dace.transformation.passes.pattern_matching import match_patterns
    for i, xf in enumerate(match_patterns(sdfg, [LoopToMap])):
        if i == nth:
            return xf
    raise LookupError(nth)


def _leaks(sdfg: SDFG, itervar: str) -> bool:
    """Whether a state outside every map uses an array whose shape names ``itervar`` (undefined there)."""
    for st in all_states(sdfg):
        for n in st.data_nodes():
            if st.entry_node(n) is None and itervar in {str(f) for f in n.desc(sdfg).free_symbols}:
                return True
    return False


def assigned_symbols(region) -> set:
    """The symbols that ``region`` (an SDFG or a control-flow region) assigns: on interstate edges and as
    loop variables, nested regions included."""
    out = {x for e in region.all_interstate_edges() for x in e.data.assignments}
    return out | {r.loop_variable for r in [region, *region.all_control_flow_regions()]
                  if getattr(r, "loop_variable", None)}


def assignment_reads(value) -> Set[str]:
    """The names (symbols and data) an interstate assignment's value reads, as DaCe parses it."""
    return {str(s) for s in dace.InterstateEdge(assignments={"__x": str(value)}).read_symbols()}


def assigned_from(assignments: Iterable[Dict[str, str]], names: Iterable[str]) -> Set[str]:
    """``names`` and every name they are assigned from through ``assignments`` (interstate edges'), transitively:
    ``n = num[0]`` reaches ``num``; a loop's ``i = i + 1`` reaches only ``i``."""
    graph: Dict[str, Set[str]] = {}
    for a in assignments:
        for k, v in a.items():
            graph.setdefault(k, set()).update(assignment_reads(v))
    reached = set(names)
    todo = list(reached)
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in reached:
                reached.add(m)
                todo.append(m)
    return reached


def _same_loop_symbols(sdfg: SDFG):
    """Memlets name a loop's variable by the symbol ``LoopToMap`` parses from the loop's own edges.

    DaCe 1.0.2's Python frontend writes loop variables into memlets as symbols with other SymPy
    assumptions than the ones parsed from the loop condition; SymPy holds them unequal, so ``LoopToMap``
    cannot see that ``C[i, 0:i + 1]`` depends on ``i`` and keeps every triangular loop (syrk, syr2k,
    trmm). Same name, same symbol: only the assumptions change, never the values."""
    names = assigned_symbols(sdfg)
    if not names:
        return
    for st in all_states(sdfg):
        for e in st.edges():
            m = e.data
            for sub in (m.subset, m.other_subset):
                if sub is None:
                    continue
                exprs = [x for r in getattr(sub, "ranges", ()) for x in r] + list(getattr(sub, "indices", ()))
                found = {f for x in exprs for f in getattr(x, "free_symbols", ()) if str(f) in names}
                repl = {f: dace.symbolic.pystr_to_symbolic(str(f)) for f in found}
                repl = {a: b for a, b in repl.items() if a != b}
                if repl:
                    sub.replace(repl)


def _refine_bodies(sdfg: SDFG):
    """``LoopToMap`` passes the loop body (a nested SDFG) a bounding box of what it touches that DaCe's
    propagation widens (``C[0:i + 1, 0:i + 1]`` where the body only touches row ``C[i, 0:i + 1]``); the
    analysis would then give every rank all rows before its block. DaCe's ``RefineNestedAccess`` narrows
    the memlets to the indices every access of the body agrees on (and re-bases the body on them)."""
    from ..compat import propagate_memlets_state
    from dace.transformation.interstate import RefineNestedAccess
    for st in sdfg.states():
        for n in st.nodes():
            if not isinstance(n, nodes.NestedSDFG) or st.entry_node(n) is None:
                continue
            # specialized sizes in a propagated volume (``M * (i + 1)``) count as defined in the body
            added = [c for c in sdfg.constants if c not in n.symbol_mapping]
            for c in added:
                n.symbol_mapping[c] = dace.symbolic.pystr_to_symbolic(c)
            try:
                xf = RefineNestedAccess()
                xf.setup_match(sdfg, sdfg.cfg_id, sdfg.node_id(st), {RefineNestedAccess.nsdfg: st.node_id(n)}, 0)
                if xf.can_be_applied(st, 0, sdfg):
                    ins, outs = RefineNestedAccess._candidates(st, n)
                    xf.apply(st, sdfg)
                    _narrow(n.sdfg, {**ins, **outs})
            finally:
                for c in added:
                    n.symbol_mapping.pop(c, None)
            propagate_memlets_state(sdfg, st)


def _narrow(body: SDFG, refined):
    """The body's descriptor of each refined argument gets the refined extent along the refined
    dimensions (its strides stay the outer array's): its indices are now relative to the outer memlet,
    and a descriptor of the whole array's shape would read as global indices."""
    for name, (memlet, dims) in refined.items():
        desc = body.arrays.get(name)
        if desc is None or not isinstance(desc, dace.data.Array):
            continue
        size = memlet.subset.size()
        shape = [size[d] if d in dims else x for d, x in enumerate(desc.shape)]
        desc.set_shape(shape, strides=list(desc.strides), total_size=desc.total_size, offset=list(desc.offset))


def _has_dependent_map(blocks, itervar: str) -> bool:
    for block in blocks:
        states = [block] if isinstance(block, SDFGState) else all_states(block)
        for st in states:
            for n in st.nodes():
                if isinstance(n, nodes.MapEntry):
                    for b, e, _ in n.map.range:
                        if itervar in {str(s) for s in dace.symbolic.pystr_to_symbolic(str(e - b)).free_symbols}:
                            return True
    return False


@dataclass(frozen=True)
class Loop:
    """A natural loop of the top-level state machine."""
    head: SDFGState  # the guard: its out-edges decide whether to iterate
    body: FrozenSet[SDFGState]  # every state of the loop, the guard included
    entries: Tuple[object, ...]  # edges into the guard from outside
    exits: Tuple[object, ...]  # edges from the loop to outside

    def for_range(self, sdfg: SDFG) -> Optional[Tuple[str, tuple]]:
        """``(variable, (start, end, step))`` of a for loop DaCe recognises (``end`` inclusive), else None."""
        from dace.transformation.interstate.loop_detection import find_for_loop
        for e in sdfg.out_edges(self.head):
            if e.dst not in self.body:
                continue
            try:
                found = find_for_loop(sdfg, self.head, e.dst)
            except Exception:  # noqa: BLE001 - not a for loop DaCe recognises
                found = None
            if found:
                return str(found[0]), found[1]
        return None

    def trips(self, sdfg: SDFG):
        """Iterations per execution of the loop (an int or a formula in the program's symbols), None when
        they depend on data."""
        found = self.for_range(sdfg)
        if found is None:
            return None
        _, (start, end, step) = found
        n = sympy.floor((sympy.sympify(end) - start) / step) + 1
        n = dace.symbolic.simplify(sympy.Max(n, 0))
        return int(n) if not getattr(n, "free_symbols", None) else n


def find_loops(sdfg: SDFG) -> List[Loop]:
    """Natural loops of the SDFG's own states (back edges found by depth-first search), innermost first."""
    if any(not isinstance(b, SDFGState) for b in sdfg.nodes()):
        return []  # control-flow regions: not handled here (their round trips stay)
    start = sdfg.start_block
    seen, on_stack, back = set(), set(), []
    stack = [(start, iter(sdfg.out_edges(start)))]
    seen.add(start)
    on_stack.add(start)
    while stack:
        node, it = stack[-1]
        e = next(it, None)
        if e is None:
            stack.pop()
            on_stack.discard(node)
            continue
        if e.dst in on_stack:
            back.append(e)
        elif e.dst not in seen:
            seen.add(e.dst)
            on_stack.add(e.dst)
            stack.append((e.dst, iter(sdfg.out_edges(e.dst))))
    loops: Dict[SDFGState, set] = {}
    for e in back:
        head, body = e.dst, {e.dst}
        work = [e.src]
        while work:
            n = work.pop()
            if n in body:
                continue
            body.add(n)
            work += [x.src for x in sdfg.in_edges(n)]
        loops.setdefault(head, set()).update(body)
    out = []
    for head, body in loops.items():
        entries = tuple(e for e in sdfg.in_edges(head) if e.src not in body)
        exits = tuple(e for s in body for e in sdfg.out_edges(s) if e.dst not in body)
        out.append(Loop(head, frozenset(body), entries, exits))
    return sorted(out, key=lambda lp: len(lp.body))


def loops_are_regions(sdfg: SDFG) -> bool:
    """Whether ``sdfg``'s loops are DaCe 2's loop regions (1.0.2: loops of states)."""
    return any(getattr(r, "loop_variable", None) for r in sdfg.all_control_flow_regions())


def for_loops(sdfg: SDFG):
    """``(variable, contains(state), (start, end inclusive, step))`` of each for-loop of ``sdfg``'s own
    control flow: DaCe 2's loop regions, DaCe 1.0.2's loops of states that it recognises."""
    if loops_are_regions(sdfg):
        from dace.transformation.passes.analysis import loop_analysis as la
        for r in sdfg.all_control_flow_regions():
            if not getattr(r, "loop_variable", None):
                continue
            start, end, step = la.get_init_assignment(r), la.get_loop_end(r), la.get_loop_stride(r)
            if start is None or end is None or step is None:
                continue
            states = set(all_states(r))
            yield r.loop_variable, states.__contains__, (start, end, step)
        return
    for lp in find_loops(sdfg):
        found = lp.for_range(sdfg)
        if found is not None:
            yield found[0], lp.body.__contains__, found[1]
