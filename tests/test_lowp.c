/* test_lowp.c - the 16-bit float types: array conversions against the scalar
 * ones, casts, bf16/f16 matmuls (f32 accumulation) against a double reference
 * computed from the rounded operands, gradients into 16-bit buffers, 16-bit
 * embedding tables, the seeded backward (a loss scale), and gradient checks. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x and y the same f32, NaN matching any NaN */
static bool same_f32(float x, float y) { return isnan(x) ? isnan(y) : bits(x) == bits(y); }
static bool is_nan16(col_dtype dt, uint16_t h) { return isnan(dt == COL_BF16 ? col_bf16_to_f32(h) : col_f16_to_f32(h)); }
static uint16_t scalar16(col_dtype dt, float f) { return dt == COL_BF16 ? col_f32_to_bf16(f) : col_f32_to_f16(f); }
static float scalar32(col_dtype dt, uint16_t h) { return dt == COL_BF16 ? col_bf16_to_f32(h) : col_f16_to_f32(h); }

static void test_convert(void)
{
    const col_dtype dts[2] = {COL_BF16, COL_F16};
    uint16_t *h = malloc(sizeof *h * 65536), *h2 = malloc(sizeof *h2 * 65536);
    float *f = malloc(sizeof *f * 65536);
    for (int k = 0; k < 2; k++) {
        col_dtype dt = dts[k];
        for (int i = 0; i < 65536; i++)
            h[i] = (uint16_t)i;
        bool ok = col_convert(f, COL_F32, h, dt, 65536);
        int bad = -1;
        for (int i = 0; ok && i < 65536 && bad < 0; i++)
            if (!same_f32(f[i], scalar32(dt, h[i])))
                bad = i;
        TL_OK(ok && bad < 0, "%s -> f32 equals the scalar conversion for all 65536 patterns (first bad %d)",
              col_dtype_name(dt), bad);
        /* back again: every non-NaN pattern round-trips exactly */
        ok = col_convert(h2, dt, f, COL_F32, 65536);
        bad = -1;
        for (int i = 0; ok && i < 65536 && bad < 0; i++)
            if (is_nan16(dt, h[i]) ? !is_nan16(dt, h2[i]) : h2[i] != h[i])
                bad = i;
        TL_OK(ok && bad < 0, "f32 -> %s -> f32 keeps every value, NaNs stay NaN (first bad %d)", col_dtype_name(dt), bad);
    }
    /* f32 -> 16 bits: random bit patterns, values near the f16 range, and the ties */
    enum { N = 1 << 20 };
    float *x = malloc(sizeof *x * N);
    uint16_t *y = malloc(sizeof *y * N);
    col_rng r;
    col_rng_init(&r, 11);
    for (int i = 0; i < N; i++) {
        uint32_t u = col_rng_u32(&r);
        if (i % 4 == 1) /* magnitudes where f16 has subnormals, normals and its overflow */
            u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
        if (i % 4 == 2) /* exact ties of bf16 (low 16 bits 0x8000) and of f16 (low 13 bits 0x1000) */
            u = (i & 8) ? (u & 0xffff0000u) | 0x8000u : (u & 0xc7ffe000u) | 0x1000u;
        x[i] = from_bits(u);
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                             5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, 3.4028235e38f, 1e-45f};
    memcpy(x, special, sizeof special);
    for (int k = 0; k < 2; k++) {
        col_dtype dt = dts[k];
        bool ok = col_convert(y, dt, x, COL_F32, N);
        int bad = -1;
        for (int i = 0; ok && i < N && bad < 0; i++) {
            uint16_t want = scalar16(dt, x[i]);
            if (is_nan16(dt, want) ? !is_nan16(dt, y[i]) : y[i] != want)
                bad = i;
        }
        TL_OK(ok && bad < 0, "f32 -> %s equals the scalar conversion (round to nearest even) for %d values (first bad "
              "%d: %a)", col_dtype_name(dt), N, bad, bad >= 0 ? (double)x[bad] : 0.0);
    }
    /* bf16 <-> f16 round once, through f32; every length of tail */
    bool ok = true;
    for (int n = 0; n < 40 && ok; n++) {
        uint16_t a[40], b[40];
        for (int i = 0; i < n; i++)
            a[i] = col_f32_to_bf16(x[4 * i + 1]);
        ok = col_convert(b, COL_F16, a, COL_BF16, n);
        for (int i = 0; ok && i < n; i++) {
            uint16_t want = col_f32_to_f16(col_bf16_to_f32(a[i]));
            ok = is_nan16(COL_F16, want) ? is_nan16(COL_F16, b[i]) : b[i] == want;
        }
    }
    TL_OK(ok, "bf16 -> f16 is the f32 round trip, for lengths 0..39");
    TL_OK(!col_convert(y, COL_I32, x, COL_F32, 4) && !col_convert(y, COL_F16, x, COL_I64, 4),
          "col_convert refuses integer dtypes");
    free(x), free(y), free(h), free(h2), free(f);
}

