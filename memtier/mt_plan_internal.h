/* mt_plan_internal.h - what mt_plan.c and mt_plan_sim.c (the timing model)
 * share; not part of the planner's API. The planner calls the timing model,
 * never the other way round. */
#ifndef MT_PLAN_INTERNAL_H
#define MT_PLAN_INTERNAL_H

#include "mt_plan.h"

/* the actions of one planned step: list i (0..nops-1) before op i, list
 * nops after the last op (the tail) */
typedef struct {
    mt_plan_action *a;
    int n, cap;
    int *off; /* nops + 2 */
} step_plan;

struct mt_plan {
    int nchunks, nops;
    mt_plan_chunk *chunks;
    int *need_off, *need; /* per op: the distinct chunks it reads or writes */
    int *wr_off, *wr;     /* per op: the distinct chunks it writes */
    int *use_off, *use;   /* per chunk: the ops that need it, ascending */
    double *time_s;
    size_t *act;
    double step_compute_s;
    size_t budget, min_budget;
    mt_plan_links links;
    mt_prefetch_mode mode;
    double prefetch_fixed;
    int max_warmup;
    /* the plan */
    double horizon;
    int nwarm;         /* steps[0..nwarm-1] warmup, steps[nwarm] steady */
    step_plan *steps;
    mt_plan_summary sum;
};

typedef struct {
    int nwarm;
    step_plan *steps;
} plan_result;

/* the plan of a step: its warm-up plan, or the steady one */
static inline const step_plan *step_of(const mt_plan *p, const plan_result *r, long step)
{
    (void)p;
    return &r->steps[step < r->nwarm ? step : r->nwarm];
}

/* ---- the timing model (mt_plan_sim.c) ---- */
/* latency + bytes / bandwidth of one hop (0 for an infinitely fast link) */
double mt_plan_hop_s(const mt_plan *p, mt_link l, size_t bytes);
/* the timing model over steps 0 .. nsteps-1 of a planning result */
col_status mt_plan_sim_run(const mt_plan *p, const plan_result *r, int nsteps, mt_plan_step_sim *out, col_err *e);

#endif
