/* lm_family.h - model families as a table, as the backends are kernel tables.
 *
 * Each family file (gpt.c, opt.c, llama.c) defines one const col_lm_family;
 * lm_families.c lists them; lm.c and lora.c find a config's family with
 * col_lm_family_of() and include no family. The families build their graphs
 * from lm_layers.h and never call lm.c, so calls go one way:
 * lm.c -> lm_families.c -> gpt.c, opt.c, llama.c -> lm_layers.c. */
#ifndef COL_MODELS_LM_FAMILY_H
#define COL_MODELS_LM_FAMILY_H

#include <stdbool.h>

#include "lm.h"

typedef struct {
    const char *name;                 /* Hugging Face model_type: "gpt2", "opt", "llama" */
    const char *title;                /* for messages: "GPT-2", "OPT", "LLaMA" */
    col_arch arch;
    bool conv1d;                      /* weights stored [in, out] (GPT-2's Conv1D), not [out, in] (nn.Linear) */
    const char *const *lora_modules;  /* the modules LoRA may adapt, NULL-terminated */
    const char *lora_default_targets; /* PEFT's default target_modules for the family */
    /* Checkpoint tensors the family does not use and transformers drops without a word (buffers
     * older checkpoints saved, its _keys_to_ignore_on_load_unexpected), NULL-terminated. A pattern
     * matches a name equal to it or ending in "." + it; '#' stands for a decimal number. Any
     * other tensor the model does not use makes col_lm_trainer_load fail. */
    const char *const *unused_ok;
    int (*param_count)(const col_lm_config *c);
    /* the parameters with Hugging Face names and shapes, in first-use order of the forward graph */
    void (*param_specs)(const col_lm_config *c, col_param_spec *specs);
    /* how param_specs lays the layers out: embed_params specs before the first layer (the embeddings and what
     * follows them), then layer_params specs per layer; the rest (final norm, head) after the last layer */
    int (*embed_params)(const col_lm_config *c);
    int (*layer_params)(const col_lm_config *c);
    /* builds the model from out->ids (and out->cache / out->start with a key/value cache) to the
     * logits [batch * seq, vocab]; out->params holds the parameter leaves in spec order. For a pipeline
     * stage (col_lm_layer_range of o's layer_lo/layer_hi) it starts at out->hidden_in unless the range
     * starts at layer 0, and returns the hidden states [batch, seq, hidden] unless it ends at the last
     * layer; it reads only the stage's parameters (col_lm_stage_params). */
    col_node *(*forward)(col_graph *g, const col_lm_config *c, const col_lm_build_opts *o, col_lm_graph *out);
} col_lm_family;

/* The registered families, NULL-terminated (lm_families.c). */
extern const col_lm_family *const col_lm_families[];
/* The family of arch, or NULL when none is registered for it. */
const col_lm_family *col_lm_family_of(col_arch arch);

/* Whether a checkpoint tensor the model does not use is one of f's unused_ok. */
bool col_lm_unused_ok(const col_lm_family *f, const char *name);

/* The families themselves (gpt.c, opt.c, llama.c): only the registry names them. */
extern const col_lm_family col_gpt2_family, col_opt_family, col_llama_family;

#endif
