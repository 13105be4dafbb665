/* test_ops_image.c - conv2d, group norm and nearest upsampling (ops_image.c)
 * on the CPU: forward and gradients against PyTorch's (fixtures from
 * tools/refgen/make_image_ops_fixtures.py: F.conv2d after F.pad, nn.GroupNorm,
 * F.interpolate), gradient checks by finite differences (strided inputs, a
 * checkpointed conv), a conv spanning several im2col tiles against a direct
 * double-precision sum, 1 against 3 threads, and builder errors. */
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
#define FIXTURES "tests/fixtures/image_ops"
#endif

static col_backend be;
static col_rng rng;

/* PyTorch agreement: |a - r| <= TOL (1 + |r|) */
#define TOL 1e-5
/* against a double sum of many products: |a - r| <= MAG_TOL (1 + sum of the products' magnitudes) */
#define MAG_TOL 1e-6

/* ---- fixtures ---- */

/* the named tensor as f32 (malloc'd; its dims and shape in nd, shape when given); NULL if absent */
static float *fx(const col_ckpt *ck, const char *name, int *nd, int64_t *shape)
{
    const col_ckpt_tensor *t = col_ckpt_find(ck, name);
    if (!t)
        return NULL;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    float *p = malloc(sizeof(float) * (size_t)(n + 1));
    col_err err = {0};
    if (col_ckpt_read_f32(t, t->ndim, t->shape, p, &err) != COL_OK) {
        free(p);
        return NULL;
    }
    if (nd)
        *nd = t->ndim;
    if (shape)
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return p;
}

/* worst |a - r| / (1 + |r|) over n elements (INFINITY on NaN) */
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

static int64_t prod(int nd, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= s[i];
    return n;
}

/* A graph under test: parameters bound to fixture data with zeroed gradient buffers. */
#define MAXP 4
typedef struct {
    col_graph *g;
    col_node *p[MAXP];
    float *grad[MAXP];
    int np;
} fgraph;

static col_node *fparam(fgraph *f, const char *name, float *data, int nd, const int64_t *shape)
{
    col_node *n = col_param(f->g, name, COL_F32, nd, shape);
    if (!n)
        return NULL;
    f->grad[f->np] = calloc((size_t)prod(nd, shape) + 1, sizeof(float));
    col_bind(n, data, NULL);
    col_bind_grad(n, f->grad[f->np], NULL);
    f->p[f->np++] = n;
    return n;
}

/* loss = sum(y * dy), backward, run; false (with a failed line) on an error */
static bool run_with_grad(fgraph *f, col_node *y, float *dy, col_plan **plan, const char *what)
{
    col_err err = {0};
    col_node *d = y ? col_input(f->g, "dy", COL_F32, y->t.ndim, y->t.shape) : NULL;
    if (d)
        col_bind(d, dy, NULL);
    col_node *loss = col_sum(f->g, col_mul(f->g, y, d), (1u << (y ? y->t.ndim : 0)) - 1, 0);
    if (y)
        col_mark_output(y);
    col_status st = col_graph_status(f->g) == COL_OK ? col_graph_backward(f->g, loss, &err) : col_graph_status(f->g);
    if (st == COL_OK)
        st = col_plan_create(f->g, plan, &err);
    if (st == COL_OK)
        st = col_plan_run(*plan, &be, &err);
    if (st != COL_OK)
        TL_OK(false, "%s: %s", what, col_graph_status(f->g) != COL_OK ? col_graph_error(f->g)->msg : err.msg);
    return st == COL_OK;
}

static void fgraph_free(fgraph *f, col_plan *plan)
{
    col_plan_free(plan);
    col_graph_free(f->g);
    for (int i = 0; i < f->np; i++)
        free(f->grad[i]);
}

/* ---- conv2d against PyTorch ---- */

