/* test_safetensors.c - safetensors reader/writer and the checkpoint front
 * end: round trips, files written by the Python safetensors library (every
 * dtype, sharded with an index), one test per kind of corrupt header, f32
 * conversion, missing files and bad writer arguments. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "rng.h"
#include "testlib.h"
#include "textio.h"

#ifdef COL_SRC_ASSET_DIR
#define FIXTURES COL_SRC_ASSET_DIR "/../tests/fixtures"
#else
#define FIXTURES "tests/fixtures"
#endif
#define FIX FIXTURES "/safetensors"  /* written by tools/refgen/make_safetensors_fixtures.py */
#define PT_FIX FIXTURES "/torchbin"  /* PyTorch fixtures of test_torchbin */

static char tmpdir[] = "/tmp/col_st_XXXXXX";

/* A path in tmpdir; valid until the fourth call after it. */
static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static float *ramp(int64_t n) /* v[i] = i * 0.25 - 1, as the fixture script */
{
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)i * 0.25f - 1.0f;
    return v;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* ---- write + read round trips ---- */

static void test_roundtrip(void)
{
    /* the tensors of roundtrip_ref.safetensors, in the script's (unsorted) order */
    col_st_out t[5] = {
        {"b.weight", 2, {2, 3}, NULL}, {"a.bias", 1, {4}, NULL}, {"c.scalar", 0, {0}, NULL},
        {"d.conv", 4, {2, 1, 2, 3}, NULL}, {"e.empty", 2, {0, 5}, NULL},
    };
    for (int i = 0; i < 5; i++)
        t[i].data = ramp(numel_of(t[i].ndim, t[i].shape));
    const char *meta[] = {"format", "pt", NULL};
    col_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("model.safetensors"));
    col_status st = col_st_write_f32(path, t, 5, meta, &err);
    TL_OK(st == COL_OK, "write 5 tensors (0-d, 1-d, 2-d, 4-d, empty): %s", err.msg);

    char *mine = NULL, *ref = NULL;
    size_t nmine = 0, nref = 0;
    col_read_file(path, 0, &mine, &nmine, &err);
    col_read_file(FIX "/roundtrip_ref.safetensors", 0, &ref, &nref, &err);
    TL_OK(ref && mine && nmine == nref && memcmp(mine, ref, nref) == 0,
          "bytes identical to the Python library's file (%zu vs %zu bytes)", nmine, nref);
    uint64_t hlen = 0;
    memcpy(&hlen, mine, 8);
    TL_OK((8 + hlen) % 8 == 0 && mine[8 + hlen - 1] == ' ', "header padded with spaces to 8 bytes (N = %llu)",
          (unsigned long long)hlen);
    free(mine);
    free(ref);

    col_st_file *f = NULL;
    st = col_st_open(path, &f, &err);
    TL_OK(st == COL_OK && col_st_count(f) == 5, "col_st_open reads it back: %s", err.msg);
    static const int order[5] = {1, 0, 2, 3, 4}; /* by name = by data offset */
    bool all = f != NULL;
    for (int i = 0; f && i < 5; i++) {
        const col_ckpt_tensor *r = col_st_get(f, i);
        const col_st_out *w = &t[order[i]];
        size_t nb = (size_t)numel_of(w->ndim, w->shape) * 4;
        bool ok = r && strcmp(r->name, w->name) == 0 && r->dtype == COL_ST_F32 && r->ndim == w->ndim &&
                  memcmp(r->shape, w->shape, (size_t)w->ndim * sizeof(int64_t)) == 0 && r->nbytes == nb &&
                  (nb == 0 || memcmp(r->data, w->data, nb) == 0) && strcmp(r->file, path) == 0;
        all &= ok;
        if (!ok)
            TL_NOTE("tensor %d (%s) differs", i, w->name);
    }
    TL_OK(all, "names, order, shapes, dtypes and data survive");
    TL_OK(f && col_st_metadata(f, "format") && strcmp(col_st_metadata(f, "format"), "pt") == 0 &&
          !col_st_metadata(f, "other"), "metadata read back");
    TL_OK(col_st_get(f, 5) == NULL && col_st_get(f, -1) == NULL, "col_st_get out of range is NULL");
    col_st_close(f);

    /* the directory and the file through col_ckpt */
    for (int k = 0; k < 2; k++) {
        col_ckpt *c = NULL;
        st = col_ckpt_open(k ? path : tmpdir, &c, &err);
        bool ok = st == COL_OK && col_ckpt_count(c) == 5 && strcmp(col_ckpt_format(c), "safetensors") == 0;
        for (int i = 0; ok && i < 5; i++) {
            const col_ckpt_tensor *r = col_ckpt_find(c, t[i].name);
            int64_t n = numel_of(t[i].ndim, t[i].shape);
            float *got = malloc((size_t)(n ? n : 1) * 4);
            ok = r && col_ckpt_read_f32(r, t[i].ndim, t[i].shape, got, &err) == COL_OK &&
                 memcmp(got, t[i].data, (size_t)n * 4) == 0;
            free(got);
        }
        TL_OK(ok && !col_ckpt_find(c, "missing") && !col_ckpt_find(c, "a.bia"),
              "col_ckpt_open(%s) finds and reads every tensor: %s", k ? "file" : "directory", err.msg);
        col_ckpt_close(c);
    }
    for (int i = 0; i < 5; i++)
        free((void *)t[i].data);

    /* no tensors at all, and awkward names and metadata */
    st = col_st_write_f32(tmp_path("empty.safetensors"), NULL, 0, NULL, &err);
    f = NULL;
    TL_OK(st == COL_OK && col_st_open(tmp_path("empty.safetensors"), &f, &err) == COL_OK && col_st_count(f) == 0,
          "a file with no tensors: %s", err.msg);
    col_st_close(f);
    float one = 1.5f;
    col_st_out odd[2] = {{"quote\"back\\slash\nnl\x01", 0, {0}, &one}, {"caf\xc3\xa9.\xe2\x82\xac", 1, {1}, &one}};
    const char *meta2[] = {"k\"1", "v\t1", "k2", "", NULL};
    st = col_st_write_f32(tmp_path("odd.safetensors"), odd, 2, meta2, &err);
    f = NULL;
    bool ok = st == COL_OK && col_st_open(tmp_path("odd.safetensors"), &f, &err) == COL_OK && col_st_count(f) == 2;
    ok = ok && strcmp(col_st_get(f, 0)->name, odd[1].name) == 0 && strcmp(col_st_get(f, 1)->name, odd[0].name) == 0;
    ok = ok && col_st_metadata(f, "k\"1") && strcmp(col_st_metadata(f, "k\"1"), "v\t1") == 0 &&
         col_st_metadata(f, "k2") && col_st_metadata(f, "k2")[0] == '\0';
    TL_OK(ok, "names and metadata needing JSON escapes and UTF-8 survive: %s", err.msg);
    col_st_close(f);
}

