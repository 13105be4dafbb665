/* gguf.c - GGUF reader (untrusted input); the format is described in gguf.h.
 *
 * The parser walks the file once with a cursor that checks every read
 * against the bytes left. Metadata values are not copied: a value records
 * where its bytes lie in the image; top-level arrays of strings (the token
 * lists) get an index of each element's offset so that element i is O(1).
 * Keys and tensor names are copied NUL-terminated and sorted (pointers) to
 * refuse repeats and to look names up in O(log n).
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian data in place: big-endian hosts are not supported"
#endif

#define GGUF_MAX_NESTING 16 /* arrays within arrays: a bound so a hostile file cannot exhaust the stack */

typedef struct {
    char *key;
    col_gguf_value v;
} gguf_kv;

struct col_gguf {
    char *name;
    const uint8_t *base;
    size_t len;
    void *map;
    size_t map_len;
    uint32_t version, alignment;
    uint64_t data_off;
    int64_t nkv, nt;
    gguf_kv *kv;
    gguf_kv **kv_sorted;
    col_gguf_tensor *t;
    col_gguf_tensor **t_sorted;
};

/* ---- types ---- */

static const struct {
    const char *name;
    uint8_t blck;  /* elements per block, 0: no such type */
    uint16_t size; /* bytes per block */
} ggml_types[] = {
    [COL_GGML_F32] = {"F32", 1, 4},          [COL_GGML_F16] = {"F16", 1, 2},
    [COL_GGML_Q4_0] = {"Q4_0", 32, 18},      [COL_GGML_Q4_1] = {"Q4_1", 32, 20},
    [COL_GGML_Q5_0] = {"Q5_0", 32, 22},      [COL_GGML_Q5_1] = {"Q5_1", 32, 24},
    [COL_GGML_Q8_0] = {"Q8_0", 32, 34},      [COL_GGML_Q8_1] = {"Q8_1", 32, 36},
    [COL_GGML_Q2_K] = {"Q2_K", 0, 84},       [COL_GGML_Q3_K] = {"Q3_K", 0, 110},
    [COL_GGML_Q4_K] = {"Q4_K", 0, 144},      [COL_GGML_Q5_K] = {"Q5_K", 0, 176},
    [COL_GGML_Q6_K] = {"Q6_K", 0, 210},      [COL_GGML_Q8_K] = {"Q8_K", 0, 292},
    [COL_GGML_IQ2_XXS] = {"IQ2_XXS", 0, 66}, [COL_GGML_IQ2_XS] = {"IQ2_XS", 0, 74},
    [COL_GGML_IQ3_XXS] = {"IQ3_XXS", 0, 98}, [COL_GGML_IQ1_S] = {"IQ1_S", 0, 50},
    [COL_GGML_IQ4_NL] = {"IQ4_NL", 32, 18},  [COL_GGML_IQ3_S] = {"IQ3_S", 0, 110},
    [COL_GGML_IQ2_S] = {"IQ2_S", 0, 82},     [COL_GGML_IQ4_XS] = {"IQ4_XS", 0, 136},
    [COL_GGML_I8] = {"I8", 1, 1},            [COL_GGML_I16] = {"I16", 1, 2},
    [COL_GGML_I32] = {"I32", 1, 4},          [COL_GGML_I64] = {"I64", 1, 8},
    [COL_GGML_F64] = {"F64", 1, 8},          [COL_GGML_IQ1_M] = {"IQ1_M", 0, 56},
    [COL_GGML_BF16] = {"BF16", 1, 2},        [COL_GGML_TQ1_0] = {"TQ1_0", 0, 54},
    [COL_GGML_TQ2_0] = {"TQ2_0", 0, 66},     [COL_GGML_MXFP4] = {"MXFP4", 32, 17},
    [COL_GGML_NVFP4] = {"NVFP4", 64, 36},    [COL_GGML_Q1_0] = {"Q1_0", 128, 18},
    [COL_GGML_Q2_0] = {"Q2_0", 64, 18},
};
enum { QK_K = 256 }; /* the k-quant super-block (blck 0 above) */

const char *col_ggml_type_name(uint32_t type)
{
    return type < sizeof ggml_types / sizeof ggml_types[0] ? ggml_types[type].name : NULL;
}