static void test_conv_fixture(const col_ckpt *ck, int k)
{
    char nm[32], what[160];
    int64_t sx[4], sw[4], sb[1], sy[4];
    float cfgv[7];
#define FX(var, field, shape) (snprintf(nm, sizeof nm, "c%d." field, k), var = fx(ck, nm, NULL, shape))
    float *cfg, *x, *w, *b = NULL, *y, *dy, *dx, *dw, *db = NULL;
    FX(cfg, "cfg", NULL);
    if (!cfg) {
        TL_OK(false, "conv case %d: missing in the fixture", k);
        return;
    }
    memcpy(cfgv, cfg, sizeof cfgv);
    free(cfg);
    FX(x, "x", sx), FX(w, "w", sw), FX(y, "y", sy), FX(dy, "dy", NULL), FX(dx, "dx", NULL), FX(dw, "dw", NULL);
    if (cfgv[6] != 0.0f)
        FX(b, "b", sb), FX(db, "db", NULL);
#undef FX
    col_conv2d_cfg c = {(int)cfgv[0], (int)cfgv[1], (int)cfgv[2], (int)cfgv[3], (int)cfgv[4], (int)cfgv[5]};
    snprintf(what, sizeof what, "conv2d case %d: x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] stride (%d,%d) pad (%d,%d,%d,%d)%s",
             k, (long long)sx[0], (long long)sx[1], (long long)sx[2], (long long)sx[3], (long long)sw[0],
             (long long)sw[1], (long long)sw[2], (long long)sw[3], c.stride_h, c.stride_w, c.pad_top, c.pad_bottom,
             c.pad_left, c.pad_right, b ? " bias" : "");
    fgraph f = {.g = col_graph_new()};
    col_node *xn = fparam(&f, "x", x, 4, sx), *wn = fparam(&f, "w", w, 4, sw), *bn = b ? fparam(&f, "b", b, 1, sb) : NULL;
    col_node *yn = col_conv2d_ex(f.g, xn, wn, bn, &c);
    bool shape_ok = yn && memcmp(yn->t.shape, sy, sizeof sy) == 0;
    col_plan *plan = NULL;
    if (run_with_grad(&f, yn, dy, &plan, what)) {
        double ey = shape_ok ? worst(col_data(yn), y, prod(4, sy)) : INFINITY;
        double ex = worst(f.grad[0], dx, prod(4, sx)), ew = worst(f.grad[1], dw, prod(4, sw));
        double eb = b ? worst(f.grad[2], db, sb[0]) : 0.0;
        TL_OK(ey <= TOL, "%s: y as F.conv2d (worst %.1e)", what, ey);
        TL_OK(ex <= TOL && ew <= TOL && eb <= TOL, "%s: dx, dw, db as torch (worst %.1e, %.1e, %.1e)", what, ex, ew, eb);
    }
    fgraph_free(&f, plan);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
}

/* ---- group norm and upsampling against PyTorch ---- */

static void test_group_norm_fixture(const col_ckpt *ck, int k)
{
    char nm[32], what[128];
    int nd = 0;
    int64_t sx[COL_MAX_DIMS], C;
#define FX(var, field) (snprintf(nm, sizeof nm, "g%d." field, k), var = fx(ck, nm, NULL, NULL))
    float *cfg, *epsv, *w = NULL, *b = NULL, *y, *dy, *dx, *dw = NULL, *db = NULL, *x;
    snprintf(nm, sizeof nm, "g%d.x", k);
    x = fx(ck, nm, &nd, sx);
    FX(cfg, "cfg"), FX(epsv, "eps"), FX(y, "y"), FX(dy, "dy"), FX(dx, "dx");
    if (!x || !cfg || !epsv) {
        TL_OK(false, "group norm case %d: missing in the fixture", k);
        return;
    }
    int groups = (int)cfg[0];
    bool affine = cfg[1] != 0.0f;
    if (affine)
        FX(w, "w"), FX(b, "b"), FX(dw, "dw"), FX(db, "db");
#undef FX
    C = sx[1];
    snprintf(what, sizeof what, "group_norm case %d: %d-D x, C=%lld, %d groups, eps %g%s", k, nd, (long long)C, groups,
             (double)epsv[0], affine ? ", affine" : "");
    fgraph f = {.g = col_graph_new()};
    col_node *xn = fparam(&f, "x", x, nd, sx);
    col_node *wn = affine ? fparam(&f, "w", w, 1, &C) : NULL, *bn = affine ? fparam(&f, "b", b, 1, &C) : NULL;
    col_node *yn = col_group_norm(f.g, xn, wn, bn, groups, epsv[0]);
    col_plan *plan = NULL;
    if (run_with_grad(&f, yn, dy, &plan, what)) {
        int64_t n = prod(nd, sx);
        double ey = worst(col_data(yn), y, n), ex = worst(f.grad[0], dx, n);
        double ew = affine ? worst(f.grad[1], dw, C) : 0.0, eb = affine ? worst(f.grad[2], db, C) : 0.0;
        TL_OK(ey <= TOL, "%s: y as nn.GroupNorm (worst %.1e)", what, ey);
        TL_OK(ex <= TOL && ew <= TOL && eb <= TOL, "%s: dx, dw, db as torch (worst %.1e, %.1e, %.1e)", what, ex, ew, eb);
    }
    fgraph_free(&f, plan);
    free(cfg), free(epsv), free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
}

