/* ops_attention.c - scaled dot-product attention (causal, grouped-query
 * heads), computed blocked (cpu_attention.c); its gradient is in
 * ops_attention_bwd.c.
 *
 *   q [B,Hq,T,D], k,v [B,Hkv,S,D], Hq % Hkv == 0 -> out [B,Hq,T,D]
 *   out = softmax(q k^T * scale + mask) v, query head h using kv head
 *   h / (Hq/Hkv) (transformers' repeat_kv); causal: query t sees key j iff
 *   j <= t + (S - T) (the queries are the last T positions of the keys).
 *   The logsumexp of every score row, [B,Hq,T] f32, is kept after the output
 *   for the backward.
 *   Over a key/value cache (inference only): col_attention_cached (one start
 *   for the batch) and col_attention_cached_rows (a cache row and a start per
 *   batch row: p.i[1] = 1, sources q, k, v, start, rows).
 */
#include <math.h>

#include "backend.h"
#include "graph_internal.h"

/* The host attention kernel's workspace, part of the op's contract: one
 * query tile x key tile of scores per worker thread (COL_ATTENTION_TILE
 * square), with head dims padded to COL_ATTENTION_PAD. Forward: the Q tile
 * transposed, a padded V tile, the scores, the output accumulator and four
 * row statistics; backward: the larger of its two passes. */
static int64_t pad_dims(int64_t d) { return (d + COL_ATTENTION_PAD - 1) / COL_ATTENTION_PAD * COL_ATTENTION_PAD; }

size_t col_attention_scratch_per_thread(int64_t D, bool backward)
{
    const int64_t BR = COL_ATTENTION_TILE, BC = COL_ATTENTION_TILE, Dp = pad_dims(D);
    size_t f;
    if (!backward) {
        f = (size_t)(D * BR + BC * Dp + BC * BR + BR * Dp + 4 * BR);
    } else {
        size_t a = (size_t)(2 * D * BC + 2 * BR * BC + 2 * BC * Dp + 2 * BR * Dp + BR); /* pass A */
        size_t b = (size_t)(2 * D * BR + BC * Dp + 2 * BC * BR + BR * Dp + 2 * BR);   /* pass B */
        f = a > b ? a : b;
    }
    return (f * sizeof(float) + 63) / 64 * 64;
}

/* the kernels read rows with unit stride along D; other strides are free */
col_node *col_attention_operand(col_graph *g, col_node *x)
{
    if (x->t.shape[3] > 1 && x->t.stride[3] != 1)
        return col_contiguous(g, x);
    return x;
}

col_node *col_attention(col_graph *g, col_node *q, col_node *k, col_node *v, int causal, float scale)
{
    if (!q || !k || !v)
        return NULL;
    char b1[96], b2[96], b3[96];
    if (!col_check(g, q->t.dtype == COL_F32 && k->t.dtype == COL_F32 && v->t.dtype == COL_F32, COL_EDTYPE,
                   "attention: needs f32 q, k, v, got %s, %s, %s", col_dtype_name(q->t.dtype),
                   col_dtype_name(k->t.dtype), col_dtype_name(v->t.dtype)) ||
        !col_check(g, q->t.ndim == 4 && k->t.ndim == 4 && v->t.ndim == 4, COL_ESHAPE,
                   "attention: q, k, v must be [B,H,T,D], got q %s, k %s, v %s", col_shape_str(&q->t, b1, sizeof b1),
                   col_shape_str(&k->t, b2, sizeof b2), col_shape_str(&v->t, b3, sizeof b3)) ||
        !col_check(g, col_same_shape(&k->t, &v->t), COL_ESHAPE, "attention: k %s and v %s differ in shape",
                   col_shape_str(&k->t, b1, sizeof b1), col_shape_str(&v->t, b2, sizeof b2)))
        return NULL;
    int64_t B = q->t.shape[0], Hq = q->t.shape[1], T = q->t.shape[2], D = q->t.shape[3];
    int64_t Hkv = k->t.shape[1], S = k->t.shape[2];
    if (!col_check(g, k->t.shape[0] == B && k->t.shape[3] == D, COL_ESHAPE,
                   "attention: q %s and k %s differ in batch or head_dim", col_shape_str(&q->t, b1, sizeof b1),
                   col_shape_str(&k->t, b2, sizeof b2)) ||
        !col_check(g, Hkv > 0 && Hq % Hkv == 0, COL_ESHAPE,
                   "attention: %lld query heads are not a multiple of %lld kv heads (q %s, k %s)", (long long)Hq,
                   (long long)Hkv, col_shape_str(&q->t, b1, sizeof b1), col_shape_str(&k->t, b2, sizeof b2)) ||
        !col_check(g, D > 0 && S > 0, COL_ESHAPE, "attention: needs head_dim > 0 and at least one key, got k %s",
                   col_shape_str(&k->t, b1, sizeof b1)) ||
        !col_check(g, !causal || T <= S, COL_ESHAPE,
                   "attention: causal with %lld queries but %lld keys (needs T <= S)", (long long)T, (long long)S))
        return NULL;
    col_node *src[3] = {col_attention_operand(g, q), col_attention_operand(g, k), col_attention_operand(g, v)};
    int64_t shape[4] = {B, Hq, T, D};
    col_node *n = col_new_node(g, COL_OP_ATTENTION, COL_F32, 4, shape, 3, src);
    if (!n)
        return NULL;
    n->p.i[0] = causal ? 1 : 0;
    n->p.f[0] = scale > 0.0f ? scale : 1.0f / sqrtf((float)D);
    n->extra_bytes = sizeof(float) * (size_t)(B * Hq * T); /* logsumexp per row */
    n->scratch_bytes = (size_t)col_max_threads() * col_attention_scratch_per_thread(D, false);
    return n;
}

