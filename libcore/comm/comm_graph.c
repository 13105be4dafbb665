/* comm_graph.c - collectives as EXTERN graph nodes (comm_graph.h), and the
 * node and arrangements comm_graph_grad.c builds its collectives with
 * (comm_graph_internal.h).
 *
 * The collectives move whole blocks, one per rank, of one contiguous buffer.
 * A tensor of shape S seen around an axis is [A, m, B] (A the product of the
 * dimensions before it, B of those after). The received buffer is P blocks of
 * the part's shape, [P, A, m, B]; concatenating the blocks along the axis is
 * [A, P*m, B] = the permute [A, P, m, B], made contiguous (no copy when A is
 * 1). Splitting x along an axis into the P blocks to send is the reverse:
 * [A, P, m, B] permuted to [P, A, m, B] (no copy when A is 1). */
#include "comm_graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

_Static_assert(sizeof(uintptr_t) <= sizeof(int64_t), "a communicator's address fits a node parameter");

enum { P_KIND, P_AXIS, P_AXIS2, P_USE, P_OP, P_BY, P_ALONE, P_COMM };

/* ---- the function the plan runner calls ---- */

/* the transport and the plan's memory agree: MPI moves host memory, NCCL device memory */
static col_status memory_fits(col_comm *c, const col_backend *be, const char *what, col_err *err)
{
    bool nccl = strcmp(col_comm_transport_name(c), "nccl") == 0;
    if (be->mem && !nccl)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "comm graph: %s: the %s transport moves host memory, and this plan's data are the %s "
                           "backend's memory (a communicator over NCCL moves that)",
                           what, col_comm_transport_name(c), be->name ? be->name : "device");
    if (!be->mem && nccl)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "comm graph: %s: the nccl transport moves device memory, and this plan's data are host "
                           "memory (plan the graph for the CUDA backend, or use an MPI communicator)", what);
    return COL_OK;
}

/* bytes from src to dst in the plan's memory: host, or the backend's (through host memory when it has no
 * device-to-device copy) */
static col_status local_copy(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err)
{
    if (dst == src || bytes == 0)
        return COL_OK;
    if (!be->mem) {
        memcpy(dst, src, bytes);
        return COL_OK;
    }
    if (be->mem->copy)
        return be->mem->copy(be, dst, src, bytes, err);
    void *h = malloc(bytes);
    if (!h)
        return col_err_set(err, COL_ENOMEM, "comm graph: copy: no host memory for %zu bytes", bytes);
    col_status st = be->mem->to_host(be, h, src, bytes, err);
    if (st == COL_OK)
        st = be->mem->to_device(be, dst, h, bytes, err);
    free(h);
    return st;
}

static const char *kind_name(col_cg_kind k)
{
    switch (k) {
    case COL_CGK_ALL_GATHER: return "all-gather";
    case COL_CGK_ALL_TO_ALL: return "all-to-all";
    case COL_CGK_ALL_REDUCE: return "all-reduce";
    case COL_CGK_REDUCE_SCATTER: return "reduce-scatter";
    case COL_CGK_COPY: return "copy";
    case COL_CGK_SHIFT: return "shift";
    }
    return "collective";
}

/* a ring pass by `by` (1 .. P-1). The ranks r, r+by, r+2by, ... (mod P) form a cycle; along it the ranks at even
 * positions start their send first, the others their receive, so that a transport running each rank's
 * operations in the order they were started (NCCL on one stream) cannot deadlock, even on a cycle of odd length */
