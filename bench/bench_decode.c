/* bench_decode.c - bench_lm generate: single-stream generation of one model in one weight format, the
 * prompt in one call and then one token per call with the key/value cache (col_lm_trainer_decode), against
 * the memory bandwidth measured in the same run.
 *
 * Decode is bandwidth-bound: every new token reads every weight matrix once (the token embedding only one
 * row of it, unless it is also the head), so its ceiling is the bytes of those weights as the session holds
 * them (a quantized row takes col_dtype_row_bytes) over the machine's bandwidth. Two bandwidths are
 * measured, each before and after the decode runs (the larger of the two samples is kept: the machine may
 * be shared): a parallel copy (bytes read + bytes written) and a parallel read-only pass (bytes read), the
 * one that matches what decoding does; the fractions of both are printed. The products alone - one graph
 * of every weight matrix times one row, reading the session's own weight memory - say how much of a token
 * is the weight products and how much is everything else (attention over the cache, norms, RoPE, the
 * quantization of the activations, graph overheads).
 *
 * The prompt and decode lengths: $COL_BENCH_PROMPT (default 128) and $COL_BENCH_DECODE (default 64). */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_decode.h"
#include "bench_util.h"
#include "lm_quant.h"
#include "lm_source.h"
#include "plan.h"
#include "lm_trainer.h"
#include "rng.h"

double bench_copy_rate(size_t n)
{
    float *a = malloc(n * 4), *b = malloc(n * 4);
    if (!a || !b) {
        free(a), free(b);
        return 0;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = (float)i, b[i] = 0;
    double t[5];
    for (int r = 0; r < 6; r++) {
        double t0 = bench_now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            b[i] = a[i];
        if (r)
            t[r - 1] = bench_now() - t0;
    }
    free(a), free(b);
    return 2.0 * (double)n * 4 / bench_median(t, 5) / 1e9;
}

double bench_read_rate(size_t n)
{
    size_t words = n / 2; /* n floats as 64-bit words: an integer sum the compiler vectorizes */
    uint64_t *a = malloc(words * 8);
    if (!a)
        return 0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < words; i++)
        a[i] = i;
    double t[5];
    volatile uint64_t sink = 0;
    for (int r = 0; r < 6; r++) {
        uint64_t s = 0;
        double t0 = bench_now();
#pragma omp parallel for schedule(static) reduction(+ : s)
        for (size_t i = 0; i < words; i++)
            s += a[i];
        if (r)
            t[r - 1] = bench_now() - t0;
        sink += s;
    }
    (void)sink;
    free(a);
    return (double)words * 8 / bench_median(t, 5) / 1e9;
}

static int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "bench_lm: $%s='%s' is not an integer in [%d, %d]; using %d\n", name, v, lo, hi, dflt);
        return dflt;
    }
    return (int)x;
}

/* bytes of parameter i as the session holds it */
static double held_bytes(const col_param_spec *s, col_dtype dt)
{
    int64_t shape[2];
    col_lm_leaf_shape(s, dt, shape);
    if (col_dtype_is_quant(dt))
        return (double)shape[0] * (double)col_dtype_row_bytes(dt, shape[1]);
    return (double)col_param_numel(s) * (double)col_dtype_size(dt);
}

/* the weight bytes one decoded token reads: every tensor, the untied token embedding one row only */
static double token_bytes(col_lm_trainer *t, double *all)
{
    const col_lm_config *m = &col_lm_trainer_config(t)->model;
    double b = 0;
    *all = 0;
    for (int i = 0; i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        col_dtype dt;
        col_lm_trainer_param(t, i, &s);
        col_lm_trainer_weights(t, i, &dt);
        double h = held_bytes(s, dt);
        *all += h;
        b += s->role == COL_ROLE_EMBED && !m->tie_embeddings ? h / (double)s->shape[0] : h;
    }
    return b;
}

/* median seconds of one pass of every weight product of the model with one row (the session's weights in
 * place), reps passes after one; 0 when the graph cannot be made */
static double products_time(col_lm_trainer *t, const col_backend *be, int reps)
{
    const col_lm_config *m = &col_lm_trainer_config(t)->model;
    col_graph *g = col_graph_new();
    enum { MAXK = 4 };
    int64_t ks[MAXK];
    col_node *xs[MAXK];
    float *xd[MAXK] = {0};
    int nk = 0, ok = g != NULL;
    col_err err = {0};
    for (int i = 0; ok && i < col_lm_trainer_n_params(t); i++) {
        const col_param_spec *s;
        col_dtype dt;
        col_lm_trainer_param(t, i, &s);
        void *w = col_lm_trainer_weights(t, i, &dt);
        bool head = s->role == COL_ROLE_HEAD || (s->role == COL_ROLE_EMBED && m->tie_embeddings);
        if (s->ndim != 2 || !(s->role == COL_ROLE_FIRST || s->role == COL_ROLE_SECOND || head))
            continue;
        int64_t shape[2];
        col_lm_leaf_shape(s, dt, shape);
        bool kn = s->in_out && !col_dtype_is_quant(dt); /* [in, out] */
        int64_t K = kn ? shape[0] : shape[1];
        int k = 0;
        while (k < nk && ks[k] != K)
            k++;
        if (k == nk) {
            if (nk == MAXK || !(xd[k] = malloc(sizeof(float) * (size_t)K))) {
                ok = 0;
                break;
            }
            int64_t xs_shape[2] = {1, K};
            ks[nk++] = K;
            col_fill_uniform(xd[k], K, 5 + (uint64_t)k, -1, 1);
            xs[k] = col_input(g, "x", COL_F32, 2, xs_shape);
            ok = col_bind(xs[k], xd[k], &err) == COL_OK;
        }
        col_node *wn = col_input(g, s->name, dt, 2, shape);
        ok = ok && wn && col_bind(wn, w, &err) == COL_OK;
        col_node *y = !ok ? NULL : kn ? col_matmul(g, xs[k], wn) : col_linear(g, xs[k], wn, NULL);
        if (y)
            col_mark_output(y);
        ok = ok && y;
    }
    col_plan *p = NULL;
    double tm[32], r = 0;
    if (ok && col_plan_create(g, &p, &err) == COL_OK) {
        int k = 0;
        for (; k <= reps; k++) {
            double t0 = bench_now();
            if (col_plan_run(p, be, &err) != COL_OK)
                break;
            if (k)
                tm[k - 1] = bench_now() - t0;
        }
        r = k > reps ? bench_median(tm, reps) : 0;
    }
    if (err.msg[0])
        fprintf(stderr, "bench_lm: the products alone: %s\n", err.msg);
    col_plan_free(p);
    col_graph_free(g);
    for (int k = 0; k < nk; k++)
        free(xd[k]);
    return r;
}

