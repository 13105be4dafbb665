/* test_sd_pipeline - whole Stable Diffusion runs against diffusers.
 *
 * tests/fixtures/sd_pipeline (tools/refgen/make_sd_pipeline_fixtures.py) holds
 * a tiny random pipeline in the diffusers layout and what diffusers 0.42
 * computed with it from seeded torch generators: for every scheduler and two
 * prompts the latents after five steps with classifier-free guidance and the
 * 8-bit image; guidance off; a batch of two from one generator; img2img at
 * strength 0.6; inpainting with a 9-channel UNet. The same runs here must
 * give the same latents (NMSE <= 1e-6) and pixels (within one level).
 *
 * Built with SD_TEST_CUDA (tests/test_sd_pipeline_emu: the CUDA backend's kernels through the emulator;
 * tests/test_sd_pipeline_cuda on a GPU) the runs go through the CUDA backend and a compute tier of a few
 * MiB, so every weight chunk is copied to the device as the graphs need it: a subset of the cases, as the
 * emulator is slow. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#ifdef SD_TEST_CUDA
#include "backend_cuda.h"
#endif
#include "checkpoint.h"
#include "image.h"
#include "sd_model.h"
#include "sd_pipeline.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/sd_pipeline"
#endif

static col_backend be;
static col_ckpt *ref;
static cJSON *meta;

static double nmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

static bool ref_f32(const char *name, size_t n, float *out)
{
    const col_ckpt_tensor *t = col_ckpt_find(ref, name);
    if (!t) return false;
    int64_t shape[1] = {(int64_t)n};
    col_err err = {0};
    /* read flat: the element count must agree */
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
    if (numel != n) return false;
    col_ckpt_tensor flat = *t;
    flat.ndim = 1;
    flat.shape[0] = (int64_t)n;
    return col_ckpt_read_f32(&flat, 1, shape, out, &err) == COL_OK;
}

/* the subset the CUDA builds run */
static bool wanted(const char *key)
{
#ifdef SD_TEST_CUDA
    return strcmp(key, "ddim.0") == 0 || strcmp(key, "euler-a.1") == 0 || strcmp(key, "dpm++2m-karras.0") == 0 ||
           strcmp(key, "img2img") == 0 || strcmp(key, "inpaint") == 0;
#else
    (void)key;
    return true;
#endif
}

typedef struct {
    const char *model, *scheduler, *prompt, *negative;
    uint64_t seed;
    float cfg, strength;
    int batch;
    const char *init, *mask;
    const char *tokenizer;          /* a tokenizer folder in place of the model's */
    float *latents_out;             /* not NULL: receives the latents */
} run_spec;

/* runs one generation and compares its latents (and pixels when the reference has them) */
static void check_run(const char *key, const run_spec *r)
{
    if (!wanted(key)) return;
    sd_model_files files;
    col_err err = {0};
    char model[512];
    snprintf(model, sizeof model, "%s/%s", FIXTURES, r->model);
    if (sd_model_locate(model, &files, &err) != COL_OK) {
        TL_OK(false, "%s: locate %s: %s", key, model, err.msg);
        return;
    }
    sd_pipeline *p = NULL;
    sd_open_config oc = {0};
#ifdef SD_TEST_CUDA
    oc.mem.compute_budget = (size_t)8 << 20;
#endif
    char tok[512];
    if (r->tokenizer) {
        snprintf(tok, sizeof tok, "%s/%s", FIXTURES, r->tokenizer);
        oc.tokenizer = tok;
    }
    if (sd_pipeline_open(&files, &be, &oc, &p, &err) != COL_OK) {
        TL_OK(false, "%s: open: %s", key, err.msg);
        return;
    }
    int size = 16, lat = 4 * 8 * 8 * r->batch;
    col_image init = {0}, mask = {0}, imgs[2] = {{0}};
    char path[512];
    if (r->init) {
        snprintf(path, sizeof path, "%s/%s", FIXTURES, r->init);
        TL_OK(col_image_read(path, 3, &init, &err) == COL_OK, "%s: read %s: %s", key, path, err.msg);
    }
    if (r->mask) {
        snprintf(path, sizeof path, "%s/%s", FIXTURES, r->mask);
        TL_OK(col_image_read(path, 1, &mask, &err) == COL_OK, "%s: read %s: %s", key, path, err.msg);
    }
    float *got = calloc((size_t)lat, sizeof(float)), *want = calloc((size_t)lat, sizeof(float));
    sd_gen_params q = {.prompt = r->prompt, .negative = r->negative, .steps = 5, .cfg = r->cfg, .seed = r->seed,
                       .width = size, .height = size, .batch = r->batch, .scheduler = r->scheduler,
                       .init = r->init ? &init : NULL, .strength = r->strength, .mask = r->mask ? &mask : NULL,
                       .latents = got};
    col_status st = sd_generate(p, &q, imgs, &err);
    TL_OK(st == COL_OK, "%s: generate: %s", key, st == COL_OK ? "ok" : err.msg);
    char name[128];
    snprintf(name, sizeof name, "%s.latents", key);
    if (st == COL_OK && r->latents_out) memcpy(r->latents_out, got, sizeof(float) * (size_t)lat);
    if (st == COL_OK && ref_f32(name, (size_t)lat, want)) {
        double e = nmse(got, want, (size_t)lat);
        TL_OK(e <= 1e-6, "%s: latents NMSE %.3g against diffusers (<= 1e-6)", key, e);
    } else if (st == COL_OK) {
        TL_OK(false, "%s: no reference latents", key);
    }
    snprintf(name, sizeof name, "%s.pixels", key);
    int npx = size * size * 3;
    float *px = calloc((size_t)npx, sizeof(float));
    if (st == COL_OK && ref_f32(name, (size_t)npx, px)) {
        int worst = 0, off = 0;
        for (int i = 0; i < npx; i++) {
            int d = abs((int)imgs[0].data[i] - (int)lrintf(px[i]));
            if (d > worst) worst = d;
            off += d != 0;
        }
        TL_OK(worst <= 1 && off <= npx / 50, "%s: pixels within one level of diffusers' (worst %d, %d of %d differ)",
              key, worst, off, npx);
    }
    free(px);
    for (int b = 0; b < r->batch; b++) col_image_free(&imgs[b]);
    col_image_free(&init);
    col_image_free(&mask);
    free(got);
    free(want);
    sd_pipeline_free(p);
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static uint64_t jseed(const cJSON *o)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "seed");
    return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
}

