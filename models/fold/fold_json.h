/* fold_json.h - AlphaFold2's confidence files as JSON, byte for byte what
 * the Python writers give (numbers as json.dumps writes Python floats: the
 * shortest repr, NaN and Infinity as it spells them), appended to a growing
 * text buffer the caller owns (col_strbuf, textio.h) and writes out
 * atomically. Arrays are row-major float32 as fold_confidence.h fills them.
 *
 * AlphaFold (DeepMind's run_alphafold.py, alphafold/common/confidence.py of
 * v2.3.2; alphafold-colabfold does not carry these two):
 *   pae_<model>.json          [{"predicted_aligned_error":[[...],...],"max_predicted_aligned_error":31.75}]
 *                             errors rounded to 1 decimal as np.round(x, 1) does (x * 10, rint, / 10)
 *   confidence_<model>.json   {"residueNumber":[1,...],"confidenceScore":[...],"confidenceCategory":["H",...]}
 *                             scores rounded to 2 decimals as Python's round(x, 2) does; categories
 *                             D (< 50), L (< 70), M (< 90), H (<= 100)
 * ColabFold (colabfold/batch.py, json.dump with its default separators):
 *   <name>_scores_<tag>.json  {"plddt": [...], "max_pae": M, "pae": [[...], ...], "ptm": P}
 *                             pLDDT, PAE and pTM rounded with np.around(x, 2), max_pae the largest
 *                             PAE unrounded; without a PAE (a model with no pTM head) just "plddt". */
#ifndef COL_FOLD_JSON_H
#define COL_FOLD_JSON_H
#include <stdint.h>
#include "status.h"
#include "textio.h"

/* pae [n_res, n_res]; max_pae: fold_pae's maximum (the last bin centre). */
col_status fold_json_pae(const float *pae, int64_t n_res, double max_pae, col_strbuf *out, col_err *err);

/* plddt [n_res], each in [0, 100] (else COL_EINVAL naming the residue, as confidence.py refuses it). */
col_status fold_json_confidence(const float *plddt, int64_t n_res, col_strbuf *out, col_err *err);

/* plddt [n_res]; pae [n_res, n_res] and ptm, or pae NULL (ptm unused). */
col_status fold_json_scores(const float *plddt, const float *pae, int64_t n_res, double ptm, col_strbuf *out,
                            col_err *err);

#endif
