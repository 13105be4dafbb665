/* checkpoint.c - the front end over safetensors, PyTorch and .npz files:
 * directory layouts, sharded indexes, lookup by name, conversion to f32.
 *
 * A checkpoint holds one or more open files (the "sources") and a flat copy
 * of their tensor descriptors; the descriptors point into the sources, which
 * stay open until col_ckpt_close.
 */
#include "checkpoint.h"
#include "filemap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "textio.h"

#define INDEX_MAX_BYTES (64u << 20) /* a weight_map of ~1e5 tensors is a few MB */

typedef struct {
    col_st_file *st; /* exactly one of st, pt, nz is set */
    col_pt_file *pt;
    col_npz_file *nz;
} ckpt_source;

typedef struct {
    const char *name;
    int i;                    /* index into col_ckpt.t */
} ckpt_name;

struct col_ckpt {
    const char *format;       /* "safetensors", "pytorch" or "npz" */
    int nsrc;
    ckpt_source *src;
    int n;
    col_ckpt_tensor *t;       /* sources in order, each in its file order */
    int *t_src;               /* source index of each tensor */
    ckpt_name *by_name;       /* every tensor, sorted by name */
};

typedef enum { KIND_ST, KIND_PT, KIND_NPZ, KIND_INDEX } file_kind;

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s", dir, ends_with(dir, "/") ? "" : "/", name);
    return p;
}

/* Whether the zip at fd (size bytes) lists NumPy arrays and no pickle. */
static bool zip_is_npz(int fd, off_t size)
{
    if (size <= 0 || (uint64_t)size > SIZE_MAX)
        return false;
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        return false;
    bool npz = col_npz_sniff(map, (size_t)size);   /* reads the central directory and local headers only */
    munmap(map, (size_t)size);
    return npz;
}

/* Decides how to read a file: a zip ('PK\3\4') is an .npz when named *.npz
 * or when it holds *.npy entries and no pickle, else a PyTorch checkpoint;
 * a non-zip named *.npz is read as an .npz and one named *.bin / *.pt / *.pth
 * as PyTorch (the reader then explains what it is); *.json is a shard index;
 * anything else is read as safetensors (whose parser says clearly when it is
 * not). */
static col_status detect_kind(const char *path, file_kind *kind, col_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    unsigned char magic[4] = {0};
    ssize_t got = read(fd, magic, sizeof magic);
    bool zip = got == 4 && memcmp(magic, "PK\003\004", 4) == 0;
    struct stat sb;
    bool npz = ends_with(path, ".npz") ||
               (zip && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && zip_is_npz(fd, sb.st_size));
    close(fd);
    if (npz)
        *kind = KIND_NPZ;
    else if (zip)
        *kind = KIND_PT;
    else if (ends_with(path, ".json"))
        *kind = KIND_INDEX;
    else if (ends_with(path, ".bin") || ends_with(path, ".pt") || ends_with(path, ".pth"))
        *kind = KIND_PT;
    else
        *kind = KIND_ST;
    return COL_OK;
}

static int source_count(const ckpt_source *s)
{
    return s->st ? col_st_count(s->st) : s->pt ? col_pt_count(s->pt) : col_npz_count(s->nz);
}

static const col_ckpt_tensor *source_get(const ckpt_source *s, int i)
{
    return s->st ? col_st_get(s->st, i) : s->pt ? col_pt_get(s->pt, i) : col_npz_get(s->nz, i);
}

static int source_rank(const ckpt_source *s)
{
    return s->st ? 0 : s->pt ? 1 : 2;
}

static const char *source_format(const ckpt_source *s)
{
    static const char *const names[] = {"safetensors", "pytorch", "npz"};
    return names[source_rank(s)];
}

