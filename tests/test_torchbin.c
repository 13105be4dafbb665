/* test_torchbin.c - PyTorch zip checkpoints (libcore/formats/torchbin.c, pickle.c).
 *
 * 1. Every fixture written by tools/refgen/make_torch_fixtures.py is read
 *    three ways (col_pt_open, col_pt_parse from a 64-aligned buffer, from a
 *    misaligned buffer) and every tensor's name, order, dtype, shape and raw
 *    bytes are compared with reference.json, which torch wrote directly.
 * 2. Refusals with their messages: a malicious pickle (os.system through
 *    REDUCE, and through STACK_GLOBAL), unknown and unsupported opcodes,
 *    the legacy format, truncated zips, missing / short / duplicate storage
 *    entries, views reaching past their storage, big-endian byteorder, ...
 *    Zips are rebuilt in the test with libarchive; pickles are written by
 *    hand with the small builder below.
 * 3. Strided views of hand-written storages against an index formula.
 * 4. Random byte flips and truncations of every fixture never crash.
 */
#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "pickle.h"
#include "testlib.h"

#ifdef COL_SRC_ASSET_DIR
#define FIX COL_SRC_ASSET_DIR "/../tests/fixtures/torchbin"
#else
#define FIX "tests/fixtures/torchbin"
#endif

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    if (!b)
        return NULL;
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static uint8_t *fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIX, name);
    uint8_t *b = slurp(path, len);
    if (!b) {
        printf("Bail out! cannot read %s\n", path);
        exit(1);
    }
    return b;
}

/* ---- zips built in the test ---- */

typedef struct {
    char name[128];
    uint8_t *data;
    size_t len;
} zent;

static int unzip(const uint8_t *buf, size_t len, zent *out, int max)
{
    struct archive *a = archive_read_new();
    archive_read_support_format_zip(a);
    int n = 0;
    if (archive_read_open_memory(a, buf, len) == ARCHIVE_OK) {
        struct archive_entry *e;
        while (n < max && archive_read_next_header(a, &e) == ARCHIVE_OK) {
            snprintf(out[n].name, sizeof out[n].name, "%s", archive_entry_pathname(e));
            out[n].len = (size_t)archive_entry_size(e);
            out[n].data = malloc(out[n].len + 1);
            archive_read_data(a, out[n].data, out[n].len);
            n++;
        }
    }
    archive_read_free(a);
    return n;
}

static uint8_t *zip(const zent *e, int n, size_t *outlen)
{
    size_t cap = 8192;
    for (int i = 0; i < n; i++)
        cap += e[i].len + 512;
    uint8_t *buf = malloc(cap);
    size_t used = 0;
    struct archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    archive_write_zip_set_compression_store(a);
    archive_write_open_memory(a, buf, cap, &used);
    for (int i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].name);
        archive_entry_set_filetype(ae, AE_IFREG);
        archive_entry_set_perm(ae, 0644);
        archive_entry_set_size(ae, (la_int64_t)e[i].len);
        archive_write_header(a, ae);
        archive_write_data(a, e[i].data, e[i].len);
        archive_entry_free(ae);
    }
    archive_write_close(a);
    archive_write_free(a);
    *outlen = used;
    return buf;
}

static void free_ents(zent *e, int n)
{
    for (int i = 0; i < n; i++)
        free(e[i].data);
}

static zent *find_ent(zent *e, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name))
            return &e[i];
    return NULL;
}

/* Parses buf; returns the status and leaves the message in err. */
static col_status parse(const uint8_t *buf, size_t len, const char *name, col_err *err)
{
    col_pt_file *f = NULL;
    col_err_clear(err);
    col_status st = col_pt_parse(buf, len, name, &f, err);
    col_pt_close(f);
    return st;
}

/* ---- hand-written pickles ---- */

typedef struct {
    uint8_t b[8192];
    size_t n;
} pkb;

