/* test_ops_norm.c - softmax, log_softmax, layernorm, rmsnorm: forward against
 * double references, gradient checks (3-D/4-D, non-contiguous inputs,
 * broadcast masks, every optional-argument combination of layernorm),
 * thread-count independence of dw/db, and builder errors. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;
static col_rng rng;

enum { K_SOFTMAX, K_LOG_SOFTMAX, K_LAYERNORM, K_RMSNORM };

/* what the build callback makes from its leaves: x, then [mask] or [w][b] */
typedef struct {
    int kind;
    int transpose;   /* leaf 0 holds x with its last two dims swapped */
    int causal;      /* softmax */
    int has_mask;    /* softmax: leaf 1 is an additive mask */
    int has_w, has_b;/* layernorm (rmsnorm always has w) */
    int w_expand;    /* the weight leaf is [1], expanded to [C] (a stride-0 view) */
    int checkpoint;  /* build the op inside a checkpoint segment */
    float eps;
} cfg;

static col_node *build(col_graph *g, col_node **leaves, void *user)
{
    const cfg *c = user;
    col_node *x = leaves[0];
    if (c->transpose)
        x = col_transpose(g, x, -1, -2);
    if (!x)
        return NULL;
    int64_t C = x->t.shape[x->t.ndim - 1];
    int k = 1;
    col_node *y = NULL;
    if (c->checkpoint)
        col_checkpoint_begin(g);
    switch (c->kind) {
    case K_SOFTMAX:
        y = col_softmax(g, x, c->has_mask ? leaves[k] : NULL, c->causal);
        break;
    case K_LOG_SOFTMAX:
        y = col_log_softmax(g, x);
        break;
    default: {
        col_node *w = NULL, *b = NULL;
        if (c->kind == K_RMSNORM || c->has_w) {
            w = leaves[k++];
            if (c->w_expand)
                w = col_expand(g, w, 1, &C);
        }
        if (c->kind == K_LAYERNORM && c->has_b)
            b = leaves[k++];
        y = c->kind == K_LAYERNORM ? col_layernorm(g, x, w, b, c->eps) : col_rmsnorm(g, x, w, c->eps);
    }
    }
    if (c->checkpoint)
        col_checkpoint_end(g);
    return y;
}

/* ---- helpers ---- */

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)col_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static int64_t prod(int nd, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= s[i];
    return n;
}

static float *randn(int64_t n, float mean, float std)
{
    float *p = malloc(sizeof(float) * (size_t)(n + 1));
    col_fill_normal(p, n, col_rng_u32(&rng), std);
    for (int64_t i = 0; i < n; i++)
        p[i] += mean;
    return p;
}

static col_gc_input input(int nd, const int64_t *shape, const float *data, bool no_grad)
{
    col_gc_input in = {.dtype = COL_F32, .ndim = nd, .data = data, .no_grad = no_grad};
    memcpy(in.shape, shape, sizeof(int64_t) * (size_t)nd);
    return in;
}

/* the leaf shape of x: logical shape with the last two dims swapped if transposed */
static void leaf_shape(int nd, const int64_t *shape, int transpose, int64_t *out)
{
    memcpy(out, shape, sizeof(int64_t) * (size_t)nd);
    if (transpose) {
        out[nd - 2] = shape[nd - 1];
        out[nd - 1] = shape[nd - 2];
    }
}

/* logical (contiguous, double) copy of x stored in leaf layout */
static double *logical_x(const float *leaf, int nd, const int64_t *shape, int transpose)
{
    int64_t n = prod(nd, shape), C = shape[nd - 1], T = nd >= 2 ? shape[nd - 2] : 1;
    double *x = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t f = 0; f < n; f++) {
        int64_t j = f % C, i = (f / C) % T, p = f / (C * T);
        x[f] = transpose ? leaf[p * T * C + j * T + i] : leaf[f];
    }
    return x;
}

/* element of m (shape ms, mnd dims) that broadcasts to element `flat` of shape */
static double bcast_get(const float *m, int mnd, const int64_t *ms, int nd, const int64_t *shape, int64_t flat)
{
    int64_t idx = 0, mul = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t coord = flat % shape[d];
        flat /= shape[d];
        int md = d - (nd - mnd);
        if (md >= 0) {
            if (ms[md] != 1)
                idx += coord * mul;
            mul *= ms[md];
        }
    }
    return m[idx];
}

