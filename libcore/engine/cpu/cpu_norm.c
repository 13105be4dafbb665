/* cpu_norm.c - CPU kernels: softmax, log_softmax, layernorm, rmsnorm and
 * their gradients, all over the last dimension.
 *
 * The builders make x and dy contiguous, so row r of every operand except the
 * softmax mask (an expanded view, read through its strides) starts at r * C.
 * Rows run in parallel; row sums are f32 `omp simd` reductions, and exp uses
 * glibc's vector expf (vmath.h). Nothing depends on the thread count: per-row results
 * are computed by one thread each, and the dw / db sums over rows go through
 * per-chunk partials whose chunking depends only on the row count.
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "vmath.h"

/* ---- softmax ---- */

/* y[0..S) = softmax over the first L entries of x (+ mask m with column
 * stride ms, if m), zeros after them. A row with no finite entry (all masked)
 * gives zeros, or NaN where an entry is NaN. */
static void softmax_row(const float *x, const float *m, int64_t ms, float *y, int64_t L, int64_t S)
{
    float mx = -INFINITY;
    const float *v = x;
    if (m) { /* y = x + mask, then work on y */
        if (ms == 1) {
#pragma omp simd
            for (int64_t j = 0; j < L; j++)
                y[j] = x[j] + m[j];
        } else {
            for (int64_t j = 0; j < L; j++)
                y[j] = x[j] + m[j * ms];
        }
        v = y;
    }
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < L; j++)
        mx = v[j] > mx ? v[j] : mx;
    if (mx == -INFINITY) { /* fully masked (or empty): zeros, keeping NaN */
        for (int64_t j = 0; j < L; j++)
            y[j] = isnan(v[j]) ? NAN : 0.0f;
    } else {
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < L; j++) {
            float e = expf(v[j] - mx);
            y[j] = e;
            s += e;
        }
        float inv = 1.0f / s;
#pragma omp simd
        for (int64_t j = 0; j < L; j++)
            y[j] *= inv;
    }
    if (S > L)
        memset(y + L, 0, sizeof(float) * (size_t)(S - L));
}

/* x: [..., T, S] (contiguous); mask: expanded to x's shape (any strides) */
static col_status k_softmax(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *x = n->src[0]->t.data;
    const col_tensor *mt = n->nsrc > 1 ? &n->src[1]->t : NULL;
    float *y = n->t.data;
    int64_t rows = col_rows(&n->t), S = col_cols(&n->t);
    int64_t T = n->t.ndim >= 2 ? n->t.shape[n->t.ndim - 2] : 1;
    bool causal = n->p.i[0] != 0;
    int64_t offset = n->p.i[1], ms = mt ? col_col_stride(mt) : 0;
#pragma omp parallel for schedule(static) if (rows * S > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        int64_t L = S; /* keys j < L are visible to this row's query */
        if (causal) {
            int64_t lim = r % T + offset + 1;
            L = lim < 0 ? 0 : lim < S ? lim : S;
        }
        const float *m = mt ? (const float *)mt->data + col_row_offset(mt, r) : NULL;
        softmax_row(x + r * S, m, ms, y + r * S, L, S);
    }
    return COL_OK;
}

/* src0 = y [rows, C], src1 = dy: dx = y * (dy - sum(dy * y)) */
static col_status k_softmax_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *y = n->src[0]->t.data, *dy = n->src[1]->t.data;
    float *dx = n->t.data;
    int64_t rows = col_rows(&n->t), C = col_cols(&n->t);
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * C, *dr = dy + r * C;
        float *o = dx + r * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++)
            s += dr[c] * yr[c];
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            o[c] = yr[c] * (dr[c] - s);
    }
    return COL_OK;
}

/* ---- log_softmax ---- */

/* y = x - max - log(sum(exp(x - max))) */
static col_status k_log_softmax(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *x = n->src[0]->t.data;
    float *y = n->t.data;
    int64_t rows = col_rows(&n->t), C = col_cols(&n->t);
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t c = 0; c < C; c++)
            mx = xr[c] > mx ? xr[c] : mx;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++)
            s += expf(xr[c] - mx);
        float ls = logf(s);
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = (xr[c] - mx) - ls;
    }
    return COL_OK;
}

/* src0 = y, src1 = dy: dx = dy - exp(y) * sum(dy) */
static col_status k_log_softmax_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *y = n->src[0]->t.data, *dy = n->src[1]->t.data;
    float *dx = n->t.data;
    int64_t rows = col_rows(&n->t), C = col_cols(&n->t);
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * C, *dr = dy + r * C;
        float *o = dx + r * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++)
            s += dr[c];
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            o[c] = dr[c] - expf(yr[c]) * s;
    }
    return COL_OK;
}

/* ---- layernorm / rmsnorm ---- */

/* mean and 1/sqrt(biased variance + eps) of x[0..C), two passes */
static inline void ln_stats(const float *x, int64_t C, float eps, float *mean, float *rstd)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++)
        s += x[c];
    float m = s / (float)C, v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)C + eps);
}

