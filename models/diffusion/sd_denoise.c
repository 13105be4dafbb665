/* sd_denoise.c - prompts, starting latents and the denoising loop, in the
 * order diffusers' StableDiffusion(Img2Img|Inpaint)Pipeline draws its random
 * numbers, so one seed gives its latents. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sd_pipeline_internal.h"

void sd_run_free(sd_run *r)
{
    dm_sched_free(r->sched);
    free(r->ctx);
    free(r->latents);
    free(r->mask);
    free(r->masked);
    memset(r, 0, sizeof *r);
}

/* text embeddings for the UNet's rows: [uncond x B, cond x B] with guidance, else [cond x B] */
static col_status prompts(sd_run *r, col_err *err)
{
    sd_pipeline *p = r->p;
    int32_t ids[2 * SD_TOKENS];
    int n = r->cfg ? 2 : 1;
    col_status st = COL_OK;
    if (r->cfg) st = sd_prompt_ids(p, r->q->negative ? r->q->negative : "", ids, err);
    if (st == COL_OK) st = sd_prompt_ids(p, r->q->prompt, ids + (n - 1) * SD_TOKENS, err);
    if (st != COL_OK) return st;
    size_t row = (size_t)SD_TOKENS * p->text.hidden;
    float *emb = malloc(sizeof(float) * n * row);
    r->ctx = malloc(sizeof(float) * n * r->B * row);
    if (!emb || !r->ctx) {
        free(emb);
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory for the text embeddings");
    }
    /* one prompt at a time, as diffusers encodes the prompt and the negative prompt */
    for (int k = 0; k < n && st == COL_OK; k++) st = sd_encode_text(p, ids + k * SD_TOKENS, 1, emb + k * row, err);
    for (int k = 0; k < n && st == COL_OK; k++)
        for (int b = 0; b < r->B; b++) memcpy(r->ctx + (size_t)(k * r->B + b) * row, emb + k * row, sizeof(float) * row);
    free(emb);
    return st;
}

/* the VAE's latents of an image: a sample of its distribution (one draw of the generator) times the scaling factor */
static col_status encode_image(sd_run *r, const float *img, float *lat, col_err *err)
{
    sd_pipeline *p = r->p;
    size_t n = (size_t)r->C * r->h * r->w;
    float *mean = malloc(sizeof(float) * n * 3);
    if (!mean) return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    float *logvar = mean + n, *noise = mean + 2 * n;
    col_status st = sd_vae_encode(p, img, r->q->width, r->q->height, mean, logvar, err);
    if (st == COL_OK) {
        sd_randn(&r->rng, noise, (int64_t)n);
        sd_gaussian_sample(mean, logvar, noise, lat, n);
        for (size_t i = 0; i < n; i++) lat[i] *= p->vae.scaling_factor;
    }
    free(mean);
    return st;
}

