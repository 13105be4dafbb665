/* comm.c - the public calls of comm.h: argument checks, requests, the
 * bounded wait, and the blocking forms; each reaches its transport through
 * the communicator's table (comm_internal.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "timer.h"

int col_comm_rank(const col_comm *c) { return c ? c->rank : 0; }
int col_comm_size(const col_comm *c) { return c ? c->size : 1; }
int col_comm_local_rank(const col_comm *c) { return c ? c->local_rank : 0; }
int col_comm_local_size(const col_comm *c) { return c ? c->local_size : 1; }
const char *col_comm_transport_name(const col_comm *c) { return c ? c->t->name : "none"; }

int col_comm_device(const col_comm *c, int ndev)
{
    return ndev < 1 ? 0 : col_comm_local_rank(c) % ndev;
}

int col_comm_world_rank(const col_comm *c, int r)
{
    return c && r >= 0 && r < c->size ? c->peers[r].world_rank : -1;
}

bool col_comm_broken(const col_comm *c, col_err *why)
{
    if (c && c->broken)
        col_err_copy(why, &c->broken_err);
    return c && c->broken;
}

col_status col_comm_set_timeout(col_comm *c, double seconds, col_err *err)
{
    if (!c || !(seconds > 0))
        return col_err_set(err, COL_EINVAL, "comm: the wait bound must be a positive number of seconds (got %g)",
                           seconds);
    c->timeout_s = seconds;
    return COL_OK;
}

double col_comm_timeout(const col_comm *c) { return c ? c->timeout_s : COL_COMM_DEFAULT_TIMEOUT_S; }
void col_comm_set_order(col_comm *c, col_reduce_order order)
{
    if (c)
        c->order = order == COL_ORDER_RANK ? COL_ORDER_RANK : COL_ORDER_TRANSPORT;
}
col_reduce_order col_comm_order(const col_comm *c) { return c ? c->order : COL_ORDER_TRANSPORT; }

/* ---- checks ---- */

static col_status check_comm(const col_comm *c, col_err *err)
{
    if (!c)
        return col_err_set(err, COL_EINVAL, "comm: no communicator given");
    if (c->broken)
        return col_err_set(err, COL_ESTATE, "comm: this communicator is unusable after an earlier failure (%s)",
                           c->broken_err.msg);
    return COL_OK;
}

/* [a, a+na) and [b, b+nb) share a byte */
static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* the request of an operation on c, described and checked: *out (NULL on error) */
static col_status new_req(col_comm *c, col_comm_op op, size_t count, col_dtype dt, col_red_op red, int peer, int tag,
                          size_t blocks, const void *b1, const void *b2, col_comm_req **out, col_err *err)
{
    *out = NULL;
    col_status st = check_comm(c, err);
    if (st != COL_OK)
        return st;
    const char *name = col_comm_op_name(op);
    if ((unsigned)dt >= COL_DTYPE_COUNT)
        return col_err_set(err, COL_EDTYPE, "comm: %s: unknown dtype %d", name, (int)dt);
    if (col_dtype_is_quant(dt)) /* no element size: counts are of elements */
        return col_err_set(err, COL_EDTYPE, "comm: %s: %s is a quantized dtype (blocks of values, not elements)", name,
                           col_dtype_name(dt));
    if (op == COL_COMM_ALL_REDUCE || op == COL_COMM_REDUCE_SCATTER) {
        if ((unsigned)red >= COL_RED_COUNT)
            return col_err_set(err, COL_EINVAL, "comm: %s: unknown reduction %d", name, (int)red);
        if (red == COL_RED_AVG && !col_dtype_is_float(dt))
            return col_err_set(err, COL_EDTYPE, "comm: %s: avg of %s has no exact result (sum, then divide)", name,
                               col_dtype_name(dt));
    }
    size_t es = col_dtype_size(dt);
    if (blocks && count > SIZE_MAX / blocks / es)
        return col_err_set(err, COL_EINVAL, "comm: %s: %zu elements in %zu blocks do not fit in memory", name, count,
                           blocks);
    if (count && ((blocks && (!b1 || !b2)) || (!blocks && !b1)))
        return col_err_set(err, COL_EINVAL, "comm: %s: a buffer of %zu elements is NULL", name, count);
    if ((op == COL_COMM_SEND || op == COL_COMM_RECV || op == COL_COMM_BROADCAST) && (peer < 0 || peer >= c->size))
        return col_err_set(err, COL_EINVAL, "comm: %s: rank %d is not in this communicator of %d ranks", name, peer,
                           c->size);
    if ((op == COL_COMM_SEND || op == COL_COMM_RECV) && (tag < 0 || tag > 32767))
        return col_err_set(err, COL_EINVAL, "comm: %s: tag %d is outside 0 .. 32767", name, tag);
    col_comm_req *r = calloc(1, c->t->req_bytes);
    if (!r)
        return col_err_set(err, COL_ENOMEM, "comm: %s: out of memory for a request", name);
    r->comm = c;
    r->op = op;
    r->count = count;
    r->dt = dt;
    r->red = red;
    r->peer = peer;
    r->tag = tag;
    *out = r;
    return COL_OK;
}

