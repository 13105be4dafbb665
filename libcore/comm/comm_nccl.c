/* comm_nccl.c - the NCCL transport (comm_nccl.h). Plain C against NCCL's
 * and the CUDA runtime's C interfaces: no kernel of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "comm_internal.h"
#include "comm_nccl.h"
#include "timer.h"

typedef struct {
    ncclComm_t nc;
    cudaStream_t stream;
    int device;
    col_comm *host;  /* an MPI communicator of the same ranks in the same order */
    float *scratch;  /* one device float: the barrier's all-reduce */
} nccl_comm;

typedef struct {
    col_comm_req base;
    cudaEvent_t ev;  /* recorded on the stream after the operation */
} nccl_req;

static const col_comm_transport nccl_transport;

static nccl_comm *impl(const col_comm *c) { return c->impl; }

static ncclDataType_t nccl_type(col_dtype dt)
{
    switch (dt) {
    case COL_F32: return ncclFloat32;
    case COL_BF16: return ncclBfloat16;
    case COL_F16: return ncclFloat16;
    case COL_I32: return ncclInt32;
    default: return ncclInt64;
    }
}

static ncclRedOp_t nccl_op(col_red_op op)
{
    switch (op) {
    case COL_RED_MAX: return ncclMax;
    case COL_RED_MIN: return ncclMin;
    case COL_RED_AVG: return ncclAvg;
    default: return ncclSum;
    }
}

static col_status nccl_fail(ncclComm_t nc, ncclResult_t rc, const char *prefix, col_err *err)
{
    const char *last = nc ? ncclGetLastError(nc) : NULL;
    return col_err_set(err, COL_EIO, "%sNCCL: %s%s%s", prefix, ncclGetErrorString(rc), last && *last ? ": " : "",
                       last ? last : "");
}

static col_status cuda_fail(cudaError_t e, const char *prefix, col_err *err)
{
    return col_err_set(err, COL_EIO, "%sCUDA: %s", prefix, cudaGetErrorString(e));
}

/* The communicator is non-blocking (config.blocking = 0): a call may return
 * ncclInProgress while NCCL finishes it in the background. Waits (at most
 * timeout seconds) until it has; then rc is the outcome. */
static ncclResult_t settle(ncclComm_t nc, ncclResult_t rc, double timeout, bool *timed_out)
{
    double start = col_seconds();
    long pause_ns = 0;
    *timed_out = false;
    while (rc == ncclInProgress) {
        if (col_seconds() - start >= timeout) {
            *timed_out = true;
            break;
        }
        col_comm_backoff(&pause_ns);
        if (ncclCommGetAsyncError(nc, &rc) != ncclSuccess)
            break;
    }
    return rc;
}

/* the end of starting r: settle NCCL's call, then mark the stream with r's event */
static col_status queued(col_comm *c, col_comm_req *r, ncclResult_t rc, col_err *err)
{
    nccl_comm *m = impl(c);
    nccl_req *q = (nccl_req *)r;
    char what[200], prefix[220];
    col_comm_describe(r, what, sizeof what);
    snprintf(prefix, sizeof prefix, "comm: %s: ", what);
    bool late = false;
    rc = settle(m->nc, rc, c->timeout_s, &late);
    if (late)
        return col_err_set(err, COL_EIO, "%sNCCL did not queue it within %.1f s", prefix, c->timeout_s);
    if (rc != ncclSuccess)
        return nccl_fail(m->nc, rc, prefix, err);
    cudaError_t e = cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventRecord(q->ev, m->stream);
    return e == cudaSuccess ? COL_OK : cuda_fail(e, prefix, err);
}

/* the device of c is current (events and queued work are the current device's) */
static col_status on_device(const col_comm *c, col_err *err)
{
    cudaError_t e = cudaSetDevice(impl(c)->device);
    return e == cudaSuccess ? COL_OK : cuda_fail(e, "comm: selecting the device: ", err);
}

static col_status ranked_unsupported(const col_comm *c, const col_comm_req *r, col_err *err)
{
    if (c->order == COL_ORDER_RANK && col_dtype_is_float(r->dt) && (r->red == COL_RED_SUM || r->red == COL_RED_AVG))
        return col_err_set(err, COL_EUNSUPPORTED, "comm: %s: rank-ordered sums are not done on NCCL yet",
                           col_comm_op_name(r->op));
    return COL_OK;
}

/* ---- the table's starts ---- */

static col_status nc_all_reduce(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    col_status st = ranked_unsupported(c, r, err);
    if (st == COL_OK)
        st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r,
                  ncclAllReduce(send, recv, r->count, nccl_type(r->dt), nccl_op(r->red), m->nc, m->stream), err);
}

static col_status nc_reduce_scatter(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    col_status st = ranked_unsupported(c, r, err);
    if (st == COL_OK)
        st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r,
                  ncclReduceScatter(send, recv, r->count, nccl_type(r->dt), nccl_op(r->red), m->nc, m->stream), err);
}

