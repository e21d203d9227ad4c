// dace-partition runtime: halo exchange of buffers that live in GPU memory (solvers/halo.py, implementation
// "halo_packed", chosen by passes/gpu.py for a halo between resident buffers).
//
// MPI never gets a derived datatype on device memory: each face is packed into a contiguous buffer by
// pitched copies (one cudaMemcpy2DAsync per face of a 2-D buffer, one per plane of a 3-D one), sent as
// plain elements, and unpacked the same way. Where the packed faces live is decided at run time: in GPU
// memory, handed to MPI as device pointers, when the MPI library says it is CUDA-aware
// (MPIX_Query_cuda_support, looked up with dlsym: neither the mpich nor the Open MPI wheel is); else in
// pinned host memory, so that packing is the device -> host copy and unpacking the host -> device one, and
// only the faces cross PCIe. DACE_PARTITION_CUDA_AWARE=1 or 0 forces either way.
//
// The copier is a template parameter: dace_partition_cuda::DeviceCopy (dace_partition_cuda.h) in a CUDA
// build; HostCopy where the GPU lowering's data flow runs on the host (runtime/emulation.py), so the host
// runs the same faces, offsets and messages. The copies run on the copier's own stream after the device's
// earlier work (DaCe may leave the last kernel of the state before running: it skips the synchronization
// where the next state's nodes name the same stream), synchronized before MPI reads a packed face and
// before the call returns.
#pragma once
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "dace_partition_halo.h"

namespace {
namespace dace_partition {

// Whether MPI takes device pointers. Asked once per process; every rank asks the same library.
inline bool mpi_cuda_aware() {
    static int aware = -1;
    if (aware >= 0) return aware == 1;
    const char *force = std::getenv("DACE_PARTITION_CUDA_AWARE");
    if (force && (!std::strcmp(force, "0") || !std::strcmp(force, "1"))) {
        aware = force[0] == '1';
    } else if (force && *force && std::strcmp(force, "auto")) {
        fail("DACE_PARTITION_CUDA_AWARE=%s: expected 0, 1 or auto", force);
    } else {
        using Query = int (*)();
        Query query = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support"));
        aware = query != nullptr && query() == 1;
    }
    return aware == 1;
}

// The host's copier: plain memcpy, buffers from malloc (wherever "device" memory is host memory).
struct HostCopy {
    void *alloc(size_t bytes, bool) {
        void *p = std::malloc(bytes ? bytes : 1);
        if (!p) fail("cannot allocate %zu bytes for a halo face", bytes);
        return p;
    }
    void free(void *p, bool) { std::free(p); }
    void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
        for (size_t r = 0; r < height; ++r)
            std::memcpy(static_cast<char *>(dst) + r * dpitch, static_cast<const char *>(src) + r * spitch, width);
    }
    void sync() {}
    void wait_for_kernels() {}
    void release() {}
};

// The elements `count` of two strided buffers (strides in elements), as pitched copies: rows of the
// innermost run (the last dimension where both strides are 1, else single elements), one copy per
// combination of the outer dimensions.
template <typename T, typename Copy>
void copy_box(Copy &c, T *dst, const long long *dstr, const T *src, const long long *sstr,
              const std::vector<long long> &count) {
    int nd = (int)count.size();
    for (long long x : count)
        if (x <= 0) return;
    const size_t sz = sizeof(T);
    bool unit = nd > 0 && dstr[nd - 1] == 1 && sstr[nd - 1] == 1;
    int row = unit ? nd - 2 : nd - 1;  // the dimension the pitch steps over (-1: one run)
    size_t width = unit ? (size_t)count[nd - 1] * sz : sz;
    size_t height = row >= 0 ? (size_t)count[row] : 1;
    size_t dpitch = row >= 0 ? (size_t)dstr[row] * sz : width, spitch = row >= 0 ? (size_t)sstr[row] * sz : width;
    int outer = row > 0 ? row : 0;
    long long planes = 1;
    for (int j = 0; j < outer; ++j) planes *= count[j];
    std::vector<long long> idx(outer, 0);
    for (long long p = 0; p < planes; ++p) {
        long long so = 0, d = 0;
        for (int j = 0; j < outer; ++j) so += idx[j] * sstr[j], d += idx[j] * dstr[j];
        c.copy2d(dst + d, dpitch, src + so, spitch, width, height);
        for (int j = outer - 1; j >= 0; --j) {
            if (++idx[j] < count[j]) break;
            idx[j] = 0;
        }
    }
}

struct PackedFace {
    int peer;
    std::vector<long long> count, packed_strides;  // the face's extent; the packed buffer's row-major strides
    long long offset, elements;  // its first element in the rank-local buffer; how many
    void *packed;
    Count msg;  // the face's elements, as MPI counts them
};

template <typename Copy>
struct PackedHaloSite {
    std::vector<long long> probe;
    bool built = false, aware = false;
    Block src_me, dst_me, own;
    std::vector<PackedFace> sends, recvs;
    std::vector<MPI_Request> reqs;
    Copy copy;

