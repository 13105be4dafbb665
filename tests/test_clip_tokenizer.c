/* test_clip_tokenizer.c - the CLIP tokenizer of Stable Diffusion against
 * transformers' CLIPTokenizer (tools/refgen/make_clip_tokenizer_fixtures.py).
 *
 * 1. tests/fixtures/clip_tokenizer/cases_CONFIG.jsonl, for five folders: the
 *    bundled assets/tokenizers/clip (sd1), and the bundled vocab.json +
 *    merges.txt beside the configuration files of CONFIG/ (sd2: pad "!";
 *    sdxl2: added_tokens_decoder; newpad: a pad not in the vocabulary; bare:
 *    none): the vocabulary size, BOS, EOS, pad id and model_max_length; every
 *    caption's ids (col_tok_encode), its 77 padded ids and the untruncated
 *    count (col_tok_encode_padded); decoding with and without special tokens.
 * 2. normalize.jsonl: NFC, Lowercase and CLIP's whole normalizer on every
 *    code point of the tables and on random mark sequences.
 * 3. Hostile inputs: invalid UTF-8, missing or corrupt vocab.json, merges.txt
 *    and configuration files (one clear line each), giant texts, bad
 *    arguments to col_tok_encode_padded. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"
#include "textio.h"
#include "tok_internal.h"
#include "tokenizer.h"

#ifdef COL_SRC_ASSET_DIR
#define CLIP_DIR COL_SRC_ASSET_DIR "/tokenizers/clip"
#define GPT2_DIR COL_SRC_ASSET_DIR "/tokenizers/gpt2"
#define FIX COL_SRC_ASSET_DIR "/../tests/fixtures/clip_tokenizer"
#else
#define CLIP_DIR "assets/tokenizers/clip"
#define GPT2_DIR "assets/tokenizers/gpt2"
#define FIX "tests/fixtures/clip_tokenizer"
#endif

enum { NCFG = 5, LEN = 77 };
static const char *const cfg_names[NCFG] = {"sd1", "sd2", "sdxl2", "newpad", "bare"};
static char tmp_root[64];

/* ---- helpers ---- */

static void put_file(const char *dir, const char *name, const char *data, size_t len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

static void put_text(const char *dir, const char *name, const char *text)
{
    put_file(dir, name, text, strlen(text));
}

static void link_file(const char *dir, const char *name, const char *target)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (access(target, F_OK) == 0 && symlink(target, p) != 0)
        TL_NOTE("cannot link %s", p);
}

/* a fresh directory under tmp_root */
static char *new_dir(const char *name)
{
    static char p[NCFG + 64][256];
    static int n;
    char *d = p[n++ % (NCFG + 64)];
    snprintf(d, 256, "%s/%s", tmp_root, name);
    mkdir(d, 0700);
    return d;
}

static void rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        TL_NOTE("cannot remove %s", dir);
}

static char *read_all(const char *path, size_t *len)
{
    char *text = NULL;
    col_err err = {0};
    if (col_read_file(path, 0, &text, len, &err) != COL_OK)
        TL_OK(false, "fixture readable: %s", err.msg);
    return text;
}

static int32_t *ids_of(const cJSON *arr, size_t *n)
{
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) v[i++] = (int32_t)x->valuedouble;
    return v;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    printf("#   %s:", what);
    for (size_t i = 0; i < n && i < 30; i++)
        printf(" %d", ids[i]);
    printf("%s\n", n > 30 ? " ..." : "");
}

/* the text of a case: "hex" (UTF-8 bytes) when there, else "text" */
static char *case_text(const cJSON *o, size_t *len)
{
    const char *hex = cJSON_GetStringValue(cJSON_GetObjectItem(o, "hex"));
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, "text"));
    *len = hex ? strlen(hex) / 2 : strlen(s);
    char *raw = malloc(*len + 1);
    for (size_t i = 0; i < *len; i++) {
        unsigned v = (unsigned char)s[i];
        if (hex)
            sscanf(hex + 2 * i, "%2x", &v);
        raw[i] = (char)v;
    }
    raw[*len] = '\0';
    return raw;
}

