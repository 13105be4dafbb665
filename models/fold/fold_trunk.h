/* fold_trunk.h - AlphaFold2's trunk as one graph: the input and recycling
 * embedders, the extra-MSA stack and the Evoformer (modules.py,
 * EmbeddingsAndEvoformer), for one recycling iteration.
 *
 * The features arrive unpadded (every residue and MSA row real; AlphaFold's
 * masks are then all ones) and in compact form: the relative-position and
 * recycled-distance one-hots as bin ids (their linear layers become row
 * lookups, exact), the extra MSA as residue ids plus its two deletion
 * features. fold_features.h computes them.
 */
#ifndef COL_FOLD_TRUNK_H
#define COL_FOLD_TRUNK_H
#include <stdint.h>
#include "fold_config.h"
#include "fold_layers.h"

typedef struct {
    int64_t n_res, n_seq, n_extra;   /* n_seq >= 1 (the query row first); n_extra may be 0 */
} fold_sizes;

/* The input leaves the trunk creates (the caller uploads them before each
 * run, those that are not NULL). With several processes (fold_dap.h) a
 * process's trunk reads nothing of some (e.g. prev_msa_first_row off the
 * process holding the MSA's first row): those are NULL there. */
typedef struct {
    col_node *target_feat;          /* f32 [N, 22] */
    col_node *msa_feat;             /* f32 [S, N, 49] */
    col_node *extra_msa;            /* i32 [Se, N], ids 0..22 (NULL when Se = 0) */
    col_node *extra_has_deletion;   /* f32 [Se, N] */
    col_node *extra_deletion_value; /* f32 [Se, N] */
    col_node *relpos;               /* i32 [N, N]: clip(i - j + max_relative, 0, 2 max_relative) */
    col_node *prev_pos_bin;         /* i32 [N, N]: the recycled pseudo-beta distance bin 0..14, 15 = none */
    col_node *prev_msa_first_row;   /* f32 [N, c_m] */
    col_node *prev_pair;            /* f32 [N, N, c_z] */
} fold_trunk_inputs;

typedef struct {
    col_node *single;               /* [N, c_s] */
    col_node *pair;                 /* [N, N, c_z] */
    col_node *msa_first_row;        /* [N, c_m] */
} fold_trunk_outputs;

/* Builds the trunk on c->b (whose prefix must be FOLD_ROOT "evoformer/"'s
 * parent, i.e. FOLD_ROOT itself). c->chunk is the chunk size of the
 * row-wise modules. With c->dap (fold_dap.h) the trunk is this process's
 * part of a trunk over several (every process builds it with the same
 * sizes, widths and chunking, and uploads the same whole inputs): the
 * activations are split between the processes and the outputs, whole, are
 * the same on every process. The first error is the builder's
 * (mb_builder_status). */
void fold_trunk_build(fold_ctx *c, const fold_config *cfg, const fold_sizes *sz, fold_trunk_inputs *in,
                      fold_trunk_outputs *out);

/* The recycled distance bins of pseudo-beta positions [N, 3] (dgram_from_positions with 15 bins
 * from 3.25 to 20.75 Angstrom): bins[i*N + j] in 0..14, or 15 when no bin holds the distance. */
void fold_prev_pos_bins(const float *pseudo_beta, int64_t n, int32_t *bins);

/* Relative-position bin ids: clip(res_index[i] - res_index[j] + max_rel, 0, 2 max_rel). */
void fold_relpos_bins(const int32_t *residue_index, int64_t n, int64_t max_rel, int32_t *bins);

#endif
