/* cpu_image.c - CPU kernels of conv2d and nearest upsampling and their
 * gradients (ops_image.c), f32.
 *
 * Per image, the convolution is the GEMM y[Cout, N] = w[Cout, K] @ cols[K, N]
 * with K = Cin*kh*kw and N = Ho*Wo, cols the input's patches (row k =
 * (ci, ky, kx), column n = output pixel). cols are gathered (im2col) one
 * tile of columns at a time into scratch (col_conv2d_tile: the tile depends on
 * the shape only), rows in parallel; the GEMMs run on OpenBLAS's threads.
 * A 1x1 convolution with stride 1 and no padding uses x [Cin, H*W] itself.
 *   forward       y[:, tile]  = w @ cols[:, tile] (+ bias, written first)
 *   data grad     dcols       = w^T @ dy[:, tile], added back onto dx (col2im: channels in parallel,
 *                               each channel's taps and pixels in a fixed order)
 *   filter grad   dw         += dy[:, tile] @ cols[:, tile]^T over images and tiles, in order
 * No result depends on the thread count beyond what OpenBLAS's sgemm does.
 */
#include <string.h>

#include "cpu_internal.h"

/* The columns [n0, n0 + nb) of row (ci, ky, kx) of cols, written to out (gather) or added from dcol into the
 * image xi [Cin, H, W] (scatter). Column n is output pixel (n / Wo, n % Wo). */
static inline void row_segment(const col_conv2d_geom *g, int64_t ci, int64_t ky, int64_t kx, int64_t n0, int64_t nb,
                               float *xi, float *col, bool scatter)
{
    int64_t n = n0, end = n0 + nb;
    /* output columns ox whose input column ix = ox * sw - pl + kx lies in [0, W) */
    int64_t lo = g->pl - kx > 0 ? (g->pl - kx + g->sw - 1) / g->sw : 0;
    int64_t hi = g->W - 1 + g->pl - kx >= 0 ? (g->W - 1 + g->pl - kx) / g->sw + 1 : 0; /* exclusive */
    if (hi > g->Wo)
        hi = g->Wo;
    while (n < end) {
        int64_t oy = n / g->Wo, ox0 = n % g->Wo, ox1 = g->Wo;
        if (ox1 - ox0 > end - n)
            ox1 = ox0 + (end - n);
        float *c = col + (n - n0);
        int64_t iy = oy * g->sh - g->pt + ky;
        if (iy < 0 || iy >= g->H) {
            if (!scatter)
                memset(c, 0, sizeof(float) * (size_t)(ox1 - ox0));
        } else {
            float *xr = xi + (ci * g->H + iy) * g->W;
            int64_t a = ox0 > lo ? ox0 : lo, b = ox1 < hi ? ox1 : hi;
            if (!scatter) {
                for (int64_t ox = ox0; ox < a && ox < ox1; ox++)
                    c[ox - ox0] = 0.0f;
                if (g->sw == 1) {
                    if (b > a)
                        memcpy(c + (a - ox0), xr + a - g->pl + kx, sizeof(float) * (size_t)(b - a));
                } else {
                    for (int64_t ox = a; ox < b; ox++)
                        c[ox - ox0] = xr[ox * g->sw - g->pl + kx];
                }
                for (int64_t ox = b > ox0 ? b : ox0; ox < ox1; ox++)
                    c[ox - ox0] = 0.0f;
            } else if (g->sw == 1) {
                int64_t d = kx - g->pl;
#pragma omp simd
                for (int64_t ox = a; ox < b; ox++)
                    xr[ox + d] += c[ox - ox0];
            } else {
                for (int64_t ox = a; ox < b; ox++)
                    xr[ox * g->sw - g->pl + kx] += c[ox - ox0];
            }
        }
        n += ox1 - ox0;
    }
}

/* cols[K, nb] (row stride nb) of image xi, columns [n0, n0 + nb) */
static void im2col(const col_conv2d_geom *g, const float *xi, int64_t n0, int64_t nb, float *cols, int nt)
{
    int64_t taps = g->kh * g->kw;
#pragma omp parallel for schedule(static) if (g->K * nb > COL_PAR_MIN) num_threads(nt)
    for (int64_t r = 0; r < g->K; r++)
        row_segment(g, r / taps, (r % taps) / g->kw, r % g->kw, n0, nb, (float *)xi, cols + r * nb, false);
}