/* Builds with cfg c on inputs (as plain input leaves), runs, returns a copy of
 * the output (NULL and a failed assertion on error). */
static float *run_forward(const char *name, cfg *c, int n, const col_gc_input *in, int64_t *nout)
{
    col_graph *g = col_graph_new();
    col_node *leaves[COL_GC_MAX_INPUTS];
    for (int i = 0; i < n; i++) {
        leaves[i] = col_input(g, "x", in[i].dtype, in[i].ndim, in[i].shape);
        col_bind(leaves[i], (void *)in[i].data, NULL);
    }
    col_node *out = col_contiguous(g, build(g, leaves, c));
    col_mark_output(out);
    col_plan *plan = NULL;
    col_err err = {0};
    float *res = NULL;
    if (col_plan_create(g, &plan, &err) == COL_OK && col_plan_run(plan, &be, &err) == COL_OK) {
        *nout = col_numel(&out->t);
        res = malloc(sizeof(float) * (size_t)(*nout + 1));
        memcpy(res, col_data(out), sizeof(float) * (size_t)*nout);
    } else {
        TL_OK(false, "%s: run failed: %s", name, err.msg);
    }
    col_plan_free(plan);
    col_graph_free(g);
    return res;
}

/* |got - ref| <= atol + rtol * |ref| everywhere (NaN in either fails) */
static void check_close(const char *name, const float *got, const double *ref, int64_t n, double atol, double rtol)
{
    double worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= atol + rtol * fabs(ref[i]))) {
            if (bad < 0)
                bad = i;
            if (!(e <= worst))
                worst = e;
        } else if (e > worst) {
            worst = e;
        }
    }
    TL_OK(bad < 0, "%s: %lld values, max |err| %.3g%s", name, (long long)n, worst, bad < 0 ? "" : " (mismatch)");
    if (bad >= 0)
        TL_NOTE("first mismatch at %lld: got %.9g want %.9g", (long long)bad, (double)got[bad], ref[bad]);
}

/* ---- references (double) ---- */

/* x, mask: logical [rows, S] (mask NULL or broadcast already); y written */
static void ref_softmax(const double *x, const double *mask, int64_t rows, int64_t T, int64_t S, int causal,
                        double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t L = S;
        if (causal) {
            int64_t lim = r % T + (S - T) + 1;
            L = lim < 0 ? 0 : lim < S ? lim : S;
        }
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; j++) {
            double v = x[r * S + j] + (mask ? mask[r * S + j] : 0.0);
            mx = v > mx ? v : mx;
        }
        double s = 0;
        for (int64_t j = 0; j < S; j++) {
            double v = x[r * S + j] + (mask ? mask[r * S + j] : 0.0);
            y[r * S + j] = (j < L && mx > -INFINITY) ? exp(v - mx) : 0.0;
            s += y[r * S + j];
        }
        for (int64_t j = 0; j < S; j++)
            y[r * S + j] = s > 0 ? y[r * S + j] / s : 0.0;
    }
}

static void ref_log_softmax(const double *x, int64_t rows, int64_t C, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++)
            mx = fmax(mx, x[r * C + c]);
        for (int64_t c = 0; c < C; c++)
            s += exp(x[r * C + c] - mx);
        for (int64_t c = 0; c < C; c++)
            y[r * C + c] = x[r * C + c] - mx - log(s);
    }
}

/* layernorm (rms = 0) or rmsnorm (rms = 1); w, b may be NULL */
static void ref_norm(int rms, const double *x, const float *w, const float *b, double eps, int64_t rows, int64_t C,
                     double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C;
        double mean = 0, var = 0;
        if (!rms) {
            for (int64_t c = 0; c < C; c++)
                mean += xr[c];
            mean /= (double)C;
        }
        for (int64_t c = 0; c < C; c++)
            var += (xr[c] - mean) * (xr[c] - mean);
        double rstd = 1.0 / sqrt(var / (double)C + eps);
        for (int64_t c = 0; c < C; c++)
            y[r * C + c] = (xr[c] - mean) * rstd * (w ? w[c] : 1.0) + (b ? b[c] : 0.0);
    }
}

static void rand_shape(int nd, int64_t lo, int64_t hi, int64_t *shape)
{
    for (int i = 0; i < nd; i++)
        shape[i] = rnd(lo, hi);
}

