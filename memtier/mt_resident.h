/* mt_resident.h - the compute tier of one plan of a graph: a budgeted arena
 * holding copies of the pool's chunks, filled and emptied before each op as
 * a placement plan (mt_plan.h) says, with every parameter and gradient the op
 * touches rebound to its copy (col_plan_run_hooked). The values an op sees
 * are bit for bit the home copies', so a run gives exactly the results of a
 * plain run, whatever the budget.
 *
 * What counts as a chunk use: an op reads the chunks of the parameter leaves
 * among its sources (directly or through a view); a gradient ACCUMULATE op
 * reads and writes the chunk of its gradient buffer. Leaves bound outside the
 * pool (inputs, caches) are left alone.
 *
 * Homes: a chunk's home is the host (its memory) or the NVMe tier (its
 * slots; the graph is bound to the chunk's placeholder address, mt_addr,
 * which is how its uses are found). An NVMe chunk is read straight into its
 * compute-tier copy and written back from it; its space in the arena is
 * mt_chunk_io_bytes, MT_NVME_ALIGN-aligned.
 *
 * The budget covers the chunk copies and the graph's activation arena and
 * scratch, which stay on the compute tier for the whole run.
 *
 * Transfers can be asynchronous (mt_resident_set_async): one transfer thread
 * per mt_resident works through a FIFO of fetches and write-backs (all NVMe
 * I/O of a run happens on it, in order), while the calling thread runs the
 * ops; a WAIT action blocks until the chunk has arrived. Without CUDA the
 * default is synchronous: the compute tier is host memory, a copy is a
 * memcpy, and a transfer thread would take a core from the compute threads
 * (measured slower on a 2-core machine; a GPU's copy engine is what makes
 * the overlap pay). The plan prefetches (MT_PREFETCH_AUTO):
 * the first run is timed op by op and link by link, and the plan is made
 * again from those figures for the runs after it.
 *
 * Every step starts and ends with nothing resident (the plan's tail writes
 * back what is dirty): the optimizer then updates the home copies, and the
 * next step fetches them again. Without CUDA the compute tier is host memory
 * too, so the copies are memcpy's; the links' byte counts are what a GPU
 * would move. An mt_resident is used from one thread at a time.
 *
 * On a device plan (col_plan_create_on with a backend that has a memory
 * table, col_plan_backend(plan)->mem) the compute tier is the device's
 * memory: the chunk arena comes from mem->alloc (and goes back through
 * mem->free when its last user is freed: free the compute tiers before the
 * backend), a host-home chunk is fetched with mem->to_device and written
 * back with mem->to_host, and an NVMe-home chunk goes NVMe -> a host staging
 * buffer (MT_NVME_ALIGN-aligned, the largest chunk's mt_chunk_io_bytes) ->
 * device, and back the same way. Compaction slides copies with mem->copy;
 * a table without one makes a run that needs compaction fail (COL_EINVAL,
 * saying so). Homes stay in host memory or on NVMe, so the optimizer
 * works on them as before.
 *
 * A device whose table has the asynchronous functions (col_mem_async: the
 * CUDA backend) gets asynchronous transfers from the start (stats.async;
 * mt_resident_set_async does not change it): fetches and write-backs go on
 * the device's copy queue in plan order, and the calling thread does not
 * wait for them. An op's kernels wait on the device for the transfers of
 * the chunks it uses (an event each); a write-back waits on the device for
 * the kernels queued before it (they wrote the chunk), and so does the
 * first fetch after an eviction or a slide (they may still read its space).
 * The host waits only where it needs the data: the run's end (the
 * optimizer reads the homes next), a compaction, the staging buffer of
 * NVMe chunks before it is filled again, and checking-mode transfers. The
 * traced run's op times are then the device's (events around each op's
 * kernels), not the host's, which only queues them. Page-lock the homes
 * (mt_pin_host) or the copies cannot overlap the kernels.
 */
#ifndef MT_RESIDENT_H
#define MT_RESIDENT_H

#include "backend.h"
#include "memtier.h"
#include "mt_plan.h"
#include "plan.h"

typedef struct mt_resident mt_resident;

