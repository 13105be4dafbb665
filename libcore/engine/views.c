/* views.c - views (no copy) and data movement ops; their gradients are in views_bwd.c. */
#include "graph_internal.h"

#include <stdio.h>
#include <string.h>

static col_node *base_of(col_node *x) { return (x->flags & COL_NODE_VIEW) ? x->view_base : x; }
static int64_t offset_of(col_node *x) { return (x->flags & COL_NODE_VIEW) ? x->view_offset : 0; }

static col_node *make_view(col_graph *g, col_node *x, int kind, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset)
{
    /* a quantized tensor is addressed by whole blocks (plan.c turns the offset into bytes) */
    int64_t blk = col_dtype_block(x->t.dtype);
    if (col_dtype_is_quant(x->t.dtype) &&
        !col_check(g, offset % blk == 0, COL_ESHAPE, "view: %s starts at value %lld, inside a block of %lld values",
                   x->name, (long long)offset, (long long)blk))
        return NULL;
    col_node *n = col_new_node(g, COL_OP_VIEW, x->t.dtype, ndim, shape, 1, &x);
    if (!n)
        return NULL;
    for (int i = 0; i < ndim; i++)
        n->t.stride[i] = stride[i];
    n->flags |= COL_NODE_VIEW;
    n->view_base = base_of(x);
    n->view_offset = offset;
    n->p.i[0] = kind;
    return n;
}

col_node *col_contiguous(col_graph *g, col_node *x)
{
    if (!x)
        return NULL;
    if (col_is_contiguous(&x->t))
        return x;
    return col_new_node(g, COL_OP_COPY, x->t.dtype, x->t.ndim, x->t.shape, 1, &x);
}

/* Strides that read x's elements in row-major order with new->shape, without
 * copying, if x's layout allows it (PyTorch's view rule: each run of new dims
 * must fall inside a run of old dims that is contiguous in memory). */
static bool view_strides(const col_tensor *x, col_tensor *nt)
{
    if (col_numel(x) == 0 || x->ndim == 0) {
        col_set_contiguous_strides(nt);
        return col_is_contiguous(x) || col_numel(x) <= 1;
    }
    int vd = nt->ndim - 1;
    int64_t base = x->stride[x->ndim - 1], tn = 1, vn = 1;
    for (int td = x->ndim - 1; td >= 0; td--) {
        tn *= x->shape[td];
        if (td == 0 || (x->shape[td - 1] != 1 && x->stride[td - 1] != tn * base)) {
            while (vd >= 0 && (vn < tn || nt->shape[vd] == 1)) {
                nt->stride[vd] = vn * base;
                vn *= nt->shape[vd];
                vd--;
            }
            if (vn != tn)
                return false;
            if (td > 0) {
                base = x->stride[td - 1];
                tn = 1;
                vn = 1;
            }
        }
    }
    return vd == -1;
}

col_node *col_reshape(col_graph *g, col_node *x, int ndim, const int64_t *shape)
{
    if (!x)
        return NULL;
    int64_t want[COL_MAX_DIMS];
    int infer = -1;
    int64_t known = 1;
    if (!col_check(g, ndim >= 0 && ndim <= COL_MAX_DIMS, COL_ESHAPE, "reshape: %d dimensions", ndim))
        return NULL;
    for (int i = 0; i < ndim; i++) {
        want[i] = shape[i];
        if (shape[i] == -1) {
            if (!col_check(g, infer < 0, COL_ESHAPE, "reshape: more than one -1 in the shape"))
                return NULL;
            infer = i;
        } else {
            known *= shape[i];
        }
    }
    int64_t numel = col_numel(&x->t);
    if (infer >= 0) {
        if (!col_check(g, known > 0 && numel % known == 0, COL_ESHAPE, "reshape: cannot infer -1 for %lld elements",
                       (long long)numel))
            return NULL;
        want[infer] = numel / known;
        known = numel;
    }
    char b1[96];
    if (!col_check(g, known == numel, COL_ESHAPE, "reshape: %s has %lld elements, the new shape has %lld",
                   col_shape_str(&x->t, b1, sizeof b1), (long long)numel, (long long)known))
        return NULL;
    col_tensor t = {.ndim = ndim};
    memcpy(t.shape, want, sizeof(int64_t) * (size_t)ndim);
    if (!view_strides(&x->t, &t)) {
        /* the layout cannot be re-read with the new shape: copy first */
        x = col_contiguous(g, x);
        if (!x)
            return NULL;
        col_set_contiguous_strides(&t);
    }
    return make_view(g, x, COL_VIEW_RESHAPE, ndim, t.shape, t.stride, offset_of(x));
}

