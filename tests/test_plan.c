/* test_plan.c - several plans of one graph (issue 11). A plan's schedule,
 * liveness and arena belong to the plan, so plans with different outputs
 * live side by side and run in any order, each binding its own addresses at
 * the start of a run; col_plan_data and uploads/downloads name a plan; a plan
 * made before nodes were added keeps running; freeing one plan leaves the
 * others usable; col_plan_create_for schedules only what its outputs need
 * (no ACCUMULATE unless given); and a plan with dropout off evaluates a
 * training graph bit for bit as a graph built without dropout.
 *
 * The tiny graph's values are small integers, so every result is exact and
 * checked against values computed here; the GPT graph's plans are checked
 * bit for bit against graphs that have one plan each; so are those of two
 * plans sharing one arena (col_plan_share_memory). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "lm.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;

/* ---- a tiny graph: x an unbound input (each plan keeps its own copy in its arena), w a bound parameter ----
 *   a = 3x + 1,  s = sum(a * w)  (plan A's output; d s / d w = a)
 *   b = x * x + w                (plan B's output) */

enum { N = 8 };

typedef struct {
    col_graph *g;
    col_node *x, *w, *a, *s, *b;
    float wd[N], gd[N];
} tiny;

static void tiny_build(tiny *t)
{
    memset(t, 0, sizeof *t);
    int64_t sh[1] = {N};
    t->g = col_graph_new();
    t->x = col_input(t->g, "x", COL_F32, 1, sh);
    t->w = col_param(t->g, "w", COL_F32, 1, sh);
    for (int i = 0; i < N; i++)
        t->wd[i] = (float)(i % 3 + 1);
    col_bind(t->w, t->wd, NULL);
    col_bind_grad(t->w, t->gd, NULL);
    t->a = col_scale(t->g, t->x, 3.0f, 1.0f);
    t->s = col_sum(t->g, col_mul(t->g, t->a, t->w), 1, 0);
    t->b = col_add(t->g, col_mul(t->g, t->x, t->x), t->w);
}

/* x values of a plan: distinct per seed, small integers */
static void xs(int seed, float *x)
{
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 5 + seed * 7) % 11 - 5);
}

static float want_s(const tiny *t, const float *x)
{
    float s = 0;
    for (int i = 0; i < N; i++)
        s += (3 * x[i] + 1) * t->wd[i];
    return s;
}

static bool want_b(const tiny *t, const float *x, const float *b)
{
    for (int i = 0; i < N; i++)
        if (b[i] != x[i] * x[i] + t->wd[i])
            return false;
    return true;
}

static col_plan *plan_for(col_graph *g, col_node *out)
{
    col_plan *p = NULL;
    col_err err = {0};
    if (col_plan_create_for(g, NULL, &out, 1, &p, &err) != COL_OK)
        TL_NOTE("plan: %s", err.msg);
    return p;
}

/* uploads x through p, runs p, downloads the scalar s through p */
static bool run_s(col_plan *p, const tiny *t, const float *x, float *s, col_err *err)
{
    return col_plan_upload(p, t->x, x, sizeof(float) * N, err) == COL_OK && col_plan_run(p, &be, err) == COL_OK &&
           col_plan_download(p, t->s, s, sizeof *s, err) == COL_OK;
}

static bool has_node(const col_plan *p, const col_node *n)
{
    for (int i = 0; i < col_plan_length(p); i++)
        if (col_plan_node(p, i) == n)
            return true;
    return false;
}

