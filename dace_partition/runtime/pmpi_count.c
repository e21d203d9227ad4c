/* PMPI interposition shim: counts the bytes each rank *receives* through MPI, as the call arguments
 * describe them, so that a lowered program's real communication volume can be compared with what the
 * partitioner's cost model predicted.
 *
 * Why a PMPI shim: the generated code calls MPI from a DaCe-built shared library, where no Python-level
 * hook can see it. Loaded with LD_PRELOAD, the MPI_* symbols defined here come first in the global lookup
 * scope, so the DaCe library and mpi4py both resolve to them; each wrapper adds to the counters and then
 * calls the PMPI_* entry point of the real library (MPICH exports MPI_* as weak aliases of PMPI_*).
 *
 * Counting model ("bytes this rank receives from other ranks"): p = communicator size, me = rank in it,
 * size(t) = PMPI_Type_size. See count_* helpers below and dace_partition/runtime/mpi_count.py for the full table.
 * The large-count MPI-4 variants (MPI_X_c) are counted under the name of MPI_X: mpi4py may pick them, and
 * a count is a count whichever entry point carried it.
 *
 * Counters are process-wide and updated with atomic adds (OpenMP threads of the program may call MPI).
 * Exports for ctypes: dp_pmpi_reset, dp_pmpi_bytes, dp_pmpi_sent, dp_pmpi_calls, dp_pmpi_report,
 * dp_pmpi_seconds, dp_pmpi_wait_seconds, dp_pmpi_wait_calls, dp_pmpi_sync_seconds.
 *
 * Time: each wrapped traffic call also adds the wall seconds spent inside the real PMPI_* call
 * (PMPI_Wtime before and after; the counting itself is not timed) to a per-function counter, printed as
 * the fifth column of dp_pmpi_report. MPI_Wait, MPI_Waitall, MPI_Waitany and MPI_Waitsome are wrapped for
 * their time only (the completion of MPI_Isend / MPI_Irecv). A collective's time includes waiting for the
 * ranks that reach it late: it is the time this rank spent in MPI, not the time the data took to move,
 * unless DP_PMPI_SYNC=1 puts a barrier before each collective (see sync_before).
 *
 * Set-up calls (communicator and datatype construction: MPI_Comm_split, MPI_Comm_dup, MPI_Comm_create,
 * MPI_Cart_create, MPI_Cart_sub, MPI_Type_commit) are counted apart, by number only: they move no data
 * and are in none of the totals above. dp_pmpi_setup_report writes "name calls" lines; dp_pmpi_reset
 * clears them too. A runtime that sets up once shows none of them after a program's first call.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    F_SCATTERV, F_SCATTER, F_GATHERV, F_GATHER, F_BCAST, F_REDUCE, F_ALLREDUCE, F_REDUCE_SCATTER_BLOCK,
    F_ALLTOALL, F_ALLTOALLV, F_ALLTOALLW, F_ALLGATHER, F_ALLGATHERV, F_SENDRECV, F_SEND, F_ISEND, F_RECV,
    F_IRECV, F_COUNT
};

static const char *const names[F_COUNT] = {
    "MPI_Scatterv", "MPI_Scatter", "MPI_Gatherv", "MPI_Gather", "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce",
    "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Alltoallv", "MPI_Alltoallw", "MPI_Allgather",
    "MPI_Allgatherv", "MPI_Sendrecv", "MPI_Send", "MPI_Isend", "MPI_Recv", "MPI_Irecv"};

static long long n_calls[F_COUNT];
static long long n_bytes[F_COUNT];
static long long n_sent[F_COUNT];

static long long n_ns[F_COUNT];   /* wall nanoseconds spent inside the wrapped call (PMPI_Wtime) */

/* Time inside the real call: PMPI_Wtime just before and after it; the counting above it is not timed. */
static void add_time(int f, double t0) {
    double dt = PMPI_Wtime() - t0;
    if (dt > 0) __atomic_fetch_add(&n_ns[f], (long long)(dt * 1e9 + 0.5), __ATOMIC_RELAXED);
}

