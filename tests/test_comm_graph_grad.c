/* test_comm_graph_grad.c - collectives with gradients (libcore/comm/comm_graph.h, issue 18) under mpirun with 1, 2
 * and 4 processes (tests/test_comm_graph_grad.sh).
 *
 * Every rank makes every rank's inputs from (tag, rank, index), so each computes here, on host arrays in double,
 * the whole model's function f(x_0 .. x_{P-1}) once and each rank's d f / d x_r, and checks its own forward values
 * and gradients against them: for each builder, a small graph whose loss is replicated (the same on every rank,
 * made so by an all-reduce when the work before it is partitioned). Collectives that move bytes are checked
 * exactly, sums within 1e-5 relative (the largest element error over the largest expected value). Then two
 * Megatron compositions against the same model computed whole in one graph of this process (no collective):
 * a column-parallel then row-parallel MLP, and the sequence-parallel block (LayerNorm on the rows of this rank,
 * all-gather, the MLP, reduce-scatter), loss and every gradient within 1e-5. A shift and its inverse give x back.
 * A bf16 all-reduce and its gradient are checked exactly (values in eighths).
 * Bad arguments are refused when the graph is built, with a message. On a communicator of this rank alone
 * (col_comm_split) every builder is an identity: col_gradcheck checks a chain of all of them against finite
 * differences, and a plan on a device's memory (a fake device) runs them. The largest errors measured are printed
 * as TAP comments. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm.h"
#include "comm_graph.h"
#include "plan.h"
#include "testlib.h"
#include "mpi_testutil.h"

static col_backend be;
static col_comm *world, *self;
static int rank, size;
static double err_sum, err_grad, err_mlp, err_sp; /* the largest relative errors measured (copies: exact) */

#define check(ok, detail, ...) tl_mpi_check((ok), (detail), __VA_ARGS__)
#define TOL 1e-5

/* ---- what every rank holds ---- */

/* element i of the tensor `tag` of rank r: in [-1, 1) */
static float val(int tag, int r, int64_t i)
{
    return (float)((tag * 7919 + r * 104729 + i * 131 + (i * i) % 17) % 1000) / 500.0f - 1.0f;
}

static void fill(float *v, int64_t n, int tag, int r)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = val(tag, r, i);
}

static int64_t numel(int ndim, const int64_t *sh)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= sh[i];
    return n;
}

/* the flat index, in the shape of xs with dimension axis times P, of element i of part r (parts of shape xs) */
static int64_t part_flat(int ndim, const int64_t *xs, int axis, int r, int64_t i)
{
    int64_t idx[4], f = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = i % xs[d];
        i /= xs[d];
    }
    idx[axis] += (int64_t)r * xs[axis];
    for (int d = 0; d < ndim; d++)
        f = f * (d == axis ? xs[d] * size : xs[d]) + idx[d];
    return f;
}

/* relative error of got against want: the largest element error over the largest |want| */
static double rel_err(const float *got, const double *want, int64_t n)
{
    double m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs(want[i]));
        d = fmax(d, fabs((double)got[i] - want[i]));
    }
    return m > 0 ? d / m : d;
}

/* got against want within tol (0: exactly); the error joins *worst */
static void cmp(res *r, const char *what, const float *got, const double *want, int64_t n, double tol, double *worst)
{
    double e = rel_err(got, want, n);
    if (worst && e > *worst)
        *worst = e;
    if (!(e <= tol))
        fail(r, "%s: relative error %.3g (tolerance %g)", what, e, tol);
}

/* a loss (a sum of terms) against want: within tol of the sum of the terms' magnitudes, scale */
static void cmp_loss(res *r, float got, double want, double scale)
{
    double e = fabs((double)got - want) / (scale > 0 ? scale : 1);
    if (e > err_sum)
        err_sum = e;
    if (!(e <= TOL))
        fail(r, "loss %.9g, expected %.9g: error %.3g of the terms' magnitude %.3g", got, want, e, scale);
}

static void term(double *sum, double *mag, double t)
{
    *sum += t;
    *mag += fabs(t);
}

/* ---- a graph whose leaves are bound to host arrays ---- */

enum { MAXL = 12 };
typedef struct {
    col_graph *g;
    int n;
    col_node *node[MAXL];
    float *data[MAXL], *grad[MAXL];
} gb;

static gb gb_new(void) { return (gb){.g = col_graph_new()}; }

/* a leaf holding v (copied): a parameter (its gradient in grad_of) or an input */
static col_node *leaf(gb *b, const char *name, bool param, int ndim, const int64_t *sh, const float *v)
{
    int64_t n = numel(ndim, sh);
    col_node *x = param ? col_param(b->g, name, COL_F32, ndim, sh) : col_input(b->g, name, COL_F32, ndim, sh);
    if (!x || b->n == MAXL)
        return NULL;
    float *d = malloc(sizeof(float) * (size_t)n), *gr = param ? calloc((size_t)n, sizeof(float)) : NULL;
    memcpy(d, v, sizeof(float) * (size_t)n);
    col_bind(x, d, NULL);
    if (gr)
        col_bind_grad(x, gr, NULL);
    b->node[b->n] = x;
    b->data[b->n] = d;
    b->grad[b->n++] = gr;
    return x;
}

static const float *grad_of(const gb *b, const col_node *x)
{
    for (int i = 0; i < b->n; i++)
        if (b->node[i] == x)
            return b->grad[i];
    return NULL;
}

