/* test_dm_trainer - the diffusion trainer (dm_trainer) against PyTorch on a
 * tiny cross-attention block whose projections carry diffusers' names
 * (tools/refgen/make_sd_train_fixtures.py, tests/fixtures/sd_train/trainer.safetensors):
 * losses, accumulated gradients, the clipped norm and the weights after two
 * AdamW steps of two micro-batches each, for full training and for PEFT LoRA
 * adapters on to_q/to_k/to_v/to_out.0 (mb_linear); diffusers' warmup
 * schedule; the compute tier giving bitwise the plain run; the optimizer
 * state saved and loaded; the errors a user meets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "mb_builder.h"
#include "mb_source.h"
#include "dm_trainer.h"
#include "ops.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/sd_train"
#endif

enum { B = 2, T = 3, S = 5, D = 8, O = 4 };
static const char *const TARGETS[] = {"to_k", "to_q", "to_v", "to_out.0", NULL};

typedef struct {
    col_graph *g;
    mb_builder b;
    mb_lora_spec lora;
    col_node *x, *ctx, *target, *loss;
} net;

/* Attn of the script: x + to_out.0(attention(to_q(norm(x)), to_k(ctx), to_v(ctx))), proj(silu(.)), MSE */
static void build(net *n, bool lora_rank2)
{
    n->g = col_graph_new();
    mb_builder_init(&n->b, n->g, !lora_rank2, COL_F32);
    n->lora = (mb_lora_spec){.rank = 2, .alpha = 2, .targets = TARGETS};
    if (lora_rank2) n->b.lora = &n->lora;
    mb_builder *b = &n->b;
    col_graph *g = n->g;
    n->x = col_input(g, "x", COL_F32, 3, (int64_t[]){B, T, D});
    n->ctx = col_input(g, "ctx", COL_F32, 3, (int64_t[]){B, S, D});
    n->target = col_input(g, "target", COL_F32, 3, (int64_t[]){B, T, O});
    col_node *nw = mb_weight(b, 1, (int64_t[]){D}, "norm.weight");
    col_node *nb = mb_weight(b, 1, (int64_t[]){D}, "norm.bias");
    col_node *h = col_layernorm(g, n->x, nw, nb, 1e-5f);
    col_node *q = mb_linear(b, h, D, D, false, "to_q");
    col_node *k = mb_linear(b, n->ctx, D, D, false, "to_k");
    col_node *v = mb_linear(b, n->ctx, D, D, false, "to_v");
    q = col_reshape(g, q, 4, (int64_t[]){B, 1, T, D});
    k = col_reshape(g, k, 4, (int64_t[]){B, 1, S, D});
    v = col_reshape(g, v, 4, (int64_t[]){B, 1, S, D});
    col_node *a = col_reshape(g, col_attention(g, q, k, v, 0, 1.0f / sqrtf((float)D)), 3, (int64_t[]){B, T, D});
    col_node *y = col_add(g, n->x, mb_linear(b, a, D, D, true, "to_out.0"));
    y = mb_linear(b, col_silu(g, y), O, D, true, "proj");
    col_node *d = col_sub(g, y, n->target);
    n->loss = col_mean(g, col_mul(g, d, d), 7u, 0);
}

static void net_free(net *n)
{
    mb_builder_free(&n->b);
    col_graph_free(n->g);
}

static const col_ckpt *REF;
static col_backend BE;

