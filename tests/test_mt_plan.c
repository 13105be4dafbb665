/* test_mt_plan.c - the chunk placement planner: residency and budget by
 * replaying the actions on an independent model of the tier, Belady
 * optimality against an exhaustive search, dirty write-backs, prefetch and
 * the timing model, the cyclic steady state, re-planning from a trace, bad
 * inputs. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mt_plan.h"
#include "testlib.h"

#define MAXC 16
#define MAXOPS 32
#define MAXREF 6

/* a schedule under construction */
typedef struct {
    int nchunks, nops;
    mt_plan_chunk chunks[MAXC];
    int reads[MAXOPS][MAXREF], writes[MAXOPS][MAXREF];
    mt_plan_op ops[MAXOPS];
    mt_plan_input in;
} sched;

static void sched_init(sched *s, int nchunks, size_t bytes)
{
    memset(s, 0, sizeof *s);
    s->nchunks = nchunks;
    for (int c = 0; c < nchunks; c++)
        s->chunks[c] = (mt_plan_chunk){bytes, MT_TIER_HOST};
    for (int k = 0; k < MT_NLINKS; k++)
        s->in.links.bw[k] = 1e9;
}

/* op with reads r[0..nr-1] and writes w[0..nw-1] */
static void sched_op(sched *s, const int *r, int nr, const int *w, int nw, double t, size_t act)
{
    mt_plan_op *o = &s->ops[s->nops];
    if (nr)
        memcpy(s->reads[s->nops], r, (size_t)nr * sizeof *r);
    if (nw)
        memcpy(s->writes[s->nops], w, (size_t)nw * sizeof *w);
    *o = (mt_plan_op){s->reads[s->nops], nr, s->writes[s->nops], nw, t, act};
    s->nops++;
}

static const mt_plan_input *sched_input(sched *s)
{
    s->in.nchunks = s->nchunks;
    s->in.chunks = s->chunks;
    s->in.nops = s->nops;
    s->in.ops = s->ops;
    return &s->in;
}

/* the plan of s in `budget` bytes without prefetching, with one assertion
 * that it is made ("<what> <error message>") */
static mt_plan *plan_no_prefetch(sched *s, size_t budget, const char *what)
{
    s->in.budget = budget;
    s->in.prefetch = MT_PREFETCH_OFF;
    mt_plan *p = NULL;
    col_err err = {0};
    TL_OK(mt_plan_create(sched_input(s), &p, &err) == COL_OK, "%s %s", what, err.msg);
    return p;
}

static uint64_t rng_state;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33) % n;
}

/* a random schedule: each op reads 1..maxref distinct chunks, writes some of them */
static void sched_random(sched *s, int nchunks, int nops, int maxref, bool unit, double wfrac)
{
    sched_init(s, nchunks, 100);
    for (int c = 0; c < nchunks; c++) {
        s->chunks[c].bytes = unit ? 100 : 50 + rnd(200);
        s->chunks[c].home = !unit && rnd(3) == 0 ? MT_TIER_NVME : MT_TIER_HOST;
    }
    for (int i = 0; i < nops; i++) {
        int r[MAXREF], w[MAXREF], nr = 1 + (int)rnd((uint32_t)maxref), nw = 0;
        if (nr > nchunks)
            nr = nchunks;
        for (int k = 0; k < nr; k++) {
            int c;
            bool dup;
            do {
                c = (int)rnd((uint32_t)nchunks);
                dup = false;
                for (int q = 0; q < k; q++)
                    dup |= r[q] == c;
            } while (dup);
            r[k] = c;
            if (rnd(1000) < wfrac * 1000)
                w[nw++] = c;
        }
        sched_op(s, r, nr, w, nw, unit ? 0.0 : 0.001 * (1 + rnd(10)), unit ? 0 : 10 * rnd(10));
    }
}

/* ---- the tier model: replays a plan and checks every rule ---- */

typedef struct {
    int res[MAXC]; /* 0 home, 1 in flight, 2 arrived */
    bool dirty[MAXC];
    size_t used;
} tier_model;

typedef struct {
    int fetches, writebacks, drops, flushes;
    size_t fetched_bytes;
} step_count;

/* replays steps 0..nsteps-1; counts per step; states at each step's start.
 * Returns false (with a note) at the first broken rule. */
