/* scheduler.c - creating a scheduler, set_timesteps for each kind (the
 * timesteps and sigmas diffusers computes), and the noising functions.
 * The steps are in sched_step.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

static bool is_euler(const dm_sched *s)
{
    return s->cfg.kind == DM_SCHED_EULER || s->cfg.kind == DM_SCHED_EULER_A;
}

static bool is_dpm(const dm_sched *s)
{
    return s->cfg.kind == DM_SCHED_DPMPP_2M || s->cfg.kind == DM_SCHED_DPMPP_2M_KARRAS;
}

col_status dm_sched_create(const dm_sched_config *c, dm_sched **out, col_err *err)
{
    *out = NULL;
    if (!c)
        return col_err_set(err, COL_EINVAL, "scheduler: no config");
    col_status st = dm_sched_config_check(c, err);
    if (st != COL_OK)
        return st;
    dm_sched *s = calloc(1, sizeof *s);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    s->cfg = *c;
    s->cfg.trained_betas = NULL;
    if (c->trained_betas) {
        s->cfg.trained_betas = malloc(sizeof(float) * (size_t)c->num_train_timesteps);
        if (!s->cfg.trained_betas) {
            free(s);
            return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
        }
        memcpy(s->cfg.trained_betas, c->trained_betas, sizeof(float) * (size_t)c->num_train_timesteps);
    }
    st = dm_sched_tables(s, err);
    if (st != COL_OK) {
        dm_sched_free(s);
        return st;
    }
    *out = s;
    return COL_OK;
}

static void free_run(dm_sched *s)
{
    free(s->ts);
    free(s->ts_f);
    free(s->sigmas);
    s->ts = NULL, s->ts_f = NULL, s->sigmas = NULL;
    for (int i = 0; i < 4; i++)
        free(s->hist[i]), s->hist[i] = NULL;
    for (int i = 0; i < 3; i++)
        free(s->tmp[i]), s->tmp[i] = NULL;
    free(s->cur_mo);
    free(s->cur_sample);
    s->cur_mo = NULL, s->cur_sample = NULL;
    s->n = 0;
    s->n_hist = 0;
    s->lower_order_nums = 0;
    s->counter = 0;
    s->cur_mo_set = false;
    s->have_cur_sample = false;
    s->ready = false;
}

void dm_sched_free(dm_sched *s)
{
    if (!s)
        return;
    free_run(s);
    free(s->betas);
    free(s->acp);
    dm_sched_config_free(&s->cfg);
    free(s);
}

/* ---- the timesteps of each kind ---- */

/* DDIM, DDPM: integer timesteps by spacing (descending); the count, or -1 without memory */
static int spaced_int(const dm_sched *s, int n, int64_t **out)
{
    int T = s->T;
    int cap = n + 2;
    int64_t *ts = malloc(sizeof(int64_t) * (size_t)cap);
    double *d = malloc(sizeof(double) * (size_t)cap);
    int cnt = n;
    if (ts && d) {
        if (s->cfg.timestep_spacing == DM_SPACING_LINSPACE) {
            dm_np_linspace(0, T - 1, n, true, d);
            for (int i = 0; i < n; i++)
                ts[i] = (int64_t)dm_np_round(d[n - 1 - i]);
        } else if (s->cfg.timestep_spacing == DM_SPACING_LEADING) {
            int64_t ratio = T / n;
            for (int i = 0; i < n; i++)
                ts[i] = (int64_t)(n - 1 - i) * ratio + s->cfg.steps_offset;
        } else {
            double ratio = (double)T / n;
            cnt = dm_np_arange(T, 0, -ratio, d, cap);
            for (int i = 0; i < cnt && i < cap; i++)
                ts[i] = (int64_t)dm_np_round(d[i]) - 1;
            cnt = cnt < cap ? cnt : cap;
        }
    }
    free(d);
    if (!ts)
        return -1;
    *out = ts;
    return cnt;
}

