/* test_graph.c - schedule, arena planning, activation checkpointing, and the
 * errors of building, planning and running graphs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

enum { L = 6, N = 32, C = 48 };

/* a deep chain: x -> (x @ W_i) * (x @ W_i) * 0.1 + x ... -> mean; optionally
 * checkpointing each layer. Returns the gradients of all W_i (L*C*C floats)
 * and writes the arena size. */
static float *chain_grads(int checkpoint, size_t *arena, float *loss_out)
{
    col_graph *g = col_graph_new();
    int64_t sx[2] = {N, C}, sw[2] = {C, C};
    float *xd = malloc(sizeof(float) * N * C), *wd = malloc(sizeof(float) * L * C * C);
    float *gd = calloc((size_t)L * C * C, sizeof(float));
    col_fill_uniform(xd, N * C, 1, -1, 1);
    col_fill_normal(wd, L * C * C, 2, 0.15f);
    col_node *x = col_input(g, "x", COL_F32, 2, sx);
    col_bind(x, xd, NULL);
    for (int l = 0; l < L; l++) {
        col_node *w = col_param(g, "w", COL_F32, 2, sw);
        col_bind(w, wd + l * C * C, NULL);
        col_bind_grad(w, gd + l * C * C, NULL);
        if (checkpoint)
            col_checkpoint_begin(g);
        col_node *h = col_matmul(g, x, w);
        x = col_add(g, col_scale(g, col_mul(g, h, h), 0.1f, 0.0f), x);
        if (checkpoint)
            col_checkpoint_end(g);
    }
    col_node *loss = col_mean(g, col_mul(g, x, x), 3, 0);
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK &&
              col_plan_run(p, &be, &err) == COL_OK;
    if (!ok)
        TL_NOTE("chain failed: %s", err.msg);
    *arena = p ? col_plan_arena_bytes(p) : 0;
    *loss_out = ok ? *(float *)col_data(loss) : NAN;
    col_plan_free(p);
    col_graph_free(g);
    free(xd);
    free(wd);
    if (!ok) {
        free(gd);
        return NULL;
    }
    return gd;
}

static void test_checkpointing(void)
{
    size_t a0, a1;
    float l0, l1;
    float *g0 = chain_grads(0, &a0, &l0), *g1 = chain_grads(1, &a1, &l1);
    TL_OK(g0 && g1 && memcmp(g0, g1, sizeof(float) * L * C * C) == 0 && l0 == l1,
          "checkpointed run gives bitwise-identical loss and gradients");
    /* each layer stores x and h without checkpointing, only x with it: at
     * least 4 of the 6 layers' h buffers must be saved */
    TL_OK(a1 + 4 * N * C * sizeof(float) <= a0, "checkpointing shrinks the activation arena: %zu -> %zu bytes", a0, a1);
    free(g0);
    free(g1);
}

static void test_arena(void)
{
    /* a chain of 20 same-size ops needs only a few live buffers */
    col_graph *g = col_graph_new();
    int64_t s[1] = {1024};
    float *xd = malloc(sizeof(float) * 1024);
    col_fill_uniform(xd, 1024, 3, -1, 1);
    col_node *x = col_input(g, "x", COL_F32, 1, s);
    col_bind(x, xd, NULL);
    col_node *y = x;
    for (int i = 0; i < 20; i++)
        y = col_scale(g, y, 1.01f, 0.001f);
    col_mark_output(y);
    col_plan *p;
    col_err err = {0};
    TL_OK(col_plan_create(g, &p, &err) == COL_OK, "plan a chain");
    size_t buf = 4096;
    TL_OK(col_plan_arena_bytes(p) <= 2 * buf && col_plan_unshared_bytes(p) == 20 * buf,
          "20 chained buffers share an arena of %zu bytes (unshared %zu)", col_plan_arena_bytes(p),
          col_plan_unshared_bytes(p));
    TL_OK(col_plan_run(p, &be, &err) == COL_OK, "run the chain");
    double want = xd[5];
    for (int i = 0; i < 20; i++)
        want = (float)(want * 1.01f + 0.001f);
    TL_OK(fabs(((float *)col_data(y))[5] - want) < 1e-6, "chain result");
    /* the schedule contains only what the output needs */
    col_node *unused = col_scale(g, x, 2.0f, 0.0f);
    (void)unused;
    /* running twice gives the same answer (nothing accumulates by accident) */
    float first = ((float *)col_data(y))[5];
    TL_OK(col_plan_run(p, &be, &err) == COL_OK && ((float *)col_data(y))[5] == first, "runs are repeatable");
    /* planning again gives a second plan; the first one stays valid (tests/test_plan.c) */
    col_plan *p2 = NULL;
    col_status st = col_plan_create(g, &p2, &err);
    TL_OK(st == COL_OK && col_plan_length(p2) == 21, "unused nodes are not scheduled");
    TL_OK(col_plan_run(p2, &be, &err) == COL_OK && ((float *)col_plan_data(p2, y))[5] == first, "new plan runs");
    TL_OK(col_plan_run(p, &be, &err) == COL_OK && ((float *)col_plan_data(p, y))[5] == first &&
              col_plan_data(p, y) != col_plan_data(p2, y),
          "the first plan still runs, in its own arena: %s", err.msg);
    col_plan_free(p2);
    col_plan_free(p);
    col_graph_free(g);
    free(xd);
}

