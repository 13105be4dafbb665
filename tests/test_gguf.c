/* test_gguf.c - the GGUF reader (libcore/formats/gguf.h).
 *
 * 1. The files of tools/refgen/make_gguf_fixtures.py (written by gguf-py's GGUFWriter): every metadata entry
 *    (type and value, arrays element by element, arrays of arrays), every tensor (type, dims, offset, bytes)
 *    against expected.json; typed lookups and their errors; the same from memory (col_gguf_parse).
 * 2. Hostile files, each an error with a message and no crash: every truncation of a fixture, bad magic,
 *    version 1, 4 and big-endian, counts beyond the file, tensors outside the file or unaligned, repeated
 *    names, too many dims, unknown value types, nesting too deep, bad alignment, rows not whole blocks,
 *    sizes that overflow; a tensor of an unknown ggml type is listed and refused only at use.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

#include "gguf.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/gguf"
#endif

/* ---- comparing with expected.json ---- */

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static bool same_hex(const uint8_t *b, uint64_t n, const char *hex)
{
    if (strlen(hex) != 2 * n)
        return false;
    for (uint64_t i = 0; i < n; i++)
        if (b[i] != (uint8_t)(hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1])))
            return false;
    return true;
}

static col_gguf_vtype vtype_of(const char *name)
{
    static const char *const n[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    for (int i = 0; i < COL_GGUF_VTYPE_COUNT; i++)
        if (strcmp(n[i], name) == 0)
            return (col_gguf_vtype)i;
    return COL_GGUF_VTYPE_COUNT;
}

/* a scalar or string value against its JSON form */
static bool same_scalar(const col_gguf_value *v, const cJSON *j)
{
    switch (v->type) {
    case COL_GGUF_STRING: return cJSON_IsString(j) && same_hex(v->data, v->count, j->valuestring);
    case COL_GGUF_BOOL: return cJSON_IsBool(j) && (v->data[0] != 0) == (bool)cJSON_IsTrue(j);
    case COL_GGUF_F32: {
        float f;
        memcpy(&f, v->data, 4);
        return cJSON_IsNumber(j) && f == (float)j->valuedouble;
    }
    case COL_GGUF_F64: {
        double d;
        memcpy(&d, v->data, 8);
        return cJSON_IsNumber(j) && d == j->valuedouble;
    }
    case COL_GGUF_U64: {
        uint64_t u;
        memcpy(&u, v->data, 8);
        return cJSON_IsString(j) && u == strtoull(j->valuestring, NULL, 10);
    }
    default: {
        int64_t i;
        return cJSON_IsString(j) && col_gguf_scalar_int(v, &i) && i == strtoll(j->valuestring, NULL, 10);
    }
    }
}

/* an array value against its JSON items (arrays of arrays: {"elem", "items"} each) */
static bool same_array(const col_gguf_value *a, col_gguf_vtype elem, const cJSON *items)
{
    if (a->type != COL_GGUF_ARRAY || a->elem != elem || a->count != (uint64_t)cJSON_GetArraySize(items))
        return false;
    uint64_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, items)
    {
        col_gguf_value e;
        if (!col_gguf_array_elem(a, i++, &e) || e.type != elem)
            return false;
        if (elem == COL_GGUF_ARRAY) {
            col_gguf_vtype sub = vtype_of(cJSON_GetObjectItem(it, "elem")->valuestring);
            if (!same_array(&e, sub, cJSON_GetObjectItem(it, "items")))
                return false;
        } else if (!same_scalar(&e, it))
            return false;
        if (elem == COL_GGUF_STRING) { /* the indexed path gives the same string */
            const char *s;
            size_t n;
            if (!col_gguf_array_str(a, i - 1, &s, &n) || (const uint8_t *)s != e.data || n != e.count)
                return false;
        }
    }
    col_gguf_value past;
    return !col_gguf_array_elem(a, a->count, &past);
}

