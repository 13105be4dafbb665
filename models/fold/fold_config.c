/* fold_config.c - an AlphaFold2 model's shape, from its parameter arrays. */
#include "fold_config.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const col_ckpt *c;
    col_err *err;
    col_status st;
} reader;

/* The array FOLD_ROOT + name, which must have ndim dimensions; NULL (and the first error) otherwise. */
static const col_ckpt_tensor *arr(reader *r, int ndim, const char *name)
{
    if (r->st != COL_OK) return NULL;
    char full[256];
    snprintf(full, sizeof full, "%s%s", FOLD_ROOT, name);
    const col_ckpt_tensor *t = col_ckpt_find(r->c, full);
    if (!t) {
        r->st = col_err_set(r->err, COL_EFORMAT, "the parameter file has no array %s (not an AlphaFold2 monomer "
                            "parameter file?)", full);
        return NULL;
    }
    if (t->ndim != ndim) {
        r->st = col_err_set(r->err, COL_EFORMAT, "the parameter file's array %s has %d dimensions, expected %d", full,
                            t->ndim, ndim);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] <= 0 || t->shape[i] > (1 << 20)) {
            r->st = col_err_set(r->err, COL_EFORMAT, "the parameter file's array %s has a bad dimension %lld", full,
                                (long long)t->shape[i]);
            return NULL;
        }
    return t;
}

static bool has(reader *r, const char *name)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", FOLD_ROOT, name);
    return col_ckpt_find(r->c, full) != NULL;
}

static int64_t dim(reader *r, int ndim, int axis, const char *name)
{
    const col_ckpt_tensor *t = arr(r, ndim, name);
    return t ? t->shape[axis] : 0;
}

/* Requires a == b, naming what disagrees. */
static void same(reader *r, int64_t a, int64_t b, const char *what)
{
    if (r->st == COL_OK && a != b)
        r->st = col_err_set(r->err, COL_ESHAPE, "the parameter file's %s disagree (%lld vs %lld)", what,
                            (long long)a, (long long)b);
}

/* Attention dims of a stacked (lead = 1) or plain (lead = 0) module: MODULE/attention//{query,value,output}_w. */
static void attn(reader *r, const char *module, int lead, bool global, fold_attn_dims *d)
{
    char n[200];
    snprintf(n, sizeof n, "%s/attention//query_w", module);
    const col_ckpt_tensor *q = arr(r, 3 + lead, n);
    snprintf(n, sizeof n, "%s/attention//value_w", module);
    const col_ckpt_tensor *v = arr(r, (global ? 2 : 3) + lead, n);
    snprintf(n, sizeof n, "%s/attention//output_w", module);
    const col_ckpt_tensor *o = arr(r, 3 + lead, n);
    if (!q || !v || !o) return;
    d->c_in = q->shape[lead];
    d->heads = q->shape[lead + 1];
    d->key_dim = q->shape[lead + 2];
    d->value_dim = global ? v->shape[lead + 1] : v->shape[lead + 2];
    d->c_out = o->shape[lead + 2];
    snprintf(n, sizeof n, "%s/attention//gating_w", module);
    d->gating = has(r, n);
    same(r, o->shape[lead], d->heads, "attention head counts");
    same(r, o->shape[lead + 1], d->value_dim, "attention value widths");
}

static void stack(reader *r, const char *s, bool extra, int64_t c_z, fold_stack_dims *d)
{
    char n[200];
    snprintf(n, sizeof n, "evoformer/%s/msa_transition/transition1//weights", s);
    d->n_blocks = (int)dim(r, 3, 0, n);
    d->c_msa = dim(r, 3, 1, n);
    d->msa_transition_factor = d->c_msa ? dim(r, 3, 2, n) / d->c_msa : 0;
    snprintf(n, sizeof n, "evoformer/%s/msa_row_attention_with_pair_bias", s);
    attn(r, n, 1, false, &d->row);
    d->global_col = extra;
    snprintf(n, sizeof n, "evoformer/%s/%s", s, extra ? "msa_column_global_attention" : "msa_column_attention");
    attn(r, n, 1, extra, &d->col);
    snprintf(n, sizeof n, "evoformer/%s/outer_product_mean/left_projection//weights", s);
    d->opm_channels = dim(r, 3, 2, n);
    snprintf(n, sizeof n, "evoformer/%s/triangle_multiplication_outgoing/left_projection//weights", s);
    d->tri_mul_out = dim(r, 3, 2, n);
    snprintf(n, sizeof n, "evoformer/%s/triangle_multiplication_incoming/left_projection//weights", s);
    d->tri_mul_in = dim(r, 3, 2, n);
    snprintf(n, sizeof n, "evoformer/%s/triangle_attention_starting_node", s);
    attn(r, n, 1, false, &d->tri_att_start);
    snprintf(n, sizeof n, "evoformer/%s/triangle_attention_ending_node", s);
    attn(r, n, 1, false, &d->tri_att_end);
    snprintf(n, sizeof n, "evoformer/%s/pair_transition/transition1//weights", s);
    d->pair_transition_factor = c_z ? dim(r, 3, 2, n) / c_z : 0;
    same(r, dim(r, 3, 1, n), c_z, "pair widths");
    same(r, d->row.c_in, d->c_msa, "MSA widths");
    same(r, d->col.c_in, d->c_msa, "MSA widths");
    same(r, d->tri_att_start.c_in, c_z, "pair widths");
    same(r, d->tri_att_end.c_in, c_z, "pair widths");
}

