/* test_lm_device.c - a training session on a backend with its own memory
 * (backend.h's col_backend_mem), checked on the CPU with a fake "device":
 * the CPU kernels with a memory table of host blocks that counts what it is
 * asked for, refuses copies that do not go between a host buffer and one of
 * its blocks (or, for its device-to-device copy, between two non-overlapping
 * ranges of its blocks), and whose kernels refuse to run on any memory that
 * is not one of its blocks: a parameter or gradient reached at home instead
 * of through the compute tier fails the run.
 *
 * GPT-2 tiny and LLaMA tiny sessions on the fake device, through the
 * smallest compute tier and twice that, with everything at home in host
 * memory and then on the NVMe tier: 5 training steps (AdamW, 2 micro-batches,
 * dropout, clipping) give bitwise the losses and weights of a CPU session;
 * evaluation (loss and logits), next-token logits and greedy decoding with
 * a key/value cache in device memory give the same results, the logits in
 * host memory; every block goes back when the session is freed. A device
 * session without a compute tier, and compaction with a table that has no
 * device-to-device copy, are clear errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "mt_resident.h"
#include "ops.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "fake_device.h"
#include "backend_cpu.h"

static col_backend cpu, fake, fake_nocopy, fake_async;

enum { B = 2, T = 16, STEPS = 5, NTOK = 12 };

/* ---- the fake device: tests/fake_device.h's memory, and kernels that refuse memory outside it ---- */

static int off_device, kernels; /* kernels handed memory outside the blocks; kernels run */

/* every CPU kernel, run only when its output, its sources and its scratch are fake device memory */
static col_status fk_kernel(const col_node *n, const col_exec *ex, col_err *err)
{
    bool ok = n->t.data && fk_find_block(n->t.data, 1) >= 0 && (!n->scratch_bytes || fk_find_block(ex->scratch, 1) >= 0);
    for (int j = 0; j < n->nsrc && ok; j++)
        ok = n->src[j]->t.data && fk_find_block(n->src[j]->t.data, 1) >= 0;
    if (!ok) {
        if (!off_device++ && !fk.first[0])
            snprintf(fk.first, sizeof fk.first, "kernel %s (%s) off the device", col_op_name(n->op), n->name);
        return col_err_set(err, COL_EINVAL, "fake kernel %s: memory outside the device", col_op_name(n->op));
    }
    kernels++;
    return cpu.kernel[n->op](n, ex, err);
}

static void fake_init(void)
{
    tl_cpu_backend(&cpu);
    fake = cpu; /* ctx: the CPU backend's (BLAS) */
    fake.name = "fakedev";
    for (int op = 0; op < COL_OP_COUNT; op++)
        fake.kernel[op] = cpu.kernel[op] ? fk_kernel : NULL;
    fake.mem = &fk_mem;
    fake_nocopy = fake;
    fake_nocopy.mem = &fk_mem_nocopy;
    fake_async = fake;
    fake_async.name = "fakedev-async";
    fake_async.mem = &fk_mem_async;
    fk_own(&fake);
    fk_own(&fake_nocopy);
    fk_own(&fake_async);
}

/* ---- sessions ---- */

static char dir[] = "/tmp/col_lm_device_XXXXXX";
static const unsigned ALL = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;

static col_lm_train_config config(const char *model, unsigned kinds, size_t compute)
{
    col_lm_train_config c = {
        .batch = B, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 0.05f, /* small: every step clips */
        .grad_accum = 2,
        .seed = 11,
        .chunk_bytes = 16 << 10,
        .nvme_dir = kinds ? dir : NULL,
        .nvme_kinds = kinds,
        .compute_budget = compute,
    };
    col_err err = {0};
    if (col_lm_preset(model, &c.model, &err) != COL_OK)
        TL_NOTE("preset %s: %s", model, err.msg);
    c.model.dropout = 0.1f;
    return c;
}

/* the smallest compute tier of the training graph on the device */
static size_t least_budget(const char *model, unsigned kinds)
{
    col_lm_train_config c = config(model, kinds, (size_t)1 << 30);
    return tl_lm_least_budget(&c, &fake, model);
}

static int V;

