/* chat_gen.c - colossal-chat's generation: the key/value cache kept across
 * turns, sampling, streaming output that holds back what may be the start of
 * a stop string, and conversations that drop their oldest turns to fit the
 * context (see chat.h). */
#include "chat.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stopstr.h"
#include "termsafe.h"
#include "timer.h"

col_status chat_engine_init(chat_engine *g, col_lm_trainer *tr, const col_tokenizer *tok, int vocab, int ctx,
                            col_err *err)
{
    memset(g, 0, sizeof *g);
    g->tr = tr;
    g->tok = tok;
    g->vocab = vocab;
    g->ctx = ctx;
    g->so = col_sample_defaults();
    g->cache = malloc(sizeof *g->cache * (size_t)ctx);
    if (!g->cache)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    return col_sampler_init(&g->sampler, vocab, err);
}

int chat_default_reserve(int ctx)
{
    int r = ctx / 4 < 256 ? ctx / 4 : 256;
    return r > 0 ? r : 1;
}

void chat_engine_free(chat_engine *g)
{
    col_sampler_free(&g->sampler);
    free(g->cache);
    g->cache = NULL;
}

void chat_reply_free(chat_reply *r)
{
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof *r);
}

/* a growable byte buffer */
typedef struct {
    char *p;
    size_t n, cap;
} buf_t;

