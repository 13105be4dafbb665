/* test_lm_gguf.c - GGUF files as models (models/lm/lm_gguf.h).
 *
 * 1. The dequantizers (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K) against gguf-py's dequantize of the tensors of
 *    tests/fixtures/gguf/basic.gguf (tools/refgen/make_gguf_fixtures.py).
 * 2. GGUF files written by llama.cpp's own converter (tools/refgen/make_gguf_model_fixtures.py) from a tiny
 *    LLaMA (GQA, untied head) and the tiny GPT-2 of tests/fixtures/chat_model/base, as f32, f16 and q8_0:
 *    - the config equals what config.json gives (col_hf_load_config);
 *    - every parameter, dequantized with the q/k row permutation and GPT-2's transposes undone, against
 *      model.safetensors: f32 files exactly, f16 within f16 rounding, q8_0 within its block bound
 *      (|error| <= amax of the block * (1/254 + 2^-11): half a step of amax/127, and d rounded to f16);
 *    - the logits of a prompt: the dequantized weights loaded into an inference session (through a
 *      safetensors file: the loader itself reads GGUF in the lead's integration) against transformers'.
 * 3. Errors: a GGUF of another architecture, a missing tensor, a tensor of the wrong shape.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "gguf.h"
#include "hf_config.h"
#include "lm_gguf.h"
#include "lm_trainer.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/gguf_model"
#endif
#ifndef GGUF_FIXTURES
#define GGUF_FIXTURES "tests/fixtures/gguf"
#endif
#ifndef CHAT_MODEL
#define CHAT_MODEL "tests/fixtures/chat_model/base"
#endif

static col_backend be;

static void test_dequantizers(void)
{
    char *json = NULL;
    size_t len;
    col_err err = {0};
    col_gguf *g = NULL;
    if (col_read_file(GGUF_FIXTURES "/expected.json", 0, &json, &len, &err) != COL_OK ||
        col_gguf_open(GGUF_FIXTURES "/basic.gguf", &g, &err) != COL_OK) {
        TL_OK(false, "fixtures: %s", err.msg);
        free(json);
        return;
    }
    cJSON *exp = cJSON_Parse(json);
    const cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(exp, "basic.gguf"), "tensors"), *te;
    int seen[64] = {0};
    cJSON_ArrayForEach(te, ts)
    {
        const cJSON *vals = cJSON_GetObjectItem(te, "f32");
        const col_gguf_tensor *t = col_gguf_tensor_find(g, cJSON_GetObjectItem(te, "name")->valuestring);
        if (!t || !vals)
            continue;
        int64_t n = col_gguf_tensor_numel(t);
        float *y = malloc(sizeof *y * (size_t)n);
        col_status st = col_lm_gguf_dequantize(t->type, t->data, n, y, &err);
        double worst = 0, amax = 0;
        int64_t i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, vals)
        {
            if (i < n) {
                worst = fmax(worst, fabs(y[i] - v->valuedouble));
                amax = fmax(amax, fabs(v->valuedouble));
            }
            i++;
        }
        TL_OK(st == COL_OK && i == n && worst <= 1e-6 * amax, "%s: %lld values as gguf-py dequantizes them (worst "
              "difference %.3g of %.3g)", col_ggml_type_name(t->type), (long long)n, worst, amax);
        if (t->type < 64)
            seen[t->type] = 1;
        free(y);
    }
    TL_OK(seen[COL_GGML_F32] && seen[COL_GGML_F16] && seen[COL_GGML_BF16] && seen[COL_GGML_Q8_0] &&
              seen[COL_GGML_Q4_0] && seen[COL_GGML_Q4_K] && seen[COL_GGML_Q6_K],
          "every dequantizer was compared");
    const col_gguf_tensor *q5 = col_gguf_tensor_find(g, "t.q5_k");
    float y[256];
    TL_OK(q5 && col_lm_gguf_dequantize(q5->type, q5->data, 256, y, &err) == COL_EUNSUPPORTED && strstr(err.msg, "Q5_K"),
          "another type is refused: %s", err.msg);
    cJSON_Delete(exp);
    free(json);
    col_gguf_close(g);
}

static bool same_config(const col_lm_config *a, const col_lm_config *b)
{
    return a->arch == b->arch && a->vocab_size == b->vocab_size && a->max_positions == b->max_positions &&
           a->hidden == b->hidden && a->n_layer == b->n_layer && a->n_head == b->n_head &&
           a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim && a->ffn == b->ffn &&
           a->norm_eps == b->norm_eps && a->dropout == b->dropout && a->tie_embeddings == b->tie_embeddings &&
           a->act == b->act && a->pre_ln == b->pre_ln && a->rope.rotary_dims == b->rope.rotary_dims &&
           a->rope.theta == b->rope.theta && a->rope.llama3_factor == b->rope.llama3_factor &&
           a->attn_bias == b->attn_bias && a->mlp_bias == b->mlp_bias && a->bos_id == b->bos_id &&
           a->eos_id == b->eos_id && a->pad_id == b->pad_id && a->value_head == b->value_head;
}

/* the stored (row, column) of element (r, c) of a parameter of cols columns */
static void stored_at(const col_lm_gguf_tensor *t, int64_t r, int64_t c, int64_t *sr, int64_t *sc)
{
    if (t->transposed)
        *sr = c, *sc = r;
    else if (t->row_perm_heads && t->rows > 1)
        *sr = col_lm_gguf_perm_row(r, t->row_perm_heads, t->rows), *sc = c;
    else
        *sr = r, *sc = c;
}

