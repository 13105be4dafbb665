/* test_lm_checkpoint.c - saving and resuming a training session: the model
 * in Hugging Face layout round-trips, and a run stopped and resumed from
 * disk gives bit-for-bit the losses of one that never stopped. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "rng.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/hf"
#endif

static col_backend be;
static char dir[] = "/tmp/col_ckpt_XXXXXX";

enum { B = 2, T = 8 };

static col_lm_train_config config(const col_lm_config *m, uint64_t seed)
{
    col_lm_train_config c = {.model = *m, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = seed,
                             .grad_clip = 1.0f};
    c.lr = (col_lr_sched){.kind = COL_LR_COSINE, .lr_max = 3e-3f, .lr_min = 1e-4f, .warmup_steps = 2, .total_steps = 8};
    return c;
}

/* runs steps [from, to) and writes their losses */
static bool train(col_lm_trainer *t, int from, int to, int V, float *loss)
{
    col_err err = {0};
    return tl_lm_steps(t, from, to, 1000, V, loss, &err);
}

static void test_resume(const char *name)
{
    char src[512];
    snprintf(src, sizeof src, "%s/%s", FIXTURES, name);
    col_err err = {0};
    col_lm_config m;
    if (col_hf_load_config(src, &m, &err) != COL_OK) {
        TL_OK(false, "%s: config: %s", name, err.msg);
        return;
    }
    m.dropout = 0.1f; /* the dropout masks must resume too */
    col_lm_train_config c = config(&m, 5);
    col_lm_trainer *a = NULL, *b = NULL, *r = NULL;
    float straight[8], resumed[8];
    bool ok = col_lm_trainer_create(&c, &be, &a, &err) == COL_OK && train(a, 0, 8, m.vocab_size, straight);
    ok = ok && col_lm_trainer_create(&c, &be, &b, &err) == COL_OK && train(b, 0, 4, m.vocab_size, resumed) &&
         col_lm_trainer_save_model(b, dir, &err) == COL_OK && col_lm_trainer_save_optimizer(b, dir, &err) == COL_OK;
    /* a new session whose weights and optimizer state are scrambled, then everything from disk */
    col_ckpt *ck = NULL;
    col_lm_config saved;
    ok = ok && col_hf_load_config(dir, &saved, &err) == COL_OK && col_lm_trainer_create(&c, &be, &r, &err) == COL_OK;
    for (int i = 0; ok && i < col_lm_param_count(&m); i++) {
        const col_param_spec *s;
        float *w = col_lm_trainer_param(r, i, &s);
        col_fill_uniform(w, col_param_numel(s), 77 + (uint64_t)i, -1, 1);
        col_fill_uniform(col_lm_trainer_state(r, i, 0), col_param_numel(s), 78 + (uint64_t)i, -1, 1);
        col_fill_uniform(col_lm_trainer_state(r, i, 1), col_param_numel(s), 79 + (uint64_t)i, 0, 1);
    }
    ok = ok && col_ckpt_open(dir, &ck, &err) == COL_OK && col_lm_trainer_load(r, ck, &err) == COL_OK &&
         col_lm_trainer_load_optimizer(r, dir, &err) == COL_OK && train(r, 4, 8, m.vocab_size, resumed);
    TL_OK(ok && memcmp(straight, resumed, sizeof straight) == 0 && col_lm_trainer_steps(r) == 8,
          "%s: stopped after 4 steps and resumed from disk, the losses are bitwise those of an unbroken run (%.6f) %s",
          name, ok ? resumed[7] : 0.0f, ok ? "" : err.msg);
    TL_OK(ok && saved.arch == m.arch && saved.hidden == m.hidden && saved.n_kv_head == m.n_kv_head &&
              saved.rope.theta == m.rope.theta && saved.rope.llama3_factor == m.rope.llama3_factor &&
              saved.tie_embeddings == m.tie_embeddings && saved.pre_ln == m.pre_ln &&
              saved.word_embed_proj_dim == m.word_embed_proj_dim && saved.norm_eps == m.norm_eps &&
              saved.attn_bias == m.attn_bias && saved.mlp_bias == m.mlp_bias,
          "%s: the written config.json reads back as the same model", name);
    col_ckpt_close(ck);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
    col_lm_trainer_free(r);
}

static void test_errors(void)
{
    col_err err = {0};
    col_lm_config m = col_gpt2_config(16, 8, 8, 1, 2);
    col_lm_train_config c = config(&m, 1);
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(&c, &be, &t, &err) != COL_OK) {
        TL_OK(false, "trainer: %s", err.msg);
        return;
    }
    char sub[600];
    snprintf(sub, sizeof sub, "%s/empty", dir);
    mkdir(sub, 0755);
    TL_OK(col_lm_trainer_load_optimizer(t, sub, &err) != COL_OK && strstr(err.msg, "optimizer.safetensors"),
          "no optimizer state: %s", err.msg);
    TL_OK(col_lm_trainer_save_optimizer(t, sub, &err) == COL_OK, "save optimizer state");
    col_lm_train_config cs = c;
    cs.opt = col_opt_defaults(COL_OPT_SGD);
    cs.opt.momentum = 0.9f;
    col_lm_trainer *s = NULL;
    TL_OK(col_lm_trainer_create(&cs, &be, &s, &err) == COL_OK && col_lm_trainer_load_optimizer(s, sub, &err) == COL_EFORMAT &&
              strstr(err.msg, "adamw"),
          "state of another optimizer is refused: %s", err.msg);
    col_lm_trainer_free(s);
    col_lm_train_config other = c;
    other.seed = 2;
    TL_OK(col_lm_trainer_create(&other, &be, &s, &err) == COL_OK && col_lm_trainer_load_optimizer(s, sub, &err) == COL_EFORMAT &&
              strstr(err.msg, "same seed"),
          "resuming under another seed is refused: %s", err.msg);
    col_lm_trainer_free(s);
    TL_OK(col_lm_trainer_save_model(t, "/proc/no-such-dir/x", &err) == COL_EIO && strstr(err.msg, "/proc/no-such-dir/x"),
          "unwritable output directory: %s", err.msg);
    snprintf(sub, sizeof sub, "%s/file", dir);
    FILE *f = fopen(sub, "w");
    fclose(f);
    TL_OK(col_lm_trainer_save_model(t, sub, &err) == COL_EIO && strstr(err.msg, "not a directory"),
          "output path is a file: %s", err.msg);
    col_lm_trainer_free(t);
}

int main(void)
{
    tl_cpu_backend(&be);
    tl_mkdtemp(dir);
    const char *models[] = {"gpt2", "opt_postln", "llama3", "gpt2_untied", "llama_bias"};
    for (int i = 0; i < 5; i++)
        test_resume(models[i]);
    test_errors();
    TL_OK(tl_remove_tree(dir), "cleanup");
    col_cpu_backend_free(&be);
    return tl_done();
}
