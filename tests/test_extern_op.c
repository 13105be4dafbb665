/* test_extern_op.c - the EXTERN op (ops.h col_extern): a node computed by a
 * function of the caller's, which the plan runner calls in schedule order.
 *
 * A graph mixes ordinary ops and extern nodes (one reversing its source, one
 * combining two): the results against values computed here (small integers,
 * so exact), over two runs with different inputs; a non-contiguous source
 * reaches the function contiguous; the function gets the backend, the plan's
 * addresses and its user pointer; the hooked runner (memtier's) calls its hook
 * for the extern node too. The same graph on a device plan: a fake device's
 * memory table on the CPU (tests/fake_device.h), and, built with
 * EXTERN_TEST_CUDA, the CUDA backend (test_extern_op_emu: its emulator;
 * test_extern_op_cuda: a GPU), where the function sees device memory and moves
 * it with the backend's table. A failing function stops the run with its status
 * and message (and nothing after it runs); one without a message gets one
 * naming the node; the plan runs again once the function succeeds. The arena
 * of a graph with an extern node is laid out exactly as the same graph's with
 * an ordinary op in its place. Autodiff through an extern node fails with a
 * message; a checkpointed extern node is recomputed by calling its function
 * again. */
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "plan.h"
#include "testlib.h"
#ifdef EXTERN_TEST_CUDA
#include "cuda_testutil.h"
#else
#include "fake_device.h"
#endif

static col_backend cpu;

/* ---- the functions ---- */

typedef struct {
    int calls;
    const col_backend *be;      /* the backend of the last call */
    int nsrc;
    bool src_contiguous, out_contiguous;
    const void *src0, *out;     /* the addresses of the last call */
    col_status fail;            /* returned instead of computing (COL_OK: compute) */
    bool fail_quietly;          /* ... without a message */
} ext_state;

/* the f32 elements of t into host buffer h (device memory through the backend's table) */
static col_status get_host(const col_backend *be, const col_tensor *t, float *h, col_err *err)
{
    size_t bytes = sizeof(float) * (size_t)col_numel(t);
    if (be->mem)
        return be->mem->to_host(be, h, t->data, bytes, err);
    memcpy(h, t->data, bytes);
    return COL_OK;
}

static col_status put_host(const col_backend *be, col_tensor *t, const float *h, col_err *err)
{
    size_t bytes = sizeof(float) * (size_t)col_numel(t);
    if (be->mem)
        return be->mem->to_device(be, t->data, h, bytes, err);
    memcpy(t->data, h, bytes);
    return COL_OK;
}

static void note(ext_state *s, const col_backend *be, col_tensor *out, const col_tensor *const *src, int nsrc)
{
    s->calls++;
    s->be = be;
    s->nsrc = nsrc;
    s->src_contiguous = true;
    for (int i = 0; i < nsrc; i++)
        s->src_contiguous = s->src_contiguous && col_is_contiguous(src[i]);
    s->out_contiguous = col_is_contiguous(out);
    s->src0 = nsrc ? src[0]->data : NULL;
    s->out = out->data;
}

static col_status maybe_fail(const ext_state *s, col_err *err)
{
    if (s->fail == COL_OK)
        return COL_OK;
    return s->fail_quietly ? s->fail : col_err_set(err, s->fail, "the wire to rank 3 is cut");
}

/* out (flat) = src0 (flat) reversed */
static col_status reverse_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src,
                             int nsrc, col_err *err)
{
    ext_state *s = user;
    note(s, be, out, src, nsrc);
    col_status st = maybe_fail(s, err);
    int64_t n = col_numel(out);
    if (st != COL_OK)
        return st;
    if (nsrc != 1 || col_numel(src[0]) != n || out->dtype != COL_F32)
        return col_err_set(err, COL_EINTERNAL, "reverse_fn: wrong operands");
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    if (!a || !b)
        st = col_err_set(err, COL_ENOMEM, "reverse_fn: out of memory");
    if (st == COL_OK)
        st = get_host(be, src[0], a, err);
    for (int64_t i = 0; st == COL_OK && i < n; i++)
        b[i] = a[n - 1 - i];
    if (st == COL_OK)
        st = put_host(be, out, b, err);
    free(a);
    free(b);
    return st;
}

