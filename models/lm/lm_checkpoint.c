/* lm_checkpoint.c - a training session to and from disk: the model in
 * Hugging Face layout, LoRA adapters in PEFT's, the optimizer state beside
 * them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "textio.h"

static col_status ensure_dir(const char *dir, col_err *err)
{
    struct stat sb;
    if (stat(dir, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? COL_OK : col_err_set(err, COL_EIO, "%s exists and is not a directory", dir);
    if (mkdir(dir, 0755) != 0)
        return col_err_set(err, COL_EIO, "cannot create %s: %s", dir, strerror(errno));
    return COL_OK;
}

static int nparams(col_lm_trainer *t) { return col_lm_param_count(&col_lm_trainer_config(t)->model); }
static bool lora_on(col_lm_trainer *t) { return col_lm_trainer_n_params(t) > nparams(t); }

static col_st_out st_out(const char *name, const col_param_spec *s, const float *data)
{
    return (col_st_out){.name = name, .ndim = s->ndim, .shape = {s->shape[0], s->shape[1]}, .data = data};
}

/* adapter_model.safetensors + adapter_config.json */
static col_status save_adapter(col_lm_trainer *t, const char *dir, col_err *err)
{
    int np = nparams(t), nt = col_lm_trainer_n_params(t);
    const col_lm_train_config *cfg = col_lm_trainer_config(t);
    col_st_out *out = calloc((size_t)(nt - np), sizeof *out);
    if (!out)
        return col_err_set(err, COL_ENOMEM, "saving %s: out of memory", dir);
    for (int i = np; i < nt; i++) {
        const col_param_spec *s;
        const float *d = col_lm_trainer_param(t, i, &s);
        out[i - np] = st_out(s->name, s, d);
    }
    static const char *const meta[] = {"format", "pt", NULL};
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    col_status st = col_st_write_f32(path, out, nt - np, meta, err);
    free(out);
    char *json = NULL;
    if (st == COL_OK)
        st = col_lora_config_json(&cfg->model, &cfg->lora, &json, err);
    if (st == COL_OK) {
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        size_t n = strlen(json);
        char *text = realloc(json, n + 2); /* with a final newline, as PEFT writes it */
        if (text) {
            json = text;
            json[n++] = '\n';
            json[n] = 0;
        }
        st = col_write_file_atomic(path, json, n, err);
    }
    free(json);
    return st;
}

col_status col_lm_trainer_save_model(col_lm_trainer *t, const char *dir, col_err *err)
{
    return col_lm_trainer_save_model_ex(t, dir, 0, err);
}

/* runs fn with the tensors of kinds on the NVMe tier read into host memory;
 * they are written back when fn changed them (write) and succeeded */
static col_status in_host_view(col_lm_trainer *t, unsigned kinds, bool write,
                               col_status (*fn)(col_lm_trainer *, const char *, unsigned, col_err *),
                               const char *dir, unsigned flags, col_err *err)
{
    col_status st = col_lm_trainer_host_begin(t, kinds, err);
    if (st == COL_OK)
        st = fn(t, dir, flags, err);
    col_err e2 = {0};
    col_status st2 = col_lm_trainer_host_end(t, write && st == COL_OK, &e2);
    return st != COL_OK ? st : st2 != COL_OK ? col_err_copy(err, &e2) : COL_OK;
}

