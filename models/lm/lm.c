/* lm.c - what every model is: its parameter list and initialisation, and
 * the graph around a family's forward builder (parameter, LoRA, input and
 * cache leaves before it; logits and loss after it). The families are found
 * in the registry (lm_family.h); lm.c includes none of them. */
#include "lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm_family.h"
#include "lm_par.h"
#include "rng.h"

int col_lm_param_count(const col_lm_config *c)
{
    const col_lm_family *f = col_lm_family_of(c->arch);
    return f ? f->param_count(c) : 0;
}

void col_lm_param_specs(const col_lm_config *c, col_param_spec *s)
{
    const col_lm_family *f = col_lm_family_of(c->arch);
    if (!f)
        return;
    f->param_specs(c, s);
    for (int i = 0; i < f->param_count(c); i++)
        s[i].in_out = f->conv1d && s[i].ndim == 2 && (s[i].role == COL_ROLE_FIRST || s[i].role == COL_ROLE_SECOND);
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

col_status col_lm_check_stage(const col_lm_config *c, int layer_lo, int layer_hi, col_err *err)
{
    if ((layer_lo == 0 && layer_hi == 0) || (layer_lo >= 0 && layer_lo < layer_hi && layer_hi <= c->n_layer))
        return COL_OK;
    return col_err_set(err, COL_EINVAL, "%s: a pipeline stage of layers [%d, %d) is not a non-empty range of the "
                       "model's %d layers", col_arch_name(c->arch), layer_lo, layer_hi, c->n_layer);
}

bool col_lm_stage_shares_tied(const col_lm_config *c, int layer_lo, int layer_hi)
{
    int lo, hi;
    col_lm_layer_range(c, layer_lo, layer_hi, &lo, &hi);
    return c->tie_embeddings && lo > 0 && hi == c->n_layer;
}

int col_lm_stage_params(const col_lm_config *c, int layer_lo, int layer_hi, int *idx)
{
    const col_lm_family *f = col_lm_family_of(c->arch);
    if (!f || col_lm_check_stage(c, layer_lo, layer_hi, NULL) != COL_OK)
        return 0;
    int lo, hi, n = 0;
    col_lm_layer_range(c, layer_lo, layer_hi, &lo, &hi);
    int pre = f->embed_params(c), per = f->layer_params(c), all = f->param_count(c);
    int first = lo == 0 ? 0 : pre + per * lo, last = hi == c->n_layer ? all : pre + per * hi;
    for (int i = first; i < last; i++, n++)
        if (idx)
            idx[n] = i;
    if (col_lm_stage_shares_tied(c, layer_lo, layer_hi)) { /* the head's weight, used last */
        if (idx)
            idx[n] = COL_LM_TIED_PARAM;
        n++;
    }
    return n;
}

/* The dropout stream offset the whole model's graph has at layer lo: that of a graph of layers [0, lo) (a
 * throwaway build; it allocates no tensor memory). */
static col_status dropout_offset_at(const col_lm_config *c, const col_lm_build_opts *o, int lo, uint64_t *off,
                                    col_err *err)
{
    *off = 0;
    if (lo == 0 || !o->training || c->dropout <= 0)
        return COL_OK;
    col_graph *g = col_graph_new();
    col_node **params = calloc((size_t)col_lm_param_count(c), sizeof *params);
    col_status st = g && params ? COL_OK : col_err_set(err, COL_ENOMEM, "model: out of memory");
    col_lm_build_opts po = *o;
    po.with_loss = false;
    po.checkpoint = false;
    po.layer_lo = 0;
    po.layer_hi = lo;
    col_lm_graph pg = {.params = params};
    if (st == COL_OK)
        st = col_lm_build(g, c, &po, &pg, err);
    if (st == COL_OK)
        *off = col_graph_dropout_offset(g);
    free(params);
    col_graph_free(g);
    return st;
}

col_dtype col_lm_quant_dtype(const col_param_spec *s, col_dtype q)
{
    if (!col_dtype_is_quant(q) || s->ndim != 2)
        return COL_F32;
    bool matrix = s->role == COL_ROLE_FIRST || s->role == COL_ROLE_SECOND || s->role == COL_ROLE_EMBED ||
                  s->role == COL_ROLE_HEAD;
    int64_t inner = s->in_out ? s->shape[0] : s->shape[1];
    return matrix && inner % col_dtype_block(q) == 0 ? q : COL_F32;
}

void col_lm_leaf_shape(const col_param_spec *s, col_dtype dt, int64_t shape[2])
{
    bool swap = col_dtype_is_quant(dt) && s->in_out && s->ndim == 2;
    shape[0] = swap ? s->shape[1] : s->shape[0];
    shape[1] = swap ? s->shape[0] : (s->ndim > 1 ? s->shape[1] : 0);
}

col_status col_lm_build(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out,
                        col_err *err)
{
    col_status st = col_lm_check_config(c, err);
    if (st != COL_OK)
        return st;
    const col_lm_family *family = col_lm_family_of(c->arch);
    if (!family)
        return col_err_set(err, COL_EINVAL, "model: architecture %d is not a registered family", (int)c->arch);
    if (o->batch <= 0 || o->seq <= 0 || o->seq > c->max_positions)
        return col_err_set(err, COL_EINVAL, "%s: sequence length %d is outside 1..%d (the model's maximum positions)",
                           col_arch_name(c->arch), o->seq, c->max_positions);
    if (o->cache_len && (o->cache_len < o->seq || o->cache_len > c->max_positions || o->with_loss))
        return col_err_set(err, COL_EINVAL, "%s: a key/value cache of %d positions cannot hold %d tokens (max %d)",
                           col_arch_name(c->arch), o->cache_len, o->seq, c->max_positions);
    if (o->param_dtype && (o->par || o->lora_of))
        return col_err_set(err, COL_EUNSUPPORTED, "%s: quantized weights are for inference (no LoRA or tensor "
                           "parallelism)", col_arch_name(c->arch));
    if (o->cache_rows < 0 || (o->cache_rows > 0 && !o->cache_len))
        return col_err_set(err, COL_EINVAL, "%s: %d cache rows (a cache of many sequences needs cache_len > 0)",
                           col_arch_name(c->arch), o->cache_rows);
    if (o->dtype != COL_F32 && o->dtype != COL_BF16 && o->dtype != COL_F16)
        return col_err_set(err, COL_EINVAL, "%s: weights of %s (f32, bf16 or f16)", col_arch_name(c->arch),
                           col_dtype_name(o->dtype));
    if ((st = col_lm_check_stage(c, o->layer_lo, o->layer_hi, err)) != COL_OK)
        return st;
    if (o->with_loss && (o->objective == COL_LM_OBJ_VALUES) != c->value_head)
        return col_err_set(err, COL_EINVAL, "%s: %s", col_arch_name(c->arch), c->value_head
                           ? "a value model's graph ends in its values (objective COL_LM_OBJ_VALUES)"
                           : "only a value model (config value_head) has values to end in");
    int lo, hi;
    col_lm_layer_range(c, o->layer_lo, o->layer_hi, &lo, &hi);
    bool partial = lo > 0 || hi < c->n_layer;
    if (partial && (o->cache_len || o->lora_of))
        return col_err_set(err, COL_EUNSUPPORTED, "%s: a pipeline stage (layers [%d, %d)) takes no key/value cache "
                           "and no LoRA adapters", col_arch_name(c->arch), lo, hi);
    const col_lm_par *par = o->par;
    if (par && (o->cache_len || o->lora_of || (o->with_loss && o->objective != COL_LM_OBJ_MEAN_CE)))
        return col_err_set(err, COL_EUNSUPPORTED, "%s: a tensor- or sequence-parallel graph takes no key/value cache, "
                           "no LoRA adapters and no per-token objective yet", col_arch_name(c->arch));
    uint64_t drop_off = 0;
    if (partial && (st = dropout_offset_at(c, o, lo, &drop_off, err)) != COL_OK)
        return st;
    int np = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    int *used = calloc((size_t)np, sizeof *used);
    if (!specs || !used) {
        free(specs), free(used);
        return col_err_set(err, COL_ENOMEM, "model: out of memory");
    }
    col_lm_param_specs(c, specs);
    int nu = col_lm_stage_params(c, o->layer_lo, o->layer_hi, used);
    for (int i = 0; i < np; i++)
        out->params[i] = NULL;
    for (int u = 0; u < nu; u++) { /* in the stage's first-use order */
        int i = used[u];
        if (par) { /* this rank's block */
            col_shard sh;
            par->ops->shard(par, &specs[i], &sh);
            col_shard_shape(&sh, specs[i].ndim, specs[i].shape, specs[i].shape);
        }
        col_dtype dt = o->param_dtype && o->param_dtype[i] != COL_F32 ? o->param_dtype[i] : o->dtype;
        int64_t shape[2];
        col_lm_leaf_shape(&specs[i], dt, shape);
        out->params[i] = o->lora_of || col_dtype_is_quant(dt) ? col_input(g, specs[i].name, dt, specs[i].ndim, shape)
                                                              : col_param(g, specs[i].name, dt, specs[i].ndim, shape);
    }
    free(used);
    /* under tensor or sequence parallelism the layers read each leaf through the mode's use (lm_par.h) */
    col_node **leaves = out->params, **uses = NULL;
    if (par) {
        if (!(uses = calloc((size_t)np, sizeof *uses))) {
            free(specs);
            return col_err_set(err, COL_ENOMEM, "model: out of memory");
        }
        for (int i = 0; i < np; i++) /* (a stage's other parameters stay NULL) */
            uses[i] = leaves[i] ? par->ops->use(g, par, specs[i].role, leaves[i]) : NULL;
    }
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
        bool conv1d = family->conv1d; /* Conv1D weights are [in, out] */
        int64_t in = specs[i].shape[conv1d ? 0 : 1], outf = specs[i].shape[conv1d ? 1 : 0];
        int64_t sa[2] = {o->lora_rank, in}, sb[2] = {outf, o->lora_rank};
        char n[48];
        snprintf(n, sizeof n, "lora_A.%d", j);
        out->lora[2 * j] = col_param(g, n, o->dtype, 2, sa);
        snprintf(n, sizeof n, "lora_B.%d", j);
        out->lora[2 * j + 1] = col_param(g, n, o->dtype, 2, sb);
    }
    free(specs);
    /* (under par: this rank's rows, positions and hidden block, as the layers pass them) */
    int64_t bt[2] = {o->batch, o->seq}, bth[3] = {o->batch, o->seq, par ? par->ops->hidden_local(par, c->hidden)
                                                                             : c->hidden};
    bool last = hi == c->n_layer;
    out->ids = lo == 0 ? col_input(g, "ids", COL_I32, 2, bt) : NULL;
    out->targets = o->with_loss && last && o->objective != COL_LM_OBJ_VALUES ? col_input(g, "targets", COL_I32, 2, bt)
                                                                            : NULL;
    out->hidden_in = NULL;
    out->hidden_out = NULL;
    if (lo > 0) {
        out->hidden_in = col_input(g, "hidden_in", COL_F32, 3, bth);
        if (out->hidden_in) /* before its users are built: the flag flows to them */
            out->hidden_in->flags |= COL_NODE_NEEDS_GRAD;
    }
    col_graph_set_dropout_offset(g, drop_off);
    out->start = out->rows = NULL;
    if (o->cache_len) {
        int64_t one[1] = {o->cache_rows > 0 ? o->batch : 1};
        out->start = col_input(g, "start", COL_I64, 1, one);
        if (o->cache_rows > 0)
            out->rows = col_input(g, "rows", COL_I64, 1, one);
        int64_t cs[4] = {o->cache_rows > 0 ? o->cache_rows : o->batch, c->n_kv_head, o->cache_len, c->head_dim};
        for (int l = 0; l < 2 * c->n_layer; l++)
            out->cache[l] = col_input(g, l % 2 ? "v_cache" : "k_cache", COL_F32, 4, cs);
    }
    out->inv_count = NULL;
    if (par && o->with_loss && last) {
        int64_t one[1] = {1};
        out->inv_count = col_input(g, "inv_count", COL_F32, 1, one);
    }
    if (par)
        out->params = uses;
    /* [B*T, V]; a stage before the last: [B, T, C]; under par the final hidden states [B, T, C] */
    col_node *logits2 = family->forward(g, c, o, out);
    if (par) {
        col_node *head = uses[col_lm_own_head(c) ? np - 1 : 0];
        out->params = leaves;
        out->loss = out->logits = NULL;
        if (!last) { /* a pipeline stage before the last: this rank's block of the hidden states */
            free(uses);
            out->hidden_out = logits2;
            if (col_graph_status(g) != COL_OK)
                return col_err_set(err, col_graph_status(g), "%s: %s", col_arch_name(c->arch), col_graph_error(g)->msg);
            return COL_OK;
        }
        free(uses);
        if (o->with_loss)
            out->loss = par->ops->loss(g, par, logits2, head, out->targets, out->inv_count, col_lm_out_width(c),
                                       !o->training, &out->logits);
        else
            out->logits = par->ops->logits(g, par, logits2, head, col_lm_out_width(c));
        if (out->logits) {
            int64_t lshape[3] = {o->batch, o->seq, col_lm_out_width(c)};
            out->logits = col_reshape(g, out->logits, 3, lshape);
        }
        if (col_graph_status(g) != COL_OK)
            return col_err_set(err, col_graph_status(g), "%s: %s", col_arch_name(c->arch), col_graph_error(g)->msg);
        return COL_OK;
    }
    out->logits = out->loss = NULL;
    if (!last) {
        out->hidden_out = logits2;
        if (col_graph_status(g) != COL_OK)
            return col_err_set(err, col_graph_status(g), "%s: %s", col_arch_name(c->arch), col_graph_error(g)->msg);
        return COL_OK;
    }
    int64_t lshape[3] = {o->batch, o->seq, col_lm_out_width(c)};
    out->logits = col_reshape(g, logits2, 3, lshape);
    out->loss = NULL;
    int64_t flat[1] = {(int64_t)o->batch * o->seq};
    if (o->with_loss && o->objective == COL_LM_OBJ_MEAN_CE)
        out->loss = col_cross_entropy(g, logits2, col_reshape(g, out->targets, 1, flat), -1);
    else if (o->with_loss && o->objective == COL_LM_OBJ_TOKEN_LOGPROB)
        out->loss = col_reshape(g, col_token_logprob(g, logits2, col_reshape(g, out->targets, 1, flat), -1), 2, bt);
    else if (o->with_loss && o->objective == COL_LM_OBJ_VALUES)
        out->loss = col_reshape(g, logits2, 2, bt);
    if (col_graph_status(g) != COL_OK)
        return col_err_set(err, col_graph_status(g), "%s: %s", col_arch_name(c->arch), col_graph_error(g)->msg);
    return COL_OK;
}