static col_status set_pndm(dm_sched *s, int n, col_err *err)
{
    int T = s->T;
    double *d = malloc(sizeof(double) * (size_t)(n + 2));
    int64_t *asc = malloc(sizeof(int64_t) * (size_t)(n + 2));
    if (!d || !asc) {
        free(d), free(asc);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    }
    int m = n;
    if (s->cfg.timestep_spacing == DM_SPACING_LINSPACE) {
        dm_np_linspace(0, T - 1, n, true, d);
        for (int i = 0; i < n; i++)
            asc[i] = (int64_t)dm_np_round(d[i]);
    } else if (s->cfg.timestep_spacing == DM_SPACING_LEADING) {
        int64_t ratio = T / n;
        for (int i = 0; i < n; i++)
            asc[i] = (int64_t)i * ratio + s->cfg.steps_offset;
    } else {
        m = dm_np_arange(T, 0, -((double)T / n), d, n + 2);
        m = m < n + 2 ? m : n + 2;
        for (int i = 0; i < m; i++)
            asc[i] = (int64_t)dm_np_round(d[m - 1 - i]) - 1;
    }
    free(d);
    int64_t *ts = malloc(sizeof(int64_t) * (size_t)(m + 16));
    if (!ts) {
        free(asc);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    }
    int k = 0;
    if (s->cfg.skip_prk_steps) {
        /* concat(ts[:-1], ts[-2:-1], ts[-1:]) reversed */
        int64_t tmp[3];
        int nt = 0;
        if (m >= 2)
            tmp[nt++] = asc[m - 2];
        tmp[nt++] = asc[m - 1];
        for (int i = nt - 1; i >= 0; i--)
            ts[k++] = tmp[i];
        for (int i = m - 2; i >= 0; i--)
            ts[k++] = asc[i];
        s->n_prk = 0;
    } else {
        if (m < 4) {
            free(asc), free(ts);
            return col_err_set(err, COL_EINVAL, "scheduler: pndm with PRK steps needs at least 4 steps, not %d", n);
        }
        int64_t half = T / n / 2, p8[8], p14[14];
        for (int i = 0; i < 4; i++)
            p8[2 * i] = asc[m - 4 + i], p8[2 * i + 1] = asc[m - 4 + i] + half;
        for (int i = 0; i < 7; i++)
            p14[2 * i] = p14[2 * i + 1] = p8[i];
        for (int i = 12; i >= 1; i--)   /* [1:-1] reversed */
            ts[k++] = p14[i];
        s->n_prk = 12;
        for (int i = m - 4; i >= 0; i--)
            ts[k++] = asc[i];
    }
    free(asc);
    s->ts = ts;
    s->n_ts = k;
    s->n_inference = n;
    return COL_OK;
}

