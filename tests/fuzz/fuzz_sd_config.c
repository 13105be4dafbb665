/* fuzz_sd_config.c - the Stable Diffusion components' config.json readers
 * (CLIP text encoder, VAE) must never crash or leak, and every config they
 * accept passes the component's own checks. */
#include <stdint.h>
#include <stdlib.h>

#include "dm_clip_text.h"
#include "dm_vae.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    col_err err = {0};
    dm_clip_text_config t;
    if (dm_clip_text_parse_config((const char *)data, size, "config.json", &t, &err) == COL_OK &&
        dm_clip_text_check_config(&t, &err) != COL_OK)
        abort();
    dm_vae_config v;
    if (dm_vae_parse_config((const char *)data, size, "config.json", &v, &err) == COL_OK &&
        (dm_vae_check_config(&v, &err) != COL_OK || v.n_blocks < 1 || v.n_blocks > DM_VAE_MAX_BLOCKS))
        abort();
    return 0;
}