static void op(pkb *p, uint8_t o) { p->b[p->n++] = o; }
static void raw(pkb *p, const void *d, size_t n)
{
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void str(pkb *p, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    uint8_t len[4] = {n & 255, (n >> 8) & 255, (n >> 16) & 255, n >> 24};
    op(p, 'X');
    raw(p, len, 4);
    raw(p, s, n);
}
static void i32(pkb *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    uint8_t b[4] = {u & 255, (u >> 8) & 255, (u >> 16) & 255, u >> 24};
    op(p, 'J');
    raw(p, b, 4);
}
static void i64(pkb *p, int64_t v)   /* LONG1 with 8 bytes */
{
    uint64_t u = (uint64_t)v;
    op(p, 0x8a);
    op(p, 8);
    for (int i = 0; i < 8; i++)
        op(p, (uint8_t)(u >> (8 * i)));
}
static void global(pkb *p, const char *mod, const char *name)
{
    op(p, 'c');
    raw(p, mod, strlen(mod));
    op(p, '\n');
    raw(p, name, strlen(name));
    op(p, '\n');
}
static void odict(pkb *p)
{
    global(p, "collections", "OrderedDict");
    op(p, ')');
    op(p, 'R');
}
static void ints(pkb *p, int nd, const int64_t *v)
{
    op(p, '(');
    for (int i = 0; i < nd; i++)
        i64(p, v[i]);
    op(p, 't');
}
/* _rebuild_tensor_v2(('storage', torch.<type>, key, 'cpu', numel), off, size, stride, False, OrderedDict()) */
static void tensor(pkb *p, const char *type, const char *key, int64_t numel, int64_t off, int nd, const int64_t *size,
                   const int64_t *stride)
{
    global(p, "torch._utils", "_rebuild_tensor_v2");
    op(p, '(');
    op(p, '(');
    str(p, "storage");
    global(p, "torch", type);
    str(p, key);
    str(p, "cpu");
    i64(p, numel);
    op(p, 't');
    op(p, 'Q');
    i64(p, off);
    ints(p, nd, size);
    ints(p, nd, stride);
    op(p, 0x89);
    odict(p);
    op(p, 't');
    op(p, 'R');
}

/* A torch-like zip: archive/data.pkl, archive/byteorder, archive/data/0 holding n floats 0, 1.5, 3, ... */
static uint8_t *torch_zip(const pkb *p, int nfloats, size_t *len)
{
    float *s = malloc(sizeof(float) * (size_t)(nfloats > 0 ? nfloats : 1));
    for (int i = 0; i < nfloats; i++)
        s[i] = 1.5f * (float)i;
    zent e[3] = {{"archive/data.pkl", (uint8_t *)p->b, p->n},
                 {"archive/byteorder", (uint8_t *)"little", 6},
                 {"archive/data/0", (uint8_t *)s, sizeof(float) * (size_t)nfloats}};
    uint8_t *z = zip(e, 3, len);
    free(s);
    return z;
}

/* One state dict {"w": tensor(...)} over storage 0 (n floats); returns the parse status. */
static col_status one_tensor(int nfloats, const char *type, int64_t numel, int64_t off, int nd, const int64_t *size,
                             const int64_t *stride, col_err *err)
{
    pkb p = {.n = 0};
    op(&p, 0x80);
    op(&p, 2);
    odict(&p);
    op(&p, '(');
    str(&p, "w");
    tensor(&p, type, "0", numel, off, nd, size, stride);
    op(&p, 'u');
    op(&p, '.');
    size_t len;
    uint8_t *z = torch_zip(&p, nfloats, &len);
    col_status st = parse(z, len, "hand.bin", err);
    free(z);
    return st;
}

/* Zips a pickle p with one 4-float storage and parses it. */
static col_status run_pickle(const pkb *p, col_err *err)
{
    size_t len;
    uint8_t *z = torch_zip(p, 4, &len);
    col_status st = parse(z, len, "hand.bin", err);
    free(z);
    return st;
}

/* ---- 1. fixtures against reference.json ---- */

static bool same_tensor(const col_ckpt_tensor *t, const cJSON *ref, char *why, size_t nwhy)
{
    const char *name = cJSON_GetObjectItem(ref, "name")->valuestring;
    const char *dt = cJSON_GetObjectItem(ref, "dtype")->valuestring;
    const cJSON *shape = cJSON_GetObjectItem(ref, "shape");
    const char *hex = cJSON_GetObjectItem(ref, "hex")->valuestring;
    if (strcmp(t->name, name)) {
        snprintf(why, nwhy, "name %s, want %s", t->name, name);
        return false;
    }
    if (strcmp(col_st_dtype_name(t->dtype), dt)) {
        snprintf(why, nwhy, "%s: dtype %s, want %s", name, col_st_dtype_name(t->dtype), dt);
        return false;
    }
    if (t->ndim != cJSON_GetArraySize(shape)) {
        snprintf(why, nwhy, "%s: ndim %d", name, t->ndim);
        return false;
    }
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble) {
            snprintf(why, nwhy, "%s: shape[%d] = %lld", name, d, (long long)t->shape[d]);
            return false;
        }
    size_t nb = strlen(hex) / 2;
    if (t->nbytes != nb) {
        snprintf(why, nwhy, "%s: %zu bytes, want %zu", name, t->nbytes, nb);
        return false;
    }
    const uint8_t *b = t->data;
    for (size_t i = 0; i < nb; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        if (b[i] != v) {
            snprintf(why, nwhy, "%s: byte %zu is %02x, want %02x", name, i, b[i], v);
            return false;
        }
    }
    return true;
}

