/* serve_api.c - OpenAI requests read into the scheduler's parameters and
 * responses written in OpenAI's shapes (see serve_api.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "serve_api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void serve_api_set_error(serve_api_error *e, int status, const char *type, const char *code, const char *param,
                         const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

#define BAD(e, code, param, ...) (serve_api_set_error((e), 400, "invalid_request_error", (code), (param), __VA_ARGS__), false)
#define OOM(e) (serve_api_set_error((e), 500, "server_error", NULL, NULL, "out of memory"), false)

/* ---- JSON text ---- */

/* the length of the valid UTF-8 sequence at s (n bytes left), 0 if none starts there */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (n < k || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return k;
}

char *serve_api_json_string(const char *s, size_t len)
{
    /* worst case: each byte as \u00XX (6) or U+FFFD (3), plus quotes */
    if (len > ((size_t)-1 - 3) / 6)
        return NULL;
    char *out = malloc(len * 6 + 3), *o = out;
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    *o++ = '"';
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
            i++;
        } else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (esc) {
                memcpy(o, esc, 2);
                o += 2;
            } else {
                memcpy(o, "\\u00", 4);
                o[4] = hex[c >> 4];
                o[5] = hex[c & 15];
                o += 6;
            }
            i++;
        } else {
            size_t k = utf8_seq(p + i, len - i);
            if (k == 0) {
                memcpy(o, "\xef\xbf\xbd", 3);
                o += 3;
                i++;
            } else {
                memcpy(o, p + i, k);
                o += k;
                i += k;
            }
        }
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

char *serve_api_error_json(const serve_api_error *e)
{
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    char *out = NULL;
    if (err && cJSON_AddStringToObject(err, "message", e->message) &&
        cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error") &&
        (e->param[0] ? cJSON_AddStringToObject(err, "param", e->param) : cJSON_AddNullToObject(err, "param")) &&
        (e->code ? cJSON_AddStringToObject(err, "code", e->code) : cJSON_AddNullToObject(err, "code")))
        out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

bool serve_api_key_equal(const char *key, const char *given, size_t given_len)
{
    size_t klen = strlen(key);
    volatile unsigned char diff = (unsigned char)(given_len != klen);
    for (size_t i = 0; i < klen; i++) /* every byte of the key, whatever matched before */
        diff |= (unsigned char)((unsigned char)key[i] ^ (unsigned char)(i < given_len ? given[i] : 0));
    return diff == 0;
}

/* ---- reading the request ---- */

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "null";
}

static bool bad_type(serve_api_error *e, const char *param, const char *want, const cJSON *v)
{
    return BAD(e, "invalid_type", param, "Invalid type for '%s': expected %s, but got %s instead.", param, want,
               type_name(v));
}

/* the field, or NULL when absent or null */
static const cJSON *field(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* a number in [lo, hi] (lo excluded when lo_open); *set tells whether it was given */
static bool get_number(const cJSON *o, const char *name, double lo, bool lo_open, double hi, float *out,
                       serve_api_error *e)
{
    const cJSON *v = field(o, name);
    if (!v)
        return true;
    if (!cJSON_IsNumber(v))
        return bad_type(e, name, "a decimal", v);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || (lo_open && d == lo) || d > hi)
        return BAD(e, "invalid_value", name, "Invalid '%s': %g is out of range: expected a value in %s%g, %g].",
                   name, d, lo_open ? "(" : "[", lo, hi);
    *out = (float)d;
    return true;
}

/* an integer in [lo, hi] */
static bool get_int(const cJSON *o, const char *name, long long lo, long long hi, long long *out, bool *given,
                    serve_api_error *e)
{
    const cJSON *v = field(o, name);
    if (given)
        *given = v != NULL;
    if (!v)
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
        return bad_type(e, name, "an integer", v);
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return BAD(e, "invalid_value", name, "Invalid '%s': %.0f is out of range: expected an integer in %lld..%lld.",
                   name, d, lo, hi);
    *out = (long long)d;
    return true;
}

