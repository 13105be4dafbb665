/* diffuse_train.c - colossal-diffuse --train: fine-tuning a Stable Diffusion
 * UNet on a folder of captioned images (models/diffusion/sd_train.h), its
 * output a diffusers folder (or a LoRA file) and a resumable state, written
 * whole at each save (libcore/formats/outdir.h).
 *
 * DIR after a save holds:
 *   full training:  model_index.json, scheduler/, text_encoder/, tokenizer/, vae/ (copied from MODEL),
 *                   unet/config.json and unet/diffusion_pytorch_model.safetensors (the trained UNet)
 *   LoRA:           pytorch_lora_weights.safetensors (StableDiffusionPipeline.save_lora_weights' names)
 *   both:           optimizer.safetensors (AdamW's moments and the step count) and trainer_state.json
 *                   (the options that shape the run, and the torch generator's state)
 * --resume reads them back: the run goes on bitwise as if it had not stopped
 * (the data order and flips depend only on the seed and the sample's
 * position, the noise on the generator's saved state). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "apperr.h"
#include "diffuse.h"
#include "diffuse_train.h"
#include "dm_unet.h"
#include "dm_vae.h"
#include "outdir.h"
#include "statpub.h"
#include "train_log.h"
#include "sd_model.h"
#include "sd_train.h"
#include "textio.h"
#include "timer.h"
#include "tokenizer.h"

#define STATE_FILE "trainer_state.json"
#define STATE_FORMAT "colossal-diffuse training state 1"
#define OPT_FILE "optimizer.safetensors"
#define LORA_FILE "pytorch_lora_weights.safetensors"
#define UNET_FILE "diffusion_pytorch_model.safetensors"

typedef struct {
    diffuse_opts *o;
    sd_model_files files;
    col_outdir *od;
    df_images inst, cls;
    int32_t *inst_ids, *cls_ids;  /* [n][text_len] */
    int text_len;
    app_device dev;
    sd_trainer *tr;
    uint64_t seed;
    char model_abs[PATH_MAX], images_abs[PATH_MAX], class_abs[PATH_MAX];
    train_log log;  /* metrics.jsonl and loss.png (train_log.h) */
    bool logging;
} run;

static int fail(const col_err *e)
{
    char line[1024];
    fprintf(stderr, DIFFUSE_PROG ": %s\n", app_err_line(e, mem_opt_of, line, sizeof line));
    return 1;
}

static int fail_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, DIFFUSE_PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void absolute(const char *p, char *out)
{
    if (!realpath(p, out)) snprintf(out, PATH_MAX, "%s", p);
}

/* ---- the run's settings and the generator, in trainer_state.json ---- */

/* the options that shape the run's numbers, as text: a resumed run must give the same */
static cJSON *settings(const run *r)
{
    const diffuse_opts *o = r->o;
    cJSON *s = cJSON_CreateObject();
    char b[64];
#define PUT(k, fmt, v) (snprintf(b, sizeof b, fmt, v), cJSON_AddStringToObject(s, k, b))
    cJSON_AddStringToObject(s, "model", r->model_abs);
    cJSON_AddStringToObject(s, "images", r->images_abs);
    PUT("lora", "%d", o->lora_rank);
    PUT("batch", "%d", o->batch);
    PUT("grad-accum", "%d", o->grad_accum);
    PUT("resolution", "%d", o->resolution);
    PUT("lr", "%.9g", (double)o->lr);
    PUT("warmup", "%d", o->warmup);
    PUT("max-grad-norm", "%.9g", (double)o->max_grad_norm);
    PUT("seed", "%" PRIu64, r->seed);
    PUT("flip", "%d", (int)o->flip);
    cJSON_AddStringToObject(s, "instance-prompt", o->instance_prompt ? o->instance_prompt : "");
    cJSON_AddStringToObject(s, "class-dir", o->class_dir ? r->class_abs : "");
    cJSON_AddStringToObject(s, "class-prompt", o->class_prompt ? o->class_prompt : "");
    PUT("prior-weight", "%.9g", (double)o->prior_weight);
#undef PUT
    return s;
}