static void check_file(const col_pt_file *f, const cJSON *refs, const char *how, const char *fname)
{
    int n = cJSON_GetArraySize(refs);
    TL_OK(col_pt_count(f) == n, "%s (%s): %d tensors, want %d", fname, how, col_pt_count(f), n);
    char why[256] = "";
    bool ok = col_pt_count(f) == n;
    for (int i = 0; i < n && ok; i++)
        ok = same_tensor(col_pt_get(f, i), cJSON_GetArrayItem(refs, i), why, sizeof why);
    TL_OK(ok, "%s (%s): every name, dtype, shape and byte matches torch %s", fname, how, why);
}

static void test_fixtures(void)
{
    size_t len;
    char *js = (char *)fixture("reference.json", &len);
    cJSON *root = cJSON_Parse(js);
    free(js);
    if (!root) {
        printf("Bail out! reference.json does not parse\n");
        exit(1);
    }
    const cJSON *refs;
    cJSON_ArrayForEach(refs, root) {
        const char *fname = refs->string;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", FIX, fname);
        col_err err = {0};
        col_pt_file *f = NULL;
        col_status st = col_pt_open(path, &f, &err);
        TL_OK(st == COL_OK, "%s: col_pt_open: %s", fname, err.msg);
        if (st == COL_OK)
            check_file(f, refs, "mapped", fname);
        col_pt_close(f);

        uint8_t *img = fixture(fname, &len);
        /* 64-aligned: stored storages are referenced in place */
        uint8_t *al = aligned_alloc(64, (len + 63) / 64 * 64);
        memcpy(al, img, len);
        st = col_pt_parse(al, len, fname, &f, &err);
        TL_OK(st == COL_OK, "%s: col_pt_parse (aligned): %s", fname, err.msg);
        if (st == COL_OK) {
            check_file(f, refs, "aligned buffer", fname);
            int inside = 0;
            for (int i = 0; i < col_pt_count(f); i++) {
                const uint8_t *d = col_pt_get(f, i)->data;
                inside += d >= al && d < al + len;
            }
            if (!strstr(fname, "deflate"))
                TL_OK(inside > 0, "%s: %d tensors point into the input (no copy)", fname, inside);
            else
                TL_OK(inside == 0, "%s: deflated storages are copied", fname);
        }
        col_pt_close(f);
        free(al);
        /* misaligned: every storage is copied */
        uint8_t *mis = malloc(len + 1);
        memcpy(mis + 1, img, len);
        st = col_pt_parse(mis + 1, len, fname, &f, &err);
        TL_OK(st == COL_OK, "%s: col_pt_parse (misaligned): %s", fname, err.msg);
        if (st == COL_OK) {
            check_file(f, refs, "misaligned buffer", fname);
            int bad = 0;
            for (int i = 0; i < col_pt_count(f); i++) {
                const col_ckpt_tensor *t = col_pt_get(f, i);
                const uint8_t *d = t->data;
                size_t es = col_st_dtype_size(t->dtype);
                bad += (d >= mis && d <= mis + len) || (uintptr_t)d % es != 0;
            }
            TL_OK(bad == 0, "%s: from a misaligned buffer every tensor is copied and aligned", fname);
        }
        col_pt_close(f);
        free(mis);
        free(img);
    }
    cJSON_Delete(root);

    /* tied weights and views share one storage */
    col_err err = {0};
    col_pt_file *f = NULL;
    col_status st = col_pt_open(FIX "/views.bin", &f, &err);
    TL_OK(st == COL_OK, "views.bin opens: %s", err.msg);
    if (st == COL_OK) {
        const col_ckpt_tensor *base = col_pt_get(f, 0), *tied = col_pt_get(f, 1), *row = col_pt_get(f, 2);
        TL_OK(base->data == tied->data, "views.bin: tied weights share their data");
        TL_OK((const float *)row->data == (const float *)base->data + 6, "views.bin: a row view points into its storage");
    }
    col_pt_close(f);
}

