/* cpu_matmul_small.c - f32 matrix products of a few rows (decoding: one token per sequence).
 *
 * c [M, N] = a [M, K] b, for M <= COL_CPU_SMALL_M, b stored [K, N] (GPT-2's Conv1D) or [N, K] (a Linear's
 * transposed weight). Each output element is summed by one thread in an order that depends only on K:
 * row m of c is bit for bit the same whatever M is, so a server decoding k sequences in one product gives
 * each the numbers it gets alone (OpenBLAS picks other kernels, and summation orders, for other M).
 * The work is bandwidth-bound: b is read once for all M rows, split over threads by columns. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SMALL_AVX2 1
#endif

enum { COLS = 1024 }; /* columns of a [K, N] b a task sums: b streams past in 4 KB pieces of its rows (the
                        prefetchers follow them; narrower stripes measured 2x slower), c's rows stay in L2 */

/* c[m, n0:n0+w] for every m, b stored [K, N] with row stride ldb: c[m] += a[m, k] b[k] for k = 0, 1, ...
 * (every element sums its K products in that order, one fused multiply-add each) */
static void stripe_kn(int64_t M, int64_t K, int64_t w, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float *c, int64_t ldc)
{
    for (int64_t m = 0; m < M; m++)
        memset(c + m * ldc, 0, sizeof(float) * (size_t)w);
    int64_t k = 0;
#ifdef SMALL_AVX2
    /* four rows of b per pass over c: the chained multiply-adds keep the order k, k+1, k+2, k+3 */
    for (; k + 4 <= K; k += 4) {
        const float *b0 = b + k * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        for (int64_t m = 0; m < M; m++) {
            const float *am = a + m * lda + k;
            float *cm = c + m * ldc;
            __m256 x0 = _mm256_set1_ps(am[0]), x1 = _mm256_set1_ps(am[1]), x2 = _mm256_set1_ps(am[2]),
                   x3 = _mm256_set1_ps(am[3]);
            int64_t j = 0;
            for (; j + 8 <= w; j += 8) {
                __m256 v = _mm256_loadu_ps(cm + j);
                v = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b0 + j), v);
                v = _mm256_fmadd_ps(x1, _mm256_loadu_ps(b1 + j), v);
                v = _mm256_fmadd_ps(x2, _mm256_loadu_ps(b2 + j), v);
                v = _mm256_fmadd_ps(x3, _mm256_loadu_ps(b3 + j), v);
                _mm256_storeu_ps(cm + j, v);
            }
            for (; j < w; j++)
                cm[j] = fmaf(am[3], b3[j], fmaf(am[2], b2[j], fmaf(am[1], b1[j], fmaf(am[0], b0[j], cm[j]))));
        }
    }
#endif
    for (; k < K; k++) {
        const float *bk = b + k * ldb;
        for (int64_t m = 0; m < M; m++) {
            float x = a[m * lda + k], *cm = c + m * ldc;
            for (int64_t j = 0; j < w; j++)
                cm[j] = fmaf(x, bk[j], cm[j]);
        }
    }
}

/* the dot products of x with 4 rows of y (row stride ldy) over K, each in the same fixed order as dot() */
#ifdef SMALL_AVX2
static inline float hsum(__m256 t)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#endif

/* x . y over K: lanes k mod 16 in two 8-lane sums, added, then halved down; the tail in order */
static float dot(const float *x, const float *y, int64_t K)
{
    int64_t k = 0;
    float s = 0;
#ifdef SMALL_AVX2
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; k + 16 <= K; k += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_loadu_ps(y + k + 8), s1);
    }
    s = hsum(_mm256_add_ps(s0, s1));
#else
    float p[16] = {0};
    for (; k + 16 <= K; k += 16)
        for (int j = 0; j < 16; j++)
            p[j] = fmaf(x[k + j], y[k + j], p[j]);
    float q[8];
    for (int j = 0; j < 8; j++)
        q[j] = p[j] + p[j + 8];
    s = ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));
#endif
    for (; k < K; k++)
        s = fmaf(x[k], y[k], s);
    return s;
}

/* x . y[r] for 4 rows r of y, each summed exactly as dot() sums it (4 rows at once: 4 streams in flight) */
static void dot4(const float *x, const float *y, int64_t ldy, int64_t K, float *out)
{
#ifdef SMALL_AVX2
    const float *y0 = y, *y1 = y + ldy, *y2 = y + 2 * ldy, *y3 = y + 3 * ldy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
        a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y0 + k), a0);
        a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y0 + k + 8), a1);
        b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y1 + k), b0);
        b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y1 + k + 8), b1);
        c0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y2 + k), c0);
        c1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y2 + k + 8), c1);
        d0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y3 + k), d0);
        d1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y3 + k + 8), d1);
    }
    float s[4] = {hsum(_mm256_add_ps(a0, a1)), hsum(_mm256_add_ps(b0, b1)), hsum(_mm256_add_ps(c0, c1)),
                  hsum(_mm256_add_ps(d0, d1))};
    for (int r = 0; r < 4; r++) {
        float v = s[r];
        for (int64_t j = k; j < K; j++)
            v = fmaf(x[j], y[r * ldy + j], v);
        out[r] = v;
    }
#else
    for (int r = 0; r < 4; r++)
        out[r] = dot(x, y + r * ldy, K);
#endif
}

void col_cpu_matmul_small(const col_exec *ex, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                          const float *b, int64_t ldb, bool b_nk, float *c)
{
    int threads = omp_in_parallel() ? 1 : col_cpu_threads(ex);
    bool par = M * N * K > 4 * COL_PAR_MIN;
    if (b_nk) { /* b [N, K]: c[m, n] = a[m, :] . b[n, :], four rows of b at a time */
        int64_t quads = N / 4;
#pragma omp parallel for schedule(static) if (par) num_threads(threads)
        for (int64_t q = 0; q < quads; q++)
            for (int64_t m = 0; m < M; m++) {
                float o[4];
                dot4(a + m * lda, b + 4 * q * ldb, ldb, K, o);
                for (int r = 0; r < 4; r++)
                    c[m * N + 4 * q + r] = o[r];
            }
        for (int64_t n = 4 * quads; n < N; n++)
            for (int64_t m = 0; m < M; m++)
                c[m * N + n] = dot(a + m * lda, b + n * ldb, K);
        return;
    }
    int64_t tasks = (N + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (par) num_threads(threads)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t n0 = t * COLS, w = N - n0 < COLS ? N - n0 : COLS;
        stripe_kn(M, K, w, a, lda, b + n0, ldb, c + n0, N);
    }
}