static col_status write_state(const run *r, const char *stage, col_err *err)
{
    cJSON *root = cJSON_CreateObject(), *g = cJSON_CreateObject();
    const col_torch_gen *gen = sd_train_generator(r->tr);
    char b[64];
    cJSON_AddStringToObject(root, "format", STATE_FORMAT);
    snprintf(b, sizeof b, "%" PRId64, dm_trainer_steps(sd_train_session(r->tr)));
    cJSON_AddStringToObject(root, "step", b);
    cJSON_AddItemToObject(root, "settings", settings(r));
    snprintf(b, sizeof b, "%" PRIu64, gen->seed);
    cJSON_AddStringToObject(g, "seed", b);
    cJSON_AddNumberToObject(g, "left", gen->left);
    cJSON_AddNumberToObject(g, "next", gen->next);
    cJSON_AddNumberToObject(g, "path", (double)gen->path);
    cJSON_AddBoolToObject(g, "has_next_normal", gen->has_next_normal);
    uint64_t bits;
    memcpy(&bits, &gen->next_normal, sizeof bits);
    snprintf(b, sizeof b, "%016" PRIx64, bits);
    cJSON_AddStringToObject(g, "next_normal", b);
    char *mt = malloc(COL_TORCH_MT_N * 8 + 1);
    for (int i = 0; mt && i < COL_TORCH_MT_N; i++) snprintf(mt + 8 * i, 9, "%08" PRIx32, gen->mt[i]);
    if (mt) cJSON_AddStringToObject(g, "mt", mt);
    free(mt);
    cJSON_AddItemToObject(root, "generator", g);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return col_err_set(err, COL_ENOMEM, "run state: out of memory");
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" STATE_FILE, stage);
    col_status st = col_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* the saved state: settings checked against this run's, the step count and the generator */
static int read_state(run *r, const char *dir, int64_t *step, col_torch_gen *gen)
{
    char path[PATH_MAX + 64], *text = NULL;
    size_t len = 0;
    col_err err = {0};
    snprintf(path, sizeof path, "%s/" STATE_FILE, dir);
    if (col_read_file(path, 1 << 20, &text, &len, &err) != COL_OK) return fail(&err);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *s = root ? cJSON_GetObjectItemCaseSensitive(root, "settings") : NULL;
    const cJSON *g = root ? cJSON_GetObjectItemCaseSensitive(root, "generator") : NULL;
    const char *fmt = root ? str(root, "format") : NULL, *stp = root ? str(root, "step") : NULL;
    const char *mt = g ? str(g, "mt") : NULL, *nn = g ? str(g, "next_normal") : NULL, *gs = g ? str(g, "seed") : NULL;
    int rc = 0;
    if (!fmt || strcmp(fmt, STATE_FORMAT) || !s || !stp || !mt || strlen(mt) != COL_TORCH_MT_N * 8 || !nn || !gs) {
        rc = fail_line("%s is not a colossal-diffuse training state (or one of another version)", path);
    } else {
        cJSON *now = settings(r);
        for (const cJSON *e = now->child; e && !rc; e = e->next) {
            const char *was = str(s, e->string);
            if (!was || strcmp(was, e->valuestring) != 0)
                rc = fail_line("--resume: %s was %s%s%s in the saved run, now %s: resume with the run's options",
                               e->string, was ? "'" : "", was ? was : "not set", was ? "'" : "", e->valuestring);
        }
        cJSON_Delete(now);
    }
    if (!rc) {
        *step = strtoll(stp, NULL, 10);
        gen->seed = strtoull(gs, NULL, 10);
        gen->left = cJSON_GetObjectItemCaseSensitive(g, "left") ? cJSON_GetObjectItemCaseSensitive(g, "left")->valueint : 0;
        gen->next = cJSON_GetObjectItemCaseSensitive(g, "next") ? cJSON_GetObjectItemCaseSensitive(g, "next")->valueint : 0;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(g, "path");
        gen->path = p && p->valueint == 1 ? COL_TORCH_NORMAL_LIBM : COL_TORCH_NORMAL_AVX2;
        gen->has_next_normal = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "has_next_normal"));
        uint64_t bits = strtoull(nn, NULL, 16);
        memcpy(&gen->next_normal, &bits, sizeof bits);
        for (int i = 0; i < COL_TORCH_MT_N; i++) {
            char w[9];
            memcpy(w, mt + 8 * i, 8);
            w[8] = '\0';
            gen->mt[i] = (uint32_t)strtoul(w, NULL, 16);
        }
        if (gen->left < 1 || gen->left > COL_TORCH_MT_N || gen->next < 0 || gen->next >= COL_TORCH_MT_N || *step < 0)
            rc = fail_line("%s: the generator's state is damaged", path);
    }
    cJSON_Delete(root);
    return rc;
}