static void test_interleaved(void)
{
    tiny t;
    tiny_build(&t);
    col_plan *pa = plan_for(t.g, t.s), *pb = plan_for(t.g, t.b);
    TL_OK(pa && pb, "two plans of one graph, for s and for b");
    if (!pa || !pb)
        return;
    TL_OK(has_node(pa, t.a) && !has_node(pa, t.b) && has_node(pb, t.b) && !has_node(pb, t.a) && !has_node(pb, t.s),
          "each schedules what its output needs (%d and %d nodes)", col_plan_length(pa), col_plan_length(pb));
    TL_OK(col_plan_data(pa, t.x) && col_plan_data(pb, t.x) && col_plan_data(pa, t.x) != col_plan_data(pb, t.x) &&
              col_plan_data(pa, t.w) == t.wd && col_plan_data(pb, t.w) == t.wd && !col_plan_data(pa, t.b) &&
              !col_plan_data(pb, t.s),
          "col_plan_data: the unbound input has a copy in each plan's arena, the bound parameter is the caller's; "
          "NULL outside a plan");
    float xa[N], xb[N], s1 = NAN, s2 = NAN, b[N], b2[N];
    xs(1, xa);
    xs(2, xb);
    col_err err = {0};
    /* both inputs in place before any run: each plan's upload goes to its own copy */
    bool ok = col_plan_upload(pa, t.x, xa, sizeof xa, &err) == COL_OK &&
              col_plan_upload(pb, t.x, xb, sizeof xb, &err) == COL_OK;
    ok = ok && col_plan_run(pa, &be, &err) == COL_OK && col_plan_download(pa, t.s, &s1, sizeof s1, &err) == COL_OK;
    TL_OK(ok && s1 == want_s(&t, xa), "A: s = %g (want %g): %s", s1, want_s(&t, xa), err.msg);
    ok = col_plan_run(pb, &be, &err) == COL_OK && col_plan_download(pb, t.b, b, sizeof b, &err) == COL_OK;
    TL_OK(ok && want_b(&t, xb, b), "then B: b = x*x + w from B's own x: %s", err.msg);
    s1 = NAN;
    ok = col_plan_download(pa, t.s, &s1, sizeof s1, &err) == COL_OK;
    TL_OK(ok && s1 == want_s(&t, xa), "A's result is still in A's arena after B ran (%g)", s1);
    ok = col_plan_run(pa, &be, &err) == COL_OK && col_plan_download(pa, t.s, &s2, sizeof s2, &err) == COL_OK;
    TL_OK(ok && s2 == want_s(&t, xa) && want_s(&t, xa) != want_s(&t, xb),
          "then A again: s = %g from A's x, not B's (%g): %s", s2, want_s(&t, xb), err.msg);
    TL_OK(col_data(t.x) == col_plan_data(pa, t.x) && col_data(t.s) == col_plan_data(pa, t.s),
          "col_data gives the addresses of the plan that ran last");
    ok = col_plan_run(pb, &be, &err) == COL_OK && col_plan_download(pb, t.b, b2, sizeof b2, &err) == COL_OK;
    TL_OK(ok && want_b(&t, xb, b2) && col_data(t.x) == col_plan_data(pb, t.x), "and B again: %s", err.msg);
    col_err e1 = {0};
    TL_OK(col_plan_download(pa, t.b, b, sizeof b, &e1) == COL_EINVAL && strstr(e1.msg, "not in this plan"),
          "a download through a plan that does not compute the node: %s", e1.msg);

    /* freeing one plan leaves the other usable */
    col_plan_free(pb);
    xs(3, xa);
    ok = run_s(pa, &t, xa, &s1, &err);
    TL_OK(ok && s1 == want_s(&t, xa), "B freed, A runs on: s = %g: %s", s1, err.msg);
    col_plan_free(pa);
    col_graph_free(t.g);
}

static col_node *accumulate_of(col_graph *g, const col_node *param)
{
    for (int i = 0; i < col_graph_count(g); i++) {
        col_node *n = col_graph_node(g, i);
        if (n->op == COL_OP_ACCUMULATE && n->src[1] == param)
            return n;
    }
    return NULL;
}

static int count_op(const col_plan *p, col_op op)
{
    int k = 0;
    for (int i = 0; i < col_plan_length(p); i++)
        k += col_plan_node(p, i)->op == op;
    return k;
}

