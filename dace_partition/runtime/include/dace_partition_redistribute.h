// Helpers for the Redistribute library node (dace_partition.solvers.synthesis.sdfg_node).
//
// A synthesized plan runs on two scratch buffers of the plan's peak tile size: `cur` holds this rank's
// tile, `tmp` receives the next one, and each step swaps them.  Data are moved as bytes (MPI_BYTE), so
// one set of helpers serves every element type.  Device id = rank in the runtime's private communicator
// (dace_partition::comm(), a duplicate of MPI_COMM_WORLD with the same ranks), which every call here
// uses: MPI is initialized, checked and failed the same way as in dace_partition_runtime.h.
//
// Sub-communicators: the emitted code passes each step's whole colour and key tables (static arrays);
// the group of a step is split once, at its first call, cached by those tables and freed at exit
// (dace_partition::free_grids, or this environment's finalize()). The older overloads taking this rank's
// colour and key alone still work, but split per call.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "dace_partition_runtime.h"

namespace {
namespace dace_partition_redistribute {

inline void ensure_mpi() { dace_partition::init_mpi(); }

// Frees every cached communicator and datatype and the private communicator (idempotent).
inline void finalize() { dace_partition::free_grids(); }

inline void check(int rc, const char *what) { dace_partition::check(rc, what); }

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

// A group split per call (the older overloads): the caller frees it.
inline MPI_Comm split(int colour, int key) {
    MPI_Comm c;
    check(MPI_Comm_split(dace_partition::comm(), colour, key, &c), "MPI_Comm_split");
    return c;
}

// The group of a step whose colour and key tables (one entry per rank, static in the emitted code) are
// `colour` and `key`: split at the first call (every rank reaches the step together), then shared through
// the runtime's cache of split communicators.
inline MPI_Comm group(const int *colour, const int *key) {
    int n = dace_partition::world_size(), me = dace_partition::world_rank();
    std::vector<int> ck(2 * n);
    for (int r = 0; r < n; ++r) {
        ck[2 * r] = colour[r];
        ck[2 * r + 1] = key[r];
    }
    return dace_partition::split_comm(dace_partition::comm(), std::move(ck), colour[me], key[me]);
}

inline std::map<long long, dace_partition::Count> &byte_counts() {
    static std::map<long long, dace_partition::Count> m;
    return m;
}

inline void free_byte_counts() {
    for (auto &kv : byte_counts()) kv.second.release();
    byte_counts().clear();
}

// `bytes` bytes as (datatype, int count): (MPI_BYTE, bytes) within the int range, else a derived
// datatype built once per size (dace_partition::large_count) and kept until exit.
inline dace_partition::Count bytes_of(long long bytes) {
    if (dace_partition::fits(bytes)) {
        dace_partition::Count c;
        c.type = MPI_BYTE;
        c.n = (int)bytes;
        return c;
    }
    auto it = byte_counts().find(bytes);
    if (it != byte_counts().end()) return it->second;
    dace_partition::at_exit(free_byte_counts);
    return byte_counts().emplace(bytes, dace_partition::large_count(bytes, MPI_BYTE)).first->second;
}

// Keep chunk `chunk` of `n` along `dim` (a local copy).
inline void dynslice(char *&cur, char *&tmp, int rank, const long *shape, int dim, int n, int chunk, size_t elem) {
    std::vector<long> ext(shape, shape + rank), soff(rank, 0), doff(rank, 0);
    ext[dim] /= n;
    soff[dim] = chunk * ext[dim];
    copy_box(cur, shape, soff.data(), tmp, ext.data(), doff.data(), ext.data(), rank, elem);
    std::swap(cur, tmp);
}

// Allgather along `dim` over the group `c`: member m's tile lands at block m of `dim`.
inline void allgather_on(char *&cur, char *&tmp, int rank, const long *shape, int dim, int n, MPI_Comm c,
                         size_t elem) {
    long bytes = volume(shape, rank) * (long)elem;
    dace_partition::Count b = bytes_of(bytes);
    check(MPI_Allgather(cur, b.n, b.type, tmp, b.n, b.type, c), "MPI_Allgather");
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

// The step's group from its colour and key tables (split once).
inline void allgather(char *&cur, char *&tmp, int rank, const long *shape, int dim, int n, const int *colour,
                      const int *key, size_t elem) {
    allgather_on(cur, tmp, rank, shape, dim, n, group(colour, key), elem);
}

// Older overload: this rank's colour and key (the group is split for this call).
inline void allgather(char *&cur, char *&tmp, int rank, const long *shape, int dim, int n, int colour, int key,
                      size_t elem) {
    MPI_Comm c = split(colour, key);
    allgather_on(cur, tmp, rank, shape, dim, n, c, elem);
    MPI_Comm_free(&c);
}

// Alltoall over the group `c` moving, for each t < nmoves, a factor mn[t] from dim mi[t] to dim mj[t].
// Chunk k (mixed radix over the moves) goes to member k; the piece from member m lands at block m (same
// radix) of the source dims.
inline void alltoall_on(char *&cur, char *&tmp, int rank, const long *shape, int nmoves, const int *mi,
                        const int *mj, const int *mn, MPI_Comm c, size_t elem) {
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
    dace_partition::Count b = bytes_of(cbytes);
    check(MPI_Alltoall(tmp, b.n, b.type, cur, b.n, b.type, c), "MPI_Alltoall");
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

inline void alltoall(char *&cur, char *&tmp, int rank, const long *shape, int nmoves, const int *mi, const int *mj,
                     const int *mn, const int *colour, const int *key, size_t elem) {
    alltoall_on(cur, tmp, rank, shape, nmoves, mi, mj, mn, group(colour, key), elem);
}

inline void alltoall(char *&cur, char *&tmp, int rank, const long *shape, int nmoves, const int *mi, const int *mj,
                     const int *mn, int colour, int key, size_t elem) {
    MPI_Comm c = split(colour, key);
    alltoall_on(cur, tmp, rank, shape, nmoves, mi, mj, mn, c, elem);
    MPI_Comm_free(&c);
}

// The permutation: send this tile to `dest`, receive the one from `source` (private communicator).
inline void permute(char *&cur, char *&tmp, long bytes, int dest, int source, int me) {
    if (dest == me && source == me) return;
    dace_partition::Count b = bytes_of(bytes);
    check(MPI_Sendrecv(cur, b.n, b.type, dest, 77, tmp, b.n, b.type, source, 77, dace_partition::comm(),
                       MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
    std::swap(cur, tmp);
}

}  // namespace dace_partition_redistribute
}  // namespace
