/* bench_tp - tensor and sequence parallelism under mpirun: the bytes each
 * process's communicators move per step, against our model of them and the
 * published formulas, and the step time.
 *
 * Run: mpirun -np P -x OMP_NUM_THREADS=1 bench/bench_tp [steps]   (P = 2, 4 or 8; rank 0 prints; with more
 *      processes than cores give each one thread: OpenMP's spinning threads otherwise take the cores from the
 *      other processes, 10x slower steps here)
 *
 * Every layout of P processes (1D tensor parallel with 2 and 4; 2D 2x2; 2.5D
 * 2x2x2; 3D 2x2x2; ring and Ulysses sequence parallel with 2 and 4) trains a
 * GPT-2 shape (vocab 8192, hidden h = 256, 8 heads, 128 positions, 8 rows per
 * step for the whole group) on random tokens, once with 4 layers and once
 * with 2. Per process and step: the bytes sent by each of its communicators
 * (tp, sp, and the grids' row, col, dep: col_comm_get_stats before and after
 * the step, comm.h's ring model), the per-layer bytes (4 layers minus 2
 * layers, halved: what the transformer layers move, apart from the
 * embedding, the head and the loss, which are the same in both) and the rest
 * ("outside the layers"). The unit is M = b*s*h f32 values of the whole
 * step (8 x 128 x 256 x 4 bytes = 1 MiB).
 *
 * Per layer, per process, in M (q the grid's side, d its depth, P the ranks;
 * w = h / (b s) = 0.25 here, the size of an h x h weight in M; a GPT-2 layer's
 * linears have inputs h, h, h, 4h (7 h in all), outputs 3h, h, 4h, h (9 h)
 * and 12 h^2 weights):
 *   ours, by the comments of lm_par_1d.c / lm_par_grid.c /
 *   comm_ring_attention.c and comm.h's model:
 *     1D:      4 all-reduces of M: 8 (P-1)/P (the norms are replicated, the
 *              embedding's and the loss's collectives lie outside the layers)
 *     2D/2.5D: X gathered and reduce-scattered back 2(q-1)/(d q^2) x 7, W
 *              gathered and back 2(q-1)/q^2 x 12 w, 2.5D the depth's sum of
 *              dW 2(d-1)/(d q^2) x 12 w (norm statistics and bias copies
 *              come on top: [b, s, 1] and [h/q] tensors, under 1%)
 *     3D:      2(q-1)/q^3 x (7 + 9 + 12 w)
 *     ring:    forward P-1 passes of a K|V block (2 M/P), backward P-1 of
 *              K|V and P-1 of dK|dV: 6 (P-1)/P; plus the weights' gradients
 *              summed over sp (every weight is copied over the sp ranks):
 *              2 (P-1)/P x the layer's parameters (12 w + 13 h / (b s h))
 *     Ulysses: 4 all-to-alls forward and 4 backward of the local [b, s/P, h]
 *              (each sends (P-1)/P of it): 8 (P-1)/P^2; plus the weights'
 *              gradients as for ring
 *   published (per process, per layer):
 *     1D (Megatron): 4 all-reduces of b*s*h: 8 (P-1)/P
 *     2D, 2.5D, 3D (Colossal-AI's tables: one linear Y = XA, forward and
 *              backward, a square h x h weight counted like M): 6(q-1)/q,
 *              3(q-1)(d+1)/(dq), 6(q-1)/q^3, times 4 linears per layer
 *     ring:    2 (P-1) block passes of K and V (b s h / P each) forward:
 *              2 (P-1)/P (the attention's share of ours is 3x that)
 *     Ulysses: 4 all-to-alls forward: 4 (P-1)/P^2 (ours: 2x, the backward)
 * Medians of the steps after the first. On a CPU machine with fewer cores
 * than processes the step times mean little; the bytes are exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "backend_cpu.h"
#include "bench_util.h"
#include "comm.h"
#include "hf_config.h"
#include "lm_par.h"
#include "lm_trainer.h"
#include "rng.h"

enum { ROWS = 8, SEQ = 128, V = 8192, HID = 256, HEADS = 8, NCOMM = 5 };

typedef struct {
    const char *name;
    col_tp_mode mode;
    int tp, depth, sp;
    col_sp_mode sp_mode;
} layout;

static const layout layouts[] = {
    {"1D tp2", COL_TP_1D, 2, 1, 1, COL_SP_RING},
    {"ring sp2", COL_TP_1D, 1, 1, 2, COL_SP_RING},
    {"Ulysses sp2", COL_TP_1D, 1, 1, 2, COL_SP_ULYSSES},
    {"1D tp4", COL_TP_1D, 4, 1, 1, COL_SP_RING},
    {"2D 2x2", COL_TP_2D, 4, 1, 1, COL_SP_RING},
    {"ring sp4", COL_TP_1D, 1, 1, 4, COL_SP_RING},
    {"Ulysses sp4", COL_TP_1D, 1, 1, 4, COL_SP_ULYSSES},
    {"2.5D 2x2x2", COL_TP_25D, 8, 2, 1, COL_SP_RING},
    {"3D 2x2x2", COL_TP_3D, 8, 1, 1, COL_SP_RING},
};

/* one run: per communicator the bytes sent per step (median), and the step time */
typedef struct {
    double bytes[NCOMM], step;
} result;

