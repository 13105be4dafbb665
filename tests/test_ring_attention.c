/* test_ring_attention.c - ring self-attention (comm_graph.h, col_comm_graph_ring_attention) under mpirun with 1, 2
 * and 4 processes (tests/test_ring_attention.sh).
 *
 * Every rank makes the whole sequence's q, k, v and a weight R from their indices, and computes the reference in a
 * one-process graph: the engine's col_attention over all T = P*Tl positions, loss = sum(out * R), and its gradients.
 * The ring graph on each rank holds its block of positions [r*Tl, (r+1)*Tl): its out rows and its blocks of dq, dk
 * and dv (the gradients of the sum of all ranks' losses) must equal the reference's within 1e-5 of the largest
 * value (causal and not, grouped queries and not, a given scale and the default). Checked too: the communicator's
 * counters (forward P-1 passes of this rank's K|V block, backward 2(P-1) passes of K|V and of dK|dV, bytes equal to
 * that formula); the plan's arena and scratch on P ranks equal those of the same block on a 1-rank communicator (the
 * memory grows with Tl, not with T); the ring inside a checkpointed segment; finite differences on a 1-rank
 * communicator; bad shapes, dtypes and a device plan refused with messages. */
#include <math.h>
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

#define check(ok, detail, ...) tl_mpi_check((ok), (detail), __VA_ARGS__)

typedef struct {
    int64_t B, H, Hkv, Tl, D;
    int causal;
    float scale;
} ra_case;

/* element i of tensor `which` (0 q, 1 k, 2 v, 3 R) of the whole sequence */
static float value(int which, int64_t i) { return 0.9f * sinf(0.37f * (float)i + 1.7f * (float)which + 0.3f); }

static float *filled(int which, int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = value(which, i);
    return x;
}

/* rows [t0, t0+tl) along dim 2 of x [B,H,T,D] into y [B,H,tl,D] (or back, when back) */
static void rows(float *x, float *y, int64_t BH, int64_t T, int64_t t0, int64_t tl, int64_t D, bool back)
{
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t t = 0; t < tl; t++) {
            float *a = x + (bh * T + t0 + t) * D, *b = y + (bh * tl + t) * D;
            memcpy(back ? a : b, back ? b : a, sizeof(float) * (size_t)D);
        }
}

static col_node *loss_of(col_graph *g, col_node *out, col_node *R)
{
    return col_sum(g, col_mul(g, out, R), 0xFu, 0);
}

/* one attention on the given shapes: params q, k, v bound to x[0..2] with gradients into gx[0..2], R bound to x[3];
 * ring over c, or the engine's col_attention when c is NULL. *plan made and run once; out downloaded into yo */
typedef struct {
    col_graph *g;
    col_plan *p;
    col_node *out;
} built;

static col_status build_run(const ra_case *k, col_comm *c, int64_t T, float **x, float **gx, float *yo, bool backward,
                            built *b, col_err *err)
{
    int64_t qs[4] = {k->B, k->H, T, k->D}, ks[4] = {k->B, k->Hkv, T, k->D};
    b->g = col_graph_new();
    b->p = NULL;
    col_node *q = col_param(b->g, "q", COL_F32, 4, qs), *kk = col_param(b->g, "k", COL_F32, 4, ks),
             *v = col_param(b->g, "v", COL_F32, 4, ks), *R = col_input(b->g, "R", COL_F32, 4, qs);
    col_node *leaf[3] = {q, kk, v};
    for (int i = 0; i < 3; i++) {
        col_bind(leaf[i], x[i], err);
        if (gx)
            col_bind_grad(leaf[i], gx[i], err);
    }
    col_bind(R, x[3], err);
    b->out = c ? col_comm_graph_ring_attention(b->g, c, q, kk, v, k->causal, k->scale)
               : col_attention(b->g, q, kk, v, k->causal, k->scale);
    col_mark_output(b->out);
    col_node *loss = loss_of(b->g, b->out, R);
    col_status st = col_graph_status(b->g);
    if (st != COL_OK)
        return col_err_copy(err, col_graph_error(b->g));
    if (backward && (st = col_graph_backward(b->g, loss, err)) != COL_OK)
        return st;
    if ((st = col_plan_create(b->g, &b->p, err)) != COL_OK || (st = col_plan_run(b->p, &be, err)) != COL_OK)
        return st;
    return col_plan_download(b->p, b->out, yo, sizeof(float) * (size_t)col_numel(&b->out->t), err);
}

