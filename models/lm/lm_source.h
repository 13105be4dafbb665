/* lm_source.h - what MODEL names on a command line: a Hugging Face model
 * directory (config.json + weights + tokenizer files), a hub id already in
 * the Hugging Face cache, or a built-in architecture trained from scratch
 * (hf_config.h's presets), together with its tokenizer and chat template.
 *
 * Everything read here is untrusted; each problem fails with one line naming
 * the file and what to do. */
#ifndef COL_MODELS_LM_SOURCE_H
#define COL_MODELS_LM_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "chat_template.h"
#include "checkpoint.h"
#include "lm.h"
#include "lora.h"
#include "tokenizer.h"

typedef struct {
    char dir[4096];          /* the model directory; "" for a preset */
    char preset[64];         /* the preset's name; "" for a directory */
    col_lm_config config;
    col_ckpt *weights;       /* NULL for a preset (random initialisation) or a GGUF file */
    struct col_gguf *gguf;   /* MODEL was a GGUF file (llama.cpp's format): its weights, config and tokenizer
                                (col_lm_trainer_load_gguf); NULL otherwise */
    col_tokenizer *tok;      /* NULL when no tokenizer was found or asked for */
    char tok_dir[4096];      /* the directory the tokenizer files came from; "" if none */
    bool has_chat;           /* tokenizer_config.json names a chat template of a built-in family */
    col_chat_family chat;
    char chat_unknown[512];  /* tokenizer_config.json has a chat_template that is none of the built-in
                                families: why it was not recognised (else ""); apps say so, since the
                                model would otherwise silently become a plain completer */
    bool has_adapter;        /* the directory holds a LoRA adapter (adapter_config.json +
                                adapter_model.safetensors) over the base weights of model.safetensors */
    col_lora_config lora;    /* its settings: create the trainer with them, then col_lm_trainer_load_adapter(dir) */
} col_lm_source;

/* Opens MODEL (directory, hub id, a .gguf file, or preset name). tokenizer: NULL to use the
 * model directory's own files (for a preset: the bundled tokenizer of its
 * family: gpt2 for gpt2-* and opt-*, llama2 for llama-*, llama3 for
 * llama3-*), or a tokenizer path or bundled name that replaces them.
 * need_tokenizer: fail when none is found (instead of leaving tok NULL).
 * A tokenizer with more ids than the model's vocabulary is an error. Errors
 * about the tokenizer (none found when needed, the one given cannot be read
 * or does not fit) mark COL_SETTING_TOKENIZER. */
col_status col_lm_source_open(const char *model, const char *tokenizer, bool need_tokenizer, col_lm_source *out,
                              col_err *err);
void col_lm_source_close(col_lm_source *s);

/* Copies the tokenizer files found in s->tok_dir (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
 * tokenizer.model) into dir, each written atomically. Nothing to copy is
 * not an error. */
col_status col_lm_source_copy_tokenizer(const col_lm_source *s, const char *dir, col_err *err);

/* Writes the chat template family f into dir/tokenizer_config.json as
 * transformers keeps it: "chat_template" (col_chat_jinja's text), and
 * "bos_token" / "eos_token" (the tokenizer's, as strings) where the file has
 * none. The file in dir (copied there by col_lm_source_copy_tokenizer) is
 * kept otherwise; without one a new file names PreTrainedTokenizerFast.
 * Also dir/generation_config.json: "bos_token_id", and "eos_token_id" listing
 * the tokenizer's end of text and each of the family's stop strings that is
 * one token (<|im_end|>, <|eot_id|>), so that transformers' generate() ends a
 * reply where colossal-chat does. Written atomically. */
col_status col_lm_source_write_chat_template(const col_lm_source *s, const char *dir, col_chat_family f,
                                             col_err *err);

/* The directory of a tokenizer bundled with colossal (gpt2, llama2, llama3,
 * bytes, clip), installed copy first; NULL for another name. */
const char *col_bundled_tokenizer(const char *name, char *buf, size_t size);

/* The names of the bundled tokenizers, "gpt2, llama2, ...", into buf (size bytes); returns buf. */
const char *col_bundled_tokenizer_names(char *buf, size_t size);

#endif
