/* cuda_image.cu - CUDA kernels of conv2d and nearest upsampling and their
 * gradients (ops_image.c), f32. Upsampling: one thread per element, the
 * gradient's block sums in the host kernel's order (the same bits).
 *
 * As on the host (cpu_image.c): per image, y[Cout, N] = w[Cout, K] @ cols[K, N]
 * with cols the input's patches, gathered (im2col) one tile of columns at a
 * time into the node's scratch (col_conv2d_tile), the GEMMs through cuBLASLt
 * (cu_gemm_f32, cuda_matmul.cu). A 1x1 convolution with stride 1 and no
 * padding multiplies x itself.
 *   forward       y[:, tile] = w @ cols[:, tile] (+ bias, written first)
 *   data grad     dcols = w^T @ dy[:, tile], then each input pixel of the rows
 *                 the tile reads adds the dcols entries of the taps that read
 *                 it (a gather per pixel: no atomics, the same order every run)
 *   filter grad   dw += dy[:, tile] @ cols[:, tile]^T over images and tiles, in order
 * Deterministic: every kernel's result is independent of the thread order.
 */
#include "cuda_internal.h"

/* the geometry the kernels need, by value */
typedef struct {
    int64_t Cin, H, W, kh, kw, Ho, Wo, sh, sw, pt, pl;
} conv_geo;

static conv_geo geo_of(const col_conv2d_geom &g)
{
    conv_geo q = {g.Cin, g.H, g.W, g.kh, g.kw, g.Ho, g.Wo, g.sh, g.sw, g.pt, g.pl};
    return q;
}

/* y[r, :] = bias[r % Cout] for r < rows */
__global__ void k_conv_bias(float *__restrict__ y, const float *__restrict__ bias, int64_t Cout, int64_t N, int64_t total)
{
    CU_GRID_LOOP(i, total) {
        y[i] = bias[(i / N) % Cout];
    }
}

/* cols[r, j] (row stride nb) = x at tap r = (ci, ky, kx) of output pixel n0 + j, 0 in the padding */
__global__ void k_im2col(float *__restrict__ cols, const float *__restrict__ x, conv_geo g, int64_t n0, int64_t nb,
                         int64_t total)
{
    CU_GRID_LOOP(i, total) {
        int64_t r = i / nb, n = n0 + i % nb;
        int64_t kx = r % g.kw, ky = (r / g.kw) % g.kh, ci = r / (g.kw * g.kh);
        int64_t iy = (n / g.Wo) * g.sh - g.pt + ky, ix = (n % g.Wo) * g.sw - g.pl + kx;
        cols[i] = iy >= 0 && iy < g.H && ix >= 0 && ix < g.W ? x[(ci * g.H + iy) * g.W + ix] : 0.0f;
    }
}

/* dx[ci, iy, ix] += the dcols entries [(ci, ky, kx), n - n0] of the taps (ky, kx) and output pixels n in
 * [n0, n0 + nb) that read input pixel (iy, ix), for the input rows [iy0, iy0 + rows) (those the tile reads) */
__global__ void k_col2im(float *__restrict__ dx, const float *__restrict__ dcols, conv_geo g, int64_t n0, int64_t nb,
                         int64_t iy0, int64_t rows, int64_t total)
{
    CU_GRID_LOOP(i, total) {
        int64_t ix = i % g.W, iy = iy0 + (i / g.W) % rows, ci = i / (g.W * rows);
        float s = 0.0f;
        for (int64_t ky = 0; ky < g.kh; ky++) {
            int64_t ty = iy + g.pt - ky; /* oy * sh */
            if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.Ho)
                continue;
            for (int64_t kx = 0; kx < g.kw; kx++) {
                int64_t tx = ix + g.pl - kx;
                if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.Wo)
                    continue;
                int64_t n = (ty / g.sh) * g.Wo + tx / g.sw;
                if (n >= n0 && n < n0 + nb)
                    s += dcols[((ci * g.kh + ky) * g.kw + kx) * nb + (n - n0)];
            }
        }
        dx[(ci * g.H + iy) * g.W + ix] += s;
    }
}

/* the node's im2col tile in scratch: its columns (0: direct, no tile) */
static col_status conv_tile(const col_exec *ex, const col_conv2d_geom &g, int64_t *tile, col_err *err, const char *what)
{
    *tile = col_conv2d_tile(&g);
    size_t need = (size_t)(*tile * g.K) * sizeof(float);
    if (need > ex->scratch_bytes || (need && !ex->scratch))
        return col_err_set(err, COL_EINVAL, "%s: %zu bytes of scratch needed, %zu given", what, need, ex->scratch_bytes);
    return COL_OK;
}

