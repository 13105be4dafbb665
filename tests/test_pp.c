/* test_pp.c - pipeline parallelism (models/lm/lm_pipeline.c) under mpirun with
 * 2 and 4 processes (tests/test_pp.sh).
 *
 * The reference is one process: every rank also runs a whole-model session
 * (cfg.dp NULL, no pipeline) on the step's global batch and compares, step by
 * step, the loss and gradient norm the pipeline reports, and at the end every
 * weight its stage sessions hold (each tensor against the reference's tensor
 * of the same global index; the processes' sums of squares added with plain
 * MPI into ||w_pp - w_1|| / ||w_1||, the whole model once - the tied
 * embedding's second copy must equal the first bit for bit). Weights are
 * compared as one vector for the reason tests/test_dp.c gives: a tensor with
 * a zero true gradient (GPT-2's key bias) gets rounding noise that AdamW
 * scales up.
 *
 * Targets hold -1s unevenly over the rows, so the weighting of the
 * micro-batch losses by their counted targets is needed to match the mean
 * over the whole batch. With dropout the reference is one process
 * accumulating the same M micro-batches (the same run counters, the same
 * masks); the -1s are then spread evenly over the micro-batches, where the
 * two weightings agree. Cases whose pipeline size is less than the world's
 * run data parallel over pipelines (world rank = d * P + p). */
#include <math.h>
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
#include "testlib.h"
#include "mpi_testutil.h"

enum { BP = 8, T = 8, STEPS = 10 };

static col_backend be;
static col_comm *world;
static int rank, size;

typedef struct {
    const char *name;
    bool llama;
    int P;         /* pipeline size (0: the world's) */
    int v, M;
    float dropout;
    int zero;
    bool dp_only;  /* skipped without data parallelism */
} pp_case;

static col_lm_config model(const pp_case *k)
{
    col_lm_config m = col_gpt2_config(97, 16, 32, 4, 4);
    if (k->llama) {
        col_err err = {0};
        col_lm_preset("llama-tiny", &m, &err);
        m.n_layer = 4;
        m.hidden = 32, m.n_head = 4, m.n_kv_head = 2, m.head_dim = 8, m.ffn = 64;
    }
    m.dropout = k->dropout;
    return m;
}

static col_lm_train_config config(const pp_case *k, int rows, int accum, col_comm *dp, float clip)
{
    col_lm_train_config c = {
        .model = model(k),
        .batch = rows, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = clip, .seed = 11,
        .grad_accum = accum,
        .chunk_bytes = 8 << 10,
        .dp = dp, .zero = k->zero,
    };
    return c;
}

/* the global batch of step s (rows rows); even: the -1s at the same places in every micro-batch of mb rows */
static void batch(int s, int rows, int vocab, bool even, int mb, int32_t *ids, int32_t *tg)
{
    col_rng r, e;
    col_rng_init(&r, 1000 + (uint64_t)s);
    col_rng_init(&e, 77 + (uint64_t)s);
    for (int i = 0; i < rows * T; i++) {
        int row = i / T;
        ids[i] = (int32_t)col_rng_below(&r, (uint64_t)vocab);
        tg[i] = (int32_t)col_rng_below(&r, (uint64_t)vocab);
        if (!even && col_rng_below(&r, 100) < (uint64_t)(3 + 4 * row))
            tg[i] = -1;
    }
    if (even) /* a pattern per position in a micro-batch */
        for (int i = 0; i < mb * T; i++)
            if (col_rng_below(&e, 100) < 25)
                for (int k = 0; k < rows / mb; k++)
                    tg[k * mb * T + i] = -1;
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }

