/* sd_pipeline_internal.h - the pipeline's pieces shared by its files:
 * sd_pipeline.c (opening, the components' graphs, decoding), sd_denoise.c
 * (prompts, starting latents, the denoising loop) and sd_pipeline_parts.c
 * (the tokenizer and the scheduler behind small adapters). */
#ifndef COL_SD_PIPELINE_INTERNAL_H
#define COL_SD_PIPELINE_INTERNAL_H

#include "dm_clip_text.h"
#include "mb_store.h"
#include "dm_unet.h"
#include "dm_vae.h"
#include "rng_torch.h"
#include "scheduler.h"
#include "sd_lora.h"
#include "sd_single_file.h"
#include "tokenizer.h"
#include "sd_pipeline.h"

enum { SD_TOKENS = 77 };

/* one cached graph of a component, for one shape (batch, h, w) */
typedef struct {
    col_graph *g;
    mb_builder b;
    mb_exec *x;
    int batch, h, w;
    col_node *in[3], *out, *out2;
} sd_graph;


struct sd_pipeline {
    sd_model_files files;
    const col_backend *be;
    mb_store *store;
    dm_unet_config unet;
    dm_vae_config vae;
    dm_clip_text_config text;
    col_ckpt *ckpt[SD_NCOMPONENTS];           /* a diffusers folder's weight files */
    mb_source src[SD_NCOMPONENTS];
    mb_ckpt_source src_ctx[SD_NCOMPONENTS];
    sd_single_file *sf;                       /* or one single-file checkpoint */
    sd_lora *lora[8];                         /* LoRA files */
    int nlora;
    sd_lora_source *lora_src[SD_NCOMPONENTS]; /* a component's weights with the LoRAs merged in */
    const mb_source *srcp[SD_NCOMPONENTS];    /* where each component's weights come from */
    char *sched_json;                         /* the scheduler's config text */
    sd_graph g_text, g_unet, g_enc;
    sd_graph g_dec[4];                        /* decoder graphs: one per tile shape when decoding in tiles */
    col_tokenizer *tok;
    dm_sched_config sched_cfg;     /* scheduler_config.json as its own class reads it */
    bool has_sched_cfg;
    char default_sched[32];         /* that class as --scheduler names it; "" when colossal lacks it */
};

/* the generator: torch's CPU generator, or Philox (seed, offset) for the starting noise and the VAE's
 * samples; the stochastic schedulers' noise always comes from torch's generator (seeded with the seed) */
typedef struct {
    bool philox;
    uint64_t seed, offset;
    col_torch_gen torch;
} sd_rng;
void sd_randn(sd_rng *r, float *out, int64_t n);

/* one generation's state */
typedef struct {
    sd_pipeline *p;
    const sd_gen_params *q;
    int B, h, w, C;                 /* images, latent height and width, latent channels */
    bool cfg;                       /* classifier-free guidance: the UNet sees [uncond x B, cond x B] */
    sd_rng rng;
    struct dm_sched *sched;
    float *ctx;                     /* text embeddings per UNet row [(cfg ? 2B : B), 77, hidden] */
    float *latents;                 /* [B, C, h, w] */
    float *mask, *masked;           /* inpainting: [B, 1, h, w] and [B, C, h, w] */
} sd_run;

col_status sd_run_prepare(sd_run *r, col_err *err);
col_status sd_run_denoise(sd_run *r, col_err *err);
void sd_run_free(sd_run *r);

/* the components (sd_components.c) */
void sd_graph_free(sd_graph *g);
col_status sd_vae_decode(sd_pipeline *p, const float *z, int h, int w, float *img, col_err *err);
/* the whole image: in tiles, blended as diffusers' enable_tiling() does, when the latents are larger than the
 * VAE's tile (sample_size), else in one piece */
col_status sd_vae_decode_image(sd_pipeline *p, const float *z, int h, int w, float *img, col_err *err);
col_status sd_tensor_to_image(const float *x, int W, int H, col_image *out, col_err *err);
col_status sd_encode_text(sd_pipeline *p, const int32_t *ids, int n, float *out, col_err *err);
col_status sd_run_unet(sd_pipeline *p, const float *x, const float *t, const float *ctx, int B, int h, int w,
                       float *eps, col_err *err);
col_status sd_vae_encode(sd_pipeline *p, const float *img, int H, int W, float *mean, float *logvar, col_err *err);
void sd_image_to_tensor(const col_image *im, float *out);
void sd_gaussian_sample(const float *mean, const float *logvar, const float *noise, float *out, size_t n);
int sd_pipeline_vae_scale(const sd_pipeline *p);

/* the tokenizer (sd_pipeline_parts.c): 77 ids, BOS + text + EOS, truncated and padded as the model's tokenizer */
/* dir: a tokenizer folder, or NULL for the bundled CLIP tokenizer; pad: a pad token in place of the files' */
col_status sd_prompt_open(sd_pipeline *p, const char *dir, const char *pad, col_err *err);
void sd_prompt_close(sd_pipeline *p);
col_status sd_prompt_ids(sd_pipeline *p, const char *text, int32_t *ids, col_err *err);

/* the scheduler (sd_pipeline_parts.c): diffusers' scheduler of --scheduler's name (NULL or "": the model's),
 * set to steps and strength (1: text-to-image; below: image-to-image skips the first steps) */
col_status sd_sched_open(sd_pipeline *p, col_err *err);
void sd_sched_close(sd_pipeline *p);
col_status sd_sched_start(sd_pipeline *p, const char *name, int steps, float strength, struct dm_sched **out,
                          col_err *err);

#endif
