/* ops_basic_bwd.c - gradients of ops_basic.c's ops: elementwise binary
 * ops, scale, matmul (linear is made of these). Broadcast operands get
 * full-shape gradients; their expand views sum them back (views_bwd.c). */
#include "graph_internal.h"

void col_bwd_binary(col_graph *g, col_node *n, col_node *d)
{
    col_node *a = n->src[0], *b = n->src[1];
    bool ga = a->flags & COL_NODE_NEEDS_GRAD, gb = b->flags & COL_NODE_NEEDS_GRAD;
    switch (n->op) {
    case COL_OP_ADD:
        col_accum_grad(g, a, d);
        col_accum_grad(g, b, d);
        break;
    case COL_OP_SUB:
        col_accum_grad(g, a, d);
        if (gb)
            col_accum_grad(g, b, col_scale(g, d, -1.0f, 0.0f));
        break;
    case COL_OP_MUL:
        if (ga)
            col_accum_grad(g, a, col_mul(g, d, b));
        if (gb)
            col_accum_grad(g, b, col_mul(g, d, a));
        break;
    case COL_OP_DIV:
        if (ga)
            col_accum_grad(g, a, col_div(g, d, b));
        if (gb) /* d(a/b)/db = -(a/b)/b */
            col_accum_grad(g, b, col_scale(g, col_div(g, col_mul(g, d, n), b), -1.0f, 0.0f));
        break;
    default:
        break;
    }
}

void col_bwd_scale(col_graph *g, col_node *n, col_node *d)
{
    col_accum_grad(g, n->src[0], col_scale(g, d, n->p.f[0], 0.0f));
}

/* With bf16 or f16 operands the gradient meets them in their dtype (rounded once, shared by both products),
 * as autocast's backward does: the products stay 16-bit GEMMs with f32 accumulation. */
void col_bwd_matmul(col_graph *g, col_node *n, col_node *d)
{
    col_node *a = n->src[0], *b = n->src[1];
    if (!col_check(g, !col_dtype_is_quant(b->t.dtype) || !(a->flags & COL_NODE_NEEDS_GRAD), COL_EUNSUPPORTED,
                   "autodiff: no gradient flows through x @ W^T with a quantized (%s) W to x",
                   col_dtype_name(b->t.dtype)))
        return;
    d = col_cast(g, d, a->t.dtype);
    if (a->flags & COL_NODE_NEEDS_GRAD) /* dA = dC @ B^T */
        col_accum_grad(g, a, col_matmul(g, d, col_transpose(g, b, -1, -2)));
    if (b->flags & COL_NODE_NEEDS_GRAD) /* dB = A^T @ dC */
        col_accum_grad(g, b, col_matmul(g, col_transpose(g, a, -1, -2), d));
}
