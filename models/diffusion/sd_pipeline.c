/* sd_pipeline.c - text-to-image, image-to-image and inpainting as diffusers' pipelines compute them. */
#include "sd_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dm_clip_text.h"
#include "dm_unet.h"
#include "dm_vae.h"
#include "rng.h"
#include "rng_torch.h"
#include "sd_pipeline_internal.h"
#include "textio.h"

/* ---- opening ---- */

static col_status open_weights(sd_pipeline *p, sd_component c, col_err *err)
{
    col_status st = col_ckpt_open(p->files.weights[c], &p->ckpt[c], err);
    if (st != COL_OK) return col_err_prefix(err, "%s weights", sd_component_name(c));
    mb_source_ckpt(&p->src[c], &p->src_ctx[c], p->ckpt[c],
                   c == SD_TEXT_ENCODER ? dm_clip_text_prefix(p->ckpt[c]) : NULL);
    p->srcp[c] = &p->src[c];
    return COL_OK;
}

/* a diffusers folder: its config files, its tokenizer, its weight files */
static col_status open_folder(sd_pipeline *p, const char *tokenizer, col_err *err)
{
    const sd_model_files *f = &p->files;
    col_status st = dm_unet_load_config(f->config[SD_UNET], &p->unet, err);
    if (st == COL_OK) st = dm_vae_load_config(f->config[SD_VAE], &p->vae, err);
    if (st == COL_OK) st = dm_clip_text_load_config(f->config[SD_TEXT_ENCODER], &p->text, err);
    size_t len = 0;
    if (st == COL_OK) st = col_read_file(f->scheduler, 1 << 20, &p->sched_json, &len, err);
    if (st == COL_OK) st = sd_prompt_open(p, tokenizer ? tokenizer : f->tokenizer, NULL, err);
    for (int c = 0; c < SD_NCOMPONENTS && st == COL_OK; c++) st = open_weights(p, (sd_component)c, err);
    if (st == COL_OK) p->vae.legacy_attention = dm_vae_legacy_attention(p->ckpt[SD_VAE], "");
    return st;
}

/* a single-file checkpoint: the configs it implies, the bundled CLIP tokenizer, its tensors renamed */
static col_status open_single(sd_pipeline *p, const char *tokenizer, col_err *err)
{
    const char *path = p->files.single_file;
    col_status st = sd_single_file_open(path, SD_PREDICTION_AUTO, &p->sf, err);
    if (st != COL_OK) return st;
    for (int c = 0; c < SD_NCOMPONENTS; c++) {
        if (!sd_single_file_has(p->sf, (sd_component)c))
            return col_err_set(err, COL_EUNSUPPORTED, "%s holds no %s: a checkpoint without it is not supported yet",
                               path, sd_component_name((sd_component)c));
        p->srcp[c] = sd_single_file_source(p->sf, (sd_component)c);
    }
    const char *u = sd_single_file_config(p->sf, SD_UNET), *v = sd_single_file_config(p->sf, SD_VAE),
               *t = sd_single_file_config(p->sf, SD_TEXT_ENCODER);
    st = dm_unet_parse_config(u, strlen(u), "the checkpoint's UNet", &p->unet, err);
    if (st == COL_OK) st = dm_vae_parse_config(v, strlen(v), "the checkpoint's VAE", &p->vae, err);
    if (st == COL_OK) st = dm_clip_text_parse_config(t, strlen(t), "the checkpoint's text encoder", &p->text, err);
    if (st == COL_OK && !(p->sched_json = strdup(sd_single_file_scheduler_config(p->sf))))
        st = col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    p->files.inpainting = sd_single_file_inpainting(p->sf);
    snprintf(p->files.pipeline, sizeof p->files.pipeline, "%s", sd_single_file_pipeline(p->sf));
    if (st == COL_OK) st = sd_prompt_open(p, tokenizer, tokenizer ? NULL : sd_single_file_pad_token(p->sf), err);
    return st;
}

/* LoRA files merged into the components they adapt */
static col_status open_loras(sd_pipeline *p, const sd_open_config *cfg, col_err *err)
{
    if (cfg->nlora > (int)(sizeof p->lora / sizeof p->lora[0]))
        return col_err_set(err, COL_EINVAL, "at most %d LoRA files", (int)(sizeof p->lora / sizeof p->lora[0]));
    for (int i = 0; i < cfg->nlora; i++) {
        col_status st = sd_lora_open(cfg->lora[i], &p->lora[i], err);
        if (st != COL_OK) return strstr(err->msg, cfg->lora[i]) ? st : col_err_prefix(err, "LoRA %s", cfg->lora[i]);
        p->nlora++;
    }
    int used = 0;
    for (int c = 0; c < SD_NCOMPONENTS && p->nlora; c++) {
        int n = 0;
        for (int i = 0; i < p->nlora; i++) n += sd_lora_modules(p->lora[i], (sd_component)c);
        if (!n) continue;
        col_status st = sd_lora_source_create(p->srcp[c], (sd_component)c, p->lora, cfg->lora_weight, p->nlora,
                                              &p->lora_src[c], err);
        if (st != COL_OK) return st;
        p->srcp[c] = sd_lora_source_get(p->lora_src[c]);
        used += n;
    }
    if (p->nlora && !used)
        return col_err_set(err, COL_EFORMAT, "%s adapts neither the UNet nor the text encoder", cfg->lora[0]);
    return COL_OK;
}

