/* lm_layers.h - what the model families (gpt.c, opt.c, llama.c) build
 * from: parameter specs, dropout, activations, projections with their LoRA
 * path, positions, and attention through the optional key/value cache.
 * These call only the engine's graph builders, never a family or lm.c. */
#ifndef COL_MODELS_LM_LAYERS_H
#define COL_MODELS_LM_LAYERS_H

#include "lm.h"
#include "lm_par.h"

/* A parameter spec: name, shape [d0] (d1 = 0) or [d0, d1]; matrices get weight decay. */
void col_spec_set(col_param_spec *s, const char *name, int64_t d0, int64_t d1, col_init_kind init);
/* The head's spec at s[k] when the model has one of its own (col_lm_own_head): lm_head.weight [vocab, in], or
 * a value model's score.weight [1, in] (transformers' *ForSequenceClassification names it so in every family). */
void col_lm_head_spec(const col_lm_config *c, col_param_spec *s, int k, int64_t in);
/* A family's parameter list as it is written, layer by layer: col_spec_layer
 * names the layer ("model.layers.3."), then each weight and its bias are
 * added in order under it. */
typedef struct {
    col_param_spec *s;
    int k;              /* specs written so far */
    char prefix[64];    /* the current layer's name prefix */
} col_spec_list;
void col_spec_layer(col_spec_list *L, const char *fmt, int layer);
/* prefix+name.weight [d0, d1] with init and role (lm_par.h), then prefix+name.bias [bias] (zeros) when bias > 0,
 * whose role is FIRST_BIAS or SECOND_BIAS for a FIRST or SECOND weight (the weight's otherwise) */
void col_spec_weight(col_spec_list *L, const char *name, int64_t d0, int64_t d1, col_init_kind init, int64_t bias,
                     col_param_role role);
/* a spec's role and groups (col_spec_set makes REPLICATED, 1 group) */
void col_spec_role(col_param_spec *s, col_param_role role, int groups);
/* a norm's weight [C] (ones), and its bias [C] (zeros) when with_bias */
void col_spec_norm(col_spec_list *L, const char *name, int64_t C, bool with_bias);
/* Mixed precision: a graph's weights are leaves of its compute dtype (f32, or bf16/f16), and activations,
 * norms, softmax and losses stay f32. x as an operand of a matmul with weight w: cast to w's dtype, as
 * autocast does (x itself when the dtypes match: nothing is added to an f32 graph, and an input cast once
 * serves every projection of it) */
col_node *col_lm_operand(col_graph *g, col_node *x, const col_node *w);
/* a weight used outside a matmul (a norm's weight, a bias): as f32 */
col_node *col_lm_f32(col_graph *g, col_node *w);
/* x, with dropout when the graph is for training and the config has some */
col_node *col_lm_dropout(col_graph *g, col_node *x, const col_lm_config *c, const col_lm_build_opts *o);
/* the activation act of x */
col_node *col_lm_activation(col_graph *g, col_node *x, col_act act);
/* causal self-attention core: q [B,Hq,T,D], k/v [B,Hkv,T,D] -> [B,T,Hq*D],
 * through the KV cache when the graph has one (layer index l) */
col_node *col_lm_attend(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, int l, col_node *q, col_node *k,
                        col_node *v, float scale);
/* y = the base projection of x by the weight at w (a pointer into out->params), plus
 * the LoRA path when that weight is adapted (two small matmuls, never B@A) */
col_node *col_lm_lora(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *y,
                      col_node *const *w);
/* col_linear (weight [out, in]) with the LoRA path; with tensor parallelism (o->par) the mode's product of a
 * weight of role r (COL_ROLE_FIRST or COL_ROLE_SECOND) instead */
col_node *col_lm_linear(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *const *w,
                        col_node *b, col_param_role r);
/* the same for GPT-2's Conv1D weights [in, out]: x @ w + b */
col_node *col_lm_conv1d(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, col_node *x, col_node *const *w,
                        col_node *b, col_param_role r);
/* the heads of h (of H) this rank computes: H, or the tensor-parallel share */
int64_t col_lm_heads(const col_lm_build_opts *o, int64_t H);
/* LayerNorm (rms false, bias b) or RMSNorm of x over the hidden size, weights as f32 (the mode's under o->par) */
col_node *col_lm_norm(col_graph *g, const col_lm_build_opts *o, col_node *x, col_node *w, col_node *b, float eps,
                      bool rms);
/* the token embedding of ids, and learned positions pos (the mode's under o->par) */
col_node *col_lm_embed(col_graph *g, const col_lm_build_opts *o, col_node *w, col_node *ids);
col_node *col_lm_pos_embed(col_graph *g, const col_lm_build_opts *o, col_node *w, col_node *pos);
/* The head: x [B, T, in] (after the final norm) times head [out, in]^T -> [B*T, out]. Under o->par the
 * family's forward ends at x instead (lm.c builds the mode's loss or logits from it): returns x. */
col_node *col_lm_head(col_graph *g, const col_lm_build_opts *o, col_node *x, col_node *head);
/* positions 0..seq-1 (or start..start+seq-1 with a cache; from the sequence-parallel rank's first position under
 * o->par), plus offset, as an i32 [seq] node */
col_node *col_lm_positions(col_graph *g, const col_lm_build_opts *o, col_lm_graph *out, int64_t offset);

#endif
