/* convert.c - whole arrays between the float dtypes (col_convert, tensor.h).
 *
 * Every element goes through the arithmetic of the scalar conversions in
 * tensor.c (round to nearest even, NaN kept a NaN), written as loops the
 * compiler vectorises: bf16 is the top half of an f32, so both directions are
 * integer operations on the bits; f16 uses the F16C instructions where the
 * build has them (IEEE conversions, the same results as the scalar code for
 * every number; a NaN stays a NaN, its payload may differ). Conversions
 * between bf16 and f16 go through f32, which holds both exactly, so they
 * round once. */
#include "tensor.h"

#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

static void bf16_to_f32(float *restrict d, const uint16_t *restrict s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&d[i], &u, 4);
    }
}

static void f32_to_bf16(uint16_t *restrict d, const float *restrict s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &s[i], 4);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t quiet = (u >> 16) | 0x40u; /* a NaN: keep it a (quiet) NaN, as col_f32_to_bf16 */
        d[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

static void f16_to_f32(float *restrict d, const uint16_t *restrict s, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
    for (; i < n; i++)
        d[i] = col_f16_to_f32(s[i]);
}

static void f32_to_f16(uint16_t *restrict d, const float *restrict s, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++)
        d[i] = col_f32_to_f16(s[i]);
}

static void to_f32(float *d, col_dtype st, const void *s, int64_t n)
{
    if (st == COL_F32)
        memcpy(d, s, sizeof(float) * (size_t)n);
    else if (st == COL_BF16)
        bf16_to_f32(d, s, n);
    else
        f16_to_f32(d, s, n);
}

static void from_f32(void *d, col_dtype dt, const float *s, int64_t n)
{
    if (dt == COL_F32)
        memcpy(d, s, sizeof(float) * (size_t)n);
    else if (dt == COL_BF16)
        f32_to_bf16(d, s, n);
    else
        f32_to_f16(d, s, n);
}

bool col_convert(void *dst, col_dtype dt, const void *src, col_dtype st, int64_t n)
{
    bool fl = (dt == COL_F32 || dt == COL_BF16 || dt == COL_F16) && (st == COL_F32 || st == COL_BF16 || st == COL_F16);
    if (!fl || n < 0)
        return false;
    if (dt == st) {
        memcpy(dst, src, (size_t)n * col_dtype_size(dt));
    } else if (st == COL_F32) {
        from_f32(dst, dt, src, n);
    } else if (dt == COL_F32) {
        to_f32(dst, st, src, n);
    } else { /* bf16 <-> f16 through a block of f32 */
        enum { BLK = 512 };
        float buf[BLK];
        for (int64_t i = 0; i < n; i += BLK) {
            int64_t k = n - i < BLK ? n - i : BLK;
            to_f32(buf, st, (const uint16_t *)src + i, k);
            from_f32((uint16_t *)dst + i, dt, buf, k);
        }
    }
    return true;
}