/* dxi [Cin, H, W] += col2im(dcols[K, nb]) for columns [n0, n0 + nb); channels in parallel */
static void col2im(const col_conv2d_geom *g, float *dxi, int64_t n0, int64_t nb, float *dcols, int nt)
{
    int64_t taps = g->kh * g->kw;
#pragma omp parallel for schedule(static) if (g->K * nb > COL_PAR_MIN) num_threads(nt)
    for (int64_t ci = 0; ci < g->Cin; ci++)
        for (int64_t t = 0; t < taps; t++)
            row_segment(g, ci, t / g->kw, t % g->kw, n0, nb, dxi, dcols + (ci * taps + t) * nb, true);
}

static void sgemm(const col_cpu_ctx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    ctx->blas.sgemm(COL_BLAS_ROW_MAJOR, ta, tb, (int)M, (int)N, (int)K, 1.0f, a, (int)lda, b, (int)ldb, beta, c,
                    (int)ldc);
}

/* CONV2D: x [B,Cin,H,W], w [Cout,K], bias [Cout] -> y [B,Cout,N] */
static col_status k_conv2d(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_cpu_ctx *ctx = ex->be->ctx;
    col_conv2d_geom g = col_conv2d_geom_of(n);
    const float *x = n->src[0]->t.data, *w = n->src[1]->t.data;
    const float *bias = n->p.i[4] ? n->src[2]->t.data : NULL;
    float *y = n->t.data, *cols = ex->scratch;
    int nt = col_cpu_threads(ex);
    int64_t tile = col_conv2d_tile(&g), HW = g.H * g.W, total = g.B * g.Cout * g.N;
    if (bias) {
#pragma omp parallel for schedule(static) if (total > COL_PAR_MIN) num_threads(nt)
        for (int64_t r = 0; r < g.B * g.Cout; r++) {
            float v = bias[r % g.Cout];
            for (int64_t i = 0; i < g.N; i++)
                y[r * g.N + i] = v;
        }
    }
    if (g.K == 0 || g.N == 0) {
        if (!bias)
            memset(y, 0, sizeof(float) * (size_t)total);
        return COL_OK;
    }
    float beta = bias ? 1.0f : 0.0f;
    int restore = col_blas_threads_begin(&ctx->blas, omp_in_parallel() ? 1 : nt);
    for (int64_t b = 0; b < g.B; b++) {
        const float *xi = x + b * g.Cin * HW;
        float *yi = y + b * g.Cout * g.N;
        if (g.direct) {
            sgemm(ctx, COL_BLAS_NO_TRANS, COL_BLAS_NO_TRANS, g.Cout, g.N, g.K, w, g.K, xi, g.N, beta, yi, g.N);
            continue;
        }
        for (int64_t n0 = 0; n0 < g.N; n0 += tile) {
            int64_t nb = g.N - n0 < tile ? g.N - n0 : tile;
            im2col(&g, xi, n0, nb, cols, nt);
            sgemm(ctx, COL_BLAS_NO_TRANS, COL_BLAS_NO_TRANS, g.Cout, nb, g.K, w, g.K, cols, nb, beta, yi + n0, g.N);
        }
    }
    col_blas_threads_end(&ctx->blas, restore);
    return COL_OK;
}

/* CONV2D_BWD_DATA: dy [B,Cout,N], w [Cout,K] -> dx [B,Cin,H,W] */
static col_status k_conv2d_bwd_data(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_cpu_ctx *ctx = ex->be->ctx;
    col_conv2d_geom g = col_conv2d_geom_of(n);
    const float *dy = n->src[0]->t.data, *w = n->src[1]->t.data;
    float *dx = n->t.data, *dcols = ex->scratch;
    int nt = col_cpu_threads(ex);
    int64_t tile = col_conv2d_tile(&g), HW = g.H * g.W;
    if (!g.direct || g.N == 0 || g.Cout == 0) {
        int64_t total = g.B * g.Cin * HW;
#pragma omp parallel for schedule(static) if (total > COL_PAR_MIN) num_threads(nt)
        for (int64_t r = 0; r < g.B * g.Cin; r++)
            memset(dx + r * HW, 0, sizeof(float) * (size_t)HW);
        if (g.N == 0 || g.Cout == 0)
            return COL_OK;
    }
    int restore = col_blas_threads_begin(&ctx->blas, omp_in_parallel() ? 1 : nt);
    for (int64_t b = 0; b < g.B; b++) {
        const float *dyi = dy + b * g.Cout * g.N;
        float *dxi = dx + b * g.Cin * HW;
        if (g.direct) {
            sgemm(ctx, COL_BLAS_TRANS, COL_BLAS_NO_TRANS, g.Cin, g.N, g.Cout, w, g.K, dyi, g.N, 0.0f, dxi, g.N);
            continue;
        }
        for (int64_t n0 = 0; n0 < g.N; n0 += tile) {
            int64_t nb = g.N - n0 < tile ? g.N - n0 : tile;
            sgemm(ctx, COL_BLAS_TRANS, COL_BLAS_NO_TRANS, g.K, nb, g.Cout, w, g.K, dyi + n0, g.N, 0.0f, dcols, nb);
            col2im(&g, dxi, n0, nb, dcols, nt);
        }
    }
    col_blas_threads_end(&ctx->blas, restore);
    return COL_OK;
}