bool col_ggml_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes)
{
    if (!col_ggml_type_name(type))
        return false;
    *block_elems = ggml_types[type].blck ? ggml_types[type].blck : QK_K;
    *block_bytes = ggml_types[type].size;
    return true;
}

uint64_t col_ggml_row_bytes(uint32_t type, int64_t n)
{
    uint32_t be, bb;
    if (n < 0 || !col_ggml_type_block(type, &be, &bb) || (uint64_t)n % be)
        return 0;
    return (uint64_t)n / be * bb; /* n < 2^63 and bb/be <= 4: no overflow */
}

static const char *const vtype_names[COL_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};
static const uint8_t vtype_sizes[COL_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *col_gguf_vtype_name(col_gguf_vtype t)
{
    return (unsigned)t < COL_GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

/* ---- the cursor ---- */

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *name;
    col_err *err;
} cursor;

static col_status short_read(cursor *c, const char *what)
{
    return col_err_set(c->err, COL_EFORMAT, "%s: truncated GGUF file: %s at byte %zu runs past its end (%zu bytes)",
                       c->name, what, c->pos, c->len);
}

static col_status rd_bytes(cursor *c, uint64_t n, const uint8_t **out, const char *what)
{
    if (n > c->len - c->pos)
        return short_read(c, what);
    *out = c->p + c->pos;
    c->pos += (size_t)n;
    return COL_OK;
}

static col_status rd_u32(cursor *c, uint32_t *v, const char *what)
{
    const uint8_t *b = NULL;
    col_status st = rd_bytes(c, 4, &b, what);
    if (st == COL_OK)
        memcpy(v, b, 4);
    return st;
}

static col_status rd_u64(cursor *c, uint64_t *v, const char *what)
{
    const uint8_t *b = NULL;
    col_status st = rd_bytes(c, 8, &b, what);
    if (st == COL_OK)
        memcpy(v, b, 8);
    return st;
}

/* a string: u64 length and the bytes */
static col_status rd_str(cursor *c, const uint8_t **s, uint64_t *n, const char *what)
{
    col_status st = rd_u64(c, n, what);
    return st != COL_OK ? st : rd_bytes(c, *n, s, what);
}

/* a NUL-terminated copy of a key or a name (which may not hold a NUL byte) */
static col_status copy_name(cursor *c, const uint8_t *s, uint64_t n, const char *what, char **out)
{
    if (memchr(s, 0, (size_t)n))
        return col_err_set(c->err, COL_EFORMAT, "%s: a %s holds a NUL byte", c->name, what);
    *out = malloc((size_t)n + 1);
    if (!*out)
        return col_err_set(c->err, COL_ENOMEM, "%s: out of memory reading a %s of %llu bytes", c->name, what,
                           (unsigned long long)n);
    memcpy(*out, s, (size_t)n);
    (*out)[n] = 0;
    return COL_OK;
}

/* Parses a value of type t at the cursor into v (when not NULL). top: a metadata value itself (its string
 * arrays get an index); key: for messages. */
static col_status parse_value(cursor *c, uint32_t t, int depth, bool top, const char *key, col_gguf_value *v)
{
    col_gguf_value tmp;
    if (!v)
        v = &tmp;
    memset(v, 0, sizeof *v);
    if (t >= COL_GGUF_VTYPE_COUNT)
        return col_err_set(c->err, COL_EFORMAT, "%s: metadata \"%s\" has value type %u, which does not exist", c->name,
                           key, t);
    v->type = (col_gguf_vtype)t;
    col_status st;
    if (vtype_sizes[t]) {
        v->nbytes = vtype_sizes[t];
        return rd_bytes(c, v->nbytes, &v->data, "a metadata value");
    }
    if (t == COL_GGUF_STRING) {
        st = rd_str(c, &v->data, &v->count, "a metadata string");
        v->nbytes = v->count;
        return st;
    }
    /* an array */
    if (depth >= GGUF_MAX_NESTING)
        return col_err_set(c->err, COL_EFORMAT, "%s: metadata \"%s\" nests arrays more than %d deep", c->name, key,
                           GGUF_MAX_NESTING);
    uint32_t et;
    if ((st = rd_u32(c, &et, "an array's element type")) != COL_OK || (st = rd_u64(c, &v->count, "an array's length")))
        return st;
    if (et >= COL_GGUF_VTYPE_COUNT)
        return col_err_set(c->err, COL_EFORMAT, "%s: metadata \"%s\" is an array of type %u, which does not exist",
                           c->name, key, et);
    v->elem = (col_gguf_vtype)et;
    size_t left = c->len - c->pos;
    /* the least bytes an element takes: a fixed size, a string's length, an array's type and length */
    uint64_t least = vtype_sizes[et] ? vtype_sizes[et] : et == COL_GGUF_STRING ? 8 : 12;
    if (v->count > left / least)
        return col_err_set(c->err, COL_EFORMAT, "%s: metadata \"%s\" claims %llu elements of type %s: more than the "
                           "%zu bytes left can hold", c->name, key, (unsigned long long)v->count, vtype_names[et], left);
    v->data = c->p + c->pos;
    size_t start = c->pos;
    if (vtype_sizes[et]) {
        c->pos += (size_t)(v->count * vtype_sizes[et]);
    } else {
        uint64_t *index = NULL;
        if (top && et == COL_GGUF_STRING && v->count) {
            index = malloc((size_t)v->count * sizeof *index);
            if (!index)
                return col_err_set(c->err, COL_ENOMEM, "%s: out of memory indexing metadata \"%s\" (%llu strings)",
                                   c->name, key, (unsigned long long)v->count);
        }
        for (uint64_t i = 0; i < v->count; i++) {
            if (index)
                index[i] = c->pos - start;
            if ((st = parse_value(c, et, depth + 1, false, key, NULL)) != COL_OK) {
                free(index);
                return st;
            }
        }
        v->index = index;
    }
    v->nbytes = c->pos - start;
    return COL_OK;
}

/* ---- open and close ---- */

void col_gguf_close(col_gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; g->kv && i < g->nkv; i++) {
        free(g->kv[i].key);
        free((void *)g->kv[i].v.index);
    }
    for (int64_t i = 0; g->t && i < g->nt; i++)
        free((void *)g->t[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->t);
    free(g->t_sorted);
    if (g->map)
        munmap(g->map, g->map_len);
    free(g->name);
    free(g);
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(gguf_kv *const *)a)->key, (*(gguf_kv *const *)b)->key);
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp((*(col_gguf_tensor *const *)a)->name, (*(col_gguf_tensor *const *)b)->name);
}

