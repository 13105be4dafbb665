/* tok_config.c - tokenizer_config.json and special_tokens_map.json beside the
 * vocabulary files: the special tokens (BOS, EOS, pad), the model's maximum
 * length, the tokenizer class, and the added tokens that transformers 5
 * makes of them. Calls tok_util.c and the formats library's file reader.
 *
 * transformers' rules, as read from its code and checked on CLIP folders:
 * the named special tokens are taken in the order bos, eos, unk, sep, pad,
 * cls, mask, then any other "*_token" entry of tokenizer_config.json, then
 * the lists additional_special_tokens / extra_special_tokens. A value is a
 * string or an object {"content", "lstrip", "rstrip", "normalized", ...}.
 * Without an "added_tokens_decoder" in tokenizer_config.json, the values of
 * special_tokens_map.json replace those of tokenizer_config.json. Each value
 * becomes a special added token: a string one is not "normalized" (matched
 * in the raw text), an object one as its fields say; one whose content is in
 * added_tokens_decoder takes that entry's fields. The decoder's entries come
 * first, in id order; a later token of the same content replaces the fields
 * of an earlier one. Contents not in the vocabulary get the next new ids. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "textio.h"
#include "tok_internal.h"

#define CONFIG_MAX ((size_t)64 << 20)
/* the most added tokens the configuration may make (each costs a scan of the
 * vocabulary and of the tokens before it; CLIP's folders make two or three) */
#define ADDED_MAX 1024

static const char *const NAMED[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                    "pad_token", "cls_token", "mask_token"};
enum { N_NAMED = 7 };

static col_status read_json(const char *dir, const char *file, cJSON **out, char **pathp, col_err *err)
{
    *out = NULL;
    size_t a = strlen(dir), b = strlen(file);
    char *path = *pathp = malloc(a + b + 2);
    if (!path)
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    snprintf(path, a + b + 2, "%s/%s", dir, file);
    struct stat sb;
    col_status st = COL_OK;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        char *text;
        size_t len;
        if ((st = col_read_file(path, CONFIG_MAX, &text, &len, err)) == COL_OK) {
            st = col_tok_parse_json(text, len, path, out, err);
            free(text);
        }
        if (st == COL_OK && !cJSON_IsObject(*out)) {
            cJSON_Delete(*out);
            *out = NULL;
            st = col_tok_fail(err, COL_EFORMAT, path, "not a JSON object");
        }
    }
    return st;
}

col_status col_tok_config_read(const char *dir, col_tok_config *c, col_err *err)
{
    memset(c, 0, sizeof *c);
    col_status st = read_json(dir, "tokenizer_config.json", &c->cfg, &c->cfg_path, err);
    if (st == COL_OK)
        st = read_json(dir, "special_tokens_map.json", &c->map, &c->map_path, err);
    if (st != COL_OK)
        col_tok_config_free(c);
    return st;
}

void col_tok_config_free(col_tok_config *c)
{
    cJSON_Delete(c->cfg);
    cJSON_Delete(c->map);
    free(c->cfg_path);
    free(c->map_path);
    memset(c, 0, sizeof *c);
}

const char *col_tok_config_class(const col_tok_config *c)
{
    return cJSON_GetStringValue(col_tok_json_field(c->cfg, "tokenizer_class"));
}

/* the value of a special-token key: NULL when absent, JSON null when null;
 * *from_map: it comes from special_tokens_map.json */
static const cJSON *value_of(const col_tok_config *c, const char *key, bool *from_map)
{
    const cJSON *v = NULL;
    if (!col_tok_json_field(c->cfg, "added_tokens_decoder"))
        v = col_tok_json_field(c->map, key);
    *from_map = v != NULL;
    return v ? v : col_tok_json_field(c->cfg, key);
}

static const char *content_of(const cJSON *v)
{
    return cJSON_IsObject(v) ? cJSON_GetStringValue(col_tok_json_field(v, "content")) : cJSON_GetStringValue(v);
}

static const char *file_of(const col_tok_config *c, bool from_map)
{
    const char *p = from_map ? c->map_path : c->cfg_path;
    return p ? p : from_map ? "special_tokens_map.json" : "tokenizer_config.json";
}

int64_t col_tok_config_max_length(const col_tok_config *c)
{
    int64_t n;
    const cJSON *v = col_tok_json_field(c->cfg, "model_max_length");
    return v && col_tok_json_int(v, 1, INT32_MAX, &n) ? n : 0;
}

/* ---- added tokens ---- */

