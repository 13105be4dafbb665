/* lm_quant.c - quantized models in safetensors files (lm_quant.h). */
#include "lm_quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool col_lm_quant_parse(const char *s, col_dtype *out)
{
    static const struct {
        const char *name;
        col_dtype dt;
    } types[] = {{"int8", COL_Q8_0}, {"q8_0", COL_Q8_0}, {"q4", COL_Q4_0}, {"q4_0", COL_Q4_0},
                 {"q4_K", COL_Q4_K}, {"q4_k", COL_Q4_K}, {"q6_K", COL_Q6_K}, {"q6_k", COL_Q6_K}};
    for (size_t i = 0; s && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(s, types[i].name) == 0) {
            *out = types[i].dt;
            return true;
        }
    return false;
}

col_dtype col_lm_quant_detect(const col_ckpt *ck)
{
    for (int i = 0; ck && i < col_ckpt_count(ck); i++) {
        col_dtype dt;
        int64_t shape[2];
        col_err e = {0};
        if (col_lm_quant_of(ck, col_ckpt_get(ck, i), &dt, shape, &e) == COL_OK && dt != COL_F32)
            return dt;
    }
    return COL_F32;
}

void col_lm_quant_tag(col_dtype dt, const int64_t shape[2], char *buf, size_t size)
{
    snprintf(buf, size, "%s %" PRId64 " %" PRId64, col_dtype_name(dt), shape[0], shape[1]);
}

col_status col_lm_quant_of(const col_ckpt *ck, const col_ckpt_tensor *x, col_dtype *dt, int64_t shape[2],
                           col_err *err)
{
    *dt = COL_F32;
    const char *tag = col_ckpt_tensor_meta(ck, x, x->name);
    if (!tag)
        return COL_OK;
    char name[16];
    long long r = 0, c = 0;
    char extra;
    if (sscanf(tag, "%15s %lld %lld %c", name, &r, &c, &extra) != 3 || r <= 0 || c <= 0)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has the quantization tag \"%.40s\", not \"<dtype> "
                           "<rows> <cols>\"", x->file, x->name, tag);
    col_dtype q = COL_DTYPE_COUNT;
    for (int d = 0; d < COL_DTYPE_COUNT; d++)
        if (col_dtype_is_quant((col_dtype)d) && strcmp(col_dtype_name((col_dtype)d), name) == 0)
            q = (col_dtype)d;
    if (q == COL_DTYPE_COUNT)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' is tagged with dtype '%s', not a quantized one this "
                           "build reads", x->file, x->name, name);
    size_t rb = col_dtype_row_bytes(q, c);
    if (rb == 0 || r > (long long)(SIZE_MAX / rb))
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s': rows of %lld values do not fill whole %s blocks",
                           x->file, x->name, c, name);
    if (x->dtype != COL_ST_U8 || x->ndim != 2 || x->shape[0] != r || (size_t)x->shape[1] != rb ||
        x->nbytes != (size_t)r * rb)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' is tagged %s [%lld, %lld] but holds %s data of %zu "
                           "bytes (expected U8 [%lld, %zu])", x->file, x->name, name, r, c,
                           col_st_dtype_name(x->dtype), x->nbytes, r, rb);
    *dt = q;
    shape[0] = r;
    shape[1] = c;
    return COL_OK;
}

col_status col_lm_quant_read_f32(const col_ckpt_tensor *x, col_dtype dt, const int64_t shape[2],
                                 const col_param_spec *s, float *w, col_err *err)
{
    int64_t want[2];
    col_lm_leaf_shape(s, dt, want);
    if (s->ndim != 2 || want[0] != shape[0] || want[1] != shape[1])
        return col_err_set(err, COL_ESHAPE, "%s: tensor '%s' is a quantized [%" PRId64 ", %" PRId64 "]; the model "
                           "needs %s", x->file, x->name, shape[0], shape[1], s->ndim == 2 ? "another shape" : "a vector");
    size_t rb = col_dtype_row_bytes(dt, shape[1]);
    float *row = malloc(sizeof *row * (size_t)shape[1]);
    if (!row)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    bool swap = s->in_out; /* held [out, in]: row r is column r of [in, out] */
    for (int64_t r = 0; r < shape[0]; r++) {
        uint8_t blk[256]; /* the mapping may be unaligned: one block row at a time through an aligned copy */
        const uint8_t *src = (const uint8_t *)x->data + (size_t)r * rb;
        float *dst = swap ? row : w + r * shape[1];
        size_t bb = col_dtype_block_bytes(dt);
        int64_t per = col_dtype_block(dt);
        for (size_t off = 0, k = 0; off < rb; off += bb, k += (size_t)per) {
            memcpy(blk, src + off, bb);
            col_dequantize_row(dt, blk, per, dst + k);
        }
        if (swap)
            for (int64_t k = 0; k < shape[1]; k++)
                w[k * shape[0] + r] = row[k];
    }
    free(row);
    return COL_OK;
}
