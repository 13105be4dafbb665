/* hf_config.h - Hugging Face model directories: config.json, built-in
 * presets, and where a model named on the command line lives.
 *
 * config.json is untrusted input: every field is type- and range-checked and
 * an unsupported model type or option gets one line saying what to do. */
#ifndef COL_MODELS_HF_CONFIG_H
#define COL_MODELS_HF_CONFIG_H

#include <stddef.h>

#include "hf_cache.h"
#include "lm.h"

/* Parses config.json text (model_type gpt2, opt or llama). */
col_status col_hf_parse_config(const char *json, size_t len, const char *name, col_lm_config *out, col_err *err);
/* Reads DIR/config.json. */
col_status col_hf_load_config(const char *dir, col_lm_config *out, col_err *err);

/* config.json text for a model (transformers 4.x spelling, loadable by
 * transformers and by col_hf_parse_config); free() the result. */
col_status col_hf_config_json(const col_lm_config *c, char **json, col_err *err);

/* Built-in architectures for training from scratch (random weights):
 * gpt2, gpt2-medium, gpt2-large, gpt2-xl, opt-125m, opt-350m, opt-1.3b,
 * llama-7b-shaped, llama3-8b-shaped, and the small test shapes
 * gpt2-tiny, llama-tiny (257 ids: the bundled byte-level tokenizer), and
 * gpt2-bytes, colossal-finetune's embedded default (3 blocks of width 192
 * over bytes, 128 positions). NULL-terminated list of names: */
extern const char *const col_lm_preset_names[];
col_status col_lm_preset(const char *name, col_lm_config *out, col_err *err);
/* A GPT-2 config from its five sizes (dropout 0, eps 1e-5, 4x MLP). */
col_lm_config col_gpt2_config(int vocab, int positions, int hidden, int layers, int heads);


#endif
