"""Halo reads: every read of an array by one kernel, through any number of
connectors or access nodes, becomes ONE scatter into ONE rank-local buffer holding the block plus its
halo (the bounding box of the propagated reads), and the kernel's memlets are re-based onto it.

The structural tests lower without compiling and inspect the DistributedMemlet nodes; the end-to-end
tests run under mpiexec, compare every element with NumPy and check the report's bytes against the
PMPI-counted bytes (``run_counted``).
"""
import itertools

import dace
import numpy as np
import pytest
import sympy

import dace_partition as dp
from dace_partition.analysis.constraints import bounding_box
from dace_partition.ir import MoveKind
from dace_partition.passes.graph import distributed_memlets

from conftest import run_counted

N = dace.symbol("N")


def stencil1d_of(n):
    """B[i] = A[i-1] + A[i] + A[i+1] as one map with explicit indices, for a size ``n`` (symbol or int)."""

    @dace.program
    def stencil1d(A: dace.int64[n], B: dace.int64[n]):
        for i in dace.map[1:n - 1]:
            B[i] = A[i - 1] + A[i] + A[i + 1]

    return stencil1d


def jacobi5_of(n):
    @dace.program
    def jacobi5(A: dace.float64[n, n], B: dace.float64[n, n]):
        for i, j in dace.map[1:n - 1, 1:n - 1]:
            B[i, j] = 0.2 * (A[i, j] + A[i - 1, j] + A[i + 1, j] + A[i, j - 1] + A[i, j + 1])

    return jacobi5


stencil1d = stencil1d_of(N)
jacobi5 = jacobi5_of(N)


@dace.program
def star7(A: dace.float64[N, N, N], B: dace.float64[N, N, N]):
    for i, j, k in dace.map[1:N - 1, 1:N - 1, 1:N - 1]:
        B[i, j, k] = (A[i, j, k] + A[i - 1, j, k] + A[i + 1, j, k] + A[i, j - 1, k] + A[i, j + 1, k] +
                      A[i, j, k - 1] + A[i, j, k + 1])


def interior_update_of(n):
    @dace.program
    def interior_update(A: dace.int64[n]):
        """Writes the interior A[1:n-1] and reads A whole (A[0], A[n-1] on every rank)."""
        for i in dace.map[1:n - 1]:
            A[i] = 3 * A[i] + A[0] - A[n - 1]

    return interior_update


def masked_interior_update_of(n):
    @dace.program
    def masked_interior_update(A: dace.int64[n]):
        """As ``interior_update``, but only where A[i] > 0: the other elements keep their prior values, so
        the written block's buffer is filled from rank 0 as well (a dynamic write)."""
        for i in dace.map[1:n - 1]:
            if A[i] > 0:
                A[i] = 3 * A[i] + A[0] - A[n - 1]

    return masked_interior_update


STAR5 = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]
BOX9 = list(itertools.product((-1, 0, 1), repeat=2))
LINE3 = [(-1, ), (0, ), (1, )]


def fused_stencil(name, offsets, n=N):
    """One map whose reads of A arrive through one access node and connector per offset, as DaCe's
    MapFusion leaves them: B[p] = sum over offsets o of (index of o + 1) * A[p + o]."""
    ndim = len(offsets[0])
    sdfg = dace.SDFG(name)
    sdfg.add_array("A", [n] * ndim, dace.float64)
    sdfg.add_array("B", [n] * ndim, dace.float64)
    st = sdfg.add_state()
    params = [f"i{d}" for d in range(ndim)]
    me, mx = st.add_map("fused", {p: f"1:{n}-1" for p in params})
    ins = {f"a{k}" for k in range(len(offsets))}
    code = "b = " + " + ".join(f"{k + 1} * a{k}" for k in range(len(offsets)))
    t = st.add_tasklet("sum", ins, {"b"}, code)
    for k, off in enumerate(offsets):
        idx = ", ".join(f"{p} + ({o})" for p, o in zip(params, off))
        st.add_memlet_path(st.add_read("A"), me, t, dst_conn=f"a{k}", memlet=dace.Memlet(f"A[{idx}]"))
    st.add_memlet_path(t, mx, st.add_write("B"), src_conn="b", memlet=dace.Memlet(f"B[{', '.join(params)}]"))
    sdfg.validate()
    return sdfg


def fused_reference(a, offsets):
    ndim = a.ndim
    interior = tuple(slice(1, s - 1) for s in a.shape)
    out = np.zeros_like(a)
    for k, off in enumerate(offsets):
        out[interior] += (k + 1) * a[tuple(slice(1 + o, s - 1 + o) for o, s in zip(off, a.shape))]
    assert out.ndim == ndim
    return out[interior]


