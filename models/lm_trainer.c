/* lm_trainer.c - the training session: memory, graphs, steps, decoding. */
#include "lm_trainer.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "memtier.h"
#include "mt_resident.h"
#include "mt_stage.h"
#include "plan.h"

struct col_lm_trainer {
    col_lm_train_config cfg;
    const col_backend *be;
    int np;             /* base parameters */
    int nt;             /* tensors: base parameters, then 2 per LoRA adapter */
    int train0;         /* first trained tensor: 0, or np with LoRA (the base is frozen) */
    int *lora_of;       /* per base parameter: adapter index or -1 (NULL without LoRA) */
    float lora_scale;
    col_param_spec *specs;
    mt_pool *pool;
    col_opt_tensor *ot;
    mt_ref *sref;       /* optimizer state tensors: slot 0 at [i], slot 1 at [nt + i] */
    int slots;
    bool states_nvme;   /* the states live on the NVMe tier */
    mt_stage *stage;    /* host buffers the optimizer streams them through */
    /* training graph */
    col_graph *g;
    col_plan *plan;
    mt_resident *res;   /* the compute tier of the training graph (compute_budget > 0) */
    col_lm_graph gg;
    /* forward-only graph: eval batches and sampling */
    col_graph *fg;
    col_plan *fplan;
    col_lm_graph fgg;
    int fbatch;
    int64_t step;
    /* decoding: one graph for the prompt, one for single tokens */
    struct dec_graph {
        col_graph *g;
        col_plan *plan;
        col_lm_graph lg;
        int seq;
    } dec[2];
    float *kv;          /* 2 * n_layer caches of [1, n_kv_head, kv_len, head_dim] */
    int kv_len;
    int64_t kv_pos;
};

