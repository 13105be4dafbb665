/* stats_comm.h - a rank of a parallel run in the statistics colossal-top
 * shows (mt_stats.h, issue 14): which run it belongs to, its rank, and the
 * traffic of its communicators (col_comm_get_stats).
 *
 * A program that trains in parallel calls, besides what it publishes alone:
 *     once, on every rank, after col_comm_init_mpi:
 *         app_stats_join_run(stats_data, world, &err);        (collective)
 *     each step, before mt_stats_publish:
 *         const col_comm *comms[] = {world, dp_group, pp_group};
 *         app_stats_set_comm(stats_data, comms, 3);
 * colossal-top then shows the ranks of the run together, one line each. */
#ifndef COL_APPS_STATS_COMM_H
#define COL_APPS_STATS_COMM_H

#include "comm.h"
#include "mt_stats.h"

/* Collective over world (every rank calls it): rank 0 names the run
 * "<host>-<pid>-<epoch seconds>" and broadcasts the name (64 bytes, counted
 * in world's traffic); every rank sets it, its rank in world and world's
 * size in d (mt_stats_set_rank). A rank without statistics (its publisher
 * could not be made) must still call it, with d NULL: the broadcast needs
 * every rank. On error d is unchanged and err says why (a broken
 * communicator: the run cannot go on anyway). */
col_status app_stats_join_run(mt_stats_data *d, col_comm *world, col_err *err);

/* Sets d's collectives fields (mt_stats_set_comm) to the sum of the
 * counters of the n communicators in comms (NULL entries skipped; list each
 * communicator once: each counts only its own operations, so a split and
 * its parent add up without counting anything twice). d NULL: nothing. */
void app_stats_set_comm(mt_stats_data *d, const col_comm *const *comms, int n);

#endif
