/* test_dp.c - data parallelism with ZeRO 1, 2 and 3 (models/lm/lm_dp.c),
 * under mpirun with 2, 3 and 4 processes (tests/test_dp.sh).
 *
 * The reference is one process: every rank also runs the same session on the
 * whole global batch (cfg.dp NULL) and compares, step by step, the loss of
 * its data parallel session (its share of the rows, cfg.batch = B / world)
 * and at the end every weight, and the optimizer states of the span it owns.
 * Targets hold -1s unevenly over the rows, so the weighting of each
 * process's loss by its share of the counted targets is needed to match.
 * Dropout is off: each process draws its own masks (as torch's DDP does), not
 * the ones one process would draw for those rows.
 *
 * Weights are compared as one vector, ||w_dp - w_1|| / ||w_1||: a tensor
 * whose true gradient is zero (the key part of GPT-2's c_attn bias: softmax
 * ignores a shift shared by all keys) gets rounding noise as its gradient,
 * which AdamW scales up to steps of the learning rate's size, so its
 * elements differ at the 1e-4 level between any two summation orders. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "comm.h"
#include "hf_config.h"
#include "lm_trainer.h"
#include "memtier.h"
#include "rng.h"
#include "testlib.h"
#include "mpi_testutil.h"

enum { B = 12, T = 8, V = 97, STEPS = 10 };

static col_backend be;
static col_comm *world;
static int rank, size;

typedef struct {
    const char *name;
    int zero, accum;
    col_opt_kind opt;
    float momentum;
    col_dtype dt;
    int lora;
    bool nvme;
    double tol;          /* relative tolerance of losses and weights */
} dp_case;

static col_lm_train_config config(const dp_case *k, int rows, col_comm *dp, const char *nvme_dir)
{
    col_lm_train_config c = {
        .model = col_gpt2_config(V, 16, 32, 2, 4),
        .batch = rows, .seq = T,
        .opt = col_opt_defaults(k->opt),
        .lr = {.kind = COL_LR_CONSTANT, .lr_max = 3e-3f},
        .grad_clip = 1.0f, .seed = 11,
        .grad_accum = k->accum,
        .chunk_bytes = 8 << 10,
        .compute_dtype = k->dt,
        .dp = dp, .zero = k->zero,
        .nvme_dir = nvme_dir, .nvme_kinds = nvme_dir ? COL_LM_STATES : 0,
    };
    c.model.dropout = 0;
    c.opt.momentum = k->momentum;
    if (k->lora) {
        c.lora.rank = k->lora;
        c.lora.alpha = 16;
    }
    return c;
}

/* the global batch of step s: accum micro-batches of B rows; about a quarter of the targets ignored, more in
 * later rows so that the processes' counts differ */
static void batch(int s, int na, int32_t *ids, int32_t *tg)
{
    col_rng r;
    col_rng_init(&r, 1000 + (uint64_t)s);
    for (int i = 0; i < na * B * T; i++) {
        int row = (i / T) % B;
        ids[i] = (int32_t)col_rng_below(&r, V);
        tg[i] = col_rng_below(&r, 100) < (uint64_t)(5 + 5 * row) ? -1 : (int32_t)col_rng_below(&r, V);
    }
}

/* this rank's rows of each micro-batch */
static void share(int na, const int32_t *all, int32_t *mine)
{
    int rows = B / size;
    for (int k = 0; k < na; k++)
        memcpy(mine + (size_t)k * rows * T, all + ((size_t)k * B + (size_t)rank * rows) * T,
               sizeof(int32_t) * (size_t)rows * T);
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }

/* ||x - y|| / ||y|| over n floats */
static double rel_norm(const float *x, const float *y, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t j = 0; j < n; j++) {
        d += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
        s += (double)y[j] * y[j];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* the weights as the graphs see them, in f32 (16-bit ones widened) */
static void weights_f32(col_lm_trainer *t, int i, float *out, int64_t n)
{
    col_dtype dt;
    void *w = col_lm_trainer_weights(t, i, &dt);
    col_convert(out, COL_F32, w, dt, n);
}

static void run_case(const dp_case *k)
{
    char detail[800] = "", ndir[64] = "", rdir[64] = "";
    col_err err = {0};
    int na = k->accum > 1 ? k->accum : 1, rows = B / size;
    if (k->nvme) {
        snprintf(ndir, sizeof ndir, "/tmp/col_dp_nvme_XXXXXX");
        snprintf(rdir, sizeof rdir, "/tmp/col_dp_nvme_XXXXXX");
        if (!mkdtemp(ndir) || !mkdtemp(rdir))
            snprintf(detail, sizeof detail, "mkdtemp failed");
    }
    col_lm_train_config rc = config(k, B, NULL, k->nvme ? rdir : NULL), dc = config(k, rows, world, k->nvme ? ndir : NULL);
    col_lm_trainer *ref = NULL, *dp = NULL;
    bool ok = !detail[0] && col_lm_trainer_create(&rc, &be, &ref, &err) == COL_OK &&
              col_lm_trainer_create(&dc, &be, &dp, &err) == COL_OK;
    if (!ok && !detail[0])
        snprintf(detail, sizeof detail, "create: %s", err.msg);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)na * B * T), *tg = malloc(sizeof(int32_t) * (size_t)na * B * T);
    int32_t *mi = malloc(sizeof(int32_t) * (size_t)na * B * T), *mt = malloc(sizeof(int32_t) * (size_t)na * B * T);
    double worst_loss = 0;
    float l_ref = 0, l_dp = 0;
    for (int s = 0; s < STEPS && ok; s++) {
        col_lm_step_info a, b;
        batch(s, na, ids, tg);
        share(na, ids, mi);
        share(na, tg, mt);
        ok = col_lm_trainer_step(ref, ids, tg, &a, &err) == COL_OK && col_lm_trainer_step(dp, mi, mt, &b, &err) == COL_OK;
        if (!ok) {
            snprintf(detail, sizeof detail, "step %d: %s", s, err.msg);
            break;
        }
        double r = rel(b.loss, a.loss) + rel(b.grad_norm, a.grad_norm);
        worst_loss = r > worst_loss ? r : worst_loss;
        l_ref = a.loss, l_dp = b.loss;
    }
    tl_mpi_check(ok && worst_loss <= k->tol, detail[0] ? detail : "losses differ",
                 "%s, %d processes: %d steps' losses and gradient norms equal one process's on all %d rows within "
                 "%.0e (worst %.2e; last %.6f vs %.6f)", k->name, size, STEPS, B, k->tol, worst_loss, l_dp, l_ref);
    /* every weight, and the states of the span this process owns */
    double worst_w = 0, worst_s = 0, wd = 0, wn = 0;
    int64_t spans = 0;
    if (ok && (ok = col_lm_trainer_sync_params(dp, &err) == COL_OK &&
                    col_lm_trainer_host_begin(ref, COL_LM_STATES, &err) == COL_OK &&
                    col_lm_trainer_host_begin(dp, COL_LM_STATES, &err) == COL_OK)) {
        for (int i = 0; i < col_lm_trainer_n_params(ref); i++) {
            const col_param_spec *sp;
            col_lm_trainer_param(ref, i, &sp);
            int64_t n = col_param_numel(sp), off, sn = col_lm_trainer_span(dp, i, &off);
            float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
            weights_f32(dp, i, x, n);
            weights_f32(ref, i, y, n);
            for (int64_t j = 0; j < n; j++) {
                wd += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
                wn += (double)y[j] * y[j];
            }
            free(x), free(y);
            spans += sn;
            for (int slot = 0; slot < 2 && sn > 0; slot++) {
                const float *ms = col_lm_trainer_state(dp, i, slot), *mr = col_lm_trainer_state(ref, i, slot);
                if (ms && mr) {
                    double q = rel_norm(ms, mr + off, sn);
                    worst_s = q > worst_s ? q : worst_s;
                }
            }
        }
        col_lm_trainer_host_end(ref, false, &err);
        col_lm_trainer_host_end(dp, false, &err);
        worst_w = sqrt(wd / wn);
    }
    int64_t all_spans = 0, trained = col_lm_trainer_trainable_count(ref);
    MPI_Allreduce(&spans, &all_spans, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    snprintf(detail, sizeof detail, "weights %.2e states %.2e spans %lld of %lld: %s", worst_w, worst_s,
             (long long)all_spans, (long long)trained, err.msg);
    tl_mpi_check(ok && worst_w <= k->tol && worst_s <= 100 * k->tol && all_spans == trained, detail,
                 "%s, %d processes: final weights within %.0e (%.2e), owned optimizer states within %.0e (%.2e), "
                 "the spans cover the %lld trained elements once", k->name, size, k->tol, worst_w, 100 * k->tol,
                 worst_s, (long long)trained);
    if (ok) {
        mt_pool_stats a, b;
        mt_stats(col_lm_trainer_pool(ref), &a);
        mt_stats(col_lm_trainer_pool(dp), &b);
        int64_t mine = (int64_t)b.tensor_bytes[MT_OPTSTATE], sum = 0;
        MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        tl_mpi_check(sum == (int64_t)a.tensor_bytes[MT_OPTSTATE], "",
                     "%s, %d processes: the processes' optimizer states (this one %lld bytes) add up to one process's "
                     "%zu bytes", k->name, size, (long long)mine, a.tensor_bytes[MT_OPTSTATE]);
    }
    /* evaluation: the mean over every process's rows */
    if (ok) {
        float e_ref = 0, e_dp = 0;
        batch(STEPS, 1, ids, tg);
        share(1, ids, mi);
        share(1, tg, mt);
        col_lm_train_config c1 = *col_lm_trainer_config(ref);
        ok = c1.grad_accum <= 1 && col_lm_trainer_eval(ref, ids, tg, &e_ref, NULL, &err) == COL_OK &&
             col_lm_trainer_eval(dp, mi, mt, &e_dp, NULL, &err) == COL_OK;
        if (c1.grad_accum <= 1)
            tl_mpi_check(ok && rel(e_dp, e_ref) <= k->tol, err.msg,
                         "%s, %d processes: evaluation loss %.6f = one process's %.6f", k->name, size, e_dp, e_ref);
    }
    free(ids), free(tg), free(mi), free(mt);
    col_lm_trainer_free(ref);
    col_lm_trainer_free(dp);
    if (k->nvme) {
        rmdir(ndir);
        rmdir(rdir);
    }
}