static void gb_free(gb *b)
{
    for (int i = 0; i < b->n; i++) {
        free(b->data[i]);
        free(b->grad[i]);
    }
    col_graph_free(b->g);
}

/* the backward pass of loss (when given), a plan and one run; outs[i] downloaded into bufs[i] */
static bool gb_run(gb *b, col_node *loss, int nouts, col_node *const *outs, float *const *bufs, res *r)
{
    if (col_graph_status(b->g) != COL_OK) {
        fail(r, "build: %s", col_graph_error(b->g)->msg);
        return false;
    }
    for (int i = 0; i < nouts; i++)
        col_mark_output(outs[i]);
    col_err err = {0};
    col_status st = loss ? col_graph_backward(b->g, loss, &err) : COL_OK;
    col_plan *p = NULL;
    if (st == COL_OK)
        st = col_plan_create(b->g, &p, &err);
    if (st == COL_OK)
        st = col_plan_run(p, &be, &err);
    for (int i = 0; i < nouts && st == COL_OK; i++)
        st = col_plan_download(p, outs[i], bufs[i], sizeof(float) * (size_t)col_numel(&outs[i]->t), &err);
    expect_ok(r, st, &err, "backward, plan and run");
    col_plan_free(p);
    return st == COL_OK;
}

/* sum(a * w), a scalar */
static col_node *dot(col_graph *g, col_node *a, col_node *w)
{
    return col_sum(g, col_mul(g, a, w), (1u << a->t.ndim) - 1u, 0);
}

/* a partitioned scalar made the replicated loss: the sum over the ranks */
static col_node *replicated(col_graph *g, col_node *z) { return col_comm_graph_all_reduce(g, world, z, COL_RED_SUM, COL_CG_SAME); }

/* ---- all-reduce ---- */

static void test_all_reduce(col_red_op op, col_cg_use use)
{
    enum { N = 12 };
    int64_t sh[2] = {4, 3};
    res r = {true, ""};
    float x[N], w[N], y[N], loss = 0;
    double ey[N], edx[N], el = 0, ea = 0;
    fill(x, N, 1, rank);
    bool grad = op == COL_RED_SUM || op == COL_RED_AVG;
    /* SAME: the loss sum(W y), W replicated; SPLIT: sum over ranks of sum(W_r y). max, min: sum(W y) + sum(W_r x):
     * x's gradient is W_r alone */
    fill(w, N, 2, use == COL_CG_SAME ? 0 : rank);
    gb b = gb_new();
    col_node *xn = leaf(&b, "x", true, 2, sh, x), *wn = leaf(&b, "w", false, 2, sh, w);
    col_node *yn = col_comm_graph_all_reduce(b.g, world, xn, op, use);
    col_node *ln = use == COL_CG_SAME ? dot(b.g, yn, wn) : replicated(b.g, dot(b.g, yn, wn));
    if (!grad)
        ln = col_add(b.g, dot(b.g, yn, wn), dot(b.g, xn, wn));
    col_node *outs[2] = {yn, ln};
    float *bufs[2] = {y, &loss};
    if (gb_run(&b, ln, 2, outs, bufs, &r)) {
        for (int64_t i = 0; i < N; i++) {
            double acc = val(1, 0, i), ws = 0;
            for (int s = 1; s < size; s++) {
                double v = val(1, s, i);
                acc = op == COL_RED_MAX ? fmax(acc, v) : op == COL_RED_MIN ? fmin(acc, v) : acc + v;
            }
            ey[i] = op == COL_RED_AVG ? acc / size : acc;
            for (int s = 0; s < size; s++)
                ws += val(2, use == COL_CG_SAME ? 0 : s, i);
            if (use == COL_CG_SAME)
                ws = w[i];
            edx[i] = !grad ? w[i] : op == COL_RED_AVG ? ws / size : ws;
            term(&el, &ea, use == COL_CG_SAME || !grad ? w[i] * ey[i] : ws * ey[i]);
            if (!grad)
                term(&el, &ea, w[i] * x[i]);
        }
        cmp(&r, "y", y, ey, N, grad ? TOL : 0, &err_sum);
        cmp_loss(&r, loss, el, ea);
        cmp(&r, "dx", grad_of(&b, xn), edx, N, TOL, &err_grad);
    }
    gb_free(&b);
    check(r.ok, r.detail, "all-reduce (%s, %s): the result, the loss and x's gradient%s", col_red_op_name(op),
          use == COL_CG_SAME ? "SAME" : "SPLIT", grad ? "" : " (none through the collective)");
}

/* ---- copy: a replicated x entering partitioned work ---- */

