/* tok_gguf.h - the tokenizer a GGUF file carries (tokenizer.ggml.*), as the Hugging Face tokenizer.json
 * it stands for, loaded by col_tok_from_json.
 *
 * tokenizer.ggml.model:
 *   "gpt2"   byte-level BPE: tokens (byte-level strings, id order), merges ("a b"), token_type; the
 *            pre-tokenizer from tokenizer.ggml.pre: "gpt-2" (also when absent) GPT-2's regex and byte
 *            level; "llama-bpe" / "llama3" / "llama-v3" LLaMA-3's split regex, then byte level, merges ignored
 *            for whole words as in LLaMA-3's tokenizer.json. Other pre-tokenizers ("default" included,
 *            which llama.cpp reads with regexes of its own) are refused (COL_EUNSUPPORTED).
 *   "llama"  SentencePiece BPE with byte fallback (<0x..> tokens): tokens, scores, token_type. The merges
 *            are made from the scores as transformers' LlamaConverter makes them from tokenizer.model:
 *            every split of a token into two tokens, ordered by the token's score (highest first), the
 *            splits of one token by the ids of their halves; the normalizer puts "\u2581" first (unless
 *            tokenizer.ggml.add_space_prefix is false) and turns spaces into "\u2581" (LLaMA-2's
 *            tokenizer.json), the decoder undoes that.
 * Token types (llama.cpp's): CONTROL tokens become special added tokens, USER_DEFINED ones added tokens,
 * UNKNOWN the BPE unk token (and a special added token). tokenizer.ggml.add_bos_token /
 * add_eos_token (llama.cpp's defaults: BOS for "llama" and LLaMA-3's pre-tokenizer, no EOS) with bos_token_id /
 * eos_token_id give the template that add_special puts around the text.
 *
 * Every array is untrusted: lengths must agree, ids must lie in the vocabulary, merges must name tokens
 * (else COL_EFORMAT and a line naming the file and the key). */
#ifndef COL_TOK_GGUF_H
#define COL_TOK_GGUF_H

#include <stddef.h>

#include "gguf.h"
#include "tokenizer.h"

/* The tokenizer.json text (NUL-terminated, *len bytes; free() it). */
col_status col_tok_gguf_json(const col_gguf *g, char **json, size_t *len, col_err *err);
/* The tokenizer itself. */
col_status col_tok_from_gguf(const col_gguf *g, col_tokenizer **out, col_err *err);

#endif