/* out = src0 - 10 * src1 (same numel) */
static col_status combine_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src,
                             int nsrc, col_err *err)
{
    ext_state *s = user;
    note(s, be, out, src, nsrc);
    int64_t n = col_numel(out);
    if (nsrc != 2 || col_numel(src[0]) != n || col_numel(src[1]) != n)
        return col_err_set(err, COL_EINTERNAL, "combine_fn: wrong operands");
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    col_status st = a && b ? COL_OK : col_err_set(err, COL_ENOMEM, "combine_fn: out of memory");
    if (st == COL_OK)
        st = get_host(be, src[0], a, err);
    if (st == COL_OK)
        st = get_host(be, src[1], b, err);
    for (int64_t i = 0; st == COL_OK && i < n; i++)
        a[i] -= 10.0f * b[i];
    if (st == COL_OK)
        st = put_host(be, out, a, err);
    free(a);
    free(b);
    return st;
}

/* ---- the mixed graph: x [R,C] ----
 *   a = 2x + 1;  t = a^T [C,R] (a view);  r = reverse(t) [C,R] (extern; t copied first)
 *   y = r + t;   q = combine(y, t) = y - 10 t (extern, two sources) */
enum { R = 3, C = 4, N = R * C };

typedef struct {
    col_graph *g;
    col_node *x, *t, *r, *y, *q;
    ext_state rev, comb;
} mixed;

static bool mixed_build(mixed *m)
{
    memset(m, 0, sizeof *m);
    int64_t sx[2] = {R, C}, st[2] = {C, R};
    m->g = col_graph_new();
    m->x = col_input(m->g, "x", COL_F32, 2, sx);
    col_node *a = col_scale(m->g, m->x, 2.0f, 1.0f);
    m->t = col_transpose(m->g, a, 0, 1);
    m->r = col_extern(m->g, reverse_fn, &m->rev, COL_F32, 2, st, 1, &m->t);
    m->y = col_add(m->g, m->r, m->t);
    col_node *yt[2] = {m->y, m->t};
    m->q = col_extern(m->g, combine_fn, &m->comb, COL_F32, 2, st, 2, yt);
    col_mark_output(m->y);
    col_mark_output(m->q);
    if (col_graph_status(m->g) != COL_OK) {
        TL_NOTE("build: %s", col_graph_error(m->g)->msg);
        return false;
    }
    return true;
}

static void x_values(int seed, float *x)
{
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 7 + seed * 5) % 13 - 6);
}

/* y and q computed here */
static void expected(const float *x, float *y, float *q)
{
    float t[N], r[N];
    for (int p = 0; p < C; p++)
        for (int k = 0; k < R; k++)
            t[p * R + k] = 2.0f * x[k * C + p] + 1.0f;
    for (int i = 0; i < N; i++)
        r[i] = t[N - 1 - i];
    for (int i = 0; i < N; i++) {
        y[i] = r[i] + t[i];
        q[i] = y[i] - 10.0f * t[i];
    }
}

