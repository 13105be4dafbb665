/* test_lm_par_grid.c - the grid modes of tensor parallelism (models/lm/lm_par_grid.c: 2D, 2.5D, 3D) under
 * mpirun (tests/test_lm_par_grid.sh): 1 process (every mode with one rank), 4 (2D, q = 2; 2.5D with d = 1)
 * and 8 (2.5D, q = 2, d = 2; 3D, q = 2; 2D q = 2 with ring sequence parallelism over 2 ranks: the
 * weights' copies over the sequence's ranks and the loss summed over them).
 *
 * A small transformer built through a mode's functions exactly as a family builds one: token embedding plus
 * learned positions; two blocks of [LayerNorm, FIRST projection(s), causal attention over this rank's heads,
 * SECOND projection, residual, norm (LayerNorm, then RMSNorm), FIRST, GELU, SECOND, residual]; the final
 * LayerNorm; the tied head and the mean cross-entropy (some targets ignored; a vocabulary of 64, which the head
 * splits over the row, and of 11, whose partial logits it sums). Block 0's projections are stored
 * [in, out] with GPT-2's fused q|k|v columns (groups 3), block 1's [out, in] (nn.Linear) with separate q, k
 * and v. Every rank holds only the blocks its mode's shard function names, cut from whole tensors whose
 * elements are a formula of (tensor, element). The same model is built whole in one process (every rank
 * does it) from plain operations (col_layernorm, col_linear, col_cross_entropy, ...). Checked: the blocks of
 * every rank tile each whole tensor exactly `replicas` times; the loss on every rank; every rank's gradient
 * of each of its blocks against the same block of the whole model's gradient (max |difference| over max
 * |gradient| of the whole tensor, or 1e-3 of the model's largest where a tensor's is 0 but for rounding: <= 1e-5); and the bytes each rank's communicators counted in the step
 * (forward and backward) against the count this file derives from the layouts (lm_par_grid.c's comment),
 * with the bytes per linear against the published formulas printed as notes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm.h"
#include "comm_graph.h"
#include "graph.h"
#include "lm_par.h"
#include "plan.h"
#include "testlib.h"
#include "mpi_testutil.h"

#define check(ok, detail, ...) tl_mpi_check((ok), (detail), __VA_ARGS__)

enum { B = 8, T = 6, C = 16, H = 4, F = 32, NPOS = 8 };
static int V; /* the vocabulary: 64 (the head vocabulary-parallel) or 11 (its partial logits summed) */
static const float EPS = 1e-5f;
static const double TOL = 1e-5;

static col_backend be;
static col_comm *world;
static int rank, size;

/* ---- the model's parameters ---- */

enum { MAXP = 64 };
typedef struct {
    col_param_spec s[MAXP];
    int n;
} spec_list;

static int add(spec_list *L, const char *name, int64_t d0, int64_t d1, col_param_role role, int groups, bool in_out)
{
    col_param_spec *s = &L->s[L->n];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->role = role;
    s->groups = groups;
    s->in_out = in_out;
    return L->n++;
}

/* the indices of the parameters in the list, in the order the chain uses them */
typedef struct {
    int wte, wpe, lnf_w, lnf_b;
    struct {
        int ln1_w, ln1_b, qkv_w, qkv_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, ln2_w, ln2_b, fc_w, fc_b, pr_w, pr_b;
    } l[2];
} model;

/* a FIRST or SECOND weight [in -> out] and its bias: stored [in, out] (in_out) or [out, in] */
static void proj(spec_list *L, const char *name, int64_t in, int64_t out, col_param_role r, int groups, bool in_out,
                 int *w, int *b)
{
    char n[80];
    snprintf(n, sizeof n, "%s.weight", name);
    *w = in_out ? add(L, n, in, out, r, groups, true) : add(L, n, out, in, r, groups, false);
    snprintf(n, sizeof n, "%s.bias", name);
    *b = add(L, n, out, 0, r == COL_ROLE_FIRST ? COL_ROLE_FIRST_BIAS : COL_ROLE_SECOND_BIAS, groups, false);
}

