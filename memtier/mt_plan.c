/* mt_plan.c - the chunk placement planner (see mt_plan.h and
 * docs/MEMTIER_PLANNER.md). */
#include "mt_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_WARMUP 8
#define NEVER ((long)1 << 60) /* next use of a chunk no op uses */

#include "mt_plan_internal.h"

/* the planner's model of the compute tier */
typedef struct {
    signed char *res;     /* 0 at home, 1 fetch in flight, 2 arrived */
    unsigned char *dirty; /* written since its last fetch */
    long *target;         /* in flight: the (global) op that first uses it */
    size_t used;          /* bytes resident or reserved */
} tier;

/* ---- small helpers ---- */

const char *mt_plan_act_name(mt_plan_act_kind k)
{
    switch (k) {
    case MT_PA_DROP: return "drop";
    case MT_PA_WRITEBACK: return "writeback";
    case MT_PA_FETCH: return "fetch";
    case MT_PA_WAIT: return "wait";
    case MT_PA_FLUSH: return "flush";
    }
    return "?";
}

static size_t cap_at(const mt_plan *p, int op)
{
    return p->budget ? p->budget - p->act[op] : SIZE_MAX / 2;
}

/* the first global op index after t that needs chunk c (cyclic schedule) */
static long next_use(const mt_plan *p, int c, long t)
{
    int lo = p->use_off[c], hi = p->use_off[c + 1];
    if (lo == hi)
        return NEVER;
    long n = p->nops, base = t - t % n;
    int i = (int)(t % n);
    int a = lo, b = hi; /* first use > i */
    while (a < b) {
        int m = (a + b) / 2;
        if (p->use[m] > i)
            b = m;
        else
            a = m + 1;
    }
    return a < hi ? base + p->use[a] : base + n + p->use[lo];
}

static double fetch_s(const mt_plan *p, int c)
{
    double s = mt_plan_hop_s(p, MT_LINK_H2C, p->chunks[c].bytes);
    if (p->chunks[c].home == MT_TIER_NVME)
        s += mt_plan_hop_s(p, MT_LINK_N2H, p->chunks[c].bytes);
    return s;
}

static void step_free(step_plan *s)
{
    free(s->a);
    free(s->off);
    memset(s, 0, sizeof *s);
}

static bool emit(step_plan *s, mt_plan_act_kind k, int chunk, int for_op)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        mt_plan_action *a = realloc(s->a, (size_t)cap * sizeof *a);
        if (!a)
            return false;
        s->a = a;
        s->cap = cap;
    }
    s->a[s->n++] = (mt_plan_action){k, chunk, for_op};
    return true;
}

static bool tier_init(tier *t, int nchunks)
{
    size_t n = nchunks ? (size_t)nchunks : 1;
    t->res = calloc(n, 1);
    t->dirty = calloc(n, 1);
    t->target = calloc(n, sizeof *t->target);
    t->used = 0;
    return t->res && t->dirty && t->target;
}

static void tier_free(tier *t)
{
    free(t->res);
    free(t->dirty);
    free(t->target);
}

static void tier_copy(tier *d, const tier *s, int nchunks)
{
    memcpy(d->res, s->res, (size_t)nchunks);
    memcpy(d->dirty, s->dirty, (size_t)nchunks);
    memcpy(d->target, s->target, (size_t)nchunks * sizeof *s->target);
    d->used = s->used;
}

/* a at a step boundary `shift` ops later than b, the same state? */
static bool tier_same(const tier *a, const tier *b, int nchunks, long shift)
{
    for (int c = 0; c < nchunks; c++) {
        if (a->res[c] != b->res[c] || a->dirty[c] != b->dirty[c])
            return false;
        if (a->res[c] == 1 && a->target[c] - shift != b->target[c])
            return false;
    }
    return true;
}

/* ---- planning one step ---- */

