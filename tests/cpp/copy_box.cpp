// copy_box (dace_partition_halo.h), the pitched copies of the packed moves, on random boxes of random
// strided buffers, through a copier that checks what cudaMemcpy2DAsync and cudaMemcpy3DAsync require of
// their arguments (a row no wider than either pitch, a slice of at least `height` rows, every byte inside
// both buffers) before it copies as they would; then the number of copies for the layouts that matter on
// a GPU (each copy is one call into the driver). tests/mpi/test_runtime_setup.py builds and runs it (one
// process: nothing here calls MPI). Prints "COPY-BOX OK <cases>".
//
// Built by nvcc with -DCOPY_BOX_ON_GPU (tests/mpi/test_gpu.py), the copies are the CUDA copier's
// (dace_partition_cuda::DeviceCopy): each buffer lives in GPU memory or in pinned host memory, drawn per
// case, as the packed moves' local tiles and packed pieces do.
#if defined(COPY_BOX_ON_GPU)
#include "dace_partition_cuda.h"
#endif
#include "dace_partition_runtime.h"
#include "dace_partition_halo.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

namespace dp = dace_partition;

static int failures = 0;

#define EXPECT(cond, ...)                                  \
    do {                                                   \
        if (!(cond) && failures++ < 20) {                  \
            std::fprintf(stderr, "case %d: ", current);    \
            std::fprintf(stderr, __VA_ARGS__);             \
            std::fprintf(stderr, " (%s)\n", #cond);        \
        }                                                  \
    } while (0)

static int current = 0;

#if defined(COPY_BOX_ON_GPU)
using Copier = dace_partition_cuda::DeviceCopy;
static bool on_device = true;  // where the next buffer lives: GPU memory, else pinned host memory

// A buffer's elements where the copier reads or writes them.
static double *place(const std::vector<double> &host) {
    void *p = nullptr;
    size_t bytes = host.size() * sizeof(double);
    Copier::check(on_device ? cudaMalloc(&p, bytes) : cudaMallocHost(&p, bytes), "allocating a test buffer");
    Copier::check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyDefault), "cudaMemcpy");
    // from pageable memory the copy may still be landing; the copier's stream does not wait for it
    Copier::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return static_cast<double *>(p);
}
static void fetch(std::vector<double> &host, double *p) {
    Copier::check(cudaMemcpy(host.data(), p, host.size() * sizeof(double), cudaMemcpyDefault), "cudaMemcpy");
    cudaPointerAttributes a;
    Copier::check(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
    Copier::check(a.type == cudaMemoryTypeDevice ? cudaFree(p) : cudaFreeHost(p), "freeing a test buffer");
}
#else
using Copier = dp::HostCopy;
static double *place(std::vector<double> &host) { return host.data(); }
static void fetch(std::vector<double> &, double *) {}
#endif

// The copier's copies, after checking the driver's preconditions against the two buffers' bounds.
struct CheckedCopy {
    const char *slo, *shi, *dlo, *dhi;  // the source's and the destination's bytes: [lo, hi)
    int calls2d = 0, calls3d = 0;
    Copier host;

    void inside(const char *p, size_t pitch, size_t rows_per_slice, size_t width, size_t height, size_t depth,
                const char *lo, const char *hi, const char *what) {
        const char *last = p + (depth - 1) * pitch * rows_per_slice + (height - 1) * pitch + width;
        EXPECT(p >= lo && last <= hi, "%s bytes outside the buffer", what);
    }
    void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
        ++calls2d;
        EXPECT(width <= dpitch && width <= spitch, "copy2d: width %zu, pitches %zu %zu", width, dpitch, spitch);
        inside(static_cast<const char *>(src), spitch, 0, width, height, 1, slo, shi, "source");
        inside(static_cast<const char *>(dst), dpitch, 0, width, height, 1, dlo, dhi, "destination");
        host.copy2d(dst, dpitch, src, spitch, width, height);
    }
    void copy3d(void *dst, size_t dpitch, size_t drows, const void *src, size_t spitch, size_t srows, size_t width,
                size_t height, size_t depth) {
        ++calls3d;
        EXPECT(width <= dpitch && width <= spitch, "copy3d: width %zu, pitches %zu %zu", width, dpitch, spitch);
        EXPECT(height <= drows && height <= srows, "copy3d: height %zu, rows per slice %zu %zu", height, drows, srows);
        EXPECT(depth > 1, "copy3d of one slice");
        inside(static_cast<const char *>(src), spitch, srows, width, height, depth, slo, shi, "source");
        inside(static_cast<const char *>(dst), dpitch, drows, width, height, depth, dlo, dhi, "destination");
        host.copy3d(dst, dpitch, drows, src, spitch, srows, width, height, depth);
    }
};

