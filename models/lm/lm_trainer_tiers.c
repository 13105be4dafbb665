/* lm_trainer_tiers.c - where a session's tensors live and how they are
 * reached there: the NVMe tier (placement, initialisation, host views, the
 * streamed optimizer step) and the compute tier every graph runs through
 * when there is a compute budget. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lm_trainer_internal.h"
#include "units.h"

/* kind k of tensor i (0 parameter, 1 gradient, 2 and 3 state slots, 4 master) -> mt_kind bit */
static unsigned kind_bit(int k) { return k == 0 ? COL_LM_PARAMS : k == 1 ? COL_LM_GRADS : COL_LM_STATES; }

/* sets the host address of tensor i's kind-k memory (NULL: none there): in ot[i] (weights, gradient, state
 * slots; the master is the weights under mixed precision) or the 16-bit parameter and gradient arrays */
static void set_addr(col_lm_trainer *t, int i, int k, void *p)
{
    col_opt_tensor *o = &t->ot[i];
    bool mixed = lmt_mixed(t);
    switch (k) {
    case 0: if (mixed) t->w16[i] = p; else o->w = p; break;
    case 1: if (mixed) t->g16[i] = p; else o->g = p; break;
    case 2: o->m = p; break;
    case 3: o->v = p; break;
    default: o->w = p; break;
    }
}

/* the kinds of memory tensors of this session have: parameters; with training gradients, the state slots and
 * (mixed precision) masters */
static int session_kinds(const col_lm_trainer *t, int *kinds)
{
    int nk = 0;
    kinds[nk++] = 0;
    if (t->cfg.inference)
        return nk;
    kinds[nk++] = 1;
    for (int s = 0; s < t->slots; s++)
        kinds[nk++] = 2 + s;
    if (lmt_mixed(t))
        kinds[nk++] = LMT_MASTER;
    return nk;
}

/* bytes of tensor i's kind-k memory: its states and master hold its span (data parallel: this process's part) */
static size_t kind_bytes(const col_lm_trainer *t, int k, int i)
{
    int64_t off, n = k >= 2 && t->zn ? lmt_span(t, i, &off) : col_param_numel(&t->specs[i]);
    if (k == 0 && t->pdt)
        return col_dtype_row_bytes(t->pdt[i], n);
    return col_dtype_size(lmt_dtype(t, k)) * (size_t)n;
}

/* a pool with the kinds given on NVMe, every tensor placed; COL_ENOMEM when the host budget is too small */
static col_status alloc_with(col_lm_trainer *t, unsigned kinds, size_t chunk_bytes, col_err *err)
{
    const col_lm_train_config *c = &t->cfg;
    mt_destroy(t->pool);
    t->pool = NULL;
    mt_config mc = {.chunk_bytes = chunk_bytes, .host_budget = c->host_budget, .nvme_dir = kinds ? c->nvme_dir : NULL,
                    .nvme_max = c->nvme_max, .nvme_kinds = kinds, .nvme_faults = c->nvme_faults,
                    .nvme_queue_depth = c->nvme_queue_depth, .capacity_multiple = lmt_dp_capacity_multiple(t)};
    lmt_dp_free(t);
    t->nvme_kinds = kinds;
    col_status st = mt_create(&mc, &t->pool, err);
    if (st != COL_OK)
        return st;
    for (int i = 0; i < LMT_KINDS * t->nt; i++)
        t->ref[i] = (mt_ref){.chunk = -1};
    static const mt_kind kind[LMT_KINDS] = {MT_PARAM, MT_GRAD, MT_OPTSTATE, MT_OPTSTATE, MT_OPTSTATE};
    col_status first_fail = COL_OK;
    col_err fail_err = {0};
    int has[LMT_KINDS], nk = session_kinds(t, has);
    for (int q = 0; q < nk; q++) {
        if (has[q] == 2 && first_fail == COL_OK && (st = lmt_dp_layout(t, err)) != COL_OK)
            return st; /* the spans the states are sized by come from the gradients' layout */
        for (int k = has[q], i = k ? t->train0 : 0; i < t->nt; i++) {
            if (k == 0 && i == t->train0 && i > 0 && t->dp) /* trained parameters laid out as their gradients */
                mt_seal(t->pool, MT_PARAM);
            size_t bytes = kind_bytes(t, k, i);
            if (!bytes) /* a span of nothing: no state here */
                continue;
            /* keep planning after a budget failure so the message names the full need */
            col_status a = mt_alloc(t->pool, kind[k], bytes, &t->ref[k * t->nt + i], &fail_err);
            if (a != COL_OK && a != COL_ENOMEM)
                return col_err_copy(err, &fail_err);
            if (a == COL_ENOMEM)
                first_fail = a;
        }
    }
    if (first_fail == COL_OK && nk < 3 && (st = lmt_dp_layout(t, err)) != COL_OK) /* no states (plain SGD) */
        return st;
    return first_fail == COL_OK ? COL_OK : col_err_copy(err, &fail_err);
}