/* ---- the output folder ---- */

static col_status copy_file(const char *src, const char *dst, col_err *err)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return col_err_set(err, COL_EIO, "cannot read %s: %s", src, strerror(errno));
    col_atomic_file f;
    col_status st = col_atomic_begin(dst, &f, err);
    bool ok = st == COL_OK;
    static char buf[1 << 16];
    for (ssize_t k; ok && (k = read(in, buf, sizeof buf)) != 0;) {
        if (k < 0) {
            ok = false;
            st = col_err_set(err, COL_EIO, "cannot read %s: %s", src, strerror(errno));
        } else if (!col_write_all(f.fd, buf, (size_t)k)) {
            ok = false;
            st = col_err_set(err, COL_EIO, "cannot write %s: %s", dst, strerror(errno));
        }
    }
    close(in);
    if (f.tmp || st == COL_OK) {
        col_status e2 = col_atomic_end(&f, dst, ok, st == COL_OK ? err : NULL);
        if (st == COL_OK) st = e2;
    }
    return st;
}

/* file name (last component) of src into folder dst */
static col_status copy_into(const char *src, const char *dst_dir, col_err *err)
{
    const char *base = strrchr(src, '/');
    char dst[2 * PATH_MAX];
    int k = snprintf(dst, sizeof dst, "%s/%s", dst_dir, base ? base + 1 : src);
    if (k < 0 || (size_t)k >= sizeof dst) return col_err_set(err, COL_EINVAL, "%s/...: the path is too long", dst_dir);
    return copy_file(src, dst, err);
}

/* every plain file of folder src (links followed: a hub cache's snapshot) */
static col_status copy_folder(const char *src, const char *dst_dir, col_err *err)
{
    DIR *d = opendir(src);
    if (!d) return col_err_set(err, COL_EIO, "cannot read %s: %s", src, strerror(errno));
    col_status st = COL_OK;
    for (struct dirent *e; st == COL_OK && (e = readdir(d));) {
        char p[PATH_MAX + 256];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", src, e->d_name);
        if (e->d_name[0] == '.' || stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        st = copy_into(p, dst_dir, err);
    }
    closedir(d);
    return st;
}

/* a component's config.json and weights: the file, or an index and the shards it names */
static col_status copy_component(const run *r, sd_component c, const char *dst_dir, col_err *err)
{
    col_status st = copy_into(r->files.config[c], dst_dir, err);
    const char *w = r->files.weights[c];
    if (st == COL_OK) st = copy_into(w, dst_dir, err);
    size_t n = strlen(w);
    if (st != COL_OK || n < 11 || strcmp(w + n - 11, ".index.json") != 0) return st;
    char *text = NULL;
    size_t len = 0;
    if ((st = col_read_file(w, 64 << 20, &text, &len, err)) != COL_OK) return st;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", w);
    *strrchr(dir, '/') = '\0';
    /* each shard once (the map names them once per tensor) */
    const char *last = "";
    for (const cJSON *e = map ? map->child : NULL; st == COL_OK && e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, last)) continue;
        char p[PATH_MAX + 256], q[PATH_MAX + 256];
        snprintf(p, sizeof p, "%s/%s", dir, e->valuestring);
        snprintf(q, sizeof q, "%s/%s", dst_dir, e->valuestring);
        if (!exists(q)) st = copy_file(p, q, err);
        last = e->valuestring;
    }
    cJSON_Delete(root);
    return st;
}

static col_status save_model(run *r, const char *stage, col_err *err)
{
    char sub[PATH_MAX + 64], p[PATH_MAX + 128];
    if (r->o->lora_rank) {
        snprintf(p, sizeof p, "%s/" LORA_FILE, stage);
        return sd_train_save_lora(r->tr, p, err);
    }
    snprintf(p, sizeof p, "%s/model_index.json", r->files.dir);
    col_status st = copy_into(p, stage, err);
    static const sd_component comps[] = {SD_TEXT_ENCODER, SD_VAE};
    for (int i = 0; i < 2 && st == COL_OK; i++)
        if ((st = col_outdir_mkdir(r->od, sd_component_name(comps[i]), sub, sizeof sub, err)) == COL_OK)
            st = copy_component(r, comps[i], sub, err);
    if (st == COL_OK && (st = col_outdir_mkdir(r->od, "tokenizer", sub, sizeof sub, err)) == COL_OK)
        st = copy_folder(r->o->tokenizer ? r->o->tokenizer : r->files.tokenizer, sub, err);
    if (st == COL_OK && (st = col_outdir_mkdir(r->od, "scheduler", sub, sizeof sub, err)) == COL_OK) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", r->files.scheduler);
        *strrchr(dir, '/') = '\0';
        st = copy_folder(dir, sub, err);
    }
    if (st == COL_OK && (st = col_outdir_mkdir(r->od, "unet", sub, sizeof sub, err)) == COL_OK &&
        (st = copy_into(r->files.config[SD_UNET], sub, err)) == COL_OK) {
        snprintf(p, sizeof p, "%s/" UNET_FILE, sub);
        st = sd_train_save_unet(r->tr, p, err);
    }
    return st;
}

