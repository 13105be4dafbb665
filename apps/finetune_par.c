/* finetune_par.c - colossal-finetune over several processes: the run's
 * processes come from the user's launcher (mpirun, srun), never from us. A
 * process started alone never touches MPI. The layout: D data parallel
 * groups (each a copy of the model splitting a step's rows, ZeRO over them)
 * of P pipeline stages, world rank r = d * P + p. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finetune.h"
#include "procsetup.h"
#include "lm_pipeline.h"

#ifdef COL_WITH_COMM
#include "comm.h"
#include "stats_comm.h"

/* whether a launcher started this process as part of a run (its environment says so) */
static int bad_layout(const ft_par *p, const char *msg)
{
    if (p->rank == 0)
        fprintf(stderr, "colossal-finetune: %s\n", msg);
    return 2;
}

int ft_par_open(ft_opts *o, ft_par *p)
{
    memset(p, 0, sizeof *p);
    p->size = p->dp_size = p->pp_size = 1;
    if (!col_proc_launched())
        return 0;
    col_err err = {0};
    if (col_comm_init_mpi(&p->world, &err) != COL_OK) {
        fprintf(stderr, "colossal-finetune: cannot join the parallel run: %s\n", err.msg);
        return 1;
    }
    p->rank = col_comm_rank(p->world);
    p->size = col_comm_size(p->world);
    o->device.local = col_comm_local_rank(p->world); /* one GPU per process on a host */
    if (p->rank != 0) { /* process 0 speaks for the run (made quiet again once --resume has replayed options) */
        o->quiet = true;
        o->json = false;
    }
    return 0;
}

/* the layout from the final options: D x P processes, the groups split */
static int layout(ft_opts *o, ft_par *p)
{
    int pp = o->pp ? o->pp : 1, dp = o->dp ? o->dp : p->size / pp;
    char msg[300];
    if (!p->world) {
        if (dp * pp > 1) {
            fprintf(stderr, "colossal-finetune: --dp %d --pp %d need %d processes: start them with mpirun -np %d "
                    "(or srun)\n", dp, pp, dp * pp, dp * pp);
            return 2;
        }
        return 0;
    }
    if (dp * pp != p->size) {
        snprintf(msg, sizeof msg, "--dp %d x --pp %d = %d processes, but the run has %d: make D x P the process "
                 "count", dp, pp, dp * pp, p->size);
        return bad_layout(p, msg);
    }
    if (o->tui) {
        snprintf(msg, sizeof msg, "--tui shows one process: watch a parallel run with colossal-top");
        return bad_layout(p, msg);
    }
    col_err err = {0};
    if (col_comm_set_timeout(p->world, o->comm_timeout, &err) != COL_OK) {
        fprintf(stderr, "colossal-finetune: --comm-timeout: %s\n", err.msg);
        return 2;
    }
    p->dp_size = dp;
    p->dp_rank = p->rank / pp;
    p->pp_size = pp;
    /* rank r = d * P + p: the data parallel group of stage p, the pipeline of d */
    if ((p->size > 1 && col_comm_split(p->world, p->rank % pp, p->rank / pp, &p->dp, &err) != COL_OK) ||
        (pp > 1 && col_comm_split(p->world, p->rank / pp, p->rank % pp, &p->pipe, &err) != COL_OK)) {
        fprintf(stderr, "colossal-finetune: process %d: %s\n", p->rank, err.msg);
        return 1;
    }
    return 0;
}

int ft_par_check_layers(const ft_opts *o, const ft_par *p, int n_layer)
{
    col_err err = {0};
    int v = o->virtual_stages > 1 ? o->virtual_stages : 1;
    if (p->pp_size == 1 && v > 1)
        return bad_layout(p, "--virtual-stages needs a pipeline (--pp 2 or more)");
    if (p->pp_size > 1 && col_pp_check(n_layer, p->pp_size, v, o->micro_batches, &err) != COL_OK) {
        char msg[COL_ERR_MSG_MAX + 16];
        snprintf(msg, sizeof msg, "--pp %d: %s", p->pp_size, err.msg);
        return bad_layout(p, msg);
    }
    return 0;
}