static void test_upsample_fixture(const col_ckpt *ck, int k)
{
    char nm[32], what[96];
    int64_t sx[4], sy[4];
    float *v[5];
    const char *fields[5] = {"cfg", "x", "y", "dy", "dx"};
    for (int i = 0; i < 5; i++) {
        snprintf(nm, sizeof nm, "u%d.%s", k, fields[i]);
        v[i] = fx(ck, nm, NULL, i == 1 ? sx : i == 2 ? sy : NULL);
    }
    if (!v[0] || !v[1] || !v[2] || !v[3] || !v[4]) {
        TL_OK(false, "upsample case %d: missing in the fixture", k);
        for (int i = 0; i < 5; i++)
            free(v[i]);
        return;
    }
    int scale = (int)v[0][0];
    snprintf(what, sizeof what, "upsample_nearest case %d: [%lld,%lld,%lld,%lld] x%d", k, (long long)sx[0],
             (long long)sx[1], (long long)sx[2], (long long)sx[3], scale);
    fgraph f = {.g = col_graph_new()};
    col_node *yn = col_upsample_nearest(f.g, fparam(&f, "x", v[1], 4, sx), scale);
    bool shape_ok = yn && memcmp(yn->t.shape, sy, sizeof sy) == 0;
    col_plan *plan = NULL;
    if (run_with_grad(&f, yn, v[3], &plan, what)) {
        double ey = shape_ok ? worst(col_data(yn), v[2], prod(4, sy)) : INFINITY, ex = worst(f.grad[0], v[4], prod(4, sx));
        TL_OK(ey == 0.0, "%s: y equals F.interpolate(nearest)", what);
        TL_OK(ex <= TOL, "%s: dx as torch (worst %.1e)", what, ex);
    }
    fgraph_free(&f, plan);
    for (int i = 0; i < 5; i++)
        free(v[i]);
}

static void test_fixtures(void)
{
    col_ckpt *ck = NULL, *cn = NULL;
    col_err err = {0};
    if (col_ckpt_open(FIXTURES "/conv.safetensors", &ck, &err) != COL_OK ||
        col_ckpt_open(FIXTURES "/norm_upsample.safetensors", &cn, &err) != COL_OK) {
        TL_OK(false, "fixtures: %s", err.msg);
        col_ckpt_close(ck);
        return;
    }
    int nconv = 0, nnorm = 0, nup = 0;
    char nm[32];
    for (;; nconv++) {
        snprintf(nm, sizeof nm, "c%d.cfg", nconv);
        if (!col_ckpt_find(ck, nm))
            break;
        test_conv_fixture(ck, nconv);
    }
    for (;; nnorm++) {
        snprintf(nm, sizeof nm, "g%d.cfg", nnorm);
        if (!col_ckpt_find(cn, nm))
            break;
        test_group_norm_fixture(cn, nnorm);
    }
    for (;; nup++) {
        snprintf(nm, sizeof nm, "u%d.cfg", nup);
        if (!col_ckpt_find(cn, nm))
            break;
        test_upsample_fixture(cn, nup);
    }
    TL_OK(nconv >= 8 && nnorm >= 5 && nup >= 2, "fixtures: %d conv, %d group norm, %d upsample cases", nconv, nnorm, nup);
    col_ckpt_close(ck);
    col_ckpt_close(cn);
}

