/* rlhf_method.c - the RLHF methods' names and what each needs (rlhf_step.h); apart from the steps, so that the
 * command-line parsing (and its fuzzer) needs no session code. */
#include <string.h>

#include "rlhf_step.h"

static const char *const method_names[] = {"sft", "rm", "dpo", "simpo", "orpo", "kto", "ppo", "grpo"};

const char *col_rl_method_name(col_rl_method m)
{
    return (unsigned)m < sizeof method_names / sizeof method_names[0] ? method_names[m] : NULL;
}

col_status col_rl_method_parse(const char *name, col_rl_method *out, col_err *err)
{
    for (unsigned i = 0; i < sizeof method_names / sizeof method_names[0]; i++)
        if (strcmp(name, method_names[i]) == 0) {
            *out = (col_rl_method)i;
            return COL_OK;
        }
    return col_err_set(err, COL_EINVAL, "method \"%s\" is not one of sft, rm, dpo, simpo, orpo, kto, ppo, grpo", name);
}

col_rl_kind col_rl_method_data(col_rl_method m)
{
    return m == COL_RLM_KTO ? COL_RL_KTO : m == COL_RLM_PPO || m == COL_RLM_GRPO ? COL_RL_PROMPTS : COL_RL_PAIRS;
}

bool col_rl_method_uses_ref(col_rl_method m)
{
    return m == COL_RLM_DPO || m == COL_RLM_KTO || m == COL_RLM_PPO || m == COL_RLM_GRPO;
}
