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
#if !defined(DACE_PARTITION_WCR_SHIM)
#define DACE_PARTITION_WCR_SHIM
// Write-conflict resolution on the GPU (dace::_wcr_fixed<R, T>::reduce_atomic), two defects of DaCe 1.0.2:
// - the atomic product is its plain update, so threads multiplying into one element race (a column
//   product on two ranks came out as one thread's partial);
// - logical and bitwise and/or/xor, and min/max/exchange on some types, call an atomicAnd/atomicOr/...
//   overload CUDA does not have (bool, 8- and 16-bit integers, long), a compile error for np.all-like
//   reductions.
// Specialized here, right after DaCe's header and before any use, as one compare-and-swap loop (on the
// aligned 32-bit word around an element narrower than that).
#include <dace/reduction.h>
#include <cstdint>
#include <cstring>
#include <type_traits>
namespace dace_partition_cuda {
struct op_sum { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a + b; } };
struct op_product { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a * b; } };
struct op_min { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return b < a ? b : a; } };
struct op_max { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a < b ? b : a; } };
struct op_land { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a && b; } };
struct op_lor { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a || b; } };
struct op_lxor { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a != b; } };
struct op_band { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a & b; } };
struct op_bor { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a | b; } };
struct op_bxor { template <typename T> DACE_HDFI T operator()(const T &a, const T &b) const { return a ^ b; } };
struct op_exchange { template <typename T> DACE_HDFI T operator()(const T &, const T &b) const { return b; } };

// *ptr = op(*ptr, value) atomically; returns the old value.
template <typename T, typename Op>
DACE_HDFI T atomic_update(T *ptr, const T &value, Op op) {
#if defined(__CUDA_ARCH__)
    static_assert(sizeof(T) <= 8, "a compare-and-swap word holds the element");
    using Word = typename std::conditional<sizeof(T) == 8, unsigned long long, unsigned int>::type;
    const uintptr_t at = reinterpret_cast<uintptr_t>(ptr);
    Word *word = reinterpret_cast<Word *>(sizeof(T) >= 4 ? at : at & ~uintptr_t(3));
    const unsigned shift = sizeof(T) >= 4 ? 0u : unsigned(at & 3) * 8u;
    const Word mask = sizeof(T) >= 4 ? ~Word(0) : Word(((1ull << (8 * sizeof(T))) - 1) << shift);
    Word old = *word, assumed;
    T current;
    do {
        assumed = old;
        Word bits = (assumed & mask) >> shift;
        memcpy(&current, &bits, sizeof(T));  // the element's bytes (little-endian)
        T next = op(current, value);
        Word out = 0;
        memcpy(&out, &next, sizeof(T));
        old = atomicCAS(word, assumed, (assumed & ~mask) | ((out << shift) & mask));
    } while (assumed != old);
    return current;
#else
    T old;
#pragma omp critical
    {
        old = *ptr;
        *ptr = op(old, value);
    }
    return old;
#endif
}
}  // namespace dace_partition_cuda
#define DACE_PARTITION_WCR(R, OP, T)                                                                        \
    namespace dace {                                                                                         \
    template <>                                                                                              \
    struct _wcr_fixed<ReductionType::R, T> {                                                                 \
        static DACE_HDFI T reduce_atomic(T *ptr, const T &value) {                                           \
            return dace_partition_cuda::atomic_update(ptr, value, dace_partition_cuda::OP());                \
        }                                                                                                    \
        DACE_HDFI T operator()(const T &a, const T &b) const { return dace_partition_cuda::OP()(a, b); }      \
    };                                                                                                       \
    }
#define DACE_PARTITION_WCR_NARROW(R, OP)                                                                    \
    DACE_PARTITION_WCR(R, OP, bool)                                                                          \
    DACE_PARTITION_WCR(R, OP, int8_t)                                                                        \
    DACE_PARTITION_WCR(R, OP, uint8_t)                                                                       \
    DACE_PARTITION_WCR(R, OP, int16_t)                                                                       \
    DACE_PARTITION_WCR(R, OP, uint16_t)