static void test_added_nodes(void)
{
    tiny t;
    tiny_build(&t);
    col_err err = {0};
    /* planned before backward and before c exists */
    col_plan *pa = plan_for(t.g, t.s);
    int len = pa ? col_plan_length(pa) : 0;
    bool ok = pa && col_graph_backward(t.g, t.s, &err) == COL_OK;
    col_node *c = col_scale(t.g, t.b, 2.0f, 0.0f);
    col_node *acc = accumulate_of(t.g, t.w);
    col_plan *pc = ok && c ? plan_for(t.g, c) : NULL, *full = NULL;
    ok = ok && acc && pc && col_plan_create(t.g, &full, &err) == COL_OK;
    TL_OK(ok, "backward and a new node added after the first plan; two more plans: %s", err.msg);
    if (!ok) {
        col_plan_free(pa), col_plan_free(pc), col_plan_free(full), col_graph_free(t.g);
        return;
    }
    float xa[N], xc[N], s = NAN, cv[N];
    xs(4, xa);
    xs(5, xc);
    for (int i = 0; i < N; i++)
        t.gd[i] = 7.0f;
    ok = run_s(pa, &t, xa, &s, &err);
    bool untouched = true;
    for (int i = 0; i < N; i++)
        untouched &= t.gd[i] == 7.0f;
    TL_OK(ok && s == want_s(&t, xa) && col_plan_length(pa) == len && count_op(pa, COL_OP_ACCUMULATE) == 0 && untouched,
          "the plan made before them still runs (s = %g, %d nodes, no gradient written): %s", s, len, err.msg);
    col_err e1 = {0};
    TL_OK(!col_plan_data(pa, c) && !col_plan_data(pa, acc) &&
              col_plan_upload(pa, c, cv, sizeof cv, &e1) == COL_EINVAL && strstr(e1.msg, "not in this plan"),
          "the nodes added later are not in it: %s", e1.msg);
    ok = col_plan_upload(pc, t.x, xc, sizeof xc, &err) == COL_OK && col_plan_run(pc, &be, &err) == COL_OK &&
         col_plan_download(pc, c, cv, sizeof cv, &err) == COL_OK;
    bool right = ok;
    for (int i = 0; i < N && right; i++)
        right = cv[i] == 2 * (xc[i] * xc[i] + t.wd[i]);
    TL_OK(right && count_op(pc, COL_OP_ACCUMULATE) == 0, "a plan for the new node: c = 2 (x*x + w): %s", err.msg);
    /* the full plan (marked outputs: s and the gradient) accumulates d s / d w = 3x + 1 */
    memset(t.gd, 0, sizeof t.gd);
    ok = run_s(full, &t, xa, &s, &err);
    right = ok && s == want_s(&t, xa) && count_op(full, COL_OP_ACCUMULATE) == 1;
    for (int i = 0; i < N && right; i++)
        right = t.gd[i] == 3 * xa[i] + 1;
    TL_OK(right, "the plan of the marked outputs adds the gradient 3x + 1 into w's buffer: %s", err.msg);
    /* create_for with the ACCUMULATE node asked for */
    col_node *outs[2] = {t.s, acc};
    col_plan *pg = NULL;
    memset(t.gd, 0, sizeof t.gd);
    ok = col_plan_create_for(t.g, NULL, outs, 2, &pg, &err) == COL_OK && run_s(pg, &t, xc, &s, &err);
    right = ok && s == want_s(&t, xc) && count_op(pg, COL_OP_ACCUMULATE) == 1 && !has_node(pg, c);
    for (int i = 0; i < N && right; i++)
        right = t.gd[i] == 3 * xc[i] + 1;
    TL_OK(right, "a plan for s and the ACCUMULATE node computes the gradient too, and not c: %s", err.msg);
    ok = run_s(pa, &t, xa, &s, &err);
    TL_OK(ok && s == want_s(&t, xa), "the first plan once more, after all the others: s = %g: %s", s, err.msg);
    col_plan_free(pg);
    col_plan_free(full);
    col_plan_free(pc);
    col_plan_free(pa);
    col_graph_free(t.g);
}

