/* test_nvme_params.c - a session with parameters, gradients and optimizer
 * states on the NVMe tier, reached by the graphs only through a budgeted
 * compute tier and by the optimizer through streamed host buffers: training,
 * evaluation, next-token logits and decoding give bitwise the results of an
 * all-host session; it saves and resumes across placements; the placement
 * follows the host budget; faults and impossible placements are clear errors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "memtier.h"
#include "mt_resident.h"
#include "nvme.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "nvme_testutil.h"
#include "backend_cpu.h"

static col_backend be;
static char dir[] = "/tmp/col_nvme_params_XXXXXX";
static char save_dir[] = "/tmp/col_nvme_psave_XXXXXX";

enum { B = 2, T = 16, V = 257, STEPS = 5 };

static col_lm_train_config config(col_opt_kind opt, unsigned kinds, size_t compute)
{
    col_lm_train_config c = {
        .model = col_gpt2_config(V, 32, 32, 2, 4),
        .batch = B, .seq = T,
        .opt = col_opt_defaults(opt),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 0.05f, /* small: every step clips */
        .grad_accum = 2,
        .seed = 11,
        .chunk_bytes = 16 << 10,
        .nvme_dir = kinds ? dir : NULL,
        .nvme_kinds = kinds,
        .compute_budget = compute,
    };
    c.model.dropout = 0.1f;
    if (opt == COL_OPT_SGD)
        c.opt.momentum = 0.9f;
    return c;
}

static bool steps(col_lm_trainer *t, int from, int to, float *loss, col_err *err)
{
    return tl_lm_steps(t, from, to, 300, V, loss, err);
}

/* the smallest compute tier of the training graph */
static size_t least_budget(unsigned kinds)
{
    col_lm_train_config c = config(COL_OPT_ADAMW, kinds, (size_t)1 << 30);
    return tl_lm_least_budget(&c, &be, "the all-NVMe session");
}

static size_t least;
static const unsigned ALL = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;

static void test_training(col_opt_kind opt)
{
    col_err err = {0};
    float l0[STEPS], l1[STEPS];
    col_lm_train_config h = config(opt, 0, 0), n = config(opt, ALL, least);
    col_lm_trainer *a = NULL, *b = NULL;
    bool ok = col_lm_trainer_create(&h, &be, &a, &err) == COL_OK && col_lm_trainer_create(&n, &be, &b, &err) == COL_OK;
    const char *name = col_opt_kind_name(opt);
    TL_OK(ok && col_lm_trainer_nvme_kinds(b) == ALL, "%s: a session with everything on NVMe: %s", name, err.msg);
    if (!ok) {
        col_lm_trainer_free(a), col_lm_trainer_free(b);
        return;
    }
    TL_OK(col_lm_trainer_param(b, 0, NULL) == NULL && col_lm_trainer_grad(b, 0) == NULL,
          "%s: its tensors have no host address outside a host view", name);
    TL_OK(tl_lm_same_weights(a, b), "%s: the initial weights written to NVMe are the host session's", name);
    ok = steps(a, 0, STEPS, l0, &err) && steps(b, 0, STEPS, l1, &err);
    TL_OK(ok, "%s: %d steps (grad_accum 2, clipping) on the host and on NVMe through a %zu-byte compute tier: %s",
          name, STEPS, least, err.msg);
    mt_pool_stats ps;
    mt_stats(col_lm_trainer_pool(b), &ps);
    bool nvme_only = true;
    for (int k = 0; k < MT_NKINDS; k++)
        nvme_only &= ps.bytes[k][MT_TIER_NVME] > 0 && ps.bytes[k][MT_TIER_HOST] == 0;
    TL_OK(nvme_only, "%s: parameters, gradients and states live on NVMe only (%.2f MB written, %.2f MB read)", name,
          mt_nvme_bytes_written(col_lm_trainer_pool(b)) / 1e6, mt_nvme_bytes_read(col_lm_trainer_pool(b)) / 1e6);
    TL_OK(ok && memcmp(l0, l1, sizeof l0) == 0, "%s: losses bitwise equal (%.7f ... %.7f)", name, l0[0],
          l0[STEPS - 1]);
    TL_OK(ok && tl_lm_same_weights(a, b), "%s: weights bitwise equal after %d steps", name, STEPS);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
}

