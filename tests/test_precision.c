/* test_precision.c - mixed precision in a session (lm_trainer.h,
 * compute_dtype): a tiny GPT-2 and a tiny LLaMA trained 20 steps in bf16 and
 * in f16 (dynamic loss scaling) follow the f32 run from the same weights and
 * data; an f16 overflow skips its step, leaves everything unchanged and is
 * counted; the saved model is the f32 masters and loads back; placement on
 * the NVMe tier and through a compute tier gives the same bits as a session
 * in host memory; a stopped run resumes bit for bit; the memory is what the
 * dtypes say. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "memtier.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "file_testutil.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/hf"
#endif

static col_backend be;
static char nvme_dir[] = "/tmp/col_prec_nvme_XXXXXX";
static char save_dir[] = "/tmp/col_prec_save_XXXXXX";

enum { B = 2, T = 16, STEPS = 20 };

static bool model(const char *name, col_lm_config *m)
{
    char src[512];
    snprintf(src, sizeof src, "%s/%s", FIXTURES, name);
    col_err err = {0};
    if (col_hf_load_config(src, m, &err) != COL_OK) {
        TL_OK(false, "%s: config: %s", name, err.msg);
        return false;
    }
    return true;
}

static col_lm_train_config config(const col_lm_config *m, col_dtype dt)
{
    col_lm_train_config c = {.model = *m, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = 3,
                             .grad_clip = 1.0f, .compute_dtype = dt};
    c.lr = (col_lr_sched){.kind = COL_LR_COSINE, .lr_max = 3e-3f, .lr_min = 3e-4f, .warmup_steps = 3,
                          .total_steps = STEPS};
    return c;
}

/* step k's batch: random tokens, each followed by a fixed function of itself (a bigram to learn) */
static void batch(int k, int V, int n, int32_t *ids, int32_t *tg)
{
    tl_lm_batch(500 + (uint64_t)k, V, n, ids, tg);
    for (int i = 0; i < n; i++)
        tg[i] = (ids[i] * 7 + 3) % V;
}

/* steps [from, to); loss[k] gets step k's loss, info (if not NULL) its step info */
static bool train_info(col_lm_trainer *t, int from, int to, float *loss, col_lm_step_info *info, col_err *err)
{
    const col_lm_train_config *c = col_lm_trainer_config(t);
    int n = c->batch * c->seq * (c->grad_accum > 1 ? c->grad_accum : 1);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *tg = malloc(sizeof(int32_t) * (size_t)n);
    bool ok = ids && tg;
    for (int k = from; k < to && ok; k++) {
        col_lm_step_info in;
        batch(k, c->model.vocab_size, n, ids, tg);
        ok = col_lm_trainer_step(t, ids, tg, &in, err) == COL_OK;
        if (ok && loss)
            loss[k] = in.loss;
        if (ok && info)
            info[k] = in;
    }
    free(ids), free(tg);
    return ok;
}

static bool train(col_lm_trainer *t, int from, int to, float *loss, col_err *err)
{
    return train_info(t, from, to, loss, NULL, err);
}

/* every tensor's 16-bit weights and f32 master of a equal to b's, bit for bit (NVMe ones through host views) */
static bool same_mixed(col_lm_trainer *a, col_lm_trainer *b)
{
    col_err e = {0};
    unsigned all = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;
    bool va = col_lm_trainer_host_begin(a, all, &e) == COL_OK, vb = col_lm_trainer_host_begin(b, all, &e) == COL_OK;
    bool same = va && vb && col_lm_trainer_n_params(a) == col_lm_trainer_n_params(b);
    for (int i = 0; same && i < col_lm_trainer_n_params(a); i++) {
        const col_param_spec *s;
        const float *x = col_lm_trainer_param(a, i, &s), *y = col_lm_trainer_param(b, i, NULL);
        col_dtype dt;
        const void *p = col_lm_trainer_weights(a, i, &dt), *q = col_lm_trainer_weights(b, i, NULL);
        size_t n = (size_t)col_param_numel(s);
        same = x && y && p && q && memcmp(x, y, sizeof(float) * n) == 0 && memcmp(p, q, col_dtype_size(dt) * n) == 0;
    }
    if (va)
        col_lm_trainer_host_end(a, false, &e);
    if (vb)
        col_lm_trainer_host_end(b, false, &e);
    return same;
}

