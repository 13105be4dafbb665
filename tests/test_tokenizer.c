/* test_tokenizer.c - the BPE tokenizers against Hugging Face's ids.
 *
 * 1. tests/fixtures/tokenizer/tokenizer_public.jsonl: every text with the
 *    GPT-2, LLaMA-2 (with BOS) and LLaMA-3 ids, and decode(encode(text)).
 * 2. hf_cases.jsonl (tools/refgen/make_tokenizer_fixtures.py, ids from
 *    Hugging Face tokenizers): random and edge-case texts for the three
 *    bundled tokenizers and two small trained ones (Metaspace with unk and
 *    an rstrip token; ByteLevel with add_prefix_space, an lstrip token and a
 *    Roberta post-processor), with and without special tokens, special
 *    tokens in the text split as plain text, and decode with / without
 *    skip_special. A path on the command line runs that file instead (a
 *    longer differential run).
 * 3. Properties: vocab sizes, BOS / EOS, token names, byte fallback,
 *    empty input, invalid UTF-8, decode(encode(x)) == x on random bytes.
 * 4. Errors: corrupt or unsupported tokenizer files each give one line
 *    naming the problem; bad ids given to decode. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "textio.h"
#include "tokenizer.h"

#ifdef COL_SRC_ASSET_DIR
#define ASSETS COL_SRC_ASSET_DIR "/tokenizers"
#define FIX COL_SRC_ASSET_DIR "/../tests/fixtures/tokenizer"
#else
#define ASSETS "assets/tokenizers"
#define FIX "tests/fixtures/tokenizer"
#endif

enum { GPT2, LLAMA2, LLAMA3, TINY_META, TINY_BL, NTOK };
static const char *const tok_names[NTOK] = {"gpt2", "llama2", "llama3", "tiny_meta", "tiny_bytelevel"};
static const char *const tok_paths[NTOK] = {ASSETS "/gpt2", ASSETS "/llama2/tokenizer.json", ASSETS "/llama3",
                                            FIX "/tiny_meta.json", FIX "/tiny_bytelevel.json"};
static col_tokenizer *toks[NTOK];

static int tok_index(const char *name)
{
    for (int i = 0; i < NTOK; i++)
        if (name && strcmp(name, tok_names[i]) == 0)
            return i;
    return -1;
}

static bool ids_equal(const int32_t *ids, size_t n, const cJSON *want)
{
    if (!cJSON_IsArray(want) || (size_t)cJSON_GetArraySize(want) != n)
        return false;
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, want) if (!cJSON_IsNumber(x) || x->valueint != ids[i++]) return false;
    return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    printf("#   %s:", what);
    for (size_t i = 0; i < n && i < 40; i++)
        printf(" %d", ids[i]);
    printf("%s\n", n > 40 ? " ..." : "");
}

/* encodes and compares; on a mismatch prints both (once per caller budget) */
static bool check_encode(int k, const char *text, size_t len, unsigned flags, const cJSON *want, int *notes)
{
    int32_t *ids = NULL;
    size_t n = 0;
    col_err err = {0};
    col_status st = col_tok_encode_ex(toks[k], text, len, flags, &ids, &n, &err);
    bool ok = st == COL_OK && ids_equal(ids, n, want);
    if (!ok && (*notes)++ < 5) {
        char *w = cJSON_PrintUnformatted(want);
        cJSON *s = cJSON_CreateString(text);
        char *q = cJSON_PrintUnformatted(s);
        printf("# %s: text %s (flags %u): %s\n", tok_names[k], q, flags, st == COL_OK ? "ids differ" : err.msg);
        if (st == COL_OK)
            print_ids("got ", ids, n);
        printf("#   want: %.300s\n", w);
        free(w);
        free(q);
        cJSON_Delete(s);
    }
    free(ids);
    return ok;
}

