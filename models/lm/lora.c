/* lora.c - which weights get LoRA adapters, their names, shapes and
 * initialisation, merging into the base weight, and PEFT's
 * adapter_config.json. The graph path is col_lm_lora (lm_layers.c); which
 * modules a family may adapt is in its table entry (lm_family.h). */
#include "lora.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm_family.h"
#include "lm_layers.h"
#include "rng.h"

enum { MAX_MODULES = 8 };

static const char *const no_modules[] = {NULL};

/* the family's adaptable modules (lm_family.h), NULL-terminated */
static const char *const *modules_of(col_arch a)
{
    const col_lm_family *f = col_lm_family_of(a);
    return f ? f->lora_modules : no_modules;
}

/* Conv1D weights are [in, out]; nn.Linear's [out, in] */
static bool conv1d_of(col_arch a)
{
    const col_lm_family *f = col_lm_family_of(a);
    return f && f->conv1d;
}

const char *col_lora_valid_modules(col_arch arch, char *buf, size_t len)
{
    const char *const *mods = modules_of(arch);
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; mods[k]; k++) {
        int w = snprintf(buf + n, len - n, "%s%s", k ? ", " : "", mods[k]);
        if (w < 0 || (size_t)w >= len - n)
            break;
        n += (size_t)w;
    }
    return buf;
}

const char *col_lora_default_targets(col_arch arch)
{
    const col_lm_family *f = col_lm_family_of(arch);
    return f ? f->lora_default_targets : "";
}

float col_lora_alpha(const col_lora_config *l) { return l->alpha == 0 ? (float)l->rank : l->alpha; }
float col_lora_scale(const col_lora_config *l) { return l->rank > 0 ? col_lora_alpha(l) / (float)l->rank : 0.0f; }

/* the module name of a weight ("model.layers.0.self_attn.q_proj.weight" -> "q_proj"), or NULL */
static const char *module_name(const char *pname, char *buf, size_t len)
{
    size_t n = strlen(pname);
    if (n < 8 || strcmp(pname + n - 7, ".weight") != 0)
        return NULL;
    size_t end = n - 7, begin = end;
    while (begin > 0 && pname[begin - 1] != '.')
        begin--;
    if (end - begin >= len)
        return NULL;
    memcpy(buf, pname + begin, end - begin);
    buf[end - begin] = 0;
    return buf;
}

/* parses targets into a bit mask over the family's modules */
static col_status parse_targets(col_arch arch, const char *targets, unsigned *mask, col_err *err)
{
    const char *const *mods = modules_of(arch);
    const char *s = targets[0] ? targets : col_lora_default_targets(arch);
    char valid[COL_LORA_MODULES_MAX];
    *mask = 0;
    while (*s) {
        while (*s == ',' || isspace((unsigned char)*s))
            s++;
        const char *b = s;
        while (*s && *s != ',')
            s++;
        const char *e = s;
        while (e > b && isspace((unsigned char)e[-1]))
            e--;
        if (e == b)
            continue;
        int k = 0;
        while (mods[k] && !(strlen(mods[k]) == (size_t)(e - b) && strncmp(mods[k], b, (size_t)(e - b)) == 0))
            k++;
        if (!mods[k])
            return col_err_set(err, COL_EINVAL, "LoRA target module '%.*s' is not a module of %s; valid: %s",
                               (int)(e - b > 64 ? 64 : e - b), b, col_arch_name(arch),
                               col_lora_valid_modules(arch, valid, sizeof valid));
        *mask |= 1u << k;
    }
    if (!*mask)
        return col_err_set(err, COL_EINVAL, "LoRA targets '%s' name no module; valid for %s: %s", targets,
                           col_arch_name(arch), col_lora_valid_modules(arch, valid, sizeof valid));
    return COL_OK;
}

static int module_index(col_arch arch, const char *name)
{
    const char *const *mods = modules_of(arch);
    for (int k = 0; mods[k]; k++)
        if (strcmp(mods[k], name) == 0)
            return k;
    return -1;
}