col_status sd_pipeline_open(const sd_model_files *files, const col_backend *be, const sd_open_config *cfg,
                            sd_pipeline **out, col_err *err)
{
    *out = NULL;
    sd_pipeline *p = calloc(1, sizeof *p);
    if (!p) return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    p->files = *files;
    p->be = be;
    col_status st = files->single_file[0] ? open_single(p, cfg->tokenizer, err) : open_folder(p, cfg->tokenizer, err);
    if (st == COL_OK && p->files.inpainting && p->unet.in_channels != 2 * p->vae.latent_channels + 1)
        st = col_err_set(err, COL_EFORMAT, "an inpainting pipeline whose UNet takes %d channels, not %d",
                         p->unet.in_channels, 2 * p->vae.latent_channels + 1);
    if (st == COL_OK && !p->files.inpainting && p->unet.in_channels != p->vae.latent_channels)
        st = col_err_set(err, COL_EUNSUPPORTED, "the UNet takes %d channels and the VAE makes %d latent channels: "
                                                "a pipeline other than text-to-image or inpainting",
                         p->unet.in_channels, p->vae.latent_channels);
    if (st == COL_OK) st = sd_sched_open(p, err);
    if (st == COL_OK) st = open_loras(p, cfg, err);
    if (st == COL_OK) st = mb_store_create(&cfg->mem, be, &p->store, err);
    if (st != COL_OK) {
        sd_pipeline_free(p);
        return st;
    }
    *out = p;
    return COL_OK;
}

void sd_pipeline_free(sd_pipeline *p)
{
    if (!p) return;
    sd_graph_free(&p->g_text);
    sd_graph_free(&p->g_unet);
    for (int i = 0; i < 4; i++) sd_graph_free(&p->g_dec[i]);
    sd_graph_free(&p->g_enc);
    mb_store_free(p->store);
    for (int c = 0; c < SD_NCOMPONENTS; c++) {
        sd_lora_source_free(p->lora_src[c]);
        col_ckpt_close(p->ckpt[c]);
    }
    for (int i = 0; i < p->nlora; i++) sd_lora_close(p->lora[i]);
    sd_single_file_close(p->sf);
    sd_prompt_close(p);
    sd_sched_close(p);
    free(p->sched_json);
    free(p);
}

int sd_pipeline_native_size(const sd_pipeline *p)
{
    return p->unet.sample_size[0] * sd_pipeline_vae_scale(p);
}

mb_store *sd_pipeline_store(sd_pipeline *p) { return p->store; }

/* ---- generation ---- */

col_status sd_generate(sd_pipeline *p, const sd_gen_params *q, col_image *out, col_err *err)
{
    int s = sd_pipeline_vae_scale(p);
    if (q->width % s || q->height % s || q->width < s || q->height < s)
        return col_err_set(err, COL_EINVAL, "the image size must be a positive multiple of %d (got %dx%d)", s, q->width,
                           q->height);
    if (q->steps < 1 || q->batch < 1) return col_err_set(err, COL_EINVAL, "pipeline: steps and batch must be positive");
    if (q->mask && !p->files.inpainting)
        return col_err_set(err, COL_EUNSUPPORTED, "a mask needs an inpainting model");
    if (p->files.inpainting && (!q->init || !q->mask))
        return col_err_set(err, COL_EINVAL, "an inpainting model needs an image and a mask");
    if (q->init && (q->init->width != q->width || q->init->height != q->height || q->init->channels != 3))
        return col_err_set(err, COL_EINVAL, "the source image must be RGB of the output size");
    if (q->mask && (q->mask->width != q->width || q->mask->height != q->height || q->mask->channels != 1))
        return col_err_set(err, COL_EINVAL, "the mask must be one channel of the output size");

    sd_run r = {.p = p, .q = q, .B = q->batch, .h = q->height / s, .w = q->width / s, .C = p->vae.latent_channels};
    r.cfg = q->cfg > 1.0f;
    r.rng.philox = q->philox;
    r.rng.seed = q->seed;
    col_torch_gen_seed(&r.rng.torch, q->seed);
    col_status st = sd_run_prepare(&r, err);
    if (st == COL_OK) st = sd_run_denoise(&r, err);
    if (st == COL_OK && q->latents) memcpy(q->latents, r.latents, sizeof(float) * (size_t)r.B * r.C * r.h * r.w);
    /* decode one image at a time: the VAE's activations at full resolution are the largest of the run */
    size_t lat = (size_t)r.C * r.h * r.w, px = (size_t)q->width * q->height;
    float *z = st == COL_OK ? malloc(sizeof(float) * lat) : NULL, *img = z ? malloc(sizeof(float) * 3 * px) : NULL;
    if (st == COL_OK && !img) st = col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    for (int b = 0; st == COL_OK && b < q->batch; b++) {
        for (size_t i = 0; i < lat; i++) z[i] = r.latents[b * lat + i] / p->vae.scaling_factor;
        st = sd_vae_decode_image(p, z, r.h, r.w, img, err);
        if (st == COL_OK) st = sd_tensor_to_image(img, q->width, q->height, &out[b], err);
    }
    if (st != COL_OK)
        for (int b = 0; b < q->batch; b++) col_image_free(&out[b]);
    free(z);
    free(img);
    sd_run_free(&r);
    return st;
}
