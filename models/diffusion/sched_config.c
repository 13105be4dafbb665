/* sched_config.c - diffusers' scheduler_config.json: defaults per class, reading, checks. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"
#include "textio.h"

#define K(k) (1u << (k))
#define ALL_KINDS 0xffu

static const struct {
    dm_sched_kind kind;
    const char *name, *class_name;
} kinds[] = {
    {DM_SCHED_DDIM, "ddim", "DDIMScheduler"},
    {DM_SCHED_PNDM, "pndm", "PNDMScheduler"},
    {DM_SCHED_EULER, "euler", "EulerDiscreteScheduler"},
    {DM_SCHED_EULER_A, "euler-a", "EulerAncestralDiscreteScheduler"},
    {DM_SCHED_DPMPP_2M, "dpm++2m", "DPMSolverMultistepScheduler"},
    {DM_SCHED_DPMPP_2M_KARRAS, "dpm++2m-karras", NULL},
    {DM_SCHED_LCM, "lcm", "LCMScheduler"},
    {DM_SCHED_DDPM, "ddpm", "DDPMScheduler"},
};

const char *dm_sched_kind_name(dm_sched_kind k)
{
    if (k == DM_SCHED_AUTO)
        return "auto";
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == k)
            return kinds[i].name;
    return "?";
}

dm_sched_kind dm_sched_kind_from_name(const char *name)
{
    if (name && strcmp(name, "auto") == 0)
        return DM_SCHED_AUTO;
    for (size_t i = 0; name && i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, name) == 0)
            return kinds[i].kind;
    return (dm_sched_kind)-2;
}

void dm_sched_config_default(dm_sched_kind kind, dm_sched_config *c)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->num_train_timesteps = 1000;
    c->beta_start = 0.0001;
    c->beta_end = 0.02;
    c->beta_schedule = DM_BETA_LINEAR;
    c->prediction_type = DM_PRED_EPSILON;
    c->timestep_spacing = DM_SPACING_LEADING;
    c->clip_sample_range = 1.0;
    c->final_sigmas_type = DM_FINAL_SIGMA_ZERO;
    c->solver_order = 2;
    c->lower_order_final = true;
    c->lambda_min_clipped = -INFINITY;
    c->original_inference_steps = 50;
    c->timestep_scaling = 10.0;
    c->variance_type = DM_VAR_FIXED_SMALL;
    switch (kind) {
    case DM_SCHED_DDIM:
        c->set_alpha_to_one = true;
        c->clip_sample = true;
        break;
    case DM_SCHED_DDPM:
        c->clip_sample = true;
        break;
    case DM_SCHED_EULER:
    case DM_SCHED_EULER_A:
    case DM_SCHED_DPMPP_2M:
        c->timestep_spacing = DM_SPACING_LINSPACE;
        break;
    case DM_SCHED_DPMPP_2M_KARRAS:
        c->timestep_spacing = DM_SPACING_LINSPACE;
        c->use_karras_sigmas = true;
        break;
    case DM_SCHED_LCM:
        c->beta_start = 0.00085;
        c->beta_end = 0.012;
        c->beta_schedule = DM_BETA_SCALED_LINEAR;
        c->set_alpha_to_one = true;
        break;
    default:
        break;
    }
}

void dm_sched_config_free(dm_sched_config *c)
{
    if (c) {
        free(c->trained_betas);
        c->trained_betas = NULL;
    }
}

/* ---- reading ---- */

typedef struct {
    const cJSON *root;
    unsigned kmask;   /* bit of the kind being read */
    col_err *err;
    col_status st;
} rd;