static bool get_bool(const cJSON *o, const char *name, bool *out, serve_api_error *e)
{
    const cJSON *v = field(o, name);
    if (!v)
        return true;
    if (!cJSON_IsBool(v))
        return bad_type(e, name, "a boolean", v);
    *out = cJSON_IsTrue(v);
    return true;
}

/* the fields colossal cannot honour: refused unless absent, null or harmless */
static bool check_unsupported(const cJSON *o, serve_api_kind kind, int n, serve_api_error *e)
{
    const cJSON *v;
    static const char *const penalties[] = {"frequency_penalty", "presence_penalty"};
    for (int i = 0; i < 2; i++) {
        float p = 0;
        if (!get_number(o, penalties[i], -2, false, 2, &p, e))
            return false;
        if (p != 0)
            return BAD(e, "unsupported_parameter", penalties[i],
                       "Unsupported parameter: '%s' other than 0 is not supported by this server "
                       "(repetition_penalty is).", penalties[i]);
    }
    if ((v = field(o, "logprobs")) && !(cJSON_IsBool(v) && !cJSON_IsTrue(v)) &&
        !(kind == SERVE_API_COMPLETION && cJSON_IsNumber(v) && v->valuedouble == 0))
        return BAD(e, "unsupported_parameter", "logprobs", "Unsupported parameter: 'logprobs' is not supported by "
                   "this server.");
    if ((v = field(o, "top_logprobs")))
        return BAD(e, "unsupported_parameter", "top_logprobs", "Unsupported parameter: 'top_logprobs' is not "
                   "supported by this server.");
    if ((v = field(o, "echo")) && !(cJSON_IsBool(v) && !cJSON_IsTrue(v)))
        return BAD(e, "unsupported_parameter", "echo", "Unsupported parameter: 'echo' is not supported by this "
                   "server.");
    if ((v = field(o, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == n))
        return BAD(e, "unsupported_parameter", "best_of", "Unsupported parameter: 'best_of' other than n is not "
                   "supported by this server.");
    if ((v = field(o, "suffix")) && !(cJSON_IsString(v) && !*v->valuestring))
        return BAD(e, "unsupported_parameter", "suffix", "Unsupported parameter: 'suffix' is not supported by this "
                   "server.");
    if ((v = field(o, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return BAD(e, "unsupported_parameter", "logit_bias", "Unsupported parameter: 'logit_bias' is not supported "
                   "by this server.");
    static const char *const lists[] = {"tools", "functions"};
    for (int i = 0; i < 2; i++)
        if ((v = field(o, lists[i])) && !(cJSON_IsArray(v) && !v->child))
            return BAD(e, "unsupported_parameter", lists[i], "Unsupported parameter: '%s' is not supported by this "
                       "server.", lists[i]);
    if ((v = field(o, "tool_choice")) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0))
        return BAD(e, "unsupported_parameter", "tool_choice", "Unsupported parameter: 'tool_choice' is not "
                   "supported by this server.");
    if ((v = field(o, "response_format"))) {
        const cJSON *t = cJSON_IsObject(v) ? field(v, "type") : NULL;
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return BAD(e, "unsupported_value", "response_format", "Unsupported value: 'response_format' other "
                       "than {\"type\": \"text\"} is not supported by this server.");
    }
    return true;
}

static bool add_stop(serve_api_request *r, const char *s, serve_api_error *e)
{
    for (int i = 0; i < r->nstops; i++)
        if (strcmp(r->stops[i], s) == 0)
            return true;
    if (!(r->stops[r->nstops] = strdup(s)))
        return OOM(e);
    r->nstops++;
    return true;
}

static bool get_stops(const cJSON *o, serve_api_request *r, serve_api_error *e)
{
    const cJSON *v = field(o, "stop");
    if (!v)
        return true;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring)
            return BAD(e, "invalid_value", "stop", "Invalid 'stop': an empty string.");
        return add_stop(r, v->valuestring, e);
    }
    if (!cJSON_IsArray(v))
        return bad_type(e, "stop", "a string or an array of strings", v);
    int k = cJSON_GetArraySize(v);
    if (k > SERVE_API_MAX_REQ_STOPS)
        return BAD(e, "invalid_value", "stop", "Invalid 'stop': %d strings; at most %d are allowed.", k,
                   SERVE_API_MAX_REQ_STOPS);
    int i = 0;
    for (const cJSON *s = v->child; s; s = s->next, i++) {
        char p[32];
        snprintf(p, sizeof p, "stop[%d]", i);
        if (!cJSON_IsString(s))
            return bad_type(e, p, "a string", s);
        if (!*s->valuestring)
            return BAD(e, "invalid_value", p, "Invalid '%s': an empty string.", p);
        if (!add_stop(r, s->valuestring, e))
            return false;
    }
    return true;
}

/* message i's content: a string, or the texts of [{type: "text", text}] joined by newlines (malloc'ed) */
static bool message_content(const cJSON *m, int i, bool assistant, char **out, serve_api_error *e)
{
    char p[64];
    snprintf(p, sizeof p, "messages[%d].content", i);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!c)
        return BAD(e, "missing_required_parameter", p, "Missing required parameter: '%s'.", p);
    if (cJSON_IsNull(c) && assistant)
        return (*out = strdup("")) ? true : OOM(e);
    if (cJSON_IsString(c))
        return (*out = strdup(c->valuestring)) ? true : OOM(e);
    if (!cJSON_IsArray(c))
        return bad_type(e, p, "a string or an array of content parts", c);
    size_t total = 1;
    int j = 0;
    for (const cJSON *part = c->child; part; part = part->next, j++) {
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%d]", p, j);
        if (!cJSON_IsObject(part))
            return bad_type(e, pp, "an object", part);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type"),
                    *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0) {
            snprintf(pp, sizeof pp, "%s[%d].type", p, j);
            return BAD(e, "unsupported_value", pp, "Invalid '%s': only content parts of type 'text' are supported "
                       "by this server.", pp);
        }
        if (!cJSON_IsString(x)) {
            snprintf(pp, sizeof pp, "%s[%d].text", p, j);
            return bad_type(e, pp, "a string", x);
        }
        total += strlen(x->valuestring) + 1;
    }
    char *s = malloc(total), *q = s;
    if (!s)
        return OOM(e);
    for (const cJSON *part = c->child; part; part = part->next) {
        const char *x = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        if (q != s)
            *q++ = '\n';
        size_t L = strlen(x);
        memcpy(q, x, L);
        q += L;
    }
    *q = '\0';
    *out = s;
    return true;
}

