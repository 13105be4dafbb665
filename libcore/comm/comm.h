/* comm.h - collectives between the processes of a parallel run (issue 14).
 *
 * A communicator (col_comm) is a group of processes, each with a rank in
 * 0 .. size-1, and a transport that moves their data: MPI on host memory
 * (comm_mpi.h, always built) or NCCL on device memory (comm_nccl.h, built with
 * CUDA). Both fill one table of functions (comm_internal.h), so the code
 * above (data and pipeline parallelism) calls the functions below whatever
 * the transport. Processes are started by the user's launcher (mpirun, srun):
 * this library starts none and opens no socket of its own.
 *
 * Every operation has a blocking form and an asynchronous one (_async) that
 * returns a request at once; col_comm_wait ends it, col_comm_test asks
 * without blocking. Each request must be ended by exactly one col_comm_wait,
 * and its buffers must stay untouched (and allocated) until then. Collectives
 * must be started in the same order, with the same counts, dtype, op and
 * root, on every rank of the communicator (point-to-point operations match
 * by peer and tag). With MPI on host memory, an operation moves forward while
 * some MPI call runs in this process: code that computes while a request is
 * outstanding calls col_comm_test now and then (between ops, say) so the
 * transfer overlaps the computation instead of happening in col_comm_wait.
 *
 * Waits are bounded. col_comm_wait (and every blocking operation) gives up
 * after the communicator's timeout (60 s unless col_comm_set_timeout says
 * otherwise), or as soon as it sees (once a second) that a rank it waits on
 * runs on this host and has exited, with COL_EIO and a message that names
 * the operation and, where it can tell, the rank that is missing: "comm: all-reduce of 1000 f32 on 4
 * ranks: no progress for 60.0 s; rank 2 (pid 4711 on node1) has exited". A
 * transport error (a connection lost to a dead peer) is COL_EIO with the
 * transport's message. After a timeout or a transport error the
 * communicator is broken: the other ranks are out of step, so every later
 * call on it is COL_ESTATE with the first failure's message. The program
 * should then end (exit non-zero): the transport cannot cancel a collective
 * that a dead peer never joins, and shutting MPI down would wait for that
 * peer, so freeing a broken communicator makes no transport call.
 *
 * Reductions: sum, max, min and avg (sum divided by the size, in floating
 * point: f32, bf16 and f16 only). i32 and i64 support sum, max and min. The
 * MPI transport reduces bf16 and f16 in f32 and rounds once at the end (to
 * nearest even). Bitwise reproducibility:
 *   - all-gather, broadcast, all-to-all, send/recv copy bytes: always exact;
 *   - max and min, and integer sums, do not depend on the order: always exact;
 *   - floating-point sum and avg depend on the order the transport adds in.
 *     With col_comm_set_order(c, COL_ORDER_RANK) all-reduce and reduce-scatter
 *     add in rank order, ((x0 + x1) + x2) + ..., in f32 for every float dtype
 *     (then divide by the size for avg, then round once for bf16/f16): the
 *     same bits whatever the transport's algorithms, and the bits a single
 *     process gets by accumulating the ranks' contributions in that order.
 *     The default (COL_ORDER_TRANSPORT) is the transport's own algorithm:
 *     faster, equal on all ranks, but not reproducible against one process.
 *
 * A rank-ordered all-reduce on MPI takes two collectives (the sums of a
 * segment each, then an all-gather of them); the second starts inside
 * col_comm_wait, never col_comm_test, whose outcome depends on timing while
 * every rank must start its collectives in the same order. col_comm_test
 * moves such a request's first half along and never reports it done: its
 * col_comm_wait finishes it.
 *
 * A communicator is used by one thread at a time. Nothing here prints or
 * exits.
 */
#ifndef COL_COMM_H
#define COL_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

typedef struct col_comm col_comm;
typedef struct col_comm_req col_comm_req;

typedef enum { COL_RED_SUM = 0, COL_RED_MAX, COL_RED_MIN, COL_RED_AVG, COL_RED_COUNT } col_red_op;

