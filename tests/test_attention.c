/* test_attention.c - blocked attention against a naive double reference that
 * materialises the full score matrix: forward output and logsumexp,
 * gradients (reference backward and finite differences), strided inputs,
 * thread-count independence, T-independent scratch, and builder errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

typedef struct {
    int64_t B, Hq, Hkv, T, S, D;
    int causal;
    float scale;   /* as passed to col_attention (<= 0: 1/sqrt(D)) */
    int bthd;      /* leaves stored [B,T,H,D] and transposed inside the graph */
    int tout;      /* gradcheck output: 1 = transpose(2,3) (dO has no unit stride), 2 = transpose(1,2) */
} att_case;

static float *randv(int64_t n, uint64_t seed)
{
    float *v = malloc(sizeof(float) * (size_t)(n + 1));
    col_fill_uniform(v, n, seed, -1.0f, 1.0f);
    return v;
}

static double eff_scale(const att_case *c) { return c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->D); }

/* element (b,h,t,d) of a host array in the case's leaf layout */
static int64_t at(const att_case *c, int64_t H, int64_t L, int64_t b, int64_t h, int64_t t, int64_t d)
{
    if (c->bthd)
        return ((b * L + t) * H + h) * c->D + d;
    return ((b * H + h) * L + t) * c->D + d;
}

static void leaf_shape(const att_case *c, int64_t H, int64_t L, int64_t *s)
{
    s[0] = c->B, s[1] = c->bthd ? L : H, s[2] = c->bthd ? H : L, s[3] = c->D;
}

/* ---- the naive reference, in double ----
 * out, lse: [B,Hq,T,D], [B,Hq,T]. With dout: dq [B,Hq,T,D], dk, dv [B,Hkv,S,D] (canonical layout). */
static void reference(const att_case *c, const float *q, const float *k, const float *v, const float *dout,
                      double *out, double *lse, double *dq, double *dk, double *dv)
{
    int64_t T = c->T, S = c->S, D = c->D, grp = c->Hq / c->Hkv, off = S - T;
    double sc = eff_scale(c);
    double *p = malloc(sizeof(double) * (size_t)S), *dp = malloc(sizeof(double) * (size_t)S);
    if (dk) {
        memset(dk, 0, sizeof(double) * (size_t)(c->B * c->Hkv * S * D));
        memset(dv, 0, sizeof(double) * (size_t)(c->B * c->Hkv * S * D));
    }
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t hk = h / grp;
                double mx = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)q[at(c, c->Hq, T, b, h, t, d)] * k[at(c, c->Hkv, S, b, hk, j, d)];
                    p[j] = (c->causal && j > t + off) ? -INFINITY : s * sc;
                    mx = fmax(mx, p[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j < S; j++)
                    sum += (p[j] = exp(p[j] - mx));
                int64_t row = (b * c->Hq + h) * T + t;
                lse[row] = mx + log(sum);
                for (int64_t j = 0; j < S; j++)
                    p[j] /= sum;
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < S; j++)
                        o += p[j] * v[at(c, c->Hkv, S, b, hk, j, d)];
                    out[row * D + d] = o;
                }
                if (!dout)
                    continue;
                const float *g = dout + row * D; /* dout is canonical [B,Hq,T,D] */
                double dot = 0;
                for (int64_t j = 0; j < S; j++) {
                    dp[j] = 0;
                    for (int64_t d = 0; d < D; d++)
                        dp[j] += (double)g[d] * v[at(c, c->Hkv, S, b, hk, j, d)];
                    dot += dp[j] * p[j];
                }
                for (int64_t d = 0; d < D; d++)
                    dq[row * D + d] = 0;
                for (int64_t j = 0; j < S; j++) {
                    double ds = p[j] * (dp[j] - dot) * sc;
                    int64_t kr = ((b * c->Hkv + hk) * S + j) * D;
                    for (int64_t d = 0; d < D; d++) {
                        dq[row * D + d] += ds * k[at(c, c->Hkv, S, b, hk, j, d)];
                        dk[kr + d] += ds * q[at(c, c->Hq, T, b, h, t, d)];
                        dv[kr + d] += p[j] * g[d];
                    }
                }
            }
    free(p);
    free(dp);
}

