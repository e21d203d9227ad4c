// The packed redistribution (dace_partition_device_moves.h's redistribute_packed, host copier) against the
// values it must deliver and against the host redistribution (dace_partition_runtime.h's redistribute),
// on random layouts (tests/mpi/test_runtime_setup.py builds this with the environment's mpicxx and runs it
// under mpiexec -n 2, 3 and 4).
//
// Each case draws (from one seed, the same on every rank) 1 to 3 dimensions, a global shape and, for the
// source and the destination independently, a process grid (one or two dimensions, possibly fewer ranks
// than the job, possibly a grid dimension that splits no array dimension: replicas), the array dimension
// each grid dimension splits, and blocks grown by 0 to 2 elements on either side (overlapping blocks);
// local buffers are padded and, in some cases, transposed. The source holds f(global index) in its block;
// afterwards every element of the destination block must hold f of its global index, the padding must be
// untouched, and the host redistribution must give the same buffer. Prints "REDIST-PACKED OK <cases>" on
// rank 0.
#include "dace_partition_runtime.h"
#include "dace_partition_device_moves.h"

#include <cstdio>
#include <random>
#include <vector>

#include "packed_layouts.h"

namespace dp = dace_partition;
using packed_test::each;
using packed_test::f;
using packed_test::strides_for;

static int failures = 0;

struct Side {
    std::vector<int> dims;  // grid shape
    int split[3];           // grid dimension splitting each array dimension, -1: whole
    long long lo[3], hi[3]; // growth of the block on either side (clipped to the array)
};

struct Layout {
    int nd;
    long long shape[3];
    Side src, dst;
};

static void block_of(const Layout &L, const Side &S, const int *c, long long *start, long long *count) {
    for (int j = 0; j < L.nd; ++j) {
        long long n = L.shape[j];
        if (S.split[j] < 0) {
            start[j] = 0, count[j] = n;
            continue;
        }
        long long p = S.dims[S.split[j]], r = c[S.split[j]];
        long long base = n / p, extra = n % p;
        long long b = r * base + (r < extra ? r : extra), k = base + (r < extra ? 1 : 0);
        if (k == 0) {
            start[j] = b, count[j] = 0;
            continue;
        }
        long long lo = b - S.lo[j], hi = b + k + S.hi[j];
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
        start[j] = lo, count[j] = hi - lo;
    }
}

// This world rank's block: row-major coordinates in the grid, nothing beyond the grid's ranks.
static bool my_block(const Layout &L, const Side &S, long long *start, long long *count) {
    long long size = 1;
    for (int d : S.dims) size *= d;
    int w = dp::world_rank();
    if (w >= size) {
        for (int j = 0; j < L.nd; ++j) start[j] = 0, count[j] = 0;
        return false;
    }
    std::vector<int> c(S.dims.size());
    long long rest = w;
    for (int d = (int)S.dims.size() - 1; d >= 0; --d) c[d] = (int)(rest % S.dims[d]), rest /= S.dims[d];
    block_of(L, S, c.data(), start, count);
    return true;
}

template <typename Exchange>
static std::vector<double> run_case(const Layout &L, bool transposed, const long long *pad, int gid, Exchange exchange) {
    int me = dp::world_rank();
    long long ss[3], sc[3], ds[3], dc[3];
    my_block(L, L.src, ss, sc);
    my_block(L, L.dst, ds, dc);
    long long stotal = 0, dtotal = 0;
    std::vector<long long> sstr = strides_for(L.nd, sc, pad, transposed, stotal);
    std::vector<long long> dstr = strides_for(L.nd, dc, pad, !transposed && L.nd > 1 && pad[0] == 2, dtotal);
    std::vector<double> src(stotal + 1, -3.0), dst(dtotal + 1, -7.0);
    each(L.nd, ss, sc, sstr, [&](long long o, const long long *g) { src[o] = f(g, L.nd); });
    long long dshape[3];
    for (int j = 0; j < L.nd; ++j) dshape[j] = dc[j] + pad[j];
    auto sfn = [&L](const int *cc, long long *s, long long *k) { block_of(L, L.src, cc, s, k); };
    auto dfn = [&L](const int *cc, long long *s, long long *k) { block_of(L, L.dst, cc, s, k); };
    exchange(L.nd, gid, dp::BlockFn(sfn), src.data(), sstr.data(), gid + 1, dp::BlockFn(dfn), dst.data(), dshape,
             dstr.data());
    packed_test::check_destination(me, L.nd, ds, dc, dstr, dst, -7.0, failures);
    return dst;
}

