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
    (void)ex, (void)err;
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

/* ---- log_softmax ---- */

/* y = x - max - log(sum(exp(x - max))) */
static col_status k_log_softmax(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex, (void)err;
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

/* ---- the gradients of softmax and log_softmax ----
 * Both are a row sum then an elementwise pass. As with the norms below, a
 * flag (`is_log`) passed as a constant to an always-inlined row routine gives
 * each op its own copy with exactly the operations of its formula. */
#define ROW_INLINE static inline __attribute__((always_inline))

/* softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy) */
ROW_INLINE void softmax_bwd_row(const float *yr, const float *dr, float *o, int64_t C, bool is_log)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++)
        s += is_log ? dr[c] : dr[c] * yr[c];
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
        o[c] = is_log ? dr[c] - expf(yr[c]) * s : yr[c] * (dr[c] - s);
}

static void sm_bwd(const float *yr, const float *dr, float *o, int64_t C) { softmax_bwd_row(yr, dr, o, C, false); }
static void log_sm_bwd(const float *yr, const float *dr, float *o, int64_t C) { softmax_bwd_row(yr, dr, o, C, true); }

/* SOFTMAX_BWD and LOG_SOFTMAX_BWD: src0 = y [rows, C], src1 = dy */
static col_status k_softmax_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex, (void)err;
    void (*row)(const float *, const float *, float *, int64_t) = n->op == COL_OP_LOG_SOFTMAX_BWD ? log_sm_bwd : sm_bwd;
    const float *y = n->src[0]->t.data, *dy = n->src[1]->t.data;
    float *dx = n->t.data;
    int64_t rows = col_rows(&n->t), C = col_cols(&n->t);
#pragma omp parallel for schedule(static) if (rows * C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++)
        row(y + r * C, dy + r * C, dx + r * C, C);
    return COL_OK;
}

/* ---- layernorm / rmsnorm ----
 *
 * rmsnorm is layernorm without the centring and without a bias: one set of
 * row routines serves both, with a flag `center` (false: no mean, and x
 * where layernorm has x - mean). The row routines are always inlined into
 * one wrapper per op that passes `center` as a constant, so each op gets its
 * own copy with exactly the operations of its formula (rmsnorm's holds no
 * "- mean" at all); the kernel picks the wrapper by op. */

/* x - mean, or x itself when not centring */
ROW_INLINE float centred(float x, float mean, bool center) { return center ? x - mean : x; }

/* centre: mean and 1/sqrt(biased variance + eps) of x[0..C), two passes;
 * otherwise mean 0 and 1/sqrt(mean(x^2) + eps) */
ROW_INLINE void norm_stats(const float *x, int64_t C, float eps, bool center, float *mean, float *rstd)
{
    float m = 0.0f, v = 0.0f;
    if (center) {
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++)
            s += x[c];
        m = s / (float)C;
    }
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; c++) {
        float d = centred(x[c], m, center);
        v += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)C + eps);
}

/* The operands of a norm node, x and dy [rows, C] (contiguous); w, b, dy
 * NULL when absent. Forward sources: x, then w if i[0], then b if i[1]
 * (rmsnorm: x, w). Backward: x, then w if i[0], then dy (rmsnorm: x, w, dy). */
typedef struct {
    const float *x, *w, *b, *dy;
    float eps;
    int64_t rows, C;
} norm_args;

static norm_args norm_args_of(const col_node *n, bool center, bool bwd)
{
    const col_tensor *xt = &n->src[0]->t;
    bool hw = !center || n->p.i[0] != 0;
    int next = hw ? 2 : 1;
    norm_args a = {.x = xt->data, .w = hw ? n->src[1]->t.data : NULL, .eps = n->p.f[0], .rows = col_rows(xt),
                   .C = col_cols(xt)};
    if (bwd)
        a.dy = n->src[next]->t.data;
    else if (center && n->p.i[1])
        a.b = n->src[next]->t.data;
    return a;
}

/* row r: y = (x - mean) * rstd * w + b, without w / b where absent (rmsnorm: y = x * rstd * w) */
ROW_INLINE void norm_row(const norm_args *a, int64_t r, float *y, bool center)
{
    const float *w = a->w, *b = a->b;
    int64_t C = a->C;
    const float *xr = a->x + r * C;
    float *yr = y + r * C, mean, rstd;
    norm_stats(xr, C, a->eps, center, &mean, &rstd);
    if (w && b) {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = centred(xr[c], mean, center) * rstd * w[c] + b[c];
    } else if (w) {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = centred(xr[c], mean, center) * rstd * w[c];
    } else if (b) {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = centred(xr[c], mean, center) * rstd + b[c];
    } else {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = centred(xr[c], mean, center) * rstd;
    }
}

static void ln_row(const norm_args *a, int64_t r, float *y) { norm_row(a, r, y, true); }
static void rms_row(const norm_args *a, int64_t r, float *y) { norm_row(a, r, y, false); }