/* Opens one weights file (not an index) and appends it to c's sources. */
static col_status add_file(col_ckpt *c, const char *path, file_kind kind, col_err *err)
{
    ckpt_source *src = realloc(c->src, ((size_t)c->nsrc + 1) * sizeof *src);
    if (!src)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    c->src = src;
    ckpt_source s = {0};
    col_status st = kind == KIND_PT    ? col_pt_open(path, &s.pt, err)
                    : kind == KIND_NPZ ? col_npz_open(path, &s.nz, err)
                                       : col_st_open(path, &s.st, err);
    if (st != COL_OK)
        return st;
    c->src[c->nsrc++] = s;
    return COL_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const ckpt_name *)a)->name, ((const ckpt_name *)b)->name);
}

/* Flattens the sources' tensors and builds the name index; refuses a name
 * present twice (in two shards, or twice in one pickle). */
static col_status build_table(col_ckpt *c, col_err *err)
{
    int n = 0;
    for (int s = 0; s < c->nsrc; s++) {
        int k = source_count(&c->src[s]);
        if (k < 0 || k > INT32_MAX - n)
            return col_err_set(err, COL_EFORMAT, "checkpoint has too many tensors");
        n += k;
    }
    c->t = malloc(((size_t)n + 1) * sizeof *c->t);
    c->t_src = malloc(((size_t)n + 1) * sizeof *c->t_src);
    c->by_name = malloc(((size_t)n + 1) * sizeof *c->by_name);
    if (!c->t || !c->t_src || !c->by_name)
        return col_err_set(err, COL_ENOMEM, "out of memory for a table of %d tensors", n);
    for (int s = 0; s < c->nsrc; s++) {
        int k = source_count(&c->src[s]);
        for (int i = 0; i < k; i++) {
            const col_ckpt_tensor *t = source_get(&c->src[s], i);
            if (!t || !t->name || !t->file)
                return col_err_set(err, COL_EINTERNAL, "checkpoint source %d has no tensor %d", s, i);
            c->t_src[c->n] = s;
            c->by_name[c->n] = (ckpt_name){t->name, c->n};
            c->t[c->n++] = *t;
        }
    }
    qsort(c->by_name, (size_t)c->n, sizeof *c->by_name, cmp_name);
    for (int i = 1; i < c->n; i++) {
        const col_ckpt_tensor *a = &c->t[c->by_name[i - 1].i], *b = &c->t[c->by_name[i].i];
        if (strcmp(a->name, b->name) == 0) {
            if (strcmp(a->file, b->file) == 0)
                return col_err_set(err, COL_EFORMAT, "%s: tensor '%.200s' appears twice", a->file, a->name);
            return col_err_set(err, COL_EFORMAT, "tensor '%.200s' appears in both %s and %s", a->name, a->file,
                               b->file);
        }
    }
    return COL_OK;
}

