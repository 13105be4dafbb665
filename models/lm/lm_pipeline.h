/* lm_pipeline.h - pipeline parallelism for the language-model trainer (issue 14).
 *
 * The model's layers are cut into S = P * v consecutive stages (the first ones
 * get one layer more when S does not divide n_layer); virtual stage j lives on
 * rank j % P of the pipeline communicator, so each process holds v stage
 * sessions (col_lm_trainer of a layer range: cfg.layer_lo/hi) with only their
 * parameters and optimizer states. A step's rows are cut into M micro-batches
 * that flow through the stages: hidden states [rows, seq, hidden] forward,
 * their gradients backward, point to point on the pipeline communicator.
 *
 * Schedules: 1F1B (v = 1: P - rank - 1 warm-up forwards, then one forward and
 * one backward in turn, then the remaining backwards; at most P micro-batches
 * in flight on a process) and interleaved 1F1B (v > 1, M divisible by P: the
 * micro-batches go through the process's stages in groups of P, Megatron's
 * order).
 *
 * Memory: each stage session plans its training graph (forward + backward)
 * and a forward-only plan of the same graph sharing its activation arena. A
 * forward runs the forward-only plan (a last stage runs nothing then); the
 * process keeps only each in-flight micro-batch's stage input (token rows or
 * the hidden states received), and its backward runs the training plan from
 * that input again: a stage's forward is computed twice (recomputation), in
 * exchange for one arena per stage whatever the number of micro-batches in
 * flight. Dropout masks come from the run counter (step * M + k + 1 for
 * micro-batch k, as a single process's session with M accumulated
 * micro-batches uses) and the stage graph's stream offsets (those of the whole
 * model's graph), so the recomputed forward sees the masks of the first one
 * and both are the single process's.
 *
 * Loss weights: micro-batch k's loss is weighted by its counted targets
 * (target != -1) over the step's (summed over the data parallel group too),
 * so the gradients add up to those of the mean loss over all of the step's
 * rows, as one process training on those rows gets; the reported loss is that
 * mean, on every process. Gradient clipping uses the norm over the whole
 * model (every stage, the tied embedding once). With tied embeddings the
 * first and the last stage both hold the embedding: their gradients are
 * summed between them before the optimizer, so both copies stay identical.
 *
 * Data parallelism over pipelines: world rank r = d * P + p; the pipeline
 * communicator is the processes with the same d (col_comm_split(world, d, p)),
 * train.dp those with the same p (col_comm_split(world, p, d)); each pipeline
 * gets its own rows. With data parallelism every stage's gradients are
 * reduced first; the norm is then summed from each process's spans of them
 * (over the dp group, then the pipeline) and each process clips its spans by
 * it inside the step.
 *
 * Tensor and sequence parallelism inside the stages (train.par, lm_par.h): each stage session holds this rank's
 * blocks of its tensors and computes its rows and positions; the hidden states sent are this rank's block of them
 * ([rows, seq / sp, hidden_local]); the pipeline communicator joins the processes of the same model-parallel
 * position (colossal-finetune: world rank r = (d * P + p) * M + q, M = tp x sp; the pipeline (d, q), the
 * model-parallel group (d, p)), so the tied embedding's gradients are summed between equal blocks, and the norm
 * counts each block once (lmt_par_weight) summed over the model-parallel group. Saving gathers the blocks whole over
 * the tp group; the pipelines of tp and sp rank 0 send and write.
 *
 * Not supported in a stage session: LoRA, mixed precision, a compute tier, the
 * NVMe tier, evaluation and decoding (a pipelined run's evaluation is not
 * done yet). */
#ifndef COL_MODELS_LM_PIPELINE_H
#define COL_MODELS_LM_PIPELINE_H

#include "lm_trainer.h"

struct col_comm;

/* ---- schedules: a pure function ---- */
typedef struct {
    char kind;  /* 'F' forward or 'B' backward */
    int stage;  /* virtual stage 0 .. P*v-1 (on rank stage % P) */
    int mb;     /* micro-batch 0 .. M-1 */
} col_pp_op;