/* in[0] = x (leaf shape ls), then w and b [C] where c has them; returns the count */
static int norm_inputs(const cfg *c, int nd, const int64_t *ls, const float *x, const int64_t *C, const float *w,
                       const float *b, bool no_grad, col_gc_input *in)
{
    int k = 0;
    in[k++] = input(nd, ls, x, no_grad);
    if (c->kind == K_RMSNORM || (c->kind == K_LAYERNORM && c->has_w))
        in[k++] = input(1, C, w, no_grad);
    if (c->kind == K_LAYERNORM && c->has_b)
        in[k++] = input(1, C, b, no_grad);
    return k;
}

/* Runs c (no mask, not causal) on x, stored in leaf layout, of logical shape [nd], with w / b where c has
 * them, and checks the output against the double reference. */
static void check_forward(const char *name, const cfg *c, int nd, const int64_t *shape, const float *x,
                          const float *w, const float *b, double atol, double rtol)
{
    int64_t ls[4], n = prod(nd, shape), C = shape[nd - 1], nout = 0;
    leaf_shape(nd, shape, c->transpose, ls);
    col_gc_input in[3];
    int k = norm_inputs(c, nd, ls, x, &C, w, b, true, in);
    float *y = run_forward(name, (cfg *)c, k, in, &nout);
    double *xl = logical_x(x, nd, shape, c->transpose), *ref = malloc(sizeof(double) * (size_t)(n + 1));
    bool rms = c->kind == K_RMSNORM, hw = rms || c->has_w;
    switch (c->kind) {
    case K_SOFTMAX: ref_softmax(xl, NULL, n / C, 1, C, 0, ref); break;
    case K_LOG_SOFTMAX: ref_log_softmax(xl, n / C, C, ref); break;
    default: ref_norm(rms, xl, hw ? w : NULL, !rms && c->has_b ? b : NULL, c->eps, n / C, C, ref);
    }
    if (y)
        check_close(name, y, ref, n, atol, rtol);
    free(y), free(xl), free(ref);
}

/* ---- forward tests ---- */

/* softmax or log_softmax (kind) on `trials` random shapes 1-D..4-D (dims 1..dim_hi, the last 1..c_hi), the
 * transposed layout from trial t_from on (2-D and up), x ~ N(mean, std) */
static void random_forward(int kind, int trials, int64_t dim_hi, int64_t c_hi, int t_from, float mean, float std,
                           double atol)
{
    for (int trial = 0; trial < trials; trial++) {
        int nd = 1 + trial % 4;
        int64_t shape[4];
        rand_shape(nd, 1, dim_hi, shape);
        shape[nd - 1] = rnd(1, c_hi);
        cfg c = {.kind = kind, .transpose = nd >= 2 && trial >= t_from};
        float *x = randn(prod(nd, shape), mean, std);
        char name[64];
        snprintf(name, sizeof name, "%s forward%s", kind == K_SOFTMAX ? "softmax" : "log_softmax",
                 c.transpose ? ", transposed input" : "");
        check_forward(name, &c, nd, shape, x, NULL, NULL, atol, 1e-5);
        free(x);
    }
}

