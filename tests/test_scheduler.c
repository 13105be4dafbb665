/* test_scheduler.c - diffusers' schedulers against diffusers 0.42.1
 * (tests/fixtures/diffusion/, tools/refgen/make_scheduler_fixtures.py):
 * config reading (defaults, bad files), the train-time tables, the
 * timesteps and sigmas of set_timesteps, whole sampling runs with a
 * synthetic model and torch's random numbers (latents within NMSE 1e-10 of
 * diffusers), img2img, training noise. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "rng_torch.h"
#include "scheduler.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/diffusion"
#endif
#define N 256   /* latents [1, 4, 8, 8] */

static col_st_file *fix;

static const col_ckpt_tensor *find(const char *fmt, const char *a, const char *b)
{
    char name[160];
    snprintf(name, sizeof name, fmt, a, b);
    for (int i = 0; i < col_st_count(fix); i++)
        if (strcmp(col_st_get(fix, i)->name, name) == 0)
            return col_st_get(fix, i);
    return NULL;
}

/* The values of a fixture tensor as doubles (F32 or F64); its count, or -1. */
static int values(const col_ckpt_tensor *t, double *out, int cap)
{
    if (!t || t->ndim != 1 || t->shape[0] > cap)
        return -1;
    int n = (int)t->shape[0];
    for (int i = 0; i < n; i++) {
        if (t->dtype == COL_ST_F32) {
            float f;
            memcpy(&f, (const char *)t->data + 4 * i, 4);
            out[i] = f;
        } else if (t->dtype == COL_ST_F64) {
            memcpy(&out[i], (const char *)t->data + 8 * i, 8);
        } else {
            return -1;
        }
    }
    return n;
}

static double nmse(const float *got, const double *want, int n, double *maxabs)
{
    double num = 0, den = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
        mx = fabs(d) > mx ? fabs(d) : mx;
    }
    *maxabs = mx;
    return den > 0 ? num / den : num;
}

static col_status load_cfg(const char *name, dm_sched_kind kind, dm_sched_config *c, col_err *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sched_cfg_%s.json", FIXTURES, name);
    return dm_sched_config_load(path, kind, c, err);
}

/* the stand-in UNet of the fixture script: 0.3 x / (1 + x^2) + (0.05 t / 1000) noise0 */
static void model(const float *x, double t, const float *noise0, float *out)
{
    float c = (float)(0.05 * t / 1000.0);
    for (int i = 0; i < N; i++) {
        float a = 0.3f * x[i];
        float b = x[i] * x[i];
        b = 1.0f + b;
        a = a / b;
        float d = c * noise0[i];
        out[i] = a + d;
    }
}

typedef struct {
    double worst[DM_SCHED_COUNT];
    int runs[DM_SCHED_COUNT];
} summary;

