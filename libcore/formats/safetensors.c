/* safetensors.c - safetensors reader (untrusted input); the writer is st_writer.c.
 *
 * Format: u64 little-endian header length N, N bytes of UTF-8 JSON, then
 * the data area. The JSON is an object mapping each tensor name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets
 * relative to the start of the data area) plus an optional
 * "__metadata__": {string: string}.
 *
 * The reader checks every field before use. It is slightly more lenient than
 * the Python library in two harmless ways: gaps between tensor ranges and
 * bytes after the last tensor are allowed (the Python library requires the
 * ranges to tile the data area exactly). Overlapping ranges are refused.
 * Tensors are reported in file order: by data_offsets (begin, then end),
 * ties (empty tensors) by name.
 *
 * Tensor data may be unaligned in files from other writers; readers of
 * col_ckpt_tensor.data must use memcpy-style loads (col_ckpt_read_f32 does).
 * col_st_open maps the file: like every mmap reader, it cannot guard against
 * another process truncating the file while it is open (SIGBUS).
 */
#include "checkpoint.h"
#include "filemap.h"
#include "st_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads and writes little-endian data in place: big-endian hosts are not supported"
#endif

#define ST_MAX_HEADER 100000000u   /* the Python library's limit */
#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact doubles */

struct col_st_file {
    char *name;                    /* path or caller's name, for messages */
    const unsigned char *base;     /* the whole image */
    size_t len;
    void *map;                     /* non-NULL when col_st_open mmapped it */
    size_t map_len;
    int n;
    col_ckpt_tensor *t;            /* file order; names owned (strdup) */
    int nmeta;
    char **meta;                   /* key, value, key, value, ... (owned) */
};

static const char *const st_dtype_names[COL_ST_DTYPE_COUNT] = {
    [COL_ST_F64] = "F64", [COL_ST_F32] = "F32", [COL_ST_F16] = "F16", [COL_ST_BF16] = "BF16",
    [COL_ST_I64] = "I64", [COL_ST_I32] = "I32", [COL_ST_I16] = "I16", [COL_ST_I8] = "I8",
    [COL_ST_U8] = "U8", [COL_ST_BOOL] = "BOOL",
};
static const unsigned char st_dtype_sizes[COL_ST_DTYPE_COUNT] = {
    [COL_ST_F64] = 8, [COL_ST_F32] = 4, [COL_ST_F16] = 2, [COL_ST_BF16] = 2, [COL_ST_I64] = 8,
    [COL_ST_I32] = 4, [COL_ST_I16] = 2, [COL_ST_I8] = 1, [COL_ST_U8] = 1, [COL_ST_BOOL] = 1,
};

size_t col_st_dtype_size(col_st_dtype dt)
{
    return (unsigned)dt < COL_ST_DTYPE_COUNT ? st_dtype_sizes[dt] : 0;
}

const char *col_st_dtype_name(col_st_dtype dt)
{
    return (unsigned)dt < COL_ST_DTYPE_COUNT ? st_dtype_names[dt] : "?";
}

/* ---- small helpers ---- */

/* Copies a name from an untrusted file into buf for a message: at most ~100
 * characters, control characters shown as '?'. */
static const char *show(const char *s, char *buf, size_t n)
{
    size_t i = 0;
    for (; s[i] && i + 4 < n && i < 100; i++)
        buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    if (s[i] && i + 4 <= n) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

/* Returns the offset of the first byte that is not valid UTF-8, or len (st_internal.h). */
size_t col_st_utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t k;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, min = 0x80;
            c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, min = 0x800;
            c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, min = 0x10000;
            c &= 0x07;
        } else {
            return i;
        }
        if (len - i <= k)
            return i;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return i;
            c = (c << 6) | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return i;
        i += k + 1;
    }
    return len;
}