static bool buf_add(buf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2 + 64;
        char *q = realloc(b->p, cap);
        if (!q)
            return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

/* the streaming state of one reply */
typedef struct {
    buf_t pending; /* text not printed yet: it may be the start of a stop string */
    buf_t text;    /* what was printed */
    FILE *out;
    bool tty;      /* out is a terminal: control characters are shown, not sent (termsafe.h) */
    term_safe safe;
} stream_t;

static bool emit(const chat_engine *g, stream_t *s, const char *p, size_t n)
{
    if (g->strip_leading_space && s->text.n == 0)
        while (n > 0 && *p == ' ') {
            p++;
            n--;
        }
    if (n == 0)
        return true;
    if (s->out && s->tty) {
        term_safe_write(&s->safe, s->out, p, n);
        fflush(s->out);
    } else if (s->out) {
        fwrite(p, 1, n, s->out);
        fflush(s->out);
    }
    return buf_add(&s->text, p, n);
}

/* Takes the bytes of token id; returns true when a stop string completed. */
static bool stream_token(const chat_engine *g, stream_t *s, int32_t id, bool *oom)
{
    size_t n = 0;
    const char *b = col_tok_token_bytes(g->tok, id, &n);
    if (!b || n == 0)
        return false;
    size_t keep = s->pending.n;
    if (!buf_add(&s->pending, b, n)) {
        *oom = true;
        return false;
    }
    long at = stop_find(g->stops, g->nstops, s->pending.p, s->pending.n);
    if (at >= 0) {
        *oom = !emit(g, s, s->pending.p, (size_t)at);
        return true;
    }
    if (col_tok_is_special(g->tok, id)) { /* a special token that ends nothing: not shown */
        s->pending.n = keep;
        s->pending.p[keep] = '\0';
        return false;
    }
    size_t hold = stop_prefix(g->stops, g->nstops, s->pending.p, s->pending.n), ready = s->pending.n - hold;
    if (ready > 0) {
        *oom = !emit(g, s, s->pending.p, ready);
        memmove(s->pending.p, s->pending.p + ready, hold + 1);
        s->pending.n = hold;
    }
    return false;
}

static col_status feed(chat_engine *g, const int32_t *ids, int n, const float **logits, col_err *err)
{
    col_status st = col_lm_trainer_decode(g->tr, ids, n, logits, err);
    if (st != COL_OK) {
        g->ncache = 0; /* the cache no longer says what it holds */
        return st;
    }
    memcpy(g->cache + g->ncache, ids, sizeof *ids * (size_t)n);
    g->ncache += n;
    return COL_OK;
}

col_status chat_generate(chat_engine *g, const int32_t *prompt, int n, FILE *out, chat_reply *r, col_err *err)
{
    memset(r, 0, sizeof *r);
    if (n < 1 || n >= g->ctx || (g->max_new >= 0 && n + g->max_new > g->ctx))
        return col_err_set(err, COL_EINVAL, "a prompt of %d tokens and %d new tokens do not fit the context of %d",
                           n, g->max_new >= 0 ? g->max_new : 1, g->ctx);
    int max_new = g->max_new >= 0 ? g->max_new : g->ctx - n;
    r->ids = malloc(sizeof *r->ids * ((size_t)max_new + 1));
    if (!r->ids)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    /* keep the cache when the prompt extends what it holds (the next turn of a conversation) */
    int start = 0;
    if (g->ncache > 0 && g->ncache < n && memcmp(g->cache, prompt, sizeof *prompt * (size_t)g->ncache) == 0)
        start = g->ncache;
    col_status st = COL_OK;
    if (start == 0) {
        g->ncache = 0;
        st = col_lm_trainer_decode_reset(g->tr, g->ctx, err);
    }
    const float *logits = NULL;
    double t0 = col_seconds();
    if (st == COL_OK)
        st = feed(g, prompt + start, n - start, &logits, err);
    double t1 = col_seconds();
    stream_t s = {.out = g->tok ? out : NULL, .tty = g->tok && out && isatty(fileno(out))};
    bool oom = false;
    r->finish = CHAT_FINISH_LENGTH;
    for (int k = 0; k < max_new && st == COL_OK; k++) {
        if (g->interrupted && *g->interrupted) {
            r->finish = CHAT_FINISH_INTERRUPT;
            break;
        }
        int32_t id;
        st = col_sample(&g->sampler, logits, g->cache, g->ncache, &g->so, g->draws++, &id, err);
        if (st != COL_OK)
            break;
        r->ids[r->nids++] = id;
        bool eos = false;
        for (int e = 0; e < g->neos; e++)
            eos |= id == g->eos[e];
        if (eos) {
            r->finish = CHAT_FINISH_EOS;
            break;
        }
        if (g->tok && stream_token(g, &s, id, &oom)) {
            r->finish = CHAT_FINISH_STOP;
            break;
        }
        if (oom) {
            st = col_err_set(err, COL_ENOMEM, "out of memory");
            break;
        }
        if (k + 1 < max_new)
            st = feed(g, &id, 1, &logits, err);
    }
    r->nprompt = n - start;
    r->prompt_s = t1 - t0;
    r->gen_s = col_seconds() - t1;
    if (st == COL_OK && r->finish != CHAT_FINISH_STOP && s.pending.n > 0) /* no stop string came: it is text */
        oom = !emit(g, &s, s.pending.p, s.pending.n);
    if (s.out && s.tty)
        term_safe_flush(&s.safe, s.out);
    free(s.pending.p);
    if (st == COL_OK && oom)
        st = col_err_set(err, COL_ENOMEM, "out of memory");
    if (st == COL_OK && !s.text.p && !buf_add(&s.text, "", 0))
        st = col_err_set(err, COL_ENOMEM, "out of memory");
    r->text = s.text.p;
    r->len = s.text.n;
    if (st != COL_OK)
        chat_reply_free(r);
    return st;
}

col_status chat_encode(const chat_engine *g, const char *text, unsigned flags, int32_t **ids, int *n, col_err *err)
{
    size_t m;
    *ids = NULL;
    if (!g->tok)
        return col_err_set(err, COL_EINVAL, "text needs a tokenizer");
    col_status st = col_tok_encode_ex(g->tok, text, strlen(text), flags, ids, &m, err);
    if (st != COL_OK)
        return st;
    if (m > INT_MAX) {
        free(*ids);
        *ids = NULL;
        return col_err_set(err, COL_EINVAL, "the text is more than %d tokens", INT_MAX);
    }
    *n = (int)m;
    return COL_OK;
}

col_status chat_complete(chat_engine *g, const char *text, FILE *out, chat_reply *r, col_err *err)
{
    int32_t *ids = NULL;
    int n = 0;
    memset(r, 0, sizeof *r);
    col_status st = chat_encode(g, text, COL_TOK_ADD_SPECIAL | COL_TOK_PARSE_SPECIAL, &ids, &n, err);
    if (st != COL_OK)
        return st;
    int keep = g->ctx - g->reserve, bos = n > 0 && ids[0] == col_tok_bos_id(g->tok) ? 1 : 0;
    if (n < 1) {
        st = col_err_set(err, COL_EINVAL, "the text gives no tokens: nothing to continue");
    } else if (n > keep) {
        fprintf(stderr, "colossal-chat: the text is %d tokens, more than the context of %d leaves with %d for the "
                        "reply: completing its last %d tokens\n", n, g->ctx, g->reserve, keep - bos);
        memmove(ids + bos, ids + n - (keep - bos), sizeof *ids * (size_t)(keep - bos));
        n = keep;
    }
    if (st == COL_OK)
        st = chat_generate(g, ids, n, out, r, err);
    free(ids);
    return st;
}

/* ---- conversations ---- */

void chat_conv_reset(chat_conv *c)
{
    for (int i = 0; i < c->n; i++)
        free((char *)c->msgs[i].content);
    c->n = 0;
}

void chat_conv_free(chat_conv *c)
{
    chat_conv_reset(c);
    free(c->msgs);
    free(c->system);
    c->msgs = NULL;
    c->system = NULL;
    c->cap = 0;
}

col_status chat_conv_set_system(chat_conv *c, const char *text, col_err *err)
{
    free(c->system);
    c->system = NULL;
    if (text && *text && !(c->system = strdup(text)))
        return col_err_set(err, COL_ENOMEM, "out of memory");
    return COL_OK;
}

static col_status conv_add(chat_conv *c, col_chat_role role, const char *text, col_err *err)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        col_chat_message *m = realloc(c->msgs, sizeof *m * (size_t)cap);
        if (!m)
            return col_err_set(err, COL_ENOMEM, "out of memory");
        c->msgs = m;
        c->cap = cap;
    }
    char *s = strdup(text);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    c->msgs[c->n++] = (col_chat_message){role, s};
    return COL_OK;
}

