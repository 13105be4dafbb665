/* ops_attention_bwd.c - gradient of scaled dot-product attention: one
 * ATTENTION_BWD node (cpu_attention.c) writes [dq | dk | dv] packed, each
 * handed out as a view. */
#include "backend.h"
#include "graph_internal.h"

/* contiguous view of `shape` at element `offset` of the packed gradient */
static col_node *part(col_graph *g, col_node *packed, int64_t offset, const col_tensor *like)
{
    col_tensor t = *like;
    col_set_contiguous_strides(&t);
    return col_view(g, packed, offset, t.ndim, t.shape, t.stride);
}

/* sources q, k, v, the attention node (O and its logsumexp), dO;
 * output packed [dq | dk | dv] */
void col_bwd_attention(col_graph *g, col_node *n, col_node *d)
{
    col_node *q = n->src[0], *k = n->src[1], *v = n->src[2];
    if (n->nsrc > 3) {
        col_graph_fail(g, COL_EUNSUPPORTED, "attention over a key/value cache has no gradient (inference only)");
        return;
    }
    if (!d || !col_any_needs_grad(3, n->src))
        return;
    col_node *src[5] = {q, k, v, n, col_attention_operand(g, d)};
    int64_t nq = col_numel(&q->t), nk = col_numel(&k->t);
    int64_t shape[1] = {nq + 2 * nk};
    col_node *bw = col_new_node(g, COL_OP_ATTENTION_BWD, COL_F32, 1, shape, 5, src);
    if (!bw)
        return;
    bw->p = n->p;
    bw->scratch_bytes = (size_t)col_max_threads() * col_attention_scratch_per_thread(q->t.shape[3], true);
    col_accum_grad(g, q, part(g, bw, 0, &q->t));
    col_accum_grad(g, k, part(g, bw, nq, &k->t));
    col_accum_grad(g, v, part(g, bw, nq + nk, &v->t));
}
