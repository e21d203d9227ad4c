// Large counts in the runtime, without allocating 16 GiB (tests/mpi/test_runtime_setup.py builds this with the
// environment's mpicxx and runs it under mpiexec -n 2 and -n 3).
//
// 1. Type arithmetic: large_count(count, base) for counts above INT_MAX (default threshold) returns an
//    (int n, datatype) pair describing exactly count * size(base) bytes (MPI_Type_size_c) and spanning
//    count * extent(base) bytes (MPI_Type_get_extent_x); block_type() of a block with a dimension above
//    INT_MAX has the right size too. Nothing is sent.
// 2. Real transfers through the large-count path: the threshold is set to 64 elements, so blocks of a
//    few hundred elements travel as derived datatypes (and displacements through the MPI-4 v-calls,
//    reductions through MPI_Allreduce_c / MPI_Reduce_c or chunks), and every received element is compared
//    with the expected value: grid-mapped scatter/gather, the broadcast of a replicated operand, allreduce,
//    scatter_blocks/gather_blocks (plain and combining), redistribute, and the synthesized executor's
//    allgather/permute. Prints "LARGE-COUNT OK" on rank 0.
#include "dace_partition_runtime.h"
#include "dace_partition_redistribute.h"

#include <cstdio>
#include <vector>

namespace dp = dace_partition;

static int failures = 0;

#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            ++failures;                                     \
            std::fprintf(stderr, "rank %d: ", dp::world_rank()); \
            std::fprintf(stderr, __VA_ARGS__);              \
            std::fprintf(stderr, "\n");                     \
        }                                                   \
    } while (0)

static void check_count(long long count, MPI_Datatype base) {
    dp::Count c = dp::large_count(count, base);
    MPI_Count size = 0, lb = 0, extent = 0, bsize = 0;
    MPI_Type_size_c(c.type, &size);
    MPI_Type_size_c(base, &bsize);
    MPI_Type_get_extent_x(c.type, &lb, &extent);
    EXPECT(c.n > 0 && (long long)c.n <= dp::large_count_threshold(), "count %lld: int count %d out of range", count, c.n);
    EXPECT((long long)size * c.n == count * (long long)bsize, "count %lld: %lld x %d bytes != %lld", count,
           (long long)size, c.n, count * (long long)bsize);
    EXPECT((long long)extent * c.n == count * (long long)bsize, "count %lld: extent %lld x %d", count,
           (long long)extent, c.n);
    EXPECT(c.owned == !dp::fits(count), "count %lld: owned %d", count, (int)c.owned);
    c.release();
}

static void type_arithmetic() {
    const long long big[] = {2147483648LL, 3LL * 2147483648LL + 5, 4294967296LL * 8 + 12345, 2147483647LL,
                             (1LL << 40) + 1, 5000000000LL};
    for (long long n : big) {
        check_count(n, MPI_DOUBLE);
        check_count(n, MPI_BYTE);
        check_count(n, MPI_C_DOUBLE_COMPLEX);
    }
    // A 2-d block of 3 x (2^31 + 7) doubles inside rows of 2^32 elements: strided, a dimension above INT_MAX.
    std::vector<dp::DimMap> dm{{0, 0, -1, 3, 4294967296LL}, {0, 0, -1, 2147483655LL, 1}};
    MPI_Datatype t = dp::block_type(MPI_DOUBLE, dm);
    MPI_Count size = 0;
    MPI_Type_size_c(t, &size);
    EXPECT((long long)size == 3LL * 2147483655LL * 8, "block_type size %lld", (long long)size);
    MPI_Type_free(&t);
    // The byte counts of the synthesized executor.
    dp::Count b = dace_partition_redistribute::bytes_of(6442450944LL + 3);
    MPI_Type_size_c(b.type, &size);
    EXPECT((long long)size * b.n == 6442450944LL + 3, "bytes_of size");
}

static double value(long long i) { return 0.5 * (double)i + 1.0; }