/* the end of starting r: counted as pending on success, freed on error. A
 * transport's failure to start (COL_EIO) breaks the communicator: the other
 * ranks have started theirs and wait for this one. */
static col_status started(col_comm_req *r, col_status st, col_comm_req **req, const col_err *err)
{
    if (st != COL_OK) {
        if (r && st == COL_EIO && !r->comm->broken) {
            col_comm *c = r->comm;
            c->broken = true;
            if (err)
                col_err_copy(&c->broken_err, err);
            else
                col_err_set(&c->broken_err, st, "comm: %s: the transport failed to start it", col_comm_op_name(r->op));
            if (c->t->abandon)
                c->t->abandon(c);
        }
        free(r);
        *req = NULL;
        return st;
    }
    r->comm->pending++;
    *req = r;
    return COL_OK;
}

col_status col_comm_all_reduce_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                     col_red_op op, col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_ALL_REDUCE, count, dt, op, -1, 0, 1, send, recv, &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    size_t bytes = count * col_dtype_size(dt);
    if (send != recv && overlap(send, bytes, recv, bytes)) {
        free(r);
        return started(NULL, col_err_set(err, COL_EINVAL, "comm: all-reduce: send and recv overlap without being "
                                                          "the same buffer"), req, err);
    }
    return started(r, c->t->all_reduce(c, r, send, recv, err), req, err);
}

col_status col_comm_reduce_scatter_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                         col_red_op op, col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_REDUCE_SCATTER, count, dt, op, -1, 0, c ? (size_t)c->size : 1, send, recv,
                            &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    size_t es = col_dtype_size(dt), block = count * es;
    if (recv != (const char *)send + (size_t)c->rank * block && overlap(send, block * (size_t)c->size, recv, block)) {
        free(r);
        return started(NULL, col_err_set(err, COL_EINVAL, "comm: reduce-scatter: recv overlaps send other than as "
                                                          "this rank's block"), req, err);
    }
    return started(r, c->t->reduce_scatter(c, r, send, recv, err), req, err);
}

col_status col_comm_all_gather_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                     col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_ALL_GATHER, count, dt, COL_RED_SUM, -1, 0, c ? (size_t)c->size : 1, send,
                            recv, &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    size_t block = count * col_dtype_size(dt);
    if (send != (const char *)recv + (size_t)c->rank * block && overlap(send, block, recv, block * (size_t)c->size)) {
        free(r);
        return started(NULL, col_err_set(err, COL_EINVAL, "comm: all-gather: send overlaps recv other than as this "
                                                          "rank's block"), req, err);
    }
    return started(r, c->t->all_gather(c, r, send, recv, err), req, err);
}

col_status col_comm_broadcast_async(col_comm *c, void *buf, size_t count, col_dtype dt, int root, col_comm_req **req,
                                    col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_BROADCAST, count, dt, COL_RED_SUM, root, 0, 0, buf, NULL, &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    return started(r, c->t->broadcast(c, r, buf, err), req, err);
}

col_status col_comm_all_to_all_async(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                     col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_ALL_TO_ALL, count, dt, COL_RED_SUM, -1, 0, c ? (size_t)c->size : 1, send, recv,
                            &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    size_t bytes = count * col_dtype_size(dt) * (size_t)c->size;
    if (overlap(send, bytes, recv, bytes)) {
        free(r);
        return started(NULL, col_err_set(err, COL_EINVAL, "comm: all-to-all: send and recv overlap"), req, err);
    }
    return started(r, c->t->all_to_all(c, r, send, recv, err), req, err);
}

col_status col_comm_send_async(col_comm *c, const void *buf, size_t count, col_dtype dt, int peer, int tag,
                               col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_SEND, count, dt, COL_RED_SUM, peer, tag, 0, buf, NULL, &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    return started(r, c->t->send(c, r, buf, err), req, err);
}

