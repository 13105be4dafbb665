/* zipread.c - a zip archive in memory read through libarchive (zip_internal.h).
 *
 * The seekable zip reader reads the central directory, so entry names and
 * sizes come from it; a stored entry read from memory comes back as one
 * block of the input, which the callers may reference in place.
 */
#include "filemap.h"
#include "zip_internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t zip_empty_data[1];

typedef struct {
    char s[200];
} zip_why;

/* libarchive's message on one line (it may end in '\n'), cut to fit. */
static zip_why archive_why(struct archive *a)
{
    zip_why w;
    const char *m = archive_error_string(a);
    snprintf(w.s, sizeof w.s, "%s", m && m[0] ? m : "unknown error");
    for (char *p = w.s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    for (size_t n = strlen(w.s); n > 0 && w.s[n - 1] == ' ';)
        w.s[--n] = '\0';
    return w;
}

/* Whether a name holds a control character (it would break a message's line). */
static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

static col_status zip_nomem(const char *file, col_err *err)
{
    return col_err_set(err, COL_ENOMEM, "%s: out of memory", file);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const col_zip_entry *)a)->name, ((const col_zip_entry *)b)->name);
}

const col_zip_entry *col_zip_find(const col_zip_entry *e, size_t n, const char *name)
{
    col_zip_entry key = {.name = (char *)name};
    return n ? bsearch(&key, e, n, sizeof key, entry_cmp) : NULL;
}

void col_zip_free(col_zip_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++) {
        free(e[i].name);
        free(e[i].copy);
    }
    free(e);
}

/* Reads the current entry's bytes: in place when libarchive hands out one
 * aligned block of the input (a stored entry), else into a copy. */
static col_status read_entry(struct archive *a, const uint8_t *in, size_t in_len, size_t align, const char *file,
                             col_zip_entry *e, size_t *budget, col_err *err)
{
    const uint8_t *first = NULL;
    uint8_t *copy = NULL;
    size_t got = 0, cap = 0;
    for (;;) {
        const void *buf;
        size_t sz;
        la_int64_t off;
        int r = archive_read_data_block(a, &buf, &sz, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            free(copy);
            return col_err_set(err, COL_EFORMAT, "%s: zip entry '%s' is corrupt or truncated: %s", file, e->name,
                               archive_why(a).s);
        }
        if (off < 0 || (uint64_t)off != got) {
            free(copy);
            return col_err_set(err, COL_EFORMAT, "%s: zip entry '%s' has holes", file, e->name);
        }
        if (sz == 0)
            continue;
        if (sz > *budget) {
            free(copy);
            return col_err_set(err, COL_EFORMAT,
                               "%s: zip entry '%s' unpacks to more than %zu bytes, too much for a %zu-byte file "
                               "(zip bomb?)", file, e->name, got + *budget, in_len);
        }
        *budget -= sz;
        const uint8_t *b = buf;
        uintptr_t at = (uintptr_t)b, lo = (uintptr_t)in;
        bool in_place = at >= lo && sz <= in_len && at - lo <= in_len - sz && at % align == 0;
        if (got == 0 && in_place) {
            first = b;
            got = sz;
            continue;
        }
        if (got + sz > cap) {
            size_t ncap = cap ? cap : 4096;
            while (ncap < got + sz)
                ncap *= 2;
            uint8_t *nc = realloc(copy, ncap);
            if (!nc) {
                free(copy);
                return zip_nomem(file, err);
            }
            if (first)
                memcpy(nc, first, got);
            first = NULL;
            copy = nc;
            cap = ncap;
        }
        memcpy(copy + got, b, sz);
        got += sz;
    }
    e->len = got;
    e->copy = copy;
    e->data = copy ? copy : first ? first : (const uint8_t *)zip_empty_data;
    return COL_OK;
}

/* The zip's end-of-central-directory record: a truncated file loses it. */
static bool has_end_record(const uint8_t *in, size_t len)
{
    if (len < 22)
        return false;
    size_t lo = len - 22 > 65535 ? len - 22 - 65535 : 0;
    for (size_t i = len - 22 + 1; i-- > lo;)
        if (!memcmp(in + i, "PK\5\6", 4) && i + 22 + (in[i + 20] | (size_t)in[i + 21] << 8) <= len)
            return true;
    return false;
}

