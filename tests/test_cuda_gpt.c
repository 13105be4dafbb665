/* test_cuda_gpt.c - a whole training step on the GPU against the CPU (issue 6).
 *
 * A tiny GPT-2 and a tiny LLaMA (GQA, RoPE, RMSNorm, SwiGLU) training graph
 * is built as models/lm/lm_trainer.c builds it (col_lm_build, training, loss,
 * col_graph_backward) and run on the CPU backend with a host plan. The same
 * graph is built again and planned with col_plan_create_on(cuda): weights
 * (the CPU's initial values) and gradient buffers in device memory, ids and
 * targets uploaded with col_plan_upload, the loss downloaded with
 * col_plan_download. Dropout off and on (p = 0.1, same seed and run counter:
 * the CUDA dropout draws the CPU's Philox stream, so the same masks).
 *
 * Bounds, all relative with a floor of the tensor's mean magnitude, per
 * element: |gpu - cpu| <= tol (|cpu| + mean |cpu|) (the metric of
 * test_cuda_ops):
 *   f32 matmuls:  loss and every gradient, tol 1e-4 (the f32 bound);
 *   TF32 matmuls: tol 2e-2 for gradients, 5e-3 for the loss (not
 *                 calibrated on a GPU yet: TF32 rounds inputs to 11
 *                 significant bits, ~5e-4 per product, and the errors of
 *                 both blocks and the loss head add up).
 * Optimizer (col_cuda_opt_step against col_opt_step), on identical inputs
 * (the CPU's gradients uploaded), two steps so m and v are not zero:
 *   AdamW, SGD with momentum, Nesterov, plain SGD: weights and state within
 *   relative 1e-6 per element, |gpu - cpu| <= 1e-6 |cpu| (the kernels use the
 *   same rounded operations in the same order, so they are expected to be
 *   bitwise equal; the count of equal elements is printed).
 * End to end (f32): one AdamW step on each side from its own gradients; the
 * weights agree within 1e-5 (|w| + lr) except where the CPU gradient is so
 * small (|g| <= 1e-3 mean |g|) that its sign, and so Adam's first step of
 * +-lr, is not determined by f32 arithmetic (those are counted, and must be
 * rare).
 *
 * Without a CUDA device it prints "1..0 # SKIP ..." and passes.
 * Run alone: make tests/test_cuda_gpt && ./tests/test_cuda_gpt */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "hf_config.h"
#include "lm.h"
#include "optim.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "cuda_testutil.h"
#include "backend_cpu.h"

/* cudart reserves address space that ASan's shadow gap would block, and the
 * CUDA driver keeps allocations until exit (for sanitizer builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "protect_shadow_gap=0"; }
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcuda.so\nleak:libcudart.so\nleak:libcublas\n"; }

static col_backend cpu, gpu;

enum { B = 2, T = 16, MAXP = 64 };

#define TOL_F32 1e-4
#define TOL_TF32_GRAD 2e-2
#define TOL_TF32_LOSS 5e-3
#define TOL_OPT 1e-6
#define LR 1e-3f

/* a model: config, parameter specs and their initial values (host) */
typedef struct {
    const char *name;
    col_lm_config cfg;
    int np;
    col_param_spec specs[MAXP];
    float *init[MAXP];
    int64_t numel[MAXP];
    int32_t ids[B * T], tg[B * T];
} model;

/* one built and planned instance of it, on the CPU or the GPU */
typedef struct {
    bool dev;
    col_graph *g;
    col_lm_graph gg;
    col_node *params[MAXP];
    col_plan *plan;
    float *w[MAXP], *gr[MAXP]; /* host or device */
} inst;

/* the results of a run, on the host */
typedef struct {
    float loss;
    float *grads[MAXP];
} result;

