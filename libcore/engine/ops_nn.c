/* ops_nn.c - transformer pieces: token embedding, rotary position embedding
 * (RoPE), fused cross-entropy and per-token log-probabilities; their
 * gradients are in ops_nn_bwd.c.
 *
 * Kernels are in cpu_nn.c. Integer sources (token ids, positions, targets)
 * are made contiguous here so the kernels can index them flat. */
#include "backend.h"
#include "graph_internal.h"

#include <math.h>
#include <string.h>

static bool is_index_dtype(col_dtype dt) { return dt == COL_I32 || dt == COL_I64; }

/* ---- embedding ---- */

/* weight: [V, C] f32, bf16, f16 or quantized, ids: [...] i32/i64 -> [..., C] f32 (16-bit rows are converted
 * and quantized rows decoded as they are read, so a large low-precision table is never cast whole) */
col_node *col_embedding(col_graph *g, col_node *weight, col_node *ids)
{
    if (!weight || !ids)
        return NULL;
    char b1[96], b2[96];
    col_dtype wt = weight->t.dtype;
    if (!col_check(g, col_dtype_is_float(wt) || col_dtype_is_quant(wt), COL_EDTYPE,
                   "embedding: weight must be f32, bf16 or f16 (or quantized), got %s",
                   col_dtype_name(weight->t.dtype)) ||
        !col_check(g, weight->t.ndim == 2, COL_ESHAPE, "embedding: weight must be [V, C], got %s",
                   col_shape_str(&weight->t, b1, sizeof b1)) ||
        !col_check(g, is_index_dtype(ids->t.dtype), COL_EDTYPE, "embedding: token ids must be i32 or i64, got %s",
                   col_dtype_name(ids->t.dtype)) ||
        !col_check(g, ids->t.ndim < COL_MAX_DIMS, COL_ESHAPE, "embedding: ids %s have too many dims (at most %d)",
                   col_shape_str(&ids->t, b2, sizeof b2), COL_MAX_DIMS - 1))
        return NULL;
    /* quantized rows are decoded whole: unit stride along C, whole blocks from row to row */
    int64_t blk = col_dtype_block(wt);
    if (col_dtype_is_quant(wt) &&
        !col_check(g, weight->t.stride[1] == 1 && weight->t.shape[1] % blk == 0 && weight->t.stride[0] % blk == 0,
                   COL_ESHAPE, "embedding: a quantized (%s) table %s needs contiguous rows of whole blocks of %lld",
                   col_dtype_name(wt), col_shape_str(&weight->t, b1, sizeof b1), (long long)blk))
        return NULL;
    /* rows are read with weight's row stride; columns must be unit-stride */
    if (weight->t.stride[1] != 1 && weight->t.shape[1] > 1)
        weight = col_contiguous(g, weight);
    ids = col_contiguous(g, ids);
    if (!weight || !ids)
        return NULL;
    int64_t shape[COL_MAX_DIMS];
    memcpy(shape, ids->t.shape, sizeof(int64_t) * (size_t)ids->t.ndim);
    shape[ids->t.ndim] = weight->t.shape[1];
    col_node *src[2] = {weight, ids};
    return col_new_node(g, COL_OP_EMBEDDING, COL_F32, ids->t.ndim + 1, shape, 2, src);
}

/* ---- rotary position embedding ---- */

/* x: [B, H, T, D] with unit last-dim stride; pos: [T] or [B, T]; params set */
col_node *col_rope_node(col_graph *g, col_node *x, col_node *pos, const col_op_params *p)
{
    if (x && x->t.stride[3] != 1 && x->t.shape[3] > 1)
        x = col_contiguous(g, x);
    if (!x || !pos)
        return NULL;
    col_node *src[2] = {x, pos};
    col_node *n = col_new_node(g, COL_OP_ROPE, COL_F32, 4, x->t.shape, 2, src);
    if (!n)
        return NULL;
    n->p = *p;
    /* scratch (cpu_nn.c): inv_freq [half], cos and sin tables [P, T, half]
     * (one per distinct position row), two row maps [P] */
    int64_t half = p->i[0] / 2, T = x->t.shape[2];
    int64_t P = pos->t.ndim == 2 ? pos->t.shape[0] : 1;
    n->scratch_bytes = sizeof(float) * (size_t)(half + 2 * P * T * half) + 2 * sizeof(int64_t) * (size_t)P + 192;
    return n;
}

