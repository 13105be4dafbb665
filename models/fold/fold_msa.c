/* fold_msa.c - the MSA-side Evoformer modules of AlphaFold2 on the graph, chunked. */
#include "fold_msa.h"

#include <stdio.h>
#include <string.h>

#include "ops.h"

/* ---- chunk results assembled by concat ---- */

void fold_parts_init(fold_parts *p, int axis)
{
    memset(p, 0, sizeof *p);
    p->axis = axis;
}

void fold_parts_add(fold_ctx *c, fold_parts *p, col_node *x)
{
    if (p->failed) return;
    for (int l = 0;; l++) {
        if (!x || l >= FOLD_PARTS_LEVELS) {
            if (x) mb_fail(c->b, COL_EINVAL, "%stoo many chunks", c->b->prefix);
            p->failed = true;
            return;
        }
        p->level[l][p->n[l]++] = x;
        if (p->n[l] < COL_MAX_SRC) return;
        x = col_concat(c->b->g, COL_MAX_SRC, p->level[l], p->axis);
        p->n[l] = 0;
    }
}

col_node *fold_parts_result(fold_ctx *c, fold_parts *p)
{
    if (p->failed) return NULL;
    /* level l holds earlier parts than the levels below it: each level's parts, then what came after them */
    col_node *carry = NULL;
    for (int l = 0; l < FOLD_PARTS_LEVELS; l++) {
        int k = p->n[l];
        if (!k) continue;
        col_node *xs[COL_MAX_SRC];
        memcpy(xs, p->level[l], sizeof(col_node *) * (size_t)k);
        if (carry) xs[k++] = carry;
        carry = k == 1 ? xs[0] : col_concat(c->b->g, k, xs, p->axis);
        p->n[l] = 0;
        if (!carry) return NULL;
    }
    if (!carry) return mb_fail(c->b, COL_EINTERNAL, "%s: no chunks to assemble", c->b->prefix);
    return col_contiguous(c->b->g, carry);
}

/* ---- helpers ---- */

/* MODULE/SUB into out (MB_NAME_MAX bytes) */
static bool sub(fold_ctx *c, char *out, const char *module, const char *name)
{
    int k = snprintf(out, MB_NAME_MAX, "%s/%s", module, name);
    if (k < 0 || k >= MB_NAME_MAX) {
        mb_fail(c->b, COL_EINVAL, "parameter name too long: '%s%s/%s'", c->b->prefix, module, name);
        return false;
    }
    return true;
}

static bool module_ok(fold_ctx *c, const char *module)
{
    if (module && module[0]) return true;
    mb_fail(c->b, COL_EINVAL, "a module under '%s' needs a name", c->b->prefix);
    return false;
}

/* x is f32 [S, N, ch] with S >= min_rows, N >= 1 (ch < 0: any) */
static bool msa_ok(fold_ctx *c, const char *module, const char *what, const col_node *x, int64_t min_rows, int64_t ch)
{
    if (!x) {
        mb_fail(c->b, COL_EINVAL, "%s%s: no %s", c->b->prefix, module, what);
        return false;
    }
    const col_tensor *t = &x->t;
    if (t->dtype != COL_F32 || t->ndim != 3 || t->shape[0] < min_rows || t->shape[1] < 1 || t->shape[2] < 1 ||
        (ch >= 0 && t->shape[2] != ch)) {
        mb_fail(c->b, COL_ESHAPE, "%s%s: the %s must be f32 [rows, residues, channels] with %lld or more rows%s",
                c->b->prefix, module, what, (long long)min_rows, ch >= 0 ? " and the attention's input width" : "");
        return false;
    }
    return true;
}

/* ---- the modules ---- */

