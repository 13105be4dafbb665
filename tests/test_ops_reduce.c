/* test_ops_reduce.c - sum / mean / max over axis sets: forward against a
 * double reference, gradients against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

typedef struct {
    col_op op;
    uint32_t axes;
    int keepdim;
    int transposed; /* reduce a transposed view of the leaf */
} red_case;

static col_node *build(col_graph *g, col_node **x, void *u)
{
    const red_case *c = u;
    col_node *v = c->transposed ? col_transpose(g, x[0], 0, 2) : x[0];
    if (c->op == COL_OP_SUM)
        return col_sum(g, v, c->axes, c->keepdim);
    if (c->op == COL_OP_MEAN)
        return col_mean(g, v, c->axes, c->keepdim);
    return col_max(g, v, c->axes, c->keepdim);
}

int main(void)
{
    tl_cpu_backend(&be);
    col_rng r;
    col_rng_init(&r, 77);
    col_op ops[3] = {COL_OP_SUM, COL_OP_MEAN, COL_OP_MAX};
    for (int k = 0; k < 3; k++) {
        for (uint32_t axes = 1; axes < 8; axes++) {
            red_case c = {ops[k], axes, (int)(axes & 1), (int)((axes >> 1) & 1)};
            int64_t s[3] = {1 + (int64_t)col_rng_below(&r, 4), 2 + (int64_t)col_rng_below(&r, 4),
                            1 + (int64_t)col_rng_below(&r, 5)};
            int64_t n = s[0] * s[1] * s[2];
            float *x = malloc(sizeof(float) * (size_t)n);
            /* distinct values so max has a unique argmax */
            for (int64_t i = 0; i < n; i++)
                x[i] = (float)((i * 37) % n) * 0.1f - 0.3f * (float)n * 0.1f + 0.01f * col_rng_uniform(&r);
            /* view shape (after optional transpose of dims 0 and 2) */
            int64_t v[3] = {c.transposed ? s[2] : s[0], s[1], c.transposed ? s[0] : s[2]};
            col_graph *g = col_graph_new();
            col_node *l = col_input(g, "x", COL_F32, 3, s);
            col_bind(l, x, NULL);
            col_node *out = col_contiguous(g, build(g, &l, &c));
            col_mark_output(out);
            col_plan *p = NULL;
            col_err err = {0};
            bool ran = col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, &be, &err) == COL_OK;
            /* reference */
            int64_t on = 1;
            int64_t osh[3];
            for (int d = 0; d < 3; d++) {
                osh[d] = (axes & (1u << d)) ? 1 : v[d];
                on *= osh[d];
            }
            double *ref = malloc(sizeof(double) * (size_t)on);
            for (int64_t i = 0; i < on; i++)
                ref[i] = ops[k] == COL_OP_MAX ? -INFINITY : 0;
            int64_t cnt = n / on;
            for (int64_t a = 0; a < v[0]; a++)
                for (int64_t b = 0; b < v[1]; b++)
                    for (int64_t cc = 0; cc < v[2]; cc++) {
                        double val = c.transposed ? x[(cc * s[1] + b) * s[2] + a] : x[(a * s[1] + b) * s[2] + cc];
                        int64_t oa = (axes & 1) ? 0 : a, ob = (axes & 2) ? 0 : b, oc = (axes & 4) ? 0 : cc;
                        int64_t o = (oa * osh[1] + ob) * osh[2] + oc;
                        ref[o] = ops[k] == COL_OP_MAX ? fmax(ref[o], val) : ref[o] + val;
                    }
            double md = 0;
            for (int64_t i = 0; ran && i < on; i++) {
                double want = ops[k] == COL_OP_MEAN ? ref[i] / (double)cnt : ref[i];
                md = fmax(md, fabs(((float *)col_data(out))[i] - want));
            }
            int want_nd = c.keepdim ? 3 : 3 - __builtin_popcount(axes);
            TL_OK(ran && md < 1e-4 && out->t.ndim == want_nd, "%s axes=%u keepdim=%d%s forward (max diff %.1e)",
                  col_op_name(ops[k]), axes, c.keepdim, c.transposed ? " transposed" : "", md);
            col_plan_free(p);
            col_graph_free(g);
            free(ref);
            col_gc_input in = {COL_F32, 3, {s[0], s[1], s[2]}, x};
            char name[64];
            snprintf(name, sizeof name, "%s axes=%u keepdim=%d%s", col_op_name(ops[k]), axes, c.keepdim,
                     c.transposed ? " transposed" : "");
            tl_gradcheck(&be, name, build, &c, 1, &in, NULL);
            free(x);
        }
    }
    /* error: reducing an empty dimension with max */
    col_graph *g = col_graph_new();
    int64_t se[2] = {3, 0};
    col_node *m = col_max(g, col_input(g, "x", COL_F32, 2, se), 2, 0);
    TL_OK(m == NULL && strstr(col_graph_error(g)->msg, "max"), "max over an empty dim is refused: %s",
          col_graph_error(g)->msg);
    col_graph_free(g);
    g = col_graph_new();
    m = col_sum(g, col_input(g, "x", COL_I64, 2, se), 1, 0);
    TL_OK(m == NULL && strstr(col_graph_error(g)->msg, "sum"), "sum of i64 is refused: %s", col_graph_error(g)->msg);
    col_graph_free(g);
    col_cpu_backend_free(&be);
    return tl_done();
}
