/* torchbin.c - PyTorch zip checkpoints (torch.save since 1.6) read safely.
 *
 * Layout of a checkpoint written by torch.save(state_dict, "x.bin"):
 *   x/data.pkl       pickle (protocol 2) of the state dict
 *   x/data/<key>     raw little-endian bytes of each storage
 *   x/byteorder      "little" (absent in old files)
 *   x/version, x/.format_version, ...   ignored
 * The prefix ("x", "archive", ...) is the first path component of data.pkl.
 *
 * The pickle is run by pickle.c, which builds inert objects and refuses any
 * global outside the allow-list below. A state dict maps names to
 *   torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
 *                                   requires_grad, hooks[, metadata])
 * (optionally wrapped in _rebuild_parameter), where storage is the
 * persistent id ('storage', torch.<Type>Storage, key, location, numel).
 * Nested dicts are flattened with '.' ("model.0.weight"); plain values
 * (ints, strings, lists of numbers, ...) are skipped.
 *
 * Storages stored uncompressed and 16-byte aligned are referenced in place;
 * others are copied out of the zip. Contiguous tensors point into their
 * storage (views and tied weights share it); strided ones are copied into
 * a contiguous buffer after every index is checked against the storage.
 */
#include "checkpoint.h"
#include "pickle.h"
#include "zip_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PT_MAX_NAME COL_ZIP_MAX_NAME   /* bytes in a zip entry or tensor name */
#define PT_MAX_DEPTH 16    /* nested dicts */
#define PT_ALIGN 16        /* in-place storages must be this aligned */

typedef struct {
    const char *name;        /* the zip entry's */
    const uint8_t *data;
    size_t len;
    int dtype;             /* the storage type the pickle gave it; -1 before first use */
    int64_t numel;
} pt_entry;

struct col_pt_file {
    char *name;
    col_ckpt_tensor *tensors;
    int n, cap;
    void **owned;           /* buffers freed by col_pt_close */
    size_t nowned, owned_cap;
    void *map;
    size_t map_len;
};

typedef struct {
    col_pt_file *f;
    col_err *err;
    const char *file;
    col_zip_entry *zip;     /* the entries read, sorted by name */
    pt_entry *entries;      /* entries[i] describes zip[i] */
    size_t nentries;
    const char *prefix;     /* "x/" */
    size_t prefix_len;
    size_t copy_budget;     /* bytes left for strided copies */
    size_t visits;          /* bound on object visits (the memo can share objects) */
} pt_ctx;

static const uint64_t pt_empty_data[1];

static size_t pt_esize(col_st_dtype dt)
{
    static const unsigned char sz[COL_ST_DTYPE_COUNT] = {
        [COL_ST_F64] = 8, [COL_ST_F32] = 4, [COL_ST_F16] = 2, [COL_ST_BF16] = 2, [COL_ST_I64] = 8,
        [COL_ST_I32] = 4, [COL_ST_I16] = 2, [COL_ST_I8] = 1, [COL_ST_U8] = 1, [COL_ST_BOOL] = 1};
    return (unsigned)dt < COL_ST_DTYPE_COUNT ? sz[dt] : 0;
}

/* torch.<Name>Storage -> dtype, or -1. */
static int pt_storage_dtype(const char *name)
{
    static const struct { const char *name; col_st_dtype dt; } map[] = {
        {"DoubleStorage", COL_ST_F64}, {"FloatStorage", COL_ST_F32}, {"HalfStorage", COL_ST_F16},
        {"BFloat16Storage", COL_ST_BF16}, {"LongStorage", COL_ST_I64}, {"IntStorage", COL_ST_I32},
        {"ShortStorage", COL_ST_I16}, {"CharStorage", COL_ST_I8}, {"ByteStorage", COL_ST_U8},
        {"BoolStorage", COL_ST_BOOL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(name, map[i].name))
            return (int)map[i].dt;
    return -1;
}

/* Any torch.<Alnum>Storage is a harmless class reference (never called);
 * unsupported ones are refused with a clear message when a tensor uses them. */
static bool pt_is_storage_name(const char *n)
{
    size_t len = strlen(n);
    if (len <= 7 || strcmp(n + len - 7, "Storage"))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((n[i] >= 'A' && n[i] <= 'Z') || (n[i] >= 'a' && n[i] <= 'z') || (n[i] >= '0' && n[i] <= '9') ||
              n[i] == '_'))
            return false;
    return true;
}

