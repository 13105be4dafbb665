/* comm_mpi.c - the MPI transport (comm_mpi.h). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "comm_mpi.h"
#include "timer.h"

/* The communicators made from one col_comm_init_mpi / col_comm_from_mpi and
 * their splits: MPI is finalised with the last of them, if this library
 * initialised it, and never once one has failed (MPI_Finalize would wait for
 * the missing rank). */
typedef struct {
    int refs;
    bool owns_mpi;
    bool failed;
} mpi_family;

typedef struct {
    MPI_Comm mc;
    mpi_family *fam;
} mpi_comm;

/* what happens when a request's MPI call completes */
typedef enum {
    FIN_NONE = 0,
    FIN_DIVIDE,      /* avg in f32: the user's buffer /= size */
    FIN_FROM_F32,    /* staged 16-bit reduction: (avg: /= size), round the f32 stage into the user's buffer */
    FIN_COPY,        /* staged in-place reduce-scatter: (avg: /= size) copy the stage into the user's buffer */
    FIN_FOLD_SCATTER,/* rank order, reduce-scatter: fold the n blocks of the stage into the user's buffer */
    FIN_FOLD_GATHER, /* rank order, all-reduce: fold this rank's segment, then all-gather it (phase 2) */
    FIN_RECV,        /* point-to-point receive: the message must have held count elements */
} mpi_finish;

typedef struct {
    col_comm_req base;
    MPI_Request mr;
    mpi_finish fin;
    int phase;       /* FIN_FOLD_GATHER: 0 exchanging shares, 1 gathering the sums */
    void *stage;     /* staging the request owns */
    void *stage2;
    void *user;      /* the user's result buffer */
    int *ints;       /* v-collective counts and displacements (4 * size) */
} mpi_req;

static const col_comm_transport mpi_transport;

static MPI_Datatype raw_type(col_dtype dt)
{
    switch (dt) {
    case COL_F32:
        return MPI_FLOAT;
    case COL_BF16:
    case COL_F16:
        return MPI_UINT16_T;
    case COL_I32:
        return MPI_INT32_T;
    default:
        return MPI_INT64_T;
    }
}

static MPI_Op mpi_op(col_red_op op)
{
    return op == COL_RED_MAX ? MPI_MAX : op == COL_RED_MIN ? MPI_MIN : MPI_SUM;
}

static bool is16(col_dtype dt) { return dt == COL_BF16 || dt == COL_F16; }

/* "MPI: <MPI's message>" in err */
static col_status mpi_fail(int rc, const char *prefix, col_err *err)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error code %d", rc);
    return col_err_set(err, COL_EIO, "%sMPI: %s", prefix, s);
}

/* a start that MPI refused: the whole message, since comm.c adds no context to starts */
static col_status start_fail(const col_comm_req *r, int rc, col_err *err)
{
    char what[200], prefix[220];
    col_comm_describe(r, what, sizeof what);
    snprintf(prefix, sizeof prefix, "comm: %s: ", what);
    return mpi_fail(rc, prefix, err);
}

static mpi_comm *impl(const col_comm *c) { return c->impl; }

/* MPI counts are ints: elements in the largest buffer an operation passes */
static col_status check_ints(const col_comm_req *r, size_t elems, col_err *err)
{
    if (elems <= INT_MAX)
        return COL_OK;
    char what[200];
    col_comm_describe(r, what, sizeof what);
    return col_err_set(err, COL_EUNSUPPORTED, "comm: %s: %zu elements in one buffer is more than MPI's %d (split it)",
                       what, elems, INT_MAX);
}

static void *stage_alloc(mpi_req *q, size_t bytes, bool second, col_err *err)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        char what[200];
        col_comm_describe(&q->base, what, sizeof what);
        col_err_set(err, COL_ENOMEM, "comm: %s: out of memory for %zu bytes of staging", what, bytes);
        return NULL;
    }
    if (second)
        q->stage2 = p;
    else
        q->stage = p;
    return p;
}

static void req_free_stages(mpi_req *q)
{
    free(q->stage);
    free(q->stage2);
    free(q->ints);
    q->stage = q->stage2 = NULL;
    q->ints = NULL;
}