static void one_run(const cJSON *r, summary *sum)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(r, "name"));
    const char *cfgname = cJSON_GetStringValue(cJSON_GetObjectItem(r, "config"));
    const char *kname = cJSON_GetStringValue(cJSON_GetObjectItem(r, "kind"));
    int steps = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "steps"));
    uint64_t seed = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "seed"));
    double strength = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "strength"));
    double eta = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "eta"));
    double tol = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "tol"));
    int mid = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "mid"));
    if (!name || !cfgname || !kname) {
        TL_OK(false, "plan entry well formed");
        return;
    }
    col_err err = {COL_OK};
    dm_sched_config c;
    dm_sched *s = NULL;
    dm_sched_kind kind = dm_sched_kind_from_name(kname);
    bool ok = load_cfg(cfgname, kind, &c, &err) == COL_OK;
    if (ok) {
        c.eta = eta;
        ok = dm_sched_create(&c, &s, &err) == COL_OK && dm_sched_set_timesteps(s, steps, strength, &err) == COL_OK;
        dm_sched_config_free(&c);
    }
    char what[128];
    snprintf(what, sizeof what, "%s (%s on %s, %d steps, strength %g%s)", name, kname, cfgname, steps, strength,
             eta > 0 ? ", eta > 0" : "");
    if (!ok) {
        TL_OK(false, "%s: scheduler made: %s", what, err.msg);
        dm_sched_free(s);
        return;
    }
    kind = c.kind;
    bool karras = c.use_karras_sigmas, continuous = c.continuous_timesteps, zsnr = c.rescale_betas_zero_snr;
    /* timesteps: exact, but those computed from the sigmas (euler with karras sigmas or continuous
     * timesteps), within 1e-6 relative; sigmas and init noise sigma within 4 ulps (torch's sqrt) */
    double want[1024];
    int nt = values(find("%s.%s", name, "timesteps"), want, 1024);
    bool from_sigmas = kind == DM_SCHED_EULER && (karras || (continuous && c.prediction_type == DM_PRED_V));
    bool ts_ok = nt == dm_sched_num_steps(s);
    int bad = -1, exact = 0;
    for (int i = 0; ts_ok && i < nt; i++) {
        double got = dm_sched_timestep(s, i);
        exact += got == want[i];
        if (!(got == want[i] || (from_sigmas && fabs(got - want[i]) <= 1e-6 * fabs(want[i]))))
            ts_ok = false, bad = i;
    }
    TL_OK(ts_ok, "%s: %d timesteps as diffusers' (%d exactly)", what, nt, exact);
    if (bad >= 0)
        TL_NOTE("timestep %d: %.9g, diffusers %.9g", bad, dm_sched_timestep(s, bad), want[bad]);
    const col_ckpt_tensor *st = find("%s.%s", name, "sigmas");
    if (st) {
        int ns = values(st, want, 1024), cnt = 0;
        const float *sg = dm_sched_sigmas(s, &cnt);
        bool sg_ok = sg && ns == cnt;
        bad = -1, exact = 0;
        /* rescale_betas_zero_snr runs torch's sqrt through a rescaling that magnifies its ulps */
        double rel = zsnr ? 1e-5 : 4 * 0x1p-24;
        for (int i = 0; sg_ok && i < ns; i++) {
            exact += (double)sg[i] == want[i];
            if (!(fabs(sg[i] - want[i]) <= rel * fabs(want[i])))
                sg_ok = false, bad = i;
        }
        TL_OK(sg_ok, "%s: %d sigmas as diffusers' within %s (%d exactly)", what, ns, zsnr ? "1e-5" : "4 ulps", exact);
        if (bad >= 0)
            TL_NOTE("sigma %d: %.9g, diffusers %.9g", bad, sg[bad], want[bad]);
    }
    double init[4] = {0};
    float ins = dm_sched_init_noise_sigma(s);
    int ni = values(find("%s.%s", name, "init_sigma"), init, 4);
    TL_OK(ni == 1 && fabs(ins - init[0]) <= 4 * 0x1p-24 * init[0],
          "%s: init_noise_sigma %.9g (diffusers %.9g)", what, ins, init[0]);
    /* the run */
    float lat[N], noise0[N], x[N], eps[N], image[N], noise[N], at_mid[N];
    col_torch_gen g, g0, gi;
    col_torch_gen_seed(&g, seed);
    col_torch_gen_seed(&g0, seed + 1000);
    if (strength < 1) {
        col_torch_gen_seed(&gi, seed + 2000);
        col_torch_randn(&gi, image, N);
        for (int i = 0; i < N; i++)
            image[i] = image[i] * 0.5f;
        col_torch_randn(&g, noise, N);
        ok = dm_sched_add_noise_start(s, image, noise, lat, N, &err) == COL_OK;
    } else {
        col_torch_randn(&g, lat, N);
        for (int i = 0; i < N; i++)
            lat[i] = lat[i] * ins;
    }
    col_torch_randn(&g0, noise0, N);
    for (int i = 0; ok && i < dm_sched_num_steps(s); i++) {
        double t = dm_sched_timestep(s, i);
        dm_sched_scale_model_input(s, lat, x, N);
        model(x, t, noise0, eps);
        ok = dm_sched_step(s, eps, lat, lat, N, &g, &err) == COL_OK;
        if (i == mid - 1)
            memcpy(at_mid, lat, sizeof lat);
    }
    TL_OK(ok, "%s: ran: %s", what, ok ? "" : err.msg);
    double wm[N], wf[N], mx_m = 0, mx_f = 0;
    bool have = values(find("%s.%s", name, "mid"), wm, N) == N && values(find("%s.%s", name, "final"), wf, N) == N;
    double e_mid = have ? nmse(at_mid, wm, N, &mx_m) : 1, e_fin = have ? nmse(lat, wf, N, &mx_f) : 1;
    if (!(tol > 0))
        tol = 1e-10;
    TL_OK(ok && have && e_mid <= tol && e_fin <= tol,
          "%s: latents as diffusers': NMSE %.2e at step %d (max |d| %.1e), %.2e at the end (max |d| %.1e)", what,
          e_mid, mid, mx_m, e_fin, mx_f);
    if (kind >= 0 && kind < DM_SCHED_COUNT) {
        sum->worst[kind] = e_fin > sum->worst[kind] ? e_fin : sum->worst[kind];
        sum->runs[kind]++;
    }
    /* past the end */
    float tmp[N];
    TL_OK(dm_sched_step(s, eps, lat, tmp, N, &g, &err) == COL_ESTATE, "%s: a step past the end is refused: %s", what,
          err.msg);
    dm_sched_free(s);
}

