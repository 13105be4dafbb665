/* test_ops_basic.c - views, data movement, binary ops, scale, matmul, linear:
 * forward against direct index arithmetic, gradients against finite
 * differences, errors as messages. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

/* runs a graph whose output is `out`, returns a malloc'd contiguous f32 copy */
static float *run(col_graph *g, col_node *out)
{
    col_err err = {0};
    out = col_contiguous(g, col_cast(g, out, COL_F32));
    if (!out) {
        TL_NOTE("build failed: %s", col_graph_error(g)->msg);
        return NULL;
    }
    col_mark_output(out);
    col_plan *p;
    if (col_plan_create(g, &p, &err) != COL_OK || col_plan_run(p, &be, &err) != COL_OK) {
        TL_NOTE("run failed: %s", err.msg);
        return NULL;
    }
    size_t n = (size_t)col_numel(&out->t);
    float *r = malloc(sizeof(float) * (n + 1));
    memcpy(r, col_data(out), sizeof(float) * n);
    col_plan_free(p);
    return r;
}

static col_node *leaf(col_graph *g, float *data, int nd, const int64_t *shape)
{
    col_node *x = col_input(g, "x", COL_F32, nd, shape);
    col_bind(x, data, NULL);
    return x;
}

static float *randv(int64_t n, uint64_t seed)
{
    float *v = malloc(sizeof(float) * (size_t)(n + 1));
    col_fill_uniform(v, n, seed, -1.0f, 1.0f);
    return v;
}

