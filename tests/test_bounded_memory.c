/* test_bounded_memory.c - memory budgets are bounds (issue 12). A session
 * whose parameters, gradients and optimizer states live on the NVMe tier,
 * with a host budget far below them (1 MiB against ~220 MB of states),
 * trains, evaluates, saves, and is resumed bit for bit from what it saved;
 * through all of it the process's peak resident memory (VmHWM, started over
 * when the session is made) stays within what was resident before plus the
 * session's own bound (col_lm_trainer_memory: host budget + compute tier +
 * fixed overhead). A save that read a whole kind into host memory (as
 * saves did before) goes over it by the size of the optimizer states.
 *
 * A LoRA session with everything on NVMe saves merged weights and its
 * adapter through the same bounded path, bitwise as a session in host
 * memory does, and loads the adapter back. */
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "mt_resident.h"
#include "procmem.h"
#include "testlib.h"
#include "textio.h"
#include "file_testutil.h"
#include "lm_testutil.h"
#include "backend_cpu.h"

static col_backend be;
static char root[] = "/tmp/col_bounded_XXXXXX";
static char nvme[600], dir_a[600], dir_b[600], dir_r[600];
static const unsigned ALL = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;

enum { B = 1, T = 32, V = 2048 };

/* ~15M parameters: 60 MB per kind, 240 MB with gradients and AdamW's two states */
static col_lm_train_config config(size_t compute)
{
    col_lm_train_config c = {
        .model = col_gpt2_config(V, 64, 384, 8, 6),
        .batch = B, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 1e-3f},
        .grad_clip = 1.0f,
        .seed = 5,
        .host_budget = (size_t)1 << 20,
        .nvme_dir = nvme,
        .nvme_kinds = ALL,
        .compute_budget = compute,
    };
    c.model.dropout = 0.1f;
    return c;
}

static size_t rss_now(void)
{
    col_procmem m;
    return col_procmem_read(&m) ? m.rss : 0;
}

static size_t peak_now(void)
{
    col_procmem m;
    return col_procmem_read(&m) ? m.peak : 0;
}

static bool same_dirs(const char *a, const char *b)
{
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "config.json"};
    bool same = true;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char pa[700], pb[700];
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        same = same && tl_same_file(pa, pb);
    }
    return same;
}

static bool save_all(col_lm_trainer *t, const char *dir, col_err *err)
{
    return col_lm_trainer_save_model(t, dir, err) == COL_OK && col_lm_trainer_save_optimizer(t, dir, err) == COL_OK;
}

static bool resume(col_lm_trainer *t, const char *dir, col_err *err)
{
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    col_ckpt *ck = NULL;
    bool ok = col_ckpt_open(path, &ck, err) == COL_OK && col_lm_trainer_load(t, ck, err) == COL_OK &&
              col_lm_trainer_load_optimizer(t, dir, err) == COL_OK;
    col_ckpt_close(ck);
    return ok;
}

/* the smallest compute tier of the training graph (from a session made and freed before any measuring) */
static size_t least_budget(void)
{
    col_err err = {0};
    col_lm_train_config c = config((size_t)1 << 30);
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(&c, &be, &t, &err) != COL_OK) {
        TL_NOTE("probe: %s", err.msg);
        return 0;
    }
    mt_resident_stats rs;
    mt_resident_get_stats(col_lm_trainer_compute_tier(t), &rs);
    col_lm_trainer_free(t);
    return rs.min_budget;
}

static void note_memory(const char *what, size_t base, size_t peak, const col_lm_memory *m)
{
    TL_NOTE("%s: peak %.1f MB; bound %.1f MB = before %.1f + host budget %.1f + compute %.1f + overhead %.1f "
            "(staging %.1f, tables %.1f)", what, peak / 1e6, (base + m->bound) / 1e6, base / 1e6,
            m->host_budget / 1e6, m->compute / 1e6, m->overhead / 1e6, m->staging / 1e6, m->tables / 1e6);
}

