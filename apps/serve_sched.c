/* serve_sched.c - continuous batching for colossal-serve (serve_sched.h).
 *
 * Locks: the scheduler's mutex guards its queue, slots and counters; each request's own mutex guards its
 * events, its cancel flag and its reference count (the client and the scheduler each hold one), so a
 * request outlives the scheduler until the client releases it. The scheduler takes its lock before a
 * request's, never the other way round; the model runs with no lock held. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, clock_gettime */
#endif
#include "serve_sched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stopstr.h"
#include "textio.h"

enum { MAX_STOPS = 8 };

/* appends to a text buffer; false once it is out of memory */
static bool sbuf_add(col_strbuf *b, const char *s, size_t n)
{
    col_strbuf_put(b, s, n);
    return !b->oom;
}

typedef struct {
    int choice;
    col_strbuf text;
    serve_finish finish;
} event;

typedef struct {
    int slot;               /* its decoding slot, -1 before admission and after the end */
    int32_t *ctx;           /* prompt then generated ids (the sampler's context) */
    int nctx, ngen, max_gen;
    int32_t last;           /* the token to feed next */
    serve_finish finish;
    col_strbuf pending;           /* text held back: a possible start of a stop string or of a UTF-8 character */
    bool any_text;          /* some text was released (strip_leading_space) */
} choice;

struct serve_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool cancelled;
    /* the parameters */
    int n, n_prompt, max_tokens, nstops;
    col_sample_opts so;
    char *stops[MAX_STOPS];
    bool strip;
    choice *ch;             /* scheduler thread only */
    int live;               /* choices not ended (scheduler side) */
    bool dropped;           /* the scheduler let go of it */
    /* events, read by the client (under mu) */
    event *ev;
    int nev, cap, head;
    int ended;              /* choices whose last event was queued */
    col_strbuf out;               /* the text serve_req_next handed out last */
    int prompt_tokens, completion_tokens;
    char err[COL_ERR_MSG_MAX];
    struct serve_req *next; /* the queue */
};

struct serve_sched {
    serve_sched_config cfg;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    serve_req *qhead, *qtail;
    int queued;
    choice **slot;          /* [slots]: the choice decoding there, or NULL */
    serve_req **slot_req;
    uint64_t requests, tokens;
    int busy;
    /* the scheduler thread's own */
    col_lm_batch *batch;
    col_sampler sampler;
    int *step_slots;
    int32_t *step_tokens;
    float *row;             /* one logits row kept while the choices of a request sample from it */
    int vocab;
};

/* ---- requests ---- */

