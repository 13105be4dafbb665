/* ops_image.c - image ops, NCHW (issue 15): conv2d (its gradients are in
 * ops_image_bwd.c), group norm and nearest upsampling.
 *
 * conv2d is one op (CONV2D) whose kernels are a GEMM of w [Cout, Cin*kh*kw]
 * with the input's patches (im2col) on the host. Group norm and upsampling
 * are made of existing ops, so autodiff differentiates them as it does their
 * parts:
 *   group_norm(x)  = reshape [B, G, C/G * rest] -> layernorm without affine -> reshape back,
 *                    then * w[c] + b[c] through [C,1,..] views broadcast by mul / add
 * Nearest upsampling of f32 is its own op (UPSAMPLE_NEAREST, its gradient the
 * sum of each s x s block); other dtypes are views and a copy:
 *   upsample(x, s) = reshape [B,C,H,1,W,1] -> expand [B,C,H,s,W,s] -> copy -> reshape [B,C,sH,sW]
 * (the copy's rows are s elements long: ten times slower than the op on the host)
 *
 * Parameters of CONV2D and its backward ops (see ops.h for the sources):
 *   i[0] = stride h, i[1] = stride w, i[2] = top padding, i[3] = left padding, i[4] = has bias
 */
#include "backend.h"
#include "graph_internal.h"

#include <math.h>
#include <string.h>

/* ---- conv2d ---- */

col_conv2d_geom col_conv2d_geom_of(const col_node *n)
{
    col_conv2d_geom g;
    const col_tensor *x, *w, *y;
    switch (n->op) {
    case COL_OP_CONV2D_BWD_DATA: /* dy, w -> dx */
        x = &n->t, w = &n->src[1]->t, y = &n->src[0]->t;
        break;
    case COL_OP_CONV2D_BWD_FILTER: /* x, dy -> dw */
        x = &n->src[0]->t, w = &n->t, y = &n->src[1]->t;
        break;
    default: /* CONV2D: x, w -> y */
        x = &n->src[0]->t, w = &n->src[1]->t, y = &n->t;
        break;
    }
    g.B = x->shape[0], g.Cin = x->shape[1], g.H = x->shape[2], g.W = x->shape[3];
    g.Cout = w->shape[0], g.kh = w->shape[2], g.kw = w->shape[3];
    g.Ho = y->shape[2], g.Wo = y->shape[3];
    g.sh = n->p.i[0], g.sw = n->p.i[1], g.pt = n->p.i[2], g.pl = n->p.i[3];
    g.K = g.Cin * g.kh * g.kw;
    g.N = g.Ho * g.Wo;
    g.direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 && g.Ho == g.H &&
               g.Wo == g.W;
    return g;
}

/* floats of one im2col tile, at most (unless K alone is more: then one column) */
enum { CONV_TILE_FLOATS = 1 << 22 };

int64_t col_conv2d_tile(const col_conv2d_geom *g)
{
    if (g->direct || g->N == 0 || g->K == 0)
        return 0;
    int64_t cols = CONV_TILE_FLOATS / g->K;
    if (cols < 1)
        cols = 1;
    return cols < g->N ? cols : g->N;
}

/* scratch of a CONV2D or CONV2D_BWD_* node: one f32 tile */
static void conv_scratch(col_node *n)
{
    col_conv2d_geom geo = col_conv2d_geom_of(n);
    n->scratch_bytes = (size_t)(geo.K * col_conv2d_tile(&geo)) * sizeof(float);
}

static bool f32_operand(col_graph *g, const char *what, const col_node *t)
{
    return col_check(g, t->t.dtype == COL_F32, COL_EDTYPE, "conv2d: the %s must be f32, got %s", what,
                     col_dtype_name(t->t.dtype));
}