col_status fold_config_read(const col_ckpt *c, fold_config *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    reader r = {c, err, COL_OK};
    out->target_feat = dim(&r, 2, 0, "evoformer/preprocess_1d//weights");
    out->c_m = dim(&r, 2, 1, "evoformer/preprocess_1d//weights");
    out->msa_feat = dim(&r, 2, 0, "evoformer/preprocess_msa//weights");
    out->c_z = dim(&r, 2, 1, "evoformer/left_single//weights");
    out->c_s = dim(&r, 2, 1, "evoformer/single_activations//weights");
    out->extra_feat = dim(&r, 2, 0, "evoformer/extra_msa_activations//weights");
    out->c_e = dim(&r, 2, 1, "evoformer/extra_msa_activations//weights");
    out->relpos_bins = dim(&r, 2, 0, "evoformer/pair_activiations//weights");
    out->prev_pos_bins = dim(&r, 2, 0, "evoformer/prev_pos_linear//weights");
    out->max_relative = (out->relpos_bins - 1) / 2;
    if (r.st == COL_OK && (out->target_feat != 22 || out->msa_feat != 49 || out->extra_feat != 25 ||
                           out->relpos_bins % 2 != 1 || out->prev_pos_bins != 15))
        r.st = col_err_set(err, COL_EFORMAT, "the parameter file's input embedders have widths %lld, %lld, %lld, "
                           "%lld, %lld; an AlphaFold2 monomer without templates has 22, 49, 25, 65, 15",
                           (long long)out->target_feat, (long long)out->msa_feat, (long long)out->extra_feat,
                           (long long)out->relpos_bins, (long long)out->prev_pos_bins);
    if (r.st == COL_OK && has(&r, "evoformer/template_embedding/single_template_embedding/embedding2d//weights"))
        r.st = col_err_set(err, COL_EFORMAT, "the parameter file has template weights (model_1 or model_2): "
                           "templates are not supported; use model_3, model_4 or model_5");
    same(&r, dim(&r, 2, 1, "evoformer/right_single//weights"), out->c_z, "pair widths");
    same(&r, dim(&r, 2, 0, "evoformer/single_activations//weights"), out->c_m, "MSA widths");
    stack(&r, "evoformer_iteration", false, out->c_z, &out->evo);
    stack(&r, "extra_msa_stack", true, out->c_z, &out->extra);
    same(&r, out->evo.c_msa, out->c_m, "MSA widths");
    same(&r, out->extra.c_msa, out->c_e, "extra-MSA widths");

    /* structure module */
    const char *ipa = "structure_module/fold_iteration/invariant_point_attention/";
    char n[200];
    out->sm_layers = 8;
    out->ipa_heads = dim(&r, 1, 0, "structure_module/fold_iteration/invariant_point_attention//trainable_point_weights");
    int64_t h = out->ipa_heads ? out->ipa_heads : 1;
    snprintf(n, sizeof n, "%sq_scalar//weights", ipa);
    out->ipa_scalar_qk = dim(&r, 2, 1, n) / h;
    snprintf(n, sizeof n, "%skv_scalar//weights", ipa);
    out->ipa_scalar_v = dim(&r, 2, 1, n) / h - out->ipa_scalar_qk;
    snprintf(n, sizeof n, "%sq_point_local//weights", ipa);
    out->ipa_point_qk = dim(&r, 2, 1, n) / (3 * h);
    snprintf(n, sizeof n, "%skv_point_local//weights", ipa);
    out->ipa_point_v = dim(&r, 2, 1, n) / (3 * h) - out->ipa_point_qk;
    out->sm_transition_layers = 1;
    while (out->sm_transition_layers < 8) {
        snprintf(n, sizeof n, "structure_module/fold_iteration/transition_%lld//weights",
                 (long long)out->sm_transition_layers);
        if (!has(&r, n)) break;
        out->sm_transition_layers++;
    }
    out->angle_channels = dim(&r, 2, 1, "structure_module/fold_iteration/rigid_sidechain/input_projection//weights");
    out->angle_blocks = 1;
    while (out->angle_blocks < 16) {
        snprintf(n, sizeof n, "structure_module/fold_iteration/rigid_sidechain/resblock1_%lld//weights",
                 (long long)out->angle_blocks);
        if (!has(&r, n)) break;
        out->angle_blocks++;
    }
    same(&r, dim(&r, 1, 0, "structure_module/single_layer_norm//scale"), out->c_s, "single widths");
    same(&r, dim(&r, 2, 0, "structure_module/initial_projection//weights"), out->c_s, "single widths");

    /* heads */
    out->plddt_channels = dim(&r, 2, 1, "predicted_lddt_head/act_0//weights");
    out->plddt_bins = dim(&r, 2, 1, "predicted_lddt_head/logits//weights");
    out->distogram_bins = dim(&r, 2, 1, "distogram_head/half_logits//weights");
    out->ptm = has(&r, "predicted_aligned_error_head/logits//weights");
    if (out->ptm) out->pae_bins = dim(&r, 2, 1, "predicted_aligned_error_head/logits//weights");
    return r.st;
}
