/* rlhf_data.c - preference / KTO / prompt data from .jsonl, tokenized as TRL
 * 1.16 does (see rlhf_data.h). */
#include "rlhf_data.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "textio.h"

struct col_rl_data {
    col_rl_kind kind;
    col_rl_example *ex;
    int64_t n, cap, dropped;
};

/* ---- growing id arrays ---- */

typedef struct {
    int32_t *p;
    size_t n, cap;
} ivec;

static bool iv_reserve(ivec *v, size_t more)
{
    if (v->n + more <= v->cap)
        return true;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + more)
        cap *= 2;
    int32_t *p = realloc(v->p, cap * sizeof *p);
    if (!p)
        return false;
    v->p = p;
    v->cap = cap;
    return true;
}

static col_status iv_push(ivec *v, const int32_t *ids, size_t n, col_err *err)
{
    if (!iv_reserve(v, n))
        return col_err_set(err, COL_ENOMEM, "out of memory for %zu tokens", v->n + n);
    if (n)
        memcpy(v->p + v->n, ids, n * sizeof *ids);
    v->n += n;
    return COL_OK;
}

/* Appends the tokens of text[0..len) encoded with flags. */
static col_status iv_encode(ivec *v, const col_tokenizer *tok, const char *text, size_t len, unsigned flags,
                            col_err *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    col_status st = col_tok_encode_ex(tok, text, len, flags, &ids, &n, err);
    if (st == COL_OK)
        st = iv_push(v, ids, n, err);
    free(ids);
    return st;
}

/* ---- a prompt or completion: a string or a list of messages ---- */

typedef struct {
    bool present, chat;
    const char *str;       /* !chat */
    col_chat_message *msg; /* chat: [n] (contents point into the JSON tree) */
    int n;
} rl_val;

static void val_free(rl_val *v) { free(v->msg); }

/* Where an error on this line is reported. */
typedef struct {
    const char *path;
    long long line;
    col_err *err;
} at;