static int find_index(const col_ckpt *c, const char *name)
{
    ckpt_name key = {name, -1};
    const ckpt_name *hit = c->n ? bsearch(&key, c->by_name, (size_t)c->n, sizeof key, cmp_name) : NULL;
    return hit ? hit->i : -1;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Opens a shard index: {"weight_map": {tensor: shard file}, ...}. Shards
 * are opened in name order from the index's directory; every mapped tensor
 * must be in its shard. Tensors of a shard missing from the weight_map are
 * kept (transformers loads whole shards too). */
static col_status open_index(col_ckpt *c, const char *path, col_err *err)
{
    char *text = NULL, *dir = NULL;
    size_t len = 0;
    const char **shards = NULL;
    cJSON *root = NULL;
    col_status st = col_read_file(path, INDEX_MAX_BYTES, &text, &len, err);
    if (st != COL_OK)
        return st;
    const char *end = NULL;
    root = cJSON_ParseWithOpts(text, &end, 0);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root || (size_t)(end - text) + strspn(end, " \t\r\n") != len || !cJSON_IsObject(root)) {
        st = col_err_set(err, COL_EFORMAT, "%s: not a valid JSON object", path);
        goto done;
    }
    if (!cJSON_IsObject(wm) || !wm->child) {
        st = col_err_set(err, COL_EFORMAT, "%s: no \"weight_map\" object with at least one tensor", path);
        goto done;
    }
    int nmap = cJSON_GetArraySize(wm);
    shards = malloc((size_t)nmap * sizeof *shards);
    if (!shards) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    int k = 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e)) {
            st = col_err_set(err, COL_EFORMAT, "%s: weight_map entry '%.200s' is not a file name", path, e->string);
            goto done;
        }
        const char *s = e->valuestring;
        if (!s[0] || strchr(s, '/') || strstr(s, "..") || strchr(s, '\\')) {
            st = col_err_set(err, COL_EFORMAT, "%s: shard name '%.200s' (for tensor '%.200s') must be a plain file "
                             "name in the same directory", path, s, e->string);
            goto done;
        }
        if (ends_with(s, ".json")) {
            st = col_err_set(err, COL_EFORMAT, "%s: shard '%.200s' is an index itself", path, s);
            goto done;
        }
        shards[k++] = s;
    }
    qsort(shards, (size_t)k, sizeof *shards, cmp_str_ptr);
    int nshard = 0;
    for (int i = 0; i < k; i++)
        if (i == 0 || strcmp(shards[i], shards[i - 1]) != 0)
            shards[nshard++] = shards[i];

    dir = strdup(path);
    if (!dir) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    for (int i = 0; i < nshard; i++) {
        char *sp = slash ? join_path(dir, shards[i]) : strdup(shards[i]);
        if (!sp) {
            st = col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        file_kind kind;
        st = detect_kind(sp, &kind, err);
        if (st == COL_OK)
            st = add_file(c, sp, kind, err);
        free(sp);
        if (st != COL_OK) {
            char why[COL_ERR_MSG_MAX];
            snprintf(why, sizeof why, "%s", err ? err->msg : "");
            col_err_set(err, st, "%s (a shard listed in %s)", why, path);
            goto done;
        }
    }
    for (int i = 1; i < c->nsrc; i++) {
        int k0 = source_rank(&c->src[0]), ki = source_rank(&c->src[i]);
        if (k0 != ki) {
            static const char *const what[] = {"safetensors", "PyTorch", ".npz"};
            st = col_err_set(err, COL_EFORMAT, "%s: mixes %s and %s shards", path, what[k0 < ki ? k0 : ki],
                             what[k0 < ki ? ki : k0]);
            goto done;
        }
    }
    if ((st = build_table(c, err)) != COL_OK)
        goto done;
    for (const cJSON *e = wm->child; e; e = e->next) {
        const char **sh = bsearch(&e->valuestring, shards, (size_t)nshard, sizeof *shards, cmp_str_ptr);
        int ti = find_index(c, e->string);
        if (!sh || ti < 0 || c->t_src[ti] != (int)(sh - shards)) {
            st = col_err_set(err, COL_EFORMAT, "%s: tensor '%.200s' is mapped to shard %.200s, which has no such "
                             "tensor", path, e->string, e->valuestring);
            goto done;
        }
    }
done:
    free(dir);
    free(shards);
    cJSON_Delete(root);
    free(text);
    return st;
}

static col_status open_path(col_ckpt *c, const char *path, col_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        static const char *const names[] = {"model.safetensors", "model.safetensors.index.json",
                                            "pytorch_model.bin", "pytorch_model.bin.index.json"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char *p = join_path(path, names[i]);
            if (!p)
                return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
            struct stat fsb;
            if (stat(p, &fsb) == 0 && !S_ISDIR(fsb.st_mode)) {
                col_status st = i == 1 || i == 3 ? open_index(c, p, err)
                                                 : add_file(c, p, i == 0 ? KIND_ST : KIND_PT, err);
                free(p);
                return st;
            }
            free(p);
        }
        return col_err_set(err, COL_EIO, "no model weights in %s: expected model.safetensors, "
                           "model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json", path);
    }
    file_kind kind;
    col_status st = detect_kind(path, &kind, err);
    if (st != COL_OK)
        return st;
    return kind == KIND_INDEX ? open_index(c, path, err) : add_file(c, path, kind, err);
}

