/* npz.c - NumPy .npz archives (np.savez, np.savez_compressed) read safely.
 *
 * An .npz is a zip of NAME.npy entries, one array each; NAME may hold '/'
 * (DeepMind's AlphaFold parameters: "alphafold/.../transition1//weights").
 * A .npy entry is
 *   "\x93NUMPY" major minor   magic and format version (1.0, 2.0 or 3.0)
 *   header length             u16 (1.0) or u32 (2.0, 3.0), little-endian
 *   header                    a Python dict literal, e.g.
 *                             {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 *                             padded with spaces and ended by '\n'
 *   data                      the array's bytes, exactly numel * itemsize
 * The header is parsed by hand, never evaluated: a dict with exactly the
 * keys 'descr', 'fortran_order' and 'shape' in any order, strings in single
 * or double quotes without escapes, True/False, a tuple of non-negative
 * integers (a one-element tuple needs its comma; versions 1.0 and 2.0 may
 * carry Python 2's 'L' suffix, which numpy drops too). Only little-endian,
 * C-ordered arrays of the dtypes col_st_dtype has are read.
 *
 * Stored entries are referenced in place (the file is memory-mapped by
 * col_npz_open, so a 350 MB parameter file is not read into the heap);
 * deflated ones are decompressed into a buffer each.
 */
#include "checkpoint.h"
#include "zip_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAX_HEADER 65536   /* bytes; numpy writes ~100 for a plain array */
#define NPZ_MAX_ARRAYS (1 << 24)

struct col_npz_file {
    char *name;
    col_ckpt_tensor *tensors;   /* in archive order */
    char **names;               /* the tensors' names (entry names less ".npy") */
    int n;
    col_zip_entry *zip;         /* the entries; hold the decompressed bytes */
    size_t nzip;
    void *map;
    size_t map_len;
};

static const uint64_t npz_empty_data[1];

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* ---- the .npy header ---- */

typedef struct {
    const char *file, *array;   /* for messages */
    const char *h;              /* the header text */
    size_t len, at;
    int version;                /* major */
    col_err *err;
} npy_hdr;

typedef struct {
    char descr[32];
    bool has_descr, has_fortran, has_shape, fortran;
    int ndim;
    int64_t shape[COL_MAX_DIMS];
} npy_info;

static col_status hdr_bad(npy_hdr *p, const char *what)
{
    return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s': the .npy header is not the dict numpy writes (%s at "
                       "byte %zu)", p->file, p->array, what, p->at);
}

static void hdr_ws(npy_hdr *p)
{
    while (p->at < p->len && (p->h[p->at] == ' ' || p->h[p->at] == '\t' || p->h[p->at] == '\n' || p->h[p->at] == '\r'))
        p->at++;
}

static bool hdr_eat(npy_hdr *p, char c)
{
    hdr_ws(p);
    if (p->at < p->len && p->h[p->at] == c) {
        p->at++;
        return true;
    }
    return false;
}

/* A quoted string without escapes into buf (cap bytes; longer strings are
 * cut, which no accepted value is). */
static col_status hdr_string(npy_hdr *p, char *buf, size_t cap)
{
    hdr_ws(p);
    if (p->at >= p->len || (p->h[p->at] != '\'' && p->h[p->at] != '"'))
        return hdr_bad(p, "a string was expected");
    char q = p->h[p->at++];
    size_t k = 0;
    for (;;) {
        if (p->at >= p->len)
            return hdr_bad(p, "unterminated string");
        char c = p->h[p->at++];
        if (c == q)
            break;
        if (c == '\\' || c == '\n' || (unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            return hdr_bad(p, "an escape or a character outside printable ASCII in a string");
        if (k + 1 < cap)
            buf[k++] = c;
    }
    buf[k] = '\0';
    return COL_OK;
}

static bool hdr_word(npy_hdr *p, const char *w)
{
    hdr_ws(p);
    size_t k = strlen(w);
    if (p->len - p->at < k || memcmp(p->h + p->at, w, k))
        return false;
    char next = p->at + k < p->len ? p->h[p->at + k] : ' ';
    if ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9') || next == '_')
        return false;
    p->at += k;
    return true;
}

/* (), (n,), (n, m), (n, m, ) ... */
static col_status hdr_shape(npy_hdr *p, npy_info *info)
{
    if (!hdr_eat(p, '('))
        return hdr_bad(p, "'shape' is not a tuple");
    info->ndim = 0;
    bool comma = false;
    for (;;) {
        if (hdr_eat(p, ')'))
            break;
        if (info->ndim > 0 && !comma)
            return hdr_bad(p, "',' or ')' expected in 'shape'");
        hdr_ws(p);
        if (p->at >= p->len || p->h[p->at] < '0' || p->h[p->at] > '9')
            return hdr_bad(p, "'shape' holds something other than a non-negative integer");
        if (p->h[p->at] == '0' && p->at + 1 < p->len && p->h[p->at + 1] >= '0' && p->h[p->at + 1] <= '9')
            return hdr_bad(p, "an integer with a leading zero");
        int64_t v = 0;
        while (p->at < p->len && p->h[p->at] >= '0' && p->h[p->at] <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s': a dimension in its .npy header is too "
                                   "large", p->file, p->array);
            v = 10 * v + (p->h[p->at++] - '0');
        }
        if (p->version < 3 && p->at < p->len && p->h[p->at] == 'L')
            p->at++;   /* Python 2's long, as numpy's own reader allows */
        if (info->ndim == COL_MAX_DIMS)
            return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s' has more than %d dimensions", p->file,
                               p->array, COL_MAX_DIMS);
        info->shape[info->ndim++] = v;
        comma = hdr_eat(p, ',');
    }
    if (info->ndim == 1 && !comma)
        return hdr_bad(p, "'shape' is a parenthesized integer, not a tuple");
    return COL_OK;
}

