/* plan_probe.h - the rates the layout planner needs (lm_parplan.h's col_plan_rates), measured on this machine:
 * the matmul rate of one process (a few matmuls of the model's sizes through the CPU backend, every process of
 * the run timing its own at once, their mean), the memory streaming rate (memcpy), and under a launcher the link
 * (timed all-reduces of 4 bytes and of 4 MiB over the run's processes: latency per message and bandwidth, by the
 * ring model the planner predicts with). A run of one process measures no link: it assumes a quarter of the
 * memory rate and 20 us per message (said in the note).
 *
 * The results are cached in $XDG_CACHE_HOME/colossal/probe-HOST-NPROC.json (else ~/.cache/colossal/...), one
 * matmul rate per shape, written atomically by process 0; a cache that does not parse, or holds a number out of
 * range or another thread count, is ignored and rewritten. With every number cached the probe is one read and a
 * broadcast; measuring takes well under 3 seconds. */
#ifndef COL_APPS_PLAN_PROBE_H
#define COL_APPS_PLAN_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "lm_parplan.h"

struct col_comm;

typedef struct {
    col_plan_rates rates;
    bool link_measured;  /* false: one process (the link assumed) */
    bool from_cache;     /* every number came from the cache */
    double seconds;      /* what the probe took */
    char cache[4096];    /* the cache file ("" when there is no cache directory) */
    char note[256];      /* a line on what was assumed or could not be cached, or "" */
} plan_probe;

/* Measures (or reads from the cache) the rates for matmuls of [m, k] x [k, n]. world: the run's communicator
 * (collective over it: every process calls it with the same sizes), NULL for a process alone. The results are
 * the same on every process (process 0's cache or the means). */
col_status plan_probe_run(struct col_comm *world, int m, int k, int n, plan_probe *out, col_err *err);

/* The cache file's name for this host and process count (false when neither XDG_CACHE_HOME nor HOME is set). */
bool plan_probe_cache_path(int nproc, char *buf, size_t size);

#endif