/* every 16-bit weight is its master rounded to nearest even */
static bool weights_are_rounded_masters(col_lm_trainer *t)
{
    bool ok = true;
    for (int i = 0; ok && i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        const float *m = col_lm_trainer_param(t, i, &s);
        col_dtype dt;
        const uint16_t *w = col_lm_trainer_weights(t, i, &dt);
        for (int64_t j = 0; ok && j < col_param_numel(s); j++)
            ok = w[j] == (dt == COL_BF16 ? col_f32_to_bf16(m[j]) : col_f32_to_f16(m[j]));
    }
    return ok;
}

/* ---- f32 against bf16 and f16 ---- */

static void test_against_f32(const char *name)
{
    col_lm_config m;
    if (!model(name, &m))
        return;
    float loss[3][STEPS];
    const col_dtype dts[3] = {COL_F32, COL_BF16, COL_F16};
    col_err err = {0};
    int64_t skipped = 0;
    for (int k = 0; k < 3; k++) {
        col_lm_train_config c = config(&m, dts[k]);
        col_lm_trainer *t = NULL;
        bool ok = col_lm_trainer_create(&c, &be, &t, &err) == COL_OK && train(t, 0, STEPS, loss[k], &err);
        if (!ok) {
            TL_OK(false, "%s %s: %d steps: %s", name, col_dtype_name(dts[k]), STEPS, err.msg);
            col_lm_trainer_free(t);
            return;
        }
        if (k) {
            col_dtype dt, gt;
            void *w = col_lm_trainer_weights(t, 1, &dt), *g = col_lm_trainer_grad_data(t, 1, &gt);
            TL_OK(w && g && dt == dts[k] && gt == dts[k] && col_lm_trainer_grad(t, 1) == NULL &&
                      weights_are_rounded_masters(t),
                  "%s %s: weights and gradients are %s; every weight is its f32 master rounded", name,
                  col_dtype_name(dts[k]), col_dtype_name(dts[k]));
        }
        if (dts[k] == COL_F16) {
            col_lm_step_info info;
            int32_t ids[B * T], tg[B * T];
            tl_lm_batch(77, m.vocab_size, B * T, ids, tg);
            ok = col_lm_trainer_step(t, ids, tg, &info, &err) == COL_OK;
            skipped = ok ? info.skipped_total : -1;
            TL_OK(ok && info.loss_scale >= 1.0f && info.loss_scale <= 65536.0f,
                  "%s f16: loss scale %g after %d steps, %lld skipped", name, ok ? info.loss_scale : 0.0,
                  STEPS + 1, (long long)skipped);
        }
        col_lm_trainer_free(t);
    }
    for (int k = 1; k < 3; k++) {
        double worst = 0;
        for (int s = 0; s < STEPS; s++)
            worst = fmax(worst, fabs(loss[k][s] - loss[0][s]) / fabs(loss[0][s]));
        TL_OK(worst <= 2e-2 && loss[k][STEPS - 1] < loss[k][0],
              "%s: %s losses within %.1e of f32 at every one of %d steps (worst %.2e; %.4f -> %.4f, f32 %.4f -> %.4f)",
              name, col_dtype_name(dts[k]), 2e-2, STEPS, worst, loss[k][0], loss[k][STEPS - 1], loss[0][0],
              loss[0][STEPS - 1]);
    }
}

/* ---- f16 overflow: the step is skipped and counted, the scale backs off and grows again ---- */