typedef struct {
    int *mark;  /* stamp per chunk */
    int stamp;
    mt_plan_action *ev, *fe, *wa; /* this op's evictions, fetches, waits */
    int nev, nfe, nwa;
} scratch;

static bool in_need(const scratch *s, int c) { return s->mark[c] == s->stamp; }

/* the resident, arrived chunk outside the op's needs whose next use is
 * furthest (Belady); ties: clean before dirty, bigger, lower id. -1: none */
static int pick_victim(const mt_plan *p, const tier *tr, const scratch *s, long t, long *nu_out)
{
    int best = -1;
    long bnu = 0;
    for (int c = 0; c < p->nchunks; c++) {
        if (tr->res[c] != 2 || in_need(s, c))
            continue;
        long nu = next_use(p, c, t);
        bool better = best < 0 || nu > bnu;
        if (!better && nu == bnu) {
            if (tr->dirty[c] != tr->dirty[best])
                better = !tr->dirty[c];
            else
                better = p->chunks[c].bytes > p->chunks[best].bytes;
        }
        if (better) {
            best = c;
            bnu = nu;
        }
    }
    *nu_out = bnu;
    return best;
}

static void evict(const mt_plan *p, tier *tr, scratch *s, int c)
{
    s->ev[s->nev++] = (mt_plan_action){tr->dirty[c] ? MT_PA_WRITEBACK : MT_PA_DROP, c, -1};
    tr->res[c] = 0;
    tr->dirty[c] = 0;
    tr->used -= p->chunks[c].bytes;
}

static void fetch(const mt_plan *p, tier *tr, scratch *s, int c, long use)
{
    s->fe[s->nfe++] = (mt_plan_action){MT_PA_FETCH, c, (int)(use % p->nops)};
    tr->res[c] = 1;
    tr->target[c] = use;
    tr->used += p->chunks[c].bytes;
}

/* Can chunk c, fetched before op t for its use at op u, stay reserved until
 * u without squeezing out what must stay? At every op j in (t, u] the op's
 * chunks plus every fetch in flight for j or later (c included) must fit
 * that op's capacity; then whatever else is resident can be evicted. */
static bool prefetch_fits(const mt_plan *p, const tier *tr, scratch *s, int c, long t, long u)
{
    int n = p->nops;
    for (long j = t + 1; j <= u; j++) {
        int op = (int)(j % n);
        s->stamp++;
        size_t b = p->chunks[c].bytes;
        s->mark[c] = s->stamp;
        for (int k = p->need_off[op]; k < p->need_off[op + 1]; k++) {
            int x = p->need[k];
            if (s->mark[x] != s->stamp) {
                s->mark[x] = s->stamp;
                b += p->chunks[x].bytes;
            }
        }
        for (int x = 0; x < p->nchunks; x++)
            if (tr->res[x] == 1 && tr->target[x] >= j && s->mark[x] != s->stamp) {
                s->mark[x] = s->stamp;
                b += p->chunks[x].bytes;
            }
        if (b > cap_at(p, op))
            return false;
    }
    return true;
}