/* runs a graph for out (made contiguous f32) and returns a malloc'd copy */
static float *run(col_graph *g, col_node *out)
{
    col_err err = {0};
    out = col_contiguous(g, col_cast(g, out, COL_F32));
    if (!out) {
        TL_NOTE("build: %s", col_graph_error(g)->msg);
        return NULL;
    }
    col_mark_output(out);
    col_plan *p = NULL;
    if (col_plan_create(g, &p, &err) != COL_OK || col_plan_run(p, &be, &err) != COL_OK) {
        TL_NOTE("run: %s", err.msg);
        col_plan_free(p);
        return NULL;
    }
    size_t n = (size_t)col_numel(&out->t);
    float *r = malloc(sizeof(float) * (n + 1));
    memcpy(r, col_data(out), sizeof(float) * n);
    col_plan_free(p);
    return r;
}

static col_node *bound(col_graph *g, col_dtype dt, void *data, int nd, const int64_t *shape)
{
    col_node *x = col_input(g, "x", dt, nd, shape);
    col_bind(x, data, NULL);
    return x;
}

/* n values uniform in [-1, 1) rounded to dt: the 16-bit array and its f32 values */
static void rounded(col_dtype dt, int64_t n, uint64_t seed, uint16_t *h, float *f)
{
    col_fill_uniform(f, n, seed, -1.0f, 1.0f);
    col_convert(h, dt, f, COL_F32, n);
    col_convert(f, COL_F32, h, dt, n);
}

static void test_cast_kernel(void)
{
    enum { R = 37, C = 29 };
    float x[R * C];
    col_fill_uniform(x, R * C, 5, -300.0f, 300.0f);
    x[3] = NAN, x[4] = 1e30f, x[5] = 1e-40f;
    col_graph *g = col_graph_new();
    int64_t s[2] = {R, C};
    /* f32 -> bf16 of a transposed (strided) view, then bf16 -> f16, then f16 -> f32 */
    col_node *t = col_transpose(g, bound(g, COL_F32, x, 2, s), 0, 1);
    float *o = run(g, col_cast(g, col_cast(g, col_cast(g, t, COL_BF16), COL_F16), COL_F32));
    bool ok = o != NULL;
    for (int i = 0; ok && i < C; i++)
        for (int j = 0; ok && j < R; j++) {
            float want = col_f16_to_f32(col_f32_to_f16(col_bf16_to_f32(col_f32_to_bf16(x[j * C + i]))));
            ok = same_f32(o[i * R + j], want);
        }
    TL_OK(ok, "casts f32 -> bf16 -> f16 -> f32 of a strided view: the scalar conversions, element by element");
    free(o);
    col_graph_free(g);
}

/* ---- matmul ---- */

typedef struct {
    col_dtype dt;
    int64_t B, M, K, N;
    int ta, tb;
    bool bcast; /* b has no batch dim */
} mm_case;

/* C = A B of 16-bit operands against a double reference of the same rounded values, at every element or
 * (sample > 0) at that many elements; the error bound is relative to sum |a||b| over K */
