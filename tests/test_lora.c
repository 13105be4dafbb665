/* test_lora.c - LoRA fine-tuning on the tiny GPT-2, OPT and LLaMA-3
 * fixtures: adapter gradients against central differences, a fresh adapter
 * leaving the model bitwise unchanged, training that moves only the
 * adapters, the merged export against the unmerged model (and the merge
 * against W + scale B@A computed here), PEFT's file layout, bit-exact resume,
 * memory without base gradients/states, and every bad input. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "memtier.h"
#include "rng.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "textio.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/hf"
#endif

static col_backend be;
static char dir[] = "/tmp/col_lora_XXXXXX";

enum { B = 2, T = 8, R = 4 };

typedef struct {
    const char *fixture;
    const char *all;      /* every module the family can adapt */
    int per_layer;        /* adapted weights per layer with all of them */
    const char *first_a;  /* PEFT's name of the first adapter's A, from PEFT's naming (not from the code) */
    const char *last_b;   /* ... and of the last adapter's B */
} arch_case;

static const arch_case cases[] = {
    {"gpt2", "c_attn,c_proj,c_fc", 4, "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight",
     "base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight"},
    {"opt", "q_proj,k_proj,v_proj,out_proj,fc1,fc2", 6,
     "base_model.model.model.decoder.layers.0.self_attn.k_proj.lora_A.weight",
     "base_model.model.model.decoder.layers.1.fc2.lora_B.weight"},
    {"llama3", " q_proj, k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj ", 7,
     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
     "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"},
};

static col_lm_train_config config(const col_lm_config *m, int rank, float alpha, const char *targets)
{
    col_lm_train_config c = {.model = *m, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = 3};
    c.opt.lr = 1e-2f;
    c.lr = (col_lr_sched){.kind = COL_LR_CONSTANT, .lr_max = 1e-2f, .lr_min = 1e-2f};
    c.lora.rank = rank;
    c.lora.alpha = alpha;
    snprintf(c.lora.targets, sizeof c.lora.targets, "%s", targets);
    return c;
}

static bool model_config(const char *fixture, col_lm_config *m)
{
    char src[512];
    snprintf(src, sizeof src, "%s/%s", FIXTURES, fixture);
    col_err err = {0};
    if (col_hf_load_config(src, m, &err) != COL_OK) {
        TL_NOTE("%s: %s", fixture, err.msg);
        return false;
    }
    return true;
}

/* a trainer holding the fixture's weights (or those in `from`) */
static col_lm_trainer *make(const col_lm_train_config *c, const char *from)
{
    char src[512];
    if (strchr(from, '/'))
        snprintf(src, sizeof src, "%s", from);
    else
        snprintf(src, sizeof src, "%s/%s", FIXTURES, from);
    col_err err = {0};
    col_lm_trainer *t = NULL;
    col_ckpt *ck = NULL;
    if (col_lm_trainer_create(c, &be, &t, &err) != COL_OK || col_ckpt_open(src, &ck, &err) != COL_OK ||
        col_lm_trainer_load(t, ck, &err) != COL_OK) {
        TL_NOTE("%s: %s", src, err.msg);
        col_lm_trainer_free(t);
        t = NULL;
    }
    col_ckpt_close(ck);
    return t;
}

static void batch(int k, int V, int32_t *ids, int32_t *tg)
{
    col_rng r;
    col_rng_init(&r, 500 + (uint64_t)k);
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)col_rng_below(&r, (uint64_t)V), tg[i] = (int32_t)col_rng_below(&r, (uint64_t)V);
}

static float eval_loss(col_lm_trainer *t, const int32_t *ids, const int32_t *tg, const float **logits)
{
    float loss = NAN;
    col_err err = {0};
    if (col_lm_trainer_eval(t, ids, tg, &loss, logits, &err) != COL_OK)
        TL_NOTE("eval: %s", err.msg);
    return loss;
}

static int64_t numel_of(col_lm_trainer *t, int i)
{
    const col_param_spec *s;
    col_lm_trainer_param(t, i, &s);
    return col_param_numel(s);
}

/* in/out features of a base weight by PEFT's convention (Conv1D stores [in, out]) */
static void features(const col_lm_config *m, const col_param_spec *w, int64_t *in, int64_t *out)
{
    *in = m->arch == COL_ARCH_GPT2 ? w->shape[0] : w->shape[1];
    *out = m->arch == COL_ARCH_GPT2 ? w->shape[1] : w->shape[0];
}

