/* test_sd_single_file - Stable Diffusion single-file checkpoints (LDM layout)
 * read as diffusers components, against tools/refgen/make_sd_single_file_fixtures.py:
 * every diffusers tensor read through the file's sources equals the diffusers
 * model's bitwise (diffusers itself loads the same files to those tensors), the
 * configs equal those of a diffusers folder of the model, and bad files give
 * one clear error. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "sd_single_file.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#error "FIXTURES must name tests/fixtures/sd_single_file"
#endif

static char tmpdir[256];

static size_t numel(const col_ckpt_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

/* every "unet." / "vae." / "text_encoder." tensor of the reference through f's sources, bitwise */
static void check_tensors(const char *name, sd_single_file *f)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s_ref.safetensors", FIXTURES, name);
    col_ckpt *ref = NULL;
    col_err err = {0};
    TL_OK(col_ckpt_open(path, &ref, &err) == COL_OK, "%s: open the diffusers reference: %s", name, err.msg);
    if (!ref) return;
    static const char *const pre[] = {"unet.", "vae.", "text_encoder."};
    int seen[SD_NCOMPONENTS] = {0}, equal[SD_NCOMPONENTS] = {0}, prefixed = 0;
    char first_bad[800] = "";
    for (int i = 0; i < col_ckpt_count(ref); i++) {
        const col_ckpt_tensor *t = col_ckpt_get(ref, i);
        int c = 0;
        while (c < SD_NCOMPONENTS && strncmp(t->name, pre[c], strlen(pre[c]))) c++;
        if (c == SD_NCOMPONENTS) continue;
        const mb_source *src = sd_single_file_source(f, (sd_component)c);
        const char *dn = t->name + strlen(pre[c]);
        char alt[600];
        /* the text encoder answers with "text_model." too: ask every other tensor that way */
        if (c == SD_TEXT_ENCODER && (seen[c] & 1)) {
            snprintf(alt, sizeof alt, "text_model.%s", dn);
            dn = alt;
            prefixed++;
        }
        seen[c]++;
        size_t n = numel(t);
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        bool ok = a && b && src && src->has(src, dn) &&
                  col_ckpt_read_f32(t, t->ndim, t->shape, a, &err) == COL_OK &&
                  src->read(src, dn, t->ndim, t->shape, b, &err) == COL_OK && memcmp(a, b, n * sizeof *a) == 0;
        if (ok)
            equal[c]++;
        else if (!first_bad[0])
            snprintf(first_bad, sizeof first_bad, "%s (%s)", t->name, err.msg);
        free(a);
        free(b);
    }
    for (int c = 0; c < SD_NCOMPONENTS; c++)
        TL_OK(seen[c] > 0 && equal[c] == seen[c] && sd_single_file_count(f, (sd_component)c) == seen[c],
              "%s: all %d %s tensors read through the single file are the diffusers model's, bitwise, and the source "
              "has no others (%d equal, %d answered; first bad: %s)", name, seen[c], pre[c], equal[c],
              sd_single_file_count(f, (sd_component)c), first_bad);
    TL_OK(prefixed > 0, "%s: %d text-encoder names asked with \"text_model.\"", name, prefixed);
    col_ckpt_close(ref);
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, fp) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    fclose(fp);
    return s;
}

/* the config text equals the diffusers folder's file: as JSON, and byte for byte */
static void check_config(const char *folder, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", FIXTURES, folder, file);
    char *want = slurp(path);
    cJSON *a = want ? cJSON_Parse(want) : NULL, *b = text ? cJSON_Parse(text) : NULL;
    TL_OK(a && b && cJSON_Compare(a, b, true), "%s/%s: the config is the diffusers folder's (as JSON)", folder, file);
    TL_OK(want && text && !strcmp(want, text), "%s/%s: and byte for byte", folder, file);
    if (want && text && strcmp(want, text)) printf("# want:\n%s# got:\n%s", want, text);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(want);
}

