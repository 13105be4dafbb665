/* test_mt_resident.c - training through a budgeted compute tier: parameter
 * and gradient chunks are copied in and out before every op as the
 * placement plan says, and the losses and weights stay bitwise those of a
 * run with everything in place. Placement must never change the math:
 * not the budget, not the transfer thread, not the re-plan after the traced
 * step, not chunks whose home is the NVMe tier, not an arena shared between
 * graphs, not two plans of one graph (training and evaluation) each with a
 * tier of its own. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "hf_config.h"
#include "lm_trainer.h"
#include "mt_resident.h"
#include "nvme.h"
#include "rng.h"
#include "testlib.h"
#include "lm_testutil.h"
#include "backend_cpu.h"

static col_backend be;
static char dir[] = "/tmp/col_mt_resident_XXXXXX";

enum { B = 2, T = 16, V = 257, STEPS = 5 };

/* ---- through the trainer (GPT-2 shaped, host-home chunks) ---- */

static col_lm_train_config config(size_t budget, bool checkpoint)
{
    col_lm_train_config c = {
        .model = col_gpt2_config(V, 32, 32, 3, 4),
        .batch = B, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 1.0f, .seed = 11, .checkpoint = checkpoint,
        .chunk_bytes = 16 << 10, /* many small chunks: a tight budget evicts often */
        .compute_budget = budget,
    };
    c.model.dropout = 0.1f;
    return c;
}

/* STEPS steps on fixed batches; losses out; the trainer is kept for inspection */
static col_lm_trainer *train(const col_lm_train_config *c, bool async, float *loss, col_err *err)
{
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(c, &be, &t, err) != COL_OK)
        return NULL;
    mt_resident *r = col_lm_trainer_compute_tier(t);
    if (r) { /* a read at home instead of on the tier would show as NaN */
        mt_resident_poison_home(r, true);
        mt_resident_set_async(r, async);
    }
    if (!tl_lm_steps(t, 0, STEPS, 5, V, loss, err)) {
        col_lm_trainer_free(t);
        return NULL;
    }
    return t;
}

