/* test_plan_device.c - plans for a backend with its own memory (backend.h's
 * col_backend_mem), checked on the CPU with a fake "device": the CPU kernels
 * with a memory table of host blocks that counts what it is asked for and
 * refuses copies that do not go between a host buffer and one of its blocks.
 *
 * On a tiny GPT-2 training graph (dropout on, so the run counter matters):
 * the arena, scratch and counter slot of a device plan come from the table
 * and go back to it; every run syncs once (also when a kernel fails) and an
 * asynchronous error at sync becomes the run's status; uploads and downloads
 * go through the table; a device plan refuses any other backend and a host
 * plan refuses a backend with a table; the device plan's loss and
 * gradients are bitwise those of host plans (col_plan_create and
 * col_plan_create_on with no table), which run exactly as before; and a
 * graph planned twice has two plans that run in turn, each with its own
 * memory and the same bits, one freed leaving the other usable. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "lm.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "fake_device.h"
#include "backend_cpu.h"

static col_backend cpu, fake;

enum { B = 2, T = 8, V = 13 };

/* ---- one model graph, its memory, its plan ---- */

typedef struct {
    col_lm_config cfg;
    col_graph *g;
    col_lm_graph gg;
    col_node *params[64];
    col_node *unused;           /* a node no output needs */
    int np;
    void *w[64], *gr[64];       /* parameter and gradient memory (host or fake device) */
    bool on_device;
    col_plan *plan;
} model;

static col_param_spec specs[64];

static bool build(model *m, bool on_device)
{
    memset(m, 0, sizeof *m);
    m->cfg = col_gpt2_config(V, T, 16, 2, 2);
    m->cfg.dropout = 0.1f;
    m->on_device = on_device;
    m->np = col_lm_param_count(&m->cfg);
    if (m->np > 64)
        return false;
    col_lm_param_specs(&m->cfg, specs);
    m->g = col_graph_new();
    m->gg.params = m->params;
    col_err err = {0};
    col_lm_build_opts o = {.batch = B, .seq = T, .with_loss = true, .training = true, .dropout_seed = 7};
    if (!m->g || col_lm_build(m->g, &m->cfg, &o, &m->gg, &err) != COL_OK ||
        col_graph_backward(m->g, m->gg.loss, &err) != COL_OK) {
        TL_NOTE("build: %s", err.msg);
        return false;
    }
    m->unused = col_scale(m->g, m->gg.logits, 2.0f, 0.0f);
    for (int i = 0; i < m->np; i++) {
        int64_t n = col_param_numel(&specs[i]);
        size_t b = sizeof(float) * (size_t)n;
        float *host = malloc(b), *zero = calloc(1, b);
        bool ok = host && zero;
        if (ok)
            col_lm_init_param(&m->cfg, &specs[i], i, host, 42);
        if (ok && on_device) {
            ok = fk_alloc(&fake, b, &m->w[i], &err) == COL_OK && fk_alloc(&fake, b, &m->gr[i], &err) == COL_OK &&
                 fk_to_device(&fake, m->w[i], host, b, &err) == COL_OK &&
                 fk_to_device(&fake, m->gr[i], zero, b, &err) == COL_OK;
            free(host);
            free(zero);
        } else {
            m->w[i] = host;
            m->gr[i] = zero;
        }
        if (!ok || col_bind(m->params[i], m->w[i], &err) != COL_OK ||
            col_bind_grad(m->params[i], m->gr[i], &err) != COL_OK) {
            TL_NOTE("bind: %s", err.msg);
            return false;
        }
    }
    return true;
}

static void release(model *m)
{
    col_plan_free(m->plan);
    for (int i = 0; i < m->np; i++) {
        if (m->on_device) {
            fk_free(&fake, m->w[i]);
            fk_free(&fake, m->gr[i]);
        } else {
            free(m->w[i]);
            free(m->gr[i]);
        }
    }
    col_graph_free(m->g);
    memset(m, 0, sizeof *m);
}

/* gradients back to zero (the run adds into them) */
static bool zero_grads(model *m)
{
    col_err err = {0};
    for (int i = 0; i < m->np; i++) {
        size_t b = sizeof(float) * (size_t)col_param_numel(&specs[i]);
        if (!m->on_device) {
            memset(m->gr[i], 0, b);
            continue;
        }
        void *z = calloc(1, b);
        bool ok = z && fk_to_device(&fake, m->gr[i], z, b, &err) == COL_OK;
        free(z);
        if (!ok)
            return false;
    }
    return true;
}

