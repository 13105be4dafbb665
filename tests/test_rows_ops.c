/* test_rows_ops.c - many sequences at their own positions in one batch
 * (serving): col_arange_rows, col_kv_write_rows and col_attention_cached_rows
 * on the CPU backend against col_arange, col_kv_write and
 * col_attention_cached run per batch row (B = 1 graphs over that row's cache
 * row), bit for bit: GQA and MHA, one and three new tokens, rows permuted and
 * the identity (no row map), other starts per row, head dims with and without
 * padding, one key tile and several, strided new keys, a whole decode step
 * (positions, two cache writes, attention over the written caches). Then the
 * errors: a cache row outside the cache, a position past it or negative fail
 * the run with COL_EINVAL and write nothing; bad operands fail the build; the
 * gradient is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

static float *randv(int64_t n, uint64_t seed)
{
    float *v = malloc(sizeof(float) * (size_t)(n + 1));
    col_fill_uniform(v, n, seed, -1.0f, 1.0f);
    return v;
}

static col_node *leaf(col_graph *g, const char *name, col_dtype dt, int nd, const int64_t *shape, void *data)
{
    col_node *n = col_input(g, name, dt, nd, shape);
    if (n && data)
        col_bind(n, data, NULL);
    return n;
}

/* plans and runs g for its marked outputs; NULL (and err) on failure */
static col_plan *run(col_graph *g, col_err *err)
{
    col_plan *p = NULL;
    if (col_graph_status(g) != COL_OK) {
        col_err_set(err, col_graph_status(g), "%s", col_graph_error(g)->msg);
        return NULL;
    }
    if (col_plan_create(g, &p, err) != COL_OK)
        return NULL;
    if (col_plan_run(p, &be, err) != COL_OK) {
        col_plan_free(p);
        return NULL;
    }
    return p;
}

/* ---- arange_rows ---- */