/* ---- configs ---- */

static bool cfg_equal(const dm_sched_config *a, const dm_sched_config *b)
{
    return a->kind == b->kind && a->num_train_timesteps == b->num_train_timesteps && a->beta_start == b->beta_start &&
           a->beta_end == b->beta_end && a->beta_schedule == b->beta_schedule && !a->trained_betas == !b->trained_betas &&
           a->prediction_type == b->prediction_type && a->timestep_spacing == b->timestep_spacing &&
           a->steps_offset == b->steps_offset && a->rescale_betas_zero_snr == b->rescale_betas_zero_snr &&
           a->set_alpha_to_one == b->set_alpha_to_one && a->clip_sample == b->clip_sample &&
           a->clip_sample_range == b->clip_sample_range && a->skip_prk_steps == b->skip_prk_steps &&
           a->use_karras_sigmas == b->use_karras_sigmas && a->final_sigmas_type == b->final_sigmas_type &&
           a->has_sigma_min == b->has_sigma_min && a->has_sigma_max == b->has_sigma_max &&
           a->continuous_timesteps == b->continuous_timesteps && a->solver_order == b->solver_order &&
           a->solver_heun == b->solver_heun && a->lower_order_final == b->lower_order_final &&
           a->euler_at_final == b->euler_at_final && a->lambda_min_clipped == b->lambda_min_clipped &&
           a->original_inference_steps == b->original_inference_steps && a->timestep_scaling == b->timestep_scaling &&
           a->variance_type == b->variance_type && a->eta == b->eta;
}