static bool replay(const mt_plan *p, const sched *s, int nsteps, step_count *cnt, tier_model *starts)
{
    tier_model m = {0};
    size_t budget = s->in.budget ? s->in.budget : SIZE_MAX / 2;
    for (int k = 0; k < nsteps; k++) {
        memset(&cnt[k], 0, sizeof cnt[k]);
        starts[k] = m;
        for (int i = 0; i <= s->nops; i++) {
            int n;
            const mt_plan_action *a = i < s->nops ? mt_plan_actions(p, k, i, &n) : mt_plan_tail(p, k, &n);
            size_t act = i < s->nops ? s->ops[i].act_bytes : 0;
            for (int q = 0; q < n; q++) {
                int c = a[q].chunk;
                if (c < 0 || c >= s->nchunks) {
                    TL_NOTE("step %d op %d: action on chunk %d", k, i, c);
                    return false;
                }
                switch (a[q].kind) {
                case MT_PA_FETCH:
                    if (m.res[c]) {
                        TL_NOTE("step %d op %d: fetch of resident chunk %d", k, i, c);
                        return false;
                    }
                    m.res[c] = 1;
                    m.used += s->chunks[c].bytes;
                    cnt[k].fetches++;
                    cnt[k].fetched_bytes += s->chunks[c].bytes;
                    if (m.used + act > budget) {
                        TL_NOTE("step %d op %d: fetch of %d: %zu + %zu > budget %zu", k, i, c, m.used, act, budget);
                        return false;
                    }
                    break;
                case MT_PA_DROP:
                case MT_PA_WRITEBACK:
                    if (!m.res[c] || (m.res[c] == 1 && i < s->nops)) {
                        TL_NOTE("step %d op %d: evicting chunk %d in state %d", k, i, c, m.res[c]);
                        return false;
                    }
                    if (m.dirty[c] != (a[q].kind == MT_PA_WRITEBACK)) {
                        TL_NOTE("step %d op %d: %s of a %s chunk %d", k, i, mt_plan_act_name(a[q].kind),
                                m.dirty[c] ? "dirty" : "clean", c);
                        return false;
                    }
                    m.res[c] = 0;
                    m.dirty[c] = false;
                    m.used -= s->chunks[c].bytes;
                    if (a[q].kind == MT_PA_DROP)
                        cnt[k].drops++;
                    else
                        cnt[k].writebacks++;
                    break;
                case MT_PA_FLUSH:
                    if (!m.res[c] || !m.dirty[c]) {
                        TL_NOTE("step %d: flush of chunk %d (state %d dirty %d)", k, c, m.res[c], m.dirty[c]);
                        return false;
                    }
                    m.dirty[c] = false;
                    cnt[k].flushes++;
                    break;
                case MT_PA_WAIT:
                    if (!m.res[c]) {
                        TL_NOTE("step %d op %d: wait for chunk %d that is not coming", k, i, c);
                        return false;
                    }
                    m.res[c] = 2;
                    break;
                }
            }
            if (i == s->nops)
                break;
            for (int q = 0; q < s->ops[i].nreads + s->ops[i].nwrites; q++) {
                int c = q < s->ops[i].nreads ? s->ops[i].reads[q] : s->ops[i].writes[q - s->ops[i].nreads];
                if (m.res[c] != 2) {
                    TL_NOTE("step %d op %d: chunk %d not resident (state %d)", k, i, c, m.res[c]);
                    return false;
                }
            }
            if (m.used + act > budget) {
                TL_NOTE("step %d op %d: %zu + %zu > budget %zu", k, i, m.used, act, budget);
                return false;
            }
            for (int q = 0; q < s->ops[i].nwrites; q++)
                m.dirty[s->ops[i].writes[q]] = true;
        }
    }
    return true;
}

static bool same_tier(const tier_model *a, const tier_model *b, int nchunks)
{
    for (int c = 0; c < nchunks; c++)
        if (a->res[c] != b->res[c] || a->dirty[c] != b->dirty[c])
            return false;
    return a->used == b->used;
}

/* ---- exhaustive minimum of fetches (unit chunks, demand only) ---- */

static int dp_memo[MAXOPS + 1][1 << 8];

