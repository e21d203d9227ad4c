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
#if !defined(DACE_PARTITION_PRODUCT_SHIM)
#define DACE_PARTITION_PRODUCT_SHIM
// Product reductions: DaCe 1.0.2's atomic product on the GPU (_wcr_fixed<Product, T>::reduce_atomic) is
// its plain update, so threads multiplying into one element race (a column product on two ranks came out
// as one thread's partial). Specialized here, right after DaCe's header and before any use, as a
// compare-and-swap loop on a word of the element's width.
#include <dace/reduction.h>
#include <cstring>
namespace dace_partition_cuda {
template <typename T, typename Word>
DACE_HDFI T product_atomic(T *ptr, const T &value) {
#if defined(__CUDA_ARCH__)
    static_assert(sizeof(T) == sizeof(Word), "a compare-and-swap word of the element's width");
    Word *word = reinterpret_cast<Word *>(ptr);
    Word old = *word, assumed;
    do {
        assumed = old;
        T current, next;
        memcpy(&current, &assumed, sizeof(T));
        next = current * value;
        Word bits;
        memcpy(&bits, &next, sizeof(T));
        old = atomicCAS(word, assumed, bits);
    } while (assumed != old);
    T out;
    memcpy(&out, &old, sizeof(T));
    return out;
#else
    T old;
#pragma omp critical
    {
        old = *ptr;
        *ptr = old * value;
    }
    return old;
#endif
}
}  // namespace dace_partition_cuda
#define DACE_PARTITION_PRODUCT(T, WORD)                                                                     \
    namespace dace {                                                                                         \
    template <>                                                                                              \
    struct _wcr_fixed<ReductionType::Product, T> {                                                           \
        static DACE_HDFI T reduce_atomic(T *ptr, const T &value) {                                           \
            return dace_partition_cuda::product_atomic<T, WORD>(ptr, value);                                 \
        }                                                                                                    \
        DACE_HDFI T operator()(const T &a, const T &b) const { return a * b; }                               \
    };                                                                                                       \
    }
DACE_PARTITION_PRODUCT(int, unsigned int)
DACE_PARTITION_PRODUCT(unsigned int, unsigned int)
DACE_PARTITION_PRODUCT(long, unsigned long long)
DACE_PARTITION_PRODUCT(unsigned long, unsigned long long)
DACE_PARTITION_PRODUCT(long long, unsigned long long)
DACE_PARTITION_PRODUCT(unsigned long long, unsigned long long)
DACE_PARTITION_PRODUCT(float, unsigned int)
DACE_PARTITION_PRODUCT(double, unsigned long long)
#undef DACE_PARTITION_PRODUCT
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
