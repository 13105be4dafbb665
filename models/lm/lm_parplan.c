/* lm_parplan.c - the layout planner's cost model, enumeration and ranking (lm_parplan.h has the formulas). */
#include "lm_parplan.h"
#include "units.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm_pipeline.h"

enum { ACT_BYTES = 4, MAX_MB_CHOICES = 12 };

static int mlp_mats(const col_lm_config *c) { return c->arch == COL_ARCH_LLAMA ? 3 : 2; }

/* the parameters of the largest stage of pp (the whole model for pp 1) and that stage's layers */
static col_status stage_params(const col_lm_config *c, int pp, double *psi, int *layers, col_err *err)
{
    int np = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    int *idx = calloc((size_t)np, sizeof *idx);
    if (!specs || !idx) {
        free(specs), free(idx);
        return col_err_set(err, COL_ENOMEM, "planner: out of memory");
    }
    col_lm_param_specs(c, specs);
    *psi = 0;
    *layers = 0;
    for (int j = 0; j < pp; j++) {
        int lo = 0, hi = c->n_layer;
        if (pp > 1)
            col_pp_stage_layers(c->n_layer, pp, j, &lo, &hi);
        int n = col_lm_stage_params(c, pp > 1 ? lo : 0, pp > 1 ? hi : 0, idx);
        double s = 0;
        for (int i = 0; i < n; i++)
            s += (double)col_param_numel(&specs[idx[i]]);
        if (s > *psi)
            *psi = s;
        if (hi - lo > *layers)
            *layers = hi - lo;
    }
    free(specs), free(idx);
    return COL_OK;
}

static bool mixed(col_dtype p) { return p == COL_BF16 || p == COL_F16; }

static col_status check_input(const col_plan_input *in, col_err *err)
{
    const col_plan_rates *r = &in->rates;
    if (in->world < 1 || in->batch < 1 || in->seq < 1)
        return col_err_set(err, COL_EINVAL, "planner: %d processes, %d rows of %d tokens (each at least 1)", in->world,
                           in->batch, in->seq);
    if (in->precision != COL_F32 && !mixed(in->precision))
        return col_err_set(err, COL_EINVAL, "planner: precision must be f32, bf16 or f16");
    if (in->opt_state_bytes < 0 || in->zero < 0 || in->zero > 3 || in->micro_batches < 0)
        return col_err_set(err, COL_EINVAL, "planner: optimizer state bytes %d, ZeRO stage %d, micro-batches %d",
                           in->opt_state_bytes, in->zero, in->micro_batches);
    if (!(r->flops > 0) || !isfinite(r->flops) || (in->world > 1 && (!(r->link_bw > 0) || !isfinite(r->link_bw))) ||
        !(r->link_lat >= 0) || !(r->mem_bw >= 0) || !(r->nvme_bw >= 0) || !(r->host_link_bw >= 0))
        return col_err_set(err, COL_EINVAL, "planner: the rates must be positive (compute %g flop/s, link %g B/s, "
                           "latency %g s)", r->flops, r->link_bw, r->link_lat);
    return col_lm_check_config(&in->model, err);
}