/* ---- 2. refusals ---- */

static void expect(col_status st, const col_err *err, const char *what, const char *s1, const char *s2)
{
    bool ok = st == COL_EFORMAT && strstr(err->msg, s1) && (!s2 || strstr(err->msg, s2));
    TL_OK(ok, "%s is refused: %s", what, err->msg);
}

static void test_malicious(void)
{
    size_t len;
    col_err err = {0};
    uint8_t *m = fixture("malicious.bin", &len);
    expect(parse(m, len, "pytorch_model.bin", &err), &err, "os.system via REDUCE", "posix.system", "may be malicious");
    TL_OK(strstr(err.msg, "pytorch_model.bin") != NULL, "the message names the file");
    free(m);
    col_pt_file *f = NULL;
    expect(col_pt_open(FIX "/malicious.bin", &f, &err), &err, "malicious.bin (opened)", "posix.system", NULL);

    /* protocol 4: STACK_GLOBAL of ("os", "system") */
    pkb p = {.n = 0};
    op(&p, 0x80);
    op(&p, 4);
    odict(&p);
    op(&p, '(');
    str(&p, "w");
    str(&p, "os");
    str(&p, "system");
    op(&p, 0x93);
    str(&p, "echo pwned");
    op(&p, 0x85);
    op(&p, 'R');
    op(&p, 'u');
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "STACK_GLOBAL os.system", "os.system", "may be malicious");

    /* builtins.eval, and a near miss of an allowed name */
    p.n = 0;
    op(&p, 0x80);
    op(&p, 2);
    global(&p, "builtins", "eval");
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "builtins.eval", "builtins.eval", NULL);
    p.n = 0;
    global(&p, "torch._utils", "_rebuild_tensor_v2x");
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "torch._utils._rebuild_tensor_v2x", "_rebuild_tensor_v2x", "malicious");
    p.n = 0;
    global(&p, "torch", "load");
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "torch.load", "torch.load", NULL);

    /* refused opcodes name themselves */
    static const struct { uint8_t op; const char *name; } bad[] = {
        {'i', "INST"}, {'o', "OBJ"}, {0x81, "NEWOBJ"}, {'S', "STRING"}, {0x82, "EXT1"}, {'0', "POP"}, {0xff, "unknown"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.n = 0;
        op(&p, 0x80);
        op(&p, 2);
        op(&p, '}');
        op(&p, bad[i].op);
        op(&p, '.');
        char hex[8];
        snprintf(hex, sizeof hex, "0x%02x", bad[i].op);
        col_status st = run_pickle(&p, &err);
        expect(st, &err, bad[i].name, hex, bad[i].name);
        TL_OK(strstr(err.msg, "not allowed in a state dict") && strstr(err.msg, "data.pkl"),
              "opcode message says where and why");
    }
}

