/* opt.c - OPT (OPTForCausalLM): learned positions offset by 2, pre- or
 * post-LayerNorm blocks (do_layer_norm_before), ReLU MLP, optional
 * project_in/project_out when word_embed_proj_dim differs from the hidden
 * size (opt-350m), tied output embedding. Linear weights are [out, in]. */
#include <stdio.h>

#include "lm_family.h"
#include "lm_layers.h"

enum { PER_LAYER = 16, POS_OFFSET = 2 };

static bool projected(const col_lm_config *c) { return c->word_embed_proj_dim != c->hidden; }
static bool final_norm(const col_lm_config *c) { return c->pre_ln; }

static int opt_param_count(const col_lm_config *c)
{
    return 2 + (projected(c) ? 2 : 0) + PER_LAYER * c->n_layer + (final_norm(c) ? 2 : 0) + col_lm_own_head(c);
}

static int opt_embed_params(const col_lm_config *c) { return 2 + (projected(c) ? 1 : 0); }
static int opt_layer_params(const col_lm_config *c) { (void)c; return PER_LAYER; }

/* order: embeddings, project_in, layers, final norm, project_out, lm_head */
static void opt_param_specs(const col_lm_config *c, col_param_spec *s)
{
    int64_t C = c->hidden, E = c->word_embed_proj_dim, F = c->ffn;
    int k = 0;
    col_spec_set(&s[k], "model.decoder.embed_tokens.weight", c->vocab_size, E, COL_INIT_NORMAL);
    col_spec_role(&s[k++], COL_ROLE_EMBED, 1);
    col_spec_set(&s[k], "model.decoder.embed_positions.weight", c->max_positions + POS_OFFSET, C, COL_INIT_NORMAL);
    col_spec_role(&s[k++], COL_ROLE_POS, 1);
    if (projected(c))
        col_spec_set(&s[k++], "model.decoder.project_in.weight", C, E, COL_INIT_NORMAL);
    col_spec_list L = {.s = s, .k = k};
    for (int l = 0; l < c->n_layer; l++) {
        col_spec_layer(&L, "model.decoder.layers.%d.", l);
        col_spec_weight(&L, "self_attn.k_proj", C, C, COL_INIT_NORMAL, C, COL_ROLE_FIRST);
        col_spec_weight(&L, "self_attn.v_proj", C, C, COL_INIT_NORMAL, C, COL_ROLE_FIRST);
        col_spec_weight(&L, "self_attn.q_proj", C, C, COL_INIT_NORMAL, C, COL_ROLE_FIRST);
        col_spec_weight(&L, "self_attn.out_proj", C, C, COL_INIT_RESID, C, COL_ROLE_SECOND);
        col_spec_norm(&L, "self_attn_layer_norm", C, true);
        col_spec_weight(&L, "fc1", F, C, COL_INIT_NORMAL, F, COL_ROLE_FIRST);
        col_spec_weight(&L, "fc2", C, F, COL_INIT_RESID, C, COL_ROLE_SECOND);
        col_spec_norm(&L, "final_layer_norm", C, true);
    }
    k = L.k;
    if (final_norm(c)) {
        col_spec_set(&s[k], "model.decoder.final_layer_norm.weight", C, 0, COL_INIT_ONE);
        col_spec_role(&s[k++], COL_ROLE_NORM, 1);
        col_spec_set(&s[k], "model.decoder.final_layer_norm.bias", C, 0, COL_INIT_ZERO);
        col_spec_role(&s[k++], COL_ROLE_NORM, 1);
    }
    if (projected(c))
        col_spec_set(&s[k++], "model.decoder.project_out.weight", E, C, COL_INIT_NORMAL);
    col_lm_head_spec(c, s, k, E);
}

/* a projection's output [B, T, H*D] as heads [B, H, T, D] (this rank's heads under tensor parallelism) */
static col_node *heads(col_graph *g, const col_lm_build_opts *o, const col_lm_config *c, col_node *y)
{
    if (!y)
        return NULL;
    int64_t split[4] = {y->t.shape[0], y->t.shape[1], col_lm_heads(o, c->n_head), c->head_dim};
    return col_transpose(g, col_reshape(g, y, 4, split), 1, 2);
}