static void check_file(col_gguf *g, const char *fname, const cJSON *exp)
{
    TL_OK(col_gguf_version(g) == (uint32_t)cJSON_GetObjectItem(exp, "version")->valueint, "%s: version %u", fname,
          col_gguf_version(g));
    TL_OK(col_gguf_alignment(g) == (uint32_t)cJSON_GetObjectItem(exp, "alignment")->valueint, "%s: alignment %u",
          fname, col_gguf_alignment(g));
    TL_OK(col_gguf_data_offset(g) == (uint64_t)cJSON_GetObjectItem(exp, "data_offset")->valuedouble,
          "%s: data section at %llu", fname, (unsigned long long)col_gguf_data_offset(g));
    const cJSON *kvs = cJSON_GetObjectItem(exp, "kv"), *kv;
    TL_OK(col_gguf_kv_count(g) == cJSON_GetArraySize(kvs), "%s: %lld metadata entries", fname,
          (long long)col_gguf_kv_count(g));
    int bad = 0, n = 0;
    cJSON_ArrayForEach(kv, kvs)
    {
        const char *key = cJSON_GetObjectItem(kv, "key")->valuestring;
        col_gguf_value v;
        int64_t i = col_gguf_find_key(g, key);
        bool ok = i >= 0 && col_gguf_kv_value(g, i, &v) && strcmp(col_gguf_key(g, i), key) == 0 && i == n &&
                  v.type == vtype_of(cJSON_GetObjectItem(kv, "type")->valuestring);
        if (ok && v.type == COL_GGUF_ARRAY)
            ok = same_array(&v, vtype_of(cJSON_GetObjectItem(kv, "elem")->valuestring), cJSON_GetObjectItem(kv, "value"));
        else if (ok)
            ok = same_scalar(&v, cJSON_GetObjectItem(kv, "value"));
        if (!ok) {
            TL_NOTE("%s: metadata %s differs", fname, key);
            bad++;
        }
        n++;
    }
    TL_OK(bad == 0 && n > 20, "%s: %d metadata entries in file order with their types and values", fname, n);
    const cJSON *ts = cJSON_GetObjectItem(exp, "tensors"), *te;
    TL_OK(col_gguf_tensor_count(g) == cJSON_GetArraySize(ts), "%s: %lld tensors", fname,
          (long long)col_gguf_tensor_count(g));
    bad = 0, n = 0;
    cJSON_ArrayForEach(te, ts)
    {
        const col_gguf_tensor *t = col_gguf_tensor_at(g, n++);
        const char *name = cJSON_GetObjectItem(te, "name")->valuestring;
        const cJSON *ne = cJSON_GetObjectItem(te, "ne");
        bool ok = t && strcmp(t->name, name) == 0 && col_gguf_tensor_find(g, name) == t &&
                  t->type == (uint32_t)cJSON_GetObjectItem(te, "type")->valueint &&
                  t->n_dims == cJSON_GetArraySize(ne) &&
                  t->offset == (uint64_t)cJSON_GetObjectItem(te, "offset")->valuedouble &&
                  (col_gguf_data_offset(g) + t->offset) % col_gguf_alignment(g) == 0;
        for (int d = 0; ok && d < COL_GGUF_MAX_DIMS; d++)
            ok = t->ne[d] == (d < t->n_dims ? cJSON_GetArrayItem(ne, d)->valueint : 1);
        const void *data;
        uint64_t nbytes;
        col_err err = {0};
        ok = ok && col_gguf_tensor_data(g, t, &data, &nbytes, &err) == COL_OK && data == t->data &&
             same_hex(data, nbytes, cJSON_GetObjectItem(te, "hex")->valuestring);
        if (!ok) {
            TL_NOTE("%s: tensor %s differs", fname, name);
            bad++;
        }
    }
    TL_OK(bad == 0 && n >= 10, "%s: %d tensors: names, types, dims, offsets and bytes", fname, n);
    TL_OK(!col_gguf_tensor_find(g, "t.none") && !col_gguf_tensor_at(g, n) && !col_gguf_tensor_at(g, -1),
          "%s: absent tensors are NULL", fname);
}

