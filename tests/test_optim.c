/* test_optim.c - optimizers, clipping and LR schedules against the rules
 * written out step by step in double precision. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "optim.h"
#include "rng.h"
#include "testlib.h"

#define MAXT 3
#define MAXN 4096
#define NSTEPS 5

/* ---- references in double, one tensor, one step ---- */

/* torch.optim.SGD, dampening 0 */
static void ref_sgd(double *w, double *buf, const float *g, int64_t n, double lr, double wd, double mu, bool nesterov)
{
    for (int64_t i = 0; i < n; i++) {
        double d = g[i] + wd * w[i];
        if (mu != 0) {
            buf[i] = mu * buf[i] + d;
            d = nesterov ? d + mu * buf[i] : buf[i];
        }
        w[i] -= lr * d;
    }
}

/* torch.optim.AdamW */
static void ref_adamw(double *w, double *m, double *v, const float *g, int64_t n, double lr, double b1, double b2,
                      double eps, double wd, int64_t t)
{
    for (int64_t i = 0; i < n; i++) {
        w[i] -= lr * wd * w[i];
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        double mhat = m[i] / (1 - pow(b1, (double)t)), vhat = v[i] / (1 - pow(b2, (double)t));
        w[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

/* LAMB; returns the trust ratio used; u (n doubles) receives the update direction */
static double ref_lamb(double *w, double *m, double *v, const float *g, int64_t n, double lr, double b1, double b2,
                       double eps, double wd, int64_t t, double *u)
{
    double r1 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        double mhat = m[i] / (1 - pow(b1, (double)t)), vhat = v[i] / (1 - pow(b2, (double)t));
        u[i] = mhat / (sqrt(vhat) + eps) + wd * w[i];
        r1 += w[i] * w[i];
        r2 += u[i] * u[i];
    }
    r1 = sqrt(r1), r2 = sqrt(r2);
    double trust = r1 > 0 && r2 > 0 ? r1 / r2 : 1.0;
    for (int64_t i = 0; i < n; i++)
        w[i] -= lr * trust * u[i];
    return trust;
}

/* LARS; returns the local lr factor */
static double ref_lars(double *w, double *buf, const float *g, int64_t n, double lr, double mu, double wd, double eta)
{
    double nw = 0, ng = 0;
    for (int64_t i = 0; i < n; i++)
        nw += w[i] * w[i], ng += (double)g[i] * g[i];
    nw = sqrt(nw), ng = sqrt(ng);
    double local = nw > 0 && ng > 0 ? eta * nw / (ng + wd * nw) : 1.0;
    for (int64_t i = 0; i < n; i++) {
        buf[i] = mu * buf[i] + lr * local * (g[i] + wd * w[i]);
        w[i] -= buf[i];
    }
    return local;
}

/* ---- a run of NSTEPS steps on up to MAXT tensors, optimizer vs reference ---- */

typedef struct {
    int nt;
    int64_t n[MAXT];
    float scale[MAXT];  /* std of the initial weights (0: all-zero weights) */
    float gscale[MAXT]; /* std of the gradients (0: zero gradients) */
    bool decay[MAXT];
} setup;

typedef struct {
    float w[MAXT][MAXN], g[MAXT][MAXN], m[MAXT][MAXN], v[MAXT][MAXN];
    double rw[MAXT][MAXN], rm[MAXT][MAXN], rv[MAXT][MAXN], u[MAXN];
    double factor[NSTEPS][MAXT]; /* reference trust ratio / local lr per step */
    double implied[MAXT];        /* step 1: ||w0 - w1|| / (lr * ||reference direction||) */
} run_state;

static run_state S;

static double lr_of(float lr, int step) { return lr * (1.0f + 0.25f * (float)step); } /* lr varies per step */

static float lr_at_step(float lr, int step) { return (float)lr_of(lr, step); }

/* max |got - ref| / max(|ref|, 0.1 max|ref|): relative per element, with a
 * floor at a tenth of the array's scale for elements near zero, where the
 * f32 rounding of the O(max) terms that cancelled dominates */
static double rel_err(const float *got, const double *ref, int64_t n)
{
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(got[i] - ref[i]) / fmax(fabs(ref[i]), fmax(0.1 * scale, 1e-30)));
    return worst;
}

/* Runs NSTEPS steps of c and of the reference; returns the max relative
 * error (rel_err) of w, m, v against the reference. */
static double run_case(const col_opt_config *c, const setup *s)
{
    memset(&S, 0, sizeof S);
    col_opt_tensor ts[MAXT];
    int slots = col_opt_state_slots(c->kind, c->momentum);
    for (int t = 0; t < s->nt; t++) {
        col_fill_normal(S.w[t], s->n[t], 100 + t, s->scale[t]);
        for (int64_t i = 0; i < s->n[t]; i++)
            S.rw[t][i] = S.w[t][i];
        ts[t] = (col_opt_tensor){S.w[t], S.g[t], slots >= 1 ? S.m[t] : NULL, slots >= 2 ? S.v[t] : NULL, s->n[t],
                                 s->decay[t]};
    }
    for (int step = 1; step <= NSTEPS; step++) {
        float lr = lr_at_step(c->lr, step);
        double norm_dir[MAXT] = {0};
        for (int t = 0; t < s->nt; t++) {
            col_fill_normal(S.g[t], s->n[t], 1000 * step + t, s->gscale[t]);
            double wd = s->decay[t] ? c->weight_decay : 0.0;
            int64_t n = s->n[t];
            double *w = S.rw[t], *m = S.rm[t], *v = S.rv[t];
            switch (c->kind) {
            case COL_OPT_SGD: ref_sgd(w, m, S.g[t], n, lr, wd, c->momentum, c->nesterov); break;
            case COL_OPT_ADAMW: ref_adamw(w, m, v, S.g[t], n, lr, c->beta1, c->beta2, c->eps, wd, step); break;
            case COL_OPT_LAMB:
                S.factor[step - 1][t] = ref_lamb(w, m, v, S.g[t], n, lr, c->beta1, c->beta2, c->eps, wd, step, S.u);
                for (int64_t i = 0; i < n; i++)
                    norm_dir[t] += S.u[i] * S.u[i];
                break;
            case COL_OPT_LARS:
                for (int64_t i = 0; i < n; i++) { /* direction g + wd w on the weights before the step */
                    double d = S.g[t][i] + wd * (double)S.w[t][i];
                    norm_dir[t] += d * d;
                }
                S.factor[step - 1][t] = ref_lars(w, m, S.g[t], n, lr, c->momentum, wd, c->eta);
                break;
            }
        }
        float w0[MAXT][MAXN];
        memcpy(w0, S.w, sizeof w0);
        col_err err = {0};
        if (col_opt_step(c, lr, step, ts, s->nt, &err) != COL_OK) {
            TL_NOTE("col_opt_step failed: %s", err.msg);
            return INFINITY;
        }
        if (step == 1)
            for (int t = 0; t < s->nt; t++) {
                double d2 = 0;
                for (int64_t i = 0; i < s->n[t]; i++)
                    d2 += ((double)w0[t][i] - S.w[t][i]) * ((double)w0[t][i] - S.w[t][i]);
                S.implied[t] = sqrt(d2) / (lr * sqrt(norm_dir[t]));
            }
    }
    double worst = 0;
    for (int t = 0; t < s->nt; t++) {
        worst = fmax(worst, rel_err(S.w[t], S.rw[t], s->n[t]));
        if (slots >= 1)
            worst = fmax(worst, rel_err(S.m[t], S.rm[t], s->n[t]));
        if (slots >= 2)
            worst = fmax(worst, rel_err(S.v[t], S.rv[t], s->n[t]));
    }
    return worst;
}

static const setup three = {3, {37, 64, 9}, {0.5f, 1.5f, 0.1f}, {1.0f, 0.3f, 2.0f}, {true, true, false}};
#define TOL 2e-6

static void test_sgd(void)
{
    col_opt_config c = col_opt_defaults(COL_OPT_SGD);
    c.lr = 0.05f, c.weight_decay = 0.1f;
    double e = run_case(&c, &three);
    TL_OK(e < TOL, "sgd (no momentum, wd 0.1, one tensor exempt): max rel err %.2e", e);

    c.momentum = 0.9f;
    e = run_case(&c, &three);
    TL_OK(e < TOL, "sgd momentum 0.9: max rel err %.2e", e);
    float plain[MAXN];
    memcpy(plain, S.w[1], sizeof plain);

    c.nesterov = true;
    e = run_case(&c, &three);
    TL_OK(e < TOL, "sgd nesterov: max rel err %.2e", e);
    TL_OK(memcmp(plain, S.w[1], (size_t)three.n[1] * sizeof(float)) != 0, "nesterov changes the result");

    /* exemption: with zero gradients only weight decay moves w */
    setup z = {2, {16, 16}, {1.0f, 1.0f}, {0.0f, 0.0f}, {true, false}};
    c.momentum = 0.0f, c.nesterov = false;
    e = run_case(&c, &z);
    bool kept = true, shrunk = true;
    float w1[16];
    col_fill_normal(w1, 16, 101, 1.0f);
    for (int i = 0; i < 16; i++)
        kept &= S.w[1][i] == w1[i];
    col_fill_normal(w1, 16, 100, 1.0f);
    for (int i = 0; i < 16; i++)
        shrunk &= fabsf(S.w[0][i]) < fabsf(w1[i]);
    TL_OK(e < TOL && kept && shrunk, "sgd: decay=false tensor unchanged under zero grads, decayed one shrinks (err %.2e)",
          e);
}

static void test_adamw(void)
{
    col_opt_config c = col_opt_defaults(COL_OPT_ADAMW);
    c.lr = 0.01f, c.weight_decay = 0.05f;
    double e = run_case(&c, &three);
    TL_OK(e < TOL, "adamw (3 tensors, one exempt, 5 steps): max rel err %.2e", e);

    c.beta1 = 0.0f, c.beta2 = 0.5f, c.eps = 1e-3f;
    e = run_case(&c, &three);
    TL_OK(e < TOL, "adamw beta1 0, beta2 0.5, eps 1e-3: max rel err %.2e", e);

    /* zero gradients: the exempt tensor stays bit-identical, the other is scaled by prod(1 - lr_t wd) */
    c = col_opt_defaults(COL_OPT_ADAMW);
    c.lr = 0.01f, c.weight_decay = 0.5f;
    setup z = {2, {16, 16}, {1.0f, 1.0f}, {0.0f, 0.0f}, {true, false}};
    e = run_case(&c, &z);
    float w0[16], w1[16];
    col_fill_normal(w0, 16, 100, 1.0f);
    col_fill_normal(w1, 16, 101, 1.0f);
    double f = 1, worst = 0;
    for (int s = 1; s <= NSTEPS; s++)
        f *= 1.0 - lr_of(c.lr, s) * c.weight_decay;
    bool kept = true;
    for (int i = 0; i < 16; i++) {
        kept &= S.w[1][i] == w1[i];
        worst = fmax(worst, fabs(S.w[0][i] - w0[i] * f) / fabs(w0[i] * f));
    }
    TL_OK(e < TOL && kept && worst < TOL, "adamw: decay=false unchanged, decayed by prod(1-lr wd) (rel err %.2e)", worst);
}

static void test_lamb(void)
{
    col_opt_config c = col_opt_defaults(COL_OPT_LAMB);
    c.lr = 0.02f, c.weight_decay = 0.01f;
    double e = run_case(&c, &three);
    TL_OK(e < TOL, "lamb (3 tensors, one exempt, 5 steps): max rel err %.2e", e);

    /* two tensors of very different scales get their own trust ratios */
    setup sc = {2, {40, 24}, {100.0f, 0.01f}, {1.0f, 1.0f}, {true, true}};
    e = run_case(&c, &sc);
    double t0 = S.factor[0][0], t1 = S.factor[0][1];
    TL_OK(e < TOL, "lamb scales 100 vs 0.01: max rel err %.2e", e);
    TL_OK(fabs(S.implied[0] / t0 - 1) < 1e-4 && fabs(S.implied[1] / t1 - 1) < 1e-4,
          "lamb per-tensor trust: implied %.6g %.6g, reference %.6g %.6g", S.implied[0], S.implied[1], t0, t1);
    TL_OK(t0 / t1 > 1e3, "lamb trust ratios differ by scale: %.3g vs %.3g", t0, t1);

    /* zero weights: ||w|| = 0 -> trust 1; zero grads and no decay: ||u|| = 0 -> trust 1, no move */
    setup z = {2, {20, 20}, {0.0f, 1.0f}, {1.0f, 0.0f}, {true, false}};
    e = run_case(&c, &z);
    float w1[20];
    col_fill_normal(w1, 20, 101, 1.0f);
    TL_OK(e < TOL && fabs(S.implied[0] - 1) < 1e-5 && S.factor[0][0] == 1.0 && memcmp(w1, S.w[1], sizeof w1) == 0,
          "lamb zero-norm cases use trust 1 (implied %.6g, err %.2e)", S.implied[0], e);
}

static void test_lars(void)
{
    col_opt_config c = col_opt_defaults(COL_OPT_LARS);
    c.lr = 0.5f, c.weight_decay = 0.01f, c.eta = 0.02f;
    double e = run_case(&c, &three);
    TL_OK(e < TOL, "lars momentum 0.9 (3 tensors, one exempt, 5 steps): max rel err %.2e", e);

    setup sc = {2, {40, 24}, {100.0f, 0.01f}, {1.0f, 1.0f}, {true, true}};
    e = run_case(&c, &sc);
    double l0 = S.factor[0][0], l1 = S.factor[0][1];
    TL_OK(e < TOL, "lars scales 100 vs 0.01: max rel err %.2e", e);
    TL_OK(fabs(S.implied[0] / l0 - 1) < 1e-4 && fabs(S.implied[1] / l1 - 1) < 1e-4,
          "lars per-tensor local lr: implied %.6g %.6g, reference %.6g %.6g", S.implied[0], S.implied[1], l0, l1);
    TL_OK(l0 / l1 > 1e3, "lars local lrs differ by scale: %.3g vs %.3g", l0, l1);

    /* zero weights -> local 1 (w moves by lr g); zero grads -> local 1 (w moves by lr wd w) */
    setup z = {2, {20, 20}, {0.0f, 1.0f}, {1.0f, 0.0f}, {true, true}};
    e = run_case(&c, &z);
    TL_OK(e < TOL && S.factor[0][0] == 1.0 && S.factor[0][1] == 1.0 && fabs(S.implied[0] - 1) < 1e-5 &&
              fabs(S.implied[1] - 1) < 1e-5,
          "lars zero-norm cases use local 1 (implied %.6g %.6g, err %.2e)", S.implied[0], S.implied[1], e);

    c.momentum = 0.0f;
    e = run_case(&c, &three);
    TL_OK(e < TOL, "lars without momentum: max rel err %.2e", e);
}

/* large tensors take the parallel path; results must not depend on the thread count */
static void test_threads(void)
{
    enum { N = 200003 };
    float *w[2], *g = malloc(N * sizeof(float)), *m[2], *v[2];
    col_fill_normal(g, N, 7, 1.0f);
    const col_opt_kind kinds[] = {COL_OPT_SGD, COL_OPT_ADAMW, COL_OPT_LAMB, COL_OPT_LARS};
    for (int k = 0; k < 4; k++) {
        col_opt_config c = col_opt_defaults(kinds[k]);
        c.momentum = 0.9f;
        for (int r = 0; r < 2; r++) {
            w[r] = malloc(N * sizeof(float)), m[r] = calloc(N, sizeof(float)), v[r] = calloc(N, sizeof(float));
            col_fill_normal(w[r], N, 8, 1.0f);
#ifdef _OPENMP
            omp_set_num_threads(r == 0 ? 1 : 3);
#endif
            col_opt_tensor t = {w[r], g, m[r], v[r], N, true};
            for (int s = 1; s <= 3; s++)
                col_opt_step(&c, c.lr, s, &t, 1, NULL);
        }
        TL_OK(memcmp(w[0], w[1], N * sizeof(float)) == 0 && memcmp(m[0], m[1], N * sizeof(float)) == 0,
              "%s: 1 and 3 threads give identical results on %d elements", col_opt_kind_name(kinds[k]), N);
        for (int r = 0; r < 2; r++)
            free(w[r]), free(m[r]), free(v[r]);
    }
#ifdef _OPENMP
    omp_set_num_threads(omp_get_num_procs());
#endif
    /* the blocked norm of the parallel path against a plain double sum */
    double ref = 0;
    for (int i = 0; i < N; i++)
        ref += (double)g[i] * g[i];
    col_opt_tensor t = {NULL, g, NULL, NULL, N, true};
    double nrm = col_grad_global_norm(&t, 1);
    TL_OK(fabs(nrm - sqrt(ref)) < 1e-12 * sqrt(ref), "global norm of %d elements %.12g vs %.12g", N, nrm, sqrt(ref));

    /* LAMB on one large tensor against the reference (norms from the blocked sums) */
    float *wl = malloc(N * sizeof(float)), *ml = calloc(N, sizeof(float)), *vl = calloc(N, sizeof(float));
    double *rw = malloc(N * sizeof(double)), *rm = calloc(N, sizeof(double)), *rv = calloc(N, sizeof(double));
    double *u = malloc(N * sizeof(double));
    col_fill_normal(wl, N, 9, 0.2f);
    for (int i = 0; i < N; i++)
        rw[i] = wl[i];
    col_opt_config c = col_opt_defaults(COL_OPT_LAMB);
    col_opt_tensor tl = {wl, g, ml, vl, N, true};
    for (int s = 1; s <= 2; s++) {
        col_opt_step(&c, 0.01f, s, &tl, 1, NULL);
        ref_lamb(rw, rm, rv, g, N, 0.01f, c.beta1, c.beta2, c.eps, c.weight_decay, s, u);
    }
    double worst = rel_err(wl, rw, N);
    TL_OK(worst < TOL, "lamb on %d elements: max rel err %.2e", N, worst);
    free(wl), free(ml), free(vl), free(rw), free(rm), free(rv), free(u), free(g);
}

static void test_clip(void)
{
    float g0[50], g1[13], o0[50], o1[13];
    col_fill_normal(g0, 50, 21, 1.0f);
    col_fill_normal(g1, 13, 22, 3.0f);
    memcpy(o0, g0, sizeof g0), memcpy(o1, g1, sizeof g1);
    col_opt_tensor ts[2] = {{NULL, g0, NULL, NULL, 50, true}, {NULL, g1, NULL, NULL, 13, false}};
    double ref = 0;
    for (int i = 0; i < 50; i++)
        ref += (double)g0[i] * g0[i];
    for (int i = 0; i < 13; i++)
        ref += (double)g1[i] * g1[i];
    ref = sqrt(ref);
    TL_OK(fabs(col_grad_global_norm(ts, 2) - ref) < 1e-12 * ref, "global grad norm %.10g", ref);

    col_err err = {0};
    double before = 0;
    col_status st = col_clip_grad_norm(ts, 2, 2.0 * ref, &before, &err);
    TL_OK(st == COL_OK && before == col_grad_global_norm(ts, 2) && memcmp(g0, o0, sizeof g0) == 0 &&
              memcmp(g1, o1, sizeof g1) == 0,
          "clip below max_norm: norm returned, gradients untouched");

    double maxn = 0.25 * ref;
    st = col_clip_grad_norm(ts, 2, maxn, &before, &err);
    float cf = (float)(maxn / (ref + 1e-6));
    bool exact = true;
    for (int i = 0; i < 50; i++)
        exact &= g0[i] == o0[i] * cf;
    for (int i = 0; i < 13; i++)
        exact &= g1[i] == o1[i] * cf;
    double after = col_grad_global_norm(ts, 2);
    TL_OK(st == COL_OK && fabs(before - ref) < 1e-12 * ref && exact && fabs(after - maxn) < 1e-6 * maxn,
          "clip above max_norm: norm before %.6g, each g scaled by max/(norm+1e-6), norm after %.6g (max %.6g)", before,
          after, maxn);

    memcpy(g0, o0, sizeof g0), memcpy(g1, o1, sizeof g1);
    g0[3] = NAN;
    st = col_clip_grad_norm(ts, 2, 1.0, &before, &err);
    TL_OK(st == COL_EINVAL && isnan(before) && g0[4] == o0[4] && g1[0] == o1[0] && strstr(err.msg, "non-finite"),
          "clip of non-finite gradients: error, left unscaled: %s", err.msg);
    st = col_clip_grad_norm(ts, 2, 0.0, &before, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "max_norm"), "clip max_norm 0: %s", err.msg);
    ts[1].g = NULL;
    st = col_clip_grad_norm(ts, 2, 1.0, &before, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "tensor 1"), "clip NULL gradient: %s", err.msg);
}

