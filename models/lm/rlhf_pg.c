/* rlhf_pg.c - the policy-gradient objectives: GRPO (group-normalised
 * advantages, clipped token-level ratio, k3 KL to the reference) and PPO
 * (k1 KL penalty, score at the last token, GAE, whitening, clipped policy
 * and value losses), with their derivatives (rlhf_loss.h; docs/RLHF.md).
 *
 * The derivatives follow torch's autograd conventions at the ties so that they
 * equal TRL's exactly: clamp passes the gradient on its closed interval, and
 * min / max of two equal values send half of it to each side. */
#include "rlhf_loss.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- argument checks ---- */

static col_status check_shape(const char *loss, int B, int T, col_err *err)
{
    if (B <= 0 || T <= 0)
        return col_err_set(err, COL_EINVAL, "%s: the batch is %d x %d (needs at least 1 x 1)", loss, B, T);
    if ((long long)B * T > (long long)(SIZE_MAX / sizeof(double)) || (long long)B * T > INT32_MAX)
        return col_err_set(err, COL_EINVAL, "%s: the batch of %d x %d positions is too large", loss, B, T);
    return COL_OK;
}

static col_status check_mask(const char *loss, const uint8_t *mask, size_t n, col_err *err)
{
    if (!mask)
        return col_err_set(err, COL_EINVAL, "%s: the completion mask is missing", loss);
    for (size_t i = 0; i < n; i++)
        if (mask[i] > 1)
            return col_err_set(err, COL_EINVAL, "%s: completion mask entry %zu is %u (must be 0 or 1)", loss, i,
                               (unsigned)mask[i]);
    return COL_OK;
}

/* a [B, T] float input: present and finite where mask is 1 (mask NULL: everywhere) */
static col_status check_tokens(const char *loss, const char *what, const float *a, const uint8_t *mask, int B,
                               int T, col_err *err)
{
    if (!a)
        return col_err_set(err, COL_EINVAL, "%s: the %s are missing", loss, what);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            if ((!mask || mask[i]) && !isfinite(a[i]))
                return col_err_set(err, COL_EINVAL, "%s: %s [%d, %d] is not finite (%g)", loss, what, b, t,
                                   (double)a[i]);
        }
    return COL_OK;
}

static col_status check_setting(const char *loss, const char *what, double v, double lo, double hi, bool inf_ok,
                                col_err *err)
{
    if (isnan(v) || (!inf_ok && isinf(v)) || v < lo || v > hi)
        return col_err_set(err, COL_EINVAL, "%s: %s must lie in [%g, %g]%s (got %g)", loss, what, lo, hi,
                           inf_ok ? " or be infinite" : "", v);
    return COL_OK;
}

/* the gradient of min(a, b) / max(a, b) reaching a and b as torch splits it */
static void pick_grad(double a, double b, bool want_max, double *ga, double *gb)
{
    if (a == b) {
        *ga = *gb = 0.5;
        return;
    }
    bool a_wins = want_max ? a > b : a < b;
    *ga = a_wins ? 1.0 : 0.0;
    *gb = a_wins ? 0.0 : 1.0;
}