static int min_fetches(const sched *s, int i, unsigned mask, int k)
{
    if (i == s->nops)
        return 0;
    if (dp_memo[i][mask] >= 0)
        return dp_memo[i][mask];
    unsigned need = 0;
    for (int q = 0; q < s->ops[i].nreads; q++)
        need |= 1u << s->ops[i].reads[q];
    unsigned have = mask | need;
    int cost = __builtin_popcount(need & ~mask), best = 1 << 30;
    /* every way to keep a subset of what is resident, alongside the op's chunks */
    unsigned others = have & ~need;
    for (unsigned sub = others;; sub = (sub - 1) & others) {
        unsigned next = sub | need;
        if (__builtin_popcount(next) <= k) {
            int v = min_fetches(s, i + 1, next, k);
            if (v < best)
                best = v;
        }
        if (!sub)
            break;
    }
    return dp_memo[i][mask] = cost + best;
}

/* ---- tests ---- */

/* two chunks of 100 bytes, room for one, 100 B/s: every transfer takes 1 s */
static void test_timing_by_hand(void)
{
    sched s;
    sched_init(&s, 2, 100);
    for (int k = 0; k < MT_NLINKS; k++)
        s.in.links.bw[k] = 100;
    int a = 0, b = 1;
    sched_op(&s, &a, 1, NULL, 0, 1.0, 0);
    sched_op(&s, &b, 1, NULL, 0, 1.0, 0);
    mt_plan *p = plan_no_prefetch(&s, 100, "plan: 2 chunks, room for 1");
    col_err err = {0};
    mt_plan_step_sim sim[3];
    TL_OK(mt_plan_simulate(p, 3, sim, &err) == COL_OK, "simulate");
    /* each op: fetch 1 s (stall), compute 1 s -> 4 s per step, 2 s of stall, 200 bytes in */
    TL_OK(fabs(sim[2].step_s - 4) < 1e-9 && fabs(sim[2].stall_s - 2) < 1e-9 && sim[2].bytes[MT_LINK_H2C] == 200 &&
              sim[2].bytes[MT_LINK_C2H] == 0,
          "clean chunks: step %.3f s (want 4), stall %.3f (want 2), in %llu (want 200)", sim[2].step_s, sim[2].stall_s,
          (unsigned long long)sim[2].bytes[MT_LINK_H2C]);
    mt_plan_free(p);

    /* op 0 writes chunk 0: before op 1 it is written back (1 s), and chunk 1
     * may only come into its space afterwards: 1 s more stall at op 1 */
    s.ops[0].writes = s.writes[0];
    s.writes[0][0] = 0;
    s.ops[0].nwrites = 1;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_OK, "plan with a write %s", err.msg);
    TL_OK(mt_plan_simulate(p, 3, sim, &err) == COL_OK, "simulate");
    TL_OK(fabs(sim[2].step_s - 5) < 1e-9 && fabs(sim[2].stall_s - 3) < 1e-9 && sim[2].bytes[MT_LINK_C2H] == 100 &&
              sim[2].writebacks == 1,
          "dirty chunk: step %.3f s (want 5), stall %.3f (want 3), out %llu (want 100)", sim[2].step_s, sim[2].stall_s,
          (unsigned long long)sim[2].bytes[MT_LINK_C2H]);
    mt_plan_free(p);

    /* NVMe home: fetch = 1 s nvme->host + 1 s host->compute, + 0.5 s latency per hop */
    s.ops[0].nwrites = 0;
    s.chunks[0].home = s.chunks[1].home = MT_TIER_NVME;
    s.in.links.latency_s = 0.5;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_OK, "plan nvme home %s", err.msg);
    TL_OK(mt_plan_simulate(p, 3, sim, &err) == COL_OK, "simulate");
    TL_OK(fabs(sim[2].step_s - 8) < 1e-9 && sim[2].bytes[MT_LINK_N2H] == 200,
          "nvme home: step %.3f s (want 2 x (3 + 1) = 8), nvme->host %llu (want 200)", sim[2].step_s,
          (unsigned long long)sim[2].bytes[MT_LINK_N2H]);
    mt_plan_free(p);
}