static void test_overflow(void)
{
    col_lm_config m;
    if (!model("gpt2", &m))
        return;
    col_lm_train_config c = config(&m, COL_F16);
    c.loss_scale = 0x1p30f; /* the gradient seed itself overflows f16 */
    c.loss_scale_window = 3;
    col_err err = {0};
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(&c, &be, &t, &err) != COL_OK) {
        TL_OK(false, "f16 session: %s", err.msg);
        return;
    }
    int nt = col_lm_trainer_n_params(t);
    int32_t ids[B * T], tg[B * T];
    int first_good = -1, skips = 0, skips_first = -1, run = 0;
    bool unchanged = true, halved = true, counted = true, grew = false, prev_skipped = false;
    float prev_scale = 0;
    for (int s = 0; s < 40 && !grew; s++) {
        /* a copy of every weight, master and state before the step */
        size_t total = 0;
        for (int i = 0; i < nt; i++) {
            const col_param_spec *sp;
            col_lm_trainer_param(t, i, &sp);
            total += (size_t)col_param_numel(sp);
        }
        float *before = malloc(sizeof(float) * 3 * total + 1);
        uint16_t *wb = malloc(sizeof(uint16_t) * total + 1);
        size_t off = 0;
        for (int i = 0; i < nt; i++) {
            const col_param_spec *sp;
            const float *w = col_lm_trainer_param(t, i, &sp);
            size_t n = (size_t)col_param_numel(sp);
            memcpy(before + off, w, sizeof(float) * n);
            memcpy(before + total + off, col_lm_trainer_state(t, i, 0), sizeof(float) * n);
            memcpy(before + 2 * total + off, col_lm_trainer_state(t, i, 1), sizeof(float) * n);
            memcpy(wb + off, col_lm_trainer_weights(t, i, NULL), sizeof(uint16_t) * n);
            off += n;
        }
        col_lm_step_info info;
        tl_lm_batch(600 + (uint64_t)s, m.vocab_size, B * T, ids, tg);
        if (col_lm_trainer_step(t, ids, tg, &info, &err) != COL_OK) {
            TL_OK(false, "f16 step %d: %s", s, err.msg);
            free(before), free(wb);
            break;
        }
        /* the scale this step used: half the last one after a skip, twice after 3 good steps in a row */
        if (s > 0 && prev_skipped)
            halved &= info.loss_scale == prev_scale * 0.5f;
        if (run == 3)
            grew = info.loss_scale == prev_scale * 2.0f;
        else if (s > 0 && !prev_skipped)
            halved &= info.loss_scale == prev_scale;
        run = info.skipped ? 0 : run + 1;
        prev_skipped = info.skipped;
        if (info.skipped) {
            skips++;
            off = 0;
            for (int i = 0; i < nt; i++) {
                const col_param_spec *sp;
                const float *w = col_lm_trainer_param(t, i, &sp);
                size_t n = (size_t)col_param_numel(sp);
                unchanged &= memcmp(before + off, w, sizeof(float) * n) == 0 &&
                             memcmp(before + total + off, col_lm_trainer_state(t, i, 0), sizeof(float) * n) == 0 &&
                             memcmp(before + 2 * total + off, col_lm_trainer_state(t, i, 1), sizeof(float) * n) == 0 &&
                             memcmp(wb + off, col_lm_trainer_weights(t, i, NULL), sizeof(uint16_t) * n) == 0;
                off += n;
            }
        } else if (first_good < 0) {
            first_good = s;
            skips_first = skips;
        }
        counted &= info.skipped_total == skips && info.step == s + 1;
        prev_scale = info.loss_scale;
        free(before), free(wb);
    }
    TL_OK(skips_first > 0 && first_good == skips_first, "a first loss scale of 2^30 overflows f16: the first %d steps "
          "are skipped, then training goes on (%d skipped in all)", skips_first, skips);
    TL_OK(unchanged, "a skipped step leaves every weight, master and optimizer state as it was, bit for bit");
    TL_OK(halved && counted, "each skip halves the scale and is counted in the step info (steps still advance); "
          "good steps keep it");
    TL_OK(grew, "after 3 good steps in a row the scale doubles (loss_scale_window 3)");
    col_lm_trainer_free(t);
}

/* ---- saving and loading ---- */