static bool model_init(model *m, const char *name, col_lm_config cfg)
{
    memset(m, 0, sizeof *m);
    m->name = name;
    m->cfg = cfg;
    m->np = col_lm_param_count(&cfg);
    if (m->np > MAXP)
        return false;
    col_lm_param_specs(&cfg, m->specs);
    for (int i = 0; i < m->np; i++) {
        m->numel[i] = col_param_numel(&m->specs[i]);
        m->init[i] = malloc(sizeof(float) * (size_t)m->numel[i]);
        if (!m->init[i])
            return false;
        col_lm_init_param(&cfg, &m->specs[i], i, m->init[i], 1234);
    }
    /* norm weights of 1 and zero biases hide mistakes in their gradients'
     * use: perturb every tensor a little */
    col_rng r;
    col_rng_init(&r, 77);
    for (int i = 0; i < m->np; i++)
        for (int64_t j = 0; j < m->numel[i]; j++)
            m->init[i][j] += 0.05f * (col_rng_uniform(&r) - 0.5f);
    for (int i = 0; i < B * T; i++) {
        m->ids[i] = (int32_t)col_rng_below(&r, (uint64_t)cfg.vocab_size);
        m->tg[i] = (int32_t)col_rng_below(&r, (uint64_t)cfg.vocab_size);
    }
    m->tg[3] = -1; /* an ignored position */
    return true;
}

static void model_free(model *m)
{
    for (int i = 0; i < m->np; i++)
        free(m->init[i]);
}

static size_t nbytes(const model *m, int i) { return sizeof(float) * (size_t)m->numel[i]; }

static void inst_free(const model *m, inst *x)
{
    col_plan_free(x->plan);
    for (int i = 0; i < m->np; i++) {
        if (x->dev) {
            col_cuda_free(&gpu, x->w[i]);
            col_cuda_free(&gpu, x->gr[i]);
        } else {
            free(x->w[i]);
            free(x->gr[i]);
        }
    }
    col_graph_free(x->g);
    memset(x, 0, sizeof *x);
}

/* gradients to zero, weights to the initial values */
static col_status inst_reset(const model *m, inst *x, col_err *err)
{
    for (int i = 0; i < m->np; i++) {
        if (!x->dev) {
            memcpy(x->w[i], m->init[i], nbytes(m, i));
            memset(x->gr[i], 0, nbytes(m, i));
            continue;
        }
        col_status st = col_cuda_to_device(&gpu, x->w[i], m->init[i], nbytes(m, i), err);
        if (st == COL_OK)
            st = col_cuda_memset(&gpu, x->gr[i], 0, nbytes(m, i), err);
        if (st != COL_OK)
            return st;
    }
    return col_cuda_sync(&gpu, err);
}

/* the training graph as lm_trainer.c builds it, its memory, its plan */
static col_status inst_build(const model *m, bool dev, float dropout, inst *x, col_err *err)
{
    memset(x, 0, sizeof *x);
    x->dev = dev;
    col_lm_config cfg = m->cfg;
    cfg.dropout = dropout;
    x->g = col_graph_new();
    x->gg.params = x->params;
    if (!x->g)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    col_lm_build_opts o = {.batch = B, .seq = T, .with_loss = true, .training = true, .dropout_seed = 5};
    col_status st = col_lm_build(x->g, &cfg, &o, &x->gg, err);
    if (st == COL_OK)
        st = col_graph_backward(x->g, x->gg.loss, err);
    for (int i = 0; i < m->np && st == COL_OK; i++) {
        if (dev) {
            st = col_cuda_alloc(&gpu, nbytes(m, i), (void **)&x->w[i], err);
            if (st == COL_OK)
                st = col_cuda_alloc(&gpu, nbytes(m, i), (void **)&x->gr[i], err);
        } else {
            x->w[i] = malloc(nbytes(m, i));
            x->gr[i] = malloc(nbytes(m, i));
            if (!x->w[i] || !x->gr[i])
                st = col_err_set(err, COL_ENOMEM, "out of memory");
        }
        if (st == COL_OK)
            st = col_bind(x->params[i], x->w[i], err);
        if (st == COL_OK)
            st = col_bind_grad(x->params[i], x->gr[i], err);
    }
    if (st == COL_OK)
        st = inst_reset(m, x, err);
    if (st == COL_OK)
        st = dev ? col_plan_create_on(x->g, &gpu, &x->plan, err) : col_plan_create(x->g, &x->plan, err);
    return st;
}