static col_status plan_op(const mt_plan *p, double horizon, tier *tr, scratch *s, long t, step_plan *out, col_err *e)
{
    int n = p->nops, op = (int)(t % n);
    size_t cap = cap_at(p, op);
    s->nev = s->nfe = s->nwa = 0;

    /* the op's own chunks: evict until the missing ones fit, then fetch them */
    s->stamp++;
    size_t missing = 0;
    for (int k = p->need_off[op]; k < p->need_off[op + 1]; k++) {
        int c = p->need[k];
        s->mark[c] = s->stamp;
        if (tr->res[c] == 0)
            missing += p->chunks[c].bytes;
    }
    while (tr->used + missing > cap) {
        long nu;
        int v = pick_victim(p, tr, s, t, &nu);
        if (v < 0)
            return col_err_set(e, COL_EINTERNAL, "memtier plan: op %d: no chunk left to evict (%zu bytes in use, %zu free)",
                               op, tr->used, cap);
        evict(p, tr, s, v);
    }
    for (int k = p->need_off[op]; k < p->need_off[op + 1]; k++)
        if (tr->res[p->need[k]] == 0)
            fetch(p, tr, s, p->need[k], t);

    /* prefetch, in order of use, what would be late if fetched before op t+1 */
    double ahead = 0;
    for (long u = t + 1; horizon > 0 && u <= t + n; u++) {
        if (u > t + 1)
            ahead += p->time_s[(u - 1) % n];
        if (ahead >= horizon)
            break;
        int uop = (int)(u % n);
        for (int k = p->need_off[uop]; k < p->need_off[uop + 1]; k++) {
            int c = p->need[k];
            if (tr->res[c] != 0)
                continue;
            size_t b = p->chunks[c].bytes;
            /* room now, evicting only chunks needed after u (Belady-consistent) */
            size_t freeable = 0;
            for (int x = 0; x < p->nchunks; x++)
                if (tr->res[x] == 2 && !in_need(s, x) && next_use(p, x, t) > u)
                    freeable += p->chunks[x].bytes;
            if (tr->used + b > cap + freeable)
                goto waits;
            bool fits = prefetch_fits(p, tr, s, c, t, u);
            s->stamp++; /* prefetch_fits used the marks: mark op t's chunks again */
            for (int q = p->need_off[op]; q < p->need_off[op + 1]; q++)
                s->mark[p->need[q]] = s->stamp;
            if (!fits)
                goto waits;
            while (tr->used + b > cap) {
                long nu;
                int v = pick_victim(p, tr, s, t, &nu);
                if (v < 0 || nu <= u)
                    return col_err_set(e, COL_EINTERNAL, "memtier plan: op %d: prefetch accounting", op);
                evict(p, tr, s, v);
            }
            fetch(p, tr, s, c, u);
        }
    }
waits:
    for (int k = p->need_off[op]; k < p->need_off[op + 1]; k++) {
        int c = p->need[k];
        if (tr->res[c] == 1) {
            s->wa[s->nwa++] = (mt_plan_action){MT_PA_WAIT, c, -1};
            tr->res[c] = 2;
        }
    }
    for (int k = p->wr_off[op]; k < p->wr_off[op + 1]; k++)
        tr->dirty[p->wr[k]] = 1;

    out->off[op] = out->n;
    for (int k = 0; k < s->nev; k++)
        if (!emit(out, s->ev[k].kind, s->ev[k].chunk, -1))
            goto nomem;
    for (int k = 0; k < s->nfe; k++)
        if (!emit(out, MT_PA_FETCH, s->fe[k].chunk, s->fe[k].for_op))
            goto nomem;
    for (int k = 0; k < s->nwa; k++)
        if (!emit(out, MT_PA_WAIT, s->wa[k].chunk, -1))
            goto nomem;
    return COL_OK;
nomem:
    return col_err_set(e, COL_ENOMEM, "memtier plan: out of memory for the action lists");
}

/* plans the ops of the step starting at global op `base` from tr */
static col_status plan_step(const mt_plan *p, double horizon, tier *tr, scratch *s, long base, step_plan *out,
                            col_err *e)
{
    out->off = calloc((size_t)p->nops + 2, sizeof *out->off);
    if (!out->off)
        return col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
    for (int i = 0; i < p->nops; i++) {
        col_status st = plan_op(p, horizon, tr, s, base + i, out, e);
        if (st != COL_OK)
            return st;
    }
    out->off[p->nops] = out->off[p->nops + 1] = out->n;
    return COL_OK;
}

/* the tail: actions after the last op that take the tier from `end` back to
 * `start` (the state the steady plan's first op assumes) */
