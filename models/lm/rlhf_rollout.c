/* rlhf_rollout.c - PPO and GRPO: rollouts, their rewards and the policy-gradient updates (rlhf_rollout.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "rlhf_rollout.h"

#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "timer.h"

void col_rl_rollout_free(col_rl_rollout *r)
{
    col_rl_rows_free(&r->rows);
    free(r->old_logp);
    free(r->ref_logp);
    free(r->old_values);
    free(r->adv);
    free(r->ret);
    free(r->rewards);
    free(r->mask);
    free(r->scores);
    memset(r, 0, sizeof *r);
}

/* the rows of P prompts x G completions in the policy's shape */
static col_status rollout_init(col_lm_trainer *policy, int P, int G, col_rl_rollout *out, col_err *err)
{
    col_rl_rollout_free(out);
    const col_lm_train_config *tc = col_lm_trainer_config(policy);
    if (P < 1 || G < 1 || (int64_t)P * G != tc->batch)
        return col_err_set(err, COL_EINVAL, "rollout: %d prompts x %d completions do not fill the policy's rows of %d",
                           P, G, tc->batch);
    out->P = P;
    out->G = G;
    col_status st = col_rl_rows_init(&out->rows, P * G, tc->seq, err);
    if (st == COL_OK && !(out->scores = calloc((size_t)(P * G), sizeof *out->scores)))
        st = col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    return st;
}

/* the entropy (nats) of softmax(logits) */
static double entropy_of(const float *x, int V)
{
    double m = -INFINITY, z = 0, s = 0;
    for (int v = 0; v < V; v++)
        if (x[v] > m)
            m = x[v];
    for (int v = 0; v < V; v++) {
        double e = exp((double)x[v] - m);
        z += e;
        s += e * ((double)x[v] - m);
    }
    return log(z) - s / z;
}

col_status col_rl_generate(col_lm_trainer *policy, col_sampler *s, col_rl_gen_opts *o,
                           const col_rl_example *const *prompts, int P, col_rl_rollout *out, col_err *err)
{
    col_status st = rollout_init(policy, P, o->G, out, err);
    if (st != COL_OK)
        return st;
    if (o->max_new < 1)
        return col_err_set(err, COL_EINVAL, "rollout: %d new tokens per completion (at least 1)", o->max_new);
    int T = out->rows.T, V = col_lm_trainer_config(policy)->model.vocab_size;
    int32_t *ctx = malloc(sizeof *ctx * (size_t)T);
    if (!ctx)
        return col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    double t0 = col_seconds(), ent = 0;
    for (int p = 0; p < P && st == COL_OK; p++) {
        const col_rl_example *e = prompts[p];
        if (e->n_prompt < 1 || e->n_prompt + o->max_new > T) {
            st = col_err_set(err, COL_EINVAL, "line %lld: a prompt of %d tokens and %d new ones do not fit rows of %d "
                             "tokens", (long long)e->line, e->n_prompt, o->max_new, T);
            break;
        }
        memcpy(ctx, e->prompt, sizeof *ctx * (size_t)e->n_prompt);
        for (int g = 0; g < o->G && st == COL_OK; g++) {
            const float *logits;
            int n = 0;
            st = col_lm_trainer_decode_reset(policy, e->n_prompt + o->max_new, err);
            if (st == COL_OK)
                st = col_lm_trainer_decode(policy, e->prompt, e->n_prompt, &logits, err);
            while (st == COL_OK && n < o->max_new) {
                int32_t tok;
                ent += entropy_of(logits, V);
                st = col_sample(s, logits, ctx, e->n_prompt + n, &o->sample, o->draws++, &tok, err);
                if (st != COL_OK)
                    break;
                ctx[e->n_prompt + n++] = tok;
                out->generated++;
                if (tok == o->eos) {
                    out->stopped++;
                    break;
                }
                if (n < o->max_new)
                    st = col_lm_trainer_decode(policy, &tok, 1, &logits, err);
            }
            if (st == COL_OK)
                st = col_rl_rows_set(&out->rows, p * o->G + g, e->prompt, e->n_prompt, ctx + e->n_prompt, n, o->pad,
                                     NULL, err);
        }
    }
    free(ctx);
    out->entropy = out->generated ? ent / (double)out->generated : 0;
    out->gen_s = col_seconds() - t0;
    return st;
}