/* runs plan p (hooked or not) with inputs of seed; y and q equal the expected values */
static bool run_and_check(mixed *m, col_plan *p, const col_backend *be, int seed, col_plan_hook hook, void *hu,
                          char *why, size_t nwhy)
{
    float x[N], y[N], q[N], ey[N], eq[N];
    x_values(seed, x);
    expected(x, ey, eq);
    col_err err = {0};
    col_status st = col_plan_upload(p, m->x, x, sizeof x, &err);
    if (st == COL_OK)
        st = hook ? col_plan_run_hooked(p, be, hook, hu, &err) : col_plan_run(p, be, &err);
    if (st == COL_OK)
        st = col_plan_download(p, m->y, y, sizeof y, &err);
    if (st == COL_OK)
        st = col_plan_download(p, m->q, q, sizeof q, &err);
    if (st != COL_OK) {
        snprintf(why, nwhy, "%s", err.msg);
        return false;
    }
    for (int i = 0; i < N; i++)
        if (y[i] != ey[i] || q[i] != eq[i]) {
            snprintf(why, nwhy, "element %d: y %g (expected %g), q %g (expected %g)", i, y[i], ey[i], q[i], eq[i]);
            return false;
        }
    return true;
}

static int hook_extern_calls, hook_calls;
static col_status count_hook(void *user, const col_plan *p, int i, col_node *n, col_err *err)
{
    (void)p, (void)err;
    hook_calls++;
    if (n->op == COL_OP_EXTERN && col_plan_node(p, i) == n && (n == ((mixed *)user)->r || n == ((mixed *)user)->q))
        hook_extern_calls++;
    return COL_OK;
}

/* the mixed graph on backend be (host plan when be has no memory table) */
static void test_mixed_on(const col_backend *be, const char *what)
{
    mixed m;
    if (!mixed_build(&m)) {
        TL_OK(false, "%s: the mixed graph builds", what);
        return;
    }
    col_plan *p = NULL;
    col_err err = {0};
    col_status st = col_plan_create_on(m.g, be, &p, &err);
    TL_OK(st == COL_OK, "%s: the mixed graph plans (%s)", what, err.msg);
    if (st != COL_OK) {
        col_graph_free(m.g);
        return;
    }
    TL_OK(m.r->nsrc == 1 && m.r->src[0] != m.t && m.r->src[0]->op == COL_OP_COPY && m.r->src[0]->src[0] == m.t,
          "%s: the extern node reads a contiguous copy of its strided source", what);
    char why[COL_ERR_MSG_MAX + 100] = "";
    bool ok1 = run_and_check(&m, p, be, 1, NULL, NULL, why, sizeof why);
    TL_OK(ok1, "%s: first run: y and q as computed here %s", what, why);
    bool ok2 = run_and_check(&m, p, be, 2, NULL, NULL, why, sizeof why);
    TL_OK(ok2, "%s: second run, other inputs: y and q as computed here %s", what, why);
    TL_OK(m.rev.calls == 2 && m.comb.calls == 2, "%s: each function called once per run (%d, %d)", what, m.rev.calls,
          m.comb.calls);
    TL_OK(m.rev.be == be && m.comb.be == be && m.rev.nsrc == 1 && m.comb.nsrc == 2,
          "%s: the functions get the backend and their sources", what);
    TL_OK(m.rev.src_contiguous && m.comb.src_contiguous && m.rev.out_contiguous && m.comb.out_contiguous,
          "%s: sources and outputs are contiguous", what);
    TL_OK(m.rev.out == col_plan_data(p, m.r) && m.rev.src0 == col_plan_data(p, m.r->src[0]) &&
              m.comb.src0 == col_plan_data(p, m.y),
          "%s: the functions get the plan's addresses", what);
#ifndef EXTERN_TEST_CUDA
    if (be->mem)
        TL_OK(fk_find_block(m.rev.out, sizeof(float) * N) >= 0 && fk_find_block(m.rev.src0, sizeof(float) * N) >= 0,
              "%s: those are the device's memory", what);
#endif
    hook_calls = hook_extern_calls = 0;
    bool ok3 = run_and_check(&m, p, be, 3, count_hook, &m, why, sizeof why);
    TL_OK(ok3 && hook_extern_calls == 2 && m.rev.calls == 3,
          "%s: the hooked runner calls its hook before each extern node (%d of %d hook calls) and the function %s",
          what, hook_extern_calls, hook_calls, why);
    col_plan_free(p);
    col_graph_free(m.g);
}

