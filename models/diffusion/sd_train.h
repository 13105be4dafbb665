/* sd_train.h - fine-tuning a Stable Diffusion UNet, as diffusers' examples do.
 *
 * The recipe of train_text_to_image.py / train_dreambooth.py (and their
 * _lora variants), with the text encoder and the VAE frozen (Colossal-AI's
 * DreamBooth example trains the same way). Each micro-batch of B images:
 *
 *   latents = vae.encode(pixels).latent_dist.sample(gen) * scaling_factor
 *   noise   = randn(latents.shape, gen)
 *   t       = randint(0, num_train_timesteps, (B,), gen)
 *   noisy   = DDPMScheduler.add_noise(latents, noise, t)   (scheduler_config.json's betas)
 *   target  = noise (epsilon) or get_velocity(latents, noise, t) (v_prediction)
 *   pred    = unet(noisy, t, text_encoder(ids)[0])
 *   loss    = mse(pred, target)                       or, with prior preservation,
 *             mse(instance rows) + prior_weight * mse(class rows)
 *
 * gen is one torch CPU generator (rng_torch.h) seeded with the run's seed and
 * drawn in exactly that order, so a script that does the same with
 * torch.Generator().manual_seed(seed) computes the same step
 * (tools/refgen/make_sd_train_fixtures.py is such a script). Gradients,
 * clipping, AdamW and the learning rate are dm_trainer's.
 *
 * Full training makes every UNet weight trainable; LoRA (lora_rank > 0)
 * freezes them and trains PEFT-style adapters on the attention projections
 * to_q, to_k, to_v and to_out.0 (LoraConfig(r, lora_alpha, init_lora_weights=
 * "gaussian", target_modules=[...]) as train_text_to_image_lora.py sets it):
 * lora_A starts normal with std 1/r (drawn from a torch generator seeded
 * with seed + 1), lora_B at zero.
 *
 * The UNet trains in a dm_trainer (memtier chunks, optional compute tier);
 * the text encoder and the VAE's encoder run from a mb_store in the same
 * host budget. Nothing here prints.
 */
#ifndef COL_SD_TRAIN_H
#define COL_SD_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "dm_trainer.h"
#include "rng_torch.h"
#include "sd_model.h"

typedef struct {
    dm_train_config train;   /* AdamW, clipping, accumulation (micro-batches per step), budgets */
    int batch;               /* rows of one micro-batch, class rows included */
    int n_class;             /* prior preservation: the last n_class rows of each micro-batch are class images */
    float prior_weight;      /* their loss's weight (train_dreambooth.py's prior_loss_weight) */
    int resolution;          /* image height = width in pixels, a multiple of the VAE's downscale */
    int lora_rank;           /* 0: train the whole UNet */
    float lora_alpha;        /* 0: the rank (scale 1, what diffusers' scripts use) */
    uint64_t seed;           /* the generator of latent samples, noise and timesteps (and adapters: seed + 1) */
    const char *unet_weights;/* NULL: the model's UNet; else this file's weights (a resumed full run) */
    const char *lora_weights;/* LoRA: NULL for fresh adapters, else a file to start from (diffusers' or
                                PEFT's names, as sd_train_save_lora writes; a resumed LoRA run) */
} sd_train_config;

/* diffusers' defaults: dm_train_defaults, batch 1, resolution 512, seed 0, prior weight 1. */
sd_train_config sd_train_defaults(void);

typedef struct sd_trainer sd_trainer;

/* Opens the model's UNet, text encoder, VAE and scheduler config and builds
 * the training graph for cfg's batch and resolution. Messages name the
 * file or setting at fault. */
col_status sd_train_open(const sd_model_files *files, const col_backend *be, const sd_train_config *cfg,
                         sd_trainer **out, col_err *err);
void sd_train_free(sd_trainer *s);

/* Token ids per prompt (the text encoder's max_position_embeddings, 77). */
int sd_train_text_len(const sd_trainer *s);
/* The prediction type trained for (from scheduler_config.json): "epsilon" or "v_prediction". */
const char *sd_train_prediction(const sd_trainer *s);

/* One micro-batch: pixels [batch, 3, R, R] in [-1, 1] (torchvision's
 * ToTensor + Normalize([0.5], [0.5])), ids [batch, text_len] (padded with
 * the tokenizer's pad id, as CLIPTokenizer(padding="max_length") gives):
 * the draws, forward and backward, gradients added. *loss may be NULL. */
col_status sd_train_micro(sd_trainer *s, const float *pixels, const int32_t *ids, float *loss, col_err *err);
/* The optimizer step after cfg.train.grad_accum micro-batches (dm_trainer_step). */
col_status sd_train_apply(sd_trainer *s, dm_step_info *info, col_err *err);

/* What the last micro-batch computed, for tests: [batch, 4, R/f, R/f] latents
 * (times the scaling factor), noise, noisy latents and target, the timesteps,
 * and the text encoder's [batch, text_len, hidden] states. */
typedef struct {
    const float *latents, *noise, *noisy, *target, *ehs;
    const int64_t *timesteps;
    int64_t latent_numel, ehs_numel;
} sd_train_trace;
void sd_train_last(const sd_trainer *s, sd_train_trace *tr);

dm_trainer *sd_train_session(sd_trainer *s);
/* The generator the draws come from (its state is a plain struct: save and
 * restore it to resume a run bitwise). */
col_torch_gen *sd_train_generator(sd_trainer *s);

/* The trained UNet as diffusers' unet/diffusion_pytorch_model.safetensors
 * (every weight, f32), or the adapters as diffusers' pytorch_lora_weights.safetensors
 * (StableDiffusionPipeline.save_lora_weights' names: unet.MODULE.lora.down.weight /
 * lora.up.weight; loadable by pipe.load_lora_weights). */
col_status sd_train_save_unet(const sd_trainer *s, const char *path, col_err *err);
col_status sd_train_save_lora(const sd_trainer *s, const char *path, col_err *err);

#endif