/* the chunk size: the option, else the one wasting least on the parameters
 * (the other kinds hold the same tensors, or the trained ones), at most
 * MT_DEFAULT_CHUNK_BYTES and, with tiers to move chunks between, about an
 * eighth of the model so that the compute tier has chunks to choose from.
 * Tensors larger than that get chunks of their own (memtier's rule), so the
 * search runs over the others: an embedding matrix does not set the size. */
static col_status chunk_size(col_lm_trainer *t, size_t *out, col_err *err)
{
    if (t->cfg.chunk_bytes) {
        *out = t->cfg.chunk_bytes;
        return COL_OK;
    }
    size_t *sz = malloc(sizeof *sz * (size_t)t->nt), total = 0;
    if (!sz)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    for (int i = 0; i < t->nt; i++)
        total += kind_bytes(t, 0, i);
    size_t cap = MT_DEFAULT_CHUNK_BYTES;
    if ((t->cfg.compute_budget || t->cfg.nvme_dir) && total / 8 < cap)
        cap = total / 8;
    if (cap < 4096)
        cap = 4096;
    int n = 0;
    for (int i = 0; i < t->nt; i++) {
        size_t b = kind_bytes(t, 0, i);
        if (b > 0 && b <= cap)
            sz[n++] = b;
    }
    col_status st = n ? mt_chunk_bytes_auto(sz, n, cap, out, NULL, err) : COL_OK;
    if (!n)
        *out = cap;
    free(sz);
    return st;
}

/* The host budget (or the NVMe tier's limit) could not hold the tensors, and moving the next kind, what, to the
 * NVMe tier would need a compute tier: says so after the budget's message, marking both settings. */
static col_status more_room(col_err *err, const char *what)
{
    unsigned was = err ? err->settings : 0;
    col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM, "%s; the %s could move to the NVMe tier, but there "
                   "they need a compute tier to run on: set a compute tier budget", err ? err->msg : "", what);
    if (err)
        err->settings |= was;
    return COL_ENOMEM;
}

col_status lmt_alloc(col_lm_trainer *t, col_err *err)
{
    const col_lm_train_config *c = &t->cfg;
    const unsigned all = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;
    unsigned k = c->nvme_kinds;
    if (k & ~all)
        return col_err_set_on(err, COL_SETTING_NVME_KINDS, COL_EINVAL, "NVMe tier: unknown kinds 0x%x", k);
    if (k && !c->nvme_dir)
        return col_err_set_on(err, COL_SETTING_NVME_DIR, COL_EINVAL, "tensors were asked to live on the NVMe tier, "
                              "but no directory was given for it");
    t->ref = malloc(sizeof *t->ref * (size_t)t->nt * LMT_KINDS);
    if (!t->ref)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    size_t chunk = 0;
    col_status st = chunk_size(t, &chunk, err);
    if (st != COL_OK)
        return st;
    /* the kinds that exist in this session */
    unsigned exist = COL_LM_PARAMS | (c->inference ? 0 : COL_LM_GRADS) | (c->inference || !t->slots ? 0 : COL_LM_STATES);
    unsigned tries[3] = {k & exist}, ntries = 1;
    if (!c->nvme_dir) {
        tries[0] = 0;
    } else if (!k) { /* automatic: states first, then gradients, then parameters, while the host cannot hold the rest */
        tries[0] = COL_LM_STATES & exist;
        tries[1] = (COL_LM_STATES | COL_LM_GRADS) & exist;
        tries[2] = all & exist;
        ntries = c->host_budget ? 3 : 1;
    }
    for (unsigned i = 0; i < ntries; i++) {
        if (i && tries[i] == tries[i - 1])
            continue;
        const char *what = tries[i] & COL_LM_PARAMS ? "parameters" : "gradients";
        if ((tries[i] & (COL_LM_PARAMS | COL_LM_GRADS)) && !c->compute_budget) {
            if (i) /* the budget failure says what is needed; say how else it could be met */
                return more_room(err, what);
            return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_EINVAL, "%s on the NVMe tier need a compute "
                                  "tier to run on: set a compute tier budget", what);
        }
        st = alloc_with(t, tries[i], chunk, err);
        if (st != COL_ENOMEM || i + 1 == ntries)
            break;
    }
    if (st == COL_OK && err) /* a fallback succeeded: no stale message */
        *err = (col_err){0};
    return st;
}

