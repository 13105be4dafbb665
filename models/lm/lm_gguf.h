/* lm_gguf.h - a GGUF file (llama.cpp's format) as a model: its col_lm_config and, for each parameter of
 * col_lm_param_specs (Hugging Face names and layouts), the GGUF tensor that holds it and how.
 *
 * Families: general.architecture "llama" (LLaMA 1/2/3 and what llama.cpp's converter writes as llama)
 * and "gpt2". The config comes from the metadata (llama.* / gpt2.*: context_length, embedding_length,
 * block_count, feed_forward_length, attention.head_count(_kv), attention.key_length, rope.freq_base,
 * rope.dimension_count, the norm epsilon; the vocabulary from llama.vocab_size, the token list or
 * token_embd's rows; special ids from tokenizer.ggml.*), checked against the tensors' shapes; the
 * untied head, LLaMA's biases and LLaMA-3's frequency scaling (the rope_freqs tensor, which the
 * converter writes instead of metadata) from which tensors are there.
 *
 * How the converter (convert_hf_to_gguf.py) stores what transformers holds, undone here:
 *   - dims innermost first: a GGUF tensor of ne = [cols, rows] is PyTorch's [rows, cols];
 *   - LLaMA's q_proj and k_proj weights (and biases) have their rows permuted per head for llama.cpp's
 *     rotary layout (LlamaModel.permute: reshape(heads, 2, rows/heads/2, cols).swapaxes(1, 2)): whole
 *     rows move, so the permutation is undone on quantized rows as well (row_perm below);
 *   - GPT-2's Conv1D weights ([in, out] in transformers) are stored transposed, as [out, in].
 *
 * The dequantizers here (f32, f16, bf16, Q8_0, Q4_0, Q4_K, Q6_K; block layouts as ggml's) are plain
 * scalar code kept in lm_gguf.c until the engine has its block dtypes. */
#ifndef COL_MODELS_LM_GGUF_H
#define COL_MODELS_LM_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "lm.h"

/* The model config of an open GGUF file. COL_EUNSUPPORTED (one line naming what) for another
 * architecture, mixture-of-experts, rope scaling other than LLaMA-3's; COL_EFORMAT for missing or
 * inconsistent metadata (naming the key) or tensors whose shapes disagree with it. */
col_status col_lm_gguf_config(const col_gguf *g, col_lm_config *out, col_err *err);

/* Where parameter spec of cfg's col_lm_param_specs lives in the file. */
typedef struct {
    const col_gguf_tensor *t; /* the GGUF tensor (t->name, t->type: a col_ggml_type) */
    const void *data;         /* its bytes in the mapping */
    uint64_t nbytes;
    int64_t rows, cols;       /* as stored, PyTorch order: cols = ne[0] (a row: whole quantization blocks) */
    uint64_t row_bytes;       /* bytes of one stored row */
    bool transposed;          /* the parameter is the transpose of the stored [rows, cols] (GPT-2's Conv1D) */
    int row_perm_heads;       /* > 0: rows are permuted per head (LLaMA q/k): the parameter's row r is stored
                                 row col_lm_gguf_perm_row(r, row_perm_heads, rows) (a q/k bias, rows 1: its
                                 elements, over cols); 0: no permutation */
} col_lm_gguf_tensor;

/* The GGUF tensor of parameter `index` of col_lm_param_specs(cfg) (cfg as col_lm_gguf_config gave it):
 * COL_EFORMAT naming both names when it is missing or its shape is not the parameter's. */
col_status col_lm_gguf_find(const col_gguf *g, const col_lm_config *cfg, int index, col_lm_gguf_tensor *out,
                            col_err *err);
/* The stored row holding row r of a [rows, cols] q/k parameter whose rows were permuted over heads heads. */
int64_t col_lm_gguf_perm_row(int64_t r, int heads, int64_t rows);
/* The GGUF name of a Hugging Face parameter name (e.g. "model.layers.3.self_attn.q_proj.weight" ->
 * "blk.3.attn_q.weight"); false if the family has no such parameter. */
bool col_lm_gguf_name(col_arch arch, const char *hf_name, char *out, size_t cap);

/* Parameter `index` as f32 in its Hugging Face layout (spec shape, dst holds its numel): dequantized, the
 * row permutation and the transpose undone. COL_EUNSUPPORTED for a ggml type without a dequantizer here. */
col_status col_lm_gguf_read_f32(const col_gguf *g, const col_lm_config *cfg, int index, float *dst, col_err *err);

/* Dequantizes n elements (whole blocks) of a ggml type from src into dst: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q6_K. COL_EUNSUPPORTED for another type, COL_EINVAL when n is not whole blocks. */
col_status col_lm_gguf_dequantize(uint32_t type, const void *src, int64_t n, float *dst, col_err *err);
bool col_lm_gguf_can_dequantize(uint32_t type);

#endif
