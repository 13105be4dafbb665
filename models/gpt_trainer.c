#include "gpt_trainer.h"

#include <stdlib.h>
#include <string.h>

#include "memtier.h"
#include "plan.h"

struct col_gpt_trainer {
    col_gpt_train_config cfg;
    const col_backend *be;
    int np;
    col_param_spec *specs;
    mt_pool *pool;
    col_opt_tensor *ot;
    /* training graph */
    col_graph *g;
    col_plan *plan;
    col_gpt_graph gg;
    /* forward-only graph: eval batches and sampling */
    col_graph *fg;
    col_plan *fplan;
    col_gpt_graph fgg;
    int fbatch;
    int64_t step;
};

static col_status bind_params(col_gpt_trainer *t, col_gpt_graph *gg, bool grads, col_err *err)
{
    for (int i = 0; i < t->np; i++) {
        col_status st = col_bind(gg->params[i], t->ot[i].w, err);
        if (st == COL_OK && grads)
            st = col_bind_grad(gg->params[i], t->ot[i].g, err);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

static col_status build_train(col_gpt_trainer *t, col_err *err)
{
    t->g = col_graph_new();
    t->gg.params = calloc((size_t)t->np, sizeof(col_node *));
    if (!t->g || !t->gg.params)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    col_gpt_build_opts o = {.batch = t->cfg.batch, .seq = t->cfg.seq, .with_loss = true, .training = true,
                            .checkpoint = t->cfg.checkpoint, .dropout_seed = t->cfg.seed};
    col_status st = col_gpt_build(t->g, &t->cfg.model, &o, &t->gg, err);
    if (st == COL_OK)
        st = col_graph_backward(t->g, t->gg.loss, err);
    if (st == COL_OK)
        st = col_plan_create(t->g, &t->plan, err);
    if (st == COL_OK)
        st = bind_params(t, &t->gg, true, err);
    return st;
}

/* the forward-only graph, built on first use for a given batch size */
static col_status build_forward(col_gpt_trainer *t, int batch, col_err *err)
{
    if (t->fg && t->fbatch == batch)
        return COL_OK;
    col_plan_free(t->fplan);
    col_graph_free(t->fg);
    free(t->fgg.params);
    t->fplan = NULL;
    t->fg = col_graph_new();
    t->fgg.params = calloc((size_t)t->np, sizeof(col_node *));
    t->fbatch = batch;
    if (!t->fg || !t->fgg.params)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    col_gpt_build_opts o = {.batch = batch, .seq = t->cfg.seq, .with_loss = true, .training = false};
    col_status st = col_gpt_build(t->fg, &t->cfg.model, &o, &t->fgg, err);
    if (st == COL_OK) {
        col_mark_output(t->fgg.loss);
        col_mark_output(t->fgg.logits);
        st = col_plan_create(t->fg, &t->fplan, err);
    }
    if (st == COL_OK)
        st = bind_params(t, &t->fgg, false, err);
    return st;
}

col_status col_gpt_trainer_create(const col_gpt_train_config *cfg, const col_backend *be, col_gpt_trainer **out,
                                  col_err *err)
{
    *out = NULL;
    col_status st = col_gpt_check_config(&cfg->model, err);
    if (st != COL_OK)
        return st;
    if ((st = col_opt_validate(&cfg->opt, err)) != COL_OK || (st = col_lr_validate(&cfg->lr, err)) != COL_OK)
        return st;
    col_gpt_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    t->cfg = *cfg;
    t->be = be;
    t->np = col_gpt_param_count(&cfg->model);
    t->specs = calloc((size_t)t->np, sizeof *t->specs);
    t->ot = calloc((size_t)t->np, sizeof *t->ot);
    if (!t->specs || !t->ot) {
        col_gpt_trainer_free(t);
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    }
    col_gpt_param_specs(&cfg->model, t->specs);
    /* chunks of the default size, or one chunk per kind for a model smaller
     * than that (choosing chunk sizes to waste the least is memtier's job once
     * it moves chunks between tiers) */
    size_t total = 0;
    for (int i = 0; i < t->np; i++)
        total += (sizeof(float) * (size_t)(t->specs[i].shape[0] * (t->specs[i].ndim == 2 ? t->specs[i].shape[1] : 1)) + 63) &
                 ~(size_t)63;
    mt_config mc = {.chunk_bytes = total < MT_DEFAULT_CHUNK_BYTES ? total : 0, .host_budget = cfg->host_budget};
    st = mt_create(&mc, &t->pool, err);
    int slots = col_opt_state_slots(cfg->opt.kind, cfg->opt.momentum);
    /* parameters, then gradients, then states, each kind in first-use order */
    mt_ref *refs = calloc((size_t)t->np * 4, sizeof *refs);
    if (!refs && st == COL_OK)
        st = col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    mt_kind kinds[4] = {MT_PARAM, MT_GRAD, MT_OPTSTATE, MT_OPTSTATE};
    col_status first_fail = COL_OK;
    col_err fail_err = {0};
    for (int k = 0; k < 2 + slots && st == COL_OK; k++)
        for (int i = 0; i < t->np; i++) {
            const col_param_spec *s = &t->specs[i];
            int64_t n = s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1);
            /* keep planning after a budget failure so the message names the full need */
            col_status a = mt_alloc(t->pool, kinds[k], sizeof(float) * (size_t)n, &refs[k * t->np + i], &fail_err);
            if (a != COL_OK && a != COL_ENOMEM)
                st = col_err_set(err, a, "%s", fail_err.msg);
            else if (a == COL_ENOMEM)
                first_fail = a;
        }
    if (st == COL_OK && first_fail != COL_OK)
        st = col_err_set(err, first_fail, "%s", fail_err.msg);
    for (int i = 0; i < t->np && st == COL_OK; i++) {
        const col_param_spec *s = &t->specs[i];
        t->ot[i].n = s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1);
        t->ot[i].decay = s->decay;
        t->ot[i].w = mt_ptr(t->pool, refs[i]);
        t->ot[i].g = mt_ptr(t->pool, refs[t->np + i]);
        t->ot[i].m = slots > 0 ? mt_ptr(t->pool, refs[2 * t->np + i]) : NULL;
        t->ot[i].v = slots > 1 ? mt_ptr(t->pool, refs[3 * t->np + i]) : NULL;
        col_gpt_init_param(s, i, t->ot[i].w, cfg->seed, cfg->model.n_layer);
    }
    free(refs);
    if (st == COL_OK)
        st = build_train(t, err);
    if (st != COL_OK) {
        col_gpt_trainer_free(t);
        return st;
    }
    *out = t;
    return COL_OK;
}