col_status col_rl_rollout_set(col_lm_trainer *policy, const col_rl_example *const *prompts, int P, int G,
                              const int32_t *const *comps, const int *n, int32_t pad, col_rl_rollout *out,
                              col_err *err)
{
    col_status st = rollout_init(policy, P, G, out, err);
    for (int i = 0; i < P * G && st == COL_OK; i++) {
        int cut;
        const col_rl_example *e = prompts[i / G];
        st = col_rl_rows_set(&out->rows, i, e->prompt, e->n_prompt, comps[i], n[i], pad, &cut, err);
        if (st == COL_OK && cut)
            st = col_err_set(err, COL_EINVAL, "rollout: completion %d does not fit rows of %d tokens", i, out->rows.T);
        out->generated += n[i];
    }
    return st;
}

/* ---- rewards ---- */

struct col_rl_rule {
    bool exact;
    pcre2_code *re;
};

col_status col_rl_rule_new(const char *spec, col_rl_rule **out, col_err *err)
{
    *out = NULL;
    col_rl_rule *r = calloc(1, sizeof *r);
    if (!r)
        return col_err_set(err, COL_ENOMEM, "reward rule: out of memory");
    if (strcmp(spec, "exact") == 0) {
        r->exact = true;
    } else if (strncmp(spec, "regex:", 6) == 0) {
        int code;
        PCRE2_SIZE off;
        r->re = pcre2_compile((PCRE2_SPTR)(spec + 6), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &off, NULL);
        if (!r->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            free(r);
            return col_err_set(err, COL_EINVAL, "reward rule: the pattern \"%.200s\" is not a regular expression: %s "
                               "at offset %zu", spec + 6, (const char *)msg, (size_t)off);
        }
    } else {
        free(r);
        return col_err_set(err, COL_EINVAL, "reward rule \"%.200s\": exact or regex:PATTERN", spec);
    }
    *out = r;
    return COL_OK;
}

void col_rl_rule_free(col_rl_rule *r)
{
    if (r)
        pcre2_code_free(r->re);
    free(r);
}

/* s[0..*n) with surrounding whitespace trimmed: returns the start */
static const char *trim(const char *s, size_t *n)
{
    while (*n && isspace((unsigned char)*s))
        s++, (*n)--;
    while (*n && isspace((unsigned char)s[*n - 1]))
        (*n)--;
    return s;
}

static bool same_trimmed(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    a = trim(a, &na);
    b = trim(b, &nb);
    return na == nb && memcmp(a, b, na) == 0;
}