static void test_zip_damage(void)
{
    size_t len, zlen;
    col_err err = {0};
    uint8_t *img = fixture("module.bin", &len);
    zent e[16];
    int n = unzip(img, len, e, 16);
    TL_OK(n >= 6 && find_ent(e, n, "archive/data/1") && find_ent(e, n, "archive/byteorder"),
          "module.bin unzips (%d entries)", n);
    uint8_t *z = zip(e, n, &zlen);
    TL_OK(parse(z, zlen, "rezipped.bin", &err) == COL_OK, "a libarchive-written copy reads: %s", err.msg);
    free(z);

    /* truncated */
    size_t cuts[] = {len / 2, len - 1, len - 22, 200, 31, 4};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        col_status st = parse(img, cuts[i], "module.bin", &err);
        TL_OK(st == COL_EFORMAT && strstr(err.msg, "module.bin"), "truncated to %zu bytes: refused: %s", cuts[i],
              err.msg);
    }
    expect(parse(img, len / 2, "module.bin", &err), &err, "the zip cut in half", "zip", NULL);

    /* a missing storage */
    zent keep[16];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, "archive/data/1"))
            keep[k++] = e[i];
    z = zip(keep, k, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "a missing storage entry", "'archive/data/1' is missing", NULL);
    free(z);

    /* a short storage */
    zent *s1 = find_ent(e, n, "archive/data/1");
    s1->len -= 4;
    z = zip(e, n, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "a short storage entry", "has 8 bytes, but the pickle says 3", NULL);
    free(z);
    s1->len += 4;

    /* duplicated entry */
    zent dup[17];
    memcpy(dup, e, sizeof(zent) * (size_t)n);
    dup[n] = *s1;
    z = zip(dup, n + 1, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "a duplicated zip entry", "appears twice", NULL);
    free(z);

    /* byteorder */
    zent *bo = find_ent(e, n, "archive/byteorder");
    uint8_t *old = bo->data;
    size_t oldlen = bo->len;
    bo->data = (uint8_t *)"big";
    bo->len = 3;
    z = zip(e, n, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "byteorder 'big'", "big-endian", NULL);
    free(z);
    bo->data = (uint8_t *)"middle";
    bo->len = 6;
    z = zip(e, n, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "byteorder 'middle'", "expected 'little'", NULL);
    free(z);
    /* absent byteorder (old torch) is fine */
    k = 0;
    for (int i = 0; i < n; i++)
        if (&e[i] != bo)
            keep[k++] = e[i];
    z = zip(keep, k, &zlen);
    TL_OK(parse(z, zlen, "m.bin", &err) == COL_OK, "no byteorder entry reads as little-endian: %s", err.msg);
    free(z);
    bo->data = old;
    bo->len = oldlen;

    /* no data.pkl; two data.pkl */
    k = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, "archive/data.pkl"))
            keep[k++] = e[i];
    z = zip(keep, k, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "a zip without data.pkl", "no <name>/data.pkl", NULL);
    free(z);
    memcpy(dup, e, sizeof(zent) * (size_t)n);
    dup[n] = *find_ent(e, n, "archive/data.pkl");
    snprintf(dup[n].name, sizeof dup[n].name, "other/data.pkl");
    z = zip(dup, n + 1, &zlen);
    expect(parse(z, zlen, "m.bin", &err), &err, "two pickles", "two pickles", NULL);
    free(z);

    /* a different prefix works */
    for (int i = 0; i < n; i++) {
        dup[i] = e[i];
        snprintf(dup[i].name, sizeof dup[i].name, "pytorch_model/%s", strchr(e[i].name, '/') + 1);
    }
    z = zip(dup, n, &zlen);
    TL_OK(parse(z, zlen, "m.bin", &err) == COL_OK, "prefix 'pytorch_model/' reads: %s", err.msg);
    free(z);

    free_ents(e, n);
    free(img);

    /* other non-checkpoints */
    img = fixture("legacy.bin", &len);
    expect(parse(img, len, "legacy.bin", &err), &err, "the legacy format", "legacy", NULL);
    free(img);
    expect(parse((const uint8_t *)"hello world", 11, "x.bin", &err), &err, "a text file", "no zip signature", NULL);
    expect(parse((const uint8_t *)"PK", 2, "x.bin", &err), &err, "two bytes", "x.bin", NULL);
    col_pt_file *f = NULL;
    TL_OK(col_pt_open("/nonexistent/pytorch_model.bin", &f, &err) == COL_EIO && strstr(err.msg, "cannot open"),
          "a missing file is COL_EIO: %s", err.msg);
}

