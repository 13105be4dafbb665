/* finetune_session.c - colossal-finetune's training session: the options
 * turned into a trainer configuration, the session made (one trainer, or
 * with --pp this process's stages of a pipeline) and filled from MODEL's
 * weights or from the run being resumed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "finetune.h"
#include "lm_pipeline.h"

/* the optimizer kind's defaults with the options given on top */
static col_opt_config ft_opt_config(const ft_opts *o)
{
    col_opt_config c = col_opt_defaults(o->optimizer);
    if (!isnan(o->lr)) c.lr = o->lr;
    if (!isnan(o->beta1)) c.beta1 = o->beta1;
    if (!isnan(o->beta2)) c.beta2 = o->beta2;
    if (!isnan(o->eps)) c.eps = o->eps;
    if (!isnan(o->weight_decay)) c.weight_decay = o->weight_decay;
    if (!isnan(o->momentum)) c.momentum = o->momentum;
    c.nesterov = o->nesterov;
    return c;
}

/* --pp: this process's stages of the pipeline, from MODEL's weights or the run being resumed */
static col_status make_pipeline(ft_run *r, col_lm_train_config *tc, col_err *err)
{
    const ft_opts *o = &r->o;
    tc->grad_accum = 0; /* the pipeline's micro-batches are its accumulation */
    col_lm_pipeline_config pc = {.train = *tc, .pipe = r->par.pipe, .micro_batches = o->micro_batches,
                                  .virtual_stages = o->virtual_stages};
    col_status st = col_lm_pipeline_create(&pc, &r->dev.be, &r->pipe, err);
    if (st != COL_OK)
        return st;
    r->tr = col_lm_pipeline_stage(r->pipe, 0, NULL, NULL, NULL);
    col_ckpt *ck = NULL;
    if (o->resume[0]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", o->resume);
        if ((st = col_ckpt_open(path, &ck, err)) == COL_OK)
            st = col_lm_pipeline_load(r->pipe, o->resume, ck, true, err);
        if (st == COL_OK && col_lm_trainer_steps(r->tr) != r->state.step)
            st = col_err_set(err, COL_EFORMAT, "%s: the optimizer state is at step %lld but the run state at %lld: the "
                             "directory is inconsistent", o->resume, (long long)col_lm_trainer_steps(r->tr),
                             (long long)r->state.step);
        col_ckpt_close(ck);
    } else if (r->src.weights) {
        if (r->src.has_adapter)
            return col_err_set(err, COL_EUNSUPPORTED, "%s holds a LoRA adapter: pipeline stages train whole models "
                               "only (run without --pp)", r->src.dir);
        st = col_lm_pipeline_load(r->pipe, NULL, r->src.weights, false, err);
    }
    return st;
}

col_status ft_make_session(ft_run *r, col_err *err)
{
    const ft_opts *o = &r->o;
    col_lm_train_config tc = {0};
    tc.model = r->src.config;
    if (o->dropout >= 0)
        tc.model.dropout = o->dropout;
    tc.batch = o->batch / r->par.dp_size; /* with data parallelism, this process's share of each micro-batch */
    unsigned load_flags = o->ignore_extra ? COL_LOAD_IGNORE_EXTRA : 0;
    if (o->rl.method != COL_RLM_SFT) { /* RLHF: the rows of a step, one value per token, no dropout (as TRL) */
        tc.batch = ft_rl_rows(o);
        tc.objective = o->rl.method == COL_RLM_RM ? COL_LM_OBJ_VALUES : COL_LM_OBJ_TOKEN_LOGPROB;
        if (o->dropout < 0)
            tc.model.dropout = 0;
        if (o->rl.method == COL_RLM_RM && !tc.model.value_head) { /* a language model becomes a reward model */
            tc.model.value_head = true;
            load_flags |= COL_LOAD_NEW_VALUE_HEAD;
        }
    }
    tc.seq = o->seq;
    tc.dp = r->par.dp;
    if (r->par.lpar.ops && r->par.tp_size * r->par.sp_size > 1)
        tc.par = &r->par.lpar;
    tc.zero = o->zero;
    tc.grad_accum = o->grad_accum;
    tc.opt = ft_opt_config(o);
    if (isnan(o->lr) && (o->optimizer == COL_OPT_ADAMW || o->optimizer == COL_OPT_LAMB))
        tc.opt.lr = r->src.weights ? 1e-4f : 1e-3f;
    int64_t warm = o->warmup >= 0 ? o->warmup : o->steps / 20;
    if (o->schedule != COL_LR_CONSTANT && warm >= o->steps)
        warm = o->steps - 1;
    tc.lr = (col_lr_sched){.kind = o->schedule, .lr_max = tc.opt.lr, .lr_min = tc.opt.lr * o->min_lr_ratio,
                           .warmup_steps = warm, .total_steps = o->steps};
    if (o->rl.method == COL_RLM_PPO || o->rl.method == COL_RLM_GRPO) { /* the schedule counts optimizer steps */
        tc.lr.total_steps *= o->rl.ppo_epochs;
        tc.lr.warmup_steps *= o->rl.ppo_epochs;
    }
    tc.grad_clip = o->grad_clip;
    tc.checkpoint = o->checkpointing;
    tc.compute_dtype = o->precision;
    tc.seed = o->seed;
    mem_opts_apply(&o->mem, &tc);
    tc.inference = o->eval_only;
    tc.lora.rank = o->lora_rank;
    tc.lora.alpha = o->lora_alpha;
    snprintf(tc.lora.targets, sizeof tc.lora.targets, "%s", o->lora_targets);
    if (r->src.has_adapter) { /* MODEL is a LoRA output: go on training its adapter */
        if (o->lora_rank && o->lora_rank != r->src.lora.rank)
            return col_err_set(err, COL_EINVAL, "%s holds a rank %d LoRA adapter: train it with --lora-rank %d, or "
                               "export a merged model (--merge-lora) and fine-tune that", r->src.dir,
                               r->src.lora.rank, r->src.lora.rank);
        tc.lora = r->src.lora;
    }
    if (r->par.pp_size > 1)
        return make_pipeline(r, &tc, err);
    col_status st = col_lm_trainer_create(&tc, &r->dev.be, &r->tr, err);
    if (st != COL_OK)
        return st;
    if (o->resume[0]) {
        col_ckpt *ck = NULL;
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", o->resume);
        if ((st = col_ckpt_open(path, &ck, err)) == COL_OK && (st = col_lm_trainer_load(r->tr, ck, err)) == COL_OK &&
            (tc.lora.rank == 0 || (st = col_lm_trainer_load_adapter(r->tr, o->resume, err)) == COL_OK))
            st = col_lm_trainer_load_optimizer(r->tr, o->resume, err);
        col_ckpt_close(ck);
        if (st == COL_OK && col_lm_trainer_steps(r->tr) != r->state.step)
            st = col_err_set(err, COL_EFORMAT, "%s: the optimizer state is at step %lld but the run state at %lld: the "
                             "directory is inconsistent", o->resume, (long long)col_lm_trainer_steps(r->tr),
                             (long long)r->state.step);
    } else if (r->src.weights) {
        col_lm_load_report rep;
        st = col_lm_trainer_load_ex(r->tr, r->src.weights, load_flags, &rep, err);
        if (st != COL_OK)
            col_err_prefix(err, "%s", r->src.dir);
        else
            app_load_warnings(stderr, "colossal-finetune", &rep);
        if (st == COL_OK && r->src.has_adapter)
            st = col_lm_trainer_load_adapter(r->tr, r->src.dir, err);
    }
    return st;
}

