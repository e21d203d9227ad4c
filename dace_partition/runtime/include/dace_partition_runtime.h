// dace-partition runtime: process grids and grid-mapped scatter/gather over MPI.
//
// Included into the generated code of every lowered SDFG. Everything lives in an anonymous namespace so
// that two lowered programs loaded into one process keep separate grid registries.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <complex>
#include <functional>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {
namespace dace_partition {

// Prints a message naming this rank and ends every rank: a mismatch must never hang the job.
inline void fail(const char *fmt, ...) {
    int rank = -1, init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    fprintf(stderr, "dace_partition: rank %d: %s\n", rank, msg);
    fflush(stderr);
    // Let the launcher forward the message before MPI_Abort tears the job down.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (init) MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
}

inline void check(int err, const char *what) {
    if (err != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, s, &len);
        fail("%s failed: %s", what, s);
    }
}

inline int world_rank() {
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

inline int world_size() {
    int s;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

// A Cartesian process grid over the first prod(dims) ranks of MPI_COMM_WORLD (row-major, no reorder,
// so world rank 0 is grid coordinate (0, ..., 0): the root that holds global arrays).
struct Grid {
    std::string name;
    std::vector<int> dims;
    std::vector<int> coords;
    MPI_Comm cart = MPI_COMM_NULL;
    bool member = false;
    std::map<unsigned, MPI_Comm> subs;

    // Sub-grid keeping the dimensions whose bit is set in `keep` (MPI_Cart_sub, cached).
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

inline void init_mpi() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) MPI_Init(nullptr, nullptr);
}

inline void init_grid(int id, const char *name, std::vector<int> dims) {
    init_mpi();
    if ((int)grids().size() <= id) grids().resize(id + 1);
    Grid &g = grids()[id];
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
    MPI_Comm members = MPI_COMM_NULL;
    check(MPI_Comm_split(MPI_COMM_WORLD, g.member ? 0 : MPI_UNDEFINED, wrank, &members), "MPI_Comm_split");
    g.coords.assign(dims.size(), 0);
    if (!g.member) return;
    if (dims.empty()) {
        g.cart = members;
        return;
    }
    std::vector<int> periods(dims.size(), 0);
    check(MPI_Cart_create(members, (int)dims.size(), g.dims.data(), periods.data(), 0, &g.cart), "MPI_Cart_create");
    MPI_Comm_free(&members);
    int crank;
    MPI_Comm_rank(g.cart, &crank);
    check(MPI_Cart_coords(g.cart, crank, (int)dims.size(), g.coords.data()), "MPI_Cart_coords");
}

inline void free_plans();

inline void free_grids() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    free_plans();
    for (Grid &g : grids()) {
        for (auto &kv : g.subs)
            if (kv.second != MPI_COMM_NULL) MPI_Comm_free(&kv.second);
        if (g.cart != MPI_COMM_NULL) MPI_Comm_free(&g.cart);
    }
    grids().clear();
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
// per-rank displacements can be given in elements.
inline MPI_Datatype block_type(MPI_Datatype base, const std::vector<DimMap> &dm) {
    MPI_Aint lb, ext;
    MPI_Type_get_extent(base, &lb, &ext);
    MPI_Datatype t = base;
    bool own = false;
    long long contiguous = 1;  // elements `t` covers without gaps (0: not contiguous)
    for (int j = (int)dm.size() - 1; j >= 0; --j) {
        MPI_Datatype nt;
        if (contiguous > 0 && dm[j].stride == contiguous) {
            // Rows that follow each other in memory: a contiguous type lets MPI copy whole runs.
            check(MPI_Type_contiguous((int)dm[j].block, t, &nt), "MPI_Type_contiguous");
            contiguous *= dm[j].block;
        } else {
            check(MPI_Type_create_hvector((int)dm[j].block, 1, (MPI_Aint)(dm[j].stride * ext), t, &nt),
                  "MPI_Type_create_hvector");
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

struct Plan {
    unsigned part_mask = 0, repl_mask = 0;
    MPI_Comm part = MPI_COMM_NULL, repl = MPI_COMM_NULL;
    bool repl_root = true;
    int repl_size = 1, part_size = 1, part_rank = 0;
    long long count = 1;
    long long root_disp = 0;  // element displacement of the root's own block in the global array
    // On the partition root: one block datatype and every rank's displacement, built once.
    MPI_Datatype block = MPI_DATATYPE_NULL;
    std::vector<int> counts, displs;
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
    if (p.count > std::numeric_limits<int>::max()) fail("a rank-local block of %lld elements exceeds the MPI count range", p.count);
    return p;
}

// Element displacement of the block held by every rank of the partition sub-grid (called on its root).
inline void displacements(Grid &g, const Plan &p, const std::vector<DimMap> &dm, std::vector<int> &displs) {
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
        if (disp < 0 || disp > std::numeric_limits<int>::max()) fail("displacement %lld exceeds the MPI int range", disp);
        displs[q] = (int)disp;
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
    for (auto &kv : plans())
        if (kv.second.block != MPI_DATATYPE_NULL) MPI_Type_free(&kv.second.block);
    plans().clear();
}

inline Plan &cached_plan(int gid, MPI_Datatype base, const std::vector<DimMap> &dm) {
    PlanKey key{gid, base, {}};
    key.dims.reserve(dm.size() * 5);
    for (const DimMap &d : dm) {
        key.dims.push_back(d.offset);
        key.dims.push_back(d.coef);
        key.dims.push_back(d.grid_dim);
        key.dims.push_back(d.block);
        key.dims.push_back(d.stride);
    }
    auto it = plans().find(key);
    if (it != plans().end()) return it->second;
    Grid &g = grid(gid);
    Plan p = make_plan(g, dm);
    for (const DimMap &d : dm) p.root_disp += d.offset * d.stride;
    if (p.repl_root && p.part_rank == 0) {
        displacements(g, p, dm, p.displs);
        p.counts.assign(p.displs.size(), 1);
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

// Root (world rank 0) -> grid: MPI_Scatterv over the partition sub-grid, then MPI_Bcast over the
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
            check(MPI_Bcast(local, (int)p.count, base, 0, p.repl), "MPI_Bcast");
        }
        return;
    }
    if (p.repl_root) {
        bool root = p.part_rank == 0;
        check(MPI_Scatterv(global, root ? p.counts.data() : nullptr, root ? p.displs.data() : nullptr,
                           root ? p.block : base, local, (int)p.count, base, 0, p.part),
              "MPI_Scatterv");
    }
    if (p.repl_size > 1) {
        if (identity_fill) {
            if (!p.repl_root) {
                T v = identity<T>(op);
                for (long long i = 0; i < p.count; ++i) local[i] = v;
            }
        } else {
            check(MPI_Bcast(local, (int)p.count, base, 0, p.repl), "MPI_Bcast");
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
    if (op != OP_NONE && p.repl_size > 1) {
        if (p.repl_root)
            check(MPI_Reduce(MPI_IN_PLACE, local, (int)p.count, base, mpi_op(op), 0, p.repl), "MPI_Reduce");
        else
            check(MPI_Reduce(local, nullptr, (int)p.count, base, mpi_op(op), 0, p.repl), "MPI_Reduce");
    }
    if (!p.repl_root) return;
    bool root = p.part_rank == 0;
    check(MPI_Gatherv(local, (int)p.count, base, global, root ? p.counts.data() : nullptr,
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

inline void check_block(const Block &b, const long long *shape, const long long *cap, const char *array) {
    for (size_t j = 0; j < b.start.size(); ++j) {
        if (b.count[j] <= 0) continue;
        if (b.start[j] < 0 || b.start[j] + b.count[j] > shape[j])
            fail("block of '%s' [%lld, %lld) in dimension %zu is outside the array (size %lld)", array, b.start[j],
                 b.start[j] + b.count[j], j, shape[j]);
        if (b.count[j] > cap[j])
            fail("block of '%s' has %lld elements in dimension %zu, more than its local buffer (%lld)", array,
                 b.count[j], j, cap[j]);
    }
}

// Rank 0's side of an MPI_Alltoallw over blocks: one datatype and byte displacement per rank.
inline void global_side(const std::vector<Block> &blocks, MPI_Datatype base, MPI_Aint ext, const long long *gstrides,
                        std::vector<int> &counts, std::vector<int> &displs, std::vector<MPI_Datatype> &types) {
    for (size_t q = 0; q < blocks.size(); ++q) {
        if (blocks[q].elements() == 0) continue;
        long long disp = linear(blocks[q], gstrides) * (long long)ext;
        if (disp > std::numeric_limits<int>::max()) fail("byte displacement %lld exceeds the MPI int range", disp);
        types[q] = strided_block(base, blocks[q], gstrides);
        counts[q] = 1;
        displs[q] = (int)disp;
    }
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
    long long cap = 1;
    for (int j = 0; j < ndim; ++j) cap *= lshape[j];
    if (identity_fill) {
        T v = identity<T>(op);
        for (long long i = 0; i < cap; ++i) local[i] = v;
        return;
    }
    MPI_Datatype base = mpi_type(local);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(base, &lb, &ext);
    std::vector<Block> blocks = all_blocks(g, ndim, fn);
    int n = (int)blocks.size(), me;
    MPI_Comm_rank(g.cart, &me);
    for (const Block &b : blocks) check_block(b, gshape, lshape, array);
    std::vector<int> sc(n, 0), rc(n, 0), sd(n, 0), rd(n, 0);
    std::vector<MPI_Datatype> st(n, MPI_BYTE), rt(n, MPI_BYTE);
    if (me == 0) global_side(blocks, base, ext, gstrides, sc, sd, st);
    if (blocks[me].elements() > 0) {
        rt[0] = strided_block(base, blocks[me], lstrides);
        rc[0] = 1;
    }
    check(MPI_Alltoallw(global, sc.data(), sd.data(), st.data(), local, rc.data(), rd.data(), rt.data(), g.cart),
          "MPI_Alltoallw");
    for (int q = 0; q < n; ++q) {
        if (sc[q]) MPI_Type_free(&st[q]);
        if (rc[q]) MPI_Type_free(&rt[q]);
    }
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
    MPI_Aint lb, ext;
    MPI_Type_get_extent(base, &lb, &ext);
    std::vector<Block> blocks = all_blocks(g, ndim, fn);
    int n = (int)blocks.size(), me;
    MPI_Comm_rank(g.cart, &me);
    for (const Block &b : blocks) check_block(b, gshape, lshape, array);
    MPI_Datatype mine = MPI_DATATYPE_NULL;
    if (blocks[me].elements() > 0) mine = strided_block(base, blocks[me], lstrides);
    if (!combine) {
        std::vector<int> sc(n, 0), rc(n, 0), sd(n, 0), rd(n, 0);
        std::vector<MPI_Datatype> st(n, MPI_BYTE), rt(n, MPI_BYTE);
        if (mine != MPI_DATATYPE_NULL) {
            st[0] = mine;
            sc[0] = 1;
        }
        if (me == 0) global_side(blocks, base, ext, gstrides, rc, rd, rt);
        check(MPI_Alltoallw(local, sc.data(), sd.data(), st.data(), global, rc.data(), rd.data(), rt.data(), g.cart),
              "MPI_Alltoallw");
        for (int q = 0; q < n; ++q)
            if (rc[q]) MPI_Type_free(&rt[q]);
        if (mine != MPI_DATATYPE_NULL) MPI_Type_free(&mine);
        return;
    }
    // Staging: the root receives each rank's block packed, in rank order.
    std::vector<int> counts(n), displs(n);
    long long total = 0;
    for (int q = 0; q < n; ++q) {
        counts[q] = (int)blocks[q].elements();
        displs[q] = (int)total;
        total += counts[q];
    }
    if (total > std::numeric_limits<int>::max()) fail("staging %lld elements exceeds the MPI int range", total);
    std::vector<T> staging(me == 0 ? (size_t)total : 0);
    if (mine != MPI_DATATYPE_NULL)
        check(MPI_Gatherv(local, 1, mine, staging.data(), counts.data(), displs.data(), base, 0, g.cart), "MPI_Gatherv");
    else
        check(MPI_Gatherv(local, 0, base, staging.data(), counts.data(), displs.data(), base, 0, g.cart), "MPI_Gatherv");
    if (mine != MPI_DATATYPE_NULL) MPI_Type_free(&mine);
    if (me != 0) return;
    long long span = 1;
    for (int j = 0; j < ndim; ++j) span += (gshape[j] - 1) * gstrides[j];
    std::vector<char> touched(op != OP_NONE && !accumulate ? (size_t)span : 0, 0);
    for (int q = 0; q < n; ++q) {
        const Block &b = blocks[q];
        long long cnt = b.elements();
        if (cnt == 0) continue;
        std::vector<long long> idx(ndim, 0);
        for (long long i = 0; i < cnt; ++i) {
            long long off = 0;
            for (int j = 0; j < ndim; ++j) off += (b.start[j] + idx[j]) * gstrides[j];
            T v = staging[displs[q] + i];
            if (op == OP_NONE) {
                global[off] = v;
            } else if (accumulate || touched[off]) {
                global[off] = combine_values(global[off], v, op);
            } else {
                global[off] = v;
                touched[off] = true;
            }
            for (int j = ndim - 1; j >= 0; --j) {
                if (++idx[j] < b.count[j]) break;
                idx[j] = 0;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Redistribution between two grids without rank 0 (fused gather + scatter of an intermediate). Every
// world rank computes every rank's source and destination block, sends each destination rank the
// intersection with its own source block (packed, MPI_Alltoallv over MPI_COMM_WORLD), and unpacks.
// With an operator, the source blocks are partial results and the destination combines every piece
// (reduce-scatter); without one, among ranks holding the same source block only the first sends.
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

template <typename T>
void redistribute(const char *array, int ndim, int src_gid, BlockFn src_fn, const T *src_local,
                  const long long *src_lstrides, int dst_gid, BlockFn dst_fn, T *dst_local,
                  const long long *dst_lshape, const long long *dst_lstrides, int op) {
    int me = world_rank(), n = world_size();
    std::vector<Block> src = world_blocks(grid(src_gid).dims, ndim, src_fn);
    std::vector<Block> dst = world_blocks(grid(dst_gid).dims, ndim, dst_fn);
    for (int j = 0; j < ndim; ++j)
        if (dst[me].count[j] > dst_lshape[j]) fail("block of '%s' does not fit its local buffer", array);
    // Without an operator, identical source blocks (replicas) send once: from the lowest rank.
    std::vector<char> sends(n, 1);
    if (op == OP_NONE)
        for (int w = 0; w < n; ++w)
            for (int v = 0; v < w && sends[w]; ++v)
                if (src[v].start == src[w].start && src[v].count == src[w].count && src[v].elements() > 0) sends[w] = 0;
    std::vector<int> scount(n, 0), sdispl(n, 0), rcount(n, 0), rdispl(n, 0);
    long long stotal = 0, rtotal = 0;
    for (int q = 0; q < n; ++q) {
        long long k = sends[me] ? intersect(src[me], dst[q]).elements() : 0;
        long long r = sends[q] ? intersect(src[q], dst[me]).elements() : 0;
        if (stotal + k > std::numeric_limits<int>::max() || rtotal + r > std::numeric_limits<int>::max())
            fail("redistribution of '%s' exceeds the MPI int count range", array);
        scount[q] = (int)k;
        sdispl[q] = (int)stotal;
        rcount[q] = (int)r;
        rdispl[q] = (int)rtotal;
        stotal += k;
        rtotal += r;
    }
    std::vector<T> sbuf((size_t)stotal), rbuf((size_t)rtotal);
    for (int q = 0; q < n; ++q) {
        if (!scount[q]) continue;
        T *out = sbuf.data() + sdispl[q];
        for_each(intersect(src[me], dst[q]), src[me], src_lstrides, [&](long long off) { *out++ = src_local[off]; });
    }
    MPI_Datatype base = mpi_type(dst_local);
    check(MPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), base, rbuf.data(), rcount.data(), rdispl.data(),
                        base, MPI_COMM_WORLD),
          "MPI_Alltoallv");
    if (dst[me].elements() == 0) return;
    if (op != OP_NONE) {
        T v = identity<T>(op);
        for_each(dst[me], dst[me], dst_lstrides, [&](long long off) { dst_local[off] = v; });
    }
    for (int q = 0; q < n; ++q) {
        if (!rcount[q]) continue;
        const T *in = rbuf.data() + rdispl[q];
        for_each(intersect(src[q], dst[me]), dst[me], dst_lstrides, [&](long long off) {
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
    Grid &g = grid(gid);
    if (!g.member) return;
    if (count > std::numeric_limits<int>::max()) fail("allreduce of '%s' exceeds the MPI int count range", array);
    check(MPI_Allreduce(in, out, (int)count, mpi_type(out), mpi_op(op), g.sub(keep)), "MPI_Allreduce");
}

}  // namespace dace_partition
}  // namespace
