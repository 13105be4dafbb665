/* textio.h - read a whole data file, plain or compressed (gzip, bzip2, xz,
 * zstd, recognised from the content by libarchive's in-process decoders;
 * never a filter that runs an external program). */
#ifndef COL_TEXTIO_H
#define COL_TEXTIO_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

/* Reads path into a newly allocated, NUL-terminated buffer (*data, *len not
 * counting the NUL). Fails with COL_EIO / COL_EFORMAT and a message naming
 * the file when it is missing, unreadable or corrupt, and with COL_ENOMEM
 * when it is larger than max_bytes (0 = no limit) once decompressed (reading
 * stops there: a small compressed file that expands without end costs no more); COL_EFORMAT too for contents compressed or
 * encoded in a way it does not decode (lzop, lrzip, lz4, .Z, uuencode, ...)
 * instead of reading them as text. Free *data with free(). */
col_status col_read_file(const char *path, size_t max_bytes, char **data, size_t *len, col_err *err);

/* Writes data to path atomically: a temporary file in the same directory,
 * fsync, then rename; on any failure the old file (if any) is untouched. */
col_status col_write_file_atomic(const char *path, const void *data, size_t len, col_err *err);

/* The steps of col_write_file_atomic, for writers that stream their output:
 * col_atomic_begin opens a new temporary file beside path (mode 0644);
 * col_write_all writes len bytes (retrying short writes); col_atomic_end
 * fsyncs and closes it and, if ok, renames it over path and fsyncs the
 * directory; otherwise, or if any step fails, it removes the temporary
 * file. It always frees tmp. */
typedef struct {
    int fd;
    char *tmp;
} col_atomic_file;
col_status col_atomic_begin(const char *path, col_atomic_file *f, col_err *err);
bool col_write_all(int fd, const void *data, size_t len);
col_status col_atomic_end(col_atomic_file *f, const char *path, bool ok, col_err *err);

/* A growing NUL-terminated text buffer. After an allocation failure oom is
 * set and further appends do nothing; free(p) when done. */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} col_strbuf;
void col_strbuf_put(col_strbuf *b, const char *s, size_t n);
void col_strbuf_puts(col_strbuf *b, const char *s);

#endif
