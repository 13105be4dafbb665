/* tokenizer.c - the top of the tokenizer: loading tokenizer.json or
 * vocab.json + merges.txt (the vocabulary, added tokens and their trie,
 * merges, the encode keys of byte-level vocabularies, the post-processor,
 * tokenizer_config.json), freeing, and the queries. Every problem with a
 * file fails with one line that names the file.
 *
 * The layers below it (tok_internal.h): encoding is tok_encode.c, decoding
 * tok_decode.c, normalizers and pre-tokenizers tok_pretok.c, the BPE model
 * tok_bpe.c, shared helpers tok_util.c. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "textio.h"
#include "tok_internal.h"

#define ID_LIMIT (1 << 24)
#define FILE_MAX ((size_t)1 << 30)

void col_tok_free(col_tokenizer *t)
{
    if (!t)
        return;
    free(t->names);
    free(t->keys);
    free(t->dec);
    free(t->name_off);
    free(t->name_len);
    free(t->key_off);
    free(t->key_len);
    free(t->dec_off);
    free(t->dec_len);
    free(t->flags);
    col_strmap_free(&t->by_name);
    col_strmap_free(&t->by_key);
    col_mergemap_free(&t->merges);
    free(t->added_id);
    free(t->trie);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    col_regex_free(t->re);
    col_regex_free(t->re2);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t);
}

/* ---- vocabulary and added tokens ---- */

