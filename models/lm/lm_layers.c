/* lm_layers.c - the building blocks of the model families (lm_layers.h). */
#include "lm_layers.h"

#ifdef COL_WITH_COMM
#include "comm_graph.h"
#endif

#include <stdio.h>

void col_spec_set(col_param_spec *s, const char *name, int64_t d0, int64_t d1, col_init_kind init)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->decay = d1 != 0;
    s->init = init;
    s->role = COL_ROLE_REPLICATED;
    s->groups = 1;
}

void col_spec_role(col_param_spec *s, col_param_role role, int groups)
{
    s->role = role;
    s->groups = groups;
}

void col_lm_head_spec(const col_lm_config *c, col_param_spec *s, int k, int64_t in)
{
    if (c->value_head)
        col_spec_set(&s[k], "score.weight", 1, in, COL_INIT_NORMAL);
    else if (!c->tie_embeddings) {
        col_spec_set(&s[k], "lm_head.weight", c->vocab_size, in, COL_INIT_NORMAL);
        col_spec_role(&s[k], COL_ROLE_HEAD, 1);
    }
}

void col_spec_layer(col_spec_list *L, const char *fmt, int layer)
{
    snprintf(L->prefix, sizeof L->prefix, fmt, layer);
}

void col_spec_weight(col_spec_list *L, const char *name, int64_t d0, int64_t d1, col_init_kind init, int64_t bias,
                     col_param_role role)
{
    char n[sizeof L->s->name];
    snprintf(n, sizeof n, "%s%s.weight", L->prefix, name);
    col_spec_set(&L->s[L->k], n, d0, d1, init);
    col_spec_role(&L->s[L->k++], role, 1);
    if (bias > 0) {
        snprintf(n, sizeof n, "%s%s.bias", L->prefix, name);
        col_spec_set(&L->s[L->k], n, bias, 0, COL_INIT_ZERO);
        col_spec_role(&L->s[L->k++], role == COL_ROLE_FIRST ? COL_ROLE_FIRST_BIAS
                                     : role == COL_ROLE_SECOND ? COL_ROLE_SECOND_BIAS : role, 1);
    }
}

void col_spec_norm(col_spec_list *L, const char *name, int64_t C, bool with_bias)
{
    col_spec_weight(L, name, C, 0, COL_INIT_ONE, with_bias ? C : 0, COL_ROLE_NORM);
}

col_node *col_lm_dropout(col_graph *g, col_node *x, const col_lm_config *c, const col_lm_build_opts *o)
{
    return (o->training && c->dropout > 0) ? col_dropout(g, x, c->dropout, o->dropout_seed) : x;
}

col_node *col_lm_activation(col_graph *g, col_node *x, col_act act)
{
    switch (act) {
    case COL_ACT_GELU_TANH: return col_gelu_tanh(g, x);
    case COL_ACT_GELU: return col_gelu(g, x);
    case COL_ACT_RELU: return col_relu(g, x);
    case COL_ACT_SILU: return col_silu(g, x);
    }
    return NULL;
}

col_node *col_lm_operand(col_graph *g, col_node *x, const col_node *w)
{
    if (!w)
        return NULL;
    return col_dtype_is_quant(w->t.dtype) ? x : col_cast(g, x, w->t.dtype); /* quantized: f32 activations */
}

col_node *col_lm_f32(col_graph *g, col_node *w) { return col_cast(g, w, COL_F32); }

col_node *col_lm_lora(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *y,
                      col_node *const *w)
{
    if (!o->lora_of || !x || !y)
        return y;
    int j = o->lora_of[w - out->params];
    if (j < 0)
        return y;
    col_node *a = out->lora[2 * j], *b = out->lora[2 * j + 1];
    if (!a || !b)
        return NULL;
    int64_t flat[2] = {-1, a->t.shape[1]};
    /* PEFT: lora_B(lora_A(x)) * scaling; the scale is applied to the narrow [N, r] product */
    col_node *h = col_matmul(g, col_reshape(g, col_lm_operand(g, x, a), 2, flat), col_transpose(g, a, 0, 1));
    h = col_matmul(g, col_lm_operand(g, col_scale(g, h, o->lora_scale, 0.0f), b), col_transpose(g, b, 0, 1));
    return h ? col_add(g, y, col_reshape(g, h, y->t.ndim, y->t.shape)) : NULL;
}

col_node *col_lm_linear(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *const *w,
                        col_node *b, col_param_role r)
{
    if (o->par)
        return o->par->ops->linear(g, o->par, x, *w, b, r, false);
    /* col_linear itself when the weight is f32 */
    return col_lm_lora(g, o, out, x, col_linear(g, col_lm_operand(g, x, *w), *w, col_lm_f32(g, b)), w);
}

