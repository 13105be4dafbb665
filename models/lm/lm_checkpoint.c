/* lm_checkpoint.c - a training session to and from disk: the model in
 * Hugging Face layout, LoRA adapters in PEFT's, the optimizer state beside
 * them.
 *
 * Every file streams through bounded memory, whatever the model's size and
 * wherever its tensors live: a file is laid out first (col_st_writer_begin:
 * the header, every tensor's place known), then the tensors are visited in
 * the order of their chunks, each reached through the session's stage (in
 * place for a host chunk; an NVMe chunk read once into a buffer, the stage
 * holding at most its limit) and written at its place in the file. Loading
 * goes the same way in reverse: each tensor converted from the mapped file
 * (whose pages leave memory once read) into its chunk, NVMe chunks written
 * back as the stage moves on. Nothing reads a whole kind into host memory. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_config.h"
#include "lm_trainer_internal.h"
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

static col_st_out st_out(const char *name, const col_param_spec *s)
{
    return (col_st_out){.name = name, .ndim = s->ndim, .shape = {s->shape[0], s->shape[1]}};
}

static col_status no_view(const col_lm_trainer *t, const char *what, col_err *err)
{
    return t->view ? col_err_set(err, COL_ESTATE, "%s: a host view is open (col_lm_trainer_host_end first)", what)
                   : COL_OK;
}

static col_status save_model(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err);
static col_status save_optimizer(col_lm_trainer *t, const char *dir, col_err *err);
static col_status load_optimizer(col_lm_trainer *t, const char *dir, col_err *err);

/* One file of tensors, written as the stage reaches them: item j of the file is kind kind[j] of tensor
 * idx[j], visited in the order given (chunk order), the merged weight when merge[j]. */
typedef struct {
    const char *path;
    int n;
    col_st_out *out;
    int *idx, *kind;
    bool *merge;
    char (*names)[128];
} st_plan;

static col_status plan_new(st_plan *p, int cap, const char *path, col_err *err)
{
    *p = (st_plan){.path = path};
    p->out = calloc((size_t)cap + 1, sizeof *p->out);
    p->idx = calloc((size_t)cap + 1, sizeof *p->idx);
    p->kind = calloc((size_t)cap + 1, sizeof *p->kind);
    p->merge = calloc((size_t)cap + 1, sizeof *p->merge);
    p->names = calloc((size_t)cap + 1, sizeof *p->names);
    if (!p->out || !p->idx || !p->kind || !p->merge || !p->names)
        return col_err_set(err, COL_ENOMEM, "saving %s: out of memory", path);
    return COL_OK;
}

static void plan_free(st_plan *p)
{
    free(p->out), free(p->idx), free(p->kind), free(p->merge), free(p->names);
}

static void plan_add(st_plan *p, col_lm_trainer *t, int k, int i, const char *prefix, bool merge)
{
    const col_param_spec *s;
    col_lm_trainer_param(t, i, &s);
    snprintf(p->names[p->n], sizeof p->names[p->n], "%s%s", prefix, s->name);
    p->out[p->n] = st_out(p->names[p->n], s);
    p->idx[p->n] = i;
    p->kind[p->n] = k;
    p->merge[p->n] = merge;
    p->n++;
}

/* base weight i merged with its adapters into scratch (W + scale B@A), reached through the stage */
static col_status merged(col_lm_trainer *t, int i, float *scratch, const float **out, col_err *err)
{
    int a = t->np + 2 * t->lora_of[i];
    void *w, *la, *lb;
    col_status st = lmt_get(t, 0, i, false, &w, err);
    if (st == COL_OK && (st = lmt_get(t, 0, a, false, &la, err)) == COL_OK &&
        (st = lmt_get(t, 0, a + 1, false, &lb, err)) == COL_OK) {
        col_lora_merge(&t->cfg.model, &t->specs[i], w, la, lb, t->cfg.lora.rank, t->lora_scale, scratch);
        *out = scratch;
    }
    return st;
}

