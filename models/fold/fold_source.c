/* fold_source.c - DeepMind parameter arrays by name, stacked blocks by slice. */
#include "fold_source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits "NAME@K" into NAME (copied to base) and K; returns -1 for a plain name, -2 for a bad suffix. */
static long split_layer(const char *name, char *base, size_t cap)
{
    const char *at = strrchr(name, '@');
    size_t n = at ? (size_t)(at - name) : strlen(name);
    if (n >= cap) return -2;
    memcpy(base, name, n);
    base[n] = '\0';
    if (!at) return -1;
    char *end;
    errno = 0;
    long k = strtol(at + 1, &end, 10);
    if (end == at + 1 || *end || errno || k < 0) return -2;
    return k;
}

static col_status src_read(const mb_source *s, const char *name, int ndim, const int64_t *shape, float *dst,
                           col_err *err)
{
    const fold_source_ctx *c = s->ctx;
    char base[MB_NAME_MAX];
    long k = split_layer(name, base, sizeof base);
    if (k == -2) return col_err_set(err, COL_EINVAL, "bad parameter name '%s'", name);
    const col_ckpt_tensor *t = col_ckpt_find(c->ckpt, base);
    if (!t) return col_err_set(err, COL_EFORMAT, "the parameter file has no array %s", base);
    if (k < 0) return col_ckpt_read_f32(t, ndim, shape, dst, err);
    if (t->ndim != ndim + 1 || t->ndim > COL_MAX_DIMS)
        return col_err_set(err, COL_ESHAPE, "the parameter file's array %s has %d dimensions, not %d (a stack of "
                           "blocks of %d)", base, t->ndim, ndim + 1, ndim);
    if (k >= t->shape[0])
        return col_err_set(err, COL_EFORMAT, "the parameter file's array %s holds %lld blocks, not block %ld",
                           base, (long long)t->shape[0], k);
    col_ckpt_tensor slice = *t;
    slice.ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        slice.shape[i] = t->shape[i + 1];
        numel *= (size_t)t->shape[i + 1];
    }
    slice.nbytes = numel * col_st_dtype_size(t->dtype);
    slice.data = (const char *)t->data + (size_t)k * slice.nbytes;
    col_status st = col_ckpt_read_f32(&slice, ndim, shape, dst, err);
    if (st != COL_OK) col_err_prefix(err, "block %ld", k);
    return st;
}

static int src_has(const mb_source *s, const char *name)
{
    const fold_source_ctx *c = s->ctx;
    char base[MB_NAME_MAX];
    long k = split_layer(name, base, sizeof base);
    if (k == -2) return 0;
    const col_ckpt_tensor *t = col_ckpt_find(c->ckpt, base);
    if (!t) return 0;
    return k < 0 || (t->ndim >= 1 && k < t->shape[0]);
}

void fold_source_init(mb_source *out, fold_source_ctx *ctx, const col_ckpt *c)
{
    ctx->ckpt = c;
    out->read = src_read;
    out->has = src_has;
    out->ctx = ctx;
}

int64_t fold_source_stack_depth(const col_ckpt *c, const char *name)
{
    const col_ckpt_tensor *t = col_ckpt_find(c, name);
    if (!t || t->ndim < 1) return -1;
    return t->shape[0];
}
