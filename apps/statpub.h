/* statpub.h - the statistics a program that runs a model in memtier publishes for colossal-top (mt_stats.h):
 * colossal-chat, colossal-serve, colossal-diffuse and colossal-fold, beside colossal-finetune's own.
 *
 *     app_stats *st = app_stats_start("colossal-chat", model_path);   (NULL: none, the program goes on)
 *     app_stats_update(st, pool, compute_tier, arena, &dev, host_budget, compute_budget);   when the memory changes
 *     app_stats_end(st);                                                at the end (removes the segment)
 *
 * A thread republishes the last figures every second, so colossal-top sees the process alive while it waits
 * (for a prompt, a request); it never touches the pool (a pool is not thread-safe): the figures are those of
 * the last app_stats_update, made on the caller's thread. */
#ifndef COL_APPS_STATPUB_H
#define COL_APPS_STATPUB_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "mt_resident.h"
#include "mt_stats.h"

/* The compute tier's figures in d: the device and its memory (on a GPU), and with a compute tier ct (NULL:
 * none) its peak, budget and the bytes it moved. */
void app_stats_compute(mt_stats_data *d, const app_device *dev, mt_resident *ct);

typedef struct app_stats app_stats;

/* Starts publishing for program; run names what runs (a model's path: its last component is shown). NULL when
 * the segment or the thread cannot be made: the statistics are a convenience, never a reason to stop. */
app_stats *app_stats_start(const char *program, const char *run);
/* The memory now: the pool's tiers, kinds and chunk map (pool NULL: none), the compute tier (app_stats_compute;
 * without one, arena bytes of activations in place), the host and compute budgets (0: none); published at once.
 * s NULL is ignored. */
void app_stats_update(app_stats *s, const mt_pool *pool, mt_resident *ct, size_t arena, const app_device *dev,
                      size_t host_budget, size_t compute_budget);
/* A training step done: step of total, its loss and seconds (the whole step's time, as compute); published at
 * once. s NULL is ignored. */
void app_stats_step(app_stats *s, int64_t step, int64_t total, double loss, double seconds);
/* Stops the thread and removes the segment. NULL is ignored. */
void app_stats_end(app_stats *s);

#endif
