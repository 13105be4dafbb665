/* plan.h - turn a graph into a schedule and an activation arena, then run it.
 *
 * The schedule holds every node the outputs (nodes marked COL_NODE_OUTPUT,
 * and the gradient ACCUMULATE nodes) depend on, each after its sources.
 * Every node that owns storage gets a range of one arena, chosen from the
 * liveness of the schedule (greedy by size), so running a planned graph
 * allocates nothing. Plans keep their addresses in the graph's nodes, so a graph
 * has one live plan: planning it again makes the older plan refuse to run.
 */
#ifndef COL_PLAN_H
#define COL_PLAN_H

#include "backend.h"
#include "graph.h"

typedef struct col_plan col_plan;

/* A host plan: arena and scratch in host memory (aligned_alloc). It runs on
 * any backend without a memory table (be->mem NULL, e.g. the CPU backend) and
 * refuses one with a table. */
col_status col_plan_create(col_graph *g, col_plan **out, col_err *err);

/* A plan for backend be. When be has a memory table (be->mem, e.g. the CUDA
 * backend) it is a device plan: arena and scratch come from be->mem->alloc
 * (and go back through be->mem->free in col_plan_free, so free the plan
 * before the backend); arena nodes' data (col_data) are then device
 * addresses: fill and read them with col_plan_upload / col_plan_download,
 * never memcpy. Bind parameters, gradient buffers and any bound input to
 * the backend's memory too. The graph's run counter (col_graph_rng_counter,
 * host memory) gets a slot of device memory that each run fills with the
 * counter's value. A device plan runs only on the backend object it was made
 * for (another one: COL_EINVAL); its runs return once every kernel has
 * completed (be->mem->sync), a kernel's asynchronous error becoming the run's
 * status. be NULL, or a backend without a table: the same as col_plan_create. */
col_status col_plan_create_on(col_graph *g, const col_backend *be, col_plan **out, col_err *err);
void col_plan_free(col_plan *p);
col_status col_plan_run(col_plan *p, const col_backend *be, col_err *err);

/* Copy bytes from host memory src into node n's data (upload), or from n's
 * data into host memory dst (download): through the plan's backend for a
 * device plan, memcpy for a host plan. n must be a node of this plan's
 * schedule with data (a leaf bound or given arena space, an arena node, a
 * contiguous view of one), the plan the graph's newest, and bytes at most the
 * node's size (numel * dtype size; bytes 0 copies nothing). Uploading into
 * a bound leaf writes the caller's bound memory. Downloads after a run see
 * its results; nodes not marked as outputs may have been overwritten. */
col_status col_plan_upload(col_plan *p, col_node *n, const void *src, size_t bytes, col_err *err);
col_status col_plan_download(col_plan *p, col_node *n, void *dst, size_t bytes, col_err *err);
/* The backend a device plan was made for; NULL for a host plan. */
const col_backend *col_plan_backend(const col_plan *p);

/* A run that calls hook before each computing op (schedule index i, node n).
 * The hook may rebind leaves (col_bind) and gradient buffers (col_bind_grad)
 * - e.g. to the memory tier's current copy of a parameter chunk - and the op
 * then reads and accumulates at the new addresses (views of a rebound leaf
 * follow it). Whatever the hook does must leave the values the op sees
 * unchanged for the results to stay those of col_plan_run. A non-OK return
 * stops the run with that status and the hook's message. */
typedef col_status (*col_plan_hook)(void *user, const col_plan *p, int i, col_node *n, col_err *err);
col_status col_plan_run_hooked(col_plan *p, const col_backend *be, col_plan_hook hook, void *user, col_err *err);

int col_plan_length(const col_plan *p);
col_node *col_plan_node(const col_plan *p, int i);
size_t col_plan_arena_bytes(const col_plan *p);
/* Sum of the storage of all nodes in the arena, as if none were shared. */
size_t col_plan_unshared_bytes(const col_plan *p);
size_t col_plan_scratch_bytes(const col_plan *p);

#endif