/* the batch both plans see */
static void batch(int32_t *ids, int32_t *tg)
{
    col_rng r;
    col_rng_init(&r, 99);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)col_rng_below(&r, V);
        tg[i] = (int32_t)col_rng_below(&r, V);
    }
    tg[5] = -1;
}

/* loss and concatenated gradients after a run; each gradient read through
 * the plan (download from its ACCUMULATE node) */
typedef struct {
    float loss;
    float *grads;
    size_t n;
} result;

static bool collect(model *m, result *r)
{
    col_err err = {0};
    size_t total = 0;
    for (int i = 0; i < m->np; i++)
        total += (size_t)col_param_numel(&specs[i]);
    r->grads = malloc(sizeof(float) * total);
    r->n = total;
    if (!r->grads || col_plan_download(m->plan, m->gg.loss, &r->loss, sizeof(float), &err) != COL_OK) {
        TL_NOTE("download loss: %s", err.msg);
        return false;
    }
    size_t off = 0;
    for (int i = 0; i < m->np; i++) {
        size_t n = (size_t)col_param_numel(&specs[i]);
        col_node *acc = NULL;
        for (int k = 0; k < col_plan_length(m->plan); k++) {
            col_node *x = col_plan_node(m->plan, k);
            if (x->op == COL_OP_ACCUMULATE && x->src[1] == m->params[i])
                acc = x;
        }
        if (!acc || col_plan_download(m->plan, acc, r->grads + off, sizeof(float) * n, &err) != COL_OK) {
            TL_NOTE("download gradient %d: %s", i, err.msg);
            return false;
        }
        off += n;
    }
    return true;
}

static bool same(const result *a, const result *b)
{
    return a->n == b->n && memcmp(&a->loss, &b->loss, sizeof(float)) == 0 &&
           memcmp(a->grads, b->grads, sizeof(float) * a->n) == 0;
}

/* a run of a planned model on backend be: batch in (upload or memcpy), counter set, grads zeroed */
static col_status run(model *m, const col_backend *be, int64_t counter, bool by_upload, col_err *err)
{
    int32_t ids[B * T], tg[B * T];
    batch(ids, tg);
    if (!zero_grads(m))
        return col_err_set(err, COL_EINTERNAL, "zeroing gradients failed");
    if (by_upload) {
        col_status st = col_plan_upload(m->plan, m->gg.ids, ids, sizeof ids, err);
        if (st == COL_OK)
            st = col_plan_upload(m->plan, m->gg.targets, tg, sizeof tg, err);
        if (st != COL_OK)
            return st;
    } else { /* how host callers always did it */
        memcpy(col_data(m->gg.ids), ids, sizeof ids);
        memcpy(col_data(m->gg.targets), tg, sizeof tg);
    }
    col_graph_set_rng_counter(m->g, counter);
    return col_plan_run(m->plan, be, err);
}

static col_status failing_kernel(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)ex;
    return col_err_set(err, COL_EINVAL, "injected failure in %s", col_op_name(n->op));
}

static int hook_calls;
static col_status count_hook(void *user, const col_plan *p, int i, col_node *n, col_err *err)
{
    (void)user, (void)p, (void)i, (void)n, (void)err;
    hook_calls++;
    return COL_OK;
}