col_status col_comm_recv_async(col_comm *c, void *buf, size_t count, col_dtype dt, int peer, int tag,
                               col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_RECV, count, dt, COL_RED_SUM, peer, tag, 0, buf, NULL, &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    return started(r, c->t->recv(c, r, buf, err), req, err);
}

col_status col_comm_barrier_async(col_comm *c, col_comm_req **req, col_err *err)
{
    col_comm_req *r;
    col_status st = new_req(c, COL_COMM_BARRIER, 0, COL_F32, COL_RED_SUM, -1, 0, 0, NULL, NULL, &r, err);
    if (st != COL_OK)
        return started(NULL, st, req, err);
    return started(r, c->t->barrier(c, r, err), req, err);
}

/* ---- completion ---- */

/* r failed with e's code and detail: the request and its communicator carry
 * "comm: <what r is>: <detail>" from now on */
static void req_fail(col_comm_req *r, col_status code, const char *detail)
{
    col_comm *c = r->comm;
    char what[200];
    col_comm_describe(r, what, sizeof what);
    col_err_set(&r->err, code, "comm: %s: %s", what, detail);
    r->failed = true;
    if (!c->broken) {
        c->broken = true;
        col_err_copy(&c->broken_err, &r->err);
        if (c->t->abandon)
            c->t->abandon(c);
    }
}

/* one step of r without blocking: *done once complete; an error once failed */
static col_status step(col_comm_req *r, bool *done, col_err *err)
{
    col_comm *c = r->comm;
    *done = r->done;
    if (r->failed)
        return col_err_copy(err, &r->err);
    if (r->done)
        return COL_OK;
    col_err e = {0};
    bool d = false;
    if (c->t->test(r, &d, &e) != COL_OK) {
        req_fail(r, e.code == COL_OK ? COL_EIO : e.code, e.msg);
        return col_err_copy(err, &r->err);
    }
    if (d) {
        r->done = *done = true;
        return COL_OK;
    }
    if (c->broken) {
        /* another request's failure broke the communicator: this one cannot finish in step */
        col_err_set(&r->err, COL_ESTATE, "comm: this request cannot complete after an earlier failure (%s)",
                    c->broken_err.msg);
        r->failed = true;
        return col_err_copy(err, &r->err);
    }
    return COL_OK;
}

col_status col_comm_test(col_comm_req *r, bool *done, col_err *err)
{
    bool d = false;
    col_status st = r ? step(r, &d, err) : COL_OK;
    if (done)
        *done = r ? d : true;
    return st;
}

/* ---- traffic counters ---- */

void col_comm_get_stats(const col_comm *c, col_comm_stats *s)
{
    *s = c ? c->stats : (col_comm_stats){0};
}

void col_comm_stats_add(col_comm_stats *sum, const col_comm_stats *s)
{
    sum->bytes_sent += s->bytes_sent;
    sum->bytes_recv += s->bytes_recv;
    sum->wait_s += s->wait_s;
    sum->ops += s->ops;
}

/* floor(b * k / p) without overflow for any b (k < 2p) */
static uint64_t share(uint64_t b, uint64_t k, uint64_t p)
{
    return b / p * k + b % p * k / p;
}

/* the bytes r moved on this rank by the model of comm.h */
static void count_traffic(col_comm_stats *s, const col_comm_req *r)
{
    const col_comm *c = r->comm;
    uint64_t p = (uint64_t)c->size, b = (uint64_t)r->count * col_dtype_size(r->dt), sent = 0, recv = 0;
    switch (r->op) {
    case COL_COMM_ALL_REDUCE: sent = recv = p > 1 ? share(b, 2 * (p - 1), p) : 0; break;
    case COL_COMM_REDUCE_SCATTER:
    case COL_COMM_ALL_GATHER:
    case COL_COMM_ALL_TO_ALL: sent = recv = (p - 1) * b; break;
    case COL_COMM_BROADCAST:
        if (p > 1) {
            int last = (r->peer + c->size - 1) % c->size; /* the end of the chain root, root+1, ... */
            sent = c->rank == last ? 0 : b;
            recv = c->rank == r->peer ? 0 : b;
        }
        break;
    case COL_COMM_SEND: sent = b; break;
    case COL_COMM_RECV: recv = b; break;
    default: break;
    }
    s->bytes_sent += sent;
    s->bytes_recv += recv;
    s->ops++;
}

enum { DEAD_CHECK_S = 1 }; /* how often a long wait looks for peers on this host that have exited */