static bool pt_allow(const char *module, const char *name, void *user)
{
    (void)user;
    if (!strcmp(module, "collections"))
        return !strcmp(name, "OrderedDict");
    if (!strcmp(module, "torch._utils"))
        return !strcmp(name, "_rebuild_tensor_v2") || !strcmp(name, "_rebuild_parameter") ||
               !strcmp(name, "_rebuild_parameter_with_state");
    if (!strcmp(module, "torch"))
        return pt_is_storage_name(name);
    return false;
}

static col_status pt_nomem(pt_ctx *c)
{
    return col_err_set(c->err, COL_ENOMEM, "%s: out of memory", c->file);
}

static bool pt_own(col_pt_file *f, void *p)
{
    if (f->nowned == f->owned_cap) {
        size_t cap = f->owned_cap ? 2 * f->owned_cap : 16;
        void **o = realloc(f->owned, cap * sizeof *o);
        if (!o)
            return false;
        f->owned = o;
        f->owned_cap = cap;
    }
    f->owned[f->nowned++] = p;
    return true;
}

/* ---- the zip layer (zipread.c) ---- */

static pt_entry *pt_find(const pt_ctx *c, const char *name)
{
    const col_zip_entry *z = col_zip_find(c->zip, c->nentries, name);
    return z ? &c->entries[z - c->zip] : NULL;
}

/* Entries we read: "<p>/data.pkl", "<p>/byteorder", "<p>/data/<key>". */
static int pt_wanted(const char *name, bool regular, void *user, col_err *err)
{
    (void)user;
    (void)err;
    const char *slash = name && regular ? strchr(name, '/') : NULL;
    if (!slash || slash == name)
        return 0;
    const char *rest = slash + 1;
    return !strcmp(rest, "data.pkl") || !strcmp(rest, "byteorder") || (!strncmp(rest, "data/", 5) && rest[5]);
}

/* Reads the zip; the bytes copied out of it become the file's. */
static col_status pt_read_zip(pt_ctx *c, const uint8_t *in, size_t len)
{
    col_status st = col_zip_read(in, len, c->file, PT_ALIGN, false, pt_wanted, NULL, &c->zip, &c->nentries, c->err);
    if (st != COL_OK)
        return st;
    c->entries = calloc(c->nentries + 1, sizeof *c->entries);
    if (!c->entries)
        return pt_nomem(c);
    for (size_t i = 0; i < c->nentries; i++) {
        col_zip_entry *z = &c->zip[i];
        c->entries[i] = (pt_entry){.name = z->name, .data = z->data, .len = z->len, .dtype = -1};
        if (z->copy) {
            if (!pt_own(c->f, z->copy))
                return pt_nomem(c);
            z->copy = NULL;
        }
    }
    return COL_OK;
}

/* ---- from pickle objects to tensors ---- */

static bool is_call_to(const col_pk_obj *o, const char *module, const char *name)
{
    return o->kind == COL_PK_CALL && !strcmp(o->func->module, module) && !strcmp(o->func->name, name);
}

static col_status pt_bad(pt_ctx *c, const char *tname, const char *what)
{
    return col_err_set(c->err, COL_EFORMAT, "%s: tensor '%s': %s", c->file, tname, what);
}