/* the layout's legality beyond the model's shapes (which col_par_layout_check sees) */
static col_status check_layout(const col_plan_input *in, const col_plan_layout *l, col_plan_layout *out, col_err *err)
{
    *out = *l;
    if (out->par.tp == 0) /* 0: none, as col_par_layout_check reads it */
        out->par.tp = 1;
    if (out->par.sp == 0)
        out->par.sp = 1;
    l = out;
    if (l->dp < 1 || l->pp < 1 || l->par.tp < 1 || l->par.sp < 1 || l->micro_batches < 1)
        return col_err_set(err, COL_EINVAL, "planner: dp %d, pp %d, tp %d, sp %d, micro-batches %d (each at least 1)",
                           l->dp, l->pp, l->par.tp, l->par.sp, l->micro_batches);
    if ((int64_t)l->dp * l->pp * l->par.tp * l->par.sp != in->world)
        return col_err_set(err, COL_EINVAL, "planner: dp %d x pp %d x tp %d x sp %d is not the %d processes", l->dp,
                           l->pp, l->par.tp, l->par.sp, in->world);
    if ((in->exclude & COL_PLAN_NO_TP) && l->par.tp > 1)
        return col_err_set(err, COL_EUNSUPPORTED, "planner: tensor parallelism is not available to this run");
    if ((in->exclude & COL_PLAN_NO_SP) && l->par.sp > 1)
        return col_err_set(err, COL_EUNSUPPORTED, "planner: sequence parallelism is not available to this run");
    if ((in->exclude & COL_PLAN_NO_PP) && l->pp > 1)
        return col_err_set(err, COL_EUNSUPPORTED, "planner: pipelines are not available to this run");
    if ((in->exclude & COL_PLAN_NO_MP_PP) && l->pp > 1 && l->par.tp * l->par.sp > 1)
        return col_err_set(err, COL_EUNSUPPORTED, "planner: tensor or sequence parallelism inside pipeline stages is "
                           "not available to this run");
    if (in->batch % l->dp)
        return col_err_set(err, COL_EINVAL, "planner: %d rows cannot be split between %d data parallel groups",
                           in->batch, l->dp);
    int rows = in->batch / l->dp;
    if (l->pp == 1 && l->micro_batches != 1)
        return col_err_set(err, COL_EINVAL, "planner: micro-batches without a pipeline");
    if (rows % l->micro_batches)
        return col_err_set(err, COL_EINVAL, "planner: %d micro-batches cannot split %d rows", l->micro_batches, rows);
    if (l->dp == 1)
        out->zero = 0;
    else if (l->zero < 1 || l->zero > 3)
        return col_err_set(err, COL_EINVAL, "planner: ZeRO stage %d (1, 2 or 3)", l->zero);
    if (l->pp > 1) {
        col_status st = col_pp_check(in->model.n_layer, l->pp, 1, l->micro_batches, err);
        if (st != COL_OK)
            return st;
        if (in->precision != COL_F32)
            return col_err_set(err, COL_EUNSUPPORTED, "planner: a pipeline stage computes in f32 only");
        if (in->device_bytes)
            return col_err_set(err, COL_EUNSUPPORTED, "planner: a pipeline stage runs without a compute tier");
    }
    return col_par_layout_check(&out->par, &in->model, in->seq, rows / l->micro_batches, err);
}

/* memory: model states by ZeRO stage, activations, and where they live against the budgets */
static void predict_memory(const col_plan_input *in, const col_plan_layout *l, double psi, int layers,
                           col_plan_entry *e)
{
    const col_lm_config *c = &in->model;
    int tp = l->par.tp, sp = l->par.sp, dp = l->dp;
    bool one_d = l->par.mode == COL_TP_1D;
    double pb = in->precision == COL_F32 ? 4 : 2, ob = in->opt_state_bytes + (mixed(in->precision) ? 4 : 0);
    e->params = psi * pb;
    e->grads = psi * pb;
    e->states = psi * ob;
    if (l->zero >= 1)
        e->states /= dp;
    if (l->zero >= 2)
        e->grads /= dp;
    if (l->zero >= 3)
        e->params /= dp;
    /* activations of one micro-batch: elements per layer and local token */
    double b = (double)in->batch / dp / l->micro_batches, s = in->seq, h = c->hidden;
    double qd = (double)c->n_head * c->head_dim, hkv = (double)c->n_kv_head * c->head_dim;
    double tokens = b * s / sp;
    double s_att = sp > 1 && l->par.sp_mode == COL_SP_RING ? s / sp : s;
    double per_tok = 4 * h / (one_d ? 1 : tp) + (2 * qd + 2 * hkv + mlp_mats(c) * (double)c->ffn) / tp +
                     2.0 * c->n_head * s_att / tp;
    double layer = tokens * per_tok * ACT_BYTES;
    double logits = 2 * tokens * col_lm_out_width(c) * ACT_BYTES / tp;
    double hidden = tokens * h * ACT_BYTES / (one_d ? 1 : tp);
    if (in->checkpointing)
        e->activations = layers * hidden + layer + logits;
    else
        e->activations = layers * layer + logits + hidden;
    if (l->pp > 1)
        e->activations += (l->micro_batches < l->pp ? l->micro_batches : l->pp) * hidden;
    /* the budgets */
    double held = e->params + e->grads + e->states;
    char a[32], bb[32];
    e->fits = true;
    e->nvme = 0;
    e->host = held;
    e->device = 0;
    if (in->device_bytes) {
        double work = 2 * (psi / (layers > 0 ? layers : 1)) * 2 * pb; /* two layers' parameters and gradients */
        e->device = e->activations + work;
        if (e->device > (double)in->device_bytes) {
            e->fits = false;
            col_fmt_bytes(a, sizeof a, (uint64_t)e->device), col_fmt_bytes(bb, sizeof bb, in->device_bytes);
            snprintf(e->why_not, sizeof e->why_not, "compute tier: needs %s of %s", a, bb);
        }
    }
    if (in->host_bytes && held > (double)in->host_bytes) {
        double over = held - (double)in->host_bytes;
        col_fmt_bytes(a, sizeof a, (uint64_t)held), col_fmt_bytes(bb, sizeof bb, in->host_bytes);
        if (!in->nvme) {
            if (e->fits)
                snprintf(e->why_not, sizeof e->why_not, "host: model states %s, budget %s", a, bb);
            e->fits = false;
        } else if (over > e->states && !in->device_bytes) {
            if (e->fits)
                snprintf(e->why_not, sizeof e->why_not, "host: states %s over %s need a compute tier on NVMe", a, bb);
            e->fits = false;
        } else if (l->pp > 1) {
            if (e->fits)
                snprintf(e->why_not, sizeof e->why_not, "host: %s over %s, and a pipeline stage has no NVMe tier", a,
                         bb);
            e->fits = false;
        }
        e->nvme = over;
        e->host = (double)in->host_bytes;
    }
    if (!in->device_bytes)
        e->host += e->activations;
}

