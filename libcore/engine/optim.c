/* optim.c - SGD, AdamW, LAMB, LARS, gradient clipping, LR schedules.
 *
 * Every tensor is processed as NBLK fixed blocks whose bounds depend only on
 * its length: an OpenMP parallel for runs over the blocks of a large tensor
 * (n > OPT_PAR_MIN) and a vector loop over the elements of a block. Sums of
 * squares are formed per block in double and added in block order, so every
 * result is the same for any number of threads.
 */
#include "optim.h"
#include "optim_scalars.h"

#include <math.h>
#include <stddef.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#define OPT_PAR_MIN 65536
#define NBLK 64
#define SUB 256 /* LAMB's first pass sums the squares of u over sub-blocks of SUB elements */

/* AdamW and LAMB run as one vector loop per pass over memory (the other
 * optimizers are plain simd loops, already at memory speed). Each element
 * goes through exactly the operations, in the order, of the scalar formula
 * next to the vector code (separate multiplies and adds: the tree is built
 * with -std=c11, where gcc does not contract a * b + c into an FMA, and
 * intrinsics are never contracted); square roots are IEEE either way. So
 * every vector width and the scalar tail give the same bits, and a thread
 * count or block split cannot change an element. Doing all of an element's
 * work in one pass, loads before stores, keeps AdamW at memory speed (28
 * bytes per parameter) even when w, m and v share their page offsets, as
 * memtier chunks do. The intrinsics also keep the square roots in vector
 * form when the build has -fmath-errno, under which gcc leaves sqrtf calls
 * scalar. V_* wraps the widest vector the target has (none: only the tails'
 * simd loops run, which gcc vectorises itself under -fno-math-errno). */
#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
#define V_SET1 _mm512_set1_ps
#define V_LD _mm512_loadu_ps
#define V_ST _mm512_storeu_ps
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MUL _mm512_mul_ps
#define V_DIV _mm512_div_ps
#define V_SQRT _mm512_sqrt_ps
#elif defined(__AVX__)
#define VW 8
typedef __m256 vf;
#define V_SET1 _mm256_set1_ps
#define V_LD _mm256_loadu_ps
#define V_ST _mm256_storeu_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MUL _mm256_mul_ps
#define V_DIV _mm256_div_ps
#define V_SQRT _mm256_sqrt_ps
#endif

/* block b of n elements: [*lo, *hi), block length a multiple of 16 floats */
static inline void blk_range(int64_t n, int b, int64_t *lo, int64_t *hi)
{
    int64_t bs = (n + NBLK - 1) / NBLK;
    bs = (bs + 15) & ~(int64_t)15;
    int64_t l = (int64_t)b * bs;
    *lo = l < n ? l : n;
    *hi = l + bs < n ? l + bs : n;
}

/* sum of x[i]^2 in double, in a thread-count independent order */
static double sumsq(const float *x, int64_t n)
{
    double part[NBLK];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        part[b] = s;
    }
    double s = 0;
    for (int b = 0; b < NBLK; b++)
        s += part[b];
    return s;
}

/* *sa += sum of a[i]^2 and *sb += sum of b[i]^2 over [0, n), in double, in one vector loop */
static inline void sumsq2(const float *restrict a, const float *restrict b, int64_t n, double *sa, double *sb)
{
    double x = *sa, y = *sb;
#pragma omp simd reduction(+ : x, y)
    for (int64_t i = 0; i < n; i++) {
        x += (double)a[i] * a[i];
        y += (double)b[i] * b[i];
    }
    *sa = x, *sb = y;
}

/* the norms sqrt(sum of pa), sqrt(sum of pb) of per-block sums of squares,
 * added in block order (LAMB's and LARS's trust ratios) */
static void block_norms(const double pa[NBLK], const double pb[NBLK], double *ra, double *rb)
{
    double sa = 0, sb = 0;
    for (int b = 0; b < NBLK; b++)
        sa += pa[b], sb += pb[b];
    *ra = sqrt(sa), *rb = sqrt(sb);
}

/* ---- configuration ---- */