/* DP_PMPI_SYNC=1: a barrier on the communicator before each collective, outside its timed part, so that
 * its time is the transfer's and not the wait for ranks that arrive late (oversubscribed compute). The
 * barrier's own time is kept apart (dp_pmpi_sync_seconds) and in no other total. Off by default: it
 * changes the program's timing, not its results. Point-to-point calls (halo exchanges) are not synced. */
static int sync_mode = -1;
static long long n_sync_ns;

static void sync_before(MPI_Comm c) {
    if (sync_mode < 0) {
        const char *v = getenv("DP_PMPI_SYNC");
        sync_mode = v && v[0] == '1';
    }
    if (!sync_mode || c == MPI_COMM_NULL) return;
    double t0 = PMPI_Wtime();
    PMPI_Barrier(c);
    double dt = PMPI_Wtime() - t0;
    if (dt > 0) __atomic_fetch_add(&n_sync_ns, (long long)(dt * 1e9 + 0.5), __ATOMIC_RELAXED);
}

static void add(int f, long long bytes, long long sent) {
    __atomic_fetch_add(&n_calls[f], 1, __ATOMIC_RELAXED);
    if (bytes) __atomic_fetch_add(&n_bytes[f], bytes, __ATOMIC_RELAXED);
    if (sent) __atomic_fetch_add(&n_sent[f], sent, __ATOMIC_RELAXED);
}

/* Size of one element of t; 0 for MPI_DATATYPE_NULL, which is legal wherever the count is 0 (Alltoallw). */
static long long tsize(MPI_Datatype t) {
    MPI_Count s = 0;
    if (t == MPI_DATATYPE_NULL) return 0;
    if (PMPI_Type_size_c(t, &s) != MPI_SUCCESS || s < 0) return 0;
    return (long long)s;
}

/* count * size(t), without asking for the type's size when nothing moves (the type may then be unset). */
static long long nbytes(long long count, MPI_Datatype t) { return count > 0 ? count * tsize(t) : 0; }

/* Communicator size and this rank's place in it; 0/-1 for MPI_COMM_NULL so nothing is counted (the real
 * call then reports the error itself). */
static int comm_info(MPI_Comm c, int *me) {
    int p = 0;
    *me = -1;
    if (c == MPI_COMM_NULL) return 0;
    PMPI_Comm_size(c, &p);
    PMPI_Comm_rank(c, me);
    return p;
}

/* ---- the model, one helper per shape of call; the int and MPI_Count entry points share them ---- */

static void count_rooted_in(int f, long long count, MPI_Datatype t, int root, MPI_Comm c) {
    /* Scatter(v) and Bcast: every rank except the root receives its block. */
    int me, p = comm_info(c, &me);
    add(f, (p > 0 && me != root) ? nbytes(count, t) : 0, 0);
}

static void count_reduce(long long count, MPI_Datatype t, int root, MPI_Comm c) {
    int me, p = comm_info(c, &me);
    add(F_REDUCE, (p > 0 && me == root) ? (long long)(p - 1) * nbytes(count, t) : 0, 0);
}

static void count_allreduce(long long count, MPI_Datatype t, MPI_Comm c) {
    /* The bandwidth lower bound of an allreduce: 2 (p-1)/p of the vector per rank. */
    int me, p = comm_info(c, &me);
    add(F_ALLREDUCE, p > 0 ? (2LL * (p - 1) * nbytes(count, t)) / p : 0, 0);
}

static void count_uniform_all(int f, long long count, MPI_Datatype t, MPI_Comm c) {
    /* Allgather, Alltoall, Reduce_scatter_block: one block from each of the p-1 others. */
    int me, p = comm_info(c, &me);
    add(f, p > 0 ? (long long)(p - 1) * nbytes(count, t) : 0, 0);
}

#define SUM_OTHERS(counts, skip, size_of_q)                                                             \
    do {                                                                                                \
        for (int q = 0; q < p; ++q)                                                                     \
            if (q != (skip) && (counts)[q] > 0) total += (long long)(counts)[q] * (size_of_q);          \
    } while (0)

/* ---- MPI_Scatterv / MPI_Scatter ---- */

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    count_rooted_in(F_SCATTERV, recvcount, recvtype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    add_time(F_SCATTERV, t0_);
    return rc_;
}