static void check_mm(const mm_case *c, int sample, const char *what)
{
    int64_t B = c->B, M = c->M, K = c->K, N = c->N, nb = c->bcast ? 1 : B;
    uint16_t *ha = malloc(sizeof *ha * (size_t)(B * M * K)), *hb = malloc(sizeof *hb * (size_t)(nb * K * N));
    float *fa = malloc(sizeof *fa * (size_t)(B * M * K)), *fb = malloc(sizeof *fb * (size_t)(nb * K * N));
    rounded(c->dt, B * M * K, 100 + (uint64_t)K, ha, fa);
    rounded(c->dt, nb * K * N, 200 + (uint64_t)N, hb, fb);
    col_graph *g = col_graph_new();
    int64_t sa[3] = {B, c->ta ? K : M, c->ta ? M : K}, sb[3] = {nb, c->tb ? N : K, c->tb ? K : N};
    col_node *a = bound(g, c->dt, ha, 3, sa), *b = c->bcast ? bound(g, c->dt, hb, 2, sb + 1) : bound(g, c->dt, hb, 3, sb);
    if (c->ta)
        a = col_transpose(g, a, -1, -2);
    if (c->tb)
        b = col_transpose(g, b, -1, -2);
    col_node *mm = col_matmul(g, a, b);
    bool f32_out = mm && mm->t.dtype == COL_F32;
    float *o = run(g, mm);
    bool ok = o != NULL && f32_out;
    double worst = 0;
    col_rng r;
    col_rng_init(&r, 7);
    int64_t total = B * M * N, count = sample > 0 ? sample : total;
    for (int64_t s = 0; ok && s < count; s++) {
        int64_t e = sample > 0 ? (int64_t)col_rng_below(&r, (uint64_t)total) : s;
        int64_t bi = e / (M * N), i = e / N % M, j = e % N, bb = c->bcast ? 0 : bi;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; k++) {
            double av = c->ta ? fa[(bi * K + k) * M + i] : fa[(bi * M + i) * K + k];
            double bv = c->tb ? fb[(bb * N + j) * K + k] : fb[(bb * K + k) * N + j];
            ref += av * bv;
            mag += fabs(av * bv);
        }
        double err = fabs(o[e] - ref) / (mag > 0 ? mag : 1);
        worst = err > worst ? err : worst;
    }
    TL_OK(ok && worst < 2e-6, "%s matmul %s [%lld,%lld,%lld]x[%lld,%lld]%s%s: f32 output, |error| <= %.1e of sum|ab|",
          col_dtype_name(c->dt), what, (long long)B, (long long)M, (long long)K, (long long)K, (long long)N,
          c->ta ? ", a transposed" : "", c->tb ? ", b transposed" : "", worst);
    free(o), free(ha), free(hb), free(fa), free(fb);
    col_graph_free(g);
}

static void test_matmul(void)
{
    const col_dtype dts[2] = {COL_BF16, COL_F16};
    for (int k = 0; k < 2; k++) {
        for (int c = 0; c < 4; c++) {
            mm_case mc = {dts[k], 2, 5 + c, 7, 6, c & 1, c >> 1, c == 2};
            check_mm(&mc, 0, c == 2 ? "(b broadcast)" : "");
        }
        mm_case row = {dts[k], 3, 1, 33, 17, 0, 1, true};
        check_mm(&row, 0, "(one row)");
    }
    /* K beyond one slice of 2048, rows and columns beyond one panel: every kind of tile */
    mm_case big = {COL_BF16, 1, 1030, 2100, 1030, 0, 1, true};
    check_mm(&big, 3000, "in several tiles");
    mm_case bigt = {COL_F16, 1, 1030, 2100, 1030, 1, 0, true};
    check_mm(&bigt, 3000, "in several tiles");
    TL_OK(strcmp(col_cpu_backend_bf16_gemm(&be), "f32 tiles") == 0 || strcmp(col_cpu_backend_bf16_gemm(&be), "sbgemm") == 0,
          "the backend says how it multiplies bf16: %s", col_cpu_backend_bf16_gemm(&be));

    /* one tile: the product is sgemm's on the converted operands, bit for bit, on 1 and on 2 threads (so the
     * conversions add nothing that depends on the thread count; sgemm's own bits may, DESIGN.md) */
    enum { M = 24, K = 300, N = 160 }; /* more rows than the f32 few-row kernel takes: sgemm on both sides */
    uint16_t *ha = malloc(sizeof *ha * M * K), *hb = malloc(sizeof *hb * K * N);
    float *fa = malloc(sizeof *fa * M * K), *fb = malloc(sizeof *fb * K * N);
    rounded(COL_BF16, M * K, 1, ha, fa);
    rounded(COL_BF16, K * N, 2, hb, fb);
    int saved = omp_get_max_threads();
    bool same = true;
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        float *out[2];
        for (int k = 0; k < 2; k++) {
            col_graph *g = col_graph_new();
            int64_t sa[2] = {M, K}, sb[2] = {N, K};
            col_dtype dt = k ? COL_F32 : COL_BF16;
            out[k] = run(g, col_matmul(g, bound(g, dt, k ? (void *)fa : (void *)ha, 2, sa),
                                       col_transpose(g, bound(g, dt, k ? (void *)fb : (void *)hb, 2, sb), 0, 1)));
            col_graph_free(g);
        }
        same &= out[0] && out[1] && memcmp(out[0], out[1], sizeof(float) * M * N) == 0;
        free(out[0]), free(out[1]);
    }
    omp_set_num_threads(saved);
    if (strcmp(col_cpu_backend_bf16_gemm(&be), "f32 tiles") == 0)
        TL_OK(same, "a bf16 matmul in one tile is sgemm of the rounded values, bit for bit, on 1 and 2 threads");
    else
        tl_skip_check("bf16 matmul against sgemm", "this backend multiplies bf16 with sbgemm");
    free(ha), free(hb), free(fa), free(fb);
}