static void dims_str(char *buf, size_t n, int nd, const int64_t *v)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)v[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* Reads a tuple of ints (size or stride). */
static bool int_tuple(const col_pk_obj *o, int64_t *out, int *nd)
{
    if (o->kind != COL_PK_TUPLE || o->n > COL_MAX_DIMS)
        return false;
    for (size_t i = 0; i < o->n; i++) {
        if (o->items[i]->kind != COL_PK_INT || o->items[i]->i < 0)
            return false;
        out[i] = o->items[i]->i;
    }
    *nd = (int)o->n;
    return true;
}

/* Copies a strided view (nd >= 1: a 0-d tensor is always contiguous) into
 * dst (contiguous, row-major). src is element [0,..,0] of the view; every
 * index was checked against the storage. */
static void pt_gather(uint8_t *dst, const uint8_t *src, size_t es, int nd, const int64_t *size, const int64_t *stride,
                      int64_t numel)
{
    int64_t idx[COL_MAX_DIMS] = {0};
    int64_t inner = size[nd - 1], is = stride[nd - 1];
    for (int64_t row = 0; row < numel / inner; row++) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++)
            off += idx[d] * stride[d];
        const uint8_t *s = src + (size_t)off * es;
        uint8_t *o = dst + (size_t)(row * inner) * es;
        switch (es) {
        case 1: for (int64_t j = 0; j < inner; j++) memcpy(o + j, s + j * is, 1); break;
        case 2: for (int64_t j = 0; j < inner; j++) memcpy(o + 2 * j, s + 2 * j * is, 2); break;
        case 4: for (int64_t j = 0; j < inner; j++) memcpy(o + 4 * j, s + 4 * j * is, 4); break;
        default: for (int64_t j = 0; j < inner; j++) memcpy(o + 8 * j, s + 8 * j * is, 8); break;
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < size[d])
                break;
            idx[d] = 0;
        }
    }
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static col_status pt_tensor(pt_ctx *c, const col_pk_obj *call, const char *tname, col_ckpt_tensor *t)
{
    if (is_call_to(call, "torch._utils", "_rebuild_parameter") ||
        is_call_to(call, "torch._utils", "_rebuild_parameter_with_state")) {
        size_t want = strcmp(call->func->name, "_rebuild_parameter") ? 4 : 3;
        if (call->args->n != want || call->args->items[1]->kind != COL_PK_BOOL)
            return pt_bad(c, tname, "torch._utils._rebuild_parameter with unexpected arguments");
        call = call->args->items[0];
    }
    if (!is_call_to(call, "torch._utils", "_rebuild_tensor_v2")) {
        char msg[600];
        snprintf(msg, sizeof msg, "a call of %s.%s is not a tensor", call->kind == COL_PK_CALL ? call->func->module : "?",
                 call->kind == COL_PK_CALL ? call->func->name : col_pk_kind_name(call->kind));
        return pt_bad(c, tname, msg);
    }
    const col_pk_obj *args = call->args;
    if (args->n != 6 && args->n != 7)
        return pt_bad(c, tname, "_rebuild_tensor_v2 needs 6 or 7 arguments");
    const col_pk_obj *pid = args->items[0], *off = args->items[1];
    int64_t size[COL_MAX_DIMS], stride[COL_MAX_DIMS];
    int nd = 0, nd_stride = -1;
    if (pid->kind != COL_PK_PERSID || off->kind != COL_PK_INT || off->i < 0 || !int_tuple(args->items[2], size, &nd) ||
        !int_tuple(args->items[3], stride, &nd_stride) || nd != nd_stride || args->items[4]->kind != COL_PK_BOOL)
        return pt_bad(c, tname, "_rebuild_tensor_v2 arguments are not (storage, offset >= 0, size, stride, "
                                "requires_grad, ...) with at most 8 non-negative dims");
    /* ('storage', torch.<Type>Storage, key, location, numel) */
    const col_pk_obj *p = pid->args;
    if (p->kind != COL_PK_TUPLE || p->n != 5 || p->items[0]->kind != COL_PK_STR || strcmp(p->items[0]->s, "storage") ||
        p->items[1]->kind != COL_PK_GLOBAL || p->items[2]->kind != COL_PK_STR || p->items[3]->kind != COL_PK_STR ||
        p->items[4]->kind != COL_PK_INT || p->items[4]->i < 0)
        return pt_bad(c, tname, "the storage is not ('storage', type, key, location, numel)");
    const col_pk_obj *ty = p->items[1], *key = p->items[2];
    int dt = strcmp(ty->module, "torch") ? -1 : pt_storage_dtype(ty->name);
    if (dt < 0) {
        char msg[600];
        snprintf(msg, sizeof msg, "storage type %s.%s is not supported", ty->module, ty->name);
        return pt_bad(c, tname, msg);
    }
    size_t es = pt_esize((col_st_dtype)dt);
    int64_t snumel = p->items[4]->i;
    if (key->slen == 0 || key->slen > 256 || strlen(key->s) != key->slen)
        return pt_bad(c, tname, "storage key is empty, too long or holds a NUL");

    /* the storage entry */
    char ename[PT_MAX_NAME + 300];
    snprintf(ename, sizeof ename, "%.*sdata/%s", (int)c->prefix_len, c->prefix, key->s);
    pt_entry *e = pt_find(c, ename);
    if (!e)
        return col_err_set(c->err, COL_EFORMAT, "%s: tensor '%s': storage entry '%s' is missing from the zip", c->file,
                           tname, ename);
    if (e->dtype >= 0 && (e->dtype != dt || e->numel != snumel))
        return pt_bad(c, tname, "its storage is used elsewhere with another type or size");
    if (snumel > INT64_MAX / 8 || (uint64_t)snumel * es != e->len)
        return col_err_set(c->err, COL_EFORMAT,
                           "%s: tensor '%s': storage '%s' has %zu bytes, but the pickle says %lld elements of %zu bytes",
                           c->file, tname, ename, e->len, (long long)snumel, es);
    e->dtype = dt;
    e->numel = snumel;

    /* shape, bounds, contiguity */
    int64_t numel = 1, last = off->i;   /* last: highest element index the view reads */
    bool overflow = false;
    for (int d = 0; d < nd; d++)
        overflow |= __builtin_mul_overflow(numel, size[d], &numel);
    if (!overflow && numel > 0)
        for (int d = 0; d < nd; d++) {
            int64_t span;
            overflow |= __builtin_mul_overflow(size[d] - 1, stride[d], &span) || __builtin_add_overflow(last, span, &last);
        }
    char sbuf[200], tbuf[200];
    dims_str(sbuf, sizeof sbuf, nd, size);
    dims_str(tbuf, sizeof tbuf, nd, stride);
    if (overflow || numel > INT64_MAX / 8 || (numel > 0 && last >= snumel))
        return col_err_set(c->err, COL_EFORMAT,
                           "%s: tensor '%s': size %s, stride %s at offset %lld reads past the end of storage '%s' "
                           "(%lld elements)", c->file, tname, sbuf, tbuf, (long long)off->i, key->s, (long long)snumel);
    bool contiguous = true;
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (size[d] != 1 && stride[d] != expect)
            contiguous = false;
        expect *= size[d];
    }
    t->name = tname;
    t->dtype = (col_st_dtype)dt;
    t->ndim = nd;
    for (int d = 0; d < nd; d++)
        t->shape[d] = size[d];
    t->nbytes = (size_t)numel * es;
    t->file = c->f->name;
    if (numel == 0) {
        t->data = pt_empty_data;
    } else if (contiguous) {
        t->data = e->data + (size_t)off->i * es;
    } else {
        if (t->nbytes > c->copy_budget)
            return col_err_set(c->err, COL_EFORMAT,
                               "%s: tensor '%s': the strided view %s/%s would expand to %zu bytes, more than the "
                               "checkpoint's storages justify", c->file, tname, sbuf, tbuf, t->nbytes);
        c->copy_budget -= t->nbytes;
        uint8_t *buf = malloc(t->nbytes);
        if (!buf || !pt_own(c->f, buf)) {
            free(buf);
            return pt_nomem(c);
        }
        pt_gather(buf, e->data + (size_t)off->i * es, es, nd, size, stride, numel);
        t->data = buf;
    }
    return COL_OK;
}

