/* tok_decode.c - decoding: tokenizer.json's decoder (ByteLevel, Replace,
 * ByteFallback, Fuse, Strip, Metaspace) turned at load time into each id's
 * decoded bytes, and col_tok_decode, which concatenates them. Calls only
 * tok_util.c. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- the decoder: each id's decoded bytes ---- */

/* the decoder as a list of per-token steps */
enum { D_BYTELEVEL, D_REPLACE, D_BYTEFALLBACK };
typedef struct {
    int kind;
    const char *a, *b;
} dstep;
typedef struct {
    dstep s[16];
    int n;
} dchain;

static col_status parse_decoder(col_tokenizer *t, const cJSON *d, dchain *ch, const char *name, col_err *err)
{
    char s1[64];
    if (!d || cJSON_IsNull(d))
        return COL_OK;
    const char *type = cJSON_IsObject(d) ? cJSON_GetStringValue(col_tok_json_field(d, "type")) : NULL;
    if (!type)
        return col_tok_fail(err, COL_EFORMAT, name, "decoder: an entry has no \"type\"");
    if (ch->n >= 15)
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "decoder: too many steps");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = col_tok_json_field(d, "decoders"), *x;
        if (!cJSON_IsArray(list))
            return col_tok_fail(err, COL_EFORMAT, name, "decoder: Sequence has no \"decoders\" array");
        cJSON_ArrayForEach(x, list) {
            col_status st = parse_decoder(t, x, ch, name, err);
            if (st != COL_OK)
                return st;
        }
    } else if (strcmp(type, "ByteLevel") == 0) {
        ch->s[ch->n++] = (dstep){D_BYTELEVEL, NULL, NULL};
    } else if (strcmp(type, "ByteFallback") == 0) {
        ch->s[ch->n++] = (dstep){D_BYTEFALLBACK, NULL, NULL};
    } else if (strcmp(type, "Fuse") == 0) {
        /* concatenation is what decode does anyway */
    } else if (strcmp(type, "Replace") == 0) {
        const char *a = cJSON_GetStringValue(col_tok_json_field(col_tok_json_field(d, "pattern"), "String"));
        const char *b = cJSON_GetStringValue(col_tok_json_field(d, "content"));
        if (!a || !*a || !b)
            return col_tok_fail(err, COL_EUNSUPPORTED, name, "decoder: only Replace of a non-empty String is supported");
        ch->s[ch->n++] = (dstep){D_REPLACE, a, b};
    } else if (strcmp(type, "Strip") == 0) {
        const char *c = cJSON_GetStringValue(col_tok_json_field(d, "content"));
        int64_t start, stop;
        if (!c || strcmp(c, " ") != 0 || !col_tok_json_int(col_tok_json_field(d, "start"), 0, 1000, &start) ||
            !col_tok_json_int(col_tok_json_field(d, "stop"), 0, 0, &stop))
            return col_tok_fail(err, COL_EUNSUPPORTED, name, "decoder: only Strip of leading spaces is supported");
        t->strip_leading = (int)start;
    } else if (strcmp(type, "Metaspace") == 0) {
        const cJSON *r = col_tok_json_field(d, "replacement");
        const char *repl = r ? cJSON_GetStringValue(r) : "\xE2\x96\x81";
        const char *scheme = cJSON_GetStringValue(col_tok_json_field(d, "prepend_scheme"));
        int aps = col_tok_json_bool(d, "add_prefix_space", 1);
        if (!repl || !*repl || aps < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "decoder: Metaspace needs a replacement character");
        ch->s[ch->n++] = (dstep){D_REPLACE, repl, " "};
        if (scheme ? strcmp(scheme, "never") != 0 : aps)
            t->strip_leading = -1;
    } else {
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "decoder type '%s' is not supported",
                            col_tok_show(type, strlen(type), s1));
    }
    return COL_OK;
}

typedef struct {
    char *p;
    size_t cap;
} scratch;

static bool reserve(scratch *s, size_t n)
{
    if (n <= s->cap)
        return true;
    char *p = realloc(s->p, 2 * n);
    if (!p)
        return false;
    s->p = p;
    s->cap = 2 * n;
    return true;
}