static bool roundtrip(int k, const char *text, size_t len, unsigned flags)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    size_t blen = 0;
    col_err err = {0};
    bool ok = col_tok_encode_ex(toks[k], text, len, flags, &ids, &n, &err) == COL_OK &&
              col_tok_decode(toks[k], ids, n, true, &back, &blen, &err) == COL_OK && blen == len &&
              memcmp(back, text, len) == 0;
    free(ids);
    free(back);
    return ok;
}

static char *read_fixture(const char *path, size_t *len)
{
    char *text;
    col_err err = {0};
    if (col_read_file(path, 0, &text, len, &err) != COL_OK) {
        TL_OK(false, "fixture readable: %s", err.msg);
        return NULL;
    }
    return text;
}

static void test_public_fixture(void)
{
    size_t len;
    char *text = read_fixture(FIX "/tokenizer_public.jsonl", &len);
    if (!text)
        return;
    int rows = 0, enc_ok[3] = {0}, rt_ok[3] = {0}, notes = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, "text"));
        if (!s) {
            cJSON_Delete(o);
            continue;
        }
        rows++;
        for (int k = 0; k < 3; k++) {
            unsigned flags = COL_TOK_PARSE_SPECIAL | (k == LLAMA2 ? COL_TOK_ADD_SPECIAL : 0u);
            enc_ok[k] += check_encode(k, s, strlen(s), flags, cJSON_GetObjectItem(o, tok_names[k]), &notes);
            rt_ok[k] += roundtrip(k, s, strlen(s), flags);
        }
        cJSON_Delete(o);
    }
    free(text);
    for (int k = 0; k < 3; k++) {
        TL_OK(rows == 28 && enc_ok[k] == rows, "public fixture, %s: %d/%d texts give the reference ids", tok_names[k],
              enc_ok[k], rows);
        TL_OK(rows == 28 && rt_ok[k] == rows, "public fixture, %s: decode(encode(text)) == text for %d/%d",
              tok_names[k], rt_ok[k], rows);
    }
}

static void test_hf_cases(const char *path)
{
    size_t len;
    char *text = read_fixture(path, &len);
    if (!text)
        return;
    int enc[NTOK][2] = {{0}}, dec[NTOK][2] = {{0}}, split[NTOK][2] = {{0}}, notes = 0, bad = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        int k = tok_index(cJSON_GetStringValue(cJSON_GetObjectItem(o, "tok")));
        const cJSON *s = cJSON_GetObjectItem(o, "text"), *ids = cJSON_GetObjectItem(o, "ids");
        const cJSON *decoded = cJSON_GetObjectItem(o, "decoded");
        if (k < 0 || !toks[k] || !ids || (!cJSON_IsString(s) && !cJSON_IsString(decoded))) {
            bad++;
            cJSON_Delete(o);
            continue;
        }
        if (cJSON_IsString(s)) {
            /* texts with U+0000 come as hex too: C strings end at the NUL */
            const char *hex = cJSON_GetStringValue(cJSON_GetObjectItem(o, "hex"));
            size_t hl = hex ? strlen(hex) / 2 : strlen(s->valuestring);
            char *raw = malloc(hl + 1);
            for (size_t i = 0; i < hl; i++) {
                unsigned v = (unsigned char)s->valuestring[i];
                if (hex)
                    sscanf(hex + 2 * i, "%2x", &v);
                raw[i] = (char)v;
            }
            bool parse = !cJSON_IsFalse(cJSON_GetObjectItem(o, "parse"));
            unsigned flags = (cJSON_IsTrue(cJSON_GetObjectItem(o, "special")) ? COL_TOK_ADD_SPECIAL : 0u) |
                             (parse ? COL_TOK_PARSE_SPECIAL : 0u);
            int (*count)[2] = parse ? enc : split;
            count[k][0]++;
            count[k][1] += check_encode(k, raw, hl, flags, ids, &notes);
            free(raw);
        } else {
            int n = cJSON_GetArraySize(ids), i = 0;
            int32_t *v = malloc(((size_t)n + 1) * sizeof *v);
            const cJSON *x;
            cJSON_ArrayForEach(x, ids) v[i++] = x->valueint;
            char *out = NULL;
            size_t olen = 0;
            col_err err = {0};
            bool skip = cJSON_IsTrue(cJSON_GetObjectItem(o, "skip"));
            bool ok = col_tok_decode(toks[k], v, (size_t)n, skip, &out, &olen, &err) == COL_OK &&
                      strlen(decoded->valuestring) == olen && memcmp(out, decoded->valuestring, olen) == 0;
            if (!ok && notes++ < 5)
                printf("# %s: decode (skip %d) gave '%s', want '%s' %s\n", tok_names[k], skip, out ? out : "",
                       decoded->valuestring, err.msg);
            dec[k][0]++;
            dec[k][1] += ok;
            free(out);
            free(v);
        }
        cJSON_Delete(o);
    }
    free(text);
    TL_OK(bad == 0, "hf cases: every line names a loaded tokenizer and holds text or decoded (%d bad)", bad);
    for (int k = 0; k < NTOK; k++) {
        if (enc[k][0])
            TL_OK(enc[k][1] == enc[k][0], "hf cases, %s: %d/%d encodings give Hugging Face's ids", tok_names[k],
                  enc[k][1], enc[k][0]);
        if (split[k][0])
            TL_OK(split[k][1] == split[k][0], "hf cases, %s: %d/%d with special tokens split as text", tok_names[k],
                  split[k][1], split[k][0]);
        if (dec[k][0])
            TL_OK(dec[k][1] == dec[k][0], "hf cases, %s: %d/%d decodings give Hugging Face's text", tok_names[k],
                  dec[k][1], dec[k][0]);
    }
}

