/* mt_resident_internal.h - what mt_resident.c and mt_resident_io.c share:
 * the transfer queue of a compute tier. Not part of the API.
 *
 * A queue is a FIFO of chunk transfers worked through by one thread of its
 * own (started on the first transfer, joined by mt_xq_free): a fetch copies
 * a chunk's home (host memory, or its NVMe slots read straight into the
 * buffer) into its compute-tier copy, a store copies the copy back home.
 * Transfers run in the order they were pushed, one at a time, so a fetch
 * into space a store is still reading from runs after that store, and every
 * access to the pool's NVMe store during a run happens on that one thread.
 * In synchronous mode a push carries the transfer out on the calling thread.
 *
 * A failed transfer (EIO, a checksum) is kept: the next wait or drain
 * returns it with its message; later transfers still run, except stores of
 * a chunk whose fetch failed (its copy holds nothing worth keeping). */
#ifndef MT_RESIDENT_INTERNAL_H
#define MT_RESIDENT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "memtier.h"
#include "timer.h"

typedef struct {
    int chunk;
    bool store;   /* copy -> home (write-back, flush); else home -> copy (fetch) */
    bool poison;  /* a fetch in checking mode: NaN bytes over the host home once copied */
    void *shadow; /* checking mode, host home: a fetch saves the home's bytes here before poisoning it;
                     a restore (store with restore set) copies them back instead of the tier's copy */
    bool restore; /* a store that puts shadow back home: the chunk was clean, so its home must be what it
                     was before the fetch, whatever the tier's copy holds */
    void *buf;    /* the compute-tier copy */
    void *home;   /* host home; NULL for a chunk whose home is the NVMe tier */
    size_t bytes; /* bytes to move (an NVMe chunk: mt_chunk_io_bytes) */
} mt_xfer;

typedef struct mt_xq mt_xq;

/* dev: the backend whose memory the compute-tier copies are (a device plan's,
 * with a memory table), or NULL for host memory. With dev, a transfer of a
 * host-home chunk is dev->mem->to_device / to_host, and an NVMe-home chunk
 * goes through a host staging buffer of stage_bytes (MT_NVME_ALIGN-aligned,
 * at least every such chunk's mt_chunk_io_bytes): NVMe -> staging ->
 * device, and back the same way. When dev's table has the asynchronous
 * functions (col_mem_async), a push queues the copy on the device's copy
 * queue and returns: the NVMe half of a transfer is done on the calling
 * thread (the staging buffer, pinned if it can be, is reused only after its
 * last copy completed), checking-mode transfers (poison, shadow, restore)
 * are carried out at once, and each transfer has an event the waits use.
 * Otherwise a queue with dev is synchronous. */
col_status mt_xq_create(mt_pool *pool, int nchunks, const col_backend *dev, size_t stage_bytes, mt_xq **out,
                        col_err *err);
/* drains the queue and joins the thread */
void mt_xq_free(mt_xq *q);
/* switches between the transfer thread and the calling thread; drains first
 * (a queue with a device keeps its own mode: its device's copy queue, or synchronous) */
void mt_xq_set_async(mt_xq *q, bool on);
bool mt_xq_async(const mt_xq *q); /* the transfer thread or a device's copy queue */
/* a new run: the queue is empty; clears the kept error, failed chunks and per-run times */
void mt_xq_begin_run(mt_xq *q);
/* appends a transfer; *seq gets its number (> 0). Fails only for memory or a thread that cannot start. */
col_status mt_xq_push(mt_xq *q, const mt_xfer *x, uint64_t *seq, col_err *err);
/* Makes what runs after this point wait for transfer seq (0: nothing): with
 * a device's asynchronous transfers (col_mem_async) the kernels queued from
 * now on wait for it on the device and the host goes on; otherwise the host
 * waits (mt_xq_wait). The first failure kept so far, if any. */
col_status mt_xq_order(mt_xq *q, uint64_t seq, col_err *err);
/* Space on the compute tier was freed (an eviction, a slide): the next fetch
 * must not start before the kernels queued so far, which may still read it.
 * (A store always waits for them: they wrote its chunk.) */
void mt_xq_fence_next(mt_xq *q);
/* whether transfer seq (0: none) has finished, without blocking */
bool mt_xq_done(mt_xq *q, uint64_t seq);
/* blocks until transfer seq has finished (0: returns at once); then the
 * first failure kept so far, if any */
col_status mt_xq_wait(mt_xq *q, uint64_t seq, col_err *err);
/* blocks until every transfer pushed has finished; the first failure kept */
col_status mt_xq_drain(mt_xq *q, col_err *err);
/* after a drain: whether chunk's fetch failed in this run */
bool mt_xq_chunk_failed(mt_xq *q, int chunk);
/* this run's seconds: the calling thread blocked in waits and drains (in
 * synchronous mode: carrying out transfers), and transfers busy per link */
void mt_xq_times(mt_xq *q, double *wait_s, double busy_s[MT_NLINKS]);


#endif