/* ---- running the graph ---- */
typedef struct {
    col_graph *g;
    col_plan *plan;
    col_node *att, *out, *qk[3];
    float *grad[3];
} att_run;

static col_node *heads(col_graph *g, const att_case *c, col_node *leaf)
{
    return c->bthd ? col_transpose(g, leaf, 1, 2) : leaf;
}

/* builds att (and with r: loss = sum(att * r) and its backward); binds q, k, v, r */
static bool build(att_run *ar, const att_case *c, float *q, float *k, float *v, float *r)
{
    memset(ar, 0, sizeof *ar);
    col_graph *g = ar->g = col_graph_new();
    int64_t sq[4], sk[4];
    leaf_shape(c, c->Hq, c->T, sq);
    leaf_shape(c, c->Hkv, c->S, sk);
    float *data[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        ar->qk[i] = r ? col_param(g, "x", COL_F32, 4, i ? sk : sq) : col_input(g, "x", COL_F32, 4, i ? sk : sq);
        col_bind(ar->qk[i], data[i], NULL);
        if (r) {
            ar->grad[i] = calloc((size_t)(col_numel(&ar->qk[i]->t) + 1), sizeof(float));
            col_bind_grad(ar->qk[i], ar->grad[i], NULL);
        }
    }
    ar->att = col_attention(g, heads(g, c, ar->qk[0]), heads(g, c, ar->qk[1]), heads(g, c, ar->qk[2]), c->causal,
                            c->scale);
    col_err err = {0};
    if (!ar->att) {
        TL_NOTE("build failed: %s", col_graph_error(g)->msg);
        return false;
    }
    col_mark_output(ar->att);
    if (r) {
        col_node *rn = col_input(g, "r", COL_F32, 4, ar->att->t.shape);
        col_bind(rn, r, NULL);
        col_node *loss = col_sum(g, col_mul(g, ar->att, rn), 0xf, 0);
        if (col_graph_backward(g, loss, &err) != COL_OK) {
            TL_NOTE("backward failed: %s", err.msg);
            return false;
        }
    }
    if (col_plan_create(g, &ar->plan, &err) != COL_OK) {
        TL_NOTE("plan failed: %s", err.msg);
        return false;
    }
    return true;
}

static bool run(att_run *ar)
{
    col_err err = {0};
    for (int i = 0; i < 3; i++)
        if (ar->grad[i])
            memset(ar->grad[i], 0, sizeof(float) * (size_t)col_numel(&ar->qk[i]->t));
    if (col_plan_run(ar->plan, &be, &err) != COL_OK) {
        TL_NOTE("run failed: %s", err.msg);
        return false;
    }
    return true;
}

static void release(att_run *ar)
{
    col_plan_free(ar->plan);
    col_graph_free(ar->g);
    for (int i = 0; i < 3; i++)
        free(ar->grad[i]);
}

static double maxdiff(const float *a, const double *b, int64_t n, double *maxref)
{
    double m = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs(b[i]));
    }
    if (maxref)
        *maxref = mr;
    return m;
}

/* gradient of a leaf in the case layout -> canonical [B,H,L,D] */
static void to_canonical(const att_case *c, int64_t H, int64_t L, const float *x, float *y)
{
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < L; t++)
                for (int64_t d = 0; d < c->D; d++)
                    y[((b * H + h) * L + t) * c->D + d] = x[at(c, H, L, b, h, t, d)];
}

static void describe(const att_case *c, char *buf, size_t n)
{
    snprintf(buf, n, "B=%lld Hq=%lld Hkv=%lld T=%lld S=%lld D=%lld %s%s%s%s", (long long)c->B, (long long)c->Hq,
             (long long)c->Hkv, (long long)c->T, (long long)c->S, (long long)c->D,
             c->causal ? "causal" : "non-causal", c->scale > 0 ? " scale" : "", c->bthd ? " strided" : "",
             c->tout == 1 ? " dO-transposed" : c->tout == 2 ? " dO-strided" : "");
}