static col_status hdr_parse(npy_hdr *p, npy_info *info)
{
    col_status st;
    if (!hdr_eat(p, '{'))
        return hdr_bad(p, "'{' expected");
    for (;;) {
        if (hdr_eat(p, '}'))
            break;
        char key[64];
        if ((st = hdr_string(p, key, sizeof key)))
            return st;
        bool *seen = !strcmp(key, "descr") ? &info->has_descr : !strcmp(key, "fortran_order") ? &info->has_fortran
                     : !strcmp(key, "shape") ? &info->has_shape : NULL;
        if (!seen)
            return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s': .npy header key '%s' is not one of 'descr', "
                               "'fortran_order', 'shape'", p->file, p->array, key);
        if (*seen)
            return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s': .npy header key '%s' appears twice", p->file,
                               p->array, key);
        *seen = true;
        if (!hdr_eat(p, ':'))
            return hdr_bad(p, "':' expected");
        if (seen == &info->has_descr) {
            hdr_ws(p);
            if (p->at < p->len && p->h[p->at] == '[')
                return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s' is a structured array (its dtype is a "
                                   "list of fields); only plain numeric arrays are read", p->file, p->array);
            if ((st = hdr_string(p, info->descr, sizeof info->descr)))
                return st;
        } else if (seen == &info->has_fortran) {
            if (hdr_word(p, "True"))
                info->fortran = true;
            else if (hdr_word(p, "False"))
                info->fortran = false;
            else
                return hdr_bad(p, "'fortran_order' is not True or False");
        } else if ((st = hdr_shape(p, info))) {
            return st;
        }
        if (hdr_eat(p, '}'))
            break;
        if (!hdr_eat(p, ','))
            return hdr_bad(p, "',' or '}' expected");
    }
    hdr_ws(p);
    if (p->at != p->len)
        return hdr_bad(p, "text after the dict");
    const char *missing = !info->has_descr ? "descr" : !info->has_fortran ? "fortran_order"
                          : !info->has_shape ? "shape" : NULL;
    if (missing)
        return col_err_set(p->err, COL_EFORMAT, "%s: array '%.200s': its .npy header has no '%s'", p->file, p->array,
                           missing);
    return COL_OK;
}

/* The dtype of a descr numpy writes for a little-endian array, or -1. */
static int npy_dtype(const char *d)
{
    static const struct { const char *descr; col_st_dtype dt; } map[] = {
        {"<f8", COL_ST_F64}, {"<f4", COL_ST_F32}, {"<f2", COL_ST_F16}, {"<i8", COL_ST_I64}, {"<i4", COL_ST_I32},
        {"<i2", COL_ST_I16}, {"|i1", COL_ST_I8}, {"|u1", COL_ST_U8}, {"|b1", COL_ST_BOOL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(d, map[i].descr))
            return (int)map[i].dt;
    return -1;
}

static void dims_str(char *buf, size_t n, int nd, const int64_t *v)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (k < n)
        snprintf(buf + k, n - k, "%s)", nd == 1 ? "," : "");
}

