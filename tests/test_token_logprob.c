/* test_token_logprob.c - col_token_logprob (ops_nn.c, cpu_nn.c): per-token
 * log-probabilities log_softmax(logits)[target] and their gradient, as the
 * RLHF losses use them.
 *
 * Forward and gradient (seeded per token, col_graph_backward_seeded) against
 * PyTorch's log_softmax + gather (fixtures from
 * tools/refgen/make_rlhf_logprob_fixtures.py: 2-D, 3-D, 4-D and 1-D logits,
 * ignored rows, ignore_index a class, a 3001-wide vocabulary) with i64 and i32
 * targets; against a direct double computation on random cases (the parallel
 * path, a rising max, a transposed 3-D view) with 1 and several threads giving
 * the same bits; gradient checks by finite differences; a checkpointed node
 * recomputed; every row ignored; bad targets at run time and bad shapes or
 * dtypes at build time. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "gradcheck.h"
#include "graph.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/rlhf_logprob"
#endif

static col_backend be;
static col_rng rng;

/* against PyTorch's float32: |a - r| <= TORCH_TOL (1 + |r|) */
#define TORCH_TOL 1e-5
/* against the double reference: forward |a - r| <= REF_TOL (1 + |r| + |lse|) (two f32 roundings of numbers
 * up to |lse|); gradient |a - r| <= REF_TOL |d| (1 + |lse|) (the saved f32 logsumexp, rounded, scales each
 * softmax term by up to 1 + ulp(lse) / 2) */
#define REF_TOL 2e-7

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)col_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static void put_index(void *buf, col_dtype dt, int64_t i, int64_t v)
{
    if (dt == COL_I32)
        ((int32_t *)buf)[i] = (int32_t)v;
    else
        ((int64_t *)buf)[i] = v;
}

static int64_t get_index(const void *buf, col_dtype dt, int64_t i)
{
    return dt == COL_I32 ? ((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
}

/* Reference in double over rows [N, V]: lp[r] = x[r, t] - lse(r) (0 where ignored), lse[r];
 * grad (when given) = d[r] (onehot(t) - softmax(row)), 0 rows where ignored. */
static void ref_logprob(const float *x, const void *t, col_dtype tdt, int64_t N, int64_t V, int64_t ign, const float *d,
                        double *lp, double *lse, double *grad)
{
    for (int64_t r = 0; r < N; r++) {
        int64_t tr = get_index(t, tdt, r);
        const float *row = x + r * V;
        double m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < V; j++)
            m = fmax(m, row[j]);
        for (int64_t j = 0; j < V; j++)
            s += exp(row[j] - m);
        double l = m + log(s);
        lse[r] = tr == ign ? 0.0 : l;
        lp[r] = tr == ign ? 0.0 : row[tr] - l;
        for (int64_t j = 0; grad && j < V; j++)
            grad[r * V + j] = tr == ign ? 0.0 : (double)d[r] * ((j == tr) - exp(row[j] - l));
    }
}

/* worst |a - r| / (1 + |r|) (INFINITY on NaN) */
static double worst(const float *a, const float *r, int64_t n)
{
    double w = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)r[i]) / (1.0 + fabs((double)r[i]));
        if (isnan(e))
            return INFINITY;
        w = e > w ? e : w;
    }
    return w;
}

/* the forward's error against the double reference, in units of REF_TOL's scale */
static double fwd_err(const float *y, const double *lp, const double *lse, int64_t N)
{
    double w = 0.0;
    for (int64_t r = 0; r < N; r++) {
        double e = fabs((double)y[r] - lp[r]) / (1.0 + fabs(lp[r]) + fabs(lse[r]));
        w = isnan(e) ? INFINITY : e > w ? e : w;
    }
    return w;
}

