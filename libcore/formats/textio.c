#include "textio.h"

#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The decoders this reader enables: libarchive's own, in-process ones. A
 * filter that libarchive would run as an external program from $PATH
 * (lzop, lrzip, grzip: it says so with ARCHIVE_WARN) is never enabled, nor
 * are uuencode and the rest: a data or config file must not start a program. */
typedef int (*filter_fn)(struct archive *);
static const struct {
    const char *name;
    filter_fn enable;
} decoders[] = {
    {"gzip", archive_read_support_filter_gzip},
    {"bzip2", archive_read_support_filter_bzip2},
    {"xz", archive_read_support_filter_xz},
    {"lzma", archive_read_support_filter_lzma},
    {"zstd", archive_read_support_filter_zstd},
};

/* true when libarchive decodes this filter in-process (probed on a scratch reader) */
static bool builtin(filter_fn f)
{
    struct archive *probe = archive_read_new();
    if (!probe)
        return false;
    bool ok = f(probe) == ARCHIVE_OK;
    archive_read_free(probe);
    return ok;
}

/* Compressed or encoded contents, by their first bytes; "decoder" names the
 * entry of decoders[] that reads it, NULL when none does. */
static const struct {
    const char *what, *decoder;
    const char *magic;
    size_t len;
} kinds[] = {
    {"gzip-compressed", "gzip", "\x1f\x8b", 2},
    {"bzip2-compressed", "bzip2", "BZh", 3},
    {"xz-compressed", "xz", "\xfd" "7zXZ\0", 6},
    {"zstd-compressed", "zstd", "\x28\xb5\x2f\xfd", 4},
    {"lzop-compressed", NULL, "\x89LZO\0\r\n\x1a\n", 9},
    {"lrzip-compressed", NULL, "LRZI", 4},
    {"grzip-compressed", NULL, "GRZipII", 7},
    {"lzip-compressed", NULL, "LZIP", 4},
    {"lz4-compressed", NULL, "\x04\x22\x4d\x18", 4},
    {"compress(1)-compressed (.Z)", NULL, "\x1f\x9d", 2},
};

/* a uuencode header: "begin" or "begin-base64", a space, an octal mode of
 * three or four digits, a space (text that merely starts with "begin " is text) */
static bool uuencode_header(const unsigned char *h, size_t n)
{
    size_t i = 0;
    if (n >= 13 && memcmp(h, "begin-base64 ", 13) == 0)
        i = 13;
    else if (n >= 6 && memcmp(h, "begin ", 6) == 0)
        i = 6;
    else
        return false;
    size_t d = 0;
    while (i + d < n && h[i + d] >= '0' && h[i + d] <= '7')
        d++;
    return (d == 3 || d == 4) && i + d < n && h[i + d] == ' ';
}

static bool decoder_enabled(const char *name)
{
    for (size_t i = 0; i < sizeof decoders / sizeof decoders[0]; i++)
        if (strcmp(decoders[i].name, name) == 0)
            return builtin(decoders[i].enable);
    return false;
}

/* COL_EFORMAT when path's first bytes say it is compressed or encoded in a way
 * this reader does not decode (rather than reading it as text) */
static col_status check_kind(const char *path, col_err *err)
{
    unsigned char head[24];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    if (got < 0)
        return col_err_set(err, COL_EIO, "cannot read %s: %s", path, strerror(errno));
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if ((size_t)got < kinds[i].len || memcmp(head, kinds[i].magic, kinds[i].len) != 0)
            continue;
        if (kinds[i].decoder && decoder_enabled(kinds[i].decoder))
            return COL_OK;
        return col_err_set(err, COL_EFORMAT,
                           "%s is %s, which colossal does not read (it reads plain, gzip, bzip2, xz and zstd files); "
                           "decompress it first", path, kinds[i].what);
    }
    if (uuencode_header(head, (size_t)got))
        return col_err_set(err, COL_EFORMAT, "%s is uuencoded, which colossal does not decode; decode it first", path);
    return COL_OK;
}

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
    col_status kst = check_kind(path, err);
    if (kst != COL_OK)
        return kst;
    struct archive *a = archive_read_new();
    if (!a)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    for (size_t i = 0; i < sizeof decoders / sizeof decoders[0]; i++)
        if (builtin(decoders[i].enable))
            decoders[i].enable(a);
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
                st = col_err_set(err, COL_ENOMEM, "%s is larger than the %zu-byte limit once decompressed (%s)",
                                 path, max_bytes, "its contents are held in memory");
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

col_status col_atomic_begin(const char *path, col_atomic_file *f, col_err *err)
{
    size_t plen = strlen(path);
    f->fd = -1;
    f->tmp = malloc(plen + 16);
    if (!f->tmp)
        return col_err_set(err, COL_ENOMEM, "out of memory writing %s", path);
    snprintf(f->tmp, plen + 16, "%s.tmpXXXXXX", path);
    f->fd = mkstemp(f->tmp);
    if (f->fd < 0) {
        col_status st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
        free(f->tmp);
        f->tmp = NULL;
        return st;
    }
    fchmod(f->fd, 0644); /* mkstemp makes 0600; the result is an ordinary file */
    return COL_OK;
}

bool col_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len < ((size_t)1 << 30) ? len : ((size_t)1 << 30));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
    }
    return true;
}

col_status col_atomic_end(col_atomic_file *f, const char *path, bool ok, col_err *err)
{
    col_status st = COL_OK;
    if (!ok || fsync(f->fd) != 0)
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
    if (close(f->fd) != 0 && st == COL_OK)
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st == COL_OK && rename(f->tmp, path) != 0)
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st != COL_OK) {
        unlink(f->tmp);
    } else {
        /* make the rename itself durable: fsync the directory */
        char *slash = strrchr(f->tmp, '/');
        if (slash)
            slash[slash == f->tmp ? 1 : 0] = '\0';
        int dfd = open(slash ? f->tmp : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    free(f->tmp);
    f->tmp = NULL;
    f->fd = -1;
    return st;
}

col_status col_write_file_atomic(const char *path, const void *data, size_t len, col_err *err)
{
    col_atomic_file f;
    col_status st = col_atomic_begin(path, &f, err);
    if (st != COL_OK)
        return st;
    bool ok = col_write_all(f.fd, data, len);
    return col_atomic_end(&f, path, ok, err);
}

void col_strbuf_put(col_strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void col_strbuf_puts(col_strbuf *b, const char *s) { col_strbuf_put(b, s, strlen(s)); }
