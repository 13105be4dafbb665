/* fold_attention.c - AlphaFold2's Attention and GlobalAttention on the graph. */
#include "fold_attention.h"

#include <math.h>

#include "ops.h"

static bool dims_ok(fold_ctx *c, const char *module, const fold_attn_dims *d)
{
    if (!d || d->c_in < 1 || d->heads < 1 || d->key_dim < 1 || d->value_dim < 1 || d->c_out < 1) {
        mb_fail(c->b, COL_EINVAL, "%s%s: attention widths must all be positive", c->b->prefix, module);
        return false;
    }
    return true;
}

/* x [B, T, c_in] as [B*T, c_in] @ MODULE//NAME [c_in, a, b] viewed as [c_in, a*b]: [B*T, a*b] */
static col_node *project(fold_ctx *c, col_node *x2d, const char *module, const char *name, int64_t c_in, int64_t a,
                         int64_t b)
{
    col_node *w = a > 0 ? fold_w(c, 3, (int64_t[]){c_in, a, b}, "%s//%s", module, name)
                        : fold_w(c, 2, (int64_t[]){c_in, b}, "%s//%s", module, name);
    if (!w) return NULL;
    int64_t n = (a > 0 ? a : 1) * b;
    return col_matmul(c->b->g, x2d, col_reshape(c->b->g, w, 2, (int64_t[]){c_in, n}));
}

/* sigmoid(x2d @ gating_w + gating_b): [rows, H*vd] */
static col_node *gate(fold_ctx *c, col_node *x2d, const char *module, const fold_attn_dims *d)
{
    col_graph *g = c->b->g;
    col_node *gb = fold_w(c, 2, (int64_t[]){d->heads, d->value_dim}, "%s//gating_b", module);
    col_node *gv = project(c, x2d, module, "gating_w", d->c_in, d->heads, d->value_dim);
    if (!gb || !gv) return NULL;
    int64_t hv = d->heads * d->value_dim;
    return col_sigmoid(g, col_add(g, gv, col_reshape(g, gb, 2, (int64_t[]){1, hv})));
}

/* avg2d [rows, H*vd] @ output_w [H*vd, c_out] + output_b */
static col_node *output(fold_ctx *c, col_node *avg2d, const char *module, const fold_attn_dims *d)
{
    col_graph *g = c->b->g;
    col_node *ow = fold_w(c, 3, (int64_t[]){d->heads, d->value_dim, d->c_out}, "%s//output_w", module);
    col_node *ob = fold_w(c, 1, (int64_t[]){d->c_out}, "%s//output_b", module);
    if (!ow || !ob || !avg2d) return NULL;
    col_node *y = col_matmul(g, avg2d, col_reshape(g, ow, 2, (int64_t[]){d->heads * d->value_dim, d->c_out}));
    return col_add(g, y, col_reshape(g, ob, 2, (int64_t[]){1, d->c_out}));
}

static bool input_ok(fold_ctx *c, const char *module, const char *what, const col_node *x, int64_t ch)
{
    if (!x) {
        mb_fail(c->b, COL_EINVAL, "%s%s: no %s", c->b->prefix, module, what);
        return false;
    }
    const col_tensor *t = &x->t;
    if (t->dtype != COL_F32 || t->ndim != 3 || t->shape[2] != ch || t->shape[0] < 1 || t->shape[1] < 1) {
        mb_fail(c->b, COL_ESHAPE, "%s%s: %s must be f32 [batch, length, %lld] with batch and length >= 1",
                c->b->prefix, module, what, (long long)ch);
        return false;
    }
    return true;
}