static void test_properties(void)
{
    struct {
        int k;
        int32_t vocab, bos, eos;
    } want[] = {{GPT2, 50257, 50256, 50256}, {LLAMA2, 32000, 1, 2}, {LLAMA3, 128256, 128000, 128001}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const col_tokenizer *t = toks[want[i].k];
        TL_OK(col_tok_vocab_size(t) == want[i].vocab && col_tok_bos_id(t) == want[i].bos &&
                  col_tok_eos_id(t) == want[i].eos,
              "%s: vocab %d bos %d eos %d", tok_names[want[i].k], col_tok_vocab_size(t), col_tok_bos_id(t),
              col_tok_eos_id(t));
    }
    /* ids from the files themselves */
    TL_OK(col_tok_token_id(toks[LLAMA3], "<|eot_id|>") == 128009 && col_tok_is_special(toks[LLAMA3], 128009) &&
              col_tok_token_id(toks[LLAMA3], "<|begin_of_text|>") == 128000,
          "llama3: <|eot_id|> is special id 128009, <|begin_of_text|> 128000");
    TL_OK(col_tok_token_id(toks[GPT2], "\xC4\xA0the") == 262 && col_tok_token_id(toks[GPT2], "<|endoftext|>") == 50256 &&
              col_tok_is_special(toks[GPT2], 50256) && !col_tok_is_special(toks[GPT2], 262) &&
              col_tok_token_id(toks[GPT2], "no such token at all") == -1,
          "gpt2: token names (Ġthe = 262), <|endoftext|> special");
    size_t n;
    const char *b = col_tok_token_bytes(toks[GPT2], 262, &n);
    TL_OK(b && n == 4 && memcmp(b, " the", 4) == 0 && !col_tok_token_bytes(toks[GPT2], 50257, &n) && n == 0,
          "gpt2: token 262 decodes to ' the'; id 50257 has no bytes");
    b = col_tok_token_bytes(toks[LLAMA2], col_tok_token_id(toks[LLAMA2], "<0x0A>"), &n);
    TL_OK(b && n == 1 && b[0] == '\n', "llama2: <0x0A> decodes to a newline byte");
    /* a template with BOS and EOS (tiny_meta: <bos> $A <eos>) */
    TL_OK(col_tok_bos_id(toks[TINY_META]) == col_tok_token_id(toks[TINY_META], "<bos>") &&
              col_tok_eos_id(toks[TINY_META]) == col_tok_token_id(toks[TINY_META], "<eos>") &&
              col_tok_bos_id(toks[TINY_META]) >= 0,
          "tiny_meta: bos/eos from the post-processor template");
}

