/* sched_tables.c - the schedulers' train-time tables (torch float32, as
 * diffusers' __init__ computes them) and the numpy float64 arithmetic of
 * set_timesteps (linspace, arange, interp, round, log).
 *
 * Every rounding step is its own statement; the fused multiply-adds of
 * torch's build (torch.linspace) are explicit fmaf. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

/* torch.linspace(start, end, steps, dtype=float32): start and end rounded to
 * float, step = (end - start) / (steps - 1) in float, then the first half
 * from start and the second from end, each one fused multiply-add. */
static void torch_linspace_f32(double start_d, double end_d, int steps, float *out)
{
    float start = (float)start_d, end = (float)end_d;
    if (steps == 1) {
        out[0] = start;
        return;
    }
    float diff = end - start;
    float step = diff / (float)(steps - 1);
    int half = steps / 2;
    for (int i = 0; i < steps; i++)
        out[i] = i < half ? fmaf(step, (float)i, start) : fmaf(-step, (float)(steps - i - 1), end);
}

/* betas_for_alpha_bar(T) with the cosine alpha_bar, in Python's double arithmetic */
static double alpha_bar_cos(double t)
{
    double c = cos((t + 0.008) / 1.008 * M_PI / 2);
    return c * c;
}

/* torch.cumprod of float32 values: accumulated in double, each prefix rounded to float */
static void cumprod_f32(const float *x, int n, float *out)
{
    double acc = 1.0;
    for (int i = 0; i < n; i++) {
        acc *= (double)x[i];
        out[i] = (float)acc;
    }
}

/* diffusers' rescale_zero_terminal_snr on betas (float32 torch ops) */
static void rescale_zero_snr(float *betas, int T, float *work)
{
    if (T < 2)
        return;
    for (int i = 0; i < T; i++)
        work[i] = 1.0f - betas[i];
    cumprod_f32(work, T, work);
    for (int i = 0; i < T; i++)
        work[i] = sqrtf(work[i]);
    float s0 = work[0], sT = work[T - 1];
    for (int i = 0; i < T; i++)
        work[i] = work[i] - sT;
    float den = s0 - sT;
    float scale = s0 / den;
    for (int i = 0; i < T; i++)
        work[i] = work[i] * scale;
    for (int i = 0; i < T; i++)
        work[i] = work[i] * work[i];   /* alphas_bar */
    /* alphas = [bar[0], bar[1:] / bar[:-1]]; betas = 1 - alphas (from the last, so bar[i-1] is still there) */
    for (int i = T - 1; i >= 1; i--) {
        float a = work[i] / work[i - 1];
        betas[i] = 1.0f - a;
    }
    betas[0] = 1.0f - work[0];
}

col_status dm_sched_tables(dm_sched *s, col_err *err)
{
    const dm_sched_config *c = &s->cfg;
    int T = c->num_train_timesteps;
    s->T = T;
    s->betas = malloc(sizeof(float) * (size_t)T);
    s->acp = malloc(sizeof(float) * (size_t)T);
    float *work = malloc(sizeof(float) * (size_t)T);
    if (!s->betas || !s->acp || !work) {
        free(work);
        return col_err_set(err, COL_ENOMEM, "scheduler: out of memory for %d train timesteps", T);
    }
    if (c->trained_betas) {
        memcpy(s->betas, c->trained_betas, sizeof(float) * (size_t)T);
    } else if (c->beta_schedule == DM_BETA_LINEAR) {
        torch_linspace_f32(c->beta_start, c->beta_end, T, s->betas);
    } else if (c->beta_schedule == DM_BETA_SCALED_LINEAR) {
        /* Python's beta_start**0.5 is pow(), not sqrt() */
        torch_linspace_f32(pow(c->beta_start, 0.5), pow(c->beta_end, 0.5), T, s->betas);
        for (int i = 0; i < T; i++)
            s->betas[i] = s->betas[i] * s->betas[i];
    } else {
        for (int i = 0; i < T; i++) {
            double t1 = (double)i / T, t2 = (double)(i + 1) / T;
            double b = 1 - alpha_bar_cos(t2) / alpha_bar_cos(t1);
            s->betas[i] = (float)(b < 0.999 ? b : 0.999);
        }
    }
    if (c->rescale_betas_zero_snr)
        rescale_zero_snr(s->betas, T, work);
    for (int i = 0; i < T; i++)
        work[i] = 1.0f - s->betas[i];
    cumprod_f32(work, T, s->acp);
    free(work);
    bool euler_like = c->kind == DM_SCHED_EULER || c->kind == DM_SCHED_EULER_A || c->kind == DM_SCHED_DPMPP_2M ||
                      c->kind == DM_SCHED_DPMPP_2M_KARRAS;
    if (c->rescale_betas_zero_snr && euler_like)
        s->acp[T - 1] = 0x1p-24f;
    s->final_acp = c->set_alpha_to_one ? 1.0f : s->acp[0];
    return COL_OK;
}

float dm_sigma_of_acp(float acp)
{
    float a = 1.0f - acp;
    float q = a / acp;
    return sqrtf(q);
}

/* ---- numpy ---- */

