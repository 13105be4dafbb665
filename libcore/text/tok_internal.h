/* tok_internal.h - what the tokenizer's files share; not part of its API
 * (tokenizer.h is).
 *
 * The files are layers; each calls only the ones below it:
 *   tokenizer.c   loading tokenizer.json or vocab.json + merges.txt (GPT-2's or
 *                 CLIP's), freeing, queries
 *   tok_encode.c  col_tok_encode: added tokens, then the stretches between them;
 *                 col_tok_encode_padded
 *   tok_config.c  tokenizer_config.json / special_tokens_map.json: special tokens
 *   tok_decode.c  the decoder: each id's bytes, made at load time; col_tok_decode
 *   tok_pretok.c  normalizers and pre-tokenizer splits (col_tok_normalize,
 *                 col_tok_words), and reading them from tokenizer.json
 *   tok_bpe.c     string and merge maps, reading merges, the merge loop, BPE of one word
 *   tok_unicode.c NFC, Lowercase, white-space runs (tables: tok_unicode_data.c)
 *   tok_util.c    error messages, JSON fields, UTF-8, hashing, GPT-2's byte alphabet
 * (tok_encode.c uses tok_pretok.c and tok_bpe.c; tokenizer.c uses all but
 * tok_encode.c; tok_pretok.c uses tok_unicode.c, tok_bpe.c; tok_decode.c,
 * tok_config.c and tok_unicode.c only tok_util.c.) */
#ifndef COL_TOK_INTERNAL_H
#define COL_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok_unicode.h"
#include "tokenizer.h"

struct cJSON;

/* ---- tok_util.c ---- */