/* cur[0..*n) with a -> b, through tmp */
static bool dec_replace(scratch *cur, size_t *n, scratch *tmp, const char *a, const char *b)
{
    size_t al = strlen(a), bl = strlen(b), k = 0;
    if (!reserve(tmp, *n / al * bl + *n + 1))
        return false;
    for (size_t i = 0; i < *n;) {
        if (i + al <= *n && memcmp(cur->p + i, a, al) == 0) {
            memcpy(tmp->p + k, b, bl);
            k += bl;
            i += al;
        } else
            tmp->p[k++] = cur->p[i++];
    }
    scratch x = *cur;
    *cur = *tmp;
    *tmp = x;
    *n = k;
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static col_status build_dec(col_tokenizer *t, const dchain *ch, const char *name, col_err *err)
{
    t->dec_off = calloc((size_t)t->n_ids, sizeof *t->dec_off);
    t->dec_len = calloc((size_t)t->n_ids, sizeof *t->dec_len);
    scratch out = {0}, cur = {0}, tmp = {0};
    size_t at = 0;
    bool ok = t->dec_off && t->dec_len;
    for (int32_t i = 0; ok && i < t->n_ids; i++) {
        if (!t->flags[i])
            continue;
        size_t n = t->name_len[i];
        if (!(ok = reserve(&cur, n + 1)))
            break;
        memcpy(cur.p, t->names + t->name_off[i], n);
        for (int k = 0; ok && k < ch->n; k++) {
            const dstep *s = &ch->s[k];
            if (s->kind == D_BYTELEVEL) {
                size_t len;
                if (!(ok = reserve(&tmp, n + 1)))
                    break;
                if (col_bytelevel_raw(cur.p, n, tmp.p, &len)) {
                    memcpy(cur.p, tmp.p, len);
                    n = len;
                }
            } else if (s->kind == D_REPLACE) {
                ok = dec_replace(&cur, &n, &tmp, s->a, s->b);
            } else if (n == 6 && memcmp(cur.p, "<0x", 3) == 0 && cur.p[5] == '>' && hexval(cur.p[3]) >= 0 &&
                       hexval(cur.p[4]) >= 0) { /* D_BYTEFALLBACK */
                cur.p[0] = (char)(hexval(cur.p[3]) * 16 + hexval(cur.p[4]));
                n = 1;
            }
        }
        if (!ok)
            break;
        if (at + n > UINT32_MAX) {
            ok = false;
            break;
        }
        if (at + n + 1 > out.cap) {
            size_t cap = 2 * (at + n) + 4096;
            char *p = realloc(out.p, cap);
            if (!(ok = p != NULL))
                break;
            out.p = p;
            out.cap = cap;
        }
        memcpy(out.p + at, cur.p, n);
        t->dec_off[i] = (uint32_t)at;
        t->dec_len[i] = (uint32_t)n;
        at += n;
    }
    free(cur.p);
    free(tmp.p);
    t->dec = out.p;
    return ok ? COL_OK : col_tok_fail(err, COL_ENOMEM, name, "out of memory");
}

col_status col_tok_build_decoder(col_tokenizer *t, const cJSON *decoder, bool bytelevel, const char *name,
                                 col_err *err)
{
    dchain ch = {.n = 0};
    if (bytelevel)
        ch.s[ch.n++] = (dstep){D_BYTELEVEL, NULL, NULL};
    col_status st = parse_decoder(t, decoder, &ch, name, err);
    if (st == COL_OK && t->eow_len) /* transformers' CLIPTokenizer: the suffix becomes ' ' */
        ch.s[ch.n++] = (dstep){D_REPLACE, t->eow, " "};
    return st != COL_OK ? st : build_dec(t, &ch, name, err);
}

/* ---- decoding ---- */

/* Python's str.isspace() for the character at s[0..n), 0 if it is not one */
static size_t py_space(const unsigned char *s, size_t n)
{
    uint32_t cp;
    size_t k = col_utf8_char(s, n, &cp);
    return k && (col_unicode_space(cp) || (cp >= 0x1C && cp <= 0x1F)) ? k : 0;
}

/* transformers' CLIPTokenizer decode: text.replace("</w>", " ").strip() (the
 * suffix at the end of a token is ' ' already) */
static size_t clip_finish(const col_tokenizer *t, char *out, size_t k)
{
    size_t w = 0, e = t->eow_len;
    for (size_t i = 0; i < k;) {
        if (i + e <= k && memcmp(out + i, t->eow, e) == 0) {
            out[w++] = ' ';
            i += e;
        } else
            out[w++] = out[i++];
    }
    const unsigned char *u = (const unsigned char *)out;
    size_t a = 0, b = w, s;
    while (a < b && (s = py_space(u + a, b - a)) > 0)
        a += s;
    for (bool more = true; more && b > a;) {
        more = false;
        for (size_t m = 1; m <= 4 && m <= b - a; m++)
            if (py_space(u + b - m, m) == m) {
                b -= m;
                more = true;
                break;
            }
    }
    memmove(out, out + a, b - a);
    return b - a;
}

col_status col_tok_decode(const col_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **text,
                          size_t *len, col_err *err)
{
    *text = NULL;
    *len = 0;
    if (!t || (!ids && n))
        return col_err_set(err, COL_EINVAL, "col_tok_decode: no tokenizer or no ids");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids)
            return col_err_set(err, COL_EINVAL, "token id %d at position %zu is out of range [0, %d)", id, i, t->n_ids);
        if (!t->flags[id])
            return col_err_set(err, COL_EINVAL, "token id %d at position %zu names no token", id, i);
        total += t->dec_len[id];
    }
    char *out = malloc(total + 1);
    if (!out)
        return col_err_set(err, COL_ENOMEM, "col_tok_decode: out of memory for %zu bytes", total);
    size_t k = 0;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (skip_special && (t->flags[id] & COL_TOKF_SPECIAL))
            continue;
        const char *s = t->dec + t->dec_off[id];
        if (first && t->strip_leading < 0) { /* Metaspace: the first token loses its spaces */
            for (uint32_t j = 0; j < t->dec_len[id]; j++)
                if (s[j] != ' ')
                    out[k++] = s[j];
        } else {
            memcpy(out + k, s, t->dec_len[id]);
            k += t->dec_len[id];
        }
        first = false;
    }
    size_t strip = 0;
    while (t->strip_leading > 0 && strip < (size_t)t->strip_leading && strip < k && out[strip] == ' ')
        strip++;
    memmove(out, out + strip, k - strip);
    k -= strip;
    if (t->eow_len)
        k = clip_finish(t, out, k);
    out[k] = '\0';
    *text = out;
    *len = k;
    return COL_OK;
}

const char *col_tok_token_bytes(const col_tokenizer *t, int32_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->flags[id])
        return NULL;
    *len = t->dec_len[id];
    return t->dec + t->dec_off[id];
}
