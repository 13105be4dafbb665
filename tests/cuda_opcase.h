/* cuda_opcase.h - the harness of the CUDA op tests (tests/test_cuda_ops.c,
 * tests/test_cuda_image_ops.c): every kernel of a small graph against the CPU
 * backend's result.
 *
 * A case builds a graph (forward and, through autodiff, backward) on random
 * inputs. Every node is marked as an output, so the CPU run leaves each
 * node's value in its own place. Then, for every computing node in schedule
 * order, the CUDA kernel runs alone: all storage is mirrored on the device
 * with the CPU values (leaves and gradient buffers as they were before the
 * run), the node's output is poisoned (NaN bytes), the kernel is called
 * directly (with device scratch of the size the builder asked for), and its
 * result is compared with the CPU's (f32: |d - c| <= tol (|c| + mean |c|);
 * other dtypes bitwise). Include once, after testlib.h and cuda_testutil.h;
 * the test's main sets up cpu, gpu and rng. */
#ifndef COL_TESTS_CUDA_OPCASE_H
#define COL_TESTS_CUDA_OPCASE_H

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "graph.h"
#include "plan.h"
#include "rng.h"
#include "backend_cpu.h"

static col_backend cpu, gpu;
static col_rng rng;

/* ---- a test case: a graph, its host buffers, what the leaves held before the run ---- */

#define MAX_BUFS 64

typedef struct {
    col_graph *g;
    void *bufs[MAX_BUFS];       /* host memory the test owns (leaves, grads, snapshots) */
    int nbufs;
    const char *name;
    double tol;                 /* f32 tolerance for this case */
    col_node *loss;             /* differentiated in finish() when set */
    bool dropout_off;           /* both runs with dropout off (col_plan_set_dropout, col_exec.dropout_off) */
} tcase;

static void *own(tcase *c, size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || c->nbufs == MAX_BUFS) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    c->bufs[c->nbufs++] = p;
    return p;
}

enum { R_NORMAL, R_POSITIVE, R_WIDE };

static void fill_random(col_dtype dt, void *p, int64_t n, int kind, int64_t ids_below)
{
    for (int64_t i = 0; i < n; i++) {
        float v = kind == R_POSITIVE ? 0.5f + 1.5f * col_rng_uniform(&rng)
                  : kind == R_WIDE   ? 200.0f * (col_rng_uniform(&rng) - 0.5f)
                                     : col_rng_normal(&rng);
        switch (dt) {
        case COL_F32: ((float *)p)[i] = v; break;
        case COL_BF16: ((uint16_t *)p)[i] = col_f32_to_bf16(v); break;
        case COL_F16: ((uint16_t *)p)[i] = col_f32_to_f16(v); break;
        case COL_I32: ((int32_t *)p)[i] = ids_below ? (int32_t)col_rng_below(&rng, (uint64_t)ids_below) : (int32_t)v; break;
        default: ((int64_t *)p)[i] = ids_below ? (int64_t)col_rng_below(&rng, (uint64_t)ids_below) : (int64_t)v; break;
        }
    }
}

/* an input leaf with random data; grad: it gets a gradient (n->grad) */
static col_node *input(tcase *c, const char *name, col_dtype dt, int nd, const int64_t *shape, int kind, int64_t ids_below,
                       bool grad)
{
    col_node *n = col_input(c->g, name, dt, nd, shape);
    if (!n)
        return NULL;
    if (grad)
        n->flags |= COL_NODE_NEEDS_GRAD;
    int64_t num = col_numel(&n->t);
    void *p = own(c, (size_t)num * col_dtype_size(dt));
    fill_random(dt, p, num, kind, ids_below);
    col_bind(n, p, NULL);
    return n;
}

/* a parameter (f32) with random data and a random gradient buffer */
static col_node *param(tcase *c, const char *name, int nd, const int64_t *shape, int kind)
{
    col_node *n = col_param(c->g, name, COL_F32, nd, shape);
    if (!n)
        return NULL;
    int64_t num = col_numel(&n->t);
    float *p = own(c, sizeof(float) * (size_t)num), *gr = own(c, sizeof(float) * (size_t)num);
    fill_random(COL_F32, p, num, kind, 0);
    fill_random(COL_F32, gr, num, R_NORMAL, 0);
    col_bind(n, p, NULL);
    col_bind_grad(n, gr, NULL);
    return n;
}

/* adds sum(y * r), r random, to the case's loss (one backward per case, in finish) */
static void backward_of(tcase *c, col_node *y)
{
    if (!y)
        return;
    col_node *r = input(c, "r", COL_F32, y->t.ndim, y->t.shape, R_NORMAL, 0, false);
    col_node *l = col_sum(c->g, col_mul(c->g, y, r), (1u << y->t.ndim) - 1, 0);
    c->loss = c->loss ? col_add(c->g, c->loss, l) : l;
}