#define DACE_PARTITION_WCR_NARROW_AND_LONG(R, OP)                                                           \
    DACE_PARTITION_WCR_NARROW(R, OP)                                                                         \
    DACE_PARTITION_WCR(R, OP, long)                                                                          \
    DACE_PARTITION_WCR(R, OP, unsigned long)
// Only the pairs that DaCe gets wrong with CUDA 13 (a plain update, or no CUDA overload); the others keep
// DaCe's own atomics (atomicAdd, atomicMin, ...). tests/mpi/test_gpu.py compiles every pair.
DACE_PARTITION_WCR_NARROW(Sum, op_sum)
DACE_PARTITION_WCR(Sum, op_sum, long long)
DACE_PARTITION_WCR_NARROW_AND_LONG(Product, op_product)
DACE_PARTITION_WCR(Product, op_product, int)
DACE_PARTITION_WCR(Product, op_product, unsigned int)
DACE_PARTITION_WCR(Product, op_product, long long)
DACE_PARTITION_WCR(Product, op_product, unsigned long long)
DACE_PARTITION_WCR(Product, op_product, float)
DACE_PARTITION_WCR(Product, op_product, double)
DACE_PARTITION_WCR_NARROW(Min, op_min)
DACE_PARTITION_WCR_NARROW(Max, op_max)
DACE_PARTITION_WCR_NARROW_AND_LONG(Logical_And, op_land)
DACE_PARTITION_WCR(Logical_And, op_land, float)
DACE_PARTITION_WCR(Logical_And, op_land, double)
DACE_PARTITION_WCR_NARROW_AND_LONG(Logical_Or, op_lor)
DACE_PARTITION_WCR(Logical_Or, op_lor, float)
DACE_PARTITION_WCR(Logical_Or, op_lor, double)
DACE_PARTITION_WCR_NARROW_AND_LONG(Logical_Xor, op_lxor)
DACE_PARTITION_WCR(Logical_Xor, op_lxor, float)
DACE_PARTITION_WCR(Logical_Xor, op_lxor, double)
DACE_PARTITION_WCR_NARROW_AND_LONG(Bitwise_And, op_band)
DACE_PARTITION_WCR_NARROW_AND_LONG(Bitwise_Or, op_bor)
DACE_PARTITION_WCR_NARROW_AND_LONG(Bitwise_Xor, op_bxor)
DACE_PARTITION_WCR_NARROW_AND_LONG(Exchange, op_exchange)
DACE_PARTITION_WCR(Exchange, op_exchange, long long)
DACE_PARTITION_WCR(Exchange, op_exchange, double)
#undef DACE_PARTITION_WCR_NARROW_AND_LONG
#undef DACE_PARTITION_WCR_NARROW
#undef DACE_PARTITION_WCR
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

// cudaSetDevice(local_rank % device_count), chosen once per process (the first call is a collective over
// MPI_COMM_WORLD: the runtime makes it when every rank loads the program). Runs before DaCe creates its
// CUDA streams (see dace_partition_cuda_device_count in passes/gpu.py), so every stream lives on the
// selected GPU. The device is per host thread in CUDA: a later call from another thread selects it there
// too. A missing GPU is left to DaCe's own initialization, which reports it.
inline int select_device() {
    static int selected = -2;
    if (selected != -2) {
        int current = -1;
        if (selected >= 0 && (cudaGetDevice(&current) != cudaSuccess || current != selected)) cudaSetDevice(selected);
        return selected;
    }
    selected = -1;
    int count = 0;
    int lrank = local_rank();
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return selected;
    int dev = lrank % count;
    if (cudaSetDevice(dev) == cudaSuccess) selected = dev;
    return selected;
}