static Side draw_side(std::mt19937 &rng, int nd, int P) {
    Side S;
    for (int j = 0; j < 3; ++j) S.split[j] = -1, S.lo[j] = S.hi[j] = 0;
    int ranks = rng() % 4 == 0 && P > 2 ? P - 1 : P;  // sometimes a grid of fewer ranks than the job
    if (ranks % 2 == 0 && rng() % 2) S.dims = {ranks / 2, 2};
    else S.dims = {ranks};
    // each grid dimension splits a distinct array dimension, or none (its ranks hold replicas)
    std::vector<int> free_dims;
    for (int j = 0; j < nd; ++j) free_dims.push_back(j);
    for (int g = 0; g < (int)S.dims.size(); ++g) {
        if (free_dims.empty() || rng() % 5 == 0) continue;
        int k = (int)(rng() % free_dims.size());
        S.split[free_dims[k]] = g;
        free_dims.erase(free_dims.begin() + k);
    }
    for (int j = 0; j < nd; ++j)
        if (S.split[j] >= 0 && rng() % 3 == 0) S.lo[j] = rng() % 3, S.hi[j] = rng() % 3;
    return S;
}

int main() {
    dp::init_mpi();
    int P = dp::world_size();
    std::mt19937 rng(4242);
    const int cases = 80;
    for (int t = 0; t < cases; ++t) {
        Layout L;
        L.nd = 1 + (int)(rng() % 3);
        for (int j = 0; j < L.nd; ++j) L.shape[j] = 1 + rng() % 9;
        L.src = draw_side(rng, L.nd, P);
        L.dst = draw_side(rng, L.nd, P);
        bool transposed = L.nd > 1 && rng() % 4 == 0;
        long long pad[3] = {0, 0, 0};
        for (int j = 0; j < L.nd; ++j) pad[j] = rng() % 3;
        int gid = 4 * t;
        dp::init_grid(gid, "packed_src", L.src.dims);
        dp::init_grid(gid + 1, "packed_dst", L.dst.dims);
        dp::init_grid(gid + 2, "host_src", L.src.dims);
        dp::init_grid(gid + 3, "host_dst", L.dst.dims);
        std::vector<double> packed = run_case(
            L, transposed, pad, gid,
            [](int nd, int sg, dp::BlockFn s, const double *sp, const long long *ss, int dg, dp::BlockFn d,
               double *dptr, const long long *dsh, const long long *ds) {
                dp::redistribute_packed<double, dp::HostCopy>("x", nd, sg, s, sp, ss, dg, d, dptr, dsh, ds);
            });
        std::vector<double> host = run_case(
            L, transposed, pad, gid + 2,
            [](int nd, int sg, dp::BlockFn s, const double *sp, const long long *ss, int dg, dp::BlockFn d,
               double *dptr, const long long *dsh, const long long *ds) {
                dp::redistribute<double>("x", nd, sg, s, sp, ss, dg, d, dptr, dsh, ds, dp::OP_NONE);
            });
        if (packed != host && failures++ < 10)
            std::fprintf(stderr, "rank %d: case %d: the packed and the host redistribution differ\n",
                         dp::world_rank(), t);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (dp::world_rank() == 0) {
        if (total == 0) std::printf("REDIST-PACKED OK %d\n", cases);
        else std::printf("REDIST-PACKED FAILED: %d\n", total);
    }
    dp::free_grids();
    MPI_Finalize();  // a rank leaving without it makes the launcher kill the others
    return total == 0 ? 0 : 1;
}
