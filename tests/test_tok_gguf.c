/* test_tok_gguf.c - the tokenizer a GGUF file carries (libcore/text/tok_gguf.h).
 *
 * 1. The GGUF files llama.cpp's converter wrote (tests/fixtures/gguf_model, by
 *    tools/refgen/make_gguf_model_fixtures.py): "llama" (a SentencePiece BPE with byte fallback trained
 *    there: tokens, scores, types; merges made here from the scores) against sentencepiece's own ids,
 *    "gpt2" (the byte-level tokenizer of tests/fixtures/chat_model/base) against the tokenizers library's,
 *    on sample texts with unicode, white space and special-looking text; the prompt with BOS.
 * 2. With COL_GGUF_VOCAB_DIR set to llama.cpp's models/ folder (its ggml-vocab-*.gguf are the
 *    converter's output for the real GPT-2, LLaMA-2 and LLaMA-3 tokenizers, too large to commit): each
 *    against every encoding case of tests/fixtures/tokenizer/hf_cases.jsonl (Hugging Face's ids of the
 *    same models); skipped otherwise.
 * 3. Errors: another tokenizer model or pre-tokenizer, arrays of the wrong length, a BOS id out of range.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "testlib.h"
#include "textio.h"
#include "tok_gguf.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/gguf_model"
#endif
#ifndef TOK_FIXTURES
#define TOK_FIXTURES "tests/fixtures/tokenizer"
#endif

static bool same_ids(const int32_t *a, size_t n, const cJSON *want)
{
    if ((int)n != cJSON_GetArraySize(want))
        return false;
    for (size_t i = 0; i < n; i++)
        if (a[i] != cJSON_GetArrayItem(want, (int)i)->valueint)
            return false;
    return true;
}

static col_tokenizer *from_file(const char *path, col_err *err)
{
    col_gguf *g = NULL;
    col_tokenizer *t = NULL;
    if (col_gguf_open(path, &g, err) == COL_OK)
        col_tok_from_gguf(g, &t, err);
    col_gguf_close(g);
    return t;
}

static void test_fixture(const char *fam, const cJSON *refs)
{
    char path[512];
    snprintf(path, sizeof path, FIXTURES "/%s-f32.gguf", fam);
    col_err err = {0};
    col_tokenizer *t = from_file(path, &err);
    TL_OK(t != NULL, "%s: the tokenizer of a converted file loads: %s", fam, t ? "" : err.msg);
    if (!t)
        return;
    const cJSON *r = cJSON_GetObjectItem(refs, fam), *s;
    int good = 0, n = 0;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(r, "samples"))
    {
        int32_t *ids = NULL;
        size_t k = 0;
        bool ok = col_tok_encode_ex(t, s->string, strlen(s->string), 0, &ids, &k, &err) == COL_OK &&
                  same_ids(ids, k, s);
        if (!ok)
            TL_NOTE("%s: \"%s\" gives other ids", fam, s->string);
        good += ok, n++;
        free(ids);
    }
    TL_OK(good == n && n >= 8, "%s: %d/%d sample texts give the reference's ids", fam, good, n);
    int32_t *ids = NULL;
    size_t k = 0;
    const char *prompt = "In the beginning God";
    bool bos = cJSON_IsTrue(cJSON_GetObjectItem(r, "add_bos"));
    TL_OK(col_tok_encode(t, prompt, strlen(prompt), bos, &ids, &k, &err) == COL_OK &&
              same_ids(ids, k, cJSON_GetObjectItem(r, "prompt")),
          "%s: the prompt's ids%s", fam, bos ? " with BOS" : "");
    char *text = NULL;
    size_t tl = 0;
    TL_OK(ids && col_tok_decode(t, ids, k, true, &text, &tl, &err) == COL_OK && tl == strlen(prompt) &&
              memcmp(text, prompt, tl) == 0,
          "%s: decoding gives the prompt back", fam);
    free(text);
    free(ids);
    col_tok_free(t);
}

/* llama.cpp's vocabulary files against Hugging Face's ids of the same tokenizers */
static void test_real_vocabs(void)
{
    const char *dir = getenv("COL_GGUF_VOCAB_DIR");
    if (!dir || !*dir) {
        tl_skip_check("llama.cpp's ggml-vocab-{gpt-2,llama-spm,llama-bpe}.gguf against hf_cases.jsonl",
                      "COL_GGUF_VOCAB_DIR is not set");
        return;
    }
    const char *files[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf"};
    const char *names[] = {"gpt2", "llama2", "llama3"};
    char *cases = NULL;
    size_t clen;
    col_err err = {0};
    if (col_read_file(TOK_FIXTURES "/hf_cases.jsonl", 0, &cases, &clen, &err) != COL_OK) {
        TL_OK(false, "hf_cases.jsonl: %s", err.msg);
        return;
    }
    for (int f = 0; f < 3; f++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        col_tokenizer *t = from_file(path, &err);
        TL_OK(t != NULL, "%s loads: %s", files[f], t ? "" : err.msg);
        if (!t)
            continue;
        int good = 0, n = 0, notes = 0;
        char *copy = strdup(cases), *save = NULL;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            cJSON *o = cJSON_Parse(line);
            const cJSON *s = cJSON_GetObjectItem(o, "text"), *want = cJSON_GetObjectItem(o, "ids");
            const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(o, "tok"));
            if (!tok || strcmp(tok, names[f]) || !cJSON_IsString(s) || !want) {
                cJSON_Delete(o);
                continue;
            }
            const char *hex = cJSON_GetStringValue(cJSON_GetObjectItem(o, "hex"));
            size_t hl = hex ? strlen(hex) / 2 : strlen(s->valuestring);
            char *raw = malloc(hl + 1);
            for (size_t i = 0; i < hl; i++) {
                unsigned v = (unsigned char)s->valuestring[i];
                if (hex)
                    sscanf(hex + 2 * i, "%2x", &v);
                raw[i] = (char)v;
            }
            unsigned flags = (cJSON_IsTrue(cJSON_GetObjectItem(o, "special")) ? COL_TOK_ADD_SPECIAL : 0u) |
                             (cJSON_IsFalse(cJSON_GetObjectItem(o, "parse")) ? 0u : COL_TOK_PARSE_SPECIAL);
            int32_t *ids = NULL;
            size_t k = 0;
            bool ok = col_tok_encode_ex(t, raw, hl, flags, &ids, &k, &err) == COL_OK && same_ids(ids, k, want);
            if (!ok && notes++ < 3)
                TL_NOTE("%s: case %d (%.60s) differs", names[f], n, s->valuestring);
            good += ok, n++;
            free(ids);
            free(raw);
            cJSON_Delete(o);
        }
        free(copy);
        TL_OK(good == n && n > 100, "%s: %d/%d of Hugging Face's %s encodings", files[f], good, n, names[f]);
        col_tok_free(t);
    }
    free(cases);
}