/* ---- shapes, names, initial identity, memory ---- */
static void test_fresh(const arch_case *ac)
{
    col_lm_config m;
    if (!model_config(ac->fixture, &m))
        return;
    col_lm_train_config cp = config(&m, 0, 0, ""), cl = config(&m, R, 8, ac->all);
    col_lm_trainer *p = make(&cp, ac->fixture), *l = make(&cl, ac->fixture);
    if (!p || !l) {
        TL_OK(false, "%s: trainers", ac->fixture);
        goto done;
    }
    int np = col_lm_param_count(&m), nt = col_lm_trainer_n_params(l), na = ac->per_layer * m.n_layer;
    TL_OK(col_lm_trainer_n_params(p) == np && col_lm_trainer_trainable_count(p) == col_lm_trainer_param_count(p),
          "%s: without LoRA every one of %d tensors is trained", ac->fixture, np);
    TL_OK(nt == np + 2 * na, "%s: %d adapters (%d tensors after the %d base ones)", ac->fixture, na, nt - np, np);
    bool frozen = true, trained = true, shapes = true, init = true, targets = true;
    int64_t adapter_elems = 0;
    for (int i = 0; i < nt; i++) {
        const col_param_spec *s;
        float *w = col_lm_trainer_param(l, i, &s);
        if (i < np) {
            frozen &= !col_lm_trainer_grad(l, i) && !col_lm_trainer_state(l, i, 0) && !col_lm_trainer_state(l, i, 1);
            continue;
        }
        trained &= col_lm_trainer_grad(l, i) && col_lm_trainer_state(l, i, 0) && col_lm_trainer_state(l, i, 1);
        adapter_elems += col_param_numel(s);
        int wi = col_lm_trainer_lora_target(l, i);
        const col_param_spec *ws;
        targets &= wi >= 0 && wi < np && col_lm_trainer_param(l, wi, &ws) != NULL;
        if (wi < 0 || wi >= np)
            continue;
        int64_t in, out;
        features(&m, ws, &in, &out);
        bool is_a = (i - np) % 2 == 0;
        char want[160];
        snprintf(want, sizeof want, "base_model.model.%.*s.%s.weight", (int)strlen(ws->name) - 7, ws->name,
                 is_a ? "lora_A" : "lora_B");
        shapes &= strcmp(s->name, want) == 0 && s->ndim == 2 && s->shape[0] == (is_a ? R : out) &&
                  s->shape[1] == (is_a ? in : R);
        double bound = 1.0 / sqrt((double)in), amax = 0;
        for (int64_t k = 0; k < col_param_numel(s); k++) {
            if (!is_a)
                init &= w[k] == 0.0f;
            else
                amax = fmax(amax, fabs(w[k]));
        }
        if (is_a)
            init &= amax <= bound && amax > 0.5 * bound;
    }
    TL_OK(frozen, "%s: base tensors have no gradient and no optimizer state", ac->fixture);
    TL_OK(trained, "%s: every adapter tensor has a gradient and AdamW's two moments", ac->fixture);
    TL_OK(targets && shapes, "%s: adapters are named base_model.model.<module>.lora_A/B.weight, A [r, in], B [out, r]",
          ac->fixture);
    TL_OK(init, "%s: A is uniform within +-1/sqrt(in), B is zero", ac->fixture);
    const col_param_spec *s0, *sl;
    col_lm_trainer_param(l, np, &s0);
    col_lm_trainer_param(l, nt - 1, &sl);
    TL_OK(strcmp(s0->name, ac->first_a) == 0 && strcmp(sl->name, ac->last_b) == 0, "%s: PEFT names (%s, %s)",
          ac->fixture, s0->name, sl->name);
    TL_OK(col_lm_trainer_trainable_count(l) == adapter_elems &&
              col_lm_trainer_param_count(l) == col_lm_trainer_param_count(p) + adapter_elems,
          "%s: %lld trainable elements of %lld", ac->fixture, (long long)adapter_elems,
          (long long)col_lm_trainer_param_count(l));
    mt_pool_stats ps, ls;
    mt_stats(col_lm_trainer_pool(p), &ps);
    mt_stats(col_lm_trainer_pool(l), &ls);
    size_t ab = sizeof(float) * (size_t)adapter_elems;
    TL_OK(ls.tensors[MT_GRAD] == 2 * na && ls.tensor_bytes[MT_GRAD] == ab && ls.tensor_bytes[MT_OPTSTATE] == 2 * ab &&
              ls.tensor_bytes[MT_PARAM] == ps.tensor_bytes[MT_PARAM] + ab,
          "%s: the pool holds gradients (%zu B) and optimizer states (%zu B) of the adapters only (full: %zu + %zu B)",
          ac->fixture, ls.tensor_bytes[MT_GRAD], ls.tensor_bytes[MT_OPTSTATE], ps.tensor_bytes[MT_GRAD],
          ps.tensor_bytes[MT_OPTSTATE]);
    int32_t ids[B * T], tg[B * T];
    batch(0, m.vocab_size, ids, tg);
    const float *lp, *ll;
    float *copy = malloc(sizeof(float) * B * T * (size_t)m.vocab_size);
    eval_loss(p, ids, tg, &lp);
    memcpy(copy, lp, sizeof(float) * B * T * (size_t)m.vocab_size);
    eval_loss(l, ids, tg, &ll);
    bool same = true;
    for (int i = 0; i < B * T * m.vocab_size; i++)
        same &= copy[i] == ll[i];
    TL_OK(same, "%s: with B = 0 the logits equal the base model's bitwise", ac->fixture);
    free(copy);
done:
    col_lm_trainer_free(p);
    col_lm_trainer_free(l);
}