static double maxdiff(const float *a, const double *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* ---- views ---- */
static void test_views(void)
{
    float *x = randv(24, 1);
    int64_t s[3] = {2, 3, 4};
    col_graph *g = col_graph_new();
    col_node *t = col_transpose(g, leaf(g, x, 3, s), 0, 2); /* [4,3,2] */
    float *r = run(g, t);
    int ok = r != NULL;
    for (int i = 0; ok && i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++)
                ok &= r[(i * 3 + j) * 2 + k] == x[(k * 3 + j) * 4 + i];
    TL_OK(ok, "transpose(0,2) moves elements as x[k][j][i]");
    free(r);
    col_graph_free(g);

    g = col_graph_new();
    col_node *sl = col_slice(g, col_permute(g, leaf(g, x, 3, s), (int[]){2, 0, 1}), 0, 1, 2); /* [2,2,3] of [4,2,3] */
    r = run(g, sl);
    ok = r != NULL;
    for (int i = 0; ok && i < 2; i++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                ok &= r[(i * 2 + a) * 3 + b] == x[(a * 3 + b) * 4 + (i + 1)];
    TL_OK(ok, "slice of a permute reads the right elements");
    free(r);
    col_graph_free(g);

    g = col_graph_new();
    int64_t s1[2] = {3, 1}, se[3] = {2, 3, 5};
    col_node *e = col_expand(g, leaf(g, x, 2, s1), 3, se);
    r = run(g, e);
    ok = r != NULL;
    for (int i = 0; ok && i < 30; i++)
        ok &= r[i] == x[(i / 5) % 3];
    TL_OK(ok, "expand broadcasts size-1 and new leading dims");
    free(r);
    col_graph_free(g);

    g = col_graph_new();
    int64_t rs[2] = {-1, 6};
    col_node *rsh = col_reshape(g, col_transpose(g, leaf(g, x, 3, s), 1, 2), 2, rs); /* copy then view */
    r = run(g, rsh);
    ok = r != NULL && rsh->t.shape[0] == 4;
    for (int i = 0; ok && i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++)
                ok &= r[(i * 4 + j) * 3 + k] == x[(i * 3 + k) * 4 + j];
    TL_OK(ok, "reshape of a non-contiguous view copies in logical order");
    free(r);
    col_graph_free(g);
    free(x);

    /* the attention head split: [B,T,3*H*D] -> [B,T,3,H,D] -> permute -> slice -> [B,H,T,D], all views */
    enum { B = 2, T = 3, H = 2, D = 4 };
    float *qkv = randv(B * T * 3 * H * D, 2);
    g = col_graph_new();
    int64_t s3[3] = {B, T, 3 * H * D}, s5[5] = {B, T, 3, H, D}, s4[4] = {B, H, T, D};
    col_node *p5 = col_permute(g, col_reshape(g, leaf(g, qkv, 3, s3), 5, s5), (int[]){2, 0, 3, 1, 4});
    col_node *k = col_reshape(g, col_slice(g, p5, 0, 1, 1), 4, s4);
    bool no_copy = true;
    for (int i = 0; i < col_graph_count(g); i++)
        no_copy &= col_graph_node(g, i)->op != COL_OP_COPY;
    r = run(g, k);
    ok = r != NULL && no_copy;
    for (int b = 0; ok && b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++)
                    ok &= r[((b * H + h) * T + t) * D + d] == qkv[(b * T + t) * 3 * H * D + 1 * H * D + h * D + d];
    TL_OK(ok, "head split of a fused qkv tensor is a chain of views with the right elements");
    free(r);
    col_graph_free(g);
    free(qkv);
}

/* ---- binary ops with broadcasting ---- */
typedef struct {
    col_op op;
    int ta; /* transpose a's last two dims inside the graph */
} bin_case;

static col_node *build_bin(col_graph *g, col_node **x, void *u)
{
    const bin_case *c = u;
    col_node *a = c->ta ? col_transpose(g, x[0], -1, -2) : x[0];
    switch (c->op) {
    case COL_OP_ADD: return col_add(g, a, x[1]);
    case COL_OP_SUB: return col_sub(g, a, x[1]);
    case COL_OP_MUL: return col_mul(g, a, x[1]);
    default: return col_div(g, a, x[1]);
    }
}

static void test_binary(void)
{
    col_op ops[4] = {COL_OP_ADD, COL_OP_SUB, COL_OP_MUL, COL_OP_DIV};
    col_rng r;
    col_rng_init(&r, 5);
    for (int k = 0; k < 4; k++) {
        for (int rep = 0; rep < 2; rep++) {
            int64_t B = 1 + (int64_t)col_rng_below(&r, 3), M = 1 + (int64_t)col_rng_below(&r, 5),
                    N = 2 + (int64_t)col_rng_below(&r, 5);
            int ta = rep == 1;
            int64_t sa[3] = {B, ta ? N : M, ta ? M : N}, sb[2] = {1, N}; /* b broadcasts over B and M */
            float *a = randv(B * M * N, 10 + k), *b = randv(N, 20 + k);
            for (int i = 0; i < N; i++)
                b[i] = b[i] > 0 ? b[i] + 0.5f : b[i] - 0.5f; /* keep division away from 0 */
            bin_case c = {ops[k], ta};
            col_graph *g = col_graph_new();
            col_node *xs[2] = {leaf(g, a, 3, sa), leaf(g, b, 2, sb)};
            float *out = run(g, build_bin(g, xs, &c));
            double *ref = malloc(sizeof(double) * (size_t)(B * M * N));
            for (int64_t bi = 0; bi < B; bi++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double av = ta ? a[(bi * N + j) * M + i] : a[(bi * M + i) * N + j], bv = b[j];
                        double v = k == 0 ? av + bv : k == 1 ? av - bv : k == 2 ? av * bv : av / bv;
                        ref[(bi * M + i) * N + j] = v;
                    }
            TL_OK(out && maxdiff(out, ref, B * M * N) < 1e-6, "%s forward, broadcast [%lld,%lld,%lld] with [1,%lld]%s",
                  col_op_name(ops[k]), (long long)B, (long long)M, (long long)N, (long long)N, ta ? ", transposed a" : "");
            free(out);
            free(ref);
            col_graph_free(g);
            col_gc_input in[2] = {{COL_F32, 3, {sa[0], sa[1], sa[2]}, a}, {COL_F32, 2, {1, N}, b}};
            char name[64];
            snprintf(name, sizeof name, "%s%s", col_op_name(ops[k]), ta ? " (transposed)" : "");
            tl_gradcheck(&be, name, build_bin, &c, 2, in, NULL);
            free(a);
            free(b);
        }
    }
}

static col_node *build_scale(col_graph *g, col_node **x, void *u)
{
    (void)u;
    return col_scale(g, col_slice(g, x[0], 1, 1, 2), -2.5f, 0.75f);
}

/* ---- matmul ---- */
typedef struct {
    int ta, tb;
} mm_case;

static col_node *build_mm(col_graph *g, col_node **x, void *u)
{
    const mm_case *c = u;
    col_node *a = c->ta ? col_transpose(g, x[0], -1, -2) : x[0];
    col_node *b = c->tb ? col_transpose(g, x[1], -1, -2) : x[1];
    return col_matmul(g, a, b);
}

static void test_matmul(void)
{
    col_rng r;
    col_rng_init(&r, 8);
    for (int c = 0; c < 8; c++) {
        mm_case mc = {c & 1, (c >> 1) & 1};
        /* c >= 4: a single row, which the CPU backend computes as a matrix-vector product */
        int64_t B = 2, M = c >= 4 ? 1 : 1 + (int64_t)col_rng_below(&r, 6), K = 2 + (int64_t)col_rng_below(&r, 6),
                N = 1 + (int64_t)col_rng_below(&r, 6);
        /* a: [B, M, K] (stored [B, K, M] when transposed); b: [K, N] broadcast over B */
        int64_t sa[3] = {B, mc.ta ? K : M, mc.ta ? M : K}, sb[2] = {mc.tb ? N : K, mc.tb ? K : N};
        float *a = randv(B * M * K, 30 + c), *b = randv(K * N, 40 + c);
        col_graph *g = col_graph_new();
        col_node *xs[2] = {leaf(g, a, 3, sa), leaf(g, b, 2, sb)};
        float *out = run(g, build_mm(g, xs, &mc));
        double *ref = calloc((size_t)(B * M * N), sizeof(double));
        for (int64_t bi = 0; bi < B; bi++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++)
                    for (int64_t k = 0; k < K; k++) {
                        double av = mc.ta ? a[(bi * K + k) * M + i] : a[(bi * M + i) * K + k];
                        double bv = mc.tb ? b[j * K + k] : b[k * N + j];
                        ref[(bi * M + i) * N + j] += av * bv;
                    }
        TL_OK(out && maxdiff(out, ref, B * M * N) < 1e-5, "matmul forward [%lld,%lld,%lld]@[%lld,%lld] ta=%d tb=%d",
              (long long)B, (long long)M, (long long)K, (long long)K, (long long)N, mc.ta, mc.tb);
        free(out);
        free(ref);
        col_graph_free(g);
        col_gc_input in[2] = {{COL_F32, 3, {sa[0], sa[1], sa[2]}, a}, {COL_F32, 2, {sb[0], sb[1]}, b}};
        char name[64];
        snprintf(name, sizeof name, "matmul ta=%d tb=%d batch-broadcast", mc.ta, mc.tb);
        tl_gradcheck(&be, name, build_mm, &mc, 2, in, NULL);
        free(a);
        free(b);
    }
}

static col_node *build_linear(col_graph *g, col_node **x, void *u)
{
    (void)u;
    return col_linear(g, x[0], x[1], x[2]);
}

static col_node *build_concat(col_graph *g, col_node **x, void *u)
{
    (void)u;
    col_node *parts[3] = {x[0], col_transpose(g, x[1], 0, 1), x[2]};
    col_node *c = col_concat(g, 3, parts, 1);
    col_node *halves[2];
    if (col_split(g, c, 1, 2, halves) != 0)
        return NULL;
    return col_mul(g, halves[0], halves[1]);
}

/* a low-precision leaf cast up to f32: the gradient comes back through the cast */
static col_node *build_cast(col_graph *g, col_node **x, void *u)
{
    (void)u;
    return col_mul(g, col_cast(g, x[0], COL_F32), col_cast(g, col_cast(g, x[1], COL_F16), COL_F32));
}

static void test_cast_grad(void)
{
    col_dtype lows[2] = {COL_BF16, COL_F16};
    for (int k = 0; k < 2; k++) {
        uint16_t a[12];
        float b[12];
        for (int i = 0; i < 12; i++) {
            float v = 0.25f * (float)(i - 6) + 0.125f;
            a[i] = lows[k] == COL_BF16 ? col_f32_to_bf16(v) : col_f32_to_f16(v);
            b[i] = 0.5f - 0.0625f * (float)i;
        }
        col_gc_input in[2] = {{lows[k], 2, {3, 4}, a}, {COL_F32, 2, {3, 4}, b}};
        /* steps large enough to move a 16-bit float; the function is linear in each input */
        col_gc_opts o = {.h = 0.05, .rtol = 1e-2, .atol = 1e-3, .seed = 3};
        char name[64];
        snprintf(name, sizeof name, "cast %s -> f32 and f32 -> f16 -> f32", col_dtype_name(lows[k]));
        tl_gradcheck(&be, name, build_cast, NULL, 2, in, &o);
    }
}

static void test_misc(void)
{
    float *x = randv(64, 50), *w = randv(15, 51), *b = randv(5, 52);
    col_gc_input lin[3] = {{COL_F32, 3, {2, 2, 3}, x}, {COL_F32, 2, {5, 3}, w}, {COL_F32, 1, {5}, b}};
    tl_gradcheck(&be, "linear with bias", build_linear, NULL, 3, lin, NULL);
    col_gc_input sc[1] = {{COL_F32, 2, {3, 4}, x}};
    tl_gradcheck(&be, "scale of a slice", build_scale, NULL, 1, sc, NULL);
    /* concat of [2,1], transpose([3,2]) -> [2,3], [2,2] along dim 1 = [2,6], split in halves, multiplied */
    col_gc_input cc[3] = {{COL_F32, 2, {2, 1}, x}, {COL_F32, 2, {3, 2}, x + 8}, {COL_F32, 2, {2, 2}, x + 20}};
    tl_gradcheck(&be, "concat + split", build_concat, NULL, 3, cc, NULL);

    /* linear forward against the nn.Linear formula */
    col_graph *g = col_graph_new();
    int64_t sx[2] = {4, 3}, sw[2] = {5, 3}, sbias[1] = {5};
    float *out = run(g, col_linear(g, leaf(g, x, 2, sx), leaf(g, w, 2, sw), leaf(g, b, 1, sbias)));
    double ref[20];
    for (int i = 0; i < 4; i++)
        for (int o = 0; o < 5; o++) {
            ref[i * 5 + o] = b[o];
            for (int k = 0; k < 3; k++)
                ref[i * 5 + o] += (double)x[i * 3 + k] * w[o * 3 + k];
        }
    TL_OK(out && maxdiff(out, ref, 20) < 1e-6, "linear = x W^T + b");
    free(out);
    col_graph_free(g);

    /* casts: every dtype pair, values exactly representable everywhere */
    col_dtype dts[5] = {COL_F32, COL_BF16, COL_F16, COL_I32, COL_I64};
    float vals[6] = {0, 1, -2, 3, 96, -128};
    int ok = 1;
    for (int a = 0; a < 5; a++)
        for (int c = 0; c < 5; c++) {
            g = col_graph_new();
            int64_t s6[1] = {6};
            col_node *v = col_cast(g, col_cast(g, col_cast(g, leaf(g, vals, 1, s6), dts[a]), dts[c]), COL_F32);
            float *o = run(g, v);
            for (int i = 0; i < 6; i++)
                ok &= o && o[i] == vals[i];
            free(o);
            col_graph_free(g);
        }
    TL_OK(ok, "casts between all dtype pairs preserve representable values");
    g = col_graph_new();
    float fr[4] = {1.7f, -1.7f, 2.5f, -0.5f};
    int64_t s4[1] = {4};
    float *o = run(g, col_cast(g, leaf(g, fr, 1, s4), COL_I32));
    TL_OK(o && o[0] == 1 && o[1] == -1 && o[2] == 2 && o[3] == 0, "float -> int truncates toward zero");
    free(o);
    col_graph_free(g);
    g = col_graph_new();
    o = run(g, col_cast(g, leaf(g, fr, 1, s4), COL_BF16));
    ok = o != NULL;
    for (int i = 0; ok && i < 4; i++)
        ok &= o[i] == col_bf16_to_f32(col_f32_to_bf16(fr[i]));
    TL_OK(ok, "f32 -> bf16 cast rounds like the scalar conversion");
    free(o);
    col_graph_free(g);
    free(x);
    free(w);
    free(b);
}

static void expect_error(col_graph *g, col_node *n, const char *word, const char *what)
{
    const char *msg = col_graph_error(g)->msg;
    TL_OK(n == NULL && col_graph_status(g) != COL_OK && strstr(msg, word), "%s: \"%s\"", what, msg);
}

static void test_errors(void)
{
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s32[2] = {3, 2}, s5[1] = {5};
    col_graph *g = col_graph_new();
    col_node *n = col_add(g, col_input(g, "a", COL_F32, 2, s23), col_input(g, "b", COL_F32, 2, s43));
    expect_error(g, n, "add", "add of [2,3] and [4,3] is refused");
    TL_OK(col_mul(g, n, n) == NULL, "errors are sticky: later builders return NULL");
    col_graph_free(g);
    g = col_graph_new();
    n = col_matmul(g, col_input(g, "a", COL_F32, 2, s23), col_input(g, "b", COL_F32, 2, s23));
    expect_error(g, n, "matmul", "matmul with mismatched inner sizes");
    col_graph_free(g);
    g = col_graph_new();
    n = col_matmul(g, col_input(g, "a", COL_I32, 2, s23), col_input(g, "b", COL_F32, 2, s32));
    expect_error(g, n, "f32", "matmul of an i32 tensor");
    col_graph_free(g);
    g = col_graph_new();
    n = col_reshape(g, col_input(g, "a", COL_F32, 2, s23), 1, s5);
    expect_error(g, n, "reshape", "reshape to a different element count");
    col_graph_free(g);
    g = col_graph_new();
    n = col_slice(g, col_input(g, "a", COL_F32, 2, s23), 1, 2, 2);
    expect_error(g, n, "slice", "slice past the end");
    col_graph_free(g);
    g = col_graph_new();
    n = col_linear(g, col_input(g, "x", COL_F32, 2, s23), col_input(g, "w", COL_F32, 2, s32), NULL);
    expect_error(g, n, "linear", "linear with a weight of the wrong shape");
    col_graph_free(g);
    g = col_graph_new();
    n = col_permute(g, col_input(g, "x", COL_F32, 2, s23), (int[]){0, 0});
    expect_error(g, n, "permute", "permute with a repeated dim");
    col_graph_free(g);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_views();
    test_binary();
    test_matmul();
    test_misc();
    test_cast_grad();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
