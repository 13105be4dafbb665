/* ops_reduce_bwd.c - gradients of sum / mean (dy expanded back over the
 * reduced axes, scaled for mean) and max (MAX_BWD: to the first maximum). */
#include "graph_internal.h"

/* the reduced node seen with size-1 dims kept, as a view */
static col_node *keepdim_view(col_graph *g, col_node *r, const col_node *x, uint32_t axes)
{
    int64_t shape[COL_MAX_DIMS];
    for (int d = 0; d < x->t.ndim; d++)
        shape[d] = (axes & (1u << d)) ? 1 : x->t.shape[d];
    return col_reshape(g, r, x->t.ndim, shape);
}

void col_bwd_reduce(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0];
    uint32_t axes = (uint32_t)n->p.i[0];
    col_node *dk = keepdim_view(g, d, x, axes);
    if (n->op == COL_OP_MAX) {
        col_node *srcs[3] = {x, keepdim_view(g, n, x, axes), dk};
        if (!srcs[1] || !dk)
            return;
        col_node *m = col_new_node(g, COL_OP_MAX_BWD, COL_F32, x->t.ndim, x->t.shape, 3, srcs);
        if (m)
            m->p.i[0] = axes;
        col_accum_grad(g, x, m);
        return;
    }
    col_node *e = col_expand(g, dk, x->t.ndim, x->t.shape);
    if (n->op == COL_OP_MEAN) {
        int64_t cnt = 1;
        for (int dd = 0; dd < x->t.ndim; dd++)
            if (axes & (1u << dd))
                cnt *= x->t.shape[dd];
        e = col_scale(g, e, cnt ? 1.0f / (float)cnt : 0.0f, 0.0f);
    }
    col_accum_grad(g, x, e);
}
