/* fold_msa.h - the MSA side of an Evoformer block (and of the extra-MSA
 * stack's) as graph builders: AlphaFold's MSARowAttentionWithPairBias,
 * MSAColumnAttention, MSAColumnGlobalAttention, Transition and
 * OuterProductMean (alphafold/model/modules.py).
 *
 * Each builder returns the module's output, the residual update: the caller
 * adds it to the activation it came from. Widths come from the caller (read
 * from the parameter file's array shapes). Activations are unpadded and
 * unmasked: every MSA row and residue is real (AlphaFold's masks are then all
 * ones), so no mask enters the graph. Weights are read through fold_w under
 * MODULE (relative to the builder's prefix) with DeepMind's names, e.g.
 * MODULE/query_norm//scale, MODULE/attention//query_w.
 *
 * Chunking (fold_ctx.chunk > 0) cuts a module's work into slices of that
 * many rows along the axis AlphaFold's subbatching uses - MSA rows for the
 * row attention, columns for the column attentions, the leading axis for a
 * transition, output rows i for the outer product mean - each slice its own
 * ops, so a plan's arena frees one slice's intermediates before the next
 * (fold_parts assembles them). The results are those of the unchunked graph
 * up to float rounding.
 *
 * On a bad shape or width a builder records the error in the builder
 * (mb_fail) and returns NULL.
 */
#ifndef COL_FOLD_MSA_H
#define COL_FOLD_MSA_H
#include <stdbool.h>
#include <stdint.h>

#include "fold_attention.h"
#include "fold_layers.h"

/* MSARowAttentionWithPairBias: msa [S, N, c_m], pair [N, N, c_z]; d->c_in = d->c_out = c_m. query_norm on the
 * MSA, the bias feat_2d_norm(pair) @ feat_2d_weights [c_z, H] shared by every row, MODULE/attention over the
 * residues of each row. Chunks: MSA rows. Returns [S, N, c_m]. */
col_node *fold_msa_row_attention_with_pair_bias(fold_ctx *c, const char *module, col_node *msa, col_node *pair,
                                                const fold_attn_dims *d);

/* The two halves of fold_msa_row_attention_with_pair_bias, for a caller that holds a part of the pair
 * (dynamic axial parallelism, fold_dap.h) and gathers the bias in between:
 * fold_msa_row_attention_pair_bias: pair rows [R, N, c_z] (any R >= 1) -> feat_2d_norm(pair) @ feat_2d_weights
 *   [R, N, heads], the bias of those rows of the pair;
 * fold_msa_row_attention_with_bias: msa [S, N, c_m] and the whole bias [N, N, heads] -> [S, N, c_m] (chunks:
 *   MSA rows). */
col_node *fold_msa_row_attention_pair_bias(fold_ctx *c, const char *module, col_node *pair, int64_t heads);
col_node *fold_msa_row_attention_with_bias(fold_ctx *c, const char *module, col_node *msa, col_node *bias,
                                           const fold_attn_dims *d);

/* MSAColumnAttention: msa [S, N, c_m]; query_norm, then MODULE/attention over the rows of each column.
 * Chunks: columns. Returns [S, N, c_m]. */
col_node *fold_msa_column_attention(fold_ctx *c, const char *module, col_node *msa, const fold_attn_dims *d);

/* MSAColumnGlobalAttention (the extra-MSA stack): msa [S, N, c_e]; query_norm, then MODULE/attention as
 * fold_global_attention over the rows of each column. Chunks: columns. Returns [S, N, c_e]. */
col_node *fold_msa_column_global_attention(fold_ctx *c, const char *module, col_node *msa, const fold_attn_dims *d);

/* Transition: act [..., ch] (2 or more dims); input_layer_norm, transition1 [ch, factor*ch] and relu,
 * transition2 [factor*ch, ch]. The MSA transition and the pair transition. Chunks: the leading axis.
 * Returns act's shape. */
col_node *fold_transition(fold_ctx *c, const char *module, col_node *act, int64_t factor);

/* OuterProductMean: msa [S, N, c_m] -> [N, N, c_z]: layer_norm_input, left_projection and right_projection
 * [c_m, oc], out[i,j] = (sum_s left[s,i] (x) right[s,j] . output_w [oc, oc, c_z] + output_b) / (1e-3 + S), as
 * AlphaFold's norm with an all-ones mask. S may be 0 (an extra MSA without rows): the result is then
 * output_b / 1e-3 everywhere, what AlphaFold computes for rows that are all masked, built from output_b alone
 * (the MSA node's data is never read). Chunks: output rows i. */
col_node *fold_outer_product_mean(fold_ctx *c, const char *module, col_node *msa, int64_t c_z,
                                  int64_t num_outer_channel);

/* The two halves of fold_outer_product_mean (S >= 1), for a caller that holds some residues' columns of the
 * MSA (fold_dap.h) and gathers the right projection in between:
 * fold_outer_product_mean_projections: msa [S, N, c_m] -> *left, *right [S, N, oc] (layer_norm_input, then
 *   left_projection and right_projection); false (both NULL) after an error;
 * fold_outer_product_mean_combine: left [S, R, oc] of R residues i, right [S, N, oc] of every residue j ->
 *   [R, N, c_z], the output rows of those residues (chunks: rows i). */
bool fold_outer_product_mean_projections(fold_ctx *c, const char *module, col_node *msa, int64_t num_outer_channel,
                                         col_node **left, col_node **right);
col_node *fold_outer_product_mean_combine(fold_ctx *c, const char *module, col_node *left, col_node *right,
                                          int64_t c_z);

/* Chunk results assembled in order along one axis by col_concat, at most COL_MAX_SRC sources a node, in a
 * tree built as the parts come (each part joins its first concat as soon as COL_MAX_SRC have come). */
enum { FOLD_PARTS_LEVELS = 12 };
typedef struct {
    int axis;
    bool failed;
    int n[FOLD_PARTS_LEVELS];
    col_node *level[FOLD_PARTS_LEVELS][COL_MAX_SRC];
} fold_parts;

void fold_parts_init(fold_parts *p, int axis);
/* Appends part x (NULL: an error the builder holds already). */
void fold_parts_add(fold_ctx *c, fold_parts *p, col_node *x);
/* All the parts as one contiguous node (NULL after an error). */
col_node *fold_parts_result(fold_ctx *c, fold_parts *p);

#endif
