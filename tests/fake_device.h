/* fake_device.h - a fake "device" memory table (backend.h's col_backend_mem)
 * for testing device plans and sessions on the CPU: blocks of host memory
 * handed out by the table (filled with NaN bytes so what nobody wrote
 * shows), counters for every call, and copies refused unless they go
 * between a host buffer and one of its blocks (to_device / to_host) or
 * between two non-overlapping ranges of its blocks (copy). Allocation and
 * sync can be told to fail. Register the backends that may call the table
 * with fk_own(). One state per test program (a static in this header).
 * Include after testlib.h. */
#ifndef COL_TESTS_FAKE_DEVICE_H
#define COL_TESTS_FAKE_DEVICE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

#define FK_MAXBLK 512

static struct {
    void *blk[FK_MAXBLK];
    size_t size[FK_MAXBLK];
    int allocs, frees, live, to_dev, to_host, copies, syncs;
    int refused;            /* copies that were not host<->block or block<->block */
    bool fail_alloc, fail_sync;
    char first[200];        /* the first refusal (a test may record its own refusals here too) */
    const col_backend *owner[4];
} fk;

/* lets be call the table (at most 4 backends) */
static inline void fk_own(const col_backend *be)
{
    for (int i = 0; i < 4; i++)
        if (!fk.owner[i] || fk.owner[i] == be) {
            fk.owner[i] = be;
            return;
        }
}

static inline bool fk_is_owner(const col_backend *be)
{
    for (int i = 0; i < 4; i++)
        if (be && fk.owner[i] == be)
            return true;
    return false;
}

/* the block holding [p, p + bytes), or -1 */
static inline int fk_find_block(const void *p, size_t bytes)
{
    for (int i = 0; i < FK_MAXBLK; i++)
        if (fk.blk[i] && (const char *)p >= (char *)fk.blk[i] &&
            (const char *)p + bytes <= (char *)fk.blk[i] + fk.size[i])
            return i;
    return -1;
}

static inline col_status fk_refuse(col_err *err, const char *what, const void *a, const void *b)
{
    if (!fk.refused++ && !fk.first[0])
        snprintf(fk.first, sizeof fk.first, "%s %p %p", what, a, b);
    return col_err_set(err, COL_EINVAL, "fake %s: %p / %p is not the right kind of memory", what, a, b);
}

static inline col_status fk_alloc(const col_backend *be, size_t bytes, void **out, col_err *err)
{
    *out = NULL;
    if (!fk_is_owner(be))
        return col_err_set(err, COL_EINTERNAL, "fake alloc: called with another backend");
    if (fk.fail_alloc)
        return col_err_set(err, COL_ENOMEM, "fake device out of memory (%zu bytes)", bytes);
    int i = 0;
    while (i < FK_MAXBLK && fk.blk[i])
        i++;
    size_t b = (bytes + 63) & ~(size_t)63;
    void *p = i < FK_MAXBLK ? aligned_alloc(64, b ? b : 64) : NULL;
    if (!p)
        return col_err_set(err, COL_ENOMEM, "fake alloc: no block for %zu bytes", bytes);
    memset(p, 0xff, b ? b : 64); /* NaN bytes: what nobody wrote shows */
    fk.blk[i] = p;
    fk.size[i] = bytes;
    fk.allocs++;
    fk.live++;
    *out = p;
    return COL_OK;
}

static inline void fk_free(const col_backend *be, void *p)
{
    (void)be;
    if (!p)
        return;
    for (int i = 0; i < FK_MAXBLK; i++)
        if (fk.blk[i] == p) {
            free(p);
            fk.blk[i] = NULL;
            fk.frees++;
            fk.live--;
            return;
        }
    fk.frees += 1000; /* not ours: fails every balance check */
}

static inline col_status fk_to_device(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    if (!fk_is_owner(be) || fk_find_block(dst, bytes) < 0 || fk_find_block(src, 1) >= 0)
        return fk_refuse(err, "to_device", dst, src);
    memcpy(dst, src, bytes);
    fk.to_dev++;
    return COL_OK;
}

static inline col_status fk_to_host(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    if (!fk_is_owner(be) || fk_find_block(src, bytes) < 0 || fk_find_block(dst, 1) >= 0)
        return fk_refuse(err, "to_host", dst, src);
    memcpy(dst, src, bytes);
    fk.to_host++;
    return COL_OK;
}

static inline col_status fk_copy(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    const char *d = dst, *s = src;
    if (!fk_is_owner(be) || fk_find_block(dst, bytes) < 0 || fk_find_block(src, bytes) < 0 ||
        (d < s + bytes && s < d + bytes))
        return fk_refuse(err, "copy", dst, src);
    memcpy(dst, src, bytes); /* not memmove: overlapping ranges were refused above */
    fk.copies++;
    return COL_OK;
}

static inline col_status fk_sync(const col_backend *be, col_err *err)
{
    (void)be;
    fk.syncs++;
    if (fk.fail_sync)
        return col_err_set(err, COL_EINTERNAL, "fake device fault at sync");
    return COL_OK;
}

/* ---- asynchronous transfers (fk_mem_async): a copy queue that runs late ----
 * copy_async only queues a copy. It is carried out when something waits for
 * an event recorded after it (queue_wait on the kernels' queue, event_sync)
 * or at sync, never earlier. The kernels run at once (they are the CPU's),
 * so an op whose chunk nobody waited for reads what its block held before
 * the fetch: a missing wait changes the results. (The other hazard, a copy
 * overtaking the kernels before it, cannot happen here: they have run.) */
#define FK_MAXQ 8192