col_status sd_run_prepare(sd_run *r, col_err *err)
{
    sd_pipeline *p = r->p;
    const sd_gen_params *q = r->q;
    col_status st = prompts(r, err);
    if (st == COL_OK) st = sd_sched_start(p, q->scheduler, q->steps, q->init ? q->strength : 1.0f, &r->sched, err);
    if (st != COL_OK) return st;
    size_t n = (size_t)r->C * r->h * r->w, px = (size_t)q->width * q->height;
    bool inpaint = p->files.inpainting;
    r->latents = malloc(sizeof(float) * n * r->B);
    float *noise = malloc(sizeof(float) * n * r->B), *image_lat = malloc(sizeof(float) * n);
    float *img = q->init ? malloc(sizeof(float) * 3 * px) : NULL;
    if (!r->latents || !noise || !image_lat || (q->init && !img)) {
        st = col_err_set(err, COL_ENOMEM, "pipeline: out of memory for the latents");
        goto out;
    }
    bool strength_max = !q->init || q->strength >= 1.0f;
    if (q->init) sd_image_to_tensor(q->init, img);
    /* draw 1: the source image's latents (img2img always; inpainting only below full strength) */
    if (q->init && (!inpaint || !strength_max) && (st = encode_image(r, img, image_lat, err)) != COL_OK) goto out;
    /* draw 2: the noise */
    sd_randn(&r->rng, noise, (int64_t)(n * r->B));
    if (q->init && !(inpaint && strength_max)) {
        for (int b = 0; b < r->B && st == COL_OK; b++)
            st = dm_sched_add_noise_start(r->sched, image_lat, noise + b * n, r->latents + b * n, (int64_t)n, err);
        if (st != COL_OK) goto out;
    } else {
        float sigma = dm_sched_init_noise_sigma(r->sched);
        for (size_t i = 0; i < n * r->B; i++) r->latents[i] = noise[i] * sigma;
    }
    if (inpaint) {
        /* the mask binarised at 0.5 and taken at every s-th pixel (nearest), the masked image's latents (draw 3) */
        int s = sd_pipeline_vae_scale(p);
        size_t m = (size_t)r->h * r->w;
        r->mask = malloc(sizeof(float) * m * r->B);
        r->masked = malloc(sizeof(float) * n * r->B);
        if (!r->mask || !r->masked) {
            st = col_err_set(err, COL_ENOMEM, "pipeline: out of memory for the mask");
            goto out;
        }
        for (int y = 0; y < r->h; y++)
            for (int x = 0; x < r->w; x++) {
                float v = (float)q->mask->data[(size_t)(y * s) * q->width + (size_t)x * s] / 255.0f;
                r->mask[(size_t)y * r->w + x] = v < 0.5f ? 0.0f : 1.0f;
            }
        for (size_t i = 0; i < px; i++) {
            bool keep = (float)q->mask->data[i] / 255.0f < 0.5f;
            for (int c = 0; c < 3; c++) img[c * px + i] = keep ? img[c * px + i] : 0.0f;
        }
        if ((st = encode_image(r, img, r->masked, err)) != COL_OK) goto out;
        for (int b = 1; b < r->B; b++) {
            memcpy(r->mask + b * m, r->mask, sizeof(float) * m);
            memcpy(r->masked + b * n, r->masked, sizeof(float) * n);
        }
    }
out:
    free(noise);
    free(image_lat);
    free(img);
    return st;
}

col_status sd_run_denoise(sd_run *r, col_err *err)
{
    sd_pipeline *p = r->p;
    const sd_gen_params *q = r->q;
    int rows = r->cfg ? 2 * r->B : r->B, cin = p->unet.in_channels;
    size_t n = (size_t)r->C * r->h * r->w, m = (size_t)r->h * r->w;
    float *x = malloc(sizeof(float) * (size_t)rows * cin * m), *eps = malloc(sizeof(float) * (size_t)rows * n);
    float *t = malloc(sizeof(float) * (size_t)rows), *scaled = malloc(sizeof(float) * n * r->B);
    col_status st = x && eps && t && scaled ? COL_OK : col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    int total = dm_sched_num_steps(r->sched);
    if (st == COL_OK && q->progress) st = q->progress(q->user, 0, total, err);
    for (int i = 0; st == COL_OK && i < total; i++) {
        dm_sched_scale_model_input(r->sched, r->latents, scaled, (int64_t)(n * r->B));
        /* rows: [uncond x B, cond x B] (or [cond x B]); inpainting appends mask and masked-image channels */
        for (int row = 0; row < rows; row++) {
            int b = row % r->B;
            float *dst = x + (size_t)row * cin * m;
            memcpy(dst, scaled + b * n, sizeof(float) * n);
            if (r->mask) {
                memcpy(dst + n, r->mask + b * m, sizeof(float) * m);
                memcpy(dst + n + m, r->masked + b * n, sizeof(float) * n);
            }
            t[row] = (float)dm_sched_timestep(r->sched, i);
        }
        st = sd_run_unet(p, x, t, r->ctx, rows, r->h, r->w, eps, err);
        if (st != COL_OK) break;
        if (r->cfg) /* uncond + g (cond - uncond), in float as diffusers */
            for (size_t k = 0; k < n * r->B; k++) eps[k] = eps[k] + q->cfg * (eps[n * r->B + k] - eps[k]);
        st = dm_sched_step(r->sched, eps, r->latents, r->latents, (int64_t)(n * r->B), &r->rng.torch, err);
        if (st == COL_OK && q->progress) st = q->progress(q->user, i + 1, total, err);
    }
    free(x);
    free(eps);
    free(t);
    free(scaled);
    return st;
}
