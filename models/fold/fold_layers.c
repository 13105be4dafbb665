/* fold_layers.c - AlphaFold2's parameters, linear layers and layer norms on the graph. */
#include "fold_layers.h"

#include <stdarg.h>
#include <stdio.h>

#include "ops.h"

col_node *fold_w(fold_ctx *c, int ndim, const int64_t *shape, const char *fmt, ...)
{
    char name[MB_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof name) return mb_fail(c->b, COL_EINVAL, "parameter name too long: '%s'", name);
    if (c->layer >= 0) {
        size_t len = (size_t)k;
        int m = snprintf(name + len, sizeof name - len, "@%d", c->layer);
        if (m < 0 || (size_t)m >= sizeof name - len)
            return mb_fail(c->b, COL_EINVAL, "parameter name too long: '%s'", name);
    }
    return mb_weight(c->b, ndim, shape, "%s", name);
}

col_node *fold_linear(fold_ctx *c, col_node *x, int64_t in, int64_t out, bool bias, const char *module)
{
    col_node *w = fold_w(c, 2, (int64_t[]){in, out}, "%s//weights", module);
    if (!x || !w) return NULL;
    const col_tensor *t = &x->t;
    if (t->ndim < 1 || t->shape[t->ndim - 1] != in)
        return mb_fail(c->b, COL_ESHAPE, "%s%s: input's last dimension is not %lld", c->b->prefix, module,
                       (long long)in);
    int64_t rows = 1;
    for (int i = 0; i < t->ndim - 1; i++) rows *= t->shape[i];
    col_graph *g = c->b->g;
    col_node *y = col_matmul(g, col_reshape(g, x, 2, (int64_t[]){rows, in}), w);
    if (bias) y = col_add(g, y, col_expand(g, col_reshape(g, fold_w(c, 1, (int64_t[]){out}, "%s//bias", module), 2,
                                                           (int64_t[]){1, out}), 2, (int64_t[]){rows, out}));
    int64_t shape[COL_MAX_DIMS];
    for (int i = 0; i < t->ndim - 1; i++) shape[i] = t->shape[i];
    shape[t->ndim - 1] = out;
    return col_reshape(g, y, t->ndim, shape);
}

col_node *fold_layer_norm(fold_ctx *c, col_node *x, int64_t ch, const char *module)
{
    col_node *s = fold_w(c, 1, (int64_t[]){ch}, "%s//scale", module);
    col_node *o = fold_w(c, 1, (int64_t[]){ch}, "%s//offset", module);
    if (!x || !s || !o) return NULL;
    return col_layernorm(c->b->g, x, s, o, 1e-5f);
}

int64_t fold_chunk_rows(const fold_ctx *c, int64_t rows)
{
    if (c->chunk <= 0 || c->chunk >= rows) return rows;
    return c->chunk;
}

int fold_chunk_count(const fold_ctx *c, int64_t rows)
{
    int64_t r = fold_chunk_rows(c, rows);
    return r > 0 ? (int)((rows + r - 1) / r) : 0;
}
