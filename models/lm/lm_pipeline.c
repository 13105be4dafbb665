/* lm_pipeline.c - pipeline parallelism: the schedules (pure functions) and the
 * pipelined training step over stage sessions (see lm_pipeline.h). */
#include "lm_pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lm_trainer_internal.h"

col_status col_pp_check(int n_layer, int P, int v, int M, col_err *err)
{
    if (P < 1 || v < 1 || M < 1)
        return col_err_set(err, COL_EINVAL, "pipeline: %d processes, %d virtual stages each and %d micro-batches "
                           "(each at least 1)", P, v, M);
    if (v > 1 && M % P)
        return col_err_set(err, COL_EINVAL, "pipeline: the interleaved schedule needs the micro-batches (%d) to be "
                           "a multiple of the pipeline's %d processes", M, P);
    if (n_layer > 0 && (int64_t)P * v > n_layer)
        return col_err_set(err, COL_EINVAL, "pipeline: %d stages (%d processes x %d virtual stages) for a model of "
                           "%d layers: at most one stage per layer", P * v, P, v, n_layer);
    if ((int64_t)P * v * M > 16000)
        return col_err_set(err, COL_EINVAL, "pipeline: %d stages x %d micro-batches is more than the 16000 "
                           "messages a step can tag apart", P * v, M);
    return COL_OK;
}

void col_pp_stage_layers(int n_layer, int S, int j, int *lo, int *hi)
{
    int base = n_layer / S, rem = n_layer % S; /* the first rem stages take one layer more */
    *lo = j * base + (j < rem ? j : rem);
    *hi = *lo + base + (j < rem ? 1 : 0);
}

/* the i-th forward (or backward) of a rank in interleaved order: micro-batches in groups of P, each group
 * through the rank's v stages in turn (backwards: the stages in reverse) */
static col_pp_op nth_op(char kind, int i, int rank, int P, int v)
{
    int in_group = i % (P * v), chunk = in_group / P;
    if (kind == 'B')
        chunk = v - 1 - chunk;
    return (col_pp_op){kind, chunk * P + rank, (i / (P * v)) * P + in_group % P};
}

col_status col_pp_schedule(int rank, int P, int v, int M, col_pp_op *ops, int *n, col_err *err)
{
    *n = 0;
    col_status st = col_pp_check(0, P, v, M, err);
    if (st != COL_OK)
        return st;
    if (rank < 0 || rank >= P)
        return col_err_set(err, COL_EINVAL, "pipeline: rank %d of %d", rank, P);
    int total = v * M;
    /* 1F1B: the forwards that fill the pipe below this rank before its first backward can arrive; interleaved:
     * twice that (each stage's backward waits on a stage further down) plus the rank's other chunks of the
     * first group */
    int warm = v == 1 ? P - rank - 1 : 2 * (P - rank - 1) + (v - 1) * P;
    if (warm > total)
        warm = total;
    int k = 0;
    for (int f = 0; f < warm; f++)
        ops[k++] = nth_op('F', f, rank, P, v);
    for (int i = 0; i < total - warm; i++) {
        ops[k++] = nth_op('F', warm + i, rank, P, v);
        ops[k++] = nth_op('B', i, rank, P, v);
    }
    for (int b = total - warm; b < total; b++)
        ops[k++] = nth_op('B', b, rank, P, v);
    *n = k;
    return COL_OK;
}

#ifdef COL_WITH_COMM
#include "comm.h"

/* one stage session of this process and what its in-flight micro-batches keep */
typedef struct {
    col_lm_trainer *t;
    int j, lo, hi;      /* virtual stage, its layers */
    bool first, last;   /* the model's first / last stage */
    col_plan *fplan;    /* forward-only plan of the training graph: hidden_out (not made for the last stage) */
    float **input;      /* per micro-batch: the hidden states received (stages after the first), until its backward */
    int backwards;      /* backwards run this step */
} pp_stage;

/* a send in flight and its buffer (freed once waited for) */
typedef struct {
    col_comm_req *req;
    float *buf;
} pp_send;