static void built_free(built *b)
{
    col_plan_free(b->p);
    col_graph_free(b->g);
}

/* max |a - b| over n into *err, and max |b| into *mag (both as they were where larger) */
static void diff(const float *a, const float *b, int64_t n, double *err, double *mag)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        *err = d > *err || isnan(d) ? d : *err;
        *mag = fabs((double)b[i]) > *mag ? fabs((double)b[i]) : *mag;
    }
}

static double worst_over_ranks(double x)
{
    double y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

static void run_case(const ra_case *k)
{
    int64_t P = size, T = P * k->Tl, BH = k->B * k->H, BHkv = k->B * k->Hkv;
    int64_t nq = BH * T * k->D, nk = BHkv * T * k->D, nql = BH * k->Tl * k->D, nkl = BHkv * k->Tl * k->D;
    char name[160];
    snprintf(name, sizeof name, "B=%lld H=%lld Hkv=%lld Tl=%lld D=%lld %s scale %g", (long long)k->B,
             (long long)k->H, (long long)k->Hkv, (long long)k->Tl, (long long)k->D,
             k->causal ? "causal" : "not causal", (double)k->scale);
    res r = {.ok = true};
    col_err err = {0};
    /* the whole sequence, in one process */
    float *x[4] = {filled(0, nq), filled(1, nk), filled(2, nk), filled(3, nq)};
    float *gx[3] = {calloc((size_t)nq, 4), calloc((size_t)nk, 4), calloc((size_t)nk, 4)};
    float *yref = malloc(sizeof(float) * (size_t)nq);
    built ref = {0};
    expect_ok(&r, build_run(k, NULL, T, x, gx, yref, true, &ref, &err), &err, "the reference");
    /* this rank's block */
    int64_t t0 = rank * k->Tl, nl[4] = {nql, nkl, nkl, nql}, bhs[4] = {BH, BHkv, BHkv, BH};
    float *xl[4], *gl[3], *gexp[3], *yl = malloc(sizeof(float) * (size_t)nql), *yexp = malloc(sizeof(float) * (size_t)nql);
    for (int i = 0; i < 4; i++) {
        xl[i] = malloc(sizeof(float) * (size_t)nl[i]);
        rows(x[i], xl[i], bhs[i], T, t0, k->Tl, k->D, false);
        if (i < 3) {
            gl[i] = calloc((size_t)nl[i], 4);
            gexp[i] = malloc(sizeof(float) * (size_t)nl[i]);
            rows(gx[i], gexp[i], bhs[i], T, t0, k->Tl, k->D, false);
        }
    }
    rows(yref, yexp, BH, T, t0, k->Tl, k->D, false);
    /* the forward alone, then forward and backward, counted */
    col_comm_stats s0, s1, s2;
    built fw = {0}, ring = {0};
    col_comm_get_stats(world, &s0);
    expect_ok(&r, build_run(k, world, k->Tl, xl, NULL, yl, false, &fw, &err), &err, "the ring's forward");
    col_comm_get_stats(world, &s1);
    expect_ok(&r, build_run(k, world, k->Tl, xl, gl, yl, true, &ring, &err), &err, "the ring");
    col_comm_get_stats(world, &s2);
    /* errors relative to the largest value of the whole tensor (a block may hold only zeros: rank 0's dq when it
     * holds one position and the mask is causal) */
    double eo = 0, mo = 0, eg[3] = {0, 0, 0}, mg[3] = {0, 0, 0}, unused = 0;
    int64_t n0[3] = {nq, nk, nk};
    diff(yl, yexp, nql, &eo, &unused);
    diff(yref, yref, nq, &unused, &mo);
    for (int i = 0; i < 3; i++) {
        diff(gl[i], gexp[i], nl[i], &eg[i], &unused);
        diff(gx[i], gx[i], n0[i], &unused, &mg[i]);
    }
    double ro = worst_over_ranks(eo / (mo > 0 ? mo : 1)), rg[3];
    for (int i = 0; i < 3; i++)
        rg[i] = worst_over_ranks(eg[i] / (mg[i] > 0 ? mg[i] : 1));
    bool nonzero = mo > 0 && mg[0] > 0 && mg[1] > 0 && mg[2] > 0;
    check(r.ok && ro <= 1e-5 && nonzero, r.detail, "%s: out rows equal whole-sequence col_attention's (max error %.2e "
          "of the largest value)", name, ro);
    check(r.ok && rg[0] <= 1e-5 && rg[1] <= 1e-5 && rg[2] <= 1e-5, r.detail,
          "%s: dq, dk, dv blocks equal the reference's (max errors %.2e, %.2e, %.2e of the largest value)", name, rg[0],
          rg[1], rg[2]);
    /* P-1 passes forward of K|V; backward P-1 of K|V and P-1 of dK|dV: each a send and a receive of 2*nkl floats */
    uint64_t pass = (uint64_t)(2 * nkl) * sizeof(float), want_f = (uint64_t)(P - 1) * pass;
    uint64_t fs = s1.bytes_sent - s0.bytes_sent, fr = s1.bytes_recv - s0.bytes_recv, fo = s1.ops - s0.ops;
    uint64_t bs = s2.bytes_sent - s1.bytes_sent - fs, br = s2.bytes_recv - s1.bytes_recv - fr,
             bo = s2.ops - s1.ops - fo;
    char d[700];
    snprintf(d, sizeof d, "forward sent %llu recv %llu in %llu ops; backward sent %llu recv %llu in %llu ops; a pass "
             "is %llu bytes", (unsigned long long)fs, (unsigned long long)fr, (unsigned long long)fo,
             (unsigned long long)bs, (unsigned long long)br, (unsigned long long)bo, (unsigned long long)pass);
    check(fs == want_f && fr == want_f && fo == (uint64_t)(2 * (P - 1)) && bs == 2 * want_f && br == 2 * want_f &&
              bo == (uint64_t)(4 * (P - 1)), d,
          "%s: the forward passes K|V P-1 times, the backward K|V and dK|dV 2(P-1) times in all (%llu bytes a pass)",
          name, (unsigned long long)pass);
    /* the same block on a 1-rank communicator: the same arena and scratch (what the plan holds grows with Tl) */
    built one = {0};
    res r1 = {.ok = true};
    for (int i = 0; i < 3; i++)
        memset(gl[i], 0, sizeof(float) * (size_t)nl[i]);
    expect_ok(&r1, build_run(k, self, k->Tl, xl, gl, yl, true, &one, &err), &err, "the 1-rank ring");
    size_t a = ring.p ? col_plan_arena_bytes(ring.p) : 0, a1 = one.p ? col_plan_arena_bytes(one.p) : 1;
    size_t sc = ring.p ? col_plan_scratch_bytes(ring.p) : 0, sc1 = one.p ? col_plan_scratch_bytes(one.p) : 1;
    size_t aref = ref.p ? col_plan_arena_bytes(ref.p) : 0;
    snprintf(d, sizeof d, "arena %zu and scratch %zu on %d ranks, %zu and %zu on one (%s)", a, sc, size, a1, sc1,
             r1.detail);
    check(r1.ok && a == a1 && sc == sc1, d, "%s: the plan's arena (%zu bytes) and scratch (%zu) on %d ranks are those "
          "of the 1-rank ring over the same block (the whole sequence's plan: %zu)", name, a, sc, size, aref);
    built_free(&one);
    built_free(&fw);
    built_free(&ring);
    built_free(&ref);
    for (int i = 0; i < 4; i++) {
        free(x[i]);
        free(xl[i]);
        if (i < 3)
            free(gx[i]), free(gl[i]), free(gexp[i]);
    }
    free(yref), free(yl), free(yexp);
}

/* the ring inside a checkpointed segment (its forward called again in the backward pass): the gradients of the
 * plain ring, bit for bit */
static void test_checkpoint(void)
{
    ra_case k = {1, 4, 2, 3, 4, 1, 0.0f};
    int64_t qs[4] = {k.B, k.H, k.Tl, k.D}, ks[4] = {k.B, k.Hkv, k.Tl, k.D};
    int64_t nl[3] = {k.B * k.H * k.Tl * k.D, k.B * k.Hkv * k.Tl * k.D, k.B * k.Hkv * k.Tl * k.D};
    float *x[4], *gr[2][3];
    for (int i = 0; i < 4; i++) { /* another block on each rank */
        int64_t n = nl[i == 3 ? 0 : i];
        x[i] = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++)
            x[i][j] = value(i, j + 1000 * rank);
    }
    res r = {.ok = true};
    col_err err = {0};
    uint64_t bytes[2] = {0, 0};
    for (int ck = 0; ck < 2; ck++) {
        col_graph *g = col_graph_new();
        col_node *q = col_param(g, "q", COL_F32, 4, qs), *kk = col_param(g, "k", COL_F32, 4, ks),
                 *v = col_param(g, "v", COL_F32, 4, ks), *R = col_input(g, "R", COL_F32, 4, qs);
        col_node *leaf[3] = {q, kk, v};
        for (int i = 0; i < 3; i++) {
            gr[ck][i] = calloc((size_t)nl[i], sizeof(float));
            col_bind(leaf[i], x[i], &err);
            col_bind_grad(leaf[i], gr[ck][i], &err);
        }
        col_bind(R, x[3], &err);
        if (ck)
            col_checkpoint_begin(g);
        col_node *y = col_comm_graph_ring_attention(g, world, col_scale(g, q, 0.5f, 0.0f), kk, v, k.causal, 0.0f);
        y = col_scale(g, y, 2.0f, 0.0f);
        if (ck)
            col_checkpoint_end(g);
        col_node *loss = loss_of(g, y, R);
        col_plan *p = NULL;
        col_comm_stats s0, s1;
        col_comm_get_stats(world, &s0);
        col_status st = col_graph_status(g) == COL_OK ? col_graph_backward(g, loss, &err)
                                                      : col_err_copy(&err, col_graph_error(g));
        if (st == COL_OK && (st = col_plan_create(g, &p, &err)) == COL_OK)
            st = col_plan_run(p, &be, &err);
        col_comm_get_stats(world, &s1);
        bytes[ck] = s1.bytes_sent - s0.bytes_sent;
        expect_ok(&r, st, &err, ck ? "checkpointed" : "plain");
        col_plan_free(p);
        col_graph_free(g);
    }
    bool same = true;
    for (int i = 0; i < 3; i++) {
        same = same && memcmp(gr[0][i], gr[1][i], sizeof(float) * (size_t)nl[i]) == 0;
        free(gr[0][i]), free(gr[1][i]);
    }
    for (int i = 0; i < 4; i++)
        free(x[i]);
    uint64_t pass = (uint64_t)(2 * nl[1]) * sizeof(float);
    check(r.ok && same && bytes[0] == 3 * (uint64_t)(size - 1) * pass && bytes[1] == 4 * (uint64_t)(size - 1) * pass,
          r.detail, "the ring inside a checkpointed segment gives the plain ring's gradients bit for bit, its forward "
          "run again (bytes sent %llu, plain %llu: 4 and 3 times P-1 passes)", (unsigned long long)bytes[1],
          (unsigned long long)bytes[0]);
}