col_opt_config col_opt_defaults(col_opt_kind kind)
{
    col_opt_config c = {
        .kind = kind, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
        .weight_decay = 0.0f, .momentum = 0.0f, .nesterov = false, .eta = 1e-3f,
    };
    switch (kind) {
    case COL_OPT_SGD: c.lr = 1e-2f; break;
    case COL_OPT_ADAMW: c.weight_decay = 1e-2f; break;
    case COL_OPT_LAMB: c.eps = 1e-6f; c.weight_decay = 1e-2f; break;
    case COL_OPT_LARS: c.lr = 0.1f; c.momentum = 0.9f; c.weight_decay = 5e-4f; break;
    }
    return c;
}

const char *col_opt_kind_name(col_opt_kind kind)
{
    switch (kind) {
    case COL_OPT_SGD: return "sgd";
    case COL_OPT_ADAMW: return "adamw";
    case COL_OPT_LAMB: return "lamb";
    case COL_OPT_LARS: return "lars";
    }
    return "unknown";
}

int col_opt_state_slots(col_opt_kind kind, float momentum)
{
    switch (kind) {
    case COL_OPT_SGD: return momentum != 0.0f ? 1 : 0;
    case COL_OPT_ADAMW:
    case COL_OPT_LAMB: return 2;
    case COL_OPT_LARS: return 1;
    }
    return -1;
}

static bool nonneg(float x) { return x >= 0.0f && isfinite(x); }

col_status col_opt_validate(const col_opt_config *c, col_err *e)
{
    if (!c)
        return col_err_set(e, COL_EINVAL, "optimizer: config is NULL");
    if (col_opt_state_slots(c->kind, 0.0f) < 0)
        return col_err_set(e, COL_EINVAL, "optimizer: unknown kind %d", (int)c->kind);
    const char *k = col_opt_kind_name(c->kind);
    if (!nonneg(c->lr))
        return col_err_set(e, COL_EINVAL, "optimizer %s: lr %g must be finite and >= 0", k, c->lr);
    if (!nonneg(c->weight_decay))
        return col_err_set(e, COL_EINVAL, "optimizer %s: weight_decay %g must be finite and >= 0", k, c->weight_decay);
    if (c->kind == COL_OPT_ADAMW || c->kind == COL_OPT_LAMB) {
        if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
            return col_err_set(e, COL_EINVAL, "optimizer %s: beta1 %g must be in [0, 1)", k, c->beta1);
        if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
            return col_err_set(e, COL_EINVAL, "optimizer %s: beta2 %g must be in [0, 1)", k, c->beta2);
        if (!nonneg(c->eps))
            return col_err_set(e, COL_EINVAL, "optimizer %s: eps %g must be finite and >= 0", k, c->eps);
    }
    if (c->kind == COL_OPT_SGD || c->kind == COL_OPT_LARS) {
        if (!nonneg(c->momentum))
            return col_err_set(e, COL_EINVAL, "optimizer %s: momentum %g must be finite and >= 0", k, c->momentum);
    }
    if (c->kind == COL_OPT_SGD && c->nesterov && c->momentum == 0.0f)
        return col_err_set(e, COL_EINVAL, "optimizer sgd: nesterov needs momentum > 0");
    if (c->kind == COL_OPT_LARS && !(c->eta > 0.0f && isfinite(c->eta)))
        return col_err_set(e, COL_EINVAL, "optimizer lars: trust coefficient eta %g must be finite and > 0", c->eta);
    return COL_OK;
}

col_status col_opt_check_step(const char *who, const col_opt_config *c, float lr, int64_t step,
                              const col_opt_tensor *ts, int nt, col_err *e)
{
    col_status st = col_opt_validate(c, e);
    if (st != COL_OK)
        return st;
    const char *k = col_opt_kind_name(c->kind);
    if (!nonneg(lr))
        return col_err_set(e, COL_EINVAL, "%s(%s): lr %g must be finite and >= 0", who, k, lr);
    if (step < 1)
        return col_err_set(e, COL_EINVAL, "%s(%s): step %lld must be >= 1 (steps are 1-based)", who, k,
                           (long long)step);
    if (nt < 0 || (nt > 0 && !ts))
        return col_err_set(e, COL_EINVAL, "%s(%s): bad tensor list (%d tensors, list %s)", who, k, nt,
                           ts ? "given" : "NULL");
    int slots = col_opt_state_slots(c->kind, c->momentum);
    for (int i = 0; i < nt; i++) {
        const col_opt_tensor *t = &ts[i];
        if (t->n < 0)
            return col_err_set(e, COL_EINVAL, "%s(%s): tensor %d has negative length %lld", who, k, i,
                               (long long)t->n);
        if (t->n == 0)
            continue;
        if (!t->w || !t->g)
            return col_err_set(e, COL_EINVAL, "%s(%s): tensor %d has a NULL %s", who, k, i,
                               !t->w ? "weight" : "gradient");
        if (slots >= 1 && !t->m)
            return col_err_set(e, COL_EINVAL, "%s(%s): tensor %d has no m state (%s needs %d state slot%s)", who, k,
                               i, k, slots, slots > 1 ? "s" : "");
        if (slots >= 2 && !t->v)
            return col_err_set(e, COL_EINVAL, "%s(%s): tensor %d has no v state (%s needs 2 state slots)", who, k, i,
                               k);
    }
    return COL_OK;
}