static double clampd(double x, double lo, double hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* ---- GRPO ---- */

col_status col_grpo_advantages(int n_groups, int G, const float *rewards, bool scale_rewards, float *adv,
                               col_rl_stats *s, col_err *err)
{
    static const char *loss = "GRPO advantages";
    if (n_groups <= 0 || G <= 0)
        return col_err_set(err, COL_EINVAL, "%s: %d groups of %d generations (needs at least 1 of 1)", loss,
                           n_groups, G);
    if ((long long)n_groups * G > INT32_MAX)
        return col_err_set(err, COL_EINVAL, "%s: %d groups of %d generations is too many", loss, n_groups, G);
    if (!rewards || !adv)
        return col_err_set(err, COL_EINVAL, "%s: the rewards or the advantage array are missing", loss);
    const int n = n_groups * G;
    for (int i = 0; i < n; i++)
        if (isinf(rewards[i]))
            return col_err_set(err, COL_EINVAL, "%s: reward %d is infinite (NaN marks an unscorable completion)",
                               loss, i);
    int zero_std = 0;
    for (int g = 0; g < n_groups; g++) {
        const float *r = rewards + (size_t)g * G;
        double sum = 0, ss = 0;
        int cnt = 0;
        for (int j = 0; j < G; j++)
            if (!isnan(r[j])) {
                sum += r[j];
                cnt++;
            }
        double mean = cnt ? sum / cnt : NAN, std = 0;
        if (G > 1) {
            for (int j = 0; j < G; j++)
                if (!isnan(r[j]))
                    ss += ((double)r[j] - mean) * ((double)r[j] - mean);
            /* TRL's nanstd: the mean square times count / (count - 1), NaN below two values */
            std = cnt > 1 ? sqrt(ss / cnt * ((double)cnt / (cnt - 1))) : NAN;
        }
        if (fabs(std) <= 1e-8) /* torch.isclose(std, 0): NaN is not close */
            zero_std += G;
        for (int j = 0; j < G; j++) {
            double a = (double)r[j] - mean;
            if (scale_rewards)
                a /= std + 1e-4;
            adv[(size_t)g * G + j] = isnan(a) ? 0.0f : (float)a;
        }
    }
    if (s) {
        double sum = 0, ss = 0;
        int cnt = 0;
        for (int i = 0; i < n; i++)
            if (!isnan(rewards[i])) {
                sum += rewards[i];
                cnt++;
            }
        double mean = cnt ? sum / cnt : NAN;
        for (int i = 0; i < n; i++)
            if (!isnan(rewards[i]))
                ss += ((double)rewards[i] - mean) * ((double)rewards[i] - mean);
        s->reward_mean = mean;
        s->reward_std = cnt > 1 ? sqrt(ss / cnt * ((double)cnt / (cnt - 1))) : NAN;
        s->frac_reward_zero_std = (double)zero_std / n;
    }
    return COL_OK;
}

col_status col_grpo_loss(const col_grpo_cfg *c, int B, int T, const float *logp, const float *old_logp,
                         const float *ref_logp, const uint8_t *mask, const float *adv, double *loss, float *dlogp,
                         col_rl_stats *s, col_err *err)
{
    static const char *name = "GRPO loss";
    col_status st;
    if (!c)
        return col_err_set(err, COL_EINVAL, "%s: no settings given", name);
    if ((st = check_setting(name, "beta", c->beta, 0, INFINITY, false, err)) ||
        (st = check_setting(name, "the lower clip epsilon", c->eps_low, 0, INFINITY, false, err)) ||
        (st = check_setting(name, "the upper clip epsilon", c->eps_high, 0, INFINITY, false, err)) ||
        (st = check_shape(name, B, T, err)))
        return st;
    const size_t n = (size_t)B * T;
    if (!loss || !dlogp)
        return col_err_set(err, COL_EINVAL, "%s: no place for the loss or its derivative", name);
    if (c->beta != 0 && !ref_logp)
        return col_err_set(err, COL_EINVAL, "%s: the KL term (beta %g) needs the reference log-probabilities", name,
                           c->beta);
    if ((st = check_mask(name, mask, n, err)) || (st = check_tokens(name, "log-probabilities", logp, mask, B, T, err)) ||
        (old_logp && (st = check_tokens(name, "old log-probabilities", old_logp, mask, B, T, err))) ||
        (c->beta != 0 && (st = check_tokens(name, "reference log-probabilities", ref_logp, mask, B, T, err))) ||
        (st = check_tokens(name, "advantages", adv, NULL, B, 1, err)))
        return st;

    const double lo = 1.0 - c->eps_low, hi = 1.0 + c->eps_high, beta = c->beta;
    double total = 0, kl_sum = 0, low_n = 0, high_n = 0, region_n = 0, akl_sum = 0, ratio_sum = 0;
    double low_min = NAN, high_max = NAN;
    long long tokens = 0;
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * T;
        int len = 0;
        for (int t = 0; t < T; t++)
            len += mask[row + t];
        const double den = len > 0 ? len : 1.0, A = adv[b];
        double row_loss = 0, row_low = 0, row_high = 0;
        for (int t = 0; t < T; t++) {
            const size_t i = row + t;
            if (!mask[i]) {
                dlogp[i] = 0.0f;
                continue;
            }
            const double lp = logp[i], diff = old_logp ? lp - (double)old_logp[i] : 0.0, r = exp(diff);
            const double rc = clampd(r, lo, hi), l1 = r * A, l2 = rc * A;
            double g1, g2;
            pick_grad(l1, l2, false, &g1, &g2);
            const bool in = r >= lo && r <= hi;
            double tok = -(l1 < l2 ? l1 : l2);
            double g = -(g1 * A * r + g2 * (in ? A * r : 0.0));
            if (beta != 0) {
                const double d = (double)ref_logp[i] - lp, e = exp(d), k3 = e - d - 1.0;
                tok += beta * k3;
                g += beta * (1.0 - e);
                kl_sum += k3;
            }
            row_loss += tok;
            dlogp[i] = (float)(g / den / B);
            const bool is_low = r < lo && A < 0, is_high = r > hi && A > 0;
            row_low += is_low;
            row_high += is_high;
            region_n += is_low || is_high;
            akl_sum += 0.5 * diff * diff;
            ratio_sum += r;
        }
        total += row_loss / den;
        tokens += len;
        low_n += row_low;
        high_n += row_high;
        if (len > 0) { /* rows with no token give NaN in TRL and nanmin / nanmax skip them */
            double lm = row_low / len, hm = row_high / len;
            low_min = isnan(low_min) || lm < low_min ? lm : low_min;
            high_max = isnan(high_max) || hm > high_max ? hm : high_max;
        }
    }
    *loss = total / B;
    if (s) {
        const double den = tokens > 0 ? (double)tokens : 1.0; /* TRL's masked means clamp the count at 1 */
        if (beta != 0)
            s->kl = kl_sum / den;
        s->policy_loss = *loss;
        s->clip_low = low_n / den;
        s->clip_high = high_n / den;
        s->clip_frac = region_n / den;
        s->clip_low_min = low_min;
        s->clip_high_max = high_max;
        s->approx_kl = akl_sum / den;
        s->ratio_mean = tokens > 0 ? ratio_sum / den : NAN;
        s->response_length = (double)tokens / B;
    }
    return COL_OK;
}