/* the schedule formula written out in double */
static double ref_lr(col_lr_kind k, double hi, double lo, int64_t W, int64_t T, int64_t s)
{
    if (s < W)
        return hi * (double)(s + 1) / (double)W;
    if (k == COL_LR_CONSTANT)
        return hi;
    if (s >= T)
        return lo;
    double p = (double)(s - W) / (double)(T - W);
    return k == COL_LR_COSINE ? lo + 0.5 * (hi - lo) * (1 + cos(3.14159265358979323846 * p)) : hi - (hi - lo) * p;
}

static void test_sched(void)
{
    const col_lr_kind kinds[] = {COL_LR_CONSTANT, COL_LR_COSINE, COL_LR_LINEAR};
    const char *names[] = {"constant", "cosine", "linear"};
    const int64_t steps[] = {0, 1, 9, 10, 35, 60, 109, 110, 111, 5000};
    for (int k = 0; k < 3; k++) {
        col_lr_sched s = {kinds[k], 6e-4f, 6e-5f, 10, 110};
        col_err err = {0};
        TL_OK(col_lr_validate(&s, &err) == COL_OK, "%s schedule validates", names[k]);
        double worst = 0;
        for (int i = 0; i < 10; i++) {
            double r = ref_lr(kinds[k], s.lr_max, s.lr_min, 10, 110, steps[i]);
            worst = fmax(worst, fabs(col_lr_at(&s, steps[i]) - r) / r);
        }
        TL_OK(worst < 1e-6, "%s: warmup start/end, middle, end, after end match the formula (rel err %.2e)", names[k],
              worst);
    }
    col_lr_sched s = {COL_LR_COSINE, 1.0f, 0.1f, 4, 104};
    TL_OK(col_lr_at(&s, 0) == 0.25f && col_lr_at(&s, 3) == 1.0f && col_lr_at(&s, 4) == 1.0f &&
              fabsf(col_lr_at(&s, 54) - 0.55f) < 1e-7f && col_lr_at(&s, 104) == 0.1f && col_lr_at(&s, 10000) == 0.1f,
          "cosine: 0.25 at step 0, 1 at warmup end, 0.55 midway, 0.1 at and after the end");
    s.kind = COL_LR_LINEAR;
    TL_OK(fabsf(col_lr_at(&s, 29) - 0.775f) < 1e-7f && col_lr_at(&s, 104) == 0.1f, "linear: 0.775 a quarter in");
    s.warmup_steps = 0;
    TL_OK(col_lr_at(&s, 0) == 1.0f && col_lr_at(&s, -5) == 1.0f, "no warmup starts at lr_max; negative step = 0");
    s.kind = COL_LR_CONSTANT, s.warmup_steps = 4;
    TL_OK(col_lr_at(&s, 1) == 0.5f && col_lr_at(&s, 1000000) == 1.0f, "constant: warmup then lr_max forever");

    col_err err = {0};
    col_lr_sched bad = {COL_LR_COSINE, 1e-3f, 1e-2f, 0, 100};
    TL_OK(col_lr_validate(&bad, &err) == COL_EINVAL && strstr(err.msg, "lr_min"), "lr_min > lr_max: %s", err.msg);
    bad = (col_lr_sched){COL_LR_LINEAR, 1e-3f, 0, 100, 100};
    TL_OK(col_lr_validate(&bad, &err) == COL_EINVAL && strstr(err.msg, "total_steps"), "no decay span: %s", err.msg);
    bad = (col_lr_sched){COL_LR_CONSTANT, 1e-3f, 0, -1, 0};
    TL_OK(col_lr_validate(&bad, &err) == COL_EINVAL && strstr(err.msg, "warmup"), "negative warmup: %s", err.msg);
}