/* ---- gradients of A and B against central differences of the loss ---- */
static void test_gradients(const arch_case *ac)
{
    col_lm_config m;
    if (!model_config(ac->fixture, &m))
        return;
    m.dropout = 0;
    /* OPT's ReLU makes the loss piecewise smooth: its many kinks near the
     * point spoil central differences (the plain model's gradients are checked
     * against transformers in test_hf_models), so the check uses GELU there */
    if (m.act == COL_ACT_RELU)
        m.act = COL_ACT_GELU;
    col_lm_train_config c = config(&m, 2, 6, ac->all);
    col_lm_trainer *t = make(&c, ac->fixture);
    if (!t) {
        TL_OK(false, "%s: trainer", ac->fixture);
        return;
    }
    int np = col_lm_param_count(&m), nt = col_lm_trainer_n_params(t);
    for (int i = np + 1; i < nt; i += 2) /* B != 0, or dL/dA would be 0 */
        col_fill_uniform(col_lm_trainer_param(t, i, NULL), numel_of(t, i), 900 + (uint64_t)i, -0.3f, 0.3f);
    int32_t ids[B * T], tg[B * T];
    batch(1, m.vocab_size, ids, tg);
    float loss;
    col_err err = {0};
    if (col_lm_trainer_grads(t, ids, tg, &loss, &err) != COL_OK) {
        TL_OK(false, "%s: grads: %s", ac->fixture, err.msg);
        col_lm_trainer_free(t);
        return;
    }
    int checked = 0, bad = 0;
    double worst = 0, gmax = 0;
    const double h = 1e-2;
    for (int i = np; i < nt; i++) {
        if (i != np && i != np + 1 && i != nt - 2 && i != nt - 1 && (i - np) % 5 != 2)
            continue;
        float *w = col_lm_trainer_param(t, i, NULL);
        const float *g = col_lm_trainer_grad(t, i);
        int64_t n = numel_of(t, i);
        for (int k = 0; k < 6; k++) {
            int64_t e = (int64_t)k * (n - 1) / 5;
            float w0 = w[e];
            w[e] = w0 + (float)h;
            double lp = eval_loss(t, ids, tg, NULL);
            w[e] = w0 - (float)h;
            double lm = eval_loss(t, ids, tg, NULL);
            w[e] = w0;
            double num = (lp - lm) / (2 * h), d = fabs(num - g[e]);
            gmax = fmax(gmax, fabs(num));
            worst = fmax(worst, d);
            bad += d > 2e-4 + 2e-2 * fabs(num);
            checked++;
        }
    }
    TL_OK(bad == 0 && gmax > 1e-3,
          "%s: %d adapter gradient elements match central differences (max |err| %.2e, max |g| %.2e)",
          ac->fixture, checked, worst, gmax);
    col_lm_trainer_free(t);
}

