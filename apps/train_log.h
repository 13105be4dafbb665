/* train_log.h - what a training run records in its output directory besides the model:
 *
 *   metrics.jsonl  one JSON object per step, appended and flushed as the step ends:
 *                  {"step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "mem_compute",
 *                   "mem_host", "mem_nvme"} (bytes as integers; a figure not known is left out), and one per
 *                  evaluation: {"step", "epoch", "eval_loss"}. A resumed run keeps the lines up to the step it
 *                  resumes from (an interrupted run's later steps are dropped, so no step appears twice) and
 *                  appends.
 *   runs/events.out.tfevents.*  with --tensorboard: the same scalars for TensorBoard (tb_events.h), a new file
 *                  per process; tags train/loss, train/learning_rate, train/grad_norm, train/tokens_per_s,
 *                  eval/loss.
 *   loss.png       the training and validation curves (loss_plot.h), written with each save.
 *
 * The history (every step's loss, lr, grad norm and evaluation) is kept in memory for the plot, transformers'
 * log_history and the --tui sparkline; after a resume it starts from metrics.jsonl. The files live in OUT beside
 * the saves (outdir.h moves them into each new save as files it did not write); OUT is made when it does not
 * exist yet. Nothing here follows a symbolic link. */
#ifndef COL_APPS_TRAIN_LOG_H
#define COL_APPS_TRAIN_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "status.h"
#include "tb_events.h"

/* one step as logged (tokens_per_s NaN: not known, left out; so is the epoch when epochs_per_step is NaN) */
typedef struct {
    int64_t step;
    double loss, lr, grad_norm, tokens_per_s, elapsed_s;
    uint64_t mem_compute, mem_host, mem_nvme; /* bytes per tier */
    bool no_mem;                              /* the bytes per tier are not known: left out */
} train_log_step;

/* a step of the history; eval_loss NaN where none was taken (loss NaN: an evaluation only) */
typedef struct {
    int64_t step;
    double loss, lr, grad_norm, eval_loss;
} train_log_point;

typedef struct {
    char out[4096];
    FILE *metrics;            /* OUT/metrics.jsonl, appending */
    tb_writer *tb;            /* --tensorboard: this process's event file, else NULL */
    train_log_point *pts;     /* by step, ascending */
    size_t n, cap;
    double epochs_per_step;   /* the data's share one step trains on (transformers' epoch = step x this) */
} train_log;

/* Opens the logs in out (made when absent). resume: metrics.jsonl is read into the history and kept up to
 * resume_step; else a metrics.jsonl and runs/events.out.tfevents.* of an earlier run in out are replaced.
 * tensorboard: a new event file in out/runs/ starting at step resume_step + 1. */
col_status train_log_open(train_log *l, const char *out, bool resume, int64_t resume_step, bool tensorboard,
                          double epochs_per_step, col_err *err);
/* Records a step (metrics.jsonl, the event file, the history) and flushes the files. */
col_status train_log_step_done(train_log *l, const train_log_step *s, col_err *err);
/* Records the validation loss at step. */
col_status train_log_eval(train_log *l, int64_t step, double eval_loss, col_err *err);
/* The history as transformers' TrainerState.log_history: per logging_steps steps an entry {"loss" (the mean over
 * those steps), "grad_norm", "learning_rate", "epoch", "step"}, and per evaluation {"eval_loss", "epoch",
 * "step"}. NULL when out of memory. */
cJSON *train_log_history(const train_log *l, int logging_steps);
/* What Trainer.train() logs as it ends, the last entry of log_history after a finished run, its keys in
 * transformers' (sorted) order: "epoch", "step", "total_flos" (flos_per_step x step), "train_loss" (the sum of
 * the losses of the steps after start_step over step, as transformers divides this process's sum by the global
 * step), "train_runtime" (runtime_s), "train_samples_per_second" and "train_steps_per_second" (the whole run's
 * steps, and samples_per_step times them, over this process's runtime, as transformers counts them). */
typedef struct {
    int64_t step, start_step;
    double runtime_s, samples_per_step, flos_per_step;
} train_log_end;
cJSON *train_log_summary(const train_log *l, const train_log_end *e);
/* Draws the history into path (a PNG, loss_plot.h). */
col_status train_log_plot(const train_log *l, const char *path, col_err *err);
/* Closes the files and frees the history. */
col_status train_log_close(train_log *l, col_err *err);

#endif