/* ---- gradient checks ---- */

typedef struct {
    col_conv2d_cfg cfg;
    bool bias, transposed, checkpoint;
} conv_gc;

static col_node *build_conv(col_graph *g, col_node **leaves, void *user)
{
    const conv_gc *c = user;
    col_node *x = leaves[0];
    if (c->transposed) /* the leaf holds x with H and W swapped: a strided input */
        x = col_transpose(g, x, 2, 3);
    if (c->checkpoint)
        col_checkpoint_begin(g);
    col_node *y = col_conv2d_ex(g, x, leaves[1], c->bias ? leaves[2] : NULL, &c->cfg);
    if (c->checkpoint) {
        y = col_silu(g, y);
        col_checkpoint_end(g);
    }
    return y;
}

static float *randn(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n + 1));
    col_fill_normal(p, n, col_rng_u32(&rng), 1.0f);
    return p;
}

static col_gc_input gc_in(int nd, const int64_t *shape, const float *data)
{
    col_gc_input in = {.dtype = COL_F32, .ndim = nd, .data = data};
    memcpy(in.shape, shape, sizeof(int64_t) * (size_t)nd);
    return in;
}

static void gradcheck_conv(int64_t B, int64_t Cin, int64_t H, int64_t W, int64_t Cout, int64_t kh, int64_t kw,
                           conv_gc c)
{
    int64_t sx[4] = {B, Cin, c.transposed ? W : H, c.transposed ? H : W}, sw[4] = {Cout, Cin, kh, kw};
    float *x = randn(prod(4, sx)), *w = randn(prod(4, sw)), *b = randn(Cout);
    col_gc_input in[3] = {gc_in(4, sx, x), gc_in(4, sw, w), gc_in(1, &Cout, b)};
    char name[200];
    snprintf(name, sizeof name, "conv2d x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] stride (%d,%d) pad (%d,%d,%d,%d)%s%s%s",
             (long long)B, (long long)Cin, (long long)H, (long long)W, (long long)Cout, (long long)Cin, (long long)kh,
             (long long)kw, c.cfg.stride_h, c.cfg.stride_w, c.cfg.pad_top, c.cfg.pad_bottom, c.cfg.pad_left,
             c.cfg.pad_right, c.bias ? " bias" : "", c.transposed ? ", strided x" : "",
             c.checkpoint ? ", checkpointed (silu after)" : "");
    col_gc_opts o = {.seed = col_rng_u32(&rng), .max_points = 48};
    tl_gradcheck(&be, name, build_conv, &c, c.bias ? 3 : 2, in, &o);
    free(x), free(w), free(b);
}

typedef struct {
    int groups, affine, transposed;
} gn_gc;

static col_node *build_gn(col_graph *g, col_node **leaves, void *user)
{
    const gn_gc *c = user;
    col_node *x = c->transposed ? col_transpose(g, leaves[0], 2, 3) : leaves[0];
    return col_group_norm(g, x, c->affine ? leaves[1] : NULL, c->affine ? leaves[2] : NULL, c->groups, 1e-5f);
}

static col_node *build_up(col_graph *g, col_node **leaves, void *user)
{
    return col_upsample_nearest(g, col_transpose(g, leaves[0], 2, 3), *(const int *)user);
}