/* ---- training, merged export, decoding ---- */
static void test_train_merge(const arch_case *ac)
{
    col_lm_config m;
    if (!model_config(ac->fixture, &m))
        return;
    col_lm_train_config c = config(&m, R, 8, ac->all);
    col_lm_train_config cp = config(&m, 0, 0, "");
    col_lm_trainer *t = make(&c, ac->fixture), *p = NULL;
    if (!t) {
        TL_OK(false, "%s: trainer", ac->fixture);
        return;
    }
    int np = col_lm_param_count(&m), nt = col_lm_trainer_n_params(t);
    float **base = calloc((size_t)np, sizeof *base);
    for (int i = 0; i < np; i++) {
        base[i] = malloc(sizeof(float) * (size_t)numel_of(t, i));
        memcpy(base[i], col_lm_trainer_param(t, i, NULL), sizeof(float) * (size_t)numel_of(t, i));
    }
    int32_t ids[B * T], tg[B * T];
    batch(2, m.vocab_size, ids, tg);
    col_err err = {0};
    float first = 0, last = 0;
    bool ok = true;
    for (int s = 0; s < 8 && ok; s++) {
        col_lm_step_info info;
        ok = col_lm_trainer_step(t, ids, tg, &info, &err) == COL_OK;
        if (s == 0)
            first = info.loss;
        last = info.loss;
    }
    TL_OK(ok && last < first - 0.05f, "%s: 8 LoRA steps on a fixed batch lower the loss %.4f -> %.4f %s", ac->fixture,
          first, last, ok ? "" : err.msg);
    bool base_same = true, b_moved = false;
    for (int i = 0; i < np; i++)
        base_same &= memcmp(base[i], col_lm_trainer_param(t, i, NULL), sizeof(float) * (size_t)numel_of(t, i)) == 0;
    for (int i = np + 1; i < nt; i += 2)
        for (int64_t k = 0; k < numel_of(t, i); k++)
            b_moved |= col_lm_trainer_param(t, i, NULL)[k] != 0;
    TL_OK(base_same && b_moved, "%s: only the adapters changed (base bytes identical)", ac->fixture);

    /* merged export, checked against W + scale B@A computed here in double */
    char out[600];
    snprintf(out, sizeof out, "%s/merged_%s", dir, ac->fixture);
    ok = col_lm_trainer_save_model_ex(t, out, COL_SAVE_MERGE_LORA, &err) == COL_OK;
    TL_OK(ok, "%s: merged export %s", ac->fixture, ok ? "" : err.msg);
    char path[700];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", out);
    struct stat sb;
    TL_OK(stat(path, &sb) != 0, "%s: the merged export has no adapter files", ac->fixture);
    col_ckpt *ck = NULL;
    double scale = 8.0 / R, worst = 0;
    bool untouched = true;
    if (ok && col_ckpt_open(out, &ck, &err) == COL_OK) {
        for (int i = np; i < nt; i += 2) {
            int wi = col_lm_trainer_lora_target(t, i);
            const col_param_spec *ws;
            col_lm_trainer_param(t, wi, &ws);
            const float *A = col_lm_trainer_param(t, i, NULL), *Bm = col_lm_trainer_param(t, i + 1, NULL);
            int64_t in, o, n = col_param_numel(ws);
            features(&m, ws, &in, &o);
            float *got = malloc(sizeof(float) * (size_t)n);
            if (col_ckpt_read_f32(col_ckpt_find(ck, ws->name), 2, ws->shape, got, &err) != COL_OK) {
                worst = INFINITY;
                free(got);
                continue;
            }
            for (int64_t r0 = 0; r0 < o; r0++)
                for (int64_t c0 = 0; c0 < in; c0++) {
                    double d = 0;
                    for (int r = 0; r < R; r++)
                        d += (double)Bm[r0 * R + r] * A[r * in + c0];
                    int64_t at = m.arch == COL_ARCH_GPT2 ? c0 * o + r0 : r0 * in + c0; /* Conv1D: (B@A)^T */
                    double want = base[wi][at] + scale * d;
                    worst = fmax(worst, fabs(got[at] - want) / (1e-3 + fabs(want)));
                }
            free(got);
        }
        for (int i = 0; i < np; i++) {
            const col_param_spec *s;
            col_lm_trainer_param(t, i, &s);
            bool adapted = false;
            for (int j = np; j < nt; j += 2)
                adapted |= col_lm_trainer_lora_target(t, j) == i;
            float *got = malloc(sizeof(float) * (size_t)col_param_numel(s));
            if (!adapted)
                untouched &= col_ckpt_read_f32(col_ckpt_find(ck, s->name), s->ndim, s->shape, got, &err) == COL_OK &&
                             memcmp(got, base[i], sizeof(float) * (size_t)col_param_numel(s)) == 0;
            free(got);
        }
    }
    col_ckpt_close(ck);
    TL_OK(worst < 1e-5, "%s: merged weights are W + scale*B@A%s (max rel err %.2e)", ac->fixture,
          m.arch == COL_ARCH_GPT2 ? "^T" : "", worst);
    TL_OK(untouched, "%s: weights without an adapter are exported unchanged", ac->fixture);
    base_same = true;
    for (int i = 0; i < np; i++)
        base_same &= memcmp(base[i], col_lm_trainer_param(t, i, NULL), sizeof(float) * (size_t)numel_of(t, i)) == 0;
    TL_OK(base_same, "%s: exporting does not touch the session's base weights", ac->fixture);

    /* the merged model in a plain trainer gives the LoRA model's logits */
    p = make(&cp, out);
    batch(3, m.vocab_size, ids, tg);
    size_t nl = (size_t)B * T * (size_t)m.vocab_size;
    float *lora_logits = malloc(sizeof(float) * nl);
    const float *lg;
    eval_loss(t, ids, tg, &lg);
    memcpy(lora_logits, lg, sizeof(float) * nl);
    double dmax = 0, ref = 0, dbase = 0;
    if (p) {
        eval_loss(p, ids, tg, &lg);
        for (size_t i = 0; i < nl; i++)
            dmax = fmax(dmax, fabs(lg[i] - lora_logits[i])), ref = fmax(ref, fabs(lora_logits[i]));
    }
    col_lm_trainer *b0 = make(&cp, ac->fixture);
    if (b0) {
        eval_loss(b0, ids, tg, &lg);
        for (size_t i = 0; i < nl; i++)
            dbase = fmax(dbase, fabs(lg[i] - lora_logits[i]));
    }
    TL_OK(p && b0 && dmax <= 1e-5 * ref && dbase > 1e-3,
          "%s: merged-export logits equal the unmerged LoRA model's (max diff %.2e of %.2f; "
          "the base model differs by %.2e)",
          ac->fixture, dmax, ref, dbase);
    /* decoding with the KV cache goes through the adapters too */
    int32_t prompt[5] = {ids[0], ids[1], ids[2], ids[3], ids[4]}, g1[6] = {0}, g2[6] = {0};
    const float *nl1;
    double ddec = INFINITY;
    if (p && col_lm_trainer_greedy(t, prompt, 5, 6, g1, &err) == COL_OK &&
        col_lm_trainer_greedy(p, prompt, 5, 6, g2, &err) == COL_OK &&
        col_lm_trainer_decode_reset(t, 8, &err) == COL_OK && col_lm_trainer_decode(t, prompt, 3, &lg, &err) == COL_OK &&
        col_lm_trainer_decode(t, prompt + 3, 1, &lg, &err) == COL_OK) {
        float dec[256];
        memcpy(dec, lg, sizeof(float) * (size_t)m.vocab_size);
        if (col_lm_trainer_next_logits(t, prompt, 4, &nl1, &err) == COL_OK) {
            ddec = 0;
            for (int v = 0; v < m.vocab_size; v++)
                ddec = fmax(ddec, fabs(dec[v] - nl1[v]));
        }
    }
    TL_OK(ddec < 1e-4 && memcmp(g1, g2, sizeof g1) == 0,
          "%s: cached decoding sees the adapters (logits within %.1e of the forward graph; greedy = merged model's)",
          ac->fixture, ddec);
    free(lora_logits);
    col_lm_trainer_free(b0);
    col_lm_trainer_free(p);
    for (int i = 0; i < np; i++)
        free(base[i]);
    free(base);
    col_lm_trainer_free(t);
}