col_node *col_conv2d_ex(col_graph *g, col_node *x, col_node *w, col_node *bias, const col_conv2d_cfg *cfg)
{
    if (!x || !w)
        return NULL;
    char b1[96], b2[96];
    if (!col_check(g, cfg != NULL, COL_EINVAL, "conv2d: no configuration given") || !f32_operand(g, "input", x) ||
        !f32_operand(g, "weight", w) || (bias && !f32_operand(g, "bias", bias)))
        return NULL;
    if (!col_check(g, x->t.ndim == 4 && w->t.ndim == 4 && w->t.shape[1] == x->t.shape[1], COL_ESHAPE,
                   "conv2d: input %s and weight %s do not match (expected [B,Cin,H,W] and [Cout,Cin,kh,kw])",
                   col_shape_str(&x->t, b1, sizeof b1), col_shape_str(&w->t, b2, sizeof b2)) ||
        !col_check(g, w->t.shape[0] >= 1 && w->t.shape[1] >= 1 && w->t.shape[2] >= 1 && w->t.shape[3] >= 1,
                   COL_ESHAPE, "conv2d: weight %s has an empty dim", col_shape_str(&w->t, b1, sizeof b1)) ||
        !col_check(g, cfg->stride_h >= 1 && cfg->stride_w >= 1, COL_EINVAL, "conv2d: strides %d, %d must be >= 1",
                   cfg->stride_h, cfg->stride_w) ||
        !col_check(g, cfg->pad_top >= 0 && cfg->pad_bottom >= 0 && cfg->pad_left >= 0 && cfg->pad_right >= 0,
                   COL_EINVAL, "conv2d: padding (%d, %d, %d, %d) must be >= 0", cfg->pad_top, cfg->pad_bottom,
                   cfg->pad_left, cfg->pad_right))
        return NULL;
    int64_t B = x->t.shape[0], H = x->t.shape[2], W = x->t.shape[3];
    int64_t Cout = w->t.shape[0], kh = w->t.shape[2], kw = w->t.shape[3];
    int64_t Hp = H + cfg->pad_top + cfg->pad_bottom, Wp = W + cfg->pad_left + cfg->pad_right;
    if (!col_check(g, Hp >= kh && Wp >= kw, COL_ESHAPE,
                   "conv2d: the padded input %lldx%lld is smaller than the kernel %lldx%lld", (long long)Hp,
                   (long long)Wp, (long long)kh, (long long)kw) ||
        (bias && !col_check(g, bias->t.ndim == 1 && bias->t.shape[0] == Cout, COL_ESHAPE,
                            "conv2d: bias %s for %lld output channels (expected [%lld])",
                            col_shape_str(&bias->t, b1, sizeof b1), (long long)Cout, (long long)Cout)))
        return NULL;
    int64_t Ho = (Hp - kh) / cfg->stride_h + 1, Wo = (Wp - kw) / cfg->stride_w + 1;
    int64_t K = w->t.shape[1] * kh * kw;
    if (!col_check(g, K <= INT32_MAX && Ho * Wo <= INT32_MAX && H * W <= INT32_MAX && Cout <= INT32_MAX,
                   COL_EUNSUPPORTED, "conv2d: input %s with weight %s: a GEMM dimension exceeds 2^31",
                   col_shape_str(&x->t, b1, sizeof b1), col_shape_str(&w->t, b2, sizeof b2)))
        return NULL;
    col_node *src[3] = {col_contiguous(g, x), col_contiguous(g, w), bias ? col_contiguous(g, bias) : NULL};
    int64_t shape[4] = {B, Cout, Ho, Wo};
    col_node *n = col_new_node(g, COL_OP_CONV2D, COL_F32, 4, shape, bias ? 3 : 2, src);
    if (!n)
        return NULL;
    n->p.i[0] = cfg->stride_h;
    n->p.i[1] = cfg->stride_w;
    n->p.i[2] = cfg->pad_top;
    n->p.i[3] = cfg->pad_left;
    n->p.i[4] = bias != NULL;
    conv_scratch(n);
    return n;
}

col_node *col_conv2d(col_graph *g, col_node *x, col_node *w, col_node *bias, int stride, int pad)
{
    col_conv2d_cfg cfg = {stride, stride, pad, pad, pad, pad};
    return col_conv2d_ex(g, x, w, bias, &cfg);
}

/* a CONV2D_BWD_DATA or CONV2D_BWD_FILTER node of conv node fwd (ops_image_bwd.c) */
col_node *col_conv2d_bwd_node(col_graph *g, col_op op, const col_node *fwd, col_node *a, col_node *b)
{
    col_node *src[2] = {a, b};
    const col_tensor *out = op == COL_OP_CONV2D_BWD_DATA ? &fwd->src[0]->t : &fwd->src[1]->t;
    col_node *n = col_new_node(g, op, COL_F32, 4, out->shape, 2, src);
    if (!n)
        return NULL;
    n->p = fwd->p;
    n->p.i[4] = 0;
    conv_scratch(n);
    return n;
}

