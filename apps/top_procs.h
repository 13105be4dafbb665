/* top_procs.h - the list of processes colossal-top shows: the ranks of a
 * parallel run kept together, the order the user picked (s, F6), the filter
 * (/), and what the system says of each process (owner, CPU time, resident
 * memory, command line: /proc/PID). */
#ifndef COL_APPS_TOP_PROCS_H
#define COL_APPS_TOP_PROCS_H

#include <stdbool.h>

#include "top_view.h"

/* Orders procs for showing: the ranks of a parallel run (mt_stats_is_rank,
 * the same run id) together, by rank, where the run's lowest pid would be;
 * every other process keeps its place (the list comes sorted by pid). */
void top_procs_group(top_proc *procs, int n);
/* Whether a and b are ranks of the same parallel run. */
bool top_same_run(const top_proc *a, const top_proc *b);

/* Orders procs (grouped by top_procs_group) by key, a run's ranks staying
 * together in rank order: TOP_SORT_PID keeps the order given; MEMORY: the
 * most bytes in the compute and host tiers first (a run: its ranks' sum);
 * RATE: the most steps per second first (of the last step; a run: its
 * slowest rank, the run's pace); NAME: by program, then run name, then pid.
 * Processes that could not be read go last. Stable. */
void top_procs_sort(top_proc *procs, int n, top_sort key);

/* Keeps the processes whose program, run name or command line holds filter
 * (case-insensitive; "" keeps all), in order; returns how many are left. */
int top_procs_filter(top_proc *procs, int n, const char *filter);

/* Steps per second of p's last step (from its step-time split); 0 when not known. */
double top_proc_step_rate(const top_proc *p);

/* A key while the filter prompt is open (ui->filtering): printable bytes are added to ui->filter, Backspace takes
 * the last character off, Ctrl-U clears it, Enter closes the prompt keeping it, Esc closes it clearing it. */
void top_filter_key(top_ui *ui, int key);

/* "pid", "memory", "step rate", "name" */
const char *top_sort_name(top_sort key);
/* The key named s (those names, or "rate"); false when there is none. */
bool top_sort_parse(const char *s, top_sort *key);

/* Fills p's user, cmdline, cpu_ticks, cpu_at and rss_bytes from /proc/PID,
 * and cpu_percent from prev (the same process at the last refresh; may be
 * NULL). Fields that cannot be read stay empty (a process of another user
 * may hide some). */
void top_proc_sys(top_proc *p, const top_proc *prev);

#endif