/* lp: k, v, q, out projections (weight, bias) */
static col_node *attention(col_graph *g, col_node *x, col_node **lp, int l, const col_lm_config *c,
                           const col_lm_build_opts *o, col_lm_graph *out)
{
    if (!x)
        return NULL;
    x = col_lm_operand(g, x, lp[0]); /* cast once for the three projections */
    /* [B, H, T, D] each (all of T: x may hold a share of the positions) */
    col_node *k = heads(g, o, c, col_lm_linear(g, o, out, x, &lp[0], lp[1], COL_ROLE_FIRST));
    col_node *v = heads(g, o, c, col_lm_linear(g, o, out, x, &lp[2], lp[3], COL_ROLE_FIRST));
    col_node *q = heads(g, o, c, col_lm_linear(g, o, out, x, &lp[4], lp[5], COL_ROLE_FIRST));
    col_node *y = col_lm_attend(g, o, out, l, q, k, v, 0.0f); /* scale head_dim^-0.5, as OPT's q scaling */
    return col_lm_dropout(g, col_lm_linear(g, o, out, y, &lp[6], lp[7], COL_ROLE_SECOND), c, o);
}

static col_node *opt_forward(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out)
{
    col_node **p = out->params;
    int lo, hi;
    col_lm_layer_range(c, o->layer_lo, o->layer_hi, &lo, &hi);
    int k = 0;
    col_node *wte = p[k++], *wpe = p[k++], *proj_in = projected(c) ? p[k++] : NULL;
    col_node *x = out->hidden_in;
    if (lo == 0) {
        x = col_lm_embed(g, o, wte, out->ids); /* [B, T, E] */
        if (proj_in)
            x = col_linear(g, col_lm_operand(g, x, proj_in), proj_in, NULL);
        col_node *pos = col_lm_positions(g, o, out, POS_OFFSET);
        x = col_lm_dropout(g, col_add(g, x, col_lm_pos_embed(g, o, wpe, pos)), c, o);
    }
    k += PER_LAYER * lo;
    for (int l = lo; l < hi; l++, k += PER_LAYER) {
        col_node **lp = p + k;
        if (o->checkpoint)
            col_checkpoint_begin(g);
        if (c->pre_ln) {
            x = col_add(g, x, attention(g, col_lm_norm(g, o, x, lp[8], lp[9], c->norm_eps, false), lp, l, c, o, out));
            col_node *h = col_lm_norm(g, o, x, lp[14], lp[15], c->norm_eps, false);
            h = col_lm_activation(g, col_lm_linear(g, o, out, h, &lp[10], lp[11], COL_ROLE_FIRST), c->act);
            h = col_lm_linear(g, o, out, h, &lp[12], lp[13], COL_ROLE_SECOND);
            x = col_add(g, x, col_lm_dropout(g, h, c, o));
        } else {
            x = col_lm_norm(g, o, col_add(g, x, attention(g, x, lp, l, c, o, out)), lp[8], lp[9], c->norm_eps, false);
            col_node *h = col_lm_activation(g, col_lm_linear(g, o, out, x, &lp[10], lp[11], COL_ROLE_FIRST), c->act);
            h = col_lm_linear(g, o, out, h, &lp[12], lp[13], COL_ROLE_SECOND);
            x = col_lm_norm(g, o, col_add(g, x, col_lm_dropout(g, h, c, o)), lp[14], lp[15], c->norm_eps, false);
        }
        if (o->checkpoint)
            col_checkpoint_end(g);
    }
    if (hi < c->n_layer)
        return x;
    if (final_norm(c)) {
        x = col_lm_norm(g, o, x, p[k], p[k + 1], c->norm_eps, false);
        k += 2;
    }
    if (projected(c)) {
        x = col_linear(g, col_lm_operand(g, x, p[k]), p[k], NULL);
        k++;
    }
    return col_lm_head(g, o, x, col_lm_own_head(c) ? p[k] : wte);
}

static const char *const lora_modules[] = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2", NULL};
/* none: OPT has no _keys_to_ignore_on_load_unexpected and no buffers (models/opt/modeling_opt.py) */
static const char *const unused_ok[] = {NULL};

const col_lm_family col_opt_family = {
    .name = "opt",
    .title = "OPT",
    .arch = COL_ARCH_OPT,
    .conv1d = false,
    .lora_modules = lora_modules,
    .lora_default_targets = "q_proj,v_proj",
    .unused_ok = unused_ok,
    .param_count = opt_param_count,
    .param_specs = opt_param_specs,
    .embed_params = opt_embed_params,
    .layer_params = opt_layer_params,
    .forward = opt_forward,
};
