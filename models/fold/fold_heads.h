/* fold_heads.h - AlphaFold2's prediction heads on the graph, as DeepMind's
 * alphafold/model/modules.py builds them (PredictedLDDTHead,
 * PredictedAlignedErrorHead, DistogramHead), with their parameters under
 * DeepMind's names relative to the builder's prefix (in a parameter file:
 * "alphafold/alphafold_iteration/" + these), e.g.
 *   predicted_lddt_head/input_layer_norm//scale, predicted_lddt_head/act_0//weights,
 *   predicted_aligned_error_head/logits//weights, distogram_head/half_logits//bias.
 *
 * Each returns the logits node (NULL after an error, which the builder
 * records, like every builder of fold_layers.h). The bins' edges are not on
 * the graph: fold_confidence.h has them (fold_breaks) and the confidence
 * metrics computed from these logits on the host. */
#ifndef COL_FOLD_HEADS_H
#define COL_FOLD_HEADS_H
#include <stdint.h>
#include "fold_layers.h"

/* The heads' sizes in DeepMind's config (model_config: model.heads). */
#define FOLD_PLDDT_CHANNELS 128        /* predicted_lddt.num_channels */
#define FOLD_PLDDT_BINS 50             /* predicted_lddt.num_bins */
#define FOLD_PAE_BINS 64               /* predicted_aligned_error.num_bins */
#define FOLD_PAE_MAX_ERROR_BIN 31.0    /* predicted_aligned_error.max_error_bin */
#define FOLD_DISTOGRAM_BINS 64         /* distogram.num_bins */
#define FOLD_DISTOGRAM_FIRST_BREAK 2.3125
#define FOLD_DISTOGRAM_LAST_BREAK 21.6875

/* PredictedLDDTHead ("predicted_lddt_head"): single [N, c_s], the structure
 * module's single activation (representations['structure_module']) ->
 * input_layer_norm, act_0 (c_s -> channels) relu, act_1 (channels ->
 * channels) relu, logits (channels -> num_bins): [N, num_bins]. */
col_node *fold_plddt_head(fold_ctx *c, col_node *single, int64_t c_s, int64_t channels, int64_t num_bins);

/* PredictedAlignedErrorHead ("predicted_aligned_error_head", pTM models):
 * pair [N, N, c_z] -> logits (c_z -> num_bins): [N, N, num_bins]. Its breaks
 * are linspace(0, max_error_bin, num_bins - 1). */
col_node *fold_pae_head(fold_ctx *c, col_node *pair, int64_t c_z, int64_t num_bins);

/* DistogramHead ("distogram_head"): pair [N, N, c_z] -> half_logits
 * (c_z -> num_bins) h, then h + h with its two residue axes swapped (the
 * logits are symmetric): [N, N, num_bins]. Bin edges
 * linspace(first_break, last_break, num_bins - 1). */
col_node *fold_distogram_head(fold_ctx *c, col_node *pair, int64_t c_z, int64_t num_bins);

#endif
