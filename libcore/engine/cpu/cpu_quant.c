/* cpu_quant.c - CPU kernels for the quantized weights (tensor.h, quant.h): x @ W^T with W quantized,
 * and the rows of a quantized embedding table.
 *
 * Decoding and short prompts (M <= COL_QMV_ROWS rows of x): llama.cpp's way. Each row of x is quantized
 * once per call to 8 bits in blocks of 32 (an f32 scale d = max|x| / 127 and q = round(x / d), half away
 * from zero, as ggml's q8_0 but with the scale kept in f32) into the node's scratch; then every block of W
 * is decoded in registers and dotted with the rows of x, up to CQ_GROUP at a time, in integers (AVX2:
 * _mm256_maddubs_epi16 / _mm256_madd_epi16; AVX-512 VNNI: _mm256_dpbusd_epi32), each block's integer sum
 * scaled by the two scales in f32. q4_0's nibbles (and, with VNNI, q8_0's bytes + 128) go in unsigned, the
 * bias taken back through the sum of x's block. With VNNI, q4_0 and q8_0 take 8 rows of W at a time,
 * transposed in registers (the 8-row kernels below). Row m of the output has the same bits whatever M is.
 * W is read once, in place, and never dequantized to memory. Threads own fixed chunks of W's rows and each
 * output is summed in one fixed order, so results do not depend on the thread count. The error against
 * the product with exact x is the rounding of x to 8 bits (half a step of its block a value, averaging
 * out over K): what llama.cpp has. On a Zen core with W in cache this is 1.6x (q4_0) and 1.25x (q8_0)
 * faster than decoding W to f32 in registers and multiplying by exact x.
 *
 * Prefill (more rows): panels of col_matmul_quant_panel(K, N) rows of W are dequantized to f32 (exactly
 * col_dequantize_row's values), each by one thread into its piece of the scratch, and multiplied with a
 * one-thread sgemm on that thread: the same calls whatever the thread count. No row of x is rounded there.
 * Built without AVX2, FMA and F16C the same integer sums run as plain loops. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define CQ_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define CQ_VNNI 1 /* vpdpbusd: four u8 x s8 products added to an i32 lane in one instruction */
#endif
#endif

#include "cpu_internal.h"
#include "quant.h"

enum { CQ_CHUNK = 16, /* W rows a thread takes at a time */
       CQ_AHEAD = 2 };  /* rows of W asked for ahead of their use */
/* rows of x a row kernel takes at once, their accumulators (two sets) in vector registers */
#ifdef __AVX512VL__
#define CQ_GROUP 8 /* 2 x 8 of 32 registers */
#else
#define CQ_GROUP 4 /* 2 x 4 of 16 */
#endif

#define CQ_INLINE static inline __attribute__((always_inline))

static inline size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* a row of x quantized: K int8 values, a scale and a sum of the values per block of 32, and per block 8 i32
 * lanes that start its integer dot product: - bias * sum in lane 0, zeros elsewhere (bias: what the kernel
 * of W's dtype adds to W's values to make them unsigned bytes, taken back this way) */
