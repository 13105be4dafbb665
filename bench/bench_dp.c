/* bench_dp - data parallel steps with ZeRO 1/2/3 under mpirun: the bytes
 * each process moves per step against the formula, and how much of the
 * exchange the backward pass hides; with "pp", the pipeline's bubble.
 *
 * Run: mpirun -np P bench/bench_dp [steps [width layers]]   (P >= 2; rank 0 prints)
 *      mpirun -np P bench/bench_dp pp [steps]   (P pipeline stages)
 *
 * A GPT-2-shaped model (vocab 8192, width 256, 4 layers, 128 positions:
 * about 5.3M parameters, Psi = 21 MB in f32) trains on random tokens, each
 * process on 2 rows of 128 tokens. Per configuration (ZeRO stage x the
 * exchange during or after the backward pass) and step:
 *   - bytes: what the process's collectives moved by comm.h's model
 *     (col_comm_get_stats on the data parallel communicator: a
 *     reduce-scatter or all-gather of a block of B bytes moves (P-1) B each
 *     way), against the formula 2 Psi (P-1)/P, Psi the trained parameters'
 *     bytes. The ratio above 1 is the chunks' padding: a chunk's unused tail
 *     and the 64-byte alignment of its tensors travel too.
 *   - blocked: the seconds the step was blocked on the exchanges: all of
 *     their time when they run after the backward pass ("after"), the
 *     waits when they overlap it ("during"). hidden = 1 - during / after.
 * Medians over the steps after the first two. On a CPU machine with fewer
 * cores than processes the absolute times mean little (the processes share
 * the cores); the ratios are the point.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "backend_cpu.h"
#include "comm.h"
#include "hf_config.h"
#include "lm_pipeline.h"
#include "lm_trainer.h"
#include "rng.h"
#include "timer.h"

enum { ROWS = 2, SEQ = 128, V = 8192 };

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    double step, blocked, bytes;
} result;

static int g_width = 256, g_layers = 4; /* the model's shape (argv) */

static int run(col_comm *dp, const col_backend *be, int zero, bool serial, int steps, result *out)
{
    int rank = col_comm_rank(dp), size = col_comm_size(dp);
    col_lm_train_config c = {
        .model = col_gpt2_config(V, SEQ, g_width, g_layers, 4),
        .batch = ROWS, .seq = SEQ,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 1e-3f},
        .grad_clip = 1.0f, .seed = 3,
        .dp = dp, .zero = zero, .dp_serial = serial,
    };
    c.model.dropout = 0;
    col_lm_trainer *t = NULL;
    col_err err = {0};
    if (col_lm_trainer_create(&c, be, &t, &err) != COL_OK) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        return 1;
    }
    int32_t ids[ROWS * SEQ], tg[ROWS * SEQ];
    double *st = calloc((size_t)steps, sizeof *st), *bl = calloc((size_t)steps, sizeof *bl);
    double *by = calloc((size_t)steps, sizeof *by);
    col_rng r;
    col_rng_init(&r, 100 + (uint64_t)rank);
    int rc = 0;
    for (int s = 0; s < steps + 2 && !rc; s++) {
        for (int i = 0; i < ROWS * SEQ; i++)
            ids[i] = (int32_t)col_rng_below(&r, V), tg[i] = (int32_t)col_rng_below(&r, V);
        col_comm_stats a, b;
        col_comm_get_stats(dp, &a);
        double t0 = col_seconds();
        col_lm_step_info info;
        if (col_lm_trainer_step(t, ids, tg, &info, &err) != COL_OK) {
            fprintf(stderr, "bench_dp: %s\n", err.msg);
            rc = 1;
            break;
        }
        double dt = col_seconds() - t0, blocked;
        uint64_t handed;
        col_lm_trainer_dp_traffic(t, &blocked, &handed);
        col_comm_get_stats(dp, &b);
        if (s >= 2) { /* the first steps make the plans' memory and MPI's connections */
            st[s - 2] = dt;
            bl[s - 2] = blocked;
            by[s - 2] = (double)(b.bytes_sent - a.bytes_sent);
        }
    }
    if (!rc)
        *out = (result){median(st, steps), median(bl, steps), median(by, steps)};
    (void)size;
    free(st), free(bl), free(by);
    col_lm_trainer_free(t);
    return rc;
}

/* The pipeline's bubble: P stages (two layers each), a fixed 16 rows per step cut
 * into M micro-batches. A 1F1B step's time is about (M + P - 1) micro-batch slots of which M are work: the
 * bubble fraction (P - 1) / (M + P - 1). Measured: the step time T(M) against T(M) for the largest M scaled by
 * the formula, T_pred(M) = T_work * (M + P - 1) / M with T_work from the largest M. */