static col_status plan_tail(const mt_plan *p, tier *end, const tier *start, long base_next, step_plan *out, col_err *e)
{
    bool ok = true;
    for (int c = 0; c < p->nchunks; c++)
        if (end->res[c] && !start->res[c]) {
            ok &= emit(out, end->dirty[c] ? MT_PA_WRITEBACK : MT_PA_DROP, c, -1);
            end->res[c] = 0;
            end->dirty[c] = 0;
            end->used -= p->chunks[c].bytes;
        }
    for (int c = 0; c < p->nchunks; c++)
        if (end->res[c] && end->dirty[c] && !start->dirty[c]) {
            ok &= emit(out, MT_PA_FLUSH, c, -1);
            end->dirty[c] = 0;
        }
    for (int c = 0; c < p->nchunks; c++)
        if (!end->res[c] && start->res[c]) {
            long use = start->res[c] == 1 ? start->target[c] + base_next : next_use(p, c, base_next - 1);
            ok &= emit(out, MT_PA_FETCH, c, (int)(use % p->nops));
            end->res[c] = 1;
            end->used += p->chunks[c].bytes;
        }
    for (int c = 0; c < p->nchunks; c++)
        if (end->res[c] == 1 && start->res[c] == 2) {
            ok &= emit(out, MT_PA_WAIT, c, -1);
            end->res[c] = 2;
        }
    out->off[p->nops + 1] = out->n;
    return ok ? COL_OK : col_err_set(e, COL_ENOMEM, "memtier plan: out of memory for the action lists");
}


static void result_free(plan_result *r, int nsteps)
{
    if (r->steps)
        for (int i = 0; i < nsteps; i++)
            step_free(&r->steps[i]);
    free(r->steps);
    r->steps = NULL;
}

/* plans steps from cold until the state at a step's start repeats */
static col_status plan_all(const mt_plan *p, double horizon, plan_result *r, col_err *e)
{
    int n = p->nops, kmax = p->max_warmup < 0 ? 0 : p->max_warmup ? p->max_warmup : DEFAULT_WARMUP;
    col_status st = COL_ENOMEM;
    tier tr = {0}, start = {0};
    scratch s = {0};
    r->nwarm = 0;
    r->steps = calloc((size_t)kmax + 1, sizeof *r->steps);
    s.mark = calloc((size_t)p->nchunks + 1, sizeof *s.mark);
    size_t m = (size_t)p->nchunks + 1;
    s.ev = malloc(m * sizeof *s.ev);
    s.fe = malloc(m * sizeof *s.fe);
    s.wa = malloc(m * sizeof *s.wa);
    if (!r->steps || !s.mark || !s.ev || !s.fe || !s.wa || !tier_init(&tr, p->nchunks) ||
        !tier_init(&start, p->nchunks)) {
        col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
        goto out;
    }
    for (int k = 0; k <= kmax; k++) {
        tier_copy(&start, &tr, p->nchunks);
        st = plan_step(p, horizon, &tr, &s, (long)k * n, &r->steps[k], e);
        if (st != COL_OK)
            goto out;
        r->nwarm = k;
        if (p->max_warmup >= 0 && tier_same(&tr, &start, p->nchunks, n))
            goto out; /* a fixed point: this step's plan serves every later one */
    }
    /* no fixed point within kmax steps: the steady plan returns to its start */
    for (int c = 0; c < p->nchunks; c++)
        if (start.res[c] == 1)
            start.target[c] -= (long)r->nwarm * n; /* relative to the step's first op */
    st = plan_tail(p, &tr, &start, (long)(r->nwarm + 1) * n, &r->steps[r->nwarm], e);
out:
    if (st != COL_OK) {
        result_free(r, kmax + 1);
        r->nwarm = 0;
    } else {
        for (int k = r->nwarm + 1; k <= kmax; k++)
            step_free(&r->steps[k]);
    }
    tier_free(&tr);
    tier_free(&start);
    free(s.mark);
    free(s.ev);
    free(s.fe);
    free(s.wa);
    return st;
}

/* ---- choosing the horizon, the summary ---- */