/* one forward + backward from zeroed gradients; loss and gradients to the host */
static col_status inst_run(const model *m, inst *x, result *r, col_err *err)
{
    col_status st = COL_OK;
    for (int i = 0; i < m->np && st == COL_OK; i++)
        st = x->dev ? col_cuda_memset(&gpu, x->gr[i], 0, nbytes(m, i), err) : (memset(x->gr[i], 0, nbytes(m, i)), COL_OK);
    if (st == COL_OK)
        st = col_plan_upload(x->plan, x->gg.ids, m->ids, sizeof m->ids, err);
    if (st == COL_OK)
        st = col_plan_upload(x->plan, x->gg.targets, m->tg, sizeof m->tg, err);
    col_graph_set_rng_counter(x->g, 2);
    if (st == COL_OK)
        st = col_plan_run(x->plan, x->dev ? &gpu : &cpu, err);
    if (st == COL_OK)
        st = col_plan_download(x->plan, x->gg.loss, &r->loss, sizeof r->loss, err);
    for (int i = 0; i < m->np && st == COL_OK; i++) {
        if (!r->grads[i] && !(r->grads[i] = malloc(nbytes(m, i))))
            return col_err_set(err, COL_ENOMEM, "out of memory");
        if (x->dev)
            st = col_cuda_to_host(&gpu, r->grads[i], x->gr[i], nbytes(m, i), err);
        else
            memcpy(r->grads[i], x->gr[i], nbytes(m, i));
    }
    return st;
}

static void result_free(const model *m, result *r)
{
    for (int i = 0; i < m->np; i++)
        free(r->grads[i]);
    memset(r, 0, sizeof *r);
}

/* worst |d - c| / (|c| + mean |c|) (INFINITY on a NaN/inf mismatch) */
static double rel_err(const float *d, const float *c, int64_t n)
{
    double mean = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        mean += isfinite(c[i]) ? fabs(c[i]) : 0;
    mean = n ? mean / (double)n : 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(c[i]) || !isfinite(d[i])) {
            if (memcmp(&c[i], &d[i], sizeof(float)) != 0 && !(isnan(c[i]) && isnan(d[i])))
                return INFINITY;
            continue;
        }
        double e = fabs((double)d[i] - c[i]) / (fabs(c[i]) + mean + 1e-30);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* loss and gradients of a GPU run against the CPU's */
static void compare_run(const model *m, const char *what, const result *c, const result *d, double tol_loss,
                        double tol_grad)
{
    double le = fabs((double)d->loss - c->loss) / fabs(c->loss);
    TL_OK(le <= tol_loss, "%s %s: loss gpu %.7f cpu %.7f (relative %.2e, bound %.0e)", m->name, what, d->loss, c->loss, le,
          tol_loss);
    double worst = 0;
    int wi = 0, bad = 0;
    for (int i = 0; i < m->np; i++) {
        double e = rel_err(d->grads[i], c->grads[i], m->numel[i]);
        if (e > tol_grad) {
            bad++;
            TL_NOTE("%s %s: gradient of %s off by %.2e", m->name, what, m->specs[i].name, e);
        }
        if (e > worst || i == 0)
            worst = e, wi = i;
    }
    TL_OK(bad == 0, "%s %s: %d gradients within %.0e (worst %.2e, %s)", m->name, what, m->np, tol_grad, worst,
          m->specs[wi].name);
}

/* ---- the optimizer on identical inputs ---- */

typedef struct {
    float *w, *g, *m, *v; /* host */
    float *dw, *dg, *dm, *dv; /* device */
} opt_bufs;

