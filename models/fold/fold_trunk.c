/* fold_trunk.c - the embedders, the extra-MSA stack and the Evoformer on one graph. */
#include "fold_trunk.h"

#include <math.h>

#include "fold_dap.h"
#include "fold_msa.h"
#include "fold_pair.h"
#include "ops.h"

/* x + y for two nodes of one shape. */
static col_node *add(fold_ctx *c, col_node *x, col_node *y)
{
    return col_add(c->b->g, x, y);
}

/* The rows of the [rows, out] weight MODULE//weights looked up by ids (an exact
 * stand-in for one_hot(ids) @ W), plus MODULE//bias; ids == rows picks a zero
 * row (no bin). */
static col_node *lookup_linear(fold_ctx *c, const char *module, int64_t rows, int64_t out, col_node *ids,
                               bool zero_row)
{
    col_graph *g = c->b->g;
    col_node *w = fold_w(c, 2, (int64_t[]){rows, out}, "%s//weights", module);
    col_node *b = fold_w(c, 1, (int64_t[]){out}, "%s//bias", module);
    if (!w || !b || !ids) return NULL;
    if (zero_row) {
        col_node *parts[2] = {w, col_fill(g, COL_F32, 2, (int64_t[]){1, out}, 0.0f)};
        w = col_concat(g, 2, parts, 0);
    }
    col_node *y = col_embedding(g, w, ids);
    if (!y) return NULL;
    return col_add(g, y, col_expand(g, b, y->t.ndim, y->t.shape));
}

/* One block of a stack (modules.EvoformerIteration, monomer: the outer product
 * mean after the MSA transition). */
static void block(fold_ctx *c, const fold_stack_dims *d, int64_t c_z, col_node **msa, col_node **pair)
{
    col_node *m = *msa, *z = *pair;
    if (m) {
        m = add(c, m, fold_msa_row_attention_with_pair_bias(c, "msa_row_attention_with_pair_bias", m, z, &d->row));
        if (d->global_col)
            m = add(c, m, fold_msa_column_global_attention(c, "msa_column_global_attention", m, &d->col));
        else
            m = add(c, m, fold_msa_column_attention(c, "msa_column_attention", m, &d->col));
        m = add(c, m, fold_transition(c, "msa_transition", m, d->msa_transition_factor));
    }
    if (m) {
        z = add(c, z, fold_outer_product_mean(c, "outer_product_mean", m, c_z, d->opm_channels));
    } else {
        /* no rows (an empty extra MSA): AlphaFold's all-masked rows give output_b / (1e-3 + 0) */
        col_node *b = fold_w(c, 1, (int64_t[]){c_z}, "outer_product_mean//output_b");
        if (b) z = add(c, z, col_expand(c->b->g, col_scale(c->b->g, b, 1.0f / 1e-3f, 0.0f), 3, z->t.shape));
    }
    z = add(c, z, fold_triangle_multiplication(c, "triangle_multiplication_outgoing", z, d->tri_mul_out, true));
    z = add(c, z, fold_triangle_multiplication(c, "triangle_multiplication_incoming", z, d->tri_mul_in, false));
    z = add(c, z, fold_triangle_attention(c, "triangle_attention_starting_node", z, &d->tri_att_start, true));
    z = add(c, z, fold_triangle_attention(c, "triangle_attention_ending_node", z, &d->tri_att_end, false));
    z = add(c, z, fold_transition(c, "pair_transition", z, d->pair_transition_factor));
    *msa = m;
    *pair = z;
}

/* the blocks of a stack; with several processes on their slices (n_res and n_rows: the whole sizes) */
static void run_stack(fold_ctx *c, const char *name, const fold_stack_dims *d, int64_t c_z, int64_t n_res,
                      int64_t n_rows, col_node **msa, col_node **pair)
{
    mb_push(c->b, "%s/", name);
    int saved = c->layer;
    for (int i = 0; i < d->n_blocks; i++) {
        c->layer = i;
        if (c->dap)
            fold_dap_block(c, d, c_z, n_res, n_rows, msa, pair);
        else
            block(c, d, c_z, msa, pair);
    }
    c->layer = saved;
    mb_pop(c->b);
}

