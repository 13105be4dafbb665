/* comm_internal.h - what a transport fills and what the files of
 * libcore/comm share (not for users of the library).
 *
 * The files call each other in one direction:
 *   comm.c (the public calls: checks, requests, the bounded wait)
 *   comm_mpi.c, comm_nccl.c (the transports; the NCCL one uses the public calls of an MPI communicator)
 *     -> comm_util.c (peers, messages, dtype conversion, the rank-ordered fold)
 * comm.c reaches a transport only through its table.
 */
#ifndef COL_COMM_INTERNAL_H
#define COL_COMM_INTERNAL_H

#include <stdint.h>

#include "comm.h"

#define COL_COMM_HOST_MAX 64

/* One rank of a communicator as every rank sees it (exchanged at creation):
 * enough to tell, on a timeout, whether a peer on this host has exited. */
typedef struct {
    int world_rank;
    int pid;
    char host[COL_COMM_HOST_MAX];
} col_comm_peer;

typedef enum {
    COL_COMM_ALL_REDUCE = 0,
    COL_COMM_REDUCE_SCATTER,
    COL_COMM_ALL_GATHER,
    COL_COMM_BROADCAST,
    COL_COMM_ALL_TO_ALL,
    COL_COMM_SEND,
    COL_COMM_RECV,
    COL_COMM_BARRIER,
    COL_COMM_OP_COUNT
} col_comm_op;

/* The start of every transport's request (the transport's own struct begins
 * with it; the generic layer allocates req_bytes and zeroes them). */
struct col_comm_req {
    col_comm *comm;
    col_comm_op op;
    size_t count;
    col_dtype dt;
    col_red_op red;
    int peer;            /* send/recv: the other rank; broadcast: root; else -1 */
    int tag;
    bool failed;         /* the transport reported an error: err holds it */
    bool done;           /* completed (results in place) */
    bool in_wait;        /* col_comm_wait is ending it: a transport may start a second collective of the request
                            only then (col_comm_test's outcome depends on timing, and every rank must start its
                            collectives in the same order) */
    col_err err;
};

typedef struct {
    const char *name;
    size_t req_bytes;    /* sizeof the transport's request struct */
    /* Starts an operation into r (already filled with comm, op, count, dt, red,
     * peer, tag; arguments checked by comm.c). An error means nothing was
     * started (the transport frees what it allocated for r). */
    col_status (*all_reduce)(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err);
    col_status (*reduce_scatter)(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err);
    col_status (*all_gather)(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err);
    col_status (*broadcast)(col_comm *c, col_comm_req *r, void *buf, col_err *err);
    col_status (*all_to_all)(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err);
    col_status (*send)(col_comm *c, col_comm_req *r, const void *buf, col_err *err);
    col_status (*recv)(col_comm *c, col_comm_req *r, void *buf, col_err *err);
    col_status (*barrier)(col_comm *c, col_comm_req *r, col_err *err);
    /* Moves r forward without blocking: *done when complete; an error is the
     * transport's (the request has then failed). */
    col_status (*test)(col_comm_req *r, bool *done, col_err *err);
    /* Frees what the transport holds for r. completed false: r was given up
     * (a timeout or an error): free nothing the network may still write. */
    void (*release)(col_comm_req *r, bool completed);
    /* c has failed (c->broken is set): stop what can be stopped. May be NULL. */
    void (*abandon)(col_comm *c);
    col_status (*split)(col_comm *c, int color, int key, col_comm **out, col_err *err);
    /* Frees the transport's state of c (c->broken: make no transport call). */
    void (*free)(col_comm *c);
} col_comm_transport;

struct col_comm {
    const col_comm_transport *t;
    int rank, size;
    int local_rank, local_size;
    double timeout_s;
    col_reduce_order order;
    col_comm_peer *peers;  /* size entries */
    bool broken;
    col_err broken_err;
    int pending;           /* requests not yet waited for */
    col_comm_stats stats;  /* this communicator's traffic (comm.h); counted by comm.c alone */
    void *impl;            /* the transport's */
};

/* ---- comm_util.c ---- */
/* A communicator struct for transport t with the defaults (timeout, order)
 * and a peer table of size entries; NULL when out of memory. */
col_comm *col_comm_alloc(const col_comm_transport *t, int rank, int size);
/* Frees what col_comm_alloc allocated. */
void col_comm_dealloc(col_comm *c);
/* This process's entry of the peer table (world rank given). */
void col_comm_peer_self(col_comm_peer *p, int world_rank);
/* Local rank and size from the peer table: the ranks on this rank's host. */
void col_comm_set_local(col_comm *c);
/* "all-reduce" ... */
const char *col_comm_op_name(col_comm_op op);
/* "all-reduce (sum) of 1000 f32 on 4 ranks", "recv of 7 f32 from rank 2 (tag 5)" */
void col_comm_describe(const col_comm_req *r, char *buf, size_t n);
/* What this host can tell of the ranks r waits for: "rank 2 (pid 4711 on node1)
 * has exited", "every rank on this host is still running; ..." */
void col_comm_suspects(const col_comm_req *r, char *buf, size_t n);
/* Whether a rank r waits on (its peer, or any rank of a collective) runs on this host and has exited: then the
 * wait cannot end, and col_comm_wait gives up at once instead of at the timeout. */
bool col_comm_peers_gone(const col_comm_req *r);
/* Whether the process of peer p, on this host, has ended (false when it runs
 * or runs elsewhere). */
bool col_comm_peer_gone(const col_comm_peer *p);

/* One pause of a polling loop: none at first, then growing (*pause_ns, 0 at
 * the start) to a millisecond, so waiting processes leave the CPU to their
 * peers on a shared machine. */
void col_comm_backoff(long *pause_ns);

/* out[i] = op over j < nparts of parts[j*len + i] (parts in dt), folded in
 * rank order j = 0, 1, ...: floats accumulate in f32 (avg divides by nparts)
 * and round once; integers sum with wrap-around. out may not overlap parts. */
void col_comm_fold(const void *parts, int nparts, size_t len, col_dtype dt, col_red_op op, void *out);
/* In place: x[i] /= d (f32 elements): the last step of an average. */
void col_comm_div_f32(float *x, size_t n, float d);

#endif