col_node *col_rope(col_graph *g, col_node *x, col_node *pos, const col_rope_cfg *cfg)
{
    if (!x || !pos)
        return NULL;
    char b1[96], b2[96];
    if (!col_check(g, cfg != NULL, COL_EINVAL, "rope: no configuration given") ||
        !col_check(g, x->t.dtype == COL_F32, COL_EDTYPE, "rope: x must be f32, got %s", col_dtype_name(x->t.dtype)) ||
        !col_check(g, x->t.ndim == 4, COL_ESHAPE, "rope: x must be [B, H, T, D], got %s",
                   col_shape_str(&x->t, b1, sizeof b1)) ||
        !col_check(g, is_index_dtype(pos->t.dtype), COL_EDTYPE, "rope: positions must be i32 or i64, got %s",
                   col_dtype_name(pos->t.dtype)))
        return NULL;
    int64_t B = x->t.shape[0], T = x->t.shape[2], D = x->t.shape[3];
    bool pos_ok = (pos->t.ndim == 1 && pos->t.shape[0] == T) ||
                  (pos->t.ndim == 2 && pos->t.shape[0] == B && pos->t.shape[1] == T);
    int64_t rd = cfg->rotary_dims ? cfg->rotary_dims : D;
    if (!col_check(g, pos_ok, COL_ESHAPE, "rope: positions %s do not match x %s (expected [T] or [B, T])",
                   col_shape_str(&pos->t, b1, sizeof b1), col_shape_str(&x->t, b2, sizeof b2)) ||
        !col_check(g, rd > 0 && rd % 2 == 0 && rd <= D, COL_EINVAL,
                   "rope: rotary dims %lld must be even, positive and at most the head dim %lld", (long long)rd,
                   (long long)D) ||
        !col_check(g, cfg->theta > 0.0f, COL_EINVAL, "rope: theta %g must be positive", (double)cfg->theta))
        return NULL;
    if (cfg->llama3_factor > 0.0f &&
        !col_check(g, cfg->llama3_low_freq_factor > 0.0f &&
                          cfg->llama3_high_freq_factor > cfg->llama3_low_freq_factor &&
                          cfg->llama3_original_max_pos > 0.0f,
                   COL_EINVAL,
                   "rope: LLaMA-3 scaling needs 0 < low_freq_factor < high_freq_factor and original max positions > 0 "
                   "(got %g, %g, %g)",
                   (double)cfg->llama3_low_freq_factor, (double)cfg->llama3_high_freq_factor,
                   (double)cfg->llama3_original_max_pos))
        return NULL;
    col_op_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = rd;
    p.i[1] = 0;
    p.f[0] = cfg->theta;
    if (cfg->llama3_factor > 0.0f) {
        p.f[1] = cfg->llama3_factor;
        p.f[2] = cfg->llama3_low_freq_factor;
        p.f[3] = cfg->llama3_high_freq_factor;
        p.f[4] = cfg->llama3_original_max_pos;
    }
    return col_rope_node(g, x, col_contiguous(g, pos), &p);
}

/* ---- cross-entropy ---- */

/* Bytes of the saved data: per-row logsumexp [N] f32, then the count of
 * counted rows as an int64 at an 8-byte aligned offset. */
static size_t ce_count_offset(int64_t N) { return ((size_t)N * sizeof(float) + 7) & ~(size_t)7; }

/* logits [..., V] f32 and targets [...] i32/i64 of the same leading dims, for op (cross_entropy,
 * token_logprob); false with the graph's error set if not */
static bool check_logits_targets(col_graph *g, const char *op, const col_node *logits, const col_node *targets)
{
    char b1[96], b2[96];
    if (!col_check(g, logits->t.dtype == COL_F32, COL_EDTYPE, "%s: logits must be f32, got %s", op,
                   col_dtype_name(logits->t.dtype)) ||
        !col_check(g, is_index_dtype(targets->t.dtype), COL_EDTYPE, "%s: targets must be i32 or i64, got %s", op,
                   col_dtype_name(targets->t.dtype)) ||
        !col_check(g, logits->t.ndim >= 1, COL_ESHAPE, "%s: logits must have a class dim, got a scalar", op))
        return false;
    bool same = targets->t.ndim == logits->t.ndim - 1;
    for (int i = 0; same && i < targets->t.ndim; i++)
        same = targets->t.shape[i] == logits->t.shape[i];
    return col_check(g, same, COL_ESHAPE, "%s: targets %s do not match logits %s (expected logits [..., V], "
                     "targets [...])", op,
                     col_shape_str(&targets->t, b1, sizeof b1), col_shape_str(&logits->t, b2, sizeof b2));
}

