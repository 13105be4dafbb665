/* installed_api.c - a program of libcolossal's user, built by tests/test_installed.sh against the INSTALLED
 * tree (pkg-config --cflags --libs colossal, shared and static): a small graph on the CPU backend, its loss
 * and gradient against the same sums written out here. Prints TAP lines numbered from argv[1]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <colossal/backend_cpu.h>
#include <colossal/graph.h>
#include <colossal/ops.h>
#include <colossal/plan.h>
#include <colossal/units.h>

enum { N = 2, K = 3, M = 2 };

int main(int argc, char **argv)
{
    int t = argc > 1 ? atoi(argv[1]) : 1, failed = 0;
    float x[N * K] = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
    float w[K * M] = {1.0f, -0.5f, 0.25f, 2.0f, -1.5f, 0.75f};
    float gw[K * M] = {0};
    /* loss = mean((x @ w)^2), d loss / d w = x^T (2 (x @ w) / (N M)) */
    float h[N * M], want_loss = 0, want_gw[K * M] = {0};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++) {
            h[i * M + j] = 0;
            for (int k = 0; k < K; k++)
                h[i * M + j] += x[i * K + k] * w[k * M + j];
            want_loss += h[i * M + j] * h[i * M + j] / (N * M);
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < M; j++)
            for (int i = 0; i < N; i++)
                want_gw[k * M + j] += x[i * K + k] * 2 * h[i * M + j] / (N * M);

    col_err err = {0};
    col_backend be;
    col_graph *g = col_graph_new();
    int64_t sx[2] = {N, K}, sw[2] = {K, M};
    col_node *xn = col_input(g, "x", COL_F32, 2, sx), *wn = col_param(g, "w", COL_F32, 2, sw);
    col_plan *p = NULL;
    col_node *loss = NULL;
    int ok = col_cpu_backend_init(&be, &err) == COL_OK;
    if (ok) {
        col_bind(xn, x, NULL);
        col_bind(wn, w, NULL);
        col_bind_grad(wn, gw, NULL);
        col_node *y = col_matmul(g, xn, wn);
        loss = col_mean(g, col_mul(g, y, y), 3, 0);
        ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK &&
             col_plan_run(p, &be, &err) == COL_OK;
    }
    if (!ok)
        printf("# libcolossal: %s\n", err.msg);
    float got = ok ? *(float *)col_data(loss) : NAN;
    int loss_ok = ok && fabsf(got - want_loss) <= 1e-5f * fabsf(want_loss);
    printf("%s %d - the loss of a graph run on the CPU backend: %g (by hand %g)\n", loss_ok ? "ok" : "not ok", t++,
           got, want_loss);
    failed += !loss_ok;
    float worst = ok ? 0 : INFINITY;
    for (int i = 0; i < K * M; i++)
        worst = fmaxf(worst, fabsf(gw[i] - want_gw[i]));
    printf("%s %d - its gradient: largest difference %g\n", worst <= 1e-5f ? "ok" : "not ok", t++, worst);
    failed += !(worst <= 1e-5f);
    char buf[COL_BYTES_STR];
    col_fmt_bytes(buf, sizeof buf, 3u << 20);
    int units_ok = strstr(buf, "MiB") != NULL;
    printf("%s %d - col_fmt_bytes(3 << 20) is \"%s\"\n", units_ok ? "ok" : "not ok", t++, buf);
    failed += !units_ok;
    col_plan_free(p);
    col_graph_free(g);
    if (ok)
        col_cpu_backend_free(&be);
    return failed ? 1 : 0;
}
