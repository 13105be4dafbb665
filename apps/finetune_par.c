/* finetune_par.c - colossal-finetune over several processes: the run's
 * processes come from the user's launcher (mpirun, srun), never from us. A
 * process started alone never touches MPI. The layout: D data parallel
 * groups (each a copy of the model splitting a step's rows, ZeRO over them)
 * of P pipeline stages, each stage split over M = tp x sp model-parallel
 * processes: world rank r = (d * P + p) * M + q. */
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
    p->size = p->dp_size = p->pp_size = p->tp_size = p->sp_size = 1;
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

/* the layout from the final options: D x P x TP x SP processes, the groups split */
static int layout(ft_opts *o, ft_par *p)
{
    int pp = o->pp ? o->pp : 1, tp = o->tp ? o->tp : 1, sp = o->sp ? o->sp : 1, m = tp * sp;
    int dp = o->dp ? o->dp : p->size / (pp * m) > 0 ? p->size / (pp * m) : 1;
    char msg[300];
    if (o->tp_depth > 1 && (tp == 1 || o->tp_mode != COL_TP_25D))
        return bad_layout(p, "--tp-depth is the depth of 2.5D tensor parallelism: give it with --tp N --tp-mode 2.5d");
    if (o->tp_seq_split && (tp == 1 || o->tp_mode != COL_TP_1D))
        return bad_layout(p, "--tp-seq-split splits 1D tensor parallelism's norms by positions: give it with --tp N "
                             "(--tp-mode 1d)");
    if (tp == 1 && o->tp_mode != COL_TP_1D)
        return bad_layout(p, "--tp-mode needs --tp N (the tensor-parallel processes)");
    if (sp == 1 && o->sp_mode != COL_SP_RING)
        return bad_layout(p, "--sp-mode needs --sp N (the sequence-parallel processes)");
    if (!p->world) {
        if (dp * pp * m > 1) {
            fprintf(stderr, "colossal-finetune: --dp %d --pp %d --tp %d --sp %d need %d processes: start them with "
                    "mpirun -np %d (or srun)\n", dp, pp, tp, sp, dp * pp * m, dp * pp * m);
            return 2;
        }
        return 0;
    }
    if (dp < 1 || dp * pp * m != p->size) {
        snprintf(msg, sizeof msg, "--dp %d x --pp %d x --tp %d x --sp %d = %d processes, but the run has %d: make "
                 "their product the process count", dp, pp, tp, sp, dp * pp * m, p->size);
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
    p->dp_rank = p->rank / (pp * m);
    p->pp_size = pp;
    p->tp_size = tp;
    p->sp_size = sp;
    /* rank r = (d * P + p) * M + q (M = tp x sp): the data parallel group of (p, q), the pipeline of (d, q), the
     * model-parallel group of (d, p) */
    int d = p->rank / (pp * m), s = (p->rank / m) % pp, q = p->rank % m;
    if ((dp > 1 && col_comm_split(p->world, s * m + q, d, &p->dp, &err) != COL_OK) ||
        (pp > 1 && col_comm_split(p->world, d * m + q, s, &p->pipe, &err) != COL_OK) ||
        (m > 1 && col_comm_split(p->world, d * pp + s, q, &p->mp, &err) != COL_OK)) {
        fprintf(stderr, "colossal-finetune: process %d: %s\n", p->rank, err.msg);
        return 1;
    }
    return 0;
}

int ft_par_check_layers(const ft_opts *o, ft_par *p, const col_lm_config *c)
{
    col_err err = {0};
    int v = o->virtual_stages > 1 ? o->virtual_stages : 1;
    char msg[COL_ERR_MSG_MAX + 64];
    if (p->pp_size == 1 && v > 1)
        return bad_layout(p, "--virtual-stages needs a pipeline (--pp 2 or more)");
    if (p->pp_size > 1 && col_pp_check(c->n_layer, p->pp_size, v, o->micro_batches, &err) != COL_OK) {
        snprintf(msg, sizeof msg, "--pp %d: %s", p->pp_size, err.msg);
        return bad_layout(p, msg);
    }
    if (p->tp_size * p->sp_size == 1)
        return 0;
    col_par_layout l = {.mode = o->tp_mode, .tp = p->tp_size, .d = o->tp_depth, .sp = p->sp_size,
                        .sp_mode = o->sp_mode, .seq_split = o->tp_seq_split};
    /* the rows a stage session computes at once: a micro-batch's with --pp */
    int rows = o->batch / p->dp_size / (p->pp_size > 1 && o->micro_batches > 0 ? o->micro_batches : 1);
    if (col_par_layout_check(&l, c, o->seq, rows, &err) != COL_OK) {
        snprintf(msg, sizeof msg, "--tp %d --tp-mode %s --sp %d: %s", p->tp_size, col_tp_mode_name(o->tp_mode),
                 p->sp_size, err.msg);
        return bad_layout(p, msg);
    }
    if (col_lm_par_open(&p->lpar, &l, p->mp, &err) != COL_OK) {
        snprintf(msg, sizeof msg, "--tp-mode %s: %s", col_tp_mode_name(o->tp_mode), err.msg);
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
    col_lm_par_close(&p->lpar);
    col_comm_free(p->mp);
    p->mp = NULL;
    col_comm_free(p->pipe);
    p->pipe = NULL;
    col_comm_free(p->dp);
    col_comm_free(p->world);
    p->dp = p->world = NULL;
}

void ft_par_set_timeout(const ft_par *p, double seconds)
{
    struct col_comm *all[] = {p->world, p->dp, p->pipe, p->mp, p->lpar.tp, p->lpar.sp, p->lpar.row, p->lpar.col,
                              p->lpar.dep};
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
    const col_comm *comms[] = {p->world, p->dp, p->pipe, p->lpar.tp, p->lpar.sp, p->lpar.row, p->lpar.col,
                               p->lpar.dep};
    app_stats_set_comm(d, comms, 8);
}

#else /* a build without MPI: every run is one process */

int ft_par_open(ft_opts *o, ft_par *p)
{
    (void)o;
    memset(p, 0, sizeof *p);
    p->size = p->dp_size = p->pp_size = p->tp_size = p->sp_size = 1;
    return 0;
}

void ft_par_close(ft_par *p) { (void)p; }
void ft_par_set_timeout(const ft_par *p, double seconds) { (void)p, (void)seconds; }
void ft_par_stats_join(const ft_par *p, mt_stats_data *d) { (void)p, (void)d; }
void ft_par_stats_step(const ft_par *p, mt_stats_data *d) { (void)p, (void)d; }
int ft_par_check(ft_opts *o, ft_par *p)
{
    (void)p;
    if (o->dp > 1 || o->pp > 1 || o->tp > 1 || o->sp > 1) {
        fprintf(stderr, "colossal-finetune: --dp/--pp/--tp/--sp need MPI, and this build has none: install OpenMPI "
                "(libopenmpi-dev) and rebuild\n");
        return 2;
    }
    return 0;
}
int ft_par_check_layers(const ft_opts *o, ft_par *p, const col_lm_config *c) { return (void)o, (void)p, (void)c, 0; }
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