static void opt_check(const model *m, const result *cpu_res, const char *label, col_opt_config oc)
{
    int np = m->np, slots = col_opt_state_slots(oc.kind, oc.momentum);
    opt_bufs *b = calloc((size_t)np, sizeof *b);
    col_opt_tensor *ht = calloc((size_t)np, sizeof *ht), *dt = calloc((size_t)np, sizeof *dt);
    col_err err = {0};
    col_status st = b && ht && dt ? COL_OK : col_err_set(&err, COL_ENOMEM, "out of memory");
    for (int i = 0; i < np && st == COL_OK; i++) {
        size_t nb = nbytes(m, i);
        b[i].w = malloc(nb), b[i].g = malloc(nb), b[i].m = calloc(1, nb), b[i].v = calloc(1, nb);
        if (!b[i].w || !b[i].g || !b[i].m || !b[i].v) {
            st = col_err_set(&err, COL_ENOMEM, "out of memory");
            break;
        }
        memcpy(b[i].w, m->init[i], nb);
        memcpy(b[i].g, cpu_res->grads[i], nb);
        st = col_cuda_alloc(&gpu, nb, (void **)&b[i].dw, &err);
        if (st == COL_OK)
            st = col_cuda_alloc(&gpu, nb, (void **)&b[i].dg, &err);
        if (st == COL_OK)
            st = col_cuda_alloc(&gpu, nb, (void **)&b[i].dm, &err);
        if (st == COL_OK)
            st = col_cuda_alloc(&gpu, nb, (void **)&b[i].dv, &err);
        if (st == COL_OK)
            st = col_cuda_to_device(&gpu, b[i].dw, b[i].w, nb, &err);
        if (st == COL_OK)
            st = col_cuda_to_device(&gpu, b[i].dg, b[i].g, nb, &err);
        if (st == COL_OK)
            st = col_cuda_memset(&gpu, b[i].dm, 0, nb, &err);
        if (st == COL_OK)
            st = col_cuda_memset(&gpu, b[i].dv, 0, nb, &err);
        bool decay = m->specs[i].decay;
        ht[i] = (col_opt_tensor){b[i].w, b[i].g, slots >= 1 ? b[i].m : NULL, slots >= 2 ? b[i].v : NULL, m->numel[i], decay};
        dt[i] = (col_opt_tensor){b[i].dw, b[i].dg, slots >= 1 ? b[i].dm : NULL, slots >= 2 ? b[i].dv : NULL, m->numel[i],
                                 decay};
    }
    for (int64_t s = 1; s <= 2 && st == COL_OK; s++) {
        st = col_opt_step(&oc, LR, s, ht, np, &err);
        if (st == COL_OK)
            st = col_cuda_opt_step(&gpu, &oc, LR, s, dt, np, &err);
    }
    if (st == COL_OK)
        st = col_cuda_sync(&gpu, &err);
    double worst = 0;
    int64_t total = 0, equal = 0;
    for (int i = 0; i < np && st == COL_OK; i++) {
        size_t nb = nbytes(m, i);
        float *hv[3] = {b[i].w, b[i].m, b[i].v}, *dv[3] = {b[i].dw, b[i].dm, b[i].dv};
        float *back = malloc(nb);
        for (int k = 0; k < 1 + slots && st == COL_OK && back; k++) {
            st = col_cuda_to_host(&gpu, back, dv[k], nb, &err);
            for (int64_t j = 0; j < m->numel[i] && st == COL_OK; j++) {
                double c = hv[k][j], d = back[j], e = fabs(d - c) / (fabs(c) + 1e-38);
                if (d == c)
                    e = 0;
                worst = e > worst ? e : worst;
                equal += memcmp(&hv[k][j], &back[j], sizeof(float)) == 0;
                total++;
            }
        }
        if (!back)
            st = col_err_set(&err, COL_ENOMEM, "out of memory");
        free(back);
    }
    TL_OK(st == COL_OK && worst <= TOL_OPT,
          "%s %s: 2 steps, weights%s within relative %.0e of col_opt_step (worst %.2e; %lld of %lld values bitwise equal)%s%s",
          m->name, label, slots == 2 ? ", m, v" : slots == 1 ? ", momentum" : "", TOL_OPT, worst, (long long)equal,
          (long long)total, st == COL_OK ? "" : ": ", st == COL_OK ? "" : err.msg);
    for (int i = 0; b && i < np; i++) {
        free(b[i].w), free(b[i].g), free(b[i].m), free(b[i].v);
        col_cuda_free(&gpu, b[i].dw), col_cuda_free(&gpu, b[i].dg), col_cuda_free(&gpu, b[i].dm);
        col_cuda_free(&gpu, b[i].dv);
    }
    free(b), free(ht), free(dt);
}