struct col_lm_pipeline {
    col_lm_pipeline_config cfg;
    col_comm *pipe, *dp;
    int P, rank, v, M, S, rows;  /* rows: of one micro-batch */
    int64_t hn;                  /* floats of one micro-batch's hidden states */
    pp_stage *st;                /* v local stages: st[s] is virtual stage rank + s * P */
    col_pp_op *ops;
    int nops;
    pp_send *sends;
    int nsend;
    float *grad_in;              /* a received gradient of hidden_out */
    float loss;                  /* the last stage's weighted loss sum this step */
    float *w;                    /* per micro-batch: its loss weight */
};

static col_status send_async(col_lm_pipeline *p, float *buf, int peer, int tag, col_err *err)
{
    pp_send *s = &p->sends[p->nsend];
    col_status st = col_comm_send_async(p->pipe, buf, (size_t)p->hn, COL_F32, peer, tag, &s->req, err);
    if (st != COL_OK) {
        free(buf);
        return st;
    }
    s->buf = buf;
    p->nsend++;
    return COL_OK;
}

static col_status wait_sends(col_lm_pipeline *p, col_err *err)
{
    col_status st = COL_OK;
    for (int i = 0; i < p->nsend; i++) {
        col_status s = col_comm_wait(p->sends[i].req, err);
        st = st == COL_OK ? s : st;
        free(p->sends[i].buf);
    }
    p->nsend = 0;
    return st;
}

/* distinct tags for each (direction, stage, micro-batch) of a step */
static int tag_of(const col_lm_pipeline *p, char kind, int j, int k) { return 2 * (j * p->M + k) + (kind == 'B'); }

static col_status set_counter(col_lm_pipeline *p, pp_stage *s, int k)
{
    /* the run counter a single process's session with M accumulated micro-batches gives micro-batch k */
    col_graph_set_rng_counter(s->t->g, (uint64_t)(s->t->step * p->M + k + 1));
    return COL_OK;
}

/* the stage's inputs for micro-batch k into plan: its token rows (first stage) or the hidden states kept, and
 * (the last stage, targets not NULL) its targets. Under tensor or sequence parallelism this rank's rows and
 * positions of them, and 1 / the micro-batch's counted targets: the graph's loss is the micro-batch's mean, as
 * without (the step weights it by p->w[k]). */
static col_status load_input(col_lm_pipeline *p, pp_stage *s, col_plan *plan, const int32_t *ids,
                             const int32_t *targets, int k, col_err *err)
{
    col_lm_trainer *t = s->t;
    int64_t n = (int64_t)p->rows * t->cfg.seq;
    const int32_t *mi = ids + k * n, *mt = targets ? targets + k * n : NULL;
    float inv = 0;
    if (t->par) {
        int32_t *li, *lt;
        inv = lmt_par_inputs(t, mi, targets ? mt : mi, p->rows, &li, &lt, &n);
        mi = li;
        mt = targets ? lt : NULL;
    }
    col_status st = s->first ? col_plan_upload(plan, t->gg.ids, mi, sizeof(int32_t) * (size_t)n, err)
                             : col_plan_upload(plan, t->gg.hidden_in, s->input[k], sizeof(float) * (size_t)p->hn, err);
    if (st == COL_OK && s->last && mt)
        st = col_plan_upload(plan, t->gg.targets, mt, sizeof(int32_t) * (size_t)n, err);
    if (st == COL_OK && s->last && mt && t->gg.inv_count)
        st = col_plan_upload(plan, t->gg.inv_count, &inv, sizeof inv, err);
    return st;
}

