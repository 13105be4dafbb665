/* lm_trainer_graphs.c - what the session's graphs share: binding the weights, one activation arena,
 * the LoRA and dtype options, logits handed out, the key/value cache memory (lm_trainer_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "lm_trainer_internal.h"

/* binds every tensor (before planning, so the planner gives them no arena space) */
col_status lmt_bind_params(col_lm_trainer *t, col_lm_graph *gg, bool grads, col_err *err)
{
    for (int i = 0; i < t->nt; i++) {
        col_node *n = i < t->np ? gg->params[lmt_global(t, i)] : gg->lora[i - t->np];
        if (!n) /* an adapter in a graph built without them (lmt_forward_pass's base model) */
            continue;
        col_status st = col_bind(n, lmt_bind_addr(t, 0, i), err);
        if (st == COL_OK && grads && i >= t->train0)
            st = col_bind_grad(n, lmt_bind_addr(t, 1, i), err);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

/* The session's plans (training, evaluation, forward-only, decoding) never run at the same time: they hold
 * one activation arena between them, plan joining any other. When that made the arena grow, the compute
 * tiers go, to be made again on their next use with the larger arena reserved from the budget. */
col_status lmt_share_memory(col_lm_trainer *t, col_plan *plan, col_err *err)
{
    col_plan *all[] = {t->plan, t->eplan, t->fplan, t->bplan, t->dec[0].plan, t->dec[1].plan};
    col_plan *with = NULL;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && !with; i++)
        if (all[i] && all[i] != plan)
            with = all[i];
    if (!with)
        return COL_OK;
    size_t before = col_plan_memory_bytes(with);
    col_status st = col_plan_share_memory(plan, with, err);
    if (st == COL_OK && col_plan_memory_bytes(with) > before) {
        lmt_tier *tiers[] = {&t->tier, &t->etier, &t->ftier, &t->btier, &t->dec[0].tier, &t->dec[1].tier};
        for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
            lmt_tier_free(tiers[i]);
    }
    return st;
}

/* the graph arrays of a build: parameter and adapter leaves */
bool lmt_graph_arrays(col_lm_trainer *t, col_lm_graph *gg)
{
    gg->params = calloc((size_t)col_lm_param_count(&t->cfg.model), sizeof(col_node *)); /* a stage's too */
    gg->lora = calloc((size_t)(t->nt - t->np) + 1, sizeof(col_node *));
    return gg->params && gg->lora;
}

void lmt_graph_arrays_free(col_lm_graph *gg)
{
    free(gg->params);
    free(gg->lora);
    gg->params = gg->lora = NULL;
}

/* what every graph of the session shares: the LoRA adapters, the weights' dtype */
void lmt_lora_opts(const col_lm_trainer *t, col_lm_build_opts *o)
{
    o->lora_of = t->lora_of;
    o->lora_rank = t->cfg.lora.rank;
    o->lora_scale = t->lora_scale;
    o->dtype = t->dt;
    o->param_dtype = t->pdt; /* (quantized sessions hold the whole model: spec order) */
}

/* key/value cache memory: host memory, or the device's */
void lmt_kv_release(const col_lm_trainer *t, float *p)
{
    if (p && lmt_dev(t))
        lmt_dev(t)->free(t->be, p);
    else
        free(p);
}

/* a zeroed cache of n floats: calloc, or the device's alloc filled from a zeroed host block */
col_status lmt_kv_alloc(const col_lm_trainer *t, size_t n, float **out, col_err *err)
{
    const col_backend_mem *m = lmt_dev(t);
    *out = NULL;
    if (!m) {
        *out = calloc(n ? n : 1, sizeof(float));
        return *out ? COL_OK : col_err_set(err, COL_ENOMEM, "out of host memory");
    }
    void *p = NULL;
    col_status st = m->alloc(t->be, n * sizeof(float), &p, err);
    if (st != COL_OK)
        return st;
    size_t bytes = n * sizeof(float), blk = bytes < ((size_t)4 << 20) ? bytes : (size_t)4 << 20;
    void *zero = calloc(blk ? blk : 1, 1);
    if (!zero)
        st = col_err_set(err, COL_ENOMEM, "out of host memory");
    for (size_t off = 0; st == COL_OK && off < bytes; off += blk)
        st = m->to_device(t->be, (char *)p + off, zero, bytes - off < blk ? bytes - off : blk, err);
    free(zero);
    if (st != COL_OK) {
        m->free(t->be, p);
        return st;
    }
    *out = p;
    return COL_OK;
}

/* room for n floats of logits in host memory (a device session's copies) */
static col_status hlog_reserve(col_lm_trainer *t, size_t n, col_err *err)
{
    if (t->hlog_n >= n)
        return COL_OK;
    float *p = realloc(t->hlog, sizeof *p * n);
    if (!p)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory for %zu logits", n);
    t->hlog = p;
    t->hlog_n = n;
    return COL_OK;
}

/* rows [row, row + rows) of a [.., vocab] logits node: its memory on a host
 * plan, a host copy on a device plan (downloaded from the start through the
 * last row asked for) */
col_status lmt_get_logits(col_lm_trainer *t, col_plan *plan, col_node *lg, size_t row, size_t rows,
                             const float **out, col_err *err)
{
    size_t v = (size_t)col_lm_out_width(&t->cfg.model), n = (row + rows) * v;
    if (!lmt_dev(t)) {
        *out = (const float *)col_plan_data(plan, lg) + row * v;
        return COL_OK;
    }
    col_status st = hlog_reserve(t, n, err);
    if (st == COL_OK)
        st = col_plan_download(plan, lg, t->hlog, sizeof(float) * n, err);
    if (st == COL_OK)
        *out = t->hlog + row * v;
    return st;
}

