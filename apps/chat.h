/* chat.h - the parts of colossal-chat shared by apps/chat.c (options, modes,
 * the chat loop) and apps/chat_gen.c (generation and the conversation). */
#ifndef COL_APPS_CHAT_H
#define COL_APPS_CHAT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "chat_template.h"
#include "device.h"
#include "lm_trainer.h"
#include "sampling.h"
#include "tokenizer.h"

/* Why a reply ended. */
typedef enum { CHAT_FINISH_LENGTH, CHAT_FINISH_EOS, CHAT_FINISH_STOP, CHAT_FINISH_INTERRUPT } chat_finish;

/* Generation state for one model: the key/value cache and the tokens in it
 * (kept across turns: a prompt that extends them is fed from where they
 * end), the sampler, the stop conditions. */
typedef struct {
    col_lm_trainer *tr;
    const col_tokenizer *tok;   /* NULL: ids only, no text and no stop strings */
    int vocab, ctx;
    int max_new;                /* most tokens per reply; -1: the room the context has left after the prompt */
    int reserve;                /* the room a prompt must leave for the reply: max_new, or by default
                                   min(256, ctx / 4) (chat_default_reserve) */
    col_sample_opts so;
    col_sampler sampler;
    uint64_t draws;             /* the sampler's step counter over the whole session */
    const char **stops;         /* stop strings (family's and --stop), nstops of them */
    int nstops;
    int32_t eos[2];
    int neos;
    bool strip_leading_space;   /* drop the spaces a reply starts with (llama2 strips them too) */
    int32_t *cache;             /* the ids fed into the key/value cache, ncache of them */
    int ncache;
    volatile sig_atomic_t *interrupted; /* set by SIGINT: stop the reply */
} chat_engine;

/* What one generation produced. */
typedef struct {
    int32_t *ids;   /* the generated ids (the EOS or the token that completed a stop string included) */
    int nids;
    char *text;     /* the reply as printed (stop string left out), NUL-terminated */
    size_t len;
    chat_finish finish;
    int nprompt;        /* prompt ids fed to the model (those the key/value cache already held left out) */
    double prompt_s, gen_s; /* seconds spent on feeding them, and on generating the reply */
} chat_reply;

/* The default room kept for a reply: min(256, ctx / 4), at least 1. */
int chat_default_reserve(int ctx);

col_status chat_engine_init(chat_engine *g, col_lm_trainer *tr, const col_tokenizer *tok, int vocab, int ctx,
                            col_err *err);
void chat_engine_free(chat_engine *g);
void chat_reply_free(chat_reply *r);

/* Generates after prompt[0..n) (n + max_new must fit the context; by
 * default n < ctx, the reply taking the rest), writing the reply's text to
 * out as it becomes final (out may be NULL). */
col_status chat_generate(chat_engine *g, const int32_t *prompt, int n, FILE *out, chat_reply *r, col_err *err);

/* A conversation rendered with a chat template family. */
typedef struct {
    col_chat_family family;
    char *system;               /* NULL: none */
    col_chat_message *msgs;     /* user / assistant turns (content malloc'ed) */
    int n, cap;
    bool told_drop;             /* the "dropping the oldest turns" note was printed */
} chat_conv;

void chat_conv_free(chat_conv *c);
void chat_conv_reset(chat_conv *c);
col_status chat_conv_set_system(chat_conv *c, const char *text, col_err *err); /* NULL or "" clears it */

/* One chat turn: adds the user message, drops the oldest turns while the
 * rendered conversation + g->reserve tokens exceeds the context (a note on
 * stderr the first time), keeps only the end of a message too long alone (a
 * note on stderr, as llama.cpp shifts its context), generates and adds the
 * reply. *skipped: the message does not fit even cut to nothing (the
 * system prompt is too long; an error line was printed; nothing was
 * added). */
col_status chat_turn(chat_engine *g, chat_conv *c, const char *user, FILE *out, chat_reply *r, bool *skipped,
                     col_err *err);

/* Encodes text for the model (flags COL_TOK_*). */
col_status chat_encode(const chat_engine *g, const char *text, unsigned flags, int32_t **ids, int *n, col_err *err);

/* Completes text as it is (BOS added, special tokens parsed): a text longer
 * than the context leaves with g->reserve tokens for the reply keeps its end
 * (its BOS kept; a note on stderr). An error for a text of no tokens. */
col_status chat_complete(chat_engine *g, const char *text, FILE *out, chat_reply *r, col_err *err);

/* ---- chat_repl.c: the turns of a session ---- */
typedef struct {
    chat_engine *g;
    chat_conv *conv;        /* NULL: raw completion */
    bool interactive;
    bool stats;             /* a tokens/s line on stderr after each reply (--verbose, /stats) */
    int failures;
    const app_device *dev;    /* where the model runs: said when an interactive session starts */
    const char *budget;     /* on a GPU without --gpu-mem: the compute tier's size chosen ("" otherwise) */
} chat_session;

extern volatile sig_atomic_t chat_interrupted; /* SIGINT during a reply (set by the handler chat_handle_line sets) */
extern const char chat_commands_help[];        /* the commands, one a line */

/* One line of input: a command or a turn. Returns false to quit. */
bool chat_handle_line(chat_session *s, const char *line, col_err *err);
/* The interactive loop on a terminal; the loop over stdin's lines (exit code: 1 if a turn failed). */
int chat_run_interactive(chat_session *s, col_err *err);
int chat_run_piped(chat_session *s, col_err *err);
/* "(N tokens in S s, T tokens/s; prompt: ...)" on stderr */
void chat_print_stats(const chat_reply *r);
/* chat.c: one line on stderr for a failed call, naming the option of the setting at fault */
void chat_print_err(const col_err *e);

#endif
