/* rlhf_loss.h - the RLHF objectives as host functions on log-probabilities.
 *
 * Each function takes the log-probabilities a model gave (per completion as a
 * sum over its tokens for the preference methods, per token for GRPO and
 * PPO), returns the loss, and writes the exact derivative of that loss with
 * respect to each input. The caller turns the derivatives into a seeded
 * backward pass through the model: every completion token of pair i gets the
 * seed dpc[i] (its sum's derivative), every token (b, t) of a GRPO / PPO batch
 * gets dlogp[b*T + t]. The formulas are those of TRL 1.16 (docs/RLHF.md writes
 * each one down with the TRL option it corresponds to); the tests compare
 * with TRL's own code run under torch autograd in double precision.
 *
 * Arrays are row-major; [B, T] is B rows of T positions. mask[b*T + t] = 1 marks
 * a completion token (GRPO, PPO); positions with mask 0 are never read for
 * log-probabilities or values and get derivative 0. The preference functions
 * work in double; GRPO and PPO read float tensors, compute in double and write
 * float derivatives.
 *
 * Every function checks its arguments (counts, NULL arrays, non-finite
 * values, settings out of range) and fails with COL_EINVAL and one line in
 * err; statistics (col_*_stats) are optional (NULL: not computed). */
#ifndef COL_RLHF_LOSS_H
#define COL_RLHF_LOSS_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

/* ---- preference losses on per-pair sums of completion-token log-probs ---- */

typedef enum {
    COL_PREF_DPO,   /* TRL DPOTrainer, loss_type "sigmoid" (robust: "robust") */
    COL_PREF_SIMPO, /* TRL CPOTrainer, loss_type "simpo", cpo_alpha 0 */
    COL_PREF_ORPO,  /* TRL ORPOTrainer */
    COL_PREF_RM     /* TRL RewardTrainer: Bradley-Terry on the two rewards, no margin, no centering */
} col_pref_kind;

/* beta: the temperature (DPO, SimPO, ORPO's lambda); gamma: SimPO's target
 * margin in reward units, loss = -log sigmoid(beta*(avg_c - avg_r) - gamma)
 * (TRL's simpo_gamma is this same gamma); label_smoothing (DPO, SimPO): the
 * conservative form -(1-e) log s(z) - e log s(-z) (TRL's CPO "sigmoid" /
 * "simpo"), or with robust (DPO only) TRL 1.16's "robust" loss
 * (-(1-e) log s(z) + e log s(-z)) / (1 - 2e). RM reads no setting (c may be
 * NULL). */
typedef struct {
    double beta, gamma, label_smoothing;
    bool robust;
} col_pref_cfg;

typedef struct {
    int n;                 /* pairs */
    const double *pc, *pr; /* policy log-prob sums of the chosen / rejected completions; RM: the rewards */
    const double *rc, *rr; /* reference sums (DPO); both NULL: reference-free (the log-ratio against nothing) */
    const int *nc, *nr;    /* completion token counts (SimPO and ORPO average: avg = sum / count) */
    /* ORPO's NLL term, as TRL computes it: the cross-entropy of the chosen
     * sequences over every non-padding target token, prompt included, one mean
     * over all those tokens of the batch: nll = -sum(pnll) / sum(nnll).
     * pnll[i]: the sum of the policy log-probs of chosen sequence i's NLL
     * tokens, nnll[i] their count (>= 0, sum > 0). Unused by the others. */
    const double *pnll;
    const int *nnll;
} col_pref_batch;

/* Means over the pairs, as TRL logs them (rewards/chosen, rewards/rejected,
 * rewards/margins, rewards/accuracies, logps/chosen, logps/rejected). */
typedef struct {
    double loss;
    double chosen_reward, rejected_reward, margin, accuracy; /* KTO: accuracy NaN (TRL logs none) */
    double chosen_logp, rejected_logp;    /* mean policy log-prob (sum; SimPO, ORPO: the per-token average) */
    double nll_loss;                      /* ORPO: the NLL term */
    double log_odds_ratio, log_odds_chosen; /* ORPO: mean log sigmoid(log odds), mean log odds */
    double dnll;                          /* ORPO: d loss / d (each NLL token's log-prob) = -1 / sum(nnll) */
    double kl;                            /* KTO: the KL estimate used */
} col_pref_stats;