static col_status build_vocab(col_tokenizer *t, const cJSON *vocab, const cJSON *added, const char *name,
                              col_err *err)
{
    char s1[64], s2[64];
    const cJSON *x;
    if (!cJSON_IsObject(vocab))
        return col_tok_fail(err, COL_EFORMAT, name, "the vocabulary is not a JSON object of token -> id");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return col_tok_fail(err, COL_EFORMAT, name, "added_tokens is not an array");
    size_t nv = 0, na = 0, bytes = 1;
    int64_t max_id = -1, id;
    cJSON_ArrayForEach(x, vocab) {
        if (!col_tok_json_int(x, 0, ID_LIMIT - 1, &id))
            return col_tok_fail(err, COL_EFORMAT, name, "vocab: token '%s' has an id that is not an integer in [0, %d)",
                                col_tok_show(x->string, strlen(x->string), s1), ID_LIMIT);
        nv++;
        bytes += strlen(x->string);
        max_id = id > max_id ? id : max_id;
    }
    cJSON_ArrayForEach(x, added) {
        const char *content = cJSON_GetStringValue(col_tok_json_field(x, "content"));
        if (!content || !col_tok_json_int(col_tok_json_field(x, "id"), 0, ID_LIMIT - 1, &id))
            return col_tok_fail(err, COL_EFORMAT, name,
                                "added_tokens[%zu]: needs a \"content\" string and an integer \"id\" in [0, %d)", na,
                                ID_LIMIT);
        if (col_tok_json_bool(x, "special", 0) < 0 || col_tok_json_bool(x, "lstrip", 0) < 0 ||
            col_tok_json_bool(x, "rstrip", 0) < 0 || col_tok_json_bool(x, "normalized", 0) < 0)
            return col_tok_fail(err, COL_EFORMAT, name,
                                "added_tokens[%zu]: special/lstrip/rstrip/normalized must be booleans", na);
        na++;
        bytes += strlen(content);
        max_id = id > max_id ? id : max_id;
    }
    if (nv == 0)
        return col_tok_fail(err, COL_EFORMAT, name, "the vocabulary is empty");
    if ((size_t)max_id + 1 > 2 * (nv + na) + 1024)
        return col_tok_fail(err, COL_EFORMAT, name, "ids are too sparse: id %lld for %zu tokens", (long long)max_id,
                            nv + na);
    if (bytes > UINT32_MAX)
        return col_tok_fail(err, COL_EFORMAT, name, "token strings too large");
    int32_t n = (int32_t)max_id + 1;
    t->n_ids = n;
    t->names = malloc(bytes);
    t->name_off = calloc((size_t)n, sizeof *t->name_off);
    t->name_len = calloc((size_t)n, sizeof *t->name_len);
    t->flags = calloc((size_t)n, 1);
    t->added_id = malloc((na + 1) * sizeof *t->added_id);
    if (!t->names || !t->name_off || !t->name_len || !t->flags || !t->added_id)
        return col_tok_fail(err, COL_ENOMEM, name, "out of memory for %d tokens", n);
    size_t at = 0;
    cJSON_ArrayForEach(x, vocab) {
        col_tok_json_int(x, 0, ID_LIMIT - 1, &id);
        size_t len = strlen(x->string);
        if (t->flags[id])
            return col_tok_fail(err, COL_EFORMAT, name, "vocab: id %lld is given to both '%s' and '%s'", (long long)id,
                                col_tok_show(t->names + t->name_off[id], t->name_len[id], s1),
                                col_tok_show(x->string, len, s2));
        memcpy(t->names + at, x->string, len);
        t->name_off[id] = (uint32_t)at;
        t->name_len[id] = (uint32_t)len;
        t->flags[id] = COL_TOKF_PRESENT | COL_TOKF_VOCAB;
        at += len;
    }
    col_status st = col_strmap_init(&t->by_name, nv, err);
    if (st != COL_OK)
        return st;
    t->by_name.arena = t->names;
    t->by_name.off = t->name_off;
    t->by_name.len = t->name_len;
    for (int32_t i = 0; i < n; i++) {
        if (!t->flags[i])
            continue;
        int32_t old = col_strmap_put(&t->by_name, i);
        if (old >= 0)
            return col_tok_fail(err, COL_EFORMAT, name, "vocab: token '%s' appears twice (ids %d and %d)",
                                col_tok_show(t->names + t->name_off[i], t->name_len[i], s1), old, i);
    }
    cJSON_ArrayForEach(x, added) {
        const char *content = cJSON_GetStringValue(col_tok_json_field(x, "content"));
        col_tok_json_int(col_tok_json_field(x, "id"), 0, ID_LIMIT - 1, &id);
        size_t len = strlen(content);
        if (t->flags[id] & COL_TOKF_ADDED)
            return col_tok_fail(err, COL_EFORMAT, name, "added_tokens: id %lld appears twice", (long long)id);
        if (t->flags[id] & COL_TOKF_PRESENT) {
            if (t->name_len[id] != len || memcmp(t->names + t->name_off[id], content, len) != 0)
                return col_tok_fail(err, COL_EFORMAT, name, "added_tokens: id %lld is '%s', but the vocabulary gives it to '%s'",
                                    (long long)id, col_tok_show(content, len, s1),
                                    col_tok_show(t->names + t->name_off[id], t->name_len[id], s2));
        } else {
            memcpy(t->names + at, content, len);
            t->name_off[id] = (uint32_t)at;
            t->name_len[id] = (uint32_t)len;
            at += len;
        }
        t->flags[id] |= COL_TOKF_PRESENT | COL_TOKF_ADDED |
                        (col_tok_json_bool(x, "special", 0) ? COL_TOKF_SPECIAL : 0) |
                        (col_tok_json_bool(x, "lstrip", 0) ? COL_TOKF_LSTRIP : 0) |
                        (col_tok_json_bool(x, "rstrip", 0) ? COL_TOKF_RSTRIP : 0) |
                        (col_tok_json_bool(x, "normalized", 0) ? COL_TOKF_NORMALIZED : 0);
        t->added_id[t->n_added++] = (int32_t)id;
    }
    return COL_OK;
}

/* puts s[0..len) in the trie for token id; false if another token is there */
static bool trie_put(col_tokenizer *t, const unsigned char *s, size_t len, int32_t id)
{
    int32_t node = -1;
    for (size_t k = 0; k < len; k++) {
        int32_t *link = node < 0 ? &t->trie_root[s[k]] : &t->trie[node].child;
        int32_t c = *link;
        if (node >= 0)
            while (c >= 0 && t->trie[c].byte != s[k])
                c = t->trie[c].sibling;
        if (c < 0) {
            c = t->n_trie++;
            t->trie[c] = (col_trie_node){-1, node < 0 ? -1 : *link, -1, s[k]};
            *link = c;
        }
        node = c;
    }
    if (node < 0 || t->trie[node].token == id)
        return true;
    if (t->trie[node].token >= 0)
        return false;
    t->trie[node].token = id;
    return true;
}