static double grad_err(const float *g, const double *ref, const float *d, const double *lse, int64_t N, int64_t V)
{
    double w = 0.0;
    for (int64_t i = 0; i < N * V; i++) {
        double e = fabs((double)g[i] - ref[i]) / (fabs((double)d[i / V]) * (1.0 + fabs(lse[i / V])) + 1e-30);
        w = isnan(e) ? INFINITY : e > w ? e : w;
    }
    return w;
}

/* ================================ fixtures ================================= */

/* the named tensor as f32 (malloc'd), its shape in nd, shape; NULL if absent */
static float *fx(const col_ckpt *ck, int k, const char *what, int *nd, int64_t *shape)
{
    char name[64];
    snprintf(name, sizeof name, "c%d.%s", k, what);
    const col_ckpt_tensor *t = col_ckpt_find(ck, name);
    if (!t)
        return NULL;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    float *p = malloc(sizeof(float) * (size_t)(n + 1));
    col_err err = {0};
    if (col_ckpt_read_f32(t, t->ndim, t->shape, p, &err) != COL_OK) {
        free(p);
        return NULL;
    }
    *nd = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return p;
}

/* the i64 tensor c{k}.what into dst as tdt (n elements); false if absent or not i64 [n] */
static bool fx_index(const col_ckpt *ck, int k, const char *what, col_dtype tdt, int64_t n, void *dst)
{
    char name[64];
    snprintf(name, sizeof name, "c%d.%s", k, what);
    const col_ckpt_tensor *t = col_ckpt_find(ck, name);
    if (!t || t->dtype != COL_ST_I64 || t->nbytes != sizeof(int64_t) * (size_t)n)
        return false;
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, (const char *)t->data + i * 8, 8);
        put_index(dst, tdt, i, v);
    }
    return true;
}