static void in_out(const col_lm_config *c, const col_param_spec *w, int64_t *in, int64_t *out)
{
    bool conv1d = conv1d_of(c->arch);
    *in = w->shape[conv1d ? 0 : 1];
    *out = w->shape[conv1d ? 1 : 0];
}

col_status col_lora_plan(const col_lm_config *c, const col_lora_config *l, const col_param_spec *specs, int np,
                         int *lora_of, int *n_adapters, col_err *err)
{
    *n_adapters = 0;
    for (int i = 0; i < np; i++)
        lora_of[i] = -1;
    if (l->rank == 0)
        return COL_OK;
    if (l->rank < 0)
        return col_err_set(err, COL_EINVAL, "LoRA rank %d is negative (0 = off)", l->rank);
    if (!(l->alpha >= 0 && isfinite(l->alpha)))
        return col_err_set(err, COL_EINVAL, "LoRA alpha %g must be a finite number >= 0 (0 = the rank)",
                           (double)l->alpha);
    if (!memchr(l->targets, 0, sizeof l->targets))
        return col_err_set(err, COL_EINVAL, "LoRA targets: the list is not terminated");
    unsigned mask;
    col_status st = parse_targets(c->arch, l->targets, &mask, err);
    if (st != COL_OK)
        return st;
    for (int i = 0; i < np; i++) {
        char buf[64];
        const char *m = specs[i].ndim == 2 ? module_name(specs[i].name, buf, sizeof buf) : NULL;
        int k = m ? module_index(c->arch, m) : -1;
        if (k < 0 || !(mask & (1u << k)))
            continue;
        int64_t in, out;
        in_out(c, &specs[i], &in, &out);
        if (l->rank > in || l->rank > out)
            return col_err_set(err, COL_EINVAL, "LoRA rank %d is larger than %s allows (min(in %lld, out %lld))",
                               l->rank, specs[i].name, (long long)in, (long long)out);
        lora_of[i] = (*n_adapters)++;
    }
    if (!*n_adapters)
        return col_err_set(err, COL_EINVAL, "LoRA targets '%s' match no weight of this %d-layer %s model", l->targets,
                           c->n_layer, col_arch_name(c->arch));
    return COL_OK;
}

void col_lora_target_list(const col_lm_config *c, const col_lora_config *l, char *buf, size_t len)
{
    unsigned mask = 0;
    col_err e = {0};
    buf[0] = 0;
    if (parse_targets(c->arch, l->targets, &mask, &e) != COL_OK)
        return;
    const char *const *mods = modules_of(c->arch);
    size_t n = 0;
    for (int k = 0; mods[k]; k++)
        if (mask & (1u << k)) {
            int w = snprintf(buf + n, len - n, "%s%s", n ? "," : "", mods[k]);
            if (w < 0 || (size_t)w >= len - n)
                return;
            n += (size_t)w;
        }
}

void col_lora_specs(const col_lm_config *c, const col_param_spec *w, int rank, col_param_spec *a, col_param_spec *b)
{
    int64_t in, out;
    in_out(c, w, &in, &out);
    int stem = (int)strlen(w->name) - 7; /* without ".weight" */
    char n[sizeof a->name + 32];
    snprintf(n, sizeof n, "base_model.model.%.*s.lora_A.weight", stem, w->name);
    col_spec_set(a, n, rank, in, COL_INIT_ZERO);
    snprintf(n, sizeof n, "base_model.model.%.*s.lora_B.weight", stem, w->name);
    col_spec_set(b, n, out, rank, COL_INIT_ZERO);
}

void col_lora_init(const col_param_spec *s, bool is_a, int index, float *data, uint64_t seed)
{
    int64_t n = col_param_numel(s);
    if (!is_a) {
        memset(data, 0, sizeof(float) * (size_t)n);
        return;
    }
    /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) = 1/sqrt(fan_in) */
    float bound = 1.0f / sqrtf((float)s->shape[1]);
    col_fill_uniform(data, n, seed * 0x9E3779B97F4A7C15ull + (uint64_t)index, -bound, bound);
}