/* ---- PPO ---- */

col_status col_ppo_advantages(const col_ppo_cfg *c, int B, int T, const float *old_logp, const float *ref_logp,
                              const float *old_values, const uint8_t *mask, const float *scores, float *rewards,
                              float *adv, float *returns, col_rl_stats *s, col_err *err)
{
    static const char *name = "PPO advantages";
    col_status st;
    if (!c)
        return col_err_set(err, COL_EINVAL, "%s: no settings given", name);
    if ((st = check_setting(name, "the KL coefficient", c->kl_coef, 0, INFINITY, false, err)) ||
        (st = check_setting(name, "the discount gamma", c->gamma, 0, 1, false, err)) ||
        (st = check_setting(name, "the GAE lambda", c->lambda, 0, 1, false, err)) ||
        (st = check_setting(name, "the score clip", c->score_clip, 0, INFINITY, true, err)) ||
        (st = check_shape(name, B, T, err)))
        return st;
    const size_t n = (size_t)B * T;
    if (!rewards || !adv || !returns)
        return col_err_set(err, COL_EINVAL, "%s: no place for the rewards, advantages or returns", name);
    if ((st = check_mask(name, mask, n, err)) ||
        (st = check_tokens(name, "rollout log-probabilities", old_logp, mask, B, T, err)) ||
        (st = check_tokens(name, "reference log-probabilities", ref_logp, mask, B, T, err)) ||
        (st = check_tokens(name, "rollout values", old_values, mask, B, T, err)) ||
        (st = check_tokens(name, "scores", scores, NULL, B, 1, err)))
        return st;
    long long tokens = 0;
    for (int b = 0; b < B; b++) {
        int len = 0;
        for (int t = 0; t < T; t++)
            len += mask[(size_t)b * T + t];
        if (len == 0)
            return col_err_set(err, COL_EINVAL, "%s: row %d has no completion token to take its score", name, b);
        tokens += len;
    }
    if (c->whiten_advantages && tokens < 2)
        return col_err_set(err, COL_EINVAL, "%s: whitening needs at least 2 completion tokens (the batch has %lld)",
                           name, tokens);
    double *a = malloc(n * sizeof *a);
    if (!a)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory for %zu advantages", name, n);

    const double clip = c->score_clip > 0 ? c->score_clip : INFINITY, gl = c->gamma * c->lambda;
    double score_sum = 0, score_ss = 0, kl_sum = 0, ent_sum = 0;
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * T;
        const double score = clampd(scores[b], -clip, clip);
        score_sum += score;
        int last = -1;
        for (int t = 0; t < T; t++)
            if (mask[row + t])
                last = t;
        double next_v = 0, gae = 0;
        for (int t = T - 1; t >= 0; t--) {
            const size_t i = row + t;
            if (!mask[i]) {
                rewards[i] = adv[i] = returns[i] = 0.0f;
                a[i] = 0;
                continue;
            }
            const double kl = (double)old_logp[i] - ref_logp[i], v = old_values[i];
            double r = -c->kl_coef * kl;
            kl_sum += kl;
            ent_sum -= old_logp[i];
            if (t == last)
                r += score;
            rewards[i] = (float)r;
            gae = r + c->gamma * next_v - v + gl * gae;
            next_v = v;
            a[i] = gae;
            returns[i] = (float)(gae + v);
        }
    }
    if (c->whiten_advantages) {
        /* TRL's masked_whiten: mean and Bessel-corrected variance over the tokens, (a - mean) * rsqrt(var + 1e-8) */
        double sum = 0, ss = 0;
        for (size_t i = 0; i < n; i++)
            sum += mask[i] ? a[i] : 0.0;
        const double mean = sum / (double)tokens;
        for (size_t i = 0; i < n; i++)
            ss += mask[i] ? (a[i] - mean) * (a[i] - mean) : 0.0;
        const double var = ss / (double)tokens * ((double)tokens / (double)(tokens - 1));
        const double k = 1.0 / sqrt(var + 1e-8);
        for (size_t i = 0; i < n; i++)
            a[i] = mask[i] ? (a[i] - mean) * k : 0.0;
    }
    for (size_t i = 0; i < n; i++)
        adv[i] = (float)a[i];
    free(a);
    if (s) {
        const double mean = score_sum / B;
        for (int b = 0; b < B; b++) {
            const double d = clampd(scores[b], -clip, clip) - mean;
            score_ss += d * d;
        }
        s->reward_mean = mean;
        s->reward_std = B > 1 ? sqrt(score_ss / (B - 1)) : NAN;
        s->kl = kl_sum / B;
        s->entropy = ent_sum / B;
        s->non_score_reward = -c->kl_coef * kl_sum / B;
        s->rlhf_reward = s->non_score_reward + mean;
        s->response_length = (double)tokens / B;
    }
    return COL_OK;
}