/* one AdamW step on each side from its own gradients (f32 run) */
static void end_to_end(const model *m, inst *gx, const result *c)
{
    col_opt_config oc = col_opt_defaults(COL_OPT_ADAMW);
    int np = m->np;
    col_err err = {0};
    col_opt_tensor *ht = calloc((size_t)np, sizeof *ht), *dt = calloc((size_t)np, sizeof *dt);
    float **hw = calloc((size_t)np, sizeof *hw), **hm = calloc((size_t)np, sizeof *hm), **hv = calloc((size_t)np, sizeof *hv);
    float **dm = calloc((size_t)np, sizeof *dm), **dv = calloc((size_t)np, sizeof *dv);
    col_status st = ht && dt && hw && hm && hv && dm && dv ? COL_OK : col_err_set(&err, COL_ENOMEM, "out of memory");
    for (int i = 0; i < np && st == COL_OK; i++) {
        size_t nb = nbytes(m, i);
        hw[i] = malloc(nb), hm[i] = calloc(1, nb), hv[i] = calloc(1, nb);
        if (!hw[i] || !hm[i] || !hv[i]) {
            st = col_err_set(&err, COL_ENOMEM, "out of memory");
            break;
        }
        memcpy(hw[i], m->init[i], nb);
        st = col_cuda_alloc(&gpu, nb, (void **)&dm[i], &err);
        if (st == COL_OK)
            st = col_cuda_alloc(&gpu, nb, (void **)&dv[i], &err);
        if (st == COL_OK)
            st = col_cuda_memset(&gpu, dm[i], 0, nb, &err);
        if (st == COL_OK)
            st = col_cuda_memset(&gpu, dv[i], 0, nb, &err);
        ht[i] = (col_opt_tensor){hw[i], c->grads[i], hm[i], hv[i], m->numel[i], m->specs[i].decay};
        dt[i] = (col_opt_tensor){gx->w[i], gx->gr[i], dm[i], dv[i], m->numel[i], m->specs[i].decay};
    }
    /* the GPU's weights are still the initial ones and its gradients its own (the run does not change weights) */
    if (st == COL_OK)
        st = col_opt_step(&oc, LR, 1, ht, np, &err);
    if (st == COL_OK)
        st = col_cuda_opt_step(&gpu, &oc, LR, 1, dt, np, &err);
    double worst = 0;
    int64_t skipped = 0, total = 0;
    for (int i = 0; i < np && st == COL_OK; i++) {
        float *back = malloc(nbytes(m, i));
        if (!back || col_cuda_to_host(&gpu, back, gx->w[i], nbytes(m, i), &err) != COL_OK) {
            st = back ? err.code : col_err_set(&err, COL_ENOMEM, "out of memory");
            free(back);
            break;
        }
        double gmean = 0;
        for (int64_t j = 0; j < m->numel[i]; j++)
            gmean += fabs(c->grads[i][j]);
        gmean /= (double)m->numel[i];
        for (int64_t j = 0; j < m->numel[i]; j++) {
            if (fabs(c->grads[i][j]) <= 1e-3 * gmean) {
                skipped += c->grads[i][j] != 0.0f; /* exact zeros (unused embedding rows) are not ambiguous */
                continue;
            }
            total++;
            double e = fabs((double)back[j] - hw[i][j]) / (fabs(hw[i][j]) + LR);
            worst = e > worst ? e : worst;
        }
        free(back);
    }
    TL_OK(st == COL_OK && worst <= 1e-5 && skipped * 100 <= total,
          "%s: one AdamW step on each side's own gradients: weights within 1e-5 (|w| + lr) (worst %.2e over %lld "
          "elements; %lld with a sign-ambiguous gradient skipped, at most 1%% allowed)%s%s",
          m->name, worst, (long long)total, (long long)skipped, st == COL_OK ? "" : ": ", st == COL_OK ? "" : err.msg);
    for (int i = 0; i < np; i++) {
        if (hw)
            free(hw[i]);
        if (hm)
            free(hm[i]);
        if (hv)
            free(hv[i]);
        if (dm)
            col_cuda_free(&gpu, dm[i]);
        if (dv)
            col_cuda_free(&gpu, dv[i]);
    }
    free(ht), free(dt), free(hw), free(hm), free(hv), free(dm), free(dv);
}

