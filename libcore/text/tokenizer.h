/* tokenizer.h - BPE tokenizers that give Hugging Face's ids: GPT-2 / OPT
 * byte-level BPE, LLaMA-1/2 SentencePiece BPE with byte fallback, LLaMA-3
 * byte-level BPE.
 *
 * Files: a Hugging Face tokenizer.json (model.type "BPE"), or a GPT-2 style
 * vocab.json + merges.txt pair. Supported tokenizer.json parts:
 *   normalizer     null | Prepend | Replace (String pattern) | Sequence of them
 *   pre_tokenizer  null | ByteLevel | Split (Regex or String, "Isolated") |
 *                  Metaspace | Sequence of them, with at most one regex split
 *   post_processor null | ByteLevel | TemplateProcessing (the "single" template
 *                  gives the ids that add_special puts around the text) |
 *                  RobertaProcessing | BertProcessing | Sequence of them
 *   decoder        null | ByteLevel | Replace | ByteFallback | Fuse | Strip |
 *                  Metaspace | Sequence of them (Strip acts on the whole
 *                  text, as it does after LLaMA's Fuse)
 *   added_tokens   matched in the raw text before anything else, leftmost
 *                  longest; lstrip / rstrip honoured, single_word and
 *                  normalized are not
 * Anything else is refused with COL_EUNSUPPORTED and a line naming it, rather
 * than giving ids that differ from Hugging Face's.
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

/* Loads a tokenizer from path: a directory holding tokenizer.json (preferred)
 * or vocab.json + merges.txt, a tokenizer.json file, or a vocab.json file with
 * merges.txt beside it. A tokenizer_config.json in the same directory, if
 * present, may name the bos_token / eos_token. Every problem with the files
 * (missing, bad JSON, merges naming unknown tokens, ids out of range or
 * given twice, unsupported parts) fails with one line naming the file. */
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

/* One past the largest id (vocabulary plus added tokens): 50257, 32000, 128256. */
int32_t col_tok_vocab_size(const col_tokenizer *t);
/* Beginning / end of sequence ids, -1 if the tokenizer has none. */
int32_t col_tok_bos_id(const col_tokenizer *t);
int32_t col_tok_eos_id(const col_tokenizer *t);
/* The id of a token by its name in the files ("<|eot_id|>", "Ġthe", "▁the"),
 * or -1. */
int32_t col_tok_token_id(const col_tokenizer *t, const char *name);
/* The bytes one id decodes to (before the SentencePiece leading-space strip),
 * for streaming output; NULL (and *len 0) for an id that names no token. */
const char *col_tok_token_bytes(const col_tokenizer *t, int32_t id, size_t *len);
/* Whether id is a special added token ("<s>", "<|begin_of_text|>"). */
bool col_tok_is_special(const col_tokenizer *t, int32_t id);

/* ---- internal: shared by tokenizer.c, tok_bpe.c and tok_pretok.c only ---- */
#ifdef COL_TOK_INTERNAL

/* JSON helpers for the tokenizer.json readers: the member key of o (case
 * sensitive, NULL if absent), and an integer in [lo, hi] (false otherwise). */
struct cJSON;
const struct cJSON *col_tok_json_field(const struct cJSON *o, const char *key);
bool col_tok_json_int(const struct cJSON *v, int64_t lo, int64_t hi, int64_t *out);

/* UTF-8: the length of the valid character at s[0..n), or 0 if the bytes
 * there are not one (overlong forms, surrogates and values past U+10FFFF
 * are invalid); *cp gets the code point. */
size_t col_utf8_char(const unsigned char *s, size_t n, uint32_t *cp);
/* The length of the longest valid UTF-8 prefix of s[0..n). */
size_t col_utf8_valid(const unsigned char *s, size_t n);
/* Whether cp has Unicode's White_Space property. */
bool col_unicode_space(uint32_t cp);

/* GPT-2's bytes_to_unicode: the code point that stands for byte b in a
 * byte-level vocabulary, and the byte a code point stands for (-1: none). */