/* a CPU session (everything in host memory, no compute tier) against a device session */
static void compare(const col_backend *dev, const char *model, unsigned kinds, size_t budget, const char *what)
{
    col_err err = {0};
    col_lm_train_config h = config(model, 0, 0), d = config(model, kinds, budget);
    V = h.model.vocab_size;
    col_lm_trainer *a = NULL, *b = NULL;
    int live0 = fk.live, td0 = fk.to_dev, th0 = fk.to_host, k0 = kernels;
    bool ok = col_lm_trainer_create(&h, &cpu, &a, &err) == COL_OK && col_lm_trainer_create(&d, dev, &b, &err) == COL_OK;
    TL_OK(ok, "%s %s: a CPU session and a device session with a %zu-byte compute tier: %s", model, what, budget,
          err.msg);
    if (!ok) {
        col_lm_trainer_free(a), col_lm_trainer_free(b);
        return;
    }
    float l0[STEPS] = {0}, l1[STEPS] = {0};
    ok = tl_lm_steps(a, 0, STEPS, 300, V, l0, &err) && tl_lm_steps(b, 0, STEPS, 300, V, l1, &err);
    TL_OK(ok, "%s %s: %d steps (AdamW, grad_accum 2, dropout, clipping) on both: %s", model, what, STEPS, err.msg);
    TL_OK(ok && memcmp(l0, l1, sizeof l0) == 0, "%s %s: losses bitwise equal (%.7f ... %.7f vs %.7f ... %.7f)", model,
          what, l0[0], l0[STEPS - 1], l1[0], l1[STEPS - 1]);
    TL_OK(ok && tl_lm_same_weights(a, b), "%s %s: weights bitwise equal after %d steps", model, what, STEPS);
    mt_resident_stats rs;
    mt_resident_get_stats(col_lm_trainer_compute_tier(b), &rs);
    bool async = col_mem_async(dev->mem);
    TL_OK(ok && rs.fetches > 0 && rs.async == async && kernels > k0 && fk.to_dev > td0 && fk.to_host > th0,
          "%s %s: the steps ran on the device through the compute tier (%d fetches, %d write-backs, %.1f KiB "
          "compacted; %d kernels, %d uploads, %d downloads), %s", model, what, rs.fetches, rs.writebacks,
          rs.compacted / 1024.0, kernels - k0, fk.to_dev - td0, fk.to_host - th0,
          async ? "on the copy queue" : "synchronously");

    int32_t ids[B * T], tg[B * T];
    tl_lm_batch(77, V, B * T, ids, tg);
    float ea = 0, eb = 0;
    const float *xa = NULL, *xb = NULL;
    ok = ok && col_lm_trainer_eval(a, ids, tg, &ea, &xa, &err) == COL_OK &&
         col_lm_trainer_eval(b, ids, tg, &eb, &xb, &err) == COL_OK;
    TL_OK(ok && ea == eb && memcmp(xa, xb, sizeof(float) * B * T * (size_t)V) == 0 && fk_find_block(xb, 1) < 0,
          "%s %s: evaluation loss %.7f and logits bitwise equal, the logits in host memory: %s", model, what, ea,
          err.msg);
    ok = ok && col_lm_trainer_next_logits(a, ids, 9, &xa, &err) == COL_OK &&
         col_lm_trainer_next_logits(b, ids, 9, &xb, &err) == COL_OK;
    TL_OK(ok && memcmp(xa, xb, sizeof(float) * (size_t)V) == 0 && fk_find_block(xb, 1) < 0,
          "%s %s: next-token logits bitwise equal, in host memory: %s", model, what, err.msg);
    int32_t ga[NTOK], gb[NTOK];
    ok = ok && col_lm_trainer_greedy(a, ids, 5, NTOK, ga, &err) == COL_OK &&
         col_lm_trainer_greedy(b, ids, 5, NTOK, gb, &err) == COL_OK;
    TL_OK(ok && memcmp(ga, gb, sizeof ga) == 0, "%s %s: greedy decoding (key/value cache on the device) gives the same "
          "%d tokens (%d %d %d ...): %s", model, what, NTOK, ga[0], ga[1], ga[2], err.msg);
    const float *da = NULL, *db = NULL;
    ok = ok && col_lm_trainer_decode_reset(a, 8, &err) == COL_OK && col_lm_trainer_decode_reset(b, 8, &err) == COL_OK &&
         col_lm_trainer_decode(a, ids, 3, &da, &err) == COL_OK && col_lm_trainer_decode(b, ids, 3, &db, &err) == COL_OK;
    TL_OK(ok && memcmp(da, db, sizeof(float) * (size_t)V) == 0 && fk_find_block(db, 1) < 0,
          "%s %s: decoding after a reset to another length: the same logits, in host memory: %s", model, what,
          err.msg);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
    TL_OK(fk.live == live0 && fk.refused == 0 && off_device == 0,
          "%s %s: every block went back (%d live); no copy refused, no kernel off the device%s%s", model, what,
          fk.live, fk.first[0] ? ": " : "", fk.first);
}