/* every parameter against the safetensors: returns the worst error over the allowed bound (<= 1 passes) */
static void check_weights(col_gguf *g, const col_lm_config *c, col_ckpt *ck, const char *what, float *const *w)
{
    int n = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)n, sizeof *specs);
    col_lm_param_specs(c, specs);
    double worst_ratio = 0, worst_abs = 0;
    int bad = 0, types[64] = {0}, perm = 0, transposed = 0;
    col_err err = {0};
    for (int i = 0; i < n; i++) {
        col_lm_gguf_tensor t;
        const col_ckpt_tensor *x = col_ckpt_find(ck, specs[i].name);
        int64_t numel = col_param_numel(&specs[i]);
        float *ref = malloc(sizeof *ref * (size_t)numel);
        if (!x || col_lm_gguf_find(g, c, i, &t, &err) != COL_OK ||
            col_ckpt_read_f32(x, specs[i].ndim, specs[i].shape, ref, &err) != COL_OK) {
            TL_NOTE("%s: %s: %s", what, specs[i].name, err.msg);
            bad++;
            free(ref);
            continue;
        }
        types[t.t->type < 64 ? t.t->type : 63]++;
        perm += t.row_perm_heads > 0 && specs[i].ndim == 2, transposed += t.transposed;
        int64_t cols = specs[i].ndim == 2 ? specs[i].shape[1] : specs[i].shape[0];
        int64_t rows = specs[i].ndim == 2 ? specs[i].shape[0] : 1;
        /* the largest |value| of each stored block of 32 (Q8_0's bound) */
        int64_t nblk = t.rows * ((t.cols + 31) / 32);
        double *amax = calloc((size_t)nblk, sizeof *amax);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t cc = 0; cc < cols; cc++) {
                int64_t sr, sc;
                stored_at(&t, r, cc, &sr, &sc);
                double *m = &amax[sr * ((t.cols + 31) / 32) + sc / 32];
                *m = fmax(*m, fabs(ref[r * cols + cc]));
            }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t cc = 0; cc < cols; cc++) {
                int64_t sr, sc;
                stored_at(&t, r, cc, &sr, &sc);
                double e = fabs((double)w[i][r * cols + cc] - ref[r * cols + cc]), bound;
                switch (t.t->type) {
                case COL_GGML_F32: bound = 0; break;
                case COL_GGML_F16: bound = fmax(fabs(ref[r * cols + cc]) * 0x1p-11, 0x1p-25); break;
                case COL_GGML_Q8_0:
                    bound = amax[sr * ((t.cols + 31) / 32) + sc / 32] * (1.0 / 254 + 0x1p-11) * 1.0001;
                    break;
                default: bound = -1;
                }
                worst_abs = fmax(worst_abs, e);
                if (e > bound)
                    worst_ratio = fmax(worst_ratio, bound > 0 ? e / bound : INFINITY);
            }
        free(amax);
        free(ref);
    }
    TL_OK(bad == 0 && worst_ratio <= 1, "%s: %d parameters equal model.safetensors within the format's bound "
          "(worst difference %.3g; F32 %d, F16 %d, Q8_0 %d tensors; %d q/k permuted, %d transposed)", what, n, worst_abs,
          types[COL_GGML_F32], types[COL_GGML_F16], types[COL_GGML_Q8_0], perm, transposed);
    free(specs);
}