static col_status nc_all_gather(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r, ncclAllGather(send, recv, r->count, nccl_type(r->dt), m->nc, m->stream), err);
}

static col_status nc_broadcast(col_comm *c, col_comm_req *r, void *buf, col_err *err)
{
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r, ncclBroadcast(buf, buf, r->count, nccl_type(r->dt), r->peer, m->nc, m->stream), err);
}

static col_status nc_all_to_all(col_comm *c, col_comm_req *r, const void *send, void *recv, col_err *err)
{
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    size_t block = r->count * col_dtype_size(r->dt);
    ncclDataType_t t = nccl_type(r->dt);
    /* one send and one receive per peer, fused into one operation by the group */
    ncclResult_t rc = ncclGroupStart();
    for (int j = 0; j < c->size && rc == ncclSuccess; j++) {
        rc = ncclSend((const char *)send + (size_t)j * block, r->count, t, j, m->nc, m->stream);
        if (rc == ncclSuccess)
            rc = ncclRecv((char *)recv + (size_t)j * block, r->count, t, j, m->nc, m->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return queued(c, r, rc != ncclSuccess ? rc : end, err);
}

static col_status nc_send(col_comm *c, col_comm_req *r, const void *buf, col_err *err)
{
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r, ncclSend(buf, r->count, nccl_type(r->dt), r->peer, m->nc, m->stream), err);
}

static col_status nc_recv(col_comm *c, col_comm_req *r, void *buf, col_err *err)
{
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r, ncclRecv(buf, r->count, nccl_type(r->dt), r->peer, m->nc, m->stream), err);
}

static col_status nc_barrier(col_comm *c, col_comm_req *r, col_err *err)
{
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    nccl_comm *m = impl(c);
    return queued(c, r, ncclAllReduce(m->scratch, m->scratch, 1, ncclFloat32, ncclSum, m->nc, m->stream), err);
}

/* ---- completion ---- */

static col_status nc_test(col_comm_req *r, bool *done, col_err *err)
{
    nccl_req *q = (nccl_req *)r;
    nccl_comm *m = impl(r->comm);
    *done = false;
    cudaError_t e = cudaEventQuery(q->ev);
    if (e == cudaSuccess) {
        *done = true;
        return COL_OK;
    }
    if (e != cudaErrorNotReady)
        return cuda_fail(e, "", err);
    if (!m->nc) /* aborted after another request failed: comm.c reports it */
        return COL_OK;
    /* still running: a failed peer or network shows here */
    ncclResult_t ae = ncclSuccess;
    if (ncclCommGetAsyncError(m->nc, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress)
        return nccl_fail(m->nc, ae, "", err);
    return COL_OK;
}

static void nc_release(col_comm_req *r, bool completed)
{
    nccl_req *q = (nccl_req *)r;
    (void)completed; /* an event may be destroyed while pending: CUDA frees it once it completes */
    if (q->ev)
        cudaEventDestroy(q->ev);
}

static void nc_abandon(col_comm *c)
{
    nccl_comm *m = impl(c);
    /* the kernels of a collective a dead peer never joins spin on the device: aborting ends them */
    if (m->nc)
        ncclCommAbort(m->nc);
    m->nc = NULL;
}

/* ---- making communicators ---- */

/* a col_comm over nc (on success it owns nc and host) */
static col_status wrap(ncclComm_t nc, col_comm *host, int device, cudaStream_t stream, col_comm **out, col_err *err)
{
    col_comm *c = col_comm_alloc(&nccl_transport, col_comm_rank(host), col_comm_size(host));
    nccl_comm *m = c ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        col_comm_dealloc(c);
        return col_err_set(err, COL_ENOMEM, "comm: out of memory for an NCCL communicator");
    }
    cudaError_t e = cudaMalloc((void **)&m->scratch, sizeof(float));
    if (e != cudaSuccess) {
        free(m);
        col_comm_dealloc(c);
        return cuda_fail(e, "comm: NCCL communicator: ", err);
    }
    m->nc = nc;
    m->host = host;
    m->device = device;
    m->stream = stream;
    c->impl = m;
    memcpy(c->peers, host->peers, (size_t)host->size * sizeof *c->peers);
    c->local_rank = host->local_rank;
    c->local_size = host->local_size;
    c->timeout_s = host->timeout_s;
    *out = c;
    return COL_OK;
}

