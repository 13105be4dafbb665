/* comm_graph.c - collectives as EXTERN graph nodes (comm_graph.h).
 *
 * Both collectives move whole blocks, one per rank, of one contiguous buffer.
 * A tensor of shape S seen around an axis is [A, m, B] (A the product of the
 * dimensions before it, B of those after). The received buffer is P blocks of
 * the part's shape, [P, A, m, B]; concatenating the blocks along the axis is
 * [A, P*m, B] = the permute [A, P, m, B], made contiguous (no copy when A is
 * 1). Splitting x along an axis into the P blocks to send is the reverse:
 * [A, P, m, B] permuted to [P, A, m, B] (no copy when A is 1). */
#include "comm_graph.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"

/* ---- the functions the plan runner calls ---- */

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

static col_status all_gather_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src,
                                int nsrc, col_err *err)
{
    col_comm *c = user;
    col_status st = memory_fits(c, be, "all-gather", err);
    if (st != COL_OK)
        return st;
    int64_t n = col_numel(src[0]);
    if (nsrc != 1 || src[0]->dtype != out->dtype || col_numel(out) != n * col_comm_size(c))
        return col_err_set(err, COL_EINTERNAL, "comm graph: all-gather: the node does not match the communicator of "
                                               "%d ranks it was built for", col_comm_size(c));
    return col_comm_all_gather(c, src[0]->data, out->data, (size_t)n, out->dtype, err);
}

static col_status all_to_all_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src,
                                int nsrc, col_err *err)
{
    col_comm *c = user;
    col_status st = memory_fits(c, be, "all-to-all", err);
    if (st != COL_OK)
        return st;
    int64_t n = col_numel(src[0]), p = col_comm_size(c);
    if (nsrc != 1 || src[0]->dtype != out->dtype || col_numel(out) != n || n % p)
        return col_err_set(err, COL_EINTERNAL, "comm graph: all-to-all: the node does not match the communicator of "
                                               "%d ranks it was built for", col_comm_size(c));
    return col_comm_all_to_all(c, src[0]->data, out->data, (size_t)(n / p), out->dtype, err);
}

/* ---- the builders ---- */

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

/* axis in -ndim .. ndim-1 as 0 .. ndim-1, or -1 after recording the error */
static int axis_of(col_graph *g, const char *what, const char *name, int axis, const col_tensor *x)
{
    char s[128];
    if (!col_check(g, axis >= -x->ndim && axis < x->ndim, COL_ESHAPE,
                   "comm graph: %s: %s %d is not a dimension of x %s (%d dimensions)", what, name, axis,
                   col_shape_str(x, s, sizeof s), x->ndim))
        return -1;
    return axis < 0 ? axis + x->ndim : axis;
}

static bool start(col_graph *g, col_comm *c, col_node *x, const char *what)
{
    if (!g || col_graph_status(g) != COL_OK || !x)
        return false;
    return col_check(g, c != NULL, COL_EINVAL, "comm graph: %s: no communicator given", what);
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

col_node *col_comm_graph_all_gather(col_graph *g, col_comm *c, col_node *x, int axis)
{
    const char *what = "all-gather";
    if (!start(g, c, x, what) || (axis = axis_of(g, what, "axis", axis, &x->t)) < 0)
        return NULL;
    int64_t p = col_comm_size(c), v[3];
    char s[128];
    if (!col_check(g, x->t.shape[axis] <= INT64_MAX / (p > 0 ? p : 1), COL_ESHAPE,
                   "comm graph: %s: dimension %d of x %s times %lld ranks is too large", what, axis,
                   col_shape_str(&x->t, s, sizeof s), (long long)p))
        return NULL;
    around(x->t.shape, x->t.ndim, axis, v);
    int64_t blocks[4] = {p, v[0], v[1], v[2]};
    col_node *y = col_extern(g, all_gather_fn, c, x->t.dtype, 4, blocks, 1, &x);
    if (!y)
        return NULL;
    snprintf(y->name, sizeof y->name, "all_gather");
    return concat_blocks(g, y, p, x->t.shape, x->t.ndim, axis);
}

col_node *col_comm_graph_all_to_all(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis)
{
    const char *what = "all-to-all";
    if (!start(g, c, x, what) || (split_axis = axis_of(g, what, "split axis", split_axis, &x->t)) < 0 ||
        (concat_axis = axis_of(g, what, "concat axis", concat_axis, &x->t)) < 0)
        return NULL;
    int64_t p = col_comm_size(c), v[3];
    char s[128];
    if (!col_check(g, p > 0 && x->t.shape[split_axis] % p == 0, COL_ESHAPE,
                   "comm graph: %s: dimension %d of x %s (%lld) does not split into %lld equal parts, one per rank",
                   what, split_axis, col_shape_str(&x->t, s, sizeof s), (long long)x->t.shape[split_axis],
                   (long long)p))
        return NULL;
    /* the blocks to send: x as [A, P, m, B] around the split axis, the P blocks outermost */
    around(x->t.shape, x->t.ndim, split_axis, v);
    col_node *send = x;
    if (v[0] != 1) {
        int64_t apmb[4] = {v[0], p, v[1] / p, v[2]};
        static const int perm[4] = {1, 0, 2, 3};
        send = col_permute(g, col_reshape(g, x, 4, apmb), perm); /* col_extern makes it contiguous */
    }
    /* what arrives: P blocks of the part's shape, as [P, A, m, B] around the concat axis */
    int64_t part[COL_MAX_DIMS];
    memcpy(part, x->t.shape, sizeof *part * (size_t)x->t.ndim);
    part[split_axis] /= p;
    around(part, x->t.ndim, concat_axis, v);
    int64_t blocks[4] = {p, v[0], v[1], v[2]};
    col_node *y = col_extern(g, all_to_all_fn, c, x->t.dtype, 4, blocks, 1, &send);
    if (!y)
        return NULL;
    snprintf(y->name, sizeof y->name, "all_to_all");
    return concat_blocks(g, y, p, part, x->t.ndim, concat_axis);
}