/* the start of a request ends here: on error nothing stays allocated */
static col_status begun(mpi_req *q, int rc, col_err *err)
{
    if (rc == MPI_SUCCESS)
        return COL_OK;
    req_free_stages(q);
    return start_fail(&q->base, rc, err);
}

/* ---- rank-ordered reductions ---- */

/* segments of count elements over n ranks: rank k's share is [off[k], off[k] + len[k]) */
static void segments(size_t count, int n, int *len, int *off)
{
    for (int k = 0; k < n; k++) {
        size_t a = count * (size_t)k / (size_t)n, b = count * (size_t)(k + 1) / (size_t)n;
        off[k] = (int)a;
        len[k] = (int)(b - a);
    }
}

static col_status all_reduce_ranked(col_comm *c, mpi_req *q, const void *send, void *recv, col_err *err)
{
    int n = c->size;
    size_t es = col_dtype_size(q->base.dt);
    q->ints = malloc(4 * (size_t)n * sizeof(int));
    if (!q->ints)
        return col_err_set(err, COL_ENOMEM, "comm: all-reduce: out of memory");
    int *len = q->ints, *off = len + n, *rlen = off + n, *roff = rlen + n;
    segments(q->base.count, n, len, off);
    size_t mine = (size_t)len[c->rank];
    for (int j = 0; j < n; j++) {
        rlen[j] = (int)mine;
        roff[j] = (int)(mine * (size_t)j);
    }
    if (!stage_alloc(q, mine * (size_t)n * es, false, err) || !stage_alloc(q, mine * es, true, err)) {
        req_free_stages(q);
        return err ? err->code : COL_ENOMEM;
    }
    q->user = recv;
    q->fin = FIN_FOLD_GATHER;
    MPI_Datatype t = raw_type(q->base.dt);
    return begun(q, MPI_Ialltoallv(send, len, off, t, q->stage, rlen, roff, t, impl(c)->mc, &q->mr), err);
}

/* ---- the table's starts ---- */

static col_status mpi_all_reduce(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    col_status st = check_ints(r, r->count, err);
    if (st != COL_OK)
        return st;
    bool ranked_sum = c->order == COL_ORDER_RANK && col_dtype_is_float(r->dt) &&
                      (r->red == COL_RED_SUM || r->red == COL_RED_AVG);
    if (ranked_sum)
        return all_reduce_ranked(c, q, send, recv, err);
    int count = (int)r->count;
    MPI_Comm mc = impl(c)->mc;
    if (is16(r->dt)) {
        float *s = stage_alloc(q, r->count * sizeof(float), false, err);
        if (!s)
            return err ? err->code : COL_ENOMEM;
        col_convert(s, COL_F32, send, r->dt, (int64_t)r->count);
        q->user = recv;
        q->fin = FIN_FROM_F32;
        return begun(q, MPI_Iallreduce(MPI_IN_PLACE, s, count, MPI_FLOAT, mpi_op(r->red), mc, &q->mr), err);
    }
    q->user = recv;
    q->fin = r->red == COL_RED_AVG ? FIN_DIVIDE : FIN_NONE;
    const void *sb = send == recv ? MPI_IN_PLACE : send;
    return begun(q, MPI_Iallreduce(sb, recv, count, raw_type(r->dt), mpi_op(r->red), mc, &q->mr), err);
}