static col_status shift_run(col_comm *c, int by, const void *send, void *recv, size_t count, col_dtype dt,
                            col_err *err)
{
    int p = col_comm_size(c), r = col_comm_rank(c), to = (r + by) % p, from = (r - by + p) % p;
    int g = p, b = by;
    while (b) {
        int t = g % b;
        g = b;
        b = t;
    }
    int pos = 0;
    for (int k = r % g; k != r; k = (k + by) % p)
        pos++;
    col_comm_req *req[2] = {NULL, NULL};
    col_status st;
    if (pos % 2 == 0) {
        st = col_comm_send_async(c, send, count, dt, to, COL_CG_SHIFT_TAG, &req[0], err);
        if (st == COL_OK)
            st = col_comm_recv_async(c, recv, count, dt, from, COL_CG_SHIFT_TAG, &req[1], err);
    } else {
        st = col_comm_recv_async(c, recv, count, dt, from, COL_CG_SHIFT_TAG, &req[0], err);
        if (st == COL_OK)
            st = col_comm_send_async(c, send, count, dt, to, COL_CG_SHIFT_TAG, &req[1], err);
    }
    col_err e2 = {0};
    col_status wst = col_comm_wait_all(req, 2, st == COL_OK ? err : &e2);
    return st != COL_OK ? st : wst;
}

static col_status cg_run(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src, int nsrc,
                         col_err *err)
{
    const col_node *n = user;
    col_cg_params prm;
    col_cg_params_of(n, &prm);
    col_comm *c = col_cg_comm_of(n);
    const char *what = kind_name(prm.kind);
    int64_t ns = nsrc > 0 ? col_numel(src[0]) : -1, no = col_numel(out), p = col_comm_size(c);
    int64_t want = prm.kind == COL_CGK_ALL_GATHER ? ns * p : prm.kind == COL_CGK_REDUCE_SCATTER ? ns / p : ns;
    if (nsrc < 1 || src[0]->dtype != out->dtype || no != want || (prm.kind == COL_CGK_REDUCE_SCATTER && ns % p) ||
        (prm.kind == COL_CGK_ALL_TO_ALL && ns % p))
        return col_err_set(err, COL_EINTERNAL, "comm graph: %s: the node does not match the communicator of "
                                               "%lld ranks it was built for", what, (long long)p);
    size_t es = col_dtype_size(out->dtype);
    if (prm.kind == COL_CGK_COPY || (p == 1 && prm.alone) || (prm.kind == COL_CGK_SHIFT && prm.by == 0))
        return local_copy(be, out->data, src[0]->data, (size_t)no * es, err);
    col_status st = memory_fits(c, be, what, err);
    if (st != COL_OK)
        return st;
    switch (prm.kind) {
    case COL_CGK_ALL_GATHER: return col_comm_all_gather(c, src[0]->data, out->data, (size_t)ns, out->dtype, err);
    case COL_CGK_ALL_TO_ALL:
        return col_comm_all_to_all(c, src[0]->data, out->data, (size_t)(ns / p), out->dtype, err);
    case COL_CGK_ALL_REDUCE:
        return col_comm_all_reduce(c, src[0]->data, out->data, (size_t)ns, out->dtype, prm.op, err);
    case COL_CGK_REDUCE_SCATTER:
        return col_comm_reduce_scatter(c, src[0]->data, out->data, (size_t)no, out->dtype, COL_RED_SUM, err);
    case COL_CGK_SHIFT: return shift_run(c, prm.by, src[0]->data, out->data, (size_t)ns, out->dtype, err);
    case COL_CGK_COPY: break;
    }
    return col_err_set(err, COL_EINTERNAL, "comm graph: a collective node of unknown kind %d", (int)prm.kind);
}

/* ---- the node ---- */

col_node *col_cg_node(col_graph *g, col_comm *c, const col_cg_params *prm, col_extern_bwd_fn bwd, col_dtype dt,
                      int ndim, const int64_t *shape, int nsrc, col_node *const *src, const char *name)
{
    col_node *y = col_extern_grad(g, cg_run, bwd, NULL, dt, ndim, shape, nsrc, src);
    if (!y)
        return NULL;
    y->ext_user = y; /* the function reads its parameters from the node (a recomputed clone: from this one) */
    y->p.i[P_KIND] = prm->kind;
    y->p.i[P_AXIS] = prm->axis;
    y->p.i[P_AXIS2] = prm->axis2;
    y->p.i[P_USE] = prm->use;
    y->p.i[P_OP] = prm->op;
    y->p.i[P_BY] = prm->by;
    y->p.i[P_ALONE] = prm->alone;
    y->p.i[P_COMM] = (int64_t)(uintptr_t)c;
    snprintf(y->name, sizeof y->name, "%s", name);
    return y;
}