static col_status save(run *r, col_err *err)
{
    const char *stage;
    char p[PATH_MAX + 64];
    col_status st = col_outdir_begin(r->od, &stage, err);
    if (st != COL_OK) return st;
    st = save_model(r, stage, err);
    snprintf(p, sizeof p, "%s/" OPT_FILE, stage);
    if (st == COL_OK) st = dm_trainer_save_optimizer(sd_train_session(r->tr), p, err);
    if (st == COL_OK) st = write_state(r, stage, err);
    snprintf(p, sizeof p, "%s/loss.png", stage);
    if (st == COL_OK && r->logging) st = train_log_plot(&r->log, p, err);
    if (st == COL_OK) st = col_outdir_commit(r->od, err);
    if (st != COL_OK) col_outdir_abort(r->od);
    return st;
}

/* DIR must be new, empty, or this program's run (then only with --resume) */
static int check_out(run *r)
{
    const char *dir = col_outdir_path(r->od);
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/" STATE_FILE, dir);
    bool ours = exists(p);
    if (r->o->resume && !ours) return fail_line("--resume: %s holds no colossal-diffuse training run to continue", dir);
    if (!r->o->resume && ours)
        return fail_line("%s holds a training run already: continue it with --resume, or choose another --out", dir);
    if (ours || !exists(dir)) return 0;
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) /* (metrics.jsonl: a run stopped before its first save) */
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "metrics.jsonl");
    if (d) closedir(d);
    if (n) return fail_line("--out %s is not empty and is not a colossal-diffuse training output: choose another folder", dir);
    return 0;
}

/* ---- the run ---- */

static int tokenize(run *r, const df_images *d, int32_t **ids)
{
    col_tokenizer *tok = NULL;
    col_err err = {0};
    const char *path = r->o->tokenizer ? r->o->tokenizer : r->files.tokenizer;
    if (col_tok_load(path, &tok, &err) != COL_OK) return fail(&err);
    *ids = malloc(sizeof(int32_t) * (size_t)d->n * (size_t)r->text_len);
    col_status st = *ids ? COL_OK : col_err_set(&err, COL_ENOMEM, "out of memory");
    for (int i = 0; i < d->n && st == COL_OK; i++)
        st = col_tok_encode_padded(tok, d->caption[i], strlen(d->caption[i]), (size_t)r->text_len,
                                   *ids + (size_t)i * r->text_len, NULL, &err);
    col_tok_free(tok);
    return st == COL_OK ? 0 : fail(&err);
}

/* micro-batch m of step s: the instance rows, then (prior preservation) as many class rows */
static void fill_batch(run *r, int64_t s, int m, float *pix, int32_t *ids)
{
    int B = r->o->batch, R = r->o->resolution, T = r->text_len;
    size_t per = (size_t)3 * R * R;
    for (int i = 0; i < B; i++) {
        uint64_t g = ((uint64_t)s * (uint64_t)r->o->grad_accum + (uint64_t)m) * (uint64_t)B + (uint64_t)i;
        bool f;
        int k = df_pick(&r->inst, r->seed, g, r->o->flip, &f);
        df_pixels(&r->inst, k, f, pix + per * (size_t)i);
        memcpy(ids + (size_t)T * i, r->inst_ids + (size_t)T * k, sizeof(int32_t) * (size_t)T);
        if (!r->o->class_dir) continue;
        k = df_pick(&r->cls, r->seed ^ 0xc1a55ULL, g, r->o->flip, &f);
        df_pixels(&r->cls, k, f, pix + per * (size_t)(B + i));
        memcpy(ids + (size_t)T * (B + i), r->cls_ids + (size_t)T * k, sizeof(int32_t) * (size_t)T);
    }
}

