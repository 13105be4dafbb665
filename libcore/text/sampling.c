/* sampling.c - next-token sampling (see sampling.h for the order of steps). */
#include "sampling.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

col_sample_opts col_sample_defaults(void)
{
    return (col_sample_opts){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = 0};
}

col_status col_sampler_init(col_sampler *s, int vocab, col_err *err)
{
    memset(s, 0, sizeof *s);
    if (vocab <= 0)
        return col_err_set(err, COL_EINVAL, "sampler: vocabulary size %d, must be > 0", vocab);
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->val = malloc((size_t)vocab * sizeof *s->val);
    if (!s->idx || !s->val) {
        col_sampler_free(s);
        return col_err_set(err, COL_ENOMEM, "sampler: out of memory for a vocabulary of %d", vocab);
    }
    s->vocab = vocab;
    return COL_OK;
}

void col_sampler_free(col_sampler *s)
{
    free(s->idx);
    free(s->val);
    memset(s, 0, sizeof *s);
}

col_status col_sample_check(const col_sample_opts *o, col_err *err)
{
    if (!o)
        return col_err_set(err, COL_EINVAL, "sampling: no settings given");
    if (!(o->temperature >= 0.0f) || isinf(o->temperature))
        return col_err_set(err, COL_EINVAL, "sampling: temperature %g, must be finite and >= 0 (0 = greedy)",
                           (double)o->temperature);
    if (o->top_k < 0)
        return col_err_set(err, COL_EINVAL, "sampling: top_k %d, must be >= 0 (0 = off)", o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return col_err_set(err, COL_EINVAL, "sampling: top_p %g, must be in (0, 1] (1 = off)", (double)o->top_p);
    if (!(o->repetition_penalty > 0.0f) || isinf(o->repetition_penalty))
        return col_err_set(err, COL_EINVAL, "sampling: repetition_penalty %g, must be finite and > 0 (1 = off)",
                           (double)o->repetition_penalty);
    return COL_OK;
}

/* Token a comes before b: higher logit, ties by lower id. */
static inline bool before(const float *v, int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

/* Max-heap under `before` (the root is the element that comes last). */
static void sift_down(int32_t *h, int64_t n, int64_t i, const float *v)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && before(v, h[c], h[c + 1]))
            c++;
        if (!before(v, h[i], h[c]))
            return;
        int32_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* Sorts h[0..n) into `before` order (decreasing logit, ties by id). */
static void heap_sort(int32_t *h, int64_t n, const float *v)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        sift_down(h, n, i, v);
    for (int64_t end = n - 1; end > 0; end--) {
        int32_t t = h[0];
        h[0] = h[end];
        h[end] = t;
        sift_down(h, end, 0, v);
    }
}

/* The logit of the k-th token in `before` order (1 <= k <= V), using h[0..k) as the heap. */
static float kth_largest(int32_t *h, int V, int k, const float *v)
{
    for (int i = 0; i < k; i++)
        h[i] = i;
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        sift_down(h, k, i, v);
    for (int i = k; i < V; i++)
        if (before(v, i, h[0])) {
            h[0] = i;
            sift_down(h, k, 0, v);
        }
    return v[h[0]];
}

/* idx[0..n) = the finite tokens with v >= thr, in id order; *total = sum of their weights. */
static int64_t collect(int32_t *idx, int V, const float *v, float thr, float m, double inv_t, double *total)
{
    int64_t n = 0;
    double t = 0.0;
    for (int i = 0; i < V; i++)
        if (v[i] >= thr && v[i] != -INFINITY) {
            idx[n++] = i;
            t += exp(((double)v[i] - m) * inv_t);
        }
    *total = t;
    return n;
}

/* The length of the shortest prefix of sorted idx[0..n) whose weight reaches want (its weight in *cum), or -1. */
static int64_t nucleus(const int32_t *idx, int64_t n, const float *v, float m, double inv_t, double want,
                       double *cum)
{
    double c = 0.0;
    for (int64_t j = 0; j < n; j++) {
        c += exp(((double)v[idx[j]] - m) * inv_t);
        if (c >= want) {
            *cum = c;
            return j + 1;
        }
    }
    return -1;
}

