// dace-partition runtime: halo exchanges, redistributions and allreduces of buffers that live in GPU memory
// (solvers/device.py: "halo_packed", "blocks_packed" and "allreduce_device", chosen by passes/gpu.py for
// moves between resident buffers).
//
// MPI never gets a derived datatype on device memory: each face of a halo, or piece of a redistribution,
// is packed into a contiguous buffer by pitched copies (copy_box: one cudaMemcpy2DAsync per face of a 2-D
// buffer or per face across one dimension of a 3-D one, one cudaMemcpy3DAsync per 3-D piece), sent as
// plain elements, and unpacked the same way. Where the packed faces
// live is decided at run time: in GPU memory, handed to MPI as device pointers, when the MPI library says
// it is CUDA-aware (MPIX_Query_cuda_support, looked up with dlsym: neither the mpich nor the Open MPI
// wheel is); else in pinned host memory, so that packing is the device -> host copy and unpacking the
// host -> device one, and only the faces cross PCIe. DACE_PARTITION_CUDA_AWARE=1 or 0 forces either way.
//
// The copier is a template parameter: dace_partition_cuda::DeviceCopy (dace_partition_cuda.h) in a CUDA
// build; HostCopy (dace_partition_halo.h) where the GPU lowering's data flow runs on the host
// (runtime/emulation.py), so the host runs the same faces, offsets and messages. The copies run on the
// copier's own stream after the device's earlier work (DaCe may leave the last kernel of the state before
// running: it skips the synchronization where the next state's nodes name the same stream), synchronized
// before MPI reads a packed face and before the call returns.
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
struct PackedSite {
    std::vector<long long> probe;
    bool built = false, aware = false;
    Block src_me, dst_me, own;  // own: what this rank copies locally
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

// Sets up a site: every rank's blocks (O(P), once), then `faces(src, dst, me, n, recv, send)` names the
// pieces this rank receives and sends (global indices) and returns the part it copies locally; each piece
// gets a packed buffer where `aware` says (device memory, else pinned host memory).
template <typename T, typename Copy, typename Faces>
void build_packed(PackedSite<Copy> &s, const char *array, int ndim, int src_gid, const BlockFn &src_fn,
                  const long long *src_lstrides, int dst_gid, const BlockFn &dst_fn, const long long *dst_lshape,
                  const long long *dst_lstrides, MPI_Datatype base, Faces faces) {
    s.aware = mpi_cuda_aware();
    int me = world_rank(), n = world_size();
    std::vector<Block> src = world_blocks(grid(src_gid).dims, ndim, src_fn);
    std::vector<Block> dst = world_blocks(grid(dst_gid).dims, ndim, dst_fn);
    for (int j = 0; j < ndim; ++j)
        if (dst[me].count[j] > dst_lshape[j]) fail("block of '%s' does not fit its local buffer", array);
    s.src_me = src[me];
    s.dst_me = dst[me];
    s.own = faces(src, dst, me, n,
                  [&](int q, const Block &in) { s.recvs.push_back(packed_face(q, in, dst[me], dst_lstrides, base)); },
                  [&](int q, const Block &out) { s.sends.push_back(packed_face(q, out, src[me], src_lstrides, base)); });
    for (std::vector<PackedFace> *fs : {&s.sends, &s.recvs})
        for (PackedFace &f : *fs) f.packed = s.copy.alloc((size_t)f.elements * sizeof(T), s.aware);
    s.reqs.resize(s.sends.size() + s.recvs.size());
}

// One call of a site: receives posted, faces packed and the local part copied, one synchronization,
// sends, wait, faces unpacked, synchronized again before the next kernel reads them.
template <typename T, typename Copy>
void run_packed(PackedSite<Copy> &s, int tag, const T *src_local, const long long *src_lstrides, T *dst_local,
                const long long *dst_lstrides) {
    s.copy.wait_for_kernels();
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
    s.copy.sync();  // in place before the next kernel reads it
}

// A packed move's call site (`kind`: 1 halo, 2 redistribution; its messages' tag follows from it), set up
// at its first call with `faces` (see build_packed), then run.
template <typename T, typename Copy, typename Faces>
void packed_move(int kind, const char *array, int ndim, int src_gid, const BlockFn &src_fn, const T *src_local,
                 const long long *src_lstrides, int dst_gid, const BlockFn &dst_fn, T *dst_local,
                 const long long *dst_lshape, const long long *dst_lstrides, Faces faces) {
    MPI_Datatype base = mpi_type(dst_local);
    static std::vector<long long> probe;
    SiteKey key = halo_site_key(kind, ndim, src_gid, src_fn, src_lstrides, dst_gid, dst_fn, dst_lshape, dst_lstrides,
                                base, probe);
    bool fresh = false;
    PackedSite<Copy> &s = SiteCache<PackedSite<Copy>>::get(key, probe, fresh);
    if (fresh)
        build_packed<T>(s, array, ndim, src_gid, src_fn, src_lstrides, dst_gid, dst_fn, dst_lshape, dst_lstrides, base,
                        faces);
    run_packed(s, 0x4a10 + kind, src_local, src_lstrides, dst_local, dst_lstrides);
}

template <typename T, typename Copy>
void halo_exchange_packed(const char *array, int ndim, int src_gid, BlockFn src_fn, const T *src_local,
                          const long long *src_lstrides, int dst_gid, BlockFn dst_fn, T *dst_local,
                          const long long *dst_lshape, const long long *dst_lstrides) {
    packed_move<T, Copy>(1, array, ndim, src_gid, src_fn, src_local, src_lstrides, dst_gid, dst_fn, dst_local,
                         dst_lshape, dst_lstrides,
                         [](const std::vector<Block> &src, const std::vector<Block> &dst, int me, int n, auto recv,
                            auto send) {
                             halo_faces(src, dst, me, n, recv, send);
                             return intersect(src[me], dst[me]);
                         });
}

// A redistribution of final values between two block layouts (solvers/blocks.py's `redistribute`, same
// pieces) whose buffers live in GPU memory: every rank sends each peer the intersection of its source
// block with the peer's destination block, packed; among ranks holding identical source blocks (replicas)
// only the lowest sends, and a rank that is not its block's sender receives even what it holds.
template <typename T, typename Copy>
void redistribute_packed(const char *array, int ndim, int src_gid, BlockFn src_fn, const T *src_local,
                         const long long *src_lstrides, int dst_gid, BlockFn dst_fn, T *dst_local,
                         const long long *dst_lshape, const long long *dst_lstrides) {
    packed_move<T, Copy>(2, array, ndim, src_gid, src_fn, src_local, src_lstrides, dst_gid, dst_fn, dst_local,
                         dst_lshape, dst_lstrides,
                         [](const std::vector<Block> &src, const std::vector<Block> &dst, int me, int n, auto recv,
                            auto send) {
                             std::vector<char> sends = first_holders(src);
                             for (int q = 0; q < n; ++q) {
                                 if (q == me) continue;
                                 Block in = intersect(src[q], dst[me]);
                                 if (sends[q] && in.elements() > 0) recv(q, in);
                                 Block out = intersect(src[me], dst[q]);
                                 if (sends[me] && out.elements() > 0) send(q, out);
                             }
                             Block own = intersect(src[me], dst[me]);
                             if (!sends[me]) std::fill(own.count.begin(), own.count.end(), 0);
                             return own;
                         });
}

// The allreduce of a contiguous buffer of partial results in GPU memory (nothing to pack): MPI gets the
// device buffers where it is CUDA-aware; else one pinned host buffer per call site takes the partial
// results (device -> host), is reduced in place, and goes back (host -> device).
template <typename Copy>
struct DeviceReduceSite {
    std::vector<long long> probe;
    bool built = false, aware = false;
    void *staged = nullptr;
    Copy copy;