static int native_resolution(const run *r)
{
    dm_unet_config u;
    dm_vae_config v;
    col_err err = {0};
    if (dm_unet_load_config(r->files.config[SD_UNET], &u, &err) != COL_OK ||
        dm_vae_load_config(r->files.config[SD_VAE], &v, &err) != COL_OK)
        return 512;
    return u.sample_size[0] * dm_vae_downscale(&v);
}

static int train(run *r)
{
    diffuse_opts *o = r->o;
    col_err err = {0};
    int rows = o->batch * (o->class_dir ? 2 : 1);
    size_t per = (size_t)3 * o->resolution * o->resolution;
    float *pix = malloc(sizeof(float) * per * (size_t)rows);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)r->text_len * (size_t)rows);
    if (!pix || !ids) {
        free(pix), free(ids);
        return fail_line("out of memory for a batch of %d images", rows);
    }
    dm_trainer *t = sd_train_session(r->tr);
    int64_t start = dm_trainer_steps(t);
    double t0 = col_seconds(), ts = t0;
    int rc = 0;
    app_stats *stats = app_stats_start(DIFFUSE_PROG, o->model); /* for colossal-top */
    for (int64_t s = start; s < o->steps && !rc; s++) {
        float loss = 0;
        col_status st = COL_OK;
        for (int m = 0; m < o->grad_accum && st == COL_OK; m++) {
            float l = 0;
            fill_batch(r, s, m, pix, ids);
            st = sd_train_micro(r->tr, pix, ids, &l, &err);
            loss += l / (float)o->grad_accum;
        }
        dm_step_info info = {0};
        if (st == COL_OK) st = sd_train_apply(r->tr, &info, &err);
        if (st != COL_OK) {
            rc = fail(&err);
            break;
        }
        app_stats_update(stats, dm_trainer_pool(t), NULL, 0, &r->dev, o->mem.cpu_mem, o->mem.gpu_mem);
        app_stats_step(stats, info.step, o->steps, loss, col_seconds() - ts);
        ts = col_seconds();
        /* metrics.jsonl, from the first step done on (a resume keeps the saved steps' lines) */
        train_log_step ls = {.step = info.step, .loss = loss, .lr = info.lr, .grad_norm = info.grad_norm,
                             .tokens_per_s = NAN, .elapsed_s = col_seconds() - t0, .no_mem = true};
        if (!r->logging &&
            (st = train_log_open(&r->log, col_outdir_path(r->od), o->resume, start, false, NAN, &err)) == COL_OK)
            r->logging = true;
        if (st != COL_OK || train_log_step_done(&r->log, &ls, &err) != COL_OK) {
            rc = fail(&err);
            break;
        }
        if (!o->quiet)
            fprintf(stderr, "step %" PRId64 "/%d  loss %.5f  lr %.3g  grad norm %.4g  %.2f s/step\n", info.step, o->steps,
                    (double)loss, (double)info.lr, info.grad_norm, (col_seconds() - t0) / (double)(s - start + 1));
        bool last = s + 1 == o->steps;
        if ((last || (o->save_every && (s + 1) % o->save_every == 0)) && save(r, &err) != COL_OK) rc = fail(&err);
    }
    app_stats_end(stats);
    if (start >= o->steps) rc = fail_line("the run in %s has done %" PRId64 " steps already: give --steps above that to "
                                          "go on", col_outdir_path(r->od), start);
    free(pix);
    free(ids);
    return rc;
}