/* writes the file of plan p: each tensor from its chunk (the next chunk read ahead while it is written). With
 * data parallelism every process runs the plan (collective): states and masters come whole to process 0 from
 * the processes holding their spans, and process 0 alone writes; a write error there keeps it in the gathers
 * so that the others finish. */
/* The outcome of writing a plan's file: the writer's status st (its message in werr) or, when it succeeded, the
 * gathers' cs (message already in err); the writer (process 0) then commits the file, or drops it on a failure. */
static col_status end_plan(bool writer, col_st_writer *w, col_status st, const col_err *werr, col_status cs,
                           col_err *err)
{
    if (st == COL_OK && cs != COL_OK)
        st = cs;
    else if (st != COL_OK)
        col_err_copy(err, werr);
    if (!writer)
        return st;
    if (st != COL_OK) {
        col_st_writer_end(w, false, NULL);
        return st;
    }
    return col_st_writer_end(w, true, err);
}

/* Under tensor parallelism: every tensor gathered whole over the tp group of the first data parallel group's
 * first sequence-parallel rank (its blocks of states first gathered over dp), written by its tp rank 0; whole
 * shapes in the file. f32 sessions in host memory only (lmt_par_setup). */
static col_status par_write_plan(col_lm_trainer *t, st_plan *p, const char *const *meta, col_err *err)
{
    bool writer = lmt_dp_writer(t), part = (!t->dp || t->dpr == 0) && t->par->sp_rank == 0;
    int64_t most = 0;
    for (int j = 0; j < p->n; j++) {
        const col_param_spec *w = &t->whole[p->idx[j]];
        p->out[j].ndim = w->ndim;
        p->out[j].shape[0] = w->shape[0];
        p->out[j].shape[1] = w->shape[1];
        most = col_param_numel(w) > most ? col_param_numel(w) : most;
    }
    float *gbuf = NULL;
    col_status cs = t->dp ? lmt_dp_buffer(t, most, &gbuf, err) : COL_OK;
    col_st_writer *w = NULL;
    col_err werr = {0};
    col_status st = writer && cs == COL_OK
                        ? col_st_writer_begin_aligned(p->path, p->out, p->n, meta, COL_LM_WEIGHT_ALIGN, &w, &werr)
                        : COL_OK;
    for (int j = 0; j < p->n && cs == COL_OK; j++) {
        int i = p->idx[j], k = p->kind[j];
        const float *d = k == 0 ? t->ot[i].w : k == 2 ? t->ot[i].m : t->ot[i].v;
        if (t->dp && k >= 2) {
            cs = lmt_dp_gather_state(t, k, i, gbuf, err);
            d = gbuf;
        }
        if (cs != COL_OK || !part)
            continue;
        cs = lmt_par_gather(t, i, d, t->pbuf, err);
        if (cs == COL_OK && writer && st == COL_OK)
            st = col_st_writer_put(w, j, 0, t->pbuf, sizeof(float) * (size_t)col_param_numel(&t->whole[i]), &werr);
    }
    return end_plan(writer, w, st, &werr, cs, err);
}