void fold_trunk_build(fold_ctx *c, const fold_config *cfg, const fold_sizes *sz, fold_trunk_inputs *in,
                      fold_trunk_outputs *out)
{
    col_graph *g = c->b->g;
    const int64_t N = sz->n_res, S = sz->n_seq, Se = sz->n_extra, c_m = cfg->c_m, c_z = cfg->c_z;
    in->target_feat = col_input(g, "target_feat", COL_F32, 2, (int64_t[]){N, cfg->target_feat});
    in->msa_feat = col_input(g, "msa_feat", COL_F32, 3, (int64_t[]){S, N, cfg->msa_feat});
    in->relpos = col_input(g, "relpos", COL_I32, 2, (int64_t[]){N, N});
    in->prev_pos_bin = col_input(g, "prev_pos_bin", COL_I32, 2, (int64_t[]){N, N});
    in->prev_msa_first_row = col_input(g, "prev_msa_first_row", COL_F32, 2, (int64_t[]){N, c_m});
    in->prev_pair = col_input(g, "prev_pair", COL_F32, 3, (int64_t[]){N, N, c_z});
    in->extra_msa = in->extra_has_deletion = in->extra_deletion_value = NULL;
    if (Se > 0) {
        in->extra_msa = col_input(g, "extra_msa", COL_I32, 2, (int64_t[]){Se, N});
        in->extra_has_deletion = col_input(g, "extra_has_deletion", COL_F32, 2, (int64_t[]){Se, N});
        in->extra_deletion_value = col_input(g, "extra_deletion_value", COL_F32, 2, (int64_t[]){Se, N});
    }
    c->layer = -1;
    out->single = out->pair = out->msa_first_row = NULL;
    /* this process's rows of the MSA, the pair and the extra MSA (all of them for one process) */
    const fold_dap *dap = c->dap;
    const int64_t Sp = fold_dap_part(dap, S), Np = fold_dap_part(dap, N), Sep = fold_dap_part(dap, Se);
    if (dap && (dap->size < 1 || dap->rank < 0 || dap->rank >= dap->size)) {
        mb_fail(c->b, COL_EINVAL, "%s: dynamic axial parallelism: rank %d of %d processes", c->b->prefix, dap->rank,
                dap->size);
        return;
    }
    mb_push(c->b, "evoformer/");

    /* MSA activations: preprocess_1d(target)[None] + preprocess_msa(msa_feat); row 0 += LN(prev first row) */
    col_node *p1d = fold_linear(c, in->target_feat, cfg->target_feat, c_m, true, "preprocess_1d");
    col_node *pmsa = fold_linear(c, fold_dap_local(c, in->msa_feat, 0, S), cfg->msa_feat, c_m, true, "preprocess_msa");
    col_node *msa = col_add(g, col_expand(g, col_reshape(g, p1d, 3, (int64_t[]){1, N, c_m}), 3,
                                          (int64_t[]){Sp, N, c_m}), pmsa);

    /* pair activations: left[:, None] + right[None] + prev_pos_linear(dgram) + LN(prev pair) + relpos */
    col_node *left = fold_linear(c, fold_dap_local(c, in->target_feat, 0, N), cfg->target_feat, c_z, true,
                                 "left_single");
    col_node *right = fold_linear(c, in->target_feat, cfg->target_feat, c_z, true, "right_single");
    col_node *pair = col_add(g, col_expand(g, col_reshape(g, left, 3, (int64_t[]){Np, 1, c_z}), 3, (int64_t[]){Np, N, c_z}),
                             col_expand(g, col_reshape(g, right, 3, (int64_t[]){1, N, c_z}), 3, (int64_t[]){Np, N, c_z}));
    pair = add(c, pair, lookup_linear(c, "prev_pos_linear", cfg->prev_pos_bins, c_z,
                                      fold_dap_local(c, in->prev_pos_bin, 0, N), true));
    if (fold_dap_first(dap, S) == 0) { /* the process holding row 0 */
        col_node *prev_row = fold_layer_norm(c, in->prev_msa_first_row, c_m, "prev_msa_first_row_norm");
        col_node *row0 = col_add(g, col_slice(g, msa, 0, 0, 1), col_reshape(g, prev_row, 3, (int64_t[]){1, N, c_m}));
        if (Sp > 1) {
            col_node *parts[2] = {row0, col_slice(g, msa, 0, 1, Sp - 1)};
            msa = col_concat(g, 2, parts, 0);
        } else {
            msa = row0;
        }
    }
    pair = add(c, pair, fold_layer_norm(c, fold_dap_local(c, in->prev_pair, 0, N), c_z, "prev_pair_norm"));
    pair = add(c, pair, lookup_linear(c, "pair_activiations", cfg->relpos_bins, c_z,
                                      fold_dap_local(c, in->relpos, 0, N), false));

    /* extra MSA: one_hot(extra_msa, 23) ++ has_deletion ++ deletion_value, through extra_msa_activations */
    col_node *extra = NULL;
    if (Se > 0) {
        col_node *w = fold_w(c, 2, (int64_t[]){cfg->extra_feat, cfg->c_e}, "extra_msa_activations//weights");
        col_node *b = fold_w(c, 1, (int64_t[]){cfg->c_e}, "extra_msa_activations//bias");
        if (w && b) {
            const int64_t sh[3] = {Sep, N, cfg->c_e};
            col_node *ids = fold_dap_local(c, in->extra_msa, 0, Se);
            col_node *has_del = fold_dap_local(c, in->extra_has_deletion, 0, Se);
            col_node *del_val = fold_dap_local(c, in->extra_deletion_value, 0, Se);
            col_node *oh = col_embedding(g, col_slice(g, w, 0, 0, 23), ids);
            col_node *hd = col_mul(g, col_expand(g, col_reshape(g, has_del, 3, (int64_t[]){Sep, N, 1}), 3, sh),
                                   col_expand(g, col_reshape(g, col_slice(g, w, 0, 23, 1), 3, (int64_t[]){1, 1, cfg->c_e}), 3, sh));
            col_node *dv = col_mul(g, col_expand(g, col_reshape(g, del_val, 3, (int64_t[]){Sep, N, 1}), 3, sh),
                                   col_expand(g, col_reshape(g, col_slice(g, w, 0, 24, 1), 3, (int64_t[]){1, 1, cfg->c_e}), 3, sh));
            extra = col_add(g, col_add(g, col_add(g, oh, hd), dv), col_expand(g, b, 3, sh));
        }
    }
    /* the inputs this process reads nothing of (another's rows only) are not the caller's to upload */
    if (fold_dap_first(dap, S) != 0) in->prev_msa_first_row = NULL;
    if (fold_dap_real(dap, S) == 0) in->msa_feat = NULL;
    if (fold_dap_real(dap, N) == 0) in->prev_pos_bin = in->prev_pair = in->relpos = NULL;
    if (fold_dap_real(dap, Se) == 0) in->extra_msa = in->extra_has_deletion = in->extra_deletion_value = NULL;
    run_stack(c, "extra_msa_stack", &cfg->extra, c_z, N, Se, &extra, &pair);
    run_stack(c, "evoformer_iteration", &cfg->evo, c_z, N, S, &msa, &pair);

    /* the MSA's first row (rank 0's first; gathered from every rank, the others' cut off) and the whole pair */
    col_node *first = fold_dap_gather(c, col_slice(g, msa, 0, 0, 1), 0, dap ? dap->size : 1);
    if (first && first->t.shape[0] > 1) first = col_slice(g, first, 0, 0, 1);
    out->msa_first_row = col_reshape(g, first, 2, (int64_t[]){N, c_m});
    out->single = fold_linear(c, out->msa_first_row, c_m, cfg->c_s, true, "single_activations");
    out->pair = fold_dap_gather(c, pair, 0, N);
    mb_pop(c->b);
}

