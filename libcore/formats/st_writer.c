/* st_writer.c - the safetensors writer: f32 tensors, laid out as the
 * Python library lays them out, written atomically, whole (col_st_write_f32)
 * or tensor by tensor and piece by piece from the caller's buffers
 * (col_st_writer_*), so that a file far larger than memory can be written
 * from a bounded buffer.
 *
 * Every offset is known before any data: the header (tensors sorted by name,
 * each with its shape and [begin, end) in the data area) goes first, then
 * each piece is written at its place with pwrite, in whatever order the
 * caller produces them. The file is a temporary one beside the path until
 * every byte of every tensor has been written; then fsync, rename, fsync of
 * the directory (col_atomic_* in textio.h). The bytes are the same whatever
 * the order of the pieces.
 */
#include "checkpoint.h"
#include "st_internal.h"
#include "textio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct col_st_writer {
    char *path;
    col_atomic_file f;
    uint64_t data0;     /* file offset of the data area: 8 + header length */
    int n;
    uint64_t *off;      /* per tensor (the caller's index): its begin in the data area */
    uint64_t *size;     /* its bytes */
    uint64_t *written;  /* bytes of it written so far */
    char **name;        /* its name (for messages) */
    bool failed;        /* a write failed: end removes the file */
};

/* Writes s as a JSON string literal (s is valid UTF-8; escape as serde_json does). */
static void sb_json_str(col_strbuf *b, const char *s)
{
    col_strbuf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            col_strbuf_put(b, esc, 2);
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b"
                                : c == '\f' ? "\\f" : NULL;
            if (named)
                col_strbuf_puts(b, named);
            else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                col_strbuf_puts(b, esc);
            }
        } else {
            col_strbuf_put(b, (const char *)&c, 1);
        }
    }
    col_strbuf_put(b, "\"", 1);
}

static int cmp_out_by_name(const void *a, const void *b)
{
    return strcmp((*(const col_st_out *const *)a)->name, (*(const col_st_out *const *)b)->name);
}

static bool valid_utf8(const char *s) { return col_st_utf8_invalid_at((const unsigned char *)s, strlen(s)) == strlen(s); }

/* Checks one tensor (sorted[i]; the one before it has been checked) and sets *bytes. */
static col_status check_tensor(const char *path, const col_st_out *const *sorted, int i, bool need_data,
                               uint64_t *bytes, col_err *err)
{
    const col_st_out *t = sorted[i];
    if (t->name[0] == '\0' || strcmp(t->name, "__metadata__") == 0)
        return col_err_set(err, COL_EINVAL, "writing %s: tensor name '%s' is not allowed", path, t->name);
    if (!valid_utf8(t->name))
        return col_err_set(err, COL_EINVAL, "writing %s: a tensor name is not valid UTF-8", path);
    if (i > 0 && strcmp(sorted[i - 1]->name, t->name) == 0)
        return col_err_set(err, COL_EINVAL, "writing %s: tensor '%s' given twice", path, t->name);
    if (t->ndim < 0 || t->ndim > COL_MAX_DIMS)
        return col_err_set(err, COL_EINVAL, "writing %s: tensor '%s' has ndim %d (0..%d allowed)", path, t->name,
                           t->ndim, COL_MAX_DIMS);
    uint64_t nb = t->u8 ? 1 : 4;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || __builtin_mul_overflow(nb, (uint64_t)t->shape[d], &nb) || nb > SIZE_MAX / 2)
            return col_err_set(err, COL_EINVAL, "writing %s: tensor '%s' has a bad shape (dim %d is %lld)", path,
                               t->name, d, (long long)t->shape[d]);
    }
    if (need_data && nb > 0 && !t->data)
        return col_err_set(err, COL_EINVAL, "writing %s: tensor '%s' has no data", path, t->name);
    *bytes = nb;
    return COL_OK;
}

static col_status check_metadata(const char *path, const char *const *metadata, col_err *err)
{
    for (int i = 0; metadata && metadata[i]; i += 2) {
        if (!metadata[i + 1])
            return col_err_set(err, COL_EINVAL, "writing %s: metadata key '%s' has no value", path, metadata[i]);
        for (int j = 0; j < i; j += 2)
            if (strcmp(metadata[i], metadata[j]) == 0)
                return col_err_set(err, COL_EINVAL, "writing %s: metadata key '%s' given twice", path, metadata[i]);
        if (!valid_utf8(metadata[i]) || !valid_utf8(metadata[i + 1]))
            return col_err_set(err, COL_EINVAL, "writing %s: metadata entry %d is not valid UTF-8", path, i / 2);
    }
    return COL_OK;
}

