/* llama.c - LLaMA 1/2/3 (LlamaForCausalLM): RMSNorm, rotary positions (with
 * LLaMA-3 frequency scaling), grouped-query attention, SwiGLU MLP, tied or
 * untied output embedding. Linear weights are [out, in]. */
#include <stdio.h>

#include "lm_family.h"
#include "lm_layers.h"

enum { PER_LAYER = 9 };

/* attention_bias gives q, k, v and o_proj a bias (LlamaAttention: bias=config.attention_bias on all four);
 * mlp_bias gives gate, up and down_proj one */
static int per_layer(const col_lm_config *c) { return PER_LAYER + (c->attn_bias ? 4 : 0) + (c->mlp_bias ? 3 : 0); }

static int llama_param_count(const col_lm_config *c)
{
    return 1 + per_layer(c) * c->n_layer + 1 + col_lm_own_head(c);
}

static int llama_embed_params(const col_lm_config *c) { (void)c; return 1; }

static void llama_param_specs(const col_lm_config *c, col_param_spec *s)
{
    int64_t C = c->hidden, Hq = (int64_t)c->n_head * c->head_dim, Hkv = (int64_t)c->n_kv_head * c->head_dim,
            F = c->ffn;
    int k = 0;
    col_spec_set(&s[k], "model.embed_tokens.weight", c->vocab_size, C, COL_INIT_NORMAL);
    col_spec_role(&s[k++], COL_ROLE_EMBED, 1);
    int64_t ab = c->attn_bias, mb = c->mlp_bias; /* 1: the projection has a bias */
    col_spec_list L = {.s = s, .k = k};
    for (int l = 0; l < c->n_layer; l++) {
        col_spec_layer(&L, "model.layers.%d.", l);
        col_spec_norm(&L, "input_layernorm", C, false);
        col_spec_weight(&L, "self_attn.q_proj", Hq, C, COL_INIT_NORMAL, ab * Hq, COL_ROLE_FIRST);
        col_spec_weight(&L, "self_attn.k_proj", Hkv, C, COL_INIT_NORMAL, ab * Hkv, COL_ROLE_FIRST);
        col_spec_weight(&L, "self_attn.v_proj", Hkv, C, COL_INIT_NORMAL, ab * Hkv, COL_ROLE_FIRST);
        col_spec_weight(&L, "self_attn.o_proj", C, Hq, COL_INIT_RESID, ab * C, COL_ROLE_SECOND);
        col_spec_norm(&L, "post_attention_layernorm", C, false);
        col_spec_weight(&L, "mlp.gate_proj", F, C, COL_INIT_NORMAL, mb * F, COL_ROLE_FIRST);
        col_spec_weight(&L, "mlp.up_proj", F, C, COL_INIT_NORMAL, mb * F, COL_ROLE_FIRST);
        col_spec_weight(&L, "mlp.down_proj", C, F, COL_INIT_RESID, mb * C, COL_ROLE_SECOND);
    }
    k = L.k;
    col_spec_set(&s[k], "model.norm.weight", C, 0, COL_INIT_ONE);
    col_spec_role(&s[k++], COL_ROLE_NORM, 1);
    col_lm_head_spec(c, s, k, C);
}

/* x [B, T, C] -> heads [B, H, T, D] of a projection, rotated when pos is given */
static col_node *heads(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *const *w,
                       col_node *b, int64_t H, int64_t D, col_node *pos, const col_rope_cfg *rope)
{
    if (!x)
        return NULL;
    col_node *y = col_lm_linear(g, o, out, x, w, b, COL_ROLE_FIRST); /* (all positions: x may hold a share) */
    if (!y)
        return NULL;
    int64_t split[4] = {y->t.shape[0], y->t.shape[1], col_lm_heads(o, H), D};
    col_node *h = col_transpose(g, col_reshape(g, y, 4, split), 1, 2);
    return pos ? col_rope(g, h, pos, rope) : h;
}