static void model_specs(spec_list *L, model *m)
{
    memset(L, 0, sizeof *L);
    m->wte = add(L, "wte", V, C, COL_ROLE_EMBED, 1, false);
    m->wpe = add(L, "wpe", NPOS, C, COL_ROLE_POS, 1, false);
    for (int l = 0; l < 2; l++) {
        char n[64];
        bool io = l == 0;
        snprintf(n, sizeof n, "h%d.ln1.weight", l), m->l[l].ln1_w = add(L, n, C, 0, COL_ROLE_NORM, 1, false);
        snprintf(n, sizeof n, "h%d.ln1.bias", l), m->l[l].ln1_b = add(L, n, C, 0, COL_ROLE_NORM, 1, false);
        if (l == 0) {
            proj(L, "h0.c_attn", C, 3 * C, COL_ROLE_FIRST, 3, true, &m->l[l].qkv_w, &m->l[l].qkv_b);
        } else {
            proj(L, "h1.q", C, C, COL_ROLE_FIRST, 1, false, &m->l[l].q_w, &m->l[l].q_b);
            proj(L, "h1.k", C, C, COL_ROLE_FIRST, 1, false, &m->l[l].k_w, &m->l[l].k_b);
            proj(L, "h1.v", C, C, COL_ROLE_FIRST, 1, false, &m->l[l].v_w, &m->l[l].v_b);
        }
        snprintf(n, sizeof n, "h%d.o", l), proj(L, n, C, C, COL_ROLE_SECOND, 1, io, &m->l[l].o_w, &m->l[l].o_b);
        snprintf(n, sizeof n, "h%d.ln2.weight", l), m->l[l].ln2_w = add(L, n, C, 0, COL_ROLE_NORM, 1, false);
        m->l[l].ln2_b = -1;
        if (l == 0) /* block 1: RMSNorm, no bias */
            snprintf(n, sizeof n, "h%d.ln2.bias", l), m->l[l].ln2_b = add(L, n, C, 0, COL_ROLE_NORM, 1, false);
        snprintf(n, sizeof n, "h%d.fc", l), proj(L, n, C, F, COL_ROLE_FIRST, 1, io, &m->l[l].fc_w, &m->l[l].fc_b);
        snprintf(n, sizeof n, "h%d.proj", l), proj(L, n, F, C, COL_ROLE_SECOND, 1, io, &m->l[l].pr_w, &m->l[l].pr_b);
    }
    m->lnf_w = add(L, "lnf.weight", C, 0, COL_ROLE_NORM, 1, false);
    m->lnf_b = add(L, "lnf.bias", C, 0, COL_ROLE_NORM, 1, false);
}

static int64_t numel(const col_param_spec *s) { return s->shape[0] * (s->ndim > 1 ? s->shape[1] : 1); }

/* element e of whole tensor t: a hash in [-1, 1), scaled by what the tensor is */
static float value(const col_param_spec *s, int t, int64_t e)
{
    uint32_t h = (uint32_t)(t * 2654435761u) ^ (uint32_t)(e * 40503u + 977u);
    h ^= h >> 15, h *= 0x2c1b3c6dU, h ^= h >> 12, h *= 0x297a2d39U, h ^= h >> 15;
    float r = (float)(h & 0xffffff) / (float)0x800000 - 1.0f;
    switch (s->role) {
    case COL_ROLE_NORM: return strstr(s->name, "bias") ? 0.1f * r : 1.0f + 0.2f * r;
    case COL_ROLE_FIRST_BIAS:
    case COL_ROLE_SECOND_BIAS: return 0.1f * r;
    case COL_ROLE_EMBED:
    case COL_ROLE_POS: return r;
    default: return r * 0.6f / sqrtf((float)(s->role == COL_ROLE_SECOND && s->shape[0] * s->shape[1] == C * F ? F : C));
    }
}

/* the step's tokens: ids [B, T] and targets [B, T] (a few -1) */
static int token_id(int b, int t) { return (b * 7 + t * 3 + 1) % V; }
static int target_id(int b, int t) { return (b + t) % 4 == 3 ? -1 : (b * 5 + t * 2 + 3) % V; }

/* ---- the chain, through a mode's functions ---- */