static void test_create_for_errors(void)
{
    tiny t, u;
    tiny_build(&t);
    tiny_build(&u);
    col_err e = {0};
    col_plan *p = NULL;
    TL_OK(col_plan_create_for(t.g, NULL, NULL, 1, &p, &e) == COL_EINVAL && !p, "no outputs: %s", e.msg);
    e = (col_err){0};
    TL_OK(col_plan_create_for(t.g, NULL, &t.s, 0, &p, &e) == COL_EINVAL && !p, "zero outputs: %s", e.msg);
    e = (col_err){0};
    col_node *two[2] = {t.s, u.b};
    TL_OK(col_plan_create_for(t.g, NULL, two, 2, &p, &e) == COL_EINVAL && !p && strstr(e.msg, "output 1"),
          "a node of another graph: %s", e.msg);
    e = (col_err){0};
    two[1] = NULL;
    TL_OK(col_plan_create_for(t.g, NULL, two, 2, &p, &e) == COL_EINVAL && !p && strstr(e.msg, "NULL"),
          "a NULL output: %s", e.msg);
    e = (col_err){0};
    int64_t bad[1] = {-1};
    col_input(u.g, "bad", COL_F32, 1, bad);
    TL_OK(col_plan_create_for(u.g, NULL, &u.b, 1, &p, &e) == COL_ESHAPE && !p,
          "a graph with a builder error: %s", e.msg);
    col_graph_free(t.g);
    col_graph_free(u.g);
}