col_status col_ppo_loss(const col_ppo_cfg *c, int B, int T, const float *logp, const float *old_logp,
                        const float *values, const float *old_values, const float *adv, const float *returns,
                        const uint8_t *mask, double *policy_loss, double *value_loss, float *dlogp, float *dvalues,
                        col_rl_stats *s, col_err *err)
{
    static const char *name = "PPO loss";
    col_status st;
    if (!c)
        return col_err_set(err, COL_EINVAL, "%s: no settings given", name);
    if ((st = check_setting(name, "the clip range", c->clip_range, 0, INFINITY, false, err)) ||
        (st = check_setting(name, "the value clip", c->value_clip, 0, INFINITY, true, err)) ||
        (st = check_setting(name, "the value loss coefficient", c->vf_coef, 0, INFINITY, false, err)) ||
        (st = check_shape(name, B, T, err)))
        return st;
    const size_t n = (size_t)B * T;
    if (!policy_loss || !value_loss || !dlogp || !dvalues)
        return col_err_set(err, COL_EINVAL, "%s: no place for the losses or their derivatives", name);
    if ((st = check_mask(name, mask, n, err)) ||
        (st = check_tokens(name, "log-probabilities", logp, mask, B, T, err)) ||
        (st = check_tokens(name, "rollout log-probabilities", old_logp, mask, B, T, err)) ||
        (st = check_tokens(name, "values", values, mask, B, T, err)) ||
        (st = check_tokens(name, "rollout values", old_values, mask, B, T, err)) ||
        (st = check_tokens(name, "advantages", adv, mask, B, T, err)) ||
        (st = check_tokens(name, "returns", returns, mask, B, T, err)))
        return st;
    long long tokens = 0;
    for (size_t i = 0; i < n; i++)
        tokens += mask[i];
    if (tokens == 0)
        return col_err_set(err, COL_EINVAL, "%s: the batch has no completion token", name);

    const double N = (double)tokens, lo = 1.0 - c->clip_range, hi = 1.0 + c->clip_range, cv = c->value_clip;
    double pg_sum = 0, vf_sum = 0, pg_clip = 0, vf_clip = 0, akl = 0, ratio_sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mask[i]) {
            dlogp[i] = dvalues[i] = 0.0f;
            continue;
        }
        const double A = adv[i], diff = (double)logp[i] - old_logp[i], r = exp(diff);
        const double pg1 = -A * r, pg2 = -A * clampd(r, lo, hi);
        double g1, g2;
        pick_grad(pg1, pg2, true, &g1, &g2);
        const bool r_in = r >= lo && r <= hi;
        pg_sum += pg1 > pg2 ? pg1 : pg2;
        dlogp[i] = (float)((g1 * -A * r + g2 * (r_in ? -A * r : 0.0)) / N);
        pg_clip += pg2 > pg1;

        const double v = values[i], ov = old_values[i], R = returns[i];
        const double vc = isinf(cv) ? v : clampd(v, ov - cv, ov + cv);
        const bool v_in = isinf(cv) || (v >= ov - cv && v <= ov + cv);
        const double vf1 = (v - R) * (v - R), vf2 = (vc - R) * (vc - R);
        pick_grad(vf1, vf2, true, &g1, &g2);
        vf_sum += vf1 > vf2 ? vf1 : vf2;
        dvalues[i] = (float)(c->vf_coef * 0.5 * (g1 * 2 * (v - R) + g2 * (v_in ? 2 * (vc - R) : 0.0)) / N);
        vf_clip += vf2 > vf1;

        akl += 0.5 * diff * diff;
        ratio_sum += r;
    }
    *policy_loss = pg_sum / N;
    *value_loss = 0.5 * vf_sum / N;
    if (s) {
        s->policy_loss = *policy_loss;
        s->value_loss = *value_loss;
        s->clip_frac = pg_clip / N;
        s->value_clip_frac = vf_clip / N;
        s->approx_kl = akl / N;
        s->ratio_mean = ratio_sum / N;
    }
    return COL_OK;
}