static int setup(run *r)
{
    diffuse_opts *o = r->o;
    col_err err = {0};
    if (sd_model_locate(o->model, &r->files, &err) != COL_OK) return fail(&err);
    if (r->files.single_file[0])
        return fail_line("%s is a single-file checkpoint: --train starts from a diffusers folder (save the pipeline "
                         "with diffusers' from_single_file + save_pretrained first)", o->model);
    if (r->files.inpainting) return fail_line("%s is an inpainting model: --train trains text-to-image UNets", o->model);
    absolute(r->files.dir, r->model_abs);
    absolute(o->images, r->images_abs);
    if (o->class_dir) absolute(o->class_dir, r->class_abs);
    if (!o->resolution) o->resolution = native_resolution(r);
    r->seed = o->has_seed ? o->seed : 0;
    col_status st = col_outdir_open(o->out, 0, &r->od, &err);
    if (st != COL_OK) {
        col_err_prefix(&err, "--out");
        return fail(&err);
    }
    int rc = check_out(r);
    if (rc) return rc;
    if (df_images_load(o->images, o->instance_prompt, o->resolution, &r->inst, &err) != COL_OK) return fail(&err);
    if (o->class_dir && df_images_load(o->class_dir, o->class_prompt, o->resolution, &r->cls, &err) != COL_OK)
        return fail(&err);
    int64_t step = 0;
    col_torch_gen gen;
    char unet_w[PATH_MAX + 64], lora_w[PATH_MAX + 64];
    snprintf(unet_w, sizeof unet_w, "%s/unet/" UNET_FILE, col_outdir_path(r->od));
    snprintf(lora_w, sizeof lora_w, "%s/" LORA_FILE, col_outdir_path(r->od));
    if (o->resume && (rc = read_state(r, col_outdir_path(r->od), &step, &gen)) != 0) return rc;
    if ((rc = app_device_open(&o->device, &r->dev, &err)) != 0) {
        fprintf(stderr, DIFFUSE_PROG ": %s\n", err.msg);
        return rc;
    }
    sd_train_config c = sd_train_defaults();
    c.train.lr = o->lr;
    c.train.warmup_steps = o->warmup;
    c.train.max_grad_norm = o->max_grad_norm;
    c.train.grad_accum = o->grad_accum;
    c.train.host_budget = o->mem.cpu_mem;
    c.train.compute_budget = o->mem.gpu_mem;
    c.train.chunk_bytes = o->mem.chunk_size;
    if (r->dev.gpu && !c.train.compute_budget) {
        size_t free_b = 0, total_b = 0;
        /* halved: the UNet's training tier and the frozen encoders' store each take one */
        if (app_device_memory(&r->dev, &free_b, &total_b)) c.train.compute_budget = app_device_budget_rule(free_b, total_b) / 2;
    }
    c.batch = o->batch * (o->class_dir ? 2 : 1);
    c.n_class = o->class_dir ? o->batch : 0;
    c.prior_weight = o->prior_weight;
    c.resolution = o->resolution;
    c.lora_rank = o->lora_rank;
    c.seed = r->seed;
    if (o->resume && !o->lora_rank) c.unet_weights = unet_w;
    if (o->resume && o->lora_rank) c.lora_weights = lora_w;
    if (sd_train_open(&r->files, &r->dev.be, &c, &r->tr, &err) != COL_OK) return fail(&err);
    r->text_len = sd_train_text_len(r->tr);
    if ((rc = tokenize(r, &r->inst, &r->inst_ids)) != 0) return rc;
    if (o->class_dir && (rc = tokenize(r, &r->cls, &r->cls_ids)) != 0) return rc;
    if (o->resume) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/" OPT_FILE, col_outdir_path(r->od));
        if (dm_trainer_load_optimizer(sd_train_session(r->tr), p, &err) != COL_OK) return fail(&err);
        if (dm_trainer_steps(sd_train_session(r->tr)) != step)
            return fail_line("%s and %s/" STATE_FILE " disagree on the step count", p, col_outdir_path(r->od));
        *sd_train_generator(r->tr) = gen;
    }
    if (!o->quiet) {
        dm_trainer *t = sd_train_session(r->tr);
        fprintf(stderr, DIFFUSE_PROG ": training %s of %s (%.1fM of %.1fM weights) on %d image%s at %dx%d, %s, %s "
                "from step %" PRId64 " to %d, on %s\n", o->lora_rank ? "LoRA adapters" : "the UNet", o->model,
                (double)dm_trainer_trained(t) / 1e6, (double)dm_trainer_total(t) / 1e6, r->inst.n,
                r->inst.n > 1 ? "s" : "", o->resolution, o->resolution, sd_train_prediction(r->tr),
                o->class_dir ? "prior preservation" : "captions", step, o->steps, r->dev.desc);
    }
    return 0;
}

int diffuse_train(diffuse_opts *o)
{
    run r = {.o = o};
    int rc = setup(&r);
    if (!rc) rc = train(&r);
    if (!rc) printf("%s\n", col_outdir_path(r.od));
    col_err ignored;
    if (r.logging)
        train_log_close(&r.log, &ignored);
    sd_train_free(r.tr);
    app_device_close(&r.dev);
    col_outdir_close(r.od);
    df_images_free(&r.inst);
    df_images_free(&r.cls);
    free(r.inst_ids);
    free(r.cls_ids);
    return rc;
}