/* euler, euler-a: float32 timesteps and the sigmas */
static col_status set_euler(dm_sched *s, int n, col_err *err)
{
    int T = s->T;
    int cap = n + 2;
    double *d = malloc(sizeof(double) * (size_t)(cap > T ? cap : T) * 2);
    float *tsf = malloc(sizeof(float) * (size_t)cap);
    float *tab = malloc(sizeof(float) * (size_t)T * 2);
    if (!d || !tsf || !tab) {
        free(d), free(tsf), free(tab);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    }
    int cnt = n;
    if (s->cfg.timestep_spacing == DM_SPACING_LINSPACE) {
        dm_np_linspace(0, T - 1, n, true, d);
        for (int i = 0; i < n; i++)
            tsf[i] = (float)d[n - 1 - i];
    } else if (s->cfg.timestep_spacing == DM_SPACING_LEADING) {
        int64_t ratio = T / n;
        for (int i = 0; i < n; i++) {
            float v = (float)((n - 1 - i) * ratio);
            tsf[i] = v + (float)s->cfg.steps_offset;
        }
    } else {
        cnt = dm_np_arange(T, 0, -((double)T / n), d, cap);
        cnt = cnt < cap ? cnt : cap;
        for (int i = 0; i < cnt; i++) {
            float v = (float)dm_np_round(d[i]);
            tsf[i] = v - 1.0f;
        }
    }
    float *sig_tab = tab, *log_sig = tab + T;
    double *fp = d + (cap > T ? cap : T);
    for (int i = 0; i < T; i++) {
        sig_tab[i] = dm_sigma_of_acp(s->acp[i]);
        log_sig[i] = dm_np_logf(sig_tab[i]);
        fp[i] = sig_tab[i];
    }
    double *sig = d;   /* the timesteps in d are used up */
    for (int i = 0; i < cnt; i++)
        sig[i] = dm_np_interp((double)tsf[i], fp, T);
    if (s->cfg.kind == DM_SCHED_EULER && s->cfg.use_karras_sigmas) {
        double lo = s->cfg.has_sigma_min ? s->cfg.sigma_min : sig[cnt - 1];
        double hi = s->cfg.has_sigma_max ? s->cfg.sigma_max : sig[0];
        dm_karras(lo, hi, cnt, sig);
        for (int i = 0; i < cnt; i++)
            tsf[i] = (float)dm_sigma_to_t(sig[i], log_sig, T);
    }
    float *sigmas = malloc(sizeof(float) * (size_t)(cnt + 1));
    if (!sigmas) {
        free(d), free(tsf), free(tab);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    }
    for (int i = 0; i < cnt; i++)
        sigmas[i] = (float)sig[i];
    bool sigma_min_last = s->cfg.kind == DM_SCHED_EULER && s->cfg.final_sigmas_type == DM_FINAL_SIGMA_MIN;
    sigmas[cnt] = sigma_min_last ? dm_sigma_of_acp(s->acp[0]) : 0.0f;
    if (s->cfg.kind == DM_SCHED_EULER && s->cfg.continuous_timesteps && s->cfg.prediction_type == DM_PRED_V)
        for (int i = 0; i < cnt; i++) {
            float l = logf(sigmas[i]);
            tsf[i] = 0.25f * l;
        }
    free(d), free(tab);
    float mx = sigmas[0];
    for (int i = 1; i <= cnt; i++)
        mx = sigmas[i] > mx ? sigmas[i] : mx;
    if (s->cfg.timestep_spacing == DM_SPACING_LEADING) {
        float m2 = mx * mx;
        m2 = m2 + 1.0f;
        mx = sqrtf(m2);
    }
    s->init_sigma = mx;
    s->ts_f = tsf;
    s->sigmas = sigmas;
    s->n_ts = cnt;
    s->n_inference = n;
    return COL_OK;
}

