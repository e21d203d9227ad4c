"""Loops that hide maps: a loop whose body holds maps with extents that depend on its variable has no
schedulable map of its own; DaCe's ``LoopToMap`` turns it into one where it proves the iterations
independent. Part of discovery, so the names ``maps()`` shows are the names ``lower`` schedules."""
import dace
from dace import nodes
from dace.sdfg import SDFG, SDFGState


def loops_to_maps(sdfg: SDFG):
    """Loops whose body holds maps with extents that depend on the loop variable (triangular loops such
    as ``for i: L[i, :i + 1] *= 2``) have no schedulable map; where DaCe's ``LoopToMap`` proves the
    iterations independent, the loop becomes a map over its variable (named ``<loop body>_map``), which
    can be scheduled. Other loops are left alone, so map names elsewhere do not change. Returns the loop
    variables that were converted."""
    from ..ir.record import notes
    if notes(sdfg).loops_checked:
        return []
    from dace.transformation.interstate import LoopToMap
    from dace.transformation.passes.pattern_matching import match_patterns
    done = []
    for _ in range(100):
        chosen = None
        try:
            for xf in match_patterns(sdfg, [LoopToMap]):
                info = xf.loop_information()
                if not info:
                    continue
                itervar = info[0]
                if _has_dependent_map(xf.loop_body(), itervar):
                    chosen = (xf, itervar)
                    break
            if chosen is None:
                break
            chosen[0].apply_pattern()
        except Exception:  # noqa: BLE001 - DaCe's loop analysis failed: keep the loop as it is
            break
        done.append(chosen[1])
    notes(sdfg).loops_checked = True
    return done


def _has_dependent_map(blocks, itervar: str) -> bool:
    for block in blocks:
        states = [block] if isinstance(block, SDFGState) else list(block.all_states())
        for st in states:
            for n in st.nodes():
                if isinstance(n, nodes.MapEntry):
                    for b, e, _ in n.map.range:
                        if itervar in {str(s) for s in dace.symbolic.pystr_to_symbolic(str(e - b)).free_symbols}:
                            return True
    return False
