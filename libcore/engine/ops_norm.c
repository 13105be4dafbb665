/* ops_norm.c - softmax, log_softmax, layernorm, rmsnorm (all over the last
 * dimension); their gradients are in ops_norm_bwd.c.
 *
 * softmax: a row whose entries are all -inf after the mask and the causal
 * limit (a fully masked query) gives zeros rather than NaN, so padded queries
 * contribute nothing and get zero gradient.
 *
 * Parameters (see ops.h for the sources):
 *   SOFTMAX          i[0] = causal, i[1] = causal offset (S - T); src1 = mask expanded to x's shape
 *   LAYERNORM        i[0] = has weight, i[1] = has bias; f[0] = eps
 *   RMSNORM          i[0] = 1 (the weight), i[1] = 0; f[0] = eps
 */
#include "graph_internal.h"

#include <math.h>
#include <string.h>

/* ---- softmax / log_softmax ---- */

col_node *col_softmax(col_graph *g, col_node *x, col_node *mask, int causal)
{
    if (!x)
        return NULL;
    char b1[96], b2[96];
    if (!col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "softmax: needs an f32 input, got %s %s",
                   col_dtype_name(x->t.dtype), col_shape_str(&x->t, b1, sizeof b1)) ||
        !col_check(g, !causal || x->t.ndim >= 2, COL_ESHAPE, "softmax: causal needs an input [..., T, S], got %s",
                   col_shape_str(&x->t, b1, sizeof b1)))
        return NULL;
    int nd = x->t.ndim;
    col_node *src[2] = {col_contiguous(g, x), NULL};
    if (mask) {
        int bnd = 0;
        int64_t shape[COL_MAX_DIMS];
        bool ok = col_broadcast_shape(&mask->t, &x->t, &bnd, shape) && bnd == nd;
        for (int i = 0; ok && i < nd; i++)
            ok = shape[i] == x->t.shape[i];
        if (!col_check(g, mask->t.dtype == COL_F32, COL_EDTYPE, "softmax: the mask must be f32, got %s",
                       col_dtype_name(mask->t.dtype)) ||
            !col_check(g, ok, COL_ESHAPE, "softmax: mask %s does not broadcast to input %s",
                       col_shape_str(&mask->t, b1, sizeof b1), col_shape_str(&x->t, b2, sizeof b2)))
            return NULL;
        src[1] = col_expand(g, mask, nd, x->t.shape);
    }
    col_node *n = col_new_node(g, COL_OP_SOFTMAX, COL_F32, nd, x->t.shape, mask ? 2 : 1, src);
    if (n) {
        n->p.i[0] = causal != 0;
        n->p.i[1] = causal ? x->t.shape[nd - 1] - x->t.shape[nd - 2] : 0;
    }
    return n;
}

col_node *col_log_softmax(col_graph *g, col_node *x)
{
    if (!x)
        return NULL;
    char b1[96];
    if (!col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "log_softmax: needs an f32 input, got %s %s",
                   col_dtype_name(x->t.dtype), col_shape_str(&x->t, b1, sizeof b1)))
        return NULL;
    col_node *src = col_contiguous(g, x);
    return col_new_node(g, COL_OP_LOG_SOFTMAX, COL_F32, x->t.ndim, x->t.shape, 1, &src);
}

/* ---- layernorm / rmsnorm ---- */

static bool norm_input_ok(col_graph *g, const char *op, const col_node *x, float eps)
{
    char b1[96];
    return col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "%s: needs an f32 input, got %s %s", op,
                     col_dtype_name(x->t.dtype), col_shape_str(&x->t, b1, sizeof b1)) &&
           col_check(g, x->t.ndim >= 1, COL_ESHAPE, "%s: needs an input with at least 1 dim, got a scalar", op) &&
           col_check(g, eps >= 0.0f && isfinite(eps), COL_EINVAL, "%s: eps %g must be finite and >= 0", op,
                     (double)eps);
}

/* weight / bias: f32 [C] with C = x's last dim */
static bool norm_param_ok(col_graph *g, const char *op, const char *what, const col_node *p, const col_node *x)
{
    char b1[96], b2[96];
    int64_t C = x->t.shape[x->t.ndim - 1];
    return col_check(g, p->t.dtype == COL_F32, COL_EDTYPE, "%s: %s must be f32, got %s", op, what,
                     col_dtype_name(p->t.dtype)) &&
           col_check(g, p->t.ndim == 1 && p->t.shape[0] == C, COL_ESHAPE,
                     "%s: %s %s does not match the last dim %lld of input %s (expected [%lld])", op, what,
                     col_shape_str(&p->t, b1, sizeof b1), (long long)C, col_shape_str(&x->t, b2, sizeof b2),
                     (long long)C);
}

/* LAYERNORM (w, b optional) or RMSNORM (w required, no b): sources x, [w], [b] */
static col_node *norm_node(col_graph *g, col_op op, const char *name, col_node *x, col_node *w, col_node *b, float eps)
{
    if (!norm_input_ok(g, name, x, eps) || (w && !norm_param_ok(g, name, "weight", w, x)) ||
        (b && !norm_param_ok(g, name, "bias", b, x)))
        return NULL;
    col_node *src[3];
    int ns = 0;
    src[ns++] = col_contiguous(g, x);
    if (w)
        src[ns++] = col_contiguous(g, w);
    if (b)
        src[ns++] = col_contiguous(g, b);
    col_node *n = col_new_node(g, op, COL_F32, x->t.ndim, x->t.shape, ns, src);
    if (n) {
        n->p.i[0] = w != NULL;
        n->p.i[1] = b != NULL;
        n->p.f[0] = eps;
    }
    return n;
}

col_node *col_layernorm(col_graph *g, col_node *x, col_node *w, col_node *b, float eps)
{
    return x ? norm_node(g, COL_OP_LAYERNORM, "layernorm", x, w, b, eps) : NULL;
}

col_node *col_rmsnorm(col_graph *g, col_node *x, col_node *w, float eps)
{
    if (!x || !col_check(g, w != NULL, COL_EINVAL, "rmsnorm: a weight [C] is required"))
        return NULL;
    return norm_node(g, COL_OP_RMSNORM, "rmsnorm", x, w, NULL, eps);
}