/* 1/sqrt(mean(x^2) + eps) */
static inline float rms_rstd(const float *x, int64_t C, float eps)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++)
        s += x[c] * x[c];
    return 1.0f / sqrtf(s / (float)C + eps);
}

/* x: [rows, C], w, b: [C] or absent; y = (x - mean) * rstd * w + b */
static col_status k_layernorm(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    bool hw = n->p.i[0] != 0, hb = n->p.i[1] != 0;
    const float *x = n->src[0]->t.data;
    const float *w = hw ? n->src[1]->t.data : NULL;
    const float *b = hb ? n->src[hw ? 2 : 1]->t.data : NULL;
    float eps = n->p.f[0], *y = n->t.data;
    int64_t rows = col_rows(&n->t), C = col_cols(&n->t);
    if (C == 0)
        return COL_OK;
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C, mean, rstd;
        ln_stats(xr, C, eps, &mean, &rstd);
        if (w && b) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
        } else if (w) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                yr[c] = (xr[c] - mean) * rstd * w[c];
        } else if (b) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                yr[c] = (xr[c] - mean) * rstd + b[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                yr[c] = (xr[c] - mean) * rstd;
        }
    }
    return COL_OK;
}

/* x: [rows, C], w: [C]; y = x * rstd * w */
static col_status k_rmsnorm(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *x = n->src[0]->t.data, *w = n->src[1]->t.data;
    float eps = n->p.f[0], *y = n->t.data;
    int64_t rows = col_rows(&n->t), C = col_cols(&n->t);
    if (C == 0)
        return COL_OK;
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C, rstd = rms_rstd(xr, C, eps);
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = xr[c] * rstd * w[c];
    }
    return COL_OK;
}

/* Where the parts of a packed [dx | dw | db] output and the chunk partials go. */
typedef struct {
    float *dx, *dw, *db;  /* NULL when not wanted */
    int parts;            /* partial sums per chunk: (dw != NULL) + (db != NULL) */
    int64_t nchunks;      /* row chunks; chunk k covers rows [rows*k/nchunks, rows*(k+1)/nchunks) */
    float *partial;       /* [nchunks][parts][C] in scratch */
} norm_bwd_out;

static col_status norm_bwd_layout(const col_node *n, const col_exec *ex, int64_t rows, int64_t C, norm_bwd_out *o,
                                  col_err *err)
{
    float *out = n->t.data;
    o->dx = n->p.i[1] ? out : NULL;
    out += n->p.i[1] ? rows * C : 0;
    o->dw = n->p.i[2] ? out : NULL;
    out += n->p.i[2] ? C : 0;
    o->db = n->p.i[3] ? out : NULL;
    o->parts = (o->dw != NULL) + (o->db != NULL);
    o->partial = ex->scratch;
    if (!o->parts) { /* dx only: one row per chunk */
        o->nchunks = rows;
        return COL_OK;
    }
    int64_t max_chunks = (int64_t)(n->scratch_bytes / (sizeof(float) * (size_t)o->parts * (size_t)C));
    if (max_chunks < 1 || ex->scratch_bytes < n->scratch_bytes)
        return col_err_set(err, COL_EINTERNAL, "%s: %zu bytes of scratch for C = %lld (node asked for %zu)",
                           col_op_name(n->op), ex->scratch_bytes, (long long)C, n->scratch_bytes);
    int64_t want = (rows + 3) / 4; /* at least ~4 rows per chunk */
    o->nchunks = want < max_chunks ? want : max_chunks;
    return COL_OK;
}

/* dw[c] (and db[c]) = sum over chunks, in chunk order */
static void norm_bwd_reduce(const norm_bwd_out *o, int64_t C, int nt)
{
    int64_t nch = o->nchunks, stride = (int64_t)o->parts * C;
#pragma omp parallel for schedule(static) if (nch * stride > COL_PAR_MIN) num_threads(nt)
    for (int64_t c0 = 0; c0 < C; c0 += 256) {
        int64_t c1 = c0 + 256 < C ? c0 + 256 : C;
        for (int p = 0; p < o->parts; p++) {
            float *dst = p == 0 && o->dw ? o->dw : o->db;
            for (int64_t c = c0; c < c1; c++)
                dst[c] = 0.0f;
            for (int64_t k = 0; k < nch; k++) {
                const float *src = o->partial + k * stride + (int64_t)p * C;
#pragma omp simd
                for (int64_t c = c0; c < c1; c++)
                    dst[c] += src[c];
            }
        }
    }
}

/* src0 = x, src1 = w (if i[0]), then dy. With xh = (x - mean) * rstd and
 * g = dy * w: dx = rstd * (g - mean(g) - xh * mean(g * xh)),
 * dw = sum_rows(dy * xh), db = sum_rows(dy). */
