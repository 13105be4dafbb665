/* fold_pair.h - the pair side of AlphaFold2's Evoformer block as graph
 * builders: the triangle multiplications and the triangle attentions
 * (modules.TriangleMultiplication, modules.TriangleAttention; Jumper et al.
 * 2021, Suppl. Alg. 11-14). The pair transition is fold_transition.
 *
 * Each builder reads its weights under MODULE (relative to c->b->prefix,
 * e.g. "triangle_multiplication_outgoing" inside an Evoformer or extra-MSA
 * block) with DeepMind's Haiku names, takes the pair activations
 * [N, N, c_z] (c_z read from the shape) and returns the module's update
 * [N, N, c_z], without the residual: the caller adds it. Every residue is
 * real (no masks, no padding). Builders record the first error in c->b and
 * return NULL from then on.
 *
 * Chunking (c->chunk > 0), on the axis AlphaFold's subbatching uses: the
 * triangle multiplication computes its projections whole and its outputs
 * c->chunk rows i at a time (the contraction, center layer norm, output
 * projection and gate of a slice are ops of their own); the triangle
 * attention attends c->chunk rows at a time (columns for the ending node),
 * so only that many rows' [H, N, N] logits live at once. The slices are
 * joined by col_concat. Results equal the unchunked ones up to float32
 * rounding.
 */
#ifndef COL_FOLD_PAIR_H
#define COL_FOLD_PAIR_H
#include <stdbool.h>
#include <stdint.h>

#include "fold_attention.h"
#include "fold_layers.h"

/* TriangleMultiplication with unfused projection weights (AF2's
 * "outgoing" equation 'ikc,jkc->ijc' when outgoing, else the "incoming"
 * 'kjc,kic->ijc'), intermediate channels `intermediate` (num_intermediate_channel):
 *   MODULE/layer_norm_input, MODULE/left_projection, MODULE/right_projection,
 *   MODULE/left_gate, MODULE/right_gate, MODULE/center_layer_norm,
 *   MODULE/output_projection, MODULE/gating_linear.
 * pair [N, N, c_z] -> update [N, N, c_z]. */
col_node *fold_triangle_multiplication(fold_ctx *c, const char *module, col_node *pair, int64_t intermediate,
                                       bool outgoing);

/* TriangleAttention around the starting node (per_row) when starting, else
 * around the ending node (per_column: attention along the first axis):
 *   MODULE/query_norm, MODULE//feat_2d_weights [c_z, heads] (the pair bias
 *   shared by every row), MODULE/attention (fold_attention with d; d->c_in
 *   and d->c_out must be the pair's c_z).
 * pair [N, N, c_z] -> update [N, N, c_z]; for the ending node the update is
 * a transposed view of the attention's output (not contiguous). */
col_node *fold_triangle_attention(fold_ctx *c, const char *module, col_node *pair, const fold_attn_dims *d,
                                  bool starting);

/* The parts the two builders above are made of, for a caller that holds a slice of the pair, rows or columns
 * (dynamic axial parallelism, fold_dap.h), and gathers what a part needs of the others in between. The
 * builders above are these parts applied to the whole pair.
 *
 * fold_triangle_multiplication_projections: pair [R, C, c_z] -> *act = layer_norm_input(pair) [R, C, c_z] and
 *   the gated projections channel first, *left and *right [ci, R, C] (left[c, a, b] = left_proj_act[a, b, c]);
 *   false (all NULL) after an error.
 * fold_triangle_multiplication_combine: out[r, c'] = sigmoid(gating_linear(act[r, c'])) *
 *   output_projection(center_layer_norm(sum_k a[:, r, k] b[:, k, c'])), a [ci, R, K], b [ci, K, C],
 *   act [R, C, c_z] -> [R, C, c_z]; chunks: rows r. */
bool fold_triangle_multiplication_projections(fold_ctx *c, const char *module, col_node *pair, int64_t intermediate,
                                              col_node **act, col_node **left, col_node **right);
col_node *fold_triangle_multiplication_combine(fold_ctx *c, const char *module, col_node *a, col_node *b,
                                               col_node *act);

/* fold_triangle_attention_bias: x = query_norm(pair) [R, C, c_z] -> x @ MODULE//feat_2d_weights head first,
 *   [heads, R, C].
 * fold_triangle_attention_rows: MODULE/attention over each of the B rows of q [B, N, c_z] (a view is fine: each
 *   chunk of rows is made contiguous), with bias [1, heads, N, N] -> [B, N, c_z]; chunks: rows. */
col_node *fold_triangle_attention_bias(fold_ctx *c, const char *module, col_node *x, int64_t heads);
col_node *fold_triangle_attention_rows(fold_ctx *c, const char *module, const fold_attn_dims *d, col_node *q,
                                       col_node *bias);

#endif
