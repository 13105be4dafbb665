/* fuzz_unet_config.c - the UNet's config.json parsing must never crash, leak
 * or accept a config that its own checks refuse. */
#include <stdint.h>
#include <stdlib.h>

#include "dm_unet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dm_unet_config c;
    col_err err = {0};
    if (dm_unet_parse_config((const char *)data, size, "config.json", &c, &err) == COL_OK) {
        if (dm_unet_check_config(&c, &err) != COL_OK)
            abort(); /* the parser accepted a config the builder would refuse */
    }
    return 0;
}
