"""Entry points: :func:`synthesize` and :func:`naive_plan`."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .factor_mesh import Assignment, FactorMesh
from .lower import Lowering, build_steps, naive_ops
from .plan import Plan
from .search import WeakSearch
from .types import Collective, Layout, Mesh, local_shape, normalize_layout, normalize_shape, parse_type, prime_factors


def _prepare(mesh, shape, src, dst, itemsize) -> Tuple[Mesh, Tuple[int, ...], Layout, Layout]:
    mesh = Mesh(mesh)
    if isinstance(itemsize, bool) or not isinstance(itemsize, (int, np.integer)) or itemsize < 1:
        raise ValueError(f"itemsize must be a positive integer, got {itemsize!r}")
    shapes = {}
    if isinstance(src, str):
        shapes["src"], src = parse_type(src, mesh.axes)
    if isinstance(dst, str):
        shapes["dst"], dst = parse_type(dst, mesh.axes)
    if shape is not None:
        shapes["shape"] = normalize_shape(shape)
    if not shapes:
        raise ValueError("the global shape is needed (pass shape= or layouts in the paper's notation)")
    distinct = set(shapes.values())
    if len(distinct) > 1:
        raise ValueError("source and target describe different global shapes: "
                         + ", ".join(f"{k}={v}" for k, v in shapes.items()))
    shape = normalize_shape(distinct.pop())
    src = normalize_layout(src, mesh, shape, "source layout")
    dst = normalize_layout(dst, mesh, shape, "target layout")
    return mesh, shape, src, dst


def synthesize(mesh: Mapping[str, int], shape: Optional[Sequence[int]] = None,
               src: Union[str, Sequence] = (), dst: Union[str, Sequence] = (), itemsize: int = 4,
               *, budget: int = 64, alternatives: int = 8) -> Plan:
    """Synthesize a memory-bounded, near-optimal redistribution ``src -> dst``.

    ``mesh`` is an ordered ``{axis: size}``; ``src``/``dst`` give per dimension
    the mesh axes partitioning it, major-to-minor (``PartitionSpec`` order), or
    are strings in the paper's notation.  The plan never holds more than
    ``max(src tile, dst tile)`` elements per device, uses dynslice, alltoall,
    allgather and at most one allpermute (placed before the final
    allgathers), and minimises bytes sent per device over all such sequences
    up to that permutation.  An alltoall may move several axis groups between
    disjoint pairs of dimensions in one collective (costing one tile, as XLA's
    all-to-all does); a permutation is charged only for the devices whose tile
    changes owner (``Plan.bytes_per_device``; ``Plan.cost`` keeps Fig. 11).  ``budget`` bounds how many lowerings are tried
    while looking for one that needs no permutation.  When the best lowering
    still needs the permutation, up to ``alternatives`` other paths of the same
    weak cost are lowered too and the cheapest concrete plan is kept.
    """
    mesh, shape, src, dst = _prepare(mesh, shape, src, dst, itemsize)
    fm = FactorMesh(mesh)
    src_spec, dst_spec = fm.spec_of(src), fm.spec_of(dst)
    start = Assignment(fm, shape, src_spec, np.arange(fm.ndev))
    src_local = local_shape(shape, src, mesh)
    dst_local = local_shape(shape, dst, mesh)
    bound = max(int(np.prod(src_local)), int(np.prod(dst_local)))
    primes = [p for s in mesh.shape for p in prime_factors(s)]
    search = WeakSearch(shape, primes, bound)
    weak_cost, path = search.shortest(src_local, dst_local)
    lowering = Lowering(fm, shape, dst_spec, budget=budget)
    steps = build_steps(start, lowering.lower(start, path), int(itemsize))
    best = (_score(steps), steps)
    if any(s.op == Collective.ALLPERMUTE for s in steps):
        # The weak search cannot see the final permutation: lower other paths of
        # the same weak cost and keep the cheapest concrete plan.
        quick = Lowering(fm, shape, dst_spec, budget=max(1, budget // 4))
        for alt in search.shortest_paths(src_local, dst_local, limit=alternatives)[:alternatives]:
            if alt == path:
                continue
            alt_steps = build_steps(start, quick.lower(start, alt), int(itemsize))
            score = _score(alt_steps)
            if score < best[0]:
                best = (score, alt_steps)
                if not any(s.op == Collective.ALLPERMUTE for s in alt_steps):
                    break
    return Plan(mesh, shape, src, dst, int(itemsize), best[1], start, bound)


def _score(steps) -> Tuple[int, int, int]:
    """Bytes actually sent (permutations: moving devices only), then permutations, then steps."""
    return (sum(s.sent_elements for s in steps), sum(s.op == Collective.ALLPERMUTE for s in steps), len(steps))


def naive_plan(mesh: Mapping[str, int], shape: Optional[Sequence[int]] = None,
               src: Union[str, Sequence] = (), dst: Union[str, Sequence] = (), itemsize: int = 4) -> Plan:
    """The baseline of eq. (2): allgather every partitioned dimension, then dynslice the target.

    It is correct but its peak tile is the whole array; it is what the
    synthesizer is measured against.
    """
    mesh, shape, src, dst = _prepare(mesh, shape, src, dst, itemsize)
    fm = FactorMesh(mesh)
    src_spec, dst_spec = fm.spec_of(src), fm.spec_of(dst)
    start = Assignment(fm, shape, src_spec, np.arange(fm.ndev))
    steps = build_steps(start, naive_ops(src_spec, dst_spec), int(itemsize))
    bound = max(start.localsize, int(np.prod(local_shape(shape, dst, mesh))))
    return Plan(mesh, shape, src, dst, int(itemsize), steps, start, bound)
