"""The automatic schedule's search without waste (NPBench's resnet took a minute to lower at P=4): the
kernels' bodies are priced on numbers, one access over one tile is propagated once for every kernel that
has it, a library node is expanded once per lowering, and none of this changes what is predicted. Counts,
not clocks: each test fails where the waste comes back. Pure Python (no compiler)."""
import copy
import importlib

import dace
import numpy as np
import pytest
import sympy
from dace import nodes

import dace_partition as dp
from dace_partition.analysis import constraints
from dace_partition.analysis.constraints import same_subset
from dace_partition.search.model import ProgramModel, prepare
from dace_partition.solvers.registry import resolve_solvers

N, H, W, C = (dace.symbol(s) for s in "NHWC")
SIZES = dict(N=8, H=6, W=6, C=4)
# the module, which dace_partition.schedule shadows with its function discover()
discover_mod = importlib.import_module("dace_partition.schedule.discover")


@dace.program
def one_norm(x: dace.float32[N, H, W, C]):
    return x - np.mean(x, axis=0)


@dace.program
def two_norms(x: dace.float32[N, H, W, C]):
    y = x - np.mean(x, axis=0)
    return y - np.mean(y, axis=0)


def _sdfg(program):
    sdfg = program.to_sdfg()
    sdfg.specialize(SIZES)  # as NPBench's harness fixes its preset sizes
    return sdfg


def _model(sdfg, ranks):
    work, _, kernels = prepare(sdfg)
    return ProgramModel(work, kernels, ranks, resolve_solvers(None), dp.machine(), "root")


