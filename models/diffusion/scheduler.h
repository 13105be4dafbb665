/* scheduler.h - diffusers' noise schedulers over float32 arrays.
 *
 * The samplers of Stable Diffusion as diffusers 0.42 computes them, step for
 * step: the same float32 operations in the same order (torch's), the tables
 * built as diffusers builds them (torch float32 and numpy float64 where it
 * uses them), so that a whole run matches diffusers to float rounding. The
 * noise of the stochastic samplers (euler-a, lcm, ddpm, ddim with eta > 0)
 * comes from a col_torch_gen, torch's CPU generator: with the generator that
 * drew the initial latents, a run is reproducible from one seed as in
 * diffusers (pipe(..., generator=torch.Generator().manual_seed(seed))).
 *
 * Use, as a diffusers pipeline does:
 *
 *   dm_sched_config c;  dm_sched_config_load("scheduler/scheduler_config.json", DM_SCHED_AUTO, &c, &err);
 *   dm_sched *s;        dm_sched_create(&c, &s, &err);
 *   dm_sched_set_timesteps(s, steps, 1.0, &err);            // strength < 1: img2img
 *   latents = randn(seed) * dm_sched_init_noise_sigma(s);    // txt2img
 *   for (i = 0; i < dm_sched_num_steps(s); i++) {
 *       t = dm_sched_timestep(s, i);
 *       dm_sched_scale_model_input(s, latents, x, n);         // what the UNet gets
 *       eps = unet(x, t);                                     // (classifier-free guidance here)
 *       dm_sched_step(s, eps, latents, latents, n, gen, &err);
 *   }
 *
 * A scheduler is not thread-safe; two may run side by side.
 */
#ifndef COL_DM_SCHEDULER_H
#define COL_DM_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "rng_torch.h"
#include "status.h"

typedef enum {
    DM_SCHED_AUTO = -1,      /* dm_sched_config_load: the kind named by "_class_name" */
    DM_SCHED_DDIM = 0,       /* DDIMScheduler */
    DM_SCHED_PNDM,           /* PNDMScheduler (PRK + PLMS, or PLMS alone with skip_prk_steps) */
    DM_SCHED_EULER,          /* EulerDiscreteScheduler */
    DM_SCHED_EULER_A,        /* EulerAncestralDiscreteScheduler */
    DM_SCHED_DPMPP_2M,       /* DPMSolverMultistepScheduler, dpmsolver++ (order 2 by default) */
    DM_SCHED_DPMPP_2M_KARRAS,/* the same with use_karras_sigmas */
    DM_SCHED_LCM,            /* LCMScheduler */
    DM_SCHED_DDPM,           /* DDPMScheduler */
    DM_SCHED_COUNT
} dm_sched_kind;

typedef enum { DM_BETA_LINEAR, DM_BETA_SCALED_LINEAR, DM_BETA_SQUAREDCOS_CAP_V2 } dm_beta_schedule;
typedef enum { DM_PRED_EPSILON, DM_PRED_V, DM_PRED_SAMPLE } dm_pred_type;
typedef enum { DM_SPACING_LEADING, DM_SPACING_TRAILING, DM_SPACING_LINSPACE } dm_spacing;
typedef enum { DM_FINAL_SIGMA_ZERO, DM_FINAL_SIGMA_MIN } dm_final_sigma;
typedef enum { DM_VAR_FIXED_SMALL, DM_VAR_FIXED_SMALL_LOG, DM_VAR_FIXED_LARGE } dm_variance_type;

/* The fields of scheduler_config.json the supported schedulers read, each
 * with diffusers' default for the kind when the file leaves it out. */
typedef struct {
    dm_sched_kind kind;
    int num_train_timesteps;        /* 1000 */
    double beta_start, beta_end;    /* 0.0001, 0.02 (LCM: 0.00085, 0.012) */
    dm_beta_schedule beta_schedule; /* linear (LCM: scaled_linear) */
    float *trained_betas;           /* owned (dm_sched_config_free); NULL: from the schedule */
    dm_pred_type prediction_type;   /* epsilon */
    dm_spacing timestep_spacing;    /* leading (euler, euler-a, dpm++: linspace) */
    int steps_offset;               /* 0 */
    bool rescale_betas_zero_snr;    /* false */
    /* ddim, pndm, lcm */
    bool set_alpha_to_one;          /* ddim, lcm: true; pndm: false */
    /* ddim, lcm, ddpm */
    bool clip_sample;               /* ddim, ddpm: true; lcm: false */
    double clip_sample_range;       /* 1.0 */
    /* pndm */
    bool skip_prk_steps;            /* false */
    /* euler, dpm++ */
    bool use_karras_sigmas;         /* false (dpm++2m-karras: true) */
    dm_final_sigma final_sigmas_type; /* zero */
    /* euler */
    bool has_sigma_min, has_sigma_max; /* "sigma_min"/"sigma_max" given (karras bounds) */
    double sigma_min, sigma_max;
    bool continuous_timesteps;      /* timestep_type "continuous": with v_prediction, t = 0.25 log sigma */
    /* dpm++ */
    int solver_order;               /* 2 (1..3) */
    bool solver_heun;               /* solver_type "heun" (default "midpoint") */
    bool lower_order_final;         /* true */
    bool euler_at_final;            /* false */
    double lambda_min_clipped;      /* -inf */
    /* lcm */
    int original_inference_steps;   /* 50 */
    double timestep_scaling;        /* 10.0 */
    /* ddpm */
    dm_variance_type variance_type; /* fixed_small */
    /* not in the file: the pipeline's eta argument for DDIM (0 = deterministic) */
    double eta;
} dm_sched_config;