/* ---- hostile metadata ---- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} img;
static void put(img *m, const void *p, size_t n) { memcpy(m->b + m->n, p, n), m->n += n; }
static void u32(img *m, uint32_t v) { put(m, &v, 4); }
static void u64(img *m, uint64_t v) { put(m, &v, 8); }
static void str(img *m, const char *s) { u64(m, strlen(s)), put(m, s, strlen(s)); }
static void kv_str(img *m, const char *k, const char *v) { str(m, k), u32(m, COL_GGUF_STRING), str(m, v); }

/* a file of metadata: tokenizer model, pre, n_tok tokens, n_types types, n_scores scores, bos id */
static col_status tok_of(const char *model, const char *pre, int n_tok, int n_types, int n_scores, uint32_t bos,
                         col_err *err)
{
    img m = {.n = 0};
    put(&m, "GGUF", 4), u32(&m, 3), u64(&m, 0), u64(&m, 6);
    kv_str(&m, "tokenizer.ggml.model", model);
    kv_str(&m, "tokenizer.ggml.pre", pre);
    str(&m, "tokenizer.ggml.tokens"), u32(&m, COL_GGUF_ARRAY), u32(&m, COL_GGUF_STRING), u64(&m, (uint64_t)n_tok);
    for (int i = 0; i < n_tok; i++) {
        char t[8];
        snprintf(t, sizeof t, "%c", 'a' + i);
        str(&m, t);
    }
    str(&m, "tokenizer.ggml.token_type"), u32(&m, COL_GGUF_ARRAY), u32(&m, COL_GGUF_I32), u64(&m, (uint64_t)n_types);
    for (int i = 0; i < n_types; i++)
        u32(&m, 1);
    str(&m, "tokenizer.ggml.scores"), u32(&m, COL_GGUF_ARRAY), u32(&m, COL_GGUF_F32), u64(&m, (uint64_t)n_scores);
    for (int i = 0; i < n_scores; i++) {
        float f = (float)-i;
        put(&m, &f, 4);
    }
    str(&m, "tokenizer.ggml.bos_token_id"), u32(&m, COL_GGUF_U32), u32(&m, bos);
    col_gguf *g = NULL;
    col_tokenizer *t = NULL;
    col_status st = col_gguf_parse(m.b, m.n, "tok.gguf", &g, err);
    if (st == COL_OK)
        st = col_tok_from_gguf(g, &t, err);
    col_tok_free(t);
    col_gguf_close(g);
    return st;
}

