/* lm.h - causal language models (GPT-2, OPT, LLaMA 1/2/3) as libcore graphs.
 *
 * A model family is a parameter list with Hugging Face names and shapes (so
 * checkpoints map by name, without transposes) and a function that builds
 * the forward graph: one entry of the family table (lm_family.h), which
 * col_lm_build and the functions below dispatch through. The training
 * session (lm_trainer.h) owns the memory.
 */
#ifndef COL_MODELS_LM_H
#define COL_MODELS_LM_H

#include <stdbool.h>

#include "graph.h"
#include "ops.h"

typedef enum { COL_ARCH_GPT2, COL_ARCH_OPT, COL_ARCH_LLAMA } col_arch;
typedef enum { COL_ACT_GELU_TANH, COL_ACT_GELU, COL_ACT_RELU, COL_ACT_SILU } col_act;

typedef struct {
    col_arch arch;
    int vocab_size;
    int max_positions;      /* GPT-2 n_positions, OPT/LLaMA max_position_embeddings */
    int hidden;             /* n_embd / hidden_size */
    int n_layer;
    int n_head;
    int n_kv_head;          /* LLaMA GQA; = n_head otherwise */
    int head_dim;           /* hidden / n_head unless the config says otherwise */
    int ffn;                /* MLP width: 4*hidden (GPT-2), ffn_dim (OPT), intermediate_size (LLaMA) */
    float norm_eps;
    float dropout;          /* residual/embedding/attention-output dropout while training */
    bool tie_embeddings;
    col_act act;
    /* OPT */
    bool pre_ln;            /* do_layer_norm_before */
    int word_embed_proj_dim;/* = hidden unless projected (opt-350m) */
    /* LLaMA */
    col_rope_cfg rope;
    bool attn_bias, mlp_bias;
    /* special tokens, -1 if unknown */
    int bos_id, eos_id, pad_id;
    /* A value model (a reward model or a critic, transformers' *ForSequenceClassification with num_labels 1):
     * the language-model head is replaced by "score.weight" [1, head input] (no bias), so the "logits" are one
     * value per token [batch, seq, 1]; no lm_head.weight even when the embeddings are untied. */
    bool value_head;
} col_lm_config;

/* Whether the model has a head tensor of its own after the body (lm_head.weight or score.weight), the last
 * parameter; else the head is the input embedding (tied). */
static inline bool col_lm_own_head(const col_lm_config *c) { return c->value_head || !c->tie_embeddings; }
/* The width of the head's output: the vocabulary, or 1 for a value model. */
static inline int col_lm_out_width(const col_lm_config *c) { return c->value_head ? 1 : c->vocab_size; }

const char *col_arch_name(col_arch a);
/* Checks the config; the message names the wrong field. */
col_status col_lm_check_config(const col_lm_config *c, col_err *err);

typedef enum { COL_INIT_NORMAL, COL_INIT_RESID, COL_INIT_ZERO, COL_INIT_ONE } col_init_kind;

/* Tensor parallelism (lm_par.h): What a parameter is to the layer using it; a mode's shard function decides its block from this. */
typedef enum {
    COL_ROLE_REPLICATED = 0, /* held whole by every rank (positions, OPT's projections, a value head) */
    COL_ROLE_FIRST,          /* a projection widening from the hidden size: attention's q/k/v, MLP's fc/gate/up */
    COL_ROLE_FIRST_BIAS,     /* its bias [out] */
    COL_ROLE_SECOND,         /* a projection back to the hidden size: attention's output, MLP's down/fc2 */
    COL_ROLE_SECOND_BIAS,    /* its bias [hidden] */
    COL_ROLE_NORM,           /* a norm's weight or bias [hidden] */
    COL_ROLE_EMBED,          /* the token embedding [vocab, hidden] (also the head when tied) */
    COL_ROLE_POS,            /* learned positions [positions, hidden] */
    COL_ROLE_HEAD,           /* an untied lm_head [vocab, hidden] */
} col_param_role;

