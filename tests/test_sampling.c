/* test_sampling.c - next-token sampling against a double-precision reference
 * of transformers' processing order (penalty, temperature, top-k, top-p). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"
#include "sampling.h"
#include "testlib.h"

/* ---- reference: the filtered softmax in double ---- */

static const double *g_key;
static int cmp_desc(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_key[i] != g_key[j])
        return g_key[i] > g_key[j] ? -1 : 1;
    return i - j;
}

/* prob[V]: the distribution col_sample draws from. */
static void ref_probs(const float *logits, int V, const int32_t *ctx, int nctx, const col_sample_opts *o, double *prob)
{
    double *l = malloc((size_t)V * sizeof *l);
    int *ord = malloc((size_t)V * sizeof *ord);
    for (int i = 0; i < V; i++)
        l[i] = logits[i];
    for (int i = 0; i < V; i++) {
        bool seen = false;
        for (int j = 0; j < nctx; j++)
            seen |= ctx[j] == i;
        if (seen)
            l[i] = l[i] < 0 ? (double)(float)(logits[i] * o->repetition_penalty)
                            : (double)(float)(logits[i] / o->repetition_penalty);
        ord[i] = i;
    }
    g_key = l;
    qsort(ord, (size_t)V, sizeof *ord, cmp_desc);
    int n = V;
    if (o->top_k > 0 && o->top_k < V) {
        double kth = l[ord[o->top_k - 1]];
        n = 0;
        while (n < V && l[ord[n]] >= kth)
            n++;
    }
    double tot = 0;
    for (int j = 0; j < n; j++)
        tot += exp((l[ord[j]] - l[ord[0]]) / o->temperature);
    if (o->top_p < 1) {
        double cum = 0;
        int keep = 0;
        while (keep < n && cum < o->top_p) {
            cum += exp((l[ord[keep]] - l[ord[0]]) / o->temperature) / tot;
            keep++;
        }
        n = keep;
    }
    memset(prob, 0, (size_t)V * sizeof *prob);
    tot = 0;
    for (int j = 0; j < n; j++)
        tot += prob[ord[j]] = exp((l[ord[j]] - l[ord[0]]) / o->temperature);
    for (int i = 0; i < V; i++)
        prob[i] /= tot;
    free(l);
    free(ord);
}

