/* lm_session.h - the inference session colossal-chat and colossal-serve run a model in: the memory options
 * and the device's compute budget, a LoRA adapter beside the weights, quantized weights (--quant, a file
 * colossal-quantize wrote, a GGUF file's block tensors held as they are), the weights loaded (read in place
 * from the file's mapping where they can be: col_lm_trainer_load_mapped); the source's weights are closed once
 * they are in the session, or handed to it. */
#ifndef COL_APPS_LM_SESSION_H
#define COL_APPS_LM_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#include "device.h"
#include "lm_source.h"
#include "lm_trainer.h"
#include "memopts.h"
#include "statpub.h"

typedef struct {
    mem_opts *mem;       /* the memory options (a GPU's default compute budget is written into it) */
    app_device *dev;
    col_dtype quant;     /* --quant; COL_F32: what the model holds */
    bool ignore_extra;   /* --ignore-extra-tensors */
    bool no_mmap;        /* --no-mmap: weights copied, never read in place from the file's mapping */
} app_lm_opts;

/* Creates and loads the session. budget (n bytes) receives the line saying how the GPU's budget was chosen
 * ("" when none was). rep: the load's warnings (app_load_warnings). On failure err says why and *out is
 * NULL. */
col_status app_lm_session(col_lm_source *src, const app_lm_opts *o, col_lm_trainer **out, col_lm_load_report *rep,
                          char *budget, size_t n, col_err *err);

/* Publishes the session's statistics for colossal-top (statpub.h) as program running model; end them with
 * app_stats_end. NULL when they cannot be published (the program goes on). */
app_stats *app_lm_stats(const char *program, const char *model, const col_lm_trainer *tr, const app_lm_opts *o);

#endif
