/* dm_clip_text.h - the CLIP text encoder of Stable Diffusion (transformers'
 * CLIPTextModel) as a graph.
 *
 * Token and position embeddings, pre-LayerNorm transformer layers with
 * causal multi-head self-attention (q/k/v/out projections with biases) and an
 * MLP fc1 -> activation -> fc2, then final_layer_norm. The graph gives
 * last_hidden_state (what SD 1.x conditions on) and, for clip skip k
 * (diffusers' encode_prompt: hidden_states[-(k+1)] through final_layer_norm),
 * the state after layer L-k with the same final norm. No pooled output, no
 * text projection, no padding mask (Stable Diffusion's pipelines pass none).
 *
 * Weights are named as in the checkpoint: "embeddings.token_embedding.weight",
 * "encoder.layers.3.self_attn.q_proj.bias", "final_layer_norm.weight", ...
 * after the builder's prefix. transformers 4.x files (those of Stable
 * Diffusion repositories) put "text_model." in front, files saved by
 * transformers 5.x do not: dm_clip_text_prefix tells which.
 */
#ifndef COL_DM_CLIP_TEXT_H
#define COL_DM_CLIP_TEXT_H

#include "checkpoint.h"
#include "mb_builder.h"
#include "graph.h"
#include "status.h"

typedef enum {
    DM_CLIP_QUICK_GELU,    /* x * sigmoid(1.702 x): "quick_gelu" (SD 1.x, OpenAI CLIP) */
    DM_CLIP_GELU,          /* erf form: "gelu" (SD 2.x, OpenCLIP) */
    DM_CLIP_GELU_TANH      /* "gelu_new", "gelu_pytorch_tanh" */
} dm_clip_act;

typedef struct {
    int vocab_size;        /* vocab_size (49408) */
    int hidden;            /* hidden_size (512) */
    int intermediate;      /* intermediate_size (2048) */
    int heads;             /* num_attention_heads (8) */
    int layers;            /* num_hidden_layers (12) */
    int max_positions;     /* max_position_embeddings (77) */
    dm_clip_act act;       /* hidden_act (quick_gelu) */
    float ln_eps;          /* layer_norm_eps (1e-5) */
    int projection_dim;    /* projection_dim (512): read, unused here */
} dm_clip_text_config;

/* transformers' CLIPTextConfig defaults. */
dm_clip_text_config dm_clip_text_defaults(void);
/* Reads config.json: path is the file or its folder (text_encoder/). A model
 * type other than clip_text_model, an unknown activation or a value out of
 * range is COL_EFORMAT / COL_EUNSUPPORTED naming the file and key; a missing
 * file COL_EIO. */
col_status dm_clip_text_load_config(const char *path, dm_clip_text_config *c, col_err *err);
col_status dm_clip_text_parse_config(const char *json, size_t len, const char *name, dm_clip_text_config *c,
                                     col_err *err);
/* COL_EINVAL when sizes are not positive or hidden is not a multiple of heads. */
col_status dm_clip_text_check_config(const dm_clip_text_config *c, col_err *err);

/* "text_model." when checkpoint c names its tensors that way, else "". */
const char *dm_clip_text_prefix(const col_ckpt *c);

typedef struct {
    col_node *last_hidden;  /* [B,T,hidden] final_layer_norm(output of the last layer) */
    col_node *skipped;      /* [B,T,hidden] final_layer_norm(output of layer layers-clip_skip); NULL for clip_skip 0 */
} dm_clip_text_out;

/* Builds the encoder on b's graph over ids [B,T] (i32 or i64 token ids,
 * 1 <= T <= max_positions; ids must lie below vocab_size: the embedding
 * kernel checks), creating its weights through b under b's current prefix.
 * clip_skip in 0..layers (0: only last_hidden). Both outputs are built; a
 * plan made for one of them (col_plan_create_for) runs only what it needs.
 * Errors are recorded in b (mb_builder_status) and returned. */
col_status dm_clip_text_build(mb_builder *b, const dm_clip_text_config *c, col_node *ids, int clip_skip,
                              dm_clip_text_out *out);

#endif
