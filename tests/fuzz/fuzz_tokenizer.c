/* fuzz_tokenizer.c - libFuzzer harness for the tokenizers.
 *
 * The first byte b picks the mode:
 *   b & 3 == 3   the whole input is a tokenizer.json: load it; if it loads,
 *                encode the input itself as text and decode the ids
 *   else         the rest of the input is text for the bundled tokenizer
 *                b & 3 (gpt2, llama2, llama3), encoded with flags
 *                (b >> 2) & 3 (COL_TOK_ADD_SPECIAL, COL_TOK_PARSE_SPECIAL)
 *                and decoded back; without PARSE_SPECIAL the text must come
 *                back byte for byte (LLaMA-2: unless it holds '▁'). The
 *                input's bytes are also decoded as raw ids.
 * So a seed file starting with '{' is a tokenizer.json. Any crash, leak, UB,
 * hang or broken round trip is a bug. Seeds: tests/fuzz/corpus_tokenizer/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#ifndef COL_SRC_ASSET_DIR
#define COL_SRC_ASSET_DIR "assets"
#endif

static col_tokenizer *bundled[3];

static void load_bundled(void)
{
    static const char *const paths[3] = {COL_SRC_ASSET_DIR "/tokenizers/gpt2", COL_SRC_ASSET_DIR "/tokenizers/llama2",
                                         COL_SRC_ASSET_DIR "/tokenizers/llama3"};
    for (int k = 0; k < 3; k++) {
        col_err err = {0};
        if (!bundled[k] && col_tok_load(paths[k], &bundled[k], &err) != COL_OK)
            abort(); /* the harness needs the bundled files */
    }
}

/* encode + decode; abort on what must not happen */
static void run(const col_tokenizer *t, const char *text, size_t len, unsigned flags, bool roundtrip)
{
    int32_t *ids = NULL;
    size_t n = 0;
    col_err err = {0};
    if (col_tok_encode_ex(t, text, len, flags, &ids, &n, &err) != COL_OK) {
        if (ids || n || err.code == COL_OK || roundtrip)
            abort(); /* the bundled tokenizers encode any bytes */
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= col_tok_vocab_size(t))
            abort();
    char *back = NULL;
    size_t blen = 0;
    if (col_tok_decode(t, ids, n, true, &back, &blen, &err) != COL_OK)
        abort(); /* ids from encode always decode */
    if (roundtrip && (blen != len || memcmp(back, text, len) != 0))
        abort();
    free(back);
    if (col_tok_decode(t, ids, n, false, &back, &blen, &err) != COL_OK)
        abort();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if ((data[0] & 3) == 3) {
        col_tokenizer *t = NULL;
        col_err err = {0};
        if (col_tok_from_json((const char *)data, size, &t, &err) != COL_OK) {
            if (t || err.code == COL_OK || !memchr(err.msg, '\0', sizeof err.msg) || strchr(err.msg, '\n'))
                abort(); /* a failure must leave no tokenizer and one line */
            return 0;
        }
        run(t, (const char *)data, size < 4096 ? size : 4096, COL_TOK_ADD_SPECIAL | COL_TOK_PARSE_SPECIAL, false);
        (void)col_tok_token_id(t, "<s>");
        col_tok_free(t);
        return 0;
    }
    load_bundled();
    const col_tokenizer *t = bundled[data[0] & 3];
    unsigned flags = (data[0] >> 2) & 3u;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    bool rt = !(flags & COL_TOK_PARSE_SPECIAL) && !((data[0] & 3) == 1 && memmem(text, len, "\xE2\x96\x81", 3));
    run(t, text, len, flags, rt);

    /* the bytes as ids: in range or not, decode must answer cleanly */
    size_t n = len / 4;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (ids) {
        memcpy(ids, text, n * sizeof *ids);
        char *out = NULL;
        size_t olen;
        col_err err = {0};
        if (col_tok_decode(t, ids, n, data[0] & 16, &out, &olen, &err) != COL_OK && (out || err.code == COL_OK))
            abort();
        free(out);
        free(ids);
    }
    /* and as a token name */
    char *name = malloc(len + 1);
    if (name) {
        memcpy(name, text, len);
        name[len] = '\0';
        int32_t id = col_tok_token_id(t, name);
        if (id < -1 || id >= col_tok_vocab_size(t))
            abort();
        free(name);
    }
    return 0;
}
