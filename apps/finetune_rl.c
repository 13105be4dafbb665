/* finetune_rl.c - colossal-finetune --method rm|dpo|simpo|orpo|kto|ppo|grpo: the method's data, the models beside
 * the one trained (reference, reward model, critic), and one step of the method (models/lm/rlhf_step.h,
 * rlhf_rollout.h). The run itself - output directory, progress, saving, Ctrl-C - is finetune.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finetune.h"
#include "timer.h"

struct ft_rl {
    col_rl_data *data;
    int64_t n, nval;            /* examples: the first n - nval train, the last nval are held out */
    int64_t *order, pos;        /* the training examples' order in this pass, and where it stands */
    uint64_t pass;
    col_rl_config cfg;
    col_rl_models m;
    col_lm_source ref_src, rew_src, crit_src;
    col_rl_rule *rule;
    col_rl_gen_opts gen;
    const col_rl_example **batch;
    int per_step;               /* examples (pairs, KTO examples, prompts) per step */
    int rows;                   /* rows of every session */
    int32_t pad;
    bool warned_cut;
};

static bool online(col_rl_method m) { return m == COL_RLM_PPO || m == COL_RLM_GRPO; }

int64_t ft_steps_done(const ft_run *r)
{
    int64_t s = col_lm_trainer_steps(r->tr);
    return r->rl && online(r->o.rl.method) ? s / r->o.rl.ppo_epochs : s;
}

int ft_rl_rows(const ft_opts *o)
{
    switch (o->rl.method) {
    case COL_RLM_RM: case COL_RLM_DPO: case COL_RLM_SIMPO: case COL_RLM_ORPO: return 2 * o->batch;
    case COL_RLM_KTO: return o->batch;
    case COL_RLM_PPO: case COL_RLM_GRPO: return o->rl.rollout_batch * o->rl.num_generations;
    default: return o->batch;
    }
}

void ft_rl_free(ft_run *r)
{
    ft_rl *x = r->rl;
    if (!x)
        return;
    col_rl_data_free(x->data);
    free(x->order);
    free(x->batch);
    col_lm_trainer_free(x->m.ref);
    col_lm_trainer_free(x->m.reward);
    col_lm_trainer_free(x->m.critic);
    col_lm_source_close(&x->ref_src);
    col_lm_source_close(&x->rew_src);
    col_lm_source_close(&x->crit_src);
    col_rl_rule_free(x->rule);
    free(x);
    r->rl = NULL;
}

/* the order of the training examples in pass p: shuffled with the seed, or in file order */
static void reorder(ft_rl *x, const ft_opts *o)
{
    int64_t n = x->n - x->nval;
    for (int64_t i = 0; i < n; i++)
        x->order[i] = i;
    if (!o->shuffle)
        return;
    uint64_t s = o->seed * 0x9E3779B97F4A7C15ull + x->pass + 1;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates with a splitmix64 stream */
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        int64_t j = (int64_t)(z % (uint64_t)(i + 1));
        int64_t t = x->order[i];
        x->order[i] = x->order[j];
        x->order[j] = t;
    }
}

