/* ops_norm_bwd.c - gradients of ops_norm.c's softmax, log_softmax,
 * layernorm and rmsnorm.
 *
 * Parameters (see ops.h for the sources):
 *   LAYERNORM_BWD    i[0] = has weight (src1), i[1..3] = output holds dx / dw / db; f[0] = eps
 *   RMSNORM_BWD      i[1..2] = output holds dx / dw; f[0] = eps
 * The backward ops write a packed 1-D output [dx | dw | db] holding only the
 * parts some source needs; mean and rstd are recomputed from x there rather
 * than saved by the forward (no extra memory per activation, one more pass
 * over an L1-resident row).
 *
 * dw / db are sums over all rows: each of a fixed number of row chunks (it
 * depends on the row count only, never on the thread count) sums into its own
 * slot of scratch, and the slots are added in chunk order, so the result is
 * bitwise the same on any number of threads.
 */
#include "graph_internal.h"

/* row chunks of the dw / db partial sums (see cpu_norm.c) */
#define NORM_MAX_CHUNKS 64

/* softmax: dx = y * (dy - sum(dy * y)); the additive mask gets the same dx
 * (through its expand view, which sums it back to the mask's shape).
 * log_softmax: dx = dy - exp(y) * sum(dy). */
void col_bwd_softmax(col_graph *g, col_node *n, col_node *d)
{
    col_node *src[2] = {n, col_contiguous(g, d)};
    col_op op = n->op == COL_OP_SOFTMAX ? COL_OP_SOFTMAX_BWD : COL_OP_LOG_SOFTMAX_BWD;
    col_node *dx = col_new_node(g, op, COL_F32, n->t.ndim, n->t.shape, 2, src);
    col_accum_grad(g, n->src[0], dx);
    if (n->op == COL_OP_SOFTMAX && n->nsrc > 1)
        col_accum_grad(g, n->src[1], dx);
}

/* dx and dw (and db for layernorm) from one packed node; only the parts a
 * source needs are computed. */
void col_bwd_norm(col_graph *g, col_node *n, col_node *d)
{
    bool ln = n->op == COL_OP_LAYERNORM;
    bool has_w = ln ? n->p.i[0] != 0 : true, has_b = ln && n->p.i[1] != 0;
    col_node *x = n->src[0];
    col_node *w = has_w ? n->src[1] : NULL;
    col_node *b = has_b ? n->src[has_w ? 2 : 1] : NULL;
    bool want_dx = x->flags & COL_NODE_NEEDS_GRAD;
    bool want_dw = w && (w->flags & COL_NODE_NEEDS_GRAD);
    bool want_db = b && (b->flags & COL_NODE_NEEDS_GRAD);
    if (!want_dx && !want_dw && !want_db)
        return;
    int64_t C = x->t.shape[x->t.ndim - 1], N = col_numel(&x->t);
    col_node *src[3];
    int ns = 0;
    src[ns++] = x;
    if (w)
        src[ns++] = w;
    src[ns++] = col_contiguous(g, d);
    int64_t total = (want_dx ? N : 0) + (want_dw ? C : 0) + (want_db ? C : 0);
    col_node *pk = col_new_node(g, ln ? COL_OP_LAYERNORM_BWD : COL_OP_RMSNORM_BWD, COL_F32, 1, &total, ns, src);
    if (!pk)
        return;
    pk->p.i[0] = has_w;
    pk->p.i[1] = want_dx;
    pk->p.i[2] = want_dw;
    pk->p.i[3] = want_db;
    pk->p.f[0] = n->p.f[0];
    int parts = (int)want_dw + (int)want_db;
    pk->scratch_bytes = (size_t)NORM_MAX_CHUNKS * (size_t)parts * (size_t)C * sizeof(float);

    int64_t off = 0, one = 1;
    if (want_dx) { /* dx: x's shape, contiguous */
        col_tensor t = x->t;
        col_set_contiguous_strides(&t);
        col_accum_grad(g, x, col_view(g, pk, 0, t.ndim, t.shape, t.stride));
        off += N;
    }
    if (want_dw) { /* dw: [C] */
        col_accum_grad(g, w, col_view(g, pk, off, 1, &C, &one));
        off += C;
    }
    if (want_db) /* db: [C] */
        col_accum_grad(g, b, col_view(g, pk, off, 1, &C, &one));
}
