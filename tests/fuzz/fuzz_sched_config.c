/* fuzz_sched_config.c - a diffusers scheduler_config.json must never crash,
 * leak or hang the reader; a config it accepts must make a scheduler that
 * sets timesteps and runs its steps (or refuses them with an error). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    dm_sched_config c;
    col_err err = {0};
    /* the first byte picks the kind the file is read as (or its own class) */
    dm_sched_kind kind = size ? (dm_sched_kind)((int)(data[0] % (DM_SCHED_COUNT + 1)) - 1) : DM_SCHED_AUTO;
    if (dm_sched_config_parse(text, kind, &c, &err) == COL_OK) {
        dm_sched *s = NULL;
        if (c.num_train_timesteps <= 5000 && dm_sched_create(&c, &s, &err) == COL_OK) {
            int steps = size > 1 ? 1 + data[1] % 30 : 10;
            double strength = size > 2 ? (1 + data[2] % 10) / 10.0 : 1.0;
            col_torch_gen g;
            col_torch_gen_seed(&g, 7);
            float x[8], m[8];
            for (int i = 0; i < 8; i++)
                x[i] = (float)i - 3.5f, m[i] = 0.25f * (float)i;
            if (dm_sched_set_timesteps(s, steps, strength, &err) == COL_OK) {
                for (int i = 0; i < dm_sched_num_steps(s); i++) {
                    dm_sched_scale_model_input(s, x, m, 8);
                    if (dm_sched_step(s, m, x, x, 8, &g, &err) != COL_OK)
                        abort(); /* every step of a run that set_timesteps accepted must run */
                }
                dm_sched_add_noise_start(s, x, m, x, 8, &err);
            }
            dm_sched_free(s);
        }
        dm_sched_config_free(&c);
    }
    free(text);
    return 0;
}
