/* test_matmul_small.c - the CPU backend's products of a few rows (cpu_matmul_small.c): for M = 1..16
 * rows, each row of a [M, K] x b equals, bit for bit, the product of that row alone (M = 1), with b
 * stored [K, N] (GPT-2's Conv1D) and [N, K] (a Linear's transposed weight), N and K not multiples of the
 * kernel's tiles; every result is within 1e-5 (relative to the sum of |products|) of a double-precision
 * sum; one thread and two give the same bits; batched operands work too. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

/* c = a [M, K] times b (stored [K, N], or [N, K] when nk), through a graph; malloc'ed [M, N] */
static float *product(const float *a, int64_t M, int64_t K, const float *b, int64_t N, bool nk)
{
    col_graph *g = col_graph_new();
    int64_t as[2] = {M, K}, bs[2] = {nk ? N : K, nk ? K : N};
    col_node *x = col_input(g, "a", COL_F32, 2, as), *w = col_input(g, "b", COL_F32, 2, bs);
    col_bind(x, (void *)a, NULL);
    col_bind(w, (void *)b, NULL);
    col_node *c = col_matmul(g, x, nk ? col_transpose(g, w, 0, 1) : w);
    col_mark_output(c);
    col_plan *p = NULL;
    col_err err = {0};
    float *out = NULL;
    if (col_graph_status(g) == COL_OK && col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, &be, &err) == COL_OK) {
        out = malloc(sizeof(float) * (size_t)(M * N));
        memcpy(out, col_data(c), sizeof(float) * (size_t)(M * N));
    } else {
        printf("# %s\n", err.msg);
    }
    col_plan_free(p);
    col_graph_free(g);
    return out;
}

static void check(int64_t N, int64_t K, bool nk)
{
    enum { MMAX = 16 };
    float *a = malloc(sizeof(float) * (size_t)(MMAX * K)), *b = malloc(sizeof(float) * (size_t)(N * K));
    col_fill_uniform(a, MMAX * K, 11, -1.0f, 1.0f);
    col_fill_uniform(b, N * K, 12, -1.0f, 1.0f);
    float *alone[MMAX];
    for (int m = 0; m < MMAX; m++)
        alone[m] = product(a + m * K, 1, K, b, N, nk);
    bool same = true;
    double worst = 0;
    for (int64_t M = 2; M <= MMAX; M++) {
        float *c = product(a, M, K, b, N, nk);
        for (int64_t m = 0; m < M && c; m++)
            same &= alone[m] && memcmp(c + m * N, alone[m], sizeof(float) * (size_t)N) == 0;
        same &= c != NULL;
        free(c);
    }
    for (int m = 0; m < MMAX && alone[m]; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)a[m * K + k] * (nk ? b[n * K + k] : b[k * N + n]);
                s += p;
                mag += fabs(p);
            }
            double e = fabs(alone[m][n] - s) / (mag > 0 ? mag : 1);
            worst = e > worst ? e : worst;
        }
    TL_OK(same, "b stored %s, N %lld, K %lld: rows of M = 2..16 equal each row alone, bit for bit", nk ? "[N, K]" : "[K, N]",
          (long long)N, (long long)K);
    TL_OK(worst <= 1e-5, "b stored %s, N %lld, K %lld: within 1e-5 of a double sum (worst %.2g)", nk ? "[N, K]" : "[K, N]",
          (long long)N, (long long)K, worst);
    /* threads do not change the bits */
    int was = omp_get_max_threads();
    omp_set_num_threads(1);
    float *one = product(a, 5, K, b, N, nk);
    omp_set_num_threads(2);
    float *two = product(a, 5, K, b, N, nk);
    omp_set_num_threads(was);
    TL_OK(one && two && memcmp(one, two, sizeof(float) * (size_t)(5 * N)) == 0,
          "b stored %s, N %lld: one thread and two give the same bits", nk ? "[N, K]" : "[K, N]", (long long)N);
    free(one);
    free(two);
    for (int m = 0; m < MMAX; m++)
        free(alone[m]);
    free(a);
    free(b);
}

int main(void)
{
    col_err err = {0};
    if (col_cpu_backend_init(&be, &err) != COL_OK) {
        TL_OK(false, "cpu backend: %s", err.msg);
        return tl_done();
    }
    check(97, 61, false);
    check(97, 61, true);
    check(256, 512, false);
    check(300, 1000, true);
    check(2050, 128, false);
    col_cpu_backend_free(&be);
    return tl_done();
}
