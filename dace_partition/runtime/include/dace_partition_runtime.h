// dace-partition runtime: process grids and grid-mapped scatter/gather over MPI.
//
// Included into the generated code of every lowered SDFG. Everything lives in an anonymous namespace so
// that two lowered programs loaded into one process keep separate grid registries.
//
// Set-up once, per call only the MPI calls (docs/runtime.md):
// - at init (`init_mpi`, the environment's init code, or the first `init_grid`): MPI_Comm_dup of
//   MPI_COMM_WORLD, the private communicator `comm()` every communicator of ours derives from (a user's
//   own traffic on MPI_COMM_WORLD can never match ours); then each grid's Cartesian communicator;
// - at a call site's first call: its sub-communicators, datatypes, counts and displacements (O(P) on
//   the root of a scatter/gather, O(1) elsewhere, except the O(P) argument arrays of an Alltoall[vw]),
//   cached and kept until `free_grids()` (the program's exit code), which frees all of them and the
//   private communicator;
// - a later call looks its plan up (no loop over ranks) and makes only its MPI calls.
// Counts above INT_MAX (more precisely DACE_PARTITION_LARGE_COUNT_THRESHOLD) are carried by derived
// datatypes (`large_count`), reductions by MPI-4 large-count calls (or chunks before MPI 4).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <complex>
#include <functional>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <typeindex>
#include <typeinfo>
#include <vector>

// Counts (and displacements) above this many elements take the large-count path. Tests set it low to
// exercise that path on small arrays (also settable at run time: set_large_count_threshold).
#ifndef DACE_PARTITION_LARGE_COUNT_THRESHOLD
#define DACE_PARTITION_LARGE_COUNT_THRESHOLD 2147483647LL
#endif

namespace {
namespace dace_partition {

// The private communicator (MPI_Comm_dup of MPI_COMM_WORLD), MPI_COMM_NULL before init and after exit.
inline MPI_Comm &private_comm() {
    static MPI_Comm c = MPI_COMM_NULL;
    return c;
}

// Prints a message naming this rank and ends every rank: a mismatch must never hang the job.
inline void fail(const char *fmt, ...) {
    int rank = -1, init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    fprintf(stderr, "dace_partition: rank %d: %s\n", rank, msg);
    fflush(stderr);
    // Let the launcher forward the message before MPI_Abort tears the job down.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (init && !fin) MPI_Abort(private_comm() != MPI_COMM_NULL ? private_comm() : MPI_COMM_WORLD, 3);
    std::abort();
}

// Every MPI call of the runtime goes through check(): errors are returned on the private communicator
// (MPI_ERRORS_RETURN), so the message names the call and the rank before every rank is stopped.
inline void check(int err, const char *what) {
    if (err != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, s, &len);
        fail("%s failed: %s", what, s);
    }
}

// Initializes MPI if nobody has (mpi4py usually has) and duplicates MPI_COMM_WORLD once (collective:
// every rank runs the program's __dace_init). Idempotent.
inline void init_mpi() {
    if (private_comm() != MPI_COMM_NULL) return;
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    if (fin) fail("MPI was finalized before the program was initialized");
    if (!init) check(MPI_Init(nullptr, nullptr), "MPI_Init");
    MPI_Comm c = MPI_COMM_NULL;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_Comm_set_name(c, const_cast<char *>("dace_partition"));
    private_comm() = c;
}

// The private communicator: same ranks as MPI_COMM_WORLD, separate matching context.
inline MPI_Comm comm() {
    if (private_comm() == MPI_COMM_NULL) init_mpi();
    return private_comm();
}

inline int world_rank() {
    int r;
    MPI_Comm_rank(comm(), &r);
    return r;
}

inline int world_size() {
    int s;
    MPI_Comm_size(comm(), &s);
    return s;
}

// Freed at exit, in reverse order of registration: every cache of MPI objects registers its free
// function once (the redistribution executor's sub-communicators too).
inline std::vector<void (*)()> &cleanups() {
    static std::vector<void (*)()> v;
    return v;
}
inline void at_exit(void (*f)()) {
    for (auto g : cleanups())
        if (g == f) return;
    cleanups().push_back(f);
}

// ---------------------------------------------------------------------------------------------------
// Call sites. Every generated scatter, gather, redistribution and halo exchange keeps its MPI arguments
// (datatypes, counts, peers) from its first call until exit. A site is known by its key: the types of
// its block callbacks (one lambda type per generated call), grids, operator, element type and buffer
// shapes. Its plan is rebuilt when the probe of its blocks changes (symbols changed between calls); where
// every rank must rebuild at the same call, the probe is rank-independent.
struct SiteKey {
    std::type_index fn1, fn2;
    std::array<int, 4> ints;  // kind, grid ids, dimensions, operator: what the site's kind needs
    MPI_Datatype base;
    std::vector<long long> shapes;

    bool operator==(const SiteKey &o) const {
        return fn1 == o.fn1 && fn2 == o.fn2 && ints == o.ints && base == o.base && shapes == o.shapes;
    }
};

// One cache per kind of site. `Site` has `probe`, `built` and `release()` (frees its MPI objects).
template <typename Site>
struct SiteCache {
    std::list<std::pair<SiteKey, Site>> sites;  // a list: sites stay where they are while others are added

    static SiteCache &instance() {
        static SiteCache c;
        return c;
    }

    static void free_all() {
        for (auto &kv : instance().sites) kv.second.release();
        instance().sites.clear();
    }

