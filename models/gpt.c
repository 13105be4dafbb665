#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "rng.h"

enum { PER_LAYER = 12 };

col_status col_gpt_check_config(const col_gpt_config *c, col_err *err)
{
    if (c->vocab_size <= 0 || c->n_positions <= 0 || c->n_embd <= 0 || c->n_layer <= 0 || c->n_head <= 0)
        return col_err_set(err, COL_EINVAL,
                           "gpt config: vocab_size, n_positions, n_embd, n_layer and n_head must all be positive");
    if (c->n_embd % c->n_head != 0)
        return col_err_set(err, COL_EINVAL, "gpt config: n_embd %d is not a multiple of n_head %d", c->n_embd,
                           c->n_head);
    if (!(c->layer_norm_eps > 0))
        return col_err_set(err, COL_EINVAL, "gpt config: layer_norm_eps must be positive");
    if (!(c->dropout >= 0 && c->dropout < 1))
        return col_err_set(err, COL_EINVAL, "gpt config: dropout %g is outside [0, 1)", c->dropout);
    return COL_OK;
}

int col_gpt_param_count(const col_gpt_config *c) { return 2 + PER_LAYER * c->n_layer + 2; }

static void spec(col_param_spec *s, const char *name, int64_t d0, int64_t d1, int init)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->decay = d1 != 0;
    s->init = init;
}

void col_gpt_param_specs(const col_gpt_config *c, col_param_spec *s)
{
    int64_t C = c->n_embd, V = c->vocab_size;
    int k = 0;
    spec(&s[k++], "transformer.wte.weight", V, C, COL_INIT_NORMAL);
    spec(&s[k++], "transformer.wpe.weight", c->n_positions, C, COL_INIT_NORMAL);
    for (int l = 0; l < c->n_layer; l++) {
        char n[64];
#define P(suffix, d0, d1, init) \
    snprintf(n, sizeof n, "transformer.h.%d.%s", l, suffix), spec(&s[k++], n, d0, d1, init)
        P("ln_1.weight", C, 0, COL_INIT_ONE);
        P("ln_1.bias", C, 0, COL_INIT_ZERO);
        P("attn.c_attn.weight", C, 3 * C, COL_INIT_NORMAL);
        P("attn.c_attn.bias", 3 * C, 0, COL_INIT_ZERO);
        P("attn.c_proj.weight", C, C, COL_INIT_RESID);
        P("attn.c_proj.bias", C, 0, COL_INIT_ZERO);
        P("ln_2.weight", C, 0, COL_INIT_ONE);
        P("ln_2.bias", C, 0, COL_INIT_ZERO);
        P("mlp.c_fc.weight", C, 4 * C, COL_INIT_NORMAL);
        P("mlp.c_fc.bias", 4 * C, 0, COL_INIT_ZERO);
        P("mlp.c_proj.weight", 4 * C, C, COL_INIT_RESID);
        P("mlp.c_proj.bias", C, 0, COL_INIT_ZERO);
#undef P
    }
    spec(&s[k++], "transformer.ln_f.weight", C, 0, COL_INIT_ONE);
    spec(&s[k++], "transformer.ln_f.bias", C, 0, COL_INIT_ZERO);
}

void col_gpt_init_param(const col_param_spec *s, int index, float *data, uint64_t seed, int n_layer)
{
    int64_t n = s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1);
    uint64_t stream = seed * 0x9E3779B97F4A7C15ull + (uint64_t)index;
    switch (s->init) {
    case COL_INIT_NORMAL: col_fill_normal(data, n, stream, 0.02f); break;
    case COL_INIT_RESID: col_fill_normal(data, n, stream, 0.02f / sqrtf(2.0f * (float)n_layer)); break;
    case COL_INIT_ZERO: memset(data, 0, sizeof(float) * (size_t)n); break;
    case COL_INIT_ONE:
        for (int64_t i = 0; i < n; i++)
            data[i] = 1.0f;
        break;
    }
}

/* x [B, T, in] @ w [in, out] + b: GPT-2's Conv1D */
static col_node *conv1d(col_graph *g, col_node *x, col_node *w, col_node *b)
{
    int64_t in = w->t.shape[0], out = w->t.shape[1];
    int64_t flat[2] = {-1, in};
    col_node *y = col_add(g, col_matmul(g, col_reshape(g, x, 2, flat), w), b);
    int64_t shape[3] = {x->t.shape[0], x->t.shape[1], out};
    return col_reshape(g, y, 3, shape);
}

static col_node *dropout(col_graph *g, col_node *x, const col_gpt_config *c, const col_gpt_build_opts *o)
{
    return (o->training && c->dropout > 0) ? col_dropout(g, x, c->dropout, o->dropout_seed) : x;
}