static void test_gradchecks(void)
{
    gradcheck_conv(2, 3, 5, 6, 4, 3, 3, (conv_gc){.cfg = {1, 1, 1, 1, 1, 1}, .bias = true});
    gradcheck_conv(2, 3, 7, 6, 5, 3, 3, (conv_gc){.cfg = {2, 2, 0, 1, 0, 1}, .bias = true});
    gradcheck_conv(1, 4, 6, 7, 3, 2, 3, (conv_gc){.cfg = {1, 2, 2, 0, 1, 1}, .transposed = true});
    gradcheck_conv(2, 5, 4, 3, 6, 1, 1, (conv_gc){.cfg = {1, 1, 0, 0, 0, 0}, .bias = true, .transposed = true});
    gradcheck_conv(1, 3, 6, 6, 2, 3, 3, (conv_gc){.cfg = {1, 1, 1, 1, 1, 1}, .bias = true, .checkpoint = true});

    int64_t sx[4] = {2, 6, 4, 3}, C = 6;
    float *x = randn(prod(4, sx)), *w = randn(C), *b = randn(C);
    col_gc_input in[3] = {gc_in(4, sx, x), gc_in(1, &C, w), gc_in(1, &C, b)};
    gn_gc g1 = {3, 1, 1}, g2 = {2, 0, 0};
    col_gc_opts o = {.seed = col_rng_u32(&rng), .max_points = 48};
    tl_gradcheck(&be, "group_norm [2,6,3,4] transposed, 3 groups, affine", build_gn, &g1, 3, in, &o);
    tl_gradcheck(&be, "group_norm [2,6,4,3], 2 groups", build_gn, &g2, 1, in, &o);
    int scale = 2;
    tl_gradcheck(&be, "upsample_nearest [2,6,3,4] transposed x2", build_up, &scale, 1, in, &o);
    free(x), free(w), free(b);
}

/* ---- several im2col tiles: against a direct sum in double ---- */

typedef struct {
    int64_t B, Cin, H, W, Cout, kh, kw, Ho, Wo;
    col_conv2d_cfg c;
} geo;

/* y[b, co, oy, ox] in double; *mag = the sum of the products' magnitudes */
static double ref_at(const geo *q, const float *x, const float *w, int64_t b, int64_t co, int64_t oy, int64_t ox,
                     double *mag)
{
    double s = 0.0, m = 0.0;
    for (int64_t ci = 0; ci < q->Cin; ci++)
        for (int64_t ky = 0; ky < q->kh; ky++) {
            int64_t iy = oy * q->c.stride_h - q->c.pad_top + ky;
            if (iy < 0 || iy >= q->H)
                continue;
            for (int64_t kx = 0; kx < q->kw; kx++) {
                int64_t ix = ox * q->c.stride_w - q->c.pad_left + kx;
                if (ix >= 0 && ix < q->W) {
                    double t = (double)x[((b * q->Cin + ci) * q->H + iy) * q->W + ix] *
                               (double)w[((co * q->Cin + ci) * q->kh + ky) * q->kw + kx];
                    s += t;
                    m += fabs(t);
                }
            }
        }
    *mag = m;
    return s;
}