col_node *col_lm_conv1d(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *const *wp,
                        col_node *b, col_param_role r)
{
    if (!x)
        return NULL;
    if (o->par)
        return o->par->ops->linear(g, o->par, x, *wp, b, r, true);
    col_node *w = *wp;
    bool q = col_dtype_is_quant(w->t.dtype); /* held [out, in] (col_lm_leaf_shape) */
    int64_t flat[2] = {-1, w->t.shape[q ? 1 : 0]};
    col_node *wm = q ? col_transpose(g, w, 0, 1) : w;
    col_node *y = col_add(g, col_matmul(g, col_reshape(g, col_lm_operand(g, x, w), 2, flat), wm), col_lm_f32(g, b));
    int64_t shape[3] = {x->t.shape[0], x->t.shape[1], w->t.shape[q ? 0 : 1]};
    return col_lm_lora(g, o, out, x, col_reshape(g, y, 3, shape), wp);
}

int64_t col_lm_heads(const col_lm_build_opts *o, int64_t H)
{
    return o->par ? o->par->ops->heads_local(o->par, (int)H) : H;
}

col_node *col_lm_norm(col_graph *g, const col_lm_build_opts *o, col_node *x, col_node *w, col_node *b, float eps,
                      bool rms)
{
    if (o->par)
        return o->par->ops->norm(g, o->par, x, w, b, eps, rms);
    return rms ? col_rmsnorm(g, x, col_lm_f32(g, w), eps) : col_layernorm(g, x, col_lm_f32(g, w), col_lm_f32(g, b), eps);
}

col_node *col_lm_embed(col_graph *g, const col_lm_build_opts *o, col_node *w, col_node *ids)
{
    return o->par ? o->par->ops->embed(g, o->par, w, ids) : col_embedding(g, w, ids);
}

col_node *col_lm_pos_embed(col_graph *g, const col_lm_build_opts *o, col_node *w, col_node *pos)
{
    return o->par ? o->par->ops->positions(g, o->par, w, pos) : col_embedding(g, w, pos);
}

col_node *col_lm_head(col_graph *g, const col_lm_build_opts *o, col_node *x, col_node *head)
{
    if (o->par || !x)
        return x;
    int64_t flat[2] = {x->t.shape[0] * x->t.shape[1], x->t.shape[2]};
    return col_matmul(g, col_reshape(g, col_lm_operand(g, x, head), 2, flat), col_transpose(g, head, 0, 1));
}

col_node *col_lm_positions(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, int64_t offset)
{
    if (o->par)
        offset += (int64_t)o->par->sp_rank * o->seq;
    if (o->cache_len && o->cache_rows > 0)
        return col_arange_rows(g, out->start, o->seq, offset); /* [B, T] */
    return col_arange(g, o->cache_len ? out->start : NULL, o->seq, offset);
}

col_node *col_lm_attend(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, int l, col_node *q, col_node *k,
                        col_node *v, float scale)
{
    if (!q || !k || !v)
        return NULL;
    int64_t B = q->t.shape[0], H = q->t.shape[1], T = q->t.shape[2], D = q->t.shape[3];
    col_node *y;
    if (o->cache_len && o->cache_rows > 0) {
        col_node *kc = col_kv_write_rows(g, out->cache[2 * l], k, out->start, out->rows);
        col_node *vc = col_kv_write_rows(g, out->cache[2 * l + 1], v, out->start, out->rows);
        y = col_attention_cached_rows(g, q, kc, vc, out->start, out->rows, scale);
    } else if (o->cache_len) {
        col_node *kc = col_kv_write(g, out->cache[2 * l], k, out->start);
        col_node *vc = col_kv_write(g, out->cache[2 * l + 1], v, out->start);
        y = col_attention_cached(g, q, kc, vc, out->start, scale);
#ifdef COL_WITH_COMM
    } else if (o->par && o->par->sp && o->par->layout.sp_mode == COL_SP_RING) {
        y = col_comm_graph_ring_attention(g, o->par->sp, q, k, v, 1, scale);
    } else if (o->par && o->par->sp) { /* Ulysses: whole sequences of a share of the heads, then back */
        col_comm *sp = o->par->sp;
        q = col_comm_graph_all_to_all_grad(g, sp, q, 1, 2);
        k = col_comm_graph_all_to_all_grad(g, sp, k, 1, 2);
        v = col_comm_graph_all_to_all_grad(g, sp, v, 1, 2);
        y = col_comm_graph_all_to_all_grad(g, sp, col_attention(g, q, k, v, 1, scale), 2, 1);
#endif
    } else {
        y = col_attention(g, q, k, v, 1, scale);
    }
    if (!y)
        return NULL;
    int64_t merged[3] = {B, T, H * D};
    return col_reshape(g, col_transpose(g, y, 1, 2), 3, merged); /* [B, T, H*D] */
}