/* ---- 1. the reference cases ---- */

static col_tokenizer *load_config(int k)
{
    const char *path = CLIP_DIR;
    if (k > 0) {
        char *d = new_dir(cfg_names[k]), fix[512];
        link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
        link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
        for (int f = 0; f < 2; f++) {
            const char *name = f ? "special_tokens_map.json" : "tokenizer_config.json";
            snprintf(fix, sizeof fix, "%s/%s/%s", FIX, cfg_names[k], name);
            link_file(d, name, fix);
        }
        path = d;
    }
    col_tokenizer *t = NULL;
    col_err err = {0};
    TL_OK(col_tok_load(path, &t, &err) == COL_OK, "%s: the folder loads (%s)", cfg_names[k], err.msg);
    return t;
}

static bool check_case(const col_tokenizer *t, const char *cfg, const cJSON *o, int *notes, bool *pad_ok, bool *n_ok)
{
    size_t len, nw, np;
    char *text = case_text(o, &len);
    int32_t *want = ids_of(cJSON_GetObjectItem(o, "ids"), &nw), *wpad = ids_of(cJSON_GetObjectItem(o, "padded"), &np);
    const cJSON *tail = cJSON_GetObjectItem(o, "padded_tail");
    int32_t pad_id = (int32_t)cJSON_GetArrayItem(tail, 0)->valuedouble;
    size_t pad_n = (size_t)cJSON_GetArrayItem(tail, 1)->valuedouble;
    int32_t *ids = NULL, padded[LEN];
    size_t n = 0, n_text = 0;
    col_err err = {0};
    bool ok = col_tok_encode(t, text, len, true, &ids, &n, &err) == COL_OK && n == nw &&
              memcmp(ids, want, n * sizeof *ids) == 0;
    bool pok = np + pad_n == LEN && col_tok_encode_padded(t, text, len, LEN, padded, &n_text, &err) == COL_OK &&
               memcmp(padded, wpad, np * sizeof *wpad) == 0;
    for (size_t i = np; pok && i < LEN; i++)
        pok = padded[i] == pad_id;
    *pad_ok = pok;
    *n_ok = nw >= 2 && n_text == nw - 2;
    if ((!ok || !pok || !*n_ok) && (*notes)++ < 6) {
        cJSON *s = cJSON_CreateString(text);
        char *q = cJSON_PrintUnformatted(s);
        printf("# %s: text %.200s: %s%s%s %s\n", cfg, q, ok ? "" : "ids differ ", pok ? "" : "padded ids differ ",
               *n_ok ? "" : "untruncated count differs", err.msg);
        print_ids("got ", ids, n);
        print_ids("want", want, nw);
        print_ids("got padded", padded, LEN);
        free(q);
        cJSON_Delete(s);
    }
    free(ids);
    free(want);
    free(wpad);
    free(text);
    return ok;
}

static bool check_decode(const col_tokenizer *t, const char *cfg, const cJSON *o, int *notes)
{
    size_t n;
    int32_t *ids = ids_of(cJSON_GetObjectItem(o, "ids"), &n);
    const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(o, "decoded"));
    bool skip = cJSON_IsTrue(cJSON_GetObjectItem(o, "skip"));
    char *out = NULL;
    size_t olen = 0;
    col_err err = {0};
    bool ok = want && col_tok_decode(t, ids, n, skip, &out, &olen, &err) == COL_OK && olen == strlen(want) &&
              memcmp(out, want, olen) == 0;
    if (!ok && (*notes)++ < 6)
        printf("# %s: decode (skip %d) gave '%s', want '%s' %s\n", cfg, skip, out ? out : "", want ? want : "",
               err.msg);
    free(out);
    free(ids);
    return ok;
}