/* q, k, v [b, t, h*D] -> causal attention over those h heads -> [b, t, h*D] (sequence-parallel: over the ring) */
static col_node *attend(col_graph *g, const col_lm_par *p, col_node *q, col_node *k, col_node *v, int heads)
{
    if (!q || !k || !v)
        return NULL;
    int64_t b = q->t.shape[0], t = q->t.shape[1], hd = q->t.shape[2], sh[4] = {b, t, heads, hd / heads};
    col_node *x[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        x[i] = col_contiguous(g, col_transpose(g, col_reshape(g, col_contiguous(g, x[i]), 4, sh), 1, 2));
    col_node *y = p->sp ? col_comm_graph_ring_attention(g, p->sp, x[0], x[1], x[2], 1, 0.0f)
                        : col_attention(g, x[0], x[1], x[2], 1, 0.0f);
    int64_t merged[3] = {b, t, hd};
    return col_reshape(g, col_contiguous(g, col_transpose(g, y, 1, 2)), 3, merged);
}

static col_node *chain(col_graph *g, const col_lm_par *p, const col_tp_ops *ops, const model *m, col_node **w,
                       col_node *ids, col_node *pos, col_node *targets, col_node *inv_count, col_node **logits)
{
    int heads = ops->heads_local(p, H);
    col_node *x = col_add(g, ops->embed(g, p, w[m->wte], ids), ops->positions(g, p, w[m->wpe], pos));
    for (int l = 0; l < 2; l++) {
        const bool io = l == 0;
        col_node *a = ops->norm(g, p, x, w[m->l[l].ln1_w], w[m->l[l].ln1_b], EPS, false), *q, *k, *v;
        if (l == 0) {
            col_node *qkv = ops->linear(g, p, a, w[m->l[l].qkv_w], w[m->l[l].qkv_b], COL_ROLE_FIRST, true);
            if (!qkv)
                return NULL;
            int64_t third = qkv->t.shape[2] / 3;
            q = col_slice(g, qkv, 2, 0, third), k = col_slice(g, qkv, 2, third, third);
            v = col_slice(g, qkv, 2, 2 * third, third);
        } else {
            q = ops->linear(g, p, a, w[m->l[l].q_w], w[m->l[l].q_b], COL_ROLE_FIRST, false);
            k = ops->linear(g, p, a, w[m->l[l].k_w], w[m->l[l].k_b], COL_ROLE_FIRST, false);
            v = ops->linear(g, p, a, w[m->l[l].v_w], w[m->l[l].v_b], COL_ROLE_FIRST, false);
        }
        col_node *o = ops->linear(g, p, attend(g, p, q, k, v, heads), w[m->l[l].o_w], w[m->l[l].o_b], COL_ROLE_SECOND,
                                  io);
        x = col_add(g, x, o);
        col_node *n2 = ops->norm(g, p, x, w[m->l[l].ln2_w], m->l[l].ln2_b >= 0 ? w[m->l[l].ln2_b] : NULL, EPS, l == 1);
        col_node *f = col_gelu_tanh(g, ops->linear(g, p, n2, w[m->l[l].fc_w], w[m->l[l].fc_b], COL_ROLE_FIRST, io));
        x = col_add(g, x, ops->linear(g, p, f, w[m->l[l].pr_w], w[m->l[l].pr_b], COL_ROLE_SECOND, io));
    }
    x = ops->norm(g, p, x, w[m->lnf_w], w[m->lnf_b], EPS, false);
    return ops->loss(g, p, x, w[m->wte], targets, inv_count, V, true, logits);
}

/* ---- the reference: the same model whole, from plain operations ---- */

static void ref_shard(const col_lm_par *p, const col_param_spec *s, col_shard *o)
{
    (void)p, (void)s;
    *o = (col_shard){.parts = {1, 1}, .groups = {1, 1}, .replicas = 1};
}
static void ref_rows(const col_lm_par *p, int b, int *row0, int *n) { (void)p, *row0 = 0, *n = b; }
static int64_t ref_hidden(const col_lm_par *p, int64_t c) { return (void)p, c; }
static int ref_heads(const col_lm_par *p, int h) { return (void)p, h; }
static col_node *ref_use(col_graph *g, const col_lm_par *p, col_param_role r, col_node *w)
{
    return (void)g, (void)p, (void)r, w;
}
static col_node *ref_linear(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b,
                            col_param_role r, bool in_out)
{
    (void)p, (void)r;
    if (!in_out)
        return col_linear(g, x, w, b);
    int64_t flat[2] = {-1, w->t.shape[0]}, sh[3] = {x->t.shape[0], x->t.shape[1], w->t.shape[1]};
    return col_reshape(g, col_add(g, col_matmul(g, col_reshape(g, x, 2, flat), w), b), 3, sh);
}
static col_node *ref_norm(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b, float eps, bool rms)
{
    (void)p;
    return rms ? col_rmsnorm(g, x, w, eps) : col_layernorm(g, x, w, b, eps);
}
static col_node *ref_embed(col_graph *g, const col_lm_par *p, col_node *w, col_node *ids)
{
    return (void)p, col_embedding(g, w, ids);
}
static col_node *ref_logits(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, int64_t vocab)
{
    (void)p, (void)vocab;
    int64_t flat[2] = {x->t.shape[0] * x->t.shape[1], x->t.shape[2]};
    return col_matmul(g, col_reshape(g, x, 2, flat), col_transpose(g, w, 0, 1));
}
static col_node *ref_loss(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *targets,
                          col_node *inv_count, int64_t vocab, bool with_logits, col_node **logits)
{
    (void)inv_count, (void)vocab;
    int64_t n[1] = {x->t.shape[0] * x->t.shape[1]}, one[1] = {1};
    col_node *l = ref_logits(g, p, x, w, vocab);
    if (logits)
        *logits = with_logits ? l : NULL;
    col_node *ce = col_cross_entropy(g, l, col_reshape(g, targets, 1, n), -1);
    return col_reshape(g, ce, 1, one);
}
static const col_tp_ops ref_ops = {
    .mode = COL_TP_1D, .shard = ref_shard, .rows = ref_rows, .hidden_local = ref_hidden, .heads_local = ref_heads,
    .use = ref_use, .linear = ref_linear, .norm = ref_norm, .embed = ref_embed, .positions = ref_embed,
    .loss = ref_loss, .logits = ref_logits,
};

/* ---- one step of a model: built, run forward and backward ---- */

typedef struct {
    float *data[MAXP], *grad[MAXP];
    col_shard sh[MAXP];
    int64_t local[MAXP][2];
    float loss;
    float *logits; /* [rows * tl, V] of rows [row0, row0 + rows), positions [t0, t0 + tl) */
    int row0, rows, t0, tl;
    col_comm_stats bytes; /* what the step moved, over the rank's row, column and depth */
} step;

static void step_free(step *s, int n)
{
    for (int t = 0; t < n; t++)
        free(s->data[t]), free(s->grad[t]);
    free(s->logits);
}

static void comm_stats(const col_lm_par *p, col_comm_stats *out)
{
    memset(out, 0, sizeof *out);
    col_comm *all[] = {p->row, p->col, p->dep};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        col_comm_stats s;
        col_comm_get_stats(all[i], &s);
        col_comm_stats_add(out, &s);
    }
}