/* The byte trie of added tokens (empty ones are never matched). A token
 * matched in normalized text is there under its normalized content too. */
static col_status build_trie(col_tokenizer *t, const char *name, col_err *err)
{
    char s1[64];
    col_tbuf *normed = calloc((size_t)t->n_added + 1, sizeof *normed);
    size_t bytes = 1;
    col_status st = normed ? COL_OK : col_tok_fail(err, COL_ENOMEM, name, "out of memory");
    for (int32_t i = 0; st == COL_OK && i < t->n_added; i++) {
        int32_t id = t->added_id[i];
        const char *s = t->names + t->name_off[id], *ns;
        size_t len = t->name_len[id], nn;
        bytes += len;
        if (!(t->flags[id] & COL_TOKF_NORMALIZED))
            continue;
        t->norm_added = true;
        st = col_tok_normalize(t, s, len, false, &normed[i], &ns, &nn, err);
        if (st == COL_OK && (nn == len && memcmp(ns, s, len) == 0)) { /* the same: one path */
            free(normed[i].p);
            normed[i] = (col_tbuf){0};
        }
        bytes += normed[i].n;
    }
    if (st == COL_OK && !(t->trie = malloc(bytes * sizeof *t->trie)))
        st = col_tok_fail(err, COL_ENOMEM, name, "out of memory");
    for (int b = 0; b < 256; b++)
        t->trie_root[b] = -1;
    t->n_trie = 0;
    for (int32_t i = 0; st == COL_OK && i < t->n_added; i++) {
        int32_t id = t->added_id[i];
        const unsigned char *s = (const unsigned char *)t->names + t->name_off[id];
        size_t len = t->name_len[id];
        if (!trie_put(t, s, len, id) || (normed[i].n && !trie_put(t, (const unsigned char *)normed[i].p, normed[i].n, id)))
            st = col_tok_fail(err, COL_EFORMAT, name, "added_tokens: '%s' appears twice",
                              col_tok_show((const char *)s, len, s1));
    }
    for (int32_t i = 0; normed && i < t->n_added; i++)
        free(normed[i].p);
    free(normed);
    return st;
}

/* ---- encode keys ---- */


static col_status build_keys(col_tokenizer *t, const char *name, col_err *err)
{
    if (t->eow_len && (!t->byte_level || t->ignore_merges))
        return col_tok_fail(err, COL_EUNSUPPORTED, name,
                            "BPE with an end_of_word_suffix is supported only byte-level and without ignore_merges");
    if (!t->byte_level) {
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            t->byte_id[b] = t->byte_fallback ? col_strmap_get(&t->by_name, hex, 6) : -1;
        }
        return COL_OK;
    }
    size_t bytes = 1;
    for (int32_t i = 0; i < t->n_ids; i++)
        bytes += t->name_len[i];
    t->keys = malloc(bytes);
    t->key_off = calloc((size_t)t->n_ids, sizeof *t->key_off);
    t->key_len = calloc((size_t)t->n_ids, sizeof *t->key_len);
    col_status st = t->keys && t->key_off && t->key_len ? col_strmap_init(&t->by_key, (size_t)t->n_ids, err)
                                                          : col_tok_fail(err, COL_ENOMEM, name, "out of memory");
    if (st != COL_OK)
        return st;
    t->by_key.arena = t->keys;
    t->by_key.off = t->key_off;
    t->by_key.len = t->key_len;
    size_t at = 0, len;
    for (int32_t i = 0; i < t->n_ids; i++) {
        if (!(t->flags[i] & COL_TOKF_VOCAB) ||
            !col_bytelevel_raw(t->names + t->name_off[i], t->name_len[i], t->keys + at, &len) || len == 0)
            continue; /* BPE never produces it */
        t->key_off[i] = (uint32_t)at;
        t->key_len[i] = (uint32_t)len;
        at += len;
        col_strmap_put(&t->by_key, i); /* names differ, so raw bytes differ too */
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b, s[4 + sizeof t->eow];
        if ((t->byte_id[b] = col_strmap_get(&t->by_key, &c, 1)) < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "byte-level vocabulary has no token for byte 0x%02X", b);
        if (!t->eow_len)
            continue;
        uint32_t cp = col_bytelevel_cp((unsigned)b); /* below U+0800: one or two bytes */
        size_t k = cp < 0x80 ? 1 : 2;
        s[0] = (char)(cp < 0x80 ? cp : 0xC0 | cp >> 6);
        s[1] = (char)(0x80 | (cp & 0x3F));
        memcpy(s + k, t->eow, t->eow_len);
        if ((t->byte_id_eow[b] = col_strmap_get(&t->by_name, s, k + t->eow_len)) < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "vocabulary has no token for byte 0x%02X with the end-of-word "
                                "suffix", b);
    }
    return COL_OK;
}