typedef struct {
    /* moved since creation, per link: host->compute and compute->host count every fetch and write-back (the
     * compute tier's links); nvme->host and host->nvme the NVMe reads and writes of NVMe-home chunks */
    uint64_t bytes[MT_NLINKS];
    int fetches, writebacks, drops;
    uint64_t compacted;         /* bytes slid together to make room (free space in pieces) */
    size_t budget, min_budget;  /* the compute tier's bytes; the least any plan of this graph needs */
    size_t peak;                /* the most compute-tier bytes held at once, activations included */
    size_t activations;         /* the graph's activation arena and scratch (on the tier throughout) */
    size_t arena;               /* the chunk arena: budget - activations, or, shared, the largest of the sharers' */
    bool shared;                /* the arena is shared with another mt_resident */
    bool async;                 /* transfers on the transfer thread (else on the calling thread) */
    bool traced;                /* a run was timed and the plan made again from its figures */
    long runs;                  /* runs that succeeded */
    /* the last run: its wall time, the time the calling thread waited for transfers (synchronous: the time it
     * spent doing them), and the time each link was busy moving chunks */
    double run_s, wait_s, busy_s[MT_NLINKS];
    double total_run_s, total_wait_s, total_busy_s[MT_NLINKS]; /* the same summed over every run */
} mt_resident_stats;

/* Plans the compute tier for running plan (whose parameters and gradient
 * buffers are bound into pool's chunks: host memory, or the placeholder
 * addresses of NVMe chunks) within budget bytes. A budget below the
 * graph's smallest is COL_ENOMEM naming that smallest budget, with
 * COL_SETTING_COMPUTE_BUDGET marked. Op times
 * start as estimates from the ops' sizes, bandwidths as guesses. */
col_status mt_resident_create(mt_pool *pool, col_plan *plan, size_t budget, mt_resident **out, col_err *err);
/* Joins the transfer thread; frees the arena when no other mt_resident shares it. */
void mt_resident_free(mt_resident *r);
/* One run of the plan through the compute tier; step counts runs from 0.
 * The first run that succeeds is the traced one: afterwards the plan is
 * made again from its measured op times and link bandwidths. A failed
 * transfer (an NVMe I/O or checksum error) fails the run with its message;
 * the run still ends with nothing resident and the graph bound home. */
col_status mt_resident_run(mt_resident *r, const col_backend *be, long step, col_err *err);
void mt_resident_get_stats(const mt_resident *r, mt_resident_stats *s);
/* The current plan's summary (after the traced run: the plan from measured figures). */
void mt_resident_get_plan_summary(const mt_resident *r, mt_plan_summary *s);
/* Transfers on the transfer thread (on) or on the calling thread, one after
 * the other (off, the default). Between runs. A compute tier on a device
 * stays synchronous (stats.async tells). */
void mt_resident_set_async(mt_resident *r, bool on);
/* Checking mode for tests: while a host-home chunk is on the compute tier its
 * home copy is overwritten with NaNs, so an op that read a parameter or
 * gradient at home instead of on the tier would change the results. Its
 * bytes are kept aside first: at eviction a dirty chunk's copy is written
 * home, and a clean one gets those saved bytes back, not the tier's copy, so
 * a write on the tier that the tier lost track of (a lost write-back) changes
 * the results too. NVMe-home chunks have no host copy to poison (their
 * placeholder faults when touched). */
void mt_resident_poison_home(mt_resident *r, bool on);
/* Fault injection for tests: ops that write a chunk (gradient accumulation)
 * no longer mark it dirty, as a bug in the tier's bookkeeping would; the
 * checking mode must then fail to reproduce the results. */
void mt_resident_forget_dirty(mt_resident *r, bool on);
/* Makes r use with's chunk arena, grown to r's need if that is larger
 * (need = budget - activations), so several plans of one model (training,
 * evaluation, decoding) hold one arena between them instead of one each.
 * They must never run at the same time; since every run ends with nothing
 * resident, that is all they need. r leaves any arena it shared before.
 * Freeing them in any order is fine. COL_EINVAL for NULL, or for tiers on
 * different memories (a device and the host, or two devices). */
col_status mt_resident_share_arena(mt_resident *r, mt_resident *with, col_err *err);

#endif
