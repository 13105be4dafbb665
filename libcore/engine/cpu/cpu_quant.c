/* cpu_quant.c - CPU kernels for the quantized weights (tensor.h, quant.h): x @ W^T with W quantized,
 * and the rows of a quantized embedding table.
 *
 * Decoding (M <= COL_QMV_ROWS rows of x): llama.cpp's way. Each row of x is quantized once per call to
 * 8 bits in blocks of 32 (an f32 scale d = max|x| / 127 and q = round(x / d), half away from zero, as
 * ggml's q8_0 but with the scale kept in f32) into the node's scratch; then every block of W is decoded
 * in registers and dotted with the M rows in integers (AVX2: _mm256_maddubs_epi16 / _mm256_madd_epi16),
 * each block's integer sum scaled by the two scales in f32. W is read once, in place, and never
 * dequantized to memory. Threads own fixed chunks of W's rows and each output is summed in one fixed
 * order, so results do not depend on the thread count. The error against the product with exact x is
 * the rounding of x to 8 bits (about 0.2% of |x| a value, averaging out over K): what llama.cpp has.
 *
 * Prefill (more rows): panels of col_matmul_quant_panel(K, N) rows of W are dequantized to f32 in the
 * scratch (exactly col_dequantize_row's values), one at a time, and multiplied with sgemm; no row of x is
 * quantized there. Built without AVX2, FMA and F16C the same integer sums run as plain loops. */
#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define CQ_AVX2 1
#endif

#include "cpu_internal.h"
#include "quant.h"

enum { CQ_CHUNK = 16 }; /* W rows a thread takes at a time */

static inline size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* a row of x quantized: K int8 values, a scale and a sum of the values per block of 32 */
typedef struct {
    const int8_t *q;
    const float *d;
    const int32_t *s;
} xrow;

/* ---- quantizing x ---- */

/* one block of 32: q = round(x / d) half away from zero, d = max|x| / 127, as col_quantize_row's q8_0
 * (the scale not rounded to f16) */
static void quantize_block(const float *x, int8_t *q, float *dout, int32_t *sum)
{
#ifdef CQ_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float d = _mm_cvtss_f32(m4) / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m256 vid = _mm256_set1_ps(id);
    __m256i iv[4];
    for (int k = 0; k < 4; k++) {
        __m256 p = _mm256_mul_ps(v[k], vid);
        __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), half, _CMP_GE_OQ);
        t = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(sign, p))));
        iv[k] = _mm256_cvtps_epi32(t);
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_hadd_epi32(s4, s4);
    s4 = _mm_hadd_epi32(s4, s4);
    *sum = _mm_cvtsi128_si32(s4);
    __m256i p16 = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    __m256i p8 = _mm256_packs_epi16(p16, p16b); /* lanes interleaved by the packs: put them back in order */
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    *dout = d;
#else
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)roundf(x[j] * id);
        s += q[j];
    }
    *sum = s;
    *dout = d;
#endif
}

/* rows [0, M) of x [M, K] into the scratch (col_matmul_quant_xrow_bytes(K) a row) */
static void quantize_rows(const float *x, int64_t M, int64_t K, char *scratch, xrow *xr)
{
    size_t rb = col_matmul_quant_xrow_bytes(K);
    for (int64_t m = 0; m < M; m++) {
        char *p = scratch + (size_t)m * rb;
        int8_t *q = (int8_t *)p;
        float *d = (float *)(p + align64((size_t)K));
        int32_t *s = (int32_t *)((char *)d + align64((size_t)(K / 32) * 4));
        for (int64_t b = 0; b < K / 32; b++)
            quantize_block(x + m * K + 32 * b, q + 32 * b, d + b, s + b);
        xr[m] = (xrow){q, d, s};
    }
}

/* ---- one row of W against M rows of x: out[m] = sum over K of W[k] xq_m[k] ---- */

#ifdef CQ_AVX2
static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* sum of the products of the signed bytes w and y, as 8 i32 lanes (|w| <= 127 or the pairs overflow) */
static inline __m256i dot_i8(__m256i w, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* unsigned bytes u (< 128) times signed y */
static inline __m256i dot_u8(__m256i u, __m256i y) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1)); }

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }
#else
static inline float f16(uint16_t h) { return col_f16_to_f32(h); }
#endif