static void test_train_save_resume(void)
{
    size_t least = least_budget();
    TL_OK(least > 0, "the training graph's smallest compute tier: %.1f MB", least / 1e6);
    if (!least)
        return;
    col_err err = {0};
    col_lm_train_config c = config(least + (least >> 3));
    float loss[6] = {0}, again[6] = {0};

    /* session A: 2 steps, an evaluation, a save; 2 steps more and another save */
    size_t base = rss_now();
    bool resets = col_procmem_reset_peak();
    col_lm_trainer *a = NULL;
    bool ok = col_lm_trainer_create(&c, &be, &a, &err) == COL_OK;
    col_lm_memory m = {0};
    if (ok)
        col_lm_trainer_memory(a, &m);
    TL_OK(ok && col_lm_trainer_nvme_kinds(a) == ALL && m.host <= m.host_budget &&
              (size_t)col_lm_trainer_param_count(a) * 8 > 100 * m.host_budget,
          "a session of %.1fM parameters (%.0f MB of optimizer states) with everything on NVMe and a host budget of "
          "%.1f MB: %s", ok ? col_lm_trainer_param_count(a) / 1e6 : 0.0,
          ok ? col_lm_trainer_param_count(a) * 8 / 1e6 : 0.0, c.host_budget / 1e6, err.msg);
    if (!ok)
        return;
    int32_t ids[B * T], tg[B * T];
    tl_lm_batch(99, V, B * T, ids, tg);
    float el = 0;
    ok = tl_lm_steps(a, 0, 2, 40, V, loss, &err) && col_lm_trainer_eval(a, ids, tg, &el, NULL, &err) == COL_OK;
    size_t train_peak = peak_now();
    ok = ok && save_all(a, dir_a, &err);
    size_t save_peak = peak_now();
    ok = ok && tl_lm_steps(a, 2, 4, 40, V, loss, &err) && save_all(a, dir_r, &err);
    size_t peak = peak_now();
    col_lm_trainer_memory(a, &m);
    note_memory("train, evaluate, save", base, peak, &m);
    TL_OK(ok, "4 steps, an evaluation and two saves: losses %.5f .. %.5f: %s", loss[0], loss[3], err.msg);
    TL_OK(resets, "the kernel lets the peak start over (/proc/self/clear_refs)");
    if (TL_RSS_MEANINGFUL)
        TL_OK(peak <= base + m.bound, "peak resident %.1f MB within the bound %.1f MB (training %.1f MB, with a save "
              "%.1f MB)", peak / 1e6, (base + m.bound) / 1e6, train_peak / 1e6, save_peak / 1e6);
    else
        tl_skip_check("peak resident within the bound", TL_RSS_SKIP_WHY);
    TL_OK(m.staging < (size_t)col_lm_trainer_param_count(a) * 4, "the staging buffers (%.1f MB) hold less than one "
          "kind (%.1f MB)", m.staging / 1e6, col_lm_trainer_param_count(a) * 4 / 1e6);
    col_lm_trainer_free(a);

    /* session B: resumed from the first save, it runs steps 3 and 4 as A did */
    base = rss_now();
    col_procmem_reset_peak();
    col_lm_trainer *b = NULL;
    ok = col_lm_trainer_create(&c, &be, &b, &err) == COL_OK && resume(b, dir_a, &err) &&
         col_lm_trainer_steps(b) == 2 && tl_lm_steps(b, 2, 4, 40, V, again, &err) && save_all(b, dir_b, &err);
    peak = peak_now();
    if (b)
        col_lm_trainer_memory(b, &m);
    note_memory("resume, train, save", base, peak, &m);
    TL_OK(ok && again[2] == loss[2] && again[3] == loss[3], "resumed from the save: steps 3 and 4 give the losses "
          "of the run that never stopped (%.7f %.7f): %s", again[2], again[3], err.msg);
    TL_OK(ok && same_dirs(dir_r, dir_b), "and its saved model and optimizer state are byte for byte the same");
    if (TL_RSS_MEANINGFUL)
        TL_OK(b && peak <= base + m.bound, "resuming: peak resident %.1f MB within the bound %.1f MB", peak / 1e6,
              (base + m.bound) / 1e6);
    else
        TL_OK(b, "resuming (its peak is not checked: %s)", TL_RSS_SKIP_WHY);
    col_lm_trainer_free(b);
}