typedef struct {
    const int8_t *q;
    const float *d;
    const int32_t *s;
    const int32_t *c;
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

/* rows [0, M) of x [M, K] into the scratch (col_matmul_quant_xrow_bytes(K) a row), with the start
 * vectors of a kernel that adds bias to W's values (0: none made) */
static void quantize_rows(const float *x, int64_t M, int64_t K, int32_t bias, char *scratch, xrow *xr)
{
    size_t rb = col_matmul_quant_xrow_bytes(K);
    for (int64_t m = 0; m < M; m++) {
        char *p = scratch + (size_t)m * rb;
        int8_t *q = (int8_t *)p;
        float *d = (float *)(p + align64((size_t)K));
        int32_t *s = (int32_t *)((char *)d + align64((size_t)(K / 32) * 4));
        int32_t *c = (int32_t *)((char *)s + align64((size_t)(K / 32) * 4));
        for (int64_t b = 0; b < K / 32; b++) {
            quantize_block(x + m * K + 32 * b, q + 32 * b, d + b, s + b);
            if (bias) {
                memset(c + 8 * b, 0, 32);
                c[8 * b] = -bias * s[b];
            }
        }
        xr[m] = (xrow){q, d, s, c};
    }
}

/* ---- one row of W against M rows of x: out[m] = sum over K of W[k] xq_m[k] ----
 * Each kind of block has a step that adds one block's products into M accumulators; a row runs the
 * steps in order, with M a constant after inlining (the accumulators stay in registers) and, for
 * M <= 4, two sets of accumulators taking the blocks in turn (two chains of FMAs, not one). */


static inline float f16(uint16_t h)
{
#ifdef CQ_AVX2
    return _cvtsh_ss(h);
#else
    return col_f16_to_f32(h);
#endif
}

#ifdef CQ_AVX2
static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc + the products of unsigned bytes u and signed bytes y, four adjacent ones a lane (without VNNI:
 * through 16-bit pair sums, so u < 128) */
CQ_INLINE __m256i dot_u8_acc(__m256i acc, __m256i u, __m256i y)
{
#ifdef CQ_VNNI
    return _mm256_dpbusd_epi32(acc, u, y);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1)));
#endif
}

/* unsigned bytes u (< 128) times signed y: 8 i32 lanes */
CQ_INLINE __m256i dot_u8(__m256i u, __m256i y) { return dot_u8_acc(_mm256_setzero_si256(), u, y); }

/* the products of the signed bytes w and y: 8 i32 lanes (|w| <= 128) */
CQ_INLINE __m256i dot_i8(__m256i w, __m256i y) { return dot_u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w)); }

CQ_INLINE __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* q8_0: with VNNI, W's bytes + 128 as unsigned (an xor) against x, started at - 128 sum(x) */
CQ_INLINE void step_q8_0(const col_block_q8_0 *w, int64_t b, const xrow *xr, const int M, __m256 *acc)
{
    __m256i q = load32(w[b].qs);
#ifdef CQ_VNNI
    q = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
#endif
    float dw = f16(w[b].d);
    for (int m = 0; m < M; m++) {
#ifdef CQ_VNNI
        __m256i p = dot_u8_acc(load32(xr[m].c + 8 * b), q, load32(xr[m].q + 32 * b));
#else
        __m256i p = dot_i8(q, load32(xr[m].q + 32 * b));
#endif
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[m].d[b]), _mm256_cvtepi32_ps(p), acc[m]);
    }
}

/* q4_0: the nibbles as they are (0..15) against x, started at - 8 sum(x) */
CQ_INLINE void step_q4_0(const col_block_q4_0 *w, int64_t b, const xrow *xr, const int M, __m256 *acc)
{
    __m128i v = _mm_loadu_si128((const __m128i *)w[b].qs);
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xF)); /* 0..15, 16..31 */
    float dw = f16(w[b].d);
    for (int m = 0; m < M; m++) {
        __m256i p = dot_u8_acc(load32(xr[m].c + 8 * b), q, load32(xr[m].q + 32 * b));
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xr[m].d[b]), _mm256_cvtepi32_ps(p), acc[m]);
    }
}

/* the 8 6-bit scales (sc) and mins (mn) of a q4_K block as f32 vectors: the packing of quant.h's
 * col_q4k_scale_min done on 32-bit words (A = bytes 0..3, B = 4..7, C = 8..11) */
CQ_INLINE void q4k_scales(const uint8_t *s, __m256 *sc, __m256 *mn)
{
    uint32_t A, B, C;
    memcpy(&A, s, 4), memcpy(&B, s + 4, 4), memcpy(&C, s + 8, 4);
    uint32_t s_lo = A & 0x3f3f3f3fu, s_hi = (C & 0x0f0f0f0fu) | (((A >> 6) & 0x03030303u) << 4);
    uint32_t m_lo = B & 0x3f3f3f3fu, m_hi = ((C >> 4) & 0x0f0f0f0fu) | (((B >> 6) & 0x03030303u) << 4);
    *sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)s_hi, (int)s_lo)));
    *mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo)));
}

/* sub-block s of 32: d sc dx sum(q y); all 8 mins at once: - dmin mn dx sum(y) (a lane each, summed with
 * the rest at the end) */
