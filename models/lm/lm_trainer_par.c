/* lm_trainer_par.c - a session under tensor and sequence parallelism
 * (lm_trainer.h, cfg.par): each parameter is this rank's block of the
 * whole tensor (lm_par.h), initialised and loaded as those elements of the
 * whole one, saved gathered whole; each step's graph computes this rank's
 * rows and positions of the batch; the gradient norm counts every block
 * once over the model-parallel group. A pipeline stage's session (layer_lo,
 * layer_hi) holds the stage's tensors: whole[i] is the whole spec of the
 * model's tensor lmt_global(t, i). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lm_trainer_internal.h"

#ifdef COL_WITH_COMM
#include "comm.h"
#endif

col_status lmt_par_setup(col_lm_trainer *t, col_err *err)
{
    const col_lm_par *p = t->cfg.par;
    if (!col_par_active(p))
        return COL_OK;
    const col_lm_train_config *c = &t->cfg;
    if (t->nt != t->np || c->compute_dtype != COL_F32 || c->objective != COL_LM_OBJ_MEAN_CE || c->nvme_dir ||
        c->inference)
        return col_err_set(err, COL_EUNSUPPORTED, "tensor and sequence parallelism train in f32 on the host and "
                           "NVMe-free tiers, without LoRA or per-token objectives (not written yet)");
    if (t->be && t->be->mem)
        return col_err_set(err, COL_EUNSUPPORTED, "tensor and sequence parallelism run on the CPU backend for now: "
                           "their collectives move host memory over MPI (NCCL communicators for device plans are "
                           "not written yet)");
    col_par_layout l = p->layout;
    col_status st = col_par_layout_check(&l, &c->model, c->seq, c->batch, err);
    if (st != COL_OK)
        return st;
    t->par = p;
    t->whole = malloc(sizeof *t->whole * (size_t)t->np);
    t->shard = malloc(sizeof *t->shard * (size_t)t->np);
    if (!t->whole || !t->shard)
        return col_err_set(err, COL_ENOMEM, "trainer: out of memory");
    memcpy(t->whole, t->specs, sizeof *t->whole * (size_t)t->np);
    int64_t most = 0;
    for (int i = 0; i < t->np; i++) {
        p->ops->shard(p, &t->specs[i], &t->shard[i]);
        col_shard_shape(&t->shard[i], t->specs[i].ndim, t->whole[i].shape, t->specs[i].shape);
        int64_t n = col_param_numel(&t->whole[i]);
        most = n > most ? n : most;
    }
    p->ops->rows(p, c->batch, &t->prow0, &t->prows);
    t->pseq = c->seq / (p->layout.sp > 1 ? p->layout.sp : 1);
    t->pbuf_n = most > (int64_t)c->batch * c->seq * 2 ? most : (int64_t)c->batch * c->seq * 2;
    t->pbuf = malloc(sizeof(float) * (size_t)t->pbuf_n);
    if (!t->pbuf)
        return col_err_set(err, COL_ENOMEM, "trainer: no memory for a whole tensor of %lld values", (long long)most);
    return COL_OK;
}

void lmt_par_free(col_lm_trainer *t)
{
    free(t->whole);
    free(t->shard);
    free(t->pbuf);
    free(t->phist);
}

void lmt_par_block(const col_lm_trainer *t, int i, float *whole, float *block)
{
    col_shard_copy(&t->shard[i], t->whole[i].ndim, t->whole[i].shape, sizeof(float), whole, block, true);
}

float lmt_par_inputs(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, int B, int32_t **li,
                     int32_t **lt, int64_t *n)
{
    int T = t->cfg.seq, s0 = t->par->sp_rank * t->pseq, row0, rows;
    t->par->ops->rows(t->par, B, &row0, &rows);
    *li = (int32_t *)t->pbuf;
    *lt = *li + (size_t)rows * t->pseq;
    *n = (int64_t)rows * t->pseq;
    int64_t counted = 0;
    for (int64_t k = 0; k < (int64_t)B * T; k++)
        counted += targets[k] != -1;
    for (int r = 0; r < rows; r++)
        for (int s = 0; s < t->pseq; s++) {
            size_t from = (size_t)(row0 + r) * (size_t)T + (size_t)(s0 + s), to = (size_t)r * t->pseq + s;
            (*li)[to] = ids[from];
            (*lt)[to] = targets[from];
        }
    return counted > 0 ? 1.0f / (float)counted : 0.0f;
}

#ifdef COL_WITH_COMM
/* the sum over c of a double: gathered as bits, added in rank order (the same on every rank) */
static col_status sum_d(struct col_comm *c, double local, double *sum, col_err *err)
{
    if (!c)
        return *sum = local, COL_OK;
    int n = col_comm_size(c);
    int64_t *all = malloc(sizeof *all * (size_t)n), mine;
    if (!all)
        return col_err_set(err, COL_ENOMEM, "tensor parallel: out of memory");
    memcpy(&mine, &local, sizeof mine);
    col_status st = col_comm_all_gather(c, &mine, all, 1, COL_I64, err);
    double s = 0;
    for (int r = 0; r < n && st == COL_OK; r++) {
        double v;
        memcpy(&v, &all[r], sizeof v);
        s += v;
    }
    free(all);
    *sum = s;
    return st;
}
#endif