/* The item for key if this kind knows the key and the file gives a non-null value. */
static const cJSON *item(rd *r, const char *key, unsigned kinds_mask)
{
    if (r->st != COL_OK || !(kinds_mask & r->kmask))
        return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static void fail(rd *r, col_status st, const char *fmt, const char *key, const char *what)
{
    if (r->st == COL_OK)
        r->st = col_err_set(r->err, st, fmt, key, what);
}

static void get_bool(rd *r, const char *key, unsigned km, bool *v)
{
    const cJSON *it = item(r, key, km);
    if (!it)
        return;
    if (!cJSON_IsBool(it))
        fail(r, COL_EFORMAT, "scheduler config: \"%s\" must be true or false%s", key, "");
    else
        *v = cJSON_IsTrue(it);
}

static void get_num(rd *r, const char *key, unsigned km, double *v, double lo, double hi)
{
    const cJSON *it = item(r, key, km);
    if (!it)
        return;
    if (!cJSON_IsNumber(it) || isnan(it->valuedouble) || it->valuedouble < lo || it->valuedouble > hi) {
        char what[96];
        snprintf(what, sizeof what, " between %g and %g", lo, hi);
        fail(r, COL_EFORMAT, "scheduler config: \"%s\" must be a number%s", key, what);
    } else {
        *v = it->valuedouble;
    }
}

static void get_int(rd *r, const char *key, unsigned km, int *v, int lo, int hi)
{
    const cJSON *it = item(r, key, km);
    if (!it)
        return;
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d)) {
        char what[96];
        snprintf(what, sizeof what, " from %d to %d", lo, hi);
        fail(r, COL_EFORMAT, "scheduler config: \"%s\" must be an integer%s", key, what);
    } else {
        *v = (int)d;
    }
}

/* The index of the string value among names (NULL-terminated), or -1 when absent/null. */
static int get_choice(rd *r, const char *key, unsigned km, const char *const *names, const char *list)
{
    const cJSON *it = item(r, key, km);
    if (!it)
        return -1;
    if (cJSON_IsString(it))
        for (int i = 0; names[i]; i++)
            if (strcmp(it->valuestring, names[i]) == 0)
                return i;
    fail(r, COL_EFORMAT, "scheduler config: \"%s\" must be one of %s", key, list);
    return -1;
}

/* A flag this module does not implement: true is COL_EUNSUPPORTED. */
static void refuse_true(rd *r, const char *key, unsigned km)
{
    bool v = false;
    get_bool(r, key, km, &v);
    if (v)
        fail(r, COL_EUNSUPPORTED, "scheduler config: \"%s\": true is not supported%s", key, "");
}

/* Python's json writes -Infinity, Infinity and NaN, which JSON (and cJSON) lack:
 * outside strings, the infinities become 1e999 (read as inf), NaN an error. */
static char *json_fix_nonfinite(const char *s, col_err *err)
{
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (!o) {
        col_err_set(err, COL_ENOMEM, "scheduler config: out of memory");
        return NULL;
    }
    size_t j = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (in_str) {
            o[j++] = ch;
            if (ch == '\\' && i + 1 < n)
                o[j++] = s[++i];
            else if (ch == '"')
                in_str = false;
            continue;
        }
        if (ch == '"') {
            in_str = true;
        } else if (strncmp(s + i, "Infinity", 8) == 0) {
            memcpy(o + j, "1e999", 5);
            j += 5;
            i += 7;
            continue;
        } else if (strncmp(s + i, "NaN", 3) == 0) {
            free(o);
            col_err_set(err, COL_EFORMAT, "scheduler config: a value is NaN");
            return NULL;
        }
        o[j++] = ch;
    }
    o[j] = 0;
    return o;
}

static dm_sched_kind kind_of_class(const char *cls)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].class_name && strcmp(kinds[i].class_name, cls) == 0)
            return kinds[i].kind;
    return (dm_sched_kind)-2;
}

