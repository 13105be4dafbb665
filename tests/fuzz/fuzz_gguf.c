/* fuzz_gguf.c - libFuzzer harness for the GGUF reader (libcore/formats/gguf.c).
 *
 * Parses the input as a GGUF image (col_gguf_parse), then reads everything the reader lets through: every
 * metadata value (arrays element by element, arrays of arrays, the typed lookups of each key) and every
 * byte of every tensor, so that ASan sees anything escaping the image; builds the tokenizer the metadata
 * describes (libcore/text/tok_gguf.c), when it describes one; checks the reader's promises (a
 * failure leaves no file and one message naming it; tensors lie inside the image, aligned). Seeds:
 * tests/fuzz/corpus_gguf/ (the fixtures of tools/refgen/make_gguf_fixtures.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_gguf.h"

static volatile unsigned sink;

static void touch_value(const col_gguf_value *v, int depth)
{
    int64_t i;
    double d;
    if (v->type == COL_GGUF_ARRAY) {
        if (depth > 20)
            abort(); /* the reader bounds nesting */
        for (uint64_t k = 0; k < v->count && k < 4096; k++) {
            col_gguf_value e;
            if (!col_gguf_array_elem(v, k, &e))
                abort(); /* every element of an accepted array is there */
            touch_value(&e, depth + 1);
        }
        return;
    }
    if (v->type == COL_GGUF_STRING) {
        for (uint64_t k = 0; k < v->count; k++)
            sink += v->data[k];
        return;
    }
    if (col_gguf_scalar_int(v, &i))
        sink += (unsigned)i;
    if (col_gguf_scalar_num(v, &d))
        sink += (unsigned)(d == d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_gguf *g = NULL;
    col_err err = {0};
    if (col_gguf_parse(data, size, "fuzz.gguf", &g, &err) != COL_OK) {
        if (g || err.code == COL_OK || !memchr(err.msg, '\0', sizeof err.msg) || !strstr(err.msg, "fuzz.gguf"))
            abort();
        return 0;
    }
    for (int64_t i = 0; i < col_gguf_kv_count(g); i++) {
        col_gguf_value v;
        const char *key = col_gguf_key(g, i);
        if (!key || !col_gguf_kv_value(g, i, &v) || col_gguf_find_key(g, key) != i)
            abort();
        touch_value(&v, 0);
        uint32_t u32;
        int64_t i64;
        double d;
        const char *s;
        size_t n;
        col_gguf_value a;
        (void)col_gguf_get_u32(g, key, &u32, &err);
        (void)col_gguf_get_int(g, key, &i64, &err);
        (void)col_gguf_get_num(g, key, &d, &err);
        (void)col_gguf_get_str(g, key, &s, &n, &err);
        if (col_gguf_get_array(g, key, COL_GGUF_STRING, &a, &err) == COL_OK)
            for (uint64_t k = 0; k < a.count; k++)
                if (!col_gguf_array_str(&a, k, &s, &n) || (n && !s))
                    abort();
    }
    for (int64_t i = 0; i < col_gguf_tensor_count(g); i++) {
        const col_gguf_tensor *t = col_gguf_tensor_at(g, i);
        if (!t || col_gguf_tensor_find(g, t->name) != t || t->n_dims < 0 || t->n_dims > COL_GGUF_MAX_DIMS)
            abort();
        const void *p;
        uint64_t nb;
        if (col_gguf_tensor_data(g, t, &p, &nb, &err) != COL_OK)
            continue;
        const uint8_t *b = p;
        if (nb > size || (nb && (b < data || b + nb > data + size)) ||
            (col_gguf_data_offset(g) + t->offset) % col_gguf_alignment(g))
            abort();
        for (uint64_t k = 0; k < nb; k++)
            sink += b[k];
    }
    col_tokenizer *tok = NULL;
    if (col_gguf_find_key(g, "tokenizer.ggml.model") >= 0 && col_tok_from_gguf(g, &tok, &err) == COL_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (col_tok_encode(tok, "a b\xe2\x96\x81" "c", 8, true, &ids, &n, &err) == COL_OK)
            sink += (unsigned)n;
        free(ids);
    }
    col_tok_free(tok);
    col_gguf_close(g);
    return 0;
}