col_node *fold_msa_row_attention_pair_bias(fold_ctx *c, const char *module, col_node *pair, int64_t heads)
{
    if (!module_ok(c, module)) return NULL;
    if (!pair || pair->t.dtype != COL_F32 || pair->t.ndim != 3 || pair->t.shape[0] < 1 || pair->t.shape[1] < 1 ||
        pair->t.shape[2] < 1 || heads < 1)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the pair must be f32 [rows, residues, channels], with heads",
                       c->b->prefix, module);
    col_graph *g = c->b->g;
    int64_t R = pair->t.shape[0], N = pair->t.shape[1], cz = pair->t.shape[2];
    char pn[MB_NAME_MAX];
    if (!sub(c, pn, module, "feat_2d_norm")) return NULL;
    col_node *w2 = fold_w(c, 2, (int64_t[]){cz, heads}, "%s//feat_2d_weights", module);
    col_node *p = fold_layer_norm(c, pair, cz, pn);
    if (!w2 || !p) return NULL;
    return col_reshape(g, col_matmul(g, col_reshape(g, p, 2, (int64_t[]){R * N, cz}), w2), 3,
                       (int64_t[]){R, N, heads});
}

col_node *fold_msa_row_attention_with_bias(fold_ctx *c, const char *module, col_node *msa, col_node *bias,
                                           const fold_attn_dims *d)
{
    if (!module_ok(c, module) || !d || !msa_ok(c, module, "MSA", msa, 1, d->c_in)) return NULL;
    col_graph *g = c->b->g;
    int64_t S = msa->t.shape[0], N = msa->t.shape[1], H = d->heads;
    if (d->c_out != d->c_in || H < 1)
        return mb_fail(c->b, COL_EINVAL, "%s%s: the row attention's output width must be its input's, with heads",
                       c->b->prefix, module);
    if (!bias || bias->t.dtype != COL_F32 || bias->t.ndim != 3 || bias->t.shape[0] != N || bias->t.shape[1] != N ||
        bias->t.shape[2] != H)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the pair bias must be f32 [%lld, %lld, %lld] for an MSA of %lld residues",
                       c->b->prefix, module, (long long)N, (long long)N, (long long)H, (long long)N);
    char qn[MB_NAME_MAX], at[MB_NAME_MAX];
    if (!sub(c, qn, module, "query_norm") || !sub(c, at, module, "attention")) return NULL;
    /* the bias [1, H, N, N] every row shares */
    bias = col_reshape(g, col_contiguous(g, col_permute(g, bias, (int[]){2, 0, 1})), 4, (int64_t[]){1, H, N, N});
    fold_parts parts;
    fold_parts_init(&parts, 0);
    int64_t rows = fold_chunk_rows(c, S);
    for (int64_t r0 = 0; r0 < S; r0 += rows) {
        int64_t n = S - r0 < rows ? S - r0 : rows;
        col_node *x = fold_layer_norm(c, col_slice(g, msa, 0, r0, n), d->c_in, qn);
        fold_parts_add(c, &parts, fold_attention(c, at, d, x, x, bias));
    }
    return fold_parts_result(c, &parts);
}

col_node *fold_msa_row_attention_with_pair_bias(fold_ctx *c, const char *module, col_node *msa, col_node *pair,
                                                const fold_attn_dims *d)
{
    if (!module_ok(c, module) || !d || !msa_ok(c, module, "MSA", msa, 1, d->c_in)) return NULL;
    int64_t N = msa->t.shape[1];
    if (!pair || pair->t.dtype != COL_F32 || pair->t.ndim != 3 || pair->t.shape[0] != N || pair->t.shape[1] != N ||
        pair->t.shape[2] < 1)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the pair must be f32 [%lld, %lld, channels] for an MSA of %lld residues",
                       c->b->prefix, module, (long long)N, (long long)N, (long long)N);
    if (d->c_out != d->c_in || d->heads < 1)
        return mb_fail(c->b, COL_EINVAL, "%s%s: the row attention's output width must be its input's, with heads",
                       c->b->prefix, module);
    return fold_msa_row_attention_with_bias(c, module, msa, fold_msa_row_attention_pair_bias(c, module, pair, d->heads),
                                            d);
}