// The copier of the packed moves between buffers in GPU memory (dace_partition_device_moves.h): pitched
// 2-D and 3-D copies on a stream of its own (cudaMemcpyDefault: the pointers say which way), packed
// pieces in device memory (`device`: MPI is CUDA-aware) or in pinned host memory. A CUDA error ends
// every rank.
struct DeviceCopy {
    cudaStream_t stream = nullptr;

    static void check(cudaError_t e, const char *what) {
        if (e == cudaSuccess) return;
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::fprintf(stderr, "dace_partition: rank %d: %s in a packed halo exchange or redistribution: %s\n", rank,
                     what, cudaGetErrorString(e));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cudaStream_t on() {
        if (!stream) check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        return stream;
    }
    void *alloc(size_t bytes, bool device) {
        void *p = nullptr;
        check(device ? cudaMalloc(&p, bytes ? bytes : 1) : cudaMallocHost(&p, bytes ? bytes : 1),
              device ? "cudaMalloc" : "cudaMallocHost");
        return p;
    }
    void free(void *p, bool device) {  // errors ignored: at exit the context may be gone already
        if (p) (void)(device ? cudaFree(p) : cudaFreeHost(p));
    }
    // The driver refuses a pitch above the device's memPitch (2^31 - 1 bytes on current GPUs), even for one
    // row: a contiguous run is one plain copy, rows at a larger pitch one copy each.
    static constexpr size_t max_pitch = 2147483647;
    void copy1d(void *dst, const void *src, size_t bytes) {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, on()), "cudaMemcpyAsync");
    }
    void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
        if (height == 1 || (width == spitch && width == dpitch)) return copy1d(dst, src, width * height);
        if (spitch > max_pitch || dpitch > max_pitch) {
            for (size_t r = 0; r < height; ++r)
                copy1d(static_cast<char *>(dst) + r * dpitch, static_cast<const char *>(src) + r * spitch, width);
            return;
        }
        check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, on()), "cudaMemcpy2DAsync");
    }
    // `depth` slices of `height` rows; a slice of each buffer is `drows` / `srows` of its rows (copy_box
    // makes sure that is whole and holds `height` rows).
    void copy3d(void *dst, size_t dpitch, size_t drows, const void *src, size_t spitch, size_t srows, size_t width,
                size_t height, size_t depth) {
        if (spitch > max_pitch || dpitch > max_pitch) {
            for (size_t z = 0; z < depth; ++z)
                copy2d(static_cast<char *>(dst) + z * drows * dpitch, dpitch,
                       static_cast<const char *>(src) + z * srows * spitch, spitch, width, height);
            return;
        }
        cudaMemcpy3DParms p = {};
        p.srcPtr = make_cudaPitchedPtr(const_cast<void *>(src), spitch, width, srows);
        p.dstPtr = make_cudaPitchedPtr(dst, dpitch, width, drows);
        p.extent = make_cudaExtent(width, height, depth);
        p.kind = cudaMemcpyDefault;
        check(cudaMemcpy3DAsync(&p, on()), "cudaMemcpy3DAsync");
    }
    void sync() { check(cudaStreamSynchronize(on()), "cudaStreamSynchronize"); }
    void wait_for_kernels() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
    void release() {
        if (stream) (void)cudaStreamDestroy(stream);
        stream = nullptr;
    }
};

}  // namespace dace_partition_cuda

// DaCe 1.0.2 allocates a persistent pinned array (the host twin MPI uses for a GPU-resident buffer) with
// cudaMallocHost(&__state->x, ...), where the member is `T * __restrict__`: neither of CUDA's overloads
// takes a pointer to a restrict pointer. This one does.
template <typename T>
static inline cudaError_t cudaMallocHost(T *__restrict__ *ptr, size_t size) {
    return cudaMallocHost(reinterpret_cast<void **>(const_cast<T **>(ptr)), size);
}
#endif  // DACE_PARTITION_CUDA_H