    void release() {
        if (staged) copy.free(staged, false);
        staged = nullptr;
        copy.release();
        built = false;
    }
};

template <typename T, typename Copy>
void allreduce_device(const char *array, int gid, unsigned keep, const T *in, T *out, long long count, int op) {
    (void)array;
    Grid &g = grid(gid);
    if (!g.member || count <= 0) return;
    MPI_Datatype base = mpi_type(out);
    std::vector<long long> probe{count};
    SiteKey key{std::type_index(typeid(void)), std::type_index(typeid(Copy)), {gid, (int)keep, op, 3}, base, probe};
    bool fresh = false;
    DeviceReduceSite<Copy> &s = SiteCache<DeviceReduceSite<Copy>>::get(key, probe, fresh);
    if (fresh) {
        s.aware = mpi_cuda_aware();
        if (!s.aware) s.staged = s.copy.alloc((size_t)count * sizeof(T), false);
    }
    s.copy.wait_for_kernels();
    if (s.aware) {
        allreduce_any(in, out, count, base, mpi_op(op), g.sub(keep));
        return;
    }
    size_t bytes = (size_t)count * sizeof(T);
    s.copy.copy2d(s.staged, bytes, in, bytes, bytes, 1);
    s.copy.sync();
    allreduce_any(MPI_IN_PLACE, s.staged, count, base, mpi_op(op), g.sub(keep));
    s.copy.copy2d(out, bytes, s.staged, bytes, bytes, 1);
    s.copy.sync();
}

}  // namespace dace_partition
}  // namespace