/* y at every pixel, and the three gradients (dx, dw at sampled positions) against direct sums */
static void test_tiles(void)
{
    geo q = {.B = 2, .Cin = 64, .H = 97, .W = 95, .Cout = 5, .kh = 3, .kw = 3, .c = {1, 1, 1, 0, 2, 1}};
    q.Ho = q.H + 1 + 0 - 3 + 1, q.Wo = q.W + 2 + 1 - 3 + 1;
    int64_t sx[4] = {q.B, q.Cin, q.H, q.W}, sw[4] = {q.Cout, q.Cin, q.kh, q.kw}, sy[4] = {q.B, q.Cout, q.Ho, q.Wo};
    float *x = randn(prod(4, sx)), *w = randn(prod(4, sw)), *dy = randn(prod(4, sy));
    fgraph f = {.g = col_graph_new()};
    col_node *xn = fparam(&f, "x", x, 4, sx), *wn = fparam(&f, "w", w, 4, sw); /* grad[0], grad[1] */
    col_node *yn = col_conv2d_ex(f.g, xn, wn, NULL, &q.c);
    col_conv2d_geom geom = yn ? col_conv2d_geom_of(yn) : (col_conv2d_geom){0};
    int64_t tile = col_conv2d_tile(&geom);
    col_plan *plan = NULL;
    if (run_with_grad(&f, yn, dy, &plan, "conv2d over several tiles")) {
        const float *y = col_data(yn);
        double ey = 0.0;
        for (int64_t b = 0; b < q.B; b++)
            for (int64_t co = 0; co < q.Cout; co++)
                for (int64_t p = 0; p < q.Ho * q.Wo; p++) {
                    double mag, r = ref_at(&q, x, w, b, co, p / q.Wo, p % q.Wo, &mag);
                    double e = fabs(y[(b * q.Cout + co) * q.Ho * q.Wo + p] - r) / (1.0 + mag);
                    ey = e > ey ? e : ey;
                }
        /* dx[b,ci,iy,ix] = sum over co, taps that read it of dy * w; dw[co,ci,ky,kx] = sum of dy * x */
        double ex = 0.0, ew = 0.0;
        for (int s = 0; s < 200; s++) {
            int64_t b = (int64_t)col_rng_below(&rng, (uint64_t)q.B), ci = (int64_t)col_rng_below(&rng, (uint64_t)q.Cin);
            int64_t iy = (int64_t)col_rng_below(&rng, (uint64_t)q.H), ix = (int64_t)col_rng_below(&rng, (uint64_t)q.W);
            double r = 0.0, mag = 0.0;
            for (int64_t co = 0; co < q.Cout; co++)
                for (int64_t ky = 0; ky < q.kh; ky++)
                    for (int64_t kx = 0; kx < q.kw; kx++) {
                        int64_t oy = iy + q.c.pad_top - ky, ox = ix + q.c.pad_left - kx; /* stride 1 */
                        if (oy >= 0 && oy < q.Ho && ox >= 0 && ox < q.Wo) {
                            double t = (double)dy[((b * q.Cout + co) * q.Ho + oy) * q.Wo + ox] *
                                       (double)w[((co * q.Cin + ci) * q.kh + ky) * q.kw + kx];
                            r += t;
                            mag += fabs(t);
                        }
                    }
            double e = fabs(f.grad[0][((b * q.Cin + ci) * q.H + iy) * q.W + ix] - r) / (1.0 + mag);
            ex = e > ex ? e : ex;
        }
        for (int s = 0; s < 40; s++) {
            int64_t k = (int64_t)col_rng_below(&rng, (uint64_t)prod(4, sw));
            int64_t kx = k % q.kw, ky = (k / q.kw) % q.kh, ci = (k / (q.kw * q.kh)) % q.Cin, co = k / (q.kw * q.kh * q.Cin);
            double r = 0.0, mag = 0.0;
            for (int64_t b = 0; b < q.B; b++)
                for (int64_t oy = 0; oy < q.Ho; oy++)
                    for (int64_t ox = 0; ox < q.Wo; ox++) {
                        int64_t iy = oy - q.c.pad_top + ky, ix = ox - q.c.pad_left + kx;
                        if (iy >= 0 && iy < q.H && ix >= 0 && ix < q.W) {
                            double t = (double)dy[((b * q.Cout + co) * q.Ho + oy) * q.Wo + ox] *
                                       (double)x[((b * q.Cin + ci) * q.H + iy) * q.W + ix];
                            r += t;
                            mag += fabs(t);
                        }
                    }
            double e = fabs(f.grad[1][k] - r) / (1.0 + mag);
            ew = e > ew ? e : ew;
        }
        TL_OK(tile > 0 && tile < geom.N && geom.N % tile != 0 && tile % q.Wo != 0,
              "conv2d [2,64,97,95] 3x3: %lld pixels in im2col tiles of %lld columns (not whole rows)",
              (long long)geom.N, (long long)tile);
        /* f32 sums of 45 to 18000 products: errors relative to the sum of the products' magnitudes */
        TL_OK(ey <= MAG_TOL, "conv2d over several tiles: y as a direct double sum (worst %.1e of the magnitudes)", ey);
        TL_OK(ex <= MAG_TOL && ew <= MAG_TOL,
              "conv2d over several tiles: dx, dw as direct double sums (worst %.1e, %.1e of the magnitudes)", ex, ew);
    }
    fgraph_free(&f, plan);
    free(x), free(w), free(dy);
}