static void conv_drop_first(chat_conv *c, int k)
{
    for (int i = 0; i < k; i++)
        free((char *)c->msgs[i].content);
    memmove(c->msgs, c->msgs + k, sizeof *c->msgs * (size_t)(c->n - k));
    c->n -= k;
}

/* the conversation (system prompt first) rendered with the generation prompt and encoded */
static col_status conv_encode(const chat_engine *g, const chat_conv *c, int32_t **ids, int *n, col_err *err)
{
    col_chat_message *all = malloc(sizeof *all * (size_t)(c->n + 1));
    if (!all)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    int k = 0;
    if (c->system)
        all[k++] = (col_chat_message){COL_ROLE_SYSTEM, c->system};
    memcpy(all + k, c->msgs, sizeof *all * (size_t)c->n);
    char *text;
    size_t len;
    col_status st = col_chat_render(c->family, all, k + c->n, true, &text, &len, NULL, err);
    free(all);
    if (st != COL_OK)
        return st;
    /* the template writes BOS as text: parse special tokens, add none */
    st = chat_encode(g, text, COL_TOK_PARSE_SPECIAL, ids, n, err);
    free(text);
    return st;
}

/* Cuts the start of the newest message until the conversation leaves g->reserve tokens for the reply (a binary
 * search over its character boundaries). Returns false when even the empty message does not fit. */
static bool conv_keep_end(const chat_engine *g, chat_conv *c, int32_t **ids, int *n, col_status *st, col_err *err)
{
    char *msg = (char *)c->msgs[c->n - 1].content;
    size_t len = strlen(msg), lo = 0, hi = len, best = SIZE_MAX;
    int full = *n;
    while (lo <= hi && *st == COL_OK) {
        size_t mid = lo + (hi - lo) / 2, cut = mid;
        while (cut < len && ((unsigned char)msg[cut] & 0xC0) == 0x80) /* a character boundary */
            cut++;
        c->msgs[c->n - 1].content = msg + cut;
        int32_t *t;
        int k;
        if ((*st = conv_encode(g, c, &t, &k, err)) != COL_OK)
            break;
        free(t);
        if (k + g->reserve <= g->ctx) {
            best = cut;
            if (mid == 0)
                break;
            hi = mid - 1;
        } else {
            lo = cut + 1;
        }
    }
    c->msgs[c->n - 1].content = msg;
    if (*st != COL_OK || best == SIZE_MAX)
        return false;
    size_t chars = 0, all = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)msg[i] & 0xC0) != 0x80) {
            all++;
            chars += i >= best;
        }
    memmove(msg, msg + best, len - best + 1);
    free(*ids);
    *ids = NULL;
    if ((*st = conv_encode(g, c, ids, n, err)) != COL_OK)
        return false;
    fprintf(stderr, "colossal-chat: the message is %d tokens with the template, more than the context of %d leaves "
                    "with %d for the reply: keeping its last %zu of %zu characters\n", full, g->ctx, g->reserve,
            chars, all);
    return true;
}

col_status chat_turn(chat_engine *g, chat_conv *c, const char *user, FILE *out, chat_reply *r, bool *skipped,
                     col_err *err)
{
    *skipped = false;
    memset(r, 0, sizeof *r);
    col_status st = conv_add(c, COL_ROLE_USER, user, err);
    if (st != COL_OK)
        return st;
    int32_t *ids = NULL;
    int n = 0;
    for (;;) {
        if ((st = conv_encode(g, c, &ids, &n, err)) != COL_OK)
            break;
        if (n + g->reserve <= g->ctx)
            break;
        if (c->n >= 3) { /* user, assistant, ..., user: drop the oldest pair */
            free(ids);
            ids = NULL;
            if (!c->told_drop)
                fprintf(stderr, "colossal-chat: the conversation no longer fits the context of %d tokens "
                                "(with %d for the reply): dropping the oldest turns\n", g->ctx, g->reserve);
            c->told_drop = true;
            conv_drop_first(c, 2);
            continue;
        }
        if (conv_keep_end(g, c, &ids, &n, &st, err) || st != COL_OK)
            break;
        fprintf(stderr, "colossal-chat: this message does not fit: the template%s alone, with %d tokens for the "
                        "reply, exceeds the context of %d; shorten the system prompt, lower --max-new-tokens or "
                        "raise --ctx (skipped)\n", c->system ? " and the system prompt" : "", g->reserve, g->ctx);
        *skipped = true;
        break;
    }
    if (st == COL_OK && !*skipped)
        st = chat_generate(g, ids, n, out, r, err);
    free(ids);
    if (st == COL_OK && !*skipped)
        st = conv_add(c, COL_ROLE_ASSISTANT, r->text, err);
    if (st != COL_OK || *skipped) { /* the turn did not happen: forget the message */
        c->n--;
        free((char *)c->msgs[c->n].content);
        if (st != COL_OK)
            chat_reply_free(r);
    }
    return st;
}