/* ---- PEFT layout and loading it back ---- */
static void test_adapter_files(const arch_case *ac)
{
    col_lm_config m;
    if (!model_config(ac->fixture, &m))
        return;
    col_lm_train_config c = config(&m, R, 8, "");
    col_lm_trainer *t = make(&c, ac->fixture), *u = make(&c, ac->fixture);
    if (!t || !u) {
        TL_OK(false, "%s: trainers", ac->fixture);
        goto done;
    }
    int np = col_lm_param_count(&m), nt = col_lm_trainer_n_params(t);
    int32_t ids[B * T], tg[B * T];
    batch(4, m.vocab_size, ids, tg);
    col_err err = {0};
    bool ok = true;
    for (int s = 0; s < 2 && ok; s++)
        ok = col_lm_trainer_step(t, ids, tg, NULL, &err) == COL_OK;
    char out[600], path[700];
    snprintf(out, sizeof out, "%s/adapter_%s", dir, ac->fixture);
    ok = ok && col_lm_trainer_save_model(t, out, &err) == COL_OK;
    TL_OK(ok, "%s: save base + adapter %s", ac->fixture, ok ? "" : err.msg);
    /* adapter_config.json as PEFT writes it */
    snprintf(path, sizeof path, "%s/adapter_config.json", out);
    char *json = NULL;
    size_t len = 0;
    cJSON *o = col_read_file(path, 0, &json, &len, &err) == COL_OK ? cJSON_Parse(json) : NULL;
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "target_modules");
    bool want_default = m.arch == COL_ARCH_GPT2 ? cJSON_GetArraySize(tm) == 1 &&
                                                      strcmp(cJSON_GetArrayItem(tm, 0)->valuestring, "c_attn") == 0
                                                : cJSON_GetArraySize(tm) == 2 &&
                                                      strcmp(cJSON_GetArrayItem(tm, 0)->valuestring, "q_proj") == 0 &&
                                                      strcmp(cJSON_GetArrayItem(tm, 1)->valuestring, "v_proj") == 0;
    TL_OK(o && want_default &&
              strcmp(cJSON_GetObjectItemCaseSensitive(o, "peft_type")->valuestring, "LORA") == 0 &&
              cJSON_GetObjectItemCaseSensitive(o, "r")->valuedouble == R &&
              cJSON_GetObjectItemCaseSensitive(o, "lora_alpha")->valuedouble == 8 &&
              cJSON_GetObjectItemCaseSensitive(o, "lora_dropout")->valuedouble == 0 &&
              strcmp(cJSON_GetObjectItemCaseSensitive(o, "bias")->valuestring, "none") == 0 &&
              strcmp(cJSON_GetObjectItemCaseSensitive(o, "task_type")->valuestring, "CAUSAL_LM") == 0 &&
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "inference_mode")) &&
              cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "fan_in_fan_out")) == (m.arch == COL_ARCH_GPT2),
          "%s: adapter_config.json: LORA, r %d, alpha 8, the family's default targets, fan_in_fan_out %s",
          ac->fixture, R, m.arch == COL_ARCH_GPT2 ? "true" : "false");
    cJSON_Delete(o);
    free(json);
    /* adapter_model.safetensors holds exactly the adapters; model.safetensors the base */
    col_ckpt *ck = NULL;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", out);
    bool exact = col_ckpt_open(path, &ck, &err) == COL_OK && col_ckpt_count(ck) == nt - np;
    const char *first = m.arch == COL_ARCH_GPT2 ? "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"
                        : m.arch == COL_ARCH_OPT
                            ? "base_model.model.model.decoder.layers.1.self_attn.v_proj.lora_B.weight"
                            : "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight";
    const col_ckpt_tensor *x = exact ? col_ckpt_find(ck, first) : NULL;
    exact = x && x->ndim == 2 && (strstr(first, "lora_A") ? x->shape[0] == R : x->shape[1] == R);
    for (int i = np; exact && i < nt; i++) {
        const col_param_spec *s;
        const float *w = col_lm_trainer_param(t, i, &s);
        x = col_ckpt_find(ck, s->name);
        exact = x && x->dtype == COL_ST_F32 && memcmp(x->data, w, x->nbytes) == 0;
    }
    col_ckpt_close(ck);
    TL_OK(exact, "%s: adapter_model.safetensors holds the %d adapter tensors under PEFT's names", ac->fixture, nt - np);
    col_ckpt *base = NULL, *saved = NULL;
    char src[512];
    snprintf(src, sizeof src, "%s/%s", FIXTURES, ac->fixture);
    bool same = col_ckpt_open(src, &base, &err) == COL_OK && col_ckpt_open(out, &saved, &err) == COL_OK &&
                col_ckpt_count(saved) == np;
    for (int i = 0; same && i < np; i++) {
        const col_param_spec *s;
        const float *w = col_lm_trainer_param(t, i, &s);
        x = col_ckpt_find(saved, s->name);
        same = x && memcmp(x->data, w, x->nbytes) == 0;
    }
    col_ckpt_close(base);
    col_ckpt_close(saved);
    TL_OK(same, "%s: model.safetensors holds the unchanged base weights", ac->fixture);
    ok = col_lm_trainer_load_adapter(u, out, &err) == COL_OK;
    bool equal = ok;
    for (int i = np; equal && i < nt; i++)
        equal = memcmp(col_lm_trainer_param(t, i, NULL), col_lm_trainer_param(u, i, NULL),
                       sizeof(float) * (size_t)numel_of(t, i)) == 0;
    size_t nl = (size_t)B * T * (size_t)m.vocab_size;
    float *a = malloc(sizeof(float) * nl);
    const float *lg;
    eval_loss(t, ids, tg, &lg);
    memcpy(a, lg, sizeof(float) * nl);
    eval_loss(u, ids, tg, &lg);
    TL_OK(equal && memcmp(a, lg, sizeof(float) * nl) == 0, "%s: a fresh session + load_adapter gives the same model %s",
          ac->fixture, ok ? "" : err.msg);
    free(a);