CQ_INLINE void step_q4_K(const col_block_q4_K *w, int64_t b, const xrow *xr, const int M, __m256 *acc)
{
    __m256 sc, mn;
    q4k_scales(w[b].scales, &sc, &mn);
    __m256 ds = _mm256_mul_ps(_mm256_set1_ps(f16(w[b].d)), sc), dm = _mm256_mul_ps(_mm256_set1_ps(f16(w[b].dmin)), mn);
    __m256i q[8];
    for (int c = 0; c < 4; c++) {
        __m256i v = load32(w[b].qs + 32 * c);
        q[2 * c] = _mm256_and_si256(v, _mm256_set1_epi8(0xF));
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0xF));
    }
    for (int m = 0; m < M; m++) {
        __m256 dx = _mm256_loadu_ps(xr[m].d + 8 * b);
        __m256 ysum = _mm256_cvtepi32_ps(load32(xr[m].s + 8 * b));
        __m256 dsx = _mm256_mul_ps(ds, dx);
        acc[m] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), ysum, acc[m]);
        for (int s = 0; s < 8; s++) {
            __m256 p = _mm256_cvtepi32_ps(dot_u8(q[s], load32(xr[m].q + 256 * b + 32 * s)));
            acc[m] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dsx, _mm256_set1_epi32(s)), p, acc[m]);
        }
    }
}

/* groups of 32 (x's blocks) hold two sub-blocks of 16: the i32 lanes 0..3 of a group's sums are the first
 * sub-block's, 4..7 the second's, scaled by d sc dx lane by lane */
CQ_INLINE void step_q6_K(const col_block_q6_K *w, int64_t b, const xrow *xr, const int M, __m256 *acc)
{
    const __m256i lo4 = _mm256_set1_epi8(0xF), lo2 = _mm256_set1_epi8(3);
    __m128i sc8 = _mm_loadu_si128((const __m128i *)w[b].scales);
    __m256 d = _mm256_set1_ps(f16(w[b].d));
    __m256 fs[2] = {_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))),
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))))};
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
        __m256i l0 = load32(ql), l1 = load32(ql + 32), hb = load32(qh);
        __m256i g[4];
        g[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_slli_epi16(_mm256_and_si256(hb, lo2), 4));
        g[1] = _mm256_or_si256(_mm256_and_si256(l1, lo4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), lo2), 4));
        g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), lo2), 4));
        g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), lo2), 4));
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_sub_epi8(g[k], _mm256_set1_epi8(32)); /* -32..31 */
            /* lanes 0..3: scale 2k of this half, 4..7: scale 2k + 1 */
            __m256i idx = _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1);
            __m256 scl = _mm256_permutevar8x32_ps(fs[h], idx);
            int64_t xb = 8 * b + 4 * h + k;
            for (int m = 0; m < M; m++) {
                __m256 p = _mm256_cvtepi32_ps(dot_i8(q, load32(xr[m].q + 32 * xb)));
                acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(scl, _mm256_set1_ps(xr[m].d[xb])), p, acc[m]);
            }
        }
    }
}

#if CQ_GROUP == 8
#define CQ_CASES_4_7(name)                                                                                     \
    case 4: name##_m(w, nb, xr, 4, out); break;                                                                \
    case 5: name##_m(w, nb, xr, 5, out); break;                                                                \
    case 6: name##_m(w, nb, xr, 6, out); break;                                                                \
    case 7: name##_m(w, nb, xr, 7, out); break;
#else
#define CQ_CASES_4_7(name)
#endif

/* name##_m: a row with M rows of x, M a constant once inlined; name: the row for any M <= CQ_GROUP.
 * Two sets of accumulators take the blocks in turn (two chains of FMAs) whatever M is: each output's sums
 * run in an order that depends on K only, so a row of x gets the same bits in any group. */
