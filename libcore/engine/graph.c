#include "graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

col_graph *col_graph_new(void)
{
    col_graph *g = calloc(1, sizeof *g);
    return g;
}

void col_graph_free(col_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

col_status col_graph_status(const col_graph *g) { return g->err.code; }
const col_err *col_graph_error(const col_graph *g) { return &g->err; }
int col_graph_count(const col_graph *g) { return g->n; }
col_node *col_graph_node(const col_graph *g, int i) { return (i >= 0 && i < g->n) ? g->nodes[i] : NULL; }

col_node *col_graph_fail(col_graph *g, col_status code, const char *fmt, ...)
{
    if (g->err.code == COL_OK) {
        va_list ap;
        va_start(ap, fmt);
        col_err_vset(&g->err, code, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

bool col_check(col_graph *g, bool cond, col_status code, const char *fmt, ...)
{
    if (cond)
        return true;
    if (g->err.code == COL_OK) {
        va_list ap;
        va_start(ap, fmt);
        col_err_vset(&g->err, code, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool col_any_needs_grad(int nsrc, col_node *const *src)
{
    for (int i = 0; i < nsrc; i++)
        if (src[i] && (src[i]->flags & COL_NODE_NEEDS_GRAD))
            return true;
    return false;
}

static col_node *append(col_graph *g, col_node *n)
{
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 256;
        col_node **nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) {
            free(n);
            return col_graph_fail(g, COL_ENOMEM, "graph: out of memory growing to %d nodes", cap);
        }
        g->nodes = nn;
        g->cap = cap;
    }
    n->id = g->n;
    g->nodes[g->n++] = n;
    return n;
}

static bool shape_ok(col_graph *g, const char *what, int ndim, const int64_t *shape)
{
    if (!col_check(g, ndim >= 0 && ndim <= COL_MAX_DIMS, COL_ESHAPE, "%s: %d dimensions (at most %d)", what,
                   ndim, COL_MAX_DIMS))
        return false;
    for (int i = 0; i < ndim; i++)
        if (!col_check(g, shape[i] >= 0, COL_ESHAPE, "%s: negative size %lld in dim %d", what,
                       (long long)shape[i], i))
            return false;
    return true;
}

/* Quantized tensors (tensor.h) are weights: leaves, views of them, and operands of the two ops with
 * kernels that decode them (matmul, embedding; their builders check the layout). Nothing else makes
 * or reads one: a copy, cast or elementwise kernel has no element size to work with. */
static bool quant_ok(col_graph *g, col_op op, col_dtype dt, int nsrc, col_node *const *src)
{
    if (col_dtype_is_quant(dt) && op != COL_OP_LEAF && op != COL_OP_VIEW)
        return col_check(g, false, COL_EDTYPE,
                         "%s: cannot compute a %s tensor: quantized tensors are weights (leaves) that only matmul "
                         "(x @ W^T) and embedding read",
                         col_op_name(op), col_dtype_name(dt));
    if (op == COL_OP_VIEW || op == COL_OP_MATMUL || op == COL_OP_EMBEDDING)
        return true;
    for (int i = 0; i < nsrc; i++)
        if (col_dtype_is_quant(src[i]->t.dtype))
            return col_check(g, false, COL_EDTYPE,
                             "%s: operand %d (%s) is quantized (%s): only matmul (x @ W^T) and embedding read "
                             "quantized weights",
                             col_op_name(op), i, src[i]->name, col_dtype_name(src[i]->t.dtype));
    return true;
}

col_node *col_new_node(col_graph *g, col_op op, col_dtype dt, int ndim, const int64_t *shape, int nsrc,
                       col_node *const *src)
{
    if (!g || g->err.code != COL_OK)
        return NULL;
    if (nsrc > COL_MAX_SRC)
        return col_graph_fail(g, COL_EINTERNAL, "%s: %d sources (at most %d)", col_op_name(op), nsrc, COL_MAX_SRC);
    for (int i = 0; i < nsrc; i++)
        if (!src[i])
            return col_graph_fail(g, COL_EINVAL, "%s: source %d is missing", col_op_name(op), i);
    if (!shape_ok(g, col_op_name(op), ndim, shape))
        return NULL;
    if ((unsigned)dt >= COL_DTYPE_COUNT)
        return col_graph_fail(g, COL_EDTYPE, "%s: unknown dtype %d", col_op_name(op), (int)dt);
    if (!quant_ok(g, op, dt, nsrc, src))
        return NULL;
    col_node *n = calloc(1, sizeof *n);
    if (!n)
        return col_graph_fail(g, COL_ENOMEM, "graph: out of memory for a node");
    n->op = op;
    n->nsrc = nsrc;
    for (int i = 0; i < nsrc; i++)
        n->src[i] = src[i];
    n->t.dtype = dt;
    n->t.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        n->t.shape[i] = shape[i];
    col_set_contiguous_strides(&n->t);
    if (col_any_needs_grad(nsrc, src))
        n->flags |= COL_NODE_NEEDS_GRAD;
    if (g->in_backward)
        n->flags |= COL_NODE_BACKWARD;
    n->segment = g->cur_segment;
    snprintf(n->name, sizeof n->name, "%s", col_op_name(op));
    return append(g, n);
}

static col_node *new_leaf(col_graph *g, const char *name, col_dtype dt, int ndim, const int64_t *shape,
                          uint32_t flags)
{
    int64_t blk = col_dtype_block(dt);
    if (g && g->err.code == COL_OK && col_dtype_is_quant(dt) &&
        !col_check(g, ndim >= 1 && ndim <= COL_MAX_DIMS && shape[ndim - 1] % blk == 0, COL_ESHAPE,
                   "leaf %s: a %s tensor needs a last dim that is a multiple of its block of %lld values, got %lld",
                   name ? name : "", col_dtype_name(dt), (long long)blk,
                   ndim >= 1 && ndim <= COL_MAX_DIMS ? (long long)shape[ndim - 1] : 0LL))
        return NULL;
    col_node *n = col_new_node(g, COL_OP_LEAF, dt, ndim, shape, 0, NULL);
    if (!n)
        return NULL;
    n->flags |= flags;
    n->segment = 0; /* leaves are never recomputed */
    snprintf(n->name, sizeof n->name, "%s", name ? name : "leaf");
    return n;
}

col_node *col_param(col_graph *g, const char *name, col_dtype dt, int ndim, const int64_t *shape)
{
    if (g && g->err.code == COL_OK &&
        !col_check(g, col_dtype_is_float(dt), COL_EDTYPE, "param %s: dtype %s cannot be trained%s", name ? name : "",
                   col_dtype_name(dt), col_dtype_is_quant(dt) ? " (a quantized weight is an input leaf)" : ""))
        return NULL;
    return new_leaf(g, name, dt, ndim, shape, COL_NODE_PARAM | COL_NODE_NEEDS_GRAD);
}

col_node *col_input(col_graph *g, const char *name, col_dtype dt, int ndim, const int64_t *shape)
{
    return new_leaf(g, name, dt, ndim, shape, COL_NODE_INPUT);
}

col_status col_bind(col_node *leaf, void *data, col_err *err)
{
    if (!leaf || (leaf->op != COL_OP_LEAF))
        return col_err_set(err, COL_EINVAL, "bind: only parameters and inputs can be bound");
    leaf->bound = data;
    leaf->t.data = data;
    return COL_OK;
}

col_status col_bind_grad(col_node *param, void *grad, col_err *err)
{
    if (!param || !(param->flags & COL_NODE_PARAM))
        return col_err_set(err, COL_EINVAL, "bind_grad: node is not a parameter");
    param->grad_data = grad;
    return COL_OK;
}

void col_mark_output(col_node *n)
{
    if (n)
        n->flags |= COL_NODE_OUTPUT;
}

void *col_data(const col_node *n) { return n ? n->t.data : NULL; }

col_tensor col_node_tensor(const col_node *n) { return n->t; }

col_node *col_graph_rng_counter(col_graph *g)
{
    if (!g || g->err.code != COL_OK)
        return NULL;
    if (!g->rng_counter) {
        int64_t one[1] = {1};
        int seg = g->cur_segment;
        g->cur_segment = 0;
        g->rng_counter = col_input(g, "rng_counter", COL_I64, 1, one);
        g->cur_segment = seg;
        if (g->rng_counter)
            col_bind(g->rng_counter, &g->rng_counter_value, NULL);
    }
    return g->rng_counter;
}

void col_graph_set_rng_counter(col_graph *g, int64_t value) { g->rng_counter_value = value; }

uint64_t col_graph_dropout_offset(const col_graph *g) { return g->dropout_streams; }
void col_graph_set_dropout_offset(col_graph *g, uint64_t offset) { g->dropout_streams = offset; }

void col_checkpoint_begin(col_graph *g)
{
    if (!g || g->err.code != COL_OK)
        return;
    if (g->cur_segment) {
        col_graph_fail(g, COL_ESTATE, "checkpoint: segments cannot nest");
        return;
    }
    g->cur_segment = ++g->next_segment;
}

void col_checkpoint_end(col_graph *g)
{
    if (!g || g->err.code != COL_OK)
        return;
    if (!g->cur_segment) {
        col_graph_fail(g, COL_ESTATE, "checkpoint: end without begin");
        return;
    }
    g->cur_segment = 0;
}
