/* test_lm_load.c - loading a checkpoint into a session (lm_load.c): a tensor
 * the model does not use is an error naming it (and marking the setting that
 * accepts it), except the buffers transformers ignores too and a tied
 * lm_head's exact copy of the embedding; COL_LOAD_IGNORE_EXTRA accepts and
 * reports the rest; a refused load changes no weight; an untied GPT-2 reads
 * its lm_head.weight; parameters holding NaN/Inf values are reported by
 * name with their counts. The checkpoints are the fixtures of
 * tests/fixtures/hf rewritten with tensors added or changed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "hf_config.h"
#include "lm_family.h"
#include "lm_trainer.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/hf"
#endif

static col_backend be;
static char dir[] = "/tmp/col_lm_load_XXXXXX";

enum { MAX_T = 64, MAX_ADD = 4 };

/* a tensor to add: name, shape, and its values (NULL: random) */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data;
} add_t;

/* values to poison: in tensor `name`, element i gets `value` for each i in idx[0..n) */
typedef struct {
    const char *name;
    int n;
    int idx[4];
    float value[4];
} poison_t;

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* writes dir/<out>.safetensors: the fixture's tensors (poisoned as asked) plus `add`; its path into path */
static bool write_ckpt(const char *fixture, const char *out, const add_t *add, int nadd, const poison_t *poison,
                       int npoison, char *path, size_t n)
{
    char src[512];
    snprintf(src, sizeof src, "%s/%s", FIXTURES, fixture);
    snprintf(path, n, "%s/%s.safetensors", dir, out);
    col_ckpt *ck = NULL;
    col_err err = {0};
    if (col_ckpt_open(src, &ck, &err) != COL_OK || col_ckpt_count(ck) + nadd > MAX_T) {
        TL_NOTE("%s: %s", src, err.msg);
        col_ckpt_close(ck);
        return false;
    }
    col_st_out t[MAX_T];
    float *bufs[MAX_T] = {0};
    int k = 0;
    bool ok = true;
    for (int i = 0; i < col_ckpt_count(ck) && ok; i++, k++) {
        const col_ckpt_tensor *x = col_ckpt_get(ck, i);
        bufs[k] = malloc(sizeof(float) * (size_t)(numel(x->ndim, x->shape) + 1));
        ok = bufs[k] && col_ckpt_read_f32(x, x->ndim, x->shape, bufs[k], &err) == COL_OK;
        for (int p = 0; ok && p < npoison; p++)
            for (int j = 0; strcmp(poison[p].name, x->name) == 0 && j < poison[p].n; j++)
                bufs[k][poison[p].idx[j]] = poison[p].value[j];
        t[k] = (col_st_out){.name = x->name, .ndim = x->ndim, .data = bufs[k]};
        memcpy(t[k].shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    }
    for (int i = 0; i < nadd && ok; i++, k++) {
        int64_t m = numel(add[i].ndim, add[i].shape);
        bufs[k] = malloc(sizeof(float) * (size_t)(m + 1));
        ok = bufs[k] != NULL;
        if (ok && add[i].data)
            memcpy(bufs[k], add[i].data, sizeof(float) * (size_t)m);
        else if (ok)
            col_fill_uniform(bufs[k], m, 99 + (uint64_t)i, -1, 1);
        t[k] = (col_st_out){.name = add[i].name, .ndim = add[i].ndim, .data = bufs[k]};
        memcpy(t[k].shape, add[i].shape, sizeof(int64_t) * (size_t)add[i].ndim);
    }
    ok = ok && col_st_write_f32(path, t, k, NULL, &err) == COL_OK;
    if (!ok)
        TL_NOTE("writing %s: %s", path, err.msg);
    for (int i = 0; i < k; i++)
        free(bufs[i]);
    col_ckpt_close(ck);
    return ok;
}

/* a session for the fixture's config (changed by tweak when not NULL) */
static col_lm_trainer *session(const char *fixture, void (*tweak)(col_lm_config *))
{
    char src[512];
    snprintf(src, sizeof src, "%s/%s", FIXTURES, fixture);
    col_lm_config c;
    col_err err = {0};
    col_lm_trainer *t = NULL;
    if (col_hf_load_config(src, &c, &err) == COL_OK) {
        if (tweak)
            tweak(&c);
        col_lm_train_config tc = {.model = c, .batch = 1, .seq = 4, .opt = col_opt_defaults(COL_OPT_SGD), .seed = 3,
                                  .inference = true};
        col_lm_trainer_create(&tc, &be, &t, &err);
    }
    if (!t)
        TL_NOTE("session for %s: %s", fixture, err.msg);
    return t;
}

/* the result of loading path into a fresh session: status, message, report, and whether parameter 0 changed */
typedef struct {
    col_status st;
    col_err err;
    col_lm_load_report rep;
    bool changed;
} load_result;

static load_result load(const char *fixture, void (*tweak)(col_lm_config *), const char *path, unsigned flags)
{
    load_result r = {.st = COL_EINTERNAL};
    col_lm_trainer *t = session(fixture, tweak);
    col_ckpt *ck = NULL;
    if (!t || col_ckpt_open(path, &ck, &r.err) != COL_OK) {
        col_lm_trainer_free(t);
        return r;
    }
    const col_param_spec *s;
    float *w = col_lm_trainer_param(t, 0, &s);
    size_t bytes = sizeof(float) * (size_t)col_param_numel(s);
    float *before = malloc(bytes);
    memcpy(before, w, bytes);
    r.st = col_lm_trainer_load_ex(t, ck, flags, &r.rep, &r.err);
    r.changed = memcmp(before, w, bytes) != 0;
    free(before);
    col_ckpt_close(ck);
    col_lm_trainer_free(t);
    return r;
}

static bool marks_extra(const col_err *e) { return e->settings == 1u << COL_SETTING_EXTRA_TENSORS; }

static void untie(col_lm_config *c) { c->tie_embeddings = false; }
static void tie(col_lm_config *c) { c->tie_embeddings = true; }

/* a GPT-2 checkpoint with more than the model uses */
static void test_gpt2_extras(void)
{
    char path[600];
    add_t head = {"lm_head.weight", 2, {96, 32}, NULL};
    if (!write_ckpt("gpt2", "gpt2_head", &head, 1, NULL, 0, path, sizeof path)) {
        TL_OK(false, "gpt2 + lm_head checkpoint written");
        return;
    }
    load_result r = load("gpt2", NULL, path, 0);
    TL_OK(r.st == COL_EFORMAT && strstr(r.err.msg, "gpt2_head.safetensors has a tensor 'lm_head.weight' that a 2-layer "
                                                   "GPT-2 model with tied embeddings does not use") &&
              strstr(r.err.msg, "tie_word_embeddings false") && marks_extra(&r.err) && !r.changed,
          "an lm_head.weight a tied GPT-2 does not use is an error naming it; no weight changed: %s", r.err.msg);
    r = load("gpt2", NULL, path, COL_LOAD_IGNORE_EXTRA);
    TL_OK(r.st == COL_OK && r.rep.n_extra == 1 && strcmp(r.rep.extra[0], "lm_head.weight") == 0 && r.changed &&
              r.rep.n_nonfinite == 0,
          "COL_LOAD_IGNORE_EXTRA loads it and reports the tensor left unused (%d: %s) %s", r.rep.n_extra, r.rep.extra[0],
          r.err.msg);
    r = load("gpt2", untie, path, 0);
    TL_OK(r.st == COL_OK && r.rep.n_extra == 0, "the same checkpoint loads into an untied GPT-2 (it reads lm_head) %s",
          r.err.msg);

    /* the embedding's own copy as lm_head (as older savers wrote tied models): nothing unused */
    col_ckpt *ck = NULL;
    col_err err = {0};
    float *wte = malloc(sizeof(float) * 96 * 32);
    const col_ckpt_tensor *x = NULL;
    bool ok = col_ckpt_open(FIXTURES "/gpt2", &ck, &err) == COL_OK && (x = col_ckpt_find(ck, "transformer.wte.weight")) &&
              col_ckpt_read_f32(x, 2, (int64_t[]){96, 32}, wte, &err) == COL_OK;
    col_ckpt_close(ck);
    add_t copy = {"lm_head.weight", 2, {96, 32}, wte};
    ok = ok && write_ckpt("gpt2", "gpt2_copy", &copy, 1, NULL, 0, path, sizeof path);
    r = load("gpt2", NULL, path, 0);
    TL_OK(ok && r.st == COL_OK && r.rep.n_extra == 0, "a tied GPT-2 accepts an lm_head.weight equal to wte %s", r.err.msg);
    free(wte);

    /* transformers' buffers (old checkpoints) pass; a layer too many does not */
    add_t buffers[] = {{"transformer.h.0.attn.bias", 4, {1, 1, 4, 4}, NULL},
                       {"h.1.attn.masked_bias", 0, {0}, NULL},
                       {"transformer.h.1.attn.bias", 4, {1, 1, 4, 4}, NULL}};
    ok = write_ckpt("gpt2", "gpt2_buffers", buffers, 3, NULL, 0, path, sizeof path);
    r = load("gpt2", NULL, path, 0);
    TL_OK(ok && r.st == COL_OK && r.rep.n_extra == 0, "GPT-2's attn.bias / attn.masked_bias buffers are ignored %s",
          r.err.msg);
    add_t more[] = {{"transformer.h.2.ln_1.weight", 1, {32}, NULL}, {"transformer.h.0.attn.bias_x", 1, {4}, NULL}};
    ok = write_ckpt("gpt2", "gpt2_layer", more, 1, NULL, 0, path, sizeof path);
    r = load("gpt2", NULL, path, 0);
    TL_OK(ok && r.st == COL_EFORMAT && strstr(r.err.msg, "'transformer.h.2.ln_1.weight' that a 2-layer GPT-2 model does "
                                                         "not use") && marks_extra(&r.err),
          "a layer the config does not have: %s", r.err.msg);
    ok = write_ckpt("gpt2", "gpt2_lookalike", more + 1, 1, NULL, 0, path, sizeof path);
    r = load("gpt2", NULL, path, 0);
    TL_OK(ok && r.st == COL_EFORMAT && strstr(r.err.msg, "'transformer.h.0.attn.bias_x'"),
          "a name that only starts like a buffer's is not ignored: %s", r.err.msg);
}

static void no_attn_bias(col_lm_config *c) { c->attn_bias = false; }

static void test_llama_extras(void)
{
    char path[600];
    add_t rope[] = {{"model.layers.0.self_attn.rotary_emb.inv_freq", 1, {4}, NULL},
                    {"model.layers.1.self_attn.rotary_emb.inv_freq", 1, {4}, NULL},
                    {"model.rotary_emb.inv_freq", 1, {4}, NULL}};
    bool ok = write_ckpt("llama3", "llama_rope", rope, 3, NULL, 0, path, sizeof path);
    load_result r = load("llama3", NULL, path, 0);
    TL_OK(ok && r.st == COL_OK && r.rep.n_extra == 0, "LLaMA's rotary_emb.inv_freq buffers are ignored %s", r.err.msg);
    add_t bias = {"model.layers.0.self_attn.o_proj.bias", 1, {32}, NULL};
    ok = write_ckpt("llama3", "llama_obias", &bias, 1, NULL, 0, path, sizeof path);
    r = load("llama3", NULL, path, 0);
    TL_OK(ok && r.st == COL_EFORMAT && strstr(r.err.msg, "'model.layers.0.self_attn.o_proj.bias' that a 2-layer LLaMA "
                                                         "model does not use (the config has attention_bias false)"),
          "an o_proj bias without attention_bias: %s", r.err.msg);
    /* llama_bias read as a model without attention biases: its 8 attention biases are unused */
    char src[512];
    snprintf(src, sizeof src, "%s/llama_bias/model.safetensors", FIXTURES);
    r = load("llama_bias", no_attn_bias, src, COL_LOAD_IGNORE_EXTRA);
    TL_OK(r.st == COL_OK && r.rep.n_extra == 8 && strstr(r.rep.extra[0], "self_attn.") &&
              strstr(r.rep.extra[0], "_proj.bias"),
          "ignored tensors are counted: %d (first %s) %s", r.rep.n_extra, r.rep.extra[0], r.err.msg);
    /* an untied LLaMA-2 checkpoint under a config that ties: its own lm_head would be dropped */
    snprintf(src, sizeof src, "%s/llama2", FIXTURES);
    r = load("llama2", tie, src, 0);
    TL_OK(r.st == COL_EFORMAT && strstr(r.err.msg, "'lm_head.weight' that a 2-layer LLaMA model with tied embeddings") &&
              strstr(r.err.msg, "model.embed_tokens.weight"),
          "LLaMA-2 (untied) read as tied: %s", r.err.msg);
    r = load("llama2", NULL, src, 0);
    TL_OK(r.st == COL_OK, "LLaMA-2 untied loads both embed_tokens and lm_head %s", r.err.msg);
}

/* OPT: tied (facebook/opt-*) and untied both ways */
static void test_opt_tying(void)
{
    char path[600];
    add_t head = {"lm_head.weight", 2, {96, 32}, NULL};
    bool ok = write_ckpt("opt", "opt_head", &head, 1, NULL, 0, path, sizeof path);
    load_result r = load("opt", NULL, path, 0);
    TL_OK(ok && r.st == COL_EFORMAT && strstr(r.err.msg, "OPT model with tied embeddings"), "OPT tied + lm_head: %s",
          r.err.msg);
    r = load("opt", untie, path, 0);
    TL_OK(r.st == COL_OK, "OPT untied reads lm_head.weight %s", r.err.msg);
}

/* GPT-2 with tie_word_embeddings false: a parameter lm_head.weight [vocab, C], read from the checkpoint */
static void test_gpt2_untied(void)
{
    col_lm_config c;
    col_err err = {0};
    const char *json = "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_positions\": 64, \"n_embd\": 32, "
                       "\"n_layer\": 2, \"n_head\": 4, \"tie_word_embeddings\": false}";
    bool ok = col_hf_parse_config(json, strlen(json), "config.json", &c, &err) == COL_OK;
    int np = ok ? col_lm_param_count(&c) : 0;
    col_param_spec specs[64];
    if (ok && np <= 64)
        col_lm_param_specs(&c, specs);
    TL_OK(ok && !c.tie_embeddings && np == 29 && strcmp(specs[np - 1].name, "lm_head.weight") == 0 &&
              specs[np - 1].shape[0] == 96 && specs[np - 1].shape[1] == 32,
          "GPT-2 tie_word_embeddings false: %d parameters, the last lm_head.weight [96, 32] %s", np, err.msg);
    char *out = NULL;
    col_lm_config back;
    ok = ok && col_hf_config_json(&c, &out, &err) == COL_OK &&
         col_hf_parse_config(out, strlen(out), "written", &back, &err) == COL_OK;
    TL_OK(ok && !back.tie_embeddings, "the config.json written for it says tie_word_embeddings false %s", err.msg);
    free(out);
}

/* NaN and Inf values: each parameter holding some is reported by name, with the count */
static void test_nonfinite(void)
{
    char path[600];
    poison_t p[] = {{"transformer.h.1.mlp.c_fc.weight", 3, {0, 7, 100}, {NAN, INFINITY, NAN}},
                    {"transformer.ln_f.bias", 1, {31}, {-INFINITY}}};
    bool ok = write_ckpt("gpt2", "gpt2_nan", NULL, 0, p, 2, path, sizeof path);
    load_result r = load("gpt2", NULL, path, 0);
    TL_OK(ok && r.st == COL_OK && r.rep.n_nonfinite == 2 &&
              strcmp(r.rep.nonfinite[0].name, "transformer.h.1.mlp.c_fc.weight") == 0 && r.rep.nonfinite[0].count == 3 &&
              strcmp(r.rep.nonfinite[1].name, "transformer.ln_f.bias") == 0 && r.rep.nonfinite[1].count == 1,
          "NaN/Inf values are loaded and reported: %d tensors (%s: %lld, %s: %lld) %s", r.rep.n_nonfinite,
          r.rep.nonfinite[0].name, (long long)r.rep.nonfinite[0].count, r.rep.nonfinite[1].name,
          (long long)r.rep.nonfinite[1].count, r.err.msg);
    /* every one of the 28 tensors: the first COL_LM_LOAD_NAMES named, all counted */
    col_ckpt *ck = NULL;
    col_err err = {0};
    poison_t all[MAX_T];
    int n = 0;
    if (col_ckpt_open(FIXTURES "/gpt2", &ck, &err) == COL_OK)
        for (; n < col_ckpt_count(ck) && n < MAX_T; n++)
            all[n] = (poison_t){col_ckpt_get(ck, n)->name, 1, {0}, {NAN}};
    ok = n == 28 && write_ckpt("gpt2", "gpt2_allnan", NULL, 0, all, n, path, sizeof path);
    r = load("gpt2", NULL, path, 0);
    TL_OK(ok && r.st == COL_OK && r.rep.n_nonfinite == 28 && strcmp(r.rep.nonfinite[0].name, "transformer.wte.weight") == 0 &&
              r.rep.nonfinite[COL_LM_LOAD_NAMES - 1].count == 1,
          "NaN in all 28 tensors: 28 reported, the first %d by name %s", COL_LM_LOAD_NAMES, r.err.msg);
    col_ckpt_close(ck);
    char src[512];
    snprintf(src, sizeof src, "%s/gpt2", FIXTURES);
    r = load("gpt2", NULL, src, 0);
    TL_OK(r.st == COL_OK && r.rep.n_nonfinite == 0 && r.rep.n_extra == 0, "a clean checkpoint reports nothing");
}

/* the families' lists of ignorable tensors */
static void test_patterns(void)
{
    const col_lm_family *g = col_lm_family_of(COL_ARCH_GPT2), *l = col_lm_family_of(COL_ARCH_LLAMA),
                        *o = col_lm_family_of(COL_ARCH_OPT);
    TL_OK(col_lm_unused_ok(g, "h.11.attn.bias") && col_lm_unused_ok(g, "transformer.h.0.attn.masked_bias") &&
              !col_lm_unused_ok(g, "h.x.attn.bias") && !col_lm_unused_ok(g, "h.0.attn.bias.x") &&
              !col_lm_unused_ok(g, "h.0.attn.c_attn.bias") && !col_lm_unused_ok(g, "lm_head.weight") &&
              !col_lm_unused_ok(g, "xh.0.attn.bias"),
          "GPT-2: h.N.attn.bias and .masked_bias, with or without the transformer. prefix, and nothing else");
    TL_OK(col_lm_unused_ok(l, "model.rotary_emb.inv_freq") &&
              col_lm_unused_ok(l, "model.layers.31.self_attn.rotary_emb.inv_freq") &&
              !col_lm_unused_ok(l, "model.layers.0.self_attn.o_proj.bias") && !col_lm_unused_ok(o, "rotary_emb.inv_freq") &&
              !col_lm_unused_ok(o, "decoder.version"),
          "LLaMA: rotary_emb.inv_freq; OPT: nothing");
}

int main(void)
{
    tl_cpu_backend(&be);
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    test_patterns();
    test_gpt2_extras();
    test_llama_extras();
    test_opt_tying();
    test_gpt2_untied();
    test_nonfinite();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TL_OK(system(cmd) == 0, "cleanup");
    col_cpu_backend_free(&be);
    return tl_done();
}