void *lmt_bind_addr(const col_lm_trainer *t, int k, int i)
{
    if (k == 0 && t->ext && i < t->np && t->ext[i])
        return (void *)(uintptr_t)t->ext[i]; /* read only: an inference session's graphs never write a weight */
    return mt_addr(t->pool, t->ref[k * t->nt + i]);
}

col_status lmt_init_params(col_lm_trainer *t, col_err *err)
{
    col_status st = COL_OK;
    for (int i = 0; i < t->nt && st == COL_OK; i++) {
        /* f32 weights: the parameter itself (a host chunk in place); under mixed precision the master, or the
         * conversion buffer when there is none (inference, or a process's master holding only its span), then
         * rounded into the parameter */
        void *w = t->conv;
        if (!lmt_mixed(t) || (lmt_has(t, LMT_MASTER, i) && !t->zn))
            st = lmt_get(t, lmt_mixed(t) ? LMT_MASTER : 0, i, true, &w, err);
        if (st != COL_OK)
            break;
        if (i < t->np && t->par) { /* this rank's block of the whole tensor's values */
            col_lm_init_param(&t->cfg.model, &t->whole[i], lmt_global(t, i), t->pbuf, t->cfg.seed);
            lmt_par_block(t, i, t->pbuf, w);
        } else if (i < t->np)
            col_lm_init_param(&t->cfg.model, &t->specs[i], lmt_global(t, i), w, t->cfg.seed);
        else
            col_lora_init(&t->specs[i], (i - t->np) % 2 == 0, i, w, t->cfg.seed);
        if (lmt_mixed(t))
            st = lmt_set_weights(t, i, w, err);
    }
    if (st == COL_OK)
        st = mt_stage_flush(t->stage, err);
    mt_stage_forget(t->stage);
    return st;
}

/* the f32 values w of parameter i quantized into p: row by row, each row of an in_out weight [in, out] being
 * one of its columns (held [out, in], col_lm_leaf_shape) */
static col_status quantize_param(const col_lm_trainer *t, int i, const float *w, void *p, col_err *err)
{
    const col_param_spec *s = &t->specs[i];
    col_dtype dt = t->pdt[i];
    int64_t shape[2];
    col_lm_leaf_shape(s, dt, shape);
    size_t rb = col_dtype_row_bytes(dt, shape[1]);
    if (!s->in_out)
        return col_quantize_row(dt, w, shape[0] * shape[1], p) ? COL_OK
               : col_err_set(err, COL_EINTERNAL, "quantizing '%s' as %s", s->name, col_dtype_name(dt));
    float *col = malloc(sizeof *col * (size_t)shape[1]);
    if (!col)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    bool ok = true;
    for (int64_t r = 0; r < shape[0] && ok; r++) { /* row r of [out, in]: column r of w [in, out] */
        for (int64_t k = 0; k < shape[1]; k++)
            col[k] = w[k * shape[0] + r];
        ok = col_quantize_row(dt, col, shape[1], (char *)p + (size_t)r * rb);
    }
    free(col);
    return ok ? COL_OK : col_err_set(err, COL_EINTERNAL, "quantizing '%s' as %s", s->name, col_dtype_name(dt));
}