static col_status plan_with(mt_plan *p, double horizon, plan_result *r, mt_plan_step_sim *steady, col_err *e)
{
    col_status st = plan_all(p, horizon, r, e);
    if (st != COL_OK)
        return st;
    int ns = r->nwarm + 2;
    mt_plan_step_sim *sim = malloc((size_t)ns * sizeof *sim);
    if (!sim) {
        result_free(r, r->nwarm + 1);
        return col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
    }
    st = mt_plan_sim_run(p, r, ns, sim, e);
    *steady = sim[ns - 1];
    free(sim);
    if (st != COL_OK)
        result_free(r, r->nwarm + 1);
    return st;
}

static col_status replan(mt_plan *p, col_err *e)
{
    plan_result best = {0};
    mt_plan_step_sim bsim = {0};
    double bh = 0;
    double cand[16];
    int nc = 0;
    if (p->mode == MT_PREFETCH_OFF) {
        cand[nc++] = 0;
    } else if (p->mode == MT_PREFETCH_FIXED) {
        cand[nc++] = p->prefetch_fixed;
    } else {
        /* horizons in units of the slowest single chunk transfer: a prefetch
         * must start at least one transfer time ahead, more when transfers
         * queue behind each other on a link */
        double base = 0;
        for (int c = 0; c < p->nchunks; c++)
            if (p->use_off[c + 1] > p->use_off[c])
                base = fmax(base, fetch_s(p, c));
        static const double mult[] = {0.5, 1, 1.5, 2, 3, 4, 6, 8, 16, 32};
        cand[nc++] = 0;
        for (size_t i = 0; base > 0 && i < sizeof mult / sizeof mult[0]; i++)
            cand[nc++] = fmin(base * mult[i], p->step_compute_s + base);
        if (base > 0)
            cand[nc++] = p->step_compute_s + base; /* the whole step ahead */
    }
    for (int i = 0; i < nc; i++) {
        if (i > 0 && cand[i] == cand[i - 1])
            continue;
        plan_result r = {0};
        mt_plan_step_sim sim = {0};
        col_status st = plan_with(p, cand[i], &r, &sim, e);
        if (st != COL_OK) {
            result_free(&best, best.nwarm + 1);
            return st;
        }
        /* keep the fastest; on a tie the shorter horizon (less held memory) */
        if (!best.steps || sim.step_s < bsim.step_s * (1 - 1e-12) - 1e-15) {
            result_free(&best, best.nwarm + 1);
            best = r;
            bsim = sim;
            bh = cand[i];
        } else {
            result_free(&r, r.nwarm + 1);
        }
    }
    if (p->steps)
        for (int i = 0; i <= p->nwarm; i++)
            step_free(&p->steps[i]);
    free(p->steps);
    p->steps = best.steps;
    p->nwarm = best.nwarm;
    p->horizon = bh;

    mt_plan_summary *s = &p->sum;
    memset(s, 0, sizeof *s);
    s->nops = p->nops;
    s->nchunks = p->nchunks;
    s->warmup_steps = p->nwarm;
    s->prefetch_s = bh;
    s->min_budget = p->min_budget;
    const step_plan *sp = &p->steps[p->nwarm];
    s->tail_actions = sp->off[p->nops + 1] - sp->off[p->nops];
    for (int i = 0; i < sp->n; i++) {
        s->steady_fetches += sp->a[i].kind == MT_PA_FETCH;
        s->steady_writebacks += sp->a[i].kind == MT_PA_WRITEBACK;
        s->steady_drops += sp->a[i].kind == MT_PA_DROP;
    }
    s->step_s = bsim.step_s;
    s->stall_s = bsim.stall_s;
    return COL_OK;
}

/* ---- input checks, create, update ---- */

