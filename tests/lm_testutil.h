/* lm_testutil.h - helpers shared by the tests of language-model sessions:
 * reproducible random batches, a run of training steps, the smallest compute
 * tier of a session, and a bitwise comparison of two sessions' weights.
 * Include after testlib.h. */
#ifndef COL_TESTS_LM_TESTUTIL_H
#define COL_TESTS_LM_TESTUTIL_H

#include <stdlib.h>
#include <string.h>

#include "lm_trainer.h"
#include "mt_resident.h"
#include "rng.h"

/* n token ids and targets in [0, V), drawn from seed */
static inline void tl_lm_batch(uint64_t seed, int V, int n, int32_t *ids, int32_t *tg)
{
    col_rng r;
    col_rng_init(&r, seed);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)col_rng_below(&r, (uint64_t)V), tg[i] = (int32_t)col_rng_below(&r, (uint64_t)V);
}

/* steps [from, to), step k on the batch drawn from seed0 + k; loss[k] gets its loss */
static inline bool tl_lm_steps(col_lm_trainer *t, int from, int to, uint64_t seed0, int V, float *loss, col_err *err)
{
    const col_lm_train_config *c = col_lm_trainer_config(t);
    int n = c->batch * c->seq * (c->grad_accum > 1 ? c->grad_accum : 1);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *tg = malloc(sizeof(int32_t) * (size_t)n);
    bool ok = ids && tg;
    for (int k = from; k < to && ok; k++) {
        col_lm_step_info info;
        tl_lm_batch(seed0 + (uint64_t)k, V, n, ids, tg);
        ok = col_lm_trainer_step(t, ids, tg, &info, err) == COL_OK;
        if (ok)
            loss[k] = info.loss;
        else
            TL_NOTE("step %d: %s", k, err->msg);
    }
    free(ids);
    free(tg);
    return ok;
}

/* the smallest compute tier the training graph of c can run in on be (the
 * budget in c only has to be enough); 0, with a note naming what, when the
 * session cannot be made */
static inline size_t tl_lm_least_budget(const col_lm_train_config *c, const col_backend *be, const char *what)
{
    col_err err = {0};
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(c, be, &t, &err) != COL_OK) {
        TL_NOTE("least budget of %s: %s", what, err.msg);
        return 0;
    }
    mt_resident_stats rs;
    mt_resident_get_stats(col_lm_trainer_compute_tier(t), &rs);
    col_lm_trainer_free(t);
    return rs.min_budget;
}

/* every parameter of a equal, bit for bit, to b's (parameters on the NVMe
 * tier are read through host views) */
static inline bool tl_lm_same_weights(col_lm_trainer *a, col_lm_trainer *b)
{
    col_err e = {0};
    bool va = col_lm_trainer_host_begin(a, COL_LM_PARAMS, &e) == COL_OK;
    bool vb = col_lm_trainer_host_begin(b, COL_LM_PARAMS, &e) == COL_OK;
    bool same = va && vb && col_lm_trainer_n_params(a) == col_lm_trainer_n_params(b);
    for (int i = 0; same && i < col_lm_trainer_n_params(a); i++) {
        const col_param_spec *s;
        const float *x = col_lm_trainer_param(a, i, &s), *y = col_lm_trainer_param(b, i, NULL);
        same = x && y && memcmp(x, y, sizeof(float) * (size_t)col_param_numel(s)) == 0;
    }
    if (va)
        col_lm_trainer_host_end(a, false, &e);
    if (vb)
        col_lm_trainer_host_end(b, false, &e);
    return same;
}

#endif