/* ---- SGD (torch.optim.SGD, dampening 0) ----
 *   d = g + wd * w
 *   momentum > 0:  buf = momentum * buf + d            (buf starts at 0)
 *                  d = nesterov ? d + momentum * buf : buf
 *   w = w - lr * d
 */
static void sgd_tensor(const col_opt_config *c, float lr, const col_opt_tensor *t)
{
    float *restrict w = t->w, *restrict buf = t->m;
    const float *restrict g = t->g;
    const float wd = t->decay ? c->weight_decay : 0.0f, mu = c->momentum;
    const int mode = col_sgd_mode(c);
    int64_t n = t->n;
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        if (mode == 0) {
#pragma omp simd
            for (int64_t i = lo; i < hi; i++)
                w[i] -= lr * (g[i] + wd * w[i]);
        } else if (mode == 1) {
#pragma omp simd
            for (int64_t i = lo; i < hi; i++) {
                float d = g[i] + wd * w[i];
                float bi = mu * buf[i] + d;
                buf[i] = bi;
                w[i] -= lr * bi;
            }
        } else {
#pragma omp simd
            for (int64_t i = lo; i < hi; i++) {
                float d = g[i] + wd * w[i];
                float bi = mu * buf[i] + d;
                buf[i] = bi;
                w[i] -= lr * (d + mu * bi);
            }
        }
    }
}

/* ---- the moments of AdamW and LAMB (optim_scalars.h) ----
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 * for one element, and for VW elements with the scalars broadcast */
static inline float moment1(const col_opt_moments *k, float m, float g) { return k->b1 * m + k->omb1 * g; }
static inline float moment2(const col_opt_moments *k, float v, float g) { return k->b2 * v + k->omb2 * g * g; }

#ifdef VW
static inline vf v_moment1(vf B1, vf OMB1, vf m, vf g) { return V_ADD(V_MUL(B1, m), V_MUL(OMB1, g)); }
static inline vf v_moment2(vf B2, vf OMB2, vf v, vf g) { return V_ADD(V_MUL(B2, v), V_MUL(V_MUL(OMB2, g), g)); }
#endif

/* ---- AdamW (torch.optim.AdamW, amsgrad off) ----
 *   w = w - lr * wd * w                      (decoupled decay, before the moment update)
 *   m = b1 m + (1 - b1) g
 *   v = b2 v + (1 - b2) g^2
 *   w = w - lr * (m / (1 - b1^t)) / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *     (the same as lr * mhat / (sqrt(vhat) + eps); t = step, 1-based)
 */