#define CQ_ROW(name, T, STEP)                                                                                  \
    CQ_INLINE void name##_m(const T *w, int64_t nb, const xrow *xr, const int M, float *out)                  \
    {                                                                                                          \
        const int CH = 2;                                                                                      \
        __m256 acc[2][CQ_GROUP];                                                                               \
        for (int c = 0; c < 2; c++)                                                                            \
            for (int m = 0; m < M; m++)                                                                        \
                acc[c][m] = _mm256_setzero_ps();                                                               \
        int64_t b = 0;                                                                                         \
        for (; b + CH <= nb; b += CH)                                                                          \
            for (int c = 0; c < CH; c++)                                                                       \
                STEP(w, b + c, xr, M, acc[c]);                                                                 \
        for (; b < nb; b++)                                                                                    \
            STEP(w, b, xr, M, acc[0]);                                                                         \
        for (int m = 0; m < M; m++)                                                                            \
            out[m] = hsum(_mm256_add_ps(acc[0][m], acc[1][m]));                                                \
    }                                                                                                          \
    static void name(const void *w, int64_t nb, const xrow *xr, int M, float *out)                            \
    {                                                                                                          \
        switch (M) {                                                                                           \
        case 1: name##_m(w, nb, xr, 1, out); break;                                                            \
        case 2: name##_m(w, nb, xr, 2, out); break;                                                            \
        case 3: name##_m(w, nb, xr, 3, out); break;                                                            \
        CQ_CASES_4_7(name)                                                                                     \
        default: name##_m(w, nb, xr, CQ_GROUP, out); break;                                                    \
        }                                                                                                      \
    }
_Static_assert(CQ_GROUP == 4 || CQ_GROUP == 8, "the rows' switch covers 1..CQ_GROUP");

CQ_ROW(row_q8_0, col_block_q8_0, step_q8_0)
CQ_ROW(row_q4_0, col_block_q4_0, step_q4_0)
CQ_ROW(row_q4_K, col_block_q4_K, step_q4_K)
CQ_ROW(row_q6_K, col_block_q6_K, step_q6_K)

#ifdef CQ_VNNI
/* ---- eight rows of W at once (VNNI): lane r of every vector belongs to W's row r ----
 * A block of each of the 8 rows is loaded and transposed in registers so that vector g holds bytes
 * 4g..4g+3 of every row; vpdpbusd against 4 bytes of x broadcast to every lane then sums each row's
 * products in its own lane, the 8 rows' scales (one gather) are applied in one multiply and each block is
 * one FMA for 8 rows. Each output still sums its blocks in a fixed order (two chains, as the row kernels),
 * so a row of x gets the same bits in any group of rows. */

/* rows r = 0..7 at p + r * wrow, 16 bytes each: out[g] lane r = bytes 4g..4g+3 of row r */
CQ_INLINE void load_t16(const char *p, size_t wrow, __m256i out[4])
{
    __m256i y[4];
    for (int r = 0; r < 4; r++)
        y[r] = _mm256_loadu2_m128i((const __m128i *)(p + (r + 4) * wrow), (const __m128i *)(p + r * wrow));
    __m256i a = _mm256_unpacklo_epi32(y[0], y[1]), b = _mm256_unpackhi_epi32(y[0], y[1]);
    __m256i c = _mm256_unpacklo_epi32(y[2], y[3]), d = _mm256_unpackhi_epi32(y[2], y[3]);
    out[0] = _mm256_unpacklo_epi64(a, c), out[1] = _mm256_unpackhi_epi64(a, c);
    out[2] = _mm256_unpacklo_epi64(b, d), out[3] = _mm256_unpackhi_epi64(b, d);
}

/* the f16 scale at p + r * wrow of each row r, as 8 f32 lanes */
CQ_INLINE __m256 load_scales8(const char *p, __m256i offs)
{
    __m256i v = _mm256_i32gather_epi32((const int *)p, offs, 1); /* the scale and the 2 bytes after it */
    return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(v));
}

