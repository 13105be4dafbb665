/* grad.c - gradient accumulation, what every backward builder calls: adding a
 * contribution to a node's gradient, and summing a broadcast gradient back to
 * its operand's shape. Made of forward builders only (add, sum, reshape). */
#include "graph_internal.h"

void col_accum_grad(col_graph *g, col_node *x, col_node *d)
{
    if (!x || !d || g->err.code != COL_OK)
        return;
    if (!(x->flags & COL_NODE_NEEDS_GRAD))
        return;
    char b1[96], b2[96];
    if (!col_check(g, !col_dtype_is_quant(x->t.dtype), COL_EUNSUPPORTED,
                   "autodiff: %s is a quantized (%s) tensor: it has no gradient", x->name, col_dtype_name(x->t.dtype)))
        return;
    if (!col_check(g, col_same_shape(&x->t, &d->t), COL_EINTERNAL, "autodiff: gradient %s for %s node of shape %s",
                   col_shape_str(&d->t, b1, sizeof b1), x->name, col_shape_str(&x->t, b2, sizeof b2)))
        return;
    x->grad = x->grad ? col_add(g, x->grad, d) : d;
}

col_node *col_reduce_to(col_graph *g, col_node *d, const col_tensor *like)
{
    if (!d)
        return NULL;
    if (col_same_shape(&d->t, like))
        return d;
    int lead = d->t.ndim - like->ndim;
    uint32_t axes = 0;
    for (int i = 0; i < d->t.ndim; i++)
        if (i < lead || (like->shape[i - lead] == 1 && d->t.shape[i] != 1))
            axes |= 1u << i;
    col_node *s = col_sum(g, d, axes, 1);
    return col_reshape(g, s, like->ndim, like->shape);
}