static col_status save_model(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    col_status st = ensure_dir(dir, err);
    if (st != COL_OK)
        return st;
    char *json = NULL;
    st = col_hf_config_json(&col_lm_trainer_config(t)->model, &json, err);
    char path[4096];
    if (st == COL_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = col_write_file_atomic(path, json, strlen(json), err);
    }
    free(json);
    int np = nparams(t);
    bool merge = lora_on(t) && (flags & COL_SAVE_MERGE_LORA);
    col_st_out *out = calloc((size_t)np, sizeof *out);
    float **merged = calloc((size_t)np, sizeof *merged); /* the merged weights, apart from the session's */
    if (st == COL_OK && (!out || !merged))
        st = col_err_set(err, COL_ENOMEM, "saving %s: out of memory", dir);
    for (int i = 0; st == COL_OK && i < np; i++) {
        const col_param_spec *s;
        const float *d = col_lm_trainer_param(t, i, &s);
        if (merge) {
            float *buf = malloc(sizeof(float) * (size_t)col_param_numel(s));
            if (!buf) {
                st = col_err_set(err, COL_ENOMEM, "saving %s: no memory to merge %s", dir, s->name);
                break;
            }
            d = col_lm_trainer_merged(t, i, buf);
            if (d == buf)
                merged[i] = buf;
            else
                free(buf);
        }
        out[i] = st_out(s->name, s, d);
    }
    if (st == COL_OK) {
        static const char *const meta[] = {"format", "pt", NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st = col_st_write_f32(path, out, np, meta, err);
    }
    for (int i = 0; merged && i < np; i++)
        free(merged[i]);
    free(merged);
    free(out);
    if (st == COL_OK && lora_on(t) && !merge)
        st = save_adapter(t, dir, err);
    return st;
}

col_status col_lm_trainer_save_model_ex(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    return in_host_view(t, COL_LM_PARAMS, false, save_model, dir, flags, err);
}

static col_status save_optimizer(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    if (col_lm_trainer_config(t)->inference)
        return col_err_set(err, COL_ESTATE, "an inference session has no optimizer state to save");
    col_status st = ensure_dir(dir, err);
    if (st != COL_OK)
        return st;
    /* every trained tensor (base parameters, or the adapters under LoRA) */
    int np = col_lm_trainer_n_params(t), n = 0;
    col_st_out *out = calloc((size_t)(2 * np) + 1, sizeof *out);
    char (*names)[128] = calloc((size_t)(2 * np) + 1, sizeof *names);
    if (!out || !names) {
        free(out), free(names);
        return col_err_set(err, COL_ENOMEM, "saving %s: out of memory", dir);
    }
    for (int slot = 0; slot < 2; slot++)
        for (int i = 0; i < np; i++) {
            const col_param_spec *s;
            col_lm_trainer_param(t, i, &s);
            const float *d = col_lm_trainer_state(t, i, slot);
            if (!d)
                continue;
            snprintf(names[n], sizeof names[n], "%s.%s", slot ? "exp_avg_sq" : "exp_avg", s->name);
            out[n] = st_out(names[n], s, d);
            n++;
        }
    char steps[32], seed[32], path[4096];
    snprintf(steps, sizeof steps, "%" PRId64, col_lm_trainer_steps(t));
    snprintf(seed, sizeof seed, "%" PRIu64, col_lm_trainer_config(t)->seed);
    const char *meta[] = {"step", steps, "seed", seed, "optimizer", col_opt_kind_name(col_lm_trainer_config(t)->opt.kind),
                          NULL};
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    st = col_st_write_f32(path, out, n, meta, err);
    free(out), free(names);
    return st;
}

static col_status load_optimizer(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    col_st_file *f = NULL;
    col_status st = col_st_open(path, &f, err);
    if (st != COL_OK)
        return st;
    const char *kind = col_st_metadata(f, "optimizer"), *steps = col_st_metadata(f, "step");
    const char *want = col_opt_kind_name(col_lm_trainer_config(t)->opt.kind);
    char *end = NULL;
    long long step = steps ? strtoll(steps, &end, 10) : -1;
    if (!kind || strcmp(kind, want) != 0)
        st = col_err_set(err, COL_EFORMAT, "%s holds %s state, but this run uses %s", path, kind ? kind : "no optimizer",
                         want);
    else if (!steps || *end || step < 0)
        st = col_err_set(err, COL_EFORMAT, "%s: the step count is missing or invalid", path);
    /* dropout masks derive from the seed: resuming under another seed would not continue the same run */
    const char *seed = col_st_metadata(f, "seed");
    char want_seed[32];
    snprintf(want_seed, sizeof want_seed, "%" PRIu64, col_lm_trainer_config(t)->seed);
    if (st == COL_OK && (!seed || strcmp(seed, want_seed) != 0))
        st = col_err_set(err, COL_EFORMAT, "%s was written by a run with seed %s; resume with the same seed (not %s)", path,
                         seed ? seed : "(none)", want_seed);
    int np = col_lm_trainer_n_params(t);
    for (int slot = 0; slot < 2 && st == COL_OK; slot++)
        for (int i = 0; i < np && st == COL_OK; i++) {
            const col_param_spec *s;
            col_lm_trainer_param(t, i, &s);
            float *d = col_lm_trainer_state(t, i, slot);
            if (!d)
                continue;
            char name[128];
            snprintf(name, sizeof name, "%s.%s", slot ? "exp_avg_sq" : "exp_avg", s->name);
            const col_ckpt_tensor *x = NULL;
            for (int k = 0; k < col_st_count(f) && !x; k++)
                if (strcmp(col_st_get(f, k)->name, name) == 0)
                    x = col_st_get(f, k);
            if (!x)
                st = col_err_set(err, COL_EFORMAT, "%s has no '%s'", path, name);
            else
                st = col_ckpt_read_f32(x, s->ndim, s->shape, d, err);
        }
    if (st == COL_OK)
        col_lm_trainer_set_steps(t, step);
    col_st_close(f);
    return st;
}

static col_status load_adapter(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    const col_lm_train_config *cfg = col_lm_trainer_config(t);
    if (!lora_on(t))
        return col_err_set(err, COL_ESTATE, "loading the adapter in %s: this run has no LoRA (rank 0)", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *json = NULL;
    size_t len = 0;
    col_status st = col_read_file(path, 1 << 20, &json, &len, err);
    if (st == COL_OK)
        st = col_lora_check_config_json(json, len, path, &cfg->model, &cfg->lora, err);
    free(json);
    if (st != COL_OK)
        return st;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return col_err_set(err, COL_EIO, "cannot read %s: %s", path, strerror(errno));
    col_ckpt *ck = NULL;
    st = col_ckpt_open(path, &ck, err);
    if (st != COL_OK)
        return st;
    /* read into a copy first: a bad file leaves the adapters as they were */
    int np = nparams(t), nt = col_lm_trainer_n_params(t);
    float **tmp = calloc((size_t)nt, sizeof *tmp);
    if (!tmp)
        st = col_err_set(err, COL_ENOMEM, "loading %s: out of memory", path);
    for (int i = np; i < nt && st == COL_OK; i++) {
        const col_param_spec *s;
        col_lm_trainer_param(t, i, &s);
        const col_ckpt_tensor *x = col_ckpt_find(ck, s->name);
        tmp[i] = malloc(sizeof(float) * (size_t)col_param_numel(s));
        if (!x)
            st = col_err_set(err, COL_EFORMAT, "%s has no tensor '%s' (rank %d adapter of %s)", path, s->name,
                             cfg->lora.rank, col_arch_name(cfg->model.arch));
        else if (!tmp[i])
            st = col_err_set(err, COL_ENOMEM, "loading %s: out of memory", path);
        else
            st = col_ckpt_read_f32(x, s->ndim, s->shape, tmp[i], err); /* names the tensor and the file */
    }
    for (int i = np; i < nt && st == COL_OK; i++) {
        const col_param_spec *s;
        float *w = col_lm_trainer_param(t, i, &s);
        memcpy(w, tmp[i], sizeof(float) * (size_t)col_param_numel(s));
    }
    for (int i = np; tmp && i < nt; i++)
        free(tmp[i]);
    free(tmp);
    col_ckpt_close(ck);
    return st;
}

col_status col_lm_trainer_load_adapter(col_lm_trainer *t, const char *dir, col_err *err)
{
    return in_host_view(t, COL_LM_PARAMS, true, load_adapter, dir, 0, err);
}

/* With the states on the NVMe tier they are read into host memory for the
 * file (and written back after a load). */
col_status col_lm_trainer_save_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    if (col_lm_trainer_config(t)->inference)
        return col_err_set(err, COL_ESTATE, "an inference session has no optimizer state to save");
    return in_host_view(t, COL_LM_STATES, false, save_optimizer, dir, 0, err);
}

col_status col_lm_trainer_load_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    return in_host_view(t, COL_LM_STATES, true, load_optimizer, dir, 0, err);
}
