// Helpers for the Redistribute library node (dace_partition.solvers.synthesis.sdfg_node).
//
// A synthesized plan runs on two scratch buffers of the plan's peak tile size: `cur` holds this rank's
// tile, `tmp` receives the next one, and each step swaps them.  Data are moved as bytes (MPI_BYTE), so
// one set of helpers serves every element type.  Device id = rank in MPI_COMM_WORLD.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace dace_partition_redistribute {

inline void ensure_mpi() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) MPI_Init(nullptr, nullptr);
}

inline void check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        std::fprintf(stderr, "dace_partition redistribute: %s failed (%d)\n", what, rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

// Copy the box `ext` at `soff` of a row-major array of shape `sshape` into `dst` (shape `dshape`) at `doff`.
inline void copy_box(const char *src, const long *sshape, const long *soff, char *dst, const long *dshape,
                     const long *doff, const long *ext, int rank, size_t elem) {
    if (rank == 1) {
        std::memcpy(dst + doff[0] * elem, src + soff[0] * elem, ext[0] * elem);
        return;
    }
    size_t sstride = elem, dstride = elem;
    for (int d = 1; d < rank; ++d) {
        sstride *= sshape[d];
        dstride *= dshape[d];
    }
    for (long k = 0; k < ext[0]; ++k)
        copy_box(src + (soff[0] + k) * sstride, sshape + 1, soff + 1, dst + (doff[0] + k) * dstride, dshape + 1,
                 doff + 1, ext + 1, rank - 1, elem);
}

inline long volume(const long *shape, int rank) {
    long v = 1;
    for (int d = 0; d < rank; ++d) v *= shape[d];
    return v;
}

inline MPI_Comm split(int colour, int key) {
    MPI_Comm c;
    check(MPI_Comm_split(MPI_COMM_WORLD, colour, key, &c), "MPI_Comm_split");
    return c;
}

// Keep chunk `chunk` of `n` along `dim` (a local copy).
inline void dynslice(char *&cur, char *&tmp, int rank, const long *shape, int dim, int n, int chunk, size_t elem) {
    std::vector<long> ext(shape, shape + rank), soff(rank, 0), doff(rank, 0);
    ext[dim] /= n;
    soff[dim] = chunk * ext[dim];
    copy_box(cur, shape, soff.data(), tmp, ext.data(), doff.data(), ext.data(), rank, elem);
    std::swap(cur, tmp);
}

// Allgather along `dim` over the group (colour, key): member m's tile lands at block m of `dim`.
inline void allgather(char *&cur, char *&tmp, int rank, const long *shape, int dim, int n, int colour, int key,
                      size_t elem) {
    long bytes = volume(shape, rank) * (long)elem;
    MPI_Comm c = split(colour, key);
    check(MPI_Allgather(cur, (int)bytes, MPI_BYTE, tmp, (int)bytes, MPI_BYTE, c), "MPI_Allgather");
    MPI_Comm_free(&c);
    if (dim == 0) {  // members' tiles are already in order along the outermost dimension
        std::swap(cur, tmp);
        return;
    }
    std::vector<long> out(shape, shape + rank), zero(rank, 0), off(rank, 0);
    out[dim] *= n;
    for (int m = 0; m < n; ++m) {  // local transpose: [n, tile] -> tile with dim grown n-fold
        off[dim] = m * shape[dim];
        copy_box(tmp + m * bytes, shape, zero.data(), cur, out.data(), off.data(), shape, rank, elem);
    }
}

// Alltoall over the group (colour, key) moving, for each t < nmoves, a factor mn[t] from dim mi[t] to dim
// mj[t].  Chunk k (mixed radix over the moves) goes to member k; the piece from member m lands at block m
// (same radix) of the source dims.
inline void alltoall(char *&cur, char *&tmp, int rank, const long *shape, int nmoves, const int *mi, const int *mj,
                     const int *mn, int colour, int key, size_t elem) {
    std::vector<long> chunk(shape, shape + rank), out(shape, shape + rank), zero(rank, 0), off(rank, 0);
    int n = 1;
    for (int t = 0; t < nmoves; ++t) {
        chunk[mj[t]] /= mn[t];
        out[mj[t]] /= mn[t];
        out[mi[t]] *= mn[t];
        n *= mn[t];
    }
    long cbytes = volume(chunk.data(), rank) * (long)elem;
    for (int k = 0; k < n; ++k) {  // pack: chunk k to slot k
        int rest = k;
        for (int t = nmoves - 1; t >= 0; --t) {
            off[mj[t]] = (rest % mn[t]) * chunk[mj[t]];
            rest /= mn[t];
        }
        copy_box(cur, shape, off.data(), tmp + k * cbytes, chunk.data(), zero.data(), chunk.data(), rank, elem);
    }
    MPI_Comm c = split(colour, key);
    check(MPI_Alltoall(tmp, (int)cbytes, MPI_BYTE, cur, (int)cbytes, MPI_BYTE, c), "MPI_Alltoall");
    MPI_Comm_free(&c);
    std::fill(off.begin(), off.end(), 0);
    for (int m = 0; m < n; ++m) {  // unpack: the piece from member m to block m of the source dims
        int rest = m;
        for (int t = nmoves - 1; t >= 0; --t) {
            off[mi[t]] = (rest % mn[t]) * chunk[mi[t]];
            rest /= mn[t];
        }
        copy_box(cur + m * cbytes, chunk.data(), zero.data(), tmp, out.data(), off.data(), chunk.data(), rank, elem);
    }
    std::swap(cur, tmp);
}

// The permutation: send this tile to `dest`, receive the one from `source`.
inline void permute(char *&cur, char *&tmp, long bytes, int dest, int source, int me) {
    if (dest == me && source == me) return;
    check(MPI_Sendrecv(cur, (int)bytes, MPI_BYTE, dest, 77, tmp, (int)bytes, MPI_BYTE, source, 77, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
    std::swap(cur, tmp);
}

}  // namespace dace_partition_redistribute
