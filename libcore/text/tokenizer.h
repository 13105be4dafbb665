/* tokenizer.h - BPE tokenizers that give Hugging Face's ids: GPT-2 / OPT
 * byte-level BPE, LLaMA-1/2 SentencePiece BPE with byte fallback, LLaMA-3
 * byte-level BPE, and CLIP's BPE (the text encoder of Stable Diffusion).
 *
 * Files: a Hugging Face tokenizer.json (model.type "BPE"), or a GPT-2 style
 * vocab.json + merges.txt pair. Supported tokenizer.json parts:
 *   normalizer     null | Prepend | Replace (String pattern, or the Regex \s+
 *                  by " ") | NFC | Lowercase | Sequence of them
 *   pre_tokenizer  null | ByteLevel | Split (Regex or String, "Isolated"; or
 *                  "Removed" with invert: only the matches) | Metaspace |
 *                  Sequence of them, with at most one regex split, which a
 *                  ByteLevel with its regex may follow (each piece is split
 *                  again)
 *   model          BPE; end_of_word_suffix only with ByteLevel
 *   post_processor null | ByteLevel | TemplateProcessing (the "single" template
 *                  gives the ids that add_special puts around the text) |
 *                  RobertaProcessing | BertProcessing | Sequence of them
 *   decoder        null | ByteLevel | Replace | ByteFallback | Fuse | Strip |
 *                  Metaspace | Sequence of them (Strip acts on the whole
 *                  text, as it does after LLaMA's Fuse)
 *   added_tokens   matched in the raw text before anything else, leftmost
 *                  longest, or with "normalized" in each normalized stretch
 *                  between those; lstrip / rstrip honoured, single_word not
 * Anything else is refused with COL_EUNSUPPORTED and a line naming it, rather
 * than giving ids that differ from Hugging Face's.
 *
 * CLIP (a vocab.json + merges.txt directory whose tokenizer_config.json says
 * CLIPTokenizer, or without a class one whose vocabulary has CLIP's tokens):
 * as transformers 5's CLIPTokenizer, which does not use ftfy: NFC, each run
 * of white space made one space, lowercase; the words are the matches of
 * CLIP's regex (white space is dropped), each split again by GPT-2's regex;
 * byte-level BPE where a word's last symbol carries "</w>"; BOS <|startoftext|>
 * and EOS <|endoftext|> around the ids. The special tokens (bos, eos, unk,
 * pad, ...) of tokenizer_config.json / special_tokens_map.json become added
 * tokens as transformers makes them (so SD 2's pad "!" is a special token
 * that splits words). Decoding turns "</w>" into a space and strips the ends.
 *
 * Bytes that are not valid UTF-8 are accepted (Hugging Face cannot take them):
 * byte-level tokenizers encode each run of invalid bytes as its own
 * pre-token, SentencePiece ones send each invalid byte to byte fallback.
 * Decoding gives raw bytes: where Hugging Face would print U+FFFD for byte
 * tokens that do not form UTF-8, this returns the bytes themselves, so that
 * decode(encode(text)) == text for any bytes without added tokens in them,
 * with the GPT-2, LLaMA-2 (texts without '▁') and LLaMA-3 files.
 *
 * A loaded tokenizer is read-only: encode and decode may run on it from many
 * threads at once. */
#ifndef COL_TOKENIZER_H
#define COL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct col_tokenizer col_tokenizer;

/* Loads a tokenizer from path: a directory holding tokenizer.json (preferred,
 * but for CLIP) or vocab.json + merges.txt, a tokenizer.json file, or a
 * vocab.json file with merges.txt beside it. A tokenizer_config.json (and
 * special_tokens_map.json) in the same directory, if present, may name the
 * bos_token / eos_token / pad_token and give model_max_length. Every problem
 * with the files (missing, bad JSON, merges naming unknown tokens, ids out of
 * range or given twice, unsupported parts) fails with one line naming the
 * file. */