/* The header: {"__metadata__":{...},"name":{"dtype":"F32","shape":[..],"data_offsets":[b,e]},...} in name
 * order, padded with spaces so that the data begin at a multiple of align bytes (8: the Python library's) */
static void build_header(col_strbuf *hdr, const col_st_out *const *sorted, const uint64_t *sizes, int n,
                         const char *const *metadata, uint64_t align)
{
    col_strbuf_puts(hdr, "{");
    if (metadata && metadata[0]) {
        col_strbuf_puts(hdr, "\"__metadata__\":{");
        for (int i = 0; metadata[i]; i += 2) {
            if (i)
                col_strbuf_puts(hdr, ",");
            sb_json_str(hdr, metadata[i]);
            col_strbuf_puts(hdr, ":");
            sb_json_str(hdr, metadata[i + 1]);
        }
        col_strbuf_puts(hdr, n ? "}," : "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        char num[64];
        if (i)
            col_strbuf_puts(hdr, ",");
        sb_json_str(hdr, sorted[i]->name);
        col_strbuf_puts(hdr, sorted[i]->u8 ? ":{\"dtype\":\"U8\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < sorted[i]->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)sorted[i]->shape[d]);
            col_strbuf_puts(hdr, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + sizes[i]));
        col_strbuf_puts(hdr, num);
        off += sizes[i];
    }
    col_strbuf_puts(hdr, "}");
    while (!hdr->oom && (8 + (uint64_t)hdr->len) % align != 0)
        col_strbuf_puts(hdr, " ");
}

static void writer_free(col_st_writer *w)
{
    if (!w)
        return;
    for (int i = 0; w->name && i < w->n; i++)
        free(w->name[i]);
    free(w->name);
    free(w->path);
    free(w->off);
    free(w->size);
    free(w->written);
    free(w);
}

static col_st_writer *writer_new(const char *path, int n)
{
    col_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->path = strdup(path);
    w->n = n;
    w->off = calloc((size_t)n + 1, sizeof *w->off);
    w->size = calloc((size_t)n + 1, sizeof *w->size);
    w->written = calloc((size_t)n + 1, sizeof *w->written);
    w->name = calloc((size_t)n + 1, sizeof *w->name);
    w->f.fd = -1;
    if (!w->path || !w->off || !w->size || !w->written || !w->name) {
        writer_free(w);
        return NULL;
    }
    return w;
}

/* Checks the tensors (sorted by name), lays them out in w, builds the header. */
static col_status lay_out(col_st_writer *w, const col_st_out *tensors, const char *const *metadata, bool need_data,
                          uint64_t align, col_strbuf *hdr, col_err *err)
{
    int n = w->n;
    const col_st_out **sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    uint64_t *sizes = malloc(((size_t)n + 1) * sizeof *sizes);
    col_status st = COL_OK;
    if (!sorted || !sizes)
        st = col_err_set(err, COL_ENOMEM, "out of memory writing %s", w->path);
    for (int i = 0; st == COL_OK && i < n; i++) {
        sorted[i] = &tensors[i];
        if (!tensors[i].name)
            st = col_err_set(err, COL_EINVAL, "writing %s: tensor %d has no name", w->path, i);
    }
    /* the Python library's order: by dtype alignment (all F32 here), then name */
    if (st == COL_OK)
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_out_by_name);
    for (int i = 0; st == COL_OK && i < n; i++)
        st = check_tensor(w->path, sorted, i, need_data, &sizes[i], err);
    if (st == COL_OK)
        st = check_metadata(w->path, metadata, err);
    uint64_t off = 0;
    for (int i = 0; st == COL_OK && i < n; i++) {
        size_t k = (size_t)(sorted[i] - tensors);
        w->off[k] = off;
        w->size[k] = sizes[i];
        off += sizes[i];
        if (!(w->name[k] = strdup(sorted[i]->name)))
            st = col_err_set(err, COL_ENOMEM, "out of memory writing %s", w->path);
    }
    if (st == COL_OK) {
        build_header(hdr, sorted, sizes, n, metadata, align);
        if (hdr->oom)
            st = col_err_set(err, COL_ENOMEM, "out of memory writing %s", w->path);
    }
    free(sizes);
    free(sorted);
    return st;
}