#ifndef EXTERN_TEST_CUDA
/* ---- a failing function ---- */
static void test_errors(void)
{
    col_graph *g = col_graph_new();
    int64_t sh[1] = {N};
    col_node *x = col_input(g, "x", COL_F32, 1, sh);
    col_node *a = col_scale(g, x, 1.0f, 2.0f);
    ext_state s1 = {0}, s2 = {0};
    s1.fail = COL_EIO;
    col_node *e1 = col_extern(g, reverse_fn, &s1, COL_F32, 1, sh, 1, &a);
    col_node *e2 = col_extern(g, reverse_fn, &s2, COL_F32, 1, sh, 1, &e1);
    snprintf(e1->name, sizeof e1->name, "all_gather");
    col_mark_output(e2);
    col_plan *p = NULL;
    col_err err = {0};
    col_status st = col_plan_create(g, &p, &err);
    TL_OK(st == COL_OK, "error graph plans (%s)", err.msg);
    float xv[N], out[N];
    x_values(4, xv);
    if (st == COL_OK)
        col_plan_upload(p, x, xv, sizeof xv, &err);
    col_err_clear(&err);
    st = p ? col_plan_run(p, &cpu, &err) : COL_EINTERNAL;
    TL_OK(st == COL_EIO && strcmp(err.msg, "the wire to rank 3 is cut") == 0,
          "a failing function stops the run with its status and message (%s: %s)", col_status_name(st), err.msg);
    TL_OK(s1.calls == 1 && s2.calls == 0, "nothing after the failing node runs (%d, %d calls)", s1.calls, s2.calls);
    s1.fail_quietly = true;
    s1.fail = COL_ESTATE;
    col_err_clear(&err);
    st = p ? col_plan_run(p, &cpu, &err) : COL_EINTERNAL;
    TL_OK(st == COL_ESTATE && strstr(err.msg, "extern node all_gather") && strstr(err.msg, "without a message"),
          "a function failing without a message: the run's message names the node (%s)", err.msg);
    s1.fail = COL_OK;
    col_err_clear(&err);
    st = p ? col_plan_run(p, &cpu, &err) : COL_EINTERNAL;
    if (st == COL_OK)
        st = col_plan_download(p, e2, out, sizeof out, &err);
    bool same = st == COL_OK;
    for (int i = 0; same && i < N; i++)
        same = out[i] == xv[i] + 2.0f; /* reversed twice */
    TL_OK(same && s2.calls == 1, "once the function succeeds the plan runs again: reversed twice is x + 2 (%s)",
          err.msg);
    col_plan_free(p);
    col_graph_free(g);

    /* builder errors */
    g = col_graph_new();
    x = col_input(g, "x", COL_F32, 1, sh);
    TL_OK(col_extern(g, NULL, NULL, COL_F32, 1, sh, 1, &x) == NULL && col_graph_status(g) == COL_EINVAL &&
              strstr(col_graph_error(g)->msg, "no function"),
          "extern without a function: %s", col_graph_error(g)->msg);
    col_graph_free(g);
    g = col_graph_new();
    x = col_input(g, "x", COL_F32, 1, sh);
    col_node *many[COL_MAX_SRC + 1];
    for (int i = 0; i <= COL_MAX_SRC; i++)
        many[i] = x;
    TL_OK(col_extern(g, reverse_fn, NULL, COL_F32, 1, sh, COL_MAX_SRC + 1, many) == NULL &&
              col_graph_status(g) == COL_EINVAL,
          "extern with too many sources: %s", col_graph_error(g)->msg);
    col_graph_free(g);
    g = col_graph_new();
    x = col_input(g, "x", COL_F32, 1, sh);
    int64_t bad[1] = {-1};
    TL_OK(col_extern(g, reverse_fn, NULL, COL_F32, 1, bad, 1, &x) == NULL && col_graph_status(g) == COL_ESHAPE,
          "extern with a negative size: %s", col_graph_error(g)->msg);
    col_graph_free(g);
}

