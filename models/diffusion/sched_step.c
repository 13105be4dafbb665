/* sched_step.c - one denoising step of each scheduler kind, as diffusers'
 * step() computes it: every tensor operation a float32 operation of its
 * own, in torch's order (a - b*c is a product rounded, then a difference;
 * 1 / x is torch's reciprocal). Scalars that diffusers keeps as 0-d float32
 * tensors are floats here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

static float acp_at(const dm_sched *s, int64_t t)
{
    return s->acp[t < 0 ? t + s->T : t];
}

static float clampf(float x, float lo, float hi)
{
    if (isnan(x))
        return x;
    float y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/* pred_original_sample of the alphas_cumprod kinds (ddim, ddpm, lcm) */
static void pred_x0(const dm_sched *s, float at, const float *m, const float *x, float *po, int64_t n)
{
    float bt = 1.0f - at;
    float sa = sqrtf(at), sb = sqrtf(bt);
    for (int64_t i = 0; i < n; i++) {
        float v;
        if (s->cfg.prediction_type == DM_PRED_EPSILON) {
            float p = sb * m[i];
            float d = x[i] - p;
            v = d / sa;
        } else if (s->cfg.prediction_type == DM_PRED_V) {
            float a = sa * x[i];
            float b = sb * m[i];
            v = a - b;
        } else {
            v = m[i];
        }
        po[i] = v;
    }
}

static void clip_x0(const dm_sched *s, float *po, int64_t n)
{
    if (!s->cfg.clip_sample)
        return;
    float r = (float)s->cfg.clip_sample_range;
    for (int64_t i = 0; i < n; i++)
        po[i] = clampf(po[i], -r, r);
}

static col_status need_gen(const dm_sched *s, const col_torch_gen *gen, col_err *err)
{
    if (!gen)
        return col_err_set(err, COL_EINVAL, "scheduler: %s draws noise at each step: a generator is needed",
                           dm_sched_kind_name(s->cfg.kind));
    return COL_OK;
}

static col_status step_ddim(dm_sched *s, const float *m, const float *x, float *prev, int64_t n, col_torch_gen *gen,
                            col_err *err)
{
    int64_t t = s->ts[s->index];
    int64_t pt = t - s->T / s->n_inference;
    float at = acp_at(s, t);
    float ap = pt >= 0 ? s->acp[pt] : s->final_acp;
    float bt = 1.0f - at;
    float *po = s->tmp[0], *pe = s->tmp[1];
    float sa = sqrtf(at), sb = sqrtf(bt);
    for (int64_t i = 0; i < n; i++) {
        if (s->cfg.prediction_type == DM_PRED_EPSILON) {
            float p = sb * m[i];
            float d = x[i] - p;
            po[i] = d / sa;
            pe[i] = m[i];
        } else if (s->cfg.prediction_type == DM_PRED_SAMPLE) {
            po[i] = m[i];
            float p = sa * po[i];
            float d = x[i] - p;
            pe[i] = d / sb;
        } else {
            float a = sa * x[i], b = sb * m[i];
            po[i] = a - b;
            float c = sa * m[i], e = sb * x[i];
            pe[i] = c + e;
        }
    }
    clip_x0(s, po, n);
    /* _get_variance */
    float bp = 1.0f - ap;
    float q = bp / bt;
    float r = at / ap;
    float var = q * (1.0f - r);
    float std = (float)s->cfg.eta * sqrtf(var);
    float dir2 = 1.0f - ap;
    dir2 = dir2 - std * std;
    float dcoef = sqrtf(dir2);
    float spa = sqrtf(ap);
    float *noise = s->tmp[2];
    if (s->cfg.eta > 0) {
        col_status st = need_gen(s, gen, err);
        if (st != COL_OK)
            return st;
        col_torch_randn(gen, noise, n);
    }
    for (int64_t i = 0; i < n; i++) {
        float a = spa * po[i];
        float b = dcoef * pe[i];
        float v = a + b;
        if (s->cfg.eta > 0) {
            float w = std * noise[i];
            v = v + w;
        }
        prev[i] = v;
    }
    return COL_OK;
}