/* a whole file in memory (NULL on failure) */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    *n = buf ? (size_t)len : 0;
    return buf;
}

/* a safetensors file's header (the 8-byte length and the JSON: names, dtypes, shapes, offsets) */
static size_t header_len(const char *buf, size_t n)
{
    uint64_t h = 0;
    if (n < 8)
        return 0;
    memcpy(&h, buf, 8);
    return h <= n - 8 ? 8 + (size_t)h : 0;
}

static bool same_header(const char *a, size_t na, const char *b, size_t nb)
{
    size_t ha = header_len(a, na), hb = header_len(b, nb);
    return ha && ha == hb && na == nb && memcmp(a, b, ha) == 0;
}

static bool run_steps(col_lm_trainer *t, int from, int to, bool mine, float *loss, col_err *err)
{
    int32_t ids[B * T], tg[B * T], mi[B * T], mt[B * T];
    for (int s = from; s < to; s++) {
        col_lm_step_info info;
        batch(s, 1, ids, tg);
        share(1, ids, mi);
        share(1, tg, mt);
        if (col_lm_trainer_step(t, mine ? mi : ids, mine ? mt : tg, &info, err) != COL_OK)
            return false;
        loss[s] = info.loss;
    }
    return true;
}

/* ZeRO 3 saves one Hugging Face directory and one optimizer file, as one process would: the same tensors in
 * the same layout, holding the run's own weights; a run resumed from them with the same layout continues
 * bit for bit, and one process can resume from them too. */
