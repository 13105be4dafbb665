/* test_lm_mapped.c - weights read in place from the model file's mapping (col_lm_trainer_load_mapped,
 * col_lm_trainer_load_gguf_mapped): an inference session reading them gives bit for bit the logits and weights
 * of one that copied them; what is mapped is what the file stores as held at a usable alignment (f32 at a
 * multiple of 64 bytes, a GGUF file's blocks in order, never LLaMA's permuted q/k rows); the session takes the
 * file only when it maps something; a training session maps nothing; a second load into a mapped session is
 * refused and changes nothing. Files: tests/fixtures/hf/llama2 (written by transformers: its data start 56
 * bytes off a 64-byte line) rewritten with a longer header so that its tensors fall on 64-byte lines, and
 * tests/fixtures/gguf_model (written by llama.cpp's converter). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "gguf.h"
#include "hf_config.h"
#include "lm_gguf.h"
#include "lm_trainer.h"
#include "textio.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif

static col_backend be;
static char dir[] = "/tmp/col_lm_mapped_XXXXXX";
static const int32_t PROMPT[] = {1, 45, 17, 60, 3, 29}; /* (the smallest vocabulary: 96) */
enum { NPROMPT = sizeof PROMPT / sizeof PROMPT[0] };

/* a session of config c: an inference one unless train; quantized per each when not NULL */
static col_lm_trainer *session(const col_lm_config *c, bool train, const col_dtype *each)
{
    col_lm_train_config tc = {.model = *c, .batch = 1, .seq = 8, .opt = col_opt_defaults(COL_OPT_SGD), .seed = 5,
                              .inference = !train, .weights_follow = true, .weight_quant_each = each};
    col_lm_trainer *t = NULL;
    col_err err = {0};
    if (col_lm_trainer_create(&tc, &be, &t, &err) != COL_OK)
        TL_NOTE("session: %s", err.msg);
    return t;
}

/* the next-token logits after PROMPT (vocab floats, malloc'd), NULL on failure */
static float *logits_of(col_lm_trainer *t, int vocab)
{
    const float *l = NULL;
    col_err err = {0};
    if (!t || col_lm_trainer_next_logits(t, PROMPT, NPROMPT, &l, &err) != COL_OK) {
        TL_NOTE("logits: %s", err.msg);
        return NULL;
    }
    float *out = malloc(sizeof *out * (size_t)vocab);
    if (out)
        memcpy(out, l, sizeof *out * (size_t)vocab);
    return out;
}

static bool same_floats(const float *a, const float *b, size_t n) { return a && b && memcmp(a, b, sizeof *a * n) == 0; }

/* every base parameter of a and b holds the same bytes */
static bool same_params(col_lm_trainer *a, col_lm_trainer *b, int np)
{
    for (int i = 0; i < np; i++) {
        const col_param_spec *s = NULL;
        float *x = col_lm_trainer_param(a, i, &s), *y = col_lm_trainer_param(b, i, NULL);
        if (!x || !y || memcmp(x, y, sizeof(float) * (size_t)col_param_numel(s)) != 0) {
            TL_NOTE("parameter %d (%s) differs", i, s ? s->name : "?");
            return false;
        }
    }
    return true;
}

/* the fixture's safetensors file with its header padded by spaces so that the data begin on a 64-byte line */
static bool write_aligned(const char *from, const char *to)
{
    char *buf = NULL;
    size_t len = 0;
    col_err err = {0};
    if (col_read_file(from, 0, &buf, &len, &err) != COL_OK || len < 8)
        return false;
    uint64_t n = 0;
    memcpy(&n, buf, 8);
    uint64_t pad = (64 - (8 + n) % 64) % 64, m = n + pad;
    FILE *f = fopen(to, "wb");
    bool ok = f && n <= len - 8 && fwrite(&m, 8, 1, f) == 1 && fwrite(buf + 8, 1, n, f) == n;
    for (uint64_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fwrite(buf + 8 + n, 1, len - 8 - n, f) == len - 8 - n;
    ok = f && fclose(f) == 0 && ok;
    free(buf);
    return ok;
}

/* whether p lies in this process's mapping of a file whose path ends in name (/proc/self/maps) */
static bool in_file_mapping(const void *p, const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        line[strcspn(line, "\n")] = '\0';
        size_t n = strlen(line), k = strlen(name);
        found = sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi && n >= k &&
                strcmp(line + n - k, name) == 0;
    }
    if (f)
        fclose(f);
    return found;
}