static void row_q8_0(const col_block_q8_0 *w, int64_t nb, const xrow *xr, int M, float *out)
{
#ifdef CQ_AVX2
    __m256 acc[COL_QMV_ROWS];
    for (int m = 0; m < M; m++)
        acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)w[b].qs);
        float dw = f16(w[b].d);
        for (int m = 0; m < M; m++) {
            __m256i y = _mm256_loadu_si256((const __m256i *)(xr[m].q + 32 * b));
            __m256 s = _mm256_cvtepi32_ps(dot_i8(q, y));
            acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[m].d[b]), s, acc[m]);
        }
    }
    for (int m = 0; m < M; m++)
        out[m] = hsum(acc[m]);
#else
    for (int m = 0; m < M; m++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            int32_t s = 0;
            for (int j = 0; j < 32; j++)
                s += w[b].qs[j] * xr[m].q[32 * b + j];
            acc += f16(w[b].d) * xr[m].d[b] * (float)s;
        }
        out[m] = acc;
    }
#endif
}

static void row_q4_0(const col_block_q4_0 *w, int64_t nb, const xrow *xr, int M, float *out)
{
#ifdef CQ_AVX2
    __m256 acc[COL_QMV_ROWS];
    for (int m = 0; m < M; m++)
        acc[m] = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++) {
        __m128i v = _mm_loadu_si128((const __m128i *)w[b].qs);
        __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), lo4); /* values 0..15, 16..31 */
        q = _mm256_sub_epi8(q, eight);
        float dw = f16(w[b].d);
        for (int m = 0; m < M; m++) {
            __m256i y = _mm256_loadu_si256((const __m256i *)(xr[m].q + 32 * b));
            __m256 s = _mm256_cvtepi32_ps(dot_i8(q, y));
            acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[m].d[b]), s, acc[m]);
        }
    }
    for (int m = 0; m < M; m++)
        out[m] = hsum(acc[m]);
#else
    for (int m = 0; m < M; m++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *y = xr[m].q + 32 * b;
            int32_t s = 0;
            for (int j = 0; j < 16; j++)
                s += ((w[b].qs[j] & 0xF) - 8) * y[j] + ((w[b].qs[j] >> 4) - 8) * y[j + 16];
            acc += f16(w[b].d) * xr[m].d[b] * (float)s;
        }
        out[m] = acc;
    }
#endif
}

/* x = d sc q - dmin m per sub-block of 32: d sc dx sum(q y) - dmin m dx sum(y) */
static void row_q4_K(const col_block_q4_K *w, int64_t nb, const xrow *xr, int M, float *out)
{
    float mins[COL_QMV_ROWS] = {0};
#ifdef CQ_AVX2
    __m256 acc[COL_QMV_ROWS];
    for (int m = 0; m < M; m++)
        acc[m] = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi8(0xF);
#else
    float acc[COL_QMV_ROWS] = {0};
#endif
    for (int64_t b = 0; b < nb; b++) {
        float d = f16(w[b].d), dmin = f16(w[b].dmin), ds[8], dm[8];
        for (int s = 0; s < 8; s++) {
            uint8_t sc, mn;
            col_q4k_scale_min(s, w[b].scales, &sc, &mn);
            ds[s] = d * (float)sc;
            dm[s] = dmin * (float)mn;
        }
        for (int c = 0; c < 4; c++) {
            int64_t xb = 8 * b + 2 * c; /* x's block of sub-block 2c */
#ifdef CQ_AVX2
            __m256i v = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            __m256i q0 = _mm256_and_si256(v, lo4), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
#endif
            for (int m = 0; m < M; m++) {
                const int8_t *y = xr[m].q + 32 * xb;
                float dx0 = xr[m].d[xb], dx1 = xr[m].d[xb + 1];
                mins[m] += dm[2 * c] * dx0 * (float)xr[m].s[xb] + dm[2 * c + 1] * dx1 * (float)xr[m].s[xb + 1];
#ifdef CQ_AVX2
                __m256 s0 = _mm256_cvtepi32_ps(dot_u8(q0, _mm256_loadu_si256((const __m256i *)y)));
                __m256 s1 = _mm256_cvtepi32_ps(dot_u8(q1, _mm256_loadu_si256((const __m256i *)(y + 32))));
                acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(ds[2 * c] * dx0), s0, acc[m]);
                acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(ds[2 * c + 1] * dx1), s1, acc[m]);
#else
                const uint8_t *qs = w[b].qs + 32 * c;
                int32_t s0 = 0, s1 = 0;
                for (int l = 0; l < 32; l++) {
                    s0 += (qs[l] & 0xF) * y[l];
                    s1 += (qs[l] >> 4) * y[l + 32];
                }
                acc[m] += ds[2 * c] * dx0 * (float)s0 + ds[2 * c + 1] * dx1 * (float)s1;
#endif
            }
        }
    }
    for (int m = 0; m < M; m++)