/* CONV2D: x [B,Cin,H,W], w [Cout,K], bias [Cout] -> y [B,Cout,N] */
static col_status k_conv2d(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    col_conv2d_geom g = col_conv2d_geom_of(n);
    const float *x = (const float *)n->src[0]->t.data, *w = (const float *)n->src[1]->t.data;
    const float *bias = n->p.i[4] ? (const float *)n->src[2]->t.data : NULL;
    float *y = (float *)n->t.data, *cols = (float *)ex->scratch;
    int64_t tile, HW = g.H * g.W, total = g.B * g.Cout * g.N;
    col_status st = conv_tile(ex, g, &tile, err, "conv2d");
    if (st != COL_OK || total == 0)
        return st;
    if (bias)
        CU_LAUNCH(k_conv_bias, cu_blocks(c, total), CU_THREADS, 0, c->stream)(y, bias, g.Cout, g.N, total);
    else if (g.K == 0)
        return cu_status(cudaMemsetAsync(y, 0, sizeof(float) * (size_t)total, c->stream), err, "conv2d");
    st = cu_launch(err, "conv2d");
    float beta = bias ? 1.0f : 0.0f;
    conv_geo q = geo_of(g);
    for (int64_t b = 0; b < g.B && st == COL_OK && g.K > 0; b++) {
        const float *xi = x + b * g.Cin * HW;
        float *yi = y + b * g.Cout * g.N;
        if (g.direct) {
            st = cu_gemm_f32(c, false, false, g.Cout, g.N, g.K, w, g.K, xi, g.N, beta, yi, g.N, err, "conv2d");
            continue;
        }
        for (int64_t n0 = 0; n0 < g.N && st == COL_OK; n0 += tile) {
            int64_t nb = g.N - n0 < tile ? g.N - n0 : tile;
            CU_LAUNCH(k_im2col, cu_blocks(c, g.K * nb), CU_THREADS, 0, c->stream)(cols, xi, q, n0, nb, g.K * nb);
            st = cu_launch(err, "conv2d");
            if (st == COL_OK)
                st = cu_gemm_f32(c, false, false, g.Cout, nb, g.K, w, g.K, cols, nb, beta, yi + n0, g.N, err, "conv2d");
        }
    }
    return st;
}

/* CONV2D_BWD_DATA: dy [B,Cout,N], w [Cout,K] -> dx [B,Cin,H,W] */
static col_status k_conv2d_bwd_data(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    col_conv2d_geom g = col_conv2d_geom_of(n);
    const float *dy = (const float *)n->src[0]->t.data, *w = (const float *)n->src[1]->t.data;
    float *dx = (float *)n->t.data, *dcols = (float *)ex->scratch;
    int64_t tile, HW = g.H * g.W, total = g.B * g.Cin * HW;
    col_status st = conv_tile(ex, g, &tile, err, "conv2d_bwd_data");
    if (st != COL_OK || total == 0)
        return st;
    if (g.N == 0 || g.Cout == 0)
        return cu_status(cudaMemsetAsync(dx, 0, sizeof(float) * (size_t)total, c->stream), err, "conv2d_bwd_data");
    conv_geo q = geo_of(g);
    if (!g.direct) /* the tiles add into it */
        st = cu_status(cudaMemsetAsync(dx, 0, sizeof(float) * (size_t)total, c->stream), err, "conv2d_bwd_data");
    for (int64_t b = 0; b < g.B && st == COL_OK; b++) {
        const float *dyi = dy + b * g.Cout * g.N;
        float *dxi = dx + b * g.Cin * HW;
        if (g.direct) {
            st = cu_gemm_f32(c, true, false, g.Cin, g.N, g.Cout, w, g.K, dyi, g.N, 0.0f, dxi, g.N, err,
                             "conv2d_bwd_data");
            continue;
        }
        for (int64_t n0 = 0; n0 < g.N && st == COL_OK; n0 += tile) {
            int64_t nb = g.N - n0 < tile ? g.N - n0 : tile;
            st = cu_gemm_f32(c, true, false, g.K, nb, g.Cout, w, g.K, dyi + n0, g.N, 0.0f, dcols, nb, err,
                             "conv2d_bwd_data");
            if (st != COL_OK)
                break;
            /* the input rows the tile's output rows read */
            int64_t iy0 = (n0 / g.Wo) * g.sh - g.pt, iy1 = ((n0 + nb - 1) / g.Wo) * g.sh - g.pt + g.kh;
            iy0 = iy0 < 0 ? 0 : iy0;
            iy1 = iy1 > g.H ? g.H : iy1;
            if (iy1 <= iy0)
                continue;
            int64_t work = g.Cin * (iy1 - iy0) * g.W;
            CU_LAUNCH(k_col2im, cu_blocks(c, work), CU_THREADS, 0, c->stream)(dxi, dcols, q, n0, nb, iy0, iy1 - iy0,
                                                                              work);
            st = cu_launch(err, "conv2d_bwd_data");
        }
    }
    return st;
}