col_node *col_permute(col_graph *g, col_node *x, const int *perm)
{
    if (!x)
        return NULL;
    int nd = x->t.ndim;
    int64_t shape[COL_MAX_DIMS], stride[COL_MAX_DIMS];
    unsigned seen = 0;
    int64_t packed = 0;
    for (int i = 0; i < nd; i++) {
        if (!col_check(g, perm[i] >= 0 && perm[i] < nd && !(seen & (1u << perm[i])), COL_EINVAL,
                       "permute: %d is not a valid permutation entry for %d dims", perm[i], nd))
            return NULL;
        seen |= 1u << perm[i];
        shape[i] = x->t.shape[perm[i]];
        stride[i] = x->t.stride[perm[i]];
        packed |= (int64_t)perm[i] << (4 * i);
    }
    col_node *n = make_view(g, x, COL_VIEW_PERMUTE, nd, shape, stride, offset_of(x));
    if (n)
        n->p.i[1] = packed;
    return n;
}

col_node *col_transpose(col_graph *g, col_node *x, int d0, int d1)
{
    if (!x)
        return NULL;
    int nd = x->t.ndim;
    if (d0 < 0)
        d0 += nd;
    if (d1 < 0)
        d1 += nd;
    if (!col_check(g, d0 >= 0 && d0 < nd && d1 >= 0 && d1 < nd, COL_EINVAL, "transpose: dims %d,%d out of range for %d dims",
                   d0, d1, nd))
        return NULL;
    int perm[COL_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    return col_permute(g, x, perm);
}

col_node *col_slice(col_graph *g, col_node *x, int axis, int64_t start, int64_t len)
{
    if (!x)
        return NULL;
    int nd = x->t.ndim;
    if (axis < 0)
        axis += nd;
    char b1[96];
    if (!col_check(g, axis >= 0 && axis < nd, COL_EINVAL, "slice: axis out of range for %s",
                   col_shape_str(&x->t, b1, sizeof b1)) ||
        !col_check(g, start >= 0 && len >= 0 && start + len <= x->t.shape[axis], COL_ESHAPE,
                   "slice: [%lld, %lld) out of range for dim %d of %s", (long long)start, (long long)(start + len),
                   axis, col_shape_str(&x->t, b1, sizeof b1)))
        return NULL;
    int64_t shape[COL_MAX_DIMS];
    memcpy(shape, x->t.shape, sizeof shape);
    shape[axis] = len;
    col_node *n = make_view(g, x, COL_VIEW_SLICE, nd, shape, x->t.stride, offset_of(x) + start * x->t.stride[axis]);
    if (n) {
        n->p.i[1] = axis;
        n->p.i[2] = start;
    }
    return n;
}

col_node *col_expand(col_graph *g, col_node *x, int ndim, const int64_t *shape)
{
    if (!x)
        return NULL;
    char b1[96];
    if (!col_check(g, ndim >= x->t.ndim && ndim <= COL_MAX_DIMS, COL_ESHAPE, "expand: %s to %d dims",
                   col_shape_str(&x->t, b1, sizeof b1), ndim))
        return NULL;
    int64_t stride[COL_MAX_DIMS];
    int lead = ndim - x->t.ndim;
    for (int i = 0; i < ndim; i++) {
        if (i < lead) {
            stride[i] = 0;
            continue;
        }
        int64_t s = x->t.shape[i - lead];
        if (!col_check(g, s == shape[i] || s == 1, COL_ESHAPE, "expand: %s cannot broadcast to size %lld in dim %d",
                       col_shape_str(&x->t, b1, sizeof b1), (long long)shape[i], i))
            return NULL;
        stride[i] = (s == shape[i]) ? x->t.stride[i - lead] : 0;
    }
    if (ndim == x->t.ndim) {
        bool same = true;
        for (int i = 0; i < ndim; i++)
            same = same && shape[i] == x->t.shape[i];
        if (same)
            return x;
    }
    return make_view(g, x, COL_VIEW_EXPAND, ndim, shape, stride, offset_of(x));
}

col_node *col_view(col_graph *g, col_node *x, int64_t offset, int ndim, const int64_t *shape, const int64_t *stride)
{
    if (!x)
        return NULL;
    return make_view(g, x, COL_VIEW_GENERIC, ndim, shape, stride, offset_of(x) + offset);
}

/* ---- data movement ---- */

col_node *col_cast(col_graph *g, col_node *x, col_dtype dt)
{
    if (!x)
        return NULL;
    if (x->t.dtype == dt)
        return x;
    return col_new_node(g, COL_OP_CAST, dt, x->t.ndim, x->t.shape, 1, &x);
}

col_node *col_fill(col_graph *g, col_dtype dt, int ndim, const int64_t *shape, float value)
{
    col_node *n = col_new_node(g, COL_OP_FILL, dt, ndim, shape, 0, NULL);
    if (n)
        n->p.f[0] = value;
    return n;
}

col_node *col_scatter_slice(col_graph *g, col_node *src, int ndim, const int64_t *shape, int axis, int64_t start)
{
    if (!src)
        return NULL;
    char b1[96];
    bool ok = src->t.ndim == ndim && axis >= 0 && axis < ndim && start >= 0 &&
              start + src->t.shape[axis] <= shape[axis];
    for (int i = 0; ok && i < ndim; i++)
        ok = i == axis || src->t.shape[i] == shape[i];
    if (!col_check(g, ok, COL_ESHAPE, "scatter_slice: %s does not fit at %lld along dim %d",
                   col_shape_str(&src->t, b1, sizeof b1), (long long)start, axis))
        return NULL;
    col_node *n = col_new_node(g, COL_OP_SCATTER_SLICE, src->t.dtype, ndim, shape, 1, &src);
    if (n) {
        n->p.i[0] = axis;
        n->p.i[1] = start;
    }
    return n;
}

col_node *col_concat(col_graph *g, int n, col_node *const *xs, int axis)
{
    if (!col_check(g, n >= 1 && n <= COL_MAX_SRC, COL_EINVAL, "concat: %d inputs (1..%d)", n, COL_MAX_SRC))
        return NULL;
    for (int i = 0; i < n; i++)
        if (!xs[i])
            return NULL;
    const col_tensor *t0 = &xs[0]->t;
    if (axis < 0)
        axis += t0->ndim;
    if (!col_check(g, axis >= 0 && axis < t0->ndim, COL_EINVAL, "concat: axis out of range"))
        return NULL;
    int64_t shape[COL_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    shape[axis] = 0;
    char b1[96], b2[96];
    for (int k = 0; k < n; k++) {
        const col_tensor *t = &xs[k]->t;
        bool ok = t->ndim == t0->ndim && t->dtype == t0->dtype;
        for (int i = 0; ok && i < t->ndim; i++)
            ok = i == axis || t->shape[i] == t0->shape[i];
        if (!col_check(g, ok, COL_ESHAPE, "concat: %s %s and %s %s differ outside dim %d",
                       col_dtype_name(t0->dtype), col_shape_str(t0, b1, sizeof b1), col_dtype_name(t->dtype),
                       col_shape_str(t, b2, sizeof b2), axis))
            return NULL;
        shape[axis] += t->shape[axis];
    }
    col_node *r = col_new_node(g, COL_OP_CONCAT, t0->dtype, t0->ndim, shape, n, xs);
    if (r)
        r->p.i[0] = axis;
    return r;
}

int col_split(col_graph *g, col_node *x, int axis, int parts, col_node **out)
{
    if (!x)
        return -1;
    if (axis < 0)
        axis += x->t.ndim;
    if (!col_check(g, axis >= 0 && axis < x->t.ndim && parts > 0 && x->t.shape[axis] % parts == 0, COL_ESHAPE,
                   "split: dim %d of size %lld does not split into %d parts", axis,
                   (long long)(axis >= 0 && axis < x->t.ndim ? x->t.shape[axis] : -1), parts))
        return -1;
    int64_t len = x->t.shape[axis] / parts;
    for (int k = 0; k < parts; k++) {
        out[k] = col_slice(g, x, axis, k * len, len);
        if (!out[k])
            return -1;
    }
    return 0;
}

/* ---- positions and the key/value cache ---- */

static bool is_start_node(col_graph *g, col_node *start, const char *op)
{
    char b1[96];
    return col_check(g, start->t.dtype == COL_I64 && col_numel(&start->t) == 1, COL_EINVAL,
                     "%s: the start position must be an i64 [1] node, got %s %s", op, col_dtype_name(start->t.dtype),
                     col_shape_str(&start->t, b1, sizeof b1));
}

col_node *col_arange(col_graph *g, col_node *start, int64_t n, int64_t offset)
{
    if (start && !is_start_node(g, start, "arange"))
        return NULL;
    int64_t shape[1] = {n};
    col_node *r = col_new_node(g, COL_OP_ARANGE, COL_I32, 1, shape, start ? 1 : 0, &start);
    if (r)
        r->p.i[0] = offset;
    return r;
}

col_node *col_kv_write(col_graph *g, col_node *cache, col_node *x, col_node *start)
{
    if (!cache || !x || !start)
        return NULL;
    char b1[96], b2[96];
    if (!is_start_node(g, start, "kv_write") ||
        !col_check(g, cache->op == COL_OP_LEAF && cache->t.ndim == 4 && x->t.ndim == 4 && cache->t.dtype == x->t.dtype,
                   COL_ESHAPE, "kv_write: cache %s must be a [B,H,S,D] leaf of x's dtype, x %s",
                   col_shape_str(&cache->t, b1, sizeof b1), col_shape_str(&x->t, b2, sizeof b2)) ||
        !col_check(g, cache->t.shape[0] == x->t.shape[0] && cache->t.shape[1] == x->t.shape[1] &&
                          cache->t.shape[3] == x->t.shape[3] && x->t.shape[2] <= cache->t.shape[2],
                   COL_ESHAPE, "kv_write: x %s does not fit the cache %s", col_shape_str(&x->t, b1, sizeof b1),
                   col_shape_str(&cache->t, b2, sizeof b2)))
        return NULL;
    col_node *src[3] = {cache, x, start};
    return col_new_node(g, COL_OP_KV_WRITE, cache->t.dtype, 4, cache->t.shape, 3, src);
}

/* ---- many sequences at their own positions (serving) ---- */

static bool is_index_vector(col_graph *g, col_node *x, int64_t B, const char *op, const char *what)
{
    char b1[96], b2[32];
    if (B >= 0)
        snprintf(b2, sizeof b2, "%lld", (long long)B);
    else
        snprintf(b2, sizeof b2, "B");
    return col_check(g, x->t.dtype == COL_I64 && x->t.ndim == 1 && (B < 0 || x->t.shape[0] == B), COL_EINVAL,
                     "%s: %s must be an i64 [%s] node (one per batch row), got %s %s", op, what, b2,
                     col_dtype_name(x->t.dtype), col_shape_str(&x->t, b1, sizeof b1));
}

bool col_rows_operands(col_graph *g, const char *op, int64_t B, int64_t R, col_node **start, col_node **rows)
{
    if (!*start)
        return col_check(g, false, COL_EINVAL, "%s: no start positions", op);
    if (!is_index_vector(g, *start, B, op, "the start positions") ||
        (*rows && !is_index_vector(g, *rows, B, op, "the cache rows")) ||
        !col_check(g, *rows || B <= R, COL_ESHAPE,
                   "%s: %lld batch rows without a row map need a cache of at least as many rows, it has %lld", op,
                   (long long)B, (long long)R))
        return false;
    *start = col_contiguous(g, *start);
    if (*rows)
        *rows = col_contiguous(g, *rows);
    return col_graph_status(g) == COL_OK;
}

col_node *col_arange_rows(col_graph *g, col_node *start, int64_t n, int64_t offset)
{
    if (!start)
        return col_graph_fail(g, COL_EINVAL, "arange_rows: no start positions");
    if (!is_index_vector(g, start, -1, "arange_rows", "the start positions"))
        return NULL;
    start = col_contiguous(g, start);
    int64_t shape[2] = {start ? start->t.shape[0] : 0, n};
    col_node *r = col_new_node(g, COL_OP_ARANGE, COL_I32, 2, shape, 1, &start);
    if (r)
        r->p.i[0] = offset, r->p.i[1] = 1;
    return r;
}

col_node *col_kv_write_rows(col_graph *g, col_node *cache, col_node *x, col_node *start, col_node *rows)
{
    if (!cache || !x)
        return NULL;
    char b1[96], b2[96];
    if (!col_check(g, cache->op == COL_OP_LEAF && cache->t.ndim == 4 && x->t.ndim == 4 && cache->t.dtype == x->t.dtype,
                   COL_ESHAPE, "kv_write_rows: cache %s must be a [S,H,L,D] leaf of x's dtype, x %s",
                   col_shape_str(&cache->t, b1, sizeof b1), col_shape_str(&x->t, b2, sizeof b2)) ||
        !col_check(g, cache->t.shape[1] == x->t.shape[1] && cache->t.shape[3] == x->t.shape[3] &&
                          x->t.shape[2] <= cache->t.shape[2],
                   COL_ESHAPE, "kv_write_rows: x %s does not fit the cache %s", col_shape_str(&x->t, b1, sizeof b1),
                   col_shape_str(&cache->t, b2, sizeof b2)) ||
        !col_rows_operands(g, "kv_write_rows", x->t.shape[0], cache->t.shape[0], &start, &rows))
        return NULL;
    col_node *src[4] = {cache, x, start, rows};
    col_node *n = col_new_node(g, COL_OP_KV_WRITE, cache->t.dtype, 4, cache->t.shape, rows ? 4 : 3, src);
    if (n)
        n->p.i[0] = 1;
    return n;
}