/* ---- post-processor: the ids around the text ---- */

static col_status add_fixed(col_tokenizer *t, bool suffix, int64_t id, const char *what, const char *name,
                            col_err *err)
{
    if (id < 0 || id >= t->n_ids || !t->flags[id])
        return col_tok_fail(err, COL_EFORMAT, name, "post_processor: %s has id %lld, which names no token", what,
                            (long long)id);
    int32_t **arr = suffix ? &t->suffix_ids : &t->prefix_ids;
    int *n = suffix ? &t->n_suffix : &t->n_prefix;
    if (*n >= 64)
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "post_processor: too many special tokens");
    int32_t *p = realloc(*arr, (size_t)(*n + 1) * sizeof *p);
    if (!p)
        return col_tok_fail(err, COL_ENOMEM, name, "out of memory");
    p[(*n)++] = (int32_t)id;
    *arr = p;
    return COL_OK;
}

static col_status parse_post(col_tokenizer *t, const cJSON *pp, const char *name, col_err *err)
{
    char s1[64];
    if (!pp || cJSON_IsNull(pp))
        return COL_OK;
    const char *type = cJSON_IsObject(pp) ? cJSON_GetStringValue(col_tok_json_field(pp, "type")) : NULL;
    const cJSON *x;
    col_status st = COL_OK;
    if (!type)
        return col_tok_fail(err, COL_EFORMAT, name, "post_processor: an entry has no \"type\"");
    if (strcmp(type, "ByteLevel") == 0)
        return COL_OK;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = col_tok_json_field(pp, "processors");
        if (!cJSON_IsArray(list))
            return col_tok_fail(err, COL_EFORMAT, name, "post_processor: Sequence has no \"processors\" array");
        cJSON_ArrayForEach(x, list) if ((st = parse_post(t, x, name, err)) != COL_OK) return st;
        return COL_OK;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const cJSON *cls = col_tok_json_field(pp, "cls"), *sep = col_tok_json_field(pp, "sep");
        int64_t c, s;
        if (cJSON_GetArraySize(cls) != 2 || cJSON_GetArraySize(sep) != 2 ||
            !col_tok_json_int(cJSON_GetArrayItem(cls, 1), 0, ID_LIMIT, &c) || !col_tok_json_int(cJSON_GetArrayItem(sep, 1), 0, ID_LIMIT, &s))
            return col_tok_fail(err, COL_EFORMAT, name, "post_processor: %s needs cls and sep as [name, id]", type);
        st = add_fixed(t, false, c, "cls", name, err);
        return st != COL_OK ? st : add_fixed(t, true, s, "sep", name, err);
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "post_processor type '%s' is not supported",
                            col_tok_show(type, strlen(type), s1));
    const cJSON *single = col_tok_json_field(pp, "single"), *specials = col_tok_json_field(pp, "special_tokens");
    if (!cJSON_IsArray(single))
        return col_tok_fail(err, COL_EFORMAT, name, "post_processor: TemplateProcessing has no \"single\" array");
    int seen_a = 0;
    cJSON_ArrayForEach(x, single) {
        const cJSON *sp = col_tok_json_field(x, "SpecialToken"), *sq = col_tok_json_field(x, "Sequence");
        if (sq) {
            const char *which = cJSON_GetStringValue(col_tok_json_field(sq, "id"));
            if (!which || strcmp(which, "A") != 0 || seen_a++)
                return col_tok_fail(err, COL_EFORMAT, name, "post_processor: \"single\" must hold sequence A once");
            continue;
        }
        const char *tok = cJSON_GetStringValue(col_tok_json_field(sp, "id"));
        const cJSON *ids = col_tok_json_field(col_tok_json_field(specials, tok ? tok : ""), "ids"), *y;
        if (!tok || !cJSON_IsArray(ids))
            return col_tok_fail(err, COL_EFORMAT, name, "post_processor: special token '%s' has no ids in special_tokens",
                                tok ? col_tok_show(tok, strlen(tok), s1) : "?");
        cJSON_ArrayForEach(y, ids) {
            int64_t id;
            if (!col_tok_json_int(y, 0, ID_LIMIT, &id))
                return col_tok_fail(err, COL_EFORMAT, name, "post_processor: an id of '%s' is not an integer",
                                    col_tok_show(tok, strlen(tok), s1));
            if ((st = add_fixed(t, seen_a, id, tok, name, err)) != COL_OK)
                return st;
        }
    }
    if (!seen_a)
        return col_tok_fail(err, COL_EFORMAT, name, "post_processor: \"single\" must hold sequence A once");
    return COL_OK;
}