/* binds every tensor (before planning, so the planner gives them no arena space) */
static col_status bind_params(col_lm_trainer *t, col_lm_graph *gg, bool grads, col_err *err)
{
    for (int i = 0; i < t->nt; i++) {
        col_node *n = i < t->np ? gg->params[i] : gg->lora[i - t->np];
        col_status st = col_bind(n, t->ot[i].w, err);
        if (st == COL_OK && grads && i >= t->train0)
            st = col_bind_grad(n, t->ot[i].g, err);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

/* the graph arrays of a build: parameter and adapter leaves */
static bool graph_arrays(col_lm_trainer *t, col_lm_graph *gg)
{
    gg->params = calloc((size_t)t->np, sizeof(col_node *));
    gg->lora = calloc((size_t)(t->nt - t->np) + 1, sizeof(col_node *));
    return gg->params && gg->lora;
}

static void graph_arrays_free(col_lm_graph *gg)
{
    free(gg->params);
    free(gg->lora);
    gg->params = gg->lora = NULL;
}

static void lora_opts(const col_lm_trainer *t, col_lm_build_opts *o)
{
    o->lora_of = t->lora_of;
    o->lora_rank = t->cfg.lora.rank;
    o->lora_scale = t->lora_scale;
}

static col_status build_train(col_lm_trainer *t, col_err *err)
{
    t->g = col_graph_new();
    if (!t->g || !graph_arrays(t, &t->gg))
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    col_lm_build_opts o = {.batch = t->cfg.batch, .seq = t->cfg.seq, .with_loss = true, .training = true,
                            .checkpoint = t->cfg.checkpoint, .dropout_seed = t->cfg.seed};
    lora_opts(t, &o);
    col_status st = col_lm_build(t->g, &t->cfg.model, &o, &t->gg, err);
    if (st == COL_OK)
        st = col_graph_backward(t->g, t->gg.loss, err);
    if (st == COL_OK)
        st = bind_params(t, &t->gg, true, err);
    if (st == COL_OK)
        st = col_plan_create(t->g, &t->plan, err);
    return st;
}

/* the forward-only graph, built on first use for a given batch size */
static col_status build_forward(col_lm_trainer *t, int batch, col_err *err)
{
    if (t->fg && t->fbatch == batch)
        return COL_OK;
    col_plan_free(t->fplan);
    col_graph_free(t->fg);
    graph_arrays_free(&t->fgg);
    t->fplan = NULL;
    t->fg = col_graph_new();
    t->fbatch = batch;
    if (!t->fg || !graph_arrays(t, &t->fgg))
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    col_lm_build_opts o = {.batch = batch, .seq = t->cfg.seq, .with_loss = true, .training = false};
    lora_opts(t, &o);
    col_status st = col_lm_build(t->fg, &t->cfg.model, &o, &t->fgg, err);
    if (st == COL_OK) {
        col_mark_output(t->fgg.loss);
        col_mark_output(t->fgg.logits);
        st = bind_params(t, &t->fgg, false, err);
    }
    if (st == COL_OK)
        st = col_plan_create(t->fg, &t->fplan, err);
    if (st != COL_OK) { /* rebuilt on the next call */
        col_plan_free(t->fplan);
        col_graph_free(t->fg);
        graph_arrays_free(&t->fgg);
        t->fplan = NULL;
        t->fg = NULL;
    }
    return st;
}

col_status col_lm_trainer_create(const col_lm_train_config *cfg, const col_backend *be, col_lm_trainer **out,
                                  col_err *err)
{
    *out = NULL;
    col_status st = col_lm_check_config(&cfg->model, err);
    if (st != COL_OK)
        return st;
    if ((st = col_opt_validate(&cfg->opt, err)) != COL_OK || (st = col_lr_validate(&cfg->lr, err)) != COL_OK)
        return st;
    if (cfg->grad_accum < 0 || cfg->grad_accum > 65536)
        return col_err_set(err, COL_EINVAL, "gradient accumulation of %d micro-batches (1..65536)", cfg->grad_accum);
    col_lm_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    t->cfg = *cfg;
    t->be = be;
    t->np = col_lm_param_count(&cfg->model);
    col_param_spec *base = calloc((size_t)t->np, sizeof *base);
    int *lora_of = calloc((size_t)t->np, sizeof *lora_of);
    int na = 0;
    if (!base || !lora_of) {
        free(base), free(lora_of);
        col_lm_trainer_free(t);
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    }
    col_lm_param_specs(&cfg->model, base);
    st = col_lora_plan(&cfg->model, &cfg->lora, base, t->np, lora_of, &na, err);
    if (st != COL_OK) {
        free(base), free(lora_of);
        col_lm_trainer_free(t);
        return st;
    }
    t->nt = t->np + 2 * na;
    t->train0 = na ? t->np : 0;
    t->lora_scale = col_lora_scale(&cfg->lora);
    t->specs = calloc((size_t)t->nt, sizeof *t->specs);
    t->ot = calloc((size_t)t->nt, sizeof *t->ot);
    if (na)
        t->lora_of = lora_of;
    else
        free(lora_of);
    if (!t->specs || !t->ot) {
        free(base);
        col_lm_trainer_free(t);
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    }
    memcpy(t->specs, base, sizeof *base * (size_t)t->np);
    free(base);
    for (int i = 0; i < t->np; i++)
        if (na && t->lora_of[i] >= 0) {
            int j = t->np + 2 * t->lora_of[i];
            col_lora_specs(&cfg->model, &t->specs[i], cfg->lora.rank, &t->specs[j], &t->specs[j + 1]);
        }
    /* chunks of the default size, or one chunk per kind for a model smaller
     * than that (choosing chunk sizes to waste the least is memtier's job once
     * it moves chunks between tiers) */
    size_t total = 0;
    for (int i = 0; i < t->nt; i++)
        total += (sizeof(float) * (size_t)col_param_numel(&t->specs[i]) + 63) & ~(size_t)63;
    mt_config mc = {.chunk_bytes = cfg->chunk_bytes         ? cfg->chunk_bytes
                                   : total < MT_DEFAULT_CHUNK_BYTES ? total
                                                                    : 0,
                    .host_budget = cfg->host_budget, .nvme_dir = cfg->nvme_dir, .nvme_max = cfg->nvme_max,
                    .nvme_kinds = cfg->nvme_dir && !cfg->inference ? 1u << MT_OPTSTATE : 0,
                    .nvme_faults = cfg->nvme_faults};
    st = mt_create(&mc, &t->pool, err);
    int slots = col_opt_state_slots(cfg->opt.kind, cfg->opt.momentum);
    /* parameters, then gradients, then states, each kind in first-use order;
     * frozen tensors (the base under LoRA) get no gradient and no state */
    mt_ref *refs = calloc((size_t)t->nt * 4, sizeof *refs);
    if (!refs && st == COL_OK)
        st = col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    mt_kind kinds[4] = {MT_PARAM, MT_GRAD, MT_OPTSTATE, MT_OPTSTATE};
    col_status first_fail = COL_OK;
    col_err fail_err = {0};
    int nkinds = cfg->inference ? 1 : 2 + slots;
    for (int k = 0; k < nkinds && st == COL_OK; k++)
        for (int i = k ? t->train0 : 0; i < t->nt; i++) {
            const col_param_spec *s = &t->specs[i];
            int64_t n = col_param_numel(s);
            /* keep planning after a budget failure so the message names the full need */
            col_status a = mt_alloc(t->pool, kinds[k], sizeof(float) * (size_t)n, &refs[k * t->nt + i], &fail_err);
            if (a != COL_OK && a != COL_ENOMEM)
                st = col_err_set(err, a, "%s", fail_err.msg);
            else if (a == COL_ENOMEM)
                first_fail = a;
        }
    if (st == COL_OK && first_fail != COL_OK)
        st = col_err_set(err, first_fail, "%s", fail_err.msg);
    for (int i = 0; i < t->nt && st == COL_OK; i++) {
        const col_param_spec *s = &t->specs[i];
        bool trained = !cfg->inference && i >= t->train0;
        t->ot[i].n = col_param_numel(s);
        t->ot[i].decay = s->decay || cfg->decay_all;
        t->ot[i].w = mt_ptr(t->pool, refs[i]);
        t->ot[i].g = trained ? mt_ptr(t->pool, refs[t->nt + i]) : NULL;
        t->ot[i].m = trained && slots > 0 ? mt_ptr(t->pool, refs[2 * t->nt + i]) : NULL;
        t->ot[i].v = trained && slots > 1 ? mt_ptr(t->pool, refs[3 * t->nt + i]) : NULL;
        if (i < t->np)
            col_lm_init_param(&cfg->model, s, i, t->ot[i].w, cfg->seed);
        else
            col_lora_init(s, (i - t->np) % 2 == 0, i, t->ot[i].w, cfg->seed);
    }
    t->slots = slots;
    t->sref = calloc((size_t)(2 * t->nt) + 1, sizeof *t->sref);
    if (!t->sref && st == COL_OK)
        st = col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    for (int i = 0; i < 2 * t->nt && st == COL_OK && !cfg->inference; i++)
        t->sref[i] = i < t->nt ? (slots > 0 ? refs[2 * t->nt + i] : (mt_ref){.chunk = -1})
                               : (slots > 1 ? refs[2 * t->nt + i] : (mt_ref){.chunk = -1});
    t->states_nvme = cfg->nvme_dir && !cfg->inference && slots > 0;
    if (st == COL_OK && t->states_nvme)
        st = mt_stage_create(t->pool, 6, &t->stage, err);
    free(refs);
    if (st == COL_OK && !cfg->inference)
        st = build_train(t, err);
    if (st == COL_OK && !cfg->inference && cfg->compute_budget > 0) {
        st = mt_resident_create(t->pool, t->plan, cfg->compute_budget, &t->res, err);
        if (st != COL_OK)
            col_err_set(err, st, "%s (--gpu-mem)", err->msg);
    }
    if (st != COL_OK) {
        col_lm_trainer_free(t);
        return st;
    }
    *out = t;
    return COL_OK;
}

static void dec_free(struct dec_graph *d)
{
    col_plan_free(d->plan);
    col_graph_free(d->g);
    graph_arrays_free(&d->lg);
    free(d->lg.cache);
    memset(d, 0, sizeof *d);
}

void col_lm_trainer_free(col_lm_trainer *t)
{
    if (!t)
        return;
    dec_free(&t->dec[0]);
    dec_free(&t->dec[1]);
    free(t->kv);
    mt_resident_free(t->res);
    mt_stage_free(t->stage);
    free(t->sref);
    col_plan_free(t->plan);
    col_graph_free(t->g);
    graph_arrays_free(&t->gg);
    col_plan_free(t->fplan);
    col_graph_free(t->fg);
    graph_arrays_free(&t->fgg);
    mt_destroy(t->pool);
    free(t->lora_of);
    free(t->specs);
    free(t->ot);
    free(t);
}

static void load_batch(col_lm_graph *gg, const int32_t *ids, const int32_t *targets, int64_t n)
{
    memcpy(col_data(gg->ids), ids, sizeof(int32_t) * (size_t)n);
    memcpy(col_data(gg->targets), targets, sizeof(int32_t) * (size_t)n);
}

static int accum(const col_lm_trainer *t) { return t->cfg.grad_accum > 1 ? t->cfg.grad_accum : 1; }

/* forward+backward of micro-batch k of the step, adding into the gradients */
static col_status micro_batch(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, int k, float *loss,
                              col_err *err)
{
    if (!t->plan)
        return col_err_set(err, COL_ESTATE, "this session was created for inference: it cannot train");
    int64_t n = (int64_t)t->cfg.batch * t->cfg.seq;
    col_graph_set_rng_counter(t->g, (uint64_t)(t->step * accum(t) + k + 1)); /* fresh dropout masks each pass */
    load_batch(&t->gg, ids + k * n, targets + k * n, n);
    col_status st = t->res ? mt_resident_run(t->res, t->be, (long)(t->step * accum(t) + k), err)
                           : col_plan_run(t->plan, t->be, err);
    if (st == COL_OK && loss)
        *loss = *(const float *)col_data(t->gg.loss);
    return st;
}

col_status col_lm_trainer_grads(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                 col_err *err)
{
    mt_zero(t->pool, MT_GRAD);
    return micro_batch(t, ids, targets, 0, loss, err);
}

/* The optimizer step with the states on NVMe: tensor by tensor, its state
 * chunks read into the stage's buffers (written back when they make room)
 * and updated there; each element's arithmetic is that of the one-call step. */
static col_status streamed_step(col_lm_trainer *t, float lr, col_err *err)
{
    col_status st = COL_OK;
    for (int i = t->train0; i < t->nt && st == COL_OK; i++) {
        col_opt_tensor o = t->ot[i];
        void *m = NULL, *v = NULL;
        st = mt_stage_get(t->stage, t->sref[i], true, &m, err);
        if (st == COL_OK && t->slots > 1)
            st = mt_stage_get(t->stage, t->sref[t->nt + i], true, &v, err);
        o.m = m;
        o.v = v;
        /* read the next chunk of each state (and write back older ones) while this tensor is updated */
        for (int k = 0; k < t->slots && st == COL_OK; k++) {
            int j = i + 1;
            while (j < t->nt && t->sref[k * t->nt + j].chunk == t->sref[k * t->nt + i].chunk)
                j++;
            if (j < t->nt)
                st = mt_stage_prefetch(t->stage, t->sref[k * t->nt + j], 2, err);
        }
        if (st == COL_OK)
            st = col_opt_step(&t->cfg.opt, lr, t->step + 1, &o, 1, err);
    }
    if (st == COL_OK)
        st = mt_stage_flush(t->stage, err);
    return st;
}

col_status col_lm_trainer_states_begin(col_lm_trainer *t, col_err *err)
{
    if (!t->states_nvme)
        return COL_OK;
    mt_stage *all = NULL;
    col_status st = mt_stage_create(t->pool, mt_chunk_count(t->pool), &all, err);
    for (int i = t->train0; i < t->nt && st == COL_OK; i++) {
        void *p = NULL;
        st = mt_stage_get(all, t->sref[i], true, &p, err);
        t->ot[i].m = p;
        if (st == COL_OK && t->slots > 1) {
            st = mt_stage_get(all, t->sref[t->nt + i], true, &p, err);
            t->ot[i].v = p;
        }
    }
    mt_stage_free(t->stage); /* the step's buffers hold nothing dirty between steps */
    t->stage = all;
    return st;
}

col_status col_lm_trainer_states_end(col_lm_trainer *t, bool write_back, col_err *err)
{
    if (!t->states_nvme)
        return COL_OK;
    col_status st = write_back ? mt_stage_flush(t->stage, err) : COL_OK;
    for (int i = t->train0; i < t->nt; i++)
        t->ot[i].m = t->ot[i].v = NULL;
    mt_stage_free(t->stage);
    t->stage = NULL;
    col_status st2 = mt_stage_create(t->pool, 6, &t->stage, err);
    return st != COL_OK ? st : st2;
}

col_status col_lm_trainer_step(col_lm_trainer *t, const int32_t *ids, const int32_t *targets,
                                col_lm_step_info *info, col_err *err)
{
    float loss = 0;
    int na = accum(t);
    mt_zero(t->pool, MT_GRAD);
    for (int k = 0; k < na; k++) {
        float l = 0;
        col_status st = micro_batch(t, ids, targets, k, &l, err);
        if (st != COL_OK)
            return st;
        loss += l / (float)na;
    }
    col_opt_tensor *tr = t->ot + t->train0; /* the trained tensors */
    int ntr = t->nt - t->train0;
    if (na > 1)
        for (int i = 0; i < ntr; i++)
            for (int64_t j = 0; j < tr[i].n; j++)
                tr[i].g[j] /= (float)na;
    col_status st = COL_OK;
    double norm = 0;
    if (t->cfg.grad_clip <= 0) {
        norm = col_grad_global_norm(tr, ntr);
    } else {
        st = col_clip_grad_norm(tr, ntr, t->cfg.grad_clip, &norm, err);
        if (st != COL_OK)
            return col_err_set(err, st, "step %lld: gradient norm is %g (loss %g): training diverged; lower the learning rate",
                               (long long)t->step + 1, norm, loss);
    }
    float lr = col_lr_at(&t->cfg.lr, t->step);
    st = t->states_nvme ? streamed_step(t, lr, err) : col_opt_step(&t->cfg.opt, lr, t->step + 1, tr, ntr, err);
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

col_status col_lm_trainer_eval(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                               const float **logits, col_err *err)
{
    col_status st = build_forward(t, t->cfg.batch, err);
    if (st != COL_OK)
        return st;
    load_batch(&t->fgg, ids, targets, (int64_t)t->cfg.batch * t->cfg.seq);
    st = col_plan_run(t->fplan, t->be, err);
    if (st == COL_OK) {
        *loss = *(const float *)col_data(t->fgg.loss);
        if (logits)
            *logits = col_data(t->fgg.logits);
    }
    return st;
}

col_status col_lm_trainer_next_logits(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits,
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

int col_lm_trainer_n_params(const col_lm_trainer *t) { return t->nt; }

int64_t col_lm_trainer_param_count(const col_lm_trainer *t)
{
    int64_t n = 0;
    for (int i = 0; i < t->nt; i++)
        n += t->ot[i].n;
    return n;
}

int64_t col_lm_trainer_trainable_count(const col_lm_trainer *t)
{
    int64_t n = 0;
    for (int i = t->train0; i < t->nt; i++)
        n += t->ot[i].n;
    return n;
}

int col_lm_trainer_lora_target(const col_lm_trainer *t, int i)
{
    if (!t->lora_of || i < t->np || i >= t->nt)
        return -1;
    for (int k = 0; k < t->np; k++)
        if (t->lora_of[k] == (i - t->np) / 2)
            return k;
    return -1;
}

const float *col_lm_trainer_merged(col_lm_trainer *t, int i, float *scratch)
{
    if (i < 0 || i >= t->np)
        return NULL;
    if (!t->lora_of || t->lora_of[i] < 0)
        return t->ot[i].w;
    int a = t->np + 2 * t->lora_of[i];
    col_lora_merge(&t->cfg.model, &t->specs[i], t->ot[i].w, t->ot[a].w, t->ot[a + 1].w, t->cfg.lora.rank,
                   t->lora_scale, scratch);
    return scratch;
}

size_t col_lm_trainer_arena_bytes(const col_lm_trainer *t) { return col_plan_arena_bytes(t->plan); }

float *col_lm_trainer_param(col_lm_trainer *t, int i, const col_param_spec **spec)
{
    if (i < 0 || i >= t->nt)
        return NULL;
    if (spec)
        *spec = &t->specs[i];
    return t->ot[i].w;
}

float *col_lm_trainer_state(col_lm_trainer *t, int i, int slot)
{
    if (i < 0 || i >= t->nt)
        return NULL;
    return slot == 0 ? t->ot[i].m : slot == 1 ? t->ot[i].v : NULL;
}

int64_t col_lm_trainer_steps(const col_lm_trainer *t) { return t->step; }
void col_lm_trainer_set_steps(col_lm_trainer *t, int64_t steps) { t->step = steps; }
const col_lm_train_config *col_lm_trainer_config(const col_lm_trainer *t) { return &t->cfg; }
const struct mt_pool *col_lm_trainer_pool(const col_lm_trainer *t) { return t->pool; }
struct mt_resident *col_lm_trainer_compute_tier(const col_lm_trainer *t) { return t->res; }

float *col_lm_trainer_grad(col_lm_trainer *t, int i) { return (i >= 0 && i < t->nt) ? t->ot[i].g : NULL; }

/* ---- loading ---- */

static const col_ckpt_tensor *find_param(const col_ckpt *ck, const char *name)
{
    const col_ckpt_tensor *x = col_ckpt_find(ck, name);
    static const char *const prefixes[] = {"transformer.", "model.", "model.decoder."};
    for (size_t i = 0; !x && i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(name, prefixes[i], n) == 0)
            x = col_ckpt_find(ck, name + n);
    }
    if (!x && strncmp(name, "model.decoder.", 14) == 0) { /* facebook/opt-*: "decoder.layers..." */
        char alt[96];
        snprintf(alt, sizeof alt, "%s", name + 6);
        x = col_ckpt_find(ck, alt);
    }
    return x;
}

col_status col_lm_trainer_load(col_lm_trainer *t, const col_ckpt *ck, col_err *err)
{
    for (int i = 0; i < t->np; i++) {
        const col_param_spec *s = &t->specs[i];
        const col_ckpt_tensor *x = find_param(ck, s->name);
        if (!x)
            return col_err_set(err, COL_EFORMAT, "the checkpoint has no tensor '%s', which a %d-layer %s model needs",
                               s->name, t->cfg.model.n_layer, col_arch_name(t->cfg.model.arch));
        col_status st = col_ckpt_read_f32(x, s->ndim, s->shape, t->ot[i].w, err);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

/* ---- incremental decoding ---- */

static col_status dec_build(col_lm_trainer *t, struct dec_graph *d, int seq, col_err *err)
{
    dec_free(d);
    const col_lm_config *c = &t->cfg.model;
    d->g = col_graph_new();
    d->lg.cache = calloc((size_t)(2 * c->n_layer), sizeof(col_node *));
    if (!d->g || !graph_arrays(t, &d->lg) || !d->lg.cache)
        return col_err_set(err, COL_ENOMEM, "decode: out of memory");
    d->seq = seq;
    col_lm_build_opts o = {.batch = 1, .seq = seq, .cache_len = t->kv_len};
    lora_opts(t, &o);
    col_status st = col_lm_build(d->g, c, &o, &d->lg, err);
    if (st == COL_OK) {
        col_mark_output(d->lg.logits);
        st = bind_params(t, &d->lg, false, err);
    }
    size_t per = (size_t)c->n_kv_head * (size_t)t->kv_len * (size_t)c->head_dim;
    for (int l = 0; l < 2 * c->n_layer && st == COL_OK; l++)
        st = col_bind(d->lg.cache[l], t->kv + (size_t)l * per, err);
    if (st == COL_OK)
        st = col_plan_create(d->g, &d->plan, err);
    return st;
}

col_status col_lm_trainer_decode_reset(col_lm_trainer *t, int max_len, col_err *err)
{
    const col_lm_config *c = &t->cfg.model;
    if (max_len < 1 || max_len > c->max_positions)
        return col_err_set(err, COL_EINVAL, "decode: %d positions requested; the model has %d", max_len,
                           c->max_positions);
    if (max_len != t->kv_len) {
        dec_free(&t->dec[0]);
        dec_free(&t->dec[1]);
        free(t->kv);
        size_t n = 2 * (size_t)c->n_layer * (size_t)c->n_kv_head * (size_t)max_len * (size_t)c->head_dim;
        t->kv = calloc(n, sizeof(float));
        t->kv_len = t->kv ? max_len : 0;
        if (!t->kv)
            return col_err_set(err, COL_ENOMEM, "decode: cannot allocate a %.1f MB key/value cache",
                               (double)n * 4 / 1e6);
    }
    t->kv_pos = 0;
    return COL_OK;
}

col_status col_lm_trainer_decode(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits, col_err *err)
{
    if (!t->kv)
        return col_err_set(err, COL_ESTATE, "decode: call col_lm_trainer_decode_reset first");
    if (n < 1 || t->kv_pos + n > t->kv_len)
        return col_err_set(err, COL_EINVAL, "decode: %d more tokens after %lld do not fit the %d-position cache", n,
                           (long long)t->kv_pos, t->kv_len);
    struct dec_graph *d = &t->dec[n == 1 ? 1 : 0];
    if (d->seq != n) {
        col_status st = dec_build(t, d, n, err);
        if (st != COL_OK) {
            dec_free(d);
            return st;
        }
    }
    memcpy(col_data(d->lg.ids), tokens, sizeof(int32_t) * (size_t)n);
    *(int64_t *)col_data(d->lg.start) = t->kv_pos;
    col_status st = col_plan_run(d->plan, t->be, err);
    if (st != COL_OK)
        return st;
    t->kv_pos += n;
    *logits = (const float *)col_data(d->lg.logits) + (size_t)(n - 1) * (size_t)t->cfg.model.vocab_size;
    return COL_OK;
}

col_status col_lm_trainer_greedy(col_lm_trainer *t, const int32_t *prompt, int n_prompt, int n_new, int32_t *out,
                                 col_err *err)
{
    col_status st = col_lm_trainer_decode_reset(t, n_prompt + n_new, err);
    const float *lg;
    if (st == COL_OK)
        st = col_lm_trainer_decode(t, prompt, n_prompt, &lg, err);
    for (int k = 0; k < n_new && st == COL_OK; k++) {
        int best = 0;
        for (int v = 1; v < t->cfg.model.vocab_size; v++)
            if (lg[v] > lg[best])
                best = v;
        out[k] = best;
        if (k + 1 < n_new)
            st = col_lm_trainer_decode(t, &out[k], 1, &lg, err);
    }
    return st;
}