/* LAYERNORM and RMSNORM */
static col_status k_norm(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex, (void)err;
    bool center = n->op == COL_OP_LAYERNORM;
    void (*row)(const norm_args *, int64_t, float *) = center ? ln_row : rms_row;
    norm_args a = norm_args_of(n, center, false);
    if (a.C == 0)
        return COL_OK;
#pragma omp parallel for schedule(static) if (a.rows * a.C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < a.rows; r++)
        row(&a, r, n->t.data);
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

/* dx of one row. With xh = (x - mean) * rstd and g = dy * w (dy without w):
 * dx = rstd * (g - mean(g) - xh * mean(g * xh)); not centring, xh = x * rstd
 * and there is no mean(g) term. */
ROW_INLINE void norm_dx_row(const float *xr, const float *w, const float *dr, float *dxr, int64_t C, float mean,
                             float rstd, bool center)
{
    float sg = 0.0f, sgx = 0.0f;
    if (w) {
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t c = 0; c < C; c++) {
            float g = dr[c] * w[c];
            if (center)
                sg += g;
            sgx += g * (centred(xr[c], mean, center) * rstd);
        }
    } else {
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t c = 0; c < C; c++) {
            if (center)
                sg += dr[c];
            sgx += dr[c] * (centred(xr[c], mean, center) * rstd);
        }
    }
    float a = sg / (float)C, bb = sgx / (float)C;
    if (w) {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            dxr[c] = rstd * (centred(dr[c] * w[c], a, center) - centred(xr[c], mean, center) * rstd * bb);
    } else {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            dxr[c] = rstd * (centred(dr[c], a, center) - centred(xr[c], mean, center) * rstd * bb);
    }
}

/* chunk k: dx of its rows, and its partials dw = sum_rows(dy * xh), db = sum_rows(dy) */
ROW_INLINE void norm_bwd_chunk(const norm_args *a, const norm_bwd_out *o, int64_t k, bool center)
{
    int64_t rows = a->rows, C = a->C, nch = o->nchunks;
    float *pdw = o->dw ? o->partial + k * o->parts * C : NULL;
    float *pdb = o->db ? o->partial + k * o->parts * C + (o->dw ? C : 0) : NULL;
    if (pdw)
        memset(pdw, 0, sizeof(float) * (size_t)C);
    if (pdb)
        memset(pdb, 0, sizeof(float) * (size_t)C);
    for (int64_t r = rows * k / nch; r < rows * (k + 1) / nch; r++) {
        const float *xr = a->x + r * C, *dr = a->dy + r * C;
        float mean, rstd;
        norm_stats(xr, C, a->eps, center, &mean, &rstd);
        if (o->dx)
            norm_dx_row(xr, a->w, dr, o->dx + r * C, C, mean, rstd, center);
        if (pdw) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                pdw[c] += dr[c] * (centred(xr[c], mean, center) * rstd);
        }
        if (pdb) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                pdb[c] += dr[c];
        }
    }
}

static void ln_chunk(const norm_args *a, const norm_bwd_out *o, int64_t k) { norm_bwd_chunk(a, o, k, true); }
static void rms_chunk(const norm_args *a, const norm_bwd_out *o, int64_t k) { norm_bwd_chunk(a, o, k, false); }

/* LAYERNORM_BWD and RMSNORM_BWD */
static col_status k_norm_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    bool center = n->op == COL_OP_LAYERNORM_BWD;
    void (*chunk)(const norm_args *, const norm_bwd_out *, int64_t) = center ? ln_chunk : rms_chunk;
    norm_args a = norm_args_of(n, center, true);
    norm_bwd_out o;
    if (a.C == 0)
        return COL_OK;
    col_status st = norm_bwd_layout(n, ex, a.rows, a.C, &o, err);
    if (st != COL_OK)
        return st;
#pragma omp parallel for schedule(static) if (a.rows * a.C > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t k = 0; k < o.nchunks; k++)
        chunk(&a, &o, k);
    if (o.parts)
        norm_bwd_reduce(&o, a.C, col_cpu_threads(ex));
    return COL_OK;
}

void col_cpu_register_norm(col_backend *be)
{
    be->kernel[COL_OP_SOFTMAX] = k_softmax;
    be->kernel[COL_OP_SOFTMAX_BWD] = k_softmax_bwd;
    be->kernel[COL_OP_LOG_SOFTMAX] = k_log_softmax;
    be->kernel[COL_OP_LOG_SOFTMAX_BWD] = k_softmax_bwd;
    be->kernel[COL_OP_LAYERNORM] = k_norm;
    be->kernel[COL_OP_LAYERNORM_BWD] = k_norm_bwd;
    be->kernel[COL_OP_RMSNORM] = k_norm;
    be->kernel[COL_OP_RMSNORM_BWD] = k_norm_bwd;
}
