/* optim.c - SGD, AdamW, LAMB, LARS, gradient clipping, LR schedules.
 *
 * Every tensor is processed as NBLK fixed blocks whose bounds depend only on
 * its length: an OpenMP parallel for runs over the blocks of a large tensor
 * (n > OPT_PAR_MIN) and a simd loop over the elements of a block. Sums of
 * squares are formed per block in double and added in block order, so every
 * result is the same for any number of threads.
 */
#include "optim.h"

#include <math.h>
#include <stddef.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#define OPT_PAR_MIN 65536
#define NBLK 64
#define SUB 256 /* AdamW/LAMB work on sub-blocks of SUB elements: moments, sqrt, update */

/* x[i] = sqrtf(x[i]). Under -fmath-errno (the C default) gcc keeps every
 * sqrtf call scalar, since it may set errno, which makes AdamW several times
 * slower; so the square roots of a sub-block are taken here, with the
 * target's vector instruction where it has one (IEEE sqrt either way, so the
 * results are the same as sqrtf's). */
static void sqrt_inplace(float *x, int n)
{
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        x[i] = sqrtf(x[i]);
}

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

static col_status check_step(const col_opt_config *c, float lr, int64_t step, const col_opt_tensor *ts, int nt,
                             col_err *e)
{
    col_status st = col_opt_validate(c, e);
    if (st != COL_OK)
        return st;
    const char *k = col_opt_kind_name(c->kind);
    if (!nonneg(lr))
        return col_err_set(e, COL_EINVAL, "col_opt_step(%s): lr %g must be finite and >= 0", k, lr);
    if (step < 1)
        return col_err_set(e, COL_EINVAL, "col_opt_step(%s): step %lld must be >= 1 (steps are 1-based)", k,
                           (long long)step);
    if (nt < 0 || (nt > 0 && !ts))
        return col_err_set(e, COL_EINVAL, "col_opt_step(%s): bad tensor list (%d tensors, list %s)", k, nt,
                           ts ? "given" : "NULL");
    int slots = col_opt_state_slots(c->kind, c->momentum);
    for (int i = 0; i < nt; i++) {
        const col_opt_tensor *t = &ts[i];
        if (t->n < 0)
            return col_err_set(e, COL_EINVAL, "col_opt_step(%s): tensor %d has negative length %lld", k, i,
                               (long long)t->n);
        if (t->n == 0)
            continue;
        if (!t->w || !t->g)
            return col_err_set(e, COL_EINVAL, "col_opt_step(%s): tensor %d has a NULL %s", k, i,
                               !t->w ? "weight" : "gradient");
        if (slots >= 1 && !t->m)
            return col_err_set(e, COL_EINVAL, "col_opt_step(%s): tensor %d has no m state (%s needs %d state slot%s)",
                               k, i, k, slots, slots > 1 ? "s" : "");
        if (slots >= 2 && !t->v)
            return col_err_set(e, COL_EINVAL, "col_opt_step(%s): tensor %d has no v state (%s needs 2 state slots)", k,
                               i, k);
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
    const int mode = mu == 0.0f ? 0 : c->nesterov ? 2 : 1;
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

/* ---- AdamW (torch.optim.AdamW, amsgrad off) ----
 *   w = w - lr * wd * w                      (decoupled decay, before the moment update)
 *   m = b1 m + (1 - b1) g
 *   v = b2 v + (1 - b2) g^2
 *   w = w - lr * (m / (1 - b1^t)) / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *     (the same as lr * mhat / (sqrt(vhat) + eps); t = step, 1-based)
 */
static void adamw_tensor(const col_opt_config *c, float lr, int64_t step, const col_opt_tensor *t)
{
    float *restrict w = t->w, *restrict m = t->m, *restrict v = t->v;
    const float *restrict g = t->g;
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    const float omb1 = (float)(1.0 - (double)b1), omb2 = (float)(1.0 - (double)b2);
    const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float keep = t->decay ? (float)(1.0 - (double)lr * c->weight_decay) : 1.0f;
    int64_t n = t->n;
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        for (int64_t j = lo; j < hi; j += SUB) {
            int len = hi - j < SUB ? (int)(hi - j) : SUB;
            float *restrict wj = w + j, *restrict mj = m + j, *restrict vj = v + j;
            const float *restrict gj = g + j;
            float den[SUB];
#pragma omp simd
            for (int i = 0; i < len; i++) {
                float gi = gj[i];
                float mi = b1 * mj[i] + omb1 * gi;
                float vi = b2 * vj[i] + omb2 * gi * gi;
                mj[i] = mi;
                vj[i] = vi;
                den[i] = vi;
            }
            sqrt_inplace(den, len);
#pragma omp simd
            for (int i = 0; i < len; i++)
                wj[i] = wj[i] * keep - step_size * (mj[i] / (den[i] / bc2_sqrt + eps));
        }
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

/* u for SUB-element sub-block [j, j + len) from the updated m, v: sq is scratch */
static inline void lamb_u(const float *restrict m, const float *restrict v, const float *restrict w, int len,
                          float ibc1, float ibc2, float eps, float wd, float *restrict sq, float *restrict u)
{
#pragma omp simd
    for (int i = 0; i < len; i++)
        sq[i] = v[i] * ibc2;
    sqrt_inplace(sq, len);
#pragma omp simd
    for (int i = 0; i < len; i++)
        u[i] = (m[i] * ibc1) / (sq[i] + eps) + wd * w[i];
}

static void lamb_tensor(const col_opt_config *c, float lr, int64_t step, const col_opt_tensor *t)
{
    float *restrict w = t->w, *restrict m = t->m, *restrict v = t->v;
    const float *restrict g = t->g;
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = t->decay ? c->weight_decay : 0.0f;
    const float omb1 = (float)(1.0 - (double)b1), omb2 = (float)(1.0 - (double)b2);
    const float ibc1 = (float)(1.0 / (1.0 - pow(b1, (double)step)));
    const float ibc2 = (float)(1.0 / (1.0 - pow(b2, (double)step)));
    int64_t n = t->n;
    double pw[NBLK], pu[NBLK];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        double sw = 0, su = 0;
        for (int64_t j = lo; j < hi; j += SUB) {
            int len = hi - j < SUB ? (int)(hi - j) : SUB;
            float *restrict mj = m + j, *restrict vj = v + j;
            const float *restrict gj = g + j, *restrict wj = w + j;
            float sq[SUB], u[SUB];
#pragma omp simd
            for (int i = 0; i < len; i++) {
                float gi = gj[i];
                mj[i] = b1 * mj[i] + omb1 * gi;
                vj[i] = b2 * vj[i] + omb2 * gi * gi;
            }
            lamb_u(mj, vj, wj, len, ibc1, ibc2, eps, wd, sq, u);
#pragma omp simd reduction(+ : sw, su)
            for (int i = 0; i < len; i++) {
                sw += (double)wj[i] * wj[i];
                su += (double)u[i] * u[i];
            }
        }
        pw[b] = sw;
        pu[b] = su;
    }
    double sw = 0, su = 0;
    for (int b = 0; b < NBLK; b++)
        sw += pw[b], su += pu[b];
    double r1 = sqrt(sw), r2 = sqrt(su);
    double trust = r1 > 0 && r2 > 0 ? r1 / r2 : 1.0;
    const float a = (float)(lr * trust);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        int64_t lo, hi;
        blk_range(n, b, &lo, &hi);
        for (int64_t j = lo; j < hi; j += SUB) {
            int len = hi - j < SUB ? (int)(hi - j) : SUB;
            float *restrict wj = w + j;
            float sq[SUB], u[SUB];
            lamb_u(m + j, v + j, wj, len, ibc1, ibc2, eps, wd, sq, u);
#pragma omp simd
            for (int i = 0; i < len; i++)
                wj[i] -= a * u[i];
        }
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
        double sw = 0, sg = 0;
#pragma omp simd reduction(+ : sw, sg)
        for (int64_t i = lo; i < hi; i++) {
            sw += (double)w[i] * w[i];
            sg += (double)g[i] * g[i];
        }
        pw[b] = sw;
        pg[b] = sg;
    }
    double sw = 0, sg = 0;
    for (int b = 0; b < NBLK; b++)
        sw += pw[b], sg += pg[b];
    double rw = sqrt(sw), rg = sqrt(sg);
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
    col_status st = check_step(c, lr, step, ts, nt, e);
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

double col_grad_global_norm(const col_opt_tensor *ts, int nt)
{
    double s = 0;
    for (int i = 0; i < nt; i++)
        if (ts[i].n > 0)
            s += sumsq(ts[i].g, ts[i].n);
    return sqrt(s);
}

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
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0)
        return COL_OK;
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
    return COL_OK;
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