uint32_t col_bytelevel_cp(unsigned b);
int col_bytelevel_byte(uint32_t cp);

/* A compiled pre-tokenizer regex (PCRE2, UTF + UCP, JIT when available),
 * with \s, \p{L} and \p{N} given the sets of Hugging Face's Oniguruma
 * (Unicode 16: White_Space, and the letters and digits PCRE2 10.42's
 * Unicode 14 lacks). */
typedef struct col_regex col_regex;
col_status col_regex_compile(const char *pattern, size_t len, bool literal, col_regex **out, col_err *err);
void col_regex_free(col_regex *re);
/* Splits s[0..n) into the regex's matches and the text between them, in
 * order ("Isolated"), calling piece() on each non-empty one; each maximal
 * run of bytes that are not valid UTF-8 is a piece of its own. */
typedef col_status (*col_piece_fn)(void *user, const char *s, size_t n, col_err *err);
col_status col_regex_split(const col_regex *re, const char *s, size_t n, col_piece_fn piece, void *user,
                           col_err *err);

uint64_t col_tok_hash(const void *s, size_t n);

/* String -> id map over keys stored elsewhere: key of id i is
 * arena[off[i] .. off[i] + len[i]). Open addressing; slots hold
 * (hash >> 32) << 32 | (id + 1), 0 when empty. */
typedef struct {
    const char *arena;
    const uint32_t *off, *len;
    uint64_t *slots;
    uint64_t mask;
} col_strmap;
col_status col_strmap_init(col_strmap *m, size_t n_keys, col_err *err);
/* Inserts id; returns the id already stored under the same key, or -1. */
int32_t col_strmap_put(col_strmap *m, int32_t id);
int32_t col_strmap_get(const col_strmap *m, const char *s, size_t n);
void col_strmap_free(col_strmap *m);