col_status lmt_set_weights(col_lm_trainer *t, int i, const float *w, col_err *err)
{
    int64_t n = t->ot[i].n;
    void *p = NULL;
    col_status st = COL_OK;
    int64_t off, sn = lmt_span(t, i, &off);
    if (lmt_has(t, LMT_MASTER, i) && (st = lmt_get(t, LMT_MASTER, i, true, &p, err)) == COL_OK && p != w + off)
        memcpy(p, w + off, sizeof(float) * (size_t)sn);
    if (st == COL_OK && (st = lmt_get(t, 0, i, true, &p, err)) == COL_OK) {
        if (col_dtype_is_quant(lmt_param_dtype(t, i)))
            st = quantize_param(t, i, w, p, err);
        else if (lmt_mixed(t))
            col_convert(p, lmt_param_dtype(t, i), w, COL_F32, n);
        else if (p != w)
            memcpy(p, w, sizeof(float) * (size_t)n);
    }
    return st;
}

/* any existing compute tier of the session other than tier: the memory to share */
static mt_resident *anchor(col_lm_trainer *t, const lmt_tier *tier)
{
    lmt_tier *all[] = {&t->tier, &t->etier, &t->ftier, &t->btier, &t->dec[0].tier, &t->dec[1].tier};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] != tier && all[i]->res)
            return all[i]->res;
    return NULL;
}

col_status lmt_run(col_lm_trainer *t, col_plan *plan, lmt_tier *tier, size_t reserve, col_err *err)
{
    if (t->dp && !t->cfg.compute_budget && plan == t->plan) /* the exchanges overlap the training graph */
        return lmt_dp_run(t, plan, t->dp_last, err);
    col_status ps = lmt_dp_need_params(t, err); /* ZeRO 3: whole parameters for any other run */
    if (ps != COL_OK)
        return ps;
    if (!t->cfg.compute_budget)
        return col_plan_run(plan, t->be, err);
    if (!tier->res) {
        size_t b = t->cfg.compute_budget;
        /* the activation arena the session's plans share is on the tier for all of them */
        size_t own = col_plan_arena_bytes(plan) + col_plan_scratch_bytes(plan), held = col_plan_memory_bytes(plan);
        reserve += held > own ? held - own : 0;
        if (reserve >= b) {
            char have[32], need[32];
            col_fmt_bytes(have, sizeof have, b);
            col_fmt_bytes(need, sizeof need, reserve);
            return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM,
                                  "a compute tier of %s cannot hold the %s key/value cache", have, need);
        }
        col_status st = mt_resident_create(t->pool, plan, b - reserve, &tier->res, err);
        if (st != COL_OK) /* memtier's message marks the compute tier budget where it is at fault */
            return st;
        mt_resident *with = anchor(t, tier);
        if (with && (st = mt_resident_share_arena(tier->res, with, err)) != COL_OK) {
            lmt_tier_free(tier);
            return st;
        }
        tier->runs = 0;
    }
    return mt_resident_run(tier->res, t->be, tier->runs++, err);
}

void lmt_tier_free(lmt_tier *tier)
{
    mt_resident_free(tier->res);
    tier->res = NULL;
    tier->runs = 0;
}

int lmt_next_chunk(const col_lm_trainer *t, int k, int i)
{
    const mt_ref *r = t->ref + (size_t)k * (size_t)t->nt;
    int j = i + 1;
    while (j < t->nt && (r[j].chunk == r[i].chunk || r[j].chunk < 0)) /* (-1: no memory of the kind here) */
        j++;
    return j;
}

/* a gradient averaged over the micro-batches, its square sum added to *sum */
static void average(col_opt_tensor *o, int na, double *sum)
{
    if (na > 1)
        for (int64_t j = 0; j < o->n; j++)
            o->g[j] /= (float)na;
    *sum += col_grad_sumsq(o, 1);
}

