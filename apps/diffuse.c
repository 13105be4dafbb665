/* colossal-diffuse - Stable Diffusion images from the command line.
 *
 *   colossal-diffuse MODEL "a lighthouse at dawn" -o out.png --steps 30 --seed 42
 *
 * Errors: one line on stderr, exit 1 (usage errors, and a GPU asked for and
 * not usable: exit 2). The parameters of each image go into its PNG. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "apperr.h"
#include "diffuse.h"
#include "image.h"
#include "procsetup.h"
#include "sd_model.h"
#include "sd_pipeline.h"
#include "statpub.h"
#include "timer.h"

#define PARAM_KEY "parameters"
#define SOFTWARE "colossal-diffuse"

static int fail(const col_err *e)
{
    char line[1024];
    fprintf(stderr, DIFFUSE_PROG ": %s\n", app_err_line(e, mem_opt_of, line, sizeof line));
    return 1;
}

static int fail_msg(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, DIFFUSE_PROG ": ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 1;
}

/* the name of image k of n: FILE, or FILE-k.png (the extension kept last) */
static void out_name(const char *out, int k, int n, char *buf, size_t len)
{
    if (n == 1) {
        snprintf(buf, len, "%s", out);
        return;
    }
    const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    if (!dot || (slash && dot < slash)) dot = out + strlen(out);
    snprintf(buf, len, "%.*s-%d%s", (int)(dot - out), out, k + 1, dot);
}

/* An existing file may be replaced only when colossal-diffuse wrote it (or with --force). */
static int check_out(const char *path, bool force)
{
    if (access(path, F_OK) != 0) return 0;
    if (force) return 0;
    char *v = NULL;
    col_err err = {0};
    bool ours = col_image_read_text(path, "Software", &v, &err) == COL_OK && v && strcmp(v, SOFTWARE) == 0;
    free(v);
    if (ours) return 0;
    return fail_msg("%s exists and was not written by colossal-diffuse: choose another --out, or --force to replace "
                    "it%s",
                    path, "");
}

typedef struct {
    bool tty, quiet;
    double t0, last;
    char label[64];
} progress;

static col_status on_step(void *user, int i, int n, col_err *err)
{
    (void)err;
    progress *pg = user;
    double now = col_seconds();
    if (i == 0) pg->t0 = now;
    if (pg->quiet || !pg->tty) return COL_OK;
    if (i > 0 && i < n && now - pg->last < 0.1) return COL_OK;
    pg->last = now;
    int width = 30, fill = n ? i * width / n : 0;
    char bar[64];
    for (int k = 0; k < width; k++) bar[k] = k < fill ? '#' : '.';
    bar[width] = '\0';
    double rate = i > 0 && now > pg->t0 ? i / (now - pg->t0) : 0;
    fprintf(stderr, "\r%s [%s] %d/%d  %.2f it/s ", pg->label, bar, i, n, rate);
    if (i == n) fprintf(stderr, "\n");
    fflush(stderr);
    return COL_OK;
}

static void param_text(const diffuse_opts *o, const sd_gen_params *g, const char *sched, const char *model, int k,
                       char *buf, size_t n)
{
    /* the layout other Stable Diffusion tools write, so they can read it back */
    int len = snprintf(buf, n, "%s\n", g->prompt);
    if (g->negative[0]) len += snprintf(buf + len, n - (size_t)len, "Negative prompt: %s\n", g->negative);
    len += snprintf(buf + len, n - (size_t)len,
                    "Steps: %d, Sampler: %s, CFG scale: %g, Seed: %llu, Size: %dx%d, Model: %s, RNG: %s", g->steps,
                    sched, (double)g->cfg, (unsigned long long)g->seed, g->width, g->height, model,
                    g->philox ? "philox" : "torch-cpu");
    if (g->batch > 1) len += snprintf(buf + len, n - (size_t)len, ", Batch: %d of %d", k + 1, g->batch);
    if (o->init)
        len += snprintf(buf + len, n - (size_t)len, ", %s: %s, Denoising strength: %g", o->mask ? "Inpaint" : "Init image",
                        o->init, (double)g->strength);
    for (int i = 0; i < o->nlora; i++)
        len += snprintf(buf + len, n - (size_t)len, ", LoRA: %s:%g", o->lora[i], (double)o->lora_weight[i]);
}