    void release() {
        for (std::vector<PackedFace> *faces : {&sends, &recvs})
            for (PackedFace &f : *faces) {
                copy.free(f.packed, aware);
                f.msg.release();
            }
        sends.clear();
        recvs.clear();
        copy.release();
        built = false;
    }
};

inline PackedFace packed_face(int q, const Block &box, const Block &owner, const long long *strides, MPI_Datatype base) {
    PackedFace f;
    f.peer = q;
    f.count = box.count;
    f.packed_strides.assign(box.count.size(), 1);
    for (int j = (int)box.count.size() - 2; j >= 0; --j) f.packed_strides[j] = f.packed_strides[j + 1] * box.count[j + 1];
    f.offset = linear_in(box, owner, strides);
    f.elements = box.elements();
    f.packed = nullptr;
    f.msg = large_count(box.elements(), base);
    return f;
}

template <typename T, typename Copy>
void halo_exchange_packed(const char *array, int ndim, int src_gid, BlockFn src_fn, const T *src_local,
                          const long long *src_lstrides, int dst_gid, BlockFn dst_fn, T *dst_local,
                          const long long *dst_lshape, const long long *dst_lstrides) {
    MPI_Datatype base = mpi_type(dst_local);
    static std::vector<long long> shapes, probe, probe2;
    shapes.assign(src_lstrides, src_lstrides + ndim);
    shapes.insert(shapes.end(), dst_lshape, dst_lshape + ndim);
    shapes.insert(shapes.end(), dst_lstrides, dst_lstrides + ndim);
    probe_blocks(grid(src_gid), ndim, src_fn, probe, false);  // rank-independent: all ranks rebuild together
    probe_blocks(grid(dst_gid), ndim, dst_fn, probe2, false);
    probe.insert(probe.end(), probe2.begin(), probe2.end());
    SiteKey key{fn_type(src_fn), fn_type(dst_fn), {src_gid, dst_gid, ndim, 1}, base, shapes};
    bool fresh = false;
    PackedHaloSite<Copy> &s = SiteCache<PackedHaloSite<Copy>>::get(key, probe, fresh);
    if (fresh) {
        s.aware = mpi_cuda_aware();
        int me = world_rank(), n = world_size();
        std::vector<Block> src = world_blocks(grid(src_gid).dims, ndim, src_fn);
        std::vector<Block> dst = world_blocks(grid(dst_gid).dims, ndim, dst_fn);
        for (int j = 0; j < ndim; ++j)
            if (dst[me].count[j] > dst_lshape[j]) fail("block of '%s' does not fit its local buffer", array);
        s.src_me = src[me];
        s.dst_me = dst[me];
        s.own = intersect(src[me], dst[me]);
        halo_faces(src, dst, me, n,
                   [&](int q, const Block &in) { s.recvs.push_back(packed_face(q, in, dst[me], dst_lstrides, base)); },
                   [&](int q, const Block &out) { s.sends.push_back(packed_face(q, out, src[me], src_lstrides, base)); });
        for (std::vector<PackedFace> *faces : {&s.sends, &s.recvs})
            for (PackedFace &f : *faces) f.packed = s.copy.alloc((size_t)f.elements * sizeof(T), s.aware);
        s.reqs.resize(s.sends.size() + s.recvs.size());
    }
    s.copy.wait_for_kernels();
    const int tag = 0x4a11;
    size_t k = 0;
    for (PackedFace &f : s.recvs)
        check(MPI_Irecv(f.packed, f.msg.n, f.msg.type, f.peer, tag, comm(), &s.reqs[k++]), "MPI_Irecv");
    for (PackedFace &f : s.sends)
        copy_box<T>(s.copy, static_cast<T *>(f.packed), f.packed_strides.data(), src_local + f.offset, src_lstrides, f.count);
    // The part this rank holds already, unless the source is the destination's own block (in place).
    long long so = linear_in(s.own, s.src_me, src_lstrides), d = linear_in(s.own, s.dst_me, dst_lstrides);
    if (s.own.elements() > 0 && src_local + so != dst_local + d)
        copy_box<T>(s.copy, dst_local + d, dst_lstrides, src_local + so, src_lstrides, s.own.count);
    s.copy.sync();  // the packed faces are complete before MPI reads them
    for (PackedFace &f : s.sends)
        check(MPI_Isend(f.packed, f.msg.n, f.msg.type, f.peer, tag, comm(), &s.reqs[k++]), "MPI_Isend");
    if (k) check(MPI_Waitall((int)k, s.reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    for (PackedFace &f : s.recvs)
        copy_box<T>(s.copy, dst_local + f.offset, dst_lstrides, static_cast<const T *>(f.packed), f.packed_strides.data(), f.count);
    s.copy.sync();  // the halo is in place before the next kernel reads it
}

}  // namespace dace_partition
}  // namespace