col_status ft_rl_open_data(ft_run *r, col_chat_family fam, col_err *err)
{
    const ft_opts *o = &r->o;
    ft_rl *x = calloc(1, sizeof *x);
    if (!x)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    r->rl = x;
    if (!r->src.tok)
        return col_err_set_on(err, COL_SETTING_TOKENIZER, COL_EINVAL, "--method %s needs the model's tokenizer",
                              col_rl_method_name(o->rl.method));
    int32_t pad = col_tok_pad_id(r->src.tok);
    x->pad = pad >= 0 ? pad : col_tok_eos_id(r->src.tok);
    if (x->pad < 0)
        return col_err_set_on(err, COL_SETTING_TOKENIZER, COL_EINVAL, "the tokenizer has neither a padding nor an "
                              "end-of-sequence token to pad rows with");
    col_rl_data_opts dopts = {.family = fam, .append_eos = true, .max_bytes = o->data_max ? o->data_max : 0};
    col_status st = col_rl_data_load(o->data, col_rl_method_data(o->rl.method), r->src.tok, &dopts, &x->data, err);
    if (st != COL_OK)
        return st;
    x->n = col_rl_data_count(x->data);
    /* the output names the chat template only when conversations were rendered with it: prompts and completions
     * given as strings are the model's text as they are (a GRPO run on "2+3=" prompts stays a text completer) */
    bool chat = false;
    for (int64_t i = 0; i < x->n && !chat; i++)
        chat = col_rl_data_get(x->data, i)->chat;
    if (!chat)
        r->write_chat = false;
    x->nval = (int64_t)floor((double)x->n * o->val_percent / 100.0);
    bool online = o->rl.method == COL_RLM_PPO || o->rl.method == COL_RLM_GRPO;
    if (online)
        x->nval = 0; /* prompts: every one is for training */
    x->per_step = online ? o->rl.rollout_batch : o->batch;
    x->rows = ft_rl_rows(o);
    if (x->n - x->nval < x->per_step)
        return col_err_set(err, COL_EINVAL, "%s has %lld training examples (%lld held out by --val-percent); a step "
                           "takes %d: use a smaller --%s or more data", o->data, (long long)(x->n - x->nval),
                           (long long)x->nval, x->per_step, online ? "rollout-batch" : "batch");
    x->order = malloc(sizeof *x->order * (size_t)(x->n - x->nval));
    x->batch = calloc((size_t)x->per_step, sizeof *x->batch);
    if (!x->order || !x->batch)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    reorder(x, o);
    /* the run state's data identity: the examples' count and a hash of their tokens */
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < x->n; i++) {
        const col_rl_example *e = col_rl_data_get(x->data, i);
        const int32_t *parts[3] = {e->prompt, e->a, e->b};
        int lens[3] = {e->n_prompt, e->n_a, e->n_b};
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < lens[k]; j++)
                h = (h ^ (uint64_t)(uint32_t)parts[k][j]) * 1099511628211ull;
    }
    r->state.data_tokens = (uint64_t)x->n;
    r->state.data_hash = h;
    return COL_OK;
}

/* an inference session (or, critic, a training one) of another model beside the policy */
static col_status side_session(ft_run *r, const char *dir, bool value, bool train, col_lm_source *src,
                               col_lm_trainer **out, const char *flag, col_err *err)
{
    col_status st = col_lm_source_open(dir, NULL, false, src, err);
    if (st != COL_OK)
        return col_err_prefix(err, "--%s", flag), st;
    if (!src->weights)
        return col_err_set(err, COL_EINVAL, "--%s %s: a model directory with weights is needed, not an architecture",
                           flag, dir);
    if (src->config.vocab_size != r->src.config.vocab_size && !value)
        return col_err_set(err, COL_EINVAL, "--%s %s has a vocabulary of %d tokens, MODEL %d: they must share the "
                           "tokenizer", flag, dir, src->config.vocab_size, r->src.config.vocab_size);
    bool was_value = src->config.value_head;
    if (value && !was_value && strcmp(flag, "critic-model") != 0)
        return col_err_set(err, COL_EINVAL, "--%s %s is a language model, not a reward model (train one with --method "
                           "rm)", flag, dir);
    col_lm_train_config tc = *col_lm_trainer_config(r->tr);
    tc.model = src->config;
    tc.model.dropout = 0;
    tc.model.value_head = value;
    tc.objective = value ? COL_LM_OBJ_VALUES : COL_LM_OBJ_TOKEN_LOGPROB;
    tc.inference = !train;
    tc.lora = (col_lora_config){0};
    if ((st = col_lm_trainer_create(&tc, &r->dev.be, out, err)) != COL_OK)
        return col_err_prefix(err, "--%s", flag), st;
    col_lm_load_report rep;
    st = col_lm_trainer_load_ex(*out, src->weights, value && !was_value ? COL_LOAD_NEW_VALUE_HEAD : 0, &rep, err);
    if (st != COL_OK)
        return col_err_prefix(err, "--%s %s", flag, dir), st;
    app_load_warnings(stderr, "colossal-finetune", &rep);
    return COL_OK;
}