/* How all-reduce and reduce-scatter order floating-point sums (see above). */
typedef enum { COL_ORDER_TRANSPORT = 0, COL_ORDER_RANK } col_reduce_order;

#define COL_COMM_DEFAULT_TIMEOUT_S 60.0

/* "sum", "max", "min", "avg" */
const char *col_red_op_name(col_red_op op);

/* ---- the communicator ---- */
/* A communicator of every process of the run (MPI_COMM_WORLD): initialises
 * MPI if the program has not (then col_comm_free of the last communicator
 * derived from it finalises MPI), else uses the program's MPI. Collective
 * over all processes. Without a launcher, a process is a run of one. */
col_status col_comm_init_mpi(col_comm **out, col_err *err);
/* Splits c into groups (MPI_Comm_split): the ranks that pass the same color
 * form one communicator, ordered by key (ties by rank in c). color < 0: this
 * rank joins none and *out = NULL. Collective over c; the new communicator
 * has c's transport, timeout and order. For a process grid of D data-parallel
 * by P pipeline groups, rank r = d*P + p: the pipeline group of d is
 * split(c, d, p) and the data-parallel group of p is split(c, p, d). */
col_status col_comm_split(col_comm *c, int color, int key, col_comm **out, col_err *err);
/* Frees c (NULL is fine). Every request on it must have been waited for;
 * communicators split from c remain valid. */
void col_comm_free(col_comm *c);

int col_comm_rank(const col_comm *c);
int col_comm_size(const col_comm *c);
/* This process's rank among the ranks of c on the same host, and how many
 * they are (for choosing a device: col_comm_device). */
int col_comm_local_rank(const col_comm *c);
int col_comm_local_size(const col_comm *c);
/* The device of this process when each host has ndev devices: local rank
 * modulo ndev (0 when ndev < 1). */
int col_comm_device(const col_comm *c, int ndev);
/* Rank r of c in the run's MPI_COMM_WORLD (-1 when r is out of range). */
int col_comm_world_rank(const col_comm *c, int r);
/* "mpi" or "nccl" */
const char *col_comm_transport_name(const col_comm *c);
/* Whether an earlier failure broke c (see above); its message in why. */
bool col_comm_broken(const col_comm *c, col_err *why);

/* The bound of every wait on c, in seconds (> 0; COL_EINVAL otherwise). */
col_status col_comm_set_timeout(col_comm *c, double seconds, col_err *err);
double col_comm_timeout(const col_comm *c);
void col_comm_set_order(col_comm *c, col_reduce_order order);
col_reduce_order col_comm_order(const col_comm *c);

/* ---- traffic counters ----
 * Each communicator counts its own operations (a communicator split from c
 * starts at zero and counts apart from c; col_comm_stats_add sums several).
 * An operation is counted when col_comm_wait (or the blocking form) ends it
 * successfully; one that fails adds no bytes and no op, but its wait time.
 *
 * Bytes are this rank's, by a model of bandwidth-optimal algorithms, not
 * measured on the wire. With P = size, n = count and s = the dtype's size
 * in bytes (B = n*s), per rank and per operation:
 *   all-reduce      sent = recv = floor(2(P-1) * B / P)   (a ring: reduce-scatter, then all-gather)
 *   reduce-scatter  sent = recv = (P-1) * B   (count is one block: (P-1)/P of the P*n elements of send)
 *   all-gather      sent = recv = (P-1) * B   (count is one block: (P-1)/P of the P*n elements of recv)
 *   all-to-all      sent = recv = (P-1) * B   (the block for this rank itself stays here)
 *   broadcast       a pipelined chain from the root: root -> root+1 -> ... (mod P):
 *                   sent = B except for the last rank of the chain (rank (root+P-1) mod P): 0;
 *                   recv = B except for the root: 0
 *   send            sent = B, recv = 0 (exact); recv: sent = 0, recv = B (exact)
 *   barrier         0 bytes
 * A communicator of one rank counts 0 bytes for every collective. The model
 * counts elements in the caller's dtype. What the transports really move may
 * differ: MPI chooses its own algorithms (e.g. a tree broadcast, or
 * recursive doubling for a small all-reduce) and reduces bf16/f16 in f32
 * (twice the bytes) unless the order is COL_ORDER_RANK, whose all-reduce
 * (exchange shares, fold, all-gather the sums) and reduce-scatter move what
 * the model says; NCCL's rings and chains are the model's algorithms. */
