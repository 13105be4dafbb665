/* test_gradcheck.c - the gradient checker must catch wrong backward kernels.
 *
 * A copy of the CPU backend gets a deliberately wrong kernel for an op that
 * only backward passes use; the check that passes with the real backend must
 * fail with the broken one. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_kernel_fn real_max_bwd, real_scatter;

/* right values, but 5% too large */
static col_status off_by_5_percent(const col_node *n, const col_exec *ex, col_err *err)
{
    col_status st = real_max_bwd(n, ex, err);
    float *d = n->t.data;
    for (int64_t i = 0; i < col_numel(&n->t); i++)
        d[i] *= 1.05f;
    return st;
}

/* writes the slice one position off */
static col_status shifted_scatter(const col_node *n, const col_exec *ex, col_err *err)
{
    col_status st = real_scatter(n, ex, err);
    float *d = n->t.data;
    int64_t num = col_numel(&n->t);
    for (int64_t i = num - 1; i > 0; i--)
        d[i] = d[i - 1];
    d[0] = 0;
    return st;
}

static col_node *build_max(col_graph *g, col_node **x, void *u)
{
    (void)u;
    return col_max(g, x[0], 2, 0);
}

static col_node *build_slice(col_graph *g, col_node **x, void *u)
{
    (void)u;
    return col_mul(g, col_slice(g, x[0], 1, 1, 3), col_slice(g, x[0], 1, 0, 3));
}

static int check(const col_backend *be, col_gc_build_fn f, const col_gc_input *in, col_gc_result *r)
{
    col_err err = {0};
    col_status st = col_gradcheck(be, f, NULL, 1, in, NULL, r, &err);
    if (st != COL_OK)
        TL_NOTE("gradcheck error: %s", err.msg);
    return st == COL_OK;
}

int main(void)
{
    col_backend be;
    tl_cpu_backend(&be);
    float x[40];
    for (int i = 0; i < 40; i++)
        x[i] = (float)((i * 17) % 40) * 0.05f - 1.0f; /* distinct: unique maxima */
    col_gc_input in = {COL_F32, 2, {5, 8}, x};

    col_gc_result r;
    int ok = check(&be, build_max, &in, &r);
    TL_OK(ok && r.failed == 0 && r.checked > 0, "correct max backward passes (%d points)", r.checked);
    ok = check(&be, build_slice, &in, &r);
    TL_OK(ok && r.failed == 0 && r.checked > 0, "correct slice backward passes (%d points)", r.checked);

    col_backend broken = be;
    real_max_bwd = be.kernel[COL_OP_MAX_BWD];
    real_scatter = be.kernel[COL_OP_SCATTER_SLICE];
    broken.kernel[COL_OP_MAX_BWD] = off_by_5_percent;
    ok = check(&broken, build_max, &in, &r);
    TL_OK(ok && r.failed > 0, "a max backward 5%% too large is caught (%d of %d points)",
          r.failed, r.checked);
    broken = be;
    broken.kernel[COL_OP_SCATTER_SLICE] = shifted_scatter;
    ok = check(&broken, build_slice, &in, &r);
    TL_OK(ok && r.failed > 0, "a shifted slice backward is caught (%d of %d points)",
          r.failed, r.checked);
    col_cpu_backend_free(&be);
    return tl_done();
}