/* loss = the mean over pairs (ORPO: plus the NLL term, TRL's
 * nll - mean(beta * log sigmoid(log odds))); dpc[i], dpr[i] = d loss / d pc[i],
 * d pr[i] (RM: d loss / d reward). ORPO's NLL tokens each get the seed s->dnll
 * = -1 / sum(nnll) on top (a completion token of a chosen sequence gets both). */
col_status col_pref_loss(col_pref_kind k, const col_pref_cfg *c, const col_pref_batch *b, double *dpc,
                         double *dpr, col_pref_stats *s, col_err *err);

/* ---- KTO (TRL KTOTrainer, loss_type "kto") ---- */

typedef struct {
    double beta, desirable_weight, undesirable_weight;
} col_kto_cfg;

/* The detached KL estimate from the mismatched (prompt, completion) pairs:
 * max(mean(p_kl - r_kl), 0). NaN when n <= 0 or an array is NULL. */
double col_kto_kl(int n, const double *p_kl, const double *r_kl);

/* Per-example sums p (policy), r (reference), labels desirable[i]; kl the
 * estimate above (any finite value, held constant). loss = mean over the n
 * examples of w_d (1 - s(beta (x - kl))) (desirable) or
 * w_u (1 - s(beta (kl - x))) (undesirable), x = p - r; dp[i] = d loss / d p[i].
 * Stats: rewards means over each class (NaN for a class with no example),
 * margin their difference. */
col_status col_kto_loss(const col_kto_cfg *c, int n, const double *p, const double *r, const bool *desirable,
                        double kl, double *dp, col_pref_stats *s, col_err *err);

/* ---- policy-gradient statistics (GRPO and PPO) ----
 * Each function writes only the fields it knows (listed with it): zero the
 * struct once, then call the advantage and the loss functions. */
typedef struct {
    double reward_mean, reward_std; /* GRPO: of the rewards (NaN skipped; std with Bessel); PPO: of the clipped scores */
    double frac_reward_zero_std;    /* GRPO: share of completions whose group's reward std is ~0 */
    double kl;                      /* GRPO: masked mean of the per-token k3 KL; PPO: mean over rows of the row's k1 KL sum */
    double entropy;                 /* PPO: mean over rows of the row's sum of -old_logp (TRL's objective/entropy) */
    double non_score_reward, rlhf_reward; /* PPO: mean row sum of -kl_coef * kl; that plus the mean score */
    double response_length;         /* mean completion tokens per row */
    double policy_loss, value_loss; /* the loss terms (value_loss before vf_coef) */
    double clip_frac;               /* GRPO: clip_ratio/region_mean; PPO: policy/clipfrac_avg */
    double clip_low, clip_high;     /* GRPO: clip_ratio/low_mean, high_mean */
    double clip_low_min, clip_high_max; /* GRPO: min over rows of the row's low-clipped share, max of high */
    double value_clip_frac;         /* PPO: val/clipfrac_avg */
    double approx_kl;               /* masked mean of 0.5 (logp - old_logp)^2 */
    double ratio_mean;              /* masked mean of exp(logp - old_logp) */
} col_rl_stats;

/* ---- GRPO (TRL GRPOTrainer, loss_type "grpo", token-level importance ratio) ---- */

/* beta: the k3 KL coefficient (0: no reference needed); eps_low, eps_high:
 * the ratio clip [1 - eps_low, 1 + eps_high]; scale_rewards: divide by the
 * group's std (TRL scale_rewards "group"; false: "none"). */
typedef struct {
    double beta, eps_low, eps_high;
    bool scale_rewards;
} col_grpo_cfg;