static void test_lookups(col_gguf *g)
{
    col_err err = {0};
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    const char *s;
    size_t n;
    int64_t i64;
    double d;
    TL_OK(col_gguf_get_u32(g, "k.u32", &u32, &err) == COL_OK && u32 == 4000000000u, "get_u32");
    TL_OK(col_gguf_get_i32(g, "k.i32", &i32, &err) == COL_OK && i32 == -2000000000, "get_i32");
    TL_OK(col_gguf_get_u64(g, "k.u64", &u64, &err) == COL_OK && u64 == UINT64_MAX, "get_u64");
    TL_OK(col_gguf_get_f32(g, "k.f32", &f, &err) == COL_OK && f == 0.1f, "get_f32");
    TL_OK(col_gguf_get_bool(g, "k.bool_t", &b, &err) == COL_OK && b, "get_bool");
    TL_OK(col_gguf_get_str(g, "k.str_nul", &s, &n, &err) == COL_OK && n == 3 && memcmp(s, "a\0b", 3) == 0,
          "get_str: length-prefixed, a NUL inside");
    TL_OK(col_gguf_get_str(g, "general.architecture", &s, &n, &err) == COL_OK && n == 8 && !memcmp(s, "testarch", 8),
          "general.architecture");
    err = (col_err){0};
    TL_OK(col_gguf_get_u32(g, "k.i32", &u32, &err) == COL_EFORMAT && strstr(err.msg, "k.i32") &&
              strstr(err.msg, "is a i32, not a u32"),
          "a wrong type is named: %s", err.msg);
    TL_OK(col_gguf_get_f32(g, "no.such", &f, &err) == COL_EFORMAT && strstr(err.msg, "no.such"), "a missing key: %s",
          err.msg);
    TL_OK(col_gguf_get_int(g, "k.u16", &i64, &err) == COL_OK && i64 == 60000 &&
              col_gguf_get_int(g, "k.i64", &i64, &err) == COL_OK && i64 == INT64_MIN,
          "get_int takes any integer type");
    TL_OK(col_gguf_get_int(g, "k.u64", &i64, &err) == COL_EFORMAT, "get_int refuses a u64 above 2^63");
    TL_OK(col_gguf_get_int(g, "k.f32", &i64, &err) == COL_EFORMAT, "get_int refuses a float");
    TL_OK(col_gguf_get_num(g, "k.f64", &d, &err) == COL_OK && d == 1e300 &&
              col_gguf_get_num(g, "k.i8", &d, &err) == COL_OK && d == -100,
          "get_num takes floats and integers");
    col_gguf_value a;
    TL_OK(col_gguf_get_array(g, "a.str", COL_GGUF_STRING, &a, &err) == COL_OK && a.count == 5 &&
              col_gguf_array_str(&a, 1, &s, &n) && n == 6 && memcmp(s, "\xe2\x96\x81the", 6) == 0,
          "an array of strings");
    TL_OK(col_gguf_get_array(g, "a.str", COL_GGUF_F32, &a, &err) == COL_EFORMAT && strstr(err.msg, "array of string"),
          "an array of the wrong type: %s", err.msg);
    double nums[3];
    int64_t ints[2];
    TL_OK(col_gguf_get_array(g, "a.f32", COL_GGUF_F32, &a, &err) == COL_OK &&
              col_gguf_array_nums(&a, nums, &err) == COL_OK && nums[0] == 0.5 && nums[1] == (double)-1e-3f,
          "an array of floats");
    TL_OK(col_gguf_get_array(g, "a.i64", COL_GGUF_I64, &a, &err) == COL_OK &&
              col_gguf_array_ints(&a, ints, &err) == COL_OK && ints[0] == INT64_MIN && ints[1] == INT64_MAX,
          "an array of ints");
    TL_OK(col_gguf_get_array(g, "a.u64", COL_GGUF_U64, &a, &err) == COL_OK &&
              col_gguf_array_ints(&a, ints, &err) == COL_EINVAL,
          "an array of ints refuses a u64 above 2^63");
    TL_OK(col_gguf_get_array(g, "a.str", COL_GGUF_STRING, &a, &err) == COL_OK &&
              col_gguf_array_nums(&a, nums, &err) == COL_EINVAL,
          "strings are not numbers");
}

/* ---- building hostile files ---- */

typedef struct {
    uint8_t b[8192];
    size_t n;
} img;

static void put(img *m, const void *p, size_t n)
{
    if (m->n + n <= sizeof m->b) {
        memcpy(m->b + m->n, p, n);
        m->n += n;
    }
}
static void u32(img *m, uint32_t v) { put(m, &v, 4); }
static void u64(img *m, uint64_t v) { put(m, &v, 8); }
static void str(img *m, const char *s) { u64(m, strlen(s)), put(m, s, strlen(s)); }
static void head(img *m, uint32_t ver, uint64_t nt, uint64_t nkv)
{
    m->n = 0;
    put(m, "GGUF", 4), u32(m, ver), u64(m, nt), u64(m, nkv);
}
/* a tensor info; nd dims from ne */
static void tinfo(img *m, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off)
{
    str(m, name), u32(m, nd);
    for (uint32_t d = 0; d < nd; d++)
        u64(m, ne[d]);
    u32(m, type), u64(m, off);
}
static void pad_data(img *m, size_t align, size_t data_bytes)
{
    while (m->n % align)
        put(m, "\0", 1);
    for (size_t i = 0; i < data_bytes; i++)
        put(m, (uint8_t[]){(uint8_t)i}, 1);
}