/* this rank's step: its blocks of every tensor (from the whole values), its rows; false with the detail */
static bool run_step(const col_lm_par *p, const col_tp_ops *ops, const spec_list *L, const model *m, step *s,
                     char *why, size_t whylen)
{
    memset(s, 0, sizeof *s);
    col_graph *g = col_graph_new();
    col_node *w[MAXP];
    for (int t = 0; t < L->n; t++) {
        const col_param_spec *sp = &L->s[t];
        ops->shard(p, sp, &s->sh[t]);
        s->local[t][1] = 1;
        col_shard_shape(&s->sh[t], sp->ndim, sp->shape, s->local[t]);
        int64_t n = numel(sp), nl = s->local[t][0] * (sp->ndim > 1 ? s->local[t][1] : 1);
        float *whole = malloc(sizeof(float) * (size_t)n);
        for (int64_t e = 0; e < n; e++)
            whole[e] = value(sp, t, e);
        s->data[t] = malloc(sizeof(float) * (size_t)nl);
        s->grad[t] = calloc((size_t)nl, sizeof(float));
        col_shard_copy(&s->sh[t], sp->ndim, sp->shape, sizeof(float), whole, s->data[t], true);
        free(whole);
        col_node *leaf = col_param(g, sp->name, COL_F32, sp->ndim, s->local[t]);
        col_bind(leaf, s->data[t], NULL);
        col_bind_grad(leaf, s->grad[t], NULL);
        w[t] = ops->use(g, p, sp->role, leaf);
    }
    int row0, n;
    ops->rows(p, B, &row0, &n);
    int tl = T / (p->layout.sp > 1 ? p->layout.sp : 1), t0 = p->sp_rank * tl;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n * tl)), *tg = malloc(sizeof(int32_t) * (size_t)(n * tl));
    int32_t pos[T];
    int counted = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            counted += target_id(b, t) >= 0;
    for (int b = 0; b < n; b++)
        for (int t = 0; t < tl; t++)
            ids[b * tl + t] = token_id(row0 + b, t0 + t), tg[b * tl + t] = target_id(row0 + b, t0 + t);
    for (int t = 0; t < tl; t++)
        pos[t] = t0 + t;
    float inv = 1.0f / (float)counted;
    int64_t bt[2] = {n, tl}, tt[1] = {tl}, one[1] = {1};
    col_node *ids_n = col_input(g, "ids", COL_I32, 2, bt), *tg_n = col_input(g, "targets", COL_I32, 2, bt);
    col_node *pos_n = col_input(g, "pos", COL_I32, 1, tt), *inv_n = col_input(g, "inv_count", COL_F32, 1, one);
    col_bind(ids_n, ids, NULL), col_bind(tg_n, tg, NULL), col_bind(pos_n, pos, NULL), col_bind(inv_n, &inv, NULL);
    col_node *logits = NULL;
    col_node *loss = chain(g, p, ops, m, w, ids_n, pos_n, tg_n, inv_n, &logits);
    s->row0 = row0, s->rows = n, s->t0 = t0, s->tl = tl;
    col_err err = {0};
    col_plan *plan = NULL;
    col_status st = col_graph_status(g);
    if (st != COL_OK)
        err = *col_graph_error(g);
    if (st == COL_OK) {
        col_mark_output(loss);
        if (logits)
            col_mark_output(logits);
        st = col_graph_backward(g, loss, &err);
    }
    if (st == COL_OK)
        st = col_plan_create_on(g, &be, &plan, &err);
    col_comm_stats before, after;
    comm_stats(p, &before);
    if (st == COL_OK)
        st = col_plan_run(plan, &be, &err);
    comm_stats(p, &after);
    s->bytes.bytes_sent = after.bytes_sent - before.bytes_sent;
    s->bytes.bytes_recv = after.bytes_recv - before.bytes_recv;
    s->bytes.ops = after.ops - before.ops;
    if (st == COL_OK && (!logits || logits->t.shape[0] != (int64_t)n * tl || logits->t.shape[1] != V))
        st = COL_ESHAPE, snprintf(err.msg, sizeof err.msg, "the logits are not [%d, %d]", n * tl, V);
    if (st == COL_OK) {
        s->loss = *(const float *)col_plan_data(plan, loss);
        s->logits = malloc(sizeof(float) * (size_t)(n * tl * V));
        memcpy(s->logits, col_plan_data(plan, logits), sizeof(float) * (size_t)(n * tl * V));
    }
    else
        snprintf(why, whylen, "%s: %.300s", col_status_name(st), err.msg);
    col_plan_free(plan);
    col_graph_free(g);
    free(ids), free(tg);
    return st == COL_OK;
}

