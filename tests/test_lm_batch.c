/* test_lm_batch.c - batched decoding (col_lm_batch): many sequences at their own positions in one
 * forward pass give, row for row, the logits the single-sequence decoder gives each alone (bit for bit
 * on the CPU), for GPT-2 (learned positions), LLaMA (rotary positions, grouped keys) and OPT, with f32 and
 * quantized (q8_0, q4_0) weights; slots are
 * fed in any order and subsets; a copied prompt prefix continues like the original; bad calls are
 * refused. With LM_BATCH_TEST_CUDA the same runs through the CUDA backend (the emulator in make check),
 * compared with the CPU within 1e-4. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "testlib.h"
#ifdef LM_BATCH_TEST_CUDA
#include "backend_cuda.h"
#endif

enum { SLOTS = 4, CTX = 40, NSEQ = 6 };

static col_backend cpu;

static col_lm_trainer *session(const col_lm_config *c, const col_backend *be, size_t budget, col_dtype q)
{
    col_lm_train_config tc = {.model = *c, .batch = 1, .seq = 1, .opt = col_opt_defaults(COL_OPT_SGD),
                              .inference = true, .compute_budget = budget, .seed = 7, .weight_quant = q};
    col_lm_trainer *t = NULL;
    col_err err = {0};
    if (col_lm_trainer_create(&tc, be, &t, &err) != COL_OK)
        printf("# session: %s\n", err.msg);
    return t;
}

/* token k of sequence q (deterministic, inside the vocabulary) */
static int32_t tok(int q, int k, int vocab) { return (int32_t)((q * 37 + k * 11 + (k * k) % 7) % vocab); }