static void check_configs(const char *folder, const sd_single_file *f)
{
    check_config(folder, "unet/config.json", sd_single_file_config(f, SD_UNET));
    check_config(folder, "vae/config.json", sd_single_file_config(f, SD_VAE));
    check_config(folder, "text_encoder/config.json", sd_single_file_config(f, SD_TEXT_ENCODER));
    check_config(folder, "scheduler/scheduler_config.json", sd_single_file_scheduler_config(f));
}

static void test_case(const char *name, const char *file, sd_family fam, bool inpaint, bool v)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, file);
    sd_single_file *f = NULL;
    col_err err = {0};
    TL_OK(sd_single_file_open(path, SD_PREDICTION_AUTO, &f, &err) == COL_OK, "%s: open: %s", name, err.msg);
    if (!f) return;
    TL_OK(sd_single_file_family(f) == fam && sd_single_file_inpainting(f) == inpaint &&
              sd_single_file_v_prediction(f) == v,
          "%s: SD %d.x, %sinpainting, %s", name, (int)sd_single_file_family(f), sd_single_file_inpainting(f) ? "" : "not ",
          sd_single_file_v_prediction(f) ? "v-prediction" : "epsilon");
    TL_OK(!strcmp(sd_single_file_pipeline(f), inpaint ? "StableDiffusionInpaintPipeline" : "StableDiffusionPipeline") &&
              !strcmp(sd_single_file_tokenizer(f), "clip") &&
              !strcmp(sd_single_file_pad_token(f), fam == SD_FAMILY_SD2 ? "!" : "<|endoftext|>"),
          "%s: pipeline %s, tokenizer %s padding with %s", name, sd_single_file_pipeline(f), sd_single_file_tokenizer(f),
          sd_single_file_pad_token(f));
    for (int c = 0; c < SD_NCOMPONENTS; c++)
        TL_OK(sd_single_file_has(f, (sd_component)c) && sd_single_file_source(f, (sd_component)c),
              "%s: holds the %s", name, sd_component_name((sd_component)c));
    check_tensors(name, f);
    check_configs(name, f);
    const mb_source *u = sd_single_file_source(f, SD_UNET);
    TL_OK(!u->has(u, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_qq.weight") &&
              !u->has(u, "model.diffusion_model.conv_in.weight"),
          "%s: has() is false for names the UNet does not have", name);
    sd_single_file_close(f);
}

/* the tensors of an fixture file, f32, to write altered copies */
typedef struct {
    col_st_out *t;
    float **data;
    int n;
} tensors;

static void load_all(const char *path, tensors *ts)
{
    col_ckpt *c = NULL;
    col_err err = {0};
    memset(ts, 0, sizeof *ts);
    if (col_ckpt_open(path, &c, &err) != COL_OK) return;
    ts->n = col_ckpt_count(c);
    ts->t = calloc((size_t)ts->n + 4, sizeof *ts->t);
    ts->data = calloc((size_t)ts->n + 4, sizeof *ts->data);
    for (int i = 0; i < ts->n; i++) {
        const col_ckpt_tensor *t = col_ckpt_get(c, i);
        ts->data[i] = malloc(numel(t) * sizeof(float) + 4);
        col_ckpt_read_f32(t, t->ndim, t->shape, ts->data[i], &err);
        ts->t[i].name = strdup(t->name);
        ts->t[i].ndim = t->ndim;
        memcpy(ts->t[i].shape, t->shape, sizeof t->shape);
        ts->t[i].data = ts->data[i];
    }
    col_ckpt_close(c);
}

static void free_all(tensors *ts)
{
    for (int i = 0; i < ts->n; i++) {
        free((char *)ts->t[i].name);
        free(ts->data[i]);
    }
    free(ts->t);
    free(ts->data);
}

