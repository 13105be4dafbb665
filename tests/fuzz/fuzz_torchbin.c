/* fuzz_torchbin.c - libFuzzer harness for the PyTorch checkpoint reader.
 *
 * Parses the input as a torch.save zip (col_pt_parse), then reads every byte
 * of every tensor so that ASan sees any view that escapes its storage, and
 * checks the invariants the reader promises. Seeds: tests/fuzz/corpus_torchbin/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_pt_file *f = NULL;
    col_err err = {0};
    if (col_pt_parse(data, size, "fuzz.bin", &f, &err) != COL_OK) {
        if (err.code == COL_OK || err.msg[0] == '\0')
            abort();   /* every failure carries a message */
        return 0;
    }
    volatile unsigned sum = 0;
    for (int i = 0; i < col_pt_count(f); i++) {
        const col_ckpt_tensor *t = col_pt_get(f, i);
        size_t es = col_st_dtype_size(t->dtype);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= t->shape[d];
        if (t->ndim < 0 || t->ndim > COL_MAX_DIMS || es == 0 || t->nbytes != (size_t)numel * es || !t->data ||
            !t->name || !t->name[0] || (uintptr_t)t->data % es)
            abort();
        const uint8_t *b = t->data;
        for (size_t k = 0; k < t->nbytes; k++)
            sum += b[k];
        sum += (unsigned)strlen(t->name);
    }
    col_pt_close(f);
    return 0;
}