/* With clipping, pass 1 reads every gradient once: averages it over the
 * micro-batches (a change written back) and adds its square sum, so the
 * global norm - the one-call value - is known before any update. Pass 2,
 * tensor by tensor, reads parameter, gradient and states, clips the
 * gradient and updates: the element arithmetic of col_clip_grad_norm +
 * col_opt_step on everything at once. Without clipping no update waits for
 * the norm, so pass 2 averages and sums as it goes and there is no pass 1.
 * Reads of the next chunks and write-backs of older ones run while a tensor
 * is worked on. The stage keeps nothing between steps: the compute tier
 * writes the gradient chunks behind its back. */
col_status lmt_streamed_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, col_err *err)
{
    col_status st = COL_OK;
    double sum = 0;
    *norm = 0;
    mt_stage_forget(t->stage);
    for (int i = t->train0; clip > 0 && i < t->nt && st == COL_OK; i++) {
        col_opt_tensor o = t->ot[i];
        int64_t off;
        if ((o.n = lmt_span(t, i, &off)) == 0)
            continue;
        void *g = NULL;
        st = mt_stage_get(t->stage, t->ref[t->nt + i], na > 1, &g, err);
        if (st == COL_OK && lmt_next_chunk(t, 1, i) < t->nt)
            st = mt_stage_prefetch(t->stage, t->ref[t->nt + lmt_next_chunk(t, 1, i)], 1, err);
        if (st != COL_OK)
            break;
        o.g = (float *)g + off;
        average(&o, na, &sum);
    }
    if (st == COL_OK && clip > 0)
        st = lmt_dp_sum_d(t, sum, &sum, err);
    if (st == COL_OK && clip > 0)
        st = mt_stage_flush(t->stage, err);
    if (st != COL_OK) {
        mt_stage_forget(t->stage);
        return st;
    }
    *norm = sqrt(sum);
    if (clip > 0 && !isfinite(*norm)) {
        mt_stage_forget(t->stage);
        return col_err_set(err, COL_EINVAL, "clip_grad_norm: total gradient norm is %g (non-finite gradients)", *norm);
    }
    int nk = 2 + t->slots;
    for (int i = t->train0; i < t->nt && st == COL_OK; i++) {
        col_opt_tensor o = t->ot[i];
        int64_t off;
        if ((o.n = lmt_span(t, i, &off)) == 0)
            continue;
        for (int k = 0; k < nk && st == COL_OK; k++) {
            void *p = NULL;
            /* the gradient's averaging or scaling here need not reach its chunk: the next step zeroes it */
            st = mt_stage_get(t->stage, t->ref[k * t->nt + i], k != 1, &p, err);
            if (st == COL_OK) /* an f32 session's step: weights, gradient (their span), state slots */
                *(k == 0 ? &o.w : k == 1 ? &o.g : k == 2 ? &o.m : &o.v) = (float *)p + (k < 2 ? off : 0);
        }
        for (int k = 0; k < nk && st == COL_OK; k++) {
            int j = lmt_next_chunk(t, k, i);
            if (j < t->nt)
                st = mt_stage_prefetch(t->stage, t->ref[k * t->nt + j], nk, err);
        }
        if (st != COL_OK)
            break;
        if (clip > 0)
            col_clip_grad_scale(&o, 1, clip, *norm);
        else
            average(&o, na, &sum);
        st = col_opt_step(&t->cfg.opt, lr, t->step + 1, &o, 1, err);
    }
    if (st == COL_OK && clip <= 0 && (st = lmt_dp_sum_d(t, sum, &sum, err)) == COL_OK)
        *norm = sqrt(sum);
    if (st == COL_OK)
        st = mt_stage_flush(t->stage, err);
    mt_stage_forget(t->stage);
    return st;
}

/* ---- streaming through the stage (saving, loading) ---- */

/* the chunk of tensor i's kind-k memory when it is on the NVMe tier, else -1 */
static int nvme_chunk(const col_lm_trainer *t, int k, int i)
{
    mt_ref r = t->ref[k * t->nt + i];
    return r.chunk >= 0 && !mt_ptr(t->pool, r) ? r.chunk : -1;
}