static void test_config(int k)
{
    col_tokenizer *t = load_config(k);
    if (!t)
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/cases_%s.jsonl", FIX, cfg_names[k]);
    size_t len;
    char *text = read_all(path, &len);
    int cases = 0, enc = 0, pad = 0, cnt = 0, decs = 0, dec = 0, facts = 0, notes = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *f = cJSON_GetObjectItem(o, "facts");
        if (f) {
            int32_t want[5], got[5] = {col_tok_vocab_size(t), col_tok_bos_id(t), col_tok_eos_id(t), col_tok_pad_id(t),
                                       col_tok_max_length(t)};
            static const char *const keys[5] = {"vocab", "bos", "eos", "pad", "max_length"};
            bool same = true;
            for (int i = 0; i < 5; i++) {
                want[i] = (int32_t)cJSON_GetObjectItem(f, keys[i])->valuedouble;
                same = same && want[i] == got[i];
            }
            TL_OK(same, "%s: vocab %d, bos %d, eos %d, pad %d, max length %d (transformers: %d %d %d %d %d)",
                  cfg_names[k], got[0], got[1], got[2], got[3], got[4], want[0], want[1], want[2], want[3], want[4]);
            facts++;
        } else if (cJSON_GetObjectItem(o, "text")) {
            bool p, c;
            cases++;
            enc += check_case(t, cfg_names[k], o, &notes, &p, &c);
            pad += p;
            cnt += c;
        } else {
            decs++;
            dec += check_decode(t, cfg_names[k], o, &notes);
        }
        cJSON_Delete(o);
    }
    free(text);
    int want_cases = k < 2 ? 400 : 150;
    TL_OK(facts == 1 && cases >= want_cases && decs >= 10, "%s: the fixture holds the facts, %d captions and %d "
          "decodings", cfg_names[k], cases, decs);
    TL_OK(enc == cases, "%s: %d/%d captions give transformers' ids", cfg_names[k], enc, cases);
    TL_OK(pad == cases, "%s: %d/%d give its ids padded / truncated to %d", cfg_names[k], pad, cases, LEN);
    TL_OK(cnt == cases, "%s: %d/%d give the untruncated count", cfg_names[k], cnt, cases);
    TL_OK(dec == decs, "%s: %d/%d decodings give transformers' text", cfg_names[k], dec, decs);
    col_tok_free(t);
}

/* ---- 2. normalizers ---- */

static bool same(const col_tbuf *b, const char *want)
{
    return b->n == strlen(want) && memcmp(b->p, want, b->n) == 0;
}

static void test_normalize(const col_tokenizer *clip)
{
    size_t len;
    char *text = read_all(FIX "/normalize.jsonl", &len);
    int rows = 0, ok[3] = {0}, notes = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, "text"));
        const char *want[3] = {cJSON_GetStringValue(cJSON_GetObjectItem(o, "nfc")),
                               cJSON_GetStringValue(cJSON_GetObjectItem(o, "lower")),
                               cJSON_GetStringValue(cJSON_GetObjectItem(o, "clip"))};
        rows++;
        col_tbuf got[3] = {{0}};
        const char *cs = NULL;
        size_t cn = 0;
        col_err err = {0};
        bool done[3] = {col_uni_nfc(s, strlen(s), &got[0]), col_uni_lower(s, strlen(s), &got[1]),
                        col_tok_normalize(clip, s, strlen(s), true, &got[2], &cs, &cn, &err) == COL_OK};
        col_tbuf whole = {cs ? (char *)cs : NULL, cn, 0};
        for (int i = 0; i < 3; i++) {
            bool good = done[i] && want[i] && same(i < 2 ? &got[i] : &whole, want[i]);
            ok[i] += good;
            if (!good && notes++ < 5)
                printf("# normalizer %d differs on %s\n", i, line);
            free(got[i].p);
        }
        cJSON_Delete(o);
    }
    free(text);
    TL_OK(rows > 1000, "normalize fixture: %d texts", rows);
    TL_OK(ok[0] == rows, "NFC: %d/%d texts as tokenizers' NFC", ok[0], rows);
    TL_OK(ok[1] == rows, "Lowercase: %d/%d texts as tokenizers' Lowercase", ok[1], rows);
    TL_OK(ok[2] == rows, "CLIP normalizer: %d/%d texts as NFC + \\s+ -> ' ' + Lowercase", ok[2], rows);
}