static void test_copy(void)
{
    enum { N = 12 };
    int64_t sh[2] = {3, 4};
    res r = {true, ""};
    float x[N], w[N], y[N], loss = 0;
    double ex[N], edx[N] = {0}, el = 0, ea = 0;
    fill(x, N, 5, 0);
    fill(w, N, 6, rank);
    gb b = gb_new();
    col_node *xn = leaf(&b, "x", true, 2, sh, x), *wn = leaf(&b, "w", false, 2, sh, w);
    col_node *yn = col_comm_graph_copy(b.g, world, xn), *ln = replicated(b.g, dot(b.g, yn, wn));
    col_node *outs[2] = {yn, ln};
    float *bufs[2] = {y, &loss};
    if (gb_run(&b, ln, 2, outs, bufs, &r)) {
        for (int64_t i = 0; i < N; i++) {
            ex[i] = x[i];
            for (int s = 0; s < size; s++)
                edx[i] += val(6, s, i);
            term(&el, &ea, edx[i] * x[i]);
        }
        cmp(&r, "y", y, ex, N, 0, NULL);
        cmp_loss(&r, loss, el, ea);
        cmp(&r, "dx", grad_of(&b, xn), edx, N, TOL, &err_grad);
    }
    gb_free(&b);
    check(r.ok, r.detail, "copy: y = x, and x's gradient is the sum over the ranks of theirs");
}

/* ---- all-gather ---- */

static void test_all_gather(int axis, col_cg_use use)
{
    enum { N = 12 };
    int64_t xs[3] = {2, 3, 2}, ys[3] = {2, 3, 2};
    int ax = axis < 0 ? axis + 3 : axis;
    ys[ax] *= size;
    int64_t ny = N * size;
    res r = {true, ""};
    float x[N], *w = malloc(sizeof(float) * (size_t)ny), *y = malloc(sizeof(float) * (size_t)ny), loss = 0;
    double *ey = malloc(sizeof(double) * (size_t)ny), edx[N] = {0}, el = 0, ea = 0;
    fill(x, N, 7, rank);
    fill(w, ny, 8, use == COL_CG_SAME ? 0 : rank);
    gb b = gb_new();
    col_node *xn = leaf(&b, "x", true, 3, xs, x), *wn = leaf(&b, "w", false, 3, ys, w);
    col_node *yn = col_comm_graph_all_gather_grad(b.g, world, xn, axis, use);
    col_node *ln = use == COL_CG_SAME ? dot(b.g, yn, wn) : replicated(b.g, dot(b.g, yn, wn));
    col_node *outs[2] = {yn, ln};
    float *bufs[2] = {y, &loss};
    if (gb_run(&b, ln, 2, outs, bufs, &r)) {
        for (int s = 0; s < size; s++)
            for (int64_t i = 0; i < N; i++) {
                int64_t f = part_flat(3, xs, ax, s, i);
                double ws = 0;
                for (int q = 0; q < (use == COL_CG_SAME ? 1 : size); q++)
                    ws += val(8, q, f);
                ey[f] = val(7, s, i);
                term(&el, &ea, ws * ey[f]);
                if (s == rank)
                    edx[i] = ws;
            }
        cmp(&r, "y", y, ey, ny, 0, NULL);
        cmp_loss(&r, loss, el, ea);
        cmp(&r, "dx", grad_of(&b, xn), edx, N, TOL, &err_grad);
    }
    gb_free(&b);
    free(w);
    free(y);
    free(ey);
    check(r.ok, r.detail, "all-gather along axis %d of [2,3,2] (%s): the result, the loss and x's gradient", axis,
          use == COL_CG_SAME ? "SAME: this rank's part of dy" : "SPLIT: the reduce-scatter of dy");
}

/* ---- reduce-scatter and split: x [4P, 3] or [3, 4P] (axis 1); W a whole replicated tensor of x's shape, each
 * rank using its part of it ---- */

static void test_reduce_scatter_split(bool split, int axis)
{
    int64_t xs[2] = {3, 3}, ps[2] = {3, 3};
    xs[axis] = 4 * size;
    ps[axis] = 4;
    int64_t nx = 12 * size, np = 12;
    res r = {true, ""};
    float *x = malloc(sizeof(float) * (size_t)nx), wp[12], y[12], loss = 0;
    double ey[12], *edx = malloc(sizeof(double) * (size_t)nx), el = 0, ea = 0;
    fill(x, nx, 9, split ? 0 : rank); /* split: x replicated; reduce-scatter: partial sums */
    for (int64_t i = 0; i < np; i++)
        wp[i] = val(10, 0, part_flat(2, ps, axis, rank, i));
    gb b = gb_new();
    col_node *xn = leaf(&b, "x", true, 2, xs, x), *wn = leaf(&b, "w_part", false, 2, ps, wp);
    col_node *yn = split ? col_comm_graph_split(b.g, world, xn, axis) : col_comm_graph_reduce_scatter(b.g, world, xn, axis);
    col_node *ln = replicated(b.g, dot(b.g, yn, wn));
    col_node *outs[2] = {yn, ln};
    float *bufs[2] = {y, &loss};
    if (gb_run(&b, ln, 2, outs, bufs, &r)) {
        for (int64_t i = 0; i < nx; i++) {
            edx[i] = val(10, 0, i); /* f = sum(W * x) (split) or sum(W * sum_s x_s): d/dx_s = W */
            for (int s = 0; s < (split ? 1 : size); s++)
                term(&el, &ea, edx[i] * val(9, s, i));
        }
        for (int64_t i = 0; i < np; i++) {
            int64_t f = part_flat(2, ps, axis, rank, i);
            ey[i] = 0;
            for (int s = 0; s < (split ? 1 : size); s++)
                ey[i] += val(9, s, f);
        }
        cmp(&r, "y", y, ey, np, split ? 0 : TOL, &err_sum);
        cmp_loss(&r, loss, el, ea);
        cmp(&r, "dx", grad_of(&b, xn), edx, nx, TOL, &err_grad);
    }
    gb_free(&b);
    free(x);
    free(edx);
    check(r.ok, r.detail, "%s along axis %d of [%lld,%lld]: this rank's part%s, the loss, and x's gradient (the "
          "all-gather of dy)", split ? "split" : "reduce-scatter", axis, (long long)xs[0], (long long)xs[1],
          split ? "" : " of the sum");
}