void dm_np_linspace(double start, double stop, int num, bool endpoint, double *out)
{
    int div = endpoint ? num - 1 : num;
    double delta = stop - start;
    if (div > 0) {
        double step = delta / div;
        for (int i = 0; i < num; i++) {
            double y;
            if (step == 0) {
                y = (double)i / div;
                y = y * delta;
            } else {
                y = (double)i * step;
            }
            out[i] = y + start;
        }
    } else {
        for (int i = 0; i < num; i++)
            out[i] = (double)i * delta + start;
    }
    if (endpoint && num > 1)
        out[num - 1] = stop;
}

int dm_np_arange(double start, double stop, double step, double *out, int cap)
{
    /* the length from (stop - start) / step; the values from start and the
     * difference of the first two, as numpy's fill does */
    double len_d = ceil((stop - start) / step);
    int len = len_d > 0 ? (int)len_d : 0;
    double second = start + step;
    double delta = second - start;
    for (int i = 0; i < len && i < cap; i++)
        out[i] = i == 0 ? start : i == 1 ? second : start + (double)i * delta;
    return len;
}

double dm_np_interp(double x, const double *fp, int len)
{
    /* xp = 0, 1, ..., len - 1 */
    if (isnan(x))
        return x;
    if (x < 0)
        return fp[0];
    if (x > (double)(len - 1))
        return fp[len - 1];
    int j = (int)floor(x);   /* xp[j] <= x < xp[j + 1] */
    if (j >= len - 1)
        return fp[len - 1];
    if ((double)j == x)
        return fp[j];
    double slope = (fp[j + 1] - fp[j]) / 1.0;
    double d = x - (double)j;
    double r = slope * d;
    r = r + fp[j];
    if (isnan(r)) {
        double d1 = x - (double)(j + 1);
        r = slope * d1;
        r = r + fp[j + 1];
        if (isnan(r) && fp[j] == fp[j + 1])
            r = fp[j];
    }
    return r;
}

double dm_np_round(double x)
{
    return nearbyint(x);   /* the default rounding mode: half to even, as numpy.round */
}

float dm_np_logf(float xin)
{
    if (isnan(xin))
        return xin;
    if (xin < 0)
        return -NAN;
    if (xin == 0)
        return -INFINITY;
    if (isinf(xin))
        return xin;
    uint32_t b;
    memcpy(&b, &xin, 4);
    float e;
    if (xin < 0x1p-126f) {   /* subnormal: scaled by 2^100 first */
        float xs = xin * 0x1p100f;
        memcpy(&b, &xs, 4);
        e = (float)((int32_t)(b >> 23) - 126);
        e = e - 100.0f;
    } else {
        e = (float)((int32_t)(b >> 23) - 126);
    }
    uint32_t mb = (b & 0x7fffffu) | (126u << 23);
    float m;
    memcpy(&m, &mb, 4);
    if (m <= 0x1.6a09e6p-1f) {   /* sqrt(1/2) as a float */
        m = m + m;
        e = e - 1.0f;
    }
    float x = m - 1.0f;
    /* numpy's coefficients (npy_simd_data.h), rounded to float as there */
    float num = fmaf(2.589979117907922693523e-02f, x, 3.808837741388407920751e-01f);
    num = fmaf(num, x, 1.480000633576506585156e+00f);
    num = fmaf(num, x, 2.112677543073053063722e+00f);
    num = fmaf(num, x, 9.999999999999998702752e-01f);
    num = fmaf(num, x, 0.0f);
    float den = fmaf(5.875095403124574342950e-03f, x, 1.546476374983906719538e-01f);
    den = fmaf(den, x, 9.864942958519418960339e-01f);
    den = fmaf(den, x, 2.453006071784736363091e+00f);
    den = fmaf(den, x, 2.612677543073109236779e+00f);
    den = fmaf(den, x, 1.0f);
    float p = num / den;
    return fmaf(e, 0.693147180559945309417232121458176568f, p);
}

void dm_karras(double sigma_min, double sigma_max, int num, double *out)
{
    const double rho = 7.0;
    double min_inv = pow(sigma_min, 1 / rho), max_inv = pow(sigma_max, 1 / rho);
    dm_np_linspace(0, 1, num, true, out);
    double d = min_inv - max_inv;
    for (int i = 0; i < num; i++) {
        double r = out[i] * d;
        r = max_inv + r;
        out[i] = pow(r, rho);
    }
}

double dm_sigma_to_t(double sigma, const float *log_sigmas, int T)
{
    double ls = log(sigma > 1e-10 ? sigma : 1e-10);
    /* low = the last i with log_sigma - log_sigmas[i] >= 0 (the first index of the
     * largest running count; 0 if none), at most T - 2 */
    int low = 0, count = 0, best = 0;
    for (int i = 0; i < T; i++) {
        if (ls - (double)log_sigmas[i] >= 0)
            count++;
        if (count > best) {
            best = count;
            low = i;
        }
    }
    if (low > T - 2)
        low = T - 2;
    float lo = log_sigmas[low], hi = log_sigmas[low + 1];
    float dlh = lo - hi;   /* float32 - float32 in numpy */
    double w = ((double)lo - ls) / (double)dlh;
    w = w < 0 ? 0 : w > 1 ? 1 : w;
    double a = (1 - w) * low;
    double b = w * (low + 1);
    return a + b;
}