/* One .npy image p[0..len) into t (t->name, t->file set by the caller). */
static col_status npy_parse(const char *file, const char *array, const uint8_t *p, size_t len, col_ckpt_tensor *t,
                            col_err *err)
{
    if (len < 6 || memcmp(p, "\x93NUMPY", 6))
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s' is not a .npy array (no \\x93NUMPY magic)", file,
                           array);
    if (len < 10)
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s': the .npy data is truncated (%zu bytes)", file, array,
                           len);
    unsigned major = p[6], minor = p[7];
    size_t hstart, hlen;
    if (major == 1 && minor == 0) {
        hstart = 10;
        hlen = p[8] | (size_t)p[9] << 8;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12)
            return col_err_set(err, COL_EFORMAT, "%s: array '%.200s': the .npy data is truncated (%zu bytes)", file,
                               array, len);
        hstart = 12;
        hlen = p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    } else {
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s': .npy format version %u.%u is not supported (1.0, "
                           "2.0 and 3.0 are)", file, array, major, minor);
    }
    if (hlen > NPY_MAX_HEADER)
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s': its .npy header of %zu bytes is longer than %d",
                           file, array, hlen, NPY_MAX_HEADER);
    if (hlen > len - hstart)
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s': its .npy header (%zu bytes) runs past the end of "
                           "the entry (%zu bytes)", file, array, hlen, len);
    npy_hdr h = {.file = file, .array = array, .h = (const char *)p + hstart, .len = hlen, .version = (int)major,
                 .err = err};
    npy_info info = {0};
    col_status st = hdr_parse(&h, &info);
    if (st)
        return st;
    const char *d = info.descr;
    int dt = npy_dtype(d);
    if (dt < 0) {
        if (d[0] == '>' && d[1] && d[2])
            return col_err_set(err, COL_EFORMAT, "%s: array '%.200s' is big-endian ('%s'); only little-endian arrays "
                               "are read", file, array, d);
        if (strchr(d, 'O'))
            return col_err_set(err, COL_EFORMAT, "%s: array '%.200s' holds Python objects (dtype '%s'), which are "
                               "never read", file, array, d);
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s' has dtype '%s', which is not read (<f8, <f4, <f2, "
                           "<i8, <i4, <i2, |i1, |u1 and |b1 are)", file, array, d);
    }
    if (info.fortran)
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s' is Fortran-ordered; only C-ordered arrays are read "
                           "(save np.ascontiguousarray of it)", file, array);
    size_t es = col_st_dtype_size((col_st_dtype)dt), dlen = len - hstart - hlen;
    uint64_t numel = 1, need = 0;
    bool overflow = false;
    for (int i = 0; i < info.ndim; i++)
        overflow |= __builtin_mul_overflow(numel, (uint64_t)info.shape[i], &numel);
    overflow |= __builtin_mul_overflow(numel, (uint64_t)es, &need);
    if (overflow || need != dlen) {
        char sh[200], nb[32];
        dims_str(sh, sizeof sh, info.ndim, info.shape);
        if (overflow)
            snprintf(nb, sizeof nb, "more than 2^64");
        else
            snprintf(nb, sizeof nb, "%llu", (unsigned long long)need);
        return col_err_set(err, COL_EFORMAT, "%s: array '%.200s' has %zu bytes of data, but shape %s of '%s' needs %s",
                           file, array, dlen, sh, d, nb);
    }
    t->dtype = (col_st_dtype)dt;
    t->ndim = info.ndim;
    memcpy(t->shape, info.shape, sizeof info.shape);
    t->nbytes = dlen;
    t->data = dlen ? p + hstart + hlen : (const void *)npz_empty_data;
    return COL_OK;
}

/* ---- the archive ---- */

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* Every entry must be a regular NAME.npy with a non-empty NAME. */
static int npz_filter(const char *name, bool regular, void *user, col_err *err)
{
    const char *file = user;
    if (!name)
        col_err_set(err, COL_EFORMAT, "%s: a zip entry's name cannot be read", file);
    else if (has_control(name))
        col_err_set(err, COL_EFORMAT, "%s: a zip entry's name holds control characters", file);
    else if (!regular)
        col_err_set(err, COL_EFORMAT, "%s: zip entry '%.200s' is not a regular file; an .npz holds only NAME.npy "
                    "arrays", file, name);
    else if (!ends_with(name, ".npy"))
        col_err_set(err, COL_EFORMAT, "%s: zip entry '%.200s' is not a .npy array; an .npz holds only NAME.npy "
                    "arrays%s", file, name, ends_with(name, "/data.pkl") ? " (this looks like a PyTorch checkpoint)" : "");
    else if (!strcmp(name, ".npy"))
        col_err_set(err, COL_EFORMAT, "%s: zip entry '.npy' names no array", file);
    else
        return 1;
    return -1;
}

