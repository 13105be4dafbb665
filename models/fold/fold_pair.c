/* fold_pair.c - the Evoformer's pair side: triangle multiplications and triangle attentions. */
#include "fold_pair.h"

#include <stdio.h>
#include <stdlib.h>

#include "ops.h"

/* MODULE/SUB into buf (MB_NAME_MAX bytes); false (and the builder's error) when too long. */
static bool sub_name(fold_ctx *c, char *buf, const char *module, const char *sub)
{
    int k = snprintf(buf, MB_NAME_MAX, "%s/%s", module, sub);
    if (k < 0 || k >= MB_NAME_MAX) {
        mb_fail(c->b, COL_EINVAL, "parameter name too long: '%s%s/%s'", c->b->prefix, module, sub);
        return false;
    }
    return true;
}

/* The pair [N, N, c_z]: its N and c_z, or an error naming the module. */
static bool pair_shape(fold_ctx *c, const char *module, const col_node *pair, int64_t *n, int64_t *cz)
{
    if (!pair) return false;
    const col_tensor *t = &pair->t;
    if (t->ndim != 3 || t->shape[0] != t->shape[1] || t->shape[0] < 1 || t->shape[2] < 1 || t->dtype != COL_F32) {
        char b1[96];
        mb_fail(c->b, COL_ESHAPE, "%s%s: the pair activations must be f32 [N, N, c_z], got %s %s", c->b->prefix,
                module, col_dtype_name(t->dtype), col_shape_str(t, b1, sizeof b1));
        return false;
    }
    *n = t->shape[0];
    *cz = t->shape[2];
    return true;
}

/* Joins n >= 1 pieces along axis 0, at most COL_MAX_SRC sources per concat
 * node (groups of groups when there are more). pieces is overwritten. */
static col_node *concat_rows(fold_ctx *c, col_node **pieces, int n)
{
    col_graph *g = c->b->g;
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += COL_MAX_SRC) {
            int k = n - i < COL_MAX_SRC ? n - i : COL_MAX_SRC;
            pieces[m++] = k == 1 ? pieces[i] : col_concat(g, k, pieces + i, 0);
        }
        n = m;
    }
    return n == 1 ? pieces[0] : NULL;
}

/* hk.Linear MODULE/SUB applied to x [rows, in] (contiguous), written channel
 * first: (x @ W + b)^T = W^T @ x^T + b, [out, rows]. Both transposes are views
 * the GEMM reads in place. */
static col_node *linear_channel_first(fold_ctx *c, col_node *x, int64_t rows, int64_t in, int64_t out,
                                      const char *module, const char *sub)
{
    char name[MB_NAME_MAX];
    if (!sub_name(c, name, module, sub)) return NULL;
    col_node *w = fold_w(c, 2, (int64_t[]){in, out}, "%s//weights", name);
    col_node *b = fold_w(c, 1, (int64_t[]){out}, "%s//bias", name);
    if (!x || !w || !b) return NULL;
    col_graph *g = c->b->g;
    col_node *y = col_matmul(g, col_transpose(g, w, 0, 1), col_transpose(g, x, 0, 1));
    return col_add(g, y, col_expand(g, col_reshape(g, b, 2, (int64_t[]){out, 1}), 2, (int64_t[]){out, rows}));
}

/* sigmoid(MODULE/GATE(x)) * MODULE/PROJ(x), channel first: [ci, N*N]. */
static col_node *gated_projection(fold_ctx *c, col_node *x, int64_t rows, int64_t cz, int64_t ci, const char *module,
                                  const char *proj, const char *gate)
{
    col_graph *g = c->b->g;
    col_node *p = linear_channel_first(c, x, rows, cz, ci, module, proj);
    col_node *s = col_sigmoid(g, linear_channel_first(c, x, rows, cz, ci, module, gate));
    return col_mul(g, p, s);
}

/* x is f32 [R, C, ch] with R, C, ch >= 1 (ch < 0: any) */
static bool part_ok(fold_ctx *c, const char *module, const char *what, const col_node *x, int64_t ch)
{
    if (!x) return false;
    const col_tensor *t = &x->t;
    if (t->ndim != 3 || t->dtype != COL_F32 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[2] < 1 ||
        (ch >= 0 && t->shape[2] != ch)) {
        char b1[96];
        mb_fail(c->b, COL_ESHAPE, "%s%s: the %s must be f32 [rows, columns, channels], got %s %s", c->b->prefix,
                module, what, col_dtype_name(t->dtype), col_shape_str(t, b1, sizeof b1));
        return false;
    }
    return true;
}