static col_status bad(const at *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static col_status bad(const at *a, const char *fmt, ...)
{
    char msg[COL_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return col_err_set(a->err, COL_EFORMAT, "%s:%lld: %s", a->path, a->line, msg);
}

/* Prefixes err's message with the line (the error came from a call). */
static col_status here(const at *a, col_status st)
{
    if (st != COL_OK)
        col_err_prefix(a->err, "%s:%lld", a->path, a->line);
    return st;
}

/* A role as TRL ("role") or ColossalChat / ShareGPT ("from") names it. */
static bool role_of(const char *s, bool from, col_chat_role *r)
{
    static const struct {
        const char *name;
        col_chat_role role;
        bool from_only;
    } names[] = {{"system", COL_ROLE_SYSTEM, false}, {"user", COL_ROLE_USER, false},
                 {"assistant", COL_ROLE_ASSISTANT, false}, {"human", COL_ROLE_USER, true},
                 {"gpt", COL_ROLE_ASSISTANT, true}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((from ? strcasecmp(s, names[i].name) : strcmp(s, names[i].name)) == 0 && (from || !names[i].from_only)) {
            *r = names[i].role;
            return true;
        }
    return false;
}

/* field of root -> v: a string, a list of messages or one message object. */
static col_status get_val(const at *a, const cJSON *root, const char *field, rl_val *v)
{
    *v = (rl_val){0};
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!j || cJSON_IsNull(j))
        return COL_OK;
    v->present = true;
    if (cJSON_IsString(j)) {
        v->str = j->valuestring;
        return COL_OK;
    }
    if (!cJSON_IsArray(j) && !cJSON_IsObject(j))
        return bad(a, "\"%s\" is neither a string nor a list of messages", field);
    v->chat = true;
    bool one = cJSON_IsObject(j);
    int n = one ? 1 : cJSON_GetArraySize(j);
    if (n == 0)
        return bad(a, "\"%s\" is an empty list of messages", field);
    v->msg = calloc((size_t)n, sizeof *v->msg);
    if (!v->msg)
        return col_err_set(a->err, COL_ENOMEM, "%s:%lld: out of memory", a->path, a->line);
    const cJSON *m = one ? j : j->child;
    for (int i = 0; i < n; i++, m = m->next) {
        if (!cJSON_IsObject(m))
            return bad(a, "\"%s\" message %d is not an object", field, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *from = cJSON_GetObjectItemCaseSensitive(m, "from");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *r = role ? role : from;
        if (!r)
            return bad(a, "\"%s\" message %d has no \"role\" (or \"from\")", field, i);
        if (!cJSON_IsString(r))
            return bad(a, "\"%s\" message %d: \"%s\" is not a string", field, i, role ? "role" : "from");
        if (!role_of(r->valuestring, !role, &v->msg[i].role))
            return bad(a, "\"%s\" message %d has unknown role \"%.40s\" (expected system, user or assistant%s)", field,
                       i, r->valuestring, role ? "" : "; human and gpt are taken too");
        if (!content)
            return bad(a, "\"%s\" message %d has no \"content\"", field, i);
        if (!cJSON_IsString(content))
            return bad(a, "\"%s\" message %d: \"content\" is not a string", field, i);
        v->msg[i].content = content->valuestring;
    }
    v->n = n;
    return COL_OK;
}

static col_status need(const at *a, const rl_val *v, const char *field)
{
    return v->present ? COL_OK : bad(a, "no \"%s\"", field);
}

/* All of vals[0..n) strings, or all message lists. */
static col_status same_form(const at *a, const rl_val *const *v, const char *const *names, int n)
{
    for (int i = 1; i < n; i++)
        if (v[i]->chat != v[0]->chat)
            return bad(a, "\"%s\" is %s but \"%s\" is %s: within one line all must be strings or all message lists",
                       names[0], v[0]->chat ? "a message list" : "a string", names[i],
                       v[i]->chat ? "a message list" : "a string");
    return COL_OK;
}

static col_status check_prompt(const at *a, const rl_val *p, const char *field)
{
    if (!p->chat)
        return p->str[0] ? COL_OK : bad(a, "\"%s\" is empty", field);
    col_chat_role last = p->msg[p->n - 1].role;
    if (last != COL_ROLE_USER)
        return bad(a, "the prompt (\"%s\") ends with a%s %s turn, not a user turn", field,
                   last == COL_ROLE_ASSISTANT ? "n" : "", col_chat_role_name(last));
    return COL_OK;
}

static col_status check_completion(const at *a, const rl_val *c, const char *field)
{
    if (!c->chat)
        return c->str[0] ? COL_OK : bad(a, "\"%s\" is empty", field);
    if (c->msg[0].role != COL_ROLE_ASSISTANT || c->msg[c->n - 1].role != COL_ROLE_ASSISTANT)
        return bad(a, "\"%s\" must start and end with an assistant turn (it has %s ... %s)", field,
                   col_chat_role_name(c->msg[0].role), col_chat_role_name(c->msg[c->n - 1].role));
    for (int i = 0; i < c->n; i++)
        if (c->msg[i].content[0])
            return COL_OK;
    return bad(a, "\"%s\" is empty (no text in its messages)", field);
}

/* ---- TRL's extract_prompt for the implicit prompt ---- */

/* The length of the leading code point boundary at or before i. */
static size_t cp_start(const char *s, size_t i)
{
    while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80)
        i--;
    return i;
}

/* chosen and rejected strings sharing a prompt: the prompt is their common
 * start, without a space right before where they differ (TRL gives that space
 * to the completions); where one is a start of the other, TRL's loop stops at
 * the last character of the shorter one. *owned gets the three strings. */
static col_status split_strings(const at *a, rl_val *p, rl_val *c, rl_val *r, char **owned)
{
    const char *x = c->str, *y = r->str;
    size_t lx = strlen(x), ly = strlen(y), k = 0;
    while (k < lx && k < ly && x[k] == y[k])
        k++;
    if (k == lx && k == ly)
        return bad(a, "\"chosen\" and \"rejected\" are the same text: no prompt can be told apart");
    if (k == lx || k == ly)
        k = k ? cp_start(x, k - 1) : 0; /* TRL: the loop ran out at the last character */
    else {
        k = cp_start(x, k);
        if (k > 0 && x[k - 1] == ' ')
            k--;
    }
    if (k == 0)
        return bad(a, "\"chosen\" and \"rejected\" have no common start to take as the prompt");
    char *buf = malloc(k + 1 + (lx - k) + 1 + (ly - k) + 1);
    if (!buf)
        return col_err_set(a->err, COL_ENOMEM, "%s:%lld: out of memory", a->path, a->line);
    memcpy(buf, x, k);
    buf[k] = 0;
    memcpy(buf + k + 1, x + k, lx - k + 1);
    memcpy(buf + k + 1 + (lx - k) + 1, y + k, ly - k + 1);
    *owned = buf;
    *p = (rl_val){.present = true, .str = buf};
    c->str = buf + k + 1;
    r->str = buf + k + 1 + (lx - k) + 1;
    return COL_OK;
}

static bool same_msg(const col_chat_message *x, const col_chat_message *y)
{
    return x->role == y->role && strcmp(x->content, y->content) == 0;
}

/* The same on message lists: the common leading messages are the prompt. */
static col_status split_lists(const at *a, rl_val *p, rl_val *c, rl_val *r)
{
    int k = 0;
    while (k < c->n && k < r->n && same_msg(&c->msg[k], &r->msg[k]))
        k++;
    if (k == c->n && k == r->n)
        return bad(a, "\"chosen\" and \"rejected\" are the same conversation: no prompt can be told apart");
    if (k == c->n || k == r->n)
        k--; /* as TRL: the loop ran out at the last message of the shorter one */
    if (k <= 0)
        return bad(a, "\"chosen\" and \"rejected\" differ from their first message: no prompt to take");
    col_chat_message *pm = malloc((size_t)k * sizeof *pm);
    if (!pm)
        return col_err_set(a->err, COL_ENOMEM, "%s:%lld: out of memory", a->path, a->line);
    memcpy(pm, c->msg, (size_t)k * sizeof *pm);
    *p = (rl_val){.present = true, .chat = true, .msg = pm, .n = k};
    memmove(c->msg, c->msg + k, (size_t)(c->n - k) * sizeof *c->msg);
    memmove(r->msg, r->msg + k, (size_t)(r->n - k) * sizeof *r->msg);
    c->n -= k;
    r->n -= k;
    return COL_OK;
}

/* ---- tokenization ---- */

typedef struct {
    const col_tokenizer *tok;
    const col_rl_data_opts *o;
    int32_t marker_id[4];   /* the family's markup tokens that are special tokens of tok, else -1 */
    const char *marker[4];
    int n_marker;
} tokctx;

static void tokctx_init(tokctx *t, const col_tokenizer *tok, const col_rl_data_opts *o)
{
    static const char *const llama2[] = {"<s>", "</s>", NULL};
    static const char *const llama3[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                         "<|eot_id|>", NULL};
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", NULL};
    const char *const *m = o->family == COL_CHAT_LLAMA2   ? llama2
                           : o->family == COL_CHAT_LLAMA3 ? llama3
                           : o->family == COL_CHAT_CHATML ? chatml
                                                          : NULL;
    *t = (tokctx){tok, o, {0}, {0}, 0};
    for (int i = 0; m && m[i]; i++) {
        int32_t id = col_tok_token_id(tok, m[i]);
        if (id >= 0 && col_tok_is_special(tok, id)) {
            t->marker[t->n_marker] = m[i];
            t->marker_id[t->n_marker++] = id;
        }
    }
}

typedef struct {
    size_t begin, end;
} region;

/* Where the message texts lie in a render of family f (spans of
 * col_chat_render): the bytes in which no special token is matched. */
static region content_of(col_chat_family f, const col_chat_message *m, const col_chat_span *s)
{
    switch (f) {
    case COL_CHAT_LLAMA2:
        if (m->role == COL_ROLE_SYSTEM) /* folded into the first user turn */
            return (region){s->begin, s->begin};
        if (m->role == COL_ROLE_USER) /* "<s>[INST] " {system block + text} " [/INST]" */
            return (region){s->begin + strlen("<s>[INST] "), s->end - strlen(" [/INST]")};
        return (region){s->train_begin, s->train_end - strlen(" </s>")};
    case COL_CHAT_LLAMA3: return (region){s->train_begin, s->end - strlen("<|eot_id|>")};
    case COL_CHAT_CHATML: return (region){s->train_begin, s->end - strlen("<|im_end|>\n")};
    default: return (region){s->train_begin, s->end - 1};
    }
}

/* The tokens of msgs[0..n) rendered by the chat template, as Hugging Face
 * tokenizes the whole text (no BOS added: the template writes it), except
 * that special tokens are matched only in the template's markup: the text is
 * cut at each of those and every stretch between is encoded as plain text. */
static col_status encode_chat(const tokctx *t, const col_chat_message *msgs, int n, bool gen, ivec *out,
                              col_err *err)
{
    col_chat_span *sp = malloc((size_t)n * sizeof *sp);
    region *reg = malloc((size_t)n * sizeof *reg);
    char *text = NULL;
    size_t len = 0;
    col_status st = !sp || !reg ? col_err_set(err, COL_ENOMEM, "out of memory rendering %d messages", n)
                                : col_chat_render(t->o->family, msgs, n, gen, &text, &len, sp, err);
    if (st == COL_OK)
        for (int i = 0; i < n; i++)
            reg[i] = content_of(t->o->family, &msgs[i], &sp[i]);
    size_t start = 0, p = 0;
    int r = 0;
    while (st == COL_OK && p < len && t->n_marker) {
        while (r < n && reg[r].end <= p)
            r++;
        if (r < n && p >= reg[r].begin) {
            p = reg[r].end;
            continue;
        }
        size_t lim = r < n ? reg[r].begin : len;
        int k = -1;
        for (int i = 0; i < t->n_marker && k < 0; i++) {
            size_t ml = strlen(t->marker[i]);
            if (p + ml <= lim && memcmp(text + p, t->marker[i], ml) == 0)
                k = i;
        }
        if (k < 0) {
            p++;
            continue;
        }
        st = iv_encode(out, t->tok, text + start, p - start, 0, err);
        if (st == COL_OK)
            st = iv_push(out, &t->marker_id[k], 1, err);
        p += strlen(t->marker[k]);
        start = p;
    }
    if (st == COL_OK)
        st = iv_encode(out, t->tok, text + start, len - start, 0, err);
    free(text);
    free(sp);
    free(reg);
    return st;
}

/* A string as the tokenizer's __call__ gives it: its BOS (post-processor) and
 * no special tokens matched in the text; with eos, the EOS id after the text
 * (before any ids the post-processor puts after it), as the EOS text appended
 * to the string is tokenized by Hugging Face. */
static col_status encode_string(const tokctx *t, const char *s, size_t len, bool eos, ivec *out, col_err *err)
{
    ivec x = {0}, y = {0};
    col_status st = iv_encode(&x, t->tok, s, len, COL_TOK_ADD_SPECIAL, err);
    if (st == COL_OK && eos)
        st = iv_encode(&y, t->tok, s, len, 0, err);
    if (st == COL_OK && !eos)
        st = iv_push(out, x.p, x.n, err);
    if (st == COL_OK && eos) {
        size_t k = 0; /* x = (post-processor prefix) y (suffix) */
        while (k + y.n <= x.n && memcmp(x.p + k, y.p, y.n * sizeof *y.p) != 0)
            k++;
        if (k + y.n > x.n)
            st = col_err_set(err, COL_EINTERNAL, "the tokenizer's ids with its special tokens do not hold the text's");
        int32_t e = col_tok_eos_id(t->tok);
        if (st == COL_OK)
            st = iv_push(out, x.p, k + y.n, err);
        if (st == COL_OK)
            st = iv_push(out, &e, 1, err);
        if (st == COL_OK)
            st = iv_push(out, x.p + k + y.n, x.n - k - y.n, err);
    }
    free(x.p);
    free(y.p);
    return st;
}

/* The tokens of the prompt alone (with the generation prompt). */
static col_status encode_prompt(const tokctx *t, const rl_val *p, ivec *out, col_err *err)
{
    if (p->chat)
        return encode_chat(t, p->msg, p->n, true, out, err);
    return encode_string(t, p->str, strlen(p->str), false, out, err);
}

/* The tokens of prompt + completion. */
static col_status encode_full(const at *a, const tokctx *t, const rl_val *p, const rl_val *c, ivec *out)
{
    col_err *err = a->err;
    if (p->chat) {
        col_chat_message *m = malloc((size_t)(p->n + c->n) * sizeof *m);
        if (!m)
            return col_err_set(err, COL_ENOMEM, "%s:%lld: out of memory", a->path, a->line);
        memcpy(m, p->msg, (size_t)p->n * sizeof *m);
        memcpy(m + p->n, c->msg, (size_t)c->n * sizeof *m);
        col_status st = here(a, encode_chat(t, m, p->n + c->n, false, out, err));
        free(m);
        return st;
    }
    bool eos = t->o->append_eos;
    size_t lp = strlen(p->str), lc = strlen(c->str);
    if (eos) {
        int32_t e = col_tok_eos_id(t->tok);
        size_t el = 0;
        const char *et = e >= 0 ? col_tok_token_bytes(t->tok, e, &el) : NULL;
        if (!et)
            return bad(a, "the tokenizer has no end-of-sequence token to append to the completion");
        if (el > 0 && lc >= el && memcmp(c->str + lc - el, et, el) == 0)
            lc -= el; /* already there: TRL adds none, and the text is its special token */
    }
    char *s = malloc(lp + lc + 1);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "%s:%lld: out of memory", a->path, a->line);
    memcpy(s, p->str, lp);
    memcpy(s + lp, c->str, lc);
    col_status st = here(a, encode_string(t, s, lp + lc, eos, out, err));
    free(s);
    return st;
}

static size_t common_prefix(const ivec *x, const ivec *y)
{
    size_t k = 0;
    while (k < x->n && k < y->n && x->p[k] == y->p[k])
        k++;
    return k;
}

static col_status copy_ids(const at *a, const int32_t *ids, size_t n, int32_t **out, int *n_out)
{
    if (n > (size_t)INT32_MAX)
        return bad(a, "%zu tokens: more than an example may hold", n);
    *out = malloc((n ? n : 1) * sizeof **out);
    if (!*out)
        return col_err_set(a->err, COL_ENOMEM, "%s:%lld: out of memory for %zu tokens", a->path, a->line, n);
    if (n)
        memcpy(*out, ids, n * sizeof *ids);
    *n_out = (int)n;
    return COL_OK;
}

/* The example of prompt p and completions c[0..nc) (nc 0 for prompts). */
static col_status tokenize(const at *a, const tokctx *t, const rl_val *p, const rl_val *c, int nc, col_rl_example *e)
{
    ivec pi = {0}, full[2] = {{0}, {0}};
    col_status st = here(a, encode_prompt(t, p, &pi, a->err));
    size_t cut = pi.n;
    for (int i = 0; i < nc && st == COL_OK; i++) {
        st = encode_full(a, t, p, &c[i], &full[i]);
        size_t k = common_prefix(&pi, &full[i]);
        cut = k < cut ? k : cut;
    }
    static const char *const what[2][2] = {{"completion", ""}, {"chosen completion", "rejected completion"}};
    for (int i = 0; i < nc && st == COL_OK; i++)
        if (full[i].n <= cut)
            st = bad(a, "the %s gives no tokens after the prompt's", what[nc - 1][i]);
    const col_rl_data_opts *o = t->o;
    size_t p0 = o->max_prompt > 0 && cut > (size_t)o->max_prompt ? cut - (size_t)o->max_prompt : 0;
    if (st == COL_OK)
        st = copy_ids(a, pi.p + p0, cut - p0, &e->prompt, &e->n_prompt);
    for (int i = 0; i < nc && st == COL_OK; i++) {
        size_t n = full[i].n - cut;
        if (o->max_completion > 0 && n > (size_t)o->max_completion)
            n = (size_t)o->max_completion;
        if (o->max_length > 0 && (size_t)e->n_prompt < (size_t)o->max_length &&
            n > (size_t)o->max_length - (size_t)e->n_prompt)
            n = (size_t)o->max_length - (size_t)e->n_prompt;
        st = copy_ids(a, full[i].p + cut, n, i ? &e->b : &e->a, i ? &e->n_b : &e->n_a);
    }
    free(pi.p);
    free(full[0].p);
    free(full[1].p);
    return st;
}

/* ---- one line per kind ---- */

static col_status line_pairs(const at *a, const tokctx *t, const cJSON *root, col_rl_example *e)
{
    rl_val v[3] = {{0}}; /* prompt, chosen, rejected */
    char *owned = NULL;
    bool colossal = cJSON_GetObjectItemCaseSensitive(root, "context") != NULL;
    const char *names[3] = {colossal ? "context" : "prompt", "chosen", "rejected"};
    col_status st = COL_OK;
    for (int i = 0; i < 3 && st == COL_OK; i++)
        st = get_val(a, root, names[i], &v[i]);
    for (int i = 1; i < 3 && st == COL_OK; i++)
        st = need(a, &v[i], names[i]);
    if (st == COL_OK && colossal && !v[0].present)
        st = bad(a, "\"context\" is null");
    const rl_val *vp[3] = {&v[0], &v[1], &v[2]};
    if (st == COL_OK)
        st = v[0].present ? same_form(a, vp, names, 3) : same_form(a, vp + 1, names + 1, 2);
    if (st == COL_OK && colossal && !v[0].chat)
        st = bad(a, "\"context\" must be a list of messages");
    if (st == COL_OK && !v[0].present) /* implicit prompt */
        st = v[1].chat ? split_lists(a, &v[0], &v[1], &v[2]) : split_strings(a, &v[0], &v[1], &v[2], &owned);
    if (st == COL_OK)
        st = check_prompt(a, &v[0], names[0]);
    for (int i = 1; i < 3 && st == COL_OK; i++)
        st = check_completion(a, &v[i], names[i]);
    if (st == COL_OK) {
        e->chat = v[0].chat;
        st = tokenize(a, t, &v[0], &v[1], 2, e);
    }
    for (int i = 0; i < 3; i++)
        val_free(&v[i]);
    free(owned);
    return st;
}

static col_status line_kto(const at *a, const tokctx *t, const cJSON *root, col_rl_example *e)
{
    rl_val v[2] = {{0}};
    const char *names[2] = {"prompt", "completion"};
    col_status st = COL_OK;
    for (int i = 0; i < 2 && st == COL_OK; i++)
        if ((st = get_val(a, root, names[i], &v[i])) == COL_OK)
            st = need(a, &v[i], names[i]);
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(root, "label");
    if (st == COL_OK && !label)
        st = bad(a, "no \"label\"");
    if (st == COL_OK && !cJSON_IsBool(label))
        st = bad(a, "\"label\" is not true or false");
    const rl_val *vp[2] = {&v[0], &v[1]};
    if (st == COL_OK)
        st = same_form(a, vp, names, 2);
    if (st == COL_OK)
        st = check_prompt(a, &v[0], names[0]);
    if (st == COL_OK)
        st = check_completion(a, &v[1], names[1]);
    if (st == COL_OK) {
        e->desirable = cJSON_IsTrue(label);
        e->chat = v[0].chat;
        st = tokenize(a, t, &v[0], &v[1], 1, e);
    }
    val_free(&v[0]);
    val_free(&v[1]);
    return st;
}

static col_status line_prompts(const at *a, const tokctx *t, const cJSON *root, col_rl_example *e)
{
    rl_val p = {0};
    const char *name = cJSON_GetObjectItemCaseSensitive(root, "messages") ? "messages" : "prompt";
    col_status st = get_val(a, root, name, &p);
    if (st == COL_OK && !p.present)
        st = bad(a, "no \"messages\" (or \"prompt\")");
    if (st == COL_OK && !strcmp(name, "messages") && !p.chat)
        st = bad(a, "\"messages\" must be a list of messages");
    if (st == COL_OK)
        st = check_prompt(a, &p, name);
    const cJSON *gt = cJSON_GetObjectItemCaseSensitive(root, "gt_answer");
    if (st == COL_OK && gt && !cJSON_IsNull(gt)) {
        if (cJSON_IsString(gt))
            e->gt_answer = strdup(gt->valuestring);
        else if (cJSON_IsNumber(gt))
            e->gt_answer = cJSON_PrintUnformatted(gt);
        else
            st = bad(a, "\"gt_answer\" is neither a string nor a number");
        if (st == COL_OK && !e->gt_answer)
            st = col_err_set(a->err, COL_ENOMEM, "%s:%lld: out of memory", a->path, a->line);
    }
    if (st == COL_OK) {
        e->chat = p.chat;
        st = tokenize(a, t, &p, NULL, 0, e);
    }
    val_free(&p);
    return st;
}

/* ---- the file ---- */

static void example_free(col_rl_example *e)
{
    free(e->prompt);
    free(e->a);
    free(e->b);
    free(e->gt_answer);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* Whether s[0..n) holds a NUL: a byte, or a \u0000 escape (cJSON would cut
 * the string there without a word). */
static bool has_nul(const char *s, size_t n)
{
    if (memchr(s, 0, n))
        return true;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\\') {
            if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
                return true;
            i++; /* the escaped character */
        }
    return false;
}

/* One non-blank line -> d (or counted as dropped). */
static col_status one_line(const at *a, const tokctx *t, col_rl_kind kind, const char *s, size_t n, col_rl_data *d)
{
    if (has_nul(s, n))
        return bad(a, "a NUL character (a zero byte or \\u0000), which the text of a line may not hold");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!root)
        return bad(a, "not valid JSON (near byte %zu of the line)", end && end >= s ? (size_t)(end - s) : (size_t)0);
    col_status st = COL_OK;
    if (!blank(end, n - (size_t)(end - s)))
        st = bad(a, "not valid JSON (text after the object)");
    else if (!cJSON_IsObject(root))
        st = bad(a, "not a JSON object");
    col_rl_example e = {.line = a->line};
    if (st == COL_OK)
        st = kind == COL_RL_PAIRS ? line_pairs(a, t, root, &e)
             : kind == COL_RL_KTO ? line_kto(a, t, root, &e)
                                  : line_prompts(a, t, root, &e);
    cJSON_Delete(root);
    if (st == COL_OK && t->o->max_length > 0 && kind != COL_RL_PROMPTS && e.n_prompt >= t->o->max_length) {
        d->dropped++;
        example_free(&e);
        return COL_OK;
    }
    if (st == COL_OK && d->n == d->cap) {
        int64_t cap = d->cap ? 2 * d->cap : 64;
        col_rl_example *ne = realloc(d->ex, (size_t)cap * sizeof *ne);
        if (!ne)
            st = col_err_set(a->err, COL_ENOMEM, "%s: out of memory for %lld examples", a->path, (long long)cap);
        else {
            d->ex = ne;
            d->cap = cap;
        }
    }
    if (st != COL_OK) {
        example_free(&e);
        return st;
    }
    d->ex[d->n++] = e;
    return COL_OK;
}