CQ_INLINE __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* block b of the 8 rows of q4_0 against M rows of x: nibbles as they are, each lane started at -8 sum(x) */
CQ_INLINE void step8_q4_0(const char *w, size_t wrow, __m256i offs, int64_t b, const xrow *xr, const int M,
                          __m256 *acc)
{
    const char *p = w + (size_t)b * sizeof(col_block_q4_0);
    __m256i t[4], lo[4], hi[4];
    load_t16(p + offsetof(col_block_q4_0, qs), wrow, t);
    for (int g = 0; g < 4; g++) {
        lo[g] = _mm256_and_si256(t[g], _mm256_set1_epi8(0xF));
        hi[g] = _mm256_and_si256(_mm256_srli_epi16(t[g], 4), _mm256_set1_epi8(0xF));
    }
    __m256 dw = load_scales8(p, offs);
    for (int m = 0; m < M; m++) {
        const int8_t *y = xr[m].q + 32 * b;
        __m256i s[4] = {_mm256_set1_epi32(xr[m].c[8 * b]), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()}; /* four short chains of vpdpbusd, not one long one */
        for (int g = 0; g < 4; g++) {
            s[g & 1] = _mm256_dpbusd_epi32(s[g & 1], lo[g], bcast4(y + 4 * g));
            s[2 + (g & 1)] = _mm256_dpbusd_epi32(s[2 + (g & 1)], hi[g], bcast4(y + 16 + 4 * g));
        }
        s[0] = _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]));
        acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xr[m].d[b])), _mm256_cvtepi32_ps(s[0]), acc[m]);
    }
}

/* block b of the 8 rows of q8_0: bytes + 128 (an xor) as unsigned, each lane started at -128 sum(x) */
CQ_INLINE void step8_q8_0(const char *w, size_t wrow, __m256i offs, int64_t b, const xrow *xr, const int M,
                          __m256 *acc)
{
    const char *p = w + (size_t)b * sizeof(col_block_q8_0);
    const char *q = p + offsetof(col_block_q8_0, qs);
    __m256i v[8], a[8], t[8];
    for (int r = 0; r < 8; r++)
        v[r] = _mm256_xor_si256(load32(q + r * wrow), _mm256_set1_epi8((char)0x80));
    for (int r = 0; r < 8; r += 2) { /* pairs of rows: dwords 0,1 4,5 (lo) and 2,3 6,7 (hi) interleaved */
        a[r] = _mm256_unpacklo_epi32(v[r], v[r + 1]);
        a[r + 1] = _mm256_unpackhi_epi32(v[r], v[r + 1]);
    }
    for (int r = 0; r < 8; r += 4) /* quads of rows: one dword of 4 rows per 128-bit half */
        for (int h = 0; h < 2; h++) {
            t[r + 2 * h] = _mm256_unpacklo_epi64(a[r + h], a[r + 2 + h]);
            t[r + 2 * h + 1] = _mm256_unpackhi_epi64(a[r + h], a[r + 2 + h]);
        }
    /* t[0..3]: dwords (0|4), (1|5), (2|6), (3|7) of rows 0..3 in the halves; t[4..7] the same of rows 4..7 */
    __m256i col[8];
    for (int g = 0; g < 4; g++) {
        col[g] = _mm256_permute2x128_si256(t[g], t[4 + g], 0x20);     /* dword g of rows 0..7 */
        col[g + 4] = _mm256_permute2x128_si256(t[g], t[4 + g], 0x31); /* dword g + 4 */
    }
    __m256 dw = load_scales8(p, offs);
    for (int m = 0; m < M; m++) {
        const int8_t *y = xr[m].q + 32 * b;
        __m256i s[4] = {_mm256_set1_epi32(xr[m].c[8 * b]), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
        for (int g = 0; g < 8; g++)
            s[g & 3] = _mm256_dpbusd_epi32(s[g & 3], col[g], bcast4(y + 4 * g));
        s[0] = _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]));
        acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xr[m].d[b])), _mm256_cvtepi32_ps(s[0]), acc[m]);
    }
}