/* many random tensors: lookup by name among hundreds */
static void test_random_roundtrip(void)
{
    col_rng r;
    col_rng_init(&r, 7);
    enum { N = 300 };
    col_st_out *t = calloc(N, sizeof *t);
    char (*names)[32] = calloc(N, sizeof *names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layer.%u.w%d", col_rng_u32(&r) % 1000, i);
        t[i].name = names[i];
        t[i].ndim = (int)col_rng_below(&r, 5);
        for (int d = 0; d < t[i].ndim; d++)
            t[i].shape[d] = (int64_t)col_rng_below(&r, 4);
        int64_t n = numel_of(t[i].ndim, t[i].shape);
        float *v = malloc((size_t)(n ? n : 1) * 4);
        col_fill_normal(v, n, (uint64_t)i, 1.0f);
        t[i].data = v;
    }
    col_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("random.safetensors"));
    col_ckpt *c = NULL;
    bool ok = col_st_write_f32(path, t, N, NULL, &err) == COL_OK && col_ckpt_open(path, &c, &err) == COL_OK &&
              col_ckpt_count(c) == N;
    for (int i = 0; ok && i < N; i++) {
        const col_ckpt_tensor *x = col_ckpt_find(c, t[i].name);
        int64_t n = numel_of(t[i].ndim, t[i].shape);
        float *got = malloc((size_t)(n ? n : 1) * 4);
        ok = x && col_ckpt_read_f32(x, t[i].ndim, t[i].shape, got, &err) == COL_OK &&
             memcmp(got, t[i].data, (size_t)n * 4) == 0;
        free(got);
    }
    TL_OK(ok, "%d random tensors written, found by name and read back: %s", N, err.msg);
    col_ckpt_close(c);
    for (int i = 0; i < N; i++)
        free((void *)t[i].data);
    free(t);
    free(names);
}

/* ---- files written by the Python library ---- */