/* CONV2D_BWD_FILTER: x [B,Cin,H,W], dy [B,Cout,N] -> dw [Cout,K] */
static col_status k_conv2d_bwd_filter(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    col_conv2d_geom g = col_conv2d_geom_of(n);
    const float *x = (const float *)n->src[0]->t.data, *dy = (const float *)n->src[1]->t.data;
    float *dw = (float *)n->t.data, *cols = (float *)ex->scratch;
    int64_t tile, HW = g.H * g.W;
    col_status st = conv_tile(ex, g, &tile, err, "conv2d_bwd_filter");
    if (st != COL_OK || g.Cout * g.K == 0)
        return st;
    if (g.B == 0 || g.N == 0)
        return cu_status(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)(g.Cout * g.K), c->stream), err,
                         "conv2d_bwd_filter");
    conv_geo q = geo_of(g);
    for (int64_t b = 0; b < g.B && st == COL_OK; b++) {
        const float *xi = x + b * g.Cin * HW, *dyi = dy + b * g.Cout * g.N;
        if (g.direct) {
            st = cu_gemm_f32(c, false, true, g.Cout, g.K, g.N, dyi, g.N, xi, g.N, b ? 1.0f : 0.0f, dw, g.K, err,
                             "conv2d_bwd_filter");
            continue;
        }
        for (int64_t n0 = 0; n0 < g.N && st == COL_OK; n0 += tile) {
            int64_t nb = g.N - n0 < tile ? g.N - n0 : tile;
            CU_LAUNCH(k_im2col, cu_blocks(c, g.K * nb), CU_THREADS, 0, c->stream)(cols, xi, q, n0, nb, g.K * nb);
            st = cu_launch(err, "conv2d_bwd_filter");
            if (st == COL_OK)
                st = cu_gemm_f32(c, false, true, g.Cout, g.K, nb, dyi + n0, g.N, cols, nb, b || n0 ? 1.0f : 0.0f, dw,
                                 g.K, err, "conv2d_bwd_filter");
        }
    }
    return st;
}

/* ---- nearest upsampling ---- */

/* y [rows, s, W*s] from x [rows, W]: one thread per output element */
__global__ void k_upsample_g(float *__restrict__ y, const float *__restrict__ x, int64_t W, int64_t s, int64_t total)
{
    CU_GRID_LOOP(i, total) {
        int64_t Wo = W * s, r = i / (Wo * s);
        y[i] = x[r * W + (i % Wo) / s];
    }
}

/* dx [rows, W] = the sums of dy's s x s blocks, in the host kernel's order: one thread per input element */
__global__ void k_upsample_bwd_g(float *__restrict__ dx, const float *__restrict__ dy, int64_t W, int64_t s, int64_t total)
{
    CU_GRID_LOOP(i, total) {
        int64_t Wo = W * s, r = i / W, w = i % W;
        const float *d = dy + r * s * Wo + w * s;
        float acc = 0.0f;
        for (int64_t a = 0; a < s; a++)
            for (int64_t b = 0; b < s; b++)
                acc += d[a * Wo + b];
        dx[i] = acc;
    }
}

static col_status k_upsample(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    int64_t total = col_numel(&n->t);
    if (total == 0)
        return COL_OK;
    CU_LAUNCH(k_upsample_g, cu_blocks(c, total), CU_THREADS, 0, c->stream)((float *)n->t.data,
                                                                          (const float *)n->src[0]->t.data,
                                                                          n->src[0]->t.shape[3], n->p.i[0], total);
    return cu_launch(err, "upsample_nearest");
}

static col_status k_upsample_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    int64_t total = col_numel(&n->t);
    if (total == 0)
        return COL_OK;
    CU_LAUNCH(k_upsample_bwd_g, cu_blocks(c, total), CU_THREADS, 0, c->stream)((float *)n->t.data,
                                                                              (const float *)n->src[0]->t.data,
                                                                              n->t.shape[3], n->p.i[0], total);
    return cu_launch(err, "upsample_nearest_bwd");
}

void cu_register_image(col_backend *be)
{
    be->kernel[COL_OP_UPSAMPLE_NEAREST] = k_upsample;
    be->kernel[COL_OP_UPSAMPLE_NEAREST_BWD] = k_upsample_bwd;
    be->kernel[COL_OP_CONV2D] = k_conv2d;
    be->kernel[COL_OP_CONV2D_BWD_DATA] = k_conv2d_bwd_data;
    be->kernel[COL_OP_CONV2D_BWD_FILTER] = k_conv2d_bwd_filter;
}