/* ---- 3. hostile inputs ---- */

static bool ids_in_range(const col_tokenizer *t, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= col_tok_vocab_size(t))
            return false;
    return true;
}

static void test_invalid_utf8(const col_tokenizer *t)
{
    static const char *const texts[] = {"\xff", ("a\xff" "b"), "\xc3(", "cafe\xcc", "\xe2\x82", "\xed\xa0\x80",
                                        "\xf4\x90\x80\x80", "e\xcc\x81\xff\xcc\x81", "\xc0\xaf", "<|endoftext|>\xfe"};
    int ok = 0, kept = 0;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL, padded[LEN];
        size_t n = 0, nt;
        char *back = NULL;
        size_t blen = 0;
        col_err err = {0};
        if (col_tok_encode(t, texts[i], strlen(texts[i]), true, &ids, &n, &err) == COL_OK && ids_in_range(t, ids, n) &&
            col_tok_encode_padded(t, texts[i], strlen(texts[i]), LEN, padded, &nt, &err) == COL_OK &&
            col_tok_decode(t, ids, n, true, &back, &blen, &err) == COL_OK)
            ok++;
        /* every invalid byte comes back from decode (valid text is lowercased and spaced, so compare bytes >= 0x80
           that are not valid UTF-8: here, each byte of the input that does not start a valid character) */
        bool all = back != NULL;
        for (size_t j = 0; all && texts[i][j]; j++) {
            uint32_t cp;
            const unsigned char *u = (const unsigned char *)texts[i];
            if (u[j] >= 0x80 && col_utf8_char(u + j, strlen(texts[i]) - j, &cp) == 0 && !memchr(back, u[j], blen))
                all = false;
        }
        kept += all;
        free(ids);
        free(back);
    }
    int total = (int)(sizeof texts / sizeof texts[0]);
    TL_OK(ok == total, "invalid UTF-8: %d/%d texts encode, pad and decode", ok, total);
    TL_OK(kept == total, "invalid UTF-8: the invalid bytes come back from decode in %d/%d", kept, total);
    col_tbuf b = {0};
    TL_OK(col_uni_nfc("\xff" "e\xcc\x81\xcc", 5, &b) && b.n == 4 && memcmp(b.p, "\xff\xc3\xa9\xcc", 4) == 0,
          "NFC copies invalid bytes and composes between them");
    free(b.p);
}