/* messages rendered with the chat template and encoded */
static bool chat_prompt(const serve_api_model *m, const cJSON *o, serve_api_request *r, serve_api_error *e)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!msgs || cJSON_IsNull(msgs))
        return BAD(e, "missing_required_parameter", "messages", "Missing required parameter: 'messages'.");
    if (!cJSON_IsArray(msgs))
        return bad_type(e, "messages", "an array", msgs);
    int n = cJSON_GetArraySize(msgs);
    if (n == 0)
        return BAD(e, "empty_array", "messages", "Invalid 'messages': empty array. Expected an array with minimum "
                   "length 1, but got an empty array instead.");
    if (!m->has_chat)
        return BAD(e, "unsupported_value", "messages", "The model '%s' has no chat template, so it cannot take "
                   "messages: use /v1/completions, or start the server with a chat template.", m->model_name);
    col_chat_message *cm = calloc((size_t)n, sizeof *cm);
    if (!cm)
        return OOM(e);
    bool ok = true;
    int i = 0;
    for (const cJSON *msg = msgs->child; msg && ok; msg = msg->next, i++) {
        char p[64];
        snprintf(p, sizeof p, "messages[%d]", i);
        if (!cJSON_IsObject(msg)) {
            ok = bad_type(e, p, "an object", msg);
            break;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        snprintf(p, sizeof p, "messages[%d].role", i);
        if (!cJSON_IsString(role)) {
            ok = role ? bad_type(e, p, "a string", role)
                      : BAD(e, "missing_required_parameter", p, "Missing required parameter: '%s'.", p);
            break;
        }
        const char *rs = role->valuestring;
        if (strcmp(rs, "system") == 0 || strcmp(rs, "developer") == 0)
            cm[i].role = COL_ROLE_SYSTEM;
        else if (strcmp(rs, "user") == 0)
            cm[i].role = COL_ROLE_USER;
        else if (strcmp(rs, "assistant") == 0)
            cm[i].role = COL_ROLE_ASSISTANT;
        else {
            ok = BAD(e, "invalid_value", p, "Invalid value for '%s': '%.40s'; supported values are 'system', "
                     "'developer', 'user' and 'assistant'.", p, rs);
            break;
        }
        char *content = NULL;
        ok = message_content(msg, i, cm[i].role == COL_ROLE_ASSISTANT, &content, e);
        cm[i].content = content;
    }
    char *text = NULL;
    size_t len = 0;
    col_err err = {0};
    if (ok && col_chat_render(m->family, cm, n, true, &text, &len, NULL, &err) != COL_OK)
        ok = err.code == COL_ENOMEM ? OOM(e) : BAD(e, "invalid_value", "messages", "Invalid 'messages': %s", err.msg);
    for (int k = 0; k < n; k++)
        free((char *)cm[k].content);
    free(cm);
    size_t nids = 0;
    /* the template writes BOS as text: special tokens are parsed and none is added (as colossal-chat) */
    if (ok && col_tok_encode_ex(m->tok, text, len, COL_TOK_PARSE_SPECIAL, &r->prompt, &nids, &err) != COL_OK)
        ok = err.code == COL_ENOMEM ? OOM(e) : BAD(e, "invalid_value", "messages", "Invalid 'messages': %s", err.msg);
    free(text);
    r->n_prompt = nids > (size_t)m->ctx ? m->ctx + 1 : (int)nids;
    r->strip_leading_space = m->family == COL_CHAT_LLAMA2;
    return ok;
}