typedef struct {
    long pos;       /* a copy-queue event: complete once that many copies have been carried out */
    bool copyq;     /* recorded on the copy queue (else on the kernels', where everything is complete) */
    double t;       /* when recorded (seconds) */
} fk_event;

static struct {
    struct { void *dst; const void *src; size_t bytes; } q[FK_MAXQ];
    long pushed, done;      /* copies queued, carried out (FIFO: q[i % FK_MAXQ]) */
    int events, pins, unpins, late; /* live events; pin calls that succeeded, unpins; copies run by a wait */
    bool fail_pin;
} fkq;

static inline double fk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* carries out the queued copies up to position pos */
static inline void fk_flush(long pos)
{
    for (; fkq.done < pos && fkq.done < fkq.pushed; fkq.done++) {
        const int i = (int)(fkq.done % FK_MAXQ);
        memcpy(fkq.q[i].dst, fkq.q[i].src, fkq.q[i].bytes);
        fkq.late++;
    }
}

static inline col_status fk_event_create(const col_backend *be, void **ev, col_err *err)
{
    *ev = NULL;
    fk_event *e = fk_is_owner(be) ? calloc(1, sizeof *e) : NULL;
    if (!e)
        return col_err_set(err, COL_EINTERNAL, "fake event_create: another backend or out of memory");
    fkq.events++;
    *ev = e;
    return COL_OK;
}

static inline void fk_event_free(const col_backend *be, void *ev)
{
    (void)be;
    if (ev)
        fkq.events--;
    free(ev);
}

static inline col_status fk_event_record(const col_backend *be, int q, void *ev, col_err *err)
{
    fk_event *e = ev;
    if (!fk_is_owner(be) || !e || (q != COL_QUEUE_COMPUTE && q != COL_QUEUE_COPY))
        return fk_refuse(err, "event_record", ev, NULL);
    e->copyq = q == COL_QUEUE_COPY;
    e->pos = e->copyq ? fkq.pushed : 0;
    e->t = fk_now();
    return COL_OK;
}

static inline col_status fk_queue_wait(const col_backend *be, int q, void *ev, col_err *err)
{
    const fk_event *e = ev;
    if (!fk_is_owner(be) || !e)
        return fk_refuse(err, "queue_wait", ev, NULL);
    if (q == COL_QUEUE_COMPUTE && e->copyq) /* the kernels after this need the copies before e */
        fk_flush(e->pos);
    return COL_OK;
}

static inline col_status fk_event_sync(const col_backend *be, void *ev, col_err *err)
{
    const fk_event *e = ev;
    if (!fk_is_owner(be) || !e)
        return fk_refuse(err, "event_sync", ev, NULL);
    if (e->copyq)
        fk_flush(e->pos);
    return fk.fail_sync ? col_err_set(err, COL_EINTERNAL, "fake device fault at event_sync") : COL_OK;
}

static inline col_status fk_event_elapsed(const col_backend *be, void *a, void *b, double *s, col_err *err)
{
    const fk_event *x = a, *y = b;
    if (!fk_is_owner(be) || !x || !y)
        return fk_refuse(err, "event_elapsed", a, b);
    *s = y->t > x->t ? y->t - x->t : 0;
    return COL_OK;
}

static inline col_status fk_copy_async(const col_backend *be, bool to_device, void *dst, const void *src,
                                       size_t bytes, col_err *err)
{
    const void *dev = to_device ? dst : src, *host = to_device ? src : dst;
    if (!fk_is_owner(be) || fk_find_block(dev, bytes) < 0 || fk_find_block(host, 1) >= 0)
        return fk_refuse(err, "copy_async", dst, src);
    if (fkq.pushed - fkq.done == FK_MAXQ)
        fk_flush(fkq.done + 1); /* a full queue: the oldest copy runs (a real queue would block) */
    const int i = (int)(fkq.pushed++ % FK_MAXQ);
    fkq.q[i].dst = dst;
    fkq.q[i].src = src;
    fkq.q[i].bytes = bytes;
    if (to_device)
        fk.to_dev++;
    else
        fk.to_host++;
    return COL_OK;
}

static inline col_status fk_host_pin(const col_backend *be, void *p, size_t bytes, col_err *err)
{
    if (!fk_is_owner(be) || fk_find_block(p, 1) >= 0 || !bytes)
        return fk_refuse(err, "host_pin", p, NULL);
    if (fkq.fail_pin)
        return col_err_set(err, COL_ENOMEM, "fake host_pin refused");
    fkq.pins++;
    return COL_OK;
}

static inline void fk_host_unpin(const col_backend *be, void *p)
{
    (void)be, (void)p;
    fkq.unpins++;
}

static inline col_status fk_sync_all(const col_backend *be, col_err *err)
{
    fk_flush(fkq.pushed);
    return fk_sync(be, err);
}

static const col_backend_mem fk_mem = {fk_alloc, fk_free, fk_to_device, fk_to_host, fk_sync, fk_copy};
static const col_backend_mem fk_mem_async = {fk_alloc, fk_free, fk_to_device, fk_to_host, fk_sync_all, fk_copy,
                                             fk_event_create, fk_event_free, fk_event_record, fk_queue_wait,
                                             fk_event_sync, fk_event_elapsed, fk_copy_async, fk_host_pin,
                                             fk_host_unpin};
static const col_backend_mem fk_mem_nocopy = {fk_alloc, fk_free, fk_to_device, fk_to_host, fk_sync, NULL};
static const col_backend_mem fk_mem_nosync = {fk_alloc, fk_free, fk_to_device, fk_to_host, NULL, fk_copy};

#endif
