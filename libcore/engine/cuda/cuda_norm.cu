/* cuda_norm.cu - CUDA kernels: softmax, log_softmax, layernorm, rmsnorm and
 * their gradients, all over the last dimension.
 *
 * One block per row (32..512 threads by row length), f32 sums as on the CPU
 * (in a tree order, not the CPU's). The builders make x and dy contiguous;
 * the softmax mask is an expanded view read through its strides.
 * dw / db of the norm backward ops: each of up to 1024 row chunks sums its
 * rows into its own slot of the backend workspace, then the slots are added
 * in chunk order, so the result does not depend on scheduling. */
#include <math.h>

#include "cuda_internal.h"

#define ROWS_LOOP(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

static unsigned row_blocks(const col_cuda_ctx *c, int64_t rows)
{
    int64_t cap = (int64_t)c->sm_count * 64;
    return (unsigned)(rows < 1 ? 1 : rows < cap ? rows : cap);
}

/* ---- softmax ---- */

__global__ void k_softmax_g(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ mask, cu_td tm,
                            int64_t rows, int64_t S, int64_t T, int causal, int64_t offset)
{
    __shared__ float sh[32];
    ROWS_LOOP(r, rows) {
        int64_t L = S;
        if (causal) {
            int64_t lim = r % T + offset + 1;
            L = lim < 0 ? 0 : lim < S ? lim : S;
        }
        const float *xr = x + r * S;
        float *yr = y + r * S;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
            float v = mask ? xr[j] + mask[cu_off(tm, r * S + j)] : xr[j];
            mx = v > mx ? v : mx;
        }
        mx = cu_block_max(mx, sh);
        if (mx == -INFINITY) {
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
                float v = mask ? xr[j] + mask[cu_off(tm, r * S + j)] : xr[j];
                yr[j] = isnan(v) ? NAN : 0.0f;
            }
        } else {
            float s = 0.0f;
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
                float v = mask ? xr[j] + mask[cu_off(tm, r * S + j)] : xr[j];
                s += expf(v - mx);
            }
            s = cu_block_sum(s, sh);
            float inv = 1.0f / s;
            for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
                float v = mask ? xr[j] + mask[cu_off(tm, r * S + j)] : xr[j];
                yr[j] = expf(v - mx) * inv;
            }
        }
        for (int64_t j = L + threadIdx.x; j < S; j += blockDim.x)
            yr[j] = 0.0f;
    }
}

static col_status k_softmax(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *mt = n->nsrc > 1 ? &n->src[1]->t : NULL;
    int nd = n->t.ndim;
    int64_t S = nd ? n->t.shape[nd - 1] : 1, num = col_numel(&n->t), rows = S ? num / S : 0;
    int64_t T = nd >= 2 ? n->t.shape[nd - 2] : 1;
    if (num == 0)
        return COL_OK;
    cu_td tm = {};
    if (mt)
        tm = cu_td_of(mt);
    CU_LAUNCH(k_softmax_g, row_blocks(c, rows), cu_row_threads(S), 0, c->stream)(
        (float *)n->t.data, (const float *)n->src[0]->t.data, mt ? (const float *)mt->data : NULL, tm, rows, S, T,
        n->p.i[0] != 0, n->p.i[1]);
    return cu_launch(err, "softmax");
}

/* SOFTMAX_BWD: dx = y (dy - sum(dy y));  LOG_SOFTMAX_BWD: dx = dy - exp(y) sum(dy) */
template <bool LOG>
__global__ void k_softmax_bwd_g(float *__restrict__ dx, const float *__restrict__ y, const float *__restrict__ dy,
                                int64_t rows, int64_t C)
{
    __shared__ float sh[32];
    ROWS_LOOP(r, rows) {
        const float *yr = y + r * C, *dr = dy + r * C;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            s += LOG ? dr[j] : dr[j] * yr[j];
        s = cu_block_sum(s, sh);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            dx[r * C + j] = LOG ? dr[j] - expf(yr[j]) * s : yr[j] * (dr[j] - s);
    }
}

__global__ void k_log_softmax_g(float *__restrict__ y, const float *__restrict__ x, int64_t rows, int64_t C)
{
    __shared__ float sh[32];
    ROWS_LOOP(r, rows) {
        const float *xr = x + r * C;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            mx = xr[j] > mx ? xr[j] : mx;
        mx = cu_block_max(mx, sh);
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            s += expf(xr[j] - mx);
        s = cu_block_sum(s, sh);
        float ls = logf(s);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            y[r * C + j] = (xr[j] - mx) - ls;
    }
}

static void rows_cols(const col_tensor *t, int64_t *rows, int64_t *C)
{
    *C = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t num = col_numel(t);
    *rows = *C ? num / *C : 0;
}

