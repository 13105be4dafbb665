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

int col_plan_length(const col_plan *p);
col_node *col_plan_node(const col_plan *p, int i);
size_t col_plan_arena_bytes(const col_plan *p);
/* Sum of the storage of all nodes in the arena, as if none were shared. */
size_t col_plan_unshared_bytes(const col_plan *p);
size_t col_plan_scratch_bytes(const col_plan *p);

#endif
