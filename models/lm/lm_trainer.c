/* lm_trainer.c - the training session: memory, graphs, steps, decoding. */
#include "lm_trainer.h"
#include "units.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "lm_trainer_internal.h"
#include "timer.h"

_Static_assert(COL_LM_PARAMS == 1u << MT_PARAM && COL_LM_GRADS == 1u << MT_GRAD && COL_LM_STATES == 1u << MT_OPTSTATE,
               "COL_LM_* kinds are memtier's kind bits");


/* under tensor or sequence parallelism: this rank's rows and positions, its place in the layout */
static void par_opts(const col_lm_trainer *t, col_lm_build_opts *o)
{
    if (!t->par)
        return;
    int row0, rows;
    t->par->ops->rows(t->par, o->batch, &row0, &rows);
    o->par = t->par;
    o->batch = rows;
    o->seq = t->pseq;
}

static col_status build_train(col_lm_trainer *t, col_err *err)
{
    t->g = col_graph_new();
    if (!t->g || !lmt_graph_arrays(t, &t->gg))
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    col_lm_build_opts o = {.batch = t->cfg.batch, .seq = t->cfg.seq, .with_loss = true, .training = true,
                            .objective = t->cfg.objective, .checkpoint = t->cfg.checkpoint, .dropout_seed = t->cfg.seed,
                            .layer_lo = t->cfg.layer_lo, .layer_hi = t->cfg.layer_hi};
    par_opts(t, &o);
    lmt_lora_opts(t, &o);
    col_status st = col_lm_build(t->g, &t->cfg.model, &o, &t->gg, err);
    /* d loss is an input set before each run: the f16 loss scale times the micro-batch's weight in the step
     * (1, or its share of the step's counted tokens when several processes split the rows); a pipeline stage
     * before the last is seeded with the gradient of its hidden states the next stage sends back */
    if (st == COL_OK) {
        col_node *out = t->gg.loss ? t->gg.loss : t->gg.hidden_out;
        t->seed = col_input(t->g, "loss_seed", COL_F32, out->t.ndim, out->t.shape);
        st = t->seed ? col_graph_backward_seeded(t->g, out, t->seed, err)
                     : col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    }
    if (st == COL_OK)
        st = lmt_bind_params(t, &t->gg, true, err);
    if (st == COL_OK)
        st = col_plan_create_on(t->g, t->be, &t->plan, err);
    return st;
}

/* the forward-only graph, built on first use for a given batch size: for
 * what the training graph cannot serve (forward_pass); base: the base model
 * of a LoRA session, its adapters left out (a graph of its own) */
static col_status build_forward(col_lm_trainer *t, int batch, bool base, col_err *err)
{
    col_graph **g = base ? &t->bg : &t->fg;
    col_plan **plan = base ? &t->bplan : &t->fplan;
    lmt_tier *tier = base ? &t->btier : &t->ftier;
    col_lm_graph *gg = base ? &t->bgg : &t->fgg;
    int *fb = base ? &t->bbatch : &t->fbatch;
    if (*g && *fb == batch)
        return COL_OK;
    lmt_tier_free(tier);
    col_plan_free(*plan);
    col_graph_free(*g);
    lmt_graph_arrays_free(gg);
    *plan = NULL;
    *g = col_graph_new();
    *fb = batch;
    if (!*g || !lmt_graph_arrays(t, gg))
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    col_lm_build_opts o = {.batch = batch, .seq = t->cfg.seq, .with_loss = true, .training = false,
                           .objective = t->cfg.objective};
    lmt_lora_opts(t, &o);
    par_opts(t, &o);
    if (base)
        o.lora_of = NULL;
    col_status st = col_lm_build(*g, &t->cfg.model, &o, gg, err);
    if (st == COL_OK) {
        col_mark_output(gg->loss);
        col_mark_output(gg->logits);
        st = lmt_bind_params(t, gg, false, err);
    }
    if (st == COL_OK)
        st = col_plan_create_on(*g, t->be, plan, err);
    if (st == COL_OK)
        st = lmt_share_memory(t, *plan, err);
    if (st != COL_OK) { /* rebuilt on the next call */
        col_plan_free(*plan);
        col_graph_free(*g);
        lmt_graph_arrays_free(gg);
        *plan = NULL;
        *g = NULL;
    }
    return st;
}