static int32_t *ints_of(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++)
        v[i] = cJSON_GetArrayItem(a, i)->valueint;
    return v;
}

/* the logits of the prompt from weights w (into logits: T * vocab) */
static bool logits_of(const col_lm_config *c, float *const *w, const int32_t *prompt, int T, float *out, col_err *err)
{
    int n = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)n, sizeof *specs);
    col_st_out *outs = calloc((size_t)n, sizeof *outs);
    col_lm_param_specs(c, specs);
    for (int i = 0; i < n; i++)
        outs[i] = (col_st_out){.name = specs[i].name, .ndim = specs[i].ndim,
                               .shape = {specs[i].shape[0], specs[i].shape[1]}, .data = w[i]};
    char path[] = "/tmp/col_lm_gguf_XXXXXX";
    int fd = mkstemp(path);
    col_ckpt *ck = NULL;
    col_lm_trainer *tr = NULL;
    col_lm_train_config tc = {.model = *c, .batch = 1, .seq = T, .opt = col_opt_defaults(COL_OPT_SGD), .seed = 1,
                              .inference = true};
    int32_t *tg = malloc(sizeof *tg * (size_t)T);
    for (int i = 0; i < T; i++)
        tg[i] = -1;
    const float *logits = NULL;
    float loss;
    bool ok = fd >= 0 && col_st_write_f32(path, outs, n, NULL, err) == COL_OK &&
              col_ckpt_open(path, &ck, err) == COL_OK && col_lm_trainer_create(&tc, &be, &tr, err) == COL_OK &&
              col_lm_trainer_load(tr, ck, err) == COL_OK &&
              col_lm_trainer_eval(tr, prompt, tg, &loss, &logits, err) == COL_OK;
    if (ok)
        memcpy(out, logits, sizeof *out * (size_t)T * (size_t)c->vocab_size);
    if (fd >= 0)
        close(fd), unlink(path);
    col_lm_trainer_free(tr);
    col_ckpt_close(ck);
    free(tg);
    free(outs);
    free(specs);
    return ok;
}

/* a reference logits file of n floats, or NULL */
static float *read_logits(const char *name, size_t n)
{
    char path[512], *bytes = NULL;
    size_t len = 0;
    col_err err = {0};
    snprintf(path, sizeof path, FIXTURES "/%s", name);
    if (col_read_file(path, 0, &bytes, &len, &err) != COL_OK || len != n * sizeof(float)) {
        TL_NOTE("%s: %s", name, err.msg[0] ? err.msg : "not the prompt's logits");
        free(bytes);
        return NULL;
    }
    return (float *)bytes;
}

/* the largest |a - ref| and |ref| */
static double max_diff(const float *a, const float *ref, size_t n, double *scale)
{
    double worst = 0;
    *scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - ref[i]));
        *scale = fmax(*scale, fabs(ref[i]));
    }
    return worst;
}