col_status ft_rl_open_models(ft_run *r, col_err *err)
{
    const ft_opts *o = &r->o;
    const ft_rl_opts *ro = &o->rl;
    ft_rl *x = r->rl;
    col_rl_config *c = &x->cfg;
    c->method = ro->method;
    c->pref = (col_pref_cfg){.beta = ro->beta, .gamma = ro->gamma, .label_smoothing = ro->label_smoothing};
    c->kto = (col_kto_cfg){.beta = ro->beta, .desirable_weight = ro->desirable_weight,
                           .undesirable_weight = ro->undesirable_weight};
    c->grpo = (col_grpo_cfg){.beta = ro->beta, .eps_low = ro->clip_range, .eps_high = ro->clip_range,
                             .scale_rewards = true};
    c->ppo = (col_ppo_cfg){.kl_coef = ro->kl_coef, .clip_range = ro->clip_range, .value_clip = ro->value_clip,
                           .gamma = ro->gamma_discount, .lambda = ro->gae_lambda, .vf_coef = ro->vf_coef,
                           .score_clip = ro->score_clip, .whiten_advantages = true};
    x->m.policy = r->tr;
    x->m.no_ref = ro->no_ref;
    bool needs_ref = col_rl_method_uses_ref(ro->method) && !ro->no_ref &&
                     !(ro->method == COL_RLM_GRPO && ro->beta == 0);
    col_status st = COL_OK;
    if (needs_ref && (ro->ref_model[0] || o->lora_rank == 0)) /* LoRA without --ref-model: the base model itself */
        st = side_session(r, ro->ref_model[0] ? ro->ref_model : o->model, false, false, &x->ref_src, &x->m.ref,
                          "ref-model", err);
    if (st == COL_OK && ro->reward_model[0])
        st = side_session(r, ro->reward_model, true, false, &x->rew_src, &x->m.reward, "reward-model", err);
    if (st == COL_OK && ro->method == COL_RLM_PPO)
        st = side_session(r, ro->critic_model[0] ? ro->critic_model : ro->reward_model, true, true, &x->crit_src,
                          &x->m.critic, "critic-model", err);
    if (st == COL_OK && ro->reward[0])
        st = col_rl_rule_new(ro->reward, &x->rule, err);
    col_lm_trainer *side[] = {x->m.ref, x->m.reward, x->m.critic}; /* their memory joins the bound */
    for (int i = 0; i < 3 && st == COL_OK; i++)
        if (side[i])
            mw_add_session(&r->mw, side[i]);
    if (st != COL_OK)
        return st;
    x->gen = (col_rl_gen_opts){.G = ro->num_generations, .max_new = ro->max_new_tokens, .eos = col_tok_eos_id(r->src.tok),
                               .pad = x->pad};
    x->gen.sample = col_sample_defaults();
    x->gen.sample.temperature = ro->temperature;
    x->gen.sample.top_k = ro->top_k;
    x->gen.sample.top_p = ro->top_p;
    x->gen.sample.seed = o->seed;
    return col_sample_check(&x->gen.sample, err);
}

/* the next per_step training examples (a new pass, reshuffled, when the last one is used up) */
static void next_batch(ft_run *r)
{
    ft_rl *x = r->rl;
    int64_t n = x->n - x->nval;
    for (int i = 0; i < x->per_step; i++) {
        if (x->pos == n) {
            x->pass++;
            x->pos = 0;
            reorder(x, &r->o);
        }
        x->batch[i] = col_rl_data_get(x->data, x->order[x->pos++]);
    }
}

static double tokens_of(const ft_rl *x, bool pairs)
{
    double t = 0;
    for (int i = 0; i < x->per_step; i++)
        t += x->batch[i]->n_prompt * (pairs ? 2 : 1) + x->batch[i]->n_a + (pairs ? x->batch[i]->n_b : 0);
    return t;
}

/* --json: the method's figures of the step, one object */
static void json_stats(long long step, const char *method, const char *const *names, const double *v, int n)
{
    printf("{\"step\":%lld,\"method\":\"%s\"", step, method);
    for (int i = 0; i < n; i++)
        printf(",\"%s\":%.9g", names[i], isfinite(v[i]) ? v[i] : 0.0);
    printf("}\n");
    fflush(stdout);
}