static void run_case(bool checkpoint)
{
    col_err err = {0};
    const char *ck = checkpoint ? " (checkpointing)" : "";
    float l0[STEPS], l1[STEPS], l2[STEPS];
    col_lm_train_config free_run = config(0, checkpoint);
    col_lm_trainer *ref = train(&free_run, true, l0, &err);
    TL_OK(ref != NULL, "unlimited run%s: %s", ck, err.msg);
    /* the smallest budget the graph allows, and the plan from estimates, read from a first session */
    col_lm_train_config probe = config((size_t)1 << 40, checkpoint);
    col_lm_trainer *t = NULL;
    mt_resident_stats st = {0};
    if (col_lm_trainer_create(&probe, &be, &t, &err) == COL_OK)
        mt_resident_get_stats(col_lm_trainer_compute_tier(t), &st);
    col_lm_trainer_free(t);
    size_t minb = st.min_budget;
    TL_OK(minb > 0 && !st.traced && !st.async, "smallest compute tier for this graph: %zu bytes (synchronous by default)", minb);
    mt_plan_summary est = {0};
    col_lm_train_config tight0 = config(minb, checkpoint);
    t = NULL;
    if (col_lm_trainer_create(&tight0, &be, &t, &err) == COL_OK)
        mt_resident_get_plan_summary(col_lm_trainer_compute_tier(t), &est);
    col_lm_trainer_free(t);

    for (int async = 1; async >= 0; async--) {
        const char *mode = async ? "async" : "sync";
        col_lm_train_config tight = config(minb, checkpoint), roomy = config(2 * minb, checkpoint);
        col_lm_trainer *a = train(&tight, async, l1, &err), *b = train(&roomy, async, l2, &err);
        TL_OK(a && b, "%s%s: runs at the smallest budget and at 2x: %s", mode, ck, err.msg);
        if (!ref || !a || !b) {
            col_lm_trainer_free(a), col_lm_trainer_free(b);
            continue;
        }
        mt_resident_stats sb;
        mt_pool_stats ps;
        mt_stats(col_lm_trainer_pool(a), &ps);
        mt_resident_get_stats(col_lm_trainer_compute_tier(a), &st);
        mt_resident_get_stats(col_lm_trainer_compute_tier(b), &sb);
        double chunks = (double)(ps.tensor_bytes[MT_PARAM] + ps.tensor_bytes[MT_GRAD]);
        TL_OK(st.peak <= minb && st.writebacks > 0 && st.bytes[MT_LINK_H2C] > sb.bytes[MT_LINK_H2C] &&
                  st.bytes[MT_LINK_N2H] == 0 && st.bytes[MT_LINK_H2N] == 0,
              "%s%s: the tight tier never held more than its budget (peak %zu of %zu); it moved %.2f MB in and %.2f MB "
              "out, the 2x tier %.2f MB in (parameters + gradients: %.2f MB); no NVMe traffic", mode, ck, st.peak, minb,
              st.bytes[MT_LINK_H2C] / 1e6, st.bytes[MT_LINK_C2H] / 1e6, sb.bytes[MT_LINK_H2C] / 1e6, chunks / 1e6);
        TL_OK(memcmp(l0, l1, sizeof l0) == 0 && memcmp(l0, l2, sizeof l0) == 0,
              "%s%s: losses bitwise equal at every budget (%.7f %.7f ... %.7f)", mode, ck, l0[0], l0[1], l0[STEPS - 1]);
        TL_OK(tl_lm_same_weights(ref, a) && tl_lm_same_weights(ref, b), "%s%s: weights bitwise equal after %d steps",
              mode, ck, STEPS);
        mt_plan_summary now;
        mt_resident_get_plan_summary(col_lm_trainer_compute_tier(a), &now);
        TL_OK(st.traced && st.async == (async != 0) && st.runs == STEPS && now.step_s != est.step_s &&
                  now.step_s > 0 && st.run_s > 0 && st.total_run_s >= st.run_s && st.total_wait_s >= st.wait_s &&
                  st.total_busy_s[MT_LINK_H2C] > 0 && st.total_busy_s[MT_LINK_C2H] > 0,
              "%s%s: the first step was traced and the plan made again (simulated step %.3f ms from estimates, %.3f "
              "ms measured, horizon %.3f ms); last step %.3f ms, %.3f ms waiting, %.3f + %.3f ms of transfers", mode,
              ck, 1e3 * est.step_s, 1e3 * now.step_s, 1e3 * now.prefetch_s, 1e3 * st.run_s, 1e3 * st.wait_s,
              1e3 * st.busy_s[MT_LINK_H2C], 1e3 * st.busy_s[MT_LINK_C2H]);
        col_lm_trainer_free(a);
        col_lm_trainer_free(b);
    }
    /* the mutation that proves the checking mode sees a lost write-back: the tier forgets that ops wrote
     * gradient chunks, so a clean eviction puts the home's old bytes back and the gradients are lost */
    if (ref && !checkpoint) {
        col_lm_train_config tight = config(minb, checkpoint);
        col_lm_trainer *lost = NULL;
        float l3[STEPS];
        bool ran = col_lm_trainer_create(&tight, &be, &lost, &err) == COL_OK;
        if (ran) {
            mt_resident *r = col_lm_trainer_compute_tier(lost);
            mt_resident_poison_home(r, true);
            mt_resident_forget_dirty(r, true);
            ran = tl_lm_steps(lost, 0, STEPS, 5, V, l3, &err);
        }
        TL_OK(ran && (memcmp(l0, l3, sizeof l0) != 0 || !tl_lm_same_weights(ref, lost)),
              "checking mode with write-backs lost (dirty bits forgotten): the results differ (loss %.7f, not "
              "%.7f)%s%s", ran ? l3[STEPS - 1] : 0.0f, l0[STEPS - 1], ran ? "" : ": ", ran ? "" : err.msg);
        col_lm_trainer_free(lost);
    }
    col_lm_trainer_free(ref);

    col_lm_train_config small = config(minb - 1, checkpoint);
    t = NULL;
    char want[64];
    snprintf(want, sizeof want, "%zu", minb);
    TL_OK(col_lm_trainer_create(&small, &be, &t, &err) == COL_ENOMEM && strstr(err.msg, want) &&
              err.settings == 1u << COL_SETTING_COMPUTE_BUDGET,
          "one byte less is refused, naming the smallest budget (the compute tier budget marked): %s", err.msg);
    col_lm_trainer_free(t);
}

