/* fuzz_rlhf_data.c - RLHF data lines must never crash the reader: the input
 * after its first two bytes is parsed by col_rl_data_parse as pairs, KTO or
 * prompts (byte 0 % 3), rendered with one of the chat families (byte 0 / 3
 * % 4), tokenized with the bundled GPT-2 or Llama 3 tokenizer (bit 7 of byte
 * 0); byte 1's bits turn on append_eos and small length limits. Accepted data
 * must hold in-range ids, non-empty completions within the limits, and
 * increasing lines. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rlhf_data.h"
#include "tokenizer.h"

static col_tokenizer *tok[2];

static void check(const col_rl_data *d, col_rl_kind kind, const col_tokenizer *t, const col_rl_data_opts *o)
{
    int32_t vocab = col_tok_vocab_size(t);
    int64_t n = col_rl_data_count(d), prev = 0;
    if (n <= 0 || col_rl_data_get(d, n) || col_rl_data_get(d, -1))
        abort();
    for (int64_t i = 0; i < n; i++) {
        const col_rl_example *e = col_rl_data_get(d, i);
        if (!e || e->line <= prev || e->n_prompt < 0 || (o->max_prompt && e->n_prompt > o->max_prompt))
            abort();
        prev = e->line;
        for (int k = 0; k < e->n_prompt; k++)
            if (e->prompt[k] < 0 || e->prompt[k] >= vocab)
                abort();
        int na = kind == COL_RL_PROMPTS ? 0 : e->n_a, nb = kind == COL_RL_PAIRS ? e->n_b : 0;
        if ((kind != COL_RL_PROMPTS && na <= 0) || (kind == COL_RL_PAIRS && nb <= 0) ||
            (kind != COL_RL_PAIRS && (e->b || e->n_b)) || (kind == COL_RL_PROMPTS && (e->a || e->n_a)))
            abort();
        if (o->max_completion && (na > o->max_completion || nb > o->max_completion))
            abort();
        if (o->max_length && kind != COL_RL_PROMPTS &&
            (e->n_prompt + na > o->max_length || e->n_prompt + nb > o->max_length))
            abort();
        for (int k = 0; k < na; k++)
            if (e->a[k] < 0 || e->a[k] >= vocab)
                abort();
        for (int k = 0; k < nb; k++)
            if (e->b[k] < 0 || e->b[k] >= vocab)
                abort();
        if (e->gt_answer && kind != COL_RL_PROMPTS)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_err err = {0};
    if (!tok[0] && col_tok_load(COL_SRC_ASSET_DIR "/tokenizers/gpt2", &tok[0], &err) != COL_OK)
        abort();
    if (!tok[1] && col_tok_load(COL_SRC_ASSET_DIR "/tokenizers/llama3", &tok[1], &err) != COL_OK)
        abort();
    if (size < 2)
        return 0;
    col_rl_kind kind = (col_rl_kind)(data[0] % 3);
    const col_tokenizer *t = tok[data[0] >> 7];
    col_rl_data_opts o = {
        .family = (col_chat_family)((data[0] / 3) % 4),
        .append_eos = data[1] & 1,
        .max_prompt = (data[1] >> 1) & 1 ? 5 : 0,
        .max_completion = (data[1] >> 2) & 1 ? 3 : 0,
        .max_length = (data[1] >> 3) & 1 ? 9 : 0,
        .max_bytes = 1 << 20,
    };
    /* a copy without a NUL after it, so reading past the end is caught */
    size_t len = size - 2;
    char *text = malloc(len ? len : 1);
    if (!text)
        return 0;
    memcpy(text, data + 2, len);
    col_rl_data *d = NULL;
    if (col_rl_data_parse(text, len, "fuzz.jsonl", kind, t, &o, &d, &err) == COL_OK)
        check(d, kind, t, &o);
    else if (d || err.msg[0] == 0)
        abort();
    col_rl_data_free(d);
    free(text);
    return 0;
}