typedef struct {
    char name[80];          /* Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight" */
    int ndim;
    int64_t shape[2];
    bool decay;             /* weight decay applies (matrices), not biases or norms */
    col_init_kind init;
    col_param_role role;    /* what it is to its layer: how tensor parallelism splits it */
    int groups;             /* the number of equal segments its split dimension holds (GPT-2's fused q|k|v: 3) */
    bool in_out;            /* a FIRST or SECOND weight stored [in, out] (GPT-2's Conv1D), else [out, in] */
} col_param_spec;

int col_lm_param_count(const col_lm_config *c);
/* Specs in first-use order of the forward graph. */
void col_lm_param_specs(const col_lm_config *c, col_param_spec *specs);
int64_t col_param_numel(const col_param_spec *s);
/* Random initialisation (training from scratch): N(0, 0.02), residual output
 * projections N(0, 0.02/sqrt(2 n_layer)), biases 0, norm weights 1; draws
 * depend only on (seed, tensor index, element). */
void col_lm_init_param(const col_lm_config *c, const col_param_spec *s, int index, float *data, uint64_t seed);

/* What a graph with_loss ends in (out->loss), and what its backward pass is seeded on. */
typedef enum {
    COL_LM_OBJ_MEAN_CE = 0,   /* the mean cross-entropy of the targets: a scalar */
    COL_LM_OBJ_TOKEN_LOGPROB, /* log p(target) per token [batch, seq] (0 where the target is -1): RLHF policies,
                                 whose loss the caller computes from them and seeds per token */
    COL_LM_OBJ_VALUES,        /* a value model's value per token [batch, seq] (no targets input) */
} col_lm_objective;

typedef struct {
    int batch, seq;         /* tokens per row in this graph */
    bool with_loss;         /* add targets [batch, seq] (-1 = ignored) and the objective's output as out->loss */
    col_lm_objective objective;
    bool training;          /* dropout on (when config dropout > 0) */
    bool checkpoint;        /* recompute each block in backward */
    uint64_t dropout_seed;
    /* incremental decoding: attend to a key/value cache of `cache_len`
     * positions per layer; the graph takes the start position at run time */
    int cache_len;          /* 0 = no cache (positions 0..seq-1) */
    /* many sequences (serving): > 0 = the cache leaves hold cache_rows sequences [cache_rows, n_kv_head,
     * cache_len, head_dim], and out->start and out->rows are i64 [batch] inputs: batch row b continues the
     * sequence in cache row rows[b] at position start[b]; 0 = the cache has the batch's rows, one start */
    int cache_rows;
    /* LoRA (lora.h): with lora_of set, the base parameters are built as inputs (frozen, no
     * gradient) and every weight i with lora_of[i] = j >= 0 gets the trainable adapter leaves
     * out->lora[2j] (A [r, in]) and out->lora[2j+1] (B [out, r]): y = base(x) + scale (x A^T) B^T */
    const int *lora_of;     /* per base parameter: adapter index or -1; NULL = no LoRA */
    int lora_rank;
    float lora_scale;       /* alpha / rank */
    /* mixed precision: the dtype of every weight leaf (adapters included), COL_F32 (the default) or bf16/f16;
     * matmuls take 16-bit weights as they are and their inputs cast to them (f32 accumulation), the other
     * uses of a weight (norms, biases) cast it to f32, and activations, softmax, norms and the loss stay f32 */
    col_dtype dtype;
    /* quantized weights (inference): per parameter (spec order), COL_F32 to use dtype, or a block dtype
     * (COL_Q8_0, COL_Q4_0, ...; col_lm_quant_dtype decides which take one). A quantized weight stored
     * [in, out] (in_out, GPT-2's Conv1D) is held transposed, [out, in], so its blocks run along the
     * product's inner dimension; embeddings are gathered and dequantized, projections multiply block by
     * block. NULL: every weight of dtype. */
    const col_dtype *param_dtype;
    /* Pipeline stages: the layers [layer_lo, layer_hi) only (0/0: the whole model). A stage with layer_lo 0
     * starts from the token ids (embeddings); a later one from out->hidden_in, the previous stage's hidden
     * states [batch, seq, hidden] (an f32 input a gradient flows to). A stage with layer_hi = n_layer ends
     * with the final norm, the head, the logits and (with_loss) the loss; an earlier one at out->hidden_out,
     * its hidden states (no logits, no loss). Only the stage's parameters (col_lm_stage_params) are made:
     * the other entries of out->params stay NULL. Its dropouts draw the masks the whole model's graph
     * draws for those layers. No key/value cache, no LoRA. */
    int layer_lo, layer_hi;
    /* Tensor and sequence parallelism (lm_par.h): this rank's place in the layout, or NULL. The graph then has
     * this rank's shapes: batch and seq are its rows and positions, params its blocks, and with_loss adds the
     * inv_count input; the collectives are nodes of the graph. Whole model, no cache, no LoRA. */
    const struct col_lm_par *par;
} col_lm_build_opts;

