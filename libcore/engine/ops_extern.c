/* ops_extern.c - the EXTERN node: a caller's function computes its output
 * (ops.h, col_extern). The plan runner calls the function (plan.c); this
 * file only builds the node, with contiguous sources. */
#include "graph_internal.h"

col_node *col_extern(col_graph *g, col_extern_fn fn, void *user, col_dtype dt, int ndim, const int64_t *shape,
                     int nsrc, col_node *const *src)
{
    if (!g || g->err.code != COL_OK)
        return NULL;
    if (!col_check(g, fn != NULL, COL_EINVAL, "extern: no function given"))
        return NULL;
    if (!col_check(g, nsrc >= 0 && nsrc <= COL_MAX_SRC && (nsrc == 0 || src), COL_EINVAL,
                   "extern: %d sources (0 to %d)", nsrc, COL_MAX_SRC))
        return NULL;
    if (!col_check(g, ndim >= 0 && ndim <= COL_MAX_DIMS && (ndim == 0 || shape), COL_ESHAPE,
                   "extern: %d dimensions (0 to %d, with a shape)", ndim, COL_MAX_DIMS))
        return NULL;
    col_node *c[COL_MAX_SRC];
    for (int i = 0; i < nsrc; i++) {
        if (!src[i])
            return NULL; /* a failed builder before this one recorded why */
        if (!(c[i] = col_contiguous(g, src[i])))
            return NULL;
    }
    col_node *n = col_new_node(g, COL_OP_EXTERN, dt, ndim, shape, nsrc, c);
    if (n) {
        n->ext_fn = fn;
        n->ext_user = user;
    }
    return n;
}

col_node *col_extern_grad(col_graph *g, col_extern_fn fn, col_extern_bwd_fn bwd, void *user, col_dtype dt, int ndim,
                          const int64_t *shape, int nsrc, col_node *const *src)
{
    col_node *n = col_extern(g, fn, user, dt, ndim, shape, nsrc, src);
    if (n)
        n->ext_bwd = bwd;
    return n;
}