done:
    col_lm_trainer_free(t);
    col_lm_trainer_free(u);
}

/* ---- resume: 3 steps, save, fresh session, load, 3 more == 6 straight ---- */
static bool train(col_lm_trainer *t, int from, int to, int V, float *loss)
{
    col_err err = {0};
    return tl_lm_steps(t, from, to, 510, V, loss, &err); /* batch(10 + k): seed 500 + 10 + k */
}

static void test_resume(const arch_case *ac)
{
    col_lm_config m;
    if (!model_config(ac->fixture, &m))
        return;
    m.dropout = 0.1f; /* the masks must resume too */
    col_lm_train_config c = config(&m, R, 16, ac->all);
    c.grad_clip = 0.5f;
    c.lr = (col_lr_sched){.kind = COL_LR_COSINE, .lr_max = 1e-2f, .lr_min = 1e-3f, .warmup_steps = 2, .total_steps = 6};
    col_lm_trainer *a = make(&c, ac->fixture), *b = make(&c, ac->fixture), *r = NULL;
    if (col_lm_trainer_create(&c, &be, &r, NULL) != COL_OK) /* weights scrambled below, then read from disk */
        r = NULL;
    float straight[6], resumed[6];
    char out[600];
    snprintf(out, sizeof out, "%s/resume_%s", dir, ac->fixture);
    col_err err = {0};
    bool ok = a && b && r && train(a, 0, 6, m.vocab_size, straight) && train(b, 0, 3, m.vocab_size, resumed) &&
              col_lm_trainer_save_model(b, out, &err) == COL_OK &&
              col_lm_trainer_save_optimizer(b, out, &err) == COL_OK;
    int np = col_lm_param_count(&m), nt = r ? col_lm_trainer_n_params(r) : 0;
    for (int i = 0; ok && i < nt; i++) {
        col_fill_uniform(col_lm_trainer_param(r, i, NULL), numel_of(r, i), 70 + (uint64_t)i, -1, 1);
        if (i >= np) {
            col_fill_uniform(col_lm_trainer_state(r, i, 0), numel_of(r, i), 170 + (uint64_t)i, -1, 1);
            col_fill_uniform(col_lm_trainer_state(r, i, 1), numel_of(r, i), 270 + (uint64_t)i, 0, 1);
        }
    }
    col_ckpt *ck = NULL;
    ok = ok && col_ckpt_open(out, &ck, &err) == COL_OK && col_lm_trainer_load(r, ck, &err) == COL_OK &&
         col_lm_trainer_load_adapter(r, out, &err) == COL_OK && col_lm_trainer_load_optimizer(r, out, &err) == COL_OK &&
         train(r, 3, 6, m.vocab_size, resumed);
    col_ckpt_close(ck);
    TL_OK(ok && memcmp(straight, resumed, sizeof straight) == 0 && col_lm_trainer_steps(r) == 6,
          "%s: LoRA + AdamW stopped after 3 steps and resumed from disk: losses bitwise those of 6 straight (%.6f) %s",
          ac->fixture, ok ? resumed[5] : 0.0f, ok ? "" : err.msg);
    char path[700];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", out);
    col_st_file *f = NULL;
    bool only = ok && col_st_open(path, &f, &err) == COL_OK && col_st_count(f) == 2 * (nt - np);
    for (int k = 0; only && k < col_st_count(f); k++)
        only = strstr(col_st_get(f, k)->name, ".lora_") != NULL;
    col_st_close(f);
    TL_OK(only, "%s: optimizer.safetensors holds the two AdamW moments of the %d adapter tensors only", ac->fixture,
          nt - np);
    /* activation checkpointing recomputes the adapter path too */
    col_lm_train_config cc = c;
    cc.checkpoint = true;
    col_lm_trainer *k = make(&cc, ac->fixture);
    float ck_loss[6];
    ok = k && train(k, 0, 6, m.vocab_size, ck_loss);
    TL_OK(ok && memcmp(straight, ck_loss, sizeof straight) == 0,
          "%s: with activation checkpointing the LoRA losses are bitwise the same", ac->fixture);
    col_lm_trainer_free(k);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
    col_lm_trainer_free(r);
}