/* forward (out, lse) and, with grads, backward against the reference */
static void check_case(const att_case *c, bool grads, uint64_t seed)
{
    char name[160];
    describe(c, name, sizeof name);
    int64_t nq = c->B * c->Hq * c->T * c->D, nk = c->B * c->Hkv * c->S * c->D, rows = c->B * c->Hq * c->T;
    float *q = randv(nq, seed), *k = randv(nk, seed + 1), *v = randv(nk, seed + 2);
    float *r = grads ? randv(nq, seed + 3) : NULL;
    double *out = malloc(sizeof(double) * (size_t)(nq + 1)), *lse = malloc(sizeof(double) * (size_t)(rows + 1));
    double *dq = NULL, *dk = NULL, *dv = NULL;
    if (grads) {
        dq = malloc(sizeof(double) * (size_t)nq);
        dk = malloc(sizeof(double) * (size_t)nk);
        dv = malloc(sizeof(double) * (size_t)nk);
    }
    reference(c, q, k, v, r, out, lse, dq, dk, dv);
    att_run ar;
    bool ok = build(&ar, c, q, k, v, r) && run(&ar);
    double mref;
    double e = ok ? maxdiff(col_data(ar.att), out, nq, &mref) : INFINITY;
    TL_OK(ok && e < 2e-6 * (1 + mref) * (1 + sqrt((double)c->D)), "forward %s: max |err| %.2e", name, e);
    e = ok ? maxdiff(col_extra(ar.att), lse, rows, &mref) : INFINITY;
    TL_OK(ok && e < 1e-5 * (1 + mref), "logsumexp %s: max |err| %.2e", name, e);
    if (grads) {
        float *cg = malloc(sizeof(float) * (size_t)(nq > nk ? nq : nk));
        const double *ref[3] = {dq, dk, dv};
        const char *which[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++) {
            int64_t n = i ? nk : nq;
            if (ok)
                to_canonical(c, i ? c->Hkv : c->Hq, i ? c->S : c->T, ar.grad[i], cg);
            e = ok ? maxdiff(cg, ref[i], n, &mref) : INFINITY;
            TL_OK(ok && e < 1e-5 * (1 + mref) * (1 + sqrt((double)c->T)), "backward %s %s: max |err| %.2e (max |ref| %.2e)",
                  which[i], name, e, mref);
        }
        free(cg);
    }
    release(&ar);
    free(q), free(k), free(v), free(r), free(out), free(lse), free(dq), free(dk), free(dv);
}

static void test_reference(void)
{
    const att_case cases[] = {
        {1, 2, 2, 5, 5, 8, 1, 0, 0},
        {2, 4, 2, 37, 37, 8, 1, 0, 0},       /* GQA, T not a multiple of the tile */
        {1, 4, 2, 37, 80, 64, 1, 0.3f, 0},   /* T < S: queries are the last positions */
        {2, 3, 3, 70, 45, 64, 0, 0, 0},      /* non-causal, T > S */
        {1, 4, 1, 130, 130, 24, 1, 0, 1},    /* MQA, several tiles, D % 16 != 0, strided */
        {1, 2, 1, 129, 200, 64, 1, 0, 1},    /* strided, D = 64, partial tiles */
        {1, 2, 2, 1, 1, 1, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], true, 100 + 10 * i);
    col_rng rng;
    col_rng_init(&rng, 42);
    for (int rep = 0; rep < 6; rep++) {
        att_case c;
        c.Hkv = 1 + (int64_t)col_rng_below(&rng, 3);
        c.Hq = c.Hkv * (1 + (int64_t)col_rng_below(&rng, 3));
        c.B = 1 + (int64_t)col_rng_below(&rng, 2);
        c.T = 1 + (int64_t)col_rng_below(&rng, 90);
        c.S = c.T + (int64_t)col_rng_below(&rng, 40);
        c.D = 1 + (int64_t)col_rng_below(&rng, 70);
        c.causal = rep % 2 == 0;
        c.scale = rep % 3 == 0 ? 0.2f : 0.0f;
        c.bthd = rep % 3 == 1;
        if (!c.causal && rep == 3)
            c.T += 20; /* T > S */
        check_case(&c, rep < 3, 500 + 10 * (uint64_t)rep);
    }
}