/* elements [lo, hi) of AdamW, one pass: reads w, g, m, v, writes w, m, v */
static void adamw_range(float *restrict w, float *restrict m, float *restrict v, const float *restrict g, int64_t lo,
                        int64_t hi, const col_adamw_scalars *s, float keep)
{
    const col_opt_moments mo = s->mo;
    const float step_size = s->step_size, bc2_sqrt = s->bc2_sqrt, eps = s->eps;
    int64_t i = lo;
#ifdef VW
    const vf B1 = V_SET1(mo.b1), B2 = V_SET1(mo.b2), OMB1 = V_SET1(mo.omb1), OMB2 = V_SET1(mo.omb2),
             KEEP = V_SET1(keep), SS = V_SET1(step_size), BC2 = V_SET1(bc2_sqrt), EPS = V_SET1(eps);
    for (; i + VW <= hi; i += VW) {
        vf gi = V_LD(g + i), wi = V_LD(w + i);
        vf mi = v_moment1(B1, OMB1, V_LD(m + i), gi), vi = v_moment2(B2, OMB2, V_LD(v + i), gi);
        vf den = V_ADD(V_DIV(V_SQRT(vi), BC2), EPS);
        wi = V_SUB(V_MUL(wi, KEEP), V_MUL(SS, V_DIV(mi, den)));
        V_ST(m + i, mi);
        V_ST(v + i, vi);
        V_ST(w + i, wi);
    }
#endif
#pragma omp simd
    for (int64_t j = i; j < hi; j++) {
        float gi = g[j];
        float mi = moment1(&mo, m[j], gi), vi = moment2(&mo, v[j], gi);
        m[j] = mi;
        v[j] = vi;
        w[j] = w[j] * keep - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
}

static void adamw_tensor(const col_opt_config *c, float lr, int64_t step, const col_opt_tensor *t)
{
    float *w = t->w, *m = t->m, *v = t->v;
    const float *g = t->g;
    const col_adamw_scalars s = col_adamw_scalars_of(c, lr, step);
    const float keep = col_adamw_keep(c, lr, t->decay);
    int64_t n = t->n;
    /* static schedule: each thread streams one contiguous run of blocks */
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        adamw_range(w, m, v, g, lo, hi, &s, keep);
    }
}

/* ---- LAMB (You et al. 2019, Algorithm 2) ----
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t)
 *   u = mhat / (sqrt(vhat) + eps) + wd * w
 *   per tensor: r1 = ||w||, r2 = ||u||, trust = r1 / r2 if r1 > 0 and r2 > 0, else 1
 *   w = w - lr * trust * u
 * Pass 1 updates m, v and sums w^2, u^2; pass 2 recomputes u with the same
 * operations (w is not yet changed) and applies it.
 */

/* The update direction u = (m * ibc1) / (sqrt(v * ibc2) + eps) + wd * w of
 * one element, and of VW elements with the scalars broadcast; ibc = 1 / (1 - beta^t). */
typedef struct {
    float ibc1, ibc2, eps, wd;
} lamb_dir;

static inline float lamb_u(const lamb_dir *d, float m, float v, float w)
{
    return (m * d->ibc1) / (sqrtf(v * d->ibc2) + d->eps) + d->wd * w;
}

#ifdef VW
static inline vf v_lamb_u(vf IBC1, vf IBC2, vf EPS, vf WD, vf m, vf v, vf w)
{
    return V_ADD(V_DIV(V_MUL(m, IBC1), V_ADD(V_SQRT(V_MUL(v, IBC2)), EPS)), V_MUL(WD, w));
}
#endif

/* Pass 1 on sub-block [0, len): m, v updated in place, u[0..len) = the update
 * direction (reads g, m, v, w; writes m, v) */
static void lamb_mvu(const float *restrict g, float *restrict m, float *restrict v, const float *restrict w, int len,
                     const col_opt_moments *mo, const lamb_dir *d, float *restrict u)
{
    int i = 0;
#ifdef VW
    const vf B1 = V_SET1(mo->b1), B2 = V_SET1(mo->b2), OMB1 = V_SET1(mo->omb1), OMB2 = V_SET1(mo->omb2),
             IBC1 = V_SET1(d->ibc1), IBC2 = V_SET1(d->ibc2), EPS = V_SET1(d->eps), WD = V_SET1(d->wd);
    for (; i + VW <= len; i += VW) {
        vf gi = V_LD(g + i);
        vf mi = v_moment1(B1, OMB1, V_LD(m + i), gi), vi = v_moment2(B2, OMB2, V_LD(v + i), gi);
        V_ST(m + i, mi);
        V_ST(v + i, vi);
        V_ST(u + i, v_lamb_u(IBC1, IBC2, EPS, WD, mi, vi, V_LD(w + i)));
    }
#endif
#pragma omp simd
    for (int j = i; j < len; j++) {
        float gi = g[j];
        float mi = moment1(mo, m[j], gi), vi = moment2(mo, v[j], gi);
        m[j] = mi;
        v[j] = vi;
        u[j] = lamb_u(d, mi, vi, w[j]);
    }
}

/* Pass 2 on [lo, hi): u again from the updated m, v (same operations) and
 * w -= a u (reads w, m, v; writes w) */