static void test_model(const char *fam, const char *hf_dir, const cJSON *refs)
{
    const char *kinds[] = {"f32", "f16", "q8_0"};
    /* against the safetensors model's logits, of the largest |logit|: f32 the same weights; f16 and q8_0 the
     * format's own error (this random model's weights are 10x a trained model's, so it shows strongly) */
    const double format_tol[] = {1e-4, 1e-2, 0.08};
    col_err err = {0};
    col_lm_config hf;
    col_ckpt *ck = NULL;
    if (col_hf_load_config(hf_dir, &hf, &err) != COL_OK || col_ckpt_open(hf_dir, &ck, &err) != COL_OK) {
        TL_OK(false, "%s: %s", hf_dir, err.msg);
        return;
    }
    const cJSON *r = cJSON_GetObjectItem(refs, fam);
    int T;
    int32_t *prompt = ints_of(cJSON_GetObjectItem(r, "prompt"), &T);
    size_t nl = (size_t)T * (size_t)hf.vocab_size;
    char lname[64];
    snprintf(lname, sizeof lname, "%s-logits.f32", fam);
    float *ref = read_logits(lname, nl), *mine = malloc(sizeof *mine * nl);
    for (int k = 0; k < 3; k++) {
        char path[512], what[64];
        snprintf(path, sizeof path, FIXTURES "/%s-%s.gguf", fam, kinds[k]);
        snprintf(what, sizeof what, "%s-%s.gguf", fam, kinds[k]);
        col_gguf *g = NULL;
        col_lm_config c;
        if (col_gguf_open(path, &g, &err) != COL_OK || col_lm_gguf_config(g, &c, &err) != COL_OK) {
            TL_OK(false, "%s: %s", what, err.msg);
            col_gguf_close(g);
            continue;
        }
        TL_OK(same_config(&c, &hf), "%s: the config equals config.json's (%s, vocab %d, %d layers, %d/%d heads, "
              "head_dim %d, MLP %d, %s)", what, col_arch_name(c.arch), c.vocab_size, c.n_layer, c.n_head, c.n_kv_head,
              c.head_dim, c.ffn, c.tie_embeddings ? "tied" : "untied");
        int n = col_lm_param_count(&c);
        col_param_spec *specs = calloc((size_t)n, sizeof *specs);
        col_lm_param_specs(&c, specs);
        float **w = calloc((size_t)n, sizeof *w);
        bool read = true;
        for (int i = 0; i < n; i++) {
            w[i] = malloc(sizeof(float) * (size_t)col_param_numel(&specs[i]));
            if (col_lm_gguf_read_f32(g, &c, i, w[i], &err) != COL_OK) {
                TL_NOTE("%s: %s", specs[i].name, err.msg);
                read = false;
            }
        }
        TL_OK(read, "%s: every parameter reads as f32", what);
        if (read)
            check_weights(g, &c, ck, what, w);
        double scale = 0, e = INFINITY;
        bool ran = read && logits_of(&c, w, prompt, T, mine, &err);
        if (ran && ref)
            e = max_diff(mine, ref, nl, &scale);
        TL_OK(e <= format_tol[k] * scale, "%s: the logits of a %d-token prompt equal those of model.safetensors in "
              "transformers within %.0e of the largest (worst difference %.3g of %.3g) %s", what, T, format_tol[k], e,
              scale, ran ? "" : err.msg);
        if (k > 0) { /* against transformers run on this file's own weights (dequantized by gguf-py) */
            snprintf(lname, sizeof lname, "%s-%s-logits.f32", fam, kinds[k]);
            float *own = read_logits(lname, nl);
            e = ran && own ? max_diff(mine, own, nl, &scale) : INFINITY;
            TL_OK(e <= 1e-4 * scale, "%s: and those of its own dequantized weights in transformers within 1e-4 of the "
                  "largest (worst difference %.3g of %.3g)", what, e, scale);
            free(own);
        }
        for (int i = 0; i < n; i++)
            free(w[i]);
        free(w);
        free(specs);
        col_gguf_close(g);
    }
    free(ref);
    free(mine);
    free(prompt);
    col_ckpt_close(ck);
}

