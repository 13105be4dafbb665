/* ops_unary.c - elementwise activations (exp, log, tanh, sigmoid, relu, gelu,
 * gelu_tanh, silu, swiglu) and dropout; their gradients are in
 * ops_unary_bwd.c.
 *
 * All take f32 and give a contiguous f32 result of the input's shape; inputs
 * may be strided views. */
#include "graph_internal.h"

static bool needs_f32(col_graph *g, col_op op, const col_node *x)
{
    return col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "%s: needs an f32 input, got %s", col_op_name(op),
                     col_dtype_name(x->t.dtype));
}

static col_node *unary(col_graph *g, col_op op, col_node *x)
{
    if (!x || !needs_f32(g, op, x))
        return NULL;
    return col_new_node(g, op, COL_F32, x->t.ndim, x->t.shape, 1, &x);
}

col_node *col_exp(col_graph *g, col_node *x) { return unary(g, COL_OP_EXP, x); }
col_node *col_log(col_graph *g, col_node *x) { return unary(g, COL_OP_LOG, x); }
col_node *col_tanh(col_graph *g, col_node *x) { return unary(g, COL_OP_TANH, x); }
col_node *col_sigmoid(col_graph *g, col_node *x) { return unary(g, COL_OP_SIGMOID, x); }
col_node *col_relu(col_graph *g, col_node *x) { return unary(g, COL_OP_RELU, x); }
col_node *col_gelu(col_graph *g, col_node *x) { return unary(g, COL_OP_GELU_ERF, x); }
col_node *col_gelu_tanh(col_graph *g, col_node *x) { return unary(g, COL_OP_GELU_TANH, x); }
col_node *col_silu(col_graph *g, col_node *x) { return unary(g, COL_OP_SILU, x); }

/* silu(gate) * up; gate and up: same shape (no broadcasting) */
col_node *col_swiglu(col_graph *g, col_node *gate, col_node *up)
{
    if (!gate || !up)
        return NULL;
    char b1[96], b2[96];
    if (!needs_f32(g, COL_OP_SWIGLU, gate) || !needs_f32(g, COL_OP_SWIGLU, up) ||
        !col_check(g, col_same_shape(&gate->t, &up->t), COL_ESHAPE, "swiglu: gate %s and up %s must have the same shape",
                   col_shape_str(&gate->t, b1, sizeof b1), col_shape_str(&up->t, b2, sizeof b2)))
        return NULL;
    col_node *src[2] = {gate, up};
    return col_new_node(g, COL_OP_SWIGLU, COL_F32, gate->t.ndim, gate->t.shape, 2, src);
}

/* ---- dropout ---- */

/* Keeps element i (logical row-major index) iff
 * col_rand_uniform(seed, offset + i) >= p and scales it by 1/(1-p). Each
 * dropout of a graph takes the next numel stream positions, so two dropouts
 * with the same seed draw different masks; the backward reuses the forward's
 * params and so the same mask. src1 is the graph's run counter
 * (col_graph_rng_counter): a non-zero counter c replaces the seed by a
 * Philox hash of (seed, c), so each training step draws a fresh mask. */
col_node *col_dropout(col_graph *g, col_node *x, float p, uint64_t seed)
{
    if (!x || !needs_f32(g, COL_OP_DROPOUT, x))
        return NULL;
    if (!col_check(g, p >= 0.0f && p <= 1.0f, COL_EINVAL, "dropout: p = %g is outside [0, 1]", (double)p))
        return NULL;
    if (p == 0.0f)
        return x;
    col_node *src[2] = {x, col_graph_rng_counter(g)};
    col_node *n = col_new_node(g, COL_OP_DROPOUT, COL_F32, x->t.ndim, x->t.shape, 2, src);
    if (!n)
        return NULL;
    n->p.f[0] = p;
    n->p.i[0] = (int64_t)seed;
    n->p.i[1] = (int64_t)g->dropout_streams;
    g->dropout_streams += (uint64_t)col_numel(&x->t);
    return n;
}
