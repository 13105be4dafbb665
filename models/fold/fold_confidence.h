/* fold_confidence.h - AlphaFold2's confidence metrics from the heads' logits,
 * on the host, as alphafold/common/confidence.py computes them: pLDDT
 * (compute_plddt), the predicted aligned error and its largest possible value
 * (compute_predicted_aligned_error) and pTM (predicted_tm_score). Softmaxes
 * and sums are taken in double; results are stored as the caller asks.
 *
 * Logits are row-major float32 as the heads give them (fold_heads.h). Every
 * function checks its sizes and that the logits are finite (COL_EINVAL with a
 * message naming the metric). */
#ifndef COL_FOLD_CONFIDENCE_H
#define COL_FOLD_CONFIDENCE_H
#include <stdint.h>
#include "status.h"

/* jnp.linspace(first, last, num_bins - 1): the num_bins - 1 bin edges of a
 * head with num_bins bins (num_bins >= 3), into breaks. */
void fold_breaks(double first, double last, int num_bins, double *breaks);

/* compute_plddt: logits [n_res, num_bins] -> plddt [n_res], the expected bin
 * centre ((k + 0.5) / num_bins) under softmax(logits), times 100. */
col_status fold_plddt(const float *logits, int64_t n_res, int num_bins, float *plddt, col_err *err);

/* compute_predicted_aligned_error: logits [n_res, n_res, num_bins] of the
 * aligned-error head with breaks linspace(0, max_error_bin, num_bins - 1) ->
 * pae [n_res, n_res], the expected error over the bin centres (each break plus
 * half a step, and a last bin one step beyond), and *max_pae the last centre
 * (31.75 for AlphaFold's 64 bins up to 31). pae or max_pae may be NULL. */
col_status fold_pae(const float *logits, int64_t n_res, int num_bins, double max_error_bin, float *pae,
                    double *max_pae, col_err *err);

/* predicted_tm_score for a monomer (no chains): d0 = 1.24 (max(sum w, 19) -
 * 15)^(1/3) - 1.8, every pair's expected 1 / (1 + (centre / d0)^2), averaged
 * over the aligned residues j with weights w_i w_j / (1e-8 + sum_j w_i w_j),
 * times w_i, and the largest over the alignments i. residue_weights [n_res]
 * in [0, 1], or NULL for all ones (what AlphaFold's pTM uses for a monomer:
 * its mask). */
col_status fold_ptm(const float *logits, int64_t n_res, int num_bins, double max_error_bin,
                    const float *residue_weights, double *ptm, col_err *err);

#endif