/* CONV2D_BWD_FILTER: x [B,Cin,H,W], dy [B,Cout,N] -> dw [Cout,K] */
static col_status k_conv2d_bwd_filter(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_cpu_ctx *ctx = ex->be->ctx;
    col_conv2d_geom g = col_conv2d_geom_of(n);
    const float *x = n->src[0]->t.data, *dy = n->src[1]->t.data;
    float *dw = n->t.data, *cols = ex->scratch;
    int nt = col_cpu_threads(ex);
    int64_t tile = col_conv2d_tile(&g), HW = g.H * g.W;
    if (g.B == 0 || g.N == 0) {
        memset(dw, 0, sizeof(float) * (size_t)(g.Cout * g.K));
        return COL_OK;
    }
    int restore = col_blas_threads_begin(&ctx->blas, omp_in_parallel() ? 1 : nt);
    for (int64_t b = 0; b < g.B; b++) {
        const float *xi = x + b * g.Cin * HW, *dyi = dy + b * g.Cout * g.N;
        if (g.direct) {
            sgemm(ctx, COL_BLAS_NO_TRANS, COL_BLAS_TRANS, g.Cout, g.K, g.N, dyi, g.N, xi, g.N, b ? 1.0f : 0.0f, dw,
                  g.K);
            continue;
        }
        for (int64_t n0 = 0; n0 < g.N; n0 += tile) {
            int64_t nb = g.N - n0 < tile ? g.N - n0 : tile;
            im2col(&g, xi, n0, nb, cols, nt);
            sgemm(ctx, COL_BLAS_NO_TRANS, COL_BLAS_TRANS, g.Cout, g.K, nb, dyi + n0, g.N, cols, nb,
                  b || n0 ? 1.0f : 0.0f, dw, g.K);
        }
    }
    col_blas_threads_end(&ctx->blas, restore);
    return COL_OK;
}

/* ---- nearest upsampling ---- */

/* UPSAMPLE_NEAREST: x [B,C,H,W] -> y [B,C,sH,sW]; per input row, one output row built, s - 1 copies of it */
static col_status k_upsample(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *x = n->src[0]->t.data;
    float *y = n->t.data;
    int64_t s = n->p.i[0], W = n->src[0]->t.shape[3], rows = col_numel(&n->src[0]->t) / (W ? W : 1), Wo = W * s;
    if (W == 0)
        return COL_OK;
#pragma omp parallel for schedule(static) if (rows * Wo * s > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * W;
        float *yr = y + r * s * Wo;
        for (int64_t w = 0; w < W; w++)
            for (int64_t j = 0; j < s; j++)
                yr[w * s + j] = xr[w];
        for (int64_t i = 1; i < s; i++)
            memcpy(yr + i * Wo, yr, sizeof(float) * (size_t)Wo);
    }
    return COL_OK;
}

/* UPSAMPLE_NEAREST_BWD: dy [B,C,sH,sW] -> dx [B,C,H,W], each s x s block summed row by row, left to right */
static col_status k_upsample_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const float *dy = n->src[0]->t.data;
    float *dx = n->t.data;
    int64_t s = n->p.i[0], W = n->t.shape[3], rows = col_numel(&n->t) / (W ? W : 1), Wo = W * s;
    if (W == 0)
        return COL_OK;
#pragma omp parallel for schedule(static) if (rows * Wo * s > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t r = 0; r < rows; r++) {
        const float *dr = dy + r * s * Wo;
        float *xr = dx + r * W;
        for (int64_t w = 0; w < W; w++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < s; i++)
                for (int64_t j = 0; j < s; j++)
                    acc += dr[i * Wo + w * s + j];
            xr[w] = acc;
        }
    }
    return COL_OK;
}

void col_cpu_register_image(col_backend *be)
{
    be->kernel[COL_OP_UPSAMPLE_NEAREST] = k_upsample;
    be->kernel[COL_OP_UPSAMPLE_NEAREST_BWD] = k_upsample_bwd;
    be->kernel[COL_OP_CONV2D] = k_conv2d;
    be->kernel[COL_OP_CONV2D_BWD_DATA] = k_conv2d_bwd_data;
    be->kernel[COL_OP_CONV2D_BWD_FILTER] = k_conv2d_bwd_filter;
}
