/* lm.c - what the model families share: config checks, parameter specs,
 * initialisation, dropout/activation, attention through an optional
 * key/value cache, and the dispatch to each family's graph builder. */
#include "lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

int col_lm_param_count(const col_lm_config *c)
{
    switch (c->arch) {
    case COL_ARCH_GPT2: return col_gpt2_param_count(c);
    case COL_ARCH_OPT: return col_opt_param_count(c);
    case COL_ARCH_LLAMA: return col_llama_param_count(c);
    }
    return 0;
}

void col_lm_param_specs(const col_lm_config *c, col_param_spec *s)
{
    switch (c->arch) {
    case COL_ARCH_GPT2: col_gpt2_param_specs(c, s); break;
    case COL_ARCH_OPT: col_opt_param_specs(c, s); break;
    case COL_ARCH_LLAMA: col_llama_param_specs(c, s); break;
    }
}

void col_spec_set(col_param_spec *s, const char *name, int64_t d0, int64_t d1, col_init_kind init)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->decay = d1 != 0;
    s->init = init;
}

int64_t col_param_numel(const col_param_spec *s) { return s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1); }

void col_lm_init_param(const col_lm_config *c, const col_param_spec *s, int index, float *data, uint64_t seed)
{
    int64_t n = col_param_numel(s);
    uint64_t stream = seed * 0x9E3779B97F4A7C15ull + (uint64_t)index;
    switch (s->init) {
    case COL_INIT_NORMAL: col_fill_normal(data, n, stream, 0.02f); break;
    case COL_INIT_RESID: col_fill_normal(data, n, stream, 0.02f / sqrtf(2.0f * (float)c->n_layer)); break;
    case COL_INIT_ZERO: memset(data, 0, sizeof(float) * (size_t)n); break;
    case COL_INIT_ONE:
        for (int64_t i = 0; i < n; i++)
            data[i] = 1.0f;
        break;
    }
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
    col_node *h = col_matmul(g, col_reshape(g, x, 2, flat), col_transpose(g, a, 0, 1));
    h = col_matmul(g, col_scale(g, h, o->lora_scale, 0.0f), col_transpose(g, b, 0, 1));
    return h ? col_add(g, y, col_reshape(g, h, y->t.ndim, y->t.shape)) : NULL;
}

col_node *col_lm_linear(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *const *w,
                        col_node *b)
{
    return col_lm_lora(g, o, out, x, col_linear(g, x, *w, b), w);
}

col_node *col_lm_positions(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out)
{
    return col_arange(g, o->cache_len ? out->start : NULL, o->seq, 0);
}

col_node *col_lm_attend(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, int l, col_node *q, col_node *k,
                        col_node *v, float scale)
{
    if (!q || !k || !v)
        return NULL;
    col_node *y;
    if (o->cache_len) {
        col_node *kc = col_kv_write(g, out->cache[2 * l], k, out->start);
        col_node *vc = col_kv_write(g, out->cache[2 * l + 1], v, out->start);
        y = col_attention_cached(g, q, kc, vc, out->start, scale);
    } else {
        y = col_attention(g, q, k, v, 1, scale);
    }
    if (!y)
        return NULL;
    int64_t B = q->t.shape[0], H = q->t.shape[1], T = q->t.shape[2], D = q->t.shape[3];
    int64_t merged[3] = {B, T, H * D};
    return col_reshape(g, col_transpose(g, y, 1, 2), 3, merged); /* [B, T, H*D] */
}

col_status col_lm_build(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out,
                        col_err *err)
{
    col_status st = col_lm_check_config(c, err);
    if (st != COL_OK)
        return st;
    if (o->batch <= 0 || o->seq <= 0 || o->seq > c->max_positions)
        return col_err_set(err, COL_EINVAL, "%s: sequence length %d is outside 1..%d (the model's maximum positions)",
                           col_arch_name(c->arch), o->seq, c->max_positions);
    if (o->cache_len && (o->cache_len < o->seq || o->cache_len > c->max_positions || o->with_loss))
        return col_err_set(err, COL_EINVAL, "%s: a key/value cache of %d positions cannot hold %d tokens (max %d)",
                           col_arch_name(c->arch), o->cache_len, o->seq, c->max_positions);
    int np = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    if (!specs)
        return col_err_set(err, COL_ENOMEM, "model: out of memory");
    col_lm_param_specs(c, specs);
    for (int i = 0; i < np; i++)
        out->params[i] = o->lora_of ? col_input(g, specs[i].name, COL_F32, specs[i].ndim, specs[i].shape)
                                    : col_param(g, specs[i].name, COL_F32, specs[i].ndim, specs[i].shape);
    /* adapters after the base leaves, in adapter order (lora_of numbers them in spec order) */
    for (int i = 0; o->lora_of && i < np; i++) {
        int j = o->lora_of[i];
        if (j < 0)
            continue;
        if (specs[i].ndim != 2 || o->lora_rank <= 0) {
            col_err_set(err, COL_EINVAL, "LoRA on %s: only matrices with a positive rank", specs[i].name);
            free(specs);
            return COL_EINVAL;
        }
        bool conv1d = c->arch == COL_ARCH_GPT2; /* Conv1D weights are [in, out] */
        int64_t in = specs[i].shape[conv1d ? 0 : 1], outf = specs[i].shape[conv1d ? 1 : 0];
        int64_t sa[2] = {o->lora_rank, in}, sb[2] = {outf, o->lora_rank};
        char n[48];
        snprintf(n, sizeof n, "lora_A.%d", j);
        out->lora[2 * j] = col_param(g, n, COL_F32, 2, sa);
        snprintf(n, sizeof n, "lora_B.%d", j);
        out->lora[2 * j + 1] = col_param(g, n, COL_F32, 2, sb);
    }
    free(specs);
    int64_t bt[2] = {o->batch, o->seq};
    out->ids = col_input(g, "ids", COL_I32, 2, bt);
    out->targets = o->with_loss ? col_input(g, "targets", COL_I32, 2, bt) : NULL;
    out->start = NULL;
    if (o->cache_len) {
        int64_t one[1] = {1};
        out->start = col_input(g, "start", COL_I64, 1, one);
        int64_t cs[4] = {o->batch, c->n_kv_head, o->cache_len, c->head_dim};
        for (int l = 0; l < 2 * c->n_layer; l++)
            out->cache[l] = col_input(g, l % 2 ? "v_cache" : "k_cache", COL_F32, 4, cs);
    }
    col_node *logits2 = NULL; /* [B*T, V] */
    switch (c->arch) {
    case COL_ARCH_GPT2: logits2 = col_gpt2_forward(g, c, o, out); break;
    case COL_ARCH_OPT: logits2 = col_opt_forward(g, c, o, out); break;
    case COL_ARCH_LLAMA: logits2 = col_llama_forward(g, c, o, out); break;
    }
    int64_t lshape[3] = {o->batch, o->seq, c->vocab_size};
    out->logits = col_reshape(g, logits2, 3, lshape);
    out->loss = NULL;
    if (o->with_loss) {
        int64_t flat[1] = {(int64_t)o->batch * o->seq};
        out->loss = col_cross_entropy(g, logits2, col_reshape(g, out->targets, 1, flat), -1);
    }
    if (col_graph_status(g) != COL_OK)
        return col_err_set(err, col_graph_status(g), "%s: %s", col_arch_name(c->arch), col_graph_error(g)->msg);
    return COL_OK;
}
