/* cpu_nn.c - CPU kernels: embedding (+ its dense scatter-add gradient),
 * rotary position embedding, fused cross-entropy and per-token
 * log-probabilities (+ their gradients).
 *
 * Every output element has one owning thread and a fixed summation order,
 * so results do not depend on the number of threads. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "vmath.h"

/* element i of a contiguous i32/i64 tensor */
static inline int64_t index_at(const col_tensor *t, int64_t i)
{
    return t->dtype == COL_I32 ? (int64_t)((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

static inline size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* ---- embedding ---- */

static col_status check_ids(const char *op, const col_tensor *ids, int64_t V, col_err *err)
{
    int64_t N = col_numel(ids);
    for (int64_t i = 0; i < N; i++) {
        int64_t id = index_at(ids, i);
        if (id < 0 || id >= V)
            return col_err_set(err, COL_EINVAL, "%s: token id %lld at position %lld is outside the vocabulary (0..%lld)",
                               op, (long long)id, (long long)i, (long long)(V - 1));
    }
    return COL_OK;
}

/* out [N, C] = weight[ids[n], :]; weight rows may be strided, columns unit-stride */
static col_status k_embedding(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *w = &n->src[0]->t, *ids = &n->src[1]->t;
    int64_t V = w->shape[0], C = w->shape[1], N = col_numel(ids), ws = w->stride[0];
    col_status st = check_ids("embedding", ids, V, err);
    if (st != COL_OK)
        return st;
    const char *wd = w->data;
    size_t es = col_dtype_size(w->dtype);
    float *out = n->t.data;
    if (col_dtype_is_quant(w->dtype)) { /* rows decoded (cpu_quant.c) */
        col_cpu_embedding_quant(w, ids, out, col_cpu_threads(ex));
        return COL_OK;
    }
#pragma omp parallel for schedule(static) if (N * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < N; r++) /* a copy for f32 rows */
        col_convert(out + r * C, COL_F32, wd + index_at(ids, r) * ws * (int64_t)es, w->dtype, C);
    return COL_OK;
}

/* dw [V, C] = 0, then dw[ids[r], :] += dy[r, :] for r in order. Threads own
 * column blocks of C, so each element is summed by one thread in row order. */
static col_status k_embedding_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *ids = &n->src[0]->t, *dy = &n->src[1]->t;
    int64_t V = n->p.i[0], C = n->t.shape[1], N = col_numel(ids);
    col_status st = check_ids("embedding_bwd", ids, V, err);
    if (st != COL_OK)
        return st;
    float *dw = n->t.data;
    const float *g = dy->data;
#pragma omp parallel for schedule(static) if (V * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t v = 0; v < V; v++)
        memset(dw + v * C, 0, sizeof(float) * (size_t)C);
    int64_t nt = col_max_threads();
    int64_t cb = (C + nt - 1) / nt;
    cb = cb < 16 ? 16 : (cb + 15) & ~(int64_t)15;
    int64_t nb = (C + cb - 1) / cb;
#pragma omp parallel for schedule(static) if (N * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t b = 0; b < nb; b++) {
        int64_t c0 = b * cb, c1 = c0 + cb < C ? c0 + cb : C;
        for (int64_t r = 0; r < N; r++) {
            float *o = dw + index_at(ids, r) * C;
            const float *d = g + r * C;
#pragma omp simd
            for (int64_t c = c0; c < c1; c++)
                o[c] += d[c];
        }
    }
    return COL_OK;
}

/* ---- rotary position embedding ---- */

/* x [B, H, T, D] (unit last-dim stride), pos [T] or [B, T] -> out [B, H, T, D].
 * For i < half = rd/2, with a = pos * inv_freq[i] (f32) and s = -1 if inverse:
 *   out[i]      = x[i] cos a - x[i+half] sin(s a)
 *   out[i+half] = x[i+half] cos a + x[i] sin(s a);   dims >= rd pass through. */
static col_status k_rope(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *x = &n->src[0]->t, *pt = &n->src[1]->t;
    int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2], D = x->shape[3];
    int64_t rd = n->p.i[0], half = rd / 2;
    bool inverse = n->p.i[1] != 0;
    int64_t P = pt->ndim == 2 ? pt->shape[0] : 1;
    size_t need = align64(sizeof(float) * (size_t)half) + 2 * align64(sizeof(float) * (size_t)(P * T * half)) +
                  2 * sizeof(int64_t) * (size_t)P;
    if (ex->scratch_bytes < need)
        return col_err_set(err, COL_EINTERNAL, "rope: %zu bytes of scratch, %zu needed", ex->scratch_bytes, need);
    char *sp = ex->scratch;
    float *inv = (float *)sp;
    float *ctab = (float *)(sp + align64(sizeof(float) * (size_t)half));
    float *stab = (float *)((char *)ctab + align64(sizeof(float) * (size_t)(P * T * half)));
    int64_t *map = (int64_t *)((char *)stab + align64(sizeof(float) * (size_t)(P * T * half)));
    int64_t *uniq = map + P; /* uniq[k]: the position row of table k */
    col_rope_inv_freq(&n->p, rd, inv);

    /* one table per distinct position row (usually all B rows are equal) */
    size_t es = col_dtype_size(pt->dtype), rowb = (size_t)T * es;
    const char *pd = pt->data;
    int64_t nd = 0;
    for (int64_t b = 0; b < P; b++) {
        int64_t k = 0;
        while (k < nd && memcmp(pd + b * rowb, pd + uniq[k] * rowb, rowb) != 0)
            k++;
        if (k == nd)
            uniq[nd++] = b;
        map[b] = k;
    }
#pragma omp parallel for schedule(static) if (nd * T * half > 4096) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < nd * T; r++) {
        float pos = (float)index_at(pt, uniq[r / T] * T + r % T);
        float *c = ctab + r * half, *s = stab + r * half;
        for (int64_t i = 0; i < half; i++) {
            float a = pos * inv[i];
            c[i] = cosf(a);
            s[i] = inverse ? -sinf(a) : sinf(a);
        }
    }

    const float *xd = x->data;
    float *out = n->t.data;
    int64_t rows = B * H * T;