typedef struct {
    col_node *ids;          /* input [batch, seq] i32 */
    col_node *targets;      /* input [batch, seq] i32, or NULL */
    col_node *logits;       /* [batch, seq, vocab] ([batch, seq, 1] for a value model) */
    col_node *loss;         /* the objective's output: the scalar mean loss, or per token [batch, seq]; or NULL */
    col_node **params;      /* col_lm_param_count() nodes, spec order (caller-provided array) */
    /* with a cache: k/v cache leaves [batch, n_kv_head, cache_len, head_dim] per layer (2 per layer,
     * caller-provided array of 2*n_layer) and the i64 [1] start position */
    col_node **cache;
    col_node *start;
    col_node *rows;         /* with opts.cache_rows: i64 [batch], each row's cache row */
    col_node **lora;        /* with opts.lora_of: 2 per adapter, A then B (caller-provided array) */
    col_node *hidden_in;    /* a stage after the first: input [batch, seq, hidden] f32; NULL otherwise (ids then) */
    col_node *hidden_out;   /* a stage before the last: its output [batch, seq, hidden]; NULL otherwise */
    col_node *inv_count;    /* with par and with_loss: f32 [1] input, 1 / the targets counted in the whole step */
} col_lm_graph;

/* Pipeline stages. The layer range [*lo, *hi) that opts' layer_lo/layer_hi
 * mean (0/0: the whole model). Inline: the families call it, and lm.c calls
 * the families. */
static inline void col_lm_layer_range(const col_lm_config *c, int layer_lo, int layer_hi, int *lo, int *hi)
{
    bool whole = layer_lo == 0 && layer_hi == 0;
    *lo = whole ? 0 : layer_lo;
    *hi = whole ? c->n_layer : layer_hi;
}
/* Checks a stage's layer range: 0 <= lo < hi <= n_layer, or 0/0. */
col_status col_lm_check_stage(const col_lm_config *c, int layer_lo, int layer_hi, col_err *err);
/* The full model's parameters a stage uses, as indices into col_lm_param_specs, in the stage's first-use
 * order: the embeddings (the first stage), its layers, the final norm and head (the last stage). With tied
 * embeddings the last stage also holds the input embedding (index COL_LM_TIED_PARAM, used last, by the head):
 * then the first and the last stage both hold it and their gradients must be summed before every optimizer
 * step. Writes them into idx (when not NULL; room for col_lm_param_count) and returns how many; 0 for a
 * range col_lm_check_stage refuses. */
int col_lm_stage_params(const col_lm_config *c, int layer_lo, int layer_hi, int *idx);
enum { COL_LM_TIED_PARAM = 0 }; /* every family's input embedding is its first parameter */
/* Whether a stage holds a copy of the tied embedding that another stage holds as well (a last stage that is
 * not also the first, with tied embeddings). */
bool col_lm_stage_shares_tied(const col_lm_config *c, int layer_lo, int layer_hi);

/* The dtype a quantized session holds parameter s in: q for the matrices a product reads block by block
 * along its inner dimension (projections, token embeddings, an untied head; the inner dimension a multiple
 * of q's block), f32 for the rest (norms, biases, learned positions). */
col_dtype col_lm_quant_dtype(const col_param_spec *s, col_dtype q);
/* The shape a parameter's leaf has in dtype dt: the spec's, or [out, in] for a quantized in_out weight. */
void col_lm_leaf_shape(const col_param_spec *s, col_dtype dt, int64_t shape[2]);

col_status col_lm_build(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out,
                        col_err *err);

#endif