void col_cg_params_of(const col_node *n, col_cg_params *prm)
{
    prm->kind = (col_cg_kind)n->p.i[P_KIND];
    prm->axis = (int)n->p.i[P_AXIS];
    prm->axis2 = (int)n->p.i[P_AXIS2];
    prm->use = (col_cg_use)n->p.i[P_USE];
    prm->op = (col_red_op)n->p.i[P_OP];
    prm->by = (int)n->p.i[P_BY];
    prm->alone = n->p.i[P_ALONE] != 0;
}

col_comm *col_cg_comm_of(const col_node *n) { return (col_comm *)(uintptr_t)n->p.i[P_COMM]; }

/* ---- checks ---- */

bool col_cg_start(col_graph *g, col_comm *c, col_node *x, const char *what)
{
    if (!g || col_graph_status(g) != COL_OK || !x)
        return false;
    return col_check(g, c != NULL, COL_EINVAL, "comm graph: %s: no communicator given", what);
}

int col_cg_axis(col_graph *g, const char *what, const char *name, int axis, const col_tensor *x)
{
    char s[128];
    if (!col_check(g, axis >= -x->ndim && axis < x->ndim, COL_ESHAPE,
                   "comm graph: %s: %s %d is not a dimension of x %s (%d dimensions)", what, name, axis,
                   col_shape_str(x, s, sizeof s), x->ndim))
        return -1;
    return axis < 0 ? axis + x->ndim : axis;
}

bool col_cg_divides(col_graph *g, col_comm *c, const char *what, const col_tensor *x, int axis)
{
    int64_t p = col_comm_size(c);
    char s[128];
    return col_check(g, p > 0 && x->shape[axis] % p == 0, COL_ESHAPE,
                     "comm graph: %s: dimension %d of x %s (%lld) does not split into %lld equal parts, one per rank",
                     what, axis, col_shape_str(x, s, sizeof s), (long long)x->shape[axis], (long long)p);
}

/* ---- the arrangements ---- */

/* [A, m, B] of shape sh around axis */
static void around(const int64_t *sh, int ndim, int axis, int64_t v[3])
{
    v[0] = v[2] = 1;
    v[1] = sh[axis];
    for (int i = 0; i < axis; i++)
        v[0] *= sh[i];
    for (int i = axis + 1; i < ndim; i++)
        v[2] *= sh[i];
}

/* y [P, A, m, B] (P blocks of part, whose dimension axis is m) as the blocks concatenated along axis:
 * part's shape with dimension axis P*m */
static col_node *concat_blocks(col_graph *g, col_node *y, int64_t p, const int64_t *part, int ndim, int axis)
{
    int64_t out[COL_MAX_DIMS];
    memcpy(out, part, sizeof *out * (size_t)ndim);
    out[axis] *= p;
    if (y->t.shape[1] != 1) {
        static const int perm[4] = {1, 0, 2, 3};
        y = col_contiguous(g, col_permute(g, y, perm));
    }
    return col_reshape(g, y, ndim, out);
}

/* x cut along axis into P parts, as [P, A, m/P, B] (part k the k-th block; the size divides; a view of x) */
static col_node *split_blocks(col_graph *g, col_node *x, int64_t p, int axis)
{
    int64_t v[3];
    around(x->t.shape, x->t.ndim, axis, v);
    if (v[0] == 1) {
        int64_t pmb[4] = {p, 1, v[1] / p, v[2]};
        return col_reshape(g, x, 4, pmb);
    }
    int64_t apmb[4] = {v[0], p, v[1] / p, v[2]};
    static const int perm[4] = {1, 0, 2, 3};
    return col_permute(g, col_reshape(g, x, 4, apmb), perm); /* col_extern makes it contiguous (a copy) */
}

