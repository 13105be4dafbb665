/* test_stats_comm.c - apps/stats_comm (a rank of a parallel run in the
 * published statistics) under mpirun (tests/test_comm.sh, 3 processes).
 *
 * Every rank joins the run and publishes; every rank then reads every
 * rank's segment back (the pids gathered with plain MPI) and checks the run
 * id is rank 0's, the same everywhere, and names rank 0's pid; the ranks are
 * the MPI ranks; the collectives fields are the sums of the communicators'
 * own counters (col_comm_get_stats of each, added here). Rank 0 prints TAP.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "stats_comm.h"
#include "testlib.h"

static int g_rank, g_size, g_failed;

static void check(bool ok, const char *detail, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *detail, const char *fmt, ...)
{
    int mine = ok, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char name[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (!all) {
        enum { D = 400 };
        char d[D] = "";
        if (!ok)
            snprintf(d, sizeof d, "%s", detail && *detail ? detail : "(no detail)");
        char *alld = g_rank == 0 ? calloc((size_t)g_size, D) : NULL;
        MPI_Gather(d, D, MPI_CHAR, alld, D, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (g_rank == 0) {
            for (int r = 0; r < g_size; r++)
                if (alld[(size_t)r * D])
                    printf("# rank %d: %s\n", r, alld + (size_t)r * D);
            free(alld);
        }
        g_failed++;
    }
    if (g_rank == 0)
        TL_OK(all, "%s", name);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    col_comm *world = NULL, *half = NULL;
    col_err e = {0};
    if (col_comm_init_mpi(&world, &e) != COL_OK || col_comm_split(world, g_rank % 2, g_rank, &half, &e) != COL_OK) {
        printf("Bail out! rank %d: %s\n", g_rank, e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    mt_stats_data *d = calloc(1, sizeof *d);
    mt_stats_snapshot *s = calloc(1, sizeof *s);
    char detail[1200] = "";

    /* ---- the run id: rank 0's, on every rank ---- */
    col_status st = app_stats_join_run(d, world, &e);
    char ids[64 * 64] = "";
    int pids[64] = {0}, me = (int)getpid();
    MPI_Allgather(d->run_id, MT_STATS_NAME_MAX, MPI_CHAR, ids, MT_STATS_NAME_MAX, MPI_CHAR, MPI_COMM_WORLD);
    MPI_Allgather(&me, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
    char pid0[32];
    snprintf(pid0, sizeof pid0, "-%d-", pids[0]);
    bool ok = st == COL_OK && d->run_id[0] && strstr(d->run_id, pid0);
    for (int r = 0; r < g_size && ok; r++)
        ok = !strcmp(ids + r * MT_STATS_NAME_MAX, d->run_id);
    snprintf(detail, sizeof detail, "%s; run id '%s', rank 0's pid %d", st == COL_OK ? "ok" : e.msg, d->run_id,
             pids[0]);
    check(ok, detail, "app_stats_join_run: one run id on every rank, naming rank 0's pid");
    ok = d->world_rank == g_rank && d->world_size == g_size && mt_stats_is_rank(d) == (g_size > 1);
    snprintf(detail, sizeof detail, "rank %d of %d", d->world_rank, d->world_size);
    check(ok, detail, "app_stats_join_run: the MPI rank and size");

    /* ---- traffic: the sum of the communicators' own counters ---- */
    float x[500] = {0}, y[500];
    ok = col_comm_all_reduce(world, x, y, 500, COL_F32, COL_RED_SUM, &e) == COL_OK &&
         col_comm_all_gather(half, x, y, 100, COL_F32, &e) == COL_OK && col_comm_barrier(half, &e) == COL_OK;
    col_comm_stats a, b;
    col_comm_get_stats(world, &a);
    col_comm_get_stats(half, &b);
    const col_comm *comms[3] = {world, NULL, half};
    app_stats_set_comm(d, comms, 3);
    ok = ok && d->comm_sent == a.bytes_sent + b.bytes_sent && d->comm_recv == a.bytes_recv + b.bytes_recv &&
         d->comm_wait == a.wait_s + b.wait_s && d->comm_ops == a.ops + b.ops && d->comm_ops == 4 &&
         (g_size == 1 || d->comm_sent > 0);
    snprintf(detail, sizeof detail, "sent %llu recv %llu ops %llu; world %llu %llu %llu, half %llu %llu %llu",
             (unsigned long long)d->comm_sent, (unsigned long long)d->comm_recv, (unsigned long long)d->comm_ops,
             (unsigned long long)a.bytes_sent, (unsigned long long)a.bytes_recv, (unsigned long long)a.ops,
             (unsigned long long)b.bytes_sent, (unsigned long long)b.bytes_recv, (unsigned long long)b.ops);
    check(ok, detail, "app_stats_set_comm: the sums of the communicators' counters (NULL skipped): broadcast, "
                      "all-reduce, all-gather, barrier");

    /* a rank without statistics still takes part in the broadcast */
    col_comm_stats before;
    col_comm_get_stats(world, &before);
    st = app_stats_join_run(NULL, world, &e);
    app_stats_set_comm(NULL, comms, 3);
    col_comm_get_stats(world, &a);
    snprintf(detail, sizeof detail, "%s; ops %llu -> %llu", st == COL_OK ? "ok" : e.msg,
             (unsigned long long)before.ops, (unsigned long long)a.ops);
    check(st == COL_OK && a.ops == before.ops + 1, detail, "app_stats_join_run without statistics (NULL): still "
                                                           "the broadcast, on every rank");

    /* ---- published: every rank reads every rank's segment ---- */
    mt_stats_pub *pub = NULL;
    st = mt_stats_create("test-stats-comm", &pub, &e);
    if (st == COL_OK)
        mt_stats_publish(pub, d);
    MPI_Barrier(MPI_COMM_WORLD);
    ok = st == COL_OK;
    snprintf(detail, sizeof detail, "%s", st == COL_OK ? "" : e.msg);
    for (int r = 0; r < g_size && ok; r++) {
        st = mt_stats_read(pids[r], s, &e);
        ok = st == COL_OK && !strcmp(s->d.run_id, d->run_id) && s->d.world_rank == r && s->d.world_size == g_size;
        if (!ok)
            snprintf(detail, sizeof detail, "rank %d (pid %d): %s, run id '%s', rank %d of %d", r, pids[r],
                     st == COL_OK ? "read" : e.msg, s->d.run_id, s->d.world_rank, s->d.world_size);
    }
    check(ok, detail, "every rank's segment holds the run id and its own rank and size");
    MPI_Barrier(MPI_COMM_WORLD);
    mt_stats_destroy(pub);
    free(d), free(s);
    col_comm_free(half);
    col_comm_free(world);
    MPI_Finalize();
    if (g_rank == 0)
        return tl_done();
    return g_failed ? 1 : 0;
}
