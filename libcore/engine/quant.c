/* quant.c - quantizing and dequantizing rows of the block-quantized dtypes (tensor.h, quant.h).
 *
 * q8_0 and q4_0 follow ggml's reference quantizers operation for operation in f32 (gguf-py's
 * numpy quantize() does the same, and tests/test_quant.c compares the bytes with it); q4_K and q6_K
 * follow ggml's reference algorithm (a search over scales that minimises a weighted squared error),
 * for which gguf-py has no quantizer: their bytes are checked by what they dequantize to. Every
 * dequantization is gguf-py's, bit for bit. This file needs ISO C's floating point (no fused
 * multiply-adds: the build's -std=c11 keeps GCC from contracting), as ggml's reference does. */
#include <math.h>
#include <string.h>

#include "quant.h"
#include "tensor.h"

/* ggml's nearest_int: round to nearest, ties to even, for |x| < 2^22 */
static int nearest_int(float x)
{
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- q8_0, q4_0 ---- */

static void quantize_q8_0(const float *x, int64_t nb, col_block_q8_0 *y)
{
    for (int64_t i = 0; i < nb; i++, x += COL_QK) {
        float amax = 0.0f;
        for (int j = 0; j < COL_QK; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = col_f32_to_f16(d);
        for (int j = 0; j < COL_QK; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id); /* half away from zero, as ggml's roundf */
    }
}

static void quantize_q4_0(const float *x, int64_t nb, col_block_q4_0 *y)
{
    for (int64_t i = 0; i < nb; i++, x += COL_QK) {
        /* the first value of the largest magnitude, with its sign (x[0] when all are zeros, as numpy's
         * argmax: ggml's reference takes +0 there, which differs only for a block of zeros led by -0) */
        float amax = fabsf(x[0]), max = x[0];
        for (int j = 1; j < COL_QK; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = col_f32_to_f16(d);
        for (int j = 0; j < COL_QK / 2; j++) {
            int lo = (int)(x[j] * id + 8.5f), hi = (int)(x[j + COL_QK / 2] * id + 8.5f); /* truncation */
            y[i].qs[j] = (uint8_t)(clampi(lo, 0, 15) | (clampi(hi, 0, 15) << 4));
        }
    }
}

/* ---- q4_K ---- */

/* ggml's make_qkx2_quants for 32 values, nmax 15, weights w, squared error: a scale and a min (as a
 * value <= 0 added back, returned negated in *the_min) and the levels L, searching 21 candidate scales
 * around the range's own */
static float qkx2_quants(const float *x, const float *w, uint8_t *L, float *the_min)
{
    enum { N = 32, NMAX = 15, NSTEP = 20 };
    const float rmin = -1.0f, rdelta = 0.1f;
    uint8_t aux[N];
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < N; i++) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, N);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = NMAX / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < N; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, NMAX);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (diff * diff);
    }
    for (int is = 0; is <= NSTEP; is++) {
        iscale = (rmin + rdelta * is + NMAX) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < N; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, NMAX);
            aux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0)
            continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < N; i++) {
            float diff = this_scale * aux[i] + this_min - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, aux, N);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

