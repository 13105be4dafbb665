/* filemap.h - a whole file mapped read-only, for the readers of untrusted model files (safetensors, GGUF):
 * a directory, a FIFO, a device, an empty file or one too large to map is refused with a message naming the
 * path and what was expected, never waited on. */
#ifndef COL_FILEMAP_H
#define COL_FILEMAP_H

#include <stddef.h>

#include "status.h"

/* Maps path (kind names the format for messages: "a safetensors file"). COL_EIO when it cannot be opened,
 * is not a regular file or is empty, or the mapping fails. */
col_status col_file_map(const char *path, const char *kind, void **map, size_t *len, col_err *err);
void col_file_unmap(void *map, size_t len);
/* Advice on a read-only file mapping, for the whole pages inside [p, p + len):
 * release lets them leave resident memory (they stay in the page cache; a
 * later read maps them back from the file); populate maps those of
 * [p, p + len) now, in one call, instead of page fault by page fault (Linux
 * 5.14's MADV_POPULATE_READ; an older kernel ignores it). */
void col_file_release(const void *p, size_t len);
void col_file_populate(const void *p, size_t len);

#endif