static void test_giant(const col_tokenizer *t)
{
    size_t big = (size_t)4 << 20;
    char *s = malloc(big + 1);
    static const char *const words[] = {"a ", "photo ", "of ", "THE ", "cat, ", "caf\xc3\xa9 ", "\xe6\x97\xa5 ", "\xf0\x9f\x98\x80",
                                        "\t", "!! ", "<|endoftext|>", "e\xcc\x81", "don't "};
    uint64_t r = 12345;
    size_t n = 0;
    while (n + 16 < big) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(r >> 33) % (sizeof words / sizeof words[0])];
        memcpy(s + n, w, strlen(w));
        n += strlen(w);
    }
    int32_t *ids = NULL, padded[LEN];
    size_t m = 0, nt = 0;
    col_err err = {0};
    bool ok = col_tok_encode(t, s, n, true, &ids, &m, &err) == COL_OK && ids_in_range(t, ids, m) && m > 100000 &&
              col_tok_encode_padded(t, s, n, LEN, padded, &nt, &err) == COL_OK && nt == m - 2 &&
              memcmp(padded, ids, (LEN - 1) * sizeof *ids) == 0 && padded[LEN - 1] == col_tok_eos_id(t);
    TL_OK(ok, "4 MB of caption text: %zu ids, the padded ones its first 76 and EOS (%s)", m, err.msg);
    free(ids);
    memset(s, 'x', big); /* one 4 MB word */
    ok = col_tok_encode_padded(t, s, big, LEN, padded, &nt, &err) == COL_OK && nt > LEN;
    TL_OK(ok, "a 4 MB word encodes (%zu ids) (%s)", nt, err.msg);
    memset(s, ' ', big);
    ok = col_tok_encode(t, s, big, true, &ids, &m, &err) == COL_OK && m == 2;
    TL_OK(ok, "4 MB of spaces: only BOS and EOS (%s)", err.msg);
    free(ids);
    s[0] = 'a'; /* "a" and two million U+0301: the long sort, one composition */
    for (size_t i = 1; i + 1 < big; i += 2)
        s[i] = '\xcc', s[i + 1] = '\x81';
    col_tbuf b = {0};
    size_t marks = (big - 1) / 2;
    ok = col_uni_nfc(s, 1 + 2 * marks, &b) && b.n == 2 * marks && memcmp(b.p, "\xc3\xa1", 2) == 0;
    free(b.p);
    TL_OK(ok && col_tok_encode_padded(t, s, 1 + 2 * marks, LEN, padded, &nt, &err) == COL_OK,
          "'a' and %zu combining accents: NFC composes the first, the sort is not quadratic", marks);
    free(s);
}

/* loads dir and expects failure with one line holding needle */
static void expect_load_error(const char *dir, const char *needle, const char *what)
{
    col_tokenizer *t = NULL;
    col_err err = {0};
    col_status st = col_tok_load(dir, &t, &err);
    TL_OK(st != COL_OK && !t && strstr(err.msg, needle) && !strchr(err.msg, '\n'), "%s -> %s: %s", what,
          col_status_name(st), err.msg);
    col_tok_free(t);
}

static const char CLIP_CFG[] = "{\"tokenizer_class\": \"CLIPTokenizer\", \"model_max_length\": 77}";