static col_status step_ddpm(dm_sched *s, const float *m, const float *x, float *prev, int64_t n, col_torch_gen *gen,
                            col_err *err)
{
    int64_t t = s->ts[s->index];
    /* previous_timestep: the entry after the first equal to t, or -1 */
    int j = 0;
    while (j < s->n_ts && s->ts[j] != t)
        j++;
    int64_t pt = j >= s->n_ts - 1 ? -1 : s->ts[j + 1];
    float at = acp_at(s, t);
    float ap = pt >= 0 ? s->acp[pt] : 1.0f;
    float bt = 1.0f - at, bp = 1.0f - ap;
    float ca = at / ap;
    float cb = 1.0f - ca;
    float *po = s->tmp[0], *noise = s->tmp[1];
    pred_x0(s, at, m, x, po, n);
    clip_x0(s, po, n);
    float c1 = sqrtf(ap) * cb;
    c1 = c1 / bt;
    float c2 = sqrtf(ca) * bp;
    c2 = c2 / bt;
    float vcoef = 0;
    if (t > 0) {
        col_status st = need_gen(s, gen, err);
        if (st != COL_OK)
            return st;
        col_torch_randn(gen, noise, n);
        float q = (1.0f - ap) / (1.0f - at);
        float var = q * cb;
        var = var < 1e-20f ? 1e-20f : var;   /* torch.clamp(min=1e-20) (a NaN stays) */
        if (s->cfg.variance_type == DM_VAR_FIXED_SMALL) {
            vcoef = sqrtf(var);
        } else if (s->cfg.variance_type == DM_VAR_FIXED_SMALL_LOG) {
            float l = logf(var);
            vcoef = expf(0.5f * l);
        } else {
            vcoef = sqrtf(cb);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float a = c1 * po[i];
        float b = c2 * x[i];
        float v = a + b;
        if (t > 0) {
            float w = vcoef * noise[i];
            v = v + w;
        } else {
            v = v + 0.0f;
        }
        prev[i] = v;
    }
    return COL_OK;
}

static col_status step_lcm(dm_sched *s, const float *m, const float *x, float *prev, int64_t n, col_torch_gen *gen,
                           col_err *err)
{
    int64_t t = s->ts[s->index];
    int64_t pt = s->index + 1 < s->n_ts ? s->ts[s->index + 1] : t;
    float at = acp_at(s, t);
    float ap = pt >= 0 ? acp_at(s, pt) : s->final_acp;
    float bp = 1.0f - ap;
    float sc = (float)t * (float)s->cfg.timestep_scaling;
    float q = sc * sc;
    q = q + 0.25f;
    float c_skip = 1.0f / q;
    c_skip = c_skip * 0.25f;
    float c_out = sc / sqrtf(q);
    float *po = s->tmp[0], *noise = s->tmp[1];
    pred_x0(s, at, m, x, po, n);
    clip_x0(s, po, n);
    bool last = s->index == s->n_inference - 1;
    if (!last) {
        col_status st = need_gen(s, gen, err);
        if (st != COL_OK)
            return st;
        col_torch_randn(gen, noise, n);
    }
    float sa = sqrtf(ap), sb = sqrtf(bp);
    for (int64_t i = 0; i < n; i++) {
        float a = c_out * po[i];
        float b = c_skip * x[i];
        float den = a + b;
        if (!last) {
            float u = sa * den;
            float w = sb * noise[i];
            den = u + w;
        }
        prev[i] = den;
    }
    return COL_OK;
}

/* EulerDiscrete (s_churn 0) and EulerAncestralDiscrete */
static col_status step_euler(dm_sched *s, const float *m, const float *x, float *prev, int64_t n, col_torch_gen *gen,
                             col_err *err)
{
    bool anc = s->cfg.kind == DM_SCHED_EULER_A;
    float sigma = s->sigmas[s->index], next = s->sigmas[s->index + 1];
    float sh = anc ? sigma : sigma * 1.0f;   /* sigma_hat = sigma * (gamma + 1) */
    float q = sigma * sigma;
    q = q + 1.0f;
    float c1 = -sigma / sqrtf(q);
    float dt, su = 0;
    if (anc) {
        float sf2 = sigma * sigma, st2 = next * next;
        float a = st2 * (sf2 - st2);
        su = sqrtf(a / sf2);
        float sd = sqrtf(st2 - su * su);
        dt = sd - sigma;
    } else {
        dt = next - sh;
    }
    float *noise = s->tmp[0];
    if (anc) {
        col_status st = need_gen(s, gen, err);
        if (st != COL_OK)
            return st;
        col_torch_randn(gen, noise, n);
    }
    for (int64_t i = 0; i < n; i++) {
        float po;
        if (s->cfg.prediction_type == DM_PRED_EPSILON) {
            float p = sh * m[i];
            po = x[i] - p;
        } else if (s->cfg.prediction_type == DM_PRED_V) {
            float a = m[i] * c1;
            float b = x[i] / q;
            po = a + b;
        } else {
            po = m[i];
        }
        float dd = x[i] - po;
        float der = dd / sh;
        float w = der * dt;
        float v = x[i] + w;
        if (anc) {
            float z = noise[i] * su;
            v = v + z;
        }
        prev[i] = v;
    }
    return COL_OK;
}

/* _sigma_to_alpha_sigma_t and lambda = log(alpha) - log(sigma) */
static void dpm_coef(float sg, float *alpha, float *sigma, float *lambda)
{
    float q = sg * sg;
    q = q + 1.0f;
    float r = sqrtf(q);
    float a = 1.0f / r;
    a = a * 1.0f;
    float s = sg * a;
    *alpha = a, *sigma = s;
    *lambda = logf(a) - logf(s);
}

static col_status step_dpm(dm_sched *s, const float *m, const float *x, float *prev, int64_t n)
{
    int order = s->cfg.solver_order, idx = s->index;
    /* convert_model_output (dpmsolver++): x0 */
    float a0, s0, l0;
    dpm_coef(s->sigmas[idx], &a0, &s0, &l0);
    float *x0 = s->hist[0];   /* the oldest slot becomes the newest */
    for (int k = 0; k + 1 < order; k++)
        s->hist[k] = s->hist[k + 1];
    s->hist[order - 1] = x0;
    for (int64_t i = 0; i < n; i++) {
        if (s->cfg.prediction_type == DM_PRED_EPSILON) {
            float p = s0 * m[i];
            float d = x[i] - p;
            x0[i] = d / a0;
        } else if (s->cfg.prediction_type == DM_PRED_V) {
            float a = a0 * x[i], b = s0 * m[i];
            x0[i] = a - b;
        } else {
            x0[i] = m[i];
        }
    }
    bool last = idx == s->n_ts - 1, second_last = idx == s->n_ts - 2;
    bool lof = last && (s->cfg.euler_at_final || (s->cfg.lower_order_final && s->n_ts < 15) ||
                        s->cfg.final_sigmas_type == DM_FINAL_SIGMA_ZERO);
    bool los = second_last && s->cfg.lower_order_final && s->n_ts < 15;
    float at, st, lt;
    dpm_coef(s->sigmas[idx + 1], &at, &st, &lt);
    float h = lt - l0;
    float e = expf(-h);
    float em1 = e - 1.0f;
    float cs = st / s0;
    float c0 = at * em1;
    const float *m0 = s->hist[order - 1];
    if (order == 1 || s->lower_order_nums < 1 || lof) {
        for (int64_t i = 0; i < n; i++) {
            float a = cs * x[i], b = c0 * m0[i];
            prev[i] = a - b;
        }
    } else if (order == 2 || s->lower_order_nums < 2 || los) {
        float a1, s1, l1;
        dpm_coef(s->sigmas[idx - 1], &a1, &s1, &l1);
        float h0 = l0 - l1;
        float r0 = h0 / h;
        float inv_r0 = 1.0f / r0;
        inv_r0 = inv_r0 * 1.0f;
        const float *m1 = s->hist[order - 2];
        float c1;
        if (s->cfg.solver_heun) {
            float u = em1 / h;
            u = u + 1.0f;
            c1 = at * u;
        } else {
            c1 = 0.5f * c0;
        }
        for (int64_t i = 0; i < n; i++) {
            float dm = m0[i] - m1[i];
            float d1 = inv_r0 * dm;
            float a = cs * x[i], b = c0 * m0[i];
            float v = a - b;
            float w = c1 * d1;
            prev[i] = s->cfg.solver_heun ? v + w : v - w;
        }
    } else {
        float a1, s1, l1, a2, s2, l2;
        dpm_coef(s->sigmas[idx - 1], &a1, &s1, &l1);
        dpm_coef(s->sigmas[idx - 2], &a2, &s2, &l2);
        float h0 = l0 - l1, h1 = l1 - l2;
        float r0 = h0 / h, r1 = h1 / h;
        float inv_r0 = (1.0f / r0) * 1.0f, inv_r1 = (1.0f / r1) * 1.0f;
        float rs = r0 + r1;
        float k1 = r0 / rs;
        float k2 = (1.0f / rs) * 1.0f;
        const float *m1 = s->hist[order - 2], *m2 = s->hist[order - 3];
        float u = em1 / h;
        u = u + 1.0f;
        float c1 = at * u;
        float v2 = em1 + h;
        v2 = v2 / (h * h);
        v2 = v2 - 0.5f;
        float c2 = at * v2;
        for (int64_t i = 0; i < n; i++) {
            float d10 = inv_r0 * (m0[i] - m1[i]);
            float d11 = inv_r1 * (m1[i] - m2[i]);
            float dd = d10 - d11;
            float d1 = d10 + k1 * dd;
            float d2 = k2 * dd;
            float a = cs * x[i], b = c0 * m0[i];
            float v = a - b;
            v = v + c1 * d1;
            v = v - c2 * d2;
            prev[i] = v;
        }
    }
    if (s->lower_order_nums < order)
        s->lower_order_nums++;
    return COL_OK;
}

/* PNDMScheduler._get_prev_sample */
static void pndm_prev(const dm_sched *s, const float *x, int64_t t, int64_t pt, const float *mo, float *prev, int64_t n)
{
    float at = acp_at(s, t);
    float ap = pt >= 0 ? s->acp[pt] : s->final_acp;
    float bt = 1.0f - at, bp = 1.0f - ap;
    float sa = sqrtf(at), sb = sqrtf(bt);
    float sc = sqrtf(ap / at);
    float p1 = at * sqrtf(bp);
    float p2 = at * bt;
    p2 = p2 * ap;
    float den = p1 + sqrtf(p2);
    float dif = ap - at;
    for (int64_t i = 0; i < n; i++) {
        float e = mo[i];
        if (s->cfg.prediction_type == DM_PRED_V) {
            float a = sa * mo[i], b = sb * x[i];
            e = a + b;
        }
        float a = sc * x[i];
        float b = dif * e;
        b = b / den;
        prev[i] = a - b;
    }
}

static void ets_push(dm_sched *s, const float *mo, int64_t n)
{
    if (s->n_hist == 4) {   /* keep the last three */
        float *old = s->hist[0];
        s->hist[0] = s->hist[1], s->hist[1] = s->hist[2], s->hist[2] = s->hist[3], s->hist[3] = old;
        s->n_hist = 3;
    }
    memcpy(s->hist[s->n_hist++], mo, sizeof(float) * (size_t)n);
}

static col_status step_pndm(dm_sched *s, const float *m, const float *x, float *prev, int64_t n, col_err *err)
{
    int64_t t = s->ts[s->index];
    int T = s->T, N = s->n_inference;
    float *mo = s->tmp[0];
    if (s->counter < s->n_prk && !s->cfg.skip_prk_steps) {
        int64_t diff = s->counter % 2 ? 0 : T / N / 2;
        int64_t pt = t - diff;
        int64_t tt = s->ts[s->counter / 4 * 4];
        int ph = s->counter % 4;
        const float *use = m;   /* the model output _get_prev_sample gets */
        if (ph < 3) {
            float w = ph == 0 ? (float)(1.0 / 6) : (float)(1.0 / 3);
            for (int64_t i = 0; i < n; i++) {
                float v = w * m[i];
                /* cur_model_output starts as the integer 0: 0 + v is v + 0 */
                s->cur_mo[i] = s->cur_mo_set ? s->cur_mo[i] + v : v + 0.0f;
            }
            s->cur_mo_set = true;
            if (ph == 0) {
                ets_push(s, m, n);
                memcpy(s->cur_sample, x, sizeof(float) * (size_t)n);
                s->have_cur_sample = true;
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                float v = (float)(1.0 / 6) * m[i];
                mo[i] = s->cur_mo[i] + v;
            }
            s->cur_mo_set = false;
            use = mo;
        }
        const float *cs = s->have_cur_sample ? s->cur_sample : x;
        pndm_prev(s, cs, tt, pt, use, prev, n);
        s->counter++;
        return COL_OK;
    }
    if (!s->cfg.skip_prk_steps && s->n_hist < 3)
        return col_err_set(err, COL_ESTATE, "scheduler: pndm's PLMS steps need the PRK steps first");
    int64_t pt = t - T / N;
    const float *xs = x;
    if (s->counter != 1) {
        ets_push(s, m, n);
    } else {
        pt = t;
        t = t + T / N;
    }
    int k = s->n_hist;
    const float *e1 = k >= 1 ? s->hist[k - 1] : NULL, *e2 = k >= 2 ? s->hist[k - 2] : NULL;
    const float *e3 = k >= 3 ? s->hist[k - 3] : NULL, *e4 = k >= 4 ? s->hist[k - 4] : NULL;
    if (k == 1 && s->counter == 0) {
        memcpy(mo, m, sizeof(float) * (size_t)n);
        memcpy(s->cur_sample, x, sizeof(float) * (size_t)n);
        s->have_cur_sample = true;
    } else if (k == 1 && s->counter == 1) {
        for (int64_t i = 0; i < n; i++) {
            float v = m[i] + e1[i];
            mo[i] = v / 2.0f;
        }
        xs = s->cur_sample;   /* the sample of step 0; cur_sample is None afterwards */
        s->have_cur_sample = false;
    } else if (k == 2) {
        for (int64_t i = 0; i < n; i++) {
            float a = 3.0f * e1[i];
            float v = a - e2[i];
            mo[i] = v / 2.0f;
        }
    } else if (k == 3) {
        for (int64_t i = 0; i < n; i++) {
            float a = 23.0f * e1[i], b = 16.0f * e2[i], c = 5.0f * e3[i];
            float v = a - b;
            v = v + c;
            mo[i] = v / 12.0f;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float a = 55.0f * e1[i], b = 59.0f * e2[i], c = 37.0f * e3[i], d = 9.0f * e4[i];
            float v = a - b;
            v = v + c;
            v = v - d;
            mo[i] = (float)(1.0 / 24) * v;
        }
    }
    pndm_prev(s, xs, t, pt, mo, prev, n);
    s->counter++;
    return COL_OK;
}

/* buffers for a run over n values, at its first step */
static col_status alloc_state(dm_sched *s, int64_t n, col_err *err)
{
    size_t bytes = sizeof(float) * (size_t)(n > 0 ? n : 1);
    bool pndm = s->cfg.kind == DM_SCHED_PNDM, dpm = s->cfg.kind == DM_SCHED_DPMPP_2M ||
                                                    s->cfg.kind == DM_SCHED_DPMPP_2M_KARRAS;
    int nh = pndm ? 4 : dpm ? s->cfg.solver_order : 0;
    bool ok = true;
    for (int i = 0; i < nh; i++)
        ok = ok && (s->hist[i] = calloc(1, bytes)) != NULL;
    for (int i = 0; i < 3; i++)
        ok = ok && (s->tmp[i] = malloc(bytes)) != NULL;
    if (pndm)
        ok = ok && (s->cur_mo = calloc(1, bytes)) != NULL && (s->cur_sample = malloc(bytes)) != NULL;
    if (!ok)
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory for %lld latent values", (long long)n);
    s->n = n;
    s->n_hist = 0;
    return COL_OK;
}

col_status dm_sched_step(dm_sched *s, const float *model_output, const float *sample, float *prev, int64_t n,
                         col_torch_gen *gen, col_err *err)
{
    if (!s || !s->ready)
        return col_err_set(err, COL_ESTATE, "scheduler: step before set_timesteps");
    if (s->index >= s->n_ts)
        return col_err_set(err, COL_ESTATE, "scheduler: step past the last of %d steps", s->n_ts - s->begin);
    if (n <= 0 || !model_output || !sample || !prev)
        return col_err_set(err, COL_EINVAL, "scheduler: step over %lld values", (long long)n);
    if (s->n == 0) {
        col_status st = alloc_state(s, n, err);
        if (st != COL_OK)
            return st;
    } else if (s->n != n) {
        return col_err_set(err, COL_EINVAL, "scheduler: step over %lld values in a run over %lld", (long long)n,
                           (long long)s->n);
    }
    col_status st;
    switch (s->cfg.kind) {
    case DM_SCHED_DDIM:
        st = step_ddim(s, model_output, sample, prev, n, gen, err);
        break;
    case DM_SCHED_DDPM:
        st = step_ddpm(s, model_output, sample, prev, n, gen, err);
        break;
    case DM_SCHED_LCM:
        st = step_lcm(s, model_output, sample, prev, n, gen, err);
        break;
    case DM_SCHED_EULER:
    case DM_SCHED_EULER_A:
        st = step_euler(s, model_output, sample, prev, n, gen, err);
        break;
    case DM_SCHED_PNDM:
        st = step_pndm(s, model_output, sample, prev, n, err);
        break;
    default:
        st = step_dpm(s, model_output, sample, prev, n);
        break;
    }
    if (st == COL_OK)
        s->index++;
    return st;
}