/* compaction on a table without a device-to-device copy: refused, clearly */
static void test_nocopy(const char *model, size_t budget)
{
    col_err err = {0};
    col_lm_train_config d = config(model, 0, budget);
    col_lm_trainer *b = NULL;
    float l[STEPS];
    int live0 = fk.live;
    bool ok = col_lm_trainer_create(&d, &fake, &b, &err) == COL_OK && tl_lm_steps(b, 0, 1, 300, V, l, &err);
    mt_resident_stats rs = {0};
    if (ok)
        mt_resident_get_stats(col_lm_trainer_compute_tier(b), &rs);
    col_lm_trainer_free(b);
    b = NULL;
    TL_OK(ok && rs.compacted > 0, "%s: one step through a %zu-byte compute tier compacts its arena (%.1f KiB): %s",
          model, budget, rs.compacted / 1024.0, err.msg);
    err = (col_err){0};
    ok = col_lm_trainer_create(&d, &fake_nocopy, &b, &err) == COL_OK;
    col_status st = ok ? col_lm_trainer_step(b, (int32_t[B * T * 2]){0}, (int32_t[B * T * 2]){0}, NULL, &err) : COL_OK;
    col_lm_trainer_free(b);
    TL_OK(ok && st == COL_EINVAL && strstr(err.msg, "no device-to-device copy") && fk.live == live0,
          "%s: the same step on a table without a copy is refused: %s", model, err.msg);
}

int main(void)
{
    fake_init();
    tl_mkdtemp(dir);
    col_err err = {0};

    /* a device session needs a compute tier */
    col_lm_train_config c = config("gpt2-tiny", 0, 0);
    col_lm_trainer *t = NULL;
    col_status st = col_lm_trainer_create(&c, &fake, &t, &err);
    TL_OK(st == COL_EINVAL && !t && strstr(err.msg, "compute tier budget") &&
              err.settings == 1u << COL_SETTING_COMPUTE_BUDGET && fk.live == 0,
          "a device session without a compute budget (the budget marked): %s", err.msg);

    const char *models[] = {"gpt2-tiny", "llama-tiny"};
    for (int m = 0; m < 2; m++) {
        for (int nv = 0; nv < 2; nv++) {
            unsigned kinds = nv ? ALL : 0;
            size_t least = least_budget(models[m], kinds);
            TL_OK(least > 0, "%s: the smallest compute tier %s: %zu bytes", models[m],
                  nv ? "with everything on NVMe" : "with host homes", least);
            if (!least)
                continue;
            char what[64];
            snprintf(what, sizeof what, "%s, smallest tier (+ key/value cache)", nv ? "NVMe homes" : "host homes");
            /* decoding keeps its key/value cache on the tier beside the activation arena the session's plans
             * share: the smallest tier that runs everything here is the training graph's and that cache */
            col_lm_config mc = config(models[m], 0, 0).model;
            size_t kv = sizeof(float) * 2 * (size_t)mc.n_layer * (size_t)mc.n_kv_head * (5 + NTOK) * (size_t)mc.head_dim;
            compare(&fake, models[m], kinds, least + kv, what);
            snprintf(what, sizeof what, "%s, twice the smallest tier", nv ? "NVMe homes" : "host homes");
            compare(&fake, models[m], kinds, 2 * least, what);
            /* the same through a copy queue whose copies run only when waited for */
            int late0 = fkq.late;
            snprintf(what, sizeof what, "%s, async copies, smallest tier", nv ? "NVMe homes" : "host homes");
            compare(&fake_async, models[m], kinds, least + kv, what);
            snprintf(what, sizeof what, "%s, async copies, twice the smallest", nv ? "NVMe homes" : "host homes");
            compare(&fake_async, models[m], kinds, 2 * least, what);
            TL_OK(fkq.late > late0 && fkq.events == 0 && fkq.pins == fkq.unpins && (nv || fkq.pins > 0),
                  "%s %s: %d copies ran late (when waited for); every event freed (%d live), every pin undone "
                  "(%d pins, %d unpins)", models[m], nv ? "NVMe homes" : "host homes", fkq.late - late0, fkq.events,
                  fkq.pins, fkq.unpins);
            if (!nv)
                test_nocopy(models[m], least);
        }
    }
    TL_OK(fk.live == 0 && fk.allocs == fk.frees, "every fake block went back (%d allocations, %d device copies)",
          fk.allocs, fk.copies);
    rmdir(dir);
    col_cpu_backend_free(&cpu);
    return tl_done();
}
