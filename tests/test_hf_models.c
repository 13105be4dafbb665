/* test_hf_models.c - GPT-2 (tied and untied), OPT (pre- and post-LN,
 * projected) and LLaMA-2/3 (and one with attention and MLP biases) against
 * transformers: references made by tools/refgen/refgen.py from tiny
 * random models (tests/fixtures/hf/). Checks logits, loss, every parameter's
 * gradient, 10 AdamW steps, greedy continuation through the KV cache, and
 * that model.safetensors and pytorch_model.bin load to identical tensors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "hf_config.h"
#include "lm_family.h"
#include "lm_trainer.h"
#include "testlib.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/hf"
#endif

static col_backend be;

/* a reference tensor as doubles (ids and floats alike) */
static double *ref(const col_ckpt *r, const char *name, int64_t *n)
{
    const col_ckpt_tensor *t = col_ckpt_find(r, name);
    if (!t) {
        TL_NOTE("reference has no '%s'", name);
        return NULL;
    }
    int64_t cnt = 1;
    for (int d = 0; d < t->ndim; d++)
        cnt *= t->shape[d];
    float *f = malloc(sizeof(float) * (size_t)(cnt + 1));
    double *out = malloc(sizeof(double) * (size_t)(cnt + 1));
    col_err err = {0};
    if (col_ckpt_read_f32(t, t->ndim, t->shape, f, &err) != COL_OK) {
        TL_NOTE("%s", err.msg);
        free(f), free(out);
        return NULL;
    }
    for (int64_t i = 0; i < cnt; i++)
        out[i] = f[i];
    free(f);
    *n = cnt;
    return out;
}

static col_lm_trainer *session(const char *dir, const col_lm_config *c, int B, int T, col_err *err)
{
    col_lm_train_config tc = {.model = *c, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = 1};
    /* refgen.py: torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01) */
    tc.opt.lr = 1e-2f, tc.opt.beta1 = 0.9f, tc.opt.beta2 = 0.999f, tc.opt.eps = 1e-8f, tc.opt.weight_decay = 0.01f;
    tc.lr = (col_lr_sched){.kind = COL_LR_CONSTANT, .lr_max = 1e-2f};
    tc.decay_all = true;
    col_lm_trainer *t = NULL;
    col_ckpt *ck = NULL;
    if (col_lm_trainer_create(&tc, &be, &t, err) != COL_OK || col_ckpt_open(dir, &ck, err) != COL_OK ||
        col_lm_trainer_load(t, ck, err) != COL_OK) {
        col_ckpt_close(ck);
        col_lm_trainer_free(t);
        return NULL;
    }
    col_ckpt_close(ck);
    return t;
}

static void same_tensors(const char *name)
{
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s", FIXTURES, name);
    snprintf(b, sizeof b, "%s/%s_bin", FIXTURES, name);
    col_ckpt *ca = NULL, *cb = NULL;
    col_err err = {0};
    bool ok = col_ckpt_open(a, &ca, &err) == COL_OK && col_ckpt_open(b, &cb, &err) == COL_OK;
    int same = 0, total = ok ? col_ckpt_count(ca) : 0;
    for (int i = 0; ok && i < total; i++) {
        const col_ckpt_tensor *x = col_ckpt_get(ca, i), *y = col_ckpt_find(cb, x->name);
        if (y && x->nbytes == y->nbytes && x->dtype == y->dtype && x->ndim == y->ndim &&
            memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim) == 0 && memcmp(x->data, y->data, x->nbytes) == 0)
            same++;
        else
            TL_NOTE("%s differs between the two files", x->name);
    }
    TL_OK(ok && total > 0 && same == total && col_ckpt_count(cb) >= total && strcmp(col_ckpt_format(cb), "pytorch") == 0,
          "%s: model.safetensors and pytorch_model.bin hold identical tensors (%d of %d) %s", name, same, total,
          ok ? "" : err.msg);
    col_ckpt_close(ca);
    col_ckpt_close(cb);
}

/* the 5.x config.json (rope_parameters, dtype) and the 4.x one in NAME_bin
 * (rope_theta + rope_scaling, torch_dtype) describe the same model */