static void test_bad_files(void)
{
    char *d = new_dir("only_vocab");
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    expect_load_error(d, "no tokenizer.json, nor vocab.json with merges.txt", "vocab.json without merges.txt");
    d = new_dir("only_merges");
    link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
    put_text(d, "tokenizer_config.json", CLIP_CFG);
    expect_load_error(d, "no tokenizer.json, nor vocab.json with merges.txt", "merges.txt without vocab.json");

    size_t vlen = 0, mlen = 0;
    char *vocab = read_all(CLIP_DIR "/vocab.json", &vlen), *merges = read_all(CLIP_DIR "/merges.txt", &mlen);
    if (!vocab || !merges)
        return;
    d = new_dir("truncated_vocab");
    put_file(d, "vocab.json", vocab, vlen / 2);
    link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
    put_text(d, "tokenizer_config.json", CLIP_CFG);
    expect_load_error(d, "vocab.json: invalid JSON at byte", "a truncated vocab.json");
    d = new_dir("empty_vocab");
    put_text(d, "vocab.json", "");
    link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
    expect_load_error(d, "vocab.json: invalid JSON", "an empty vocab.json");
    d = new_dir("array_vocab");
    put_text(d, "vocab.json", "[1, 2, 3]");
    link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
    expect_load_error(d, "not a JSON object", "a vocab.json that is an array");
    d = new_dir("bad_id");
    put_text(d, "vocab.json", "{\"a\": 0, \"b\": -4}");
    put_text(d, "merges.txt", "#version: 0.2\n");
    put_text(d, "tokenizer_config.json", CLIP_CFG);
    expect_load_error(d, "vocab.json: vocab: token 'b' has an id that is not an integer", "a negative id");

    d = new_dir("truncated_merges"); /* cut in the middle of a line, before its space */
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    put_text(d, "tokenizer_config.json", CLIP_CFG);
    size_t cut = mlen / 2;
    while (merges[cut] != ' ')
        cut++;
    put_file(d, "merges.txt", merges, cut);
    expect_load_error(d, "is not two tokens separated by a space", "a merges.txt cut in a line");
    d = new_dir("unknown_merge");
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    put_text(d, "merges.txt", "#version: 0.2\ni n\nzz\xc5\x82 q\n");
    expect_load_error(d, "uses 'zz\xc5\x82', which is not in the vocabulary", "a merge of an unknown token");
    d = new_dir("three_tokens");
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    put_text(d, "merges.txt", "#version: 0.2\ni n g\n");
    expect_load_error(d, "line 2 ('i n g') is not two tokens", "a merges line of three tokens");
    d = new_dir("binary_merges");
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    put_file(d, "merges.txt", "\x00\x01\x02\n\xff\xfe", 6);
    expect_load_error(d, "merges.txt: line 1", "a binary merges.txt");

    d = new_dir("no_eow"); /* CLIPTokenizer, but the vocabulary lacks the "</w>" tokens */
    char tiny[4096];
    size_t k = 0;
    k += (size_t)snprintf(tiny + k, sizeof tiny - k, "{");
    for (unsigned b = 0; b < 256; b++) {
        uint32_t cp = col_bytelevel_cp(b);
        char u[3] = {(char)(cp < 0x80 ? cp : 0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)), 0};
        if (cp < 0x80)
            u[1] = 0;
        if (b == '"' || b == '\\')
            k += (size_t)snprintf(tiny + k, sizeof tiny - k, "\"\\%s\": %u, ", u, b);
        else
            k += (size_t)snprintf(tiny + k, sizeof tiny - k, "\"%s\": %u, ", u, b);
    }
    snprintf(tiny + k, sizeof tiny - k, "\"<|startoftext|>\": 256, \"<|endoftext|>\": 257}");
    put_text(d, "vocab.json", tiny);
    put_text(d, "merges.txt", "#version: 0.2\n");
    put_text(d, "tokenizer_config.json", CLIP_CFG);
    expect_load_error(d, "no token for byte 0x00 with the end-of-word suffix", "a CLIP vocabulary without </w>");

    static const struct {
        const char *name, *cfg, *needle, *what;
    } cfgs[] = {
        {"cfg_trunc", "{\"tokenizer_class\": \"CLIPTokenizer\", \"pad_token\": ", "tokenizer_config.json: invalid JSON",
         "a truncated tokenizer_config.json"},
        {"cfg_array", "[\"CLIPTokenizer\"]", "tokenizer_config.json: not a JSON object", "a config that is an array"},
        {"cfg_bos_num", "{\"tokenizer_class\": \"CLIPTokenizer\", \"bos_token\": 5}", "bos_token is neither a string",
         "a bos_token that is a number"},
        {"cfg_flag", "{\"tokenizer_class\": \"CLIPTokenizer\", \"pad_token\": {\"content\": \"!\", \"lstrip\": \"yes\"}}",
         "boolean flags", "a pad_token whose lstrip is a string"},
        {"cfg_decoder", "{\"tokenizer_class\": \"CLIPTokenizer\", \"added_tokens_decoder\": {\"x\": {\"content\": \"!\"}}}",
         "added_tokens_decoder: entry 'x'", "an added_tokens_decoder entry that is not an id"},
        {"cfg_decoder_id", "{\"tokenizer_class\": \"CLIPTokenizer\", \"added_tokens_decoder\": {\"5\": {\"content\": \"!\"}}}",
         "gives id 5 to '!'", "an added_tokens_decoder id the vocabulary contradicts"},
        {"cfg_no_eos", "{\"tokenizer_class\": \"CLIPTokenizer\", \"eos_token\": null}", "needs a eos_token that names a token",
         "a CLIP config whose eos_token is null"},
        {"cfg_list", "{\"tokenizer_class\": \"CLIPTokenizer\", \"additional_special_tokens\": 7}", "not a list",
         "additional_special_tokens that is not a list"},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        d = new_dir(cfgs[i].name);
        link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
        link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
        put_text(d, "tokenizer_config.json", cfgs[i].cfg);
        expect_load_error(d, cfgs[i].needle, cfgs[i].what);
    }
    d = new_dir("cfg_many"); /* thousands of special tokens: refused, not scanned for minutes */
    size_t cap = 64 + 20 * 5000, k2 = 0;
    char *many = malloc(cap);
    k2 += (size_t)snprintf(many + k2, cap - k2, "{\"tokenizer_class\": \"CLIPTokenizer\", \"additional_special_tokens\": [");
    for (int i = 0; i < 5000; i++)
        k2 += (size_t)snprintf(many + k2, cap - k2, "%s\"<t%d>\"", i ? ", " : "", i);
    snprintf(many + k2, cap - k2, "]}");
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
    put_text(d, "tokenizer_config.json", many);
    free(many);
    expect_load_error(d, "more than 1024 special and added tokens are not supported", "5000 additional special tokens");
    d = new_dir("map_trunc");
    link_file(d, "vocab.json", CLIP_DIR "/vocab.json");
    link_file(d, "merges.txt", CLIP_DIR "/merges.txt");
    put_text(d, "special_tokens_map.json", "{\"pad_token\": {");
    expect_load_error(d, "special_tokens_map.json: invalid JSON", "a truncated special_tokens_map.json");
    free(vocab);
    free(merges);
}