/* ---- finite differences ---- */
static col_node *build_gc(col_graph *g, col_node **x, void *u)
{
    const att_case *c = u;
    col_node *a = col_attention(g, heads(g, c, x[0]), heads(g, c, x[1]), heads(g, c, x[2]), c->causal, c->scale);
    if (c->tout)
        a = c->tout == 1 ? col_transpose(g, a, 2, 3) : col_transpose(g, a, 1, 2);
    return a;
}

static void test_gradcheck(void)
{
    const att_case cases[] = {
        {1, 4, 2, 5, 7, 8, 1, 0, 0},   /* causal, GQA, T < S */
        {2, 2, 2, 4, 6, 5, 0, 0.5f, 0}, /* non-causal */
        {1, 4, 2, 6, 6, 4, 1, 0, 1},   /* strided q, k, v: transposes of [B,T,H,D] */
        {1, 2, 1, 3, 9, 3, 0, 0, 1},   /* strided, non-causal */
        {1, 2, 2, 5, 5, 6, 1, 0, 0, 1}, /* dO with no unit stride (output transposed) */
        {2, 2, 1, 4, 6, 4, 1, 0, 1, 2}, /* dO strided as in a [B,T,H,D] model */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const att_case *c = &cases[i];
        col_gc_input in[3];
        float *data[3];
        for (int j = 0; j < 3; j++) {
            in[j] = (col_gc_input){.dtype = COL_F32, .ndim = 4};
            leaf_shape(c, j ? c->Hkv : c->Hq, j ? c->S : c->T, in[j].shape);
            data[j] = randv(in[j].shape[0] * in[j].shape[1] * in[j].shape[2] * in[j].shape[3], 900 + 7 * i + j);
            in[j].data = data[j];
        }
        char name[160];
        describe(c, name, sizeof name);
        col_gc_opts o = {.h = 1e-2, .rtol = 1e-2, .atol = 2e-3, .max_points = 40, .seed = 3 + i};
        tl_gradcheck(&be, name, build_gc, (void *)c, 3, in, &o);
        for (int j = 0; j < 3; j++)
            free(data[j]);
    }
}

/* ---- same bits with 1 and 2 threads ----
 * The second case has one kv head: one thread takes the single-pass backward,
 * two threads the two-pass one, so this also checks that both agree bitwise. */
static void test_threads(void)
{
#ifdef _OPENMP
    const att_case cases[] = {
        {2, 4, 2, 150, 170, 40, 1, 0, 1},
        {1, 2, 1, 150, 170, 32, 1, 0, 1},
        {2, 2, 2, 100, 90, 64, 0, 0, 0},
    };
    int saved = omp_get_max_threads();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const att_case *c = &cases[ci];
        int64_t nq = c->B * c->Hq * c->T * c->D, nk = c->B * c->Hkv * c->S * c->D;
        float *q = randv(nq, 61), *k = randv(nk, 62), *v = randv(nk, 63), *r = randv(nq, 64);
        omp_set_num_threads(2); /* scratch is sized for 2 threads when building */
        att_run ar;
        bool ok = build(&ar, c, q, k, v, r);
        float *res[2][4] = {{0}};
        int64_t n[4] = {nq, nq, nk, nk};
        for (int t = 0; t < 2 && ok; t++) {
            omp_set_num_threads(t + 1);
            ok = run(&ar);
            for (int i = 0; i < 4 && ok; i++) {
                res[t][i] = malloc(sizeof(float) * (size_t)n[i]);
                memcpy(res[t][i], i ? ar.grad[i - 1] : col_data(ar.att), sizeof(float) * (size_t)n[i]);
            }
        }
        char name[160];
        describe(c, name, sizeof name);
        const char *what[4] = {"output", "dq", "dk", "dv"};
        for (int i = 0; i < 4; i++) {
            TL_OK(ok && memcmp(res[0][i], res[1][i], sizeof(float) * (size_t)n[i]) == 0,
                  "%s bitwise equal with 1 and 2 threads, %s", what[i], name);
            free(res[0][i]), free(res[1][i]);
        }
        release(&ar);
        free(q), free(k), free(v), free(r);
    }
    omp_set_num_threads(saved);