static void test_dropout_switch(void)
{
    enum { M = 4096 };
    int64_t sh[1] = {M};
    col_graph *g = col_graph_new();
    col_node *x = col_input(g, "x", COL_F32, 1, sh);
    col_node *y = col_dropout(g, x, 0.5f, 11);
    float *xd = malloc(sizeof(float) * M), *y1 = malloc(sizeof(float) * M), *y2 = malloc(sizeof(float) * M);
    col_fill_uniform(xd, M, 9, 0.5f, 1.5f);
    col_plan *p = plan_for(g, y);
    col_err err = {0};
    bool ok = p && col_plan_upload(p, x, xd, sizeof(float) * M, &err) == COL_OK &&
              col_plan_run(p, &be, &err) == COL_OK && col_plan_download(p, y, y1, sizeof(float) * M, &err) == COL_OK;
    int dropped = 0, scaled = 0;
    for (int i = 0; ok && i < M; i++) {
        dropped += y1[i] == 0.0f;
        scaled += y1[i] == xd[i] * 2.0f;
    }
    TL_OK(ok && dropped + scaled == M && dropped > M / 3 && scaled > M / 3,
          "dropout on (the default): %d of %d dropped, the rest doubled: %s", dropped, M, err.msg);
    col_plan_set_dropout(p, false);
    ok = ok && col_plan_run(p, &be, &err) == COL_OK &&
         col_plan_download(p, y, y2, sizeof(float) * M, &err) == COL_OK;
    TL_OK(ok && memcmp(y2, xd, sizeof(float) * M) == 0, "dropout off: the input unchanged, bit for bit: %s", err.msg);
    col_plan_set_dropout(p, true);
    ok = ok && col_plan_run(p, &be, &err) == COL_OK &&
         col_plan_download(p, y, y2, sizeof(float) * M, &err) == COL_OK;
    TL_OK(ok && memcmp(y1, y2, sizeof(float) * M) == 0, "on again: the same mask: %s", err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(xd), free(y1), free(y2);
}

/* ---- a GPT-2 training graph planned twice, against graphs planned once ---- */

enum { B = 2, T = 8, V = 13, MAXP = 64 };

typedef struct {
    col_graph *g;
    col_lm_graph gg;
    col_node *params[MAXP];
    float *grad[MAXP];
} lm_graph;

static col_lm_config lm_cfg(void)
{
    col_lm_config c = col_gpt2_config(V, T, 16, 2, 2);
    c.dropout = 0.1f;
    return c;
}

/* a graph of the model, parameters bound to w (shared), gradients to buffers of its own */
static bool lm_build(lm_graph *m, bool training, float **w, col_err *err)
{
    memset(m, 0, sizeof *m);
    col_lm_config c = lm_cfg();
    int np = col_lm_param_count(&c);
    col_param_spec specs[MAXP];
    col_lm_param_specs(&c, specs);
    m->g = col_graph_new();
    m->gg.params = m->params;
    col_lm_build_opts o = {.batch = B, .seq = T, .with_loss = true, .training = training, .checkpoint = training,
                           .dropout_seed = 5};
    if (col_lm_build(m->g, &c, &o, &m->gg, err) != COL_OK)
        return false;
    if (training && col_graph_backward(m->g, m->gg.loss, err) != COL_OK)
        return false;
    if (!training) {
        col_mark_output(m->gg.loss);
        col_mark_output(m->gg.logits);
    }
    for (int i = 0; i < np; i++) {
        m->grad[i] = calloc((size_t)col_param_numel(&specs[i]), sizeof(float));
        if (!m->grad[i] || col_bind(m->params[i], w[i], err) != COL_OK ||
            col_bind_grad(m->params[i], m->grad[i], err) != COL_OK)
            return false;
    }
    return true;
}

static void lm_free(lm_graph *m)
{
    for (int i = 0; i < MAXP; i++)
        free(m->grad[i]);
    col_graph_free(m->g);
}

static void lm_zero_grads(lm_graph *m, int np, const col_param_spec *specs)
{
    for (int i = 0; i < np; i++)
        memset(m->grad[i], 0, sizeof(float) * (size_t)col_param_numel(&specs[i]));
}

static bool lm_same_grads(const lm_graph *a, const lm_graph *b, int np, const col_param_spec *specs)
{
    for (int i = 0; i < np; i++)
        if (memcmp(a->grad[i], b->grad[i], sizeof(float) * (size_t)col_param_numel(&specs[i])) != 0)
            return false;
    return true;
}

/* batch k in through plan p, the run counter set, p run, its loss (and logits) out */
static bool lm_run(col_plan *p, lm_graph *m, int k, float *loss, float *logits, col_err *err)
{
    int32_t ids[B * T], tg[B * T];
    col_rng r;
    col_rng_init(&r, 70 + (uint64_t)k);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)col_rng_below(&r, V);
        tg[i] = (int32_t)col_rng_below(&r, V);
    }
    col_graph_set_rng_counter(m->g, k + 1);
    return col_plan_upload(p, m->gg.ids, ids, sizeof ids, err) == COL_OK &&
           col_plan_upload(p, m->gg.targets, tg, sizeof tg, err) == COL_OK && col_plan_run(p, &be, err) == COL_OK &&
           col_plan_download(p, m->gg.loss, loss, sizeof *loss, err) == COL_OK &&
           (!logits || col_plan_download(p, m->gg.logits, logits, sizeof(float) * B * T * V, err) == COL_OK);
}