void fold_prev_pos_bins(const float *x, int64_t n, int32_t *bins)
{
    /* dgram_from_positions(num_bins=15, min_bin=3.25, max_bin=20.75): lower = linspace(min, max, 15)^2 */
    float lower[15], upper[15];
    for (int k = 0; k < 15; k++) {
        float v = k == 14 ? 20.75f : 3.25f + (float)k * ((20.75f - 3.25f) / 14.0f);
        lower[k] = v * v;
    }
    for (int k = 0; k < 14; k++) upper[k] = lower[k + 1];
    upper[14] = 1e8f;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            float dx = x[i * 3] - x[j * 3], dy = x[i * 3 + 1] - x[j * 3 + 1], dz = x[i * 3 + 2] - x[j * 3 + 2];
            float d2 = dx * dx + dy * dy + dz * dz;
            int32_t b = 15;
            for (int k = 0; k < 15; k++)
                if (d2 > lower[k] && d2 < upper[k]) { b = k; break; }
            bins[i * n + j] = b;
        }
}

void fold_relpos_bins(const int32_t *ri, int64_t n, int64_t max_rel, int32_t *bins)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t o = (int64_t)ri[i] - ri[j] + max_rel;
            bins[i * n + j] = (int32_t)(o < 0 ? 0 : o > 2 * max_rel ? 2 * max_rel : o);
        }
}