static col_status pt_budget(pt_ctx *c)
{
    if (c->visits == 0)
        return col_err_set(c->err, COL_EFORMAT, "%s: the pickle shares objects too often to walk", c->file);
    c->visits--;
    return COL_OK;
}

/* Whether o holds anything tensor-like (a call or a storage). */
static col_status pt_has_tensor(pt_ctx *c, const col_pk_obj *o, int depth, bool *has)
{
    col_status st;
    if ((st = pt_budget(c)))
        return st;
    if (o->kind == COL_PK_CALL || o->kind == COL_PK_PERSID) {
        *has = true;
        return COL_OK;
    }
    if (o->kind != COL_PK_TUPLE && o->kind != COL_PK_LIST && o->kind != COL_PK_DICT)
        return COL_OK;
    if (depth > 4 * PT_MAX_DEPTH)
        return col_err_set(c->err, COL_EFORMAT, "%s: the pickle nests containers too deeply", c->file);
    size_t n = o->kind == COL_PK_DICT ? 2 * o->n : o->n;
    for (size_t i = 0; i < n && !*has; i++)
        if ((st = pt_has_tensor(c, o->items[i], depth + 1, has)))
            return st;
    return COL_OK;
}

static col_status pt_add(pt_ctx *c, const col_pk_obj *call, const char *name)
{
    col_pt_file *f = c->f;
    if (f->n == f->cap) {
        if (f->cap >= (1 << 24))
            return col_err_set(c->err, COL_EFORMAT, "%s: too many tensors", c->file);
        int cap = f->cap ? 2 * f->cap : 64;
        col_ckpt_tensor *t = realloc(f->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return pt_nomem(c);
        f->tensors = t;
        f->cap = cap;
    }
    char *nm = strdup(name);
    if (!nm || !pt_own(f, nm)) {
        free(nm);
        return pt_nomem(c);
    }
    col_ckpt_tensor *t = &f->tensors[f->n];
    memset(t, 0, sizeof *t);
    col_status st = pt_tensor(c, call, nm, t);
    if (st == COL_OK)
        f->n++;
    return st;
}

/* Walks a dict: tensors are recorded under name (prefix + key), dicts are
 * descended into, values without tensors are skipped. */
static col_status pt_walk_dict(pt_ctx *c, const col_pk_obj *d, char *name, size_t nlen, int depth)
{
    col_status st;
    if (depth > PT_MAX_DEPTH)
        return col_err_set(c->err, COL_EFORMAT, "%s: dicts nested more than %d deep", c->file, PT_MAX_DEPTH);
    for (size_t i = 0; i < d->n; i++) {
        const col_pk_obj *k = d->items[2 * i], *v = d->items[2 * i + 1];
        if ((st = pt_budget(c)))
            return st;
        if (v->kind != COL_PK_CALL) {
            bool has = false;
            if ((st = pt_has_tensor(c, v, 0, &has)))
                return st;
            if (!has)
                continue;   /* epoch counters, hyper-parameters, ... */
        }
        if (k->kind != COL_PK_STR || k->slen == 0 || strlen(k->s) != k->slen)
            return col_err_set(c->err, COL_EFORMAT, "%s: a state-dict key is not a non-empty string (%s)", c->file,
                               col_pk_kind_name(k->kind));
        size_t klen = k->slen + (nlen ? 1 : 0);
        if (nlen + klen > PT_MAX_NAME)
            return col_err_set(c->err, COL_EFORMAT, "%s: a tensor name is longer than %d bytes", c->file, PT_MAX_NAME);
        if (nlen)
            name[nlen] = '.';
        memcpy(name + nlen + (nlen ? 1 : 0), k->s, k->slen + 1);
        if (v->kind == COL_PK_CALL)
            st = pt_add(c, v, name);
        else if (v->kind == COL_PK_DICT)
            st = pt_walk_dict(c, v, name, nlen + klen, depth + 1);
        else
            st = col_err_set(c->err, COL_EFORMAT, "%s: '%s' is a %s holding tensors; only tensors and dicts of tensors "
                             "are read", c->file, name, col_pk_kind_name(v->kind));
        name[nlen] = '\0';
        if (st)
            return st;
    }
    return COL_OK;
}

static int tensor_name_cmp(const void *a, const void *b)
{
    return strcmp((*(const col_ckpt_tensor *const *)a)->name, (*(const col_ckpt_tensor *const *)b)->name);
}

static col_status pt_check_names(pt_ctx *c)
{
    col_pt_file *f = c->f;
    if (f->n < 2)
        return COL_OK;
    const col_ckpt_tensor **idx = malloc((size_t)f->n * sizeof *idx);
    if (!idx)
        return pt_nomem(c);
    for (int i = 0; i < f->n; i++)
        idx[i] = &f->tensors[i];
    qsort(idx, (size_t)f->n, sizeof *idx, tensor_name_cmp);
    col_status st = COL_OK;
    for (int i = 1; i < f->n && !st; i++)
        if (!strcmp(idx[i - 1]->name, idx[i]->name))
            st = col_err_set(c->err, COL_EFORMAT, "%s: tensor name '%s' appears twice", c->file, idx[i]->name);
    free(idx);
    return st;
}

/* ---- public ---- */

static col_status pt_parse(col_pt_file *f, const uint8_t *in, size_t len, col_err *err)
{
    pt_ctx c = {.f = f, .err = err, .file = f->name};
    col_status st;
    col_pk *pk = NULL;
    char *name = NULL;
    if (len >= 2 && in[0] == 0x80 && in[1] <= 5) {
        st = col_err_set(err, COL_EFORMAT, "%s: this is torch.save's legacy (pre-1.6, non-zip) format, which is not "
                         "supported; re-save it with a recent torch", f->name);
        goto done;
    }
    if (len < 4 || memcmp(in, "PK", 2)) {
        st = col_err_set(err, COL_EFORMAT, "%s: not a PyTorch checkpoint (no zip signature)", f->name);
        goto done;
    }
    if ((st = pt_read_zip(&c, in, len)))
        goto done;

    /* exactly one "<p>/data.pkl" */
    const pt_entry *pkl = NULL;
    for (size_t i = 0; i < c.nentries; i++) {
        const char *slash = strchr(c.entries[i].name, '/');
        if (strcmp(slash + 1, "data.pkl"))
            continue;
        if (pkl) {
            st = col_err_set(err, COL_EFORMAT, "%s: two pickles in one checkpoint ('%s' and '%s')", f->name, pkl->name,
                             c.entries[i].name);
            goto done;
        }
        pkl = &c.entries[i];
    }
    if (!pkl) {
        st = col_err_set(err, COL_EFORMAT, "%s: the zip holds no <name>/data.pkl; not a torch.save checkpoint", f->name);
        goto done;
    }
    c.prefix = pkl->name;
    c.prefix_len = (size_t)(strchr(pkl->name, '/') - pkl->name) + 1;

    char bo[PT_MAX_NAME + 16];
    snprintf(bo, sizeof bo, "%.*sbyteorder", (int)c.prefix_len, c.prefix);
    const pt_entry *order = pt_find(&c, bo);
    if (order && !(order->len == 6 && !memcmp(order->data, "little", 6))) {
        bool big = order->len == 3 && !memcmp(order->data, "big", 3);
        st = col_err_set(err, COL_EFORMAT, "%s: %s: %s", f->name, bo,
                         big ? "the checkpoint is big-endian; only little-endian checkpoints are supported"
                             : "expected 'little'");
        goto done;
    }

    char what[PT_MAX_NAME + 64];
    snprintf(what, sizeof what, "%s: %s", f->name, pkl->name);
    const col_pk_obj *root;
    if ((st = col_pk_load(pkl->data, pkl->len, what, pt_allow, NULL, &pk, &root, err)))
        goto done;
    if (root->kind != COL_PK_DICT) {
        st = col_err_set(err, COL_EFORMAT, "%s: the pickle holds a %s%s, not a state dict", f->name,
                         col_pk_kind_name(root->kind), root->kind == COL_PK_CALL ? " (a bare tensor?)" : "");
        goto done;
    }
    size_t storage_bytes = 0;
    for (size_t i = 0; i < c.nentries; i++)
        storage_bytes += c.entries[i].len;
    c.copy_budget = storage_bytes > SIZE_MAX / 8 ? SIZE_MAX : 4 * storage_bytes + (1u << 20);
    c.visits = 16 * col_pk_count(pk) + 4096;
    name = malloc(PT_MAX_NAME + 2);
    if (!name) {
        st = pt_nomem(&c);
        goto done;
    }
    name[0] = '\0';
    if ((st = pt_walk_dict(&c, root, name, 0, 0)) || (st = pt_check_names(&c)))
        goto done;
done:
    free(name);
    col_pk_free(pk);
    free(c.entries);
    col_zip_free(c.zip, c.nentries);
    return st;
}

static col_pt_file *pt_new(const char *name)
{
    col_pt_file *f = calloc(1, sizeof *f);
    if (f && !(f->name = strdup(name ? name : "pytorch checkpoint"))) {
        free(f);
        f = NULL;
    }
    return f;
}

col_status col_pt_parse(const void *data, size_t len, const char *name, col_pt_file **out, col_err *err)
{
    *out = NULL;
    col_pt_file *f = pt_new(name);
    if (!f)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", name ? name : "pytorch checkpoint");
    col_status st = pt_parse(f, data, len, err);
    if (st) {
        col_pt_close(f);
        return st;
    }
    *out = f;
    return COL_OK;
}

col_status col_pt_open(const char *path, col_pt_file **out, col_err *err)
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
    if (sb.st_size < 4) {
        close(fd);
        return col_err_set(err, COL_EFORMAT, "%s: not a PyTorch checkpoint (%lld bytes)", path,
                           (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return col_err_set(err, COL_EIO, "%s: cannot map: %s", path, strerror(errno));
    col_pt_file *f = pt_new(path);
    if (!f) {
        munmap(map, len);
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    }
    f->map = map;
    f->map_len = len;
    col_status st = pt_parse(f, map, len, err);
    if (st) {
        col_pt_close(f);
        return st;
    }
    for (int i = 0; i < f->n; i++) { /* storages read in place (not decompressed) lie in the mapping */
        const unsigned char *d = f->tensors[i].data, *m = map;
        f->tensors[i].mapped = d && d >= m && d < m + len;
    }
    *out = f;
    return COL_OK;
}

int col_pt_count(const col_pt_file *f) { return f ? f->n : 0; }

const col_ckpt_tensor *col_pt_get(const col_pt_file *f, int i)
{
    return f && i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

void col_pt_close(col_pt_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->nowned; i++)
        free(f->owned[i]);
    free(f->owned);
    free(f->tensors);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->name);
    free(f);
}