#ifdef CQ_AVX2
        out[m] = hsum(acc[m]) - mins[m];
#else
        out[m] = acc[m] - mins[m];
#endif
}

/* x = d sc (q - 32) per sub-block of 16; x's blocks of 32 hold two sub-blocks */
static void row_q6_K(const col_block_q6_K *w, int64_t nb, const xrow *xr, int M, float *out)
{
#ifdef CQ_AVX2
    __m256 acc[COL_QMV_ROWS];
    for (int m = 0; m < M; m++)
        acc[m] = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi8(0xF), lo2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < nb; b++) {
        float d = f16(w[b].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
            const int8_t *sc = w[b].scales + 8 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i g[4];
            g[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_slli_epi16(_mm256_and_si256(hb, lo2), 4));
            g[1] = _mm256_or_si256(_mm256_and_si256(l1, lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), lo2), 4));
            g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), lo2), 4));
            g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), lo2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_sub_epi8(g[k], off); /* -32..31 */
                __m256i scl = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                __m256i aq = _mm256_sign_epi8(q, q);
                int64_t xb = 8 * b + 4 * h + k;
                for (int m = 0; m < M; m++) {
                    __m256i y = _mm256_loadu_si256((const __m256i *)(xr[m].q + 32 * xb));
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), scl);
                    acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * xr[m].d[xb]), _mm256_cvtepi32_ps(p), acc[m]);
                }
            }
        }
    }
    for (int m = 0; m < M; m++)
        out[m] = hsum(acc[m]);
#else
    for (int m = 0; m < M; m++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            float d = f16(w[b].d);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
                const int8_t *sc = w[b].scales + 8 * h;
                for (int k = 0; k < 4; k++) {
                    int64_t xb = 8 * b + 4 * h + k;
                    const int8_t *y = xr[m].q + 32 * xb;
                    int32_t s = 0;
                    for (int l = 0; l < 32; l++) {
                        int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF, hi = (qh[l] >> (2 * k)) & 3;
                        s += sc[2 * k + l / 16] * ((lo | (hi << 4)) - 32) * y[l];
                    }
                    acc += d * xr[m].d[xb] * (float)s;
                }
            }
        }
        out[m] = acc;
    }
#endif
}

typedef void (*row_fn)(const void *w, int64_t nb, const xrow *xr, int M, float *out);

static row_fn row_of(col_dtype dt)
{
    switch (dt) {
    case COL_Q8_0: return (row_fn)row_q8_0;
    case COL_Q4_0: return (row_fn)row_q4_0;
    case COL_Q4_K: return (row_fn)row_q4_K;
    case COL_Q6_K: return (row_fn)row_q6_K;
    default: return NULL;
    }
}

/* ---- the MATMUL kernel ---- */