col_node *fold_attention(fold_ctx *c, const char *module, const fold_attn_dims *d, col_node *q_data, col_node *m_data,
                         col_node *bias)
{
    if (!dims_ok(c, module, d) || !input_ok(c, module, "query input", q_data, d->c_in) ||
        !input_ok(c, module, "memory input", m_data, d->c_in))
        return NULL;
    col_graph *g = c->b->g;
    int64_t B = q_data->t.shape[0], Q = q_data->t.shape[1], K = m_data->t.shape[1];
    int64_t H = d->heads, kd = d->key_dim, vd = d->value_dim;
    if (m_data->t.shape[0] != B)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: query and memory inputs have batches %lld and %lld", c->b->prefix,
                       module, (long long)B, (long long)m_data->t.shape[0]);
    if (bias) {
        const int64_t want[4] = {B, H, Q, K};
        bool ok = bias->t.dtype == COL_F32 && bias->t.ndim == 4;
        for (int i = 0; ok && i < 4; i++) ok = bias->t.shape[i] == 1 || bias->t.shape[i] == want[i];
        if (!ok)
            return mb_fail(c->b, COL_ESHAPE, "%s%s: the bias must be f32 broadcastable to [%lld, %lld, %lld, %lld]",
                           c->b->prefix, module, (long long)B, (long long)H, (long long)Q, (long long)K);
    }
    col_node *q2d = col_reshape(g, q_data, 2, (int64_t[]){B * Q, d->c_in});
    col_node *m2d = col_reshape(g, m_data, 2, (int64_t[]){B * K, d->c_in});
    /* [B, T, H, c] projections, read per head through permuted views (BLAS takes their strides) */
    col_node *q = col_scale(g, project(c, q2d, module, "query_w", d->c_in, H, kd), 1.0f / sqrtf((float)kd), 0.0f);
    col_node *k = project(c, m2d, module, "key_w", d->c_in, H, kd);
    col_node *v = project(c, m2d, module, "value_w", d->c_in, H, vd);
    if (!q || !k || !v) return NULL;
    q = col_permute(g, col_reshape(g, q, 4, (int64_t[]){B, Q, H, kd}), (int[]){0, 2, 1, 3});   /* [B,H,Q,kd] */
    k = col_permute(g, col_reshape(g, k, 4, (int64_t[]){B, K, H, kd}), (int[]){0, 2, 3, 1});   /* [B,H,kd,K] */
    v = col_permute(g, col_reshape(g, v, 4, (int64_t[]){B, K, H, vd}), (int[]){0, 2, 1, 3});   /* [B,H,K,vd] */
    col_node *w = col_softmax(g, col_matmul(g, q, k), bias, 0);                              /* [B,H,Q,K] */
    col_node *avg = col_permute(g, col_matmul(g, w, v), (int[]){0, 2, 1, 3});                /* [B,Q,H,vd] view */
    col_node *avg2d;
    if (d->gating) {
        col_node *gt = gate(c, q2d, module, d);
        if (!gt) return NULL;
        avg2d = col_mul(g, avg, col_reshape(g, gt, 4, (int64_t[]){B, Q, H, vd}));
    } else {
        avg2d = col_contiguous(g, avg);
    }
    avg2d = col_reshape(g, avg2d, 2, (int64_t[]){B * Q, H * vd});
    col_node *y = output(c, avg2d, module, d);
    return y ? col_reshape(g, y, 3, (int64_t[]){B, Q, d->c_out}) : NULL;
}

col_node *fold_global_attention(fold_ctx *c, const char *module, const fold_attn_dims *d, col_node *m_data)
{
    if (!dims_ok(c, module, d) || !input_ok(c, module, "input", m_data, d->c_in)) return NULL;
    col_graph *g = c->b->g;
    int64_t B = m_data->t.shape[0], K = m_data->t.shape[1];
    int64_t H = d->heads, kd = d->key_dim, vd = d->value_dim;
    col_node *m2d = col_reshape(g, m_data, 2, (int64_t[]){B * K, d->c_in});
    col_node *q_avg = col_mean(g, m_data, 1u << 1, 0);                                       /* [B, c_in] */
    col_node *q = col_scale(g, project(c, q_avg, module, "query_w", d->c_in, H, kd), 1.0f / sqrtf((float)kd), 0.0f);
    col_node *k = project(c, m2d, module, "key_w", d->c_in, 0, kd);                         /* [B*K, kd] */
    col_node *v = project(c, m2d, module, "value_w", d->c_in, 0, vd);                       /* [B*K, vd] */
    if (!q || !k || !v) return NULL;
    q = col_reshape(g, q, 3, (int64_t[]){B, H, kd});
    k = col_transpose(g, col_reshape(g, k, 3, (int64_t[]){B, K, kd}), 1, 2);                /* [B, kd, K] */
    v = col_reshape(g, v, 3, (int64_t[]){B, K, vd});
    col_node *w = col_softmax(g, col_matmul(g, q, k), NULL, 0);                              /* [B, H, K] */
    col_node *avg = col_matmul(g, w, v);                                                     /* [B, H, vd] */
    if (!avg) return NULL;
    if (d->gating) {
        col_node *gt = gate(c, m2d, module, d);                                              /* [B*K, H*vd] */
        if (!gt) return NULL;
        col_node *a = col_expand(g, col_reshape(g, avg, 3, (int64_t[]){B, 1, H * vd}), 3, (int64_t[]){B, K, H * vd});
        col_node *y = output(c, col_reshape(g, col_mul(g, a, col_reshape(g, gt, 3, (int64_t[]){B, K, H * vd})), 2,
                                            (int64_t[]){B * K, H * vd}), module, d);
        return y ? col_reshape(g, y, 3, (int64_t[]){B, K, d->c_out}) : NULL;
    }
    col_node *y = output(c, col_reshape(g, avg, 2, (int64_t[]){B, H * vd}), module, d);     /* [B, c_out] */
    if (!y) return NULL;
    return col_contiguous(g, col_expand(g, col_reshape(g, y, 3, (int64_t[]){B, 1, d->c_out}), 3,
                                        (int64_t[]){B, K, d->c_out}));
}