/* an array of token ids, all below the vocabulary */
static bool prompt_ids(const serve_api_model *m, const cJSON *a, const char *param, serve_api_request *r,
                       serve_api_error *e)
{
    int n = cJSON_GetArraySize(a), i = 0;
    if (!(r->prompt = malloc(sizeof *r->prompt * (size_t)(n > 0 ? n : 1))))
        return OOM(e);
    for (const cJSON *v = a->child; v; v = v->next, i++) {
        char p[48];
        snprintf(p, sizeof p, "%s[%d]", param, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            return bad_type(e, p, "an integer token id", v);
        if (v->valuedouble < 0 || v->valuedouble >= m->vocab)
            return BAD(e, "invalid_value", p, "Invalid '%s': token id %.0f is out of range: the vocabulary has %d "
                       "ids.", p, v->valuedouble, m->vocab);
        r->prompt[i] = (int32_t)v->valuedouble;
    }
    r->n_prompt = n;
    return true;
}

static bool completion_prompt(const serve_api_model *m, const cJSON *o, serve_api_request *r, serve_api_error *e)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!p || cJSON_IsNull(p))
        return BAD(e, "missing_required_parameter", "prompt", "Missing required parameter: 'prompt'.");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child; /* [string] or [[ids]]: one prompt */
    else if (cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        return BAD(e, "unsupported_value", "prompt", "Invalid 'prompt': %d prompts; this server takes one prompt "
                   "per request (use n for several completions).", cJSON_GetArraySize(p));
    if (cJSON_IsArray(p))
        return prompt_ids(m, p, "prompt", r, e);
    if (!cJSON_IsString(p))
        return bad_type(e, "prompt", "a string or an array of token ids", p);
    size_t nids = 0;
    col_err err = {0};
    /* as colossal-chat completes raw text: the tokenizer's own BOS added, special tokens parsed */
    if (col_tok_encode_ex(m->tok, p->valuestring, strlen(p->valuestring), COL_TOK_ADD_SPECIAL | COL_TOK_PARSE_SPECIAL,
                          &r->prompt, &nids, &err) != COL_OK)
        return err.code == COL_ENOMEM ? OOM(e) : BAD(e, "invalid_value", "prompt", "Invalid 'prompt': %s", err.msg);
    r->n_prompt = nids > (size_t)m->ctx ? m->ctx + 1 : (int)nids;
    return true;
}

