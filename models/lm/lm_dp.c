/* lm_dp.c - data parallelism with ZeRO on memtier chunks (lm_trainer.h, dp
 * and zero).
 *
 * Every process of the dp communicator holds the same session; each runs the
 * graphs on its own rows. The trained tensors' gradient chunks and the
 * parameter chunks laid out the same way are split into dp-size equal pieces
 * (chunk capacities are multiples of dp-size * MT_ALIGN, so a piece is
 * MT_ALIGN-aligned); process r owns piece r of every chunk. A trained tensor
 * lies in one chunk, so the part of it a process owns is one run of elements,
 * its span (zoff, zn): the optimizer states and masters are allocated for the
 * span only, and the optimizer updates the span only.
 *
 * A step: the micro-batch losses are weighted by their counted targets over
 * the step's counted targets on every process (so the sum of the processes'
 * gradients is the gradient of the mean loss over all rows), the gradient
 * chunks are reduce-scattered (each piece's sum to its owner, which is all
 * its optimizer needs; ZeRO 1 keeps the other pieces' memory, 2 and 3 give it
 * back), each process updates its spans with norms summed over the
 * processes, and the updated pieces are all-gathered when the parameters are
 * next used (the next step's forward pass, chunk by chunk as it reaches
 * them; at ZeRO 3 the other pieces' memory is given back meanwhile). Per step and process that moves 2 Psi
 * (P - 1) / P bytes at every stage (Psi: the chunks' bytes): ZeRO 3 keeps
 * the gathered parameters through the backward pass instead of gathering
 * them twice (the paper's 3 Psi), trading that memory for the traffic. Sums run in rank order (COL_ORDER_RANK):
 * every process gets the same bits, whatever the transport.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lm_trainer_internal.h"
#include "units.h"
#include "timer.h"

#ifdef COL_WITH_COMM
#include "comm.h"

enum { TAG_GATHER = 7100 };

col_status lmt_dp_init(col_lm_trainer *t, col_err *err)
{
    const col_lm_train_config *c = &t->cfg;
    t->dp = NULL;
    if (!c->dp || col_comm_size(c->dp) <= 1 || c->inference)
        return COL_OK;
    int zero = c->zero ? c->zero : 2;
    if (zero < 1 || zero > 3)
        return col_err_set(err, COL_EINVAL, "data parallel: ZeRO stage %d (1, 2 or 3)", c->zero);
    if (c->opt.kind == COL_OPT_LAMB || c->opt.kind == COL_OPT_LARS)
        return col_err_set(err, COL_EUNSUPPORTED, "data parallel: %s's trust ratios need whole-tensor norms, which a "
                           "split optimizer does not compute yet: use AdamW or SGD with several processes",
                           col_opt_kind_name(c->opt.kind));
    t->dp = c->dp;
    t->dpn = col_comm_size(c->dp);
    t->dpr = col_comm_rank(c->dp);
    t->zero = zero;
    col_comm_set_order(t->dp, COL_ORDER_RANK);
    return COL_OK;
}

size_t lmt_dp_capacity_multiple(const col_lm_trainer *t) { return t->dp ? (size_t)t->dpn * MT_ALIGN : 0; }

void lmt_dp_free(col_lm_trainer *t)
{
    lmt_dp_overlap_free(t);
    free(t->dbuf);
    t->dbuf = NULL;
    t->dbuf_n = 0;
    free(t->zoff);
    free(t->zn);
    free(t->dgc);
    free(t->dpc);
    t->zoff = t->zn = NULL;
    t->dgc = t->dpc = NULL;
    t->ndc = 0;
}

static size_t capacity(const col_lm_trainer *t, int chunk)
{
    mt_chunk_info ci;
    return mt_chunk_get(t->pool, chunk, &ci, NULL) == COL_OK ? ci.capacity : 0;
}

/* the elements of trained tensor i that process r owns: [*off, *off + n) */
static int64_t span_of(const col_lm_trainer *t, int i, int r, int64_t *off)
{
    mt_ref g = t->ref[t->nt + i];
    size_t piece = capacity(t, g.chunk) / (size_t)t->dpn, lo = (size_t)r * piece, hi = lo + piece;
    size_t a = g.offset > lo ? g.offset : lo, b = g.offset + g.bytes < hi ? g.offset + g.bytes : hi;
    size_t es = col_dtype_size(t->dt);
    *off = b > a ? (int64_t)((a - g.offset) / es) : 0;
    return b > a ? (int64_t)((b - a) / es) : 0;
}