static void lamb_apply(float *restrict w, const float *restrict m, const float *restrict v, int64_t lo, int64_t hi,
                       const lamb_dir *d, float a)
{
    int64_t i = lo;
#ifdef VW
    const vf IBC1 = V_SET1(d->ibc1), IBC2 = V_SET1(d->ibc2), EPS = V_SET1(d->eps), WD = V_SET1(d->wd), A = V_SET1(a);
    for (; i + VW <= hi; i += VW) {
        vf wi = V_LD(w + i);
        V_ST(w + i, V_SUB(wi, V_MUL(A, v_lamb_u(IBC1, IBC2, EPS, WD, V_LD(m + i), V_LD(v + i), wi))));
    }
#endif
#pragma omp simd
    for (int64_t j = i; j < hi; j++)
        w[j] -= a * lamb_u(d, m[j], v[j], w[j]);
}

static void lamb_tensor(const col_opt_config *c, float lr, int64_t step, const col_opt_tensor *t)
{
    float *restrict w = t->w, *restrict m = t->m, *restrict v = t->v;
    const float *restrict g = t->g;
    const col_opt_moments mo = col_opt_moments_of(c);
    const lamb_dir d = {
        .ibc1 = (float)(1.0 / (1.0 - pow(mo.b1, (double)step))),
        .ibc2 = (float)(1.0 / (1.0 - pow(mo.b2, (double)step))),
        .eps = c->eps,
        .wd = t->decay ? c->weight_decay : 0.0f,
    };
    int64_t n = t->n;
    double pw[NBLK], pu[NBLK];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        double sw = 0, su = 0;
        for (int64_t j = lo; j < hi; j += SUB) {
            int len = hi - j < SUB ? (int)(hi - j) : SUB;
            const float *restrict wj = w + j;
            float u[SUB];
            lamb_mvu(g + j, m + j, v + j, wj, len, &mo, &d, u);
            sumsq2(wj, u, len, &sw, &su); /* the sums in one loop (and so one order) */
        }
        pw[b] = sw;
        pu[b] = su;
    }
    double r1, r2;
    block_norms(pw, pu, &r1, &r2);
    double trust = r1 > 0 && r2 > 0 ? r1 / r2 : 1.0;
    const float a = (float)(lr * trust);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        lamb_apply(w, m, v, lo, hi, &d, a);
    }
}

/* ---- LARS (You et al. 2017, as summarised in the LAMB paper, Algorithm 1) ----
 *   per tensor: local = eta * ||w|| / (||g|| + wd * ||w||) if ||w|| > 0 and ||g|| > 0, else 1
 *   buf = momentum * buf + lr * local * (g + wd * w)     (buf starts at 0)
 *   w = w - buf
 */
static void lars_tensor(const col_opt_config *c, float lr, const col_opt_tensor *t)
{
    float *restrict w = t->w, *restrict buf = t->m;
    const float *restrict g = t->g;
    const float wd = t->decay ? c->weight_decay : 0.0f, mu = c->momentum;
    int64_t n = t->n;
    double pw[NBLK], pg[NBLK];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        pw[b] = pg[b] = 0;
        sumsq2(w + lo, g + lo, hi - lo, &pw[b], &pg[b]);
    }
    double rw, rg;
    block_norms(pw, pg, &rw, &rg);
    double local = rw > 0 && rg > 0 ? c->eta * rw / (rg + wd * rw) : 1.0;
    const float a = (float)(lr * local);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            float bi = mu * buf[i] + a * (g[i] + wd * w[i]);
            buf[i] = bi;
            w[i] -= bi;
        }
    }
}

col_status col_opt_step(const col_opt_config *c, float lr, int64_t step, col_opt_tensor *ts, int nt, col_err *e)
{
    col_status st = col_opt_check_step("col_opt_step", c, lr, step, ts, nt, e);
    if (st != COL_OK)
        return st;
    for (int i = 0; i < nt; i++) {
        const col_opt_tensor *t = &ts[i];
        if (t->n == 0)
            continue;
        switch (c->kind) {
        case COL_OPT_SGD: sgd_tensor(c, lr, t); break;
        case COL_OPT_ADAMW: adamw_tensor(c, lr, step, t); break;
        case COL_OPT_LAMB: lamb_tensor(c, lr, step, t); break;
        case COL_OPT_LARS: lars_tensor(c, lr, t); break;
        }
    }
    return COL_OK;
}

/* ---- gradient norm and clipping ---- */

