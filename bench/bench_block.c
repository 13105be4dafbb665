/* bench_block - one GPT-2-small transformer block (C=768, 12 heads),
 * forward + backward on the CPU backend, against OpenBLAS sgemm measured in
 * the same run.
 *
 * For each sequence length T the batch is tokens/T, so the GEMMs keep their
 * shape and the attention share grows with T. FLOPs counted (per token,
 * forward): 24*C^2 for the four projections, plus 2*C*(T+1) for QK^T and
 * PV over the causal triangle; forward + backward = 3x forward. The loss is
 * mean(block(x) * R) so backward starts from a real gradient; its two small
 * elementwise ops count in the time, not in the FLOPs.
 *
 * The ceiling: cblas_sgemm on the block's largest GEMM shape (tokens x 768 @
 * 768 x 3072), same library, same threads, measured before each sequence
 * length and once at the end (each a median of reps); the ratio is against
 * the best of those, which keeps it conservative on a noisy machine. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "blas.h"
#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "bench_util.h"
#include "backend_cpu.h"
#include "procsetup.h"

static double sgemm_rate(const col_blas *blas, int M, int K, int N, int reps)
{
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N),
          *c = malloc(sizeof(float) * (size_t)M * N);
    col_fill_uniform(a, (int64_t)M * K, 1, -1, 1);
    col_fill_uniform(b, (int64_t)K * N, 2, -1, 1);
    double t[32];
    blas->sgemm(COL_BLAS_ROW_MAJOR, COL_BLAS_NO_TRANS, COL_BLAS_NO_TRANS, M, N, K, 1, a, K, b, N, 0, c, N);
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        blas->sgemm(COL_BLAS_ROW_MAJOR, COL_BLAS_NO_TRANS, COL_BLAS_NO_TRANS, M, N, K, 1, a, K, b, N, 0, c, N);
        t[r] = bench_now() - t0;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * M * K * N / bench_median(t, reps) / 1e9;
}

typedef struct {
    col_node *ln1w, *ln1b, *wqkv, *bqkv, *wo, *bo, *ln2w, *ln2b, *wfc, *bfc, *wp, *bp;
} block_params;

static col_node *conv1d(col_graph *g, col_node *x, col_node *w, col_node *b)
{
    int64_t flat[2] = {-1, w->t.shape[0]};
    col_node *y = col_add(g, col_matmul(g, col_reshape(g, x, 2, flat), w), b);
    int64_t shape[3] = {x->t.shape[0], x->t.shape[1], w->t.shape[1]};
    return col_reshape(g, y, 3, shape);
}

static col_node *block(col_graph *g, col_node *x, const block_params *p, int64_t H)
{
    int64_t B = x->t.shape[0], T = x->t.shape[1], C = x->t.shape[2], D = C / H;
    col_node *h = col_layernorm(g, x, p->ln1w, p->ln1b, 1e-5f);
    col_node *qkv = conv1d(g, h, p->wqkv, p->bqkv);
    int64_t s5[5] = {B, T, 3, H, D}, s4[4] = {B, H, T, D}, s3[3] = {B, T, C};
    col_node *q5 = col_permute(g, col_reshape(g, qkv, 5, s5), (int[]){2, 0, 3, 1, 4});
    col_node *q = col_reshape(g, col_slice(g, q5, 0, 0, 1), 4, s4);
    col_node *k = col_reshape(g, col_slice(g, q5, 0, 1, 1), 4, s4);
    col_node *v = col_reshape(g, col_slice(g, q5, 0, 2, 1), 4, s4);
    col_node *y = col_reshape(g, col_transpose(g, col_attention(g, q, k, v, 1, 0), 1, 2), 3, s3);
    x = col_add(g, x, conv1d(g, y, p->wo, p->bo));
    h = col_layernorm(g, x, p->ln2w, p->ln2b, 1e-5f);
    h = col_gelu_tanh(g, conv1d(g, h, p->wfc, p->bfc));
    return col_add(g, x, conv1d(g, h, p->wp, p->bp));
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    int tokens = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (tokens < 1024 || reps < 1 || reps > 31) {
        fprintf(stderr, "usage: bench_block [tokens >= 1024] [reps 1..31]\n");
        return 2;
    }
    const int64_t C = 768, H = 12;
    col_err err = {0};
    col_backend be;
    if (col_cpu_backend_init(&be, &err) != COL_OK) {
        fprintf(stderr, "bench_block: %s\n", err.msg);
        return 1;
    }
    col_blas blas;
    col_blas_load(&blas, &err);
    char proc[256];
    col_proc_describe(proc, sizeof proc);
    printf("# bench_block: GPT-2-small block fwd+bwd, %d tokens per step, %d threads, median of %d\n", tokens,
           col_cpu_backend_threads(&be), reps);
    printf("# OpenBLAS %s kernels from %s (%s build)\n# process: %s\n", blas.core, blas.path,
           blas.parallel == COL_BLAS_OPENMP ? "OpenMP" : blas.parallel == COL_BLAS_PTHREAD ? "pthread" : "other", proc);
    int Ts[5] = {64, 128, 256, 512, 1024};
    double rates[5], ms[5], arena[5], ceil_samples[6];
    int64_t Bs[5];
    for (int ti = 0; ti < 5; ti++) {
        ceil_samples[ti] = sgemm_rate(&blas, tokens, (int)C, (int)(4 * C), reps);
        int64_t T = Ts[ti], B = tokens / T;
        col_graph *g = col_graph_new();
        int64_t sx[3] = {B, T, C}, sc[1] = {C};
        col_node *x = col_param(g, "x", COL_F32, 3, sx);
        block_params p;
        col_node **pp = (col_node **)&p;
        int64_t shapes[12][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
                                 {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
        for (int i = 0; i < 12; i++)
            pp[i] = col_param(g, "w", COL_F32, shapes[i][1] ? 2 : 1, shapes[i]);
        col_node *r = col_input(g, "R", COL_F32, 3, sx);
        col_node *loss = col_mean(g, col_mul(g, block(g, x, &p, H), r), 7, 0);
        (void)sc;
        col_plan *plan = NULL;
        if (col_graph_backward(g, loss, &err) != COL_OK || col_plan_create(g, &plan, &err) != COL_OK) {
            fprintf(stderr, "bench_block: %s\n", err.msg);
            return 1;
        }
        /* parameters, gradients and inputs */
        float *bufs[26];
        int nb = 0;
        for (int i = -1; i < 12; i++) {
            col_node *n = i < 0 ? x : pp[i];
            int64_t cnt = col_numel(&n->t);
            float *w = malloc(sizeof(float) * (size_t)cnt), *gr = calloc((size_t)cnt, sizeof(float));
            col_fill_normal(w, cnt, 10 + (uint64_t)i, i < 0 ? 1.0f : 0.02f);
            if (i == 0 || i == 6)
                for (int64_t j = 0; j < cnt; j++)
                    w[j] = 1.0f;
            col_bind(n, w, NULL);
            col_bind_grad(n, gr, NULL);
            bufs[nb++] = w;
            bufs[nb++] = gr;
        }
        col_fill_uniform(col_data(r), B * T * C, 5, -1, 1);
        double times[32];
        int ok = col_plan_run(plan, &be, &err) == COL_OK; /* warm-up */
        for (int k = 0; ok && k < reps; k++) {
            double t0 = bench_now();
            ok = col_plan_run(plan, &be, &err) == COL_OK;
            times[k] = bench_now() - t0;
        }
        if (!ok) {
            fprintf(stderr, "bench_block: %s\n", err.msg);
            return 1;
        }
        double t = bench_median(times, reps);
        double flops = 3.0 * (double)(B * T) * (24.0 * C * C + 2.0 * C * (T + 1));
        rates[ti] = flops / t / 1e9;
        ms[ti] = 1000 * t;
        arena[ti] = (double)col_plan_arena_bytes(plan) / 1e6;
        Bs[ti] = B;
        for (int i = 0; i < nb; i++)
            free(bufs[i]);
        col_plan_free(plan);
        col_graph_free(g);
    }
    ceil_samples[5] = sgemm_rate(&blas, tokens, (int)C, (int)(4 * C), reps);
    printf("sgemm %dx%dx%d samples:", tokens, (int)C, (int)(4 * C));
    for (int i = 0; i < 6; i++)
        printf(" %.1f", ceil_samples[i]);
    double ceiling = 0;
    for (int i = 0; i < 6; i++)
        ceiling = ceil_samples[i] > ceiling ? ceil_samples[i] : ceiling;
    printf(" GFLOP/s; ceiling (best) %.1f\n", ceiling);
    printf("%6s %4s %10s %10s %8s %8s\n", "T", "B", "ms/step", "GFLOP/s", "ratio", "arena MB");
    for (int ti = 0; ti < 5; ti++)
        printf("%6d %4lld %10.1f %10.1f %8.3f %8.1f\n", Ts[ti], (long long)Bs[ti], ms[ti], rates[ti], rates[ti] / ceiling,
               arena[ti]);
    col_cpu_backend_free(&be);
    return 0;
}