col_status lmt_dp_layout(col_lm_trainer *t, col_err *err)
{
    if (!t->dp)
        return COL_OK;
    if (t->nvme_kinds & (COL_LM_PARAMS | COL_LM_GRADS))
        return col_err_set(err, COL_EUNSUPPORTED, "data parallel: parameters and gradients must stay in host memory "
                           "(the NVMe tier may hold the optimizer states): raise the host budget");
    t->zoff = calloc((size_t)t->nt, sizeof *t->zoff);
    t->zn = calloc((size_t)t->nt, sizeof *t->zn);
    t->dgc = calloc((size_t)t->nt, sizeof *t->dgc);
    t->dpc = calloc((size_t)t->nt, sizeof *t->dpc);
    if (!t->zoff || !t->zn || !t->dgc || !t->dpc)
        return col_err_set(err, COL_ENOMEM, "data parallel: out of memory");
    for (int i = t->train0; i < t->nt; i++) {
        mt_ref g = t->ref[t->nt + i], p = t->ref[i];
        if (g.chunk < 0 || p.chunk < 0 || g.offset != p.offset || capacity(t, g.chunk) != capacity(t, p.chunk))
            return col_err_set(err, COL_EINTERNAL, "data parallel: the gradient and parameter chunks of tensor %d "
                               "are laid out differently", i);
        t->zn[i] = span_of(t, i, t->dpr, &t->zoff[i]);
        int j = 0;
        while (j < t->ndc && t->dgc[j] != g.chunk)
            j++;
        if (j == t->ndc) {
            t->dgc[j] = g.chunk;
            t->dpc[j] = p.chunk;
            t->ndc++;
        } else if (t->dpc[j] != p.chunk) {
            return col_err_set(err, COL_EINTERNAL, "data parallel: gradient chunk %d pairs with two parameter chunks",
                               g.chunk);
        }
    }
    return COL_OK;
}

col_status lmt_dp_weights(col_lm_trainer *t, const int32_t *targets, int na, float *w, col_err *err)
{
    if (!t->dp) {
        for (int k = 0; k < na; k++)
            w[k] = 1.0f;
        return COL_OK;
    }
    int64_t *cnt = calloc(2 * (size_t)na, sizeof *cnt), *all = cnt + na, n = (int64_t)t->cfg.batch * t->cfg.seq;
    if (!cnt)
        return col_err_set(err, COL_ENOMEM, "data parallel: out of memory");
    for (int k = 0; k < na; k++)
        for (int64_t j = 0; j < n; j++)
            cnt[k] += targets[k * n + j] >= 0;
    col_status st = col_comm_all_reduce(t->dp, cnt, all, (size_t)na, COL_I64, COL_RED_SUM, err);
    for (int k = 0; k < na && st == COL_OK; k++)
        w[k] = all[k] ? (float)((double)cnt[k] / (double)all[k]) : 0.0f;
    free(cnt);
    return st;
}

col_status lmt_dp_sum_f(col_lm_trainer *t, float local, float *global, col_err *err)
{
    if (!t->dp) {
        *global = local;
        return COL_OK;
    }
    return col_comm_all_reduce(t->dp, &local, global, 1, COL_F32, COL_RED_SUM, err);
}

col_status lmt_dp_sum_d(col_lm_trainer *t, double local, double *global, col_err *err)
{
    if (!t->dp) {
        *global = local;
        return COL_OK;
    }
    _Static_assert(sizeof(double) == sizeof(int64_t), "a double travels as the bits of an i64");
    int64_t *bits = malloc(sizeof *bits * (size_t)t->dpn), mine;
    if (!bits)
        return col_err_set(err, COL_ENOMEM, "data parallel: out of memory");
    memcpy(&mine, &local, sizeof mine);
    col_status st = col_comm_all_gather(t->dp, &mine, bits, 1, COL_I64, err);
    double sum = 0;
    for (int r = 0; r < t->dpn && st == COL_OK; r++) {
        double d;
        memcpy(&d, &bits[r], sizeof d);
        sum += d;
    }
    free(bits);
    *global = sum;
    return st;
}