#pragma omp parallel for schedule(static) if (rows * D > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % T, h = (r / T) % H, b = r / (T * H);
        const float *xr = xd + b * x->stride[0] + h * x->stride[1] + t * x->stride[2];
        float *o = out + r * D;
        int64_t tr = map[P == 1 ? 0 : b] * T + t;
        const float *c = ctab + tr * half, *s = stab + tr * half;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
            float x1 = xr[i], x2 = xr[i + half];
            o[i] = x1 * c[i] - x2 * s[i];
            o[i + half] = x2 * c[i] + x1 * s[i];
        }
        for (int64_t i = rd; i < D; i++)
            o[i] = xr[i];
    }
    return COL_OK;
}

/* ---- cross-entropy ---- */

#define CE_BLOCK 512

/* logsumexp of one row in a single streaming pass: per block of CE_BLOCK
 * (L1-resident) take the block max, rescale the running sum if the max grew,
 * then add the block's exp(x - max). */
static float row_logsumexp(const float *x, int64_t V)
{
    float m = -INFINITY;
    double s = 0.0;
    for (int64_t b0 = 0; b0 < V; b0 += CE_BLOCK) {
        int64_t len = V - b0 < CE_BLOCK ? V - b0 : CE_BLOCK;
        const float *xb = x + b0;
        float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
        for (int64_t i = 0; i < len; i++)
            bm = xb[i] > bm ? xb[i] : bm;
        if (bm > m) {
            s *= exp((double)m - (double)bm);
            m = bm;
        }
        if (m == -INFINITY)
            continue; /* all -inf so far: contributes nothing */
        float bs = 0.0f;
#pragma omp simd reduction(+ : bs)
        for (int64_t i = 0; i < len; i++)
            bs += expf(xb[i] - m);
        s += bs;
    }
    return (float)((double)m + log(s));
}

/* every target of [N] is ign or in [0, V); *count: the rows not ignored */
static col_status check_targets(const char *op, const col_tensor *tt, int64_t V, int64_t ign, int64_t *count,
                                col_err *err)
{
    int64_t N = col_numel(tt), c = 0;
    for (int64_t r = 0; r < N; r++) {
        int64_t t = index_at(tt, r);
        if (t == ign)
            continue;
        if (t < 0 || t >= V)
            return col_err_set(err, COL_EINVAL,
                               "%s: target %lld at row %lld is outside the classes (0..%lld) and is not "
                               "ignore_index (%lld)",
                               op, (long long)t, (long long)r, (long long)(V - 1), (long long)ign);
        c++;
    }
    *count = c;
    return COL_OK;
}

/* logits [N, V], targets [N] -> mean over counted rows of lse - x[target];
 * extra: lse [N] f32, count (int64 at byte offset p.i[1]) */