col_status col_ckpt_open(const char *path, col_ckpt **out, col_err *err)
{
    *out = NULL;
    if (!path)
        return col_err_set(err, COL_EINVAL, "col_ckpt_open: NULL path");
    col_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    col_status st = open_path(c, path, err);
    if (st == COL_OK && !c->t) /* the index path builds the table itself */
        st = build_table(c, err);
    if (st != COL_OK) {
        col_ckpt_close(c);
        return st;
    }
    c->format = source_format(&c->src[0]);
    *out = c;
    return COL_OK;
}

void col_ckpt_close(col_ckpt *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nsrc; i++) {
        col_st_close(c->src[i].st);
        if (c->src[i].pt)
            col_pt_close(c->src[i].pt);
        col_npz_close(c->src[i].nz);
    }
    free(c->src);
    free(c->t);
    free(c->t_src);
    free(c->by_name);
    free(c);
}

int col_ckpt_count(const col_ckpt *c)
{
    return c ? c->n : 0;
}

const col_ckpt_tensor *col_ckpt_get(const col_ckpt *c, int i)
{
    return c && i >= 0 && i < c->n ? &c->t[i] : NULL;
}

const col_ckpt_tensor *col_ckpt_find(const col_ckpt *c, const char *name)
{
    if (!c || !name)
        return NULL;
    int i = find_index(c, name);
    return i >= 0 ? &c->t[i] : NULL;
}

const char *col_ckpt_tensor_meta(const col_ckpt *c, const col_ckpt_tensor *t, const char *key)
{
    if (!c || !t || t < c->t || t >= c->t + c->n)
        return NULL;
    const ckpt_source *s = &c->src[c->t_src[t - c->t]];
    return s->st ? col_st_metadata(s->st, key) : NULL;
}

const char *col_ckpt_format(const col_ckpt *c)
{
    return c ? c->format : "?";
}

/* ---- conversion to f32 ---- */

static void dims_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* dst[i] = (float)(element i read as TYPE); memcpy loads: data may be
 * unaligned. One thread: the conversions vectorize and are bound by memory
 * bandwidth (2-3 G elements/s here; two threads measured slower). */
#define CONVERT(TYPE, EXPR)                                                                                        \
    do {                                                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                                          \
            TYPE v;                                                                                                \
            memcpy(&v, p + (size_t)i * sizeof(TYPE), sizeof(TYPE));                                                \
            dst[i] = (EXPR);                                                                                       \
        }                                                                                                          \
    } while (0)

