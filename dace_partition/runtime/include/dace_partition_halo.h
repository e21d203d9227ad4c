// dace-partition runtime: halo exchange between grid neighbours (solvers/halo.py).
//
// A redistribution between two block layouts of the same grid where each rank needs only borders of
// its neighbours' blocks (a shifted read, a block plus halo). Each rank posts one MPI_Irecv per peer
// whose source block intersects its destination block and one MPI_Isend per peer that needs part of its
// own block, straight from and into the rank-local buffers: each face is a derived datatype (strided
// faces included), so nothing is packed. The part of its destination block a rank already holds is a
// local copy. Set-up (every rank's blocks, O(P) once; the peers and their datatypes) happens at a site's
// first call and again only when the blocks change (the same rank-independent probes as `redistribute`).
// Peers are found from the blocks, not assumed, so tiny or uneven blocks (a halo reaching past an empty
// neighbour) still get every element; the solver accepts only moves whose pattern is neighbour-only.
#pragma once
#include <cstdlib>
#include <cstring>

#include "dace_partition_runtime.h"

namespace {
namespace dace_partition {

struct HaloPeer {
    int peer;
    MPI_Datatype type;  // the face in the local buffer, displacement included
};

struct HaloSite {
    int src_gid = 0, dst_gid = 0;
    MPI_Datatype base = MPI_DATATYPE_NULL;
    std::vector<long long> probe;
    bool built = false;
    Block src_me, dst_me, own;  // own: what this rank copies locally
    std::vector<HaloPeer> sends, recvs;
    std::vector<MPI_Request> reqs;

    void release() {
        for (HaloPeer &p : sends) MPI_Type_free(&p.type);
        for (HaloPeer &p : recvs) MPI_Type_free(&p.type);
        sends.clear();
        recvs.clear();
        built = false;
    }
};

// `box` (global indices) inside a local buffer holding `owner`, as a datatype placed at its offset.
inline MPI_Datatype face_type(MPI_Datatype base, const Block &box, const Block &owner, const long long *strides) {
    Block rel = box;
    for (size_t j = 0; j < rel.start.size(); ++j) rel.start[j] = box.start[j] - owner.start[j];
    MPI_Datatype t = strided_block(base, rel, strides);
    MPI_Datatype r = placed(1, t, linear(rel, strides) * (long long)extent_of(base));
    MPI_Type_free(&t);
    return r;
}

// The faces rank `me` receives (`recv(q, box)`, from peer q) and sends (`send(q, box)`), in global indices,
// in peer order. A rank whose own source block holds its whole destination block receives nothing
// (overlapping source tiles, e.g. block-plus-halo arguments, would otherwise send an element twice).
template <typename Recv, typename Send>
void halo_faces(const std::vector<Block> &src, const std::vector<Block> &dst, int me, int n, Recv recv, Send send) {
    auto self_sufficient = [&](int q) { return intersect(src[q], dst[q]).elements() == dst[q].elements(); };
    bool mine = self_sufficient(me);
    for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        Block in = intersect(src[q], dst[me]);
        if (!mine && in.elements() > 0) recv(q, in);
        Block out = intersect(src[me], dst[q]);
        if (!self_sufficient(q) && out.elements() > 0) send(q, out);
    }
}

inline void build_halo(HaloSite &s, const char *array, int ndim, const BlockFn &src_fn, const BlockFn &dst_fn,
                       const long long *sstr, const long long *dshape, const long long *dstr) {
    int me = world_rank(), n = world_size();
    std::vector<Block> src = world_blocks(grid(s.src_gid).dims, ndim, src_fn);
    std::vector<Block> dst = world_blocks(grid(s.dst_gid).dims, ndim, dst_fn);
    for (int j = 0; j < ndim; ++j)
        if (dst[me].count[j] > dshape[j]) fail("block of '%s' does not fit its local buffer", array);
    s.src_me = src[me];
    s.dst_me = dst[me];
    s.own = intersect(src[me], dst[me]);
    halo_faces(src, dst, me, n, [&](int q, const Block &in) { s.recvs.push_back(HaloPeer{q, face_type(s.base, in, dst[me], dstr)}); },
               [&](int q, const Block &out) { s.sends.push_back(HaloPeer{q, face_type(s.base, out, src[me], sstr)}); });
    s.reqs.resize(s.sends.size() + s.recvs.size());
}

// Offset of the first element of `box` in a local buffer holding `block` with `strides`.
inline long long linear_in(const Block &box, const Block &block, const long long *strides) {
    long long off = 0;
    for (size_t j = 0; j < box.start.size(); ++j) off += (box.start[j] - block.start[j]) * strides[j];
    return off;
}

// The call site of a halo exchange (`kind`: 0 datatypes, 1 packed) and, in `probe`, the probe of its
// blocks: rank-independent, so all ranks rebuild the site together.
inline SiteKey halo_site_key(int kind, int ndim, int src_gid, const BlockFn &src_fn, const long long *src_lstrides,
                             int dst_gid, const BlockFn &dst_fn, const long long *dst_lshape,
                             const long long *dst_lstrides, MPI_Datatype base, std::vector<long long> &probe) {
    static std::vector<long long> shapes, probe2;
    shapes.assign(src_lstrides, src_lstrides + ndim);
    shapes.insert(shapes.end(), dst_lshape, dst_lshape + ndim);
    shapes.insert(shapes.end(), dst_lstrides, dst_lstrides + ndim);
    probe_blocks(grid(src_gid), ndim, src_fn, probe, false);
    probe_blocks(grid(dst_gid), ndim, dst_fn, probe2, false);
    probe.insert(probe.end(), probe2.begin(), probe2.end());
    return SiteKey{fn_type(src_fn), fn_type(dst_fn), {src_gid, dst_gid, ndim, kind}, base, shapes};
}

// The host's copier: plain memcpy, buffers from malloc. The packed moves (dace_partition_device_moves.h)
// take a copier as a template parameter; a CUDA build's is dace_partition_cuda::DeviceCopy. A copier
// copies `height` rows of `width` bytes (copy2d) and `depth` slices of those (copy3d) with the parameters of
// cudaMemcpy2DAsync and cudaMemcpy3DAsync on linear memory: a slice of a buffer is `rows` of its rows.
struct HostCopy {
    void *alloc(size_t bytes, bool) {
        void *p = std::malloc(bytes ? bytes : 1);
        if (!p) fail("cannot allocate %zu bytes for a packed piece", bytes);
        return p;
    }
    void free(void *p, bool) { std::free(p); }
    void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
        for (size_t r = 0; r < height; ++r)
            std::memcpy(static_cast<char *>(dst) + r * dpitch, static_cast<const char *>(src) + r * spitch, width);
    }
    void copy3d(void *dst, size_t dpitch, size_t drows, const void *src, size_t spitch, size_t srows, size_t width,
                size_t height, size_t depth) {
        for (size_t z = 0; z < depth; ++z)
            copy2d(static_cast<char *>(dst) + z * dpitch * drows, dpitch,
                   static_cast<const char *>(src) + z * spitch * srows, spitch, width, height);
    }
    void sync() {}
    void wait_for_kernels() {}
    void release() {}
};