/* name##_m: 8 rows of W from w (wrow bytes apart) against M rows of x; out[m * ldo + r] */
#define CQ_ROW8(name, STEP, BLOCK)                                                                             \
    CQ_INLINE void name##_m(const char *w, size_t wrow, int64_t nb, const xrow *xr, const int M, float *out,     \
                            int64_t ldo, const char *next)                                                     \
    {                                                                                                          \
        const __m256i offs = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),                     \
                                                _mm256_set1_epi32((int)wrow));                                 \
        __m256 acc[2][CQ_GROUP];                                                                               \
        for (int c = 0; c < 2; c++)                                                                            \
            for (int m = 0; m < M; m++)                                                                        \
                acc[c][m] = _mm256_setzero_ps();                                                               \
        int64_t b = 0;                                                                                         \
        size_t pf = 0;                                                                                         \
        for (; b + 2 <= nb; b += 2) {                                                                          \
            while (next && (size_t)b * BLOCK >= pf) { /* 8 rows ahead: a line of each per 64 bytes read */     \
                for (int r = 0; r < 8; r++)                                                                    \
                    __builtin_prefetch(next + r * wrow + pf, 0, 2);                                            \
                pf += 64;                                                                                      \
            }                                                                                                  \
            STEP(w, wrow, offs, b, xr, M, acc[0]);                                                             \
            STEP(w, wrow, offs, b + 1, xr, M, acc[1]);                                                         \
        }                                                                                                      \
        for (; b < nb; b++)                                                                                    \
            STEP(w, wrow, offs, b, xr, M, acc[0]);                                                             \
        for (int m = 0; m < M; m++)                                                                            \
            _mm256_storeu_ps(out + m * ldo, _mm256_add_ps(acc[0][m], acc[1][m]));                              \
    }                                                                                                          \
    static void name(const char *w, size_t wrow, int64_t nb, const xrow *xr, int M, float *out, int64_t ldo,   \
                     const char *next)                                                                         \
    {                                                                                                          \
        switch (M) {                                                                                           \
        case 1: name##_m(w, wrow, nb, xr, 1, out, ldo, next); break;                                           \
        case 2: name##_m(w, wrow, nb, xr, 2, out, ldo, next); break;                                           \
        case 3: name##_m(w, wrow, nb, xr, 3, out, ldo, next); break;                                           \
        case 4: name##_m(w, wrow, nb, xr, 4, out, ldo, next); break;                                           \
        case 5: name##_m(w, wrow, nb, xr, 5, out, ldo, next); break;                                           \
        case 6: name##_m(w, wrow, nb, xr, 6, out, ldo, next); break;                                           \
        case 7: name##_m(w, wrow, nb, xr, 7, out, ldo, next); break;                                           \
        default: name##_m(w, wrow, nb, xr, 8, out, ldo, next); break;                                          \
        }                                                                                                      \
    }
_Static_assert(CQ_GROUP == 8, "VNNI comes with AVX-512VL: 8 rows of x a group");

CQ_ROW8(rows8_q4_0, step8_q4_0, sizeof(col_block_q4_0))
CQ_ROW8(rows8_q8_0, step8_q8_0, sizeof(col_block_q8_0))
#endif /* CQ_VNNI */

#else /* plain loops: the same integer sums, each block's scaled and added in order */

static void row_q8_0(const void *wv, int64_t nb, const xrow *xr, int M, float *out)
{
    const col_block_q8_0 *w = wv;
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
}

static void row_q4_0(const void *wv, int64_t nb, const xrow *xr, int M, float *out)
{
    const col_block_q4_0 *w = wv;
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
}

static void row_q4_K(const void *wv, int64_t nb, const xrow *xr, int M, float *out)
{
    const col_block_q4_K *w = wv;
    for (int m = 0; m < M; m++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            float d = f16(w[b].d), dmin = f16(w[b].dmin);
            for (int s = 0; s < 8; s++) {
                uint8_t sc, mn;
                col_q4k_scale_min(s, w[b].scales, &sc, &mn);
                const uint8_t *qs = w[b].qs + 32 * (s / 2);
                const int8_t *y = xr[m].q + 256 * b + 32 * s;
                int32_t p = 0;
                for (int l = 0; l < 32; l++)
                    p += ((qs[l] >> (4 * (s % 2))) & 0xF) * y[l];
                float dx = xr[m].d[8 * b + s];
                acc += d * (float)sc * dx * (float)p - dmin * (float)mn * dx * (float)xr[m].s[8 * b + s];
            }
        }
        out[m] = acc;
    }
}