int main(void)
{
    tl_cpu_backend(&cpu);
    fake = cpu; /* the CPU kernels (they run on host memory, which the fake device's is) */
    fake.name = "fakedev";
    fake.mem = &fk_mem;
    fk_own(&fake);
    col_err err = {0};

    /* 1. host plans: col_plan_create with the old memcpy input path, and
     * col_plan_create_on(NULL) / (cpu) with uploads; no table is touched */
    model h;
    result ra = {0}, rb = {0}, rc = {0}, rd = {0}, r4h = {0}, r4d = {0};
    if (!build(&h, false)) {
        printf("Bail out! cannot build the host model\n");
        return 1;
    }
    TL_OK(col_plan_create(h.g, &h.plan, &err) == COL_OK && col_plan_backend(h.plan) == NULL, "host plan: %s", err.msg);
    TL_OK(col_plan_scratch_bytes(h.plan) > 0 && col_plan_arena_bytes(h.plan) > 0,
          "the graph needs an arena (%zu bytes) and scratch (%zu bytes)", col_plan_arena_bytes(h.plan),
          col_plan_scratch_bytes(h.plan));
    TL_OK(run(&h, &cpu, 3, false, &err) == COL_OK && collect(&h, &ra), "host plan runs (memcpy inputs): %s", err.msg);
    col_plan *old = h.plan;
    h.plan = NULL;
    TL_OK(col_plan_create_on(h.g, NULL, &h.plan, &err) == COL_OK && col_plan_backend(h.plan) == NULL,
          "col_plan_create_on(NULL) is a host plan: %s", err.msg);
    bool ok = run(&h, &cpu, 3, true, &err) == COL_OK && collect(&h, &rb);
    TL_OK(ok && same(&ra, &rb), "host plan with uploads: loss %.7f and %zu gradients bitwise equal: %s", rb.loss, rb.n, err.msg);
    col_err e1 = {0};
    col_plan *newer = h.plan;
    result rold = {0};
    h.plan = old;
    ok = run(&h, &cpu, 3, true, &e1) == COL_OK && collect(&h, &rold);
    h.plan = newer;
    TL_OK(ok && same(&ra, &rold) && col_plan_data(old, h.gg.ids) != col_plan_data(newer, h.gg.ids),
          "the older plan of the graph still runs and copies, in its own arena, same bits: %s", e1.msg);
    free(rold.grads);
    col_plan_free(old);
    col_plan_free(h.plan);
    h.plan = NULL;
    TL_OK(col_plan_create_on(h.g, &cpu, &h.plan, &err) == COL_OK && col_plan_backend(h.plan) == NULL,
          "col_plan_create_on(cpu) (no memory table) is a host plan: %s", err.msg);
    col_backend copy = cpu; /* another host backend object (as test_graph's partial table) */
    TL_OK(run(&h, &copy, 3, true, &err) == COL_OK && collect(&h, &rc) && same(&ra, &rc),
          "it runs on another host backend object, same bits: %s", err.msg);
    TL_OK(fk.allocs == 0 && fk.to_dev == 0 && fk.to_host == 0 && fk.syncs == 0, "host plans never touch a memory table");
    e1 = (col_err){0};
    TL_OK(col_plan_run(h.plan, &fake, &e1) == COL_EINVAL && strstr(e1.msg, "host memory") && strstr(e1.msg, "fakedev"),
          "a host plan refuses a backend with a memory table: %s", e1.msg);

    /* 2. a device plan: arena, scratch and counter slot from the table */
    model d;
    if (!build(&d, true)) {
        printf("Bail out! cannot build the device model\n");
        return 1;
    }
    int live0 = fk.live, allocs0 = fk.allocs;
    TL_OK(live0 == 2 * d.np, "parameters and gradients in %d fake device blocks", live0);
    TL_OK(col_plan_create_on(d.g, &fake, &d.plan, &err) == COL_OK && col_plan_backend(d.plan) == &fake,
          "device plan: %s", err.msg);
    TL_OK(fk.allocs - allocs0 == 3 && fk.live - live0 == 3, "it took 3 blocks (arena, scratch, run counter): %d",
          fk.allocs - allocs0);
    int in_dev = 0, arena_nodes = 0;
    for (int k = 0; k < col_plan_length(d.plan); k++) {
        col_node *x = col_plan_node(d.plan, k);
        if (x->op == COL_OP_LEAF || (x->flags & COL_NODE_VIEW) || x->op == COL_OP_ACCUMULATE)
            continue;
        arena_nodes++;
        in_dev += fk_find_block(col_plan_data(d.plan, x), (size_t)col_numel(&x->t) * col_dtype_size(x->t.dtype)) >= 0;
    }
    col_node *ids_leaf = d.gg.ids;
    arena_nodes++;
    in_dev += fk_find_block(col_plan_data(d.plan, ids_leaf), sizeof(int32_t) * B * T) >= 0;
    TL_OK(in_dev == arena_nodes && arena_nodes > 50, "all %d arena nodes (ids included) lie in fake device blocks",
          arena_nodes);

    int dev0 = fk.to_dev, host0 = fk.to_host, sync0 = fk.syncs;
    TL_OK(run(&d, &fake, 3, true, &err) == COL_OK, "device plan runs: %s", err.msg);
    int zero_copies = d.np; /* zero_grads: one to_device per gradient */
    TL_OK(fk.syncs - sync0 == 1, "the run synced once (%d)", fk.syncs - sync0);
    TL_OK(fk.to_dev - dev0 == zero_copies + 2 + 1, "uploads (ids, targets) and the run counter went to the device (%d copies)",
          fk.to_dev - dev0 - zero_copies);
    ok = collect(&d, &rd);
    TL_OK(ok && fk.to_host - host0 == 1 + d.np, "loss and %d gradients downloaded through the table (%d)",
          d.np, fk.to_host - host0);
    TL_OK(same(&ra, &rd), "device plan: loss %.7f and %zu gradients bitwise those of the host plan", rd.loss, rd.n);

    /* the run counter: a new value reaches the device slot and the dropout masks */
    TL_OK(run(&h, &cpu, 4, true, &err) == COL_OK && collect(&h, &r4h) && run(&d, &fake, 4, true, &err) == COL_OK &&
              collect(&d, &r4d),
          "both run with counter 4: %s", err.msg);
    TL_OK(same(&r4h, &r4d) && r4h.loss != ra.loss, "counter 4: same bits on both (loss %.7f, counter 3 gave %.7f)",
          r4d.loss, ra.loss);
    int64_t cnt = -1;
    ok = col_plan_download(d.plan, col_graph_rng_counter(d.g), &cnt, sizeof cnt, &err) == COL_OK;
    TL_OK(ok && cnt == 4,
          "the counter reads back as the graph's value (%lld)", (long long)cnt);

    /* hooks: called before each computing op, one sync */
    sync0 = fk.syncs;
    hook_calls = 0;
    int computing = 0;
    for (int k = 0; k < col_plan_length(d.plan); k++) {
        col_op op = col_plan_node(d.plan, k)->op;
        computing += op != COL_OP_LEAF && op != COL_OP_VIEW;
    }
    zero_grads(&d);
    col_graph_set_rng_counter(d.g, 3);
    ok = col_plan_run_hooked(d.plan, &fake, count_hook, NULL, &err) == COL_OK;
    TL_OK(ok && hook_calls == computing && fk.syncs - sync0 == 1,
          "hooked run: %d hook calls for %d ops, one sync: %s", hook_calls, computing, err.msg);
    result rh = {0};
    TL_OK(collect(&d, &rh) && same(&ra, &rh), "the hooked run gives the same bits");
    free(rh.grads);

    /* 3. refusals */
    col_backend other = fake; /* the same tables, another backend object */
    e1 = (col_err){0};
    TL_OK(col_plan_run(d.plan, &cpu, &e1) == COL_EINVAL && strstr(e1.msg, "fakedev"),
          "a device plan refuses the CPU backend: %s", e1.msg);
    e1 = (col_err){0};
    TL_OK(col_plan_run(d.plan, &other, &e1) == COL_EINVAL, "and another object of its kind: %s", e1.msg);
    e1 = (col_err){0};
    TL_OK(col_plan_run(d.plan, NULL, &e1) == COL_EINVAL, "and no backend: %s", e1.msg);

    /* 4. a kernel error stops the run after a sync; an asynchronous error at sync is the run's */
    col_kernel_fn ce = fake.kernel[COL_OP_CROSS_ENTROPY];
    fake.kernel[COL_OP_CROSS_ENTROPY] = failing_kernel;
    sync0 = fk.syncs;
    e1 = (col_err){0};
    TL_OK(run(&d, &fake, 3, true, &e1) == COL_EINVAL && strstr(e1.msg, "injected failure") && fk.syncs - sync0 == 1,
          "a failing kernel: its error, after a sync: %s", e1.msg);
    fake.kernel[COL_OP_CROSS_ENTROPY] = ce;
    fk.fail_sync = true;
    e1 = (col_err){0};
    TL_OK(run(&d, &fake, 3, true, &e1) == COL_EINTERNAL && strstr(e1.msg, "fault at sync"),
          "an error found at sync is the run's: %s", e1.msg);
    fk.fail_sync = false;
    result re = {0};
    TL_OK(run(&d, &fake, 3, true, &err) == COL_OK && collect(&d, &re) && same(&ra, &re),
          "the next run is clean and the same: %s", err.msg);
    free(re.grads);

    /* 5. copy errors */
    int32_t big[B * T + 1] = {0};
    e1 = (col_err){0};
    TL_OK(col_plan_upload(d.plan, d.gg.ids, big, sizeof big, &e1) == COL_EINVAL && strstr(e1.msg, "do not fit"),
          "an upload larger than the node: %s", e1.msg);
    e1 = (col_err){0};
    TL_OK(col_plan_download(d.plan, d.unused, big, 4, &e1) == COL_EINVAL && strstr(e1.msg, "not in this plan"),
          "a node outside the schedule: %s", e1.msg);
    col_node *strided = NULL;
    for (int k = 0; k < col_plan_length(d.plan) && !strided; k++) {
        col_node *x = col_plan_node(d.plan, k);
        if ((x->flags & COL_NODE_VIEW) && !col_is_contiguous(&x->t))
            strided = x;
    }
    e1 = (col_err){0};
    TL_OK(strided && col_plan_download(d.plan, strided, big, 4, &e1) == COL_EINVAL && strstr(e1.msg, "strided"),
          "a strided view: %s", e1.msg);
    e1 = (col_err){0};
    TL_OK(col_plan_upload(d.plan, d.gg.ids, NULL, 4, &e1) == COL_EINVAL, "a NULL buffer: %s", e1.msg);
    float w0[4], w0h[4];
    TL_OK(col_plan_download(d.plan, d.params[0], w0, sizeof w0, &err) == COL_OK &&
              col_plan_download(h.plan, h.params[0], w0h, sizeof w0h, &err) == COL_OK &&
              memcmp(w0, w0h, sizeof w0) == 0,
          "a bound parameter downloads its bound memory: %s", err.msg);

    /* 6. planning again: a second device plan with memory of its own; the two run in turn */
    col_plan *dold = d.plan, *dnew = NULL;
    d.plan = NULL;
    ok = col_plan_create_on(d.g, &fake, &dnew, &err) == COL_OK;
    TL_OK(ok && fk.live == live0 + 6, "planned again (%d blocks): %s", fk.live - live0, err.msg);
    result rn = {0}, ro = {0}, rn2 = {0};
    d.plan = dnew;
    ok = ok && run(&d, &fake, 3, true, &err) == COL_OK && collect(&d, &rn);
    d.plan = dold;
    ok = ok && run(&d, &fake, 3, true, &err) == COL_OK && collect(&d, &ro);
    d.plan = dnew;
    TL_OK(ok && same(&ra, &rn) && same(&ra, &ro),
          "the new and the older device plan run in turn, each with the host plan's bits: %s", err.msg);
    col_plan_free(dold);
    TL_OK(fk.live == live0 + 3, "freeing the older one gave its 3 blocks back");
    TL_OK(run(&d, &fake, 3, true, &err) == COL_OK && collect(&d, &rn2) && same(&ra, &rn2),
          "the new one runs on: %s", err.msg);
    free(rn.grads), free(ro.grads), free(rn2.grads);
    col_plan_free(d.plan);
    d.plan = NULL;
    TL_OK(fk.live == live0 && fk.allocs - fk.frees == live0, "freeing the new one too (%d live)", fk.live);

    /* 7. out of device memory; an incomplete table */
    fk.fail_alloc = true;
    e1 = (col_err){0};
    col_plan *none = NULL;
    TL_OK(col_plan_create_on(d.g, &fake, &none, &e1) == COL_ENOMEM && !none && strstr(e1.msg, "activation arena") &&
              strstr(e1.msg, "fake device out of memory") && fk.live == live0,
          "an allocation failure is COL_ENOMEM, nothing kept: %s", e1.msg);
    fk.fail_alloc = false;
    col_backend broken = fake;
    broken.mem = &fk_mem_nosync;
    e1 = (col_err){0};
    TL_OK(col_plan_create_on(d.g, &broken, &none, &e1) == COL_EINVAL && !none && strstr(e1.msg, "incomplete"),
          "an incomplete memory table is refused: %s", e1.msg);

    release(&d);
    release(&h);
    TL_OK(fk.live == 0 && fk.allocs == fk.frees, "every fake block went back (%d allocations)", fk.allocs);
    free(ra.grads), free(rb.grads), free(rc.grads), free(rd.grads), free(r4h.grads), free(r4d.grads);
    col_cpu_backend_free(&cpu);
    return tl_done();
}