static void test_training_graph(void)
{
    col_lm_config c = lm_cfg();
    int np = col_lm_param_count(&c);
    col_param_spec specs[MAXP];
    if (np > MAXP) {
        TL_OK(false, "the model has %d tensors (at most %d here)", np, MAXP);
        return;
    }
    col_lm_param_specs(&c, specs);
    float *w[MAXP] = {0};
    for (int i = 0; i < np; i++) {
        w[i] = malloc(sizeof(float) * (size_t)col_param_numel(&specs[i]));
        col_fill_normal(w[i], col_param_numel(&specs[i]), 300 + (uint64_t)i, 0.3f);
    }
    col_err err = {0};
    lm_graph two = {0}, ref = {0}, fwd = {0}; /* planned twice; its training plan alone; without dropout, planned alone */
    bool ok = lm_build(&two, true, w, &err) && lm_build(&ref, true, w, &err) && lm_build(&fwd, false, w, &err);
    col_plan *train = NULL, *eval = NULL, *rtrain = NULL, *rfwd = NULL;
    col_node *outs[2] = {two.gg.loss, two.gg.logits};
    ok = ok && col_plan_create(two.g, &train, &err) == COL_OK &&
         col_plan_create_for(two.g, NULL, outs, 2, &eval, &err) == COL_OK &&
         col_plan_create(ref.g, &rtrain, &err) == COL_OK && col_plan_create(fwd.g, &rfwd, &err) == COL_OK;
    TL_OK(ok, "a GPT-2 training graph (dropout, checkpointing) with a training and an evaluation plan: %s", err.msg);
    if (ok) {
        col_plan_set_dropout(eval, false);
        TL_OK(count_op(eval, COL_OP_ACCUMULATE) == 0 && col_plan_length(eval) < col_plan_length(train) / 2 &&
                  count_op(eval, COL_OP_DROPOUT) > 0,
              "the evaluation plan is the forward pass: %d of %d nodes, dropout nodes included, no ACCUMULATE",
              col_plan_length(eval), col_plan_length(train));
    }
    float *lg = malloc(sizeof(float) * B * T * V), *rlg = malloc(sizeof(float) * B * T * V);
    bool train_same = ok, eval_same = ok;
    float lt = 0, lr = 0, le = 0, lf = 0;
    for (int k = 0; k < 3 && ok; k++) {
        lm_zero_grads(&two, np, specs);
        lm_zero_grads(&ref, np, specs);
        ok = lm_run(train, &two, k, &lt, NULL, &err) && lm_run(rtrain, &ref, k, &lr, NULL, &err);
        train_same = train_same && ok && lt == lr && lm_same_grads(&two, &ref, np, specs);
        ok = ok && lm_run(eval, &two, k, &le, lg, &err) && lm_run(rfwd, &fwd, k, &lf, rlg, &err);
        eval_same = eval_same && ok && le == lf && memcmp(lg, rlg, sizeof(float) * B * T * V) == 0;
    }
    TL_OK(train_same, "training, evaluation, training ...: the training plan's losses and gradients bitwise those of "
          "a graph with one plan (last loss %.7f): %s", lt, err.msg);
    TL_OK(eval_same && le != lt, "the evaluation plan's losses and logits bitwise those of a graph built without "
          "dropout (last %.7f; with dropout the same batch gave %.7f): %s", le, lt, err.msg);
    if (ok) { /* dropout back on: the evaluation plan's forward pass is the training plan's, same masks */
        col_plan_set_dropout(eval, true);
        lm_zero_grads(&two, np, specs);
        ok = lm_run(eval, &two, 2, &le, NULL, &err) && lm_run(train, &two, 2, &lr, NULL, &err);
        TL_OK(ok && le == lt && lr == lt, "dropout on again: the evaluation plan's loss is the training plan's "
              "(%.7f): %s", le, err.msg);
    }
    col_plan_free(train), col_plan_free(eval), col_plan_free(rtrain), col_plan_free(rfwd);
    lm_free(&two), lm_free(&ref), lm_free(&fwd);
    for (int i = 0; i < np; i++)
        free(w[i]);
    free(lg), free(rlg);
}