bool fold_triangle_multiplication_projections(fold_ctx *c, const char *module, col_node *pair, int64_t intermediate,
                                              col_node **act, col_node **left, col_node **right)
{
    *act = *left = *right = NULL;
    if (!part_ok(c, module, "pair activations", pair, -1)) return false;
    if (intermediate < 1) {
        mb_fail(c->b, COL_EINVAL, "%s%s: %lld intermediate channels", c->b->prefix, module, (long long)intermediate);
        return false;
    }
    col_graph *g = c->b->g;
    char name[MB_NAME_MAX];
    const int64_t R = pair->t.shape[0], C = pair->t.shape[1], cz = pair->t.shape[2], ci = intermediate, nn = R * C;
    if (!sub_name(c, name, module, "layer_norm_input")) return false;
    *act = fold_layer_norm(c, pair, cz, name);                                /* [R, C, c_z] */
    col_node *flat = col_reshape(g, *act, 2, (int64_t[]){nn, cz});
    /* the projections, channel first: left [ci, a, b] for left_proj_act[a, b, ci] */
    *left = col_reshape(g, gated_projection(c, flat, nn, cz, ci, module, "left_projection", "left_gate"), 3,
                        (int64_t[]){ci, R, C});
    *right = col_reshape(g, gated_projection(c, flat, nn, cz, ci, module, "right_projection", "right_gate"), 3,
                         (int64_t[]){ci, R, C});
    return *act && *left && *right;
}

col_node *fold_triangle_multiplication_combine(fold_ctx *c, const char *module, col_node *a, col_node *b,
                                               col_node *act)
{
    if (!a || !b || !part_ok(c, module, "pair activations", act, -1)) return NULL;
    col_graph *g = c->b->g;
    const int64_t R = act->t.shape[0], C = act->t.shape[1], cz = act->t.shape[2];
    if (a->t.ndim != 3 || b->t.ndim != 3 || a->t.shape[0] != b->t.shape[0] || a->t.shape[1] != R ||
        a->t.shape[2] != b->t.shape[1] || b->t.shape[2] != C)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the projections [ci, %lld, K] and [ci, K, %lld] do not fit",
                       c->b->prefix, module, (long long)R, (long long)C);
    const int64_t ci = a->t.shape[0];
    int64_t rows = fold_chunk_rows(c, R);
    int count = fold_chunk_count(c, R);
    col_node **pieces = calloc((size_t)count, sizeof *pieces);
    if (!pieces) return mb_fail(c->b, COL_ENOMEM, "%s%s: out of memory", c->b->prefix, module);
    char center[MB_NAME_MAX], outp[MB_NAME_MAX], gate[MB_NAME_MAX];
    bool names = sub_name(c, center, module, "center_layer_norm") && sub_name(c, outp, module, "output_projection") &&
                 sub_name(c, gate, module, "gating_linear");
    for (int k = 0; names && k < count; k++) {
        int64_t i0 = (int64_t)k * rows, r = R - i0 < rows ? R - i0 : rows;
        col_node *t = col_matmul(g, col_slice(g, a, 1, i0, r), b);            /* [ci, r, C] */
        t = fold_layer_norm(c, col_permute(g, t, (int[]){1, 2, 0}), ci, center); /* [r, C, ci] */
        t = fold_linear(c, t, ci, cz, true, outp);
        col_node *gv = col_sigmoid(g, fold_linear(c, col_slice(g, act, 0, i0, r), cz, cz, true, gate));
        pieces[k] = col_mul(g, t, gv);
        if (!pieces[k]) break;
    }
    col_node *out = NULL;
    bool all = names;
    for (int k = 0; all && k < count; k++) all = pieces[k] != NULL;
    if (all) out = concat_rows(c, pieces, count);
    free(pieces);
    return out;
}

col_node *fold_triangle_multiplication(fold_ctx *c, const char *module, col_node *pair, int64_t intermediate,
                                       bool outgoing)
{
    int64_t n, cz;
    if (!pair_shape(c, module, pair, &n, &cz)) return NULL;
    col_graph *g = c->b->g;
    col_node *act, *left, *right;
    if (!fold_triangle_multiplication_projections(c, module, pair, intermediate, &act, &left, &right)) return NULL;
    /* out[c, i, j] = sum_k A[c, i, k] B[c, k, j]:
     *   outgoing 'ikc,jkc->ijc': A = left [c, i, k], B = right^T (right [c, j, k])
     *   incoming 'kjc,kic->ijc': A = right^T (right [c, k, i]), B = left [c, k, j] */
    col_node *a = outgoing ? left : col_transpose(g, right, 1, 2);
    col_node *b = outgoing ? col_transpose(g, right, 1, 2) : left;
    return fold_triangle_multiplication_combine(c, module, a, b, act);
}