/* LoRA: merged weights and the adapter out of NVMe, as a host session writes them; the adapter back in */
static void test_lora(void)
{
    col_err err = {0};
    col_lm_train_config n = {
        .model = col_gpt2_config(257, 32, 64, 2, 4),
        .batch = 2, .seq = 16,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .seed = 3,
        .chunk_bytes = 16 << 10,
        .nvme_dir = nvme,
        .nvme_kinds = ALL,
        .compute_budget = (size_t)64 << 20,
        .lora = {.rank = 4, .alpha = 8},
    };
    col_lm_train_config h = n;
    h.nvme_dir = NULL, h.nvme_kinds = 0, h.compute_budget = 0;
    col_lm_trainer *a = NULL, *b = NULL;
    float la[3], lb[3];
    bool ok = col_lm_trainer_create(&h, &be, &a, &err) == COL_OK && col_lm_trainer_create(&n, &be, &b, &err) == COL_OK &&
              tl_lm_steps(a, 0, 3, 7, 257, la, &err) && tl_lm_steps(b, 0, 3, 7, 257, lb, &err);
    TL_OK(ok && memcmp(la, lb, sizeof la) == 0, "LoRA on the host and on NVMe: the same 3 losses: %s", err.msg);
    char ma[1024], mb[1024], pa[1200], pb[1200];
    snprintf(ma, sizeof ma, "%s/lora_host", root);
    snprintf(mb, sizeof mb, "%s/lora_nvme", root);
    ok = ok && col_lm_trainer_save_model_ex(a, ma, COL_SAVE_MERGE_LORA, &err) == COL_OK &&
         col_lm_trainer_save_model_ex(b, mb, COL_SAVE_MERGE_LORA, &err) == COL_OK;
    snprintf(pa, sizeof pa, "%s/model.safetensors", ma);
    snprintf(pb, sizeof pb, "%s/model.safetensors", mb);
    TL_OK(ok && tl_same_file(pa, pb), "merged weights saved from NVMe: byte for byte the host session's: %s", err.msg);
    ok = ok && col_lm_trainer_save_model(a, ma, &err) == COL_OK && col_lm_trainer_save_model(b, mb, &err) == COL_OK;
    snprintf(pa, sizeof pa, "%s/adapter_model.safetensors", ma);
    snprintf(pb, sizeof pb, "%s/adapter_model.safetensors", mb);
    TL_OK(ok && tl_same_file(pa, pb), "and the adapter: %s", err.msg);
    col_lm_trainer *c = NULL;
    ok = ok && col_lm_trainer_create(&n, &be, &c, &err) == COL_OK && col_lm_trainer_load_adapter(c, mb, &err) == COL_OK;
    TL_OK(ok && tl_lm_same_weights(b, c), "an adapter loaded into a fresh NVMe session: the weights of the one saved: "
          "%s", err.msg);
    col_lm_trainer_free(a), col_lm_trainer_free(b), col_lm_trainer_free(c);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void)
{
    if (!mkdtemp(root)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    snprintf(nvme, sizeof nvme, "%s/nvme", root);
    snprintf(dir_a, sizeof dir_a, "%s/a", root);
    snprintf(dir_b, sizeof dir_b, "%s/b", root);
    snprintf(dir_r, sizeof dir_r, "%s/r", root);
    mkdir(nvme, 0755);
    tl_cpu_backend(&be);
    test_train_save_resume();
    test_lora();
    col_cpu_backend_free(&be);
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return tl_done();
}
