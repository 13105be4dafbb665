/* views_bwd.c - gradients of the views and data movement ops of views.c:
 * reshape, permute, slice (scattered back), expand (summed back), copy,
 * cast, concat. */
#include "graph_internal.h"

void col_bwd_view(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0];
    switch ((int)n->p.i[0]) {
    case COL_VIEW_RESHAPE:
        col_accum_grad(g, x, col_reshape(g, d, x->t.ndim, x->t.shape));
        break;
    case COL_VIEW_PERMUTE: {
        int inv[COL_MAX_DIMS];
        for (int i = 0; i < n->t.ndim; i++)
            inv[(n->p.i[1] >> (4 * i)) & 0xf] = i;
        col_accum_grad(g, x, col_permute(g, d, inv));
        break;
    }
    case COL_VIEW_SLICE:
        col_accum_grad(g, x, col_scatter_slice(g, d, x->t.ndim, x->t.shape, (int)n->p.i[1], n->p.i[2]));
        break;
    case COL_VIEW_EXPAND:
        col_accum_grad(g, x, col_reduce_to(g, d, &x->t));
        break;
    default:
        col_graph_fail(g, COL_EUNSUPPORTED, "autodiff: no gradient through a generic view (%s)", n->name);
    }
}

void col_bwd_copy(col_graph *g, col_node *n, col_node *d) { col_accum_grad(g, n->src[0], d); }

/* Gradients of float nodes are f32 whatever the node's dtype: a 16-bit leaf's gradient is rounded once, where
 * it is accumulated into its buffer (the ACCUMULATE, in the parameter's dtype), not at every cast on the way
 * (where contributions of several uses would then be added in 16 bits). */
void col_bwd_cast(col_graph *g, col_node *n, col_node *d)
{
    col_dtype st = n->src[0]->t.dtype;
    col_accum_grad(g, n->src[0], col_cast(g, d, col_dtype_is_float(st) ? COL_F32 : st));
}

void col_bwd_concat(col_graph *g, col_node *n, col_node *d)
{
    int axis = (int)n->p.i[0];
    int64_t start = 0;
    for (int k = 0; k < n->nsrc; k++) {
        int64_t len = n->src[k]->t.shape[axis];
        col_accum_grad(g, n->src[k], col_slice(g, d, axis, start, len));
        start += len;
    }
}
