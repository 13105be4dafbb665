/* mt_plan_sim.c - the planner's timing model: the time of one hop, and the
 * simulation of planned steps with one compute stream, each link a FIFO
 * moving one transfer at a time (see mt_plan.h, mt_plan_simulate). The
 * planner (mt_plan.c) uses both; nothing here calls the planner. */
#include "mt_plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double mt_plan_hop_s(const mt_plan *p, mt_link l, size_t bytes)
{
    return p->links.latency_s + (double)bytes / p->links.bw[l];
}

typedef struct {
    double t, link_free[MT_NLINKS], space_free;
    double *fetch_done, *home_valid;
} sim_state;

static double run_actions(const mt_plan *p, sim_state *z, const mt_plan_action *a, int n, mt_plan_step_sim *o)
{
    double issue = z->t, ready = z->t;
    for (int i = 0; i < n; i++) {
        int c = a[i].chunk;
        size_t b = p->chunks[c].bytes;
        bool nvme = p->chunks[c].home == MT_TIER_NVME;
        double s, end;
        switch (a[i].kind) {
        case MT_PA_DROP:
            o->drops++;
            break;
        case MT_PA_WRITEBACK:
        case MT_PA_FLUSH:
            s = fmax(fmax(issue, z->link_free[MT_LINK_C2H]), z->fetch_done[c]);
            end = s + mt_plan_hop_s(p, MT_LINK_C2H, b);
            z->link_free[MT_LINK_C2H] = end;
            o->bytes[MT_LINK_C2H] += b;
            if (a[i].kind == MT_PA_WRITEBACK) {
                z->space_free = fmax(z->space_free, end);
                o->writebacks++;
            } else {
                ready = fmax(ready, end); /* the chunk may be written again after the tail */
                o->flushes++;
            }
            if (nvme) {
                s = fmax(end, z->link_free[MT_LINK_H2N]);
                end = s + mt_plan_hop_s(p, MT_LINK_H2N, b);
                z->link_free[MT_LINK_H2N] = end;
                o->bytes[MT_LINK_H2N] += b;
            }
            z->home_valid[c] = end;
            break;
        case MT_PA_FETCH:
            s = fmax(issue, z->home_valid[c]);
            if (nvme) {
                s = fmax(s, z->link_free[MT_LINK_N2H]);
                end = s + mt_plan_hop_s(p, MT_LINK_N2H, b);
                z->link_free[MT_LINK_N2H] = end;
                o->bytes[MT_LINK_N2H] += b;
                s = end;
            }
            s = fmax(fmax(s, z->link_free[MT_LINK_H2C]), z->space_free);
            end = s + mt_plan_hop_s(p, MT_LINK_H2C, b);
            z->link_free[MT_LINK_H2C] = end;
            o->bytes[MT_LINK_H2C] += b;
            z->fetch_done[c] = end;
            o->fetches++;
            break;
        case MT_PA_WAIT:
            ready = fmax(ready, z->fetch_done[c]);
            break;
        }
    }
    return ready;
}

col_status mt_plan_sim_run(const mt_plan *p, const plan_result *r, int nsteps, mt_plan_step_sim *out, col_err *e)
{
    sim_state z = {0};
    size_t m = (size_t)p->nchunks + 1;
    z.fetch_done = calloc(m, sizeof *z.fetch_done);
    z.home_valid = calloc(m, sizeof *z.home_valid);
    if (!z.fetch_done || !z.home_valid) {
        free(z.fetch_done);
        free(z.home_valid);
        return col_err_set(e, COL_ENOMEM, "memtier plan: out of memory");
    }
    for (int k = 0; k < nsteps; k++) {
        mt_plan_step_sim *o = &out[k];
        memset(o, 0, sizeof *o);
        const step_plan *sp = step_of(p, r, k);
        double t0 = z.t;
        for (int i = 0; i <= p->nops; i++) {
            double ready = run_actions(p, &z, sp->a + sp->off[i], sp->off[i + 1] - sp->off[i], o);
            o->stall_s += ready - z.t;
            z.t = ready;
            if (i < p->nops) {
                z.t += p->time_s[i];
                o->compute_s += p->time_s[i];
            }
        }
        o->step_s = z.t - t0;
    }
    free(z.fetch_done);
    free(z.home_valid);
    return COL_OK;
}

col_status mt_plan_simulate(const mt_plan *p, int nsteps, mt_plan_step_sim *steps, col_err *e)
{
    if (!p || !steps || nsteps < 1)
        return col_err_set(e, COL_EINVAL, "mt_plan_simulate: need a plan and nsteps >= 1 (got %d)", nsteps);
    plan_result r = {p->nwarm, p->steps};
    return mt_plan_sim_run(p, &r, nsteps, steps, e);
}