static col_status begin(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                        bool need_data, size_t align, col_st_writer **out, col_err *err)
{
    *out = NULL;
    if (!path || n < 0 || (n > 0 && !tensors) || align == 0 || align % 8 != 0 || align > 4096)
        return col_err_set(err, COL_EINVAL, "%s: bad arguments (path %s, %d tensors)",
                           need_data ? "col_st_write_f32" : "col_st_writer_begin", path ? path : "NULL", n);
    col_st_writer *w = writer_new(path, n);
    if (!w)
        return col_err_set(err, COL_ENOMEM, "out of memory writing %s", path);
    col_strbuf hdr = {0};
    col_status st = lay_out(w, tensors, metadata, need_data, align, &hdr, err);
    if (st == COL_OK)
        st = col_atomic_begin(path, &w->f, err);
    if (st != COL_OK) {
        free(hdr.p);
        writer_free(w);
        return st;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    w->data0 = 8 + (uint64_t)hdr.len;
    bool ok = col_write_all(w->f.fd, len8, 8) && col_write_all(w->f.fd, hdr.p, hdr.len);
    free(hdr.p);
    if (!ok) {
        st = col_err_set(err, COL_EIO, "cannot write %s: %s", path, strerror(errno));
        col_st_writer_end(w, false, NULL);
        return st;
    }
    *out = w;
    return COL_OK;
}

col_status col_st_writer_begin(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                               col_st_writer **out, col_err *err)
{
    return begin(path, tensors, n, metadata, false, 8, out, err);
}

col_status col_st_writer_begin_aligned(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                                       size_t align, col_st_writer **out, col_err *err)
{
    return begin(path, tensors, n, metadata, false, align, out, err);
}

static bool pwrite_all(int fd, const void *data, size_t len, uint64_t at)
{
    const char *p = data;
    while (len > 0) {
        ssize_t k = pwrite(fd, p, len < ((size_t)1 << 30) ? len : ((size_t)1 << 30), (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        len -= (size_t)k;
        at += (uint64_t)k;
    }
    return true;
}

col_status col_st_writer_put(col_st_writer *w, int i, uint64_t off, const void *data, size_t len, col_err *err)
{
    if (i < 0 || i >= w->n || off > w->size[i] || len > w->size[i] - off || (len && !data))
        return col_err_set(err, COL_EINVAL, "writing %s: bytes [%llu, +%zu) of tensor %d are outside it", w->path,
                           (unsigned long long)off, len, i);
    if (w->failed)
        return col_err_set(err, COL_EIO, "writing %s: an earlier write failed", w->path);
    if (!pwrite_all(w->f.fd, data, len, w->data0 + w->off[i] + off)) {
        w->failed = true;
        return col_err_set(err, COL_EIO, "cannot write %s: %s", w->path, strerror(errno));
    }
    w->written[i] += len;
    return COL_OK;
}

col_status col_st_writer_end(col_st_writer *w, bool ok, col_err *err)
{
    if (!w)
        return COL_OK;
    col_status st = COL_OK;
    for (int i = 0; ok && !w->failed && i < w->n && st == COL_OK; i++)
        if (w->written[i] != w->size[i])
            st = col_err_set(err, COL_EINVAL, "writing %s: tensor '%s' got %llu of its %llu bytes", w->path,
                             w->name[i], (unsigned long long)w->written[i], (unsigned long long)w->size[i]);
    if (ok && !w->failed && st == COL_OK) {
        st = col_atomic_end(&w->f, w->path, true, err);
    } else { /* the caller's or an earlier error stands: the temporary file goes */
        col_err ignored = {0};
        col_atomic_end(&w->f, w->path, false, &ignored);
        if (st == COL_OK && ok)
            st = col_err_set(err, COL_EIO, "writing %s: an earlier write failed", w->path);
    }
    writer_free(w);
    return st;
}

typedef struct {
    uint64_t off;
    int i;
} placed;

static int cmp_placed(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    return x->off != y->off ? (x->off < y->off ? -1 : 1) : x->i - y->i;
}

static col_status write_all(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                            size_t align, col_err *err)
{
    col_st_writer *w = NULL;
    col_status st = begin(path, tensors, n, metadata, true, align, &w, err);
    if (st != COL_OK)
        return st;
    placed *order = malloc(((size_t)n + 1) * sizeof *order); /* file order: the writes are sequential */
    if (!order)
        st = col_err_set(err, COL_ENOMEM, "out of memory writing %s", path);
    for (int i = 0; order && i < n; i++)
        order[i] = (placed){w->off[i], i};
    if (order)
        qsort(order, (size_t)n, sizeof *order, cmp_placed);
    for (int k = 0; st == COL_OK && k < n; k++)
        st = col_st_writer_put(w, order[k].i, 0, tensors[order[k].i].data, (size_t)w->size[order[k].i], err);
    free(order);
    if (st != COL_OK) {
        col_st_writer_end(w, false, NULL);
        return st;
    }
    return col_st_writer_end(w, true, err);
}

col_status col_st_write_f32(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                            col_err *err)
{
    return write_all(path, tensors, n, metadata, 8, err);
}

col_status col_st_write_aligned(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                                size_t align, col_err *err)
{
    return write_all(path, tensors, n, metadata, align, err);
}