/* A JSON number that is a non-negative integer exactly representable. */
static bool json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_EXACT) || (double)(uint64_t)d != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static void shape_str(const col_ckpt_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* ---- reader ---- */

typedef struct {
    uint64_t begin, end;
} st_range;

/* Sort key for file order: tensors and their ranges are sorted together. */
typedef struct {
    col_ckpt_tensor t;
    st_range r;
} st_entry;

static int cmp_file_order(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->r.begin != y->r.begin)
        return x->r.begin < y->r.begin ? -1 : 1;
    if (x->r.end != y->r.end)
        return x->r.end < y->r.end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static int cmp_name_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Parses one tensor entry of the header into e (name already set). */
static col_status parse_entry(const col_st_file *f, const cJSON *item, uint64_t data_len, st_entry *e, col_err *err)
{
    char nb[112];
    const char *nm = show(e->t.name, nb, sizeof nb);
    if (!cJSON_IsObject(item))
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' is not a JSON object", f->name, nm);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dt))
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has no \"dtype\" string", f->name, nm);
    int dtype = -1;
    for (int i = 0; i < COL_ST_DTYPE_COUNT; i++)
        if (strcmp(dt->valuestring, st_dtype_names[i]) == 0)
            dtype = i;
    if (dtype < 0) {
        char db[112];
        return col_err_set(err, COL_EFORMAT,
                           "%s: tensor '%s' has unsupported dtype \"%s\" (expected F64, F32, F16, BF16, I64, I32, "
                           "I16, I8, U8 or BOOL)", f->name, nm, show(dt->valuestring, db, sizeof db));
    }
    e->t.dtype = (col_st_dtype)dtype;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape))
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has no \"shape\" array", f->name, nm);
    int nd = cJSON_GetArraySize(shape);
    if (nd > COL_MAX_DIMS)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has %d dimensions (at most %d supported)", f->name,
                           nm, nd, COL_MAX_DIMS);
    e->t.ndim = nd;
    uint64_t nbytes = st_dtype_sizes[dtype];
    bool overflow = false;
    int d = 0;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
        uint64_t v;
        if (!json_uint(s, &v))
            return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has shape entry %d that is not a non-negative "
                               "integer", f->name, nm, d);
        e->t.shape[d] = (int64_t)v;
        overflow |= __builtin_mul_overflow(nbytes, v, &nbytes);
    }
    char sb[128];
    shape_str(&e->t, sb, sizeof sb);
    if (overflow || nbytes > (uint64_t)INT64_MAX || nbytes > SIZE_MAX)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has shape %s of %s whose size overflows", f->name,
                           nm, sb, st_dtype_names[dtype]);

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    uint64_t b = 0, en = 0;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &b) ||
        !json_uint(off->child->next, &en))
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' needs \"data_offsets\": [begin, end] with two "
                           "non-negative integers", f->name, nm);
    if (en < b)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] with end before begin",
                           f->name, nm, (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] beyond the end of the "
                           "data (%llu bytes)", f->name, nm, (unsigned long long)b, (unsigned long long)en,
                           (unsigned long long)data_len);
    if (en - b != nbytes)
        return col_err_set(err, COL_EFORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] but shape %s of %s "
                           "needs %llu bytes", f->name, nm, (unsigned long long)b, (unsigned long long)en, sb,
                           st_dtype_names[dtype], (unsigned long long)nbytes);
    e->r.begin = b;
    e->r.end = en;
    e->t.nbytes = (size_t)nbytes;
    return COL_OK;
}