/* The kind's defaults (kind in [0, DM_SCHED_COUNT)). */
void dm_sched_config_default(dm_sched_kind kind, dm_sched_config *c);
/* Reads a diffusers scheduler_config.json (text or file). kind DM_SCHED_AUTO
 * takes the kind from "_class_name" (DPMSolverMultistepScheduler with
 * use_karras_sigmas true is dpm++2m-karras); another kind reads the file as
 * diffusers' Kind.from_config(config) does: the keys that kind knows, its
 * defaults for the others (dpm++2m / dpm++2m-karras then fix
 * use_karras_sigmas). Unknown keys are ignored. A value of the wrong type, out
 * of range or naming something unknown, a class this module does not have
 * and a setting it does not implement (thresholding, learned variances,
 * exponential or beta sigmas, ...) are errors (COL_EFORMAT, COL_EUNSUPPORTED)
 * naming the key. */
col_status dm_sched_config_parse(const char *json, dm_sched_kind kind, dm_sched_config *c, col_err *err);
col_status dm_sched_config_load(const char *path, dm_sched_kind kind, dm_sched_config *c, col_err *err);
void dm_sched_config_free(dm_sched_config *c);
/* "ddim", "pndm", "euler", "euler-a", "dpm++2m", "dpm++2m-karras", "lcm", "ddpm" and back
 * (DM_SCHED_AUTO for "auto"; -2 for an unknown name). */
const char *dm_sched_kind_name(dm_sched_kind k);
dm_sched_kind dm_sched_kind_from_name(const char *name);

typedef struct dm_sched dm_sched;

/* A scheduler of kind c->kind (the config is copied). */
col_status dm_sched_create(const dm_sched_config *c, dm_sched **out, col_err *err);
void dm_sched_free(dm_sched *s);

/* set_timesteps(steps) and starts a run. strength in (0, 1]: 1 is
 * text-to-image; below, image-to-image as diffusers' img2img pipelines do
 * it: the first steps - int(steps * strength) steps are skipped (for lcm,
 * strength goes to LCMScheduler.set_timesteps as its img2img pipeline does),
 * and dm_sched_add_noise_start noises the image to the first remaining step. */
col_status dm_sched_set_timesteps(dm_sched *s, int steps, double strength, col_err *err);
/* Steps of the loop (after strength; pndm's PRK steps included). */
int dm_sched_num_steps(const dm_sched *s);
/* The timestep the model gets at loop step i (an integer for all but the
 * euler kinds, whose float32 timesteps may be fractional). */
double dm_sched_timestep(const dm_sched *s, int i);
/* The scale of the initial noise (sigma_max for the euler kinds, else 1). */
float dm_sched_init_noise_sigma(const dm_sched *s);
/* The sigmas of the run (euler, euler-a, dpm++: num_steps + 1 values before
 * strength is applied, the last the final sigma), or NULL for the others. */
const float *dm_sched_sigmas(const dm_sched *s, int *count);
/* The train-time tables: betas and alphas_cumprod (num_train_timesteps each). */
const float *dm_sched_alphas_cumprod(const dm_sched *s);
const float *dm_sched_betas(const dm_sched *s);

/* The model's input at the current step (euler kinds: x / sqrt(sigma^2 + 1);
 * else a copy). in and out may be the same array. */
void dm_sched_scale_model_input(const dm_sched *s, const float *in, float *out, int64_t n);
/* One step: sample (the latents before) and model_output (the prediction
 * after guidance) give prev (the latents after; may be sample). The
 * stochastic kinds draw their noise from gen (required for euler-a, lcm,
 * ddpm, and ddim with eta > 0; unused otherwise). n must stay the same
 * during a run. COL_ESTATE past the last step or before set_timesteps. */
col_status dm_sched_step(dm_sched *s, const float *model_output, const float *sample, float *prev, int64_t n,
                         col_torch_gen *gen, col_err *err);

/* img2img: out = the clean latents orig noised to the first step of the run
 * (scheduler.add_noise(orig, noise, timesteps[:1])). */
col_status dm_sched_add_noise_start(const dm_sched *s, const float *orig, const float *noise, float *out, int64_t n,
                                    col_err *err);
/* Training (DDPMScheduler.add_noise / get_velocity; also ddim, pndm, lcm):
 * batch items of per values each, item b at train timestep t[b]:
 * add_noise = sqrt(acp[t]) * orig + sqrt(1 - acp[t]) * noise,
 * velocity = sqrt(acp[t]) * noise - sqrt(1 - acp[t]) * sample. The euler and
 * dpm++ kinds compute these from their run's sigmas: COL_EUNSUPPORTED. */
col_status dm_sched_add_noise(const dm_sched *s, const float *orig, const float *noise, const int64_t *t, int batch,
                              int64_t per, float *out, col_err *err);
col_status dm_sched_get_velocity(const dm_sched *s, const float *sample, const float *noise, const int64_t *t,
                                 int batch, int64_t per, float *out, col_err *err);

#endif
