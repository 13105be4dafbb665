/* gpt.c - GPT-2 (GPT2LMHeadModel): pre-LayerNorm blocks, learned positions,
 * GELU (tanh form, "gelu_new"), tied input/output embeddings unless
 * tie_word_embeddings is false (then lm_head.weight [vocab, C], an
 * nn.Linear without bias). Its Conv1D weights are stored [in, out], so the
 * projections are x @ W + b. */
#include <stdio.h>

#include "lm_family.h"
#include "lm_layers.h"

enum { PER_LAYER = 12 };

static int gpt2_param_count(const col_lm_config *c)
{
    return 2 + PER_LAYER * c->n_layer + 2 + col_lm_own_head(c);
}

static int gpt2_embed_params(const col_lm_config *c) { (void)c; return 2; }
static int gpt2_layer_params(const col_lm_config *c) { (void)c; return PER_LAYER; }

static void gpt2_param_specs(const col_lm_config *c, col_param_spec *s)
{
    int64_t C = c->hidden, F = c->ffn;
    int k = 0;
    col_spec_set(&s[k], "transformer.wte.weight", c->vocab_size, C, COL_INIT_NORMAL);
    col_spec_role(&s[k++], COL_ROLE_EMBED, 1);
    col_spec_set(&s[k], "transformer.wpe.weight", c->max_positions, C, COL_INIT_NORMAL);
    col_spec_role(&s[k++], COL_ROLE_POS, 1);
    col_spec_list L = {.s = s, .k = k};
    for (int l = 0; l < c->n_layer; l++) { /* Conv1D weights are [in, out] */
        col_spec_layer(&L, "transformer.h.%d.", l);
        col_spec_norm(&L, "ln_1", C, true);
        col_spec_weight(&L, "attn.c_attn", C, 3 * C, COL_INIT_NORMAL, 3 * C, COL_ROLE_FIRST);
        L.s[L.k - 2].groups = L.s[L.k - 1].groups = 3; /* the columns are q | k | v */
        col_spec_weight(&L, "attn.c_proj", C, C, COL_INIT_RESID, C, COL_ROLE_SECOND);
        col_spec_norm(&L, "ln_2", C, true);
        col_spec_weight(&L, "mlp.c_fc", C, F, COL_INIT_NORMAL, F, COL_ROLE_FIRST);
        col_spec_weight(&L, "mlp.c_proj", F, C, COL_INIT_RESID, C, COL_ROLE_SECOND);
    }
    k = L.k;
    col_spec_set(&s[k], "transformer.ln_f.weight", C, 0, COL_INIT_ONE);
    col_spec_role(&s[k++], COL_ROLE_NORM, 1);
    col_spec_set(&s[k], "transformer.ln_f.bias", C, 0, COL_INIT_ZERO);
    col_spec_role(&s[k++], COL_ROLE_NORM, 1);
    col_lm_head_spec(c, s, k, C);
}

/* causal self-attention; x [B, T, C] -> [B, T, C] */
static col_node *attention(col_graph *g, col_node *x, col_node **p, int l, const col_lm_config *c,
                           const col_lm_build_opts *o, col_lm_graph *out)
{
    if (!x)
        return NULL;
    int64_t H = col_lm_heads(o, c->n_head), D = c->head_dim;
    col_node *qkv = col_lm_conv1d(g, o, out, x, &p[0], p[1], COL_ROLE_FIRST); /* [B, T, 3C] */
    if (!qkv)
        return NULL;
    int64_t B = qkv->t.shape[0], T = qkv->t.shape[1]; /* (all of T: x may hold a share of the positions) */
    /* q, k, v as strided views of qkv: [B,T,3,H,D] -> [3,B,H,T,D] */
    int64_t split[5] = {B, T, 3, H, D}, heads[4] = {B, H, T, D};
    col_node *qkv5 = col_permute(g, col_reshape(g, qkv, 5, split), (int[]){2, 0, 3, 1, 4});
    col_node *q = col_reshape(g, col_slice(g, qkv5, 0, 0, 1), 4, heads);
    col_node *k = col_reshape(g, col_slice(g, qkv5, 0, 1, 1), 4, heads);
    col_node *v = col_reshape(g, col_slice(g, qkv5, 0, 2, 1), 4, heads);
    col_node *y = col_lm_attend(g, o, out, l, q, k, v, 0.0f);
    return col_lm_dropout(g, col_lm_conv1d(g, o, out, y, &p[2], p[3], COL_ROLE_SECOND), c, o);
}

static col_node *gpt2_forward(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out)
{
    col_node **p = out->params;
    int lo, hi;
    col_lm_layer_range(c, o->layer_lo, o->layer_hi, &lo, &hi);
    col_node *x = out->hidden_in;
    if (lo == 0) {
        col_node *tok = col_lm_embed(g, o, p[0], out->ids);                            /* [B, T, C] */
        col_node *pos = col_lm_pos_embed(g, o, p[1], col_lm_positions(g, o, out, 0)); /* [T, C] */
        x = col_lm_dropout(g, col_add(g, tok, pos), c, o);
    }
    for (int l = lo; l < hi; l++) {
        col_node **lp = p + 2 + PER_LAYER * l;
        if (o->checkpoint)
            col_checkpoint_begin(g);
        col_node *h = col_lm_norm(g, o, x, lp[0], lp[1], c->norm_eps, false);
        x = col_add(g, x, attention(g, h, lp + 2, l, c, o, out));
        h = col_lm_norm(g, o, x, lp[6], lp[7], c->norm_eps, false);
        h = col_lm_activation(g, col_lm_conv1d(g, o, out, h, &lp[8], lp[9], COL_ROLE_FIRST), c->act);
        x = col_add(g, x, col_lm_dropout(g, col_lm_conv1d(g, o, out, h, &lp[10], lp[11], COL_ROLE_SECOND), c, o));
        if (o->checkpoint)
            col_checkpoint_end(g);
    }
    if (hi < c->n_layer)
        return x;
    int k = 2 + PER_LAYER * c->n_layer;
    x = col_lm_norm(g, o, x, p[k], p[k + 1], c->norm_eps, false);
    return col_lm_head(g, o, x, col_lm_own_head(c) ? p[k + 2] : p[0]); /* tied: x @ wte^T */
}

static const char *const lora_modules[] = {"c_attn", "c_proj", "c_fc", NULL};
/* GPT2Attention's causal-mask buffers, which checkpoints saved before they became non-persistent hold
 * (older GPT-2 checkpoints on the hub do): transformers 5 lists "attn.bias" and "crossattention.bias" in
 * GPT2PreTrainedModel._keys_to_ignore_on_load_unexpected (models/gpt2/modeling_gpt2.py), transformers 4.x
 * listed r"h\.\d+\.attn\.bias" and r"h\.\d+\.attn\.masked_bias" in GPT2LMHeadModel's */
static const char *const unused_ok[] = {"h.#.attn.bias", "h.#.attn.masked_bias", "h.#.crossattention.bias",
                                        NULL};

const col_lm_family col_gpt2_family = {
    .name = "gpt2",
    .title = "GPT-2",
    .arch = COL_ARCH_GPT2,
    .conv1d = true,
    .lora_modules = lora_modules,
    .lora_default_targets = "c_attn",
    .unused_ok = unused_ok,
    .param_count = gpt2_param_count,
    .param_specs = gpt2_param_specs,
    .embed_params = gpt2_embed_params,
    .layer_params = gpt2_layer_params,
    .forward = gpt2_forward,
};