/* ---- arena: an extern node is laid out as an ordinary op in its place ---- */
static col_status copy_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src, int nsrc,
                          col_err *err)
{
    (void)user, (void)be, (void)nsrc, (void)err;
    memcpy(out->data, src[0]->data, sizeof(float) * (size_t)col_numel(out));
    return COL_OK;
}

typedef struct {
    col_graph *g;
    col_node *nodes[16];
    int n;
    col_node *x, *out;
} chain;

/* x [8,16] -> a = 2x+1 -> s = sum over dim 1 -> c = copy of a (extern, or scale 1+0) -> d = c*a -> e = exp-free
 * scale of d -> f = sum of e -> out f; a second branch keeps s alive to the end */
static void chain_build(chain *k, bool with_extern)
{
    memset(k, 0, sizeof *k);
    int64_t sh[2] = {8, 16};
    k->g = col_graph_new();
    col_graph *g = k->g;
    k->x = col_input(g, "x", COL_F32, 2, sh);
    col_node *a = col_scale(g, k->x, 2.0f, 1.0f);
    col_node *s = col_sum(g, a, 2u, 0);
    col_node *c = with_extern ? col_extern(g, copy_fn, NULL, COL_F32, 2, sh, 1, &a) : col_scale(g, a, 1.0f, 0.0f);
    col_node *d = col_mul(g, c, a);
    col_node *e = col_scale(g, d, 0.5f, 0.0f);
    col_node *f = col_sum(g, e, 2u, 0);
    k->out = col_add(g, f, s);
    col_mark_output(k->out);
    for (int i = 0; i < col_graph_count(g) && i < 16; i++)
        k->nodes[k->n++] = col_graph_node(g, i);
}

static void test_arena(void)
{
    chain ke, ks;
    chain_build(&ke, true);
    chain_build(&ks, false);
    col_plan *pe = NULL, *ps = NULL;
    col_err err = {0};
    bool ok = col_graph_status(ke.g) == COL_OK && col_graph_status(ks.g) == COL_OK && ke.n == ks.n &&
              col_plan_create(ke.g, &pe, &err) == COL_OK && col_plan_create(ks.g, &ps, &err) == COL_OK;
    TL_OK(ok, "the two chains plan (%s)", err.msg);
    if (!ok) {
        col_plan_free(pe);
        col_plan_free(ps);
        col_graph_free(ke.g);
        col_graph_free(ks.g);
        return;
    }
    TL_OK(col_plan_arena_bytes(pe) == col_plan_arena_bytes(ps) &&
              col_plan_unshared_bytes(pe) == col_plan_unshared_bytes(ps) &&
              col_plan_arena_bytes(pe) < col_plan_unshared_bytes(pe),
          "the extern chain's arena: %zu bytes of %zu unshared, as the ordinary chain's (%zu of %zu)",
          col_plan_arena_bytes(pe), col_plan_unshared_bytes(pe), col_plan_arena_bytes(ps), col_plan_unshared_bytes(ps));
    bool same = col_plan_length(pe) == col_plan_length(ps);
    const char *base_e = col_plan_data(pe, ke.x), *base_s = col_plan_data(ps, ks.x);
    for (int i = 0; same && i < ke.n; i++) {
        const char *de = col_plan_data(pe, ke.nodes[i]), *ds = col_plan_data(ps, ks.nodes[i]);
        same = (de == NULL) == (ds == NULL) && (!de || de - base_e == ds - base_s);
    }
    TL_OK(same, "every node of the extern chain has the offset its counterpart has");
    float x[128], oe[8], os[8];
    for (int i = 0; i < 128; i++)
        x[i] = (float)(i % 9) - 4.0f;
    bool run = col_plan_upload(pe, ke.x, x, sizeof x, &err) == COL_OK && col_plan_run(pe, &cpu, &err) == COL_OK &&
               col_plan_download(pe, ke.out, oe, sizeof oe, &err) == COL_OK &&
               col_plan_upload(ps, ks.x, x, sizeof x, &err) == COL_OK && col_plan_run(ps, &cpu, &err) == COL_OK &&
               col_plan_download(ps, ks.out, os, sizeof os, &err) == COL_OK;
    TL_OK(run && memcmp(oe, os, sizeof oe) == 0, "the extern chain's result is the ordinary chain's, bit for bit (%s)",
          err.msg);
    col_plan_free(pe);
    col_plan_free(ps);
    col_graph_free(ke.g);
    col_graph_free(ks.g);
}