/* without clipping the streamed step averages and sums each gradient as it updates (no first pass):
 * losses, weights and the reported gradient norm are still the host session's, bit for bit */
static void test_no_clipping(void)
{
    col_err err = {0};
    col_lm_train_config h = config(COL_OPT_ADAMW, 0, 0), n = config(COL_OPT_ADAMW, ALL, least);
    h.grad_clip = n.grad_clip = 0;
    col_lm_trainer *a = NULL, *b = NULL;
    bool ok = col_lm_trainer_create(&h, &be, &a, &err) == COL_OK && col_lm_trainer_create(&n, &be, &b, &err) == COL_OK;
    int len = B * T * 2; /* grad_accum 2 */
    int32_t ids[B * T * 2], tg[B * T * 2];
    bool same = ok;
    double na = 0, nb = 0;
    for (int k = 0; k < STEPS && ok; k++) {
        col_lm_step_info ia, ib;
        tl_lm_batch(900 + (uint64_t)k, V, len, ids, tg);
        ok = col_lm_trainer_step(a, ids, tg, &ia, &err) == COL_OK && col_lm_trainer_step(b, ids, tg, &ib, &err) == COL_OK;
        same = same && ok && ia.loss == ib.loss && ia.grad_norm == ib.grad_norm;
        na = ia.grad_norm, nb = ib.grad_norm;
    }
    TL_OK(ok && same && tl_lm_same_weights(a, b), "no clipping, grad_accum 2: %d steps with the same losses, gradient "
          "norms (last %.9g / %.9g) and weights: %s", STEPS, na, nb, err.msg);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
}

/* evaluation, next-token logits and decoding, all through the compute tier */
static void test_inference_graphs(void)
{
    col_err err = {0};
    /* decoding keeps its key/value cache (17 positions) on the tier beside the session's activation arena */
    col_lm_train_config h = config(COL_OPT_ADAMW, 0, 0), n = config(COL_OPT_ADAMW, ALL, least);
    n.compute_budget += sizeof(float) * 2 * (size_t)n.model.n_layer * (size_t)n.model.n_kv_head * 17 *
                        (size_t)n.model.head_dim;
    col_lm_trainer *a = NULL, *b = NULL;
    float la[STEPS], lb[STEPS];
    bool ok = col_lm_trainer_create(&h, &be, &a, &err) == COL_OK && col_lm_trainer_create(&n, &be, &b, &err) == COL_OK &&
              steps(a, 0, 2, la, &err) && steps(b, 0, 2, lb, &err);
    TL_OK(ok, "two sessions after 2 steps: %s", err.msg);
    int32_t ids[B * T], tg[B * T];
    tl_lm_batch(77, V, B * T, ids, tg);
    float ea = 0, eb = 0;
    const float *xa = NULL, *xb = NULL;
    ok = ok && col_lm_trainer_eval(a, ids, tg, &ea, &xa, &err) == COL_OK &&
         col_lm_trainer_eval(b, ids, tg, &eb, &xb, &err) == COL_OK;
    TL_OK(ok && ea == eb && memcmp(xa, xb, sizeof(float) * B * T * V) == 0, "evaluation: loss %.7f and logits bitwise "
          "equal: %s", ea, err.msg);
    ok = ok && col_lm_trainer_next_logits(a, ids, 9, &xa, &err) == COL_OK &&
         col_lm_trainer_next_logits(b, ids, 9, &xb, &err) == COL_OK;
    TL_OK(ok && memcmp(xa, xb, sizeof(float) * V) == 0, "next-token logits bitwise equal: %s", err.msg);
    int32_t ga[12], gb[12];
    ok = ok && col_lm_trainer_greedy(a, ids, 5, 12, ga, &err) == COL_OK &&
         col_lm_trainer_greedy(b, ids, 5, 12, gb, &err) == COL_OK;
    TL_OK(ok && memcmp(ga, gb, sizeof ga) == 0, "greedy decoding with a key/value cache gives the same 12 tokens: %s",
          err.msg);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
}