void col_lora_merge(const col_lm_config *c, const col_param_spec *w, const float *wdata, const float *a,
                    const float *b, int rank, float scale, float *dst)
{
    int64_t in, out;
    in_out(c, w, &in, &out);
    bool conv1d = conv1d_of(c->arch);
    memcpy(dst, wdata, sizeof(float) * (size_t)(in * out));
    float *row = malloc(sizeof(float) * (size_t)in);
    for (int64_t o = 0; o < out; o++) {
        /* row = (B @ A)[o, :], accumulated over r in order */
        if (row) {
            for (int64_t i = 0; i < in; i++)
                row[i] = 0;
            for (int r = 0; r < rank; r++) {
                float br = b[o * rank + r];
                const float *ar = a + (int64_t)r * in;
                for (int64_t i = 0; i < in; i++)
                    row[i] += br * ar[i];
            }
        }
        for (int64_t i = 0; i < in; i++) {
            float d;
            if (row) {
                d = row[i];
            } else { /* no scratch row: the same sum, element by element */
                d = 0;
                for (int r = 0; r < rank; r++)
                    d += b[o * rank + r] * a[(int64_t)r * in + i];
            }
            float *x = conv1d ? &dst[i * out + o] : &dst[o * in + i];
            *x += scale * d;
        }
    }
    free(row);
}

col_status col_lora_config_json(const col_lm_config *c, const col_lora_config *l, char **json, col_err *err)
{
    *json = NULL;
    char list[256];
    col_lora_target_list(c, l, list, sizeof list);
    cJSON *o = cJSON_CreateObject(), *t = cJSON_CreateArray();
    if (!o || !t) {
        cJSON_Delete(o);
        cJSON_Delete(t);
        return col_err_set(err, COL_ENOMEM, "adapter_config.json: out of memory");
    }
    for (char *s = list, *e; *s; s = *e ? e + 1 : e) {
        e = strchr(s, ',');
        if (!e)
            e = s + strlen(s);
        char m[32];
        snprintf(m, sizeof m, "%.*s", (int)(e - s), s);
        cJSON_AddItemToArray(t, cJSON_CreateString(m));
    }
    cJSON_AddStringToObject(o, "base_model_name_or_path", "");
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "fan_in_fan_out", conv1d_of(c->arch));
    cJSON_AddBoolToObject(o, "inference_mode", 1);
    cJSON_AddBoolToObject(o, "init_lora_weights", 1);
    cJSON_AddNumberToObject(o, "lora_alpha", col_lora_alpha(l));
    cJSON_AddNumberToObject(o, "lora_dropout", 0.0);
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddNumberToObject(o, "r", l->rank);
    cJSON_AddItemToObject(o, "target_modules", t);
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    cJSON_AddBoolToObject(o, "use_dora", 0);
    cJSON_AddBoolToObject(o, "use_rslora", 0);
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    return *json ? COL_OK : col_err_set(err, COL_ENOMEM, "adapter_config.json: out of memory");
}