/* the training and evaluation plans in one arena: the same results, the memory of the larger */
static void test_shared_memory(void)
{
    col_lm_config c = lm_cfg();
    int np = col_lm_param_count(&c);
    col_param_spec specs[MAXP];
    if (np > MAXP)
        return;
    col_lm_param_specs(&c, specs);
    float *w[MAXP] = {0};
    for (int i = 0; i < np; i++) {
        w[i] = malloc(sizeof(float) * (size_t)col_param_numel(&specs[i]));
        col_fill_normal(w[i], col_param_numel(&specs[i]), 500 + (uint64_t)i, 0.3f);
    }
    col_err err = {0};
    lm_graph two = {0}, ref = {0};
    bool ok = lm_build(&two, true, w, &err) && lm_build(&ref, true, w, &err);
    col_plan *train = NULL, *eval = NULL, *rtrain = NULL, *reval = NULL;
    col_node *outs[2] = {two.gg.loss, two.gg.logits}, *routs[2] = {ref.gg.loss, ref.gg.logits};
    ok = ok && col_plan_create(two.g, &train, &err) == COL_OK &&
         col_plan_create_for(two.g, NULL, outs, 2, &eval, &err) == COL_OK &&
         col_plan_create(ref.g, &rtrain, &err) == COL_OK &&
         col_plan_create_for(ref.g, NULL, routs, 2, &reval, &err) == COL_OK;
    size_t own_t = ok ? col_plan_arena_bytes(train) + col_plan_scratch_bytes(train) : 0;
    size_t own_e = ok ? col_plan_arena_bytes(eval) + col_plan_scratch_bytes(eval) : 0;
    ok = ok && col_plan_memory_bytes(train) == own_t && col_plan_share_memory(eval, train, &err) == COL_OK;
    TL_OK(ok && col_plan_memory_bytes(eval) == col_plan_memory_bytes(train) &&
              col_plan_memory_bytes(train) >= own_t && col_plan_memory_bytes(train) >= own_e &&
              col_plan_memory_bytes(train) < own_t + own_e,
          "the evaluation plan shares the training plan's memory: %zu bytes for the two (own %zu and %zu): %s",
          ok ? col_plan_memory_bytes(train) : 0, own_t, own_e, err.msg);
    if (ok) {
        col_plan_set_dropout(eval, false);
        col_plan_set_dropout(reval, false);
    }
    float *lg = malloc(sizeof(float) * B * T * V), *rlg = malloc(sizeof(float) * B * T * V);
    bool same = ok;
    for (int k = 0; k < 3 && ok; k++) {
        float lt = 0, lr = 0, le = 0, lf = 0;
        lm_zero_grads(&two, np, specs);
        lm_zero_grads(&ref, np, specs);
        ok = lm_run(train, &two, k, &lt, NULL, &err) && lm_run(rtrain, &ref, k, &lr, NULL, &err) &&
             lm_run(eval, &two, k, &le, lg, &err) && lm_run(reval, &ref, k, &lf, rlg, &err);
        same = same && ok && lt == lr && le == lf && lm_same_grads(&two, &ref, np, specs) &&
               memcmp(lg, rlg, sizeof(float) * B * T * V) == 0;
    }
    TL_OK(same, "training and evaluation in turns in one arena: losses, gradients and logits bitwise those of "
          "plans with their own: %s", err.msg);
    col_plan_free(train);
    float le = 0;
    ok = ok && lm_run(eval, &two, 3, &le, lg, &err) && lm_run(reval, &ref, 3, &le, rlg, &err) &&
         memcmp(lg, rlg, sizeof(float) * B * T * V) == 0;
    TL_OK(ok, "the training plan freed, the evaluation plan runs on in the memory: %s", err.msg);
    TL_OK(col_plan_share_memory(eval, NULL, &err) == COL_EINVAL, "sharing with no plan is refused");
    col_plan_free(eval), col_plan_free(rtrain), col_plan_free(reval);
    lm_free(&two), lm_free(&ref);
    for (int i = 0; i < np; i++)
        free(w[i]);
    free(lg), free(rlg);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_interleaved();
    test_added_nodes();
    test_create_for_errors();
    test_dropout_switch();
    test_training_graph();
    test_shared_memory();
    col_cpu_backend_free(&be);
    return tl_done();
}