col_status col_tok_load(const char *path, col_tokenizer **out, col_err *err);

/* The same from the text of a tokenizer.json in memory (json[0..len)). */
col_status col_tok_from_json(const char *json, size_t len, col_tokenizer **out, col_err *err);

void col_tok_free(col_tokenizer *t);

/* Flags for col_tok_encode_ex. */
enum {
    COL_TOK_ADD_SPECIAL = 1u,   /* put the post-processor's ids around the text (LLaMA's BOS) */
    COL_TOK_PARSE_SPECIAL = 2u, /* match special added tokens ("<|eot_id|>") in the text;
                                   without it they are encoded as plain text. Non-special
                                   added tokens are always matched. */
};

/* Encodes text[0..len) into a new array *ids of *n ids (free() it; it is
 * non-NULL even when *n is 0). Special added tokens in the text are matched,
 * as Hugging Face does; add_special adds the template's BOS/EOS. */
col_status col_tok_encode(const col_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                          size_t *n, col_err *err);
/* The same with COL_TOK_* flags. */
col_status col_tok_encode_ex(const col_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                             size_t *n, col_err *err);

/* Decodes ids into a new NUL-terminated buffer *text of *len bytes (free()
 * it). skip_special leaves out special added tokens. An id outside
 * [0, vocab size) or one that names no token fails with COL_EINVAL. */
col_status col_tok_decode(const col_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text,
                          size_t *len, col_err *err);

/* Encodes text for a model with a fixed input length (a CLIP text encoder:
 * length = col_tok_max_length(t), 77), as transformers' tokenizer(text,
 * padding="max_length", max_length=length, truncation=True) gives input_ids:
 * the post-processor's ids (BOS, EOS) around the text's first ids, as many as
 * fit, then the pad id up to length. ids: room for length ids. *n_text (may
 * be NULL): the number of text ids before truncation (more than length - 2:
 * the text was cut). No attention mask: Stable Diffusion uses none. Fails
 * with COL_EINVAL if length leaves no room for the special ids, or if padding
 * is needed and the tokenizer has no pad token. */
col_status col_tok_encode_padded(const col_tokenizer *t, const char *text, size_t len, size_t length, int32_t *ids,
                                 size_t *n_text, col_err *err);

/* One past the largest id (vocabulary plus added tokens): 50257, 32000, 128256, 49408. */
int32_t col_tok_vocab_size(const col_tokenizer *t);
/* Beginning / end of sequence ids, -1 if the tokenizer has none. */
int32_t col_tok_bos_id(const col_tokenizer *t);
int32_t col_tok_eos_id(const col_tokenizer *t);
/* The pad id (pad_token of tokenizer_config.json / special_tokens_map.json;
 * CLIP: <|endoftext|> 49407 unless they name another, SD 2's "!" 0), or -1. */
int32_t col_tok_pad_id(const col_tokenizer *t);
/* Pads with the token named so (its id by col_tok_token_id) instead: a model whose tokenizer files are
 * not at hand (SD 2's single-file checkpoints pad with "!"). The token stays an ordinary one in text,
 * where transformers would have made it a special token. COL_EINVAL when there is no such token. */
col_status col_tok_set_pad(col_tokenizer *t, const char *token, col_err *err);
/* tokenizer_config.json's model_max_length (CLIP: 77), or 0 if none is given. */
int32_t col_tok_max_length(const col_tokenizer *t);
/* The id of a token by its name in the files ("<|eot_id|>", "Ġthe", "▁the"),
 * or -1. */
int32_t col_tok_token_id(const col_tokenizer *t, const char *name);
/* The bytes one id decodes to (before the SentencePiece leading-space strip),
 * for streaming output; NULL (and *len 0) for an id that names no token. */
const char *col_tok_token_bytes(const col_tokenizer *t, int32_t id, size_t *len);
/* Whether id is a special added token ("<s>", "<|begin_of_text|>"). */
bool col_tok_is_special(const col_tokenizer *t, int32_t id);

#endif
