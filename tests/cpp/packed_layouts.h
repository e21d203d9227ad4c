// What the packed-exchange test programs (halo_packed.cpp, redistribute_packed.cpp) share: the value of
// each global element, the strides of a padded or transposed buffer, a walk over a block's elements, and
// the check of a destination buffer after an exchange.
#pragma once
#include <cstdio>
#include <vector>

namespace packed_test {

// The value the element at global index `g` holds: distinct for every index of the test shapes.
inline double f(const long long *g, int nd) {
    double v = 1.0;
    for (int j = 0; j < nd; ++j) v = v * 1000.0 + (double)g[j];
    return v;
}

// Strides of a buffer holding `count` with `pad` extra elements per dimension; transposed: the first
// dimension innermost (a non-unit innermost stride). `total`: the buffer's elements.
inline std::vector<long long> strides_for(int nd, const long long *count, const long long *pad, bool transposed,
                                          long long &total) {
    std::vector<long long> s(nd);
    long long step = 1;
    if (!transposed) {
        for (int j = nd - 1; j >= 0; --j) s[j] = step, step *= count[j] + pad[j];
    } else {
        for (int j = 0; j < nd; ++j) s[j] = step, step *= count[j] + pad[j];
    }
    total = step;
    return s;
}

// Calls fn(local offset, global index) for every element of the block (start, count) of a buffer with
// strides `str`, in row-major order.
template <typename F>
void each(int nd, const long long *start, const long long *count, const std::vector<long long> &str, F fn) {
    long long n = 1;
    for (int j = 0; j < nd; ++j) n *= count[j];
    std::vector<long long> idx(nd, 0), gi(nd);
    for (long long i = 0; i < n; ++i) {
        long long o = 0;
        for (int j = 0; j < nd; ++j) gi[j] = start[j] + idx[j], o += idx[j] * str[j];
        fn(o, gi.data());
        for (int j = nd - 1; j >= 0; --j) {
            if (++idx[j] < count[j]) break;
            idx[j] = 0;
        }
    }
}

// Every element of the block (start, count) of `dst` (strides `str`) holds f of its global index, and
// every other element of the buffer still holds `fill`. Counts what is wrong in `failures` (the first ten
// printed, naming rank `me`).
inline void check_destination(int me, int nd, const long long *start, const long long *count,
                              const std::vector<long long> &str, const std::vector<double> &dst, double fill,
                              int &failures) {
    std::vector<char> inside(dst.size(), 0);
    each(nd, start, count, str, [&](long long o, const long long *g) {
        inside[o] = 1;
        if (dst[o] != f(g, nd) && failures++ < 10)
            std::fprintf(stderr, "rank %d: destination element at offset %lld is %g, expected %g\n", me, o, dst[o],
                         f(g, nd));
    });
    for (size_t o = 0; o < dst.size(); ++o)
        if (!inside[o] && dst[o] != fill && failures++ < 10)
            std::fprintf(stderr, "rank %d: padding element %zu was written\n", me, o);
}

}  // namespace packed_test