/* case k with tdt targets: y = token_logprob(logits, targets), backward seeded with d */
static bool test_fixture(const col_ckpt *ck, int k, col_dtype tdt)
{
    int nx = 0, nl = 0, nd_ = 0, ng = 0, n1 = 0;
    int64_t sx[COL_MAX_DIMS], sl[COL_MAX_DIMS], sd[COL_MAX_DIMS], sg[COL_MAX_DIMS], s1[COL_MAX_DIMS];
    float *x = fx(ck, k, "logits", &nx, sx), *lp = fx(ck, k, "lp", &nl, sl), *d = fx(ck, k, "d", &nd_, sd);
    float *dl = fx(ck, k, "dlogits", &ng, sg), *ignf = fx(ck, k, "ignore", &n1, s1);
    if (!x || !lp || !d || !dl || !ignf) {
        free(x), free(lp), free(d), free(dl), free(ignf);
        return false;
    }
    int64_t V = sx[nx - 1], N = 1;
    for (int i = 0; i < nl; i++)
        N *= sl[i];
    int64_t ign = (int64_t)ignf[0];
    void *t = malloc(8 * (size_t)(N + 1));
    float *grad = calloc((size_t)(N * V + 1), sizeof(float));
    double *rlp = malloc(sizeof(double) * (size_t)(N + 1)), *rlse = malloc(sizeof(double) * (size_t)(N + 1));
    double *rg = malloc(sizeof(double) * (size_t)(N * V + 1));
    bool have_t = fx_index(ck, k, "targets", tdt, N, t);
    col_graph *g = col_graph_new();
    col_node *xn = col_param(g, "logits", COL_F32, nx, sx), *tn = col_input(g, "targets", tdt, nl, sl);
    col_node *dn = col_input(g, "d", COL_F32, nd_, sd);
    col_bind(xn, x, NULL);
    col_bind_grad(xn, grad, NULL);
    col_bind(tn, t, NULL);
    col_bind(dn, d, NULL);
    col_node *y = col_token_logprob(g, xn, tn, ign);
    col_mark_output(y);
    col_err err = {0};
    if (!y)
        err = *col_graph_error(g);
    else if (!have_t)
        snprintf(err.msg, sizeof err.msg, "c%d.targets: not i64 [%lld]", k, (long long)N);
    col_plan *p = NULL;
    bool ok = have_t && y && col_graph_backward_seeded(g, y, dn, &err) == COL_OK &&
              col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, &be, &err) == COL_OK;
    bool shape_ok = ok && y->t.ndim == nl && (nl == 0 || memcmp(y->t.shape, sl, sizeof(int64_t) * (size_t)nl) == 0);
    const float *yv = ok ? col_data(y) : NULL;
    int64_t nign = 0;
    bool ign_exact = ok;
    for (int64_t r = 0; ok && r < N; r++)
        if (get_index(t, tdt, r) == ign) {
            nign++;
            ign_exact = ign_exact && yv[r] == 0.0f;
            for (int64_t j = 0; j < V; j++)
                ign_exact = ign_exact && grad[r * V + j] == 0.0f;
        }
    double wt = ok ? worst(yv, lp, N) : INFINITY, wg = ok ? worst(grad, dl, N * V) : INFINITY;
    double wr = INFINITY, wrg = INFINITY;
    if (ok) {
        ref_logprob(x, t, tdt, N, V, ign, d, rlp, rlse, rg);
        wr = fwd_err(yv, rlp, rlse, N);
        wrg = grad_err(grad, rg, d, rlse, N, V);
    }
    char b[96];
    col_tensor lt = {.ndim = nx};
    memcpy(lt.shape, sx, sizeof(int64_t) * (size_t)nx);
    col_shape_str(&lt, b, sizeof b);
    TL_OK(ok && shape_ok && wt <= TORCH_TOL && wg <= TORCH_TOL,
          "fixture %d: logits %s, %s targets, ignore %lld (%lld rows ignored): vs torch log_softmax+gather: "
          "forward %.2e, dlogits %.2e %s",
          k, b, col_dtype_name(tdt), (long long)ign, (long long)nign, wt, wg, err.msg);
    TL_OK(ok && wr <= REF_TOL && wrg <= REF_TOL, "fixture %d (%s targets): vs double: forward %.2e, dlogits %.2e", k,
          col_dtype_name(tdt), wr, wrg);
    TL_OK(ign_exact, "fixture %d (%s targets): ignored rows give exactly 0 and a zero gradient row", k,
          col_dtype_name(tdt));
    col_plan_free(p);
    col_graph_free(g);
    free(x), free(lp), free(d), free(dl), free(ignf), free(t), free(grad), free(rlp), free(rlse), free(rg);
    return true;
}

static void test_fixtures(void)
{
    col_ckpt *ck = NULL;
    col_err err = {0};
    if (col_ckpt_open(FIXTURES "/logprob.safetensors", &ck, &err) != COL_OK) {
        TL_OK(false, "fixtures: %s", err.msg);
        return;
    }
    int n = 0;
    while (test_fixture(ck, n, n % 2 ? COL_I32 : COL_I64)) {
        test_fixture(ck, n, n % 2 ? COL_I64 : COL_I32);
        n++;
    }
    TL_OK(n >= 6, "fixtures: %d cases", n);
    col_ckpt_close(ck);
}

/* ========================= random cases against double ========================= */

/* logits [N, V] (ramp: rising by class, so the running max grows block after block); loss = sum(y * d) through
 * the ordinary backward; 1 thread against several, bitwise */