/* ---- assembling a tokenizer ---- */

static col_tokenizer *tok_new(void)
{
    col_tokenizer *t = calloc(1, sizeof *t);
    if (t)
        t->unk_id = t->bos_id = t->eos_id = t->pad_id = -1;
    return t;
}

static int32_t first_of(const col_tokenizer *t, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = col_tok_token_id(t, names[i]);
        if (id >= 0)
            return id;
    }
    return -1;
}

/* added-token trie, word splitting for SentencePiece, default BOS / EOS */
static col_status finish(col_tokenizer *t, const char *name, col_err *err)
{
    col_status st = build_trie(t, name, err);
    if (st != COL_OK)
        return st;
    if (!t->byte_level && t->split == COL_SPLIT_NONE && !t->ignore_merges) {
        bool safe = true; /* no token has '▁' right after another character */
        for (int32_t i = 0; safe && i < t->n_ids; i++) {
            const char *s = t->names + t->name_off[i];
            for (uint32_t k = 1; safe && (t->flags[i] & COL_TOKF_VOCAB) && k + 3 <= t->name_len[i]; k++)
                if (memcmp(s + k, "\xE2\x96\x81", 3) == 0 && (k < 3 || memcmp(s + k - 3, "\xE2\x96\x81", 3) != 0))
                    safe = false;
        }
        if (safe)
            t->split = COL_SPLIT_SPM_WORDS;
    }
    static const char *const bos[] = {"<s>", "<|begin_of_text|>", "<|endoftext|>", "<bos>"};
    static const char *const eos[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"};
    t->bos_id = t->n_prefix == 1 ? t->prefix_ids[0] : first_of(t, bos, 4);
    t->eos_id = t->n_suffix == 1 ? t->suffix_ids[0] : first_of(t, eos, 4);
    return COL_OK;
}

static col_status from_root(col_tokenizer *t, const cJSON *root, const char *name, col_err *err)
{
    char s1[64];
    const cJSON *model = col_tok_json_field(root, "model");
    if (!cJSON_IsObject(model))
        return col_tok_fail(err, COL_EFORMAT, name, "no \"model\" object: not a tokenizer.json");
    const char *type = cJSON_GetStringValue(col_tok_json_field(model, "type"));
    if (type ? strcmp(type, "BPE") != 0 : !col_tok_json_field(model, "merges"))
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "model type '%s' is not supported (only BPE)",
                            type ? col_tok_show(type, strlen(type), s1) : "?");
    const cJSON *drop = col_tok_json_field(model, "dropout");
    const char *cont = cJSON_GetStringValue(col_tok_json_field(model, "continuing_subword_prefix"));
    const char *eow = cJSON_GetStringValue(col_tok_json_field(model, "end_of_word_suffix"));
    if ((drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0)) || (cont && *cont))
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "BPE with dropout or continuing_subword_prefix is not supported");
    if (eow && strlen(eow) >= sizeof t->eow)
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "end_of_word_suffix '%s' is too long",
                            col_tok_show(eow, strlen(eow), s1));
    if (eow)
        memcpy(t->eow, eow, t->eow_len = strlen(eow));
    col_status st = build_vocab(t, col_tok_json_field(model, "vocab"), col_tok_json_field(root, "added_tokens"), name, err);
    if (st != COL_OK)
        return st;
    int bf = col_tok_json_bool(model, "byte_fallback", 0), fu = col_tok_json_bool(model, "fuse_unk", 0),
        im = col_tok_json_bool(model, "ignore_merges", 0);
    if (bf < 0 || fu < 0 || im < 0)
        return col_tok_fail(err, COL_EFORMAT, name, "model: byte_fallback, fuse_unk and ignore_merges must be booleans");
    t->byte_fallback = bf, t->fuse_unk = fu, t->ignore_merges = im;
    const cJSON *unk = col_tok_json_field(model, "unk_token");
    if (unk && !cJSON_IsNull(unk)) {
        if (!cJSON_IsString(unk))
            return col_tok_fail(err, COL_EFORMAT, name, "model.unk_token is not a string");
        t->unk_id = col_strmap_get(&t->by_name, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "model.unk_token '%s' is not in the vocabulary",
                                col_tok_show(unk->valuestring, strlen(unk->valuestring), s1));
    }
    if ((st = col_tok_json_merges(t, col_tok_json_field(model, "merges"), name, err)) != COL_OK ||
        (st = col_tok_parse_pre(t, col_tok_json_field(root, "normalizer"), col_tok_json_field(root, "pre_tokenizer"), name, err)) != COL_OK ||
        (st = build_keys(t, name, err)) != COL_OK)
        return st;
    if ((st = col_tok_build_decoder(t, col_tok_json_field(root, "decoder"), false, name, err)) != COL_OK ||
        (st = parse_post(t, col_tok_json_field(root, "post_processor"), name, err)) != COL_OK)
        return st;
    return finish(t, name, err);
}

