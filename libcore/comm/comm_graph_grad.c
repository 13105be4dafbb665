/* comm_graph_grad.c - collectives with gradients (comm_graph.h, issue 18:
 * tensor and sequence parallelism).
 *
 * Each builder makes one collective node (comm_graph_internal.h) with a
 * gradient builder, which autodiff calls with the gradient of the node
 * itself. The backward of each collective is another collective built by the
 * builders here, so a backward pass can be differentiated again:
 *   all-reduce SAME  <-> copy                 (Megatron's g and f)
 *   all-reduce SPLIT <-> all-reduce SPLIT
 *   all-gather SAME  <-> split
 *   all-gather SPLIT <-> reduce-scatter
 *   all-to-all(a, b) <-> all-to-all(b, a)
 *   shift(by)        <-> shift(-by)
 * The collective nodes of all-gather, all-to-all and reduce-scatter hold
 * blocks (comm_graph.c's arrangements): their gradients are built on the
 * blocks as flat [P, n] tensors, then reshaped to the node's operand. */
#include "comm_graph_internal.h"

/* ---- the gradient builders (dy: the gradient of node n; s: which source) ---- */

static col_node *all_reduce_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)s, (void)user;
    col_cg_params prm;
    col_cg_params_of(n, &prm);
    col_comm *c = col_cg_comm_of(n);
    if (prm.op != COL_RED_SUM && prm.op != COL_RED_AVG)
        return NULL; /* max, min: a constant to autodiff */
    if (prm.use == COL_CG_SPLIT)
        return col_comm_graph_all_reduce(g, c, dy, prm.op, COL_CG_SPLIT);
    col_node *d = col_comm_graph_copy(g, c, dy);
    return prm.op == COL_RED_AVG ? col_scale(g, d, 1.0f / (float)col_comm_size(c), 0.0f) : d;
}

static col_node *copy_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)s, (void)user;
    return col_comm_graph_all_reduce(g, col_cg_comm_of(n), dy, COL_RED_SUM, COL_CG_SAME);
}

/* t as the shape of n's source s (the same number of elements) */
static col_node *as_source(col_graph *g, col_node *t, const col_node *n, int s)
{
    return t ? col_reshape(g, t, n->src[s]->t.ndim, n->src[s]->t.shape) : NULL;
}

/* dy [P, ...] as [P, n] */
static col_node *flat_blocks(col_graph *g, col_node *dy, int64_t p)
{
    int64_t sh[2] = {p, col_numel(&dy->t) / p};
    return col_reshape(g, dy, 2, sh);
}

/* the node holds the P gathered blocks [P, ...]: this rank's block (SAME), or the sum over the ranks of it (SPLIT) */
static col_node *all_gather_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)user;
    col_cg_params prm;
    col_cg_params_of(n, &prm);
    col_comm *c = col_cg_comm_of(n);
    col_node *b = flat_blocks(g, dy, col_comm_size(c));
    col_node *d = prm.use == COL_CG_SPLIT ? col_comm_graph_reduce_scatter(g, c, b, 0) : col_comm_graph_split(g, c, b, 0);
    return as_source(g, d, n, s);
}

/* the node's operand is the P blocks sent: the gradient of each is the all-gather of dy */
static col_node *reduce_scatter_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)user;
    int64_t sh[2] = {1, col_numel(&dy->t)};
    col_node *d = col_comm_graph_all_gather_grad(g, col_cg_comm_of(n), col_reshape(g, dy, 2, sh), 0, COL_CG_SPLIT);
    return as_source(g, d, n, s);
}

/* source 0 is this rank's part (its value, no gradient); source 1 the whole x */
static col_node *split_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)user;
    if (s == 0)
        return NULL;
    col_cg_params prm;
    col_cg_params_of(n, &prm);
    return col_comm_graph_all_gather_grad(g, col_cg_comm_of(n), dy, prm.axis, COL_CG_SAME);
}

/* blocks sent [P, ...] to blocks received [P, ...]: the same exchange undoes it */
static col_node *all_to_all_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)user;
    col_comm *c = col_cg_comm_of(n);
    col_node *d = col_comm_graph_all_to_all_grad(g, c, flat_blocks(g, dy, col_comm_size(c)), 0, 0);
    return as_source(g, d, n, s);
}

static col_node *shift_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    (void)s, (void)user;
    col_cg_params prm;
    col_cg_params_of(n, &prm);
    col_comm *c = col_cg_comm_of(n);
    return col_comm_graph_shift(g, c, dy, col_comm_size(c) - prm.by);
}

/* ---- the builders ---- */

static bool use_ok(col_graph *g, const char *what, col_cg_use use)
{
    return col_check(g, use == COL_CG_SAME || use == COL_CG_SPLIT, COL_EINVAL,
                     "comm graph: %s: use %d is neither COL_CG_SAME nor COL_CG_SPLIT", what, (int)use);
}