int ft_par_check(ft_opts *o, ft_par *p)
{
    int rc = layout(o, p);
    if (rc != 0)
        return rc;
    char msg[300];
    if (p->dp_size > 1 && o->batch % p->dp_size) {
        snprintf(msg, sizeof msg, "--batch %d cannot be split between %d data parallel groups: make it a multiple "
                 "of %d", o->batch, p->dp_size, p->dp_size);
        return bad_layout(p, msg);
    }
    if (!o->micro_batches)
        o->micro_batches = p->pp_size;
    int rows = o->batch / p->dp_size;
    if (p->pp_size > 1 && rows % o->micro_batches) {
        snprintf(msg, sizeof msg, "--micro-batches %d cannot split the %d rows of each pipeline: make it divide "
                 "--batch / --dp", o->micro_batches, rows);
        return bad_layout(p, msg);
    }
    if (p->pp_size > 1 && o->grad_accum > 1) {
        snprintf(msg, sizeof msg, "--grad-accum with --pp: the pipeline accumulates its micro-batches itself "
                 "(raise --batch and --micro-batches instead)");
        return bad_layout(p, msg);
    }
    if (p->pp_size > 1 && o->eval_only) {
        snprintf(msg, sizeof msg, "--eval-only with --pp: a pipelined run does not evaluate yet (run it without "
                 "--pp)");
        return bad_layout(p, msg);
    }
    if (p->rank != 0) { /* process 0 speaks for the run */
        o->quiet = true;
        o->json = false;
    }
    return 0;
}

void ft_par_close(ft_par *p)
{
    col_comm_free(p->pipe);
    p->pipe = NULL;
    col_comm_free(p->dp);
    col_comm_free(p->world);
    p->dp = p->world = NULL;
}

void ft_par_set_timeout(const ft_par *p, double seconds)
{
    struct col_comm *all[] = {p->world, p->dp, p->pipe};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            col_comm_set_timeout(all[i], seconds, NULL);
}

bool ft_par_all_ok(const ft_par *p, bool ok, col_err *why)
{
    if (!p->world)
        return ok;
    int mine = ok, all = 0;
    col_err err = {0};
    if (col_comm_all_reduce(p->world, &mine, &all, 1, COL_I32, COL_RED_MIN, &err) != COL_OK) {
        if (why && ok) /* the others cannot be reached: that is the news */
            col_err_copy(why, &err);
        return false;
    }
    if (why && ok && !all)
        col_err_set(why, COL_EIO, "another process failed (process 0 says why)");
    return all;
}

void ft_par_stats_join(const ft_par *p, mt_stats_data *d)
{
    col_err err = {0};
    if (p->world && app_stats_join_run(d, p->world, &err) != COL_OK && p->rank == 0)
        fprintf(stderr, "colossal-finetune: note: colossal-top will not group the run's processes (%s)\n", err.msg);
}

void ft_par_stats_step(const ft_par *p, mt_stats_data *d)
{
    if (!p->world)
        return;
    const col_comm *comms[] = {p->world, p->dp, p->pipe};
    app_stats_set_comm(d, comms, 3);
}

#else /* a build without MPI: every run is one process */

int ft_par_open(ft_opts *o, ft_par *p)
{
    (void)o;
    memset(p, 0, sizeof *p);
    p->size = p->dp_size = p->pp_size = 1;
    return 0;
}

void ft_par_close(ft_par *p) { (void)p; }
void ft_par_set_timeout(const ft_par *p, double seconds) { (void)p, (void)seconds; }
void ft_par_stats_join(const ft_par *p, mt_stats_data *d) { (void)p, (void)d; }
void ft_par_stats_step(const ft_par *p, mt_stats_data *d) { (void)p, (void)d; }
int ft_par_check(ft_opts *o, ft_par *p)
{
    (void)p;
    if (o->dp > 1 || o->pp > 1) {
        fprintf(stderr, "colossal-finetune: --dp/--pp need MPI, and this build has none: install OpenMPI "
                "(libopenmpi-dev) and rebuild\n");
        return 2;
    }
    return 0;
}
int ft_par_check_layers(const ft_opts *o, const ft_par *p, int n_layer) { return (void)o, (void)p, (void)n_layer, 0; }
bool ft_par_all_ok(const ft_par *p, bool ok, col_err *why) { return (void)p, (void)why, ok; }
#endif

void ft_par_share(const ft_par *p, int batch, int seq, int na, int32_t *ids, int32_t *tg)
{
    if (p->dp_size <= 1)
        return;
    size_t rows = (size_t)(batch / p->dp_size), n = rows * (size_t)seq;
    for (int k = 0; k < na; k++) {
        size_t from = ((size_t)k * (size_t)batch + (size_t)p->dp_rank * rows) * (size_t)seq;
        memmove(ids + (size_t)k * n, ids + from, sizeof *ids * n);
        memmove(tg + (size_t)k * n, tg + from, sizeof *tg * n);
    }
}
