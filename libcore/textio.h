/* textio.h - read a whole data file, plain or compressed (.gz, .xz, .zst,
 * .bz2, ...: whatever libarchive's filters recognise from the content). */
#ifndef COL_TEXTIO_H
#define COL_TEXTIO_H

#include <stddef.h>

#include "status.h"

/* Reads path into a newly allocated, NUL-terminated buffer (*data, *len not
 * counting the NUL). Fails with COL_EIO / COL_EFORMAT and a message naming
 * the file when it is missing, unreadable, corrupt, or larger than max_bytes
 * (0 = no limit) once decompressed. Free *data with free(). */
col_status col_read_file(const char *path, size_t max_bytes, char **data, size_t *len, col_err *err);

/* Writes data to path atomically: a temporary file in the same directory,
 * fsync, then rename; on any failure the old file (if any) is untouched. */
col_status col_write_file_atomic(const char *path, const void *data, size_t len, col_err *err);

#endif
