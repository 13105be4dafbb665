/* ops_unary_bwd.c - gradients of ops_unary.c's activations and dropout.
 *
 * Gradients are built from the *_BWD ops of ops.h (tanh and sigmoid from
 * their output y, the others from their input x), except exp (dy * y) and
 * log (dy / x), which reuse mul and div. Dropout's gradient is a dropout of
 * dy with the forward's parameters: the same mask. */
#include "graph_internal.h"

/* a *_BWD node: (x or y, dy) -> dx of x's shape */
static col_node *bwd2(col_graph *g, col_op op, col_node *s0, col_node *dy)
{
    col_node *src[2] = {s0, dy};
    return col_new_node(g, op, COL_F32, s0->t.ndim, s0->t.shape, 2, src);
}

void col_bwd_unary(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0];
    switch (n->op) {
    case COL_OP_EXP: /* d exp(x) = exp(x) dx */
        col_accum_grad(g, x, col_mul(g, d, n));
        break;
    case COL_OP_LOG: /* d log(x) = dx / x */
        col_accum_grad(g, x, col_div(g, d, x));
        break;
    case COL_OP_TANH: col_accum_grad(g, x, bwd2(g, COL_OP_TANH_BWD, n, d)); break;
    case COL_OP_SIGMOID: col_accum_grad(g, x, bwd2(g, COL_OP_SIGMOID_BWD, n, d)); break;
    case COL_OP_RELU: col_accum_grad(g, x, bwd2(g, COL_OP_RELU_BWD, x, d)); break;
    case COL_OP_GELU_ERF: col_accum_grad(g, x, bwd2(g, COL_OP_GELU_ERF_BWD, x, d)); break;
    case COL_OP_GELU_TANH: col_accum_grad(g, x, bwd2(g, COL_OP_GELU_TANH_BWD, x, d)); break;
    case COL_OP_SILU: col_accum_grad(g, x, bwd2(g, COL_OP_SILU_BWD, x, d)); break;
    case COL_OP_SWIGLU: {
        /* packed [da | db], each with the shape of a (= shape of b) */
        col_node *a = n->src[0], *b = n->src[1];
        int64_t numel = col_numel(&a->t);
        int64_t flat = 2 * numel;
        col_node *src[3] = {a, b, d};
        col_node *packed = col_new_node(g, COL_OP_SWIGLU_BWD, COL_F32, 1, &flat, 3, src);
        if (!packed)
            return;
        col_tensor c = a->t; /* contiguous strides for a's shape */
        col_set_contiguous_strides(&c);
        if (a->flags & COL_NODE_NEEDS_GRAD)
            col_accum_grad(g, a, col_view(g, packed, 0, c.ndim, c.shape, c.stride));
        if (b->flags & COL_NODE_NEEDS_GRAD)
            col_accum_grad(g, b, col_view(g, packed, numel, c.ndim, c.shape, c.stride));
        break;
    }
    default:
        col_graph_fail(g, COL_EINTERNAL, "autodiff: %s is not a unary op", col_op_name(n->op));
        break;
    }
}

void col_bwd_dropout(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0];
    col_node *src[2] = {d, n->src[1]}; /* the same run counter */
    col_node *m = col_new_node(g, COL_OP_DROPOUT, COL_F32, d->t.ndim, d->t.shape, 2, src);
    if (!m)
        return;
    m->p = n->p; /* same p, seed and stream offset: the same mask */
    col_accum_grad(g, x, m);
}
