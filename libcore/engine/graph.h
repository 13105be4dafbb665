/* graph.h - define-then-run compute graph.
 *
 * A graph is a list of nodes in creation order. Every node is created after
 * its sources, so creation order is a valid schedule; autodiff appends the
 * backward nodes, and activation checkpointing inserts recomputation clones
 * just before the backward node that needs them.
 *
 * Builders have sticky errors: when a builder fails it returns NULL and keeps
 * the first error in the graph; builders given a NULL source return NULL at
 * once. Build the whole model, then check col_graph_status() once.
 *
 * Storage: views share their base's storage; leaves (parameters, inputs) are
 * bound to caller-owned memory (memtier for parameters) or given arena space;
 * every other node gets arena space planned from liveness (plan.c). The
 * schedule, liveness and arena layout belong to each plan, not to the graph:
 * a graph may have several plans (plan.h). Nodes keep only the addresses of
 * the plan that was created or ran last (t.data), which the kernels read.
 */
#ifndef COL_GRAPH_H
#define COL_GRAPH_H

#include "ops.h"
#include "tensor.h"

#define COL_MAX_SRC 6

enum {
    COL_NODE_PARAM = 1u << 0,       /* trainable leaf; its gradient is accumulated into grad_data */
    COL_NODE_INPUT = 1u << 1,       /* data leaf */
    COL_NODE_NEEDS_GRAD = 1u << 2,  /* a gradient flows to this node */
    COL_NODE_OUTPUT = 1u << 3,      /* kept alive to the end of the run */
    COL_NODE_VIEW = 1u << 4,        /* shares storage with view_base */
    COL_NODE_RECOMPUTE = 1u << 5,   /* clone made by activation checkpointing */
    COL_NODE_BACKWARD = 1u << 6,    /* created by autodiff */
    COL_NODE_SEGMENT_OUT = 1u << 7, /* a checkpoint segment's output: kept, not recomputed */
};

typedef struct {
    int64_t i[8];
    float f[8];
} col_op_params;

typedef struct col_node {
    int id;                         /* position in creation order */
    col_op op;
    int nsrc;
    struct col_node *src[COL_MAX_SRC];
    col_tensor t;                   /* shape, dtype, strides; t.data: the address in the plan that was
                                       created or ran last (plan.h), which kernels read */
    col_op_params p;                /* op-specific, documented in ops.h */
    uint32_t flags;
    struct col_node *view_base;     /* storage owner (never itself a view); NULL if not a view */
    int64_t view_offset;            /* element offset into view_base's storage */
    size_t extra_bytes;             /* saved-for-backward bytes stored after the output */
    size_t scratch_bytes;           /* kernel workspace for one run of this node */
    int segment;                    /* checkpoint segment id (0: not checkpointed) */
    char name[48];
    col_extern_fn ext_fn;           /* EXTERN: the caller's function and its user pointer (ops.h) */
    void *ext_user;
    col_extern_bwd_fn ext_bwd;      /* EXTERN: the caller's gradient builder, or NULL (no gradient; ops.h) */

    /* autodiff */
    struct col_node *grad;          /* gradient accumulated so far (during backward build) */
    struct col_node *recomputed;    /* clone for checkpointed recomputation */

    /* storage */
    void *bound;                    /* caller memory for leaves (and ACCUMULATE targets) */
    void *grad_data;                /* PARAM: caller memory the gradient is added into (the param's dtype) */
} col_node;

typedef struct col_graph col_graph;

col_graph *col_graph_new(void);
void col_graph_free(col_graph *g);

/* First error recorded by a builder, or COL_OK. */
col_status col_graph_status(const col_graph *g);
const col_err *col_graph_error(const col_graph *g);
/* Records an error (keeps the first one) and returns NULL for builders. */
col_node *col_graph_fail(col_graph *g, col_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int col_graph_count(const col_graph *g);
col_node *col_graph_node(const col_graph *g, int i);

/* ---- leaves ---- */
col_node *col_param(col_graph *g, const char *name, col_dtype dt, int ndim, const int64_t *shape);
col_node *col_input(col_graph *g, const char *name, col_dtype dt, int ndim, const int64_t *shape);
/* Binds caller memory (contiguous, shape of the node) to a leaf. */
col_status col_bind(col_node *leaf, void *data, col_err *err);
/* Binds the buffer a PARAM's gradient is added into: same shape, and the
 * parameter's dtype (a 16-bit parameter's gradient is computed in f32 and
 * rounded as it is added in). */
col_status col_bind_grad(col_node *param, void *grad, col_err *err);
void col_mark_output(col_node *n);
/* Pointer to a node's data (arena or bound memory) in the plan of its graph
 * that was created or ran last; NULL before any. When a graph has several
 * plans, col_plan_data(plan, n) names the plan. */
void *col_data(const col_node *n);

/* ---- generic node creation (used by op builders) ---- */
/* Makes a contiguous node of the given dtype/shape with sources. */
col_node *col_new_node(col_graph *g, col_op op, col_dtype dt, int ndim, const int64_t *shape,
                       int nsrc, col_node *const *src);
/* Checks a condition inside a builder; on failure records the error. */
bool col_check(col_graph *g, bool cond, col_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- randomness that changes between runs ---- */
/* Random ops (dropout) mix this counter into their seed at run time, so a
 * training loop draws fresh masks each step without rebuilding the graph:
 * set it to the step number before each run. With the counter at 0 a
 * dropout uses its seed unchanged. The node is created on first use. */
col_node *col_graph_rng_counter(col_graph *g);
void col_graph_set_rng_counter(col_graph *g, int64_t value);
/* Each dropout of a graph draws from its own range of Philox stream positions,
 * taken in creation order (the next one starts at this offset). A graph
 * holding a part of a model (a pipeline stage) starts at the offset the
 * whole model's graph has there, so that its masks are that graph's. */
uint64_t col_graph_dropout_offset(const col_graph *g);
void col_graph_set_dropout_offset(col_graph *g, uint64_t offset);

/* ---- checkpointing ---- */
/* Nodes created between begin and end are freed after the forward pass and
 * recomputed during backward. Segments must not nest. */
void col_checkpoint_begin(col_graph *g);
void col_checkpoint_end(col_graph *g);

/* ---- autodiff ---- */
/* Appends the backward graph of scalar `loss` (d loss = 1). Every PARAM that
 * loss depends on gets an ACCUMULATE node adding its gradient into grad_data.
 * Inputs with COL_NODE_NEEDS_GRAD get n->grad (marked as outputs). */
col_status col_graph_backward(col_graph *g, col_node *loss, col_err *err);
/* The same with d loss = seed (an f32 node of the loss's shape, e.g. an input
 * the caller sets before each run: a loss scale), instead of 1. With a seed
 * the "loss" may be any f32 node: the seed is then the gradient of whatever
 * follows it (a pipeline stage's output, seeded with what the next stage
 * sends back). */
col_status col_graph_backward_seeded(col_graph *g, col_node *loss, col_node *seed, col_err *err);
/* Used by backward builders: adds `d` to the gradient of `x`. */
void col_accum_grad(col_graph *g, col_node *x, col_node *d);
/* Reduces a gradient of a broadcast result back to `like`'s shape. */
col_node *col_reduce_to(col_graph *g, col_node *d, const col_tensor *like);

/* Copies the node's tensor description with data resolved (run time). */
col_tensor col_node_tensor(const col_node *n);

#endif