static void run_case(const pp_case *k)
{
    int P = k->P ? k->P : size, D = size / P, d = rank / P, p = rank % P;
    if (size % P || (k->dropout > 0 && D > 1) || (k->dp_only && D == 1)) {
        if (rank == 0)
            TL_NOTE("%s: not with %d processes", k->name, size);
        return;
    }
    char detail[800] = "";
    col_err err = {0};
    int rows = D * BP, mb = BP / k->M;
    bool drop = k->dropout > 0;
    col_comm *pipe = NULL, *dp = NULL;
    bool ok = col_comm_split(world, d, p, &pipe, &err) == COL_OK &&
              (D == 1 || col_comm_split(world, p, d, &dp, &err) == COL_OK);
    float clip = 1.0f; /* the whole model's norm: over the stages, and over the data parallel spans */
    col_lm_train_config rc = config(k, drop ? mb : rows, drop ? k->M : 1, NULL, clip);
    col_lm_pipeline_config pc = {.train = config(k, BP, 0, dp, clip), .pipe = pipe, .micro_batches = k->M,
                                 .virtual_stages = k->v};
    col_lm_trainer *ref = NULL;
    col_lm_pipeline *pp = NULL;
    ok = ok && col_lm_trainer_create(&rc, &be, &ref, &err) == COL_OK &&
         col_lm_pipeline_create(&pc, &be, &pp, &err) == COL_OK;
    if (!ok)
        snprintf(detail, sizeof detail, "create: %s", err.msg);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)rows * T), *tg = malloc(sizeof(int32_t) * (size_t)rows * T);
    double worst = 0, worst_norm = 0, first_norm = 1;
    float l_ref = 0, l_pp = 0;
    for (int s = 0; s < STEPS && ok; s++) {
        col_lm_step_info a, b;
        batch(s, rows, rc.model.vocab_size, drop, mb, ids, tg);
        ok = col_lm_trainer_step(ref, ids, tg, &a, &err) == COL_OK &&
             col_lm_pipeline_step(pp, ids + (size_t)d * BP * T, tg + (size_t)d * BP * T, &b, &err) == COL_OK;
        if (!ok) {
            snprintf(detail, sizeof detail, "step %d: %s", s, err.msg);
            break;
        }
        worst = fmax(worst, rel(b.loss, a.loss));
        worst_norm = fmax(worst_norm, rel(b.grad_norm, a.grad_norm));
        if (s == 0)
            first_norm = rel(b.grad_norm, a.grad_norm);
        l_ref = a.loss, l_pp = b.loss;
    }
    /* gradient norms: the first step's as close as the losses; later ones drift apart more (rounding noise in
     * near-zero gradients, scaled up by AdamW: see above) */
    tl_mpi_check(ok && worst <= 1e-5 && first_norm <= 1e-5 && worst_norm <= 1e-4, detail[0] ? detail : "losses differ",
                 "%s, %d processes (%d stages x %d data parallel): %d steps' losses equal one process's within 1e-05 "
                 "(worst %.2e; last %.6f vs %.6f), the gradient norm within 1e-05 at the first step (%.2e) and 1e-04 "
                 "after (%.2e)", k->name, size, P * (k->v ? k->v : 1), D, STEPS, worst, l_pp, l_ref, first_norm,
                 worst_norm);
    /* every weight of the first pipeline against the reference's tensor of the same global index */
    double wd = 0, wn = 0, sums[2] = {0}, all[2] = {0};
    int64_t covered = 0, total = 0;
    bool tied_same = true;
    /* the weights whole on every process (collective over each stage's data parallel group: every pipeline) */
    for (int s = 0; ok && s < col_lm_pipeline_n_stages(pp); s++)
        ok = col_lm_trainer_sync_params(col_lm_pipeline_stage(pp, s, NULL, NULL, NULL), &err) == COL_OK;
    for (int s = 0; ok && d == 0 && s < col_lm_pipeline_n_stages(pp); s++) {
        col_lm_trainer *t = col_lm_pipeline_stage(pp, s, NULL, NULL, NULL);
        int lo, hi;
        col_lm_pipeline_stage(pp, s, NULL, &lo, &hi);
        for (int i = 0; i < col_lm_trainer_n_params(t); i++) {
            const col_param_spec *sp, *rs;
            int gi = col_lm_trainer_global_index(t, i);
            const float *x = col_lm_trainer_param(t, i, &sp), *y = col_lm_trainer_param(ref, gi, &rs);
            int64_t n = col_param_numel(sp);
            ok = ok && strcmp(sp->name, rs->name) == 0 && n == col_param_numel(rs);
            bool dup = gi == 0 && lo > 0 && rc.model.tie_embeddings; /* the last stage's copy of the embedding */
            for (int64_t j = 0; ok && j < n && !dup; j++) {
                wd += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
                wn += (double)y[j] * y[j];
            }
            if (!dup)
                covered += n;
        }
    }
    /* the tied embedding's copies, bit for bit: the last stage's sent to rank 0 (first pipeline) */
    int S = P * (k->v ? k->v : 1);
    if (rc.model.tie_embeddings && S > 1 && d == 0 && (p == 0 || p == (S - 1) % P)) {
        col_lm_trainer *t = col_lm_pipeline_stage(pp, p == 0 ? 0 : col_lm_pipeline_n_stages(pp) - 1, NULL, NULL, NULL);
        int i = 0;
        while (p != 0 && i + 1 < col_lm_trainer_n_params(t) && col_lm_trainer_global_index(t, i) != 0)
            i++;
        const col_param_spec *sp;
        const float *x = ok ? col_lm_trainer_param(t, p == 0 ? 0 : i, &sp) : NULL;
        int n = x ? (int)col_param_numel(sp) : 0;
        if (p != 0) {
            MPI_Send(&n, 1, MPI_INT, 0, 5, MPI_COMM_WORLD);
            MPI_Send(x, n, MPI_FLOAT, 0, 6, MPI_COMM_WORLD);
        } else {
            int m = 0;
            MPI_Recv(&m, 1, MPI_INT, (S - 1) % P, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            float *y = malloc(sizeof(float) * (size_t)(m > 0 ? m : 1));
            MPI_Recv(y, m, MPI_FLOAT, (S - 1) % P, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            tied_same = m == n && n > 0 && memcmp(x, y, sizeof(float) * (size_t)n) == 0;
            free(y);
        }
    }
    sums[0] = wd, sums[1] = wn;
    MPI_Allreduce(sums, all, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int same = tied_same, all_same = 0;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    tied_same = all_same;
    MPI_Allreduce(&covered, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    double wrel = sqrt(all[0] / (all[1] > 0 ? all[1] : 1));
    int64_t want = col_lm_trainer_param_count(ref);
    snprintf(detail, sizeof detail, "weights %.2e, %lld of %lld elements, tied copies %s: %s", wrel,
             (long long)total, (long long)want, tied_same ? "equal" : "differ", err.msg);
    tl_mpi_check(ok && wrel <= 1e-5 && total == want && tied_same, detail,
                 "%s, %d processes: the stages' final weights are the whole model's once (%lld elements) and equal "
                 "one process's within 1e-05 (%.2e)%s", k->name, size, (long long)want, wrel,
                 rc.model.tie_embeddings ? ", the tied embedding's two copies alike" : "");
    free(ids), free(tg);
    col_lm_pipeline_free(pp);
    col_lm_trainer_free(ref);
    col_comm_free(dp);
    col_comm_free(pipe);
}

static void test_refused(void)
{
    pp_case k = {.name = "bad"};
    col_lm_pipeline_config pc = {.train = config(&k, BP, 0, NULL, 1.0f), .micro_batches = 4, .virtual_stages = 1};
    col_comm *pipe = NULL;
    col_err err = {0};
    col_comm_split(world, 0, rank, &pipe, &err);
    pc.pipe = pipe;
    col_lm_pipeline *pp = NULL;
    struct {
        int layers, v, M;
        const char *what;
    } bad[] = {{1, 1, 4, "at most one stage per layer"}, {4, 2, 3, "multiple of the pipeline"},
               {4, 1, 3, "equal micro-batches"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pc.train.model.n_layer = bad[i].layers;
        pc.virtual_stages = bad[i].v;
        pc.micro_batches = bad[i].M;
        if (size * bad[i].v <= bad[i].layers && i == 0)
            continue;
        col_status st = col_lm_pipeline_create(&pc, &be, &pp, &err);
        tl_mpi_check(st == COL_EINVAL && !pp && strstr(err.msg, bad[i].what) && !strchr(err.msg, '\n'), err.msg,
                     "a bad layout is refused with one line: %s", err.msg);
        col_lm_pipeline_free(pp);
        pp = NULL;
    }
    col_comm_free(pipe);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_cpu_backend_init(&be, &err) == COL_OK;
    if (!ok || 4 % size) {
        if (rank == 0)
            printf("Bail out! %s\n", ok ? "the world size must divide 4" : err.msg);
        MPI_Finalize();
        return 1;
    }
    static const pp_case cases[] = {
        {"GPT-2, 1F1B", false, 0, 1, 4, 0, 0},
        {"LLaMA, 1F1B", true, 0, 1, 4, 0, 0},
        {"GPT-2, interleaved (v=2) over 2 processes", false, 2, 2, 4, 0, 1},
        {"GPT-2, 1F1B, dropout 0.1", false, 0, 1, 4, 0.1f, 0},
        {"LLaMA, 1F1B, 2 stages x data parallel (ZeRO 2)", true, 2, 1, 4, 0, 2, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_refused();
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
