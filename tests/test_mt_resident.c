/* test_mt_resident.c - training through a budgeted compute tier: parameter
 * and gradient chunks are copied in and out before every op as the
 * placement plan says, and the losses and weights stay bitwise those of a
 * run with everything in place. Placement must never change the math. */
#include <math.h>
#include <string.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "mt_resident.h"
#include "rng.h"
#include "testlib.h"
#include "lm_testutil.h"

static col_backend be;

enum { B = 2, T = 16, V = 257, STEPS = 5 };

static col_lm_train_config config(size_t budget, bool checkpoint)
{
    col_lm_train_config c = {
        .model = col_gpt2_config(V, 32, 32, 3, 4),
        .batch = B, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 1.0f, .seed = 11, .checkpoint = checkpoint,
        .chunk_bytes = 16 << 10, /* many small chunks: a tight budget evicts often */
        .compute_budget = budget,
    };
    c.model.dropout = 0.1f;
    return c;
}

/* STEPS steps on fixed batches; losses out; the trainer is kept for inspection */
static col_lm_trainer *train(const col_lm_train_config *c, float *loss, col_err *err)
{
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(c, &be, &t, err) != COL_OK)
        return NULL;
    if (col_lm_trainer_compute_tier(t)) /* a read at home instead of on the tier would show as NaN */
        mt_resident_poison_home(col_lm_trainer_compute_tier(t), true);
    if (!tl_lm_steps(t, 0, STEPS, 5, V, loss, err)) {
        col_lm_trainer_free(t);
        return NULL;
    }
    return t;
}

static void run_case(bool checkpoint)
{
    col_err err = {0};
    float l0[STEPS], l1[STEPS], l2[STEPS];
    col_lm_train_config free_run = config(0, checkpoint);
    col_lm_trainer *ref = train(&free_run, l0, &err);
    TL_OK(ref != NULL, "unlimited run%s: %s", checkpoint ? " (checkpointing)" : "", err.msg);
    /* the smallest budget the graph allows, read from a first session */
    col_lm_train_config probe = config((size_t)1 << 40, checkpoint);
    col_lm_trainer *t = NULL;
    mt_resident_stats st = {0};
    if (col_lm_trainer_create(&probe, &be, &t, &err) == COL_OK)
        mt_resident_get_stats(col_lm_trainer_compute_tier(t), &st);
    col_lm_trainer_free(t);
    size_t minb = st.min_budget;
    mt_pool_stats ps;
    TL_OK(minb > 0, "smallest compute tier for this graph: %zu bytes", minb);

    col_lm_train_config tight = config(minb, checkpoint), roomy = config(4 * minb, checkpoint);
    col_lm_trainer *a = train(&tight, l1, &err), *b = train(&roomy, l2, &err);
    TL_OK(a && b, "runs at the smallest budget and at 4x: %s", err.msg);
    if (!ref || !a || !b) {
        col_lm_trainer_free(ref), col_lm_trainer_free(a), col_lm_trainer_free(b);
        return;
    }
    mt_resident_stats sb;
    mt_stats(col_lm_trainer_pool(a), &ps);
    mt_resident_get_stats(col_lm_trainer_compute_tier(a), &st);
    mt_resident_get_stats(col_lm_trainer_compute_tier(b), &sb);
    double chunks = (double)(ps.tensor_bytes[MT_PARAM] + ps.tensor_bytes[MT_GRAD]);
    TL_OK(st.peak <= minb && st.writebacks > 0 && st.bytes[MT_LINK_H2C] > sb.bytes[MT_LINK_H2C],
          "the tight tier never held more than its budget (peak %zu of %zu); it moved %.2f MB in and %.2f MB out, "
          "the 4x tier %.2f MB in (parameters + gradients: %.2f MB)", st.peak, minb, st.bytes[MT_LINK_H2C] / 1e6,
          st.bytes[MT_LINK_C2H] / 1e6, sb.bytes[MT_LINK_H2C] / 1e6, chunks / 1e6);
    TL_OK(memcmp(l0, l1, sizeof l0) == 0 && memcmp(l0, l2, sizeof l0) == 0,
          "losses bitwise equal at every budget (%.7f %.7f ... %.7f)", l0[0], l0[1], l0[STEPS - 1]);
    TL_OK(tl_lm_same_weights(ref, a) && tl_lm_same_weights(ref, b), "weights bitwise equal after %d steps", STEPS);
    col_lm_trainer_free(ref);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);

    col_lm_train_config small = config(minb - 1, checkpoint);
    t = NULL;
    char want[64];
    snprintf(want, sizeof want, "%zu", minb);
    TL_OK(col_lm_trainer_create(&small, &be, &t, &err) == COL_ENOMEM && strstr(err.msg, want) &&
              strstr(err.msg, "--gpu-mem"),
          "one byte less is refused, naming the smallest budget: %s", err.msg);
    col_lm_trainer_free(t);
}

int main(void)
{
    tl_cpu_backend(&be);
    run_case(false);
    run_case(true);
    col_cpu_backend_free(&be);
    return tl_done();
}