static col_status write_plan(col_lm_trainer *t, const st_plan *p, const char *const *meta, col_err *err)
{
    if (t->par)
        return par_write_plan(t, (st_plan *)p, meta, err);
    bool writer = lmt_dp_writer(t);
    size_t most = 0, gather = 0; /* the largest merged weight, the largest gathered tensor */
    for (int j = 0; j < p->n; j++) {
        size_t b = sizeof(float) * (size_t)col_param_numel(&t->specs[p->idx[j]]);
        most = p->merge[j] && b > most ? b : most;
        gather = t->dp && p->kind[j] >= 2 && b > gather ? b : gather;
    }
    float *scratch = most ? malloc(most) : NULL, *gbuf = NULL;
    if (most && !scratch)
        return col_err_set(err, COL_ENOMEM, "saving %s: no memory to merge the adapters (%zu bytes)", p->path, most);
    col_status cs = gather ? lmt_dp_buffer(t, gather / sizeof(float), &gbuf, err) : COL_OK;
    col_st_writer *w = NULL;
    col_err werr = {0};
    col_status st = writer && cs == COL_OK
                        ? col_st_writer_begin_aligned(p->path, p->out, p->n, meta, COL_LM_WEIGHT_ALIGN, &w, &werr)
                        : COL_OK;
    for (int j = 0; j < p->n && cs == COL_OK && (st == COL_OK || t->dp); j++) {
        int i = p->idx[j], k = p->kind[j];
        const float *d = NULL;
        void *v = NULL;
        if (t->dp && k >= 2) {
            cs = lmt_dp_gather_state(t, k, i, gbuf, err);
            d = gbuf;
            if (cs != COL_OK || !writer || st != COL_OK)
                continue;
        } else if (!writer || st != COL_OK) {
            continue;
        } else if (p->merge[j]) {
            st = merged(t, i, scratch, &d, &werr);
        } else if ((st = lmt_get(t, k, i, false, &v, &werr)) == COL_OK && lmt_dtype(t, k) != COL_F32) {
            col_convert(t->conv, COL_F32, v, lmt_dtype(t, k), t->ot[i].n); /* 16-bit weights, no master */
            d = t->conv;
        } else {
            d = v;
        }
        if (st == COL_OK && !(t->dp && k >= 2))
            st = lmt_read_ahead(t, k, i, p->merge[j] ? 3 : 1, &werr);
        if (st == COL_OK)
            st = col_st_writer_put(w, j, 0, d, sizeof(float) * (size_t)col_param_numel(&t->specs[i]), &werr);
    }
    free(scratch);
    lmt_stage_end(t, false, NULL);
    return end_plan(writer, w, st, &werr, cs, err);
}

/* adapter_model.safetensors + adapter_config.json */
static col_status save_adapter(col_lm_trainer *t, const char *dir, col_err *err)
{
    int np = nparams(t), nt = col_lm_trainer_n_params(t);
    const col_lm_train_config *cfg = col_lm_trainer_config(t);
    static const char *const meta[] = {"format", "pt", NULL};
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_plan p;
    col_status st = plan_new(&p, nt - np, path, err);
    for (int i = np; i < nt && st == COL_OK; i++)
        plan_add(&p, t, 0, i, "", false);
    if (st == COL_OK)
        st = write_plan(t, &p, meta, err);
    plan_free(&p);
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

/* With data parallelism the saving and loading functions are collective and their outcome is agreed: a
 * failure on one process fails the call on every process. */
col_status col_lm_trainer_save_model_ex(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    col_status st = save_model(t, dir, flags, err);
    return lmt_dp_agree(t, st, "saving the model", err);
}

static col_status save_model(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err)
{
    bool writer = lmt_dp_writer(t);
    if (t->pdt)
        return col_err_set(err, COL_EUNSUPPORTED, "saving the model: this session holds quantized weights "
                           "(colossal-quantize writes quantized models)");
    col_status st = no_view(t, "saving the model", err);
    if (st == COL_OK)
        st = lmt_dp_need_params(t, err);
    if (st == COL_OK && writer)
        st = ensure_dir(dir, err);
    if (st != COL_OK)
        return st;
    char *json = NULL;
    st = writer ? col_hf_config_json(&col_lm_trainer_config(t)->model, &json, err) : COL_OK;
    char path[4096];
    if (st == COL_OK && writer) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = col_write_file_atomic(path, json, strlen(json), err);
    }
    free(json);
    int np = nparams(t);
    bool merge = lora_on(t) && (flags & COL_SAVE_MERGE_LORA);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_plan p = {0};
    if (st == COL_OK)
        st = plan_new(&p, np, path, err);
    for (int i = 0; i < np && st == COL_OK; i++) /* spec order is chunk order; the f32 masters under mixed precision */
        plan_add(&p, t, lmt_has_master(t, i) ? LMT_MASTER : 0, i, "", merge && t->lora_of[i] >= 0);
    if (st == COL_OK) {
        static const char *const meta[] = {"format", "pt", NULL};
        st = write_plan(t, &p, meta, err);
    }
    plan_free(&p);
    if (st == COL_OK && lora_on(t) && !merge && writer) /* the adapters are parameters: whole on process 0 */
        st = save_adapter(t, dir, err);
    return st;
}