typedef struct lmt_dp_overlap lmt_dp_overlap;
struct lmt_dp_overlap {
    const col_plan *plan;       /* the plan the indices below are for */
    int *g_last, *p_first;      /* per chunk pair: the last op accumulating into its gradient chunk, the first op
                                   reading its parameter chunk (-1: none) */
    int *g_ord, *p_ord;         /* pairs by g_last, by p_first */
    col_comm_req **greq, **preq;
    int gi, pi;                 /* the next pair in each order to start (reductions) or wait for (gathers) */
    bool reducing, gathering;
    double wait_s;              /* time blocked in waits this step */
};
static col_status overlap_finish(col_lm_trainer *t, col_err *err);

/* the pieces of process r's neighbours in chunk c given back (their contents are another process's) */
static void discard_others(col_lm_trainer *t, int c)
{
    size_t piece = capacity(t, c) / (size_t)t->dpn;
    mt_chunk_discard(t->pool, c, 0, (size_t)t->dpr * piece);
    mt_chunk_discard(t->pool, c, (size_t)(t->dpr + 1) * piece, (size_t)(t->dpn - t->dpr - 1) * piece);
}

/* one collective per chunk pair, all started before any is waited for: the gradient chunks reduce-scattered
 * (grads), or the parameter chunks all-gathered */
static col_status exchange(col_lm_trainer *t, bool grads, col_err *err)
{
    col_comm_req **req = calloc((size_t)t->ndc + 1, sizeof *req);
    if (!req)
        return col_err_set(err, COL_ENOMEM, "data parallel: out of memory");
    double t0 = col_seconds();
    size_t es = col_dtype_size(t->dt);
    col_status st = COL_OK;
    int j = 0;
    for (; j < t->ndc && st == COL_OK; j++) {
        int c = grads ? t->dgc[j] : t->dpc[j];
        char *base = mt_chunk_host(t->pool, c);
        size_t cap = capacity(t, c), piece = cap / (size_t)t->dpn;
        if (grads)
            st = col_comm_reduce_scatter_async(t->dp, base, base + (size_t)t->dpr * piece, piece / es, t->dt,
                                               COL_RED_SUM, &req[j], err);
        else
            st = col_comm_all_gather_async(t->dp, base + (size_t)t->dpr * piece, base, piece / es, t->dt, &req[j],
                                           err);
        t->dp_bytes += grads ? cap : piece;
    }
    col_err werr = {0};
    col_status ws = col_comm_wait_all(req, j, &werr);
    free(req);
    t->dp_wait_s += col_seconds() - t0; /* all of it blocks the step */
    if (st == COL_OK && ws != COL_OK)
        st = col_err_copy(err, &werr);
    return st;
}

col_status lmt_dp_reduce_grads(col_lm_trainer *t, col_err *err)
{
    if (!t->dp || t->dp_reduced)
        return COL_OK;
    t->dp_reduced = true;
    col_status st = t->ov && t->ov->reducing ? overlap_finish(t, err) : exchange(t, true, err);
    for (int j = 0; j < t->ndc && st == COL_OK && t->zero > 1; j++)
        discard_others(t, t->dgc[j]);
    return st;
}

/* ---- overlap with the training graph (no compute tier: its ops run here one after the other) ----
 * Before the last micro-batch of a step, each gradient chunk's reduction starts as soon as the last op adding
 * into it has run (the hook before each op); when the last step left the parameters in pieces (every stage:
 * lmt_dp_share_params), every parameter chunk's gather starts before the first op and is waited for just before
 * the first op that reads the chunk. Between ops the hook moves the MPI
 * requests along (col_comm_test), so the transfers run while the graph computes. */