static col_status parse_metadata(col_st_file *f, const cJSON *m, col_err *err)
{
    if (!cJSON_IsObject(m))
        return col_err_set(err, COL_EFORMAT, "%s: \"__metadata__\" is not a JSON object", f->name);
    int n = cJSON_GetArraySize(m);
    f->meta = calloc((size_t)n * 2 + 1, sizeof *f->meta);
    if (!f->meta)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory reading the metadata", f->name);
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        char nb[112];
        if (!cJSON_IsString(kv))
            return col_err_set(err, COL_EFORMAT, "%s: metadata entry '%s' is not a string", f->name,
                               show(kv->string, nb, sizeof nb));
        f->meta[2 * f->nmeta] = strdup(kv->string);
        f->meta[2 * f->nmeta + 1] = strdup(kv->valuestring);
        f->nmeta++;
        if (!f->meta[2 * f->nmeta - 2] || !f->meta[2 * f->nmeta - 1])
            return col_err_set(err, COL_ENOMEM, "%s: out of memory reading the metadata", f->name);
    }
    return COL_OK;
}

/* Parses the header of f (base/len set) and fills f->t, f->meta. */
static col_status parse_header(col_st_file *f, col_err *err)
{
    if (f->len < 8)
        return col_err_set(err, COL_EFORMAT, "%s: too short for a safetensors file (%zu bytes, the header length "
                           "alone takes 8)", f->name, f->len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | f->base[i];
    if (hlen > ST_MAX_HEADER)
        return col_err_set(err, COL_EFORMAT, "%s: header length %llu is absurd (limit %u bytes); not a "
                           "safetensors file?", f->name, (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > f->len - 8)
        return col_err_set(err, COL_EFORMAT, "%s: header length %llu exceeds the file size (%zu bytes); truncated "
                           "file?", f->name, (unsigned long long)hlen, f->len);
    const unsigned char *hdr = f->base + 8;
    size_t bad = col_st_utf8_invalid_at(hdr, (size_t)hlen);
    if (bad < hlen)
        return col_err_set(err, COL_EFORMAT, "%s: header is not valid UTF-8 (at byte %zu)", f->name, bad);
    if (memchr(hdr, 0, (size_t)hlen))
        return col_err_set(err, COL_EFORMAT, "%s: header contains a NUL byte", f->name);

    /* cJSON reads a NUL-terminated copy (older cJSON over-reads unterminated input) */
    char *text = malloc((size_t)hlen + 1);
    if (!text)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory for a %llu-byte header", f->name,
                           (unsigned long long)hlen);
    memcpy(text, hdr, (size_t)hlen);
    text[hlen] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    col_status st = COL_OK;
    st_entry *ents = NULL;
    const char **names = NULL;
    if (!root) {
        size_t at = end && end >= text && end <= text + hlen ? (size_t)(end - text) : 0;
        st = col_err_set(err, COL_EFORMAT, "%s: header is not valid JSON (near byte %zu)", f->name, at);
        goto done;
    }
    for (const char *p = end; *p; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = col_err_set(err, COL_EFORMAT, "%s: header has data after the JSON object (at byte %zu)", f->name,
                             (size_t)(p - text));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        st = col_err_set(err, COL_EFORMAT, "%s: header is not a JSON object", f->name);
        goto done;
    }

    int count = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        count++;
    ents = calloc((size_t)count + 1, sizeof *ents);
    names = calloc((size_t)count + 1, sizeof *names);
    if (!ents || !names) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory for %d tensors", f->name, count);
        goto done;
    }
    uint64_t data_len = f->len - 8 - hlen;
    int n = 0;
    bool have_meta = false;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (have_meta) {
                st = col_err_set(err, COL_EFORMAT, "%s: \"__metadata__\" appears twice", f->name);
                goto done;
            }
            have_meta = true;
            if ((st = parse_metadata(f, it, err)) != COL_OK)
                goto done;
            continue;
        }
        st_entry *e = &ents[n];
        e->t.name = it->string;
        e->t.file = f->name;
        if ((st = parse_entry(f, it, data_len, e, err)) != COL_OK)
            goto done;
        names[n++] = it->string;
    }

    /* duplicate names (the JSON parser keeps both) */
    qsort(names, (size_t)n, sizeof *names, cmp_name_ptr);
    for (int i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            char nb[112];
            st = col_err_set(err, COL_EFORMAT, "%s: tensor '%s' appears twice in the header", f->name,
                             show(names[i], nb, sizeof nb));
            goto done;
        }
    }

    /* file order, then overlapping ranges (empty tensors overlap nothing) */
    qsort(ents, (size_t)n, sizeof *ents, cmp_file_order);
    int prev = -1;
    for (int i = 0; i < n; i++) {
        if (ents[i].r.begin == ents[i].r.end)
            continue;
        if (prev >= 0 && ents[i].r.begin < ents[prev].r.end) {
            char nb[112], pb[112];
            st = col_err_set(err, COL_EFORMAT, "%s: tensor '%s' data_offsets [%llu, %llu] overlap tensor '%s' "
                             "[%llu, %llu]", f->name, show(ents[i].t.name, nb, sizeof nb),
                             (unsigned long long)ents[i].r.begin, (unsigned long long)ents[i].r.end,
                             show(ents[prev].t.name, pb, sizeof pb), (unsigned long long)ents[prev].r.begin,
                             (unsigned long long)ents[prev].r.end);
            goto done;
        }
        prev = i;
    }

    f->t = calloc((size_t)n + 1, sizeof *f->t);
    if (!f->t) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory for %d tensors", f->name, n);
        goto done;
    }
    const unsigned char *data = f->base + 8 + hlen;
    for (int i = 0; i < n; i++) {
        col_ckpt_tensor *t = &f->t[i];
        *t = ents[i].t;
        t->data = data + ents[i].r.begin;
        t->mapped = f->map != NULL;
        t->name = strdup(ents[i].t.name);
        if (!t->name) {
            st = col_err_set(err, COL_ENOMEM, "%s: out of memory for tensor names", f->name);
            goto done;
        }
        f->n = i + 1;
    }