col_status col_cpu_matmul_quant(const col_node *n, const col_exec *ex, col_err *err)
{
    const col_cpu_ctx *ctx = ex->be->ctx;
    const col_tensor *a = &n->src[0]->t, *b = &n->src[1]->t;
    col_dtype dt = b->dtype;
    int64_t M = n->t.shape[0], N = n->t.shape[1], K = b->shape[0];
    size_t wrow = col_dtype_row_bytes(dt, b->stride[1]); /* bytes from one row of W to the next */
    const char *w = b->data;
    const float *x = a->data;
    float *c = n->t.data;
    row_fn row = row_of(dt);
    if (n->t.ndim != 2 || a->ndim != 2 || b->ndim != 2 || !row || wrow == 0 || !col_is_contiguous(a))
        return col_err_set(err, COL_EINTERNAL, "matmul: a quantized (%s) weight in a layout the builder does not make",
                           col_dtype_name(dt));
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return col_err_set(err, COL_EUNSUPPORTED, "matmul: a dimension exceeds 2^31");
    if (M == 0 || N == 0)
        return COL_OK;
    int64_t P = col_matmul_quant_panel(K, N);
    size_t per = align64((size_t)(P * K) * sizeof(float)); /* a panel (more rows than COL_QMV_ROWS) */
    size_t need = M <= COL_QMV_ROWS ? (size_t)M * col_matmul_quant_xrow_bytes(K) : per;
    if (ex->scratch_bytes < need)
        return col_err_set(err, COL_EINTERNAL, "matmul: %zu bytes of scratch for a %s weight, %zu needed",
                           ex->scratch_bytes, col_dtype_name(dt), need);
    int nt = omp_in_parallel() ? 1 : col_cpu_threads(ex);
    if (M <= COL_QMV_ROWS) {
        xrow xr[COL_QMV_ROWS];
        quantize_rows(x, M, K, ex->scratch, xr);
        int64_t nb = K / col_dtype_block(dt), chunks = (N + CQ_CHUNK - 1) / CQ_CHUNK;
#pragma omp parallel for schedule(static) if (N * K > COL_PAR_MIN) num_threads(nt)
        for (int64_t ch = 0; ch < chunks; ch++) {
            int64_t n1 = (ch + 1) * CQ_CHUNK < N ? (ch + 1) * CQ_CHUNK : N;
            for (int64_t j = ch * CQ_CHUNK; j < n1; j++) {
                float o[COL_QMV_ROWS];
                row(w + (size_t)j * wrow, nb, xr, (int)M, o);
                for (int64_t m = 0; m < M; m++)
                    c[m * N + j] = o[m];
            }
        }
        return COL_OK;
    }
    /* a panel per thread, each multiplied by a GEMM on that thread: the same calls whatever the count */
    int64_t panels = (N + P - 1) / P, fit = (int64_t)(ex->scratch_bytes / per);
    nt = fit < nt ? (int)fit : nt;
    nt = panels < nt ? (int)panels : nt;
    int restore = col_blas_threads_begin(&ctx->blas, 1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int64_t pi = 0; pi < panels; pi++) {
        int64_t n0 = pi * P, rows = N - n0 < P ? N - n0 : P;
        float *panel = (float *)((char *)ex->scratch + (size_t)omp_get_thread_num() * per);
        for (int64_t r = 0; r < rows; r++)
            col_dequantize_row(dt, w + (size_t)(n0 + r) * wrow, K, panel + r * K);
        ctx->blas.sgemm(COL_BLAS_ROW_MAJOR, COL_BLAS_NO_TRANS, COL_BLAS_TRANS, (int)M, (int)rows, (int)K, 1.0f, x, (int)K,
                        panel, (int)K, 0.0f, c + n0, (int)N);
    }
    col_blas_threads_end(&ctx->blas, restore);
    return COL_OK;
}

/* ---- embedding rows ---- */

void col_cpu_embedding_quant(const col_tensor *w, const col_tensor *ids, float *out, int nt)
{
    int64_t C = w->shape[1], N = col_numel(ids);
    size_t rs = col_dtype_row_bytes(w->dtype, w->stride[0]);
    const char *wd = w->data;
#pragma omp parallel for schedule(static) if (N * C > COL_PAR_MIN) num_threads(nt)
    for (int64_t r = 0; r < N; r++) {
        int64_t id = ids->dtype == COL_I32 ? ((const int32_t *)ids->data)[r] : ((const int64_t *)ids->data)[r];
        col_dequantize_row(w->dtype, wd + (size_t)id * rs, C, out + r * C);
    }
}