static void test_random(col_dtype tdt, int64_t N, int64_t V, int64_t ign, int ramp)
{
    float *x = malloc(sizeof(float) * (size_t)(N * V)), *d = malloc(sizeof(float) * (size_t)N);
    float *dx[2] = {malloc(sizeof(float) * (size_t)(N * V)), malloc(sizeof(float) * (size_t)(N * V))};
    float y[2][64];
    double *rg = malloc(sizeof(double) * (size_t)(N * V)), rlp[64], rlse[64];
    void *t = malloc(8 * (size_t)N);
    col_fill_normal(x, N * V, col_rng_u32(&rng), 3.0f);
    col_fill_normal(d, N, col_rng_u32(&rng), 1.0f);
    for (int64_t i = 0; ramp && i < N * V; i++)
        x[i] += 0.01f * (float)(i % V);
    int64_t nign = 0;
    for (int64_t r = 0; r < N; r++) {
        put_index(t, tdt, r, r % 3 == 1 ? ign : rnd(0, V - 1));
        nign += get_index(t, tdt, r) == ign;
    }
    ref_logprob(x, t, tdt, N, V, ign, d, rlp, rlse, rg);
    col_graph *g = col_graph_new();
    int64_t xs[2] = {N, V};
    col_node *xn = col_param(g, "logits", COL_F32, 2, xs), *tn = col_input(g, "t", tdt, 1, &N);
    col_node *dn = col_input(g, "d", COL_F32, 1, &N);
    col_bind(xn, x, NULL);
    col_bind(tn, t, NULL);
    col_bind(dn, d, NULL);
    col_node *yn = col_token_logprob(g, xn, tn, ign);
    col_mark_output(yn);
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = N <= 64 && col_graph_backward(g, col_sum(g, col_mul(g, yn, dn), 1u, 0), &err) == COL_OK &&
              col_plan_create(g, &p, &err) == COL_OK;
    int saved = omp_get_max_threads(), many = saved > 1 ? saved : 2;
    for (int k = 0; k < 2 && ok; k++) {
        omp_set_num_threads(k == 0 ? 1 : many);
        memset(dx[k], 0, sizeof(float) * (size_t)(N * V));
        col_bind_grad(xn, dx[k], NULL);
        ok = col_plan_run(p, &be, &err) == COL_OK;
        if (ok)
            memcpy(y[k], col_data(yn), sizeof(float) * (size_t)N);
    }
    omp_set_num_threads(saved);
    double wf = ok ? fwd_err(y[1], rlp, rlse, N) : INFINITY, wg = ok ? grad_err(dx[1], rg, d, rlse, N, V) : INFINITY;
    TL_OK(ok && wf <= REF_TOL && wg <= REF_TOL,
          "random %s [%lld,%lld] ignore %lld (%lld ignored)%s: vs double: forward %.2e, dlogits %.2e %s",
          col_dtype_name(tdt), (long long)N, (long long)V, (long long)ign, (long long)nign, ramp ? ", rising" : "", wf,
          wg, err.msg);
    TL_OK(ok && memcmp(y[0], y[1], sizeof(float) * (size_t)N) == 0 &&
              memcmp(dx[0], dx[1], sizeof(float) * (size_t)(N * V)) == 0,
          "random [%lld,%lld]: the same bits with 1 and %d threads", (long long)N, (long long)V, many);
    col_plan_free(p);
    col_graph_free(g);
    free(x), free(d), free(dx[0]), free(dx[1]), free(rg), free(t);
}