static void test_save_load(void)
{
    col_lm_config m;
    if (!model("llama2", &m))
        return;
    col_lm_train_config c = config(&m, COL_BF16), c32 = config(&m, COL_F32);
    col_err err = {0};
    col_lm_trainer *t = NULL, *r = NULL, *f = NULL;
    float loss[4];
    bool ok = col_lm_trainer_create(&c, &be, &t, &err) == COL_OK && train(t, 0, 4, loss, &err) &&
              col_lm_trainer_save_model(t, save_dir, &err) == COL_OK;
    TL_OK(ok, "bf16 session: 4 steps, model saved: %s", err.msg);
    if (!ok) {
        col_lm_trainer_free(t);
        return;
    }
    col_ckpt *ck = NULL;
    ok = col_ckpt_open(save_dir, &ck, &err) == COL_OK;
    bool f32 = ok, exact = ok;
    for (int i = 0; ok && i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        const float *w = col_lm_trainer_param(t, i, &s);
        const col_ckpt_tensor *x = col_ckpt_find(ck, s->name);
        f32 &= x && x->dtype == COL_ST_F32;
        exact &= x && x->nbytes == sizeof(float) * (size_t)col_param_numel(s) && memcmp(x->data, w, x->nbytes) == 0;
    }
    TL_OK(f32 && exact, "model.safetensors holds f32 tensors: the masters, bit for bit");
    /* back into a bf16 session (masters from the file, weights rounded) and into an f32 one */
    ok = ok && col_lm_trainer_create(&c, &be, &r, &err) == COL_OK && col_lm_trainer_load(r, ck, &err) == COL_OK &&
         col_lm_trainer_create(&c32, &be, &f, &err) == COL_OK && col_lm_trainer_load(f, ck, &err) == COL_OK;
    TL_OK(ok && same_mixed(t, r), "loaded into a new bf16 session: the same masters and bf16 weights %s", err.msg);
    bool same32 = ok;
    for (int i = 0; same32 && i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        const float *a = col_lm_trainer_param(t, i, &s), *b = col_lm_trainer_param(f, i, NULL);
        same32 = memcmp(a, b, sizeof(float) * (size_t)col_param_numel(s)) == 0;
    }
    TL_OK(same32, "and into an f32 session: its weights are the masters");
    /* an inference session (no masters) loads the rounded weights, and saves them as f32 */
    col_lm_train_config ci = c;
    ci.inference = true;
    col_lm_trainer *inf = NULL;
    ok = ok && col_lm_trainer_create(&ci, &be, &inf, &err) == COL_OK && col_lm_trainer_load(inf, ck, &err) == COL_OK;
    bool rounded = ok && col_lm_trainer_param(inf, 0, NULL) == NULL;
    for (int i = 0; rounded && i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        col_lm_trainer_param(t, i, &s);
        rounded = memcmp(col_lm_trainer_weights(t, i, NULL), col_lm_trainer_weights(inf, i, NULL),
                         2 * (size_t)col_param_numel(s)) == 0;
    }
    TL_OK(rounded, "a bf16 inference session (no masters) loads the model rounded to bf16 %s", err.msg);
    float la = 0, lb = 0;
    int32_t ids[B * T], tg[B * T];
    tl_lm_batch(5, m.vocab_size, B * T, ids, tg);
    ok = ok && col_lm_trainer_eval(t, ids, tg, &la, NULL, &err) == COL_OK &&
         col_lm_trainer_eval(inf, ids, tg, &lb, NULL, &err) == COL_OK;
    TL_OK(ok && la == lb, "it evaluates a batch as the training session does (%.6f)", la);
    /* decoding with the key/value cache against the full forward pass of the same tokens */
    const float *full = NULL, *dec = NULL;
    float *copy = malloc(sizeof(float) * (size_t)m.vocab_size);
    ok = ok && copy && col_lm_trainer_next_logits(t, ids, 9, &full, &err) == COL_OK;
    if (ok)
        memcpy(copy, full, sizeof(float) * (size_t)m.vocab_size);
    ok = ok && col_lm_trainer_decode_reset(t, 12, &err) == COL_OK && col_lm_trainer_decode(t, ids, 5, &dec, &err) == COL_OK;
    for (int k = 5; ok && k < 9; k++)
        ok = col_lm_trainer_decode(t, ids + k, 1, &dec, &err) == COL_OK;
    double worst = 0, mag = 0;
    for (int v = 0; ok && v < m.vocab_size; v++)
        worst = fmax(worst, fabs(copy[v] - dec[v])), mag = fmax(mag, fabs(copy[v]));
    TL_OK(ok && worst <= 1e-3 * mag, "bf16 decoding with the cache gives the forward pass's logits (max |diff| %.2e, "
          "max |logit| %.2f) %s", worst, mag, err.msg);
    free(copy);
    col_ckpt_close(ck);
    col_lm_trainer_free(t);
    col_lm_trainer_free(r);
    col_lm_trainer_free(f);
    col_lm_trainer_free(inf);
}

/* ---- placement does not change the bits ---- */