/* causal self-attention; x [B, T, C] -> [B, T, C] */
static col_node *attention(col_graph *g, col_node *x, col_node **p, const col_gpt_config *c, const col_gpt_build_opts *o)
{
    int64_t B = x->t.shape[0], T = x->t.shape[1], C = c->n_embd, H = c->n_head, D = C / H;
    col_node *qkv = conv1d(g, x, p[0], p[1]); /* [B, T, 3C] */
    /* q, k, v as strided views of qkv, no copies: [B,T,3,H,D] -> [3,B,H,T,D] */
    int64_t split[5] = {B, T, 3, H, D}, heads[4] = {B, H, T, D};
    col_node *qkv5 = col_permute(g, col_reshape(g, qkv, 5, split), (int[]){2, 0, 3, 1, 4});
    col_node *q = col_reshape(g, col_slice(g, qkv5, 0, 0, 1), 4, heads);
    col_node *k = col_reshape(g, col_slice(g, qkv5, 0, 1, 1), 4, heads);
    col_node *v = col_reshape(g, col_slice(g, qkv5, 0, 2, 1), 4, heads);
    col_node *y = col_attention(g, q, k, v, 1, 0.0f);               /* [B, H, T, D] */
    int64_t merged[3] = {B, T, C};
    y = col_reshape(g, col_transpose(g, y, 1, 2), 3, merged);       /* [B, T, C] */
    return dropout(g, conv1d(g, y, p[2], p[3]), c, o);
}

col_status col_gpt_build(col_graph *g, const col_gpt_config *c, const col_gpt_build_opts *o, col_gpt_graph *out,
                         col_err *err)
{
    col_status st = col_gpt_check_config(c, err);
    if (st != COL_OK)
        return st;
    if (o->batch <= 0 || o->seq <= 0 || o->seq > c->n_positions)
        return col_err_set(err, COL_EINVAL, "gpt: sequence length %d is outside 1..%d (the model's n_positions)",
                           o->seq, c->n_positions);
    int np = col_gpt_param_count(c);
    col_param_spec specs[np];
    col_gpt_param_specs(c, specs);
    for (int i = 0; i < np; i++)
        out->params[i] = col_param(g, specs[i].name, COL_F32, specs[i].ndim, specs[i].shape);
    col_node **p = out->params;
    int64_t B = o->batch, T = o->seq, C = c->n_embd;
    int64_t bt[2] = {B, T};
    out->ids = col_input(g, "ids", COL_I32, 2, bt);
    out->targets = o->with_loss ? col_input(g, "targets", COL_I32, 2, bt) : NULL;

    /* positions 0..T-1 are rows 0..T-1 of wpe: a slice, broadcast over B */
    col_node *tok = col_embedding(g, p[0], out->ids);                  /* [B, T, C] */
    col_node *pos = col_slice(g, p[1], 0, 0, T);                       /* [T, C] */
    col_node *x = dropout(g, col_add(g, tok, pos), c, o);
    for (int l = 0; l < c->n_layer; l++) {
        col_node **lp = p + 2 + PER_LAYER * l;
        if (o->checkpoint)
            col_checkpoint_begin(g);
        col_node *h = col_layernorm(g, x, lp[0], lp[1], c->layer_norm_eps);
        x = col_add(g, x, attention(g, h, lp + 2, c, o));
        h = col_layernorm(g, x, lp[6], lp[7], c->layer_norm_eps);
        h = col_gelu_tanh(g, conv1d(g, h, lp[8], lp[9]));
        x = col_add(g, x, dropout(g, conv1d(g, h, lp[10], lp[11]), c, o));
        if (o->checkpoint)
            col_checkpoint_end(g);
    }
    x = col_layernorm(g, x, p[np - 2], p[np - 1], c->layer_norm_eps);
    int64_t flat[2] = {B * T, C};
    /* tied output embedding: logits = x @ wte^T */
    col_node *logits2 = col_matmul(g, col_reshape(g, x, 2, flat), col_transpose(g, p[0], 0, 1)); /* [B*T, V] */
    int64_t lshape[3] = {B, T, c->vocab_size};
    out->logits = col_reshape(g, logits2, 3, lshape);
    out->loss = NULL;
    if (o->with_loss) {
        int64_t flat_t[1] = {B * T};
        out->loss = col_cross_entropy(g, logits2, col_reshape(g, out->targets, 1, flat_t), -1);
    }
    if (col_graph_status(g) != COL_OK)
        return col_err_set(err, col_graph_status(g), "gpt: %s", col_graph_error(g)->msg);
    return COL_OK;
}