static void test_errors(void)
{
    col_err err = {0};
    int64_t s[2] = {2, 3};
    col_graph *g = col_graph_new();
    col_node *w = col_param(g, "w", COL_F32, 2, s);
    col_node *y = col_mul(g, w, w);
    TL_OK(col_graph_backward(g, y, &err) == COL_ESHAPE && strstr(err.msg, "scalar"), "backward of a non-scalar: %s",
          err.msg);
    col_node *loss = col_sum(g, y, 3, 0);
    TL_OK(col_graph_backward(g, loss, &err) == COL_OK, "backward of a scalar");
    col_plan *p;
    TL_OK(col_plan_create(g, &p, &err) == COL_OK, "plan");
    TL_OK(col_plan_run(p, &be, &err) == COL_ESTATE && strstr(err.msg, "w"), "run with an unbound parameter: %s",
          err.msg);
    float wd[6] = {1, 2, 3, 4, 5, 6};
    col_bind(w, wd, NULL);
    TL_OK(col_plan_run(p, &be, &err) == COL_ESTATE && strstr(err.msg, "gradient"), "run without a gradient buffer: %s",
          err.msg);
    float gd[6] = {0};
    col_bind_grad(w, gd, NULL);
    TL_OK(col_plan_run(p, &be, &err) == COL_OK && gd[4] == 10.0f, "gradient of sum(w*w) is 2w");
    col_plan_free(p);
    col_graph_free(g);

    g = col_graph_new();
    col_node *x = col_input(g, "x", COL_F32, 2, s);
    TL_OK(col_graph_backward(g, col_sum(g, x, 3, 0), &err) == COL_EINVAL && strstr(err.msg, "parameter"),
          "backward with nothing to train: %s", err.msg);
    col_graph_free(g);

    g = col_graph_new();
    TL_OK(col_plan_create(g, &p, &err) == COL_EINVAL, "planning an empty graph: %s", err.msg);
    col_checkpoint_begin(g);
    col_checkpoint_begin(g);
    TL_OK(col_graph_status(g) == COL_ESTATE, "nested checkpoint segments are refused: %s", col_graph_error(g)->msg);
    col_graph_free(g);

    g = col_graph_new();
    int64_t bad[1] = {-3};
    TL_OK(col_input(g, "x", COL_F32, 1, bad) == NULL && strstr(col_graph_error(g)->msg, "negative"),
          "negative sizes are refused: %s", col_graph_error(g)->msg);
    col_graph_free(g);
    g = col_graph_new();
    TL_OK(col_param(g, "ids", COL_I32, 1, s) == NULL && strstr(col_graph_error(g)->msg, "ids"),
          "integer parameters are refused: %s", col_graph_error(g)->msg);
    col_graph_free(g);

    /* a backend without a kernel reports which op is missing */
    g = col_graph_new();
    x = col_input(g, "x", COL_F32, 2, s);
    y = col_scale(g, x, 2, 0);
    col_mark_output(y);
    col_plan_create(g, &p, &err);
    col_backend partial = be;
    partial.kernel[COL_OP_SCALE] = NULL;
    TL_OK(col_plan_run(p, &partial, &err) == COL_EUNSUPPORTED && strstr(err.msg, "scale"),
          "missing kernel named: %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

/* ---- runs with a hook that moves the parameters between ops ---- */

typedef struct {
    col_node *w, *wt;        /* the parameter; the leaf it is read through */
    float *wbuf[2], *gbuf[2];
    int cur, calls;
    bool poison;             /* bind zeros instead of a copy: the op must see it */
    bool fail_at_first;
} mover;

/* before every op: move w and its gradient to the other buffer (copying
 * them, as a memory tier moving a chunk would) */
static col_status move_hook(void *user, const col_plan *p, int i, col_node *n, col_err *err)
{
    (void)p, (void)i, (void)n;
    mover *m = user;
    if (m->fail_at_first)
        return col_err_set(err, COL_EIO, "hook: simulated transfer failure");
    int nx = 1 - m->cur;
    size_t bytes = sizeof(float) * C * C;
    if (m->poison)
        memset(m->wbuf[nx], 0, bytes);
    else
        memcpy(m->wbuf[nx], m->wbuf[m->cur], bytes);
    memcpy(m->gbuf[nx], m->gbuf[m->cur], bytes);
    memset(m->wbuf[m->cur], 0xff, bytes); /* NaN: a read of the old place would show */
    memset(m->gbuf[m->cur], 0xff, bytes);
    m->cur = nx;
    m->calls++;
    col_status st = col_bind(m->w, m->wbuf[nx], err);
    return st == COL_OK ? col_bind_grad(m->w, m->gbuf[nx], err) : st;
}

/* y = x @ w^T (through a transpose view), loss = mean(y * y); returns the loss and dL/dw */
static bool hooked_run(mover *m, col_plan_hook hook, float *loss, float *grad, col_err *err)
{
    col_graph *g = col_graph_new();
    int64_t sx[2] = {N, C}, sw[2] = {C, C};
    float xd[N * C];
    col_fill_uniform(xd, N * C, 3, -1, 1);
    col_node *x = col_input(g, "x", COL_F32, 2, sx);
    m->w = col_param(g, "w", COL_F32, 2, sw);
    col_fill_normal(m->wbuf[0], C * C, 4, 0.2f);
    memset(m->gbuf[0], 0, sizeof(float) * C * C);
    m->cur = 0;
    m->calls = 0;
    col_bind(x, xd, NULL);
    col_bind(m->w, m->wbuf[0], NULL);
    col_bind_grad(m->w, m->gbuf[0], NULL);
    col_node *y = col_matmul(g, x, col_transpose(g, m->w, 0, 1));
    col_node *l = col_mean(g, col_mul(g, y, y), 3, 0);
    col_plan *p = NULL;
    bool ok = col_graph_backward(g, l, err) == COL_OK && col_plan_create(g, &p, err) == COL_OK &&
              col_plan_run_hooked(p, &be, hook, m, err) == COL_OK;
    if (ok) {
        *loss = *(float *)col_data(l);
        memcpy(grad, m->gbuf[m->cur], sizeof(float) * C * C);
    }
    col_plan_free(p);
    col_graph_free(g);
    return ok;
}

static void test_hooked_runs(void)
{
    mover m = {0};
    for (int k = 0; k < 2; k++) {
        m.wbuf[k] = malloc(sizeof(float) * C * C);
        m.gbuf[k] = malloc(sizeof(float) * C * C);
    }
    float l0 = 0, l1 = 0, l2 = 0;
    float *g0 = malloc(sizeof(float) * C * C), *g1 = malloc(sizeof(float) * C * C);
    col_err err = {0};
    bool ok = hooked_run(&m, NULL, &l0, g0, &err) && hooked_run(&m, move_hook, &l1, g1, &err);
    TL_OK(ok && m.calls > 3, "a run moving the parameter before each of its %d ops: %s", m.calls, err.msg);
    TL_OK(ok && l0 == l1 && memcmp(g0, g1, sizeof(float) * C * C) == 0,
          "loss and gradient bitwise those of a plain run (%.9g vs %.9g)", l0, l1);
    m.poison = true;
    ok = hooked_run(&m, move_hook, &l2, g1, &err);
    TL_OK(ok && l2 == 0, "rebinding takes effect through the transpose view (zeros bound: loss %g)", l2);
    m.poison = false;
    m.fail_at_first = true;
    TL_OK(!hooked_run(&m, move_hook, &l2, g1, &err) && err.code == COL_EIO && strstr(err.msg, "simulated"),
          "a failing hook stops the run with its message: %s", err.msg);
    for (int k = 0; k < 2; k++)
        free(m.wbuf[k]), free(m.gbuf[k]);
    free(g0);
    free(g1);
}

int main(void)
{
    tl_cpu_backend(&be);
    TL_NOTE("OpenBLAS kernels: %s", col_cpu_backend_blas_core(&be));
    test_arena();
    test_checkpointing();
    test_errors();
    test_hooked_runs();
    col_cpu_backend_free(&be);
    return tl_done();
}