/* ---- all-to-all: x [2P, 3P] ---- */

static void test_all_to_all(int sa, int ca)
{
    int64_t xs[2] = {2 * size, 3 * size}, ys[2] = {2 * size, 3 * size}, part[2] = {2 * size, 3 * size};
    ys[sa] /= size;
    ys[ca] *= size;
    part[sa] /= size;
    int64_t n = 6 * size * size;
    res r = {true, ""};
    float *x = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n),
          *y = malloc(sizeof(float) * (size_t)n), loss = 0;
    double *ey = malloc(sizeof(double) * (size_t)n), *edx = calloc((size_t)n, sizeof(double)), el = 0, ea = 0;
    fill(x, n, 11, rank);
    fill(w, n, 12, rank);
    gb b = gb_new();
    col_node *xn = leaf(&b, "x", true, 2, xs, x), *wn = leaf(&b, "w", false, 2, ys, w);
    col_node *yn = col_comm_graph_all_to_all_grad(b.g, world, xn, sa, ca);
    col_node *ln = replicated(b.g, dot(b.g, yn, wn));
    col_node *outs[2] = {yn, ln};
    float *bufs[2] = {y, &loss};
    if (gb_run(&b, ln, 2, outs, bufs, &r)) {
        /* element j of rank q's result is element xi of rank `from`'s x: dx_from[xi] = W_q[j] */
        for (int q = 0; q < size; q++)
            for (int64_t j = 0; j < n; j++) {
                int64_t idx[2] = {j / ys[1], j % ys[1]};
                int from = (int)(idx[ca] / part[ca]);
                idx[ca] %= part[ca];
                idx[sa] += (int64_t)q * part[sa];
                int64_t xi = idx[0] * xs[1] + idx[1];
                term(&el, &ea, (double)val(12, q, j) * val(11, from, xi));
                if (q == rank)
                    ey[j] = val(11, from, xi);
                if (from == rank)
                    edx[xi] = val(12, q, j);
            }
        cmp(&r, "y", y, ey, n, 0, NULL);
        cmp_loss(&r, loss, el, ea);
        cmp(&r, "dx", grad_of(&b, xn), edx, n, 0, NULL);
    }
    gb_free(&b);
    free(x);
    free(w);
    free(y);
    free(ey);
    free(edx);
    check(r.ok, r.detail, "all-to-all of [%lld,%lld], split axis %d, concat axis %d: the result, the loss, and x's "
          "gradient (the inverse permutation of dy)", (long long)xs[0], (long long)xs[1], sa, ca);
}

/* ---- shift, and back ---- */

static void test_shift(int by)
{
    enum { N = 6 };
    int64_t sh[2] = {2, 3};
    res r = {true, ""};
    float x[N], w[N], v[N], y[N], z[N], loss = 0;
    double ey[N], ex[N], edx[N], el = 0, ea = 0;
    fill(x, N, 13, rank);
    fill(w, N, 14, rank);
    fill(v, N, 15, rank);
    gb b = gb_new();
    col_node *xn = leaf(&b, "x", true, 2, sh, x), *wn = leaf(&b, "w", false, 2, sh, w), *vn = leaf(&b, "v", false, 2, sh, v);
    col_node *yn = col_comm_graph_shift(b.g, world, xn, by), *zn = col_comm_graph_shift(b.g, world, yn, -by);
    /* loss = sum over ranks of sum(W_r y_r) + sum(V_r z_r) */
    col_node *ln = replicated(b.g, col_add(b.g, dot(b.g, yn, wn), dot(b.g, zn, vn)));
    col_node *outs[3] = {yn, zn, ln};
    float *bufs[3] = {y, z, &loss};
    if (gb_run(&b, ln, 3, outs, bufs, &r)) {
        int from = ((rank - by) % size + size) % size, to = ((rank + by) % size + size) % size;
        for (int64_t i = 0; i < N; i++) {
            ey[i] = val(13, from, i);
            ex[i] = x[i];
            edx[i] = (double)val(14, to, i) + v[i];
            for (int s = 0; s < size; s++) {
                term(&el, &ea, (double)val(14, (s + by % size + size) % size, i) * val(13, s, i));
                term(&el, &ea, (double)val(15, s, i) * val(13, s, i));
            }
        }
        cmp(&r, "y", y, ey, N, 0, NULL);
        cmp(&r, "back", z, ex, N, 0, NULL);
        cmp_loss(&r, loss, el, ea);
        cmp(&r, "dx", grad_of(&b, xn), edx, N, TOL, &err_grad);
    }
    gb_free(&b);
    check(r.ok, r.detail, "shift by %d: what rank - %d sent, shifted back by %d it is x again; x's gradient (dy "
          "shifted back) and the loss", by, by, -by);
}

/* ---- bf16: an all-reduce SPLIT of a bf16 x, and its gradient (eighths: exact in bf16 and in every sum here) ---- */

static double eighth(int tag, int r, int64_t i) { return (double)((tag * 5 + r * 3 + i * 7) % 17 - 8) / 8.0; }