static void test_budgets(col_dtype dt)
{
    col_lm_config m;
    if (!model("gpt2", &m))
        return;
    enum { N = 6 };
    col_lm_train_config h = config(&m, dt);
    h.grad_accum = 2;
    h.chunk_bytes = 8 << 10; /* several chunks per kind */
    h.model.dropout = 0.1f;
    col_lm_train_config all = h, states = h, tier = h;
    all.nvme_dir = nvme_dir, all.nvme_kinds = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;
    all.compute_budget = (size_t)1 << 30;
    all.compute_budget = tl_lm_least_budget(&all, &be, "the all-NVMe session");
    tier.compute_budget = all.compute_budget;
    states.nvme_dir = nvme_dir;
    states.host_budget = 0; /* automatic placement with room for the weights and gradients only: below */
    col_err err = {0};
    col_lm_trainer *a = NULL, *b = NULL;
    float l0[N], l1[N];
    bool ok = all.compute_budget > 0 && col_lm_trainer_create(&h, &be, &a, &err) == COL_OK && train(a, 0, N, l0, &err);
    mt_pool_stats ps;
    if (ok) { /* a host budget that holds parameters and gradients but not the states: they go to NVMe */
        mt_stats(col_lm_trainer_pool(a), &ps);
        states.host_budget = ps.bytes[MT_PARAM][MT_TIER_HOST] + ps.bytes[MT_GRAD][MT_TIER_HOST] + 4 * h.chunk_bytes;
    }
    const char *names[3] = {"everything on NVMe through the smallest compute tier", "a compute tier only",
                            "the states (masters too) on NVMe by the host budget"};
    col_lm_train_config *cs[3] = {&all, &tier, &states};
    for (int k = 0; k < 3 && ok; k++) {
        bool made = col_lm_trainer_create(cs[k], &be, &b, &err) == COL_OK;
        bool ran = made && train(b, 0, N, l1, &err);
        unsigned want = k == 0 ? (COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES) : k == 1 ? 0 : COL_LM_STATES;
        TL_OK(ran && memcmp(l0, l1, sizeof l0) == 0 && same_mixed(a, b) && col_lm_trainer_nvme_kinds(b) == want,
              "%s, %s (grad_accum 2, dropout, clipping): %d steps with the losses and weights of the host session, "
              "bit for bit %s", col_dtype_name(dt), names[k], N, err.msg);
        col_lm_trainer_free(b);
        b = NULL;
    }
    col_lm_trainer_free(a);
}

/* ---- resuming ---- */

static void test_resume(col_dtype dt)
{
    col_lm_config m;
    if (!model("gpt2", &m))
        return;
    col_lm_train_config c = config(&m, dt);
    c.model.dropout = 0.1f;
    if (dt == COL_F16) { /* skips before the save and growth after it: the scaler's state must resume too */
        c.loss_scale = 0x1p20f; /* measured: 3 skips, good steps, a growth that overflows again */
        c.loss_scale_window = 3;
    }
    enum { N = 10, HALF = 5 };
    col_err err = {0};
    col_lm_trainer *a = NULL, *b = NULL, *r = NULL;
    float straight[N], resumed[N];
    bool ok = col_lm_trainer_create(&c, &be, &a, &err) == COL_OK && train(a, 0, N, straight, &err) &&
              col_lm_trainer_create(&c, &be, &b, &err) == COL_OK && train(b, 0, HALF, resumed, &err) &&
              col_lm_trainer_save_model(b, save_dir, &err) == COL_OK &&
              col_lm_trainer_save_optimizer(b, save_dir, &err) == COL_OK;
    col_ckpt *ck = NULL;
    col_lm_train_config other = c; /* a new session from another seed, then everything from disk */
    ok = ok && col_lm_trainer_create(&other, &be, &r, &err) == COL_OK;
    for (int i = 0; ok && i < col_lm_trainer_n_params(r); i++) {
        const col_param_spec *s;
        float *w = col_lm_trainer_param(r, i, &s);
        col_fill_uniform(w, col_param_numel(s), 70 + (uint64_t)i, -1, 1);
    }
    ok = ok && col_ckpt_open(save_dir, &ck, &err) == COL_OK && col_lm_trainer_load(r, ck, &err) == COL_OK &&
         col_lm_trainer_load_optimizer(r, save_dir, &err) == COL_OK && train(r, HALF, N, resumed, &err);
    TL_OK(ok && memcmp(straight, resumed, sizeof straight) == 0 && same_mixed(a, r),
          "%s: stopped after %d steps and resumed from disk, losses and weights bitwise those of an unbroken run "
          "(%.6f) %s", col_dtype_name(dt), HALF, ok ? resumed[N - 1] : 0.0f, err.msg);
    col_ckpt_close(ck);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
    col_lm_trainer_free(r);
}