static void read_fields(rd *r, dm_sched_config *c)
{
    const unsigned DPM = K(DM_SCHED_DPMPP_2M) | K(DM_SCHED_DPMPP_2M_KARRAS);
    const unsigned ACP = K(DM_SCHED_DDIM) | K(DM_SCHED_PNDM) | K(DM_SCHED_LCM);   /* set_alpha_to_one */
    const unsigned CLIP = K(DM_SCHED_DDIM) | K(DM_SCHED_LCM) | K(DM_SCHED_DDPM);
    const unsigned THR = CLIP | DPM;
    get_int(r, "num_train_timesteps", ALL_KINDS, &c->num_train_timesteps, 2, 100000);
    get_num(r, "beta_start", ALL_KINDS, &c->beta_start, 0, 1);
    get_num(r, "beta_end", ALL_KINDS, &c->beta_end, 0, 1);
    static const char *const sched_names[] = {"linear", "scaled_linear", "squaredcos_cap_v2", NULL};
    int v = get_choice(r, "beta_schedule", ALL_KINDS, sched_names, "linear, scaled_linear, squaredcos_cap_v2");
    if (v >= 0)
        c->beta_schedule = (dm_beta_schedule)v;
    const cJSON *tb = item(r, "trained_betas", ALL_KINDS);
    if (tb) {
        int n = cJSON_IsArray(tb) ? cJSON_GetArraySize(tb) : -1;
        bool ok = n >= 2 && n <= 100000;
        float *b = ok ? malloc(sizeof(float) * (size_t)n) : NULL;
        int i = 0;
        for (const cJSON *e = ok ? tb->child : NULL; e && b; e = e->next, i++) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble > 0 && e->valuedouble < 1))
                ok = false;
            else
                b[i] = (float)e->valuedouble;
        }
        if (!ok || !b) {
            free(b);
            fail(r, COL_EFORMAT, "scheduler config: \"%s\" must be a list of betas in (0, 1)%s", "trained_betas", "");
        } else {
            free(c->trained_betas);
            c->trained_betas = b;
            c->num_train_timesteps = n;
        }
    }
    static const char *const pred_names[] = {"epsilon", "v_prediction", "sample", "original_sample", NULL};
    v = get_choice(r, "prediction_type", ALL_KINDS, pred_names, "epsilon, v_prediction, sample");
    if (v >= 0)
        c->prediction_type = v == 0 ? DM_PRED_EPSILON : v == 1 ? DM_PRED_V : DM_PRED_SAMPLE;
    if (r->st == COL_OK && c->prediction_type == DM_PRED_SAMPLE &&
        (c->kind == DM_SCHED_PNDM || c->kind == DM_SCHED_EULER_A))
        fail(r, COL_EUNSUPPORTED, "scheduler config: \"%s\": %s has no \"sample\" prediction", "prediction_type",
             dm_sched_kind_name(c->kind));
    static const char *const sp_names[] = {"leading", "trailing", "linspace", NULL};
    v = get_choice(r, "timestep_spacing", ALL_KINDS, sp_names, "leading, trailing, linspace");
    if (v >= 0)
        c->timestep_spacing = (dm_spacing)v;
    get_int(r, "steps_offset", ALL_KINDS, &c->steps_offset, 0, 100000);
    get_bool(r, "rescale_betas_zero_snr", ALL_KINDS & ~K(DM_SCHED_PNDM), &c->rescale_betas_zero_snr);
    get_bool(r, "set_alpha_to_one", ACP, &c->set_alpha_to_one);
    get_bool(r, "clip_sample", CLIP, &c->clip_sample);
    get_num(r, "clip_sample_range", CLIP, &c->clip_sample_range, 1e-30, 1e30);
    refuse_true(r, "thresholding", THR);
    get_bool(r, "skip_prk_steps", K(DM_SCHED_PNDM), &c->skip_prk_steps);
    get_bool(r, "use_karras_sigmas", K(DM_SCHED_EULER) | DPM, &c->use_karras_sigmas);
    refuse_true(r, "use_exponential_sigmas", K(DM_SCHED_EULER) | DPM);
    refuse_true(r, "use_beta_sigmas", K(DM_SCHED_EULER) | DPM);
    refuse_true(r, "use_lu_lambdas", DPM);
    refuse_true(r, "use_flow_sigmas", DPM);
    refuse_true(r, "use_dynamic_shifting", DPM);
    static const char *const fs_names[] = {"zero", "sigma_min", NULL};
    v = get_choice(r, "final_sigmas_type", K(DM_SCHED_EULER) | DPM, fs_names, "zero, sigma_min");
    if (v >= 0)
        c->final_sigmas_type = (dm_final_sigma)v;
    if (item(r, "sigma_min", K(DM_SCHED_EULER))) {
        c->has_sigma_min = true;
        get_num(r, "sigma_min", K(DM_SCHED_EULER), &c->sigma_min, 1e-30, 1e30);
    }
    if (item(r, "sigma_max", K(DM_SCHED_EULER))) {
        c->has_sigma_max = true;
        get_num(r, "sigma_max", K(DM_SCHED_EULER), &c->sigma_max, 1e-30, 1e30);
    }
    static const char *const it_names[] = {"linear", "log_linear", NULL};
    if (get_choice(r, "interpolation_type", K(DM_SCHED_EULER), it_names, "linear, log_linear") == 1)
        fail(r, COL_EUNSUPPORTED, "scheduler config: \"%s\": %s is not supported", "interpolation_type", "log_linear");
    static const char *const tt_names[] = {"discrete", "continuous", NULL};
    if (get_choice(r, "timestep_type", K(DM_SCHED_EULER), tt_names, "discrete, continuous") == 1)
        c->continuous_timesteps = true;
    get_int(r, "solver_order", DPM, &c->solver_order, 1, 3);
    static const char *const alg_names[] = {"dpmsolver++", "deis", "dpmsolver", "sde-dpmsolver", "sde-dpmsolver++", NULL};
    v = get_choice(r, "algorithm_type", DPM, alg_names, "dpmsolver++, dpmsolver, sde-dpmsolver, sde-dpmsolver++");
    if (v >= 2)
        fail(r, COL_EUNSUPPORTED, "scheduler config: \"%s\": only %s is supported", "algorithm_type", "dpmsolver++");
    static const char *const st_names[] = {"midpoint", "heun", "logrho", "bh1", "bh2", NULL};
    v = get_choice(r, "solver_type", DPM, st_names, "midpoint, heun");
    if (v >= 0)
        c->solver_heun = v == 1;
    get_bool(r, "lower_order_final", DPM, &c->lower_order_final);
    get_bool(r, "euler_at_final", DPM, &c->euler_at_final);
    get_num(r, "lambda_min_clipped", DPM, &c->lambda_min_clipped, -INFINITY, INFINITY);
    if (item(r, "variance_type", DPM))
        fail(r, COL_EUNSUPPORTED, "scheduler config: \"%s\": %s is not supported", "variance_type", "a learned variance");
    get_int(r, "original_inference_steps", K(DM_SCHED_LCM), &c->original_inference_steps, 1, 100000);
    get_num(r, "timestep_scaling", K(DM_SCHED_LCM), &c->timestep_scaling, 1e-30, 1e30);
    static const char *const var_names[] = {"fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log",
                                            "learned", "learned_range", NULL};
    v = get_choice(r, "variance_type", K(DM_SCHED_DDPM), var_names,
                   "fixed_small, fixed_small_log, fixed_large, fixed_large_log, learned, learned_range");
    if (v >= 3)
        fail(r, COL_EUNSUPPORTED, "scheduler config: \"%s\": %s is not supported (fixed_small, fixed_small_log and "
             "fixed_large are)", "variance_type", var_names[v]);
    else if (v >= 0)
        c->variance_type = v == 0 ? DM_VAR_FIXED_SMALL : v == 1 ? DM_VAR_FIXED_SMALL_LOG : DM_VAR_FIXED_LARGE;
}