/* ---- running one case ---- */

static size_t node_bytes(const col_node *n)
{
    size_t b = (size_t)col_numel(&n->t) * col_dtype_size(n->t.dtype);
    if (n->extra_bytes)
        b = col_extra_offset(n) + n->extra_bytes;
    return b;
}

static bool owns_storage(const col_node *n)
{
    return !(n->flags & COL_NODE_VIEW) && n->op != COL_OP_KV_WRITE && n->op != COL_OP_ACCUMULATE;
}

/* |d - c| <= tol (|c| + mean|c|); NaN where the CPU has NaN; returns the worst ratio (or INFINITY) */
static double compare_f32(const float *d, const float *h, int64_t n)
{
    double mean = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(h[i]))
            mean += fabs(h[i]);
    mean = n ? mean / (double)n : 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(h[i]) || isnan(d[i])) {
            if (isnan(h[i]) != isnan(d[i]))
                return INFINITY;
            continue;
        }
        if (isinf(h[i]) || isinf(d[i])) {
            if (h[i] != d[i])
                return INFINITY;
            continue;
        }
        double e = fabs((double)d[i] - (double)h[i]) / (fabs(h[i]) + mean + 1e-30);
        worst = e > worst ? e : worst;
    }
    return worst;
}

static void run_case(tcase *c)
{
    col_graph *g = c->g;
    col_err err = {0};
    if (col_graph_status(g) != COL_OK) {
        TL_OK(false, "%s: build: %s", c->name, col_graph_error(g)->msg);
        return;
    }
    int nn = col_graph_count(g);
    for (int i = 0; i < nn; i++)
        col_mark_output(col_graph_node(g, i));
    /* what leaves and gradient buffers hold before the run */
    void **before = own(c, sizeof(void *) * (size_t)nn);
    for (int i = 0; i < nn; i++) {
        col_node *n = col_graph_node(g, i);
        void *src = n->op == COL_OP_LEAF ? n->bound : n->op == COL_OP_ACCUMULATE ? n->src[1]->grad_data : NULL;
        if (src) {
            size_t b = (size_t)col_numel(&n->t) * col_dtype_size(n->t.dtype);
            before[i] = own(c, b);
            memcpy(before[i], src, b);
        }
    }
    col_plan *p = NULL;
    if (col_plan_create(g, &p, &err) == COL_OK)
        col_plan_set_dropout(p, !c->dropout_off);
    if (!p || col_plan_run(p, &cpu, &err) != COL_OK) {
        TL_OK(false, "%s: cpu run: %s", c->name, err.msg);
        col_plan_free(p);
        return;
    }
    /* device mirrors of every storage owner and gradient buffer */
    void **host = own(c, sizeof(void *) * (size_t)nn), **dev = own(c, sizeof(void *) * (size_t)nn);
    size_t *bytes = own(c, sizeof(size_t) * (size_t)nn);
    int len = col_plan_length(p);
    bool ok = true;
    for (int k = 0; k < len && ok; k++) {
        col_node *n = col_plan_node(p, k);
        if (!owns_storage(n) && n->op != COL_OP_ACCUMULATE)
            continue;
        bytes[n->id] = node_bytes(n);
        host[n->id] = n->t.data;
        ok = col_cuda_alloc(&gpu, bytes[n->id], &dev[n->id], &err) == COL_OK &&
             col_cuda_to_device(&gpu, dev[n->id], before[n->id] ? before[n->id] : host[n->id], bytes[n->id], &err) == COL_OK;
    }
    if (!ok)
        TL_OK(false, "%s: device mirror: %s", c->name, err.msg);
    /* device addresses for every node */
    for (int k = 0; k < len && ok; k++) {
        col_node *n = col_plan_node(p, k);
        if (n->flags & COL_NODE_VIEW)
            n->t.data = (char *)dev[n->view_base->id] + n->view_offset * (int64_t)col_dtype_size(n->t.dtype);
        else if (n->op == COL_OP_KV_WRITE)
            n->t.data = dev[n->src[0]->id];
        else
            n->t.data = dev[n->id];
    }
    /* device scratch: the largest any node asked for (the plan's, as a device plan would have it) */
    size_t scratch_bytes = 0;
    for (int k = 0; k < len; k++)
        if (col_plan_node(p, k)->scratch_bytes > scratch_bytes)
            scratch_bytes = col_plan_node(p, k)->scratch_bytes;
    void *scratch = NULL;
    if (ok && scratch_bytes && col_cuda_alloc(&gpu, scratch_bytes, &scratch, &err) != COL_OK) {
        TL_OK(false, "%s: device scratch: %s", c->name, err.msg);
        ok = false;
    }
    col_exec ex = {.scratch = scratch, .scratch_bytes = scratch_bytes, .be = &gpu, .dropout_off = c->dropout_off};
    for (int k = 0; k < len && ok; k++) {
        col_node *n = col_plan_node(p, k);
        if (n->op == COL_OP_LEAF || n->op == COL_OP_VIEW)
            continue;
        int id = n->op == COL_OP_KV_WRITE ? n->src[0]->id : n->id;
        char sh[96];
        col_shape_str(&n->t, sh, sizeof sh);
        if (!gpu.kernel[n->op]) {
            TL_OK(false, "%s: no CUDA kernel for %s", c->name, col_op_name(n->op));
            continue;
        }
        /* in-place ops start from the pre-run contents; the others from NaN bytes */
        col_status st = n->op == COL_OP_KV_WRITE || n->op == COL_OP_ACCUMULATE
                            ? col_cuda_to_device(&gpu, dev[id], before[id], bytes[id], &err)
                            : col_cuda_memset(&gpu, dev[id], 0xff, bytes[id], &err);
        if (st == COL_OK)
            st = gpu.kernel[n->op](n, &ex, &err);
        if (st == COL_OK)
            st = col_cuda_sync(&gpu, &err);
        void *back = malloc(bytes[id] ? bytes[id] : 1);
        if (st == COL_OK)
            st = col_cuda_to_host(&gpu, back, dev[id], bytes[id], &err);
        if (st != COL_OK) {
            TL_OK(false, "%s: %s %s: %s", c->name, col_op_name(n->op), sh, err.msg);
            free(back);
            ok = st != COL_EINTERNAL; /* a device fault poisons the context */
            continue;
        }
        col_dtype dt = n->op == COL_OP_KV_WRITE ? n->src[0]->t.dtype : n->t.dtype;
        int64_t num = (int64_t)(bytes[id] / col_dtype_size(dt));
        if (n->extra_bytes) /* cross_entropy: loss, lse [N] f32, count i64; attention, token_logprob: lse f32 */
            num = col_numel(&n->t);
        if (dt == COL_F32) {
            double w = compare_f32(back, host[id], num);
            if (n->op == COL_OP_CROSS_ENTROPY) {
                size_t off = col_extra_offset(n);
                int64_t N = n->src[0]->t.shape[0];
                double w2 = compare_f32((float *)((char *)back + off), (float *)((char *)host[id] + off), N);
                w = w2 > w ? w2 : w;
                size_t co = off + (size_t)n->p.i[1];
                if (memcmp((char *)back + co, (char *)host[id] + co, sizeof(int64_t)) != 0)
                    w = INFINITY;
            }
            if (n->op == COL_OP_EMBEDDING_BWD && memcmp(back, host[id], (size_t)num * sizeof(float)) != 0)
                w = INFINITY; /* each element summed in row order, as on the CPU: the same bits */
            /* and the logsumexp saved for the backward: attention [B,Hq,T], token_logprob [N] */
            if (n->op == COL_OP_ATTENTION || n->op == COL_OP_TOKEN_LOGPROB) {
                size_t off = col_extra_offset(n);
                double w2 = compare_f32((float *)((char *)back + off), (float *)((char *)host[id] + off),
                                        (int64_t)(n->extra_bytes / sizeof(float)));
                w = w2 > w ? w2 : w;
            }
            TL_OK(w <= c->tol, "%s: %s %s: worst error %.2e of tolerance %.0e", c->name, col_op_name(n->op), sh, w, c->tol);
        } else {
            TL_OK(memcmp(back, host[id], (size_t)num * col_dtype_size(dt)) == 0, "%s: %s %s %s: bitwise equal", c->name,
                  col_op_name(n->op), col_dtype_name(dt), sh);
        }
        free(back);
        /* later nodes read the CPU's value */
        st = col_cuda_to_device(&gpu, dev[id], host[id], bytes[id], &err);
        if (st != COL_OK) {
            TL_OK(false, "%s: restore: %s", c->name, err.msg);
            ok = false;
        }
    }
    for (int i = 0; i < nn; i++)
        col_cuda_free(&gpu, dev[i]);
    col_cuda_free(&gpu, scratch);
    col_plan_free(p);
}

static void finish(tcase *c)
{
    col_err err = {0};
    if (c->loss && col_graph_status(c->g) == COL_OK && col_graph_backward(c->g, c->loss, &err) != COL_OK)
        col_graph_fail(c->g, err.code, "%s", err.msg);
    run_case(c);
    col_graph_free(c->g);
    for (int i = 0; i < c->nbufs; i++)
        free(c->bufs[i]);
}

static tcase begin(const char *name, double tol)
{
    tcase c;
    memset(&c, 0, sizeof c);
    c.g = col_graph_new();
    c.name = name;
    c.tol = tol;
    if (!c.g) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    return c;
}

#define TOL 1e-5

#endif