/* parses m: expects code (and, when not NULL, text in the message) */
static void expect(const img *m, col_status code, const char *text, const char *what)
{
    col_gguf *g = NULL;
    col_err err = {0};
    col_status st = col_gguf_parse(m->b, m->n, "h.gguf", &g, &err);
    bool ok = st == code && (code == COL_OK ? g != NULL : g == NULL && strstr(err.msg, "h.gguf") &&
                                                              !strchr(err.msg, '\n') && (!text || strstr(err.msg, text)));
    TL_OK(ok, "%s: %s (%s)", what, st == COL_OK ? "accepted" : err.msg, col_status_name(st));
    col_gguf_close(g);
}

static void test_hostile(const uint8_t *good, size_t good_len, uint64_t data_end)
{
    /* every truncation of a good file: an error until all the tensor data is there */
    int crashes_or_lies = 0, n = 0;
    for (size_t len = 0; len < good_len; len++) {
        col_gguf *g = NULL;
        col_err err = {0};
        col_status st = col_gguf_parse(good, len, "trunc.gguf", &g, &err);
        bool ok = len >= data_end ? st == COL_OK : st != COL_OK && !g && err.msg[0] && strstr(err.msg, "trunc.gguf");
        crashes_or_lies += !ok;
        n++;
        col_gguf_close(g);
    }
    TL_OK(crashes_or_lies == 0, "each of %d truncations is refused with a message until the data ends (at %llu)", n,
          (unsigned long long)data_end);
    img m;
    uint64_t ne2[2] = {32, 2}, ne1[1] = {4};
    memcpy(m.b, good, 64), m.n = 64, m.b[0] = 'X';
    expect(&m, COL_EFORMAT, "not a GGUF file", "bad magic");
    head(&m, 1, 0, 0);
    expect(&m, COL_EUNSUPPORTED, "version 1", "version 1");
    head(&m, 4, 0, 0);
    expect(&m, COL_EUNSUPPORTED, "version 4", "version 4");
    head(&m, __builtin_bswap32(3), 0, 0);
    expect(&m, COL_EUNSUPPORTED, "big-endian", "a big-endian header");
    head(&m, 3, 0, 0);
    expect(&m, COL_OK, NULL, "an empty file of no tensors and no metadata");
    head(&m, 3, UINT64_MAX, 0);
    expect(&m, COL_EFORMAT, "claims", "2^64-1 tensors");
    head(&m, 3, 0, (uint64_t)1 << 62);
    expect(&m, COL_EFORMAT, "claims", "2^62 metadata entries");
    head(&m, 3, 0, 1), u64(&m, UINT64_MAX - 3), u64(&m, 0);
    expect(&m, COL_EFORMAT, "truncated", "a key of 2^64-4 bytes");
    head(&m, 3, 0, 1), str(&m, "k"), u32(&m, 13), u32(&m, 0);
    expect(&m, COL_EFORMAT, "value type 13", "an unknown value type");
    head(&m, 3, 0, 1), str(&m, "k"), u32(&m, COL_GGUF_ARRAY), u32(&m, COL_GGUF_U32), u64(&m, (uint64_t)1 << 61);
    expect(&m, COL_EFORMAT, "claims", "an array of 2^61 u32");
    head(&m, 3, 0, 1), str(&m, "k"), u32(&m, COL_GGUF_ARRAY), u32(&m, COL_GGUF_STRING), u64(&m, 2), str(&m, "a"),
        u64(&m, 1000);
    expect(&m, COL_EFORMAT, "truncated", "an array's string running past the end");
    head(&m, 3, 0, 1), str(&m, "k"), u32(&m, COL_GGUF_ARRAY), u32(&m, 77), u64(&m, 0);
    expect(&m, COL_EFORMAT, "array of type 77", "an array of an unknown type");
    for (int depth = 16; depth <= 17; depth++) { /* arrays in arrays: 16 levels are read, 17 refused */
        head(&m, 3, 0, 1), str(&m, "deep"), u32(&m, COL_GGUF_ARRAY);
        for (int l = 0; l < depth - 1; l++)
            u32(&m, COL_GGUF_ARRAY), u64(&m, 1);
        u32(&m, COL_GGUF_U8), u64(&m, 1), put(&m, "\x07", 1);
        expect(&m, depth == 16 ? COL_OK : COL_EFORMAT, "nests", depth == 16 ? "arrays 16 deep" : "arrays 17 deep");
    }
    head(&m, 3, 0, 2), str(&m, "k"), u32(&m, COL_GGUF_U8), put(&m, "\1", 1), str(&m, "k"), u32(&m, COL_GGUF_U8),
        put(&m, "\2", 1);
    expect(&m, COL_EFORMAT, "\"k\" is given twice", "a key given twice");
    head(&m, 3, 0, 1), u64(&m, 3), put(&m, "a\0b", 3), u32(&m, COL_GGUF_U8), put(&m, "\1", 1);
    expect(&m, COL_EFORMAT, "NUL", "a key holding a NUL byte");
    head(&m, 3, 0, 1), str(&m, "general.alignment"), u32(&m, COL_GGUF_U32), u32(&m, 48);
    expect(&m, COL_EFORMAT, "power of two", "alignment 48");
    head(&m, 3, 0, 1), str(&m, "general.alignment"), u32(&m, COL_GGUF_U64), u64(&m, 64);
    expect(&m, COL_EFORMAT, "general.alignment", "alignment as a u64");
    head(&m, 3, 1, 0), tinfo(&m, "w", 2, ne2, COL_GGML_F32, 0), pad_data(&m, 32, 256);
    expect(&m, COL_OK, NULL, "a good f32 tensor");
    head(&m, 3, 1, 0), tinfo(&m, "w", 2, ne2, COL_GGML_F32, 0), pad_data(&m, 32, 255);
    expect(&m, COL_EFORMAT, "lies outside", "a tensor one byte short");
    head(&m, 3, 1, 0), tinfo(&m, "w", 2, ne2, COL_GGML_F32, UINT64_MAX - 31), pad_data(&m, 32, 256);
    expect(&m, COL_EFORMAT, "lies outside", "an offset near 2^64");
    head(&m, 3, 1, 0), tinfo(&m, "w", 2, ne2, COL_GGML_F32, 8), pad_data(&m, 32, 512);
    expect(&m, COL_EFORMAT, "not a multiple of the alignment", "an unaligned offset");
    head(&m, 3, 2, 0), tinfo(&m, "w", 1, ne1, COL_GGML_F32, 0), tinfo(&m, "w", 1, ne1, COL_GGML_F32, 32),
        pad_data(&m, 32, 64);
    expect(&m, COL_EFORMAT, "\"w\" is given twice", "a tensor name given twice");
    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    head(&m, 3, 1, 0), tinfo(&m, "w", 5, ne5, COL_GGML_F32, 0), pad_data(&m, 32, 4);
    expect(&m, COL_EFORMAT, "5 dimensions", "5 dims");
    uint64_t q33[1] = {33};
    head(&m, 3, 1, 0), tinfo(&m, "q", 1, q33, COL_GGML_Q8_0, 0), pad_data(&m, 32, 64);
    expect(&m, COL_EFORMAT, "multiple of its block", "a Q8_0 row of 33");
    uint64_t huge[4] = {(uint64_t)1 << 40, (uint64_t)1 << 30, 1, 1};
    head(&m, 3, 1, 0), tinfo(&m, "w", 2, huge, COL_GGML_F32, 0), pad_data(&m, 32, 16);
    expect(&m, COL_EFORMAT, "too large", "2^70 elements");
    uint64_t big[2] = {(uint64_t)1 << 62, 2};
    head(&m, 3, 1, 0), tinfo(&m, "w", 2, big, COL_GGML_F32, 0), pad_data(&m, 32, 16);
    expect(&m, COL_EFORMAT, NULL, "2^63 elements of f32: a size past 2^64");
    uint64_t neg[1] = {UINT64_MAX};
    head(&m, 3, 1, 0), tinfo(&m, "w", 1, neg, COL_GGML_F32, 0), pad_data(&m, 32, 16);
    expect(&m, COL_EFORMAT, "too large", "a dimension of 2^64-1");
    head(&m, 3, 2, 0), tinfo(&m, "odd", 2, ne2, 99, 0), tinfo(&m, "w", 1, ne1, COL_GGML_F32, 0), pad_data(&m, 32, 64);
    col_gguf *g = NULL;
    col_err err = {0};
    bool listed = col_gguf_parse(m.b, m.n, "odd.gguf", &g, &err) == COL_OK && col_gguf_tensor_count(g) == 2;
    const col_gguf_tensor *odd = listed ? col_gguf_tensor_find(g, "odd") : NULL;
    const col_gguf_tensor *w = listed ? col_gguf_tensor_find(g, "w") : NULL;
    const void *data;
    uint64_t nb;
    TL_OK(odd && odd->type == 99 && !odd->data && odd->nbytes == 0, "a tensor of ggml type 99 is listed");
    TL_OK(odd && col_gguf_tensor_data(g, odd, &data, &nb, &err) == COL_EUNSUPPORTED && strstr(err.msg, "99") &&
              strstr(err.msg, "odd"),
          "and refused at use: %s", err.msg);
    TL_OK(w && col_gguf_tensor_data(g, w, &data, &nb, &err) == COL_OK && nb == 16, "the other tensor reads");
    col_gguf_close(g);
    head(&m, 3, 1, 0), tinfo(&m, "odd", 1, ne1, 99, 4096);
    expect(&m, COL_EFORMAT, "past the end", "a tensor of an unknown type starting past the end");
}