    // The site of `key`. `fresh` tells whether its plan must be (re)built: its first call, or `probe` changed
    // (the site's MPI objects are released then).
    static Site &get(const SiteKey &key, const std::vector<long long> &probe, bool &fresh) {
        SiteCache &c = instance();
        Site *s = nullptr;
        for (auto &kv : c.sites)
            if (kv.first == key) {
                s = &kv.second;
                break;
            }
        if (!s) {
            at_exit(free_all);
            c.sites.emplace_back(key, Site());
            s = &c.sites.back().second;
        }
        fresh = !s->built || s->probe != probe;
        if (fresh) {
            s->release();
            s->probe = probe;
            s->built = true;
        }
        return *s;
    }
};

// ---------------------------------------------------------------------------------------------------
// Communicators split from another (a process grid's, or the private communicator): one per distinct
// split, known by its parent and every rank's colour and key, so the call sites that ask for the same
// groups share it. Split at the first request (collective over the parent), freed at exit. The one cache
// of split communicators: the hierarchical reductions and the synthesized redistributions use it.
struct SplitKey {
    MPI_Comm parent;
    std::vector<int> colours_keys;  // colour and key of every rank of the parent, in rank order
    bool operator<(const SplitKey &o) const {
        if (parent != o.parent) return std::less<MPI_Comm>()(parent, o.parent);
        return colours_keys < o.colours_keys;
    }
};

inline std::map<SplitKey, MPI_Comm> &split_comms() {
    static std::map<SplitKey, MPI_Comm> m;
    return m;
}

inline void free_split_comms() {
    for (auto &kv : split_comms())
        if (kv.second != MPI_COMM_NULL) MPI_Comm_free(&kv.second);
    split_comms().clear();
}

// This rank's part of the split of `parent` in which rank r has colour colours_keys[2r] and key
// colours_keys[2r + 1] (`colour` and `key` are this rank's; MPI_UNDEFINED: in no group, MPI_COMM_NULL).
inline MPI_Comm split_comm(MPI_Comm parent, std::vector<int> colours_keys, int colour, int key) {
    SplitKey k{parent, std::move(colours_keys)};
    auto it = split_comms().find(k);
    if (it != split_comms().end()) return it->second;
    at_exit(free_split_comms);
    MPI_Comm c = MPI_COMM_NULL;
    check(MPI_Comm_split(parent, colour, key, &c), "MPI_Comm_split");
    split_comms().emplace(std::move(k), c);
    return c;
}

// ---------------------------------------------------------------------------------------------------
// Large counts: MPI's int counts stop at INT_MAX elements. A larger count travels as a derived datatype
// (chunks of 2^k elements, plus a remainder) with a small int count; a reduction (whose predefined
// operators need predefined types) uses the MPI-4 large-count call, or chunks before MPI 4.
// ---------------------------------------------------------------------------------------------------
inline long long &large_count_threshold() {
    static long long t = (long long)(DACE_PARTITION_LARGE_COUNT_THRESHOLD);
    return t;
}
inline void set_large_count_threshold(long long t) { large_count_threshold() = t > 0 ? t : 1; }
inline bool fits(long long x) { return x >= 0 && x <= large_count_threshold(); }

// `n` elements of `type`: an int count with a datatype. `owned` types are freed with release().
struct Count {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int n = 0;
    bool owned = false;
    void release() {
        if (owned && type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
        type = MPI_DATATYPE_NULL;
        owned = false;
        n = 0;
    }
};

inline MPI_Aint extent_of(MPI_Datatype t) {
    MPI_Aint lb = 0, ext = 0;
    check(MPI_Type_get_extent(t, &lb, &ext), "MPI_Type_get_extent");
    return ext;
}

// `count` copies of `t`, each `stride` bytes after the previous one, as one uncommitted datatype whose
// extent spans them (a contiguous type when the stride is t's extent). Counts above the threshold are
// split: chunk = a power of two, q = count / chunk and r = count % chunk, both within the threshold.
inline MPI_Datatype repeat(long long count, MPI_Datatype t, MPI_Aint stride) {
    MPI_Datatype r = MPI_DATATYPE_NULL;
    bool contiguous = stride == extent_of(t);
    if (fits(count)) {
        if (contiguous)
            check(MPI_Type_contiguous((int)count, t, &r), "MPI_Type_contiguous");
        else
            check(MPI_Type_create_hvector((int)count, 1, stride, t, &r), "MPI_Type_create_hvector");
        return r;
    }
    long long chunk = 1;
    while (count / chunk > large_count_threshold()) chunk <<= 1;
    if (!fits(chunk)) fail("a count of %lld elements is too large for the count threshold %lld", count,
                           large_count_threshold());
    long long q = count / chunk, rem = count % chunk;
    MPI_Datatype inner = repeat(chunk, t, stride), outer;
    check(MPI_Type_create_hvector((int)q, 1, (MPI_Aint)(chunk * stride), inner, &outer), "MPI_Type_create_hvector");
    MPI_Type_free(&inner);
    if (rem == 0) return outer;
    MPI_Datatype tail = repeat(rem, t, stride);
    int lens[2] = {1, 1};
    MPI_Aint disps[2] = {0, (MPI_Aint)(q * chunk) * stride};
    MPI_Datatype types[2] = {outer, tail};
    check(MPI_Type_create_struct(2, lens, disps, types, &r), "MPI_Type_create_struct");
    MPI_Type_free(&outer);
    MPI_Type_free(&tail);
    return r;
}

// `count` elements of the predefined `base` as (datatype, int n): (base, count) when the count fits,
// else (contiguous 2^k elements, count / 2^k) when that divides, else (one struct type, 1). The pair
// always describes count * size(base) bytes and the same type signature, so it matches a receive of
// `count` base elements or of one block datatype of `count` elements.
inline Count large_count(long long count, MPI_Datatype base) {
    Count c;
    if (count < 0) fail("negative count %lld", count);
    if (fits(count)) {
        c.type = base;
        c.n = (int)count;
        return c;
    }
    long long chunk = 1;
    while (count / chunk > large_count_threshold()) chunk <<= 1;
    if (!fits(chunk)) fail("a count of %lld elements is too large for the count threshold %lld", count,
                           large_count_threshold());
    if (count % chunk == 0) {
        check(MPI_Type_contiguous((int)chunk, base, &c.type), "MPI_Type_contiguous");
        c.n = (int)(count / chunk);
    } else {
        c.type = repeat(count, base, extent_of(base));
        c.n = 1;
    }
    check(MPI_Type_commit(&c.type), "MPI_Type_commit");
    c.owned = true;
    return c;
}

// `count` elements of `base` placed `byte_disp` bytes into a buffer: one committed datatype (send or
// receive it with count 1 and displacement 0), so neither count nor displacement needs an int.
inline MPI_Datatype placed(long long count, MPI_Datatype base, long long byte_disp) {
    MPI_Datatype body = repeat(count, base, extent_of(base)), t;
    int one = 1;
    MPI_Aint d = (MPI_Aint)byte_disp;
    check(MPI_Type_create_struct(1, &one, &d, &body, &t), "MPI_Type_create_struct");
    MPI_Type_free(&body);
    check(MPI_Type_commit(&t), "MPI_Type_commit");
    return t;
}

// Reductions of any count: the MPI-4 large-count call above the threshold (MPI_VERSION >= 4), chunks of
// at most the threshold otherwise. `in` may be MPI_IN_PLACE.
inline void reduce_any(const void *in, void *out, long long count, MPI_Datatype base, MPI_Op op, int root,
                       MPI_Comm c) {
    if (fits(count)) {
        check(MPI_Reduce(in, out, (int)count, base, op, root, c), "MPI_Reduce");
        return;
    }
#if MPI_VERSION >= 4 && !defined(DACE_PARTITION_NO_LARGE_COUNT_CALLS)
    check(MPI_Reduce_c(in, out, (MPI_Count)count, base, op, root, c), "MPI_Reduce_c");
#else
    MPI_Aint ext = extent_of(base);
    for (long long off = 0; off < count; off += large_count_threshold()) {
        long long n = std::min(large_count_threshold(), count - off);
        const void *i = in == MPI_IN_PLACE ? MPI_IN_PLACE : (const void *)((const char *)in + off * ext);
        void *o = out ? (void *)((char *)out + off * ext) : nullptr;
        check(MPI_Reduce(i, o, (int)n, base, op, root, c), "MPI_Reduce");
    }
#endif
}

inline void allreduce_any(const void *in, void *out, long long count, MPI_Datatype base, MPI_Op op, MPI_Comm c) {
    if (fits(count)) {
        check(MPI_Allreduce(in, out, (int)count, base, op, c), "MPI_Allreduce");
        return;
    }
#if MPI_VERSION >= 4 && !defined(DACE_PARTITION_NO_LARGE_COUNT_CALLS)
    check(MPI_Allreduce_c(in, out, (MPI_Count)count, base, op, c), "MPI_Allreduce_c");
#else
    MPI_Aint ext = extent_of(base);
    for (long long off = 0; off < count; off += large_count_threshold()) {
        long long n = std::min(large_count_threshold(), count - off);
        const void *i = in == MPI_IN_PLACE ? MPI_IN_PLACE : (const void *)((const char *)in + off * ext);
        check(MPI_Allreduce(i, (char *)out + off * ext, (int)n, base, op, c), "MPI_Allreduce");
    }
#endif
}

// ---------------------------------------------------------------------------------------------------
// Process grids
// ---------------------------------------------------------------------------------------------------

// A Cartesian process grid over the first prod(dims) ranks of the private communicator (row-major, no
// reorder, so rank 0 is grid coordinate (0, ..., 0): the root that holds global arrays).
struct Grid {
    std::string name;
    std::vector<int> dims;
    std::vector<int> coords;
    MPI_Comm cart = MPI_COMM_NULL;
    bool member = false;
    std::map<unsigned, MPI_Comm> subs;