col_status ft_rl_step(ft_run *r, col_lm_step_info *info, double *tokens, char *line, size_t n, col_err *err)
{
    ft_rl *x = r->rl;
    const ft_opts *o = &r->o;
    const char *method = col_rl_method_name(x->cfg.method);
    line[0] = 0;
    next_batch(r);
    col_status st;
    long long step = (long long)col_lm_trainer_steps(r->tr) + 1;
    if (x->cfg.method == COL_RLM_PPO || x->cfg.method == COL_RLM_GRPO) {
        col_rl_rollout ro = {0};
        col_rl_pg_out out = {0};
        st = col_rl_generate(r->tr, &r->sampler, &x->gen, x->batch, x->per_step, &ro, err);
        if (st == COL_OK)
            st = x->rule ? col_rl_rule_score(x->rule, r->src.tok, x->batch, &ro, err) : col_rl_model_score(&x->m, &ro, err);
        if (st == COL_OK)
            st = col_rl_prepare(&x->cfg, &x->m, &ro, &out, err);
        double t0 = col_seconds();
        for (int e = 0; e < o->rl.ppo_epochs && st == COL_OK; e++)
            st = col_rl_update(&x->cfg, &x->m, &ro, true, info, &out, err);
        double train_s = col_seconds() - t0;
        info->step = ft_steps_done(r);
        if (st == COL_OK) {
            double mean = 0, var = 0, len = 0;
            for (int i = 0; i < ro.rows.B; i++)
                mean += ro.scores[i] / ro.rows.B, len += (double)ro.rows.nc[i] / ro.rows.B;
            for (int i = 0; i < ro.rows.B; i++)
                var += (ro.scores[i] - mean) * (ro.scores[i] - mean) / ro.rows.B;
            double v[] = {out.loss, mean, sqrt(var), out.rl.kl, out.rl.clip_frac, out.value_loss, ro.entropy, len,
                          ro.gen_s, (double)ro.generated / (ro.gen_s > 0 ? ro.gen_s : 1), train_s};
            static const char *const names[] = {"loss", "reward_mean", "reward_std", "kl", "clip_fraction",
                                                "value_loss", "entropy", "response_length", "gen_s", "gen_tok_per_s",
                                                "train_s"};
            if (o->json)
                json_stats(step, method, names, v, (int)(sizeof v / sizeof v[0]));
            snprintf(line, n, "reward %.3f (sd %.3f)  kl %.4f  clip %.2f  len %.1f  gen %.0f tok/s", mean, sqrt(var),
                     out.rl.kl, out.rl.clip_frac, len, v[9]);
            *tokens = (double)ro.generated;
        }
        col_rl_rollout_free(&ro);
        return st;
    }
    col_rl_pref_out out;
    if (x->cfg.method == COL_RLM_KTO)
        st = col_rl_kto_step(&x->cfg, &x->m, x->batch, x->per_step, x->pad, COL_RL_APPLY, info, &out, err);
    else
        st = col_rl_pref_step(&x->cfg, &x->m, x->batch, x->per_step, x->pad, COL_RL_APPLY, info, &out, err);
    if (st != COL_OK)
        return st;
    *tokens = tokens_of(x, x->cfg.method != COL_RLM_KTO);
    if (out.cut && !x->warned_cut) {
        x->warned_cut = true;
        fprintf(stderr, "colossal-finetune: note: completions longer than --seq %d allows are cut (%d tokens in step "
                "%lld); raise --seq to train on them whole\n", o->seq, out.cut, step);
    }
    double v[] = {out.loss, out.pref.chosen_reward, out.pref.rejected_reward, out.pref.margin, out.pref.accuracy};
    static const char *const names[] = {"loss", "reward_chosen", "reward_rejected", "margin", "accuracy"};
    if (o->json)
        json_stats(step, method, names, v, 5);
    snprintf(line, n, "margin %.4f  accuracy %.2f", out.pref.margin, out.pref.accuracy);
    return COL_OK;
}

bool ft_rl_can_eval(const ft_run *r)
{
    const ft_rl *x = r->rl;
    return x && x->nval >= x->per_step && x->cfg.method != COL_RLM_KTO && x->cfg.method != COL_RLM_PPO &&
           x->cfg.method != COL_RLM_GRPO;
}

