#include "textio.h"

#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

col_status col_read_file(const char *path, size_t max_bytes, char **data, size_t *len, col_err *err)
{
    *data = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return col_err_set(err, COL_EIO, "%s is a directory, not a data file", path);
    if (access(path, R_OK) != 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    struct archive *a = archive_read_new();
    if (!a)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    archive_read_support_filter_all(a);
    archive_read_support_format_raw(a);
    archive_read_support_format_empty(a);
    col_status st = COL_OK;
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        /* readable, so what failed is the compressed stream's header */
        st = col_err_set(err, COL_EFORMAT, "%s is corrupt or truncated: %s", path, archive_error_string(a));
        archive_read_free(a);
        return st;
    }
    struct archive_entry *entry;
    int r = archive_read_next_header(a, &entry);
    size_t cap = 0, n = 0;
    char *buf = NULL;
    if (r == ARCHIVE_EOF) {
        /* empty file */
    } else if (r != ARCHIVE_OK) {
        st = col_err_set(err, COL_EFORMAT, "%s is corrupt or truncated: %s", path, archive_error_string(a));
    } else {
        for (;;) {
            if (cap - n < (1 << 16)) {
                size_t ncap = cap ? cap * 2 : (size_t)(sb.st_size > 0 ? sb.st_size : 1) + (1 << 16);
                char *nb = realloc(buf, ncap + 1);
                if (!nb) {
                    st = col_err_set(err, COL_ENOMEM, "out of memory reading %s (%zu bytes so far)", path, n);
                    break;
                }
                buf = nb;
                cap = ncap;
            }
            la_ssize_t got = archive_read_data(a, buf + n, cap - n);
            if (got < 0) {
                st = col_err_set(err, COL_EFORMAT, "%s is corrupt or truncated: %s", path, archive_error_string(a));
                break;
            }
            if (got == 0)
                break;
            n += (size_t)got;
            if (max_bytes && n > max_bytes) {
                st = col_err_set(err, COL_EFORMAT, "%s is larger than the %zu-byte limit", path, max_bytes);
                break;
            }
        }
    }
    archive_read_free(a);
    if (st != COL_OK) {
        free(buf);
        return st;
    }
    if (!buf) {
        buf = malloc(1);
        if (!buf)
            return col_err_set(err, COL_ENOMEM, "out of memory reading %s", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return COL_OK;
}

col_status col_write_file_atomic(const char *path, const void *data, size_t len, col_err *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp)
        return col_err_set(err, COL_ENOMEM, "out of memory writing %s", path);
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        col_status st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    const char *p = data;
    size_t left = len;
    col_status st = COL_OK;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (st == COL_OK && fsync(fd) != 0)
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
    if (close(fd) != 0 && st == COL_OK)
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st == COL_OK && rename(tmp, path) != 0)
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st != COL_OK) {
        unlink(tmp);
    } else {
        /* make the rename itself durable: fsync the directory */
        char *slash = strrchr(tmp, '/');
        if (slash)
            slash[slash == tmp ? 1 : 0] = '\0';
        int dfd = open(slash ? tmp : ".", O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    free(tmp);
    return st;
}