col_node *col_comm_graph_all_reduce(col_graph *g, col_comm *c, col_node *x, col_red_op op, col_cg_use use)
{
    const char *what = "all-reduce";
    if (!col_cg_start(g, c, x, what) || !use_ok(g, what, use) ||
        !col_check(g, op >= 0 && op < COL_RED_COUNT, COL_EINVAL, "comm graph: %s: no reduction %d", what, (int)op))
        return NULL;
    col_dtype dt = x->t.dtype;
    bool fl = dt == COL_F32 || dt == COL_BF16 || dt == COL_F16, in = dt == COL_I32 || dt == COL_I64;
    if (!col_check(g, fl || (in && op != COL_RED_AVG), COL_EDTYPE,
                   "comm graph: %s: the %s of %s values is not supported (avg: f32, bf16, f16; sum, max, min: those "
                   "and i32, i64)", what, col_red_op_name(op), col_dtype_name(dt)))
        return NULL;
    col_cg_params prm = {.kind = COL_CGK_ALL_REDUCE, .use = use, .op = op, .alone = true};
    return col_cg_node(g, c, &prm, all_reduce_bwd, dt, x->t.ndim, x->t.shape, 1, &x, "all_reduce");
}

col_node *col_comm_graph_copy(col_graph *g, col_comm *c, col_node *x)
{
    if (!col_cg_start(g, c, x, "copy"))
        return NULL;
    col_cg_params prm = {.kind = COL_CGK_COPY, .alone = true};
    return col_cg_node(g, c, &prm, copy_bwd, x->t.dtype, x->t.ndim, x->t.shape, 1, &x, "tp_copy");
}

col_node *col_comm_graph_all_gather_grad(col_graph *g, col_comm *c, col_node *x, int axis, col_cg_use use)
{
    const char *what = "all-gather";
    if (!col_cg_start(g, c, x, what) || !use_ok(g, what, use) ||
        (axis = col_cg_axis(g, what, "axis", axis, &x->t)) < 0)
        return NULL;
    col_cg_params prm = {.axis = axis, .use = use, .alone = true};
    return col_cg_all_gather(g, c, x, axis, all_gather_bwd, &prm);
}

col_node *col_comm_graph_reduce_scatter(col_graph *g, col_comm *c, col_node *x, int axis)
{
    const char *what = "reduce-scatter";
    if (!col_cg_start(g, c, x, what) || (axis = col_cg_axis(g, what, "axis", axis, &x->t)) < 0 ||
        !col_cg_divides(g, c, what, &x->t, axis))
        return NULL;
    col_cg_params prm = {.axis = axis, .op = COL_RED_SUM, .alone = true};
    return col_cg_reduce_scatter(g, c, x, axis, reduce_scatter_bwd, &prm);
}

col_node *col_comm_graph_split(col_graph *g, col_comm *c, col_node *x, int axis)
{
    const char *what = "split";
    if (!col_cg_start(g, c, x, what) || (axis = col_cg_axis(g, what, "axis", axis, &x->t)) < 0 ||
        !col_cg_divides(g, c, what, &x->t, axis))
        return NULL;
    int64_t m = x->t.shape[axis] / col_comm_size(c);
    col_node *src[2] = {col_slice(g, x, axis, (int64_t)col_comm_rank(c) * m, m), x};
    if (!src[0])
        return NULL;
    col_cg_params prm = {.kind = COL_CGK_COPY, .axis = axis, .alone = true};
    return col_cg_node(g, c, &prm, split_bwd, x->t.dtype, x->t.ndim, src[0]->t.shape, 2, src, "tp_split");
}

col_node *col_comm_graph_all_to_all_grad(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis)
{
    const char *what = "all-to-all";
    if (!col_cg_start(g, c, x, what) || (split_axis = col_cg_axis(g, what, "split axis", split_axis, &x->t)) < 0 ||
        (concat_axis = col_cg_axis(g, what, "concat axis", concat_axis, &x->t)) < 0 ||
        !col_cg_divides(g, c, what, &x->t, split_axis))
        return NULL;
    col_cg_params prm = {.axis = split_axis, .axis2 = concat_axis, .alone = true};
    return col_cg_all_to_all(g, c, x, split_axis, concat_axis, all_to_all_bwd, &prm);
}

col_node *col_comm_graph_shift(col_graph *g, col_comm *c, col_node *x, int by)
{
    if (!col_cg_start(g, c, x, "shift"))
        return NULL;
    int p = col_comm_size(c);
    col_cg_params prm = {.kind = COL_CGK_SHIFT, .by = p > 0 ? ((by % p) + p) % p : 0, .alone = true};
    return col_cg_node(g, c, &prm, shift_bwd, x->t.dtype, x->t.ndim, x->t.shape, 1, &x, "shift");
}
