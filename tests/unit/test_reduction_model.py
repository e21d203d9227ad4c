"""P^2 model: hierarchies, parallelism matrices (sec. 3.1), reduction groups, grid placements."""
import pytest

from dace_partition.solvers.reduction import (Level, ParallelismMatrix, Placement, SystemHierarchy,
                                              enumerate_matrices, placement_from_grid)


def H(n, c):
    return SystemHierarchy.of(("node", n), ("core", c))


def test_hierarchy_basics():
    h = SystemHierarchy.of([("node", 4), ("core", 8)])
    assert h.sizes == (4, 8) and h.names == ("node", "core") and h.num_devices == 32
    assert h.coords(13) == (1, 5)
    assert SystemHierarchy.parse("2x4") == H(2, 4)
    assert SystemHierarchy.parse("2x2x2").sizes == (2, 2, 2)
    assert hash(h) == hash(SystemHierarchy.of(("node", 4), ("core", 8)))
    assert "node:4" in str(h)
    with pytest.raises(ValueError):
        Level("x", 0)
    with pytest.raises(ValueError):
        SystemHierarchy.of(("a", 2), ("a", 2))


def test_matrix_validity_rules():
    h = SystemHierarchy.of(("rack", 1), ("server", 2), ("cpu", 2), ("gpu", 4))
    ParallelismMatrix(((1, 2, 2, 1), (1, 1, 1, 4))).validate(h, (4, 4))  # Figure 2b
    with pytest.raises(ValueError, match="eq. 2"):
        ParallelismMatrix(((1, 2, 2, 2), (1, 1, 1, 2))).validate(h, (4, 4))
    with pytest.raises(ValueError, match="eq. 1"):
        ParallelismMatrix(((1, 2, 1, 2), (1, 2, 1, 2))).validate(h, (4, 4))  # rows fine, columns not
    with pytest.raises(ValueError):
        Placement(H(2, 16), (8, 4), ((1, 8), (2, 1)), (0,))


def test_enumerate_matrices_counts():
    # the matrices behind the paper's tables: [4 16] on 4x16 has three, [16 2 2] four
    ms = list(enumerate_matrices(H(4, 16), (4, 16)))
    assert [m.rows for m in ms] == [((1, 4), (4, 4)), ((2, 2), (2, 8)), ((4, 1), (1, 16))]
    assert len(list(enumerate_matrices(H(4, 16), (16, 2, 2)))) == 4
    assert len(list(enumerate_matrices(H(4, 16), (8, 2, 4)))) == 5
    for m in enumerate_matrices(H(4, 16), (8, 2, 4)):
        m.validate(H(4, 16), (8, 2, 4))
    assert list(enumerate_matrices(H(4, 16), (3, 5))) == []


def test_synthesis_hierarchy_collapses_levels():
    # Table 1 second half: reduction axes' factors of one hardware level are multiplied
    p = Placement(H(4, 16), (16, 2, 2), ((2, 8), (2, 1), (1, 2)), (0, 2))
    assert p.level_factors == (2, 16) and p.synthesis_sizes == (2, 16) and p.group_size == 32
    q = Placement(H(2, 16), (8, 4), ((1, 8), (2, 2)), (0,))
    assert q.synthesis_sizes == (8,) and q.synthesis_levels == (1,)


def test_groups_partition_devices_and_differ_only_on_reduction_axes():
    h = H(4, 8)
    for m in enumerate_matrices(h, (8, 2, 2)):
        p = Placement(h, (8, 2, 2), m, (0, 2))
        groups = p.groups()
        assert sorted(d for g in groups for d in g) == list(range(32))
        assert all(len(g) == 16 for g in groups)  # axes 0 and 2: 8 * 2
        for g in groups:
            keys = {p.device_coords(d)[0] for d in g}
            assert len(keys) == 1
            assert [p.device_coords(d)[1] for d in g] == list(range(16))


def test_groups_follow_the_placement():
    h = H(2, 4)
    # reduction axis entirely inside nodes: groups are the nodes
    p = Placement(h, (4, 2), ((1, 4), (2, 1)), (0,))
    assert p.groups() == ((0, 1, 2, 3), (4, 5, 6, 7))
    # reduction axis across nodes only: pairs of the same core
    p = Placement(h, (2, 4), ((2, 1), (1, 4)), (0,))
    assert p.groups() == ((0, 4), (1, 5), (2, 6), (3, 7))
    # mixed: axis 0 = 2 nodes x 2 cores (outer inside the node), axis 1 = 2 cores
    p = Placement(h, (4, 2), ((2, 2), (1, 2)), (0,))
    assert p.groups() == ((0, 2, 4, 6), (1, 3, 5, 7))


def test_placement_from_grid():
    h = H(2, 4)
    p = placement_from_grid(h, (2, 4), (1,))
    assert p.matrix.rows == ((2, 1), (1, 4)) and p.groups() == ((0, 1, 2, 3), (4, 5, 6, 7))
    p = placement_from_grid(h, (4, 2), (0,))
    assert p.matrix.rows == ((2, 2), (1, 2)) and p.groups() == ((0, 2, 4, 6), (1, 3, 5, 7))
    p = placement_from_grid(h, (8,), (0,))
    assert p.matrix.rows == ((2, 4),) and p.groups() == (tuple(range(8)),)
    # the grid's row-major rank is the device number, for every grid axis
    for grid in [(2, 2, 2), (2, 4), (8, 1), (1, 8)]:
        for ax in range(len(grid)):
            p = placement_from_grid(h, grid, (ax,))
            for g in p.groups():
                coords = [[(d // (int(__import__("math").prod(grid[i + 1:])))) % grid[i]
                           for i in range(len(grid))] for d in g]
                others = {tuple(c[i] for i in range(len(grid)) if i != ax) for c in coords}
                assert len(others) == 1
    assert placement_from_grid(SystemHierarchy.of(("node", 2), ("core", 3)), (3, 2), (0,)) is None
    assert placement_from_grid(h, (3, 3), (0,)) is None
