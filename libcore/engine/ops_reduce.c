/* ops_reduce.c - sum / mean / max over a set of axes (gradients: ops_reduce_bwd.c). */
#include "backend.h"
#include "graph_internal.h"

#include <string.h>

static col_node *reduce(col_graph *g, col_op op, col_node *x, uint32_t axes, int keepdim)
{
    if (!x)
        return NULL;
    const char *name = col_op_name(op);
    if (!col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "%s: needs f32, got %s", name, col_dtype_name(x->t.dtype)))
        return NULL;
    axes &= (x->t.ndim >= 32) ? ~0u : ((1u << x->t.ndim) - 1);
    int64_t shape[COL_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->t.ndim; d++) {
        if (axes & (1u << d)) {
            if (!col_check(g, op != COL_OP_MAX || x->t.shape[d] > 0, COL_ESHAPE, "max: reducing an empty dim %d", d))
                return NULL;
            if (keepdim)
                shape[nd++] = 1;
        } else {
            shape[nd++] = x->t.shape[d];
        }
    }
    col_node *n = col_new_node(g, op, COL_F32, nd, shape, 1, &x);
    if (n) {
        n->p.i[0] = axes;
        n->p.i[1] = keepdim;
    }
    return n;
}

col_node *col_sum(col_graph *g, col_node *x, uint32_t axes, int keepdim) { return reduce(g, COL_OP_SUM, x, axes, keepdim); }
col_node *col_mean(col_graph *g, col_node *x, uint32_t axes, int keepdim) { return reduce(g, COL_OP_MEAN, x, axes, keepdim); }
col_node *col_max(col_graph *g, col_node *x, uint32_t axes, int keepdim) { return reduce(g, COL_OP_MAX, x, axes, keepdim); }

void col_split_axes(const col_tensor *x, uint32_t axes, col_tensor *kept, col_tensor *red)
{
    memset(kept, 0, sizeof *kept);
    memset(red, 0, sizeof *red);
    for (int d = 0; d < x->ndim; d++) {
        col_tensor *t = (axes & (1u << d)) ? red : kept;
        t->shape[t->ndim] = x->shape[d];
        t->stride[t->ndim] = x->stride[d];
        t->ndim++;
    }
}