/* transformers' CLIPTokenizer: its fixed normalizer and pre-tokenizer, as a tokenizer.json gives them */
static const char CLIP_PIPELINE[] =
    "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Replace\", "
    "\"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"}, {\"type\": \"Lowercase\"}]},"
    "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
    "\"<\\\\|startoftext\\\\|>|<\\\\|endoftext\\\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\\\p{L}]+|[\\\\p{N}]|"
    "[^\\\\s\\\\p{L}\\\\p{N}]+\"}, \"behavior\": \"Removed\", \"invert\": true}, {\"type\": \"ByteLevel\", "
    "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}]}}";
static const char *const CLIP_DEFAULTS[7] = {"<|startoftext|>", "<|endoftext|>", "<|endoftext|>", NULL,
                                             "<|endoftext|>", NULL, NULL}; /* bos eos unk sep pad cls mask */

/* vocab.json + merges.txt: GPT-2's byte-level BPE, or CLIP's (clip: the
 * special tokens come from cfg as transformers makes them) */
static col_status from_vocab_merges(col_tokenizer *t, const cJSON *vocab, const char *vname, const char *merges,
                                    size_t mlen, const char *mname, const col_tok_config *cfg, bool clip, col_err *err)
{
    cJSON *added = NULL, *pipe = NULL;
    col_status st = clip ? col_tok_config_added(cfg, vocab, CLIP_DEFAULTS, &added, err) : COL_OK;
    if (st == COL_OK)
        st = build_vocab(t, vocab, added, vname, err);
    cJSON_Delete(added);
    if (st != COL_OK)
        return st;
    int32_t eot = col_strmap_get(&t->by_name, "<|endoftext|>", 13); /* GPT-2's one special token */
    if (!clip && eot >= 0) {
        t->flags[eot] |= COL_TOKF_ADDED | COL_TOKF_SPECIAL;
        t->added_id[t->n_added++] = eot;
    }
    if ((st = col_tok_text_merges(t, merges, mlen, mname, err)) != COL_OK)
        return st;
    if (clip) {
        memcpy(t->eow, "</w>", t->eow_len = 4);
        if ((st = col_tok_parse_json(CLIP_PIPELINE, strlen(CLIP_PIPELINE), "CLIP", &pipe, err)) == COL_OK)
            st = col_tok_parse_pre(t, col_tok_json_field(pipe, "normalizer"), col_tok_json_field(pipe, "pre_tokenizer"),
                                   vname, err);
        cJSON_Delete(pipe);
    } else {
        t->byte_level = true;
        st = col_regex_compile(col_gpt2_regex, strlen(col_gpt2_regex), false, &t->re, err);
        t->split = COL_SPLIT_REGEX;
    }
    if (st != COL_OK || (st = build_keys(t, vname, err)) != COL_OK ||
        (st = col_tok_build_decoder(t, NULL, true, vname, err)) != COL_OK || (st = finish(t, vname, err)) != COL_OK ||
        !clip)
        return st;
    /* CLIP's post-processor: BOS text EOS, with the configured tokens */
    bool present[2];
    const char *file[2], *names[2];
    int32_t ids[2];
    for (int k = 0; k < 2; k++) {
        names[k] = col_tok_config_value(cfg, k ? "eos_token" : "bos_token", &present[k], &file[k]);
        names[k] = present[k] ? names[k] : CLIP_DEFAULTS[k];
        if ((ids[k] = names[k] ? col_tok_token_id(t, names[k]) : -1) < 0)
            return col_tok_fail(err, COL_EFORMAT, file[k], "a CLIP tokenizer needs a %s that names a token",
                                k ? "eos_token" : "bos_token");
    }
    if ((st = add_fixed(t, false, ids[0], "bos", vname, err)) != COL_OK ||
        (st = add_fixed(t, true, ids[1], "eos", vname, err)) != COL_OK)
        return st;
    t->bos_id = ids[0];
    t->eos_id = ids[1];
    t->pad_id = col_tok_token_id(t, CLIP_DEFAULTS[4]); /* CLIPTokenizer's default; the files may name another */
    return COL_OK;
}

col_status col_tok_from_json(const char *json, size_t len, col_tokenizer **out, col_err *err)
{
    *out = NULL;
    cJSON *root;
    col_status st = col_tok_parse_json(json, len, "tokenizer.json", &root, err);
    if (st != COL_OK)
        return st;
    col_tokenizer *t = tok_new();
    st = t ? from_root(t, root, "tokenizer.json", err) : col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    cJSON_Delete(root);
    if (st != COL_OK)
        col_tok_free(t);
    else
        *out = t;
    return st;
}

/* bos / eos / pad from the configuration files (a string, {"content": ...}
 * or null), and model_max_length; strict: a pad_token that names no token is
 * an error */
static col_status apply_config(col_tokenizer *t, const col_tok_config *cfg, bool strict, col_err *err)
{
    char s1[64];
    static const char *const keys[3] = {"bos_token", "eos_token", "pad_token"};
    int32_t *dst[3] = {&t->bos_id, &t->eos_id, &t->pad_id};
    for (int k = 0; k < 3; k++) {
        bool present;
        const char *file, *tok = col_tok_config_value(cfg, keys[k], &present, &file);
        if (!present)
            continue;
        if (!tok && !col_tok_config_is_null(cfg, keys[k]))
            return col_tok_fail(err, COL_EFORMAT, file, "%s is neither a string nor an object with a \"content\" string",
                                keys[k]);
        int32_t id = tok ? col_tok_token_id(t, tok) : -1;
        if (tok && id < 0 && (strict || k < 2))
            return col_tok_fail(err, COL_EFORMAT, file, "%s '%s' is not a token", keys[k],
                                col_tok_show(tok, strlen(tok), s1));
        *dst[k] = id;
    }
    t->max_length = (int32_t)col_tok_config_max_length(cfg);
    return COL_OK;
}

static char *join(const char *dir, const char *file)
{
    size_t a = strlen(dir), b = strlen(file);
    char *p = malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s/%s", dir, file);
    return p;
}

static bool is_file(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_clip_class(const char *cls)
{
    return cls && strncmp(cls, "CLIPTokenizer", 13) == 0;
}

col_status col_tok_load(const char *path, col_tokenizer **out, col_err *err)
{
    *out = NULL;
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return col_err_set(err, COL_EIO, "%s: %s", path ? path : "(null)", strerror(path ? errno : EINVAL));
    char *dir = NULL, *file = NULL, *mpath = NULL, *text = NULL, *mtext = NULL;
    cJSON *root = NULL;
    col_tokenizer *t = NULL;
    col_tok_config cfg = {0};
    size_t len, mlen;
    col_status st = COL_ENOMEM;
    bool is_dir = S_ISDIR(sb.st_mode);
    if (is_dir) {
        dir = strdup(path);
    } else {
        file = strdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path + (slash == path))) : strdup(".");
    }
    mpath = dir ? join(dir, "merges.txt") : NULL;
    if (!dir || (!is_dir && !file) || !mpath || !(t = tok_new())) {
        st = col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    if ((st = col_tok_config_read(dir, &cfg, err)) != COL_OK)
        goto done;
    bool clip_class = is_clip_class(col_tok_config_class(&cfg));
    if (is_dir) { /* tokenizer.json first, but CLIP's pipeline is made from vocab.json + merges.txt */
        char *v = join(dir, "vocab.json"), *j = join(dir, "tokenizer.json");
        bool pair = is_file(v) && is_file(mpath), json = is_file(j);
        if (json && !(clip_class && pair)) {
            file = j;
            free(v);
        } else {
            file = v;
            free(j);
        }
        if (!file) {
            st = col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
            goto done;
        }
        if (!json && !pair) {
            st = col_err_set(err, COL_EIO, "%s: no tokenizer.json, nor vocab.json with merges.txt", path);
            goto done;
        }
    }
    if ((st = col_read_file(file, FILE_MAX, &text, &len, err)) != COL_OK ||
        (st = col_tok_parse_json(text, len, file, &root, err)) != COL_OK)
        goto done;
    bool clip = false;
    if (cJSON_IsObject(col_tok_json_field(root, "model"))) {
        st = from_root(t, root, file, err);
    } else if (!cJSON_IsObject(root)) {
        st = col_tok_fail(err, COL_EFORMAT, file, "not a JSON object");
    } else if (!is_file(mpath)) {
        st = col_tok_fail(err, COL_EFORMAT, file, "not a tokenizer.json (no \"model\"), and no merges.txt beside it");
    } else if ((st = col_read_file(mpath, FILE_MAX, &mtext, &mlen, err)) == COL_OK) {
        /* CLIP: so named, or without a class a vocabulary with CLIP's tokens */
        clip = col_tok_config_class(&cfg) ? clip_class
                                          : col_tok_json_field(root, "<|startoftext|>") && col_tok_json_field(root, "!</w>");
        st = from_vocab_merges(t, root, file, mtext, mlen, mpath, &cfg, clip, err);
    }
    if (st == COL_OK)
        st = apply_config(t, &cfg, clip, err);
done:
    col_tok_config_free(&cfg);
    cJSON_Delete(root);
    free(text);
    free(mtext);
    free(dir);
    free(file);
    free(mpath);
    if (st != COL_OK)
        col_tok_free(t);
    else
        *out = t;
    return st;
}

/* ---- queries ---- */

int32_t col_tok_vocab_size(const col_tokenizer *t)
{
    return t->n_ids;
}

int32_t col_tok_bos_id(const col_tokenizer *t)
{
    return t->bos_id;
}

int32_t col_tok_eos_id(const col_tokenizer *t)
{
    return t->eos_id;
}

int32_t col_tok_token_id(const col_tokenizer *t, const char *name)
{
    size_t n = strlen(name);
    const unsigned char *s = (const unsigned char *)name;
    int32_t node = n && t->trie ? t->trie_root[s[0]] : -1;
    for (size_t k = 1; node >= 0 && k < n; k++) {
        node = t->trie[node].child;
        while (node >= 0 && t->trie[node].byte != s[k])
            node = t->trie[node].sibling;
    }
    if (node >= 0 && t->trie[node].token >= 0)
        return t->trie[node].token;
    return col_strmap_get(&t->by_name, name, n);
}

int32_t col_tok_pad_id(const col_tokenizer *t)
{
    return t->pad_id;
}

col_status col_tok_set_pad(col_tokenizer *t, const char *token, col_err *err)
{
    int32_t id = col_tok_token_id(t, token);
    if (id < 0) return col_err_set(err, COL_EINVAL, "tokenizer: no token '%s' to pad with", token);
    t->pad_id = id;
    return COL_OK;
}

int32_t col_tok_max_length(const col_tokenizer *t)
{
    return t->max_length;
}

bool col_tok_is_special(const col_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->flags[id] & COL_TOKF_SPECIAL);
}