/* The layout's checks: P >= 1, v >= 1, M >= 1, M % P == 0 when v > 1, and P * v stages at most n_layer
 * (n_layer <= 0: not checked). One line naming what is wrong. */
col_status col_pp_check(int n_layer, int P, int v, int M, col_err *err);
/* Rank `rank`'s operations of one step, in order, into ops (room for 2 * v * M): each of its virtual stages
 * runs F then B once per micro-batch. *n = 2 * v * M. */
col_status col_pp_schedule(int rank, int P, int v, int M, col_pp_op *ops, int *n, col_err *err);
/* The layers [*lo, *hi) of virtual stage j of S. */
void col_pp_stage_layers(int n_layer, int S, int j, int *lo, int *hi);

/* ---- the pipeline ---- */
typedef struct {
    /* the model and training settings as for one process; batch: this pipeline's rows per step (all M
     * micro-batches); dp: the data parallel group (the processes holding the same stages) or NULL; layer_lo,
     * layer_hi and grad_accum must be 0 */
    col_lm_train_config train;
    struct col_comm *pipe; /* the pipeline group: P = its size, this process's pipeline rank = its rank */
    int micro_batches;     /* M >= 1, dividing train.batch */
    int virtual_stages;    /* v (0 = 1); v > 1: interleaved 1F1B, M % P == 0 */
} col_lm_pipeline_config;

typedef struct col_lm_pipeline col_lm_pipeline;

/* Collective over the pipeline (and dp) group. Bad layouts are COL_EINVAL with one line. */
col_status col_lm_pipeline_create(const col_lm_pipeline_config *cfg, const col_backend *be, col_lm_pipeline **out,
                                   col_err *err);
void col_lm_pipeline_free(col_lm_pipeline *p);
/* One training step on this pipeline's rows ids/targets [train.batch, seq] (every process of the pipeline
 * passes the same rows; only the first stage reads ids and only the last targets). Collective. info (may be
 * NULL) as col_lm_trainer_step's: the loss is the mean over the step's counted targets of every pipeline of
 * the dp group, on every process; grad_norm the whole model's. */
col_status col_lm_pipeline_step(col_lm_pipeline *p, const int32_t *ids, const int32_t *targets,
                                 col_lm_step_info *info, col_err *err);
/* The stage sessions of this process: v of them, local stage s being virtual stage rank + s * P with the
 * layers [*layer_lo, *layer_hi). Read a session's tensors with col_lm_trainer_n_params / _param /
 * _weights and name them with col_lm_trainer_global_index (tied embeddings: index 0 is held by the first
 * and the last stage, identical). */
int col_lm_pipeline_n_stages(const col_lm_pipeline *p);
col_lm_trainer *col_lm_pipeline_stage(col_lm_pipeline *p, int s, int *virtual_stage, int *layer_lo, int *layer_hi);

/* The layout: the pipeline communicator, its size P and this process's rank in it, the S virtual stages, and
 * d, this process's pipeline (its rank in the data parallel group; 0 without one). */
void col_lm_pipeline_layout(const col_lm_pipeline *p, struct col_comm **pipe, int *P, int *rank, int *S, int *d);

/* ---- saving and resuming (lm_pipeline_ckpt.c) ----
 * Collective over every process of the run. Writes dir/config.json, dir/model.safetensors and (optimizer)
 * dir/optimizer.safetensors as one process of the same model would (the tensors in spec order, the same names,
 * shapes and metadata): world process 0 (the first pipeline's rank 0) writes, the other stages send it their
 * tensors one at a time, a data parallel group first gathering its spans of a state. A failure on process 0
 * (a full disk) leaves the others finishing normally: agree on the outcome afterwards. */
col_status col_lm_pipeline_save(col_lm_pipeline *p, const char *dir, bool optimizer, col_err *err);
/* Every stage session takes its tensors from weights (a whole model's checkpoint, by name) and, with optimizer,
 * its states and step count from dir/optimizer.safetensors. Collective over the data parallel groups. */
struct col_ckpt;
col_status col_lm_pipeline_load(col_lm_pipeline *p, const char *dir, const struct col_ckpt *weights, bool optimizer,
                                col_err *err);

#endif