static col_status parse_header(col_gguf *g, col_err *err)
{
    cursor c = {.p = g->base, .len = g->len, .name = g->name, .err = err};
    const uint8_t *magic;
    if (g->len < 4 || memcmp(g->base, "GGUF", 4) != 0)
        return col_err_set(err, COL_EFORMAT, "%s is not a GGUF file (it does not start with \"GGUF\")", g->name);
    rd_bytes(&c, 4, &magic, "the magic");
    uint32_t ver;
    col_status st = rd_u32(&c, &ver, "the version");
    if (st != COL_OK)
        return st;
    uint32_t swapped = __builtin_bswap32(ver);
    if ((ver & 0xffffu) == 0 && swapped >= 1 && swapped <= 3)
        return col_err_set(err, COL_EUNSUPPORTED, "%s is a big-endian GGUF file (version %u): only little-endian files "
                           "are read; convert it with gguf-py's gguf-convert-endian", g->name, swapped);
    if (ver == 1)
        return col_err_set(err, COL_EUNSUPPORTED, "%s is a GGUF version 1 file (32-bit counts, from 2023): only "
                           "versions 2 and 3 are read; convert the model again", g->name);
    if (ver != 2 && ver != 3)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)", g->name, ver);
    g->version = ver;
    uint64_t nt, nkv;
    if ((st = rd_u64(&c, &nt, "the tensor count")) || (st = rd_u64(&c, &nkv, "the metadata count")))
        return st;
    size_t left = c.len - c.pos;
    if (nkv > left / 13) /* a key's length, a type, one byte */
        return col_err_set(err, COL_EFORMAT, "%s claims %llu metadata entries: more than the %zu bytes left can hold",
                           g->name, (unsigned long long)nkv, left);
    if (nt > left / 24) /* a name's length, n_dims, type, offset */
        return col_err_set(err, COL_EFORMAT, "%s claims %llu tensors: more than the %zu bytes left can hold", g->name,
                           (unsigned long long)nt, left);
    g->kv = calloc(nkv ? nkv : 1, sizeof *g->kv);
    g->kv_sorted = calloc(nkv ? nkv : 1, sizeof *g->kv_sorted);
    g->t = calloc(nt ? nt : 1, sizeof *g->t);
    g->t_sorted = calloc(nt ? nt : 1, sizeof *g->t_sorted);
    if (!g->kv || !g->kv_sorted || !g->t || !g->t_sorted)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory for %llu metadata entries and %llu tensors", g->name,
                           (unsigned long long)nkv, (unsigned long long)nt);
    for (uint64_t i = 0; i < nkv; i++) {
        const uint8_t *ks;
        uint64_t kn;
        uint32_t type;
        gguf_kv *kv = &g->kv[i];
        if ((st = rd_str(&c, &ks, &kn, "a metadata key")) || (st = copy_name(&c, ks, kn, "metadata key", &kv->key)))
            return st;
        g->nkv = (int64_t)i + 1;
        if ((st = rd_u32(&c, &type, "a metadata value type")) ||
            (st = parse_value(&c, type, 0, true, kv->key, &kv->v)))
            return st;
        g->kv_sorted[i] = kv;
    }
    qsort(g->kv_sorted, (size_t)g->nkv, sizeof *g->kv_sorted, cmp_kv);
    for (int64_t i = 1; i < g->nkv; i++)
        if (strcmp(g->kv_sorted[i - 1]->key, g->kv_sorted[i]->key) == 0)
            return col_err_set(err, COL_EFORMAT, "%s: metadata key \"%s\" is given twice", g->name,
                               g->kv_sorted[i]->key);
    g->alignment = 32;
    int64_t ai = col_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const col_gguf_value *v = &g->kv[ai].v;
        uint32_t a = 0;
        if (v->type == COL_GGUF_U32)
            memcpy(&a, v->data, 4);
        if (v->type != COL_GGUF_U32 || a == 0 || (a & (a - 1)) != 0)
            return col_err_set(err, COL_EFORMAT, "%s: general.alignment must be a u32 power of two, not %s %u",
                               g->name, vtype_names[v->type], a);
        g->alignment = a;
    }
    for (uint64_t i = 0; i < nt; i++) {
        col_gguf_tensor *t = &g->t[i];
        const uint8_t *ns;
        uint64_t nn;
        uint32_t nd;
        char *name;
        if ((st = rd_str(&c, &ns, &nn, "a tensor name")) || (st = copy_name(&c, ns, nn, "tensor name", &name)))
            return st;
        t->name = name;
        g->nt = (int64_t)i + 1;
        g->t_sorted[i] = t;
        if ((st = rd_u32(&c, &nd, "a tensor's dimension count")))
            return st;
        if (nd > COL_GGUF_MAX_DIMS)
            return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" has %u dimensions (at most %d)", g->name, name, nd,
                               COL_GGUF_MAX_DIMS);
        t->n_dims = (int)nd;
        uint64_t numel = 1;
        for (int d = 0; d < COL_GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if (d < (int)nd && (st = rd_u64(&c, &ne, "a tensor's dimensions")))
                return st;
            if (ne > (uint64_t)INT64_MAX || (ne && numel > (uint64_t)INT64_MAX / ne))
                return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" has a dimension or size too large (%llu)",
                                   g->name, name, (unsigned long long)ne);
            numel *= ne;
            t->ne[d] = (int64_t)ne;
        }
        if ((st = rd_u32(&c, &t->type, "a tensor's type")) || (st = rd_u64(&c, &t->offset, "a tensor's offset")))
            return st;
        if (t->offset % g->alignment)
            return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" has offset %llu, not a multiple of the alignment %u",
                               g->name, name, (unsigned long long)t->offset, g->alignment);
    }
    qsort(g->t_sorted, (size_t)g->nt, sizeof *g->t_sorted, cmp_tensor);
    for (int64_t i = 1; i < g->nt; i++)
        if (strcmp(g->t_sorted[i - 1]->name, g->t_sorted[i]->name) == 0)
            return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" is given twice", g->name, g->t_sorted[i]->name);
    /* the data section starts at the next multiple of the alignment */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_off = (uint64_t)c.pos + pad;
    for (int64_t i = 0; i < g->nt; i++) {
        col_gguf_tensor *t = &g->t[i];
        uint64_t data_len = g->len > g->data_off ? g->len - g->data_off : 0;
        uint32_t be, bb;
        if (!col_ggml_type_block(t->type, &be, &bb)) { /* refused when used; its start must still be in the file */
            if (t->offset > data_len)
                return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" starts at %llu, past the end of the file",
                                   g->name, t->name, (unsigned long long)(g->data_off + t->offset));
            continue;
        }
        if (t->ne[0] % be)
            return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" of type %s has rows of %lld elements, not a "
                               "multiple of its block of %u", g->name, t->name, ggml_types[t->type].name,
                               (long long)t->ne[0], be);
        uint64_t nbytes = col_ggml_row_bytes(t->type, t->ne[0]);
        for (int d = 1; d < COL_GGUF_MAX_DIMS; d++) {
            uint64_t ne = (uint64_t)t->ne[d];
            if (ne && nbytes > UINT64_MAX / ne)
                return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" is too large", g->name, t->name);
            nbytes *= ne;
        }
        if (t->offset > data_len || nbytes > data_len - t->offset)
            return col_err_set(err, COL_EFORMAT, "%s: tensor \"%s\" (%llu bytes at data offset %llu) lies outside the "
                               "file's %llu bytes of data", g->name, t->name, (unsigned long long)nbytes,
                               (unsigned long long)t->offset, (unsigned long long)data_len);
        t->nbytes = nbytes;
        t->data = g->base + g->data_off + t->offset;
    }
    return COL_OK;
}

