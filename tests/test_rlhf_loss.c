/* test_rlhf_loss.c - the RLHF objectives of rlhf_loss.h against TRL 1.16's
 * own loss code run under torch autograd in float64
 * (tools/refgen/make_rlhf_loss_fixtures.py writes tests/fixtures/rlhf_loss/):
 * for DPO (sigmoid, conservative and robust label smoothing, reference-free),
 * SimPO, ORPO, the reward model, KTO, GRPO's advantages and loss, and PPO's
 * advantages and losses (tools/refgen/ppo_ref.py), the loss, every derivative
 * with respect to the inputs and the logged statistics; relative tolerance
 * 1e-9 for what the C computes in double, 1e-6 for float outputs and for the
 * statistics TRL itself rounds to float32 (accuracies, clip ratios). Then the
 * derivatives against central differences of the C losses themselves, and
 * the refusals of bad arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "rlhf_loss.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/rlhf_loss"
#endif

#define TOL_D 1e-9
#define TOL_F 1e-6

/* ---- JSON fixtures ---- */

static void *kept[64];
static int nkept;

static void *keep(void *p)
{
    if (nkept < (int)(sizeof kept / sizeof kept[0]))
        kept[nkept++] = p;
    return p;
}

static void release(void)
{
    while (nkept > 0)
        free(kept[--nkept]);
}

static cJSON *load(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", FIXTURES, name);
    char *text = NULL;
    size_t len = 0;
    col_err err = {COL_OK};
    if (col_read_file(path, 1 << 24, &text, &len, &err) != COL_OK) {
        printf("Bail out! %s: %s\n", path, err.msg);
        exit(1);
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) {
        printf("Bail out! %s: not JSON\n", path);
        exit(1);
    }
    return j;
}

static const cJSON *item(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool has(const cJSON *o, const char *k)
{
    const cJSON *v = item(o, k);
    return v && !cJSON_IsNull(v);
}

/* a number; null or absent: NaN */
static double num(const cJSON *o, const char *k)
{
    const cJSON *v = item(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int count(const cJSON *o, const char *k)
{
    return cJSON_GetArraySize(item(o, k));
}

/* arrays (null entries: NaN); an absent or null array: NULL */
static double *arr_d(const cJSON *o, const char *k)
{
    const cJSON *a = item(o, k), *v;
    if (!cJSON_IsArray(a))
        return NULL;
    double *out = keep(calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *out));
    int i = 0;
    cJSON_ArrayForEach(v, a) out[i++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    return out;
}

static float *arr_f(const cJSON *o, const char *k)
{
    const cJSON *a = item(o, k), *v;
    if (!cJSON_IsArray(a))
        return NULL;
    float *out = keep(calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *out));
    int i = 0;
    cJSON_ArrayForEach(v, a) out[i++] = cJSON_IsNumber(v) ? (float)v->valuedouble : NAN;
    return out;
}

static int *arr_i(const cJSON *o, const char *k)
{
    const cJSON *a = item(o, k), *v;
    if (!cJSON_IsArray(a))
        return NULL;
    int *out = keep(calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *out));
    int i = 0;
    cJSON_ArrayForEach(v, a) out[i++] = (int)v->valuedouble;
    return out;
}

static uint8_t *arr_u8(const cJSON *o, const char *k)
{
    const cJSON *a = item(o, k), *v;
    uint8_t *out = keep(calloc((size_t)cJSON_GetArraySize(a) + 1, 1));
    int i = 0;
    cJSON_ArrayForEach(v, a) out[i++] = (uint8_t)v->valuedouble;
    return out;
}

static bool *arr_b(const cJSON *o, const char *k)
{
    const cJSON *a = item(o, k), *v;
    bool *out = keep(calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *out));
    int i = 0;
    cJSON_ArrayForEach(v, a) out[i++] = cJSON_IsTrue(v);
    return out;
}

