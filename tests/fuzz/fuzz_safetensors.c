/* fuzz_safetensors.c - libFuzzer harness for the safetensors parser.
 *
 * Parses the input as a safetensors image, then converts every tensor of
 * fewer than 1M elements to f32 (at its own shape, and once at a wrong
 * shape). Any crash, leak, UB or hang is a bug in libcore/formats/safetensors.c or
 * checkpoint.c. Seeds: tests/fuzz/corpus_safetensors/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_st_file *f = NULL;
    col_err err = {0};
    if (col_st_parse(data, size, "fuzz.safetensors", &f, &err) != COL_OK) {
        if (f || err.code == COL_OK || !memchr(err.msg, '\0', sizeof err.msg))
            abort(); /* a failure must leave no file and one message */
        return 0;
    }
    (void)col_st_metadata(f, "format");
    for (int i = 0; i < col_st_count(f); i++) {
        const col_ckpt_tensor *t = col_st_get(f, i);
        if (!t || t->ndim < 0 || t->ndim > COL_MAX_DIMS || t->nbytes > size ||
            (t->nbytes && ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->nbytes > data + size)))
            abort(); /* the parser let through a descriptor outside the image */
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= t->shape[d];
        if (numel >= (1 << 20))
            continue;
        float *dst = malloc((size_t)(numel ? numel : 1) * sizeof *dst);
        if (!dst)
            continue;
        if (col_ckpt_read_f32(t, t->ndim, t->shape, dst, &err) != COL_OK)
            abort(); /* a parsed tensor must convert at its own shape */
        int64_t wrong[COL_MAX_DIMS + 1] = {numel + 1};
        if (col_ckpt_read_f32(t, 1, wrong, dst, &err) != COL_ESHAPE)
            abort();
        free(dst);
    }
    col_st_close(f);
    return 0;
}
