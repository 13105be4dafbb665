/* dataset.h - training data for fine-tuning: one token stream (plus, for chat
 * data, a per-token loss mask) cut into (inputs, targets) batches.
 *
 * Input kinds, told apart by content first and file name second:
 *   llm.c token files  a 256 x int32 little-endian header (header[0] magic
 *                      20240520: uint16 tokens, version 1; magic 20240801:
 *                      uint32 tokens, version 2 or 7), then header[2] tokens.
 *                      Recognised by the magic in the first 4 bytes whatever
 *                      the file is called; a ".bin" file without it is an
 *                      error.
 *   .jsonl chat data   one {"messages": [{"role": ..., "content": ...}, ...]}
 *                      per line, rendered with a chat template (below).
 *   anything else      plain text, tokenized whole, without special tokens.
 * Every file may be compressed (.gz, .xz, .zst, ...: see textio.h); the
 * compression suffix is ignored when looking at the extension.
 *
 * An uncompressed llm.c token file is memory-mapped and read in place: the
 * load checks the header against the file's size and every token against
 * the vocabulary in one pass that keeps no copy, and batches convert the
 * tokens they take. It is not held in memory (max_bytes does not apply; the
 * page cache holds what was read). Everything else (compressed token files,
 * text, chat data) is read whole into memory, capped by max_bytes.
 *
 * The stream is split in two: the training part [0, n_train) and the held-out
 * validation part [n_train, n_tokens) (the last val_percent % of the tokens,
 * or of the conversations for chat data). Training batches never read
 * validation tokens and the other way round.
 *
 * Batches are int32 arrays of [B, T] (row b is inputs[b*T .. b*T+T)):
 * targets[i] is the token after inputs[i], or -1 (ignored by the loss) where
 * that token is masked out (chat data: everything but assistant turns).
 */
#ifndef COL_DATASET_H
#define COL_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "status.h"
#include "tokenizer.h"

/* ---- chat templates ---- */


/* One message of a conversation, as a template sees it. content is the JSON
 * string decoded to UTF-8 (NUL-terminated, content_len bytes). */
typedef struct {
    col_chat_role role;
    const char *content;
    size_t content_len;
    int index;       /* 0 .. n_messages-1 within the conversation */
    int n_messages;  /* messages in the conversation */
} col_chat_msg;

/* Where a template writes a rendered message: a sequence of pieces, each
 * tokenized on its own and appended to the stream. Each piece says whether
 * its tokens are trained on (mask 1).
 *   emit_text     template markup: special added tokens such as "<|im_end|>"
 *                 or "<|eot_id|>" are matched when the tokenizer has them
 *   emit_content  message text: special tokens in it stay plain text, so a
 *                 conversation cannot forge turn markers
 *   emit_id       one token id (checked against the tokenizer's vocabulary) */
typedef struct col_chat_out col_chat_out;
col_status col_chat_emit_text(col_chat_out *out, const char *text, size_t len, bool train, col_err *err);
col_status col_chat_emit_content(col_chat_out *out, const char *text, size_t len, bool train, col_err *err);
col_status col_chat_emit_id(col_chat_out *out, int32_t id, bool train, col_err *err);

/* Renders one message by calling col_chat_emit_* on out, in order; called for
 * every message of every conversation in turn (msg->index tells where in the
 * conversation it is, so a template can put a BOS before the first message or
 * an EOS after the last). Contract: train only the tokens the model should
 * learn to produce: an assistant message's content and its end-of-turn
 * marker, not the role header in front of it, and nothing of system or user
 * messages. Pieces are tokenized separately, so keep a trained / untrained
 * boundary where the tokenizer would not merge across it (after a header's
 * "\n" or a special token). Returns COL_OK or an error set in err. */
typedef col_status (*col_chat_render_fn)(void *user, const col_chat_msg *msg, col_chat_out *out, col_err *err);

typedef struct {
    const char *name;          /* for messages: "chatml", "llama3", ... */
    col_chat_render_fn render;
    void *user;                /* passed to render unchanged */
} col_chat_template;

/* The built-in ChatML template: "<|im_start|>{role}\n{content}<|im_end|>\n"
 * per message; trains "{content}<|im_end|>" of assistant messages. */
const col_chat_template *col_chat_template_chatml(void);

/* ---- datasets ---- */

typedef enum {
    COL_DATA_AUTO = 0,   /* by content and extension, as above */
    COL_DATA_TEXT,
    COL_DATA_LLMC,
    COL_DATA_CHAT,
} col_data_kind;