static void req_unref(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    for (int i = 0; i < r->nev; i++)
        free(r->ev[i].text.p);
    free(r->ev);
    for (int i = 0; r->ch && i < r->n; i++) {
        free(r->ch[i].ctx);
        free(r->ch[i].pending.p);
    }
    free(r->ch);
    for (int i = 0; i < r->nstops; i++)
        free(r->stops[i]);
    free(r->out.p);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* queues text and/or an end for a choice (the scheduler thread); false: out of memory */
static bool req_push(serve_req *r, int c, const char *text, size_t len, serve_finish fin)
{
    bool ok = true;
    pthread_mutex_lock(&r->mu);
    event *last = r->nev > r->head ? &r->ev[r->nev - 1] : NULL;
    if (last && last->choice == c && last->finish == SERVE_FINISH_NONE) { /* not read yet: append */
        ok = sbuf_add(&last->text, text, len);
        last->finish = fin;
    } else {
        if (r->head > 0 && r->head == r->nev)
            r->head = r->nev = 0;
        if (r->nev == r->cap) {
            int cap = r->cap ? 2 * r->cap : 8;
            event *e = realloc(r->ev, sizeof *e * (size_t)cap);
            if (e) {
                r->ev = e;
                r->cap = cap;
            }
        }
        if (r->nev < r->cap) {
            event *e = &r->ev[r->nev];
            memset(e, 0, sizeof *e);
            e->choice = c;
            e->finish = fin;
            if ((ok = sbuf_add(&e->text, text, len)))
                r->nev++;
            else
                free(e->text.p);
        } else {
            ok = false;
        }
    }
    if (fin != SERVE_FINISH_NONE)
        r->ended++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

int serve_req_next(serve_req *r, serve_event *ev, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&r->mu);
    int rc;
    for (;;) {
        if (r->head < r->nev) {
            event *e = &r->ev[r->head++];
            free(r->out.p);
            r->out = e->text; /* handed out until the next call */
            memset(&e->text, 0, sizeof e->text);
            ev->choice = e->choice;
            ev->text = r->out.p ? r->out.p : "";
            ev->len = r->out.len;
            ev->finish = e->finish;
            rc = 1;
            break;
        }
        if (r->ended >= r->n) {
            rc = -1;
            break;
        }
        if (timeout_ms == 0) {
            rc = 0;
            break;
        }
        if (timeout_ms < 0)
            pthread_cond_wait(&r->cv, &r->mu);
        else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0 && r->head >= r->nev && r->ended < r->n) {
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void serve_req_cancel(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->cancelled = true;
    pthread_mutex_unlock(&r->mu);
}

void serve_req_usage(serve_req *r, int *prompt_tokens, int *completion_tokens)
{
    pthread_mutex_lock(&r->mu);
    *prompt_tokens = r->prompt_tokens;
    *completion_tokens = r->completion_tokens;
    pthread_mutex_unlock(&r->mu);
}

const char *serve_req_error(serve_req *r)
{
    return r->err;
}

void serve_req_release(serve_req *r)
{
    if (!r)
        return;
    serve_req_cancel(r);
    req_unref(r);
}

static bool req_cancelled(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    bool c = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* ---- text: released only when final ---- */

/* the bytes at the end of s[0..n) that may still become a stop string or complete a UTF-8 character */
static size_t held_back(const serve_req *r, const char *s, size_t n)
{
    size_t hold = stop_prefix((const char *const *)r->stops, r->nstops, s, n);
    /* an unfinished UTF-8 sequence at the end */
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (want > k && k > hold)
            hold = k;
        break;
    }
    return hold;
}

/* text bytes made valid UTF-8 (an ill-formed sequence becomes U+FFFD) and sent as the choice's */
static bool release(serve_req *r, int c, choice *h, const char *p, size_t n, serve_finish fin)
{
    if (r->strip && !h->any_text)
        while (n > 0 && *p == ' ') {
            p++;
            n--;
        }
    col_strbuf clean = {0};
    bool ok = sbuf_add(&clean, "", 0);
    for (size_t i = 0; ok && i < n;) {
        unsigned char b = (unsigned char)p[i];
        size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 && b >= 0xC2 ? 2 : (b & 0xF0) == 0xE0 ? 3
                   : (b & 0xF8) == 0xF0 && b <= 0xF4 ? 4 : 0;
        bool good = len > 0 && i + len <= n;
        for (size_t k = 1; good && k < len; k++)
            good = ((unsigned char)p[i + k] & 0xC0) == 0x80;
        if (good && len == 3) { /* no overlong forms, no surrogates */
            unsigned char b1 = (unsigned char)p[i + 1];
            good = !(b == 0xE0 && b1 < 0xA0) && !(b == 0xED && b1 >= 0xA0);
        } else if (good && len == 4) {
            unsigned char b1 = (unsigned char)p[i + 1];
            good = !(b == 0xF0 && b1 < 0x90) && !(b == 0xF4 && b1 >= 0x90);
        }
        ok = good ? sbuf_add(&clean, p + i, len) : sbuf_add(&clean, "\xEF\xBF\xBD", 3);
        i += good ? len : 1;
    }
    if (ok && clean.len > 0)
        h->any_text = true;
    ok = ok && (clean.len > 0 || fin != SERVE_FINISH_NONE) ? req_push(r, c, clean.p, clean.len, fin) : ok;
    free(clean.p);
    return ok;
}

/* ---- the scheduler ---- */

static void slot_free(serve_sched *s, choice *h)
{
    if (h->slot < 0)
        return;
    pthread_mutex_lock(&s->mu);
    s->slot[h->slot] = NULL;
    s->slot_req[h->slot] = NULL;
    s->busy--;
    pthread_mutex_unlock(&s->mu);
    h->slot = -1;
}

/* ends choice c of r: the held-back text (unless a stop string ended it) and the reason */
static void end_choice(serve_sched *s, serve_req *r, int c, serve_finish fin)
{
    choice *h = &r->ch[c];
    if (h->finish != SERVE_FINISH_NONE)
        return;
    h->finish = fin;
    slot_free(s, h);
    bool keep = fin == SERVE_FINISH_LENGTH || fin == SERVE_FINISH_STOP;
    release(r, c, h, h->pending.p, keep ? h->pending.len : 0, fin);
    h->pending.len = 0;
    r->live--;
}

/* the scheduler's reference goes when every choice ended (then no slot names r) */
static void drop_if_done(serve_req *r)
{
    if (r->live == 0 && !r->dropped) {
        r->dropped = true;
        req_unref(r);
    }
}

static void fail_req(serve_sched *s, serve_req *r, const col_err *err)
{
    pthread_mutex_lock(&r->mu);
    snprintf(r->err, sizeof r->err, "%s", err->msg[0] ? err->msg : "the model failed");
    pthread_mutex_unlock(&r->mu);
    for (int c = 0; c < r->n; c++)
        end_choice(s, r, c, SERVE_FINISH_ERROR);
}

/* takes the sampled token id of choice c: its text, and whether it ends the choice */
static void take_token(serve_sched *s, serve_req *r, int c, int32_t id)
{
    choice *h = &r->ch[c];
    h->ctx[h->nctx++] = id;
    h->ngen++;
    h->last = id;
    pthread_mutex_lock(&r->mu);
    r->completion_tokens++;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&s->mu);
    s->tokens++;
    pthread_mutex_unlock(&s->mu);
    for (int e = 0; e < s->cfg.neos; e++)
        if (id == s->cfg.eos[e]) {
            end_choice(s, r, c, SERVE_FINISH_STOP);
            return;
        }
    size_t n = 0;
    const char *b = s->cfg.tok ? col_tok_token_bytes(s->cfg.tok, id, &n) : NULL;
    bool special = b && col_tok_is_special(s->cfg.tok, id);
    if (b && n > 0) {
        size_t keep = h->pending.len;
        if (!sbuf_add(&h->pending, b, n)) {
            col_err e = {0};
            col_err_set(&e, COL_ENOMEM, "out of memory");
            fail_req(s, r, &e);
            return;
        }
        long at = stop_find((const char *const *)r->stops, r->nstops, h->pending.p, h->pending.len);
        if (at >= 0) {
            h->pending.len = (size_t)at;
            end_choice(s, r, c, SERVE_FINISH_STOP);
            return;
        }
        if (special) { /* a special token that ends nothing: not shown */
            h->pending.len = keep;
            h->pending.p[keep] = '\0';
        }
        size_t hold = held_back(r, h->pending.p, h->pending.len), ready = h->pending.len - hold;
        if (ready > 0) {
            release(r, c, h, h->pending.p, ready, SERVE_FINISH_NONE);
            memmove(h->pending.p, h->pending.p + ready, hold + 1);
            h->pending.len = hold;
        }
    }
    if (h->ngen >= h->max_gen)
        end_choice(s, r, c, SERVE_FINISH_LENGTH);
}

static col_status sample(serve_sched *s, serve_req *r, int c, const float *logits, col_err *err)
{
    choice *h = &r->ch[c];
    col_sample_opts so = r->so;
    so.seed += (uint64_t)c;
    int32_t id;
    col_status st = col_sample(&s->sampler, logits, h->ctx, h->nctx, &so, (uint64_t)h->ngen, &id, err);
    if (st == COL_OK)
        take_token(s, r, c, id);
    return st;
}

/* the prompt of a newly admitted request: fed once into its first choice's slot, copied to the others' */
static void prefill(serve_sched *s, serve_req *r)
{
    col_err err = {0};
    const float *lg = NULL;
    choice *h0 = &r->ch[0];
    col_lm_batch_reset(s->batch, h0->slot);
    col_status st = col_lm_batch_prefill(s->batch, h0->slot, h0->ctx, r->n_prompt, &lg, &err);
    if (st == COL_OK && r->n > 1)
        memcpy(s->row, lg, sizeof(float) * (size_t)s->vocab);
    for (int c = 1; c < r->n && st == COL_OK; c++)
        st = col_lm_batch_copy_prefix(s->batch, r->ch[c].slot, h0->slot, r->n_prompt, &err);
    for (int c = 0; c < r->n && st == COL_OK; c++)
        st = sample(s, r, c, r->n > 1 ? s->row : lg, &err);
    if (st != COL_OK)
        fail_req(s, r, &err);
    drop_if_done(r);
}

/* moves queued requests into free slots, in order (a request waits until all its choices fit); returns
 * those admitted, linked by next */
static serve_req *admit(serve_sched *s)
{
    serve_req *got = NULL, **tail = &got;
    pthread_mutex_lock(&s->mu);
    while (s->qhead) {
        serve_req *r = s->qhead;
        if (req_cancelled(r)) {
            s->qhead = r->next;
            s->queued--;
            r->next = NULL;
            pthread_mutex_unlock(&s->mu);
            for (int c = 0; c < r->n; c++)
                end_choice(s, r, c, SERVE_FINISH_CANCELLED);
            drop_if_done(r);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (s->cfg.slots - s->busy < r->n)
            break;
        s->qhead = r->next;
        s->queued--;
        r->next = NULL;
        for (int c = 0, k = 0; c < r->n; c++) {
            while (s->slot[k])
                k++;
            s->slot[k] = &r->ch[c];
            s->slot_req[k] = r;
            r->ch[c].slot = k;
            s->busy++;
        }
        *tail = r;
        tail = &r->next;
    }
    if (!s->qhead)
        s->qtail = NULL;
    pthread_mutex_unlock(&s->mu);
    return got;
}

/* one batched forward pass over every running choice's last token */
static void step(serve_sched *s)
{
    int k = 0;
    for (int i = 0; i < s->cfg.slots; i++) { /* only this thread changes the slots' owners */
        choice *h = s->slot[i];
        if (!h)
            continue;
        serve_req *r = s->slot_req[i];
        if (req_cancelled(r)) {
            end_choice(s, r, (int)(h - r->ch), SERVE_FINISH_CANCELLED);
            drop_if_done(r);
            continue;
        }
        s->step_slots[k] = i;
        s->step_tokens[k++] = h->last;
    }
    if (k == 0)
        return;
    col_err err = {0};
    const float *lg = NULL;
    col_status st = col_lm_batch_step(s->batch, s->step_slots, s->step_tokens, k, &lg, &err);
    for (int i = 0; i < k; i++) {
        int slot = s->step_slots[i];
        choice *h = s->slot[slot];
        serve_req *r = s->slot_req[slot];
        if (!h || h->finish != SERVE_FINISH_NONE)
            continue;
        col_err e2 = {0};
        if (st != COL_OK)
            fail_req(s, r, &err);
        else if (sample(s, r, (int)(h - r->ch), lg + (size_t)i * (size_t)s->vocab, &e2) != COL_OK)
            fail_req(s, r, &e2);
        drop_if_done(r);
    }
}

static void *run(void *arg)
{
    serve_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->qhead && s->busy == 0 && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        bool done = s->stopping && !s->qhead && s->busy == 0;
        pthread_mutex_unlock(&s->mu);
        if (done)
            break;
        for (serve_req *r = admit(s), *next; r; r = next) {
            next = r->next;
            r->next = NULL;
            prefill(s, r);
        }
        step(s);
    }
    return NULL;
}

/* ---- the public side ---- */

col_status serve_sched_start(const serve_sched_config *cfg, serve_sched **out, col_err *err)
{
    *out = NULL;
    if (cfg->slots < 1 || cfg->ctx < 2 || cfg->queue_max < 0)
        return col_err_set(err, COL_EINVAL, "serve: %d slots, %d positions, a queue of %d", cfg->slots, cfg->ctx,
                           cfg->queue_max);
    serve_sched *s = calloc(1, sizeof *s);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "serve: out of memory");
    s->cfg = *cfg;
    s->vocab = col_lm_trainer_config(cfg->tr)->model.vocab_size;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->slot = calloc((size_t)cfg->slots, sizeof *s->slot);
    s->slot_req = calloc((size_t)cfg->slots, sizeof *s->slot_req);
    s->step_slots = calloc((size_t)cfg->slots, sizeof *s->step_slots);
    s->step_tokens = calloc((size_t)cfg->slots, sizeof *s->step_tokens);
    s->row = calloc((size_t)s->vocab, sizeof *s->row);
    col_status st = !s->slot || !s->slot_req || !s->step_slots || !s->step_tokens || !s->row
                        ? col_err_set(err, COL_ENOMEM, "serve: out of memory")
                        : col_sampler_init(&s->sampler, s->vocab, err);
    if (st == COL_OK)
        st = col_lm_batch_open(cfg->tr, cfg->slots, cfg->ctx, &s->batch, err);
    if (st == COL_OK && pthread_create(&s->th, NULL, run, s) != 0)
        st = col_err_set(err, COL_ENOMEM, "serve: cannot start the scheduler thread");
    if (st != COL_OK) {
        serve_sched_stop(s);
        return st;
    }
    s->started = true;
    *out = s;
    return COL_OK;
}

void serve_sched_stop(serve_sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started)
        pthread_join(s->th, NULL);
    col_lm_batch_close(s->batch);
    col_sampler_free(&s->sampler);
    free(s->slot);
    free(s->slot_req);
    free(s->step_slots);
    free(s->step_tokens);
    free(s->row);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static col_status check_params(const serve_sched *s, const serve_params *p, col_err *err)
{
    if (p->n_prompt < 1 || !p->prompt)
        return col_err_set(err, COL_EINVAL, "prompt: empty");
    if (p->n_prompt >= s->cfg.ctx)
        return col_err_set(err, COL_EINVAL, "prompt: %d tokens leave no room to generate in the context of %d",
                           p->n_prompt, s->cfg.ctx);
    if (p->max_tokens < 1)
        return col_err_set(err, COL_EINVAL, "max_tokens: %d (at least 1)", p->max_tokens);
    if (p->n < 1 || p->n > s->cfg.slots)
        return col_err_set(err, COL_EINVAL, "n: %d (1..%d, the server's parallel sequences)", p->n, s->cfg.slots);
    if (p->nstops < 0 || p->nstops > MAX_STOPS)
        return col_err_set(err, COL_EINVAL, "stop: %d strings (at most %d)", p->nstops, MAX_STOPS);
    for (int i = 0; i < p->nstops; i++)
        if (!p->stops[i] || !p->stops[i][0])
            return col_err_set(err, COL_EINVAL, "stop: an empty string");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab)
            return col_err_set(err, COL_EINVAL, "prompt: token id %d is outside the vocabulary of %d", p->prompt[i],
                               s->vocab);
    col_err e2 = {0};
    if (col_sample_check(&p->so, &e2) != COL_OK)
        return col_err_set(err, COL_EINVAL, "%s", e2.msg);
    return COL_OK;
}