/* ---- comparisons: |got - want| / max(|want|, floor), NaN equal to NaN ---- */

static double rel_err(double got, double want, double floor)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got) ? 0 : INFINITY;
    double d = fabs(got - want), s = fabs(want) > floor ? fabs(want) : floor;
    return s > 0 ? d / s : d;
}

/* an array: the floor is 1e-3 of its largest reference magnitude, so that
 * entries near 0 (a sigmoid saturated to 1e-12) are judged on the array's scale */
static double arr_err_d(const double *got, const double *want, int n)
{
    double mx = 0, e = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, fabs(want[i]));
    for (int i = 0; i < n; i++)
        e = fmax(e, rel_err(got[i], want[i], 1e-3 * mx));
    return e;
}

static double arr_err_f(const float *got, const double *want, int n)
{
    double mx = 0, e = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, fabs(want[i]));
    for (int i = 0; i < n; i++)
        e = fmax(e, rel_err(got[i], want[i], 1e-3 * mx));
    return e;
}

static double worst_d, worst_f; /* the largest errors seen, for the summary */

static void check_d(const char *name, const char *what, double e)
{
    worst_d = fmax(worst_d, e);
    TL_OK(e <= TOL_D, "%s: %s rel err %.2e", name, what, e);
}

static void check_f(const char *name, const char *what, double e)
{
    worst_f = fmax(worst_f, e);
    TL_OK(e <= TOL_F, "%s: %s rel err %.2e", name, what, e);
}

/* a stats field against the fixture's (skipped when the fixture has none) */
static void check_stat(const char *name, const cJSON *st, const char *key, double got, double tol)
{
    if (!item(st, key))
        return;
    double e = rel_err(got, num(st, key), 1e-12);
    if (tol <= TOL_D)
        check_d(name, key, e);
    else
        check_f(name, key, e);
}

/* ---- preference pairs ---- */

static void test_pref(void)
{
    cJSON *j = load("pref");
    const cJSON *c;
    cJSON_ArrayForEach(c, item(j, "cases"))
    {
        const char *name = item(c, "name")->valuestring, *kind = item(c, "kind")->valuestring;
        const cJSON *cfg = item(c, "cfg"), *st = item(c, "stats");
        col_pref_kind k = !strcmp(kind, "dpo")     ? COL_PREF_DPO
                          : !strcmp(kind, "simpo") ? COL_PREF_SIMPO
                          : !strcmp(kind, "orpo")  ? COL_PREF_ORPO
                                                   : COL_PREF_RM;
        col_pref_cfg pc = {.beta = num(cfg, "beta"), .gamma = has(cfg, "gamma") ? num(cfg, "gamma") : 0,
                           .label_smoothing = has(cfg, "label_smoothing") ? num(cfg, "label_smoothing") : 0,
                           .robust = cJSON_IsTrue(item(cfg, "robust"))};
        col_pref_batch b = {.n = count(c, "pc"), .pc = arr_d(c, "pc"), .pr = arr_d(c, "pr"), .rc = arr_d(c, "rc"),
                            .rr = arr_d(c, "rr"), .nc = arr_i(c, "nc"), .nr = arr_i(c, "nr"),
                            .pnll = arr_d(c, "pnll"), .nnll = arr_i(c, "nnll")};
        double *dpc = keep(calloc((size_t)b.n, sizeof *dpc)), *dpr = keep(calloc((size_t)b.n, sizeof *dpr));
        col_pref_stats s;
        col_err err = {COL_OK};
        col_status rc = col_pref_loss(k, k == COL_PREF_RM ? NULL : &pc, &b, dpc, dpr, &s, &err);
        TL_OK(rc == COL_OK, "%s: computes (%s)", name, err.msg);
        if (rc == COL_OK) {
            check_d(name, "loss", rel_err(s.loss, num(c, "loss"), 0));
            check_d(name, "d/d chosen", arr_err_d(dpc, arr_d(c, "dpc"), b.n));
            check_d(name, "d/d rejected", arr_err_d(dpr, arr_d(c, "dpr"), b.n));
            check_stat(name, st, "chosen_reward", s.chosen_reward, TOL_D);
            check_stat(name, st, "rejected_reward", s.rejected_reward, TOL_D);
            check_stat(name, st, "margin", s.margin, TOL_D);
            check_stat(name, st, "accuracy", s.accuracy, TOL_F); /* TRL: .float() */
            check_stat(name, st, "chosen_logp", s.chosen_logp, TOL_D);
            check_stat(name, st, "rejected_logp", s.rejected_logp, TOL_D);
            check_stat(name, st, "nll_loss", s.nll_loss, TOL_D);
            check_stat(name, st, "log_odds_ratio", s.log_odds_ratio, TOL_D);
            check_stat(name, st, "log_odds_chosen", s.log_odds_chosen, TOL_D);
            check_stat(name, st, "dnll", s.dnll, TOL_D);
        }
        release();
    }
    cJSON_Delete(j);
}