/* rewards[g*G + j]: completion j of prompt g. adv = (r - mean_g) / (std_g + 1e-4)
 * (std with Bessel's correction, G = 1: std 0) or r - mean_g. A NaN reward is
 * an unscorable completion as in TRL: left out of its group's mean and std,
 * advantage 0 (as is every advantage of a group with fewer than two scorable
 * completions when scaling). Infinite rewards are refused.
 * Stats: reward_mean, reward_std, frac_reward_zero_std. */
col_status col_grpo_advantages(int n_groups, int G, const float *rewards, bool scale_rewards, float *adv,
                               col_rl_stats *s, col_err *err);

/* logp, old_logp, ref_logp, mask: [B, T]; adv: [B] (one per sequence).
 * old_logp NULL: on-policy (ratio 1, old = logp held constant); ref_logp may
 * be NULL when beta = 0. Per token: -min(r A, clip(r) A) + beta k3 with
 * r = exp(logp - old_logp), k3 = exp(ref - logp) - (ref - logp) - 1; loss = the
 * mean over the B rows of each row's mean over its completion tokens (a row
 * with none counts as 0). No division by gradient-accumulation steps (TRL
 * divides inside; the caller scales). dlogp: [B, T].
 * Stats: kl (when beta != 0), policy_loss, clip_frac, clip_low, clip_high,
 * clip_low_min, clip_high_max, approx_kl, ratio_mean, response_length. */
col_status col_grpo_loss(const col_grpo_cfg *c, int B, int T, const float *logp, const float *old_logp,
                         const float *ref_logp, const uint8_t *mask, const float *adv, double *loss, float *dlogp,
                         col_rl_stats *s, col_err *err);

/* ---- PPO (the formulas of TRL's former PPOTrainer, v0.11-v0.19; docs/RLHF.md) ---- */

/* kl_coef: per-token k1 KL penalty; clip_range: the policy ratio clip;
 * value_clip: the value clip around old_values (INFINITY: none); gamma,
 * lambda: GAE's discount and lambda; vf_coef: the value loss weight (in
 * dvalues); score_clip: the score is clipped to [-score_clip, score_clip]
 * (0 or INFINITY: not clipped); whiten_advantages: masked whitening of the
 * advantages (TRL always whitens). */
typedef struct {
    double kl_coef, clip_range, value_clip, gamma, lambda, vf_coef, score_clip;
    bool whiten_advantages;
} col_ppo_cfg;

/* The rollout's rewards, advantages and returns, [B, T] each (0 where mask is
 * 0): reward_t = -kl_coef (old_logp - ref_logp), plus the clipped score at
 * the row's last completion token; GAE runs backward over each row's
 * completion tokens (the masked-in positions, in order; the value after the
 * last is 0); returns = advantages + old_values, taken before whitening.
 * Every row needs a completion token; whitening needs two in all.
 * Stats: reward_mean, reward_std, kl, entropy, non_score_reward, rlhf_reward,
 * response_length. */
col_status col_ppo_advantages(const col_ppo_cfg *c, int B, int T, const float *old_logp, const float *ref_logp,
                              const float *old_values, const uint8_t *mask, const float *scores, float *rewards,
                              float *adv, float *returns, col_rl_stats *s, col_err *err);

/* One PPO update's losses on [B, T] inputs, masked means over the completion
 * tokens: policy_loss = mean max(-A r, -A clip(r, 1 -+ clip_range)),
 * value_loss = 0.5 mean max((v - R)^2, (clip(v, v_old -+ value_clip) - R)^2);
 * the total is policy_loss + vf_coef value_loss. dlogp = d policy_loss /
 * d logp (seeds the policy), dvalues = vf_coef d value_loss / d values (seeds
 * the critic). Stats: policy_loss, value_loss, clip_frac, value_clip_frac,
 * approx_kl, ratio_mean. */
col_status col_ppo_loss(const col_ppo_cfg *c, int B, int T, const float *logp, const float *old_logp,
                        const float *values, const float *old_values, const float *adv, const float *returns,
                        const uint8_t *mask, double *policy_loss, double *value_loss, float *dlogp, float *dvalues,
                        col_rl_stats *s, col_err *err);

#endif