static void quantize_q4_K(const float *x, int64_t nb, col_block_q4_K *y)
{
    for (int64_t i = 0; i < nb; i++, x += COL_QK_K) {
        uint8_t L[COL_QK_K];
        float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            const float *xs = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++)
                sum_x2 += xs[l] * xs[l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++)
                w[l] = av_x + fabsf(xs[l]);
            scales[j] = qkx2_quants(xs, w, L + 32 * j, &mins[j]);
            max_scale = scales[j] > max_scale ? scales[j] : max_scale;
            max_min = mins[j] > max_min ? mins[j] : max_min;
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        uint8_t *s = y[i].scales;
        memset(s, 0, 12);
        for (int j = 0; j < 8; j++) {
            uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]), lm = (uint8_t)nearest_int(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                s[j] = ls;
                s[j + 4] = lm;
            } else {
                s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                s[j - 4] |= (uint8_t)((ls >> 4) << 6);
                s[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = col_f32_to_f16(max_scale / 63.f);
        y[i].dmin = col_f32_to_f16(max_min / 63.f);
        for (int j = 0; j < 8; j++) { /* the levels again, against the rounded scales */
            uint8_t sc, m;
            col_q4k_scale_min(j, s, &sc, &m);
            float d = col_f16_to_f32(y[i].d) * sc;
            if (d == 0.0f)
                continue;
            float dm = col_f16_to_f32(y[i].dmin) * m;
            for (int l = 0; l < 32; l++)
                L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / d), 0, 15);
        }
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* ---- q6_K ---- */

/* ggml's make_qx_quants for 16 values, nmax 32, weights x^2: a signed scale and levels L + 32 in
 * [0, 63], searching 18 candidate scales around -nmax / (the value of the largest magnitude) */