static void test_softmax_forward(void)
{
    /* plain, random shapes 1-D..4-D, some transposed */
    random_forward(K_SOFTMAX, 8, 9, 70, 4, 0.5f, 3.0f, 1e-6);

    /* causal with T < S, T == S, T > S, with a padding mask [B,1,1,S] of 0 / -inf;
     * batch 0 is fully masked by the padding, and T > S masks the first rows */
    const int64_t ts[3][2] = {{3, 7}, {5, 5}, {6, 3}};
    for (int k = 0; k < 3; k++) {
        int64_t B = 2, H = 3, T = ts[k][0], S = ts[k][1];
        int64_t shape[4] = {B, H, T, S}, mshape[4] = {B, 1, 1, S};
        int64_t n = B * H * T * S, rows = B * H * T, nout = 0;
        float *x = randn(n, 0.0f, 2.0f);
        float *m = malloc(sizeof(float) * (size_t)(B * S));
        for (int64_t s = 0; s < S; s++) {
            m[s] = -INFINITY;                                   /* batch 0: all keys padded */
            m[S + s] = s >= S - 1 && S > 1 ? -INFINITY : 0.0f;  /* batch 1: last key padded */
        }
        cfg c = {.kind = K_SOFTMAX, .causal = 1, .has_mask = 1};
        col_gc_input in[2] = {input(4, shape, x, true), input(4, mshape, m, true)};
        float *y = run_forward("causal softmax", &c, 2, in, &nout);
        double *xl = logical_x(x, 4, shape, 0), *ml = malloc(sizeof(double) * (size_t)n);
        double *ref = malloc(sizeof(double) * (size_t)n);
        for (int64_t f = 0; f < n; f++)
            ml[f] = bcast_get(m, 4, mshape, 4, shape, f);
        ref_softmax(xl, ml, rows, T, S, 1, ref);
        if (y) {
            char name[96];
            snprintf(name, sizeof name, "causal softmax T=%lld S=%lld with a -inf padding mask", (long long)T,
                     (long long)S);
            check_close(name, y, ref, n, 1e-6, 1e-5);
            bool zeros = true, finite = true, sums = true;
            for (int64_t f = 0; f < n; f++)
                finite = finite && isfinite(y[f]);
            for (int64_t f = 0; f < H * T * S; f++) /* batch 0: fully masked rows */
                zeros = zeros && y[f] == 0.0f;
            for (int64_t r = H * T; r < rows; r++) { /* batch 1: rows with a visible key sum to 1 */
                int64_t i = r % T, vis = i + (S - T) + 1;
                vis = vis > S - 1 ? S - 1 : vis;
                double s = 0;
                for (int64_t j = 0; j < S; j++)
                    s += y[r * S + j];
                sums = sums && (vis <= 0 ? s == 0.0 : fabs(s - 1.0) < 1e-5);
            }
            TL_OK(zeros && finite, "%s: fully masked rows are exactly 0, no NaN", name);
            TL_OK(sums, "%s: rows sum to 1 (0 when nothing is visible)", name);
        }
        free(x), free(m), free(y), free(xl), free(ml), free(ref);
    }

    /* a finite mask [T,S] broadcast over [B,T,S], with a transposed x */
    {
        int64_t B = rnd(1, 4), T = rnd(2, 6), S = rnd(2, 9);
        int64_t shape[3] = {B, T, S}, ls[3], mshape[2] = {T, S}, nout = 0;
        int64_t n = B * T * S;
        cfg c = {.kind = K_SOFTMAX, .has_mask = 1, .transpose = 1};
        leaf_shape(3, shape, 1, ls);
        float *x = randn(n, 0.0f, 1.0f), *m = randn(T * S, 0.0f, 2.0f);
        col_gc_input in[2] = {input(3, ls, x, true), input(2, mshape, m, true)};
        float *y = run_forward("masked softmax", &c, 2, in, &nout);
        double *xl = logical_x(x, 3, shape, 1), *ml = malloc(sizeof(double) * (size_t)n);
        double *ref = malloc(sizeof(double) * (size_t)n);
        for (int64_t f = 0; f < n; f++)
            ml[f] = bcast_get(m, 2, mshape, 3, shape, f);
        ref_softmax(xl, ml, B * T, T, S, 0, ref);
        if (y)
            check_close("softmax with a [T,S] mask broadcast over batches, transposed x", y, ref, n, 1e-6, 1e-5);
        free(x), free(m), free(y), free(xl), free(ml), free(ref);
    }

    /* large logits: no overflow (max subtraction) */
    {
        int64_t shape[2] = {3, 40};
        float *x = randn(120, 80.0f, 20.0f);
        cfg c = {.kind = K_SOFTMAX};
        check_forward("softmax of large logits (mean 80, std 20)", &c, 2, shape, x, NULL, NULL, 1e-6, 1e-5);
        free(x);
    }
}

static void test_norm_forward(void)
{
    for (int trial = 0; trial < 12; trial++) {
        int rms = trial >= 8;
        int nd = 1 + trial % 4;
        int64_t shape[4];
        rand_shape(nd, 1, 7, shape);
        int64_t C = shape[nd - 1] = rnd(2, 300);
        cfg c = {.kind = rms ? K_RMSNORM : K_LAYERNORM, .has_w = rms || (trial & 1), .has_b = !rms && (trial & 2),
                 .transpose = nd >= 2 && trial % 3 == 0, .eps = 1e-5f};
        float *x = randn(prod(nd, shape), 3.0f, 2.0f), *w = randn(C, 1.0f, 0.5f), *b = randn(C, 0.0f, 1.0f);
        char name[128];
        snprintf(name, sizeof name, "%s forward, %dD C=%lld%s%s%s", rms ? "rmsnorm" : "layernorm", nd, (long long)C,
                 c.has_w ? " +w" : "", c.has_b ? " +b" : "", c.transpose ? ", transposed input" : "");
        check_forward(name, &c, nd, shape, x, w, b, 2e-5, 2e-5);
        free(x), free(w), free(b);
    }
}

