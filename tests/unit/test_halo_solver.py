"""The halo solver on hand-built Moves (pure Python, no compiler): which redistributions it accepts, and
that its cost is exactly the bytes each rank receives from other ranks (the local part is a copy)."""
import dace
from dace import subsets

from dace_partition.ir import ROOT, Distribution, Move, MoveKind, ReduceOp
from dace_partition.report import LoweringReport, entry
from dace_partition.solvers.halo import HaloSolver, disjoint_tiles
from dace_partition.solvers.registry import choose, resolve_solvers

HALO = HaloSolver()


def dist(grid, coords, dims, gid=0, pending=None):
    """``dims``: (begin, end inclusive) per array dimension, strings in the coordinates."""
    return Distribution.on_grid(subsets.Range([(b, e, 1) for b, e in dims]), grid, coords, gid, pending)


def move(src, dst, shape, itemsize=8):
    return Move("A", src, dst, shape, itemsize)


ROWS4 = dist((4, ), ("c", ), [("1 + 8*c", "8 + 8*c")], gid=1)  # A[1:33] in blocks of 8 (the written rows)


def test_shifted_read_receives_one_element_from_the_left_neighbour():
    m = move(ROWS4, dist((4, ), ("d", ), [("8*d", "7 + 8*d")], gid=2), (34, ))
    assert m.kind == MoveKind.REDISTRIBUTE
    assert HALO.refuse(m) is None
    cost = HALO.cost(m)
    # Rank r's block [8r, 8r+8) holds 8r, owned by rank r-1; rank 0's element 0 is nobody's (a boundary).
    assert cost.per_rank == (0, 8, 8, 8)
    assert cost.messages == 3


def test_block_plus_halo_destination_overlaps_and_counts_both_faces():
    m = move(ROWS4, dist((4, ), ("d", ), [("8*d", "9 + 8*d")], gid=2), (34, ))  # [8r, 8r+10): one halo each side
    assert m.dst.may_overlap()
    assert HALO.refuse(m) is None
    assert HALO.cost(m).per_rank == (8, 16, 16, 8)
    assert HALO.cost(m).messages == 6


def test_two_dimensional_grid_takes_corners_from_diagonal_neighbours():
    src = dist((2, 2), ("a", "b"), [("4*a", "3 + 4*a"), ("5*b", "4 + 5*b")])
    dst = dist((2, 2), ("p", "q"), [("Max(0, 4*p - 1)", "Min(7, 4*p + 4)"), ("Max(0, 5*q - 1)", "Min(9, 5*q + 5)")],
               gid=3)
    m = move(src, dst, (8, 10))
    assert HALO.refuse(m) is None
    # Each rank: a 4-element row face, a 5-element column face and one corner from the diagonal rank.
    assert HALO.cost(m).per_rank == ((5 + 4 + 1) * 8, ) * 4
    assert HALO.cost(m).messages == 12


def test_non_neighbour_source_is_refused_in_words():
    m = move(ROWS4, dist((4, ), ("d", ), [("1 + 8*Mod(d + 2, 4)", "8 + 8*Mod(d + 2, 4)")], gid=2), (34, ))
    why = HALO.refuse(m)
    assert why is not None and "not its grid neighbour" in why


def test_other_kinds_and_layouts_are_refused():
    same = dist((4, ), ("d", ), [("8*d", "7 + 8*d")], gid=2)
    assert "not scatter" in HALO.refuse(move(ROOT, same, (34, )))
    assert "same grid" in HALO.refuse(move(ROWS4, dist((2, ), ("d", ), [("16*d", "15 + 16*d")]), (34, )))
    replicated = dist((2, 2), ("a", "b"), [("8*a", "7 + 8*a")])
    assert "replicated" in HALO.refuse(move(replicated, dist((2, 2), ("p", "q"), [("8*p", "8 + 8*p")]), (17, )))
    partial = dist((2, 2), ("a", "b"), [("8*a", "7 + 8*a")], pending=ReduceOp.SUM)
    assert HALO.refuse(move(partial, dist((2, 2), ("p", "q"), [("8*p", "8 + 8*p")]), (17, ))) is not None


def test_symbolic_tiles_shifted_by_a_constant_are_accepted_and_costed_once_bound():
    N = dace.symbol("N")
    c = dace.symbol("c", dace.int32)
    d = dace.symbol("d", dace.int32)
    ceil = dace.symbolic.int_ceil
    src = Distribution.on_grid(subsets.Range([(ceil(c * (N - 2), 3) + 1, ceil((c + 1) * (N - 2), 3), 1)]), (3, ),
                               ("c", ), 1)
    dst = Distribution.on_grid(subsets.Range([(ceil(d * (N - 2), 3), ceil((d + 1) * (N - 2), 3), 1)]), (3, ),
                               ("d", ), 2)
    assert disjoint_tiles(src)
    m = move(src, dst, (N, ))
    assert HALO.refuse(m) is None
    assert HALO.cost(m).per_rank is None  # sizes known at run time
    rep = LoweringReport("p", 3)
    e, t = entry(m, HALO, trips=dace.symbol("T"))
    rep.traffic.append(t)
    assert rep.bytes_per_rank() is None
    # N = 20: blocks of 6; ranks 1 and 2 each get one element of their left neighbour, 7 iterations.
    assert rep.bytes_per_rank(N=20, T=7) == [0, 8 * 7, 8 * 7]
    assert rep.bytes_per_iteration(N=20) == [0, 8, 8]
    # A tiling that is not a constant shift is not claimed for symbolic sizes.
    wide = Distribution.on_grid(subsets.Range([(0, ceil((d + 1) * (N - 2), 3), 1)]), (3, ), ("d", ), 2)
    assert HALO.refuse(move(src, wide, (N, ))) is not None


def test_registry_chooses_halo_for_a_shifted_read_before_the_general_solver():
    m = move(ROWS4, dist((4, ), ("d", ), [("8*d", "7 + 8*d")], gid=2), (34, ))
    solver, refused = choose(m, resolve_solvers(None))
    assert solver.name == "halo", refused
    names = [s.name for s in resolve_solvers(None)]
    assert names.index("halo") < names.index("blocks")