/* Merge ranks: (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key;  /* (uint64)left << 32 | right */
    int32_t rank;  /* -1: empty slot */
    int32_t id;
} col_merge_slot;
typedef struct {
    col_merge_slot *slots;
    uint64_t mask;
} col_mergemap;
col_status col_mergemap_init(col_mergemap *m, size_t n, col_err *err);
/* Later merges of the same pair replace earlier ones, as in Hugging Face. */
void col_mergemap_put(col_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const col_merge_slot *col_mergemap_get(const col_mergemap *m, int32_t a, int32_t b);
void col_mergemap_free(col_mergemap *m);

/* Normalizer steps, applied in order to each stretch of text between added
 * tokens. */
typedef enum { COL_NORM_PREPEND, COL_NORM_REPLACE, COL_NORM_METASPACE } col_norm_kind;
typedef struct {
    col_norm_kind kind;
    char *a, *b;          /* PREPEND: a; REPLACE: a -> b; METASPACE: ' ' -> a, then a in front
                             unless the text starts with it (ByteLevel's add_prefix_space is
                             METASPACE with a = " ") */
    size_t alen, blen;
    int scheme;           /* METASPACE: 0 never prepend, 1 only to the first stretch, 2 always */
} col_norm_op;

/* How the text after normalization is cut into words for the model. */
typedef enum {
    COL_SPLIT_NONE,       /* the whole stretch is one word */
    COL_SPLIT_REGEX,      /* regex matches and the gaps between them */
    COL_SPLIT_METASPACE,  /* before each replacement character (Metaspace split) */
    COL_SPLIT_SPM_WORDS,  /* before each '▁' that follows another character; used only when no
                             vocabulary token has '▁' after another character, where it cannot
                             change the result and keeps each BPE word short */
} col_split_kind;

struct col_tokenizer {
    bool byte_level;           /* byte-level BPE (GPT-2, LLaMA-3) */
    bool ignore_merges;        /* a word that is itself a token is emitted whole */
    bool byte_fallback;        /* unknown characters -> <0xXX> tokens */
    bool fuse_unk;
    int32_t unk_id;
    int32_t n_ids;             /* vocab size: one past the largest id */

    /* per id: the name in the files, the decoded bytes, flags */
    char *names, *keys, *dec;
    uint32_t *name_off, *name_len, *dec_off, *dec_len;
    uint32_t *key_off, *key_len; /* encode keys: raw bytes (byte-level) or names */
    uint8_t *flags;            /* COL_TOKF_* */

    col_strmap by_name;        /* model vocabulary by name */
    col_strmap by_key;         /* model vocabulary by encode key (byte-level only) */
    col_mergemap merges;
    int32_t byte_id[256];      /* byte-level: the token of each byte; else <0xXX>, or -1 */

    /* added tokens, matched in the text through a byte trie */
    int32_t n_added;
    int32_t *added_id;
    struct col_trie_node *trie;
    int32_t n_trie;
    int32_t trie_root[256];    /* the node for each first byte, or -1 */

    col_norm_op *norm;
    int n_norm;
    col_split_kind split;
    col_regex *re;
    char meta_repl[8];         /* COL_SPLIT_METASPACE: the replacement character */
    size_t meta_repl_len;

    int32_t *prefix_ids, *suffix_ids;
    int n_prefix, n_suffix;
    int strip_leading;         /* decoder: leading spaces to strip (Strip / Metaspace) */
    int32_t bos_id, eos_id;
};

enum { COL_TOKF_PRESENT = 1, COL_TOKF_ADDED = 2, COL_TOKF_SPECIAL = 4, COL_TOKF_LSTRIP = 8, COL_TOKF_RSTRIP = 16,
       COL_TOKF_VOCAB = 32 /* in the model's vocabulary (not only an added token) */ };

typedef struct col_trie_node {
    int32_t child, sibling; /* first child, next sibling; -1 none */
    int32_t token;          /* added-token id ending here, or -1 */
    unsigned char byte;
} col_trie_node;

/* Encodes one word after normalization and splitting: BPE (with the word
 * cache of ctx) and appends the ids to ctx's output. */
typedef struct col_tok_ctx col_tok_ctx;
col_status col_tok_ctx_new(const col_tokenizer *t, col_tok_ctx **out, col_err *err);
void col_tok_ctx_free(col_tok_ctx *c);
col_status col_tok_push_id(col_tok_ctx *c, int32_t id, col_err *err);
col_status col_tok_word(void *ctx, const char *s, size_t n, col_err *err); /* a col_piece_fn */
struct cJSON;
/* GPT-2 byte-level name -> raw bytes in out (room for n); false if a
 * character stands for no byte. */
bool col_bytelevel_raw(const char *s, size_t n, char *out, size_t *outlen);
/* Turns tokenizer.json's decoder (may be NULL; bytelevel: a ByteLevel step
 * first) into t->dec, dec_off, dec_len and t->strip_leading (tok_pretok.c). */
col_status col_tok_build_decoder(col_tokenizer *t, const struct cJSON *decoder, bool bytelevel, const char *name,
                                 col_err *err);
/* Reads tokenizer.json's normalizer and pre_tokenizer (either may be NULL)
 * into t->norm, t->split, t->re and t->byte_level (tok_pretok.c). */
col_status col_tok_parse_pre(col_tokenizer *t, const struct cJSON *normalizer, const struct cJSON *pre_tokenizer,
                             const char *name, col_err *err);
/* GPT-2's split regex (ByteLevel with use_regex). */
extern const char col_gpt2_regex[];
/* col_err_set with "name: " in front (tokenizer.c). */
col_status col_tok_fail(col_err *err, col_status code, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* s[0..n) for an error message: escaped, cut to about 40 bytes. */
const char *col_tok_show(const char *s, size_t n, char out[64]);

/* Normalizes one stretch of text between added tokens (first: it starts the
 * input), cuts it into words and encodes them (tok_pretok.c). */
col_status col_tok_segment(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, bool first,
                           col_err *err);
/* Takes the ids out of ctx (the caller frees them). */
int32_t *col_tok_ctx_take(col_tok_ctx *c, size_t *n);

#endif /* COL_TOK_INTERNAL */

#endif