static void test_kto(void)
{
    cJSON *j = load("kto");
    const cJSON *c;
    cJSON_ArrayForEach(c, item(j, "cases"))
    {
        const char *name = item(c, "name")->valuestring;
        const cJSON *cfg = item(c, "cfg"), *st = item(c, "stats");
        col_kto_cfg kc = {num(cfg, "beta"), num(cfg, "desirable_weight"), num(cfg, "undesirable_weight")};
        int n = count(c, "p");
        double kl = col_kto_kl(n, arr_d(c, "p_kl"), arr_d(c, "r_kl"));
        check_d(name, "KL estimate", rel_err(kl, num(st, "kl"), 1e-12));
        double *dp = keep(calloc((size_t)n, sizeof *dp));
        col_pref_stats s;
        col_err err = {COL_OK};
        col_status rc = col_kto_loss(&kc, n, arr_d(c, "p"), arr_d(c, "r"), arr_b(c, "desirable"), kl, dp, &s, &err);
        TL_OK(rc == COL_OK, "%s: computes (%s)", name, err.msg);
        if (rc == COL_OK) {
            check_d(name, "loss", rel_err(s.loss, num(c, "loss"), 0));
            check_d(name, "d/d p", arr_err_d(dp, arr_d(c, "dp"), n));
            check_stat(name, st, "chosen_reward", s.chosen_reward, TOL_D);
            check_stat(name, st, "rejected_reward", s.rejected_reward, TOL_D);
            check_stat(name, st, "margin", s.margin, TOL_D);
            check_stat(name, st, "chosen_logp", s.chosen_logp, TOL_D);
            check_stat(name, st, "rejected_logp", s.rejected_logp, TOL_D);
        }
        release();
    }
    cJSON_Delete(j);
}

/* ---- GRPO ---- */

