/* ops_nn_bwd.c - gradients of ops_nn.c's transformer pieces: token
 * embedding (rows scattered back by id), RoPE (the inverse rotation),
 * fused cross-entropy and per-token log-probabilities. */
#include "graph_internal.h"

/* dweight [V, C] = scatter-add of the rows of dy by token id */
void col_bwd_embedding(col_graph *g, col_node *n, col_node *d)
{
    col_node *w = n->src[0], *ids = n->src[1];
    if (!(w->flags & COL_NODE_NEEDS_GRAD))
        return;
    col_node *src[2] = {ids, col_contiguous(g, d)};
    if (!src[1])
        return;
    col_node *dw = col_new_node(g, COL_OP_EMBEDDING_BWD, COL_F32, 2, w->t.shape, 2, src);
    if (!dw)
        return;
    dw->p.i[0] = w->t.shape[0];
    col_accum_grad(g, w, dw);
}

/* the rotation is orthogonal: dx = rotate(dout, -angle) */
void col_bwd_rope(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0];
    if (!(x->flags & COL_NODE_NEEDS_GRAD))
        return;
    col_op_params p = n->p;
    p.i[1] = !p.i[1];
    col_accum_grad(g, x, col_rope_node(g, d, n->src[1], &p));
}

/* dlogits [N, V] = (softmax(row) - onehot(target)) * dloss / count */
void col_bwd_cross_entropy(col_graph *g, col_node *n, col_node *d)
{
    col_node *logits = n->src[0];
    if (!(logits->flags & COL_NODE_NEEDS_GRAD))
        return;
    col_node *src[4] = {logits, n->src[1], n, d};
    col_node *dl = col_new_node(g, COL_OP_CROSS_ENTROPY_BWD, COL_F32, 2, logits->t.shape, 4, src);
    if (dl)
        dl->p.i[0] = n->p.i[0];
    col_accum_grad(g, logits, dl);
}

/* dlogits [N, V] = d[r] (onehot(target) - softmax(row)); ignored rows 0 */
void col_bwd_token_logprob(col_graph *g, col_node *n, col_node *d)
{
    col_node *logits = n->src[0];
    if (!(logits->flags & COL_NODE_NEEDS_GRAD))
        return;
    col_node *src[4] = {logits, n->src[1], n, col_contiguous(g, d)};
    if (!src[3])
        return;
    col_node *dl = col_new_node(g, COL_OP_TOKEN_LOGPROB_BWD, COL_F32, 2, logits->t.shape, 4, src);
    if (dl)
        dl->p.i[0] = n->p.i[0];
    col_accum_grad(g, logits, dl);
}
