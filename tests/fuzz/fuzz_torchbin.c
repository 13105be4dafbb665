/* fuzz_torchbin.c - libFuzzer harness for the PyTorch checkpoint reader.
 *
 * An input starting with "PK" is a whole torch.save zip. Anything else is
 * taken as a data.pkl pickle and wrapped (with libarchive) in a torch-like
 * zip whose storages archive/data/0 .. archive/data/15 hold 64 bytes each,
 * so that mutations reach the pickle machine and the tensor checks instead
 * of stopping at the zip's CRCs. Either way col_pt_parse reads it, then every
 * byte of every tensor is read so that ASan sees any view escaping its
 * storage, and the reader's promises are checked.
 * Seeds (tests/fuzz/corpus_torchbin/, by tools/refgen/make_torch_fixtures.py):
 * small checkpoints, the malicious one, and bare pickles (*.pkl).
 */
#include <archive.h>
#include <archive_entry.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

static void add(struct archive *a, const char *name, const void *data, size_t len)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)len);
    archive_write_header(a, e);
    archive_write_data(a, data, len);
    archive_entry_free(e);
}

/* A zip holding the pickle and 16 storages of 64 bytes. */
static uint8_t *wrap(const uint8_t *pkl, size_t len, size_t *out_len)
{
    size_t cap = len + 16 * 64 + 16384;
    uint8_t *buf = malloc(cap);
    uint8_t storage[64];
    for (int i = 0; i < 64; i++)
        storage[i] = (uint8_t)(i * 37 + 11);
    struct archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    archive_write_zip_set_compression_store(a);
    archive_write_open_memory(a, buf, cap, out_len);
    add(a, "archive/data.pkl", pkl, len);
    add(a, "archive/byteorder", "little", 6);
    for (int k = 0; k < 16; k++) {
        char name[32];
        snprintf(name, sizeof name, "archive/data/%d", k);
        add(a, name, storage, sizeof storage);
    }
    archive_write_close(a);
    archive_write_free(a);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *zip = NULL;
    size_t zlen = size;
    if (!(size >= 2 && data[0] == 'P' && data[1] == 'K')) {
        if (size > (1u << 20))
            return 0;
        zip = wrap(data, size, &zlen);
        data = zip;
    }
    col_pt_file *f = NULL;
    col_err err = {0};
    if (col_pt_parse(data, zlen, "fuzz.bin", &f, &err) != COL_OK) {
        if (err.code == COL_OK || err.msg[0] == '\0')
            abort();   /* every failure carries a message */
        free(zip);
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
    (void)sum;
    col_pt_close(f);
    free(zip);
    return 0;
}
