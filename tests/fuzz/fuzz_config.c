/* fuzz_config.c - config.json parsing must never crash, leak or accept an
 * invalid model: every accepted config passes the model's own checks. */
#include <stdint.h>
#include <stdlib.h>

#include "hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_lm_config c;
    col_err err = {0};
    if (col_hf_parse_config((const char *)data, size, "config.json", &c, &err) == COL_OK) {
        if (col_lm_check_config(&c, &err) != COL_OK)
            abort(); /* the parser accepted a config the model would refuse */
    }
    return 0;
}