/* ---- the bytes the layouts move (lm_par_grid.c), per rank, in f32 elements ---- */

static double gather_bytes(int P, double block) { return (P - 1) * block; }            /* or a reduce-scatter */
static double reduce_bytes(int P, double n) { return P > 1 ? floor(2.0 * (P - 1) * n * 4 / P) / 4 : 0; }

typedef struct {
    double acts, weights, small; /* the linears' activations, the weights' gathers and gradient sums, the rest */
} traffic;

/* one linear [in -> out] of whole rows B, in the mode of l (T / sp positions per rank) */
static void linear_bytes(const col_par_layout *l, int64_t in, int64_t out, bool first, traffic *t)
{
    int q = l->q, d = l->d;
    const double tl = (double)(T / (l->sp > 1 ? l->sp : 1));
    if (l->mode != COL_TP_3D) {
        double rows = (double)B / (q * d);
        t->acts += 2 * gather_bytes(q, rows * tl * (double)in / q); /* X over the row, and back */
        t->weights += 2 * gather_bytes(q, (double)in * out / (q * q)); /* W over the column, and back */
        if (d > 1)
            t->weights += reduce_bytes(d, (double)in * out / (q * q)); /* the depth's copies of dW */
        t->small += reduce_bytes(q, (double)out / q) + reduce_bytes(d, (double)out / q); /* the bias's dB */
        return;
    }
    double rows = (double)B / (q * q);
    t->acts += 2 * gather_bytes(q, rows * tl * (double)in / q);           /* X over the depth (row) */
    t->acts += 2 * gather_bytes(q, rows * tl * (double)out / q);          /* Y's reduce-scatter and its gather */
    t->weights += 2 * gather_bytes(q, (double)in * out / (q * q * q));   /* W over the column */
    t->small += 2 * reduce_bytes(q, (double)out / q);                    /* the bias's dB */
    (void)first;
}