col_node *col_attention_cached(col_graph *g, col_node *q, col_node *kcache, col_node *vcache, col_node *start,
                               float scale)
{
    if (!start)
        return NULL;
    char b1[96];
    if (!col_check(g, start->t.dtype == COL_I64 && col_numel(&start->t) == 1, COL_EINVAL,
                   "attention: the cache start must be an i64 [1] node, got %s", col_shape_str(&start->t, b1, sizeof b1)))
        return NULL;
    col_node *n = col_attention(g, q, kcache, vcache, 1, scale);
    if (!n)
        return NULL;
    /* src3: the start position; the kernel attends to the first start+T keys */
    n->src[3] = start;
    n->nsrc = 4;
    return n;
}

col_node *col_attention_cached_rows(col_graph *g, col_node *q, col_node *kcache, col_node *vcache, col_node *start,
                                    col_node *rows, float scale)
{
    if (!q || !kcache || !vcache)
        return NULL;
    char b1[96], b2[96], b3[96];
    if (!col_check(g, q->t.dtype == COL_F32 && kcache->t.dtype == COL_F32 && vcache->t.dtype == COL_F32, COL_EDTYPE,
                   "attention_rows: needs f32 q, k, v, got %s, %s, %s", col_dtype_name(q->t.dtype),
                   col_dtype_name(kcache->t.dtype), col_dtype_name(vcache->t.dtype)) ||
        !col_check(g, q->t.ndim == 4 && kcache->t.ndim == 4 && col_same_shape(&kcache->t, &vcache->t), COL_ESHAPE,
                   "attention_rows: q [B,Hq,T,D] and caches [S,Hkv,L,D] of one shape, got q %s, k %s, v %s",
                   col_shape_str(&q->t, b1, sizeof b1), col_shape_str(&kcache->t, b2, sizeof b2),
                   col_shape_str(&vcache->t, b3, sizeof b3)))
        return NULL;
    int64_t B = q->t.shape[0], Hq = q->t.shape[1], T = q->t.shape[2], D = q->t.shape[3];
    int64_t R = kcache->t.shape[0], Hkv = kcache->t.shape[1], L = kcache->t.shape[2];
    if (!col_check(g, kcache->t.shape[3] == D && D > 0, COL_ESHAPE, "attention_rows: q %s and the cache %s differ in head_dim",
                   col_shape_str(&q->t, b1, sizeof b1), col_shape_str(&kcache->t, b2, sizeof b2)) ||
        !col_check(g, Hkv > 0 && Hq % Hkv == 0, COL_ESHAPE,
                   "attention_rows: %lld query heads are not a multiple of %lld kv heads", (long long)Hq, (long long)Hkv) ||
        !col_check(g, T <= L && L > 0, COL_ESHAPE, "attention_rows: %lld queries over a cache of %lld positions",
                   (long long)T, (long long)L) ||
        !col_rows_operands(g, "attention_rows", B, R, &start, &rows))
        return NULL;
    col_node *src[5] = {col_attention_operand(g, q), col_attention_operand(g, kcache), col_attention_operand(g, vcache),
                        start, rows};
    int64_t shape[4] = {B, Hq, T, D};
    col_node *n = col_new_node(g, COL_OP_ATTENTION, COL_F32, 4, shape, rows ? 5 : 4, src);
    if (!n)
        return NULL;
    n->p.i[0] = 1; /* causal */
    n->p.i[1] = 1; /* rows */
    n->p.f[0] = scale > 0.0f ? scale : 1.0f / sqrtf((float)D);
    n->extra_bytes = sizeof(float) * (size_t)(B * Hq * T); /* logsumexp per row, as col_attention_cached */
    n->scratch_bytes = (size_t)col_max_threads() * col_attention_scratch_per_thread(D, false);
    return n;
}