static int run(const layout *L, col_comm *mp, const col_backend *be, int layers, int steps, result *out)
{
    int rank = col_comm_rank(mp);
    col_err err = {0};
    col_lm_config m = col_gpt2_config(V, SEQ, HID, layers, HEADS);
    m.dropout = 0;
    col_par_layout l = {.mode = L->mode, .tp = L->tp, .d = L->depth, .sp = L->sp, .sp_mode = L->sp_mode};
    col_lm_par par;
    if (col_par_layout_check(&l, &m, SEQ, ROWS, &err) != COL_OK || col_lm_par_open(&par, &l, mp, &err) != COL_OK) {
        fprintf(stderr, "bench_tp: %s: %s\n", L->name, err.msg);
        return 1;
    }
    col_lm_train_config c = {
        .model = m,
        .batch = ROWS, .seq = SEQ,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 1e-3f},
        .grad_clip = 1.0f, .seed = 3,
        .par = &par,
    };
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(&c, be, &t, &err) != COL_OK) {
        fprintf(stderr, "bench_tp: %s: %s\n", L->name, err.msg);
        col_lm_par_close(&par);
        return 1;
    }
    struct col_comm *cs[NCOMM] = {par.tp, par.sp, par.row, par.col, par.dep};
    for (int i = 0; i < NCOMM; i++) /* a communicator listed twice counts once */
        for (int j = 0; j < i; j++)
            if (cs[i] == cs[j])
                cs[i] = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * ROWS * SEQ), *tg = malloc(sizeof(int32_t) * ROWS * SEQ);
    double *st = calloc((size_t)steps, sizeof *st), *by = calloc((size_t)steps * NCOMM, sizeof *by);
    col_rng r;
    col_rng_init(&r, 100); /* every rank of the group the same rows: the layouts split them themselves */
    int rc = !ids || !tg || !st || !by;
    for (int s = 0; s < steps + 1 && !rc; s++) {
        for (int i = 0; i < ROWS * SEQ; i++)
            ids[i] = (int32_t)col_rng_below(&r, V), tg[i] = (int32_t)col_rng_below(&r, V);
        col_comm_stats a[NCOMM] = {0}, b[NCOMM] = {0};
        for (int i = 0; i < NCOMM; i++)
            if (cs[i])
                col_comm_get_stats(cs[i], &a[i]);
        double t0 = bench_now();
        col_lm_step_info info;
        if (col_lm_trainer_step(t, ids, tg, &info, &err) != COL_OK) {
            fprintf(stderr, "bench_tp: %s (rank %d): %s\n", L->name, rank, err.msg);
            rc = 1;
            break;
        }
        double dt = bench_now() - t0;
        for (int i = 0; i < NCOMM; i++)
            if (cs[i])
                col_comm_get_stats(cs[i], &b[i]);
        if (s >= 1) { /* the first step makes the plans' memory and MPI's connections */
            st[s - 1] = dt;
            for (int i = 0; i < NCOMM; i++)
                by[i * steps + s - 1] = (double)(b[i].bytes_sent - a[i].bytes_sent);
        }
    }
    if (!rc) {
        out->step = bench_median(st, steps);
        for (int i = 0; i < NCOMM; i++)
            out->bytes[i] = bench_median(by + i * steps, steps);
    }
    free(ids), free(tg), free(st), free(by);
    col_lm_trainer_free(t);
    col_lm_par_close(&par);
    return rc;
}

/* per layer, per process, in M: our model (model, *grads of it the weights' gradients summed over the sp ranks)
 * and the published figure (pub); see the header */