    // Sub-grid keeping the dimensions whose bit is set in `keep` (MPI_Cart_sub at its first use, cached).
    MPI_Comm sub(unsigned keep) {
        auto it = subs.find(keep);
        if (it != subs.end()) return it->second;
        std::vector<int> remain(dims.size() > 0 ? dims.size() : 1, 0);
        for (size_t d = 0; d < dims.size(); ++d) remain[d] = (keep >> d) & 1u;
        MPI_Comm c = MPI_COMM_NULL;
        if (dims.empty())
            check(MPI_Comm_dup(cart, &c), "MPI_Comm_dup");
        else
            check(MPI_Cart_sub(cart, remain.data(), &c), "MPI_Cart_sub");
        subs[keep] = c;
        return c;
    }
};

inline std::vector<Grid> &grids() {
    static std::vector<Grid> g;
    return g;
}

// Called from __dace_init for every grid, on every rank (collective over the private communicator).
inline void init_grid(int id, const char *name, std::vector<int> dims) {
    MPI_Comm world = comm();
    if ((int)grids().size() <= id) grids().resize(id + 1);
    Grid &g = grids()[id];
    if (g.cart != MPI_COMM_NULL || g.member) {  // already set up by this initialization
        if (g.dims != dims) fail("process grid %d (%s) initialized twice with different shapes", id, name);
        return;
    }
    g.name = name;
    g.dims = dims;
    long long size = 1;
    for (int d : dims) size *= d;
    int wsize = world_size(), wrank = world_rank();
    if (size > wsize) {
        std::string shape;
        for (size_t d = 0; d < dims.size(); ++d) shape += (d ? "," : "") + std::to_string(dims[d]);
        fail("process grid (%s) of %s needs %lld MPI ranks, but only %d were started", shape.c_str(), name, size,
             wsize);
    }
    g.member = wrank < size;
    g.coords.assign(dims.size(), 0);
    if (dims.empty()) {  // a 0-d grid: rank 0 alone
        check(MPI_Comm_split(world, g.member ? 0 : MPI_UNDEFINED, wrank, &g.cart), "MPI_Comm_split");
        return;
    }
    // Ranks beyond prod(dims) get MPI_COMM_NULL: one collective call, no intermediate communicator.
    std::vector<int> periods(dims.size(), 0);
    check(MPI_Cart_create(world, (int)dims.size(), g.dims.data(), periods.data(), 0, &g.cart), "MPI_Cart_create");
    if (!g.member) return;
    int crank;
    MPI_Comm_rank(g.cart, &crank);
    check(MPI_Cart_coords(g.cart, crank, (int)dims.size(), g.coords.data()), "MPI_Cart_coords");
}

// Frees every plan, datatype and communicator of this program, then the private communicator (the
// program's exit code; idempotent; a no-op once MPI is finalized).
inline void free_grids() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    if (!init || fin) {
        cleanups().clear();
        grids().clear();
        private_comm() = MPI_COMM_NULL;
        return;
    }
    std::vector<void (*)()> fs;
    fs.swap(cleanups());
    for (auto it = fs.rbegin(); it != fs.rend(); ++it) (*it)();
    for (Grid &g : grids()) {
        for (auto &kv : g.subs)
            if (kv.second != MPI_COMM_NULL) MPI_Comm_free(&kv.second);
        if (g.cart != MPI_COMM_NULL) MPI_Comm_free(&g.cart);
    }
    grids().clear();
    if (private_comm() != MPI_COMM_NULL) MPI_Comm_free(&private_comm());
    private_comm() = MPI_COMM_NULL;
}

inline Grid &grid(int id) {
    if (id < 0 || id >= (int)grids().size()) fail("unknown process grid %d", id);
    return grids()[id];
}

// Grid coordinate `d` of this rank (0 where the rank is outside the grid).
inline int coord(int id, int d) { return grid(id).coords[d]; }
inline int member(int id) { return grid(id).member ? 1 : 0; }

// MPI datatypes of the element types DaCe uses.
inline MPI_Datatype mpi_type(const bool *) { return MPI_C_BOOL; }
inline MPI_Datatype mpi_type(const int8_t *) { return MPI_INT8_T; }
inline MPI_Datatype mpi_type(const uint8_t *) { return MPI_UINT8_T; }
inline MPI_Datatype mpi_type(const int16_t *) { return MPI_INT16_T; }
inline MPI_Datatype mpi_type(const uint16_t *) { return MPI_UINT16_T; }
inline MPI_Datatype mpi_type(const int32_t *) { return MPI_INT32_T; }
inline MPI_Datatype mpi_type(const uint32_t *) { return MPI_UINT32_T; }
inline MPI_Datatype mpi_type(const long *) { return MPI_LONG; }
inline MPI_Datatype mpi_type(const unsigned long *) { return MPI_UNSIGNED_LONG; }
inline MPI_Datatype mpi_type(const long long *) { return MPI_LONG_LONG; }
inline MPI_Datatype mpi_type(const unsigned long long *) { return MPI_UNSIGNED_LONG_LONG; }
inline MPI_Datatype mpi_type(const float *) { return MPI_FLOAT; }
inline MPI_Datatype mpi_type(const double *) { return MPI_DOUBLE; }
inline MPI_Datatype mpi_type(const std::complex<float> *) { return MPI_C_FLOAT_COMPLEX; }
inline MPI_Datatype mpi_type(const std::complex<double> *) { return MPI_C_DOUBLE_COMPLEX; }

enum Op { OP_NONE = 0, OP_SUM = 1, OP_PROD = 2, OP_MIN = 3, OP_MAX = 4 };

inline MPI_Op mpi_op(int op) {
    switch (op) {
        case OP_SUM: return MPI_SUM;
        case OP_PROD: return MPI_PROD;
        case OP_MIN: return MPI_MIN;
        case OP_MAX: return MPI_MAX;
    }
    fail("unsupported reduction operator %d", op);
    return MPI_OP_NULL;
}

template <typename T>
T identity(int op) {
    switch (op) {
        case OP_PROD: return T(1);
        case OP_MIN: return std::numeric_limits<T>::max();
        case OP_MAX: return std::numeric_limits<T>::lowest();
    }
    return T(0);
}
template <>
inline std::complex<float> identity<std::complex<float>>(int op) {
    return std::complex<float>(op == OP_PROD ? 1.0f : 0.0f);
}
template <>
inline std::complex<double> identity<std::complex<double>>(int op) {
    return std::complex<double>(op == OP_PROD ? 1.0 : 0.0);
}

// How one array dimension of a constraint maps onto the grid: the rank at grid coordinates c holds
// indices [offset + coef * c[grid_dim], ... + block) of that dimension (grid_dim < 0: same for all ranks).
struct DimMap {
    long long offset;
    long long coef;
    int grid_dim;
    long long block;
    long long stride;  // of the global array, in elements
};

// The block of a global array that one rank holds, as a datatype whose extent is one element, so that
// per-rank displacements can be given in elements. Any block size (large counts: see `repeat`).
inline MPI_Datatype block_type(MPI_Datatype base, const std::vector<DimMap> &dm) {
    MPI_Aint ext = extent_of(base);
    MPI_Datatype t = base;
    bool own = false;
    long long contiguous = 1;  // elements `t` covers without gaps (0: not contiguous)
    for (int j = (int)dm.size() - 1; j >= 0; --j) {
        MPI_Datatype nt;
        if (contiguous > 0 && dm[j].stride == contiguous) {
            // Rows that follow each other in memory: a contiguous type lets MPI copy whole runs.
            nt = repeat(dm[j].block, t, (MPI_Aint)(contiguous * ext));
            contiguous *= dm[j].block;
        } else {
            nt = repeat(dm[j].block, t, (MPI_Aint)(dm[j].stride * ext));
            contiguous = 0;
        }
        if (own) MPI_Type_free(&t);
        t = nt;
        own = true;
    }
    MPI_Datatype r;
    check(MPI_Type_create_resized(t, 0, ext, &r), "MPI_Type_create_resized");
    check(MPI_Type_commit(&r), "MPI_Type_commit");
    if (own) MPI_Type_free(&t);
    return r;
}

// One scatter/gather site's plan, built at its first call and kept until exit.
struct Plan {
    unsigned part_mask = 0, repl_mask = 0;
    MPI_Comm part = MPI_COMM_NULL, repl = MPI_COMM_NULL;
    bool repl_root = true;
    int repl_size = 1, part_size = 1, part_rank = 0;
    long long count = 1;
    long long root_disp = 0;  // element displacement of the root's own block in the global array
    Count local;              // this rank's block in its local buffer: count elements as (type, n)
    // On the partition root: one block datatype and every rank's displacement, built once.
    MPI_Datatype block = MPI_DATATYPE_NULL;
    std::vector<int> counts, displs;
    bool large_displs = false;          // some displacement is above the threshold: MPI-4 v-calls
    std::vector<MPI_Count> counts_c;    // (only then)
    std::vector<MPI_Aint> displs_c;
};

inline Plan make_plan(Grid &g, const std::vector<DimMap> &dm) {
    Plan p;
    for (const DimMap &d : dm)
        if (d.grid_dim >= 0) p.part_mask |= 1u << d.grid_dim;
    unsigned all = (g.dims.size() >= 32) ? ~0u : ((1u << g.dims.size()) - 1u);
    p.repl_mask = all & ~p.part_mask;
    p.part = g.sub(p.part_mask);
    p.repl = g.sub(p.repl_mask);
    for (size_t d = 0; d < g.dims.size(); ++d)
        if (((p.repl_mask >> d) & 1u) && g.coords[d] != 0) p.repl_root = false;
    MPI_Comm_size(p.repl, &p.repl_size);
    MPI_Comm_size(p.part, &p.part_size);
    MPI_Comm_rank(p.part, &p.part_rank);
    for (const DimMap &d : dm) p.count *= d.block;
    return p;
}

// Element displacement of the block held by every rank of the partition sub-grid (called on its root,
// once per site: O(P)).
inline void displacements(Grid &g, const Plan &p, const std::vector<DimMap> &dm, std::vector<long long> &displs) {
    int n = p.part_size;
    std::vector<int> kept;
    for (size_t d = 0; d < g.dims.size(); ++d)
        if ((p.part_mask >> d) & 1u) kept.push_back((int)d);
    displs.assign(n, 0);
    std::vector<int> sc(kept.size() > 0 ? kept.size() : 1, 0), full(g.dims.size() > 0 ? g.dims.size() : 1, 0);
    for (int q = 0; q < n; ++q) {
        if (!kept.empty()) check(MPI_Cart_coords(p.part, q, (int)kept.size(), sc.data()), "MPI_Cart_coords");
        for (size_t i = 0; i < full.size(); ++i) full[i] = 0;
        for (size_t i = 0; i < kept.size(); ++i) full[kept[i]] = sc[i];
        long long disp = 0;
        for (const DimMap &d : dm) {
            long long start = d.offset + (d.grid_dim >= 0 ? d.coef * full[d.grid_dim] : 0);
            disp += start * d.stride;
        }
        if (disp < 0) fail("negative displacement %lld", disp);
        displs[q] = disp;
    }
}

// Plans of every scatter and gather site, keyed by grid, element type and block map: built at the first
// call (sizes may depend on the program's symbols) and kept until the program exits, so a call makes
// only its MPI calls.
struct PlanKey {
    int gid;
    MPI_Datatype base;
    std::vector<long long> dims;
    bool operator<(const PlanKey &o) const {
        if (gid != o.gid) return gid < o.gid;
        if (base != o.base) return std::less<MPI_Datatype>()(base, o.base);
        return dims < o.dims;
    }
};

inline std::map<PlanKey, Plan> &plans() {
    static std::map<PlanKey, Plan> m;
    return m;
}

inline void free_plans() {
    for (auto &kv : plans()) {
        if (kv.second.block != MPI_DATATYPE_NULL) MPI_Type_free(&kv.second.block);
        kv.second.local.release();
    }
    plans().clear();
}

inline Plan &cached_plan(int gid, MPI_Datatype base, const std::vector<DimMap> &dm) {
    static PlanKey key;  // reused: a lookup allocates nothing
    key.gid = gid;
    key.base = base;
    key.dims.clear();
    for (const DimMap &d : dm) {
        key.dims.push_back(d.offset);
        key.dims.push_back(d.coef);
        key.dims.push_back(d.grid_dim);
        key.dims.push_back(d.block);
        key.dims.push_back(d.stride);
    }
    auto it = plans().find(key);
    if (it != plans().end()) return it->second;
    at_exit(free_plans);
    Grid &g = grid(gid);
    Plan p = make_plan(g, dm);
    for (const DimMap &d : dm) p.root_disp += d.offset * d.stride;
    p.local = large_count(p.count, base);
    if (p.repl_root && p.part_rank == 0) {
        std::vector<long long> displs;
        displacements(g, p, dm, displs);
        for (long long d : displs)
            if (!fits(d)) p.large_displs = true;
        if (p.large_displs) {
#if MPI_VERSION >= 4
            p.counts_c.assign(displs.size(), 1);
            p.displs_c.assign(displs.begin(), displs.end());
#else
            fail("a block displacement exceeds the MPI int range (MPI 4 large-count calls are needed)");
#endif
        } else {
            p.counts.assign(displs.size(), 1);
            p.displs.assign(displs.begin(), displs.end());
        }
        p.block = block_type(base, dm);
    }
    return plans().emplace(key, std::move(p)).first->second;
}

// Copies the block described by `dm` out of (into) the global array on this rank, element by element
// along the innermost dimension: the root's own part of a broadcast, which needs no MPI.
template <typename T>
void copy_block(const T *global, T *local, const std::vector<DimMap> &dm, long long disp, bool to_local) {
    int nd = (int)dm.size();
    if (nd == 0) {
        if (to_local) local[0] = global[disp];
        return;
    }
    long long inner = dm[nd - 1].block, istride = dm[nd - 1].stride;
    long long outer = 1;
    for (int j = 0; j < nd - 1; ++j) outer *= dm[j].block;
    std::vector<long long> idx(nd > 1 ? nd - 1 : 1, 0);
    for (long long o = 0; o < outer; ++o) {
        long long off = disp;
        for (int j = 0; j < nd - 1; ++j) off += idx[j] * dm[j].stride;
        T *l = local + o * inner;
        const T *gp = global + off;
        if (istride == 1)
            std::copy(gp, gp + inner, l);
        else
            for (long long i = 0; i < inner; ++i) l[i] = gp[i * istride];
        for (int j = nd - 2; j >= 0; --j) {
            if (++idx[j] < dm[j].block) break;
            idx[j] = 0;
        }
    }
}

// Root (rank 0) -> grid: MPI_Scatterv over the partition sub-grid, then MPI_Bcast over the
// replication sub-grid. A block that every rank holds whole (a replicated operand) is broadcast from
// the global array itself, and the root copies its own part after the broadcast has left. With
// `identity_fill`, replicas other than the first get the reduction identity instead (an accumulated
// output: its prior value must be counted once).
template <typename T>
void scatter(int gid, const T *global, T *local, const std::vector<DimMap> &dm, int identity_fill, int op) {
    Grid &g = grid(gid);
    if (!g.member) return;
    MPI_Datatype base = mpi_type(local);
    Plan &p = cached_plan(gid, base, dm);
    if (p.part_size == 1 && p.repl_size > 1 && !identity_fill) {
        if (p.repl_root) {
            check(MPI_Bcast(const_cast<T *>(global) + p.root_disp, 1, p.block, 0, p.repl), "MPI_Bcast");
            copy_block(global, local, dm, p.root_disp, true);
        } else {
            check(MPI_Bcast(local, p.local.n, p.local.type, 0, p.repl), "MPI_Bcast");
        }
        return;
    }
    if (p.repl_root) {
        bool root = p.part_rank == 0;
#if MPI_VERSION >= 4
        if (root && p.large_displs)
            check(MPI_Scatterv_c(global, p.counts_c.data(), p.displs_c.data(), p.block, local, (MPI_Count)p.local.n,
                                 p.local.type, 0, p.part),
                  "MPI_Scatterv_c");
        else
#endif
            check(MPI_Scatterv(global, root ? p.counts.data() : nullptr, root ? p.displs.data() : nullptr,
                               root ? p.block : base, local, p.local.n, p.local.type, 0, p.part),
                  "MPI_Scatterv");
    }
    if (p.repl_size > 1) {
        if (identity_fill) {
            if (!p.repl_root) {
                T v = identity<T>(op);
                for (long long i = 0; i < p.count; ++i) local[i] = v;
            }
        } else {
            check(MPI_Bcast(local, p.local.n, p.local.type, 0, p.repl), "MPI_Bcast");
        }
    }
}

// Grid -> root: MPI_Reduce over the replication sub-grid (only for a conflicted write; otherwise the
// first replica's block is the result), then MPI_Gatherv over the partition sub-grid into the global array.
template <typename T>
void gather(int gid, const T *local_in, T *global, const std::vector<DimMap> &dm, int op) {
    // The local block is dead after this call, so the reduction may overwrite it.
    T *local = const_cast<T *>(local_in);
    Grid &g = grid(gid);
    if (!g.member) return;
    MPI_Datatype base = mpi_type(local);
    Plan &p = cached_plan(gid, base, dm);
    if (op != OP_NONE && p.repl_size > 1)
        reduce_any(p.repl_root ? MPI_IN_PLACE : (const void *)local, p.repl_root ? (void *)local : nullptr, p.count,
                   base, mpi_op(op), 0, p.repl);
    if (!p.repl_root) return;
    bool root = p.part_rank == 0;
#if MPI_VERSION >= 4
    if (root && p.large_displs) {
        check(MPI_Gatherv_c(local, (MPI_Count)p.local.n, p.local.type, global, p.counts_c.data(), p.displs_c.data(),
                            p.block, 0, p.part),
              "MPI_Gatherv_c");
        return;
    }
#endif
    check(MPI_Gatherv(local, p.local.n, p.local.type, global, root ? p.counts.data() : nullptr,
                      root ? p.displs.data() : nullptr, root ? p.block : base, 0, p.part),
          "MPI_Gatherv");
}

template <typename T>
T combine_values(T a, T b, int op) {
    switch (op) {
        case OP_SUM: return a + b;
        case OP_PROD: return a * b;
        case OP_MIN: return b < a ? b : a;
        case OP_MAX: return b > a ? b : a;
    }
    return b;
}
template <typename T>
std::complex<T> combine_values(std::complex<T> a, std::complex<T> b, int op) {
    if (op == OP_PROD) return a * b;
    if (op == OP_SUM) return a + b;
    fail("min/max of complex values");
    return b;
}

// ---------------------------------------------------------------------------------------------------
// General blocks (any per-rank rectangular block: uneven tiles, halos, symbolic sizes). A callback
// gives, for the grid coordinates of a rank, the start and size of its block in every dimension.
// ---------------------------------------------------------------------------------------------------
using BlockFn = std::function<void(const int *coords, long long *start, long long *count)>;

struct Block {
    std::vector<long long> start, count;
    long long elements() const {
        long long n = 1;
        for (long long c : count) n *= (c > 0 ? c : 0);
        return n;
    }
};

// Every rank's block (set-up only: O(P)).
inline std::vector<Block> all_blocks(Grid &g, int ndim, const BlockFn &fn) {
    int n;
    MPI_Comm_size(g.cart, &n);
    std::vector<Block> out(n);
    std::vector<int> c(g.dims.size() > 0 ? g.dims.size() : 1, 0);
    for (int q = 0; q < n; ++q) {
        if (!g.dims.empty()) check(MPI_Cart_coords(g.cart, q, (int)g.dims.size(), c.data()), "MPI_Cart_coords");
        out[q].start.assign(ndim, 0);
        out[q].count.assign(ndim, 1);
        if (ndim > 0) fn(c.data(), out[q].start.data(), out[q].count.data());
    }
    return out;
}

inline Block block_at(const int *coords, int ndim, const BlockFn &fn) {
    Block b;
    b.start.assign(ndim, 0);
    b.count.assign(ndim, 1);
    if (ndim > 0) fn(coords, b.start.data(), b.count.data());
    return b;
}

// A block of `count` elements per dimension laid out with `strides` (elements); extent one element.
inline MPI_Datatype strided_block(MPI_Datatype base, const Block &b, const long long *strides) {
    std::vector<DimMap> dm(b.count.size());
    for (size_t j = 0; j < dm.size(); ++j) dm[j] = DimMap{0, 0, -1, b.count[j], strides[j]};
    return block_type(base, dm);
}

inline long long linear(const Block &b, const long long *strides) {
    long long off = 0;
    for (size_t j = 0; j < b.start.size(); ++j) off += b.start[j] * strides[j];
    return off;
}

// A block computed when a site is first used (from this call's initialised symbol values) must lie in the
// array and fit its local buffer; the message names the array, the map whose grid holds the block and the
// grid rank that owns it.
inline void check_block(const Block &b, const long long *shape, const long long *cap, const char *array,
                        const Grid &g, int owner) {
    for (size_t j = 0; j < b.start.size(); ++j) {
        if (b.count[j] <= 0) continue;
        if (b.start[j] < 0 || b.start[j] + b.count[j] > shape[j])
            fail("block of '%s' for map '%s' on grid rank %d: [%lld, %lld) in dimension %zu is outside the array "
                 "(size %lld)", array, g.name.c_str(), owner, b.start[j], b.start[j] + b.count[j], j, shape[j]);
        if (b.count[j] > cap[j])
            fail("block of '%s' for map '%s' on grid rank %d has %lld elements in dimension %zu, more than its local "
                 "buffer (%lld)", array, g.name.c_str(), owner, b.count[j], j, cap[j]);
    }
}
inline void check_blocks(const std::vector<Block> &blocks, const long long *shape, const long long *cap,
                         const char *array, const Grid &g) {
    for (size_t q = 0; q < blocks.size(); ++q) check_block(blocks[q], shape, cap, array, g, (int)q);
}

// A committed datatype `t` shifted `byte_disp` bytes (for displacements beyond the int range).
inline MPI_Datatype shifted(MPI_Datatype t, long long byte_disp) {
    MPI_Datatype r;
    int one = 1;
    MPI_Aint d = (MPI_Aint)byte_disp;
    check(MPI_Type_create_struct(1, &one, &d, &t, &r), "MPI_Type_create_struct");
    check(MPI_Type_commit(&r), "MPI_Type_commit");
    return r;
}

// Rank 0's side of an MPI_Alltoallw over blocks: one datatype and byte displacement per rank (a
// displacement beyond the threshold is moved into the datatype). Built once per site.
inline void global_side(const std::vector<Block> &blocks, MPI_Datatype base, MPI_Aint ext, const long long *gstrides,
                        std::vector<int> &counts, std::vector<int> &displs, std::vector<MPI_Datatype> &types) {
    for (size_t q = 0; q < blocks.size(); ++q) {
        if (blocks[q].elements() == 0) continue;
        long long disp = linear(blocks[q], gstrides) * (long long)ext;
        types[q] = strided_block(base, blocks[q], gstrides);
        counts[q] = 1;
        if (fits(disp)) {
            displs[q] = (int)disp;
        } else {
            MPI_Datatype t = shifted(types[q], disp);
            MPI_Type_free(&types[q]);
            types[q] = t;
            displs[q] = 0;
        }
    }
}

// The values of a block callback at a fixed set of grid coordinates whose number does not depend on P
// (this rank's, the origin, each unit vector, the far corner). Block callbacks are (piecewise) affine in
// the coordinates, so the same values mean the same blocks on every rank: a call recomputes these and
// reuses its site's plan when they have not changed (e.g. a symbol of the enclosing loop did not).
inline void probe_blocks(const Grid &g, int ndim, const BlockFn &fn, std::vector<long long> &out, bool own = true) {
    size_t nd = g.dims.size();
    static std::vector<int> c;
    c.assign(nd > 0 ? nd : 1, 0);
    size_t need = (nd + (own ? 3 : 2)) * 2 * (size_t)ndim, at = 0;
    out.resize(need);
    auto one = [&]() {
        for (int j = 0; j < ndim; ++j) out[at + j] = 0, out[at + ndim + j] = 1;
        if (ndim > 0) fn(c.data(), out.data() + at, out.data() + at + ndim);
        at += 2 * (size_t)ndim;
    };
    if (own) {
        for (size_t d = 0; d < nd; ++d) c[d] = g.coords[d];
        one();
    }
    for (size_t d = 0; d < nd; ++d) c[d] = 0;
    one();
    for (size_t d = 0; d < nd; ++d) {
        c[d] = g.dims[d] > 1 ? 1 : 0;
        one();
        c[d] = 0;
    }
    for (size_t d = 0; d < nd; ++d) c[d] = g.dims[d] - 1;
    one();
}

// One scatter_blocks / gather_blocks call site (identified by its callback's type, the grid, the element
// type and the shapes): its MPI arguments, built at its first call and kept until exit.
struct BlockSite {
    std::vector<long long> probe;
    bool built = false;
    Block mine;
    // MPI_Alltoallw arguments (O(P) arrays on every rank: the call's signature needs them)
    std::vector<int> sc, rc, sd, rd;
    std::vector<MPI_Datatype> st, rt, owned;
    // combine (root): blocks, packed counts and displacements, staging buffer, written flags
    std::vector<Block> blocks;
    std::vector<int> counts, displs;
    std::vector<MPI_Count> counts_c;
    std::vector<MPI_Aint> displs_c;
    bool large = false;
    long long total = 0;
    MPI_Datatype mine_type = MPI_DATATYPE_NULL;
    std::vector<char> staging, touched;