/* out gets {"content", "id", "special", "lstrip", "rstrip", "normalized"} for content,
 * or that entry's fields replaced when content is there already */
static col_status put_token(cJSON *out, const char *content, const cJSON *fields, bool special, bool norm,
                            int64_t *next, const cJSON *vocab, col_err *err)
{
    if (!*content)
        return COL_OK; /* transformers skips empty tokens */
    bool lstrip = col_tok_json_bool(fields, "lstrip", 0) > 0, rstrip = col_tok_json_bool(fields, "rstrip", 0) > 0;
    cJSON *e = NULL, *x;
    cJSON_ArrayForEach(x, out) if (strcmp(cJSON_GetStringValue(col_tok_json_field(x, "content")), content) == 0) e = x;
    if (e) {
        cJSON_DeleteItemFromObjectCaseSensitive(e, "special");
        cJSON_DeleteItemFromObjectCaseSensitive(e, "lstrip");
        cJSON_DeleteItemFromObjectCaseSensitive(e, "rstrip");
        cJSON_DeleteItemFromObjectCaseSensitive(e, "normalized");
    } else {
        int64_t id;
        if (!(e = cJSON_CreateObject()) || !cJSON_AddItemToArray(out, e) || !cJSON_AddStringToObject(e, "content", content))
            return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
        if (!col_tok_json_int(col_tok_json_field(vocab, content), 0, INT32_MAX, &id))
            id = (*next)++;
        if (!cJSON_AddNumberToObject(e, "id", (double)id))
            return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    }
    if (!cJSON_AddBoolToObject(e, "special", special) || !cJSON_AddBoolToObject(e, "lstrip", lstrip) ||
        !cJSON_AddBoolToObject(e, "rstrip", rstrip) || !cJSON_AddBoolToObject(e, "normalized", norm))
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    return COL_OK;
}

/* an entry's flags: booleans or absent */
static bool flags_ok(const cJSON *o)
{
    static const char *const keys[] = {"lstrip", "rstrip", "special", "normalized"};
    for (int k = 0; k < 4; k++)
        if (col_tok_json_bool(o, keys[k], 0) < 0)
            return false;
    return true;
}

/* an added_tokens_decoder entry: AddedToken(**entry), whose "normalized" defaults to !special */
static col_status put_entry(cJSON *out, const char *content, const cJSON *d, int64_t *next, const cJSON *vocab,
                            col_err *err)
{
    int sp = col_tok_json_bool(d, "special", 0);
    return put_token(out, content, d, sp, col_tok_json_bool(d, "normalized", !sp), next, vocab, err);
}

/* one special-token value (string or object), through added_tokens_decoder */
static col_status put_special(const col_tok_config *c, cJSON *out, const cJSON *v, bool from_map,
                              const cJSON *decoder, int64_t *next, const cJSON *vocab, const char *what, col_err *err)
{
    char s1[64];
    if (!v || cJSON_IsNull(v))
        return COL_OK;
    const char *content = content_of(v);
    if (!content || (cJSON_IsObject(v) && !flags_ok(v)))
        return col_tok_fail(err, COL_EFORMAT, file_of(c, from_map), "%s is neither a string nor an object with a "
                            "\"content\" string and boolean flags", col_tok_show(what, strlen(what), s1));
    const cJSON *d;
    cJSON_ArrayForEach(d, decoder) {
        const char *dc = content_of(d);
        if (dc && strcmp(dc, content) == 0)
            return put_entry(out, content, d, next, vocab, err);
    }
    if (!cJSON_IsObject(v)) /* AddedToken(content, special=True) */
        return put_token(out, content, NULL, true, false, next, vocab, err);
    /* special_tokens_map.json: AddedToken(**v, special=True); tokenizer_config.json: AddedToken(**v), made
       special later, its "normalized" default being !special as it was given */
    int norm_default = from_map ? 0 : !col_tok_json_bool(v, "special", 0);
    return put_token(out, content, v, true, col_tok_json_bool(v, "normalized", norm_default), next, vocab, err);
}

static bool is_named(const char *key)
{
    for (int k = 0; k < N_NAMED; k++)
        if (strcmp(key, NAMED[k]) == 0)
            return true;
    return false;
}

