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
    /* a device with asynchronous transfers (col_mem_async): copies go on its copy queue, in order */
    bool dev_async;
    bool stage_pinned;
    bool fence_next;            /* the next fetch waits for the kernels queued so far (space was freed) */
    void *fence;                /* a compute-queue event copies wait for */
    uint64_t run_base;          /* transfers pushed before this run */
    uint64_t synced;            /* the host has waited for every transfer up to this one */
    uint64_t stage_seq;         /* the last transfer through the staging buffer */
    void **ev;                  /* per transfer of this run i (seq run_base + 1 + i): [2i] before it, [2i+1] after */
    mt_link *link;              /* per transfer of this run: its link */
    bool *timed;                /* per transfer of this run: both events mark the copy (busy time) */
    int nev, cap_ev;            /* transfers with events this run; events made */
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


/* ---- a device with asynchronous transfers ---- */

/* the events of this run's transfer i, made on first use */
static col_status dev_events(mt_xq *q, int i, col_err *err)
{
    const col_backend_mem *m = q->dev->mem;
    if (i >= q->cap_ev) {
        int ncap = q->cap_ev ? 2 * q->cap_ev : 256;
        while (ncap <= i)
            ncap *= 2;
        void **ev = realloc(q->ev, sizeof *ev * 2 * (size_t)ncap);
        if (!ev)
            return col_err_set(err, COL_ENOMEM, "memtier: out of memory for transfer events");
        q->ev = ev;
        memset(ev + 2 * q->cap_ev, 0, sizeof *ev * 2 * (size_t)(ncap - q->cap_ev));
        mt_link *l = realloc(q->link, sizeof *l * (size_t)ncap);
        if (l)
            q->link = l;
        bool *t = l ? realloc(q->timed, sizeof *t * (size_t)ncap) : NULL;
        if (t)
            q->timed = t;
        if (!l || !t)
            return col_err_set(err, COL_ENOMEM, "memtier: out of memory for transfer events");
        q->cap_ev = ncap;
    }
    for (int k = 2 * i; k < 2 * i + 2; k++) {
        col_status st = q->ev[k] ? COL_OK : m->event_create(q->dev, &q->ev[k], err);
        if (st != COL_OK)
            return st;
    }
    for (; q->nev <= i; q->nev++) { /* (earlier ones without events: their pushes failed) */
        q->link[q->nev] = MT_LINK_H2C;
        q->timed[q->nev] = false;
    }
    return COL_OK;
}

/* this run's transfer seq's "after" event, or NULL when it has none */
static void *dev_after(const mt_xq *q, uint64_t seq)
{
    uint64_t i = seq - q->run_base - 1;
    return seq > q->run_base && i < (uint64_t)q->nev ? q->ev[2 * i + 1] : NULL;
}

/* the host waits for transfer seq (of this run) and everything before it on the copy queue */
static col_status dev_sync_to(mt_xq *q, uint64_t seq, col_err *err)
{
    if (seq <= q->synced)
        return COL_OK;
    double t0 = col_seconds();
    void *ev = q->fail == COL_OK ? dev_after(q, seq) : NULL;
    /* without its event (a failed push): everything queued on the device */
    col_status st = ev ? q->dev->mem->event_sync(q->dev, ev, err) : q->dev->mem->sync(q->dev, err);
    q->wait_s += col_seconds() - t0;
    if (st == COL_OK || !ev)
        q->synced = ev ? seq : q->pushed;
    return st;
}

/* Queues x on the copy queue (a host-home chunk) or carries the NVMe part out
 * here, through the staging buffer, queueing the device part. The copy
 * waits for the kernels queued so far when it is a store (they wrote the
 * chunk) or the resident said space was freed (fence_next). */
static col_status dev_push(mt_xq *q, const mt_xfer *x, int i, mt_link *link, double *host_s, col_err *e)
{
    const col_backend_mem *m = q->dev->mem;
    const col_backend *d = q->dev;
    col_status st = dev_events(q, i, e);
    if (st == COL_OK && (x->store || q->fence_next)) {
        if ((st = m->event_record(d, COL_QUEUE_COMPUTE, q->fence, e)) == COL_OK)
            st = m->queue_wait(d, COL_QUEUE_COPY, q->fence, e);
        q->fence_next = q->fence_next && st != COL_OK;
    }
    if (st != COL_OK)
        return st;
    void *before = q->ev[2 * i], *after = q->ev[2 * i + 1];
    double t0 = col_seconds();
    if (x->home) {
        *link = x->store ? MT_LINK_C2H : MT_LINK_H2C;
        if ((st = m->event_record(d, COL_QUEUE_COPY, before, e)) == COL_OK)
            st = x->store ? m->copy_async(d, false, x->home, x->buf, x->bytes, e)
                          : m->copy_async(d, true, x->buf, x->home, x->bytes, e);
    } else if (!q->stage) {
        *link = x->store ? MT_LINK_H2N : MT_LINK_N2H;
        st = col_err_set(e, COL_EINTERNAL, "memtier: no staging buffer for NVMe chunk %d", x->chunk);
    } else if (x->store) { /* device -> staging, wait, staging -> NVMe */
        *link = MT_LINK_H2N;
        if ((st = m->event_record(d, COL_QUEUE_COPY, before, e)) == COL_OK &&
            (st = m->copy_async(d, false, q->stage, x->buf, x->bytes, e)) == COL_OK &&
            (st = m->event_record(d, COL_QUEUE_COPY, after, e)) == COL_OK &&
            (st = m->event_sync(d, after, e)) == COL_OK)
            st = mt_chunk_write(q->pool, x->chunk, q->stage, e);
    } else { /* the staging buffer free again, NVMe -> staging, then staging -> device queued */
        *link = MT_LINK_N2H;
        st = dev_sync_to(q, q->stage_seq, e);
        if (st == COL_OK && (st = mt_chunk_read(q->pool, x->chunk, q->stage, e)) == COL_OK &&
            (st = m->event_record(d, COL_QUEUE_COPY, before, e)) == COL_OK)
            st = m->copy_async(d, true, x->buf, q->stage, x->bytes, e);
    }
    if (st == COL_OK)
        st = m->event_record(d, COL_QUEUE_COPY, after, e);
    *host_s = col_seconds() - t0;
    return st;
}