    void release() {
        for (MPI_Datatype &t : owned)
            if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
        owned.clear();
        mine_type = MPI_DATATYPE_NULL;
        built = false;
    }
};

inline std::type_index fn_type(const BlockFn &fn) { return std::type_index(fn ? fn.target_type() : typeid(void)); }

// Finds (or adds) the site; `fresh` tells whether its plan must be (re)built.
inline BlockSite &block_site(int kind, int gid, MPI_Datatype base, int ndim, const long long *gshape,
                             const long long *gstrides, const long long *lshape, const long long *lstrides,
                             const BlockFn &fn, bool &fresh) {
    static std::vector<long long> shapes, probe;
    shapes.assign(gshape, gshape + ndim);
    shapes.insert(shapes.end(), gstrides, gstrides + ndim);
    shapes.insert(shapes.end(), lshape, lshape + ndim);
    shapes.insert(shapes.end(), lstrides, lstrides + ndim);
    probe_blocks(grid(gid), ndim, fn, probe);
    SiteKey key{fn_type(fn), std::type_index(typeid(void)), {kind, gid, ndim, 0}, base, shapes};
    return SiteCache<BlockSite>::get(key, probe, fresh);
}

// Root -> every rank of the grid: its block, with one MPI_Alltoallw (only the root sends). With
// `identity_fill`, nothing is sent: every rank starts from the operator's identity (an accumulated
// output; the root adds the prior value when gathering).
template <typename T>
void scatter_blocks(int gid, const char *array, const T *global, T *local, int ndim, const long long *gshape,
                    const long long *gstrides, const long long *lshape, const long long *lstrides, BlockFn fn,
                    int identity_fill, int op) {
    Grid &g = grid(gid);
    if (!g.member) return;
    if (identity_fill) {
        long long cap = 1;
        for (int j = 0; j < ndim; ++j) cap *= lshape[j];
        T v = identity<T>(op);
        for (long long i = 0; i < cap; ++i) local[i] = v;
        return;
    }
    MPI_Datatype base = mpi_type(local);
    bool fresh = false;
    BlockSite &s = block_site(0, gid, base, ndim, gshape, gstrides, lshape, lstrides, fn, fresh);
    if (fresh) {
        int n, me;
        MPI_Comm_size(g.cart, &n);
        MPI_Comm_rank(g.cart, &me);
        MPI_Aint ext = extent_of(base);
        s.mine = block_at(g.coords.data(), ndim, fn);
        check_block(s.mine, gshape, lshape, array, g, me);
        s.sc.assign(n, 0), s.rc.assign(n, 0), s.sd.assign(n, 0), s.rd.assign(n, 0);
        s.st.assign(n, MPI_BYTE), s.rt.assign(n, MPI_BYTE);
        if (me == 0) {
            std::vector<Block> blocks = all_blocks(g, ndim, fn);
            check_blocks(blocks, gshape, lshape, array, g);
            global_side(blocks, base, ext, gstrides, s.sc, s.sd, s.st);
            for (int q = 0; q < n; ++q)
                if (s.sc[q]) s.owned.push_back(s.st[q]);
        }
        if (s.mine.elements() > 0) {
            s.rt[0] = strided_block(base, s.mine, lstrides);
            s.rc[0] = 1;
            s.owned.push_back(s.rt[0]);
        }
    }
    check(MPI_Alltoallw(global, s.sc.data(), s.sd.data(), s.st.data(), local, s.rc.data(), s.rd.data(), s.rt.data(),
                        g.cart),
          "MPI_Alltoallw");
}

// Every rank of the grid -> root. Disjoint, non-conflicted blocks go straight into the global array
// (MPI_Alltoallw, only the root receives). Otherwise (`combine`) the root receives every block into a
// staging buffer (MPI_Gatherv) and merges: with an operator, accumulated outputs are combined onto the
// prior value and other outputs onto the first block written; without one, a single writer wins.
template <typename T>
void gather_blocks(int gid, const char *array, const T *local_in, T *global, int ndim, const long long *gshape,
                   const long long *gstrides, const long long *lshape, const long long *lstrides, BlockFn fn, int op,
                   int combine, int accumulate) {
    Grid &g = grid(gid);
    if (!g.member) return;
    T *local = const_cast<T *>(local_in);
    MPI_Datatype base = mpi_type(local);
    bool fresh = false;
    BlockSite &s = block_site(combine ? 2 : 1, gid, base, ndim, gshape, gstrides, lshape, lstrides, fn, fresh);
    int me = 0;
    MPI_Comm_rank(g.cart, &me);
    if (fresh) {
        int n;
        MPI_Comm_size(g.cart, &n);
        MPI_Aint ext = extent_of(base);
        s.mine = block_at(g.coords.data(), ndim, fn);
        check_block(s.mine, gshape, lshape, array, g, me);
        if (s.mine.elements() > 0) {
            s.mine_type = strided_block(base, s.mine, lstrides);
            s.owned.push_back(s.mine_type);
        }
        std::vector<Block> blocks;
        if (me == 0) {
            blocks = all_blocks(g, ndim, fn);
            check_blocks(blocks, gshape, lshape, array, g);
        }
        if (!combine) {
            s.sc.assign(n, 0), s.rc.assign(n, 0), s.sd.assign(n, 0), s.rd.assign(n, 0);
            s.st.assign(n, MPI_BYTE), s.rt.assign(n, MPI_BYTE);
            if (s.mine_type != MPI_DATATYPE_NULL) {
                s.st[0] = s.mine_type;
                s.sc[0] = 1;
            }
            if (me == 0) {
                global_side(blocks, base, ext, gstrides, s.rc, s.rd, s.rt);
                for (int q = 0; q < n; ++q)
                    if (s.rc[q]) s.owned.push_back(s.rt[q]);
            }
        } else if (me == 0) {
            // Staging: the root receives each rank's block packed, in rank order.
            s.counts.assign(n, 0), s.displs.assign(n, 0);
            s.total = 0;
            s.large = false;
            for (int q = 0; q < n; ++q) {
                long long c = blocks[q].elements();
                if (!fits(c) || !fits(s.total)) s.large = true;
                s.counts[q] = (int)std::min(c, (long long)std::numeric_limits<int>::max());
                s.displs[q] = (int)std::min(s.total, (long long)std::numeric_limits<int>::max());
                s.total += c;
            }
            if (s.large) {
#if MPI_VERSION >= 4
                s.counts_c.assign(n, 0), s.displs_c.assign(n, 0);
                long long t = 0;
                for (int q = 0; q < n; ++q) s.counts_c[q] = blocks[q].elements(), s.displs_c[q] = t, t += s.counts_c[q];
#else
                fail("gathering '%s' stages %lld elements, beyond the MPI int range (needs MPI 4)", array, s.total);
#endif
            }
            s.blocks = std::move(blocks);
            s.staging.assign((size_t)s.total * sizeof(T), 0);
            long long span = 1;
            for (int j = 0; j < ndim; ++j) span += (gshape[j] - 1) * gstrides[j];
            s.touched.assign(op != OP_NONE && !accumulate ? (size_t)span : 0, 0);
        }
    }
    if (!combine) {
        check(MPI_Alltoallw(local, s.sc.data(), s.sd.data(), s.st.data(), global, s.rc.data(), s.rd.data(),
                            s.rt.data(), g.cart),
              "MPI_Alltoallw");
        return;
    }
    T *staging = reinterpret_cast<T *>(s.staging.data());
    int scount = s.mine_type != MPI_DATATYPE_NULL ? 1 : 0;
    MPI_Datatype stype = scount ? s.mine_type : base;
#if MPI_VERSION >= 4
    if (me == 0 && s.large)
        check(MPI_Gatherv_c(local, scount, stype, staging, s.counts_c.data(), s.displs_c.data(), base, 0, g.cart),
              "MPI_Gatherv_c");
    else
#endif
        check(MPI_Gatherv(local, scount, stype, staging, me == 0 ? s.counts.data() : nullptr,
                          me == 0 ? s.displs.data() : nullptr, base, 0, g.cart),
              "MPI_Gatherv");
    if (me != 0) return;
    // The merge: the root's share of the work, proportional to the data it receives.
    if (!s.touched.empty()) std::fill(s.touched.begin(), s.touched.end(), 0);
    long long at = 0;
    for (const Block &b : s.blocks) {
        long long cnt = b.elements();
        if (cnt == 0) continue;
        std::vector<long long> idx(ndim, 0);
        for (long long i = 0; i < cnt; ++i) {
            long long off = 0;
            for (int j = 0; j < ndim; ++j) off += (b.start[j] + idx[j]) * gstrides[j];
            T v = staging[at + i];
            if (op == OP_NONE) {
                global[off] = v;
            } else if (accumulate || s.touched[off]) {
                global[off] = combine_values(global[off], v, op);
            } else {
                global[off] = v;
                s.touched[off] = 1;
            }
            for (int j = ndim - 1; j >= 0; --j) {
                if (++idx[j] < b.count[j]) break;
                idx[j] = 0;
            }
        }
        at += cnt;
    }
}

// ---------------------------------------------------------------------------------------------------
// Redistribution between two grids without rank 0 (fused gather + scatter of an intermediate). Each
// rank sends each destination rank the intersection of its own source block with that rank's
// destination block (packed, one MPI_Alltoallv over the private communicator) and unpacks. With an
// operator, the source blocks are partial results and the destination combines every piece
// (reduce-scatter); without one, among ranks holding the same source block only the first sends.
// At a site's first call every rank computes every rank's blocks once (O(P), replicas found by sorting,
// O(P log P)) and keeps only its peers with something to exchange; a call packs, exchanges, unpacks.
// ---------------------------------------------------------------------------------------------------
inline std::vector<Block> world_blocks(const std::vector<int> &dims, int ndim, const BlockFn &fn) {
    long long size = 1;
    for (int d : dims) size *= d;
    std::vector<Block> out(world_size());
    std::vector<int> c(dims.size() > 0 ? dims.size() : 1, 0);
    for (int w = 0; w < (int)out.size(); ++w) {
        out[w].start.assign(ndim, 0);
        out[w].count.assign(ndim, 0);
        if (w >= size) continue;  // not in this grid: holds nothing
        long long rest = w;
        for (int d = (int)dims.size() - 1; d >= 0; --d) {
            c[d] = (int)(rest % dims[d]);
            rest /= dims[d];
        }
        out[w].count.assign(ndim, 1);
        if (ndim > 0) fn(c.data(), out[w].start.data(), out[w].count.data());
    }
    return out;
}

inline Block intersect(const Block &a, const Block &b) {
    Block r;
    size_t n = a.start.size();
    r.start.assign(n, 0);
    r.count.assign(n, 0);
    for (size_t j = 0; j < n; ++j) {
        long long lo = std::max(a.start[j], b.start[j]);
        long long hi = std::min(a.start[j] + a.count[j], b.start[j] + b.count[j]);
        r.start[j] = lo;
        r.count[j] = hi > lo ? hi - lo : 0;
    }
    return r;
}

// Calls f(offset in `owner`'s local buffer) for every element of `box` in row-major order.
template <typename F>
void for_each(const Block &box, const Block &owner, const long long *lstrides, F f) {
    long long n = box.elements();
    int nd = (int)box.start.size();
    std::vector<long long> idx(nd, 0);
    for (long long i = 0; i < n; ++i) {
        long long off = 0;
        for (int j = 0; j < nd; ++j) off += (box.start[j] + idx[j] - owner.start[j]) * lstrides[j];
        f(off);
        for (int j = nd - 1; j >= 0; --j) {
            if (++idx[j] < box.count[j]) break;
            idx[j] = 0;
        }
    }
}

// Per rank, whether it is the first (lowest) holder of its source block among identical ones (replicas):
// the one that sends it. Found by sorting, O(P log P).
inline std::vector<char> first_holders(const std::vector<Block> &src) {
    std::vector<char> first(src.size(), 1);
    std::map<std::vector<long long>, int> seen;
    std::vector<long long> key;
    for (int w = 0; w < (int)src.size(); ++w) {
        if (src[w].elements() == 0) continue;
        key.assign(src[w].start.begin(), src[w].start.end());
        key.insert(key.end(), src[w].count.begin(), src[w].count.end());
        if (!seen.emplace(key, w).second) first[w] = 0;
    }
    return first;
}

struct Piece {
    int peer;
    Block box;
    long long at;  // element offset in the packed buffer
};

struct RedistSite {
    MPI_Datatype base = MPI_DATATYPE_NULL;
    std::vector<long long> probe;
    bool built = false;
    Block src_me, dst_me;
    std::vector<Piece> sends, recvs;  // only the peers with something to exchange
    std::vector<int> scount, sdispl, rcount, rdispl;  // MPI_Alltoallv arguments (O(P): the call needs them)
    bool large = false;  // a count or displacement beyond the threshold: MPI_Alltoallw with placed types
    std::vector<int> wcount, wdispl;
    std::vector<MPI_Datatype> stypes, rtypes, owned;
    std::vector<char> sbuf, rbuf;