static col_status k_softmax_family(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    int64_t rows, C;
    rows_cols(&n->t, &rows, &C);
    if (rows == 0 || C == 0)
        return COL_OK;
    float *o = (float *)n->t.data;
    const float *s0 = (const float *)n->src[0]->t.data;
    unsigned g = row_blocks(c, rows);
    int th = cu_row_threads(C);
    switch (n->op) {
    case COL_OP_SOFTMAX_BWD:
        CU_LAUNCH(k_softmax_bwd_g<false>, g, th, 0, c->stream)(o, s0, (const float *)n->src[1]->t.data, rows, C);
        break;
    case COL_OP_LOG_SOFTMAX_BWD:
        CU_LAUNCH(k_softmax_bwd_g<true>, g, th, 0, c->stream)(o, s0, (const float *)n->src[1]->t.data, rows, C);
        break;
    default: CU_LAUNCH(k_log_softmax_g, g, th, 0, c->stream)(o, s0, rows, C); break;
    }
    return cu_launch(err, col_op_name(n->op));
}

/* ---- layernorm / rmsnorm ---- */

/* LN: mean and 1/sqrt(biased var + eps), two passes; RMS: mean 0, 1/sqrt(mean(x^2) + eps) */
template <bool LN> __device__ __forceinline__ void row_stats(const float *xr, int64_t C, float eps, float *sh, float *mean, float *rstd)
{
    if (LN) {
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            s += xr[j];
        float m = cu_block_sum(s, sh) / (float)C, v = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float d = xr[j] - m;
            v += d * d;
        }
        v = cu_block_sum(v, sh);
        *mean = m;
        *rstd = 1.0f / sqrtf(v / (float)C + eps);
    } else {
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            s += xr[j] * xr[j];
        s = cu_block_sum(s, sh);
        *mean = 0.0f;
        *rstd = 1.0f / sqrtf(s / (float)C + eps);
    }
}

template <bool LN>
__global__ void k_norm_g(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w,
                         const float *__restrict__ b, int64_t rows, int64_t C, float eps)
{
    __shared__ float sh[32];
    ROWS_LOOP(r, rows) {
        const float *xr = x + r * C;
        float mean, rstd;
        row_stats<LN>(xr, C, eps, sh, &mean, &rstd);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float v = (xr[j] - mean) * rstd;
            if (w)
                v *= w[j];
            if (b)
                v += b[j];
            y[r * C + j] = v;
        }
    }
}

static col_status k_norm(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    int64_t rows, C;
    rows_cols(&n->t, &rows, &C);
    if (rows == 0 || C == 0)
        return COL_OK;
    bool ln = n->op == COL_OP_LAYERNORM;
    bool hw = ln ? n->p.i[0] != 0 : true, hb = ln && n->p.i[1] != 0;
    const float *x = (const float *)n->src[0]->t.data;
    const float *w = hw ? (const float *)n->src[1]->t.data : NULL;
    const float *b = hb ? (const float *)n->src[hw ? 2 : 1]->t.data : NULL;
    unsigned g = row_blocks(c, rows);
    int th = cu_row_threads(C);
    if (ln)
        CU_LAUNCH(k_norm_g<true>, g, th, 0, c->stream)((float *)n->t.data, x, w, b, rows, C, n->p.f[0]);
    else
        CU_LAUNCH(k_norm_g<false>, g, th, 0, c->stream)((float *)n->t.data, x, w, NULL, rows, C, n->p.f[0]);
    return cu_launch(err, col_op_name(n->op));
}

/* dx per row. With xh = (x - mean) rstd and g = dy w:
 * LN: dx = rstd (g - mean(g) - xh mean(g xh));  RMS: dx = rstd (g - xh mean(g xh)) */
template <bool LN>
__global__ void k_norm_dx(float *__restrict__ dx, const float *__restrict__ x, const float *__restrict__ w,
                          const float *__restrict__ dy, int64_t rows, int64_t C, float eps)
{
    __shared__ float sh[32];
    ROWS_LOOP(r, rows) {
        const float *xr = x + r * C, *dr = dy + r * C;
        float mean, rstd;
        row_stats<LN>(xr, C, eps, sh, &mean, &rstd);
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float g = w ? dr[j] * w[j] : dr[j];
            sg += g;
            sgx += g * ((xr[j] - mean) * rstd);
        }
        sg = LN ? cu_block_sum(sg, sh) : 0.0f;
        sgx = cu_block_sum(sgx, sh);
        float a = sg / (float)C, bb = sgx / (float)C;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float g = w ? dr[j] * w[j] : dr[j];
            dx[r * C + j] = LN ? rstd * (g - a - (xr[j] - mean) * rstd * bb) : rstd * (g - xr[j] * rstd * bb);
        }
    }
}

/* chunk k of nch sums rows [rows k / nch, rows (k+1) / nch) into part[k][0 or 1][C]:
 * dw += dy xh, db += dy (either may be absent) */
