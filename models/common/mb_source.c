/* mb_source.c - weights by diffusers name from a checkpoint. */
#include "mb_source.h"

#include <stdio.h>
#include <string.h>

static const col_ckpt_tensor *lookup(const mb_ckpt_source *c, const char *name)
{
    if (!c->prefix[0]) return col_ckpt_find(c->ckpt, name);
    char full[512];
    int k = snprintf(full, sizeof full, "%s%s", c->prefix, name);
    return k > 0 && (size_t)k < sizeof full ? col_ckpt_find(c->ckpt, full) : NULL;
}

static col_status ckpt_read(const mb_source *s, const char *name, int ndim, const int64_t *shape, float *dst,
                            col_err *err)
{
    const mb_ckpt_source *c = s->ctx;
    const col_ckpt_tensor *t = lookup(c, name);
    if (!t) return col_err_set(err, COL_EFORMAT, "the weights have no tensor %s%s", c->prefix, name);
    return col_ckpt_read_f32(t, ndim, shape, dst, err);
}

static int ckpt_has(const mb_source *s, const char *name)
{
    return lookup(s->ctx, name) != NULL;
}

void mb_source_ckpt(mb_source *out, mb_ckpt_source *ctx, const col_ckpt *c, const char *prefix)
{
    ctx->ckpt = c;
    snprintf(ctx->prefix, sizeof ctx->prefix, "%s", prefix ? prefix : "");
    out->read = ckpt_read;
    out->has = ckpt_has;
    out->ctx = ctx;
}