static col_status forward(col_lm_pipeline *p, pp_stage *s, const int32_t *ids, int k, col_err *err)
{
    col_status st = COL_OK;
    if (!s->first) { /* keep the hidden states until the backward */
        s->input[k] = malloc(sizeof(float) * (size_t)p->hn);
        if (!s->input[k])
            return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
        st = col_comm_recv(p->pipe, s->input[k], (size_t)p->hn, COL_F32, (s->j - 1) % p->P, tag_of(p, 'F', s->j, k),
                           err);
    }
    if (st != COL_OK || s->last) /* the last stage computes at the backward */
        return st;
    float *out = malloc(sizeof(float) * (size_t)p->hn);
    if (!out)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    set_counter(p, s, k);
    st = load_input(p, s, s->fplan, ids, NULL, k, err);
    if (st == COL_OK)
        st = col_plan_run(s->fplan, s->t->be, err);
    if (st == COL_OK)
        st = col_plan_download(s->fplan, s->t->gg.hidden_out, out, sizeof(float) * (size_t)p->hn, err);
    if (st != COL_OK) {
        free(out);
        return st;
    }
    return send_async(p, out, (s->j + 1) % p->P, tag_of(p, 'F', s->j + 1, k), err);
}

/* forward again from the kept input, then backward seeded by the loss weight (last stage) or the gradient of
 * hidden_out the next stage sends; the gradient of hidden_in goes to the previous stage */
static col_status backward(col_lm_pipeline *p, pp_stage *s, const int32_t *ids, const int32_t *targets, int k,
                           col_err *err)
{
    col_lm_trainer *t = s->t;
    col_status st = COL_OK;
    if (s->last) {
        st = col_plan_upload(t->plan, t->seed, &p->w[k], sizeof(float), err);
    } else {
        st = col_comm_recv(p->pipe, p->grad_in, (size_t)p->hn, COL_F32, (s->j + 1) % p->P, tag_of(p, 'B', s->j, k),
                           err);
        if (st == COL_OK)
            st = col_plan_upload(t->plan, t->seed, p->grad_in, sizeof(float) * (size_t)p->hn, err);
    }
    set_counter(p, s, k);
    if (st == COL_OK)
        st = load_input(p, s, t->plan, ids, targets, k, err);
    t->dp_last = ++s->backwards == p->M; /* the data parallel exchange overlaps the stage's last backward */
    if (st == COL_OK)
        st = lmt_run(t, t->plan, &t->tier, 0, err);
    t->dp_last = false;
    if (st == COL_OK && s->last) {
        float l = 0;
        st = col_plan_download(t->plan, t->gg.loss, &l, sizeof l, err);
        p->loss += p->w[k] > 0 ? p->w[k] * l : 0.0f;
    }
    if (!s->first) {
        free(s->input[k]);
        s->input[k] = NULL;
    }
    if (st != COL_OK || s->first)
        return st;
    float *g = malloc(sizeof(float) * (size_t)p->hn);
    if (!g)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    st = col_plan_download(t->plan, t->gg.hidden_in->grad, g, sizeof(float) * (size_t)p->hn, err);
    if (st != COL_OK) {
        free(g);
        return st;
    }
    return send_async(p, g, (s->j - 1) % p->P, tag_of(p, 'B', s->j - 1, k), err);
}

/* the local index of tensor with global index gi in stage s (-1: none) */
static int local_of(const pp_stage *s, int gi)
{
    for (int i = 0; i < s->t->np; i++)
        if (lmt_global(s->t, i) == gi)
            return i;
    return -1;
}

/* Tied embeddings: the first and the last stage's gradients of the embedding summed (a + b = b + a bitwise,
 * so both copies get the same sum and stay identical after the same optimizer step). */