static void test_empty_and_bytes(void)
{
    int32_t *ids;
    size_t n;
    col_err err = {0};
    bool ok = true;
    for (int k = 0; k < NTOK; k++) {
        ok &= col_tok_encode_ex(toks[k], "", 0, COL_TOK_PARSE_SPECIAL, &ids, &n, &err) == COL_OK && ids && n == 0;
        free(ids);
    }
    TL_OK(ok, "empty text gives no ids (and a non-NULL array)");
    ok = col_tok_encode(toks[LLAMA2], "", 0, true, &ids, &n, &err) == COL_OK && n == 1 && ids[0] == 1;
    free(ids);
    ok &= col_tok_encode(toks[LLAMA3], NULL, 0, true, &ids, &n, &err) == COL_OK && n == 1 && ids[0] == 128000;
    free(ids);
    TL_OK(ok, "empty text with add_special: llama2 [1], llama3 [128000]");
    char *text;
    size_t len;
    ok = col_tok_decode(toks[LLAMA2], NULL, 0, false, &text, &len, &err) == COL_OK && len == 0 && text[0] == '\0';
    free(text);
    TL_OK(ok, "decoding no ids gives an empty string");

    /* byte fallback: an invalid byte and a character outside the vocabulary
     * go to <0xXX> tokens after the prepended '▁' */
    const col_tokenizer *l2 = toks[LLAMA2];
    int32_t sp = col_tok_token_id(l2, "\xE2\x96\x81"), ff = col_tok_token_id(l2, "<0xFF>");
    ok = col_tok_encode(l2, "\xFF", 1, true, &ids, &n, &err) == COL_OK && n == 3 && ids[0] == 1 && ids[1] == sp &&
         ids[2] == ff && sp >= 0 && ff >= 0;
    free(ids);
    TL_OK(ok, "llama2: byte 0xFF (invalid UTF-8) -> [1, '▁' %d, <0xFF> %d]", sp, ff);
    static const char emoji[] = "\xF0\x9F\x98\x80"; /* U+1F600 is not in LLaMA-2's vocabulary */
    ok = col_tok_token_id(l2, emoji) < 0 && col_tok_encode(l2, emoji, 4, false, &ids, &n, &err) == COL_OK && n == 5 &&
         ids[0] == sp;
    for (int i = 0; ok && i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)emoji[i]);
        ok = ids[1 + i] == col_tok_token_id(l2, name);
    }
    free(ids);
    TL_OK(ok, "llama2: U+1F600 falls back to its four byte tokens");

    /* invalid UTF-8 for the byte-level ones: each byte kept, decoded back */
    static const char bad[] = "ab\xC3(\xFF\xFE x\xE2\x82 \xF0\x9F\x98\xED\xA0\x80!\xC0\xAF";
    for (int k = 0; k < 3; k++)
        TL_OK(roundtrip(k, bad, sizeof bad - 1, 0), "%s: invalid UTF-8 (truncated, overlong, surrogate) round trips",
              tok_names[k]);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* random bytes: UTF-8 from several scripts, with invalid bytes mixed in */
static size_t random_text(uint64_t *s, char *out, size_t max)
{
    static const char *const pieces[] = {"a", "Z", "the", " ", "  ", "\n", "\t", "7", "42", ".", "'s", "'LL", "\xC3\xA9",
                                         "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "\xC2\x85", "\xE3\x80\x80", "<", "|>",
                                         "\r\n", "\xCC\x81"};
    size_t n = 0, want = rnd(s) % max;
    while (n + 8 < want) {
        uint64_t r = rnd(s);
        if (r % 7 == 0) {
            out[n++] = (char)(0x80 + (r >> 8) % 128); /* a stray byte >= 0x80 */
        } else {
            const char *p = pieces[(r >> 8) % (sizeof pieces / sizeof pieces[0])];
            size_t l = strlen(p);
            memcpy(out + n, p, l);
            n += l;
        }
    }
    return n;
}

