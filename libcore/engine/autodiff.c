/* autodiff.c - reverse-mode differentiation by appending backward nodes,
 * and activation checkpointing by recomputation clones. The top of the
 * graph layers (graph_internal.h): each node's backward builder (*_bwd.c)
 * is found through col_backward_of. */
#include "graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

col_backward_fn col_backward_of(col_op op)
{
    switch (op) {
    case COL_OP_VIEW: return col_bwd_view;
    case COL_OP_COPY: return col_bwd_copy;
    case COL_OP_CAST: return col_bwd_cast;
    case COL_OP_ADD: case COL_OP_SUB: case COL_OP_MUL: case COL_OP_DIV: return col_bwd_binary;
    case COL_OP_SCALE: return col_bwd_scale;
    case COL_OP_CONCAT: return col_bwd_concat;
    case COL_OP_MATMUL: return col_bwd_matmul;
    case COL_OP_EXP: case COL_OP_LOG: case COL_OP_TANH: case COL_OP_SIGMOID: case COL_OP_RELU:
    case COL_OP_GELU_ERF: case COL_OP_GELU_TANH: case COL_OP_SILU: case COL_OP_SWIGLU:
        return col_bwd_unary;
    case COL_OP_SUM: case COL_OP_MEAN: case COL_OP_MAX: return col_bwd_reduce;
    case COL_OP_SOFTMAX: case COL_OP_LOG_SOFTMAX: return col_bwd_softmax;
    case COL_OP_LAYERNORM: case COL_OP_RMSNORM: return col_bwd_norm;
    case COL_OP_EMBEDDING: return col_bwd_embedding;
    case COL_OP_ROPE: return col_bwd_rope;
    case COL_OP_ATTENTION: return col_bwd_attention;
    case COL_OP_CROSS_ENTROPY: return col_bwd_cross_entropy;
    case COL_OP_TOKEN_LOGPROB: return col_bwd_token_logprob;
    case COL_OP_DROPOUT: return col_bwd_dropout;
    case COL_OP_CONV2D: return col_bwd_conv2d;
    case COL_OP_UPSAMPLE_NEAREST: return col_bwd_upsample;
    default: return NULL;
    }
}

/* ---- checkpointing: clone a checkpointed forward node for recomputation ---- */

/* Interior nodes of a segment are recomputed; a segment's outputs (used by a
 * forward node outside the segment, or marked as outputs) stay stored, so
 * recomputing one segment never recomputes the segments before it. */
static bool is_checkpointed(const col_node *n)
{
    return n->segment != 0 && n->op != COL_OP_LEAF &&
           !(n->flags & (COL_NODE_BACKWARD | COL_NODE_RECOMPUTE | COL_NODE_SEGMENT_OUT | COL_NODE_OUTPUT));
}

static void mark_segment_out(col_node *n)
{
    n->flags |= COL_NODE_SEGMENT_OUT;
    if ((n->flags & COL_NODE_VIEW) && n->view_base)
        mark_segment_out(n->view_base);
    if (n->flags & COL_NODE_VIEW)
        mark_segment_out(n->src[0]);
}

static void mark_segment_outputs(col_graph *g, int nfwd)
{
    for (int i = 0; i < nfwd; i++) {
        col_node *n = g->nodes[i];
        for (int s = 0; s < n->nsrc; s++) {
            col_node *x = n->src[s];
            if (x->segment != 0 && x->segment != n->segment)
                mark_segment_out(x);
        }
        if (n->segment != 0 && (n->flags & COL_NODE_OUTPUT))
            mark_segment_out(n);
    }
}

static col_node *recompute_clone(col_graph *g, col_node *n)
{
    if (!is_checkpointed(n))
        return n;
    if (n->recomputed)
        return n->recomputed;
    col_node *src[COL_MAX_SRC];
    for (int i = 0; i < n->nsrc; i++) {
        src[i] = recompute_clone(g, n->src[i]);
        if (!src[i])
            return NULL;
    }
    col_node *c = col_new_node(g, n->op, n->t.dtype, n->t.ndim, n->t.shape, n->nsrc, src);
    if (!c)
        return NULL;
    memcpy(c->t.stride, n->t.stride, sizeof c->t.stride);
    c->p = n->p;
    c->extra_bytes = n->extra_bytes;
    c->scratch_bytes = n->scratch_bytes;
    c->ext_fn = n->ext_fn; /* an EXTERN node's function is called again */
    c->ext_user = n->ext_user;
    c->ext_bwd = n->ext_bwd;
    c->flags = (n->flags & ~(COL_NODE_OUTPUT | COL_NODE_BACKWARD)) | COL_NODE_RECOMPUTE;
    c->segment = 0;
    if (n->flags & COL_NODE_VIEW) {
        col_node *s0 = src[0];
        c->view_base = (s0->flags & COL_NODE_VIEW) ? s0->view_base : s0;
        c->view_offset = n->view_offset;
    }
    memcpy(c->name, n->name, sizeof c->name);
    n->recomputed = c;
    return c;
}