/* Cross-field checks, for a config from a file or filled in by hand. */
static col_status check_config(const dm_sched_config *c, col_err *err)
{
    if (c->kind < 0 || c->kind >= DM_SCHED_COUNT)
        return col_err_set(err, COL_EINVAL, "scheduler config: kind %d is not a scheduler", (int)c->kind);
    if (c->num_train_timesteps < 2 || c->num_train_timesteps > 100000)
        return col_err_set(err, COL_EFORMAT, "scheduler config: num_train_timesteps %d is not in 2..100000",
                           c->num_train_timesteps);
    if (!c->trained_betas && c->beta_schedule != DM_BETA_SQUAREDCOS_CAP_V2 &&
        !(c->beta_start > 0 && c->beta_start <= c->beta_end && c->beta_end < 1))
        return col_err_set(err, COL_EFORMAT,
                           "scheduler config: beta_start %g and beta_end %g must satisfy 0 < start <= end < 1",
                           c->beta_start, c->beta_end);
    if (c->steps_offset < 0 || c->steps_offset >= c->num_train_timesteps)
        return col_err_set(err, COL_EFORMAT, "scheduler config: steps_offset %d is not below num_train_timesteps %d",
                           c->steps_offset, c->num_train_timesteps);
    if (c->solver_order < 1 || c->solver_order > 3)
        return col_err_set(err, COL_EFORMAT, "scheduler config: solver_order %d is not 1, 2 or 3", c->solver_order);
    if (c->kind == DM_SCHED_LCM && c->original_inference_steps > c->num_train_timesteps)
        return col_err_set(err, COL_EFORMAT,
                           "scheduler config: original_inference_steps %d exceeds num_train_timesteps %d",
                           c->original_inference_steps, c->num_train_timesteps);
    if (!(c->eta >= 0 && c->eta <= 1e3))
        return col_err_set(err, COL_EINVAL, "scheduler config: eta %g must be a number >= 0", c->eta);
    if (c->rescale_betas_zero_snr && c->kind == DM_SCHED_PNDM)
        return col_err_set(err, COL_EUNSUPPORTED, "scheduler config: pndm has no rescale_betas_zero_snr");
    return COL_OK;
}

