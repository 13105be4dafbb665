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

col_status col_plan_create(col_graph *g, col_plan **out, col_err *err);
void col_plan_free(col_plan *p);
col_status col_plan_run(col_plan *p, const col_backend *be, col_err *err);

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