col_node *col_cg_all_gather(col_graph *g, col_comm *c, col_node *x, int axis, col_extern_bwd_fn bwd,
                            const col_cg_params *prm)
{
    int64_t p = col_comm_size(c), v[3];
    char s[128];
    if (!col_check(g, x->t.shape[axis] <= INT64_MAX / (p > 0 ? p : 1), COL_ESHAPE,
                   "comm graph: all-gather: dimension %d of x %s times %lld ranks is too large", axis,
                   col_shape_str(&x->t, s, sizeof s), (long long)p))
        return NULL;
    around(x->t.shape, x->t.ndim, axis, v);
    int64_t blocks[4] = {p, v[0], v[1], v[2]};
    col_cg_params q = *prm;
    q.kind = COL_CGK_ALL_GATHER;
    col_node *y = col_cg_node(g, c, &q, bwd, x->t.dtype, 4, blocks, 1, &x, "all_gather");
    return y ? concat_blocks(g, y, p, x->t.shape, x->t.ndim, axis) : NULL;
}

col_node *col_cg_all_to_all(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis,
                            col_extern_bwd_fn bwd, const col_cg_params *prm)
{
    int64_t p = col_comm_size(c), v[3];
    /* the blocks to send: x as [A, P, m, B] around the split axis, the P blocks outermost */
    col_node *send = split_blocks(g, x, p, split_axis);
    /* what arrives: P blocks of the part's shape, as [P, A, m, B] around the concat axis */
    int64_t part[COL_MAX_DIMS];
    memcpy(part, x->t.shape, sizeof *part * (size_t)x->t.ndim);
    part[split_axis] /= p;
    around(part, x->t.ndim, concat_axis, v);
    int64_t blocks[4] = {p, v[0], v[1], v[2]};
    col_cg_params q = *prm;
    q.kind = COL_CGK_ALL_TO_ALL;
    col_node *y = col_cg_node(g, c, &q, bwd, x->t.dtype, 4, blocks, 1, &send, "all_to_all");
    return y ? concat_blocks(g, y, p, part, x->t.ndim, concat_axis) : NULL;
}

col_node *col_cg_reduce_scatter(col_graph *g, col_comm *c, col_node *x, int axis, col_extern_bwd_fn bwd,
                                const col_cg_params *prm)
{
    int64_t p = col_comm_size(c);
    col_node *send = split_blocks(g, x, p, axis);
    if (!send)
        return NULL;
    int64_t part[COL_MAX_DIMS];
    memcpy(part, x->t.shape, sizeof *part * (size_t)x->t.ndim);
    part[axis] /= p;
    col_cg_params q = *prm;
    q.kind = COL_CGK_REDUCE_SCATTER;
    /* the node's output: the block's shape [A, m/P, B] (send's shape without its leading P) */
    return col_cg_node(g, c, &q, bwd, x->t.dtype, x->t.ndim, part, 1, &send, "reduce_scatter");
}

/* ---- the builders without gradients ---- */

col_node *col_comm_graph_all_gather(col_graph *g, col_comm *c, col_node *x, int axis)
{
    const char *what = "all-gather";
    if (!col_cg_start(g, c, x, what) || (axis = col_cg_axis(g, what, "axis", axis, &x->t)) < 0)
        return NULL;
    col_cg_params prm = {0};
    return col_cg_all_gather(g, c, x, axis, NULL, &prm);
}

col_node *col_comm_graph_all_to_all(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis)
{
    const char *what = "all-to-all";
    if (!col_cg_start(g, c, x, what) || (split_axis = col_cg_axis(g, what, "split axis", split_axis, &x->t)) < 0 ||
        (concat_axis = col_cg_axis(g, what, "concat axis", concat_axis, &x->t)) < 0 ||
        !col_cg_divides(g, c, what, &x->t, split_axis))
        return NULL;
    col_cg_params prm = {0};
    return col_cg_all_to_all(g, c, x, split_axis, concat_axis, NULL, &prm);
}