// One dimension of a box to copy: its count and its strides (elements) in the source and the destination.
struct CopyDim {
    long long n, s, d;
};

// The dimensions of a box of `count` elements with strides `sstr` and `dstr`, fewest first: dimensions of
// one element dropped, and a dimension merged into the next one where both buffers hold the two as one
// run (a whole row of an unpadded tile). So a face across a middle dimension is one pitched copy, not one
// per plane.
inline std::vector<CopyDim> copy_dims(const long long *dstr, const long long *sstr, const std::vector<long long> &count) {
    std::vector<CopyDim> out;
    for (size_t j = 0; j < count.size(); ++j) {
        if (count[j] == 1) continue;
        CopyDim c{count[j], sstr[j], dstr[j]};
        if (!out.empty()) {
            CopyDim &o = out.back();
            if (o.s == c.n * c.s && o.d == c.n * c.d) {
                o = CopyDim{o.n * c.n, c.s, c.d};
                continue;
            }
        }
        out.push_back(c);
    }
    return out;
}

// The elements `count` of two strided buffers (strides in elements), as pitched copies: the innermost run
// (the last dimension where both strides are 1, else single elements), then rows at a pitch, then, where
// both buffers' slice pitch is a whole number of their rows, slices as one 3-D copy (one cudaMemcpy3DAsync
// on a GPU), else one 2-D copy per slice; one such copy per combination of the outer dimensions.
template <typename T, typename Copy>
void copy_box(Copy &c, T *dst, const long long *dstr, const T *src, const long long *sstr,
              const std::vector<long long> &count) {
    for (long long x : count)
        if (x <= 0) return;
    const long long sz = sizeof(T);
    std::vector<CopyDim> dims = copy_dims(dstr, sstr, count);
    size_t width = sz;
    if (!dims.empty() && dims.back().s == 1 && dims.back().d == 1) {
        width = (size_t)(dims.back().n * sz);
        dims.pop_back();
    }
    size_t height = 1, spitch = width, dpitch = width;
    if (!dims.empty()) {
        height = (size_t)dims.back().n, spitch = (size_t)(dims.back().s * sz), dpitch = (size_t)(dims.back().d * sz);
        dims.pop_back();
    }
    size_t depth = 1, srows = 0, drows = 0;  // depth > 1: the slices go as one 3-D copy
    if (!dims.empty() && height > 1) {
        const CopyDim &z = dims.back();
        long long ss = z.s * sz, ds = z.d * sz;
        if (ss > 0 && ds > 0 && ss % (long long)spitch == 0 && ds % (long long)dpitch == 0 &&
            (size_t)ss >= height * spitch && (size_t)ds >= height * dpitch) {
            depth = (size_t)z.n, srows = (size_t)ss / spitch, drows = (size_t)ds / dpitch;
            dims.pop_back();
        }
    }
    long long planes = 1;
    for (const CopyDim &o : dims) planes *= o.n;
    std::vector<long long> idx(dims.size(), 0);
    for (long long p = 0; p < planes; ++p) {
        long long so = 0, d = 0;
        for (size_t j = 0; j < dims.size(); ++j) so += idx[j] * dims[j].s, d += idx[j] * dims[j].d;
        if (depth > 1)
            c.copy3d(dst + d, dpitch, drows, src + so, spitch, srows, width, height, depth);
        else
            c.copy2d(dst + d, dpitch, src + so, spitch, width, height);
        for (int j = (int)dims.size() - 1; j >= 0; --j) {
            if (++idx[j] < dims[j].n) break;
            idx[j] = 0;
        }
    }
}