static void test_bounds(void)
{
    col_err err = {0};
    int64_t sz2[2] = {3, 4}, st2[2] = {4, 1};
    TL_OK(one_tensor(12, "FloatStorage", 12, 0, 2, sz2, st2, &err) == COL_OK, "a hand-written 3x4 tensor reads: %s",
          err.msg);
    expect(one_tensor(12, "FloatStorage", 12, 1, 2, sz2, st2, &err), &err, "offset 1 on a full storage",
           "reads past the end of storage", "offset 1");
    int64_t big[2] = {4, 4};
    expect(one_tensor(12, "FloatStorage", 12, 0, 2, big, st2, &err), &err, "size past the storage",
           "reads past the end", "[4,4]");
    int64_t wide[2] = {4, 2};
    expect(one_tensor(12, "FloatStorage", 12, 0, 2, sz2, wide, &err), &err, "stride past the storage",
           "reads past the end", NULL);
    int64_t huge[2] = {INT64_MAX / 2, 3};
    expect(one_tensor(12, "FloatStorage", 12, 0, 2, sz2, huge, &err), &err, "an overflowing stride",
           "reads past the end", NULL);
    int64_t hs[2] = {INT64_MAX / 2, 4};
    expect(one_tensor(12, "FloatStorage", 12, 0, 2, hs, st2, &err), &err, "an overflowing size", "reads past the end",
           NULL);
    expect(one_tensor(12, "FloatStorage", 13, 0, 2, sz2, st2, &err), &err, "numel beyond the entry",
           "has 48 bytes, but the pickle says 13", NULL);
    expect(one_tensor(12, "FloatStorage", -1, 0, 2, sz2, st2, &err), &err, "negative numel", "storage is not", NULL);
    int64_t neg[2] = {-1, 4};
    expect(one_tensor(12, "FloatStorage", 12, 0, 2, neg, st2, &err), &err, "a negative size", "arguments", NULL);
    expect(one_tensor(12, "FloatStorage", 12, -2, 2, sz2, st2, &err), &err, "a negative offset", "arguments", NULL);
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    expect(one_tensor(12, "FloatStorage", 12, 0, 9, nine, nine, &err), &err, "9 dims", "at most 8", NULL);
    expect(one_tensor(12, "ComplexFloatStorage", 6, 0, 2, sz2, st2, &err), &err, "complex storage",
           "torch.ComplexFloatStorage is not supported", NULL);
    TL_OK(one_tensor(12, "HalfStorage", 24, 0, 2, sz2, st2, &err) == COL_OK, "a half storage of 48 bytes reads: %s",
          err.msg);
    /* zero-size tensors need no data; a stride-0 expand repeats one element */
    int64_t z2[2] = {0, 5}, e2[2] = {3, 1000}, es[2] = {0, 0};
    TL_OK(one_tensor(0, "FloatStorage", 0, 0, 2, z2, st2, &err) == COL_OK, "an empty tensor of an empty storage: %s",
          err.msg);
    TL_OK(one_tensor(1, "FloatStorage", 1, 0, 2, e2, es, &err) == COL_OK, "an expand of one element: %s", err.msg);
    int64_t e3[2] = {30000, 30000};
    expect(one_tensor(1, "FloatStorage", 1, 0, 2, e3, es, &err), &err, "an expand to 3.6 GB", "would expand", NULL);
}

/* Strided views against index arithmetic done here. */
static void test_strided(void)
{
    struct { int64_t off; int nd; int64_t size[3], stride[3]; } v[] = {
        {0, 2, {4, 3}, {1, 4}},          /* transpose of [3,4] */
        {5, 2, {2, 3}, {4, 2}},          /* slice with steps */
        {1, 3, {2, 2, 2}, {1, 8, 3}},    /* permute-like */
        {7, 1, {5}, {0}},                /* expand */
        {23, 0, {0}, {0}},               /* 0-d at an offset */
        {2, 3, {3, 1, 2}, {5, 99, 1}},   /* contiguous up to a size-1 dim */
    };
    for (size_t c = 0; c < sizeof v / sizeof v[0]; c++) {
        pkb p = {.n = 0};
        op(&p, 0x80);
        op(&p, 2);
        odict(&p);
        op(&p, '(');
        str(&p, "v");
        tensor(&p, "FloatStorage", "0", 24, v[c].off, v[c].nd, v[c].size, v[c].stride);
        op(&p, 'u');
        op(&p, '.');
        size_t len;
        uint8_t *z = torch_zip(&p, 24, &len);
        col_pt_file *f = NULL;
        col_err err = {0};
        col_status st = col_pt_parse(z, len, "strided.bin", &f, &err);
        bool ok = st == COL_OK && col_pt_count(f) == 1;
        if (ok) {
            const col_ckpt_tensor *t = col_pt_get(f, 0);
            int64_t numel = 1, idx[3] = {0, 0, 0};
            for (int d = 0; d < v[c].nd; d++)
                numel *= v[c].size[d];
            ok = t->ndim == v[c].nd && t->nbytes == (size_t)numel * 4;
            const float *x = t->data;
            for (int64_t i = 0; i < numel && ok; i++) {
                int64_t e = v[c].off;
                for (int d = 0; d < v[c].nd; d++)
                    e += idx[d] * v[c].stride[d];
                ok = x[i] == 1.5f * (float)e;
                for (int d = v[c].nd - 1; d >= 0; d--) {
                    if (++idx[d] < v[c].size[d])
                        break;
                    idx[d] = 0;
                }
            }
        }
        TL_OK(ok, "strided view %zu (offset %lld, %d dims) has the storage's values %s", c, (long long)v[c].off,
              v[c].nd, err.msg);
        col_pt_close(f);
        free(z);
    }
}