/* saved from NVMe, resumed on the host and on NVMe: the run that never stopped */
static void test_save_resume(void)
{
    col_err err = {0};
    float l0[STEPS], l1[STEPS];
    col_lm_train_config h = config(COL_OPT_ADAMW, 0, 0), n = config(COL_OPT_ADAMW, ALL, least);
    col_lm_trainer *ref = NULL, *a = NULL, *b = NULL;
    bool ok = col_lm_trainer_create(&h, &be, &ref, &err) == COL_OK && steps(ref, 0, STEPS, l0, &err) &&
              col_lm_trainer_create(&n, &be, &a, &err) == COL_OK && steps(a, 0, 2, l1, &err) &&
              col_lm_trainer_save_model(a, save_dir, &err) == COL_OK &&
              col_lm_trainer_save_optimizer(a, save_dir, &err) == COL_OK;
    TL_OK(ok, "a session with everything on NVMe saved after 2 steps: %s", err.msg);
    for (int k = 0; k < 2 && ok; k++) {
        col_lm_train_config cc = k ? n : h;
        col_ckpt *ck = NULL;
        float l2[STEPS];
        memcpy(l2, l1, sizeof l2);
        ok = col_lm_trainer_create(&cc, &be, &b, &err) == COL_OK && col_ckpt_open(save_dir, &ck, &err) == COL_OK &&
             col_lm_trainer_load(b, ck, &err) == COL_OK && col_lm_trainer_load_optimizer(b, save_dir, &err) == COL_OK &&
             steps(b, 2, STEPS, l2, &err);
        TL_OK(ok && memcmp(l0, l2, sizeof l0) == 0 && tl_lm_same_weights(ref, b),
              "resumed %s: bit for bit the run that never stopped: %s", k ? "with everything on NVMe" : "on the host",
              err.msg);
        col_ckpt_close(ck);
        col_lm_trainer_free(b);
        b = NULL;
    }
    col_lm_trainer_free(ref);
    col_lm_trainer_free(a);
}