static int run(diffuse_opts *o)
{
    col_err err = {0};
    sd_model_files files;
    if (sd_model_locate(o->model, &files, &err) != COL_OK) return fail(&err);
    if (o->mask && !files.inpainting && !files.single_file[0])
        return fail_msg("--mask needs an inpainting model (%s is a %s)", o->model,
                        files.pipeline[0] ? files.pipeline : "text-to-image model");

    col_image init = {0}, mask = {0};
    if (o->init && col_image_read(o->init, 3, &init, &err) != COL_OK) return fail(&err);
    if (o->mask && col_image_read(o->mask, 1, &mask, &err) != COL_OK) {
        col_image_free(&init);
        return fail(&err);
    }
    int rc = 0;
    app_device dev = {0};
    sd_pipeline *p = NULL;
    app_stats *stats = NULL; /* for colossal-top */
    col_image *imgs = NULL;
    if (o->init) { /* the size follows the source image unless given, rounded down to multiples of 8 */
        int w = init.width / 8 * 8, h = init.height / 8 * 8;
        if (w < 8 || h < 8) {
            rc = fail_msg("%s is too small: an --init image needs at least 8x8 pixels%s", o->init, "");
            goto done;
        }
        if ((o->width && (o->width != w || o->height != h)) || init.width != w || init.height != h) {
            char got[64];
            snprintf(got, sizeof got, "%dx%d", init.width, init.height);
            rc = fail_msg("%s is %s: resize it to the --size wanted (multiples of 8) first", o->init, got);
            goto done;
        }
        o->width = w, o->height = h;
        if (o->mask && (mask.width != init.width || mask.height != init.height)) {
            rc = fail_msg("--mask %s must have the size of --init %s", o->mask, o->init);
            goto done;
        }
    }
    for (int k = 0; k < o->batch; k++) {
        char name[4200];
        out_name(o->out, k, o->batch, name, sizeof name);
        if ((rc = check_out(name, o->force)) != 0) goto done;
    }
    if ((rc = app_device_open(&o->device, &dev, &err)) != 0) {
        fprintf(stderr, DIFFUSE_PROG ": %s\n", err.msg);
        goto done;
    }
    mb_store_config mem = {.host_budget = o->mem.cpu_mem, .compute_budget = o->mem.gpu_mem, .chunk_bytes = o->mem.chunk_size};
    if (dev.gpu && !mem.compute_budget) {
        size_t free_b = 0, total_b = 0;
        if (app_device_memory(&dev, &free_b, &total_b)) mem.compute_budget = app_device_budget_rule(free_b, total_b);
    }
    sd_open_config oc = {.mem = mem, .tokenizer = o->tokenizer, .lora = o->lora, .lora_weight = o->lora_weight, .nlora = o->nlora};
    if (sd_pipeline_open(&files, &dev.be, &oc, &p, &err) != COL_OK) {
        rc = fail(&err);
        goto done;
    }
    stats = app_stats_start(DIFFUSE_PROG, o->model);
    app_stats_update(stats, mb_store_pool(sd_pipeline_store(p)), NULL, 0, &dev, mem.host_budget, mem.compute_budget);
    if (!o->has_seed) {
        uint64_t s = 0;
        if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) s = (uint64_t)(col_seconds() * 1e9);
        o->seed = s & 0x7fffffffffffffffULL;
    }
    const char *sched = o->scheduler[0] ? o->scheduler : sd_pipeline_default_scheduler(p);
    bool lcm = strcmp(sched, "lcm") == 0;
    int size = sd_pipeline_native_size(p);
    sd_gen_params g = {.prompt = o->prompt, .negative = o->negative, .steps = o->steps ? o->steps : lcm ? 4 : 30,
                       .cfg = o->cfg >= 0 ? o->cfg : lcm ? 1.5f : 7.5f, .seed = o->seed, .philox = o->philox,
                       .width = o->width ? o->width : size, .height = o->height ? o->height : size, .batch = o->batch,
                       .scheduler = sched, .init = o->init ? &init : NULL, .strength = o->strength,
                       .mask = o->mask ? &mask : NULL};
    progress pg = {.tty = isatty(STDERR_FILENO), .quiet = o->quiet};
    snprintf(pg.label, sizeof pg.label, "%s", o->batch > 1 ? "images" : "image");
    g.progress = on_step;
    g.user = &pg;
    if (!o->quiet)
        fprintf(stderr, DIFFUSE_PROG ": %s, %dx%d, %s, %d steps, cfg %g, seed %llu, on %s\n", o->model, g.width,
                g.height, sched, g.steps, (double)g.cfg, (unsigned long long)g.seed, dev.desc);
    imgs = calloc((size_t)o->batch, sizeof *imgs);
    if (!imgs) {
        rc = fail_msg("out of memory%s%s", "", "");
        goto done;
    }
    double t0 = col_seconds();
    if (sd_generate(p, &g, imgs, &err) != COL_OK) {
        if (pg.tty && !o->quiet) fprintf(stderr, "\n");
        rc = fail(&err);
        goto done;
    }
    double secs = col_seconds() - t0;
    for (int k = 0; k < o->batch; k++) {
        char name[4200], params[8192];
        out_name(o->out, k, o->batch, name, sizeof name);
        param_text(o, &g, sched, o->model, k, params, sizeof params);
        const char *text[] = {PARAM_KEY, params, "Software", SOFTWARE, NULL};
        if (col_image_write_png(name, &imgs[k], text, &err) != COL_OK) {
            rc = fail(&err);
            goto done;
        }
        printf("%s\n", name);
    }
    if (!o->quiet)
        fprintf(stderr, DIFFUSE_PROG ": %d image%s in %.1f s\n", o->batch, o->batch > 1 ? "s" : "", secs);
done:
    if (imgs)
        for (int k = 0; k < o->batch; k++) col_image_free(&imgs[k]);
    free(imgs);
    app_stats_end(stats);
    sd_pipeline_free(p);
    app_device_close(&dev);
    col_image_free(&init);
    col_image_free(&mask);
    return rc;
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    diffuse_opts o;
    char msg[512];
    int r = diffuse_parse(argc, argv, &o, msg, sizeof msg);
    if (r == 1) return 0;
    if (r == 2) {
        fprintf(stderr, DIFFUSE_PROG ": %s (see --help)\n", msg);
        return 2;
    }
    return o.train ? diffuse_train(&o) : run(&o);
}