static void test_defaults(void)
{
    static const struct {
        const char *file, *cls;
        dm_sched_kind kind;
    } k[] = {
        {"ddim", "DDIMScheduler", DM_SCHED_DDIM},
        {"pndm", "PNDMScheduler", DM_SCHED_PNDM},
        {"euler", "EulerDiscreteScheduler", DM_SCHED_EULER},
        {"euler-a", "EulerAncestralDiscreteScheduler", DM_SCHED_EULER_A},
        {"dpm++2m", "DPMSolverMultistepScheduler", DM_SCHED_DPMPP_2M},
        {"lcm", "LCMScheduler", DM_SCHED_LCM},
        {"ddpm", "DDPMScheduler", DM_SCHED_DDPM},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[512], json[128];
        snprintf(path, sizeof path, "%s/sched_default_%s.json", FIXTURES, k[i].file);
        snprintf(json, sizeof json, "{\"_class_name\": \"%s\"}", k[i].cls);
        col_err e1 = {COL_OK}, e2 = {COL_OK};
        dm_sched_config full, bare, byhand;
        bool ok = dm_sched_config_load(path, DM_SCHED_AUTO, &full, &e1) == COL_OK &&
                  dm_sched_config_parse(json, DM_SCHED_AUTO, &bare, &e2) == COL_OK;
        dm_sched_config_default(k[i].kind, &byhand);
        TL_OK(ok && full.kind == k[i].kind && cfg_equal(&full, &bare) && cfg_equal(&full, &byhand),
              "%s: the defaults diffusers writes = those filled in for a bare {\"_class_name\"} %s%s", k[i].cls,
              e1.msg, e2.msg);
        dm_sched_config_free(&full);
        dm_sched_config_free(&bare);
    }
    /* another class's config, as Kind.from_config reads it: SD 1.5's PNDM config as euler and as ddim */
    col_err err = {COL_OK};
    dm_sched_config c;
    bool ok = dm_sched_config_load(FIXTURES "/sched_cfg_sd15.json", DM_SCHED_EULER, &c, &err) == COL_OK;
    TL_OK(ok && c.kind == DM_SCHED_EULER && c.timestep_spacing == DM_SPACING_LINSPACE && c.steps_offset == 1 &&
              c.beta_schedule == DM_BETA_SCALED_LINEAR && !c.clip_sample,
          "sd15 (PNDM) read as euler: its betas and offset, euler's spacing %s", err.msg);
    ok = dm_sched_config_load(FIXTURES "/sched_cfg_sd15.json", DM_SCHED_DDIM, &c, &err) == COL_OK;
    TL_OK(ok && c.kind == DM_SCHED_DDIM && !c.clip_sample && !c.set_alpha_to_one &&
              c.timestep_spacing == DM_SPACING_LEADING,
          "sd15 read as ddim: clip_sample and set_alpha_to_one false from the file %s", err.msg);
    ok = dm_sched_config_load(FIXTURES "/sched_cfg_dpm_saved.json", DM_SCHED_AUTO, &c, &err) == COL_OK;
    TL_OK(ok && c.kind == DM_SCHED_DPMPP_2M && isinf(c.lambda_min_clipped) && c.lambda_min_clipped < 0,
          "a saved DPMSolverMultistep config (\"lambda_min_clipped\": -Infinity) reads %s", err.msg);
    ok = dm_sched_config_load(FIXTURES "/sched_cfg_sd15.json", DM_SCHED_DPMPP_2M_KARRAS, &c, &err) == COL_OK;
    TL_OK(ok && c.use_karras_sigmas && c.kind == DM_SCHED_DPMPP_2M_KARRAS, "dpm++2m-karras has karras sigmas");
    ok = dm_sched_config_parse("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"use_karras_sigmas\": true}",
                               DM_SCHED_AUTO, &c, &err) == COL_OK;
    TL_OK(ok && c.kind == DM_SCHED_DPMPP_2M_KARRAS, "DPMSolverMultistep with use_karras_sigmas is dpm++2m-karras");
    ok = dm_sched_config_parse("{\"_class_name\": \"DDIMScheduler\", \"trained_betas\": [0.001, 0.002, 0.003], "
                               "\"unknown_key\": {\"x\": 1}}", DM_SCHED_AUTO, &c, &err) == COL_OK;
    TL_OK(ok && c.num_train_timesteps == 3 && c.trained_betas && c.trained_betas[2] == 0.003f,
          "trained_betas set the table; unknown keys are ignored %s", err.msg);
    dm_sched_config_free(&c);
    for (int i = -1; i < DM_SCHED_COUNT; i++)
        TL_OK(dm_sched_kind_from_name(dm_sched_kind_name((dm_sched_kind)i)) == i, "kind name %s round trips",
              dm_sched_kind_name((dm_sched_kind)i));
    TL_OK((int)dm_sched_kind_from_name("heun") < -1, "an unknown kind name is refused");
}