static void test_grpo(void)
{
    cJSON *j = load("grpo_adv");
    const cJSON *c;
    cJSON_ArrayForEach(c, item(j, "cases"))
    {
        const char *name = item(c, "name")->valuestring;
        int ng = (int)num(c, "n_groups"), G = (int)num(c, "G"), n = ng * G;
        float *adv = keep(calloc((size_t)n, sizeof *adv));
        col_rl_stats s = {0};
        col_err err = {COL_OK};
        col_status rc =
            col_grpo_advantages(ng, G, arr_f(c, "rewards"), cJSON_IsTrue(item(c, "scale_rewards")), adv, &s, &err);
        TL_OK(rc == COL_OK, "%s: computes (%s)", name, err.msg);
        if (rc == COL_OK) {
            check_f(name, "advantages", arr_err_f(adv, arr_d(c, "adv"), n));
            const cJSON *st = item(c, "stats");
            check_stat(name, st, "reward_mean", s.reward_mean, TOL_D);
            check_stat(name, st, "reward_std", s.reward_std, TOL_D);
            check_stat(name, st, "frac_reward_zero_std", s.frac_reward_zero_std, TOL_D);
        }
        release();
    }
    cJSON_Delete(j);

    j = load("grpo_loss");
    cJSON_ArrayForEach(c, item(j, "cases"))
    {
        const char *name = item(c, "name")->valuestring;
        const cJSON *cfg = item(c, "cfg"), *st = item(c, "stats");
        int B = (int)num(c, "B"), T = (int)num(c, "T");
        col_grpo_cfg gc = {num(cfg, "beta"), num(cfg, "eps_low"), num(cfg, "eps_high"), true};
        float *d = keep(calloc((size_t)B * T, sizeof *d));
        double loss = NAN;
        col_rl_stats s = {0};
        col_err err = {COL_OK};
        col_status rc = col_grpo_loss(&gc, B, T, arr_f(c, "logp"), arr_f(c, "old_logp"), arr_f(c, "ref_logp"),
                                      arr_u8(c, "mask"), arr_f(c, "adv"), &loss, d, &s, &err);
        TL_OK(rc == COL_OK, "%s: computes (%s)", name, err.msg);
        if (rc == COL_OK) {
            check_d(name, "loss", rel_err(loss, num(c, "loss"), 0));
            check_f(name, "d/d logp", arr_err_f(d, arr_d(c, "dlogp"), B * T));
            check_stat(name, st, "kl", s.kl, TOL_D);
            check_stat(name, st, "clip_low", s.clip_low, TOL_F); /* TRL: .float() */
            check_stat(name, st, "clip_high", s.clip_high, TOL_F);
            check_stat(name, st, "clip_frac", s.clip_frac, TOL_F);
            check_stat(name, st, "clip_low_min", s.clip_low_min, TOL_F);
            check_stat(name, st, "clip_high_max", s.clip_high_max, TOL_F);
            check_stat(name, st, "approx_kl", s.approx_kl, TOL_D);
            check_stat(name, st, "ratio_mean", s.ratio_mean, TOL_D);
            check_stat(name, st, "response_length", s.response_length, TOL_D);
        }
        release();
    }
    cJSON_Delete(j);
}

/* ---- PPO ---- */

static col_ppo_cfg ppo_cfg(const cJSON *cfg)
{
    col_ppo_cfg p = {.kl_coef = num(cfg, "kl_coef"), .clip_range = num(cfg, "clip_range"),
                     .value_clip = has(cfg, "value_clip") ? num(cfg, "value_clip") : INFINITY,
                     .gamma = num(cfg, "gamma"), .lambda = num(cfg, "lambda"), .vf_coef = num(cfg, "vf_coef"),
                     .score_clip = has(cfg, "score_clip") ? num(cfg, "score_clip") : 0,
                     .whiten_advantages = cJSON_IsTrue(item(cfg, "whiten_advantages"))};
    return p;
}

