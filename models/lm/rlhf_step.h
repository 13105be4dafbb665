/* rlhf_step.h - one training step of each RLHF method on language-model sessions (lm_trainer.h): examples
 * (rlhf_data.h) packed into rows, the per-token outputs of the policy, the reference and the value models, the
 * method's loss (rlhf_loss.h) and its derivative seeding the backward passes, then the optimizer step.
 *
 * Rows. A row holds a prompt and a completion, left-aligned, then padding. The policy's session ends in log
 * p(target) per position (COL_LM_OBJ_TOKEN_LOGPROB): position p scores token p+1 (every position before the
 * last real token has its target, padding -1), so a completion of nc tokens after np prompt tokens is scored at
 * positions [np-1, np-1+nc) - the row's span. Only the span is seeded (but ORPO's NLL term, which TRL takes over
 * the whole chosen sequence).
 * A value model (COL_LM_OBJ_VALUES) reads its value at the same positions (a critic: the value of the state
 * before each completion token, as TRL's PPO trainer), and a reward model at the row's last real token (np+nc-1,
 * transformers' last non-padding token).
 *
 * Sessions: every session of a step has the same [batch, seq]: the step's rows. The policy trains; the reference
 * and the reward model are inference sessions (or, for a LoRA policy, the reference is the policy's base model:
 * COL_LM_FWD_BASE); the critic trains with its own optimizer. */
#ifndef COL_MODELS_RLHF_STEP_H
#define COL_MODELS_RLHF_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "lm_trainer.h"
#include "rlhf_data.h"
#include "rlhf_loss.h"
#include "sampling.h"

typedef enum {
    COL_RLM_SFT, /* not an RLHF method: the plain language-model objective (colossal-finetune's default) */
    COL_RLM_RM,
    COL_RLM_DPO,
    COL_RLM_SIMPO,
    COL_RLM_ORPO,
    COL_RLM_KTO,
    COL_RLM_PPO,
    COL_RLM_GRPO,
} col_rl_method;

/* "sft", "rm", "dpo", ...; NULL outside the enum */
const char *col_rl_method_name(col_rl_method m);
col_status col_rl_method_parse(const char *name, col_rl_method *out, col_err *err);
/* what the method's data is (rlhf_data.h): pairs (rm, dpo, simpo, orpo), KTO examples, prompts (ppo, grpo) */
col_rl_kind col_rl_method_data(col_rl_method m);
/* whether the method compares with a reference model (dpo, kto, ppo, grpo with a KL term) */
bool col_rl_method_uses_ref(col_rl_method m);

typedef struct {
    col_rl_method method;
    col_pref_cfg pref;  /* rm, dpo, simpo, orpo */
    col_kto_cfg kto;
    col_grpo_cfg grpo;
    col_ppo_cfg ppo;
} col_rl_config;

typedef struct {
    col_lm_trainer *policy; /* objective COL_LM_OBJ_TOKEN_LOGPROB (rm: the reward model being trained, VALUES) */
    col_lm_trainer *ref;    /* an inference session of the reference (TOKEN_LOGPROB); NULL: the policy's base model
                               (LoRA), or no reference (simpo, orpo, dpo reference-free, grpo with beta 0) */
    bool no_ref;            /* dpo: reference-free (the reference's log-probabilities are 0) */
    col_lm_trainer *reward; /* ppo (and grpo without a rule): an inference session of the reward model (VALUES) */
    col_lm_trainer *critic; /* ppo: the value model being trained (VALUES) */
} col_rl_models;

/* ---- rows ---- */
typedef struct {
    int B, T;
    int32_t *ids, *tg;  /* [B, T] */
    int *np, *nc;       /* per row: prompt and completion tokens (0 and 0: an empty row, all padding) */
    int32_t pad;        /* the padding token (the last one given to col_rl_rows_set / _clear) */
} col_rl_rows;

col_status col_rl_rows_init(col_rl_rows *r, int B, int T, col_err *err);
void col_rl_rows_free(col_rl_rows *r);
/* Row i := prompt (np >= 1 tokens) + completion (nc >= 1), padded with pad. A completion that does not fit is cut
 * to fit (*cut, may be NULL, gets the tokens cut); a prompt that leaves no room for one completion token is an
 * error. */
col_status col_rl_rows_set(col_rl_rows *r, int i, const int32_t *prompt, int np, const int32_t *comp, int nc,
                           int32_t pad, int *cut, col_err *err);
void col_rl_rows_clear(col_rl_rows *r, int i, int32_t pad);
/* sum[i]: row i's per-token values tok [B, T] summed over its span */
void col_rl_rows_sum(const col_rl_rows *r, const float *tok, double *sum);
/* dout [B, T]: d[i] at every position of row i's span, 0 elsewhere */
void col_rl_rows_spread(const col_rl_rows *r, const double *d, float *dout);
/* the per-token values of row i's span, left-aligned into out [B, T'] rows of width W (the loss functions'
 * layout) and the mask; and back */
void col_rl_rows_gather(const col_rl_rows *r, const float *tok, int W, float *out, uint8_t *mask);
void col_rl_rows_scatter(const col_rl_rows *r, const float *in, int W, float *dout);
/* the longest span */
int col_rl_rows_width(const col_rl_rows *r);
/* Where a value model reads row i's reward: its last token that is not the padding token (transformers'
 * *ForSequenceClassification with config.pad_token_id; so with EOS as padding, the token before a final EOS),
 * its last token when all are padding. An index into [B, T]. */
size_t col_rl_rows_reward_pos(const col_rl_rows *r, int i);

/* What a step does: the forward passes and the loss only (evaluation), also the gradients (left in the trained
 * session), or also the optimizer step. */
typedef enum { COL_RL_EVAL, COL_RL_GRADS, COL_RL_APPLY } col_rl_mode;

/* ---- preference methods: rm, dpo, simpo, orpo ---- */
typedef struct {
    double loss;
    col_pref_stats pref;
    int cut;            /* completion tokens cut to fit the rows */
} col_rl_pref_out;

/* One step on n pairs: rows 0..n-1 the chosen completions, n..2n-1 the rejected (every session's batch is 2n). */
col_status col_rl_pref_step(const col_rl_config *c, const col_rl_models *m, const col_rl_example *const *ex, int n,
                            int32_t pad, col_rl_mode mode, col_lm_step_info *info, col_rl_pref_out *out, col_err *err);
/* The rewards of n pairs without training (rm: the model is m->policy): r[2i], r[2i+1] chosen, rejected. */
col_status col_rl_rm_score(const col_rl_models *m, const col_rl_example *const *ex, int n, int32_t pad, double *r,
                           col_err *err);

/* ---- KTO ---- */
/* One step on n examples (every session's batch is n): the KL estimate from the mismatched pairs (example i's
 * prompt with example i-1's completion, as TRL) through the policy and the reference without gradients. */
col_status col_rl_kto_step(const col_rl_config *c, const col_rl_models *m, const col_rl_example *const *ex, int n,
                           int32_t pad, col_rl_mode mode, col_lm_step_info *info, col_rl_pref_out *out, col_err *err);

#endif