/* the column attentions: over the rows of each column, columns in chunks */
static col_node *column_attention(fold_ctx *c, const char *module, col_node *msa, const fold_attn_dims *d, bool global)
{
    if (!module_ok(c, module) || !d || !msa_ok(c, module, "MSA", msa, 1, d->c_in)) return NULL;
    col_graph *g = c->b->g;
    int64_t N = msa->t.shape[1];
    if (d->c_out != d->c_in)
        return mb_fail(c->b, COL_EINVAL, "%s%s: the column attention's output width must be its input's",
                       c->b->prefix, module);
    char qn[MB_NAME_MAX], at[MB_NAME_MAX];
    if (!sub(c, qn, module, "query_norm") || !sub(c, at, module, "attention")) return NULL;
    fold_parts parts;
    fold_parts_init(&parts, 1);
    int64_t cols = fold_chunk_rows(c, N);
    for (int64_t c0 = 0; c0 < N; c0 += cols) {
        int64_t n = N - c0 < cols ? N - c0 : cols;
        /* [n, S, c]: the columns as a batch of sequences */
        col_node *x = col_permute(g, col_slice(g, msa, 1, c0, n), (int[]){1, 0, 2});
        x = fold_layer_norm(c, x, d->c_in, qn);
        col_node *y = global ? fold_global_attention(c, at, d, x) : fold_attention(c, at, d, x, x, NULL);
        fold_parts_add(c, &parts, y ? col_permute(g, y, (int[]){1, 0, 2}) : NULL);
    }
    return fold_parts_result(c, &parts);
}

col_node *fold_msa_column_attention(fold_ctx *c, const char *module, col_node *msa, const fold_attn_dims *d)
{
    return column_attention(c, module, msa, d, false);
}

col_node *fold_msa_column_global_attention(fold_ctx *c, const char *module, col_node *msa, const fold_attn_dims *d)
{
    return column_attention(c, module, msa, d, true);
}

col_node *fold_transition(fold_ctx *c, const char *module, col_node *act, int64_t factor)
{
    if (!module_ok(c, module)) return NULL;
    const col_tensor *t = act ? &act->t : NULL;
    if (!t || t->dtype != COL_F32 || t->ndim < 2 || t->shape[0] < 1 || t->shape[t->ndim - 1] < 1)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the transition's input must be f32 [rows, ..., channels]",
                       c->b->prefix, module);
    int64_t ch = t->shape[t->ndim - 1], R = t->shape[0];
    if (factor < 1 || factor > (INT64_C(1) << 20) || ch > (INT64_C(1) << 40) / factor)
        return mb_fail(c->b, COL_EINVAL, "%s%s: transition factor %lld is not a positive size", c->b->prefix, module,
                       (long long)factor);
    col_graph *g = c->b->g;
    char ln[MB_NAME_MAX], t1[MB_NAME_MAX], t2[MB_NAME_MAX];
    if (!sub(c, ln, module, "input_layer_norm") || !sub(c, t1, module, "transition1") ||
        !sub(c, t2, module, "transition2"))
        return NULL;
    fold_parts parts;
    fold_parts_init(&parts, 0);
    int64_t rows = fold_chunk_rows(c, R);
    for (int64_t r0 = 0; r0 < R; r0 += rows) {
        int64_t n = R - r0 < rows ? R - r0 : rows;
        col_node *x = fold_layer_norm(c, col_slice(g, act, 0, r0, n), ch, ln);
        x = col_relu(g, fold_linear(c, x, ch, ch * factor, true, t1));
        fold_parts_add(c, &parts, fold_linear(c, x, ch * factor, ch, true, t2));
    }
    return fold_parts_result(c, &parts);
}

bool fold_outer_product_mean_projections(fold_ctx *c, const char *module, col_node *msa, int64_t num_outer_channel,
                                         col_node **left, col_node **right)
{
    *left = *right = NULL;
    if (!module_ok(c, module) || !msa_ok(c, module, "MSA", msa, 1, -1)) return false;
    int64_t cm = msa->t.shape[2], oc = num_outer_channel;
    if (oc < 1 || oc > (INT64_C(1) << 20)) {
        mb_fail(c->b, COL_EINVAL, "%s%s: the outer product mean's widths must be positive", c->b->prefix, module);
        return false;
    }
    char ln[MB_NAME_MAX], lp[MB_NAME_MAX], rp[MB_NAME_MAX];
    if (!sub(c, ln, module, "layer_norm_input") || !sub(c, lp, module, "left_projection") ||
        !sub(c, rp, module, "right_projection"))
        return false;
    col_node *x = fold_layer_norm(c, msa, cm, ln);
    *left = fold_linear(c, x, cm, oc, true, lp);                                             /* [S, N, oc] */
    *right = fold_linear(c, x, cm, oc, true, rp);
    return *left && *right;
}

