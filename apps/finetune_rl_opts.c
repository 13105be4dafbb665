/* finetune_rl_opts.c - colossal-finetune's RLHF options (--method and what each method takes), named as users know
 * them from ColossalChat and TRL, set by name from text like every other option (finetune_opts.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finetune.h"

/* name, takes a value; none may change on --resume (RLHF runs do not resume yet) */
const ft_rl_optdef ft_rl_optdefs[] = {
    {"method", true},         {"beta", true},          {"gamma", true},           {"label-smoothing", true},
    {"ref-model", true},      {"no-ref", false},       {"reward-model", true},    {"critic-model", true},
    {"kl-coef", true},        {"clip-range", true},    {"value-clip", true},      {"vf-coef", true},
    {"gae-lambda", true},     {"gamma-discount", true}, {"num-generations", true}, {"rollout-batch", true},
    {"ppo-epochs", true},     {"max-new-tokens", true}, {"temperature", true},    {"top-k", true},
    {"top-p", true},          {"reward", true},        {"desirable-weight", true}, {"undesirable-weight", true},
    {"score-clip", true},
};
const int ft_rl_noptdefs = (int)(sizeof ft_rl_optdefs / sizeof ft_rl_optdefs[0]);

const char ft_rl_help[] =
    "RLHF (--method; DATA is .jsonl in the method's form, see the README):\n"
    "  --method M             sft (default: the language-model loss) | rm (reward model) | dpo | simpo | orpo |\n"
    "                         kto | ppo | grpo; --batch is then pairs (rm, dpo, simpo, orpo) or examples (kto)\n"
    "                         per step\n"
    "  --beta B               dpo/kto 0.1, simpo 2.0, orpo (lambda) 0.1, grpo (KL coefficient) 0.04\n"
    "  --gamma G              simpo: the target margin in reward units (default 0.5)\n"
    "  --label-smoothing E    dpo, simpo: conservative labels (default 0)\n"
    "  --desirable-weight W --undesirable-weight W   kto (default 1, 1)\n"
    "  --ref-model DIR        the reference (default: a frozen copy of MODEL; with LoRA the base model with the\n"
    "                         adapters off, no second copy); --no-ref: reference-free dpo\n"
    "  --reward-model DIR     ppo (and grpo without --reward): a reward model (colossal-finetune --method rm's\n"
    "                         output, or any *ForSequenceClassification with one label)\n"
    "  --critic-model DIR     ppo: the critic's start (default: the reward model)\n"
    "  --reward exact|regex:PATTERN   grpo: score completions against each prompt's gt_answer\n"
    "  --rollout-batch P      ppo, grpo: prompts per rollout (default 4); --num-generations G completions per\n"
    "                         prompt (grpo default 4, ppo 1); --max-new-tokens N (default 32)\n"
    "  --temperature T --top-k K --top-p P   rollout sampling (defaults 1.0, 0, 1.0)\n"
    "  --ppo-epochs N         updates per rollout (default 1 for grpo, 4 for ppo)\n"
    "  --kl-coef K --clip-range E --value-clip V --vf-coef C --gae-lambda L --gamma-discount G --score-clip S\n"
    "                         ppo (defaults 0.05, 0.2, 0.2, 0.1, 0.95, 1.0, 0 = off); --clip-range is grpo's\n"
    "                         epsilon too\n";

void ft_rl_defaults(ft_rl_opts *r)
{
    memset(r, 0, sizeof *r);
    r->method = COL_RLM_SFT;
    r->beta = r->gamma = r->label_smoothing = NAN;
    r->desirable_weight = r->undesirable_weight = 1.0f;
    r->kl_coef = 0.05f;
    r->clip_range = 0.2f;
    r->value_clip = 0.2f;
    r->vf_coef = 0.1f;
    r->gae_lambda = 0.95f;
    r->gamma_discount = 1.0f;
    r->score_clip = 0;
    r->num_generations = 0; /* the method's default */
    r->rollout_batch = 4;
    r->ppo_epochs = 0;      /* the method's default */
    r->max_new_tokens = 32;
    r->temperature = 1.0f;
    r->top_k = 0;
    r->top_p = 1.0f;
}

static bool path(char *dst, size_t n, const char *v)
{
    if (!*v || strlen(v) >= n)
        return false;
    snprintf(dst, n, "%s", v);
    return true;
}

#define BAD(...) (snprintf(msg, n, __VA_ARGS__), 0)

