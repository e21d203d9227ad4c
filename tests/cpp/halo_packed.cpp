// The packed halo exchange (dace_partition_device_moves.h, host copier) against the values it must deliver,
// on random layouts (tests/mpi/test_runtime_setup.py builds this with the environment's mpicxx and runs it
// under mpiexec -n 2, 3 and 4).
//
// Each case draws (from one seed, the same on every rank) 1 to 3 dimensions, a global shape, a process grid
// of the job's ranks over some of the dimensions, halo widths below and above the block in each split
// dimension, padded local buffers (row pitches larger than the block; in some cases a non-unit innermost
// stride, a transposed tile) and whether the exchange works in place (the source block inside the
// destination's block-plus-halo buffer, as a stencil's time loop does) or between two buffers. The source
// holds f(global index) in its block; after the exchange every element of the destination block must hold
// f of its global index, and the padding must be untouched. The same exchange through the derived-datatype
// halo (dace_partition_halo.h) must give the same buffer. Prints "HALO-PACKED OK <cases>" on rank 0.
#include "dace_partition_runtime.h"
#include "dace_partition_device_moves.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "packed_layouts.h"

namespace dp = dace_partition;
using packed_test::each;
using packed_test::f;
using packed_test::strides_for;

static int failures = 0;

struct Layout {
    int nd;
    long long shape[3];
    std::vector<int> dims;  // grid shape over the split dimensions
    int split[3];           // grid dimension of each array dimension, -1: not split
    long long lo[3], hi[3];
};

// rank's block of dimension j: an even split of shape[j] over the grid dimension (larger blocks first).
static void src_block(const Layout &L, const int *c, long long *start, long long *count) {
    for (int j = 0; j < L.nd; ++j) {
        if (L.split[j] < 0) {
            start[j] = 0, count[j] = L.shape[j];
            continue;
        }
        long long p = L.dims[L.split[j]], r = c[L.split[j]], n = L.shape[j];
        long long base = n / p, extra = n % p;
        start[j] = r * base + (r < extra ? r : extra);
        count[j] = base + (r < extra ? 1 : 0);
    }
}

static void dst_block(const Layout &L, const int *c, long long *start, long long *count) {
    src_block(L, c, start, count);
    for (int j = 0; j < L.nd; ++j) {
        if (L.split[j] < 0 || count[j] == 0) continue;
        long long b = start[j] - L.lo[j], e = start[j] + count[j] + L.hi[j];
        if (b < 0) b = 0;
        if (e > L.shape[j]) e = L.shape[j];
        start[j] = b, count[j] = e - b;
    }
}

template <typename Exchange>
static std::vector<double> run_case(const Layout &L, bool in_place, bool transposed, const long long *pad,
                                    int gid, Exchange exchange) {
    int me = dp::world_rank();
    std::vector<int> c = dp::grid(gid).coords;  // the grid holds every rank
    long long ss[3], sc[3], ds[3], dc[3];
    src_block(L, c.data(), ss, sc);
    dst_block(L, c.data(), ds, dc);
    long long dtotal = 0, stotal = 0;
    std::vector<long long> dstr = strides_for(L.nd, dc, pad, transposed, dtotal);
    std::vector<long long> sstr = strides_for(L.nd, sc, pad, transposed, stotal);
    std::vector<double> dst(dtotal + 1, -7.0), src_own(in_place ? 0 : stotal + 1, -3.0);
    double *src = in_place ? dst.data() : src_own.data();
    if (in_place) {  // the source block inside the destination's buffer, at its offset
        sstr = dstr;
        long long off = 0;
        for (int j = 0; j < L.nd; ++j) off += (ss[j] - ds[j]) * dstr[j];
        src = dst.data() + off;
    }
    each(L.nd, ss, sc, sstr, [&](long long o, const long long *g) { src[o] = f(g, L.nd); });  // the source holds f
    long long dshape[3];
    for (int j = 0; j < L.nd; ++j) dshape[j] = dc[j] + pad[j];
    auto sfn = [&L](const int *cc, long long *s, long long *k) { src_block(L, cc, s, k); };
    auto dfn = [&L](const int *cc, long long *s, long long *k) { dst_block(L, cc, s, k); };
    exchange(L.nd, gid, dp::BlockFn(sfn), src, sstr.data(), dp::BlockFn(dfn), dst.data(), dshape, dstr.data());
    // every element of the destination block is f; nothing else changed
    packed_test::check_destination(me, L.nd, ds, dc, dstr, dst, -7.0, failures);
    return dst;
}

int main() {
    dp::init_mpi();
    int P = dp::world_size();
    std::mt19937 rng(12345);
    int cases = 0;
    for (int t = 0; t < 60; ++t) {
        Layout L;
        L.nd = 1 + (int)(rng() % 3);
        for (int j = 0; j < L.nd; ++j) L.shape[j] = 1 + rng() % 9, L.split[j] = -1, L.lo[j] = L.hi[j] = 0;
        // the grid: P over one split dimension, or two factors of P over two
        int first = (int)(rng() % L.nd);
        L.dims = {P};
        L.split[first] = 0;
        if (L.nd > 1 && P % 2 == 0 && rng() % 2) {
            int second = (first + 1 + (int)(rng() % (L.nd - 1))) % L.nd;
            L.dims = {P / 2, 2};
            L.split[second] = 1;
        }
        for (int j = 0; j < L.nd; ++j)
            if (L.split[j] >= 0) L.lo[j] = rng() % 3, L.hi[j] = rng() % 3;
        bool in_place = rng() % 2, transposed = L.nd > 1 && rng() % 4 == 0;
        long long pad[3] = {0, 0, 0};
        for (int j = 0; j < L.nd; ++j) pad[j] = rng() % 3;
        int gid = 2 * t;
        dp::init_grid(gid, "packed", L.dims);
        dp::init_grid(gid + 1, "datatypes", L.dims);
        std::vector<double> packed = run_case(L, in_place, transposed, pad, gid,
                                              [](int nd, int id, dp::BlockFn s, const double *sp, const long long *ss,
                                                 dp::BlockFn d, double *dptr, const long long *dsh, const long long *ds) {
                                                  dp::halo_exchange_packed<double, dp::HostCopy>(
                                                      "x", nd, id, s, sp, ss, id, d, dptr, dsh, ds);
                                              });
        std::vector<double> typed = run_case(L, in_place, transposed, pad, gid + 1,
                                             [](int nd, int id, dp::BlockFn s, const double *sp, const long long *ss,
                                                dp::BlockFn d, double *dptr, const long long *dsh, const long long *ds) {
                                                 dp::halo_exchange<double>("x", nd, id, s, sp, ss, id, d, dptr, dsh, ds);
                                             });
        if (packed != typed && failures++ < 10)
            std::fprintf(stderr, "rank %d: case %d: the packed and the datatype exchange differ\n", dp::world_rank(), t);
        ++cases;
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (dp::world_rank() == 0) {
        if (total == 0) std::printf("HALO-PACKED OK %d\n", cases);
        else std::printf("HALO-PACKED FAILED: %d\n", total);
    }
    dp::free_grids();
    MPI_Finalize();  // a rank leaving without it makes the launcher kill the others (and lose rank 0's output)
    return total == 0 ? 0 : 1;
}