/* ---- gradient checks ---- */

static void gradcheck(const char *name, cfg *c, int n, const col_gc_input *in)
{
    col_gc_opts o = {.h = 1e-3, .rtol = 1e-2, .atol = 1e-3, .seed = col_rng_u32(&rng)};
    tl_gradcheck(&be, name, build, c, n, in, &o);
}

static void test_softmax_grad(void)
{
    /* plain softmax / log_softmax on 2-D, 3-D, 4-D, contiguous and transposed */
    for (int trial = 0; trial < 6; trial++) {
        int nd = 2 + trial % 3;
        int64_t shape[4], ls[4];
        rand_shape(nd, 1, 4, shape);
        shape[nd - 1] = rnd(2, 9);
        for (int kind = K_SOFTMAX; kind <= K_LOG_SOFTMAX; kind++) {
            cfg c = {.kind = kind, .transpose = trial >= 3};
            leaf_shape(nd, shape, c.transpose, ls);
            float *x = randn(prod(nd, shape), 0.0f, 1.5f);
            col_gc_input in = input(nd, ls, x, false);
            char name[96];
            snprintf(name, sizeof name, "%s %dD%s", kind == K_SOFTMAX ? "softmax" : "log_softmax", nd,
                     c.transpose ? " transposed" : "");
            gradcheck(name, &c, 1, &in);
            free(x);
        }
    }
    /* causal, T != S, with a differentiable broadcast mask [B,1,1,S] (finite values) */
    const int64_t ts[2][2] = {{3, 6}, {5, 3}};
    for (int k = 0; k < 2; k++) {
        int64_t B = 2, H = 2, T = ts[k][0], S = ts[k][1];
        int64_t shape[4] = {B, H, T, S}, mshape[4] = {B, 1, 1, S};
        cfg c = {.kind = K_SOFTMAX, .causal = 1, .has_mask = 1};
        float *x = randn(B * H * T * S, 0.0f, 1.0f), *m = randn(B * S, 0.0f, 1.0f);
        col_gc_input in[2] = {input(4, shape, x, false), input(4, mshape, m, false)};
        char name[96];
        snprintf(name, sizeof name, "causal softmax T=%lld S=%lld, grad to x and a [B,1,1,S] mask", (long long)T,
                 (long long)S);
        gradcheck(name, &c, 2, in);
        free(x), free(m);
    }
    /* a 0 / -inf padding mask (not differentiated), transposed x, [T,S] causal */
    {
        int64_t B = 2, T = 4, S = 4, shape[3] = {B, T, S}, ls[3], mshape[3] = {B, 1, S};
        cfg c = {.kind = K_SOFTMAX, .causal = 1, .has_mask = 1, .transpose = 1};
        leaf_shape(3, shape, 1, ls);
        float *x = randn(B * T * S, 0.0f, 1.0f), m[8] = {-INFINITY, 0, -INFINITY, -INFINITY, 0, 0, 0, -INFINITY};
        col_gc_input in[2] = {input(3, ls, x, false), input(3, mshape, m, true)};
        gradcheck("causal softmax with a -inf padding mask (fully masked rows), transposed x", &c, 2, in);
        free(x);
    }
    /* mask [S] needing a gradient, x not */
    {
        int64_t shape[3] = {3, 2, 5}, S = 5;
        cfg c = {.kind = K_SOFTMAX, .has_mask = 1};
        float *x = randn(30, 0.0f, 1.0f), *m = randn(S, 0.0f, 1.0f);
        col_gc_input in[2] = {input(3, shape, x, true), input(1, &S, m, false)};
        gradcheck("softmax, grad to a [S] mask only", &c, 2, in);
        free(x), free(m);
    }
}