/* ---- autodiff and checkpointing ---- */
static void test_autodiff(void)
{
    int64_t sh[1] = {N};
    float wv[N], gv[N];
    for (int i = 0; i < N; i++)
        wv[i] = (float)(i % 4) - 1.0f, gv[i] = 0.0f;

    /* a gradient through an extern node */
    col_graph *g = col_graph_new();
    col_node *w = col_param(g, "w", COL_F32, 1, sh);
    col_bind(w, wv, NULL);
    col_bind_grad(w, gv, NULL);
    ext_state s = {0};
    col_node *e = col_extern(g, reverse_fn, &s, COL_F32, 1, sh, 1, &w);
    col_node *loss = col_sum(g, col_mul(g, e, e), 1u, 0);
    col_err err = {0};
    col_status st = col_graph_backward(g, loss, &err);
    TL_OK(st == COL_EUNSUPPORTED && strstr(err.msg, "extern") && strstr(err.msg, "no gradient"),
          "backward through an extern node fails: %s", err.msg);
    col_graph_free(g);
    col_err_clear(&err);

    /* an extern node inside a checkpointed segment, its output needed by the backward pass: it is recomputed,
     * its function called again. loss = sum(reverse(x + 1) * w): d loss / d w = reverse(x + 1) */
    g = col_graph_new();
    col_node *x = col_input(g, "x", COL_F32, 1, sh);
    w = col_param(g, "w", COL_F32, 1, sh);
    col_bind(w, wv, NULL);
    col_bind_grad(w, gv, NULL);
    memset(&s, 0, sizeof s);
    col_checkpoint_begin(g);
    col_node *a = col_scale(g, x, 1.0f, 1.0f);
    e = col_extern(g, reverse_fn, &s, COL_F32, 1, sh, 1, &a);
    col_node *m = col_mul(g, e, w);
    col_checkpoint_end(g);
    loss = col_sum(g, m, 1u, 0);
    st = col_graph_backward(g, loss, &err);
    bool cloned = false;
    for (int i = 0; i < col_graph_count(g); i++) {
        col_node *n = col_graph_node(g, i);
        cloned = cloned || (n != e && n->op == COL_OP_EXTERN && (n->flags & COL_NODE_RECOMPUTE) &&
                            n->ext_fn == reverse_fn && n->ext_user == &s);
    }
    TL_OK(st == COL_OK && cloned, "backward of a checkpointed segment clones its extern node with the function (%s)",
          err.msg);
    col_plan *p = NULL;
    float xv[N], lv = 0;
    x_values(5, xv);
    st = st == COL_OK ? col_plan_create(g, &p, &err) : st;
    if (st == COL_OK)
        st = col_plan_upload(p, x, xv, sizeof xv, &err);
    if (st == COL_OK)
        st = col_plan_run(p, &cpu, &err);
    if (st == COL_OK)
        st = col_plan_download(p, loss, &lv, sizeof lv, &err);
    bool ok = st == COL_OK;
    float el = 0;
    for (int i = 0; ok && i < N; i++) {
        float ei = xv[N - 1 - i] + 1.0f;
        el += ei * wv[i];
        ok = gv[i] == ei;
    }
    TL_OK(ok && lv == el, "the loss (%g, expected %g) and w's gradient are as computed here (%s)", lv, el, err.msg);
    TL_OK(s.calls == 2, "the function ran twice in the run: forward and recomputation (%d)", s.calls);
    col_plan_free(p);
    col_graph_free(g);
}
#endif