static void test_config(void)
{
    TL_OK(col_opt_state_slots(COL_OPT_SGD, 0) == 0 && col_opt_state_slots(COL_OPT_SGD, 0.9f) == 1 &&
              col_opt_state_slots(COL_OPT_ADAMW, 0) == 2 && col_opt_state_slots(COL_OPT_LAMB, 0) == 2 &&
              col_opt_state_slots(COL_OPT_LARS, 0) == 1 && col_opt_state_slots((col_opt_kind)9, 0) == -1,
          "state slots: sgd 0/1, adamw 2, lamb 2, lars 1");
    col_opt_config a = col_opt_defaults(COL_OPT_ADAMW), l = col_opt_defaults(COL_OPT_LARS);
    TL_OK(a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-8f && a.weight_decay == 1e-2f &&
              l.eta == 1e-3f && l.momentum == 0.9f,
          "defaults: torch AdamW, LARS eta 1e-3");
    const col_opt_kind kinds[] = {COL_OPT_SGD, COL_OPT_ADAMW, COL_OPT_LAMB, COL_OPT_LARS};
    bool ok = true;
    for (int k = 0; k < 4; k++) {
        col_opt_config d = col_opt_defaults(kinds[k]);
        ok &= d.kind == kinds[k] && col_opt_validate(&d, NULL) == COL_OK;
    }
    TL_OK(ok, "every default config validates");
}

