/* ops_image_bwd.c - the gradients of ops_image.c's conv2d and nearest
 * upsampling (group norm is made of ops that have their own).
 *
 * dx = CONV2D_BWD_DATA(dy, w): the transposed convolution, w^T dy scattered
 * back onto the input pixels (col2im); dw = CONV2D_BWD_FILTER(x, dy): dy times
 * the input's patches, summed over the batch; db = the sum of dy over batch,
 * height and width. Each node is made only when its source needs it. */
#include "graph_internal.h"

void col_bwd_conv2d(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0], *w = n->src[1], *b = n->p.i[4] ? n->src[2] : NULL;
    d = col_contiguous(g, d);
    if (x->flags & COL_NODE_NEEDS_GRAD)
        col_accum_grad(g, x, col_conv2d_bwd_node(g, COL_OP_CONV2D_BWD_DATA, n, d, w));
    if (w->flags & COL_NODE_NEEDS_GRAD)
        col_accum_grad(g, w, col_conv2d_bwd_node(g, COL_OP_CONV2D_BWD_FILTER, n, x, d));
    if (b && (b->flags & COL_NODE_NEEDS_GRAD))
        col_accum_grad(g, b, col_sum(g, d, (1u << 0) | (1u << 2) | (1u << 3), 0));
}

/* dx = the sum of each scale x scale block of dy */
void col_bwd_upsample(col_graph *g, col_node *n, col_node *d)
{
    col_node *x = n->src[0], *src = col_contiguous(g, d);
    col_node *dx = col_new_node(g, COL_OP_UPSAMPLE_NEAREST_BWD, COL_F32, 4, x->t.shape, 1, &src);
    if (dx)
        dx->p.i[0] = n->p.i[0];
    col_accum_grad(g, x, dx);
}
