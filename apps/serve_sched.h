/* serve_sched.h - colossal-serve's scheduler: continuous batching of
 * generation requests over one model.
 *
 * One scheduler thread owns the model session. Requests wait in a bounded
 * queue; a request's choices (OpenAI's n) take decoding slots when slots are
 * free. Each step of the loop feeds the prompts of newly admitted choices
 * (prefill, one pass per choice) and then runs ONE batched forward pass over
 * every active choice's last token (col_lm_batch_step), samples each choice's
 * next token with its own settings and seed, and turns it into text: bytes
 * are released only when they are final (whole UTF-8 characters, never the
 * start of a stop string). A finished or cancelled choice frees its slot at
 * once, and a waiting one joins at the next step.
 *
 * HTTP handler threads submit requests and read their events; every call
 * here is thread-safe. At temperature 0 a choice's tokens are the greedy ids
 * the model gives that prompt alone. */
#ifndef COL_APPS_SERVE_SCHED_H
#define COL_APPS_SERVE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lm_trainer.h"
#include "sampling.h"
#include "status.h"
#include "tokenizer.h"

typedef struct serve_sched serve_sched;
typedef struct serve_req serve_req;

typedef struct {
    col_lm_trainer *tr;          /* the model session (borrowed; used only by the scheduler thread) */
    const col_tokenizer *tok;    /* text out; borrowed */
    int slots;                   /* sequences decoded together (--parallel) */
    int ctx;                     /* positions per sequence: prompt + generated */
    int queue_max;               /* requests waiting for a slot beyond which serve_submit refuses */
    const int32_t *eos;          /* token ids that end a choice (finish "stop") */
    int neos;
} serve_sched_config;

/* Why a choice ended. */
typedef enum {
    SERVE_FINISH_NONE = 0,       /* still running */
    SERVE_FINISH_STOP,           /* an end-of-sequence token or a stop string */
    SERVE_FINISH_LENGTH,         /* max_tokens, or the context is full */
    SERVE_FINISH_CANCELLED,      /* serve_req_cancel, or the scheduler stopped before it ran */
    SERVE_FINISH_ERROR,          /* the model failed; serve_req_error says why */
} serve_finish;

/* One request. prompt is copied by serve_submit; stops are copied too. */
typedef struct {
    const int32_t *prompt;
    int n_prompt;                /* >= 1 */
    int max_tokens;              /* >= 1; n_prompt + max_tokens is clamped to ctx (finish "length") */
    int n;                       /* choices, 1..slots */
    col_sample_opts so;          /* temperature 0 = greedy; choice i draws with seed so.seed + i */
    const char *const *stops;    /* up to 8 stop strings (a request's 4, OpenAI's limit, and its chat template's
                                    own), none empty */
    int nstops;
    bool strip_leading_space;    /* drop the spaces a choice's text starts with (LLaMA-2's chat format) */
} serve_params;

col_status serve_sched_start(const serve_sched_config *cfg, serve_sched **out, col_err *err);
/* Stops taking requests (serve_submit then fails with COL_ESTATE), lets every queued and running request
 * finish, joins the thread and frees it all. Requests not yet released stay valid until serve_req_release. */
void serve_sched_stop(serve_sched *s);

/* Queues a request. COL_EBUSY: the queue is full (HTTP 503); COL_EINVAL: bad parameters (the message names
 * the field as OpenAI's API does: max_tokens, n, stop, ...); COL_ESTATE: the scheduler is stopping. */
col_status serve_submit(serve_sched *s, const serve_params *p, serve_req **out, col_err *err);

/* What serve_req_next returns. */
typedef struct {
    int choice;                  /* 0..n-1 */
    const char *text;            /* new final text of that choice (valid until the next call), may be empty */
    size_t len;
    serve_finish finish;         /* != NONE: the choice ended with this event */
} serve_event;

/* Waits up to timeout_ms (< 0: for ever) for the next event of r. Returns 1 with *ev filled, 0 on timeout,
 * -1 when every choice has ended and every event was read. */
int serve_req_next(serve_req *r, serve_event *ev, int timeout_ms);
/* The client went away: the choices end (finish CANCELLED) and free their slots at the next step. */
void serve_req_cancel(serve_req *r);
/* Token counts so far: the prompt's (counted once) and the generated tokens over all choices. */
void serve_req_usage(serve_req *r, int *prompt_tokens, int *completion_tokens);
/* The model's message after SERVE_FINISH_ERROR ("" otherwise). */
const char *serve_req_error(serve_req *r);
/* Frees a request (cancelling it if it still runs). */
void serve_req_release(serve_req *r);

/* Live counters for /health and the access log. */
typedef struct {
    int slots, busy_slots, queued, queue_max;
    uint64_t requests, tokens_generated;
} serve_stats;
void serve_sched_stats(serve_sched *s, serve_stats *out);

#endif
