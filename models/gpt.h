/* gpt.h - the GPT-2 architecture as a libcore graph.
 *
 * Pre-LayerNorm transformer blocks (ln_1 -> causal self-attention -> residual,
 * ln_2 -> MLP with GELU (tanh form, GPT-2's "gelu_new") -> residual), learned
 * position embeddings, final LayerNorm, tied input/output embeddings.
 * Parameter names and shapes are Hugging Face's GPT2LMHeadModel names, whose
 * Conv1D weights are stored [in, out], so checkpoints map without transposes.
 */
#ifndef COL_MODELS_GPT_H
#define COL_MODELS_GPT_H

#include <stdbool.h>

#include "graph.h"

typedef struct {
    int vocab_size;
    int n_positions;     /* longest sequence */
    int n_embd;
    int n_layer;
    int n_head;
    float layer_norm_eps; /* 1e-5 */
    float dropout;        /* embd/attn-out/resid dropout while training */
} col_gpt_config;

typedef struct {
    char name[64];
    int ndim;
    int64_t shape[2];
    bool decay;          /* weight decay applies (matrices), not biases/norms */
    enum { COL_INIT_NORMAL, COL_INIT_RESID, COL_INIT_ZERO, COL_INIT_ONE } init;
} col_param_spec;

/* Validates the config; the message says which field is wrong. */
col_status col_gpt_check_config(const col_gpt_config *c, col_err *err);
/* Number of parameter tensors, and their specs in first-use order. */
int col_gpt_param_count(const col_gpt_config *c);
void col_gpt_param_specs(const col_gpt_config *c, col_param_spec *specs);
/* GPT-2's initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2*n_layer)),
 * biases 0, LayerNorm weights 1. Draws depend only on (seed, tensor index, element). */
void col_gpt_init_param(const col_param_spec *s, int index, float *data, uint64_t seed, int n_layer);

typedef struct {
    col_node *ids;       /* input [B, T] i32 */
    col_node *targets;   /* input [B, T] i32, or NULL when built without a loss */
    col_node *logits;    /* [B, T, V] */
    col_node *loss;      /* scalar mean cross-entropy (ignore_index -1), or NULL */
    col_node **params;   /* col_gpt_param_count() nodes, in spec order */
} col_gpt_graph;

typedef struct {
    int batch, seq;
    bool with_loss;      /* add targets and the loss */
    bool training;       /* dropout on (when config.dropout > 0) */
    bool checkpoint;     /* recompute each block's activations in backward */
    uint64_t dropout_seed;
} col_gpt_build_opts;

/* Builds the forward graph. out->params must point at an array of
 * col_gpt_param_count() entries; they are created as parameters. */
col_status col_gpt_build(col_graph *g, const col_gpt_config *c, const col_gpt_build_opts *o, col_gpt_graph *out,
                         col_err *err);

#endif