static void test_bf16(void)
{
    enum { N = 8 };
    int64_t sh[1] = {N};
    res r = {true, ""};
    uint16_t xb[N], gbuf[N] = {0}, yb[N];
    float w[N], loss = 0;
    col_tensor xt = {.dtype = COL_BF16, .ndim = 1, .shape = {N}, .data = xb},
               gt = {.dtype = COL_BF16, .ndim = 1, .shape = {N}, .data = gbuf},
               yt = {.dtype = COL_BF16, .ndim = 1, .shape = {N}, .data = yb};
    col_set_contiguous_strides(&xt);
    col_set_contiguous_strides(&gt);
    col_set_contiguous_strides(&yt);
    for (int64_t i = 0; i < N; i++) {
        col_set_from_f64(&xt, i, eighth(70, rank, i));
        w[i] = (float)eighth(71, rank, i);
    }
    col_graph *g = col_graph_new();
    col_node *x = col_param(g, "x", COL_BF16, 1, sh), *wn = col_input(g, "w", COL_F32, 1, sh);
    col_bind(x, xb, NULL);
    col_bind_grad(x, gbuf, NULL);
    col_bind(wn, w, NULL);
    col_node *y = col_comm_graph_all_reduce(g, world, x, COL_RED_SUM, COL_CG_SPLIT);
    col_node *l = replicated(g, dot(g, col_cast(g, y, COL_F32), wn));
    col_err err = {0};
    col_plan *p = NULL;
    col_status st = col_graph_status(g) == COL_OK ? COL_OK : col_err_copy(&err, col_graph_error(g));
    if (st == COL_OK) {
        col_mark_output(y);
        col_mark_output(l);
        st = col_graph_backward(g, l, &err);
    }
    if (st == COL_OK)
        st = col_plan_create(g, &p, &err);
    if (st == COL_OK)
        st = col_plan_run(p, &be, &err);
    if (st == COL_OK)
        st = col_plan_download(p, y, yb, sizeof yb, &err);
    if (st == COL_OK)
        st = col_plan_download(p, l, &loss, sizeof loss, &err);
    expect_ok(&r, st, &err, "backward, plan and run");
    double el = 0;
    for (int64_t i = 0; r.ok && i < N; i++) {
        double ey = 0, edx = 0;
        for (int q = 0; q < size; q++) {
            ey += eighth(70, q, i);
            edx += eighth(71, q, i);
        }
        for (int q = 0; q < size; q++)
            el += eighth(71, q, i) * ey;
        if (col_get_as_f64(&yt, i) != ey || col_get_as_f64(&gt, i) != edx)
            fail(&r, "element %lld: y %g (expected %g), dx %g (expected %g)", (long long)i, col_get_as_f64(&yt, i), ey,
                 col_get_as_f64(&gt, i), edx);
    }
    if (r.ok && loss != el)
        fail(&r, "loss %g, expected %g", loss, el);
    col_plan_free(p);
    col_graph_free(g);
    check(r.ok, r.detail, "bf16: all-reduce SPLIT of x, its sum and x's gradient (the all-reduce of dy) exactly");
}

/* ---- Megatron: the column-parallel then row-parallel MLP, and the sequence-parallel block ---- */

enum { T = 8, H = 4, F = 8 }; /* T and F divide by 1, 2 and 4 */

static void cmpf(res *r, const char *what, const float *got, const float *want, int64_t n, double *worst)
{
    double *w = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        w[i] = want[i];
    cmp(r, what, got, w, n, TOL, worst);
    free(w);
}

/* columns c0 .. c0+nc-1 of m [rows, ncols] */
static void columns(const float *m, int64_t rows, int64_t ncols, int64_t c0, int64_t nc, float *out)
{
    for (int64_t i = 0; i < rows; i++)
        memcpy(out + i * nc, m + i * ncols + c0, sizeof(float) * (size_t)nc);
}

/* The model, whole in one graph: y = gelu(h W1) W2, h = x (mlp) or layernorm(x) * gamma (sp); loss = sum(y * R).
 * The parallel one: this rank's columns of W1 and rows of W2; mlp: x replicated, copy, all-reduce SAME; sp: x's rows
 * of this rank, layernorm, all-gather SPLIT, reduce-scatter, the loss summed over the ranks. */