/* ---- group norm ---- */

col_node *col_group_norm(col_graph *g, col_node *x, col_node *w, col_node *b, int groups, float eps)
{
    if (!x)
        return NULL;
    char b1[96], b2[96];
    if (!col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "group_norm: needs an f32 input, got %s %s",
                   col_dtype_name(x->t.dtype), col_shape_str(&x->t, b1, sizeof b1)) ||
        !col_check(g, x->t.ndim >= 2, COL_ESHAPE, "group_norm: needs an input [B,C,...], got %s",
                   col_shape_str(&x->t, b1, sizeof b1)))
        return NULL;
    int nd = x->t.ndim;
    int64_t B = x->t.shape[0], C = x->t.shape[1];
    if (!col_check(g, groups >= 1 && C % groups == 0, COL_EINVAL,
                   "group_norm: %lld channels do not split into %d groups", (long long)C, groups) ||
        !col_check(g, eps >= 0.0f && isfinite(eps), COL_EINVAL, "group_norm: eps %g must be finite and >= 0",
                   (double)eps))
        return NULL;
    col_node *aff[2] = {w, b};
    for (int k = 0; k < 2; k++)
        if (aff[k] && (!col_check(g, aff[k]->t.dtype == COL_F32, COL_EDTYPE, "group_norm: the %s must be f32, got %s",
                                  k ? "bias" : "weight", col_dtype_name(aff[k]->t.dtype)) ||
                       !col_check(g, aff[k]->t.ndim == 1 && aff[k]->t.shape[0] == C, COL_ESHAPE,
                                  "group_norm: %s %s for input %s (expected [%lld])", k ? "bias" : "weight",
                                  col_shape_str(&aff[k]->t, b1, sizeof b1), col_shape_str(&x->t, b2, sizeof b2),
                                  (long long)C)))
            return NULL;
    int64_t numel = col_numel(&x->t);
    int64_t BG = B * groups, rows[3] = {B, groups, BG > 0 ? numel / BG : 0};
    col_node *y = col_layernorm(g, col_reshape(g, x, 3, rows), NULL, NULL, eps);
    y = col_reshape(g, y, nd, x->t.shape);
    int64_t cshape[COL_MAX_DIMS]; /* [C, 1, ...]: broadcast over dim 1 of x */
    cshape[0] = C;
    for (int d = 1; d < nd - 1; d++)
        cshape[d] = 1;
    if (w)
        y = col_mul(g, y, col_reshape(g, w, nd - 1, cshape));
    if (b)
        y = col_add(g, y, col_reshape(g, b, nd - 1, cshape));
    return y;
}

/* ---- nearest upsampling ---- */

col_node *col_upsample_nearest(col_graph *g, col_node *x, int scale)
{
    if (!x)
        return NULL;
    char b1[96];
    if (!col_check(g, x->t.ndim == 4, COL_ESHAPE, "upsample_nearest: needs an input [B,C,H,W], got %s",
                   col_shape_str(&x->t, b1, sizeof b1)) ||
        !col_check(g, scale >= 1, COL_EINVAL, "upsample_nearest: scale %d must be >= 1", scale))
        return NULL;
    if (scale == 1)
        return x;
    const int64_t *s = x->t.shape;
    if (x->t.dtype == COL_F32) {
        int64_t out[4] = {s[0], s[1], s[2] * scale, s[3] * scale};
        col_node *src = col_contiguous(g, x);
        col_node *n = col_new_node(g, COL_OP_UPSAMPLE_NEAREST, COL_F32, 4, out, 1, &src);
        if (n)
            n->p.i[0] = scale;
        return n;
    }
    int64_t s1[6] = {s[0], s[1], s[2], 1, s[3], 1}, s2[6] = {s[0], s[1], s[2], scale, s[3], scale};
    int64_t out[4] = {s[0], s[1], s[2] * scale, s[3] * scale};
    col_node *e = col_expand(g, col_reshape(g, x, 6, s1), 6, s2);
    return col_reshape(g, col_contiguous(g, e), 4, out);
}
