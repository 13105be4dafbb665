/* tok_gguf.c - a GGUF file's tokenizer as tokenizer.json text (tok_gguf.h). */
#include "tok_gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textio.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* LLaMA-3's split (tokenizer.json spelling, JSON-escaped) */
static const char LLAMA3_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
    "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";

/* a JSON string of n bytes */
static void put_json_str(col_strbuf *b, const char *s, size_t n)
{
    col_strbuf_put(b, "\"", 1);
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        col_strbuf_put(b, s + from, i - from);
        char esc[8];
        snprintf(esc, sizeof esc, c == '"' ? "\\\"" : c == '\\' ? "\\\\" : "\\u%04x", c);
        col_strbuf_puts(b, esc);
        from = i + 1;
    }
    col_strbuf_put(b, s + from, n - from);
    col_strbuf_put(b, "\"", 1);
}

/* ---- a string -> first id table (open addressing) ---- */

typedef struct {
    const char **s;
    size_t *len;
    int64_t *slot; /* token id + 1, 0 empty */
    size_t cap;
} strtab;

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* the id of s[0..n), or -1 */
static int64_t tab_find(const strtab *t, const char *s, size_t n)
{
    for (size_t i = hash(s, n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        int64_t id = t->slot[i] - 1;
        if (id < 0)
            return -1;
        if (t->len[id] == n && memcmp(t->s[id], s, n) == 0)
            return id;
    }
}

/* adds id unless its string is there; false when it was (a repeat) */
static bool tab_add(strtab *t, int64_t id)
{
    size_t n = t->len[id];
    for (size_t i = hash(t->s[id], n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        int64_t o = t->slot[i] - 1;
        if (o < 0) {
            t->slot[i] = id + 1;
            return true;
        }
        if (t->len[o] == n && memcmp(t->s[o], t->s[id], n) == 0)
            return false;
    }
}

/* ---- merges from SentencePiece scores ---- */

typedef struct {
    float score;
    int64_t order;     /* insertion order: the stable tie-break */
    int64_t l, r;      /* ids of the halves */
    uint32_t split;    /* bytes in the left half */
    int64_t tok;       /* the merged token */
} merge;

static int cmp_merge(const void *a, const void *b)
{
    const merge *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_local(const void *a, const void *b)
{
    const merge *x = a, *y = b;
    if (x->l != y->l)
        return x->l < y->l ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

/* transformers' generate_merges(vocab, scores) as LlamaConverter called it: for each token in id order, its
 * splits at character boundaries into two tokens (ordered by the halves' ids), all sorted by the merged
 * token's score, highest first, stably */
static col_status spm_merges(const strtab *t, int64_t n, const double *scores, merge **out, int64_t *nout,
                             col_err *err)
{
    int64_t cap = 1024, k = 0;
    merge *m = malloc(sizeof *m * (size_t)cap);
    if (!m)
        return col_err_set(err, COL_ENOMEM, "out of memory for merges");
    for (int64_t id = 0; id < n; id++) {
        if (tab_find(t, t->s[id], t->len[id]) != id) /* a repeated string counts once, as in a dict */
            continue;
        int64_t first = k;
        for (size_t at = 1; at < t->len[id]; at++) {
            if (((unsigned char)t->s[id][at] & 0xC0) == 0x80) /* inside a UTF-8 character */
                continue;
            int64_t l = tab_find(t, t->s[id], at), r = tab_find(t, t->s[id] + at, t->len[id] - at);
            if (l < 0 || r < 0)
                continue;
            if (k == cap) {
                merge *g = realloc(m, sizeof *m * (size_t)(cap *= 2));
                if (!g) {
                    free(m);
                    return col_err_set(err, COL_ENOMEM, "out of memory for merges");
                }
                m = g;
            }
            m[k++] = (merge){.score = (float)scores[id], .l = l, .r = r, .split = (uint32_t)at, .tok = id};
        }
        qsort(m + first, (size_t)(k - first), sizeof *m, cmp_local);
        for (int64_t i = first; i < k; i++)
            m[i].order = i;
    }
    qsort(m, (size_t)k, sizeof *m, cmp_merge);
    *out = m;
    *nout = k;
    return COL_OK;
}

/* ---- the JSON ---- */

#define TRY(x)                   \
    do {                         \
        if ((st = (x)) != COL_OK) \
            goto done;           \
    } while (0)

/* an optional bool tokenizer.ggml.<key> */
static bool opt_bool(const col_gguf *g, const char *key, bool dflt)
{
    bool v = dflt;
    col_err e = {0};
    if (col_gguf_find_key(g, key) >= 0 && col_gguf_get_bool(g, key, &v, &e) != COL_OK)
        return dflt;
    return v;
}

/* an optional token id, -1 when absent; COL_EFORMAT when outside the vocabulary */
static col_status opt_id(const col_gguf *g, const char *key, int64_t n, int64_t *id, col_err *err)
{
    *id = -1;
    if (col_gguf_find_key(g, key) < 0)
        return COL_OK;
    col_status st = col_gguf_get_int(g, key, id, err);
    if (st == COL_OK && (*id < 0 || *id >= n))
        return col_err_set(err, COL_EFORMAT, "%s: %s %lld is not a token id (the vocabulary has %lld)",
                           col_gguf_name(g), key, (long long)*id, (long long)n);
    return st;
}

/* the post-processor: BOS and / or EOS around the text */
static void put_template(col_strbuf *b, const strtab *t, int64_t bos, int64_t eos)
{
    if (bos < 0 && eos < 0) {
        col_strbuf_puts(b, "\"post_processor\":null,");
        return;
    }
    col_strbuf_puts(b, "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[");
    if (bos >= 0) {
        col_strbuf_puts(b, "{\"SpecialToken\":{\"id\":");
        put_json_str(b, t->s[bos], t->len[bos]);
        col_strbuf_puts(b, ",\"type_id\":0}},");
    }
    col_strbuf_puts(b, "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}");
    if (eos >= 0) {
        col_strbuf_puts(b, ",{\"SpecialToken\":{\"id\":");
        put_json_str(b, t->s[eos], t->len[eos]);
        col_strbuf_puts(b, ",\"type_id\":0}}");
    }
    col_strbuf_puts(b, "],\"special_tokens\":{");
    int64_t ids[2] = {bos, eos};
    for (int k = 0; k < 2; k++) {
        int64_t id = ids[k];
        if (id < 0 || (k == 1 && id == bos))
            continue;
        if (k == 1 && bos >= 0)
            col_strbuf_puts(b, ",");
        put_json_str(b, t->s[id], t->len[id]);
        col_strbuf_puts(b, ":{\"id\":");
        put_json_str(b, t->s[id], t->len[id]);
        char num[48];
        snprintf(num, sizeof num, ",\"ids\":[%lld],\"tokens\":[", (long long)id);
        col_strbuf_puts(b, num);
        put_json_str(b, t->s[id], t->len[id]);
        col_strbuf_puts(b, "]}");
    }
    col_strbuf_puts(b, "}},");
}

col_status col_tok_gguf_json(const col_gguf *g, char **json, size_t *json_len, col_err *err)
{
    *json = NULL;
    const char *name = col_gguf_name(g), *model, *pre = "gpt-2";
    size_t mlen, plen = 5;
    col_status st = col_gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen, err);
    if (st != COL_OK)
        return st;
    bool spm = mlen == 5 && memcmp(model, "llama", 5) == 0;
    if (!spm && !(mlen == 4 && memcmp(model, "gpt2", 4) == 0))
        return col_err_set(err, COL_EUNSUPPORTED, "%s: tokenizer \"%.*s\" is not supported (gpt2, llama)", name,
                           (int)(mlen > 40 ? 40 : mlen), model);
    bool llama3 = false;
    if (!spm && col_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        if ((st = col_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &plen, err)) != COL_OK)
            return st;
        llama3 = (plen == 9 && memcmp(pre, "llama-bpe", 9) == 0) || (plen == 6 && memcmp(pre, "llama3", 6) == 0) ||
                 (plen == 8 && memcmp(pre, "llama-v3", 8) == 0);
        if (!llama3 && !(plen == 5 && memcmp(pre, "gpt-2", 5) == 0))
            return col_err_set(err, COL_EUNSUPPORTED, "%s: the pre-tokenizer \"%.*s\" is not supported (gpt-2, "
                               "llama-bpe)", name, (int)(plen > 40 ? 40 : plen), pre);
    }
    col_gguf_value toks, types = {0}, scores = {0}, merges = {0};
    if ((st = col_gguf_get_array(g, "tokenizer.ggml.tokens", COL_GGUF_STRING, &toks, err)) != COL_OK)
        return st;
    int64_t n = (int64_t)toks.count;
    if (n <= 0 || n > (1 << 24))
        return col_err_set(err, COL_EFORMAT, "%s: tokenizer.ggml.tokens holds %lld tokens (1 .. 2^24)", name,
                           (long long)n);
    strtab t = {0};
    int32_t *tt = NULL;
    double *sc = NULL;
    merge *mg = NULL;
    int64_t nmg = 0, bos, eos, unk = -1;
    col_strbuf b = {0};
    t.s = malloc(sizeof *t.s * (size_t)n);
    t.len = malloc(sizeof *t.len * (size_t)n);
    for (t.cap = 16; t.cap < 2 * (size_t)n; t.cap *= 2) {
    }
    t.slot = calloc(t.cap, sizeof *t.slot);
    tt = malloc(sizeof *tt * (size_t)n);
    if (!t.s || !t.len || !t.slot || !tt) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory for %lld tokens", name, (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        col_gguf_array_str(&toks, (uint64_t)i, &t.s[i], &t.len[i]);
    for (int64_t i = 0; i < n; i++)
        tab_add(&t, i);
    for (int64_t i = 0; i < n; i++)
        tt[i] = TT_NORMAL;
    if (col_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        TRY(col_gguf_get_array(g, "tokenizer.ggml.token_type", COL_GGUF_VTYPE_COUNT, &types, err));
        int64_t *v = malloc(sizeof *v * (size_t)n);
        if (types.count != (uint64_t)n || !v || col_gguf_array_ints(&types, v, err) != COL_OK) {
            free(v);
            st = col_err_set(err, COL_EFORMAT, "%s: tokenizer.ggml.token_type must hold %lld integers", name,
                             (long long)n);
            goto done;
        }
        for (int64_t i = 0; i < n; i++)
            tt[i] = v[i] >= 1 && v[i] <= 6 ? (int32_t)v[i] : TT_NORMAL;
        free(v);
    }
    TRY(opt_id(g, "tokenizer.ggml.bos_token_id", n, &bos, err));
    TRY(opt_id(g, "tokenizer.ggml.eos_token_id", n, &eos, err));
    TRY(opt_id(g, "tokenizer.ggml.unknown_token_id", n, &unk, err));
    if (!opt_bool(g, "tokenizer.ggml.add_bos_token", spm || llama3)) /* llama.cpp's defaults */
        bos = -1;
    if (!opt_bool(g, "tokenizer.ggml.add_eos_token", false))
        eos = -1;
    if (spm) {
        sc = malloc(sizeof *sc * (size_t)n);
        if (!sc) {
            st = col_err_set(err, COL_ENOMEM, "%s: out of memory for scores", name);
            goto done;
        }
        TRY(col_gguf_get_array(g, "tokenizer.ggml.scores", COL_GGUF_VTYPE_COUNT, &scores, err));
        if (scores.count != (uint64_t)n || col_gguf_array_nums(&scores, sc, err) != COL_OK) {
            st = col_err_set(err, COL_EFORMAT, "%s: tokenizer.ggml.scores must hold %lld numbers", name, (long long)n);
            goto done;
        }
        TRY(spm_merges(&t, n, sc, &mg, &nmg, err));
        for (int64_t i = 0; i < n && unk < 0; i++)
            if (tt[i] == TT_UNKNOWN)
                unk = i;
    } else if (col_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        TRY(col_gguf_get_array(g, "tokenizer.ggml.merges", COL_GGUF_STRING, &merges, err));
    }
    /* the text */
    col_strbuf_puts(&b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    bool first = true;
    for (int64_t i = 0; i < n; i++) {
        bool special = tt[i] == TT_CONTROL || (spm && i == unk);
        if (!special && tt[i] != TT_USER_DEFINED)
            continue;
        char num[64];
        snprintf(num, sizeof num, "%s{\"id\":%lld,\"content\":", first ? "" : ",", (long long)i);
        col_strbuf_puts(&b, num);
        put_json_str(&b, t.s[i], t.len[i]);
        col_strbuf_puts(&b, special ? ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
                                      "\"special\":true}"
                                    : ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
                                      "\"special\":false}");
        first = false;
    }
    col_strbuf_puts(&b, "],");
    if (spm) {
        bool prefix = opt_bool(g, "tokenizer.ggml.add_space_prefix", true);
        col_strbuf_puts(&b, prefix ? "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
                                     "\"prepend\":\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
                                     "\"content\":\"\xe2\x96\x81\"}]},"
                                   : "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
                                     "\"content\":\"\xe2\x96\x81\"},");
        col_strbuf_puts(&b, "\"pre_tokenizer\":null,");
        put_template(&b, &t, bos, eos);
        col_strbuf_puts(&b, "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
                            "{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":"
                            "\"Fuse\"}");
        col_strbuf_puts(&b, prefix ? ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}," : "]},");
        col_strbuf_puts(&b, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
        if (unk >= 0)
            put_json_str(&b, t.s[unk], t.len[unk]);
        else
            col_strbuf_puts(&b, "null");
        col_strbuf_puts(&b, ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,"
                            "\"byte_fallback\":true,\"vocab\":{");
    } else {
        col_strbuf_puts(&b, "\"normalizer\":null,\"pre_tokenizer\":");
        if (llama3) {
            col_strbuf_puts(&b, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"");
            col_strbuf_puts(&b, LLAMA3_SPLIT);
            col_strbuf_puts(&b, "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                                "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},");
        } else
            col_strbuf_puts(&b, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                                "\"use_regex\":true},");
        put_template(&b, &t, bos, eos);
        col_strbuf_puts(&b, "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
                            "\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
                            "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
                            "\"byte_fallback\":false,");
        col_strbuf_puts(&b, llama3 ? "\"ignore_merges\":true,\"vocab\":{" : "\"ignore_merges\":false,\"vocab\":{");
    }
    first = true;
    for (int64_t i = 0; i < n; i++) {
        if (tab_find(&t, t.s[i], t.len[i]) != i) /* a repeated string: its first id */
            continue;
        if (!first)
            col_strbuf_puts(&b, ",");
        put_json_str(&b, t.s[i], t.len[i]);
        char num[24];
        snprintf(num, sizeof num, ":%lld", (long long)i);
        col_strbuf_puts(&b, num);
        first = false;
    }
    col_strbuf_puts(&b, "},\"merges\":[");
    if (spm)
        for (int64_t i = 0; i < nmg; i++) {
            if (i)
                col_strbuf_puts(&b, ",");
            col_strbuf_puts(&b, "[");
            put_json_str(&b, t.s[mg[i].tok], mg[i].split);
            col_strbuf_puts(&b, ",");
            put_json_str(&b, t.s[mg[i].tok] + mg[i].split, t.len[mg[i].tok] - mg[i].split);
            col_strbuf_puts(&b, "]");
        }
    else
        for (uint64_t i = 0; i < merges.count; i++) {
            const char *s;
            size_t len;
            col_gguf_array_str(&merges, i, &s, &len);
            if (i)
                col_strbuf_puts(&b, ",");
            put_json_str(&b, s, len);
        }
    col_strbuf_puts(&b, "]}}");
    if (b.oom) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory writing the tokenizer", name);
        goto done;
    }
    *json = b.p;
    *json_len = b.len;
    b.p = NULL;
done:
    free(b.p);
    free(t.s);
    free(t.len);
    free(t.slot);
    free(tt);
    free(sc);
    free(mg);
    return st;
}

col_status col_tok_from_gguf(const col_gguf *g, col_tokenizer **out, col_err *err)
{
    *out = NULL;
    char *json;
    size_t len;
    col_status st = col_tok_gguf_json(g, &json, &len, err);
    if (st != COL_OK)
        return st;
    st = col_tok_from_json(json, len, out, err);
    free(json);
    if (st != COL_OK)
        col_err_prefix(err, "%s: its tokenizer", col_gguf_name(g));
    return st;
}