static void test_errors(void)
{
    col_err err = {0};
    col_gguf *g = NULL;
    col_lm_config c;
    TL_OK(col_gguf_open(GGUF_FIXTURES "/basic.gguf", &g, &err) == COL_OK &&
              col_lm_gguf_config(g, &c, &err) == COL_EUNSUPPORTED && strstr(err.msg, "testarch"),
          "another architecture: %s", err.msg);
    col_gguf_close(g);
    g = NULL;
    char name[64];
    TL_OK(col_lm_gguf_name(COL_ARCH_LLAMA, "model.layers.11.self_attn.k_proj.weight", name, sizeof name) &&
              strcmp(name, "blk.11.attn_k.weight") == 0 &&
              col_lm_gguf_name(COL_ARCH_GPT2, "transformer.h.0.mlp.c_proj.bias", name, sizeof name) &&
              strcmp(name, "blk.0.ffn_down.bias") == 0 &&
              !col_lm_gguf_name(COL_ARCH_LLAMA, "model.layers.x.mlp.up_proj.weight", name, sizeof name) &&
              !col_lm_gguf_name(COL_ARCH_OPT, "model.decoder.embed_tokens.weight", name, sizeof name),
          "Hugging Face names to GGUF names");
    /* a LLaMA config whose MLP is wider than the file's: a shape error naming both tensors */
    if (col_gguf_open(FIXTURES "/llama-f32.gguf", &g, &err) == COL_OK && col_lm_gguf_config(g, &c, &err) == COL_OK) {
        col_lm_config wide = c;
        wide.ffn *= 2;
        col_lm_gguf_tensor t;
        TL_OK(col_lm_gguf_find(g, &wide, 7, &t, &err) == COL_EFORMAT && strstr(err.msg, "ffn_gate") &&
                  strstr(err.msg, "gate_proj"),
              "a shape that is not the parameter's: %s", err.msg);
        col_lm_config untied = c;
        untied.n_layer = 3;
        TL_OK(col_lm_gguf_find(g, &untied, col_lm_param_count(&untied) - 3, &t, &err) == COL_EFORMAT &&
                  strstr(err.msg, "blk.2."),
              "a missing tensor: %s", err.msg);
        TL_OK(col_lm_gguf_find(g, &c, col_lm_param_count(&c), &t, &err) == COL_EINVAL, "an index past the parameters");
    } else
        TL_OK(false, "llama-f32.gguf: %s", err.msg);
    col_gguf_close(g);
    /* the permutation moves whole rows and is a bijection */
    int64_t rows = 48, hit[48] = {0};
    for (int64_t r = 0; r < rows; r++)
        hit[col_lm_gguf_perm_row(r, 3, rows)]++;
    bool bij = true;
    for (int64_t r = 0; r < rows; r++)
        bij = bij && hit[r] == 1;
    TL_OK(bij && col_lm_gguf_perm_row(1, 3, rows) == 2 && col_lm_gguf_perm_row(8, 3, rows) == 1,
          "the q/k row permutation (16 rows a head: row 1 is stored at 2, row 8 at 1)");
}

int main(void)
{
    col_err err = {0};
    tl_cpu_backend(&be);
    test_dequantizers();
    char *json = NULL;
    size_t len;
    if (col_read_file(FIXTURES "/refs.json", 0, &json, &len, &err) == COL_OK) {
        cJSON *refs = cJSON_Parse(json);
        test_model("llama", FIXTURES "/llama", refs);
        test_model("gpt2", CHAT_MODEL, refs);
        cJSON_Delete(refs);
    } else
        TL_OK(false, "refs.json: %s", err.msg);
    free(json);
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