/* The optimizer state of every trained tensor (the base parameters, or the adapters under LoRA): slot 0 of
 * each, then slot 1, as the state chunks were allocated. */
col_status col_lm_trainer_save_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    col_status st = save_optimizer(t, dir, err);
    return lmt_dp_agree(t, st, "saving the optimizer state", err);
}

static col_status save_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    if (col_lm_trainer_config(t)->inference)
        return col_err_set(err, COL_ESTATE, "an inference session has no optimizer state to save");
    col_status st = no_view(t, "saving the optimizer state", err);
    if (st == COL_OK && lmt_dp_writer(t))
        st = ensure_dir(dir, err);
    if (st != COL_OK)
        return st;
    char steps[32], seed[32], path[4096];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    st_plan p;
    st = plan_new(&p, 2 * t->nt, path, err);
    for (int slot = 0; slot < 2 && st == COL_OK; slot++)
        for (int i = t->train0; i < t->nt; i++)
            if (slot < t->slots) /* (not lmt_has: a process may hold no span of a tensor, but they all save it) */
                plan_add(&p, t, 2 + slot, i, slot ? "exp_avg_sq." : "exp_avg.", false);
    snprintf(steps, sizeof steps, "%" PRId64, col_lm_trainer_steps(t));
    snprintf(seed, sizeof seed, "%" PRIu64, col_lm_trainer_config(t)->seed);
    /* f16: the loss scaler's state, which the next steps depend on (the masters are the model file) */
    char scale[32], good[32], skipped[32];
    snprintf(scale, sizeof scale, "%a", (double)t->scale);
    snprintf(good, sizeof good, "%" PRId64, t->good);
    snprintf(skipped, sizeof skipped, "%" PRId64, t->skipped);
    bool f16 = t->dt == COL_F16;
    const char *meta[] = {"step", steps, "seed", seed, "optimizer", col_opt_kind_name(col_lm_trainer_config(t)->opt.kind),
                          f16 ? "loss_scale" : NULL, scale, "loss_scale_good_steps", good, "skipped_steps", skipped,
                          NULL};
    if (st == COL_OK)
        st = write_plan(t, &p, meta, err);
    plan_free(&p);
    return st;
}

/* Loads into tensors' kind-k memory, through the stage: item j is tensor idx[j] from x[j] (all checked
 * beforehand, so that only an I/O error can stop it half way). */
static col_status load_items(col_lm_trainer *t, int n, const int *kind, const int *idx,
                             const col_ckpt_tensor *const *x, col_err *err)
{
    col_status st = COL_OK;
    for (int j = 0; j < n && st == COL_OK; j++) {
        const col_param_spec *s = &t->specs[idx[j]];
        void *d = NULL;
        int64_t off, n = lmt_span(t, idx[j], &off);
        float *whole = NULL; /* a state of which this process holds a span: read whole, then its span kept */
        if (kind[j] >= 2 && t->zn && (st = lmt_dp_buffer(t, col_param_numel(s), &whole, err)) != COL_OK)
            break;
        if (t->par && kind[j] >= 2) { /* the whole tensor read, this rank's block kept (whole: its span then) */
            const col_param_spec *ws = &t->whole[idx[j]];
            if ((st = lmt_get(t, kind[j], idx[j], true, &d, err)) == COL_OK &&
                (st = col_ckpt_read_f32(x[j], ws->ndim, ws->shape, t->pbuf, err)) == COL_OK)
                lmt_par_block(t, idx[j], t->pbuf, whole ? whole : d);
        } else if ((st = lmt_get(t, kind[j], idx[j], true, &d, err)) == COL_OK &&
                   (st = col_ckpt_read_f32(x[j], s->ndim, s->shape, whole ? whole : d, err)) == COL_OK) {
            st = lmt_read_ahead(t, kind[j], idx[j], 1, err);
        }
        if (st == COL_OK && whole)
            memcpy(d, whole + off, sizeof(float) * (size_t)n);
    }
    col_status st2 = lmt_stage_end(t, st == COL_OK, st == COL_OK ? err : NULL);
    return st != COL_OK ? st : st2;
}