const char *col_rl_kind_name(col_rl_kind k)
{
    switch (k) {
    case COL_RL_PAIRS: return "pairs";
    case COL_RL_KTO: return "kto";
    case COL_RL_PROMPTS: return "prompts";
    }
    return NULL;
}

col_status col_rl_data_parse(const char *text, size_t len, const char *path, col_rl_kind kind,
                             const col_tokenizer *tok, const col_rl_data_opts *o, col_rl_data **out, col_err *err)
{
    *out = NULL;
    if (!path)
        path = "(data)";
    if (!col_rl_kind_name(kind))
        return col_err_set(err, COL_EINVAL, "%s: unknown kind of RL data %d", path, (int)kind);
    if (!tok || !o)
        return col_err_set(err, COL_EINVAL, "%s: a tokenizer and options are needed", path);
    if (!col_chat_info(o->family))
        return col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EINVAL, "%s: unknown chat template family %d",
                              path, (int)o->family);
    if (o->max_prompt < 0 || o->max_completion < 0 || o->max_length < 0)
        return col_err_set(err, COL_EINVAL, "%s: negative length limits (prompt %d, completion %d, total %d)", path,
                           o->max_prompt, o->max_completion, o->max_length);
    if (!text && len)
        return col_err_set(err, COL_EINVAL, "%s: no text", path);
    if (o->max_bytes && len > o->max_bytes)
        return col_err_set(err, COL_ENOMEM, "%s: %zu bytes, more than the limit of %zu", path, len, o->max_bytes);
    col_rl_data *d = calloc(1, sizeof *d);
    if (!d)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    d->kind = kind;
    tokctx t;
    tokctx_init(&t, tok, o);
    at a = {path, 0, err};
    col_status st = COL_OK;
    size_t pos = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0; /* a UTF-8 byte order mark */
    while (pos < len && st == COL_OK) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - (text + pos)) : len - pos;
        a.line++;
        if (!blank(text + pos, l))
            st = one_line(&a, &t, kind, text + pos, l, d);
        pos += l + 1;
    }
    if (st == COL_OK && d->n == 0)
        st = d->dropped ? col_err_set(err, COL_EFORMAT,
                                      "%s: no examples left: each of the %lld has a prompt of at least the length "
                                      "limit (%d tokens)", path, (long long)d->dropped, o->max_length)
                        : col_err_set(err, COL_EFORMAT, "%s: no examples (the file is empty or blank)", path);
    if (st != COL_OK) {
        col_rl_data_free(d);
        return st;
    }
    *out = d;
    return COL_OK;
}