static col_status mpi_reduce_scatter(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    size_t n = (size_t)c->size, es = col_dtype_size(r->dt);
    col_status st = check_ints(r, r->count * n, err);
    if (st != COL_OK)
        return st;
    int count = (int)r->count;
    MPI_Comm mc = impl(c)->mc;
    MPI_Datatype t = raw_type(r->dt);
    q->user = recv;
    if (c->order == COL_ORDER_RANK && col_dtype_is_float(r->dt) && (r->red == COL_RED_SUM || r->red == COL_RED_AVG)) {
        if (!stage_alloc(q, r->count * n * es, false, err))
            return err ? err->code : COL_ENOMEM;
        q->fin = FIN_FOLD_SCATTER;
        return begun(q, MPI_Ialltoall(send, count, t, q->stage, count, t, mc, &q->mr), err);
    }
    if (is16(r->dt)) {
        float *s = stage_alloc(q, r->count * n * sizeof(float), false, err);
        float *d = s ? stage_alloc(q, r->count * sizeof(float), true, err) : NULL;
        if (!d) {
            req_free_stages(q);
            return err ? err->code : COL_ENOMEM;
        }
        col_convert(s, COL_F32, send, r->dt, (int64_t)(r->count * n));
        q->fin = FIN_FROM_F32;
        return begun(q, MPI_Ireduce_scatter_block(s, d, count, MPI_FLOAT, mpi_op(r->red), mc, &q->mr), err);
    }
    void *dst = recv;
    q->fin = r->red == COL_RED_AVG ? FIN_DIVIDE : FIN_NONE;
    if (recv == (const char *)send + (size_t)c->rank * r->count * es && r->count) {
        /* in place: MPI's buffers may not overlap, so the result lands in a stage first */
        dst = stage_alloc(q, r->count * es, true, err);
        if (!dst)
            return err ? err->code : COL_ENOMEM;
        q->fin = FIN_COPY;
    }
    return begun(q, MPI_Ireduce_scatter_block(send, dst, count, t, mpi_op(r->red), mc, &q->mr), err);
}

static col_status mpi_all_gather(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    col_status st = check_ints(r, r->count * (size_t)c->size, err);
    if (st != COL_OK)
        return st;
    size_t block = r->count * col_dtype_size(r->dt);
    const void *sb = send == (const char *)recv + (size_t)c->rank * block ? MPI_IN_PLACE : send;
    MPI_Datatype t = raw_type(r->dt);
    return begun(q, MPI_Iallgather(sb, (int)r->count, t, recv, (int)r->count, t, impl(c)->mc, &q->mr), err);
}

static col_status mpi_broadcast(col_comm *c, col_comm_req *r, void *buf, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    col_status st = check_ints(r, r->count, err);
    if (st != COL_OK)
        return st;
    return begun(q, MPI_Ibcast(buf, (int)r->count, raw_type(r->dt), r->peer, impl(c)->mc, &q->mr), err);
}

static col_status mpi_all_to_all(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    col_status st = check_ints(r, r->count * (size_t)c->size, err);
    if (st != COL_OK)
        return st;
    MPI_Datatype t = raw_type(r->dt);
    int count = (int)r->count;
    return begun(q, MPI_Ialltoall(send, count, t, recv, count, t, impl(c)->mc, &q->mr), err);
}

static col_status mpi_send(col_comm *c, col_comm_req *r, const void *buf, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    col_status st = check_ints(r, r->count, err);
    if (st != COL_OK)
        return st;
    return begun(q, MPI_Isend(buf, (int)r->count, raw_type(r->dt), r->peer, r->tag, impl(c)->mc, &q->mr), err);
}

static col_status mpi_recv(col_comm *c, col_comm_req *r, void *buf, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    col_status st = check_ints(r, r->count, err);
    if (st != COL_OK)
        return st;
    q->fin = FIN_RECV;
    return begun(q, MPI_Irecv(buf, (int)r->count, raw_type(r->dt), r->peer, r->tag, impl(c)->mc, &q->mr), err);
}

static col_status mpi_barrier(col_comm *c, col_comm_req *r, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    return begun(q, MPI_Ibarrier(impl(c)->mc, &q->mr), err);
}

/* ---- completion ---- */