/* ---- 1 and 3 threads: the parallel gather / scatter partitions ---- */

static void test_threads(void)
{
    int64_t sx[4] = {2, 24, 33, 31}, sw[4] = {16, 24, 3, 3}, sb[1] = {16}, sy[4] = {2, 16, 17, 16};
    float *x = randn(prod(4, sx)), *w = randn(prod(4, sw)), *b = randn(16), *dy = randn(prod(4, sy));
    float *out[2][4];
    col_conv2d_cfg c = {2, 2, 1, 1, 1, 1};
    int threads[2] = {1, 3};
    bool ran = true;
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(threads[t]);
        fgraph f = {.g = col_graph_new()};
        col_node *xn = fparam(&f, "x", x, 4, sx), *wn = fparam(&f, "w", w, 4, sw), *bn = fparam(&f, "b", b, 1, sb);
        col_node *yn = col_conv2d_ex(f.g, xn, wn, bn, &c);
        col_plan *plan = NULL;
        ran = run_with_grad(&f, yn, dy, &plan, "conv2d threads") && ran;
        int64_t n[4] = {prod(4, sy), prod(4, sx), prod(4, sw), 16};
        for (int k = 0; k < 4; k++) {
            out[t][k] = calloc((size_t)n[k], sizeof(float));
            if (ran)
                memcpy(out[t][k], k == 0 ? col_data(yn) : f.grad[k - 1], sizeof(float) * (size_t)n[k]);
        }
        fgraph_free(&f, plan);
    }
    omp_set_num_threads(omp_get_num_procs());
    int64_t n[4] = {prod(4, sy), prod(4, sx), prod(4, sw), 16};
    double err = ran ? 0.0 : INFINITY;
    for (int k = 0; k < 4; k++) {
        double e = worst(out[1][k], out[0][k], n[k]);
        err = e > err ? e : err;
        free(out[0][k]), free(out[1][k]);
    }
    /* OpenBLAS's sgemm blocks differently on 3 threads (rounding differences of a few 1e-6); a wrong
     * partition of the gather or scatter would be O(1) */
    TL_OK(err <= 1e-4, "conv2d: y, dx, dw, db on 3 threads as on 1 (worst %.1e)", err);
    free(x), free(w), free(b), free(dy);
}

/* ---- upsampling of bf16: views and a copy, the same values as the f32 op ---- */

static void test_upsample_bf16(void)
{
    int64_t sx[4] = {2, 3, 5, 4};
    float *x = randn(prod(4, sx));
    col_graph *g = col_graph_new();
    col_node *xn = col_input(g, "x", COL_F32, 4, sx);
    col_bind(xn, x, NULL);
    col_node *xb = col_cast(g, xn, COL_BF16);
    col_node *yb = col_upsample_nearest(g, xb, 3), *y16 = col_cast(g, yb, COL_F32);
    col_node *y32 = col_upsample_nearest(g, col_cast(g, xb, COL_F32), 3);
    col_mark_output(y16);
    col_mark_output(y32);
    col_plan *p = NULL;
    col_err err = {0};
    bool ran = col_graph_status(g) == COL_OK && col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, &be, &err) == COL_OK;
    bool same = ran && memcmp(col_data(y16), col_data(y32), sizeof(float) * (size_t)prod(4, y32->t.shape)) == 0;
    TL_OK(same && yb->t.dtype == COL_BF16 && yb->op != COL_OP_UPSAMPLE_NEAREST && y32->op == COL_OP_UPSAMPLE_NEAREST,
          "upsample_nearest x3 of bf16 (views and a copy) equals the f32 op's result%s%s", ran ? "" : ": ",
          ran ? "" : err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(x);
}

/* ---- builder errors ---- */