static void formulas(const layout *L, double *model, double *grads, double *pub)
{
    double w = (double)HID / (ROWS * SEQ), small = 13.0 / (ROWS * SEQ); /* h x h, and 13 h, in M */
    *grads = 0;
    if (L->sp > 1) {
        double P = L->sp;
        *grads = 2 * (P - 1) / P * (12 * w + small);
        if (L->sp_mode == COL_SP_RING) {
            *model = 6 * (P - 1) / P + *grads;
            *pub = 2 * (P - 1) / P;
        } else {
            *model = 8 * (P - 1) / (P * P) + *grads;
            *pub = 4 * (P - 1) / (P * P);
        }
        return;
    }
    double P = L->tp, d = L->mode == COL_TP_25D ? L->depth : 1;
    double q = L->mode == COL_TP_3D ? round(cbrt(P)) : round(sqrt(P / d));
    switch (L->mode) {
    case COL_TP_1D:
        *model = *pub = 8 * (P - 1) / P;
        break;
    case COL_TP_2D:
    case COL_TP_25D:
        *model = 2 * (q - 1) / (d * q * q) * 7 + 2 * (q - 1) / (q * q) * 12 * w + 2 * (d - 1) / (d * q * q) * 12 * w;
        *pub = 4 * (L->mode == COL_TP_2D ? 6 * (q - 1) / q : 3 * (q - 1) * (d + 1) / (d * q));
        break;
    default:
        *model = 2 * (q - 1) / (q * q * q) * (7 + 9 + 12 * w);
        *pub = 4 * 6 * (q - 1) / (q * q * q);
        break;
    }
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 5;
    if (steps < 1 || steps > 1000)
        steps = 5;
    MPI_Init(&argc, &argv); /* ours to finalize (col_comm_free of the last communicator would otherwise) */
    col_comm *world = NULL;
    col_backend be;
    col_err err = {0};
    if (col_comm_init_mpi(&world, &err) != COL_OK || col_cpu_backend_init(&be, &err) != COL_OK) {
        fprintf(stderr, "bench_tp: %s\n", err.msg);
        MPI_Finalize();
        return 1;
    }
    int rank = col_comm_rank(world), size = col_comm_size(world);
    const double M = 4.0 * ROWS * SEQ * HID;
    if (rank == 0)
        printf("bench_tp: %d processes, GPT-2 shape (vocab %d, hidden %d, %d heads), %d rows x %d positions per step, "
               "4 and 2 layers; M = b*s*h = %.2f MB; medians of %d steps\n\n"
               "Per process (MB sent per step, 4 layers, by communicator; per layer = (4 layers - 2 layers) / 2):\n\n"
               "| layout | rank | tp | sp | row | col | dep | per step | per layer | outside the layers |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n",
               size, V, HID, HEADS, ROWS, SEQ, M / 1e6, steps);
    /* per layout: rank 0 gathers every rank's [layers 4: NCOMM bytes, step] [layers 2: ...] */
    enum { NV = 2 * (NCOMM + 1) };
    double *all = calloc((size_t)size * NV, sizeof *all);
    char summary[16][400];
    int ns = 0, rc = 0;
    for (size_t li = 0; li < sizeof layouts / sizeof layouts[0] && !rc; li++) {
        const layout *L = &layouts[li];
        if (L->tp * L->sp != size)
            continue;
        col_comm *mp = NULL;
        if (col_comm_split(world, 0, rank, &mp, &err) != COL_OK) {
            fprintf(stderr, "bench_tp: %s\n", err.msg);
            rc = 1;
            break;
        }
        result r4 = {{0}, 0}, r2 = {{0}, 0};
        int bad = run(L, mp, &be, 4, steps, &r4) || run(L, mp, &be, 2, steps, &r2);
        int anybad = 0;
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        col_comm_free(mp);
        if (anybad) {
            rc = 1;
            break;
        }
        double mine[NV];
        for (int i = 0; i < NCOMM; i++)
            mine[i] = r4.bytes[i], mine[NCOMM + 1 + i] = r2.bytes[i];
        mine[NCOMM] = r4.step, mine[2 * NCOMM + 1] = r2.step;
        MPI_Gather(mine, NV, MPI_DOUBLE, all, NV, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank != 0)
            continue;
        double lay_max = 0, lay_min = 1e300, tot_max = 0, out_max = 0, st[64];
        for (int p = 0; p < size; p++) {
            const double *v = all + (size_t)p * NV;
            double t4 = 0, t2 = 0;
            for (int i = 0; i < NCOMM; i++)
                t4 += v[i], t2 += v[NCOMM + 1 + i];
            double per_layer = (t4 - t2) / 2, outside = t4 - 4 * per_layer;
            printf("| %s | %d |", L->name, p);
            for (int i = 0; i < NCOMM; i++)
                printf(" %.3f |", v[i] / 1e6);
            printf(" %.3f | %.3f | %.3f |\n", t4 / 1e6, per_layer / 1e6, outside / 1e6);
            lay_max = per_layer > lay_max ? per_layer : lay_max;
            lay_min = per_layer < lay_min ? per_layer : lay_min;
            tot_max = t4 > tot_max ? t4 : tot_max;
            out_max = outside > out_max ? outside : out_max;
            st[p] = v[NCOMM];
        }
        double step = bench_median(st, size), model, grads, pub, share = lay_max / M;
        formulas(L, &model, &grads, &pub);
        char range[64];
        if (lay_max - lay_min > 1e-3 * lay_max)
            snprintf(range, sizeof range, "%.3f-%.3f", lay_min / M, lay_max / M);
        else
            snprintf(range, sizeof range, "%.3f", lay_max / M);
        snprintf(summary[ns++], sizeof summary[0],
                 "| %s | %d | %.2f | %.3f | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.0f |", L->name, size,
                 tot_max / 1e6, out_max / M, range, model, share / model, grads, share - grads, pub,
                 (share - grads) / pub, step * 1e3);
    }
    if (rank == 0 && !rc) {
        printf("\nPer layer and process in M (max over the ranks, or min-max), against our model; the linears' (tp) or "
               "the attention's (sp: less the weights' gradient sum) share against the published formula:\n\n"
               "| layout | P | sent per step, MB (max) | outside the layers / M | per layer / M | ours / M | measured / "
               "ours | weights' gradients (sp) / M | linears' or attention's share / M | published / M | share / "
               "published | step ms (median) |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < ns; i++)
            printf("%s\n", summary[i]);
    }
    free(all);
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rc;
}