static traffic model_bytes(const col_par_layout *l)
{
    traffic t = {0, 0, 0};
    if (l->tp <= 1)
        return t;
    int q = l->q, d = l->d;
    const double tl = (double)(T / (l->sp > 1 ? l->sp : 1));
    double rows = l->mode == COL_TP_3D ? (double)B / (q * q) : (double)B / (q * d);
    int cd = l->mode == COL_TP_3D ? q : d; /* the depth's size */
    linear_bytes(l, C, 3 * C, true, &t);
    for (int i = 0; i < 3; i++)
        linear_bytes(l, C, C, true, &t);
    linear_bytes(l, C, C, false, &t), linear_bytes(l, C, C, false, &t);
    linear_bytes(l, C, F, true, &t), linear_bytes(l, C, F, true, &t);
    linear_bytes(l, F, C, false, &t), linear_bytes(l, F, C, false, &t);
    /* norms: 4 LayerNorms (2 sums over the row, forward and backward each), 1 RMSNorm (1); their weights' dW */
    t.small += (4 * 4 + 2) * reduce_bytes(q, rows * tl);
    t.small += 9 * (reduce_bytes(q, (double)C / q) + reduce_bytes(cd, (double)C / q));
    /* the embeddings' dW, the logits' sum over the row, the loss over the column and the depth */
    t.small += reduce_bytes(q, (double)(V + NPOS) * C / q) + reduce_bytes(cd, (double)(V + NPOS) * C / q);
    double N = rows * tl;
    if (V % q == 0 && N * C + (double)V * C / q + 3 * N < N * V) /* vocabulary-parallel */
        t.small += 2 * gather_bytes(q, N * C / q) + 2 * gather_bytes(q, (double)V * C / (q * q)) +
                   3 * reduce_bytes(q, N) + gather_bytes(q, N * V / q); /* (+ the logits gathered whole) */
    else
        t.small += reduce_bytes(q, N * V);
    t.small += reduce_bytes(q, 1) + reduce_bytes(cd, 1);
    return t;
}

/* ---- one mode ---- */

