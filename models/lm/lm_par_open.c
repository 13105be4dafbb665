/* lm_par_open.c - a rank's place in a layout of tensor and sequence parallelism: the modes' tables and the
 * communicators split from the model-parallel group (lm_par.h). */
#include "lm_par.h"

#include <string.h>

#ifdef COL_WITH_COMM
#include "comm.h"
#endif

const col_tp_ops *col_tp_ops_of(col_tp_mode m)
{
    switch (m) {
#ifdef COL_WITH_COMM
    case COL_TP_1D: return &col_tp_1d_ops;
    case COL_TP_2D: return &col_tp_2d_ops;
    case COL_TP_25D: return &col_tp_25d_ops;
    case COL_TP_3D: return &col_tp_3d_ops;
#endif
    default: return NULL;
    }
}

void col_lm_par_close(col_lm_par *p)
{
#ifdef COL_WITH_COMM
    struct col_comm *all[] = {p->tp, p->sp, p->row, p->col, p->dep};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        col_comm_free(all[i]);
#endif
    p->tp = p->sp = p->row = p->col = p->dep = NULL;
}

col_status col_lm_par_open(col_lm_par *p, const col_par_layout *l, struct col_comm *mp, col_err *err)
{
    memset(p, 0, sizeof *p);
    p->layout = *l;
    p->ops = col_tp_ops_of(l->mode);
    if (!p->ops)
        return col_err_set(err, COL_EUNSUPPORTED, "%s tensor parallelism is not built yet", col_tp_mode_name(l->mode));
    int tp = l->tp > 1 ? l->tp : 1, sp = l->sp > 1 ? l->sp : 1;
    if (tp * sp == 1)
        return COL_OK;
#ifdef COL_WITH_COMM
    if (!mp || col_comm_size(mp) != tp * sp)
        return col_err_set(err, COL_EINVAL, "tensor x sequence parallelism needs a group of %d x %d processes (got %d)",
                           tp, sp, mp ? col_comm_size(mp) : 1);
    int m = col_comm_rank(mp), q = l->q > 0 ? l->q : 1;
    p->tp_rank = m % tp;
    p->sp_rank = m / tp;
    int t = p->tp_rank;
    if (l->mode != COL_TP_1D) {
        p->j = t % q;
        p->i = (t / q) % q;
        p->k = t / (q * q);
    }
    col_status st = COL_OK;
    if (tp > 1)
        st = col_comm_split(mp, p->sp_rank, p->tp_rank, &p->tp, err);
    if (st == COL_OK && sp > 1)
        st = col_comm_split(mp, p->tp_rank, p->sp_rank, &p->sp, err);
    if (st == COL_OK && tp > 1 && l->mode != COL_TP_1D) {
        int depth = tp / (q * q);
        /* row: same (k, i), ordered by j; col: same (k, j), by i; dep: same (i, j), by k */
        st = col_comm_split(p->tp, p->k * q + p->i, p->j, &p->row, err);
        if (st == COL_OK)
            st = col_comm_split(p->tp, p->k * q + p->j, p->i, &p->col, err);
        if (st == COL_OK && depth > 1)
            st = col_comm_split(p->tp, p->i * q + p->j, p->k, &p->dep, err);
    }
    if (st != COL_OK)
        col_lm_par_close(p);
    return st;
#else
    (void)mp;
    return col_err_set(err, COL_EUNSUPPORTED, "tensor and sequence parallelism need MPI, which this build lacks");
#endif
}