/* the io bytes of the distinct NVMe chunks among c[0..n) */
static size_t distinct_io(const col_lm_trainer *t, const int *c, int n)
{
    size_t sum = 0;
    for (int a = 0; a < n; a++) {
        bool seen = c[a] < 0;
        for (int b = 0; b < a && !seen; b++)
            seen = c[b] == c[a];
        if (!seen)
            sum += mt_chunk_io_bytes(t->pool, c[a]);
    }
    return sum;
}

size_t lmt_stage_need(const col_lm_trainer *t)
{
    size_t most = 0;
    for (int i = 0; i < t->nt; i++) { /* the optimizer step holds a tensor's every kind at once */
        int c[LMT_KINDS];
        for (int k = 0; k < LMT_KINDS; k++)
            c[k] = nvme_chunk(t, k, i); /* -1 for a kind the session does not have */
        size_t need = distinct_io(t, c, LMT_KINDS);
        most = need > most ? need : most;
    }
    for (int i = 0; t->lora_of && i < t->np; i++) { /* a LoRA merge holds a weight and its two adapters */
        if (t->lora_of[i] < 0)
            continue;
        int a = t->np + 2 * t->lora_of[i], c[3] = {nvme_chunk(t, 0, i), nvme_chunk(t, 0, a), nvme_chunk(t, 0, a + 1)};
        size_t need = distinct_io(t, c, 3);
        most = need > most ? need : most;
    }
    return most;
}

bool lmt_has(const col_lm_trainer *t, int k, int i) { return i >= 0 && i < t->nt && t->ref[k * t->nt + i].chunk >= 0; }

col_status lmt_get(col_lm_trainer *t, int k, int i, bool will_write, void **p, col_err *err)
{
    if (k == 0 && t->ext && i < t->np && t->ext[i]) {
        if (will_write)
            return col_err_set(err, COL_ESTATE, "parameter '%s' is read in place from the model file, which this "
                               "session cannot change", t->specs[i].name);
        *p = (void *)(uintptr_t)t->ext[i];
        return COL_OK;
    }
    return mt_stage_get(t->stage, t->ref[k * t->nt + i], will_write, p, err);
}

col_status lmt_read_ahead(col_lm_trainer *t, int k, int i, int keep, col_err *err)
{
    const mt_ref *r = t->ref + (size_t)k * (size_t)t->nt;
    int j = i + 1;
    while (j < t->nt && (r[j].chunk < 0 || r[j].chunk == r[i].chunk))
        j++;
    return j < t->nt ? mt_stage_prefetch(t->stage, r[j], keep, err) : COL_OK;
}

col_status lmt_stage_end(col_lm_trainer *t, bool write_back, col_err *err)
{
    col_status st = write_back ? mt_stage_flush(t->stage, err) : COL_OK;
    mt_stage_forget(t->stage);
    return st;
}

/* ---- what the session holds ---- */

enum { TABLE_BYTES_PER_NODE = 2048, TABLE_BYTES_PER_CHUNK = 512 };
#define RUNTIME_ALLOWANCE ((size_t)32 << 20) /* OpenMP threads' stacks, BLAS packing buffers, allocator slack */

static size_t graph_nodes(const col_graph *g) { return g ? (size_t)col_graph_count(g) : 0; }

/* the largest NVMe chunk's io bytes (0 without one) */
static size_t largest_nvme_chunk(const col_lm_trainer *t)
{
    size_t most = 0;
    for (int c = 0; c < mt_chunk_count(t->pool); c++) {
        mt_chunk_info ci;
        if (mt_chunk_get(t->pool, c, &ci, NULL) == COL_OK && ci.tier == MT_TIER_NVME &&
            mt_chunk_io_bytes(t->pool, c) > most)
            most = mt_chunk_io_bytes(t->pool, c);
    }
    return most;
}