static void test_random_replay(void)
{
    int bad = 0, cases = 0, unstable = 0, tails = 0;
    rng_state = 42;
    for (int it = 0; it < 300; it++) {
        sched s;
        int nc = 2 + (int)rnd(MAXC - 1), nops = 1 + (int)rnd(MAXOPS);
        sched_random(&s, nc, nops, 1 + (int)rnd(4), false, 0.3);
        /* the smallest budget, computed here: the most any op needs at once */
        size_t minb = 0, all = 0;
        for (int c = 0; c < nc; c++)
            all += s.chunks[c].bytes;
        for (int i = 0; i < nops; i++) {
            size_t b = s.ops[i].act_bytes;
            for (int q = 0; q < s.ops[i].nreads; q++)
                b += s.chunks[s.ops[i].reads[q]].bytes;
            minb = b > minb ? b : minb;
        }
        size_t biggest = 0;
        for (int c = 0; c < nc; c++)
            biggest = s.chunks[c].bytes > biggest ? s.chunks[c].bytes : biggest;
        s.in.budget = minb + rnd((uint32_t)(all / 2 + 1));
        if (s.in.budget < biggest)
            s.in.budget = biggest;
        s.in.links.bw[MT_LINK_H2C] = s.in.links.bw[MT_LINK_C2H] = 2e4 + rnd(200000);
        s.in.links.bw[MT_LINK_N2H] = s.in.links.bw[MT_LINK_H2N] = 1e4 + rnd(100000);
        s.in.links.latency_s = 1e-4 * rnd(3);
        s.in.prefetch = (mt_prefetch_mode)rnd(3);
        s.in.prefetch_s = 0.002 * rnd(5);
        s.in.max_warmup = rnd(5) == 0 ? -1 : 0;
        mt_plan *p = NULL;
        col_err err = {0};
        if (mt_plan_create(sched_input(&s), &p, &err) != COL_OK) {
            TL_NOTE("case %d: %s", it, err.msg);
            bad++;
            continue;
        }
        mt_plan_summary sum;
        mt_plan_get_summary(p, &sum);
        tails += sum.tail_actions > 0;
        int ns = sum.warmup_steps + 4;
        step_count cnt[16];
        tier_model st[16];
        mt_plan_step_sim sim[16];
        cases++;
        if (!replay(p, &s, ns, cnt, st) || mt_plan_simulate(p, ns, sim, &err) != COL_OK || sum.min_budget != minb) {
            TL_NOTE("case %d: replay failed (min budget %zu vs %zu)", it, sum.min_budget, minb);
            bad++;
        } else {
            /* steady steps: the same start state, the same traffic (with a
             * tail, from the second steady step on: the tail may leave a
             * chunk arrived that the plan's start assumed in flight) */
            int w = sum.warmup_steps, ref = sum.tail_actions ? w + 1 : w;
            for (int k = ref + 1; k < ns; k++)
                if (!same_tier(&st[k], &st[ref], s.nchunks) || cnt[k].fetched_bytes != cnt[w].fetched_bytes ||
                    cnt[k].writebacks != cnt[w].writebacks || sim[k].bytes[MT_LINK_H2C] != sim[w].bytes[MT_LINK_H2C] ||
                    sim[k].bytes[MT_LINK_C2H] != sim[w].bytes[MT_LINK_C2H])
                    unstable++;
            for (int k = 0; k < ns; k++)
                if (sim[k].bytes[MT_LINK_H2C] != cnt[k].fetched_bytes)
                    unstable++;
        }
        mt_plan_free(p);
    }
    TL_OK(bad == 0 && cases == 300, "300 random plans: every op's chunks resident, budget kept at every action (%d bad)",
          bad);
    TL_OK(unstable == 0, "steady steps start in the same state and move the same bytes (%d differ)", unstable);
    TL_OK(tails > 0, "some random cases use a tail back to the start state (%d)", tails);
}

static void test_unlimited_and_fitting(void)
{
    rng_state = 7;
    int bad_unl = 0, bad_fit = 0;
    for (int it = 0; it < 100; it++) {
        sched s;
        sched_random(&s, 2 + (int)rnd(MAXC - 1), 1 + (int)rnd(MAXOPS), 3, false, 0.4);
        s.in.prefetch = (mt_prefetch_mode)rnd(2);
        size_t all = 0, maxact = 0;
        int used = 0;
        bool u[MAXC] = {0};
        for (int i = 0; i < s.nops; i++) {
            maxact = s.ops[i].act_bytes > maxact ? s.ops[i].act_bytes : maxact;
            for (int q = 0; q < s.ops[i].nreads; q++)
                u[s.ops[i].reads[q]] = true;
        }
        for (int c = 0; c < s.nchunks; c++) {
            all += s.chunks[c].bytes;
            used += u[c];
        }
        for (int pass = 0; pass < 2; pass++) {
            s.in.budget = pass == 0 ? 0 : all + maxact;
            mt_plan *p = NULL;
            col_err err = {0};
            step_count cnt[12];
            tier_model st[12];
            mt_plan_step_sim sim[12];
            bool ok = mt_plan_create(sched_input(&s), &p, &err) == COL_OK;
            mt_plan_summary sum = {0};
            if (ok)
                mt_plan_get_summary(p, &sum);
            int ns = sum.warmup_steps + 3;
            ok = ok && replay(p, &s, ns, cnt, st) && mt_plan_simulate(p, ns, sim, &err) == COL_OK;
            int fetches = 0, evictions = 0;
            for (int k = 0; ok && k < ns; k++) {
                fetches += cnt[k].fetches;
                evictions += cnt[k].drops + cnt[k].writebacks;
                if (k >= 1 && (sim[k].bytes[MT_LINK_H2C] || sim[k].bytes[MT_LINK_C2H]))
                    ok = false;
            }
            if (pass == 0 && (!ok || fetches != used || evictions))
                bad_unl++;
            if (pass == 1 && (!ok || fetches != used || evictions))
                bad_fit++;
            mt_plan_free(p);
        }
    }
    TL_OK(bad_unl == 0, "unlimited budget: every used chunk fetched once, nothing evicted, later steps move 0 bytes (%d bad)",
          bad_unl);
    TL_OK(bad_fit == 0, "budget that fits all chunks: the same (%d bad)", bad_fit);
}