col_status col_rl_data_load(const char *path, col_rl_kind kind, const col_tokenizer *tok, const col_rl_data_opts *o,
                            col_rl_data **out, col_err *err)
{
    *out = NULL;
    if (!path)
        return col_err_set(err, COL_EINVAL, "RL data: no file named");
    char *buf = NULL;
    size_t len = 0;
    col_status st = col_read_file(path, o ? o->max_bytes : 0, &buf, &len, err);
    if (st == COL_OK)
        st = col_rl_data_parse(buf, len, path, kind, tok, o, out, err);
    free(buf);
    return st;
}

int64_t col_rl_data_count(const col_rl_data *d) { return d ? d->n : 0; }

const col_rl_example *col_rl_data_get(const col_rl_data *d, int64_t i)
{
    return d && i >= 0 && i < d->n ? &d->ex[i] : NULL;
}

int64_t col_rl_data_dropped(const col_rl_data *d) { return d ? d->dropped : 0; }

col_rl_kind col_rl_data_kind(const col_rl_data *d) { return d ? d->kind : COL_RL_PAIRS; }

void col_rl_data_free(col_rl_data *d)
{
    if (!d)
        return;
    for (int64_t i = 0; i < d->n; i++)
        example_free(&d->ex[i]);
    free(d->ex);
    free(d);
}