col_status col_plan_predict(const col_plan_input *in, const col_plan_layout *lin, col_plan_entry *e, col_err *err)
{
    memset(e, 0, sizeof *e);
    col_status st = check_input(in, err);
    col_plan_layout l;
    if (st == COL_OK)
        st = check_layout(in, lin, &l, err);
    double psi_stage = 0;
    int layers = 0;
    if (st == COL_OK)
        st = stage_params(&in->model, l.pp, &psi_stage, &layers, err);
    if (st != COL_OK)
        return st;
    e->l = l;
    const col_lm_config *c = &in->model;
    const col_plan_rates *r = &in->rates;
    int tp = l.par.tp, sp = l.par.sp, dp = l.dp, pp = l.pp, M = l.micro_batches, q = l.par.q, d = l.par.d;
    bool one_d = l.par.mode == COL_TP_1D;
    double psi = psi_stage / tp;
    predict_memory(in, &l, psi, layers, e);

    /* compute: the largest stage's layers (and the head) on this process's share of the tokens */
    double h = c->hidden, s = in->seq, qd = (double)c->n_head * c->head_dim, hkv = (double)c->n_kv_head * c->head_dim;
    double w_layer = h * (qd + 2 * hkv) + qd * h + mlp_mats(c) * (double)c->ffn * h;
    double w_head = (double)col_lm_out_width(c) * h;
    bool recompute = pp > 1 || in->checkpointing;
    double fm = recompute ? 8 : 6, fa = recompute ? 16 : 12;
    double tokens = (double)in->batch * s / ((double)dp * tp * sp);
    e->flops = (layers * (fm * w_layer + fa * qd * s) + fm * w_head) * tokens;
    e->t_compute = e->flops / r->flops;
    double pb = in->precision == COL_F32 ? 4 : 2, ob = in->opt_state_bytes + (mixed(in->precision) ? 4 : 0);
    if (r->mem_bw > 0) {
        double owned = l.zero ? psi / dp : psi;
        double act_pass = 3.0 * M * e->activations; /* each micro-batch's activations written, read, and again */
        e->t_memory = (owned * (3 * pb + 2 * ob) + act_pass) / r->mem_bw;
    }
    if (e->nvme > 0)
        e->t_nvme = 2 * e->nvme / (r->nvme_bw > 0 ? r->nvme_bw : 1e9);
    if (in->device_bytes && r->host_link_bw > 0)
        e->t_tier = 2 * (psi * pb) / r->host_link_bw;

    /* communication */
    double lat = r->link_lat, bw = r->link_bw > 0 ? r->link_bw : 1;
    double b = (double)in->batch / dp / M;
    double U = b * (s / sp) * h * ACT_BYTES;
    double chunks = layers + 1;
    double gbytes = psi * pb;
    if (dp > 1) {
        e->b_dp += 2.0 * (dp - 1) / dp * gbytes;
        e->m_dp += 2.0 * (dp - 1) * chunks;
    }
    if (sp > 1) {
        e->b_dp += 2.0 * (sp - 1) / sp * gbytes;
        e->m_dp += 2.0 * (sp - 1) * chunks;
    }
    if (tp > 1) {
        double vol, msgs;
        switch (l.par.mode) {
        case COL_TP_1D: vol = 4 * 2.0 * (tp - 1) / tp, msgs = 8.0 * (tp - 1); break;
        case COL_TP_2D: vol = 6.0 * (q - 1) / q, msgs = 24.0 * q; break;
        case COL_TP_25D: vol = 3.0 * (q - 1) * (d + 1) / ((double)d * q), msgs = 24.0 * q; break;
        default: vol = 6.0 * (q - 1) / ((double)q * q * q), msgs = 36.0 * (q - 1); break;
        }
        e->b_tp = M * (layers * vol * U + (one_d ? 2.0 * (tp - 1) / tp * U : 0));
        e->m_tp = M * (layers * msgs + (one_d ? 2.0 * (tp - 1) : 0));
    }
    if (sp > 1) {
        double loc = b * (s / sp) * ACT_BYTES / tp;
        if (l.par.sp_mode == COL_SP_RING) {
            e->b_sp = M * layers * 2.0 * (sp - 1) * 2 * loc * hkv;
            e->m_sp = M * layers * 2.0 * (sp - 1) * 2;
        } else {
            e->b_sp = M * layers * 2.0 * (sp - 1) / sp * loc * (2 * qd + 2 * hkv);
            e->m_sp = M * layers * 8.0 * (sp - 1);
        }
    }
    if (pp > 1) {
        double hb = b * s * h * ACT_BYTES / sp / (one_d ? 1 : tp);
        double sends = pp == 2 ? 1 : 2;
        e->b_pp = sends * M * hb;
        e->m_pp = sends * M;
    }
    e->t_dp = e->b_dp / bw + e->m_dp * lat;
    e->t_tp = e->b_tp / bw + e->m_tp * lat;
    e->t_sp = e->b_sp / bw + e->m_sp * lat;
    e->t_pp = e->b_pp / bw + e->m_pp * lat;
    if (pp > 1)
        e->t_bubble = (e->t_compute + e->t_tp + e->t_sp + e->t_pp) * (pp - 1) / M;
    e->t_step = e->t_compute + e->t_memory + e->t_nvme + e->t_tier + e->t_bubble + e->t_dp + e->t_tp + e->t_sp +
                e->t_pp;
    return COL_OK;
}