static void test_ppo(void)
{
    cJSON *j = load("ppo_adv");
    const cJSON *c;
    cJSON_ArrayForEach(c, item(j, "cases"))
    {
        const char *name = item(c, "name")->valuestring;
        const cJSON *st = item(c, "stats");
        int B = (int)num(c, "B"), T = (int)num(c, "T");
        col_ppo_cfg pc = ppo_cfg(item(c, "cfg"));
        size_t n = (size_t)B * T;
        float *rw = keep(calloc(n, sizeof *rw)), *adv = keep(calloc(n, sizeof *adv)),
              *ret = keep(calloc(n, sizeof *ret));
        col_rl_stats s = {0};
        col_err err = {COL_OK};
        col_status rc = col_ppo_advantages(&pc, B, T, arr_f(c, "old_logp"), arr_f(c, "ref_logp"),
                                           arr_f(c, "old_values"), arr_u8(c, "mask"), arr_f(c, "scores"), rw, adv,
                                           ret, &s, &err);
        TL_OK(rc == COL_OK, "%s: computes (%s)", name, err.msg);
        if (rc == COL_OK) {
            check_f(name, "rewards", arr_err_f(rw, arr_d(c, "rewards"), (int)n));
            check_f(name, "advantages", arr_err_f(adv, arr_d(c, "adv"), (int)n));
            check_f(name, "returns", arr_err_f(ret, arr_d(c, "returns"), (int)n));
            check_stat(name, st, "reward_mean", s.reward_mean, TOL_D);
            check_stat(name, st, "reward_std", s.reward_std, TOL_D);
            check_stat(name, st, "kl", s.kl, TOL_D);
            check_stat(name, st, "entropy", s.entropy, TOL_D);
            check_stat(name, st, "non_score_reward", s.non_score_reward, TOL_D);
            check_stat(name, st, "rlhf_reward", s.rlhf_reward, TOL_D);
            check_stat(name, st, "response_length", s.response_length, TOL_D);
        }
        release();
    }
    cJSON_Delete(j);

    j = load("ppo_loss");
    cJSON_ArrayForEach(c, item(j, "cases"))
    {
        const char *name = item(c, "name")->valuestring;
        const cJSON *st = item(c, "stats");
        int B = (int)num(c, "B"), T = (int)num(c, "T");
        col_ppo_cfg pc = ppo_cfg(item(c, "cfg"));
        size_t n = (size_t)B * T;
        float *dl = keep(calloc(n, sizeof *dl)), *dv = keep(calloc(n, sizeof *dv));
        double pl = NAN, vl = NAN;
        col_rl_stats s = {0};
        col_err err = {COL_OK};
        col_status rc = col_ppo_loss(&pc, B, T, arr_f(c, "logp"), arr_f(c, "old_logp"), arr_f(c, "values"),
                                     arr_f(c, "old_values"), arr_f(c, "adv"), arr_f(c, "returns"), arr_u8(c, "mask"),
                                     &pl, &vl, dl, dv, &s, &err);
        TL_OK(rc == COL_OK, "%s: computes (%s)", name, err.msg);
        if (rc == COL_OK) {
            check_d(name, "policy loss", rel_err(pl, num(c, "policy_loss"), 0));
            check_d(name, "value loss", rel_err(vl, num(c, "value_loss"), 0));
            check_f(name, "d/d logp", arr_err_f(dl, arr_d(c, "dlogp"), (int)n));
            check_f(name, "d/d values (times vf_coef)", arr_err_f(dv, arr_d(c, "dvalues"), (int)n));
            check_stat(name, st, "clip_frac", s.clip_frac, TOL_D);
            check_stat(name, st, "value_clip_frac", s.value_clip_frac, TOL_D);
            check_stat(name, st, "approx_kl", s.approx_kl, TOL_D);
            check_stat(name, st, "ratio_mean", s.ratio_mean, TOL_D);
        }
        release();
    }
    cJSON_Delete(j);
}

/* ---- the derivatives against central differences of the C losses ---- */

static double pref_at(col_pref_kind k, const col_pref_cfg *c, col_pref_batch *b, double *x, int i, double h)
{
    double d1[8], d2[8], save = x[i];
    col_pref_stats s;
    x[i] = save + h;
    col_pref_loss(k, c, b, d1, d2, &s, NULL);
    double up = s.loss;
    x[i] = save - h;
    col_pref_loss(k, c, b, d1, d2, &s, NULL);
    x[i] = save;
    return (up - s.loss) / (2 * h);
}

