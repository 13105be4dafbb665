/* mt_resident_io.c - the transfer queue of a compute tier (see
 * mt_resident_internal.h): one thread per queue, FIFO, errors kept for the
 * next wait. */
#include "mt_resident_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvme.h"

struct mt_xq {
    mt_pool *pool;
    int nchunks;
    bool async;
    pthread_t thread;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t work, done;  /* a transfer was pushed; one finished */
    mt_xfer *q;                 /* pending transfers q[head .. tail), the one at head possibly running */
    int head, tail, cap;
    uint64_t pushed, finished;  /* transfers numbered 1, 2, ...: seq s has finished when finished >= s */
    col_status fail;            /* the first failure of this run */
    col_err fail_err;
    bool *failed;               /* per chunk: its fetch failed in this run */
    const col_backend *dev;     /* the copies are this backend's memory (NULL: host memory) */
    void *stage;                /* with dev: host staging for NVMe chunks (NULL when none is needed) */
    double wait_s, busy_s[MT_NLINKS];
};

/* a copy across the tiers on all threads (one thread's memcpy reaches a
 * third of the memory bandwidth): for the synchronous mode, where the
 * calling thread's OpenMP team is idle anyway */
static void copy_parallel(void *dst, const void *src, size_t n)
{
    enum { BLOCK = 1 << 18 };
    long nb = (long)((n + BLOCK - 1) / BLOCK);
#pragma omp parallel for schedule(static) if (nb > 4)
    for (long b = 0; b < nb; b++) {
        size_t off = (size_t)b * BLOCK, len = n - off < BLOCK ? n - off : BLOCK;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

/* checking mode, after a fetch: the home's bytes saved, then NaNs over them */
static void poison_home(const mt_xfer *x)
{
    if (x->shadow)
        memcpy(x->shadow, x->home, x->bytes);
    memset(x->home, 0xff, x->bytes);
}

/* carries out one transfer; the link it kept busy in *link. On the
 * transfer thread a plain memcpy: an OpenMP team there would fight the
 * compute threads for the cores. */
static col_status run_xfer(mt_xq *q, const mt_xfer *x, bool parallel, mt_link *link, col_err *e)
{
    col_status st = COL_OK;
    if (q->dev) { /* device copies: through the backend's memory table */
        const col_backend_mem *m = q->dev->mem;
        if (x->home && x->restore) {
            memcpy(x->home, x->shadow, x->bytes);
            *link = MT_LINK_C2H;
        } else if (x->home) {
            st = x->store ? m->to_host(q->dev, x->home, x->buf, x->bytes, e)
                          : m->to_device(q->dev, x->buf, x->home, x->bytes, e);
            if (st == COL_OK && x->poison && !x->store)
                poison_home(x);
            if (st == COL_OK && x->store && x->shadow)
                memcpy(x->shadow, x->home, x->bytes); /* checking mode: what home now holds */
            *link = x->store ? MT_LINK_C2H : MT_LINK_H2C;
        } else if (!q->stage) {
            st = col_err_set(e, COL_EINTERNAL, "memtier: no staging buffer for NVMe chunk %d", x->chunk);
            *link = x->store ? MT_LINK_H2N : MT_LINK_N2H;
        } else if (x->store) { /* device -> staging -> NVMe */
            st = m->to_host(q->dev, q->stage, x->buf, x->bytes, e);
            if (st == COL_OK)
                st = mt_chunk_write(q->pool, x->chunk, q->stage, e);
            *link = MT_LINK_H2N;
        } else { /* NVMe -> staging -> device */
            st = mt_chunk_read(q->pool, x->chunk, q->stage, e);
            if (st == COL_OK)
                st = m->to_device(q->dev, x->buf, q->stage, x->bytes, e);
            *link = MT_LINK_N2H;
        }
        return st;
    }
    if (x->home) {
        void *dst = x->store ? x->home : x->buf;
        const void *src = x->store ? (x->restore ? x->shadow : x->buf) : x->home;
        if (parallel)
            copy_parallel(dst, src, x->bytes);
        else
            memcpy(dst, src, x->bytes);
        if (x->poison && !x->store)
            poison_home(x);
        if (x->store && x->shadow && !x->restore)
            memcpy(x->shadow, x->home, x->bytes); /* checking mode: what home now holds */
        *link = x->store ? MT_LINK_C2H : MT_LINK_H2C;
    } else {
        /* one direct read into (write from) the compute-tier copy; with CUDA it
         * would go NVMe -> pinned host buffer -> GPU */
        st = x->store ? mt_chunk_write(q->pool, x->chunk, x->buf, e) : mt_chunk_read(q->pool, x->chunk, x->buf, e);
        *link = x->store ? MT_LINK_H2N : MT_LINK_N2H;
    }
    return st;
}

/* records a finished transfer (mu held) */
static void finish(mt_xq *q, const mt_xfer *x, col_status st, const col_err *e, mt_link link, double s)
{
    q->busy_s[link] += s;
    if (st != COL_OK) {
        if (q->fail == COL_OK) {
            q->fail = st;
            q->fail_err = *e;
        }
        if (!x->store)
            q->failed[x->chunk] = true;
    }
    q->finished++;
}

/* a store of a chunk whose fetch failed would put garbage home: skipped */
static bool skip(const mt_xq *q, const mt_xfer *x) { return x->store && q->failed[x->chunk]; }

static void *thread_main(void *arg)
{
    mt_xq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->work, &q->mu);
        if (q->head == q->tail)
            break;
        mt_xfer x = q->q[q->head]; /* the slot stays taken until it is done: push may move the array */
        bool sk = skip(q, &x);
        pthread_mutex_unlock(&q->mu);
        col_err e = {0};
        mt_link link = MT_LINK_H2C;
        col_status st = COL_OK;
        double t0 = col_seconds();
        if (!sk)
            st = run_xfer(q, &x, false, &link, &e);
        double s = col_seconds() - t0;
        pthread_mutex_lock(&q->mu);
        q->head++;
        finish(q, &x, st, &e, link, sk ? 0 : s);
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

col_status mt_xq_create(mt_pool *pool, int nchunks, const col_backend *dev, size_t stage_bytes, mt_xq **out,
                        col_err *err)
{
    *out = NULL;
    mt_xq *q = calloc(1, sizeof *q);
    if (!q)
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    q->failed = calloc((size_t)nchunks + 1, sizeof *q->failed);
    if (dev && stage_bytes) {
        size_t n = (stage_bytes + MT_NVME_ALIGN - 1) / MT_NVME_ALIGN * MT_NVME_ALIGN;
        q->stage = aligned_alloc(MT_NVME_ALIGN, n);
    }
    if (!q->failed || (dev && stage_bytes && !q->stage)) {
        free(q->stage);
        free(q->failed);
        free(q);
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    }
    int made = 0; /* the mutex, then the two condition variables */
    if (pthread_mutex_init(&q->mu, NULL) == 0 && ++made && pthread_cond_init(&q->work, NULL) == 0 && ++made &&
        pthread_cond_init(&q->done, NULL) == 0)
        made++;
    if (made < 3) {
        if (made > 1)
            pthread_cond_destroy(&q->work);
        if (made > 0)
            pthread_mutex_destroy(&q->mu);
        free(q->stage);
        free(q->failed);
        free(q);
        return col_err_set(err, COL_ENOMEM, "memtier: cannot create the transfer queue's locks");
    }
    q->pool = pool;
    q->nchunks = nchunks;
    q->dev = dev;
    q->async = false; /* the default (mt_resident.h); mt_xq_set_async switches */
    *out = q;
    return COL_OK;
}

void mt_xq_free(mt_xq *q)
{
    if (!q)
        return;
    if (q->started) {
        pthread_mutex_lock(&q->mu);
        q->stop = true; /* the thread finishes what is queued, then leaves */
        pthread_cond_signal(&q->work);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->thread, NULL);
    }
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_mutex_destroy(&q->mu);
    free(q->q);
    free(q->failed);
    free(q->stage);
    free(q);
}

void mt_xq_set_async(mt_xq *q, bool on)
{
    mt_xq_drain(q, NULL);
    q->async = on && !q->dev;
}

bool mt_xq_async(const mt_xq *q) { return q->async; }

void mt_xq_begin_run(mt_xq *q)
{
    mt_xq_drain(q, NULL);
    pthread_mutex_lock(&q->mu);
    q->fail = COL_OK;
    memset(&q->fail_err, 0, sizeof q->fail_err);
    memset(q->failed, 0, sizeof *q->failed * (size_t)q->nchunks);
    q->wait_s = 0;
    memset(q->busy_s, 0, sizeof q->busy_s);
    pthread_mutex_unlock(&q->mu);
}

col_status mt_xq_push(mt_xq *q, const mt_xfer *x, uint64_t *seq, col_err *err)
{
    if (!q->async) { /* the calling thread does it now; the time counts as waiting */
        col_err e = {0};
        mt_link link = MT_LINK_H2C;
        col_status st = COL_OK;
        double t0 = col_seconds();
        bool sk = skip(q, x);
        if (!sk)
            st = run_xfer(q, x, true, &link, &e);
        double s = col_seconds() - t0;
        pthread_mutex_lock(&q->mu);
        q->pushed++;
        finish(q, x, st, &e, link, sk ? 0 : s);
        q->wait_s += s;
        *seq = q->pushed;
        pthread_mutex_unlock(&q->mu);
        return COL_OK;
    }
    if (!q->started) {
        if (pthread_create(&q->thread, NULL, thread_main, q) != 0)
            return col_err_set(err, COL_ENOMEM, "memtier: cannot start the transfer thread");
        q->started = true;
    }
    pthread_mutex_lock(&q->mu);
    if (q->head == q->tail) /* nothing pending or running: start the array over */
        q->head = q->tail = 0;
    if (q->tail == q->cap) {
        int ncap = q->cap ? 2 * q->cap : 64;
        mt_xfer *nq = realloc(q->q, sizeof *nq * (size_t)ncap);
        if (!nq) {
            pthread_mutex_unlock(&q->mu);
            return col_err_set(err, COL_ENOMEM, "memtier: out of memory for the transfer queue");
        }
        q->q = nq;
        q->cap = ncap;
    }
    q->q[q->tail++] = *x;
    *seq = ++q->pushed;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return COL_OK;
}

bool mt_xq_done(mt_xq *q, uint64_t seq)
{
    pthread_mutex_lock(&q->mu);
    bool done = q->finished >= seq;
    pthread_mutex_unlock(&q->mu);
    return done;
}

col_status mt_xq_wait(mt_xq *q, uint64_t seq, col_err *err)
{
    pthread_mutex_lock(&q->mu);
    if (q->finished < seq) {
        double t0 = col_seconds();
        while (q->finished < seq)
            pthread_cond_wait(&q->done, &q->mu);
        q->wait_s += col_seconds() - t0;
    }
    col_status st = q->fail;
    if (st != COL_OK && err)
        col_err_copy(err, &q->fail_err);
    pthread_mutex_unlock(&q->mu);
    return st;
}

col_status mt_xq_drain(mt_xq *q, col_err *err)
{
    pthread_mutex_lock(&q->mu);
    uint64_t all = q->pushed;
    pthread_mutex_unlock(&q->mu);
    return mt_xq_wait(q, all, err);
}

bool mt_xq_chunk_failed(mt_xq *q, int chunk)
{
    pthread_mutex_lock(&q->mu);
    bool f = q->failed[chunk];
    pthread_mutex_unlock(&q->mu);
    return f;
}

void mt_xq_times(mt_xq *q, double *wait_s, double busy_s[MT_NLINKS])
{
    pthread_mutex_lock(&q->mu);
    *wait_s = q->wait_s;
    memcpy(busy_s, q->busy_s, sizeof q->busy_s);
    pthread_mutex_unlock(&q->mu);
}