col_status serve_submit(serve_sched *s, const serve_params *p, serve_req **out, col_err *err)
{
    *out = NULL;
    col_status st = check_params(s, p, err);
    if (st != COL_OK)
        return st;
    serve_req *r = calloc(1, sizeof *r);
    if (!r)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2;
    r->n = p->n;
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->so = p->so;
    r->strip = p->strip_leading_space;
    r->live = p->n;
    r->prompt_tokens = p->n_prompt;
    r->ch = calloc((size_t)p->n, sizeof *r->ch);
    bool ok = r->ch != NULL;
    int room = s->cfg.ctx - p->n_prompt;
    for (int c = 0; ok && c < p->n; c++) {
        choice *h = &r->ch[c];
        h->slot = -1;
        h->max_gen = p->max_tokens < room ? p->max_tokens : room;
        ok = (h->ctx = malloc(sizeof *h->ctx * (size_t)s->cfg.ctx)) != NULL;
        if (ok) {
            memcpy(h->ctx, p->prompt, sizeof *h->ctx * (size_t)p->n_prompt);
            h->nctx = p->n_prompt;
        }
    }
    for (int i = 0; ok && i < p->nstops; i++, r->nstops++)
        ok = (r->stops[i] = strdup(p->stops[i])) != NULL;
    if (!ok) {
        r->refs = 1;
        req_unref(r);
        return col_err_set(err, COL_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&s->mu);
    if (s->stopping)
        st = col_err_set(err, COL_ESTATE, "the server is shutting down");
    else if (s->queued >= s->cfg.queue_max && (s->qhead || s->cfg.slots - s->busy < p->n))
        st = col_err_set(err, COL_EBUSY, "the server is busy: %d requests are waiting; try again shortly", s->queued);
    if (st == COL_OK) {
        if (s->qtail)
            s->qtail->next = r;
        else
            s->qhead = r;
        s->qtail = r;
        s->queued++;
        s->requests++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (st != COL_OK) {
        r->refs = 1;
        req_unref(r);
        return st;
    }
    *out = r;
    return COL_OK;
}

void serve_sched_stats(serve_sched *s, serve_stats *out)
{
    pthread_mutex_lock(&s->mu);
    out->slots = s->cfg.slots;
    out->busy_slots = s->busy;
    out->queued = s->queued;
    out->queue_max = s->cfg.queue_max;
    out->requests = s->requests;
    out->tokens_generated = s->tokens;
    pthread_mutex_unlock(&s->mu);
}