void col_lm_trainer_memory(const col_lm_trainer *t, col_lm_memory *m)
{
    *m = (col_lm_memory){.host_budget = t->cfg.host_budget};
    mt_pool_stats ps;
    mt_stats(t->pool, &ps);
    m->host = ps.host_bytes;
    bool dev = lmt_dev(t) != NULL;
    if (t->cfg.compute_budget && !dev)
        m->compute = t->cfg.compute_budget;
    col_plan *plans[] = {t->plan, t->eplan, t->fplan, t->bplan, t->dec[0].plan, t->dec[1].plan};
    size_t act = 0;
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) /* one arena when shared: the largest */
        act = plans[i] && col_plan_memory_bytes(plans[i]) > act ? col_plan_memory_bytes(plans[i]) : act;
    if (!t->cfg.compute_budget && !dev) {
        m->activations = act;
        m->kv_cache = t->kv ? sizeof(float) * 2 * (size_t)t->cfg.model.n_layer * (size_t)t->cfg.model.n_kv_head *
                                  (size_t)t->kv_len * (size_t)t->cfg.model.head_dim
                            : 0;
    }
    m->staging = mt_stage_limit(t->stage);
    const lmt_tier *tiers[] = {&t->tier, &t->etier, &t->ftier, &t->btier, &t->dec[0].tier, &t->dec[1].tier};
    for (size_t i = 0; dev && i < sizeof tiers / sizeof tiers[0]; i++)
        m->device_staging += tiers[i]->res ? largest_nvme_chunk(t) : 0;
    if (dev)
        m->logits = sizeof(float) * (size_t)t->cfg.batch * (size_t)t->cfg.seq * (size_t)t->cfg.model.vocab_size;
    for (int i = 0; t->lora_of && i < t->np; i++) {
        size_t b = sizeof(float) * (size_t)col_param_numel(&t->specs[i]);
        m->merge = t->lora_of[i] >= 0 && b > m->merge ? b : m->merge;
    }
    m->convert = sizeof(float) * t->conv_n;
    size_t nodes = graph_nodes(t->g) + graph_nodes(t->fg) + graph_nodes(t->bg) + graph_nodes(t->dec[0].g) + graph_nodes(t->dec[1].g);
    m->tables = nodes * TABLE_BYTES_PER_NODE + (size_t)mt_chunk_count(t->pool) * TABLE_BYTES_PER_CHUNK +
                sizeof(col_param_spec) * (size_t)t->nt + RUNTIME_ALLOWANCE;
    m->overhead = m->activations + m->kv_cache + m->staging + m->device_staging + m->logits + m->merge + m->tables +
                  m->convert;
    m->bound = (m->host_budget ? m->host_budget : m->host) + m->compute + m->overhead;
}

/* ---- host views ---- */

unsigned col_lm_trainer_nvme_kinds(const col_lm_trainer *t) { return t->nvme_kinds; }

col_status col_lm_trainer_host_begin(col_lm_trainer *t, unsigned kinds, col_err *err)
{
    if (t->view)
        return col_err_set(err, COL_ESTATE, "trainer: a host view is already open");
    kinds &= t->nvme_kinds;
    if (!kinds)
        return COL_OK;
    col_status st = mt_stage_create(t->pool, mt_chunk_count(t->pool), &t->view, err);
    if (st != COL_OK)
        return st;
    t->view_kinds = kinds;
    for (int k = 0; k < LMT_KINDS && st == COL_OK; k++) {
        if (!(kinds & kind_bit(k)))
            continue;
        for (int i = 0; i < t->nt && st == COL_OK; i++) {
            if (t->ref[k * t->nt + i].chunk < 0)
                continue;
            void *p = NULL;
            st = mt_stage_get(t->view, t->ref[k * t->nt + i], true, &p, err);
            set_addr(t, i, k, p);
        }
    }
    if (st != COL_OK) {
        col_err e2 = {0};
        col_lm_trainer_host_end(t, false, &e2);
    }
    return st;
}

col_status col_lm_trainer_host_end(col_lm_trainer *t, bool write_back, col_err *err)
{
    if (!t->view)
        return COL_OK;
    col_status st = write_back ? mt_stage_flush(t->view, err) : COL_OK;
    for (int k = 0; k < LMT_KINDS; k++)
        if (t->view_kinds & kind_bit(k))
            for (int i = 0; i < t->nt; i++)
                if (t->ref[k * t->nt + i].chunk >= 0)
                    set_addr(t, i, k, NULL);
    mt_stage_free(t->view);
    t->view = NULL;
    t->view_kinds = 0;
    mt_stage_forget(t->stage); /* it may hold what the view changed */
    return st;
}