/* ---- gradients into 16-bit buffers ---- */

static void test_accumulate(void)
{
    const col_dtype dts[2] = {COL_BF16, COL_F16};
    for (int k = 0; k < 2; k++) {
        col_dtype dt = dts[k];
        enum { R = 40, C = 1000 }; /* above the kernels' threading threshold */
        uint16_t *w = malloc(sizeof *w * R * C), *gd = malloc(sizeof *gd * R * C), *g0 = malloc(sizeof *g0 * R * C);
        float *fw = malloc(sizeof *fw * R * C), *x = malloc(sizeof *x * R * C);
        rounded(dt, R * C, 3, w, fw);
        rounded(dt, R * C, 4, g0, fw);
        memcpy(gd, g0, sizeof *gd * R * C);
        col_fill_uniform(x, R * C, 5, -0.01f, 0.01f);
        col_graph *g = col_graph_new();
        int64_t s[2] = {R, C};
        col_node *p = col_param(g, "w", dt, 2, s);
        col_bind(p, w, NULL);
        col_bind_grad(p, gd, NULL);
        /* loss = sum(f32(w) * x): the gradient of w is x, rounded into the buffer on top of what it held */
        col_node *loss = col_sum(g, col_mul(g, col_cast(g, p, COL_F32), bound(g, COL_F32, x, 2, s)), 3, 0);
        col_err err = {0};
        col_plan *pl = NULL;
        bool ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &pl, &err) == COL_OK &&
                  col_plan_run(pl, &be, &err) == COL_OK;
        for (int i = 0; ok && i < R * C; i++)
            ok = gd[i] == scalar16(dt, scalar32(dt, g0[i]) + x[i]);
        TL_OK(ok, "a %s parameter's f32 gradient is added into its %s buffer and rounded once %s", col_dtype_name(dt),
              col_dtype_name(dt), err.msg);
        col_plan_free(pl);
        col_graph_free(g);
        free(w), free(gd), free(g0), free(fw), free(x);
    }
}

/* ---- embedding ---- */

static void test_embedding(void)
{
    enum { V = 50, C = 24, T = 31 };
    uint16_t w[V * C], gd[V * C] = {0};
    float fw[V * C], dw32[V * C] = {0};
    int32_t ids[T];
    for (int i = 0; i < T; i++)
        ids[i] = (int32_t)((i * 7) % V) % 13; /* repeated ids: their rows add up */
    rounded(COL_BF16, V * C, 9, w, fw);
    float r[T * C];
    col_fill_uniform(r, T * C, 10, -1, 1);
    /* the bf16 table against an f32 table of the same values: forward equal, gradient the f32 one rounded */
    float *outs[2] = {0};
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        col_graph *g = col_graph_new();
        int64_t sw[2] = {V, C}, si[1] = {T}, so[2] = {T, C};
        col_node *p = col_param(g, "w", k ? COL_F32 : COL_BF16, 2, sw);
        col_bind(p, k ? (void *)fw : (void *)w, NULL);
        col_bind_grad(p, k ? (void *)dw32 : (void *)gd, NULL);
        col_node *e = col_embedding(g, p, bound(g, COL_I32, ids, 1, si));
        col_mark_output(e);
        col_node *loss = col_sum(g, col_mul(g, e, bound(g, COL_F32, r, 2, so)), 3, 0);
        col_err err = {0};
        col_plan *pl = NULL;
        ok &= e && e->t.dtype == COL_F32 && col_graph_backward(g, loss, &err) == COL_OK &&
              col_plan_create(g, &pl, &err) == COL_OK && col_plan_run(pl, &be, &err) == COL_OK;
        if (ok) {
            outs[k] = malloc(sizeof(float) * T * C);
            memcpy(outs[k], col_data(e), sizeof(float) * T * C);
        }
        col_plan_free(pl);
        col_graph_free(g);
    }
    ok = ok && memcmp(outs[0], outs[1], sizeof(float) * T * C) == 0;
    TL_OK(ok, "embedding of a bf16 table: the rows of the same f32 table");
    bool gok = ok;
    for (int i = 0; gok && i < V * C; i++)
        gok = gd[i] == col_f32_to_bf16(dw32[i]);
    TL_OK(gok, "its gradient is the f32 table's gradient rounded to bf16");
    free(outs[0]), free(outs[1]);
}