// The part `own` of its destination block that a rank holds in its source block, copied locally; nothing
// where the source is the destination's own block (a kernel that writes into the block-plus-halo buffer it
// is read from).
template <typename T, typename Copy>
void copy_own(Copy &c, const Block &own, const Block &src_me, const T *src_local, const long long *src_lstrides,
              const Block &dst_me, T *dst_local, const long long *dst_lstrides) {
    if (own.elements() == 0) return;
    const T *from = src_local + linear_in(own, src_me, src_lstrides);
    T *to = dst_local + linear_in(own, dst_me, dst_lstrides);
    if (from != to) copy_box<T>(c, to, dst_lstrides, from, src_lstrides, own.count);
}

template <typename T>
void halo_exchange(const char *array, int ndim, int src_gid, BlockFn src_fn, const T *src_local,
                   const long long *src_lstrides, int dst_gid, BlockFn dst_fn, T *dst_local,
                   const long long *dst_lshape, const long long *dst_lstrides) {
    MPI_Datatype base = mpi_type(dst_local);
    static std::vector<long long> probe;
    SiteKey key = halo_site_key(0, ndim, src_gid, src_fn, src_lstrides, dst_gid, dst_fn, dst_lshape, dst_lstrides,
                                base, probe);
    bool fresh = false;
    HaloSite &s = SiteCache<HaloSite>::get(key, probe, fresh);  // rank-independent probes: all rebuild together
    if (fresh) {
        s.src_gid = src_gid, s.dst_gid = dst_gid, s.base = base;
        build_halo(s, array, ndim, src_fn, dst_fn, src_lstrides, dst_lshape, dst_lstrides);
    }
    const int tag = 0x4a10;
    size_t k = 0;
    for (const HaloPeer &p : s.recvs)
        check(MPI_Irecv(dst_local, 1, p.type, p.peer, tag, comm(), &s.reqs[k++]), "MPI_Irecv");
    for (const HaloPeer &p : s.sends)
        check(MPI_Isend(const_cast<T *>(src_local), 1, p.type, p.peer, tag, comm(), &s.reqs[k++]), "MPI_Isend");
    // The local part overlaps the messages in flight (it touches other elements of dst_local).
    HostCopy host;
    copy_own(host, s.own, s.src_me, src_local, src_lstrides, s.dst_me, dst_local, dst_lstrides);
    if (k) check(MPI_Waitall((int)k, s.reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

}  // namespace dace_partition
}  // namespace