/* ---- a small MLP on a pool of our own: NVMe-home chunks, faults, a shared arena ---- */

enum { N = 16, D = 24, H = 40, C = 20, NL = 3, NP = 2 * NL, MSTEPS = 4 };
static const int64_t dims[NL + 1] = {D, H, H, C};

typedef struct {
    mt_pool *pool;
    mt_ref w[NP], g[NP]; /* weight l at 2l, bias at 2l + 1 */
    col_graph *gr;       /* one graph, two plans: */
    col_plan *plan[2];   /* training (loss and gradients), evaluation (the loss only) */
    col_node *p[NP], *loss;
    float x[N * D];
    int32_t y[N];
} mlp;

static int64_t numel(int i) { return i % 2 ? dims[i / 2 + 1] : dims[i / 2 + 1] * dims[i / 2]; }

/* a tensor's values wherever its chunk lives: read-modify-write of the whole chunk for NVMe */
static bool tensor_io(mt_pool *pool, mt_ref ref, float *v, bool put)
{
    float *h = mt_ptr(pool, ref);
    if (h) {
        memcpy(put ? h : v, put ? v : h, ref.bytes);
        return true;
    }
    col_err e = {0};
    char *buf = mt_nvme_alloc_buffer(mt_chunk_io_bytes(pool, ref.chunk));
    bool ok = buf && mt_chunk_read(pool, ref.chunk, buf, &e) == COL_OK;
    if (ok && !put)
        memcpy(v, buf + ref.offset, ref.bytes);
    if (ok && put) {
        memcpy(buf + ref.offset, v, ref.bytes);
        ok = mt_chunk_write(pool, ref.chunk, buf, &e) == COL_OK;
    }
    if (!ok)
        TL_NOTE("chunk %d: %s", ref.chunk, e.msg);
    free(buf);
    return ok;
}

static col_node *build(mlp *m)
{
    col_graph *g = m->gr = col_graph_new();
    int64_t sx[2] = {N, D}, sy[1] = {N};
    col_node *x = col_input(g, "x", COL_F32, 2, sx), *y = col_input(g, "y", COL_I32, 1, sy), *h = x;
    col_bind(x, m->x, NULL);
    col_bind(y, m->y, NULL);
    for (int l = 0; l < NL; l++) {
        int64_t sw[2] = {dims[l + 1], dims[l]}, sb[1] = {dims[l + 1]};
        col_node *w = m->p[2 * l] = col_param(g, "w", COL_F32, 2, sw);
        col_node *b = m->p[2 * l + 1] = col_param(g, "b", COL_F32, 1, sb);
        h = col_linear(g, h, w, b);
        if (l + 1 < NL)
            h = col_tanh(g, h);
    }
    col_node *loss = m->loss = col_cross_entropy(g, h, y, -1);
    col_mark_output(loss);
    for (int i = 0; i < NP; i++) { /* NVMe chunks: the placeholder addresses */
        col_bind(m->p[i], mt_addr(m->pool, m->w[i]), NULL);
        col_bind_grad(m->p[i], mt_addr(m->pool, m->g[i]), NULL);
    }
    return loss;
}