col_status col_zip_read(const uint8_t *in, size_t len, const char *file, size_t align, bool drop_pages,
                        col_zip_filter filter, void *user, col_zip_entry **out, size_t *n, col_err *err)
{
    *out = NULL;
    *n = 0;
    if (!has_end_record(in, len))
        return col_err_set(err, COL_EFORMAT, "%s: the zip's end record is missing: the file is truncated or not a "
                           "zip archive", file);
    struct archive *a = archive_read_new();
    if (!a)
        return zip_nomem(file, err);
    col_status st = COL_OK;
    col_zip_entry *es = NULL;
    size_t ne = 0, cap = 0;
    if (align == 0)
        align = 1;
    /* stored entries never exceed the input; deflated weights shrink little */
    size_t budget = len > (SIZE_MAX - (1u << 20)) / 8 ? SIZE_MAX : 8 * len + (1u << 20);
    archive_read_support_format_zip_seekable(a);   /* reads the central directory */
    if (archive_read_open_memory(a, in, len) != ARCHIVE_OK) {
        st = col_err_set(err, COL_EFORMAT, "%s: not a readable zip archive: %s", file, archive_why(a).s);
        goto done;
    }
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            st = col_err_set(err, COL_EFORMAT, "%s: corrupt or truncated zip: %s", file, archive_why(a).s);
            goto done;
        }
        const char *name = archive_entry_pathname(ae);
        int want = filter(name, archive_entry_filetype(ae) == AE_IFREG, user, err);
        if (want == 0)
            continue;   /* libarchive skips the data on the next header */
        if (want != 1) {
            st = err && err->code != COL_OK ? err->code : COL_EFORMAT;
            goto done;
        }
        if (!name || strlen(name) > COL_ZIP_MAX_NAME || has_control(name)) {
            st = col_err_set(err, COL_EFORMAT, "%s: zip entry name %s", file,
                             !name ? "that cannot be read" : has_control(name) ? "holding control characters"
                                                                              : "longer than 4096 bytes");
            goto done;
        }
        if (ne == cap) {
            size_t ncap = cap ? 2 * cap : 32;
            col_zip_entry *ne2 = realloc(es, ncap * sizeof *ne2);
            if (!ne2) {
                st = zip_nomem(file, err);
                goto done;
            }
            es = ne2;
            cap = ncap;
        }
        col_zip_entry *e = &es[ne];
        memset(e, 0, sizeof *e);
        e->order = ne;
        e->name = strdup(name);
        if (!e->name) {
            st = zip_nomem(file, err);
            goto done;
        }
        ne++;
        if ((st = read_entry(a, in, len, align, file, e, &budget, err)) != COL_OK)
            goto done;
        if (drop_pages && !e->copy && e->len)
            col_file_release(e->data, e->len);
    }
    if (ne > 1)
        qsort(es, ne, sizeof *es, entry_cmp);
    for (size_t i = 1; i < ne; i++)
        if (!strcmp(es[i - 1].name, es[i].name)) {
            st = col_err_set(err, COL_EFORMAT, "%s: zip entry '%s' appears twice", file, es[i].name);
            goto done;
        }
done:
    archive_read_free(a);
    if (st != COL_OK) {
        col_zip_free(es, ne);
        return st;
    }
    *out = es;
    *n = ne;
    return COL_OK;
}

bool col_zip_names(const uint8_t *in, size_t len, void (*visit)(const char *name, void *user), void *user)
{
    if (!has_end_record(in, len))
        return false;
    struct archive *a = archive_read_new();
    if (!a)
        return false;
    bool ok = false;
    archive_read_support_format_zip_seekable(a);
    if (archive_read_open_memory(a, in, len) == ARCHIVE_OK) {
        for (;;) {
            struct archive_entry *ae;
            int r = archive_read_next_header(a, &ae);
            if (r == ARCHIVE_EOF) {
                ok = true;
                break;
            }
            if (r != ARCHIVE_OK)
                break;
            const char *name = archive_entry_pathname(ae);
            if (name && archive_entry_filetype(ae) == AE_IFREG)
                visit(name, user);
        }
    }
    archive_read_free(a);
    return ok;
}