static void test_norm_grad(void)
{
    /* layernorm: every (w, b) combination, 3-D and 4-D, transposed x sometimes */
    for (int combo = 0; combo < 4; combo++) {
        for (int nd = 3; nd <= 4; nd++) {
            int64_t shape[4], ls[4];
            rand_shape(nd, 1, 3, shape);
            int64_t C = shape[nd - 1] = rnd(3, 10);
            cfg c = {.kind = K_LAYERNORM, .has_w = combo & 1, .has_b = (combo >> 1) & 1, .transpose = nd == 4,
                     .eps = 1e-5f};
            leaf_shape(nd, shape, c.transpose, ls);
            float *x = randn(prod(nd, shape), 0.5f, 1.0f), *w = randn(C, 1.0f, 0.5f), *b = randn(C, 0.0f, 1.0f);
            col_gc_input in[3];
            int k = norm_inputs(&c, nd, ls, x, &C, w, b, false, in);
            char name[96];
            snprintf(name, sizeof name, "layernorm %dD%s%s%s", nd, c.has_w ? " +w" : "", c.has_b ? " +b" : "",
                     c.transpose ? " transposed" : "");
            gradcheck(name, &c, k, in);
            free(x), free(w), free(b);
        }
    }
    /* layernorm where only w / only b need a gradient (x is data) */
    for (int only = 0; only < 2; only++) {
        int64_t shape[3] = {2, 3, 6}, C = 6;
        cfg c = {.kind = K_LAYERNORM, .has_w = 1, .has_b = 1, .eps = 1e-5f};
        float *x = randn(36, 0.0f, 1.0f), *w = randn(C, 1.0f, 0.5f), *b = randn(C, 0.0f, 1.0f);
        col_gc_input in[3] = {input(3, shape, x, true), input(1, &C, w, only != 0), input(1, &C, b, only == 0)};
        gradcheck(only == 0 ? "layernorm, grad to w only" : "layernorm, grad to b only", &c, 3, in);
        free(x), free(w), free(b);
    }
    /* layernorm with a stride-0 (expanded) weight, and inside a checkpoint segment */
    {
        int64_t shape[2] = {4, 7}, one = 1;
        float *x = randn(28, 0.0f, 1.0f), w[1] = {1.3f}, *b = randn(7, 0.0f, 1.0f);
        int64_t C = 7;
        cfg c = {.kind = K_LAYERNORM, .has_w = 1, .has_b = 1, .w_expand = 1, .eps = 1e-5f};
        col_gc_input in[3] = {input(2, shape, x, false), input(1, &one, w, false), input(1, &C, b, false)};
        gradcheck("layernorm with an expanded (stride-0) weight", &c, 3, in);
        cfg ck = {.kind = K_LAYERNORM, .has_w = 1, .has_b = 1, .checkpoint = 1, .eps = 1e-5f};
        float *w2 = randn(C, 1.0f, 0.3f);
        in[1] = input(1, &C, w2, false);
        gradcheck("layernorm recomputed in a checkpoint segment", &ck, 3, in);
        free(x), free(b), free(w2);
    }
    /* rmsnorm: 2-D..4-D, transposed x; and w-only */
    for (int nd = 2; nd <= 4; nd++) {
        int64_t shape[4], ls[4];
        rand_shape(nd, 1, 3, shape);
        int64_t C = shape[nd - 1] = rnd(3, 10);
        cfg c = {.kind = K_RMSNORM, .transpose = nd >= 3, .eps = 1e-6f};
        leaf_shape(nd, shape, c.transpose, ls);
        float *x = randn(prod(nd, shape), 0.3f, 1.0f), *w = randn(C, 1.0f, 0.5f);
        col_gc_input in[2] = {input(nd, ls, x, false), input(1, &C, w, false)};
        char name[64];
        snprintf(name, sizeof name, "rmsnorm %dD%s", nd, c.transpose ? " transposed" : "");
        gradcheck(name, &c, 2, in);
        if (nd == 2) {
            in[0].no_grad = true;
            gradcheck("rmsnorm, grad to w only", &c, 2, in);
        }
        free(x), free(w);
    }
}

/* ---- dw / db do not depend on the thread count ---- */