static col_status check_timing(const double *time_s, int nops, const mt_plan_links *l, col_err *e)
{
    for (int i = 0; i < nops; i++)
        if (!(time_s[i] >= 0) || isinf(time_s[i]))
            return col_err_set(e, COL_EINVAL, "memtier plan: op %d: time %g s is not a finite number >= 0", i, time_s[i]);
    for (int k = 0; k < MT_NLINKS; k++)
        if (!(l->bw[k] > 0))
            return col_err_set(e, COL_EINVAL, "memtier plan: %s bandwidth %g B/s must be > 0 (INFINITY for a free hop)",
                               mt_link_name((mt_link)k), l->bw[k]);
    if (!(l->latency_s >= 0) || isinf(l->latency_s))
        return col_err_set(e, COL_EINVAL, "memtier plan: latency %g s is not a finite number >= 0", l->latency_s);
    return COL_OK;
}

/* the smallest budget: the most any op needs at once; COL_ENOMEM when the
 * budget is smaller (naming it) */
static col_status check_budget(mt_plan *p, const size_t *act, col_err *e)
{
    size_t need_max = 0;
    int worst = 0;
    size_t worst_chunks = 0;
    for (int i = 0; i < p->nops; i++) {
        size_t b = 0;
        bool over = false;
        for (int k = p->need_off[i]; k < p->need_off[i + 1]; k++) {
            size_t c = p->chunks[p->need[k]].bytes;
            over |= b + c < b;
            b += c;
        }
        if (over || b + act[i] < b)
            return col_err_set(e, COL_EINVAL, "memtier plan: op %d: byte count overflows", i);
        if (b + act[i] > need_max) {
            need_max = b + act[i];
            worst = i;
            worst_chunks = b;
        }
    }
    if (p->budget && need_max > p->budget)
        return col_err_set_on(e, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM,
                              "memtier plan: budget %zu bytes is too small: op %d needs %zu bytes (%zu of chunks + %zu "
                              "of activations); the smallest budget that works is %zu bytes",
                              p->budget, worst, need_max, worst_chunks, act[worst], need_max);
    p->min_budget = need_max;
    return COL_OK;
}

void mt_plan_free(mt_plan *p)
{
    if (!p)
        return;
    if (p->steps)
        for (int i = 0; i <= p->nwarm; i++)
            step_free(&p->steps[i]);
    free(p->steps);
    free(p->chunks);
    free(p->need_off);
    free(p->need);
    free(p->wr_off);
    free(p->wr);
    free(p->use_off);
    free(p->use);
    free(p->time_s);
    free(p->act);
    free(p);
}

static col_status check_ids(const int *ids, int n, int nchunks, int op, const char *what, col_err *e)
{
    if (n < 0 || (n > 0 && !ids))
        return col_err_set(e, COL_EINVAL, "memtier plan: op %d: bad %s list (count %d)", op, what, n);
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= nchunks)
            return col_err_set(e, COL_EINVAL, "memtier plan: op %d: %s[%d] = chunk %d is out of range (%d chunks)", op,
                               what, k, ids[k], nchunks);
    return COL_OK;
}