/* col_err_set with "name: " in front. */
col_status col_tok_fail(col_err *err, col_status code, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* s[0..n) for an error message: escaped, cut to about 40 bytes. */
const char *col_tok_show(const char *s, size_t n, char out[64]);

/* JSON helpers for the tokenizer.json readers: the member key of o (case
 * sensitive, NULL if absent), an integer in [lo, hi] (false otherwise), and
 * a boolean member: def when absent or null, -1 when it is not a boolean. */
const struct cJSON *col_tok_json_field(const struct cJSON *o, const char *key);
/* text[0..len) -> JSON, failing with the byte and line of the first problem */
col_status col_tok_parse_json(const char *text, size_t len, const char *name, struct cJSON **out, col_err *err);
bool col_tok_json_int(const struct cJSON *v, int64_t lo, int64_t hi, int64_t *out);
int col_tok_json_bool(const struct cJSON *o, const char *key, int def);

/* UTF-8: the length of the valid character at s[0..n), or 0 if the bytes
 * there are not one (overlong forms, surrogates and values past U+10FFFF
 * are invalid); *cp gets the code point. */
size_t col_utf8_char(const unsigned char *s, size_t n, uint32_t *cp);
/* The length of the longest valid UTF-8 prefix of s[0..n). */
size_t col_utf8_valid(const unsigned char *s, size_t n);
/* Whether cp has Unicode's White_Space property. */
bool col_unicode_space(uint32_t cp);

uint64_t col_tok_hash(const void *s, size_t n);

/* GPT-2's bytes_to_unicode: the code point that stands for byte b in a
 * byte-level vocabulary, and the byte a code point stands for (-1: none). */
uint32_t col_bytelevel_cp(unsigned b);
int col_bytelevel_byte(uint32_t cp);
/* GPT-2 byte-level name -> raw bytes in out (room for n); false if a
 * character stands for no byte. */
bool col_bytelevel_raw(const char *s, size_t n, char *out, size_t *outlen);

/* ---- tok_bpe.c: the maps ---- */

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

/* The merges of tokenizer.json (an array of "a b" or ["a", "b"]) or of
 * merges.txt (an optional "#version" line, then one "a b" a line) into
 * t->merges, by the names in t->by_name; a merge naming an unknown token
 * fails with one line naming the file. */
col_status col_tok_json_merges(col_tokenizer *t, const struct cJSON *merges, const char *name, col_err *err);
col_status col_tok_text_merges(col_tokenizer *t, const char *text, size_t len, const char *name, col_err *err);

/* ---- tok_bpe.c: BPE of one word ---- */

/* Encodes one word after normalization and splitting: BPE (with the word
 * cache of ctx) and appends the ids to ctx's output. */
typedef struct col_tok_ctx col_tok_ctx;
col_status col_tok_ctx_new(const col_tokenizer *t, col_tok_ctx **out, col_err *err);
void col_tok_ctx_free(col_tok_ctx *c);
col_status col_tok_push_id(col_tok_ctx *c, int32_t id, col_err *err);
col_status col_tok_word(void *ctx, const char *s, size_t n, col_err *err); /* a col_piece_fn */
/* Takes the ids out of ctx (the caller frees them). */
int32_t *col_tok_ctx_take(col_tok_ctx *c, size_t *n);

/* ---- tok_pretok.c ---- */

/* A compiled pre-tokenizer regex (PCRE2, UTF + UCP, JIT when available),
 * with \s, \p{L} and \p{N} given the sets of Hugging Face's Oniguruma
 * (Unicode 16: White_Space, and the letters and digits PCRE2 10.42's
 * Unicode 14 lacks). */
typedef struct col_regex col_regex;
col_status col_regex_compile(const char *pattern, size_t len, bool literal, col_regex **out, col_err *err);
void col_regex_free(col_regex *re);
/* Splits s[0..n) into the regex's matches and, with gaps, the text between
 * them, in order ("Isolated"; without gaps "Removed" with invert: only the
 * matches), calling piece() on each non-empty one; each maximal run of bytes
 * that are not valid UTF-8 is a piece of its own. */
typedef col_status (*col_piece_fn)(void *user, const char *s, size_t n, col_err *err);
col_status col_regex_split(const col_regex *re, const char *s, size_t n, bool gaps, col_piece_fn piece, void *user,
                           col_err *err);
/* GPT-2's split regex (ByteLevel with use_regex). */
extern const char col_gpt2_regex[];

/* Normalizer steps, applied in order to each stretch of text between added
 * tokens. */
typedef enum { COL_NORM_PREPEND, COL_NORM_REPLACE, COL_NORM_METASPACE, COL_NORM_NFC, COL_NORM_LOWER,
               COL_NORM_SPACES /* each run of white space -> ' ' (Replace of the regex \s+) */ } col_norm_kind;
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

/* Reads tokenizer.json's normalizer and pre_tokenizer (either may be NULL)
 * into t->norm, t->split, t->re, t->re2, t->matches_only and t->byte_level. */
col_status col_tok_parse_pre(col_tokenizer *t, const struct cJSON *normalizer, const struct cJSON *pre_tokenizer,
                             const char *name, col_err *err);
/* Normalizes one stretch of text between added tokens (first: it starts the
 * input) with the normalizer's steps (not the pre-tokenizer's Metaspace /
 * ByteLevel prefix steps): *out, *outn is the result, held in keep (free
 * keep->p after) or s itself when there is nothing to do. */
col_status col_tok_normalize(const col_tokenizer *t, const char *s, size_t n, bool first, col_tbuf *keep,
                             const char **out, size_t *outn, col_err *err);
/* Pre-tokenizes normalized text (first: it starts the input): the prefix
 * steps, then cuts it into words and encodes them (col_tok_word). */
col_status col_tok_words(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, bool first,
                         col_err *err);

/* ---- tok_config.c ---- */

/* tokenizer_config.json and special_tokens_map.json of a directory (NULL
 * when absent; a file that is there but unreadable or not a JSON object is
 * an error). */
typedef struct {
    struct cJSON *cfg, *map;
    char *cfg_path, *map_path;
} col_tok_config;
col_status col_tok_config_read(const char *dir, col_tok_config *c, col_err *err);
void col_tok_config_free(col_tok_config *c);
/* tokenizer_class, or NULL */
const char *col_tok_config_class(const col_tok_config *c);
/* model_max_length when it is an integer in [1, 2^31), else 0 */
int64_t col_tok_config_max_length(const col_tok_config *c);
/* The content of a special token ("bos_token", "pad_token") as transformers
 * takes it from the two files, or NULL (absent, null, or not a token);
 * *present: the key is there; *file: the file it comes from. */
const char *col_tok_config_value(const col_tok_config *c, const char *key, bool *present, const char **file);
bool col_tok_config_is_null(const col_tok_config *c, const char *key);
/* The added tokens transformers 5 makes of the special tokens (the rules are
 * in tok_config.c), as a tokenizer.json "added_tokens" array (*out, free it
 * with cJSON_Delete even on failure) numbered from vocab (the vocab.json
 * object). defaults: the content of each named token the files do not give
 * (NULL: none), in the order bos, eos, unk, sep, pad, cls, mask. */
col_status col_tok_config_added(const col_tok_config *c, const struct cJSON *vocab, const char *const defaults[7],
                                struct cJSON **out, col_err *err);

/* ---- tok_decode.c ---- */

/* Turns tokenizer.json's decoder (may be NULL; bytelevel: a ByteLevel step
 * first) into t->dec, dec_off, dec_len and t->strip_leading. */
col_status col_tok_build_decoder(col_tokenizer *t, const struct cJSON *decoder, bool bytelevel, const char *name,
                                 col_err *err);

/* ---- the tokenizer: tokenizer.c fills it, every layer reads it ---- */

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
    col_regex *re2;            /* COL_SPLIT_REGEX: each piece split again (ByteLevel's regex after a Split) */
    bool matches_only;         /* COL_SPLIT_REGEX: the text between matches is dropped (CLIP) */
    char meta_repl[8];         /* COL_SPLIT_METASPACE: the replacement character */
    size_t meta_repl_len;

    int32_t *prefix_ids, *suffix_ids;
    int n_prefix, n_suffix;
    int strip_leading;         /* decoder: leading spaces to strip (Strip / Metaspace) */
    int32_t bos_id, eos_id;

    /* BPE with an end-of-word suffix (CLIP's "</w>"): the last symbol of a word
     * is its byte's token with the suffix; decoding turns the suffix into ' '
     * and strips white space at both ends, as transformers' CLIPTokenizer */
    char eow[16];
    size_t eow_len;
    int32_t byte_id_eow[256];
    bool norm_added;           /* some added tokens are matched in normalized text */
    int32_t pad_id;            /* tokenizer_config.json's pad_token, or -1 */
    int32_t max_length;        /* tokenizer_config.json's model_max_length, or 0 */
};

enum { COL_TOKF_PRESENT = 1, COL_TOKF_ADDED = 2, COL_TOKF_SPECIAL = 4, COL_TOKF_LSTRIP = 8, COL_TOKF_RSTRIP = 16,
       COL_TOKF_VOCAB = 32 /* in the model's vocabulary (not only an added token) */,
       COL_TOKF_NORMALIZED = 64 /* added token matched in normalized text */ };

typedef struct col_trie_node {
    int32_t child, sibling; /* first child, next sibling; -1 none */
    int32_t token;          /* added-token id ending here, or -1 */
    unsigned char byte;
} col_trie_node;

#endif