/* finite differences through the ring on a 1-rank communicator */
static col_node *gc_build(col_graph *g, col_node **leaves, void *user)
{
    const ra_case *k = user;
    return col_comm_graph_ring_attention(g, self, leaves[0], leaves[1], leaves[2], k->causal, k->scale);
}

static void test_gradcheck(void)
{
    ra_case k = {1, 4, 2, 5, 3, 1, 0.0f};
    int64_t nq = k.B * k.H * k.Tl * k.D, nk = k.B * k.Hkv * k.Tl * k.D;
    float *q = filled(0, nq), *kk = filled(1, nk), *v = filled(2, nk);
    col_gc_input in[3] = {{.dtype = COL_F32, .ndim = 4, .shape = {k.B, k.H, k.Tl, k.D}, .data = q},
                          {.dtype = COL_F32, .ndim = 4, .shape = {k.B, k.Hkv, k.Tl, k.D}, .data = kk},
                          {.dtype = COL_F32, .ndim = 4, .shape = {k.B, k.Hkv, k.Tl, k.D}, .data = v}};
    col_gc_opts o = {.h = 1e-3, .rtol = 1e-2, .atol = 1e-3, .max_points = 60};
    col_gc_result gr = {0};
    col_err err = {0};
    col_status st = col_gradcheck(&be, gc_build, &k, 3, in, &o, &gr, &err);
    char d[700];
    snprintf(d, sizeof d, "%s; %d of %d off, worst %g vs %g", err.msg, gr.failed, gr.checked, gr.worst_analytic,
             gr.worst_numeric);
    check(st == COL_OK && gr.failed == 0 && gr.checked >= 3 * 30, d,
          "the ring's gradients on a 1-rank communicator (causal, grouped queries) equal finite differences (%d "
          "elements, max error %.2e)", gr.checked, gr.max_abs_err);
    free(q), free(kk), free(v);
}