static void test_pickle_shapes(void)
{
    col_err err = {0};
    int64_t s1[1] = {4}, t1[1] = {1};
    pkb p;
#define START(proto) (p.n = 0, op(&p, 0x80), op(&p, proto))
    /* a bare tensor */
    START(2);
    tensor(&p, "FloatStorage", "0", 4, 0, 1, s1, t1);
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "a bare tensor", "not a state dict", NULL);
    /* a list of tensors inside the dict */
    START(2);
    op(&p, '}');
    str(&p, "layers");
    op(&p, ']');
    tensor(&p, "FloatStorage", "0", 4, 0, 1, s1, t1);
    op(&p, 'a');
    op(&p, 's');
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "a list of tensors", "'layers' is a list holding tensors", NULL);
    /* a plain dict, ints and lists without tensors are skipped, nesting flattens */
    START(2);
    op(&p, '}');
    op(&p, '(');
    str(&p, "step");
    i32(&p, 7);
    str(&p, "hist");
    op(&p, ']');
    i32(&p, 1);
    op(&p, 'a');
    str(&p, "opt");
    op(&p, '}');
    i32(&p, 0);          /* an int key without tensors below it */
    op(&p, 'N');
    op(&p, 's');
    str(&p, "sub");
    op(&p, '}');
    str(&p, "w");
    tensor(&p, "FloatStorage", "0", 4, 0, 1, s1, t1);
    op(&p, 's');
    op(&p, 's');
    op(&p, 'u');
    op(&p, '(');
    op(&p, 'u');          /* an empty SETITEMS */
    op(&p, '.');
    col_pt_file *f = NULL;
    size_t len;
    uint8_t *z = torch_zip(&p, 4, &len);
    col_status st = col_pt_parse(z, len, "nest.bin", &f, &err);
    TL_OK(st == COL_OK && col_pt_count(f) == 1 && !strcmp(col_pt_get(f, 0)->name, "opt.sub.w"),
          "nested dicts flatten to 'opt.sub.w', plain values are skipped: %s", err.msg);
    col_pt_close(f);
    free(z);
    /* duplicate names */
    START(2);
    odict(&p);
    op(&p, '(');
    str(&p, "w");
    tensor(&p, "FloatStorage", "0", 4, 0, 1, s1, t1);
    str(&p, "w");
    tensor(&p, "FloatStorage", "0", 4, 0, 1, s1, t1);
    op(&p, 'u');
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "a repeated key", "'w' appears twice", NULL);
    /* one storage seen as two types */
    START(2);
    op(&p, '}');
    op(&p, '(');
    str(&p, "a");
    tensor(&p, "FloatStorage", "0", 4, 0, 1, s1, t1);
    str(&p, "b");
    tensor(&p, "IntStorage", "0", 4, 0, 1, s1, t1);
    op(&p, 'u');
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "a storage with two types", "another type", NULL);
    /* exponential sharing: t[k] = (t[k-1], t[k-1]) */
    START(2);
    op(&p, '}');
    str(&p, "l");
    op(&p, '(');
    op(&p, ']');
    op(&p, 'q');
    op(&p, 1);
    for (int i = 0; i < 40; i++) {
        op(&p, 'h');
        op(&p, 1);
        op(&p, 'h');
        op(&p, 1);
        op(&p, 0x86);
        op(&p, 'q');
        op(&p, 1);
    }
    op(&p, 't');
    op(&p, 's');
    op(&p, '.');
    expect(run_pickle(&p, &err), &err, "exponentially shared tuples", "shares objects too often", NULL);
    /* small malformed or hostile pickles */