double col_grad_sumsq(const col_opt_tensor *ts, int nt)
{
    double s = 0;
    for (int i = 0; i < nt; i++)
        if (ts[i].n > 0)
            s += sumsq(ts[i].g, ts[i].n);
    return s;
}

double col_grad_global_norm(const col_opt_tensor *ts, int nt) { return sqrt(col_grad_sumsq(ts, nt)); }

/* torch.nn.utils.clip_grad_norm_ (norm_type 2):
 *   norm = ||concat(g)||;  coef = max_norm / (norm + 1e-6);  if coef < 1: g = coef * g */
col_status col_clip_grad_norm(col_opt_tensor *ts, int nt, double max_norm, double *norm_before, col_err *e)
{
    if (!(max_norm > 0) || !isfinite(max_norm))
        return col_err_set(e, COL_EINVAL, "clip_grad_norm: max_norm %g must be finite and > 0", max_norm);
    if (nt < 0 || (nt > 0 && !ts))
        return col_err_set(e, COL_EINVAL, "clip_grad_norm: bad tensor list (%d tensors, list %s)", nt,
                           ts ? "given" : "NULL");
    for (int i = 0; i < nt; i++) {
        if (ts[i].n < 0)
            return col_err_set(e, COL_EINVAL, "clip_grad_norm: tensor %d has negative length %lld", i,
                               (long long)ts[i].n);
        if (ts[i].n > 0 && !ts[i].g)
            return col_err_set(e, COL_EINVAL, "clip_grad_norm: tensor %d has a NULL gradient", i);
    }
    double norm = col_grad_global_norm(ts, nt);
    if (norm_before)
        *norm_before = norm;
    if (!isfinite(norm))
        return col_err_set(e, COL_EINVAL, "clip_grad_norm: total gradient norm is %g (non-finite gradients); "
                           "gradients left unscaled", norm);
    col_clip_grad_scale(ts, nt, max_norm, norm);
    return COL_OK;
}

void col_clip_grad_scale(col_opt_tensor *ts, int nt, double max_norm, double norm)
{
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0)
        return;
    const float cf = (float)coef;
    for (int k = 0; k < nt; k++) {
        float *restrict g = ts[k].g;
        int64_t n = ts[k].n;
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
        for (int b = 0; b < NBLK; b++) {
            int64_t lo, hi;
            blk_range(n, b, &lo, &hi);
#pragma omp simd
            for (int64_t i = lo; i < hi; i++)
                g[i] *= cf;
        }
    }
}

/* ---- learning-rate schedules (formulas in optim.h) ---- */

float col_lr_at(const col_lr_sched *s, int64_t step)
{
    if (step < 0)
        step = 0;
    const double hi = s->lr_max, lo = s->lr_min;
    if (step < s->warmup_steps)
        return (float)(hi * (double)(step + 1) / (double)s->warmup_steps);
    if (s->kind == COL_LR_CONSTANT)
        return s->lr_max;
    if (step >= s->total_steps)
        return s->lr_min;
    double p = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    if (s->kind == COL_LR_COSINE)
        return (float)(lo + 0.5 * (hi - lo) * (1.0 + cos(M_PI * p)));
    return (float)(hi + (lo - hi) * p);
}

col_status col_lr_validate(const col_lr_sched *s, col_err *e)
{
    if (!s)
        return col_err_set(e, COL_EINVAL, "lr schedule: NULL");
    if (s->kind != COL_LR_CONSTANT && s->kind != COL_LR_COSINE && s->kind != COL_LR_LINEAR)
        return col_err_set(e, COL_EINVAL, "lr schedule: unknown kind %d", (int)s->kind);
    if (!nonneg(s->lr_max) || !nonneg(s->lr_min) || s->lr_min > s->lr_max)
        return col_err_set(e, COL_EINVAL, "lr schedule: need 0 <= lr_min <= lr_max, got lr_min %g lr_max %g",
                           s->lr_min, s->lr_max);
    if (s->warmup_steps < 0)
        return col_err_set(e, COL_EINVAL, "lr schedule: warmup_steps %lld must be >= 0", (long long)s->warmup_steps);
    if (s->kind != COL_LR_CONSTANT && s->total_steps <= s->warmup_steps)
        return col_err_set(e, COL_EINVAL, "lr schedule: total_steps %lld must be > warmup_steps %lld for a decay",
                           (long long)s->total_steps, (long long)s->warmup_steps);
    return COL_OK;
}
