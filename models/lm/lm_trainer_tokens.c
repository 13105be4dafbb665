/* lm_trainer_tokens.c - a session whose graphs end in one value per token (RLHF): the forward pass, the backward
 * pass seeded per token by the caller's loss, the optimizer step (lm_trainer.h). */
#include <stdlib.h>

#include "lm_trainer_internal.h"
#include "timer.h"

static col_status per_token(const col_lm_trainer *t, const char *what, col_err *err)
{
    if (t->cfg.objective != COL_LM_OBJ_TOKEN_LOGPROB && t->cfg.objective != COL_LM_OBJ_VALUES)
        return col_err_set(err, COL_ESTATE, "%s: the session ends in the mean loss, not in values per token", what);
    if (t->dp)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: per-token objectives run in one process", what);
    return COL_OK;
}

/* [batch, seq] floats of a plan's per-token output into out */
static col_status get_tokens(const col_lm_trainer *t, col_plan *plan, col_node *n, float *out, col_err *err)
{
    return col_plan_download(plan, n, out, sizeof(float) * (size_t)t->cfg.batch * (size_t)t->cfg.seq, err);
}

col_status col_lm_trainer_forward_tokens(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, unsigned flags,
                                         float *out, col_err *err)
{
    col_status st = per_token(t, "forward pass", err);
    if (st != COL_OK)
        return st;
    if (!targets && t->cfg.objective == COL_LM_OBJ_TOKEN_LOGPROB)
        return col_err_set(err, COL_EINVAL, "forward pass: log-probabilities need targets");
    lmt_fwd_pass f;
    if ((st = lmt_forward_pass(t, t->cfg.batch, (flags & COL_LM_FWD_BASE) != 0, &f, err)) != COL_OK)
        return st;
    st = lmt_load_batch(f.plan, f.gg, ids, targets, (int64_t)t->cfg.batch * t->cfg.seq, err);
    if (st == COL_OK)
        st = lmt_run(t, f.plan, f.tier, 0, err);
    return st == COL_OK ? get_tokens(t, f.plan, f.gg->loss, out, err) : st;
}

void col_lm_trainer_zero_grads(col_lm_trainer *t)
{
    mt_zero(t->pool, MT_GRAD);
    t->tok_started = false;
}

col_status col_lm_trainer_backward_tokens(col_lm_trainer *t, const int32_t *ids, const int32_t *targets,
                                          const float *dout, float *out, col_err *err)
{
    col_status st = per_token(t, "backward pass", err);
    if (st != COL_OK)
        return st;
    if (!t->plan)
        return col_err_set(err, COL_ESTATE, "this session was created for inference: it cannot train");
    if (!targets && t->cfg.objective == COL_LM_OBJ_TOKEN_LOGPROB)
        return col_err_set(err, COL_EINVAL, "backward pass: log-probabilities need targets");
    if (!t->tok_started) {
        lmt_step_clock clk;
        lmt_clock_start(t, &clk);
        t->tok_t0 = clk.t0;
        t->tok_wait0 = clk.wait0;
        t->tok_started = true;
    }
    size_t n = (size_t)t->cfg.batch * (size_t)t->cfg.seq;
    float *seed = malloc(sizeof *seed * n);
    if (!seed)
        return col_err_set(err, COL_ENOMEM, "backward pass: out of memory");
    for (size_t i = 0; i < n; i++) /* f16: the loss scale on every seed (the step divides it out) */
        seed[i] = dout[i] * t->scale;
    col_graph_set_rng_counter(t->g, (uint64_t)t->step + 1);
    st = lmt_load_batch(t->plan, &t->gg, ids, targets, (int64_t)n, err);
    if (st == COL_OK)
        st = col_plan_upload(t->plan, t->seed, seed, sizeof *seed * n, err);
    free(seed);
    if (st == COL_OK)
        st = lmt_run(t, t->plan, &t->tier, 0, err);
    if (st == COL_OK && out)
        st = get_tokens(t, t->plan, t->gg.loss, out, err);
    return st;
}

col_status col_lm_trainer_apply(col_lm_trainer *t, float loss, col_lm_step_info *info, col_err *err)
{
    col_status st = per_token(t, "optimizer step", err);
    if (st != COL_OK)
        return st;
    lmt_step_clock clk;
    lmt_clock_start(t, &clk);
    if (t->tok_started) {
        clk.t0 = t->tok_t0;
        clk.wait0 = t->tok_wait0;
    }
    t->tok_started = false;
    return lmt_optimize(t, 1, loss, &clk, info, err);
}