/* how many of ck's tensors lie on a 64-byte line (f32 all: the fixture's dtype) */
static int aligned_tensors(const col_ckpt *ck)
{
    int k = 0;
    for (int i = 0; i < col_ckpt_count(ck); i++)
        k += col_ckpt_get(ck, i)->dtype == COL_ST_F32 && (uintptr_t)col_ckpt_get(ck, i)->data % 64 == 0;
    return k;
}

static void test_safetensors(void)
{
    col_lm_config c;
    col_err err = {0};
    char path[600];
    snprintf(path, sizeof path, "%s/aligned.safetensors", dir);
    bool ok = col_hf_load_config(FIXTURES "/hf/llama2", &c, &err) == COL_OK &&
              write_aligned(FIXTURES "/hf/llama2/model.safetensors", path);
    TL_OK(ok, "the LLaMA fixture, rewritten with its data on 64-byte lines: %s", err.msg);
    if (!ok)
        return;
    int np = col_lm_param_count(&c);

    /* the reference: copied */
    col_lm_trainer *a = session(&c, false, NULL);
    col_ckpt *ck = NULL;
    ok = a && col_ckpt_open(path, &ck, &err) == COL_OK && col_lm_trainer_load_ex(a, ck, 0, NULL, &err) == COL_OK;
    col_ckpt_close(ck);
    float *la = logits_of(a, c.vocab_size);

    /* read in place */
    col_lm_trainer *b = session(&c, false, NULL);
    col_lm_load_report rep;
    ck = NULL;
    int want = 0;
    ok = ok && b && col_ckpt_open(path, &ck, &err) == COL_OK && (want = aligned_tensors(ck)) > 0 &&
         col_lm_trainer_load_mapped(b, &ck, 0, &rep, &err) == COL_OK;
    TL_OK(ok && rep.n_mapped == want && want == np && ck == NULL && rep.mapped_bytes > 0,
          "aligned f32: all %d of %d parameters read in place (%zu bytes); the session took the file: %s",
          rep.n_mapped, want, rep.mapped_bytes, err.msg);
    col_ckpt_close(ck);
    float *lb = logits_of(b, c.vocab_size);
    TL_OK(same_floats(la, lb, (size_t)c.vocab_size) && same_params(a, b, np),
          "the logits after %d tokens and every parameter equal the copied session's bit for bit", NPROMPT);
    bool all = b != NULL;
    for (int i = 0; all && i < np; i++)
        all = in_file_mapping(col_lm_trainer_param(b, i, NULL), "/aligned.safetensors");
    TL_OK(all && a && !in_file_mapping(col_lm_trainer_param(a, 0, NULL), "/aligned.safetensors"),
          "the mapped session's parameters lie in its mapping of the file (/proc/self/maps); the copy's do not");

    /* another load into it: refused, the session unchanged */
    ck = NULL;
    col_status st = col_ckpt_open(FIXTURES "/hf/llama2", &ck, &err) == COL_OK ? col_lm_trainer_load_ex(b, ck, 0, NULL, &err)
                                                                             : COL_EIO;
    col_ckpt_close(ck);
    free(lb);
    col_lm_trainer_decode_reset(b, 0, NULL);
    lb = logits_of(b, c.vocab_size);
    TL_OK(st == COL_ESTATE && strstr(err.msg, "in place") && same_floats(la, lb, (size_t)c.vocab_size),
          "a second load into it is refused (%s) and its logits stay", err.msg);
    col_lm_trainer_free(b);
    free(lb);

    /* transformers' own file: 56 bytes off a line, copied (and the file stays the caller's) */
    err = (col_err){0};
    col_lm_trainer *m = session(&c, false, NULL);
    ck = NULL;
    ok = m && col_ckpt_open(FIXTURES "/hf/llama2", &ck, &err) == COL_OK && aligned_tensors(ck) == 0 &&
         col_lm_trainer_load_mapped(m, &ck, 0, &rep, &err) == COL_OK;
    float *lm = logits_of(m, c.vocab_size);
    TL_OK(ok && rep.n_mapped == 0 && ck != NULL && same_floats(la, lm, (size_t)c.vocab_size),
          "f32 off the 64-byte lines: nothing mapped, the file stays the caller's, the same logits: %s", err.msg);
    col_ckpt_close(ck);
    col_lm_trainer_free(m);
    free(lm);

    /* a training session never reads in place */
    err = (col_err){0};
    col_lm_trainer *tr = session(&c, true, NULL);
    ck = NULL;
    ok = tr && col_ckpt_open(path, &ck, &err) == COL_OK && col_lm_trainer_load_mapped(tr, &ck, 0, &rep, &err) == COL_OK;
    TL_OK(ok && rep.n_mapped == 0 && ck != NULL && same_params(a, tr, np),
          "a training session copies even the aligned file (nothing mapped, the file stays the caller's): %s", err.msg);
    col_ckpt_close(ck);
    col_lm_trainer_free(tr);
    col_lm_trainer_free(a);
    free(la);
}