// A buffer holding a box: its dimensions' extents (the box's count plus padding), their order from the
// outermost (a permutation: row-major, transposed or mixed), the box's start in it, and `gap` elements
// after each dimension's whole extent (so that a stride need not be a multiple of the next one's).
struct Buffer {
    int nd;
    std::vector<long long> extent, start, strides;
    std::vector<double> data;

    Buffer(int nd_, const std::vector<long long> &count, const std::vector<long long> &pad,
           const std::vector<int> &order, const std::vector<long long> &at, const std::vector<long long> &gap)
        : nd(nd_), extent(nd_), start(at), strides(nd_) {
        for (int j = 0; j < nd; ++j) extent[j] = count[j] + pad[j];
        long long step = 1;
        for (int k = nd - 1; k >= 0; --k) strides[order[k]] = step, step = step * extent[order[k]] + gap[order[k]];
        data.assign((size_t)step, -1.0);
    }
    long long offset(const std::vector<long long> &idx) const {
        long long o = 0;
        for (int j = 0; j < nd; ++j) o += (start[j] + idx[j]) * strides[j];
        return o;
    }
};

static double value(const std::vector<long long> &idx) {
    double v = 7.0;
    for (long long i : idx) v = v * 100.0 + (double)i;
    return v;
}

// Copies `count` from `s` to `d` and checks every element of the box and every other element of `d`.
static CheckedCopy run(Buffer &s, Buffer &d, const std::vector<long long> &count) {
    int nd = s.nd;
    long long n = 1;
    for (long long c : count) n *= c;
    std::vector<long long> idx(nd, 0);
    for (long long i = 0; i < n; ++i) {
        s.data[s.offset(idx)] = value(idx);
        for (int j = nd - 1; j >= 0; --j) {
            if (++idx[j] < count[j]) break;
            idx[j] = 0;
        }
    }
    CheckedCopy c;
#if defined(COPY_BOX_ON_GPU)
    on_device = current % 3 != 1;  // a third of the cases copy from pinned host memory
#endif
    double *sp = place(s.data);
#if defined(COPY_BOX_ON_GPU)
    on_device = current % 3 != 2;  // another third into it
#endif
    double *dp_ = place(d.data);
    c.slo = reinterpret_cast<const char *>(sp), c.shi = c.slo + s.data.size() * sizeof(double);
    c.dlo = reinterpret_cast<const char *>(dp_), c.dhi = c.dlo + d.data.size() * sizeof(double);
    dp::copy_box<double>(c, dp_ + d.offset(std::vector<long long>(nd, 0)), d.strides.data(),
                         sp + s.offset(std::vector<long long>(nd, 0)), s.strides.data(), count);
    c.host.sync();
    c.host.release();
    fetch(s.data, sp);
    fetch(d.data, dp_);
    std::vector<char> in_box(d.data.size(), 0);
    std::fill(idx.begin(), idx.end(), 0);
    for (long long i = 0; i < n; ++i) {
        long long o = d.offset(idx);
        in_box[o] = 1;
        EXPECT(d.data[o] == value(idx), "element %lld is %g, expected %g", i, d.data[o], value(idx));
        for (int j = nd - 1; j >= 0; --j) {
            if (++idx[j] < count[j]) break;
            idx[j] = 0;
        }
    }
    for (size_t o = 0; o < d.data.size(); ++o)
        EXPECT(in_box[o] || d.data[o] == -1.0, "element %zu outside the box was written", o);
    return c;
}