static col_status npz_parse(col_npz_file *f, const uint8_t *in, size_t len, col_err *err)
{
    if (len >= 6 && !memcmp(in, "\x93NUMPY", 6))
        return col_err_set(err, COL_EFORMAT, "%s: this is a single .npy array, not an .npz archive", f->name);
    if (len < 4 || memcmp(in, "PK", 2))
        return col_err_set(err, COL_EFORMAT, "%s: not an .npz archive (no zip signature)", f->name);
    col_status st = col_zip_read(in, len, f->name, 1, f->map != NULL, npz_filter, f->name, &f->zip, &f->nzip, err);
    if (st)
        return st;
    if (f->nzip > NPZ_MAX_ARRAYS)
        return col_err_set(err, COL_EFORMAT, "%s: too many arrays (%zu)", f->name, f->nzip);
    f->tensors = calloc(f->nzip + 1, sizeof *f->tensors);
    f->names = calloc(f->nzip + 1, sizeof *f->names);
    if (!f->tensors || !f->names)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", f->name);
    for (size_t i = 0; i < f->nzip; i++) {
        const col_zip_entry *z = &f->zip[i];
        size_t k = z->order;   /* archive order: the order np.savez was given the arrays */
        char *nm = strndup(z->name, strlen(z->name) - 4);
        if (!nm)
            return col_err_set(err, COL_ENOMEM, "%s: out of memory", f->name);
        f->names[k] = nm;
        col_ckpt_tensor *t = &f->tensors[k];
        t->name = nm;
        t->file = f->name;
        if ((st = npy_parse(f->name, nm, z->data, z->len, t, err)))
            return st;
    }
    f->n = (int)f->nzip;
    return COL_OK;
}

static col_npz_file *npz_new(const char *name)
{
    col_npz_file *f = calloc(1, sizeof *f);
    if (f && !(f->name = strdup(name ? name : "npz archive"))) {
        free(f);
        f = NULL;
    }
    return f;
}

col_status col_npz_parse(const void *data, size_t len, const char *name, col_npz_file **out, col_err *err)
{
    *out = NULL;
    col_npz_file *f = npz_new(name);
    if (!f)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", name ? name : "npz archive");
    col_status st = npz_parse(f, data, len, err);
    if (st) {
        col_npz_close(f);
        return st;
    }
    *out = f;
    return COL_OK;
}

col_status col_npz_open(const char *path, col_npz_file **out, col_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return col_err_set(err, COL_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return col_err_set(err, COL_EIO, "%s: not a regular file", path);
    }
    if (sb.st_size < 22) {   /* the smallest zip is its end record */
        close(fd);
        return col_err_set(err, COL_EFORMAT, "%s: not an .npz archive (%lld bytes)", path, (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return col_err_set(err, COL_EIO, "%s: cannot map: %s", path, strerror(errno));
    col_npz_file *f = npz_new(path);
    if (!f) {
        munmap(map, len);
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    }
    f->map = map;
    f->map_len = len;
    col_status st = npz_parse(f, map, len, err);
    if (st) {
        col_npz_close(f);
        return st;
    }
    for (int i = 0; i < f->n; i++) { /* arrays of stored entries lie in the mapping */
        const unsigned char *d = f->tensors[i].data, *m = map;
        f->tensors[i].mapped = d && d >= m && d < m + len;
    }
    *out = f;
    return COL_OK;
}

int col_npz_count(const col_npz_file *f) { return f ? f->n : 0; }

const col_ckpt_tensor *col_npz_get(const col_npz_file *f, int i)
{
    return f && i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

void col_npz_close(col_npz_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; f->names && i < f->nzip; i++)
        free(f->names[i]);
    free(f->names);
    free(f->tensors);
    col_zip_free(f->zip, f->nzip);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->name);
    free(f);
}

/* ---- telling an .npz from a PyTorch zip ---- */

typedef struct {
    size_t npy, pkl;
} npz_sniff;

static void sniff_name(const char *name, void *user)
{
    npz_sniff *s = user;
    const char *slash = strchr(name, '/');
    if (slash && slash != name && !strcmp(slash + 1, "data.pkl"))
        s->pkl++;
    else if (ends_with(name, ".npy"))
        s->npy++;
}

bool col_npz_sniff(const void *data, size_t len)
{
    npz_sniff s = {0};
    return col_zip_names(data, len, sniff_name, &s) && s.pkl == 0 && s.npy > 0;
}
