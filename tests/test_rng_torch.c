/* test_rng_torch.c - PyTorch's CPU generator, rand and randn, bit for bit
 * against tests/fixtures/diffusion/torch_rng.safetensors
 * (tools/refgen/make_torch_rng_fixtures.py: torch 2.15 with the AVX2 and
 * the DEFAULT CPU capability). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "rng_torch.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/diffusion"
#endif

/* The libm kernel and the n < 16 path call the C library's logf/sinf/cosf
 * and log1p/sin/cos: bit for bit where it is the library torch used (glibc
 * on x86-64); elsewhere within one float ulp. */
#if defined(__GLIBC__) && defined(__x86_64__)
#define LIBM_EXACT 1
#else
#define LIBM_EXACT 0
#endif

static col_st_file *fix;

static const col_ckpt_tensor *find(const char *name)
{
    for (int i = 0; i < col_st_count(fix); i++)
        if (strcmp(col_st_get(fix, i)->name, name) == 0)
            return col_st_get(fix, i);
    return NULL;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static bool close_ulp(float a, float b, bool exact)
{
    if (fbits(a) == fbits(b))
        return true;
    if (exact || !isfinite(a) || !isfinite(b))
        return false;
    return fabsf(a - b) <= fabsf(nextafterf(b, INFINITY) - b) * 1.0001f;
}

/* Compares got[off..off+n) with the F32 tensor name; the first difference goes to *why. */
static bool compare(const char *name, const float *got, int64_t n, bool exact, char *why, size_t wl)
{
    const col_ckpt_tensor *t = find(name);
    if (!t || t->dtype != COL_ST_F32 || t->ndim != 1 || t->shape[0] != n) {
        snprintf(why, wl, "%s: no such F32 tensor of %lld values in the fixture", name, (long long)n);
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        float want;
        memcpy(&want, (const char *)t->data + 4 * i, 4);
        if (!close_ulp(got[i], want, exact)) {
            snprintf(why, wl, "%s[%lld]: %.9g (0x%08x), torch %.9g (0x%08x)", name, (long long)i, got[i],
                     fbits(got[i]), want, fbits(want));
            return false;
        }
    }
    return true;
}

static uint64_t fnv64(const float *x, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = fbits(x[i]);
        for (int k = 0; k < 4; k++) {
            h ^= (b >> (8 * k)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

/* Replays one run of the plan; one result line per run. */
static void run_plan_entry(const cJSON *run, float *buf)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(run, "name"));
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItem(run, "path"));
    const cJSON *seed = cJSON_GetObjectItem(run, "seed"), *ops = cJSON_GetObjectItem(run, "ops");
    if (!name || !path || !cJSON_IsString(seed) || !cJSON_IsArray(ops)) {
        TL_OK(false, "plan entry well formed");
        return;
    }
    bool libm = strcmp(path, "libm") == 0;
    /* seeds are decimal strings (they reach 2^64 - 1) */
    col_torch_gen g;
    col_torch_gen_seed(&g, strtoull(seed->valuestring, NULL, 10));
    g.path = libm ? COL_TORCH_NORMAL_LIBM : COL_TORCH_NORMAL_AVX2;
    char why[256] = "";
    bool ok = true;
    int k = 0, checked = 0;
    for (const cJSON *op = ops->child; op && ok; op = op->next, k++) {
        const char *what = cJSON_GetStringValue(cJSON_GetArrayItem(op, 0));
        const cJSON *nv = cJSON_GetArrayItem(op, 1);
        if (!what || !(cJSON_IsNumber(nv) || (strcmp(what, "seed") == 0 && cJSON_IsString(nv)))) {
            ok = false;
            snprintf(why, sizeof why, "op %d malformed", k);
            break;
        }
        if (strcmp(what, "seed") == 0) {
            col_torch_gen_seed(&g, strtoull(nv->valuestring, NULL, 10));
            g.path = libm ? COL_TORCH_NORMAL_LIBM : COL_TORCH_NORMAL_AVX2;
            continue;
        }
        int64_t n = (int64_t)nv->valuedouble;
        bool randn = strcmp(what, "randn") == 0;
        if (randn)
            col_torch_randn(&g, buf, n);
        else
            col_torch_rand(&g, buf, n);
        bool exact = !randn || LIBM_EXACT || (!libm && n >= 16);
        char key[160];
        if (n <= 256) {
            snprintf(key, sizeof key, "%s.%d", name, k);
            ok = compare(key, buf, n, exact, why, sizeof why);
        } else {
            snprintf(key, sizeof key, "%s.%d.head", name, k);
            ok = compare(key, buf, 32, exact, why, sizeof why);
            snprintf(key, sizeof key, "%s.%d.tail", name, k);
            ok = ok && compare(key, buf + n - 32, 32, exact, why, sizeof why);
            if (ok && exact) {
                snprintf(key, sizeof key, "%s.%d.hash", name, k);
                const col_ckpt_tensor *t = find(key);
                uint64_t want = 0;
                if (t && t->dtype == COL_ST_I64 && t->nbytes == 8)
                    memcpy(&want, t->data, 8);
                ok = t && want == fnv64(buf, n);
                if (!ok)
                    snprintf(why, sizeof why, "%s: the hash of all %lld values differs", key, (long long)n);
            }
        }
        checked++;
    }
    TL_OK(ok, "%s: %d draws as torch's", name, checked);
    if (!ok)
        TL_NOTE("%s", why);
}

int main(void)
{
    col_err err = {COL_OK};
    /* the C++ standard's check of mt19937 ([rand.predef]): the 10000th word from the default seed 5489 */
    col_torch_gen g;
    col_torch_gen_seed(&g, 5489);
    uint32_t w = 0;
    for (int i = 0; i < 10000; i++)
        w = col_torch_gen_u32(&g);
    TL_OK(w == 4123659995u, "MT19937: the 10000th word from seed 5489 is 4123659995 (got %u)", w);

    /* skip = that many words; a copy of the struct is an independent stream at the same place */
    col_torch_gen a, b;
    col_torch_gen_seed(&a, 99);
    col_torch_gen_seed(&b, 99);
    bool same = true;
    uint64_t counts[] = {1, 622, 623, 624, 625, 1300, 7};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        for (uint64_t i = 0; i < counts[c]; i++)
            (void)col_torch_gen_u32(&a);
        col_torch_gen_skip(&b, counts[c]);
        same = same && col_torch_gen_u32(&a) == col_torch_gen_u32(&b);
    }
    TL_OK(same, "col_torch_gen_skip(n) advances as n words do, across twists");
    col_torch_gen fork = a;
    float x1[20], x2[20];
    col_torch_randn(&a, x1, 20);
    col_torch_randn(&fork, x2, 20);
    TL_OK(memcmp(x1, x2, sizeof x1) == 0, "a copied generator draws the same numbers");
    /* seeds are taken modulo 2^32, as torch's mt19937 does */
    col_torch_gen_seed(&a, 5);
    col_torch_gen_seed(&b, (UINT64_C(1) << 32) + 5);
    TL_OK(col_torch_gen_u64(&a) == col_torch_gen_u64(&b) && b.seed == (UINT64_C(1) << 32) + 5,
          "seed 2^32+5 draws as seed 5 and keeps its value");

    /* the two kernels agree to float rounding on a block (the polynomials are that good) */
    float u[16], v[16];
    col_torch_gen_seed(&a, 11);
    col_torch_rand(&a, u, 16);
    memcpy(v, u, sizeof u);
    col_torch_normal16(COL_TORCH_NORMAL_AVX2, u);
    col_torch_normal16(COL_TORCH_NORMAL_LIBM, v);
    float md = 0;
    for (int i = 0; i < 16; i++)
        md = fmaxf(md, fabsf(u[i] - v[i]));
    TL_OK(md < 1e-5f, "AVX2 and libm kernels within 1e-5 of each other (max %g)", md);

    if (col_st_open(FIXTURES "/torch_rng.safetensors", &fix, &err) != COL_OK) {
        TL_OK(false, "fixture readable: %s", err.msg);
        return tl_done();
    }
    const char *plan_s = col_st_metadata(fix, "plan");
    cJSON *plan = plan_s ? cJSON_Parse(plan_s) : NULL;
    TL_OK(cJSON_IsArray(plan) && cJSON_GetArraySize(plan) > 50, "fixture plan holds the runs (%d)",
          cJSON_GetArraySize(plan));
    if (!LIBM_EXACT)
        TL_NOTE("not glibc on x86-64: the libm kernel and the n < 16 path are compared within one ulp");
    float *buf = malloc(sizeof(float) * 70000);
    if (cJSON_IsArray(plan) && buf)
        for (const cJSON *run = plan->child; run; run = run->next)
            run_plan_entry(run, buf);
    free(buf);
    cJSON_Delete(plan);
    col_st_close(fix);
    return tl_done();
}
