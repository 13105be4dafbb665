/* fold_config.h - an AlphaFold2 model's depth and widths, read from the
 * shapes of its parameter file's arrays.
 *
 * DeepMind's files do not carry a config: every width follows from an
 * array's shape (preprocess_1d//weights is [22, c_m], the stacked Evoformer
 * arrays lead with the number of blocks, ...), so files of any depth or
 * width -- the reduced ones tests use included -- load as they are. The two
 * numbers no array records, the structure module's layer count (8) and the
 * relative-position clip, are AlphaFold's monomer values; the clip is
 * checked against pair_activiations' rows.
 */
#ifndef COL_FOLD_CONFIG_H
#define COL_FOLD_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include "checkpoint.h"
#include "fold_attention.h"
#include "status.h"

/* The full Haiku path every monomer parameter lives under. */
#define FOLD_ROOT "alphafold/alphafold_iteration/"


/* One stack's block (the Evoformer's, or the extra-MSA stack's). */
typedef struct {
    int n_blocks;
    int64_t c_msa;                   /* the MSA activations' channels (c_m or c_e) */
    fold_attn_dims row;              /* msa_row_attention_with_pair_bias */
    fold_attn_dims col;              /* msa_column_attention, or msa_column_global_attention */
    bool global_col;                 /* the extra-MSA stack's column attention is global */
    int64_t msa_transition_factor;
    int64_t opm_channels;            /* outer_product_mean's left/right projection width */
    int64_t tri_mul_out, tri_mul_in; /* intermediate channels of the triangle multiplications */
    fold_attn_dims tri_att_start, tri_att_end;
    int64_t pair_transition_factor;
} fold_stack_dims;

typedef struct {
    int64_t c_m, c_z, c_s, c_e;      /* MSA, pair, single, extra-MSA channels */
    int64_t target_feat, msa_feat;   /* input feature widths (22, 49) */
    int64_t extra_feat;              /* 25: one-hot 23 + has_deletion + deletion_value */
    int64_t relpos_bins;             /* 65: 2 * 32 + 1 */
    int64_t max_relative;            /* 32 */
    int64_t prev_pos_bins;           /* 15 */
    fold_stack_dims evo, extra;
    /* structure module */
    int sm_layers;                   /* 8 (not stored in the file) */
    int64_t ipa_heads, ipa_scalar_qk, ipa_scalar_v, ipa_point_qk, ipa_point_v;
    int64_t sm_transition_layers;    /* 3 */
    int64_t angle_channels, angle_blocks;  /* 128, 2 */
    /* heads */
    int64_t plddt_bins, plddt_channels;    /* 50, 128 */
    int64_t distogram_bins;                /* 64 */
    bool ptm;                              /* has predicted_aligned_error_head */
    int64_t pae_bins;                      /* 64 */
} fold_config;

/* Reads the config from a parameter file. A missing array or one of an
 * unexpected rank gives COL_EFORMAT naming it ("the parameter file has no
 * array ..."); widths that disagree between arrays give COL_ESHAPE. */
col_status fold_config_read(const col_ckpt *c, fold_config *out, col_err *err);

#endif
