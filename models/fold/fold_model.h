/* fold_model.h - an AlphaFold2 monomer model (no templates) from DeepMind's
 * parameter file, predicting structures from features.
 *
 * The model's weights live in a memtier store (models/common/mb_store.h):
 * on the host within its budget, and run through a compute tier of a given
 * size (required on a GPU), so a GPU holds only the blocks it is running.
 * Each recycling pass runs one plan: the trunk (embedders, extra-MSA stack,
 * Evoformer), the structure module and the heads. Between passes the host
 * turns the backbone frames and torsion angles into atoms and the recycled
 * pseudo-beta distances, as AlphaFold's inference loop does.
 */
#ifndef COL_FOLD_MODEL_H
#define COL_FOLD_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "fold_config.h"
#include "fold_layers.h"
#include "mb_store.h"
#include "status.h"

typedef struct fold_model fold_model;

/* Opens a parameter file (params_model_N(_ptm).npz, or any file col_ckpt_open
 * reads with DeepMind's names) on backend be, weights kept as sc says. */
col_status fold_model_open(const char *params, const col_backend *be, const mb_store_config *sc, fold_model **out,
                           col_err *err);
void fold_model_free(fold_model *m);
const fold_config *fold_model_config(const fold_model *m);
/* The store its weights live in (for memory statistics). */
mb_store *fold_model_store(fold_model *m);

/* Runs every later pass with FastFold's dynamic axial parallelism over dap's
 * processes (fold_dap.h: each computes its share of the MSA and pair and
 * they exchange slices; every process ends with the whole result), or alone
 * (NULL, the default). dap must outlive the model's runs; every process of
 * the group makes the same calls with the same inputs. */
void fold_model_set_dap(fold_model *m, const fold_dap *dap);

/* The features of one sequence (fold_features.h makes them), unpadded. */
typedef struct {
    int64_t n_res, n_seq, n_extra;      /* n_seq >= 1; n_extra may be 0 */
    const int32_t *aatype;              /* [N], restype order, X = 20 */
    const int32_t *residue_index;       /* [N] */
    const float *target_feat;           /* [N, 22] */
    const float *msa_feat;              /* [S, N, 49] */
    const int32_t *extra_msa;           /* [Se, N] ids 0..22 */
    const float *extra_has_deletion;    /* [Se, N] */
    const float *extra_deletion_value;  /* [Se, N] */
} fold_inputs;

/* Called after each pass (pass 0 .. passes-1) with its seconds; a status other than COL_OK stops the run with it. */
typedef col_status (*fold_progress_fn)(void *user, int pass, int passes, double seconds, col_err *err);

typedef struct {
    int recycles;                /* AlphaFold's num_recycle: passes after the first (default 3) */
    int64_t chunk;               /* rows per chunk in the row-wise modules; 0 = unchunked */
    fold_progress_fn progress;
    void *progress_user;
} fold_run_config;

typedef struct {
    int64_t n_res;
    float *atom37;               /* [N, 37, 3] Angstrom (zeros where the mask is 0) */
    float *atom37_mask;          /* [N, 37] */
    float *plddt;                /* [N], 0..100 */
    double mean_plddt;
    float *pae;                  /* [N, N] Angstrom, NULL without a pTM head */
    double max_pae, ptm;         /* ptm < 0 without a pTM head */
    /* the last pass's representations, for tests and recycling */
    float *single;               /* [N, c_s] */
    float *pair;                 /* [N, N, c_z] */
    float *msa_first_row;        /* [N, c_m] */
    float *sm_single;            /* [N, c_s], the structure module's output activation */
    double seconds_build, seconds_run;   /* graph build + plan, all passes */
    size_t arena_bytes;          /* the plan's activation arena (+ scratch) */
} fold_result;

col_status fold_model_predict(fold_model *m, const fold_inputs *in, const fold_run_config *rc, fold_result *out,
                              col_err *err);
void fold_result_free(fold_result *r);

/* The activation arena a pass would need at this size and chunk, without running it. */
col_status fold_model_arena_bytes(fold_model *m, int64_t n_res, int64_t n_seq, int64_t n_extra, int64_t chunk,
                                  size_t *bytes, col_err *err);

/* The largest chunk (a power of two, at most n_res) whose arena fits within budget bytes, or 1
 * when none does (COL_ENOMEM then, with the smallest arena in the message). budget 0: unchunked (0). */
col_status fold_model_auto_chunk(fold_model *m, int64_t n_res, int64_t n_seq, int64_t n_extra, size_t budget,
                                 int64_t *chunk, col_err *err);

#endif