/* Checks every tensor in expected JSON {name: {dtype, shape, bits}} against c. */
static void check_against_json(col_ckpt *c, const char *json_path, const char *what)
{
    char *text = NULL;
    size_t len = 0;
    col_err err = {0};
    if (col_read_file(json_path, 0, &text, &len, &err) != COL_OK) {
        TL_OK(false, "%s: %s", what, err.msg);
        return;
    }
    cJSON *root = cJSON_Parse(text);
    int count = 0;
    for (cJSON *e = root ? root->child : NULL; e; e = e->next, count++) {
        const col_ckpt_tensor *t = col_ckpt_find(c, e->string);
        cJSON *dt = cJSON_GetObjectItem(e, "dtype"), *shape = cJSON_GetObjectItem(e, "shape");
        cJSON *bits = cJSON_GetObjectItem(e, "bits");
        int ndim = cJSON_GetArraySize(shape);
        int64_t sh[COL_MAX_DIMS] = {0};
        for (int d = 0; d < ndim && d < COL_MAX_DIMS; d++)
            sh[d] = (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble;
        int64_t n = cJSON_GetArraySize(bits);
        float *got = malloc((size_t)(n ? n : 1) * 4);
        col_status st = t ? col_ckpt_read_f32(t, ndim, sh, got, &err) : COL_EINVAL;
        int bad = -1;
        for (int64_t i = 0; st == COL_OK && i < n && bad < 0; i++) {
            uint32_t want = (uint32_t)cJSON_GetArrayItem(bits, (int)i)->valuedouble, have;
            memcpy(&have, &got[i], 4);
            float wf;
            memcpy(&wf, &want, 4);
            if (have != want && !(isnan(wf) && isnan(got[i])))
                bad = (int)i;
        }
        TL_OK(t && strcmp(col_st_dtype_name(t->dtype), dt->valuestring) == 0 && st == COL_OK && bad < 0 &&
                  numel_of(ndim, sh) == n,
              "%s: %s (%s, %lld values) matches torch's .float()%s%s", what, e->string, dt->valuestring,
              (long long)n, st == COL_OK ? "" : ": ", st == COL_OK ? "" : err.msg);
        if (bad >= 0)
            TL_NOTE("first difference at %d: %a", bad, got[bad]);
        free(got);
    }
    TL_OK(count > 0 && count == col_ckpt_count(c), "%s: %d tensors expected, %d in the checkpoint", what, count,
          col_ckpt_count(c));
    cJSON_Delete(root);
    free(text);
}

static void test_python_files(void)
{
    col_ckpt *c = NULL;
    col_err err = {0};
    col_status st = col_ckpt_open(FIX "/dtypes.safetensors", &c, &err);
    TL_OK(st == COL_OK, "open dtypes.safetensors from the Python library: %s", err.msg);
    if (st == COL_OK)
        check_against_json(c, FIX "/dtypes.json", "dtypes");
    col_ckpt_close(c);

    col_st_file *f = NULL;
    st = col_st_open(FIX "/dtypes.safetensors", &f, &err);
    TL_OK(st == COL_OK && col_st_metadata(f, "note") && strcmp(col_st_metadata(f, "note"), "dtype fixture") == 0,
          "its metadata: %s", err.msg);
    uint64_t prev = 0;
    bool ordered = f != NULL;
    for (int i = 0; f && i < col_st_count(f); i++) {
        uint64_t at = (uint64_t)((const char *)col_st_get(f, i)->data - (const char *)col_st_get(f, 0)->data);
        ordered &= at >= prev;
        prev = at;
    }
    TL_OK(ordered, "tensors are listed in data-offset order");
    col_st_close(f);

    const char *paths[2] = {FIX "/sharded", FIX "/sharded/model.safetensors.index.json"};
    for (int k = 0; k < 2; k++) {
        c = NULL;
        st = col_ckpt_open(paths[k], &c, &err);
        TL_OK(st == COL_OK && col_ckpt_count(c) == 6, "open the sharded checkpoint by its %s: %s",
              k ? "index" : "directory", err.msg);
        if (st != COL_OK)
            continue;
        check_against_json(c, FIX "/sharded.json", k ? "sharded (index)" : "sharded (dir)");
        bool shard_order = true;
        for (int i = 1; i < col_ckpt_count(c); i++)
            shard_order &= strcmp(col_ckpt_get(c, i - 1)->file, col_ckpt_get(c, i)->file) <= 0;
        TL_OK(shard_order && strstr(col_ckpt_get(c, 0)->file, "model-00001-of-00003.safetensors"),
              "tensors numbered shard by shard");
        col_ckpt_close(c);
    }
}

/* ---- sharded directories with bad indexes ---- */

static void expect_ckpt_error(const char *path, col_status code, const char *what, const char *s1, const char *s2)
{
    col_ckpt *c = NULL;
    col_err err = {0};
    col_status st = col_ckpt_open(path, &c, &err);
    TL_OK(st == code && c == NULL && strstr(err.msg, s1) && (!s2 || strstr(err.msg, s2)), "%s: %s", what,
          err.msg);
    col_ckpt_close(c);
}

static void test_bad_index(void)
{
    float v[4] = {1, 2, 3, 4};
    col_st_out s1[2] = {{"a", 1, {2}, v}, {"b", 1, {2}, v + 2}}, s2[1] = {{"c", 2, {2, 2}, v}};
    col_st_out s3[2] = {{"a", 0, {0}, v}, {"x", 0, {0}, v}};
    col_err err = {0};
    mkdir(tmp_path("sh"), 0755);
    col_st_write_f32(tmp_path("sh/s1.safetensors"), s1, 2, NULL, &err);
    col_st_write_f32(tmp_path("sh/s2.safetensors"), s2, 1, NULL, &err);
    col_st_write_f32(tmp_path("sh/s3.safetensors"), s3, 2, NULL, &err);
    char index[512];
    snprintf(index, sizeof index, "%s", tmp_path("sh/model.safetensors.index.json"));
    struct {
        const char *what, *json, *s1, *s2;
    } cases[] = {
        {"shard name with ..", "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", "must be a plain file name",
         "../s1.safetensors"},
        {"shard name with /", "{\"weight_map\":{\"a\":\"sub/s1.safetensors\"}}", "must be a plain file name", NULL},
        {"tensor mapped to the wrong shard", "{\"weight_map\":{\"a\":\"s2.safetensors\",\"c\":\"s2.safetensors\"}}",
         "tensor 'a' is mapped to shard s2.safetensors, which has no such tensor", NULL},
        {"mapped tensor missing", "{\"weight_map\":{\"zz\":\"s1.safetensors\"}}", "tensor 'zz' is mapped", NULL},
        {"missing shard file", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"q\":\"s9.safetensors\"}}",
         "s9.safetensors", "a shard listed in"},
        {"no weight_map", "{\"metadata\":{}}", "no \"weight_map\"", NULL},
        {"weight_map value not a string", "{\"weight_map\":{\"a\":1}}", "is not a file name", NULL},
        {"not JSON", "{\"weight_map\":", "not a valid JSON object", NULL},
        {"trailing garbage", "{\"weight_map\":{\"a\":\"s1.safetensors\"}} x", "not a valid JSON object", NULL},
        {"tensor in two shards", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"s3.safetensors\"}}",
         "tensor 'a' appears in both", "s3.safetensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_bytes(index, cases[i].json, strlen(cases[i].json));
        char what[128];
        snprintf(what, sizeof what, "index: %s", cases[i].what);
        /* a missing shard is an I/O error like any missing file */
        col_status code = strstr(cases[i].what, "missing shard") ? COL_EIO : COL_EFORMAT;
        expect_ckpt_error(tmp_path("sh"), code, what, cases[i].s1, cases[i].s2);
    }
    /* and a good one: b is not listed but is kept with its shard */
    const char *good = "{\"metadata\":{\"total_size\":32},\"weight_map\":{\"a\":\"s1.safetensors\","
                       "\"c\":\"s2.safetensors\"}}";
    write_bytes(index, good, strlen(good));
    col_ckpt *c = NULL;
    col_status st = col_ckpt_open(tmp_path("sh"), &c, &err);
    TL_OK(st == COL_OK && col_ckpt_count(c) == 3 && col_ckpt_find(c, "b") && col_ckpt_find(c, "c") &&
          col_ckpt_find(c, "c")->ndim == 2 && strstr(col_ckpt_find(c, "c")->file, "s2.safetensors"),
          "a valid hand-written index: %s", err.msg);
    col_ckpt_close(c);
}

/* ---- corrupt headers, parsed from memory ---- */

#define BASE_JSON                                                                                                  \
    "{\"h.0.w\":{\"dtype\":\"F32\",\"shape\":[5,6],\"data_offsets\":[0,120]},"                                    \
    "\"h.0.b\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[120,144]}}"

/* An image: length, header json (with one edit: the first `from` replaced
 * by `to`), then data_len bytes. */
static unsigned char *image(const char *json, const char *from, const char *to, size_t data_len, size_t *len)
{
    char hdr[1024];
    const char *at = from ? strstr(json, from) : NULL;
    if (from && !at) {
        printf("Bail out! test edit '%s' not found\n", from);
        exit(1);
    }
    if (at)
        snprintf(hdr, sizeof hdr, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    else
        snprintf(hdr, sizeof hdr, "%s", json);
    uint64_t n = strlen(hdr);
    *len = 8 + n + data_len;
    unsigned char *img = calloc(1, *len);
    memcpy(img, &n, 8);
    memcpy(img + 8, hdr, n);
    for (size_t i = 0; i < data_len; i++)
        img[8 + n + i] = (unsigned char)(i * 37);
    return img;
}

static void expect_bad(const char *what, const unsigned char *img, size_t len, const char *s1, const char *s2)
{
    col_st_file *f = NULL;
    col_err err = {0};
    col_status st = col_st_parse(img, len, "bad.safetensors", &f, &err);
    TL_OK(st == COL_EFORMAT && f == NULL && strstr(err.msg, "bad.safetensors") && strstr(err.msg, s1) &&
              (!s2 || strstr(err.msg, s2)) && !strchr(err.msg, '\n'),
          "corrupt: %s: %s", what, err.msg);
    col_st_close(f);
}

static void test_corrupt(void)
{
    size_t len;
    unsigned char *img = image(BASE_JSON, NULL, NULL, 144, &len);
    col_st_file *f = NULL;
    col_err err = {0};
    TL_OK(col_st_parse(img, len, "bad.safetensors", &f, &err) == COL_OK && col_st_count(f) == 2 &&
          strcmp(col_st_get(f, 0)->name, "h.0.w") == 0, "the unedited image parses: %s", err.msg);
    col_st_close(f);

    /* length field and file size */
    expect_bad("shorter than 8 bytes", img, 5, "too short", NULL);
    expect_bad("data truncated", img, len - 1, "tensor 'h.0.b'", "beyond the end of the data (143 bytes)");
    unsigned char *edit = malloc(len);
    memcpy(edit, img, len);
    uint64_t big = len;
    memcpy(edit, &big, 8);
    expect_bad("header length beyond the file", edit, len, "exceeds the file size", NULL);
    big = 200000000;
    memcpy(edit, &big, 8);
    expect_bad("absurd header length", edit, len, "absurd", NULL);
    memcpy(edit, img, len);
    edit[8 + 3] = 0xff; /* inside the first name */
    expect_bad("invalid UTF-8", edit, len, "not valid UTF-8", NULL);
    edit[8 + 3] = 0;
    expect_bad("NUL in the header", edit, len, "NUL", NULL);
    free(edit);
    free(img);

    struct {
        const char *what, *json, *from, *to;
        size_t data;
        const char *s1, *s2;
    } cases[] = {
        {"size does not match the shape", BASE_JSON, "[0,120]", "[0,100]", 144,
         "tensor 'h.0.w' has data_offsets [0, 100] but shape [5,6] of F32 needs 120 bytes", NULL},
        {"unknown dtype", BASE_JSON, "\"F32\",\"shape\":[5", "\"F8_E4M3\",\"shape\":[5", 144, "tensor 'h.0.w'",
         "unsupported dtype \"F8_E4M3\""},
        {"dtype not a string", BASE_JSON, "\"F32\",\"shape\":[6]", "4,\"shape\":[6]", 144, "tensor 'h.0.b'",
         "no \"dtype\" string"},
        {"dtype missing", BASE_JSON, "\"dtype\":\"F32\",\"shape\":[6]", "\"shape\":[6]", 144, "tensor 'h.0.b'",
         "no \"dtype\""},
        {"negative shape", BASE_JSON, "[5,6]", "[-5,6]", 144, "tensor 'h.0.w'", "shape entry 0"},
        {"fractional shape", BASE_JSON, "[5,6]", "[5,6.5]", 144, "tensor 'h.0.w'", "shape entry 1"},
        {"string in shape", BASE_JSON, "[5,6]", "[5,\"6\"]", 144, "shape entry 1", "non-negative integer"},
        {"shape not an array", BASE_JSON, "[5,6]", "30", 144, "tensor 'h.0.w'", "no \"shape\" array"},
        {"9 dimensions", BASE_JSON, "[5,6]", "[1,1,1,1,1,1,5,6,1]", 144, "tensor 'h.0.w'", "9 dimensions"},
        {"size overflow", BASE_JSON, "[5,6]", "[4294967296,4294967296,16]", 144, "tensor 'h.0.w'", "overflows"},
        {"size overflow to zero", BASE_JSON, "[5,6]", "[4294967296,4294967296]", 144, "tensor 'h.0.w'", "overflows"},
        {"data_offsets with one entry", BASE_JSON, "[0,120]", "[0]", 144, "tensor 'h.0.w'", "[begin, end]"},
        {"data_offsets with three entries", BASE_JSON, "[0,120]", "[0,120,144]", 144, "tensor 'h.0.w'",
         "[begin, end]"},
        {"data_offsets not numbers", BASE_JSON, "[0,120]", "[0,\"120\"]", 144, "tensor 'h.0.w'", "[begin, end]"},
        {"data_offsets fractional", BASE_JSON, "[0,120]", "[0.5,120]", 144, "tensor 'h.0.w'", "[begin, end]"},
        {"data_offsets negative", BASE_JSON, "[120,144]", "[-24,144]", 144, "tensor 'h.0.b'", "[begin, end]"},
        {"data_offsets missing", BASE_JSON, ",\"data_offsets\":[120,144]", "", 144, "tensor 'h.0.b'",
         "[begin, end]"},
        {"end before begin", BASE_JSON, "[120,144]", "[144,120]", 144, "tensor 'h.0.b'", "end before begin"},
        {"end beyond the file", BASE_JSON, "[120,144]", "[124,148]", 144, "tensor 'h.0.b'",
         "[124, 148] beyond the end of the data (144 bytes)"},
        {"huge offsets", BASE_JSON, "[120,144]", "[18446744073709551592,18446744073709551616]", 144,
         "tensor 'h.0.b'", "[begin, end]"},
        {"overlapping ranges", BASE_JSON, "[120,144]", "[96,120]", 144, "tensor 'h.0.b'", "overlap tensor 'h.0.w'"},
        {"duplicate name", BASE_JSON, "\"h.0.b\"", "\"h.0.w\"", 144, "tensor 'h.0.w' appears twice", NULL},
        {"header is an array", "[1,2]", NULL, NULL, 0, "not a JSON object", NULL},
        {"header is a string", "\"F32\"", NULL, NULL, 0, "not a JSON object", NULL},
        {"entry is not an object", "{\"x\":5}", NULL, NULL, 0, "tensor 'x' is not a JSON object", NULL},
        {"invalid JSON", BASE_JSON, ",\"h.0.b\"", ",\"h.0.b", 144, "not valid JSON", NULL},
        {"empty header", "", NULL, NULL, 0, "not valid JSON", NULL},
        {"data after the JSON", "{} x", NULL, NULL, 0, "data after the JSON", NULL},
        {"two JSON objects", "{}{}", NULL, NULL, 0, "data after the JSON", NULL},
        {"metadata not an object", "{\"__metadata__\":[\"a\"]}", NULL, NULL, 0, "\"__metadata__\" is not", NULL},
        {"metadata value not a string", "{\"__metadata__\":{\"k\":1}}", NULL, NULL, 0, "metadata entry 'k'", NULL},
        {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", NULL, NULL, 0, "appears twice", NULL},
        {"control character in name", "{\"a\\nb\":5}", NULL, NULL, 0, "tensor 'a?b'", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        img = image(cases[i].json, cases[i].from, cases[i].to, cases[i].data, &len);
        expect_bad(cases[i].what, img, len, cases[i].s1, cases[i].s2);
        free(img);
    }
}

/* headers that look odd but are valid */
static void test_valid_edge_cases(void)
{
    struct {
        const char *what, *json;
        size_t data;
        int count;
    } cases[] = {
        {"no tensors", "{}", 0, 0},
        {"only metadata, padded", "{\"__metadata__\":{}}     ", 0, 0},
        {"empty tensors sharing an offset",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
         "\"b\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 3},
        {"a gap and trailing bytes",
         "{\"a\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}", 16, 2},
        {"unknown fields ignored",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"extra\":[1]}}", 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        unsigned char *img = image(cases[i].json, NULL, NULL, cases[i].data, &len);
        col_st_file *f = NULL;
        col_err err = {0};
        col_status st = col_st_parse(img, len, "edge.safetensors", &f, &err);
        TL_OK(st == COL_OK && col_st_count(f) == cases[i].count, "valid: %s: %s", cases[i].what, err.msg);
        if (st == COL_OK && i == 2)
            TL_OK(strcmp(col_st_get(f, 0)->name, "c") == 0 && strcmp(col_st_get(f, 1)->name, "a") == 0 &&
                  strcmp(col_st_get(f, 2)->name, "b") == 0, "file order: by offsets, then name");
        col_st_close(f);
        free(img);
    }

    /* an F32 tensor at an odd offset reads correctly (unaligned data) */
    char json[160];
    snprintf(json, sizeof json, "{\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[1,13]}}");
    size_t len;
    unsigned char *img = image(json, NULL, NULL, 13, &len);
    float want[3] = {1.5f, -2.0f, 1e-3f};
    unsigned char *d = img + len - 13;
    d[0] = (unsigned char)-7;
    memcpy(d + 1, want, 12);
    col_st_file *f = NULL;
    col_err err = {0};
    float got[3] = {0}, a = 0;
    int64_t shape[1] = {3}, one[1] = {1};
    bool ok = col_st_parse(img, len, "odd", &f, &err) == COL_OK &&
              col_ckpt_read_f32(col_st_get(f, 1), 1, shape, got, &err) == COL_OK &&
              col_ckpt_read_f32(col_st_get(f, 0), 1, one, &a, &err) == COL_OK;
    TL_OK(ok && memcmp(got, want, 12) == 0 && a == -7.0f, "unaligned F32 data and I8 read as f32: %s", err.msg);
    col_st_close(f);
    free(img);
}

/* ---- conversion to f32 ---- */

static void test_read_f32(void)
{
    /* every 16-bit pattern as BF16 and as F16 */
    char json[256];
    snprintf(json, sizeof json, "{\"bf\":{\"dtype\":\"BF16\",\"shape\":[256,256],\"data_offsets\":[0,131072]},"
                                "\"hf\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[131072,262144]}}");
    size_t len;
    unsigned char *img = image(json, NULL, NULL, 262144, &len);
    unsigned char *d = img + len - 262144;
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; i < 65536; i++) {
            uint16_t h = (uint16_t)i;
            memcpy(d + (size_t)k * 131072 + 2 * i, &h, 2);
        }
    col_st_file *f = NULL;
    col_err err = {0};
    float *got = malloc(65536 * sizeof *got);
    int64_t bshape[2] = {256, 256}, hshape[1] = {65536};
    col_status st = col_st_parse(img, len, "conv", &f, &err);
    TL_OK(st == COL_OK, "16-bit image parses: %s", err.msg);
    if (st != COL_OK)
        return;
    const col_ckpt_tensor *bf = col_st_get(f, 0), *hf = col_st_get(f, 1);
    int bad = -1;
    if (col_ckpt_read_f32(bf, 2, bshape, got, &err) == COL_OK)
        for (uint32_t i = 0; i < 65536 && bad < 0; i++) {
            float w = col_bf16_to_f32((uint16_t)i);
            if (memcmp(&w, &got[i], 4) != 0)
                bad = (int)i;
        }
    else
        bad = 0;
    TL_OK(bad < 0, "BF16 -> f32 equals col_bf16_to_f32 for all 65536 patterns (first bad %d)", bad);
    bad = -1;
    if (col_ckpt_read_f32(hf, 1, hshape, got, &err) == COL_OK)
        for (uint32_t i = 0; i < 65536 && bad < 0; i++) {
            float w = col_f16_to_f32((uint16_t)i);
            if (memcmp(&w, &got[i], 4) != 0)
                bad = (int)i;
        }
    else
        bad = 0;
    TL_OK(bad < 0, "F16 -> f32 equals col_f16_to_f32 for all 65536 patterns (first bad %d)", bad);

    /* shape checks */
    int64_t wrong[2] = {256, 255}, flat[1] = {65536};
    st = col_ckpt_read_f32(bf, 2, wrong, got, &err);
    TL_OK(st == COL_ESHAPE && strstr(err.msg, "'bf'") && strstr(err.msg, "conv") && strstr(err.msg, "[256,256]") &&
          strstr(err.msg, "[256,255]"), "wrong shape: %s", err.msg);
    st = col_ckpt_read_f32(bf, 1, flat, got, &err);
    TL_OK(st == COL_ESHAPE && strstr(err.msg, "[256,256]") && strstr(err.msg, "[65536]"), "wrong ndim: %s",
          err.msg);
    st = col_ckpt_read_f32(bf, 0, NULL, got, &err);
    TL_OK(st == COL_ESHAPE && strstr(err.msg, "but [] was expected"), "scalar expected: %s", err.msg);
    /* a descriptor whose byte count disagrees with its shape (a buggy source) */
    col_ckpt_tensor broken = *bf;
    broken.nbytes -= 2;
    st = col_ckpt_read_f32(&broken, 2, bshape, got, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, "'bf'"), "nbytes not matching the shape: %s", err.msg);
    col_st_close(f);
    free(got);
    free(img);
}

/* ---- the front end over PyTorch files (the reader is tested in test_torchbin) ---- */

static void copy_file(const char *from, const char *to)
{
    char *data = NULL;
    size_t len = 0;
    col_err err = {0};
    if (col_read_file(from, 0, &data, &len, &err) != COL_OK) {
        printf("Bail out! %s\n", err.msg);
        exit(1);
    }
    write_bytes(to, data, len);
    free(data);
}

/* Every tensor of the PyTorch file `file` is in c and reads the same. */
static bool same_as_pt_file(const col_ckpt *c, const char *file)
{
    col_pt_file *pf = NULL;
    col_err err = {0};
    if (col_pt_open(file, &pf, &err) != COL_OK)
        return false;
    bool ok = col_pt_count(pf) > 0;
    for (int i = 0; ok && i < col_pt_count(pf); i++) {
        const col_ckpt_tensor *want = col_pt_get(pf, i), *got = col_ckpt_find(c, want->name);
        int64_t n = numel_of(want->ndim, want->shape);
        float *a = malloc((size_t)(n ? n : 1) * 4), *b = malloc((size_t)(n ? n : 1) * 4);
        ok = got && col_ckpt_read_f32(want, want->ndim, want->shape, a, &err) == COL_OK &&
             col_ckpt_read_f32(got, want->ndim, want->shape, b, &err) == COL_OK && memcmp(a, b, (size_t)n * 4) == 0;
        free(a);
        free(b);
    }
    col_pt_close(pf);
    return ok;
}

static void test_pytorch_front_end(void)
{
    col_err err = {0};
    mkdir(tmp_path("pt"), 0755);
    copy_file(PT_FIX "/module.bin", tmp_path("pt/pytorch_model.bin"));
    col_ckpt *c = NULL;
    col_status st = col_ckpt_open(tmp_path("pt"), &c, &err);
    TL_OK(st == COL_OK && strcmp(col_ckpt_format(c), "pytorch") == 0 && same_as_pt_file(c, PT_FIX "/module.bin"),
          "directory with pytorch_model.bin: %s", err.msg);
    col_ckpt_close(c);

    /* model.safetensors wins over pytorch_model.bin */
    float v[2] = {1, 2};
    col_st_out one = {"only", 1, {2}, v};
    col_st_write_f32(tmp_path("pt/model.safetensors"), &one, 1, NULL, &err);
    c = NULL;
    st = col_ckpt_open(tmp_path("pt"), &c, &err);
    TL_OK(st == COL_OK && strcmp(col_ckpt_format(c), "safetensors") == 0 && col_ckpt_count(c) == 1,
          "model.safetensors is preferred to pytorch_model.bin: %s", err.msg);
    col_ckpt_close(c);

    /* a sharded PyTorch checkpoint */
    mkdir(tmp_path("ptsh"), 0755);
    copy_file(PT_FIX "/module.bin", tmp_path("ptsh/a.bin"));
    copy_file(PT_FIX "/params.bin", tmp_path("ptsh/b.bin"));
    const char *index = "{\"weight_map\":{\"0.weight\":\"a.bin\",\"w\":\"b.bin\",\"b\":\"b.bin\"}}";
    write_bytes(tmp_path("ptsh/pytorch_model.bin.index.json"), index, strlen(index));
    c = NULL;
    st = col_ckpt_open(tmp_path("ptsh"), &c, &err);
    TL_OK(st == COL_OK && strcmp(col_ckpt_format(c), "pytorch") == 0 && same_as_pt_file(c, PT_FIX "/module.bin") &&
          same_as_pt_file(c, PT_FIX "/params.bin"), "pytorch_model.bin.index.json with two shards: %s", err.msg);
    col_ckpt_close(c);
    col_st_write_f32(tmp_path("ptsh/c.safetensors"), &one, 1, NULL, &err);
    index = "{\"weight_map\":{\"0.weight\":\"a.bin\",\"only\":\"c.safetensors\"}}";
    write_bytes(tmp_path("ptsh/pytorch_model.bin.index.json"), index, strlen(index));
    expect_ckpt_error(tmp_path("ptsh"), COL_EFORMAT, "index mixing formats", "mixes safetensors and PyTorch", NULL);

    /* a non-zip *.bin goes to the PyTorch reader, not the safetensors one */
    c = NULL;
    st = col_ckpt_open(PT_FIX "/legacy.bin", &c, &err);
    TL_OK(st != COL_OK && !c && strstr(err.msg, "legacy.bin") && !strstr(err.msg, "header length"),
          "legacy .bin is refused by the PyTorch reader: %s", err.msg);
}

/* ---- missing files, empty files, bad writer arguments ---- */

static void test_missing_and_writer_errors(void)
{
    col_err err = {0};
    expect_ckpt_error("/nonexistent/col_model", COL_EIO, "missing path", "cannot open /nonexistent/col_model",
                      "No such file");
    mkdir(tmp_path("none"), 0755);
    mkdir(tmp_path("none/model.safetensors"), 0755); /* a directory is not a weights file */
    char want[600];
    snprintf(want, sizeof want, "no model weights in %s: expected model.safetensors, model.safetensors.index.json, "
             "pytorch_model.bin or pytorch_model.bin.index.json", tmp_path("none"));
    expect_ckpt_error(tmp_path("none"), COL_EIO, "directory without weights", want, NULL);
    write_bytes(tmp_path("zero.safetensors"), "", 0);
    expect_ckpt_error(tmp_path("zero.safetensors"), COL_EIO, "empty file", "zero.safetensors is empty", NULL);
    col_st_file *f = NULL;
    col_status st = col_st_open(tmpdir, &f, &err);
    TL_OK(st == COL_EIO && !f && strstr(err.msg, "is a directory"), "col_st_open on a directory: %s", err.msg);
    st = col_st_open(tmp_path("nope.safetensors"), &f, &err);
    TL_OK(st == COL_EIO && !f && strstr(err.msg, "nope.safetensors"), "col_st_open on a missing file: %s", err.msg);
    write_bytes(tmp_path("text.safetensors"), "hello world, not a model", 24);
    expect_ckpt_error(tmp_path("text.safetensors"), COL_EFORMAT, "a text file", "text.safetensors", "absurd");
    write_bytes(tmp_path("fake.zip"), "PK\003\004 truncated", 15);
    col_ckpt *c = NULL;
    st = col_ckpt_open(tmp_path("fake.zip"), &c, &err);
    TL_OK(st != COL_OK && !c, "a broken zip goes to the PyTorch reader and fails: %s", err.msg);

    /* writer argument errors leave an existing file untouched */
    float v[6] = {1, 2, 3, 4, 5, 6};
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("keep.safetensors"));
    col_st_out good = {"w", 1, {6}, v};
    col_st_write_f32(path, &good, 1, NULL, &err);
    char *before = NULL;
    size_t nbefore = 0;
    col_read_file(path, 0, &before, &nbefore, &err);
    struct {
        const char *what;
        col_st_out t[2];
        int n;
        const char *meta[5];  /* NULL-terminated key/value list */
        const char *msg;
    } cases[] = {
        {"duplicate name", {{"w", 1, {6}, v}, {"w", 1, {6}, v}}, 2, {NULL}, "tensor 'w' given twice"},
        {"reserved name", {{"__metadata__", 1, {6}, v}}, 1, {NULL}, "'__metadata__' is not allowed"},
        {"empty name", {{"", 1, {6}, v}}, 1, {NULL}, "'' is not allowed"},
        {"NULL name", {{NULL, 1, {6}, v}}, 1, {NULL}, "has no name"},
        {"bad UTF-8 name", {{"a\xff", 1, {6}, v}}, 1, {NULL}, "not valid UTF-8"},
        {"negative dim", {{"w", 2, {-1, 6}, v}}, 1, {NULL}, "bad shape (dim 0 is -1)"},
        {"9 dims", {{"w", 9, {1}, v}}, 1, {NULL}, "ndim 9"},
        {"no data", {{"w", 1, {6}, NULL}}, 1, {NULL}, "has no data"},
        {"metadata key without value", {{"w", 1, {6}, v}}, 1, {"k", NULL, NULL}, "no value"},
        {"metadata key twice", {{"w", 1, {6}, v}}, 1, {"k", "1", "k", "2"}, "given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = col_st_write_f32(path, cases[i].t, cases[i].n, cases[i].meta[0] ? cases[i].meta : NULL, &err);
        char *after = NULL;
        size_t nafter = 0;
        col_err rerr = {0};
        col_read_file(path, 0, &after, &nafter, &rerr);
        TL_OK(st == COL_EINVAL && strstr(err.msg, cases[i].msg) && strstr(err.msg, "keep.safetensors") && after &&
              nafter == nbefore && memcmp(after, before, nbefore) == 0,
              "writer refuses: %s (old file untouched): %s", cases[i].what, err.msg);
        free(after);
    }
    free(before);
    st = col_st_write_f32(tmp_path("no/such/dir/x.safetensors"), &good, 1, NULL, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "no/such/dir/x.safetensors"), "unwritable path: %s", err.msg);

    /* no temporary files left behind */
    int leftovers = 0;
    DIR *dp = opendir(tmpdir);
    for (struct dirent *e; dp && (e = readdir(dp));)
        leftovers += strstr(e->d_name, ".tmp") != NULL;
    if (dp)
        closedir(dp);
    TL_OK(leftovers == 0, "no temporary files left (%d)", leftovers);
}

int main(void)
{
    tl_mkdtemp(tmpdir);
    test_roundtrip();
    test_random_roundtrip();
    test_python_files();
    test_bad_index();
    test_corrupt();
    test_valid_edge_cases();
    test_read_f32();
    test_pytorch_front_end();
    test_missing_and_writer_errors();
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return tl_done();
}