#else
    TL_OK(true, "# SKIP no OpenMP");
#endif
}

/* ---- checkpointing: the backward reads O and the logsumexp of the recomputed node ---- */
static void test_checkpoint(void)
{
    const att_case c = {1, 4, 2, 70, 90, 16, 1, 0, 1};
    int64_t nq = c.B * c.Hq * c.T * c.D, nk = c.B * c.Hkv * c.S * c.D;
    float *q = randv(nq, 71), *k = randv(nk, 72), *v = randv(nk, 73), *r = randv(nq, 74);
    float *grads[2][3] = {{0}};
    bool ok = true;
    for (int ck = 0; ck < 2 && ok; ck++) {
        col_graph *g = col_graph_new();
        int64_t sq[4], sk[4];
        leaf_shape(&c, c.Hq, c.T, sq);
        leaf_shape(&c, c.Hkv, c.S, sk);
        col_node *x[3];
        float *data[3] = {q, k, v};
        for (int i = 0; i < 3; i++) {
            x[i] = col_param(g, "x", COL_F32, 4, i ? sk : sq);
            col_bind(x[i], data[i], NULL);
            grads[ck][i] = calloc((size_t)(i ? nk : nq), sizeof(float));
            col_bind_grad(x[i], grads[ck][i], NULL);
        }
        if (ck)
            col_checkpoint_begin(g);
        col_node *a = col_attention(g, heads(g, &c, x[0]), heads(g, &c, x[1]), heads(g, &c, x[2]), 1, 0);
        col_node *y = col_scale(g, a, 2.0f, 0.0f);
        if (ck)
            col_checkpoint_end(g);
        col_node *rn = col_input(g, "r", COL_F32, 4, a ? a->t.shape : sq);
        col_bind(rn, r, NULL);
        col_node *loss = col_sum(g, col_mul(g, y, rn), 0xf, 0);
        col_err err = {0};
        col_plan *p = NULL;
        ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK &&
             col_plan_run(p, &be, &err) == COL_OK;
        if (!ok)
            TL_NOTE("checkpoint run failed: %s", err.msg);
        col_plan_free(p);
        col_graph_free(g);
    }
    bool same = ok;
    for (int i = 0; i < 3 && same; i++)
        same = memcmp(grads[0][i], grads[1][i], sizeof(float) * (size_t)(i ? nk : nq)) == 0;
    TL_OK(same, "gradients through a checkpointed attention equal the plain ones");
    for (int i = 0; i < 3; i++)
        free(grads[0][i]), free(grads[1][i]);
    free(q), free(k), free(v), free(r);
}

/* ---- a NaN input makes NaN rows, as softmax(q k^T) v does ---- */
static void test_nan(void)
{
    const att_case c = {1, 2, 1, 70, 80, 16, 1, 0, 0};
    int64_t nq = c.B * c.Hq * c.T * c.D, nk = c.B * c.Hkv * c.S * c.D, off = c.S - c.T;
    int64_t tq = 33, jk = 50; /* query row 33 of head 1; key 50 (seen by rows t >= jk - off) */
    float *q = randv(nq, 81), *k = randv(nk, 82), *v = randv(nk, 83);
    q[((0 * c.Hq + 1) * c.T + tq) * c.D + 3] = NAN;
    k[jk * c.D + 5] = NAN;
    att_run ar;
    bool ok = build(&ar, &c, q, k, v, NULL) && run(&ar);
    const float *o = ok ? col_data(ar.att) : NULL;
    int64_t nbad = 0;
    for (int64_t h = 0; ok && h < c.Hq; h++)
        for (int64_t t = 0; t < c.T; t++) {
            bool want = (h == 1 && t == tq) || jk <= t + off;
            const float *row = o + (h * c.T + t) * c.D;
            for (int64_t d = 0; d < c.D; d++)
                nbad += (isnan(row[d]) != 0) != want;
        }
    TL_OK(ok && nbad == 0, "NaN in q or k gives NaN exactly in the rows that see it (%lld wrong)", (long long)nbad);
    release(&ar);
    free(q), free(k), free(v);
}

