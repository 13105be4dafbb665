/* fuzz_clip_tokenizer.c - libFuzzer harness for the CLIP tokenizer, its
 * Unicode normalizers and the configuration files of tokenizer folders.
 *
 * The first byte b picks the mode:
 *   b & 1 == 0   the rest is text for the bundled CLIP tokenizer: encoded
 *                with flags (b >> 1) & 3, padded to 2 + (b >> 3) ids, and
 *                decoded; its NFC must be stable under NFC again
 *   b & 1 == 1   the rest is a tokenizer_config.json ((b >> 1) & 1: a
 *                special_tokens_map.json) beside a small CLIP-style vocab.json
 *                and merges.txt (written once, in TMPDIR): the folder is
 *                loaded; if it loads, a caption and the input itself are
 *                encoded, padded and decoded
 * A failure must leave no tokenizer and give one line; ids must lie in the
 * vocabulary; the padded form must be the post-processor's ids (CLIP: BOS,
 * EOS) around the first ids, then pads.
 * Any crash, leak, UB or hang is a bug. Seeds: tests/fuzz/corpus_clip_tokenizer/. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok_internal.h"
#include "tokenizer.h"

#ifndef COL_SRC_ASSET_DIR
#define COL_SRC_ASSET_DIR "assets"
#endif

static col_tokenizer *clip;
static char dir[256];

static void check_err(const col_err *e)
{
    if (e->code == COL_OK || !memchr(e->msg, '\0', sizeof e->msg) || strchr(e->msg, '\n'))
        abort(); /* a failure must give one line */
}

static void put(const char *name, const void *data, size_t len)
{
    char p[320];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        abort();
}

/* the 256 byte characters, the same with "</w>", a few merges, the two specials */
static void setup(void)
{
    col_err err = {0};
    if (col_tok_load(COL_SRC_ASSET_DIR "/tokenizers/clip", &clip, &err) != COL_OK)
        abort(); /* the harness needs the bundled files */
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_clip_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        abort();
    cJSON *v = cJSON_CreateObject();
    int id = 0;
    for (int eow = 0; eow < 2; eow++)
        for (unsigned b = 0; b < 256; b++) {
            uint32_t cp = col_bytelevel_cp(b);
            char s[8] = {(char)(cp < 0x80 ? cp : 0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
            snprintf(s + (cp < 0x80 ? 1 : 2), 6, "%s", eow ? "</w>" : "");
            cJSON_AddNumberToObject(v, s, id++);
        }
    static const char *const merged[] = {"ca", "cat</w>", "a</w>", "!</w>", "<|startoftext|>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof merged / sizeof merged[0]; i++)
        cJSON_AddNumberToObject(v, merged[i], id++);
    char *json = cJSON_PrintUnformatted(v);
    put("vocab.json", json, strlen(json));
    free(json);
    cJSON_Delete(v);
    static const char merges[] = "#version: 0.2\nc a\nca t</w>\n";
    put("merges.txt", merges, strlen(merges));
}

static void run(const col_tokenizer *t, const char *text, size_t len, unsigned flags, size_t length)
{
    int32_t *ids = NULL, padded[2 + 31];
    size_t n = 0, n_text = 0;
    col_err err = {0};
    if (col_tok_encode_ex(t, text, len, flags, &ids, &n, &err) != COL_OK)
        abort(); /* CLIP encodes any bytes */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= col_tok_vocab_size(t))
            abort();
    char *back = NULL;
    size_t blen;
    for (int skip = 0; skip < 2; skip++) {
        if (col_tok_decode(t, ids, n, skip, &back, &blen, &err) != COL_OK)
            abort(); /* ids from encode always decode */
        free(back);
    }
    free(ids);
    col_status st = col_tok_encode_padded(t, text, len, length, padded, &n_text, &err);
    if (st != COL_OK) {
        check_err(&err);
        if (col_tok_pad_id(t) >= 0 || st != COL_EINVAL)
            abort(); /* only a missing pad token may stop it */
        return;
    }
    size_t np = (size_t)t->n_prefix, ns = (size_t)t->n_suffix, k = n_text < length - np - ns ? n_text : length - np - ns;
    if (memcmp(padded, t->prefix_ids, np * sizeof *padded) != 0 ||
        memcmp(padded + np + k, t->suffix_ids, ns * sizeof *padded) != 0)
        abort(); /* the special ids around the first text ids */
    for (size_t i = np + k + ns; i < length; i++)
        if (padded[i] != col_tok_pad_id(t))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!clip)
        setup();
    if (size == 0)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if ((data[0] & 1) == 0) {
        run(clip, text, len, (data[0] >> 1) & 3u, 2 + (data[0] >> 3));
        col_tbuf a = {0}, b = {0};
        if (!col_uni_nfc(text, len, &a) || !col_uni_nfc(a.p, a.n, &b) || a.n != b.n || memcmp(a.p, b.p, a.n) != 0)
            abort(); /* NFC(NFC(x)) == NFC(x) */
        free(a.p);
        free(b.p);
        return 0;
    }
    put((data[0] & 2) ? "special_tokens_map.json" : "tokenizer_config.json", text, len);
    col_tokenizer *t = NULL;
    col_err err = {0};
    if (col_tok_load(dir, &t, &err) != COL_OK) {
        if (t)
            abort();
        check_err(&err);
    } else {
        static const char caption[] = "A cat!! <|endoftext|> ca\xcc\x81t \xff";
        run(t, caption, sizeof caption - 1, COL_TOK_ADD_SPECIAL | COL_TOK_PARSE_SPECIAL, 16);
        run(t, text, len < 4096 ? len : 4096, COL_TOK_PARSE_SPECIAL, 16);
        col_tok_free(t);
    }
    char p[320];
    snprintf(p, sizeof p, "%s/%s", dir, (data[0] & 2) ? "special_tokens_map.json" : "tokenizer_config.json");
    unlink(p);
    return 0;
}