static int chunk_pair(const col_lm_trainer *t, const void *addr, bool grad)
{
    int c;
    size_t off;
    if (!addr || !mt_locate(t->pool, addr, &c, &off))
        return -1;
    for (int j = 0; j < t->ndc; j++)
        if ((grad ? t->dgc[j] : t->dpc[j]) == c)
            return j;
    return -1;
}

/* pairs 0..n-1 sorted by key[] (insertion sort: a few hundred chunks at most); -1 keys last */
static void order_by(int *ord, const int *key, int n)
{
    for (int j = 0; j < n; j++) {
        int v = ord[j] = j, k = j;
        while (k > 0 && (key[ord[k - 1]] < 0 || (key[v] >= 0 && key[ord[k - 1]] > key[v]))) {
            ord[k] = ord[k - 1];
            k--;
        }
        ord[k] = v;
    }
}

static col_status overlap_index(col_lm_trainer *t, const col_plan *plan, col_err *err)
{
    lmt_dp_overlap *o = t->ov;
    if (o && o->plan == plan)
        return COL_OK;
    lmt_dp_overlap_free(t);
    int n = t->ndc;
    o = t->ov = calloc(1, sizeof *o);
    if (o) {
        o->g_last = malloc(sizeof(int) * 4 * (size_t)(n + 1));
        o->greq = calloc(2 * (size_t)(n + 1), sizeof *o->greq);
    }
    if (!o || !o->g_last || !o->greq)
        return col_err_set(err, COL_ENOMEM, "data parallel: out of memory");
    o->p_first = o->g_last + n + 1;
    o->g_ord = o->p_first + n + 1;
    o->p_ord = o->g_ord + n + 1;
    o->preq = o->greq + n + 1;
    o->plan = plan;
    for (int j = 0; j < n; j++)
        o->g_last[j] = o->p_first[j] = -1;
    for (int i = 0; i < col_plan_length(plan); i++) {
        col_node *node = col_plan_node(plan, i);
        if (node->op == COL_OP_ACCUMULATE && node->nsrc > 1) {
            int j = chunk_pair(t, node->src[1]->grad_data, true);
            if (j >= 0)
                o->g_last[j] = i;
            continue;
        }
        for (int s = 0; s < node->nsrc; s++) {
            col_node *leaf = (node->src[s]->flags & COL_NODE_VIEW) ? node->src[s]->view_base : node->src[s];
            int j = leaf->op == COL_OP_LEAF ? chunk_pair(t, leaf->bound, false) : -1;
            if (j >= 0 && o->p_first[j] < 0)
                o->p_first[j] = i;
        }
    }
    order_by(o->g_ord, o->g_last, n);
    order_by(o->p_ord, o->p_first, n);
    return COL_OK;
}

void lmt_dp_overlap_free(col_lm_trainer *t)
{
    if (!t->ov)
        return;
    free(t->ov->g_last);
    free(t->ov->greq);
    free(t->ov);
    t->ov = NULL;
}

static col_status start_reduce(col_lm_trainer *t, int j, col_comm_req **req, col_err *err)
{
    int c = t->dgc[j];
    char *base = mt_chunk_host(t->pool, c);
    size_t cap = capacity(t, c), piece = cap / (size_t)t->dpn, es = col_dtype_size(t->dt);
    t->dp_bytes += cap;
    return col_comm_reduce_scatter_async(t->dp, base, base + (size_t)t->dpr * piece, piece / es, t->dt, COL_RED_SUM,
                                         req, err);
}

static col_status timed_wait(col_lm_trainer *t, col_comm_req **req, col_err *err)
{
    double t0 = col_seconds();
    col_status st = col_comm_wait(*req, err);
    *req = NULL;
    t->ov->wait_s += col_seconds() - t0;
    return st;
}

/* before op i: reductions of the gradient chunks complete before it, waits for the parameter chunks it is the
 * first to read, and a push to the oldest requests in flight */