static col_status set_dpm(dm_sched *s, int n, col_err *err)
{
    int T = s->T;
    int cap = n + 2;
    double *d = malloc(sizeof(double) * (size_t)(cap + T));
    float *tab = malloc(sizeof(float) * (size_t)T * 2);
    int64_t *ts = malloc(sizeof(int64_t) * (size_t)cap);
    float *sigmas = malloc(sizeof(float) * (size_t)(cap + 1));
    if (!d || !tab || !ts || !sigmas) {
        free(d), free(tab), free(ts), free(sigmas);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    }
    int last = T;
    if (s->cfg.lambda_min_clipped > -INFINITY) {
        /* searchsorted(flip(lambda_t), lambda_min_clipped): lambda_t = log(alpha_t) - log(sigma_t) */
        int idx = 0;
        while (idx < T) {
            float a = s->acp[T - 1 - idx];
            float at = sqrtf(a), st = sqrtf(1.0f - a);
            float lam = logf(at) - logf(st);
            if (!(lam < (float)s->cfg.lambda_min_clipped))
                break;
            idx++;
        }
        last = T - idx;
    }
    int cnt = n;
    if (s->cfg.timestep_spacing == DM_SPACING_LINSPACE) {
        dm_np_linspace(0, last - 1, n + 1, true, d);
        for (int i = 0; i < n; i++)
            ts[i] = (int64_t)dm_np_round(d[n - i]);
    } else if (s->cfg.timestep_spacing == DM_SPACING_LEADING) {
        int64_t ratio = last / (n + 1);
        for (int i = 0; i < n; i++)
            ts[i] = (int64_t)(n - i) * ratio + s->cfg.steps_offset;
    } else {
        cnt = dm_np_arange(last, 0, -((double)T / n), d, cap);
        cnt = cnt < cap ? cnt : cap;
        for (int i = 0; i < cnt; i++)
            ts[i] = (int64_t)dm_np_round(d[i]) - 1;
    }
    float *sig_tab = tab, *log_sig = tab + T;
    double *fp = d + cap;
    for (int i = 0; i < T; i++) {
        sig_tab[i] = dm_sigma_of_acp(s->acp[i]);
        log_sig[i] = dm_np_logf(sig_tab[i]);
        fp[i] = sig_tab[i];
    }
    if (s->cfg.use_karras_sigmas) {
        cnt = n;
        dm_karras(sig_tab[0], sig_tab[T - 1], n, d);
        for (int i = 0; i < n; i++) {
            double t = dm_sigma_to_t(d[i], log_sig, T);
            if (s->cfg.beta_schedule != DM_BETA_SQUAREDCOS_CAP_V2)
                t = dm_np_round(t);
            ts[i] = isfinite(t) ? (int64_t)t : 0;   /* torch's float64 -> int64: toward zero */
        }
    } else {
        for (int i = 0; i < cnt; i++)
            d[i] = dm_np_interp((double)ts[i], fp, T);
    }
    for (int i = 0; i < cnt; i++)
        sigmas[i] = (float)d[i];
    sigmas[cnt] = s->cfg.final_sigmas_type == DM_FINAL_SIGMA_MIN ? dm_sigma_of_acp(s->acp[0]) : 0.0f;
    free(d), free(tab);
    s->ts = ts;
    s->sigmas = sigmas;
    s->n_ts = cnt;
    s->n_inference = cnt;
    s->init_sigma = 1.0f;
    return COL_OK;
}

static col_status set_lcm(dm_sched *s, int n, double strength, col_err *err)
{
    int T = s->T, orig = s->cfg.original_inference_steps;
    int k = T / orig;
    int len = (int)((double)orig * strength);
    if (n > T)
        return col_err_set(err, COL_EINVAL, "scheduler: %d steps exceed num_train_timesteps %d", n, T);
    if (len / n < 1)
        return col_err_set(err, COL_EINVAL,
                           "scheduler: lcm with original_inference_steps %d and strength %g has %d timesteps, fewer "
                           "than the %d steps asked for",
                           orig, strength, len, n);
    if (n > orig)
        return col_err_set(err, COL_EINVAL, "scheduler: lcm steps %d exceed original_inference_steps %d", n, orig);
    int64_t *ts = malloc(sizeof(int64_t) * (size_t)n);
    double *d = malloc(sizeof(double) * (size_t)n);
    if (!ts || !d) {
        free(ts), free(d);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
    }
    dm_np_linspace(0, len, n, false, d);
    for (int i = 0; i < n; i++) {
        int64_t idx = (int64_t)floor(d[i]);
        /* origin reversed: element idx is (len - idx) * k - 1 */
        ts[i] = (int64_t)(len - idx) * k - 1;
    }
    free(d);
    s->ts = ts;
    s->n_ts = n;
    s->n_inference = n;
    return COL_OK;
}