static bool parse_object(const serve_api_model *m, serve_api_kind kind, const cJSON *o, uint64_t seed,
                         serve_api_request *r, serve_api_error *e)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return bad_type(e, "model", "a string", model);
    if (cJSON_IsString(model) && strcmp(model->valuestring, m->model_name) != 0) {
        serve_api_set_error(e, 404, "invalid_request_error", "model_not_found", "model",
                            "The model '%.200s' does not exist: this server serves '%s'.", model->valuestring,
                            m->model_name);
        return false;
    }
    long long v = 0;
    bool given = false;
    r->n = 1;
    if (!get_int(o, "n", 1, m->max_n, &v, NULL, e))
        return false;
    if (field(o, "n"))
        r->n = (int)v;
    if (!check_unsupported(o, kind, r->n, e))
        return false;
    r->so = col_sample_defaults();
    r->so.seed = seed;
    if (!get_number(o, "temperature", 0, false, 2, &r->so.temperature, e) ||
        !get_number(o, "top_p", 0, true, 1, &r->so.top_p, e) ||
        !get_number(o, "repetition_penalty", 0, true, 1e6, &r->so.repetition_penalty, e))
        return false;
    if (!get_int(o, "top_k", -1, 1 << 30, &v, &given, e))
        return false;
    if (given)
        r->so.top_k = v < 0 ? 0 : (int)v;
    if (!get_int(o, "seed", -(1LL << 53), 1LL << 53, &v, &given, e))
        return false;
    if (given)
        r->so.seed = (uint64_t)v;
    if (!get_bool(o, "stream", &r->stream, e))
        return false;
    const cJSON *so = field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so))
            return bad_type(e, "stream_options", "an object", so);
        if (!r->stream)
            return BAD(e, "invalid_value", "stream_options", "The 'stream_options' parameter is only allowed when "
                       "'stream' is enabled.");
        const cJSON *iu = field(so, "include_usage");
        if (iu && !cJSON_IsBool(iu))
            return bad_type(e, "stream_options.include_usage", "a boolean", iu);
        r->include_usage = cJSON_IsTrue(iu);
    }
    /* max_tokens (chat: max_completion_tokens, OpenAI's newer name, wins) */
    long long mt = -1;
    const char *mt_name = kind == SERVE_API_CHAT && field(o, "max_completion_tokens") ? "max_completion_tokens"
                                                                                      : "max_tokens";
    if (!get_int(o, mt_name, 1, 1 << 30, &mt, &given, e))
        return false;
    if (!get_stops(o, r, e))
        return false;
    if (!(kind == SERVE_API_CHAT ? chat_prompt(m, o, r, e) : completion_prompt(m, o, r, e)))
        return false;
    if (r->n_prompt < 1)
        return BAD(e, "invalid_value", kind == SERVE_API_CHAT ? "messages" : "prompt", "Invalid '%s': it gives no "
                   "tokens, so there is nothing to continue.", kind == SERVE_API_CHAT ? "messages" : "prompt");
    if (r->n_prompt >= m->ctx)
        return BAD(e, "context_length_exceeded", kind == SERVE_API_CHAT ? "messages" : "prompt",
                   "This model's maximum context length is %d tokens. However, your %s resulted in %s%d tokens, "
                   "leaving no room for the completion. Please reduce the length of the %s.", m->ctx,
                   kind == SERVE_API_CHAT ? "messages" : "prompt", r->n_prompt > m->ctx ? "more than " : "",
                   r->n_prompt > m->ctx ? m->ctx : r->n_prompt, kind == SERVE_API_CHAT ? "messages" : "prompt");
    /* asked for more than the context leaves: the scheduler ends the choice there (finish "length") */
    r->max_tokens = given ? (int)mt : kind == SERVE_API_CHAT ? m->ctx - r->n_prompt : SERVE_API_COMPLETION_MAX_TOKENS;
    if (kind == SERVE_API_CHAT) {
        const col_chat_family_info *fi = col_chat_info(m->family);
        int asked = r->nstops;
        for (int i = 0; fi->stop[i]; i++) {
            bool dup = false;
            for (int k = 0; k < r->nstops; k++)
                dup |= strcmp(r->stops[k], fi->stop[i]) == 0;
            if (!dup && r->nstops == SERVE_API_MAX_STOPS)
                return BAD(e, "invalid_value", "stop", "Invalid 'stop': %d strings, and the %s chat template adds its "
                           "own end-of-turn strings; at most %d in all.", asked, fi->name, SERVE_API_MAX_STOPS);
            if (!add_stop(r, fi->stop[i], e))
                return false;
        }
    }
    col_err err = {0};
    if (col_sample_check(&r->so, &err) != COL_OK)
        return BAD(e, "invalid_value", NULL, "Invalid sampling settings: %s", err.msg);
    return true;
}