static void test_megatron(bool sp)
{
    const int64_t fl = F / size, t = sp ? T : 3, tl = sp ? T / size : t, r0 = sp ? (int64_t)rank * tl : 0;
    const int tag = sp ? 40 : 30;
    float x[T * H], w1[H * F], w2[F * H], rr[T * H], gam[H];
    fill(x, t * H, tag, 0);
    fill(w1, H * F, tag + 1, 0);
    fill(w2, F * H, tag + 2, 0);
    fill(rr, t * H, tag + 3, 0);
    fill(gam, H, tag + 4, 0);
    res r = {true, ""};
    /* the whole model */
    gb wb = gb_new();
    int64_t xs[2] = {t, H}, w1s[2] = {H, F}, w2s[2] = {F, H}, gs[1] = {H};
    col_node *X = leaf(&wb, "x", true, 2, xs, x), *W1 = leaf(&wb, "w1", true, 2, w1s, w1),
             *W2 = leaf(&wb, "w2", true, 2, w2s, w2), *R = leaf(&wb, "r", false, 2, xs, rr),
             *G = leaf(&wb, "gamma", true, 1, gs, gam);
    col_node *h = sp ? col_layernorm(wb.g, X, G, NULL, 1e-5f) : X;
    col_node *Y = col_matmul(wb.g, col_gelu(wb.g, col_matmul(wb.g, h, W1)), W2), *L = dot(wb.g, Y, R);
    float ey[T * H], el = 0;
    col_node *wouts[2] = {Y, L};
    float *wbufs[2] = {ey, &el};
    gb_run(&wb, L, 2, wouts, wbufs, &r);
    /* this rank's part */
    float w1p[H * F], xp[T * H], y[T * H], loss = 0, eg[F * H];
    columns(w1, H, F, (int64_t)rank * fl, fl, w1p);
    memcpy(xp, x + r0 * H, sizeof(float) * (size_t)(tl * H));
    gb pb = gb_new();
    int64_t xps[2] = {tl, H}, w1ps[2] = {H, fl}, w2ps[2] = {fl, H};
    col_node *Xp = leaf(&pb, "x", true, 2, xps, xp), *W1p = leaf(&pb, "w1", true, 2, w1ps, w1p),
             *W2p = leaf(&pb, "w2", true, 2, w2ps, w2 + rank * fl * H), *Rp = leaf(&pb, "r", false, 2, xps, rr + r0 * H),
             *Gp = leaf(&pb, "gamma", true, 1, gs, gam);
    col_node *in, *Yp, *Lp;
    if (sp) {
        col_node *hp = col_layernorm(pb.g, Xp, col_comm_graph_copy(pb.g, world, Gp), NULL, 1e-5f);
        in = col_comm_graph_all_gather_grad(pb.g, world, hp, 0, COL_CG_SPLIT);
    } else {
        in = col_comm_graph_copy(pb.g, world, Xp);
    }
    col_node *part = col_matmul(pb.g, col_gelu(pb.g, col_matmul(pb.g, in, W1p)), W2p);
    if (sp) {
        Yp = col_comm_graph_reduce_scatter(pb.g, world, part, 0);
        Lp = replicated(pb.g, dot(pb.g, Yp, Rp));
    } else {
        Yp = col_comm_graph_all_reduce(pb.g, world, part, COL_RED_SUM, COL_CG_SAME);
        Lp = dot(pb.g, Yp, Rp);
    }
    col_node *pouts[2] = {Yp, Lp};
    float *pbufs[2] = {y, &loss};
    double *worst = sp ? &err_sp : &err_mlp;
    if (r.ok && gb_run(&pb, Lp, 2, pouts, pbufs, &r)) {
        cmpf(&r, "loss", &loss, &el, 1, worst);
        cmpf(&r, "y", y, ey + r0 * H, tl * H, worst);
        cmpf(&r, "dx", grad_of(&pb, Xp), grad_of(&wb, X) + r0 * H, tl * H, worst);
        columns(grad_of(&wb, W1), H, F, (int64_t)rank * fl, fl, eg);
        cmpf(&r, "dW1", grad_of(&pb, W1p), eg, H * fl, worst);
        cmpf(&r, "dW2", grad_of(&pb, W2p), grad_of(&wb, W2) + rank * fl * H, fl * H, worst);
        if (sp)
            cmpf(&r, "dgamma", grad_of(&pb, Gp), grad_of(&wb, G), H, worst);
    }
    gb_free(&wb);
    gb_free(&pb);
    if (sp)
        check(r.ok, r.detail, "sequence-parallel block (T %d, H %d, F %d): layernorm on this rank's rows, all-gather "
              "SPLIT, the MLP split, reduce-scatter: the loss, y's rows, dx, dgamma, dW1, dW2 are the whole model's "
              "(one graph, one process)", T, H, F);
    else
        check(r.ok, r.detail, "Megatron MLP (T 3, H %d, F %d): copy, column-parallel W1, gelu, row-parallel W2, "
              "all-reduce SAME: the loss, y, dx, dW1, dW2 are the whole model's (one graph, one process)", H, F);
}

/* ---- refusals ---- */

typedef col_node *(*build1)(col_graph *g, col_node *x, int arg);
static col_node *b_gather(col_graph *g, col_node *x, int a) { return col_comm_graph_all_gather_grad(g, world, x, a, COL_CG_SAME); }
static col_node *b_rs(col_graph *g, col_node *x, int a) { return col_comm_graph_reduce_scatter(g, world, x, a); }
static col_node *b_split(col_graph *g, col_node *x, int a) { return col_comm_graph_split(g, world, x, a); }
static col_node *b_a2a(col_graph *g, col_node *x, int a) { return col_comm_graph_all_to_all_grad(g, world, x, a, 1); }
static col_node *b_op(col_graph *g, col_node *x, int a) { return col_comm_graph_all_reduce(g, world, x, (col_red_op)a, COL_CG_SAME); }
static col_node *b_use(col_graph *g, col_node *x, int a) { return col_comm_graph_all_reduce(g, world, x, COL_RED_SUM, (col_cg_use)a); }
static col_node *b_nocomm(col_graph *g, col_node *x, int a) { (void)a; return col_comm_graph_copy(g, NULL, x); }
static col_node *b_gather_use(col_graph *g, col_node *x, int a) { return col_comm_graph_all_gather_grad(g, world, x, 0, (col_cg_use)a); }