col_status mt_plan_create(const mt_plan_input *in, mt_plan **out, col_err *e)
{
    if (out)
        *out = NULL;
    if (!in || !out)
        return col_err_set(e, COL_EINVAL, "mt_plan_create: NULL argument");
    if (in->nops <= 0 || !in->ops)
        return col_err_set(e, COL_EINVAL, "memtier plan: the schedule is empty (%d ops); nothing to plan", in->nops);
    if (in->nchunks < 0 || (in->nchunks > 0 && !in->chunks))
        return col_err_set(e, COL_EINVAL, "memtier plan: bad chunk list (%d chunks)", in->nchunks);
    if (in->prefetch != MT_PREFETCH_AUTO && in->prefetch != MT_PREFETCH_OFF && in->prefetch != MT_PREFETCH_FIXED)
        return col_err_set(e, COL_EINVAL, "memtier plan: unknown prefetch mode %d", (int)in->prefetch);
    if (in->prefetch == MT_PREFETCH_FIXED && (!(in->prefetch_s >= 0) || isinf(in->prefetch_s)))
        return col_err_set(e, COL_EINVAL, "memtier plan: prefetch horizon %g s is not a finite number >= 0",
                           in->prefetch_s);
    if (in->max_warmup < -1)
        return col_err_set(e, COL_EINVAL, "memtier plan: max_warmup %d must be >= -1", in->max_warmup);
    int nc = in->nchunks, n = in->nops;
    for (int c = 0; c < nc; c++) {
        if (in->chunks[c].bytes == 0)
            return col_err_set(e, COL_EINVAL, "memtier plan: chunk %d has 0 bytes", c);
        if (in->chunks[c].home != MT_TIER_HOST && in->chunks[c].home != MT_TIER_NVME)
            return col_err_set(e, COL_EINVAL, "memtier plan: chunk %d: home tier %d is neither host nor nvme", c,
                               (int)in->chunks[c].home);
        if (in->budget && in->chunks[c].bytes > in->budget)
            return col_err_set_on(e, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM,
                                  "memtier plan: chunk %d (%zu bytes) is larger than the compute-tier budget (%zu "
                                  "bytes)", c, in->chunks[c].bytes, in->budget);
    }
    size_t nref = 0;
    for (int i = 0; i < n; i++) {
        col_status st = check_ids(in->ops[i].reads, in->ops[i].nreads, nc, i, "reads", e);
        if (st == COL_OK)
            st = check_ids(in->ops[i].writes, in->ops[i].nwrites, nc, i, "writes", e);
        if (st != COL_OK)
            return st;
        nref += (size_t)in->ops[i].nreads + (size_t)in->ops[i].nwrites;
    }

    mt_plan *p = calloc(1, sizeof *p);
    if (!p)
        return col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
    p->nchunks = nc;
    p->nops = n;
    p->budget = in->budget;
    p->links = in->links;
    p->mode = in->prefetch;
    p->prefetch_fixed = in->prefetch_s;
    p->max_warmup = in->max_warmup;
    size_t mc = (size_t)nc + 1, mn = (size_t)n + 1, mr = nref + 1;
    p->chunks = malloc(mc * sizeof *p->chunks);
    p->need_off = calloc(mn, sizeof *p->need_off);
    p->need = malloc(mr * sizeof *p->need);
    p->wr_off = calloc(mn, sizeof *p->wr_off);
    p->wr = malloc(mr * sizeof *p->wr);
    p->use_off = calloc(mc, sizeof *p->use_off);
    p->use = malloc(mr * sizeof *p->use);
    p->time_s = malloc(mn * sizeof *p->time_s);
    p->act = malloc(mn * sizeof *p->act);
    int *seen = malloc(mc * sizeof *seen);
    col_status st = COL_OK;
    if (!p->chunks || !p->need_off || !p->need || !p->wr_off || !p->wr || !p->use_off || !p->use || !p->time_s ||
        !p->act || !seen) {
        st = col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
        goto fail;
    }
    if (nc)
        memcpy(p->chunks, in->chunks, (size_t)nc * sizeof *p->chunks);
    for (int c = 0; c < nc; c++)
        seen[c] = -1;
    /* distinct needed / written chunks per op; `seen` stamps with 2i, 2i+1 */
    int nn = 0, nw = 0;
    for (int i = 0; i < n; i++) {
        const mt_plan_op *o = &in->ops[i];
        p->need_off[i] = nn;
        p->wr_off[i] = nw;
        for (int k = 0; k < o->nwrites; k++)
            if (seen[o->writes[k]] != 2 * i) {
                seen[o->writes[k]] = 2 * i;
                p->wr[nw++] = o->writes[k];
            }
        for (int k = 0; k < o->nreads + o->nwrites; k++) {
            int c = k < o->nreads ? o->reads[k] : o->writes[k - o->nreads];
            if (seen[c] != 2 * i + 1) {
                seen[c] = 2 * i + 1;
                p->need[nn++] = c;
                p->use_off[c + 1]++;
            }
        }
        p->time_s[i] = o->time_s;
        p->act[i] = o->act_bytes;
    }
    p->need_off[n] = nn;
    p->wr_off[n] = nw;
    for (int c = 0; c < nc; c++)
        p->use_off[c + 1] += p->use_off[c];
    memcpy(seen, p->use_off, (size_t)nc * sizeof *seen);
    for (int i = 0; i < n; i++) /* ascending op order per chunk */
        for (int k = p->need_off[i]; k < p->need_off[i + 1]; k++)
            p->use[seen[p->need[k]]++] = i;
    if ((st = check_timing(p->time_s, n, &p->links, e)) != COL_OK || (st = check_budget(p, p->act, e)) != COL_OK)
        goto fail;
    p->step_compute_s = 0;
    for (int i = 0; i < n; i++)
        p->step_compute_s += p->time_s[i];
    if ((st = replan(p, e)) != COL_OK)
        goto fail;
    free(seen);
    *out = p;
    return COL_OK;
fail:
    free(seen);
    mt_plan_free(p);
    return st;
}