static col_status sum_tied(col_lm_pipeline *p, col_err *err)
{
    if (!p->cfg.train.model.tie_embeddings || p->S == 1)
        return COL_OK;
    pp_stage *a = p->rank == 0 ? &p->st[0] : NULL, *b = p->rank == (p->S - 1) % p->P ? &p->st[p->v - 1] : NULL;
    pp_stage *mine = a ? a : b;
    if (!mine)
        return COL_OK;
    int ia = a ? local_of(a, COL_LM_TIED_PARAM) : -1, ib = b ? local_of(b, COL_LM_TIED_PARAM) : -1;
    int i = a ? ia : ib;
    if (i < 0)
        return col_err_set(err, COL_EINTERNAL, "pipeline: the tied embedding is missing from a stage");
    int64_t n = mine->t->ot[i].n;
    if (a && b) { /* both on this process (one rank) */
        float *ga = a->t->ot[ia].g, *gb = b->t->ot[ib].g;
        for (int64_t e = 0; e < n; e++)
            ga[e] = gb[e] = ga[e] + gb[e];
        return COL_OK;
    }
    float *other = malloc(sizeof(float) * (size_t)n), *g = mine->t->ot[i].g;
    if (!other)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    int peer = a ? (p->S - 1) % p->P : 0, tag = 2 * p->S * p->M + 1;
    col_comm_req *req = NULL;
    col_status st = col_comm_send_async(p->pipe, g, (size_t)n, COL_F32, peer, tag, &req, err);
    if (st == COL_OK)
        st = col_comm_recv(p->pipe, other, (size_t)n, COL_F32, peer, tag, err);
    col_status ws = col_comm_wait(req, err);
    st = st == COL_OK ? ws : st;
    for (int64_t e = 0; st == COL_OK && e < n; e++)
        g[e] += other[e];
    free(other);
    return st;
}

/* the whole model's gradient norm (the tied embedding counted once, on the first stage), known on every
 * process of the pipeline: each process's sum of squares (under tensor or sequence parallelism each block once:
 * weighted by lmt_par_weight, summed over the model-parallel group, the same on its ranks) gathered and added in
 * rank order */
static col_status global_norm(col_lm_pipeline *p, double *norm, col_err *err)
{
    double mine = 0;
    for (int s = 0; s < p->v; s++) {
        col_lm_trainer *t = p->st[s].t;
        for (int i = t->train0; i < t->nt; i++)
            if (!(col_lm_stage_shares_tied(&t->cfg.model, t->cfg.layer_lo, t->cfg.layer_hi) &&
                  lmt_global(t, i) == COL_LM_TIED_PARAM))
                mine += lmt_par_weight(t, i) * col_grad_sumsq(&t->ot[i], 1);
    }
    double *all = malloc(sizeof(double) * (size_t)p->P);
    if (!all)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    col_status st = lmt_par_sum_d(p->st[0].t, mine, &mine, err);
    if (st == COL_OK)
        st = col_comm_all_gather(p->pipe, &mine, all, 1, COL_I64, err);
    double sum = 0;
    for (int r = 0; st == COL_OK && r < p->P; r++)
        sum += all[r];
    free(all);
    *norm = sqrt(sum);
    return st;
}

/* With data parallelism: every local stage's gradients reduced over its dp group, then the whole model's norm
 * from their spans (each stage's squares summed over its dp group, then over the pipeline; the last stage's copy
 * of a tied embedding left out), the same on every process */
static col_status dp_reduced_norm(col_lm_pipeline *p, double *norm, col_err *err)
{
    col_status st = COL_OK;
    double mine = 0;
    for (int s = 0; s < p->v && st == COL_OK; s++) {
        col_lm_trainer *t = p->st[s].t;
        int skip = p->st[s].last && col_lm_stage_shares_tied(&t->cfg.model, t->cfg.layer_lo, t->cfg.layer_hi)
                       ? local_of(&p->st[s], COL_LM_TIED_PARAM)
                       : -1;
        double sq = 0;
        if ((st = lmt_dp_reduce_grads(t, err)) == COL_OK && (st = lmt_dp_grad_sumsq(t, skip, &sq, err)) == COL_OK)
            mine += sq;
    }
    double *each = malloc(sizeof(double) * (size_t)p->P);
    if (!each)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    if (st == COL_OK) /* each block once over the model-parallel group (lmt_dp_grad_sumsq weighs them) */
        st = lmt_par_sum_d(p->st[0].t, mine, &mine, err);
    if (st == COL_OK) /* doubles travel as the bits of an i64, added in rank order */
        st = col_comm_all_gather(p->pipe, &mine, each, 1, COL_I64, err);
    double sum = 0;
    for (int r = 0; st == COL_OK && r < p->P; r++)
        sum += each[r];
    free(each);
    *norm = sqrt(sum > 0 ? sum : 0);
    return st;
}