static col_status overlap_hook(void *user, const col_plan *p, int i, col_node *n, col_err *err)
{
    (void)p, (void)n;
    col_lm_trainer *t = user;
    lmt_dp_overlap *o = t->ov;
    col_status st = COL_OK;
    while (st == COL_OK && o->gathering && o->pi < t->ndc && o->p_first[o->p_ord[o->pi]] >= 0 &&
           o->p_first[o->p_ord[o->pi]] <= i)
        st = timed_wait(t, &o->preq[o->p_ord[o->pi++]], err);
    while (st == COL_OK && o->reducing && o->gi < t->ndc && o->g_last[o->g_ord[o->gi]] >= 0 &&
           o->g_last[o->g_ord[o->gi]] < i) {
        int j = o->g_ord[o->gi++];
        st = start_reduce(t, j, &o->greq[j], err);
    }
    bool done;
    for (int k = 0; k < t->ndc && st == COL_OK; k++) /* the first request still in flight of each kind */
        if (o->greq[k] && (st = col_comm_test(o->greq[k], &done, err)) == COL_OK && !done)
            break;
    for (int k = o->pi; k < t->ndc && st == COL_OK && o->gathering; k++)
        if (o->preq[o->p_ord[k]] && (st = col_comm_test(o->preq[o->p_ord[k]], &done, err)) == COL_OK && !done)
            break;
    return st;
}

col_status lmt_dp_run(col_lm_trainer *t, col_plan *plan, bool last, col_err *err)
{
    bool gather = t->params_partial && !t->cfg.dp_serial, reduce = last && !t->cfg.dp_serial;
    if (!t->dp || (!gather && !reduce)) {
        col_status ps = lmt_dp_need_params(t, err);
        return ps == COL_OK ? col_plan_run(plan, t->be, err) : ps;
    }
    col_status st = overlap_index(t, plan, err);
    if (st != COL_OK)
        return st;
    lmt_dp_overlap *o = t->ov;
    o->gi = o->pi = 0;
    o->wait_s = 0;
    o->reducing = reduce;
    o->gathering = gather;
    size_t es = col_dtype_size(t->dt);
    for (int k = 0; k < t->ndc && gather && st == COL_OK; k++) { /* in the order the graph needs them */
        int j = o->p_ord[k], c = t->dpc[j];
        char *base = mt_chunk_host(t->pool, c);
        size_t piece = capacity(t, c) / (size_t)t->dpn;
        st = col_comm_all_gather_async(t->dp, base + (size_t)t->dpr * piece, base, piece / es, t->dt, &o->preq[j],
                                       err);
        t->dp_bytes += piece;
    }
    if (st == COL_OK)
        st = col_plan_run_hooked(plan, t->be, overlap_hook, t, err);
    for (int k = 0; k < t->ndc && gather; k++) /* chunks no op read */
        if (o->preq[k]) {
            col_status w = timed_wait(t, &o->preq[k], err);
            st = st == COL_OK ? w : st;
        }
    t->params_partial = false;
    o->gathering = false;
    t->dp_wait_s += o->wait_s;
    o->wait_s = 0;
    return st;
}

/* the reductions the run left: those of chunks no op accumulated into, then every wait */
static col_status overlap_finish(col_lm_trainer *t, col_err *err)
{
    lmt_dp_overlap *o = t->ov;
    col_status st = COL_OK;
    for (; o->gi < t->ndc && st == COL_OK; o->gi++)
        st = start_reduce(t, o->g_ord[o->gi], &o->greq[o->g_ord[o->gi]], err);
    for (int k = 0; k < t->ndc; k++)
        if (o->greq[k]) {
            col_status w = timed_wait(t, &o->greq[k], err);
            st = st == COL_OK ? w : st;
        }
    o->reducing = false;
    t->dp_wait_s += o->wait_s;
    o->wait_s = 0;
    return st;
}

/* The other processes' updated pieces are gathered when the parameters are next used: by the next training
 * run chunk by chunk as its ops reach them (lmt_dp_run), by anything else at once (lmt_dp_need_params). Until
 * then the other pieces hold the last step's values (ZeRO 1, 2) or nothing (3: given back). */
col_status lmt_dp_share_params(col_lm_trainer *t, col_err *err)
{
    (void)err;
    if (!t->dp)
        return COL_OK;
    for (int j = 0; j < t->ndc && t->zero == 3; j++)
        discard_others(t, t->dpc[j]);
    t->params_partial = true;
    return COL_OK;
}