static col_node *llama_forward(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out)
{
    col_node **p = out->params;
    int64_t H = c->n_head, Hkv = c->n_kv_head, D = c->head_dim;
    int lo, hi;
    col_lm_layer_range(c, o->layer_lo, o->layer_hi, &lo, &hi);
    col_node *x = lo == 0 ? col_lm_embed(g, o, p[0], out->ids) : out->hidden_in; /* [B, T, C] */
    col_node *pos = col_lm_positions(g, o, out, 0);
    int k = 1 + per_layer(c) * lo;
    for (int l = lo; l < hi; l++) {
        col_node **lp = p + k;
        int i = 0;
        /* weights as pointers into out->params (col_lm_linear finds their adapters by position) */
        col_node *ln1 = lp[i++], **wq = &lp[i++], *bq = c->attn_bias ? lp[i++] : NULL;
        col_node **wk = &lp[i++], *bk = c->attn_bias ? lp[i++] : NULL, **wv = &lp[i++];
        col_node *bv = c->attn_bias ? lp[i++] : NULL;
        col_node **wo = &lp[i++], *bo = c->attn_bias ? lp[i++] : NULL;
        col_node *ln2 = lp[i++], **wg = &lp[i++], *bg = c->mlp_bias ? lp[i++] : NULL;
        col_node **wu = &lp[i++], *bu = c->mlp_bias ? lp[i++] : NULL, **wd = &lp[i++];
        col_node *bd = c->mlp_bias ? lp[i++] : NULL;
        k += per_layer(c);
        if (o->checkpoint)
            col_checkpoint_begin(g);
        /* each norm's output is cast once for the projections that read it */
        col_node *h = col_lm_operand(g, col_lm_norm(g, o, x, ln1, NULL, c->norm_eps, true), *wq);
        col_node *q = heads(g, o, out, h, wq, bq, H, D, pos, &c->rope);
        col_node *kk = heads(g, o, out, h, wk, bk, Hkv, D, pos, &c->rope);
        col_node *v = heads(g, o, out, h, wv, bv, Hkv, D, NULL, NULL);
        col_node *y = col_lm_attend(g, o, out, l, q, kk, v, 0.0f);
        x = col_add(g, x, col_lm_dropout(g, col_lm_linear(g, o, out, y, wo, bo, COL_ROLE_SECOND), c, o));
        h = col_lm_operand(g, col_lm_norm(g, o, x, ln2, NULL, c->norm_eps, true), *wg);
        h = col_swiglu(g, col_lm_linear(g, o, out, h, wg, bg, COL_ROLE_FIRST),
                       col_lm_linear(g, o, out, h, wu, bu, COL_ROLE_FIRST));
        x = col_add(g, x, col_lm_dropout(g, col_lm_linear(g, o, out, h, wd, bd, COL_ROLE_SECOND), c, o));
        if (o->checkpoint)
            col_checkpoint_end(g);
    }
    if (hi < c->n_layer)
        return x;
    x = col_lm_norm(g, o, x, p[k++], NULL, c->norm_eps, true);
    return col_lm_head(g, o, x, col_lm_own_head(c) ? p[k] : p[0]);
}

static const char *const lora_modules[] = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                           "gate_proj", "up_proj", "down_proj", NULL};
/* the rotary embedding's inv_freq buffer, which checkpoints converted before it became non-persistent hold
 * (per layer, model.layers.N.self_attn.rotary_emb.inv_freq, in the first Llama 2 conversions): transformers
 * drops unexpected keys matching r"rotary_emb\.inv_freq" in any model with such a buffer
 * (PreTrainedModel._adjust_missing_and_unexpected_keys, modeling_utils.py) */
static const char *const unused_ok[] = {"rotary_emb.inv_freq", NULL};

const col_lm_family col_llama_family = {
    .name = "llama",
    .title = "LLaMA",
    .arch = COL_ARCH_LLAMA,
    .conv1d = false,
    .lora_modules = lora_modules,
    .lora_default_targets = "q_proj,v_proj",
    .unused_ok = unused_ok,
    .param_count = llama_param_count,
    .param_specs = llama_param_specs,
    .embed_params = llama_embed_params,
    .layer_params = per_layer,
    .forward = llama_forward,
};
