/* mb_builder.c - the parameters of a model graph, named as the model's checkpoints name them. */
#include "mb_builder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

void mb_builder_init(mb_builder *b, col_graph *g, bool trainable, col_dtype dtype)
{
    memset(b, 0, sizeof *b);
    b->g = g;
    b->trainable = trainable;
    b->dtype = dtype;
    b->status = COL_OK;
}

void mb_builder_free(mb_builder *b)
{
    if (!b) return;
    for (int i = 0; i < b->n; i++) free(b->params[i].owned);
    free(b->params);
    b->params = NULL;
    b->n = b->cap = 0;
}

col_node *mb_fail(mb_builder *b, col_status st, const char *fmt, ...)
{
    if (b->status == COL_OK) {
        va_list ap;
        va_start(ap, fmt);
        col_err_vset(&b->err, st, fmt, ap);
        va_end(ap);
        b->status = st;
    }
    return NULL;
}

col_status mb_builder_status(const mb_builder *b, col_err *err)
{
    if (b->status != COL_OK) return col_err_copy(err, &b->err);
    if (b->g && col_graph_status(b->g) != COL_OK) return col_err_copy(err, col_graph_error(b->g));
    return COL_OK;
}

void mb_push(mb_builder *b, const char *fmt, ...)
{
    size_t len = strlen(b->prefix);
    if (b->depth == (int)(sizeof b->scope_len / sizeof b->scope_len[0])) {
        mb_fail(b, COL_EINTERNAL, "parameter name scopes nested too deep at '%s'", b->prefix);
        return;
    }
    b->scope_len[b->depth++] = (int)len;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->prefix + len, sizeof b->prefix - len, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof b->prefix - len) {
        b->prefix[len] = '\0';
        mb_fail(b, COL_EINVAL, "parameter name prefix too long after '%s'", b->prefix);
    }
}

void mb_pop(mb_builder *b)
{
    if (b->depth == 0) {
        mb_fail(b, COL_EINTERNAL, "parameter name scope popped more often than pushed");
        return;
    }
    b->prefix[b->scope_len[--b->depth]] = '\0';
}

int mb_find(const mb_builder *b, const char *name)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->params[i].name, name) == 0) return i;
    return -1;
}

/* prefix + formatted name into name (MB_NAME_MAX); false after recording the error */
static bool full_name(mb_builder *b, char *name, const char *fmt, va_list ap)
{
    size_t len = strlen(b->prefix);
    memcpy(name, b->prefix, len);
    int k = vsnprintf(name + len, MB_NAME_MAX - len, fmt, ap);
    if (k < 0 || (size_t)k >= MB_NAME_MAX - len) {
        name[len] = '\0';
        mb_fail(b, COL_EINVAL, "parameter name too long: %s...", b->prefix);
        return false;
    }
    return true;
}

static col_node *weight_named(mb_builder *b, bool trainable, int ndim, const int64_t *shape, const char *name)
{
    if (ndim < 1 || ndim > 4) return mb_fail(b, COL_EINVAL, "weight with %d dimensions", ndim);
    int j = mb_find(b, name);
    if (j >= 0) {
        mb_param *p = &b->params[j];
        bool same = p->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = p->shape[d] == shape[d];
        if (!same) return mb_fail(b, COL_ESHAPE, "%s is asked for with two shapes", name);
        if (p->trainable != trainable) return mb_fail(b, COL_EINVAL, "%s is asked for as trainable and as frozen", name);
        return p->node;
    }
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        mb_param *np = realloc(b->params, (size_t)cap * sizeof *np);
        if (!np) return mb_fail(b, COL_ENOMEM, "no memory for the parameter list");
        b->params = np;
        b->cap = cap;
    }
    /* the node's own name is short: keep its tail, the full name lives here */
    const char *tail = name;
    size_t nl = strlen(name);
    if (nl > 40) tail = name + nl - 40;
    col_node *n = trainable ? col_param(b->g, tail, b->dtype, ndim, shape) : col_input(b->g, tail, b->dtype, ndim, shape);
    if (!n) return NULL;
    mb_param *p = &b->params[b->n++];
    memset(p, 0, sizeof *p);
    memcpy(p->name, name, nl + 1);
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) p->shape[d] = shape[d];
    p->node = n;
    p->trainable = trainable;
    return n;
}