typedef struct {
    uint64_t bytes_sent, bytes_recv; /* by the model above */
    double wait_s;                   /* seconds blocked in col_comm_wait, which every blocking operation calls */
    uint64_t ops;                    /* operations completed */
} col_comm_stats;

/* c's counters so far (all zero for NULL). */
void col_comm_get_stats(const col_comm *c, col_comm_stats *s);
/* sum += s, field by field. */
void col_comm_stats_add(col_comm_stats *sum, const col_comm_stats *s);

/* ---- collectives (counts in elements; buffers of the transport's memory) ---- */
/* recv[i] = op over ranks of send[i], i < count, on every rank. send == recv
 * is in place; otherwise they must not overlap. */
col_status col_comm_all_reduce(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt, col_red_op op,
                               col_err *err);
/* send holds size blocks of count elements; rank r gets in recv the
 * reduction of every rank's block r. recv == send + rank*count (elements) is
 * in place (the rank's own block of send); otherwise they must not overlap. */
col_status col_comm_reduce_scatter(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                   col_red_op op, col_err *err);
/* recv (size blocks of count) gets block r = rank r's send. send ==
 * recv + rank*count is in place; otherwise they must not overlap. */
col_status col_comm_all_gather(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt, col_err *err);
/* buf of every rank becomes root's buf. */
col_status col_comm_broadcast(col_comm *c, void *buf, size_t count, col_dtype dt, int root, col_err *err);
/* send and recv hold size blocks of count: block j of send goes to rank j,
 * block j of recv comes from rank j. They must not overlap. */
col_status col_comm_all_to_all(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt, col_err *err);
/* Point to point: tag 0 .. 32767 (NCCL ignores it: messages between two
 * ranks match in the order they were started). */
col_status col_comm_send(col_comm *c, const void *buf, size_t count, col_dtype dt, int peer, int tag, col_err *err);
col_status col_comm_recv(col_comm *c, void *buf, size_t count, col_dtype dt, int peer, int tag, col_err *err);
/* Returns on each rank once every rank has called it. */
col_status col_comm_barrier(col_comm *c, col_err *err);

/* ---- the same, asynchronous: *req on success (NULL on error) ---- */
col_status col_comm_all_reduce_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                     col_red_op op, col_comm_req **req, col_err *err);
col_status col_comm_reduce_scatter_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                         col_red_op op, col_comm_req **req, col_err *err);
col_status col_comm_all_gather_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                     col_comm_req **req, col_err *err);
col_status col_comm_broadcast_async(col_comm *c, void *buf, size_t count, col_dtype dt, int root, col_comm_req **req,
                                    col_err *err);
col_status col_comm_all_to_all_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                     col_comm_req **req, col_err *err);
col_status col_comm_send_async(col_comm *c, const void *buf, size_t count, col_dtype dt, int peer, int tag,
                               col_comm_req **req, col_err *err);
col_status col_comm_recv_async(col_comm *c, void *buf, size_t count, col_dtype dt, int peer, int tag,
                               col_comm_req **req, col_err *err);
col_status col_comm_barrier_async(col_comm *c, col_comm_req **req, col_err *err);

/* Waits (at most the communicator's timeout) for req to complete and frees
 * it, whatever the outcome (NULL is COL_OK). */
col_status col_comm_wait(col_comm_req *req, col_err *err);
/* Waits for n requests in order (each freed; the first error is returned,
 * the later requests are still waited for, and NULL entries skipped). */
col_status col_comm_wait_all(col_comm_req **reqs, int n, col_err *err);
/* Moves req forward without blocking; *done = whether it has completed (its
 * results are then in place). req stays valid: col_comm_wait ends it. */
col_status col_comm_test(col_comm_req *req, bool *done, col_err *err);

#endif