/* ---- enumeration and ranking ---- */

typedef struct {
    col_plan_entry *e;
    int n, cap;
} list;

static col_status push(list *L, const col_plan_entry *e, col_err *err)
{
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 64;
        col_plan_entry *p = realloc(L->e, sizeof *p * (size_t)cap);
        if (!p)
            return col_err_set(err, COL_ENOMEM, "planner: out of memory");
        L->e = p, L->cap = cap;
    }
    L->e[L->n++] = *e;
    return COL_OK;
}

static int iroot(int n, int k)
{
    for (int r = 1;; r++) {
        long p = 1;
        for (int i = 0; i < k; i++)
            p *= r;
        if (p == n)
            return r;
        if (p > n)
            return 0;
    }
}

/* the tensor-parallel layouts of tp processes: 1D, 2D (square), 2.5D (q x q x d, d >= 2, q >= 2), 3D (cube) */
static int tp_layouts(int tp, col_par_layout *out, int max)
{
    int n = 0;
    out[n++] = (col_par_layout){.mode = COL_TP_1D, .tp = tp};
    if (tp == 1)
        return n;
    if (iroot(tp, 2) >= 2 && n < max)
        out[n++] = (col_par_layout){.mode = COL_TP_2D, .tp = tp};
    for (int d = 2; d <= tp && n < max; d++)
        if (tp % d == 0 && iroot(tp / d, 2) >= 2)
            out[n++] = (col_par_layout){.mode = COL_TP_25D, .tp = tp, .d = d};
    if (iroot(tp, 3) >= 2 && n < max)
        out[n++] = (col_par_layout){.mode = COL_TP_3D, .tp = tp};
    return n;
}

/* the micro-batch counts tried for a pipeline of pp stages over rows rows */
static int mb_choices(const col_plan_input *in, int pp, int rows, int *out)
{
    if (pp == 1)
        return out[0] = 1, 1;
    if (in->micro_batches)
        return out[0] = in->micro_batches, 1;
    int n = 0;
    for (int m = 1; m <= rows && n < MAX_MB_CHOICES; m++)
        if (rows % m == 0)
            out[n++] = m;
    return n;
}