/* the message of what a pipeline stage's session cannot do alone */
static col_status stage_refuses(const col_lm_trainer *t, const char *what, col_err *err)
{
    return col_err_set(err, COL_ESTATE, "%s: this session holds the pipeline stage of layers [%d, %d) only: run it "
                       "through the pipeline (lm_pipeline.h)", what, t->cfg.layer_lo, t->cfg.layer_hi);
}

static col_status forward_pass(col_lm_trainer *t, int batch, lmt_fwd_pass *f, col_err *err)
{
    return lmt_forward_pass(t, batch, false, f, err);
}

col_status lmt_forward_pass(col_lm_trainer *t, int batch, bool base, lmt_fwd_pass *f, col_err *err)
{
    if (lmt_partial(t))
        return stage_refuses(t, "evaluation", err);
    if (base && !t->lora_of)
        base = false; /* no adapters to leave out: the model is its base */
    if (t->g && batch == t->cfg.batch && !base && !t->par) {
        if (!t->eplan) {
            col_node *outs[2] = {t->gg.loss, t->gg.logits};
            col_status st = col_plan_create_for(t->g, t->be, outs, 2, &t->eplan, err);
            if (st == COL_OK)
                st = lmt_share_memory(t, t->eplan, err);
            if (st != COL_OK) {
                col_plan_free(t->eplan);
                t->eplan = NULL;
                return st;
            }
            col_plan_set_dropout(t->eplan, false);
        }
        *f = (lmt_fwd_pass){t->eplan, &t->gg, &t->etier};
        return COL_OK;
    }
    col_status st = build_forward(t, batch, base, err);
    if (st == COL_OK)
        *f = base ? (lmt_fwd_pass){t->bplan, &t->bgg, &t->btier} : (lmt_fwd_pass){t->fplan, &t->fgg, &t->ftier};
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
    if ((st = col_lm_check_stage(&cfg->model, cfg->layer_lo, cfg->layer_hi, err)) != COL_OK)
        return st;
    bool partial = !(cfg->layer_lo == 0 && (cfg->layer_hi == 0 || cfg->layer_hi == cfg->model.n_layer));
    if (partial && (cfg->lora.rank > 0 || cfg->compute_dtype != COL_F32 || cfg->inference))
        return col_err_set(err, COL_EUNSUPPORTED, "a pipeline stage session (layers [%d, %d)) trains in f32 without "
                           "LoRA", cfg->layer_lo, cfg->layer_hi);
    if (cfg->objective != COL_LM_OBJ_MEAN_CE && (partial || cfg->dp))
        return col_err_set(err, COL_EUNSUPPORTED, "a session ending in values per token holds the whole model in one "
                           "process (no pipeline stages, no data parallelism)");
    if ((unsigned)cfg->objective > COL_LM_OBJ_VALUES)
        return col_err_set(err, COL_EINVAL, "objective %d is not one of lm.h's", (int)cfg->objective);
    if (cfg->grad_accum < 0 || cfg->grad_accum > 65536)
        return col_err_set(err, COL_EINVAL, "gradient accumulation of %d micro-batches (1..65536)", cfg->grad_accum);
    if (be && be->mem && !cfg->compute_budget)
        return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_EINVAL, "a device backend reaches parameters "
                              "only through the compute tier: set a compute tier budget");
    col_dtype dt = cfg->compute_dtype;
    if (dt != COL_F32 && dt != COL_BF16 && dt != COL_F16)
        return col_err_set_on(err, COL_SETTING_PRECISION, COL_EINVAL, "a compute dtype of %s (f32, bf16 or f16)",
                              col_dtype_name(dt));
    if (dt != COL_F32 && cfg->lora.rank > 0)
        return col_err_set_on(err, COL_SETTING_PRECISION, COL_EUNSUPPORTED, "LoRA adapters are trained in f32 only, "
                               "not with %s mixed precision", col_dtype_name(dt));
    bool quant = cfg->weight_quant != COL_F32;
    for (int i = 0; cfg->weight_quant_each && i < col_lm_param_count(&cfg->model); i++)
        quant |= col_dtype_is_quant(cfg->weight_quant_each[i]);
    if (cfg->weight_quant != COL_F32 && !col_dtype_is_quant(cfg->weight_quant))
        return col_err_set_on(err, COL_SETTING_PRECISION, COL_EINVAL, "quantized weights of %s (q8_0, q4_0, q4_K or "
                              "q6_K)", col_dtype_name(cfg->weight_quant));
    if (quant && (!cfg->inference || dt != COL_F32 || cfg->lora.rank > 0 || partial || cfg->dp))
        return col_err_set_on(err, COL_SETTING_PRECISION, COL_EUNSUPPORTED, "quantized weights are for inference "
                              "sessions of the whole model in one process, f32 compute, no LoRA");
    if (!(cfg->loss_scale >= 0 && isfinite(cfg->loss_scale)) || cfg->loss_scale_window < 0)
        return col_err_set(err, COL_EINVAL, "loss scaling: a first scale of %g and a window of %d steps",
                           cfg->loss_scale, cfg->loss_scale_window);
    col_lm_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    t->cfg = *cfg;
    t->cfg.weight_quant_each = NULL; /* the caller's array: read below, into t->pdt, not kept */
    t->be = be;
    t->dt = dt;
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
    if (partial) { /* the stage's specs, in its first-use order */
        t->gidx = malloc(sizeof *t->gidx * (size_t)t->np);
        col_param_spec *sel = malloc(sizeof *sel * (size_t)t->np);
        if (!t->gidx || !sel) {
            free(base), free(lora_of), free(sel);
            col_lm_trainer_free(t);
            return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
        }
        t->np = col_lm_stage_params(&cfg->model, cfg->layer_lo, cfg->layer_hi, t->gidx);
        for (int i = 0; i < t->np; i++)
            sel[i] = base[t->gidx[i]];
        memcpy(base, sel, sizeof *sel * (size_t)t->np);
        free(sel);
    }
    t->nt = t->np + 2 * na;
    t->train0 = na ? t->np : 0;
    t->lora_scale = col_lora_scale(&cfg->lora);
    t->specs = calloc((size_t)t->nt, sizeof *t->specs);
    t->ot = calloc((size_t)t->nt, sizeof *t->ot);
    t->w16 = calloc((size_t)t->nt, sizeof *t->w16);
    t->g16 = calloc((size_t)t->nt, sizeof *t->g16);
    if (na)
        t->lora_of = lora_of;
    else
        free(lora_of);
    if (!t->specs || !t->ot || !t->w16 || !t->g16) {
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
    t->norm_given = -1;
    t->slots = col_opt_state_slots(cfg->opt.kind, cfg->opt.momentum);
    if (quant) {
        if (!(t->pdt = malloc(sizeof *t->pdt * (size_t)t->nt))) {
            col_lm_trainer_free(t);
            return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
        }
        for (int i = 0; i < t->nt; i++) /* (a quantized session holds the whole model: spec order) */
            t->pdt[i] = col_lm_quant_dtype(&t->specs[i], cfg->weight_quant_each && i < t->np ? cfg->weight_quant_each[i]
                                                                                              : cfg->weight_quant);
    }
    st = lmt_par_setup(t, err);
    if (st == COL_OK && t->pdt && t->par)
        st = col_err_set_on(err, COL_SETTING_PRECISION, COL_EUNSUPPORTED, "quantized weights do not run under "
                            "tensor or sequence parallelism");
    if (st == COL_OK)
        st = lmt_dp_init(t, err);
    if (st == COL_OK)
        st = lmt_alloc(t, err);
    for (int i = 0; i < t->nt && st == COL_OK; i++) {
        const col_param_spec *s = &t->specs[i];
        t->ot[i].n = col_param_numel(s);
        t->ot[i].decay = s->decay || cfg->decay_all;
        /* host addresses, NULL on the NVMe tier; under mixed precision the optimizer's weights are the master */
        bool mixed = lmt_mixed(t);
        t->w16[i] = mixed ? mt_ptr(t->pool, t->ref[i]) : NULL;
        t->g16[i] = mixed ? mt_ptr(t->pool, t->ref[t->nt + i]) : NULL;
        t->ot[i].w = mt_ptr(t->pool, t->ref[(mixed ? LMT_MASTER : 0) * t->nt + i]);
        t->ot[i].g = mixed ? NULL : mt_ptr(t->pool, t->ref[t->nt + i]);
        t->ot[i].m = mt_ptr(t->pool, t->ref[2 * t->nt + i]);
        t->ot[i].v = mt_ptr(t->pool, t->ref[3 * t->nt + i]);
    }
    if (st == COL_OK)
        st = lmt_mixed_init(t, err);
    /* the compute tier copies parameters and gradients: page-locked, a device's copy engine moves them while
     * its kernels run (optimizer states stay on the host) */
    if (st == COL_OK && lmt_dev(t))
        mt_pin_host(t->pool, be, 1u << MT_PARAM | 1u << MT_GRAD);
    if (st == COL_OK && (st = mt_stage_create(t->pool, 12, &t->stage, err)) == COL_OK)
        mt_stage_set_limit(t->stage, lmt_stage_need(t));
    if (st == COL_OK && !cfg->weights_follow)
        st = lmt_init_params(t, err);
    if (st == COL_OK && !cfg->inference)
        st = build_train(t, err);
    /* the compute tier is made now, so a budget too small is refused at the start (memtier's message marks
     * the compute tier budget) */
    if (st == COL_OK && cfg->compute_budget > 0) {
        if (!cfg->inference)
            st = mt_resident_create(t->pool, t->plan, cfg->compute_budget, &t->tier.res, err);
        else if ((st = build_forward(t, 1, false, err)) == COL_OK)
            st = mt_resident_create(t->pool, t->fplan, cfg->compute_budget, &t->ftier.res, err);
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
    lmt_tier_free(&d->tier);
    col_plan_free(d->plan);
    col_graph_free(d->g);
    lmt_graph_arrays_free(&d->lg);
    free(d->lg.cache);
    memset(d, 0, sizeof *d);
}

static col_status get_loss(col_plan *plan, col_node *loss, float *out, col_err *err)
{
    return col_plan_download(plan, loss, out, sizeof *out, err);
}

void col_lm_trainer_free(col_lm_trainer *t)
{
    if (!t)
        return;
    dec_free(&t->dec[0]);
    dec_free(&t->dec[1]);
    lmt_kv_release(t, t->kv);
    free(t->hlog);
    lmt_tier_free(&t->tier);
    lmt_tier_free(&t->etier);
    lmt_tier_free(&t->ftier);
    lmt_tier_free(&t->btier);
    mt_stage_free(t->stage);
    mt_stage_free(t->view);
    free(t->ref);
    col_plan_free(t->plan);
    col_plan_free(t->eplan);
    col_graph_free(t->g);
    lmt_graph_arrays_free(&t->gg);
    col_plan_free(t->fplan);
    col_graph_free(t->fg);
    lmt_graph_arrays_free(&t->fgg);
    col_plan_free(t->bplan);
    col_graph_free(t->bg);
    lmt_graph_arrays_free(&t->bgg);
    mt_destroy(t->pool);
    lmt_mixed_free(t);
    lmt_dp_free(t);
    free(t->lora_of);
    free(t->gidx);
    lmt_par_free(t);
    free(t->specs);
    free(t->pdt);
    free(t->ext);
    col_ckpt_close(t->ext_ck); /* after the pool and graphs: nothing reads the mapped weights any more */
    col_gguf_close(t->ext_gguf);
    free(t->ot);
    free(t->w16);
    free(t->g16);
    free(t);
}

/* the batch into the graph's inputs (a memcpy on a host plan) */
col_status lmt_load_batch(col_plan *plan, col_lm_graph *gg, const int32_t *ids, const int32_t *targets, int64_t n,
                          col_err *err)
{
    col_status st = col_plan_upload(plan, gg->ids, ids, sizeof(int32_t) * (size_t)n, err);
    if (st == COL_OK && gg->targets) /* a value model's graph has none */
        st = col_plan_upload(plan, gg->targets, targets, sizeof(int32_t) * (size_t)n, err);
    return st;
}

/* a micro-batch of B rows into a graph's inputs: under tensor or sequence parallelism this rank's rows and
 * positions, and 1 / the micro-batch's counted targets */
static col_status load_inputs(col_lm_trainer *t, col_plan *plan, col_lm_graph *gg, const int32_t *ids,
                              const int32_t *targets, int B, col_err *err)
{
    if (!t->par)
        return lmt_load_batch(plan, gg, ids, targets, (int64_t)B * t->cfg.seq, err);
    int32_t *li, *lt;
    int64_t n;
    float inv = lmt_par_inputs(t, ids, targets, B, &li, &lt, &n);
    col_status st = lmt_load_batch(plan, gg, li, lt, n, err);
    if (st == COL_OK && gg->inv_count)
        st = col_plan_upload(plan, gg->inv_count, &inv, sizeof inv, err);
    return st;
}

static int accum(const col_lm_trainer *t) { return t->cfg.grad_accum > 1 ? t->cfg.grad_accum : 1; }

/* forward+backward of micro-batch k of the step, adding into the gradients weight times those of its mean loss */
static col_status micro_batch(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, int k, float weight,
                              float *loss, col_err *err)
{
    if (!t->plan)
        return col_err_set(err, COL_ESTATE, "this session was created for inference: it cannot train");
    if (lmt_partial(t))
        return stage_refuses(t, "training step", err);
    if (t->cfg.objective != COL_LM_OBJ_MEAN_CE)
        return col_err_set(err, COL_ESTATE, "training step: the session ends in values per token: train it with "
                           "col_lm_trainer_backward_tokens");
    int64_t n = (int64_t)t->cfg.batch * t->cfg.seq;
    col_graph_set_rng_counter(t->g, (uint64_t)(t->step * accum(t) + k + 1)); /* fresh dropout masks each pass */
    col_status st = load_inputs(t, t->plan, &t->gg, ids + k * n, targets + k * n, t->cfg.batch, err);
    float seed = t->scale * weight;
    if (st == COL_OK)
        st = col_plan_upload(t->plan, t->seed, &seed, sizeof seed, err);
    if (st == COL_OK)
        st = lmt_run(t, t->plan, &t->tier, 0, err);
    if (st == COL_OK && loss)
        st = get_loss(t->plan, t->gg.loss, loss, err);
    return st;
}

col_status col_lm_trainer_grads(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                 col_err *err)
{
    col_status st = lmt_dp_need_params(t, err);
    if (st != COL_OK)
        return st;
    mt_zero(t->pool, MT_GRAD);
    return micro_batch(t, ids, targets, 0, 1.0f, loss, err);
}

/* the compute tier's cumulative wait for transfers, 0 without one */
static double tier_wait(const col_lm_trainer *t)
{
    if (!t->tier.res)
        return 0;
    mt_resident_stats rs;
    mt_resident_get_stats(t->tier.res, &rs);
    return rs.total_wait_s;
}

col_status lmt_optimize(col_lm_trainer *t, int na, float loss, const lmt_step_clock *clk, col_lm_step_info *info,
                        col_err *err)
{
    double t1 = col_seconds(), w1 = tier_wait(t);
    col_status rs = lmt_dp_reduce_grads(t, err);
    if (rs != COL_OK)
        return rs;
    col_opt_tensor *tr = t->ot + t->train0; /* the trained tensors */
    int ntr = t->nt - t->train0;
    float lr = col_lr_at(&t->cfg.lr, t->step);
    col_status st = COL_OK;
    double norm = 0;
    bool skipped = false;
    float scale = t->scale;
    if (lmt_mixed(t)) {
        st = lmt_mixed_step(t, na, lr, t->cfg.grad_clip, &norm, &skipped, err);
    } else if (t->nvme_kinds) {
        st = lmt_streamed_step(t, na, lr, t->cfg.grad_clip, &norm, err);
    } else if (t->dp || t->par) {
        st = lmt_dp_f32_step(t, na, lr, t->cfg.grad_clip, &norm, err);
    } else {
        if (na > 1)
            for (int i = 0; i < ntr; i++)
                for (int64_t j = 0; j < tr[i].n; j++)
                    tr[i].g[j] /= (float)na;
        if (t->cfg.grad_clip <= 0)
            norm = col_grad_global_norm(tr, ntr);
        else
            st = col_clip_grad_norm(tr, ntr, t->cfg.grad_clip, &norm, err);
        if (st == COL_OK)
            st = col_opt_step(&t->cfg.opt, lr, t->step + 1, tr, ntr, err);
    }
    if (st != COL_OK && t->cfg.grad_clip > 0 && !isfinite(norm))
        return col_err_set(err, st, "step %lld: gradient norm is %g (loss %g): training diverged; lower the learning rate",
                           (long long)t->step + 1, norm, loss);
    t->dp_reduced = false;
    if (st == COL_OK)
        st = lmt_dp_share_params(t, err);
    if (st != COL_OK)
        return st;
    t->step++;
    if (info) {
        info->loss = loss;
        info->grad_norm = norm;
        info->lr = lr;
        info->step = t->step;
        info->wait_s = w1 - clk->wait0;
        info->compute_s = t1 - clk->t0 - info->wait_s;
        info->optim_s = col_seconds() - t1;
        info->loss_scale = scale;
        info->skipped = skipped;
        info->skipped_total = t->skipped;
    }
    return COL_OK;
}

void lmt_clock_start(const col_lm_trainer *t, lmt_step_clock *clk)
{
    clk->t0 = col_seconds();
    clk->wait0 = tier_wait(t);
}

col_status col_lm_trainer_step(col_lm_trainer *t, const int32_t *ids, const int32_t *targets,
                                col_lm_step_info *info, col_err *err)
{
    float loss = 0;
    int na = accum(t);
    lmt_step_clock clk;
    lmt_clock_start(t, &clk);
    float *w = malloc(sizeof *w * (size_t)na);
    if (!w)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    t->dp_wait_s = 0;
    t->dp_bytes = 0;
    col_status st = lmt_dp_weights(t, targets, na, w, err);
    if (st == COL_OK)
        mt_zero(t->pool, MT_GRAD);
    for (int k = 0; k < na && st == COL_OK; k++) {
        float l = 0;
        t->dp_last = k == na - 1; /* the gradient exchange overlaps the last micro-batch's backward pass */
        st = micro_batch(t, ids, targets, k, w[k], &l, err);
        t->dp_last = false;
        if (!t->dp)
            loss += l / (float)na;
        else if (w[k] > 0) /* this process's part of the mean over every process's rows */
            loss += w[k] * l;
    }
    free(w);
    if (st == COL_OK && t->dp && (st = lmt_dp_sum_f(t, loss, &loss, err)) == COL_OK)
        loss /= (float)na;
    return st == COL_OK ? lmt_optimize(t, na, loss, &clk, info, err) : st;
}

col_status col_lm_trainer_eval(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                               const float **logits, col_err *err)
{
    lmt_fwd_pass f;
    float w = 1;
    if (t->cfg.objective != COL_LM_OBJ_MEAN_CE)
        return col_err_set(err, COL_ESTATE, "evaluation: the session ends in values per token: use "
                           "col_lm_trainer_forward_tokens");
    col_status st = lmt_dp_need_params(t, err);
    if (st == COL_OK)
        st = lmt_dp_weights(t, targets, 1, &w, err);
    if (st == COL_OK)
        st = forward_pass(t, t->cfg.batch, &f, err);
    if (st != COL_OK)
        return st;
    st = load_inputs(t, f.plan, f.gg, ids, targets, t->cfg.batch, err);
    if (st == COL_OK)
        st = lmt_run(t, f.plan, f.tier, 0, err);
    if (st == COL_OK)
        st = get_loss(f.plan, f.gg->loss, loss, err);
    if (st == COL_OK && logits && t->par && (t->prows != t->cfg.batch || t->pseq != t->cfg.seq))
        return col_err_set(err, COL_EUNSUPPORTED, "evaluation: this process computes only a share of the rows or "
                           "positions (%s tensor parallelism, %d sequence-parallel ranks): it has no logits of the "
                           "whole batch", col_tp_mode_name(t->par->layout.mode), t->par->layout.sp);
    if (st == COL_OK && t->dp) /* the mean over every process's rows, as the step's loss */
        st = lmt_dp_sum_f(t, w > 0 ? w * *loss : 0.0f, loss, err);
    if (st == COL_OK && logits)
        st = lmt_get_logits(t, f.plan, f.gg->logits, 0, (size_t)t->cfg.batch * (size_t)t->cfg.seq, logits, err);
    return st;
}

col_status col_lm_trainer_next_logits(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits,
                                       col_err *err)
{
    if (n < 1 || n > t->cfg.seq)
        return col_err_set(err, COL_EINVAL, "sampling: %d context tokens (1..%d)", n, t->cfg.seq);
    if (t->par && t->par->layout.sp > 1)
        return col_err_set(err, COL_EUNSUPPORTED, "sampling: generation does not run under sequence parallelism yet "
                           "(%d ranks split the positions)", t->par->layout.sp);
    /* the grids split rows: as many copies of the row as make one row per process (each computes the same) */
    int B = 1, row0 = 0, mine = 1;
    while (t->par && (t->par->ops->rows(t->par, B, &row0, &mine), mine < 1) && B < 65536)
        B++;
    lmt_fwd_pass f;
    col_status st = lmt_dp_need_params(t, err);
    if (st == COL_OK)
        st = forward_pass(t, B, &f, err);
    if (st != COL_OK)
        return st;
    size_t T = (size_t)t->cfg.seq;
    int32_t *ids = malloc(sizeof *ids * 2 * (size_t)B * T), *tg = ids + (size_t)B * T;
    if (!ids)
        return col_err_set(err, COL_ENOMEM, "sampling: out of memory");
    for (size_t i = 0; i < (size_t)B * T; i++) {
        ids[i] = (int)(i % T) < n ? tokens[i % T] : 0; /* causal: padding after the context does not change it */
        tg[i] = i % T == 0 ? 0 : -1; /* the loss needs counted targets; their values are not used */
    }
    st = load_inputs(t, f.plan, f.gg, ids, tg, B, err);
    free(ids);
    if (st == COL_OK)
        st = lmt_run(t, f.plan, f.tier, 0, err);
    if (st == COL_OK)
        st = lmt_get_logits(t, f.plan, f.gg->logits, (size_t)(n - 1), 1, logits, err);
    return st;
}

/* ---- incremental decoding ---- */

static col_status dec_build(col_lm_trainer *t, struct dec_graph *d, int seq, col_err *err)
{
    dec_free(d);
    const col_lm_config *c = &t->cfg.model;
    d->g = col_graph_new();
    d->lg.cache = calloc((size_t)(2 * c->n_layer), sizeof(col_node *));
    if (!d->g || !lmt_graph_arrays(t, &d->lg) || !d->lg.cache)
        return col_err_set(err, COL_ENOMEM, "decode: out of memory");
    d->seq = seq;
    col_lm_build_opts o = {.batch = 1, .seq = seq, .cache_len = t->kv_len};
    lmt_lora_opts(t, &o);
    col_status st = col_lm_build(d->g, c, &o, &d->lg, err);
    if (st == COL_OK) {
        col_mark_output(d->lg.logits);
        st = lmt_bind_params(t, &d->lg, false, err);
    }
    size_t per = (size_t)c->n_kv_head * (size_t)t->kv_len * (size_t)c->head_dim;
    for (int l = 0; l < 2 * c->n_layer && st == COL_OK; l++)
        st = col_bind(d->lg.cache[l], t->kv + (size_t)l * per, err);
    if (st == COL_OK)
        st = col_plan_create_on(d->g, t->be, &d->plan, err);
    if (st == COL_OK)
        st = lmt_share_memory(t, d->plan, err);
    return st;
}

/* Under tensor parallelism there is no key/value cache yet: decoding keeps the tokens so far and runs a whole
 * forward pass of them for each new one (col_lm_trainer_next_logits), up to the session's seq positions. */
static col_status par_decode_reset(col_lm_trainer *t, int max_len, col_err *err)
{
    if (max_len < 1 || max_len > t->cfg.seq)
        return col_err_set(err, COL_EINVAL, "decode: %d positions requested; under tensor parallelism decoding "
                           "reaches the session's %d positions", max_len, t->cfg.seq);
    if (!t->phist && !(t->phist = malloc(sizeof *t->phist * (size_t)t->cfg.seq)))
        return col_err_set(err, COL_ENOMEM, "decode: out of memory");
    t->phist_n = 0;
    t->phist_max = max_len;
    return COL_OK;
}

static col_status par_decode(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits, col_err *err)
{
    if (!t->phist || t->phist_max < 1)
        return col_err_set(err, COL_ESTATE, "decode: call col_lm_trainer_decode_reset first");
    if (n < 1 || t->phist_n + n > t->phist_max)
        return col_err_set(err, COL_EINVAL, "decode: %d more tokens after %d do not fit the %d positions", n,
                           t->phist_n, t->phist_max);
    memcpy(t->phist + t->phist_n, tokens, sizeof *tokens * (size_t)n);
    t->phist_n += n;
    return col_lm_trainer_next_logits(t, t->phist, t->phist_n, logits, err);
}

col_status col_lm_trainer_decode_reset(col_lm_trainer *t, int max_len, col_err *err)
{
    if (t->par)
        return par_decode_reset(t, max_len, err);
    const col_lm_config *c = &t->cfg.model;
    if (lmt_partial(t))
        return stage_refuses(t, "decoding", err);
    if (max_len < 1 || max_len > c->max_positions)
        return col_err_set(err, COL_EINVAL, "decode: %d positions requested; the model has %d", max_len,
                           c->max_positions);
    if (max_len != t->kv_len) {
        dec_free(&t->dec[0]);
        dec_free(&t->dec[1]);
        lmt_kv_release(t, t->kv);
        t->kv = NULL;
        t->kv_len = 0;
        size_t n = 2 * (size_t)c->n_layer * (size_t)c->n_kv_head * (size_t)max_len * (size_t)c->head_dim;
        col_err e2 = {0};
        col_status st = lmt_kv_alloc(t, n, &t->kv, &e2);
        char b[COL_BYTES_STR];
        if (st != COL_OK)
            return col_err_set(err, st, "decode: cannot allocate a %s key/value cache%s%s",
                               col_fmt_bytes(b, sizeof b, (uint64_t)n * 4), e2.msg[0] ? ": " : "", e2.msg);
        t->kv_len = max_len;
    }
    t->kv_pos = 0;
    return COL_OK;
}

col_status col_lm_trainer_decode(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits, col_err *err)
{
    if (t->par)
        return par_decode(t, tokens, n, logits, err);
    if (!t->kv)
        return col_err_set(err, COL_ESTATE, "decode: call col_lm_trainer_decode_reset first");
    if (n < 1 || t->kv_pos + n > t->kv_len)
        return col_err_set(err, COL_EINVAL, "decode: %d more tokens after %lld do not fit the %d-position cache", n,
                           (long long)t->kv_pos, t->kv_len);
    struct dec_graph *d = &t->dec[n == 1 ? 1 : 0];
    col_status ps = lmt_dp_need_params(t, err);
    if (ps != COL_OK)
        return ps;
    if (d->seq != n) {
        col_status st = dec_build(t, d, n, err);
        if (st != COL_OK) {
            dec_free(d);
            return st;
        }
    }
    int64_t pos = t->kv_pos;
    col_status st = col_plan_upload(d->plan, d->lg.ids, tokens, sizeof(int32_t) * (size_t)n, err);
    if (st == COL_OK)
        st = col_plan_upload(d->plan, d->lg.start, &pos, sizeof pos, err);
    if (st != COL_OK)
        return st;
    const col_lm_config *c = &t->cfg.model;
    size_t kv_bytes = sizeof(float) * 2 * (size_t)c->n_layer * (size_t)c->n_kv_head * (size_t)t->kv_len *
                      (size_t)c->head_dim;
    st = lmt_run(t, d->plan, &d->tier, kv_bytes, err);
    if (st == COL_OK)
        st = lmt_get_logits(t, d->plan, d->lg.logits, (size_t)(n - 1), 1, logits, err);
    if (st != COL_OK)
        return st;
    t->kv_pos += n;
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