static col_status make_stage(col_lm_pipeline *p, int s, const col_backend *be, col_err *err)
{
    pp_stage *ps = &p->st[s];
    const col_lm_config *mc = &p->cfg.train.model;
    ps->j = p->rank + s * p->P;
    col_pp_stage_layers(mc->n_layer, p->S, ps->j, &ps->lo, &ps->hi);
    ps->first = ps->lo == 0;
    ps->last = ps->hi == mc->n_layer;
    ps->input = calloc((size_t)p->M, sizeof *ps->input);
    if (!ps->input)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    col_lm_train_config c = p->cfg.train;
    c.batch = p->rows;
    c.layer_lo = ps->lo;
    c.layer_hi = ps->hi;
    if (mc->tie_embeddings && p->S > 1 && (ps->first || ps->last))
        c.dp_serial = true; /* the tied gradients are summed before the data parallel reduction starts */
    col_status st = col_lm_trainer_create(&c, be, &ps->t, err);
    if (st != COL_OK)
        return st;
    if (ps->t->nvme_kinds)
        return col_err_set(err, COL_EUNSUPPORTED, "pipeline: stage %d's tensors do not fit the host memory budget; "
                           "the NVMe tier is not supported in a pipeline stage yet", ps->j);
    if (ps->last)
        return COL_OK;
    col_node *out = ps->t->gg.hidden_out;
    st = col_plan_create_for(ps->t->g, be, &out, 1, &ps->fplan, err);
    return st == COL_OK ? col_plan_share_memory(ps->fplan, ps->t->plan, err) : st;
}

col_status col_lm_pipeline_create(const col_lm_pipeline_config *cfg, const col_backend *be, col_lm_pipeline **out,
                                   col_err *err)
{
    *out = NULL;
    const col_lm_train_config *tc = &cfg->train;
    if (!cfg->pipe)
        return col_err_set(err, COL_EINVAL, "pipeline: no pipeline communicator");
    int P = col_comm_size(cfg->pipe), v = cfg->virtual_stages ? cfg->virtual_stages : 1, M = cfg->micro_batches;
    col_status st = col_pp_check(tc->model.n_layer, P, v, M, err);
    if (st != COL_OK)
        return st;
    if (tc->batch < 1 || tc->batch % M)
        return col_err_set(err, COL_EINVAL, "pipeline: %d rows per step cannot be cut into %d equal micro-batches",
                           tc->batch, M);
    if (tc->layer_lo || tc->layer_hi || tc->grad_accum > 1)
        return col_err_set(err, COL_EINVAL, "pipeline: the configuration must be the whole model's (no layer range) "
                           "without gradient accumulation (the micro-batches are the accumulation)");
    if (tc->compute_budget || tc->nvme_dir || tc->inference)
        return col_err_set(err, COL_EUNSUPPORTED, "pipeline: a compute tier, the NVMe tier and inference sessions "
                           "are not supported in a pipeline yet");
    col_lm_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    p->cfg = *cfg;
    p->pipe = cfg->pipe;
    p->dp = tc->dp && col_comm_size(tc->dp) > 1 ? tc->dp : NULL;
    p->P = P, p->v = v, p->M = M, p->S = P * v;
    p->rank = col_comm_rank(cfg->pipe);
    p->rows = tc->batch / M;
    p->hn = (int64_t)p->rows * tc->seq * tc->model.hidden;
    const col_lm_par *par = tc->par;
    if (col_par_active(par)) { /* this rank's block of the hidden states: its rows, positions and hidden part */
        int row0, rows;
        par->ops->rows(par, p->rows, &row0, &rows);
        p->hn = (int64_t)rows * (tc->seq / (par->layout.sp > 1 ? par->layout.sp : 1)) *
                par->ops->hidden_local(par, tc->model.hidden);
    }
    p->st = calloc((size_t)v, sizeof *p->st);
    p->ops = malloc(sizeof *p->ops * 2 * (size_t)v * (size_t)M);
    p->sends = calloc(2 * (size_t)v * (size_t)M, sizeof *p->sends);
    p->grad_in = malloc(sizeof(float) * (size_t)p->hn);
    p->w = malloc(sizeof(float) * (size_t)M);
    st = p->st && p->ops && p->sends && p->grad_in && p->w ? COL_OK
                                                           : col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    if (st == COL_OK)
        st = col_pp_schedule(p->rank, P, v, M, p->ops, &p->nops, err);
    for (int s = 0; s < v && st == COL_OK; s++)
        st = make_stage(p, s, be, err);
    if (st != COL_OK) {
        col_lm_pipeline_free(p);
        return st;
    }
    *out = p;
    return COL_OK;
}