static void test_roundtrip_random(void)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    char buf[512];
    for (int k = 0; k < 3; k++) {
        int fails = 0, runs = 300;
        for (int r = 0; r < runs; r++) {
            size_t n = random_text(&seed, buf, sizeof buf);
            if (k == LLAMA2 && memmem(buf, n, "\xE2\x96\x81", 3)) /* '▁' decodes to ' ' by design */
                continue;
            fails += !roundtrip(k, buf, n, 0);
        }
        TL_OK(fails == 0, "%s: decode(encode(x)) == x for %d random byte strings (%d failed)", tok_names[k], runs,
              fails);
    }
    /* one long word: the heap-based merge loop on 200 KB without a space */
    size_t big = 200000;
    char *s = malloc(big);
    for (size_t i = 0; i < big; i++)
        s[i] = "abcdefgh"[rnd(&seed) % 8];
    for (int k = 0; k < 3; k++)
        TL_OK(roundtrip(k, s, big, 0), "%s: a 200 KB word round trips", tok_names[k]);
    free(s);
}

/* ---- errors ---- */

static void expect_json_error(const char *json, col_status code, const char *needle)
{
    col_tokenizer *t = NULL;
    col_err err = {0};
    col_status st = col_tok_from_json(json, strlen(json), &t, &err);
    TL_OK(st == code && !t && strstr(err.msg, needle) && !strchr(err.msg, '\n'), "bad tokenizer.json -> %s: %s",
          col_status_name(st), err.msg);
    col_tok_free(t);
}

#define V3 "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2}"
#define MODEL(extra) "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[\"a b\"]" extra "}"

