#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t col_dtype_size(col_dtype dt)
{
    switch (dt) {
    case COL_F32: return 4;
    case COL_BF16: return 2;
    case COL_F16: return 2;
    case COL_I32: return 4;
    case COL_I64: return 8;
    default: return 0;
    }
}

const char *col_dtype_name(col_dtype dt)
{
    switch (dt) {
    case COL_F32: return "f32";
    case COL_BF16: return "bf16";
    case COL_F16: return "f16";
    case COL_I32: return "i32";
    case COL_I64: return "i64";
    case COL_Q8_0: return "q8_0";
    case COL_Q4_0: return "q4_0";
    case COL_Q4_K: return "q4_K";
    case COL_Q6_K: return "q6_K";
    default: return "?";
    }
}

bool col_dtype_is_float(col_dtype dt)
{
    return dt == COL_F32 || dt == COL_BF16 || dt == COL_F16;
}

bool col_dtype_is_quant(col_dtype dt) { return dt == COL_Q8_0 || dt == COL_Q4_0 || dt == COL_Q4_K || dt == COL_Q6_K; }

int64_t col_dtype_block(col_dtype dt)
{
    switch (dt) {
    case COL_Q8_0:
    case COL_Q4_0: return 32;
    case COL_Q4_K:
    case COL_Q6_K: return 256;
    default: return col_dtype_size(dt) ? 1 : 0;
    }
}

size_t col_dtype_block_bytes(col_dtype dt)
{
    switch (dt) {
    case COL_Q8_0: return 34;
    case COL_Q4_0: return 18;
    case COL_Q4_K: return 144;
    case COL_Q6_K: return 210;
    default: return col_dtype_size(dt);
    }
}

size_t col_dtype_row_bytes(col_dtype dt, int64_t n)
{
    int64_t b = col_dtype_block(dt);
    if (b <= 0 || n < 0 || n % b)
        return 0;
    return (size_t)(n / b) * col_dtype_block_bytes(dt);
}

size_t col_tensor_bytes(const col_tensor *t) { return col_dtype_row_bytes(t->dtype, col_numel(t)); }

int64_t col_numel(const col_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

void col_set_contiguous_strides(col_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

bool col_is_contiguous(const col_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

bool col_same_shape(const col_tensor *a, const col_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

const char *col_shape_str(const col_tensor *t, char *buf, size_t n)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, n - used, "[");
    for (int i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

int64_t col_offset_of(const col_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        off += idx[i] * t->stride[i];
    return off;
}

bool col_index_next(const col_tensor *t, int64_t *idx)
{
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (++idx[i] < t->shape[i])
            return true;
        idx[i] = 0;
    }
    return false;
}

void col_batch_offsets(const int64_t *shape, int nd, int64_t bi, const col_tensor *a, const col_tensor *b, int64_t *oa,
                       int64_t *ob)
{
    int64_t rem = bi;
    *oa = 0, *ob = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t i = rem % shape[d];
        rem /= shape[d];
        *oa += i * a->stride[d];
        *ob += i * b->stride[d];
    }
}

/* the float with bit pattern u, and the bit pattern of f */
static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float col_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t col_f32_to_bf16(float f)
{
    uint32_t u = bits_of_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float col_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return f32_from_bits(u);
}

uint16_t col_f32_to_f16(float f)
{
    uint32_t u = bits_of_f32(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        float af = f32_from_bits(a);
        /* 2^-24 is the subnormal step; nearbyint rounds half to even */
        uint32_t m = (uint32_t)nearbyintf(af * 16777216.0f);
        return (uint16_t)(sign | m);
    }
    uint32_t exp = (a >> 23) - 127 + 15;
    uint32_t man = a & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

double col_get_as_f64(const col_tensor *t, int64_t off)
{
    switch (t->dtype) {
    case COL_F32: return ((const float *)t->data)[off];
    case COL_BF16: return col_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case COL_F16: return col_f16_to_f32(((const uint16_t *)t->data)[off]);
    case COL_I32: return ((const int32_t *)t->data)[off];
    case COL_I64: return (double)((const int64_t *)t->data)[off];
    case COL_Q8_0:
    case COL_Q4_0:
    case COL_Q4_K:
    case COL_Q6_K: return NAN; /* no element to read: col_quant_value (quant.c) decodes one */
    default: return 0.0;
    }
}

void col_set_from_f64(const col_tensor *t, int64_t off, double v)
{
    switch (t->dtype) {
    case COL_F32: ((float *)t->data)[off] = (float)v; break;
    case COL_BF16: ((uint16_t *)t->data)[off] = col_f32_to_bf16((float)v); break;
    case COL_F16: ((uint16_t *)t->data)[off] = col_f32_to_f16((float)v); break;
    case COL_I32: ((int32_t *)t->data)[off] = (int32_t)v; break;
    case COL_I64: ((int64_t *)t->data)[off] = (int64_t)v; break;
    default: break;
    }
}
