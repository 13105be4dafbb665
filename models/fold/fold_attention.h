/* fold_attention.h - AlphaFold2's attention (modules.Attention) and global
 * attention (modules.GlobalAttention) as graph builders.
 *
 * Weights are read through fold_w (fold_layers.h) under MODULE, a name
 * relative to the builder's prefix, with DeepMind's parameter names and
 * shapes. Widths come from the caller (who reads them from the parameter
 * file's array shapes); key_dim and value_dim are per head, as the arrays
 * hold them (AlphaFold's config gives totals and divides by the heads).
 *
 * Both work on f32 activations with the channel last and return a new node;
 * on a bad shape or width they record the error in the builder (mb_fail)
 * and return NULL, as every builder does once an error is recorded.
 */
#ifndef COL_FOLD_ATTENTION_H
#define COL_FOLD_ATTENTION_H
#include <stdbool.h>
#include <stdint.h>

#include "fold_layers.h"

typedef struct {
    int64_t c_in, heads, key_dim, value_dim, c_out; /* key_dim/value_dim per head */
    bool gating;
} fold_attn_dims;

/* AlphaFold's Attention (modules.Attention) named MODULE (relative to the builder prefix): q_data [B, Q, c_in],
 * m_data [B, K, c_in]; bias NULL or an additive f32 node broadcastable to [B, H, Q, K] (e.g. [1, H, Q, K] from a
 * pair bias, or [B, 1, 1, K] from a mask); returns [B, Q, c_out]. Weights MODULE//query_w [c_in,H,kd], key_w,
 * value_w [c_in,H,vd], gating_w [c_in,H,vd], gating_b [H,vd], output_w [H,vd,c_out], output_b [c_out].
 * q is scaled by key_dim**-0.5 before the logits; the gate is sigmoid(q_data @ gating_w + gating_b). */
col_node *fold_attention(fold_ctx *c, const char *module, const fold_attn_dims *d, col_node *q_data, col_node *m_data,
                         col_node *bias);

/* modules.GlobalAttention: q_data = m_data [B, K, c_in], q_mask-free form (all rows valid), query averaged over K;
 * returns [B, K, c_out]. Weights MODULE//query_w [c_in,H,kd], key_w [c_in,kd], value_w [c_in,vd] (one key and
 * value shared by the heads), gating_w [c_in,H,vd], gating_b [H,vd] when gating, output_w [H,vd,c_out],
 * output_b [c_out]. Without gating every row of a column gets the same output (AlphaFold's [B, 1, c_out],
 * broadcast here). */
col_node *fold_global_attention(fold_ctx *c, const char *module, const fold_attn_dims *d, col_node *m_data);

#endif