static void row_q6_K(const void *wv, int64_t nb, const xrow *xr, int M, float *out)
{
    const col_block_q6_K *w = wv;
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
                    int32_t s0 = 0, s1 = 0;
                    for (int l = 0; l < 32; l++) {
                        int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF, hi = (qh[l] >> (2 * k)) & 3;
                        int p = ((lo | (hi << 4)) - 32) * y[l];
                        if (l < 16)
                            s0 += p;
                        else
                            s1 += p;
                    }
                    acc += d * xr[m].d[xb] * ((float)sc[2 * k] * (float)s0 + (float)sc[2 * k + 1] * (float)s1);
                }
            }
        }
        out[m] = acc;
    }
}
#endif

typedef void (*row_fn)(const void *w, int64_t nb, const xrow *xr, int M, float *out);

/* ---- dequantizing a row: col_dequantize_row's values (the same f32 products), in vectors ---- */

#ifdef CQ_AVX2
static void dequant_q8_0(const col_block_q8_0 *w, int64_t nb, float *y)
{
    for (int64_t b = 0; b < nb; b++, y += 32) {
        __m256 d = _mm256_set1_ps(f16(w[b].d));
        for (int k = 0; k < 4; k++) {
            __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w[b].qs + 8 * k)));
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
        }
    }
}

static void dequant_q4_0(const col_block_q4_0 *w, int64_t nb, float *y)
{
    const __m128i lo4 = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++, y += 32) {
        __m256 d = _mm256_set1_ps(f16(w[b].d));
        __m128i v = _mm_loadu_si128((const __m128i *)w[b].qs);
        __m128i h[2] = {_mm_sub_epi8(_mm_and_si128(v, lo4), eight),
                        _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), lo4), eight)};
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_cvtepi8_epi32(k & 1 ? _mm_srli_si128(h[k / 2], 8) : h[k / 2]);
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
    }
}

static void dequant_q4_K(const col_block_q4_K *w, int64_t nb, float *y)
{
    for (int64_t b = 0; b < nb; b++) {
        float d = f16(w[b].d), dmin = f16(w[b].dmin);
        for (int s = 0; s < 8; s++, y += 32) {
            uint8_t sc, mn;
            col_q4k_scale_min(s, w[b].scales, &sc, &mn);
            __m256 ds = _mm256_set1_ps(d * sc), dm = _mm256_set1_ps(dmin * mn);
            const uint8_t *qs = w[b].qs + 32 * (s / 2);
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k)));
                q = _mm256_and_si256(_mm256_srli_epi32(q, 4 * (s % 2)), _mm256_set1_epi32(0xF));
                _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(ds, _mm256_cvtepi32_ps(q)), dm));
            }
        }
    }
}

static void dequant_q6_K(const col_block_q6_K *w, int64_t nb, float *y)
{
    for (int64_t b = 0; b < nb; b++) {
        float d = f16(w[b].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[b].ql + 64 * h, *qh = w[b].qh + 32 * h;
            for (int k = 0; k < 4; k++, y += 32) /* values 32k .. 32k + 31 of this half */
                for (int e = 0; e < 4; e++) {
                    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + 32 * (k & 1) + 8 * e)));
                    __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + 8 * e)));
                    lo = _mm256_and_si256(_mm256_srli_epi32(lo, 4 * (k >> 1)), _mm256_set1_epi32(0xF));
                    hi = _mm256_and_si256(_mm256_srli_epi32(hi, 2 * k), _mm256_set1_epi32(3));
                    __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
                    __m256 ds = _mm256_set1_ps(d * (float)w[b].scales[8 * h + 2 * k + e / 2]);
                    _mm256_storeu_ps(y + 8 * e, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(q)));
                }
        }
    }
}
#endif

static void dequant_row(col_dtype dt, const void *q, int64_t K, float *y)
{
#ifdef CQ_AVX2
    switch (dt) {
    case COL_Q8_0: dequant_q8_0(q, K / 32, y); return;
    case COL_Q4_0: dequant_q4_0(q, K / 32, y); return;
    case COL_Q4_K: dequant_q4_K(q, K / 256, y); return;
    case COL_Q6_K: dequant_q6_K(q, K / 256, y); return;
    default: break;
    }
#endif
    col_dequantize_row(dt, q, K, y);
}