/* the MPI call of q has completed: finish it (*done), or start its second step */
static col_status finish(mpi_req *q, const MPI_Status *status, bool *done, col_err *err)
{
    col_comm_req *r = &q->base;
    col_comm *c = r->comm;
    size_t es = col_dtype_size(r->dt);
    float n = (float)c->size;
    size_t count = r->count;
    *done = true;
    switch (q->fin) {
    case FIN_NONE:
        break;
    case FIN_DIVIDE:
        col_comm_div_f32(q->user, count, n);
        break;
    case FIN_FROM_F32: {
        float *res = r->op == COL_COMM_REDUCE_SCATTER ? q->stage2 : q->stage;
        if (r->red == COL_RED_AVG)
            col_comm_div_f32(res, count, n);
        col_convert(q->user, r->dt, res, COL_F32, (int64_t)count);
        break;
    }
    case FIN_COPY:
        if (r->red == COL_RED_AVG)
            col_comm_div_f32(q->stage2, count, n);
        memcpy(q->user, q->stage2, count * es);
        break;
    case FIN_FOLD_SCATTER:
        col_comm_fold(q->stage, c->size, count, r->dt, r->red, q->user);
        break;
    case FIN_FOLD_GATHER: {
        if (q->phase == 1)
            break;
        if (!r->in_wait) { /* the second collective starts in col_comm_wait only (comm_internal.h): MPI_Test of
                              the finished first one's null request says done again then */
            *done = false;
            break;
        }
        int *len = q->ints, *off = len + c->size;
        int mine = len[c->rank];
        col_comm_fold(q->stage, c->size, (size_t)mine, r->dt, r->red, q->stage2);
        q->phase = 1;
        *done = false;
        MPI_Datatype t = raw_type(r->dt);
        int rc = MPI_Iallgatherv(q->stage2, mine, t, q->user, len, off, t, impl(c)->mc, &q->mr);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "starting the all-gather of the sums: ", err);
        break;
    }
    case FIN_RECV: {
        int got = 0;
        MPI_Get_count(status, raw_type(r->dt), &got);
        if ((size_t)got != count)
            return col_err_set(err, COL_EINVAL, "the message held %d elements, not %zu", got, count);
        break;
    }
    }
    return COL_OK;
}

static col_status mpi_test(col_comm_req *r, bool *done, col_err *err)
{
    mpi_req *q = (mpi_req *)r;
    int flag = 0;
    MPI_Status status;
    *done = false;
    int rc = MPI_Test(&q->mr, &flag, &status);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "", err);
    if (!flag)
        return COL_OK;
    return finish(q, &status, done, err);
}

static void mpi_release(col_comm_req *r, bool completed)
{
    mpi_req *q = (mpi_req *)r;
    if (completed) {
        req_free_stages(q);
        return;
    }
    /* given up: a receive can be cancelled; anything else stays MPI's, with its stages (they may still be written) */
    if (r->op == COL_COMM_RECV && q->mr != MPI_REQUEST_NULL) {
        MPI_Cancel(&q->mr);
        MPI_Request_free(&q->mr);
    }
}

static void mpi_abandon(col_comm *c)
{
    impl(c)->fam->failed = true;
}

/* ---- making communicators ---- */

/* waits for a setup step's request for at most timeout seconds */
static col_status wait_setup(MPI_Request *q, double timeout, const char *what, int size, col_err *err)
{
    double start = col_seconds();
    long pause_ns = 0;
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(q, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char prefix[160];
            snprintf(prefix, sizeof prefix, "comm: %s on %d ranks: ", what, size);
            return mpi_fail(rc, prefix, err);
        }
        if (flag)
            return COL_OK;
        double waited = col_seconds() - start;
        if (waited >= timeout)
            return col_err_set(err, COL_EIO, "comm: %s on %d ranks: not complete after waiting %.1f s (a rank has "
                               "died, or has not reached this call)", what, size, waited);
        col_comm_backoff(&pause_ns);
    }
}

/* a col_comm over mc, which becomes its own (freed on error) */
static col_status wrap(MPI_Comm mc, mpi_family *fam, double timeout, col_comm **out, col_err *err)
{
    int rank = 0, size = 1, world = 0;
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    col_comm *c = col_comm_alloc(&mpi_transport, rank, size);
    mpi_comm *m = c ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        col_comm_dealloc(c);
        MPI_Comm_free(&mc);
        return col_err_set(err, COL_ENOMEM, "comm: out of memory for a communicator of %d ranks", size);
    }
    m->mc = mc;
    m->fam = fam;
    c->impl = m;
    c->timeout_s = timeout;
    col_comm_peer self;
    col_comm_peer_self(&self, world);
    MPI_Request q;
    int rc = MPI_Iallgather(&self, (int)sizeof self, MPI_BYTE, c->peers, (int)sizeof self, MPI_BYTE, mc, &q);
    col_status st = rc == MPI_SUCCESS ? wait_setup(&q, timeout, "exchanging the ranks' hosts", size, err)
                                      : mpi_fail(rc, "comm: exchanging the ranks' hosts: ", err);
    if (st != COL_OK) {
        fam->failed = true;
        free(m);
        col_comm_dealloc(c);
        return st;
    }
    col_comm_set_local(c);
    fam->refs++;
    *out = c;
    return COL_OK;
}