col_status ft_rl_eval(ft_run *r, ft_rl_eval_out *e, col_err *err)
{
    ft_rl *x = r->rl;
    memset(e, 0, sizeof *e);
    int64_t nb = x->nval / x->per_step;
    if (nb > r->o.eval_batches)
        nb = r->o.eval_batches;
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < x->per_step; i++)
            x->batch[i] = col_rl_data_get(x->data, x->n - x->nval + b * x->per_step + i);
        col_rl_pref_out out;
        col_status st = col_rl_pref_step(&x->cfg, &x->m, x->batch, x->per_step, x->pad, COL_RL_EVAL, NULL, &out, err);
        if (st != COL_OK)
            return st;
        e->loss += out.loss / (double)nb;
        e->margin += out.pref.margin / (double)nb;
        e->accuracy += out.pref.accuracy / (double)nb;
    }
    e->batches = (int)nb;
    return COL_OK;
}

col_status ft_rl_eval_only(ft_run *r, col_err *err)
{
    ft_rl *x = r->rl;
    const ft_opts *o = &r->o;
    if (col_rl_method_data(x->cfg.method) != COL_RL_PAIRS)
        return col_err_set(err, COL_EINVAL, "--eval-only takes pair data (--method rm, dpo, simpo or orpo)");
    double loss = 0, margin = 0, acc = 0;
    int64_t nb = x->n / x->per_step, left = x->n - nb * x->per_step;
    if (left)
        fprintf(stderr, "colossal-finetune: note: the last %lld pairs do not fill a batch of %d and are left out\n",
                (long long)left, x->per_step);
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < x->per_step; i++)
            x->batch[i] = col_rl_data_get(x->data, b * x->per_step + i);
        col_rl_pref_out out;
        col_status st = col_rl_pref_step(&x->cfg, &x->m, x->batch, x->per_step, x->pad, COL_RL_EVAL, NULL, &out, err);
        if (st != COL_OK)
            return st;
        loss += out.loss / (double)nb;
        margin += out.pref.margin / (double)nb;
        acc += out.pref.accuracy / (double)nb;
        if (x->cfg.method != COL_RLM_RM)
            continue;
        double *rw = malloc(sizeof *rw * 2 * (size_t)x->per_step); /* every pair's rewards */
        if (!rw)
            return col_err_set(err, COL_ENOMEM, "out of memory");
        st = col_rl_rm_score(&x->m, x->batch, x->per_step, x->pad, rw, err);
        for (int i = 0; i < x->per_step && st == COL_OK; i++) {
            long long line = (long long)x->batch[i]->line;
            if (o->json)
                printf("{\"line\":%lld,\"chosen\":%.9g,\"rejected\":%.9g}\n", line, rw[2 * i], rw[2 * i + 1]);
            else
                printf("line %lld: chosen %.4f  rejected %.4f\n", line, rw[2 * i], rw[2 * i + 1]);
        }
        free(rw);
        if (st != COL_OK)
            return st;
    }
    if (o->json)
        printf("{\"pairs\":%lld,\"loss\":%.9g,\"margin\":%.9g,\"accuracy\":%.9g}\n", (long long)(nb * x->per_step), loss,
               margin, acc);
    else
        printf("%lld pairs: loss %.6f  margin %.4f  accuracy %.3f\n", (long long)(nb * x->per_step), loss, margin, acc);
    return COL_OK;
}

void ft_rl_publish(const ft_run *r, mt_stats_data *d)
{
    const ft_rl *x = r->rl;
    if (!x)
        return;
    mt_stats_add_model(d, x->cfg.method == COL_RLM_RM ? "reward model (trained)" : "policy", col_lm_trainer_pool(r->tr),
                       true);
    if (x->m.ref)
        mt_stats_add_model(d, "reference", col_lm_trainer_pool(x->m.ref), false);
    if (x->m.reward)
        mt_stats_add_model(d, "reward model", col_lm_trainer_pool(x->m.reward), false);
    if (x->m.critic)
        mt_stats_add_model(d, "critic", col_lm_trainer_pool(x->m.critic), false);
}
