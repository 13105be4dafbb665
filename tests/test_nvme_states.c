/* test_nvme_states.c - optimizer states on the NVMe tier: the step streams
 * them through host buffers and gives bitwise the results of host states;
 * they save and resume; faults and a too-small NVMe size limit are clear errors. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "memtier.h"
#include "nvme.h"
#include "rng.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "nvme_testutil.h"
#include "backend_cpu.h"

static col_backend be;
static char dir[] = "/tmp/col_nvme_states_XXXXXX";
static char save_dir[] = "/tmp/col_nvme_save_XXXXXX";

enum { B = 2, T = 16, V = 257, STEPS = 6 };

static col_lm_train_config config(col_opt_kind opt, bool nvme)
{
    col_lm_train_config c = {
        .model = col_gpt2_config(V, 32, 32, 2, 4),
        .batch = B, .seq = T,
        .opt = col_opt_defaults(opt),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 1.0f, .seed = 7,
        .chunk_bytes = 16 << 10,
        .nvme_dir = nvme ? dir : NULL,
    };
    c.model.dropout = 0.1f;
    if (opt == COL_OPT_SGD)
        c.opt.momentum = 0.9f; /* plain SGD keeps no state */
    return c;
}

static bool steps(col_lm_trainer *t, int from, int to, float *loss, col_err *err)
{
    return tl_lm_steps(t, from, to, 100, V, loss, err);
}

static int files_in(const char *path)
{
    int n = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_same_results(col_opt_kind opt)
{
    col_err err = {0};
    float l0[STEPS], l1[STEPS];
    col_lm_train_config h = config(opt, false), n = config(opt, true);
    col_lm_trainer *a = NULL, *b = NULL;
    bool ok = col_lm_trainer_create(&h, &be, &a, &err) == COL_OK && col_lm_trainer_create(&n, &be, &b, &err) == COL_OK &&
              steps(a, 0, STEPS, l0, &err) && steps(b, 0, STEPS, l1, &err);
    const char *name = col_opt_kind_name(opt);
    TL_OK(ok, "%s: %d steps with host states and with NVMe states: %s", name, STEPS, err.msg);
    if (!ok) {
        col_lm_trainer_free(a), col_lm_trainer_free(b);
        return;
    }
    mt_pool_stats ps;
    mt_stats(col_lm_trainer_pool(b), &ps);
    uint64_t written = mt_nvme_bytes_written(col_lm_trainer_pool(b));
    TL_OK(ps.bytes[MT_OPTSTATE][MT_TIER_NVME] > 0 && ps.bytes[MT_OPTSTATE][MT_TIER_HOST] == 0 &&
              written >= (uint64_t)STEPS * ps.tensor_bytes[MT_OPTSTATE],
          "%s: the states (%zu bytes) live on NVMe only; %.2f MB written in %d steps", name,
          ps.tensor_bytes[MT_OPTSTATE], written / 1e6, STEPS);
    TL_OK(memcmp(l0, l1, sizeof l0) == 0 && tl_lm_same_weights(a, b), "%s: losses and weights bitwise equal (%.7f ... %.7f)",
          name, l0[0], l0[STEPS - 1]);
    TL_OK(files_in(dir) == 0, "%s: the scratch file is not visible in the directory", name);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
}

/* 3 steps with NVMe states, save, a fresh session (host states) loads and goes on: as 6 straight */
static void test_save_resume(void)
{
    col_err err = {0};
    float l0[STEPS], l1[STEPS];
    col_lm_train_config h = config(COL_OPT_ADAMW, false), n = config(COL_OPT_ADAMW, true);
    col_lm_trainer *ref = NULL, *a = NULL, *b = NULL, *c = NULL;
    bool ok = col_lm_trainer_create(&h, &be, &ref, &err) == COL_OK && steps(ref, 0, STEPS, l0, &err) &&
              col_lm_trainer_create(&n, &be, &a, &err) == COL_OK && steps(a, 0, STEPS / 2, l1, &err) &&
              col_lm_trainer_save_model(a, save_dir, &err) == COL_OK &&
              col_lm_trainer_save_optimizer(a, save_dir, &err) == COL_OK;
    TL_OK(ok, "NVMe states saved after %d steps: %s", STEPS / 2, err.msg);
    col_ckpt *ck = NULL;
    for (int k = 0; k < 2 && ok; k++) { /* resumed into host states, then into NVMe states */
        col_lm_train_config cc = k ? n : h;
        float l2[STEPS];
        memcpy(l2, l1, sizeof l2);
        ok = col_lm_trainer_create(&cc, &be, &b, &err) == COL_OK && col_ckpt_open(save_dir, &ck, &err) == COL_OK &&
             col_lm_trainer_load(b, ck, &err) == COL_OK && col_lm_trainer_load_optimizer(b, save_dir, &err) == COL_OK &&
             steps(b, STEPS / 2, STEPS, l2, &err);
        TL_OK(ok && memcmp(l0, l2, sizeof l0) == 0 && tl_lm_same_weights(ref, b),
              "resumed into %s states: the run that never stopped, bit for bit: %s", k ? "NVMe" : "host", err.msg);
        col_ckpt_close(ck);
        ck = NULL;
        col_lm_trainer_free(b);
        b = NULL;
    }
    (void)c;
    col_lm_trainer_free(ref);
    col_lm_trainer_free(a);
}

static void test_faults(void)
{
    col_err err = {0};
    float l[STEPS];
    tl_read_fault fs = {0, 3};
    mt_nvme_faults hook = {.before_submit = tl_fail_read, .user = &fs};
    col_lm_train_config n = config(COL_OPT_ADAMW, true);
    n.nvme_faults = &hook;
    col_lm_trainer *t = NULL;
    bool made = col_lm_trainer_create(&n, &be, &t, &err) == COL_OK;
    bool failed = made && !steps(t, 0, STEPS, l, &err);
    TL_OK(failed && err.code == COL_EIO && strstr(err.msg, "NVMe"), "an I/O error reading a state chunk stops the step: %s",
          err.msg);
    col_lm_trainer_free(t);
    t = NULL;
    n = config(COL_OPT_ADAMW, true);
    n.nvme_max = 3 * 16384; /* three slots: less than the states need */
    TL_OK(col_lm_trainer_create(&n, &be, &t, &err) == COL_ENOMEM && strstr(err.msg, "size limit") &&
              strstr(err.msg, "at least") && err.settings == 1u << COL_SETTING_NVME_MAX,
          "a too small NVMe size limit names what is needed (the limit marked): %s", err.msg);
    col_lm_trainer_free(t);
    t = NULL;
    n = config(COL_OPT_ADAMW, true);
    n.nvme_dir = "/nonexistent/colossal";
    TL_OK(col_lm_trainer_create(&n, &be, &t, &err) == COL_EIO && strstr(err.msg, "/nonexistent/colossal") &&
              err.settings == 1u << COL_SETTING_NVME_DIR,
          "a missing NVMe directory (the directory marked): %s", err.msg);
    col_lm_trainer_free(t);
}

int main(void)
{
    tl_mkdtemp(dir);
    tl_mkdtemp(save_dir);
    tl_cpu_backend(&be);
    test_same_results(COL_OPT_ADAMW);
    test_same_results(COL_OPT_LAMB);
    test_same_results(COL_OPT_SGD);
    test_save_resume();
    test_faults();
    col_cpu_backend_free(&be);
    if (!tl_remove_tree(dir) || !tl_remove_tree(save_dir))
        TL_NOTE("could not remove %s or %s", dir, save_dir);
    return tl_done();
}