static void test_errors(void)
{
    col_err err = {0};
    TL_OK(tok_of("gpt2", "gpt-2", 4, 4, 4, 0, &err) == COL_EFORMAT && strstr(err.msg, "byte"),
          "a gpt2 vocabulary without the 256 byte tokens: %s", err.msg);
    err = (col_err){0};
    TL_OK(tok_of("llama", "default", 4, 4, 4, 0, &err) == COL_OK, "a small llama vocabulary loads %s", err.msg);
    TL_OK(tok_of("gpt2", "default", 4, 4, 4, 0, &err) == COL_EUNSUPPORTED && strstr(err.msg, "\"default\""),
          "llama.cpp's own \"default\" pre-tokenizer: %s", err.msg);
    TL_OK(tok_of("bert", "default", 4, 4, 4, 0, &err) == COL_EUNSUPPORTED && strstr(err.msg, "bert"),
          "another model: %s", err.msg);
    TL_OK(tok_of("gpt2", "qwen2", 4, 4, 4, 0, &err) == COL_EUNSUPPORTED && strstr(err.msg, "qwen2"),
          "another pre-tokenizer: %s", err.msg);
    TL_OK(tok_of("gpt2", "gpt-2", 4, 3, 4, 0, &err) == COL_EFORMAT && strstr(err.msg, "token_type"),
          "token types of another length: %s", err.msg);
    TL_OK(tok_of("llama", "default", 4, 4, 5, 0, &err) == COL_EFORMAT && strstr(err.msg, "scores"),
          "scores of another length: %s", err.msg);
    TL_OK(tok_of("llama", "default", 4, 4, 4, 9, &err) == COL_EFORMAT && strstr(err.msg, "bos_token_id"),
          "a BOS id past the vocabulary: %s", err.msg);
}

int main(void)
{
    char *json = NULL;
    size_t len;
    col_err err = {0};
    if (col_read_file(FIXTURES "/refs.json", 0, &json, &len, &err) == COL_OK) {
        cJSON *refs = cJSON_Parse(json);
        test_fixture("llama", refs);
        test_fixture("gpt2", refs);
        cJSON_Delete(refs);
    } else
        TL_OK(false, "refs.json: %s", err.msg);
    free(json);
    test_real_vocabs();
    test_errors();
    return tl_done();
}
