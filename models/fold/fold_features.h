/* fold_features.h - the input features of AlphaFold2's model, as DeepMind's
 * data pipeline makes them for model_3(_ptm) in evaluation
 * (alphafold.model.features.np_example_to_features with
 * alphafold/model/tf/input_pipeline.py and data_transforms.py), made
 * deterministic and unpadded:
 *
 * - the MSA keeps file order: sample_msa's and crop_extra_msa's random
 *   shuffles are the identity, so the first max_msa_clusters rows are the
 *   cluster centres ("msa") and the next max_extra_msa rows the extra MSA;
 * - masked-MSA replacement is off (make_masked_msa with replace_fraction 0
 *   changes nothing), as is randomly_replace_msa_with_unknown;
 * - nothing is padded: make_fixed_size would pad the cluster rows to
 *   max_msa_clusters and the extra rows to max_extra_msa with masked rows;
 *   here n_clust = min(max_msa_clusters, rows) and n_extra =
 *   min(max_extra_msa, rows - n_clust), possibly 0, and the model runs on
 *   those rows alone (every mask is one).
 *
 * As in the pipeline, every row past the cluster centres (not only the first
 * max_extra_msa) is assigned to its nearest centre and counts in the cluster
 * profile and deletion mean (nearest_neighbor_clusters and
 * summarize_clusters run before crop_extra_msa). */
#ifndef COL_FOLD_FEATURES_H
#define COL_FOLD_FEATURES_H

#include <stdint.h>

#include "fold_input.h"

#define FOLD_MSA_FEAT 49     /* msa_feat channels: one-hot 23, has_deletion, deletion_value, profile 23, deletion_mean */
#define FOLD_TARGET_FEAT 22  /* target_feat channels: has_break, one-hot 21 of aatype */

typedef struct {
    int64_t max_msa_clusters;   /* data.eval.max_msa_clusters: 512 */
    int64_t max_extra_msa;      /* data.common.max_extra_msa: 5120 for models 1, 3, 4 (1024 for 2 and 5) */
} fold_feature_config;

/* model_3(_ptm)'s: 512 and 5120. */
void fold_feature_config_default(fold_feature_config *c);

typedef struct {
    int64_t n_res, n_clust, n_extra;
    int32_t *aatype;                /* [n_res] restype ids, X = 20 */
    int32_t *residue_index;         /* [n_res] */
    float *target_feat;             /* [n_res][22] */
    float *msa_feat;                /* [n_clust][n_res][49] */
    int32_t *extra_msa;             /* [n_extra][n_res] ids, gap = 21 */
    float *extra_has_deletion;      /* [n_extra][n_res] */
    float *extra_deletion_value;    /* [n_extra][n_res] */
} fold_features;

/* The features of seq with its alignment msa (row 0 must be seq; NULL: the
 * sequence alone, as fold_msa_single). On failure out is left empty. */
col_status fold_features_make(const fold_sequence *seq, const fold_msa *msa, const fold_feature_config *cfg,
                              fold_features *out, col_err *err);
void fold_features_free(fold_features *f);

#endif