/* the tensor named name in f (linear: optimizer files hold two per trained tensor) */
static const col_ckpt_tensor *st_find(const col_st_file *f, const char *name)
{
    for (int k = 0; k < col_st_count(f); k++)
        if (strcmp(col_st_get(f, k)->name, name) == 0)
            return col_st_get(f, k);
    return NULL;
}

/* the metadata of an optimizer file: this run's optimizer and seed, a step count (into *step) */
static col_status check_opt_meta(col_lm_trainer *t, const col_st_file *f, const char *path, long long *step,
                                 col_err *err)
{
    const char *kind = col_st_metadata(f, "optimizer"), *steps = col_st_metadata(f, "step");
    const char *want = col_opt_kind_name(col_lm_trainer_config(t)->opt.kind);
    char *end = NULL;
    *step = steps ? strtoll(steps, &end, 10) : -1;
    if (!kind || strcmp(kind, want) != 0)
        return col_err_set(err, COL_EFORMAT, "%s holds %s state, but this run uses %s", path,
                           kind ? kind : "no optimizer", want);
    if (!steps || *end || *step < 0)
        return col_err_set(err, COL_EFORMAT, "%s: the step count is missing or invalid", path);
    /* dropout masks derive from the seed: resuming under another seed would not continue the same run */
    const char *seed = col_st_metadata(f, "seed");
    char want_seed[32];
    snprintf(want_seed, sizeof want_seed, "%" PRIu64, col_lm_trainer_config(t)->seed);
    if (!seed || strcmp(seed, want_seed) != 0)
        return col_err_set(err, COL_EFORMAT, "%s was written by a run with seed %s; resume with the same seed (not %s)",
                           path, seed ? seed : "(none)", want_seed);
    return COL_OK;
}

/* f16: the loss scaler's state from an optimizer file's metadata (checked before the states are read) */
static col_status load_scaler(col_lm_trainer *t, const col_st_file *f, const char *path, col_err *err)
{
    const char *sc = col_st_metadata(f, "loss_scale"), *gd = col_st_metadata(f, "loss_scale_good_steps"),
               *sk = col_st_metadata(f, "skipped_steps");
    char *e1 = NULL, *e2 = NULL, *e3 = NULL;
    double scale = sc ? strtod(sc, &e1) : 0;
    long long good = gd ? strtoll(gd, &e2, 10) : -1, skipped = sk ? strtoll(sk, &e3, 10) : -1;
    if (!sc || !gd || !sk || *e1 || *e2 || *e3 || !(scale > 0) || !isfinite(scale) || good < 0 || skipped < 0)
        return col_err_set(err, COL_EFORMAT, "%s has no valid loss scale state (loss_scale, loss_scale_good_steps, "
                           "skipped_steps): was it written by an f16 run?", path);
    t->scale = (float)scale;
    t->good = good;
    t->skipped = skipped;
    return COL_OK;
}

col_status col_lm_trainer_load_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    col_status st = load_optimizer(t, dir, err);
    return lmt_dp_agree(t, st, "loading the optimizer state", err);
}

