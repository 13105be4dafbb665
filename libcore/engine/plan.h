/* plan.h - turn a graph into a schedule and an activation arena, then run it.
 *
 * The schedule holds every node a plan's outputs depend on, each after its
 * sources: for col_plan_create the nodes marked COL_NODE_OUTPUT (with the
 * gradient ACCUMULATE nodes autodiff adds), for col_plan_create_for the
 * nodes it is given. Every node that owns storage gets a range of one arena,
 * chosen from the liveness of the schedule (greedy by size), so running a
 * planned graph allocates nothing.
 *
 * A plan's state lives in the plan: its schedule, liveness and arena
 * offsets are arrays indexed by node id (the ids the graph had when it was
 * planned), never written into the graph. So a graph may have several live
 * plans (training, evaluation, ...), and nodes added to the graph after a
 * plan was made are simply not in that plan. What the nodes do hold is the
 * run-time binding: kernels read n->t.data and n->src[i]->t.data, so each
 * run first points every node of its schedule (arena nodes, views, bound
 * leaves, gradient targets) at its own addresses. n->t.data (col_data) are
 * therefore the addresses of the plan that was created or ran last; use
 * col_plan_data for a given plan's. Plans of one graph may run one after
 * the other in any order, but two plans of one graph must never run at the
 * same time (from two threads): they would bind the same nodes.
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
 * before the backend); arena nodes' data (col_plan_data, col_data) are then
 * device addresses: fill and read them with col_plan_upload /
 * col_plan_download, never memcpy. Bind parameters, gradient buffers and any bound input to
 * the backend's memory too. The graph's run counter (col_graph_rng_counter,
 * host memory) gets a slot of device memory that each run fills with the
 * counter's value. A device plan runs only on the backend object it was made
 * for (another one: COL_EINVAL); its runs return once every kernel has
 * completed (be->mem->sync), a kernel's asynchronous error becoming the run's
 * status. be NULL, or a backend without a table: the same as col_plan_create. */
col_status col_plan_create_on(col_graph *g, const col_backend *be, col_plan **out, col_err *err);
/* A plan for a chosen set of outputs (n >= 1 nodes of g): it schedules only
 * what they need, whatever the graph marks as outputs, and keeps exactly
 * these alive to the end of a run. A gradient ACCUMULATE node is scheduled
 * only when given, so a plan for a training graph's loss computes the
 * forward pass and nothing of its backward. be as for col_plan_create_on. */
col_status col_plan_create_for(col_graph *g, const col_backend *be, col_node *const *outputs, int n, col_plan **out,
                               col_err *err);
void col_plan_free(col_plan *p);
/* The arena and kernel scratch bytes col_plan_create_for would give a plan of
 * these outputs, found by the same schedule and liveness without allocating
 * either (so a plan too large for this machine can still be sized). */
col_status col_plan_measure_for(col_graph *g, col_node *const *outputs, int n, size_t *arena, size_t *scratch,
                                col_err *err);
/* Makes p use with's activation arena and kernel scratch (p's own memory is
 * freed), grown to p's needs when those are larger - remade, so whatever the
 * plans' arena nodes held is lost - so that plans that never run at the same
 * time (a training graph's plan and its evaluation plan, the plans of
 * another graph of the same model) hold one arena between them instead of
 * one each. They may be plans of different graphs, but of one memory (both
 * host plans, or device plans of one backend; else COL_EINVAL). Afterwards a
 * plan's arena nodes keep their values only until another sharer runs, and
 * inputs must be uploaded after the last share. A failure changes nothing.
 * The memory goes when its last plan is freed. */
col_status col_plan_share_memory(col_plan *p, col_plan *with, col_err *err);
/* The bytes of arena and scratch memory p holds: its own needs
 * (col_plan_arena_bytes + col_plan_scratch_bytes), or, shared, the largest
 * of its sharers'. */
size_t col_plan_memory_bytes(const col_plan *p);
/* Dropout on (the default) or off for this plan's later runs: off, every
 * dropout kernel writes its input unchanged (col_exec.dropout_off), so a
 * plan of a training graph evaluates the model as one built without dropout,
 * bit for bit. */
void col_plan_set_dropout(col_plan *p, bool on);
/* Node n's address in plan p (arena, bound memory or view; device memory for
 * a device plan); NULL when n is not in p's schedule. */
void *col_plan_data(const col_plan *p, const col_node *n);
col_status col_plan_run(col_plan *p, const col_backend *be, col_err *err);

/* Copy bytes from host memory src into node n's data (upload), or from n's
 * data into host memory dst (download): through the plan's backend for a
 * device plan, memcpy for a host plan, at the node's address in this plan
 * (col_plan_data), whichever plan of the graph ran last. n must be a node of
 * this plan's schedule with data (a leaf bound or given arena space, an arena
 * node, a contiguous view of one) and bytes at most the node's size (numel *
 * dtype size; bytes 0 copies nothing). Uploading into a bound leaf writes the
 * caller's bound memory. Downloads after a run of this plan see its results
 * (until another plan of the graph runs: plans may share bound memory); nodes
 * that are not outputs of the plan may have been overwritten. */
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