col_status col_comm_init_nccl(col_comm *host, int device, void *stream, col_comm **out, col_err *err)
{
    *out = NULL;
    if (!host || strcmp(col_comm_transport_name(host), "mpi") != 0)
        return col_err_set(err, COL_EINVAL, "comm: an NCCL communicator is made from an MPI one");
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return col_err_set(err, COL_EUNSUPPORTED, "comm: NCCL on CUDA device %d: %s", device, cudaGetErrorString(e));
    /* its own MPI communicator of the same ranks (col_comm_free of the NCCL one frees it) */
    col_comm *h = NULL;
    col_status st = col_comm_split(host, 0, col_comm_rank(host), &h, err);
    if (st != COL_OK)
        return st;
    /* rank 0's id, with whether it could make one: every rank learns either way */
    struct {
        int32_t ok;
        int32_t pad;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (col_comm_rank(h) == 0)
        msg.ok = ncclGetUniqueId(&msg.id) == ncclSuccess;
    _Static_assert(sizeof msg % 4 == 0, "the id travels as i32 elements");
    st = col_comm_broadcast(h, &msg, sizeof msg / 4, COL_I32, 0, err);
    if (st == COL_OK && !msg.ok)
        st = col_err_set(err, COL_EUNSUPPORTED, "comm: NCCL could not make its unique id on rank 0");
    ncclComm_t nc = NULL;
    if (st == COL_OK) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        bool late = false;
        ncclResult_t rc = ncclCommInitRankConfig(&nc, col_comm_size(h), msg.id, col_comm_rank(h), &config);
        if (nc)
            rc = settle(nc, rc, h->timeout_s, &late);
        if (late)
            st = col_err_set(err, COL_EIO, "comm: NCCL initialisation on %d ranks: not complete after waiting %.1f s",
                             col_comm_size(h), h->timeout_s);
        else if (rc != ncclSuccess)
            st = nccl_fail(nc, rc, "comm: NCCL initialisation: ", err);
        if (st != COL_OK && nc)
            ncclCommAbort(nc);
    }
    if (st == COL_OK) {
        st = wrap(nc, h, device, (cudaStream_t)stream, out, err);
        if (st != COL_OK)
            ncclCommAbort(nc);
    }
    if (st != COL_OK)
        col_comm_free(h);
    return st;
}

static col_status nc_split(col_comm *c, int color, int key, col_comm **out, col_err *err)
{
    nccl_comm *m = impl(c);
    col_status st = on_device(c, err);
    if (st != COL_OK)
        return st;
    col_comm *h = NULL;
    st = col_comm_split(m->host, color, key, &h, err);
    if (st != COL_OK)
        return st;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nc = NULL;
    ncclResult_t rc = ncclCommSplit(m->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &config);
    bool late = false;
    rc = settle(m->nc, rc, c->timeout_s, &late);
    if (!late && rc == ncclSuccess && nc)
        rc = settle(nc, ncclInProgress, c->timeout_s, &late);
    if (late || rc != ncclSuccess) {
        col_comm_free(h);
        if (nc)
            ncclCommAbort(nc);
        if (late)
            return col_err_set(err, COL_EIO, "comm: NCCL split on %d ranks: not complete after waiting %.1f s",
                               c->size, c->timeout_s);
        return nccl_fail(m->nc, rc, "comm: NCCL split: ", err);
    }
    if (!h) { /* this rank joins no group */
        if (nc)
            ncclCommAbort(nc);
        return COL_OK;
    }
    st = wrap(nc, h, m->device, m->stream, out, err);
    if (st != COL_OK) {
        ncclCommAbort(nc);
        col_comm_free(h);
    }
    return st;
}

static void nc_free(col_comm *c)
{
    nccl_comm *m = impl(c);
    if (!m)
        return;
    cudaSetDevice(m->device);
    if (m->nc && !c->broken) {
        /* finish what is queued (bounded), then release; abort if the peers do not answer */
        bool late = false;
        ncclResult_t rc = settle(m->nc, ncclCommFinalize(m->nc), c->timeout_s, &late);
        if (late || rc != ncclSuccess)
            ncclCommAbort(m->nc);
        else
            ncclCommDestroy(m->nc);
    } else if (m->nc) {
        ncclCommAbort(m->nc);
    }
    cudaFree(m->scratch);
    if (c->broken && m->host && !m->host->broken) {
        /* the failure is the whole run's: the MPI side must not wait for the missing rank either */
        m->host->broken = true;
        col_err_copy(&m->host->broken_err, &c->broken_err);
        if (m->host->t->abandon)
            m->host->t->abandon(m->host);
    }
    col_comm_free(m->host);
    free(m);
    c->impl = NULL;
}

static const col_comm_transport nccl_transport = {
    .name = "nccl",
    .req_bytes = sizeof(nccl_req),
    .all_reduce = nc_all_reduce,
    .reduce_scatter = nc_reduce_scatter,
    .all_gather = nc_all_gather,
    .broadcast = nc_broadcast,
    .all_to_all = nc_all_to_all,
    .send = nc_send,
    .recv = nc_recv,
    .barrier = nc_barrier,
    .test = nc_test,
    .release = nc_release,
    .abandon = nc_abandon,
    .split = nc_split,
    .free = nc_free,
};
