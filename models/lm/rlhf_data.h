/* rlhf_data.h - the data of preference and reinforcement-learning fine-tuning
 * (DPO and its relatives, KTO, PPO / GRPO prompts) from .jsonl files, one JSON
 * object a line (blank lines skipped), tokenized as TRL 1.16 does.
 *
 * Forms of a line, by kind:
 *   COL_RL_PAIRS
 *     {"prompt": P, "chosen": C, "rejected": R}         TRL; P, C, R all strings
 *                                                      or all message lists
 *     {"chosen": C, "rejected": R}                      TRL's implicit prompt: the
 *                                                      common start of C and R is
 *                                                      the prompt (as TRL's
 *                                                      extract_prompt)
 *     {"context": [...], "chosen": [...], "rejected": [...]}   ColossalChat
 *   COL_RL_KTO
 *     {"prompt": P, "completion": C, "label": true|false}     strings or lists
 *   COL_RL_PROMPTS
 *     {"messages": [...], "gt_answer": A}  or  {"prompt": P, "gt_answer": A}
 *     gt_answer optional: a string, or a number (kept as its text).
 * A message is {"role": "system"|"user"|"assistant", "content": "..."} (TRL)
 * or {"from": ..., "content": "..."} (ColossalChat: "human" and "user" are
 * the user, "assistant" and "gpt" the assistant, "system"; any case). A
 * single message object is taken where a list is expected (ColossalChat's
 * KTO completion). Other keys are ignored. A prompt given as messages must
 * end with a user turn; a completion given as messages must start and end
 * with an assistant turn; a completion may not be empty.
 *
 * Tokens, as TRL 1.16's DPO / KTO trainers give them:
 *   message lists  the prompt rendered with the chat template and its
 *                  generation prompt, and the prompt + completion rendered
 *                  without it, each tokenized whole without adding BOS
 *                  (the template writes it) - what apply_chat_template(...,
 *                  tokenize=True) gives, except that special tokens are
 *                  matched only where the template wrote them: a message
 *                  saying "<|im_end|>" stays plain text. No EOS is added:
 *                  the template's end-of-turn marker ends the completion.
 *   strings        the prompt, and the prompt + completion as one string,
 *                  tokenized with the tokenizer's own BOS (its post-processor,
 *                  add_special_tokens=True), special tokens not matched; with
 *                  append_eos the tokenizer's EOS follows the completion (a
 *                  completion that already ends with the EOS text gets just
 *                  one, as TRL's "if not endswith(eos)").
 * The completion is the tokens of prompt + completion after their common
 * start with the prompt's tokens, and the prompt is that common start (TRL's
 * common_prefix_length: usually the whole prompt; shorter where a string
 * prompt's last word joins the completion's first, "Hello wor" + "ld!").
 * For pairs one cut serves both: the shorter common start of the two.
 * Prompts (PPO / GRPO) are the prompt's tokens alone, as GRPO's
 * _tokenize_prompts gives them.
 *
 * Errors name the file and line ("data.jsonl:7: ...") and what is wrong; an
 * empty file, or one without examples, is an error. */
#ifndef COL_MODELS_RLHF_DATA_H
#define COL_MODELS_RLHF_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "status.h"
#include "tokenizer.h"

typedef enum { COL_RL_PAIRS, COL_RL_KTO, COL_RL_PROMPTS } col_rl_kind;

typedef struct {
    int32_t *prompt; int n_prompt;   /* the prompt's tokens (rendered with the generation prompt) */
    int32_t *a; int n_a;             /* pairs: chosen completion; KTO: the completion; prompts: none (NULL, 0) */
    int32_t *b; int n_b;             /* pairs: rejected completion; else NULL, 0 */
    bool desirable;                  /* KTO label */
    char *gt_answer;                 /* prompts: "gt_answer" when given (string; a number is kept as its text), else NULL */
    int64_t line;                    /* 1-based line in the file */
    bool chat;                       /* given as message lists (rendered with the chat template), not strings */
} col_rl_example;

typedef struct {
    col_chat_family family;          /* chat_template.h: how message lists are rendered */
    bool append_eos;                 /* append the tokenizer's EOS to every string completion (TRL does; default
                                        true in the app); message lists end with the template's end of turn */
    size_t max_bytes;                /* file size limit (0: none) */
    int max_prompt, max_completion;  /* > 0: keep the END of the prompt (the last max_prompt tokens) / the start of
                                        each completion (as TRL's former max_prompt_length / max_completion_length);
                                        0 = no limit */
    int max_length;                  /* > 0: TRL 1.16's max_length of DPO / KTO (truncation keep_start): prompt +
                                        completion cut to max_length tokens, so each completion keeps
                                        max_length - n_prompt; an example whose prompt alone has max_length tokens
                                        or more is dropped (col_rl_data_dropped counts them). Pairs and KTO only.
                                        Applied after max_prompt / max_completion. 0 = no limit */
} col_rl_data_opts;

typedef struct col_rl_data col_rl_data;

/* Reads path (plain or compressed, textio.h) and tokenizes every line with
 * tok; the options are required. */
col_status col_rl_data_load(const char *path, col_rl_kind kind, const col_tokenizer *tok, const col_rl_data_opts *o,
                            col_rl_data **out, col_err *err);
/* The same on text in memory (path names it in messages) - the fuzzer uses it. */
col_status col_rl_data_parse(const char *text, size_t len, const char *path, col_rl_kind kind,
                             const col_tokenizer *tok, const col_rl_data_opts *o, col_rl_data **out, col_err *err);
int64_t col_rl_data_count(const col_rl_data *d);
/* Example i (0 <= i < count), or NULL outside. */
const col_rl_example *col_rl_data_get(const col_rl_data *d, int64_t i);
/* Examples left out by max_length. */
int64_t col_rl_data_dropped(const col_rl_data *d);
col_rl_kind col_rl_data_kind(const col_rl_data *d);
void col_rl_data_free(col_rl_data *d);

/* "pairs", "kto", "prompts" */
const char *col_rl_kind_name(col_rl_kind k);

#endif