static void same_config(const char *name)
{
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s", FIXTURES, name);
    snprintf(b, sizeof b, "%s/%s_bin", FIXTURES, name);
    col_lm_config x, y;
    col_err err = {0};
    bool ok = col_hf_load_config(a, &x, &err) == COL_OK && col_hf_load_config(b, &y, &err) == COL_OK;
    TL_OK(ok && x.arch == y.arch && x.hidden == y.hidden && x.n_layer == y.n_layer && x.n_kv_head == y.n_kv_head &&
              x.rope.theta == y.rope.theta && x.rope.llama3_factor == y.rope.llama3_factor &&
              x.rope.llama3_original_max_pos == y.rope.llama3_original_max_pos && x.tie_embeddings == y.tie_embeddings &&
              x.pre_ln == y.pre_ln && x.word_embed_proj_dim == y.word_embed_proj_dim && x.attn_bias == y.attn_bias &&
              x.mlp_bias == y.mlp_bias,
          "%s: transformers 4.x and 5.x config.json give the same model (theta %g, llama3 factor %g) %s", name,
          ok ? x.rope.theta : 0, ok ? x.rope.llama3_factor : 0, ok ? "" : err.msg);
}

static void parity(const char *name)
{
    char dir[512], rpath[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    snprintf(rpath, sizeof rpath, "%s/%s_ref.safetensors", FIXTURES, name);
    col_err err = {0};
    col_lm_config c;
    col_ckpt *r = NULL;
    if (col_hf_load_config(dir, &c, &err) != COL_OK || col_ckpt_open(rpath, &r, &err) != COL_OK) {
        TL_OK(false, "%s: fixtures readable: %s", name, err.msg);
        return;
    }
    int64_t n_ids, n_lab, n_logits, n_loss;
    double *ids_d = ref(r, "input_ids", &n_ids), *lab_d = ref(r, "labels", &n_lab);
    double *logits_ref = ref(r, "logits", &n_logits), *loss_ref = ref(r, "loss", &n_loss);
    const col_ckpt_tensor *it = col_ckpt_find(r, "input_ids");
    if (!ids_d || !lab_d || !logits_ref || !loss_ref || !it || it->ndim != 2) {
        TL_OK(false, "%s: reference tensors present", name);
        col_ckpt_close(r);
        return;
    }
    int B = (int)it->shape[0], T = (int)it->shape[1], V = c.vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T)), *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)ids_d[i];
        /* transformers shifts labels inside the model: position t predicts labels[t+1] */
        int t = i % T;
        tg[i] = (t + 1 < T && lab_d[i + 1] >= 0) ? (int32_t)lab_d[i + 1] : -1;
    }
    col_lm_trainer *s = session(dir, &c, B, T, &err);
    if (!s) {
        TL_OK(false, "%s: load the model: %s", name, err.msg);
        goto out;
    }
    /* logits and loss */
    float loss;
    const float *logits;
    bool ran = col_lm_trainer_eval(s, ids, tg, &loss, &logits, &err) == COL_OK;
    double se = 0, ss = 0;
    for (int64_t i = 0; ran && i < (int64_t)B * T * V && i < n_logits; i++) {
        se += (logits[i] - logits_ref[i]) * (logits[i] - logits_ref[i]);
        ss += logits_ref[i] * logits_ref[i];
    }
    double nmse = ss > 0 ? se / ss : INFINITY;
    TL_OK(ran && n_logits == (int64_t)B * T * V && nmse <= 1e-5, "%s: logits NMSE %.2e (<= 1e-5)", name, nmse);
    TL_OK(ran && fabs(loss - loss_ref[0]) <= 1e-5, "%s: loss %.7f vs transformers %.7f", name, loss, loss_ref[0]);
    /* gradients of every parameter */
    float gl;
    ran = col_lm_trainer_grads(s, ids, tg, &gl, &err) == COL_OK;
    int np = col_lm_param_count(&c), good = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; ran && i < np; i++) {
        const col_param_spec *sp;
        col_lm_trainer_param(s, i, &sp);
        const float *g = col_lm_trainer_grad(s, i);
        char gname[128];
        snprintf(gname, sizeof gname, "grad.%s", sp->name);
        int64_t n;
        double *gr = ref(r, gname, &n);
        if (!gr)
            continue;
        double d2 = 0, r2 = 0;
        for (int64_t j = 0; j < n && j < col_param_numel(sp); j++) {
            d2 += (g[j] - gr[j]) * (g[j] - gr[j]);
            r2 += gr[j] * gr[j];
        }
        /* relative 1e-4; gradients that are exactly zero in theory (key biases:
         * softmax is invariant to them) hold ~1e-9 rounding noise in the
         * reference, so an absolute floor of 1e-7 per element applies too */
        double rel = sqrt(d2) / fmax(sqrt(r2), 1e-12);
        if (n == col_param_numel(sp) && sqrt(d2) <= 1e-4 * sqrt(r2) + 1e-7 * sqrt((double)n))
            good++;
        else if (n == col_param_numel(sp))
            TL_NOTE("%s: gradient relative error %.2e", sp->name, rel);
        if (sqrt(r2) < 1e-6 * sqrt((double)n))
            rel = 0; /* report the worst among the non-trivial ones */
        if (rel > worst) {
            worst = rel;
            worst_name = sp->name;
        }
        free(gr);
    }
    TL_OK(ran && good == np, "%s: %d of %d parameter gradients within 1e-4 relative (worst %.2e, %s)", name, good, np,
          worst, worst_name);
    /* decoding through the key/value cache (a 5-token prompt, then one token
     * at a time) gives the logits of the full forward pass */
    if (ran && col_lm_trainer_eval(s, ids, tg, &loss, &logits, &err) == COL_OK) {
        float *full = malloc(sizeof(float) * (size_t)T * (size_t)V);
        memcpy(full, logits, sizeof(float) * (size_t)T * (size_t)V); /* row 0 */
        const float *lg;
        double e2 = 0, r2 = 0;
        bool ok = col_lm_trainer_decode_reset(s, T, &err) == COL_OK && col_lm_trainer_decode(s, ids, 5, &lg, &err) == COL_OK;
        for (int t = 4; ok && t < T; t++) {
            if (t > 4)
                ok = col_lm_trainer_decode(s, &ids[t], 1, &lg, &err) == COL_OK;
            for (int v = 0; ok && v < V; v++) {
                double d = lg[v] - full[(size_t)t * V + v];
                e2 += d * d;
                r2 += (double)full[(size_t)t * V + v] * full[(size_t)t * V + v];
            }
        }
        TL_OK(ok && e2 <= 1e-10 * r2, "%s: cached decoding matches the full forward pass (NMSE %.1e) %s", name,
              r2 > 0 ? e2 / r2 : 0.0, ok ? "" : err.msg);
        free(full);
    }
    /* greedy continuation through the key/value cache */
    int64_t np_, no_;
    double *prompt_d = ref(r, "greedy_prompt", &np_), *gout_d = ref(r, "greedy_output", &no_);
    if (prompt_d && gout_d && no_ > np_) {
        int32_t prompt[64], got[64];
        int nn = (int)(no_ - np_);
        for (int i = 0; i < np_ && i < 64; i++)
            prompt[i] = (int32_t)prompt_d[i];
        ran = col_lm_trainer_greedy(s, prompt, (int)np_, nn, got, &err) == COL_OK;
        int match = 0;
        for (int i = 0; ran && i < nn; i++)
            match += got[i] == (int32_t)gout_d[np_ + i];
        TL_OK(ran && match == nn, "%s: greedy continuation of %d tokens identical (%d match) %s", name, nn, match,
              ran ? "" : err.msg);
    } else {
        TL_OK(false, "%s: greedy references present", name);
    }
    free(prompt_d), free(gout_d);
    /* 10 AdamW steps on the same batch */
    int64_t nl;
    double *losses = ref(r, "adamw_losses", &nl);
    int close = 0;
    double wl = 0;
    for (int k = 0; losses && k < nl; k++) {
        col_lm_step_info info;
        if (col_lm_trainer_step(s, ids, tg, &info, &err) != COL_OK)
            break;
        double d = fabs(info.loss - losses[k]);
        wl = fmax(wl, d);
        close += d <= 1e-4;
    }
    TL_OK(losses && nl == 10 && close == 10, "%s: 10 AdamW losses within 1e-4 of transformers (worst %.2e)", name, wl);
    free(losses);
    col_lm_trainer_free(s);
