/* lm_session.c - the inference session of colossal-chat and colossal-serve (lm_session.h). */
#include "lm_session.h"

#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "lm_quant.h"

col_status app_lm_session(col_lm_source *src, const app_lm_opts *o, col_lm_trainer **out, col_lm_load_report *rep,
                          char *budget, size_t n, col_err *err)
{
    *out = NULL;
    budget[0] = '\0';
    const col_lm_config *mc = &src->config;
    /* for decoding only: batch 1 x 1 training graph, SGD without state */
    col_lm_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.model = *mc;
    tc.batch = 1;
    tc.seq = 1;
    tc.opt = col_opt_defaults(COL_OPT_SGD);
    tc.inference = true;
    tc.weights_follow = src->weights || src->gguf; /* (a preset starts from its random initialisation) */
    /* on a GPU without --gpu-mem: the compute tier's size from its free memory */
    if (app_device_default_budget(o->dev, &o->mem->gpu_mem, budget, n, err) != 0)
        return err->code ? err->code : COL_EINVAL;
    mem_opts_apply(o->mem, &tc);
    if (src->has_adapter) /* a LoRA run's output: the base weights plus the adapter beside them */
        tc.lora = src->lora;
    tc.weight_quant = o->quant != COL_F32 ? o->quant : col_lm_quant_detect(src->weights);
    col_dtype *each = NULL; /* a GGUF file's block tensors, held as they are (without --quant) */
    col_status st = COL_OK;
    if (src->gguf && o->quant == COL_F32) {
        if (!(each = calloc((size_t)col_lm_param_count(mc), sizeof *each)))
            return col_err_set(err, COL_ENOMEM, "out of memory");
        if ((st = col_lm_gguf_param_dtypes(src->gguf, mc, each, err)) != COL_OK) {
            free(each);
            return st;
        }
        tc.weight_quant_each = each;
    }
    col_lm_trainer *tr = NULL;
    unsigned flags = o->ignore_extra ? COL_LOAD_IGNORE_EXTRA : 0;
    if ((st = col_lm_trainer_create(&tc, &o->dev->be, &tr, err)) == COL_OK && src->weights)
        /* read in place from the file's mapping where it can be (the session then owns src->weights) */
        st = o->no_mmap ? col_lm_trainer_load_ex(tr, src->weights, flags, rep, err)
                        : col_lm_trainer_load_mapped(tr, &src->weights, flags, rep, err);
    if (st == COL_OK && src->gguf)
        st = o->no_mmap ? col_lm_trainer_load_gguf(tr, src->gguf, err)
                        : col_lm_trainer_load_gguf_mapped(tr, &src->gguf, rep, err);
    if (st == COL_OK && src->has_adapter)
        st = col_lm_trainer_load_adapter(tr, src->dir, err);
    free(each);
    if (st != COL_OK) {
        col_lm_trainer_free(tr);
        return st;
    }
    col_ckpt_close(src->weights); /* the weights are in the session now (NULL: it holds the file itself) */
    src->weights = NULL;
    col_gguf_close(src->gguf);
    src->gguf = NULL;
    *out = tr;
    return COL_OK;
}

app_stats *app_lm_stats(const char *program, const char *model, const col_lm_trainer *tr, const app_lm_opts *o)
{
    app_stats *s = app_stats_start(program, model);
    col_lm_memory m;
    col_lm_trainer_memory(tr, &m); /* without a compute tier: the activations and key/value cache in place */
    app_stats_update(s, col_lm_trainer_pool(tr), col_lm_trainer_compute_tier(tr), m.activations + m.kv_cache, o->dev,
                     o->mem->cpu_mem, o->mem->gpu_mem);
    return s;
}