static void test_belady_optimal(void)
{
    rng_state = 2024;
    int bad = 0, faults = 0;
    for (int it = 0; it < 400; it++) {
        sched s;
        int nc = 2 + (int)rnd(7), maxref = 1 + (int)rnd(3);
        if (maxref > nc)
            maxref = nc;
        sched_random(&s, nc, 1 + (int)rnd(20), maxref, true, 0.3);
        int k = maxref + (int)rnd((uint32_t)(nc - maxref + 1));
        s.in.budget = (size_t)k * 100;
        s.in.prefetch = MT_PREFETCH_OFF;
        mt_plan *p = NULL;
        col_err err = {0};
        if (mt_plan_create(sched_input(&s), &p, &err) != COL_OK) {
            TL_NOTE("case %d: %s", it, err.msg);
            bad++;
            continue;
        }
        step_count cnt[1];
        tier_model st[1];
        memset(dp_memo, -1, sizeof dp_memo);
        int best = min_fetches(&s, 0, 0, k);
        if (!replay(p, &s, 1, cnt, st) || cnt[0].fetches != best) {
            TL_NOTE("case %d: %d chunks, room for %d: planner %d fetches, minimum %d", it, nc, k, cnt[0].fetches, best);
            bad++;
        }
        int distinct = 0;
        bool u[MAXC] = {0};
        for (int i = 0; i < s.nops; i++)
            for (int q = 0; q < s.ops[i].nreads; q++) {
                distinct += !u[s.ops[i].reads[q]];
                u[s.ops[i].reads[q]] = true;
            }
        faults += best > distinct;
        mt_plan_free(p);
    }
    TL_OK(bad == 0, "Belady: first-step fetches equal the exhaustive minimum on 400 random cases (%d differ)", bad);
    TL_OK(faults > 100, "most of those cases needed evictions (%d of 400)", faults);
}

static bool has_action(const mt_plan *p, long step, int op, mt_plan_act_kind kind, int chunk)
{
    int n;
    const mt_plan_action *a = mt_plan_actions(p, step, op, &n);
    for (int i = 0; i < n; i++)
        if (a[i].kind == kind && a[i].chunk == chunk)
            return true;
    return false;
}

static void test_dirty(void)
{
    /* room for one chunk: op 0 writes A, op 1 reads B, op 2 reads A */
    sched s;
    sched_init(&s, 2, 100);
    int a = 0, b = 1;
    sched_op(&s, &a, 1, &a, 1, 1, 0);
    sched_op(&s, &b, 1, NULL, 0, 1, 0);
    sched_op(&s, &a, 1, NULL, 0, 1, 0);
    mt_plan *p = plan_no_prefetch(&s, 100, "plan");
    TL_OK(has_action(p, 0, 1, MT_PA_WRITEBACK, a) && !has_action(p, 0, 1, MT_PA_DROP, a),
          "the written chunk is written back when evicted");
    TL_OK(has_action(p, 0, 2, MT_PA_DROP, b) && !has_action(p, 0, 2, MT_PA_WRITEBACK, b),
          "the clean chunk is dropped");
    /* step 1 starts with A resident (fetched by op 2, clean): op 0 needs no fetch, op 1 drops?
     * no: op 0 wrote A again, so op 1 writes it back again */
    TL_OK(!has_action(p, 1, 0, MT_PA_FETCH, a) && has_action(p, 1, 1, MT_PA_WRITEBACK, a),
          "the next step: A stays resident into op 0 and is written back after it");
    mt_plan_free(p);
}