out:
    free(ids), free(tg), free(ids_d), free(lab_d), free(logits_ref), free(loss_ref);
    col_ckpt_close(r);
}

static void test_errors(void)
{
    col_err err = {0};
    col_lm_config c;
    const char *bad[][2] = {
        {"{\"model_type\": \"bert\"}", "not supported"},
        {"[1, 2]", "not a JSON object"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": -4}", "n_embd"},
        {"{\"model_type\": \"gpt2\", \"n_embd\": 30, \"n_head\": 4}", "n_head"},
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 6, \"num_key_value_heads\": 4, \"hidden_size\": 48}",
         "key/value heads"},
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"yarn\"}}", "yarn"},
        {"{\"model_type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"dynamic\", \"rope_theta\": 1e4}}", "dynamic"},
        {"{\"model_type\": \"llama\", \"rope_parameters\": [1]}", "rope settings"},
        {"{\"model_type\": \"opt\", \"activation_function\": \"tanh\"}", "activation"},
        {"{\"model_type\": \"llama\", \"rms_norm_eps\": \"small\"}", "rms_norm_eps"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        col_status st = col_hf_parse_config(bad[i][0], strlen(bad[i][0]), "config.json", &c, &err);
        TL_OK(st != COL_OK && strstr(err.msg, bad[i][1]) && strstr(err.msg, "config.json"), "bad config %zu: %s", i,
              err.msg);
    }
    char dir[64];
    TL_OK(col_hf_resolve("no-such-org/no-such-model", dir, sizeof dir, &err) == COL_EIO &&
              strstr(err.msg, "huggingface-cli download no-such-org/no-such-model"),
          "a model missing from the cache says where it looked and how to get it: %s", err.msg);
    TL_OK(col_hf_resolve("./nowhere", dir, sizeof dir, &err) == COL_EIO, "a missing directory: %s", err.msg);
    TL_OK(col_lm_preset("gpt3", &c, &err) == COL_EINVAL && strstr(err.msg, "gpt2-medium"), "unknown preset: %s",
          err.msg);
    for (int i = 0; col_lm_preset_names[i]; i++)
        TL_OK(col_lm_preset(col_lm_preset_names[i], &c, &err) == COL_OK && col_lm_check_config(&c, &err) == COL_OK,
              "preset %s is a valid config", col_lm_preset_names[i]);
    /* a checkpoint missing a tensor the model needs */
    if (col_hf_load_config(FIXTURES "/llama2", &c, &err) == COL_OK) {
        c.n_layer += 1;
        col_lm_train_config tc = {.model = c, .batch = 1, .seq = 4, .opt = col_opt_defaults(COL_OPT_ADAMW)};
        tc.lr.lr_max = 1e-3f;
        col_lm_trainer *t = NULL;
        col_ckpt *ck = NULL;
        bool ok = col_lm_trainer_create(&tc, &be, &t, &err) == COL_OK && col_ckpt_open(FIXTURES "/llama2", &ck, &err) == COL_OK;
        TL_OK(ok && col_lm_trainer_load(t, ck, &err) == COL_EFORMAT && strstr(err.msg, "model.layers.2."),
              "a checkpoint with too few layers: %s", err.msg);
        col_ckpt_close(ck);
        col_lm_trainer_free(t);
    }
}

