/* dm_trainer.h - training the parameters of one diffusion component graph.
 *
 * The caller builds a component's forward pass on a mb_builder (trainable
 * weights are col_param leaves, frozen ones col_input: mb_builder.h, LoRA
 * adapters through mb_linear) and a scalar loss on the same graph; the
 * trainer then owns where the weights live and how a step runs:
 *
 *   - every weight in a memtier pool (kind MT_PARAM), each trainable one
 *     with a gradient (MT_GRAD) and AdamW's two moments (MT_OPTSTATE), all
 *     f32, within the pool's host budget;
 *   - the loss's backward pass appended (col_graph_backward) and one plan of
 *     forward + backward, run in place or through a memtier compute tier
 *     (mt_resident.h: bitwise the plain run, required on a GPU);
 *   - a step as diffusers' training scripts take one (train_text_to_image.py,
 *     train_dreambooth.py, their LoRA variants, with accelerate): gradients
 *     summed over the micro-batches of gradient accumulation and divided by
 *     their count, clipped to max_grad_norm (torch.nn.utils.clip_grad_norm_),
 *     torch.optim.AdamW on every trained tensor (weight decay on all of them,
 *     biases and norms included, as AdamW(unet.parameters()) does), with the
 *     learning rate of diffusers' "constant" / "constant_with_warmup"
 *     schedules (dm_train_lr).
 *
 * Weights come from a mb_source by name; names the source does not hold
 * (new LoRA adapters) from an init callback. Nothing here prints.
 */
#ifndef COL_DM_TRAINER_H
#define COL_DM_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "mb_builder.h"
#include "mb_source.h"
#include "memtier.h"

typedef struct {
    float lr;             /* the learning rate after warmup */
    float beta1, beta2;   /* AdamW's moment decay rates */
    float eps;            /* AdamW's denominator term */
    float weight_decay;   /* decoupled, on every trained tensor */
    int64_t warmup_steps; /* 0: diffusers' "constant"; W > 0: "constant_with_warmup" over W steps */
    float max_grad_norm;  /* clip the global gradient norm to this; 0 = no clipping */
    int grad_accum;       /* micro-batches per optimizer step (0 or 1: one) */
    size_t host_budget;   /* the pool's host bytes (weights, gradients, moments); 0 = unlimited */
    size_t compute_budget;/* > 0: the training plan runs through a compute tier of this many bytes */
    size_t chunk_bytes;   /* memtier chunk size; 0 = automatic */
} dm_train_config;

/* The defaults of diffusers' train_text_to_image.py / train_dreambooth.py:
 * lr 1e-4 (their --learning_rate is 1e-4 and 5e-6; LoRA scripts 1e-4),
 * torch.optim.AdamW's betas (0.9, 0.999), eps 1e-8, weight decay 1e-2,
 * no warmup, max_grad_norm 1, one micro-batch per step. */
dm_train_config dm_train_defaults(void);

/* The learning rate of 0-based optimizer step s: diffusers' get_scheduler
 * ("constant_with_warmup": lr * s / W while s < W, then lr; W = 0:
 * "constant"). The first step of a warmup has lr 0, as there. */
float dm_train_lr(const dm_train_config *c, int64_t s);

/* Fills dst (the parameter's numel floats) with a parameter the source does
 * not hold (a new LoRA adapter). */
typedef col_status (*dm_init_fn)(void *user, const mb_param *p, float *dst, col_err *err);

typedef struct dm_trainer dm_trainer;

/* A session over b's parameters and loss (a scalar f32 node of b's graph
 * depending on them). src (may be NULL) gives the weights by name, init
 * (may be NULL) those src does not have; a parameter neither gives is
 * COL_EFORMAT naming it. b and its graph stay the caller's and must outlive
 * the trainer; the trainer binds every parameter, appends the backward pass
 * and plans the graph for be (a backend with a memory table needs a compute
 * budget). Inputs (col_input leaves that are not parameters) are filled
 * before each run with dm_trainer_upload. COL_ENOMEM with the host budget
 * marked when the pool cannot hold the weights, gradients and moments. */
col_status dm_trainer_create(const dm_train_config *cfg, const col_backend *be, mb_builder *b, col_node *loss,
                             const mb_source *src, dm_init_fn init, void *init_user, dm_trainer **out, col_err *err);
void dm_trainer_free(dm_trainer *t);

/* Host data into an input leaf of the graph (bytes: its size). */
col_status dm_trainer_upload(dm_trainer *t, col_node *input, const void *src, size_t bytes, col_err *err);

/* One micro-batch: forward and backward with the inputs as uploaded, the
 * gradients added into the step's (the first micro-batch of a step clears
 * them first); *loss (may be NULL) receives the loss. */
col_status dm_trainer_backward(dm_trainer *t, float *loss, col_err *err);

typedef struct {
    int64_t step;      /* optimizer steps done, this one included */
    float lr;          /* the learning rate it used */
    double grad_norm;  /* the global norm of the averaged gradients, before clipping */
} dm_step_info;

/* The optimizer step after the micro-batches run since the last one
 * (dm_trainer_backward; at least one): gradients divided by their count,
 * clipped, AdamW at dm_train_lr(cfg, steps done). A non-finite gradient
 * norm with clipping on fails (COL_EINVAL, weights untouched). info may be
 * NULL. */
col_status dm_trainer_step(dm_trainer *t, dm_step_info *info, col_err *err);

/* Optimizer steps done (dm_trainer_set_steps: a resumed run's). */
int64_t dm_trainer_steps(const dm_trainer *t);
void dm_trainer_set_steps(dm_trainer *t, int64_t steps);

/* The parameters, in the builder's order: index i is b->params[i]. */
int dm_trainer_count(const dm_trainer *t);
const mb_param *dm_trainer_param(const dm_trainer *t, int i);
/* Host memory of parameter i's weights, gradient and moments (slot 0: exp_avg,
 * 1: exp_avg_sq); NULL for a frozen parameter's gradient and moments. The
 * gradient is the step's sum so far until dm_trainer_step averages it. */
float *dm_trainer_weights(const dm_trainer *t, int i);
float *dm_trainer_grad(const dm_trainer *t, int i);
float *dm_trainer_moment(const dm_trainer *t, int i, int slot);
int64_t dm_trainer_numel(const dm_trainer *t, int i);
/* Elements of all parameters, and of the trained ones. */
int64_t dm_trainer_total(const dm_trainer *t);
int64_t dm_trainer_trained(const dm_trainer *t);
mt_pool *dm_trainer_pool(dm_trainer *t);

/* Writes tensors of the session to a safetensors file (atomically, f32):
 * for each parameter, name(user, p, out, n) says whether it goes in and
 * under which name (NULL name: every trainable parameter under its own).
 * metadata as col_st_write_f32's. */
typedef bool (*dm_name_fn)(void *user, const mb_param *p, char *out, size_t n);
col_status dm_trainer_save(const dm_trainer *t, const char *path, dm_name_fn name, void *user,
                           const char *const *metadata, col_err *err);
/* The optimizer state: each trained tensor's moments as NAME.exp_avg and
 * NAME.exp_avg_sq, and the step count in the metadata ("step"). Loading
 * checks every name and shape and sets the step count; a file of another
 * run (a tensor missing, another shape) is COL_EFORMAT naming it. */
col_status dm_trainer_save_optimizer(const dm_trainer *t, const char *path, col_err *err);
col_status dm_trainer_load_optimizer(dm_trainer *t, const char *path, col_err *err);

#endif