/* ---- the seeded backward ---- */

static void test_seeded(void)
{
    enum { N = 12 };
    float w[N], x[N], g1[N] = {0}, g2[N] = {0}, seed = 1024.0f;
    col_fill_uniform(w, N, 1, -1, 1);
    col_fill_uniform(x, N, 2, -1, 1);
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        col_graph *g = col_graph_new();
        int64_t s[1] = {N};
        col_node *p = col_param(g, "w", COL_F32, 1, s);
        col_bind(p, w, NULL);
        col_bind_grad(p, k ? g2 : g1, NULL);
        col_node *loss = col_sum(g, col_mul(g, col_mul(g, p, p), bound(g, COL_F32, x, 1, s)), 1, 0);
        col_node *sd = k ? bound(g, COL_F32, &seed, 0, s) : NULL;
        col_err err = {0};
        col_plan *pl = NULL;
        ok &= col_graph_backward_seeded(g, loss, sd, &err) == COL_OK && col_plan_create(g, &pl, &err) == COL_OK &&
              col_plan_run(pl, &be, &err) == COL_OK;
        col_plan_free(pl);
        col_graph_free(g);
    }
    for (int i = 0; ok && i < N; i++)
        ok = g2[i] == g1[i] * seed;
    TL_OK(ok, "backward seeded with 1024 gives 1024 times the gradients (a loss scale)");
    col_graph *g = col_graph_new();
    int64_t s[1] = {N};
    col_node *p = col_param(g, "w", COL_F32, 1, s);
    col_node *loss = col_sum(g, p, 1, 0);
    col_err err = {0};
    TL_OK(col_graph_backward_seeded(g, loss, col_input(g, "s", COL_BF16, 0, s), &err) == COL_ESHAPE &&
              strstr(err.msg, "seed"),
          "a seed that is not an f32 of the loss's shape is refused: %s", err.msg);
    col_graph_free(g);
}

/* ---- gradient checks ---- */

/* x (f32) cast to bf16, times a bf16 weight (transposed, as nn.Linear), plus the weight's f32 row sums */
static col_node *build_lowp(col_graph *g, col_node **x, void *u)
{
    col_dtype dt = *(const col_dtype *)u;
    col_node *y = col_matmul(g, col_cast(g, x[0], dt), col_transpose(g, x[1], 0, 1));
    return col_add(g, y, col_sum(g, col_cast(g, x[1], COL_F32), 2, 0));
}

static void test_gradcheck(void)
{
    const col_dtype dts[2] = {COL_BF16, COL_F16};
    for (int k = 0; k < 2; k++) {
        float a[15], wf[20];
        uint16_t w[20];
        col_fill_uniform(a, 15, 21, -1, 1);
        rounded(dts[k], 20, 22, w, wf);
        col_gc_input in[2] = {{COL_F32, 2, {3, 5}, a}, {dts[k], 2, {4, 5}, w}};
        /* steps that move a 16-bit value; the output is linear in each input, rounding of the cast input and of
         * the gradient (to the operands' dtype) is what the tolerance covers */
        col_gc_opts o = {.h = 0.05, .rtol = 3e-2, .atol = 1e-2, .seed = 4};
        char name[96];
        snprintf(name, sizeof name, "%s matmul with a cast input and a 16-bit weight", col_dtype_name(dts[k]));
        tl_gradcheck(&be, name, build_lowp, (void *)&dts[k], 2, in, &o);
    }
}

static void test_errors(void)
{
    col_graph *g = col_graph_new();
    int64_t s[2] = {3, 3};
    col_node *m = col_matmul(g, col_input(g, "a", COL_BF16, 2, s), col_input(g, "b", COL_F32, 2, s));
    TL_OK(!m && strstr(col_graph_error(g)->msg, "two bf16") && strstr(col_graph_error(g)->msg, "bf16 and f32"),
          "matmul refuses mixed operand dtypes: %s", col_graph_error(g)->msg);
    col_graph_free(g);
    g = col_graph_new();
    m = col_embedding(g, col_input(g, "w", COL_I32, 2, s), col_input(g, "i", COL_I32, 1, s));
    TL_OK(!m && strstr(col_graph_error(g)->msg, "f32, bf16 or f16"), "embedding refuses an integer table: %s",
          col_graph_error(g)->msg);
    col_graph_free(g);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_convert();
    test_cast_kernel();
    test_matmul();
    test_accumulate();
    test_embedding();
    test_seeded();
    test_gradcheck();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