col_status col_comm_wait(col_comm_req *r, col_err *err)
{
    if (!r)
        return COL_OK;
    col_comm *c = r->comm;
    double start = col_seconds();
    long pause_ns = 0;
    bool done = false;
    col_status st;
    r->in_wait = true;
    double checked = 0;
    while ((st = step(r, &done, err)) == COL_OK && !done) {
        double waited = col_seconds() - start;
        bool gone = false; /* a peer on this host that has exited: no use waiting for the bound */
        if (waited - checked >= DEAD_CHECK_S) {
            checked = waited;
            gone = col_comm_peers_gone(r);
        }
        if (waited >= c->timeout_s || gone) {
            char who[COL_ERR_MSG_MAX];
            col_err detail;
            col_comm_suspects(r, who, sizeof who);
            col_err_set(&detail, COL_EIO, "not complete after waiting %.1f s; %s", waited, who);
            req_fail(r, COL_EIO, detail.msg);
            st = col_err_copy(err, &r->err);
            break;
        }
        col_comm_backoff(&pause_ns);
    }
    c->stats.wait_s += col_seconds() - start;
    if (st == COL_OK)
        count_traffic(&c->stats, r);
    c->t->release(r, st == COL_OK);
    c->pending--;
    free(r);
    return st;
}

col_status col_comm_wait_all(col_comm_req **reqs, int n, col_err *err)
{
    col_status first = COL_OK;
    for (int i = 0; i < n; i++) {
        col_err e = {0};
        col_status st = col_comm_wait(reqs[i], &e);
        reqs[i] = NULL;
        if (st != COL_OK && first == COL_OK)
            first = col_err_copy(err, &e);
    }
    return first;
}

/* ---- blocking forms ---- */

#define WAIT_FOR(start_call)                                                                                           \
    do {                                                                                                               \
        col_comm_req *r_ = NULL;                                                                                       \
        col_status st_ = (start_call);                                                                                 \
        return st_ == COL_OK ? col_comm_wait(r_, err) : st_;                                                           \
    } while (0)

col_status col_comm_all_reduce(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt, col_red_op op,
                               col_err *err)
{
    WAIT_FOR(col_comm_all_reduce_async(c, send, recv, count, dt, op, &r_, err));
}

col_status col_comm_reduce_scatter(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt,
                                   col_red_op op, col_err *err)
{
    WAIT_FOR(col_comm_reduce_scatter_async(c, send, recv, count, dt, op, &r_, err));
}

col_status col_comm_all_gather(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt, col_err *err)
{
    WAIT_FOR(col_comm_all_gather_async(c, send, recv, count, dt, &r_, err));
}

col_status col_comm_broadcast(col_comm *c, void *buf, size_t count, col_dtype dt, int root, col_err *err)
{
    WAIT_FOR(col_comm_broadcast_async(c, buf, count, dt, root, &r_, err));
}

col_status col_comm_all_to_all(col_comm *c, const void *send, void *recv, size_t count, col_dtype dt, col_err *err)
{
    WAIT_FOR(col_comm_all_to_all_async(c, send, recv, count, dt, &r_, err));
}

col_status col_comm_send(col_comm *c, const void *buf, size_t count, col_dtype dt, int peer, int tag, col_err *err)
{
    WAIT_FOR(col_comm_send_async(c, buf, count, dt, peer, tag, &r_, err));
}

col_status col_comm_recv(col_comm *c, void *buf, size_t count, col_dtype dt, int peer, int tag, col_err *err)
{
    WAIT_FOR(col_comm_recv_async(c, buf, count, dt, peer, tag, &r_, err));
}

col_status col_comm_barrier(col_comm *c, col_err *err)
{
    WAIT_FOR(col_comm_barrier_async(c, &r_, err));
}

/* ---- split and free ---- */

col_status col_comm_split(col_comm *c, int color, int key, col_comm **out, col_err *err)
{
    *out = NULL;
    col_status st = check_comm(c, err);
    if (st != COL_OK)
        return st;
    st = c->t->split(c, color, key, out, err);
    if (st == COL_OK && *out) {
        (*out)->timeout_s = c->timeout_s;
        (*out)->order = c->order;
    }
    return st;
}

void col_comm_free(col_comm *c)
{
    if (!c)
        return;
    if (c->pending > 0 && !c->broken) {
        /* requests still out: the transport may still use their buffers, so make no call that could wait */
        c->broken = true;
        col_err_set(&c->broken_err, COL_ESTATE, "comm: freed with %d requests outstanding", c->pending);
    }
    c->t->free(c);
    col_comm_dealloc(c);
}