static void test_checkpoint(void)
{
    enum { HALF = 4, ALL = 8 };
    dp_case k = {.name = "save", .zero = 3, .opt = COL_OPT_ADAMW};
    char dir[2][64] = {"/tmp/col_dp_save_XXXXXX", "/tmp/col_dp_one_XXXXXX"}, detail[800] = "";
    if (rank == 0 && (!mkdtemp(dir[0]) || !mkdtemp(dir[1])))
        snprintf(detail, sizeof detail, "mkdtemp failed");
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    col_lm_train_config dc = config(&k, B / size, world, NULL), rc = config(&k, B, NULL, NULL);
    col_lm_trainer *dp = NULL, *ref = NULL, *again = NULL, *one = NULL;
    col_err err = {0};
    float l_dp[ALL], l_ref[ALL], l_again[ALL], l_one[ALL];
    bool ok = !detail[0] && col_lm_trainer_create(&dc, &be, &dp, &err) == COL_OK &&
              col_lm_trainer_create(&rc, &be, &ref, &err) == COL_OK && run_steps(dp, 0, HALF, true, l_dp, &err) &&
              run_steps(ref, 0, HALF, false, l_ref, &err) && col_lm_trainer_save_model(dp, dir[0], &err) == COL_OK &&
              col_lm_trainer_save_optimizer(dp, dir[0], &err) == COL_OK;
    if (ok && rank == 0)
        ok = col_lm_trainer_save_model(ref, dir[1], &err) == COL_OK &&
             col_lm_trainer_save_optimizer(ref, dir[1], &err) == COL_OK;
    ok = tl_mpi_check(ok, err.msg, "ZeRO 3, %d processes: %d steps, then the model and optimizer state saved", size,
                      HALF);
    /* the files: one process's layout, the run's own weights */
    if (rank == 0 && ok) {
        const char *files[] = {"model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++) {
            char pa[128], pb[128];
            size_t na, nb;
            snprintf(pa, sizeof pa, "%s/%s", dir[0], files[f]);
            snprintf(pb, sizeof pb, "%s/%s", dir[1], files[f]);
            char *a = slurp(pa, &na), *b = slurp(pb, &nb);
            if (!a || !b || !same_header(a, na, b, nb))
                ok = false, snprintf(detail, sizeof detail, "%s: layout differs from one process's", files[f]);
            free(a), free(b);
        }
    }
    ok = tl_mpi_check(ok, detail, "ZeRO 3, %d processes: model.safetensors and optimizer.safetensors have one "
                      "process's tensors and layout", size);
    /* what the model file holds: the run's weights, bit for bit */
    col_ckpt *ck = NULL;
    if (ok && (ok = col_lm_trainer_sync_params(dp, &err) == COL_OK) && rank == 0) {
        col_lm_trainer *chk = NULL;
        ok = col_lm_trainer_create(&rc, &be, &chk, &err) == COL_OK && col_ckpt_open(dir[0], &ck, &err) == COL_OK &&
             col_lm_trainer_load(chk, ck, &err) == COL_OK;
        for (int i = 0; ok && i < col_lm_trainer_n_params(dp); i++) {
            const col_param_spec *sp;
            const float *w = col_lm_trainer_param(dp, i, &sp);
            ok = memcmp(w, col_lm_trainer_param(chk, i, NULL), sizeof(float) * (size_t)col_param_numel(sp)) == 0;
            if (!ok)
                snprintf(err.msg, sizeof err.msg, "%s differs", sp->name);
        }
        col_ckpt_close(ck);
        ck = NULL;
        col_lm_trainer_free(chk);
    }
    ok = tl_mpi_check(ok, err.msg, "ZeRO 3, %d processes: the saved model holds the run's weights bit for bit", size);
    /* resumed with the same layout: the run that never stopped, bit for bit */
    bool resumed = ok && col_lm_trainer_create(&dc, &be, &again, &err) == COL_OK &&
                   col_ckpt_open(dir[0], &ck, &err) == COL_OK && col_lm_trainer_load(again, ck, &err) == COL_OK &&
                   col_lm_trainer_load_optimizer(again, dir[0], &err) == COL_OK;
    col_ckpt_close(ck);
    ck = NULL;
    resumed = resumed && run_steps(dp, HALF, ALL, true, l_dp, &err) && run_steps(again, HALF, ALL, true, l_again, &err);
    resumed = tl_mpi_check(resumed && memcmp(l_dp + HALF, l_again + HALF, sizeof(float) * (ALL - HALF)) == 0, err.msg,
                 "ZeRO 3, %d processes: resumed from the saved directory, steps %d..%d give bitwise the same losses "
                 "(%.7f ...)", size, HALF + 1, ALL, resumed ? l_again[ALL - 1] : 0.0);
    /* one process resumes from the data parallel run's files */
    bool single = resumed && col_lm_trainer_create(&rc, &be, &one, &err) == COL_OK &&
                  col_ckpt_open(dir[0], &ck, &err) == COL_OK && col_lm_trainer_load(one, ck, &err) == COL_OK &&
                  col_lm_trainer_load_optimizer(one, dir[0], &err) == COL_OK &&
                  run_steps(one, HALF, ALL, false, l_one, &err);
    col_ckpt_close(ck);
    double worst = 0;
    for (int s = HALF; single && s < ALL; s++)
        worst = fmax(worst, rel(l_one[s], l_dp[s]));
    tl_mpi_check(single && worst <= 1e-5, err.msg, "one process resumes from the %d-process run's files: steps %d..%d "
                 "within 1e-05 of the run's (worst %.2e)", size, HALF + 1, ALL, worst);
    col_lm_trainer_free(dp);
    col_lm_trainer_free(ref);
    col_lm_trainer_free(again);
    col_lm_trainer_free(one);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        for (int d = 0; d < 2; d++) {
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir[d]);
            if (system(cmd) != 0)
                TL_NOTE("could not remove %s", dir[d]);
        }
}