col_node *fold_triangle_attention_bias(fold_ctx *c, const char *module, col_node *x, int64_t heads)
{
    if (!part_ok(c, module, "normalised pair", x, -1)) return NULL;
    if (heads < 1) return mb_fail(c->b, COL_EINVAL, "%s%s: %lld heads", c->b->prefix, module, (long long)heads);
    col_graph *g = c->b->g;
    const int64_t R = x->t.shape[0], C = x->t.shape[1], cz = x->t.shape[2];
    col_node *w = fold_w(c, 2, (int64_t[]){cz, heads}, "%s//feat_2d_weights", module);
    if (!w) return NULL;
    /* computed head first: b[h, a, b'] = x[a, b'] . w[:, h] = (x @ w)^T */
    return col_reshape(g, col_matmul(g, col_transpose(g, w, 0, 1),
                                     col_transpose(g, col_reshape(g, x, 2, (int64_t[]){R * C, cz}), 0, 1)),
                       3, (int64_t[]){heads, R, C});
}

col_node *fold_triangle_attention_rows(fold_ctx *c, const char *module, const fold_attn_dims *d, col_node *q,
                                       col_node *bias)
{
    if (!part_ok(c, module, "attended rows", q, d ? d->c_in : -1)) return NULL;
    if (!d || d->c_out != d->c_in || d->heads < 1)
        return mb_fail(c->b, COL_EINVAL, "%s%s: the attention's input and output widths must be the pair's",
                       c->b->prefix, module);
    const int64_t B = q->t.shape[0], n = q->t.shape[1];
    if (!bias || bias->t.dtype != COL_F32 || bias->t.ndim != 4 || bias->t.shape[0] != 1 ||
        bias->t.shape[1] != d->heads || bias->t.shape[2] != n || bias->t.shape[3] != n)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the bias must be f32 [1, %lld, %lld, %lld]", c->b->prefix, module,
                       (long long)d->heads, (long long)n, (long long)n);
    col_graph *g = c->b->g;
    char attn[MB_NAME_MAX];
    if (!sub_name(c, attn, module, "attention")) return NULL;
    int64_t rows = fold_chunk_rows(c, B);
    int count = fold_chunk_count(c, B);
    col_node **pieces = calloc((size_t)count, sizeof *pieces);
    if (!pieces) return mb_fail(c->b, COL_ENOMEM, "%s%s: out of memory", c->b->prefix, module);
    bool all = true;
    for (int k = 0; all && k < count; k++) {
        int64_t i0 = (int64_t)k * rows, r = B - i0 < rows ? B - i0 : rows;
        col_node *x = col_contiguous(g, col_slice(g, q, 0, i0, r));
        pieces[k] = fold_attention(c, attn, d, x, x, bias);                    /* [r, N, c_z] */
        all = pieces[k] != NULL;
    }
    col_node *out = all ? concat_rows(c, pieces, count) : NULL;
    free(pieces);
    return out;
}

col_node *fold_triangle_attention(fold_ctx *c, const char *module, col_node *pair, const fold_attn_dims *d,
                                  bool starting)
{
    int64_t n, cz;
    if (!pair_shape(c, module, pair, &n, &cz)) return NULL;
    if (!d || d->c_in != cz || d->c_out != cz || d->heads < 1)
        return mb_fail(c->b, COL_EINVAL, "%s%s: the attention's input and output widths must be the pair's %lld",
                       c->b->prefix, module, (long long)cz);
    col_graph *g = c->b->g;
    char name[MB_NAME_MAX];
    if (!sub_name(c, name, module, "query_norm")) return NULL;
    col_node *x = fold_layer_norm(c, pair, cz, name);                         /* [N, N, c_z] */
    /* the pair bias [H, N, N]; around the ending node the attention runs on x transposed, whose bias is the
     * bias transposed */
    col_node *bias = fold_triangle_attention_bias(c, module, x, d->heads);
    if (!starting) bias = col_contiguous(g, col_transpose(g, bias, 1, 2));
    bias = col_reshape(g, bias, 4, (int64_t[]){1, d->heads, n, n});         /* shared by every row */
    /* the attended rows: x's rows, or (ending node) x's columns as rows */
    col_node *q = starting ? x : col_permute(g, x, (int[]){1, 0, 2});
    col_node *out = fold_triangle_attention_rows(c, module, d, q, bias);
    return starting ? out : col_transpose(g, out, 0, 1);
}