static void test_arange(void)
{
    int64_t start[3] = {7, 0, 130}, B = 3, n = 4, off = 2;
    col_graph *g = col_graph_new();
    col_node *st = leaf(g, "start", COL_I64, 1, &B, start);
    col_node *a = col_arange_rows(g, st, n, off);
    col_mark_output(a);
    col_err err = {0};
    col_plan *p = run(g, &err);
    bool ok = p && a->t.ndim == 2 && a->t.shape[0] == B && a->t.shape[1] == n && a->t.dtype == COL_I32;
    for (int64_t b = 0; b < B && ok; b++) {
        col_graph *g1 = col_graph_new();
        int64_t one = 1;
        col_node *a1 = col_arange(g1, leaf(g1, "s", COL_I64, 1, &one, &start[b]), n, off);
        col_mark_output(a1);
        col_plan *p1 = run(g1, &err);
        ok = p1 && memcmp((int32_t *)col_data(a) + b * n, col_data(a1), sizeof(int32_t) * (size_t)n) == 0;
        col_plan_free(p1);
        col_graph_free(g1);
    }
    TL_OK(ok, "arange_rows [3,4] equals arange per row (starts 7, 0, 130, offset 2) %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

/* ---- kv_write_rows ---- */

typedef struct {
    const char *name;
    int64_t S, H, L, D, B, T;
    const int64_t *rows; /* NULL: row b */
    const int64_t *start;
    col_dtype dt;
    bool strided; /* x stored [B,T,H,D] and transposed in the graph */
} kv_case;

static size_t esize(col_dtype dt) { return col_dtype_size(dt); }

/* x [B,H,T,D] (or [B,T,H,D] strided) of random bytes of valid values */
static void *rand_elems(col_dtype dt, int64_t n, uint64_t seed)
{
    float *f = randv(n, seed);
    if (dt == COL_F32)
        return f;
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        h[i] = col_f32_to_bf16(f[i]);
    free(f);
    return h;
}

static col_node *x_node(col_graph *g, const kv_case *c, int64_t B, void *data)
{
    int64_t sx[4] = {B, c->H, c->T, c->D}, st[4] = {B, c->T, c->H, c->D};
    if (!c->strided)
        return leaf(g, "x", c->dt, 4, sx, data);
    return col_transpose(g, leaf(g, "x", c->dt, 4, st, data), 1, 2);
}

static void test_kv_write(const kv_case *c)
{
    size_t es = esize(c->dt);
    int64_t row = c->H * c->L * c->D, xrow = c->H * c->T * c->D, ncache = c->S * row;
    char *cache = rand_elems(c->dt, ncache, 11), *ref = malloc((size_t)ncache * es);
    memcpy(ref, cache, (size_t)ncache * es);
    char *x = rand_elems(c->dt, c->B * xrow, 12);
    col_err err = {0};

    col_graph *g = col_graph_new();
    int64_t sc[4] = {c->S, c->H, c->L, c->D};
    col_node *cn = leaf(g, "cache", c->dt, 4, sc, cache);
    col_node *st = leaf(g, "start", COL_I64, 1, &c->B, (void *)c->start);
    col_node *rw = c->rows ? leaf(g, "rows", COL_I64, 1, &c->B, (void *)c->rows) : NULL;
    col_node *kv = col_kv_write_rows(g, cn, x_node(g, c, c->B, x), st, rw);
    col_mark_output(kv);
    col_plan *p = run(g, &err);
    bool ok = p != NULL;
    /* the reference: kv_write of x's row b into a [1,H,L,D] cache at row rows[b] of the copy */
    for (int64_t b = 0; b < c->B && ok; b++) {
        int64_t r = c->rows ? c->rows[b] : b, one = 1;
        col_graph *g1 = col_graph_new();
        int64_t s1[4] = {1, c->H, c->L, c->D};
        col_node *c1 = leaf(g1, "cache", c->dt, 4, s1, ref + (size_t)(r * row) * es);
        char *xb = x + (size_t)(b * xrow) * es; /* row b of x in either layout */
        col_node *k1 = col_kv_write(g1, c1, x_node(g1, c, 1, xb), leaf(g1, "s", COL_I64, 1, &one, (void *)&c->start[b]));
        col_mark_output(k1);
        col_plan *p1 = run(g1, &err);
        ok = p1 != NULL;
        col_plan_free(p1);
        col_graph_free(g1);
    }
    ok = ok && memcmp(cache, ref, (size_t)ncache * es) == 0;
    TL_OK(ok, "kv_write_rows %s: the cache equals kv_write per row %s", c->name, err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(cache), free(ref), free(x);
}

/* ---- attention_cached_rows ---- */

typedef struct {
    const char *name;
    int64_t S, Hq, Hkv, L, D, B, T;
    const int64_t *rows;
    const int64_t *start;
} att_case;

static void test_attention(const att_case *c)
{
    int64_t krow = c->Hkv * c->L * c->D, qrow = c->Hq * c->T * c->D;
    float *kc = randv(c->S * krow, 21), *vc = randv(c->S * krow, 22), *q = randv(c->B * qrow, 23);
    col_err err = {0};
    col_graph *g = col_graph_new();
    int64_t sc[4] = {c->S, c->Hkv, c->L, c->D}, sq[4] = {c->B, c->Hq, c->T, c->D};
    col_node *st = leaf(g, "start", COL_I64, 1, &c->B, (void *)c->start);
    col_node *rw = c->rows ? leaf(g, "rows", COL_I64, 1, &c->B, (void *)c->rows) : NULL;
    col_node *a = col_attention_cached_rows(g, leaf(g, "q", COL_F32, 4, sq, q), leaf(g, "k", COL_F32, 4, sc, kc),
                                            leaf(g, "v", COL_F32, 4, sc, vc), st, rw, 0.0f);
    col_mark_output(a);
    col_plan *p = run(g, &err);
    bool ok = p != NULL, same = ok;
    double worst = 0.0;
    for (int64_t b = 0; b < c->B && ok; b++) {
        int64_t r = c->rows ? c->rows[b] : b, one = 1;
        col_graph *g1 = col_graph_new();
        int64_t s1[4] = {1, c->Hkv, c->L, c->D}, q1[4] = {1, c->Hq, c->T, c->D};
        col_node *a1 = col_attention_cached(g1, leaf(g1, "q", COL_F32, 4, q1, q + b * qrow),
                                            leaf(g1, "k", COL_F32, 4, s1, kc + r * krow),
                                            leaf(g1, "v", COL_F32, 4, s1, vc + r * krow),
                                            leaf(g1, "s", COL_I64, 1, &one, (void *)&c->start[b]), 0.0f);
        col_mark_output(a1);
        col_plan *p1 = run(g1, &err);
        ok = p1 != NULL;
        if (ok) {
            const float *o = (const float *)col_data(a) + b * qrow, *o1 = col_data(a1);
            for (int64_t i = 0; i < qrow; i++)
                worst = fmax(worst, fabs((double)o[i] - o1[i]));
            same = same && memcmp(o, o1, sizeof(float) * (size_t)qrow) == 0 &&
                   memcmp((const float *)col_extra(a) + b * c->Hq * c->T, col_extra(a1),
                          sizeof(float) * (size_t)(c->Hq * c->T)) == 0;
        }
        col_plan_free(p1);
        col_graph_free(g1);
    }
    TL_OK(ok && same, "attention_cached_rows %s: output and logsumexp bitwise equal to attention_cached per row "
          "(max |diff| %.1e) %s", c->name, worst, err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(kc), free(vc), free(q);
}

/* ---- one decode step: positions, the new keys and values written, attention over the written caches ---- */

typedef struct {
    col_node *pos, *att;
} step_nodes;

/* x [B,H,T,D] leaves; with rows (batched) or as a B = 1 graph over caches [1,...] (rows NULL, one: start [1]) */
static step_nodes build_step(col_graph *g, int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t L, int64_t D,
                             int64_t T, float *kc, float *vc, float *q, float *kn, float *vn, int64_t *start,
                             int64_t *rows, bool batched)
{
    step_nodes s;
    int64_t sc[4] = {S, Hkv, L, D}, sq[4] = {B, Hq, T, D}, sk[4] = {B, Hkv, T, D};
    col_node *kcn = leaf(g, "kc", COL_F32, 4, sc, kc), *vcn = leaf(g, "vc", COL_F32, 4, sc, vc);
    col_node *st = leaf(g, "start", COL_I64, 1, &B, start);
    col_node *qn = leaf(g, "q", COL_F32, 4, sq, q), *kx = leaf(g, "kn", COL_F32, 4, sk, kn);
    col_node *vx = leaf(g, "vn", COL_F32, 4, sk, vn);
    if (batched) {
        col_node *rw = leaf(g, "rows", COL_I64, 1, &B, rows);
        s.pos = col_arange_rows(g, st, T, 0);
        col_node *kw = col_kv_write_rows(g, kcn, kx, st, rw), *vw = col_kv_write_rows(g, vcn, vx, st, rw);
        s.att = col_attention_cached_rows(g, qn, kw, vw, st, rw, 0.0f);
    } else {
        s.pos = col_arange(g, st, T, 0);
        col_node *kw = col_kv_write(g, kcn, kx, st), *vw = col_kv_write(g, vcn, vx, st);
        s.att = col_attention_cached(g, qn, kw, vw, st, 0.0f);
    }
    col_mark_output(s.pos);
    col_mark_output(s.att);
    return s;
}

static void test_step(void)
{
    const int64_t S = 4, Hq = 4, Hkv = 2, L = 80, D = 32, B = 3, T = 3;
    int64_t rows[3] = {2, 0, 3}, start[3] = {70, 0, 33};
    int64_t krow = Hkv * L * D, qrow = Hq * T * D, nrow = Hkv * T * D;
    float *kc = randv(S * krow, 31), *vc = randv(S * krow, 32), *q = randv(B * qrow, 33);
    float *kn = randv(B * nrow, 34), *vn = randv(B * nrow, 35);
    float *kr = malloc(sizeof(float) * (size_t)(S * krow)), *vr = malloc(sizeof(float) * (size_t)(S * krow));
    memcpy(kr, kc, sizeof(float) * (size_t)(S * krow));
    memcpy(vr, vc, sizeof(float) * (size_t)(S * krow));
    col_err err = {0};
    col_graph *g = col_graph_new();
    step_nodes s = build_step(g, B, S, Hq, Hkv, L, D, T, kc, vc, q, kn, vn, start, rows, true);
    col_plan *p = run(g, &err);
    bool ok = p != NULL, same = ok;
    for (int64_t b = 0; b < B && ok; b++) {
        col_graph *g1 = col_graph_new();
        int64_t r = rows[b];
        step_nodes s1 = build_step(g1, 1, 1, Hq, Hkv, L, D, T, kr + r * krow, vr + r * krow, q + b * qrow,
                                   kn + b * nrow, vn + b * nrow, &start[b], NULL, false);
        col_plan *p1 = run(g1, &err);
        ok = p1 != NULL;
        same = same && ok && memcmp((int32_t *)col_data(s.pos) + b * T, col_data(s1.pos), sizeof(int32_t) * T) == 0 &&
               memcmp((float *)col_data(s.att) + b * qrow, col_data(s1.att), sizeof(float) * (size_t)qrow) == 0;
        col_plan_free(p1);
        col_graph_free(g1);
    }
    same = same && memcmp(kc, kr, sizeof(float) * (size_t)(S * krow)) == 0 &&
           memcmp(vc, vr, sizeof(float) * (size_t)(S * krow)) == 0;
    TL_OK(ok && same, "a decode step of 3 rows (positions, kv writes, attention over them) equals 3 one-row steps "
          "bit for bit, caches included %s", err.msg);
    /* the same plan again at the next positions: the start is read at run time */
    for (int b = 0; b < 3; b++)
        start[b] += T;
    ok = ok && col_plan_run(p, &be, &err) == COL_OK;
    for (int64_t b = 0; b < B && ok; b++) {
        col_graph *g1 = col_graph_new();
        int64_t r = rows[b];
        step_nodes s1 = build_step(g1, 1, 1, Hq, Hkv, L, D, T, kr + r * krow, vr + r * krow, q + b * qrow,
                                   kn + b * nrow, vn + b * nrow, &start[b], NULL, false);
        col_plan *p1 = run(g1, &err);
        ok = p1 != NULL && memcmp((float *)col_data(s.att) + b * qrow, col_data(s1.att), sizeof(float) * (size_t)qrow) == 0;
        col_plan_free(p1);
        col_graph_free(g1);
    }
    TL_OK(ok && memcmp(kc, kr, sizeof(float) * (size_t)(S * krow)) == 0,
          "the same plan run again 3 positions later equals the one-row steps %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(kc), free(vc), free(q), free(kn), free(vn), free(kr), free(vr);
}

/* ---- errors ---- */

/* a run that must fail with COL_EINVAL and a message containing want; the caches unchanged */
static void expect_run_error(const char *what, const int64_t *rows, const int64_t *start, const char *want)
{
    const int64_t S = 4, H = 2, L = 10, D = 8, B = 3, T = 3;
    int64_t n = S * H * L * D;
    float *kc = randv(n, 41), *x = randv(B * H * T * D, 42), *q = randv(B * H * T * D, 43);
    float *before = malloc(sizeof(float) * (size_t)n);
    memcpy(before, kc, sizeof(float) * (size_t)n);
    int64_t sc[4] = {S, H, L, D}, sx[4] = {B, H, T, D};
    for (int which = 0; which < 2; which++) {
        col_graph *g = col_graph_new();
        col_node *cn = leaf(g, "cache", COL_F32, 4, sc, kc);
        col_node *st = leaf(g, "start", COL_I64, 1, &B, (void *)start);
        col_node *rw = rows ? leaf(g, "rows", COL_I64, 1, &B, (void *)rows) : NULL;
        col_node *y = which == 0 ? col_kv_write_rows(g, cn, leaf(g, "x", COL_F32, 4, sx, x), st, rw)
                                 : col_attention_cached_rows(g, leaf(g, "q", COL_F32, 4, sx, q), cn, cn, st, rw, 0.0f);
        col_mark_output(y);
        col_err err = {0};
        col_plan *p = run(g, &err);
        const char *op = which == 0 ? "kv_write" : "attention";
        TL_OK(!p && err.code == COL_EINVAL && strstr(err.msg, op) && strstr(err.msg, want) &&
                  memcmp(kc, before, sizeof(float) * (size_t)n) == 0,
              "%s_rows, %s: COL_EINVAL \"%s\", nothing written", op, what, err.msg);
        col_plan_free(p);
        col_graph_free(g);
    }
    free(kc), free(x), free(q), free(before);
}

static void test_errors(void)
{
    int64_t good_rows[3] = {2, 0, 3}, good_start[3] = {1, 7, 0};
    expect_run_error("cache row 4 of 4", (int64_t[]){2, 4, 0}, good_start,
                     "batch row 1 uses cache row 4, outside the cache's 4 rows");
    expect_run_error("cache row -1", (int64_t[]){-1, 0, 1}, good_start,
                     "batch row 0 uses cache row -1, outside the cache's 4 rows");
    expect_run_error("start 8 + 3 > 10", good_rows, (int64_t[]){1, 0, 8},
                     "batch row 2 at position 8 + 3 tokens exceeds the cache of 10");
    expect_run_error("start -1", good_rows, (int64_t[]){0, -1, 2},
                     "batch row 1 at position -1 + 3 tokens exceeds the cache of 10");
    expect_run_error("a huge start", NULL, (int64_t[]){0, INT64_MAX, 2},
                     "batch row 1 at position 9223372036854775807 + 3 tokens");

    /* builder errors */
    int64_t B = 3, B2 = 2, sc[4] = {2, 2, 10, 8}, sx[4] = {3, 2, 1, 8};
    struct {
        const char *what, *want;
        int kind;
    } bad[] = {
        {"start i32", "must be an i64 [3] node", 0},
        {"start of 2 for 3 rows", "must be an i64 [3] node", 1},
        {"no row map with 3 rows over a cache of 2", "need a cache of at least as many rows", 2},
        {"rows of 2 for 3 rows", "the cache rows must be an i64 [3] node", 3},
    };
    for (int i = 0; i < 4; i++)
        for (int which = 0; which < 3; which++) {
            col_graph *g = col_graph_new();
            col_node *st = bad[i].kind == 0   ? col_input(g, "s", COL_I32, 1, &B)
                           : bad[i].kind == 1 ? col_input(g, "s", COL_I64, 1, &B2)
                                              : col_input(g, "s", COL_I64, 1, &B);
            col_node *rw = bad[i].kind == 3 ? col_input(g, "r", COL_I64, 1, &B2)
                           : bad[i].kind == 2 ? NULL
                                              : col_input(g, "r", COL_I64, 1, &B);
            col_node *cn = col_input(g, "c", COL_F32, 4, sc), *x = col_input(g, "x", COL_F32, 4, sx);
            col_node *y = which == 0   ? col_kv_write_rows(g, cn, x, st, rw)
                          : which == 1 ? col_attention_cached_rows(g, x, cn, cn, st, rw, 0.0f)
                                       : col_arange_rows(g, st, 1, 0);
            if (which == 2 && bad[i].kind >= 1) { /* arange: any length, no rows */
                col_graph_free(g);
                continue;
            }
            const col_err *e = col_graph_error(g);
            TL_OK(!y && col_graph_status(g) != COL_OK &&
                      strstr(e->msg, which == 2 ? "the start positions must be an i64 [B] node" : bad[i].want),
                  "%s: %s fails the build: %s", which == 0 ? "kv_write_rows" : which == 1 ? "attention_rows" : "arange_rows",
                  bad[i].what, e->msg);
            col_graph_free(g);
        }

    /* no gradient: attention over the cache rows, and the writes */
    for (int which = 0; which < 2; which++) {
        col_graph *g = col_graph_new();
        col_node *st = col_input(g, "s", COL_I64, 1, &B);
        col_node *cn = col_input(g, "c", COL_F32, 4, (int64_t[]){3, 2, 10, 8});
        col_node *x = col_param(g, "x", COL_F32, 4, sx);
        col_node *y = which == 0 ? col_attention_cached_rows(g, x, cn, cn, st, NULL, 0.0f)
                                 : col_kv_write_rows(g, cn, x, st, NULL);
        col_err err = {0};
        col_status rc = y ? col_graph_backward(g, col_sum(g, y, 15u, 0), &err) : COL_EINTERNAL;
        TL_OK(rc == COL_EUNSUPPORTED && strstr(err.msg, which == 0 ? "no gradient (inference only)" : "kv_write has no gradient"),
              "%s: the gradient is refused: %s", which == 0 ? "attention_cached_rows" : "kv_write_rows", err.msg);
        col_graph_free(g);
    }
}

int main(void)
{
    tl_cpu_backend(&be);
    test_arange();

    static const int64_t rows3[3] = {2, 0, 3}, st3[3] = {5, 0, 9}, st_long[3] = {130, 0, 71};
    kv_case kv[] = {
        {"f32 rows {2,0,3} T=1", 4, 2, 16, 8, 3, 1, rows3, st3, COL_F32, false},
        {"f32 rows {2,0,3} T=3", 4, 2, 16, 8, 3, 3, rows3, st3, COL_F32, false},
        {"f32 no row map T=3", 4, 2, 16, 8, 3, 3, NULL, st3, COL_F32, false},
        {"bf16 rows {2,0,3} T=3, x strided", 4, 3, 16, 5, 3, 3, rows3, st3, COL_BF16, true},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        test_kv_write(&kv[i]);

    att_case at[] = {
        {"GQA 4:2 T=1 rows {2,0,3} D=16", 4, 4, 2, 16, 16, 3, 1, rows3, st3},
        {"GQA 4:2 T=3 rows {2,0,3} D=16", 4, 4, 2, 16, 16, 3, 3, rows3, st3},
        {"MHA 3:3 T=1 rows {2,0,3} D=24", 4, 3, 3, 16, 24, 3, 1, rows3, st3},
        {"MHA 3:3 T=3 rows {2,0,3} D=24", 4, 3, 3, 16, 24, 3, 3, rows3, st3},
        {"GQA 4:2 T=3 no row map D=16", 4, 4, 2, 16, 16, 3, 3, NULL, st3},
        {"GQA 4:2 T=3 rows {2,0,3} L=200 D=64 (several key tiles, threads)", 4, 4, 2, 200, 64, 3, 3, rows3, st_long},
        {"MHA 2:2 T=1 rows {2,0,3} L=200 D=40", 4, 2, 2, 200, 40, 3, 1, rows3, st_long},
    };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        test_attention(&at[i]);

    test_step();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