col_status dm_sched_set_timesteps(dm_sched *s, int steps, double strength, col_err *err)
{
    if (!s)
        return col_err_set(err, COL_EINVAL, "scheduler: none given");
    if (steps < 1 || steps > s->T)
        return col_err_set(err, COL_EINVAL, "scheduler: %d steps is not in 1..num_train_timesteps (%d)", steps, s->T);
    if (!(strength > 0 && strength <= 1))
        return col_err_set(err, COL_EINVAL, "scheduler: strength %g is not in (0, 1]", strength);
    free_run(s);
    s->init_sigma = 1.0f;
    s->begin = 0;
    col_status st;
    switch (s->cfg.kind) {
    case DM_SCHED_DDIM:
    case DM_SCHED_DDPM: {
        int cnt = spaced_int(s, steps, &s->ts);
        if (cnt < 0)
            return col_err_set(err, COL_ENOMEM, "scheduler: out of memory");
        s->n_ts = cnt;
        s->n_inference = steps;
        st = COL_OK;
        break;
    }
    case DM_SCHED_PNDM:
        st = set_pndm(s, steps, err);
        break;
    case DM_SCHED_EULER:
    case DM_SCHED_EULER_A:
        st = set_euler(s, steps, err);
        break;
    case DM_SCHED_LCM:
        st = set_lcm(s, steps, strength, err);
        break;
    default:
        st = set_dpm(s, steps, err);
        break;
    }
    if (st != COL_OK) {
        free_run(s);
        return st;
    }
    for (int i = 0; s->ts && i < s->n_ts; i++)
        if (s->ts[i] < -1 || s->ts[i] >= s->T) {
            /* diffusers fails here with an IndexError */
            col_err_set(err, COL_EINVAL,
                        "scheduler: %d steps with steps_offset %d give timestep %lld, outside 0..%d", steps,
                        s->cfg.steps_offset, (long long)s->ts[i], s->T - 1);
            free_run(s);
            return COL_EINVAL;
        }
    if (s->cfg.kind != DM_SCHED_LCM && strength < 1) {
        /* StableDiffusionImg2ImgPipeline.get_timesteps */
        int init = (int)((double)steps * strength);
        init = init < steps ? init : steps;
        int t_start = steps - init > 0 ? steps - init : 0;
        if (t_start >= s->n_ts) {
            free_run(s);
            return col_err_set(err, COL_EINVAL, "scheduler: strength %g leaves none of the %d steps", strength, steps);
        }
        s->begin = t_start;
    }
    s->index = s->begin;
    s->ready = true;
    return COL_OK;
}

int dm_sched_num_steps(const dm_sched *s)
{
    return s && s->ready ? s->n_ts - s->begin : 0;
}

double dm_sched_timestep(const dm_sched *s, int i)
{
    if (!s || !s->ready || i < 0 || i >= s->n_ts - s->begin)
        return NAN;
    int j = s->begin + i;
    return s->ts_f ? (double)s->ts_f[j] : (double)s->ts[j];
}

float dm_sched_init_noise_sigma(const dm_sched *s)
{
    return s && s->ready ? s->init_sigma : 1.0f;
}

const float *dm_sched_sigmas(const dm_sched *s, int *count)
{
    if (!s || !s->ready || !s->sigmas) {
        if (count)
            *count = 0;
        return NULL;
    }
    if (count)
        *count = s->n_ts + 1;
    return s->sigmas;
}

const float *dm_sched_alphas_cumprod(const dm_sched *s)
{
    return s ? s->acp : NULL;
}

const float *dm_sched_betas(const dm_sched *s)
{
    return s ? s->betas : NULL;
}

/* ---- noising ---- */

/* alphas_cumprod[t] with Python's negative indexing (a trailing schedule can hold -1) */
static float acp_at(const dm_sched *s, int64_t t)
{
    return s->acp[t < 0 ? t + s->T : t];
}

static void noise_acp(float acp, const float *orig, const float *noise, float *out, int64_t n)
{
    float sa = sqrtf(acp);
    float om = 1.0f - acp;
    float sb = sqrtf(om);
    for (int64_t i = 0; i < n; i++) {
        float a = sa * orig[i];
        float b = sb * noise[i];
        out[i] = a + b;
    }
}