/* what the decoding kernel of dt adds to W's values (quantize_rows) */
static int32_t bias_of(col_dtype dt)
{
#ifdef CQ_AVX2
    if (dt == COL_Q4_0)
        return 8;
#ifdef CQ_VNNI
    if (dt == COL_Q8_0)
        return 128;
#endif
#endif
    (void)dt;
    return 0;
}

static row_fn row_of(col_dtype dt)
{
    switch (dt) {
    case COL_Q8_0: return row_q8_0;
    case COL_Q4_0: return row_q4_0;
    case COL_Q4_K: return row_q4_K;
    case COL_Q6_K: return row_q6_K;
    default: return NULL;
    }
}

#ifdef CQ_VNNI
typedef void (*row8_fn)(const char *w, size_t wrow, int64_t nb, const xrow *xr, int M, float *out, int64_t ldo,
                        const char *next);

static row8_fn row8_of(col_dtype dt)
{
    return dt == COL_Q4_0 ? rows8_q4_0 : dt == COL_Q8_0 ? rows8_q8_0 : NULL;
}
#endif

/* ---- the MATMUL kernel ---- */

/* Row j of W, if there is one, asked for ahead of its use. Measured with bench/bench_quant on a Zen core
 * (W from memory): reading 1 row at a time and asking 2 rows ahead beat reading 2 or 4 rows side by side
 * (more streams of memory), with or without asking ahead, and 1 row without */
static inline void prefetch_row(const char *w, size_t wrow, int64_t j, int64_t N)
{
    if (j >= N)
        return;
    for (size_t off = 0; off < wrow; off += 64)
        __builtin_prefetch(w + (size_t)j * wrow + off, 0, 3);
}

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
    if (M <= COL_QMV_ROWS) { /* x's rows in groups of CQ_GROUP against each row of W (in L1 by then) */
        xrow xr[COL_QMV_ROWS];
        quantize_rows(x, M, K, bias_of(dt), ex->scratch, xr);
        int64_t nb = K / col_dtype_block(dt), chunks = (N + CQ_CHUNK - 1) / CQ_CHUNK;
#ifdef CQ_VNNI
        row8_fn row8 = wrow < (size_t)INT32_MAX / 8 ? row8_of(dt) : NULL; /* the gather's offsets are i32 */
#endif
#pragma omp parallel for schedule(static) if (N * K > COL_PAR_MIN) num_threads(nt)
        for (int64_t ch = 0; ch < chunks; ch++) {
            int64_t n1 = (ch + 1) * CQ_CHUNK < N ? (ch + 1) * CQ_CHUNK : N;
            for (int64_t j = ch * CQ_CHUNK; j < n1; j++) {
#ifdef CQ_VNNI
                if (row8 && j + 8 <= n1) { /* 8 rows at once (the choice depends on j and N only) */
                    /* the 8 rows after the next 8 are asked for into L2 as these are read: measured on a Zen 4
                     * VM (W from memory, 2 threads), 1.4x (q4_0) and 1.3x (q8_0) the rate of asking for the next 8
                     * into L1 */
                    const char *next = j + 24 <= N ? w + (size_t)(j + 16) * wrow : NULL;
                    for (int64_t m0 = 0; m0 < M; m0 += CQ_GROUP)
                        row8(w + (size_t)j * wrow, wrow, nb, xr + m0, (int)(M - m0 < CQ_GROUP ? M - m0 : CQ_GROUP),
                             c + m0 * N + j, N, next);
                    j += 7;
                    continue;
                }
#endif
                prefetch_row(w, wrow, j + CQ_AHEAD, N);
                for (int64_t m0 = 0; m0 < M; m0 += CQ_GROUP) {
                    float o[CQ_GROUP];
                    int g = (int)(M - m0 < CQ_GROUP ? M - m0 : CQ_GROUP);
                    row(w + (size_t)j * wrow, nb, xr + m0, g, o);
                    for (int m = 0; m < g; m++)
                        c[(m0 + m) * N + j] = o[m];
                }
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
            dequant_row(dt, w + (size_t)(n0 + r) * wrow, K, panel + r * K);
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
        dequant_row(w->dtype, wd + (size_t)id * rs, C, out + r * C);
    }
}