def _count(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _priced(model):
    """Every candidate of every kernel as text: its grid, compute, blocks and the solvers' costs."""
    out = []
    for k in model.kernels:
        for p in model.priced[k.index]:
            sides = sorted((d, a, str(dist), str(cost)) for d, side in (("r", p.reads), ("w", p.writes))
                           for a, (dist, cost) in side.items())
            out.append((k.index, str(p.candidate), p.compute, p.memory, tuple(sides)))
        out.append((k.index, tuple((str(c), r) for c, r in model.refused.get(k.index, []))))
    return out


def test_reduction_bodies_are_priced_on_numbers():
    """A library node's expansion is built from the program's symbolic descriptors; the search fixes the
    sizes inside it too (every tile of a reduction was propagated through ``int_ceil(r*(H + 2), 2)``)."""
    work, _, kernels = prepare(_sdfg(two_norms))
    bodies = [k for k in kernels if k.body is not None]
    assert len(bodies) == 2
    for k in bodies:
        for st in k.body.states():
            for n in st.nodes():
                if isinstance(n, nodes.MapEntry):
                    for b, e, s in n.map.range:
                        assert all(sympy.sympify(x).is_number for x in (b, e, s)), (k.label, n.map.range)
        for name, desc in k.body.arrays.items():
            assert all(sympy.sympify(x).is_number for x in desc.shape), (k.label, name, desc.shape)


def test_the_same_access_in_another_kernel_is_propagated_once(monkeypatch):
    """Each kernel names its grid coordinates after its index; the cache of propagated accesses names
    them by grid dimension, so the second normalization (same shapes, other coordinates) costs no DaCe
    propagation at all."""
    calls = _count(monkeypatch, constraints, "propagate_subset")
    constraints._PROPAGATED.clear()
    _model(_sdfg(one_norm), 4)
    once = len(calls)
    calls.clear()
    constraints._PROPAGATED.clear()
    _model(_sdfg(two_norms), 4)
    assert once > 0
    assert len(calls) <= once + 2, (once, len(calls))  # without the renaming: about twice as many


def test_a_cached_propagation_is_renamed_to_the_kernels_coordinates():
    """A hit from another kernel's propagation uses this kernel's coordinate symbols (a plan that named
    another kernel's coordinates would be evaluated with the wrong rank position)."""
    constraints._PROPAGATED.clear()
    model = _model(_sdfg(two_norms), 4)
    for k in model.kernels:
        for p in model.priced[k.index]:
            for dist, _ in list(p.reads.values()) + list(p.writes.values()):
                for b, e, _ in dist.subset:
                    for f in sympy.sympify(b).free_symbols | sympy.sympify(e).free_symbols:
                        assert not str(f).startswith("__dp") or str(f).startswith(f"__dp{k.index}_"), (k.label, dist)


@pytest.mark.parametrize("ranks", [2, 4])
def test_cached_and_uncached_pricing_agree(ranks):
    """The caches change what is computed, not the result: a model built on warm caches (every
    propagation and expansion a hit) prices every candidate as one built from nothing."""
    sdfg = _sdfg(two_norms)
    constraints._PROPAGATED.clear()
    discover_mod._EXPANSIONS.clear()
    cold = _priced(_model(copy.deepcopy(sdfg), ranks))
    warm = _priced(_model(copy.deepcopy(sdfg), ranks))
    assert cold == warm


@pytest.mark.filterwarnings("ignore:Mismatch between constant and symbol type")
def test_lowering_expands_each_library_node_once(monkeypatch):
    """lower(ranks=P) discovers kernels on several copies (map fusion, the search, the lowering): each
    reduction is expanded by DaCe once, the other discoveries get copies."""
    calls = _count(monkeypatch, discover_mod, "_expand_pure")
    discover_mod._EXPANSIONS.clear()
    sdfg = _sdfg(two_norms)
    sdfg.name = "search_speed_two_norms"
    dp.lower(sdfg, ranks=2)
    assert len(calls) == 2


@dace.program
def scale_add(x: dace.float32[N, H], y: dace.float32[N, H]):
    return 2 * x + y  # two maps over the same range: lower fuses them


@pytest.mark.filterwarnings("ignore:Mismatch between constant and symbol type")
@pytest.mark.parametrize("program, fuses", [(one_norm, False), (scale_add, True)])
def test_lower_discovers_each_form_of_its_copy_once(monkeypatch, program, fuses):
    """lower(ranks=P) prepares its copy once and the search prices those kernels: discovery runs on the
    program as written, after map fusion where maps fused, and after the state split, and never again
    (the search and the lowering each prepared their own copy: seven discoveries)."""
    from dace_partition.passes import local_optimize, partition, prepare
    calls = []
    real = discover_mod.discover

    def counted(sdfg):
        calls.append(sdfg)
        return real(sdfg)

    for module in (local_optimize, partition, prepare):
        monkeypatch.setattr(module, "discover", counted)
    splits = _count(monkeypatch, prepare, "split_kernels")  # what the search would call to prepare its own
    sdfg = _sdfg(program)
    sdfg.name = f"search_speed_{program.name}"
    dp.lower(sdfg, ranks=2)
    assert len(calls) == (3 if fuses else 2)
    assert not splits
    assert ("fused 2 maps" in str(dp.report(sdfg))) == fuses


def test_expansions_of_different_reductions_are_not_shared():
    """The fingerprint holds what the expansion depends on: the same array reduced over other axes is
    another expansion (other maps), never the cached one."""

    @dace.program
    def sums(x: dace.float64[16, 12]):
        return np.sum(x, axis=0), np.sum(x, axis=1)

    discover_mod._EXPANSIONS.clear()
    shapes = sorted(tuple(m.shape) for m in dp.maps(sums.to_sdfg()) if "reduce" in m.name.lower())
    discover_mod._EXPANSIONS.clear()
    again = sorted(tuple(m.shape) for m in dp.maps(sums.to_sdfg()) if "reduce" in m.name.lower())
    assert shapes == again
    assert (12, 16) in shapes or (16, 12) in shapes
    assert len(set(shapes)) > 1


def test_same_subset_decides_without_simplifying_where_it_can():
    r = dace.symbol("__dp3_r0", dace.int32)
    a = dace.subsets.Range([(4 * r, 4 * r + 3, 1), (0, 7, 1)])
    assert same_subset(a, dace.subsets.Range([(4 * r, 4 * r + 3, 1), (0, 7, 1)]))
    assert not same_subset(a, dace.subsets.Range([(4 * r + 1, 4 * r + 3, 1), (0, 7, 1)]))
    # equal only after simplification: still equal
    assert same_subset(dace.subsets.Range([((r + 1) ** 2 - r ** 2 - 1, 5, 1)]), dace.subsets.Range([(2 * r, 5, 1)]))
    # a symbol that may not be 3 (negative) is left to simplify(), which knows |n| + n == 0
    n = sympy.Symbol("n", negative=True, integer=True)
    assert same_subset(dace.subsets.Range([(sympy.Abs(n) + n, 5, 1)]), dace.subsets.Range([(0, 5, 1)]))