static col_status load_optimizer(col_lm_trainer *t, const char *dir, col_err *err)
{
    col_status st = no_view(t, "loading the optimizer state", err);
    if (st != COL_OK)
        return st;
    char path[4096];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    col_st_file *f = NULL;
    if ((st = col_st_open(path, &f, err)) != COL_OK)
        return st;
    long long step = 0;
    st = check_opt_meta(t, f, path, &step, err);
    int n = 0, *kind = calloc(2 * (size_t)t->nt + 1, sizeof *kind), *idx = calloc(2 * (size_t)t->nt + 1, sizeof *idx);
    const col_ckpt_tensor **x = calloc(2 * (size_t)t->nt + 1, sizeof *x);
    if (st == COL_OK && (!kind || !idx || !x))
        st = col_err_set(err, COL_ENOMEM, "loading %s: out of memory", path);
    for (int slot = 0; slot < 2 && st == COL_OK; slot++)
        for (int i = 0; i < t->nt && st == COL_OK; i++) {
            if (!lmt_has(t, 2 + slot, i))
                continue;
            char name[160];
            snprintf(name, sizeof name, "%s.%s", slot ? "exp_avg_sq" : "exp_avg", t->specs[i].name);
            kind[n] = 2 + slot, idx[n] = i, x[n] = st_find(f, name);
            if (!x[n])
                st = col_err_set(err, COL_EFORMAT, "%s has no '%s'", path, name);
            else /* under tensor parallelism the file holds whole tensors: this rank's blocks are read from them */
                st = col_ckpt_check_f32(x[n], col_lm_trainer_whole_spec(t, i)->ndim,
                                        col_lm_trainer_whole_spec(t, i)->shape, err);
            n++;
        }
    if (st == COL_OK)
        st = load_items(t, n, kind, idx, x, err);
    if (st == COL_OK && t->dt == COL_F16)
        st = load_scaler(t, f, path, err);
    if (st == COL_OK)
        col_lm_trainer_set_steps(t, step);
    free(kind), free(idx), free(x);
    col_st_close(f);
    return st;
}

/* adapter_config.json of dir against this run's LoRA settings */
static col_status check_adapter_config(col_lm_trainer *t, const char *dir, col_err *err)
{
    const col_lm_train_config *cfg = col_lm_trainer_config(t);
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *json = NULL;
    size_t len = 0;
    col_status st = col_read_file(path, 1 << 20, &json, &len, err);
    if (st == COL_OK)
        st = col_lora_check_config_json(json, len, path, &cfg->model, &cfg->lora, err);
    free(json);
    return st;
}

col_status col_lm_trainer_load_adapter(col_lm_trainer *t, const char *dir, col_err *err)
{
    const col_lm_train_config *cfg = col_lm_trainer_config(t);
    if (!lora_on(t))
        return col_err_set(err, COL_ESTATE, "loading the adapter in %s: this run has no LoRA (rank 0)", dir);
    col_status st = no_view(t, "loading the adapter", err);
    if (st == COL_OK)
        st = check_adapter_config(t, dir, err);
    if (st != COL_OK)
        return st;
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return col_err_set(err, COL_EIO, "cannot read %s: %s", path, strerror(errno));
    col_ckpt *ck = NULL;
    if ((st = col_ckpt_open(path, &ck, err)) != COL_OK)
        return st;
    /* every tensor checked before any is written: a bad file leaves the adapters as they were */
    int np = t->np, na = t->nt - np;
    int *kind = calloc((size_t)na + 1, sizeof *kind), *idx = calloc((size_t)na + 1, sizeof *idx);
    const col_ckpt_tensor **x = calloc((size_t)na + 1, sizeof *x);
    if (!kind || !idx || !x)
        st = col_err_set(err, COL_ENOMEM, "loading %s: out of memory", path);
    for (int j = 0; j < na && st == COL_OK; j++) {
        const col_param_spec *s = &t->specs[np + j];
        kind[j] = 0, idx[j] = np + j, x[j] = col_ckpt_find(ck, s->name);
        if (!x[j])
            st = col_err_set(err, COL_EFORMAT, "%s has no tensor '%s' (rank %d adapter of %s)", path, s->name,
                             cfg->lora.rank, col_arch_name(cfg->model.arch));
        else
            st = col_ckpt_check_f32(x[j], s->ndim, s->shape, err); /* names the tensor and the file */
    }
    if (st == COL_OK)
        st = load_items(t, na, kind, idx, x, err);
    free(kind), free(idx), free(x);
    col_ckpt_close(ck);
    return st;
}