static col_status k_layernorm_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    bool hw = n->p.i[0] != 0;
    const col_tensor *xt = &n->src[0]->t;
    const float *x = xt->data, *w = hw ? n->src[1]->t.data : NULL, *dy = n->src[hw ? 2 : 1]->t.data;
    float eps = n->p.f[0];
    int64_t rows = col_rows(xt), C = col_cols(xt);
    if (C == 0)
        return COL_OK;
    norm_bwd_out o;
    col_status st = norm_bwd_layout(n, ex, rows, C, &o, err);
    if (st != COL_OK)
        return st;
    int64_t nch = o.nchunks;
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t k = 0; k < nch; k++) {
        float *pdw = o.dw ? o.partial + k * o.parts * C : NULL;
        float *pdb = o.db ? o.partial + k * o.parts * C + (o.dw ? C : 0) : NULL;
        if (pdw)
            memset(pdw, 0, sizeof(float) * (size_t)C);
        if (pdb)
            memset(pdb, 0, sizeof(float) * (size_t)C);
        for (int64_t r = rows * k / nch; r < rows * (k + 1) / nch; r++) {
            const float *xr = x + r * C, *dr = dy + r * C;
            float mean, rstd;
            ln_stats(xr, C, eps, &mean, &rstd);
            if (o.dx) {
                float sg = 0.0f, sgx = 0.0f;
                float *dxr = o.dx + r * C;
                if (w) {
#pragma omp simd reduction(+ : sg, sgx)
                    for (int64_t c = 0; c < C; c++) {
                        float g = dr[c] * w[c];
                        sg += g;
                        sgx += g * ((xr[c] - mean) * rstd);
                    }
                } else {
#pragma omp simd reduction(+ : sg, sgx)
                    for (int64_t c = 0; c < C; c++) {
                        sg += dr[c];
                        sgx += dr[c] * ((xr[c] - mean) * rstd);
                    }
                }
                float a = sg / (float)C, bb = sgx / (float)C;
                if (w) {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++)
                        dxr[c] = rstd * (dr[c] * w[c] - a - (xr[c] - mean) * rstd * bb);
                } else {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++)
                        dxr[c] = rstd * (dr[c] - a - (xr[c] - mean) * rstd * bb);
                }
            }
            if (pdw) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++)
                    pdw[c] += dr[c] * ((xr[c] - mean) * rstd);
            }
            if (pdb) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++)
                    pdb[c] += dr[c];
            }
        }
    }
    if (o.parts)
        norm_bwd_reduce(&o, C, col_cpu_threads(ex));
    return COL_OK;
}

/* src0 = x, src1 = w, src2 = dy. With xh = x * rstd and g = dy * w:
 * dx = rstd * (g - xh * mean(g * xh)), dw = sum_rows(dy * xh). */
static col_status k_rmsnorm_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_tensor *xt = &n->src[0]->t;
    const float *x = xt->data, *w = n->src[1]->t.data, *dy = n->src[2]->t.data;
    float eps = n->p.f[0];
    int64_t rows = col_rows(xt), C = col_cols(xt);
    if (C == 0)
        return COL_OK;
    norm_bwd_out o;
    col_status st = norm_bwd_layout(n, ex, rows, C, &o, err);
    if (st != COL_OK)
        return st;
    int64_t nch = o.nchunks;
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t k = 0; k < nch; k++) {
        float *pdw = o.dw ? o.partial + k * C : NULL;
        if (pdw)
            memset(pdw, 0, sizeof(float) * (size_t)C);
        for (int64_t r = rows * k / nch; r < rows * (k + 1) / nch; r++) {
            const float *xr = x + r * C, *dr = dy + r * C;
            float rstd = rms_rstd(xr, C, eps);
            if (o.dx) {
                float *dxr = o.dx + r * C;
                float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
                for (int64_t c = 0; c < C; c++)
                    sgx += dr[c] * w[c] * (xr[c] * rstd);
                float bb = sgx / (float)C;
#pragma omp simd
                for (int64_t c = 0; c < C; c++)
                    dxr[c] = rstd * (dr[c] * w[c] - xr[c] * rstd * bb);
            }
            if (pdw) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++)
                    pdw[c] += dr[c] * (xr[c] * rstd);
            }
        }
    }
    if (o.parts)
        norm_bwd_reduce(&o, C, col_cpu_threads(ex));
    return COL_OK;
}

void col_cpu_register_norm(col_backend *be)
{
    be->kernel[COL_OP_SOFTMAX] = k_softmax;
    be->kernel[COL_OP_SOFTMAX_BWD] = k_softmax_bwd;
    be->kernel[COL_OP_LOG_SOFTMAX] = k_log_softmax;
    be->kernel[COL_OP_LOG_SOFTMAX_BWD] = k_log_softmax_bwd;
    be->kernel[COL_OP_LAYERNORM] = k_layernorm;
    be->kernel[COL_OP_LAYERNORM_BWD] = k_layernorm_bwd;
    be->kernel[COL_OP_RMSNORM] = k_rmsnorm;
    be->kernel[COL_OP_RMSNORM_BWD] = k_rmsnorm_bwd;
}