/* logits [A, M, V] as the transpose of a leaf [M, A, V], targets [A, M]: output [A, M], rows in that order */
static void test_transposed(void)
{
    int64_t A = 3, M = 5, V = 41, N = A * M;
    float x[15 * 41], xt[15 * 41], d[15] = {0};
    int32_t t[15];
    double rlp[15], rlse[15];
    col_fill_normal(x, N * V, col_rng_u32(&rng), 2.0f);
    for (int64_t i = 0; i < N; i++)
        t[i] = i % 4 == 0 ? -1 : (int32_t)rnd(0, V - 1);
    for (int64_t a = 0; a < A; a++)
        for (int64_t m = 0; m < M; m++)
            memcpy(xt + (m * A + a) * V, x + (a * M + m) * V, sizeof(float) * (size_t)V);
    ref_logprob(x, t, COL_I32, N, V, -1, d, rlp, rlse, NULL);
    col_graph *g = col_graph_new();
    int64_t ls[3] = {M, A, V}, ts[2] = {A, M};
    col_node *xl = col_input(g, "x", COL_F32, 3, ls), *tn = col_input(g, "t", COL_I32, 2, ts);
    col_bind(xl, xt, NULL);
    col_bind(tn, t, NULL);
    col_node *y = col_token_logprob(g, col_transpose(g, xl, 0, 1), tn, -1);
    col_mark_output(y);
    col_plan *p = NULL;
    col_err err = {0};
    bool ok = y && col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, &be, &err) == COL_OK;
    double w = ok ? fwd_err(col_data(y), rlp, rlse, N) : INFINITY;
    TL_OK(ok && y->t.ndim == 2 && y->t.shape[0] == A && y->t.shape[1] == M && w <= REF_TOL,
          "transposed [%lld,%lld,%lld] logits, [%lld,%lld] i32 targets: output [%lld,%lld], vs double %.2e %s",
          (long long)A, (long long)M, (long long)V, (long long)A, (long long)M, (long long)A, (long long)M, w, err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

/* ============================== gradient checks =============================== */

typedef struct {
    int transposed;     /* logits [A, N/A, V] given as a transposed leaf [N/A, A, V] */
    int64_t ignore;
} gc_case;

static col_node *build_tlp(col_graph *g, col_node **x, void *u)
{
    const gc_case *c = u;
    return col_token_logprob(g, c->transposed ? col_transpose(g, x[0], 0, 1) : x[0], x[1], c->ignore);
}

static void gradcheck_tlp(int transposed, col_dtype tdt)
{
    gc_case c = {.transposed = transposed, .ignore = transposed ? -100 : 3};
    int64_t N = transposed ? 2 * rnd(2, 4) : rnd(3, 9), V = rnd(4, 13);
    float *x = malloc(sizeof(float) * (size_t)(N * V));
    void *t = malloc(8 * (size_t)N);
    col_fill_normal(x, N * V, col_rng_u32(&rng), 1.0f);
    for (int64_t r = 0; r < N; r++)
        put_index(t, tdt, r, r % 3 == 1 ? c.ignore : rnd(0, V - 1));
    col_gc_input in[2] = {{.dtype = COL_F32, .data = x}, {.dtype = tdt, .data = t}};
    if (transposed) {
        in[0].ndim = 3, in[0].shape[0] = N / 2, in[0].shape[1] = 2, in[0].shape[2] = V;
        in[1].ndim = 2, in[1].shape[0] = 2, in[1].shape[1] = N / 2; /* the transposed logits' leading dims */
    } else {
        in[0].ndim = 2, in[0].shape[0] = N, in[0].shape[1] = V;
        in[1].ndim = 1, in[1].shape[0] = N;
    }
    char name[96];
    snprintf(name, sizeof name, "token_logprob N=%lld V=%lld %s targets%s, ignored rows", (long long)N, (long long)V,
             col_dtype_name(tdt), transposed ? ", transposed 3-D logits" : "");
    col_gc_opts o = {.seed = col_rng_u32(&rng), .h = 1e-2, .max_points = 64};
    tl_gradcheck(&be, name, build_tlp, &c, 2, in, &o);
    free(x);
    free(t);
}

/* the node inside a checkpointed segment (recomputed for its backward, its saved logsumexp with it): the same
 * output and gradient bits as without checkpointing */
static void test_checkpointed(void)
{
    int64_t B = 2, T = 6, V = 50, N = B * T, ls[3] = {B, T, V}, ts[2] = {B, T};
    float x[12 * 50], d[12], out[2][12], gr[2][12 * 50];
    int64_t t[12];
    col_fill_normal(x, N * V, col_rng_u32(&rng), 2.0f);
    col_fill_normal(d, N, col_rng_u32(&rng), 1.0f);
    for (int64_t i = 0; i < N; i++)
        t[i] = i == 5 ? -100 : rnd(0, V - 1);
    bool ok = true, recomputed = false;
    col_err err = {0};
    for (int ck = 0; ck < 2 && ok; ck++) {
        col_graph *g = col_graph_new();
        col_node *xn = col_param(g, "x", COL_F32, 3, ls), *tn = col_input(g, "t", COL_I64, 2, ts);
        col_node *dn = col_input(g, "d", COL_F32, 2, ts);
        col_bind(xn, x, NULL);
        memset(gr[ck], 0, sizeof gr[ck]);
        col_bind_grad(xn, gr[ck], NULL);
        col_bind(tn, t, NULL);
        col_bind(dn, d, NULL);
        if (ck)
            col_checkpoint_begin(g);
        col_node *y = col_token_logprob(g, col_scale(g, xn, 0.5f, 0.25f), tn, -100);
        col_node *z = col_scale(g, y, 2.0f, 0.0f);
        if (ck)
            col_checkpoint_end(g);
        col_node *loss = col_sum(g, col_mul(g, z, dn), 3u, 0);
        col_mark_output(z);
        col_plan *p = NULL;
        ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK &&
             col_plan_run(p, &be, &err) == COL_OK;
        if (ok)
            memcpy(out[ck], col_data(z), sizeof out[ck]);
        for (int i = 0; ck && i < col_graph_count(g); i++)
            recomputed = recomputed || (col_graph_node(g, i)->op == COL_OP_TOKEN_LOGPROB &&
                                        (col_graph_node(g, i)->flags & COL_NODE_RECOMPUTE));
        col_plan_free(p);
        col_graph_free(g);
    }
    TL_OK(ok && recomputed && memcmp(out[0], out[1], sizeof out[0]) == 0 && memcmp(gr[0], gr[1], sizeof gr[0]) == 0,
          "checkpointed (recomputed: %s): the same output and gradient bits %s", recomputed ? "yes" : "no", err.msg);
}

/* every row ignored: zeros and a zero gradient */
static void test_all_ignored(void)
{
    int64_t N = 4, V = 5, xs[2] = {N, V};
    float x[20], dx[20], d[4] = {1, 2, 3, 4};
    int32_t t[4] = {-100, -100, -100, -100};
    col_fill_normal(x, 20, 5, 1.0f);
    for (int i = 0; i < 20; i++)
        dx[i] = 7.0f; /* the ACCUMULATE adds: 7 must stay */
    col_graph *g = col_graph_new();
    col_node *xn = col_param(g, "x", COL_F32, 2, xs), *tn = col_input(g, "t", COL_I32, 1, &N);
    col_node *dn = col_input(g, "d", COL_F32, 1, &N);
    col_bind(xn, x, NULL);
    col_bind(tn, t, NULL);
    col_bind(dn, d, NULL);
    col_bind_grad(xn, dx, NULL);
    col_node *y = col_token_logprob(g, xn, tn, -100);
    col_mark_output(y);
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = col_graph_backward_seeded(g, y, dn, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK &&
              col_plan_run(p, &be, &err) == COL_OK;
    bool zero = ok;
    for (int i = 0; ok && i < 4; i++)
        zero = zero && ((const float *)col_data(y))[i] == 0.0f;
    for (int i = 0; i < 20; i++)
        zero = zero && dx[i] == 7.0f;
    TL_OK(zero, "every row ignored: log-probabilities 0, gradient 0 %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

/* ================================== errors =================================== */

/* token_logprob of logits [3, 5] with targets b (bdt, [3]); the run's status and message */
static col_status run_targets(col_dtype bdt, void *b, int64_t ign, col_err *err)
{
    int64_t xs[2] = {3, 5}, n = 3;
    float x[15] = {0};
    col_graph *g = col_graph_new();
    col_node *xn = col_input(g, "x", COL_F32, 2, xs), *tn = col_input(g, "t", bdt, 1, &n);
    col_bind(xn, x, NULL);
    col_bind(tn, b, NULL);
    col_mark_output(col_token_logprob(g, xn, tn, ign));
    col_plan *p = NULL;
    col_status st = col_plan_create(g, &p, err);
    if (st == COL_OK)
        st = col_plan_run(p, &be, err);
    col_plan_free(p);
    col_graph_free(g);
    return st;
}

static void test_errors(void)
{
    col_err err = {0};
    int64_t t64[3] = {0, 5, -100};
    col_status st = run_targets(COL_I64, t64, -100, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "token_logprob: target 5 at row 1 is outside the classes (0..4) and is "
                                              "not ignore_index (-100)"),
          "bad i64 target -> run error \"%s\"", err.msg);
    int32_t t32[3] = {4, -1, -3};
    err = (col_err){0};
    st = run_targets(COL_I32, t32, -1, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "token_logprob: target -3 at row 2") && strstr(err.msg, "(-1)"),
          "negative i32 target, not ignore_index -> run error \"%s\"", err.msg);
    err = (col_err){0};
    st = run_targets(COL_I32, t32, -3, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "target -1 at row 1"), "-1 with ignore_index -3 -> run error \"%s\"",
          err.msg);

    int64_t s2[2] = {5, 4}, s3[3] = {2, 3, 4}, t4 = 4, t5 = 5, t23[2] = {2, 4}, t32s[2] = {3, 2};
    const struct {
        col_dtype xd, td;
        int xn, tn;
        const int64_t *xs, *ts;
        const char *what, *msg;
    } cases[] = {
        {COL_F32, COL_I32, 2, 1, s2, &t4, "targets [4] for logits [5,4]", "do not match logits"},
        {COL_F32, COL_F32, 2, 1, s2, &t5, "f32 targets", "targets must be i32 or i64"},
        {COL_I32, COL_I32, 2, 1, s2, &t5, "i32 logits", "logits must be f32"},
        {COL_BF16, COL_I64, 2, 1, s2, &t5, "bf16 logits", "logits must be f32"},
        {COL_F32, COL_I32, 3, 2, s3, t23, "targets [2,4] for logits [2,3,4]", "do not match logits"},
        {COL_F32, COL_I32, 3, 2, s3, t32s, "targets [3,2] for logits [2,3,4]", "do not match logits"},
        {COL_F32, COL_I32, 3, 1, s3, &t5, "targets [5] for logits [2,3,4]", "do not match logits"},
        {COL_F32, COL_I32, 0, 0, s2, s2, "scalar logits", "class dim"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_graph *g = col_graph_new();
        col_node *xn = col_input(g, "x", cases[i].xd, cases[i].xn, cases[i].xs);
        col_node *tn = col_input(g, "t", cases[i].td, cases[i].tn, cases[i].ts);
        col_node *n = col_token_logprob(g, xn, tn, -100);
        const char *msg = col_graph_error(g)->msg;
        TL_OK(n == NULL && col_graph_status(g) != COL_OK && strstr(msg, "token_logprob: ") == msg &&
                  strstr(msg, cases[i].msg),
              "%s: build error \"%s\"", cases[i].what, msg);
        col_graph_free(g);
    }
    col_graph *g = col_graph_new();
    TL_OK(col_token_logprob(g, NULL, NULL, 0) == NULL, "missing sources: NULL");
    col_graph_free(g);
}

int main(void)
{
    tl_cpu_backend(&be);
    col_rng_init(&rng, 20250717);

    test_fixtures();
    test_random(COL_I32, 7, 11, -100, 0);
    test_random(COL_I64, 9, 23, 2, 0);     /* ignore_index is a class */
    test_random(COL_I64, 1, 5, -100, 0);
    test_random(COL_I32, 5, 3000, -100, 1); /* several blocks, rising max */
    test_random(COL_I64, 64, 1000, -1, 0); /* the parallel path */
    test_transposed();
    gradcheck_tlp(0, COL_I64);
    gradcheck_tlp(0, COL_I32);
    gradcheck_tlp(1, COL_I64);
    gradcheck_tlp(1, COL_I32);
    test_checkpointed();
    test_all_ignored();
    test_errors();

    col_cpu_backend_free(&be);
    return tl_done();
}
