/* mt_resident.h - the compute tier of one planned graph: a budgeted arena
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
 * The budget covers the chunk copies and the graph's activation arena and
 * scratch, which stay on the compute tier for the whole run.
 *
 * Every step starts and ends with nothing resident (the plan's tail writes
 * back what is dirty): the optimizer then updates the home copies, and the
 * next step fetches them again. Without CUDA the compute tier is host memory
 * too, so the copies are memcpy's; the links' byte counts are what a GPU
 * would move. Transfers are synchronous for now (no prefetch overlap).
 */
#ifndef MT_RESIDENT_H
#define MT_RESIDENT_H

#include "backend.h"
#include "memtier.h"
#include "plan.h"

typedef struct mt_resident mt_resident;

typedef struct {
    uint64_t bytes[MT_NLINKS]; /* moved since creation, per link */
    int fetches, writebacks, drops;
    uint64_t compacted;         /* bytes slid together to make room (free space in pieces) */
    size_t budget, min_budget;  /* the compute tier's bytes; the least any plan of this graph needs */
    size_t peak;                /* the most compute-tier bytes held at once, activations included */
} mt_resident_stats;

/* Plans the compute tier for running plan (whose parameters and gradient
 * buffers are bound into pool's chunks) within budget bytes. A budget below
 * the graph's smallest is COL_ENOMEM naming that smallest budget. */
col_status mt_resident_create(mt_pool *pool, col_plan *plan, size_t budget, mt_resident **out, col_err *err);
void mt_resident_free(mt_resident *r);
/* One run of the plan through the compute tier; step counts runs from 0. */
col_status mt_resident_run(mt_resident *r, const col_backend *be, long step, col_err *err);
void mt_resident_get_stats(const mt_resident *r, mt_resident_stats *s);
/* Checking mode for tests: while a chunk is on the compute tier its home
 * copy is overwritten with NaNs (and every eviction writes back), so an op
 * that read a parameter or gradient at home instead of on the tier would
 * change the results. */
void mt_resident_poison_home(mt_resident *r, bool on);

#endif
