/* lm_trainer_access.c - what a session tells about itself and gives access
 * to (lm_trainer.h): its tensors, their counts, spans and states, its
 * configuration, memory and traffic. */
#include "lm_trainer_internal.h"

int col_lm_trainer_n_params(const col_lm_trainer *t) { return t->nt; }

int col_lm_trainer_global_index(const col_lm_trainer *t, int i) { return i >= 0 && i < t->np ? lmt_global(t, i) : -1; }

int64_t col_lm_trainer_param_count(const col_lm_trainer *t)
{
    int64_t n = 0;
    for (int i = 0; i < t->nt; i++)
        n += t->ot[i].n;
    return n;
}

int64_t col_lm_trainer_trainable_count(const col_lm_trainer *t)
{
    int64_t n = 0;
    for (int i = t->train0; i < t->nt; i++)
        n += t->ot[i].n;
    return n;
}

int col_lm_trainer_lora_target(const col_lm_trainer *t, int i)
{
    if (!t->lora_of || i < t->np || i >= t->nt)
        return -1;
    for (int k = 0; k < t->np; k++)
        if (t->lora_of[k] == (i - t->np) / 2)
            return k;
    return -1;
}

const float *col_lm_trainer_merged(col_lm_trainer *t, int i, float *scratch)
{
    if (i < 0 || i >= t->np)
        return NULL;
    if (!t->lora_of || t->lora_of[i] < 0)
        return t->ot[i].w;
    int a = t->np + 2 * t->lora_of[i];
    col_lora_merge(&t->cfg.model, &t->specs[i], t->ot[i].w, t->ot[a].w, t->ot[a + 1].w, t->cfg.lora.rank,
                   t->lora_scale, scratch);
    return scratch;
}

size_t col_lm_trainer_arena_bytes(const col_lm_trainer *t) { return col_plan_arena_bytes(t->plan); }

float *col_lm_trainer_param(col_lm_trainer *t, int i, const col_param_spec **spec)
{
    if (i < 0 || i >= t->nt)
        return NULL;
    if (spec)
        *spec = &t->specs[i];
    return t->ot[i].w;
}

float *col_lm_trainer_state(col_lm_trainer *t, int i, int slot)
{
    if (i < 0 || i >= t->nt)
        return NULL;
    return slot == 0 ? t->ot[i].m : slot == 1 ? t->ot[i].v : NULL;
}

int64_t col_lm_trainer_span(const col_lm_trainer *t, int i, int64_t *off)
{
    *off = 0;
    if (i < t->train0 || i >= t->nt)
        return 0;
    return lmt_span(t, i, off);
}

col_status col_lm_trainer_sync_params(col_lm_trainer *t, col_err *err) { return lmt_dp_need_params(t, err); }

void col_lm_trainer_dp_traffic(const col_lm_trainer *t, double *blocked, uint64_t *bytes)
{
    *blocked = t->dp ? t->dp_wait_s : 0;
    *bytes = t->dp ? t->dp_bytes : 0;
}

int64_t col_lm_trainer_steps(const col_lm_trainer *t) { return t->step; }
void col_lm_trainer_set_steps(col_lm_trainer *t, int64_t steps) { t->step = steps; }
const col_lm_train_config *col_lm_trainer_config(const col_lm_trainer *t) { return &t->cfg; }
const struct mt_pool *col_lm_trainer_pool(const col_lm_trainer *t) { return t->pool; }
struct mt_resident *col_lm_trainer_compute_tier(const col_lm_trainer *t) { return t->tier.res; }

float *col_lm_trainer_grad(col_lm_trainer *t, int i) { return (i >= 0 && i < t->nt) ? t->ot[i].g : NULL; }

void *col_lm_trainer_weights(col_lm_trainer *t, int i, col_dtype *dt)
{
    if (dt)
        *dt = i >= 0 && i < t->nt ? lmt_param_dtype(t, i) : t->dt;
    if (i < 0 || i >= t->nt)
        return NULL;
    return lmt_mixed(t) ? t->w16[i] : t->ot[i].w;
}

void *col_lm_trainer_grad_data(col_lm_trainer *t, int i, col_dtype *dt)
{
    if (dt)
        *dt = t->dt;
    if (i < 0 || i >= t->nt)
        return NULL;
    return lmt_mixed(t) ? t->g16[i] : t->ot[i].g;
}
