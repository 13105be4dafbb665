/* fuzz_dataset.c - training data files must never crash the reader: the
 * input is written to a temporary file read as .jsonl chat data (first byte
 * even) or as an llm.c token file / text (first byte odd), tokenized with
 * the bundled GPT-2 tokenizer; accepted data must give in-range batches. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "tokenizer.h"

static col_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_err err = {0};
    if (!tok && col_tok_load(COL_SRC_ASSET_DIR "/tokenizers/gpt2", &tok, &err) != COL_OK)
        abort();
    if (size < 1)
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_dataset_%d%s", (int)getpid(), data[0] % 2 ? ".bin" : ".jsonl");
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    col_dataset_opts o = {.tok = tok, .val_percent = 10, .max_bytes = 1 << 20};
    col_dataset *ds = NULL;
    if (col_dataset_load(path, &o, &ds, &err) == COL_OK) {
        col_batch_state st = col_batch_state_init(COL_BATCH_SEQUENTIAL, 1);
        int32_t in[2 * 4], tg[2 * 4];
        if (col_dataset_next_batch(ds, &st, 2, 4, in, tg, &err) == COL_OK)
            for (int i = 0; i < 8; i++)
                if (in[i] < 0 || in[i] >= col_tok_vocab_size(tok) || tg[i] < -1 || tg[i] >= col_tok_vocab_size(tok))
                    abort();
        col_dataset_free(ds);
    }
    unlink(path);
    return 0;
}