typedef struct {
    col_data_kind kind;               /* COL_DATA_AUTO unless forced */
    const col_tokenizer *tok;         /* needed for text and chat data; unused for llm.c files */
    int32_t vocab_size;               /* > 0: every token must be < it (0: the tokenizer's, if any) */
    const col_chat_template *tmpl;    /* chat template; NULL: ChatML */
    double val_percent;               /* held out for validation, in [0, 100) */
    size_t max_bytes;                 /* file size limit once decompressed (0: none); not for a mapped token file */
} col_dataset_opts;

typedef struct col_dataset col_dataset;

/* Loads path into a new dataset. Every problem fails with one line naming the
 * file (and for .jsonl the line number). */
/* Whether col_dataset_load reads path as chat data (COL_DATA_AUTO): by its
 * extension, .jsonl, with or without a compression suffix. */
bool col_dataset_is_chat_path(const char *path);

col_status col_dataset_load(const char *path, const col_dataset_opts *opts, col_dataset **out, col_err *err);

/* A dataset from tokens in memory (copied); mask may be NULL (all trained),
 * else mask[i] != 0 marks token i as trained on. The validation split is
 * the last val_percent % of the tokens. */
col_status col_dataset_from_tokens(const int32_t *tokens, const uint8_t *mask, size_t n, double val_percent,
                                   col_dataset **out, col_err *err);

void col_dataset_free(col_dataset *ds);

size_t col_dataset_n_tokens(const col_dataset *ds);    /* whole stream */
size_t col_dataset_n_train(const col_dataset *ds);     /* training part [0, n_train) */
/* The stream as an array when it is in memory; NULL for a mapped llm.c
 * token file: use col_dataset_token_at or col_dataset_hash there. */
const int32_t *col_dataset_tokens(const col_dataset *ds);
/* Token i (i < col_dataset_n_tokens) of any dataset. */
int32_t col_dataset_token_at(const col_dataset *ds, size_t i);
/* FNV-1a (64-bit) over the whole stream, each token as its 4 little-endian
 * bytes (uint32): what a run state records to tell the data again. The same
 * tokens always hash the same, whatever the file kind. */
uint64_t col_dataset_hash(const col_dataset *ds);
const uint8_t *col_dataset_mask(const col_dataset *ds); /* NULL when every token is trained */
int64_t col_dataset_n_conversations(const col_dataset *ds); /* chat data: all of them; else 0 */
int64_t col_dataset_n_val_conversations(const col_dataset *ds);

/* ---- training batches ---- */

typedef enum { COL_BATCH_SEQUENTIAL = 0, COL_BATCH_SHUFFLED = 1 } col_batch_mode;

/* Where a batch sequence stands: plain data the caller may save and restore
 * bit for bit to resume exactly. */
typedef struct {
    uint32_t mode;     /* col_batch_mode */
    uint32_t reserved; /* 0 */
    uint64_t seed;     /* shuffled: the col_rng stream */
    uint64_t counter;  /* shuffled: the col_rng counter */
    uint64_t pos;      /* sequential: the start of the next batch in the training stream */
    uint64_t step;     /* batches given so far */
} col_batch_state;

/* A fresh state: sequential from token 0, or shuffled from seed. */
col_batch_state col_batch_state_init(col_batch_mode mode, uint64_t seed);

/* Writes the next training batch into inputs and targets ([B, T] each) and
 * advances st.
 * Sequential (llm.c's DataLoader on one shard): the batch is the B*T+1
 * tokens starting at st->pos; inputs are the first B*T, targets the same
 * shifted by one; st->pos then moves on by B*T, back to 0 when the next
 * batch would run past the training stream.
 * Shuffled: each row is a window of T+1 tokens starting at a position drawn
 * uniformly (col_rng_below) from [0, n_train - T - 1].
 * Fails, saying how many tokens there are and how many are needed, when the
 * training stream has fewer than B*T+1 (sequential) or T+1 (shuffled), and
 * (COL_EFORMAT) when a mapped file now holds a token outside the vocabulary:
 * it was rewritten after the load. */
col_status col_dataset_next_batch(const col_dataset *ds, col_batch_state *st, int B, int T, int32_t *inputs,
                                  int32_t *targets, col_err *err);

/* ---- validation batches ---- */

/* How many validation batches of [B, T] there are: the validation stream
 * cut into consecutive B*T+1 windows that advance by B*T (as sequential
 * mode, without wrapping). 0 when it is shorter than B*T+1. */
int64_t col_dataset_n_val_batches(const col_dataset *ds, int B, int T);
/* Validation batch k (0 <= k < col_dataset_n_val_batches); deterministic. */
col_status col_dataset_val_batch(const col_dataset *ds, int64_t k, int B, int T, int32_t *inputs, int32_t *targets,
                                 col_err *err);

#endif