col_status col_graph_backward(col_graph *g, col_node *loss, col_err *err)
{
    return col_graph_backward_seeded(g, loss, NULL, err);
}

col_status col_graph_backward_seeded(col_graph *g, col_node *loss, col_node *seed, col_err *err)
{
    if (g->err.code != COL_OK)
        return col_err_set(err, g->err.code, "%s", g->err.msg);
    if (!loss)
        return col_err_set(err, COL_EINVAL, "backward: no loss node");
    /* with a seed, any f32 node: a pipeline stage's output, seeded by the gradient the next stage sent back */
    if ((!seed && col_numel(&loss->t) != 1) || loss->t.dtype != COL_F32)
        return col_err_set(err, COL_ESHAPE, "backward: the loss must be an f32 scalar (got %lld elements of %s)",
                           (long long)col_numel(&loss->t), col_dtype_name(loss->t.dtype));
    if (g->cur_segment)
        return col_err_set(err, COL_ESTATE, "backward: a checkpoint segment is still open");
    if (!(loss->flags & COL_NODE_NEEDS_GRAD))
        return col_err_set(err, COL_EINVAL, "backward: the loss does not depend on any parameter");

    if (seed && (seed->t.dtype != COL_F32 || !col_same_shape(&seed->t, &loss->t)))
        return col_err_set(err, COL_ESHAPE, "backward: the seed must be an f32 node of the loss's shape");
    int nfwd = g->n;
    g->in_backward = true;
    col_mark_output(loss);
    loss->grad = seed ? seed : col_fill(g, COL_F32, loss->t.ndim, loss->t.shape, 1.0f);
    for (int i = loss->id; i >= 0 && g->err.code == COL_OK; i--) {
        col_node *n = g->nodes[i];
        if (!n->grad || n->op == COL_OP_LEAF)
            continue;
        if (n->op == COL_OP_EXTERN && n->ext_bwd) {
            for (int s = 0; s < n->nsrc && g->err.code == COL_OK; s++) {
                col_node *x = n->src[s];
                if (!(x->flags & COL_NODE_NEEDS_GRAD))
                    continue;
                col_node *d = n->ext_bwd(g, n, n->grad, s, n->ext_user);
                if (d && d->t.dtype != x->t.dtype)
                    d = col_cast(g, d, x->t.dtype);
                col_accum_grad(g, x, d);
            }
            continue;
        }
        col_backward_fn fn = col_backward_of(n->op);
        if (!fn && n->op == COL_OP_EXTERN) {
            col_graph_fail(g, COL_EUNSUPPORTED,
                           "autodiff: node %s is computed by a caller's function (an extern op), which has no "
                           "gradient: no gradient can flow through it", n->name);
            break;
        }
        if (!fn) {
            col_graph_fail(g, COL_EUNSUPPORTED, "autodiff: op %s has no gradient", col_op_name(n->op));
            break;
        }
        fn(g, n, n->grad);
    }
    /* gradients of leaves */
    for (int i = 0; i < nfwd && g->err.code == COL_OK; i++) {
        col_node *n = g->nodes[i];
        if (n->op != COL_OP_LEAF || !n->grad)
            continue;
        if (n->flags & COL_NODE_PARAM) {
            col_node *d = col_cast(g, n->grad, COL_F32);
            col_node *srcs[2] = {d, n}; /* src1: the parameter whose grad_data receives the sum */
            /* into a buffer of the parameter's dtype: a 16-bit parameter's gradient is rounded here */
            col_node *acc = col_new_node(g, COL_OP_ACCUMULATE, n->t.dtype, n->t.ndim, n->t.shape, 2, srcs);
            if (acc) {
                acc->flags |= COL_NODE_OUTPUT;
                snprintf(acc->name, sizeof acc->name, "grad:%.40s", n->name);
            }
        } else {
            col_mark_output(n->grad);
        }
    }
    /* redirect backward uses of checkpointed activations to recomputed clones */
    mark_segment_outputs(g, nfwd);
    int nall = g->n;
    for (int i = nfwd; i < nall && g->err.code == COL_OK; i++) {
        col_node *b = g->nodes[i];
        for (int s = 0; s < b->nsrc; s++)
            if (is_checkpointed(b->src[s]))
                b->src[s] = recompute_clone(g, b->src[s]);
        if ((b->flags & COL_NODE_VIEW) && is_checkpointed(b->view_base))
            b->view_base = recompute_clone(g, b->view_base);
    }
    g->in_backward = false;
    if (g->err.code != COL_OK)
        return col_err_set(err, g->err.code, "%s", g->err.msg);
    return COL_OK;
}