static const float *ref(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const float *ref(const char *fmt, ...)
{
    static float buf[8][4096];
    static int slot;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const col_ckpt_tensor *t = col_ckpt_find(REF, name);
    if (!t) {
        TL_NOTE("fixture has no %s", name);
        return NULL;
    }
    float *dst = buf[slot++ % 8];
    col_err e = {0};
    if (col_ckpt_read_f32(t, t->ndim, t->shape, dst, &e) != COL_OK) return NULL;
    return dst;
}

/* max |a - b| over max |b| */
static double rel(const float *a, const float *b, int64_t n)
{
    if (!a || !b) return INFINITY;
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* the adapters' first values, from the fixture */
static col_status init_lora(void *user, const mb_param *p, float *dst, col_err *err)
{
    (void)user;
    char name[256];
    snprintf(name, sizeof name, "lora.init.%s", p->name);
    const col_ckpt_tensor *t = col_ckpt_find(REF, name);
    if (!t) return col_err_set(err, COL_EFORMAT, "no %s", name);
    return col_ckpt_read_f32(t, p->ndim, p->shape, dst, err);
}

static dm_train_config config(void)
{
    dm_train_config c = dm_train_defaults();
    c.lr = 1e-2f;
    c.max_grad_norm = 0.05f;
    c.grad_accum = 2;
    return c;
}

static col_status micro(dm_trainer *t, net *n, int k, float *loss, col_err *e)
{
    col_status st = dm_trainer_upload(t, n->x, ref("x%d", k), sizeof(float) * B * T * D, e);
    if (st == COL_OK) st = dm_trainer_upload(t, n->ctx, ref("ctx%d", k), sizeof(float) * B * S * D, e);
    if (st == COL_OK) st = dm_trainer_upload(t, n->target, ref("target%d", k), sizeof(float) * B * T * O, e);
    if (st == COL_OK) st = dm_trainer_backward(t, loss, e);
    return st;
}

/* two steps of two micro-batches against the fixture's tag ("full" or "lora") */
static void parity(const char *tag, size_t compute_budget, float **final, int *nfinal)
{
    net n;
    build(&n, strcmp(tag, "lora") == 0);
    mb_ckpt_source sc;
    mb_source src;
    mb_source_ckpt(&src, &sc, REF, "init.");
    dm_train_config c = config();
    c.compute_budget = compute_budget;
    dm_trainer *t = NULL;
    col_err e = {0};
    col_status st = dm_trainer_create(&c, &BE, &n.b, n.loss, &src, init_lora, NULL, &t, &e);
    TL_OK(st == COL_OK, "%s: session created (%s)", tag, e.msg);
    if (st != COL_OK) {
        net_free(&n);
        return;
    }
    int ntr = 0;
    for (int i = 0; i < dm_trainer_count(t); i++) ntr += dm_trainer_param(t, i)->trainable;
    TL_OK(ntr == (strcmp(tag, "lora") == 0 ? 8 : 9), "%s: %d trained tensors", tag, ntr);
    double lerr = 0, gerr = 0, werr = 0, nerr = 0;
    for (int s = 0; s < 2 && st == COL_OK; s++) {
        for (int k = 0; k < 2 && st == COL_OK; k++) {
            float loss = 0;
            st = micro(t, &n, 2 * s + k, &loss, &e);
            lerr = fmax(lerr, rel(&loss, ref("%s.loss%d", tag, 2 * s + k), 1));
        }
        if (s == 0)
            for (int i = 0; i < dm_trainer_count(t); i++) {
                const mb_param *p = dm_trainer_param(t, i);
                if (!p->trainable) continue;
                int64_t m = dm_trainer_numel(t, i);
                float *avg = malloc(sizeof *avg * (size_t)m);
                for (int64_t j = 0; j < m; j++) avg[j] = dm_trainer_grad(t, i)[j] / 2;
                gerr = fmax(gerr, rel(avg, ref("%s.grad.%s", tag, p->name), m));
                free(avg);
            }
        dm_step_info info;
        if (st == COL_OK) st = dm_trainer_step(t, &info, &e);
        float nm = (float)info.grad_norm;
        nerr = fmax(nerr, rel(&nm, ref("%s.norm%d", tag, s), 1));
        for (int i = 0; i < dm_trainer_count(t) && st == COL_OK; i++) {
            const mb_param *p = dm_trainer_param(t, i);
            if (p->trainable)
                werr = fmax(werr, rel(dm_trainer_weights(t, i), ref("%s.step%d.%s", tag, s + 1, p->name),
                                      dm_trainer_numel(t, i)));
        }
    }
    TL_OK(st == COL_OK, "%s: two steps run (%s)", tag, e.msg);
    TL_NOTE("%s (compute budget %zu): loss %.2g, grads %.2g, norm %.2g, weights after 2 steps %.2g (relative)", tag,
            compute_budget, lerr, gerr, nerr, werr);
    TL_OK(lerr < 1e-5 && gerr < 1e-5 && nerr < 1e-5, "%s: losses, accumulated gradients and norms within 1e-5", tag);
    TL_OK(werr < 1e-5, "%s: weights after two clipped AdamW steps within 1e-5", tag);
    TL_OK(dm_trainer_steps(t) == 2, "%s: two steps counted", tag);
    if (final) { /* every weight, for the bitwise comparison */
        int64_t tot = dm_trainer_total(t), at = 0;
        *final = malloc(sizeof(float) * (size_t)tot);
        for (int i = 0; i < dm_trainer_count(t); i++) {
            memcpy(*final + at, dm_trainer_weights(t, i), sizeof(float) * (size_t)dm_trainer_numel(t, i));
            at += dm_trainer_numel(t, i);
        }
        *nfinal = (int)tot;
    }
    dm_trainer_free(t);
    net_free(&n);
}

static void warmup(void)
{
    dm_train_config c = dm_train_defaults();
    c.lr = 1e-3f;
    c.warmup_steps = 3;
    const float *r = ref("warmup3.lr");
    double err = 0;
    for (int s = 0; s < 6 && r; s++) err = fmax(err, fabs(dm_train_lr(&c, s) - r[s]) / 1e-3);
    TL_OK(r && err < 1e-6 && dm_train_lr(&c, 0) == 0.0f, "constant_with_warmup: diffusers' learning rates (err %.2g)",
          err);
    c.warmup_steps = 0;
    TL_OK(dm_train_lr(&c, 0) == 1e-3f && dm_train_lr(&c, 100) == 1e-3f, "constant: the learning rate throughout");
}

/* the optimizer state out and back: a resumed session steps exactly as the first one */
static void resume(void)
{
    char path[] = "/tmp/test_dm_trainer_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    col_err e = {0};
    dm_train_config c = config();
    net n[2];
    dm_trainer *t[2] = {0};
    mb_ckpt_source sc;
    mb_source src;
    mb_source_ckpt(&src, &sc, REF, "init.");
    col_status st = COL_OK;
    for (int r = 0; r < 2 && st == COL_OK; r++) {
        build(&n[r], false);
        st = dm_trainer_create(&c, &BE, &n[r].b, n[r].loss, &src, NULL, NULL, &t[r], &e);
    }
    /* session 0: step 1, saved; session 1 takes its weights and state, then both take step 2 */
    for (int k = 0; k < 2 && st == COL_OK; k++) st = micro(t[0], &n[0], k, NULL, &e);
    if (st == COL_OK) st = dm_trainer_step(t[0], NULL, &e);
    if (st == COL_OK) st = dm_trainer_save_optimizer(t[0], path, &e);
    for (int i = 0; i < dm_trainer_count(t[0]) && st == COL_OK; i++)
        memcpy(dm_trainer_weights(t[1], i), dm_trainer_weights(t[0], i), sizeof(float) * (size_t)dm_trainer_numel(t[0], i));
    if (st == COL_OK) st = dm_trainer_load_optimizer(t[1], path, &e);
    TL_OK(st == COL_OK && dm_trainer_steps(t[1]) == 1, "optimizer state saved and loaded, step 1 (%s)", e.msg);
    for (int r = 0; r < 2 && st == COL_OK; r++) {
        for (int k = 2; k < 4 && st == COL_OK; k++) st = micro(t[r], &n[r], k, NULL, &e);
        if (st == COL_OK) st = dm_trainer_step(t[r], NULL, &e);
    }
    bool same = st == COL_OK;
    for (int i = 0; same && i < dm_trainer_count(t[0]); i++)
        same = memcmp(dm_trainer_weights(t[0], i), dm_trainer_weights(t[1], i),
                      sizeof(float) * (size_t)dm_trainer_numel(t[0], i)) == 0;
    TL_OK(same, "the resumed session's second step is bitwise the uninterrupted one's");
    /* a state of another run: the LoRA session's names are not there */
    net l;
    build(&l, true);
    dm_trainer *tl = NULL;
    st = dm_trainer_create(&c, &BE, &l.b, l.loss, &src, init_lora, NULL, &tl, &e);
    if (st == COL_OK) st = dm_trainer_load_optimizer(tl, path, &e);
    TL_OK(st == COL_EFORMAT && strstr(e.msg, "lora_A") && strstr(e.msg, "another run"),
          "another run's optimizer state is refused, naming the tensor (%s)", e.msg);
    dm_trainer_free(tl);
    net_free(&l);
    for (int r = 0; r < 2; r++) {
        dm_trainer_free(t[r]);
        net_free(&n[r]);
    }
    unlink(path);
}

static void errors(void)
{
    col_err e = {0};
    net n;
    build(&n, false);
    dm_train_config c = config();
    dm_trainer *t = NULL;
    /* a missing tensor */
    col_status st = dm_trainer_create(&c, &BE, &n.b, n.loss, NULL, NULL, NULL, &t, &e);
    TL_OK(st == COL_EFORMAT && strstr(e.msg, "norm.weight"), "no source: the first tensor is named (%s)", e.msg);
    net_free(&n);
    /* a host budget too small: the memtier message names the budget */
    build(&n, false);
    mb_ckpt_source sc;
    mb_source src;
    mb_source_ckpt(&src, &sc, REF, "init.");
    c.host_budget = 4096;
    c.chunk_bytes = 1024;
    st = dm_trainer_create(&c, &BE, &n.b, n.loss, &src, NULL, NULL, &t, &e);
    TL_OK(st == COL_ENOMEM && col_err_has_setting(&e, COL_SETTING_HOST_BUDGET),
          "a host budget too small is refused, the budget marked (%s)", e.msg);
    net_free(&n);
    c = config();
    c.beta2 = 1.5f;
    build(&n, false);
    st = dm_trainer_create(&c, &BE, &n.b, n.loss, &src, NULL, NULL, &t, &e);
    TL_OK(st == COL_EINVAL && strstr(e.msg, "beta2"), "a bad AdamW setting is refused (%s)", e.msg);
    c = config();
    st = dm_trainer_create(&c, &BE, &n.b, n.x, &src, NULL, NULL, &t, &e);
    TL_OK(st == COL_EINVAL && strstr(e.msg, "loss"), "a loss that is not one value is refused (%s)", e.msg);
    net_free(&n);
    build(&n, false);
    st = dm_trainer_create(&c, &BE, &n.b, n.loss, &src, NULL, NULL, &t, &e);
    if (st == COL_OK) st = dm_trainer_step(t, NULL, &e);
    TL_OK(st == COL_ESTATE, "a step before any backward pass is refused (%s)", e.msg);
    dm_trainer_free(t);
    net_free(&n);
    /* mb_lora_targets: PEFT's suffix rule */
    mb_lora_spec l = {.rank = 2, .alpha = 2, .targets = TARGETS};
    TL_OK(mb_lora_targets(&l, "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0") &&
              mb_lora_targets(&l, "to_q") && !mb_lora_targets(&l, "x.to_out.1") && !mb_lora_targets(&l, "xto_q") &&
              !mb_lora_targets(&l, "to_q.lora_A"),
          "LoRA targets match whole trailing module names, as PEFT's");
}

int main(void)
{
    col_ckpt *c = NULL;
    col_err e = {0};
    if (col_ckpt_open(FIXTURES "/trainer.safetensors", &c, &e) != COL_OK) {
        TL_OK(false, "fixture: %s", e.msg);
        return tl_done();
    }
    REF = c;
    tl_cpu_backend(&BE);
    float *plain = NULL, *tiered = NULL;
    int np = 0, nt = 0;
    parity("full", 0, &plain, &np);
    parity("full", 160 << 10, &tiered, &nt);
    TL_OK(plain && tiered && np == nt && memcmp(plain, tiered, sizeof(float) * (size_t)np) == 0,
          "through a compute tier: bitwise the plain run");
    free(plain);
    free(tiered);
    parity("lora", 0, NULL, NULL);
    warmup();
    resume();
    errors();
    col_ckpt_close(c);
    col_cpu_backend_free(&BE);
    return tl_done();
}