static void test_threads(void)
{
    int64_t rows = 300, C = 131, shape[2] = {rows, C}; /* rows * C above the parallel threshold */
    for (int rms = 0; rms <= 1; rms++) {
        col_graph *g = col_graph_new();
        col_node *x = col_param(g, "x", COL_F32, 2, shape), *w = col_param(g, "w", COL_F32, 1, &C);
        col_node *b = rms ? NULL : col_param(g, "b", COL_F32, 1, &C);
        col_node *r = col_input(g, "R", COL_F32, 2, shape);
        col_node *y = rms ? col_rmsnorm(g, x, w, 1e-6f) : col_layernorm(g, x, w, b, 1e-5f);
        col_node *loss = col_sum(g, col_mul(g, y, r), 3u, 0);
        col_err err = {0};
        col_plan *plan = NULL;
        bool ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &plan, &err) == COL_OK;
        float *xd = randn(rows * C, 1.0f, 2.0f), *wd = randn(C, 1.0f, 0.5f), *bd = randn(C, 0.0f, 1.0f);
        float *rd = randn(rows * C, 0.0f, 1.0f);
        float *grads[3][3]; /* [run][x, w, b] */
        size_t sz[3] = {sizeof(float) * (size_t)(rows * C), sizeof(float) * (size_t)C, sizeof(float) * (size_t)C};
        int nthreads[3] = {1, 2, 3};
        for (int run = 0; run < 3; run++)
            for (int k = 0; k < 3; k++)
                grads[run][k] = calloc(1, sz[k]);
        for (int run = 0; run < 3 && ok; run++) {
            col_bind(x, xd, NULL), col_bind(w, wd, NULL), col_bind(r, rd, NULL);
            col_bind_grad(x, grads[run][0], NULL), col_bind_grad(w, grads[run][1], NULL);
            if (b)
                col_bind(b, bd, NULL), col_bind_grad(b, grads[run][2], NULL);
            omp_set_num_threads(nthreads[run]);
            ok = col_plan_run(plan, &be, &err) == COL_OK;
        }
        omp_set_num_threads(2);
        const char *name = rms ? "rmsnorm" : "layernorm";
        TL_OK(ok, "%s [%lld,%lld] backward runs: %s", name, (long long)rows, (long long)C, ok ? "" : err.msg);
        bool same = ok;
        for (int run = 1; run < 3; run++)
            for (int k = 0; k < (rms ? 2 : 3); k++)
                same = same && memcmp(grads[0][k], grads[run][k], sz[k]) == 0;
        TL_OK(same, "%s: dx, dw%s bitwise equal on 1, 2 and 3 threads", name, rms ? "" : ", db");
        /* dw, db against double references */
        double *xl = logical_x(xd, 2, shape, 0), *refw = calloc((size_t)C, sizeof(double));
        double *refb = calloc((size_t)C, sizeof(double));
        for (int64_t i = 0; i < rows; i++) {
            const double *xr = xl + i * C;
            double mean = 0, var = 0;
            for (int64_t c = 0; c < C && !rms; c++)
                mean += xr[c] / (double)C;
            for (int64_t c = 0; c < C; c++)
                var += (xr[c] - mean) * (xr[c] - mean) / (double)C;
            double rstd = 1.0 / sqrt(var + (rms ? 1e-6 : 1e-5));
            for (int64_t c = 0; c < C; c++) {
                refw[c] += rd[i * C + c] * (xr[c] - mean) * rstd;
                refb[c] += rd[i * C + c];
            }
        }
        if (ok) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s dw over %lld rows", name, (long long)rows);
            check_close(nm, grads[1][1], refw, C, 1e-4, 1e-4);
            if (!rms) {
                snprintf(nm, sizeof nm, "%s db over %lld rows", name, (long long)rows);
                check_close(nm, grads[1][2], refb, C, 1e-4, 1e-4);
            }
        }
        for (int run = 0; run < 3; run++)
            for (int k = 0; k < 3; k++)
                free(grads[run][k]);
        free(xd), free(wd), free(bd), free(rd), free(xl), free(refw), free(refb);
        col_plan_free(plan);
        col_graph_free(g);
    }
}

/* ---- builder errors ---- */

static void expect_fail(col_graph *g, col_node *n, col_status code, const char *op, const char *what)
{
    const char *msg = col_graph_error(g)->msg;
    TL_OK(n == NULL && col_graph_status(g) == code && strstr(msg, op) != NULL, "%s: %s", what, msg);
}