static int cmp_entry(const void *pa, const void *pb)
{
    const col_plan_entry *a = pa, *b = pb;
    if (a->fits != b->fits)
        return a->fits ? -1 : 1;
    double ma = a->host + a->nvme + a->device, mb = b->host + b->nvme + b->device;
    double ka = a->fits ? a->t_step : ma, kb = b->fits ? b->t_step : mb;
    if (ka != kb)
        return ka < kb ? -1 : 1;
    if (ma != mb)
        return ma < mb ? -1 : 1;
    /* a fixed order for equal predictions: more data parallel, then the enumeration order's fields */
    if (a->l.dp != b->l.dp)
        return b->l.dp - a->l.dp;
    if (a->l.zero != b->l.zero)
        return a->l.zero - b->l.zero;
    if (a->l.par.mode != b->l.par.mode)
        return (int)a->l.par.mode - (int)b->l.par.mode;
    if (a->l.par.d != b->l.par.d)
        return a->l.par.d - b->l.par.d;
    if (a->l.par.sp_mode != b->l.par.sp_mode)
        return (int)a->l.par.sp_mode - (int)b->l.par.sp_mode;
    if (a->l.pp != b->l.pp)
        return a->l.pp - b->l.pp;
    return a->l.micro_batches - b->l.micro_batches;
}

col_status col_plan_rank(const col_plan_input *in, col_plan_entry **out, int *n, col_err *err)
{
    *out = NULL;
    *n = 0;
    col_status st = check_input(in, err);
    if (st != COL_OK)
        return st;
    if (in->world > 1 << 20)
        return col_err_set(err, COL_EINVAL, "planner: %d processes is more than it enumerates", in->world);
    list L = {0};
    int N = in->world;
    for (int tp = 1; tp <= N && st == COL_OK; tp++) {
        if (N % tp)
            continue;
        col_par_layout tps[64];
        int ntp = tp_layouts(tp, tps, 64);
        for (int it = 0; it < ntp && st == COL_OK; it++)
            for (int sp = 1; sp <= N / tp && st == COL_OK; sp++) {
                if ((N / tp) % sp)
                    continue;
                for (int sm = 0; sm < (sp > 1 ? COL_SP_MODE_COUNT : 1) && st == COL_OK; sm++)
                    for (int pp = 1; pp <= N / (tp * sp) && st == COL_OK; pp++) {
                        if ((N / (tp * sp)) % pp)
                            continue;
                        int dp = N / (tp * sp * pp);
                        if (in->batch % dp)
                            continue;
                        int mbs[MAX_MB_CHOICES], nmb = mb_choices(in, pp, in->batch / dp, mbs);
                        int z0 = dp == 1 ? 0 : in->zero ? in->zero : 1, z1 = dp == 1 ? 0 : in->zero ? in->zero : 3;
                        for (int im = 0; im < nmb && st == COL_OK; im++)
                            for (int z = z0; z <= z1 && st == COL_OK; z++) {
                                col_plan_layout l = {.dp = dp, .pp = pp, .micro_batches = mbs[im], .zero = z,
                                                     .par = tps[it]};
                                l.par.sp = sp;
                                l.par.sp_mode = (col_sp_mode)sm;
                                col_plan_entry e;
                                col_err lerr = {0};
                                col_status s2 = col_plan_predict(in, &l, &e, &lerr);
                                if (s2 == COL_OK)
                                    st = push(&L, &e, err);
                                else if (s2 == COL_ENOMEM) {
                                    col_err_copy(err, &lerr);
                                    st = COL_ENOMEM;
                                }
                            }
                    }
            }
    }
    if (st != COL_OK) {
        free(L.e);
        return st;
    }
    if (L.n)
        qsort(L.e, (size_t)L.n, sizeof *L.e, cmp_entry);
    *out = L.e;
    *n = L.n;
    return COL_OK;
}

/* ---- text ---- */

void col_plan_layout_name(const col_plan_layout *l, char *buf, size_t n)
{
    char tp[32] = "tp1", sp[32] = "sp1";
    if (l->par.tp > 1 && l->par.mode == COL_TP_25D)
        snprintf(tp, sizeof tp, "tp%d(2.5d,d%d)", l->par.tp, l->par.d);
    else if (l->par.tp > 1)
        snprintf(tp, sizeof tp, "tp%d(%s)", l->par.tp, col_tp_mode_name(l->par.mode));
    if (l->par.sp > 1)
        snprintf(sp, sizeof sp, "sp%d(%s)", l->par.sp, col_sp_mode_name(l->par.sp_mode));
    snprintf(buf, n, "dp%d %s pp%d %s zero%d mb%d", l->dp, tp, l->pp, sp, l->zero, l->micro_batches);
}

