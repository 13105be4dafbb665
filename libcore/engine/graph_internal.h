/* graph_internal.h - what op modules share with the graph core. Not installed. */
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

/* Backward builder: given node n and the gradient dout of its output, adds
 * the gradients of n's sources with col_accum_grad(). */
typedef void (*col_backward_fn)(col_graph *g, col_node *n, col_node *dout);

/* Per-op backward builders, defined in the op modules (NULL: no gradient). */
col_backward_fn col_backward_of(col_op op);

/* Shared by builders: true if any source needs a gradient. */
bool col_any_needs_grad(int nsrc, col_node *const *src);
/* Shape of the broadcast of a and b (numpy rules); false if incompatible. */
bool col_broadcast_shape(const col_tensor *a, const col_tensor *b, int *ndim, int64_t *shape);

/* backward builders of the op modules */
void col_bwd_view(col_graph *g, col_node *n, col_node *d);
void col_bwd_copy(col_graph *g, col_node *n, col_node *d);
void col_bwd_cast(col_graph *g, col_node *n, col_node *d);
void col_bwd_binary(col_graph *g, col_node *n, col_node *d);
void col_bwd_scale(col_graph *g, col_node *n, col_node *d);
void col_bwd_concat(col_graph *g, col_node *n, col_node *d);
void col_bwd_matmul(col_graph *g, col_node *n, col_node *d);
void col_bwd_unary(col_graph *g, col_node *n, col_node *d);   /* exp..silu, swiglu */
void col_bwd_reduce(col_graph *g, col_node *n, col_node *d);  /* sum, mean, max */
void col_bwd_softmax(col_graph *g, col_node *n, col_node *d); /* softmax, log_softmax */
void col_bwd_norm(col_graph *g, col_node *n, col_node *d);    /* layernorm, rmsnorm */
void col_bwd_embedding(col_graph *g, col_node *n, col_node *d);
void col_bwd_rope(col_graph *g, col_node *n, col_node *d);
void col_bwd_attention(col_graph *g, col_node *n, col_node *d);
/* per-thread workspace of the host attention kernels (backward: attention_bwd), in
 * tiles of COL_ATTENTION_TILE queries x keys, head dims padded to COL_ATTENTION_PAD */
enum { COL_ATTENTION_TILE = 64, COL_ATTENTION_PAD = 16 };
size_t col_attention_scratch_per_thread(int64_t head_dim, bool backward);
void col_bwd_cross_entropy(col_graph *g, col_node *n, col_node *d);
void col_bwd_dropout(col_graph *g, col_node *n, col_node *d);

#endif