done:
    free(names);
    free(ents);
    cJSON_Delete(root);
    free(text);
    return st;
}

static col_st_file *st_new(const char *name)
{
    col_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->name = strdup(name ? name : "safetensors");
    if (!f->name) {
        free(f);
        return NULL;
    }
    return f;
}

/* parses the header of a file whose bytes are in place; *out on success */
static col_status finish_open(col_st_file *f, col_st_file **out, col_err *err)
{
    col_status st = parse_header(f, err);
    if (st != COL_OK) {
        col_st_close(f);
        return st;
    }
    *out = f;
    return COL_OK;
}

col_status col_st_parse(const void *data, size_t len, const char *name, col_st_file **out, col_err *err)
{
    *out = NULL;
    if (!data && len)
        return col_err_set(err, COL_EINVAL, "col_st_parse: NULL data with length %zu", len);
    col_st_file *f = st_new(name);
    if (!f)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", name ? name : "safetensors");
    f->base = data;
    f->len = len;
    return finish_open(f, out, err);
}

col_status col_st_open(const char *path, col_st_file **out, col_err *err)
{
    *out = NULL;
    void *map = NULL;
    size_t len = 0;
    col_status ms = col_file_map(path, "a safetensors file", &map, &len, err);
    if (ms != COL_OK)
        return ms;
    col_st_file *f = st_new(path);
    if (!f) {
        col_file_unmap(map, len);
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    }
    f->map = map;
    f->map_len = len;
    f->base = map;
    f->len = len;
    return finish_open(f, out, err);
}

int col_st_count(const col_st_file *f)
{
    return f ? f->n : 0;
}

const col_ckpt_tensor *col_st_get(const col_st_file *f, int i)
{
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const char *col_st_metadata(const col_st_file *f, const char *key)
{
    for (int i = 0; f && i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

void col_st_close(col_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        free((char *)f->t[i].name);
    free(f->t);
    if (f->meta)
        for (int i = 0; i < 2 * f->nmeta; i++)
            free(f->meta[i]);
    free(f->meta);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->name);
    free(f);
}