bool serve_api_parse(const serve_api_model *m, serve_api_kind kind, const char *body, size_t len, uint64_t seed,
                     serve_api_request *out, serve_api_error *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (o && end)
        while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
            end++;
    if (!o || end != body + len) {
        cJSON_Delete(o);
        return BAD(e, "invalid_json", NULL, "We could not parse the JSON body of your request: %s. The API expects "
                   "a JSON object.", len == 0 ? "the body is empty" : "it is not valid JSON");
    }
    bool ok = cJSON_IsObject(o) ? parse_object(m, kind, o, seed, out, e)
                                : BAD(e, "invalid_type", NULL, "The body of your request must be a JSON object, not "
                                      "%s.", type_name(o));
    cJSON_Delete(o);
    if (!ok)
        serve_api_request_free(out);
    return ok;
}

void serve_api_request_free(serve_api_request *r)
{
    free(r->prompt);
    for (int i = 0; i < r->nstops; i++)
        free(r->stops[i]);
    memset(r, 0, sizeof *r);
}

void serve_api_params(const serve_api_request *r, serve_params *p)
{
    memset(p, 0, sizeof *p);
    p->prompt = r->prompt;
    p->n_prompt = r->n_prompt;
    p->max_tokens = r->max_tokens;
    p->n = r->n;
    p->so = r->so;
    p->stops = (const char *const *)r->stops;
    p->nstops = r->nstops;
    p->strip_leading_space = r->strip_leading_space;
}

/* ---- responses ---- */

void serve_api_head_init(serve_api_head *h, serve_api_kind kind, const char *model, long long created,
                         uint64_t random)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    h->kind = kind;
    h->model = model;
    h->created = created;
    int k = snprintf(h->id, sizeof h->id, "%s", kind == SERVE_API_CHAT ? "chatcmpl-" : "cmpl-");
    uint64_t x = random;
    for (int i = 0; i < 24; i++) {
        /* splitmix64 steps: 24 letters from one seed */
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        h->id[k++] = a[z % 62];
    }
    h->id[k] = '\0';
}

const char *serve_api_finish_name(serve_finish f)
{
    switch (f) {
    case SERVE_FINISH_STOP: return "stop";
    case SERVE_FINISH_LENGTH: return "length";
    case SERVE_FINISH_CANCELLED: return "stop";
    case SERVE_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static cJSON *head_object(const serve_api_head *h, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    const char *object = h->kind == SERVE_API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                   : "text_completion";
    if (o && cJSON_AddStringToObject(o, "id", h->id) && cJSON_AddStringToObject(o, "object", object) &&
        cJSON_AddNumberToObject(o, "created", (double)h->created) && cJSON_AddStringToObject(o, "model", h->model))
        return o;
    cJSON_Delete(o);
    return NULL;
}

static bool add_usage(cJSON *o, int prompt_tokens, int completion_tokens)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    return u && cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens) &&
           cJSON_AddNumberToObject(u, "completion_tokens", completion_tokens) &&
           cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens + completion_tokens);
}

/* text as a raw (already escaped) JSON string member */
static bool add_text(cJSON *o, const char *name, const char *text, size_t len)
{
    char *s = serve_api_json_string(text ? text : "", text ? len : 0);
    bool ok = s && cJSON_AddRawToObject(o, name, s);
    free(s);
    return ok;
}

