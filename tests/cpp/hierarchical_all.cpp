// Every synthesized reduction program through the C++ executor (dace_partition_hierarchical.h), without
// DaCe: tests/mpi/test_hierarchical_solver.py writes the tables of all programs of one placement (grid (1, P)
// summed over its second dimension) to a file; this runs each of them twice on int64 data and compares
// every element with the exact sum, and, under the PMPI counter (LD_PRELOAD), each rank's received bytes
// with what the solver's cost says. Prints "HIERARCHICAL OK <cases>" on rank 0.
//
// Input (whitespace-separated): the hierarchy it was planned for ("2x4"), ncases, grid size P, then per
// case: count, chunk, ntable, table..., then P expected byte counts.
#include "dace_partition_runtime.h"
#include "dace_partition_hierarchical.h"

#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace dp = dace_partition;

int main(int argc, char **argv) {
    dp::init_mpi();
    int rank = dp::world_rank();
    std::ifstream f(argv[1]);
    std::string hierarchy;
    int ncases = 0, P = 0;
    f >> hierarchy >> ncases >> P;
    dp::init_grid(0, "g", {1, P});
    using fn = long long (*)();
    auto bytes = (fn)dlsym(RTLD_DEFAULT, "dp_pmpi_bytes");
    auto reset = (void (*)())dlsym(RTLD_DEFAULT, "dp_pmpi_reset");
    std::vector<std::vector<int>> tables(ncases);  // alive to the end: a table's address names its site
    int failures = 0;
    for (int c = 0; c < ncases; ++c) {
        long long count, chunk;
        int n;
        f >> count >> chunk >> n;
        tables[c].resize(n);
        for (int &x : tables[c]) f >> x;
        std::vector<long long> expect_bytes(P);
        for (auto &b : expect_bytes) f >> b;
        for (int round = 0; round < 2; ++round) {
            std::vector<long long> in(count), out(count, -1);
            for (long long i = 0; i < count; ++i) in[i] = (rank + 1) * 1000003LL + i * 7 + round;
            if (reset) reset();
            dp::hier::allreduce<long long>("x", 0, tables[c].data(), n, hierarchy.c_str(), chunk, in.data(),
                                           out.data(), count, dp::OP_SUM);
            long long got = bytes ? bytes() : expect_bytes[rank];
            if (got != expect_bytes[rank]) {
                ++failures;
                std::fprintf(stderr, "rank %d case %d: %lld B received, cost says %lld\n", rank, c, got,
                             expect_bytes[rank]);
            }
            for (long long i = 0; i < count; ++i) {
                long long want = 0;
                for (int r = 0; r < P; ++r) want += (r + 1) * 1000003LL + i * 7 + round;
                if (out[i] != want) {
                    ++failures;
                    std::fprintf(stderr, "rank %d case %d element %lld: %lld, expected %lld\n", rank, c, i, out[i],
                                 want);
                    break;
                }
            }
        }
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, dp::comm());
    if (rank == 0 && all == 0) std::printf("HIERARCHICAL OK %d%s\n", ncases, bytes ? " counted" : "");
    dp::free_grids();
    MPI_Finalize();
    return all ? 1 : 0;
}