/* refusals of col_cuda_opt_step and of a device plan */
static void errors(const model *m, inst *gx)
{
    col_err e = {0};
    float host[4] = {0};
    col_opt_tensor t = {gx->w[0], gx->gr[0], NULL, NULL, 4, true};
    col_opt_config lamb = col_opt_defaults(COL_OPT_LAMB), adam = col_opt_defaults(COL_OPT_ADAMW),
                   sgd = col_opt_defaults(COL_OPT_SGD);
    TL_OK(col_cuda_opt_step(&gpu, &lamb, LR, 1, &t, 1, &e) == COL_EUNSUPPORTED, "LAMB on the GPU: %s", e.msg);
    TL_OK(col_cuda_opt_step(&gpu, &adam, LR, 1, &t, 1, &e) == COL_EINVAL && strstr(e.msg, "no m state"),
          "AdamW without state: %s", e.msg);
    t.w = host;
    TL_OK(col_cuda_opt_step(&gpu, &sgd, LR, 1, &t, 1, &e) == COL_EINVAL && strstr(e.msg, "not device memory"),
          "a host weight buffer: %s", e.msg);
    t.w = gx->w[0];
    TL_OK(col_cuda_opt_step(&gpu, &sgd, LR, 0, &t, 1, &e) == COL_EINVAL && strstr(e.msg, "1-based"), "step 0: %s", e.msg);
    TL_OK(col_plan_run(gx->plan, &cpu, &e) == COL_EINVAL && strstr(e.msg, "cuda"),
          "the device plan refuses the CPU backend: %s", e.msg);
    (void)m;
}

static void run_model(model *m)
{
    col_err err = {0};
    for (int drop = 0; drop < 2; drop++) {
        float p = drop ? 0.1f : 0.0f;
        char what[64];
        inst cx, gx;
        result cr = {0}, gr = {0};
        col_status st = inst_build(m, false, p, &cx, &err);
        if (st == COL_OK)
            st = inst_run(m, &cx, &cr, &err);
        TL_OK(st == COL_OK, "%s dropout %.1f: CPU run: %s", m->name, p, err.msg);
        bool cpu_ok = st == COL_OK;
        st = inst_build(m, true, p, &gx, &err);
        TL_OK(st == COL_OK && col_plan_backend(gx.plan) == &gpu, "%s dropout %.1f: graph planned on the GPU: %s", m->name, p,
              err.msg);
        for (int tf32 = 0; tf32 < 2 && st == COL_OK && cpu_ok; tf32++) {
            col_cuda_backend_set_tf32(&gpu, tf32);
            snprintf(what, sizeof what, "dropout %.1f %s", p, tf32 ? "TF32" : "f32");
            st = inst_run(m, &gx, &gr, &err);
            TL_OK(st == COL_OK, "%s %s: GPU run: %s", m->name, what, err.msg);
            if (st == COL_OK)
                compare_run(m, what, &cr, &gr, tf32 ? TOL_TF32_LOSS : TOL_F32, tf32 ? TOL_TF32_GRAD : TOL_F32);
        }
        col_cuda_backend_set_tf32(&gpu, false);
        if (st == COL_OK && cpu_ok && drop) {
            /* the f32 gradients again for the end-to-end step */
            st = inst_run(m, &gx, &gr, &err);
            if (st == COL_OK)
                end_to_end(m, &gx, &cr);
            col_opt_config sgd = col_opt_defaults(COL_OPT_SGD);
            opt_check(m, &cr, "AdamW", col_opt_defaults(COL_OPT_ADAMW));
            sgd.momentum = 0.9f;
            sgd.weight_decay = 1e-2f;
            opt_check(m, &cr, "SGD momentum", sgd);
            sgd.nesterov = true;
            opt_check(m, &cr, "SGD Nesterov", sgd);
            sgd.momentum = 0.0f;
            sgd.nesterov = false;
            opt_check(m, &cr, "SGD", sgd);
            errors(m, &gx);
        }
        result_free(m, &cr);
        result_free(m, &gr);
        inst_free(m, &cx);
        inst_free(m, &gx);
    }
}

int main(void)
{
    if (!tl_cuda_backend_or_skip(&gpu))
        return 0;
    col_err err = {0};
    tl_cpu_backend(&cpu);
    TL_NOTE("device: %s", col_cuda_backend_device_name(&gpu));

    model m;
    if (model_init(&m, "gpt2", col_gpt2_config(97, 32, 64, 2, 4)))
        run_model(&m);
    else
        TL_OK(false, "gpt2 model set up");
    model_free(&m);
    col_lm_config llama;
    if (col_lm_preset("llama-tiny", &llama, &err) == COL_OK && model_init(&m, "llama-tiny", llama))
        run_model(&m);
    else
        TL_OK(false, "llama-tiny set up: %s", err.msg);
    model_free(&m);

    col_cuda_backend_free(&gpu);
    col_cpu_backend_free(&cpu);
    return tl_done();
}