static void run_mode(col_tp_mode mode, int tp, int d, int sp, int vocab)
{
    V = vocab;
    col_par_layout l = {.mode = mode, .tp = tp, .d = d, .sp_mode = COL_SP_RING, .sp = sp};
    col_lm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_head = cfg.n_kv_head = H, cfg.hidden = C, cfg.ffn = F, cfg.vocab_size = V, cfg.max_positions = NPOS;
    col_err err = {0};
    char what[96];
    snprintf(what, sizeof what, "%s tp=%d", col_tp_mode_name(mode), tp);
    col_status st = col_par_layout_check(&l, &cfg, T, B, &err);
    col_lm_par p;
    if (st == COL_OK)
        st = col_lm_par_open(&p, &l, tp * sp > 1 ? world : NULL, &err);
    snprintf(what, sizeof what, "%s tp=%d (q=%d, d=%d)%s, V=%d", col_tp_mode_name(mode), tp, l.q, l.d,
             sp > 1 ? " x ring sp=2" : "", V);
    if (!check(st == COL_OK, err.msg, "%s: the layout opens", what))
        return;
    spec_list L;
    model m;
    model_specs(&L, &m);

    /* the blocks tile each whole tensor exactly `replicas` times */
    res tile = {true, ""};
    for (int t = 0; t < L.n; t++) {
        const col_param_spec *sp = &L.s[t];
        col_shard sh;
        p.ops->shard(&p, sp, &sh);
        int64_t n = numel(sp), local[2] = {1, 1};
        col_shard_shape(&sh, sp->ndim, sp->shape, local);
        int64_t nl = local[0] * (sp->ndim > 1 ? local[1] : 1);
        float *idx = malloc(sizeof(float) * (size_t)n), *blk = malloc(sizeof(float) * (size_t)nl);
        int *cnt = calloc((size_t)n, sizeof(int));
        for (int64_t e = 0; e < n; e++)
            idx[e] = (float)e;
        col_shard_copy(&sh, sp->ndim, sp->shape, sizeof(float), idx, blk, true);
        for (int64_t e = 0; e < nl; e++)
            cnt[(int64_t)blk[e]]++;
        MPI_Allreduce(MPI_IN_PLACE, cnt, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int rmin = sh.replicas, rmax = sh.replicas;
        MPI_Allreduce(MPI_IN_PLACE, &rmin, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &rmax, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rmin != rmax)
            fail(&tile, "%s: replicas %d on one rank, %d on another", sp->name, rmin, rmax);
        for (int64_t e = 0; e < n; e++)
            if (cnt[e] != sh.replicas) {
                fail(&tile, "%s: element %lld held %d times, not %d", sp->name, (long long)e, cnt[e], sh.replicas);
                break;
            }
        free(idx), free(blk), free(cnt);
    }
    check(tile.ok, tile.detail, "%s: every tensor's blocks tile it exactly once per replica", what);

    /* the step here and the whole model in one process */
    step mine, whole;
    char why[400] = "";
    col_lm_par one;
    memset(&one, 0, sizeof one);
    one.layout = (col_par_layout){.mode = COL_TP_1D, .tp = 1, .q = 1, .d = 1, .sp = 1};
    bool ran = run_step(&p, p.ops, &L, &m, &mine, why, sizeof why);
    bool ran_whole = run_step(&one, &ref_ops, &L, &m, &whole, why, sizeof why);
    if (check(ran && ran_whole, why, "%s: the step and the whole model's run", what)) {
        double lerr = fabs((double)mine.loss - whole.loss) / fabs((double)whole.loss);
        char d1[200];
        snprintf(d1, sizeof d1, "loss %.9g, whole model %.9g", mine.loss, whole.loss);
        double worst_l = lerr;
        MPI_Allreduce(MPI_IN_PLACE, &worst_l, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        check(lerr <= TOL, d1, "%s: the loss equals the whole model's (worst relative error %.2e)", what, worst_l);

        /* this rank's rows of the whole-vocabulary logits */
        double lmax = 0, lerr2 = 0;
        for (int64_t i = 0; i < (int64_t)B * T * V; i++)
            lmax = fmax(lmax, fabs(whole.logits[i]));
        for (int64_t b = 0; b < mine.rows; b++)
            for (int64_t t = 0; t < mine.tl; t++)
                for (int64_t v = 0; v < V; v++)
                    lerr2 = fmax(lerr2, fabs((double)mine.logits[(b * mine.tl + t) * V + v] -
                                             whole.logits[((mine.row0 + b) * T + mine.t0 + t) * V + v]));
        double worst_lg = lerr2 / lmax;
        MPI_Allreduce(MPI_IN_PLACE, &worst_lg, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        check(lerr2 / lmax <= TOL, "", "%s: the logits of this rank's rows equal the whole model's (worst relative "
              "error %.2e)", what, worst_lg);

        /* every rank's block of every gradient against the whole model's */
        res gr = {true, ""};
        double worst = 0, worst_own = 0, all_max = 0; /* worst_own: of the tensors measured by their own maximum */
        const char *worst_name = "";
        for (int t = 0; t < L.n; t++)
            for (int64_t i = 0; i < numel(&L.s[t]); i++)
                all_max = fmax(all_max, fabs(whole.grad[t][i]));
        for (int t = 0; t < L.n; t++) {
            const col_param_spec *sp = &L.s[t];
            int64_t n = numel(sp), nl = mine.local[t][0] * (sp->ndim > 1 ? mine.local[t][1] : 1);
            float *ref = malloc(sizeof(float) * (size_t)nl);
            col_shard_copy(&mine.sh[t], sp->ndim, sp->shape, sizeof(float), whole.grad[t], ref, true);
            /* relative to the tensor's largest gradient, or to 1e-3 of the model's where the tensor's is zero
             * but for rounding (attention's key bias: softmax ignores a shift of every score) */
            double mx = 1e-3 * all_max, e = 0;
            for (int64_t i = 0; i < n; i++)
                mx = fmax(mx, fabs(whole.grad[t][i]));
            for (int64_t i = 0; i < nl; i++)
                e = fmax(e, fabs((double)mine.grad[t][i] - ref[i]));
            double rel = mx > 0 ? e / mx : e;
            if (rel > worst)
                worst = rel, worst_name = sp->name;
            if (mx > 1e-3 * all_max)
                worst_own = fmax(worst_own, rel);
            if (!(rel <= TOL) || all_max == 0)
                fail(&gr, "%s: max |error| %.3g of max |gradient| %.3g", sp->name, e, mx);
            free(ref);
        }
        double all_worst[2] = {worst, worst_own};
        MPI_Allreduce(MPI_IN_PLACE, all_worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        check(gr.ok, gr.detail, "%s: every rank's gradient blocks equal the whole model's (worst relative error %.2e, "
              "this rank's in %s; %.2e where a tensor's own largest gradient is the scale)", what, all_worst[0],
              worst_name, all_worst[1]);

        /* the bytes: what the layouts move, per rank (every rank the same) */
        traffic tr = model_bytes(&l);
        double expect = (tr.acts + tr.weights + tr.small) * 4, got = (double)mine.bytes.bytes_sent;
        char d2[200];
        snprintf(d2, sizeof d2, "sent %.0f bytes, the layout's count %.0f", got, expect);
        check(fabs(got - expect) < 0.5, d2, "%s: the step's bytes per rank are the layout's count (%.0f)", what, expect);
        if (rank == 0 && tp > 1) {
            double U = (double)B * T * C; /* b*s*h */
            int q = l.q;
            double published = mode == COL_TP_2D ? 6.0 * (q - 1) / q
                               : mode == COL_TP_25D ? 3.0 * (q - 1) * (l.d + 1) / (l.d * q)
                                                    : 6.0 * (q - 1) / (q * q * q);
            /* a square linear [h -> h] of the whole batch: what one moves, per rank, in b*s*h */
            traffic one_l = {0, 0, 0};
            linear_bytes(&l, C, C, true, &one_l);
            TL_NOTE("%s: per rank per step %.0f bytes = %.3f b*s*h (linears' activations %.3f, weights %.3f, "
                    "norms/embeddings/head/loss %.3f); one square linear [h->h], forward and backward: activations "
                    "%.4f b*s*h, weights %.4f h*h; published %s %.4f", what, got, got / 4 / U, tr.acts / U,
                    tr.weights / U, tr.small / U, one_l.acts / U, one_l.weights / ((double)C * C),
                    col_tp_mode_name(mode), published);
        }
    }
    step_free(&mine, L.n);
    step_free(&whole, L.n);
    col_lm_par_close(&p);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_cpu_backend_init(&be, &err) == COL_OK;
    if (!ok || (size != 1 && size != 4 && size != 8)) {
        if (rank == 0)
            printf("Bail out! %s\n", ok ? "run with 1, 4 or 8 processes" : err.msg);
        MPI_Finalize();
        return 1;
    }
    col_comm_set_timeout(world, 120.0, &err);
    if (size == 1) {
        run_mode(COL_TP_2D, 1, 1, 1, 64);
        run_mode(COL_TP_25D, 1, 1, 1, 64);
        run_mode(COL_TP_3D, 1, 1, 1, 64);
    } else if (size == 4) {
        run_mode(COL_TP_2D, 4, 1, 1, 64);
        run_mode(COL_TP_2D, 4, 1, 1, 11);
        run_mode(COL_TP_25D, 4, 1, 1, 64);
    } else {
        run_mode(COL_TP_25D, 8, 2, 1, 64);
        run_mode(COL_TP_3D, 8, 1, 1, 64);
        run_mode(COL_TP_3D, 8, 1, 1, 11);
        run_mode(COL_TP_2D, 4, 1, 2, 64); /* with ring sequence parallelism: 2 x (2 x 2) */
    }
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