col_status dm_sched_config_check(const dm_sched_config *c, col_err *err)
{
    return check_config(c, err);
}

col_status dm_sched_config_parse(const char *json, dm_sched_kind kind, dm_sched_config *c, col_err *err)
{
    memset(c, 0, sizeof *c);
    if (!json)
        return col_err_set(err, COL_EINVAL, "scheduler config: no text");
    if (kind != DM_SCHED_AUTO && (kind < 0 || kind >= DM_SCHED_COUNT))
        return col_err_set(err, COL_EINVAL, "scheduler config: kind %d is not a scheduler", (int)kind);
    char *text = json_fix_nonfinite(json, err);
    if (!text)
        return err ? err->code : COL_EFORMAT;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return col_err_set(err, COL_EFORMAT, "scheduler config: not a JSON object");
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "_class_name");
    if (cls && !cJSON_IsString(cls)) {
        cJSON_Delete(root);
        return col_err_set(err, COL_EFORMAT, "scheduler config: \"_class_name\" must be a string");
    }
    dm_sched_kind k = kind;
    if (kind == DM_SCHED_AUTO) {
        if (!cls) {
            cJSON_Delete(root);
            return col_err_set(err, COL_EFORMAT, "scheduler config: no \"_class_name\" to tell the scheduler");
        }
        k = kind_of_class(cls->valuestring);
        if ((int)k < 0) {
            col_err_set(err, COL_EUNSUPPORTED,
                        "scheduler config: class \"%.80s\" is not supported (DDIM, PNDM, EulerDiscrete, "
                        "EulerAncestralDiscrete, DPMSolverMultistep, LCM, DDPM are)",
                        cls->valuestring);
            cJSON_Delete(root);
            return COL_EUNSUPPORTED;
        }
        const cJSON *ks = cJSON_GetObjectItemCaseSensitive(root, "use_karras_sigmas");
        if (k == DM_SCHED_DPMPP_2M && cJSON_IsTrue(ks))
            k = DM_SCHED_DPMPP_2M_KARRAS;
    }
    dm_sched_config_default(k, c);
    /* the two dpm++ kinds read the same keys (those of DPMSolverMultistepScheduler) */
    rd r = {root, K(k) | ((k == DM_SCHED_DPMPP_2M_KARRAS) ? K(DM_SCHED_DPMPP_2M) : 0), err, COL_OK};
    read_fields(&r, c);
    cJSON_Delete(root);
    if (r.st != COL_OK) {
        dm_sched_config_free(c);
        return r.st;
    }
    if (k == DM_SCHED_DPMPP_2M)
        c->use_karras_sigmas = false;
    if (k == DM_SCHED_DPMPP_2M_KARRAS)
        c->use_karras_sigmas = true;
    col_status st = check_config(c, err);
    if (st != COL_OK)
        dm_sched_config_free(c);
    return st;
}

col_status dm_sched_config_load(const char *path, dm_sched_kind kind, dm_sched_config *c, col_err *err)
{
    char *text = NULL;
    size_t len = 0;
    memset(c, 0, sizeof *c);
    col_status st = col_read_file(path, 1u << 20, &text, &len, err);
    if (st != COL_OK)
        return st;
    if (strlen(text) != len) {
        free(text);
        return col_err_set(err, COL_EFORMAT, "%s: a NUL byte in a JSON file", path);
    }
    st = dm_sched_config_parse(text, kind, c, err);
    free(text);
    if (st != COL_OK)
        col_err_prefix(err, "%s", path);
    return st;
}