static void fmt_time(double t, char *buf, size_t n)
{
    if (t >= 1)
        snprintf(buf, n, "%.2f s", t);
    else if (t >= 1e-3)
        snprintf(buf, n, "%.2f ms", t * 1e3);
    else
        snprintf(buf, n, "%.1f us", t * 1e6);
}

void col_plan_explain(const col_plan_input *in, const col_plan_entry *e, char *buf, size_t n)
{
    struct {
        const char *what;
        double t;
    } terms[] = {{"compute", e->t_compute},
                 {"memory traffic (optimizer, elementwise)", e->t_memory},
                 {"the NVMe tier's reads and writes", e->t_nvme},
                 {"the compute tier's transfers", e->t_tier},
                 {"the pipeline's bubble", e->t_bubble},
                 {e->l.par.sp > 1 ? "the gradient exchange (data and sequence parallel)" : "the data parallel gradient "
                                                                                             "exchange", e->t_dp},
                 {"tensor parallel collectives", e->t_tp},
                 {e->l.par.sp_mode == COL_SP_RING ? "ring attention's K/V passes" : "Ulysses' all-to-alls", e->t_sp},
                 {"pipeline sends", e->t_pp}};
    int nt = (int)(sizeof terms / sizeof terms[0]), i1 = 0, i2 = -1;
    for (int i = 1; i < nt; i++)
        if (terms[i].t > terms[i1].t)
            i1 = i;
    for (int i = 0; i < nt; i++)
        if (i != i1 && terms[i].t > 0 && (i2 < 0 || terms[i].t > terms[i2].t))
            i2 = i;
    double tot = e->t_step > 0 ? e->t_step : 1;
    char ts[32], hb[32], bud[48] = "", second[96] = "", mem[224];
    fmt_time(e->t_step, ts, sizeof ts);
    if (i2 >= 0)
        snprintf(second, sizeof second, ", then %s %.0f%%", terms[i2].what, 100 * terms[i2].t / tot);
    col_fmt_bytes(hb, sizeof hb, (uint64_t)(e->params + e->grads + e->states));
    if (in->host_bytes) {
        char b2[32];
        col_fmt_bytes(b2, sizeof b2, in->host_bytes);
        snprintf(bud, sizeof bud, " (host budget %s)", b2);
    }
    if (!e->fits)
        snprintf(mem, sizeof mem, "does not fit: %s", e->why_not);
    else
        snprintf(mem, sizeof mem, "model states %s per process%s%s", hb, bud, e->nvme > 0 ? ", part on NVMe" : "");
    snprintf(buf, n, "%s dominates (%.0f%% of %s%s); %s", terms[i1].what, 100 * terms[i1].t / tot, ts, second, mem);
}

size_t col_plan_format(const col_plan_input *in, const col_plan_entry *e, int count, int top, char *buf, size_t n)
{
    if (!buf || n == 0)
        return 0;
    size_t w = 0;
    buf[0] = '\0';
    char line[512];
    int len = snprintf(line, sizeof line, "%4s  %-38s %10s %10s %10s %10s %10s %11s %11s\n", "rank", "layout",
                       "step", "compute", "exchange", "bubble", "other", "states", "activations");
    (void)in;
    for (int i = -1; i < count && i < top; i++) {
        if (i >= 0) {
            const col_plan_entry *x = &e[i];
            char name[96], ts[32], tc[32], tx[32], tb[32], to[32], ms[32], ma[32];
            col_plan_layout_name(&x->l, name, sizeof name);
            fmt_time(x->t_step, ts, sizeof ts);
            fmt_time(x->t_compute, tc, sizeof tc);
            fmt_time(x->t_dp + x->t_tp + x->t_sp + x->t_pp, tx, sizeof tx);
            fmt_time(x->t_bubble, tb, sizeof tb);
            fmt_time(x->t_memory + x->t_nvme + x->t_tier, to, sizeof to);
            col_fmt_bytes(ms, sizeof ms, (uint64_t)(x->params + x->grads + x->states));
            col_fmt_bytes(ma, sizeof ma, (uint64_t)x->activations);
            len = snprintf(line, sizeof line, "%4d  %-38s %10s %10s %10s %10s %10s %11s %11s%s%s\n", i + 1, name, ts,
                           tc, tx, tb, to, ms, ma, x->fits ? "" : "  does not fit: ", x->fits ? "" : x->why_not);
        }
        if (len < 0 || w + (size_t)len >= n)
            break;
        memcpy(buf + w, line, (size_t)len + 1);
        w += (size_t)len;
    }
    return w;
}