static double max_diff(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* NaN counts */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* reference: each sequence alone through col_lm_trainer_decode: prompt of plen[q] tokens, then one at a
 * time up to len tokens; ref[q][p] = logits after position p (p >= plen[q] - 1) */
static float *reference(col_lm_trainer *t, int vocab, const int *plen, int len)
{
    float *ref = calloc((size_t)NSEQ * CTX * (size_t)vocab, sizeof *ref);
    col_err err = {0};
    int32_t ids[CTX];
    for (int q = 0; q < NSEQ && ref; q++) {
        for (int k = 0; k < len; k++)
            ids[k] = tok(q, k, vocab);
        const float *lg;
        if (col_lm_trainer_decode_reset(t, CTX, &err) != COL_OK ||
            col_lm_trainer_decode(t, ids, plen[q], &lg, &err) != COL_OK) {
            printf("# reference: %s\n", err.msg);
            free(ref);
            return NULL;
        }
        memcpy(ref + ((size_t)q * CTX + (size_t)(plen[q] - 1)) * (size_t)vocab, lg, sizeof *lg * (size_t)vocab);
        for (int p = plen[q]; p < len; p++) {
            if (col_lm_trainer_decode(t, &ids[p], 1, &lg, &err) != COL_OK) {
                printf("# reference: %s\n", err.msg);
                free(ref);
                return NULL;
            }
            memcpy(ref + ((size_t)q * CTX + (size_t)p) * (size_t)vocab, lg, sizeof *lg * (size_t)vocab);
        }
    }
    return ref;
}

/* NSEQ sequences through SLOTS slots: each slot prefills a sequence, then steps of the running ones
 * (in a rotating order, one slot left out every third step) until each reaches len tokens; a finished
 * sequence's slot takes the next one. Returns the worst difference from ref (and -1 on an error). */
static double batched(col_lm_batch *b, const float *ref, int vocab, const int *plen, int len, double *worst_any)
{
    int seq_of[SLOTS], next = 0, done = 0;
    double worst = 0;
    col_err err = {0};
    const float *lg;
    for (int s = 0; s < SLOTS; s++)
        seq_of[s] = -1;
    for (int round = 0; done < NSEQ && round < 10 * CTX; round++) {
        for (int s = 0; s < SLOTS; s++) /* free slots take waiting sequences */
            if (seq_of[s] < 0 && next < NSEQ) {
                int q = next++;
                int32_t ids[CTX];
                for (int k = 0; k < plen[q]; k++)
                    ids[k] = tok(q, k, vocab);
                col_lm_batch_reset(b, s);
                if (col_lm_batch_prefill(b, s, ids, plen[q], &lg, &err) != COL_OK) {
                    printf("# prefill: %s\n", err.msg);
                    return -1;
                }
                double d = max_diff(lg, ref + ((size_t)q * CTX + (size_t)(plen[q] - 1)) * (size_t)vocab, vocab);
                worst = d > worst ? d : worst;
                seq_of[s] = q;
            }
        int slots[SLOTS], k = 0;
        int32_t toks[SLOTS];
        for (int i = 0; i < SLOTS; i++) {
            int s = (i + round) % SLOTS;
            if (seq_of[s] < 0 || (round % 3 == 2 && k == 0 && i == 0))
                continue;
            slots[k] = s;
            toks[k++] = tok(seq_of[s], col_lm_batch_pos(b, s), vocab);
        }
        if (k == 0)
            continue;
        if (col_lm_batch_step(b, slots, toks, k, &lg, &err) != COL_OK) {
            printf("# step: %s\n", err.msg);
            return -1;
        }
        for (int i = 0; i < k; i++) {
            int s = slots[i], q = seq_of[s], p = col_lm_batch_pos(b, s) - 1;
            double d = max_diff(lg + (size_t)i * (size_t)vocab, ref + ((size_t)q * CTX + (size_t)p) * (size_t)vocab,
                                vocab);
            worst = d > worst ? d : worst;
            if (p + 1 >= len) {
                seq_of[s] = -1;
                done++;
            }
        }
    }
    *worst_any = worst;
    return done == NSEQ ? worst : -1;
}

static void check_family(const char *name, const col_lm_config *c, col_dtype q)
{
    int plen[NSEQ] = {1, 5, 3, 9, 2, 7}, len = 14;
    col_lm_trainer *t = session(c, &cpu, 0, q);
    float *ref = t ? reference(t, c->vocab_size, plen, len) : NULL;
    TL_OK(ref != NULL, "%s: single-sequence reference", name);
    col_lm_batch *b = NULL;
    col_err err = {0};
    col_status st = t ? col_lm_batch_open(t, SLOTS, CTX, &b, &err) : COL_EINVAL;
    TL_OK(st == COL_OK, "%s: open %d slots of %d positions (%s)", name, SLOTS, CTX, err.msg);
    double worst = -1;
    double got = ref && b ? batched(b, ref, c->vocab_size, plen, len, &worst) : -1;
    TL_OK(got == 0, "%s: every batched row equals the sequence alone, bit for bit (worst %.3g)", name, worst);

    /* a copied prefix continues as the original would */
    if (b && ref) {
        int32_t ids[CTX];
        /* sequence 5 as the reference fed it: its prompt of 7 in one pass, then one token */
        for (int k = 0; k < len; k++)
            ids[k] = tok(5, k, c->vocab_size);
        const float *lg;
        col_lm_batch_reset(b, 0);
        st = col_lm_batch_prefill(b, 0, ids, plen[5], &lg, &err);
        if (st == COL_OK)
            st = col_lm_batch_copy_prefix(b, 2, 0, plen[5], &err);
        int sl[2] = {2, 0};
        int32_t tk[2] = {ids[plen[5]], ids[plen[5]]};
        if (st == COL_OK)
            st = col_lm_batch_step(b, sl, tk, 2, &lg, &err);
        const float *r7 = ref + ((size_t)5 * CTX + (size_t)plen[5]) * (size_t)c->vocab_size;
        TL_OK(st == COL_OK && max_diff(lg, r7, c->vocab_size) == 0 &&
                  max_diff(lg + c->vocab_size, r7, c->vocab_size) == 0 && col_lm_batch_pos(b, 2) == plen[5] + 1,
              "%s: a copied prompt prefix continues like the original (%s)", name, err.msg);
        /* refusals */
        col_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0};
        int dup[2] = {1, 1}, bad[1] = {SLOTS};
        TL_OK(col_lm_batch_step(b, dup, tk, 2, &lg, &e1) == COL_EINVAL && strstr(e1.msg, "twice"),
              "%s: a slot twice in a step is refused (%s)", name, e1.msg);
        TL_OK(col_lm_batch_step(b, bad, tk, 1, &lg, &e2) == COL_EINVAL, "%s: a slot out of range is refused (%s)",
              name, e2.msg);
        int32_t many[CTX + 1] = {0};
        col_lm_batch_reset(b, 1);
        TL_OK(col_lm_batch_prefill(b, 1, many, CTX + 1, &lg, &e3) == COL_EINVAL,
              "%s: a prompt longer than the slot is refused (%s)", name, e3.msg);
        TL_OK(col_lm_batch_copy_prefix(b, 1, 0, 100, &e4) == COL_EINVAL,
              "%s: copying more than the source holds is refused (%s)", name, e4.msg);
    }
#ifdef LM_BATCH_TEST_CUDA
    col_backend gpu;
    col_err ge = {0};
    if (ref && col_cuda_backend_init(&gpu, 0, &ge) == COL_OK) {
        col_lm_trainer *tg = session(c, &gpu, (size_t)64 << 20, q);
        col_lm_batch *bg = NULL;
        double gworst = -1, g = -1;
        if (tg && col_lm_batch_open(tg, SLOTS, CTX, &bg, &ge) == COL_OK)
            g = batched(bg, ref, c->vocab_size, plen, len, &gworst);
        /* quantized: the CPU's decoding products round each row of activations to 8-bit blocks (as llama.cpp
         * does), the CUDA kernels multiply them in f32: the rows differ by that rounding (~1/254 of a block) */
        double tol = q == COL_F32 ? 1e-4 : 2e-2;
        TL_OK(g >= 0 && g <= tol, "%s: the CUDA backend's batched rows against the CPU's (worst %.3g, bound %g) %s",
              name, gworst, tol, ge.msg);
        col_lm_batch_close(bg);
        col_lm_trainer_free(tg);
        col_cuda_backend_free(&gpu);
    } else {
        tl_skip_check("CUDA batched decoding", ge.msg);
    }
#endif
    col_lm_batch_close(b);
    free(ref);
    col_lm_trainer_free(t);
}