/* the pool (the kinds in nvme_kinds on the NVMe tier), the same initial weights every time, the graph planned twice */
static bool mlp_make(mlp *m, unsigned nvme_kinds, const mt_nvme_faults *faults, col_err *err)
{
    memset(m, 0, sizeof *m);
    mt_config mc = {.chunk_bytes = 4096, .nvme_dir = nvme_kinds ? dir : NULL, .nvme_kinds = nvme_kinds,
                    .nvme_faults = faults};
    if (mt_create(&mc, &m->pool, err) != COL_OK)
        return false;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NP; i++)
            if (mt_alloc(m->pool, k ? MT_GRAD : MT_PARAM, sizeof(float) * (size_t)numel(i), k ? &m->g[i] : &m->w[i],
                         err) != COL_OK)
                return false;
    float v[H * H];
    for (int i = 0; i < NP; i++) {
        col_fill_uniform(v, numel(i), 100 + (uint64_t)i, -0.3f, 0.3f);
        if (!tensor_io(m->pool, m->w[i], v, true))
            return col_err_set(err, COL_EIO, "cannot write the initial weights"), false;
    }
    col_node *lt = build(m);
    return col_graph_backward(m->gr, lt, err) == COL_OK && col_plan_create(m->gr, &m->plan[0], err) == COL_OK &&
           col_plan_create_for(m->gr, NULL, &lt, 1, &m->plan[1], err) == COL_OK;
}

static void mlp_free(mlp *m)
{
    for (int k = 0; k < 2; k++)
        col_plan_free(m->plan[k]);
    col_graph_free(m->gr);
    mt_destroy(m->pool);
}

/* one batch for every step: the losses must fall */
static void batch(mlp *m)
{
    col_fill_uniform(m->x, N * D, 500, -1, 1);
    col_rng r;
    col_rng_init(&r, 900);
    for (int i = 0; i < N; i++)
        m->y[i] = (int32_t)col_rng_below(&r, C);
}

/* SGD through read-modify-write of the home copies */
static bool sgd(mlp *m)
{
    float w[H * H], g[H * H];
    bool ok = true;
    for (int i = 0; i < NP && ok; i++) {
        ok = tensor_io(m->pool, m->w[i], w, false) && tensor_io(m->pool, m->g[i], g, false);
        for (int64_t j = 0; j < numel(i); j++)
            w[j] -= 0.1f * g[j];
        ok = ok && tensor_io(m->pool, m->w[i], w, true);
    }
    return ok;
}

/* MSTEPS steps: train (gradients of step 0 kept), SGD, evaluate; rt / re NULL: plain runs */
typedef struct {
    float loss[MSTEPS], eval[MSTEPS], grad0[NP][H * H], w[NP][H * H];
} outcome;

static bool mlp_steps(mlp *m, mt_resident *rt, mt_resident *re, outcome *o, col_err *err)
{
    memset(o, 0, sizeof *o);
    bool ok = true;
    for (int s = 0; s < MSTEPS && ok; s++) {
        batch(m);
        mt_zero(m->pool, MT_GRAD);
        ok = (rt ? mt_resident_run(rt, &be, s, err) : col_plan_run(m->plan[0], &be, err)) == COL_OK;
        if (ok)
            o->loss[s] = *(const float *)col_plan_data(m->plan[0], m->loss);
        for (int i = 0; i < NP && ok && s == 0; i++)
            ok = tensor_io(m->pool, m->g[i], o->grad0[i], false);
        ok = ok && sgd(m);
        ok = ok && (re ? mt_resident_run(re, &be, s, err) : col_plan_run(m->plan[1], &be, err)) == COL_OK;
        if (ok)
            o->eval[s] = *(const float *)col_plan_data(m->plan[1], m->loss);
    }
    for (int i = 0; i < NP && ok; i++)
        ok = tensor_io(m->pool, m->w[i], o->w[i], false);
    return ok;
}

static size_t min_budget(mlp *m, int which)
{
    mt_resident *r = NULL;
    col_err err = {0};
    mt_resident_stats st = {0};
    if (mt_resident_create(m->pool, m->plan[which], (size_t)1 << 40, &r, &err) == COL_OK)
        mt_resident_get_stats(r, &st);
    mt_resident_free(r);
    return st.min_budget;
}