/* a builder on x [d0, 3] of dt refuses with code and a message containing want (and returns NULL) */
static void refused(const char *what, build1 b, int arg, int64_t d0, col_dtype dt, col_status code, const char *want)
{
    col_graph *g = col_graph_new();
    int64_t sh[2] = {d0, 3};
    col_node *y = b(g, col_input(g, "x", dt, 2, sh), arg);
    const char *msg = col_graph_error(g)->msg;
    check(!y && col_graph_status(g) == code && strstr(msg, want), msg, "%s is refused (%s): %s", what,
          col_status_name(code), msg);
    col_graph_free(g);
}

static void test_refusals(void)
{
    refused("all-gather along axis 2 of a 2-d x", b_gather, 2, 4, COL_F32, COL_ESHAPE, "axis 2 is not a dimension");
    refused("reduce-scatter along axis -3 of a 2-d x", b_rs, -3, 4, COL_F32, COL_ESHAPE, "axis -3 is not a dimension");
    refused("split along axis 5", b_split, 5, 4, COL_F32, COL_ESHAPE, "axis 5 is not a dimension");
    refused("all-to-all concatenating along axis 4", b_a2a, 4, 4, COL_F32, COL_ESHAPE, "axis 4 is not a dimension");
    if (size > 1) {
        refused("reduce-scatter of 2P+1 rows", b_rs, 0, 2 * size + 1, COL_F32, COL_ESHAPE, "does not split into");
        refused("split of 2P+1 rows", b_split, 0, 2 * size + 1, COL_F32, COL_ESHAPE, "does not split into");
        refused("all-to-all splitting 2P+1 rows", b_a2a, 0, 2 * size + 1, COL_F32, COL_ESHAPE, "equal parts");
    }
    refused("an all-reduce with no such reduction", b_op, COL_RED_COUNT, 4, COL_F32, COL_EINVAL, "no reduction");
    refused("an all-reduce used neither SAME nor SPLIT", b_use, 7, 4, COL_F32, COL_EINVAL, "neither COL_CG_SAME");
    refused("an all-gather used neither SAME nor SPLIT", b_gather_use, -1, 4, COL_F32, COL_EINVAL, "neither");
    refused("the avg of i32 values", b_op, COL_RED_AVG, 4, COL_I32, COL_EDTYPE, "avg of i32");
    refused("a copy without a communicator", b_nocomm, 0, 4, COL_F32, COL_EINVAL, "no communicator");
}

/* ---- this rank alone: identities; finite differences; a device's memory ---- */

/* every builder on a communicator of one rank, between ordinary ops: x [4,4], w [4,4] */
static col_node *chain(col_graph *g, col_node **l, void *user)
{
    (void)user;
    col_node *x = l[0], *w = l[1];
    col_node *h = col_matmul(g, col_comm_graph_copy(g, self, x), w);
    h = col_comm_graph_all_reduce(g, self, col_gelu(g, h), COL_RED_SUM, COL_CG_SAME);
    h = col_comm_graph_all_reduce(g, self, col_tanh(g, h), COL_RED_AVG, COL_CG_SPLIT);
    h = col_comm_graph_all_gather_grad(g, self, h, 0, COL_CG_SAME);
    h = col_comm_graph_reduce_scatter(g, self, col_mul(g, h, h), 1);
    h = col_comm_graph_all_gather_grad(g, self, h, 1, COL_CG_SPLIT);
    h = col_comm_graph_split(g, self, h, 0);
    h = col_comm_graph_shift(g, self, h, 1);
    h = col_comm_graph_all_to_all_grad(g, self, h, 0, 1);
    return col_mul(g, h, x);
}

static void test_gradcheck_alone(void)
{
    float xv[16], wv[16];
    fill(xv, 16, 50, rank);
    fill(wv, 16, 51, rank);
    col_gc_input in[2] = {{.dtype = COL_F32, .ndim = 2, .shape = {4, 4}, .data = xv},
                          {.dtype = COL_F32, .ndim = 2, .shape = {4, 4}, .data = wv}};
    col_gc_opts o = {.h = 1e-3, .rtol = 1e-2, .atol = 1e-3, .max_points = 16, .seed = 7};
    col_gc_result gr = {0};
    col_err err = {0};
    col_status st = col_gradcheck(&be, chain, NULL, 2, in, &o, &gr, &err);
    char d[400];
    snprintf(d, sizeof d, "%.300s; %d of %d off, worst %g vs %g", err.msg, gr.failed, gr.checked, gr.worst_analytic,
             gr.worst_numeric);
    check(st == COL_OK && gr.failed == 0 && gr.checked == 32, d, "a communicator of one rank: every builder in a "
          "chain with ordinary ops, gradients against finite differences (col_gradcheck; max abs error %.2g)",
          gr.max_abs_err);
}

/* a device's memory: a fake device (host memory behind a table) */
static col_status fk_alloc(const col_backend *b, size_t bytes, void **out, col_err *err)
{
    (void)b;
    *out = aligned_alloc(64, bytes ? (bytes + 63) & ~(size_t)63 : 64);
    return *out ? COL_OK : col_err_set(err, COL_ENOMEM, "fake device: out of memory");
}
static void fk_free(const col_backend *b, void *p) { (void)b, free(p); }
static col_status fk_copy(const col_backend *b, void *dst, const void *src, size_t bytes, col_err *err)
{
    (void)b, (void)err;
    memcpy(dst, src, bytes);
    return COL_OK;
}
static col_status fk_sync(const col_backend *b, col_err *err) { (void)b, (void)err; return COL_OK; }

