/* cuda_quant.cu - CUDA kernels for the quantized weights (tensor.h, quant.h: ggml's block layouts, read
 * in place): x @ W^T with W quantized (MATMUL, called from cuda_matmul.cu) and the rows of a quantized
 * embedding table (EMBEDDING, from cuda_nn.cu).
 *
 * Every kernel decodes W's blocks as it reads them, in f32, into exactly the values col_dequantize_row
 * gives (the same f32 products, unfused), and multiplies them with x in f32: no copy of W is made and x
 * is not rounded (a GPU has the arithmetic to spare; the host's kernels round x to 8 bits instead).
 *  - M <= CQ_MV_ROWS rows of x (decoding): a warp per row of W, each lane taking W's pieces of 32
 *    values (a q8_0 / q4_0 block, a q4_K / q6_K sub-block) in turn, dotting them with the rows of x
 *    (in groups of up to 8) and the warp adding its lanes' sums with shuffles.
 *  - more rows (prefill): a tiled GEMM whose W tiles are decoded into shared memory.
 * Each output is summed in an order fixed by the shape, so the bits do not change from run to run. */
#include <string.h>

#include "cuda_internal.h"

enum { CQ_MV_ROWS = 8, CQ_GROUP = 8, CQ_WARPS = 4, CQ_T = 64, CQ_KS = 32 };

__device__ __forceinline__ float cq_f16(const unsigned char *p)
{
    unsigned short h = (unsigned short)(__ldg(p) | (__ldg(p + 1) << 8));
    return __half2float(__ushort_as_half(h));
}

/* the 6-bit scale and min of sub-block j of a q4_K block's scales s (quant.h, col_q4k_scale_min) */
__device__ __forceinline__ void cq_q4k_scale_min(int j, const unsigned char *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = __ldg(s + j) & 63;
        *m = __ldg(s + j + 4) & 63;
    } else {
        *sc = (__ldg(s + j + 4) & 0xF) | ((__ldg(s + j - 4) >> 6) << 4);
        *m = (__ldg(s + j + 4) >> 4) | ((__ldg(s + j) >> 6) << 4);
    }
}

/* value k of a row of W (k < K) as col_dequantize_row computes it */
template <int DT> __device__ __forceinline__ float cq_value(const unsigned char *row, int64_t k)
{
    if (DT == COL_Q8_0) {
        const unsigned char *b = row + (k >> 5) * 34;
        return __fmul_rn(cq_f16(b), (float)(signed char)__ldg(b + 2 + (k & 31)));
    } else if (DT == COL_Q4_0) {
        const unsigned char *b = row + (k >> 5) * 18;
        int j = (int)(k & 31), v = j < 16 ? (__ldg(b + 2 + j) & 0xF) : (__ldg(b + 2 + j - 16) >> 4);
        return __fmul_rn(cq_f16(b), (float)(v - 8));
    } else if (DT == COL_Q4_K) {
        const unsigned char *b = row + (k >> 8) * 144;
        int j = (int)(k & 255), s = j >> 5, l = j & 31, sc, m;
        cq_q4k_scale_min(s, b + 4, &sc, &m);
        int v = (__ldg(b + 16 + 32 * (s >> 1) + l) >> (4 * (s & 1))) & 0xF;
        return __fsub_rn(__fmul_rn(__fmul_rn(cq_f16(b), (float)sc), (float)v), __fmul_rn(cq_f16(b + 2), (float)m));
    } else { /* COL_Q6_K */
        const unsigned char *b = row + (k >> 8) * 210;
        int j = (int)(k & 255), h = j >> 7, p = j & 127;
        int lo = (__ldg(b + 64 * h + (p & 63)) >> (4 * (p >> 6))) & 0xF;
        int hi = (__ldg(b + 128 + 32 * h + (p & 31)) >> (2 * (p >> 5))) & 3;
        float d = __fmul_rn(cq_f16(b + 208), (float)(signed char)__ldg(b + 192 + (j >> 4)));
        return __fmul_rn(d, (float)((lo | (hi << 4)) - 32));
    }
}