col_status col_lora_check_config_json(const char *json, size_t len, const char *name, const col_lm_config *c,
                                      const col_lora_config *l, col_err *err)
{
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return col_err_set(err, COL_EFORMAT, "%s is not a JSON object", name);
    }
    col_status st = COL_OK;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "peft_type");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "target_modules");
    const cJSON *dora = cJSON_GetObjectItemCaseSensitive(o, "use_dora");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "use_rslora");
    unsigned want = 0, have = 0;
    if (pt && !(cJSON_IsString(pt) && strcmp(pt->valuestring, "LORA") == 0))
        st = col_err_set(err, COL_EFORMAT, "%s: peft_type is not \"LORA\"", name);
    else if (cJSON_IsTrue(dora) || cJSON_IsTrue(rs))
        st = col_err_set(err, COL_EUNSUPPORTED, "%s: DoRA / rsLoRA adapters are not supported", name);
    else if (!cJSON_IsNumber(r) || r->valuedouble != floor(r->valuedouble) || r->valuedouble < 1 ||
             r->valuedouble > 1e6)
        st = col_err_set(err, COL_EFORMAT, "%s: \"r\" is missing or not a positive integer", name);
    else if ((int)r->valuedouble != l->rank)
        st = col_err_set(err, COL_EINVAL, "%s holds a rank %d adapter, but this run uses LoRA rank %d", name,
                         (int)r->valuedouble, l->rank);
    else if (!cJSON_IsNumber(al))
        st = col_err_set(err, COL_EFORMAT, "%s: \"lora_alpha\" is missing or not a number", name);
    else if ((float)al->valuedouble != col_lora_alpha(l))
        st = col_err_set(err, COL_EINVAL, "%s has lora_alpha %g, but this run uses alpha %g", name, al->valuedouble,
                         (double)col_lora_alpha(l));
    else if (!cJSON_IsArray(tm) && !cJSON_IsString(tm))
        st = col_err_set(err, COL_EFORMAT, "%s: \"target_modules\" is missing or not a list", name);
    if (st == COL_OK) {
        col_err e = {0};
        char valid[COL_LORA_MODULES_MAX];
        parse_targets(c->arch, l->targets, &want, &e);
        const cJSON *x;
        if (cJSON_IsString(tm)) { /* PEFT also allows one name (a regex); only plain names are understood */
            int k = module_index(c->arch, tm->valuestring);
            if (k < 0)
                st = col_err_set(err, COL_EFORMAT, "%s: target_modules \"%.64s\" is not a module of %s (%s)", name,
                                 tm->valuestring, col_arch_name(c->arch),
                                 col_lora_valid_modules(c->arch, valid, sizeof valid));
            else
                have = 1u << k;
        }
        const cJSON *list = cJSON_IsArray(tm) ? tm : NULL;
        cJSON_ArrayForEach(x, list)
        {
            int k = cJSON_IsString(x) ? module_index(c->arch, x->valuestring) : -1;
            if (k < 0) {
                st = col_err_set(err, COL_EFORMAT, "%s: target_modules holds %.64s, not a module of %s (%s)", name,
                                 cJSON_IsString(x) ? x->valuestring : "a non-string", col_arch_name(c->arch),
                                 col_lora_valid_modules(c->arch, valid, sizeof valid));
                break;
            }
            have |= 1u << k;
        }
    }
    if (st == COL_OK && have != want) {
        char wl[256];
        col_lora_target_list(c, l, wl, sizeof wl);
        st = col_err_set(err, COL_EINVAL, "%s adapts other modules than this run's LoRA targets (%s)", name, wl);
    }
    cJSON_Delete(o);
    return st;
}

col_status col_lora_read_config_json(const char *json, size_t len, const char *name, const col_lm_config *c,
                                     col_lora_config *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_ParseWithLength(json, len);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "r");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(o, "lora_alpha");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "target_modules");
    if (cJSON_IsNumber(r) && r->valuedouble >= 1 && r->valuedouble <= 1e6)
        out->rank = (int)r->valuedouble;
    if (cJSON_IsNumber(al) && isfinite(al->valuedouble) && al->valuedouble > 0)
        out->alpha = (float)al->valuedouble;
    const cJSON *x;
    const cJSON *list = cJSON_IsArray(tm) ? tm : NULL;
    if (cJSON_IsString(tm))
        snprintf(out->targets, sizeof out->targets, "%s", tm->valuestring);
    cJSON_ArrayForEach(x, list)
    {
        size_t used = strlen(out->targets);
        if (cJSON_IsString(x) && used + strlen(x->valuestring) + 2 < sizeof out->targets)
            snprintf(out->targets + used, sizeof out->targets - used, "%s%s", used ? "," : "", x->valuestring);
    }
    cJSON_Delete(o);
    /* every field is then checked against what was read (type, peft_type, DoRA, module names) */
    col_status st = col_lora_check_config_json(json, len, name, c, out, err);
    if (st == COL_OK && !out->targets[0])
        st = col_err_set(err, COL_EFORMAT, "%s: \"target_modules\" is empty", name);
    return st;
}
