/* lm_checkpoint.c - a training session to and from disk: the model in
 * Hugging Face layout, the optimizer state beside it. */
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

col_status col_lm_trainer_save_model(col_lm_trainer *t, const char *dir, col_err *err)
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
    col_st_out *out = calloc((size_t)np, sizeof *out);
    if (st == COL_OK && !out)
        st = col_err_set(err, COL_ENOMEM, "saving %s: out of memory", dir);
    for (int i = 0; st == COL_OK && i < np; i++) {
        const col_param_spec *s;
        out[i].data = col_lm_trainer_param(t, i, &s);
        out[i].name = s->name;
        out[i].ndim = s->ndim;
        out[i].shape[0] = s->shape[0];
        out[i].shape[1] = s->shape[1];
    }
    if (st == COL_OK) {
        static const char *const meta[] = {"format", "pt", NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st = col_st_write_f32(path, out, np, meta, err);
    }
    free(out);
    return st;
}

col_status col_lm_trainer_save_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    col_status st = ensure_dir(dir, err);
    if (st != COL_OK)
        return st;
    int np = nparams(t), n = 0;
    col_st_out *out = calloc((size_t)(2 * np) + 1, sizeof *out);
    char (*names)[96] = calloc((size_t)(2 * np) + 1, sizeof *names);
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
            out[n] = (col_st_out){.name = names[n], .ndim = s->ndim, .shape = {s->shape[0], s->shape[1]}, .data = d};
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

col_status col_lm_trainer_load_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
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
    int np = nparams(t);
    for (int slot = 0; slot < 2 && st == COL_OK; slot++)
        for (int i = 0; i < np && st == COL_OK; i++) {
            const col_param_spec *s;
            col_lm_trainer_param(t, i, &s);
            float *d = col_lm_trainer_state(t, i, slot);
            if (!d)
                continue;
            char name[96];
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