static void test_json_errors(void)
{
    /* the smallest valid one, as a control: "abba" -> a b b a -> ab b a */
    col_tokenizer *t = NULL;
    col_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    const char *ok = MODEL("}");
    bool good = col_tok_from_json(ok, strlen(ok), &t, &err) == COL_OK &&
                col_tok_encode(t, "abba", 4, true, &ids, &n, &err) == COL_OK && n == 3 && ids[0] == 2 &&
                ids[1] == 1 && ids[2] == 0;
    TL_OK(good, "a minimal tokenizer.json loads and merges 'a b' (%s)", err.msg);
    free(ids);
    ids = NULL;
    col_status st = t ? col_tok_encode(t, "abc", 3, false, &ids, &n, &err) : COL_EINTERNAL;
    TL_OK(st == COL_EINVAL && !ids && strstr(err.msg, "cannot encode U+0063"),
          "a character outside the vocabulary with no byte fallback or unk: %s", err.msg);
    col_tok_free(t);

    expect_json_error("{", COL_EFORMAT, "invalid JSON at byte");
    expect_json_error("{\"model\": 3}", COL_EFORMAT, "no \"model\" object");
    expect_json_error(MODEL("}") " x", COL_EFORMAT, "unexpected data after the JSON");
    expect_json_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", COL_EUNSUPPORTED, "'WordPiece' is not supported");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", COL_EFORMAT, "not a JSON object");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", COL_EFORMAT, "vocabulary is empty");
    expect_json_error("{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}", COL_EFORMAT, "'a' has an id that is not an integer");
    expect_json_error("{\"model\":{\"vocab\":{\"a\":0.5},\"merges\":[]}}", COL_EFORMAT, "not an integer in [0, 16777216)");
    expect_json_error("{\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", COL_EFORMAT, "id 0 is given to both 'a' and 'b'");
    expect_json_error("{\"model\":{\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}", COL_EFORMAT, "token 'a' appears twice");
    expect_json_error("{\"model\":{\"vocab\":{\"a\":9000000},\"merges\":[]}}", COL_EFORMAT, "ids are too sparse");
    expect_json_error("{\"model\":{" V3 ",\"merges\":[\"a c\"]}}", COL_EFORMAT, "merge 1 ('a' 'c') uses 'c', which is not in the vocabulary");
    expect_json_error("{\"model\":{" V3 ",\"merges\":[\"a b\",\"b a\"]}}", COL_EFORMAT, "merge 2 ('b' 'a') uses 'ba'");
    expect_json_error("{\"model\":{" V3 ",\"merges\":[\"ab\"]}}", COL_EFORMAT, "merge 1 ('ab') is not two tokens");
    expect_json_error("{\"model\":{" V3 ",\"merges\":[[\"a\"]]}}", COL_EFORMAT, "merge 1 is neither");
    expect_json_error("{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":{}}}", COL_EFORMAT, "model.merges is not an array");
    expect_json_error(MODEL(",\"unk_token\":\"<unk>\"}"), COL_EFORMAT, "unk_token '<unk>' is not in the vocabulary");
    expect_json_error(MODEL(",\"dropout\":0.1}"), COL_EUNSUPPORTED, "dropout");
    expect_json_error(MODEL(",\"byte_fallback\":3}"), COL_EFORMAT, "must be booleans");
    expect_json_error(MODEL("},\"added_tokens\":[{\"id\":0,\"content\":\"zz\"}]"), COL_EFORMAT,
                      "id 0 is 'zz', but the vocabulary gives it to 'a'");
    expect_json_error(MODEL("},\"added_tokens\":[{\"id\":5,\"content\":\"zz\"},{\"id\":6,\"content\":\"zz\"}]"),
                      COL_EFORMAT, "'zz' appears twice");
    expect_json_error(MODEL("},\"added_tokens\":[{\"id\":5,\"content\":\"x\"},{\"id\":5,\"content\":\"y\"}]"),
                      COL_EFORMAT, "id 5 appears twice");
    expect_json_error(MODEL("},\"added_tokens\":[{\"content\":\"x\"}]"), COL_EFORMAT, "added_tokens[0]: needs");
    expect_json_error(MODEL("},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}"), COL_EFORMAT, "no token for byte 0x00");
    expect_json_error(MODEL("},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\",\"invert\":false}"),
                      COL_EFORMAT, "regex does not compile");
    expect_json_error(MODEL("},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Removed\",\"invert\":false}"),
                      COL_EUNSUPPORTED, "only Split with behavior");
    expect_json_error(MODEL("},\"pre_tokenizer\":{\"type\":\"Whitespace\"}"), COL_EUNSUPPORTED, "pre_tokenizer type 'Whitespace'");
    expect_json_error(MODEL("},\"normalizer\":{\"type\":\"NFKC\"}"), COL_EUNSUPPORTED, "normalizer type 'NFKC' is not supported");
    expect_json_error(MODEL("},\"normalizer\":{\"type\":\"Sequence\"}"), COL_EFORMAT, "no \"normalizers\" array");
    expect_json_error(MODEL("},\"decoder\":{\"type\":\"WordPiece\"}"), COL_EUNSUPPORTED, "decoder type 'WordPiece'");
    expect_json_error(MODEL("},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
                            "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[99]}}}"),
                      COL_EFORMAT, "<s> has id 99, which names no token");
    expect_json_error(MODEL("},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[]}"), COL_EFORMAT,
                      "must hold sequence A once");
    expect_json_error(MODEL("},\"post_processor\":{\"type\":\"BertProcessing\"}"), COL_EFORMAT, "needs cls and sep");
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void expect_load_error(const char *path, col_status code, const char *needle)
{
    col_tokenizer *t = NULL;
    col_err err = {0};
    col_status st = col_tok_load(path, &t, &err);
    TL_OK(st == code && !t && strstr(err.msg, needle) && !strchr(err.msg, '\n'), "load %s -> %s: %s",
          strrchr(path, '/') ? strrchr(path, '/') + 1 : path, col_status_name(st), err.msg);
    col_tok_free(t);
}