#ifndef EXTERN_TEST_CUDA
/* ---- an extern node with a gradient (col_extern_grad) ----
 * rev(x, c) = reverse(x) + c * 0 as the function computes it (c is only a second source): the gradient of x is
 * reverse(dy), built of an extern node again; c gets none (the builder returns NULL: a stop) */
static col_status rev2_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src, int nsrc,
                          col_err *err)
{
    return reverse_fn(user, be, out, src, nsrc > 0 ? 1 : 0, err);
}

static int bwd_calls[2];
static col_node *rev_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    bwd_calls[s]++;
    if (s == 1)
        return NULL;
    return col_extern_grad(g, rev2_fn, rev_bwd, user, COL_F32, n->t.ndim, n->t.shape, 1, &dy);
}

static col_node *grad_build(col_graph *g, col_node **leaves, void *user)
{
    col_node *src[2] = {col_scale(g, leaves[0], 3.0f, 0.0f), leaves[1]};
    col_node *e = col_extern_grad(g, rev2_fn, rev_bwd, user, COL_F32, 1, leaves[0]->t.shape, 2, src);
    return col_mul(g, e, col_tanh(g, leaves[0])); /* x reaches the loss both through e and directly */
}

static void test_extern_grad(void)
{
    float xv[N], cv[N];
    x_values(3, xv);
    for (int i = 0; i < N; i++)
        xv[i] *= 0.1f, cv[i] = 0.5f * (float)i;
    col_gc_input in[2] = {{.dtype = COL_F32, .ndim = 1, .shape = {N}, .data = xv},
                          {.dtype = COL_F32, .ndim = 1, .shape = {N}, .data = cv}};
    col_gc_opts o = {.h = 1e-3, .rtol = 1e-2, .atol = 1e-3, .max_points = N};
    col_gc_result r = {0};
    col_err err = {0};
    ext_state s = {0};
    in[1].no_grad = true;
    col_status st = col_gradcheck(&cpu, grad_build, &s, 2, in, &o, &r, &err);
    TL_OK(st == COL_OK && r.failed == 0 && r.checked >= N,
          "col_extern_grad: x's gradient through the extern node and its builder equals finite differences "
          "(%d of %d off, worst %g vs %g; %s)", r.failed, r.checked, r.worst_analytic, r.worst_numeric, err.msg);
    /* with c trained too: its gradient is stopped, so a finite difference (0: c does not change the output) agrees
     * and the builder was asked for it */
    in[1].no_grad = false;
    bwd_calls[0] = bwd_calls[1] = 0;
    memset(&r, 0, sizeof r);
    st = col_gradcheck(&cpu, grad_build, &s, 2, in, &o, &r, &err);
    TL_OK(st == COL_OK && r.failed == 0 && bwd_calls[1] > 0,
          "col_extern_grad: a source whose builder returns NULL gets no gradient (%d off; %s)", r.failed, err.msg);
}
#endif

int main(void)
{
    tl_cpu_backend(&cpu);
#ifdef EXTERN_TEST_CUDA
    col_backend gpu;
    if (!tl_cuda_backend_or_skip(&gpu))
        return 0;
    test_mixed_on(&gpu, "cuda");
    col_cuda_backend_free(&gpu);
#else
    test_mixed_on(&cpu, "cpu");
    col_backend fake = cpu;
    fake.name = "fakedev";
    fake.mem = &fk_mem;
    fk_own(&fake);
    test_mixed_on(&fake, "fake device");
    TL_OK(fk.refused == 0 && fk.live == 0, "the fake device: no copy refused (%s), every block freed (%d live)",
          fk.first, fk.live);
    test_errors();
    test_arena();
    test_autodiff();
    test_extern_grad();
#endif
    col_cpu_backend_free(&cpu);
    return tl_done();
}