col_node *fold_outer_product_mean_combine(fold_ctx *c, const char *module, col_node *left, col_node *right,
                                          int64_t c_z)
{
    if (!module_ok(c, module) || !msa_ok(c, module, "left projection", left, 1, -1) ||
        !msa_ok(c, module, "right projection", right, 1, left->t.shape[2]))
        return NULL;
    int64_t S = left->t.shape[0], R = left->t.shape[1], N = right->t.shape[1], oc = left->t.shape[2];
    if (right->t.shape[0] != S)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: the projections have %lld and %lld rows", c->b->prefix, module,
                       (long long)S, (long long)right->t.shape[0]);
    if (c_z < 1) return mb_fail(c->b, COL_EINVAL, "%s%s: the outer product mean's widths must be positive",
                                c->b->prefix, module);
    col_graph *g = c->b->g;
    col_node *ob = fold_w(c, 1, (int64_t[]){c_z}, "%s//output_b", module);
    col_node *w = fold_w(c, 3, (int64_t[]){oc, oc, c_z}, "%s//output_w", module);
    if (!ob || !w) return NULL;
    ob = col_reshape(g, ob, 2, (int64_t[]){1, c_z});
    /* AlphaFold divides (sum + output_b) by 1e-3 + the rows both residues have: S */
    col_node *den = col_fill(g, COL_F32, 2, (int64_t[]){1, 1}, 1e-3f + (float)S);
    w = col_reshape(g, w, 2, (int64_t[]){oc * oc, c_z});
    right = col_reshape(g, col_contiguous(g, right), 2, (int64_t[]){S, N * oc});
    fold_parts parts;
    fold_parts_init(&parts, 0);
    int64_t rows = fold_chunk_rows(c, R);
    for (int64_t i0 = 0; i0 < R; i0 += rows) {
        int64_t n = R - i0 < rows ? R - i0 : rows;
        /* [n*oc, S] @ [S, N*oc]: the outer products of residues i and j summed over the rows */
        col_node *l = col_contiguous(g, col_permute(g, col_slice(g, left, 1, i0, n), (int[]){1, 2, 0}));
        col_node *o = col_matmul(g, col_reshape(g, l, 2, (int64_t[]){n * oc, S}), right);
        o = col_permute(g, col_reshape(g, o, 4, (int64_t[]){n, oc, N, oc}), (int[]){0, 2, 1, 3});
        o = col_reshape(g, col_contiguous(g, o), 2, (int64_t[]){n * N, oc * oc});
        o = col_div(g, col_add(g, col_matmul(g, o, w), ob), den);
        fold_parts_add(c, &parts, o ? col_reshape(g, o, 3, (int64_t[]){n, N, c_z}) : NULL);
    }
    return fold_parts_result(c, &parts);
}

col_node *fold_outer_product_mean(fold_ctx *c, const char *module, col_node *msa, int64_t c_z,
                                  int64_t num_outer_channel)
{
    if (!module_ok(c, module) || !msa_ok(c, module, "MSA", msa, 0, -1)) return NULL;
    int64_t S = msa->t.shape[0], N = msa->t.shape[1], oc = num_outer_channel;
    if (c_z < 1 || oc < 1 || oc > (INT64_C(1) << 20))
        return mb_fail(c->b, COL_EINVAL, "%s%s: the outer product mean's widths must be positive", c->b->prefix,
                       module);
    if (S == 0) {
        col_graph *g = c->b->g;
        col_node *ob = fold_w(c, 1, (int64_t[]){c_z}, "%s//output_b", module);
        if (!ob) return NULL;
        col_node *den = col_fill(g, COL_F32, 2, (int64_t[]){1, 1}, 1e-3f);
        return col_reshape(g, col_div(g, col_expand(g, col_reshape(g, ob, 2, (int64_t[]){1, c_z}), 2,
                                                    (int64_t[]){N * N, c_z}), den), 3, (int64_t[]){N, N, c_z});
    }
    col_node *left, *right;
    if (!fold_outer_product_mean_projections(c, module, msa, oc, &left, &right)) return NULL;
    return fold_outer_product_mean_combine(c, module, left, right, c_z);
}