static void transfers() {
    dp::set_large_count_threshold(64);
    const int P = dp::world_size(), me = dp::world_rank();
    const long long B = 300;  // elements per rank: above the threshold, not a multiple of a power of two
    const long long N = B * P;
    std::vector<double> global(me == 0 ? N : 0), local(B), back(me == 0 ? N : 0, -1.0);
    for (long long i = 0; i < (long long)global.size(); ++i) global[i] = value(i);
    dp::init_grid(0, "row", {P});
    std::vector<dp::DimMap> dm{{0, B, 0, B, 1}};
    // grid-mapped scatter (root displacements above the threshold: the MPI-4 v-call), gather back
    dp::scatter<double>(0, global.data(), local.data(), dm, 0, 0);
    for (long long i = 0; i < B; ++i) EXPECT(local[i] == value(me * B + i), "scatter element %lld", i);
    for (int call = 0; call < 2; ++call) {
        dp::gather<double>(0, local.data(), back.data(), dm, 0);
        for (long long i = 0; i < (long long)back.size(); ++i) EXPECT(back[i] == value(i), "gather element %lld", i);
    }
    // a replicated operand: broadcast from the global array (root: block type; others: derived count)
    std::vector<double> whole(N, -1.0);
    std::vector<dp::DimMap> all{{0, 0, -1, N, 1}};
    dp::scatter<double>(0, global.data(), whole.data(), all, 0, 0);
    for (long long i = 0; i < N; ++i) EXPECT(whole[i] == value(i), "broadcast element %lld", i);
    // a sum of replicas to the root (MPI_Reduce, large count) then gather
    std::vector<double> part(B);
    for (long long i = 0; i < B; ++i) part[i] = (double)(i + 1);
    dp::init_grid(1, "repl", {1, P});
    std::vector<dp::DimMap> dmr{{0, 0, -1, B, 1}};
    std::vector<double> reduced(me == 0 ? B : 0, -1.0);
    dp::gather<double>(1, part.data(), reduced.data(), dmr, dp::OP_SUM);
    for (long long i = 0; i < (long long)reduced.size(); ++i)
        EXPECT(reduced[i] == (double)(i + 1) * P, "reduce element %lld", i);
    // allreduce (MPI_Allreduce_c, or chunks before MPI 4)
    std::vector<double> in(B), out(B, -1.0);
    for (long long i = 0; i < B; ++i) in[i] = (double)(me + 1) * (double)i;
    dp::allreduce<double>("x", 0, 1u, in.data(), out.data(), B, dp::OP_SUM);
    for (long long i = 0; i < B; ++i) EXPECT(out[i] == (double)i * P * (P + 1) / 2, "allreduce element %lld", i);
    // general blocks: uneven tiles (rank q holds 300 + q elements), displacements above the threshold
    const long long gshape[] = {N + P * (P - 1) / 2}, gstr[] = {1}, lshape[] = {B + P}, lstr[] = {1};
    auto fn = [&](const int *c, long long *s, long long *n) {
        s[0] = B * c[0] + (long long)c[0] * (c[0] - 1) / 2;
        n[0] = B + c[0];
    };
    std::vector<double> g2(me == 0 ? gshape[0] : 0), l2(B + P, -1.0), b2(me == 0 ? gshape[0] : 0, -1.0);
    for (long long i = 0; i < (long long)g2.size(); ++i) g2[i] = value(i);
    long long start = B * me + (long long)me * (me - 1) / 2;
    for (int call = 0; call < 2; ++call) {
        dp::scatter_blocks<double>(0, "g2", g2.data(), l2.data(), 1, gshape, gstr, lshape, lstr, fn, 0, 0);
        for (long long i = 0; i < B + me; ++i) EXPECT(l2[i] == value(start + i), "scatter_blocks element %lld", i);
        dp::gather_blocks<double>(0, "g2", l2.data(), b2.data(), 1, gshape, gstr, lshape, lstr, fn, 0, 0, 0);
        for (long long i = 0; i < (long long)b2.size(); ++i) EXPECT(b2[i] == value(i), "gather_blocks element %lld", i);
        std::fill(b2.begin(), b2.end(), -1.0);
        dp::gather_blocks<double>(0, "g2", l2.data(), b2.data(), 1, gshape, gstr, lshape, lstr, fn, 0, 1, 0);
        for (long long i = 0; i < (long long)b2.size(); ++i)
            EXPECT(b2[i] == value(i), "gather_blocks (staged) element %lld", i);
    }
    // redistribute: the uneven blocks -> even blocks of the same array (pieces cross rank boundaries)
    auto even = [&](const int *c, long long *s, long long *n) {
        s[0] = B * c[0];
        n[0] = B;
    };
    std::vector<double> l3(B + P, -1.0);
    for (int call = 0; call < 2; ++call) {
        for (long long i = 0; i < B + me; ++i) l2[i] = value(start + i);
        dp::redistribute<double>("g2", 1, 0, fn, l2.data(), lstr, 0, even, l3.data(), lshape, lstr, 0);
        for (long long i = 0; i < B; ++i) EXPECT(l3[i] == value(B * me + i), "redistribute element %lld", i);
    }
    // the synthesized executor's helpers on byte counts above the threshold
    std::vector<int> colour(P, 0), key(P);
    for (int q = 0; q < P; ++q) key[q] = q;
    std::vector<char> a((size_t)N * 8), b((size_t)N * 8);
    char *cur = a.data(), *tmp = b.data();
    for (long long i = 0; i < B; ++i) reinterpret_cast<double *>(cur)[i] = value(me * B + i);
    const long shape[1] = {(long)B};
    for (int call = 0; call < 2; ++call) {
        cur = a.data(), tmp = b.data();
        for (long long i = 0; i < B; ++i) reinterpret_cast<double *>(cur)[i] = value(me * B + i);
        dace_partition_redistribute::allgather(cur, tmp, 1, shape, 0, P, colour.data(), key.data(), 8);
        for (long long i = 0; i < N; ++i)
            EXPECT(reinterpret_cast<double *>(cur)[i] == value(i), "allgather element %lld", i);
    }
    for (long long i = 0; i < B; ++i) reinterpret_cast<double *>(cur)[i] = value(me * B + i);
    dace_partition_redistribute::permute(cur, tmp, (long)B * 8, (me + 1) % P, (me + P - 1) % P, me);
    for (long long i = 0; i < B; ++i)
        EXPECT(reinterpret_cast<double *>(cur)[i] == value(((me + P - 1) % P) * B + i), "permute element %lld", i);
}

int main() {
    dp::init_mpi();
    type_arithmetic();
    transfers();
    int bad = failures, total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    dp::free_grids();
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::printf(total == 0 ? "LARGE-COUNT OK\n" : "LARGE-COUNT FAILED %d\n", total);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
