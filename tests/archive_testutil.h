/* archive_testutil.h - compressed test files, written with libarchive's raw
 * writer (what the readers under test must undo). */
#ifndef COL_TESTS_ARCHIVE_TESTUTIL_H
#define COL_TESTS_ARCHIVE_TESTUTIL_H

#include <archive.h>
#include <archive_entry.h>
#include <stddef.h>

/* compresses data into path with the given filter (archive_write_add_filter_gzip, ...); -1 on failure */
static inline int write_compressed(const char *path, const void *data, size_t len, int (*add_filter)(struct archive *))
{
    struct archive *a = archive_write_new();
    add_filter(a);
    archive_write_set_format_raw(a);
    if (archive_write_open_filename(a, path) != ARCHIVE_OK) {
        archive_write_free(a);
        return -1;
    }
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "data");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, (la_int64_t)len);
    archive_write_header(a, e);
    archive_write_data(a, data, len);
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
    return 0;
}

#endif