static void test_bad_configs(void)
{
    static const struct {
        const char *json;
        dm_sched_kind kind;
        col_status st;
        const char *says;
    } bad[] = {
        {"not json", DM_SCHED_AUTO, COL_EFORMAT, "JSON"},
        {"[1, 2]", DM_SCHED_AUTO, COL_EFORMAT, "JSON"},
        {"{}", DM_SCHED_AUTO, COL_EFORMAT, "_class_name"},
        {"{\"_class_name\": 5}", DM_SCHED_AUTO, COL_EFORMAT, "_class_name"},
        {"{\"_class_name\": \"HeunDiscreteScheduler\"}", DM_SCHED_AUTO, COL_EUNSUPPORTED, "HeunDiscreteScheduler"},
        {"{\"_class_name\": \"DDIMScheduler\", \"beta_schedule\": \"cubic\"}", DM_SCHED_AUTO, COL_EFORMAT, "beta_schedule"},
        {"{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 0}", DM_SCHED_AUTO, COL_EFORMAT,
         "num_train_timesteps"},
        {"{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 10.5}", DM_SCHED_AUTO, COL_EFORMAT,
         "num_train_timesteps"},
        {"{\"_class_name\": \"DDIMScheduler\", \"beta_start\": 0.02, \"beta_end\": 0.001}", DM_SCHED_AUTO, COL_EFORMAT,
         "beta_start"},
        {"{\"_class_name\": \"DDIMScheduler\", \"beta_end\": -1}", DM_SCHED_AUTO, COL_EFORMAT, "beta_end"},
        {"{\"_class_name\": \"DDIMScheduler\", \"beta_end\": NaN}", DM_SCHED_AUTO, COL_EFORMAT, "NaN"},
        {"{\"_class_name\": \"DDIMScheduler\", \"clip_sample\": \"yes\"}", DM_SCHED_AUTO, COL_EFORMAT, "clip_sample"},
        {"{\"_class_name\": \"DDIMScheduler\", \"steps_offset\": -1}", DM_SCHED_AUTO, COL_EFORMAT, "steps_offset"},
        {"{\"_class_name\": \"DDIMScheduler\", \"trained_betas\": [0.1, 2]}", DM_SCHED_AUTO, COL_EFORMAT,
         "trained_betas"},
        {"{\"_class_name\": \"DDIMScheduler\", \"prediction_type\": \"noise\"}", DM_SCHED_AUTO, COL_EFORMAT,
         "prediction_type"},
        {"{\"_class_name\": \"DDIMScheduler\", \"timestep_spacing\": 3}", DM_SCHED_AUTO, COL_EFORMAT,
         "timestep_spacing"},
        {"{\"_class_name\": \"DDIMScheduler\", \"thresholding\": true}", DM_SCHED_AUTO, COL_EUNSUPPORTED, "thresholding"},
        {"{\"_class_name\": \"DPMSolverMultistepScheduler\", \"algorithm_type\": \"sde-dpmsolver++\"}", DM_SCHED_AUTO,
         COL_EUNSUPPORTED, "algorithm_type"},
        {"{\"_class_name\": \"DPMSolverMultistepScheduler\", \"solver_order\": 4}", DM_SCHED_AUTO, COL_EFORMAT,
         "solver_order"},
        {"{\"_class_name\": \"DPMSolverMultistepScheduler\", \"variance_type\": \"learned_range\"}", DM_SCHED_AUTO,
         COL_EUNSUPPORTED, "variance_type"},
        {"{\"_class_name\": \"DDPMScheduler\", \"variance_type\": \"learned_range\"}", DM_SCHED_AUTO, COL_EUNSUPPORTED,
         "variance_type"},
        {"{\"_class_name\": \"EulerDiscreteScheduler\", \"use_exponential_sigmas\": true}", DM_SCHED_AUTO,
         COL_EUNSUPPORTED, "use_exponential_sigmas"},
        {"{\"_class_name\": \"EulerDiscreteScheduler\", \"interpolation_type\": \"log_linear\"}", DM_SCHED_AUTO,
         COL_EUNSUPPORTED, "interpolation_type"},
        {"{\"_class_name\": \"EulerDiscreteScheduler\", \"timestep_type\": \"cosmic\"}", DM_SCHED_AUTO,
         COL_EFORMAT, "timestep_type"},
        {"{\"_class_name\": \"EulerAncestralDiscreteScheduler\", \"prediction_type\": \"sample\"}", DM_SCHED_AUTO,
         COL_EUNSUPPORTED, "prediction_type"},
        {"{\"_class_name\": \"LCMScheduler\", \"original_inference_steps\": 2000}", DM_SCHED_AUTO, COL_EFORMAT,
         "original_inference_steps"},
        {"{\"num_train_timesteps\": 1000}", (dm_sched_kind)42, COL_EINVAL, "kind"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        col_err err = {COL_OK};
        dm_sched_config c;
        col_status st = dm_sched_config_parse(bad[i].json, bad[i].kind, &c, &err);
        TL_OK(st == bad[i].st && strstr(err.msg, bad[i].says) != NULL && !c.trained_betas, "refused %s: %s",
              bad[i].json, err.msg);
    }
    col_err err = {COL_OK};
    dm_sched_config c;
    TL_OK(dm_sched_config_load(FIXTURES "/no_such_config.json", DM_SCHED_AUTO, &c, &err) == COL_EIO &&
              strstr(err.msg, "no_such_config.json"),
          "a missing file: %s", err.msg);
    TL_OK(dm_sched_config_parse("{\"_class_name\": \"DDIMScheduler\", \"thresholding\": false, \"foo\": null}",
                                DM_SCHED_AUTO, &c, &err) == COL_OK,
          "thresholding false and unknown keys are fine");
}

/* set_timesteps and step misuse */
static void test_misuse(void)
{
    col_err err = {COL_OK};
    dm_sched_config c;
    dm_sched *s = NULL;
    float x[N] = {0}, m[N] = {0};
    col_torch_gen g;
    col_torch_gen_seed(&g, 1);
    bool ok = dm_sched_config_load(FIXTURES "/sched_cfg_sd15.json", DM_SCHED_EULER_A, &c, &err) == COL_OK &&
              dm_sched_create(&c, &s, &err) == COL_OK;
    TL_OK(ok, "euler-a made %s", err.msg);
    if (!ok)
        return;
    TL_OK(dm_sched_step(s, m, x, x, N, &g, &err) == COL_ESTATE, "step before set_timesteps: %s", err.msg);
    TL_OK(dm_sched_set_timesteps(s, 0, 1.0, &err) == COL_EINVAL, "0 steps: %s", err.msg);
    TL_OK(dm_sched_set_timesteps(s, 1001, 1.0, &err) == COL_EINVAL, "1001 steps: %s", err.msg);
    TL_OK(dm_sched_set_timesteps(s, 10, 1.5, &err) == COL_EINVAL, "strength 1.5: %s", err.msg);
    TL_OK(dm_sched_set_timesteps(s, 10, 0.05, &err) == COL_EINVAL, "strength 0.05 of 10 steps leaves none: %s",
          err.msg);
    TL_OK(dm_sched_set_timesteps(s, 10, 1.0, &err) == COL_OK, "10 steps");
    TL_OK(dm_sched_step(s, m, x, x, N, NULL, &err) == COL_EINVAL && strstr(err.msg, "generator"),
          "euler-a without a generator: %s", err.msg);
    TL_OK(dm_sched_step(s, m, x, x, N, &g, &err) == COL_OK && dm_sched_step(s, m, x, x, N / 2, &g, &err) == COL_EINVAL,
          "a step over another size mid-run: %s", err.msg);
    TL_OK(dm_sched_add_noise(s, x, m, (const int64_t[]){5}, 1, N, x, &err) == COL_EUNSUPPORTED,
          "training noise from euler-a: %s", err.msg);
    dm_sched_free(s);
    dm_sched_config_free(&c);
    ok = dm_sched_config_load(FIXTURES "/sched_cfg_sd15.json", DM_SCHED_LCM, &c, &err) == COL_OK &&
         dm_sched_create(&c, &s, &err) == COL_OK;
    TL_OK(ok && dm_sched_set_timesteps(s, 60, 1.0, &err) == COL_EINVAL, "lcm: 60 steps of 50 original: %s", err.msg);
    dm_sched_free(s);
    ok = dm_sched_config_load(FIXTURES "/sched_cfg_prk.json", DM_SCHED_PNDM, &c, &err) == COL_OK &&
         dm_sched_create(&c, &s, &err) == COL_OK;
    TL_OK(ok && dm_sched_set_timesteps(s, 3, 1.0, &err) == COL_EINVAL, "pndm with PRK: 3 steps: %s", err.msg);
    dm_sched_free(s);
    c.num_train_timesteps = 1;
    TL_OK(dm_sched_create(&c, &s, &err) == COL_EFORMAT && !s, "a config filled in badly by hand: %s", err.msg);
}

/* the train-time tables and DDPM's training noise */
static void test_tables(void)
{
    static const char *const names[] = {"sd15", "sd2v", "ddpm_default", "dpm_saved", "zsnr", "cosine",
                                        "linear_sample", "lcm_orig"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        col_err err = {COL_OK};
        dm_sched_config c;
        dm_sched *s = NULL;
        bool dpm = strcmp(names[i], "dpm_saved") == 0;
        bool ok = load_cfg(names[i], dpm ? DM_SCHED_DPMPP_2M : DM_SCHED_DDPM, &c, &err) == COL_OK &&
                  dm_sched_create(&c, &s, &err) == COL_OK;
        double want[1000];
        int n = values(find("cfg.%s.%s", names[i], "acp"), want, 1000), exact = 0;
        double worst = 0;
        for (int j = 0; ok && j < n; j++) {
            double a = dm_sched_alphas_cumprod(s)[j];
            exact += a == want[j];
            worst = fmax(worst, fabs(a - want[j]) / want[j]);
        }
        /* zero terminal SNR: the rescale goes through torch's sqrt (an ulp off now and then) */
        bool zsnr = c.rescale_betas_zero_snr;
        TL_OK(ok && n == 1000 && (zsnr ? worst < 1e-5 : exact == n),
              "%s: alphas_cumprod as diffusers' (%d of %d exactly, worst relative %.1e) %s", names[i], exact, n, worst,
              err.msg);
        dm_sched_free(s);
        dm_sched_config_free(&c);
    }
    /* add_noise and get_velocity, four items at t 0, 1, 500, 999 */
    float orig[4 * 64], noise[4 * 64], out[4 * 64];
    col_torch_gen g;
    col_torch_gen_seed(&g, 5);
    col_torch_randn(&g, orig, 256);
    col_torch_gen_seed(&g, 6);
    col_torch_randn(&g, noise, 256);
    const int64_t t[4] = {0, 1, 500, 999};
    static const char *const cfgs[] = {"ddpm_default", "sd2v"};
    for (int k = 0; k < 2; k++) {
        col_err err = {COL_OK};
        dm_sched_config c;
        dm_sched *s = NULL;
        bool ok = load_cfg(cfgs[k], DM_SCHED_AUTO, &c, &err) == COL_OK && dm_sched_create(&c, &s, &err) == COL_OK;
        double want[256], mx;
        ok = ok && dm_sched_add_noise(s, orig, noise, t, 4, 64, out, &err) == COL_OK;
        double e = ok && values(find("train.%s.%s", cfgs[k], "noisy"), want, 256) == 256 ? nmse(out, want, 256, &mx) : 1;
        TL_OK(e <= 1e-12, "%s: add_noise at t 0, 1, 500, 999 as diffusers' (NMSE %.1e) %s", cfgs[k], e, err.msg);
        ok = ok && dm_sched_get_velocity(s, orig, noise, t, 4, 64, out, &err) == COL_OK;
        e = ok && values(find("train.%s.%s", cfgs[k], "velocity"), want, 256) == 256 ? nmse(out, want, 256, &mx) : 1;
        TL_OK(e <= 1e-12, "%s: get_velocity as diffusers' (NMSE %.1e) %s", cfgs[k], e, err.msg);
        TL_OK(dm_sched_add_noise(s, orig, noise, (const int64_t[]){1000}, 1, 64, out, &err) == COL_EINVAL,
              "%s: timestep 1000 refused: %s", cfgs[k], err.msg);
        dm_sched_free(s);
        dm_sched_config_free(&c);
    }
}

int main(void)
{
    col_err err = {COL_OK};
    if (col_st_open(FIXTURES "/scheduler_runs.safetensors", &fix, &err) != COL_OK) {
        TL_OK(false, "fixture readable: %s", err.msg);
        return tl_done();
    }
    cJSON *plan = cJSON_Parse(col_st_metadata(fix, "plan") ? col_st_metadata(fix, "plan") : "");
    TL_OK(cJSON_IsArray(plan), "fixture plan readable (%d runs)", cJSON_GetArraySize(plan));
    test_defaults();
    test_bad_configs();
    test_misuse();
    test_tables();
    summary sum = {{0}, {0}};
    for (const cJSON *r = plan ? plan->child : NULL; r; r = r->next)
        one_run(r, &sum);
    for (int k = 0; k < DM_SCHED_COUNT; k++)
        TL_NOTE("%-15s %2d runs, worst final NMSE %.2e", dm_sched_kind_name((dm_sched_kind)k), sum.runs[k],
                sum.worst[k]);
    cJSON_Delete(plan);
    col_st_close(fix);
    return tl_done();
}