static inline float bf16_bits_to_f32(uint16_t h)
{
    /* the same as col_bf16_to_f32, inlined so the loop vectorizes */
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* col_f16_to_f32 without branches, so the loop vectorizes (4-6x faster);
 * bit-identical for all 65536 inputs, NaN payloads included (tested). */
static inline float f16_bits_to_f32(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13;           /* exponent and mantissa in f32 position */
    uint32_t e = o & 0x0f800000u;
    uint32_t normal = o + (112u << 23);                    /* rebias 15 -> 127 */
    uint32_t infnan = o + (224u << 23);                    /* exponent 31 -> 255 */
    uint32_t small = f32_bits(bits_f32(o + (113u << 23)) - 0x1p-14f); /* zero, subnormals: exact */
    uint32_t r = e == 0x0f800000u ? infnan : e == 0 ? small : normal;
    return bits_f32(r | (uint32_t)(h & 0x8000u) << 16);
}

/* n elements of dtype dt at p into dst as f32 */
static void convert(col_st_dtype dt, const unsigned char *p, int64_t n, float *dst)
{
    switch (dt) {
    case COL_ST_F32: memcpy(dst, p, (size_t)n * 4); break;
    case COL_ST_F64: CONVERT(double, (float)v); break;
    case COL_ST_F16: CONVERT(uint16_t, f16_bits_to_f32(v)); break;
    case COL_ST_BF16: CONVERT(uint16_t, bf16_bits_to_f32(v)); break;
    case COL_ST_I64: CONVERT(int64_t, (float)v); break;
    case COL_ST_I32: CONVERT(int32_t, (float)v); break;
    case COL_ST_I16: CONVERT(int16_t, (float)v); break;
    case COL_ST_I8: CONVERT(int8_t, (float)v); break;
    case COL_ST_U8: CONVERT(uint8_t, (float)v); break;
    case COL_ST_BOOL: CONVERT(uint8_t, v ? 1.0f : 0.0f); break;
    default: break;
    }
}

/* The whole pages inside [p, p + len) of a read-only file mapping leave this
 * process's resident memory (reading them again maps them back from the
 * file): a checkpoint read once, tensor by tensor, does not stay resident. */
col_status col_ckpt_check_f32(const col_ckpt_tensor *t, int ndim, const int64_t *shape, col_err *err)
{
    if (!t || !t->name || (ndim > 0 && !shape))
        return col_err_set(err, COL_EINVAL, "col_ckpt_read_f32: NULL tensor or shape");
    bool same = ndim == t->ndim;
    for (int d = 0; same && d < ndim; d++)
        same = shape[d] == t->shape[d];
    if (!same) {
        char have[160], want[160];
        dims_str(t->ndim < 0 || t->ndim > COL_MAX_DIMS ? 0 : t->ndim, t->shape, have, sizeof have);
        dims_str(ndim < 0 ? 0 : ndim, shape, want, sizeof want);
        return col_err_set(err, COL_ESHAPE, "tensor '%.200s' in %s has shape %s but %s was expected", t->name,
                           t->file ? t->file : "checkpoint", have, want);
    }
    size_t es = col_st_dtype_size(t->dtype);
    if (es == 0)
        return col_err_set(err, COL_EDTYPE, "tensor '%.200s' in %s has an unknown dtype (%d)", t->name,
                           t->file ? t->file : "checkpoint", (int)t->dtype);
    uint64_t numel = 1;
    bool overflow = false;
    for (int d = 0; d < ndim; d++)
        overflow |= t->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel);
    uint64_t nbytes;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)es, &nbytes);
    if (overflow || nbytes != t->nbytes || numel > (uint64_t)INT64_MAX || (numel > 0 && !t->data))
        return col_err_set(err, COL_EFORMAT, "tensor '%.200s' in %s: %zu bytes of data do not fit its shape",
                           t->name, t->file ? t->file : "checkpoint", t->nbytes);
    return COL_OK;
}

col_status col_ckpt_read_f32(const col_ckpt_tensor *t, int ndim, const int64_t *shape, float *dst, col_err *err)
{
    col_status st = col_ckpt_check_f32(t, ndim, shape, err);
    if (st != COL_OK)
        return st;
    size_t es = col_st_dtype_size(t->dtype);
    uint64_t numel = t->nbytes / es;
    if (numel > 0 && !dst)
        return col_err_set(err, COL_EINVAL, "col_ckpt_read_f32: NULL destination for tensor '%.200s'", t->name);
    /* in pieces: the pages of a mapped file each piece came from leave memory once it is converted; the pieces
     * on the threads (reading a mapped file is bound by its page faults as much as by the copy) */
    const int64_t piece = (int64_t)((size_t)4 << 20) / (int64_t)es, pieces = ((int64_t)numel + piece - 1) / piece;
#pragma omp parallel for schedule(dynamic, 1) if (pieces > 1)
    for (int64_t k = 0; k < pieces; k++) {
        int64_t done = k * piece, n = (int64_t)numel - done < piece ? (int64_t)numel - done : piece;
        const unsigned char *src = (const unsigned char *)t->data + (size_t)done * es;
        convert(t->dtype, src, n, dst + done);
        if (t->mapped)
            col_file_release(src, (size_t)n * es);
    }
    return COL_OK;
}
