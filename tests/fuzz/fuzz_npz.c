/* fuzz_npz.c - libFuzzer harness for the NumPy .npz reader (libcore/formats/npz.c, zipread.c).
 *
 * An input starting with "PK" is a whole .npz. Anything else is taken as one
 * .npy image and wrapped (with libarchive, stored) in a zip as
 * "alphafold/x//w.npy", so that mutations reach the .npy header parser and
 * the length checks instead of stopping at the zip's CRCs. Either way
 * col_npz_parse reads it (and col_npz_sniff looks at it); every byte of every
 * array is then read so that ASan sees any array escaping its entry, each is
 * converted with col_ckpt_read_f32, and the reader's promises are checked.
 * Seeds (tests/fuzz/corpus_npz/, by tools/refgen/make_npz_fixtures.py): a
 * small archive (stored and deflated entries) and bare .npy images.
 */
#include <archive.h>
#include <archive_entry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

/* A stored zip holding data as one .npy entry. */
static uint8_t *wrap(const uint8_t *npy, size_t len, size_t *out_len)
{
    size_t cap = len + 16384;
    uint8_t *buf = malloc(cap);
    struct archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    archive_write_zip_set_compression_store(a);
    archive_write_open_memory(a, buf, cap, out_len);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "alphafold/x//w.npy");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)len);
    archive_write_header(a, e);
    archive_write_data(a, npy, len);
    archive_entry_free(e);
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
    (void)col_npz_sniff(data, zlen);
    col_npz_file *f = NULL;
    col_err err = {0};
    if (col_npz_parse(data, zlen, "fuzz.npz", &f, &err) != COL_OK) {
        if (err.code == COL_OK || err.msg[0] == '\0' || !strstr(err.msg, "fuzz.npz") || strchr(err.msg, '\n'))
            abort();   /* every failure carries a one-line message naming the file */
        free(zip);
        return 0;
    }
    volatile unsigned sum = 0;
    for (int i = 0; i < col_npz_count(f); i++) {
        const col_ckpt_tensor *t = col_npz_get(f, i);
        size_t es = col_st_dtype_size(t->dtype);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (uint64_t)t->shape[d];
        if (t->ndim < 0 || t->ndim > COL_MAX_DIMS || es == 0 || t->nbytes != numel * es || !t->data || !t->name ||
            !t->name[0] || strcmp(t->file, "fuzz.npz"))
            abort();
        const uint8_t *b = t->data;
        for (size_t k = 0; k < t->nbytes; k++)
            sum += b[k];
        float *dst = malloc(numel * sizeof(float) + 1);
        if (!dst || col_ckpt_read_f32(t, t->ndim, t->shape, dst, &err) != COL_OK)
            abort();   /* what the reader accepted converts */
        for (uint64_t k = 0; k < numel; k++)
            sum += (unsigned)(dst[k] == dst[k]);
        free(dst);
        sum += (unsigned)strlen(t->name);
    }
    (void)sum;
    col_npz_close(f);
    free(zip);
    return 0;
}