void col_lm_pipeline_free(col_lm_pipeline *p)
{
    if (!p)
        return;
    col_err e = {0};
    wait_sends(p, &e);
    for (int s = 0; p->st && s < p->v; s++) {
        for (int k = 0; p->st[s].input && k < p->M; k++)
            free(p->st[s].input[k]);
        free(p->st[s].input);
        col_plan_free(p->st[s].fplan);
        col_lm_trainer_free(p->st[s].t);
    }
    free(p->st);
    free(p->ops);
    free(p->sends);
    free(p->grad_in);
    free(p->w);
    free(p);
}

/* micro-batch k's loss weight: its counted targets over the step's, summed over the data parallel group */
static col_status weights(col_lm_pipeline *p, const int32_t *targets, col_err *err)
{
    int64_t n = (int64_t)p->rows * p->cfg.train.seq, total = 0, *cnt = calloc((size_t)p->M, sizeof *cnt);
    if (!cnt)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    for (int k = 0; k < p->M; k++) {
        for (int64_t e = 0; e < n; e++)
            cnt[k] += targets[k * n + e] != -1;
        total += cnt[k];
    }
    col_status st = p->dp ? col_comm_all_reduce(p->dp, &total, &total, 1, COL_I64, COL_RED_SUM, err) : COL_OK;
    if (st == COL_OK && total == 0)
        st = col_err_set(err, COL_EINVAL, "pipeline step: every target is -1 (ignored): nothing to learn from");
    for (int k = 0; k < p->M && st == COL_OK; k++)
        p->w[k] = (float)((double)cnt[k] / (double)total);
    free(cnt);
    return st;
}

col_status col_lm_pipeline_step(col_lm_pipeline *p, const int32_t *ids, const int32_t *targets,
                                 col_lm_step_info *info, col_err *err)
{
    lmt_step_clock clk;
    lmt_clock_start(p->st[0].t, &clk);
    col_status st = weights(p, targets, err);
    p->loss = 0;
    for (int s = 0; s < p->v && st == COL_OK; s++) {
        col_lm_trainer *t = p->st[s].t;
        t->dp_wait_s = 0;
        t->dp_bytes = 0;
        p->st[s].backwards = 0;
        st = lmt_dp_need_params(t, err);
        mt_zero(t->pool, MT_GRAD);
    }
    for (int i = 0; i < p->nops && st == COL_OK; i++) {
        col_pp_op op = p->ops[i];
        pp_stage *s = &p->st[op.stage / p->P];
        st = op.kind == 'F' ? forward(p, s, ids, op.mb, err) : backward(p, s, ids, targets, op.mb, err);
    }
    col_status ws = wait_sends(p, err);
    st = st == COL_OK ? ws : st;
    /* the loss: the last stage's sum over the dp group, then to the whole pipeline */
    pp_stage *last = p->rank == (p->S - 1) % p->P ? &p->st[p->v - 1] : NULL;
    float loss = p->loss;
    if (st == COL_OK && last && p->dp)
        st = lmt_dp_sum_f(last->t, loss, &loss, err);
    if (st == COL_OK)
        st = col_comm_broadcast(p->pipe, &loss, 1, COL_F32, (p->S - 1) % p->P, err);
    if (st == COL_OK)
        st = sum_tied(p, err);
    double norm = 0;
    float clip = p->cfg.train.grad_clip;
    if (st == COL_OK && !p->dp)
        st = global_norm(p, &norm, err);
    if (st == COL_OK && !p->dp && clip > 0 && !isfinite(norm))
        st = col_err_set(err, COL_EINVAL, "step %lld: gradient norm is %g (loss %g): training diverged; lower the "
                         "learning rate", (long long)p->st[0].t->step + 1, norm, loss);
    if (st == COL_OK && p->dp) /* the gradients reduced first: the norm is the reduced gradients' */
        st = dp_reduced_norm(p, &norm, err);
    if (st == COL_OK && p->dp && clip > 0 && !isfinite(norm))
        st = col_err_set(err, COL_EINVAL, "step %lld: gradient norm is %g (loss %g): training diverged; lower the "
                         "learning rate", (long long)p->st[0].t->step + 1, norm, loss);
    for (int s = 0; s < p->v && st == COL_OK; s++) {
        col_lm_trainer *t = p->st[s].t;
        if (!p->dp && clip > 0) /* clipped by the whole model's norm, then stepped unclipped */
            col_clip_grad_scale(t->ot + t->train0, t->nt - t->train0, clip, norm);
        /* with data parallelism each process clips its spans by the whole model's norm inside the step */
        t->cfg.grad_clip = p->dp ? clip : 0;
        /* (tensor parallel: the norm given, not summed over the group again) */
        t->norm_given = p->dp || t->par ? norm : -1;
        col_lm_step_info si = {0};
        st = lmt_optimize(t, 1, loss, &clk, &si, err);
        t->cfg.grad_clip = clip;
        t->norm_given = -1;
        if (info)
            *info = si;
    }
    if (st == COL_OK && info)
        info->grad_norm = norm;
    return st;
}