#define PK(lit) lit, sizeof lit - 1
    static const struct { const char *bytes; size_t len; const char *what, *want; } bad[] = {
        {PK("\x80\x02}q\x00X\x02\x00\x00\x00meh\x00s."), "a dict that holds itself", "deep"},
        {PK("\x80\x02}X\x01\x00\x00\x00l]q\x01h\x01" "as."), "a list that holds itself", "too deeply"},
        {PK("\x80\x02}"), "a pickle without STOP", "without STOP"},
        {PK("\x80\x02h\x09."), "BINGET of an unset memo slot", "never set"},
        {PK("\x80\x02}}."), "two values at STOP", "exactly one value"},
        {PK("\x80\x02(a."), "APPEND across a MARK", "not enough values"},
        {PK("\x80\x02" "(u."), "SETITEMS with nothing below the MARK", "without a dict"},
        {PK("\x80\x02X\xff\xff\xff\x7f."), "a 2 GB string", "longer than 1 MiB"},
        {PK("\x80\x02X\x64\x00\x00\x00" "a"), "a string past the end", "truncated"},
        {PK("\x80\x02\x8a\x09"), "a 72-bit LONG1", "wider than 64 bits"},
        {PK("\x80\x09."), "protocol 9", "protocol"},
        {PK("\x80\x02q\xff"), "BINPUT on an empty stack", "stack is empty"},
        {PK("\x80\x02\x95\xff\x00\x00\x00\x00\x00\x00\x00}."), "a FRAME past the end", "FRAME longer"},
        {PK("\x80\x02" "ccollections\nOrderedDict"), "GLOBAL without a newline", "without a newline"},
        {PK("\x80\x02" "c\nOrderedDict\n."), "GLOBAL with an empty module", "empty, too long"},
        {PK("\x80\x02" "ccollections\nOrderedDict\n)R]b]}b."), "BUILD on a list", "BUILD on something"},
        {PK("\x80\x02" "ccollections\nOrderedDict\n}\x85R."), "OrderedDict with arguments", "called with arguments"},
        {PK("\x80\x02}}N\x86R."), "REDUCE of a dict", "not a global"},
        {PK("\x80\x02}(}Nu."), "a dict key that is a dict", "key is a list or dict"},
        {PK("\x80\x02}X\x01\x00\x00\x00kX\x01\x00\x00\x00kQs."), "a bare persistent id", "is a persistent id holding tensors"},
    };
#undef PK
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.n = 0;
        raw(&p, bad[i].bytes, bad[i].len);
        expect(run_pickle(&p, &err), &err, bad[i].what, bad[i].want, NULL);
    }
    /* a protocol-4 pickle with FRAME and MEMOIZE */
    p.n = 0;
    raw(&p, "\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00}\x94.", 14);
    TL_OK(run_pickle(&p, &err) == COL_OK, "protocol 4 FRAME + MEMOIZE: %s", err.msg);
#undef START
}

/* ---- 4. damaged files never crash ---- */

static void walk(const col_pt_file *f)
{
    volatile unsigned sum = 0;
    for (int i = 0; i < col_pt_count(f); i++) {
        const col_ckpt_tensor *t = col_pt_get(f, i);
        for (size_t b = 0; b < t->nbytes; b++)
            sum += ((const uint8_t *)t->data)[b];
        sum += (unsigned)strlen(t->name);
    }
    (void)sum;
}

static void test_damage(void)
{
    static const char *files[] = {"dtypes.bin", "views.bin", "module.bin", "module_p4.bin", "module_deflate.bin",
                                  "nested.bin", "params.bin", "malicious.bin", "legacy.bin"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
        size_t len;
        uint8_t *img = fixture(files[fi], &len);
        uint8_t *buf = malloc(len);
        int refused = 0, read = 0;
        for (int trial = 0; trial < 300; trial++) {
            memcpy(buf, img, len);
            int flips = 1 + trial % 4;
            for (int k = 0; k < flips; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                buf[(rng >> 8) % len] ^= (uint8_t)(1u << (rng & 7));
            }
            size_t n = trial % 10 == 9 ? (size_t)(rng >> 20) % len : len;
            col_pt_file *f = NULL;
            col_err err = {0};
            if (col_pt_parse(buf, n, files[fi], &f, &err) == COL_OK) {
                walk(f);
                read++;
            } else {
                refused += err.msg[0] != '\0' && strstr(err.msg, files[fi]) != NULL;
            }
            col_pt_close(f);
        }
        TL_OK(refused + read == 300, "%s: 300 damaged copies: %d refused with a message naming the file, %d read",
              files[fi], refused, read);
        free(buf);
        free(img);
    }
}

int main(void)
{
    test_fixtures();
    test_malicious();
    test_zip_damage();
    test_bounds();
    test_strided();
    test_pickle_shapes();
    test_damage();
    return tl_done();
}