template <bool LN>
__global__ void k_norm_partial(float *__restrict__ part, int parts, bool want_dw, bool want_db,
                               const float *__restrict__ x, const float *__restrict__ dy, int64_t rows, int64_t C,
                               float eps, int64_t nch)
{
    __shared__ float sh[32];
    for (int64_t k = blockIdx.x; k < nch; k += gridDim.x) {
        float *pdw = want_dw ? part + k * parts * C : NULL;
        float *pdb = want_db ? part + k * parts * C + (want_dw ? C : 0) : NULL;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            if (pdw)
                pdw[j] = 0.0f;
            if (pdb)
                pdb[j] = 0.0f;
        }
        for (int64_t r = rows * k / nch; r < rows * (k + 1) / nch; r++) {
            const float *xr = x + r * C, *dr = dy + r * C;
            float mean, rstd;
            row_stats<LN>(xr, C, eps, sh, &mean, &rstd);
            for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
                if (pdw)
                    pdw[j] += dr[j] * ((xr[j] - mean) * rstd);
                if (pdb)
                    pdb[j] += dr[j];
            }
        }
    }
}

/* out[p][c] = sum over chunks of part[k][p][c], in chunk order */
__global__ void k_norm_sum(float *__restrict__ dw, float *__restrict__ db, const float *__restrict__ part, int parts,
                           int64_t C, int64_t nch)
{
    CU_GRID_LOOP(i, (int64_t)parts * C) {
        int p = (int)(i / C);
        int64_t c = i % C;
        float s = 0.0f;
        for (int64_t k = 0; k < nch; k++)
            s += part[(k * parts + p) * C + c];
        float *dst = p == 0 && dw ? dw : db;
        dst[c] = s;
    }
}

static col_status k_norm_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cuda_ctx *c = cu_ctx(ex);
    bool ln = n->op == COL_OP_LAYERNORM_BWD;
    bool hw = ln ? n->p.i[0] != 0 : true;
    const col_tensor *xt = &n->src[0]->t;
    const float *x = (const float *)xt->data, *w = hw ? (const float *)n->src[1]->t.data : NULL;
    const float *dy = (const float *)n->src[hw ? 2 : 1]->t.data;
    float eps = n->p.f[0];
    int64_t rows, C;
    rows_cols(xt, &rows, &C);
    if (C == 0)
        return COL_OK;
    float *out = (float *)n->t.data;
    float *dx = n->p.i[1] ? out : NULL;
    out += n->p.i[1] ? rows * C : 0;
    float *dw = n->p.i[2] ? out : NULL;
    out += n->p.i[2] ? C : 0;
    float *db = ln && n->p.i[3] ? out : NULL;
    int th = cu_row_threads(C);
    if (dx && rows) {
        if (ln)
            CU_LAUNCH(k_norm_dx<true>, row_blocks(c, rows), th, 0, c->stream)(dx, x, w, dy, rows, C, eps);
        else
            CU_LAUNCH(k_norm_dx<false>, row_blocks(c, rows), th, 0, c->stream)(dx, x, w, dy, rows, C, eps);
        col_status st = cu_launch(err, col_op_name(n->op));
        if (st != COL_OK)
            return st;
    }
    int parts = (dw != NULL) + (db != NULL);
    if (!parts)
        return COL_OK;
    int64_t max_chunks = (int64_t)(c->ws_bytes / (sizeof(float) * (size_t)parts * (size_t)C));
    if (max_chunks < 1)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: rows of %lld elements exceed the %zu-byte workspace",
                           col_op_name(n->op), (long long)C, c->ws_bytes);
    int64_t nch = (rows + 3) / 4;
    nch = nch > 1024 ? 1024 : nch;
    nch = nch > max_chunks ? max_chunks : nch;
    nch = nch < 1 ? 1 : nch;
    float *part = (float *)c->ws;
    if (ln)
        CU_LAUNCH(k_norm_partial<true>, (unsigned)nch, th, 0, c->stream)(
            part, parts, dw != NULL, db != NULL, x, dy, rows, C, eps, nch);
    else
        CU_LAUNCH(k_norm_partial<false>, (unsigned)nch, th, 0, c->stream)(
            part, parts, dw != NULL, false, x, dy, rows, C, eps, nch);
    CU_LAUNCH(k_norm_sum, cu_blocks(c, parts * C), CU_THREADS, 0, c->stream)(dw, db, part, parts, C, nch);
    return cu_launch(err, col_op_name(n->op));
}

void cu_register_norm(col_backend *be)
{
    be->kernel[COL_OP_SOFTMAX] = k_softmax;
    be->kernel[COL_OP_SOFTMAX_BWD] = k_softmax_family;
    be->kernel[COL_OP_LOG_SOFTMAX] = k_softmax_family;
    be->kernel[COL_OP_LOG_SOFTMAX_BWD] = k_softmax_family;
    be->kernel[COL_OP_LAYERNORM] = k_norm;
    be->kernel[COL_OP_LAYERNORM_BWD] = k_norm_bwd;
    be->kernel[COL_OP_RMSNORM] = k_norm;
    be->kernel[COL_OP_RMSNORM_BWD] = k_norm_bwd;
}