/* the 32 values of W's piece p (values 32 p .. 32 p + 31 of the row) */
template <int DT> __device__ __forceinline__ void cq_piece(const unsigned char *row, int64_t p, float *v)
{
    if (DT == COL_Q8_0) {
        const unsigned char *b = row + p * 34;
        float d = cq_f16(b);
        for (int j = 0; j < 32; j++)
            v[j] = __fmul_rn(d, (float)(signed char)__ldg(b + 2 + j));
    } else if (DT == COL_Q4_0) {
        const unsigned char *b = row + p * 18;
        float d = cq_f16(b);
        for (int j = 0; j < 16; j++) {
            int q = __ldg(b + 2 + j);
            v[j] = __fmul_rn(d, (float)((q & 0xF) - 8));
            v[j + 16] = __fmul_rn(d, (float)((q >> 4) - 8));
        }
    } else if (DT == COL_Q4_K) {
        const unsigned char *b = row + (p >> 3) * 144;
        int s = (int)(p & 7), sc, m;
        cq_q4k_scale_min(s, b + 4, &sc, &m);
        float d = __fmul_rn(cq_f16(b), (float)sc), dm = __fmul_rn(cq_f16(b + 2), (float)m);
        const unsigned char *qs = b + 16 + 32 * (s >> 1);
        for (int l = 0; l < 32; l++)
            v[l] = __fsub_rn(__fmul_rn(d, (float)((__ldg(qs + l) >> (4 * (s & 1))) & 0xF)), dm);
    } else { /* COL_Q6_K: piece k of half h */
        const unsigned char *b = row + (p >> 3) * 210;
        int h = (int)((p & 7) >> 2), k = (int)(p & 3);
        const unsigned char *ql = b + 64 * h + 32 * (k & 1), *qh = b + 128 + 32 * h;
        float d = cq_f16(b + 208);
        float d0 = __fmul_rn(d, (float)(signed char)__ldg(b + 192 + 8 * h + 2 * k));
        float d1 = __fmul_rn(d, (float)(signed char)__ldg(b + 192 + 8 * h + 2 * k + 1));
        for (int l = 0; l < 32; l++) {
            int lo = (__ldg(ql + l) >> (4 * (k >> 1))) & 0xF, hi = (__ldg(qh + l) >> (2 * k)) & 3;
            v[l] = __fmul_rn(l < 16 ? d0 : d1, (float)((lo | (hi << 4)) - 32));
        }
    }
}

/* y [M, N] = x [M, K] @ W^T, M small: warp w of the block takes W's row n; lanes take pieces in turn */
template <int DT>
__global__ void k_qmv(const unsigned char *__restrict__ w, int64_t wrow, const float *__restrict__ x, float *__restrict__ y,
                      int64_t M, int64_t N, int64_t K)
{
    int lane = threadIdx.x & 31;
    int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N)
        return; /* the whole warp */
    const unsigned char *row = w + n * wrow;
    int64_t np = K / 32;
    for (int64_t m0 = 0; m0 < M; m0 += CQ_GROUP) {
        int g = (int)(M - m0 < (int64_t)CQ_GROUP ? M - m0 : (int64_t)CQ_GROUP);
        float acc[CQ_GROUP];
        for (int m = 0; m < CQ_GROUP; m++)
            acc[m] = 0.0f;
        for (int64_t p = lane; p < np; p += 32) {
            float v[32];
            cq_piece<DT>(row, p, v);
            for (int m = 0; m < CQ_GROUP; m++) {
                if (m >= g)
                    break;
                const float4 *xm = (const float4 *)(x + (m0 + m) * K + 32 * p);
                for (int j = 0; j < 8; j++) {
                    float4 xv = __ldg(xm + j);
                    acc[m] = fmaf(v[4 * j], xv.x, acc[m]);
                    acc[m] = fmaf(v[4 * j + 1], xv.y, acc[m]);
                    acc[m] = fmaf(v[4 * j + 2], xv.z, acc[m]);
                    acc[m] = fmaf(v[4 * j + 3], xv.w, acc[m]);
                }
            }
        }
        for (int m = 0; m < g; m++) {
            float s = cu_warp_sum(acc[m]);
            if (lane == 0)
                y[(m0 + m) * N + n] = s;
        }
    }
}

/* y [M, N] = x [M, K] @ W^T, a CQ_T x CQ_T tile of y per block of 16 x 16 threads (4 x 4 each): slices of
 * CQ_KS along K, x's rows and W's decoded rows staged in shared memory */
template <int DT>
__global__ void k_qgemm(const unsigned char *__restrict__ w, int64_t wrow, const float *__restrict__ x, float *__restrict__ y,
                        int64_t M, int64_t N, int64_t K)
{
    __shared__ float xs[CQ_T][CQ_KS + 1], ws[CQ_T][CQ_KS + 1];
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    int64_t m0 = (int64_t)blockIdx.y * CQ_T, n0 = (int64_t)blockIdx.x * CQ_T;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += CQ_KS) {
        for (int e = threadIdx.x; e < CQ_T * CQ_KS; e += blockDim.x) {
            int r = e / CQ_KS, kk = e % CQ_KS;
            int64_t m = m0 + r, n = n0 + r;
            xs[r][kk] = m < M ? __ldg(x + m * K + k0 + kk) : 0.0f;
            ws[r][kk] = n < N ? cq_value<DT>(w + n * wrow, k0 + kk) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < CQ_KS; kk++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) {
                a[i] = xs[ty * 4 + i][kk];
                b[i] = ws[tx * 4 + i][kk];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int64_t m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
            if (m < M && n < N)
                y[m * N + n] = acc[i][j];
        }
}