/* a duplicate of mc, errors returned, as a col_comm of a new family */
static col_status from_mpi(MPI_Comm mc, bool owns_mpi, col_comm **out, col_err *err)
{
    *out = NULL;
    mpi_family *fam = calloc(1, sizeof *fam);
    if (!fam)
        return col_err_set(err, COL_ENOMEM, "comm: out of memory");
    fam->owns_mpi = owns_mpi;
    int size = 1;
    MPI_Comm_size(mc, &size);
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request q;
    int rc = MPI_Comm_idup(mc, &dup, &q);
    col_status st = rc == MPI_SUCCESS ? wait_setup(&q, COL_COMM_DEFAULT_TIMEOUT_S, "duplicating the communicator",
                                                   size, err)
                                      : mpi_fail(rc, "comm: duplicating the communicator: ", err);
    if (st == COL_OK) {
        MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
        st = wrap(dup, fam, COL_COMM_DEFAULT_TIMEOUT_S, out, err);
    }
    if (st != COL_OK)
        free(fam); /* MPI stays initialised: finalising would wait for the rank that did not answer */
    return st;
}

col_status col_comm_from_mpi(MPI_Comm mc, col_comm **out, col_err *err)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!inited || fin) {
        *out = NULL;
        return col_err_set(err, COL_ESTATE, "comm: MPI is %s", fin ? "already finalised" : "not initialised");
    }
    return from_mpi(mc, false, out, err);
}

col_status col_comm_init_mpi(col_comm **out, col_err *err)
{
    int inited = 0, fin = 0;
    *out = NULL;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin)
        return col_err_set(err, COL_ESTATE, "comm: MPI is already finalised in this process");
    if (!inited) {
        /* MPI calls come from one thread (the one that steps the model), others may compute */
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "comm: initialising MPI: ", err);
    }
    return from_mpi(MPI_COMM_WORLD, !inited, out, err);
}

MPI_Comm col_comm_mpi_handle(const col_comm *c)
{
    return c && c->t == &mpi_transport ? impl(c)->mc : MPI_COMM_NULL;
}

static col_status mpi_split(col_comm *c, int color, int key, col_comm **out, col_err *err)
{
    mpi_comm *m = impl(c);
    /* MPI_Comm_split blocks without a bound: a bounded barrier first makes sure every rank is there */
    MPI_Request q;
    int rc = MPI_Ibarrier(m->mc, &q);
    col_status st = rc == MPI_SUCCESS ? wait_setup(&q, c->timeout_s, "split", c->size, err)
                                      : mpi_fail(rc, "comm: split: ", err);
    if (st != COL_OK) {
        m->fam->failed = true;
        return st;
    }
    MPI_Comm nc = MPI_COMM_NULL;
    rc = MPI_Comm_split(m->mc, color < 0 ? MPI_UNDEFINED : color, key, &nc);
    if (rc != MPI_SUCCESS) {
        m->fam->failed = true;
        return mpi_fail(rc, "comm: split: ", err);
    }
    if (nc == MPI_COMM_NULL)
        return COL_OK;
    MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
    return wrap(nc, m->fam, c->timeout_s, out, err);
}

static void mpi_free_comm(col_comm *c)
{
    mpi_comm *m = impl(c);
    if (!m)
        return;
    mpi_family *fam = m->fam;
    if (c->broken)
        fam->failed = true;
    else
        MPI_Comm_free(&m->mc);
    free(m);
    c->impl = NULL;
    if (--fam->refs > 0)
        return;
    if (fam->owns_mpi && !fam->failed) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Finalize();
    }
    free(fam);
}

static const col_comm_transport mpi_transport = {
    .name = "mpi",
    .req_bytes = sizeof(mpi_req),
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .all_to_all = mpi_all_to_all,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .release = mpi_release,
    .abandon = mpi_abandon,
    .split = mpi_split,
    .free = mpi_free_comm,
};