static bool add_finish(cJSON *o, serve_finish f)
{
    const char *name = serve_api_finish_name(f);
    return name ? cJSON_AddStringToObject(o, "finish_reason", name) != NULL
                : cJSON_AddNullToObject(o, "finish_reason") != NULL;
}

static char *print_and_free(cJSON *o, bool ok)
{
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *serve_api_response_json(const serve_api_head *h, int n, char *const *texts, const size_t *lens,
                              const serve_finish *finish, int prompt_tokens, int completion_tokens)
{
    cJSON *o = head_object(h, false), *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    bool ok = choices != NULL;
    for (int i = 0; i < n && ok; i++) {
        cJSON *c = cJSON_CreateObject();
        ok = c && cJSON_AddItemToArray(choices, c);
        if (!ok) {
            cJSON_Delete(c);
            break;
        }
        ok = cJSON_AddNumberToObject(c, "index", i) != NULL;
        if (ok && h->kind == SERVE_API_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(c, "message");
            ok = msg && cJSON_AddStringToObject(msg, "role", "assistant") && add_text(msg, "content", texts[i], lens[i]);
        } else if (ok)
            ok = add_text(c, "text", texts[i], lens[i]);
        ok = ok && cJSON_AddNullToObject(c, "logprobs") && add_finish(c, finish[i]);
    }
    ok = ok && add_usage(o, prompt_tokens, completion_tokens);
    return print_and_free(o, ok);
}

char *serve_api_chunk_json(const serve_api_head *h, int choice, bool first, const char *text, size_t len,
                           serve_finish finish, bool with_usage)
{
    cJSON *o = head_object(h, true), *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL,
          *c = choices ? cJSON_CreateObject() : NULL;
    bool ok = c && cJSON_AddItemToArray(choices, c);
    if (!ok)
        cJSON_Delete(c);
    ok = ok && cJSON_AddNumberToObject(c, "index", choice);
    if (ok && h->kind == SERVE_API_CHAT) {
        /* the role in a choice's first chunk; content while it runs; the last chunk's delta is empty */
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        ok = d != NULL;
        if (ok && first)
            ok = cJSON_AddStringToObject(d, "role", "assistant") != NULL;
        if (ok && (len > 0 || (first && finish == SERVE_FINISH_NONE)))
            ok = add_text(d, "content", text, len);
    } else if (ok)
        ok = add_text(c, "text", text, len);
    ok = ok && cJSON_AddNullToObject(c, "logprobs") && add_finish(c, finish);
    if (ok && with_usage)
        ok = cJSON_AddNullToObject(o, "usage") != NULL;
    return print_and_free(o, ok);
}

char *serve_api_usage_chunk_json(const serve_api_head *h, int prompt_tokens, int completion_tokens)
{
    cJSON *o = head_object(h, true);
    bool ok = o && cJSON_AddArrayToObject(o, "choices") && add_usage(o, prompt_tokens, completion_tokens);
    return print_and_free(o, ok);
}

static cJSON *model_object(const serve_api_model *m, long long created)
{
    cJSON *x = cJSON_CreateObject();
    if (x && cJSON_AddStringToObject(x, "id", m->model_name) && cJSON_AddStringToObject(x, "object", "model") &&
        cJSON_AddNumberToObject(x, "created", (double)created) && cJSON_AddStringToObject(x, "owned_by", "colossal"))
        return x;
    cJSON_Delete(x);
    return NULL;
}

char *serve_api_model_json(const serve_api_model *m, long long created)
{
    cJSON *x = model_object(m, created);
    return print_and_free(x, x != NULL);
}

char *serve_api_models_json(const serve_api_model *m, long long created)
{
    cJSON *o = cJSON_CreateObject(), *x = model_object(m, created);
    bool ok = o && x && cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = ok ? cJSON_AddArrayToObject(o, "data") : NULL;
    ok = data && cJSON_AddItemToArray(data, x);
    if (!ok)
        cJSON_Delete(x);
    return print_and_free(o, ok);
}