static void test_pref_numeric(void)
{
    double pc[4] = {-30.5, -12.25, -7.0, -44.0}, pr[4] = {-28.0, -15.5, -9.75, -40.5};
    double rc[4] = {-31.0, -11.0, -8.5, -43.0}, rr[4] = {-27.5, -16.0, -9.0, -41.0};
    int nc[4] = {12, 5, 3, 20}, nr[4] = {10, 7, 4, 18}, nnll[4] = {20, 9, 0, 31};
    double pnll[4] = {-50.0, -20.0, 0.0, -80.0};
    struct {
        col_pref_kind k;
        col_pref_cfg c;
        const char *name;
    } cases[] = {
        {COL_PREF_DPO, {0.1, 0, 0, false}, "DPO"},
        {COL_PREF_DPO, {0.3, 0, 0.2, false}, "DPO conservative"},
        {COL_PREF_DPO, {0.3, 0, 0.2, true}, "DPO robust"},
        {COL_PREF_SIMPO, {2.0, 1.2, 0.1, false}, "SimPO"},
        {COL_PREF_ORPO, {0.2, 0, 0, false}, "ORPO"},
        {COL_PREF_RM, {0, 0, 0, false}, "RM"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        col_pref_batch b = {4, pc, pr, rc, rr, nc, nr, pnll, nnll};
        double dpc[4], dpr[4], e = 0;
        col_pref_stats s;
        col_err err = {COL_OK};
        col_status st = col_pref_loss(cases[ci].k, &cases[ci].c, &b, dpc, dpr, &s, &err);
        for (int i = 0; i < 4 && st == COL_OK; i++) {
            e = fmax(e, rel_err(dpc[i], pref_at(cases[ci].k, &cases[ci].c, &b, pc, i, 1e-5), 1e-6));
            e = fmax(e, rel_err(dpr[i], pref_at(cases[ci].k, &cases[ci].c, &b, pr, i, 1e-5), 1e-6));
        }
        if (cases[ci].k == COL_PREF_ORPO && st == COL_OK) {
            /* the NLL seed: d loss / d pnll[i] */
            double save = pnll[0];
            pnll[0] = save + 1e-4;
            col_pref_loss(cases[ci].k, &cases[ci].c, &b, dpc, dpr, &s, NULL);
            double up = s.loss;
            pnll[0] = save - 1e-4;
            col_pref_loss(cases[ci].k, &cases[ci].c, &b, dpc, dpr, &s, NULL);
            double down = s.loss;
            pnll[0] = save;
            col_pref_loss(cases[ci].k, &cases[ci].c, &b, dpc, dpr, &s, NULL);
            e = fmax(e, rel_err(s.dnll, (up - down) / 2e-4, 1e-6));
        }
        TL_OK(st == COL_OK && e < 1e-6, "%s: derivatives match central differences (rel err %.2e) %s", cases[ci].name,
              e, err.msg);
    }

    /* KTO, with both classes */
    double p[5] = {-40, -12, -70, -25, -33}, r[5] = {-41, -10, -66, -25.5, -30};
    bool des[5] = {true, false, true, false, false};
    col_kto_cfg kc = {0.2, 1.33, 0.8};
    double dp[5], e = 0;
    col_pref_stats s;
    col_status st = col_kto_loss(&kc, 5, p, r, des, 1.5, dp, &s, NULL);
    for (int i = 0; i < 5 && st == COL_OK; i++) {
        double save = p[i], t[5];
        p[i] = save + 1e-5;
        col_kto_loss(&kc, 5, p, r, des, 1.5, t, &s, NULL);
        double up = s.loss;
        p[i] = save - 1e-5;
        col_kto_loss(&kc, 5, p, r, des, 1.5, t, &s, NULL);
        p[i] = save;
        e = fmax(e, rel_err(dp[i], (up - s.loss) / 2e-5, 1e-6));
    }
    TL_OK(st == COL_OK && e < 1e-6, "KTO: derivatives match central differences (rel err %.2e)", e);
}

/* ---- refusals ---- */

static void refuses(col_status st, const col_err *err, const char *what, const char *needle)
{
    TL_OK(st == COL_EINVAL && strstr(err->msg, needle), "refuses %s: \"%s\"", what, err->msg);
}

static void test_refusals(void)
{
    col_err err = {COL_OK};
    double pc[2] = {-3, -4}, pr[2] = {-5, -2}, d1[2], d2[2], bad[2] = {-3, NAN};
    int nc[2] = {2, 3}, zero[2] = {2, 0};
    col_pref_cfg dpo = {0.1, 0, 0, false};
    col_pref_batch b = {2, pc, pr, NULL, NULL, nc, nc, NULL, NULL};
    col_pref_stats s;
    col_pref_batch b0 = b;
    b0.n = 0;
    refuses(col_pref_loss(COL_PREF_DPO, &dpo, &b0, d1, d2, &s, &err), &err, "an empty batch", "0 pairs");
    col_pref_batch bn = b;
    bn.pc = NULL;
    refuses(col_pref_loss(COL_PREF_DPO, &dpo, &bn, d1, d2, &s, &err), &err, "a missing array", "missing");
    bn = b;
    bn.pr = bad;
    refuses(col_pref_loss(COL_PREF_DPO, &dpo, &bn, d1, d2, &s, &err), &err, "a NaN log-prob", "not finite");
    bn = b;
    bn.rc = pc;
    refuses(col_pref_loss(COL_PREF_DPO, &dpo, &bn, d1, d2, &s, &err), &err, "a one-sided reference", "one side");
    col_pref_cfg badc = {0, 0, 0, false};
    refuses(col_pref_loss(COL_PREF_DPO, &badc, &b, d1, d2, &s, &err), &err, "beta 0", "beta");
    badc = (col_pref_cfg){0.1, 0, 0.5, false};
    refuses(col_pref_loss(COL_PREF_DPO, &badc, &b, d1, d2, &s, &err), &err, "label smoothing 0.5", "[0, 0.5)");
    badc = (col_pref_cfg){0.1, 0, 0.1, true};
    refuses(col_pref_loss(COL_PREF_SIMPO, &badc, &b, d1, d2, &s, &err), &err, "robust SimPO", "DPO only");
    bn = b;
    bn.nr = zero;
    refuses(col_pref_loss(COL_PREF_SIMPO, &dpo, &bn, d1, d2, &s, &err), &err, "an empty completion", "needs a token");
    int nn[2] = {4, 4};
    double pn[2] = {-9, -8}, pos[2] = {0.5, -4};
    bn = b;
    bn.pnll = pn;
    bn.nnll = nn;
    bn.pc = pos;
    refuses(col_pref_loss(COL_PREF_ORPO, &dpo, &bn, d1, d2, &s, &err), &err, "ORPO with a log-prob above 0",
            "below 0");
    bn.pc = pc;
    bn.pnll = NULL;
    refuses(col_pref_loss(COL_PREF_ORPO, &dpo, &bn, d1, d2, &s, &err), &err, "ORPO without its NLL term", "NLL");
    TL_OK(col_pref_loss(COL_PREF_DPO, &dpo, &b, d1, d2, NULL, &err) == COL_OK, "no stats asked: fine");

    bool des[2] = {true, false};
    col_kto_cfg kc = {0.1, 1, 1};
    refuses(col_kto_loss(&kc, 2, pc, pr, des, NAN, d1, &s, &err), &err, "a NaN KL estimate", "KL");
    refuses(col_kto_loss(&kc, 2, pc, NULL, des, 0, d1, &s, &err), &err, "KTO without a reference", "missing");
    TL_OK(isnan(col_kto_kl(0, pc, pr)), "col_kto_kl of nothing is NaN");

    float rw[4] = {1, 2, INFINITY, 0}, adv[4];
    refuses(col_grpo_advantages(2, 2, rw, true, adv, NULL, &err), &err, "an infinite reward", "infinite");
    refuses(col_grpo_advantages(0, 2, rw, true, adv, NULL, &err), &err, "no groups", "0 groups");

    enum { B = 2, T = 3 };
    float lp[B * T] = {-1, -2, NAN, -1.5, -0.5, -3}, old[B * T] = {-1.1, -2, 7, -1.4, -0.6, -3};
    float ref[B * T] = {-1, -2.2, 0, -1.5, -0.4, -2.9}, a2[B] = {0.5, -1}, dl[B * T], vals[B * T] = {0};
    uint8_t mask[B * T] = {1, 1, 0, 1, 1, 1};
    col_grpo_cfg gc = {0.04, 0.2, 0.2, true};
    double loss;
    TL_OK(col_grpo_loss(&gc, B, T, lp, old, ref, mask, a2, &loss, dl, NULL, &err) == COL_OK && dl[2] == 0.0f,
          "GRPO: a NaN where the mask is 0 is not read (%s)", err.msg);
    mask[2] = 1;
    refuses(col_grpo_loss(&gc, B, T, lp, old, ref, mask, a2, &loss, dl, NULL, &err), &err, "a NaN completion log-prob",
            "not finite");
    mask[2] = 2;
    refuses(col_grpo_loss(&gc, B, T, lp, old, ref, mask, a2, &loss, dl, NULL, &err), &err, "a mask entry of 2",
            "0 or 1");
    mask[2] = 0;
    refuses(col_grpo_loss(&gc, B, T, lp, old, NULL, mask, a2, &loss, dl, NULL, &err), &err, "KL without reference",
            "reference");
    refuses(col_grpo_loss(&gc, 0, T, lp, old, ref, mask, a2, &loss, dl, NULL, &err), &err, "an empty batch", "0 x 3");
    gc.eps_low = -0.1;
    refuses(col_grpo_loss(&gc, B, T, lp, old, ref, mask, a2, &loss, dl, NULL, &err), &err, "a negative epsilon",
            "epsilon");

    col_ppo_cfg pc2 = {.kl_coef = 0.05, .clip_range = 0.2, .value_clip = 0.2, .gamma = 1, .lambda = 0.95,
                       .vf_coef = 0.1, .score_clip = 0, .whiten_advantages = true};
    float sc[B] = {1, -1}, rw2[B * T], ad2[B * T], rt2[B * T], dv[B * T];
    uint8_t m2[B * T] = {1, 1, 0, 0, 0, 0};
    refuses(col_ppo_advantages(&pc2, B, T, old, ref, vals, m2, sc, rw2, ad2, rt2, NULL, &err), &err,
            "a row with no completion token", "row 1");
    uint8_t m3[B * T] = {1, 0, 0, 0, 0, 0};
    m3[3] = 0;
    refuses(col_ppo_advantages(&pc2, 1, T, old, ref, vals, m3, sc, rw2, ad2, rt2, NULL, &err), &err,
            "whitening one token", "at least 2");
    pc2.gamma = 1.5;
    refuses(col_ppo_advantages(&pc2, B, T, old, ref, vals, mask, sc, rw2, ad2, rt2, NULL, &err), &err,
            "a discount above 1", "gamma");
    pc2.gamma = 1;
    pc2.value_clip = -1;
    double pl, vl;
    refuses(col_ppo_loss(&pc2, B, T, old, old, vals, vals, vals, vals, mask, &pl, &vl, dl, dv, NULL, &err), &err,
            "a negative value clip", "value clip");
    pc2.value_clip = 0.2;
    uint8_t none[B * T] = {0};
    refuses(col_ppo_loss(&pc2, B, T, old, old, vals, vals, vals, vals, none, &pl, &vl, dl, dv, NULL, &err), &err,
            "a batch with no completion token", "no completion token");
}

int main(void)
{
    test_pref();
    test_kto();
    test_grpo();
    test_ppo();
    test_pref_numeric();
    test_refusals();
    TL_NOTE("largest relative errors: %.2e (double outputs, tolerance %.0e), %.2e (float outputs and float32 stats, "
            "tolerance %.0e)",
            worst_d, TOL_D, worst_f, TOL_F);
    return tl_done();
}