/* ---- bad configurations and bad adapter files ---- */
static bool fails(const col_lm_train_config *c, const char *want1, const char *want2, col_err *err)
{
    col_lm_trainer *t = NULL;
    col_status st = col_lm_trainer_create(c, &be, &t, err);
    col_lm_trainer_free(t);
    return st == COL_EINVAL && strstr(err->msg, want1) && (!want2 || strstr(err->msg, want2));
}

static bool write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static bool write_text(const char *path, const char *text) { return write_bytes(path, text, strlen(text)); }

static bool load_fails(col_lm_trainer *t, const char *d, const char *want1, const char *want2, col_err *err)
{
    return col_lm_trainer_load_adapter(t, d, err) != COL_OK && strstr(err->msg, want1) &&
           (!want2 || strstr(err->msg, want2));
}

static void test_errors(void)
{
    col_lm_config m;
    if (!model_config("gpt2", &m))
        return;
    col_err err = {0};
    col_lm_train_config c = config(&m, 4, 0, "c_attn,q_proj");
    TL_OK(fails(&c, "'q_proj'", "c_attn, c_proj, c_fc", &err), "unknown module: %s", err.msg);
    c = config(&m, 33, 0, "c_proj");
    TL_OK(fails(&c, "rank 33", "attn.c_proj.weight", &err), "rank above min(in, out): %s", err.msg);
    c = config(&m, -1, 0, "");
    TL_OK(fails(&c, "rank -1", NULL, &err), "negative rank: %s", err.msg);
    c = config(&m, 2, -3, "");
    TL_OK(fails(&c, "alpha", NULL, &err), "negative alpha: %s", err.msg);
    c = config(&m, 2, 0, " , ");
    TL_OK(fails(&c, "name no module", NULL, &err), "empty target list: %s", err.msg);
    col_lm_config om;
    if (model_config("opt", &om)) {
        c = config(&om, 2, 0, "q_proj,o_proj");
        TL_OK(fails(&c, "'o_proj'", "out_proj", &err), "OPT has out_proj, not o_proj: %s", err.msg);
    }

    /* a good adapter (rank 4, alpha 8, c_attn) to corrupt */
    col_lm_train_config good = config(&m, 4, 8, "c_attn");
    col_lm_trainer *t = make(&good, "gpt2");
    char ad[600], bad[600], path[700], cmd[4096];
    snprintf(ad, sizeof ad, "%s/good", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    if (!t || col_lm_trainer_save_model(t, ad, &err) != COL_OK) {
        TL_OK(false, "save: %s", err.msg);
        col_lm_trainer_free(t);
        return;
    }
    int np = col_lm_param_count(&m);
    float before = col_lm_trainer_param(t, np, NULL)[0];
    snprintf(path, sizeof path, "%s/empty", dir);
    mkdir(path, 0755);
    TL_OK(load_fails(t, path, "adapter_config.json", NULL, &err), "no adapter: %s", err.msg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm '%s/adapter_model.safetensors'", bad, ad, bad, bad);
    TL_OK(system(cmd) == 0 && load_fails(t, bad, "adapter_model.safetensors", NULL, &err),
          "adapter_config.json without the tensors: %s", err.msg);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", bad);
    static const char trunc[] = "\x10\0\0\0\0\0\0\0{\"a\": {\"dtype\"";
    TL_OK(write_bytes(path, trunc, sizeof trunc - 1) && load_fails(t, bad, "adapter_model.safetensors", NULL, &err),
          "corrupt adapter_model.safetensors: %s", err.msg);
    /* a file with one tensor missing, then one with a wrong shape */
    col_st_out outs[4];
    int n = 0;
    for (int i = np; i < col_lm_trainer_n_params(t) && n < 4; i++) {
        const col_param_spec *s;
        const float *w = col_lm_trainer_param(t, i, &s);
        if (i == np + 2) /* layer 1's A */
            continue;
        outs[n++] = (col_st_out){.name = s->name, .ndim = 2, .shape = {s->shape[0], s->shape[1]}, .data = w};
    }
    TL_OK(col_st_write_f32(path, outs, n, NULL, &err) == COL_OK &&
              load_fails(t, bad, "has no tensor 'base_model.model.transformer.h.1.attn.c_attn.lora_A.weight'", NULL,
                         &err),
          "missing adapter tensor: %s", err.msg);
    float zeros[4 * 96] = {0};
    outs[n++] = (col_st_out){.name = "base_model.model.transformer.h.1.attn.c_attn.lora_A.weight", .ndim = 2,
                             .shape = {3, 32}, .data = zeros};
    TL_OK(col_st_write_f32(path, outs, n, NULL, &err) == COL_OK &&
              load_fails(t, bad, "h.1.attn.c_attn.lora_A.weight", "adapter_model.safetensors", &err),
          "wrong adapter shape: %s", err.msg);
    TL_OK(col_lm_trainer_param(t, np, NULL)[0] == before, "a failed load leaves the adapters as they were");
    snprintf(path, sizeof path, "%s/adapter_config.json", bad);
    TL_OK(write_text(path, "{\"r\": 4, \"lora_alpha\": 8, ") && load_fails(t, bad, "adapter_config.json", "JSON", &err),
          "adapter_config.json that is not JSON: %s", err.msg);
    TL_OK(write_text(path, "{\"peft_type\": \"LORA\", \"lora_alpha\": 8, \"target_modules\": [\"c_attn\"]}") &&
              load_fails(t, bad, "\"r\"", NULL, &err),
          "adapter_config.json without r: %s", err.msg);
    TL_OK(write_text(path, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, "
                           "\"target_modules\": [\"q_proj\"]}") &&
              load_fails(t, bad, "q_proj", "c_attn", &err),
          "adapter for another family's module: %s", err.msg);

    col_lm_train_config other = config(&m, 2, 8, "c_attn");
    col_lm_trainer *o = make(&other, "gpt2");
    TL_OK(o && load_fails(o, ad, "rank 4 adapter", "rank 2", &err), "adapter of another rank: %s", err.msg);
    col_lm_trainer_free(o);
    other = config(&m, 4, 16, "c_attn");
    o = make(&other, "gpt2");
    TL_OK(o && load_fails(o, ad, "lora_alpha 8", "alpha 16", &err), "adapter of another alpha: %s", err.msg);
    col_lm_trainer_free(o);
    other = config(&m, 4, 8, "c_attn,c_fc");
    o = make(&other, "gpt2");
    TL_OK(o && load_fails(o, ad, "other modules", "c_attn,c_fc", &err), "adapter of other modules: %s", err.msg);
    col_lm_trainer_free(o);
    other = config(&m, 0, 0, "");
    o = make(&other, "gpt2");
    TL_OK(o && load_fails(o, ad, "no LoRA", NULL, &err), "adapter into a run without LoRA: %s", err.msg);
    TL_OK(o && load_fails(o, ad, "no LoRA", NULL, &err) && col_lm_trainer_lora_target(o, 0) == -1 &&
              col_lm_trainer_save_model_ex(o, bad, COL_SAVE_MERGE_LORA, &err) == COL_OK,
          "without LoRA the merge flag changes nothing");
    col_lm_trainer_free(o);
    col_lm_trainer_free(t);
}

int main(void)
{
    tl_cpu_backend(&be);
    tl_mkdtemp(dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_fresh(&cases[i]);
        test_gradients(&cases[i]);
        test_train_merge(&cases[i]);
        test_adapter_files(&cases[i]);
        test_resume(&cases[i]);
    }
    test_errors();
    TL_OK(tl_remove_tree(dir), "cleanup");
    col_cpu_backend_free(&be);
    return tl_done();
}