int bench_generate(col_backend *be, const char *model, const char *format, int reps)
{
    const int P = env_int("COL_BENCH_PROMPT", 128, 1, 4096), N = env_int("COL_BENCH_DECODE", 64, 1, 4096);
    col_err err = {0};
    col_lm_source src;
    col_dtype q = COL_F32;
    if (format && strcmp(format, "f32") != 0 && !col_lm_quant_parse(format, &q)) {
        fprintf(stderr, "bench_lm: the weight format '%s' is not f32 or one of " COL_LM_QUANT_NAMES "\n", format);
        return 1;
    }
    if (col_lm_source_open(model, NULL, false, &src, &err) != COL_OK) {
        fprintf(stderr, "bench_lm: %s\n", err.msg);
        return 1;
    }
    if (!format && src.weights)
        q = col_lm_quant_detect(src.weights);
    col_lm_train_config c = {.model = src.config, .batch = 1, .seq = 1, .opt = col_opt_defaults(COL_OPT_SGD),
                             .seed = 1, .inference = true, .weight_quant = q};
    col_lm_trainer *t = NULL;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)P);
    double *tp = malloc(sizeof(double) * (size_t)reps), *tg = malloc(sizeof(double) * (size_t)reps);
    int rc = 1;
    if (!prompt || !tp || !tg) {
        fprintf(stderr, "bench_lm: out of memory\n");
        goto done;
    }
    if (P + N > src.config.max_positions) {
        fprintf(stderr, "bench_lm: a prompt of %d and %d new tokens exceed %s's %d positions\n", P, N, model,
                src.config.max_positions);
        goto done;
    }
    if (col_lm_trainer_create(&c, be, &t, &err) != COL_OK ||
        (src.weights && col_lm_trainer_load_ex(t, src.weights, 0, NULL, &err) != COL_OK)) {
        fprintf(stderr, "bench_lm: %s: %s\n", model, err.msg);
        goto done;
    }
    col_ckpt_close(src.weights); /* the weights are in the session now */
    src.weights = NULL;
    col_rng r;
    col_rng_init(&r, 4);
    for (int i = 0; i < P; i++)
        prompt[i] = (int32_t)col_rng_below(&r, (uint64_t)src.config.vocab_size);
    const size_t bwn = (size_t)64 << 20; /* 256 MB arrays: far beyond the caches */
    double copy = bench_copy_rate(bwn), rd = bench_read_rate(bwn);
    for (int k = 0; k <= reps; k++) {
        const float *lg;
        double t0 = bench_now();
        if (col_lm_trainer_decode_reset(t, P + N, &err) != COL_OK || col_lm_trainer_decode(t, prompt, P, &lg, &err) != COL_OK) {
            fprintf(stderr, "bench_lm: %s\n", err.msg);
            goto done;
        }
        double t1 = bench_now();
        int32_t next = prompt[P - 1];
        for (int j = 0; j < N; j++)
            if (col_lm_trainer_decode(t, &next, 1, &lg, &err) != COL_OK) {
                fprintf(stderr, "bench_lm: %s\n", err.msg);
                goto done;
            }
        if (k) {
            tp[k - 1] = t1 - t0;
            tg[k - 1] = (bench_now() - t1) / N;
        }
    }
    double copy2 = bench_copy_rate(bwn), rd2 = bench_read_rate(bwn);
    copy = copy2 > copy ? copy2 : copy;
    rd = rd2 > rd ? rd2 : rd;
    double prod = products_time(t, be, reps);
    double all, weights = token_bytes(t, &all), per_tok = bench_median(tg, reps), rate = weights / per_tok / 1e9;
    printf("generate %s (%.2fB params, %s): prompt %d tokens %.0f tok/s; decode %.1f tok/s (%.1f ms/token); "
           "weights %.2f GB per token = %.1f GB/s, %.2f of the copy rate %.1f GB/s, %.2f of the read rate %.1f GB/s "
           "(bound %.1f tok/s); products alone %.1f ms (%.0f%% of a token); %d new tokens, %.2f GB held\n",
           model, (double)col_lm_trainer_param_count(t) / 1e9, col_dtype_name(q), P, P / bench_median(tp, reps),
           1 / per_tok, 1000 * per_tok, weights / 1e9, rate, rate / copy, copy, rate / rd, rd, rd * 1e9 / weights,
           1000 * prod, 100 * prod / per_tok, N, all / 1e9);
    rc = 0;
done:
    col_lm_trainer_free(t);
    col_lm_source_close(&src);
    free(prompt), free(tp), free(tg);
    return rc;
}