/* a GGUF file through col_lm_trainer_load_gguf (copied) and _gguf_mapped: the same logits; mapped = the tensors
 * held as stored, rows in order */
static void test_gguf(const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/gguf_model/%s", FIXTURES, name);
    col_err err = {0};
    col_gguf *g = NULL;
    col_lm_config c;
    col_dtype *each = NULL;
    bool ok = col_gguf_open(path, &g, &err) == COL_OK && col_lm_gguf_config(g, &c, &err) == COL_OK &&
              (each = calloc((size_t)col_lm_param_count(&c), sizeof *each)) &&
              col_lm_gguf_param_dtypes(g, &c, each, &err) == COL_OK;
    col_lm_trainer *a = ok ? session(&c, false, each) : NULL, *b = ok ? session(&c, false, each) : NULL;
    ok = a && b && col_lm_trainer_load_gguf(a, g, &err) == COL_OK;
    /* the tensors that can be read in place: stored as held, not permuted, aligned */
    int np = col_lm_param_count(&c), want = 0;
    for (int i = 0; ok && i < np; i++) {
        col_lm_gguf_tensor gt;
        ok = col_lm_gguf_find(g, &c, i, &gt, &err) == COL_OK;
        bool f32 = ok && each[i] == COL_F32 && gt.t->type == COL_GGML_F32 && !gt.transposed &&
                   (uintptr_t)gt.data % 64 == 0;
        bool blocks = ok && each[i] != COL_F32 && (uintptr_t)gt.data % 2 == 0;
        want += ok && !gt.row_perm_heads && (f32 || blocks);
    }
    col_lm_load_report rep;
    ok = ok && col_lm_trainer_load_gguf_mapped(b, &g, &rep, &err) == COL_OK;
    TL_OK(ok && want > 0 && rep.n_mapped == want && g == NULL, "%s: %d of %d parameters read in place (%d expected): %s",
          name, rep.n_mapped, np, want, err.msg);
    float *la = logits_of(a, c.vocab_size), *lb = logits_of(b, c.vocab_size);
    TL_OK(same_floats(la, lb, (size_t)c.vocab_size), "%s: the logits equal the copied session's bit for bit", name);
    free(la);
    free(lb);
    col_lm_trainer_free(a);
    col_lm_trainer_free(b);
    col_gguf_close(g);
    free(each);
}

int main(void)
{
    tl_cpu_backend(&be);
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    test_safetensors();
    test_gguf("llama-f32.gguf");
    test_gguf("llama-q8_0.gguf");
    test_gguf("gpt2-q8_0.gguf");
    tl_remove_tree(dir);
    return tl_done();
}