/* ---- workspace does not grow with the sequence ---- */
static void test_scratch(void)
{
    size_t fw[2] = {0}, bw[2] = {0};
    int64_t lens[2] = {64, 2048};
    for (int i = 0; i < 2; i++) {
        col_graph *g = col_graph_new();
        int64_t s[4] = {1, 12, lens[i], 64};
        col_node *q = col_param(g, "q", COL_F32, 4, s), *k = col_param(g, "k", COL_F32, 4, s),
                 *v = col_param(g, "v", COL_F32, 4, s);
        col_node *a = col_attention(g, q, k, v, 1, 0);
        col_err err = {0};
        col_node *loss = col_sum(g, a, 0xf, 0);
        if (a && col_graph_backward(g, loss, &err) == COL_OK) {
            fw[i] = a->scratch_bytes;
            for (int j = 0; j < col_graph_count(g); j++)
                if (col_graph_node(g, j)->op == COL_OP_ATTENTION_BWD)
                    bw[i] = col_graph_node(g, j)->scratch_bytes;
        }
        col_graph_free(g);
    }
    TL_OK(fw[0] > 0 && fw[0] == fw[1], "forward scratch %zu bytes for T=64 and %zu for T=2048", fw[0], fw[1]);
    TL_OK(bw[0] > 0 && bw[0] == bw[1], "backward scratch %zu bytes for T=64 and %zu for T=2048", bw[0], bw[1]);
}

/* ---- builder errors ---- */
static void expect_error(const char *what, col_dtype dq, const int64_t *sq, const int64_t *sk, const int64_t *sv,
                         int causal)
{
    col_graph *g = col_graph_new();
    col_node *q = col_input(g, "q", dq, 4, sq), *k = col_input(g, "k", COL_F32, 4, sk),
             *v = col_input(g, "v", COL_F32, 4, sv);
    col_node *a = col_attention(g, q, k, v, causal, 0);
    const col_err *e = col_graph_error(g);
    TL_OK(!a && col_graph_status(g) != COL_OK && strstr(e->msg, "attention"), "%s is refused: %s", what, e->msg);
    col_graph_free(g);
}

static void test_errors(void)
{
    int64_t q[4] = {2, 3, 8, 16}, k2[4] = {2, 2, 8, 16}, q4[4] = {2, 4, 8, 16}, kd[4] = {2, 2, 8, 32},
            vs[4] = {2, 2, 9, 16}, kb[4] = {1, 2, 8, 16}, qlong[4] = {2, 4, 12, 16};
    expect_error("Hq=3 with Hkv=2", COL_F32, q, k2, k2, 0);
    expect_error("head_dim 16 vs 32", COL_F32, q4, kd, kd, 0);
    expect_error("k [2,2,8,16] with v [2,2,9,16]", COL_F32, q4, k2, vs, 0);
    expect_error("batch 2 vs 1", COL_F32, q4, kb, kb, 0);
    expect_error("bf16 q", COL_BF16, q4, k2, k2, 0);
    expect_error("causal with T > S", COL_F32, qlong, k2, k2, 1);
    col_graph *g = col_graph_new();
    int64_t s3[3] = {4, 8, 16};
    col_node *x = col_input(g, "x", COL_F32, 3, s3);
    TL_OK(!col_attention(g, x, x, x, 0, 0) && strstr(col_graph_error(g)->msg, "attention"), "3-d inputs are refused: %s",
          col_graph_error(g)->msg);
    col_graph_free(g);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_reference();
    test_gradcheck();
    test_threads();
    test_checkpoint();
    test_nan();
    test_scratch();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