/* the family registry and config.json agree on every family */
static void test_families(void)
{
    int n = 0;
    for (; col_lm_families[n]; n++) {
        const col_lm_family *f = col_lm_families[n];
        char json[128];
        snprintf(json, sizeof json, "{\"model_type\": \"%s\"}", f->name);
        col_lm_config c;
        col_err err = {0};
        bool parsed = col_hf_parse_config(json, strlen(json), "config.json", &c, &err) == COL_OK;
        int mods = 0;
        while (f->lora_modules[mods])
            mods++;
        bool same = parsed && c.arch == f->arch && col_lm_family_of(f->arch) == f &&
                    strcmp(col_arch_name(f->arch), f->name) == 0;
        TL_OK(same && col_lm_param_count(&c) > 0 && mods > 0 && mods < 32 && f->title && f->unused_ok,
              "family %s: model_type, col_arch_name and the registry agree; %d parameters, %d LoRA modules", f->name,
              parsed ? col_lm_param_count(&c) : 0, mods);
    }
    TL_OK(n == 3, "%d families registered (GPT-2, OPT, LLaMA)", n);
}

int main(void)
{
    tl_cpu_backend(&be);
    const char *models[] = {"gpt2", "opt", "opt_postln", "llama2", "llama3", "gpt2_untied", "llama_bias"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        same_config(models[i]);
        same_tensors(models[i]);
        parity(models[i]);
    }
    test_errors();
    test_families();
    col_cpu_backend_free(&be);
    return tl_done();
}
