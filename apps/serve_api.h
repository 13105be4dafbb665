/* serve_api.h - colossal-serve's OpenAI API without the network: a request
 * body (JSON, untrusted) read into the scheduler's parameters, and the
 * response objects written in OpenAI's shapes (chat.completion,
 * chat.completion.chunk, text_completion, model list, error object).
 *
 * Requests:
 *   /v1/chat/completions  messages: [{role: system|developer|user|assistant,
 *                         content: string | [{type: "text", text}]}], rendered
 *                         with the model's chat template (chat_template.h) and
 *                         the generation prompt; the family's stop strings are
 *                         added to the request's (at most SERVE_API_MAX_STOPS in
 *                         all, the scheduler's limit)
 *   /v1/completions       prompt: a string, [string], [ids] or [[ids]]
 *   both                  model, max_tokens (chat: also max_completion_tokens),
 *                         temperature 0..2, top_p (0, 1], top_k (>= 0; -1 =
 *                         off), repetition_penalty (> 0), seed, n (1..the
 *                         slots), stop (a string or up to 4), stream,
 *                         stream_options.include_usage
 * Unknown fields are ignored; known ones that colossal cannot honour
 * (logprobs, tools, a non-zero frequency/presence penalty, ...) are refused
 * by name. A bad request gives a serve_api_error: the HTTP status and the
 * error object's fields, the param named as OpenAI names it. */
#ifndef COL_APPS_SERVE_API_H
#define COL_APPS_SERVE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "serve_sched.h"
#include "tokenizer.h"

typedef enum { SERVE_API_CHAT, SERVE_API_COMPLETION } serve_api_kind;

enum {
    SERVE_API_MAX_REQ_STOPS = 4,   /* OpenAI's limit on a request's stop strings */
    SERVE_API_MAX_STOPS = 8,       /* with the chat family's own: what the scheduler takes (serve_sched.h) */
    SERVE_API_COMPLETION_MAX_TOKENS = 16,               /* /v1/completions' default max_tokens (OpenAI's) */
};

/* What requests are checked against. */
typedef struct {
    const col_tokenizer *tok;  /* NULL: prompts only as ids, no chat */
    int vocab;                 /* prompt ids must be below it */
    int ctx;                   /* positions per sequence (prompt + generated) */
    int max_n;                 /* the most choices per request (the slots) */
    const char *model_name;    /* the only model served */
    bool has_chat;             /* family is the chat template */
    col_chat_family family;
} serve_api_model;

/* An OpenAI error: {"error": {"message", "type", "param", "code"}} and its HTTP status. */
typedef struct {
    int status;          /* 400, 401, 404, 405, 413, 500, 503 */
    const char *type;    /* "invalid_request_error", "server_error", ... (a literal) */
    const char *code;    /* NULL: null */
    char param[96];      /* "": null */
    char message[640];
} serve_api_error;

void serve_api_set_error(serve_api_error *e, int status, const char *type, const char *code, const char *param,
                         const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error object as JSON (malloc'ed; NULL when out of memory). */
char *serve_api_error_json(const serve_api_error *e);

/* A request read from its body. */
typedef struct {
    serve_api_kind kind;
    int32_t *prompt;           /* the prompt's ids (chat: the rendered conversation's) */
    int n_prompt;
    int max_tokens;            /* as asked, or the default (chat: what the context leaves) */
    int n;
    col_sample_opts so;
    char *stops[SERVE_API_MAX_STOPS]; /* the request's, then (chat) the family's, each once */
    int nstops;
    bool stream, include_usage;
    bool strip_leading_space;  /* chat with llama2: the scheduler drops a reply's leading spaces (as colossal-chat) */
} serve_api_request;

/* Reads body[0..len) for an endpoint of kind. seed: the seed when the request gives none.
 * false with *e filled (400, or 404 for another model) on a bad request, or 500 when out of memory. */
bool serve_api_parse(const serve_api_model *m, serve_api_kind kind, const char *body, size_t len, uint64_t seed,
                     serve_api_request *out, serve_api_error *e);
void serve_api_request_free(serve_api_request *r);
/* The scheduler's parameters of r (pointing into r). */
void serve_api_params(const serve_api_request *r, serve_params *p);

/* ---- responses (each malloc'ed JSON text, NULL when out of memory) ---- */

/* What every object of one response shares. */
typedef struct {
    serve_api_kind kind;
    char id[48];               /* "chatcmpl-..." / "cmpl-..." */
    long long created;         /* Unix seconds */
    const char *model;
} serve_api_head;

/* id from a 64-bit random value */
void serve_api_head_init(serve_api_head *h, serve_api_kind kind, const char *model, long long created,
                         uint64_t random);
/* "stop", "length"; NULL while running (null in JSON) */
const char *serve_api_finish_name(serve_finish f);

/* The whole response: choice i's text texts[i] (lens[i] bytes) and its finish. */
char *serve_api_response_json(const serve_api_head *h, int n, char *const *texts, const size_t *lens,
                              const serve_finish *finish, int prompt_tokens, int completion_tokens);
/* One chunk of a stream for choice i: first (chat): the delta carries the role; text may be empty;
 * finish != NONE: the choice's last chunk. with_usage: "usage": null (stream_options.include_usage). */
char *serve_api_chunk_json(const serve_api_head *h, int choice, bool first, const char *text, size_t len,
                           serve_finish finish, bool with_usage);
/* The stream's usage chunk (choices []). */
char *serve_api_usage_chunk_json(const serve_api_head *h, int prompt_tokens, int completion_tokens);
/* GET /v1/models: the list; GET /v1/models/NAME: the model object */
char *serve_api_models_json(const serve_api_model *m, long long created);
char *serve_api_model_json(const serve_api_model *m, long long created);

/* s[0..len) as a JSON string literal, quotes included (malloc'ed): '"', '\\' and control bytes (NUL
 * included) escaped, valid UTF-8 kept, each byte of an invalid sequence written as U+FFFD. */
char *serve_api_json_string(const char *s, size_t len);

/* Whether given[0..given_len) equals key (an API key), in a time that depends on key's length only. */
bool serve_api_key_equal(const char *key, const char *given, size_t given_len);

#endif