static col_gguf *gguf_new(const char *name)
{
    col_gguf *g = calloc(1, sizeof *g);
    if (g && !(g->name = strdup(name ? name : "GGUF"))) {
        free(g);
        return NULL;
    }
    return g;
}

static col_status finish_open(col_gguf *g, col_gguf **out, col_err *err)
{
    col_status st = parse_header(g, err);
    if (st != COL_OK) {
        col_gguf_close(g);
        return st;
    }
    *out = g;
    return COL_OK;
}

col_status col_gguf_parse(const void *data, size_t len, const char *name, col_gguf **out, col_err *err)
{
    *out = NULL;
    if (!data && len)
        return col_err_set(err, COL_EINVAL, "col_gguf_parse: NULL data with length %zu", len);
    col_gguf *g = gguf_new(name);
    if (!g)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", name ? name : "GGUF");
    g->base = data;
    g->len = len;
    return finish_open(g, out, err);
}

col_status col_gguf_open(const char *path, col_gguf **out, col_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO must not hang us */
    if (fd < 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        col_status st = col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    const char *why = S_ISDIR(sb.st_mode) ? "is a directory, not a GGUF file"
                      : !S_ISREG(sb.st_mode) ? "is not a regular file"
                      : sb.st_size == 0      ? "is empty (0 bytes), not a GGUF file"
                                             : NULL;
    if (why || (uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return col_err_set(err, COL_EIO, "%s %s", path, why ? why : "is too large to map");
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return col_err_set(err, COL_EIO, "cannot map %s (%zu bytes): %s", path, len, strerror(mmap_errno));
    col_gguf *g = gguf_new(path);
    if (!g) {
        munmap(map, len);
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    }
    g->map = map;
    g->map_len = len;
    g->base = map;
    g->len = len;
    return finish_open(g, out, err);
}

uint32_t col_gguf_version(const col_gguf *g) { return g->version; }
uint32_t col_gguf_alignment(const col_gguf *g) { return g->alignment; }
uint64_t col_gguf_data_offset(const col_gguf *g) { return g->data_off; }
const char *col_gguf_name(const col_gguf *g) { return g->name; }

/* ---- metadata ---- */

int64_t col_gguf_kv_count(const col_gguf *g) { return g ? g->nkv : 0; }

const char *col_gguf_key(const col_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->nkv ? g->kv[i].key : NULL;
}

bool col_gguf_kv_value(const col_gguf *g, int64_t i, col_gguf_value *v)
{
    if (!g || i < 0 || i >= g->nkv)
        return false;
    *v = g->kv[i].v;
    return true;
}

int64_t col_gguf_find_key(const col_gguf *g, const char *key)
{
    if (!g || !key)
        return -1;
    gguf_kv probe = {.key = (char *)key}, *pp = &probe;
    gguf_kv **hit = bsearch(&pp, g->kv_sorted, (size_t)g->nkv, sizeof *g->kv_sorted, cmp_kv);
    return hit ? *hit - g->kv : -1;
}

/* the value under key, of type want (COL_GGUF_VTYPE_COUNT: any) */
static col_status lookup(const col_gguf *g, const char *key, col_gguf_vtype want, const col_gguf_value **v,
                         col_err *err)
{
    int64_t i = col_gguf_find_key(g, key);
    if (i < 0)
        return col_err_set(err, COL_EFORMAT, "%s has no metadata \"%s\"", g->name, key);
    *v = &g->kv[i].v;
    if (want != COL_GGUF_VTYPE_COUNT && (*v)->type != want)
        return col_err_set(err, COL_EFORMAT, "%s: metadata \"%s\" is a %s, not a %s", g->name, key,
                           vtype_names[(*v)->type], vtype_names[want]);
    return COL_OK;
}

#define TYPED_GET(fn, ctype, vt)                                                     \
    col_status fn(const col_gguf *g, const char *key, ctype *out, col_err *err)      \
    {                                                                                \
        const col_gguf_value *v;                                                     \
        col_status st = lookup(g, key, vt, &v, err);                                 \
        if (st == COL_OK)                                                            \
            memcpy(out, v->data, sizeof *out);                                       \
        return st;                                                                   \
    }
TYPED_GET(col_gguf_get_u32, uint32_t, COL_GGUF_U32)
TYPED_GET(col_gguf_get_i32, int32_t, COL_GGUF_I32)
TYPED_GET(col_gguf_get_u64, uint64_t, COL_GGUF_U64)
TYPED_GET(col_gguf_get_f32, float, COL_GGUF_F32)
#undef TYPED_GET

col_status col_gguf_get_bool(const col_gguf *g, const char *key, bool *out, col_err *err)
{
    const col_gguf_value *v;
    col_status st = lookup(g, key, COL_GGUF_BOOL, &v, err);
    if (st == COL_OK)
        *out = v->data[0] != 0;
    return st;
}

col_status col_gguf_get_str(const col_gguf *g, const char *key, const char **s, size_t *len, col_err *err)
{
    const col_gguf_value *v;
    col_status st = lookup(g, key, COL_GGUF_STRING, &v, err);
    if (st == COL_OK) {
        *s = (const char *)v->data;
        *len = (size_t)v->count;
    }
    return st;
}

bool col_gguf_scalar_int(const col_gguf_value *v, int64_t *out)
{
    const uint8_t *b = v->data;
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64; int64_t i64;
    switch (v->type) {
    case COL_GGUF_U8: memcpy(&u8, b, 1); *out = u8; return true;
    case COL_GGUF_I8: memcpy(&i8, b, 1); *out = i8; return true;
    case COL_GGUF_BOOL: *out = b[0] != 0; return true;
    case COL_GGUF_U16: memcpy(&u16, b, 2); *out = u16; return true;
    case COL_GGUF_I16: memcpy(&i16, b, 2); *out = i16; return true;
    case COL_GGUF_U32: memcpy(&u32, b, 4); *out = u32; return true;
    case COL_GGUF_I32: memcpy(&i32, b, 4); *out = i32; return true;
    case COL_GGUF_U64: memcpy(&u64, b, 8); *out = (int64_t)u64; return u64 <= (uint64_t)INT64_MAX;
    case COL_GGUF_I64: memcpy(&i64, b, 8); *out = i64; return true;
    default: return false;
    }
}

bool col_gguf_scalar_num(const col_gguf_value *v, double *out)
{
    float f;
    int64_t i;
    uint64_t u;
    switch (v->type) {
    case COL_GGUF_F32: memcpy(&f, v->data, 4); *out = f; return true;
    case COL_GGUF_F64: memcpy(out, v->data, 8); return true;
    case COL_GGUF_U64: memcpy(&u, v->data, 8); *out = (double)u; return true;
    default:
        if (!col_gguf_scalar_int(v, &i))
            return false;
        *out = (double)i;
        return true;
    }
}

col_status col_gguf_get_int(const col_gguf *g, const char *key, int64_t *out, col_err *err)
{
    const col_gguf_value *v;
    col_status st = lookup(g, key, COL_GGUF_VTYPE_COUNT, &v, err);
    if (st != COL_OK)
        return st;
    if (v->type == COL_GGUF_BOOL || v->type == COL_GGUF_F32 || v->type == COL_GGUF_F64 || !col_gguf_scalar_int(v, out))
        return col_err_set(err, COL_EFORMAT, "%s: metadata \"%s\" is a %s, not an integer (or one above 2^63)",
                           g->name, key, vtype_names[v->type]);
    return COL_OK;
}

col_status col_gguf_get_num(const col_gguf *g, const char *key, double *out, col_err *err)
{
    const col_gguf_value *v;
    col_status st = lookup(g, key, COL_GGUF_VTYPE_COUNT, &v, err);
    if (st != COL_OK)
        return st;
    if (v->type == COL_GGUF_BOOL || !col_gguf_scalar_num(v, out))
        return col_err_set(err, COL_EFORMAT, "%s: metadata \"%s\" is a %s, not a number", g->name, key,
                           vtype_names[v->type]);
    return COL_OK;
}

col_status col_gguf_get_array(const col_gguf *g, const char *key, col_gguf_vtype elem, col_gguf_value *arr,
                              col_err *err)
{
    const col_gguf_value *v;
    col_status st = lookup(g, key, COL_GGUF_ARRAY, &v, err);
    if (st != COL_OK)
        return st;
    if (elem != COL_GGUF_VTYPE_COUNT && v->elem != elem)
        return col_err_set(err, COL_EFORMAT, "%s: metadata \"%s\" is an array of %s, not of %s", g->name, key,
                           vtype_names[v->elem], vtype_names[elem]);
    *arr = *v;
    return COL_OK;
}

/* The bytes a validated value of type t at p (at most n bytes) spans; 0 if it does not fit (cannot happen
 * for what the parser accepted). */
static uint64_t span(uint32_t t, const uint8_t *p, uint64_t n, int depth)
{
    if (t >= COL_GGUF_VTYPE_COUNT || depth > GGUF_MAX_NESTING)
        return 0;
    if (vtype_sizes[t])
        return vtype_sizes[t] <= n ? vtype_sizes[t] : 0;
    uint64_t len;
    if (n < 8)
        return 0;
    memcpy(&len, p, 8);
    if (t == COL_GGUF_STRING)
        return len <= n - 8 ? 8 + len : 0;
    uint32_t et;
    if (n < 12)
        return 0;
    memcpy(&et, p, 4);
    memcpy(&len, p + 4, 8);
    if (et >= COL_GGUF_VTYPE_COUNT)
        return 0;
    uint64_t at = 12;
    if (vtype_sizes[et])
        return len <= (n - at) / vtype_sizes[et] ? at + len * vtype_sizes[et] : 0;
    for (uint64_t i = 0; i < len; i++) {
        uint64_t s = span(et, p + at, n - at, depth + 1);
        if (!s)
            return 0;
        at += s;
    }
    return at;
}

/* the value of type t whose encoding (as in the file) starts at p, within n bytes */
static bool decode_at(uint32_t t, const uint8_t *p, uint64_t n, col_gguf_value *out)
{
    memset(out, 0, sizeof *out);
    uint64_t s = span(t, p, n, 1);
    if (!s)
        return false;
    out->type = (col_gguf_vtype)t;
    if (vtype_sizes[t]) {
        out->data = p;
        out->nbytes = vtype_sizes[t];
    } else if (t == COL_GGUF_STRING) {
        memcpy(&out->count, p, 8);
        out->data = p + 8;
        out->nbytes = out->count;
    } else {
        uint32_t et;
        memcpy(&et, p, 4);
        out->elem = (col_gguf_vtype)et;
        memcpy(&out->count, p + 4, 8);
        out->data = p + 12;
        out->nbytes = s - 12;
    }
    return true;
}

bool col_gguf_array_elem(const col_gguf_value *arr, uint64_t i, col_gguf_value *elem)
{
    if (!arr || arr->type != COL_GGUF_ARRAY || i >= arr->count)
        return false;
    uint32_t et = arr->elem;
    if (et >= COL_GGUF_VTYPE_COUNT)
        return false;
    uint64_t off = 0;
    if (vtype_sizes[et])
        off = i * vtype_sizes[et];
    else if (arr->index)
        off = arr->index[i];
    else
        for (uint64_t k = 0; k < i; k++) {
            uint64_t s = span(et, arr->data + off, arr->nbytes - off, 1);
            if (!s)
                return false;
            off += s;
        }
    if (off >= arr->nbytes)
        return false;
    return decode_at(et, arr->data + off, arr->nbytes - off, elem);
}

bool col_gguf_array_str(const col_gguf_value *arr, uint64_t i, const char **s, size_t *len)
{
    col_gguf_value e;
    if (!arr || arr->elem != COL_GGUF_STRING || !col_gguf_array_elem(arr, i, &e))
        return false;
    *s = (const char *)e.data;
    *len = (size_t)e.count;
    return true;
}

col_status col_gguf_array_nums(const col_gguf_value *arr, double *dst, col_err *err)
{
    if (!arr || arr->type != COL_GGUF_ARRAY || !vtype_sizes[arr->elem] || arr->elem == COL_GGUF_BOOL)
        return col_err_set(err, COL_EINVAL, "an array of %s is not an array of numbers",
                           arr ? col_gguf_vtype_name(arr->elem) : "nothing");
    for (uint64_t i = 0; i < arr->count; i++) {
        col_gguf_value e = {.type = arr->elem, .data = arr->data + i * vtype_sizes[arr->elem]};
        col_gguf_scalar_num(&e, &dst[i]);
    }
    return COL_OK;
}

col_status col_gguf_array_ints(const col_gguf_value *arr, int64_t *dst, col_err *err)
{
    if (!arr || arr->type != COL_GGUF_ARRAY || !vtype_sizes[arr->elem] || arr->elem == COL_GGUF_BOOL ||
        arr->elem == COL_GGUF_F32 || arr->elem == COL_GGUF_F64)
        return col_err_set(err, COL_EINVAL, "an array of %s is not an array of integers",
                           arr ? col_gguf_vtype_name(arr->elem) : "nothing");
    for (uint64_t i = 0; i < arr->count; i++) {
        col_gguf_value e = {.type = arr->elem, .data = arr->data + i * vtype_sizes[arr->elem]};
        if (!col_gguf_scalar_int(&e, &dst[i]))
            return col_err_set(err, COL_EINVAL, "array element %llu is above 2^63", (unsigned long long)i);
    }
    return COL_OK;
}

/* ---- tensors ---- */

int64_t col_gguf_tensor_count(const col_gguf *g) { return g ? g->nt : 0; }

const col_gguf_tensor *col_gguf_tensor_at(const col_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->nt ? &g->t[i] : NULL;
}

const col_gguf_tensor *col_gguf_tensor_find(const col_gguf *g, const char *name)
{
    if (!g || !name)
        return NULL;
    col_gguf_tensor probe = {.name = name}, *pp = &probe;
    col_gguf_tensor **hit = bsearch(&pp, g->t_sorted, (size_t)g->nt, sizeof *g->t_sorted, cmp_tensor);
    return hit ? *hit : NULL;
}

int64_t col_gguf_tensor_numel(const col_gguf_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; /* checked at open: fits */
}

col_status col_gguf_tensor_data(const col_gguf *g, const col_gguf_tensor *t, const void **data, uint64_t *nbytes,
                                col_err *err)
{
    const char *tn = col_ggml_type_name(t->type);
    if (!tn)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: tensor \"%s\" has ggml type %u, which this reader does not know",
                           g->name, t->name, t->type);
    *data = t->data;
    *nbytes = t->nbytes;
    return COL_OK;
}