static void test_types(void)
{
    uint32_t be, bb;
    TL_OK(col_ggml_type_block(COL_GGML_Q8_0, &be, &bb) && be == 32 && bb == 34 &&
              col_ggml_type_block(COL_GGML_Q4_K, &be, &bb) && be == 256 && bb == 144 &&
              col_ggml_type_block(COL_GGML_Q6_K, &be, &bb) && be == 256 && bb == 210 &&
              col_ggml_type_block(COL_GGML_BF16, &be, &bb) && be == 1 && bb == 2 && !col_ggml_type_block(4, &be, &bb) &&
              !col_ggml_type_block(1000, &be, &bb),
          "ggml block sizes");
    TL_OK(col_ggml_row_bytes(COL_GGML_Q4_0, 64) == 36 && col_ggml_row_bytes(COL_GGML_Q4_0, 65) == 0 &&
              strcmp(col_ggml_type_name(COL_GGML_Q4_K), "Q4_K") == 0 && !col_ggml_type_name(31),
          "row bytes and names");
}

int main(void)
{
    char *json;
    size_t jlen;
    col_err err = {0};
    if (col_read_file(FIXTURES "/expected.json", 0, &json, &jlen, &err) != COL_OK) {
        TL_OK(false, "read expected.json: %s", err.msg);
        return tl_done();
    }
    cJSON *exp = cJSON_Parse(json);
    free(json);
    test_types();
    const char *files[] = {"basic.gguf", "align64_v2.gguf"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, FIXTURES "/%s", files[i]);
        col_gguf *g = NULL;
        col_status st = col_gguf_open(path, &g, &err);
        TL_OK(st == COL_OK, "open %s: %s", files[i], st == COL_OK ? "ok" : err.msg);
        if (st != COL_OK)
            continue;
        check_file(g, files[i], cJSON_GetObjectItem(exp, files[i]));
        if (i == 0)
            test_lookups(g);
        col_gguf_close(g);
    }
    /* the same from memory, then its truncations */
    char *bytes;
    size_t blen;
    if (col_read_file(FIXTURES "/basic.gguf", 0, &bytes, &blen, &err) == COL_OK) {
        col_gguf *g = NULL;
        TL_OK(col_gguf_parse(bytes, blen, "basic.gguf", &g, &err) == COL_OK, "parse basic.gguf from memory");
        uint64_t data_end = 0;
        if (g) {
            check_file(g, "basic.gguf (memory)", cJSON_GetObjectItem(exp, "basic.gguf"));
            for (int64_t i = 0; i < col_gguf_tensor_count(g); i++) {
                const col_gguf_tensor *t = col_gguf_tensor_at(g, i);
                if (col_gguf_data_offset(g) + t->offset + t->nbytes > data_end)
                    data_end = col_gguf_data_offset(g) + t->offset + t->nbytes;
            }
        }
        col_gguf_close(g);
        test_hostile((const uint8_t *)bytes, blen, data_end);
        free(bytes);
    }
    col_gguf *g = NULL;
    err = (col_err){0};
    TL_OK(col_gguf_open(FIXTURES "/big_endian.gguf", &g, &err) == COL_EUNSUPPORTED && !g &&
              strstr(err.msg, "big-endian"),
          "a big-endian file from GGUFWriter is refused: %s", err.msg);
    TL_OK(col_gguf_open(FIXTURES "/no-such.gguf", &g, &err) == COL_EIO && !g, "a missing file: %s", err.msg);
    TL_OK(col_gguf_open(FIXTURES, &g, &err) == COL_EIO && !g && strstr(err.msg, "directory"), "a directory: %s",
          err.msg);
    cJSON_Delete(exp);
    return tl_done();
}
