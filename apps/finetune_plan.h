/* finetune_plan.h - colossal-finetune's --parallel auto and --plan-only (finetune_plan.c): the planner
 * (lm_parplan.h) over the run's processes with the rates of plan_probe.h. */
#ifndef COL_APPS_FINETUNE_PLAN_H
#define COL_APPS_FINETUNE_PLAN_H

#include "finetune.h"

/* What ft_plan returns after --plan-only printed the ranking: the run ends with exit code 0. */
enum { FT_PLAN_DONE = -1 };

/* Called once the run's processes are known (ft_par_open) and before the layout is split (ft_par_check), on
 * every process, when o->parallel_auto or o->plan_only: opens MODEL's configuration, probes this machine (cached),
 * ranks the layouts of the run's processes and sets o->dp, tp, tp_mode, tp_depth, pp, sp, sp_mode, zero and
 * micro_batches to the best that fits (process 0 says which and why: stderr, or a JSON line with --json).
 * Returns 0 to go on, FT_PLAN_DONE after --plan-only's ranking, or an exit code after one line (2: --parallel
 * auto beside an explicit layout, no legal layout, none within the budgets). A process alone may plan
 * --plan-only for another process count: COLOSSAL_PLAN_PROCS=N. */
int ft_plan(ft_opts *o, ft_par *p);

#endif