int MPI_Scatterv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint displs[],
                   MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, int root,
                   MPI_Comm comm) {
    count_rooted_in(F_SCATTERV, recvcount, recvtype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Scatterv_c(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    add_time(F_SCATTERV, t0_);
    return rc_;
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
    count_rooted_in(F_SCATTER, recvcount, recvtype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    add_time(F_SCATTER, t0_);
    return rc_;
}

int MPI_Scatter_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                  MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    count_rooted_in(F_SCATTER, recvcount, recvtype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Scatter_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    add_time(F_SCATTER, t0_);
    return rc_;
}

/* ---- MPI_Gatherv / MPI_Gather: the root receives every other rank's block ---- */

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    if (p > 0 && me == root) SUM_OTHERS(recvcounts, root, tsize(recvtype));
    add(F_GATHERV, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
    add_time(F_GATHERV, t0_);
    return rc_;
}

int MPI_Gatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                  const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype, int root,
                  MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    if (p > 0 && me == root) SUM_OTHERS(recvcounts, root, tsize(recvtype));
    add(F_GATHERV, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Gatherv_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
    add_time(F_GATHERV, t0_);
    return rc_;
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    add(F_GATHER, (p > 0 && me == root) ? (long long)(p - 1) * nbytes(recvcount, recvtype) : 0, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    add_time(F_GATHER, t0_);
    return rc_;
}

int MPI_Gather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                 MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    add(F_GATHER, (p > 0 && me == root) ? (long long)(p - 1) * nbytes(recvcount, recvtype) : 0, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Gather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    add_time(F_GATHER, t0_);
    return rc_;
}

/* ---- MPI_Bcast ---- */

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    count_rooted_in(F_BCAST, count, datatype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Bcast(buffer, count, datatype, root, comm);
    add_time(F_BCAST, t0_);
    return rc_;
}

int MPI_Bcast_c(void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    count_rooted_in(F_BCAST, count, datatype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Bcast_c(buffer, count, datatype, root, comm);
    add_time(F_BCAST, t0_);
    return rc_;
}

/* ---- reductions ---- */

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
               MPI_Comm comm) {
    count_reduce(count, datatype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    add_time(F_REDUCE, t0_);
    return rc_;
}

int MPI_Reduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                 int root, MPI_Comm comm) {
    count_reduce(count, datatype, root, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Reduce_c(sendbuf, recvbuf, count, datatype, op, root, comm);
    add_time(F_REDUCE, t0_);
    return rc_;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
    count_allreduce(count, datatype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    add_time(F_ALLREDUCE, t0_);
    return rc_;
}

int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                    MPI_Comm comm) {
    count_allreduce(count, datatype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Allreduce_c(sendbuf, recvbuf, count, datatype, op, comm);
    add_time(F_ALLREDUCE, t0_);
    return rc_;
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                             MPI_Op op, MPI_Comm comm) {
    count_uniform_all(F_REDUCE_SCATTER_BLOCK, recvcount, datatype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    add_time(F_REDUCE_SCATTER_BLOCK, t0_);
    return rc_;
}

int MPI_Reduce_scatter_block_c(const void *sendbuf, void *recvbuf, MPI_Count recvcount, MPI_Datatype datatype,
                               MPI_Op op, MPI_Comm comm) {
    count_uniform_all(F_REDUCE_SCATTER_BLOCK, recvcount, datatype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Reduce_scatter_block_c(sendbuf, recvbuf, recvcount, datatype, op, comm);
    add_time(F_REDUCE_SCATTER_BLOCK, t0_);
    return rc_;
}

/* ---- all-to-all ---- */

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
    count_uniform_all(F_ALLTOALL, recvcount, recvtype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    add_time(F_ALLTOALL, t0_);
    return rc_;
}

int MPI_Alltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                   MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    count_uniform_all(F_ALLTOALL, recvcount, recvtype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Alltoall_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    add_time(F_ALLTOALL, t0_);
    return rc_;
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                  MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    SUM_OTHERS(recvcounts, me, tsize(recvtype));
    add(F_ALLTOALLV, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    add_time(F_ALLTOALLV, t0_);
    return rc_;
}

int MPI_Alltoallv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                    MPI_Datatype sendtype, void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                    MPI_Datatype recvtype, MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    SUM_OTHERS(recvcounts, me, tsize(recvtype));
    add(F_ALLTOALLV, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Alltoallv_c(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                            comm);
    add_time(F_ALLTOALLV, t0_);
    return rc_;
}

int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const int rdispls[],
                  const MPI_Datatype recvtypes[], MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    SUM_OTHERS(recvcounts, me, tsize(recvtypes[q]));
    add(F_ALLTOALLW, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                          comm);
    add_time(F_ALLTOALLW, t0_);
    return rc_;
}

int MPI_Alltoallw_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                    const MPI_Datatype sendtypes[], void *recvbuf, const MPI_Count recvcounts[],
                    const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    SUM_OTHERS(recvcounts, me, tsize(recvtypes[q]));
    add(F_ALLTOALLW, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Alltoallw_c(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                            comm);
    add_time(F_ALLTOALLW, t0_);
    return rc_;
}

/* ---- allgather ---- */

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    count_uniform_all(F_ALLGATHER, recvcount, recvtype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    add_time(F_ALLGATHER, t0_);
    return rc_;
}

int MPI_Allgather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                    MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    count_uniform_all(F_ALLGATHER, recvcount, recvtype, comm);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Allgather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    add_time(F_ALLGATHER, t0_);
    return rc_;
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    SUM_OTHERS(recvcounts, me, tsize(recvtype));
    add(F_ALLGATHERV, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    add_time(F_ALLGATHERV, t0_);
    return rc_;
}

int MPI_Allgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                     const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype,
                     MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long total = 0;
    SUM_OTHERS(recvcounts, me, tsize(recvtype));
    add(F_ALLGATHERV, total, 0);
    sync_before(comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Allgatherv_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    add_time(F_ALLGATHERV, t0_);
    return rc_;
}

/* ---- point to point ---- */

static void count_sendrecv(long long sendcount, MPI_Datatype sendtype, int dest, long long recvcount,
                           MPI_Datatype recvtype, int source, MPI_Comm comm) {
    int me, p = comm_info(comm, &me);
    long long in = (p > 0 && source != me && source != MPI_PROC_NULL) ? nbytes(recvcount, recvtype) : 0;
    long long out = (p > 0 && dest != me && dest != MPI_PROC_NULL) ? nbytes(sendcount, sendtype) : 0;
    add(F_SENDRECV, in, out);
}

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                 MPI_Status *status) {
    count_sendrecv(sendcount, sendtype, dest, recvcount, recvtype, source, comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                         recvtag, comm, status);
    add_time(F_SENDRECV, t0_);
    return rc_;
}

int MPI_Sendrecv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                   void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, int source, int recvtag,
                   MPI_Comm comm, MPI_Status *status) {
    count_sendrecv(sendcount, sendtype, dest, recvcount, recvtype, source, comm);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Sendrecv_c(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                           recvtag, comm, status);
    add_time(F_SENDRECV, t0_);
    return rc_;
}

/* Sends receive nothing; their volume goes to the separate "sent" counter. Receives count their whole
 * buffer (an upper bound: the message may be shorter). A peer of MPI_PROC_NULL moves nothing. */

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    add(F_SEND, 0, dest != MPI_PROC_NULL ? nbytes(count, datatype) : 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Send(buf, count, datatype, dest, tag, comm);
    add_time(F_SEND, t0_);
    return rc_;
}

int MPI_Send_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    add(F_SEND, 0, dest != MPI_PROC_NULL ? nbytes(count, datatype) : 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Send_c(buf, count, datatype, dest, tag, comm);
    add_time(F_SEND, t0_);
    return rc_;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request *request) {
    add(F_ISEND, 0, dest != MPI_PROC_NULL ? nbytes(count, datatype) : 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
    add_time(F_ISEND, t0_);
    return rc_;
}

int MPI_Isend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                MPI_Request *request) {
    add(F_ISEND, 0, dest != MPI_PROC_NULL ? nbytes(count, datatype) : 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Isend_c(buf, count, datatype, dest, tag, comm, request);
    add_time(F_ISEND, t0_);
    return rc_;
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    add(F_RECV, source != MPI_PROC_NULL ? nbytes(count, datatype) : 0, 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Recv(buf, count, datatype, source, tag, comm, status);
    add_time(F_RECV, t0_);
    return rc_;
}

int MPI_Recv_c(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
               MPI_Status *status) {
    add(F_RECV, source != MPI_PROC_NULL ? nbytes(count, datatype) : 0, 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Recv_c(buf, count, datatype, source, tag, comm, status);
    add_time(F_RECV, t0_);
    return rc_;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request) {
    add(F_IRECV, source != MPI_PROC_NULL ? nbytes(count, datatype) : 0, 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
    add_time(F_IRECV, t0_);
    return rc_;
}

int MPI_Irecv_c(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                MPI_Request *request) {
    add(F_IRECV, source != MPI_PROC_NULL ? nbytes(count, datatype) : 0, 0);
    double t0_ = PMPI_Wtime();
    int rc_ = PMPI_Irecv_c(buf, count, datatype, source, tag, comm, request);
    add_time(F_IRECV, t0_);
    return rc_;
}

/* ---- completion of the nonblocking calls: timed only ----
 * MPI_Isend / MPI_Irecv return at once; the waiting for their data happens in MPI_Wait(all/any/some)
 * (the halo exchange ends with MPI_Waitall). These wrappers add their time to a separate counter
 * (dp_pmpi_wait_seconds, dp_pmpi_wait_calls) that is part of dp_pmpi_seconds but not of the byte counts,
 * the call counts or the report lines: they move no data of their own. */

static long long n_wait_calls, n_wait_ns;

static int timed_wait(int rc, double t0) {
    double dt = PMPI_Wtime() - t0;
    __atomic_fetch_add(&n_wait_calls, 1, __ATOMIC_RELAXED);
    if (dt > 0) __atomic_fetch_add(&n_wait_ns, (long long)(dt * 1e9 + 0.5), __ATOMIC_RELAXED);
    return rc;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    double t0 = PMPI_Wtime();
    return timed_wait(PMPI_Wait(request, status), t0);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    double t0 = PMPI_Wtime();
    return timed_wait(PMPI_Waitall(count, requests, statuses), t0);
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
    double t0 = PMPI_Wtime();
    return timed_wait(PMPI_Waitany(count, requests, index, status), t0);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    double t0 = PMPI_Wtime();
    return timed_wait(PMPI_Waitsome(incount, requests, outcount, indices, statuses), t0);
}

/* ---- set-up calls: counted by number, apart from the traffic counters ---- */

enum { S_COMM_SPLIT, S_COMM_DUP, S_COMM_CREATE, S_CART_CREATE, S_CART_SUB, S_TYPE_COMMIT, S_COUNT };

static const char *const setup_names[S_COUNT] = {"MPI_Comm_split", "MPI_Comm_dup",  "MPI_Comm_create",
                                                 "MPI_Cart_create", "MPI_Cart_sub", "MPI_Type_commit"};

static long long n_setup[S_COUNT];

static void add_setup(int f) { __atomic_fetch_add(&n_setup[f], 1, __ATOMIC_RELAXED); }

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
    add_setup(S_COMM_SPLIT);
    return PMPI_Comm_split(comm, color, key, newcomm);
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) {
    add_setup(S_COMM_DUP);
    return PMPI_Comm_dup(comm, newcomm);
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm) {
    add_setup(S_COMM_CREATE);
    return PMPI_Comm_create(comm, group, newcomm);
}

int MPI_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder,
                    MPI_Comm *comm_cart) {
    add_setup(S_CART_CREATE);
    return PMPI_Cart_create(comm_old, ndims, dims, periods, reorder, comm_cart);
}

int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm) {
    add_setup(S_CART_SUB);
    return PMPI_Cart_sub(comm, remain_dims, newcomm);
}

int MPI_Type_commit(MPI_Datatype *datatype) {
    add_setup(S_TYPE_COMMIT);
    return PMPI_Type_commit(datatype);
}

/* "name calls" per set-up function called since the last reset (same contract as dp_pmpi_report). */
int dp_pmpi_setup_report(char *buf, int len) {
    int need = 0;
    for (int f = 0; f < S_COUNT; ++f) {
        long long c = __atomic_load_n(&n_setup[f], __ATOMIC_RELAXED);
        if (!c) continue;
        int room = len - need;
        int n = snprintf(room > 0 ? buf + need : NULL, room > 0 ? (size_t)room : 0, "%s %lld\n", setup_names[f], c);
        if (n < 0) return -1;
        need += n;
    }
    if (len > 0 && need == 0) buf[0] = '\0';
    return need;
}

/* ---- accessors (plain C types, for ctypes) ---- */

void dp_pmpi_reset(void) {
    for (int f = 0; f < S_COUNT; ++f) __atomic_store_n(&n_setup[f], 0, __ATOMIC_RELAXED);
    for (int f = 0; f < F_COUNT; ++f) {
        __atomic_store_n(&n_calls[f], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&n_bytes[f], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&n_sent[f], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&n_ns[f], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&n_wait_calls, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&n_wait_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&n_sync_ns, 0, __ATOMIC_RELAXED);
}

static long long total_of(const long long *v) {
    long long s = 0;
    for (int f = 0; f < F_COUNT; ++f) s += __atomic_load_n(&v[f], __ATOMIC_RELAXED);
    return s;
}

/* Bytes received by this process since the last reset (the model above). */
long long dp_pmpi_bytes(void) { return total_of(n_bytes); }

/* Bytes handed to sends (MPI_Send, MPI_Isend and the send half of MPI_Sendrecv) since the last reset. */
long long dp_pmpi_sent(void) { return total_of(n_sent); }

/* Counted MPI calls since the last reset. */
long long dp_pmpi_calls(void) { return total_of(n_calls); }

/* Wall seconds spent inside the wrapped traffic calls and the MPI_Wait* calls since the last reset. */
double dp_pmpi_seconds(void) {
    return (double)(total_of(n_ns) + __atomic_load_n(&n_wait_ns, __ATOMIC_RELAXED)) * 1e-9;
}

/* Seconds in the barriers that DP_PMPI_SYNC=1 puts before collectives (in no other total). */
double dp_pmpi_sync_seconds(void) { return (double)__atomic_load_n(&n_sync_ns, __ATOMIC_RELAXED) * 1e-9; }

/* Of dp_pmpi_seconds, the part inside MPI_Wait, MPI_Waitall, MPI_Waitany and MPI_Waitsome; and their calls. */
double dp_pmpi_wait_seconds(void) { return (double)__atomic_load_n(&n_wait_ns, __ATOMIC_RELAXED) * 1e-9; }
long long dp_pmpi_wait_calls(void) { return __atomic_load_n(&n_wait_calls, __ATOMIC_RELAXED); }

/* Writes one "name calls bytes sent seconds" line per function called since the last reset into buf (always
 * NUL-terminated when len > 0). Returns the length the full report needs, excluding the NUL, like
 * snprintf: a caller whose buffer was too small can retry with a larger one. */
int dp_pmpi_report(char *buf, int len) {
    int need = 0;
    for (int f = 0; f < F_COUNT; ++f) {
        long long c = __atomic_load_n(&n_calls[f], __ATOMIC_RELAXED);
        if (!c) continue;
        long long b = __atomic_load_n(&n_bytes[f], __ATOMIC_RELAXED);
        long long s = __atomic_load_n(&n_sent[f], __ATOMIC_RELAXED);
        double t = (double)__atomic_load_n(&n_ns[f], __ATOMIC_RELAXED) * 1e-9;
        int room = len - need;
        int n = snprintf(room > 0 ? buf + need : NULL, room > 0 ? (size_t)room : 0, "%s %lld %lld %lld %.9f\n",
                         names[f], c, b, s, t);
        if (n < 0) return -1;
        need += n;
    }
    if (len > 0 && need == 0) buf[0] = '\0';
    return need;
}