template <int DT>
static void launch_matmul(col_cuda_ctx *c, const unsigned char *w, int64_t wrow, const float *x, float *y, int64_t M,
                          int64_t N, int64_t K)
{
    if (M <= CQ_MV_ROWS) {
        unsigned blocks = (unsigned)((N + CQ_WARPS - 1) / CQ_WARPS);
        CU_LAUNCH(k_qmv<DT>, blocks, 32 * CQ_WARPS, 0, c->stream)(w, wrow, x, y, M, N, K);
    } else {
        dim3 grid((unsigned)((N + CQ_T - 1) / CQ_T), (unsigned)((M + CQ_T - 1) / CQ_T));
        CU_LAUNCH(k_qgemm<DT>, grid, 256, 0, c->stream)(w, wrow, x, y, M, N, K);
    }
}

col_status cu_matmul_quant(const col_node *n, const col_exec *ex, col_err *err)
{
    col_cuda_ctx *c = cu_ctx(ex);
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    col_dtype dt = b->dtype;
    int64_t M = n->t.shape[0], N = n->t.shape[1], K = b->shape[0];
    int64_t wrow = (int64_t)col_dtype_row_bytes(dt, b->stride[1]);
    if (n->t.ndim != 2 || a->ndim != 2 || b->ndim != 2 || wrow <= 0 || !col_is_contiguous(a))
        return col_err_set(err, COL_EINTERNAL, "matmul: a quantized (%s) weight in a layout the builder does not make",
                           col_dtype_name(dt));
    if ((N + CQ_T - 1) / CQ_T > INT32_MAX || (M + CQ_T - 1) / CQ_T > 65535)
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: [%lld, %lld] outputs are more than one launch covers",
                           (long long)M, (long long)N);
    if (M == 0 || N == 0)
        return COL_OK;
    if (K == 0)
        return cu_status(cudaMemsetAsync(n->t.data, 0, (size_t)(M * N) * sizeof(float), c->stream), err, "matmul");
    const unsigned char *w = (const unsigned char *)b->data;
    const float *x = (const float *)a->data;
    float *y = (float *)n->t.data;
    switch (dt) {
    case COL_Q8_0: launch_matmul<COL_Q8_0>(c, w, wrow, x, y, M, N, K); break;
    case COL_Q4_0: launch_matmul<COL_Q4_0>(c, w, wrow, x, y, M, N, K); break;
    case COL_Q4_K: launch_matmul<COL_Q4_K>(c, w, wrow, x, y, M, N, K); break;
    case COL_Q6_K: launch_matmul<COL_Q6_K>(c, w, wrow, x, y, M, N, K); break;
    default: return col_err_set(err, COL_EDTYPE, "matmul: %s weights have no CUDA kernel", col_dtype_name(dt));
    }
    return cu_launch(err, "matmul");
}

/* ---- embedding rows ---- */

template <int DT>
__global__ void k_qembed(float *__restrict__ out, const unsigned char *__restrict__ w, int64_t wrow, const void *ids, int i64,
                         int64_t N, int64_t C, int64_t V)
{
    CU_GRID_LOOP(i, N * C) {
        int64_t r = i / C, col = i % C;
        int64_t id = i64 ? ((const int64_t *)ids)[r] : (int64_t)((const int32_t *)ids)[r];
        out[i] = id >= 0 && id < V ? cq_value<DT>(w + id * wrow, col) : 0.0f; /* a bad id (reported at the sync): zeros */
    }
}

col_status cu_embedding_quant(col_cuda_ctx *c, const col_tensor *w, const col_tensor *ids, float *out, col_err *err)
{
    int64_t V = w->shape[0], C = w->shape[1], N = col_numel(ids);
    int64_t wrow = (int64_t)col_dtype_row_bytes(w->dtype, w->stride[0]);
    const unsigned char *wd = (const unsigned char *)w->data;
    int i64 = ids->dtype == COL_I64;
    unsigned blocks = cu_blocks(c, N * C);
    switch (w->dtype) {
    case COL_Q8_0: CU_LAUNCH(k_qembed<COL_Q8_0>, blocks, CU_THREADS, 0, c->stream)(out, wd, wrow, ids->data, i64, N, C, V); break;
    case COL_Q4_0: CU_LAUNCH(k_qembed<COL_Q4_0>, blocks, CU_THREADS, 0, c->stream)(out, wd, wrow, ids->data, i64, N, C, V); break;
    case COL_Q4_K: CU_LAUNCH(k_qembed<COL_Q4_K>, blocks, CU_THREADS, 0, c->stream)(out, wd, wrow, ids->data, i64, N, C, V); break;
    case COL_Q6_K: CU_LAUNCH(k_qembed<COL_Q6_K>, blocks, CU_THREADS, 0, c->stream)(out, wd, wrow, ids->data, i64, N, C, V); break;
    default: return col_err_set(err, COL_EDTYPE, "embedding: %s tables have no CUDA kernel", col_dtype_name(w->dtype));
    }
    return cu_launch(err, "embedding");
}