static void expect_error(col_graph *g, col_node *n, col_status code, const char *op, const char *what)
{
    const char *msg = col_graph_error(g)->msg;
    TL_OK(n == NULL && col_graph_status(g) == code && strstr(msg, op) != NULL, "%s: error \"%s\"", what, msg);
    col_graph_free(g);
}

static void test_errors(void)
{
    int64_t sx[4] = {1, 3, 5, 5}, sw[4] = {4, 3, 3, 3}, sw2[4] = {4, 2, 3, 3}, sb[1] = {5}, s3[3] = {1, 3, 5};
    col_conv2d_cfg c = {1, 1, 0, 0, 0, 0};
    col_graph *g = col_graph_new();
    expect_error(g, col_conv2d_ex(g, col_input(g, "x", COL_BF16, 4, sx), col_param(g, "w", COL_F32, 4, sw), NULL, &c),
                 COL_EDTYPE, "conv2d", "conv2d of a bf16 input");
    g = col_graph_new();
    expect_error(g, col_conv2d_ex(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 4, sw2), NULL, &c),
                 COL_ESHAPE, "conv2d", "conv2d with 2 weight channels for 3");
    g = col_graph_new();
    expect_error(g, col_conv2d_ex(g, col_input(g, "x", COL_F32, 3, s3), col_param(g, "w", COL_F32, 4, sw), NULL, &c),
                 COL_ESHAPE, "conv2d", "conv2d of a 3-D input");
    g = col_graph_new();
    expect_error(g, col_conv2d_ex(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 4, sw),
                                  col_param(g, "b", COL_F32, 1, sb), &c),
                 COL_ESHAPE, "conv2d", "conv2d with a bias of 5 for 4 channels");
    g = col_graph_new();
    expect_error(g, col_conv2d(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 4, sw), NULL, 0, 1),
                 COL_EINVAL, "conv2d", "conv2d with stride 0");
    g = col_graph_new();
    expect_error(g, col_conv2d(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 4, sw), NULL, 1, -1),
                 COL_EINVAL, "conv2d", "conv2d with padding -1");
    g = col_graph_new();
    int64_t big[4] = {4, 3, 7, 7};
    expect_error(g, col_conv2d(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 4, big), NULL, 1, 0),
                 COL_ESHAPE, "conv2d", "conv2d with a 7x7 kernel on a 5x5 image");
    g = col_graph_new();
    expect_error(g, col_conv2d_ex(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 4, sw), NULL, NULL),
                 COL_EINVAL, "conv2d", "conv2d without a configuration");
    g = col_graph_new();
    expect_error(g, col_group_norm(g, col_input(g, "x", COL_F32, 4, sx), NULL, NULL, 2, 1e-5f), COL_EINVAL,
                 "group_norm", "group_norm of 3 channels in 2 groups");
    g = col_graph_new();
    expect_error(g, col_group_norm(g, col_input(g, "x", COL_F32, 4, sx), col_param(g, "w", COL_F32, 1, sb), NULL, 3, 1e-5f),
                 COL_ESHAPE, "group_norm", "group_norm with a weight of 5 for 3 channels");
    g = col_graph_new();
    expect_error(g, col_group_norm(g, col_input(g, "x", COL_BF16, 4, sx), NULL, NULL, 3, 1e-5f), COL_EDTYPE,
                 "group_norm", "group_norm of a bf16 input");
    g = col_graph_new();
    expect_error(g, col_upsample_nearest(g, col_input(g, "x", COL_F32, 3, s3), 2), COL_ESHAPE, "upsample_nearest",
                 "upsample of a 3-D input");
    g = col_graph_new();
    expect_error(g, col_upsample_nearest(g, col_input(g, "x", COL_F32, 4, sx), 0), COL_EINVAL, "upsample_nearest",
                 "upsample by 0");
}

int main(void)
{
    tl_cpu_backend(&be);
    col_rng_init(&rng, 20250115);
    test_fixtures();
    test_gradchecks();
    test_tiles();
    test_threads();
    test_upsample_bf16();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