/* n ops in a row, each reads its own chunk: compute 1 s per op, transfers of xfer s */
static mt_plan *chain(sched *s, int n, double xfer, mt_prefetch_mode mode, mt_plan_summary *sum)
{
    sched_init(s, n, 1000);
    for (int i = 0; i < n; i++)
        sched_op(s, &i, 1, NULL, 0, 1.0, 0);
    for (int k = 0; k < MT_NLINKS; k++)
        s->in.links.bw[k] = 1000 / xfer;
    s->in.budget = 3000;
    s->in.prefetch = mode;
    mt_plan *p = NULL;
    col_err err = {0};
    if (mt_plan_create(sched_input(s), &p, &err) != COL_OK) {
        TL_NOTE("chain: %s", err.msg);
        return NULL;
    }
    mt_plan_get_summary(p, sum);
    return p;
}

static void test_prefetch(void)
{
    sched s;
    mt_plan_summary sum, off;
    mt_plan *p = chain(&s, 8, 0.25, MT_PREFETCH_AUTO, &sum);
    mt_plan *q = chain(&s, 8, 0.25, MT_PREFETCH_OFF, &off);
    TL_OK(p && q, "chain plans");
    if (!p || !q)
        return;
    TL_OK(sum.stall_s == 0 && fabs(sum.step_s - 8) < 1e-9, "transfer 0.25 s < compute 1 s: no stall (%.3f s, step %.3f s)",
          sum.stall_s, sum.step_s);
    TL_OK(sum.prefetch_s >= 0.25, "the horizon chosen covers a transfer (%.3f s >= 0.25 s)", sum.prefetch_s);
    /* on demand, every fetch stalls its op for a whole transfer; at most 3
     * of the 8 chunks can be resident when a step starts, so >= 5 fetches */
    TL_OK(off.steady_fetches >= 5 && fabs(off.stall_s - off.steady_fetches * 0.25) < 1e-9,
          "without prefetch each of the %d fetches a step stalls 0.25 s (stall %.3f)", off.steady_fetches, off.stall_s);
    step_count cnt[16];
    tier_model st[16];
    TL_OK(replay(p, &s, sum.warmup_steps + 3, cnt, st), "prefetching plan replays within the budget");
    /* every steady fetch is issued before an earlier op than the one that needs it */
    int early = 0, fetches = 0;
    for (int i = 0; i < 8; i++) {
        int n;
        const mt_plan_action *a = mt_plan_actions(p, sum.warmup_steps, i, &n);
        for (int k = 0; k < n; k++)
            if (a[k].kind == MT_PA_FETCH) {
                fetches++;
                early += a[k].for_op != i;
            }
    }
    TL_OK(fetches > 0 && early == fetches, "every steady fetch is a prefetch (%d of %d)", early, fetches);
    mt_plan_free(p);
    mt_plan_free(q);

    /* slower links: stall never shrinks, and is > 0 once a transfer outlasts an op */
    double prev = -1;
    bool mono = true;
    double last = 0;
    for (double x = 0.25; x <= 4.01; x *= 1.5) {
        p = chain(&s, 8, x, MT_PREFETCH_AUTO, &sum);
        if (!p) {
            mono = false;
            break;
        }
        if (sum.stall_s < prev - 1e-9)
            mono = false;
        TL_NOTE("transfer %.3f s: horizon %.3f s, stall %.3f s, step %.3f s", x, sum.prefetch_s, sum.stall_s, sum.step_s);
        prev = sum.stall_s;
        last = sum.stall_s;
        mt_plan_free(p);
    }
    TL_OK(mono && last > 1, "stall grows as bandwidth drops (last %.3f s)", last);
}

static void test_cold_tail(void)
{
    sched s;
    sched_init(&s, 3, 100);
    int r0[] = {0, 1}, r2 = 2;
    sched_op(&s, r0, 2, r0, 1, 1, 0);
    sched_op(&s, &r2, 1, &r2, 1, 1, 0);
    s.in.budget = 300;
    s.in.max_warmup = -1;
    mt_plan *p = NULL;
    col_err err = {0};
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_OK, "plan with cold steps %s", err.msg);
    step_count cnt[3];
    tier_model st[3];
    bool ok = replay(p, &s, 3, cnt, st);
    TL_OK(ok && cnt[1].fetches == 3 && cnt[1].writebacks == 2 && cnt[1].drops == 1,
          "every step fetches 3 chunks, writes back the 2 written, drops 1 (%d %d %d)", cnt[1].fetches, cnt[1].writebacks,
          cnt[1].drops);
    TL_OK(ok && st[1].used == 0 && st[2].used == 0, "and ends with nothing resident");
    mt_plan_free(p);
}