static bool same(const outcome *a, const outcome *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static void test_nvme_home(const outcome *ref)
{
    static const struct {
        unsigned kinds;
        const char *what;
    } homes[] = {{1u << MT_PARAM | 1u << MT_GRAD, "parameters and gradients"}, {1u << MT_PARAM, "parameters"}};
    for (size_t h = 0; h < sizeof homes / sizeof homes[0]; h++)
        for (int f = 1; f <= 2; f++)
            for (int async = 1; async >= 0; async--) {
                col_err err = {0};
                mlp m;
                mt_resident *r = NULL, *re = NULL; /* training; evaluation (a plain run would touch the placeholders) */
                outcome o = {{0}};
                bool ok = mlp_make(&m, homes[h].kinds, NULL, &err);
                size_t minb = ok ? min_budget(&m, 0) : 0, mine = ok ? min_budget(&m, 1) : 0;
                ok = ok && mt_resident_create(m.pool, m.plan[0], f * minb, &r, &err) == COL_OK &&
                     mt_resident_create(m.pool, m.plan[1], f * mine, &re, &err) == COL_OK;
                if (ok) {
                    mt_resident_poison_home(r, true);
                    mt_resident_set_async(r, async);
                    mt_resident_poison_home(re, true);
                    mt_resident_set_async(re, async);
                }
                uint64_t written = mt_nvme_bytes_written(m.pool);
                ok = ok && mlp_steps(&m, r, re, &o, &err);
                mt_plan_summary sum = {0};
                if (r)
                    mt_resident_get_plan_summary(r, &sum);
                TL_OK(ok && same(ref, &o), "%s on NVMe, %s, %dx the smallest tier (%zu bytes): losses, step-0 "
                      "gradients and weights after %d SGD steps bitwise those of plain runs (%.7f ... %.7f; traced "
                      "plan: horizon %.3f of %.3f ms per step) %s", homes[h].what, async ? "async" : "sync", f, f * minb,
                      MSTEPS, o.loss[0], o.loss[MSTEPS - 1], 1e3 * sum.prefetch_s, 1e3 * sum.step_s, err.msg);
                if (ok && f == 1 && async) {
                    mt_resident_stats st;
                    mt_resident_get_stats(r, &st);
                    /* the SGD writes every weight chunk once per step besides the tier's write-backs */
                    uint64_t sgd_bytes = 0;
                    for (int c = 0; c < mt_chunk_count(m.pool); c++) {
                        mt_chunk_info ci;
                        mt_chunk_get(m.pool, c, &ci, NULL);
                        if (ci.kind == MT_PARAM)
                            sgd_bytes += MSTEPS * mt_chunk_io_bytes(m.pool, c) * (uint64_t)ci.ntensors;
                    }
                    uint64_t tier_w = mt_nvme_bytes_written(m.pool) - written - sgd_bytes;
                    TL_OK(st.bytes[MT_LINK_N2H] > 0 && st.bytes[MT_LINK_H2N] == tier_w &&
                              st.bytes[MT_LINK_H2C] >= st.bytes[MT_LINK_N2H] && st.busy_s[MT_LINK_N2H] > 0 &&
                              (homes[h].kinds & 1u << MT_GRAD ? tier_w > 0 : tier_w == 0),
                          "%s on NVMe: %.1f KB read from NVMe, %.1f KB written back to it (the store wrote %.1f KB "
                          "besides the SGD)", homes[h].what, st.bytes[MT_LINK_N2H] / 1e3, st.bytes[MT_LINK_H2N] / 1e3,
                          tier_w / 1e3);
                }
                mt_resident_free(r);
                mt_resident_free(re);
                mlp_free(&m);
            }
}

/* fail the fail_at-th read (or write) of the store once armed */
typedef struct {
    int op, n, fail_at;
    bool armed;
} fault_state;

static int fault(void *user, int op, int slot, size_t bytes)
{
    (void)slot, (void)bytes;
    fault_state *f = user;
    if (f->armed && op == f->op && ++f->n == f->fail_at)
        return -EIO;
    return 0;
}

static void test_faults(const outcome *ref)
{
    for (int w = 0; w <= 1; w++)
        for (int async = 1; async >= 0; async--) {
            col_err err = {0};
            const char *what = w ? "writing a gradient back" : "reading a chunk";
            fault_state fs = {.op = w ? MT_NVME_OP_WRITE : MT_NVME_OP_READ, .fail_at = 2};
            mt_nvme_faults hook = {.before_submit = fault, .user = &fs};
            mlp m;
            mt_resident *r = NULL;
            bool ok = mlp_make(&m, 1u << MT_PARAM | 1u << MT_GRAD, &hook, &err);
            size_t minb = ok ? min_budget(&m, 0) : 0;
            ok = ok && mt_resident_create(m.pool, m.plan[0], minb, &r, &err) == COL_OK;
            TL_OK(ok, "a pool with faults: %s", err.msg);
            if (!ok) {
                mt_resident_free(r);
                mlp_free(&m);
                continue;
            }
            mt_resident_set_async(r, async);
            batch(&m);
            mt_zero(m.pool, MT_GRAD);
            if (w) { /* gradients are only written once read back, so a step first */
                TL_OK(mt_resident_run(r, &be, 0, &err) == COL_OK, "a clean step before the write fault: %s", err.msg);
                if (!sgd(&m))
                    TL_NOTE("sgd failed");
            }
            fs.armed = true;
            col_status st = mt_resident_run(r, &be, 1, &err);
            TL_OK(st == COL_EIO && strstr(err.msg, "NVMe") && fs.n >= fs.fail_at,
                  "%s, an EIO %s fails the run with its message: %s", async ? "async" : "sync", what, err.msg);
            bool home = true;
            for (int i = 0; i < NP; i++)
                home &= m.p[i]->bound == mt_addr(m.pool, m.w[i]) && m.p[i]->grad_data == mt_addr(m.pool, m.g[i]);
            TL_OK(home, "after the failed run every parameter and gradient is bound home (placeholders)");
            if (!w) { /* the weights were only read: the next step is step 0 of the plain run */
                mt_zero(m.pool, MT_GRAD);
                col_err_clear(&err);
                st = mt_resident_run(r, &be, 2, &err);
                TL_OK(st == COL_OK && *(const float *)col_plan_data(m.plan[0], m.loss) == ref->loss[0],
                      "the next run goes through and gives the reference loss %.7f: %s", ref->loss[0], err.msg);
            }
            mt_resident_free(r);
            mlp_free(&m);
        }
}

/* every NVMe transfer takes a millisecond more: the traced plan prefetches far ahead */
static int slow(void *user, int op, int slot, size_t bytes)
{
    (void)user, (void)op, (void)slot, (void)bytes;
    usleep(1000);
    return 0;
}

static void test_slow_nvme(const outcome *ref)
{
    for (int async = 1; async >= 0; async--) {
        col_err err = {0};
        mt_nvme_faults hook = {.before_submit = slow};
        mlp m;
        mt_resident *r = NULL, *re = NULL;
        outcome o = {{0}};
        bool ok = mlp_make(&m, 1u << MT_PARAM | 1u << MT_GRAD, &hook, &err);
        size_t minb = ok ? min_budget(&m, 0) : 0, mine = ok ? min_budget(&m, 1) : 0;
        ok = ok && mt_resident_create(m.pool, m.plan[0], 3 * minb, &r, &err) == COL_OK &&
             mt_resident_create(m.pool, m.plan[1], 3 * mine, &re, &err) == COL_OK;
        mt_plan_summary before = {0}, after = {0};
        if (ok) {
            mt_resident_set_async(r, async);
            mt_resident_set_async(re, async);
            mt_resident_get_plan_summary(r, &before);
        }
        ok = ok && mlp_steps(&m, r, re, &o, &err);
        mt_resident_stats st = {0};
        if (ok) {
            mt_resident_get_plan_summary(r, &after);
            mt_resident_get_stats(r, &st);
        }
        TL_OK(ok && same(ref, &o) && st.traced && after.prefetch_s > 0 && after.step_s > before.step_s,
              "slow NVMe, %s: the traced plan prefetches %.2f ms ahead (simulated step %.2f ms, %.2f ms from the "
              "estimates; the last run took %.2f ms, %.2f ms of it waiting); results bitwise those of plain runs %s",
              async ? "async" : "sync", 1e3 * after.prefetch_s, 1e3 * after.step_s, 1e3 * before.step_s,
              1e3 * st.run_s, 1e3 * st.wait_s, err.msg);
        mt_resident_free(r);
        mt_resident_free(re);
        mlp_free(&m);
    }
}

static void test_shared_arena(const outcome *ref)
{
    col_err err = {0};
    outcome o[2];
    size_t arena[2][2] = {{0}};
    size_t budget = 0, act[2] = {0};
    for (int share = 0; share <= 1; share++) {
        mlp m;
        mt_resident *r[2] = {NULL, NULL};
        bool ok = mlp_make(&m, 0, NULL, &err);
        if (ok && !budget) {
            size_t a = min_budget(&m, 0), b = min_budget(&m, 1);
            budget = a > b ? a : b;
        }
        for (int k = 0; k < 2 && ok; k++) {
            ok = mt_resident_create(m.pool, m.plan[k], budget, &r[k], &err) == COL_OK;
            if (ok)
                mt_resident_poison_home(r[k], true);
        }
        if (ok && share)
            ok = mt_resident_share_arena(r[1], r[0], &err) == COL_OK;
        ok = ok && mlp_steps(&m, r[0], r[1], &o[share], &err);
        TL_OK(ok && same(ref, &o[share]), "%s arena: training and evaluation losses and weights bitwise those of "
              "plain runs (eval %.7f ... %.7f) %s", share ? "one shared" : "separate", o[share].eval[0],
              o[share].eval[MSTEPS - 1], err.msg);
        for (int k = 0; k < 2 && ok; k++) {
            mt_resident_stats st;
            mt_resident_get_stats(r[k], &st);
            arena[share][k] = st.arena;
            act[k] = st.activations;
            ok = st.shared == (share != 0);
        }
        TL_OK(ok, "%s: the stats say so", share ? "shared" : "separate");
        /* free order must not matter: the shared one the other way round */
        mt_resident_free(r[share]);
        mt_resident_free(r[1 - share]);
        mlp_free(&m);
    }
    size_t need0 = budget - act[0], need1 = budget - act[1], most = need0 > need1 ? need0 : need1;
    TL_OK(act[0] > act[1] && arena[0][0] == need0 && arena[0][1] == need1 && arena[1][0] == most &&
              arena[1][1] == most,
          "budget %zu: training holds %zu bytes of activations, evaluation %zu; separate arenas %zu + %zu bytes, "
          "the shared one %zu (the larger need)", budget, act[0], act[1], arena[0][0], arena[0][1], arena[1][0]);
}

static void test_mlp(void)
{
    col_err err = {0};
    mlp m;
    outcome ref = {{0}};
    bool ok = mlp_make(&m, 0, NULL, &err) && mlp_steps(&m, NULL, NULL, &ref, &err);
    TL_OK(ok && isfinite(ref.loss[0]) && ref.loss[MSTEPS - 1] < ref.loss[0],
          "MLP, plain runs, host pool: losses %.7f ... %.7f %s", ref.loss[0], ref.loss[MSTEPS - 1], err.msg);
    mlp_free(&m);
    if (!ok)
        return;
    test_nvme_home(&ref);
    test_faults(&ref);
    test_slow_nvme(&ref);
    test_shared_arena(&ref);
}

int main(void)
{
    tl_mkdtemp(dir);
    tl_cpu_backend(&be);
    run_case(false);
    run_case(true);
    test_mlp();
    col_cpu_backend_free(&be);
    if (rmdir(dir) != 0)
        TL_NOTE("could not remove %s", dir);
    return tl_done();
}
