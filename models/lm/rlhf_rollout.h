/* rlhf_rollout.h - the online methods, PPO and GRPO: completions sampled from the policy (rollouts), scored by a
 * rule or a reward model, and the clipped policy-gradient steps on them (rlhf_step.h for the rows and models).
 *
 * A rollout of P prompts and G completions each fills P*G rows, row p*G+g. Generation runs the policy's key/value
 * cache decoder one sequence at a time (colossal-chat's), sampling with col_sample; a completion ends at the
 * end-of-sequence token (kept, so the policy learns to stop) or after max_new tokens. The rollout then holds,
 * per completion token (the [rows, W] layout of rlhf_loss.h, W the longest completion), the log-probabilities
 * of the policy that sampled it (old_logp) and of the reference, and for PPO the critic's values and the
 * advantages and returns. */
#ifndef COL_MODELS_RLHF_ROLLOUT_H
#define COL_MODELS_RLHF_ROLLOUT_H

#include "rlhf_step.h"
#include "tokenizer.h"

typedef struct {
    col_rl_rows rows;
    int P, G, W;
    float *old_logp, *ref_logp, *old_values, *adv, *ret, *rewards; /* [rows, W] (adv [rows] for GRPO) */
    uint8_t *mask;                                                  /* [rows, W] */
    float *scores;                                                  /* [rows] the completions' rewards */
    double entropy;       /* the mean entropy of the sampling distributions over the generated tokens (nats) */
    int64_t generated;    /* tokens generated */
    int64_t stopped;      /* completions that ended with the end-of-sequence token */
    double gen_s;         /* seconds spent generating */
} col_rl_rollout;

void col_rl_rollout_free(col_rl_rollout *r);

typedef struct {
    int G;                 /* completions per prompt (GRPO's group; PPO: 1 or more) */
    int max_new;           /* tokens per completion at most */
    col_sample_opts sample;
    int32_t eos, pad;
    uint64_t draws;        /* the sampler's draw counter: advanced by every token sampled (resumable) */
} col_rl_gen_opts;

/* Samples G completions for each of the P prompts (the policy's batch must be P*G rows; a prompt with no room
 * for max_new tokens in its rows is an error naming its line). */
col_status col_rl_generate(col_lm_trainer *policy, col_sampler *s, col_rl_gen_opts *o,
                           const col_rl_example *const *prompts, int P, col_rl_rollout *out, col_err *err);
/* Fills the rollout from given completions instead (tests, and replaying fixed rollouts): completion k of
 * prompt p is comps[p*G+k] (n[p*G+k] tokens). */
col_status col_rl_rollout_set(col_lm_trainer *policy, const col_rl_example *const *prompts, int P, int G,
                              const int32_t *const *comps, const int *n, int32_t pad, col_rl_rollout *out,
                              col_err *err);

/* Rewards by rule, for GRPO with verifiable answers: the completion's text (decoded, special tokens left out,
 * surrounding whitespace trimmed) against the prompt's gt_answer. exact: 1 when equal, else 0. regex: a PCRE2
 * pattern; with a gt_answer, 1 when the pattern's first capture group (the whole match without one) equals it,
 * without, 1 when the pattern matches. */
typedef struct col_rl_rule col_rl_rule;
/* spec: "exact" or "regex:PATTERN" */
col_status col_rl_rule_new(const char *spec, col_rl_rule **out, col_err *err);
void col_rl_rule_free(col_rl_rule *r);
col_status col_rl_rule_score(const col_rl_rule *r, const col_tokenizer *tok, const col_rl_example *const *prompts,
                             col_rl_rollout *ro, col_err *err);
/* Rewards from a reward model (m->reward): its value at each completion's last token. */
col_status col_rl_model_score(const col_rl_models *m, col_rl_rollout *ro, col_err *err);

/* What a PPO or GRPO update reports. */
typedef struct {
    double loss, value_loss;
    col_rl_stats rl;
} col_rl_pg_out;

/* Before the updates: the reference's log-probabilities (and, PPO, the critic's values, the per-token rewards,
 * advantages and returns) of the rollout; old_logp is the policy's now, the policy that sampled. */
col_status col_rl_prepare(const col_rl_config *c, const col_rl_models *m, col_rl_rollout *ro, col_rl_pg_out *out,
                          col_err *err);
/* One update of the policy (and PPO's critic) on the whole rollout; apply false: gradients only. */
col_status col_rl_update(const col_rl_config *c, const col_rl_models *m, col_rl_rollout *ro, bool apply,
                         col_lm_step_info *info, col_rl_pg_out *out, col_err *err);

#endif
