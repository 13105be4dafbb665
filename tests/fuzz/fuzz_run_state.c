/* fuzz_run_state.c - trainer_state.json (colossal-finetune's run state) is
 * read on --resume from a directory anyone may have edited: parsing it must
 * never crash or leak, and what it accepts must be a valid set of options. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "finetune.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ft_opts o;
    ft_state s;
    col_err err = {0};
    ft_defaults(&o);
    if (ft_state_parse((const char *)data, size, "trainer_state.json", &o, &s, &err) == COL_OK) {
        /* every replayed option went through ft_set's range checks */
        if (o.steps < 1 || o.batch < 1 || o.seq < 0 || o.grad_accum < 1 || o.val_percent < 0 || o.val_percent >= 100 ||
            s.step < 0 || s.batches.mode > 1 || (!isnan(o.lr) && !(o.lr > 0)))
            abort();
    }
    ft_free(&o);
    return 0;
}