    void release() {
        for (MPI_Datatype &t : owned)
            if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
        owned.clear();
        built = false;
    }
};

template <typename T>
void build_redistribution(RedistSite &s, const char *array, int ndim, int src_gid, const BlockFn &src_fn,
                          int dst_gid, const BlockFn &dst_fn, const long long *dst_lshape, int op) {
    int me = world_rank(), n = world_size();
    std::vector<Block> src = world_blocks(grid(src_gid).dims, ndim, src_fn);
    std::vector<Block> dst = world_blocks(grid(dst_gid).dims, ndim, dst_fn);
    for (int j = 0; j < ndim; ++j)
        if (dst[me].count[j] > dst_lshape[j]) fail("block of '%s' does not fit its local buffer", array);
    // Without an operator, identical source blocks (replicas) send once: from the lowest rank.
    std::vector<char> sends = op == OP_NONE ? first_holders(src) : std::vector<char>(n, 1);
    s.src_me = src[me];
    s.dst_me = dst[me];
    s.sends.clear();
    s.recvs.clear();
    s.scount.assign(n, 0), s.sdispl.assign(n, 0), s.rcount.assign(n, 0), s.rdispl.assign(n, 0);
    long long stotal = 0, rtotal = 0;
    for (int q = 0; q < n; ++q) {
        if (sends[me]) {
            Block b = intersect(src[me], dst[q]);
            long long k = b.elements();
            if (k > 0) s.sends.push_back(Piece{q, b, stotal});
            s.scount[q] = (int)std::min(k, (long long)std::numeric_limits<int>::max());
            s.sdispl[q] = (int)std::min(stotal, (long long)std::numeric_limits<int>::max());
            stotal += k;
        }
        if (sends[q]) {
            Block b = intersect(src[q], dst[me]);
            long long r = b.elements();
            if (r > 0) s.recvs.push_back(Piece{q, b, rtotal});
            s.rcount[q] = (int)std::min(r, (long long)std::numeric_limits<int>::max());
            s.rdispl[q] = (int)std::min(rtotal, (long long)std::numeric_limits<int>::max());
            rtotal += r;
        }
    }
    s.sbuf.assign((size_t)stotal * sizeof(T), 0);
    s.rbuf.assign((size_t)rtotal * sizeof(T), 0);
    // `large` must be the same on every rank (Alltoallv and Alltoallw do not match), without talking:
    // every rank's packed totals are bounded by the sum of all blocks, which every rank knows.
    long long all = 0;
    for (int w = 0; w < n; ++w) all += src[w].elements() + dst[w].elements();
    s.large = !fits(all);
    if (s.large) {
        MPI_Datatype base = s.base;
        MPI_Aint ext = extent_of(base);
        s.wcount.assign(n, 0), s.wdispl.assign(n, 0);
        s.stypes.assign(n, MPI_BYTE), s.rtypes.assign(n, MPI_BYTE);
        std::vector<int> &sc = s.scount, &rc = s.rcount;
        sc.assign(n, 0), rc.assign(n, 0);
        for (const Piece &p : s.sends) {
            s.stypes[p.peer] = placed(p.box.elements(), base, p.at * (long long)ext);
            s.owned.push_back(s.stypes[p.peer]);
            sc[p.peer] = 1;
        }
        for (const Piece &p : s.recvs) {
            s.rtypes[p.peer] = placed(p.box.elements(), base, p.at * (long long)ext);
            s.owned.push_back(s.rtypes[p.peer]);
            rc[p.peer] = 1;
        }
    }
}

template <typename T>
void redistribute(const char *array, int ndim, int src_gid, BlockFn src_fn, const T *src_local,
                  const long long *src_lstrides, int dst_gid, BlockFn dst_fn, T *dst_local,
                  const long long *dst_lshape, const long long *dst_lstrides, int op) {
    MPI_Datatype base = mpi_type(dst_local);
    static std::vector<long long> shapes, probe, probe2;
    shapes.assign(src_lstrides, src_lstrides + ndim);
    shapes.insert(shapes.end(), dst_lshape, dst_lshape + ndim);
    shapes.insert(shapes.end(), dst_lstrides, dst_lstrides + ndim);
    // Rank-independent probes only: every rank must decide to rebuild at the same call.
    probe_blocks(grid(src_gid), ndim, src_fn, probe, false);
    probe_blocks(grid(dst_gid), ndim, dst_fn, probe2, false);
    probe.insert(probe.end(), probe2.begin(), probe2.end());
    SiteKey key{fn_type(src_fn), fn_type(dst_fn), {src_gid, dst_gid, ndim, op}, base, shapes};
    bool fresh = false;
    RedistSite &s = SiteCache<RedistSite>::get(key, probe, fresh);
    if (fresh) {  // the same decision on every rank: the probes are rank-independent
        s.base = base;
        build_redistribution<T>(s, array, ndim, src_gid, src_fn, dst_gid, dst_fn, dst_lshape, op);
    }
    T *sbuf = reinterpret_cast<T *>(s.sbuf.data());
    T *rbuf = reinterpret_cast<T *>(s.rbuf.data());
    for (const Piece &p : s.sends) {
        T *out = sbuf + p.at;
        for_each(p.box, s.src_me, src_lstrides, [&](long long off) { *out++ = src_local[off]; });
    }
    if (s.large)
        check(MPI_Alltoallw(sbuf, s.scount.data(), s.wdispl.data(), s.stypes.data(), rbuf, s.rcount.data(),
                            s.wdispl.data(), s.rtypes.data(), comm()),
              "MPI_Alltoallw");
    else
        check(MPI_Alltoallv(sbuf, s.scount.data(), s.sdispl.data(), base, rbuf, s.rcount.data(), s.rdispl.data(), base,
                            comm()),
              "MPI_Alltoallv");
    if (s.dst_me.elements() == 0) return;
    if (op != OP_NONE) {
        T v0 = identity<T>(op);
        for_each(s.dst_me, s.dst_me, dst_lstrides, [&](long long off) { dst_local[off] = v0; });
    }
    for (const Piece &p : s.recvs) {
        const T *in = rbuf + p.at;
        for_each(p.box, s.dst_me, dst_lstrides, [&](long long off) {
            dst_local[off] = op == OP_NONE ? *in : combine_values(dst_local[off], *in, op);
            ++in;
        });
    }
}

// ---------------------------------------------------------------------------------------------------
// Partial results that every holder needs combined (fusion into a replicated consumer): one
// MPI_Allreduce over the sub-grid of the source grid's reduction dimensions (bits of `keep`).
// ---------------------------------------------------------------------------------------------------
template <typename T>
void allreduce(const char *array, int gid, unsigned keep, const T *in, T *out, long long count, int op) {
    (void)array;
    Grid &g = grid(gid);
    if (!g.member) return;
    allreduce_any(in, out, count, mpi_type(out), mpi_op(op), g.sub(keep));
}

}  // namespace dace_partition
}  // namespace