static int ref_argmax(const float *x, int V)
{
    int b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static col_sample_opts opts(float t, int k, float p, float pen, uint64_t seed)
{
    col_sample_opts o = col_sample_defaults();
    o.temperature = t;
    o.top_k = k;
    o.top_p = p;
    o.repetition_penalty = pen;
    o.seed = seed;
    return o;
}

static void test_settings(void)
{
    col_sampler s;
    col_err err = {0};
    TL_OK(col_sampler_init(&s, 0, &err) == COL_EINVAL && strstr(err.msg, "vocabulary"), "vocab 0: %s", err.msg);
    col_sampler_init(&s, 8, &err);
    float lg[8] = {0};
    int32_t tok = -1;
    struct {
        col_sample_opts o;
        const char *name;
    } bad[] = {
        {opts(-0.5f, 0, 1, 1, 0), "temperature"}, {opts(NAN, 0, 1, 1, 0), "temperature"},
        {opts(INFINITY, 0, 1, 1, 0), "temperature"}, {opts(1, -1, 1, 1, 0), "top_k"},
        {opts(1, 0, 0.0f, 1, 0), "top_p"}, {opts(1, 0, 1.5f, 1, 0), "top_p"}, {opts(1, 0, NAN, 1, 0), "top_p"},
        {opts(1, 0, -0.1f, 1, 0), "top_p"}, {opts(1, 0, 1, 0.0f, 0), "repetition_penalty"},
        {opts(1, 0, 1, -1.2f, 0), "repetition_penalty"}, {opts(1, 0, 1, NAN, 0), "repetition_penalty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        col_status st = col_sample(&s, lg, NULL, 0, &bad[i].o, 0, &tok, &err);
        TL_OK(st == COL_EINVAL && strstr(err.msg, bad[i].name) && tok == -1, "bad %s rejected: %s", bad[i].name,
              err.msg);
    }
    col_sample_opts ok = opts(0.7f, 3, 0.5f, 1.2f, 1);
    TL_OK(col_sample_check(&ok, &err) == COL_OK, "valid settings pass");

    /* bad data */
    col_sample_opts o = col_sample_defaults();
    lg[5] = NAN;
    TL_OK(col_sample(&s, lg, NULL, 0, &o, 0, &tok, &err) == COL_EINVAL && strstr(err.msg, "token 5") &&
              strstr(err.msg, "NaN"), "NaN logit: %s", err.msg);
    o.temperature = 0;
    TL_OK(col_sample(&s, lg, NULL, 0, &o, 0, &tok, &err) == COL_EINVAL, "NaN logit is an error when greedy too");
    lg[5] = INFINITY;
    TL_OK(col_sample(&s, lg, NULL, 0, &o, 0, &tok, &err) == COL_EINVAL && strstr(err.msg, "inf"), "+inf logit: %s",
          err.msg);
    for (int i = 0; i < 8; i++)
        lg[i] = -INFINITY;
    TL_OK(col_sample(&s, lg, NULL, 0, &o, 0, &tok, &err) == COL_EINVAL && strstr(err.msg, "-inf"), "all -inf: %s",
          err.msg);
    memset(lg, 0, sizeof lg);
    int32_t ctx[2] = {3, 8};
    TL_OK(col_sample(&s, lg, ctx, 2, &o, 0, &tok, &err) == COL_EINVAL && strstr(err.msg, "id 8") &&
              strstr(err.msg, "[0, 8)"), "context id out of range: %s", err.msg);
    ctx[1] = -1;
    o.repetition_penalty = 1.3f;
    TL_OK(col_sample(&s, lg, ctx, 2, &o, 0, &tok, &err) == COL_EINVAL, "negative context id: %s", err.msg);
    col_sampler_free(&s);
}

static void test_greedy(col_rng *r)
{
    col_err err = {0};
    bool ok_greedy = true, ok_cold = true, ok_k1 = true;
    for (int trial = 0; trial < 20; trial++) {
        int V = 2 + (int)col_rng_below(r, 3000);
        float *lg = malloc((size_t)V * sizeof *lg);
        col_fill_normal(lg, V, 100 + (uint64_t)trial, 3.0f);
        col_sampler s;
        col_sampler_init(&s, V, &err);
        int want = ref_argmax(lg, V);
        int32_t tok;
        for (int step = 0; step < 10; step++) {
            col_sample_opts o = opts(0, 0, 1, 1, (uint64_t)trial);
            ok_greedy &= col_sample(&s, lg, NULL, 0, &o, (uint64_t)step, &tok, &err) == COL_OK && tok == want;
            o = opts(1e-6f, 0, 1, 1, (uint64_t)trial); /* the gap to the runner-up is >> 1e-6 * log(V) */
            ok_cold &= col_sample(&s, lg, NULL, 0, &o, (uint64_t)step, &tok, &err) == COL_OK && tok == want;
            o = opts(1.5f, 1, 1, 1, (uint64_t)trial);
            ok_k1 &= col_sample(&s, lg, NULL, 0, &o, (uint64_t)step, &tok, &err) == COL_OK && tok == want;
        }
        col_sampler_free(&s);
        free(lg);
    }
    TL_OK(ok_greedy, "temperature 0 = argmax on random logits");
    TL_OK(ok_cold, "temperature 1e-6 gives the argmax");
    TL_OK(ok_k1, "top_k 1 = greedy at temperature 1.5");

    float tie[6] = {1, 3, -2, 3, 0, 3};
    col_sampler s;
    col_sampler_init(&s, 6, &err);
    col_sample_opts o = opts(0, 0, 1, 1, 0);
    int32_t tok = -1;
    col_sample(&s, tie, NULL, 0, &o, 0, &tok, &err);
    TL_OK(tok == 1, "greedy ties go to the lowest id (%d)", tok);
    /* top_k = 1 keeps all tokens tied with the largest, as TopKLogitsWarper does */
    o = opts(1, 1, 1, 1, 5);
    int seen[6] = {0};
    for (int step = 0; step < 300; step++) {
        col_sample(&s, tie, NULL, 0, &o, (uint64_t)step, &tok, &err);
        seen[tok]++;
    }
    TL_OK(seen[1] && seen[3] && seen[5] && seen[1] + seen[3] + seen[5] == 300, "top_k 1 with a 3-way tie draws all three");
    col_sampler_free(&s);
}

static void test_penalty(void)
{
    col_err err = {0};
    const float lg[6] = {2.0f, 1.5f, -1.0f, -0.5f, 0.25f, -3.0f};
    const int32_t ctx[] = {0, 0, 3, 2, 3, 0};
    const float pen = 1.5f;
    col_sampler s;
    col_sampler_init(&s, 6, &err);
    col_sample_opts o = opts(0, 0, 1, pen, 0);
    int32_t tok = -1;
    col_status st = col_sample(&s, lg, ctx, 6, &o, 0, &tok, &err);
    float want[6];
    for (int i = 0; i < 6; i++) {
        bool in = i == 0 || i == 2 || i == 3;
        want[i] = !in ? lg[i] : lg[i] < 0 ? lg[i] * pen : lg[i] / pen;
    }
    bool same = st == COL_OK;
    for (int i = 0; i < 6; i++)
        same &= s.val[i] == want[i];
    TL_OK(same, "penalty: l<0 ? l*p : l/p once per distinct context token (%.4f %.4f %.4f %.4f)", (double)s.val[0],
          (double)s.val[2], (double)s.val[3], (double)s.val[5]);
    TL_OK(tok == 1, "penalised greedy picks token 1 (2/1.5 < 1.5), got %d", tok);
    o.repetition_penalty = 0.5f; /* < 1 favours repeats */
    col_sample(&s, lg, (const int32_t[]){3}, 1, &o, 0, &tok, &err);
    TL_OK(s.val[3] == -0.25f && tok == 0, "penalty 0.5 raises a negative logit (%g)", (double)s.val[3]);
    col_sampler_free(&s);
}

static void test_top_p_set(void)
{
    /* probabilities, shuffled over the ids */
    const double p[8] = {0.06, 0.25, 0.04, 0.40, 0.03, 0.15, 0.05, 0.02};
    const float tops[] = {0.3f, 0.5f, 0.65f, 0.7f, 0.9f, 0.99f};
    float lg[8];
    for (int i = 0; i < 8; i++)
        lg[i] = (float)log(p[i]);
    col_err err = {0};
    col_sampler s;
    col_sampler_init(&s, 8, &err);
    for (size_t t = 0; t < sizeof tops / sizeof tops[0]; t++) {
        /* expected set: descending probabilities until the sum reaches top_p */
        int ord[8];
        for (int i = 0; i < 8; i++)
            ord[i] = i;
        for (int i = 0; i < 8; i++)
            for (int j = i + 1; j < 8; j++)
                if (p[ord[j]] > p[ord[i]]) {
                    int x = ord[i];
                    ord[i] = ord[j];
                    ord[j] = x;
                }
        bool in[8] = {0};
        double cum = 0;
        int nset = 0;
        for (int j = 0; j < 8 && cum < tops[t]; j++) {
            cum += p[ord[j]];
            in[ord[j]] = true;
            nset++;
        }
        int cnt[8] = {0};
        col_sample_opts o = opts(1, 0, tops[t], 1, 77 + t);
        for (int step = 0; step < 4000; step++) {
            int32_t tok;
            col_sample(&s, lg, NULL, 0, &o, (uint64_t)step, &tok, &err);
            cnt[tok]++;
        }
        bool ok = true;
        for (int i = 0; i < 8; i++)
            ok &= in[i] ? cnt[i] > 0 : cnt[i] == 0;
        TL_OK(ok, "top_p %.2f keeps exactly the %d most probable tokens", (double)tops[t], nset);
    }
    col_sampler_free(&s);
}

/* Draws N tokens and compares the counts with the reference distribution. */
static void check_freq(const char *what, int V, const float *lg, const int32_t *ctx, int nctx, col_sample_opts o)
{
    const int N = 20000;
    col_err err = {0};
    col_sampler s;
    col_sampler_init(&s, V, &err);
    double *prob = malloc((size_t)V * sizeof *prob);
    int *cnt = calloc((size_t)V, sizeof *cnt);
    ref_probs(lg, V, ctx, nctx, &o, prob);
    bool ok = true;
    for (int step = 0; step < N; step++) {
        int32_t tok = -1;
        ok &= col_sample(&s, lg, ctx, nctx, &o, (uint64_t)step, &tok, &err) == COL_OK && tok >= 0 && tok < V;
        if (tok >= 0 && tok < V)
            cnt[tok]++;
    }
    double chi2 = 0, worst = 0;
    int df = -1, outside = 0;
    for (int i = 0; i < V; i++) {
        double e = N * prob[i];
        if (prob[i] == 0) {
            outside += cnt[i];
            continue;
        }
        double sd = sqrt(e * (1 - prob[i])) + 1e-12;
        double z = fabs(cnt[i] - e) / sd;
        worst = z > worst ? z : worst;
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
        df++;
    }
    double lim = df + 5 * sqrt(2.0 * (df > 0 ? df : 1));
    TL_OK(ok && outside == 0 && worst < 5 && chi2 < lim,
          "%s: %d draws match the filtered softmax (%d kept tokens, worst bin %.2f sigma, chi2 %.1f < %.1f, %d "
          "outside)", what, N, df + 1, worst, chi2, lim, outside);
    free(prob);
    free(cnt);
    col_sampler_free(&s);
}

static void test_frequencies(void)
{
    const int V = 60;
    float lg[60];
    col_fill_normal(lg, V, 4242, 1.5f);
    lg[7] = -INFINITY; /* a masked token */
    const int32_t ctx[] = {1, 5, 5, 9, 30, 31, 7};
    check_freq("plain softmax", V, lg, NULL, 0, opts(1, 0, 1, 1, 11));
    check_freq("temperature 0.6", V, lg, NULL, 0, opts(0.6f, 0, 1, 1, 12));
    check_freq("top_k 10 at T 1.3", V, lg, NULL, 0, opts(1.3f, 10, 1, 1, 13));
    check_freq("top_p 0.8 at T 0.9", V, lg, NULL, 0, opts(0.9f, 0, 0.8f, 1, 14));
    check_freq("penalty 1.3 + T 0.8 + top_k 25 + top_p 0.9", V, lg, ctx, 7, opts(0.8f, 25, 0.9f, 1.3f, 15));
}

/* The token for draw u by the documented rule, with a full sort: the nucleus in decreasing order, the
 * weights exp((l - max) * (1 / T)) summed in that order, the first token whose running sum exceeds u * sum. */
static int ref_draw(const float *lg, int V, float t, float top_p, float u, int *nucleus_size)
{
    double *l = malloc((size_t)V * sizeof *l);
    int *ord = malloc((size_t)V * sizeof *ord);
    for (int i = 0; i < V; i++) {
        l[i] = lg[i];
        ord[i] = i;
    }
    g_key = l;
    qsort(ord, (size_t)V, sizeof *ord, cmp_desc);
    const double inv_t = 1.0 / (double)t, m = l[ord[0]];
    double tot = 0, cum = 0;
    for (int j = 0; j < V; j++)
        tot += exp((l[ord[j]] - m) * inv_t);
    int n = 0;
    while (n < V && cum < (double)top_p * tot)
        cum += exp((l[ord[n++]] - m) * inv_t);
    *nucleus_size = n;
    double acc = 0, target = (double)u * cum;
    int tok = ord[n - 1];
    for (int j = 0; j < n; j++) {
        acc += exp((l[ord[j]] - m) * inv_t);
        if (acc > target) {
            tok = ord[j];
            break;
        }
    }
    free(l);
    free(ord);
    return tok;
}

/* Large vocabularies: the nucleus found among the top 1024, the top 8192, or by the full sort. */
static void test_large_nucleus(void)
{
    const int V = 20000;
    float *lg = malloc(V * sizeof *lg);
    col_err err = {0};
    col_sampler s;
    col_sampler_init(&s, V, &err);
    const struct {
        float std, t, top_p;
        int lo, hi;
    } c[] = {{4.0f, 1.0f, 0.9f, 2, 1024}, {2.0f, 1.0f, 0.95f, 1025, 8192}, {1.0f, 1.0f, 0.95f, 8193, 20000}};
    for (int k = 0; k < 3; k++) {
        col_fill_normal(lg, V, 500 + (uint64_t)k, c[k].std);
        col_sample_opts o = opts(c[k].t, 0, c[k].top_p, 1, 900 + (uint64_t)k);
        int ns = 0, match = 0;
        const int N = 60;
        for (int step = 0; step < N; step++) {
            int32_t tok = -1;
            col_sample(&s, lg, NULL, 0, &o, (uint64_t)step, &tok, &err);
            match += tok == ref_draw(lg, V, c[k].t, c[k].top_p, col_rand_uniform(o.seed, (uint64_t)step), &ns);
        }
        TL_OK(match == N && ns >= c[k].lo && ns <= c[k].hi,
              "V %d, logit std %.0f, top_p %.2f: nucleus of %d tokens, %d of %d draws equal the full-sort reference",
              V, (double)c[k].std, (double)c[k].top_p, ns, match, N);
    }
    col_sampler_free(&s);
    free(lg);
}

static void test_determinism(col_rng *r)
{
    const int V = 1000;
    float *lg = malloc(V * sizeof *lg);
    col_fill_normal(lg, V, 9, 2.0f);
    col_err err = {0};
    col_sampler a, b;
    col_sampler_init(&a, V, &err);
    col_sampler_init(&b, V, &err);
    col_sample_opts o = opts(1.0f, 50, 0.95f, 1.1f, 123), o2 = o;
    o2.seed = 124;
    int32_t ctx[16];
    for (int i = 0; i < 16; i++)
        ctx[i] = (int32_t)col_rng_below(r, V);
    bool same = true;
    int differ = 0;
    for (int step = 0; step < 200; step++) {
        int32_t t1, t2, t3, t4;
        col_sample(&a, lg, ctx, 16, &o, (uint64_t)step, &t1, &err);
        col_sample(&b, lg, ctx, 16, &o, (uint64_t)step, &t2, &err);
        col_sample(&a, lg, ctx, 16, &o, (uint64_t)step, &t3, &err); /* a reused sampler, same answer */
        col_sample(&a, lg, ctx, 16, &o2, (uint64_t)step, &t4, &err);
        same &= t1 == t2 && t1 == t3;
        differ += t1 != t4;
    }
    TL_OK(same, "a seed and a step give the same token, whatever sampler state");
    TL_OK(differ > 50, "another seed gives other tokens (%d of 200 differ)", differ);
    col_sampler_free(&a);
    col_sampler_free(&b);
    free(lg);
}

static void bench(void)
{
    const int V = 128256;
    float *lg = malloc(V * sizeof *lg);
    col_fill_normal(lg, V, 3, 2.0f);
    col_err err = {0};
    col_sampler s;
    col_sampler_init(&s, V, &err);
    for (int i = 0; i < V; i++)
        lg[i] = lg[i] * lg[i] * lg[i] / 4; /* a heavy upper tail, like LM logits */
    const col_sample_opts cfg[3] = {opts(0.8f, 0, 1, 1.1f, 1), opts(0.8f, 40, 0.95f, 1.1f, 1), opts(0.8f, 0, 0.95f, 1.1f, 1)};
    const char *names[3] = {"T only", "top_k 40 + top_p 0.95", "top_p 0.95"};
    int32_t ctx[256];
    for (int i = 0; i < 256; i++)
        ctx[i] = i * 97;
    for (int c = 0; c < 3; c++) {
        struct timespec t0, t1;
        int32_t tok;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < 5; i++)
            col_sample(&s, lg, ctx, 256, &cfg[c], (uint64_t)i, &tok, &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        TL_NOTE("V=%d %s: %.2f ms per token (peaked logits)", V, names[c],
                ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6) / 5);
    }
    col_sampler_free(&s);
    free(lg);
}

int main(void)
{
    col_rng r;
    col_rng_init(&r, 2024);
    test_settings();
    test_greedy(&r);
    test_penalty();
    test_top_p_set();
    test_frequencies();
    test_large_nucleus();
    test_determinism(&r);
    bench();
    return tl_done();
}