/* a copy of ts without the tensors whose names start with drop (NULL: none) and with an extra tensor named add (NULL: none), opened */
static col_status altered(const tensors *ts, const char *drop, const char *add, sd_single_file **f, col_err *err)
{
    static float zero[64];
    col_st_out *t = malloc(((size_t)ts->n + 1) * sizeof *t);
    int n = 0;
    for (int i = 0; i < ts->n; i++)
        if (!drop || strncmp(ts->t[i].name, drop, strlen(drop))) t[n++] = ts->t[i];
    if (add) t[n++] = (col_st_out){add, 2, {8, 8}, zero};
    char path[300];
    snprintf(path, sizeof path, "%s/altered.safetensors", tmpdir);
    col_err werr = {0};
    col_status st = col_st_write_f32(path, t, n, NULL, &werr);
    free(t);
    *f = NULL;
    if (st != COL_OK) return col_err_copy(err, &werr);
    return sd_single_file_open(path, SD_PREDICTION_AUTO, f, err);
}

static void test_errors(void)
{
    char path[512];
    sd_single_file *f = NULL;
    col_err err = {0};
    TL_OK(sd_single_file_open(FIXTURES "/no_such_file.safetensors", SD_PREDICTION_AUTO, &f, &err) == COL_EIO && !f,
          "a missing file: %s", err.msg);
#ifdef HF_FIXTURES
    TL_OK(sd_single_file_open(HF_FIXTURES "/gpt2/model.safetensors", SD_PREDICTION_AUTO, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "is not a Stable Diffusion 1.x/2.x checkpoint"),
          "a GPT-2 safetensors: %s", err.msg);
#endif
    /* the second family guess: SD 2.x read as the 512-pixel epsilon model */
    snprintf(path, sizeof path, "%s/sd2.safetensors", FIXTURES);
    TL_OK(sd_single_file_open(path, SD_PREDICTION_EPSILON, &f, &err) == COL_OK && !sd_single_file_v_prediction(f),
          "sd2 opened as SD 2.x-base: %s", err.msg);
    if (f) check_configs("sd2_base", f);
    if (f) {
        /* shapes that differ */
        const mb_source *te = sd_single_file_source(f, SD_TEXT_ENCODER);
        float buf[4096];
        TL_OK(te->read(te, "encoder.layers.0.self_attn.k_proj.weight", 2, (int64_t[]){16, 8}, buf, &err) == COL_ESHAPE &&
                  strstr(err.msg, "in_proj_weight (q, k, v stacked) is [48, 16]"),
              "a fused projection asked with another shape: %s", err.msg);
        const mb_source *u = sd_single_file_source(f, SD_UNET);
        TL_OK(u->read(u, "conv_in.weight", 4, (int64_t[]){4, 3, 3, 3}, buf, &err) == COL_ESHAPE &&
                  strstr(err.msg, "conv_in.weight should be [4, 3, 3, 3], but model.diffusion_model.input_blocks.0.0.weight is [4, 4, 3, 3]"),
              "a tensor asked with another shape: %s", err.msg);
        TL_OK(u->read(u, "conv_in.bias", 1, (int64_t[]){4}, buf, &err) == COL_OK, "and with its own");
        sd_single_file_close(f);
    }

    snprintf(path, sizeof path, "%s/sd1.safetensors", FIXTURES);
    tensors ts;
    load_all(path, &ts);
    TL_OK(ts.n > 300, "load sd1.safetensors for altered copies (%d tensors)", ts.n);
    TL_OK(altered(&ts, NULL, NULL, &f, &err) == COL_OK, "an unaltered copy opens: %s", err.msg);
    sd_single_file_close(f);
    TL_OK(altered(&ts, NULL, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn3.to_q.weight", &f,
                  &err) == COL_EFORMAT && strstr(err.msg, "1 tensor is not part of a Stable Diffusion") &&
              strstr(err.msg, "attn3.to_q"),
          "an unknown UNet tensor: %s", err.msg);
    TL_OK(altered(&ts, NULL, "first_stage_model.decoder.up.7.block.0.conv1.weight", &f, &err) == COL_EFORMAT,
          "a VAE block beyond the decoder's levels: %s", err.msg);
    TL_OK(altered(&ts, "cond_stage_model.transformer.text_model.encoder.layers.0.", NULL, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "no cond_stage_model.transformer.text_model.encoder.layers.0.layer_norm1.weight"),
          "a text-encoder layer missing: %s", err.msg);
    TL_OK(altered(&ts, "first_stage_model.decoder.up.0.", NULL, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "decoder.up.0.block.0.conv2.weight"),
          "a decoder level missing: %s", err.msg);
    TL_OK(altered(&ts, NULL, "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc3.weight", &f, &err) ==
                  COL_EFORMAT && strstr(err.msg, "fc3"),
          "an unknown text-encoder tensor: %s", err.msg);
    TL_OK(altered(&ts, NULL, "conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight", &f,
                  &err) == COL_EUNSUPPORTED && strstr(err.msg, "XL"),
          "an SDXL checkpoint: %s", err.msg);
    TL_OK(altered(&ts, NULL, "cond_stage_model.model.token_embedding.weight", &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "both a CLIP"),
          "two text encoders: %s", err.msg);
    TL_OK(altered(&ts, "model.diffusion_model.middle_block.1.proj_in.weight", NULL, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "middle_block.1.proj_in.weight"),
          "a tensor the structure is read from, missing: %s", err.msg);
    TL_OK(altered(&ts, "model.diffusion_model.input_blocks.2.0.op.", NULL, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "no model.diffusion_model.input_blocks.2.0.out_layers.3.weight"),
          "a downsampler missing: %s", err.msg);
    TL_OK(altered(&ts, "model.diffusion_model.output_blocks.1.", NULL, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "no model.diffusion_model.output_blocks.1.0.out_layers.3.weight"),
          "an output block missing: %s", err.msg);
    TL_OK(altered(&ts, "model.diffusion_model.input_blocks.1.0.in_layers.2.weight", NULL, &f, &err) == COL_OK,
          "a resnet's conv1 missing opens: %s", err.msg);
    if (f) {
        const mb_source *u = sd_single_file_source(f, SD_UNET);
        float buf[1024];
        TL_OK(u->read(u, "down_blocks.0.resnets.0.conv1.weight", 4, (int64_t[]){8, 8, 3, 3}, buf, &err) ==
                      COL_EFORMAT && strstr(err.msg, "no tensor for the unet's down_blocks.0.resnets.0.conv1.weight"),
              "but reading it names it: %s", err.msg);
        sd_single_file_close(f);
    }
    TL_OK(altered(&ts, "first_stage_model.encoder.conv_in.weight", NULL, &f, &err) == COL_EFORMAT &&
              strstr(err.msg, "no first_stage_model.encoder.conv_in.weight"),
          "a VAE without its conv_in: %s", err.msg);
    TL_OK(altered(&ts, "first_stage_model.", NULL, &f, &err) == COL_OK && f && !sd_single_file_has(f, SD_VAE) &&
              !sd_single_file_source(f, SD_VAE) && !sd_single_file_config(f, SD_VAE) &&
              sd_single_file_has(f, SD_TEXT_ENCODER),
          "without first_stage_model.* the file has no VAE: %s", err.msg);
    sd_single_file_close(f);
    free_all(&ts);
    /* one diffusers component is not a single file */
    TL_OK(sd_single_file_open(FIXTURES "/../sd_pipeline/model/unet/diffusion_pytorch_model.safetensors",
                              SD_PREDICTION_AUTO, &f, &err) == COL_EFORMAT && strstr(err.msg, "diffusers component"),
          "a diffusers UNet file: %s", err.msg);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/colsdsfXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    test_case("sd1", "sd1.safetensors", SD_FAMILY_SD1, false, false);
    test_case("sd1_ckpt", "sd1_ckpt.ckpt", SD_FAMILY_SD1, true, false);
    test_case("sd2", "sd2.safetensors", SD_FAMILY_SD2, false, true);
    test_errors();
    char p[300];
    snprintf(p, sizeof p, "%s/altered.safetensors", tmpdir);
    unlink(p);
    rmdir(tmpdir);
    return tl_done();
}