col_status lmt_dp_need_params(col_lm_trainer *t, col_err *err)
{
    if (!t->dp || !t->params_partial)
        return COL_OK;
    col_status st = exchange(t, false, err);
    if (st == COL_OK)
        t->params_partial = false;
    return st;
}

col_status lmt_dp_f32_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, col_err *err)
{
    col_opt_tensor *s = calloc((size_t)t->nt + 1, sizeof *s);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "data parallel: out of memory");
    int ns = 0;
    for (int i = t->train0; i < t->nt; i++) {
        int64_t off, n = lmt_span(t, i, &off);
        if (n > 0)
            s[ns++] = (col_opt_tensor){.w = t->ot[i].w + off, .g = t->ot[i].g + off, .m = t->ot[i].m,
                                       .v = t->ot[i].v, .n = n, .decay = t->ot[i].decay};
    }
    if (na > 1)
        for (int i = 0; i < ns; i++)
            for (int64_t j = 0; j < s[i].n; j++)
                s[i].g[j] /= (float)na;
    double sum = 0, local = 0;
    col_status st = COL_OK;
    /* each block once over a tensor-parallel group (lmt_par_weight: 1 without one) */
    for (int i = t->train0, j = 0; i < t->nt; i++) {
        int64_t off;
        if (lmt_span(t, i, &off) > 0)
            local += lmt_par_weight(t, i) * col_grad_sumsq(&s[j++], 1);
    }
    if (t->norm_given >= 0) /* the driver's norm over all of the model (its other stages too) */
        *norm = t->norm_given;
    else if ((st = lmt_dp_sum_d(t, local, &sum, err)) == COL_OK && (st = lmt_par_sum_d(t, sum, &sum, err)) == COL_OK)
        *norm = sqrt(sum);
    if (st == COL_OK && clip > 0 && !isfinite(*norm))
        st = col_err_set(err, COL_EINVAL, "clip_grad_norm: total gradient norm is %g (non-finite gradients)", *norm);
    if (st == COL_OK && clip > 0)
        col_clip_grad_scale(s, ns, clip, *norm);
    if (st == COL_OK)
        st = col_opt_step(&t->cfg.opt, lr, t->step + 1, s, ns, err);
    free(s);
    return st;
}

col_status lmt_dp_gather_state(col_lm_trainer *t, int k, int i, float *buf, col_err *err)
{
    col_status st = COL_OK;
    for (int r = 0; r < t->dpn && st == COL_OK; r++) {
        int64_t off, n = span_of(t, i, r, &off);
        if (n == 0 || (r != t->dpr && t->dpr != 0))
            continue;
        void *p = NULL;
        /* (lmt_get, without the call back into lm_trainer_tiers.c) */
        if (r == t->dpr && (st = mt_stage_get(t->stage, t->ref[k * t->nt + i], false, &p, err)) != COL_OK)
            break;
        if (r == 0)
            memcpy(buf + off, p, sizeof(float) * (size_t)n);
        else if (t->dpr == 0)
            st = col_comm_recv(t->dp, buf + off, (size_t)n, COL_F32, r, TAG_GATHER, err);
        else
            st = col_comm_send(t->dp, p, (size_t)n, COL_F32, 0, TAG_GATHER, err);
    }
    return st;
}

col_status lmt_dp_buffer(col_lm_trainer *t, int64_t n, float **buf, col_err *err)
{
    if (n > t->dbuf_n) {
        float *p = realloc(t->dbuf, sizeof *p * (size_t)n);
        char b[COL_BYTES_STR];
        if (!p)
            return col_err_set(err, COL_ENOMEM, "data parallel: no memory for a %s tensor",
                               col_fmt_bytes(b, sizeof b, (uint64_t)n * 4));
        t->dbuf = p;
        t->dbuf_n = n;
    }
    *buf = t->dbuf;
    return COL_OK;
}