static void test_refused(void)
{
    dp_case k = {.name = "lamb", .zero = 2, .opt = COL_OPT_LAMB};
    col_lm_train_config c = config(&k, B / size, world, NULL);
    col_lm_trainer *t = NULL;
    col_err err = {0};
    col_status st = col_lm_trainer_create(&c, &be, &t, &err);
    tl_mpi_check(st == COL_EUNSUPPORTED && strstr(err.msg, "lamb"), err.msg,
                 "LAMB with several processes is refused with a reason: %s", err.msg);
    col_lm_trainer_free(t);
    c.opt = col_opt_defaults(COL_OPT_ADAMW);
    c.zero = 4;
    st = col_lm_trainer_create(&c, &be, &t, &err);
    tl_mpi_check(st == COL_EINVAL && strstr(err.msg, "ZeRO stage 4"), err.msg, "ZeRO stage 4 is refused: %s", err.msg);
    col_lm_trainer_free(t);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_cpu_backend_init(&be, &err) == COL_OK;
    if (!ok || B % size) {
        if (rank == 0)
            printf("Bail out! %s\n", ok ? "the world size must divide 12" : err.msg);
        MPI_Finalize();
        return 1;
    }
    static const dp_case cases[] = {
        {"ZeRO 1, AdamW", 1, 1, COL_OPT_ADAMW, 0, COL_F32, 0, false, 1e-5},
        {"ZeRO 2, AdamW, 2 accumulated micro-batches", 2, 2, COL_OPT_ADAMW, 0, COL_F32, 0, false, 1e-5},
        {"ZeRO 3, AdamW", 3, 1, COL_OPT_ADAMW, 0, COL_F32, 0, false, 1e-5},
        {"ZeRO 3, SGD with momentum, 2 micro-batches", 3, 2, COL_OPT_SGD, 0.9f, COL_F32, 0, false, 1e-5},
        {"ZeRO 2, plain SGD (no states)", 2, 1, COL_OPT_SGD, 0, COL_F32, 0, false, 1e-5},
        {"ZeRO 2, LoRA rank 4", 2, 1, COL_OPT_ADAMW, 0, COL_F32, 4, false, 1e-5},
        {"ZeRO 2, states on the NVMe tier", 2, 1, COL_OPT_ADAMW, 0, COL_F32, 0, true, 1e-5},
        {"ZeRO 3, bf16 mixed precision", 3, 1, COL_OPT_ADAMW, 0, COL_BF16, 0, false, 2e-2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_checkpoint();
    test_refused();
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