col_status col_sample(col_sampler *s, const float *logits, const int32_t *context, int64_t ncontext,
                      const col_sample_opts *o, uint64_t step, int32_t *token, col_err *err)
{
    col_status st = col_sample_check(o, err);
    if (st != COL_OK)
        return st;
    if (!s || !s->idx || !s->val || !logits || !token || ncontext < 0 || (ncontext > 0 && !context))
        return col_err_set(err, COL_EINVAL, "sampling: missing sampler, logits, context or output");
    const int V = s->vocab;
    float *v = s->val;
    int32_t *idx = s->idx;

    // v: [V] = logits, checked
    bool bad = false;
    for (int i = 0; i < V; i++) {
        v[i] = logits[i];
        bad |= isnan(logits[i]) || logits[i] == INFINITY;
    }
    if (bad) {
        for (int i = 0; i < V; i++)
            if (isnan(logits[i]) || logits[i] == INFINITY)
                return col_err_set(err, COL_EINVAL, "sampling: logit of token %d is %g (NaN or +inf)", i,
                                   (double)logits[i]);
    }

    // 1. repetition penalty, once per distinct context token (idx marks the seen ones)
    const float pen = o->repetition_penalty;
    if (pen != 1.0f)
        memset(idx, 0, (size_t)V * sizeof *idx);
    for (int64_t j = 0; j < ncontext; j++) {
        int32_t t = context[j];
        if (t < 0 || t >= V)
            return col_err_set(err, COL_EINVAL, "sampling: context token %lld is id %d, valid ids are [0, %d)",
                               (long long)j, t, V);
        if (pen != 1.0f && !idx[t]) {
            idx[t] = 1;
            v[t] = v[t] < 0.0f ? v[t] * pen : v[t] / pen;
        }
    }

    // argmax (ties to the lowest id) and the maximum
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (v[i] > v[best])
            best = i;
    const float m = v[best];
    if (m == -INFINITY)
        return col_err_set(err, COL_EINVAL, "sampling: every logit is -inf, no token can be drawn");
    // 2. temperature 0: greedy
    if (o->temperature == 0.0f) {
        *token = best;
        return COL_OK;
    }
    const double inv_t = 1.0 / (double)o->temperature;

    // 3. top-k: candidates idx[0..n) = the finite tokens with logit >= the k-th largest
    float thr = -INFINITY;
    if (o->top_k > 0 && o->top_k < V)
        thr = kth_largest(idx, V, o->top_k, v);
    double total = 0.0;
    int64_t n = collect(idx, V, v, thr, m, inv_t, &total);

    // 4. top-p over the softmax of the candidates: the nucleus is a prefix of the sorted candidates, so
    //    first look for it among the top 1024, 8192, ... (peaked distributions need no full sort)
    if (o->top_p < 1.0f) {
        const double want = (double)o->top_p * total;
        int64_t keep = -1;
        for (int64_t lim = 1024; keep < 0 && lim < n; lim *= 8) {
            double unused;
            int64_t c = collect(idx, V, v, kth_largest(idx, V, (int)lim, v), m, inv_t, &unused);
            heap_sort(idx, c, v);
            keep = nucleus(idx, c, v, m, inv_t, want, &total);
        }
        if (keep < 0) {
            double unused;
            n = collect(idx, V, v, thr, m, inv_t, &unused);
            heap_sort(idx, n, v);
            keep = nucleus(idx, n, v, m, inv_t, want, &total);
            if (keep < 0) /* rounding: the whole sum fell short of top_p * total */
                keep = n;
        }
        n = keep;
    } else if (o->top_k > 0) {
        heap_sort(idx, n, v);
    }

    // 5. inverse-CDF draw at u in [0, 1)
    const double target = (double)col_rand_uniform(o->seed, step) * total;
    double acc = 0.0;
    for (int64_t j = 0; j < n; j++) {
        acc += exp(((double)v[idx[j]] - m) * inv_t);
        if (acc > target) {
            *token = idx[j];
            return COL_OK;
        }
    }
    *token = idx[n - 1]; /* u * total rounded up to total */
    return COL_OK;
}
