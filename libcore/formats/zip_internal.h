/* zip_internal.h - a zip archive in memory, read through libarchive: what the
 * PyTorch (torchbin.c) and NumPy (npz.c) readers share. Not installed. */
#ifndef COL_ZIP_INTERNAL_H
#define COL_ZIP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define COL_ZIP_MAX_NAME 4096   /* bytes in an entry name */

typedef struct {
    char *name;           /* malloc'd */
    const uint8_t *data;  /* len bytes: in the input (stored entries), in copy, or a static empty buffer */
    size_t len;
    uint8_t *copy;        /* malloc'd when the bytes had to be copied out (deflated, or not aligned), else NULL;
                             col_zip_free frees it unless the caller took it (set it to NULL) */
    size_t order;         /* position among the entries read, in archive order */
} col_zip_entry;

/* Decides what to do with an entry: 1 reads it, 0 skips it, anything else
 * stops the read with the error the filter put in err. name is NULL when
 * libarchive cannot give the entry's name; regular is false for directories,
 * links, ... */
typedef int (*col_zip_filter)(const char *name, bool regular, void *user, col_err *err);

/* Reads the entries filter accepts from the zip image in[0..len) (file names
 * it in messages). An entry's bytes are used in place when libarchive hands
 * them out as one block of the input whose address is a multiple of align
 * (1: any), else they are copied. Decompressed bytes are bounded by
 * 8 * len + 1 MiB in all (a zip bomb stops with an error). Refuses a zip
 * whose end record is missing (truncated), corrupt entries (libarchive checks
 * each CRC), names longer than COL_ZIP_MAX_NAME and a name read twice.
 * On success *out holds *n entries sorted by name (strcmp; col_zip_find
 * searches them); on failure nothing is left to free.
 * drop_pages: in is a read-only mapping of a file; the whole pages of each
 * entry read in place leave this process's resident memory once its CRC is
 * checked (they come back from the file when read), so that reading the
 * archive never holds more than one entry resident. Never for heap memory. */
col_status col_zip_read(const uint8_t *in, size_t len, const char *file, size_t align, bool drop_pages,
                        col_zip_filter filter, void *user, col_zip_entry **out, size_t *n, col_err *err);
const col_zip_entry *col_zip_find(const col_zip_entry *e, size_t n, const char *name);
void col_zip_free(col_zip_entry *e, size_t n);

/* Calls visit with the name of each regular entry of the zip image
 * in[0..len), in archive order, without reading their data. False when
 * libarchive cannot list the archive (not a zip, truncated, ...). */
bool col_zip_names(const uint8_t *in, size_t len, void (*visit)(const char *name, void *user), void *user);

#endif