col_status mt_plan_update_timing(mt_plan *p, const mt_plan_trace *tr, col_err *e)
{
    if (!p || !tr)
        return col_err_set(e, COL_EINVAL, "mt_plan_update_timing: NULL argument");
    int n = p->nops;
    double *time_s = malloc((size_t)n * sizeof *time_s);
    size_t *act = malloc((size_t)n * sizeof *act);
    if (!time_s || !act) {
        free(time_s);
        free(act);
        return col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
    }
    mt_plan_links links = p->links;
    for (int i = 0; i < n; i++) {
        time_s[i] = tr->op_s && !(tr->op_s[i] < 0) ? tr->op_s[i] : p->time_s[i];
        act[i] = tr->act_bytes ? tr->act_bytes[i] : p->act[i];
    }
    for (int k = 0; k < MT_NLINKS; k++)
        if (tr->bw[k] != 0)
            links.bw[k] = tr->bw[k];
    if (!(tr->latency_s < 0))
        links.latency_s = tr->latency_s;
    /* the trace goes in only if it passes the checks and plans */
    double *old_t = p->time_s;
    size_t *old_a = p->act;
    mt_plan_links old_l = p->links;
    size_t old_min = p->min_budget;
    double old_sc = p->step_compute_s;
    col_status st = check_timing(time_s, n, &links, e);
    if (st == COL_OK)
        st = check_budget(p, act, e);
    if (st == COL_OK) {
        p->time_s = time_s;
        p->act = act;
        p->links = links;
        p->step_compute_s = 0;
        for (int i = 0; i < n; i++)
            p->step_compute_s += time_s[i];
        st = replan(p, e);
        if (st != COL_OK) {
            p->time_s = old_t;
            p->act = old_a;
            p->links = old_l;
            p->step_compute_s = old_sc;
        }
    }
    if (st == COL_OK) {
        free(old_t);
        free(old_a);
    } else {
        p->min_budget = old_min;
        free(time_s);
        free(act);
    }
    return st;
}

/* ---- queries ---- */

const mt_plan_action *mt_plan_actions(const mt_plan *p, long step, int op, int *n)
{
    *n = 0;
    if (!p || step < 0 || op < 0 || op >= p->nops)
        return NULL;
    plan_result r = {p->nwarm, p->steps};
    const step_plan *sp = step_of(p, &r, step);
    *n = sp->off[op + 1] - sp->off[op];
    return sp->a + sp->off[op];
}

const mt_plan_action *mt_plan_tail(const mt_plan *p, long step, int *n)
{
    *n = 0;
    if (!p || step < 0)
        return NULL;
    plan_result r = {p->nwarm, p->steps};
    const step_plan *sp = step_of(p, &r, step);
    *n = sp->off[p->nops + 1] - sp->off[p->nops];
    return sp->a + sp->off[p->nops];
}

void mt_plan_get_summary(const mt_plan *p, mt_plan_summary *s) { *s = p->sum; }