void col_gpt_trainer_free(col_gpt_trainer *t)
{
    if (!t)
        return;
    col_plan_free(t->plan);
    col_graph_free(t->g);
    free(t->gg.params);
    col_plan_free(t->fplan);
    col_graph_free(t->fg);
    free(t->fgg.params);
    mt_destroy(t->pool);
    free(t->specs);
    free(t->ot);
    free(t);
}

static void load_batch(col_gpt_graph *gg, const int32_t *ids, const int32_t *targets, int64_t n)
{
    memcpy(col_data(gg->ids), ids, sizeof(int32_t) * (size_t)n);
    memcpy(col_data(gg->targets), targets, sizeof(int32_t) * (size_t)n);
}

col_status col_gpt_trainer_grads(col_gpt_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                 col_err *err)
{
    mt_zero(t->pool, MT_GRAD);
    col_graph_set_rng_counter(t->g, t->step + 1); /* fresh dropout masks each step */
    load_batch(&t->gg, ids, targets, (int64_t)t->cfg.batch * t->cfg.seq);
    col_status st = col_plan_run(t->plan, t->be, err);
    if (st == COL_OK && loss)
        *loss = *(const float *)col_data(t->gg.loss);
    return st;
}

col_status col_gpt_trainer_step(col_gpt_trainer *t, const int32_t *ids, const int32_t *targets,
                                col_gpt_step_info *info, col_err *err)
{
    float loss = 0;
    col_status st = col_gpt_trainer_grads(t, ids, targets, &loss, err);
    if (st != COL_OK)
        return st;
    double norm = 0;
    if (t->cfg.grad_clip <= 0) {
        norm = col_grad_global_norm(t->ot, t->np);
    } else {
        st = col_clip_grad_norm(t->ot, t->np, t->cfg.grad_clip, &norm, err);
        if (st != COL_OK)
            return col_err_set(err, st, "step %lld: gradient norm is %g (loss %g): training diverged; lower the learning rate",
                               (long long)t->step + 1, norm, loss);
    }
    float lr = col_lr_at(&t->cfg.lr, t->step);
    st = col_opt_step(&t->cfg.opt, lr, t->step + 1, t->ot, t->np, err);
    if (st != COL_OK)
        return st;
    t->step++;
    if (info) {
        info->loss = loss;
        info->grad_norm = norm;
        info->lr = lr;
        info->step = t->step;
    }
    return COL_OK;
}

col_status col_gpt_trainer_eval(col_gpt_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                col_err *err)
{
    col_status st = build_forward(t, t->cfg.batch, err);
    if (st != COL_OK)
        return st;
    load_batch(&t->fgg, ids, targets, (int64_t)t->cfg.batch * t->cfg.seq);
    st = col_plan_run(t->fplan, t->be, err);
    if (st == COL_OK)
        *loss = *(const float *)col_data(t->fgg.loss);
    return st;
}

col_status col_gpt_trainer_next_logits(col_gpt_trainer *t, const int32_t *tokens, int n, const float **logits,
                                       col_err *err)
{
    if (n < 1 || n > t->cfg.seq)
        return col_err_set(err, COL_EINVAL, "sampling: %d context tokens (1..%d)", n, t->cfg.seq);
    col_status st = build_forward(t, 1, err);
    if (st != COL_OK)
        return st;
    int32_t *ids = col_data(t->fgg.ids), *tg = col_data(t->fgg.targets);
    for (int i = 0; i < t->cfg.seq; i++) {
        ids[i] = i < n ? tokens[i] : 0; /* causal: padding after the context does not change it */
        tg[i] = -1;
    }
    tg[0] = 0; /* the loss needs one counted row; its value is not used */
    st = col_plan_run(t->fplan, t->be, err);
    if (st == COL_OK)
        *logits = (const float *)col_data(t->fgg.logits) + (size_t)(n - 1) * (size_t)t->cfg.model.vocab_size;
    return st;
}

int64_t col_gpt_trainer_param_count(const col_gpt_trainer *t)
{
    int64_t n = 0;
    for (int i = 0; i < t->np; i++)
        n += t->ot[i].n;
    return n;
}

size_t col_gpt_trainer_arena_bytes(const col_gpt_trainer *t) { return col_plan_arena_bytes(t->plan); }

float *col_gpt_trainer_param(col_gpt_trainer *t, int i, const col_param_spec **spec)
{
    if (i < 0 || i >= t->np)
        return NULL;
    if (spec)
        *spec = &t->specs[i];
    return t->ot[i].w;
}

float *col_gpt_trainer_grad(col_gpt_trainer *t, int i) { return (i >= 0 && i < t->np) ? t->ot[i].g : NULL; }