static col_status rule_one(const col_rl_rule *r, const char *text, size_t len, const char *gt, float *score,
                           col_err *err)
{
    *score = 0;
    if (r->exact) {
        if (!gt)
            return col_err_set(err, COL_EINVAL, "the exact-answer reward needs a gt_answer in every prompt");
        *score = same_trimmed(text, len, gt) ? 1.0f : 0.0f;
        return COL_OK;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
    if (!md)
        return col_err_set(err, COL_ENOMEM, "reward rule: out of memory");
    int rc = pcre2_match(r->re, (PCRE2_SPTR)text, len, 0, 0, md, NULL);
    if (rc > 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int g = rc > 1 ? 1 : 0; /* the first capture group, else the whole match */
        if (ov[2 * g] == PCRE2_UNSET)
            g = 0;
        *score = !gt || same_trimmed(text + ov[2 * g], ov[2 * g + 1] - ov[2 * g], gt) ? 1.0f : 0.0f;
    } else if (rc != PCRE2_ERROR_NOMATCH && rc != PCRE2_ERROR_BADUTFOFFSET && rc > PCRE2_ERROR_UTF8_ERR1) {
        pcre2_match_data_free(md);
        return col_err_set(err, COL_EINVAL, "reward rule: matching failed (PCRE2 error %d)", rc);
    }
    pcre2_match_data_free(md);
    return COL_OK;
}

col_status col_rl_rule_score(const col_rl_rule *r, const col_tokenizer *tok, const col_rl_example *const *prompts,
                             col_rl_rollout *ro, col_err *err)
{
    col_status st = COL_OK;
    for (int i = 0; i < ro->rows.B && st == COL_OK; i++) {
        const int32_t *c = ro->rows.ids + (size_t)i * (size_t)ro->rows.T + ro->rows.np[i];
        char *text = NULL;
        size_t len = 0;
        st = col_tok_decode(tok, c, (size_t)ro->rows.nc[i], true, &text, &len, err);
        if (st == COL_OK)
            st = rule_one(r, text, len, prompts[i / ro->G]->gt_answer, &ro->scores[i], err);
        if (st != COL_OK)
            col_err_prefix(err, "line %lld", (long long)prompts[i / ro->G]->line);
        free(text);
    }
    return st;
}

col_status col_rl_model_score(const col_rl_models *m, col_rl_rollout *ro, col_err *err)
{
    if (!m->reward)
        return col_err_set(err, COL_EINVAL, "rollout: no reward model to score the completions");
    size_t n = (size_t)ro->rows.B * (size_t)ro->rows.T;
    float *v = malloc(sizeof *v * n);
    if (!v)
        return col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    col_status st = col_lm_trainer_forward_tokens(m->reward, ro->rows.ids, NULL, 0, v, err);
    for (int i = 0; i < ro->rows.B && st == COL_OK; i++)
        ro->scores[i] = v[col_rl_rows_reward_pos(&ro->rows, i)];
    free(v);
    return st;
}

/* ---- updates ---- */

/* a session's per-token outputs of the rollout's rows, in the [rows, W] layout (mask when not NULL) */
static col_status span_values(col_lm_trainer *t, const col_rl_rollout *ro, unsigned flags, float *out, uint8_t *mask,
                              col_err *err)
{
    size_t n = (size_t)ro->rows.B * (size_t)ro->rows.T;
    float *v = malloc(sizeof *v * n);
    if (!v)
        return col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    const col_lm_train_config *tc = col_lm_trainer_config(t);
    col_status st = col_lm_trainer_forward_tokens(t, ro->rows.ids, tc->objective == COL_LM_OBJ_VALUES ? NULL
                                                                                                       : ro->rows.tg,
                                                  flags, v, err);
    if (st == COL_OK)
        col_rl_rows_gather(&ro->rows, v, ro->W, out, mask);
    free(v);
    return st;
}

col_status col_rl_prepare(const col_rl_config *c, const col_rl_models *m, col_rl_rollout *ro, col_rl_pg_out *out,
                          col_err *err)
{
    memset(out, 0, sizeof *out);
    bool ppo = c->method == COL_RLM_PPO;
    if (!ppo && c->method != COL_RLM_GRPO)
        return col_err_set(err, COL_EINVAL, "rollout: %s is not an online method", col_rl_method_name(c->method));
    int B = ro->rows.B;
    ro->W = col_rl_rows_width(&ro->rows);
    size_t n = (size_t)B * (size_t)ro->W;
    ro->old_logp = malloc(sizeof(float) * n);
    ro->ref_logp = calloc(n, sizeof(float));
    ro->mask = malloc(n);
    ro->adv = calloc(ppo ? n : (size_t)B, sizeof(float));
    if (ppo) {
        ro->old_values = malloc(sizeof(float) * n);
        ro->ret = malloc(sizeof(float) * n);
        ro->rewards = malloc(sizeof(float) * n);
    }
    if (!ro->old_logp || !ro->ref_logp || !ro->mask || !ro->adv ||
        (ppo && (!ro->old_values || !ro->ret || !ro->rewards)))
        return col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    col_status st = span_values(m->policy, ro, 0, ro->old_logp, ro->mask, err);
    bool ref = ppo || c->grpo.beta != 0;
    if (st == COL_OK && ref && !m->no_ref) {
        if (m->ref)
            st = span_values(m->ref, ro, 0, ro->ref_logp, NULL, err);
        else if (col_lm_trainer_config(m->policy)->lora.rank > 0)
            st = span_values(m->policy, ro, COL_LM_FWD_BASE, ro->ref_logp, NULL, err);
        else
            st = col_err_set(err, COL_EINVAL, "rollout: the KL term needs a reference model and none was given");
    }
    if (st != COL_OK)
        return st;
    if (!ppo) {
        return col_grpo_advantages(ro->P, ro->G, ro->scores, c->grpo.scale_rewards, ro->adv, &out->rl, err);
    }
    if (!m->critic)
        return col_err_set(err, COL_EINVAL, "rollout: PPO needs a critic (a value model)");
    st = span_values(m->critic, ro, 0, ro->old_values, NULL, err);
    if (st == COL_OK)
        st = col_ppo_advantages(&c->ppo, B, ro->W, ro->old_logp, ro->ref_logp, ro->old_values, ro->mask, ro->scores,
                                ro->rewards, ro->adv, ro->ret, &out->rl, err);
    return st;
}

/* backward of t seeded with per-token derivatives d [rows, W], then the step when apply */
static col_status seeded(col_lm_trainer *t, const col_rl_rollout *ro, const float *d, double loss, bool apply,
                         col_lm_step_info *info, col_err *err)
{
    size_t n = (size_t)ro->rows.B * (size_t)ro->rows.T;
    float *dout = malloc(sizeof *dout * n);
    if (!dout)
        return col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    col_rl_rows_scatter(&ro->rows, d, ro->W, dout);
    const col_lm_train_config *tc = col_lm_trainer_config(t);
    col_lm_trainer_zero_grads(t);
    col_status st = col_lm_trainer_backward_tokens(t, ro->rows.ids, tc->objective == COL_LM_OBJ_VALUES ? NULL
                                                                                                          : ro->rows.tg,
                                                   dout, NULL, err);
    free(dout);
    if (st == COL_OK && apply)
        st = col_lm_trainer_apply(t, (float)loss, info, err);
    return st;
}

col_status col_rl_update(const col_rl_config *c, const col_rl_models *m, col_rl_rollout *ro, bool apply,
                         col_lm_step_info *info, col_rl_pg_out *out, col_err *err)
{
    bool ppo = c->method == COL_RLM_PPO;
    /* the loss functions write their own figures; prepare's (the rewards, PPO's KL) stay */
    size_t n = (size_t)ro->rows.B * (size_t)ro->W;
    float *logp = malloc(sizeof(float) * n), *dlogp = malloc(sizeof(float) * n);
    float *values = ppo ? malloc(sizeof(float) * n) : NULL, *dvalues = ppo ? malloc(sizeof(float) * n) : NULL;
    col_status st = COL_OK;
    if (!logp || !dlogp || (ppo && (!values || !dvalues)))
        st = col_err_set(err, COL_ENOMEM, "rollout: out of memory");
    if (st == COL_OK)
        st = span_values(m->policy, ro, 0, logp, NULL, err);
    if (st == COL_OK && ppo)
        st = span_values(m->critic, ro, 0, values, NULL, err);
    if (st == COL_OK && ppo)
        st = col_ppo_loss(&c->ppo, ro->rows.B, ro->W, logp, ro->old_logp, values, ro->old_values, ro->adv, ro->ret,
                          ro->mask, &out->loss, &out->value_loss, dlogp, dvalues, &out->rl, err);
    else if (st == COL_OK)
        st = col_grpo_loss(&c->grpo, ro->rows.B, ro->W, logp, ro->old_logp, ro->ref_logp, ro->mask, ro->adv,
                           &out->loss, dlogp, &out->rl, err);
    if (st == COL_OK)
        st = seeded(m->policy, ro, dlogp, out->loss, apply, info, err);
    if (st == COL_OK && ppo) {
        col_lm_step_info vinfo;
        st = seeded(m->critic, ro, dvalues, out->value_loss, apply, &vinfo, err);
    }
    free(logp);
    free(dlogp);
    free(values);
    free(dvalues);
    return st;
}