static col_status k_cross_entropy(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0];
    const float *x = lt->data;
    float *lse = col_extra(n);
    int64_t count = 0;
    col_status st = check_targets("cross_entropy", tt, V, ign, &count, err);
    if (st != COL_OK)
        return st;
#pragma omp parallel for schedule(static) if (N * V > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < N; r++)
        lse[r] = index_at(tt, r) == ign ? 0.0f : row_logsumexp(x + r * V, V);
    double sum = 0.0;
    for (int64_t r = 0; r < N; r++) {
        int64_t t = index_at(tt, r);
        if (t != ign)
            sum += (double)lse[r] - (double)x[r * V + t];
    }
    *(int64_t *)((char *)lse + n->p.i[1]) = count;
    *(float *)n->t.data = count ? (float)(sum / (double)count) : NAN; /* all ignored: 0/0 like PyTorch */
    return COL_OK;
}

/* dlogits [N, V] = (softmax(row) - onehot(target)) * dloss / count; ignored rows 0 */
static col_status k_cross_entropy_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    const col_node *ce = n->src[2];
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0];
    const float *x = lt->data, *lse = col_extra(ce);
    int64_t count = *(const int64_t *)((const char *)lse + ce->p.i[1]);
    float scale = count ? ((const float *)n->src[3]->t.data)[0] / (float)count : 0.0f;
    float *out = n->t.data;
#pragma omp parallel for schedule(static) if (N * V > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < N; r++) {
        float *o = out + r * V;
        int64_t t = index_at(tt, r);
        if (t == ign) {
            memset(o, 0, sizeof(float) * (size_t)V);
            continue;
        }
        const float *xr = x + r * V;
        float l = lse[r];
#pragma omp simd
        for (int64_t j = 0; j < V; j++)
            o[j] = expf(xr[j] - l) * scale;
        if (t >= 0 && t < V) /* checked by the forward kernel */
            o[t] -= scale;
    }
    return COL_OK;
}

/* ---- per-token log-probabilities ---- */

/* logits [N, V], targets [N] -> out [N] = x[target] - lse (0 where ignored); extra: lse [N] f32 */
static col_status k_token_logprob(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0], count;
    col_status st = check_targets("token_logprob", tt, V, ign, &count, err);
    if (st != COL_OK)
        return st;
    const float *x = lt->data;
    float *out = n->t.data, *lse = col_extra(n);
#pragma omp parallel for schedule(static) if (N * V > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < N; r++) {
        int64_t t = index_at(tt, r);
        if (t == ign) {
            lse[r] = 0.0f;
            out[r] = 0.0f;
            continue;
        }
        float l = row_logsumexp(x + r * V, V);
        lse[r] = l;
        out[r] = x[r * V + t] - l;
    }
    return COL_OK;
}

/* dlogits [N, V] = d[r] (onehot(target) - softmax(row)); ignored rows (and, never reached after the forward's
 * check, out-of-range targets) 0 */
static col_status k_token_logprob_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *lt = &n->src[0]->t, *tt = &n->src[1]->t;
    int64_t N = lt->shape[0], V = lt->shape[1], ign = n->p.i[0];
    const float *x = lt->data, *lse = col_extra(n->src[2]), *d = n->src[3]->t.data;
    float *out = n->t.data;
#pragma omp parallel for schedule(static) if (N * V > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < N; r++) {
        float *o = out + r * V;
        int64_t t = index_at(tt, r);
        if (t == ign || t < 0 || t >= V) {
            memset(o, 0, sizeof(float) * (size_t)V);
            continue;
        }
        const float *xr = x + r * V;
        float l = lse[r], g = d[r];
#pragma omp simd
        for (int64_t j = 0; j < V; j++)
            o[j] = -(expf(xr[j] - l) * g);
        o[t] += g;
    }
    return COL_OK;
}

void col_cpu_register_nn(col_backend *be)
{
    be->kernel[COL_OP_EMBEDDING] = k_embedding;
    be->kernel[COL_OP_EMBEDDING_BWD] = k_embedding_bwd;
    be->kernel[COL_OP_ROPE] = k_rope;
    be->kernel[COL_OP_CROSS_ENTROPY] = k_cross_entropy;
    be->kernel[COL_OP_CROSS_ENTROPY_BWD] = k_cross_entropy_bwd;
    be->kernel[COL_OP_TOKEN_LOGPROB] = k_token_logprob;
    be->kernel[COL_OP_TOKEN_LOGPROB_BWD] = k_token_logprob_bwd;
}