/* ---- refusals ---- */

typedef struct {
    const char *what;
    col_dtype qdt;
    int64_t q[4], k[4], v[4];
    int qnd;
    float scale;
    bool no_comm;
    col_status want;
    const char *say;
} bad_case;

static void test_refused(void)
{
    static const bad_case bad[] = {
        {"a bf16 q", COL_BF16, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, 4, 0, false, COL_EDTYPE, "needs f32"},
        {"a 3-d q", COL_F32, {2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, 3, 0, false, COL_ESHAPE, "[B,H,Tl,D]"},
        {"k and v of other shapes", COL_F32, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 1, 3, 4}, 4, 0, false, COL_ESHAPE,
         "differ in shape"},
        {"k of another block length", COL_F32, {1, 2, 3, 4}, {1, 2, 2, 4}, {1, 2, 2, 4}, 4, 0, false, COL_ESHAPE,
         "block length"},
        {"k of another head_dim", COL_F32, {1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 3, 5}, 4, 0, false, COL_ESHAPE,
         "head_dim"},
        {"3 query heads over 2 kv heads", COL_F32, {1, 3, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, 4, 0, false, COL_ESHAPE,
         "not a multiple"},
        {"an empty q", COL_F32, {1, 2, 0, 4}, {1, 2, 0, 4}, {1, 2, 0, 4}, 4, 0, false, COL_ESHAPE, "empty"},
        {"a negative scale", COL_F32, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, 4, -1.0f, false, COL_EINVAL, "scale"},
        {"no communicator", COL_F32, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, 4, 0, true, COL_EINVAL,
         "no communicator"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const bad_case *b = &bad[i];
        col_graph *g = col_graph_new();
        col_node *q = col_input(g, "q", b->qdt, b->qnd, b->q), *k = col_input(g, "k", COL_F32, 4, b->k),
                 *v = col_input(g, "v", COL_F32, 4, b->v);
        col_node *y = col_comm_graph_ring_attention(g, b->no_comm ? NULL : world, q, k, v, 1, b->scale);
        const col_err *e = col_graph_error(g);
        check(!y && col_graph_status(g) == b->want && strstr(e->msg, b->say), e->msg,
              "%s is refused when the graph is built (%s): %s", b->what, col_status_name(b->want), e->msg);
        col_graph_free(g);
    }
}

/* a plan whose data are a device's memory (a fake device: host memory behind a table) */
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

static void test_device_refused(void)
{
    static const col_backend_mem fk_mem = {fk_alloc, fk_free, fk_copy, fk_copy, fk_sync, fk_copy};
    col_backend dev = be;
    dev.name = "fakedev";
    dev.mem = &fk_mem;
    col_graph *g = col_graph_new();
    int64_t sh[4] = {1, 2, 3, 4};
    col_node *q = col_input(g, "q", COL_F32, 4, sh), *k = col_input(g, "k", COL_F32, 4, sh),
             *v = col_input(g, "v", COL_F32, 4, sh);
    col_node *y = col_comm_graph_ring_attention(g, world, q, k, v, 1, 0);
    col_mark_output(y);
    col_plan *p = NULL;
    col_err err = {0};
    col_status st = col_graph_status(g) == COL_OK ? col_plan_create_on(g, &dev, &p, &err) : COL_EINTERNAL;
    if (st == COL_OK)
        st = col_plan_run(p, &dev, &err);
    check(st == COL_EUNSUPPORTED && strstr(err.msg, "ring attention runs on host plans over MPI"), err.msg,
          "a device plan is refused when it runs: %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_cpu_backend_init(&be, &err) == COL_OK &&
              col_comm_split(world, rank, 0, &self, &err) == COL_OK;
    if (!ok) {
        if (rank == 0)
            printf("Bail out! %s\n", err.msg);
        MPI_Finalize();
        return 1;
    }
    col_comm_set_timeout(world, 60.0, &err);
    static const ra_case cases[] = {
        {2, 2, 2, 3, 4, 0, 0.0f}, /* plain */
        {2, 2, 2, 3, 4, 1, 0.0f}, /* causal */
        {1, 4, 2, 4, 5, 1, 0.0f}, /* grouped queries, causal */
        {2, 6, 2, 2, 3, 0, 0.7f}, /* grouped queries, a given scale */
        {1, 3, 1, 2, 8, 1, 0.0f}, /* multi-query */
        {1, 2, 1, 1, 4, 1, 0.0f}, /* one position a rank (on one rank the gradients of q and k are 0: not compared) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (size > 1 || cases[i].Tl > 1)
            run_case(&cases[i]);
    test_checkpoint();
    test_gradcheck();
    test_refused();
    test_device_refused();
    col_comm_free(self);
    col_comm_free(world);
    col_cpu_backend_free(&be);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
