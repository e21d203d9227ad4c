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
// build; HostCopy (dace_partition_halo.h) where the GPU lowering's data flow runs on the host (runtime/emulation.py), so the host
// runs the same faces, offsets and messages. The copies run on the copier's own stream after the device's
// earlier work (DaCe may leave the last kernel of the state before running: it skips the synchronization
// where the next state's nodes name the same stream), synchronized before MPI reads a packed face and
// before the call returns.
#pragma once
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "dace_partition_halo.h"  // the faces, the site key, copy_box and HostCopy

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
    static std::vector<long long> probe;
    SiteKey key = halo_site_key(1, ndim, src_gid, src_fn, src_lstrides, dst_gid, dst_fn, dst_lshape, dst_lstrides,
                                base, probe);
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
    copy_own(s.copy, s.own, s.src_me, src_local, src_lstrides, s.dst_me, dst_local, dst_lstrides);
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