#else /* no MPI */

struct col_lm_pipeline {
    int unused;
};

col_status col_lm_pipeline_create(const col_lm_pipeline_config *cfg, const col_backend *be, col_lm_pipeline **out,
                                   col_err *err)
{
    (void)cfg, (void)be;
    *out = NULL;
    return col_err_set(err, COL_EUNSUPPORTED, "pipeline: this build has no MPI");
}

void col_lm_pipeline_free(col_lm_pipeline *p) { free(p); }

col_status col_lm_pipeline_step(col_lm_pipeline *p, const int32_t *ids, const int32_t *targets,
                                 col_lm_step_info *info, col_err *err)
{
    (void)p, (void)ids, (void)targets, (void)info;
    return col_err_set(err, COL_EUNSUPPORTED, "pipeline: this build has no MPI");
}
#endif

#ifdef COL_WITH_COMM
int col_lm_pipeline_n_stages(const col_lm_pipeline *p) { return p ? p->v : 0; }

void col_lm_pipeline_layout(const col_lm_pipeline *p, struct col_comm **pipe, int *P, int *rank, int *S, int *d)
{
    *pipe = p->pipe;
    *P = p->P;
    *rank = p->rank;
    *S = p->S;
    *d = p->dp ? col_comm_rank(p->dp) : 0;
}

col_lm_trainer *col_lm_pipeline_stage(col_lm_pipeline *p, int s, int *virtual_stage, int *layer_lo, int *layer_hi)
{
    if (!p || s < 0 || s >= p->v)
        return NULL;
    if (virtual_stage)
        *virtual_stage = p->st[s].j;
    if (layer_lo)
        *layer_lo = p->st[s].lo;
    if (layer_hi)
        *layer_hi = p->st[s].hi;
    return p->st[s].t;
}
#else
int col_lm_pipeline_n_stages(const col_lm_pipeline *p) { return (void)p, 0; }

void col_lm_pipeline_layout(const col_lm_pipeline *p, struct col_comm **pipe, int *P, int *rank, int *S, int *d)
{
    (void)p;
    *pipe = NULL;
    *P = *S = 1;
    *rank = *d = 0;
}

col_lm_trainer *col_lm_pipeline_stage(col_lm_pipeline *p, int s, int *virtual_stage, int *layer_lo, int *layer_hi)
{
    (void)p, (void)s, (void)virtual_stage, (void)layer_lo, (void)layer_hi;
    return NULL;
}
#endif