static void test_padded_args(const col_tokenizer *clip)
{
    int32_t ids[LEN];
    size_t nt = 7;
    col_err err = {0};
    TL_OK(col_tok_encode_padded(clip, "a cat", 5, 1, ids, &nt, &err) == COL_EINVAL && strstr(err.msg, "no room") &&
              nt == 0,
          "a length of 1 leaves no room: %s", err.msg);
    TL_OK(col_tok_encode_padded(clip, "a cat", 5, LEN, NULL, NULL, &err) == COL_EINVAL, "no output array: %s", err.msg);
    bool ok = col_tok_encode_padded(clip, "a photo of a cat", 16, 2, ids, &nt, &err) == COL_OK &&
              ids[0] == col_tok_bos_id(clip) && ids[1] == col_tok_eos_id(clip) && nt == 5;
    TL_OK(ok, "a length of 2: BOS, EOS, and the untruncated count 5");
    col_tokenizer *gpt2 = NULL;
    if (col_tok_load(GPT2_DIR, &gpt2, &err) == COL_OK) {
        TL_OK(col_tok_pad_id(gpt2) == -1 && col_tok_max_length(gpt2) == 0, "GPT-2 without a config: no pad, no length");
        TL_OK(col_tok_encode_padded(gpt2, "hi", 2, 8, ids, &nt, &err) == COL_EINVAL && strstr(err.msg, "no pad token"),
              "padding without a pad token: %s", err.msg);
        col_tok_free(gpt2);
    }
}

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_clip_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        TL_OK(false, "a temporary directory");
        return tl_done();
    }
    for (int k = 0; k < NCFG; k++)
        test_config(k);
    col_tokenizer *clip = NULL;
    col_err err = {0};
    if (col_tok_load(CLIP_DIR, &clip, &err) == COL_OK) {
        test_normalize(clip);
        test_invalid_utf8(clip);
        test_giant(clip);
        test_padded_args(clip);
        col_tok_free(clip);
    } else {
        TL_OK(false, "the bundled CLIP tokenizer loads: %s", err.msg);
    }
    test_bad_files();
    rm_tree(tmp_root);
    return tl_done();
}