static void test_update_timing(void)
{
    sched s;
    mt_plan_summary before, after;
    mt_plan *p = chain(&s, 8, 0.1, MT_PREFETCH_AUTO, &before);
    if (!p)
        return;
    col_err err = {0};
    /* measured: the links are 10x slower and op 3 takes 2 s */
    double t[8] = {-1, -1, -1, 2.0, -1, -1, -1, -1};
    mt_plan_trace tr = {.op_s = t, .latency_s = -1};
    for (int k = 0; k < MT_NLINKS; k++)
        tr.bw[k] = 1000;
    TL_OK(mt_plan_update_timing(p, &tr, &err) == COL_OK, "update from a trace %s", err.msg);
    mt_plan_get_summary(p, &after);
    TL_OK(before.prefetch_s >= 0.1 && after.prefetch_s >= 1.0, "horizon follows the measured transfer time (%.3f -> %.3f s)",
          before.prefetch_s, after.prefetch_s);
    TL_OK(after.stall_s < 1e-9 && fabs(after.step_s - 9) < 1e-9, "re-planned step: 9 s of compute, no stall (%.3f, %.3f)",
          after.step_s, after.stall_s);
    mt_plan_trace badt = {.latency_s = -1};
    badt.bw[MT_LINK_H2C] = -5;
    TL_OK(mt_plan_update_timing(p, &badt, &err) == COL_EINVAL && strstr(err.msg, "bandwidth"), "negative bandwidth: %s",
          err.msg);
    size_t act[8] = {0, 0, 0, 0, 0, 5000, 0, 0};
    mt_plan_trace big = {.act_bytes = act, .latency_s = -1};
    TL_OK(mt_plan_update_timing(p, &big, &err) == COL_ENOMEM && strstr(err.msg, "6000 bytes"),
          "measured activations too big: %s", err.msg);
    mt_plan_summary still;
    mt_plan_get_summary(p, &still);
    TL_OK(still.prefetch_s == after.prefetch_s && still.min_budget == 1000, "a refused trace leaves the plan as it was");
    mt_plan_free(p);
}

static void test_bad_inputs(void)
{
    sched s;
    sched_init(&s, 3, 100);
    int r[] = {0, 1}, w = 2;
    sched_op(&s, r, 2, NULL, 0, 1, 50);
    sched_op(&s, &w, 1, &w, 1, 1, 120);
    mt_plan *p = NULL;
    col_err err = {0};
    s.in.budget = 240; /* op 0: 200 + 50 = 250; op 1: 100 + 120 = 220 */
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_ENOMEM && strstr(err.msg, "smallest budget that works is 250 bytes") &&
              !p,
          "budget too small: %s", err.msg);
    s.in.budget = 250;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_OK, "the named budget works %s", err.msg);
    mt_plan_free(p);
    p = NULL;
    s.in.budget = 90;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_ENOMEM && strstr(err.msg, "chunk 0 (100 bytes) is larger"),
          "chunk larger than the budget: %s", err.msg);
    s.in.budget = 0;
    sched_input(&s);
    s.in.nops = 0;
    TL_OK(mt_plan_create(&s.in, &p, &err) == COL_EINVAL && strstr(err.msg, "empty"), "empty schedule: %s", err.msg);
    s.reads[0][1] = 3;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "chunk 3 is out of range"),
          "read id out of range: %s", err.msg);
    s.reads[0][1] = 1;
    s.writes[1][0] = -1;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "writes[0] = chunk -1"),
          "write id out of range: %s", err.msg);
    s.writes[1][0] = 2;
    s.ops[0].nreads = -1;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL, "negative count: %s", err.msg);
    s.ops[0].nreads = 2;
    s.chunks[1].bytes = 0;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "0 bytes"), "empty chunk: %s",
          err.msg);
    s.chunks[1].bytes = 100;
    s.chunks[1].home = MT_TIER_GPU;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "home"), "bad home tier: %s", err.msg);
    s.chunks[1].home = MT_TIER_HOST;
    s.ops[1].time_s = NAN;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "op 1: time"), "NaN time: %s",
          err.msg);
    s.ops[1].time_s = -1;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL, "negative time: %s", err.msg);
    s.ops[1].time_s = 1;
    s.in.links.bw[MT_LINK_N2H] = 0;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "nvme->host bandwidth"),
          "zero bandwidth: %s", err.msg);
    s.in.links.bw[MT_LINK_N2H] = INFINITY;
    s.in.links.latency_s = -1;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "latency"), "negative latency: %s",
          err.msg);
    s.in.links.latency_s = 0;
    s.in.prefetch = MT_PREFETCH_FIXED;
    s.in.prefetch_s = -2;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_EINVAL && strstr(err.msg, "horizon"), "negative horizon: %s",
          err.msg);
    s.in.prefetch_s = 1;
    TL_OK(mt_plan_create(sched_input(&s), &p, &err) == COL_OK, "fixed horizon, infinite nvme link: ok %s", err.msg);
    int n;
    TL_OK(mt_plan_actions(p, 0, 2, &n) == NULL && n == 0 && mt_plan_actions(p, -1, 0, &n) == NULL,
          "actions for an op out of range: none");
    mt_plan_step_sim sim;
    TL_OK(mt_plan_simulate(p, 0, &sim, &err) == COL_EINVAL, "simulate 0 steps: %s", err.msg);
    mt_plan_free(p);
    TL_OK(mt_plan_create(NULL, &p, &err) == COL_EINVAL, "NULL input");
}