col_status lmt_par_sum_d(const col_lm_trainer *t, double local, double *sum, col_err *err)
{
    *sum = local;
    if (!t->par)
        return COL_OK;
#ifdef COL_WITH_COMM
    col_status st = sum_d(t->par->tp, local, sum, err);
    return st == COL_OK ? sum_d(t->par->sp, *sum, sum, err) : st;
#else
    return COL_OK;
#endif
}

double lmt_par_weight(const col_lm_trainer *t, int i)
{
    return t->par && t->shard[i].replicas > 1 ? 1.0 / t->shard[i].replicas : 1.0;
}

bool lmt_par_lead(const col_lm_trainer *t) { return !t->par || (t->par->tp_rank == 0 && t->par->sp_rank == 0); }

col_status lmt_par_gather(col_lm_trainer *t, int i, const float *block, float *whole, col_err *err)
{
    int64_t n = col_param_numel(&t->specs[i]);
#ifdef COL_WITH_COMM
    const col_lm_par *p = t->par;
    if (!p->tp) {
        memcpy(whole, block, sizeof(float) * (size_t)n);
        return COL_OK;
    }
    int P = col_comm_size(p->tp);
    float *all = malloc(sizeof(float) * (size_t)n * (size_t)P);
    if (!all)
        return col_err_set(err, COL_ENOMEM, "tensor parallel: no memory to gather %s", t->specs[i].name);
    col_status st = col_comm_all_gather(p->tp, block, all, (size_t)n, COL_F32, err);
    for (int r = 0; r < P && st == COL_OK; r++) { /* rank r's block, from its place in the layout */
        col_lm_par q = *p;
        q.tp_rank = r;
        int qq = p->layout.q > 0 ? p->layout.q : 1;
        if (p->layout.mode != COL_TP_1D)
            q.j = r % qq, q.i = (r / qq) % qq, q.k = r / (qq * qq);
        col_shard sh;
        p->ops->shard(&q, &t->whole[i], &sh);
        col_shard_copy(&sh, t->whole[i].ndim, t->whole[i].shape, sizeof(float), whole, all + (size_t)r * (size_t)n,
                       false);
    }
    free(all);
    return st;
#else
    memcpy(whole, block, sizeof(float) * (size_t)n);
    (void)err;
    return COL_OK;
#endif
}

const col_param_spec *col_lm_trainer_whole_spec(const col_lm_trainer *t, int i)
{
    return t->par && i < t->np ? &t->whole[i] : &t->specs[i];
}

col_status col_lm_trainer_gather(col_lm_trainer *t, int i, int k, float *whole, col_err *err)
{
    if (i < 0 || i >= t->nt || k < 0 || k > 1 || (k == 1 && !t->ot[i].g) || !t->ot[i].w)
        return col_err_set(err, COL_EINVAL, "gathering tensor %d: no such tensor or kind %d (f32 host memory)", i, k);
    const float *d = k == 0 ? t->ot[i].w : t->ot[i].g;
    if (!t->par) {
        memcpy(whole, d, sizeof(float) * (size_t)t->ot[i].n);
        return COL_OK;
    }
    return lmt_par_gather(t, i, d, whole, err);
}