static float qx_quants(const float *x, int8_t *L)
{
    enum { N = 16, NMAX = 32 };
    float max = 0, amax = 0;
    for (int i = 0; i < N; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) { /* ggml's GROUP_MAX_EPS: all zero */
        memset(L, 0, N);
        return 0.0f;
    }
    float iscale = -NMAX / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < N; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
        L[i] = (int8_t)(l + NMAX);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(NMAX + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < N; i++) {
            int l = clampi(nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < N; i++)
                L[i] = (int8_t)(NMAX + clampi(nearest_int(iscale * x[i]), -NMAX, NMAX - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quantize_q6_K(const float *x, int64_t nb, col_block_q6_K *y)
{
    for (int64_t i = 0; i < nb; i++, x += COL_QK_K) {
        int8_t L[COL_QK_K];
        float scales[16], max_scale = 0, max_abs = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = qx_quants(x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs) {
                max_abs = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs < 1e-15f) /* all zero: d = 0 */
            continue;
        float iscale = -128.f / max_scale;
        y[i].d = col_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int v = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) { /* the levels again, against the rounded scales */
            float d = col_f16_to_f32(y[i].d) * y[i].scales[j];
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *q = L + 128 * h + l;
                y[i].ql[64 * h + l] = (uint8_t)((q[0] & 0xF) | ((q[64] & 0xF) << 4));
                y[i].ql[64 * h + 32 + l] = (uint8_t)((q[32] & 0xF) | ((q[96] & 0xF) << 4));
                y[i].qh[32 * h + l] = (uint8_t)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
            }
    }
}

bool col_quantize_row(col_dtype dt, const float *x, int64_t n, void *out)
{
    int64_t b = col_dtype_block(dt);
    if (!col_dtype_is_quant(dt) || n < 0 || n % b)
        return false;
    switch (dt) {
    case COL_Q8_0: quantize_q8_0(x, n / b, out); break;
    case COL_Q4_0: quantize_q4_0(x, n / b, out); break;
    case COL_Q4_K: quantize_q4_K(x, n / b, out); break;
    case COL_Q6_K: quantize_q6_K(x, n / b, out); break;
    default: return false;
    }
    return true;
}

/* ---- dequantizing ---- */

/* value j of block blk (a block of dt) */
static float block_value(col_dtype dt, const void *blk, int j)
{
    switch (dt) {
    case COL_Q8_0: {
        const col_block_q8_0 *q = blk;
        return col_f16_to_f32(q->d) * (float)q->qs[j];
    }
    case COL_Q4_0: {
        const col_block_q4_0 *q = blk;
        int v = j < 16 ? (q->qs[j] & 0xF) : (q->qs[j - 16] >> 4);
        return col_f16_to_f32(q->d) * (float)(v - 8);
    }
    case COL_Q4_K: {
        const col_block_q4_K *q = blk;
        int s = j / 32, l = j % 32;
        uint8_t sc, m;
        col_q4k_scale_min(s, q->scales, &sc, &m);
        int v = (q->qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0xF;
        float d = col_f16_to_f32(q->d) * sc, dm = col_f16_to_f32(q->dmin) * m;
        return d * (float)v - dm;
    }
    case COL_Q6_K: {
        const col_block_q6_K *q = blk;
        int h = j / 128, p = j % 128;
        int lo = (q->ql[64 * h + p % 64] >> (4 * (p / 64))) & 0xF;
        int hi = (q->qh[32 * h + p % 32] >> (2 * (p / 32))) & 3;
        float d = col_f16_to_f32(q->d) * (float)q->scales[j / 16];
        return d * (float)((lo | (hi << 4)) - 32);
    }
    default: return 0.0f;
    }
}

/* whole rows, block by block: the operations of block_value in loops a compiler vectorizes */
static void dequantize_q8_0(const col_block_q8_0 *q, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += COL_QK) {
        float d = col_f16_to_f32(q[i].d);
        for (int j = 0; j < COL_QK; j++)
            y[j] = d * (float)q[i].qs[j];
    }
}

static void dequantize_q4_0(const col_block_q4_0 *q, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += COL_QK) {
        float d = col_f16_to_f32(q[i].d);
        for (int j = 0; j < COL_QK / 2; j++) {
            y[j] = d * (float)((q[i].qs[j] & 0xF) - 8);
            y[j + COL_QK / 2] = d * (float)((q[i].qs[j] >> 4) - 8);
        }
    }
}

static void dequantize_q4_K(const col_block_q4_K *q, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = col_f16_to_f32(q[i].d), dmin = col_f16_to_f32(q[i].dmin);
        for (int c = 0; c < 4; c++, y += 64) {
            uint8_t sc0, m0, sc1, m1;
            col_q4k_scale_min(2 * c, q[i].scales, &sc0, &m0);
            col_q4k_scale_min(2 * c + 1, q[i].scales, &sc1, &m1);
            float d0 = d * sc0, dm0 = dmin * m0, d1 = d * sc1, dm1 = dmin * m1;
            const uint8_t *qs = q[i].qs + 32 * c;
            for (int l = 0; l < 32; l++) {
                y[l] = d0 * (float)(qs[l] & 0xF) - dm0;
                y[l + 32] = d1 * (float)(qs[l] >> 4) - dm1;
            }
        }
    }
}

static void dequantize_q6_K(const col_block_q6_K *q, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = col_f16_to_f32(q[i].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = q[i].ql + 64 * h, *qh = q[i].qh + 32 * h;
            const int8_t *sc = q[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                int s = l / 16;
                y[l] = d * (float)sc[s] * (float)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
                y[l + 32] = d * (float)sc[s + 2] * (float)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                y[l + 64] = d * (float)sc[s + 4] * (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                y[l + 96] = d * (float)sc[s + 6] * (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
    }
}

bool col_dequantize_row(col_dtype dt, const void *q, int64_t n, float *out)
{
    int64_t b = col_dtype_block(dt);
    if (!col_dtype_is_quant(dt) || n < 0 || n % b)
        return false;
    switch (dt) {
    case COL_Q8_0: dequantize_q8_0(q, n / b, out); break;
    case COL_Q4_0: dequantize_q4_0(q, n / b, out); break;
    case COL_Q4_K: dequantize_q4_K(q, n / b, out); break;
    case COL_Q6_K: dequantize_q6_K(q, n / b, out); break;
    default: return false;
    }
    return true;
}

float col_quant_value(col_dtype dt, const void *q, int64_t i)
{
    int64_t b = col_dtype_block(dt);
    if (!col_dtype_is_quant(dt) || i < 0)
        return 0.0f;
    return block_value(dt, (const char *)q + (size_t)(i / b) * col_dtype_block_bytes(dt), (int)(i % b));
}
