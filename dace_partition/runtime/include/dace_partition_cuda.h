// dace-partition CUDA runtime: each MPI rank selects its GPU by node-local rank, and a compatibility
// shim lets DaCe 1.0.2's runtime headers compile against CUB 3 (CUDA 13).
//
// Included (1) into every generated file through the DacePartitionCUDA environment, and (2) into every
// nvcc translation unit *before anything else* with `nvcc -include` (see dace_partition/runtime/cuda_build.py),
// so the CUB 3 shim is in place before dace/reduction.h and dace/cuda/multidim_gbar.cuh are parsed.
// No #pragma once: the two sections below have guards of their own.

#if defined(__CUDACC__)
#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cstddef>
#if defined(CUB_VERSION) && CUB_VERSION >= 300000 && !defined(DACE_PARTITION_CUB3_SHIM)
#define DACE_PARTITION_CUB3_SHIM
// CUB 3 removed these; DaCe 1.0.2 uses them in dace/reduction.h (stridedIterator) and
// dace/cuda/multidim_gbar.cuh (GridBarrier::Sync). Same semantics, provided by Thrust / the intrinsic.
namespace cub {
__device__ __forceinline__ void CTA_SYNC() { __syncthreads(); }
template <typename ValueType, typename OffsetT = std::ptrdiff_t>
using CountingInputIterator = thrust::counting_iterator<ValueType>;
template <typename ValueType, typename ConversionOp, typename InputIteratorT, typename OffsetT = std::ptrdiff_t>
using TransformInputIterator = thrust::transform_iterator<ConversionOp, InputIteratorT, ValueType>;
}  // namespace cub
#endif
#if !defined(DACE_PARTITION_ATOMIC64_SHIM)
#define DACE_PARTITION_ATOMIC64_SHIM
// int64 min/max reductions: DaCe 1.0.2 calls atomicMin/atomicMax on `long *` (int64_t on Linux), for which
// CUDA has no overload (only long long); same width, so forward to it.
__device__ __forceinline__ long atomicMin(long *p, long v) {
    return static_cast<long>(atomicMin(reinterpret_cast<long long *>(p), static_cast<long long>(v)));
}
__device__ __forceinline__ long atomicMax(long *p, long v) {
    return static_cast<long>(atomicMax(reinterpret_cast<long long *>(p), static_cast<long long>(v)));
}
__device__ __forceinline__ unsigned long atomicMin(unsigned long *p, unsigned long v) {
    return static_cast<unsigned long>(atomicMin(reinterpret_cast<unsigned long long *>(p),
                                                static_cast<unsigned long long>(v)));
}
__device__ __forceinline__ unsigned long atomicMax(unsigned long *p, unsigned long v) {
    return static_cast<unsigned long>(atomicMax(reinterpret_cast<unsigned long long *>(p),
                                                static_cast<unsigned long long>(v)));
}
#endif
#endif  // __CUDACC__

#if !defined(DACE_PARTITION_CUDA_H)
#define DACE_PARTITION_CUDA_H
#include <mpi.h>
#include <cuda_runtime.h>

#include <cstdio>

// Not in an anonymous namespace: the function-local static of select_device() is then one per process,
// shared by the generated .cpp and .cu files.
namespace dace_partition_cuda {

// Node-local rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); MPI is initialized here if needed.
inline int local_rank() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) MPI_Init(nullptr, nullptr);
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &rank);
        MPI_Comm_free(&node);
    }
    return rank;
}

// cudaSetDevice(local_rank % device_count), once per process. Runs before DaCe creates its CUDA
// streams (see dace_partition_cuda_device_count below), so every stream lives on the selected GPU.
// A missing GPU is left to DaCe's own initialization, which reports it.
inline int select_device() {
    static int selected = -2;
    if (selected != -2) return selected;
    selected = -1;
    int count = 0;
    int lrank = local_rank();
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return selected;
    int dev = lrank % count;
    if (cudaSetDevice(dev) == cudaSuccess) selected = dev;
    return selected;
}

}  // namespace dace_partition_cuda

// DaCe 1.0.2 allocates a persistent pinned array (the host twin MPI uses for a GPU-resident buffer) with
// cudaMallocHost(&__state->x, ...), where the member is `T * __restrict__`: neither of CUDA's overloads
// takes a pointer to a restrict pointer. This one does.
template <typename T>
static inline cudaError_t cudaMallocHost(T *__restrict__ *ptr, size_t size) {
    return cudaMallocHost(reinterpret_cast<void **>(const_cast<T **>(ptr)), size);
}
#endif  // DACE_PARTITION_CUDA_H