def moves(sdfg, array, kind):
    return [dm.move() for _, dm in distributed_memlets(sdfg) if dm.array == array and dm.move().kind == kind]


def tile(extent, g, r):
    """Balanced tiles, the first the largest (the rule the package documents), written independently."""
    start = -(-r * extent // g)
    return start, -(-(r + 1) * extent // g) - start


def expected_blocks(n, grid, lo, hi, begin=1):
    """Per rank (row-major), the block of a map over [begin, n - begin) per dimension, tiled on ``grid``,
    widened by ``lo`` below and ``hi`` above and clipped to [0, n)."""
    out = []
    for coords in itertools.product(*[range(g) for g in grid]):
        start, count = [], []
        for d, (g, r) in enumerate(zip(grid, coords)):
            s, c = tile(n - 2 * begin, g, r)
            b, e = max(0, begin + s - lo[d]), min(n, begin + s + c + hi[d])
            start.append(b)
            count.append(e - b)
        out.append((tuple(start), tuple(count)))
    return out


def evaluate(shape, n):
    return tuple(int(sympy.sympify(x).subs({f: n for f in sympy.sympify(x).free_symbols if str(f) == "N"}))
                 for x in shape)


def lower(sdfg, grid, n=None):
    if n is not None:
        sdfg.specialize({"N": n})
    (m, ) = dp.maps(sdfg)
    dp.lower(sdfg, {m.name: grid})
    return sdfg


# -- structure, without a compiler ---------------------------------------------------------------------


@pytest.mark.parametrize("build,grid,ndim", [
    (lambda: stencil1d.to_sdfg(), (2, ), 1),
    (lambda: fused_stencil("f3", LINE3), (3, ), 1),
    (lambda: jacobi5.to_sdfg(), (2, 1), 2),
    (lambda: jacobi5.to_sdfg(), (2, 2), 2),
    (lambda: fused_stencil("f5", STAR5), (2, 2), 2),
    (lambda: fused_stencil("f9", BOX9), (2, 2), 2),
    (lambda: star7.to_sdfg(), (2, 1, 2), 3),
])
def test_one_scatter_per_array_block_plus_halo(build, grid, ndim):
    n = 11  # uneven: the interior 9 does not divide by 2
    sdfg = lower(build(), grid, n)
    (scatter, ) = moves(sdfg, "A", MoveKind.SCATTER)
    assert scatter.dst.blocks() == expected_blocks(n, grid, [1] * ndim, [1] * ndim)
    (gather, ) = moves(sdfg, "B", MoveKind.GATHER)
    assert gather.src.blocks() == expected_blocks(n, grid, [0] * ndim, [0] * ndim)
    entries = [e for k in dp.report(sdfg).kernels for e in k.comm]
    assert sum(1 for e in entries if "scatter" in str(e) and " A[" in str(e)) == 1, dp.report(sdfg)
    # One buffer of A holds block + halo: rank 0's block is the largest.
    local = [name for name in sdfg.arrays if name.startswith("__dp") and name.endswith("_A")]
    assert len(local) == 1
    assert evaluate(sdfg.arrays[local[0]].shape, n) == scatter.dst.blocks()[0][1]


def test_bounding_box_compares_bounds_at_every_grid_position():
    """DaCe's union assumes symbols are large and would keep int_ceil(9 r + 9, 2) over 10 as the end of
    A[i] and A[10]; the grid coordinate r is 0 or 1 here, so 10 is the end for every rank."""
    r = dace.symbolic.symbol("__dp9_r0", dace.int32)
    tile = dace.subsets.Range([(dace.symbolic.int_ceil(9 * r, 2) + 1, dace.symbolic.int_ceil(9 * r + 9, 2), 1)])
    ends = [dace.subsets.Range([(x, x, 1)]) for x in (0, 10)]
    (box, ) = bounding_box([tile] + ends, {"__dp9_r0": 2})
    assert (box[0], box[1]) == (0, 10)
    # With a symbol that is not a grid coordinate, the bound stays a Max, evaluated per rank.
    (box, ) = bounding_box([tile, dace.subsets.Range([(N - 1, N - 1, 1)])], {"__dp9_r0": 2})
    for rv in (0, 1):
        assert int(sympy.sympify(box[1]).subs({r: rv, N: 11})) == 10
        assert int(sympy.sympify(box[1]).subs({r: rv, N: 30})) == 29


def test_memlets_rebased_onto_the_halo_buffer():
    """Each read A[i + o] becomes local[i + o - start], start = the first index of the halo block."""
    sdfg = lower(fused_stencil("f3r", LINE3), (2, ), 11)
    (st, ) = [s for s in sdfg.states() if any(isinstance(n, dace.nodes.MapEntry) for n in s.nodes())]
    (entry, ) = [n for n in st.nodes() if isinstance(n, dace.nodes.MapEntry)]
    begin = entry.map.range[0][0]  # first i of this rank's tile
    local = {e.data.data for e in st.in_edges(entry)}
    assert len(local) == 1 and local.pop().startswith("__dp")
    first = {sympy.Symbol(entry.map.params[0]): begin, dace.symbolic.symbol(entry.map.params[0]): begin}
    got = sorted(dace.symbolic.simplify(sympy.sympify(e.data.subset[0][0]).subs(first)) for e in st.out_edges(entry))
    assert got == [0, 1, 2]  # at the tile's first i: A[i-1], A[i], A[i+1] are elements 0, 1, 2 of the buffer


def test_symbolic_size_halo_subset():
    sdfg = lower(stencil1d.to_sdfg(), (2, ))
    (scatter, ) = moves(sdfg, "A", MoveKind.SCATTER)
    assert scatter.dst.blocks() is None  # known when the program starts
    for n in (5, 11, 12, 40):
        sub = {N: n}
        blocks = []
        for r in range(2):
            coord = {dace.symbolic.symbol(c, dace.int32): r for c in scatter.dst.coords if c}
            b, e, _ = scatter.dst.subset[0]
            b = int(b.subs(sub).subs(coord))
            blocks.append(((b, ), (int(e.subs(sub).subs(coord)) - b + 1, )))
        assert blocks == expected_blocks(n, (2, ), [1], [1])


def test_write_of_interior_reading_whole_array_keeps_separate_buffers():
    sdfg = lower(interior_update_of(11).to_sdfg(), (2, ))
    (scatter, ) = moves(sdfg, "A", MoveKind.SCATTER)
    (gather, ) = moves(sdfg, "A", MoveKind.GATHER)
    assert scatter.dst.blocks() == [((0, ), (11, )), ((0, ), (11, ))]  # A[0] and A[N-1]: the whole array
    assert gather.src.blocks() == [((1, ), (5, )), ((6, ), (4, ))]
    assert {"__dp0_A_in", "__dp0_A_out"} <= set(sdfg.arrays)


def test_prior_values_of_a_dynamic_write_fill_the_written_block_buffer():
    """The read (whole array) and the prior values of the written block go to different buffers: the
    reads' buffer is not the one gathered back."""
    sdfg = lower(masked_interior_update_of(11).to_sdfg(), (2, ))
    st = next(s for s, dm in distributed_memlets(sdfg) if dm.array == "A" and dm.move().kind == MoveKind.SCATTER)
    into = {}
    for _, dm in distributed_memlets(sdfg):
        if dm.array == "A" and dm.move().kind == MoveKind.SCATTER:
            into[st.out_edges(dm)[0].dst.data] = dm.move().dst.blocks()
    assert into == {"__dp0_A_in": [((0, ), (11, ))] * 2, "__dp0_A_out": [((1, ), (5, )), ((6, ), (4, ))]}


def test_two_blocks_of_one_array_in_a_library_node_are_refused_in_words():
    @dace.program
    def square(A: dace.float64[8, 8]):
        return A @ A

    sdfg = square.to_sdfg()
    with pytest.raises(dp.UnsupportedPattern, match=r"'A'.*two connectors with different blocks"):
        dp.lower(sdfg, {"_MatMult_.gemm_map": (2, 1, 1)})


# -- end to end under mpiexec -------------------------------------------------------------------------


def test_stencil1d_one_map_uneven_counted(rng):
    """Sizes fixed by ``sdfg.specialize`` (so the report has byte figures) and a program that still runs."""
    n = 11
    sdfg = lower(stencil1d.to_sdfg(), (2, ), n=n)
    sdfg.name = "t_halo_stencil1d_n11"
    assert dp.report(sdfg).bytes_per_rank() is not None
    a = rng.integers(-1000, 1000, n).astype(np.int64)
    b = rng.integers(-1000, 1000, n).astype(np.int64)
    ref = b.copy()
    ref[1:-1] = a[:-2] + a[1:-1] + a[2:]
    res = run_counted(sdfg, 2, A=a, B=b)
    np.testing.assert_array_equal(res["B"], ref)


def test_jacobi5_rows_split_counted(rng):
    n = 10
    sdfg = lower(jacobi5_of(n).to_sdfg(), (2, 1))
    sdfg.name = "t_halo_jacobi5_2x1"
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    ref = b.copy()
    ref[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    res = run_counted(sdfg, 2, A=a, B=b)
    np.testing.assert_allclose(res["B"], ref, rtol=1e-14, atol=1e-14)


def test_fused_box9_on_2x2_counted(rng):
    """Nine access nodes of A (MapFusion's shape): one scatter, uneven 2x2 tiles, every element checked."""
    n = 11
    sdfg = lower(fused_stencil("t_halo_box9_2x2", BOX9, n), (2, 2))
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    ref = b.copy()
    ref[1:-1, 1:-1] = fused_reference(a, BOX9)
    res = run_counted(sdfg, 4, A=a, B=b)
    np.testing.assert_allclose(res["B"], ref, rtol=1e-13, atol=1e-13)


def test_fused_symbolic_size_and_interior_update_run(rng):
    """Symbolic N (one build, N=11 and N=6 on 2 ranks), and a kernel writing part of the interior of the
    array it reads whole (the other elements keep their values)."""
    sdfg = lower(fused_stencil("t_halo_line3_sym", LINE3), (2, ))
    for n in (11, 6):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        ref = b.copy()
        ref[1:-1] = fused_reference(a, LINE3)
        res = dp.run(sdfg, 2, A=a, B=b, N=n)
        np.testing.assert_allclose(res["B"], ref, rtol=1e-14, atol=1e-14)
    sdfg = lower(masked_interior_update_of(11).to_sdfg(), (2, ))
    sdfg.name = "t_halo_masked_interior_update"
    a = rng.integers(-1000, 1000, 11).astype(np.int64)
    ref = a.copy()
    ref[1:-1] = np.where(a[1:-1] > 0, 3 * a[1:-1] + a[0] - a[-1], a[1:-1])
    assert (a[1:-1] > 0).any() and (a[1:-1] <= 0).any()
    res = run_counted(sdfg, 2, A=a)
    np.testing.assert_array_equal(res["A"] if isinstance(res, dict) else res, ref)


@dace.program
def interior_update_beside_A_in(A: dace.int64[11], A_in: dace.int64[11]):
    for i in dace.map[1:10]:
        A[i] = 3 * A[i] + A[0] - A[10] + A_in[i]


def test_an_array_named_like_another_arrays_buffer_keeps_a_buffer_of_its_own(rng):
    """``A`` is read whole and written in its interior: its buffers are ``__dp0_A_in`` and ``__dp0_A_out``.
    An argument called ``A_in`` read by the same kernel would take the first of those names (and then the
    same rank-local array, so ``A_in`` scattered over ``A``'s values): it gets a name of its own, and the
    result on 2 ranks is NumPy's."""
    sdfg = lower(interior_update_beside_A_in.to_sdfg(), (2, ))
    assert {"__dp0_A_in", "__dp0_A_out", "__dp0_A_in_"} <= set(sdfg.arrays)
    a, a_in = rng.integers(-1000, 1000, 11), rng.integers(-1000, 1000, 11)
    ref = a.copy()
    ref[1:-1] = 3 * a[1:-1] + a[0] - a[-1] + a_in[1:-1]
    res = dp.run(sdfg, 2, A=a, A_in=a_in)
    np.testing.assert_array_equal(res["A"], ref)


def test_halo_read_of_the_previous_kernels_output_counted(rng):
    """A second kernel reads B, which the first wrote in blocks, with a halo (other blocks, other grid
    tiles): one scatter of B for it, every element checked, bytes counted."""
    n = 12

    @dace.program
    def twice(A: dace.float64[n], B: dace.float64[n], C: dace.float64[n]):
        for i in dace.map[1:n - 1]:
            B[i] = A[i - 1] + 2 * A[i] + A[i + 1]
        for i in dace.map[2:n - 2]:
            C[i] = B[i - 1] - B[i + 1]

    sdfg = twice.to_sdfg()
    sdfg.name = "t_halo_twice"
    dp.lower(sdfg, {m.name: (2, ) for m in dp.maps(sdfg)})
    (scatter, ) = moves(sdfg, "B", MoveKind.SCATTER)
    assert scatter.dst.blocks() == [((1, ), (6, )), ((5, ), (6, ))]
    a, b, c = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)
    rb, rc = b.copy(), c.copy()
    rb[1:-1] = a[:-2] + 2 * a[1:-1] + a[2:]
    rc[2:-2] = rb[1:-3] - rb[3:-1]
    res = run_counted(sdfg, 2, A=a, B=b, C=c)
    np.testing.assert_allclose(res["B"], rb, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(res["C"], rc, rtol=1e-14, atol=1e-14)