/* adds the copy queue's busy time of this run's transfers (all completed) to busy_s */
static void dev_busy_times(mt_xq *q)
{
    for (int i = 0; i < q->nev; i++) {
        double s = 0;
        if (q->timed[i] && q->dev->mem->event_elapsed(q->dev, q->ev[2 * i], q->ev[2 * i + 1], &s, NULL) == COL_OK)
            q->busy_s[q->link[i]] += s;
        q->timed[i] = false;
    }
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
    if (dev && col_mem_async(dev->mem)) {
        col_status st = dev->mem->event_create(dev, &q->fence, err);
        if (st != COL_OK) {
            mt_xq_free(q);
            return st;
        }
        q->dev_async = true;
        /* pinned staging lets its copies overlap the kernels; pageable ones are only slower */
        q->stage_pinned = q->stage && dev->mem->host_pin(dev, q->stage, stage_bytes, NULL) == COL_OK;
    }
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
    if (q->dev_async) {
        mt_xq_drain(q, NULL);
        const col_backend_mem *m = q->dev->mem;
        for (int k = 0; k < 2 * q->cap_ev; k++)
            m->event_free(q->dev, q->ev[k]);
        m->event_free(q->dev, q->fence);
        if (q->stage_pinned)
            m->host_unpin(q->dev, q->stage);
    }
    free(q->ev);
    free(q->link);
    free(q->timed);
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

bool mt_xq_async(const mt_xq *q) { return q->async || q->dev_async; }

void mt_xq_fence_next(mt_xq *q) { q->fence_next = true; }

void mt_xq_begin_run(mt_xq *q)
{
    mt_xq_drain(q, NULL);
    pthread_mutex_lock(&q->mu);
    q->fail = COL_OK;
    memset(&q->fail_err, 0, sizeof q->fail_err);
    memset(q->failed, 0, sizeof *q->failed * (size_t)q->nchunks);
    q->wait_s = 0;
    memset(q->busy_s, 0, sizeof q->busy_s);
    q->run_base = q->synced = q->pushed;
    q->nev = 0;
    q->fence_next = false;
    pthread_mutex_unlock(&q->mu);
}

col_status mt_xq_push(mt_xq *q, const mt_xfer *x, uint64_t *seq, col_err *err)
{
    if (q->dev_async) { /* the calling thread queues it; checking-mode transfers are carried out at once */
        col_err e = {0};
        mt_link link = x->store ? (x->home ? MT_LINK_C2H : MT_LINK_H2N) : (x->home ? MT_LINK_H2C : MT_LINK_N2H);
        col_status st = COL_OK;
        double host_s = 0;
        int i = (int)(q->pushed - q->run_base);
        bool sk = skip(q, x), now = x->poison || x->shadow || x->restore;
        if (now && (st = mt_xq_drain(q, &e)) == COL_OK && !sk) {
            double t0 = col_seconds();
            st = run_xfer(q, x, true, &link, &e);
            host_s = col_seconds() - t0;
        }
        if (st == COL_OK) /* every transfer gets an event after it, for the waits */
            st = now || sk ? dev_events(q, i, &e) : dev_push(q, x, i, &link, &host_s, &e);
        if (st == COL_OK && (now || sk))
            st = q->dev->mem->event_record(q->dev, COL_QUEUE_COPY, q->ev[2 * i + 1], &e);
        if (i < q->nev) {
            q->link[i] = link;
            q->timed[i] = st == COL_OK && !now && !sk && x->home; /* its copy's time is in its events */
        }
        if (!x->home && !now)
            q->stage_seq = q->pushed + 1;
        bool host_side = now || !x->home; /* carried out (or its NVMe part) on this thread */
        pthread_mutex_lock(&q->mu);
        q->pushed++;
        finish(q, x, st, &e, link, host_side && !sk ? host_s : 0);
        q->wait_s += host_side ? host_s : 0;
        *seq = q->pushed;
        pthread_mutex_unlock(&q->mu);
        return COL_OK;
    }
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
    if (q->dev_async && seq > q->synced) { /* then finished >= seq already: pushes count as done */
        col_err e = {0};
        col_status st = dev_sync_to(q, seq, &e);
        if (st != COL_OK && q->fail == COL_OK) {
            q->fail = st;
            q->fail_err = e;
        }
    }
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

col_status mt_xq_order(mt_xq *q, uint64_t seq, col_err *err)
{
    void *ev = q->dev_async && seq > q->synced && q->fail == COL_OK ? dev_after(q, seq) : NULL;
    if (!ev)
        return mt_xq_wait(q, seq, err);
    col_err e = {0};
    col_status st = q->dev->mem->queue_wait(q->dev, COL_QUEUE_COMPUTE, ev, &e);
    if (st != COL_OK && q->fail == COL_OK) {
        q->fail = st;
        q->fail_err = e;
    }
    return st != COL_OK ? col_err_copy(err, &e) : COL_OK;
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
    if (q->dev_async && mt_xq_drain(q, NULL) == COL_OK)
        dev_busy_times(q);
    pthread_mutex_lock(&q->mu);
    *wait_s = q->wait_s;
    memcpy(busy_s, q->busy_s, sizeof q->busy_s);
    pthread_mutex_unlock(&q->mu);
}