col_node *mb_weight(mb_builder *b, int ndim, const int64_t *shape, const char *fmt, ...)
{
    if (b->status != COL_OK) return NULL;
    char name[MB_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    bool ok = full_name(b, name, fmt, ap);
    va_end(ap);
    return ok ? weight_named(b, b->trainable, ndim, shape, name) : NULL;
}

col_node *mb_weight_kind(mb_builder *b, bool trainable, int ndim, const int64_t *shape, const char *fmt, ...)
{
    if (b->status != COL_OK) return NULL;
    char name[MB_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    bool ok = full_name(b, name, fmt, ap);
    va_end(ap);
    return ok ? weight_named(b, trainable, ndim, shape, name) : NULL;
}

bool mb_lora_targets(const mb_lora_spec *spec, const char *module)
{
    if (!spec || spec->rank <= 0 || !spec->targets) return false;
    size_t ml = strlen(module);
    for (const char *const *t = spec->targets; *t; t++) {
        size_t tl = strlen(*t);
        if (tl == 0 || tl > ml) continue;
        if (strcmp(module + ml - tl, *t) == 0 && (tl == ml || module[ml - tl - 1] == '.')) return true;
    }
    return false;
}

col_node *mb_linear(mb_builder *b, col_node *x, int64_t out, int64_t in, bool bias, const char *fmt, ...)
{
    if (b->status != COL_OK) return NULL;
    char module[MB_NAME_MAX], name[MB_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    bool ok = full_name(b, module, fmt, ap);
    va_end(ap);
    if (!ok) return NULL;
    size_t ml = strlen(module);
    if (ml + 20 >= MB_NAME_MAX) return mb_fail(b, COL_EINVAL, "parameter name too long: %s", module);
    int64_t ws[2] = {out, in};
    snprintf(name, sizeof name, "%s.weight", module);
    col_node *w = weight_named(b, b->trainable, 2, ws, name);
    col_node *bs = NULL;
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", module);
        bs = weight_named(b, b->trainable, 1, &out, name);
    }
    col_node *y = col_linear(b->g, x, w, bs);
    if (!mb_lora_targets(b->lora, module) || !y) return y;
    int64_t r = b->lora->rank, as[2] = {r, in}, bsh[2] = {out, r};
    snprintf(name, sizeof name, "%s.lora_A.weight", module);
    col_node *a = weight_named(b, true, 2, as, name);
    snprintf(name, sizeof name, "%s.lora_B.weight", module);
    col_node *bb = weight_named(b, true, 2, bsh, name);
    col_node *d = col_linear(b->g, col_linear(b->g, x, a, NULL), bb, NULL);
    float scale = b->lora->alpha / (float)b->lora->rank;
    if (scale != 1.0f) d = col_scale(b->g, d, scale, 0.0f);
    return col_add(b->g, y, d);
}

col_status mb_bind_checkpoint(mb_builder *b, const col_ckpt *c, col_err *err)
{
    col_status st = mb_builder_status(b, err);
    if (st != COL_OK) return st;
    if (b->dtype != COL_F32) return col_err_set(err, COL_EUNSUPPORTED, "binding checkpoint weights: f32 only");
    for (int i = 0; i < b->n; i++) {
        mb_param *p = &b->params[i];
        const col_ckpt_tensor *t = col_ckpt_find(c, p->name);
        if (!t) return col_err_set(err, COL_EFORMAT, "the checkpoint has no tensor %s", p->name);
        int64_t numel = 1;
        for (int d = 0; d < p->ndim; d++) numel *= p->shape[d];
        if (!p->owned) {
            p->owned = malloc((size_t)numel * sizeof(float));
            if (!p->owned) return col_err_set(err, COL_ENOMEM, "no memory for %s", p->name);
        }
        st = col_ckpt_read_f32(t, p->ndim, p->shape, p->owned, err);
        if (st != COL_OK) return st;
        st = col_bind(p->node, p->owned, err);
        if (st != COL_OK) return st;
    }
    return COL_OK;
}
