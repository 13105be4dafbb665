/* sd_pipeline.h - Stable Diffusion text-to-image, image-to-image and
 * inpainting, as diffusers' StableDiffusion(Img2Img|Inpaint)Pipeline compute
 * them: the prompt and the negative prompt encoded by the CLIP text encoder,
 * starting latents from a seeded generator (torch's CPU generator by
 * default, so a diffusers run with the same seed starts from the same
 * noise), the UNet run on the unconditional and conditional halves of one
 * batch with classifier-free guidance, the scheduler's steps, and the VAE
 * decoding the latents into 8-bit RGB.
 *
 * Weights live in one mb_store (memtier chunks, optional compute tier).
 * Nothing here prints: progress goes to a callback.
 */
#ifndef COL_SD_PIPELINE_H
#define COL_SD_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "mb_store.h"
#include "image.h"
#include "sd_model.h"

typedef struct sd_pipeline sd_pipeline;

typedef struct {
    mb_store_config mem;             /* where the weights live (mb_store.h) */
    const char *tokenizer;           /* a tokenizer folder in place of the model's (NULL: the model's; a single
                                        file's is the CLIP tokenizer colossal carries) */
    /* LoRA files merged into the UNet's and the text encoder's weights as they are read (sd_lora.h), each with
     * its weight */
    const char *const *lora;
    const float *lora_weight;
    int nlora;
} sd_open_config;

/* Opens the model's configs, tokenizer and scheduler config (a diffusers
 * folder's files, or those a single-file checkpoint implies); weights are
 * read when a component is first needed. */
col_status sd_pipeline_open(const sd_model_files *files, const col_backend *be, const sd_open_config *cfg,
                            sd_pipeline **out, col_err *err);
void sd_pipeline_free(sd_pipeline *p);

/* The image size the model was trained for (the UNet's sample_size times the
 * VAE's downscaling, 8): 512 for SD 1.x, 768 for SD 2.x-v. */
int sd_pipeline_native_size(const sd_pipeline *p);
/* The scheduler scheduler_config.json names, as --scheduler spells it ("pndm"). */
const char *sd_pipeline_default_scheduler(const sd_pipeline *p);
mb_store *sd_pipeline_store(sd_pipeline *p);

typedef struct {
    const char *prompt, *negative;   /* negative: "" for none */
    int steps;
    float cfg;                       /* guidance scale; <= 1: no guidance (one UNet half) */
    uint64_t seed;
    bool philox;                     /* starting noise from colossal's Philox, not torch's generator */
    int width, height;               /* multiples of 8 */
    int batch;                       /* images per prompt */
    const char *scheduler;           /* NULL or "": the model's */
    const col_image *init;           /* img2img / inpainting: the source image (RGB, width x height) */
    float strength;                  /* with init: 0 < strength <= 1 */
    const col_image *mask;           /* inpainting: 1 channel, width x height, white = repaint */
    float *latents;                  /* not NULL: receives the final latents [batch, C, h, w] (before the VAE) */
    /* called before the first step (i = 0) and after each step (i = 1..n); a non-OK return stops the run */
    col_status (*progress)(void *user, int i, int n, col_err *err);
    void *user;
} sd_gen_params;

/* Generates params->batch images into out[0..batch) (RGB, width x height;
 * free each with col_image_free). */
col_status sd_generate(sd_pipeline *p, const sd_gen_params *params, col_image *out, col_err *err);

#endif