int main(void)
{
    col_err err = {0};
    if (col_cpu_backend_init(&cpu, &err) != COL_OK) {
        TL_OK(false, "cpu backend: %s", err.msg);
        return tl_done();
    }
    col_lm_config c;
    if (col_lm_preset("llama-tiny", &c, &err) == COL_OK) {
        check_family("llama-tiny (rotary, 2 key heads for 4 query heads)", &c, COL_F32);
        check_family("llama-tiny, q4_0 weights", &c, COL_Q4_0);
    } else {
        TL_OK(false, "llama-tiny preset: %s", err.msg);
    }
    c = col_gpt2_config(97, 64, 32, 2, 4);
    check_family("gpt2 (learned positions)", &c, COL_F32);
    check_family("gpt2, q8_0 weights", &c, COL_Q8_0);
    if (col_lm_preset("opt-125m", &c, &err) == COL_OK) {
        c.hidden = 32, c.n_head = 4, c.n_kv_head = 4, c.head_dim = 8, c.n_layer = 2, c.ffn = 64, c.vocab_size = 97;
        c.max_positions = 64, c.word_embed_proj_dim = 32;
        check_family("opt (positions offset by 2)", &c, COL_F32);
    }
    /* a session that cannot decode many sequences */
    col_lm_config g = col_gpt2_config(97, 64, 32, 2, 4);
    col_lm_trainer *t = session(&g, &cpu, 0, COL_F32);
    col_lm_batch *b = NULL;
    col_err e = {0};
    TL_OK(t && col_lm_batch_open(t, 2, 65, &b, &e) == COL_EINVAL && !b,
          "more positions than the model has are refused (%s)", e.msg);
    col_lm_trainer_free(t);
    return tl_done();
}