/* docs/MEMTIER_PLANNER.md's worked example, derived there by hand: chunks A
 * B (parameters of two layers), X Y (their gradients), room for 2, demand
 * fetches, transfers of 0.5 s, ops of 1 s */
static void test_worked_example(void)
{
    sched s;
    sched_init(&s, 4, 1);
    enum { A, B, X, Y };
    int r0[] = {A}, r1[] = {B}, r2[] = {B, Y}, r3[] = {A, X}, r4[] = {A, X}, r5[] = {B, Y};
    int w2[] = {Y}, w3[] = {X}, w4[] = {A}, w5[] = {B};
    sched_op(&s, r0, 1, NULL, 0, 1, 0);
    sched_op(&s, r1, 1, NULL, 0, 1, 0);
    sched_op(&s, r2, 1, w2, 1, 1, 0); /* Y is written only: it must be resident all the same */
    sched_op(&s, r3, 1, w3, 1, 1, 0);
    sched_op(&s, r4, 2, w4, 1, 1, 0);
    sched_op(&s, r5, 2, w5, 1, 1, 0);
    for (int k = 0; k < MT_NLINKS; k++)
        s.in.links.bw[k] = 2;
    mt_plan *p = plan_no_prefetch(&s, 2, "worked example plans");
    if (!p)
        return;
    static const char *want[6] = {"drop Y, fetch A, wait A", "", "drop A, fetch Y, wait Y",
                                  "writeback B, writeback Y, fetch A, fetch X, wait A, wait X", "",
                                  "writeback X, writeback A, fetch B, fetch Y, wait B, wait Y"};
    const char *names = "ABXY";
    bool ok = true;
    for (int i = 0; i < 6; i++) {
        char got[256] = "";
        int n;
        const mt_plan_action *a = mt_plan_actions(p, 1, i, &n);
        for (int k = 0; k < n; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s %c", k ? ", " : "", mt_plan_act_name(a[k].kind),
                     names[a[k].chunk]);
        if (strcmp(got, want[i])) {
            TL_NOTE("op %d: got \"%s\", want \"%s\"", i, got, want[i]);
            ok = false;
        }
    }
    TL_OK(ok, "steady actions match the hand-made table");
    mt_plan_summary sum;
    mt_plan_get_summary(p, &sum);
    TL_OK(sum.warmup_steps == 1 && fabs(sum.stall_s - 5) < 1e-9 && fabs(sum.step_s - 11) < 1e-9,
          "one warm-up step; steady step 11 s with 5 s of stall (%d, %.3f, %.3f)", sum.warmup_steps, sum.step_s,
          sum.stall_s);
    mt_plan_free(p);
}

int main(void)
{
    test_worked_example();
    test_timing_by_hand();
    test_random_replay();
    test_unlimited_and_fitting();
    test_belady_optimal();
    test_dirty();
    test_prefetch();
    test_cold_tail();
    test_update_timing();
    test_bad_inputs();
    return tl_done();
}