int main(void)
{
#ifdef SD_TEST_CUDA
    col_err berr = {0};
    if (col_cuda_backend_init(&be, 0, &berr) != COL_OK) {
        printf("1..0 # SKIP no CUDA device: %s\n", berr.msg);
        return 0;
    }
    col_cuda_backend_set_tf32(&be, false); /* f32 GEMMs, as diffusers' references */
#else
    tl_cpu_backend(&be);
#endif
    col_err err = {0};
    char *json = NULL;
    size_t len = 0;
    if (col_ckpt_open(FIXTURES "/reference.safetensors", &ref, &err) != COL_OK ||
        col_read_file(FIXTURES "/reference.json", 1 << 20, &json, &len, &err) != COL_OK ||
        !(meta = cJSON_ParseWithLength(json, len))) {
        printf("Bail out! fixtures: %s\n", err.msg);
        return 1;
    }
    free(json);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(meta, "cases"), *c;
    float cfg = (float)cJSON_GetObjectItemCaseSensitive(meta, "cfg")->valuedouble;
    cJSON_ArrayForEach(c, cases)
    {
        run_spec r = {.model = "model", .scheduler = jstr(c, "scheduler"), .prompt = jstr(c, "prompt"),
                      .negative = jstr(c, "negative"), .seed = jseed(c), .cfg = cfg, .batch = 1};
        check_run(jstr(c, "key"), &r);
    }
    const cJSON *ng = cJSON_GetObjectItemCaseSensitive(meta, "noguide");
    check_run("noguide", &(run_spec){.model = "model", .scheduler = "euler", .prompt = jstr(ng, "prompt"),
                                     .negative = "", .seed = jseed(ng), .cfg = 1.0f, .batch = 1});
    const cJSON *b2 = cJSON_GetObjectItemCaseSensitive(meta, "batch2");
    const cJSON *c1 = cJSON_GetArrayItem(cases, 1);
    check_run("batch2", &(run_spec){.model = "model", .scheduler = jstr(b2, "scheduler"), .prompt = jstr(c1, "prompt"),
                                    .negative = jstr(c1, "negative"), .seed = jseed(b2), .cfg = cfg, .batch = 2});
    const cJSON *i2i = cJSON_GetObjectItemCaseSensitive(meta, "img2img");
    check_run("img2img", &(run_spec){.model = "model", .scheduler = "ddim", .prompt = jstr(i2i, "prompt"),
                                     .negative = "", .seed = jseed(i2i), .cfg = cfg, .batch = 1, .init = "init.png",
                                     .strength = 0.6f});
    const cJSON *inp = cJSON_GetObjectItemCaseSensitive(meta, "inpaint");
    /* no scheduler named: the model's, which model_index.json names (EulerDiscreteScheduler) over
     * scheduler_config.json's _class_name (PNDMScheduler), as diffusers does */
    check_run("inpaint", &(run_spec){.model = "inpaint", .scheduler = NULL, .prompt = jstr(inp, "prompt"),
                                     .negative = jstr(inp, "negative"), .seed = jseed(inp), .cfg = cfg, .batch = 1,
                                     .init = "init.png", .mask = "mask.png", .strength = 1.0f});
    /* the same weights as an LDM single file (with the folder's tokenizer): the same latents */
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(meta, "single_file");
    float a[4 * 8 * 8], b[4 * 8 * 8];
    check_run("single_file", &(run_spec){.model = "sf_model", .scheduler = NULL, .prompt = jstr(sf, "prompt"),
                                         .negative = "", .seed = jseed(sf), .cfg = cfg, .batch = 1, .latents_out = a});
    check_run("single_file", &(run_spec){.model = "sf_model.safetensors", .scheduler = NULL, .prompt = jstr(sf, "prompt"),
                                         .negative = "", .seed = jseed(sf), .cfg = cfg, .batch = 1,
                                         .tokenizer = "sf_model/tokenizer", .latents_out = b});
#ifndef SD_TEST_CUDA
    TL_OK(memcmp(a, b, sizeof a) == 0, "the single file and the diffusers folder of the same weights give the same latents");
#else
    (void)a, (void)b;
#endif
    cJSON_Delete(meta);
    col_ckpt_close(ref);
    return tl_done();
}