col_status dm_sched_add_noise_start(const dm_sched *s, const float *orig, const float *noise, float *out, int64_t n,
                                    col_err *err)
{
    if (!s || !s->ready)
        return col_err_set(err, COL_ESTATE, "scheduler: add_noise before set_timesteps");
    if (n < 0)
        return col_err_set(err, COL_EINVAL, "scheduler: %lld values", (long long)n);
    int j = s->begin;
    if (is_euler(s)) {
        float sg = s->sigmas[j];
        for (int64_t i = 0; i < n; i++) {
            float b = noise[i] * sg;
            out[i] = orig[i] + b;
        }
    } else if (is_dpm(s)) {
        float sg = s->sigmas[j];
        float q = sg * sg;
        q = q + 1.0f;
        float r = sqrtf(q);
        float at = 1.0f / r;
        float st = sg * at;
        for (int64_t i = 0; i < n; i++) {
            float a = at * orig[i];
            float b = st * noise[i];
            out[i] = a + b;
        }
    } else {
        noise_acp(acp_at(s, s->ts[j]), orig, noise, out, n);
    }
    return COL_OK;
}

static col_status check_train(const dm_sched *s, const int64_t *t, int batch, int64_t per, col_err *err)
{
    if (!s)
        return col_err_set(err, COL_EINVAL, "scheduler: none given");
    if (is_euler(s) || is_dpm(s))
        return col_err_set(err, COL_EUNSUPPORTED,
                           "scheduler: %s noises by its run's sigmas; training noise needs ddpm (or ddim, pndm, lcm)",
                           dm_sched_kind_name(s->cfg.kind));
    if (batch < 0 || per < 0)
        return col_err_set(err, COL_EINVAL, "scheduler: batch %d of %lld values", batch, (long long)per);
    for (int b = 0; b < batch; b++)
        if (t[b] < 0 || t[b] >= s->T)
            return col_err_set(err, COL_EINVAL, "scheduler: timestep %lld of item %d is not in 0..%d", (long long)t[b],
                               b, s->T - 1);
    return COL_OK;
}

col_status dm_sched_add_noise(const dm_sched *s, const float *orig, const float *noise, const int64_t *t, int batch,
                              int64_t per, float *out, col_err *err)
{
    col_status st = check_train(s, t, batch, per, err);
    if (st != COL_OK)
        return st;
    for (int b = 0; b < batch; b++)
        noise_acp(s->acp[t[b]], orig + b * per, noise + b * per, out + b * per, per);
    return COL_OK;
}

col_status dm_sched_get_velocity(const dm_sched *s, const float *sample, const float *noise, const int64_t *t,
                                 int batch, int64_t per, float *out, col_err *err)
{
    col_status st = check_train(s, t, batch, per, err);
    if (st != COL_OK)
        return st;
    for (int b = 0; b < batch; b++) {
        float acp = s->acp[t[b]];
        float sa = sqrtf(acp);
        float om = 1.0f - acp;
        float sb = sqrtf(om);
        const float *x = sample + b * per, *e = noise + b * per;
        float *o = out + b * per;
        for (int64_t i = 0; i < per; i++) {
            float a = sa * e[i];
            float c = sb * x[i];
            o[i] = a - c;
        }
    }
    return COL_OK;
}

void dm_sched_scale_model_input(const dm_sched *s, const float *in, float *out, int64_t n)
{
    if (s && s->ready && is_euler(s) && s->index < s->n_ts) {
        float sg = s->sigmas[s->index];
        float q = sg * sg;
        q = q + 1.0f;
        float r = sqrtf(q);
        for (int64_t i = 0; i < n; i++)
            out[i] = in[i] / r;
    } else if (out != in) {
        memmove(out, in, sizeof(float) * (size_t)n);
    }
}