static int bench_pp(col_comm *world, const col_backend *be, int steps)
{
    int rank = col_comm_rank(world), P = col_comm_size(world);
    enum { ROWS_PP = 16 };
    static const int ms[] = {1, 2, 4, 8, 16};
    double t[5] = {0};
    for (int q = 0; q < 5; q++) {
        col_lm_pipeline_config pc = {
            .train = {.model = col_gpt2_config(V, SEQ, 256, 2 * P, 4), .batch = ROWS_PP, .seq = SEQ,
                      .opt = col_opt_defaults(COL_OPT_ADAMW), .lr = {.kind = COL_LR_CONSTANT, .lr_max = 1e-3f},
                      .seed = 3},
            .pipe = world, .micro_batches = ms[q]};
        pc.train.model.dropout = 0;
        col_lm_pipeline *pl = NULL;
        col_err err = {0};
        if (col_lm_pipeline_create(&pc, be, &pl, &err) != COL_OK) {
            fprintf(stderr, "bench_dp: %s\n", err.msg);
            return 1;
        }
        int32_t *ids = malloc(sizeof(int32_t) * ROWS_PP * SEQ), *tg = malloc(sizeof(int32_t) * ROWS_PP * SEQ);
        col_rng r;
        col_rng_init(&r, 7);
        double *st = calloc((size_t)steps, sizeof *st);
        int rc = 0;
        for (int s = 0; s < steps + 1 && !rc; s++) {
            for (int i = 0; i < ROWS_PP * SEQ; i++)
                ids[i] = (int32_t)col_rng_below(&r, V), tg[i] = (int32_t)col_rng_below(&r, V);
            double t0 = col_seconds();
            rc = col_lm_pipeline_step(pl, ids, tg, NULL, &err) != COL_OK;
            if (s > 0)
                st[s - 1] = col_seconds() - t0;
        }
        if (rc)
            fprintf(stderr, "bench_dp: %s\n", err.msg);
        t[q] = rc ? 0 : median(st, steps);
        free(st), free(ids), free(tg);
        col_lm_pipeline_free(pl);
        if (rc)
            return 1;
    }
    if (rank == 0) {
        double work = t[4] * 16.0 / (16 + P - 1);
        printf("bench_dp pp: %d stages (GPT-2 shape, %d layers, width 256), %d rows of %d tokens per step, 1F1B, "
               "medians of %d steps\n%-4s %10s %10s %12s %14s\n", P, 2 * P, ROWS_PP, SEQ, steps, "M", "step ms",
               "bubble", "pred ms", "measured/pred");
        for (int q = 0; q < 5; q++) {
            double bubble = (double)(P - 1) / (ms[q] + P - 1), pred = work * (ms[q] + P - 1) / ms[q];
            printf("%-4d %10.1f %9.0f%% %12.1f %14.2f\n", ms[q], t[q] * 1e3, 100 * bubble, pred * 1e3, t[q] / pred);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    bool pp = argc > 1 && strcmp(argv[1], "pp") == 0;
    if (pp)
        argc--, argv++;
    int steps = argc > 1 ? atoi(argv[1]) : 8;
    if (argc > 3) {
        g_width = atoi(argv[2]);
        g_layers = atoi(argv[3]);
        if (g_width < 64 || g_width > 4096 || g_width % 4 || g_layers < 1 || g_layers > 64)
            g_width = 256, g_layers = 4;
    }
    if (steps < 3 || steps > 1000)
        steps = 8;
    col_comm *world = NULL;
    col_backend be;
    col_err err = {0};
    if (col_comm_init_mpi(&world, &err) != COL_OK || col_cpu_backend_init(&be, &err) != COL_OK) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        MPI_Finalize();
        return 1;
    }
    if (pp) {
        int rc = bench_pp(world, &be, steps);
        col_cpu_backend_free(&be);
        col_comm_free(world);
        MPI_Finalize();
        return rc;
    }
    int rank = col_comm_rank(world), size = col_comm_size(world);
    col_lm_config mc = col_gpt2_config(V, SEQ, g_width, g_layers, 4);
    col_param_spec *sp = calloc((size_t)col_lm_param_count(&mc), sizeof *sp);
    col_lm_param_specs(&mc, sp);
    double psi = 0;
    for (int i = 0; i < col_lm_param_count(&mc); i++)
        psi += 4.0 * (double)col_param_numel(&sp[i]);
    free(sp);
    double formula = 2 * psi * (size - 1) / size;
    if (rank == 0)
        printf("bench_dp: %d processes, GPT-2 shape (vocab %d, width %d, %d layers), %d x %d tokens each, Psi %.1f MB, "
               "medians of %d steps\n%-6s %-8s %10s %12s %10s %12s %8s\n",
               size, V, g_width, g_layers, ROWS, SEQ, psi / 1e6, steps, "ZeRO", "exchange", "step ms", "sent MB", "/formula",
               "blocked ms", "hidden");
    int rc = 0;
    for (int zero = 1; zero <= 3 && !rc; zero++) {
        result ser, ov;
        rc = run(world, &be, zero, true, steps, &ser) || run(world, &be, zero, false, steps, &ov);
        if (rc || rank != 0)
            continue;
        printf("%-6d %-8s %10.1f %12.2f %10.3f %12.1f %8s\n", zero, "after", ser.step * 1e3, ser.bytes / 1e6,
               ser.bytes / formula, ser.blocked * 1e3, "-");
        double hidden = ser.blocked > 0 ? 1 - ov.blocked / ser.blocked : 0;
        printf("%-6d %-8s %10.1f %12.2f %10.3f %12.1f %7.0f%%\n", zero, "during", ov.step * 1e3, ov.bytes / 1e6,
               ov.bytes / formula, ov.blocked * 1e3, 100 * hidden);
    }
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rc;
}