static void test_file_errors(void)
{
    char dir[] = "/tmp/test_tokenizer_XXXXXX", path[600];
    if (!mkdtemp(dir)) {
        TL_OK(false, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/missing", dir);
    expect_load_error(path, COL_EIO, "No such file");
    expect_load_error(dir, COL_EIO, "no tokenizer.json, nor vocab.json with merges.txt");
    write_file(dir, "vocab.json", "{\"a\": 0, \"b\": 1}");
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    expect_load_error(path, COL_EFORMAT, "no merges.txt beside it");
    /* a GPT-2 style pair whose merges are broken, then valid but missing byte tokens */
    write_file(dir, "merges.txt", "#version: 0.2\na b c\n");
    expect_load_error(dir, COL_EFORMAT, "line 2 ('a b c') is not two tokens");
    write_file(dir, "merges.txt", "#version: 0.2\na b\n");
    expect_load_error(dir, COL_EFORMAT, "merges.txt: merge 1 ('a' 'b') uses 'ab', which is not in the vocabulary");
    write_file(dir, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    expect_load_error(dir, COL_EFORMAT, "vocab.json: byte-level vocabulary has no token for byte 0x00");
    write_file(dir, "tokenizer.json", "{\"model\": {\"vocab\": {\"a\": 0}, \n \"merges\": [\"a b\" ]]}");
    expect_load_error(dir, COL_EFORMAT, "tokenizer.json: invalid JSON at byte");

    /* tokenizer_config.json names the EOS token */
    char *tiny;
    size_t len;
    col_err err = {0};
    if (col_read_file(FIX "/tiny_bytelevel.json", 0, &tiny, &len, &err) == COL_OK) {
        write_file(dir, "tokenizer.json", tiny);
        free(tiny);
        write_file(dir, "tokenizer_config.json", "{\"eos_token\": {\"content\": \"<mask>\"}, \"bos_token\": null}");
        col_tokenizer *t = NULL;
        bool ok = col_tok_load(dir, &t, &err) == COL_OK && col_tok_eos_id(t) == col_tok_token_id(t, "<mask>") &&
                  col_tok_eos_id(t) >= 0 && col_tok_bos_id(t) == -1;
        TL_OK(ok, "tokenizer_config.json sets eos_token (an object) and bos_token (null) %s", err.msg);
        col_tok_free(t);
        write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}");
        expect_load_error(dir, COL_EFORMAT, "tokenizer_config.json: eos_token '<|nope|>' is not a token");
        write_file(dir, "tokenizer_config.json", "[1,");
        expect_load_error(dir, COL_EFORMAT, "tokenizer_config.json: invalid JSON");
    }
    static const char *const files[] = {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_decode_errors(void)
{
    char *text = NULL;
    size_t len;
    col_err err = {0};
    int32_t ids[] = {15496, 50257};
    col_status st = col_tok_decode(toks[GPT2], ids, 2, false, &text, &len, &err);
    TL_OK(st == COL_EINVAL && !text && strstr(err.msg, "token id 50257 at position 1 is out of range [0, 50257)"),
          "decode rejects an id past the vocabulary: %s", err.msg);
    int32_t neg[] = {-1};
    st = col_tok_decode(toks[LLAMA3], neg, 1, false, &text, &len, &err);
    TL_OK(st == COL_EINVAL && !text && strstr(err.msg, "token id -1"), "decode rejects a negative id: %s", err.msg);
}

int main(int argc, char **argv)
{
    for (int k = 0; k < NTOK; k++) {
        col_err err = {0};
        col_status st = col_tok_load(tok_paths[k], &toks[k], &err);
        TL_OK(st == COL_OK, "load %s (%s) %s", tok_names[k], tok_paths[k], err.msg);
        if (st != COL_OK) {
            printf("Bail out! cannot load %s\n", tok_names[k]);
            return 1;
        }
    }
    if (argc > 1) { /* a differential run on a file of cases */
        test_hf_cases(argv[1]);
    } else {
        test_public_fixture();
        test_hf_cases(FIX "/hf_cases.jsonl");
        test_properties();
        test_empty_and_bytes();
        test_roundtrip_random();
        test_json_errors();
        test_file_errors();
        test_decode_errors();
    }
    for (int k = 0; k < NTOK; k++)
        col_tok_free(toks[k]);
    return tl_done();
}