/* the automatic placement follows the host budget */
static void test_placement(void)
{
    col_err err = {0};
    col_lm_train_config c = config(COL_OPT_ADAMW, 0, least);
    col_lm_trainer *t = NULL;
    c.nvme_dir = dir;
    bool ok = col_lm_trainer_create(&c, &be, &t, &err) == COL_OK;
    TL_OK(ok && col_lm_trainer_nvme_kinds(t) == COL_LM_STATES, "no host budget: only the states go to NVMe: %s",
          err.msg);
    mt_pool_stats ps;
    if (ok)
        mt_stats(col_lm_trainer_pool(t), &ps);
    col_lm_trainer_free(t);
    t = NULL;
    if (!ok)
        return;
    size_t p = ps.bytes[MT_PARAM][MT_TIER_HOST], g = ps.bytes[MT_GRAD][MT_TIER_HOST];
    struct {
        size_t budget;
        unsigned want;
        const char *what;
    } cases[] = {
        {p + g + 4096, COL_LM_STATES, "parameters and gradients fit"},
        {p + g / 2, COL_LM_STATES | COL_LM_GRADS, "only the parameters fit: the gradients go too"},
        {p / 2, ALL, "not even the parameters fit: everything goes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.host_budget = cases[i].budget;
        err = (col_err){0};
        ok = col_lm_trainer_create(&c, &be, &t, &err) == COL_OK;
        TL_OK(ok && col_lm_trainer_nvme_kinds(t) == cases[i].want, "host budget %zu (%s): NVMe holds 0x%x: %s",
              cases[i].budget, cases[i].what, ok ? col_lm_trainer_nvme_kinds(t) : 0, err.msg);
        col_lm_trainer_free(t);
        t = NULL;
    }
    c.compute_budget = 0;
    TL_OK(col_lm_trainer_create(&c, &be, &t, &err) == COL_ENOMEM && strstr(err.msg, "host budget") &&
              strstr(err.msg, "set a compute tier budget") &&
              err.settings == ((1u << COL_SETTING_HOST_BUDGET) | (1u << COL_SETTING_COMPUTE_BUDGET)),
          "a host budget only NVMe gradients would meet, without a compute tier (both budgets marked): %s", err.msg);
    col_lm_trainer_free(t);
    t = NULL;
    c.nvme_kinds = COL_LM_PARAMS;
    TL_OK(col_lm_trainer_create(&c, &be, &t, &err) == COL_EINVAL && strstr(err.msg, "need a compute tier") &&
              err.settings == 1u << COL_SETTING_COMPUTE_BUDGET,
          "parameters on NVMe without a compute tier (the compute tier budget marked): %s", err.msg);
    col_lm_trainer_free(t);
    t = NULL;
    c = config(COL_OPT_ADAMW, COL_LM_GRADS, least);
    c.nvme_dir = NULL;
    TL_OK(col_lm_trainer_create(&c, &be, &t, &err) == COL_EINVAL && strstr(err.msg, "no directory") &&
              err.settings == 1u << COL_SETTING_NVME_DIR,
          "NVMe kinds without an NVMe directory (the directory marked): %s", err.msg);
    col_lm_trainer_free(t);
}

/* the automatic chunk size: a fraction of the model, and no more waste than sizes picked by hand */
static void test_auto_chunk(void)
{
    col_err err = {0};
    size_t waste[3], chunk[3], sizes[3] = {0, 16 << 10, 40 << 10};
    size_t tensors = 0;
    for (int k = 0; k < 3; k++) {
        col_lm_train_config c = config(COL_OPT_ADAMW, 0, (size_t)1 << 30);
        c.chunk_bytes = sizes[k];
        col_lm_trainer *t = NULL;
        waste[k] = chunk[k] = 0;
        if (col_lm_trainer_create(&c, &be, &t, &err) == COL_OK) {
            mt_pool_stats ps;
            mt_stats(col_lm_trainer_pool(t), &ps);
            waste[k] = ps.bytes[MT_PARAM][MT_TIER_HOST] - ps.tensor_bytes[MT_PARAM];
            chunk[k] = ps.chunk_bytes;
            tensors = ps.tensor_bytes[MT_PARAM];
        } else {
            TL_NOTE("%s", err.msg);
        }
        col_lm_trainer_free(t);
    }
    TL_OK(chunk[0] > 0 && chunk[0] <= tensors / 8 + MT_ALIGN && waste[0] <= waste[1] && waste[0] <= waste[2],
          "automatic chunks of %zu bytes for %zu bytes of parameters waste %zu bytes (16 KiB chunks: %zu, 40 KiB: %zu)",
          chunk[0], tensors, waste[0], waste[1], waste[2]);
}

static void test_faults(void)
{
    col_err err = {0};
    float l[STEPS];
    col_lm_trainer *t = NULL;
    /* count the reads of a clean run, then fail the first, and one a third, two thirds and all the way in */
    tl_read_fault count = {0, -1};
    mt_nvme_faults hook = {.before_submit = tl_fail_read, .user = &count};
    col_lm_train_config n = config(COL_OPT_ADAMW, ALL, least);
    n.nvme_faults = &hook;
    bool ok = col_lm_trainer_create(&n, &be, &t, &err) == COL_OK && steps(t, 0, 2, l, &err);
    col_lm_trainer_free(t);
    TL_OK(ok && count.reads > 10, "a clean 2-step run reads NVMe %d times: %s", count.reads, err.msg);
    int at[] = {1, count.reads / 3, 2 * count.reads / 3, count.reads};
    for (int i = 0; i < 4 && ok; i++) {
        tl_read_fault fs = {0, at[i]};
        hook.user = &fs;
        t = NULL;
        err = (col_err){0};
        bool failed = col_lm_trainer_create(&n, &be, &t, &err) != COL_OK || !steps(t, 0, 2, l, &err);
        TL_OK(failed && err.code == COL_EIO && strstr(err.msg, "NVMe"), "EIO on NVMe read %d of %d is an error, not a "
              "crash: %s", at[i], count.reads, err.msg);
        col_lm_trainer_free(t);
    }
}

int main(void)
{
    tl_mkdtemp(dir);
    tl_mkdtemp(save_dir);
    tl_cpu_backend(&be);
    least = least_budget(COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES);
    TL_OK(least > 0, "the training graph's smallest compute tier: %zu bytes", least);
    test_training(COL_OPT_ADAMW);
    test_training(COL_OPT_LAMB);
    test_training(COL_OPT_SGD);
    test_no_clipping();
    test_inference_graphs();
    test_save_resume();
    test_placement();
    test_auto_chunk();
    test_faults();
    col_cpu_backend_free(&be);
    if (!tl_remove_tree(dir) || !tl_remove_tree(save_dir))
        TL_NOTE("could not remove %s or %s", dir, save_dir);
    return tl_done();
}
