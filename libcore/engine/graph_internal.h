/* graph_internal.h - what the engine's graph files share. Not installed.
 *
 * The layers inside the engine, each calling only the ones below it:
 *   autodiff.c        col_graph_backward: walks the graph, dispatches through col_backward_of,
 *                     checkpointing's recomputation clones
 *   *_bwd.c           backward builders, one file per op family (ops_basic_bwd.c ... views_bwd.c)
 *   grad.c            gradient accumulation (col_accum_grad, col_reduce_to)
 *   ops_*.c, views.c  forward builders (ops_norm.c uses ops_basic.c; ops_image.c uses ops_norm.c and
 *                     ops_basic.c; every family uses views.c)
 *   graph.c           nodes, leaves, builder checks
 *   ops.c             op names, the elementwise op set
 * tools/dep_cycles.py (tests/test_dep_cycles.sh) keeps the file-level calls free of cycles. */
#ifndef COL_GRAPH_INTERNAL_H
#define COL_GRAPH_INTERNAL_H

#include "graph.h"

struct col_graph {
    col_node **nodes;
    int n, cap;
    col_err err;                /* first builder error */
    int cur_segment;            /* checkpoint segment being recorded (0: none) */
    int next_segment;
    bool in_backward;           /* nodes created now are backward nodes */
    uint64_t dropout_streams;   /* next Philox stream offset handed to a dropout */
    col_node *rng_counter;      /* i64 [1] leaf bound to rng_counter_value (random ops read it) */
    int64_t rng_counter_value;
};

/* ---- shared by builders ---- */

/* True if any source needs a gradient (graph.c). */
bool col_any_needs_grad(int nsrc, col_node *const *src);
/* Shape of the broadcast of a and b (numpy rules); false if incompatible (ops_basic.c). */
bool col_broadcast_shape(const col_tensor *a, const col_tensor *b, int *ndim, int64_t *shape);

/* What a VIEW node is (p.i[0], views.c); its backward (views_bwd.c) depends on it. */
enum { COL_VIEW_RESHAPE = 1, COL_VIEW_PERMUTE, COL_VIEW_SLICE, COL_VIEW_EXPAND, COL_VIEW_GENERIC };

/* A ROPE node of x [B,H,T,D] and positions pos with parameters p as ops.h
 * describes them (p->i[1] = 1: the inverse rotation, the backward); x is
 * made unit-stride along D first (ops_nn.c). */
col_node *col_rope_node(col_graph *g, col_node *x, col_node *pos, const col_op_params *p);

/* The per-row positions of a batch of B sequences over a cache of R rows
 * (views.c): *start must be an i64 [B] node, *rows NULL (row b, needs B <= R)
 * or an i64 [B] node; both are made contiguous (the kernels index them).
 * Records the error and returns false otherwise. */
bool col_rows_operands(col_graph *g, const char *op, int64_t B, int64_t R, col_node **start, col_node **rows);

/* q, k, v or dO [B,H,T,D] as the attention kernels read them: unit stride
 * along D, copied only when not (ops_attention.c). */
col_node *col_attention_operand(col_graph *g, col_node *x);
/* per-thread workspace of the host attention kernels (backward: attention_bwd), in
 * tiles of COL_ATTENTION_TILE queries x keys, head dims padded to COL_ATTENTION_PAD */
enum { COL_ATTENTION_TILE = 64, COL_ATTENTION_PAD = 16 };
size_t col_attention_scratch_per_thread(int64_t head_dim, bool backward);

/* A CONV2D_BWD_DATA (sources dy, w) or CONV2D_BWD_FILTER (sources x, dy) node of
 * the CONV2D node fwd, with its params and scratch (ops_image.c). */
col_node *col_conv2d_bwd_node(col_graph *g, col_op op, const col_node *fwd, col_node *a, col_node *b);

/* ---- backward ---- */

/* Backward builder: given node n and the gradient dout of its output, adds
 * the gradients of n's sources with col_accum_grad() (grad.c). */
typedef void (*col_backward_fn)(col_graph *g, col_node *n, col_node *dout);

/* The backward builder of an op (autodiff.c); NULL: no gradient. */
col_backward_fn col_backward_of(col_op op);

/* views_bwd.c */
void col_bwd_view(col_graph *g, col_node *n, col_node *d);
void col_bwd_copy(col_graph *g, col_node *n, col_node *d);
void col_bwd_cast(col_graph *g, col_node *n, col_node *d);
void col_bwd_concat(col_graph *g, col_node *n, col_node *d);
/* ops_basic_bwd.c */
void col_bwd_binary(col_graph *g, col_node *n, col_node *d);
void col_bwd_scale(col_graph *g, col_node *n, col_node *d);
void col_bwd_matmul(col_graph *g, col_node *n, col_node *d);
/* ops_unary_bwd.c */
void col_bwd_unary(col_graph *g, col_node *n, col_node *d);   /* exp..silu, swiglu */
void col_bwd_dropout(col_graph *g, col_node *n, col_node *d);
/* ops_reduce_bwd.c */
void col_bwd_reduce(col_graph *g, col_node *n, col_node *d);  /* sum, mean, max */
/* ops_norm_bwd.c */
void col_bwd_softmax(col_graph *g, col_node *n, col_node *d); /* softmax, log_softmax */
void col_bwd_norm(col_graph *g, col_node *n, col_node *d);    /* layernorm, rmsnorm */
/* ops_nn_bwd.c */
void col_bwd_embedding(col_graph *g, col_node *n, col_node *d);
void col_bwd_rope(col_graph *g, col_node *n, col_node *d);
void col_bwd_cross_entropy(col_graph *g, col_node *n, col_node *d);
void col_bwd_token_logprob(col_graph *g, col_node *n, col_node *d);
/* ops_attention_bwd.c */
void col_bwd_attention(col_graph *g, col_node *n, col_node *d);
/* ops_image_bwd.c */
void col_bwd_conv2d(col_graph *g, col_node *n, col_node *d);
void col_bwd_upsample(col_graph *g, col_node *n, col_node *d);

#endif