static std::vector<int> row_major(int nd) {
    std::vector<int> o(nd);
    for (int j = 0; j < nd; ++j) o[j] = j;
    return o;
}

// The number of copies for one layout (count, the source's and destination's padding and dimension order).
static void expect_calls(const std::vector<long long> &count, const std::vector<long long> &spad,
                         const std::vector<long long> &dpad, const std::vector<int> &sorder,
                         const std::vector<int> &dorder, int want2d, int want3d, const char *what,
                         std::vector<long long> sgap = {}) {
    ++current;
    int nd = (int)count.size();
    std::vector<long long> zero(nd, 0);
    if (sgap.empty()) sgap = zero;
    Buffer s(nd, count, spad, sorder, zero, sgap), d(nd, count, dpad, dorder, zero, zero);
    CheckedCopy c = run(s, d, count);
    EXPECT(c.calls2d == want2d && c.calls3d == want3d, "%s: %d 2-D and %d 3-D copies, expected %d and %d", what,
           c.calls2d, c.calls3d, want2d, want3d);
}

int main() {
    std::mt19937 rng(20261128);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int cases = 400;
    for (int k = 0; k < cases; ++k) {
        current = k;
        int nd = pick(1, 4);
        std::vector<long long> count(nd), spad(nd), dpad(nd), sat(nd), dat(nd), sgap(nd), dgap(nd);
        for (int j = 0; j < nd; ++j) {
            sgap[j] = pick(0, 2) == 0 ? pick(1, 3) : 0;
            dgap[j] = pick(0, 2) == 0 ? pick(1, 3) : 0;
            count[j] = pick(0, 9) == 0 ? 1 : pick(1, 6);
            spad[j] = pick(0, 2) == 0 ? pick(1, 3) : 0;
            dpad[j] = pick(0, 2) == 0 ? pick(1, 3) : 0;
            sat[j] = spad[j] ? pick(0, (int)spad[j]) : 0;
            dat[j] = dpad[j] ? pick(0, (int)dpad[j]) : 0;
        }
        std::vector<int> so = row_major(nd), dord = row_major(nd);
        if (pick(0, 3) == 0) std::shuffle(so.begin(), so.end(), rng);
        if (pick(0, 3) == 0) std::shuffle(dord.begin(), dord.end(), rng);
        Buffer s(nd, count, spad, so, sat, sgap), d(nd, count, dpad, dord, dat, dgap);
        run(s, d, count);
    }
    current = cases;
    // A face across the middle dimension of a 3-D tile: one pitched copy (it was one per plane).
    expect_calls({8, 1, 9}, {1, 2, 2}, {0, 0, 0}, row_major(3), row_major(3), 1, 0, "face across dimension 1");
    // A 3-D piece of padded tiles: one 3-D copy.
    expect_calls({4, 5, 6}, {1, 1, 2}, {2, 0, 1}, row_major(3), row_major(3), 0, 1, "3-D piece");
    // Unpadded on both sides: one run of every element.
    expect_calls({4, 5, 6}, {0, 0, 0}, {0, 0, 0}, row_major(3), row_major(3), 1, 0, "contiguous piece");
    // Whole rows in padded planes: the two inner dimensions merge, one 2-D copy.
    expect_calls({4, 5, 6}, {0, 1, 0}, {0, 0, 0}, row_major(3), row_major(3), 1, 0, "whole planes");
    // 4-D: one 3-D copy per index of the outermost dimension.
    expect_calls({3, 4, 5, 6}, {0, 1, 1, 1}, {1, 0, 0, 1}, row_major(4), row_major(4), 0, 3, "4-D piece");
    // A slice pitch of 38 elements, rows of 7: not a whole number of rows, one 2-D copy per slice.
    expect_calls({4, 5, 6}, {0, 0, 1}, {0, 0, 0}, row_major(3), row_major(3), 4, 0, "slices of no whole rows",
                 {0, 3, 0});
    // A transposed tile: single elements, pitched, one copy per column.
    expect_calls({8, 9}, {0, 0}, {0, 0}, {1, 0}, row_major(2), 8, 0, "transposed source");
    if (failures == 0) std::printf("COPY-BOX OK %d\n", cases);
    return failures ? 1 : 0;
}