/* on the device: with this rank alone, a chain of every builder is x again; with the world, copy and split (no
 * transfer) give this rank's columns */
static void test_device(bool with_copy)
{
    static const col_backend_mem fk_mem = {fk_alloc, fk_free, fk_copy, fk_copy, fk_sync, fk_copy};
    static const col_backend_mem fk_nocopy = {fk_alloc, fk_free, fk_copy, fk_copy, fk_sync, NULL};
    col_backend dev = be;
    dev.name = "fakedev";
    dev.mem = with_copy ? &fk_mem : &fk_nocopy;
    res r = {true, ""};
    enum { R = 4, C = 8 };
    float x[R * C], a[R * C], b[R * C];
    double ea[R * C], eb[R * C];
    fill(x, R * C, 60, rank);
    col_graph *g = col_graph_new();
    int64_t sh[2] = {R, C};
    col_node *xn = col_input(g, "x", COL_F32, 2, sh), *h = col_comm_graph_all_reduce(g, self, xn, COL_RED_SUM, COL_CG_SAME);
    h = col_comm_graph_all_gather_grad(g, self, col_comm_graph_copy(g, self, h), 1, COL_CG_SPLIT);
    h = col_comm_graph_reduce_scatter(g, self, col_comm_graph_split(g, self, h, 0), 1);
    h = col_comm_graph_all_to_all_grad(g, self, col_comm_graph_shift(g, self, h, 3), 1, 0);
    col_node *s = col_comm_graph_split(g, world, col_comm_graph_copy(g, world, xn), 1);
    col_node *outs[2] = {h, s};
    col_plan *p = NULL;
    col_err err = {0};
    int64_t cl = C / size;
    col_status st = col_graph_status(g) == COL_OK ? col_plan_create_for(g, &dev, outs, 2, &p, &err)
                                                  : col_err_copy(&err, col_graph_error(g));
    if (st == COL_OK)
        st = col_plan_upload(p, xn, x, sizeof x, &err);
    if (st == COL_OK)
        st = col_plan_run(p, &dev, &err);
    if (st == COL_OK)
        st = col_plan_download(p, h, a, sizeof a, &err);
    if (st == COL_OK)
        st = col_plan_download(p, s, b, sizeof(float) * (size_t)(R * cl), &err);
    expect_ok(&r, st, &err, "plan and run on the fake device");
    if (r.ok) {
        for (int64_t i = 0; i < R * C; i++)
            ea[i] = x[i];
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < cl; j++)
                eb[i * cl + j] = x[i * C + rank * cl + j];
        cmp(&r, "one rank's chain", a, ea, R * C, 0, NULL);
        cmp(&r, "copy and split", b, eb, R * cl, 0, NULL);
    }
    col_plan_free(p);
    col_graph_free(g);
    check(r.ok, r.detail, "a plan on a device's memory (%s): every builder on one rank copies in its memory; copy and "
          "split over the world move nothing", with_copy ? "device copies" : "no device copy: through the host");
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_comm_split(world, rank, 0, &self, &err) == COL_OK &&
              col_cpu_backend_init(&be, &err) == COL_OK;
    if (!ok || 4 % size) {
        if (rank == 0)
            printf("Bail out! %s\n", ok ? "the world size must divide 4" : err.msg);
        MPI_Finalize();
        return 1;
    }
    col_comm_set_timeout(world, 60.0, &err);
    static const col_red_op ops[4] = {COL_RED_SUM, COL_RED_AVG, COL_RED_MAX, COL_RED_MIN};
    for (int i = 0; i < 4; i++)
        test_all_reduce(ops[i], COL_CG_SAME);
    test_all_reduce(COL_RED_SUM, COL_CG_SPLIT);
    test_all_reduce(COL_RED_AVG, COL_CG_SPLIT);
    test_copy();
    test_bf16();
    static const int axes[4] = {0, 1, 2, -1};
    for (int i = 0; i < 4; i++) {
        test_all_gather(axes[i], COL_CG_SAME);
        test_all_gather(axes[i], COL_CG_SPLIT);
    }
    for (int axis = 0; axis < 2; axis++) {
        test_reduce_scatter_split(false, axis);
        test_reduce_scatter_split(true, axis);
    }
    test_all_to_all(1, 0);
    test_all_to_all(0, 1);
    test_all_to_all(0, 0);
    test_all_to_all(1, 1);
    static const int bys[5] = {1, -1, 2, 3, -6};
    for (int i = 0; i < 5; i++)
        test_shift(bys[i]);
    test_megatron(false);
    test_megatron(true);
    test_refusals();
    test_gradcheck_alone();
    test_device(true);
    test_device(false);
    double mine[4] = {err_sum, err_grad, err_mlp, err_sp}, all[4];
    MPI_Allreduce(mine, all, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("# largest relative errors on %d ranks: sums %.3g, gradients %.3g, Megatron MLP %.3g, sequence-parallel "
               "block %.3g (copies: exact)\n", size, all[0], all[1], all[2], all[3]);
    col_cpu_backend_free(&be);
    col_comm_free(self);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