col_status lmt_dp_agree(col_lm_trainer *t, col_status st, const char *what, col_err *err)
{
    if (!t->dp || col_comm_broken(t->dp, NULL))
        return st;
    int mine = st != COL_OK ? t->dpr : t->dpn, first = t->dpn;
    col_err e = {0};
    if (col_comm_all_reduce(t->dp, &mine, &first, 1, COL_I32, COL_RED_MIN, &e) != COL_OK)
        return st != COL_OK ? st : col_err_copy(err, &e);
    if (st != COL_OK || first == t->dpn)
        return st;
    return col_err_set(err, COL_EIO, "%s failed on process %d of %d (its own message says why)", what, first, t->dpn);
}

#else /* a build without MPI: no communicator can exist, so a session is always one process */

col_status lmt_dp_init(col_lm_trainer *t, col_err *err)
{
    t->dp = NULL;
    return t->cfg.dp ? col_err_set(err, COL_EUNSUPPORTED, "data parallel: this build has no MPI") : COL_OK;
}

size_t lmt_dp_capacity_multiple(const col_lm_trainer *t) { return (void)t, 0; }
col_status lmt_dp_layout(col_lm_trainer *t, col_err *err) { return (void)t, (void)err, COL_OK; }
void lmt_dp_free(col_lm_trainer *t) { (void)t; }

col_status lmt_dp_buffer(col_lm_trainer *t, int64_t n, float **buf, col_err *err)
{
    (void)t, (void)n, (void)buf;
    return col_err_set(err, COL_EINTERNAL, "data parallel: a buffer without MPI");
}

col_status lmt_dp_agree(col_lm_trainer *t, col_status st, const char *what, col_err *err)
{
    (void)t, (void)what, (void)err;
    return st;
}

col_status lmt_dp_weights(col_lm_trainer *t, const int32_t *targets, int na, float *w, col_err *err)
{
    (void)t, (void)targets, (void)err;
    for (int k = 0; k < na; k++)
        w[k] = 1.0f;
    return COL_OK;
}

col_status lmt_dp_sum_f(col_lm_trainer *t, float local, float *global, col_err *err)
{
    (void)t, (void)err;
    *global = local;
    return COL_OK;
}

col_status lmt_dp_sum_d(col_lm_trainer *t, double local, double *global, col_err *err)
{
    (void)t, (void)err;
    *global = local;
    return COL_OK;
}

col_status lmt_dp_reduce_grads(col_lm_trainer *t, col_err *err) { return (void)t, (void)err, COL_OK; }

col_status lmt_dp_share_params(col_lm_trainer *t, col_err *err) { return (void)t, (void)err, COL_OK; }
col_status lmt_dp_need_params(col_lm_trainer *t, col_err *err) { return (void)t, (void)err, COL_OK; }

col_status lmt_dp_f32_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, col_err *err)
{
    (void)t, (void)na, (void)lr, (void)clip, (void)norm;
    return col_err_set(err, COL_EINTERNAL, "data parallel: a step without MPI");
}

col_status lmt_dp_gather_state(col_lm_trainer *t, int k, int i, float *buf, col_err *err)
{
    (void)t, (void)k, (void)i, (void)buf;
    return col_err_set(err, COL_EINTERNAL, "data parallel: a gather without MPI");
}

col_status lmt_dp_run(col_lm_trainer *t, col_plan *plan, bool last, col_err *err)
{
    (void)last;
    return col_plan_run(plan, t->be, err);
}

void lmt_dp_overlap_free(col_lm_trainer *t) { (void)t; }
#endif

/* (both builds: without MPI the sum over processes is the process's own) */
col_status lmt_dp_grad_sumsq(col_lm_trainer *t, int skip, double *sum, col_err *err)
{
    double local = 0;
    for (int i = t->train0; i < t->nt; i++) {
        int64_t off, n = lmt_span(t, i, &off);
        if (n > 0 && i != skip) /* (each block once over a tensor-parallel group: lmt_par_weight) */
            local += lmt_par_weight(t, i) * col_grad_sumsq(&(col_opt_tensor){.g = t->ot[i].g + off, .n = n}, 1);
    }
    return lmt_dp_sum_d(t, local, sum, err);
}