/* ---- memory ---- */

static void test_memory(void)
{
    col_lm_config m;
    if (!model("gpt2", &m))
        return;
    col_lm_train_config c32 = config(&m, COL_F32), c16 = config(&m, COL_BF16);
    c32.chunk_bytes = c16.chunk_bytes = 4 << 10;
    col_err err = {0};
    col_lm_trainer *a = NULL, *b = NULL;
    bool ok = col_lm_trainer_create(&c32, &be, &a, &err) == COL_OK && col_lm_trainer_create(&c16, &be, &b, &err) == COL_OK;
    mt_pool_stats s32, s16;
    if (ok) {
        mt_stats(col_lm_trainer_pool(a), &s32);
        mt_stats(col_lm_trainer_pool(b), &s16);
    }
    int64_t n = ok ? col_lm_trainer_param_count(a) : 0;
    /* each tensor is rounded up to 64 bytes in its chunk: compare requested bytes */
    TL_OK(ok && s16.tensor_bytes[MT_PARAM] == 2 * (size_t)n && s16.tensor_bytes[MT_GRAD] == 2 * (size_t)n &&
              s16.tensor_bytes[MT_OPTSTATE] == 12 * (size_t)n && s32.tensor_bytes[MT_PARAM] == 4 * (size_t)n &&
              s32.tensor_bytes[MT_OPTSTATE] == 8 * (size_t)n,
          "bf16 AdamW: 2 bytes per parameter for weights and for gradients, 12 for master + moments (f32: 4, 4, 8)");
    col_lm_memory ma, mb;
    if (ok) {
        col_lm_trainer_memory(a, &ma);
        col_lm_trainer_memory(b, &mb);
    }
    size_t most = 0;
    for (int i = 0; ok && i < col_lm_trainer_n_params(b); i++) {
        const col_param_spec *s;
        col_lm_trainer_param(b, i, &s);
        most = 4 * (size_t)col_param_numel(s) > most ? 4 * (size_t)col_param_numel(s) : most;
    }
    TL_OK(ok && ma.convert == 0 && mb.convert == most && mb.overhead >= mb.convert,
          "the memory bound counts the f32 conversion buffer of the largest tensor (%zu bytes)", ok ? mb.convert : 0);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
}

static void test_errors(void)
{
    col_lm_config m;
    if (!model("gpt2", &m))
        return;
    col_lm_train_config c = config(&m, COL_BF16);
    c.lora = (col_lora_config){.rank = 4, .alpha = 8};
    col_err err = {0};
    col_lm_trainer *t = NULL;
    TL_OK(col_lm_trainer_create(&c, &be, &t, &err) == COL_EUNSUPPORTED && strstr(err.msg, "LoRA") &&
              (err.settings & (1u << COL_SETTING_PRECISION)),
          "LoRA with bf16 is refused, naming the precision setting: %s", err.msg);
    col_lm_trainer_free(t);
    t = NULL;
    c = config(&m, COL_I32);
    TL_OK(col_lm_trainer_create(&c, &be, &t, &err) == COL_EINVAL && strstr(err.msg, "i32"),
          "an integer compute dtype is refused: %s", err.msg);
    col_lm_trainer_free(t);
}

int main(void)
{
    tl_cpu_backend(&be);
    tl_mkdtemp(nvme_dir);
    tl_mkdtemp(save_dir);
    test_against_f32("gpt2");
    test_against_f32("llama2");
    test_overflow();
    test_save_load();
    test_budgets(COL_BF16);
    test_budgets(COL_F16);
    test_resume(COL_BF16);
    test_resume(COL_F16);
    test_memory();
    test_errors();
    TL_OK(tl_remove_tree(nvme_dir) && tl_remove_tree(save_dir), "cleanup");
    col_cpu_backend_free(&be);
    return tl_done();
}