/* logits as contiguous [N, V] and targets as contiguous [N] into src[0..1]; false on a graph error */
static bool rows_of(col_graph *g, col_node *logits, col_node *targets, col_node **src)
{
    int64_t V = logits->t.shape[logits->t.ndim - 1];
    int64_t N = col_numel(&targets->t);
    if (logits->t.ndim != 2) {
        int64_t s2[2] = {N, V};
        logits = col_reshape(g, logits, 2, s2);
        targets = col_reshape(g, targets, 1, &N);
    }
    src[0] = col_contiguous(g, logits);
    src[1] = col_contiguous(g, targets);
    return src[0] && src[1];
}

/* logits: [..., V] f32, targets: [...] i32/i64 -> scalar. Class dim last
 * (like F.cross_entropy(logits.view(-1, V), targets.view(-1))). Rows whose
 * target is ignore_index do not count; if every row is ignored the mean is
 * 0/0 = NaN, as in PyTorch. */
col_node *col_cross_entropy(col_graph *g, col_node *logits, col_node *targets, int64_t ignore_index)
{
    if (!logits || !targets || !check_logits_targets(g, "cross_entropy", logits, targets))
        return NULL;
    int64_t N = col_numel(&targets->t);
    col_node *src[2];
    if (!rows_of(g, logits, targets, src))
        return NULL;
    col_node *n = col_new_node(g, COL_OP_CROSS_ENTROPY, COL_F32, 0, NULL, 2, src);
    if (!n)
        return NULL;
    n->p.i[0] = ignore_index;
    n->p.i[1] = (int64_t)ce_count_offset(N); /* byte offset of the count in the extra area */
    n->extra_bytes = ce_count_offset(N) + sizeof(int64_t);
    return n;
}

/* ---- per-token log-probabilities ---- */

/* logits: [..., V] f32, targets: [...] i32/i64 -> f32 [...] (the targets' shape):
 * log_softmax(logits)[target] (torch: log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]),
 * 0 where target == ignore_index. One node over rows [N, V]; the extra area keeps
 * each row's logsumexp for the backward. */
col_node *col_token_logprob(col_graph *g, col_node *logits, col_node *targets, int64_t ignore_index)
{
    if (!logits || !targets || !check_logits_targets(g, "token_logprob", logits, targets))
        return NULL;
    int64_t N = col_numel(&targets->t);
    int nd = targets->t.ndim;
    int64_t shape[COL_MAX_DIMS];
    memcpy(shape, targets->t.shape, sizeof(int64_t) * (size_t)nd);
    col_node *src[2];
    if (!rows_of(g, logits, targets, src))
        return NULL;
    col_node *n = col_new_node(g, COL_OP_TOKEN_LOGPROB, COL_F32, nd, shape, 2, src);
    if (!n)
        return NULL;
    n->p.i[0] = ignore_index;
    n->extra_bytes = sizeof(float) * (size_t)N;
    return n;
}

/* inv_freq[i], i < rd/2, in f32 exactly as Hugging Face transformers computes
 * it: 1 / theta^(2i/rd), then LLaMA-3 scaling (_compute_llama3_parameters)
 * if p->f[1] > 0. torch evaluates `2*pi / t` as reciprocal(t) * 2*pi and
 * `orig / t` as reciprocal(t) * orig; mirrored here. */
void col_rope_inv_freq(const col_op_params *p, int64_t rd, float *inv)
{
    int64_t half = rd / 2;
    float theta = p->f[0];
    for (int64_t i = 0; i < half; i++)
        inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)rd);
    if (!(p->f[1] > 0.0f))
        return;
    float factor = p->f[1], low = p->f[2], high = p->f[3], orig = p->f[4];
    float low_wl = orig / low, high_wl = orig / high;
    for (int64_t i = 0; i < half; i++) {
        float f = inv[i];
        float wl = (1.0f / f) * (float)6.283185307179586;
        if (wl > low_wl) {
            inv[i] = f / factor;                        /* low frequencies: interpolate fully */
        } else if (!(wl < high_wl)) {                   /* medium band: blend */
            float smooth = ((1.0f / wl) * orig - low) / (high - low);
            inv[i] = (1.0f - smooth) * f / factor + smooth * f;
        }                                               /* high frequencies: unchanged */
    }
}