col_status col_tok_config_added(const col_tok_config *c, const cJSON *vocab, const char *const defaults[N_NAMED],
                                cJSON **out, col_err *err)
{
    char s1[64];
    const char *name = file_of(c, false);
    int64_t next = 0, id;
    bool from_map;
    const cJSON *x, *decoder = col_tok_json_field(c->cfg, "added_tokens_decoder");
    cJSON_ArrayForEach(x, vocab) if (col_tok_json_int(x, 0, INT32_MAX - 1, &id) && id >= next) next = id + 1;
    if (decoder && !cJSON_IsObject(decoder))
        return col_tok_fail(err, COL_EFORMAT, name, "added_tokens_decoder is not an object of id -> token");
    static const char *const lists[] = {"additional_special_tokens", "extra_special_tokens"};
    int many = cJSON_GetArraySize(decoder) + cJSON_GetArraySize(c->cfg);
    for (int k = 0; k < 2; k++)
        many += cJSON_GetArraySize(value_of(c, lists[k], &from_map));
    if (many > ADDED_MAX)
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "more than %d special and added tokens are not supported",
                            ADDED_MAX);
    cJSON *arr = *out = cJSON_CreateArray();
    if (!arr)
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    col_status st = COL_OK;
    cJSON_ArrayForEach(x, decoder) {
        char *end;
        long long v = strtoll(x->string, &end, 10);
        if (*end || end == x->string || v < 0 || v >= INT32_MAX || !cJSON_IsObject(x) || !content_of(x) || !flags_ok(x))
            return col_tok_fail(err, COL_EFORMAT, name, "added_tokens_decoder: entry '%s' is not id -> {\"content\": "
                                "string, boolean flags}", col_tok_show(x->string, strlen(x->string), s1));
        const cJSON *in_vocab = col_tok_json_field(vocab, content_of(x));
        if (in_vocab && !(col_tok_json_int(in_vocab, 0, INT32_MAX, &id) && id == v))
            return col_tok_fail(err, COL_EFORMAT, name, "added_tokens_decoder gives id %lld to '%s', which the "
                                "vocabulary numbers otherwise", v, col_tok_show(content_of(x), strlen(content_of(x)), s1));
    }
    /* the decoder's entries, in id order */
    for (int64_t last = -1; st == COL_OK;) {
        const cJSON *best = NULL;
        int64_t best_id = INT64_MAX;
        cJSON_ArrayForEach(x, decoder) {
            int64_t v = strtoll(x->string, NULL, 10);
            if (v > last && v < best_id)
                best = x, best_id = v;
        }
        if (!best)
            break;
        int64_t fixed = best_id;
        st = put_entry(arr, content_of(best), best, &fixed, vocab, err);
        next = best_id >= next ? best_id + 1 : next;
        last = best_id;
    }
    /* the named special tokens, then the other *_token entries, then the lists */
    for (int k = 0; st == COL_OK && k < N_NAMED; k++) {
        const cJSON *v = value_of(c, NAMED[k], &from_map);
        cJSON *def = NULL;
        if (!v && defaults && defaults[k])
            v = def = cJSON_CreateString(defaults[k]);
        st = put_special(c, arr, v, from_map, decoder, &next, vocab, NAMED[k], err);
        cJSON_Delete(def);
    }
    cJSON_ArrayForEach(x, c->cfg) {
        size_t n = strlen(x->string);
        if (st == COL_OK && n > 6 && strcmp(x->string + n - 6, "_token") == 0 && !is_named(x->string) &&
            (cJSON_IsString(x) || cJSON_IsObject(x)) && content_of(x))
            st = put_special(c, arr, x, false, decoder, &next, vocab, x->string, err);
    }
    for (int k = 0; k < 2 && st == COL_OK; k++) {
        const cJSON *list = value_of(c, lists[k], &from_map), *y;
        if (list && !cJSON_IsArray(list) && !cJSON_IsNull(list))
            return col_tok_fail(err, COL_EUNSUPPORTED, file_of(c, from_map), "%s that is not a list is not supported",
                                lists[k]);
        cJSON_ArrayForEach(y, list) if (st == COL_OK) st = put_special(c, arr, y, from_map, decoder, &next, vocab, lists[k], err);
    }
    if (next > INT32_MAX - 1)
        return col_tok_fail(err, COL_EFORMAT, name, "too many tokens");
    return st;
}

const char *col_tok_config_value(const col_tok_config *c, const char *key, bool *present, const char **file)
{
    bool from_map;
    const cJSON *v = value_of(c, key, &from_map);
    *present = v != NULL;
    *file = file_of(c, from_map);
    return content_of(v);
}

bool col_tok_config_is_null(const col_tok_config *c, const char *key)
{
    bool from_map;
    return cJSON_IsNull(value_of(c, key, &from_map));
}