static void test_errors(void)
{
    int64_t xs[3] = {2, 3, 4}, c4 = 4, c5 = 5, ws2[2] = {1, 4}, ms_bad[3] = {3, 3, 4}, ms_big[4] = {2, 2, 3, 4};
    struct {
        const char *what, *op;
        col_status code;
        int which;
    } cases[] = {
        {"layernorm weight of the wrong size", "layernorm", COL_ESHAPE, 0},
        {"layernorm bias of the wrong size", "layernorm", COL_ESHAPE, 1},
        {"rmsnorm weight [1,4]", "rmsnorm", COL_ESHAPE, 2},
        {"rmsnorm without a weight", "rmsnorm", COL_EINVAL, 3},
        {"layernorm on an i32 input", "layernorm", COL_EDTYPE, 4},
        {"softmax on an i32 input", "softmax", COL_EDTYPE, 5},
        {"log_softmax on a bf16 input", "log_softmax", COL_EDTYPE, 6},
        {"softmax mask [3,3,4] vs input [2,3,4]", "softmax", COL_ESHAPE, 7},
        {"softmax mask with more dims than the input", "softmax", COL_ESHAPE, 8},
        {"softmax i32 mask", "softmax", COL_EDTYPE, 9},
        {"causal softmax of a 1-D input", "softmax", COL_ESHAPE, 10},
        {"layernorm with a negative eps", "layernorm", COL_EINVAL, 11},
        {"rmsnorm bf16 weight", "rmsnorm", COL_EDTYPE, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_graph *g = col_graph_new();
        col_node *x = col_input(g, "x", COL_F32, 3, xs), *n = NULL;
        switch (cases[i].which) {
        case 0: n = col_layernorm(g, x, col_input(g, "w", COL_F32, 1, &c5), NULL, 1e-5f); break;
        case 1: n = col_layernorm(g, x, col_input(g, "w", COL_F32, 1, &c4), col_input(g, "b", COL_F32, 1, &c5), 1e-5f); break;
        case 2: n = col_rmsnorm(g, x, col_input(g, "w", COL_F32, 2, ws2), 1e-6f); break;
        case 3: n = col_rmsnorm(g, x, NULL, 1e-6f); break;
        case 4: n = col_layernorm(g, col_input(g, "i", COL_I32, 3, xs), NULL, NULL, 1e-5f); break;
        case 5: n = col_softmax(g, col_input(g, "i", COL_I32, 3, xs), NULL, 0); break;
        case 6: n = col_log_softmax(g, col_input(g, "h", COL_BF16, 3, xs)); break;
        case 7: n = col_softmax(g, x, col_input(g, "m", COL_F32, 3, ms_bad), 0); break;
        case 8: n = col_softmax(g, x, col_input(g, "m", COL_F32, 4, ms_big), 0); break;
        case 9: n = col_softmax(g, x, col_input(g, "m", COL_I32, 1, &c4), 0); break;
        case 10: n = col_softmax(g, col_input(g, "v", COL_F32, 1, &c4), NULL, 1); break;
        case 11: n = col_layernorm(g, x, NULL, NULL, -1.0f); break;
        default: n = col_rmsnorm(g, x, col_input(g, "w", COL_BF16, 1, &c4), 1e-6f); break;
        }
        expect_fail(g, n, cases[i].code, cases[i].op, cases[i].what);
        col_graph_free(g);
    }
    /* and a valid broadcast mask [3,1] / [4] builds */
    col_graph *g = col_graph_new();
    int64_t m31[2] = {3, 1};
    col_node *x = col_input(g, "x", COL_F32, 3, xs);
    col_node *a = col_softmax(g, x, col_input(g, "m", COL_F32, 2, m31), 1);
    col_node *b = col_softmax(g, x, col_input(g, "m", COL_F32, 1, &c4), 0);
    TL_OK(a && b && col_graph_status(g) == COL_OK, "softmax accepts masks [3,1] and [4] for input [2,3,4]");
    col_graph_free(g);
}

int main(void)
{
    tl_cpu_backend(&be);
    col_rng_init(&rng, 20240611);
    test_softmax_forward();
    random_forward(K_LOG_SOFTMAX, 6, 8, 90, 3, 1.0f, 4.0f, 1e-5); /* log_softmax: random shapes, some transposed */
    test_norm_forward();
    test_softmax_grad();
    test_norm_grad();
    test_threads();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