/* each bad call returns COL_EINVAL naming the problem and writes nothing */
static void test_errors(void)
{
    float w0[4] = {1, 2, 3, 4}, w1[4] = {5, 6, 7, 8}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
    float keep0[4], keep1[4];
    memcpy(keep0, w0, sizeof w0), memcpy(keep1, w1, sizeof w1);
    struct {
        const char *what, *needle;
        col_opt_kind kind;
        float lr, beta1, beta2, eps, momentum, eta;
        bool nesterov, drop_m, drop_v, null_g;
        int64_t step, n;
    } cases[] = {
        {"negative lr", "lr", COL_OPT_ADAMW, -1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false, false, 1, 4},
        {"NaN lr", "lr", COL_OPT_SGD, NAN, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false, false, 1, 4},
        {"beta1 = 1", "beta1", COL_OPT_ADAMW, 1e-3f, 1.0f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false, false, 1, 4},
        {"beta2 < 0", "beta2", COL_OPT_LAMB, 1e-3f, 0.9f, -0.1f, 1e-8f, 0, 1e-3f, false, false, false, false, 1, 4},
        {"negative eps", "eps", COL_OPT_ADAMW, 1e-3f, 0.9f, 0.999f, -1e-8f, 0, 1e-3f, false, false, false, false, 1, 4},
        {"adamw without m", "no m state", COL_OPT_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, true, false,
         false, 1, 4},
        {"lamb without v", "no v state", COL_OPT_LAMB, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, true, false,
         1, 4},
        {"sgd momentum without buffer", "no m state", COL_OPT_SGD, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.9f, 1e-3f, false,
         true, false, false, 1, 4},
        {"lars without buffer", "no m state", COL_OPT_LARS, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.9f, 1e-3f, false, true,
         false, false, 1, 4},
        {"step 0", "step 0", COL_OPT_ADAMW, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false, false, 0, 4},
        {"nesterov without momentum", "nesterov", COL_OPT_SGD, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, true, false,
         false, false, 1, 4},
        {"negative momentum", "momentum", COL_OPT_LARS, 1e-3f, 0.9f, 0.999f, 1e-8f, -0.5f, 1e-3f, false, false, false,
         false, 1, 4},
        {"lars eta 0", "eta", COL_OPT_LARS, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.9f, 0.0f, false, false, false, false, 1, 4},
        {"NULL gradient", "NULL gradient", COL_OPT_SGD, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false,
         true, 1, 4},
        {"negative length", "negative length", COL_OPT_SGD, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false,
         false, 1, -4},
        {"unknown kind", "unknown kind", (col_opt_kind)7, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1e-3f, false, false, false,
         false, 1, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_opt_config c = col_opt_defaults(COL_OPT_ADAMW);
        c.kind = cases[i].kind, c.beta1 = cases[i].beta1, c.beta2 = cases[i].beta2, c.eps = cases[i].eps;
        c.momentum = cases[i].momentum, c.eta = cases[i].eta, c.nesterov = cases[i].nesterov;
        /* tensor 0 is valid; the defect is in tensor 1, so nothing may be written to tensor 0 either */
        col_opt_tensor ts[2] = {{w0, g, m, v, 4, true},
                                {w1, cases[i].null_g ? NULL : g, cases[i].drop_m ? NULL : m,
                                 cases[i].drop_v ? NULL : v, cases[i].n, true}};
        col_err err = {0};
        col_status st = col_opt_step(&c, cases[i].lr, cases[i].step, ts, 2, &err);
        TL_OK(st == COL_EINVAL && strstr(err.msg, cases[i].needle) && memcmp(w0, keep0, sizeof w0) == 0 &&
                  memcmp(w1, keep1, sizeof w1) == 0 && m[0] == 0 && v[0] == 0,
              "%s: %s", cases[i].what, err.msg);
    }
    /* plain SGD needs no state */
    col_opt_config c = col_opt_defaults(COL_OPT_SGD);
    col_opt_tensor t = {w0, g, NULL, NULL, 4, true};
    TL_OK(col_opt_step(&c, 0.5f, 1, &t, 1, NULL) == COL_OK && w0[0] == 0.5f, "plain sgd runs without state");
    TL_OK(col_opt_step(&c, 0.5f, 1, NULL, 0, NULL) == COL_OK, "an empty tensor list is fine");
}

/* AdamW and LAMB run vector loops with scalar tails, per block: against the
 * formulas evaluated one element at a time in f32, operation by operation as
 * optim.c documents them, on odd lengths (tails), unaligned starts and a
 * length that takes the parallel path. AdamW must match bit for bit; LAMB's
 * m, v too, and its w bit for bit when w starts at 0 (trust ratio 1), to
 * within 1e-6 of the scalar result otherwise (its norms are summed in
 * another order there). */
static void test_vector_paths(void)
{
    enum { NMAX = 70001 + 3 };
    static const int64_t lens[] = {1, 7, 15, 16, 17, 33, 255, 257, 1031, 70001};
    float *buf[5], *ref[3], *g = malloc(NMAX * sizeof(float));
    for (int k = 0; k < 5; k++)
        buf[k] = malloc(NMAX * sizeof(float));
    for (int k = 0; k < 3; k++)
        ref[k] = malloc(NMAX * sizeof(float));
    const float lr = 0.01f, b1 = 0.8f, b2 = 0.95f, eps = 1e-5f, wdc = 0.1f;
    const int64_t t = 3;
    int bad_adamw = 0, bad_mv = 0, bad_w0 = 0, cases = 0;
    double worst_lamb = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int off = 0; off < 4; off++)
            for (int zero_w = 0; zero_w < 2; zero_w++) {
                int64_t n = lens[li];
                float *w = buf[0] + off, *m = buf[1] + off, *v = buf[2] + off, *gg = g + off;
                col_fill_normal(w, n, 20 + li, zero_w ? 0.0f : 0.5f);
                col_fill_normal(gg, n, 30 + li, 0.1f);
                col_fill_normal(m, n, 40 + li, 0.01f);
                col_fill_normal(v, n, 50 + li, 0.01f);
                for (int64_t i = 0; i < n; i++)
                    v[i] = v[i] * v[i];
                if (n > 5)
                    gg[3] = 0.0f, v[3] = 0.0f; /* v = 0: sqrt 0, the denominator is eps */
                memcpy(buf[3], w, n * sizeof(float));
                memcpy(buf[4], m, n * sizeof(float));
                memcpy(ref[2], v, n * sizeof(float));
                float *rw = buf[3], *rm = buf[4], *rv = ref[2];
                col_opt_config c = col_opt_defaults(COL_OPT_ADAMW);
                c.beta1 = b1, c.beta2 = b2, c.eps = eps, c.weight_decay = wdc;
                for (int kind = 0; kind < 2; kind++) { /* LAMB first: from w = 0 its trust ratio is 1 */
                    c.kind = kind == 0 ? COL_OPT_LAMB : COL_OPT_ADAMW;
                    float omb1 = (float)(1.0 - (double)b1), omb2 = (float)(1.0 - (double)b2);
                    double r1 = 0, r2 = 0;
                    float *u = ref[0];
                    for (int64_t i = 0; i < n; i++) {
                        float gi = gg[i];
                        rm[i] = b1 * rm[i] + omb1 * gi;
                        rv[i] = b2 * rv[i] + omb2 * gi * gi;
                    }
                    if (kind == 1) {
                        float keep = (float)(1.0 - (double)lr * wdc);
                        float ss = (float)(lr / (1.0 - pow(b1, (double)t)));
                        float bc2s = (float)sqrt(1.0 - pow(b2, (double)t));
                        for (int64_t i = 0; i < n; i++)
                            rw[i] = rw[i] * keep - ss * (rm[i] / (sqrtf(rv[i]) / bc2s + eps));
                    } else {
                        float ibc1 = (float)(1.0 / (1.0 - pow(b1, (double)t)));
                        float ibc2 = (float)(1.0 / (1.0 - pow(b2, (double)t)));
                        for (int64_t i = 0; i < n; i++) {
                            u[i] = (rm[i] * ibc1) / (sqrtf(rv[i] * ibc2) + eps) + wdc * rw[i];
                            r1 += (double)rw[i] * rw[i];
                            r2 += (double)u[i] * u[i];
                        }
                        r1 = sqrt(r1), r2 = sqrt(r2);
                        float a = (float)(lr * (r1 > 0 && r2 > 0 ? r1 / r2 : 1.0));
                        for (int64_t i = 0; i < n; i++)
                            rw[i] -= a * u[i];
                    }
                    col_opt_tensor ts = {w, gg, m, v, n, true};
                    col_opt_step(&c, lr, t, &ts, 1, NULL);
                    bool mv = memcmp(m, rm, n * sizeof(float)) == 0 && memcmp(v, rv, n * sizeof(float)) == 0;
                    bool wsame = memcmp(w, rw, n * sizeof(float)) == 0;
                    cases++;
                    if (kind == 1) {
                        bad_adamw += !(mv && wsame);
                    } else {
                        bad_mv += !mv;
                        if (zero_w)
                            bad_w0 += !wsame;
                        double scale = 0;
                        for (int64_t i = 0; i < n; i++)
                            scale = fmax(scale, fabs(rw[i]));
                        for (int64_t i = 0; i < n; i++)
                            worst_lamb = fmax(worst_lamb, fabs((double)w[i] - rw[i]) / scale);
                    }
                    /* the next kind starts from this kind's result, on both sides */
                    memcpy(rw, w, n * sizeof(float));
                    memcpy(rm, m, n * sizeof(float));
                    memcpy(rv, v, n * sizeof(float));
                }
            }
    TL_OK(bad_adamw == 0, "adamw: w, m, v equal the scalar f32 formula bit for bit (%d of %d cases differ)", bad_adamw,
          cases / 2);
    TL_OK(bad_mv == 0, "lamb: m, v equal the scalar f32 formula bit for bit (%d of %d cases differ)", bad_mv, cases / 2);
    TL_OK(bad_w0 == 0, "lamb from w = 0 (trust 1): w equals the scalar f32 formula bit for bit (%d differ)", bad_w0);
    TL_OK(worst_lamb < 1e-6, "lamb: w within 1e-6 of the scalar f32 formula (max err / max |w|: %.2e)", worst_lamb);
    for (int k = 0; k < 5; k++)
        free(buf[k]);
    for (int k = 0; k < 3; k++)
        free(ref[k]);
    free(g);
}

int main(void)
{
    test_config();
    test_sgd();
    test_adamw();
    test_lamb();
    test_lars();
    test_threads();
    test_vector_paths();
    test_clip();
    test_sched();
    test_errors();
    return tl_done();
}