int ft_rl_set(ft_rl_opts *r, const char *name, const char *v, char *msg, size_t n)
{
    if (!strcmp(name, "method")) {
        col_err e = {0};
        return col_rl_method_parse(v, &r->method, &e) == COL_OK ||
               BAD("--method must be sft, rm, dpo, simpo, orpo, kto, ppo or grpo (got '%s')", v);
    }
    if (!strcmp(name, "beta")) return ft_num_in(v, 0, 1e4, false, &r->beta) || BAD("--beta must be a number in [0, 1e4] (got '%s')", v);
    if (!strcmp(name, "gamma")) return ft_num_in(v, -1e4, 1e4, false, &r->gamma) || BAD("--gamma must be a number (got '%s')", v);
    if (!strcmp(name, "label-smoothing"))
        return (ft_num_in(v, 0, 0.5, false, &r->label_smoothing)) || BAD("--label-smoothing must be in [0, 0.5] (got '%s')", v);
    if (!strcmp(name, "desirable-weight"))
        return ft_num_in(v, 0, 1e4, false, &r->desirable_weight) || BAD("--desirable-weight must be a number >= 0 (got '%s')", v);
    if (!strcmp(name, "undesirable-weight"))
        return ft_num_in(v, 0, 1e4, false, &r->undesirable_weight) || BAD("--undesirable-weight must be a number >= 0 (got '%s')", v);
    if (!strcmp(name, "ref-model")) return path(r->ref_model, sizeof r->ref_model, v) || BAD("--ref-model: give a model directory");
    if (!strcmp(name, "no-ref")) return r->no_ref = true;
    if (!strcmp(name, "reward-model"))
        return path(r->reward_model, sizeof r->reward_model, v) || BAD("--reward-model: give a model directory");
    if (!strcmp(name, "critic-model"))
        return path(r->critic_model, sizeof r->critic_model, v) || BAD("--critic-model: give a model directory");
    if (!strcmp(name, "reward")) {
        if (strcmp(v, "exact") != 0 && strncmp(v, "regex:", 6) != 0)
            return BAD("--reward must be exact or regex:PATTERN (got '%s')", v);
        return path(r->reward, sizeof r->reward, v) || BAD("--reward: the pattern is too long");
    }
    if (!strcmp(name, "kl-coef")) return ft_num_in(v, 0, 100, false, &r->kl_coef) || BAD("--kl-coef must be in [0, 100] (got '%s')", v);
    if (!strcmp(name, "clip-range"))
        return (ft_num_in(v, 0, 10, false, &r->clip_range) && r->clip_range > 0) || BAD("--clip-range must be in (0, 10] (got '%s')", v);
    if (!strcmp(name, "value-clip"))
        return (ft_num_in(v, 0, 1e4, false, &r->value_clip) && r->value_clip > 0) || BAD("--value-clip must be a number > 0 (got '%s')", v);
    if (!strcmp(name, "vf-coef")) return ft_num_in(v, 0, 1e4, false, &r->vf_coef) || BAD("--vf-coef must be a number >= 0 (got '%s')", v);
    if (!strcmp(name, "gae-lambda")) return ft_num_in(v, 0, 1, false, &r->gae_lambda) || BAD("--gae-lambda must be in [0, 1] (got '%s')", v);
    if (!strcmp(name, "gamma-discount"))
        return ft_num_in(v, 0, 1, false, &r->gamma_discount) || BAD("--gamma-discount must be in [0, 1] (got '%s')", v);
    if (!strcmp(name, "score-clip")) return ft_num_in(v, 0, 1e6, false, &r->score_clip) || BAD("--score-clip must be a number >= 0 (got '%s')", v);
    if (!strcmp(name, "num-generations"))
        return ft_int_in(v, 1, 4096, &r->num_generations) || BAD("--num-generations must be an integer in 1..4096 (got '%s')", v);
    if (!strcmp(name, "rollout-batch"))
        return ft_int_in(v, 1, 65536, &r->rollout_batch) || BAD("--rollout-batch must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "ppo-epochs"))
        return ft_int_in(v, 1, 1000, &r->ppo_epochs) || BAD("--ppo-epochs must be an integer in 1..1000 (got '%s')", v);
    if (!strcmp(name, "max-new-tokens"))
        return ft_int_in(v, 1, 1 << 20, &r->max_new_tokens) || BAD("--max-new-tokens must be an integer >= 1 (got '%s')", v);
    if (!strcmp(name, "temperature"))
        return ft_num_in(v, 0, 100, false, &r->temperature) || BAD("--temperature must be in [0, 100] (got '%s')", v);
    if (!strcmp(name, "top-k")) return ft_int_in(v, 0, 1 << 24, &r->top_k) || BAD("--top-k must be an integer >= 0 (got '%s')", v);
    if (!strcmp(name, "top-p"))
        return (ft_num_in(v, 0, 1, false, &r->top_p) && r->top_p > 0) || BAD("--top-p must be in (0, 1] (got '%s')", v);
    return -1;
}

/* options that belong to other methods than the one chosen: a usage error rather than silently ignored */
static const struct {
    const char *name;
    unsigned methods; /* 1 << col_rl_method */
} owners[] = {
#define M(x) (1u << COL_RLM_##x)
    {"beta", M(DPO) | M(SIMPO) | M(ORPO) | M(KTO) | M(GRPO)},
    {"gamma", M(SIMPO)},
    {"label-smoothing", M(DPO) | M(SIMPO)},
    {"desirable-weight", M(KTO)},
    {"undesirable-weight", M(KTO)},
    {"ref-model", M(DPO) | M(KTO) | M(PPO) | M(GRPO)},
    {"no-ref", M(DPO)},
    {"reward-model", M(PPO) | M(GRPO)},
    {"critic-model", M(PPO)},
    {"reward", M(GRPO)},
    {"kl-coef", M(PPO)},
    {"clip-range", M(PPO) | M(GRPO)},
    {"value-clip", M(PPO)},
    {"vf-coef", M(PPO)},
    {"gae-lambda", M(PPO)},
    {"gamma-discount", M(PPO)},
    {"score-clip", M(PPO)},
    {"num-generations", M(PPO) | M(GRPO)},
    {"rollout-batch", M(PPO) | M(GRPO)},
    {"ppo-epochs", M(PPO) | M(GRPO)},
    {"max-new-tokens", M(PPO) | M(GRPO)},
    {"temperature", M(PPO) | M(GRPO)},
    {"top-k", M(PPO) | M(GRPO)},
    {"top-p", M(PPO) | M(GRPO)},
#undef M
};

bool ft_rl_check(const ft_opts *o, char *msg, size_t n)
{
    const ft_rl_opts *r = &o->rl;
    for (size_t i = 0; i < sizeof owners / sizeof owners[0]; i++)
        if (ft_given(o, owners[i].name) && !(owners[i].methods & (1u << r->method)))
            return BAD("--%s does not apply to --method %s", owners[i].name, col_rl_method_name(r->method));
    if (r->method == COL_RLM_SFT)
        return true;
    if (o->resume[0])
        return BAD("--resume continues --method sft runs only for now: start the %s run again",
                   col_rl_method_name(r->method));
    if (r->method == COL_RLM_PPO && !r->reward_model[0])
        return BAD("--method ppo needs --reward-model DIR (train one with --method rm)");
    if (r->method == COL_RLM_GRPO && !r->reward[0] && !r->reward_model[0])
        return BAD("--method grpo needs --reward exact|regex:PATTERN or --reward-model DIR");
    if (r->method == COL_RLM_GRPO && r->reward[0] && r->reward_model[0])
        return BAD("--reward and --reward-model both score the completions: give one");
    if (r->method == COL_RLM_GRPO && ft_given(o, "num-generations") && r->num_generations < 2)
        return BAD("--num-generations must be at least 2 for grpo (its advantages compare completions of a prompt)");
    if (r->no_ref && r->ref_model[0])
        return BAD("--no-ref and --ref-model contradict each other");
    if (r->method == COL_RLM_RM && o->lora_rank > 0)
        return BAD("--method rm trains a new value head, which LoRA adapters alone cannot (PEFT's modules_to_save): "
                   "train the reward model without --lora-rank");
    if (o->grad_accum > 1)
        return BAD("--grad-accum applies to --method sft only (RLHF steps take --batch or --rollout-batch rows)");
    if (o->pp > 1 || o->dp > 1)
        return BAD("--method %s runs in one process for now (no --dp or --pp)", col_rl_method_name(r->method));
    return true;
}

/* the defaults that depend on the method */
void ft_rl_finish(ft_rl_opts *r)
{
    if (isnan(r->beta))
        r->beta = r->method == COL_RLM_SIMPO ? 2.0f : r->method == COL_RLM_GRPO ? 0.04f : 0.1f;
    if (isnan(r->gamma))
        r->gamma = 0.5f;
    if (isnan(r->label_smoothing))
        r->label_smoothing = 0;
    if (!r->num_generations)
        r->num_generations = r->method == COL_RLM_GRPO ? 4 : 1;
    if (!r->ppo_epochs)
        r->ppo_epochs = r->method == COL_RLM_PPO ? 4 : 1;
}
