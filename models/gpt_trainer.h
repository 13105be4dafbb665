/* gpt_trainer.h - one GPT training session: parameters, gradients and
 * optimizer states in memtier chunks, a planned forward+backward graph, the
 * optimizer step, and a forward-only graph for evaluation and sampling that
 * shares the same parameter memory. */
#ifndef COL_MODELS_GPT_TRAINER_H
#define COL_MODELS_GPT_TRAINER_H

#include "backend.h"
#include "gpt.h"
#include "optim.h"

typedef struct {
    col_gpt_config model;
    int batch, seq;
    col_opt_config opt;
    col_lr_sched lr;
    float grad_clip;      /* 0 = no clipping */
    bool checkpoint;      /* activation checkpointing per block */
    uint64_t seed;        /* initialisation and dropout */
    size_t host_budget;   /* memtier host budget in bytes, 0 = unlimited */
} col_gpt_train_config;

typedef struct col_gpt_trainer col_gpt_trainer;

typedef struct {
    float loss;
    double grad_norm;     /* before clipping */
    float lr;
    int64_t step;         /* steps done, counting this one */
} col_gpt_step_info;

col_status col_gpt_trainer_create(const col_gpt_train_config *cfg, const col_backend *be, col_gpt_trainer **out,
                                  col_err *err);
void col_gpt_trainer_free(col_gpt_trainer *t);

/* One optimizer step on a batch: ids and targets are [batch, seq] token ids
 * (targets -1 are ignored). */
col_status col_gpt_trainer_step(col_gpt_trainer *t, const int32_t *ids, const int32_t *targets,
                                col_gpt_step_info *info, col_err *err);
/* Mean loss of a batch without training. */
col_status col_gpt_trainer_eval(col_gpt_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                col_err *err);
/* Logits [vocab] of the last of n tokens (n <= seq); the sequence is
 * left-aligned in one row of the forward-only graph. */
col_status col_gpt_trainer_next_logits(col_gpt_trainer *t, const int32_t *tokens, int n, const float **logits,
                                       col_err *err);

int64_t col_gpt_trainer_param_count(const col_gpt_trainer *t);     /* elements */
size_t col_gpt_trainer_arena_bytes(const col_gpt_trainer *t);      /* training activation arena */
/* Parameter tensor i (spec order) and its data, for tests and export. */
float *col_gpt_trainer_param(col_gpt_trainer *t, int i, const col_param_spec **spec);
float *col_gpt_trainer_grad(col_gpt_trainer *t, int i);
/* Runs forward+backward only (no optimizer step), leaving gradients in place. */
col_status col_gpt_trainer_grads(col_gpt_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                 col_err *err);

#endif
